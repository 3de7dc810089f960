"""Kueue in a running kubesim, through kubectl and the official python client."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client
from kubesim.testing import vendored_crds_dir, wait_for

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"


def custom(api):
    return client.CustomObjectsApi(api)


def cluster_object(api, plural, body):
    return custom(api).create_cluster_custom_object(GROUP, VERSION, plural, body)


def condition(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return None


def workload_for(api, namespace, job_name):
    job = client.BatchV1Api(api).read_namespaced_job(job_name, namespace)
    items = custom(api).list_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "workloads",
        label_selector=f"kueue.x-k8s.io/job-uid={job.metadata.uid}",
    )["items"]
    return items[0] if items else None


def gpu_queues(api, namespace, suffix, specs):
    """A flavor for the H100 pool and one ClusterQueue + LocalQueue per (name, gpus, extra)."""
    flavor = f"h100-{suffix}"
    cluster_object(
        api,
        "resourceflavors",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {
                "nodeLabels": {"nvidia.com/gpu.product": H100},
                "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
    )
    for name, gpus, extra in specs:
        cluster_object(
            api,
            "clusterqueues",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ClusterQueue",
                "metadata": {"name": f"{name}-{suffix}"},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", GPU],
                            "flavors": [
                                {
                                    "name": flavor,
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": 64},
                                        {"name": "memory", "nominalQuota": "256Gi"},
                                        {"name": GPU, "nominalQuota": gpus},
                                    ],
                                }
                            ],
                        }
                    ],
                    **extra,
                },
            },
        )
        custom(api).create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "localqueues",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"clusterQueue": f"{name}-{suffix}"},
            },
        )


def gpu_job(api, namespace, name, queue, gpus, *, priority_class=None, seconds=100000):
    labels = {"kueue.x-k8s.io/queue-name": queue}
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    return client.BatchV1Api(api).create_namespaced_job(
        namespace,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "parallelism": 1,
                "completions": 1,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "train",
                                "image": "pytorch/pytorch",
                                "command": ["sh", "-c", f"sleep {seconds}"],
                                "resources": {
                                    "requests": {"cpu": "1", "memory": "1Gi"},
                                    "limits": {GPU: str(gpus)},
                                },
                            }
                        ],
                    }
                },
            },
        },
    )


def get_json(api, path, **query):
    """A GET the typed client has no call for (kubernetes 36.x ApiClient.call_api)."""
    response = api.call_api(
        path,
        "GET",
        query_params=list(query.items()),
        auth_settings=["BearerToken"],
        response_types_map={200: "object"},
        _return_http_data_only=True,
        _preload_content=False,
    )
    return json.loads(response.data)


def job_suspended(api, namespace, name) -> bool:
    return bool(client.BatchV1Api(api).read_namespaced_job(name, namespace).spec.suspend)


def test_sample_job_admitted_runs_and_finishes_with_kubectl(kubectl, api):
    examples = vendored_crds_dir() / "kueue" / "examples"
    kubectl("apply", "-f", str(examples / "single-clusterqueue-setup.yaml"))
    created = kubectl(
        "create", "-f", str(examples / "sample-job.yaml"), "-o", "name"
    ).stdout.strip()
    job_name = created.split("/", 1)[1]
    wl = wait_for(lambda: workload_for(api, "default", job_name), timeout=20)
    assert wl["metadata"]["name"].startswith(f"job-{job_name}-")

    def finished():
        current = workload_for(api, "default", job_name)
        cond = condition(current, "Finished")
        return current if cond and cond["status"] == "True" else None

    wl = wait_for(finished, timeout=60, message="the sample Job's Workload never finished")
    assert condition(wl, "Finished")["reason"] == "Succeeded"
    assert condition(wl, "Admitted")["status"] == "True"
    job = client.BatchV1Api(api).read_namespaced_job(job_name, "default")
    assert job.status.succeeded == 3
    table = kubectl("get", "workloads", "-n", "default").stdout
    assert wl["metadata"]["name"] in table
    described = kubectl("get", "clusterqueue", "cluster-queue", "-o", "json").stdout
    assert json.loads(described)["status"]["admittedWorkloads"] == 0


def test_borrowing_and_reclaim_in_a_cohort(api, namespace):
    suffix = uuid.uuid4().hex[:6]
    cohort = {
        "cohortName": f"dept-{suffix}",
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
    }
    gpu_queues(api, namespace, suffix, [("lender", 8, cohort), ("borrower", 0, cohort)])
    gpu_job(api, namespace, "borrowed", "borrower", 6)
    wait_for(
        lambda: not job_suspended(api, namespace, "borrowed"),
        timeout=20,
        message="the borrower never got the lender's idle quota",
    )

    def borrowed_gpus():
        cq = custom(api).get_cluster_custom_object(
            GROUP, VERSION, "clusterqueues", f"borrower-{suffix}"
        )
        usage = (cq.get("status") or {}).get("flavorsUsage") or []
        return usage and usage[0]["resources"][2]["borrowed"] == "6"

    wait_for(borrowed_gpus, timeout=10, message="the borrower's status never showed 6 borrowed")

    gpu_job(api, namespace, "owner", "lender", 4)

    def reclaimed():
        victim = workload_for(api, namespace, "borrowed")
        cond = condition(victim, "Preempted")
        return victim if cond and cond["status"] == "True" else None

    victim = wait_for(reclaimed, timeout=20, message="the lender never reclaimed its quota")
    assert condition(victim, "Preempted")["reason"] == "InCohortReclamation"
    assert "due to reclamation within the cohort" in condition(victim, "Evicted")["message"]
    wait_for(lambda: not job_suspended(api, namespace, "owner"), timeout=20)
    wait_for(lambda: job_suspended(api, namespace, "borrowed"), timeout=20)
    requeued = wait_for(
        lambda: condition(workload_for(api, namespace, "borrowed"), "Requeued"), timeout=20
    )
    assert requeued["status"] == "True"
    wait_for(
        lambda: (
            custom(api)
            .get_cluster_custom_object(GROUP, VERSION, "clusterqueues", f"lender-{suffix}")
            .get("status", {})
            .get("admittedWorkloads")
            == 1
        ),
        timeout=10,
        message="the lender's status never counted its admitted workload",
    )


def test_higher_priority_preempts_lower_in_the_same_cluster_queue(api, namespace):
    suffix = uuid.uuid4().hex[:6]
    for name, value in ((f"low-{suffix}", 10), (f"high-{suffix}", 10000)):
        cluster_object(
            api,
            "workloadpriorityclasses",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
        )
    gpu_queues(
        api,
        namespace,
        suffix,
        [("team", 4, {"preemption": {"withinClusterQueue": "LowerPriority"}})],
    )
    gpu_job(api, namespace, "low", "team", 4, priority_class=f"low-{suffix}")
    wait_for(lambda: not job_suspended(api, namespace, "low"), timeout=20)
    gpu_job(api, namespace, "high", "team", 4, priority_class=f"high-{suffix}")
    wait_for(
        lambda: not job_suspended(api, namespace, "high"),
        timeout=30,
        message="the high-priority job never started",
    )
    low = workload_for(api, namespace, "low")
    assert condition(low, "Preempted")["reason"] == "InClusterQueue"
    assert job_suspended(api, namespace, "low")
    high = workload_for(api, namespace, "high")
    assert high["spec"]["priority"] == 10000
    events = client.CoreV1Api(api).list_namespaced_event(namespace).items
    assert any(
        e.reason == "Preempted" and e.involved_object.name == low["metadata"]["name"]
        for e in events
    )


def test_visibility_api_positions(api, namespace):
    suffix = uuid.uuid4().hex[:6]
    cluster_object(
        api,
        "workloadpriorityclasses",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": f"urgent-{suffix}"},
            "value": 100,
        },
    )
    gpu_queues(api, namespace, suffix, [("vis", 1, {})])
    gpu_job(api, namespace, "running", "vis", 1)
    wait_for(lambda: not job_suspended(api, namespace, "running"), timeout=20)
    for name in ("first", "second"):
        gpu_job(api, namespace, name, "vis", 1)
        wait_for(lambda n=name: workload_for(api, namespace, n), timeout=20)
    gpu_job(api, namespace, "urgent", "vis", 1, priority_class=f"urgent-{suffix}")
    wait_for(lambda: workload_for(api, namespace, "urgent"), timeout=20)

    def pending(path, **query):
        return get_json(api, path, **query)

    base = "/apis/visibility.kueue.x-k8s.io/v1beta2"
    summary = wait_for(
        lambda: (
            (s := pending(f"{base}/clusterqueues/vis-{suffix}/pendingworkloads"))
            and len(s["items"]) == 3
            and s
        ),
        timeout=20,
    )
    rows = [
        (i["metadata"]["ownerReferences"][0]["name"], i["positionInClusterQueue"], i["priority"])
        for i in summary["items"]
    ]
    assert rows == [("urgent", 0, 100), ("first", 1, 0), ("second", 2, 0)]
    page = pending(
        f"{base}/namespaces/{namespace}/localqueues/vis/pendingworkloads", limit=1, offset=1
    )
    assert [(i["positionInLocalQueue"], i["localQueueName"]) for i in page["items"]] == [(1, "vis")]
    resources = get_json(api, "/apis/visibility.kueue.x-k8s.io/v1beta2")
    assert "localqueues/pendingworkloads" in {r["name"] for r in resources["resources"]}


def test_job_webhook_denies_an_invalid_queue_name(api, namespace):
    with pytest.raises(client.ApiException) as denied:
        gpu_job(api, namespace, "bad", "Not_A_Queue", 1)
    assert denied.value.status == 403
    assert 'admission webhook \\"vjob.kb.io\\" denied the request' in denied.value.body
