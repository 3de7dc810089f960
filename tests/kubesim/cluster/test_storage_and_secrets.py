"""What a training pod needs from storage and secrets, as the simulated PV controller, scheduler and
kubelets of the default cluster (speed 100) handle it, seen through the official client: claims
bound dynamically or to a named (NFS) volume, pods held back by a missing claim, Secret, Secret
key or pull credential until it appears, and graceful termination in simulated time."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes import client
from kubesim.testing import wait_for

pytestmark = [pytest.mark.kubesim]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _pod(name: str, command: list[str] | None = None, **spec) -> dict:
    body = {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "busybox:1.37", "command": command or ["sleep", "3600"]}
            ],
        },
    }
    body["spec"].update(spec)
    return body


def _claim(name: str, size: str = "5Gi", **spec) -> dict:
    body = {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        },
    }
    body["spec"].update(spec)
    return body


def _events(core, namespace: str, name: str) -> dict[str, list[tuple[str, str]]]:
    """reason -> [(type, message)] of the events about one object."""
    out: dict[str, list[tuple[str, str]]] = {}
    for e in core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    ).items:
        out.setdefault(e.reason, []).append((e.type, e.message))
    return out


def _waiting(core, namespace: str, name: str):
    statuses = core.read_namespaced_pod(name, namespace).status.container_statuses or []
    return statuses[0].state.waiting if statuses and statuses[0].state.waiting else None


def _phase(core, namespace: str, name: str) -> str:
    return core.read_namespaced_pod(name, namespace).status.phase


def _running(core, namespace: str, name: str) -> bool:
    return _phase(core, namespace, name) == "Running"


# -- claims and volumes -------------------------------------------------------------------------


def test_default_class_provisions_and_binds_a_claim(api_client, core, namespace):
    storage = client.StorageV1Api(api_client)
    standard = storage.read_storage_class("standard")
    assert standard.metadata.annotations["storageclass.kubernetes.io/is-default-class"] == "true"
    core.create_namespaced_persistent_volume_claim(namespace, _claim("ckpt", "50Gi"))

    def bound():
        claim = core.read_namespaced_persistent_volume_claim("ckpt", namespace)
        return claim if claim.status.phase == "Bound" else None

    claim = wait_for(bound, timeout=20, message="the claim never bound")
    assert claim.spec.storage_class_name == "standard"
    volume = core.read_persistent_volume(claim.spec.volume_name)
    assert volume.status.phase == "Bound"
    assert volume.spec.claim_ref.name == "ckpt"
    assert volume.spec.claim_ref.namespace == namespace
    assert volume.spec.claim_ref.uid == claim.metadata.uid
    assert volume.spec.capacity == {"storage": "50Gi"}
    assert (
        "Normal",
        f"Successfully provisioned volume {claim.spec.volume_name}",
    ) in _events(core, namespace, "ckpt")["ProvisioningSucceeded"]


def _nfs_volume(name: str, size: str = "1Ti", modes=("ReadWriteMany",)) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": list(modes),
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "nfs": {"server": "nfs.example.com", "path": f"/exports/{name}"},
        },
    }


def test_a_claim_naming_an_nfs_volume_binds_to_it(core, namespace):
    pv_name = f"{namespace}-datasets"
    core.create_persistent_volume(_nfs_volume(pv_name))
    wait_for(lambda: core.read_persistent_volume(pv_name).status.phase == "Available", timeout=20)
    core.create_namespaced_persistent_volume_claim(
        namespace,
        _claim(
            "datasets",
            "500Gi",
            accessModes=["ReadWriteMany"],
            storageClassName="",
            volumeName=pv_name,
        ),
    )

    def bound():
        claim = core.read_namespaced_persistent_volume_claim("datasets", namespace)
        return claim if claim.status.phase == "Bound" else None

    claim = wait_for(bound, timeout=20, message="the static claim never bound")
    assert claim.spec.volume_name == pv_name
    assert claim.status.capacity == {"storage": "1Ti"}
    assert claim.status.access_modes == ["ReadWriteMany"]
    volume = core.read_persistent_volume(pv_name)
    assert volume.status.phase == "Bound"
    assert (volume.spec.claim_ref.namespace, volume.spec.claim_ref.name) == (namespace, "datasets")
    assert volume.spec.nfs.server == "nfs.example.com"
    # a pod using the claim read-only runs
    core.create_namespaced_pod(
        namespace,
        _pod(
            "reader",
            volumes=[
                {
                    "name": "data",
                    "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True},
                }
            ],
        ),
    )
    wait_for(lambda: _running(core, namespace, "reader"), timeout=20)
    # another claim for the same volume stays Pending with the controller's event
    core.create_namespaced_persistent_volume_claim(
        namespace,
        _claim(
            "late", "1Gi", accessModes=["ReadWriteMany"], storageClassName="", volumeName=pv_name
        ),
    )
    message = wait_for(lambda: _events(core, namespace, "late").get("FailedBinding"), timeout=20)
    assert message[0] == ("Warning", f'volume "{pv_name}" already bound to a different claim.')
    assert core.read_namespaced_persistent_volume_claim("late", namespace).status.phase == "Pending"


def test_a_named_volume_that_does_not_fit_leaves_the_claim_pending(core, namespace):
    pv_name = f"{namespace}-pv"
    core.create_persistent_volume(_nfs_volume(pv_name, "1Ti", ("ReadWriteMany", "ReadWriteOnce")))
    wait_for(lambda: core.read_persistent_volume(pv_name).status.phase == "Available", timeout=20)
    cases = [
        ("small", "2Ti", {}, "requested PV is too small"),
        ("modes", "1Gi", {"accessModes": ["ReadOnlyMany"]}, "incompatible accessMode"),
        # no storageClassName: the default class is assigned, as upstream does
        ("classed", "1Gi", {"storageClassName": None}, "storageClassName does not match"),
    ]
    for name, size, change, problem in cases:
        spec = {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv_name}
        spec.update(change)
        if spec["storageClassName"] is None:
            del spec["storageClassName"]
        core.create_namespaced_persistent_volume_claim(namespace, _claim(name, size, **spec))
        events = wait_for(
            lambda name=name: _events(core, namespace, name).get("VolumeMismatch"), timeout=20
        )
        assert events[0] == ("Warning", f'Cannot bind to requested volume "{pv_name}": {problem}')
        claim = core.read_namespaced_persistent_volume_claim(name, namespace)
        assert claim.status.phase == "Pending"
    assert core.read_persistent_volume(pv_name).status.phase == "Available"
    core.delete_persistent_volume(pv_name)


def test_a_pod_waits_for_its_claim_to_exist(core, namespace):
    core.create_namespaced_pod(
        namespace,
        _pod(
            "needs-claim",
            volumes=[{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}],
        ),
    )
    events = wait_for(
        lambda: _events(core, namespace, "needs-claim").get("FailedScheduling"), timeout=20
    )
    assert events[0][0] == "Warning"
    assert 'persistentvolumeclaim "ckpt" not found' in events[0][1]
    pod = core.read_namespaced_pod("needs-claim", namespace)
    assert pod.status.phase == "Pending"
    assert not pod.spec.node_name
    # level-triggered: once the claim exists (and binds) the pod is scheduled and runs
    core.create_namespaced_persistent_volume_claim(namespace, _claim("ckpt"))
    wait_for(lambda: _running(core, namespace, "needs-claim"), timeout=30)


# -- secrets ------------------------------------------------------------------------------------


def test_a_missing_volume_secret_keeps_the_pod_container_creating(core, namespace):
    core.create_namespaced_pod(
        namespace,
        _pod(
            "mounts-secret",
            volumes=[{"name": "creds", "secret": {"secretName": "wandb"}}],
        ),
    )
    events = wait_for(
        lambda: _events(core, namespace, "mounts-secret").get("FailedMount"), timeout=20
    )
    assert events[0] == (
        "Warning",
        'MountVolume.SetUp failed for volume "creds" : secret "wandb" not found',
    )
    waiting = _waiting(core, namespace, "mounts-secret")
    assert waiting.reason == "ContainerCreating"
    assert _phase(core, namespace, "mounts-secret") == "Pending"
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "wandb"}, "stringData": {"k": "v"}}
    )
    wait_for(lambda: _running(core, namespace, "mounts-secret"), timeout=20)


def test_a_missing_secret_item_key_is_a_mount_failure(core, namespace):
    core.create_namespaced_secret(namespace, {"metadata": {"name": "s"}, "stringData": {"a": "1"}})
    core.create_namespaced_pod(
        namespace,
        _pod(
            "item",
            volumes=[
                {"name": "v", "secret": {"secretName": "s", "items": [{"key": "b", "path": "b"}]}}
            ],
        ),
    )
    events = wait_for(lambda: _events(core, namespace, "item").get("FailedMount"), timeout=20)
    assert (
        events[0][1]
        == 'MountVolume.SetUp failed for volume "v" : references non-existent secret key: b'
    )
    core.patch_namespaced_secret("s", namespace, {"stringData": {"b": "2"}})
    wait_for(lambda: _running(core, namespace, "item"), timeout=20)


def _env_pod(name: str, secret: str, key: str) -> dict:
    body = _pod(name, ["sh", "-c", 'echo "token=$TOKEN"; sleep 3600'])
    body["spec"]["containers"][0]["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
    ]
    return body


def test_an_env_secret_ref_to_a_missing_secret_or_key_is_a_config_error(core, namespace):
    core.create_namespaced_pod(namespace, _env_pod("env-secret", "api", "token"))

    def config_error():
        waiting = _waiting(core, namespace, "env-secret")
        return waiting if waiting and waiting.reason == "CreateContainerConfigError" else None

    waiting = wait_for(config_error, timeout=20)
    assert waiting.message == 'secret "api" not found'
    failed = wait_for(lambda: _events(core, namespace, "env-secret").get("Failed"), timeout=20)
    assert ("Warning", 'Error: secret "api" not found') in failed
    assert _phase(core, namespace, "env-secret") == "Pending"
    # the secret appears without the key: the message names the key
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "api"}, "stringData": {"x": "1"}}
    )
    wait_for(
        lambda: (
            (_waiting(core, namespace, "env-secret") or client.V1ContainerStateWaiting()).message
            == f"couldn't find key token in Secret {namespace}/api"
        ),
        timeout=20,
    )
    assert ("Warning", f"Error: couldn't find key token in Secret {namespace}/api") in _events(
        core, namespace, "env-secret"
    )["Failed"]
    core.patch_namespaced_secret("api", namespace, {"stringData": {"token": "abc123"}})
    wait_for(lambda: _running(core, namespace, "env-secret"), timeout=20)
    log = wait_for(lambda: core.read_namespaced_pod_log("env-secret", namespace), timeout=20)
    assert "token=abc123" in log


# -- private registries -------------------------------------------------------------------------


def _pull_secret(name: str, host: str) -> dict:
    config = {"auths": {host: {"auth": _b64("robot:token")}}}
    return {
        "metadata": {"name": name},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": json.dumps(config)},
    }


def test_a_private_registry_needs_a_pull_secret_for_that_host(core, namespace):
    image = f"registry.example.com/team/{namespace}:1.0"
    body = _pod("private", imagePullSecrets=[{"name": "regcred"}])
    body["spec"]["containers"][0]["image"] = image
    core.create_namespaced_pod(namespace, body)

    def waiting_reason():
        waiting = _waiting(core, namespace, "private")
        return waiting.reason if waiting else None

    wait_for(lambda: waiting_reason() == "ImagePullBackOff", timeout=20)
    events = _events(core, namespace, "private")
    pull_failures = [m for t, m in events["Failed"] if m.startswith("Failed to pull image")]
    assert pull_failures[0] == (
        f'Failed to pull image "{image}": failed to pull and unpack image "{image}": failed to '
        f'resolve reference "{image}": unexpected status from HEAD request to '
        f"https://registry.example.com/v2/team/{namespace}/manifests/1.0: 401 Unauthorized"
    )
    assert ("Warning", "Error: ErrImagePull") in events["Failed"]
    assert ("Warning", "Error: ImagePullBackOff") in events["Failed"]
    assert ("Normal", f'Back-off pulling image "{image}"') in events["BackOff"]
    assert events["FailedToRetrieveImagePullSecret"][0] == (
        "Warning",
        "Unable to retrieve some image pull secrets (regcred); attempting to pull the image may "
        "not succeed.",
    )
    # credentials for another registry do not help
    core.create_namespaced_secret(namespace, _pull_secret("regcred", "ghcr.io"))
    assert _phase(core, namespace, "private") == "Pending"
    core.delete_namespaced_secret("regcred", namespace)
    core.create_namespaced_secret(
        namespace, _pull_secret("regcred", "https://registry.example.com")
    )
    wait_for(lambda: _running(core, namespace, "private"), timeout=30)
    # public images need nothing
    core.create_namespaced_pod(namespace, _pod("public"))
    wait_for(lambda: _running(core, namespace, "public"), timeout=20)


# -- graceful termination -----------------------------------------------------------------------


def test_deletion_keeps_the_pod_terminating_for_its_grace_period(core, namespace):
    names = ("spec-grace", "option-grace", "shortened")
    for name in names:
        body = _pod(name)
        body["metadata"]["finalizers"] = ["example.com/keep"]  # keeps the final status readable
        body["spec"]["terminationGracePeriodSeconds"] = 300
        core.create_namespaced_pod(namespace, body)
    for name in names:
        wait_for(lambda name=name: _running(core, namespace, name), timeout=20)
    core.delete_namespaced_pod("spec-grace", namespace)
    # Terminating: still there and still running while the grace period (3 s wall) lasts
    terminating = core.read_namespaced_pod("spec-grace", namespace)
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.status.phase == "Running"
    core.delete_namespaced_pod("option-grace", namespace, grace_period_seconds=40)
    core.delete_namespaced_pod("shortened", namespace)
    first = core.read_namespaced_pod("shortened", namespace).metadata
    core.delete_namespaced_pod("shortened", namespace, grace_period_seconds=20)
    # a longer period in a later delete does not extend it
    core.delete_namespaced_pod("shortened", namespace, grace_period_seconds=200)
    pods = {name: core.read_namespaced_pod(name, namespace) for name in names}
    assert first.deletion_grace_period_seconds == 300
    expected = {"spec-grace": 300, "option-grace": 40, "shortened": 20}
    for name, grace in expected.items():
        meta = pods[name].metadata
        assert meta.deletion_grace_period_seconds == grace

        def finished(name=name):
            status = core.read_namespaced_pod(name, namespace).status.container_statuses[0]
            return status.state.terminated

        terminated = wait_for(finished, timeout=30)
        # a shell ignores SIGTERM: killed (137) when the grace period, in simulated time, ends;
        # the deletionTimestamp is that moment, as upstream sets it (delete time + grace)
        assert terminated.exit_code == 137
        late = (terminated.finished_at - meta.deletion_timestamp).total_seconds()
        assert -2 <= late <= 15, (name, late)
        core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}})
    # the first delete of "shortened" announced the 300 s deadline
    assert (
        first.deletion_timestamp - pods["shortened"].metadata.deletion_timestamp
    ).total_seconds() > 200
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, timeout=20)
