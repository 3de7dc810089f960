"""What a workspace's user sees, derived from the state of its current run (a Job). Pure.

A workspace has no state machine of its own: every run is a job, scheduled, queued and counted
against quota like any other, so the job's state is the one source of truth.
"""

from jobs.states import JobState

QUEUED = "queued"
STARTING = "starting"
RUNNING = "running"
STOPPED = "stopped"
FAILED = "failed"

LABELS = {
    QUEUED: "Queued",
    STARTING: "Starting",
    RUNNING: "Running",
    STOPPED: "Stopped",
    FAILED: "Failed",
}

_FROM_JOB = {
    JobState.SUBMITTED: QUEUED,
    JobState.QUEUED: QUEUED,
    JobState.PREEMPTED: QUEUED,
    JobState.ADMITTED: STARTING,
    JobState.RUNNING: RUNNING,
    JobState.SUCCEEDED: STOPPED,
    JobState.CANCELLED: STOPPED,
    JobState.FAILED: FAILED,
}


def workspace_state(job_state: str | None) -> str:
    """The workspace state for its current run's job state (None: never started)."""
    if not job_state:
        return STOPPED
    return _FROM_JOB.get(JobState(job_state), STOPPED)


def is_active(state: str) -> bool:
    """Holds (or waits for) cluster resources: counts against the per-user limit."""
    return state in (QUEUED, STARTING, RUNNING)
