"""OpenAPI documents (/openapi/v3, /openapi/v3/apis/G/V, /openapi/v2) built from the CRD schemas
and the built-in kinds' minimal schemas.

kubectl reads the v3 group-version documents to learn that the server validates fields itself
(the `fieldValidation` parameter on each PATCH operation), so with its default --validate=strict it
sends fieldValidation=Strict and leaves validation to kubesim; `kubectl explain` reads the
schemas. /openapi/v2 is served as JSON only (kubectl's protobuf request answers 406, which
kubectl tolerates; it only uses v2 as a fallback).
"""

from __future__ import annotations

import copy
import hashlib

import orjson

from kubesim.api import upstream
from kubesim.api.discovery import KUBERNETES_VERSION
from kubesim.api.registry import Registry, ResourceType

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_BUILTIN_PACKAGES = {
    "": "io.k8s.api.core",
    "apps": "io.k8s.api.apps",
    "batch": "io.k8s.api.batch",
    "events.k8s.io": "io.k8s.api.events",
    "scheduling.k8s.io": "io.k8s.api.scheduling",
    "coordination.k8s.io": "io.k8s.api.coordination",
    "resource.k8s.io": "io.k8s.api.resource",
    "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
}

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
OBJECT_META_SCHEMA = {
    "type": "object",
    "description": "ObjectMeta is metadata that all persisted resources must have.",
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer", "format": "int64"},
        "creationTimestamp": {"type": "string", "format": "date-time"},
        "deletionTimestamp": {"type": "string", "format": "date-time"},
        "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "finalizers": {
            "type": "array",
            "items": {"type": "string"},
            "x-kubernetes-list-type": "set",
        },
        "ownerReferences": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["apiVersion", "kind", "name", "uid"],
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "name": {"type": "string"},
                    "uid": {"type": "string"},
                    "controller": {"type": "boolean"},
                    "blockOwnerDeletion": {"type": "boolean"},
                },
            },
            "x-kubernetes-list-map-keys": ["uid"],
            "x-kubernetes-list-type": "map",
            "x-kubernetes-patch-merge-key": "uid",
            "x-kubernetes-patch-strategy": "merge",
        },
        "managedFields": {
            "type": "array",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
        "selfLink": {"type": "string"},
    },
}


def definition_name(rtype: ResourceType, version: str) -> str:
    package = _BUILTIN_PACKAGES.get(rtype.group) if not rtype.is_crd else None
    if package is None:
        package = ".".join(reversed(rtype.group.split(".")))
    return f"{package}.{version}.{rtype.kind}"


def _gvk(rtype: ResourceType, version: str) -> list[dict]:
    return [{"group": rtype.group, "version": version, "kind": rtype.kind}]


def _schema_for(rtype: ResourceType, version: str, ref_prefix: str) -> dict:
    raw = rtype.openapi_schemas.get(version)
    schema = (
        copy.deepcopy(raw)
        if raw
        else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    )
    properties = (
        schema.setdefault("properties", {}) if schema.get("type", "object") == "object" else None
    )
    if properties is not None:
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties["metadata"] = (
            {"allOf": [{"$ref": ref_prefix + OBJECT_META}], "default": {}}
            if ref_prefix.startswith("#/components")
            else {"$ref": ref_prefix + OBJECT_META}
        )
    schema["x-kubernetes-group-version-kind"] = _gvk(rtype, version)
    return schema


def _upstream_definitions(
    rtype: ResourceType, version: str, ref_prefix: str, into: dict
) -> str | None:
    """Publish a built-in kind's upstream definitions (and those they refer to) into `into`;
    the kind's definition name, or None for CRDs and kinds upstream does not define."""
    if rtype.is_crd:
        return None
    name = upstream.definition_for(rtype.group, version, rtype.kind)
    if name is None:
        return None
    for dependency in upstream.closure(name):
        if dependency not in into or dependency == OBJECT_META:
            published = upstream.published(dependency, ref_prefix)
            into[dependency] = _to_v2(published) if ref_prefix == "#/definitions/" else published
    return name


def _params(names: list[str]) -> list[dict]:
    docs = {
        "dryRun": "When present, indicates that modifications should not be persisted.",
        "fieldManager": "fieldManager is a name associated with the actor or entity that is "
        "making these changes.",
        "fieldValidation": "fieldValidation instructs the server on how to handle objects in "
        "the request containing unknown or duplicate fields (Ignore, Warn, "
        "Strict).",
        "force": 'Force is going to "force" Apply requests.',
        "labelSelector": "A selector to restrict the list of returned objects by their labels.",
        "fieldSelector": "A selector to restrict the list of returned objects by their fields.",
        "watch": "Watch for changes to the described resources.",
        "resourceVersion": "resourceVersion sets a constraint on what resource versions a "
        "request may be served from.",
        "limit": "limit is a maximum number of responses to return for a list call.",
        "continue": "The continue option should be set when retrieving more results from the "
        "server.",
        "timeoutSeconds": "Timeout for the list/watch call.",
        "allowWatchBookmarks": 'allowWatchBookmarks requests watch events with type "BOOKMARK".',
        "propagationPolicy": "Whether and how garbage collection will be performed.",
        "gracePeriodSeconds": "The duration in seconds before the object should be deleted.",
    }
    types = {
        "force": "boolean",
        "watch": "boolean",
        "allowWatchBookmarks": "boolean",
        "limit": "integer",
        "timeoutSeconds": "integer",
        "gracePeriodSeconds": "integer",
    }
    return [
        {
            "name": n,
            "in": "query",
            "description": docs.get(n, n),
            "uniqueItems": True,
            "schema": {"type": types.get(n, "string")},
        }
        for n in names
    ]


def _v3_paths(rtype: ResourceType, version: str, ref: str) -> dict:
    base = f"/apis/{rtype.group}/{version}" if rtype.group else f"/api/{version}"
    ns = "/namespaces/{namespace}" if rtype.namespaced else ""
    coll = f"{base}{ns}/{rtype.plural}"
    item = f"{coll}/{{name}}"
    gvk = _gvk(rtype, version)[0]
    schema_ref = {"$ref": ref}
    body = {
        "content": {
            "application/json": {"schema": schema_ref},
            "application/yaml": {"schema": schema_ref},
        },
        "required": True,
    }
    ok = {
        "200": {"description": "OK", "content": {"application/json": {"schema": schema_ref}}},
        "401": {"description": "Unauthorized"},
    }
    patch_types = [
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/merge-patch+json",
    ]
    patch_body = {
        "content": {t: {"schema": {"type": "object"}} for t in patch_types},
        "required": True,
    }
    path_params = [
        {
            "name": "name",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "uniqueItems": True},
        }
    ]
    if rtype.namespaced:
        path_params.append(
            {
                "name": "namespace",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "uniqueItems": True},
            }
        )
    tag = f"{rtype.group or 'core'}_{version}"

    def op(action: str, verb: str, extra: dict) -> dict:
        operation = {
            "tags": [tag],
            "operationId": f"{verb}{rtype.kind}",
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
            "responses": ok,
        }
        operation.update(extra)
        return operation

    write_params = ["dryRun", "fieldManager", "fieldValidation"]
    list_params = [
        "labelSelector",
        "fieldSelector",
        "limit",
        "continue",
        "resourceVersion",
        "timeoutSeconds",
        "watch",
        "allowWatchBookmarks",
    ]
    paths = {
        coll: {
            "get": op("list", "list", {"parameters": _params(list_params)}),
            "post": op(
                "post", "create", {"parameters": _params(write_params), "requestBody": body}
            ),
            "delete": op(
                "deletecollection",
                "deleteCollection",
                {
                    "parameters": _params(
                        ["dryRun", "propagationPolicy", "labelSelector", "fieldSelector"]
                    )
                },
            ),
            "parameters": path_params[1:],
        },
        item: {
            "get": op("get", "read", {}),
            "put": op("put", "replace", {"parameters": _params(write_params), "requestBody": body}),
            "patch": op(
                "patch",
                "patch",
                {"parameters": _params([*write_params, "force"]), "requestBody": patch_body},
            ),
            "delete": op(
                "delete",
                "delete",
                {"parameters": _params(["dryRun", "propagationPolicy", "gracePeriodSeconds"])},
            ),
            "parameters": path_params,
        },
    }
    if "status" in rtype.subresources:
        paths[f"{item}/status"] = {
            "get": op("get", "readStatus", {}),
            "put": op(
                "put", "replaceStatus", {"parameters": _params(write_params), "requestBody": body}
            ),
            "patch": op(
                "patch",
                "patchStatus",
                {"parameters": _params([*write_params, "force"]), "requestBody": patch_body},
            ),
            "parameters": path_params,
        }
    if rtype.namespaced:
        paths[f"{base}/{rtype.plural}"] = {
            "get": op(
                "list", f"list{rtype.kind}ForAllNamespaces", {"parameters": _params(list_params)}
            ),
        }
    return paths


class OpenAPI:
    def __init__(self, registry: Registry):
        self.registry = registry
        self._cache: dict[str, tuple[bytes, str]] = {}
        self._generation = -1

    def _check_cache(self) -> None:
        if self._generation != self.registry.generation:
            self._cache.clear()
            self._generation = self.registry.generation

    def _gv_types(self, group: str, version: str) -> list[ResourceType]:
        return sorted(
            (r for r in self.registry.all() if r.group == group and version in r.versions),
            key=lambda r: r.plural,
        )

    def group_versions(self) -> list[tuple[str, str]]:
        result = set()
        for rtype in self.registry.all():
            for version in rtype.versions:
                result.add((rtype.group, version))
        return sorted(result)

    @staticmethod
    def gv_path(group: str, version: str) -> str:
        return f"apis/{group}/{version}" if group else f"api/{version}"

    def v3_document(self, group: str, version: str) -> tuple[bytes, str] | None:
        """(JSON bytes, hash) of one group-version document, or None if not served."""
        self._check_cache()
        key = self.gv_path(group, version)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        types = self._gv_types(group, version)
        if not types:
            return None
        schemas: dict = {OBJECT_META: OBJECT_META_SCHEMA}
        paths: dict = {}
        for rtype in types:
            name = _upstream_definitions(rtype, version, "#/components/schemas/", schemas)
            if name is None:
                name = definition_name(rtype, version)
                schemas[name] = _schema_for(rtype, version, "#/components/schemas/")
            paths.update(_v3_paths(rtype, version, f"#/components/schemas/{name}"))
        doc = {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
            "paths": paths,
            "components": {"schemas": schemas},
        }
        data = orjson.dumps(doc)
        digest = hashlib.sha512(data).hexdigest().upper()[:128]
        self._cache[key] = (data, digest)
        return self._cache[key]

    def v3_root(self) -> dict:
        paths = {}
        for group, version in self.group_versions():
            result = self.v3_document(group, version)
            if result is None:
                continue
            key = self.gv_path(group, version)
            paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={result[1]}"}
        return {"paths": paths}

    def v2_protobuf(self) -> bytes:
        """A minimal gnostic openapi_v2.Document (swagger + info, no definitions)."""

        def field(number: int, payload: bytes) -> bytes:
            return bytes([number << 3 | 2]) + _varint(len(payload)) + payload

        info = field(1, b"Kubernetes") + field(2, KUBERNETES_VERSION.encode())
        return field(1, b"2.0") + field(2, info)

    def v2_document(self) -> bytes:
        self._check_cache()
        cached = self._cache.get("v2")
        if cached is not None:
            return cached[0]
        definitions: dict = {OBJECT_META: _to_v2(OBJECT_META_SCHEMA)}
        paths: dict = {}
        for group, version in self.group_versions():
            for rtype in self._gv_types(group, version):
                name = _upstream_definitions(rtype, version, "#/definitions/", definitions)
                if name is None:
                    name = definition_name(rtype, version)
                    definitions[name] = _to_v2(_schema_for(rtype, version, "#/definitions/"))
                for path, ops in _v3_paths(rtype, version, f"#/definitions/{name}").items():
                    paths[path] = {
                        verb: {
                            k: v
                            for k, v in body.items()
                            if k not in ("requestBody", "responses", "parameters")
                        }
                        | {"responses": {"200": {"description": "OK"}}}
                        for verb, body in ops.items()
                        if verb != "parameters"
                    }
        doc = {
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
            "paths": paths,
            "definitions": definitions,
        }
        data = orjson.dumps(doc)
        self._cache["v2"] = (data, "")
        return data


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _to_v2(schema):
    """Drop what OpenAPI v2 cannot say (as kube-apiserver does when publishing CRDs in v2)."""
    if isinstance(schema, dict):
        out = {}
        for key, value in schema.items():
            if key in ("nullable", "anyOf", "oneOf", "not", "x-kubernetes-validations"):
                continue
            out[key] = _to_v2(value)
        return out
    if isinstance(schema, list):
        return [_to_v2(item) for item in schema]
    return schema
