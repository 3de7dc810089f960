"""A Redis server of the test process's own (one per pytest-xdist worker).

Databases on a shared Redis would not be enough under parallel workers: pub/sub channels
(`portal:jobs:alpha`) are server-wide whatever the database number, and a FLUSHDB of one worker
would drop another's queued tasks. So each worker starts `redis-server` on a free port, without
persistence, and stops it at the end of the session.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """`redis-server` on 127.0.0.1 and a free port; `url(db)` names one of its databases."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.port = 0
        self.process: subprocess.Popen | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self, binary: str) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "redis.log"
        # The port is free when chosen but could be taken before redis binds it: try again.
        for _ in range(5):
            self.port = _free_port()
            self.process = subprocess.Popen(
                [
                    binary,
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.workdir),
                    "--logfile",
                    str(log),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self.process.poll() is None:
                if _answers(self.port):
                    return self
                time.sleep(0.05)
            self.stop()
        raise RuntimeError(
            "redis-server did not start:\n" + (log.read_text()[-2000:] if log.exists() else "")
        )

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")
