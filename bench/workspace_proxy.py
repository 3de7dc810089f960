"""Benchmark: what the portal's workspace proxy (/ws/<id>/) adds over going to the Service.

Starts kubesim (which runs the real jupyter-server for the workspace's pod) and uvicorn on the
portal, starts a JupyterLab workspace on a MIG slice (in this process: the job reconciled until
it runs, its Service applied), puts a 10 MB file in it, then measures, through the portal's
proxy and straight to the Service (kubesim's API-server service proxy, with the portal's own
cluster credentials and the workspace token, i.e. the proxy's upstream request):
  1. per request: p50 / p95 of GET api/status, one at a time (N requests, default 300);
  2. download: the 10 MB file, median time and MB/s (M downloads, default 10).
The difference is the proxy's overhead: session check (cached 5 s), header filtering and one
more hop of streaming.

Needs PostgreSQL and Redis (as `make test`); uses its own database (gpportal_bench_ws).

    .venv/bin/python bench/workspace_proxy.py [--requests 300] [--downloads 10]
"""

from __future__ import annotations

import base64
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as harness

DATABASE_URL = harness.database_url("gpportal_bench_ws")
REDIS_URL = harness.redis_url(14)
H100 = "NVIDIA-H100-80GB-HBM3"
SIZE = 10 * 2**20


def start_workspace(kubeconfig: Path):
    """An organisation synced into kubesim and a running workspace; (workspace, cookie)."""
    from django.test import Client
    from django.utils import timezone

    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile
    from portal.kube.client import reset_api_client
    from quotas.models import GpuPool, ProjectQuota
    from quotas.sync import sync_quota_objects
    from tenants.models import Department, Membership, Project
    from workspaces.services import workspace_start, workspace_sync

    os.environ["KUBECONFIG"] = str(kubeconfig)
    from django.conf import settings

    settings.KUBECONFIG = str(kubeconfig)
    reset_api_client()
    harness.ensure_priority_classes()
    dept, _ = Department.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    project, _ = Project.objects.get_or_create(
        slug="wsbench", defaults={"name": "WS bench", "department": dept}
    )
    pool, _ = GpuPool.objects.get_or_create(
        slug="h100",
        defaults={
            "name": "H100",
            "gpu_model": H100,
            "node_labels": {"nvidia.com/gpu.product": H100},
            "node_count": 3,
            "mig_profiles": ["1g.10gb"],
        },
    )
    ProjectQuota.objects.get_or_create(
        project=project, pool=pool, resource="1g.10gb", defaults={"nominal": 4}
    )
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="ws-bench")
    Membership.objects.get_or_create(user=user, project=project, defaults={"role": "member"})
    assert sync_quota_objects().errors == []
    name = f"b{int(time.time()) % 10**6}"
    ws = workspace_start(
        actor=user, project=project, kind="jupyterlab", shape="mig:1g.10gb", name=name
    )
    workspace_sync(ws.pk)
    deadline = time.monotonic() + 120
    while Job.objects.get(pk=ws.job_id).state != "running":
        if time.monotonic() > deadline:
            raise SystemExit("the workspace's job did not start")
        job_reconcile(job_id=ws.job_id)
        time.sleep(0.3)
    ws.refresh_from_db()
    ws.last_activity_at = timezone.now()
    ws.save(update_fields=["last_activity_at"])
    client = Client()
    client.force_login(user)
    return ws, client.cookies["sessionid"].value


def direct(ws):
    """(url prefix, httpx kwargs) of the proxy's own upstream request for this workspace."""
    from workspaces import launch
    from workspaces.upstream import target_for

    target = target_for(ws)
    creds = launch.credentials(ws.kind.app, token=ws.token, via_api_server=target.via_api_server)
    return target.base_url, {
        "verify": target.ssl_context or True,
        "headers": {**target.headers, **creds.headers},
        "params": creds.query,
    }


def timings(client, url: str, n: int, **kwargs) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        response = client.get(url, **kwargs)
        response.read()
        out.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise SystemExit(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
    return out


def measure(args, stack: harness.Stack) -> None:
    import httpx

    harness.ensure_database(DATABASE_URL)
    harness.setup_django(
        database_url=DATABASE_URL, SECRET_KEY=harness.SECRET_KEY, CELERY_BROKER_URL=REDIS_URL
    )
    ks = stack.kubesim(speed=100)
    ws, cookie = start_workspace(ks.kubeconfig)
    env = harness.portal_env(
        database_url=DATABASE_URL, redis_url=REDIS_URL, kubeconfig=ks.kubeconfig
    )
    server = stack.asgi(env)
    base, kwargs = direct(ws)
    path = ws.base_path
    verify, headers, params = kwargs["verify"], kwargs["headers"], kwargs["params"]
    with httpx.Client(verify=verify, headers=headers, params=params, timeout=60) as svc:
        harness.wait_until(
            lambda: svc.get(f"{base}{path}api/status").status_code == 200,
            timeout=60,
            what="Jupyter did not answer",
        )
        content = base64.b64encode(os.urandom(SIZE)).decode()
        put = svc.put(
            f"{base}{path}api/contents/big.bin",
            json={"type": "file", "format": "base64", "content": content},
        )
        put.raise_for_status()
        with httpx.Client(cookies={"sessionid": cookie}, timeout=60) as portal:
            portal_url = f"{server.url}{path}"
            for label, client, prefix in (
                ("direct", svc, f"{base}{path}"),
                ("proxy", portal, portal_url),
            ):
                timings(client, prefix + "api/status", 10)  # warm up connections and caches
                small = timings(client, prefix + "api/status", args.requests)
                big = timings(client, prefix + "files/big.bin", args.downloads)
                p50 = 1000 * statistics.median(small)
                p95 = 1000 * harness.percentile(small, 0.95)
                seconds = statistics.median(big)
                print(
                    f"{label:>6}: GET api/status p50 {p50:.1f} ms, p95 {p95:.1f} ms; "
                    f"10 MB download {1000 * seconds:.0f} ms ({SIZE / 2**20 / seconds:.0f} MB/s)"
                )
                harness.figure(f"{label} request p50", p50, "ms")
                harness.figure(f"{label} request p95", p95, "ms")
                harness.figure(f"{label} 10 MB download", 1000 * seconds, "ms")


def main() -> int:
    parser = harness.make_parser(
        __doc__, short={"requests": 30, "downloads": 3}, services=("postgres", "redis")
    )
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--downloads", type=int, default=10)
    args = harness.parse_args(parser)
    return harness.run(args, measure)


if __name__ == "__main__":
    sys.exit(main())
