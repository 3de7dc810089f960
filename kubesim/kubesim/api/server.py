"""The HTTPS front end: one generic handler family for every resource in the registry.

Paths follow kube-apiserver: /api/v1[/namespaces/NS]/PLURAL[/NAME[/SUBRESOURCE]] and
/apis/GROUP/VERSION/... ; discovery, OpenAPI, health and the kubesim admin routes sit beside them.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import time
import traceback
from urllib.parse import unquote

import orjson
import yaml
from aiohttp import web

from kubesim.api import errors, protobuf, selectors, tables
from kubesim.api import patch as patch_module
from kubesim.api.auth import apis as auth_apis
from kubesim.api.auth.escalation import CURRENT_USER
from kubesim.api.auth.layer import AuthLayer
from kubesim.api.builtins import EVENT_FIELDS_V1_TO_CORE
from kubesim.api.discovery import Discovery, version_info
from kubesim.api.openapi import OpenAPI
from kubesim.api.registry import ResourceType
from kubesim.api.store import Store, check_metadata_shape
from kubesim.api.watch import Watcher, WatchEvent
from kubesim.clock import SimClock

log = logging.getLogger("kubesim.server")

JSON = "application/json"
OPENAPI_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+json": "apply",
}
WATCH_QUEUE_LIMIT = 50_000  # events a watcher may fall behind before it is closed
BOOKMARK_INTERVAL = 10.0  # seconds between BOOKMARK events on an idle watch


def _json_response(body, status: int = 200, headers: dict | None = None) -> web.Response:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    return web.Response(body=data, status=status, content_type=JSON, headers=headers)


def error_response(exc: errors.ApiError) -> web.Response:
    return _json_response(exc.body(), status=exc.code)


class _YamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """YAML as Kubernetes reads it: timestamps stay strings (no datetime objects)."""


_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _load_yaml(raw: bytes):
    # Clients (the python client, kubectl) send apply bodies as JSON under the YAML media type;
    # the API server reads JSON as JSON, and a YAML parser took 5 % of kubesim's time at scale.
    if raw.lstrip()[:1] in (b"{", b"["):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # YAML flow style that is not JSON
    return yaml.load(raw, Loader=_YamlLoader)  # noqa: S506 - _YamlLoader is a SafeLoader subclass


def _event_field_to_core(path: str) -> str:
    first, dot, rest = path.partition(".")
    return EVENT_FIELDS_V1_TO_CORE.get(first, first) + dot + rest


def _int_param(query, name: str) -> int | None:
    value = query.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f'{name}: Invalid value: "{value}": must be an integer') from None


def _bool(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1", "yes")


class _Request:
    """What the generic handler parsed from a resource path."""

    __slots__ = ("name", "namespace", "rest", "rtype", "subresource", "version", "watch_path")

    def __init__(self, rtype, version, namespace, name, subresource, rest, watch_path):
        self.rtype: ResourceType = rtype
        self.version: str = version
        self.namespace: str | None = namespace
        self.name: str | None = name
        self.subresource: str | None = subresource
        self.rest: str = rest
        self.watch_path: bool = watch_path


class KubeServer:
    def __init__(
        self, store: Store, *, token: str, clock: SimClock | None = None, rbac: bool = False
    ):
        self.store = store
        self.clock = clock or store.clock
        self.token = token
        self.discovery = Discovery(store.registry)
        self.openapi = OpenAPI(store.registry)
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._extra_routes = web.UrlDispatcher()
        self._subresource_handlers: dict[tuple[str, str, str], object] = {}
        self._unavailable_until = 0.0
        self._drop_until = 0.0
        # Writes (POST/PUT/PATCH) whose path contains _write_delay_path wait this long first,
        # as on a loaded API server (0: off).
        self._write_delay = 0.0
        self._write_delay_path = ""
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.server_address = "127.0.0.1"
        self._watch_tasks: set[asyncio.Task] = set()
        self.stopping = False
        # authentication always; RBAC authorization with rbac=True (else everything is allowed)
        self.auth = AuthLayer(store, token, rbac=rbac)
        auth_apis.install(self)

    # ------------------------------------------------------------------ extension points
    def add_route(self, method: str, path: str, handler) -> None:
        """Add a handler (`async def h(request) -> web.StreamResponse`) behind the token check."""
        self._extra_routes.add_route(method, path, handler)

    def set_subresource_handler(
        self, api_version: str, kind: str, subresource: str, handler
    ) -> None:
        """handler(request, namespace, name, rest_path) for e.g. ("v1", "Pod", "log")."""
        group = api_version.rpartition("/")[0]
        self._subresource_handlers[(group, kind, subresource)] = handler

    def add_discovery_group(self, group: str, version: str, resources: list[dict]) -> None:
        self.discovery.add_group(group, version, resources)

    # ------------------------------------------------------------------ lifecycle
    async def start(self, host: str, port: int, ssl_context=None) -> int:
        self._runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, host, port, ssl_context=ssl_context, reuse_address=True, backlog=1024
        )
        await site.start()
        sockets = site._server.sockets if site._server else []
        self.port = sockets[0].getsockname()[1] if sockets else port
        self.server_address = f"{host}:{self.port}"
        return self.port

    async def stop(self) -> None:
        self.stopping = True
        self.store.close_watchers()
        if self._runner is not None:
            await self._runner.cleanup()

    # ------------------------------------------------------------------ faults
    def apply_faults(self, body: dict) -> dict:
        now = time.monotonic()
        if "unavailable_seconds" in body:
            self._unavailable_until = now + float(body["unavailable_seconds"])
        if "drop_connections_seconds" in body:
            self._drop_until = now + float(body["drop_connections_seconds"])
        if "write_delay_seconds" in body:
            self._write_delay = max(0.0, float(body["write_delay_seconds"]))
            self._write_delay_path = str(body.get("write_delay_path") or "")
        if body.get("close_watches"):
            self.store.close_watchers()
        if body.get("expire_history"):
            self.store.expire_history()
        return {
            "unavailable_seconds": max(0.0, self._unavailable_until - now),
            "drop_connections_seconds": max(0.0, self._drop_until - now),
            "write_delay_seconds": self._write_delay,
            "resourceVersion": str(self.store.resource_version),
        }

    # ------------------------------------------------------------------ dispatch
    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            user = request[auth_apis.USER_KEY] = self.auth.check(request)
        except errors.ApiError as exc:
            return error_response(exc)
        # what the store's RBAC admission (escalation check) reads; each request is its own task
        CURRENT_USER.set(user)
        path = request.path
        if path == "/kubesim/faults" and request.method == "POST":
            try:
                body = orjson.loads(await request.read() or b"{}")
            except orjson.JSONDecodeError:
                return error_response(errors.bad_request("fault body must be JSON"))
            return _json_response(self.apply_faults(body))
        now = time.monotonic()
        if now < self._drop_until:
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError
        if now < self._unavailable_until:
            return error_response(errors.service_unavailable())
        if (
            self._write_delay
            and request.method in ("POST", "PUT", "PATCH")
            and self._write_delay_path in path
        ):
            await asyncio.sleep(self._write_delay)
        # warnings of in-process writes made between requests belong to no client
        self.store.warnings = []
        try:
            return await self._route(request, path)
        except errors.ApiError as exc:
            return error_response(exc)
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as exc:
            log.error("internal error on %s %s:\n%s", request.method, path, traceback.format_exc())
            return error_response(errors.internal(str(exc)))

    async def _route(self, request: web.Request, path: str) -> web.StreamResponse:
        parts = [unquote(p) for p in path.strip("/").split("/")] if path != "/" else []
        if parts and parts[0] in ("api", "apis"):
            response = await self._api(request, parts)
            if response is not None:
                return response
        match = await self._extra_routes.resolve(request)
        if match.http_exception is None:
            match.add_app(self.app)
            request._match_info = match  # handlers read request.match_info
            return await match.handler(request)
        if parts == ["version"]:
            return _json_response(version_info())
        if parts and parts[0] in ("healthz", "livez", "readyz"):
            return web.Response(text="ok")
        if parts and parts[0] == "openapi":
            return self._openapi(request, parts)
        if not parts:
            return _json_response(
                {
                    "paths": [
                        "/api",
                        "/api/v1",
                        "/apis",
                        "/openapi/v2",
                        "/openapi/v3",
                        "/version",
                        "/healthz",
                    ]
                }
            )
        raise errors.ApiError(
            404,
            errors.REASON_NOT_FOUND,
            "the server could not find the requested resource",
            details={},
        )

    def _openapi(self, request: web.Request, parts: list[str]) -> web.Response:
        if parts == ["openapi", "v2"]:
            accept = request.headers.get("Accept", "")
            if "protobuf" in accept and "json" not in accept:
                # kubectl asks for protobuf only; it needs v2 just to look up kinds the v3
                # documents lack (and then skips client-side validation for them)
                return web.Response(
                    body=self.openapi.v2_protobuf(), content_type=OPENAPI_V2_PROTOBUF
                )
            return _json_response(self.openapi.v2_document())
        if parts == ["openapi", "v3"]:
            return _json_response(self.openapi.v3_root())
        if len(parts) >= 4 and parts[:2] == ["openapi", "v3"]:
            if parts[2] == "api" and len(parts) == 4:
                result = self.openapi.v3_document("", parts[3])
            elif parts[2] == "apis" and len(parts) == 5:
                result = self.openapi.v3_document(parts[3], parts[4])
            else:
                result = None
            if result is not None:
                headers = (
                    {"Cache-Control": "public, immutable"}
                    if request.query.get("hash") == result[1]
                    else {}
                )
                headers["Etag"] = f'"{result[1]}"'
                return _json_response(result[0], headers=headers)
        raise errors.ApiError(
            404,
            errors.REASON_NOT_FOUND,
            "the server could not find the requested resource",
            details={},
        )

    async def _api(self, request: web.Request, parts: list[str]) -> web.StreamResponse | None:
        """Discovery and resource requests under /api and /apis (None: not ours)."""
        registry = self.store.registry
        method = request.method
        if parts[0] == "api":
            if len(parts) == 1:
                return _json_response(self.discovery.api_versions(self.server_address))
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 1:
                return _json_response(self.discovery.api_group_list())
            if len(parts) == 2:
                doc = self.discovery.api_group(parts[1])
                if doc is None:
                    return None
                return _json_response(doc)
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            doc = self.discovery.resource_list(group, version)
            if doc is None:
                return None
            return _json_response(doc)
        watch_path = False
        if rest[0] == "watch":
            watch_path = True
            rest = rest[1:]
        namespace = None
        if (
            rest
            and rest[0] == "namespaces"
            and len(rest) >= 3
            and not (group == "" and rest[2] in ("status", "finalize"))
        ):
            namespace = rest[1]
            rest = rest[2:]
        if not rest:
            return None
        plural = rest[0]
        rtype = registry.by_key(group, plural)
        if rtype is None or version not in rtype.versions:
            return None
        if not rtype.namespaced and namespace is not None:
            return None
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        remainder = "/".join(rest[3:])
        req = _Request(rtype, version, namespace, name, subresource, remainder, watch_path)
        if subresource is not None:
            return await self._subresource(request, req)
        if name is None:
            if method == "GET":
                if watch_path or _bool(request.query.get("watch")):
                    return await self._watch(request, req)
                return self._list(request, req)
            if method == "POST":
                return await self._create(request, req)
            if method == "DELETE":
                return await self._delete_collection(request, req)
            raise errors.method_not_allowed()
        if watch_path and method == "GET":
            return await self._watch(request, req)
        if method == "GET":
            return self._get(request, req)
        if method == "PUT":
            return await self._update(request, req)
        if method == "PATCH":
            return await self._patch(request, req)
        if method == "DELETE":
            return await self._delete(request, req)
        raise errors.method_not_allowed()

    # ------------------------------------------------------------------ helpers
    def _headers(self, req: _Request) -> dict | None:
        warnings = []
        deprecation = req.rtype.deprecated_versions.get(req.version)
        if deprecation:
            warnings.append(deprecation)
        warnings.extend(self.store.warnings)
        self.store.warnings = []
        if not warnings:
            return None
        return {
            "Warning": ", ".join(
                '299 - "' + w.replace("\\", "\\\\").replace('"', '\\"') + '"' for w in warnings
            )
        }

    def _render(self, req: _Request, obj: dict) -> dict:
        return self.store.render(req.rtype, obj, req.version)

    async def _body(self, request: web.Request) -> dict | list:
        raw = await request.read()
        if not raw:
            raise errors.bad_request("the request body is empty")
        content_type = request.content_type
        if "protobuf" in content_type:
            # kubectl's typed clients (create namespace/configmap/secret/serviceaccount)
            try:
                return protobuf.decode(raw)
            except protobuf.ProtobufError as exc:
                raise errors.ApiError(
                    415,
                    errors.REASON_UNSUPPORTED_MEDIA_TYPE,
                    f"kubesim accepts JSON and YAML bodies ({exc}); send application/json",
                ) from None
        if "cbor" in content_type:
            raise errors.unsupported_media_type(content_type)
        try:
            if "yaml" in content_type:
                body = _load_yaml(raw)
            else:
                body = orjson.loads(raw)
        except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"the request body could not be decoded: {exc}") from None
        if not isinstance(body, dict | list):
            raise errors.bad_request("the request body must be an object")
        if isinstance(body, dict):
            check_metadata_shape(body)
        return body

    @staticmethod
    def _field_manager(request: web.Request) -> str:
        manager = request.query.get("fieldManager")
        if manager:
            if len(manager) > 128:
                raise errors.bad_request("fieldManager: Too long: may not be more than 128 bytes")
            return manager
        agent = request.headers.get("User-Agent", "unknown")
        return agent.split("/", 1)[0] or "unknown"

    @staticmethod
    def _dry_run(request: web.Request) -> bool:
        values = request.query.getall("dryRun", [])
        for value in values:
            if value != "All":
                raise errors.bad_request(
                    f'dryRun: Unsupported value: "{value}": supported values: "All"'
                )
        return bool(values)

    @staticmethod
    def _field_validation(request: web.Request) -> str:
        value = request.query.get("fieldValidation") or "Warn"
        if value not in ("Ignore", "Warn", "Strict"):
            raise errors.bad_request(
                f'fieldValidation: Unsupported value: "{value}": '
                f'supported values: "Ignore", "Strict", "Warn"'
            )
        return value

    def _table_wanted(self, request: web.Request) -> str | None:
        accept = request.headers.get("Accept", "")
        if "as=Table" in accept:
            return "Table"
        if "as=PartialObjectMetadata" in accept:
            return "PartialObjectMetadata"
        return None

    def _check_body_identity(self, req: _Request, body: dict) -> None:
        api_version = body.get("apiVersion")
        kind = body.get("kind")
        expected = req.rtype.api_version(req.version)
        if not req.rtype.is_crd:
            # built-in kinds decode with the request path's kind as default, as kube-apiserver
            if not kind:
                kind = body["kind"] = req.rtype.kind
            if not api_version:
                api_version = body["apiVersion"] = expected
        if not kind:
            raise errors.bad_request(
                "Object 'Kind' is missing in '" + orjson.dumps(body).decode()[:200] + "'"
            )
        if kind != req.rtype.kind or api_version != expected:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({expected})"
                if api_version != expected
                else f"the kind in the data ({kind}) does not match the expected kind "
                f"({req.rtype.kind})"
            )

    # ------------------------------------------------------------------ reads
    def _get(self, request: web.Request, req: _Request) -> web.Response:
        obj = self.store.get_raw(req.rtype, req.namespace, req.name)
        obj = self._render(req, obj)
        wanted = self._table_wanted(request)
        if wanted == "Table":
            table = tables.build_table(
                req.rtype,
                req.version,
                [obj],
                now=self.clock.now(),
                include_object=request.query.get("includeObject", "Metadata"),
                list_metadata={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
            )
            return _json_response(table, headers=self._headers(req))
        if wanted == "PartialObjectMetadata":
            return _json_response(tables.partial_metadata(obj), headers=self._headers(req))
        return _json_response(obj, headers=self._headers(req))

    def _selectors(self, request: web.Request, req: _Request):
        label_reqs = selectors.parse_label_selector(request.query.get("labelSelector"))
        field_reqs = selectors.parse_field_selector(request.query.get("fieldSelector"))
        if field_reqs:
            allowed = list(selectors.BASE_FIELDS)
            allowed.extend(selectors.BUILTIN_FIELDS.get((req.rtype.group, req.rtype.kind), ()))
            allowed.extend(p.lstrip(".") for p in req.rtype.selectable_fields.get(req.version, []))
            selectors.check_fields_supported(field_reqs, allowed, req.rtype.plural, req.version)
            if req.rtype.storage_key is not None:
                # events.k8s.io field names, looked up on the stored core/v1 Event
                field_reqs = [
                    (_event_field_to_core(path), op, value) for path, op, value in field_reqs
                ]
            if not req.rtype.namespaced:
                field_reqs = [r for r in field_reqs if r[0] != "metadata.namespace" or r[2]]
        return label_reqs, field_reqs

    def _list(self, request: web.Request, req: _Request) -> web.Response:
        query = request.query
        label_reqs, field_reqs = self._selectors(request, req)
        current = self.store.resource_version
        rv = query.get("resourceVersion")
        match = query.get("resourceVersionMatch")
        if rv not in (None, "", "0"):
            try:
                rv_int = int(rv)
            except ValueError:
                raise errors.bad_request(
                    f'resourceVersion: Invalid value: "{rv}": must be an integer'
                ) from None
            if rv_int > current:
                raise errors.too_large_resource_version(rv_int, current)
            if (
                match == "Exact"
                and rv_int != current
                and rv_int < self.store.oldest_resource_version
            ):
                raise errors.gone(f"too old resource version: {rv_int} ({current})")
        start_after = None
        token = query.get("continue")
        if token:
            try:
                state = orjson.loads(base64.urlsafe_b64decode(token.encode() + b"=="))
                start_after = (state["ns"], state["name"])
            except (ValueError, KeyError, TypeError):
                raise errors.bad_request(
                    "continue key is not valid: incorrect encoded start "
                    "resourceVersion (version meta.k8s.io/v1)"
                ) from None
        limit = _int_param(query, "limit") or 0
        # With a selector the API server does not count what the later pages hold (it leaves
        # remainingItemCount unset), so a page stops at limit + 1 matches (+1: "is there more").
        selected = bool(label_reqs or field_reqs)
        items = self.store.select(
            req.rtype,
            req.namespace,
            label_reqs,
            field_reqs,
            start_after=start_after,
            limit=limit + 1 if limit > 0 and selected else None,
        )
        meta: dict = {"resourceVersion": str(current)}
        if limit > 0 and len(items) > limit:
            remaining = len(items) - limit
            items = items[:limit]
            last = items[-1]["metadata"]
            meta["continue"] = (
                base64.urlsafe_b64encode(
                    orjson.dumps(
                        {
                            "rv": current,
                            "ns": last.get("namespace", ""),
                            "name": last["name"],
                        }
                    )
                )
                .decode()
                .rstrip("=")
            )
            if not selected:
                meta["remainingItemCount"] = remaining
        if req.version != req.rtype.storage_version or req.rtype.storage_key is not None:
            items = [self._render(req, obj) for obj in items]
        wanted = self._table_wanted(request)
        if wanted == "Table":
            table = tables.build_table(
                req.rtype,
                req.version,
                items,
                now=self.clock.now(),
                include_object=query.get("includeObject", "Metadata"),
                list_metadata=meta,
            )
            return _json_response(table, headers=self._headers(req))
        if wanted == "PartialObjectMetadata":
            items = [tables.partial_metadata(obj) for obj in items]
            return _json_response(
                {
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": meta,
                    "items": items,
                },
                headers=self._headers(req),
            )
        body = {
            "kind": req.rtype.list_kind,
            "apiVersion": req.rtype.api_version(req.version),
            "metadata": meta,
            "items": items,
        }
        return _json_response(body, headers=self._headers(req))

    # ------------------------------------------------------------------ watch
    async def _watch(self, request: web.Request, req: _Request) -> web.StreamResponse:
        query = request.query
        label_reqs, field_reqs = self._selectors(request, req)
        if req.name is not None:
            field_reqs = [*field_reqs, ("metadata.name", "=", req.name)]
        matches = None
        if label_reqs or field_reqs:

            def matches(obj: dict) -> bool:
                return (
                    not label_reqs
                    or selectors.labels_match(label_reqs, obj["metadata"].get("labels"))
                ) and (not field_reqs or selectors.fields_match(field_reqs, obj))

        timeout = query.get("timeoutSeconds")
        timeout_s = (
            float(_int_param(query, "timeoutSeconds"))
            if timeout
            # Spread like the API server spreads watch timeouts; not a security use.
            else random.uniform(1800, 3600)  # noqa: S311
        )
        bookmarks = _bool(query.get("allowWatchBookmarks"))
        send_initial = query.get("sendInitialEvents")
        rv = query.get("resourceVersion")
        table = self._table_wanted(request) == "Table"
        include_object = query.get("includeObject", "Metadata")
        store = self.store
        namespace = req.namespace if req.rtype.namespaced else None
        watcher = Watcher(req.rtype.store_key, namespace, matches, max_queue=WATCH_QUEUE_LIMIT)
        initial: list[dict] = []
        expired = False
        from_now = rv in (None, "", "0")
        if _bool(send_initial) or (from_now and send_initial is None):
            # the current state as synthetic ADDED events, then changes
            initial = store.select(req.rtype, namespace, label_reqs, field_reqs)
        elif not from_now:
            try:
                rv_int = int(rv)
            except ValueError:
                raise errors.bad_request(f'resourceVersion: Invalid value: "{rv}"') from None
            history = store.history_since(rv_int)
            if history is None:
                expired = True
            else:
                for event in history:
                    if event.key == req.rtype.store_key:
                        watcher.offer(event)
        response = web.StreamResponse(status=200, headers={"Content-Type": JSON})
        headers = self._headers(req)
        if headers:
            response.headers.update(headers)
        response.enable_chunked_encoding()
        if expired:
            await response.prepare(request)
            status = errors.gone(
                f"too old resource version: {rv} ({store.oldest_resource_version + 1})"
            ).status()
            await response.write(orjson.dumps({"type": "ERROR", "object": status}) + b"\n")
            await response.write_eof()
            return response
        store.add_watcher(watcher)
        task = asyncio.current_task()
        if task is not None:
            self._watch_tasks.add(task)
        version = req.version
        rtype = req.rtype
        now = self.clock.now

        def render(obj: dict) -> dict:
            return store.render(rtype, obj, version)

        def encode(event_type: str, obj: dict | None, event: WatchEvent | None) -> bytes:
            if table:
                source = render(obj if obj is not None else event.obj)
                payload = tables.build_table(
                    rtype,
                    version,
                    [source],
                    now=now(),
                    include_object=include_object,
                    with_definitions=False,
                )
                payload["metadata"] = {
                    "resourceVersion": source["metadata"].get("resourceVersion", "")
                }
                return orjson.dumps({"type": event_type, "object": payload})
            if event is not None:
                data = event.object_bytes(rtype.api_version(version), render)
            else:
                data = orjson.dumps(render(obj))
            return b'{"type":"' + event_type.encode() + b'","object":' + data + b"}"

        def bookmark(extra: dict | None = None) -> bytes:
            meta: dict = {"resourceVersion": str(store.resource_version)}
            if extra:
                meta["annotations"] = extra
            return orjson.dumps(
                {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": rtype.kind,
                        "apiVersion": rtype.api_version(version),
                        "metadata": meta,
                    },
                }
            )

        try:
            await response.prepare(request)
            chunks = [encode("ADDED", obj, None) for obj in initial]
            if table and chunks:
                # the first event carries the column definitions, as kube-apiserver does
                first = tables.build_table(
                    rtype, version, [render(initial[0])], now=now(), include_object=include_object
                )
                first["metadata"] = {
                    "resourceVersion": initial[0]["metadata"].get("resourceVersion", "")
                }
                chunks[0] = orjson.dumps({"type": "ADDED", "object": first})
            if _bool(send_initial) and bookmarks:
                chunks.append(bookmark({"k8s.io/initial-events-end": "true"}))
            if chunks:
                await response.write(b"\n".join(chunks) + b"\n")
            deadline = time.monotonic() + timeout_s
            last_write = time.monotonic()
            first_table_sent = bool(initial)
            while not self.stopping:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if bookmarks:
                        # as kube-apiserver: a last bookmark just before the timeout closes it
                        await response.write(bookmark() + b"\n")
                    break
                wait = min(remaining, BOOKMARK_INTERVAL) if bookmarks else remaining
                await watcher.wait(wait)
                if watcher.queue:
                    events = watcher.drain()
                    out = []
                    for event_type, event in events:
                        if table and not first_table_sent:
                            source = render(event.obj)
                            payload = tables.build_table(
                                rtype, version, [source], now=now(), include_object=include_object
                            )
                            payload["metadata"] = {"resourceVersion": str(event.rv)}
                            out.append(orjson.dumps({"type": event_type, "object": payload}))
                            first_table_sent = True
                        else:
                            out.append(encode(event_type, None, event))
                    await response.write(b"\n".join(out) + b"\n")
                    last_write = time.monotonic()
                elif watcher.closed:
                    break
                elif bookmarks and time.monotonic() - last_write >= BOOKMARK_INTERVAL - 0.01:
                    await response.write(bookmark() + b"\n")
                    last_write = time.monotonic()
            if not watcher.closed or not watcher.overflowed:
                await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            watcher.close()
            if task is not None:
                self._watch_tasks.discard(task)
        return response

    # ------------------------------------------------------------------ writes
    async def _create(self, request: web.Request, req: _Request) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be an object")
        self._check_body_identity(req, body)
        if req.rtype.namespaced and req.namespace is None:
            raise errors.ApiError(
                404,
                errors.REASON_NOT_FOUND,
                "the server could not find the requested resource",
                details={},
            )
        created = self.store.create(
            body,
            namespace=req.namespace,
            field_manager=self._field_manager(request),
            dry_run=self._dry_run(request),
            field_validation=self._field_validation(request),
        )
        return _json_response(created, status=201, headers=self._headers(req))

    async def _update(
        self, request: web.Request, req: _Request, subresource: str | None = None
    ) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be an object")
        self._check_body_identity(req, body)
        meta = body.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != req.name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({req.name})"
            )
        meta["name"] = req.name
        if req.rtype.namespaced:
            if meta.get("namespace") and meta["namespace"] != req.namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match "
                    "the namespace sent on the request"
                )
            meta["namespace"] = req.namespace
        updated = self.store.update(
            body,
            subresource=subresource,
            field_manager=self._field_manager(request),
            dry_run=self._dry_run(request),
            field_validation=self._field_validation(request),
        )
        return _json_response(updated, headers=self._headers(req))

    async def _patch(
        self, request: web.Request, req: _Request, subresource: str | None = None
    ) -> web.Response:
        content_type = request.content_type
        patch_type = _PATCH_TYPES.get(content_type)
        if patch_type is None or (patch_type == "strategic" and req.rtype.is_crd):
            raise errors.unsupported_media_type(content_type)
        raw = await request.read()
        try:
            if patch_type == "apply":
                body = _load_yaml(raw) if raw else None
            else:
                body = orjson.loads(raw) if raw else None
        except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"error decoding patch: {exc}") from None
        if body is None:
            raise errors.bad_request("the patch body is empty")
        force = _bool(request.query.get("force"))
        if force and patch_type != "apply":
            raise errors.bad_request("force: Forbidden: may not be specified for non-apply patch")
        created = (
            patch_type == "apply"
            and subresource is None
            and self.store.try_get_raw(req.rtype, req.namespace, req.name) is None
        )
        if created:
            self.auth.check_create_on_apply(request, request[auth_apis.USER_KEY])
        manager = request.query.get("fieldManager")
        if patch_type != "apply":
            manager = self._field_manager(request)
        patched = self.store.patch(
            req.rtype.api_version(req.version),
            req.rtype.kind,
            req.namespace,
            req.name,
            body,
            patch_type=patch_type,
            subresource=subresource,
            field_manager=manager,
            force=force,
            dry_run=self._dry_run(request),
            field_validation=self._field_validation(request),
        )
        return _json_response(patched, status=201 if created else 200, headers=self._headers(req))

    async def _delete_options(self, request: web.Request) -> dict:
        raw = await request.read() if request.can_read_body else b""
        options: dict = {}
        if raw:
            try:
                # kubectl's typed clients send DeleteOptions as protobuf
                options = protobuf.decode_body(raw, request.content_type)
            except ValueError:
                raise errors.bad_request("the DeleteOptions body could not be decoded") from None
            if not isinstance(options, dict):
                raise errors.bad_request("the DeleteOptions body must be an object")
        query = request.query
        if query.get("propagationPolicy"):
            options["propagationPolicy"] = query["propagationPolicy"]
        if query.get("gracePeriodSeconds"):
            options["gracePeriodSeconds"] = _int_param(query, "gracePeriodSeconds")
        if query.get("orphanDependents"):
            options["orphanDependents"] = _bool(query["orphanDependents"])
        if query.getall("dryRun", []):
            options["dryRun"] = query.getall("dryRun")
        return options

    @staticmethod
    def _propagation(options: dict) -> str:
        policy = options.get("propagationPolicy")
        if policy:
            return policy
        if options.get("orphanDependents") is True:
            return "Orphan"
        return "Background"

    async def _delete(self, request: web.Request, req: _Request) -> web.Response:
        options = await self._delete_options(request)
        grace = options.get("gracePeriodSeconds")
        deleted = self.store.delete(
            req.rtype.api_version(req.version),
            req.rtype.kind,
            req.namespace,
            req.name,
            propagation=self._propagation(options),
            grace=grace is None or grace > 0,
            grace_seconds=grace,
            preconditions=options.get("preconditions"),
            dry_run=bool(options.get("dryRun")),
        )
        status = (
            202
            if deleted["metadata"].get("deletionTimestamp")
            and self.store.try_get(
                req.rtype.api_version(req.version), req.rtype.kind, req.namespace, req.name
            )
            is not None
            else 200
        )
        return _json_response(deleted, status=status, headers=self._headers(req))

    async def _delete_collection(self, request: web.Request, req: _Request) -> web.Response:
        options = await self._delete_options(request)
        label_reqs, field_reqs = self._selectors(request, req)
        grace = options.get("gracePeriodSeconds")
        deleted = self.store.delete_collection(
            req.rtype,
            req.namespace,
            label_reqs,
            field_reqs,
            propagation=self._propagation(options),
            grace=grace is None or grace > 0,
            grace_seconds=grace,
            dry_run=bool(options.get("dryRun")),
        )
        items = [self._render(req, obj) for obj in deleted]
        return _json_response(
            {
                "kind": req.rtype.list_kind,
                "apiVersion": req.rtype.api_version(req.version),
                "metadata": {"resourceVersion": str(self.store.resource_version)},
                "items": items,
            },
            headers=self._headers(req),
        )

    # ------------------------------------------------------------------ subresources
    async def _subresource(self, request: web.Request, req: _Request) -> web.StreamResponse:
        sub = req.subresource
        rtype = req.rtype
        name = req.name or ""
        handler = self._subresource_handlers.get((rtype.group, rtype.kind, sub))
        if handler is not None:
            return await handler(request, req.namespace, name, req.rest)
        if sub == "log" and sub in rtype.subresources and request.method == "GET":
            # the stub until a kubelet registers: the pod exists and has printed nothing
            self.store.get_raw(rtype, req.namespace, name)
            return web.Response(text="", content_type="text/plain")
        if sub not in rtype.subresources or sub == "proxy":
            raise errors.ApiError(
                404,
                errors.REASON_NOT_FOUND,
                "the server could not find the requested resource",
                details={},
            )
        if sub == "status":
            if request.method == "GET":
                return self._get(request, req)
            if request.method == "PUT":
                return await self._update(request, req, subresource="status")
            if request.method == "PATCH":
                return await self._patch(request, req, subresource="status")
            raise errors.method_not_allowed()
        if sub == "binding" and request.method == "POST":
            return await self._bind(request, req)
        if sub == "scale":
            return await self._scale(request, req)
        raise errors.method_not_allowed()

    def _scale_object(self, req: _Request, obj: dict) -> dict:
        """autoscaling/v1 Scale of a Deployment/StatefulSet/ReplicaSet."""
        meta = obj["metadata"]
        match_labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        status = obj.get("status") or {}
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                key: meta[key]
                for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if key in meta
            },
            "spec": {"replicas": int((obj.get("spec") or {}).get("replicas", 1))},
            "status": {
                "replicas": int(status.get("replicas", 0)),
                "selector": ",".join(f"{k}={v}" for k, v in sorted(match_labels.items())),
            },
        }

    async def _scale(self, request: web.Request, req: _Request) -> web.Response:
        current = self._scale_object(req, self.store.get_raw(req.rtype, req.namespace, req.name))
        if request.method == "GET":
            return _json_response(current)
        if request.method == "PUT":
            body = await self._body(request)
            wanted = body if isinstance(body, dict) else {}
            rv = (wanted.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"].get("resourceVersion"):
                raise errors.conflict(
                    req.rtype.group_resource,
                    req.name or "",
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again",
                )
        elif request.method == "PATCH":
            patch_type = _PATCH_TYPES.get(request.content_type)
            if patch_type not in ("merge", "json", "strategic"):
                raise errors.unsupported_media_type(request.content_type)
            body = await self._body(request)
            try:
                if patch_type == "json":
                    wanted = patch_module.json_patch(current, body)
                else:
                    wanted = patch_module.json_merge_patch(current, body)
            except patch_module.PatchError as exc:
                raise errors.ApiError(exc.code, exc.reason, exc.message) from None
        else:
            raise errors.method_not_allowed()
        replicas = (wanted.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise errors.invalid(
                "Scale",
                "autoscaling",
                req.name or "",
                [
                    errors.invalid_value(
                        "spec.replicas", replicas, "must be greater than or equal to 0"
                    )
                ],
            )
        self.store.patch(
            req.rtype.api_version(req.version),
            req.rtype.kind,
            req.namespace,
            req.name,
            {"spec": {"replicas": replicas}},
            patch_type="merge",
            field_manager=self._field_manager(request),
            dry_run=self._dry_run(request),
        )
        updated = self.store.get_raw(req.rtype, req.namespace, req.name)
        scale = self._scale_object(req, updated)
        if self._dry_run(request):
            scale["spec"]["replicas"] = replicas
        return _json_response(scale)

    async def _bind(self, request: web.Request, req: _Request) -> web.Response:
        body = await self._body(request)
        target = (body.get("target") or {}) if isinstance(body, dict) else {}
        node = target.get("name")
        if not node:
            raise errors.invalid("Binding", "", req.name or "", [errors.required("target.name")])
        pod = self.store.get_raw(req.rtype, req.namespace, req.name)
        if (pod.get("spec") or {}).get("nodeName"):
            raise errors.conflict(
                "pods",
                req.name or "",
                f'pod {req.name} is already assigned to node "{pod["spec"]["nodeName"]}"',
            )
        self.store.patch(
            "v1",
            "Pod",
            req.namespace,
            req.name,
            {"spec": {"nodeName": node}},
            patch_type="merge",
            field_manager=self._field_manager(request),
        )
        return _json_response(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            },
            status=201,
        )
