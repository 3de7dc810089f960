"""Property checks: malformed patches fail with PatchError (never a crash the server would turn
into a 500), and server-side apply keeps its promises for any configuration."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubesim.api.apply import (
    ApplyConflict,
    semantically_equal,
    server_side_apply,
    update_managed_fields,
)
from kubesim.api.patch import PatchError, strategic_merge_patch

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from(["a", "b", "delete", "replace", "merge"]),
)
patch_keys = st.sampled_from(
    [
        "name",
        "image",
        "env",
        "value",
        "containers",
        "ports",
        "containerPort",
        "$patch",
        "$retainKeys",
        "$setElementOrder/env",
        "$deleteFromPrimitiveList/finalizers",
        "finalizers",
    ]
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(patch_keys, inner, max_size=4)
    ),
    max_leaves=12,
)


@SETTINGS
@given(
    st.dictionaries(patch_keys, json_values, max_size=4),
    st.dictionaries(patch_keys, json_values, max_size=4),
)
def test_strategic_merge_patch_fails_only_with_patch_error(spec, patch):
    original = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    code = None
    try:
        result = strategic_merge_patch(original, {"spec": patch})
    except PatchError as exc:
        code = exc.code
    if code is None:
        assert isinstance(result, dict)
    else:
        assert code in (400, 422)


names = st.sampled_from(["a", "b", "c"])
env_var = st.fixed_dictionaries({"name": names}, optional={"value": st.sampled_from(["1", "2"])})
container = st.fixed_dictionaries(
    {"name": names},
    optional={
        "image": st.sampled_from(["img:1", "img:2"]),
        "env": st.lists(env_var, max_size=3, unique_by=lambda e: e["name"]),
    },
)
pod_spec = st.fixed_dictionaries(
    {},
    optional={
        "containers": st.lists(container, max_size=3, unique_by=lambda c: c["name"]),
        "tolerations": st.lists(st.fixed_dictionaries({"key": names}), max_size=2),
        "nodeSelector": st.dictionaries(names, names, max_size=2),
    },
)
labels = st.dictionaries(names, names, max_size=3)


def pod(spec: dict, pod_labels: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": pod_labels},
        "spec": spec,
    }


@SETTINGS
@given(pod_spec, labels, pod_spec, labels, pod_spec, st.booleans())
def test_apply_sets_what_it_applies_is_idempotent_and_prunes(s1, l1, s2, l2, other, force):
    first = server_side_apply(None, pod(s1, l1), manager="portal", force=False, now="T1")
    first["metadata"]["resourceVersion"] = "1"
    assert server_side_apply(first, pod(s1, l1), manager="portal", force=False, now="T2") == first

    edited = copy.deepcopy(first)
    edited["spec"] = other
    edited["metadata"]["managedFields"] = update_managed_fields(
        first, edited, manager="kubectl-edit", now="T3"
    )
    for live in (first, edited):
        conflicts = None
        try:
            result = server_side_apply(live, pod(s2, l2), manager="portal", force=force, now="T4")
        except ApplyConflict as exc:
            conflicts = exc.conflicts
        if conflicts is not None:
            assert not force
            assert conflicts
            assert all(manager == "kubectl-edit" for manager, _ in conflicts)
            continue
        assert all(result["metadata"]["labels"][k] == v for k, v in l2.items())
        assert all(
            result["spec"]["nodeSelector"][k] == v for k, v in s2.get("nodeSelector", {}).items()
        )
        if "tolerations" in s2:
            assert result["spec"]["tolerations"] == s2["tolerations"]
        if live is first:  # labels portal stopped applying, owned by nobody else, are gone
            assert not set(l1) - set(l2) & set(result["metadata"].get("labels") or {})
        result["metadata"]["resourceVersion"] = "2"
        again = server_side_apply(result, pod(s2, l2), manager="portal", force=False, now="T5")
        assert semantically_equal(result, again)
