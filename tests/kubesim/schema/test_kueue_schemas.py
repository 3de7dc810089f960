"""The real Kueue/Volcano/KAI CRD schemas: shipped examples pass, Kueue's rules bite."""

import copy

import pytest
import yaml
from kubesim.api.builtin_validation import validate_builtin
from kubesim.testing import vendored_crds_dir

from .conftest import compiled, load_crds

NOMINAL = "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"


def cluster_queue(**spec):
    base = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "a100",
                        "resources": [
                            {"name": "cpu", "nominalQuota": 96},
                            {"name": "memory", "nominalQuota": "1Ti"},
                            {"name": "nvidia.com/gpu", "nominalQuota": 8},
                        ],
                    }
                ],
            }
        ],
    }
    base.update(spec)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "team-a"},
        "spec": base,
    }


def admit(obj, old=None):
    schema = compiled(obj["apiVersion"], obj["kind"])
    obj = copy.deepcopy(obj)
    schema.apply_defaults(obj)
    schema.prune(obj)
    return obj, schema.validate(obj, old) + validate_builtin(obj)


def example_objects():
    for path in sorted(vendored_crds_dir().glob("*/examples/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind"):
                yield pytest.param(
                    doc, id=f"{path.parent.parent.name}-{doc['kind']}-{doc['metadata'].get('name')}"
                )


BUILTIN_GROUPS = {"v1", "batch/v1", "apps/v1"}


@pytest.mark.parametrize("doc", list(example_objects()))
def test_shipped_examples_are_valid(doc):
    """CRs against their CRD schema, built-in kinds against the built-in validation."""
    if doc["apiVersion"] in BUILTIN_GROUPS:
        assert validate_builtin(doc) == []
        return
    group = doc["apiVersion"].split("/")[0]
    if (group, doc["kind"]) not in load_crds():
        pytest.skip(f"{doc['apiVersion']} {doc['kind']} is not a CRD of the vendored sets")
    _, causes = admit(doc)
    assert causes == []


def test_valid_cluster_queue_gets_kueue_defaults():
    out, causes = admit(cluster_queue())
    assert causes == []
    assert out["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert out["spec"]["preemption"] == {
        "borrowWithinCohort": {"policy": "Never"},
        "reclaimWithinCohort": "Never",
        "withinClusterQueue": "Never",
    }
    assert out["spec"]["stopPolicy"] == "None"


def test_non_quantity_nominal_quota_names_the_field():
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    _, causes = admit(obj)
    assert len(causes) == 1
    assert causes[0]["reason"] == "FieldValueInvalid"
    assert causes[0]["field"] == NOMINAL
    assert causes[0]["message"].startswith(f'Invalid value: "lots": {NOMINAL} in body should match')


def test_negative_nominal_quota_names_the_field():
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "-1"
    _, causes = admit(obj)
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "field": NOMINAL,
            "message": 'Invalid value: "-1": must be greater than or equal to 0',
        }
    ]


def test_flavor_must_list_every_covered_resource():
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()
    _, causes = admit(obj)
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.resourceGroups[0]",
            "message": 'Invalid value: "object": flavors must have the same number of resources '
            "as the coveredResources",
        }
    ]


def test_borrowing_limit_needs_a_cohort():
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["borrowingLimit"] = 4
    _, causes = admit(obj)
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec",
            "message": 'Invalid value: "object": borrowingLimit must be nil when cohort is empty',
        }
    ]
    obj["spec"]["cohortName"] = "research"
    assert admit(obj)[1] == []


def test_enum_and_duplicate_resources():
    obj = cluster_queue(queueingStrategy="Random")
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["name"] = "cpu"
    _, causes = admit(obj)
    assert causes[0] == {
        "reason": "FieldValueNotSupported",
        "field": "spec.queueingStrategy",
        "message": 'Unsupported value: "Random": supported values: "StrictFIFO", "BestEffortFIFO"',
    }
    assert {
        "reason": "FieldValueDuplicate",
        "field": "spec.resourceGroups[0].flavors[0].resources[1]",
        "message": 'Duplicate value: {"name":"cpu"}',
    } in causes


def workload():
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-train-1a2b3", "namespace": "team-a"},
        "spec": {
            "queueName": "team-a",
            "priorityClassRef": {
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": "high",
            },
            "priority": 100,
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "trainer",
                                    "image": "registry.example.com/train:1",
                                    "resources": {
                                        "requests": {"cpu": "8", "nvidia.com/gpu": "1"},
                                        "limits": {"nvidia.com/gpu": "1"},
                                    },
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def test_workload_priority_rules():
    _out, causes = admit(workload())
    assert causes == []
    bad = workload()
    del bad["spec"]["priority"]
    bad["spec"]["priorityClassRef"]["kind"] = "PriorityClass"
    _, causes = admit(bad)
    messages = {c["message"] for c in causes}
    assert (
        'Invalid value: "object": priority should not be nil when priorityClassRef is set'
        in messages
    )
    assert (
        'Invalid value: "object": only the WorkloadPriorityClass kind is allowed for the '
        "kueue.x-k8s.io group" in messages
    )


def test_workload_transition_rules_use_the_stored_object():
    stored, causes = admit(workload())
    assert causes == []
    stored["status"] = {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "",
                "lastTransitionTime": "2026-11-30T03:00:00Z",
            }
        ]
    }
    update = copy.deepcopy(stored)
    del update["spec"]["priorityClassRef"]
    schema = compiled("kueue.x-k8s.io/v1beta2", "Workload")
    assert schema.validate(update) == []  # no old object: transition rules do not run
    assert schema.validate(update, stored) == [
        {
            "reason": "FieldValueInvalid",
            "field": "<nil>",
            "message": 'Invalid value: "object": priorityClassRef is immutable while workload '
            "quota reserved",
        }
    ]


def test_workload_pod_set_count_is_bounded():
    obj = workload()
    obj["spec"]["podSets"] = [dict(obj["spec"]["podSets"][0], name=f"p{i}") for i in range(19)]
    _, causes = admit(obj)
    assert causes[0] == {
        "reason": "FieldValueTooMany",
        "field": "spec.podSets",
        "message": "Too many: 19: must have at most 18 items",
    }
