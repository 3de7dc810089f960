"""Pieces of the job pipeline's safety that need no cluster: error classification, the per-job
lock on both databases' paths, the task name the services send, and the import layering."""

import ast
import json
import threading
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

REPO = Path(__file__).resolve().parents[2]


def _api_exception(status: int, message: str) -> ApiException:
    exc = ApiException(status=status, reason="Forbidden")
    exc.body = json.dumps({"kind": "Status", "message": message, "reason": "Forbidden"})
    return exc


def test_403_from_a_terminating_namespace_is_retryable_and_other_403s_are_not():
    from portal.kube.apply import PermanentKubeError, RetryableKubeError, classify

    terminating = classify(
        _api_exception(
            403,
            'jobs.batch "gp-job-7" is forbidden: unable to create new content in namespace '
            "gp-alpha because it is being terminated",
        )
    )
    assert isinstance(terminating, RetryableKubeError)
    assert terminating.status == 403
    denied = classify(_api_exception(403, 'jobs.batch is forbidden: User "x" cannot create'))
    assert isinstance(denied, PermanentKubeError)


def test_the_file_lock_excludes_a_second_holder_until_released(tmp_path):
    from jobs.reconcile.locking import JobBusy, file_lock

    path = tmp_path / "locks" / "job-1.lock"
    held, release, outcome = threading.Event(), threading.Event(), {}

    def holder():
        with file_lock(path, 1.0):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(10)
    with pytest.raises(JobBusy), file_lock(path, 0.05):
        outcome["second"] = "entered"
    release.set()
    thread.join(10)
    with file_lock(path, 1.0):
        outcome["third"] = "entered"
    assert outcome == {"third": "entered"}


@pytest.mark.django_db(transaction=True)
def test_the_job_lock_on_postgresql_excludes_another_connection_and_frees_on_exit():
    from django.db import connection

    from jobs.reconcile.locking import JobBusy, job_lock

    assert connection.vendor == "postgresql"
    results = {}

    def other(name):
        try:
            with job_lock(424242, wait=0):
                results[name] = "got it"
        except JobBusy:
            results[name] = "busy"
        finally:
            connection.close()

    with job_lock(424242, wait=0):
        thread = threading.Thread(target=other, args=("while held",))
        thread.start()
        thread.join(10)
        with job_lock(424243, wait=0):  # another job's lock is independent
            pass
    thread = threading.Thread(target=other, args=("after",))
    thread.start()
    thread.join(10)
    assert results == {"while held": "busy", "after": "got it"}


@pytest.mark.django_db(transaction=True)
def test_a_waiting_job_lock_gives_up_after_its_wait():
    import time

    from django.db import connection

    from jobs.reconcile.locking import JobBusy, job_lock

    results = {}

    def other():
        started = time.monotonic()
        try:
            with job_lock(515151, wait=0.3):
                results["other"] = "got it"
        except JobBusy:
            results["other"] = ("busy", time.monotonic() - started)
        finally:
            connection.close()

    with job_lock(515151, wait=0):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(20)
    assert results["other"][0] == "busy"
    assert 0.25 < results["other"][1] < 10


def test_the_services_send_the_reconcile_task_by_the_name_the_tasks_module_registers():
    from jobs import tasks
    from jobs.services import RECONCILE_TASK
    from portal.celery import app

    assert tasks.reconcile_job.name == RECONCILE_TASK
    assert RECONCILE_TASK in app.tasks


def _imports(path: Path) -> tuple[set[str], list[str]]:
    """(modules imported at module level, imports found inside functions)."""
    tree = ast.parse(path.read_text())
    top, nested = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom | ast.Import):
            if isinstance(node, ast.ImportFrom):
                # `from jobs.reconcile import services` imports jobs.reconcile.services too
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                names = [a.name for a in node.names]
            if node.col_offset == 0:
                top.update(n for n in names if n)
            else:
                nested.extend(f"{path.name}:{node.lineno} {n}" for n in names if n)
    return top, nested


# Lower layers never import upper ones: pure modules, then models, selectors, services,
# reconcile, and on top tasks and the HTTP layers (the pages must not import the API: below).
LAYERS = [
    {"jobs.states", "jobs.status", "jobs.manifests", "jobs.validation", "jobs.render"},
    {"jobs.models", "jobs.reconcile.locking", "jobs.reconcile.bulk"},
    {"jobs.selectors"},
    {"jobs.services"},
    {"jobs.reconcile.services"},
    {
        "jobs.tasks",
        "jobs.submission.api",
        "jobs.submission.views",
        "jobs.submission.forms",
        "jobs.admin",
        "jobs.demo",
    },
]


def test_the_jobs_modules_import_downwards_only_and_never_inside_functions():
    rank = {module: i for i, layer in enumerate(LAYERS) for module in layer}
    upward, nested_all = [], []
    for module, level in rank.items():
        path = REPO / (module.replace(".", "/") + ".py")
        top, nested = _imports(path)
        nested_all += [n for n in nested if " jobs." in n or " quotas." in n or " tenants." in n]
        for imported in top:
            if imported in rank and rank[imported] > level:
                upward.append(f"{module} imports {imported}")
    assert upward == []
    assert nested_all == []


def test_the_pages_do_not_import_the_api_module():
    top, _ = _imports(REPO / "jobs" / "submission" / "views.py")
    assert "jobs.submission.api" not in top
