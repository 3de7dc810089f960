"""A kubesim started with --rbac, driven by the official client with ServiceAccount tokens: what a
role grants works, everything else is the 403 kube-apiserver sends, and the admin's kubeconfig
stays allowed everything."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from kubesim.testing import wait_for

from tests.kubesim.rbac.conftest import Account, grant, sa_subject

pytestmark = [pytest.mark.kubesim, pytest.mark.timeout(300)]

POD_READER = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]


def _forbidden(call, *args, **kwargs) -> str:
    """The message of the 403 Status `call` answers."""
    with pytest.raises(ApiException) as caught:
        call(*args, **kwargs)
    assert caught.value.status == 403, caught.value.body
    body = json.loads(caught.value.body)
    assert (body["kind"], body["status"], body["reason"], body["code"]) == (
        "Status",
        "Failure",
        "Forbidden",
        403,
    )
    return body["message"]


def _pod(name: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def test_a_service_account_does_what_its_role_grants_and_nothing_else(kubesim_rbac, runner):
    grant(kubesim_rbac, runner.namespace, "pod-reader", POD_READER, [sa_subject(runner)])
    core = runner.core()
    assert core.list_namespaced_pod(runner.namespace).items == []
    ns, user = runner.namespace, runner.username
    assert _forbidden(core.list_namespaced_pod, "default") == (
        f'pods is forbidden: User "{user}" cannot list resource "pods" in API group "" in the '
        f'namespace "default"'
    )
    assert _forbidden(core.delete_namespaced_pod, "p1", ns) == (
        f'pods "p1" is forbidden: User "{user}" cannot delete resource "pods" in API group "" '
        f'in the namespace "{ns}"'
    )
    assert _forbidden(core.list_namespaced_secret, ns) == (
        f'secrets is forbidden: User "{user}" cannot list resource "secrets" in API group "" '
        f'in the namespace "{ns}"'
    )
    assert _forbidden(core.list_node) == (
        f'nodes is forbidden: User "{user}" cannot list resource "nodes" in API group "" at the '
        f"cluster scope"
    )
    batch = client.BatchV1Api(runner.api_client)
    assert _forbidden(batch.create_namespaced_job, ns, {"metadata": {"name": "j"}}) == (
        f'jobs.batch is forbidden: User "{user}" cannot create resource "jobs" in API group '
        f'"batch" in the namespace "{ns}"'
    )


def test_the_admin_kubeconfig_stays_allowed_everything(admin, runner):
    core = client.CoreV1Api(admin)
    core.list_node()
    core.list_secret_for_all_namespaces()
    review = client.AuthorizationV1Api(admin).create_self_subject_access_review(
        {"spec": {"resourceAttributes": {"verb": "*", "group": "*", "resource": "*"}}}
    )
    assert review.status.allowed


def test_bindings_take_effect_at_once_and_end_when_deleted(kubesim_rbac, runner):
    core = runner.core()
    _forbidden(core.list_namespaced_pod, runner.namespace)
    grant(kubesim_rbac, runner.namespace, "pod-reader", POD_READER, [sa_subject(runner)])
    core.list_namespaced_pod(runner.namespace)
    status, _ = kubesim_rbac.request(
        "DELETE",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{runner.namespace}/rolebindings/pod-reader",
    )
    assert status == 200
    _forbidden(core.list_namespaced_pod, runner.namespace)


def test_group_subjects_and_cluster_role_bindings(kubesim_rbac, runner):
    # every ServiceAccount of the namespace, through its group, may list nodes cluster-wide
    grant(
        kubesim_rbac,
        None,
        f"nodes-{runner.namespace}",
        [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
        [{"kind": "Group", "name": f"system:serviceaccounts:{runner.namespace}"}],
    )
    runner.core().list_node()
    other = Account(kubesim_rbac, f"t-{uuid.uuid4().hex[:10]}", "runner")
    _forbidden(other.core().list_node)


def test_aggregated_cluster_roles_collect_the_rules_of_the_roles_they_select(
    kubesim_rbac, admin, runner
):
    tag = uuid.uuid4().hex[:8]
    label = f"example.com/aggregate-to-monitoring-{tag}"
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_cluster_role(
        {
            "metadata": {"name": f"monitoring-{tag}"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]},
        }
    )
    rbac.create_namespaced_role_binding(
        runner.namespace,
        {
            "metadata": {"name": "monitoring"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"monitoring-{tag}",
            },
            "subjects": [sa_subject(runner)],
        },
    )
    core = runner.core()
    _forbidden(core.list_namespaced_config_map, runner.namespace)
    rbac.create_cluster_role(
        {
            "metadata": {"name": f"monitoring-configmaps-{tag}", "labels": {label: "true"}},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
        }
    )
    aggregated = rbac.read_cluster_role(f"monitoring-{tag}")
    assert [(r.resources, r.verbs) for r in aggregated.rules] == [(["configmaps"], ["list"])]
    core.list_namespaced_config_map(runner.namespace)
    rbac.delete_cluster_role(f"monitoring-configmaps-{tag}")
    assert not rbac.read_cluster_role(f"monitoring-{tag}").rules
    _forbidden(core.list_namespaced_config_map, runner.namespace)


def test_bootstrap_view_role_is_aggregated_and_grants_reads(kubesim_rbac, admin, runner):
    view = client.RbacAuthorizationV1Api(admin).read_cluster_role("view")
    assert any("pods" in rule.resources for rule in view.rules)
    subjects = [sa_subject(runner)]
    status, body = kubesim_rbac.request(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{runner.namespace}/rolebindings",
        {
            "metadata": {"name": "view"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "view",
            },
            "subjects": subjects,
        },
    )
    assert status == 201, body
    core = runner.core()
    core.list_namespaced_pod(runner.namespace)
    core.list_namespaced_config_map(runner.namespace)
    _forbidden(core.list_namespaced_secret, runner.namespace)  # view does not read secrets
    _forbidden(core.create_namespaced_config_map, runner.namespace, {"metadata": {"name": "c"}})


def test_resource_names_allow_only_the_named_objects(kubesim_rbac, admin, runner):
    ns = runner.namespace
    admin_core = client.CoreV1Api(admin)
    for name in ("settings", "other"):
        admin_core.create_namespaced_config_map(ns, {"metadata": {"name": name}})
    grant(
        kubesim_rbac,
        ns,
        "settings",
        [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": ["settings"],
                "verbs": ["get", "list", "watch", "patch"],
            }
        ],
        [sa_subject(runner)],
    )
    core = runner.core()
    assert core.read_namespaced_config_map("settings", ns).metadata.name == "settings"
    core.patch_namespaced_config_map("settings", ns, {"data": {"k": "v"}})
    assert _forbidden(core.read_namespaced_config_map, "other", ns) == (
        f'configmaps "other" is forbidden: User "{runner.username}" cannot get resource '
        f'"configmaps" in API group "" in the namespace "{ns}"'
    )
    _forbidden(core.list_namespaced_config_map, ns)
    # a list or watch that pins metadata.name is a request for that name (informers of one object)
    pinned = core.list_namespaced_config_map(ns, field_selector="metadata.name=settings")
    assert [cm.metadata.name for cm in pinned.items] == ["settings"]
    _forbidden(core.list_namespaced_config_map, ns, field_selector="metadata.name=other")


def test_watch_is_its_own_verb(kubesim_rbac, runner):
    grant(kubesim_rbac, runner.namespace, "pod-reader", POD_READER, [sa_subject(runner)])
    core = runner.core()
    message = _forbidden(core.list_namespaced_pod, runner.namespace, watch=True)
    assert (
        f'cannot watch resource "pods" in API group "" in the namespace "{runner.namespace}"'
        in (message)
    )
    grant(
        kubesim_rbac,
        runner.namespace,
        "pod-watcher",
        [{"apiGroups": [""], "resources": ["pods"], "verbs": ["watch"]}],
        [sa_subject(runner)],
    )
    stream = watch.Watch().stream(core.list_namespaced_pod, runner.namespace, timeout_seconds=1)
    assert list(stream) == []


def test_subresources_are_authorized_apart_from_their_resource(kubesim_rbac, admin, runner):
    ns, user = runner.namespace, runner.username
    client.CoreV1Api(admin).create_namespaced_pod(ns, _pod("p1"))
    grant(
        kubesim_rbac,
        ns,
        "logs",
        [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}],
        [sa_subject(runner)],
    )
    core = runner.core()
    core.read_namespaced_pod_log("p1", ns)  # allowed (the pod has printed nothing)
    assert _forbidden(core.read_namespaced_pod, "p1", ns) == (
        f'pods "p1" is forbidden: User "{user}" cannot get resource "pods" in API group "" in '
        f'the namespace "{ns}"'
    )
    assert _forbidden(
        core.connect_get_namespaced_pod_proxy_with_path, "p1:9400", ns, "metrics"
    ) == (
        f'pods "p1:9400" is forbidden: User "{user}" cannot get resource "pods/proxy" in API '
        f'group "" in the namespace "{ns}"'
    )
    assert _forbidden(core.connect_get_namespaced_service_proxy_with_path, "web", ns, "x") == (
        f'services "web" is forbidden: User "{user}" cannot get resource "services/proxy" in '
        f'API group "" in the namespace "{ns}"'
    )
    grant(
        kubesim_rbac,
        ns,
        "proxy",
        [{"apiGroups": [""], "resources": ["pods/proxy", "services/proxy"], "verbs": ["get"]}],
        [sa_subject(runner)],
    )
    # allowed through to the server, which has no such pod port or service to proxy to here
    for path in (
        f"/api/v1/namespaces/{ns}/pods/p1:9400/proxy/metrics",
        f"/api/v1/namespaces/{ns}/services/web/proxy/x",
    ):
        assert runner.request("GET", path)[0] == 404


def test_serviceaccounts_token_lets_one_account_mint_tokens_for_another(kubesim_rbac, runner):
    ns = runner.namespace
    builder = Account(kubesim_rbac, ns, "builder")
    grant(
        kubesim_rbac,
        ns,
        "mint-builder",
        [
            {
                "apiGroups": [""],
                "resources": ["serviceaccounts/token"],
                "resourceNames": ["builder"],
                "verbs": ["create"],
            }
        ],
        [sa_subject(runner)],
    )
    core = runner.core()
    minted = core.create_namespaced_service_account_token("builder", ns, {"spec": {}})
    whoami = client.AuthenticationV1Api(kubesim_rbac.api_client(token=minted.status.token))
    assert whoami.create_self_subject_review({}).status.user_info.username == builder.username
    assert _forbidden(core.create_namespaced_service_account_token, "runner", ns, {"spec": {}}) == (
        f'serviceaccounts "runner" is forbidden: User "{runner.username}" cannot create '
        f'resource "serviceaccounts/token" in API group "" in the namespace "{ns}"'
    )


def test_non_resource_urls_follow_the_bootstrap_discovery_roles(kubesim_rbac, runner):
    for path in ("/version", "/healthz", "/api", "/apis", "/apis/batch/v1", "/openapi/v3"):
        assert runner.request("GET", path)[0] == 200, path
    status, body = runner.request("POST", "/kubesim/faults", {})
    assert (status, body["message"]) == (
        403,
        f'forbidden: User "{runner.username}" cannot post path "/kubesim/faults"',
    )
    # no credentials at all: system:anonymous, who may see health and version only
    assert kubesim_rbac.request("GET", "/healthz", token="")[0] == 200
    assert kubesim_rbac.request("GET", "/version", token="")[0] == 200
    status, body = kubesim_rbac.request("GET", "/api", token="")
    assert (status, body["message"]) == (
        403,
        'forbidden: User "system:anonymous" cannot get path "/api"',
    )
    grant(
        kubesim_rbac,
        None,
        f"metrics-{runner.namespace}",
        [{"nonResourceURLs": ["/debug/*"], "verbs": ["get"]}],
        [sa_subject(runner)],
    )
    # allowed, and then not found: kubesim serves no /debug
    assert runner.request("GET", "/debug/pprof")[0] == 404


def test_impersonation_needs_the_impersonate_verb(kubesim_rbac, runner):
    ns = runner.namespace
    as_runner = {"Impersonate-User": runner.username}
    status, body = kubesim_rbac.request(
        "GET", f"/api/v1/namespaces/{ns}/secrets", headers=as_runner
    )
    assert (status, body["message"]) == (
        403,
        f'secrets is forbidden: User "{runner.username}" cannot list resource "secrets" in API '
        f'group "" in the namespace "{ns}"',
    )
    bob = {"Impersonate-User": f"bob-{ns}"}
    status, body = runner.request("GET", f"/api/v1/namespaces/{ns}/pods", headers=bob)
    assert (status, body["message"]) == (
        403,
        f'users "bob-{ns}" is forbidden: User "{runner.username}" cannot impersonate resource '
        f'"users" in API group "" at the cluster scope',
    )
    grant(
        kubesim_rbac,
        None,
        f"impersonate-{ns}",
        [
            {
                "apiGroups": [""],
                "resources": ["users"],
                "resourceNames": [f"bob-{ns}"],
                "verbs": ["impersonate"],
            }
        ],
        [sa_subject(runner)],
    )
    grant(kubesim_rbac, ns, "bob-reads-pods", POD_READER, [{"kind": "User", "name": f"bob-{ns}"}])
    assert runner.request("GET", f"/api/v1/namespaces/{ns}/pods", headers=bob)[0] == 200
    status, review = runner.request(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {}, headers=bob
    )
    assert review["status"]["userInfo"] == {
        "username": f"bob-{ns}",
        "groups": ["system:authenticated"],
    }
    # a group the runner may not act as
    status, body = runner.request(
        "GET",
        f"/api/v1/namespaces/{ns}/pods",
        headers={**bob, "Impersonate-Group": "system:masters"},
    )
    assert status == 403
    assert body["message"].startswith('groups "system:masters" is forbidden')


def test_tokens_that_are_not_valid_answer_401(kubesim_rbac, runner):
    path = f"/api/v1/namespaces/{runner.namespace}/pods"
    grant(kubesim_rbac, runner.namespace, "pod-reader", POD_READER, [sa_subject(runner)])
    assert runner.request("GET", path)[0] == 200
    tampered = runner.token[:-4] + ("AAAA" if not runner.token.endswith("AAAA") else "BBBB")
    other_audience = kubesim_rbac.service_account_token(
        runner.namespace, runner.name, audiences=["vault"], create=False
    )
    for token in ("nonsense", tampered, other_audience):
        status, body = kubesim_rbac.request("GET", path, token=token)
        assert (status, body["reason"], body["message"]) == (401, "Unauthorized", "Unauthorized")
    # the account is gone: its tokens go with it
    status, _ = kubesim_rbac.request(
        "DELETE", f"/api/v1/namespaces/{runner.namespace}/serviceaccounts/{runner.name}"
    )
    assert status == 200
    assert runner.request("GET", path)[0] == 401


def test_an_expired_token_answers_401(kubesim_factory):
    # a thousand simulated seconds per second: an hour's token expires in under 4 s
    server = kubesim_factory(no_cluster=True, rbac=True, speed=1000)
    token = server.service_account_token("team-a", "runner", expiration_seconds=3600)
    path = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
    status, review = server.request("POST", path, {}, token=token)
    assert (status, review["status"]["userInfo"]["username"]) == (
        201,
        "system:serviceaccount:team-a:runner",
    )
    wait_for(
        lambda: server.request("POST", path, {}, token=token)[0] == 401,
        timeout=60,
        message="the token never expired",
    )


def test_legacy_token_secrets_are_filled_and_authenticate(kubesim_rbac, admin, runner):
    ns = runner.namespace
    core = client.CoreV1Api(admin)
    core.create_namespaced_secret(
        ns,
        {
            "metadata": {
                "name": "runner-token",
                "annotations": {"kubernetes.io/service-account.name": runner.name},
            },
            "type": "kubernetes.io/service-account-token",
        },
    )

    def filled():
        secret = core.read_namespaced_secret("runner-token", ns)
        return secret if (secret.data or {}).get("token") else None

    secret = wait_for(filled, message="the token controller did not fill the Secret")
    token = base64.b64decode(secret.data["token"]).decode()
    assert base64.b64decode(secret.data["namespace"]).decode() == ns
    assert b"BEGIN CERTIFICATE" in base64.b64decode(secret.data["ca.crt"])
    grant(kubesim_rbac, ns, "pod-reader", POD_READER, [sa_subject(runner)])
    path = f"/api/v1/namespaces/{ns}/pods"
    assert kubesim_rbac.request("GET", path, token=token)[0] == 200
    core.delete_namespaced_secret("runner-token", ns)
    assert kubesim_rbac.request("GET", path, token=token)[0] == 401


def test_server_side_apply_is_patch_and_creating_by_apply_also_needs_create(
    kubesim_rbac, admin, runner
):
    ns = runner.namespace
    client.CoreV1Api(admin).create_namespaced_config_map(ns, {"metadata": {"name": "present"}})
    grant(
        kubesim_rbac,
        ns,
        "patcher",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]}],
        [sa_subject(runner)],
    )

    def apply(name: str) -> tuple[int, dict]:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
        return runner.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/configmaps/{name}?fieldManager=portal&force=true",
            body,
            headers={"Content-Type": "application/apply-patch+yaml"},
        )

    assert apply("present")[0] == 200
    status, body = apply("absent")
    # kube-apiserver's create-on-update check words it with the authorizer's reason alone
    assert (status, body["message"]) == (403, 'configmaps "absent" is forbidden: ')
    grant(
        kubesim_rbac,
        ns,
        "creator",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}],
        [sa_subject(runner)],
    )
    assert apply("absent")[0] == 201


def test_logs_and_the_dcgm_exporter_proxy_of_a_running_cluster(kubesim_factory):
    server = kubesim_factory(rbac=True, speed=20)
    portal = Account(server, "gpu-portal", "portal")
    grant(
        server,
        None,
        "portal",
        [
            {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]},
        ],
        [sa_subject(portal)],
    )
    client.CoreV1Api(server.api_client()).create_namespace({"metadata": {"name": "team-a"}})
    client.BatchV1Api(portal.api_client).create_namespaced_job(
        "team-a",
        {
            "metadata": {"name": "hello"},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {"name": "main", "image": "busybox", "command": ["echo", "hi"]}
                        ],
                    }
                }
            },
        },
    )
    core = portal.core()

    def printed():
        pods = core.list_namespaced_pod("team-a").items
        try:
            return pods and "hi" in str(
                core.read_namespaced_pod_log(pods[0].metadata.name, "team-a")
            )
        except ApiException as exc:  # 400 while the container is being created
            if exc.status != 400:
                raise
            return False

    wait_for(printed, timeout=60, message="the job's pod never printed")
    exporter = core.list_namespaced_pod("gpu-operator").items[0].metadata.name
    target = f"{exporter}:9400"
    assert _forbidden(
        core.connect_get_namespaced_pod_proxy_with_path, target, "gpu-operator", "metrics"
    ) == (
        f'pods "{target}" is forbidden: User "{portal.username}" cannot get resource '
        f'"pods/proxy" in API group "" in the namespace "gpu-operator"'
    )
    grant(
        server,
        "gpu-operator",
        "portal-scrapes-dcgm",
        [
            {
                "apiGroups": [""],
                "resources": ["pods/proxy"],
                "resourceNames": [target],
                "verbs": ["get"],
            }
        ],
        [sa_subject(portal)],
    )
    metrics = core.connect_get_namespaced_pod_proxy_with_path(target, "gpu-operator", "metrics")
    assert "DCGM_FI_DEV_GPU_UTIL" in str(metrics)
