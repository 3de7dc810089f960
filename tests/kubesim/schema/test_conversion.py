"""Kueue v1beta1 <-> v1beta2 conversion: renames, round trips, validity in the target version."""

import copy

import pytest
from kubesim.api.conversion import convert

from .conftest import compiled

CQ_V1BETA1 = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "ClusterQueue",
    "metadata": {"name": "team-a"},
    "spec": {
        "cohort": "research",
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "a100",
                        "resources": [
                            {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 4}
                        ],
                    }
                ],
            }
        ],
    },
    "status": {
        "flavorsUsage": [
            {
                "name": "a100",
                "resources": [{"name": "nvidia.com/gpu", "total": "2", "borrowed": "0"}],
            }
        ]
    },
}

WL_V1BETA2 = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Workload",
    "metadata": {"name": "job-train-1a2b3", "namespace": "team-a"},
    "spec": {
        "queueName": "team-a",
        "priority": 100,
        "priorityClassRef": {
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": "high",
        },
        "podSets": [
            {
                "name": "main",
                "count": 1,
                "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
            }
        ],
    },
    "status": {
        "accumulatedPastExecutionTimeSeconds": 30,
        "admission": {
            "clusterQueue": "team-a",
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 3,
                    "topologyAssignment": {
                        "levels": ["rack", "kubernetes.io/hostname"],
                        "slices": [
                            {
                                "domainCount": 2,
                                "podCounts": {"individual": [2, 1]},
                                "valuesPerLevel": [
                                    {"universal": "rack-1"},
                                    {"individual": {"prefix": "node-", "roots": ["a", "b"]}},
                                ],
                            }
                        ],
                    },
                }
            ],
        },
    },
}


def valid_in(obj):
    schema = compiled(obj["apiVersion"], obj["kind"])
    obj = copy.deepcopy(obj)
    pruned = schema.prune(obj)
    return pruned, schema.validate(obj)


def test_cluster_queue_cohort_is_renamed_both_ways():
    up = convert(CQ_V1BETA1, "v1beta2")
    assert up["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert up["spec"]["cohortName"] == "research"
    assert "cohort" not in up["spec"]
    assert valid_in(up) == ([], [])
    down = convert(up, "kueue.x-k8s.io/v1beta1")
    assert down == CQ_V1BETA1
    assert CQ_V1BETA1["spec"]["cohort"] == "research"  # the input is not modified


def test_cluster_queue_admission_check_names_become_a_strategy():
    obj = copy.deepcopy(CQ_V1BETA1)
    obj["spec"]["admissionChecks"] = ["prov", "mk"]
    obj["status"]["pendingWorkloadsStatus"] = {"lastChangeTime": "2026-11-30T00:00:00Z"}
    up = convert(obj, "v1beta2")
    assert up["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": "prov"}, {"name": "mk"}]
    }
    assert "pendingWorkloadsStatus" not in up["status"]
    assert valid_in(up) == ([], [])


@pytest.mark.parametrize(
    ("ref", "source"),
    [
        (
            {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"},
            "kueue.x-k8s.io/workloadpriorityclass",
        ),
        (
            {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"},
            "scheduling.k8s.io/priorityclass",
        ),
    ],
)
def test_workload_priority_class_ref_round_trip(ref, source):
    obj = copy.deepcopy(WL_V1BETA2)
    obj["spec"]["priorityClassRef"] = ref
    down = convert(obj, "v1beta1")
    assert down["spec"]["priorityClassName"] == "high"
    assert down["spec"]["priorityClassSource"] == source
    assert "priorityClassRef" not in down["spec"]
    assert down["status"]["accumulatedPastExexcutionTimeSeconds"] == 30
    assert valid_in(down) == ([], [])
    up = convert(down, "v1beta2")
    assert up["spec"] == obj["spec"]
    assert up["status"]["accumulatedPastExecutionTimeSeconds"] == 30


def test_workload_topology_assignment_domains_and_slices():
    down = convert(WL_V1BETA2, "v1beta1")
    topology = down["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    assert topology == {
        "levels": ["rack", "kubernetes.io/hostname"],
        "domains": [
            {"values": ["rack-1", "node-a"], "count": 2},
            {"values": ["rack-1", "node-b"], "count": 1},
        ],
    }
    up = convert(down, "v1beta2")
    slices = up["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]["slices"]
    assert slices == [
        {
            "domainCount": 2,
            "podCounts": {"individual": [2, 1]},
            "valuesPerLevel": [
                {"universal": "rack-1"},
                {"individual": {"roots": ["node-a", "node-b"]}},
            ],
        }
    ]
    assert valid_in(up) == ([], [])
    assert convert(up, "v1beta1") == down


def test_local_queue_flavor_usage_rename():
    obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": "q", "namespace": "team-a"},
        "spec": {"clusterQueue": "team-a"},
        "status": {
            "flavorUsage": [
                {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "total": "2"}]}
            ],
            "flavorsReservation": [
                {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "total": "3"}]}
            ],
        },
    }
    up = convert(obj, "v1beta2")
    assert up["status"]["flavorsUsage"][0]["resources"][0]["total"] == "2"
    assert "flavorUsage" not in up["status"]
    assert up["status"]["flavorsReservation"] == obj["status"]["flavorsReservation"]
    assert valid_in(up) == ([], [])
    assert convert(up, "v1beta1") == obj


def test_multikueue_cluster_source():
    obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "MultiKueueCluster",
        "metadata": {"name": "worker"},
        "spec": {"kubeConfig": {"location": "worker-secret", "locationType": "Secret"}},
    }
    up = convert(obj, "v1beta2")
    assert up["spec"] == {
        "clusterSource": {"kubeConfig": {"location": "worker-secret", "locationType": "Secret"}}
    }
    assert valid_in(up) == ([], [])
    assert convert(up, "v1beta1") == obj


def test_other_groups_only_change_api_version():
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "q"},
        "spec": {"weight": 1},
    }
    out = convert(queue, "v1alpha1")
    assert out == dict(queue, apiVersion="scheduling.volcano.sh/v1alpha1")
    assert convert(WL_V1BETA2, "v1beta2") == WL_V1BETA2
    with pytest.raises(ValueError, match="cannot convert"):
        convert(queue, "batch/v1")
