"""The portal under a real ASGI server (uvicorn) as a subprocess, for tests of live pages.

It shares the test's database (transactional tests) and Redis; tests sign in by handing the
server a session cookie made with Django's test client.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url() -> str:
    from django.db import connection

    db = connection.settings_dict
    user, host, port = db["USER"] or "postgres", db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    return f"postgres://{user}@{host}:{port}/{db['NAME']}"


class AsgiServer:
    def __init__(self, env: dict[str, str], log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self) -> AsgiServer:
        uvicorn = str(Path(sys.executable).parent / "uvicorn")
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [
                    uvicorn,
                    "portal.asgi:application",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--log-level",
                    "warning",
                    # An open event stream would otherwise hold every stop for its 15 s wait.
                    "--timeout-graceful-shutdown",
                    "2",
                ],
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("uvicorn did not start:\n" + self.log.read_text()[-3000:])

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_asgi_server(tmp_path: Path, **extra_env: str) -> AsgiServer:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "PYTHONPATH": str(REPO),
        "DEBUG": "true",  # static files from the finders, as in the demo
        **extra_env,
    }
    return AsgiServer(env, tmp_path / f"asgi-{time.monotonic_ns()}.log").start()


def session_cookie(user) -> dict[str, str]:
    """A signed-in session for `user`, stored in the shared database."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}
