"""Pure parts of the cluster map: reading a Node, choosing its pool, marking holders."""

import json

from jobs.console.cluster_map import (
    OTHER_POOL,
    Holder,
    PodHold,
    PoolSelector,
    build_cluster_map,
    pool_of,
)
from portal.kube.nodes import node_info

H100 = "NVIDIA-H100-80GB-HBM3"


def node(name, labels, *, annotation=None, capacity=None, ready="True", unschedulable=False):
    meta = {"name": name, "labels": labels}
    if annotation is not None:
        meta["annotations"] = {"kubesim.dev/gpus": json.dumps(annotation)}
    return {
        "metadata": meta,
        "spec": {"unschedulable": unschedulable},
        "status": {
            "capacity": capacity or {},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def test_node_inventory_from_the_annotation_keeps_uuids_and_mig_slices():
    info = node_info(
        node(
            "n1",
            {"nvidia.com/gpu.product": H100},
            annotation=[
                {
                    "index": 1,
                    "uuid": "GPU-b",
                    "model": "H100",
                    "migEnabled": True,
                    "migDevices": [
                        {"uuid": "MIG-1", "profile": "3g.40gb"},
                        {"uuid": "MIG-2", "profile": "1g.10gb"},
                    ],
                },
                {"index": 0, "uuid": "GPU-a", "model": "H100", "migEnabled": False},
            ],
        )
    )
    assert [g.uuid for g in info.gpus] == ["GPU-a", "GPU-b"]  # by index
    assert [s.profile for s in info.gpus[1].mig] == ["3g.40gb", "1g.10gb"]
    assert info.ready
    assert not info.unschedulable


def test_node_inventory_without_the_annotation_comes_from_capacity():
    info = node_info(
        node(
            "real-1",
            {"nvidia.com/gpu.product": H100},
            capacity={"nvidia.com/gpu": "2", "nvidia.com/mig-1g.10gb": "3", "cpu": "64"},
            ready="False",
            unschedulable=True,
        )
    )
    assert [(g.index, g.uuid, len(g.mig)) for g in info.gpus] == [
        (0, "", 0),
        (1, "", 0),
        (2, "", 3),
    ]
    assert not info.ready
    assert info.unschedulable
    assert node_info(node("cpu-1", {}, capacity={"cpu": "64"})).gpus == ()


def test_the_most_specific_pool_wins():
    whole = PoolSelector("h100", "H100", H100, {"nvidia.com/gpu.product": H100})
    mig = PoolSelector(
        "h100-mig", "H100 MIG", H100, {"nvidia.com/gpu.product": H100, "pool": "mig"}
    )
    assert pool_of(node_info(node("a", {"nvidia.com/gpu.product": H100})), [whole, mig]) == whole
    both = node_info(node("b", {"nvidia.com/gpu.product": H100, "pool": "mig"}))
    assert pool_of(both, [whole, mig]) == mig
    assert pool_of(node_info(node("c", {"nvidia.com/gpu.product": "A100"})), [whole, mig]) is None


def test_holders_by_uuid_or_by_index_and_foreign_ones_stay_anonymous():
    nodes = [
        node_info(
            node(
                "n1",
                {"p": "1"},
                annotation=[
                    {"index": 0, "uuid": "GPU-a", "migEnabled": False},
                    {
                        "index": 1,
                        "uuid": "GPU-b",
                        "migEnabled": True,
                        "migDevices": [{"uuid": "MIG-x", "profile": "1g.10gb"}],
                    },
                ],
            )
        ),
        node_info(node("n2", {}, capacity={"nvidia.com/gpu": "2"})),
    ]
    holds = [
        PodHold(job_id=7, node="n1", gpu_uuids=("GPU-a",), gpu_indices=(0,)),
        PodHold(job_id=9, node="n1", gpu_uuids=("MIG-x",), gpu_indices=(1,)),
        PodHold(job_id=7, node="n2", gpu_uuids=(), gpu_indices=(1,)),
    ]

    def holder_for(job_id):
        if job_id == 7:
            return Holder(job_id=7, visible=True, label="alpha/train")
        return Holder(job_id=0, visible=False)

    result = build_cluster_map(
        nodes=nodes,
        pools=[PoolSelector("p1", "Pool 1", "X", {"p": "1"})],
        holds=holds,
        holder_for=holder_for,
    )
    pool, other = result.pools
    assert (pool.slug, other.slug) == ("p1", OTHER_POOL)
    gpu_a, gpu_b = pool.nodes[0].gpus
    assert gpu_a.holder.label == "alpha/train"
    assert gpu_b.mig
    assert gpu_b.slices[0].holder == Holder(job_id=0, visible=False)
    assert (pool.devices, pool.held, pool.free) == (2, 2, 0)
    n2 = other.nodes[0]
    assert [g.holder is not None for g in n2.gpus] == [False, True]
    assert (result.devices, result.held) == (4, 3)


def test_a_shared_gpu_lists_every_holder():
    shared = node(
        "ts-0",
        {"nvidia.com/gpu.product": "Tesla-T4-SHARED"},
        annotation=[{"index": 0, "uuid": "GPU-t", "model": "Tesla T4", "migEnabled": False}],
    )
    pools = [
        PoolSelector(
            "ts",
            "T4",
            "Tesla-T4",
            {"nvidia.com/gpu.product": "Tesla-T4-SHARED"},
            shares=4,
            isolation="Time-slicing: ...",
        )
    ]
    holds = [PodHold(job_id=j, node="ts-0", gpu_uuids=("GPU-t",), gpu_indices=()) for j in (1, 2)]
    result = build_cluster_map(
        nodes=[node_info(shared)],
        pools=pools,
        holds=holds,
        holder_for=lambda j: Holder(job_id=j, visible=True, label=f"p/job-{j}"),
    )
    (gpu,) = result.pools[0].nodes[0].gpus
    assert gpu.shared
    assert gpu.shares == 4
    assert [h.label for h in gpu.holders] == ["p/job-1", "p/job-2"]
    assert result.pools[0].isolation == "Time-slicing: ..."
