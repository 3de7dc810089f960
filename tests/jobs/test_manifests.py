"""jobs/manifests.py: pure, deterministic, restricted, labelled."""

import copy
import json

import pytest

from jobs.manifests import JobManifestInput, build_job_manifests, object_name
from portal.kube import labels as L


def spec(**overrides) -> JobManifestInput:
    base = {
        "job_id": 42,
        "name": "train",
        "project_slug": "alpha",
        "namespace": "gp-alpha",
        "kind": "single",
        "backend": "kueue",
        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "command": ("python", "train.py"),
        "env": {"EPOCHS": "3"},
        "gpus": 2,
        "mig_resource": "",
        "replicas": 1,
        "cpu": "8",
        "memory": "64Gi",
        "priority": "high",
        "max_runtime_seconds": 3600,
    }
    base.update(overrides)
    return JobManifestInput(**base)


def container(pod_spec: dict) -> dict:
    (c,) = pod_spec["containers"]
    return c


def env_of(c: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def test_single_gpu_kueue_job_shape():
    (job,) = build_job_manifests(spec())
    assert job["apiVersion"] == "batch/v1"
    assert job["kind"] == "Job"
    meta = job["metadata"]
    assert meta["name"] == "gp-job-42"
    assert meta["namespace"] == "gp-alpha"
    assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "gp-alpha"
    assert meta["labels"]["kueue.x-k8s.io/priority-class"] == "gp-high"
    assert meta["labels"][L.MANAGED_BY_KEY] == "gpu-portal"
    assert meta["labels"][L.JOB_ID_KEY] == "42"
    assert meta["labels"][L.PROJECT_KEY] == "alpha"
    s = job["spec"]
    assert s["suspend"] is True
    assert s["backoffLimit"] == 0
    # a preemption (suspension kills the pod) must requeue the job, not use up its backoff limit
    ignored = [r for r in s["podFailurePolicy"]["rules"] if r["action"] == "Ignore"]
    assert {"type": "DisruptionTarget", "status": "True"} in ignored[0]["onPodConditions"]
    assert ignored[1]["onExitCodes"] == {
        "containerName": c_name(s),
        "operator": "In",
        "values": [137, 143],
    }
    assert s["activeDeadlineSeconds"] == 3600
    pod = s["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert s["template"]["metadata"]["labels"][L.JOB_ID_KEY] == "42"
    c = container(pod)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "nvidia.com/gpu" not in c["resources"]["requests"]
    assert c["resources"]["requests"] == {"cpu": "8", "memory": "64Gi"}
    assert c["command"] == ["python", "train.py"]
    assert env_of(c) == {"EPOCHS": "3"}


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"kind": "mig", "gpus": 0, "mig_resource": "nvidia.com/mig-1g.10gb"},
        {"kind": "gang", "replicas": 4, "gpus": 8},
        {"kind": "gang", "replicas": 4, "gpus": 8, "backend": "volcano"},
    ],
    ids=["single", "mig", "gang-kueue", "gang-volcano"],
)
def test_every_pod_is_restricted_and_nothing_privileged(overrides):
    for obj in build_job_manifests(spec(**overrides)):
        text = json.dumps(obj)
        for forbidden in ("hostPath", "hostNetwork", "hostPID", "hostIPC", "NVIDIA_VISIBLE"):
            assert forbidden not in text
        templates = []
        if obj["kind"] == "Job" and obj["apiVersion"] == "batch/v1":
            templates = [obj["spec"]["template"]]
        elif obj["kind"] == "Job":
            templates = [t["template"] for t in obj["spec"]["tasks"]]
        for template in templates:
            pod = template["spec"]
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            assert pod["automountServiceAccountToken"] is False
            sc = container(pod)["securityContext"]
            assert sc["privileged"] is False
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert template["metadata"]["labels"][L.JOB_ID_KEY] == "42"
        assert obj["metadata"]["labels"][L.MANAGED_BY_KEY] == "gpu-portal"


def test_mig_job_asks_for_one_slice_in_limits_only():
    (job,) = build_job_manifests(spec(kind="mig", gpus=0, mig_resource="nvidia.com/mig-3g.40gb"))
    c = container(job["spec"]["template"]["spec"])
    assert c["resources"]["limits"] == {"memory": "64Gi", "nvidia.com/mig-3g.40gb": "1"}
    assert "nvidia.com/gpu" not in json.dumps(c["resources"])


def test_gang_on_kueue_is_indexed_job_plus_headless_service_with_torch_env():
    service, job = build_job_manifests(spec(kind="gang", replicas=4, gpus=8))
    assert service["kind"] == "Service"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {L.JOB_ID_KEY: "42"}
    assert service["metadata"]["name"] == job["metadata"]["name"] == "gp-job-42"
    s = job["spec"]
    assert s["completionMode"] == "Indexed"
    assert s["parallelism"] == s["completions"] == 4
    pod = s["template"]["spec"]
    assert pod["subdomain"] == "gp-job-42"
    env = env_of(container(pod))
    assert env["MASTER_ADDR"] == "gp-job-42-0.gp-job-42"
    assert env["MASTER_PORT"] == "29500"
    assert env["WORLD_SIZE"] == "4"
    assert env["RANK"] == {
        "fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        }
    }
    assert container(pod)["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_gang_on_volcano_has_master_and_workers_and_pytorch_plugin():
    (vcjob,) = build_job_manifests(spec(kind="gang", replicas=4, gpus=8, backend="volcano"))
    assert vcjob["apiVersion"] == "batch.volcano.sh/v1alpha1"
    s = vcjob["spec"]
    assert s["schedulerName"] == "volcano"
    assert s["minAvailable"] == 4
    assert s["queue"] == "gp-alpha"
    assert s["priorityClassName"] == "gp-high"
    assert "pytorch" in s["plugins"]
    assert "--master=master" in s["plugins"]["pytorch"]
    tasks = {t["name"]: t for t in s["tasks"]}
    assert tasks["master"]["replicas"] == 1
    assert tasks["worker"]["replicas"] == 3
    assert sum(t["replicas"] for t in s["tasks"]) == 4
    assert tasks["master"]["template"]["spec"]["activeDeadlineSeconds"] == 3600


def test_names_derive_from_the_id_and_output_is_deterministic():
    a = build_job_manifests(spec(kind="gang", replicas=2, gpus=1))
    b = build_job_manifests(spec(kind="gang", replicas=2, gpus=1))
    assert a == b
    assert object_name(7) == "gp-job-7"
    other = build_job_manifests(spec(job_id=43))
    assert other[0]["metadata"]["name"] == "gp-job-43"


def test_chosen_pool_becomes_node_selector_and_runtime_class_is_optional():
    (job,) = build_job_manifests(spec())
    pod = job["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod
    assert "runtimeClassName" not in pod
    (job,) = build_job_manifests(spec(node_selector={"pool": "h100"}, runtime_class="nvidia"))
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "h100"}
    assert pod["runtimeClassName"] == "nvidia"


def test_builder_does_not_mutate_its_input_env():
    env = {"A": "1"}
    s = spec(env=env)
    before = copy.deepcopy(env)
    build_job_manifests(s)
    assert env == before


def c_name(job_spec: dict) -> str:
    return job_spec["template"]["spec"]["containers"][0]["name"]
