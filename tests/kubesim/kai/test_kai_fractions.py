"""GPU fractions in kubesim's KAI Scheduler, through the official client: fraction pods share a
physical GPU held by a reservation pod, pack onto the fullest GPU that has room, keep whole-GPU
pods off a shared GPU, and what KAI's admission refuses is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubesim.testing import wait_for

from tests.kubesim.kai.objects import (
    GPU_TOLERATION,
    RESERVATION_NS,
    create_queues,
    gpu_uuid_of,
    pod,
    podgroup_of,
    queue,
    read_pod,
    unschedulable_reasons,
)

KUBESIM_OPTIONS = {"cluster": Path(__file__).with_name("cluster.yaml"), "speed": 50.0}


def _bound_uuid(api, namespace: str, name: str) -> str:
    def ready():
        current = read_pod(api, namespace, name)
        return current.spec.node_name and gpu_uuid_of(api, current)

    return wait_for(ready, timeout=30, message=f"{name} never got a shared GPU")


def test_two_halves_share_one_gpu_and_both_succeed(api, namespace):
    create_queues(api, queue(f"{namespace}-q", pool="pair", gpu_quota=1))
    core = client.CoreV1Api(api)
    for name in ("half-a", "half-b"):
        core.create_namespaced_pod(
            namespace, pod(name, f"{namespace}-q", "pair", fraction="0.5", seconds=60)
        )

    first, second = _bound_uuid(api, namespace, "half-a"), _bound_uuid(api, namespace, "half-b")
    assert first == second
    assert first.startswith("GPU-")
    a, b = read_pod(api, namespace, "half-a"), read_pod(api, namespace, "half-b")
    assert a.metadata.labels["runai-gpu-group"] == b.metadata.labels["runai-gpu-group"]
    assert a.metadata.annotations["received-resource-type"] == "Fraction"
    # the container reads its GPU from the ConfigMap the binder wrote
    env_cm = next(e.config_map_ref.name for e in a.spec.containers[0].env_from if e.config_map_ref)
    data = core.read_namespaced_config_map(env_cm, namespace).data
    assert data["NVIDIA_VISIBLE_DEVICES"] == first

    wait_for(
        lambda: (
            {read_pod(api, namespace, n).status.phase for n in ("half-a", "half-b")}
            == {"Succeeded"}
        ),
        timeout=30,
        message="the two fraction pods did not both succeed",
    )
    group = a.metadata.labels["runai-gpu-group"]
    wait_for(
        lambda: (
            not core.list_namespaced_pod(
                RESERVATION_NS, label_selector=f"runai-gpu-group={group}"
            ).items
        ),
        timeout=20,
        message="the reservation pod outlived its last fraction pod",
    )


def test_fractions_pack_onto_the_fullest_gpu_and_keep_whole_gpu_pods_off(
    api, namespace, kubesim_module
):
    q = f"{namespace}-q"
    create_queues(api, queue(q, pool="pack", gpu_quota=2))
    core = client.CoreV1Api(api)

    def submit(name: str, fraction: str) -> None:
        core.create_namespaced_pod(namespace, pod(name, q, "pack", fraction=fraction))

    submit("p-half", "0.5")
    shared = _bound_uuid(api, namespace, "p-half")
    submit("q-quarter", "0.25")
    assert _bound_uuid(api, namespace, "q-quarter") == shared
    submit("r-half", "0.5")  # 0.25 left on the shared GPU: a half goes to the other one
    other = _bound_uuid(api, namespace, "r-half")
    assert other != shared
    submit("s-quarter", "0.25")  # a quarter still fits on the fullest GPU
    assert _bound_uuid(api, namespace, "s-quarter") == shared
    submit("t-half", "0.5")
    assert _bound_uuid(api, namespace, "t-half") == other

    submit("u-quarter", "0.25")  # both GPUs are full now
    reasons = wait_for(
        lambda: unschedulable_reasons(podgroup_of(api, namespace, "u-quarter")),
        timeout=20,
        message="the podgroup never said why it waits",
    )
    assert "node(s) didn't have enough resources: GPUs" in reasons[0]["message"]
    assert read_pod(api, namespace, "u-quarter").spec.node_name is None

    # the reservation pods hold both GPUs: whole-GPU pods wait, KAI's and the default scheduler's
    core.create_namespaced_pod(namespace, pod("w-whole", q, "pack", gpus=1))
    whole = wait_for(
        lambda: unschedulable_reasons(podgroup_of(api, namespace, "w-whole")), timeout=20
    )
    assert "didn't have enough resources: GPUs" in whole[0]["message"]
    plain = pod("x-default", q, "pack", gpus=1)
    plain["spec"]["schedulerName"] = "default-scheduler"
    plain["spec"]["nodeSelector"] = {"kai.scheduler/node-pool": "pack"}
    core.create_namespaced_pod(namespace, plain)
    scheduled = wait_for(
        lambda: next(
            (
                c
                for c in read_pod(api, namespace, "x-default").status.conditions or []
                if c.type == "PodScheduled"
            ),
            None,
        ),
        timeout=20,
    )
    assert scheduled.status == "False"
    assert "Insufficient nvidia.com/gpu" in scheduled.message

    # dcgm-exporter sees the shared GPU held by the reservation pod, as the real one does
    from kubesim.cluster import dcgm_pod_name

    status, body = kubesim_module.request(
        "GET",
        f"/api/v1/namespaces/gpu-operator/pods/{dcgm_pod_name('pack-0')}:9400/proxy/metrics",
    )
    assert status == 200
    text = body.decode() if isinstance(body, bytes) else str(body)
    line = next(
        row
        for row in text.splitlines()
        if row.startswith("DCGM_FI_DEV_GPU_UTIL{") and f'UUID="{shared}"' in row
    )
    assert f'namespace="{RESERVATION_NS}"' in line
    assert 'pod="gpu-reservation-' in line


def test_gpu_memory_larger_than_the_gpu_never_fits(api, namespace):
    q = f"{namespace}-q"
    create_queues(api, queue(q, pool="pair", gpu_quota=1))
    body = pod("too-big", q, "pair", annotations={"gpu-memory": "90000"})
    client.CoreV1Api(api).create_namespaced_pod(namespace, body)
    reasons = wait_for(
        lambda: unschedulable_reasons(podgroup_of(api, namespace, "too-big")), timeout=20
    )
    assert "node(s) didn't have enough resources: GPU memory" in reasons[0]["message"]


@pytest.mark.parametrize(
    ("annotations", "gpus", "message"),
    [
        (
            {"gpu-fraction": "0.5"},
            1,
            "cannot have both GPU fraction request and whole GPU resource request/limit",
        ),
        ({"gpu-fraction": "0"}, 0, "gpu-fraction annotation value must be a positive number"),
        ({"gpu-fraction": "1.5"}, 0, "gpu-fraction annotation value must be a positive number"),
        (
            {"gpu-memory": "2000", "gpu-fraction": "0.5"},
            0,
            "cannot request both GPU and GPU memory",
        ),
        ({"gpu-memory": "2Gi"}, 0, "gpu-memory annotation value must be a positive integer"),
    ],
)
def test_admission_refuses_what_kai_refuses(api, namespace, annotations, gpus, message):
    body = pod("bad", "default-queue", None, annotations=annotations, gpus=gpus)
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(api).create_namespaced_pod(namespace, body)
    assert refused.value.status == 403
    text = json.loads(refused.value.body)["message"]
    assert text.startswith('admission webhook "admission.kai-scheduler.svc" denied the request: ')
    assert message in text


def test_admission_leaves_other_schedulers_pods_alone(api, namespace):
    body = pod("other", "default-queue", None, annotations={"gpu-fraction": "7"})
    body["spec"]["schedulerName"] = "default-scheduler"
    body["spec"]["tolerations"] = [GPU_TOLERATION]
    created = client.CoreV1Api(api).create_namespaced_pod(namespace, body)
    assert created.spec.runtime_class_name is None
