"""jobs/status.py: the one mapping from cluster status to portal state."""

import pytest

from jobs.states import JobState as S
from jobs.status import ClusterSnapshot, map_cluster_status, pod_failure_summary


def cond(type_, status="True", reason="", message=""):
    return {"type": type_, "status": status, "reason": reason, "message": message}


def batch(*conds, suspend=False, active=0, ready=0):
    return {
        "metadata": {"name": "gp-job-1", "uid": "u1"},
        "spec": {"suspend": suspend},
        "status": {"conditions": list(conds), "active": active, "ready": ready},
    }


def wl(*conds, active=True):
    return {"spec": {"active": active}, "status": {"conditions": list(conds)}}


KUEUE_CASES = [
    ("missing", None, None, None, "ObjectMissing"),
    ("no workload yet", batch(suspend=True), None, S.SUBMITTED, "WaitingForWorkload"),
    (
        "pending for quota",
        batch(suspend=True),
        wl(cond("QuotaReserved", "False", "Pending", "insufficient unused quota")),
        S.QUEUED,
        "Pending",
    ),
    ("no conditions (StrictFIFO)", batch(suspend=True), wl(), S.QUEUED, "Pending"),
    (
        "reserved awaiting checks",
        batch(suspend=True),
        wl(cond("QuotaReserved"), cond("Admitted", "False", "NoReservation")),
        S.QUEUED,
        "AwaitingAdmissionChecks",
    ),
    (
        "admitted, pods starting",
        batch(active=1, ready=0),
        wl(cond("QuotaReserved"), cond("Admitted")),
        S.ADMITTED,
        "PodsStarting",
    ),
    (
        "admitted, pods ready",
        batch(active=1, ready=1),
        wl(cond("QuotaReserved"), cond("Admitted")),
        S.RUNNING,
        "PodsRunning",
    ),
    (
        "PodsReady condition",
        batch(active=2, ready=1),
        wl(cond("QuotaReserved"), cond("Admitted"), cond("PodsReady", reason="Started")),
        S.RUNNING,
        "PodsReady",
    ),
    (
        "preempted",
        batch(suspend=True),
        wl(
            cond("QuotaReserved"),
            cond("Evicted", reason="Preempted", message="Preempted to accommodate"),
            cond("Preempted", reason="InCohortReclamation", message="reclaimed"),
        ),
        S.PREEMPTED,
        "InCohortReclamation",
    ),
    (
        "deactivated",
        batch(suspend=True),
        wl(cond("Evicted", reason="Deactivated", message="max exec time"), active=False),
        S.FAILED,
        "Deactivated",
    ),
    (
        "workload finished ok",
        batch(),
        wl(cond("Finished", reason="Succeeded", message="Job finished successfully")),
        S.SUCCEEDED,
        "Succeeded",
    ),
    (
        "workload finished failed",
        batch(),
        wl(cond("Finished", reason="Failed", message="BackoffLimitExceeded")),
        S.FAILED,
        "Failed",
    ),
    ("job complete wins", batch(cond("Complete")), wl(cond("Admitted")), S.SUCCEEDED, "Completed"),
    (
        "deadline exceeded",
        batch(cond("Failed", reason="DeadlineExceeded")),
        wl(cond("Admitted")),
        S.FAILED,
        "DeadlineExceeded",
    ),
    (
        "unmanaged job running",
        batch(active=1, ready=1),
        None,
        S.RUNNING,
        "PodsRunning",
    ),
]


@pytest.mark.parametrize(
    ("case", "job", "workload", "state", "reason"), KUEUE_CASES, ids=[c[0] for c in KUEUE_CASES]
)
def test_kueue_mapping(case, job, workload, state, reason):
    reading = map_cluster_status(ClusterSnapshot(backend="kueue", primary=job, workload=workload))
    assert reading.state == state
    assert reading.reason == reason
    assert reading.missing == (job is None)


def test_gang_is_running_only_when_every_pod_is_ready():
    job = batch(active=4, ready=3)
    workload = wl(cond("QuotaReserved"), cond("Admitted"))
    snap = ClusterSnapshot(backend="kueue", primary=job, workload=workload, expected_pods=4)
    assert map_cluster_status(snap).state == S.ADMITTED
    job["status"]["ready"] = 4
    assert map_cluster_status(snap).state == S.RUNNING


def vc(phase, **status):
    return {"metadata": {"uid": "v1"}, "status": {"state": {"phase": phase}, **status}}


def pg(phase, *conds):
    return {"status": {"phase": phase, "conditions": list(conds)}}


VOLCANO_CASES = [
    ("missing", None, None, None, "ObjectMissing"),
    ("no status yet", {"metadata": {}}, None, S.QUEUED, "Pending"),
    (
        "gang unschedulable",
        vc("Pending"),
        pg("Pending", cond("Unschedulable", reason="NotEnoughResources", message="3/4 tasks")),
        S.QUEUED,
        "NotEnoughResources",
    ),
    ("inqueue", vc("Pending"), pg("Inqueue"), S.ADMITTED, "GangAdmitted"),
    ("running", vc("Running"), pg("Running"), S.RUNNING, "Running"),
    ("degraded", vc("Running"), pg("Unknown"), S.RUNNING, "GangDegraded"),
    ("restarting", vc("Restarting", retryCount=1), None, S.PREEMPTED, "Restarting"),
    ("completed", vc("Completed"), pg("Completed"), S.SUCCEEDED, "Completed"),
    ("failed", vc("Failed"), None, S.FAILED, "Failed"),
    ("terminated", vc("Terminated"), None, S.FAILED, "Terminated"),
    ("terminating is transient", vc("Terminating"), None, None, "Terminating"),
]


@pytest.mark.parametrize(
    ("case", "job", "group", "state", "reason"), VOLCANO_CASES, ids=[c[0] for c in VOLCANO_CASES]
)
def test_volcano_mapping(case, job, group, state, reason):
    reading = map_cluster_status(ClusterSnapshot(backend="volcano", primary=job, podgroup=group))
    assert (reading.state, reading.reason) == (state, reason)


def test_failure_message_names_the_pod_and_exit_code():
    pods = [
        {
            "metadata": {"name": "gp-job-1-0-abc"},
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
                ],
            },
        }
    ]
    assert pod_failure_summary(pods) == "pod gp-job-1-0-abc exited with code 137 (OOMKilled)"
    reading = map_cluster_status(
        ClusterSnapshot(
            backend="kueue",
            primary=batch(cond("Failed", reason="BackoffLimitExceeded", message="Job has reached")),
            pods=pods,
        )
    )
    assert reading.state == S.FAILED
    assert "exited with code 137 (OOMKilled)" in reading.message
