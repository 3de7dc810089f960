"""Benchmark: what 1,000 open live pages cost the ASGI server, and how fast a change reaches them.

Starts uvicorn (one worker process, as one gunicorn worker in production) on the portal with
Redis pub/sub, opens N event streams (default 1,000) signed in as a member of one project, then:
  1. connections: open streams, Redis connections the server holds;
  2. memory: the server's resident memory before and with the streams open (per stream);
  3. CPU: the server's CPU time over an idle minute-fraction (keep-alives only) and while
     publishing E job changes (default 50), each fanned out to every stream;
  4. delivery: p50/p99 of publish → received at the client, over every stream and change.

Needs PostgreSQL and Redis (as `make test`); uses its own database (gpportal_bench) and Redis db.

    .venv/bin/python bench/live_pages.py [--pages 1000] [--events 50]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as harness

DATABASE_URL = harness.database_url("gpportal_bench")
REDIS_URL = harness.redis_url(13)


def sign_in() -> str:
    """Make a project with one member; that member's session cookie."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from tenants.models import Department, Membership, Project

    department, _ = Department.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    project, _ = Project.objects.get_or_create(
        slug="livebench", defaults={"name": "Live bench", "department": department}
    )
    user, _ = get_user_model().objects.get_or_create(username="live-bench")
    Membership.objects.get_or_create(user=user, project=project, defaults={"role": "viewer"})
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def open_stream(port: int, cookie: str, received: list[float], ready: asyncio.Event):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET /jobs/live/ HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: sessionid={cookie}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    buffer = b""
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            buffer += chunk
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                text = block.decode(errors="replace")
                if "event: hello" in text:
                    ready.set()
                if "event: job" in text:
                    data = text.split("data: ", 1)[1].splitlines()[0]
                    received.append(time.time() - json.loads(data)["sent"])
    finally:
        writer.close()


async def run(args, port: int, cookie: str, server_pid: int) -> None:
    import redis

    publisher = redis.Redis.from_url(REDIS_URL)
    base_rss = harness.rss_kib(server_pid)
    received: list[float] = []
    readies = [asyncio.Event() for _ in range(args.pages)]
    started = time.monotonic()
    tasks = []
    for index in range(args.pages):
        tasks.append(asyncio.create_task(open_stream(port, cookie, received, readies[index])))
        if index % 50 == 49:
            await asyncio.sleep(0.05)  # do not SYN-flood our own listen backlog
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 300)
    open_seconds = time.monotonic() - started
    await asyncio.sleep(2)
    open_rss = harness.rss_kib(server_pid)
    db = int(REDIS_URL.rsplit("/", 1)[1])
    redis_clients = sum(
        1
        for c in publisher.client_list()
        if c.get("cmd") in ("psubscribe", "subscribe") and int(c.get("db", -1)) == db
    )

    idle_from = harness.cpu_seconds(server_pid)
    await asyncio.sleep(args.idle_seconds)
    idle_cpu = harness.cpu_seconds(server_pid) - idle_from

    busy_from = harness.cpu_seconds(server_pid)
    for _ in range(args.events):
        message = json.dumps({"job": 1, "state": "running", "sent": time.time()})
        publisher.publish("portal:jobs:livebench", message)
        await asyncio.sleep(args.event_interval)
    expected = args.pages * args.events
    deadline = time.monotonic() + 60
    while len(received) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    busy_cpu = harness.cpu_seconds(server_pid) - busy_from
    for task in tasks:
        task.cancel()

    lat = sorted(received)
    harness.figure("streams opened in", open_seconds, "s")
    harness.figure("server memory per stream", (open_rss - base_rss) / args.pages, "KiB")
    harness.figure("server CPU idle", 100 * idle_cpu / args.idle_seconds, "% of a core")
    harness.figure("server CPU per delivery", 1e6 * busy_cpu / max(expected, 1), "µs")
    print(f"open streams:               {args.pages} (opened in {open_seconds:.1f} s)")
    print(f"Redis connections (server): {redis_clients} pub/sub connection(s)")
    print(
        f"server memory:              {base_rss / 1024:.0f} MiB idle → {open_rss / 1024:.0f} MiB "
        f"with the streams ({(open_rss - base_rss) / args.pages:.1f} KiB per stream)"
    )
    print(
        f"server CPU, idle:           {idle_cpu:.2f} s over {args.idle_seconds:.0f} s "
        f"({100 * idle_cpu / args.idle_seconds:.1f} % of a core)"
    )
    print(
        f"server CPU, {args.events} changes:     {busy_cpu:.2f} s for {expected} deliveries "
        f"({1e6 * busy_cpu / max(expected, 1):.0f} µs per delivery)"
    )
    if lat:
        p99 = harness.percentile(lat, 0.99)
        print(
            f"delivery latency:           p50 {1000 * statistics.median(lat):.0f} ms, "
            f"p99 {1000 * p99:.0f} ms, delivered {len(lat)} of {expected} (target: within 2 s)"
        )
        harness.figure("delivery latency p50", 1000 * statistics.median(lat), "ms")
        harness.figure("delivery latency p99", 1000 * p99, "ms")


def main() -> int:
    parser = harness.make_parser(
        __doc__,
        short={"pages": 50, "events": 5, "event_interval": 0.2, "idle_seconds": 2.0},
        services=("postgres", "redis"),
    )
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--event-interval", type=float, default=0.5)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> None:
    harness.ensure_database(DATABASE_URL)
    harness.setup_django(database_url=DATABASE_URL)
    cookie = sign_in()
    env = harness.portal_env(
        database_url=DATABASE_URL,
        redis_url=REDIS_URL,
        kube_qps=None,
        production=False,
        extra={
            "PORTAL_PUBSUB_URL": REDIS_URL,
            "DEBUG": "true",
            "DATABASE_POOL_MAX_SIZE": "20",  # as docker-compose.yml runs the web processes
        },
    )
    server = stack.asgi(env)
    asyncio.run(run(args, server.port, cookie, server.pid))


if __name__ == "__main__":
    sys.exit(main())
