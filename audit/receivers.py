"""Signals that become audit rows: logins, failed logins, logouts, and the admin's log entries
(each add, change and delete in the admin console, with Django's change message)."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth import signals as auth_signals
from django.db.models.signals import post_save

from audit.services import record

_ADMIN_ACTIONS = {ADDITION: "admin.add", CHANGE: "admin.change", DELETION: "admin.delete"}


def on_login(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    record("auth.login", actor=user, target=user)


def on_logout(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    if user is not None:
        record("auth.logout", actor=user, target=user)


def on_login_failed(sender: Any, credentials: dict | None = None, **kwargs: Any) -> None:
    # The credentials dict arrives with the password already masked; only the name is kept.
    username = str((credentials or {}).get("username", ""))[:150]
    record(
        "auth.login_failed",
        actor=None,
        target=("auth.user", "", username),
        detail=f"Failed login as {username!r}.",
    )


def on_admin_log_entry(sender: Any, instance: LogEntry, created: bool, **kwargs: Any) -> None:
    if not created:
        return
    content_type = instance.content_type
    record(
        _ADMIN_ACTIONS.get(instance.action_flag, "admin.change"),
        actor=instance.user,
        target=(
            content_type.app_label + "." + content_type.model if content_type else "",
            instance.object_id or "",
            instance.object_repr,
        ),
        project=_project_of_admin_object(instance),
        detail=instance.get_change_message(),
        source="admin",
    )


def _project_of_admin_object(entry: LogEntry) -> Any:
    """The project an admin-edited object belongs to, when it still exists and has one."""
    if entry.action_flag == DELETION or entry.content_type is None:
        return None
    try:
        obj = entry.get_edited_object()
    except Exception:  # deleted since, or a model without a default manager lookup
        return None
    if obj._meta.label_lower == "tenants.project":
        return obj
    return getattr(obj, "project", None) if getattr(obj, "project_id", None) else None


def connect() -> None:
    auth_signals.user_logged_in.connect(on_login, dispatch_uid="audit-login")
    auth_signals.user_logged_out.connect(on_logout, dispatch_uid="audit-logout")
    auth_signals.user_login_failed.connect(on_login_failed, dispatch_uid="audit-login-failed")
    post_save.connect(on_admin_log_entry, sender=LogEntry, dispatch_uid="audit-admin-log")
