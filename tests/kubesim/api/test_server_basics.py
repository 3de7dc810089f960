"""The process: TLS + bearer token, kubeconfig, discovery, clean exit, --state, faults."""

import signal
import ssl
import urllib.request

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubesim.testing import KubesimProcess

pytestmark = pytest.mark.kubesim


def test_requests_without_the_token_answer_401(kubesim_api):
    status, body = kubesim_api.request("GET", "/api/v1/namespaces", token="")
    assert status == 401
    assert body["kind"] == "Status"
    assert body["reason"] == "Unauthorized"
    status, _ = kubesim_api.request("GET", "/api/v1/namespaces", token="wrong")
    assert status == 401
    status, body = kubesim_api.request("GET", "/api/v1/namespaces")
    assert status == 200
    assert body["kind"] == "NamespaceList"


def test_serves_https_with_the_kubeconfig_ca_only(kubesim_api):
    config = yaml.safe_load(kubesim_api.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"].startswith("https://127.0.0.1:")
    assert cluster["certificate-authority-data"]
    # an unknown CA is refused: the server certificate chains only to the generated CA
    with pytest.raises(urllib.error.URLError) as excinfo:
        urllib.request.urlopen(
            kubesim_api.url + "/version", timeout=5, context=ssl.create_default_context()
        )
    assert "CERTIFICATE_VERIFY_FAILED" in str(excinfo.value)


def test_discovery_documents(kubesim_api):
    _, version = kubesim_api.request("GET", "/version")
    assert version["major"] == "1"
    _, core_versions = kubesim_api.request("GET", "/api")
    assert core_versions["versions"] == ["v1"]
    _, groups = kubesim_api.request("GET", "/apis")
    by_name = {g["name"]: g for g in groups["groups"]}
    for group in (
        "batch",
        "apps",
        "events.k8s.io",
        "scheduling.k8s.io",
        "coordination.k8s.io",
        "apiextensions.k8s.io",
        "kueue.x-k8s.io",
        "batch.volcano.sh",
        "scheduling.volcano.sh",
        "scheduling.run.ai",
    ):
        assert group in by_name, group
    assert by_name["kueue.x-k8s.io"]["preferredVersion"]["version"] == "v1beta2"
    _, core_resources = kubesim_api.request("GET", "/api/v1")
    names = {r["name"] for r in core_resources["resources"]}
    assert {
        "pods",
        "pods/status",
        "pods/log",
        "namespaces",
        "nodes",
        "events",
        "services",
        "endpoints",
        "configmaps",
        "secrets",
        "resourcequotas",
        "limitranges",
        "serviceaccounts",
    } <= names
    _, kueue = kubesim_api.request("GET", "/apis/kueue.x-k8s.io/v1beta2")
    cq = next(r for r in kueue["resources"] if r["name"] == "clusterqueues")
    assert cq["kind"] == "ClusterQueue"
    assert cq["namespaced"] is False
    assert "cq" in cq["shortNames"]
    assert "watch" in cq["verbs"]


def test_unknown_paths_answer_404_status(kubesim_api):
    status, body = kubesim_api.request("GET", "/apis/nope.example.com/v1/things")
    assert status == 404
    assert body["kind"] == "Status"
    assert body["reason"] == "NotFound"


def test_sigterm_exits_cleanly_and_state_survives_a_restart(kubesim_factory, tmp_path):
    state = tmp_path / "state.json"
    first = kubesim_factory(state=state, no_cluster=True)
    assert first.port > 0  # port 0 picked a free port and printed it
    api = first.api_client()
    core = client.CoreV1Api(api)
    created = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "kept"}, "data": {"a": "1"}}
    )
    api.close()
    assert first.stop() == 0

    second = kubesim_factory(state=state, no_cluster=True)
    api = second.api_client()
    core = client.CoreV1Api(api)
    restored = core.read_namespaced_config_map("kept", "default")
    assert restored.metadata.uid == created.metadata.uid
    assert restored.metadata.resource_version == created.metadata.resource_version
    assert restored.data == {"a": "1"}
    # the resourceVersion counter continues after the restored one
    newer = core.create_namespaced_config_map("default", {"metadata": {"name": "newer"}})
    assert int(newer.metadata.resource_version) > int(created.metadata.resource_version)
    api.close()
    second.process.send_signal(signal.SIGINT)
    assert second.process.wait(20) == 0


def test_fault_injection_makes_the_api_unavailable(kubesim_fresh):
    api = kubesim_fresh.api_client()
    core = client.CoreV1Api(api)
    kubesim_fresh.admin("/kubesim/faults", {"unavailable_seconds": 1.5})
    with pytest.raises(ApiException) as excinfo:
        core.list_namespace()
    assert excinfo.value.status == 503
    from kubesim.testing import wait_for

    wait_for(lambda: _ok(core), timeout=5)
    api.close()


def _ok(core) -> bool:
    import urllib3

    try:
        core.list_namespace(_request_timeout=5)
    except (ApiException, urllib3.exceptions.HTTPError):
        return False
    return True


def test_with_no_default_crds_the_queue_kinds_are_served_schema_less(kubesim_factory):
    server = kubesim_factory(no_cluster=True, extra_args=["--no-default-crds"])
    api = server.api_client()
    custom = client.CustomObjectsApi(api)
    cq = custom.create_cluster_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        "clusterqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "free-form"},
            "spec": {"anything": {"goes": 1}},
        },
    )
    assert cq["spec"] == {"anything": {"goes": 1}}
    for group, version, plural in (
        ("batch.volcano.sh", "v1alpha1", "jobs"),
        ("scheduling.volcano.sh", "v1beta1", "queues"),
        ("scheduling.run.ai", "v2", "queues"),
        ("kueue.x-k8s.io", "v1beta2", "workloads"),
    ):
        status, _ = server.request("GET", f"/apis/{group}/{version}/{plural}")
        assert status == 200, (group, plural)
    api.close()


def test_kubesim_process_reports_a_failed_start(tmp_path):
    process = KubesimProcess(crds=[tmp_path / "missing"], no_cluster=True, workdir=tmp_path / "w")
    with pytest.raises(RuntimeError, match="kubesim did not start"):
        process.start()


def test_fault_injection_drops_connections(kubesim_fresh):
    import urllib3

    api = kubesim_fresh.api_client()
    api.configuration.retries = 0
    core = client.CoreV1Api(api)
    kubesim_fresh.admin("/kubesim/faults", {"drop_connections_seconds": 1.5})
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.list_namespace(_request_timeout=5)
    from kubesim.testing import wait_for

    wait_for(lambda: _ok(core), timeout=5)
    api.close()
    # the server survived the dropped connections
    assert "Traceback" not in kubesim_fresh.log_file.read_text()


def test_state_keeps_custom_resources_and_run_time_crds(kubesim_factory, tmp_path):
    state = tmp_path / "state.json"
    group = "keep.example.com"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"things.{group}"},
        "spec": {
            "group": group,
            "scope": "Cluster",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    first = kubesim_factory(state=state, no_cluster=True)
    api = first.api_client()
    client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    custom = client.CustomObjectsApi(api)
    thing = custom.create_cluster_custom_object(
        group,
        "v1",
        "things",
        {"apiVersion": f"{group}/v1", "kind": "Thing", "metadata": {"name": "t1"}, "x": 1},
    )
    rf = custom.create_cluster_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        "resourceflavors",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "a100"},
        },
    )
    api.close()
    assert first.stop() == 0

    second = kubesim_factory(state=state, no_cluster=True)
    api = second.api_client()
    custom = client.CustomObjectsApi(api)
    again = custom.get_cluster_custom_object(group, "v1", "things", "t1")
    assert again["metadata"]["uid"] == thing["metadata"]["uid"]
    assert again["x"] == 1
    rf_again = custom.get_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "resourceflavors", "a100"
    )
    assert rf_again["metadata"]["resourceVersion"] == rf["metadata"]["resourceVersion"]
    api.close()


@pytest.mark.parametrize(
    ("path", "body", "query"),
    [
        ("/api/v1/namespaces/default/configmaps", {"metadata": 5}, ""),
        ("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "x", "labels": "a"}}, ""),
        ("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "x"}, "data": 5}, ""),
        (
            "/api/v1/namespaces/default/pods",
            {"metadata": {"name": "x"}, "spec": {"containers": 5}},
            "",
        ),
        ("/api/v1/namespaces/default/configmaps", None, "?limit=abc"),
        ("/api/v1/namespaces/default/configmaps", None, "?watch=1&timeoutSeconds=x"),
        ("/api/v1/namespaces/default/configmaps", None, "?labelSelector=a%20in%20("),
    ],
)
def test_malformed_requests_are_400_not_500(kubesim_api, path, body, query):
    method = "POST" if body is not None else "GET"
    status, answer = kubesim_api.request(method, path + query, body)
    assert status == 400, answer
    assert answer["kind"] == "Status"
    assert answer["reason"] == "BadRequest"
