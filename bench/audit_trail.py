"""Benchmark: what the audit trail costs. The price of one `record()` (alone, and as a share of
a small service write that records it), and the first page of the trail as it grows to 1M rows.

In process, against its own database (gp_bench_audit, dropped at the end unless --keep):

1. `record()` --calls times inside a request's audit context, each in its own transaction as a
   service's write is (p50/p99 µs), and a membership role change with and without its row
   (the service's own locks and update, `record` swapped for a no-op in the second run).
2. The trail grows 10k → 100k → 1M rows (bulk INSERT … SELECT FROM generate_series over 40
   projects and 50 actors), and at each size the first page is read --requests times: the
   API's GET /api/v1/audit/ as staff (every row) and as a project admin with ?project=, and the
   project page's trail section (25 rows, estimated count) — p50/p99 ms, in process through
   Django's test client (no HTTP server: the figures are the portal's own work).

    .venv/bin/python bench/audit_trail.py [--sizes 10000,100000,1000000] [--calls 2000]
        [--requests 50] [--keep]

Needs PostgreSQL (BENCH_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/gp_bench_audit).
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as harness

DATABASE_URL = harness.database_url("gp_bench_audit")
PROJECTS = 40
USERS = 50
CHUNK = 100_000


def seed():
    from django.contrib.auth import get_user_model

    from tenants.models import Department, Membership, Project

    User = get_user_model()
    department = Department.objects.create(slug="bench", name="Bench")
    projects = [
        Project.objects.create(slug=f"proj-{i}", name=f"P{i}", department=department)
        for i in range(PROJECTS)
    ]
    users = [User.objects.create(username=f"user-{i}") for i in range(USERS)]
    staff = User.objects.create(username="staff", is_staff=True)
    admin, member = users[0], users[1]
    Membership.objects.create(user=admin, project=projects[0], role="admin")
    Membership.objects.create(user=member, project=projects[0], role="member")
    return projects, users, staff


def timed(fn, count: int) -> list[float]:
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def measure_record(calls: int, projects, users) -> None:
    from django.db import transaction

    from audit import services as audit_services
    from audit.context import audit_context
    from tenants import services as tenant_services
    from tenants.models import Membership

    project, admin = projects[0], users[0]

    def one_record():
        with transaction.atomic():
            audit_services.record(
                "job.cancel",
                actor=admin,
                target=("jobs.job", 812, "train-812"),
                project=project,
                changes={"state": ["running", "cancelled"]},
            )

    membership = Membership.objects.get(project=project, user=users[1])
    roles = itertools.cycle(["viewer", "member"])

    def role_change():
        tenant_services.membership_change_role(actor=admin, membership=membership, role=next(roles))

    with audit_context(source="api", request_id="bench-request", ip="10.0.0.1"):
        timed(one_record, 50)  # warm-up
        alone = [t * 1e6 for t in timed(one_record, calls)]
        timed(role_change, 50)
        with_row = [t * 1e6 for t in timed(role_change, calls)]
        original = tenant_services.record
        tenant_services.record = lambda *a, **k: None
        try:
            timed(role_change, 50)
            without_row = [t * 1e6 for t in timed(role_change, calls)]
        finally:
            tenant_services.record = original
    for label, values in [
        ("record() alone", alone),
        ("role change with its row", with_row),
        ("role change without", without_row),
    ]:
        p50, p99 = statistics.median(values), harness.percentile(values, 0.99)
        print(f"  {label:<26} p50 {p50:8.0f} µs  p99 {p99:8.0f} µs", flush=True)
        harness.figure(f"{label} p50", p50, "µs")
    extra = statistics.median(with_row) - statistics.median(without_row)
    print(f"  the row adds {extra:.0f} µs to a role change (p50)", flush=True)
    harness.figure("row added to a write p50", extra, "µs")


def grow(projects, users, start: int, stop: int) -> float:
    """Rows start..stop-1, spread over the projects and actors, newest last, one a second."""
    from django.db import connection

    t0 = time.perf_counter()
    project_ids = [p.pk for p in projects]
    user_ids = [u.pk for u in users]
    with connection.cursor() as cursor:
        for lo in range(start, stop, CHUNK):
            hi = min(stop, lo + CHUNK)
            cursor.execute(
                """
                INSERT INTO audit_auditevent (created_at, actor_id, actor_username, action,
                    target_type, target_id, target_repr, project_id, project_slug, changes,
                    detail, source, request_id, ip)
                SELECT now() - make_interval(secs => %(stop)s - n), u.id, u.username,
                    (ARRAY['job.submit','job.cancel','quota.set','membership.role'])[1 + n %% 4],
                    'jobs.job', n::text, 'job-' || n, p.id, p.slug,
                    '{"state": ["running", "cancelled"]}'::jsonb, '', 'api', 'req-' || n,
                    '10.0.0.1'
                FROM generate_series(%(lo)s, %(hi)s - 1) AS n
                JOIN tenants_project p ON p.id = (%(projects)s::int[])[1 + n %% %(np)s]
                JOIN auth_user u ON u.id = (%(users)s::int[])[1 + n %% %(nu)s]
                """,
                {
                    "lo": lo,
                    "hi": hi,
                    "stop": stop,
                    "projects": project_ids,
                    "users": user_ids,
                    "np": len(project_ids),
                    "nu": len(user_ids),
                },
            )
        cursor.execute("ANALYZE audit_auditevent")
    return time.perf_counter() - t0


def measure_pages(requests: int, projects, users, staff) -> list[tuple[str, float, float]]:
    from rest_framework.test import APIClient

    from audit.selectors import project_trail
    from portal.pagination import EstimatedCountPaginator

    staff_client, admin_client = APIClient(), APIClient()
    staff_client.force_authenticate(staff)
    admin_client.force_authenticate(users[0])
    slug = projects[0].slug

    def api(client, url):
        def call():
            response = client.get(url, HTTP_ACCEPT="application/json")
            if response.status_code != 200:
                raise SystemExit(f"{url}: HTTP {response.status_code}")

        return call

    def page_section():
        page = EstimatedCountPaginator(project_trail(projects[0]), 25).get_page(1)
        list(page.object_list)
        _ = page.paginator.count_display

    kinds = [
        ("API, staff, every row", api(staff_client, "/api/v1/audit/")),
        ("API, admin, ?project=", api(admin_client, f"/api/v1/audit/?project={slug}")),
        ("API, ?action=job.cancel", api(staff_client, "/api/v1/audit/?action=job.cancel")),
        ("project page section", page_section),
    ]
    results = []
    for label, fn in kinds:
        timed(fn, 5)
        values = [t * 1000 for t in timed(fn, requests)]
        results.append((label, statistics.median(values), harness.percentile(values, 0.99)))
    return results


def main() -> int:
    parser = harness.make_parser(
        __doc__, short={"sizes": "10000,100000", "calls": 300, "requests": 10}
    )
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> None:
    sizes = [int(x) for x in args.sizes.split(",")]
    with harness.scratch_database(DATABASE_URL, keep=args.keep):
        harness.setup_django(database_url=DATABASE_URL, SECRET_KEY=harness.SECRET_KEY)
        from django.conf import settings

        settings.ALLOWED_HOSTS = ["*"]
        settings.PORTAL_API_RATE_TOKEN = settings.PORTAL_API_RATE_USER = "off"
        settings.PORTAL_API_RATE_ANON = "off"
        projects, users, staff = seed()
        print(f"record(): {args.calls} calls, each in its own transaction", flush=True)
        measure_record(args.calls, projects, users)
        stored = 0
        table: dict[str, dict[int, tuple[float, float]]] = {}
        for size in sizes:
            took = grow(projects, users, stored, size)
            stored = size
            print(f"{size:>9,} rows stored (+{took:.1f} s bulk insert + ANALYZE)", flush=True)
            for label, p50, p99 in measure_pages(args.requests, projects, users, staff):
                table.setdefault(label, {})[size] = (p50, p99)
                print(f"  {label:<26} p50 {p50:7.1f} ms  p99 {p99:7.1f} ms", flush=True)
                harness.figure(f"{label} at {size:,} p50", p50, "ms")
    print()
    print(f"first page, {args.requests} sequential requests each, in process")
    print("| first page (p50 / p99 ms) | " + " | ".join(f"{s:,} rows" for s in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for label, by_size in table.items():
        cells = " | ".join(f"{by_size[s][0]:.1f} / {by_size[s][1]:.1f}" for s in sizes)
        print(f"| {label} | {cells} |")


if __name__ == "__main__":
    sys.exit(main())
