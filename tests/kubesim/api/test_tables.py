"""Table cells as kube-apiserver computes them (pure functions)."""

import datetime

import pytest
from kubesim.api import tables
from kubesim.api.builtins import builtin_types
from kubesim.api.crds import builtin_crds, resource_type_from_crd

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (30 * 3600, "30h"),
        (3 * 86400 + 3600, "3d1h"),
        (40 * 86400, "40d"),
    ],
)
def test_human_duration(seconds, text):
    assert tables.human_duration(seconds) == text


def test_jsonpath_filters_conditions():
    obj = {
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {"type": "Admitted", "status": "False"},
            ]
        }
    }
    assert tables.jsonpath(obj, ".status.conditions[?(@.type=='Admitted')].status") == ["False"]
    assert tables.jsonpath(obj, ".status.conditions[*].type") == ["QuotaReserved", "Admitted"]
    assert tables.jsonpath(obj, ".status.missing") == []


def _job(*conditions, **meta):
    return {
        "metadata": {"name": "j", **meta},
        "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]},
    }


@pytest.mark.parametrize(
    ("job", "status"),
    [
        (
            _job(("Suspended", "False"), ("SuccessCriteriaMet", "True"), ("Complete", "True")),
            "Complete",
        ),
        (_job(("FailureTarget", "True"), ("Failed", "True")), "Failed"),
        (_job(("Suspended", "True")), "Suspended"),
        (_job(deletionTimestamp="2026-01-01T00:00:00Z"), "Terminating"),
        (_job(), "Running"),
    ],
)
def test_job_status_column(job, status):
    assert tables._job_status(job) == status


def test_workload_table_uses_printer_columns():
    crd = next(c for c in builtin_crds() if c["spec"]["names"]["kind"] == "Workload")
    rtype = resource_type_from_crd(crd)
    workload = {
        "metadata": {"name": "wl", "creationTimestamp": "2026-01-01T11:58:00Z"},
        "spec": {"queueName": "user-queue"},
        "status": {
            "admission": {"clusterQueue": "cq"},
            "conditions": [{"type": "Admitted", "status": "True"}],
        },
    }
    table = tables.build_table(rtype, "v1beta2", [workload], now=NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "Queue",
        "Reserved in",
        "Admitted",
        "Finished",
        "Age",
    ]
    assert table["rows"][0]["cells"] == ["wl", "user-queue", "cq", "True", None, "2m"]


def test_pod_and_node_rows():
    types = {(t.group, t.kind): t for t in builtin_types()}
    pod = {
        "metadata": {"name": "p", "creationTimestamp": "2026-01-01T11:59:00Z"},
        "spec": {"containers": [{"name": "a"}], "nodeName": "n1"},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.5",
            "containerStatuses": [{"ready": True, "restartCount": 2, "state": {"running": {}}}],
        },
    }
    row = tables.build_table(types[("", "Pod")], "v1", [pod], now=NOW)["rows"][0]["cells"]
    assert row[:5] == ["p", "1/1", "Running", "2", "60s"]
    assert row[5:7] == ["10.0.0.5", "n1"]
    node = {
        "metadata": {
            "name": "n1",
            "creationTimestamp": "2026-01-01T11:00:00Z",
            "labels": {"node-role.kubernetes.io/gpu": ""},
        },
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.32.4"},
        },
    }
    row = tables.build_table(types[("", "Node")], "v1", [node], now=NOW)["rows"][0]["cells"]
    assert row[:5] == ["n1", "Ready,SchedulingDisabled", "gpu", "60m", "v1.32.4"]
