"""What a real control plane adds around pods, seen through the official client: namespace
defaults, admission (ServiceAccount, RuntimeClass, LimitRange, ResourceQuota, PodSecurity),
volumes and their kubelet/scheduler refusals, workload controllers, PDB-aware eviction,
metrics.k8s.io. The cluster runs at speed 100, so simulated minutes pass in wall seconds."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubesim.testing import wait_for

pytestmark = [pytest.mark.kubesim]


def _pod(name: str, **spec) -> dict:
    body = {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]},
    }
    body["spec"].update(spec)
    return body


def _refusal(excinfo) -> tuple[int, str]:
    return excinfo.value.status, json.loads(excinfo.value.body)["message"]


def _events(core, namespace: str, name: str) -> list:
    return core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items


def test_namespace_starts_with_default_account_and_root_ca(core, namespace):
    account = core.read_namespaced_service_account("default", namespace)
    assert account.metadata.name == "default"
    ca = core.read_namespaced_config_map("kube-root-ca.crt", namespace)
    assert ca.data["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")


def test_missing_service_account_and_runtime_class_are_refused(core, api_client, namespace):
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_pod(namespace, _pod("sa", serviceAccountName="robot"))
    assert _refusal(excinfo) == (
        403,
        f'pods "sa" is forbidden: error looking up service account {namespace}/robot: '
        'serviceaccount "robot" not found',
    )
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_pod(namespace, _pod("rc", runtimeClassName="gvisor"))
    assert _refusal(excinfo) == (
        403,
        'pods "rc" is forbidden: pod rejected: RuntimeClass "gvisor" not found',
    )
    # the GPU Operator's runtime class exists, so PORTAL_RUNTIME_CLASS=nvidia works
    node_api = client.NodeV1Api(api_client)
    assert node_api.read_runtime_class("nvidia").handler == "nvidia"
    core.create_namespaced_pod(namespace, _pod("ok", runtimeClassName="nvidia"))


def test_resource_quota_enforced_with_upstream_message_and_status_used(core, namespace):
    core.create_namespaced_resource_quota(
        namespace,
        {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}},
    )
    gpu = {"limits": {"nvidia.com/gpu": "2"}}
    first = _pod("first")
    first["spec"]["containers"][0]["resources"] = gpu
    core.create_namespaced_pod(namespace, first)
    second = _pod("second")
    second["spec"]["containers"][0]["resources"] = gpu
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_pod(namespace, second)
    assert _refusal(excinfo) == (
        403,
        'pods "second" is forbidden: exceeded quota: gpus, requested: '
        "requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=2, limited: "
        "requests.nvidia.com/gpu=2",
    )

    def used():
        status = core.read_namespaced_resource_quota("gpus", namespace).status
        return status and status.used and status.used.get("requests.nvidia.com/gpu") == "2"

    wait_for(used, timeout=20, message="quota status.used never showed the pod's GPUs")


def test_limit_range_defaults_are_applied(core, namespace):
    core.create_namespaced_limit_range(
        namespace,
        {
            "metadata": {"name": "defaults"},
            "spec": {
                "limits": [
                    {
                        "type": "Container",
                        "default": {"cpu": "500m", "memory": "256Mi"},
                        "defaultRequest": {"cpu": "100m"},
                    }
                ]
            },
        },
    )
    pod = core.create_namespaced_pod(namespace, _pod("defaulted"))
    resources = pod.spec.containers[0].resources
    assert resources.limits == {"cpu": "500m", "memory": "256Mi"}
    assert resources.requests == {"cpu": "100m", "memory": "256Mi"}


def test_pod_security_levels_enforced_with_upstream_messages(core, namespace):
    core.patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}}
    )
    privileged = _pod("priv")
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_pod(namespace, privileged)
    assert _refusal(excinfo) == (
        403,
        'pods "priv" is forbidden: violates PodSecurity "baseline:latest": privileged '
        '(container "main" must not set securityContext.privileged=true)',
    )
    core.create_namespaced_pod(namespace, _pod("plain"))  # baseline allows it
    core.patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_pod(namespace, _pod("loose"))
    status, message = _refusal(excinfo)
    assert status == 403
    assert message.startswith(
        'pods "loose" is forbidden: violates PodSecurity "restricted:latest": '
        "allowPrivilegeEscalation != false"
    )
    strict = _pod("strict")
    strict["spec"]["securityContext"] = {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    strict["spec"]["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    core.create_namespaced_pod(namespace, strict)


def test_claims_bind_to_the_default_class_and_missing_sources_hold_pods(core, namespace):
    core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "5Gi"}},
            },
        },
    )

    def bound():
        claim = core.read_namespaced_persistent_volume_claim("data", namespace)
        return claim if claim.status.phase == "Bound" else None

    claim = wait_for(bound, timeout=20, message="the claim never bound")
    assert claim.spec.storage_class_name == "standard"
    assert claim.status.capacity == {"storage": "5Gi"}
    assert core.read_persistent_volume(claim.spec.volume_name).status.phase == "Bound"

    core.create_namespaced_pod(
        namespace,
        _pod("orphan", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "nothere"}}]),
    )
    core.create_namespaced_pod(
        namespace, _pod("nocfg", volumes=[{"name": "cfg", "configMap": {"name": "absent"}}])
    )

    def reasons(name: str) -> dict:
        return {e.reason: e.message for e in _events(core, namespace, name)}

    scheduling = wait_for(lambda: reasons("orphan").get("FailedScheduling"), timeout=20)
    assert 'persistentvolumeclaim "nothere" not found' in scheduling
    mount = wait_for(lambda: reasons("nocfg").get("FailedMount"), timeout=20)
    assert mount == 'MountVolume.SetUp failed for volume "cfg" : configmap "absent" not found'
    assert core.read_namespaced_pod("nocfg", namespace).status.phase == "Pending"
    # once the config map exists, the kubelet's retry starts the pod
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "absent"}})
    wait_for(
        lambda: core.read_namespaced_pod("nocfg", namespace).status.phase == "Running",
        timeout=30,
        message="the pod did not start once its config map existed",
    )


def test_deployment_rolls_out_and_eviction_respects_its_budget(api_client, core, namespace):
    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
                },
            },
        },
    )

    def available():
        status = apps.read_namespaced_deployment("web", namespace).status
        return status.available_replicas == 2 and status.updated_replicas == 2

    wait_for(available, timeout=30, message="the deployment never became available")
    assert apps.read_namespaced_deployment("web", namespace).spec.strategy.type == "RollingUpdate"
    client.PolicyV1Api(api_client).create_namespaced_pod_disruption_budget(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    pod = core.list_namespaced_pod(namespace, label_selector="app=web").items[0]
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_pod_eviction(
            pod.metadata.name,
            namespace,
            {"metadata": {"name": pod.metadata.name, "namespace": namespace}},
        )
    assert excinfo.value.status == 429
    assert "would violate the pod's disruption budget" in json.loads(excinfo.value.body)["message"]


def test_cronjob_creates_jobs_on_the_simulated_clock(api_client, namespace):
    batch = client.BatchV1Api(api_client)
    batch.create_namespaced_cron_job(
        namespace,
        {
            "metadata": {"name": "tick"},
            "spec": {
                "schedule": "*/1 * * * *",
                "jobTemplate": {
                    "spec": {
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "c", "image": "busybox"}],
                            }
                        }
                    }
                },
            },
        },
    )
    # a simulated minute is 0.6 s at speed 100
    jobs = wait_for(
        lambda: [
            j
            for j in batch.list_namespaced_job(namespace).items
            if (j.metadata.owner_references or [{}])[0].name == "tick"
        ],
        timeout=30,
        message="the CronJob created no Job",
    )
    assert jobs[0].metadata.name.startswith("tick-")
    with pytest.raises(ApiException) as excinfo:
        batch.create_namespaced_cron_job(
            namespace,
            {
                "metadata": {"name": "bad"},
                "spec": {"schedule": "every minute", "jobTemplate": {"spec": {}}},
            },
        )
    assert excinfo.value.status == 422


def test_metrics_api_reports_node_and_pod_usage(api_client, core, namespace):
    core.create_namespaced_pod(namespace, _pod("busy"))
    wait_for(
        lambda: core.read_namespaced_pod("busy", namespace).status.phase == "Running",
        timeout=30,
    )
    custom = client.CustomObjectsApi(api_client)
    nodes = custom.list_cluster_custom_object("metrics.k8s.io", "v1beta1", "nodes")
    assert nodes["items"]
    assert "cpu" in nodes["items"][0]["usage"]
    pods = custom.list_namespaced_custom_object("metrics.k8s.io", "v1beta1", namespace, "pods")
    assert [p["metadata"]["name"] for p in pods["items"]] == ["busy"]
    assert pods["items"][0]["containers"][0]["usage"]["memory"]
