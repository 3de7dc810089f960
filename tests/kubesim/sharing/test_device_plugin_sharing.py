"""kubesim's device plugin with time-slicing and MPS configs (issue 26): replicas advertised,
GFD labels, failRequestsGreaterThanOne, several pods on one GPU and what dcgm-exporter shows."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from kubesim.testing import wait_for

pytestmark = pytest.mark.kubesim

KUBESIM_OPTIONS = {"cluster": Path(__file__).with_name("cluster.yaml"), "speed": 50.0}
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture(scope="module")
def core(kubesim_module):
    api = kubesim_module.api_client()
    yield client.CoreV1Api(api)
    api.close()


def pod(core, namespace, name, node, limits, command=("python", "train.py")):
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "tolerations": TOLERATE,
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [
                    {
                        "name": "trainer",
                        "image": "pytorch/pytorch:2.4.0",
                        "command": list(command),
                        "resources": {"limits": limits},
                    }
                ],
            },
        },
    )


def phase(core, namespace, name):
    return core.read_namespaced_pod(name, namespace).status.phase


def test_nodes_advertise_replicas_and_gfd_labels(core):
    ts = core.read_node("ts-0")
    assert ts.status.allocatable["nvidia.com/gpu"] == "4"  # 1 GPU × 4 replicas
    labels = ts.metadata.labels
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert labels["nvidia.com/gpu.count"] == "1"  # physical GPUs
    assert labels["nvidia.com/device-plugin.config"] == "gp-ts"
    mps = core.read_node("mps-0").metadata.labels
    assert mps["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert mps["nvidia.com/mps.capable"] == "true"
    renamed = core.read_node("renamed-0").status.allocatable
    assert renamed["nvidia.com/gpu.shared"] == "2"
    assert renamed["nvidia.com/gpu"] == "0"
    assert core.read_node("renamed-0").metadata.labels["nvidia.com/gpu.product"] == "Tesla-T4"


def test_four_pods_share_one_gpu_and_the_exporter_names_one_of_them(core, kubesim_module):
    ns = "ts-share"
    core.create_namespace({"metadata": {"name": ns}})
    for i in range(5):
        pod(core, ns, f"p{i}", "ts-0", {"nvidia.com/gpu": 1})
    wait_for(
        lambda: all(phase(core, ns, f"p{i}") == "Running" for i in range(4)),
        timeout=30,
        message="four pods to run on the time-sliced GPU",
    )
    assert phase(core, ns, "p4") == "Pending"  # the fifth replica does not exist
    pods = [core.read_namespaced_pod(f"p{i}", ns) for i in range(4)]
    uuids = {p.metadata.annotations["kubesim.dev/gpu-uuids"] for p in pods}
    assert len(uuids) == 1
    assert next(iter(uuids)).startswith("GPU-")
    (gpu_uuid,) = uuids
    dcgm = next(
        p.metadata.name
        for p in core.list_namespaced_pod("gpu-operator").items
        if p.spec.node_name == "ts-0"
    )
    text = core.connect_get_namespaced_pod_proxy_with_path(
        dcgm + ":9400", "gpu-operator", "metrics", _preload_content=False
    ).data.decode()
    util = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    # one series for the physical GPU, labelled with only one of the four pods (the last one
    # in the kubelet's pod-resources list)
    assert len(util) == 1
    assert f'UUID="{gpu_uuid}"' in util[0]
    assert 'pod="p3"' in util[0]
    # the fifth runs once one share is free
    core.delete_namespaced_pod("p0", ns, grace_period_seconds=0)
    wait_for(lambda: phase(core, ns, "p4") == "Running", timeout=30, message="p4 to run")


def test_mps_refuses_two_replicas_and_sets_the_limits(core):
    ns = "mps-share"
    core.create_namespace({"metadata": {"name": ns}})
    pod(core, ns, "two", "mps-0", {"nvidia.com/gpu": 2})
    wait_for(lambda: phase(core, ns, "two") == "Failed", timeout=30, message="admission error")
    status = core.read_namespaced_pod("two", ns).status
    assert status.reason == "UnexpectedAdmissionError"
    assert "maximum request size for shared resources is 1" in status.message
    core.delete_namespaced_pod("two", ns, grace_period_seconds=0)
    pod(core, ns, "one", "mps-0", {"nvidia.com/gpu": 1})
    wait_for(lambda: phase(core, ns, "one") == "Running", timeout=30, message="one to run")
    import json

    limits = json.loads(
        core.read_namespaced_pod("one", ns).metadata.annotations["kubesim.dev/mps-limits"]
    )
    assert limits["activeThreadPercentage"] == 50
    assert list(limits["pinnedDeviceMemoryLimit"].values()) == ["20480M"]  # 40960 MiB / 2


def test_virtual_gpus_give_each_pod_a_copy_with_the_same_values(kubesim_factory, tmp_path):
    """KUBERNETES_VIRTUAL_GPUS=true: one series per sharing pod, labelled vgpu=<replica>, with
    duplicated device-level values (exporters before 4.5.3 do not split a GPU)."""
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        "pools:\n"
        "  - {name: ts, count: 1, gpu: {model: Tesla-T4, count: 1,"
        " sharing: {strategy: time-slicing, replicas: 2}}}\n"
        "dcgmExporter: {kubernetesVirtualGpus: true}\n"
    )
    server = kubesim_factory(cluster=spec, speed=50.0)
    api = server.api_client()
    core = client.CoreV1Api(api)
    try:
        ns = "vgpu"
        core.create_namespace({"metadata": {"name": ns}})
        for name in ("a", "b"):
            pod(core, ns, name, "ts-0", {"nvidia.com/gpu": 1})
        wait_for(
            lambda: all(phase(core, ns, n) == "Running" for n in ("a", "b")),
            timeout=30,
            message="both pods to run",
        )
        (exporter,) = core.list_namespaced_pod("gpu-operator").items
        text = core.connect_get_namespaced_pod_proxy_with_path(
            exporter.metadata.name + ":9400", "gpu-operator", "metrics", _preload_content=False
        ).data.decode()
        temps = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
        assert len(temps) == 2
        assert {'pod="a"' in t or 'pod="b"' in t for t in temps} == {True}
        assert {line.split('vgpu="')[1][0] for line in temps} == {"0", "1"}
        assert len({line.rsplit(" ", 1)[1] for line in temps}) == 1  # the same value
    finally:
        api.close()
