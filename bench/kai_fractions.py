"""Benchmark: fractional GPU jobs through kubesim's KAI Scheduler vs the same jobs as whole GPUs.

--jobs batch/v1 Jobs (one pod each) ask for a fraction of a GPU (`gpu-fraction`: a seeded mix of
0.25 and 0.5) and run --seconds simulated seconds (± 50 %, seeded), in one KAI project queue on
--nodes nodes of 8 H100s, kubesim at --speed. The Jobs and the queues are the portal's own
(jobs.manifests.kai_batch_job, quotas.manifests.kai_*_queues: what the portal submits for a job
with `gpu_fraction` on a KAI pool, and what its quota sync writes). They are submitted while the
queue's GPU limit is 0 (each waits with OverLimit), then the portal's limit is put back, so all
are released at once. Then the same jobs run as whole GPUs (`nvidia.com/gpu: 1`) on a fresh
kubesim. For each mode it prints the wall time and the simulated time from the release until
every Job completed, the kubesim process's CPU time over that, and the pool's GPU utilisation
over that simulated time:

- work: what the jobs use, sum(fraction x run time), over the pool's GPU-time;
- held: GPU-time held, whole GPUs for whole-GPU jobs, and for fractions the time each shared
  GPU (one runai-gpu-group) had at least one job on it.

    .venv/bin/python bench/kai_fractions.py [--jobs 1000] [--nodes 4] [--speed 200]
"""

from __future__ import annotations

import datetime
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, watch

from bench import _harness as harness
from jobs.manifests import JobManifestInput, kai_batch_job
from quotas import manifests as qm

GROUP = "scheduling.run.ai"
NAMESPACE = "bench"
POOL = "bench"
PROJECT = "bench"
QUEUE = qm.kai_project_queue_name(PROJECT, POOL)
FRACTIONS = ("0.25", "0.5")


def cluster_yaml(nodes: int) -> str:
    return f"""apiVersion: kubesim.dev/v1
kind: Cluster
pools:
  - name: h100
    count: {nodes}
    cpu: "192"
    memory: 2Ti
    gpu: {{model: NVIDIA-H100-80GB-HBM3, count: 8}}
"""


def _model(nodes: int) -> qm.QuotaModel:
    """The portal's quota model of the bench: one KAI pool, one project guaranteed all of it."""
    pool = qm.PoolSpec(POOL, {}, (), nodes * 8, "8", "64Gi", scheduler=qm.KAI)
    project = qm.ProjectSpec(
        PROJECT, NAMESPACE, PROJECT, (qm.QuotaAmount(POOL, "gpu", nodes * 8, nodes * 8),)
    )
    return qm.QuotaModel(
        pools=(pool,), departments=(qm.DepartmentSpec(PROJECT),), projects=(project,)
    )


def setup(api, nodes: int) -> None:
    """The portal's department and project queues and its priority class. The project's GPU
    limit starts at 0, so that the jobs wait (OverLimit) until all are submitted; `release`
    puts the portal's limit back."""
    model = _model(nodes)
    custom = client.CustomObjectsApi(api)
    (department,) = qm.kai_department_queues(model.departments[0], model.projects, model.pools)
    (project,) = qm.kai_project_queues(model.projects[0], model.pools, model.projects)
    project["spec"]["resources"]["gpu"]["limit"] = 0
    for queue in (department, project):
        custom.create_cluster_custom_object(GROUP, "v2", "queues", queue)
    normal = qm.PrioritySpec("normal", 100, True)
    client.SchedulingV1Api(api).create_priority_class(qm.pod_priority_class(normal))
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})


def release(api, nodes: int) -> float:
    """Put the portal's limit back; the simulated time it happened (the write's managedFields)."""
    (project,) = qm.kai_project_queues(_model(nodes).projects[0], _model(nodes).pools)
    limit = project["spec"]["resources"]["gpu"]["limit"]
    queue = client.CustomObjectsApi(api).patch_cluster_custom_object(
        GROUP, "v2", "queues", QUEUE, {"spec": {"resources": {"gpu": {"limit": limit}}}}
    )
    stamps = [entry["time"] for entry in queue["metadata"].get("managedFields") or []]
    return datetime.datetime.fromisoformat(max(stamps).replace("Z", "+00:00")).timestamp()


def grouped_pods(api) -> int:
    """Pods the podgrouper has put in a PodGroup."""
    pods = client.CoreV1Api(api).list_namespaced_pod(NAMESPACE).items
    return sum(1 for p in pods if "pod-group-name" in (p.metadata.annotations or {}))


def plan(jobs: int, seconds: float) -> list[tuple[str, str, int]]:
    """(Job name, fraction, simulated seconds); the names are the portal's (gp-job-<id>)."""
    rng = random.Random(25)
    return [
        (f"gp-job-{i}", rng.choice(FRACTIONS), max(1, round(seconds * rng.uniform(0.5, 1.5))))
        for i in range(1, jobs + 1)
    ]


def job_body(name: str, fraction: str, seconds: int, *, whole: bool) -> dict:
    """The Job the portal submits for this job on a KAI pool (a fraction, or one whole GPU)."""
    spec = JobManifestInput(
        job_id=int(name.rsplit("-", 1)[1]),
        name=name,
        project_slug=PROJECT,
        namespace=NAMESPACE,
        kind="single",
        backend="kai",
        image="pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime",
        command=("sh", "-c", f"sleep {seconds}"),
        env={},
        gpus=1 if whole else 0,
        mig_resource="",
        replicas=1,
        cpu="1",
        memory="4Gi",
        priority="normal",
        max_runtime_seconds=7 * 24 * 3600,
        eligible_pools=(POOL,),
        gpu_fraction="" if whole else fraction,
        preemptible=True,
    )
    return kai_batch_job(spec)


class CompletionWatcher(threading.Thread):
    """Counts the Jobs that completed (or failed), from a watch."""

    def __init__(self, api) -> None:
        super().__init__(daemon=True)
        self.api = api
        self.done: set[str] = set()
        self.failed: set[str] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def run(self) -> None:
        batch = client.BatchV1Api(self.api)
        version = None
        while not self.stop.is_set():
            try:
                for event in watch.Watch().stream(
                    batch.list_namespaced_job,
                    NAMESPACE,
                    resource_version=version,
                    timeout_seconds=30,
                ):
                    job = event["object"]
                    version = job.metadata.resource_version
                    for condition in job.status.conditions or []:
                        if condition.status == "True" and condition.type in ("Complete", "Failed"):
                            with self.lock:
                                self.done.add(job.metadata.name)
                                if condition.type == "Failed":
                                    self.failed.add(job.metadata.name)
                    if self.stop.is_set():
                        break
            except client.ApiException as exc:
                if exc.status != 410:
                    raise
                version = None


def _seconds(value: datetime.datetime) -> float:
    return value.timestamp()


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def run_mode(stack: harness.Stack, args, jobs, *, whole: bool) -> dict | None:
    label = "whole GPUs" if whole else "fractions"
    ks = stack.kubesim(
        name=f"ks-{'whole' if whole else 'frac'}",
        cluster=cluster_yaml(args.nodes),
        speed=args.speed,
    )
    api = ks.api_client()
    try:
        setup(api, args.nodes)
        watcher = CompletionWatcher(api)
        watcher.start()
        batch = client.BatchV1Api(api)
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(
                pool.map(
                    lambda item: batch.create_namespaced_job(
                        NAMESPACE, job_body(*item, whole=whole)
                    ),
                    jobs,
                )
            )
        while grouped_pods(api) < len(jobs) and time.monotonic() < started + args.timeout:
            time.sleep(1.0)
        submitted = time.monotonic() - started
        # every job waits at the queue's limit of 0 GPUs: lift it and time from there
        cpu_before = harness.cpu_seconds(ks.process.pid)
        t0 = time.monotonic()
        released = release(api, args.nodes)
        deadline = t0 + args.timeout
        while time.monotonic() < deadline:
            with watcher.lock:
                if len(watcher.done) >= len(jobs):
                    break
            time.sleep(0.5)
        elapsed = time.monotonic() - t0
        cpu_used = harness.cpu_seconds(ks.process.pid) - cpu_before
        watcher.stop.set()
        with watcher.lock:
            done, failed = len(watcher.done), len(watcher.failed)
        if done < len(jobs):
            print(f"{label}: only {done}/{len(jobs)} jobs finished within {args.timeout:.0f}s")
            return None
        # simulated times from the pods: each run, the GPU groups
        pods = client.CoreV1Api(api).list_namespaced_pod(NAMESPACE).items
        fraction_of = {name: float(fraction) for name, fraction, _ in jobs}
        work, held_whole, last = 0.0, 0.0, 0.0
        groups: dict[str, list[tuple[float, float]]] = {}
        for pod in pods:
            state = (pod.status.container_statuses or [None])[0]
            finished = state and state.state.terminated
            if not finished or not finished.started_at:
                continue
            start, stop = _seconds(finished.started_at), _seconds(finished.finished_at)
            last = max(last, stop)
            job_name = (pod.metadata.labels or {}).get("batch.kubernetes.io/job-name", "")
            work += fraction_of.get(job_name, 0.0) * (stop - start)
            group = (pod.metadata.labels or {}).get("runai-gpu-group")
            if group:
                groups.setdefault(group, []).append((start, stop))
            else:
                held_whole += stop - start
        held = held_whole + sum(_union(spans) for spans in groups.values())
        makespan = last - released
        capacity = args.nodes * 8 * makespan
        print(
            f"{label}: {len(jobs)} jobs submitted and waiting in {submitted:.1f}s; released at "
            f"once, all finished after {elapsed:.1f}s wall, {makespan:.0f}s simulated "
            f"({failed} failed); kubesim CPU {cpu_used:.1f}s; pool utilisation: work "
            f"{100 * work / capacity:.1f} %, held {100 * held / capacity:.1f} %"
            + (f"; {len(groups)} shared GPU groups" if groups else "")
        )
        tag = "whole" if whole else "fractions"
        harness.figure(f"{tag}: all finished after (wall)", elapsed, "s")
        harness.figure(f"{tag}: all finished after (simulated)", makespan, "s")
        harness.figure(f"{tag}: kubesim CPU time", cpu_used, "s")
        harness.figure(f"{tag}: GPU utilisation (work)", 100 * work / capacity, "%")
        harness.figure(f"{tag}: GPU utilisation (held)", 100 * held / capacity, "%")
        return {"makespan": makespan, "wall": elapsed}
    finally:
        api.close()
        stack.stop(ks)  # one kubesim at a time: the other mode gets the CPU


def main() -> int:
    parser = harness.make_parser(__doc__, short={"jobs": 100, "nodes": 1})
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=4, help="nodes of 8 H100 GPUs")
    parser.add_argument("--seconds", type=float, default=600.0, help="mean simulated run time")
    parser.add_argument("--speed", type=float, default=200.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> int:
    jobs = plan(args.jobs, args.seconds)
    mean = sum(float(f) for _, f, _ in jobs) / len(jobs)
    print(
        f"{len(jobs)} jobs, mean fraction {mean:.3f} of a GPU, mean run {args.seconds:g}s "
        f"simulated; pool {args.nodes} x 8 H100; kubesim speed {args.speed:g}"
    )
    fractions = run_mode(stack, args, jobs, whole=False)
    whole = run_mode(stack, args, jobs, whole=True)
    if fractions is None or whole is None:
        return 1
    print(
        f"fractions finished the same jobs {whole['makespan'] / fractions['makespan']:.2f}x "
        "sooner in simulated time"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
