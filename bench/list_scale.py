"""Benchmark: the job list at 10k, 100k and 1M stored jobs (API and HTML), p50/p99 per request.

Builds its own database (gp_bench_list, dropped at the end unless --keep) in bulk: projects,
users and memberships through the ORM, then the jobs with server-side multi-row
INSERT … SELECT FROM generate_series (100,000 rows a statement), growing 10k → 100k → 1M and
measuring at each size. The measured user is a member of a quarter of the projects (so sees a
quarter of the jobs), as the issue's figures. gunicorn serves with 2 workers, one keep-alive
client asks each request kind --requests times after a warm-up, sequentially.

    .venv/bin/python bench/list_scale.py [--sizes 10000,100000,1000000] [--requests 200]
        [--conn-max-age 60] [--keep]

Needs PostgreSQL (BENCH_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/gp_bench_list).
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as harness

REPO = harness.REPO
DATABASE_URL = harness.database_url("gp_bench_list")
PROJECTS = 40
USERS = 50
CHUNK = 100_000


def setup_django() -> None:
    harness.setup_django(
        database_url=DATABASE_URL,
        # The seeded session is signed with this key: the web server uses the same one.
        SECRET_KEY=harness.SECRET_KEY,
        # The pages are served as in production (DEBUG off): from collected, hashed static files.
        STATIC_ROOT=tempfile.mkdtemp(prefix="bench-list-static-"),
    )
    from django.core.management import call_command

    call_command("collectstatic", interactive=False, verbosity=0)


def seed():
    """40 projects in 4 departments, 50 users; `bench` belongs to 10 projects (a quarter)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import update_last_login
    from django.contrib.sessions.backends.db import SessionStore
    from knox.models import AuthToken

    from quotas.models import GpuPool
    from tenants.models import Department, Membership, Project

    User = get_user_model()
    pool = GpuPool.objects.create(
        slug="list-h100",
        name="H100",
        gpu_model="NVIDIA-H100-80GB-HBM3",
        node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        node_count=100,
        gpus_per_node=8,
    )
    departments = [
        Department.objects.create(slug=f"dept-{i}", name=f"Department {i}") for i in range(4)
    ]
    projects = [
        Project.objects.create(slug=f"proj-{i}", name=f"P{i}", department=departments[i % 4])
        for i in range(PROJECTS)
    ]
    users = [User.objects.create(username="bench")] + [
        User.objects.create(username=f"user-{i}") for i in range(1, USERS)
    ]
    for i, user in enumerate(users):
        for j in range(10):  # everyone in 10 projects
            Membership.objects.create(user=user, project=projects[(i + j) % PROJECTS])
    bench = users[0]
    # What the beat task does every few minutes (autovacuum may be off on this server).
    from portal.dbstats import analyze_small_tables

    analyze_small_tables()
    _, token = AuthToken.objects.create(bench)
    session = SessionStore()
    session["_auth_user_id"] = str(bench.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = bench.get_session_auth_hash()
    session.create()
    update_last_login(None, bench)
    return pool, [p.pk for p in projects], [u.pk for u in users], token, session.session_key


INSERT = """
INSERT INTO jobs_job (project_id, submitter_id, name, kind, image, command, env, gpus,
  mig_profile, replicas, pool_id, eligible_pools, cpu, memory, priority, max_runtime_minutes,
  backend, state, state_reason, state_message, state_changed_at, applied_at, cleanup_pending,
  last_reconciled_at, logs_tail, queue_position, queue_length, explanation, created_at,
  updated_at, checkpoint_claim, checkpoint_dir, mounts, shm_size, termination_grace_seconds,
  secret_files, params, superseded, device_request)
SELECT
  (%(projects)s::bigint[])[1 + abs(hashtext(g::text)) %% %(np)s],
  (%(users)s::bigint[])[1 + abs(hashtext((g * 3)::text)) %% %(nu)s],
  'job-' || g,
  k.kind,
  'nvcr.io/nvidia/pytorch:24.08-py3', '["python", "train.py"]', '{}',
  CASE k.kind WHEN 'mig' THEN 0 WHEN 'gang' THEN 8 ELSE 1 END,
  CASE k.kind WHEN 'mig' THEN '1g.10gb' ELSE '' END,
  CASE k.kind WHEN 'gang' THEN 4 ELSE 1 END,
  %(pool)s, '[]', '8', '64Gi', 'normal', 1440,
  CASE k.kind WHEN 'gang' THEN 'volcano' ELSE 'kueue' END,
  s.state, '', '', t.at, t.at, false, t.at, '', NULL, NULL, '', t.at, t.at,
  '', '', '[]', '32Gi', 60, '[]', '{}', false, '{}'
FROM generate_series(%(start)s, %(stop)s) AS g,
  LATERAL (SELECT CASE abs(hashtext(g::text || 'k')) %% 20
                    WHEN 0 THEN 'gang' WHEN 1 THEN 'gang' WHEN 2 THEN 'mig' ELSE 'single' END
                    AS kind) AS k,
  LATERAL (SELECT CASE WHEN g %% 50 = 0 THEN 'failed' WHEN g %% 97 = 0 THEN 'cancelled'
                    ELSE 'succeeded' END AS state) AS s,
  -- three jobs a second: ties on created_at, as bulk submissions make
  LATERAL (SELECT timestamptz '2025-01-01 00:00:00+00' + (g / 3) * interval '1 second' AS at) t
"""


def grow(pool, projects, users, start: int, stop: int) -> float:
    from django.db import connection

    t0 = time.monotonic()
    with connection.cursor() as cursor:
        for first in range(start, stop, CHUNK):
            cursor.execute(
                INSERT,
                {
                    "projects": projects,
                    "users": users,
                    "np": len(projects),
                    "nu": len(users),
                    "pool": pool.pk,
                    "start": first + 1,
                    "stop": min(stop, first + CHUNK),
                },
            )
        cursor.execute("VACUUM ANALYZE jobs_job")
    return time.monotonic() - t0


def start_web(stack: harness.Stack, port: int, conn_max_age: int, code: Path = REPO, label="web"):
    env = harness.portal_env(
        database_url=DATABASE_URL,
        kube_qps=None,
        code=code,
        extra={
            "PYTHONDONTWRITEBYTECODE": "1",  # --baseline may point at a checkout to leave as is
            "CONN_MAX_AGE": conn_max_age,
        },
    )
    return stack.web(env, port=port, code=code, label=label)


def requests_to_time(base: str, job_id: int, project: str, deep_cursor: str) -> list:
    return [
        ("GET /api/v1/jobs/", f"{base}/api/v1/jobs/", "api"),
        ("?page=50", f"{base}/api/v1/jobs/?page=50", "api"),
        ("?submitter=…&kind=gang", f"{base}/api/v1/jobs/?submitter=bench&kind=gang", "api"),
        ("/jobs/ (HTML)", f"{base}/jobs/", "html"),
        ("/api/v1/jobs/ID/", f"{base}/api/v1/jobs/{job_id}/", "api"),
        ("?state=failed", f"{base}/api/v1/jobs/?state=failed", "api"),
        ("?project=…", f"{base}/api/v1/jobs/?project={project}", "api"),
        ("?kind=mig", f"{base}/api/v1/jobs/?kind=mig", "api"),
        ("/jobs/?page=50 (HTML)", f"{base}/jobs/?page=50", "html"),
        ("?cursor= (row 50,000)", f"{base}/api/v1/jobs/?cursor={deep_cursor}", "api"),
        ("?state=failed&kind=mig", f"{base}/api/v1/jobs/?state=failed&kind=mig", "api"),
        ("?project=…&kind=gang", f"{base}/api/v1/jobs/?project={project}&kind=gang", "api"),
        ("/jobs/?kind=mig (HTML)", f"{base}/jobs/?kind=mig", "html"),
    ]


NEW_INDEXES = {
    "job_newest_first": "(created_at DESC, id DESC)",
    "job_project_newest": "(project_id, created_at DESC, id DESC)",
    "job_submitter_newest": "(submitter_id, created_at DESC, id DESC)",
    "job_state_newest": "(state, created_at DESC, id DESC)",
    "job_kind_newest": "(kind, created_at DESC, id DESC)",
}
OLD_INDEXES = {
    "jobs_job_project_1cf14b_idx": "(project_id, created_at DESC)",
    "jobs_job_state_7f24c5_idx": "(state)",
}


def swap_indexes(drop: dict, create: dict) -> None:
    """Between the indexes before 0009 and after it, for a --baseline measurement."""
    from django.db import connection

    with connection.cursor() as cursor:
        for name in drop:
            cursor.execute(f"DROP INDEX IF EXISTS {name}")
        for name, columns in create.items():
            cursor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON jobs_job {columns}")
        cursor.execute("ANALYZE jobs_job")


def measure_requests(
    base: str, token: str, session_key: str, count: int, size: int, kinds: int | None = None
):
    import requests

    from jobs.models import Job
    from portal.pagination import KeysetCursor
    from tenants.models import Membership

    mine = list(Membership.objects.filter(user__username="bench").values_list("project", flat=True))
    visible = Job.objects.filter(project__in=mine).order_by("-created_at", "-id")
    newest = visible.first()
    deep = visible[min(49_999, size // 5)]  # about 250,000 rows visible at 1M
    cursor = KeysetCursor.after(deep).encode()
    project = newest.project.slug
    api = requests.Session()
    api.headers["Authorization"] = f"Token {token}"
    html = requests.Session()
    html.cookies.set("sessionid", session_key)
    results = []
    for label, url, kind in requests_to_time(base, newest.pk, project, cursor)[:kinds]:
        client = api if kind == "api" else html
        for _ in range(10):  # warm-up: connections, caches
            warm = client.get(url, timeout=60, allow_redirects=False)
            # A redirect would be the login page: then the session was not accepted.
            if warm.status_code != 200:
                raise SystemExit(f"{label}: HTTP {warm.status_code} from {url}")
        times = []
        for _ in range(count):
            t0 = time.perf_counter()
            response = client.get(url, timeout=60, allow_redirects=False)
            times.append((time.perf_counter() - t0) * 1000)
            response.raise_for_status()
        body = response.json() if kind == "api" else {}
        shown = body.get("count", "")
        if body.get("count_is_estimate"):
            shown = f"about {shown}"
        results.append((label, statistics.median(times), harness.percentile(times, 0.99), shown))
    return results


def main() -> int:
    parser = harness.make_parser(
        __doc__, short={"sizes": "10000", "requests": 20}, services=("postgres",)
    )
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--conn-max-age", type=int, default=60)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also measure this checkout (e.g. the main branch) with the indexes before 0009 "
        "and CONN_MAX_AGE=0: the issue's five requests, as 'before'",
    )
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> None:
    sizes = [int(x) for x in args.sizes.split(",")]
    table: dict[str, dict[int, tuple[float, float, str]]] = {}
    before: dict[str, dict[int, tuple[float, float, str]]] = {}
    with harness.scratch_database(DATABASE_URL, keep=args.keep):
        setup_django()
        pool, projects, users, token, session_key = seed()
        port = harness.free_port()
        base = f"http://127.0.0.1:{port}"
        stored = 0
        web = None
        for size in sizes:
            took = grow(pool, projects, users, stored, size)
            stored = size
            print(
                f"{size:>9,} jobs stored (+{took:.1f} s bulk insert + VACUUM ANALYZE)", flush=True
            )
            if web is None:
                web = start_web(stack, port, args.conn_max_age)
            for label, p50, p99, shown in measure_requests(
                base, token, session_key, args.requests, size
            ):
                table.setdefault(label, {})[size] = (p50, p99, shown)
                print(
                    f"  {label:<26} p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  count {shown}", flush=True
                )
                harness.figure(f"{label} at {size:,} p50", p50, "ms")
                harness.figure(f"{label} at {size:,} p99", p99, "ms")
            if args.baseline:
                stack.stop(web)
                swap_indexes(NEW_INDEXES, OLD_INDEXES)
                old = start_web(stack, port, 0, code=args.baseline, label="web-before")
                try:
                    rows = measure_requests(base, token, session_key, args.requests, size, kinds=5)
                finally:
                    stack.stop(old)
                    swap_indexes(OLD_INDEXES, NEW_INDEXES)
                for label, p50, p99, shown in rows:
                    before.setdefault(label, {})[size] = (p50, p99, shown)
                    print(f"  before: {label:<18} p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  {shown}")
                web = start_web(stack, port, args.conn_max_age)
        if web is not None:
            stack.stop(web)

    print()
    print(
        f"gunicorn 2 workers, CONN_MAX_AGE={args.conn_max_age}, {args.requests} sequential "
        "requests each, member of 10 of 40 projects (a quarter of the jobs)"
    )
    header = " | ".join(f"{s:,} jobs" for s in sizes)
    print(f"| request (p50 / p99 ms) | {header} |")
    print("|---|" + "---|" * len(sizes))
    for label, by_size in table.items():
        cells = " | ".join(f"{by_size[s][0]:.0f} / {by_size[s][1]:.0f}" for s in sizes)
        print(f"| `{label}` | {cells} |")
    for label, by_size in before.items():
        cells = " | ".join(f"{by_size[s][0]:.0f} / {by_size[s][1]:.0f}" for s in sizes)
        print(f"| before: `{label}` | {cells} |")


if __name__ == "__main__":
    sys.exit(main())
