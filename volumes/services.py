"""Writes for data volumes: create, change, apply to the cluster, delete.

Project admins and staff manage a project's volumes (tenants.permissions.is_project_admin).

Applying is synchronous: after the row is stored, volume_sync server-side applies the claim
(and the PersistentVolume of an NFS export) in the project's namespace and records what the
cluster says (sync_state, sync_message, claim_phase) on the row; an unreachable cluster leaves
the row stored with sync_state "error", and volume_sync (POST /api/v1/volumes/<id>/sync/, the
admin action) tries again. A volume is small and created rarely, so a request that waits for one
apply is simpler to follow than a task, and the answer says at once whether the claim exists.

Deleting never loses data by accident: without delete_data only the portal's row goes; with
delete_data (and the volume's name typed as confirmation) the claim (and NFS PV) go too, but
only objects carrying this volume's portal labels, never an existing claim the portal did not
create, and never while an active job uses the claim.
"""

from __future__ import annotations

import ipaddress
import logging
import posixpath
import re
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import created, diff, record, removed, snapshot
from jobs.models import Job
from jobs.mounts import mount_path_error
from jobs.validation import parse_quantity
from portal.kube import apply as kube
from portal.kube.apply import KubeError, PermanentKubeError
from tenants.models import DNS1123_LABEL, Project
from tenants.permissions import administered_project, is_staff
from volumes import manifests as vm
from volumes.models import (
    VOLUME_NAME_MAX,
    DataVolume,
    StorageClass,
    SyncState,
    VolumeKind,
)

log = logging.getLogger(__name__)
audit = logging.getLogger("portal.audit")

_CLAIM_FIELDS = ("kind", "claim_name", "storage_class", "size", "nfs_server", "nfs_path")
UPDATABLE_FIELDS = ("mount_path", "read_only", "is_checkpoint", "description")
_NAME_RE = re.compile(DNS1123_LABEL)
_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NFS_PATH_RE = re.compile(r"^/[A-Za-z0-9._/+@-]*$")


class ClusterUnavailable(Exception):
    """The cluster could not be asked (retry later); nothing was deleted."""


def _admin_project(actor: Any, project: Project | str) -> Project:
    return administered_project(actor, project, what="data volumes")


def _size_errors(size: str, limit: StorageClass | None, errors: dict[str, list[str]]) -> None:
    amount = parse_quantity(size) if size else None
    if not size:
        errors.setdefault("size", []).append("A size is required, e.g. 500Gi.")
    elif amount is None or not re.match(r"^[1-9][0-9]*(Mi|Gi|Ti|Pi)$", size):
        errors.setdefault("size", []).append(f"{size!r} is not a size; use e.g. 500Gi or 2Ti.")
    elif limit is not None and amount > (parse_quantity(limit.max_size) or 0):
        errors.setdefault("size", []).append(
            f"{size} is more than storage class {limit.name} allows: at most {limit.max_size}."
        )


def _nfs_errors(server: str, path: str, errors: dict[str, list[str]]) -> None:
    try:
        ipaddress.ip_address(server)
        server_ok = True
    except ValueError:
        server_ok = bool(server) and len(server) <= 253 and bool(_SUBDOMAIN_RE.match(server))
    if not server_ok:
        errors.setdefault("nfs_server", []).append(
            "The NFS server's host name or IP address, e.g. nfs.example.com or 10.0.0.5."
        )
    if not path or not _NFS_PATH_RE.match(path) or posixpath.normpath(path) != path:
        errors.setdefault("nfs_path", []).append(
            "The exported directory as an absolute path without '..', e.g. /exports/imagenet."
        )


def _checkpoint_errors(
    project: Project, *, is_checkpoint: bool, read_only: bool, exclude: int | None
) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if not is_checkpoint:
        return errors
    if read_only:
        errors["is_checkpoint"] = ["A checkpoint volume must be read-write (read_only false)."]
    other = (
        DataVolume.objects.filter(project=project, is_checkpoint=True)
        .exclude(pk=exclude)
        .values_list("name", flat=True)
        .first()
    )
    if other:
        errors.setdefault("is_checkpoint", []).append(
            f"Project {project.slug} already has a checkpoint volume, {other!r}; "
            "unset it there first (a project has at most one)."
        )
    return errors


@transaction.atomic
def _store(volume: DataVolume) -> DataVolume:
    try:
        with transaction.atomic():
            volume.save()
    except IntegrityError as exc:
        raise ValidationError(
            {"name": [f"Project {volume.project.slug} already has a volume {volume.name!r}."]}
        ) from exc
    return volume


def volume_create(
    *,
    actor: Any,
    project: Project | str,
    name: str,
    kind: str,
    mount_path: str,
    read_only: bool = True,
    is_checkpoint: bool = False,
    claim_name: str = "",
    storage_class: str = "",
    size: str = "",
    nfs_server: str = "",
    nfs_path: str = "",
    description: str = "",
    apply: bool = True,
) -> DataVolume:
    """Register a volume and (apply=True) put its claim into the cluster at once. NFS exports
    are staff's: their PersistentVolume is cluster-wide and could point at any export, another
    tenant's included."""
    project = _admin_project(actor, project)
    if kind == VolumeKind.NFS and not is_staff(actor):
        raise PermissionDenied(
            "Only staff register NFS exports (the PersistentVolume the portal creates for one is "
            "cluster-wide and could reach any export); ask them, or use an existing claim."
        )
    errors: dict[str, list[str]] = {}
    if not name or len(name) > VOLUME_NAME_MAX or not _NAME_RE.match(name):
        errors["name"] = [
            f"{name!r} is not a valid name: lower-case letters, digits and '-', starting and "
            f"ending with a letter or digit, at most {VOLUME_NAME_MAX} characters."
        ]
    elif DataVolume.objects.filter(project=project, name=name).exists():
        errors["name"] = [f"Project {project.slug} already has a volume {name!r}."]
    if kind not in VolumeKind.values:
        errors["kind"] = [f"Unknown kind {kind!r}; choose existing, new or nfs."]
    if problem := mount_path_error(mount_path):
        errors["mount_path"] = [problem]
    storage = None
    if kind == VolumeKind.EXISTING:
        if not claim_name or len(claim_name) > 253 or not _SUBDOMAIN_RE.match(claim_name):
            errors["claim_name"] = [
                f"Name the PersistentVolumeClaim in namespace {project.namespace} "
                "(a DNS subdomain, e.g. imagenet-data)."
            ]
        for field, value in (("storage_class", storage_class), ("size", size)):
            if value:
                errors[field] = ["Only a new claim takes a storage class and a size."]
    elif kind == VolumeKind.NEW:
        storage = StorageClass.objects.filter(name=storage_class).first()
        if storage is None:
            approved = ", ".join(StorageClass.objects.values_list("name", flat=True)) or "none"
            errors["storage_class"] = [
                f"{storage_class!r} is not an approved storage class; approved: {approved}."
            ]
        _size_errors(size, storage, errors)
    elif kind == VolumeKind.NFS:
        _nfs_errors(nfs_server, nfs_path, errors)
        size = size or "1Ti"  # a PV needs a capacity; for NFS it is only a label
        _size_errors(size, None, errors)
    if kind != VolumeKind.NFS and (nfs_server or nfs_path):
        errors["nfs_server"] = ["Only an NFS volume takes a server and a path."]
    if kind != VolumeKind.EXISTING and claim_name:
        errors["claim_name"] = ["The portal names the claims it creates; leave claim_name empty."]
    errors.update(
        _checkpoint_errors(project, is_checkpoint=is_checkpoint, read_only=read_only, exclude=None)
    )
    if errors:
        raise ValidationError(errors)
    volume = DataVolume(
        project=project,
        name=name,
        kind=kind,
        claim_name=claim_name if kind == VolumeKind.EXISTING else vm.claim_name(name),
        storage_class=storage,
        size=size if kind != VolumeKind.EXISTING else "",
        nfs_server=nfs_server,
        nfs_path=nfs_path,
        mount_path=mount_path,
        read_only=read_only,
        is_checkpoint=is_checkpoint,
        description=description,
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
    )
    _store(volume)
    record(
        "volume.create",
        actor=actor,
        target=volume,
        changes=created(
            snapshot(
                volume,
                [*_CLAIM_FIELDS, *UPDATABLE_FIELDS],
            )
        ),
    )
    audit.info(
        "volume_create actor=%s project=%s volume=%s kind=%s",
        getattr(actor, "username", actor),
        project.slug,
        name,
        kind,
    )
    if apply:
        volume_sync(volume)
    return volume


def volume_update(*, actor: Any, volume: DataVolume, **changes: Any) -> DataVolume:
    """Change the default mount path, access, checkpoint flag or description. The claim itself
    (kind, size, class, export) is fixed: register a new volume for another one."""
    _admin_project(actor, volume.project)
    unknown = sorted(set(changes) - set(UPDATABLE_FIELDS))
    if unknown:
        raise ValidationError(
            {
                name: ["Fixed once the volume exists; register a new volume instead."]
                for name in unknown
            }
        )
    errors: dict[str, list[str]] = {}
    if "mount_path" in changes and (problem := mount_path_error(changes["mount_path"])):
        errors["mount_path"] = [problem]
    read_only = changes.get("read_only", volume.read_only)
    if volume.kind == VolumeKind.NFS and read_only != volume.read_only:
        # The export's PersistentVolume says readOnly; a PV's source cannot change.
        errors["read_only"] = ["An NFS volume's access is fixed; register a new volume."]
    errors.update(
        _checkpoint_errors(
            volume.project,
            is_checkpoint=changes.get("is_checkpoint", volume.is_checkpoint),
            read_only=read_only,
            exclude=volume.pk,
        )
    )
    if errors:
        raise ValidationError(errors)
    before = snapshot(volume, list(changes))
    for name, value in changes.items():
        setattr(volume, name, value)
    try:
        with transaction.atomic():
            volume.save()
            record(
                "volume.change",
                actor=actor,
                target=volume,
                changes=diff(before, snapshot(volume, list(changes))),
            )
    except IntegrityError as exc:  # two admins setting a checkpoint volume at once
        raise ValidationError(
            {"is_checkpoint": ["Another checkpoint volume was just set; reload and try again."]}
        ) from exc
    return volume


def volume_spec(volume: DataVolume) -> vm.VolumeSpec:
    return vm.VolumeSpec(
        project_slug=volume.project.slug,
        namespace=volume.project.namespace,
        name=volume.name,
        kind=volume.kind,
        claim_name=volume.claim_name,
        read_only=volume.read_only,
        storage_class=volume.storage_class.name if volume.storage_class_id else "",
        size=volume.size,
        nfs_server=volume.nfs_server,
        nfs_path=volume.nfs_path,
    )


def _record(volume: DataVolume, state: str, message: str, phase: str) -> None:
    now = timezone.now()
    DataVolume.objects.filter(pk=volume.pk).update(
        sync_state=state, sync_message=message, claim_phase=phase, synced_at=now
    )
    volume.sync_state, volume.sync_message, volume.claim_phase, volume.synced_at = (
        state,
        message,
        phase,
        now,
    )


def volume_sync(volume: DataVolume) -> DataVolume:
    """Apply the volume's objects (idempotent: server-side apply under fixed names) and record
    the claim's phase; an existing claim is only read. Never raises for cluster trouble."""
    spec = volume_spec(volume)
    try:
        if volume.portal_owned:
            current = kube.get("v1", "PersistentVolumeClaim", spec.claim_name, spec.namespace)
            if current is not None and not vm.is_portal_claim(current, spec):
                _record(
                    volume,
                    SyncState.ERROR,
                    f"claim {spec.claim_name} already exists in {spec.namespace} and was not "
                    "created by the portal for this volume; it is left alone",
                    "",
                )
                return volume
            for obj in vm.build_volume_objects(spec):
                kube.apply(obj)
        claim = kube.get("v1", "PersistentVolumeClaim", spec.claim_name, spec.namespace)
    except KubeError as exc:
        log.warning("volume %s: apply failed: %s", volume.pk, exc.message)
        _record(volume, SyncState.ERROR, f"the cluster said: {exc.message}", volume.claim_phase)
        return volume
    except Exception as exc:  # no usable kubeconfig, etc.: the row stays, sync retries later
        log.exception("volume %s: cannot reach the cluster", volume.pk)
        _record(volume, SyncState.ERROR, f"cannot reach the cluster: {exc}", volume.claim_phase)
        return volume
    if claim is None:
        _record(
            volume,
            SyncState.ERROR,
            f"claim {spec.claim_name} not found in namespace {spec.namespace}",
            "",
        )
        return volume
    phase = str((claim.get("status") or {}).get("phase") or "Pending")
    _record(volume, SyncState.OK, f"claim {spec.claim_name} is {phase}", phase)
    return volume


def _jobs_using(volume: DataVolume) -> list[str]:
    jobs = (
        Job.objects.active()
        .filter(project=volume.project)
        .values_list("name", "mounts", "checkpoint_claim")
    )
    return sorted(
        name
        for name, mounts, checkpoint_claim in jobs
        if checkpoint_claim == volume.claim_name
        or any(m.get("claim") == volume.claim_name for m in mounts or ())
    )


def volume_delete(
    *, actor: Any, volume: DataVolume, delete_data: bool = False, confirm: str = ""
) -> list[str]:
    """Remove the volume from the portal. With delete_data and `confirm` equal to the volume's
    name, also delete the claim (and an NFS volume's PV) the portal created for it. Returns the
    cluster objects deleted (kind/name)."""
    _admin_project(actor, volume.project)
    deleted: list[str] = []
    if delete_data:
        if confirm != volume.name:
            raise ValidationError(
                {
                    "confirm": [
                        f"Type the volume's name ({volume.name}) to confirm deleting claim "
                        f"{volume.claim_name} and its data."
                    ]
                }
            )
        if not volume.portal_owned:
            raise ValidationError(
                {
                    "delete_data": [
                        f"Claim {volume.claim_name} was not created by the portal; the portal "
                        "never deletes it. Remove the volume without delete_data."
                    ]
                }
            )
        users = _jobs_using(volume)
        if users:
            raise ValidationError(
                {"delete_data": [f"Active jobs still use this volume: {', '.join(users)}."]}
            )
        deleted = _delete_objects(volume)
    name, slug = volume.name, volume.project.slug
    target, project = (volume._meta.label_lower, volume.pk, str(volume)), volume.project
    volume.delete()
    record(
        "volume.delete",
        actor=actor,
        target=target,
        project=project,
        changes=removed({"claim_name": volume.claim_name, "deleted_objects": deleted}),
        detail="claim and data deleted" if deleted else "claim kept",
    )
    audit.info(
        "volume_delete actor=%s project=%s volume=%s deleted=%s",
        getattr(actor, "username", actor),
        slug,
        name,
        deleted,
    )
    return deleted


def _delete_objects(volume: DataVolume) -> list[str]:
    """Delete the claim (then the PV) if and only if they carry this volume's portal labels."""
    spec = volume_spec(volume)
    deleted: list[str] = []
    try:
        claim = kube.get("v1", "PersistentVolumeClaim", spec.claim_name, spec.namespace)
        if claim is not None:
            if not vm.is_portal_claim(claim, spec):
                raise ValidationError(
                    {
                        "delete_data": [
                            f"Claim {spec.claim_name} in the cluster was not created by the "
                            "portal for this volume; it is left alone."
                        ]
                    }
                )
            kube.delete("v1", "PersistentVolumeClaim", spec.claim_name, spec.namespace)
            deleted.append(f"PersistentVolumeClaim/{spec.claim_name}")
        if volume.kind == VolumeKind.NFS:
            pv_name = vm.pv_name(spec.namespace, spec.name)
            pv = kube.get("v1", "PersistentVolume", pv_name)
            if pv is not None and vm.is_portal_claim(pv, spec):
                kube.delete("v1", "PersistentVolume", pv_name)
                deleted.append(f"PersistentVolume/{pv_name}")
    except ValidationError:
        raise
    except PermanentKubeError as exc:
        raise ValidationError({"delete_data": [f"The cluster refused: {exc.message}"]}) from exc
    except KubeError as exc:
        raise ClusterUnavailable(
            f"The cluster could not be reached ({exc.message}); nothing was deleted, try again."
        ) from exc
    except Exception as exc:  # no usable kubeconfig, etc.
        raise ClusterUnavailable(
            f"The cluster could not be reached ({exc}); nothing was deleted, try again."
        ) from exc
    return deleted
