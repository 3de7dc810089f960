"""deploy/: the kustomize overlays render, every object they hold is accepted by an API server
(kubesim: upstream schemas, Pod Security admission), and the portal's own pods meet the
restricted Pod Security Standard with probes, resources and a read-only root filesystem."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from tests.deploy.conftest import (
    COMPONENTS,
    DEPLOY,
    FIXTURES,
    OVERLAYS,
    PORTAL_NAMESPACE,
    kubectl,
    pod_templates,
    render,
    to_yaml,
)

PORTAL_COMPONENTS = {"web", "worker", "beat", "watcher", "migrate"}


def _portal_templates(objects):
    return [
        (name, t)
        for name, t in pod_templates(objects)
        if (t["metadata"].get("labels") or {}).get("app.kubernetes.io/name") == "gpu-portal"
    ]


def _by_kind_name(objects):
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_there_are_overlays_for_an_in_cluster_and_an_external_database():
    assert {"in-cluster-db", "external"} <= set(OVERLAYS)
    assert {"ingress", "servicemonitor"} <= set(COMPONENTS)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_renders_the_whole_portal(overlay):
    objects = render(overlay)
    found = _by_kind_name(objects)
    for kind, name in [
        ("Namespace", PORTAL_NAMESPACE),
        ("ServiceAccount", "gpu-portal"),
        ("Deployment", "gpu-portal-web"),
        ("Deployment", "gpu-portal-worker"),
        ("Deployment", "gpu-portal-beat"),
        ("Deployment", "gpu-portal-watcher"),
        ("Job", "gpu-portal-migrate"),
        ("Service", "gpu-portal-web"),
        ("HorizontalPodAutoscaler", "gpu-portal-web"),
        ("HorizontalPodAutoscaler", "gpu-portal-worker"),
        ("PodDisruptionBudget", "gpu-portal-web"),
        ("PodDisruptionBudget", "gpu-portal-worker"),
        ("PodDisruptionBudget", "gpu-portal-watcher"),
    ]:
        assert (kind, name) in found, f"{overlay} lacks {kind} {name}"
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    elsewhere = {("Role", "gpu-portal-metrics"), ("RoleBinding", "gpu-portal-metrics")}
    for obj in objects:
        key = (obj["kind"], obj["metadata"]["name"])
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], key
        elif key in elsewhere:  # beside the dcgm-exporter pods it scrapes
            assert obj["metadata"]["namespace"] == "gpu-operator", key
        else:
            assert obj["metadata"]["namespace"] == PORTAL_NAMESPACE, key
    datastores = {("StatefulSet", "postgres"), ("StatefulSet", "redis")}
    if overlay == "in-cluster-db":
        assert datastores <= set(found)
    else:
        assert not datastores & set(found)


def test_the_components_render_into_an_overlay(tmp_path):
    objects = render("external", tuple(COMPONENTS), workdir=tmp_path / "mine")
    found = _by_kind_name(objects)
    ingress = found[("Ingress", "gpu-portal")]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "gpu-portal-web", "port": {"name": "http"}}
    monitor = found[("ServiceMonitor", "gpu-portal")]
    assert monitor["metadata"]["namespace"] == PORTAL_NAMESPACE
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    web_service = found[("Service", "gpu-portal-web")]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= web_service["metadata"]["labels"].items()


def test_the_beat_runs_once_and_the_watcher_twice():
    found = _by_kind_name(render("external"))
    beat = found[("Deployment", "gpu-portal-beat")]
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"]["type"] == "Recreate"
    assert found[("Deployment", "gpu-portal-watcher")]["spec"]["replicas"] == 2
    # The autoscaled Deployments leave their replica count to the HPA.
    for name in ("gpu-portal-web", "gpu-portal-worker"):
        assert "replicas" not in found[("Deployment", name)]["spec"]
        hpa = found[("HorizontalPodAutoscaler", name)]
        assert hpa["spec"]["scaleTargetRef"]["name"] == name
        assert hpa["spec"]["minReplicas"] >= 2


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_meets_the_restricted_pod_security_standard(overlay):
    from kubesim.controllers.apiserver import pod_security

    templates = pod_templates(render(overlay))
    assert templates
    for name, template in templates:
        problems = pod_security.check(template["spec"], template["metadata"], "restricted")
        assert problems == [], f"{name}: {problems}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_portal_pods_are_locked_down_and_bounded(overlay):
    templates = _portal_templates(render(overlay))
    components = {t["metadata"]["labels"]["app.kubernetes.io/component"] for _, t in templates}
    assert components == PORTAL_COMPONENTS
    for name, template in templates:
        spec = template["spec"]
        assert spec["serviceAccountName"] == "gpu-portal", name
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        # The image's user by number: kubelet cannot check runAsNonRoot against a user name.
        assert spec["securityContext"]["runAsUser"] == 10001, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        tmp_volumes = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        for container in spec.get("initContainers", []) + spec["containers"]:
            where = f"{name} {container['name']}"
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["capabilities"]["drop"] == ["ALL"], where
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert mounts.get("/tmp") in tmp_volumes, f"{where}: /tmp is not an emptyDir"
            for key in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][key]), where
            refs = [next(iter(e.values()))["name"] for e in container["envFrom"]]
            assert refs[0].startswith("gpu-portal-config"), where
            assert refs[1] == "gpu-portal-secrets", where


def _container(objects, deployment):
    found = _by_kind_name(objects)
    return found[("Deployment", deployment)]["spec"]["template"]["spec"]["containers"][0]


def test_each_process_has_the_probes_that_fit_it():
    objects = render("external")
    web = _container(objects, "gpu-portal-web")
    # The image's CMD: gunicorn with uvicorn workers.
    assert "command" not in web
    assert "args" not in web
    assert web["readinessProbe"]["httpGet"]["path"] == "/healthz"  # the database answers
    assert web["livenessProbe"]["httpGet"]["path"] == "/livez"  # the process answers
    watcher = _container(objects, "gpu-portal-watcher")
    check = watcher["livenessProbe"]["exec"]["command"]
    assert check[:4] == ["python", "manage.py", "watch_cluster", "--check"]
    health = check[check.index("--health-file") + 1]
    assert watcher["command"][watcher["command"].index("--health-file") + 1] == health
    worker = _container(objects, "gpu-portal-worker")
    probe = worker["livenessProbe"]["exec"]["command"]
    assert probe[:4] == ["python", "-m", "portal.probes", "fresh"]
    config = _by_kind_name(objects)
    configmap = next(o for (k, _), o in config.items() if k == "ConfigMap")
    assert configmap["data"]["PORTAL_WORKER_HEARTBEAT_FILE"] == probe[-1]
    beat = _container(objects, "gpu-portal-beat")
    schedule = beat["command"][beat["command"].index("--schedule") + 1]
    assert beat["livenessProbe"]["exec"]["command"][-1] == schedule + "*"


def test_new_pods_wait_for_the_migrate_job():
    objects = render("external")
    for name, template in _portal_templates(objects):
        if name == "Job/gpu-portal-migrate":
            container = template["spec"]["containers"][0]
            assert container["command"] == ["python", "manage.py", "migrate", "--noinput"]
            continue
        init = template["spec"]["initContainers"]
        assert "manage.py migrate --check" in " ".join(init[0]["command"]), name


def test_the_namespace_enforces_restricted_pod_security():
    namespace = _by_kind_name(render("external"))[("Namespace", PORTAL_NAMESPACE)]
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    # Not a tenant namespace: the tenants' NetworkPolicies tell them apart by this label.
    assert "app.kubernetes.io/managed-by" not in labels


def _settings_read_from_the_environment() -> set[str]:
    from tests.test_docs import SETTING_READ

    source = (DEPLOY.parent / "portal" / "settings.py").read_text()
    names = {a or b for a, b in SETTING_READ.findall(source)}
    assert len(names) > 40  # the pattern still finds the settings
    return names


SECRET_SETTINGS = {
    "SECRET_KEY",
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "PORTAL_METRICS_TOKEN",
    "PORTAL_OIDC_CLIENT_SECRET",
    "EMAIL_HOST_PASSWORD",
}


def test_every_setting_is_in_the_config_or_the_secret():
    text = (DEPLOY / "base" / "config.env").read_text()
    listed = set(re.findall(r"^(?:# )?([A-Z][A-Z0-9_]+)=", text, flags=re.MULTILINE))
    secret_note = text.split("Secrets are not here", 1)[1].split("\n\n", 1)[0]
    for name in SECRET_SETTINGS:
        assert name in secret_note
        assert f"\n{name}=" not in text, f"{name} is a secret: it belongs in the Secret"
    # A few come from the pod itself (the downward API: its namespace).
    from_pod = {
        e["name"]
        for _, t in _portal_templates(render("external"))
        for c in t["spec"]["containers"]
        for e in c.get("env", [])
        if "fieldRef" in e.get("valueFrom", {})
    }
    missing = _settings_read_from_the_environment() - listed - SECRET_SETTINGS - from_pod
    assert not missing, f"settings missing from deploy/base/config.env: {sorted(missing)}"


# ------------------------------------------------------------- against an API server (kubesim)
@pytest.fixture(scope="module")
def cluster(kubesim):
    """kubesim (with its simulated cluster: Pod Security admission is part of it) with the
    portal's namespace and service account created for real (dry-runs of namespaced objects and
    pods need them) and a ServiceMonitor CRD."""
    found = _by_kind_name(render("external"))
    first = [found[("Namespace", PORTAL_NAMESPACE)], found[("ServiceAccount", "gpu-portal")]]
    kubectl("apply", "-f", "-", stdin=to_yaml(first), kubeconfig=kubesim.kubeconfig)
    kubectl(
        "apply",
        "-f",
        str(FIXTURES / "servicemonitor-crd.yaml"),
        kubeconfig=kubesim.kubeconfig,
    )
    return kubesim


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_api_server_accepts_every_rendered_object(cluster, overlay, tmp_path):
    objects = render(overlay, tuple(COMPONENTS), workdir=tmp_path / "mine")
    done = kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        stdin=to_yaml(objects),
        kubeconfig=cluster.kubeconfig,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "PodSecurity" not in done.stderr, done.stderr
    applied = {line.split(" ", 1)[0] for line in done.stdout.splitlines() if line}
    assert len(applied) == len(objects), done.stdout


def _pods_of(objects):
    """The pods the workloads would create (a StatefulSet's with their claims as volumes, as its
    controller adds them)."""
    pods = []
    for obj in objects:
        template = (obj.get("spec") or {}).get("template")
        if obj["kind"] not in ("Deployment", "StatefulSet", "Job") or not template:
            continue
        spec = copy.deepcopy(template["spec"])
        for claim in obj["spec"].get("volumeClaimTemplates", []):
            name = claim["metadata"]["name"]
            spec.setdefault("volumes", []).append(
                {
                    "name": name,
                    "persistentVolumeClaim": {"claimName": f"{name}-{obj['metadata']['name']}-0"},
                }
            )
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    **template["metadata"],
                    "name": f"{obj['metadata']['name']}-probe",
                    "namespace": obj["metadata"]["namespace"],
                },
                "spec": spec,
            }
        )
    return pods


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_namespace_admits_the_pods_and_refuses_a_pod_that_is_not_restricted(cluster, overlay):
    pods = _pods_of(render(overlay))
    done = kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        stdin=to_yaml(pods),
        kubeconfig=cluster.kubeconfig,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # The control: the same pod with its security context removed is refused, so the namespace
    # really enforces the standard.
    loose = copy.deepcopy(pods[0])
    loose["metadata"]["name"] = "loose"
    loose["spec"].pop("securityContext")
    for container in loose["spec"]["containers"] + loose["spec"].get("initContainers", []):
        container.pop("securityContext")
    refused = kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        stdin=yaml.safe_dump(loose),
        kubeconfig=cluster.kubeconfig,
        check=False,
    )
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr
