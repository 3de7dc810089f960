"""jobs/validation.py: every rule answers with its field and a specific message."""

import pytest

from jobs.validation import JobRequest, PoolFacts, validate_job_request

H100 = PoolFacts(
    slug="h100",
    gpu_model="NVIDIA-H100-80GB-HBM3",
    gpus_per_node=8,
    node_count=4,
    mig_profiles=("1g.10gb", "3g.40gb"),
    default_cpu="8",
    default_memory="64Gi",
    maximum={"gpu": 12, "1g.10gb": 7},
)
A100 = PoolFacts(
    slug="a100",
    gpu_model="NVIDIA-A100-SXM4-40GB",
    gpus_per_node=4,
    node_count=2,
    mig_profiles=("1g.5gb",),
    default_cpu="4",
    default_memory="32Gi",
    maximum={"gpu": 4, "1g.5gb": 14},
)
POOLS = [A100, H100]


def req(**kw) -> JobRequest:
    base = {"project_slug": "alpha", "kind": "single", "image": "pytorch/pytorch:2.4.0"}
    base.update(kw)
    return JobRequest(**base)


def errors(**kw) -> dict:
    return validate_job_request(req(**kw), POOLS).errors


def test_a_plain_single_gpu_job_is_valid_with_defaults():
    result = validate_job_request(req(), POOLS)
    assert result.ok, result.errors
    assert result.resolved.gpus == 1
    assert result.resolved.backend == "kueue"
    assert result.resolved.eligible_pools == ["a100", "h100"]
    assert result.resolved.cpu == "4"  # the smaller default fits either pool
    assert result.resolved.memory == "32Gi"
    assert result.resolved.max_runtime_minutes == 24 * 60


def test_pool_defaults_apply_when_a_pool_is_chosen():
    result = validate_job_request(req(pool="h100"), POOLS)
    assert (result.resolved.cpu, result.resolved.memory) == ("8", "64Gi")


def test_mig_profile_of_another_model_names_valid_profiles():
    e = errors(kind="mig", mig_profile="3g.40gb", pool="a100")
    (message,) = e["mig_profile"]
    assert "3g.40gb is not a MIG profile of NVIDIA-A100-SXM4-40GB" in message
    assert "3g.20gb" in message


def test_mig_profile_valid_for_model_but_not_offered_by_pool():
    e = errors(kind="mig", mig_profile="2g.20gb", pool="h100")
    assert "does not offer 2g.20gb" in e["mig_profile"][0]
    assert "1g.10gb, 3g.40gb" in e["mig_profile"][0]


def test_mig_job_without_pool_picks_pools_that_offer_the_profile():
    result = validate_job_request(req(kind="mig", mig_profile="1g.10gb"), POOLS)
    assert result.ok, result.errors
    assert result.resolved.eligible_pools == ["h100"]
    assert result.resolved.mig_resource == "nvidia.com/mig-1g.10gb"


def test_mig_needs_a_profile_and_takes_no_whole_gpus():
    assert "needs a MIG profile" in errors(kind="mig")["mig_profile"][0]
    assert "exactly one MIG slice" in errors(kind="mig", mig_profile="1g.10gb", gpus=2)["gpus"][0]
    assert "Only MIG jobs" in errors(kind="single", mig_profile="1g.10gb")["mig_profile"][0]


def test_gpus_larger_than_any_node_of_the_pool():
    e = errors(gpus=8, pool="a100")
    assert e["gpus"] == ["8 GPUs per pod will not fit: the largest node in pool a100 has 4 GPUs."]
    assert "1 to 8 whole GPUs" in errors(gpus=9)["gpus"][0]
    assert "1 to 8 whole GPUs" in errors(gpus=0)["gpus"][0]


def test_never_admissible_says_needed_and_maximum():
    e = errors(kind="gang", gpus=8, replicas=2)
    (message,) = e["gpus"]
    assert "needs 16 GPUs (2 pods × 8 GPUs)" in message
    assert "12 in pool h100" in message
    assert "never" in message
    ok = validate_job_request(req(kind="gang", gpus=4, replicas=3), POOLS)
    assert ok.ok
    assert ok.resolved.eligible_pools == ["h100"]


def test_never_admissible_for_mig_quota():
    pools = [H100.__class__(**{**H100.__dict__, "maximum": {"gpu": 8}})]
    e = validate_job_request(req(kind="mig", mig_profile="3g.40gb"), pools).errors
    assert "needs 1 3g.40gb MIG slice" in e["mig_profile"][0]
    assert "0 in pool h100" in e["mig_profile"][0]


@pytest.mark.parametrize(
    "name",
    ["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_X"],
)
def test_device_isolation_env_is_forbidden(name):
    e = errors(env={name: "all"})
    assert f"{name} cannot be set" in e["env"][0]


@pytest.mark.parametrize("name", ["1ABC", "A-B", "A B", ""])
def test_invalid_env_names(name):
    assert "not a valid variable name" in errors(env={name: "x"})["env"][0]


def test_gang_rendezvous_env_is_reserved_but_free_for_single_jobs():
    assert "set by the portal" in errors(kind="gang", replicas=2, env={"RANK": "0"})["env"][0]
    assert validate_job_request(req(env={"RANK": "0"}), POOLS).ok


def test_oversized_command_and_env():
    assert "at most 256" in errors(command=["x"] * 300)["command"][0]
    assert "bytes; at most" in errors(command=["x" * 40000])["command"][0]
    assert "bytes; at most" in errors(env={"BIG": "x" * 40000})["env"][0]
    assert "at most 128" in errors(env={f"V{i}": "1" for i in range(200)})["env"][0]


@pytest.mark.parametrize(
    "image",
    [
        "pytorch/pytorch:2.4.0",
        "nvcr.io/nvidia/pytorch:24.08-py3",
        "localhost:5000/team/train",
        "busybox",
        "ghcr.io/org/img@sha256:" + "a" * 64,
    ],
)
def test_valid_images(image):
    assert "image" not in errors(image=image)


@pytest.mark.parametrize(
    "image", ["", "UPPER/case", "has space", "img:", "img@sha256:zz", "-bad/x", "a" * 600]
)
def test_invalid_images(image):
    assert "image" in errors(image=image)


def test_scalars():
    assert "gang job has 2 to 64" in errors(kind="gang", replicas=1)["replicas"][0]
    assert "gang job has 2 to 64" in errors(kind="gang", replicas=65)["replicas"][0]
    assert "Only gang jobs" in errors(replicas=2)["replicas"][0]
    assert "backend applies to gang jobs" in errors(backend="volcano")["backend"][0]
    assert "1 to 10080" in errors(max_runtime_minutes=0)["max_runtime_minutes"][0]
    assert "not a valid cpu quantity" in errors(cpu="lots")["cpu"][0]
    assert "not a valid memory quantity" in errors(memory="64 GB")["memory"][0]
    assert "not a valid name" in errors(name="Bad_Name")["name"][0]
    assert "Unknown kind" in errors(kind="mpi")["kind"][0]


def test_unknown_pool_lists_the_projects_pools():
    assert errors(pool="v100")["pool"] == [
        "Project alpha has no quota in pool 'v100'; its pools: a100, h100."
    ]


def test_project_without_any_quota():
    e = validate_job_request(req(), []).errors
    assert e["project"] == ["Project alpha has no GPU quota in any pool."]


def test_gang_backend_default_and_volcano():
    assert validate_job_request(req(kind="gang", replicas=2), POOLS).resolved.backend == "kueue"
    r = validate_job_request(req(kind="gang", replicas=2, backend="volcano"), POOLS)
    assert r.ok
    assert r.resolved.backend == "volcano"
