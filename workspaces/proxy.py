"""The authenticated reverse proxy at /ws/<id>/: HTTP (streamed both ways) and WebSocket.

An ASGI app in front of Django (portal/asgi.py). Each request is checked against the portal
session: the workspace's owner, and the project's members when the owner shared it, get
through; anyone else gets the same 404 as for an id that does not exist (one query either way,
identical body and headers). Without a session, a page request is sent to the login page and a
WebSocket upgrade is refused with a sentence saying so.

Upstream is the workspace's Service, through the API server's service proxy or straight
(portal/kube/service_proxy.py). The proxy removes the portal's own cookies and the browser's
Authorization and Origin, and adds the workspace's token (workspaces.launch), which the browser
never sees. Each request or WebSocket message counts as activity for idle culling.

Access decisions are cached for ACCESS_CACHE_SECONDS per (session, workspace): a stopped
workspace or a withdrawn share takes effect within that time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from dataclasses import dataclass
from importlib import import_module
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import websockets
from asgiref.sync import sync_to_async
from django.conf import settings
from django.shortcuts import resolve_url

log = logging.getLogger(__name__)
ACCESS_CACHE_SECONDS = 5.0
PATH_RE = re.compile(r"^/ws/(\d+)(/.*)?$")
_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"host",
    b"authorization",
    b"origin",
    b"cookie",
    b"content-length",
}
_WS_SKIP = {b"sec-websocket-key", b"sec-websocket-version", b"sec-websocket-extensions"}
_WS_SKIP |= {b"sec-websocket-protocol"}
NOT_FOUND_BODY = (
    b"<!doctype html><title>Not found</title><h1>Not found</h1>"
    b"<p>There is no workspace at this address that you can open.</p>"
)
NOT_FOUND_HEADERS = [
    (b"content-type", b"text/html; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"content-length", str(len(NOT_FOUND_BODY)).encode()),
]


@dataclass(frozen=True)
class Route:
    workspace_id: int
    app: str
    token: str
    namespace: str
    port: int
    running: bool
    state: str
    name: str


ANONYMOUS = "anonymous"
_access: dict[tuple[str, int], tuple[float, Route | str | None]] = {}
_touched: dict[int, float] = {}
_clients: dict[int, httpx.AsyncClient] = {}


def _session_key(scope: dict[str, Any]) -> str:
    name = settings.SESSION_COOKIE_NAME.encode()
    for key, value in scope.get("headers") or []:
        if key != b"cookie":
            continue
        for part in value.split(b";"):
            k, _, v = part.strip().partition(b"=")
            if k == name:
                return v.decode("latin-1")
    return ""


def _lookup(session_key: str, workspace_id: int) -> Route | str | None:
    """ANONYMOUS without a signed-in session; None when this user may not open it (or it does
    not exist: the same one query either way); the Route otherwise."""
    from django.contrib.auth import get_user
    from django.db import close_old_connections

    from workspaces.models import Workspace
    from workspaces.selectors import openable_by, state_of

    close_old_connections()
    if not session_key:
        return ANONYMOUS
    engine = import_module(settings.SESSION_ENGINE)
    user = get_user(SimpleNamespace(session=engine.SessionStore(session_key)))
    if not user.is_authenticated:
        return ANONYMOUS
    workspace = (
        Workspace.objects.filter(pk=workspace_id)
        .filter(openable_by(user))
        .select_related("project", "kind", "job")
        .distinct()
        .first()
    )
    if workspace is None:
        return None
    state = state_of(workspace)
    return Route(
        workspace_id=workspace.pk,
        app=workspace.kind.app,
        token=workspace.token,
        namespace=workspace.project.namespace,
        port=workspace.kind.port,
        running=state == "running",
        state=state,
        name=workspace.name,
    )


async def _route(scope: dict[str, Any], workspace_id: int) -> Route | str | None:
    key = (_session_key(scope), workspace_id)
    now = time.monotonic()
    cached = _access.get(key)
    if cached is not None and now - cached[0] < ACCESS_CACHE_SECONDS:
        return cached[1]
    found = await sync_to_async(_lookup)(*key)
    if len(_access) > 10000:
        _access.clear()
    _access[key] = (now, found)
    return found


async def _touch(workspace_id: int) -> None:
    every = float(getattr(settings, "PORTAL_WORKSPACE_TOUCH_SECONDS", 30.0))
    now = time.monotonic()
    if now - _touched.get(workspace_id, 0.0) < every:
        return
    _touched[workspace_id] = now
    from workspaces.services import workspace_touch

    await sync_to_async(workspace_touch)(workspace_id)


def _target(route: Route):
    from portal.kube.service_proxy import service_target
    from workspaces.manifests import service_name

    return service_target(route.namespace, service_name(route.workspace_id), route.port)


def _upstream_headers(scope: dict[str, Any], target, creds, *, websocket: bool) -> dict[str, str]:
    skip = _HOP | (_WS_SKIP if websocket else set())
    own = {settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME}
    headers: dict[str, str] = {}
    cookies: list[str] = []
    for key, value in scope.get("headers") or []:
        if key == b"cookie":
            for part in value.decode("latin-1").split(";"):
                name = part.strip().partition("=")[0]
                if name and name not in own and name not in creds.cookies:
                    cookies.append(part.strip())
            continue
        if key in skip:
            continue
        name = key.decode("latin-1")
        headers[name] = (
            f"{headers[name]}, {value.decode('latin-1')}"
            if name in headers
            else (value.decode("latin-1"))
        )
    cookies += [f"{k}={v}" for k, v in creds.cookies.items()]
    if cookies:
        headers["cookie"] = "; ".join(cookies)
    headers.update(target.headers)
    headers.update(creds.headers)
    return headers


def _url(scope: dict[str, Any], target, creds) -> str:
    raw = scope.get("raw_path") or quote(scope["path"]).encode()
    url = target.base_url + raw.decode("latin-1").split("?", 1)[0]
    query = scope.get("query_string", b"").decode("latin-1")
    if creds.query:
        query = "&".join(filter(None, [query, urlencode(creds.query)]))
    return f"{url}?{query}" if query else url


def _client(target) -> httpx.AsyncClient:
    key = id(target.ssl_context)
    client = _clients.get(key)
    if client is None:
        client = httpx.AsyncClient(
            verify=target.ssl_context or True,
            timeout=httpx.Timeout(connect=10.0, read=None, write=60.0, pool=10.0),
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
            follow_redirects=False,
        )
        _clients[key] = client
    return client


async def _respond(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _not_found(send) -> None:
    await _respond(send, 404, NOT_FOUND_BODY, NOT_FOUND_HEADERS)


def _page(text: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    body = f"<!doctype html><title>Workspace</title><p>{text}</p>".encode()
    return body, [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"cache-control", b"no-store"),
        (b"content-length", str(len(body)).encode()),
    ]


class WorkspaceProxy:
    """Routes /ws/<id>/... here and everything else to Django."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] in ("http", "websocket"):
            match = PATH_RE.match(scope["path"])
            if match:
                handler = _http if scope["type"] == "http" else _websocket
                return await handler(scope, receive, send, int(match.group(1)), match.group(2))
            if scope["type"] == "websocket":
                # Nothing else in the portal speaks WebSocket.
                await send({"type": "websocket.close", "code": 4404})
                return None
        return await self.app(scope, receive, send)


async def _http(scope, receive, send, workspace_id: int, rest: str | None) -> None:
    from workspaces import launch

    route = await _route(scope, workspace_id)
    if route == ANONYMOUS:
        login = f"{resolve_url(settings.LOGIN_URL)}?{urlencode({'next': scope['path']})}"
        await _respond(send, 302, b"", [(b"location", login.encode()), (b"content-length", b"0")])
        return
    if route is None:
        await _not_found(send)
        return
    if not rest:
        location = f"/ws/{workspace_id}/".encode()
        await _respond(send, 302, b"", [(b"location", location), (b"content-length", b"0")])
        return
    if not route.running:
        body, headers = _page(
            f"Workspace {route.name} is {route.state}; open it once it is running "
            f'(<a href="/workspaces/{workspace_id}/">its page</a>).'
        )
        await _respond(send, 503, body, headers)
        return
    await _touch(workspace_id)
    try:
        target = await sync_to_async(_target, thread_sensitive=False)(route)
    except Exception:  # no cluster configuration, an unreadable CA: not the browser's fault
        log.exception("workspace %s: no route to the cluster", workspace_id)
        body, headers = _page("The portal cannot reach the cluster right now; try again.")
        await _respond(send, 502, body, headers)
        return
    creds = launch.credentials(route.app, token=route.token, via_api_server=target.via_api_server)
    headers = _upstream_headers(scope, target, creds, websocket=False)
    body = await _request_body(receive)
    client = _client(target)
    request = client.build_request(
        scope["method"], _url(scope, target, creds), headers=headers, content=body
    )
    try:
        response = await client.send(request, stream=True)
    except httpx.HTTPError:
        body, headers = _page(f"Workspace {route.name} does not answer yet; try again shortly.")
        await _respond(send, 502, body, headers)
        return
    try:
        out = []
        for key, value in response.headers.raw:
            lower = key.lower()
            if lower in (b"connection", b"keep-alive", b"transfer-encoding", b"set-cookie2"):
                continue
            if lower == b"location" and target.prefix:
                value = value.replace(target.prefix.encode(), b"", 1)
            out.append((lower, value))
        await send({"type": "http.response.start", "status": response.status_code, "headers": out})
        async for chunk in response.aiter_raw(chunk_size=256 * 1024):  # fewer, larger sends
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    finally:
        await response.aclose()


async def _request_body(receive):
    first = await receive()
    chunk = first.get("body", b"")
    if not first.get("more_body"):
        return chunk or None

    async def stream():
        yield chunk
        while True:
            message = await receive()
            yield message.get("body", b"")
            if not message.get("more_body"):
                return

    return stream()


async def _deny_ws(scope, send, status: int, text: str) -> None:
    """Refuse an upgrade with a status and a sentence (as an HTTP answer where the server
    supports it, else a close before accept, which the server turns into a 403)."""
    if "websocket.http.response" in (scope.get("extensions") or {}):
        body = text.encode()
        await send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "websocket.http.response.body", "body": body})
        return
    await send({"type": "websocket.close", "code": 4000 + status, "reason": text[:120]})


async def _websocket(scope, receive, send, workspace_id: int, rest: str | None) -> None:
    from workspaces import launch

    message = await receive()
    if message["type"] != "websocket.connect":
        return
    route = await _route(scope, workspace_id)
    if route == ANONYMOUS:
        await _deny_ws(
            scope, send, 403, "No portal session: sign in to the portal, then open the workspace."
        )
        return
    if route is None:
        await _deny_ws(scope, send, 404, "Not found")
        return
    if not route.running:
        await _deny_ws(scope, send, 503, f"Workspace {route.name} is {route.state}.")
        return
    if not _same_origin(scope):
        await _deny_ws(scope, send, 403, "WebSocket from another site refused.")
        return
    await _touch(workspace_id)
    try:
        target = await sync_to_async(_target, thread_sensitive=False)(route)
    except Exception:
        log.exception("workspace %s: no route to the cluster", workspace_id)
        await _deny_ws(scope, send, 502, "The portal cannot reach the cluster right now.")
        return
    creds = launch.credentials(route.app, token=route.token, via_api_server=target.via_api_server)
    headers = _upstream_headers(scope, target, creds, websocket=True)
    url = _url(scope, target, creds)
    url = (
        "wss://" + url[len("https://") :]
        if url.startswith("https://")
        else ("ws://" + url[len("http://") :])
    )
    try:
        upstream = await websockets.connect(
            url,
            additional_headers=headers,
            ssl=target.ssl_context if url.startswith("wss://") else None,
            subprotocols=scope.get("subprotocols") or None,
            max_size=None,
            compression=None,
            open_timeout=15,
            user_agent_header=None,
        )
    except (OSError, websockets.exceptions.WebSocketException, TimeoutError):
        await _deny_ws(scope, send, 502, f"Workspace {route.name} does not answer yet.")
        return
    await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})

    async def from_browser() -> None:
        while True:
            event = await receive()
            if event["type"] == "websocket.disconnect":
                return
            if event["type"] != "websocket.receive":
                continue
            await upstream.send(event["text"] if event.get("text") is not None else event["bytes"])
            await _touch(workspace_id)

    async def to_browser() -> None:
        async for data in upstream:
            if isinstance(data, str):
                await send({"type": "websocket.send", "text": data})
            else:
                await send({"type": "websocket.send", "bytes": data})

    tasks = [asyncio.ensure_future(from_browser()), asyncio.ensure_future(to_browser())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await upstream.close()
        with contextlib.suppress(Exception):
            await send({"type": "websocket.close", "code": upstream.close_code or 1000})


def _same_origin(scope) -> bool:
    """A browser always sends Origin on an upgrade; it must be the portal's own host."""
    headers = dict(scope.get("headers") or [])
    origin = headers.get(b"origin")
    if origin is None:
        return True  # not a browser (the CLI, a script with the session cookie)
    host = headers.get(b"host", b"")
    return origin.split(b"://", 1)[-1] == host
