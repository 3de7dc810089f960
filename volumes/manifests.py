"""Kubernetes objects for a data volume, as plain dicts. Pure functions: no database, no cluster.

- new: a PersistentVolumeClaim `gp-vol-<name>` of the approved StorageClass and size;
- nfs: a PersistentVolume `gp-<namespace>-vol-<name>` (cluster-scoped, so the namespace is in
  the name) for the export, pre-bound to the claim `gp-vol-<name>` (claimRef) and the claim to
  it (volumeName, storageClassName ""), so no other claim can take the export; reclaim policy
  Retain: deleting them never touches the data on the NFS server;
- existing: nothing (the claim is the project's own; the portal only reads it).

Every object carries the portal's managed-by label, owner kind "volume", the project and the
volume name, so the portal can prove which claims it created before it deletes one.
"""

from dataclasses import dataclass
from typing import Any

from portal.kube import labels as L

VOLUME_KEY = "gpu-portal.io/volume"
OWNER_KIND = "volume"
# ReadWriteMany: the pods of a gang job run on several nodes and all mount the same claim.
SHARED_ACCESS = "ReadWriteMany"
READ_ONLY_ACCESS = "ReadOnlyMany"


@dataclass(frozen=True)
class VolumeSpec:
    project_slug: str
    namespace: str
    name: str
    kind: str  # existing | new | nfs
    claim_name: str
    read_only: bool
    storage_class: str = ""
    size: str = ""
    nfs_server: str = ""
    nfs_path: str = ""


def claim_name(volume_name: str) -> str:
    """The claim the portal creates for a volume (new and nfs kinds)."""
    return f"gp-vol-{volume_name}"


def pv_name(namespace: str, volume_name: str) -> str:
    return f"gp-{namespace}-vol-{volume_name}"


def volume_labels(spec: VolumeSpec) -> dict[str, str]:
    return L.managed_labels(
        **{
            L.OWNER_KIND_KEY: OWNER_KIND,
            L.PROJECT_KEY: spec.project_slug,
            VOLUME_KEY: spec.name,
        }
    )


def is_portal_claim(obj: dict[str, Any] | None, spec: VolumeSpec) -> bool:
    """Whether a cluster object carries exactly the labels the portal put on this volume's."""
    if not obj:
        return False
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in volume_labels(spec).items())


def _claim(spec: VolumeSpec, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": spec.claim_name,
            "namespace": spec.namespace,
            "labels": volume_labels(spec),
        },
        "spec": body,
    }


def nfs_persistent_volume(spec: VolumeSpec) -> dict[str, Any]:
    access = READ_ONLY_ACCESS if spec.read_only else SHARED_ACCESS
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name(spec.namespace, spec.name), "labels": volume_labels(spec)},
        "spec": {
            "capacity": {"storage": spec.size},
            "accessModes": [access],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "nfs": {"server": spec.nfs_server, "path": spec.nfs_path, "readOnly": spec.read_only},
            # Pre-bound: only this project's claim can ever bind the export.
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": spec.namespace,
                "name": spec.claim_name,
            },
        },
    }


def build_volume_objects(spec: VolumeSpec) -> list[dict[str, Any]]:
    """The objects the portal applies for a volume, in apply order (the PV before its claim)."""
    if spec.kind == "new":
        return [
            _claim(
                spec,
                {
                    "accessModes": [SHARED_ACCESS],
                    "storageClassName": spec.storage_class,
                    "resources": {"requests": {"storage": spec.size}},
                },
            )
        ]
    if spec.kind == "nfs":
        pv = nfs_persistent_volume(spec)
        claim = _claim(
            spec,
            {
                "accessModes": pv["spec"]["accessModes"],
                "storageClassName": "",
                "volumeName": pv["metadata"]["name"],
                "resources": {"requests": {"storage": spec.size}},
            },
        )
        return [pv, claim]
    return []
