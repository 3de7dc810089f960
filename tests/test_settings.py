"""Production-like settings: `check --deploy` is clean, and a missing SECRET_KEY stops the process.

Each test runs manage.py in a fresh process, because settings are read once at start-up.
"""

from __future__ import annotations

import os
import secrets
import string
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _production_env(**overrides: str) -> dict[str, str]:
    alphabet = string.ascii_letters + string.digits + "!@#%^&*(-_=+)"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "DEBUG": "false",
        "SECRET_KEY": "".join(secrets.choice(alphabet) for _ in range(50)),
        "ALLOWED_HOSTS": "portal.example.com",
        "DATABASE_URL": "postgres://portal:secret@db.example.com:5432/portal",
        "CELERY_BROKER_URL": "redis://redis.example.com:6379/0",
    }
    env.update(overrides)
    return {key: value for key, value in env.items() if value is not None}


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_deploy_check_is_clean_under_production_variables():
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=_production_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_deploy_check_fails_on_a_weak_setting():
    # The same check catches a real mistake, so the clean result above means something.
    result = _manage(
        "check", "--deploy", "--fail-level", "WARNING", env=_production_env(SECRET_KEY="short")
    )
    assert result.returncode != 0
    assert "security.W009" in result.stderr + result.stdout


def test_refuses_to_start_without_secret_key_when_debug_is_off():
    env = _production_env()
    del env["SECRET_KEY"]
    result = _manage("check", env=env)
    assert result.returncode != 0
    reason = result.stderr.strip()
    assert len(reason.splitlines()) == 1, reason
    assert "SECRET_KEY" in reason, reason
    assert "DEBUG" in reason, reason
    assert "Traceback" not in result.stderr


def test_collectstatic_works_with_the_production_storage(tmp_path):
    # DEBUG off switches to whitenoise's compressed manifest storage, which fails on a broken
    # reference inside a CSS or JS file; the vendored htmx and our CSS must survive it.
    env = _production_env(STATIC_ROOT=str(tmp_path))
    result = _manage("collectstatic", "--noinput", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = (tmp_path / "staticfiles.json").read_text()
    assert "vendor/htmx-2.0.11.min.js" in manifest
    assert "css/portal.css" in manifest
