"""Persistent volumes, as kube-controller-manager's PV controller and the DefaultStorageClass
admission plugin handle them, and the volume checks the scheduler and kubelet make:

- a new PVC gets `status.phase: Pending`, and without `storageClassName` the default
  StorageClass (the one annotated `storageclass.kubernetes.io/is-default-class: "true"`; kubesim
  starts with `standard`, a simulated provisioner) -- also when it names a volume, as upstream;
- a PVC naming a PV (`spec.volumeName`, static binding, e.g. an NFS export) binds to it when it
  fits (`volume_mismatch`), else stays Pending with VolumeMismatch ("Cannot bind to requested
  volume ...") or FailedBinding ("... already bound to a different claim.");
- a Pending PVC binds to an Available PV of its class whose capacity and access modes fit (the
  smallest), or, with a class whose provisioner kubesim simulates, to a new PV `pvc-<uid>`
  (WaitForFirstConsumer classes wait until a pod using the claim is scheduled); both sides get
  Bound, `spec.volumeName`/`spec.claimRef`, and the ProvisioningSucceeded/FailedBinding events;
- `claim_problem(pod)`: why a pod cannot be scheduled for its claims (missing, unbound);
- `mount_problems(pod)`: the volumes a kubelet cannot set up (missing ConfigMap, Secret, Secret
  item key, claim), worded as the kubelet's FailedMount events.
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback

from kubesim.api import errors
from kubesim.api.quantity import Quantity, QuantityError
from kubesim.controllers import events
from kubesim.controllers.context import follow

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
DEFAULT_CLASS = "standard"
SIMULATED_PROVISIONER = "kubesim.dev/simulated"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
COMPONENT = "persistentvolume-controller"


def _default_class(store) -> dict | None:
    for sc in store.list("storage.k8s.io/v1", "StorageClass", None):
        if (sc["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true":
            return sc
    return None


def default_storage_class(store):
    def hook(operation: str, claim: dict, old: dict | None) -> None:
        if operation != "CREATE":
            return
        spec = claim.setdefault("spec", {})
        spec.setdefault("volumeMode", "Filesystem")
        claim["status"] = {"phase": "Pending"}  # the PV controller's first sync, at once
        # as upstream, a claim naming a volume gets the default class too: a static claim for a
        # class-less PV (an NFS export) must say storageClassName: ""
        if spec.get("storageClassName") is not None:
            return
        default = _default_class(store)
        if default is not None:
            spec["storageClassName"] = default["metadata"]["name"]

    return hook


def pv_defaults(operation: str, pv: dict, old: dict | None) -> None:
    if operation != "CREATE":
        return
    spec = pv.setdefault("spec", {})
    spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    spec.setdefault("volumeMode", "Filesystem")
    pv["status"] = {"phase": "Pending"}


def claim_problem(store, pod: dict) -> str | None:
    """'persistentvolumeclaim "x" not found' / 'pod has unbound immediate
    PersistentVolumeClaims', or None when every claim of the pod is usable."""
    namespace = pod["metadata"].get("namespace")
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        source = volume.get("persistentVolumeClaim")
        if not source:
            continue
        claim_name = source.get("claimName")
        claim = store.try_get("v1", "PersistentVolumeClaim", namespace, claim_name)
        if claim is None:
            return f'persistentvolumeclaim "{claim_name}" not found'
        if claim["metadata"].get("deletionTimestamp"):
            return f'persistentvolumeclaim "{claim_name}" is being deleted'
        if (claim.get("status") or {}).get("phase") != "Bound":
            class_name = (claim.get("spec") or {}).get("storageClassName")
            sc = (
                store.try_get("storage.k8s.io/v1", "StorageClass", None, class_name)
                if class_name
                else None
            )
            if (sc or {}).get("volumeBindingMode") != "WaitForFirstConsumer":
                return "pod has unbound immediate PersistentVolumeClaims"
    return None


def mount_problems(store, pod: dict) -> list[tuple[str, str]]:
    """(volume name, FailedMount message) for each volume the kubelet cannot set up."""
    namespace = pod["metadata"].get("namespace")
    out = []
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = volume.get("name")
        if volume.get("configMap"):
            ref = volume["configMap"]
            if (
                not ref.get("optional")
                and store.try_get("v1", "ConfigMap", namespace, ref.get("name")) is None
            ):
                out.append(
                    (
                        name,
                        f'MountVolume.SetUp failed for volume "{name}" : configmap '
                        f'"{ref.get("name")}" not found',
                    )
                )
        elif volume.get("secret"):
            ref = volume["secret"]
            secret = store.try_get("v1", "Secret", namespace, ref.get("secretName"))
            if secret is None and not ref.get("optional"):
                out.append(
                    (
                        name,
                        f'MountVolume.SetUp failed for volume "{name}" : secret '
                        f'"{ref.get("secretName")}" not found',
                    )
                )
            elif secret is not None and not ref.get("optional"):
                data = secret.get("data") or {}
                missing = [i.get("key") for i in ref.get("items") or [] if i.get("key") not in data]
                if missing:
                    out.append(
                        (
                            name,
                            f'MountVolume.SetUp failed for volume "{name}" : references '
                            f"non-existent secret key: {missing[0]}",
                        )
                    )
        elif volume.get("persistentVolumeClaim"):
            claim_name = volume["persistentVolumeClaim"].get("claimName")
            claim = store.try_get("v1", "PersistentVolumeClaim", namespace, claim_name)
            if claim is None or (claim.get("status") or {}).get("phase") != "Bound":
                out.append(
                    (
                        name,
                        f"Unable to attach or mount volumes: unmounted volumes=[{name}], "
                        f'unattached volumes=[{name}]: persistentvolumeclaim "{claim_name}" '
                        + ("not found" if claim is None else "is not bound"),
                    )
                )
    return out


def _capacity(obj: dict, where: str) -> Quantity | None:
    spec = obj.get("spec") or {}
    value = (
        (spec.get("capacity") or {}).get("storage")
        if where == "pv"
        else ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    )
    try:
        return Quantity.parse(value) if value is not None else None
    except QuantityError:
        return None


def volume_mismatch(volume: dict, claim: dict) -> str | None:
    """Why a PV cannot satisfy a claim, in checkVolumeSatisfyClaim's words (None: it can)."""
    pv_spec = volume.get("spec") or {}
    spec = claim.get("spec") or {}
    if volume["metadata"].get("deletionTimestamp"):
        return f'the volume is marked for deletion "{volume["metadata"]["name"]}"'
    wanted, size = _capacity(claim, "pvc"), _capacity(volume, "pv")
    if wanted is not None and (size is None or size < wanted):
        return "requested PV is too small"
    if (pv_spec.get("storageClassName") or "") != (spec.get("storageClassName") or ""):
        return "storageClassName does not match"
    if (pv_spec.get("volumeMode") or "Filesystem") != (spec.get("volumeMode") or "Filesystem"):
        return "incompatible volumeMode"
    if not set(spec.get("accessModes") or []) <= set(pv_spec.get("accessModes") or []):
        return "incompatible accessMode"
    return None


class VolumeBinder:
    def __init__(self, ctx):
        self.ctx = ctx
        self.store = ctx.store
        self.wake = asyncio.Event()

    def poke(self, event_type: str, obj: dict) -> None:
        self.wake.set()

    def on_pod(self, event_type: str, pod: dict) -> None:
        """A scheduled pod may be the first consumer a WaitForFirstConsumer claim waits for."""
        spec = pod.get("spec") or {}
        if spec.get("nodeName") and any(
            v.get("persistentVolumeClaim") for v in spec.get("volumes") or []
        ):
            self.wake.set()

    async def loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(0.05)
            try:
                self.sync()
            except Exception:
                traceback.print_exc()

    def sync(self) -> None:
        claims = [
            c
            for c in self.store.list("v1", "PersistentVolumeClaim", None)
            if (c.get("status") or {}).get("phase") != "Bound"
            and not c["metadata"].get("deletionTimestamp")
        ]
        for claim in claims:
            with contextlib.suppress(errors.ApiError):
                self._bind_claim(claim)
        self._release_volumes()

    def _bind_claim(self, claim: dict) -> None:
        spec = claim.get("spec") or {}
        namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        class_name = spec.get("storageClassName") or ""
        wanted = _capacity(claim, "pvc")
        modes = set(spec.get("accessModes") or [])
        volume = None
        if spec.get("volumeName"):
            volume = self._requested_volume(claim, spec["volumeName"])
            if volume is None:
                return
        else:
            candidates = []
            for pv in self.store.list("v1", "PersistentVolume", None):
                pv_spec = pv.get("spec") or {}
                if (pv.get("status") or {}).get("phase") not in ("Available", "Pending", None):
                    continue
                if pv_spec.get("claimRef"):
                    ref = pv_spec["claimRef"]
                    if (ref.get("namespace"), ref.get("name")) != (namespace, name):
                        continue
                if (pv_spec.get("storageClassName") or "") != class_name:
                    continue
                if not modes <= set(pv_spec.get("accessModes") or []):
                    continue
                size = _capacity(pv, "pv")
                if wanted is not None and (size is None or size < wanted):
                    continue
                candidates.append((size, pv))
            if candidates:
                candidates.sort(key=lambda item: item[0] or Quantity.parse(0))
                volume = candidates[0][1]
        if volume is None:
            volume = self._provision(claim, class_name)
        if volume is None:
            return
        self._bind(claim, volume)

    def _requested_volume(self, claim: dict, pv_name: str) -> dict | None:
        """The PV a claim names (static binding) when it may bind to it; else None, with the
        event the PV controller writes (a missing PV just leaves the claim Pending)."""
        meta = claim["metadata"]
        volume = self.store.try_get("v1", "PersistentVolume", None, pv_name)
        if volume is None:
            return None
        ref = (volume.get("spec") or {}).get("claimRef")
        if ref:
            ours = (ref.get("namespace"), ref.get("name")) == (meta["namespace"], meta["name"])
            if ours and ref.get("uid") in (None, "", meta.get("uid")):
                return volume
            self._event(
                claim,
                "FailedBinding",
                f'volume "{pv_name}" already bound to a different claim.',
                "Warning",
            )
            return None
        problem = volume_mismatch(volume, claim)
        if problem:
            self._event(
                claim,
                "VolumeMismatch",
                f'Cannot bind to requested volume "{pv_name}": {problem}',
                "Warning",
            )
            return None
        return volume

    def _provision(self, claim: dict, class_name: str) -> dict | None:
        if not class_name:
            self._event(
                claim,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set",
            )
            return None
        sc = self.store.try_get("storage.k8s.io/v1", "StorageClass", None, class_name)
        if sc is None:
            self._event(
                claim,
                "ProvisioningFailed",
                f'storageclass.storage.k8s.io "{class_name}" not found',
                "Warning",
            )
            return None
        if sc.get("provisioner") != SIMULATED_PROVISIONER:
            self._event(
                claim,
                "ExternalProvisioning",
                f"Waiting for a volume to be created either by the external provisioner "
                f"'{sc.get('provisioner')}' or manually by the system administrator. If volume "
                "creation is delayed, please verify that the provisioner is running and "
                "correctly registered.",
            )
            return None
        meta = claim["metadata"]
        if sc.get("volumeBindingMode") == "WaitForFirstConsumer" and not self._consumer_scheduled(
            claim
        ):
            self._event(
                claim,
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding",
            )
            return None
        spec = claim.get("spec") or {}
        storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage") or "1Gi"
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": f"pvc-{meta['uid']}",
                "annotations": {PROVISIONED_BY: SIMULATED_PROVISIONER},
                "finalizers": ["kubernetes.io/pv-protection"],
            },
            "spec": {
                "capacity": {"storage": storage},
                "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
                "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy") or "Delete",
                "storageClassName": class_name,
                "volumeMode": spec.get("volumeMode") or "Filesystem",
                "csi": {"driver": SIMULATED_PROVISIONER, "volumeHandle": meta["uid"]},
            },
        }
        try:
            created = self.store.create(pv)
        except errors.ApiError as exc:
            if exc.code != 409:
                raise
            return self.store.try_get("v1", "PersistentVolume", None, pv["metadata"]["name"])
        self._event(
            claim,
            "ProvisioningSucceeded",
            f"Successfully provisioned volume {created['metadata']['name']}",
        )
        return created

    def _consumer_scheduled(self, claim: dict) -> bool:
        namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        for pod in self.store.list("v1", "Pod", namespace):
            if not (pod.get("spec") or {}).get("nodeName"):
                continue
            for volume in pod["spec"].get("volumes") or []:
                if (volume.get("persistentVolumeClaim") or {}).get("claimName") == name:
                    return True
        return False

    def _bind(self, claim: dict, pv: dict) -> None:
        meta = claim["metadata"]
        pv_name = pv["metadata"]["name"]
        ref = {
            "kind": "PersistentVolumeClaim",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
            "apiVersion": "v1",
            "resourceVersion": meta.get("resourceVersion"),
        }
        if not (pv.get("spec") or {}).get("claimRef"):
            pv = self.store.patch(
                "v1",
                "PersistentVolume",
                None,
                pv_name,
                {
                    "metadata": {"annotations": {BOUND_BY_CONTROLLER: "yes"}},
                    "spec": {"claimRef": ref},
                },
            )
        self.store.patch(
            "v1",
            "PersistentVolume",
            None,
            pv_name,
            {"status": {"phase": "Bound"}},
            subresource="status",
        )
        if (claim.get("spec") or {}).get("volumeName") != pv_name:
            claim = self.store.patch(
                "v1",
                "PersistentVolumeClaim",
                meta["namespace"],
                meta["name"],
                {
                    "metadata": {
                        "annotations": {
                            "pv.kubernetes.io/bind-completed": "yes",
                            "pv.kubernetes.io/bound-by-controller": "yes",
                        }
                    },
                    "spec": {"volumeName": pv_name},
                },
            )
        pv_spec = pv.get("spec") or {}
        self.store.patch(
            "v1",
            "PersistentVolumeClaim",
            meta["namespace"],
            meta["name"],
            {
                "status": {
                    "phase": "Bound",
                    "accessModes": pv_spec.get("accessModes"),
                    "capacity": pv_spec.get("capacity"),
                }
            },
            subresource="status",
        )

    def _release_volumes(self) -> None:
        for pv in self.store.list("v1", "PersistentVolume", None):
            spec = pv.get("spec") or {}
            phase = (pv.get("status") or {}).get("phase")
            ref = spec.get("claimRef")
            if phase in (None, "Pending") and not ref:
                with contextlib.suppress(errors.ApiError):
                    self.store.patch(
                        "v1",
                        "PersistentVolume",
                        None,
                        pv["metadata"]["name"],
                        {"status": {"phase": "Available"}},
                        subresource="status",
                    )
                continue
            if phase != "Bound" or not ref:
                continue
            claim = self.store.try_get(
                "v1", "PersistentVolumeClaim", ref.get("namespace"), ref.get("name")
            )
            if claim is not None and claim["metadata"].get("uid") == ref.get("uid"):
                continue
            # the claim is gone: Delete removes the volume, Retain releases it
            with contextlib.suppress(errors.ApiError):
                if spec.get("persistentVolumeReclaimPolicy") == "Delete":
                    self.store.patch(
                        "v1",
                        "PersistentVolume",
                        None,
                        pv["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                    )
                    self.store.delete("v1", "PersistentVolume", None, pv["metadata"]["name"])
                else:
                    self.store.patch(
                        "v1",
                        "PersistentVolume",
                        None,
                        pv["metadata"]["name"],
                        {"status": {"phase": "Released"}},
                        subresource="status",
                    )

    def _event(self, obj: dict, reason: str, message: str, kind: str = "Normal") -> None:
        events.record(self.store, obj, reason, message, type=kind, component=COMPONENT)


def install(ctx) -> VolumeBinder:
    store = ctx.store
    store.add_admission_hook("v1", "PersistentVolumeClaim", default_storage_class(store))
    store.add_admission_hook("v1", "PersistentVolume", pv_defaults)
    with contextlib.suppress(errors.ApiError):
        store.create(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {
                    "name": DEFAULT_CLASS,
                    "annotations": {DEFAULT_CLASS_ANNOTATION: "true"},
                },
                "provisioner": SIMULATED_PROVISIONER,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate",
                "allowVolumeExpansion": True,
            }
        )
    binder = VolumeBinder(ctx)
    ctx.extras["volumes"] = binder
    ctx.spawn(follow(store, "v1", "PersistentVolumeClaim", binder.poke), "pv-claims")
    ctx.spawn(follow(store, "v1", "PersistentVolume", binder.poke), "pv-volumes")
    ctx.spawn(follow(store, "v1", "Pod", binder.on_pod), "pv-pods")
    ctx.spawn(binder.loop(), "pv-binder")
    return binder
