"""jobs.explain: every Kueue and Volcano pending reason kubesim emits, plus messages quoted in
the upstream documentation, turn into a sentence a researcher can act on."""

import pytest

from jobs.explain import (
    Request,
    Standing,
    event_sentence,
    explain_pending,
    gpu_short_name,
    request_for,
)

H100x2 = Request(2, "H100 GPUs")
VISION = Standing(
    project="vision",
    department="research",
    pool="h100",
    in_use=6,
    guaranteed=8,
    department_spare=0,
)

# (reason, message, expected fragment) — the message column is verbatim cluster text.
PENDING = [
    # kubesim's Kueue (kueue_engine.py / kueue.py)
    (
        "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        "in flavor gp-pool-h100, 2 more needed",
        "Waiting for 2 × H100 GPUs in pool h100: project vision uses 6 of its 8 guaranteed GPUs "
        "and department research has none to lend. Position 3 of 5 in the queue.",
    ),
    (
        "Pending",
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor "
        "gp-pool-h100, previously considered podsets requests (0) + current podset request (32) "
        "> maximum capacity (16)",
        "more GPUs than project vision may ever use in pool h100 (maximum 16)",
    ),
    (
        "Pending",
        "couldn't assign flavors to pod set main: untolerated taint dedicated=infra:NoSchedule "
        "in flavor gp-pool-infra",
        "Pool infra is reserved (taint dedicated=infra:NoSchedule)",
    ),
    (
        "Pending",
        "couldn't assign flavors to pod set main: flavor gp-pool-a100 doesn't match node affinity",
        "Pool a100 does not match the pool this job asked for",
    ),
    (
        "Pending",
        "couldn't assign flavors to pod set main: flavor gp-pool-gone not found",
        "The pool gone is not set up in the cluster yet",
    ),
    ("Inadmissible", "LocalQueue gp-vision doesn't exist", "queue is not set up"),
    ("Inadmissible", "ClusterQueue gp-vision doesn't exist", "queue is not set up"),
    ("Inadmissible", "LocalQueue gp-vision is inactive", "queue is switched off"),
    (
        "Inadmissible",
        "workload namespace doesn't match ClusterQueue selector",
        "namespace is not allowed in its queue",
    ),
    ("WaitingForWorkload", "Kueue has not picked it up yet", "the queue has not picked it up"),
    ("AwaitingAdmissionChecks", "Quota reserved in ClusterQueue gp-vision", "Quota is reserved"),
    # Kueue docs (kueue.md): the legacy CPU example and the observability reasons
    (
        "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
        "default-flavor, 1 more needed",
        "Waiting for 1 more CPU cores in pool default-flavor",
    ),
    ("ExceedsMaxQuota", "", "more than the project may ever use"),
    ("NoMatchingFlavor", "", "No pool the project has quota in"),
    ("WaitingForPreemptedWorkloads", "", "lower-priority jobs are being stopped"),
    ("WaitingForQuota", "", "project vision uses 6 of its 8 guaranteed GPUs"),
    # kubesim's Volcano (volcano.py) and the volcano-kai.md examples
    (
        "Unschedulable",
        "queue resource quota insufficient: insufficient nvidia.com/gpu",
        "Waiting for 2 × H100 GPUs in pool h100: project vision uses 6 of its 8",
    ),
    (
        "Unschedulable",
        "resource in cluster is overused: overused nvidia.com/gpu",
        "free GPUs are already promised to jobs ahead of this one",
    ),
    (
        "NotEnoughResources",
        "6/6 tasks in gang unschedulable: pod group is not ready, 6 Pending, 6 minAvailable; "
        "Pending: 6 Unschedulable",
        "Waiting until all 6 pods can start together: 6 of them have no node",
    ),
    (
        "NotEnoughResources",
        "2/4 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 Running, "
        "4 minAvailable; Pending: 2 Unschedulable. Origin reason is gp-job-9-worker-1: "
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        "2 of them have no node with enough free GPUs yet (0 of 3 nodes have room)",
    ),
    (
        "Pending",
        "waiting for the gang to be admitted",
        "Waiting: waiting for the gang to be admitted",
    ),
    ("GangAdmitted", "the gang is being placed", "Admitted; the pods are being placed"),
    ("Pending", "", "Waiting for 2 × H100 GPUs in pool h100."),
]


@pytest.mark.parametrize(("reason", "message", "expected"), PENDING)
def test_every_pending_reason_becomes_a_sentence(reason, message, expected):
    sentence = explain_pending(
        reason=reason,
        message=message,
        request=H100x2,
        standing=VISION,
        position=3,
        queue_length=5,
    )
    assert expected in sentence
    assert sentence.endswith("Position 3 of 5 in the queue.")
    assert "couldn't assign flavors" not in sentence  # never the raw Kueue text


def test_the_department_lends_what_its_other_projects_leave_unused():
    standing = Standing("vision", "research", "h100", in_use=8, guaranteed=8, department_spare=1)
    text = explain_pending(
        reason="Pending",
        message="couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor gp-pool-h100, 1 more needed",
        request=H100x2,
        standing=standing,
    )
    assert text == (
        "Waiting for 2 × H100 GPUs in pool h100: project vision uses 8 of its 8 guaranteed GPUs "
        "and department research has 1 to lend, not yet enough."
    )


def test_without_quota_figures_or_position_the_sentence_stays_short():
    text = explain_pending(
        reason="Pending",
        message="couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/mig-1g.10gb in flavor gp-pool-h100, 1 more needed",
        request=Request(1, "MIG 1g.10gb slices"),
    )
    assert text == "Waiting for 1 × MIG 1g.10gb slices in pool h100."


def test_requests_name_the_gpu_model_and_count_every_pod():
    assert gpu_short_name("NVIDIA-H100-80GB-HBM3") == "H100"
    assert gpu_short_name("NVIDIA-A100-SXM4-40GB") == "A100"
    assert request_for(gpus=8, replicas=2, mig_profile="", gpu_model="NVIDIA-H100-80GB-HBM3") == (
        Request(16, "H100 GPUs")
    )
    assert request_for(gpus=0, replicas=1, mig_profile="1g.10gb", gpu_model="x") == Request(
        1, "MIG 1g.10gb slices"
    )


EVENTS = [
    (
        "Scheduled",
        "Successfully assigned gp-vision/gp-job-7-abcde to h100-node-2",
        "Pod gp-job-7-abcde was placed on node h100-node-2.",
    ),
    (
        "FailedScheduling",
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        "No node can take pod p yet: 0/3 nodes",
    ),
    (
        "Failed",
        'Failed to pull image "nvcr.io/nope:1": not found',
        "The container image nvcr.io/nope:1 could not be pulled",
    ),
    ("ErrImagePull", "rpc error: not found", "could not be pulled"),
    ("BackOff", 'Back-off pulling image "nvcr.io/nope:1"', "failing to pull the image"),
    ("BackOff", "Back-off restarting failed container trainer in pod p", "keeps failing"),
    (
        "Preempted",
        "Preempted to accommodate a workload (UID: a, JobUID: b) due to prioritization in the "
        "ClusterQueue; preemptor path: /gp-dept-r/gp-a; preemptee path: /gp-dept-r/gp-a",
        "a higher-priority job of the same project; it goes back to the queue.",
    ),
    (
        "Preempted",
        "Preempted to accommodate a workload (UID: a, JobUID: b) due to reclamation within the "
        "cohort; preemptor path: /c/gp-b; preemptee path: /c/gp-a",
        "another project reclaiming the GPUs it had lent",
    ),
    ("Evict", "Pod group evicted", "preempted by the gang scheduler"),
    ("Evicted", "The node was low on resource: memory.", "The job was evicted: The node was low"),
    ("OOMKilling", "Memory cgroup out of memory: Killed process", "ran out of memory"),
    ("DeadlineExceeded", "Job was active longer than specified deadline", "maximum runtime"),
    ("BackoffLimitExceeded", "Job has reached the specified backoff limit", "no retries are left"),
    ("Admitted", "Admitted by ClusterQueue gp-a, wait time since reservation was 0s", "admitted"),
]


@pytest.mark.parametrize(("reason", "message", "expected"), EVENTS)
def test_relevant_events_become_one_plain_sentence(reason, message, expected):
    sentence = event_sentence(reason, message, kind="Pod", name="p")
    assert sentence is not None
    assert expected in sentence


@pytest.mark.parametrize(
    "reason", ["Pulling", "Pulled", "Created", "Started", "Killing", "SuccessfulCreate", "Pending"]
)
def test_routine_events_stay_out_of_the_timeline(reason):
    assert event_sentence(reason, "whatever") is None
