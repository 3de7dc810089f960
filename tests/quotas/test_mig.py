"""The MIG profile table and its rules (pure; no database)."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas import mig

A100_40 = "NVIDIA-A100-SXM4-40GB"
H100_80 = "NVIDIA-H100-80GB-HBM3"


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("NVIDIA-A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA-A100-PCIE-40GB", "A100-40GB"),
        ("A100-40GB", "A100-40GB"),
        ("nvidia a100 sxm4 40gb", "A100-40GB"),
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA-A100-80GB-PCIe", "A100-80GB"),
        ("NVIDIA-A800-SXM4-80GB", "A100-80GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("NVIDIA-H100-PCIe", "H100-80GB"),
        ("H100-80GB", "H100-80GB"),
        ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "H100-80GB"),
        ("NVIDIA-H800", "H100-80GB"),
        ("NVIDIA-H100-NVL", "H100-94GB"),
        ("H100-94GB", "H100-94GB"),
        ("NVIDIA-H100-SXM5-94GB", "H100-94GB"),
        ("NVIDIA-GH200-480GB", "H100-96GB"),
        ("NVIDIA-H20", "H100-96GB"),
        ("NVIDIA-H200", "H200-141GB"),
        ("NVIDIA-H200-NVL", "H200-141GB"),
        ("NVIDIA-GH200-144G-HBM3e", "GH200-144GB"),
        ("NVIDIA-B200", "B200-180GB"),
        ("NVIDIA-GB200", "GB200-186GB"),
        ("NVIDIA-A30", "A30-24GB"),
    ],
)
def test_model_names_as_gfd_writes_them_and_common_variants_map_to_a_family(model, family):
    assert mig.family_for_model(model).key == family
    assert mig.is_mig_capable(model)


@pytest.mark.parametrize(
    "model", ["Tesla-T4", "NVIDIA-L40S", "NVIDIA-GeForce-RTX-4090", "NVIDIA-A10", "", "H100-40GB"]
)
def test_gpus_without_mig_have_no_profiles(model):
    assert not mig.is_mig_capable(model)
    assert mig.profiles_for_model(model) == []
    with pytest.raises(ValueError, match="does not support MIG"):
        mig.validate_profile(model, "1g.10gb")


@pytest.mark.parametrize(
    ("model", "profiles"),
    [
        (A100_40, ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]),
        (
            "NVIDIA-A100-SXM4-80GB",
            ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
        ),
        (H100_80, ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
        (
            "NVIDIA-H100-NVL",
            ["1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"],
        ),
        (
            "NVIDIA-H200",
            ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
        ),
        (
            "NVIDIA-B200",
            ["1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"],
        ),
        ("NVIDIA-A30", ["1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"]),
    ],
)
def test_profiles_per_model_follow_nvidias_table(model, profiles):
    assert mig.profiles_for_model(model) == profiles


@pytest.mark.parametrize(
    ("model", "profile", "max_per_gpu", "compute_slices", "memory_slices"),
    [
        (H100_80, "1g.10gb", 7, 1, 1),
        (H100_80, "1g.10gb+me", 1, 1, 1),
        (H100_80, "1g.20gb", 4, 1, 2),
        (H100_80, "2g.20gb", 3, 2, 2),
        (H100_80, "3g.40gb", 2, 3, 4),
        (H100_80, "4g.40gb", 1, 4, 4),
        (H100_80, "7g.80gb", 1, 7, 8),
        # the same name means a different shape on another model
        (A100_40, "1g.10gb", 4, 1, 2),
        ("NVIDIA-A30", "1g.6gb", 4, 1, 1),
        ("NVIDIA-A30", "2g.12gb", 2, 2, 2),
    ],
)
def test_profile_rows(model, profile, max_per_gpu, compute_slices, memory_slices):
    row = mig.profile_info(model, profile)
    assert (row.max_per_gpu, row.compute_slices, row.memory_slices) == (
        max_per_gpu,
        compute_slices,
        memory_slices,
    )


def test_profile_carries_memory_and_compute_fraction():
    row = mig.profile_info(H100_80, "3g.40gb")
    assert row.memory_gb == 40
    assert row.compute_fraction == pytest.approx(3 / 7)
    assert mig.profile_info("NVIDIA-A30", "2g.12gb").compute_fraction == pytest.approx(1 / 2)


def test_a_3g_40gb_on_an_a100_40gb_is_rejected_naming_the_valid_profiles():
    with pytest.raises(ValueError) as excinfo:
        mig.validate_profile(A100_40, "3g.40gb")
    assert str(excinfo.value) == (
        "3g.40gb is not a MIG profile of NVIDIA-A100-SXM4-40GB; valid profiles: "
        "1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb."
    )


@pytest.mark.parametrize("profile", ["3g.20gb", "1g.5gb+me", "", "gpu", "1c.3g.40gb", "3G.40GB"])
def test_invalid_names_on_h100_are_rejected(profile):
    with pytest.raises(ValueError, match=re.escape("valid profiles: 1g.10gb, 1g.10gb+me, 1g.20gb")):
        mig.validate_profile(H100_80, profile)


@pytest.mark.parametrize(
    ("profile", "resource"),
    [
        ("1g.10gb", "nvidia.com/mig-1g.10gb"),
        ("3g.40gb", "nvidia.com/mig-3g.40gb"),
        ("1g.10gb+me", "nvidia.com/mig-1g.10gb.me"),
        ("7g.141gb", "nvidia.com/mig-7g.141gb"),
    ],
)
def test_resource_names_under_the_mixed_strategy_round_trip(profile, resource):
    assert mig.resource_name(profile) == resource
    assert mig.profile_from_resource(resource) == profile


def test_resource_name_refuses_non_profiles():
    assert mig.FULL_GPU_RESOURCE == "nvidia.com/gpu"
    assert mig.profile_from_resource("nvidia.com/gpu") is None
    with pytest.raises(ValueError, match="not a MIG profile name"):
        mig.resource_name("gpu")


@pytest.mark.parametrize(
    ("model", "layout", "fits"),
    [
        (H100_80, {"1g.10gb": 7}, True),
        (H100_80, {"1g.10gb": 8}, False),
        (H100_80, {"2g.20gb": 3}, True),
        (H100_80, {"2g.20gb": 4}, False),
        (H100_80, {"3g.40gb": 2}, True),
        (H100_80, {"3g.40gb": 1, "4g.40gb": 1}, True),
        (H100_80, {"4g.40gb": 2}, False),  # a 4g may only start at slice 0
        (H100_80, {"7g.80gb": 1, "1g.10gb": 1}, False),
        (H100_80, {"1g.20gb": 4}, True),
        (H100_80, {"1g.20gb": 3, "2g.20gb": 1}, True),
        (H100_80, {"1g.10gb": 3, "4g.40gb": 1}, True),
        (H100_80, {"1g.10gb": 4, "4g.40gb": 1}, False),  # 8 compute slices
        (H100_80, {"1g.10gb+me": 2}, False),  # at most one +me
        (H100_80, {"1g.10gb+me": 1, "1g.10gb": 6}, True),
        (H100_80, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, True),  # mig-parted all-balanced
        (H100_80, {}, True),
        (A100_40, {"1g.10gb": 4}, True),
        (A100_40, {"1g.10gb": 5}, False),
        ("NVIDIA-A30", {"1g.6gb": 4}, True),
        ("NVIDIA-A30", {"2g.12gb": 2, "1g.6gb": 1}, False),
        ("NVIDIA-A30", {"2g.12gb": 1, "1g.6gb": 2}, True),
    ],
)
def test_layout_fits_follows_the_placement_rules(model, layout, fits):
    assert mig.layout_fits(model, layout) is fits


def test_layout_fits_accepts_a_list_and_rejects_foreign_profiles():
    assert mig.layout_fits(H100_80, ["1g.10gb", "1g.10gb", "3g.40gb"])
    with pytest.raises(ValueError, match="valid profiles"):
        mig.layout_fits(H100_80, {"3g.20gb": 1})


@settings(deadline=None)  # pure and fast, but the CI machine is shared
@given(st.lists(st.sampled_from(mig.profiles_for_model(H100_80)), max_size=9))
def test_a_layout_that_fits_never_exceeds_the_gpu(profiles):
    rows = [mig.profile_info(H100_80, p) for p in profiles]
    if mig.layout_fits(H100_80, profiles):
        assert sum(r.compute_slices for r in rows) <= 7
        assert sum(r.memory_slices for r in rows) <= 8
        assert sum(r.media_extensions for r in rows) <= 1
        for row in rows:
            assert profiles.count(row.name) <= row.max_per_gpu


@pytest.mark.parametrize("model", [A100_40, H100_80, "NVIDIA-H200", "NVIDIA-A30"])
def test_max_per_gpu_is_exactly_what_the_placement_rule_allows(model):
    for profile in mig.profiles_for_model(model):
        row = mig.profile_info(model, profile)
        assert mig.layout_fits(model, {profile: row.max_per_gpu})
        assert not mig.layout_fits(model, {profile: row.max_per_gpu + 1})


@pytest.mark.parametrize(
    ("given_name", "normalised"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("  NVIDIA-A100-SXM4-40GB ", "NVIDIA-A100-SXM4-40GB"),
        ("A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
        ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "NVIDIA-H100-80GB-HBM3"),
        ("Tesla-T4-SHARED", "Tesla-T4"),
        ("NVIDIA-H100-PCIe", "NVIDIA-H100-PCIe"),
    ],
)
def test_normalise_model_writes_gfd_product_names(given_name, normalised):
    assert mig.normalise_model(given_name) == normalised
