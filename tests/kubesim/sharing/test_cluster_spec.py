"""The cluster description's sharing and DRA options (pure: no server)."""

from __future__ import annotations

import pytest
from kubesim.cluster import ClusterSpecError, parse_cluster


def spec(gpu):
    return {"pools": [{"name": "p", "count": 1, "gpu": {"model": "NVIDIA-A100-SXM4-40GB", **gpu}}]}


@pytest.mark.parametrize(
    ("gpu", "words"),
    [
        ({"sharing": {"strategy": "time-slicing", "replicas": 1}}, "replicas must be >= 2"),
        ({"sharing": {"strategy": "round-robin", "replicas": 2}}, "time-slicing or mps"),
        (
            {
                "sharing": {"strategy": "mps", "replicas": 2},
                "mig": {"strategy": "mixed", "layout": [{"gpus": "0", "profiles": ["7g.40gb"]}]},
            },
            "MPS is not supported for MIG devices",
        ),
        (
            {"sharing": {"strategy": "mps", "replicas": 2}, "dra": True},
            "cannot serve the same GPUs",
        ),
    ],
)
def test_bad_sharing_is_refused_naming_the_field(gpu, words):
    with pytest.raises(ClusterSpecError, match=words):
        parse_cluster(spec(gpu))


def test_shared_devices_are_replicas_of_the_physical_gpus():
    cluster = parse_cluster(spec({"count": 2, "sharing": {"strategy": "mps", "replicas": 3}}))
    (node,) = cluster.nodes
    assert node.sharing.fail_requests_greater_than_one  # the MPS default since plugin v0.20.0
    devices = node.devices
    assert len(devices) == 6
    assert devices[0].uuid == devices[0].device_uuid + "::0"
    assert {d.device_uuid for d in devices} == {g.uuid for g in node.gpus}


def test_dra_nodes_advertise_no_device_plugin_gpus():
    cluster = parse_cluster(spec({"count": 2, "dra": True}))
    assert cluster.nodes[0].devices == []
    assert len(cluster.nodes[0].physical_devices) == 2
