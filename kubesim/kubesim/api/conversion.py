"""Conversion of custom resources between served versions.

Kueue (kueue.x-k8s.io) serves v1beta1 and v1beta2 with v1beta2 as the storage version; the
renames follow Kueue v0.19's conversion functions (upstream: kubernetes-sigs/kueue v0.19.2,
``apis/kueue/v1beta1/*_conversion.go``; the CRDs themselves are vendored in kubesim/crds/kueue/):

- ClusterQueue: ``spec.cohort`` <-> ``spec.cohortName``; v1beta1 ``spec.admissionChecks``
  (names) -> v1beta2 ``spec.admissionChecksStrategy.admissionChecks[{name}]``;
  v1beta1-only ``status.pendingWorkloadsStatus`` is dropped going up.
- Workload: ``spec.priorityClassName`` + ``spec.priorityClassSource`` <->
  ``spec.priorityClassRef{group, kind, name}``; ``status.accumulatedPastExexcutionTimeSeconds``
  (v1beta1's spelling) <-> ``status.accumulatedPastExecutionTimeSeconds``; topology
  assignments ``domains[{values, count}]`` <-> ``slices[{domainCount, podCounts,
  valuesPerLevel}]``.
- LocalQueue: ``status.flavorUsage`` <-> ``status.flavorsUsage``; v1beta1's
  ``status.flavors`` has no v1beta2 counterpart and is dropped going up.
- MultiKueueCluster: ``spec.kubeConfig`` / ``spec.clusterProfileRef`` <->
  ``spec.clusterSource.{kubeConfig, clusterProfileRef}``.

Any other group (Volcano, KAI, built-ins) converts by changing apiVersion only, as the API
server does for CRDs with ``conversion.strategy: None``.
"""

from __future__ import annotations

import copy

KUEUE_GROUP = "kueue.x-k8s.io"
WORKLOAD_PRIORITY_CLASS_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
POD_PRIORITY_CLASS_SOURCE = "scheduling.k8s.io/priorityclass"
_PRIORITY_SOURCES = {
    WORKLOAD_PRIORITY_CLASS_SOURCE: ("kueue.x-k8s.io", "WorkloadPriorityClass"),
    POD_PRIORITY_CLASS_SOURCE: ("scheduling.k8s.io", "PriorityClass"),
}


def split_api_version(api_version: str) -> tuple[str, str]:
    """("kueue.x-k8s.io", "v1beta2") for "kueue.x-k8s.io/v1beta2"; ("", "v1") for "v1"."""
    if "/" in api_version:
        group, version = api_version.split("/", 1)
        return group, version
    return "", api_version


def convert(obj: dict, to_version: str) -> dict:
    """Return a converted deep copy of ``obj`` in ``to_version``.

    ``to_version`` is a version ("v1beta1") or a full apiVersion ("kueue.x-k8s.io/v1beta1").
    """
    group, from_version = split_api_version(obj.get("apiVersion", ""))
    if "/" in to_version:
        to_group, to_version = split_api_version(to_version)
        if to_group != group:
            raise ValueError(f"cannot convert {group or 'core'} objects to group {to_group}")
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{group}/{to_version}" if group else to_version
    if group != KUEUE_GROUP or from_version == to_version:
        return out
    kind = obj.get("kind", "")
    if from_version == "v1beta1" and to_version == "v1beta2":
        _UP.get(kind, _noop)(out)
    elif from_version == "v1beta2" and to_version == "v1beta1":
        _DOWN.get(kind, _noop)(out)
    else:
        raise ValueError(f"no conversion from {KUEUE_GROUP}/{from_version} to {to_version}")
    return out


def _noop(obj: dict) -> None:
    return None


def _rename(container: dict | None, old: str, new: str) -> None:
    if isinstance(container, dict) and old in container:
        value = container.pop(old)
        if new not in container:
            container[new] = value


# -- ClusterQueue -------------------------------------------------------------------------
def _cluster_queue_up(obj: dict) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        cohort = spec.pop("cohort", None)
        if cohort:
            spec.setdefault("cohortName", cohort)
        names = spec.pop("admissionChecks", None)
        if names:
            strategy = spec.setdefault("admissionChecksStrategy", {})
            checks = strategy.setdefault("admissionChecks", [])
            present = {c.get("name") for c in checks if isinstance(c, dict)}
            checks.extend({"name": n} for n in names if n not in present)
    status = obj.get("status")
    if isinstance(status, dict):
        status.pop("pendingWorkloadsStatus", None)
        fair = status.get("fairSharing")
        if isinstance(fair, dict):
            fair.pop("admissionFairSharingStatus", None)


def _cluster_queue_down(obj: dict) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        cohort = spec.pop("cohortName", None)
        if cohort:
            spec.setdefault("cohort", cohort)
        spec.pop("concurrentAdmissionPolicy", None)


def _cohort_up(obj: dict) -> None:
    status = obj.get("status")
    if isinstance(status, dict) and isinstance(status.get("fairSharing"), dict):
        status["fairSharing"].pop("admissionFairSharingStatus", None)


# -- Workload -----------------------------------------------------------------------------
def _workload_up(obj: dict) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        name = spec.pop("priorityClassName", None)
        source = spec.pop("priorityClassSource", None)
        if source in _PRIORITY_SOURCES and "priorityClassRef" not in spec:
            group, kind = _PRIORITY_SOURCES[source]
            spec["priorityClassRef"] = {"group": group, "kind": kind, "name": name or ""}
    status = obj.get("status")
    if isinstance(status, dict):
        _rename(
            status, "accumulatedPastExexcutionTimeSeconds", "accumulatedPastExecutionTimeSeconds"
        )
        for assignment in _pod_set_assignments(status):
            topology = assignment.get("topologyAssignment")
            if isinstance(topology, dict) and "domains" in topology:
                topology["slices"] = _domains_to_slices(topology.pop("domains") or [])


def _workload_down(obj: dict) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        ref = spec.pop("priorityClassRef", None)
        spec.pop("preemptionGates", None)
        if isinstance(ref, dict):
            for source, (group, kind) in _PRIORITY_SOURCES.items():
                if ref.get("group") == group and ref.get("kind") == kind:
                    spec["priorityClassSource"] = source
                    spec["priorityClassName"] = ref.get("name", "")
        for pod_set in spec.get("podSets") or ():
            request = pod_set.get("topologyRequest") if isinstance(pod_set, dict) else None
            if isinstance(request, dict):
                request.pop("podsetSliceRequiredTopologyConstraints", None)
    status = obj.get("status")
    if isinstance(status, dict):
        _rename(
            status, "accumulatedPastExecutionTimeSeconds", "accumulatedPastExexcutionTimeSeconds"
        )
        status.pop("preemptionGates", None)
        for assignment in _pod_set_assignments(status):
            topology = assignment.get("topologyAssignment")
            if isinstance(topology, dict) and "slices" in topology:
                topology["domains"] = _slices_to_domains(
                    topology.pop("slices") or [], len(topology.get("levels") or ())
                )


def _pod_set_assignments(status: dict) -> list[dict]:
    admission = status.get("admission")
    if not isinstance(admission, dict):
        return []
    return [a for a in admission.get("podSetAssignments") or () if isinstance(a, dict)]


def _domains_to_slices(domains: list[dict]) -> list[dict]:
    """v1beta1 domains -> one v1beta2 slice (universal values where all domains agree)."""
    if not domains:
        return []
    counts = [d.get("count", 0) for d in domains]
    levels = max(len(d.get("values") or ()) for d in domains)
    values_per_level = []
    for level in range(levels):
        column = [(d.get("values") or [""] * levels)[level] for d in domains]
        if len(set(column)) == 1:
            values_per_level.append({"universal": column[0]})
        else:
            values_per_level.append({"individual": {"roots": column}})
    pod_counts = {"universal": counts[0]} if len(set(counts)) == 1 else {"individual": counts}
    return [
        {"domainCount": len(domains), "podCounts": pod_counts, "valuesPerLevel": values_per_level}
    ]


def _slices_to_domains(slices: list[dict], level_count: int) -> list[dict]:
    domains = []
    for piece in slices:
        count = int(piece.get("domainCount") or 0)
        pod_counts = piece.get("podCounts") or {}
        per_level = piece.get("valuesPerLevel") or []
        for index in range(count):
            values = []
            for level in per_level:
                if "universal" in level:
                    values.append(level["universal"])
                else:
                    individual = level.get("individual") or {}
                    roots = individual.get("roots") or []
                    root = roots[index] if index < len(roots) else ""
                    values.append(
                        f"{individual.get('prefix', '')}{root}{individual.get('suffix', '')}"
                    )
            if "individual" in pod_counts:
                individual_counts = pod_counts["individual"]
                pods = individual_counts[index] if index < len(individual_counts) else 0
            else:
                pods = pod_counts.get("universal", 0)
            domains.append(
                {"values": values[:level_count] if level_count else values, "count": pods}
            )
    return domains


# -- LocalQueue ---------------------------------------------------------------------------
def _local_queue_up(obj: dict) -> None:
    status = obj.get("status")
    if isinstance(status, dict):
        _rename(status, "flavorUsage", "flavorsUsage")
        status.pop("flavors", None)


def _local_queue_down(obj: dict) -> None:
    status = obj.get("status")
    if isinstance(status, dict):
        _rename(status, "flavorsUsage", "flavorUsage")


# -- MultiKueueCluster --------------------------------------------------------------------
def _multikueue_cluster_up(obj: dict) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        source = {}
        for key in ("kubeConfig", "clusterProfileRef"):
            if key in spec:
                source[key] = spec.pop(key)
        if source:
            spec.setdefault("clusterSource", source)


def _multikueue_cluster_down(obj: dict) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("clusterSource"), dict):
        source = spec.pop("clusterSource")
        for key in ("kubeConfig", "clusterProfileRef"):
            if key in source:
                spec.setdefault(key, source[key])


def _multikueue_config_down(obj: dict) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec.pop("quotaManagement", None)


def _admission_check_up(obj: dict) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec.pop("retryDelayMinutes", None)


_UP = {
    "ClusterQueue": _cluster_queue_up,
    "Cohort": _cohort_up,
    "Workload": _workload_up,
    "LocalQueue": _local_queue_up,
    "MultiKueueCluster": _multikueue_cluster_up,
    "AdmissionCheck": _admission_check_up,
}
_DOWN = {
    "ClusterQueue": _cluster_queue_down,
    "Workload": _workload_down,
    "LocalQueue": _local_queue_down,
    "MultiKueueCluster": _multikueue_cluster_down,
    "MultiKueueConfig": _multikueue_config_down,
}
