"""Interactive workspace images run for real: Jupyter and a code-server stand-in.

A container whose image is a known workspace image does not run as a simulated trainer: the
kubelet starts the real server on this machine (a subprocess bound to 127.0.0.1 on a free port)
and the pod and service proxy subresources reach it, HTTP and WebSocket alike, as the API
server's proxy reaches a pod:

- Jupyter images (`*-notebook`, `jupyter*`): `python -m jupyter_server` (the jupyter-server
  package; `jupyter lab` is run as jupyter-server, which serves the same REST and WebSocket API
  under the same base URL, without the Lab front-end), with the container's arguments except
  ip, port and root_dir, and the container's env (JUPYTER_TOKEN).
- code-server images: no code-server package is installed here, so a stand-in
  (`kubesim.controllers.node.code_server_standin`) serves the same base path, /healthz and the
  session-cookie check, and says on its page that it is a stand-in.

The process gets NVIDIA_VISIBLE_DEVICES set to the UUIDs the simulated device plugin assigned
to the container, as the NVIDIA container toolkit does for a real one. Processes die with the
pod (and with kubesim: PR_SET_PDEATHSIG).

As the API server does, the proxy drops the caller's Authorization header (it authenticated the
caller, not the pod), and hop-by-hop headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import aiohttp
from aiohttp import web

JUPYTER, CODE_SERVER = "jupyter", "code-server"
_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "authorization",
    "content-length",
}
_WS_HEADERS = {"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions"}


def app_for_image(image: str) -> str | None:
    """JUPYTER, CODE_SERVER or None, from the image's repository name."""
    path = image.split("@", 1)[0]
    last = path.rsplit("/", 1)[-1]
    name = last.split(":", 1)[0]
    if name.endswith("-notebook") or name.startswith("jupyter"):
        return JUPYTER
    if name == "code-server":
        return CODE_SERVER
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _option(args: list[str], name: str) -> str:
    for i, arg in enumerate(args):
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    return ""


@dataclass
class Server:
    app: str
    port: int
    process: subprocess.Popen
    workdir: tempfile.TemporaryDirectory


class WorkspaceApps:
    def __init__(self) -> None:
        self.servers: dict[str, Server] = {}  # pod uid → server
        self.by_pod: dict[tuple[str, str], str] = {}  # (namespace, pod name) → uid
        self._session: aiohttp.ClientSession | None = None

    # -- processes -----------------------------------------------------------------------------
    def start(
        self, *, uid: str, namespace: str, name: str, container: dict, env: dict, gpus: list[str]
    ) -> str:
        """Start the container's server; returns the first log line."""
        app = app_for_image(container.get("image", ""))
        self.stop(uid)
        args = [*(container.get("command") or []), *(container.get("args") or [])]
        workdir = tempfile.TemporaryDirectory(prefix="kubesim-ws-")
        port = _free_port()
        child_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            **{k: v for k, v in env.items() if k != "HOME"},
            "HOME": workdir.name,
            "JUPYTER_CONFIG_DIR": os.path.join(workdir.name, ".jupyter"),
            "JUPYTER_RUNTIME_DIR": os.path.join(workdir.name, ".runtime"),
            "NVIDIA_VISIBLE_DEVICES": ",".join(gpus) if gpus else "void",
            "PYTHONUNBUFFERED": "1",
        }
        if app == JUPYTER:
            keep = [
                a
                for a in args
                if a.startswith("--")
                and not a.startswith(
                    ("--ServerApp.ip=", "--ServerApp.port=", "--ServerApp.root_dir=")
                )
            ]
            argv = [
                sys.executable,
                "-m",
                "jupyter_server",
                *keep,
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0",
                f"--ServerApp.root_dir={workdir.name}",
                # kubesim may run as root (CI); the image's own user is never root.
                "--ServerApp.allow_root=True",
            ]
            note = f"kubesim: running jupyter-server for {container.get('image')} (no Lab UI)"
        else:
            argv = [
                sys.executable,
                "-m",
                "kubesim.controllers.node.code_server_standin",
                "--port",
                str(port),
                "--base",
                _option(args, "--abs-proxy-base-path"),
            ]
            note = f"kubesim: code-server stand-in for {container.get('image')} (not VS Code)"
        log = open(os.path.join(workdir.name, "server.log"), "ab")  # noqa: SIM115 - child's
        process = subprocess.Popen(  # noqa: S603 - our argv: this interpreter and its modules
            argv,
            env=child_env,
            cwd=workdir.name,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()
        self.servers[uid] = Server(app or JUPYTER, port, process, workdir)
        self.by_pod[(namespace, name)] = uid
        return note

    def stop(self, uid: str) -> None:
        server = self.servers.pop(uid, None)
        if server is None:
            return
        for key, value in list(self.by_pod.items()):
            if value == uid:
                del self.by_pod[key]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.process.pid, signal.SIGTERM)
        try:
            server.process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=3)
        server.workdir.cleanup()

    def stop_all(self) -> None:
        for uid in list(self.servers):
            self.stop(uid)

    def port_for_pod(self, namespace: str, name: str) -> int | None:
        uid = self.by_pod.get((namespace, name))
        server = self.servers.get(uid or "")
        return server.port if server else None

    # -- proxy ---------------------------------------------------------------------------------
    async def forward(self, request: web.Request, port: int, rest: str) -> web.StreamResponse:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None, connect=5)
            )
        url = f"http://127.0.0.1:{port}/{rest.lstrip('/')}"
        if request.query_string:
            url += f"?{request.query_string}"
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._websocket(request, url, headers)
        try:
            upstream = await self._session.request(
                request.method,
                url,
                headers=headers,
                data=request.content if request.can_read_body else None,
                allow_redirects=False,
            )
        except aiohttp.ClientConnectionError:
            return web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "message": f"error trying to reach service: dial tcp 127.0.0.1:{port}: "
                    "connect: connection refused",
                    "reason": "ServiceUnavailable",
                    "code": 503,
                },
                status=503,
            )
        async with upstream:
            out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in _HOP:
                    out.headers.add(key, value)
            await out.prepare(request)
            async for chunk in upstream.content.iter_chunked(65536):
                await out.write(chunk)
            await out.write_eof()
            return out

    async def _websocket(self, request: web.Request, url: str, headers: dict) -> web.StreamResponse:
        protocols = [
            p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p
        ]
        headers = {
            k: v
            for k, v in headers.items()
            if k.lower() not in _WS_HEADERS and k.lower() != "sec-websocket-protocol"
        }
        try:
            upstream = await self._session.ws_connect(
                url, headers=headers, protocols=protocols, max_msg_size=0, autoping=True
            )
        except aiohttp.WSServerHandshakeError as exc:
            return web.Response(status=exc.status, text=str(exc.message))
        except aiohttp.ClientConnectionError:
            return web.Response(status=503, text="error trying to reach service")
        client = web.WebSocketResponse(
            protocols=[upstream.protocol] if upstream.protocol else (), max_msg_size=0
        )
        await client.prepare(request)

        async def pump(source, sink) -> None:
            async for message in source:
                if message.type == aiohttp.WSMsgType.TEXT:
                    await sink.send_str(message.data)
                elif message.type == aiohttp.WSMsgType.BINARY:
                    await sink.send_bytes(message.data)
                else:
                    break

        tasks = [
            asyncio.ensure_future(pump(client, upstream)),
            asyncio.ensure_future(pump(upstream, client)),
        ]
        _done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await upstream.close()
        await client.close()
        return client


APPS = WorkspaceApps()
