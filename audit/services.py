"""The one writer of audit rows: `record()`, called by every service that changes something.

    from audit.services import record
    record("job.cancel", actor=user, target=job, changes={"state": ["running", "cancelled"]})

The source (web, api, cli, admin, sso, system), request id and client address come from the
audit context the middleware sets; outside a request they say `system`. The actor defaults to
the request's user. The project is taken from the target when it has one.

Recording never breaks the write it records: the row is inserted in a savepoint of the caller's
transaction (so a rolled-back write leaves no row), and a failure is logged, not raised.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Model
from django.utils import timezone

from audit.context import Source, current
from audit.models import AuditEvent

log = logging.getLogger(__name__)

REDACTED = "[redacted]"
# Change keys whose values are never stored: secrets, passwords, tokens, credential values.
_SECRET_KEY = re.compile(
    r"(^|_)(password|passwd|secret|token|private_?key|api_?key|values?|data)$",
    re.IGNORECASE,
)
_MAX_VALUE_CHARS = 1000


def record(
    action: str,
    *,
    actor: Any = None,
    target: Any = None,
    project: Any = None,
    changes: dict | None = None,
    source: str | None = None,
    detail: str = "",
) -> AuditEvent | None:
    """Write one audit row (see the module docstring). Returns it, or None when it failed.

    `target` is a model instance or a (type, id, repr) tuple; `project` a Project or None
    (then the target's project, or the target itself when it is a Project).
    """
    try:
        with transaction.atomic():
            return AuditEvent.objects.create(
                **_fields(action, actor, target, project, changes, source, detail)
            )
    except Exception:  # an audit failure must not undo or fail the write it records
        log.exception("could not record audit event %s", action)
        return None


def _fields(action, actor, target, project, changes, source, detail) -> dict[str, Any]:
    context = current()
    if actor is None:
        actor = context.request_user()
    actor_row = actor if isinstance(actor, Model) and actor.pk is not None else None
    target_type, target_id, target_repr = _target(target)
    project_row = project if project is not None else _project_of(target)
    return {
        "actor": actor_row,
        "actor_username": getattr(actor, "username", "") or "" if actor is not None else "",
        "action": action[:64],
        "target_type": target_type[:64],
        "target_id": target_id[:64],
        "target_repr": target_repr[:200],
        "project": project_row if isinstance(project_row, Model) else None,
        "project_slug": (getattr(project_row, "slug", None) or "")[:40],
        "changes": clean_changes(changes),
        "detail": detail,
        "source": source or context.source or Source.SYSTEM,
        "request_id": (context.request_id or "")[:128],
        "ip": context.ip,
    }


def _target(target: Any) -> tuple[str, str, str]:
    if target is None:
        return "", "", ""
    if isinstance(target, tuple):
        kind, ident, text = (*target, "")[:3]
        return str(kind), str(ident), str(text)
    meta = target._meta
    return meta.label_lower, str(target.pk or ""), str(target)


def _project_of(target: Any) -> Any:
    if not isinstance(target, Model):
        return None
    if target._meta.label_lower == "tenants.project":
        return target
    if getattr(target, "project_id", None) is not None:
        return target.project
    return None


def clean_changes(changes: dict | None) -> dict:
    """{field: [old, new]} as JSON, with secret fields' values replaced by a marker."""
    if not changes:
        return {}
    cleaned: dict[str, Any] = {}
    for key, value in changes.items():
        key = str(key)
        if _SECRET_KEY.search(key):
            cleaned[key] = REDACTED
        elif isinstance(value, (list, tuple)):
            cleaned[key] = [_jsonable(v) for v in value]
        else:
            cleaned[key] = _jsonable(value)
    return cleaned


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value[:_MAX_VALUE_CHARS]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [
            _jsonable(v)
            for v in (sorted(value, key=str) if isinstance(value, (set, frozenset)) else value)
        ]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, Model):
        return str(value)[:_MAX_VALUE_CHARS]
    return str(value)[:_MAX_VALUE_CHARS]


def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list]:
    """{field: [old, new]} of the fields whose value differs between two snapshots."""
    return {
        key: [before.get(key), after.get(key)]
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    }


def created(values: dict[str, Any]) -> dict[str, list]:
    """{field: [None, new]} for a row that did not exist before."""
    return {key: [None, value] for key, value in values.items()}


def removed(values: dict[str, Any]) -> dict[str, list]:
    """{field: [old, None]} for a row that is gone."""
    return {key: [value, None] for key, value in values.items()}


def snapshot(obj: Model, fields: list[str]) -> dict[str, Any]:
    """The given fields of a row (foreign keys as their id), for `diff`."""
    return {name: getattr(obj, name) for name in fields}


def purge_expired(retention_days: int, *, now=None) -> int:
    """Delete rows older than the retention (0 = keep forever); the only deletion path."""
    if retention_days <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(days=retention_days)
    # A queryset delete: AuditEvent.delete() (one row) refuses, this bulk path does not.
    deleted, _ = AuditEvent.objects.filter(created_at__lt=cutoff).delete()
    return deleted
