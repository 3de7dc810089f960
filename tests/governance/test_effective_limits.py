"""A member's GPU limit in a pool: their own row wins over the project's default for members."""

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("default", "own", "expected"),
    [
        (None, None, []),
        (4, None, [4]),
        (None, 2, [2]),
        (4, 2, [2]),
        (2, 6, [6]),  # an own row may also allow more than the default
    ],
)
def test_the_members_own_limit_overrides_the_projects_default(
    personas, django_assert_num_queries, default, own, expected
):
    from governance.models import MemberGpuLimit
    from governance.selectors import effective_limits

    project, pool = personas.project_a, personas.pool
    if default is not None:
        MemberGpuLimit.objects.create(project=project, pool=pool, max_gpus=default)
    if own is not None:
        MemberGpuLimit.objects.create(
            project=project, pool=pool, user=personas.member, max_gpus=own
        )
    # Another member's own row never counts for this one.
    MemberGpuLimit.objects.create(project=project, pool=pool, user=personas.admin, max_gpus=1)

    with django_assert_num_queries(1):
        limits = effective_limits(
            project_id=project.pk, user_id=personas.member.pk, pools=[pool.slug]
        )

    assert [limit.max_gpus for limit in limits] == expected
    assert all(limit.pool == pool.slug for limit in limits)
