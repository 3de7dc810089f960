"""Built-in kinds: names, labels, GPU resources, Jobs, tolerations — kube-apiserver's words."""

import copy

import pytest
from kubesim.api.builtin_validation import (
    DNS1035_LABEL_MSG,
    DNS1123_LABEL_MSG,
    DNS1123_SUBDOMAIN_MSG,
    LABEL_VALUE_MSG,
    QUALIFIED_NAME_MSG,
    is_extended_resource,
    validate_builtin,
)


def pod(**spec_extra):
    spec = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "trainer",
                "image": "registry.example.com/train:1",
                "resources": {
                    "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                    "limits": {"memory": "16Gi", "nvidia.com/gpu": "1"},
                },
            }
        ],
    }
    spec.update(spec_extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0"}, "spec": spec}


def job(**spec_extra):
    template = pod()["spec"]
    spec = {"parallelism": 2, "completions": 2, "template": {"spec": template}}
    spec.update(spec_extra)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}, "spec": spec}


def resources(obj):
    return obj["spec"]["containers"][0]["resources"]


def test_valid_objects_pass():
    assert validate_builtin(pod()) == []
    assert validate_builtin(job()) == []
    mig = pod()
    resources(mig)["requests"] = {"nvidia.com/mig-1g.10gb": 2}
    resources(mig)["limits"] = {"nvidia.com/mig-1g.10gb": "2"}
    assert validate_builtin(mig) == []


@pytest.mark.parametrize(
    ("api_version", "kind", "name", "message"),
    [
        ("v1", "Namespace", "team.a", DNS1123_LABEL_MSG),
        ("v1", "Namespace", "Team-A", DNS1123_LABEL_MSG),
        ("v1", "Service", "1st", DNS1035_LABEL_MSG),
        ("v1", "ConfigMap", "Bad_Name", DNS1123_SUBDOMAIN_MSG),
        ("batch/v1", "Job", "-job", DNS1123_SUBDOMAIN_MSG),
        ("v1", "Namespace", "a" * 64, "must be no more than 63 characters"),
    ],
)
def test_names_per_kind(api_version, kind, name, message):
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}
    causes = validate_builtin(obj)
    assert {
        "reason": "FieldValueInvalid",
        "field": "metadata.name",
        "message": f'Invalid value: "{name}": {message}',
    } in causes


@pytest.mark.parametrize(
    ("api_version", "kind", "name"),
    [
        ("v1", "Namespace", "team-a"),
        ("v1", "Service", "api"),
        ("v1", "ConfigMap", "a.b-c"),
        ("v1", "Secret", "x" * 253),
    ],
)
def test_good_names(api_version, kind, name):
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}
    if kind == "Service":
        obj["spec"] = {"ports": [{"port": 80}]}  # a ClusterIP Service needs a port
    assert validate_builtin(obj) == []


def test_labels_and_annotations():
    obj = pod()
    obj["metadata"]["labels"] = {"app": "-x", "team_": "a", "example.com/ok": "yes"}
    obj["metadata"]["annotations"] = {"bad key": "v", "portal.example.com/job": "x" * 1000}
    causes = validate_builtin(obj)
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "field": "metadata.labels",
            "message": f'Invalid value: "-x": {LABEL_VALUE_MSG}',
        },
        {
            "reason": "FieldValueInvalid",
            "field": "metadata.labels",
            "message": f'Invalid value: "team_": {QUALIFIED_NAME_MSG}',
        },
        {
            "reason": "FieldValueInvalid",
            "field": "metadata.annotations",
            "message": f'Invalid value: "bad key": {QUALIFIED_NAME_MSG}',
        },
    ]
    del obj["metadata"]["labels"]
    obj["metadata"]["annotations"] = {"big": "x" * (256 * 1024)}
    assert validate_builtin(obj) == [
        {
            "reason": "FieldValueTooLong",
            "field": "metadata.annotations",
            "message": "Too long: may not be more than 262144 bytes",
        }
    ]


REQ = "spec.containers[0].resources.requests"
LIM = "spec.containers[0].resources.limits"


@pytest.mark.parametrize(
    ("requests", "limits", "expected"),
    [
        (
            {"nvidia.com/gpu": "500m"},
            {"nvidia.com/gpu": "500m"},
            [
                (f"{LIM}[nvidia.com/gpu]", 'Invalid value: "500m": must be an integer'),
                (f"{REQ}[nvidia.com/gpu]", 'Invalid value: "500m": must be an integer'),
            ],
        ),
        (
            {"nvidia.com/gpu": "1"},
            {"nvidia.com/gpu": "2"},
            [
                (REQ, 'Invalid value: "1": must be equal to nvidia.com/gpu limit of 2'),
            ],
        ),
        (
            {"nvidia.com/gpu": "1"},
            {},
            [
                (LIM, "Required value: Limit must be set for non overcommitable resources"),
            ],
        ),
        (
            {"cpu": "2"},
            {"cpu": "1"},
            [
                (REQ, 'Invalid value: "2": must be less than or equal to cpu limit of 1'),
            ],
        ),
        (
            {"memory": "-1Gi"},
            {},
            [
                (f"{REQ}[memory]", 'Invalid value: "-1Gi": must be greater than or equal to 0'),
            ],
        ),
        (
            {"gpu": "1"},
            {},
            [
                (f"{REQ}[gpu]", 'Invalid value: "gpu": must be a standard resource for containers'),
            ],
        ),
        (
            {"cpu": "lots"},
            {},
            [
                (
                    f"{REQ}[cpu]",
                    'Invalid value: "lots": quantities must match the regular expression '
                    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                ),
            ],
        ),
    ],
)
def test_container_resources(requests, limits, expected):
    obj = pod()
    resources(obj)["requests"] = requests
    resources(obj)["limits"] = limits
    causes = validate_builtin(obj)
    assert [(c["field"], c["message"]) for c in causes] == expected


def test_gpu_requests_in_a_job_template_name_the_template_path():
    obj = job()
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = 2
    [cause] = validate_builtin(obj)
    assert cause["field"] == "spec.template.spec.containers[0].resources.requests"
    assert cause["message"] == 'Invalid value: "2": must be equal to nvidia.com/gpu limit of 1'


def test_containers():
    obj = pod()
    second = copy.deepcopy(obj["spec"]["containers"][0])
    second["image"] = ""
    obj["spec"]["containers"].append(second)
    obj["spec"]["initContainers"] = [{"name": "Init", "image": "busybox"}]
    causes = validate_builtin(obj)
    assert [(c["field"], c["reason"], c["message"]) for c in causes] == [
        (
            "spec.initContainers[0].name",
            "FieldValueInvalid",
            f'Invalid value: "Init": {DNS1123_LABEL_MSG}',
        ),
        ("spec.containers[1].name", "FieldValueDuplicate", 'Duplicate value: "trainer"'),
        ("spec.containers[1].image", "FieldValueRequired", "Required value"),
    ]
    assert validate_builtin(pod(containers=[])) == [
        {"reason": "FieldValueRequired", "field": "spec.containers", "message": "Required value"}
    ]


def test_job_spec():
    causes = validate_builtin(job(parallelism=-1, completionMode="Sometimes"))
    assert [(c["field"], c["message"]) for c in causes] == [
        ("spec.parallelism", "Invalid value: -1: must be greater than or equal to 0"),
        (
            "spec.completionMode",
            'Unsupported value: "Sometimes": supported values: "NonIndexed", "Indexed"',
        ),
    ]
    always = job()
    always["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    assert validate_builtin(always) == [
        {
            "reason": "FieldValueNotSupported",
            "field": "spec.template.spec.restartPolicy",
            "message": 'Unsupported value: "Always": supported values: "OnFailure", "Never"',
        }
    ]
    indexed = job(completionMode="Indexed")
    del indexed["spec"]["completions"]
    assert validate_builtin(indexed) == [
        {
            "reason": "FieldValueRequired",
            "field": "spec.completions",
            "message": "Required value: when completion mode is Indexed",
        }
    ]


@pytest.mark.parametrize(
    ("toleration", "field", "message"),
    [
        (
            {"operator": "Equal", "value": "x"},
            "spec.tolerations[0].operator",
            'Invalid value: "Equal": operator must be Exists when `key` is empty, which means '
            '"match all values and all keys"',
        ),
        (
            {"key": "nvidia.com/gpu", "operator": "Exists", "value": "x"},
            "spec.tolerations[0].operator",
            "Invalid value: \"x\": value must be empty when `operator` is 'Exists'",
        ),
        (
            {"key": "a", "operator": "In"},
            "spec.tolerations[0].operator",
            'Unsupported value: "In": supported values: "Equal", "Exists"',
        ),
        (
            {"key": "a", "operator": "Exists", "effect": "NoRun"},
            "spec.tolerations[0].effect",
            'Unsupported value: "NoRun": supported values: "NoSchedule", "PreferNoSchedule", '
            '"NoExecute"',
        ),
        (
            {"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5},
            "spec.tolerations[0].effect",
            "Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is "
            "set",
        ),
    ],
)
def test_tolerations(toleration, field, message):
    causes = validate_builtin(pod(tolerations=[toleration]))
    assert [(c["field"], c["message"]) for c in causes] == [(field, message)]


def test_gpu_toleration_is_valid():
    ok = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert validate_builtin(pod(tolerations=[ok])) == []


def test_resource_quota():
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu", "namespace": "team-a"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "8", "limits.cpu": "-2"}},
    }
    assert validate_builtin(quota) == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.hard[limits.cpu]",
            "message": 'Invalid value: "-2": must be greater than or equal to 0',
        }
    ]


def test_extended_resource_names():
    assert is_extended_resource("nvidia.com/gpu")
    assert is_extended_resource("nvidia.com/mig-3g.40gb")
    assert not is_extended_resource("cpu")
    assert not is_extended_resource("kubernetes.io/something")
    assert not is_extended_resource("requests.nvidia.com/gpu")


def test_kueue_quota_checks_of_the_webhook():
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {
            "cohortName": "c",
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [
                                {
                                    "name": "nvidia.com/gpu",
                                    "nominalQuota": 8,
                                    "lendingLimit": 9,
                                    "borrowingLimit": "-1",
                                }
                            ],
                        }
                    ],
                }
            ],
        },
    }
    base = "spec.resourceGroups[0].flavors[0].resources[0]"
    assert [(c["field"], c["message"]) for c in validate_builtin(cq)] == [
        (f"{base}.borrowingLimit", 'Invalid value: "-1": must be greater than or equal to 0'),
        (
            f"{base}.lendingLimit",
            'Invalid value: "9": must be less than or equal to the nominalQuota',
        ),
    ]
