"""Benchmark: Kueue's baseline shape on the simulated cluster.

30 ClusterQueues in 5 cohorts (6 each; per CQ nominal 8 GPUs and 14 MIG 1g.10gb slices,
borrowingLimit 16 GPUs / 28 slices, reclaimWithinCohort Any, withinClusterQueue LowerPriority, as
Kueue's own baseline), 1,500 batch/v1 Jobs (per CQ: 18 x 1 GPU and 17 x 1 MIG slice at priority
50, 10 x 2 GPUs at 100, 5 x 4 GPUs at 200; 600/600/1200/2400 simulated seconds) submitted at once
against a kubesim at --speed 100 whose nodes can hold every admitted pod (30 full 8 x H100 nodes,
8 H100 nodes with all GPUs as 7 x 1g.10gb). Prints the wall time until every Workload was admitted
and until every one finished (target: finished within 5 minutes), the kubesim process's CPU time,
and checks that, within each ClusterQueue and job shape, no Workload was first admitted while a
Workload that ranks before it (higher priority, or equal priority and created earlier) waited.

    .venv/bin/python bench/kubesim_cluster.py [--speed 100] [--jobs-per-cq 50]
"""

from __future__ import annotations

import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, watch

from bench import _harness as harness

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
GPU, MIG = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
COHORTS, CQS_PER_COHORT = 5, 6
PRIORITIES = {"low": 50, "mid": 100, "high": 200}
# shape -> (resource, amount, priority class, simulated seconds, jobs per 50)
SHAPES = {
    "gpu1": (GPU, 1, "low", 600, 18),
    "mig1": (MIG, 1, "low", 600, 17),
    "gpu2": (GPU, 2, "mid", 1200, 10),
    "gpu4": (GPU, 4, "high", 2400, 5),
}

CLUSTER = """apiVersion: kubesim.dev/v1
kind: Cluster
pools:
  - name: h100
    count: 30
    cpu: "192"
    memory: 2Ti
    gpu: {model: NVIDIA-H100-80GB-HBM3, count: 8}
  - name: h100-mig
    count: 8
    cpu: "192"
    memory: 2Ti
    gpu:
      model: NVIDIA-H100-80GB-HBM3
      count: 8
      mig:
        strategy: mixed
        layout:
          - gpus: "0-7"
            profiles: {"1g.10gb": 7}
"""


def setup_queues(api) -> list[tuple[str, str]]:
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    for name, value in PRIORITIES.items():
        custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            "workloadpriorityclasses",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
        )
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "resourceflavors",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceFlavor",
            "metadata": {"name": "h100"},
            "spec": {
                "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
    )
    queues = []
    for c in range(COHORTS):
        for q in range(CQS_PER_COHORT):
            name = f"cq-{c}-{q}"
            namespace = f"team-{c}-{q}"
            core.create_namespace({"metadata": {"name": namespace}})
            custom.create_cluster_custom_object(
                GROUP,
                VERSION,
                "clusterqueues",
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ClusterQueue",
                    "metadata": {"name": name},
                    "spec": {
                        "cohortName": f"cohort-{c}",
                        "namespaceSelector": {},
                        "preemption": {
                            "reclaimWithinCohort": "Any",
                            "withinClusterQueue": "LowerPriority",
                        },
                        "resourceGroups": [
                            {
                                "coveredResources": ["cpu", "memory", GPU, MIG],
                                "flavors": [
                                    {
                                        "name": "h100",
                                        "resources": [
                                            {"name": "cpu", "nominalQuota": 96},
                                            {"name": "memory", "nominalQuota": "768Gi"},
                                            {"name": GPU, "nominalQuota": 8, "borrowingLimit": 16},
                                            {"name": MIG, "nominalQuota": 14, "borrowingLimit": 28},
                                        ],
                                    }
                                ],
                            }
                        ],
                    },
                },
            )
            custom.create_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                "localqueues",
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "LocalQueue",
                    "metadata": {"name": "lq", "namespace": namespace},
                    "spec": {"clusterQueue": name},
                },
            )
            queues.append((name, namespace))
    return queues


def job_body(name: str, shape: str) -> dict:
    resource, amount, priority, seconds, _ = SHAPES[shape]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {
                "kueue.x-k8s.io/queue-name": "lq",
                "kueue.x-k8s.io/priority-class": priority,
                "bench/shape": shape,
            },
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "pytorch/pytorch",
                            "command": ["sh", "-c", f"sleep {seconds}"],
                            "resources": {
                                "requests": {"cpu": "1", "memory": "8Gi"},
                                "limits": {resource: str(amount)},
                            },
                        }
                    ],
                }
            },
        },
    }


class WorkloadWatcher(threading.Thread):
    """Records, in the API server's order, when each Workload appeared, was first admitted and
    finished."""

    def __init__(self, api) -> None:
        super().__init__(daemon=True)
        self.api = api
        self.lock = threading.Lock()
        self.sequence = 0
        self.created: dict[str, int] = {}
        self.info: dict[str, dict] = {}
        self.admitted: dict[str, int] = {}
        self.admitted_at: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.evictions = 0
        self.stop = threading.Event()

    def run(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        resource_version = None
        while not self.stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    custom.list_cluster_custom_object,
                    GROUP,
                    VERSION,
                    "workloads",
                    resource_version=resource_version,
                    timeout_seconds=30,
                    allow_watch_bookmarks=True,
                ):
                    obj = event["object"]
                    resource_version = obj["metadata"].get("resourceVersion", resource_version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.observe(obj)
                    if self.stop.is_set():
                        break
            except client.ApiException as exc:
                if exc.status == 410:
                    resource_version = None
                    continue
                raise

    def observe(self, obj: dict) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        with self.lock:
            self.sequence += 1
            if key not in self.created:
                self.created[key] = self.sequence
                owner = obj["metadata"]["ownerReferences"][0]["name"]
                self.info[key] = {
                    "job": owner,
                    "priority": obj["spec"].get("priority", 0),
                    "cq": obj["metadata"]["namespace"].replace("team-", "cq-"),
                    "shape": owner.split("-")[0],
                }
            reserved = conditions.get("QuotaReserved", {}).get("status") == "True"
            if reserved and key not in self.admitted:
                self.admitted[key] = self.sequence
                self.admitted_at[key] = time.monotonic()
            if conditions.get("Finished", {}).get("status") == "True" and key not in self.finished:
                self.finished[key] = time.monotonic()

    def order_violations(self) -> list[str]:
        """Within one CQ and shape, a first admission while a better-ranked Workload waited."""
        problems = []
        groups: dict[tuple[str, str], list[str]] = {}
        for key, info in self.info.items():
            groups.setdefault((info["cq"], info["shape"]), []).append(key)
        for keys in groups.values():
            for a in keys:
                if a not in self.admitted:
                    continue
                for b in keys:
                    if b == a or self.created[b] > self.admitted[a]:
                        continue
                    if b in self.admitted and self.admitted[b] < self.admitted[a]:
                        continue
                    rank_a = (-self.info[a]["priority"], self.created[a])
                    rank_b = (-self.info[b]["priority"], self.created[b])
                    if rank_b < rank_a:
                        problems.append(f"{a} admitted while {b} (ranked before it) waited")
        return problems


def main() -> int:
    parser = harness.make_parser(__doc__, short={"jobs_per_cq": 5})
    parser.add_argument("--speed", type=float, default=100.0)
    parser.add_argument("--jobs-per-cq", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> int:
    started = time.monotonic()
    process = stack.kubesim(cluster=CLUSTER, speed=args.speed)
    print(
        f"kubesim up in {time.monotonic() - started:.1f}s "
        f"(38 nodes: 240 H100 GPUs + 448 MIG 1g.10gb slices), speed {args.speed:g}"
    )
    api = process.api_client()
    try:
        queues = setup_queues(api)
        watcher = WorkloadWatcher(api)
        watcher.start()
        rng = random.Random(7)
        plan = []
        scale = args.jobs_per_cq / 50
        for _, namespace in queues:
            for shape, (_, _, _, _, count) in SHAPES.items():
                for i in range(max(1, round(count * scale))):
                    plan.append((namespace, f"{shape}-{i}", shape))
        rng.shuffle(plan)
        total = len(plan)
        cpu_before = harness.cpu_seconds(process.process.pid)
        t0 = time.monotonic()
        batch = client.BatchV1Api(api)

        def submit(item):
            namespace, name, shape = item
            batch.create_namespaced_job(namespace, job_body(name, shape))

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(submit, plan))
        submitted = time.monotonic() - t0
        print(
            f"submitted {total} jobs over {len(queues)} ClusterQueues in {submitted:.1f}s "
            f"({total / submitted:.0f} creates/s)"
        )
        deadline = t0 + args.timeout
        all_admitted = None
        while time.monotonic() < deadline:
            with watcher.lock:
                admitted, finished = len(watcher.admitted), len(watcher.finished)
            if all_admitted is None and admitted >= total:
                all_admitted = time.monotonic() - t0
            if finished >= total:
                break
            time.sleep(0.5)
        elapsed = time.monotonic() - t0
        cpu_used = harness.cpu_seconds(process.process.pid) - cpu_before
        watcher.stop.set()
        with watcher.lock:
            admitted, finished = len(watcher.admitted), len(watcher.finished)
            violations = watcher.order_violations()
        evicted = 0
        custom = client.CustomObjectsApi(api)
        for wl in custom.list_cluster_custom_object(GROUP, VERSION, "workloads")["items"]:
            for entry in (wl.get("status") or {}).get("schedulingStats", {}).get("evictions") or []:
                evicted += int(entry.get("count") or 0)
        print(
            f"all {admitted}/{total} admitted after "
            f"{all_admitted if all_admitted is None else round(all_admitted, 1)}s wall"
        )
        print(
            f"all {finished}/{total} finished after {elapsed:.1f}s wall "
            f"(target <= 300s: {'met' if finished >= total and elapsed <= 300 else 'NOT met'})"
        )
        print(
            f"kubesim CPU time during the run: {cpu_used:.1f}s "
            f"({100 * cpu_used / elapsed:.0f}% of one core); preemptions: {evicted}"
        )
        if all_admitted is not None:
            harness.figure("all admitted after", all_admitted, "s")
        harness.figure("all finished after", elapsed, "s")
        harness.figure("kubesim CPU time", cpu_used, "s")
        if violations:
            print(f"admission order: {len(violations)} violations, e.g.")
            for line in violations[:5]:
                print("  " + line)
        else:
            print("admission order: agrees with priority then FIFO in every ClusterQueue and shape")
        return 0 if finished >= total and not violations else 1
    finally:
        api.close()


if __name__ == "__main__":
    sys.exit(main())
