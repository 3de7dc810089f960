"""An in-process store with the real CRDs and a hand-driven clock, for stepping the queue
controllers one reconcile at a time (no HTTP, no other controllers)."""

from __future__ import annotations

import argparse
import datetime
from dataclasses import dataclass, field
from typing import Any

import yaml
from kubesim.api import crds as crds_module
from kubesim.api.builtins import register_builtins
from kubesim.api.crds import CrdManager, read_crd_files
from kubesim.api.registry import Registry
from kubesim.api.store import Store
from kubesim.testing import vendored_crds_dir


class ManualClock:
    def __init__(self) -> None:
        self.speed = 1.0
        self._now = 1_800_000_000.0

    def time(self) -> float:
        return self._now

    def now(self) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self._now, tz=datetime.UTC)

    def advance(self, seconds: float) -> None:
        self._now += seconds

    async def sleep(self, seconds: float) -> None:  # pragma: no cover - not used when stepping
        self._now += seconds


class StubServer:
    def __init__(self, store) -> None:
        self.store = store
        self.routes: dict[tuple[str, str], Any] = {}
        self.groups: list[tuple[str, str, list]] = []

    def add_route(self, method, path, handler) -> None:
        self.routes[(method, path)] = handler

    def add_discovery_group(self, group, version, resources) -> None:
        self.groups.append((group, version, resources))

    def set_subresource_handler(self, *args) -> None:
        pass


@dataclass
class Ctx:
    server: Any
    store: Any
    clock: Any
    options: argparse.Namespace
    cluster: Any = None
    tasks: list = field(default_factory=list)


_compiled: dict = {}
_compile = crds_module.resource_type_from_crd
_crd_files: dict = {}


def _cached_resource_type(crd: dict):
    """Compiling the big CRD schemas takes seconds; tests reuse them (the types are read-only)."""
    key = ((crd.get("metadata") or {}).get("name"), id(crd.get("spec")))
    found = _compiled.get(key)
    if found is None:
        found = _compiled[key] = _compile(crd)
    return found


def make_store(*crd_dirs: str) -> tuple[Store, ManualClock]:
    registry = Registry()
    register_builtins(registry)
    clock = ManualClock()
    store = Store(registry, clock)
    crds_module.resource_type_from_crd = _cached_resource_type
    try:
        manager = CrdManager(store)
        dirs = crd_dirs or ("kueue", "volcano")
        if dirs not in _crd_files:
            _crd_files[dirs] = read_crd_files([vendored_crds_dir() / d for d in dirs])
        # create_all copies only the top level, so the spec objects (the cache key) are shared
        manager.create_all(_crd_files[dirs])
    finally:
        crds_module.resource_type_from_crd = _compile
    return store, clock


def make_ctx(*crd_dirs: str, **options) -> Ctx:
    store, clock = make_store(*crd_dirs)
    for ns in ("default", "team-a", "team-b"):
        store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return Ctx(
        server=StubServer(store), store=store, clock=clock, options=argparse.Namespace(**options)
    )


def apply_yaml(store, text: str, namespace: str = "default") -> list[dict]:
    created = []
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        ns = (doc.get("metadata") or {}).get("namespace") or namespace
        created.append(store.create(doc, namespace=ns))
    return created
