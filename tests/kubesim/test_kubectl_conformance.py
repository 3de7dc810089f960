"""Everyday admin commands of the real kubectl (v1.37) against a kubesim with a cluster, run in the
order an admin would type them; each step's output is checked. The commands that cannot work
against a simulator (exec, port-forward, cp, attach: no container process) are listed in the
README's kubesim section instead.

Run alone for the table: `pytest tests/kubesim/test_kubectl_conformance.py -s`.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest
from kubesim.testing import KubesimProcess, kubectl_path

KUBECTL = kubectl_path()
pytestmark = [pytest.mark.kubesim, pytest.mark.timeout(600)]


def _steps(ns: str) -> list[tuple[str, list[str], str | None, str]]:
    """(label, kubectl args, stdin, text the output must contain)."""
    job_yaml = f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: hello, namespace: {ns}}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: main, image: busybox, command: [sh, -c, "echo hello from kubesim"]}}]
"""
    return [
        ("version", ["version"], None, "Server Version: v1.37"),
        ("cluster-info", ["cluster-info"], None, "is running at"),
        ("api-resources", ["api-resources"], None, "poddisruptionbudgets"),
        ("api-versions", ["api-versions"], None, "metrics.k8s.io/v1beta1"),
        ("get nodes", ["get", "nodes"], None, "Ready"),
        ("describe node", ["describe", "node", "cpu-0"], None, "Allocatable:"),
        ("create namespace", ["create", "namespace", ns], None, "created"),
        ("default account", ["get", "sa", "default", "-n", ns], None, "default"),
        (
            "create deployment",
            ["create", "deployment", "web", "--image=nginx:1.27", "--replicas=2", "-n", ns],
            None,
            "created",
        ),
        (
            "rollout status",
            ["rollout", "status", "deploy/web", "-n", ns, "--timeout=60s"],
            None,
            "successfully rolled out",
        ),
        ("scale", ["scale", "deploy/web", "--replicas=3", "-n", ns], None, "scaled"),
        (
            "wait available",
            ["wait", "--for=condition=Available", "deploy/web", "-n", ns, "--timeout=60s"],
            None,
            "condition met",
        ),
        (
            "set image",
            ["set", "image", "deploy/web", "nginx=nginx:1.28", "-n", ns],
            None,
            "image updated",
        ),
        (
            "rollout status after update",
            ["rollout", "status", "deploy/web", "-n", ns, "--timeout=60s"],
            None,
            "successfully rolled out",
        ),
        ("rollout history", ["rollout", "history", "deploy/web", "-n", ns], None, "REVISION"),
        ("expose", ["expose", "deploy/web", "--port=80", "-n", ns], None, "exposed"),
        ("get all", ["get", "all", "-n", ns], None, "deployment.apps/web"),
        ("get endpoints", ["get", "endpoints", "web", "-n", ns], None, "web"),
        (
            "get endpointslices",
            ["get", "endpointslices", "-l", "kubernetes.io/service-name=web", "-n", ns],
            None,
            "web-",
        ),
        ("apply job", ["apply", "-f", "-"], job_yaml, "created"),
        (
            "wait job complete",
            ["wait", "--for=condition=complete", "job/hello", "-n", ns, "--timeout=90s"],
            None,
            "condition met",
        ),
        ("logs", ["logs", "job/hello", "-n", ns], None, "hello from kubesim"),
        ("logs -f", ["logs", "-f", "job/hello", "-n", ns], None, "hello from kubesim"),
        ("describe pod", ["describe", "pods", "-l", "job-name=hello", "-n", ns], None, "Events:"),
        ("describe deployment", ["describe", "deploy/web", "-n", ns], None, "NewReplicaSet:"),
        ("get events", ["get", "events", "-n", ns], None, "Scheduled"),
        ("events", ["events", "-n", ns], None, "Created"),
        ("label", ["label", "deploy/web", "tier=front", "-n", ns], None, "labeled"),
        ("annotate", ["annotate", "deploy/web", "owner=ops", "-n", ns], None, "annotated"),
        (
            "patch",
            ["patch", "deploy/web", "-n", ns, "-p", '{"spec":{"replicas":2}}'],
            None,
            "patched",
        ),
        ("explain", ["explain", "pod.spec.containers.resources"], None, "ResourceRequirements"),
        ("auth can-i", ["auth", "can-i", "create", "pods", "-n", ns], None, "yes"),
        ("auth whoami", ["auth", "whoami"], None, "kubesim-admin"),
        ("create token", ["create", "token", "default", "-n", ns], None, "eyJ"),
        (
            "create quota",
            ["create", "quota", "q", "--hard=requests.nvidia.com/gpu=4", "-n", ns],
            None,
            "created",
        ),
        ("describe quota", ["describe", "quota", "q", "-n", ns], None, "requests.nvidia.com/gpu"),
        (
            "create pdb",
            ["create", "pdb", "web", "--selector=app=web", "--max-unavailable=1", "-n", ns],
            None,
            "created",
        ),
        (
            "create cronjob",
            ["create", "cronjob", "tick", "--image=busybox", "--schedule=*/5 * * * *", "-n", ns],
            None,
            "created",
        ),
        ("top nodes", ["top", "nodes"], None, "CPU(cores)"),
        ("top pods", ["top", "pods", "-n", ns], None, "web-"),
        ("cordon", ["cordon", "cpu-1"], None, "cordoned"),
        (
            "drain",
            ["drain", "cpu-1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=90s"],
            None,
            "drained",
        ),
        ("uncordon", ["uncordon", "cpu-1"], None, "uncordoned"),
        ("diff", ["diff", "-f", "-"], job_yaml, ""),
        ("delete", ["delete", "deploy/web", "-n", ns], None, "deleted"),
        ("delete namespace", ["delete", "namespace", ns, "--wait=false"], None, "deleted"),
    ]


# Steps that read a status a controller fills in asynchronously.
EVENTUALLY = {"describe quota"}


def test_everyday_kubectl_commands_work_against_kubesim(tmp_path):
    assert KUBECTL is not None, "kubectl missing: install the dev extra (make test does)"
    ns = f"kc-{uuid.uuid4().hex[:6]}"
    results: list[tuple[str, bool, str]] = []
    with KubesimProcess(speed=20.0, workdir=tmp_path / "kubesim") as server:
        env = dict(os.environ, KUBECONFIG=str(server.kubeconfig), HOME=str(tmp_path))
        for label, args, stdin, expected in _steps(ns):
            # A read of what a controller writes after the fact (a quota's status) may come
            # before it, as on a real cluster: such reads are asked again for a few seconds.
            deadline = time.monotonic() + (5.0 if label in EVENTUALLY else 0.0)
            while True:
                proc = subprocess.run(
                    [KUBECTL, f"--cache-dir={tmp_path / 'cache'}", *args],
                    input=stdin,
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=150,
                )
                output = proc.stdout + proc.stderr
                # `kubectl diff` exits 1 when it finds differences: that is success
                ok = (proc.returncode == 0 or (args[0] == "diff" and proc.returncode == 1)) and (
                    expected in output
                )
                if ok or time.monotonic() >= deadline:
                    break
                time.sleep(0.25)
            results.append((label, ok, output.strip().splitlines()[-1] if output.strip() else ""))
    width = max(len(label) for label, _, _ in results)
    print(f"\nkubectl conformance: {sum(ok for _, ok, _ in results)}/{len(results)} passed")
    for label, ok, last in results:
        print(f"  {'PASS' if ok else 'FAIL'}  {label:<{width}}  {last[:90]}")
    failed = [(label, last) for label, ok, last in results if not ok]
    assert not failed, failed
