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
