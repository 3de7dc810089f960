"""CRD schemas from ../shared/crds, parsed and compiled once per test session."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import yaml

from kubesim.api.schema import CompiledSchema

REPO = Path(__file__).resolve().parents[3]


def shared_dir() -> Path:
    return Path(os.environ.get("PORTAL_SHARED_DIR") or REPO.parent / "shared")


def crd_files() -> list[Path]:
    return sorted((shared_dir() / "crds").glob("*/*.yaml"))


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def load_crds() -> dict[tuple[str, str], dict]:
    """(group, kind) -> CRD document, for every CRD in shared/crds."""
    crds = {}
    for path in crd_files():
        with path.open() as handle:
            for doc in yaml.load_all(handle, Loader=_Loader):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    crds[(doc["spec"]["group"], doc["spec"]["names"]["kind"])] = doc
    return crds


@functools.cache
def compiled(api_version: str, kind: str) -> CompiledSchema:
    """The compiled schema of a served CRD version, e.g. ("kueue.x-k8s.io/v1beta2", "Workload")."""
    group, version = api_version.split("/")
    for item in load_crds()[(group, kind)]["spec"]["versions"]:
        if item["name"] == version:
            return CompiledSchema(item["schema"]["openAPIV3Schema"])
    raise KeyError(f"{kind} has no version {version}")
