"""Liveness/readiness endpoints for load balancers, the compose healthcheck and kubelet probes.

`/healthz` checks the database only (cheap, for every probe): readiness. `/healthz?deep=1` also
asks the Kubernetes API which job backends' CRDs it serves: a cluster without Volcano answers 200
with status "degraded" and says what is missing; an unreachable API answers 503. `/livez` checks
nothing but that the process answers: liveness, which must not fail (and restart every web pod)
while the database is down.

Kubelet probes and Prometheus call the pod by its IP, over plain HTTP, with a Host header that
is not in ALLOWED_HOSTS: ProbeEndpointsMiddleware answers these paths before the host check and
the HTTPS redirect (both protect pages with links and forms; these answers have neither).
"""

from collections.abc import Callable

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse

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
        if not _kai_pools_exist():
            # KAI Scheduler is needed only by pools that run on it: its absence is no fault.
            backends = [b for b in backends if b.backend != "kai"]
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


def _kai_pools_exist() -> bool:
    from quotas.models import GpuPool, PoolScheduler

    return GpuPool.objects.filter(scheduler=PoolScheduler.KAI).exists()


def livez(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _bearer_scrape(request: HttpRequest) -> bool:
    """A scraper's request: a metrics token is configured and the request carries a bearer."""
    from django.conf import settings

    return bool(getattr(settings, "PORTAL_METRICS_TOKEN", "")) and request.headers.get(
        "Authorization", ""
    ).startswith("Bearer ")


class ProbeEndpointsMiddleware:
    """Answers /livez, /healthz and a bearer-token /metrics scrape whatever the Host header and
    scheme; first in MIDDLEWARE. Anything else (a staff session reading /metrics included) goes
    through the whole stack."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method in ("GET", "HEAD"):
            if request.path == "/livez":
                return livez(request)
            if request.path == "/healthz":
                return healthz(request)
            if request.path == "/metrics" and _bearer_scrape(request):
                from portal.observability import metrics_view

                return metrics_view(request)
        return self.get_response(request)
