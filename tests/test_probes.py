"""The exec probes of the Kubernetes manifests (deploy/): fresh heartbeat files, and the web's
probe endpoints answering kubelet's plain-HTTP requests by pod IP."""

import os
import subprocess
import sys
import time

import pytest

from portal.probes import main, newest_age


def test_fresh_files_pass_and_stale_or_missing_ones_fail(tmp_path, capsys):
    beat = tmp_path / "worker-heartbeat"
    assert main(["fresh", "30", str(beat)]) == 1
    assert "no file matches" in capsys.readouterr().err
    beat.touch()
    assert main(["fresh", "30", str(beat)]) == 0
    old = time.time() - 120
    os.utime(beat, (old, old))
    assert main(["fresh", "30", str(beat)]) == 1
    assert "stale" in capsys.readouterr().err
    # beat's schedule file may carry a suffix (shelve backends): a pattern matches any of them
    (tmp_path / "celerybeat-schedule.db").touch()
    assert main(["fresh", "30", str(tmp_path / "celerybeat-schedule*")]) == 0
    assert newest_age([str(tmp_path / "nothing*")]) is None


def test_the_probe_runs_as_a_module_without_settings(tmp_path):
    beat = tmp_path / "worker-heartbeat"
    beat.touch()
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["SECRET_KEY"] = ""  # settings would refuse to load with DEBUG off: they are not loaded
    env["PORTAL_ENV"] = "production"
    done = subprocess.run(
        [sys.executable, "-m", "portal.probes", "fresh", "30", str(beat)], env=env, check=False
    )
    assert done.returncode == 0


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/livez", "/healthz"])
def test_probe_endpoints_answer_any_host_over_plain_http(client, settings, path):
    settings.ALLOWED_HOSTS = ["portal.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    response = client.get(path, HTTP_HOST="10.1.2.3:8000")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    # Every other page still refuses an unknown host.
    assert client.get("/accounts/login/", HTTP_HOST="10.1.2.3:8000").status_code == 400


@pytest.mark.django_db
def test_livez_does_not_touch_the_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert client.get("/livez").status_code == 200


@pytest.mark.django_db
def test_a_bearer_scrape_of_metrics_answers_any_host(client, settings):
    settings.ALLOWED_HOSTS = ["portal.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    settings.PORTAL_METRICS_TOKEN = "scrape-token"
    ok = client.get("/metrics", HTTP_HOST="10.1.2.3:8000", HTTP_AUTHORIZATION="Bearer scrape-token")
    assert ok.status_code == 200
    assert ok["Content-Type"].startswith("text/plain; version=")  # Prometheus' text format
    wrong = client.get("/metrics", HTTP_HOST="10.1.2.3:8000", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 403


def test_the_celery_worker_touches_its_heartbeat_file_while_it_runs(tmp_path):
    """The worker's liveness file: touched while the consumer runs, removed on shutdown."""
    import signal

    broker = os.environ.get("PORTAL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    beat = tmp_path / "worker-heartbeat"
    env = {**os.environ, "CELERY_BROKER_URL": broker, "PORTAL_WORKER_HEARTBEAT_FILE": str(beat)}
    celery = os.path.join(os.path.dirname(sys.executable), "celery")
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [
                celery,
                "-A",
                "portal",
                "worker",
                "-c",
                "1",
                "--without-mingle",
                "--without-gossip",
                "-n",
                f"probe-{os.getpid()}@%h",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        first = None
        while time.monotonic() < deadline:
            if beat.exists():
                mtime = beat.stat().st_mtime
                if first is None:
                    first = mtime
                elif mtime > first:
                    break  # touched again: the timer runs
            time.sleep(0.5)
        else:
            raise AssertionError("the heartbeat file was not kept fresh:\n" + log.read_text())
        assert main(["fresh", "60", str(beat)]) == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    assert not beat.exists()  # a stopped worker leaves no fresh file behind
