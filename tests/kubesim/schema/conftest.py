"""The vendored CRD schemas (kubesim/crds/), parsed and compiled once per test session."""

from __future__ import annotations

import functools
from pathlib import Path

import yaml
from kubesim.api.schema import CompiledSchema
from kubesim.testing import vendored_crds_dir


def crd_files() -> list[Path]:
    return sorted(vendored_crds_dir().glob("*/*.yaml"))


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def load_crds() -> dict[tuple[str, str], dict]:
    """(group, kind) -> CRD document, for every vendored CRD."""
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
