"""Pure functions behind kubesim's admission and controllers: PodSecurity checks, quota usage
and "must specify" wording, cron schedules, protobuf zero-value handling, upstream decoding."""

from __future__ import annotations

import pytest
from kubesim.api import protobuf, upstream
from kubesim.api.errors import ApiError
from kubesim.controllers.apiserver import pod_security
from kubesim.controllers.apiserver.pod_admission import _missing_compute, pod_usage
from kubesim.controllers.workloads import cron_matches, parse_cron


def _spec(**container_extra) -> dict:
    return {"containers": [{"name": "main", "image": "busybox", **container_extra}]}


def test_restricted_reports_upstream_checks_in_id_order():
    found = pod_security.check(_spec(), {}, "restricted")
    assert [v.split(" (")[0] for v in found] == [
        "allowPrivilegeEscalation != false",
        "unrestricted capabilities",
        "runAsNonRoot != true",
        "seccompProfile",
    ]
    assert pod_security.check(_spec(), {}, "baseline") == []


def test_baseline_refuses_host_namespaces_privileged_and_host_path():
    spec = _spec(securityContext={"privileged": True})
    spec["hostNetwork"] = True
    spec["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
    assert pod_security.check(spec, {}, "baseline") == [
        "host namespaces (hostNetwork=true)",
        'hostPath volumes (volume "root")',
        'privileged (container "main" must not set securityContext.privileged=true)',
    ]


def test_pod_usage_counts_limits_as_requests_and_the_pod():
    usage = pod_usage({"spec": _spec(resources={"limits": {"nvidia.com/gpu": "2", "cpu": "1"}})})
    assert str(usage["requests.nvidia.com/gpu"]) == "2"
    assert str(usage["cpu"]) == "1"
    assert str(usage["count/pods"]) == "1"


def test_missing_compute_names_resource_and_containers():
    pod = {"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}}
    assert _missing_compute({"limits.cpu": "2", "requests.cpu": "2"}, pod) == "limits.cpu for: a"


def test_cron_schedule_parsing_and_matching():
    fields = parse_cron("*/15 2 * * 1-5")
    assert fields[0] == {0, 15, 30, 45}
    assert 2 in fields[1]
    assert fields[4] == {1, 2, 3, 4, 5}
    with pytest.raises(ValueError):
        parse_cron("every minute")
    every = parse_cron("@hourly")
    assert cron_matches(every, 60 * 24)  # 1970-01-02T00:00Z, minute 0 of an hour
    assert not cron_matches(every, 61)  # 01:01
    # 1970-01-05 was a Monday: 02:15 matches the weekday schedule, Sunday the 4th does not
    monday = (4 * 24 + 2) * 60 + 15
    assert cron_matches(fields, monday)
    assert not cron_matches(fields, monday - 24 * 60)


def test_protobuf_zero_scalars_are_dropped_except_meaningful_pointers():
    # Container {name: "c" (1), hostPort: 0 (2, varint), containerPort: 80 (3)}
    port = bytes([2 << 3 | 0, 0, 3 << 3 | 0, 80, 4 << 3 | 2, 0])
    decoded = protobuf._message(
        port, {2: ("hostPort", "i"), 3: ("containerPort", "i"), 4: ("protocol", "s")}
    )
    assert decoded == {"containerPort": 80}


def test_upstream_decoding_types_canonical_quantities_and_unknown_fields():
    name = upstream.definition_for("", "v1", "Pod")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"memory": "2048Mi"}}, "x": 1}
            ]
        },
    }
    assert upstream.decode(name, pod, "Pod", "v1") == ["spec.containers[0].x"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"memory": "2Gi"}
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": "80"}]
    with pytest.raises(ApiError) as excinfo:
        upstream.decode(name, pod, "Pod", "v1")
    assert excinfo.value.message.endswith(
        "json: cannot unmarshal string into Go struct field ContainerPort"
        ".spec.containers.ports.containerPort of type int32"
    )
