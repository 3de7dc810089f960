"""The cluster description, MIG geometry and node objects (pure functions, no server)."""

from __future__ import annotations

import itertools

import pytest

from kubesim import cluster, hardware

H100 = "NVIDIA-H100-80GB-HBM3"


def test_default_cluster_has_the_documented_shape():
    spec = cluster.default_cluster()
    by_pool = {}
    for node in spec.nodes:
        by_pool.setdefault(node.pool, []).append(node)
    assert [n.name for n in spec.nodes][:4] == [
        "gpu-h100-0",
        "gpu-h100-1",
        "gpu-h100-2",
        "gpu-h100-mig-0",
    ]
    assert sum(len(v) for k, v in by_pool.items() if k.startswith("gpu-h100")) == 4
    assert len(by_pool["gpu-a100"]) == 2
    assert len(by_pool["cpu"]) == 2
    mig = spec.node("gpu-h100-mig-0")
    capacity, allocatable = cluster.node_resources(mig, spec)
    assert capacity["nvidia.com/gpu"] == "2"
    assert capacity["nvidia.com/mig-1g.10gb"] == "28"
    assert capacity["nvidia.com/mig-2g.20gb"] == "6"
    assert allocatable == capacity
    assert "nvidia.com/gpu" not in cluster.node_resources(spec.node("cpu-0"), spec)[0]


def test_gpu_and_mig_uuids_are_stable_and_distinct():
    first = cluster.default_cluster()
    second = cluster.default_cluster()
    uuids = [d.uuid for n in first.nodes for d in n.devices]
    assert uuids == [d.uuid for n in second.nodes for d in n.devices]
    assert len(set(uuids)) == len(uuids)
    mig = first.node("gpu-h100-mig-0")
    assert all(d.uuid.startswith("MIG-") for d in mig.gpus[0].instances)
    assert mig.gpus[6].uuid.startswith("GPU-")
    # 1g.10gb instances on the eighth-slices get GI IDs 7..13, 2g.20gb ones 3..5
    assert [d.gi_id for d in mig.gpus[0].instances] == list(range(7, 14))
    assert [d.gi_id for d in mig.gpus[4].instances] == [3, 4, 5]


def test_gfd_labels_of_a_mixed_mig_node():
    spec = cluster.default_cluster()
    labels = cluster.gfd_labels(spec.node("gpu-h100-mig-0"), spec, 1700000000)
    assert labels["nvidia.com/gpu.product"] == H100
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "28"
    assert labels["nvidia.com/mig-1g.10gb.memory"] == "9984"
    assert labels["nvidia.com/mig-2g.20gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-2g.20gb"
    plain = cluster.gfd_labels(spec.node("gpu-a100-0"), spec, 0)
    assert "nvidia.com/mig.strategy" not in plain
    assert plain["nvidia.com/gpu.family"] == "ampere"


@pytest.mark.parametrize(
    ("profiles", "fits"),
    [
        (["1g.10gb"] * 7, True),
        (["1g.10gb"] * 8, False),
        (["3g.40gb", "3g.40gb"], True),
        (["3g.40gb", "3g.40gb", "1g.10gb"], False),
        (["4g.40gb", "3g.40gb"], True),
        (["2g.20gb"] * 3 + ["1g.10gb"], True),
        (["1g.20gb"] * 4, True),
        (["1g.20gb"] * 4 + ["1g.10gb"], False),
        (["1g.10gb+me", "1g.10gb+me"], False),
        (["7g.80gb"], True),
        (["7g.80gb", "1g.10gb"], False),
    ],
)
def test_mig_layouts_follow_the_memory_slice_placements(profiles, fits):
    model = hardware.model(H100)
    if fits:
        placed = hardware.place_profiles(model, profiles)
        spans = sorted((s, s + p.memory_slices) for p, s in placed)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    else:
        with pytest.raises(ValueError, match=r"fit|compute slices|\+me"):
            hardware.place_profiles(model, profiles)


def test_profile_names_depend_on_the_model():
    with pytest.raises(ValueError, match=r"'1g\.5gb' does not exist on NVIDIA-H100-80GB-HBM3"):
        hardware.place_profiles(hardware.model(H100), ["1g.5gb"])
    assert hardware.place_profiles(hardware.model("NVIDIA-A100-SXM4-40GB"), ["1g.5gb"] * 7)


def _pool(**gpu):
    return {"pools": [{"name": "p", "count": 1, "gpu": {"model": H100, "count": 8, **gpu}}]}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"pools": []}, "pools: a non-empty list"),
        (
            {"pools": [{"name": "p", "gpu": {"model": "GTX-1080"}}]},
            "pools\\[0\\].gpu.model: unknown GPU model",
        ),
        (
            _pool(mig={"layout": [{"gpus": "0", "profiles": {"3g.40gb": 3}}]}),
            "pools\\[0\\].gpu.mig.layout\\[0\\].profiles: .*9 compute slices",
        ),
        (
            _pool(mig={"layout": [{"gpus": "0-8", "profiles": {"1g.10gb": 1}}]}),
            "GPU 8 does not exist",
        ),
        (
            _pool(mig={"layout": [{"gpus": "0", "profiles": {"1g.5gb": 1}}]}),
            "MIG profile '1g.5gb' does not exist on NVIDIA-H100-80GB-HBM3",
        ),
        (
            {"pools": [{"name": "p", "cpu": "lots"}]},
            "pools\\[0\\].cpu: 'lots' is not a quantity",
        ),
        (
            {"pools": [{"name": "p", "gpu": {"model": "Tesla-T4", "mig": {"layout": []}}}]},
            "does not support MIG",
        ),
    ],
)
def test_invalid_cluster_descriptions_name_the_field(data, message):
    with pytest.raises(cluster.ClusterSpecError, match=message):
        cluster.parse_cluster(data)


def test_custom_pool_with_taints_labels_and_mig_list(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(
        """
pools:
  - name: lab
    count: 2
    cpu: "32"
    memory: 128Gi
    labels: {topology.kubernetes.io/zone: z1}
    taints: [{key: dedicated, value: lab, effect: NoSchedule}]
    gpu:
      model: NVIDIA-A100-SXM4-40GB
      count: 4
      mig:
        strategy: mixed
        layout:
          - gpus: [0, 1]
            profiles: ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]
"""
    )
    spec = cluster.load_cluster(path)
    assert [n.name for n in spec.nodes] == ["lab-0", "lab-1"]
    node = spec.nodes[0]
    capacity, _ = cluster.node_resources(node, spec)
    assert capacity["nvidia.com/gpu"] == "2"
    assert capacity["nvidia.com/mig-3g.20gb"] == "2"
    assert capacity["nvidia.com/mig-1g.5gb"] == "4"
    obj = cluster.node_object(node, spec, "2026-01-01T00:00:00Z", 0)
    assert obj["spec"]["taints"] == [{"key": "dedicated", "value": "lab", "effect": "NoSchedule"}]
    assert obj["metadata"]["labels"]["topology.kubernetes.io/zone"] == "z1"
    assert obj["status"]["capacity"]["memory"] == f"{128 * 1024 * 1024}Ki"
