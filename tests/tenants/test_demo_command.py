"""manage.py demo: migrate + seed, then supervise the long-running processes."""

import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from django.conf import settings
from django.core.management import call_command

from portal.management.commands.demo import Child, demo_children, supervise
from tenants.models import Project

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def test_demo_without_serving_migrates_and_seeds(db, fast_passwords):
    out = io.StringIO()
    call_command("demo", "--no-serve", stdout=out)
    assert Project.objects.count() == 4
    assert "Demo logins" in out.getvalue()


def test_demo_runs_kubesim_then_a_worker_with_beat_then_the_watcher_and_the_web_server():
    kubesim, worker, watcher, web = demo_children(addr="127.0.0.1:8123")
    assert watcher.argv[-1] == "watch_cluster"
    assert kubesim.argv[1:3] == ["-m", "kubesim"]
    assert kubesim.argv[kubesim.argv.index("--kubeconfig-out") + 1] == settings.KUBECONFIG
    assert "--beat" in worker.argv
    assert web.name == "web"
    assert web.argv[-3:] == ["runserver", "--noreload", "127.0.0.1:8123"]


def test_supervise_stops_everything_when_one_child_fails():
    sleeper = Child("sleeper", SLEEPER)
    failing = Child("failing", [sys.executable, "-c", "import sys; sys.exit(3)"])
    out = io.StringIO()
    assert supervise([sleeper, failing], out=out) == 3
    assert "failing exited with code 3" in out.getvalue()
    assert sleeper.process.poll() is not None  # stopped, not left behind


def test_supervise_stops_children_on_ctrl_c():
    children = [Child("one", SLEEPER), Child("two", SLEEPER)]
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        assert supervise(children, out=io.StringIO()) == 0
    finally:
        timer.cancel()
    assert all(child.process.poll() is not None for child in children)


def _claim_templates_in(kubeconfig: Path, namespace: str) -> list[str]:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        items = client.ResourceV1Api(api).list_namespaced_resource_claim_template(namespace)
    finally:
        api.close()
    return [t.metadata.name for t in items.items]


def _batch_jobs_in(kubeconfig: Path, namespace: str) -> list[str]:
    from kubernetes import client, config

    if not kubeconfig.exists():
        return []
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        jobs = client.BatchV1Api(api).list_namespaced_job(namespace)
    except Exception:  # kubesim still starting, or the namespace not created yet
        return []
    finally:
        api.close()
    return [job.metadata.name for job in jobs.items]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_manage_py_demo_serves_until_interrupted(tmp_path: Path):
    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "PORTAL_VAR_DIR": str(tmp_path / "var"),
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("DJANGO_SETTINGS_MODULE", "KUBECONFIG", "CELERY_BROKER_URL"):
        env.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--addr", f"127.0.0.1:{port}"],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        status = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/login/") as response:
                    status = response.status
                    break
            except OSError:
                time.sleep(0.3)
        assert status == 200
        # The sample jobs reach the simulated cluster through the worker, with no broker server.
        kubeconfig = tmp_path / "var" / "kubesim" / "kubeconfig"
        job_names = []
        # vision's: two Kueue jobs, one that queues, and the two half-GPU notebooks on KAI
        while time.monotonic() < deadline and len(job_names) < 5:
            job_names = _batch_jobs_in(kubeconfig, "gp-vision")
            time.sleep(0.5)
        assert len(job_names) == 5, job_names
        # the demo cluster's shared pools: a time-sliced T4 job and a DRA job with its claim
        # template (speech also has a Volcano gang, not a batch Job)
        while time.monotonic() < deadline and len(_batch_jobs_in(kubeconfig, "gp-speech")) < 1:
            time.sleep(0.5)
        assert len(_batch_jobs_in(kubeconfig, "gp-nlp")) >= 2
        assert _claim_templates_in(kubeconfig, "gp-speech")
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, output
    assert "vision-admin" in output
    from jobs.demo import SAMPLE_JOBS

    assert f"Submitted {len(SAMPLE_JOBS)} sample jobs." in output
    assert "Demo stopped." in output
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0  # runserver is gone
    # Each process's lines carry its name; the access log is the web server's.
    lines = output.splitlines()
    assert any(line.startswith("[kubesim] kubesim listening on https://") for line in lines)
    assert any(line.startswith("[web]") and "GET /admin/login/" in line for line in lines)
    assert any(line.startswith("[worker]") for line in lines)
    # A normal Ctrl-C stops quietly: the worker shuts its pool down itself, no ERROR lines.
    assert "exited with signal" not in output
    assert not [line for line in lines if "ERROR" in line], output


def test_supervise_labels_each_childs_lines():
    script = "import sys, time; print('hello'); print('oops', file=sys.stderr); time.sleep(120)"
    one = Child("one", [sys.executable, "-c", script])
    two = Child("two", [sys.executable, "-c", script.replace("hello", "bonjour")])
    out = io.StringIO()
    timer = threading.Timer(3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        assert supervise([one, two], out=out) == 0
    finally:
        timer.cancel()
    lines = out.getvalue().splitlines()
    assert sorted(lines) == [
        "[one]     hello",
        "[one]     oops",
        "[two]     bonjour",
        "[two]     oops",
    ]


def test_children_start_in_order_each_once_the_previous_is_ready(tmp_path):
    marker = tmp_path / "first-ready"
    first = Child(
        "first",
        [
            sys.executable,
            "-c",
            f"import time; time.sleep(0.5); open({str(marker)!r}, 'w'); time.sleep(120)",
        ],
        ready=marker.exists,
    )
    second_started_after_first_ready = []

    class Second(Child):
        def start(self) -> None:
            second_started_after_first_ready.append(marker.exists())
            super().start()

    second = Second("second", SLEEPER)
    announced = []
    timer = threading.Timer(3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        code = supervise([first, second], out=io.StringIO(), on_ready=lambda: announced.append(1))
    finally:
        timer.cancel()
    assert code == 0
    assert second_started_after_first_ready == [True]
    assert announced == [1]


def test_a_child_that_never_gets_ready_stops_the_demo():
    never = Child("never", SLEEPER, ready=lambda: False, ready_timeout=0.5)
    after = Child("after", SLEEPER)
    out = io.StringIO()
    assert supervise([never, after], out=out) == 1
    assert "never was not ready after 0.5 s; stopping the demo." in out.getvalue()
    assert after.process is None  # never started
    assert never.process.poll() is not None
