"""Built-in kinds through CoreV1Api / BatchV1Api: metadata, concurrency, status, patches."""

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.kubesim


def _pod(name: str, **spec) -> dict:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "x"}},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]}
            ]
        },
    }
    body["spec"].update(spec)
    return body


def test_create_sets_server_metadata(core, namespace):
    pod = core.create_namespaced_pod(namespace, _pod("p1"))
    meta = pod.metadata
    assert meta.uid
    assert meta.resource_version
    assert meta.creation_timestamp
    assert meta.namespace == namespace
    assert pod.status.phase == "Pending"
    assert pod.status.qos_class == "BestEffort"
    again = core.read_namespaced_pod("p1", namespace)
    assert again.metadata.uid == meta.uid


def test_resource_version_is_one_global_counter(core, namespace):
    a = core.create_namespaced_config_map(namespace, {"metadata": {"name": "a"}})
    b = core.create_namespaced_secret(namespace, {"metadata": {"name": "b"}})
    c = core.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}})
    rvs = [int(o.metadata.resource_version) for o in (a, b, c)]
    assert rvs == sorted(rvs)
    assert len(set(rvs)) == 3


def test_generate_name_and_dry_run(core, namespace):
    made = core.create_namespaced_config_map(namespace, {"metadata": {"generateName": "cm-"}})
    assert made.metadata.name.startswith("cm-")
    assert len(made.metadata.name) == 8
    dry = core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "ghost"}}, dry_run="All"
    )
    assert dry.metadata.name == "ghost"
    with pytest.raises(ApiException) as excinfo:
        core.read_namespaced_config_map("ghost", namespace)
    assert excinfo.value.status == 404


def test_errors_are_status_objects_with_reasons(core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "dup"}})
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "dup"}})
    assert excinfo.value.status == 409
    assert excinfo.value.reason == "Conflict"
    import json

    body = json.loads(excinfo.value.body)
    assert body["kind"] == "Status"
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'configmaps "dup" already exists'

    with pytest.raises(ApiException) as excinfo:
        core.read_namespaced_config_map("missing", namespace)
    body = json.loads(excinfo.value.body)
    assert excinfo.value.status == 404
    assert body["reason"] == "NotFound"
    assert body["message"] == 'configmaps "missing" not found'

    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "Bad_Name"}})
    body = json.loads(excinfo.value.body)
    assert excinfo.value.status == 422
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    assert 'ConfigMap "Bad_Name" is invalid: metadata.name' in body["message"]

    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_config_map("no-such-namespace", {"metadata": {"name": "x"}})
    assert excinfo.value.status == 404
    assert json.loads(excinfo.value.body)["message"] == 'namespaces "no-such-namespace" not found'


def test_stale_update_answers_409_conflict(core, namespace):
    cm = core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "cc"}, "data": {"v": "1"}}
    )
    fresh = core.read_namespaced_config_map("cc", namespace)
    fresh.data = {"v": "2"}
    updated = core.replace_namespaced_config_map("cc", namespace, fresh)
    assert updated.data == {"v": "2"}
    assert int(updated.metadata.resource_version) > int(cm.metadata.resource_version)
    cm.data = {"v": "3"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as excinfo:
        core.replace_namespaced_config_map("cc", namespace, cm)
    assert excinfo.value.status == 409
    assert "the object has been modified" in excinfo.value.body


def test_noop_update_keeps_the_resource_version(core, namespace):
    cm = core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "same"}, "data": {"v": "1"}}
    )
    again = core.patch_namespaced_config_map("same", namespace, {"data": {"v": "1"}})
    assert again.metadata.resource_version == cm.metadata.resource_version


def test_status_subresource_semantics_and_generation(batch, namespace):
    job = batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "j"},
            "spec": {
                "parallelism": 1,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox"}],
                    }
                },
            },
            "status": {"active": 5},
        },
    )
    assert job.metadata.generation == 1
    assert not job.status.active  # status on create is dropped
    # status writes ignore spec changes, and do not bump generation
    job.status = client.V1JobStatus(active=1)
    job.spec.parallelism = 7
    after_status = batch.replace_namespaced_job_status("j", namespace, job)
    assert after_status.status.active == 1
    assert after_status.spec.parallelism == 1
    assert after_status.metadata.generation == 1
    # main-resource writes ignore status and bump generation on spec change
    patched = batch.patch_namespaced_job(
        "j", namespace, {"spec": {"parallelism": 2}, "status": {"active": 9}}
    )
    assert patched.spec.parallelism == 2
    assert patched.status.active == 1
    assert patched.metadata.generation == 2
    labelled = batch.patch_namespaced_job("j", namespace, {"metadata": {"labels": {"a": "b"}}})
    assert labelled.metadata.generation == 2


def test_strategic_merge_patch_merges_containers_by_name(core, namespace):
    core.create_namespaced_pod(namespace, _pod("smp"))
    # a pod's image is one of the few spec fields an update may change
    patched = core.patch_namespaced_pod(
        "smp", namespace, {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}
    )
    container = patched.spec.containers[0]
    assert container.image == "busybox:1.37"
    assert {e.name: e.value for e in container.env} == {"A": "1"}


def test_pod_spec_is_immutable_beyond_image_as_upstream(core, namespace):
    core.create_namespaced_pod(namespace, _pod("immutable"))
    with pytest.raises(ApiException) as excinfo:
        core.patch_namespaced_pod(
            "immutable",
            namespace,
            {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}},
        )
    assert excinfo.value.status == 422
    body = json.loads(excinfo.value.body)
    assert body["details"]["causes"][0]["field"] == "spec"
    assert (
        "pod updates may not change fields other than `spec.containers[*].image`"
        in (body["message"])
    )


def test_json_patch_and_merge_patch(core, namespace):
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "jp"}, "data": {"a": "1", "b": "2"}}
    )
    # the python client sends a list body as application/json-patch+json
    patched = core.patch_namespaced_config_map(
        "jp",
        namespace,
        [{"op": "remove", "path": "/data/a"}, {"op": "add", "path": "/data/c", "value": "3"}],
    )
    assert patched.data == {"b": "2", "c": "3"}
    merged = core.patch_namespaced_config_map(
        "jp", namespace, {"data": {"b": None}}, _content_type="application/merge-patch+json"
    )
    assert merged.data == {"c": "3"}
    with pytest.raises(ApiException) as excinfo:
        core.patch_namespaced_config_map(
            "jp", namespace, [{"op": "test", "path": "/data/c", "value": "nope"}]
        )
    assert excinfo.value.status in (400, 422)


def test_list_selectors_and_pagination(core, namespace):
    for i, (tier, zone) in enumerate(
        [("web", "a"), ("web", "b"), ("db", "a"), ("db", None), ("cache", "c")]
    ):
        labels = {"tier": tier}
        if zone:
            labels["zone"] = zone
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": f"cm{i}", "labels": labels}}
        )

    def names(**kwargs):
        return [o.metadata.name for o in core.list_namespaced_config_map(namespace, **kwargs).items]

    assert names(label_selector="tier=web") == ["cm0", "cm1"]
    assert names(label_selector="tier!=web") == ["cm2", "cm3", "cm4"]
    assert names(label_selector="tier in (db,cache)") == ["cm2", "cm3", "cm4"]
    assert names(label_selector="tier notin (db,cache)") == ["cm0", "cm1"]
    assert names(label_selector="zone") == ["cm0", "cm1", "cm2", "cm4"]
    assert names(label_selector="!zone") == ["cm3"]
    assert names(label_selector="tier=web,zone=b") == ["cm1"]
    assert names(field_selector="metadata.name=cm2") == ["cm2"]
    assert names(field_selector="metadata.name!=cm2") == ["cm0", "cm1", "cm3", "cm4"]
    with pytest.raises(ApiException) as excinfo:
        names(label_selector="tier in (")
    assert excinfo.value.status == 400

    first = core.list_namespaced_config_map(namespace, limit=2)
    assert [o.metadata.name for o in first.items] == ["cm0", "cm1"]
    assert first.metadata._continue
    assert first.metadata.remaining_item_count == 3
    second = core.list_namespaced_config_map(namespace, limit=2, _continue=first.metadata._continue)
    assert [o.metadata.name for o in second.items] == ["cm2", "cm3"]
    third = core.list_namespaced_config_map(namespace, limit=2, _continue=second.metadata._continue)
    assert [o.metadata.name for o in third.items] == ["cm4"]
    assert not third.metadata._continue
    assert int(first.metadata.resource_version) >= 1

    # With a selector, pages go on the same way; as in Kubernetes, what is left is not counted.
    pages, token = [], None
    while True:
        page = core.list_namespaced_config_map(
            namespace, label_selector="zone", limit=2, **({"_continue": token} if token else {})
        )
        pages.append([o.metadata.name for o in page.items])
        assert page.metadata.remaining_item_count is None
        token = page.metadata._continue
        if not token:
            break
    assert pages == [["cm0", "cm1"], ["cm2", "cm4"]]


def test_pod_field_selectors(core, namespace):
    core.create_namespaced_pod(namespace, _pod("on-node", nodeName="node-1"))
    core.create_namespaced_pod(namespace, _pod("unbound"))
    bound = core.list_namespaced_pod(namespace, field_selector="spec.nodeName=node-1")
    assert [p.metadata.name for p in bound.items] == ["on-node"]
    unbound = core.list_namespaced_pod(namespace, field_selector="spec.nodeName=")
    assert [p.metadata.name for p in unbound.items] == ["unbound"]
    pending = core.list_namespaced_pod(namespace, field_selector="status.phase=Pending")
    assert len(pending.items) == 2
    with pytest.raises(ApiException) as excinfo:
        core.list_namespaced_pod(namespace, field_selector="spec.image=x")
    assert excinfo.value.status == 400
    assert "field label not supported: spec.image" in excinfo.value.body


def test_list_resource_version_semantics(core, namespace):
    listed = core.list_namespaced_config_map(namespace)
    rv = int(listed.metadata.resource_version)
    assert core.list_namespaced_config_map(namespace, resource_version="0").items == []
    same = core.list_namespaced_config_map(namespace, resource_version=str(rv))
    assert int(same.metadata.resource_version) >= rv
    with pytest.raises(ApiException) as excinfo:
        core.list_namespaced_config_map(namespace, resource_version=str(rv + 10_000_000))
    assert excinfo.value.status == 504


def test_finalizers_hold_deletion_until_removed(core, namespace):
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}
    )
    core.delete_namespaced_config_map("held", namespace)
    held = core.read_namespaced_config_map("held", namespace)
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as excinfo:
        core.read_namespaced_config_map("held", namespace)
    assert excinfo.value.status == 404


def _owned_pod(name: str, owner) -> dict:
    body = _pod(name)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": owner.metadata.name,
            "uid": owner.metadata.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return body


def _job(batch, namespace, name):
    return batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox"}],
                    }
                }
            },
        },
    )


@pytest.mark.parametrize("policy", ["Background", "Foreground"])
def test_owner_deletion_collects_dependents(core, batch, namespace, policy):
    owner = _job(batch, namespace, "owner")
    core.create_namespaced_pod(namespace, _owned_pod("child", owner))
    batch.delete_namespaced_job("owner", namespace, propagation_policy=policy)
    assert core.list_namespaced_pod(namespace).items == []
    assert batch.list_namespaced_job(namespace).items == []


def test_foreground_deletion_waits_for_dependents_with_finalizers(core, batch, namespace):
    owner = _job(batch, namespace, "owner")
    child = _owned_pod("child", owner)
    child["metadata"]["finalizers"] = ["example.com/slow"]
    core.create_namespaced_pod(namespace, child)
    batch.delete_namespaced_job("owner", namespace, propagation_policy="Foreground")
    waiting = batch.read_namespaced_job("owner", namespace)
    assert waiting.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in waiting.metadata.finalizers
    core.patch_namespaced_pod("child", namespace, {"metadata": {"finalizers": None}})
    assert batch.list_namespaced_job(namespace).items == []


def test_orphan_deletion_keeps_dependents(core, batch, namespace):
    owner = _job(batch, namespace, "owner")
    core.create_namespaced_pod(namespace, _owned_pod("child", owner))
    batch.delete_namespaced_job("owner", namespace, propagation_policy="Orphan")
    child = core.read_namespaced_pod("child", namespace)
    assert not child.metadata.owner_references


def test_delete_collection_with_selector(core, namespace):
    for name, tier in (("a", "x"), ("b", "x"), ("c", "y")):
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": name, "labels": {"tier": tier}}}
        )
    core.delete_collection_namespaced_config_map(namespace, label_selector="tier=x")
    left = core.list_namespaced_config_map(namespace)
    assert [o.metadata.name for o in left.items] == ["c"]


def test_namespace_deletion_removes_its_contents(core):
    core.create_namespace({"metadata": {"name": "doomed"}})
    core.create_namespaced_config_map("doomed", {"metadata": {"name": "x"}})
    core.delete_namespace("doomed")
    with pytest.raises(ApiException) as excinfo:
        core.read_namespace("doomed")
    assert excinfo.value.status == 404
    assert (
        core.list_config_map_for_all_namespaces(field_selector="metadata.namespace=doomed").items
        == []
    )


def test_server_side_apply_with_conflicts(core, namespace):
    import json

    def apply(body, manager, force=False):
        return core.patch_namespaced_config_map(
            "applied",
            namespace,
            body,
            field_manager=manager,
            force=force,
            _content_type="application/apply-patch+yaml",
        )

    first = apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "applied"},
            "data": {"owned": "1"},
        },
        "alice",
    )
    assert {m.manager for m in first.metadata.managed_fields} == {"alice"}
    assert first.metadata.managed_fields[0].operation == "Apply"
    with pytest.raises(ApiException) as excinfo:
        apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "applied"},
                "data": {"owned": "2"},
            },
            "bob",
        )
    assert excinfo.value.status == 409
    body = json.loads(excinfo.value.body)
    assert body["reason"] == "Conflict"
    assert 'conflict with "alice"' in body["message"]
    forced = apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "applied"},
            "data": {"owned": "2"},
        },
        "bob",
        force=True,
    )
    assert forced.data == {"owned": "2"}
    assert "bob" in {m.manager for m in forced.metadata.managed_fields}


def test_apply_bodies_are_read_as_json_or_yaml(kube_client, core, namespace):
    """An apply body may be JSON (what clients send), block YAML, or flow YAML that starts like
    JSON but is not JSON; each is read as the API server reads it."""
    bodies = {
        "as-json": '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "as-json"}, '
        '"data": {"n": "1e3"}}',
        "as-yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: as-yaml\ndata:\n  n: '2'\n",
        "as-flow": "{apiVersion: v1, kind: ConfigMap, metadata: {name: as-flow}, data: {n: '3'}}",
    }
    config = kube_client.configuration
    headers = {"Content-Type": "application/apply-patch+yaml"}
    for setting in config.auth_settings().values():
        headers[setting["key"]] = setting["value"]
    for name, text in bodies.items():
        # Raw bytes: the python client would send a str body as a JSON string.
        answer = kube_client.rest_client.pool_manager.request(
            "PATCH",
            f"{config.host}/api/v1/namespaces/{namespace}/configmaps/{name}?fieldManager=tester",
            body=text.encode(),
            headers=headers,
        )
        assert answer.status == 201, answer.data
    assert core.read_namespaced_config_map("as-json", namespace).data == {"n": "1e3"}
    assert core.read_namespaced_config_map("as-yaml", namespace).data == {"n": "2"}
    assert core.read_namespaced_config_map("as-flow", namespace).data == {"n": "3"}


def test_events_are_one_store_seen_through_both_apis(kube_client, core, namespace):
    events_v1 = client.EventsV1Api(kube_client)
    core.create_namespaced_event(
        namespace,
        {
            "metadata": {"name": "pod-a.1"},
            "involvedObject": {"kind": "Pod", "name": "pod-a", "namespace": namespace},
            "reason": "Scheduled",
            "message": "Successfully assigned",
            "type": "Normal",
            "source": {"component": "default-scheduler"},
            "count": 1,
        },
    )
    # raw JSON: like a real server, legacy events have no eventTime, which the generated
    # V1Event model refuses to deserialize
    response = events_v1.list_namespaced_event(
        namespace, field_selector="regarding.name=pod-a", _preload_content=False
    )
    seen = json.loads(response.data)
    assert seen["apiVersion"] == "events.k8s.io/v1"
    assert [
        (e["reason"], e["note"], e["regarding"]["name"], e["deprecatedCount"])
        for e in seen["items"]
    ] == [("Scheduled", "Successfully assigned", "pod-a", 1)]
    events_v1.create_namespaced_event(
        namespace,
        {
            "metadata": {"name": "pod-a.2"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "regarding": {"kind": "Pod", "name": "pod-a", "namespace": namespace},
            "reason": "Started",
            "note": "Started container",
            "type": "Normal",
            "action": "Start",
            "reportingController": "kubelet",
            "reportingInstance": "node-1",
        },
    )
    both = core.list_namespaced_event(namespace, field_selector="involvedObject.name=pod-a")
    assert sorted((e.reason, e.message) for e in both.items) == [
        ("Scheduled", "Successfully assigned"),
        ("Started", "Started container"),
    ]


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        (
            {"limits": {"nvidia.com/gpu": "0.5"}},
            "spec.containers[0].resources.limits[nvidia.com/gpu]",
        ),
        (
            {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
            "spec.containers[0].resources.requests",
        ),
    ],
)
def test_gpu_resources_are_validated_on_pods(core, namespace, resources, field):
    body = _pod("gpu")
    body["spec"]["containers"][0]["resources"] = resources
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_pod(namespace, body)
    assert excinfo.value.status == 422
    causes = json.loads(excinfo.value.body)["details"]["causes"]
    assert field in [c["field"] for c in causes]


def test_scale_subresource(kube_client, namespace):
    apps = client.AppsV1Api(kube_client)
    apps.create_namespaced_stateful_set(
        namespace,
        {
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 1,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [{"name": "c", "image": "postgres"}]},
                },
            },
        },
    )
    scale = apps.read_namespaced_stateful_set_scale("db", namespace)
    assert scale.spec.replicas == 1
    assert scale.status.selector == "app=db"
    apps.patch_namespaced_stateful_set_scale(
        "db", namespace, {"spec": {"replicas": 5}}, _content_type="application/merge-patch+json"
    )
    assert apps.read_namespaced_stateful_set("db", namespace).spec.replicas == 5
    with pytest.raises(ApiException) as excinfo:
        apps.patch_namespaced_stateful_set_scale(
            "db",
            namespace,
            {"spec": {"replicas": -1}},
            _content_type="application/merge-patch+json",
        )
    assert excinfo.value.status == 422
