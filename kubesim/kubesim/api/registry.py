"""Registry of the resource types the server serves (built-in kinds and CRDs alike)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kubesim.api import errors

if TYPE_CHECKING:
    from kubesim.api.schema import CompiledSchema


@dataclass
class ResourceType:
    group: str  # "" for core
    kind: str
    plural: str
    singular: str
    namespaced: bool
    versions: list[str]  # served versions, preferred first
    storage_version: str
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    subresources: set[str] = field(default_factory=set)
    schemas: dict[str, CompiledSchema | None] = field(default_factory=dict)
    printer_columns: dict[str, list[dict]] = field(default_factory=dict)
    selectable_fields: dict[str, list[str]] = field(default_factory=dict)
    list_kind: str = ""
    is_crd: bool = False
    # raw openAPIV3Schema per version (for /openapi/v2 and /openapi/v3); None = permissive
    openapi_schemas: dict[str, dict | None] = field(default_factory=dict)
    # verbs beyond the standard set are rare; read-only kinds set this
    verbs: list[str] = field(
        default_factory=lambda: [
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    )
    deprecated_versions: dict[str, str] = field(default_factory=dict)  # version -> warning
    # another type whose objects this one shows (events.k8s.io Events are core Events)
    storage_key: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if not self.list_kind:
            self.list_kind = self.kind + "List"

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def store_key(self) -> tuple[str, str]:
        """Where the store keeps this type's objects."""
        return self.storage_key or (self.group, self.plural)

    @property
    def group_resource(self) -> str:
        """'jobs.batch', or 'pods' for the core group (as error messages spell it)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def api_version(self, version: str | None = None) -> str:
        version = version or self.storage_version
        return f"{self.group}/{version}" if self.group else version

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


class Registry:
    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], ResourceType] = {}
        self._by_group_kind: dict[tuple[str, str], ResourceType] = {}
        self.generation = 0  # bumped on every change, for discovery/openapi caches
        self._listeners: list = []

    def add(self, rtype: ResourceType) -> None:
        old = self._by_key.get(rtype.key)
        if old is not None:
            self._by_group_kind.pop((old.group, old.kind), None)
        self._by_key[rtype.key] = rtype
        self._by_group_kind[(rtype.group, rtype.kind)] = rtype
        self._changed()

    def remove(self, group: str, plural: str) -> ResourceType | None:
        rtype = self._by_key.pop((group, plural), None)
        if rtype is not None:
            self._by_group_kind.pop((rtype.group, rtype.kind), None)
            self._changed()
        return rtype

    def on_change(self, callback) -> None:
        self._listeners.append(callback)

    def _changed(self) -> None:
        self.generation += 1
        for callback in self._listeners:
            callback()

    def by_kind(self, api_version: str, kind: str) -> ResourceType:
        group, version = split_api_version(api_version)
        rtype = self._by_group_kind.get((group, kind))
        if rtype is None or version not in rtype.versions:
            raise errors.ApiError(
                404,
                errors.REASON_NOT_FOUND,
                f'no matches for kind "{kind}" in version "{api_version}"',
            )
        return rtype

    def try_by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, version = split_api_version(api_version)
        rtype = self._by_group_kind.get((group, kind))
        if rtype is None or version not in rtype.versions:
            return None
        return rtype

    def by_group_kind(self, group: str, kind: str) -> ResourceType | None:
        return self._by_group_kind.get((group, kind))

    def by_plural(self, group: str, version: str, plural: str) -> ResourceType:
        rtype = self._by_key.get((group, plural))
        if rtype is None or version not in rtype.versions:
            raise errors.ApiError(
                404,
                errors.REASON_NOT_FOUND,
                "the server could not find the requested resource",
                details={},
            )
        return rtype

    def by_key(self, group: str, plural: str) -> ResourceType | None:
        return self._by_key.get((group, plural))

    def all(self) -> list[ResourceType]:
        return list(self._by_key.values())

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions (preferred first), core group excluded."""
        result: dict[str, list[str]] = {}
        for rtype in self._by_key.values():
            if not rtype.group:
                continue
            versions = result.setdefault(rtype.group, [])
            for version in rtype.versions:
                if version not in versions:
                    versions.append(version)
        for group, versions in result.items():
            result[group] = sort_versions(versions)
        return result


def _version_priority(version: str) -> tuple:
    """Kubernetes version ordering: GA > beta > alpha, higher numbers first."""

    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not match:
        return (3, 0, 0, version)
    major = int(match.group(1))
    stage = {"alpha": 2, "beta": 1, None: 0}[match.group(2)]
    minor = int(match.group(3) or 0)
    return (stage, -major, -minor, version)


def sort_versions(versions: list[str]) -> list[str]:
    return sorted(versions, key=_version_priority)
