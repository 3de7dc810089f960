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


def test_production_refuses_to_start_with_debug_on():
    result = _manage("check", env=_production_env(PORTAL_ENV="production", DEBUG="true"))
    assert result.returncode != 0
    reason = result.stderr.strip()
    assert len(reason.splitlines()) == 1, reason
    assert "DEBUG" in reason, reason
    assert "PORTAL_ENV=production" in reason, reason


def test_production_turns_debug_off_by_default():
    env = _production_env(PORTAL_ENV="production", DEBUG=None)
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    # Without PORTAL_ENV the demo's default (DEBUG on) holds.
    shell = "from django.conf import settings; print(settings.DEBUG)"
    demo_env = _production_env(DEBUG=None, SECRET_KEY=None)
    demo = _manage("shell", "--no-imports", "-c", shell, env=demo_env)
    assert demo.stdout.strip().splitlines()[-1] == "True", demo.stderr


def test_the_production_image_and_compose_file_say_production():
    import yaml

    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    environment = compose["x-portal"]["environment"]
    assert environment["PORTAL_ENV"] == "production"
    assert environment["DEBUG"] == "false"
    for service in ("migrate", "web", "worker", "beat"):
        assert compose["services"][service]["environment"]["PORTAL_ENV"] == "production"
    assert "PORTAL_ENV=production" in (REPO / "Dockerfile").read_text()


def test_html_404_without_collectstatic_is_still_a_404(db, settings, tmp_path, client):
    # DEBUG off with the production storage and an empty STATIC_ROOT (no collectstatic): the
    # strict manifest used to raise while rendering 404.html, turning every 404 into a 500.
    settings.DEBUG = False
    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "portal.storage.ForgivingManifestStaticFilesStorage"},
    }
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert b"/static/css/portal.css" in response.content  # linked unhashed
