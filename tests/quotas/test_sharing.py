"""quotas.sharing (issue 26): the pool sharing rules, table-driven, and what the admin sees."""

from __future__ import annotations

import pytest

from quotas import sharing

BASE = {
    "gpu_model": "NVIDIA-H100-80GB-HBM3",
    "mig_profiles": [],
    "mode": "exclusive",
    "replicas": None,
    "rename": False,
    "fail_greater_than_one": None,
    "mps_memory_limit": "",
    "dra_managed": False,
    "dra_feature_gates": [],
}


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"mode": "time-slicing", "replicas": 1}, "sharing_replicas", "at least 2"),
        ({"mode": "time-slicing", "replicas": 65}, "sharing_replicas", "At most 64"),
        ({"mode": "time-slicing"}, "sharing_replicas", "needs the number"),
        ({"mode": "mps", "replicas": 49, "mps_memory_limit": "1Gi"}, "sharing_replicas", "48"),
        ({"mode": "mps", "replicas": 4}, "mps_memory_limit", "needs a memory limit"),
        ({"mode": "mps", "replicas": 4, "mps_memory_limit": "30Gi"}, "mps_memory_limit", "4"),
        ({"mode": "mps", "replicas": 4, "mps_memory_limit": "lots"}, "mps_memory_limit", "not"),
        (
            {"mode": "mps", "replicas": 2, "mps_memory_limit": "20Gi", "mig_profiles": ["1g.10gb"]},
            "sharing_mode",
            "MIG",
        ),
        ({"replicas": 4}, "sharing_replicas", "exclusive pool"),
        ({"mps_memory_limit": "10Gi"}, "mps_memory_limit", "exclusive pool"),
        ({"rename": True}, "sharing_rename", "shared pool"),
        ({"fail_greater_than_one": True}, "sharing_fail_requests_greater_than_one", "only"),
        (
            {"mode": "time-slicing", "replicas": 2, "mps_memory_limit": "1Gi"},
            "mps_memory_limit",
            "no memory limit",
        ),
        (
            {"mode": "time-slicing", "replicas": 2, "dra_managed": True},
            "dra_feature_gates",
            "TimeSlicingSettings",
        ),
        ({"dra_feature_gates": ["MPSSupport"]}, "dra_feature_gates", "only to DRA"),
        ({"dra_managed": True, "dra_feature_gates": ["Nope"]}, "dra_feature_gates", "Unknown"),
        ({"mode": "round-robin"}, "sharing_mode", "not a sharing mode"),
    ],
)
def test_bad_sharing_names_the_field(changes, field, words):
    errors = sharing.pool_errors(**{**BASE, **changes})
    assert field in errors, errors
    assert words in " ".join(errors[field])


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"mode": "time-slicing", "replicas": 4},
        {"mode": "time-slicing", "replicas": 64, "rename": True, "fail_greater_than_one": True},
        {"mode": "mps", "replicas": 4, "mps_memory_limit": "19Gi"},
        {
            "mode": "mps",
            "replicas": 2,
            "mps_memory_limit": "30Gi",
            "dra_managed": True,
            "dra_feature_gates": ["MPSSupport"],
        },
        {"dra_managed": True},
    ],
)
def test_good_sharing_passes(changes):
    assert sharing.pool_errors(**{**BASE, **changes}) == {}


@pytest.mark.parametrize(
    ("gpus", "mode", "replicas", "text"),
    [
        (16, "time-slicing", 4, "16 GPUs × 4 replicas = 64 shares"),
        (8, "mps", 2, "8 GPUs × 2 MPS clients = 16 shares"),
        (16, "exclusive", None, "16 GPUs"),
        (1, "exclusive", None, "1 GPU"),
    ],
)
def test_shares_text(gpus, mode, replicas, text):
    assert sharing.shares_text(gpus, mode, replicas) == text


def test_resource_names_labels_and_plugin_config():
    assert sharing.gpu_resource_name("time-slicing", False) == "nvidia.com/gpu"
    assert sharing.gpu_resource_name("mps", True) == "nvidia.com/gpu.shared"
    assert sharing.gpu_resource_name("exclusive", True) == "nvidia.com/gpu"
    assert sharing.product_label("Tesla-T4", mode="time-slicing", rename=False) == "Tesla-T4-SHARED"
    assert sharing.product_label("Tesla-T4", mode="time-slicing", rename=True) == "Tesla-T4"
    mps = sharing.device_plugin_config(
        mode="mps", replicas=4, rename=False, fail_greater_than_one=None
    )
    assert mps["sharing"]["mps"]["failRequestsGreaterThanOne"] is True  # v0.20.0 default
    ts = sharing.device_plugin_config(
        mode="time-slicing", replicas=4, rename=False, fail_greater_than_one=None
    )
    assert ts["sharing"]["timeSlicing"] == {
        "renameByDefault": False,
        "failRequestsGreaterThanOne": False,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
    }
    assert sharing.mps_limits(gpu_memory_mib=40960, clients=2) == {
        "activeThreadPercentage": 50,
        "pinnedDeviceMemoryLimitMiB": 20480,
    }


def test_every_mode_has_one_isolation_sentence():
    for mode in (*sharing.MODES, "mig"):
        text = sharing.ISOLATION[mode]
        assert text.count(". ") == 0
        assert text.endswith(".")
    assert "no isolation" in sharing.isolation_sentence("time-slicing")
    assert "hardware-isolated" in sharing.isolation_sentence("exclusive", mig=True)


@pytest.mark.django_db
def test_pool_quotas_count_shares_and_admin_says_so(client, staff_user):
    from quotas import services
    from quotas.admin import sharing_summary_text

    staff = staff_user
    pool = services.pool_create(
        actor=staff,
        slug="t4-shared",
        name="T4 shared",
        gpu_model="Tesla-T4",
        node_count=2,
        gpus_per_node=8,
        sharing_mode="time-slicing",
        sharing_replicas=4,
    )
    assert pool.total_shares == 64
    assert pool.node_labels == {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}
    text = sharing_summary_text(pool)
    assert text.startswith("16 GPUs × 4 replicas = 64 shares; quotas in this pool count shares")
    assert "nvidia.com/device-plugin.config=gp-t4-shared" in text
    client.force_login(staff)
    page = client.get("/admin/quotas/gpupool/")
    assert "16 GPUs × 4 replicas = 64 shares" in page.content.decode()
    with pytest.raises(Exception) as excinfo:
        services.pool_update(actor=staff, pool=pool, sharing_replicas=1)
    assert "sharing_replicas" in excinfo.value.message_dict
