"""JSON logs (PORTAL_LOG_FORMAT=json): one object per line with time, level, logger, message,
the request id (from X-Request-ID or made, echoed in the response) and the job id of a reconcile.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from portal.logs import ContextFilter, JsonFormatter, log_context

REPO = Path(__file__).resolve().parent.parent


def formatted(record: logging.LogRecord) -> dict:
    ContextFilter().filter(record)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    return json.loads(line)


def record(message: str = "hello %s", *args, level=logging.WARNING, exc_info=None):
    return logging.LogRecord(
        "jobs.reconcile", level, __file__, 1, message, args or ("world",), exc_info
    )


def test_a_line_carries_time_level_logger_message_and_the_ids_in_context():
    with log_context(request_id="req-1", job_id=42):
        entry = formatted(record())
    assert entry["message"] == "hello world"
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "jobs.reconcile"
    assert entry["time"].endswith("+00:00")
    assert (entry["request_id"], entry["job_id"]) == ("req-1", 42)
    # Outside the block the ids are gone again.
    assert "job_id" not in formatted(record())


def test_a_traceback_stays_on_the_line():
    try:
        raise ValueError("boom")
    except ValueError:
        entry = formatted(record(exc_info=sys.exc_info()))
    assert "ValueError: boom" in entry["traceback"]


def _run_with_json_logs(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PORTAL_LOG_FORMAT": "json", "DJANGO_SETTINGS_MODULE": "portal.settings"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_setting_turns_every_process_log_into_json_lines():
    result = _run_with_json_logs(
        "import django, logging; django.setup()\n"
        "from portal.logs import log_context\n"
        "with log_context(job_id=7):\n"
        "    logging.getLogger('jobs.tasks').warning('reconcile of %s', 7)\n"
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert lines == [
        {
            "time": lines[0]["time"],
            "level": "WARNING",
            "logger": "jobs.tasks",
            "message": "reconcile of 7",
            "job_id": 7,
        }
    ]


def test_requests_log_their_request_id(client, db, caplog):
    caplog.set_level(logging.WARNING, logger="django.request")
    response = client.get("/api/v1/jobs/", headers={"X-Request-ID": "trace-abc"})
    assert response.status_code in (401, 403)
    assert response["X-Request-ID"] == "trace-abc"
    records = [r for r in caplog.records if r.name == "django.request"]
    assert records
    assert {formatted(r)["request_id"] for r in records} == {"trace-abc"}


def test_an_unknown_format_refuses_to_start():
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO,
        env={**os.environ, "PORTAL_LOG_FORMAT": "xml"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "PORTAL_LOG_FORMAT must be 'text' or 'json'" in result.stderr
