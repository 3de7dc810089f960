"""Kueue's CEL rules beyond ClusterQueue, evaluated on create and on update."""

import copy

import pytest

from .conftest import compiled

API = "kueue.x-k8s.io/v1beta2"


def messages(causes):
    return [(c["field"], c["message"]) for c in causes]


def topology(*labels):
    return {
        "apiVersion": API,
        "kind": "Topology",
        "metadata": {"name": "default"},
        "spec": {"levels": [{"nodeLabel": label} for label in labels]},
    }


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (["rack", "kubernetes.io/hostname"], []),
        (
            ["kubernetes.io/hostname", "rack"],
            [
                (
                    "spec.levels",
                    'Invalid value: "array": the kubernetes.io/hostname label can only '
                    "be used at the lowest level of topology",
                )
            ],
        ),
        (["rack", "rack"], [("spec.levels", 'Invalid value: "array": must be unique')]),
    ],
)
def test_topology_levels(labels, expected):
    assert messages(compiled(API, "Topology").validate(topology(*labels))) == expected


def test_topology_levels_are_immutable():
    schema = compiled(API, "Topology")
    old = topology("rack", "kubernetes.io/hostname")
    new = topology("block", "kubernetes.io/hostname")
    assert messages(schema.validate(new, old)) == [
        ("spec.levels", 'Invalid value: "array": field is immutable')
    ]


def flavor(**spec):
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": "a100"}, "spec": spec}


def test_resource_flavor_rules():
    schema = compiled(API, "ResourceFlavor")
    old = flavor(topologyName="default", nodeLabels={"pool": "a100"})
    assert schema.validate(old) == []
    relabeled = flavor(topologyName="default", nodeLabels={"pool": "h100"})
    assert messages(schema.validate(relabeled, old)) == [
        ("spec", 'Invalid value: "object": nodeLabels are immutable when topologyName is set')
    ]
    tolerations = flavor(
        tolerations=[
            {"operator": "Equal", "value": "x"},
            {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 3},
        ]
    )
    assert messages(schema.validate(tolerations)) == [
        (
            "spec.tolerations",
            "Invalid value: \"array\": operator must be Exists when 'key' is empty, which "
            "means 'match all values and all keys'",
        ),
        (
            "spec.tolerations",
            "Invalid value: \"array\": effect must be 'NoExecute' when 'tolerationSeconds' is set",
        ),
    ]


def test_admission_check_controller_name_is_immutable():
    schema = compiled(API, "AdmissionCheck")
    old = {
        "apiVersion": API,
        "kind": "AdmissionCheck",
        "metadata": {"name": "prov"},
        "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"},
    }
    new = copy.deepcopy(old)
    new["spec"]["controllerName"] = "example.com/other"
    assert schema.validate(new) == []
    assert messages(schema.validate(new, old)) == [
        ("spec.controllerName", 'Invalid value: "string": field is immutable')
    ]


def test_v1beta1_workload_rules():
    schema = compiled("kueue.x-k8s.io/v1beta1", "Workload")
    old = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "team-a"},
        "spec": {
            "queueName": "q",
            "priority": 1,
            "priorityClassName": "high",
            "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
                }
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "r",
                    "message": "",
                    "lastTransitionTime": "2026-11-30T00:00:00Z",
                }
            ],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [{"name": "main", "count": 1}],
            },
        },
    }
    assert schema.validate(old) == []
    new = copy.deepcopy(old)
    new["spec"]["queueName"] = "other"
    assert messages(schema.validate(new, old)) == [
        ("<nil>", 'Invalid value: "object": queueName is immutable while workload quota reserved')
    ]
    mismatch = copy.deepcopy(old)
    mismatch["status"]["admission"]["podSetAssignments"] = []
    assert messages(schema.validate(mismatch)) == [
        (
            "<nil>",
            'Invalid value: "object": podSetAssignments must have the same number of '
            "podSets as the spec",
        )
    ]


def test_multikueue_rules():
    cluster = {
        "apiVersion": API,
        "kind": "MultiKueueCluster",
        "metadata": {"name": "w1"},
        "spec": {"clusterSource": {}},
    }
    assert messages(compiled(API, "MultiKueueCluster").validate(cluster)) == [
        (
            "spec.clusterSource",
            'Invalid value: "object": exactly one of the fields in '
            "[kubeConfig clusterProfileRef] must be set",
        )
    ]
    config = {
        "apiVersion": API,
        "kind": "MultiKueueConfig",
        "metadata": {"name": "c"},
        "spec": {"clusters": ["w1", "w1"]},
    }
    assert messages(compiled(API, "MultiKueueConfig").validate(config)) == [
        ("spec.clusters", 'Invalid value: "array": must be unique')
    ]
