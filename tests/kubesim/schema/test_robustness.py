"""Whatever a client sends, validation answers with causes — it never raises (a 500)."""

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubesim.api.builtin_validation import validate_builtin

from .conftest import compiled
from .test_builtin_validation import job
from .test_kueue_schemas import cluster_queue, workload

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)


def paths(value, prefix=()):
    """Every path (tuple of keys/indexes) inside a JSON value."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*prefix, index))


def replaced(obj, path, new):
    obj = copy.deepcopy(obj)
    if not path:
        return new
    target = obj
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return obj


def check_causes(causes):
    assert isinstance(causes, list)
    for cause in causes:
        assert set(cause) == {"reason", "message", "field"}
        assert all(isinstance(v, str) for v in cause.values())


def fuzz(make, data, new):
    obj = make()
    targets = [p for p in paths(obj) if p and p[0] != "apiVersion"]
    path = data.draw(st.sampled_from(targets))
    mutated = replaced(obj, path, new)
    schema = compiled(obj["apiVersion"], obj["kind"])
    if isinstance(mutated, dict):
        schema.apply_defaults(mutated)
        schema.prune(mutated)
    check_causes(schema.validate(mutated))
    check_causes(schema.validate(mutated, make()))
    check_causes(validate_builtin(mutated))


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.data(), json_values)
def test_cluster_queue_mutations_never_raise(data, new):
    fuzz(cluster_queue, data, new)


@FUZZ
@given(st.data(), json_values)
def test_workload_mutations_never_raise(data, new):
    fuzz(workload, data, new)


@FUZZ
@given(st.data(), json_values)
def test_job_mutations_never_raise(data, new):
    obj = job()
    path = data.draw(st.sampled_from([p for p in paths(obj) if p]))
    check_causes(validate_builtin(replaced(obj, path, new)))
