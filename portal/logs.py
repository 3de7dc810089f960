"""Log lines that say which request and which job they belong to.

`request_id` and `job_id` live in context variables: the request-id middleware sets the first for
each request (from an `X-Request-ID` header, or a new one, echoed in the response), and the
reconcile task sets the second. `ContextFilter` copies both onto every record, so the text format
can use them too; with PORTAL_LOG_FORMAT=json, `JsonFormatter` writes one JSON object per line:
time, level, logger, message, request_id and job_id when known, and the traceback as one field.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)
job_id_var: ContextVar[int | None] = ContextVar("job_id", default=None)

REQUEST_ID_HEADER = "X-Request-ID"
# What a proxy's or client's id may look like to be reused as ours (anything else is replaced:
# it ends up in every log line of the request).
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")


@contextmanager
def log_context(*, job_id: int | None = None, request_id: str | None = None) -> Iterator[None]:
    """Tag the log lines written inside the block (and in what it calls) with these ids."""
    tokens = []
    if job_id is not None:
        tokens.append((job_id_var, job_id_var.set(job_id)))
    if request_id is not None:
        tokens.append((request_id_var, request_id_var.set(request_id)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def request_id_for(header_value: str | None) -> str:
    """The client's (or proxy's) request id when it is a sane token, else a new one."""
    if header_value and _CLIENT_REQUEST_ID.match(header_value):
        return header_value
    return uuid.uuid4().hex


class ContextFilter(logging.Filter):
    """Copies the current request id and job id onto each record (None when unknown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            # django.request's lines ("Not Found: /x") are written after the middleware has
            # returned, but they carry the request.
            request = getattr(record, "request", None)
            record.request_id = getattr(request, "request_id", None) or request_id_var.get()
        if getattr(record, "job_id", None) is None:
            record.job_id = job_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log collectors (Loki, Elasticsearch, Cloud Logging)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None) or request_id_var.get()
        job_id = getattr(record, "job_id", None) or job_id_var.get()
        if request_id is not None:
            entry["request_id"] = request_id
        if job_id is not None:
            entry["job_id"] = job_id
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class RequestIdMiddleware:
    """Outermost middleware: every log line of a request carries its id, and the response
    says it (`X-Request-ID`), so a user's report can be matched to the server's log."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self._acall(request)
        request_id = request_id_for(request.headers.get(REQUEST_ID_HEADER))
        request.request_id = request_id
        with log_context(request_id=request_id):
            response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        return response

    async def _acall(self, request):
        request_id = request_id_for(request.headers.get(REQUEST_ID_HEADER))
        request.request_id = request_id
        with log_context(request_id=request_id):
            response = await self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        return response
