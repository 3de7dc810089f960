"""Pure pieces of live status: the OOM verdict and pod records (jobs.status), quota use from
queue status (quotas.usage), the log query (jobs.logs.selectors) and kubesim's `alloc` statement."""

from decimal import Decimal

import pytest
from kubesim.controllers.node import shell

from jobs.logs.selectors import parse_log_query
from jobs.status import (
    ClusterSnapshot,
    dra_claim_names,
    map_with_pods,
    oom_killed,
    pod_record,
    with_gpu_uuids,
)
from quotas.usage import cluster_queue_rows, volcano_queue_rows, with_lending


def _pod(*, reason="OOMKilled", code=137, deleting=False, disruption=False):
    pod = {
        "metadata": {
            "name": "gp-job-7-abcde",
            "uid": "u1",
            "annotations": {
                "kubesim.dev/gpu-uuids": "GPU-a,GPU-b",
                "kubesim.dev/gpu-indices": "3,5",
                "batch.kubernetes.io/job-completion-index": "1",
            },
        },
        "spec": {
            "nodeName": "node-2",
            "containers": [{"name": "trainer", "resources": {"limits": {"memory": "64Gi"}}}],
        },
        "status": {
            "phase": "Failed",
            "startTime": "2026-01-01T00:00:00Z",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": code,
                            "reason": reason,
                            "finishedAt": "2026-01-01T00:05:00Z",
                        }
                    },
                }
            ],
        },
    }
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:05:00Z"
    if disruption:
        pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True"}]
    return pod


RUNNING_JOB = {"metadata": {"uid": "j"}, "spec": {}, "status": {"active": 1}}


def test_an_oom_killed_container_fails_the_job_with_its_memory_limit():
    reading = map_with_pods(ClusterSnapshot("kueue", RUNNING_JOB, pods=[_pod()]))
    assert reading.state == "failed"
    assert reading.reason == "OOMKilled"
    assert reading.message.startswith("the container ran out of memory (limit 64Gi)")


def test_a_preempted_or_deleted_pod_killed_with_137_is_not_an_oom():
    assert oom_killed([_pod(reason="Error")]) is None
    assert oom_killed([_pod(deleting=True)]) is None
    assert oom_killed([_pod(disruption=True)]) is None


def test_pod_record_says_where_and_how_it_ran():
    record = pod_record(_pod(reason="Error", code=3))
    assert (record.node, record.rank, record.exit_code, record.reason) == ("node-2", 1, 3, "Error")
    assert record.gpu_uuids == ["GPU-a", "GPU-b"]
    assert record.gpu_indices == [3, 5]
    assert record.finished_at == "2026-01-01T00:05:00Z"


@pytest.mark.parametrize(
    ("statuses", "names"),
    [
        (None, []),
        ([], []),
        (
            [{"name": "gpu", "resourceClaimName": "gp-job-7-abcde-gpu-x1"}],
            ["gp-job-7-abcde-gpu-x1"],
        ),
        ([{"name": "gpu"}], []),  # not made yet
        (
            [{"name": "a", "resourceClaimName": "c-a"}, {"name": "b", "resourceClaimName": "c-b"}],
            ["c-a", "c-b"],
        ),
    ],
)
def test_a_dra_pods_claims_are_named_by_its_status(statuses, names):
    pod = _pod()
    if statuses is not None:
        pod["status"]["resourceClaimStatuses"] = statuses
    assert dra_claim_names(pod) == names


def test_a_claimed_gpu_fills_a_record_that_names_none_and_never_overrides_the_kubelet():
    named = pod_record(_pod())
    assert with_gpu_uuids(named, ["GPU-z"]).gpu_uuids == ["GPU-a", "GPU-b"]
    bare = pod_record({**_pod(), "metadata": {"name": "p", "uid": "u2"}})
    assert bare.gpu_uuids == []
    assert with_gpu_uuids(bare, ["GPU-z"]).gpu_uuids == ["GPU-z"]
    assert with_gpu_uuids(bare, []) == bare


def _cq(name, project, used, borrowed="0", nominal=8, limit=None):
    resource = {"name": "nvidia.com/gpu", "nominalQuota": nominal}
    if limit is not None:
        resource["borrowingLimit"] = limit
    return {
        "metadata": {"name": name, "labels": {"gpu-portal.io/project": project}},
        "spec": {
            "cohortName": "gp-dept-research",
            "resourceGroups": [{"flavors": [{"name": "gp-pool-h100", "resources": [resource]}]}],
        },
        "status": {
            "flavorsUsage": [
                {
                    "name": "gp-pool-h100",
                    "resources": [{"name": "nvidia.com/gpu", "total": used, "borrowed": borrowed}],
                }
            ],
            "flavorsReservation": [
                {"name": "gp-pool-h100", "resources": [{"name": "nvidia.com/gpu", "total": used}]}
            ],
        },
    }


def test_cluster_queue_status_gives_use_against_quota_and_who_lends():
    rows = with_lending(
        cluster_queue_rows(_cq("gp-vision", "vision", "10", borrowed="2", limit=4))
        + cluster_queue_rows(_cq("gp-nlp", "nlp", "3"))
    )
    by = {r.project_slug: r for r in rows}
    vision, nlp = by["vision"], by["nlp"]
    assert (vision.pool, vision.resource, vision.in_use) == ("h100", "gpu", Decimal(10))
    assert vision.guaranteed == 8
    assert vision.maximum == 12
    assert vision.borrowed == 2
    assert vision.lent == 0
    assert nlp.lent == 2  # vision's 2 borrowed GPUs come out of nlp's 5 unused ones
    assert nlp.maximum is None  # no borrowing limit


def test_volcano_project_queue_status_gives_use_against_deserved():
    rows = volcano_queue_rows(
        {
            "metadata": {
                "name": "gp-vision.h100",
                "labels": {"gpu-portal.io/project": "vision", "gpu-portal.io/pool": "h100"},
            },
            "spec": {"deserved": {"nvidia.com/gpu": "8"}, "capability": {"nvidia.com/gpu": "12"}},
            "status": {"allocated": {"nvidia.com/gpu": "10", "cpu": "4"}},
        }
    )
    assert [(r.pool, r.resource, r.in_use, r.guaranteed, r.maximum, r.borrowed) for r in rows] == [
        ("h100", "gpu", 10, 8, 12, 2)
    ]


def test_log_query_is_validated_field_by_field():
    query, errors = parse_log_query({"tail": "20", "since": "10m", "follow": "true", "rank": "1"})
    assert errors == {}
    assert (query.tail, query.since_seconds, query.follow, query.rank) == (20, 600, True, 1)
    _, errors = parse_log_query({"tail": "-1", "since": "soon", "previous": "maybe"})
    assert set(errors) == {"tail", "since", "previous"}
    assert "90s, 10m, 2h or 1d" in errors["since"][0]
    _, errors = parse_log_query({"pod": "p", "rank": "0"})
    assert errors == {"rank": ["Give either pod or rank, not both."]}


def test_kubesim_alloc_beyond_the_memory_limit_is_an_oom_kill_at_that_moment():
    container = {
        "command": ["sh", "-c", "echo load; sleep 5; alloc 40Gi; echo half; alloc 40Gi; echo no"],
        "resources": {"limits": {"memory": "64Gi"}},
    }
    timeline = shell.plan(container, {}, 600)
    assert timeline.oom_killed
    assert timeline.exit_code == 137
    assert timeline.duration == 5
    assert [line for _, line in timeline.lines] == ["load", "half"]
    within = shell.plan({**container, "resources": {"limits": {"memory": "100Gi"}}}, {}, 600)
    assert not within.oom_killed
    assert within.exit_code == 0


def test_a_dra_pods_gpu_once_recorded_is_kept_without_reading_its_claims_again():
    import dataclasses

    from jobs.watcher.pod_gpus import pod_records

    pod = _pod()
    pod["metadata"] = {"name": "gp-job-7-abcde", "uid": "u1"}  # no device-plugin annotation
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "c-1"}]
    earlier = dataclasses.replace(pod_record(pod), gpu_uuids=["GPU-dra"])

    def no_reservations():
        raise AssertionError("a DRA pod is not a KAI fraction")

    (record,) = pod_records(
        "gp-alpha", [pod], kai_reservations=no_reservations, previous={"u1": earlier}
    )
    assert record.gpu_uuids == ["GPU-dra"]
    (pending,) = pod_records(
        "gp-alpha", [{**pod, "spec": {**pod["spec"], "nodeName": ""}}], kai_reservations=dict
    )
    assert pending.gpu_uuids == []  # not on a node yet: its claims are not read
