"""Server-side apply and managedFields, checked against what kube-apiserver shows its clients."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from kubesim.api.apply import (
    ApplyConflict,
    builtin_list_map_keys,
    field_path_string,
    fields_v1_to_paths,
    paths_to_fields_v1,
    schema_list_map_keys,
    semantically_equal,
    server_side_apply,
    update_managed_fields,
)
from kubesim.api.patch import PatchError
from kubesim.testing import vendored_crds_dir

T1, T2, T3, T4 = (f"2026-11-30T04:0{i}:00Z" for i in range(1, 5))


def deployment(*, replicas: int = 2, image: str = "train:1", env=None, labels=None) -> dict:
    container = {"name": "main", "image": image}
    if env is not None:
        container["env"] = env
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a", "labels": labels or {"app": "web"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [container]},
            },
        },
    }


def stored(obj: dict, rv: str = "1") -> dict:
    """What the store keeps after a write: server-set identity fields added."""
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("uid", "0b1c-uid")
    obj["metadata"].setdefault("creationTimestamp", T1)
    obj["metadata"]["resourceVersion"] = rv
    return obj


def entry(obj: dict, manager: str, operation: str | None = None) -> dict:
    found = [
        e
        for e in obj["metadata"].get("managedFields", [])
        if e["manager"] == manager and (operation is None or e["operation"] == operation)
    ]
    assert len(found) == 1, obj["metadata"].get("managedFields")
    return found[0]


def managers(obj: dict) -> list[tuple[str, str]]:
    return [(e["manager"], e["operation"]) for e in obj["metadata"].get("managedFields", [])]


def update_by(live: dict, manager: str, change, *, now: str = T2) -> dict:
    """A non-apply write (PUT/PATCH) by `manager`."""
    new = copy.deepcopy(live)
    change(new)
    new["metadata"]["managedFields"] = update_managed_fields(live, new, manager=manager, now=now)
    return stored(new, str(int(live["metadata"]["resourceVersion"]) + 1))


# --------------------------------------------------------------------------- create and no-op


def test_create_by_apply_records_exactly_the_applied_fields_in_fieldsv1_format():
    obj = server_side_apply(
        None, deployment(env=[{"name": "A", "value": "1"}]), manager="portal", force=False, now=T1
    )
    assert obj["spec"]["replicas"] == 2
    assert obj["metadata"]["name"] == "web"
    assert obj["metadata"]["managedFields"] == [
        {
            "manager": "portal",
            "operation": "Apply",
            "apiVersion": "apps/v1",
            "time": T1,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:replicas": {},
                    "f:selector": {},  # LabelSelector is an atomic struct
                    "f:template": {
                        "f:metadata": {"f:labels": {"f:app": {}}},
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"main"}': {
                                    ".": {},
                                    "f:env": {
                                        'k:{"name":"A"}': {".": {}, "f:name": {}, "f:value": {}}
                                    },
                                    "f:image": {},
                                    "f:name": {},
                                }
                            }
                        },
                    },
                },
            },
        }
    ]


def test_applying_the_same_configuration_twice_changes_nothing():
    first = stored(server_side_apply(None, deployment(), manager="portal", force=False, now=T1))
    second = server_side_apply(first, deployment(), manager="portal", force=False, now=T2)
    assert second == first  # same object: managedFields time kept, nothing to write
    assert semantically_equal(first, second)


def test_semantically_equal_ignores_resource_version_and_managed_fields_time_only():
    a = stored(server_side_apply(None, deployment(), manager="portal", force=False, now=T1), "5")
    b = copy.deepcopy(a)
    b["metadata"]["resourceVersion"] = "9"
    b["metadata"]["managedFields"][0]["time"] = T3
    assert semantically_equal(a, b)
    b["spec"]["replicas"] = 3
    assert not semantically_equal(a, b)


def test_reapply_with_a_change_bumps_the_time_and_keeps_server_fields():
    live = stored(server_side_apply(None, deployment(), manager="portal", force=False, now=T1))
    new = server_side_apply(
        live, deployment(image="train:2"), manager="portal", force=False, now=T2
    )
    assert new["spec"]["template"]["spec"]["containers"][0]["image"] == "train:2"
    assert new["metadata"]["uid"] == live["metadata"]["uid"]
    assert entry(new, "portal")["time"] == T2
    assert not semantically_equal(live, new)


# --------------------------------------------------------------------------- conflicts


def test_conflict_with_an_update_manager_names_it_and_the_field():
    live = stored(server_side_apply(None, deployment(), manager="kubectl", force=False, now=T1))
    scaled = update_by(live, "kubectl-client-side-apply", lambda o: o["spec"].update(replicas=5))
    with pytest.raises(ApplyConflict) as err:
        server_side_apply(scaled, deployment(replicas=3), manager="kubectl", force=False, now=T3)
    exc = err.value
    assert exc.message() == (
        'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: '
        ".spec.replicas"
    )
    assert exc.conflicts == [("kubectl-client-side-apply", ".spec.replicas")]
    assert exc.causes() == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "kubectl-client-side-apply" using apps/v1',
            "field": ".spec.replicas",
        }
    ]


def test_setting_the_value_the_other_manager_set_is_not_a_conflict_and_shares_the_field():
    live = stored(server_side_apply(None, deployment(), manager="kubectl", force=False, now=T1))
    scaled = update_by(live, "hpa", lambda o: o["spec"].update(replicas=5))
    new = server_side_apply(scaled, deployment(replicas=5), manager="kubectl", force=False, now=T3)
    assert ("f:spec", "f:replicas") in fields_v1_to_paths(entry(new, "hpa")["fieldsV1"])
    assert ("f:spec", "f:replicas") in fields_v1_to_paths(entry(new, "kubectl")["fieldsV1"])


def test_several_conflicts_are_listed_per_manager():
    live = stored(server_side_apply(None, deployment(), manager="portal", force=False, now=T1))

    def edit(o):
        o["spec"]["replicas"] = 7
        o["spec"]["template"]["spec"]["containers"][0]["image"] = "hotfix:1"

    edited = update_by(live, "kubectl-edit", edit)
    with pytest.raises(ApplyConflict) as err:
        server_side_apply(
            edited, deployment(replicas=2, image="train:9"), manager="portal", force=False, now=T3
        )
    assert err.value.message() == (
        'Apply failed with 2 conflicts: conflicts with "kubectl-edit" using apps/v1:\n'
        "- .spec.replicas\n"
        '- .spec.template.spec.containers[name="main"].image'
    )


def test_conflicts_with_two_managers_are_grouped_by_sorted_manager():
    live = stored(server_side_apply(None, deployment(), manager="portal", force=False, now=T1))
    one = update_by(live, "zeta", lambda o: o["spec"].update(replicas=7))
    two = update_by(one, "alpha", lambda o: o["metadata"]["labels"].update(app="other"), now=T3)
    with pytest.raises(ApplyConflict) as err:
        server_side_apply(two, deployment(replicas=2), manager="portal", force=False, now=T4)
    assert err.value.message() == (
        "Apply failed with 2 conflicts: "
        'conflicts with "alpha" using apps/v1:\n- .metadata.labels.app\n'
        'conflicts with "zeta" using apps/v1:\n- .spec.replicas'
    )


def test_conflict_with_another_applier_has_no_api_version():
    live = stored(server_side_apply(None, deployment(), manager="portal", force=False, now=T1))
    with pytest.raises(ApplyConflict) as err:
        server_side_apply(live, deployment(replicas=9), manager="ops", force=False, now=T2)
    assert err.value.message() == (
        'Apply failed with 1 conflict: conflict with "portal": .spec.replicas'
    )


def test_force_takes_ownership_from_the_other_manager():
    live = stored(server_side_apply(None, deployment(), manager="kubectl", force=False, now=T1))

    def edit(o):
        o["spec"]["replicas"] = 5
        o["metadata"]["labels"]["tier"] = "gold"

    scaled = update_by(live, "hpa", edit)
    forced = server_side_apply(
        scaled, deployment(replicas=3), manager="kubectl", force=True, now=T3
    )
    assert forced["spec"]["replicas"] == 3
    hpa_fields = fields_v1_to_paths(entry(forced, "hpa")["fieldsV1"])
    assert ("f:spec", "f:replicas") not in hpa_fields
    assert ("f:metadata", "f:labels", "f:tier") in hpa_fields  # untouched fields stay its own
    assert ("f:spec", "f:replicas") in fields_v1_to_paths(entry(forced, "kubectl")["fieldsV1"])


def test_force_removes_an_entry_left_with_no_fields():
    live = stored(server_side_apply(None, deployment(), manager="kubectl", force=False, now=T1))
    scaled = update_by(live, "hpa", lambda o: o["spec"].update(replicas=5))
    forced = server_side_apply(
        scaled, deployment(replicas=3), manager="kubectl", force=True, now=T3
    )
    assert managers(forced) == [("kubectl", "Apply")]


def test_object_never_tracked_belongs_to_before_first_apply():
    live = stored(deployment())  # created before field tracking: no managedFields
    with pytest.raises(ApplyConflict) as err:
        server_side_apply(live, deployment(replicas=4), manager="portal", force=False, now=T2)
    assert err.value.conflicts == [("before-first-apply", ".spec.replicas")]


# --------------------------------------------------------------------------- removal and sharing


def test_fields_the_manager_stops_applying_are_removed():
    config = deployment(
        env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        labels={"app": "web", "tier": "gold"},
    )
    live = stored(server_side_apply(None, config, manager="portal", force=False, now=T1))
    smaller = deployment(env=[{"name": "A", "value": "1"}], labels={"app": "web"})
    new = server_side_apply(live, smaller, manager="portal", force=False, now=T2)
    assert new["metadata"]["labels"] == {"app": "web"}
    assert new["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    assert fields_v1_to_paths(entry(new, "portal")["fieldsV1"]) == fields_v1_to_paths(
        entry(server_side_apply(None, smaller, manager="portal", force=False, now=T1), "portal")[
            "fieldsV1"
        ]
    )


def test_removing_the_last_label_drops_the_emptied_map():
    config = deployment()
    config["metadata"]["annotations"] = {"note": "x"}
    live = stored(server_side_apply(None, config, manager="portal", force=False, now=T1))
    new = server_side_apply(live, deployment(), manager="portal", force=False, now=T2)
    assert "annotations" not in new["metadata"]


def test_a_field_shared_by_two_appliers_stays_until_both_drop_it():
    base = deployment(labels={"app": "web", "team": "ml"})
    live = stored(server_side_apply(None, base, manager="portal", force=False, now=T1))
    both = stored(server_side_apply(live, base, manager="gitops", force=False, now=T2), "2")
    assert {m for m, _ in managers(both)} == {"portal", "gitops"}
    # portal stops applying the team label: gitops still owns it, so it stays
    one = stored(server_side_apply(both, deployment(), manager="portal", force=False, now=T3), "3")
    assert one["metadata"]["labels"] == {"app": "web", "team": "ml"}
    # gitops drops it too: now nobody owns it and it is removed
    none = server_side_apply(one, deployment(), manager="gitops", force=False, now=T4)
    assert none["metadata"]["labels"] == {"app": "web"}


def test_a_field_set_by_an_update_manager_is_kept_when_the_applier_never_owned_it():
    live = stored(server_side_apply(None, deployment(), manager="portal", force=False, now=T1))
    annotated = update_by(
        live,
        "kubectl-annotate",
        lambda o: o["metadata"].setdefault("annotations", {}).update(a="1"),
    )
    new = server_side_apply(
        annotated, deployment(image="train:2"), manager="portal", force=False, now=T3
    )
    assert new["metadata"]["annotations"] == {"a": "1"}


# --------------------------------------------------------------------------- associative lists


def test_containers_and_env_merge_per_key_with_other_managers_items():
    live = stored(
        server_side_apply(
            None,
            deployment(env=[{"name": "A", "value": "1"}]),
            manager="portal",
            force=False,
            now=T1,
        )
    )

    def inject(o):
        pod_spec = o["spec"]["template"]["spec"]
        pod_spec["containers"].append({"name": "sidecar", "image": "proxy:1"})
        pod_spec["containers"][0]["env"].append({"name": "INJECTED", "value": "yes"})

    injected = update_by(live, "webhook", inject)
    new = server_side_apply(
        injected,
        deployment(image="train:2", env=[{"name": "A", "value": "2"}, {"name": "C", "value": "3"}]),
        manager="portal",
        force=False,
        now=T3,
    )
    containers = new["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main", "sidecar"]
    assert containers[0]["image"] == "train:2"
    assert containers[0]["env"] == [
        {"name": "A", "value": "2"},
        {"name": "INJECTED", "value": "yes"},
        {"name": "C", "value": "3"},
    ]
    webhook = fields_v1_to_paths(entry(new, "webhook")["fieldsV1"])
    sidecar = ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"sidecar"}')
    assert sidecar in webhook


def test_an_item_the_applier_drops_keeps_fields_another_manager_owns():
    two = deployment()
    two["spec"]["template"]["spec"]["containers"].append({"name": "debug", "image": "busybox"})
    live = stored(server_side_apply(None, two, manager="portal", force=False, now=T1))

    def set_debug_args(o):
        o["spec"]["template"]["spec"]["containers"][1]["args"] = ["sleep"]

    edited = update_by(live, "kubectl-edit", set_debug_args)
    new = server_side_apply(edited, deployment(), manager="portal", force=False, now=T3)
    containers = new["spec"]["template"]["spec"]["containers"]
    assert containers[1] == {"name": "debug", "args": ["sleep"]}  # image was portal's only


def test_ports_are_keyed_by_container_port_and_protocol_with_tcp_default():
    config = deployment()
    config["spec"]["template"]["spec"]["containers"][0]["ports"] = [
        {"containerPort": 8080},
        {"containerPort": 8080, "protocol": "UDP"},
    ]
    obj = server_side_apply(None, config, manager="portal", force=False, now=T1)
    paths = fields_v1_to_paths(entry(obj, "portal")["fieldsV1"])
    ports = ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"main"}', "f:ports")
    assert (*ports, 'k:{"containerPort":8080,"protocol":"TCP"}') in paths
    assert (*ports, 'k:{"containerPort":8080,"protocol":"UDP"}') in paths


def test_tolerations_are_atomic_and_replaced_whole():
    config = deployment()
    config["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists"}
    ]
    live = stored(server_side_apply(None, config, manager="portal", force=False, now=T1))
    config["spec"]["template"]["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    new = server_side_apply(live, config, manager="portal", force=False, now=T2)
    assert new["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Exists"}
    ]
    paths = fields_v1_to_paths(entry(new, "portal")["fieldsV1"])
    assert ("f:spec", "f:template", "f:spec", "f:tolerations") in paths


def test_finalizers_are_a_set_recorded_with_values():
    config = deployment()
    config["metadata"]["finalizers"] = ["portal.io/cleanup"]
    live = stored(server_side_apply(None, config, manager="portal", force=False, now=T1))
    other = update_by(
        live, "gc", lambda o: o["metadata"]["finalizers"].append("foregroundDeletion")
    )
    assert other["metadata"]["finalizers"] == ["portal.io/cleanup", "foregroundDeletion"]
    fields = entry(other, "portal")["fieldsV1"]["f:metadata"]["f:finalizers"]
    assert fields == {'v:"portal.io/cleanup"': {}}
    # portal drops its finalizer: only the one gc owns remains
    new = server_side_apply(other, deployment(), manager="portal", force=False, now=T3)
    assert new["metadata"]["finalizers"] == ["foregroundDeletion"]


def test_applied_list_with_duplicate_keys_is_rejected():
    config = deployment(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}])
    with pytest.raises(PatchError) as err:
        server_side_apply(None, config, manager="portal", force=False, now=T1)
    assert 'duplicate entries for key [name="A"]' in str(err.value)


def test_applied_item_without_its_key_is_rejected():
    config = deployment(env=[{"value": "1"}])
    with pytest.raises(PatchError) as err:
        server_side_apply(None, config, manager="portal", force=False, now=T1)
    assert 'omits key field "name"' in str(err.value)


def test_managed_fields_in_an_apply_body_are_a_bad_request():
    config = deployment()
    config["metadata"]["managedFields"] = []
    with pytest.raises(PatchError) as err:
        server_side_apply(None, config, manager="portal", force=False, now=T1)
    assert err.value.code == 400


# --------------------------------------------------------------------------- subresources


def test_status_apply_records_status_only_under_the_subresource():
    live = stored(server_side_apply(None, deployment(), manager="portal", force=False, now=T1))
    status_cfg = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a"},
        "spec": {"replicas": 99},
        "status": {"readyReplicas": 2, "conditions": [{"type": "Available", "status": "True"}]},
    }
    new = server_side_apply(
        live, status_cfg, manager="deploy-controller", force=False, now=T2, subresource="status"
    )
    assert new["spec"]["replicas"] == 2  # the status endpoint ignores spec
    assert new["status"]["readyReplicas"] == 2
    ctrl = entry(new, "deploy-controller")
    assert ctrl["subresource"] == "status"
    assert set(ctrl["fieldsV1"]) == {"f:status"}
    assert 'k:{"type":"Available"}' in ctrl["fieldsV1"]["f:status"]["f:conditions"]


def test_reset_fields_are_neither_applied_nor_owned():
    config = deployment()
    config["status"] = {"replicas": 5}
    obj = server_side_apply(
        None, config, manager="portal", force=False, now=T1, reset_fields=("status",)
    )
    assert "f:status" not in entry(obj, "portal")["fieldsV1"]
    assert "status" not in obj


# --------------------------------------------------------------------------- non-apply writes


def test_create_by_update_owns_every_field_with_dot_for_added_maps():
    fields = update_managed_fields(None, deployment(), manager="kubectl-create", now=T1)
    assert fields == [
        {
            "manager": "kubectl-create",
            "operation": "Update",
            "apiVersion": "apps/v1",
            "time": T1,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {
                    "f:replicas": {},
                    "f:selector": {},
                    "f:template": {
                        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"main"}': {".": {}, "f:image": {}, "f:name": {}}
                            }
                        },
                    },
                },
            },
        }
    ]


def test_custom_resource_create_marks_spec_itself():
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"cohort": "org"},
    }
    fields = update_managed_fields(None, cq, manager="portal", now=T1)
    assert fields[0]["fieldsV1"] == {"f:spec": {".": {}, "f:cohort": {}}}


def test_update_moves_changed_fields_and_drops_removed_ones_from_everyone():
    live = stored(
        server_side_apply(
            None,
            deployment(labels={"app": "web", "tier": "gold"}),
            manager="portal",
            force=False,
            now=T1,
        )
    )

    def edit(o):
        o["spec"]["replicas"] = 4
        del o["metadata"]["labels"]["tier"]

    edited = update_by(live, "kubectl-edit", edit)
    portal = fields_v1_to_paths(entry(edited, "portal")["fieldsV1"])
    edit_fields = fields_v1_to_paths(entry(edited, "kubectl-edit")["fieldsV1"])
    assert ("f:spec", "f:replicas") not in portal
    assert ("f:metadata", "f:labels", "f:tier") not in portal
    assert edit_fields == {("f:spec", "f:replicas")}
    assert entry(edited, "kubectl-edit")["time"] == T2
    assert entry(edited, "portal")["time"] == T1


def test_entries_are_ordered_as_kube_apiserver_orders_them():
    live = stored(server_side_apply(None, deployment(), manager="portal", force=False, now=T1))
    one = update_by(live, "zz-controller", lambda o: o["metadata"]["labels"].update(z="1"), now=T2)
    two = update_by(one, "aa-controller", lambda o: o["metadata"]["labels"].update(a="1"), now=T2)
    assert managers(two) == [
        ("portal", "Apply"),
        ("aa-controller", "Update"),
        ("zz-controller", "Update"),
    ]


def test_update_that_changes_nothing_adds_no_entry():
    live = stored(server_side_apply(None, deployment(), manager="portal", force=False, now=T1))
    fields = update_managed_fields(live, copy.deepcopy(live), manager="idle", now=T2)
    assert [e["manager"] for e in fields] == ["portal"]


# --------------------------------------------------------------------------- Kueue ClusterQueue


def cluster_queue_keys():
    root = vendored_crds_dir()
    crd = yaml.safe_load((root / "kueue" / "kueue.x-k8s.io_clusterqueues.yaml").read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")
    return schema_list_map_keys(version["schema"]["openAPIV3Schema"])


def cluster_queue(gpus: int) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "team-a", "labels": {"gpu-portal.io/project": "team-a"}},
        "spec": {
            "cohort": "org",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
                        }
                    ],
                }
            ],
        },
    }


def test_cluster_queue_schema_list_types_are_read_from_the_crd():
    keys = cluster_queue_keys()
    assert keys(("spec", "resourceGroups")) is None  # atomic
    assert keys(("spec", "resourceGroups", "flavors")) == ["name"]
    assert keys(("spec", "resourceGroups", "flavors", "resources")) == ["name"]
    assert keys(("spec", "namespaceSelector")) == "atomic"


def test_cluster_queue_applied_twice_then_changed_by_another_manager_conflicts():
    keys = cluster_queue_keys()
    live = stored(
        server_side_apply(
            None, cluster_queue(8), manager="gpu-portal", force=False, now=T1, list_map_keys=keys
        )
    )
    fields = entry(live, "gpu-portal")["fieldsV1"]["f:spec"]
    assert fields == {"f:cohort": {}, "f:namespaceSelector": {}, "f:resourceGroups": {}}

    again = server_side_apply(
        live, cluster_queue(8), manager="gpu-portal", force=False, now=T2, list_map_keys=keys
    )
    assert again == live

    with pytest.raises(ApplyConflict) as err:
        server_side_apply(
            live, cluster_queue(16), manager="ops-console", force=False, now=T3, list_map_keys=keys
        )
    assert err.value.message() == (
        'Apply failed with 1 conflict: conflict with "gpu-portal": .spec.resourceGroups'
    )

    forced = server_side_apply(
        live, cluster_queue(16), manager="ops-console", force=True, now=T3, list_map_keys=keys
    )
    quota = forced["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
    assert quota == 16
    portal = fields_v1_to_paths(entry(forced, "gpu-portal")["fieldsV1"])
    assert ("f:spec", "f:resourceGroups") not in portal
    assert ("f:spec", "f:cohort") in portal  # shared: both applied the same cohort


# --------------------------------------------------------------------------- helpers


def test_fields_v1_round_trip_and_path_strings():
    paths = {
        ("f:metadata", "f:labels", "f:app"),
        ("f:spec", "f:containers", 'k:{"name":"a"}'),
        ("f:spec", "f:containers", 'k:{"name":"a"}', "f:image"),
        ("f:metadata", "f:finalizers", 'v:"x.io/y"'),
    }
    encoded = paths_to_fields_v1(paths)
    assert encoded["f:spec"]["f:containers"]['k:{"name":"a"}'] == {".": {}, "f:image": {}}
    assert fields_v1_to_paths(json.loads(json.dumps(encoded))) == paths
    assert field_path_string(("f:spec", "f:containers", 'k:{"name":"a"}', "f:image")) == (
        '.spec.containers[name="a"].image'
    )
    assert field_path_string(("f:metadata", "f:finalizers", 'v:"x.io/y"')) == (
        '.metadata.finalizers[="x.io/y"]'
    )
    assert (
        field_path_string(("f:ports", 'k:{"containerPort":80,"protocol":"TCP"}'))
        == '.ports[containerPort=80,protocol="TCP"]'
    )


def test_builtin_list_types_follow_kubernetes():
    pod = builtin_list_map_keys("v1", "Pod")
    assert pod(("spec", "containers")) == ["name"]
    assert pod(("spec", "containers", "env")) == ["name"]
    assert pod(("spec", "containers", "envFrom")) is None
    assert pod(("spec", "tolerations")) is None
    assert pod(("status", "conditions")) == ["type"]
    job = builtin_list_map_keys("batch/v1", "Job")
    assert job(("spec", "template", "spec", "volumes")) == ["name"]
    assert builtin_list_map_keys("v1", "Node")(("spec", "taints")) is None


def test_live_items_without_keys_are_kept_not_rejected():
    live = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"image": "legacy"}, {"name": "a", "image": "x"}]},
    }
    config = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a", "image": "y"}]},
    }
    new = server_side_apply(live, config, manager="portal", force=True, now=T1)
    assert new["spec"]["containers"] == [{"image": "legacy"}, {"name": "a", "image": "y"}]
    assert managers(new) == [("portal", "Apply"), ("before-first-apply", "Update")]


def test_managed_fields_sent_as_a_single_empty_entry_clear_them():
    live = stored(server_side_apply(None, deployment(), manager="portal", force=False, now=T1))
    new = copy.deepcopy(live)
    new["metadata"]["managedFields"] = [{}]
    assert update_managed_fields(live, new, manager="kubectl-edit", now=T2) == []


def test_managed_fields_sent_in_an_update_replace_the_stored_ones():
    live = stored(server_side_apply(None, deployment(), manager="portal", force=False, now=T1))
    new = copy.deepcopy(live)
    new["metadata"]["managedFields"][0]["manager"] = "renamed"
    new["spec"]["replicas"] = 3
    fields = update_managed_fields(live, new, manager="kubectl-edit", now=T2)
    assert [e["manager"] for e in fields] == ["renamed", "kubectl-edit"]
    # sending the stored list back unchanged (a read-modify-write) is an ordinary update
    same = copy.deepcopy(live)
    same["spec"]["replicas"] = 3
    fields = update_managed_fields(live, same, manager="kubectl-edit", now=T2)
    assert [e["manager"] for e in fields] == ["portal", "kubectl-edit"]


def test_owner_references_are_atomic_items_keyed_by_uid():
    config = deployment()
    config["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u-1"}
    ]
    obj = server_side_apply(None, config, manager="portal", force=False, now=T1)
    assert entry(obj, "portal")["fieldsV1"]["f:metadata"]["f:ownerReferences"] == {
        'k:{"uid":"u-1"}': {}
    }


def test_pod_node_selector_is_an_atomic_map_replaced_whole():
    config = deployment()
    config["spec"]["template"]["spec"]["nodeSelector"] = {"gpu": "h100", "zone": "a"}
    live = stored(server_side_apply(None, config, manager="portal", force=False, now=T1))
    fields = entry(live, "portal")["fieldsV1"]["f:spec"]["f:template"]["f:spec"]
    assert fields["f:nodeSelector"] == {}
    config["spec"]["template"]["spec"]["nodeSelector"] = {"gpu": "a100"}
    new = server_side_apply(live, config, manager="portal", force=False, now=T2)
    assert new["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
