"""Discovery documents: /version, /api, /apis, /api/v1 and /apis/GROUP/VERSION."""

from __future__ import annotations

import base64
import hashlib

from kubesim.api.registry import Registry, ResourceType, sort_versions

KUBERNETES_VERSION = "v1.37.0"

_SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "scale": ["get", "patch", "update"],
    "log": ["get"],
    "proxy": ["create", "delete", "get", "patch", "update"],
    "binding": ["create"],
    "eviction": ["create"],
    "finalize": ["update"],
    "ephemeralcontainers": ["get", "patch", "update"],
    "resize": ["get", "patch", "update"],
    "token": ["create"],
}
_SUBRESOURCE_KIND = {
    "scale": ("Scale", "autoscaling", "v1"),
    "log": ("Pod", "", ""),
    "proxy": (None, "", ""),
    "binding": ("Binding", "", ""),
    "eviction": ("Eviction", "policy", "v1"),
    "token": ("TokenRequest", "authentication.k8s.io", "v1"),
}


def version_info() -> dict:
    major, minor, _ = KUBERNETES_VERSION.lstrip("v").split(".")
    return {
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "minCompatibilityMajor": major,
        "minCompatibilityMinor": str(int(minor) - 1),
        "gitVersion": f"{KUBERNETES_VERSION}-kubesim",
        "gitCommit": "kubesim",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "python",
        "compiler": "kubesim",
        "platform": "linux/amd64",
    }


def _storage_hash(rtype: ResourceType) -> str:
    digest = hashlib.sha256(f"{rtype.group}/{rtype.storage_version}/{rtype.kind}".encode())
    return base64.b64encode(digest.digest()[:8]).decode()


def resource_entries(rtype: ResourceType) -> list[dict]:
    main: dict = {
        "name": rtype.plural,
        "singularName": rtype.singular,
        "namespaced": rtype.namespaced,
        "kind": rtype.kind,
        "verbs": list(rtype.verbs),
        "storageVersionHash": _storage_hash(rtype),
    }
    if rtype.short_names:
        main["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        main["categories"] = list(rtype.categories)
    entries = [main]
    for sub in sorted(rtype.subresources):
        kind, group, version = _SUBRESOURCE_KIND.get(sub, (rtype.kind, "", ""))
        entry: dict = {
            "name": f"{rtype.plural}/{sub}",
            "singularName": "",
            "namespaced": rtype.namespaced,
            "kind": kind
            or ("PodProxyOptions" if rtype.kind == "Pod" else f"{rtype.kind}ProxyOptions"),
            "verbs": list(_SUBRESOURCE_VERBS.get(sub, ["get"])),
        }
        if group:
            entry["group"] = group
            entry["version"] = version
        entries.append(entry)
    return entries


class Discovery:
    def __init__(self, registry: Registry):
        self.registry = registry
        # extra (group, version) -> APIResource entries (e.g. the Kueue visibility API)
        self.extra: dict[tuple[str, str], list[dict]] = {}

    def add_group(self, group: str, version: str, resources: list[dict]) -> None:
        self.extra.setdefault((group, version), []).extend(resources)

    def _group_versions(self) -> dict[str, list[str]]:
        groups = self.registry.groups()
        for group, version in self.extra:
            if not group:
                continue
            versions = groups.setdefault(group, [])
            if version not in versions:
                versions.append(version)
                groups[group] = sort_versions(versions)
        return groups

    def api_versions(self, server_address: str) -> dict:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
            ],
        }

    def _group_doc(self, group: str, versions: list[str]) -> dict:
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": entries, "preferredVersion": entries[0]}

    def api_group_list(self) -> dict:
        groups = self._group_versions()
        # core-ish groups first (as kube-apiserver orders them), then CRD groups alphabetically
        order = [
            "apps",
            "events.k8s.io",
            "batch",
            "coordination.k8s.io",
            "scheduling.k8s.io",
            "apiextensions.k8s.io",
        ]
        names = [g for g in order if g in groups] + sorted(g for g in groups if g not in order)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._group_doc(name, groups[name]) for name in names],
        }

    def api_group(self, group: str) -> dict | None:
        versions = self._group_versions().get(group)
        if not versions:
            return None
        return {"kind": "APIGroup", "apiVersion": "v1", **self._group_doc(group, versions)}

    def resource_list(self, group: str, version: str) -> dict | None:
        resources: list[dict] = []
        found = False
        for rtype in sorted(self.registry.all(), key=lambda r: r.plural):
            if rtype.group == group and version in rtype.versions:
                found = True
                resources.extend(resource_entries(rtype))
        extra = self.extra.get((group, version))
        if extra:
            found = True
            resources.extend(extra)
        if not found:
            return None
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }
