"""jobs.device_request (issue 26): asking a DRA device by attributes, table-driven."""

from __future__ import annotations

import pytest

from jobs import device_request as dr

H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.mark.parametrize(
    ("request_", "field", "words"),
    [
        ({"min_memory": "100Gi"}, "device.min_memory", "largest GPU in pool dra has 79.6 GiB"),
        ({"min_memory": "lots"}, "device.min_memory", "not a memory size"),
        ({"colour": "green"}, "device.colour", "publishes no attribute 'colour'"),
        ({"min_compute_capability": "10.0"}, "device.min_compute_capability", "9.0.0"),
        ({"min_compute_capability": "nine"}, "device.min_compute_capability", "not a compute"),
        ({"product_name": "Tesla T4"}, "device.product_name", "'NVIDIA H100 80GB HBM3' GPUs only"),
        ({"architecture": "Ampere"}, "device.architecture", "Hopper GPUs only"),
        ({"architecture": ""}, "device.architecture", "non-empty"),
        ("40Gi", "device", "JSON object"),
    ],
)
def test_bad_requests_name_the_field(request_, field, words):
    found = dr.errors(request_, pool_slug="dra", gpu_model=H100, dra_managed=True)
    assert [f for f, _ in found] == [field]
    assert words in found[0][1]


def test_only_dra_pools_take_device_requests():
    ((field, message),) = dr.errors(
        {"min_memory": "1Gi"}, pool_slug="h100", gpu_model=H100, dra_managed=False
    )
    assert field == "device"
    assert "not DRA-managed" in message


def test_good_request_passes_and_becomes_cel_selectors():
    request = {
        "product_name": "NVIDIA H100 80GB HBM3",
        "architecture": "hopper",
        "min_compute_capability": "8.0",
        "min_memory": "40Gi",
    }
    assert dr.errors(request, pool_slug="dra", gpu_model=H100, dra_managed=True) == []
    assert dr.selectors(request) == [
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'",
        "device.attributes['gpu.nvidia.com'].architecture == 'hopper'",
        "device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('8.0.0')) >= 0",
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
    ]


def test_claim_template_for_a_mig_profile_with_mps_sharing():
    from quotas import sharing

    template = dr.claim_template(
        job_id=7,
        namespace="gp-vision",
        labels={"gpu-portal.io/job-id": "7"},
        request={},
        mig_profile="1g.10gb",
        sharing_config=sharing.dra_sharing_config(mode="mps", replicas=4, mps_memory_limit="5Gi"),
    )
    assert template["metadata"]["name"] == "gp-job-7-gpu"
    devices = template["spec"]["spec"]["devices"]
    exactly = devices["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == "mig.nvidia.com"
    assert exactly["selectors"] == [
        {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}
    ]
    assert devices["config"][0]["opaque"]["parameters"]["sharing"] == {
        "strategy": "MPS",
        "mpsConfig": {"defaultActiveThreadPercentage": 25, "defaultPinnedDeviceMemoryLimit": "5Gi"},
    }
