"""Quota arithmetic (pure; no database)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.arithmetic import (
    CapViolation,
    DepartmentCap,
    QuotaEntry,
    UsableAmount,
    cap_error_for_limit,
    cap_error_for_quota,
    department_cap_violations,
    format_quota_summary,
    mig_gpus_needed,
    pool_subscription,
    usable_amount,
    usable_amounts,
)

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-40GB"


@pytest.mark.parametrize(
    ("nominal", "borrowing_limit", "cohort_nominal", "cap", "maximum"),
    [
        (8, 4, 20, None, 12),  # limited by its own borrowing limit
        (8, None, 20, None, 20),  # no limit: everything the others are guaranteed
        (8, 4, 10, None, 10),  # the others only have 2 to lend
        (8, 0, 20, None, 8),  # may not borrow
        (8, None, 8, None, 8),  # alone in its cohort: nothing to borrow
        (8, None, 20, 16, 16),  # the department cap bounds it
        (8, None, 20, 4, 8),  # a cap below nominal never takes the guarantee away
        (0, None, 20, None, 20),  # a pure borrower
        (0, 3, 20, None, 3),
    ],
)
def test_usable_amount(nominal, borrowing_limit, cohort_nominal, cap, maximum):
    amount = usable_amount(
        nominal=nominal,
        borrowing_limit=borrowing_limit,
        cohort_nominal=cohort_nominal,
        department_cap=cap,
    )
    assert amount == UsableAmount(guaranteed=nominal, maximum=maximum)
    assert amount.borrowable == maximum - nominal


def test_usable_amount_refuses_negative_amounts():
    with pytest.raises(ValueError, match="negative"):
        usable_amount(nominal=-1, borrowing_limit=None, cohort_nominal=0)
    with pytest.raises(ValueError, match="negative"):
        usable_amount(nominal=1, borrowing_limit=-1, cohort_nominal=1)


def _q(project, department, nominal, borrowing_limit=None, pool="h100", resource="gpu"):
    return QuotaEntry(project, department, pool, resource, nominal, borrowing_limit)


def test_usable_amounts_borrow_only_within_the_department_pool_and_resource():
    quotas = [
        _q("vision", "research", 8, 4),
        _q("nlp", "research", 8, None),
        _q("infra", "platform", 16, None),  # another department: never lends to research
        _q("vision-mig", "research", 7, None, resource="1g.10gb"),
        _q("nlp-a100", "research", 4, None, pool="a100"),
    ]
    amounts = usable_amounts(quotas)
    assert amounts[("vision", "h100", "gpu")] == UsableAmount(8, 12)
    assert amounts[("nlp", "h100", "gpu")] == UsableAmount(8, 16)
    assert amounts[("infra", "h100", "gpu")] == UsableAmount(16, 16)
    assert amounts[("vision-mig", "h100", "1g.10gb")] == UsableAmount(7, 7)
    assert amounts[("nlp-a100", "a100", "gpu")] == UsableAmount(4, 4)


def test_usable_amounts_apply_department_caps():
    quotas = [_q("vision", "research", 8), _q("nlp", "research", 8)]
    caps = [DepartmentCap("research", "h100", "gpu", 12)]
    assert usable_amounts(quotas, caps)[("vision", "h100", "gpu")] == UsableAmount(8, 12)


quota_lists = st.lists(
    st.builds(
        QuotaEntry,
        project=st.sampled_from(["p1", "p2", "p3", "p4"]),
        department=st.sampled_from(["d1", "d2"]),
        pool=st.just("h100"),
        resource=st.sampled_from(["gpu", "1g.10gb"]),
        nominal=st.integers(0, 64),
        borrowing_limit=st.none() | st.integers(0, 64),
    ),
    max_size=8,
    unique_by=lambda q: (q.project, q.pool, q.resource),
)


@settings(deadline=None)  # pure and fast, but the CI machine is shared
@given(quota_lists)
def test_usable_amounts_properties(quotas):
    amounts = usable_amounts(quotas)
    cohort_totals: dict = {}
    for quota in quotas:
        cohort_totals[quota.cohort] = cohort_totals.get(quota.cohort, 0) + quota.nominal
    for quota in quotas:
        amount = amounts[quota.key]
        assert amount.guaranteed == quota.nominal
        assert quota.nominal <= amount.maximum <= cohort_totals[quota.cohort]
        if quota.borrowing_limit is not None:
            assert amount.maximum <= quota.nominal + quota.borrowing_limit


@settings(deadline=None)  # pure and fast, but the CI machine is shared
@given(
    nominal=st.integers(0, 100),
    limit=st.integers(0, 100),
    extra=st.integers(0, 100),
    others=st.integers(0, 100),
)
def test_a_larger_borrowing_limit_never_lowers_the_maximum(nominal, limit, extra, others):
    def maximum(borrowing_limit):
        return usable_amount(
            nominal=nominal, borrowing_limit=borrowing_limit, cohort_nominal=nominal + others
        ).maximum

    assert maximum(limit) <= maximum(limit + extra) <= maximum(None) == nominal + others


def test_department_cap_violations_name_needed_and_allowed():
    quotas = [_q("vision", "research", 12), _q("nlp", "research", 8), _q("infra", "platform", 4)]
    caps = [
        DepartmentCap("research", "h100", "gpu", 16),
        DepartmentCap("platform", "h100", "gpu", 4),  # exactly at the cap: fine
        DepartmentCap("platform", "a100", "gpu", 0),  # nothing held: fine
    ]
    violations = department_cap_violations(quotas, caps)
    assert violations == [CapViolation("research", "h100", "gpu", limit=16, needed=20)]
    assert violations[0].excess == 4
    assert violations[0].message == (
        "Department research caps GPUs in pool h100 at 16, but its projects' guaranteed quotas "
        "add up to 20 (4 more than allowed)."
    )


@pytest.mark.parametrize(
    ("limit", "others", "nominal", "allowed"),
    [(16, 12, 4, True), (16, 12, 5, False), (16, 20, 0, True), (16, 20, 1, False)],
)
def test_cap_error_for_quota(limit, others, nominal, allowed):
    error = cap_error_for_quota(
        department="research",
        pool="h100",
        resource="1g.10gb",
        limit=limit,
        others_nominal=others,
        nominal=nominal,
    )
    assert (error is None) is allowed
    if error:
        assert f"at {limit}" in error
        assert f"needs {nominal}, at most {max(0, limit - others)} is allowed" in error
        assert "1g.10gb MIG instances" in error


def test_cap_error_for_limit():
    assert (
        cap_error_for_limit(
            department="research", pool="h100", resource="gpu", limit=20, projects_nominal=20
        )
        is None
    )
    assert cap_error_for_limit(
        department="research", pool="h100", resource="gpu", limit=10, projects_nominal=20
    ) == (
        "The projects of department research already hold 20 GPUs in pool h100; "
        "the cap must be at least 20 (got 10)."
    )


@pytest.mark.parametrize(
    ("model", "instances", "gpus"),
    [
        (H100, {}, 0),
        (H100, {"1g.10gb": 1}, 1),
        (H100, {"1g.10gb": 7}, 1),
        (H100, {"1g.10gb": 8}, 2),
        (H100, {"1g.10gb": 28, "2g.20gb": 6}, 6),  # kubesim's default MIG node
        (H100, {"3g.40gb": 3}, 2),
        (H100, {"7g.80gb": 2, "1g.10gb+me": 2}, 4),
        (A100, {"1g.10gb": 4}, 1),  # 1g.10gb is a two-slice profile on the A100-40GB
        (A100, {"1g.10gb": 5}, 2),
        (H100, {"1g.5gb": 3}, 3),  # stale profile the model lacks: one GPU each, the safe side
        (H100, {"1g.10gb": 0}, 0),
    ],
)
def test_mig_gpus_needed(model, instances, gpus):
    assert mig_gpus_needed(model, instances) == gpus


def test_pool_subscription_counts_whole_gpus_and_mig_gpu_equivalents():
    quotas = [
        _q("vision", "research", 16),
        _q("nlp", "research", 8),
        _q("vision", "research", 14, resource="1g.10gb"),
        _q("nlp", "research", 3, resource="2g.20gb"),
        _q("elsewhere", "research", 100, pool="a100"),  # another pool: ignored
    ]
    sub = pool_subscription(pool="h100", gpu_model=H100, capacity_gpus=32, quotas=quotas)
    assert (sub.full_gpus, sub.mig_gpus, sub.needed_gpus) == (24, 3, 27)
    assert sub.mig_instances == {"1g.10gb": 14, "2g.20gb": 3}
    assert not sub.oversubscribed
    assert sub.free_gpus == 5
    assert sub.message is None
    assert sub.summary == "27 of 32 GPUs guaranteed (24 whole, 3 for MIG: 1g.10gb ×14, 2g.20gb ×3)"


def test_pool_subscription_warns_when_over_subscribed():
    quotas = [_q("vision", "research", 31), _q("nlp", "research", 8, resource="1g.10gb")]
    sub = pool_subscription(pool="h100", gpu_model=H100, capacity_gpus=32, quotas=quotas)
    assert sub.oversubscribed
    assert (sub.needed_gpus, sub.excess_gpus, sub.free_gpus) == (33, 1, 0)
    assert sub.message == (
        "Pool h100 is over-subscribed: 33 of 32 GPUs guaranteed (31 whole, 2 for MIG: "
        "1g.10gb ×8); its nominal quotas need 1 GPU(s) more than the pool has, so not every "
        "guarantee can be met."
    )


@settings(deadline=None)  # pure and fast, but the CI machine is shared
@given(
    full=st.integers(0, 100),
    small=st.integers(0, 100),
    capacity=st.integers(0, 100),
)
def test_pool_subscription_properties(full, small, capacity):
    quotas = [_q("a", "d", full), _q("b", "d", small, resource="1g.10gb")]
    sub = pool_subscription(pool="h100", gpu_model=H100, capacity_gpus=capacity, quotas=quotas)
    assert sub.needed_gpus == full + -(-small // 7)
    assert sub.oversubscribed == (sub.needed_gpus > capacity)
    assert sub.free_gpus - sub.excess_gpus == capacity - sub.needed_gpus
    assert (sub.message is None) != sub.oversubscribed


def test_format_quota_summary():
    text = format_quota_summary(
        [
            ("h100", "1g.10gb", 7, 0),
            ("h100", "gpu", 8, 4),
            ("a100", "gpu", 4, None),
            ("h100", "2g.20gb", 2, None),
        ]
    )
    assert text == "a100: 4 gpu (+any); h100: 8 gpu (+4), 1g.10gb ×7, 2g.20gb ×2 (+any)"
    assert format_quota_summary([]) == ""
