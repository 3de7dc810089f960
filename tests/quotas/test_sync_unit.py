"""quotas.sync pure parts: when the live object already is what the portal wants, and when a
sync refuses to delete (the mass-deletion guard)."""

import pytest

from quotas.sync import contains


@pytest.mark.parametrize(
    ("live", "desired", "expected"),
    [
        ({"a": 1, "b": 2, "status": {}}, {"a": 1}, True),
        ({"a": 1}, {"a": 2}, False),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ({"l": [{"x": 1, "default": True}]}, {"l": [{"x": 1}]}, True),
        ({"l": [{"x": 1}, {"x": 2}]}, {"l": [{"x": 1}]}, False),
        ({"q": "2Ti"}, {"q": "2048Gi"}, False),  # normalised differently: apply once more
        ({"spec": {"n": None}}, {"spec": {"n": None}}, True),
    ],
)
def test_contains(live, desired, expected):
    assert contains(live, desired) is expected


@pytest.mark.parametrize(
    ("deleting", "owned", "refused"),
    [
        (0, 0, False),
        (3, 3, False),  # a handful is always allowed (removing one project or pool)
        (4, 100, False),  # a small share of a big installation
        (25, 100, False),  # exactly the share: allowed
        (26, 100, True),
        (4, 10, True),  # more than 3 and more than 25 %
        (8, 29, True),
    ],
)
def test_mass_deletion_guard(deleting, owned, refused):
    from quotas.sync import mass_deletion_refusal

    reason = mass_deletion_refusal(deleting=deleting, owned=owned, max_fraction=0.25, max_count=3)
    assert (reason is not None) is refused
    if refused:
        assert f"Refused to delete {deleting} of the {owned} quota objects" in reason
        assert "Nothing was deleted" in reason
