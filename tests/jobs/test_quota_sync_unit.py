"""quotas.sync.contains: when the live object already is what the portal wants."""

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
