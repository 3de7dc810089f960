"""What the portal does while PostgreSQL or Redis cannot be reached.

Requests answer 503 with `Retry-After` and a sentence (the API's JSON error shape, or a small
page for the browser) instead of a 500 with a traceback: an outage is an operational fact, logged
as one warning line per request. Celery tasks turn the same errors into `ServiceUnavailable`,
which their `autoretry_for` retries with backoff (`retry_when_unavailable`).

Only errors that mean "cannot reach the service" count: a refused or lost connection, a server
shutting down or starting up, a pool with no connection to give. A query error, a lock timeout or
a deadlock is a bug or a conflict and keeps its usual handling.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from django.conf import settings
from django.db import InterfaceError as DjangoInterfaceError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

log = logging.getLogger(__name__)

DATABASE = "The database"
REDIS = "Redis"
TASK_QUEUE = "The task queue (Redis)"

# SQLSTATEs of a server that is going away or not there yet (class 08: connection exceptions).
_UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})

F = TypeVar("F", bound=Callable[..., Any])


class ServiceUnavailable(Exception):
    """A dependency (the database, Redis) cannot be reached right now; try again later."""

    def __init__(self, service: str, detail: str = ""):
        # Both as args, so the exception pickles (Celery stores and sends it).
        super().__init__(service, detail)
        self.service, self.detail = service, detail

    def __str__(self) -> str:
        return f"{self.service} is unavailable" + (f" ({self.detail})" if self.detail else "")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and its explicit causes (Django raises its own error `from` the
    driver's). Not __context__: a bug raised while handling an outage is still a bug."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 8:
        seen.add(id(current))
        yield current
        current = current.__cause__


def unavailable_service(exc: BaseException) -> str | None:
    """Which service `exc` says cannot be reached ("The database", "Redis", ...), or None when
    it is any other error."""
    if isinstance(exc, ServiceUnavailable):
        return exc.service
    import psycopg
    import psycopg_pool
    import redis.exceptions
    from kombu.exceptions import OperationalError as KombuOperationalError

    for error in _chain(exc):
        if isinstance(error, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
            return REDIS
        if isinstance(error, KombuOperationalError):
            return TASK_QUEUE
        if isinstance(error, psycopg_pool.PoolTimeout):
            return DATABASE
        if isinstance(error, psycopg.InterfaceError):
            return DATABASE
        if isinstance(error, psycopg.OperationalError):
            sqlstate = getattr(error, "sqlstate", None)
            # No SQLSTATE: the client's own failure (refused, reset, server closed the
            # connection); with one, only the connection and shutdown classes count.
            if sqlstate is None or sqlstate.startswith("08") or sqlstate in _UNAVAILABLE_SQLSTATES:
                return DATABASE
            return None
        if isinstance(error, DjangoInterfaceError) and error.__cause__ is None:
            return DATABASE  # "connection already closed": Django's own words for a lost link
    return None


def _describe(exc: BaseException) -> str:
    """The innermost cause on one line, for the log."""
    causes = list(_chain(exc))
    innermost = causes[-1] if causes else exc
    text = str(innermost).strip().splitlines()
    return f"{type(innermost).__name__}: {text[0][:200] if text else ''}".rstrip(": ")


def retry_after_seconds() -> int:
    return max(1, int(getattr(settings, "PORTAL_OUTAGE_RETRY_AFTER_SECONDS", 5)))


def sentence(service: str) -> str:
    return (
        f"{service} is unavailable right now, so the portal could not complete this request; "
        f"try again in {retry_after_seconds()} seconds."
    )


def log_outage(request: HttpRequest, service: str, exc: BaseException) -> None:
    log.warning(
        "503 %s %s: %s is unavailable (%s)", request.method, request.path, service, _describe(exc)
    )


def mark_answered(response: HttpResponse) -> HttpResponse:
    """Retry-After on the answer, and no second (error-level) line from django.request."""
    response["Retry-After"] = str(retry_after_seconds())
    response._has_been_logged = True
    return response


def outage_response(request: HttpRequest, service: str, exc: BaseException) -> HttpResponse:
    """503 for a request that met an outage: JSON under /api/, a small page elsewhere."""
    from portal.api_errors import is_api_request

    log_outage(request, service, exc)
    if is_api_request(request):
        response: HttpResponse = JsonResponse(
            {"detail": sentence(service), "errors": {}}, status=503
        )
    else:
        # No request context: the page must render without the database (no user, no session).
        html = render_to_string(
            "503.html",
            {
                "service": service,
                "retry_after": retry_after_seconds(),
                "sentence": sentence(service),
            },
        )
        response = HttpResponse(html, status=503, content_type="text/html; charset=utf-8")
    return mark_answered(response)


def response_for_current_exception(request: HttpRequest) -> HttpResponse | None:
    """In handler500: a 503 when the exception being handled is an outage."""
    exc = sys.exc_info()[1]
    if exc is None:
        return None
    service = unavailable_service(exc)
    return outage_response(request, service, exc) if service else None


class OutageMiddleware:
    """Answers 503 (not 500) when a view fails because the database or Redis is unreachable.

    Errors raised outside a view (in another middleware) reach handler500, which does the same;
    with DEBUG on, those show Django's debug page instead.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        from asgiref.sync import iscoroutinefunction, markcoroutinefunction

        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        service = unavailable_service(exception)
        if service is None:
            return None
        return outage_response(request, service, exception)


def retry_when_unavailable(task_body: F) -> F:
    """For Celery task bodies: an outage error becomes ServiceUnavailable, which the task's
    `autoretry_for` retries with backoff; any other error is left as it is."""

    @functools.wraps(task_body)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return task_body(*args, **kwargs)
        except ServiceUnavailable:
            raise
        except Exception as exc:
            service = unavailable_service(exc)
            if service is None:
                raise
            log.warning(
                "%s: %s is unavailable (%s); retrying", task_body.__name__, service, _describe(exc)
            )
            raise ServiceUnavailable(service, _describe(exc)) from exc

    return run  # type: ignore[return-value]


# Task options for work that must survive an outage: bounded exponential backoff with jitter.
RETRY_ON_OUTAGE = {
    "retry_backoff": 2,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": 8,
}
