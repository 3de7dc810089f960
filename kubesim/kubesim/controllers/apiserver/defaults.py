"""API defaulting of built-in kinds on create, as kube-apiserver's defaulters do (the fields a
client reads back right after a create): workload replicas/strategies/selectors, the status
fields that Go serialises even when zero, and Service cluster IPs and node ports."""

from __future__ import annotations

import random

from kubesim.api import errors

NODE_PORT_RANGE = (30000, 32767)


def default_template(spec: dict) -> None:
    """SetDefaults_PodSpec on a workload's pod template, as upstream defaults templates too."""
    from kubesim.controllers.apiserver.admission import _default_container

    template = spec.get("template")
    if not isinstance(template, dict):
        return
    pod_spec = template.setdefault("spec", {})
    if not isinstance(pod_spec, dict):
        return
    for key in ("initContainers", "containers"):
        for container in pod_spec.get(key) or []:
            if isinstance(container, dict):
                _default_container(container)
    pod_spec.setdefault("restartPolicy", "Always")
    pod_spec.setdefault("dnsPolicy", "ClusterFirst")
    pod_spec.setdefault("schedulerName", "default-scheduler")
    pod_spec.setdefault("securityContext", {})
    pod_spec.setdefault("terminationGracePeriodSeconds", 30)


def _template_labels(spec: dict) -> dict:
    return dict(((spec.get("template") or {}).get("metadata") or {}).get("labels") or {})


def replication_controller(operation: str, rc: dict, old: dict | None) -> None:
    if operation != "CREATE":
        return
    spec = rc.setdefault("spec", {})
    default_template(spec)
    spec.setdefault("replicas", 1)
    spec.setdefault("minReadySeconds", 0)
    labels = _template_labels(spec)
    if not spec.get("selector") and labels:
        spec["selector"] = labels
    if not rc.get("metadata", {}).get("labels") and labels:
        rc["metadata"]["labels"] = dict(labels)
    rc["status"] = {"replicas": 0}


def replica_set(operation: str, rs: dict, old: dict | None) -> None:
    if operation != "CREATE":
        return
    spec = rs.setdefault("spec", {})
    default_template(spec)
    spec.setdefault("replicas", 1)
    spec.setdefault("minReadySeconds", 0)
    rs["status"] = {"replicas": 0}


def deployment(operation: str, obj: dict, old: dict | None) -> None:
    if operation != "CREATE":
        return
    spec = obj.setdefault("spec", {})
    default_template(spec)
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)


def stateful_set(operation: str, obj: dict, old: dict | None) -> None:
    if operation != "CREATE":
        return
    spec = obj.setdefault("spec", {})
    default_template(spec)
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault(
        "persistentVolumeClaimRetentionPolicy",
        {"whenDeleted": "Retain", "whenScaled": "Retain"},
    )
    obj["status"] = {"replicas": 0, "availableReplicas": 0}


def daemon_set(operation: str, obj: dict, old: dict | None) -> None:
    if operation != "CREATE":
        return
    spec = obj.setdefault("spec", {})
    default_template(spec)
    spec.setdefault(
        "updateStrategy",
        {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
    )
    spec.setdefault("revisionHistoryLimit", 10)
    obj["status"] = {
        "currentNumberScheduled": 0,
        "numberMisscheduled": 0,
        "desiredNumberScheduled": 0,
        "numberReady": 0,
    }


def cron_job(operation: str, obj: dict, old: dict | None) -> None:
    if operation != "CREATE":
        return
    spec = obj.setdefault("spec", {})
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)


def node_ports(store):
    """NodePort allocation (the cluster IP comes from endpoints.service_defaults)."""
    rng = random.Random(0)  # noqa: S311 - reproducible simulated node ports, not a secret

    def hook(operation: str, svc: dict, old: dict | None) -> None:
        if operation != "CREATE":
            return
        spec = svc.get("spec") or {}
        if spec.get("type") not in ("NodePort", "LoadBalancer"):
            return
        spec.setdefault("externalTrafficPolicy", "Cluster")
        used = {
            p.get("nodePort")
            for s in store.list("v1", "Service", None)
            for p in (s.get("spec") or {}).get("ports") or []
            if p.get("nodePort")
        }
        for port in spec.get("ports") or []:
            if port.get("nodePort"):
                if port["nodePort"] in used:
                    raise errors.invalid(
                        "Service",
                        "",
                        svc["metadata"].get("name", ""),
                        [
                            errors.invalid_value(
                                "spec.ports[0].nodePort",
                                port["nodePort"],
                                "provided port is already allocated",
                            )
                        ],
                    )
                continue
            free = [p for p in range(NODE_PORT_RANGE[0], NODE_PORT_RANGE[1] + 1) if p not in used]
            port["nodePort"] = rng.choice(free)
            used.add(port["nodePort"])

    return hook


def install(ctx) -> None:
    store = ctx.store
    store.add_admission_hook("v1", "ReplicationController", replication_controller)
    store.add_admission_hook("apps/v1", "ReplicaSet", replica_set)
    store.add_admission_hook("apps/v1", "Deployment", deployment)
    store.add_admission_hook("apps/v1", "StatefulSet", stateful_set)
    store.add_admission_hook("apps/v1", "DaemonSet", daemon_set)
    store.add_admission_hook("batch/v1", "CronJob", cron_job)
    store.add_admission_hook("v1", "Service", node_ports(store))
