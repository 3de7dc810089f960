"""The submit form's feasibility line (jobs.submission.feasibility),
from the submission's own validation."""

import pytest

from jobs.submission.feasibility import feasibility
from jobs.validation import JobRequest, PoolFacts, validate_job_request

H100 = PoolFacts(
    slug="h100",
    gpu_model="NVIDIA-H100-80GB-HBM3",
    gpus_per_node=8,
    node_count=4,
    mig_profiles=("1g.10gb",),
    default_cpu="8",
    default_memory="64Gi",
    maximum={"gpu": 12, "1g.10gb": 2},
    guaranteed={"gpu": 8, "1g.10gb": 2},
)


def line(in_use=None, **fields):
    req = JobRequest(project_slug="vision", image="busybox", **fields)
    result = validate_job_request(req, [H100])
    return feasibility(
        result=result,
        kind=req.kind,
        mig_profile=req.mig_profile,
        pools=[H100],
        in_use=in_use or {},
    )


@pytest.mark.parametrize(
    ("in_use", "fields", "level", "text"),
    [
        (
            {},
            {"kind": "single", "gpus": 2},
            "fits",
            "Fits now in pool h100: the project uses 0 of its 8 guaranteed GPUs.",
        ),
        (
            {("h100", "gpu"): 7},
            {"kind": "single", "gpus": 2},
            "borrows",
            "Fits now in pool h100 by borrowing 1 GPU that the department's other projects "
            "leave idle",
        ),
        (
            {("h100", "gpu"): 8},
            {"kind": "gang", "gpus": 4, "replicas": 2},
            "queues",
            "Will queue: it needs 8 GPUs; in pool h100 the project's 8 guaranteed GPUs are in use "
            "and 4 can be borrowed.",
        ),
        (
            {("h100", "1g.10gb"): 2},
            {"kind": "mig", "mig_profile": "1g.10gb"},
            "queues",
            "Will queue: it needs 1 1g.10gb MIG slice; in pool h100 the project's 2 guaranteed "
            "1g.10gb slices are in use and 0 can be borrowed.",
        ),
        (
            {},
            {"kind": "gang", "gpus": 8, "replicas": 2},
            "never",
            "Can never run: This job needs 16 GPUs (2 pods × 8 GPUs) at once, but project vision "
            "may never use more than 12 in pool h100",
        ),
        ({}, {"kind": "single", "gpus": 9}, "never", "Can never run: GPUs per pod must be 1 to 8"),
        (
            {},
            {"kind": "mig", "mig_profile": "3g.40gb"},
            "never",
            "Can never run: pool h100 does not offer 3g.40gb",
        ),
    ],
)
def test_feasibility_sentences(in_use, fields, level, text):
    result = line(in_use, **fields)
    assert result.level == level
    assert result.text.startswith(text), result.text


def test_a_typo_elsewhere_asks_to_fix_the_fields():
    req = JobRequest(project_slug="vision", image="Not An Image", kind="single")
    result = validate_job_request(req, [H100])
    answer = feasibility(result=result, kind="single", mig_profile="", pools=[H100], in_use={})
    assert answer.level == "incomplete"
