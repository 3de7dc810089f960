"""Placement as pure functions: the eligible pools become a required node affinity, a Volcano
gang gets exactly one pool, and kubesim's Kueue matches flavors against the affinity as Kueue
v0.19's flavorassigner does."""

from kubesim.controllers.kueue.engine import Flavor, PodSet, flavor_matches_node_affinity
from kubesim.controllers.scheduler import matches_node_affinity

from jobs.manifests import build_job_manifests, pool_affinity
from jobs.validation import JobRequest, PoolFacts, choose_gang_pool, validate_job_request
from tests.jobs.test_manifests import spec

PRODUCT = "nvidia.com/gpu.product"


def pool(slug, per_node, *, guaranteed=8, maximum=8, nodes=2):
    return PoolFacts(
        slug=slug,
        gpu_model="NVIDIA-H100-80GB-HBM3",
        gpus_per_node=per_node,
        node_count=nodes,
        mig_profiles=(),
        default_cpu="8",
        default_memory="64Gi",
        maximum={"gpu": maximum},
        guaranteed={"gpu": guaranteed},
    )


def terms(affinity):
    return affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]


def node(labels):
    return {"metadata": {"name": "n", "labels": labels}}


def flavor_ok(flavor_labels, pod_spec):
    required = (
        (pod_spec.get("affinity") or {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
    )
    ps = PodSet(
        "main",
        1,
        {},
        node_selector=pod_spec.get("nodeSelector") or {},
        node_affinity_terms=required.get("nodeSelectorTerms"),
    )
    return flavor_matches_node_affinity(Flavor("f", node_labels=flavor_labels), ps)


def test_validation_keeps_only_pools_whose_nodes_hold_the_pod():
    result = validate_job_request(
        JobRequest(project_slug="p", kind="single", image="busybox", gpus=8),
        [pool("a-small", 4), pool("b-big", 8)],
    )
    assert result.ok, result.errors
    assert result.resolved.eligible_pools == ["b-big"]


def test_a_volcano_gang_gets_exactly_one_pool_chosen_by_guarantee_then_maximum_then_slug():
    pools = [pool("a", 8, guaranteed=4, maximum=16), pool("b", 8, guaranteed=8, maximum=8)]
    assert choose_gang_pool(pools).slug == "b"  # most guaranteed
    pools = [pool("a", 8, guaranteed=8, maximum=8), pool("b", 8, guaranteed=8, maximum=12)]
    assert choose_gang_pool(pools).slug == "b"  # then most maximum
    pools = [pool("b", 8), pool("a", 8)]
    assert choose_gang_pool(pools).slug == "a"  # then the first slug
    result = validate_job_request(
        JobRequest(
            project_slug="p", kind="gang", image="busybox", gpus=4, replicas=2, backend="volcano"
        ),
        [pool("a", 8), pool("b", 8, guaranteed=16, maximum=16)],
    )
    assert result.resolved.eligible_pools == ["b"]
    kueue = validate_job_request(
        JobRequest(
            project_slug="p", kind="gang", image="busybox", gpus=4, replicas=2, backend="kueue"
        ),
        [pool("a", 8), pool("b", 8, guaranteed=16, maximum=16)],
    )
    assert kueue.resolved.eligible_pools == ["a", "b"]  # Kueue picks the flavor itself


def test_affinity_over_pools_sharing_a_label_key():
    affinity = pool_affinity(({PRODUCT: "H100"}, {PRODUCT: "A100"}), ({PRODUCT: "L4"},))
    assert terms(affinity) == [
        {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["H100"]}]},
        {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["A100"]}]},
    ]
    pod = {"spec": {"affinity": affinity}}
    assert matches_node_affinity(pod, node({PRODUCT: "H100"}))
    assert matches_node_affinity(pod, node({PRODUCT: "A100"}))
    assert not matches_node_affinity(pod, node({PRODUCT: "L4"}))


def test_affinity_excludes_a_pool_selected_by_another_key():
    # Kueue drops expressions whose key the flavor does not use: without the NotIn, the term of
    # `big` would be empty for the flavor of `small` and match it.
    big, small = {"example.com/pool": "big"}, {"node.kubernetes.io/instance-type": "4g"}
    affinity = pool_affinity((big,), (small,))
    assert terms(affinity) == [
        {
            "matchExpressions": [
                {"key": "example.com/pool", "operator": "In", "values": ["big"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["4g"]},
            ]
        }
    ]
    pod_spec = {"affinity": affinity}
    assert flavor_ok(big, pod_spec)
    assert not flavor_ok(small, pod_spec)
    big_node = {**big, "node.kubernetes.io/instance-type": "8g"}
    assert matches_node_affinity({"spec": pod_spec}, node(big_node))
    assert not matches_node_affinity({"spec": pod_spec}, node(small))


def test_no_affinity_without_pools_or_with_a_pool_that_selects_every_node():
    assert pool_affinity(()) is None
    assert pool_affinity(({},)) is None


def test_manifests_carry_the_affinity_for_every_backend():
    kwargs = {
        "eligible_pools": ("h100",),
        "eligible_pool_labels": ({PRODUCT: "H100"},),
        "other_pool_labels": ({PRODUCT: "A100"},),
    }
    expected = [{"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["H100"]}]}]
    (job,) = build_job_manifests(spec(**kwargs))
    assert terms(job["spec"]["template"]["spec"]["affinity"]) == expected
    _, gang = build_job_manifests(spec(kind="gang", replicas=2, **kwargs))
    assert terms(gang["spec"]["template"]["spec"]["affinity"]) == expected
    (vcjob,) = build_job_manifests(spec(kind="gang", replicas=2, backend="volcano", **kwargs))
    assert vcjob["spec"]["queue"] == "gp-alpha.h100"
    for task in vcjob["spec"]["tasks"]:
        assert terms(task["template"]["spec"]["affinity"]) == expected
    (plain,) = build_job_manifests(spec())
    assert "affinity" not in plain["spec"]["template"]["spec"]


def test_kueue_flavor_check_follows_the_flavors_own_label_keys():
    pod_spec = {"affinity": pool_affinity(({PRODUCT: "H100"},))}
    assert flavor_ok({PRODUCT: "H100"}, pod_spec)
    assert not flavor_ok({PRODUCT: "A100"}, pod_spec)
    # A flavor labelled by keys the affinity never mentions matches (as in Kueue).
    assert flavor_ok({"other": "x"}, pod_spec)
    # nodeSelector keys the flavor uses must agree; other keys are ignored.
    assert not flavor_ok({"pool": "a"}, {"nodeSelector": {"pool": "b", "zone": "z"}})
    assert flavor_ok({"pool": "a"}, {"nodeSelector": {"pool": "a", "zone": "z"}})
