"""Benchmark: how soon the cluster watcher writes a job's state after the cluster changed it.

Drives N single-GPU jobs (default 500) through kubesim at --speed 1 (its clock is the wall clock,
so times compare), with `manage.py watch_cluster` running as its own process, and prints:
  1. p50/p95/p99 of (database write time of each state change − the time the API server wrote the
     change that implies it); targets p95 ≤ 1 s, p99 ≤ 2 s;
  2. the watcher's CPU seconds per 1,000 watch events.

The API server's write time is observed by a second, read-only watch in this process: it keeps
the same objects and applies the same mapping (jobs.status via the watcher's own processor), and
notes when each (job, state) first became implied. kubesim's watch fan-out adds a few ms (see
bench/kubesim_api.py), so the figures slightly under-state the lag.

Needs PostgreSQL (its own database, gpportal_statuslag) — no Redis, no Celery: the bench applies
the jobs itself
(jobs.reconcile.services.job_reconcile), so every state after Submitted is the watcher's.

    .venv/bin/python bench/status_lag.py [--jobs 500] [--nodes 16] [--run-seconds 10]
"""

import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as harness

DATABASE_URL = harness.database_url("gpportal_statuslag")
H100 = "NVIDIA-H100-80GB-HBM3"
CLUSTER = """apiVersion: kubesim.dev/v1
kind: Cluster
pools:
  - name: gpu-h100
    count: {nodes}
    instanceType: hgx-h100-8g
    cpu: "192"
    memory: 2Ti
    gpu:
      model: NVIDIA-H100-80GB-HBM3
      count: 8
"""


def setup_django(kubeconfig: Path) -> None:
    harness.setup_django(
        database_url=DATABASE_URL,
        KUBECONFIG=kubeconfig,
        PORTAL_KUBE_QPS=0,
        PORTAL_PUBSUB_URL="",
        CELERY_BROKER_URL="memory://",  # the bench applies jobs itself
    )
    from django.conf import settings

    settings.PORTAL_KUBE_POOL_SIZE = 32  # the observer holds one stream per collection


def seed(nodes: int):
    from django.contrib.auth import get_user_model

    from jobs.models import Job, JobEvent, JobPod, QueueUsage, WatchCursor
    from quotas.models import GpuPool, PriorityClass, ProjectQuota
    from quotas.sync import sync_quota_objects
    from tenants.models import Department, Membership, Project

    for model in (JobEvent, JobPod, QueueUsage, WatchCursor):
        model.objects.all().delete()
    Job.objects.all().delete()
    Project.objects.all().delete()
    department, _ = Department.objects.get_or_create(slug="lag", defaults={"name": "Lag"})
    GpuPool.objects.all().delete()
    pool = GpuPool.objects.create(
        slug="h100",
        name="H100",
        gpu_model=H100,
        node_labels={"nvidia.com/gpu.product": H100},
        node_count=nodes,
        gpus_per_node=8,
    )
    for name, value, preemptible in (("high", 1000, False), ("normal", 500, True)):
        PriorityClass.objects.get_or_create(
            name=name, defaults={"value": value, "preemptible": preemptible}
        )
    user, _ = get_user_model().objects.get_or_create(username="lag")
    project = Project.objects.create(slug="lag", name="Lag", department=department)
    ProjectQuota.objects.create(project=project, pool=pool, resource="gpu", nominal=nodes * 8)
    Membership.objects.create(user=user, project=project, role="member")
    report = sync_quota_objects()
    assert not report.errors, report.errors
    return user, project


def make_observer():
    """The watcher's processor in read-only mode: same cache, same mapping, no writes."""
    from jobs.models import Job
    from jobs.status import map_with_pods
    from jobs.watcher.processor import Processor

    class Observer(Processor):
        def __init__(self, stop):
            super().__init__(stop=stop, is_leader=lambda: False)
            self.first: dict[tuple[int, str], float] = {}
            self.jobs: dict[int, Job] = {}

        def run(self) -> None:
            import queue

            while not self.stop_event.is_set():
                try:
                    change = self.inbox.get(timeout=0.5)
                except queue.Empty:
                    continue
                self._absorb(change)
                dirty, self.dirty = self.dirty, set()
                for job_id in dirty:
                    job = self.jobs.get(job_id)
                    if job is None:
                        job = (
                            Job.objects.select_related("project", "pool").filter(pk=job_id).first()
                        )
                        if job is None:
                            continue
                        self.jobs[job_id] = job
                    state = map_with_pods(self.snapshot(job)).state
                    if state:
                        self.first.setdefault((job_id, state), change.received)

    return Observer


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def main() -> int:
    parser = harness.make_parser(
        __doc__, short={"jobs": 20, "run_seconds": 3.0}, services=("postgres",)
    )
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--run-seconds", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> int:
    from kubesim.testing import shared_crds_dir

    harness.ensure_database(DATABASE_URL)
    ks = stack.kubesim(
        crds=[shared_crds_dir()], cluster=CLUSTER.format(nodes=args.nodes), speed=1.0
    )
    setup_django(ks.kubeconfig)
    user, project = seed(args.nodes)
    env = harness.portal_env(
        database_url=DATABASE_URL,
        kubeconfig=ks.kubeconfig,
        kube_qps=None,
        production=False,
        extra={"PORTAL_PUBSUB_URL": "", "PORTAL_WATCHER_LEASE_NAME": f"lag-{time.time_ns()}"},
    )
    watcher = stack.watcher(env)
    return run(args, watcher, user, project)


def run(args, watcher: harness.Watcher, user, project) -> int:
    from jobs.models import Job, JobEvent
    from jobs.reconcile.services import job_reconcile
    from jobs.services import job_submit
    from jobs.states import TERMINAL
    from jobs.watcher.informer import Informer
    from jobs.watcher.runner import COLLECTIONS

    try:
        watcher.wait_leader(60)
    except RuntimeError:
        print(f"the watcher did not start; see {watcher.log}", file=sys.stderr)
        return 1
    time.sleep(2)  # its first lists are done
    stop = threading.Event()
    observer = make_observer()(stop)
    informers = [Informer(c, observer.put, stop=stop) for c in COLLECTIONS]
    observer.start()
    for informer in informers:
        informer.start()
    for informer in informers:
        informer.synced.wait(30)
    cpu_before = harness.cpu_seconds(watcher.pid)
    events_before = watcher.heartbeat().get("processed", 0)

    started = time.monotonic()
    body = {
        "kind": "single",
        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "gpus": 1,
        "command": ["sh", "-c", f"echo start; sleep {args.run_seconds}; echo done"],
    }
    ids = []
    for i in range(args.jobs):
        outcome = job_submit(actor=user, project=project, data={**body, "name": f"lag-{i}"})
        ids.append(outcome.job.pk)
    for job_id in ids:
        job_reconcile(job_id=job_id)
    print(f"{args.jobs} jobs submitted and applied in {time.monotonic() - started:.1f}s")
    deadline = time.monotonic() + args.timeout
    while True:
        done = Job.objects.filter(pk__in=ids, state__in=TERMINAL).count()
        if done == len(ids) or time.monotonic() > deadline:
            break
        time.sleep(1)
    elapsed = time.monotonic() - started
    time.sleep(2)
    cpu = harness.cpu_seconds(watcher.pid) - cpu_before
    events = watcher.heartbeat().get("processed", 0) - events_before
    stop.set()
    print(f"{done}/{len(ids)} jobs finished in {elapsed:.1f}s")

    lags = []
    unmatched = 0
    for event in JobEvent.objects.filter(job_id__in=ids, source="watcher").exclude(to_state=""):
        seen = observer.first.get((event.job_id, event.to_state))
        if seen is None:
            unmatched += 1
            continue
        lags.append(event.created_at.timestamp() - seen)
    if not lags:
        print("no state changes measured", file=sys.stderr)
        return 1
    print(
        f"status lag over {len(lags)} state changes ({unmatched} not matched): "
        f"p50 {percentile(lags, 50):.3f}s, p95 {percentile(lags, 95):.3f}s, "
        f"p99 {percentile(lags, 99):.3f}s, max {max(lags):.3f}s, "
        f"mean {statistics.mean(lags):.3f}s  (targets: p95 ≤ 1 s, p99 ≤ 2 s)"
    )
    own = watcher.heartbeat().get("write_lag")
    print(f"the watcher's own share (change received → state written): {own}")
    per_thousand = cpu / events * 1000 if events else float("nan")
    print(
        f"watcher CPU: {cpu:.1f}s for {events} watch events = {per_thousand:.2f} CPU-s per 1,000 "
        "events"
    )
    harness.figure("status lag p50", percentile(lags, 50), "s")
    harness.figure("status lag p95", percentile(lags, 95), "s")
    harness.figure("status lag p99", percentile(lags, 99), "s")
    harness.figure("watcher CPU per 1,000 events", per_thousand, "s")
    return 0 if done == len(ids) else 1


if __name__ == "__main__":
    sys.exit(main())
