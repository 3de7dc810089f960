"""A stand-in for code-server in kubesim (no code-server package is installed on this machine).

It is not VS Code. It serves what the portal relies on, the way code-server does: everything
under --abs-proxy-base-path, GET <base>/healthz without a session, and the rest only with the
session cookie (code-server-session) equal to HASHED_PASSWORD (code-server's SHA-256 password
mode); without it, a redirect to <base>/login. Its page says it is a stand-in.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from aiohttp import web

COOKIE = "code-server-session"


def build(base: str) -> web.Application:
    base = "/" + base.strip("/") if base.strip("/") else ""
    hashed = os.environ.get("HASHED_PASSWORD", "")

    async def handle(request: web.Request) -> web.StreamResponse:
        path = request.path[len(base) :] if request.path.startswith(base) else None
        if path is None:
            return web.Response(status=404, text="not under the base path")
        if path == "/healthz":
            beat = int(time.time() * 1000)
            return web.json_response({"status": "alive", "lastHeartbeat": beat})
        if path == "/login":
            return web.Response(text="code-server stand-in: sign in through the portal")
        if not hashed or request.cookies.get(COOKIE) != hashed:
            raise web.HTTPFound(f"{base}/login")
        if request.headers.get("Upgrade", "").lower() == "websocket":
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            async for message in ws:  # echo: enough to prove the proxy's WebSocket path
                await ws.send_str(message.data)
            return ws
        body = {
            "standin": True,
            "message": "kubesim stand-in for code-server (not VS Code)",
            "gpus": os.environ.get("NVIDIA_VISIBLE_DEVICES", ""),
        }
        return web.Response(
            text=f"<html><body><h1>code-server stand-in</h1><pre>{json.dumps(body)}</pre>"
            "</body></html>",
            content_type="text/html",
        )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--base", default="")
    args = parser.parse_args()
    web.run_app(build(args.base), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
