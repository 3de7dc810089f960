"""Sets the audit context (source, request id, client address) for each request."""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from audit.context import audit_context, source_for_request
from portal.logs import request_id_var


def context_for(request) -> dict:
    return {
        "source": source_for_request(request.path, request.headers.get("User-Agent", "")),
        "request_id": getattr(request, "request_id", None) or request_id_var.get() or "",
        # The direct peer only: a forwarded-for header is whatever the client wrote.
        "ip": request.META.get("REMOTE_ADDR") or None,
        "request": request,
    }


class AuditContextMiddleware:
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
        with audit_context(**context_for(request)):
            return self.get_response(request)

    async def _acall(self, request):
        with audit_context(**context_for(request)):
            return await self.get_response(request)
