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

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DB_NAME = "gpportal_bench"
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/{DB_NAME}")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")


def ensure_database() -> None:
    import psycopg

    admin_url = DATABASE_URL.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')


def setup_django() -> str:
    """Migrate, make a project with one member, and return that member's session cookie."""
    os.environ["DATABASE_URL"] = DATABASE_URL
    os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from tenants.models import Department, Membership, Project

    call_command("migrate", verbosity=0)
    department, _ = Department.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    project, _ = Project.objects.get_or_create(
        slug="livebench", defaults={"name": "Live bench", "department": department}
    )
    user, _ = get_user_model().objects.get_or_create(username="live-bench")
    Membership.objects.get_or_create(user=user, project=project, defaults={"role": "viewer"})
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


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
    base_rss = rss_kib(server_pid)
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
    open_rss = rss_kib(server_pid)
    db = int(REDIS_URL.rsplit("/", 1)[1])
    redis_clients = sum(
        1
        for c in publisher.client_list()
        if c.get("cmd") in ("psubscribe", "subscribe") and int(c.get("db", -1)) == db
    )

    idle_from = cpu_seconds(server_pid)
    await asyncio.sleep(args.idle_seconds)
    idle_cpu = cpu_seconds(server_pid) - idle_from

    busy_from = cpu_seconds(server_pid)
    for _ in range(args.events):
        message = json.dumps({"job": 1, "state": "running", "sent": time.time()})
        publisher.publish("portal:jobs:livebench", message)
        await asyncio.sleep(args.event_interval)
    expected = args.pages * args.events
    deadline = time.monotonic() + 60
    while len(received) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    busy_cpu = cpu_seconds(server_pid) - busy_from
    for task in tasks:
        task.cancel()

    lat = sorted(received)
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
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        print(
            f"delivery latency:           p50 {1000 * statistics.median(lat):.0f} ms, "
            f"p99 {1000 * p99:.0f} ms, delivered {len(lat)} of {expected} (target: within 2 s)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--event-interval", type=float, default=0.5)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    args = parser.parse_args()

    ensure_database()
    cookie = setup_django()
    from tests.asgi_server import free_port

    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "PORTAL_PUBSUB_URL": REDIS_URL,
        "CELERY_BROKER_URL": REDIS_URL,
        "DEBUG": "true",
        "LOG_LEVEL": "WARNING",
        "DATABASE_POOL_MAX_SIZE": "20",  # as docker-compose.yml runs the web processes
    }
    log = Path(tempfile.mkdtemp()) / "uvicorn.log"
    uvicorn = str(Path(sys.executable).parent / "uvicorn")
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [
                uvicorn,
                "portal.asgi:application",
                "--port",
                str(port),
                "--log-level",
                "warning",
                "--backlog",
                "4096",
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        import httpx

        for _ in range(200):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        asyncio.run(run(args, port, cookie, server.pid))
    finally:
        server.terminate()
        server.wait(20)


if __name__ == "__main__":
    main()
