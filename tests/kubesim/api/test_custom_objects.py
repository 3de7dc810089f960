"""CRD-served kinds through CustomObjectsApi and DynamicClient: schemas, versions, selectors."""

import json
import uuid

import pytest
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.kubesim

KUEUE = "kueue.x-k8s.io"


def _cq(name: str, quota="9", cohort: str | None = None) -> dict:
    spec: dict = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [
                    {
                        "name": "default-flavor",
                        "resources": [{"name": "cpu", "nominalQuota": quota}],
                    }
                ],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    return {
        "apiVersion": f"{KUEUE}/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_cluster_queue_defaults_and_v1beta1_view(custom):
    name = _name("cq")
    created = custom.create_cluster_custom_object(
        KUEUE, "v1beta2", "clusterqueues", _cq(name, cohort="team")
    )
    # defaults from the CRD schema are applied
    assert created["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert created["metadata"]["generation"] == 1
    # read through the deprecated version: the v1beta2 cohortName is v1beta1's cohort
    old = custom.get_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", name)
    assert old["apiVersion"] == f"{KUEUE}/v1beta1"
    assert old["spec"]["cohort"] == "team"
    assert "cohortName" not in old["spec"]
    # and written through it: stored (and served in v1beta2) with the new name
    old["spec"]["cohort"] = "other"
    custom.replace_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", name, old)
    new = custom.get_cluster_custom_object(KUEUE, "v1beta2", "clusterqueues", name)
    assert new["spec"]["cohortName"] == "other"


@pytest.mark.parametrize("quota", ["abc", "1.5.5", {"x": 1}])
def test_invalid_cluster_queue_is_422_naming_the_field(custom, quota):
    with pytest.raises(ApiException) as excinfo:
        custom.create_cluster_custom_object(
            KUEUE, "v1beta2", "clusterqueues", _cq(_name("bad"), quota=quota)
        )
    assert excinfo.value.status == 422
    body = json.loads(excinfo.value.body)
    assert body["reason"] == "Invalid"
    fields = [c["field"] for c in body["details"]["causes"]]
    assert "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota" in fields
    assert body["message"].startswith('ClusterQueue.kueue.x-k8s.io "bad-')


def test_cel_rule_rejects_mismatched_flavor_resources(custom):
    body = _cq(_name("cel"))
    body["spec"]["resourceGroups"][0]["coveredResources"] = ["cpu", "memory"]
    with pytest.raises(ApiException) as excinfo:
        custom.create_cluster_custom_object(KUEUE, "v1beta2", "clusterqueues", body)
    assert excinfo.value.status == 422
    assert "spec.resourceGroups[0]" in excinfo.value.body


def test_unknown_fields_are_pruned_or_rejected_when_strict(custom, kubesim_api):
    body = _cq(_name("prune"))
    body["spec"]["notAField"] = True
    created = custom.create_cluster_custom_object(KUEUE, "v1beta2", "clusterqueues", body)
    assert "notAField" not in created["spec"]
    body["metadata"]["name"] = _name("strict")
    status, answer = kubesim_api.request(
        "POST", f"/apis/{KUEUE}/v1beta2/clusterqueues?fieldValidation=Strict", body
    )
    assert status == 400
    assert answer["message"] == 'strict decoding error: unknown field "spec.notAField"'


def test_status_subresource_for_custom_objects(custom):
    name = _name("st")
    custom.create_cluster_custom_object(KUEUE, "v1beta2", "clusterqueues", _cq(name))
    patched = custom.patch_cluster_custom_object_status(
        KUEUE, "v1beta2", "clusterqueues", name, {"status": {"pendingWorkloads": 3}}
    )
    assert patched["status"]["pendingWorkloads"] == 3
    assert patched["metadata"]["generation"] == 1
    # status in a main-resource patch is ignored
    main = custom.patch_cluster_custom_object(
        KUEUE,
        "v1beta2",
        "clusterqueues",
        name,
        {"status": {"pendingWorkloads": 99}, "spec": {"cohortName": "x"}},
    )
    assert main["status"]["pendingWorkloads"] == 3
    assert main["metadata"]["generation"] == 2


def test_strategic_merge_patch_on_a_custom_object_is_415(kubesim_api):
    status, body = kubesim_api.request(
        "PATCH",
        f"/apis/{KUEUE}/v1beta2/clusterqueues/whatever",
        {"spec": {}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert status == 415
    assert body["reason"] == "UnsupportedMediaType"


def _workload(name: str, cq: str | None, labels: dict) -> dict:
    return {
        "apiVersion": f"{KUEUE}/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "queueName": "user-queue",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "busybox",
                                    "resources": {"requests": {"cpu": "1"}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def test_workload_selectable_field_and_label_selectors(custom, namespace):
    for i, cq in enumerate(["cq-a", "cq-b", "cq-a"]):
        custom.create_namespaced_custom_object(
            KUEUE,
            "v1beta2",
            namespace,
            "workloads",
            _workload(f"wl{i}", cq, {"team": "red" if i < 2 else "blue"}),
        )
        custom.patch_namespaced_custom_object_status(
            KUEUE,
            "v1beta2",
            namespace,
            "workloads",
            f"wl{i}",
            {
                "status": {
                    "admission": {
                        "clusterQueue": cq,
                        "podSetAssignments": [
                            {
                                "name": "main",
                                "count": 1,
                                "flavors": {"cpu": "default-flavor"},
                                "resourceUsage": {"cpu": "1"},
                            }
                        ],
                    }
                }
            },
        )
    listed = custom.list_namespaced_custom_object(
        KUEUE,
        "v1beta2",
        namespace,
        "workloads",
        field_selector="status.admission.clusterQueue=cq-a",
    )
    assert [w["metadata"]["name"] for w in listed["items"]] == ["wl0", "wl2"]
    red = custom.list_namespaced_custom_object(
        KUEUE, "v1beta2", namespace, "workloads", label_selector="team=red"
    )
    assert [w["metadata"]["name"] for w in red["items"]] == ["wl0", "wl1"]
    assert red["kind"] == "WorkloadList"
    assert int(red["metadata"]["resourceVersion"]) > 0


def test_crd_created_at_run_time_is_served_and_removed(kube_client, custom):
    ext = client.ApiextensionsV1Api(kube_client)
    group = "demo.example.com"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "shortNames": ["wd"],
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "size": {"type": "integer", "minimum": 1, "default": 3}
                                    },
                                }
                            },
                        }
                    },
                    "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}
                    ],
                }
            ],
        },
    }
    created = ext.create_custom_resource_definition(crd)
    conditions = {c.type: c.status for c in created.status.conditions}
    assert conditions["Established"] == "True"
    widget = custom.create_namespaced_custom_object(
        group,
        "v1",
        "default",
        "widgets",
        {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {}},
    )
    assert widget["spec"]["size"] == 3
    with pytest.raises(ApiException) as excinfo:
        custom.create_namespaced_custom_object(
            group,
            "v1",
            "default",
            "widgets",
            {
                "apiVersion": f"{group}/v1",
                "kind": "Widget",
                "metadata": {"name": "w2"},
                "spec": {"size": 0},
            },
        )
    assert excinfo.value.status == 422
    assert "spec.size" in excinfo.value.body
    ext.delete_custom_resource_definition(f"widgets.{group}")
    with pytest.raises(ApiException) as excinfo:
        custom.list_namespaced_custom_object(group, "v1", "default", "widgets")
    assert excinfo.value.status == 404


def test_dynamic_client(kube_client, namespace):
    dyn = dynamic.DynamicClient(kube_client)
    lq_api = dyn.resources.get(api_version=f"{KUEUE}/v1beta2", kind="LocalQueue")
    lq_api.create(
        namespace=namespace,
        body={
            "apiVersion": f"{KUEUE}/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq"},
            "spec": {"clusterQueue": "cq"},
        },
    )
    got = lq_api.get(name="lq", namespace=namespace)
    assert got.spec.clusterQueue == "cq"
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    assert pods.namespaced is True
    assert dyn.resources.get(api_version="batch/v1", kind="Job").name == "jobs"
    items = lq_api.get(namespace=namespace).items
    assert [i.metadata.name for i in items] == ["lq"]
    lq_api.delete(name="lq", namespace=namespace)
    assert lq_api.get(namespace=namespace).items == []


def test_table_output_uses_printer_columns(kubesim_api, custom):
    name = _name("tbl")
    custom.create_cluster_custom_object(KUEUE, "v1beta2", "clusterqueues", _cq(name, cohort="c9"))
    status, table = kubesim_api.request(
        "GET",
        f"/apis/{KUEUE}/v1beta2/clusterqueues/{name}",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"},
    )
    assert status == 200
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "Cohort",
        "Strategy",
        "Pending Workloads",
        "Admitted Workloads",
    ]
    assert table["rows"][0]["cells"][:3] == [name, "c9", "BestEffortFIFO"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


def test_pod_table_columns(kubesim_api, core, namespace):
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
        },
    )
    status, table = kubesim_api.request(
        "GET",
        f"/api/v1/namespaces/{namespace}/pods",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    )
    assert status == 200
    names = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert names == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert table["rows"][0]["cells"][:4] == ["p", "0/2", "Pending", "0"]


def test_negative_quota_is_422_naming_the_field(custom):
    """Kueue's webhook check (quotas must not be negative), answered as a 422 Invalid."""
    with pytest.raises(ApiException) as excinfo:
        custom.create_cluster_custom_object(
            KUEUE, "v1beta2", "clusterqueues", _cq(_name("neg"), quota="-5")
        )
    assert excinfo.value.status == 422
    body = json.loads(excinfo.value.body)
    causes = {c["field"]: c["message"] for c in body["details"]["causes"]}
    field = "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    assert field in causes
    assert "must be greater than or equal to 0" in causes[field]
