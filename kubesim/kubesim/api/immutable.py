"""Update validation of built-in kinds: the fields kube-apiserver refuses to change, with its
messages (pkg/apis/core/validation ValidatePodUpdate, ValidatePersistentVolumeClaimUpdate,
ValidateServiceUpdate, pkg/apis/batch and pkg/apis/apps validation).

`validate_update(obj, old)` returns causes in the Status shape, [] when the update is allowed.
"""

from __future__ import annotations

import copy

from kubesim.api import secrets
from kubesim.api.schema import field_error, forbidden, invalid

IMMUTABLE = "field is immutable"
POD_UPDATE_MSG = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)
STS_UPDATE_MSG = (
    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
    "'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and "
    "'minReadySeconds' are forbidden"
)
PVC_UPDATE_MSG = (
    "spec is immutable after creation except resources.requests and "
    "volumeAttributesClassName for bound claims"
)
# Job template fields a suspended, never-started Job may change (JobMutableSchedulingDirectives)
_JOB_MUTABLE_TEMPLATE = ("nodeSelector", "tolerations", "affinity", "schedulingGates")


def _spec(obj: dict) -> dict:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _pod(obj: dict, old: dict) -> list[dict]:
    new_spec, old_spec = copy.deepcopy(_spec(obj)), copy.deepcopy(_spec(old))
    for spec in (new_spec, old_spec):
        for key in ("containers", "initContainers"):
            for container in spec.get(key) or []:
                if isinstance(container, dict):
                    container.pop("image", None)
        spec.pop("activeDeadlineSeconds", None)
        spec.pop("terminationGracePeriodSeconds", None)
    # binding sets nodeName once; gates may only be removed (the Kueue/Volcano ungating)
    if not old_spec.get("nodeName"):
        new_spec.pop("nodeName", None)
        old_spec.pop("nodeName", None)
    old_gates = old_spec.pop("schedulingGates", None) or []
    if old_gates:
        # a gated pod's scheduling directives may gain entries (PodSchedulingReadiness)
        new_selector = new_spec.pop("nodeSelector", None) or {}
        old_selector = old_spec.pop("nodeSelector", None) or {}
        if any(new_selector.get(k) != v for k, v in old_selector.items()):
            new_spec["nodeSelector"], old_spec["nodeSelector"] = new_selector, old_selector
    new_gates = new_spec.pop("schedulingGates", None) or []
    new_tolerations = new_spec.pop("tolerations", None) or []
    old_tolerations = old_spec.pop("tolerations", None) or []
    causes = []
    if new_spec != old_spec or any(t not in new_tolerations for t in old_tolerations):
        causes.append(forbidden("spec", POD_UPDATE_MSG))
    if any(g not in old_gates for g in new_gates):
        causes.append(
            forbidden(
                "spec.schedulingGates",
                "only deletion is allowed, but found new scheduling gate",
            )
        )
    return causes


def _job(obj: dict, old: dict) -> list[dict]:
    spec, old_spec = _spec(obj), _spec(old)
    causes = []
    if old_spec.get("selector") and spec.get("selector") != old_spec.get("selector"):
        causes.append(invalid("spec.selector", spec.get("selector"), IMMUTABLE))
    template, old_template = spec.get("template") or {}, old_spec.get("template") or {}
    if template != old_template:
        # upstream also wants a Job that never started; kubesim's Kueue restores the template in
        # the same write that suspends a Job again, so a suspension on either side suffices
        if old_spec.get("suspend") or spec.get("suspend"):
            # labels/annotations and the scheduling directives may change while suspended
            a, b = copy.deepcopy(template), copy.deepcopy(old_template)
            for t in (a, b):
                meta = t.setdefault("metadata", {})
                meta.pop("labels", None)
                meta.pop("annotations", None)
                for key in _JOB_MUTABLE_TEMPLATE:
                    t.setdefault("spec", {}).pop(key, None)
            if a != b:
                causes.append(invalid("spec.template", template, IMMUTABLE))
        else:
            causes.append(invalid("spec.template", template, IMMUTABLE))
    for key in ("completionMode", "podFailurePolicy", "successPolicy", "managedBy"):
        if key in old_spec and spec.get(key) != old_spec.get(key):
            causes.append(invalid(f"spec.{key}", spec.get(key), IMMUTABLE))
    if (
        old_spec.get("completionMode") == "Indexed"
        and spec.get("completions") != old_spec.get("completions")
        and spec.get("completions") != spec.get("parallelism")
    ):
        causes.append(
            invalid(
                "spec.completions",
                spec.get("completions"),
                "field is immutable" if spec.get("completions") is not None else IMMUTABLE,
            )
        )
    return causes


def _selector_immutable(obj: dict, old: dict) -> list[dict]:
    spec, old_spec = _spec(obj), _spec(old)
    if old_spec.get("selector") is not None and spec.get("selector") != old_spec.get("selector"):
        return [invalid("spec.selector", spec.get("selector"), IMMUTABLE)]
    return []


def _stateful_set(obj: dict, old: dict) -> list[dict]:
    causes = _selector_immutable(obj, old)
    mutable = (
        "replicas",
        "ordinals",
        "template",
        "updateStrategy",
        "revisionHistoryLimit",
        "persistentVolumeClaimRetentionPolicy",
        "minReadySeconds",
        "selector",
    )
    a = {k: v for k, v in _spec(obj).items() if k not in mutable}
    b = {k: v for k, v in _spec(old).items() if k not in mutable}
    if a != b:
        causes.append(forbidden("spec", STS_UPDATE_MSG))
    return causes


def _pvc(obj: dict, old: dict) -> list[dict]:
    spec, old_spec = copy.deepcopy(_spec(obj)), copy.deepcopy(_spec(old))
    causes = []
    if old_spec.get("storageClassName") and spec.get("storageClassName") != old_spec.get(
        "storageClassName"
    ):
        causes.append(invalid("spec.storageClassName", spec.get("storageClassName"), IMMUTABLE))
    for s in (spec, old_spec):
        s.pop("resources", None)
        s.pop("volumeAttributesClassName", None)
    # the binder sets volumeName (and a default class) once
    if not old_spec.get("volumeName"):
        spec.pop("volumeName", None)
        old_spec.pop("volumeName", None)
    if not old_spec.get("storageClassName"):
        spec.pop("storageClassName", None)
        old_spec.pop("storageClassName", None)
    if spec != old_spec and not causes:
        causes.append(forbidden("spec", PVC_UPDATE_MSG))
    return causes


def _service(obj: dict, old: dict) -> list[dict]:
    spec, old_spec = _spec(obj), _spec(old)
    old_ip = old_spec.get("clusterIP")
    changed = spec.get("clusterIP") not in (None, old_ip)
    if old_ip and spec.get("type") != "ExternalName" and changed:
        return [
            field_error(
                "FieldValueInvalid",
                "spec.clusterIPs[0]",
                [spec.get("clusterIP")],
                "may not change once set",
            )
        ]
    return []


def _immutable_data(obj: dict, old: dict) -> list[dict]:
    if not old.get("immutable"):
        return []
    causes = []
    if not obj.get("immutable"):
        causes.append(forbidden("immutable", "field is immutable when `immutable` is set"))
    for key in ("data", "binaryData", "stringData"):
        if (obj.get(key) or {}) != (old.get(key) or {}) and key != "stringData":
            causes.append(forbidden(key, "field is immutable when `immutable` is set"))
    return causes


def _pv(obj: dict, old: dict) -> list[dict]:
    spec, old_spec = _spec(obj), _spec(old)
    for key in ("hostPath", "nfs", "csi", "local"):
        if key in old_spec and spec.get(key) != old_spec.get(key):
            return [
                forbidden(
                    "spec.persistentvolumesource",
                    "spec.persistentvolumesource is immutable after creation",
                )
            ]
    return []


_VALIDATORS = {
    ("", "Pod"): _pod,
    ("batch", "Job"): _job,
    ("apps", "Deployment"): _selector_immutable,
    ("apps", "ReplicaSet"): _selector_immutable,
    ("apps", "DaemonSet"): _selector_immutable,
    ("apps", "StatefulSet"): _stateful_set,
    ("", "PersistentVolumeClaim"): _pvc,
    ("", "PersistentVolume"): _pv,
    ("", "Service"): _service,
    ("", "Secret"): lambda obj, old: (
        _immutable_data(obj, old) + secrets.validate_secret_update(obj, old)
    ),
    ("", "ConfigMap"): _immutable_data,
}


def validate_update(obj: dict, old: dict) -> list[dict]:
    api_version = obj.get("apiVersion") or ""
    group = api_version.rpartition("/")[0]
    validator = _VALIDATORS.get((group, obj.get("kind")))
    return validator(obj, old) if validator is not None else []
