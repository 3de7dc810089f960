"""Where an audited write came from: the source, request id and client address of the request
(or CLI call, or task) being served, kept in a context variable.

The middleware sets it for every request; the single sign-on flow narrows the source to `sso`
with `audit_context(source="sso")`. Outside any request (Celery tasks, management commands) the
defaults say `system`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from django.db import models

CLI_USER_AGENT_PREFIX = "gpuportal-cli/"


class Source(models.TextChoices):
    WEB = "web", "Web pages"
    API = "api", "API"
    CLI = "cli", "gpuportal CLI"
    ADMIN = "admin", "Admin console"
    SYSTEM = "system", "System (tasks, commands)"
    SSO = "sso", "Single sign-on"


@dataclass(frozen=True)
class AuditContext:
    source: str = Source.SYSTEM
    request_id: str = ""
    ip: str | None = None
    # The request whose user is the actor when a service does not name one (read lazily:
    # API token authentication sets the user after the middleware ran).
    request: Any = None

    def request_user(self) -> Any:
        user = getattr(self.request, "user", None)
        return user if getattr(user, "is_authenticated", False) else None


_SYSTEM = AuditContext()
_current: ContextVar[AuditContext | None] = ContextVar("audit_context", default=None)


def current() -> AuditContext:
    return _current.get() or _SYSTEM


@contextmanager
def audit_context(**overrides: Any) -> Iterator[AuditContext]:
    """Inside the block, audit rows get these fields (source, request_id, ip, request)."""
    context = replace(current(), **overrides)
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


def source_for_request(path: str, user_agent: str) -> str:
    """web, api, cli (the gpuportal CLI's User-Agent on the API) or admin, from the request."""
    if path.startswith("/admin/"):
        return Source.ADMIN
    if path.startswith("/api/"):
        return Source.CLI if user_agent.startswith(CLI_USER_AGENT_PREFIX) else Source.API
    if path.startswith("/accounts/sso/"):
        return Source.SSO
    return Source.WEB
