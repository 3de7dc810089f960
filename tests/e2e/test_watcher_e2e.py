"""End to end with the cluster watcher: kubesim, a Celery worker (applies jobs; no beat, so no
periodic resync helps), PostgreSQL, Redis and `manage.py watch_cluster` as subprocesses.

Every state below reaches the database through the watcher alone."""

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import wait_for
from tests.e2e.test_jobs_e2e import api_as, kubesim_fault, submit, sync_quotas_and_wait

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
REPO = Path(__file__).resolve().parents[2]


class WatcherProcess:
    def __init__(self, env: dict[str, str], workdir: Path, identity: str):
        self.identity = identity
        self.log = workdir / f"watcher-{identity}.log"
        self.health = workdir / f"watcher-{identity}.json"
        self.env = env
        self.process: subprocess.Popen | None = None

    def start(self) -> "WatcherProcess":
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "manage.py",
                    "watch_cluster",
                    "--identity",
                    self.identity,
                    "--health-file",
                    str(self.health),
                ],
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def leader(self) -> bool:
        try:
            return bool(json.loads(self.health.read_text()).get("leader"))
        except (OSError, ValueError):
            return False

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(autouse=True)
def clean_cluster(e2e_kubesim, settings):
    """kubesim lives for the module: remove the jobs earlier tests left so quota is free."""
    from portal.kube import apply as kube
    from portal.kube.client import reset_api_client

    settings.KUBECONFIG = str(e2e_kubesim.kubeconfig)
    reset_api_client()
    for api_version in ("batch/v1", "batch.volcano.sh/v1alpha1"):
        for obj in kube.list_owned(api_version, "Job"):
            kube.delete_object(obj)
    wait_for(lambda: not kube.list_owned("v1", "Pod"), timeout=60, what="earlier tests' pods to go")


@pytest.fixture
def watcher_factory(worker_factory, e2e_kubesim, e2e_redis_url, tmp_path):
    from django.db import connection

    db = connection.settings_dict
    user, host, port = db["USER"] or "postgres", db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{user}@{host}:{port}/{db['NAME']}",
        "CELERY_BROKER_URL": e2e_redis_url,
        "PORTAL_PUBSUB_URL": e2e_redis_url,
        "KUBECONFIG": str(e2e_kubesim.kubeconfig),
        "PYTHONPATH": str(REPO),
        # Each test gets its own Lease, so a watcher of an earlier test never holds it.
        "PORTAL_WATCHER_LEASE_NAME": f"gpu-portal-watcher-{int(time.time() * 1000)}",
    }
    started: list[WatcherProcess] = []

    def start(identity: str = "w1", lease_seconds: float | None = None) -> WatcherProcess:
        # A longer lease for a lone watcher on a busy machine: a renewal that comes late must
        # not make it stand by in the middle of a browser test.
        extra = {"PORTAL_WATCHER_LEASE_SECONDS": str(lease_seconds)} if lease_seconds else {}
        watcher = WatcherProcess({**env, **extra}, tmp_path, identity).start()
        started.append(watcher)
        return watcher

    yield start
    for watcher in started:
        watcher.stop()
        # Shown by pytest when the test failed.
        print(f"--- {watcher.log.name} ---\n{watcher.log.read_text()[-4000:]}")


def job_row(job_id):
    from jobs.models import Job

    return Job.objects.get(pk=job_id)


def wait_state(job_id, wanted, timeout=120):
    return wait_for(
        lambda: job_row(job_id).state in wanted and job_row(job_id),
        timeout=timeout,
        what=f"job {job_id} to reach {wanted} (now {job_row(job_id).state})",
    )


def transitions(job_id):
    from jobs.models import JobEvent

    return [
        (e.from_state, e.to_state)
        for e in JobEvent.objects.filter(job_id=job_id).exclude(to_state="").order_by("id")
    ]


def cluster_lines(job_id):
    from jobs.models import JobEvent

    return list(
        JobEvent.objects.filter(job_id=job_id, to_state="")
        .order_by("id")
        .values_list("reason", "message", "count")
    )


def assert_no_duplicates(job_id):
    moves = transitions(job_id)
    assert len(moves) == len(set(moves)), moves
    for earlier, later in itertools.pairwise(moves):
        assert earlier[1] == later[0], f"transitions do not chain: {moves}"


def test_a_job_moves_through_queued_running_succeeded_with_position_and_explanation(
    e2e_org, worker_factory, watcher_factory, e2e_redis_url
):
    import redis

    pubsub = redis.Redis.from_url(e2e_redis_url).pubsub()
    pubsub.subscribe("portal:jobs:alpha")
    worker_factory()
    sync_quotas_and_wait(e2e_org)
    watcher_factory()
    client = api_as(e2e_org["bob"])
    # Two 8-GPU jobs take all 16 guaranteed GPUs of project alpha; the third one waits.
    blockers = [
        submit(client, kind="single", gpus=8, command=["sh", "-c", "sleep 100000"])
        for _ in range(2)
    ]
    for blocker in blockers:
        wait_state(blocker["id"], {"running"})
    waiting = submit(
        client,
        kind="single",
        gpus=8,
        command=["sh", "-c", "echo starting; sleep 1500; echo done"],
    )
    queued = wait_for(
        lambda: (
            (row := job_row(waiting["id"])).state == "queued"
            and row.queue_position
            and row.explanation
            and row
        ),
        what="the waiting job to show a position and an explanation",
    )
    assert queued.queue_position == 1
    assert queued.queue_length == 1
    assert queued.explanation.startswith("Waiting for 8 × H100 GPUs in pool h100: "), (
        queued.explanation
    )
    assert "project alpha uses 16 of its 16 guaranteed GPUs" in queued.explanation
    assert "department research has none to lend" in queued.explanation
    assert queued.explanation.endswith("Position 1 of 1 in the queue.")

    # Usage against quota, from the ClusterQueue's status.
    from jobs.models import QueueUsage

    usage = wait_for(
        lambda: QueueUsage.objects.filter(
            queue_name="gp-alpha", pool="h100", resource="gpu", in_use=16
        ).first(),
        what="alpha's usage row",
    )
    assert usage.guaranteed == 16
    project = client.get("/api/v1/projects/alpha/").json()
    gpu_use = [u for u in project["usage"] if u["pool"] == "h100" and u["resource"] == "gpu"]
    assert gpu_use[0]["in_use"] == 16
    assert gpu_use[0]["guaranteed"] == 16
    pool = client.get("/api/v1/pools/h100/").json()
    assert pool["capacity_gpus"] == 24
    assert pool["free_gpus"] == 8
    # The home page's bar for the pool says it too.
    page = client.get("/").content.decode()
    assert "16 in use, 16 guaranteed" in page
    assert usage.project.slug == "alpha"

    # Cancelling one blocker lets the waiting job run to completion.
    response = client.post(f"/api/v1/jobs/{blockers[0]['id']}/cancel/")
    assert response.status_code in (200, 202), response.content
    wait_state(waiting["id"], {"running"})
    # Following the log streams it until the container ends.
    wait_for(lambda: job_row(waiting["id"]).pod_records.exists(), what="the pod row")
    followed = client.get(f"/api/v1/jobs/{waiting['id']}/logs/?follow=true")
    assert followed.status_code == 200
    text = b"".join(followed.streaming_content).decode()
    assert text.startswith("starting"), text
    assert text.rstrip().endswith("done"), text
    done = wait_state(waiting["id"], {"succeeded", "failed"}, timeout=180)
    assert done.state == "succeeded", (done.state_reason, done.state_message)
    states = [to for _, to in transitions(waiting["id"])]
    assert states[0] == "submitted", states
    assert states[-1] == "succeeded", states
    assert states.index("queued") < states.index("running") < states.index("succeeded"), states
    assert_no_duplicates(waiting["id"])
    wait_for(
        lambda: any("was placed on node" in m for _, m, _ in cluster_lines(waiting["id"])),
        what="the scheduling event in the timeline",
    )
    pod = wait_for(
        lambda: job_row(waiting["id"]).pod_records.filter(exit_code=0).first(),
        what="the finished pod's row",
    )
    assert pod.node, pod.__dict__
    assert len(pod.gpu_uuids) == 8, pod.__dict__
    assert len(pod.gpu_indices) == 8
    assert pod.exit_code == 0
    assert job_row(waiting["id"]).queue_position is None
    # Live pages hear about every change on Redis pub/sub.
    notices = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.5)
        if message is None:
            break  # drained
        if message["type"] == "message":
            notices.append(json.loads(message["data"]))
    assert {"job": waiting["id"], "state": "succeeded"} in notices, notices
    pubsub.close()
    # The cancelled blocker's pod is gone: its log says so plainly.
    wait_for(
        lambda: job_row(blockers[0]["id"]).pod_records.filter(deleted=True).exists(),
        what="the cancelled job's pod to be recorded as gone",
    )
    gone = client.get(f"/api/v1/jobs/{blockers[0]['id']}/logs/")
    assert gone.status_code == 410
    assert "no longer exists" in gone.content.decode()


def test_exit_3_fails_with_exit_code_and_last_log_lines_and_oom_fails_at_once(
    e2e_org, worker_factory, watcher_factory
):
    worker_factory()
    sync_quotas_and_wait(e2e_org)
    watcher_factory()
    client = api_as(e2e_org["bob"])
    failing = submit(
        client,
        kind="single",
        gpus=1,
        command=["sh", "-c", "echo loading data; echo epoch 1 loss nan; exit 3"],
    )
    greedy = submit(
        client,
        kind="single",
        gpus=1,
        # Holds 80Gi with a 64Gi limit: the kubelet OOM-kills it; without the watcher's verdict
        # the Job would retry it until its maximum runtime.
        command=["sh", "-c", "echo allocating; alloc 80Gi; sleep 100000"],
    )
    failed = wait_state(failing["id"], {"failed", "succeeded"})
    assert failed.state == "failed"
    assert "exited with code 3" in failed.state_message, failed.state_message
    assert "epoch 1 loss nan" in failed.state_message, failed.state_message
    pod = wait_for(lambda: failed.pod_records.filter(exit_code=3).first(), what="the pod row")
    assert pod.reason == "Error"
    assert pod.node
    tail = client.get(f"/api/v1/jobs/{failing['id']}/logs/?tail=1")
    assert tail.status_code == 200
    assert b"".join(tail.streaming_content) == b"epoch 1 loss nan\n"
    assert client.get(f"/api/v1/jobs/{failing['id']}/logs/?tail=x").status_code == 400
    outsider = api_as(e2e_org["oscar"]).get(f"/api/v1/jobs/{failing['id']}/logs/")
    assert outsider.status_code == 404

    oom = wait_state(greedy["id"], {"failed", "succeeded"}, timeout=60)
    assert oom.state == "failed", oom.state_message
    assert oom.state_reason == "OOMKilled", oom.state_message
    assert "the container ran out of memory (limit 64Gi)" in oom.state_message
    assert_no_duplicates(failing["id"])
    assert_no_duplicates(greedy["id"])


def test_a_preempted_job_shows_preempted_then_requeues_and_runs(
    e2e_org, worker_factory, watcher_factory
):
    worker_factory()
    sync_quotas_and_wait(e2e_org)
    watcher_factory()
    client = api_as(e2e_org["bob"])
    low = submit(
        client, kind="gang", gpus=8, replicas=2, priority="low", command=["sleep", "36000"]
    )
    wait_state(low["id"], {"running"})
    high = submit(client, kind="gang", gpus=8, replicas=2, priority="high")
    wait_state(high["id"], {"running", "succeeded"})
    wait_for(
        lambda: "preempted" in [to for _, to in transitions(low["id"])],
        what="the low-priority job to show Preempted",
    )
    # Timeline lines from Events follow the state writes (they wait while changes are pending).
    wait_for(
        lambda: any(reason == "Preempted" for reason, _, _ in cluster_lines(low["id"])),
        what="the preemption in the timeline",
    )
    wait_state(high["id"], {"succeeded"}, timeout=180)
    again = wait_state(low["id"], {"running", "failed"}, timeout=180)
    assert again.state == "running", again.state_message
    states = [to for _, to in transitions(low["id"])]
    assert states.index("preempted") < len(states) - 1, states
    assert states[-1] == "running", states
    assert_no_duplicates(low["id"])
    # Logs of a gang by rank; a container that never restarted has no previous log (said so).
    wait_for(
        lambda: job_row(low["id"]).pod_records.filter(rank=1, deleted=False).exists(),
        what="the requeued gang's rank-1 pod",
    )
    by_rank = client.get(f"/api/v1/jobs/{low['id']}/logs/?rank=1&tail=5")
    assert by_rank.status_code == 200
    assert job_row(low["id"]).pod_records.get(name=by_rank["X-Pod"], deleted=False).rank == 1
    previous = client.get(f"/api/v1/jobs/{low['id']}/logs/?previous=true")
    assert previous.status_code == 400
    assert "previous" in previous.content.decode().lower()


def test_jobs_converge_after_leader_kill_expired_history_and_api_outage(
    e2e_org, worker_factory, watcher_factory, e2e_kubesim
):
    from jobs.models import JobEvent

    worker_factory()
    sync_quotas_and_wait(e2e_org)
    first = watcher_factory("w1")
    wait_for(first.leader, what="the first watcher to lead")
    second = watcher_factory("w2")
    client = api_as(e2e_org["bob"])
    ids = [
        submit(client, kind="single", gpus=1, command=["sh", "-c", "sleep 2000; echo ok"])["id"]
        for _ in range(4)
    ]
    for job_id in ids:
        wait_state(job_id, {"running", "succeeded"})
    first.kill()
    # The standby takes over once the Lease has gone unrenewed for its duration (exactly when:
    # tests/watcher/test_kube_watch.py, on a clock of its own).
    wait_for(second.leader, timeout=90, interval=0.2, what="the standby to take over")
    more = [
        submit(client, kind="single", gpus=1, command=["sh", "-c", "sleep 3000; echo ok"])["id"]
        for _ in range(3)
    ]
    kubesim_fault(e2e_kubesim, {"expire_history": True, "close_watches": True})
    # Longer than the Lease (8 s), so the leader loses it too, and long enough for the informers'
    # backoff (0.5 s, doubling) to grow past 10 s before the API server answers again.
    kubesim_fault(e2e_kubesim, {"unavailable_seconds": 20})
    time.sleep(21)
    for job_id in ids + more:
        done = wait_state(job_id, {"succeeded", "failed"}, timeout=240)
        assert done.state == "succeeded", (job_id, done.state_reason, done.state_message)
        assert_no_duplicates(job_id)
    keys = list(JobEvent.objects.exclude(dedupe_key=None).values_list("dedupe_key", flat=True))
    assert len(keys) == len(set(keys))


def test_a_volcano_gang_runs_to_success_with_each_rank_recorded(
    e2e_org, worker_factory, watcher_factory
):
    worker_factory()
    sync_quotas_and_wait(e2e_org)
    watcher_factory()
    client = api_as(e2e_org["bob"])
    gang = submit(
        client,
        kind="gang",
        gpus=2,
        replicas=3,
        backend="volcano",
        # Long enough (25 s at speed 100) that a loaded machine still sees it running: at 15 s
        # a full suite's last minutes once hid the Running state from the watcher.
        command=["sh", "-c", "echo rank $RANK of $WORLD_SIZE; sleep 2500"],
    )
    done = wait_state(gang["id"], {"succeeded", "failed"}, timeout=180)
    assert done.state == "succeeded", done.state_message
    states = [to for _, to in transitions(gang["id"])]
    assert states.index("running") < states.index("succeeded"), states
    assert_no_duplicates(gang["id"])

    # The pods' records are written by the watcher's pod events, which may land just after the
    # job's own transition (separate writers): wait until every rank has its GPUs and exit code.
    def ranks_recorded():
        rows = list(done.pod_records.order_by("rank"))
        complete = len(rows) == 3 and all(p.exit_code is not None and p.gpu_uuids for p in rows)
        return complete and rows

    pods = wait_for(ranks_recorded, what="three pod rows with their GPUs and exit codes")
    assert [p.rank for p in pods] == [0, 1, 2]
    assert all(len(p.gpu_uuids) == 2 and p.exit_code == 0 for p in pods)
