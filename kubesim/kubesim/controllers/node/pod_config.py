"""What a kubelet reads from the API before it starts a container, and how it words the failures:

- `env_problem`: an env `valueFrom.secretKeyRef`/`configMapKeyRef` or an `envFrom` source whose
  object or key is missing (and not optional) -- the container waits with
  CreateContainerConfigError and the message kubelet's makeEnvironmentVariables returns
  (`secret "S" not found`, `couldn't find key K in Secret NS/S`);
- `env_values`: the values those sources give (Secret data decoded);
- `pull_problem`: an image on a registry the cluster lists as private (`registries.private`)
  pulled without an imagePullSecret whose docker config has credentials for that host -- the
  registry answers 401, as containerd reports it;
- `missing_pull_secrets`: imagePullSecrets that do not exist (the kubelet warns and pulls
  anonymously).
"""

from __future__ import annotations

import base64
import binascii

from kubesim.api.secrets import docker_auths

DOCKER_HUB = "docker.io"


def image_registry(image: str) -> str:
    """The registry host of an image reference (docker.io when the first part is not a host)."""
    first, slash, _rest = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first.lower()
    return DOCKER_HUB


def _repository_and_tag(image: str) -> tuple[str, str]:
    """("team/trainer", "1.0") for registry.example.com/team/trainer:1.0 (digest refs too)."""
    _host, _slash, rest = image.partition("/")
    if "@" in rest:
        repo, _, digest = rest.partition("@")
        return repo, digest
    repo, colon, tag = rest.rpartition(":")
    if not colon or "/" in tag:
        return rest, "latest"
    return repo, tag


def pull_problem(store, private_registries: list[str], pod: dict, image: str) -> str | None:
    """Why pulling `image` for this pod fails (the CRI error text), or None when it may pull."""
    host = image_registry(image)
    if host not in private_registries:
        return None
    namespace = pod["metadata"].get("namespace") or "default"
    for ref in (pod.get("spec") or {}).get("imagePullSecrets") or []:
        secret = store.try_get("v1", "Secret", namespace, (ref or {}).get("name"))
        if secret is not None and host in docker_auths(secret):
            return None
    repo, tag = _repository_and_tag(image)
    kind = "manifests"
    return (
        f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": '
        f"unexpected status from HEAD request to https://{host}/v2/{repo}/{kind}/{tag}: "
        "401 Unauthorized"
    )


def missing_pull_secrets(store, pod: dict) -> list[str]:
    namespace = pod["metadata"].get("namespace") or "default"
    names = [
        (ref or {}).get("name")
        for ref in (pod.get("spec") or {}).get("imagePullSecrets") or []
        if (ref or {}).get("name")
    ]
    return [n for n in names if store.try_get("v1", "Secret", namespace, n) is None]


def _decode(value: str) -> str:
    try:
        return base64.b64decode(value).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return ""


def _lookup(store, namespace: str, kind: str, name: str, key: str | None):
    """(value, problem): the key's value of a Secret/ConfigMap, or the kubelet's error."""
    obj = store.try_get("v1", kind, namespace, name)
    word = "secret" if kind == "Secret" else "configmap"
    if obj is None:
        return None, f'{word} "{name}" not found'
    if key is None:
        return obj, None
    data = obj.get("data") or {}
    if key in data:
        return (_decode(data[key]) if kind == "Secret" else str(data[key])), None
    if kind == "ConfigMap" and key in (obj.get("binaryData") or {}):
        return _decode(obj["binaryData"][key]), None
    return None, f"couldn't find key {key} in {kind} {namespace}/{name}"


def _sources(container: dict):
    """(kind, name, key or None for envFrom, env name or prefix, optional) in kubelet order:
    envFrom first, then env."""
    for item in container.get("envFrom") or []:
        for field, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            ref = (item or {}).get(field)
            if ref:
                yield kind, ref.get("name"), None, item.get("prefix") or "", ref.get("optional")
    for item in container.get("env") or []:
        source = (item or {}).get("valueFrom") or {}
        for field, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            ref = source.get(field)
            if ref:
                yield kind, ref.get("name"), ref.get("key"), item.get("name"), ref.get("optional")


def env_problem(store, pod: dict, container: dict) -> str | None:
    """The CreateContainerConfigError message for this container, or None."""
    namespace = pod["metadata"].get("namespace") or "default"
    for kind, name, key, _env, optional in _sources(container):
        _value, problem = _lookup(store, namespace, kind, name, key)
        if problem and not optional:
            return problem
    return None


def env_values(store, pod: dict, container: dict) -> dict[str, str]:
    """The variables the container's Secret/ConfigMap sources give (missing optional ones: none)."""
    namespace = pod["metadata"].get("namespace") or "default"
    out: dict[str, str] = {}
    for kind, name, key, env_name, _optional in _sources(container):
        value, problem = _lookup(store, namespace, kind, name, key)
        if problem:
            continue
        if key is None:
            for data_key, raw in (value.get("data") or {}).items():
                text = _decode(raw) if kind == "Secret" else str(raw)
                out[f"{env_name}{data_key}"] = text
        else:
            out[env_name] = value
    return out
