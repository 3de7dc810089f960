"""Profile: where each millisecond of a job POST and of its reconcile goes, and the floor.

In one process (no HTTP server: bench/submit.py measures that), against PostgreSQL, Redis and
kubesim (API only, CRDs loaded), with persistent connections:
  1. N POSTs of a single-GPU job through the real URL stack (DRF test client, token auth);
  2. N reconciles of those jobs (`jobs.reconcile.job_reconcile`, the task's body).
Each is split into database time (every query, timed by an execute wrapper), Kubernetes API
time (every call of portal.kube.apply), Celery enqueue (the broker send) and the Python that
remains, whose largest parts come from cProfile (a second, profiled round). The floor is what
remains when the Python part is taken as free: the round trips this path cannot avoid.

    .venv/bin/python bench/submit_profile.py [--jobs 300]

Uses its own database (gp_bench_profile, dropped afterwards) and BENCH_REDIS_URL (default
redis://127.0.0.1:6379/12).
"""

import cProfile
import io
import pstats
import statistics
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as harness

REPO = harness.REPO
DATABASE_URL = harness.database_url("gp_bench_profile")
REDIS_URL = harness.redis_url(12)
IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"


def seed():
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    from quotas.models import GpuPool, ProjectQuota
    from tenants.models import Department, Membership, Project

    department = Department.objects.create(slug="prof", name="Profile")
    pool = GpuPool.objects.create(
        slug="prof-h100",
        name="H100",
        gpu_model="NVIDIA-H100-80GB-HBM3",
        node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        node_count=1000,
        gpus_per_node=8,
    )
    harness.ensure_priority_classes()
    user = get_user_model().objects.create(username="prof")
    project = Project.objects.create(slug="prof-0", name="Prof 0", department=department)
    ProjectQuota.objects.create(project=project, pool=pool, resource="gpu", nominal=8000)
    Membership.objects.create(user=user, project=project, role="member")
    _, token = AuthToken.objects.create(user)
    return project, token


class Split:
    """Accumulates milliseconds per category for the operation being timed."""

    def __init__(self):
        self.ms: dict[str, list[float]] = defaultdict(list)
        self.current: dict[str, float] = defaultdict(float)
        self.counts: dict[str, list[int]] = defaultdict(list)
        self.current_counts: dict[str, int] = defaultdict(int)

    def add(self, category: str, seconds: float) -> None:
        self.current[category] += seconds * 1000
        self.current_counts[category] += 1

    @contextmanager
    def operation(self):
        self.current.clear()
        self.current_counts.clear()
        t0 = time.perf_counter()
        yield
        total = (time.perf_counter() - t0) * 1000
        self.ms["total"].append(total)
        for category in ("database", "kubernetes API", "celery enqueue"):
            self.ms[category].append(self.current.get(category, 0.0))
            self.counts[category].append(self.current_counts.get(category, 0))
        self.ms["python (the rest)"].append(
            total
            - sum(
                self.current.get(c, 0.0) for c in ("database", "kubernetes API", "celery enqueue")
            )
        )


@contextmanager
def instrumented(split: Split):
    from django.db import connection

    from jobs import services
    from portal.kube import apply as kube

    def db_wrapper(execute, sql, params, many, context):
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            split.add("database", time.perf_counter() - t0)

    real_call, real_send = kube._call_raw, services._send

    def timed_call(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return real_call(*args, **kwargs)
        finally:
            split.add("kubernetes API", time.perf_counter() - t0)

    def timed_send(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return real_send(*args, **kwargs)
        finally:
            split.add("celery enqueue", time.perf_counter() - t0)

    kube._call_raw, services._send = timed_call, timed_send
    try:
        with connection.execute_wrapper(db_wrapper):
            yield
    finally:
        kube._call_raw, services._send = real_call, real_send


def post(client, project, i: int, tag: str) -> int:
    body = {
        "project": project.slug,
        "name": f"{tag}-{i}",
        "kind": "single",
        "image": IMAGE,
        "command": ["python", "train.py"],
        "gpus": 1,
    }
    response = client.post("/api/v1/jobs/", body, format="json")
    if response.status_code != 201:
        raise RuntimeError(f"POST answered {response.status_code}: {response.content[:300]}")
    return response.json()["id"]


def report(title: str, split: Split) -> None:
    total = statistics.median(split.ms["total"])
    print(f"\n{title}: median {total:.2f} ms over {len(split.ms['total'])}")
    for category, values in split.ms.items():
        if category == "total":
            continue
        count = split.counts.get(category)
        calls = f" ({statistics.median(count):.0f} calls)" if count else ""
        print(f"  {category:<20} {statistics.median(values):7.2f} ms{calls}")


def top_functions(profile: cProfile.Profile, prefixes: tuple[str, ...], n: int = 12) -> None:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    rows = []
    for (filename, _line, name), (_, _, _, cumulative, _) in stats.stats.items():
        if (filename.startswith(str(REPO)) and ".venv" not in filename) or any(
            p in filename for p in prefixes
        ):
            rows.append((cumulative, f"{Path(filename).parent.name}/{Path(filename).name}:{name}"))
    for cumulative, where in sorted(rows, reverse=True)[:n]:
        print(f"    {cumulative * 1000:9.1f} ms cumulative  {where}")


def main() -> int:
    parser = harness.make_parser(__doc__, short={"jobs": 30}, services=("postgres", "redis"))
    parser.add_argument("--jobs", type=int, default=300)
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> None:
    with harness.scratch_database(DATABASE_URL):
        ks = stack.kubesim(no_cluster=True)
        harness.setup_django(
            database_url=DATABASE_URL,
            CELERY_BROKER_URL=REDIS_URL,
            KUBECONFIG=ks.kubeconfig,
            PORTAL_KUBE_QPS=0,
            DEBUG="false",
            SECURE_SSL_REDIRECT="false",
            ALLOWED_HOSTS="testserver,127.0.0.1",
            SECRET_KEY=harness.SECRET_KEY,
        )
        from rest_framework.test import APIClient

        from jobs.reconcile.services import job_reconcile
        from quotas.sync import sync_quota_objects

        harness.flush_redis(REDIS_URL)
        project, token = seed()
        sync_quota_objects()
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        for i in range(20):  # warm-up: imports, connections, caches
            job_reconcile(job_id=post(client, project, i, "warm"))

        posts, reconciles = Split(), Split()
        ids = []
        with instrumented(posts):
            for i in range(args.jobs):
                with posts.operation():
                    ids.append(post(client, project, i, "p"))
        with instrumented(reconciles):
            for job_id in ids:
                with reconciles.operation():
                    job_reconcile(job_id=job_id)
        report("POST /api/v1/jobs/ (in process, no HTTP)", posts)
        report("reconcile of a submitted job (apply + read back)", reconciles)

        n = min(100, args.jobs)
        profile = cProfile.Profile()
        profile.enable()
        more = [post(client, project, i, "q") for i in range(n)]
        profile.disable()
        print(f"\n  POST: largest cumulative Python costs over {n} POSTs")
        top_functions(profile, ("rest_framework/renderers", "knox/auth"))
        profile = cProfile.Profile()
        profile.enable()
        for job_id in more:
            job_reconcile(job_id=job_id)
        profile.disable()
        print(f"\n  reconcile: largest cumulative Python costs over {n} reconciles")
        top_functions(profile, ("rest_framework/renderers", "knox/auth"))

        db_post = statistics.median(posts.ms["database"])
        db_rec = statistics.median(reconciles.ms["database"])
        api_rec = statistics.median(reconciles.ms["kubernetes API"])
        enqueue = statistics.median(posts.ms["celery enqueue"])
        print(
            f"\nfloor (Python free): POST {db_post + enqueue:.2f} ms "
            f"(database + enqueue), reconcile {db_rec + api_rec:.2f} ms (database + API)"
        )
        harness.figure("POST median", statistics.median(posts.ms["total"]), "ms")
        harness.figure("reconcile median", statistics.median(reconciles.ms["total"]), "ms")
        harness.figure("POST floor", db_post + enqueue, "ms")
        harness.figure("reconcile floor", db_rec + api_rec, "ms")
        stack.stop(ks)  # before the database goes


if __name__ == "__main__":
    sys.exit(main())
