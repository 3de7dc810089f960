"""Liveness/readiness endpoint for load balancers and the compose healthcheck.

`/healthz` checks the database only (cheap, for every probe). `/healthz?deep=1` also asks the
Kubernetes API which job backends' CRDs it serves: a cluster without Volcano answers 200 with
status "degraded" and says what is missing; an unreachable API answers 503.
"""

from django.db import connection
from django.http import HttpRequest, JsonResponse

from portal.kube import discovery
from portal.kube.apply import KubeError


def healthz(request: HttpRequest) -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # the point is to report any failure, not to crash
        return JsonResponse({"status": "error", "database": str(exc)}, status=503)
    if request.GET.get("deep", "").lower() not in ("1", "true", "yes"):
        return JsonResponse({"status": "ok"})
    body: dict = {"status": "ok", "database": "ok"}
    try:
        backends = discovery.all_backends(max_age=0)
    except KubeError as exc:
        body.update(status="error", kubernetes=exc.message)
        return JsonResponse(body, status=503)
    except Exception as exc:  # e.g. no kubeconfig at all: report it, do not crash
        body.update(status="error", kubernetes=f"not configured: {exc}")
        return JsonResponse(body, status=503)
    body["kubernetes"] = "ok"
    body["backends"] = {
        b.backend: {"installed": b.installed, "missing": list(b.missing), "message": b.message}
        for b in backends
    }
    if not all(b.installed for b in backends):
        body["status"] = "degraded"
    return JsonResponse(body)
