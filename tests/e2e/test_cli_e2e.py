"""`gpuportal` as a subprocess against a live portal: the test server, a real Celery worker with
beat, Redis, PostgreSQL and kubesim. Only the public REST API is between them."""

import json
import os
import subprocess
import sys

import pytest
from gpuportal.errors import EXIT_AUTH, EXIT_JOB_FAILED, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    # The live server builds its whitenoise middleware before the per-test static settings
    # apply; the CLI never asks for static files.
    pytest.mark.filterwarnings("ignore:No directory at:UserWarning"),
]

IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"


@pytest.fixture
def portal(e2e_org, worker_factory, live_server, tmp_path):
    """A running portal for bob (member of alpha), with his token in the CLI's environment."""
    from tenants.services import token_create

    worker_factory(beat_seconds=1)
    _, secret = token_create(actor=e2e_org["bob"], expires_in=None)
    env = {
        **os.environ,
        "GPUPORTAL_URL": live_server.url,
        "GPUPORTAL_TOKEN": secret,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    return env


def gpuportal(env, *args, stdin=None, timeout=240):
    return subprocess.run(
        [sys.executable, "-m", "gpuportal", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def as_json(result):
    assert result.stdout, result.stderr
    return json.loads(result.stdout)


def test_submit_wait_succeeds_and_every_json_output_parses(portal):
    done = gpuportal(
        portal,
        "submit",
        "-p",
        "alpha",
        "--image",
        IMAGE,
        "--name",
        "hello",
        "--wait",
        "--json",
        "--",
        "sh",
        "-c",
        "echo hello from the cli; sleep 30",
    )
    assert done.returncode == EXIT_OK, done.stderr
    job = as_json(done)
    assert (job["name"], job["state"]) == ("hello", "succeeded")

    me = as_json(gpuportal(portal, "whoami", "--json"))
    assert me["username"] == "bob"
    assert me["projects"] == [{"slug": "alpha", "name": "Alpha", "role": "member"}]
    projects = as_json(gpuportal(portal, "projects", "--json"))
    assert [p["slug"] for p in projects] == ["alpha"]
    pools = as_json(gpuportal(portal, "pools", "--json"))
    assert [p["slug"] for p in pools] == ["h100"]
    listed = as_json(gpuportal(portal, "jobs", "--project", "alpha", "--json"))
    assert [j["id"] for j in listed] == [job["id"]]
    status = as_json(gpuportal(portal, "status", str(job["id"]), "--json"))
    assert status["state"] == "succeeded"
    waited = as_json(gpuportal(portal, "wait", str(job["id"]), "--json"))
    assert waited == [
        {
            "id": job["id"],
            "name": "hello",
            "state": "succeeded",
            "state_message": job["state_message"],
        }
    ]

    table = gpuportal(portal, "jobs")
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split()[:5] == ["ID", "PROJECT", "NAME", "KIND", "STATE"]
    assert "hello" in table.stdout
    assert "succeeded" in table.stdout


def test_a_failing_job_makes_wait_exit_with_the_failed_job_code(portal):
    submitted = as_json(
        gpuportal(
            portal,
            "submit",
            "-p",
            "alpha",
            "--image",
            IMAGE,
            "--json",
            "--",
            "sh",
            "-c",
            "echo about to fail; exit 3",
        )
    )
    waited = gpuportal(portal, "wait", str(submitted["id"]))
    assert waited.returncode == EXIT_JOB_FAILED, waited.stderr
    logs = gpuportal(portal, "logs", str(submitted["id"]))
    assert logs.returncode == EXIT_OK, logs.stderr
    assert "about to fail" in logs.stdout
    as_text = as_json(gpuportal(portal, "logs", str(submitted["id"]), "--json"))
    assert "about to fail" in as_text["log"]
    assert f"Job {submitted['id']}" in waited.stdout
    assert "failed" in waited.stdout


def test_cancel_stops_a_running_job(portal):
    submitted = as_json(
        gpuportal(
            portal,
            "submit",
            "-p",
            "alpha",
            "--image",
            IMAGE,
            "--json",
            "--",
            "sh",
            "-c",
            "sleep 100000",
        )
    )
    cancelled = gpuportal(portal, "cancel", str(submitted["id"]), "--json")
    assert cancelled.returncode == EXIT_OK, cancelled.stderr
    assert as_json(cancelled) == [{"id": submitted["id"], "cancelled": True, "state": "cancelled"}]
    again = gpuportal(portal, "cancel", str(submitted["id"]))
    assert again.returncode == EXIT_USAGE
    assert "already cancelled" in again.stderr

    # resubmit: a new job with the same request, recorded as the CLI's resubmit of this one
    from audit.models import AuditEvent

    resubmitted = as_json(gpuportal(portal, "resubmit", str(submitted["id"]), "--json"))
    assert resubmitted["id"] != submitted["id"]
    assert resubmitted["command"] == ["sh", "-c", "sleep 100000"]
    row = AuditEvent.objects.get(action="job.resubmit")
    assert (row.source, row.target_id) == ("cli", str(resubmitted["id"]))
    assert gpuportal(portal, "cancel", str(resubmitted["id"])).returncode == EXIT_OK


def test_dry_run_prints_the_same_manifests_as_the_api(portal, e2e_org):
    from rest_framework.test import APIClient

    body = {
        "project": "alpha",
        "kind": "single",
        "gpus": 1,
        "image": IMAGE,
        "name": "dry",
        "command": ["python", "train.py"],
    }
    client = APIClient()
    client.force_login(e2e_org["bob"])
    expected = client.post("/api/v1/jobs/?dry_run=true", body, format="json").json()["manifests"]

    dry = gpuportal(
        portal,
        "submit",
        "-p",
        "alpha",
        "--image",
        IMAGE,
        "--name",
        "dry",
        "--dry-run",
        "--",
        "python",
        "train.py",
    )
    assert dry.returncode == EXIT_OK, dry.stderr
    assert json.loads(dry.stdout) == expected
    # The forecast goes to stderr, so stdout stays the manifests (an empty cluster: now).
    assert "gpuportal: forecast: now" in dry.stderr
    from jobs.models import Job

    assert not Job.objects.filter(name="dry").exists()


def test_errors_are_one_line_with_distinct_exit_codes(portal):
    wrong = gpuportal({**portal, "GPUPORTAL_TOKEN": "not-a-token"}, "jobs")
    assert wrong.returncode == EXIT_AUTH
    assert wrong.stdout == ""
    assert len(wrong.stderr.strip().splitlines()) == 1
    assert wrong.stderr.startswith("gpuportal: ")

    missing = gpuportal(portal, "status", "999999")
    assert missing.returncode == EXIT_NOT_FOUND
    assert len(missing.stderr.strip().splitlines()) == 1

    too_big = gpuportal(
        portal, "submit", "-p", "alpha", "--image", IMAGE, "--gpus", "64", "--", "true"
    )
    assert too_big.returncode == EXIT_USAGE
    assert "gpus" in too_big.stderr

    bad_flag = gpuportal(
        portal, "submit", "-p", "alpha", "--image", IMAGE, "--mig", "1g.10gb", "--gang", "2"
    )
    assert bad_flag.returncode == EXIT_USAGE


def test_login_checks_the_token_and_stores_it_privately(portal, tmp_path):
    env = {k: v for k, v in portal.items() if k not in ("GPUPORTAL_URL", "GPUPORTAL_TOKEN")}
    refused = gpuportal(
        env, "login", "--url", portal["GPUPORTAL_URL"], "--token-stdin", stdin="wrong\n"
    )
    assert refused.returncode == EXIT_AUTH
    assert not (tmp_path / "config" / "gpuportal" / "config.json").exists()

    ok = gpuportal(
        env,
        "login",
        "--url",
        portal["GPUPORTAL_URL"],
        "--token-stdin",
        stdin=portal["GPUPORTAL_TOKEN"] + "\n",
    )
    assert ok.returncode == EXIT_OK, ok.stderr
    stored = tmp_path / "config" / "gpuportal" / "config.json"
    assert oct(stored.stat().st_mode & 0o777) == "0o600"
    assert gpuportal(env, "whoami").stdout.startswith("User:    bob")


def test_logs_follow_streams_until_the_job_ends(portal):
    import time

    submitted = as_json(
        gpuportal(
            portal,
            "submit",
            "-p",
            "alpha",
            "--image",
            IMAGE,
            "--json",
            "--",
            "sh",
            "-c",
            "echo first line; sleep 1500; echo last line",
        )
    )
    job_id = str(submitted["id"])
    deadline = time.monotonic() + 120
    while as_json(gpuportal(portal, "status", job_id, "--json"))["state"] != "running":
        assert time.monotonic() < deadline, "the job never ran"
        time.sleep(1)
    started = time.monotonic()
    followed = gpuportal(portal, "logs", job_id, "-f", timeout=180)
    assert followed.returncode == EXIT_OK, followed.stderr
    assert "first line" in followed.stdout
    assert "last line" in followed.stdout  # printed only when the pod ends (15 s at speed 100)
    assert time.monotonic() - started > 3  # it waited for the end instead of returning at once


def test_metrics_and_usage_outputs_parse(portal):
    submitted = as_json(
        gpuportal(
            portal,
            "submit",
            "-p",
            "alpha",
            "--image",
            IMAGE,
            "--wait",
            "--json",
            "--",
            "python",
            "train.py",
        )
    )
    metrics = as_json(gpuportal(portal, "metrics", str(submitted["id"]), "--json"))
    assert metrics["job"] == submitted["id"]
    projects = as_json(gpuportal(portal, "projects", "--json"))
    assert "usage" in projects[0]
    table = gpuportal(portal, "projects")
    assert table.stdout.splitlines()[0].split()[:4] == ["PROJECT", "ROLE", "POOL", "RESOURCE"]


def test_submit_from_a_saved_template_with_a_flag_overriding_it(portal, e2e_org):
    from jobs.models import Job, JobTemplate

    JobTemplate.objects.create(
        project=e2e_org["alpha"],
        name="nightly",
        fields={"kind": "single", "image": IMAGE, "gpus": 1, "env": {"SEED": "7"}},
    )
    done = gpuportal(
        portal,
        "submit",
        "-p",
        "alpha",
        "--template",
        "nightly",
        "--gpus",
        "2",
        "--name",
        "from-template",
        "--json",
        "--",
        "sh",
        "-c",
        "echo templated",
    )
    assert done.returncode == EXIT_OK, done.stderr
    job = Job.objects.get(name="from-template")
    assert (job.image, job.gpus, job.env) == (IMAGE, 2, {"SEED": "7"})
    assert job.command == ["sh", "-c", "echo templated"]
    missing = gpuportal(portal, "submit", "-p", "alpha", "--template", "nope")
    assert missing.returncode == EXIT_USAGE
    assert "template" in missing.stderr


def test_submit_with_a_volume_grace_and_a_sweep_and_warnings_on_stderr(portal, e2e_org):
    from jobs.models import Job, JobArray
    from volumes.models import DataVolume

    DataVolume.objects.create(
        project=e2e_org["alpha"],
        name="imagenet",
        kind="existing",
        claim_name="imagenet-pvc",
        mount_path="/data",
        read_only=True,
    )
    done = gpuportal(
        portal,
        "submit",
        "-p",
        "alpha",
        "--image",
        IMAGE,
        "--name",
        "with-data",
        "--mount",
        "imagenet:/imagenet:ro",
        "--grace",
        "30",
        "--shm-size",
        "1Gi",
        "-e",
        "WANDB_API_KEY=abc123",
        "--",
        "true",
    )
    assert done.returncode == EXIT_OK, done.stderr
    job = Job.objects.get(name="with-data")
    assert job.mounts == [
        {"volume": "imagenet", "claim": "imagenet-pvc", "path": "/imagenet", "read_only": True}
    ]
    assert (job.termination_grace_seconds, job.shm_size) == (30, "1Gi")
    # The plain value that looks like a credential is stored, with advice on stderr.
    assert "gpuportal: warning: " in done.stderr
    assert "WANDB_API_KEY" in done.stderr

    sweep = gpuportal(
        portal,
        "submit",
        "-p",
        "alpha",
        "--image",
        IMAGE,
        "--name",
        "lr",
        "--sweep",
        "lr=0.1,0.01",
        "--parallelism",
        "1",
        "--",
        "true",
    )
    assert sweep.returncode == EXIT_OK, sweep.stderr
    array = JobArray.objects.get(name="lr")
    assert sweep.stdout.startswith(f"Submitted array {array.pk} (lr) of 2 jobs")
    assert (array.count, array.parallelism, array.sweep) == (2, 1, {"lr": [0.1, 0.01]})


def test_workspace_start_list_stop_and_start_again(portal, e2e_org):
    from tests.e2e.conftest import wait_for
    from tests.factories import ensure_workspace_kinds

    ensure_workspace_kinds()
    wrong = gpuportal(portal, "workspace", "start", "-p", "alpha", "-k", "emacs")
    assert wrong.returncode == EXIT_USAGE
    assert "kind" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1

    started = gpuportal(portal, "workspace", "start", "-p", "alpha", "-s", "mig:1g.10gb")
    assert started.returncode == EXIT_OK, started.stderr
    assert "Open it at http" in started.stdout
    assert "/ws/" in started.stdout

    def listed() -> list[dict]:
        return as_json(gpuportal(portal, "workspace", "list", "--json"))

    ws = wait_for(
        lambda: (found := listed()) and found[0]["state"] == "running" and found[0],
        timeout=120,
        what="the workspace to run",
    )
    assert (ws["kind"], ws["project"], ws["shape"]) == ("jupyterlab", "alpha", "mig:1g.10gb")
    stopped = gpuportal(portal, "workspace", "stop", str(ws["id"]))
    assert stopped.returncode == EXIT_OK, stopped.stderr
    assert f"Workspace {ws['id']} ({ws['name']}) is stopping." in stopped.stdout
    wait_for(lambda: listed()[0]["state"] == "stopped", timeout=60, what="the workspace to stop")
    again = as_json(gpuportal(portal, "workspace", "again", str(ws["id"]), "--json"))
    assert (again["id"], again["runs"], again["state"]) == (ws["id"], 2, "queued")
    assert gpuportal(portal, "workspace", "stop", str(ws["id"])).returncode == EXIT_OK
