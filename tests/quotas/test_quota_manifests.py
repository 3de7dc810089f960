"""quotas/manifests.py: the admin's model as Kueue and Volcano objects (pure)."""

from quotas import manifests as qm
from quotas.priority_defaults import PRIORITY_CLASSES, PRIORITY_VALUES

H100 = qm.PoolSpec(
    slug="h100",
    node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    mig_profiles=("1g.10gb", "3g.40gb"),
    total_gpus=32,
    default_cpu="8",
    default_memory="64Gi",
)
A100 = qm.PoolSpec(
    slug="a100",
    node_labels={"pool": "a100"},
    mig_profiles=(),
    total_gpus=16,
    default_cpu="4",
    default_memory="32Gi",
)
ALPHA = qm.ProjectSpec(
    slug="alpha",
    namespace="gp-alpha",
    department_slug="research",
    quotas=(
        qm.QuotaAmount("h100", "gpu", 8, 12),
        qm.QuotaAmount("h100", "1g.10gb", 7, 7),
        qm.QuotaAmount("a100", "gpu", 2, 4),
    ),
)
BETA = qm.ProjectSpec(
    slug="beta",
    namespace="gp-beta",
    department_slug="research",
    quotas=(qm.QuotaAmount("h100", "gpu", 4, 12),),
)
# The values every install gets (the seed migration's), not a set of the tests' own.
PRIORITIES = tuple(qm.PrioritySpec(p.name, p.value, p.preemptible) for p in PRIORITY_CLASSES)
MODEL = qm.QuotaModel(
    pools=(H100, A100),
    departments=(qm.DepartmentSpec("research"),),
    projects=(ALPHA, BETA),
    priorities=PRIORITIES,
)


def by_kind(objects):
    out = {}
    for obj in objects:
        out.setdefault(obj["kind"], []).append(obj)
    return out


def test_every_object_is_labelled_managed_with_an_owner_kind():
    for obj in qm.desired_quota_objects(MODEL):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "gpu-portal"
        assert labels["gpu-portal.io/owner-kind"] in {"pool", "department", "project", "priority"}


def test_object_counts_per_kind():
    kinds = by_kind(qm.desired_quota_objects(MODEL))
    assert {k: len(v) for k, v in kinds.items()} == {
        "ResourceFlavor": 2,
        "WorkloadPriorityClass": 3,
        "PriorityClass": 3,
        "Cohort": 1,
        "Queue": 5,  # per pool: department parents h100 + a100, alpha h100 + a100, beta h100
        "Namespace": 2,
        "NetworkPolicy": 2,  # on by default; no RoleBinding unless a tenant role is set
        "ClusterQueue": 2,
        "LocalQueue": 2,
        "ResourceQuota": 2,
    }


def test_resource_flavor_has_pool_labels_and_gpu_toleration():
    rf = qm.resource_flavor(H100)
    assert rf["metadata"]["name"] == "gp-pool-h100"
    assert rf["spec"]["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert rf["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_cluster_queue_quota_borrowing_cohort_and_selector():
    cq = qm.cluster_queue(ALPHA, MODEL.pools, PRIORITIES)
    spec = cq["spec"]
    assert cq["metadata"]["name"] == "gp-alpha"
    assert spec["cohortName"] == "gp-dept-research"
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "gp-alpha"}}
    (group,) = spec["resourceGroups"]
    assert group["coveredResources"] == [
        "cpu",
        "memory",
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-3g.40gb",
    ]
    flavors = {f["name"]: {r["name"]: r for r in f["resources"]} for f in group["flavors"]}
    assert list(flavors) == ["gp-pool-a100", "gp-pool-h100"]
    for resources in flavors.values():
        assert list(resources) == group["coveredResources"]  # the CEL rule: same list
    h100 = flavors["gp-pool-h100"]
    assert h100["nvidia.com/gpu"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 8,
        "borrowingLimit": 4,
    }
    assert h100["nvidia.com/mig-1g.10gb"]["nominalQuota"] == 7
    assert h100["nvidia.com/mig-1g.10gb"]["borrowingLimit"] == 0
    assert h100["nvidia.com/mig-3g.40gb"] == {
        "name": "nvidia.com/mig-3g.40gb",
        "nominalQuota": 0,
        "borrowingLimit": 0,
    }
    assert h100["cpu"]["nominalQuota"] == "256"
    assert h100["memory"]["nominalQuota"] == "2048Gi"
    assert flavors["gp-pool-a100"]["nvidia.com/gpu"]["nominalQuota"] == 2


def test_preemption_follows_priority_classes():
    assert qm.preemption_policy(PRIORITIES) == {
        "withinClusterQueue": "LowerPriority",
        # Not Any: a lender takes its quota back only from lower-priority borrowers, so a
        # non-preemptible ("high") borrower is never evicted by a reclaim.
        "reclaimWithinCohort": "LowerPriority",
        "borrowWithinCohort": {
            "policy": "LowerPriority",
            "maxPriorityThreshold": PRIORITY_VALUES["normal"],
        },
    }
    nobody = tuple(qm.PrioritySpec(p.name, p.value, False) for p in PRIORITIES)
    assert qm.preemption_policy(nobody) == {
        "withinClusterQueue": "Never",
        "reclaimWithinCohort": "Never",
    }


def test_a_protection_kueue_cannot_express_turns_preemption_off_and_says_so():
    # "normal" protected but "high" above it and preemptible: LowerPriority would let high
    # preempt normal, so nothing is preempted rather than break the promise.
    odd = (
        qm.PrioritySpec("high", 1000, True),
        qm.PrioritySpec("normal", 500, False),
        qm.PrioritySpec("low", 100, True),
    )
    assert qm.preemption_policy(odd) == {
        "withinClusterQueue": "Never",
        "reclaimWithinCohort": "Never",
    }
    explanation = qm.explain_preemption(odd)
    assert explanation.warnings == (
        "Marked not preemptible but below another class: normal. Kueue lets every class preempt "
        "the classes below it, so the portal turned preemption off altogether. Give the "
        "non-preemptible classes the highest value.",
    )
    assert {text for _n, _v, text in explanation.classes} == {"Never preempted: preemption is off."}


def test_the_words_on_the_admin_page_follow_the_policy():
    explanation = qm.explain_preemption(PRIORITIES)
    assert explanation.policy == qm.preemption_policy(PRIORITIES)
    assert explanation.warnings == ()
    texts = {name: text for name, _value, text in explanation.classes}
    assert texts["high"] == "Never preempted (no class has a higher priority)."
    assert texts["normal"] == (
        "By high jobs of its own project; by high jobs of the project it borrowed from, when it "
        "runs on borrowed quota; by borrowing high jobs of other projects, while its project is "
        "above its guarantee."
    )
    assert texts["low"].startswith("By high, normal jobs of its own project")
    assert "lower priority" in explanation.guarantee


def _queues(objects):
    return {o["metadata"]["name"]: o for o in objects}


def test_volcano_project_queues_one_per_pool_with_the_projects_maximum():
    leaves = _queues(qm.volcano_project_queues(ALPHA, MODEL.pools, MODEL.projects))
    assert list(leaves) == ["gp-alpha.a100", "gp-alpha.h100"]
    h100 = leaves["gp-alpha.h100"]["spec"]
    assert h100["parent"] == "gp-dept-research.h100"
    # Per pool, never summed over pools: 8 guaranteed + 4 borrowable in h100.
    assert h100["capability"] == {
        "nvidia.com/gpu": "12",
        "nvidia.com/mig-1g.10gb": "7",
        "nvidia.com/mig-3g.40gb": "0",  # offered by the pool, no quota: nothing, not unlimited
    }
    assert h100["deserved"] == {
        "nvidia.com/gpu": "8",
        "nvidia.com/mig-1g.10gb": "7",
        "nvidia.com/mig-3g.40gb": "0",
    }
    a100 = leaves["gp-alpha.a100"]["spec"]
    assert a100["parent"] == "gp-dept-research.a100"
    # Its maximum of 4 is bounded by the 2 its department holds in a100 (no other project there).
    assert a100["capability"] == {"nvidia.com/gpu": "2"}
    assert a100["deserved"] == {"nvidia.com/gpu": "2"}


def test_volcano_department_capability_is_the_arithmetic_modules_department_maximum():
    from quotas import arithmetic

    parents = _queues(
        qm.volcano_department_queues(qm.DepartmentSpec("research"), MODEL.projects, MODEL.pools)
    )
    assert list(parents) == ["gp-dept-research.a100", "gp-dept-research.h100"]
    h100 = parents["gp-dept-research.h100"]["spec"]
    assert "parent" not in h100  # under Volcano's root queue
    entries = [
        arithmetic.QuotaEntry(p.slug, p.department_slug, q.pool_slug, q.resource, q.guaranteed)
        for p in MODEL.projects
        for q in p.quotas
    ]
    expected = arithmetic.department_usable(entries)[("research", "h100", "gpu")]
    assert expected == arithmetic.UsableAmount(guaranteed=12, maximum=12)  # 8 + 4 nominal
    # The department can never borrow from another one: its capability is what it is
    # guaranteed, not the 12 + 12 of its projects' maximums.
    assert h100["capability"]["nvidia.com/gpu"] == str(expected.maximum)
    assert h100["deserved"]["nvidia.com/gpu"] == str(expected.guaranteed)
    assert parents["gp-dept-research.a100"]["spec"]["capability"] == {"nvidia.com/gpu": "2"}
    # No leaf may exceed its parent (Volcano's webhook refuses it).
    for project in MODEL.projects:
        for leaf in qm.volcano_project_queues(project, MODEL.pools, MODEL.projects):
            parent = parents[leaf["spec"]["parent"]]["spec"]["capability"]
            for resource, value in leaf["spec"]["capability"].items():
                assert int(value) <= int(parent[resource])


def test_volcano_leaf_with_unlimited_borrowing_reaches_the_department_total():
    gamma = qm.ProjectSpec(
        slug="gamma",
        namespace="gp-gamma",
        department_slug="research",
        quotas=(qm.QuotaAmount("a100", "gpu", 1, None),),
    )
    (leaf,) = qm.volcano_project_queues(gamma, MODEL.pools, (*MODEL.projects, gamma))
    assert leaf["spec"]["capability"] == {"nvidia.com/gpu": "3"}  # 2 (alpha) + 1 (its own)


def test_resource_quota_caps_gpu_requests_at_the_maximum():
    rq = qm.resource_quota(ALPHA, MODEL.pools)
    assert rq["metadata"] == {
        "name": "gpu-portal",
        "namespace": "gp-alpha",
        "labels": rq["metadata"]["labels"],
    }
    assert rq["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "16",
        "requests.nvidia.com/mig-1g.10gb": "7",
        "requests.nvidia.com/mig-3g.40gb": "0",
    }


def test_namespace_local_queue_and_priority_classes():
    ns = qm.namespace(ALPHA)
    assert ns["metadata"]["name"] == "gp-alpha"
    assert ns["metadata"]["labels"]["gpu-portal.io/project"] == "alpha"
    lq = qm.local_queue(ALPHA)
    assert lq["metadata"]["namespace"] == "gp-alpha"
    assert lq["spec"] == {"clusterQueue": "gp-alpha"}
    wpc = qm.workload_priority_class(PRIORITIES[0])
    assert wpc["metadata"]["name"] == "gp-high"
    assert wpc["value"] == 1000
    pc = qm.pod_priority_class(PRIORITIES[0])
    assert pc["apiVersion"] == "scheduling.k8s.io/v1"
    assert pc["value"] == 1000
    assert pc["globalDefault"] is False


def test_project_without_quota_gets_a_queue_that_admits_nothing():
    empty = qm.ProjectSpec(slug="gamma", namespace="gp-gamma", department_slug="research")
    cq = qm.cluster_queue(empty, MODEL.pools, PRIORITIES)
    assert "resourceGroups" not in cq["spec"]
    assert qm.resource_quota(empty, MODEL.pools)["spec"]["hard"] == {"requests.nvidia.com/gpu": "0"}


def test_scale_quantity_keeps_units():
    assert qm.scale_quantity("64Gi", 4) == "256Gi"
    assert qm.scale_quantity("500m", 3) == "1500m"
    assert qm.scale_quantity("1.5", 2) == "3"


def test_output_is_deterministic_and_parents_come_first():
    a = qm.desired_quota_objects(MODEL)
    assert a == qm.desired_quota_objects(MODEL)
    names = [(o["kind"], o["metadata"]["name"]) for o in a]
    assert names.index(("Queue", "gp-dept-research.h100")) < names.index(("Queue", "gp-alpha.h100"))
    assert names.index(("Namespace", "gp-alpha")) < names.index(("LocalQueue", "gp-alpha"))
