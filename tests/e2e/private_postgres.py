"""A PostgreSQL server of one test's own (initdb + pg_ctl in a temporary folder, on a free
port), so the test can stop and start it without hurting anyone else's database.

The binaries are Debian's (/usr/lib/postgresql/<version>/bin, the newest version). PostgreSQL
refuses to run as root, so as root the commands run as the `postgres` system user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

BINARIES = Path("/usr/lib/postgresql")
SERVER_USER = "postgres"


def _bindir() -> Path:
    found = sorted(
        (p.parent for p in BINARIES.glob("*/bin/pg_ctl")),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not found:
        raise RuntimeError(f"No PostgreSQL server binaries under {BINARIES}/*/bin")
    return found[-1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivatePostgres:
    """initdb on construction (`init()`), then start/stop as often as the test likes."""

    def __init__(self) -> None:
        self.bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="gp-private-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            user = pwd.getpwnam(SERVER_USER)
            os.chown(self.root, user.pw_uid, user.pw_gid)

    def _run(self, program: str, *args: str) -> subprocess.CompletedProcess:
        command = [str(self.bindir / program), *args]
        if self.as_root:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd="/")
        if result.returncode != 0:
            raise RuntimeError(
                f"{program} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}\n"
                + self.server_log()[-3000:]
            )
        return result

    def init(self) -> PrivatePostgres:
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--no-sync",
        )  # fmt: skip
        return self

    def start(self) -> None:
        # Durability is not the point of a throw-away server; speed on a loaded machine is.
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={self.root} -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=100"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w",
                  "-t", "120", "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """fast: sessions are terminated at once (clients see their connection end)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "120", "stop")

    def running(self) -> bool:
        command = [str(self.bindir / "pg_ctl"), "-D", str(self.data), "status"]
        if self.as_root:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        return subprocess.run(command, capture_output=True, timeout=60).returncode == 0

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(
            self.url().replace("postgres://", "postgresql://"), autocommit=True
        ) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def server_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def destroy(self) -> None:
        try:
            if self.running():
                self.stop(mode="immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
