"""manage.py watch_cluster --check: the container healthcheck reads the heartbeat file."""

import json
import time

import pytest
from django.core.management import call_command


def _check(path) -> int:
    with pytest.raises(SystemExit) as exit_info:
        call_command("watch_cluster", "--check", "--health-file", str(path))
    return exit_info.value.code


def test_a_fresh_heartbeat_is_healthy_and_a_stale_or_missing_one_is_not(tmp_path):
    health = tmp_path / "watcher.json"
    assert _check(health) == 1  # never written
    health.write_text(json.dumps({"time": time.time(), "leader": False}))
    assert _check(health) == 0  # a standby is healthy too
    health.write_text(json.dumps({"time": time.time() - 120, "leader": True}))
    assert _check(health) == 1


def test_a_fresh_heartbeat_of_a_process_that_is_gone_is_not_healthy(tmp_path, capsys):
    import subprocess
    import sys

    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    gone = int(finished.stdout)
    health = tmp_path / "watcher.json"
    health.write_text(json.dumps({"time": time.time(), "pid": gone, "leader": True}))
    assert _check(health) == 1
    assert f"pid {gone}" in capsys.readouterr().err
    import os

    health.write_text(json.dumps({"time": time.time(), "pid": os.getpid(), "leader": True}))
    assert _check(health) == 0


def test_the_running_watcher_writes_its_pid_into_the_heartbeat(tmp_path):
    import os
    from types import SimpleNamespace

    from jobs.watcher.runner import Watcher

    watcher = Watcher.__new__(Watcher)  # the heartbeat alone: no elector, no cluster
    watcher.health_file = tmp_path / "watcher.json"
    watcher.identity, watcher.stop, watcher.processor = "w-1", None, None
    watcher.elector = SimpleNamespace(last_error='leases "w" is forbidden: ...')
    watcher.informers = []
    watcher.heartbeat()
    state = json.loads(watcher.health_file.read_text())
    assert state["pid"] == os.getpid()
    # what it cannot read is there for staff to see
    assert state["errors"] == {"lease": 'leases "w" is forbidden: ...'}
