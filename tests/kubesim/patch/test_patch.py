"""Patch verbs: RFC 7386 merge patch, RFC 6902 JSON patch, strategic merge patch."""

from __future__ import annotations

import copy

import pytest
from kubesim.api.patch import (
    PatchError,
    json_merge_patch,
    json_patch,
    strategic_merge_patch,
    strategic_supported,
)


def pod(**spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}},
        "spec": spec,
    }


def deployment(pod_spec: dict) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"replicas": 1, "template": {"metadata": {}, "spec": pod_spec}},
    }


# --------------------------------------------------------------------------- merge patch


@pytest.mark.parametrize(
    ("original", "patch", "expected"),
    [
        # RFC 7386 appendix A, the cases that make sense for an object document
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
        # lists are replaced whole, never merged
        ({"l": [1, 2, 3]}, {"l": [4]}, {"l": [4]}),
        (
            {"metadata": {"labels": {"a": "1", "b": "2"}}},
            {"metadata": {"labels": {"a": None}}},
            {"metadata": {"labels": {"b": "2"}}},
        ),
    ],
)
def test_json_merge_patch_follows_rfc_7386(original, patch, expected):
    before = copy.deepcopy(original)
    assert json_merge_patch(original, patch) == expected
    assert original == before  # the input is not modified


def test_json_merge_patch_rejects_a_non_object_patch_with_400():
    with pytest.raises(PatchError) as err:
        json_merge_patch({"a": 1}, ["not", "an", "object"])
    assert err.value.code == 400


# --------------------------------------------------------------------------- JSON patch


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        (
            [{"op": "replace", "path": "/spec/replicas", "value": 3}],
            {"spec": {"replicas": 3, "l": [1]}},
        ),
        ([{"op": "add", "path": "/spec/l/-", "value": 2}], {"spec": {"replicas": 1, "l": [1, 2]}}),
        ([{"op": "add", "path": "/spec/l/0", "value": 0}], {"spec": {"replicas": 1, "l": [0, 1]}}),
        ([{"op": "remove", "path": "/spec/l/0"}], {"spec": {"replicas": 1, "l": []}}),
        (
            [
                {"op": "test", "path": "/spec/replicas", "value": 1},
                {"op": "copy", "from": "/spec/replicas", "path": "/spec/min"},
            ],
            {"spec": {"replicas": 1, "l": [1], "min": 1}},
        ),
        (
            [{"op": "move", "from": "/spec/replicas", "path": "/spec/max"}],
            {"spec": {"l": [1], "max": 1}},
        ),
        # "~1" escapes "/" in label keys
        (
            [
                {"op": "add", "path": "/metadata", "value": {"labels": {}}},
                {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "q"},
            ],
            {
                "spec": {"replicas": 1, "l": [1]},
                "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}},
            },
        ),
    ],
)
def test_json_patch_applies_operations_in_order(ops, expected):
    original = {"spec": {"replicas": 1, "l": [1]}}
    assert json_patch(original, ops) == expected
    assert original == {"spec": {"replicas": 1, "l": [1]}}


@pytest.mark.parametrize(
    ("ops", "code", "message"),
    [
        (
            [{"op": "test", "path": "/spec/replicas", "value": 2}],
            422,
            "testing value /spec/replicas failed: test failed",
        ),
        (
            [{"op": "remove", "path": "/spec/missing"}],
            422,
            'remove operation does not apply: doc is missing path: "/spec/missing"',
        ),
        (
            [{"op": "replace", "path": "/spec/missing/x", "value": 1}],
            422,
            'replace operation does not apply: doc is missing path: "/spec/missing/x"',
        ),
        ([{"op": "frobnicate", "path": "/spec"}], 400, "Unexpected kind: frobnicate"),
        ([{"op": "add", "path": "/spec/x"}], 400, "add operation is missing the value"),
        ({"op": "add"}, 400, "cannot unmarshal object"),
    ],
)
def test_json_patch_errors_carry_the_status_code_kube_apiserver_uses(ops, code, message):
    with pytest.raises(PatchError) as err:
        json_patch({"spec": {"replicas": 1}}, ops)
    assert err.value.code == code
    assert message in str(err.value)


def test_failed_json_patch_changes_nothing():
    original = {"spec": {"replicas": 1}}
    with pytest.raises(PatchError):
        json_patch(
            original,
            [
                {"op": "replace", "path": "/spec/replicas", "value": 5},
                {"op": "test", "path": "/spec/replicas", "value": 1},
            ],
        )
    assert original == {"spec": {"replicas": 1}}


# --------------------------------------------------------------------------- strategic merge


def test_containers_merge_by_name_and_env_by_name():
    original = pod(
        containers=[
            {
                "name": "main",
                "image": "train:1",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            },
            {"name": "sidecar", "image": "log:1"},
        ]
    )
    patched = strategic_merge_patch(
        original,
        {
            "spec": {
                "containers": [
                    {"name": "main", "image": "train:2", "env": [{"name": "B", "value": "20"}]}
                ]
            }
        },
    )
    containers = patched["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main", "sidecar"]
    assert containers[0]["image"] == "train:2"
    assert containers[0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "20"}]
    assert containers[1] == {"name": "sidecar", "image": "log:1"}


def test_new_list_items_go_before_server_only_items_as_strategicpatch_orders_them():
    original = pod(containers=[{"name": "a", "image": "x"}, {"name": "b", "image": "x"}])
    patched = strategic_merge_patch(
        original, {"spec": {"containers": [{"name": "c", "image": "y"}]}}
    )
    assert [c["name"] for c in patched["spec"]["containers"]] == ["c", "a", "b"]


def test_pod_template_inside_a_deployment_is_merged_with_the_same_keys():
    original = deployment(
        {
            "containers": [
                {
                    "name": "main",
                    "image": "i:1",
                    "ports": [{"containerPort": 80}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        }
    )
    patched = strategic_merge_patch(
        original,
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "ports": [{"containerPort": 9090, "name": "metrics"}],
                                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                            }
                        ],
                        "volumes": [{"name": "cache", "emptyDir": {"medium": "Memory"}}],
                    }
                }
            }
        },
    )
    spec = patched["spec"]["template"]["spec"]
    main = spec["containers"][0]
    assert main["image"] == "i:1"
    assert {p["containerPort"] for p in main["ports"]} == {80, 9090}
    assert {m["mountPath"] for m in main["volumeMounts"]} == {"/data", "/cache"}
    assert {v["name"] for v in spec["volumes"]} == {"data", "cache"}
    assert patched["spec"]["replicas"] == 1


def test_tolerations_have_no_merge_key_and_are_replaced_whole():
    original = pod(
        containers=[{"name": "c"}],
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    patched = strategic_merge_patch(
        original,
        {
            "spec": {
                "tolerations": [
                    {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
                ]
            }
        },
    )
    assert patched["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    ]


def test_node_taints_are_replaced_whole():
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n"},
        "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
    }
    patched = strategic_merge_patch(
        node, {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}
    )
    assert patched["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]


def test_env_from_and_args_are_replaced_whole():
    original = pod(
        containers=[
            {"name": "c", "args": ["a", "b"], "envFrom": [{"configMapRef": {"name": "one"}}]}
        ]
    )
    patched = strategic_merge_patch(
        original,
        {
            "spec": {
                "containers": [
                    {"name": "c", "args": ["z"], "envFrom": [{"secretRef": {"name": "two"}}]}
                ]
            }
        },
    )
    container = patched["spec"]["containers"][0]
    assert container["args"] == ["z"]
    assert container["envFrom"] == [{"secretRef": {"name": "two"}}]


def test_patch_delete_directive_removes_one_list_item():
    original = pod(
        containers=[
            {"name": "main", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
        ]
    )
    patched = strategic_merge_patch(
        original,
        {"spec": {"containers": [{"name": "main", "env": [{"name": "A", "$patch": "delete"}]}]}},
    )
    assert patched["spec"]["containers"][0]["env"] == [{"name": "B", "value": "2"}]


def test_patch_replace_directive_in_a_list_replaces_it():
    original = pod(containers=[{"name": "a"}, {"name": "b"}])
    patched = strategic_merge_patch(
        original, {"spec": {"containers": [{"$patch": "replace"}, {"name": "c", "image": "i"}]}}
    )
    assert patched["spec"]["containers"] == [{"name": "c", "image": "i"}]


def test_patch_replace_directive_in_a_map_replaces_the_map():
    original = pod(containers=[{"name": "c"}], nodeSelector={"a": "1", "b": "2"})
    patched = strategic_merge_patch(
        original, {"spec": {"nodeSelector": {"$patch": "replace", "gpu": "h100"}}}
    )
    assert patched["spec"]["nodeSelector"] == {"gpu": "h100"}


def test_patch_delete_directive_in_a_map_empties_it():
    original = pod(containers=[{"name": "c"}], nodeSelector={"a": "1"})
    patched = strategic_merge_patch(original, {"spec": {"nodeSelector": {"$patch": "delete"}}})
    assert patched["spec"]["nodeSelector"] == {}


def test_explicit_merge_directive_in_a_map_is_the_default_merge():
    original = pod(containers=[{"name": "c"}], nodeSelector={"a": "1"})
    patched = strategic_merge_patch(
        original, {"spec": {"nodeSelector": {"$patch": "merge", "b": "2"}}}
    )
    assert patched["spec"]["nodeSelector"] == {"a": "1", "b": "2"}


def test_finalizers_merge_as_a_set_and_delete_from_primitive_list_removes():
    original = pod(containers=[{"name": "c"}])
    original["metadata"]["finalizers"] = ["a.io/x", "b.io/y"]
    patched = strategic_merge_patch(
        original,
        {
            "metadata": {
                "finalizers": ["b.io/y", "c.io/z"],
                "$deleteFromPrimitiveList/finalizers": ["a.io/x"],
            }
        },
    )
    assert sorted(patched["metadata"]["finalizers"]) == ["b.io/y", "c.io/z"]


def test_owner_references_merge_by_uid():
    original = pod(containers=[{"name": "c"}])
    original["metadata"]["ownerReferences"] = [{"uid": "1", "name": "job-a", "kind": "Job"}]
    patched = strategic_merge_patch(
        original,
        {
            "metadata": {
                "ownerReferences": [
                    {"uid": "2", "name": "wl", "kind": "Workload"},
                    {"uid": "1", "controller": True},
                ]
            }
        },
    )
    refs = {r["uid"]: r for r in patched["metadata"]["ownerReferences"]}
    assert refs["1"] == {"uid": "1", "name": "job-a", "kind": "Job", "controller": True}
    assert refs["2"]["name"] == "wl"


def test_status_conditions_merge_by_type():
    original = pod(containers=[{"name": "c"}])
    original["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False"},
            {"type": "Ready", "status": "False"},
        ],
    }
    patched = strategic_merge_patch(
        original, {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    )
    assert patched["status"]["conditions"] == [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "False"},
    ]


def test_job_status_conditions_merge_by_type():
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "status": {"conditions": [{"type": "Suspended", "status": "True"}]},
    }
    patched = strategic_merge_patch(
        job, {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    )
    assert {c["type"] for c in patched["status"]["conditions"]} == {"Suspended", "Complete"}


def test_set_element_order_orders_the_merged_list():
    original = pod(containers=[{"name": "a"}, {"name": "b"}, {"name": "c"}])
    patched = strategic_merge_patch(
        original,
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "b"}, {"name": "a"}],
                "containers": [{"name": "b", "image": "new"}],
            }
        },
    )
    assert [c["name"] for c in patched["spec"]["containers"]] == ["c", "b", "a"]
    assert patched["spec"]["containers"][1] == {"name": "b", "image": "new"}


def test_retain_keys_clears_fields_not_listed():
    original = deployment({"containers": [{"name": "c"}]})
    original["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}
    patched = strategic_merge_patch(
        original, {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}
    )
    assert patched["spec"]["strategy"] == {"type": "Recreate"}


def test_null_deletes_a_field_and_resources_maps_merge():
    original = pod(
        containers=[
            {
                "name": "c",
                "resources": {
                    "limits": {"nvidia.com/gpu": "1", "cpu": "2"},
                    "requests": {"cpu": "1"},
                },
            }
        ]
    )
    patched = strategic_merge_patch(
        original,
        {
            "metadata": {"labels": {"app": None, "team": "ml"}},
            "spec": {
                "containers": [
                    {"name": "c", "resources": {"limits": {"memory": "8Gi", "cpu": None}}}
                ]
            },
        },
    )
    assert patched["metadata"]["labels"] == {"team": "ml"}
    assert patched["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "1", "memory": "8Gi"},
        "requests": {"cpu": "1"},
    }


def test_directives_are_not_stored_when_the_list_is_new():
    original = pod(containers=[{"name": "c"}])
    patched = strategic_merge_patch(
        original,
        {"spec": {"imagePullSecrets": [{"name": "gone", "$patch": "delete"}, {"name": "reg"}]}},
    )
    assert patched["spec"]["imagePullSecrets"] == [{"name": "reg"}]


def test_item_without_its_merge_key_is_rejected():
    with pytest.raises(PatchError) as err:
        strategic_merge_patch(
            pod(containers=[{"name": "c"}]), {"spec": {"containers": [{"image": "x"}]}}
        )
    assert "does not contain declared merge key: name" in str(err.value)


def test_unknown_directive_is_rejected_with_400():
    with pytest.raises(PatchError) as err:
        strategic_merge_patch(pod(containers=[]), {"spec": {"$patch": "frobnicate"}})
    assert err.value.code == 400


@pytest.mark.parametrize(
    ("api_version", "kind", "supported"),
    [
        ("v1", "Pod", True),
        ("apps/v1", "Deployment", True),
        ("batch/v1", "Job", True),
        ("scheduling.k8s.io/v1", "PriorityClass", True),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition", True),
        ("kueue.x-k8s.io/v1beta2", "ClusterQueue", False),
        ("batch.volcano.sh/v1alpha1", "Job", False),
        ("scheduling.run.ai/v2", "Queue", False),
    ],
)
def test_strategic_merge_patch_is_for_built_in_kinds_only(api_version, kind, supported):
    assert strategic_supported(api_version, kind) is supported
