"""Quota objects into the cluster: make the owned objects match the admin's model.

Level-triggered: build every desired object from the database (quotas.manifests), server-side
apply them all, then delete owned objects (managed-by=gpu-portal) that are no longer desired.
Objects without the portal's label are never changed or deleted: if one already holds a name
the portal wants, it is reported and left alone.

Three rules keep a sync from destroying a tenant's work:
- One sync at a time: a lock (a PostgreSQL advisory lock; a file lock on SQLite) is held from
  reading the database to the last delete, so a sync that read the database before a project was
  saved cannot delete the objects a later sync made for it.
- A Namespace is never deleted: it holds the tenant's pods and data. A namespace whose project is
  gone is marked (label and annotations, under a field manager of its own) and listed for staff
  (OrphanedNamespace); the objects inside it stay with it.
- A sync that would delete more than a small share of the owned objects at once deletes nothing
  (a wiped or wrong database looks exactly like that) and says why in the admin console.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, OperationalError, connection, transaction
from django.utils import timezone

from portal.kube import apply as kube
from portal.kube import labels as L
from portal.kube.apply import KubeError, RetryableKubeError
from quotas import manifests as qm
from quotas import services
from quotas.models import GpuPool, PriorityClass, SyncOutcome
from quotas.selectors import quota_rows_for_projects
from tenants.models import Department, Project

log = logging.getLogger(__name__)

# Stale objects are deleted children first: project objects before department queues.
_DELETE_ORDER = {"project": 0, "pool": 1, "priority": 2, "department": 3}

# How an orphaned namespace is marked. A field manager of its own owns exactly these fields, so
# clearing the mark (the project came back) removes them and nothing the portal applied.
ORPHAN_LABEL = "gpu-portal.io/orphaned"
ORPHANED_AT_ANNOTATION = "gpu-portal.io/orphaned-at"
ORPHAN_NOTE_ANNOTATION = "gpu-portal.io/orphaned-note"
ORPHAN_FIELD_MANAGER = "gpu-portal-orphan-mark"
ORPHAN_NOTE = (
    "The portal project of this namespace no longer exists. The portal never deletes namespaces: "
    "check what runs and is stored here, then delete it by hand or from the admin console."
)

# Any fixed 64-bit number: the key of the quota sync's PostgreSQL advisory lock.
LOCK_KEY = 0x67705F71756F7461  # "gp_quota"
_process_lock = threading.Lock()  # SQLite without a file (in-memory): one process only


class QuotaSyncBusy(Exception):
    """Another quota sync held the lock for longer than PORTAL_QUOTA_SYNC_LOCK_WAIT seconds."""


@dataclass
class SyncReport:
    applied: int = 0
    unchanged: int = 0
    deleted: int = 0
    conflicts: list[str] = field(default_factory=list)  # names held by objects we do not own
    errors: list[str] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)  # namespaces kept although not desired
    refused: str = ""  # why stale objects were not deleted (the mass-deletion guard)
    refused_deletions: list[str] = field(default_factory=list)


def quota_model() -> qm.QuotaModel:
    """The admin's model as plain values (guaranteed/maximum from quotas.arithmetic)."""
    projects = list(Project.objects.select_related("department").order_by("slug"))
    rows = quota_rows_for_projects(projects=projects)
    pools = tuple(
        qm.PoolSpec(
            slug=p.slug,
            node_labels=dict(p.node_labels or {}),
            mig_profiles=tuple(p.mig_profiles or ()),
            total_gpus=p.total_gpus,
            default_cpu=p.default_cpu,
            default_memory=p.default_memory,
            scheduler=p.scheduler,
            over_quota_weight=p.kai_over_quota_weight,
        )
        for p in GpuPool.objects.order_by("slug")
    )
    return qm.QuotaModel(
        pools=pools,
        departments=tuple(qm.DepartmentSpec(slug=d.slug) for d in Department.objects.all()),
        projects=tuple(
            qm.ProjectSpec(
                slug=p.slug,
                namespace=p.namespace,
                department_slug=p.department.slug,
                pod_security=p.pod_security,
                quotas=tuple(
                    qm.QuotaAmount(
                        pool_slug=r.pool_slug,
                        resource=r.resource,
                        guaranteed=r.nominal,
                        maximum=r.maximum,
                        over_quota_weight=r.over_quota_weight,
                    )
                    for r in rows[p.pk]
                ),
            )
            for p in projects
        ),
        priorities=tuple(
            qm.PrioritySpec(
                name=pc.name, value=pc.value, preemptible=pc.preemptible, description=pc.description
            )
            for pc in PriorityClass.objects.all()
        ),
        tenant=tenant_access(),
    )


def tenant_access() -> qm.TenantAccess:
    """The settings that shape what every project namespace gets besides its quota."""
    return qm.TenantAccess(
        network_policy=settings.PORTAL_TENANT_NETWORK_POLICY,
        portal_namespace=settings.PORTAL_NAMESPACE,
        role=settings.PORTAL_TENANT_ROLE,
        service_account=settings.PORTAL_SERVICE_ACCOUNT,
    )


def contains(live: Any, desired: Any) -> bool:
    """Whether the live object already holds every field and value of the desired one (the
    server adds defaults and status; a value it normalised differently just means one more
    apply)."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            k in live and contains(live[k], v) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(live) == len(desired)
            and all(contains(a, b) for a, b in zip(live, desired, strict=True))
        )
    return live == desired


def mass_deletion_refusal(
    *, deleting: int, owned: int, max_fraction: float, max_count: int
) -> str | None:
    """Why deleting ``deleting`` of ``owned`` objects in one sync is refused, or None.

    Refused only when it is both more than ``max_count`` objects and more than ``max_fraction``
    of what the portal owns: removing one project or pool stays routine, while an emptied or
    wrong database (which also looks like "nothing is desired") deletes nothing.
    """
    if deleting <= max_count or deleting <= max_fraction * owned:
        return None
    return (
        f"Refused to delete {deleting} of the {owned} quota objects the portal owns in one sync: "
        f"more than {max_count} objects and more than {max_fraction:.0%} of them. Nothing was "
        "deleted. If the change is intended (e.g. a department was removed), confirm the "
        "deletions in the admin console (Quota sync status), or raise "
        "PORTAL_QUOTA_SYNC_MAX_DELETE_COUNT / PORTAL_QUOTA_SYNC_MAX_DELETE_FRACTION."
    )


def describe(obj: dict[str, Any]) -> str:
    """A stable human name for an object: 'Kind name' or 'Kind namespace/name'."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{obj['kind']} {namespace + '/' if namespace else ''}{meta['name']}"


def _key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta["name"])


def _owner_kind(obj: dict[str, Any]) -> str:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(L.OWNER_KIND_KEY, "")


def _owned_objects(access: qm.TenantAccess) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    owned = {}
    for api_version, kind in qm.owned_kinds(access):
        if api_version == qm.KAI_QUEUE_API and kube.api_resources(api_version) is None:
            continue  # KAI is not installed: there is nothing of it to own (its applies fail)
        for obj in kube.list_owned(api_version, kind):
            # Only quota-kind owners: job objects are never the quota sync's business.
            if _owner_kind(obj) in _DELETE_ORDER:
                owned[_key(obj)] = obj
    return owned


def _is_marked(obj: dict[str, Any]) -> bool:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(ORPHAN_LABEL) == "true"


def _mark_orphaned(name: str) -> None:
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": {ORPHAN_LABEL: "true"},
                "annotations": {
                    ORPHANED_AT_ANNOTATION: timezone.now().isoformat(timespec="seconds"),
                    ORPHAN_NOTE_ANNOTATION: ORPHAN_NOTE,
                },
            },
        },
        field_manager=ORPHAN_FIELD_MANAGER,
    )


def _clear_orphan_mark(name: str) -> None:
    # Applying nothing under the mark's own manager removes exactly the fields it set.
    kube.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        field_manager=ORPHAN_FIELD_MANAGER,
    )


@contextlib.contextmanager
def sync_lock(*, wait: float | None = None) -> Iterator[None]:
    """Hold the quota-sync lock; raise QuotaSyncBusy after ``wait`` seconds without it.

    PostgreSQL: a session advisory lock, released on exit or when the worker's connection dies
    (a killed worker cannot leave it held). SQLite (the demo): an exclusive file lock beside the
    database file, which serialises the demo's web and worker processes alike.
    """
    if wait is None:
        wait = settings.PORTAL_QUOTA_SYNC_LOCK_WAIT
    deadline = time.monotonic() + wait
    if connection.vendor == "postgresql":
        _pg_lock(wait)
        try:
            yield
        finally:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
            except DatabaseError:  # the session is gone, and its lock with it
                log.warning("quota sync: could not release the advisory lock", exc_info=True)
        return
    name = str(connection.settings_dict.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:"):
        if not _process_lock.acquire(timeout=max(wait, 0)):
            raise QuotaSyncBusy(f"another quota sync held the lock for {wait:.0f} s")
        try:
            yield
        finally:
            _process_lock.release()
        return
    with Path(f"{name}.quota-sync.lock").open("a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise QuotaSyncBusy(
                        f"another quota sync held the lock for {wait:.0f} s"
                    ) from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pg_lock(wait: float) -> None:
    """Wait for the session advisory lock (a waiting sync shows in pg_locks as not granted)."""
    try:
        # A transaction (a savepoint inside one) scopes lock_timeout and survives a timeout.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('lock_timeout', %s, true)", [f"{max(int(wait * 1000), 1)}ms"]
            )
            cursor.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", ["0"])
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == "55P03":  # lock_not_available
            raise QuotaSyncBusy(f"another quota sync held the lock for {wait:.0f} s") from exc
        raise


def sync_quota_objects(
    *, confirmed_deletions: Collection[str] = (), lock_wait: float | None = None
) -> SyncReport:
    """Apply every desired quota object and delete stale owned ones, one sync at a time.

    ``confirmed_deletions`` (names as ``describe`` gives them) are deletions staff confirmed after
    the mass-deletion guard refused them; they do not count against the guard.

    Raises RetryableKubeError if anything failed transiently (after doing all it could), so the
    task retries, and QuotaSyncBusy if another sync kept the lock too long; permanent rejections
    are logged in the report and do not block the rest. Every sync that ran is recorded for
    staff (QuotaSyncStatus).
    """
    started = timezone.now()
    try:
        with sync_lock(wait=lock_wait):
            # Read the database only once the lock is held: a sync that waited sees every
            # change committed before the previous sync finished.
            report, retry = _sync(quota_model(), set(confirmed_deletions))
    except QuotaSyncBusy:
        # Not recorded: the status shows the last sync that ran (a refusal must stay visible).
        log.warning("quota sync: another sync is still running; will retry")
        raise
    except KubeError as exc:  # could not even list what the portal owns
        services.quota_sync_status_record(
            started_at=started, outcome=SyncOutcome.ERRORS, message=exc.message
        )
        raise
    if report.refused:
        outcome = SyncOutcome.REFUSED
    elif report.errors:
        outcome = SyncOutcome.ERRORS
    else:
        outcome = SyncOutcome.OK
    services.quota_sync_status_record(
        started_at=started,
        outcome=outcome,
        applied=report.applied,
        unchanged=report.unchanged,
        deleted=report.deleted,
        message="\n".join(filter(None, [report.refused, *report.errors])),
        refused_deletions=report.refused_deletions,
    )
    if retry is not None:
        raise retry
    return report


def _sync(
    model: qm.QuotaModel, confirmed: set[str]
) -> tuple[SyncReport, RetryableKubeError | None]:
    desired = qm.desired_quota_objects(model)
    report = SyncReport()
    owned = _owned_objects(model.tenant)
    retry: RetryableKubeError | None = None
    rejected_kai: list[str] = []
    for obj in desired:
        key = _key(obj)
        try:
            if key in owned and obj["kind"] == "Namespace" and _is_marked(owned[key]):
                _clear_orphan_mark(key[3])  # the project is back: the namespace is its own again
            if key in owned and contains(owned[key], obj):
                report.unchanged += 1
                continue  # already as desired: the periodic resync costs only the LIST calls
            if key not in owned:
                api_version, kind, namespace, name = key
                existing = kube.get(api_version, kind, name, namespace or None)
                if existing is not None and not L.is_managed(existing):
                    report.conflicts.append(f"{kind} {namespace + '/' if namespace else ''}{name}")
                    continue
            kube.apply(obj)
            report.applied += 1
        except RetryableKubeError as exc:
            retry = exc
            report.errors.append(f"{key[1]} {key[3]}: {exc.message}")
        except KubeError as exc:
            report.errors.append(f"{key[1]} {key[3]}: {exc.message}")
            if key[0] == qm.KAI_QUEUE_API:
                rejected_kai.append(key[3])
    desired_keys = {_key(o) for o in desired}
    stale = [o for k, o in owned.items() if k not in desired_keys]

    # Namespaces are marked, never deleted; what lives in them stays with them.
    orphans = {
        o["metadata"]["name"]: o
        for o in stale
        if o["kind"] == "Namespace" and o["apiVersion"] == "v1"
    }
    for name, obj in sorted(orphans.items()):
        report.orphaned.append(name)
        if _is_marked(obj):
            continue
        try:
            _mark_orphaned(name)
            log.warning("quota sync: namespace %s has no project; marked, not deleted", name)
        except RetryableKubeError as exc:
            retry = exc
            report.errors.append(f"mark Namespace {name}: {exc.message}")
        except KubeError as exc:
            report.errors.append(f"mark Namespace {name}: {exc.message}")
    services.orphaned_namespaces_set(
        {
            name: (obj["metadata"].get("labels") or {}).get(L.PROJECT_KEY, "")
            for name, obj in orphans.items()
        }
    )
    candidates = [
        o
        for o in stale
        if o["kind"] != "Namespace" and (o["metadata"].get("namespace") or "") not in orphans
    ]
    candidates.sort(key=lambda o: _DELETE_ORDER.get(_owner_kind(o), 9))
    if rejected_kai:
        # KAI's queues are a tree: with part of the new one refused, deleting old queues could
        # strand their children or their jobs. Keep every KAI Queue until the model is accepted.
        kept = [o for o in candidates if o["apiVersion"] == qm.KAI_QUEUE_API]
        candidates = [o for o in candidates if o["apiVersion"] != qm.KAI_QUEUE_API]
        report.errors.append(
            f"KAI Queue(s) {', '.join(rejected_kai)} rejected by the cluster: no KAI Queue was "
            f"deleted in this sync ({len(kept)} kept). Fix the quotas of the pool and sync again."
        )
    unconfirmed = [o for o in candidates if describe(o) not in confirmed]
    refusal = mass_deletion_refusal(
        deleting=len(unconfirmed),
        owned=len(owned),
        max_fraction=settings.PORTAL_QUOTA_SYNC_MAX_DELETE_FRACTION,
        max_count=settings.PORTAL_QUOTA_SYNC_MAX_DELETE_COUNT,
    )
    if refusal:
        report.refused = refusal
        report.refused_deletions = [describe(o) for o in unconfirmed]
        log.error("quota sync: %s Would delete: %s", refusal, ", ".join(report.refused_deletions))
        candidates = [o for o in candidates if describe(o) in confirmed]
    for obj in candidates:
        try:
            kube.delete_object(obj)
            report.deleted += 1
            log.info("quota sync: deleted %s (no longer desired)", describe(obj))
        except RetryableKubeError as exc:
            retry = exc
            report.errors.append(f"delete {describe(obj)}: {exc.message}")
        except KubeError as exc:
            report.errors.append(f"delete {describe(obj)}: {exc.message}")
    for conflict in report.conflicts:
        log.warning("quota sync: %s exists and is not managed by the portal; left alone", conflict)
    for error in report.errors:
        log.warning("quota sync: %s", error)
    return report, retry


def delete_orphaned_namespace(*, actor: Any, namespace: str) -> None:
    """Delete a marked namespace with everything in it, on a staff member's explicit request.

    Refused unless no project uses the namespace and the live namespace is the portal's and
    carries the orphan mark (so a namespace taken back by a project in the meantime survives).
    """
    if not (actor.is_active and actor.is_staff):
        raise PermissionError("Only staff can delete namespaces.")
    with sync_lock():
        if Project.objects.filter(namespace=namespace).exists():
            raise ValueError(f"a project uses namespace {namespace} again; left alone")
        live = kube.get("v1", "Namespace", namespace)
        if live is None:
            services.orphaned_namespaces_forget(namespace)
            return
        if not (L.is_managed(live) and _is_marked(live)):
            raise ValueError("the namespace is not a marked portal namespace; left alone")
        kube.delete("v1", "Namespace", namespace)
        services.orphaned_namespaces_forget(namespace)
        services.audit.info(
            "namespace_delete actor=%s namespace=%s (orphaned)", actor.get_username(), namespace
        )
