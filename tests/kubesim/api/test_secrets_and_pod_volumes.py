"""Secrets and the storage/secret fields of pods as kube-apiserver decodes, stores and validates
them, through the official client (API machinery only, no simulated cluster)."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = [pytest.mark.kubesim]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _error(excinfo) -> tuple[int, dict]:
    return excinfo.value.status, json.loads(excinfo.value.body)


def _causes(excinfo) -> list[tuple[str, str]]:
    status, body = _error(excinfo)
    assert status == 422, body
    return [(c["field"], c["message"]) for c in body["details"]["causes"]]


def _docker_config(*hosts: str) -> str:
    auths = {h: {"auth": _b64("robot:token")} for h in hosts}
    return _b64(json.dumps({"auths": auths}))


def test_string_data_is_merged_into_data_and_never_stored(core, namespace):
    created = core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "creds"},
            "data": {"user": _b64("old"), "token": _b64("kept")},
            "stringData": {"user": "alice", "password": "s3cret"},
        },
    )
    assert created.type == "Opaque"
    assert created.data == {
        "user": _b64("alice"),
        "token": _b64("kept"),
        "password": _b64("s3cret"),
    }
    assert created.string_data is None
    # a later write of stringData alone updates that key and keeps the rest
    patched = core.patch_namespaced_secret("creds", namespace, {"stringData": {"token": "new"}})
    assert patched.data["token"] == _b64("new")
    assert patched.data["user"] == _b64("alice")
    stored = core.read_namespaced_secret("creds", namespace)
    assert stored.string_data is None
    assert stored.data == patched.data


def test_secret_data_must_be_base64(core, namespace):
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_secret(
            namespace, {"metadata": {"name": "bad"}, "data": {"key": "not base64!"}}
        )
    status, body = _error(excinfo)
    assert status == 400
    assert body["reason"] == "BadRequest"
    assert body["message"] == (
        'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 3'
    )
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_secret(
            namespace, {"metadata": {"name": "bad"}, "data": {"k": "YWJj"[:3]}}
        )
    assert _error(excinfo)[0] == 400
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_secret(
            namespace, {"metadata": {"name": "bad"}, "data": {"bad key": _b64("x")}}
        )
    assert _causes(excinfo)[0][0] == "data[bad key]"
    assert "a valid config key must consist of alphanumeric characters" in _causes(excinfo)[0][1]


def test_dockerconfigjson_secret_needs_a_valid_config(core, namespace):
    ok = core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "pull"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": _docker_config("registry.example.com")},
        },
    )
    assert ok.type == "kubernetes.io/dockerconfigjson"
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_secret(
            namespace,
            {"metadata": {"name": "nokey"}, "type": "kubernetes.io/dockerconfigjson", "data": {}},
        )
    assert _causes(excinfo) == [("data[.dockerconfigjson]", "Required value")]
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_secret(
            namespace,
            {
                "metadata": {"name": "notjson"},
                "type": "kubernetes.io/dockerconfigjson",
                "stringData": {".dockerconfigjson": "{not json"},
            },
        )
    [(field, message)] = _causes(excinfo)
    assert field == "data[.dockerconfigjson]"
    assert message.startswith('Invalid value: "<secret contents redacted>": invalid character')
    # the type of a secret cannot change
    with pytest.raises(ApiException) as excinfo:
        core.patch_namespaced_secret("pull", namespace, {"type": "Opaque"})
    assert _causes(excinfo) == [("type", 'Invalid value: "Opaque": field is immutable')]


def test_secret_crud_and_watch(core, namespace):
    from kubernetes import watch

    core.create_namespaced_secret(namespace, {"metadata": {"name": "w"}, "stringData": {"a": "1"}})
    listed = core.list_namespaced_secret(namespace)
    assert [s.metadata.name for s in listed.items] == ["w"]
    stream = watch.Watch().stream(
        core.list_namespaced_secret,
        namespace,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=5,
    )
    core.replace_namespaced_secret(
        "w", namespace, {"metadata": {"name": "w"}, "stringData": {"b": "2"}}
    )
    core.delete_namespaced_secret("w", namespace)
    seen = []
    for event in stream:
        seen.append((event["type"], sorted((event["object"].data or {}).keys())))
        if event["type"] == "DELETED":
            break
    assert seen == [("MODIFIED", ["b"]), ("DELETED", ["b"])]


def _training_pod(name: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 120,
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": True}},
                {
                    "name": "creds",
                    "secret": {
                        "secretName": "creds",
                        "items": [{"key": "token", "path": "wandb/token", "mode": 0o400}],
                        "defaultMode": 0o440,
                    },
                },
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/team/trainer:1.0",
                    "env": [
                        {
                            "name": "WANDB_API_KEY",
                            "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}},
                        }
                    ],
                    "volumeMounts": [
                        {"name": "data", "mountPath": "/data", "readOnly": True},
                        {"name": "creds", "mountPath": "/etc/creds", "subPath": "wandb"},
                        {"name": "shm", "mountPath": "/dev/shm"},
                    ],
                }
            ],
        },
    }


def test_training_pod_fields_are_stored_and_returned_unchanged(core, kube_client, namespace):
    sent = _training_pod("train")
    created = core.create_namespaced_pod(namespace, sent)
    raw = kube_client.sanitize_for_serialization(created)
    spec = raw["spec"]
    assert spec["terminationGracePeriodSeconds"] == 120
    assert spec["imagePullSecrets"] == [{"name": "pull"}]
    assert spec["volumes"][:3] == sent["spec"]["volumes"]
    container = spec["containers"][0]
    assert container["env"] == sent["spec"]["containers"][0]["env"]
    mounts = [m for m in container["volumeMounts"] if m["name"] in ("data", "creds", "shm")]
    assert mounts == sent["spec"]["containers"][0]["volumeMounts"]
    again = kube_client.sanitize_for_serialization(core.read_namespaced_pod("train", namespace))
    assert again["spec"]["volumes"][:3] == sent["spec"]["volumes"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda s: s["containers"][0]["volumeMounts"].append(
                {"name": "missing", "mountPath": "/missing"}
            ),
            [("spec.containers[0].volumeMounts[3].name", 'Not found: "missing"')],
        ),
        (
            lambda s: s["containers"][0]["volumeMounts"].append(
                {"name": "shm", "mountPath": "/data"}
            ),
            [
                (
                    "spec.containers[0].volumeMounts[3].mountPath",
                    'Invalid value: "/data": must be unique',
                )
            ],
        ),
        (
            lambda s: s["volumes"].append({"name": "shm", "emptyDir": {}}),
            [("spec.volumes[3].name", 'Duplicate value: "shm"')],
        ),
        (
            lambda s: s["containers"][0]["volumeMounts"][1].update(subPath="../escape"),
            [
                (
                    "spec.containers[0].volumeMounts[1].subPath",
                    "Invalid value: \"../escape\": must not contain '..'",
                )
            ],
        ),
        (
            lambda s: s["volumes"][1]["secret"].update(defaultMode=0o1000),
            [
                (
                    "spec.volumes[1].secret.defaultMode",
                    "Invalid value: 512: must be a number between 0 and 0777 (octal), both "
                    "inclusive",
                )
            ],
        ),
        (
            lambda s: s["volumes"].append({"name": "empty"}),
            [("spec.volumes[3]", "Required value: must specify a volume type")],
        ),
        (
            lambda s: s["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"].pop("key"),
            [("spec.containers[0].env[0].valueFrom.secretKeyRef.key", "Required value")],
        ),
    ],
    ids=[
        "undeclared-volume",
        "duplicate-mount-path",
        "duplicate-volume",
        "subpath-escape",
        "default-mode",
        "no-volume-type",
        "secret-key-required",
    ],
)
def test_invalid_volume_fields_are_refused_with_upstream_causes(core, namespace, change, expected):
    body = _training_pod("bad")
    change(body["spec"])
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_pod(namespace, body)
    assert _causes(excinfo) == expected
    assert _error(excinfo)[1]["message"].startswith('Pod "bad" is invalid: ')


def test_the_same_rules_apply_to_job_templates(namespace, kube_client):
    batch = client.BatchV1Api(kube_client)
    template = _training_pod("x")
    template["spec"]["restartPolicy"] = "Never"
    template["spec"]["containers"][0]["volumeMounts"].append({"name": "nope", "mountPath": "/n"})
    with pytest.raises(ApiException) as excinfo:
        batch.create_namespaced_job(
            namespace, {"metadata": {"name": "j"}, "spec": {"template": template}}
        )
    assert ("spec.template.spec.containers[0].volumeMounts[3].name", 'Not found: "nope"') in (
        _causes(excinfo)
    )


def test_storage_objects_are_served(kube_client):
    storage = client.StorageV1Api(kube_client)
    storage.create_storage_class(
        {"metadata": {"name": "fast-nfs"}, "provisioner": "nfs.csi.k8s.io"}
    )
    assert "fast-nfs" in [c.metadata.name for c in storage.list_storage_class().items]
    storage.delete_storage_class("fast-nfs")
    core = client.CoreV1Api(kube_client)
    core.create_persistent_volume(
        {
            "metadata": {"name": "api-nfs-pv"},
            "spec": {
                "capacity": {"storage": "1Ti"},
                "accessModes": ["ReadWriteMany"],
                "nfs": {"server": "nfs.example.com", "path": "/exports/datasets"},
            },
        }
    )
    pv = core.read_persistent_volume("api-nfs-pv")
    assert (pv.spec.nfs.server, pv.spec.nfs.path) == ("nfs.example.com", "/exports/datasets")
    core.delete_persistent_volume("api-nfs-pv")
