"""KAI's fair share arithmetic in kubesim (pure: no server)."""

from __future__ import annotations

from kubesim.controllers.kai import quota
from kubesim.controllers.kai.quota import QueueShare


def _queue(name, *, quota_gpus, weight=1.0, limit=None, parent="", priority=100, request=0):
    share = QueueShare(name=name, parent=parent, priority=priority, created=name)
    share.deserved = {"cpu": None, "memory": None, "gpu": quota_gpus * 1000}
    share.limit = {"cpu": None, "memory": None, "gpu": None if limit is None else limit * 1000}
    share.weight = {"cpu": 1.0, "memory": 1.0, "gpu": weight}
    share.request = {"cpu": 0, "memory": 0, "gpu": request * 1000}
    return share


def _fair(queues, total_gpus) -> dict[str, float]:
    by_name = {q.name: q for q in queues}
    quota.link_children(by_name)
    quota.set_fair_shares(by_name, {"cpu": 0, "memory": 0, "gpu": total_gpus * 1000})
    return {q.name: q.fair["gpu"] / 1000 for q in queues}


def test_idle_quota_is_shared_by_over_quota_weight():
    fair = _fair(
        [
            _queue("a", quota_gpus=2, weight=1, request=8),
            _queue("b", quota_gpus=2, weight=3, request=8),
            _queue("owner", quota_gpus=4, weight=1, request=0),
        ],
        8,
    )
    assert fair == {"a": 3, "b": 5, "owner": 0}


def test_owner_demand_takes_its_quota_back():
    fair = _fair(
        [
            _queue("a", quota_gpus=2, weight=1, request=8),
            _queue("b", quota_gpus=2, weight=3, request=8),
            _queue("owner", quota_gpus=4, weight=1, request=4),
        ],
        8,
    )
    assert fair == {"a": 2, "b": 2, "owner": 4}


def test_limit_and_request_cap_the_share_and_the_rest_goes_on():
    fair = _fair(
        [
            _queue("capped", quota_gpus=0, weight=1, limit=1, request=8),
            _queue("small", quota_gpus=0, weight=1, request=2),
            _queue("big", quota_gpus=0, weight=1, request=8),
        ],
        8,
    )
    assert fair == {"capped": 1, "small": 2, "big": 5}


def test_higher_priority_queues_get_the_surplus_first():
    fair = _fair(
        [
            _queue("urgent", quota_gpus=1, priority=200, request=6),
            _queue("normal", quota_gpus=1, priority=100, request=6),
        ],
        8,
    )
    assert fair == {"urgent": 6, "normal": 2}


def test_a_zero_weight_gets_nothing_over_its_quota():
    fair = _fair(
        [
            _queue("fixed", quota_gpus=2, weight=0, request=8),
            _queue("elastic", quota_gpus=2, weight=1, request=3),
        ],
        8,
    )
    assert fair == {"fixed": 2, "elastic": 3}


def test_children_divide_what_their_department_got():
    dept_a = _queue("dept-a", quota_gpus=4, request=10)
    dept_b = _queue("dept-b", quota_gpus=4, request=2)
    children = [
        _queue("a1", quota_gpus=1, weight=1, parent="dept-a", request=5),
        _queue("a2", quota_gpus=1, weight=1, parent="dept-a", request=5),
    ]
    fair = _fair([dept_a, dept_b, *children], 8)
    assert fair == {"dept-a": 6, "dept-b": 2, "a1": 3, "a2": 3}


def test_over_limit_names_the_queue_and_the_numbers():
    leaf = _queue("team", quota_gpus=0, limit=0)
    queues = {"team": leaf}
    found = quota.over_limit(queues, "team", {"cpu": 0, "memory": 0, "gpu": 1000})
    assert found is not None
    message = quota.over_limit_message(*found, {"gpu": 1000})
    assert message == (
        "team quota has reached the allowable limit of GPUs. Limit is 0 GPUs, currently 0 GPUs "
        "allocated and workload requested 1 GPUs"
    )
