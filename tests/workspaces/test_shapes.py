"""The shape rule (workspaces.shapes) and the state mapping (workspaces.states): tables."""

import pytest

from workspaces.shapes import ShapeError, check_allowed, parse_shape
from workspaces.states import workspace_state

ALLOWED = ["gpu:1", "mig:1g.10gb", "fraction:0.5"]


@pytest.mark.parametrize(
    ("text", "job_fields"),
    [
        ("gpu:1", {"kind": "single", "gpus": 1}),
        ("mig:1g.10gb", {"kind": "mig", "mig_profile": "1g.10gb"}),
        ("fraction:0.5", {"kind": "single", "gpus": 0, "gpu_fraction": "0.5"}),
    ],
)
def test_allowed_shapes_become_job_fields(text, job_fields):
    assert check_allowed(text, ALLOWED, kind_name="JupyterLab").job_fields() == job_fields


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("gpu:2", "JupyterLab does not allow gpu:2; allowed: gpu:1, mig:1g.10gb, fraction:0.5"),
        ("mig:3g.40gb", "does not allow mig:3g.40gb"),
        ("fraction:0.25", "does not allow fraction:0.25"),
        ("gpu:9", "the number of GPUs must be 1 to 8"),
        ("gpu:0", "the number of GPUs must be 1 to 8"),
        ("mig:big", "a MIG profile looks like 1g.10gb"),
        ("fraction:1.5", "a number between 0 and 1"),
        ("fraction:x", "a number between 0 and 1"),
        ("tpu:1", "is not a shape"),
        ("", "is not a shape"),
    ],
)
def test_refused_shapes_say_why(text, reason):
    with pytest.raises(ShapeError) as exc:
        check_allowed(text, ALLOWED, kind_name="JupyterLab")
    assert reason in str(exc.value)


def test_labels():
    assert parse_shape("mig:1g.10gb").label == "MIG slice 1g.10gb"
    assert parse_shape("gpu:2").label == "2 GPUs"
    assert parse_shape("fraction:0.50").label == "50% of a GPU"


@pytest.mark.parametrize(
    ("job_state", "state"),
    [
        (None, "stopped"),
        ("submitted", "queued"),
        ("queued", "queued"),
        ("preempted", "queued"),
        ("admitted", "starting"),
        ("running", "running"),
        ("succeeded", "stopped"),
        ("cancelled", "stopped"),
        ("failed", "failed"),
    ],
)
def test_workspace_state_follows_its_job(job_state, state):
    assert workspace_state(job_state) == state
