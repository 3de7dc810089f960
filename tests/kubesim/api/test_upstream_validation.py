"""Built-in kinds decoded and validated as kube-apiserver does: upstream v1.37 OpenAPI shapes
(wrong types are decoder 400s, unknown fields dropped or refused), 422s naming the field,
canonical quantities, immutable fields, and Status bodies byte-compatible with upstream."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = [pytest.mark.kubesim]


def _deployment(name: str, **spec) -> dict:
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }
    body["spec"].update(spec)
    return body


def _error(excinfo) -> tuple[int, dict]:
    return excinfo.value.status, json.loads(excinfo.value.body)


def test_a_string_for_an_integer_is_a_decoder_400(kube_client, namespace):
    apps = client.AppsV1Api(kube_client)
    with pytest.raises(ApiException) as excinfo:
        apps.create_namespaced_deployment(namespace, _deployment("two", replicas="two"))
    status, body = _error(excinfo)
    assert status == 400
    assert body["reason"] == "BadRequest"
    assert body["message"] == (
        'Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal '
        "string into Go struct field DeploymentSpec.spec.replicas of type int32"
    )


def test_port_out_of_range_and_selector_mismatch_are_422s_naming_the_field(kube_client, namespace):
    apps = client.AppsV1Api(kube_client)
    body = _deployment("ports")
    body["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 70000}]
    with pytest.raises(ApiException) as excinfo:
        apps.create_namespaced_deployment(namespace, body)
    status, error = _error(excinfo)
    assert status == 422
    assert error["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 70000: must be between 1 and 65535, inclusive",
            "field": "spec.template.spec.containers[0].ports[0].containerPort",
        }
    ]
    body = _deployment("mismatch", selector={"matchLabels": {"app": "other"}})
    with pytest.raises(ApiException) as excinfo:
        apps.create_namespaced_deployment(namespace, body)
    status, error = _error(excinfo)
    assert status == 422
    assert error["details"]["causes"][0]["field"] == "spec.template.metadata.labels"
    assert "`selector` does not match template `labels`" in error["message"]


def test_unknown_fields_of_builtins_dropped_or_refused_with_strict_validation(
    kubesim_api, namespace
):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "strict"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "bogus": 1}]},
    }
    path = f"/api/v1/namespaces/{namespace}/pods"
    status, body = kubesim_api.request("POST", path + "?fieldValidation=Strict", pod)
    assert status == 400
    assert body["message"] == ('strict decoding error: unknown field "spec.containers[0].bogus"')
    status, body = kubesim_api.request("POST", path, pod)
    assert status == 201
    assert "bogus" not in body["spec"]["containers"][0]


def test_quantities_are_stored_in_canonical_form(kube_client, namespace):
    core = client.CoreV1Api(kube_client)
    created = core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "canonical"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "resources": {"requests": {"cpu": "1000m", "memory": "1048576Ki"}},
                    }
                ]
            },
        },
    )
    assert created.spec.containers[0].resources.requests == {"cpu": "1", "memory": "1Gi"}


def test_immutable_fields_refuse_updates_with_upstream_messages(kube_client, namespace):
    batch = client.BatchV1Api(kube_client)
    core = client.CoreV1Api(kube_client)
    batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "frozen"},
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
    with pytest.raises(ApiException) as excinfo:
        batch.patch_namespaced_job(
            "frozen",
            namespace,
            {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "other"}]}}}},
        )
    status, error = _error(excinfo)
    assert status == 422
    assert error["details"]["causes"][0]["field"] == "spec.template"
    assert error["message"].endswith("field is immutable")
    core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "fixed"},
            "spec": {"clusterIP": "10.96.0.50", "ports": [{"port": 80}]},
        },
    )
    with pytest.raises(ApiException) as excinfo:
        core.patch_namespaced_service(
            "fixed", namespace, {"spec": {"clusterIP": "10.96.0.99", "clusterIPs": None}}
        )
    status, error = _error(excinfo)
    assert status == 422
    assert "may not change once set" in error["message"]


def test_status_bodies_are_byte_compatible_with_kube_apiserver(kubesim_api, namespace):
    import http.client
    import ssl

    context = ssl.create_default_context(cafile=str(kubesim_api.ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", kubesim_api.port, context=context)
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "twice"}})
    headers = {
        "Authorization": f"Bearer {kubesim_api.token}",
        "Content-Type": "application/json",
    }
    for _ in range(2):
        conn.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body, headers)
        response = conn.getresponse()
        raw = response.read()
    conn.close()
    assert response.status == 409
    assert raw == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"configmaps \\"twice\\" already exists","reason":"AlreadyExists",'
        b'"details":{"name":"twice","kind":"configmaps"},"code":409}\n'
    )
