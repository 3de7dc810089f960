"""kubesim API benchmark: prints, in one run, the figures issue 3 sets targets for.

    .venv/bin/python bench/kubesim_api.py [--short]

- creates/s through the python client against kubesim, beside the same client against a
  minimal HTTPS endpoint that only echoes the object back (target: kubesim >= half the echo);
- list latency with a label selector matching 100 of 10,000 Workloads (target <= 50 ms) and of
  all 10,000 (target <= 2 s);
- watch fan-out delay with 20 watchers (target p99 <= 50 ms);
- resident memory of the kubesim process holding 50,000 small objects (target <= 500 MB).
"""

from __future__ import annotations

import asyncio
import os
import ssl
import statistics
import subprocess
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client
from kubesim.testing import KubesimProcess

from bench import _harness as harness

ECHO_SERVER = r"""
import asyncio, ssl, sys
from aiohttp import web
from kubesim import tls

async def echo(request):
    body = await request.read()
    return web.Response(body=body, status=201, content_type="application/json")

async def main():
    certs = tls.generate()
    import pathlib, tempfile
    workdir = pathlib.Path(tempfile.mkdtemp())
    context = certs.server_context(workdir)
    (workdir / "ca.crt").write_bytes(certs.ca_pem)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(port, workdir / "ca.crt", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def rss_mb(pid: int) -> float:
    return harness.rss_kib(pid) / 1024


def timed_creates(create, count: int) -> float:
    """Sequential creates through one client; creates per second."""
    create(0)  # warm up the connection
    started = time.perf_counter()
    for i in range(1, count + 1):
        create(i)
    return count / (time.perf_counter() - started)


def configmap(i: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"cm-{i}", "namespace": "default", "labels": {"bench": "yes"}},
        "data": {"key": f"value-{i}"},
    }


def workload(i: int, labels: dict) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": f"wl-{i}", "labels": labels},
        "spec": {
            "queueName": "user-queue",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "train",
                                    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                                    "resources": {
                                        "requests": {
                                            "cpu": "4",
                                            "memory": "16Gi",
                                            "nvidia.com/gpu": "1",
                                        },
                                        "limits": {"nvidia.com/gpu": "1"},
                                    },
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def bench_echo(stack: harness.Stack, count: int) -> float:
    echo = stack.spawn(
        [sys.executable, "-c", ECHO_SERVER],
        label="echo",
        side="echo",
        pin_as="kubesim",  # where the server it stands beside runs
        env=dict(os.environ, PYTHONPATH=str(harness.REPO)),
        stdout=subprocess.PIPE,
    )
    try:
        port, ca = echo.process.stdout.readline().decode().split()
        configuration = client.Configuration()
        configuration.host = f"https://127.0.0.1:{port}"
        configuration.ssl_ca_cert = ca
        configuration.api_key = {"authorization": "Bearer x"}
        with client.ApiClient(configuration) as api:
            core = client.CoreV1Api(api)
            return timed_creates(
                lambda i: core.create_namespaced_config_map("default", configmap(i)), count
            )
    finally:
        stack.stop(echo)


async def watch_fanout(
    server: KubesimProcess, watchers: int, events: int, interval: float
) -> list[float]:
    """Delays (s) from just before each create request to each watcher's receipt."""
    import aiohttp

    context = ssl.create_default_context(cafile=str(server.ca_file))
    headers = {"Authorization": f"Bearer {server.token}"}
    delays: list[float] = []
    ready = 0
    all_ready = asyncio.Event()

    async def watcher(session: aiohttp.ClientSession, rv: str) -> None:
        nonlocal ready
        url = (
            f"{server.url}/api/v1/namespaces/fanout/configmaps?watch=1&resourceVersion={rv}"
            f"&timeoutSeconds=120"
        )
        async with session.get(url, ssl=context, headers=headers) as response:
            ready += 1
            if ready == watchers:
                all_ready.set()
            seen = 0
            async for line in response.content:
                received = time.time()
                event = orjson.loads(line)
                sent = float(event["object"]["metadata"]["annotations"]["sent"])
                delays.append(received - sent)
                seen += 1
                if seen >= events:
                    return

    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{server.url}/api/v1/namespaces",
            ssl=context,
            headers=headers,
            json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fanout"}},
        ) as response:
            rv = (await response.json())["metadata"]["resourceVersion"]
        tasks = [asyncio.create_task(watcher(session, rv)) for _ in range(watchers)]
        await asyncio.wait_for(all_ready.wait(), 30)
        await asyncio.sleep(0.3)
        for i in range(events):
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"f-{i}", "annotations": {"sent": repr(time.time())}},
            }
            async with session.post(
                f"{server.url}/api/v1/namespaces/fanout/configmaps",
                ssl=context,
                headers=headers,
                json=body,
            ) as response:
                await response.read()
            await asyncio.sleep(interval)
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    return delays


def bulk_create(server: KubesimProcess, path: str, bodies, concurrency: int = 16) -> float:
    """Create many objects over raw HTTPS (aiohttp, `concurrency` requests in flight); secs."""
    import aiohttp

    async def run() -> None:
        context = ssl.create_default_context(cafile=str(server.ca_file))
        headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
        iterator = iter(bodies)
        connector = aiohttp.TCPConnector(limit=concurrency, ssl=context)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def worker() -> None:
                for body in iterator:
                    async with session.post(
                        server.url + path, data=orjson.dumps(body), headers=headers
                    ) as response:
                        if response.status != 201:
                            raise RuntimeError(
                                f"create answered {response.status}: {await response.text()}"
                            )
                        await response.read()

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    started = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - started


def main() -> int:
    parser = harness.make_parser(__doc__, short={"scale": 10})
    parser.add_argument(
        "--scale", type=int, default=1, help="divide the object counts by this (--short: 10)"
    )
    parser.add_argument("--quick", dest="short", action="store_true", help="the same as --short")
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> None:
    scale = args.scale
    create_count = 2000 // scale
    workloads = 10_000 // scale
    small_objects = 50_000 // scale

    print(f"kubesim API benchmark ({'quick' if scale > 1 else 'full'} run)")
    echo_rate = bench_echo(stack, create_count)
    print(f"echo endpoint         creates/s (python client, ConfigMap): {echo_rate:8.0f}")
    harness.figure("echo endpoint creates", echo_rate, "/s")

    server = stack.kubesim(name="kubesim-api", no_cluster=True)
    api_figures(server, scale, create_count, workloads, echo_rate)
    stack.stop(server)

    server = stack.kubesim(name="kubesim-memory", no_cluster=True)
    memory_figure(server, small_objects)


def api_figures(
    server: KubesimProcess, scale: int, create_count: int, workloads: int, echo_rate: float
) -> None:
    api = server.api_client()
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    rate = timed_creates(
        lambda i: core.create_namespaced_config_map("default", configmap(i)), create_count
    )
    print(
        f"kubesim               creates/s (python client, ConfigMap): {rate:8.0f}"
        f"   ({rate / echo_rate:.0%} of echo; target >= 50%)"
    )
    harness.figure("kubesim ConfigMap creates", rate, "/s")
    wl_rate = timed_creates(
        lambda i: custom.create_namespaced_custom_object(
            "kueue.x-k8s.io",
            "v1beta2",
            "default",
            "workloads",
            workload(100_000 + i, {"bench": "rate"}),
        ),
        create_count // 2,
    )
    print(
        f"kubesim               creates/s (python client, Workload, schema + CEL): {wl_rate:8.0f}"
    )
    harness.figure("kubesim Workload creates", wl_rate, "/s")

    # 10,000 Workloads, 100 of them labelled to match the selector
    core.create_namespace({"metadata": {"name": "bench"}})
    elapsed = bulk_create(
        server,
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/bench/workloads",
        (
            workload(i, {"team": "needle" if i % (workloads // 100) == 0 else "hay"})
            for i in range(workloads)
        ),
    )
    print(
        f"(created {workloads} Workloads in {elapsed:.1f} s: {workloads / elapsed:.0f}/s "
        f"over HTTPS with 16 requests in flight)"
    )

    def list_ms(**kwargs) -> tuple[float, int]:
        samples = []
        count = 0
        for _ in range(7):
            t0 = time.perf_counter()
            result = custom.list_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta2", "bench", "workloads", **kwargs
            )
            samples.append((time.perf_counter() - t0) * 1000)
            count = len(result["items"])
        return statistics.median(samples), count

    ms, count = list_ms(label_selector="team=needle")
    print(
        f"list, label selector matching {count} of {workloads} Workloads: {ms:8.1f} ms"
        f"   (target <= 50 ms)"
    )
    harness.figure("list, label selector", ms, "ms")
    ms, count = list_ms()
    print(f"list, all {count} Workloads:                        {ms:8.1f} ms   (target <= 2000 ms)")
    harness.figure("list, all", ms, "ms")

    delays = asyncio.run(watch_fanout(server, watchers=20, events=200 // scale, interval=0.02))
    p50 = harness.percentile(delays, 0.5) * 1000
    p99 = harness.percentile(delays, 0.99) * 1000
    print(
        f"watch fan-out, 20 watchers, {len(delays)} deliveries: p50 {p50:6.1f} ms, "
        f"p99 {p99:6.1f} ms   (target p99 <= 50 ms)"
    )
    harness.figure("watch fan-out p50", p50, "ms")
    harness.figure("watch fan-out p99", p99, "ms")
    api.close()


def memory_figure(server: KubesimProcess, small_objects: int) -> None:
    pid = server.process.pid
    base = rss_mb(pid)
    api = server.api_client()
    elapsed = bulk_create(
        server,
        "/api/v1/namespaces/default/configmaps",
        (configmap(i) for i in range(small_objects)),
    )
    print(
        f"(created {small_objects} ConfigMaps in {elapsed:.1f} s: "
        f"{small_objects / elapsed:.0f}/s over HTTPS with 16 requests in flight)"
    )
    print(
        f"resident memory, {small_objects} small objects: {rss_mb(pid):8.0f} MB"
        f"   (empty server {base:.0f} MB; target <= 500 MB)"
    )
    harness.figure(f"resident memory, {small_objects} small objects", rss_mb(pid), "MB")
    api.close()


if __name__ == "__main__":
    sys.exit(main())
