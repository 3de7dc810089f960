"""Validation of a pod spec's volumes, volume mounts and env sources, worded as
pkg/apis/core/validation words it (ValidateVolumes, ValidateVolumeMounts, validateEnvVarValueFrom).

Volume names (required, DNS label, unique) are checked in builtin_validation.validate_pod_spec;
here: exactly one source per volume, the fields each source the portal uses requires (secret,
persistentVolumeClaim, configMap, emptyDir), mounts that name a declared volume at a unique
mountPath with a relative subPath, and env valueFrom with exactly one source whose secret or
ConfigMap key selector names a key.
"""

from __future__ import annotations

from kubesim.api.quantity import Quantity, QuantityError
from kubesim.api.schema import field_error, forbidden, invalid, required

FILE_MODE_MSG = "must be a number between 0 and 0777 (octal), both inclusive"
ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")
ENV_SOURCES_MSG = (
    "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"
)
# The volume sources of core/v1 VolumeSource (one, and only one, per volume).
VOLUME_SOURCES = (
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
)


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _mode_errors(value, field: str) -> list[dict]:
    if value is None or not _int(value):
        return []
    if not 0 <= value <= 0o777:
        return [invalid(field, value, FILE_MODE_MSG)]
    return []


def _descending_path_errors(value, field: str) -> list[dict]:
    """validateLocalDescendingPath: relative, and no '..' element."""
    if not isinstance(value, str) or not value:
        return []
    causes = []
    if value.startswith("/"):
        causes.append(invalid(field, value, "must be a relative path"))
    if ".." in value.replace("\\", "/").split("/"):
        causes.append(invalid(field, value, "must not contain '..'"))
    return causes


def _key_to_path_errors(items, field: str) -> list[dict]:
    causes: list[dict] = []
    for index, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        path = f"{field}[{index}]"
        if not item.get("key"):
            causes.append(required(f"{path}.key"))
        if not item.get("path"):
            causes.append(required(f"{path}.path"))
        else:
            causes.extend(_descending_path_errors(item["path"], f"{path}.path"))
            if isinstance(item["path"], str) and item["path"].startswith(".."):
                causes.append(invalid(f"{path}.path", item["path"], "must not start with '..'"))
        causes.extend(_mode_errors(item.get("mode"), f"{path}.mode"))
    return causes


def _source_errors(volume: dict, source: str, field: str) -> list[dict]:
    body = volume.get(source)
    if not isinstance(body, dict):
        return []
    path = f"{field}.{source}"
    causes: list[dict] = []
    if source == "secret":
        if not body.get("secretName"):
            causes.append(required(f"{path}.secretName"))
        causes.extend(_mode_errors(body.get("defaultMode"), f"{path}.defaultMode"))
        causes.extend(_key_to_path_errors(body.get("items"), f"{path}.items"))
    elif source == "configMap":
        if not body.get("name"):
            causes.append(required(f"{path}.name"))
        causes.extend(_mode_errors(body.get("defaultMode"), f"{path}.defaultMode"))
        causes.extend(_key_to_path_errors(body.get("items"), f"{path}.items"))
    elif source == "persistentVolumeClaim":
        if not body.get("claimName"):
            causes.append(required(f"{path}.claimName"))
    elif source == "emptyDir":
        limit = body.get("sizeLimit")
        if limit is not None:
            try:
                negative = Quantity.parse(limit).sign() < 0
            except QuantityError:
                negative = False  # the decoder reports a malformed quantity
            if negative:
                causes.append(
                    forbidden(
                        f"{path}.sizeLimit", "SizeLimit field must be a valid resource quantity"
                    )
                )
    return causes


def validate_volumes(volumes, field: str) -> list[dict]:
    """The sources of spec.volumes (names are checked by the caller)."""
    causes: list[dict] = []
    for index, volume in enumerate(volumes if isinstance(volumes, list) else []):
        if not isinstance(volume, dict):
            continue
        path = f"{field}[{index}]"
        present = [s for s in VOLUME_SOURCES if volume.get(s) is not None]
        if not present:
            causes.append(required(path, "must specify a volume type"))
            continue
        for extra in present[1:]:
            causes.append(forbidden(f"{path}.{extra}", "may not specify more than 1 volume type"))
        causes.extend(_source_errors(volume, present[0], path))
    return causes


def _key_selector_errors(selector, field: str) -> list[dict]:
    from kubesim.api.secrets import _CONFIG_KEY_RE, CONFIG_KEY_MSG

    if not isinstance(selector, dict):
        return []
    causes: list[dict] = []
    if not selector.get("name"):
        causes.append(required(f"{field}.name"))
    key = selector.get("key")
    if not key:
        causes.append(required(f"{field}.key"))
    elif isinstance(key, str) and not _CONFIG_KEY_RE.match(key):
        causes.append(invalid(f"{field}.key", key, CONFIG_KEY_MSG))
    return causes


def validate_container(container: dict, field: str, volume_names: set[str]) -> list[dict]:
    """A container's volumeMounts and env valueFrom."""
    causes: list[dict] = []
    mounts = container.get("volumeMounts") or []
    paths: set[str] = set()
    for index, mount in enumerate(mounts if isinstance(mounts, list) else []):
        if not isinstance(mount, dict):
            continue
        path = f"{field}.volumeMounts[{index}]"
        name = mount.get("name")
        if not name:
            causes.append(required(f"{path}.name"))
        elif name not in volume_names:
            causes.append(field_error("FieldValueNotFound", f"{path}.name", name))
        mount_path = mount.get("mountPath")
        if not mount_path:
            causes.append(required(f"{path}.mountPath"))
        elif mount_path in paths:
            causes.append(invalid(f"{path}.mountPath", mount_path, "must be unique"))
        else:
            paths.add(mount_path)
        causes.extend(_descending_path_errors(mount.get("subPath"), f"{path}.subPath"))
    env = container.get("env") or []
    for index, item in enumerate(env if isinstance(env, list) else []):
        if not isinstance(item, dict) or item.get("valueFrom") is None:
            continue
        path = f"{field}.env[{index}].valueFrom"
        source = item["valueFrom"]
        if not isinstance(source, dict):
            continue
        present = [s for s in ENV_SOURCES if source.get(s) is not None]
        if item.get("value"):
            causes.append(invalid(path, "", "may not be specified when `value` is not empty"))
        if not present:
            causes.append(invalid(path, "", ENV_SOURCES_MSG))
        elif len(present) > 1:
            causes.append(invalid(path, "", "may not have more than one field specified at a time"))
        for name in ("secretKeyRef", "configMapKeyRef"):
            causes.extend(_key_selector_errors(source.get(name), f"{path}.{name}"))
    env_from = container.get("envFrom") or []
    for index, item in enumerate(env_from if isinstance(env_from, list) else []):
        if not isinstance(item, dict):
            continue
        for name in ("secretRef", "configMapRef"):
            ref = item.get(name)
            if isinstance(ref, dict) and not ref.get("name"):
                causes.append(required(f"{field}.envFrom[{index}].{name}.name"))
    return causes


def validate_pod_volumes(spec: dict, field: str) -> list[dict]:
    """Volumes, and every (init) container's mounts and env sources, of one pod spec."""
    volumes = spec.get("volumes") or []
    causes = validate_volumes(volumes, f"{field}.volumes")
    names = {
        v.get("name")
        for v in (volumes if isinstance(volumes, list) else [])
        if isinstance(v, dict) and v.get("name")
    }
    for key in ("initContainers", "containers"):
        containers = spec.get(key) or []
        for index, container in enumerate(containers if isinstance(containers, list) else []):
            if isinstance(container, dict):
                causes.extend(validate_container(container, f"{field}.{key}[{index}]", names))
    return causes
