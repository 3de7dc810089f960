"""The production image, replayed without Docker.

The Dockerfile is read line by line: its COPY lines copy what Docker would copy (the build context
minus .dockerignore) into an empty folder standing for /app, its RUN lines run there with a fresh
venv's Python first on PATH (`pip install .` installs the portal, not editable, no extra; uv does
it where the test run has uv, see tests/installing.py), its ENV lines set the environment. Then
every process the image runs is started from that folder: the web server's app (gunicorn
--check-config loads it), `check --deploy`, `migrate` on a fresh database, a Celery worker that
must register every task beat schedules, and the watcher's command. An app left out of the
package list or of the copy fails here, as kubesim getting in does.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import time
import venv
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from tests.installing import HAVE_UV, INSTALLER_ENV, as_installer

REPO = Path(__file__).resolve().parent.parent
# The build context as Docker sees it: the working tree's files (tracked or new, not ignored).
CONTEXT_FILES = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]
SKIPPED_RUN = ("useradd",)  # creating the image's user needs root; it changes no file of ours


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def dockerignore_patterns(text: str) -> list[str]:
    return [
        line.strip().rstrip("/")
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: a pattern matching a file or any folder above it leaves the file out."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        anywhere = pattern[3:] if pattern.startswith("**/") else None
        for prefix in prefixes:
            if fnmatch.fnmatchcase(prefix, pattern):
                return True
            if anywhere and fnmatch.fnmatchcase(prefix.rsplit("/", 1)[-1], anywhere):
                return True
    return False


def test_dockerignore_rules_match_as_docker_does():
    patterns = dockerignore_patterns("kubesim\n**/__pycache__\n**/*.pyc\n.env\n# note\n")
    assert ignored("kubesim/kubesim/cluster.py", patterns)
    assert ignored("jobs/__pycache__/models.cpython-311.pyc", patterns)
    assert ignored(".env", patterns)
    assert not ignored(".env.example", patterns)
    assert not ignored("jobs/kubesim_notes.py", patterns)
    assert not ignored("gpumetrics/models.py", patterns)


class ReplayedImage:
    def __init__(self, root: Path, python: Path, env: dict[str, str]):
        self.root, self.python, self.env = root, python, env

    def run(
        self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(args),
            cwd=cwd or self.root,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=300,
        )


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> ReplayedImage:
    base = tmp_path_factory.mktemp("image")
    venv_dir = base / "venv"
    venv.EnvBuilder(with_pip=not HAVE_UV).create(venv_dir)
    env = {
        **INSTALLER_ENV,
        "PATH": f"{venv_dir / 'bin'}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(base)),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    workdir = None
    instructions = dockerfile_instructions((REPO / "Dockerfile").read_text())
    patterns = dockerignore_patterns((REPO / ".dockerignore").read_text())
    context = subprocess.run(CONTEXT_FILES, cwd=REPO, capture_output=True, text=True, check=True)
    files = [f for f in context.stdout.splitlines() if (REPO / f).is_file()]
    for word, args in instructions:
        if word == "WORKDIR":
            workdir = base / args.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif word == "ENV":
            for key, value in re.findall(r"(\w+)=(\S+)", args):
                env[key] = value.replace("/app", str(workdir))
        elif word in ("COPY", "ADD"):
            *sources, dest = shlex.split(args)
            assert not [s for s in sources if s.startswith("--")], "COPY flags are not replayed"
            target = workdir / dest if dest not in (".", "./") else workdir
            for source in sources:
                source = source.rstrip("/") if source not in (".", "./") else ""
                for f in files:
                    if ignored(f, patterns) or (source and not f.startswith(source)):
                        continue
                    relative = f[len(source) :].lstrip("/") if source else f
                    if source and (REPO / source).is_file():
                        relative = Path(f).name
                    (target / relative).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(REPO / f, target / relative)
        elif word == "RUN":
            if args.startswith(SKIPPED_RUN):
                continue
            command = as_installer(args.replace("/app", str(workdir)), venv_dir / "bin" / "python")
            result = subprocess.run(
                ["bash", "-c", command], cwd=workdir, env=env, capture_output=True, text=True
            )
            assert result.returncode == 0, f"RUN {args}\n{result.stdout[-3000:]}{result.stderr}"
        elif word == "CMD":
            env["_IMAGE_CMD"] = args
    return ReplayedImage(workdir, venv_dir / "bin" / "python", env)


@pytest.fixture(scope="module")
def fresh_database(image):
    params = settings.DATABASES["default"]
    name = f"gpuportal_image_{secrets.token_hex(4)}"
    admin = dict(
        host=params["HOST"] or "127.0.0.1",
        port=params["PORT"] or 5432,
        user=params["USER"],
        dbname="postgres",
    )
    if params.get("PASSWORD"):
        admin["password"] = params["PASSWORD"]
    with psycopg.connect(**admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    password = f":{params['PASSWORD']}" if params.get("PASSWORD") else ""
    yield f"postgres://{admin['user']}{password}@{admin['host']}:{admin['port']}/{name}"
    with psycopg.connect(**admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def production_env(database_url: str) -> dict[str, str]:
    return {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "portal.example.org",
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": os.environ.get("PORTAL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
        "PORTAL_METRICS_TOKEN": secrets.token_urlsafe(20),
    }


def test_the_image_has_every_app_and_no_kubesim(image):
    # Run outside /app: the copied sources would otherwise shadow what `pip install .` installed,
    # and an app missing from the package list would go unnoticed.
    probe = image.run(
        str(image.python),
        "-c",
        "import importlib.util, json, sys; "
        "print(json.dumps({m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}))",
        *[app.split(".")[0] for app in settings.INSTALLED_APPS],
        "kubesim",
        "kubernetes_validate",
        "gpuportal",
        cwd=image.root.parent,
    )
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert not found.pop("kubesim"), "kubesim is in the production image"
    assert not found.pop("kubernetes_validate"), "kubesim's kubernetes-validate is in the image"
    assert not found.pop("gpuportal"), "the CLI is in the image"
    assert [app for app, ok in found.items() if not ok] == []
    assert (image.root / "staticfiles" / "htmx.min.js").exists() or any(
        (image.root / "staticfiles").rglob("htmx*.js")
    ), "collectstatic did not run"


def test_the_image_passes_the_deploy_checks_and_migrates_a_fresh_database(image, fresh_database):
    env = production_env(fresh_database)
    check = image.run(str(image.python), "manage.py", "check", "--deploy", env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    migrate = image.run(str(image.python), "manage.py", "migrate", "--noinput", env=env)
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    pending = image.run(str(image.python), "manage.py", "migrate", "--check", env=env)
    assert pending.returncode == 0, pending.stdout + pending.stderr


def test_the_image_command_loads_the_asgi_app(image, fresh_database):
    command = json.loads(image.env["_IMAGE_CMD"])
    assert command[:2] == ["gunicorn", "portal.asgi:application"]
    result = image.run(*command, "--check-config", env=production_env(fresh_database))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_worker_registers_every_scheduled_task(image, fresh_database):
    env = production_env(fresh_database)
    listing = image.run(
        str(image.python),
        "-c",
        "import django, json; django.setup(); from django.conf import settings; "
        "print(json.dumps(sorted({e['task'] for e in settings.CELERY_BEAT_SCHEDULE.values()})))",
        env={**env, "DJANGO_SETTINGS_MODULE": "portal.settings"},
    )
    assert listing.returncode == 0, listing.stderr
    scheduled = json.loads(listing.stdout)
    assert "jobs.tasks.resync_all" in scheduled
    log = image.root.parent / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [
                *(str(image.python), "-m", "celery", "-A", "portal", "worker", "--pool", "solo"),
                *("--loglevel", "INFO", "--without-mingle", "--without-gossip"),
            ],
            cwd=image.root,
            env={**image.env, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while " ready." not in log.read_text() and worker.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
        banner = log.read_text()
        assert worker.poll() is None, banner[-3000:]
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    registered = set(re.findall(r"^\s+\. (\S+)$", banner, re.M))
    assert [task for task in scheduled if task not in registered] == []


def test_the_image_runs_the_watcher_command(image, fresh_database):
    result = image.run(
        str(image.python),
        "manage.py",
        "watch_cluster",
        "--help",
        env=production_env(fresh_database),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "watch_cluster" in result.stdout


def test_the_image_runs_as_a_numeric_non_root_user():
    instructions = dockerfile_instructions((REPO / "Dockerfile").read_text())
    users = [args for word, args in instructions if word == "USER"]
    # Kubernetes' runAsNonRoot can only verify a numeric user.
    assert users
    assert users[-1].isdigit()
    assert users[-1] != "0"
