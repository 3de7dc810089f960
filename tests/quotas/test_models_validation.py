"""Model validation: what full_clean refuses, and the messages it gives."""

import pytest
from django.core.exceptions import ValidationError

from quotas import services
from quotas.models import DepartmentQuota, GpuPool, PriorityClass, ProjectQuota


def _errors(exc: pytest.ExceptionInfo) -> dict[str, list[str]]:
    return exc.value.message_dict


def test_pool_create_normalises_the_model_and_defaults_node_labels(org):
    assert org.h100.node_labels == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert org.h100.mig_profiles == ["1g.10gb", "2g.20gb"]  # NVIDIA's table order
    pool = services.pool_create(
        actor=None, slug="h100b", name="b", gpu_model="NVIDIA H100 80GB HBM3", node_count=1
    )
    assert pool.gpu_model == "NVIDIA-H100-80GB-HBM3"
    assert pool.total_gpus == 8


@pytest.mark.parametrize(
    ("model", "profiles", "message"),
    [
        (
            "NVIDIA-A100-SXM4-40GB",
            ["3g.40gb"],
            "3g.40gb is not a MIG profile of NVIDIA-A100-SXM4-40GB; valid profiles: 1g.5gb, "
            "1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb.",
        ),
        ("Tesla-T4", ["1g.10gb"], "Tesla-T4 does not support MIG; leave the MIG profiles empty."),
        (
            "NVIDIA-H100-80GB-HBM3",
            "1g.10gb",
            'MIG profiles must be a JSON list of names, e.g. ["1g.10gb"].',
        ),
        (
            "NVIDIA-H100-80GB-HBM3",
            [1],
            'MIG profiles must be a JSON list of names, e.g. ["1g.10gb"].',
        ),
        ("NVIDIA-H100-80GB-HBM3", ["1g.10gb", "1g.10gb"], "MIG profiles listed twice: 1g.10gb."),
    ],
)
def test_pool_mig_profiles_must_suit_the_model(db, model, profiles, message):
    pool = GpuPool(slug="p", name="p", gpu_model=model, node_count=1, mig_profiles=profiles)
    with pytest.raises(ValidationError) as exc:
        pool.full_clean()
    assert _errors(exc)["mig_profiles"] == [message]


@pytest.mark.parametrize(
    ("labels", "fragment"),
    [
        (["a"], "Node labels must be a JSON object"),
        ({"nvidia.com/gpu.product": 5}, "must be a string"),
        ({"Bad_Prefix.com/x": "y"}, "the prefix must be a DNS subdomain"),
        ({"/x": "y"}, "empty prefix"),
        ({"-x": "y"}, "the name must be at most 63 characters"),
        ({"x" * 64: "y"}, "the name must be at most 63 characters"),
        ({"pool": "has space"}, "must be at most 63 characters of letters"),
        ({"pool": "v" * 64}, "must be at most 63 characters of letters"),
        ({"": "y"}, "non-empty string"),
    ],
)
def test_pool_node_labels_must_be_kubernetes_labels(db, labels, fragment):
    pool = GpuPool(slug="p", name="p", gpu_model="NVIDIA-A100-SXM4-40GB", node_labels=labels)
    with pytest.raises(ValidationError) as exc:
        pool.full_clean()
    assert fragment in " ".join(_errors(exc)["node_labels"])


def test_valid_node_labels_are_kept(db):
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "topology.kubernetes.io/zone": ""}
    pool = GpuPool(slug="p", name="p", gpu_model="NVIDIA-A100-SXM4-40GB", node_labels=labels)
    pool.full_clean()
    assert pool.node_labels == labels


def test_pool_refuses_to_drop_a_profile_that_quotas_use(org):
    services.quota_set(actor=None, project=org.vision, pool=org.h100, resource="1g.10gb", nominal=7)
    with pytest.raises(ValidationError) as exc:
        services.pool_update(actor=None, pool=org.h100, mig_profiles=["2g.20gb"])
    assert _errors(exc)["mig_profiles"] == [
        "Quotas still use profiles this change removes: 1g.10gb (used by vision). "
        "Remove those quotas first."
    ]
    org.h100.refresh_from_db()
    assert org.h100.mig_profiles == ["1g.10gb", "2g.20gb"]


def test_pool_refuses_a_model_change_that_invalidates_its_profiles(org):
    with pytest.raises(ValidationError) as exc:
        services.pool_update(actor=None, pool=org.h100, gpu_model="NVIDIA-A100-SXM4-40GB")
    assert (
        "2g.20gb is not a MIG profile of NVIDIA-A100-SXM4-40GB" in _errors(exc)["mig_profiles"][0]
    )


@pytest.mark.parametrize(
    ("pool", "resource", "message"),
    [
        (
            "a100",
            "3g.40gb",
            "3g.40gb is not a MIG profile of NVIDIA-A100-SXM4-40GB; valid profiles: 1g.5gb, "
            "1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb. Pool a100 offers: gpu.",
        ),
        (
            "h100",
            "3g.40gb",
            "Pool h100 does not offer the MIG profile 3g.40gb; it offers: gpu, 1g.10gb, 2g.20gb. "
            "Add the profile to the pool first.",
        ),
        (
            "h100",
            "gpus",
            "'gpus' is neither 'gpu' nor a MIG profile name; pool h100 offers: gpu, 1g.10gb, "
            "2g.20gb.",
        ),
    ],
)
def test_quota_resource_must_be_offered_by_the_pool_and_valid_for_its_model(
    org, pool, resource, message
):
    with pytest.raises(ValidationError) as exc:
        services.quota_set(
            actor=None, project=org.vision, pool=getattr(org, pool), resource=resource, nominal=1
        )
    assert _errors(exc) == {"resource": [message]}
    assert not ProjectQuota.objects.exists()


def test_quota_amounts_must_not_be_negative(org):
    quota = ProjectQuota(project=org.vision, pool=org.h100, resource="gpu", nominal=-1)
    quota.borrowing_limit = -2
    with pytest.raises(ValidationError) as exc:
        quota.full_clean()
    assert set(_errors(exc)) == {"nominal", "borrowing_limit"}
    assert "greater than or equal to 0" in _errors(exc)["borrowing_limit"][0]


def test_a_quota_is_unique_per_project_pool_and_resource(org):
    services.quota_set(actor=None, project=org.vision, pool=org.h100, nominal=2)
    duplicate = ProjectQuota(project=org.vision, pool=org.h100, resource="gpu", nominal=3)
    with pytest.raises(ValidationError):
        duplicate.full_clean()
    # quota_set updates the existing row instead
    services.quota_set(actor=None, project=org.vision, pool=org.h100, nominal=3, borrowing_limit=1)
    assert ProjectQuota.objects.get().nominal == 3


def test_department_cap_is_enforced_on_project_quotas(org):
    services.department_quota_set(actor=None, department=org.research, pool=org.h100, limit=16)
    services.quota_set(actor=None, project=org.vision, pool=org.h100, nominal=12)
    services.quota_set(actor=None, project=org.infra, pool=org.h100, nominal=30)  # other dept
    with pytest.raises(ValidationError) as exc:
        services.quota_set(actor=None, project=org.nlp, pool=org.h100, nominal=8)
    assert _errors(exc) == {
        "nominal": [
            "Department research caps GPUs in pool h100 at 16 and its other projects hold 12: "
            "this quota needs 8, at most 4 is allowed."
        ]
    }
    services.quota_set(actor=None, project=org.nlp, pool=org.h100, nominal=4)
    # raising vision's own quota counts only the others (nlp's 4)
    services.quota_set(actor=None, project=org.vision, pool=org.h100, nominal=12)
    with pytest.raises(ValidationError):
        services.quota_set(actor=None, project=org.vision, pool=org.h100, nominal=13)
    assert ProjectQuota.objects.get(project=org.vision).nominal == 12


def test_department_cap_cannot_go_below_what_projects_hold(org):
    services.quota_set(actor=None, project=org.vision, pool=org.h100, resource="1g.10gb", nominal=7)
    services.quota_set(actor=None, project=org.nlp, pool=org.h100, resource="1g.10gb", nominal=7)
    with pytest.raises(ValidationError) as exc:
        services.department_quota_set(
            actor=None, department=org.research, pool=org.h100, resource="1g.10gb", limit=10
        )
    assert _errors(exc) == {
        "limit": [
            "The projects of department research already hold 14 1g.10gb MIG instances in pool "
            "h100; the cap must be at least 14 (got 10)."
        ]
    }
    services.department_quota_set(
        actor=None, department=org.research, pool=org.h100, resource="1g.10gb", limit=14
    )
    assert DepartmentQuota.objects.get().limit == 14


def test_department_cap_resource_must_be_offered(org):
    with pytest.raises(ValidationError) as exc:
        services.department_quota_set(
            actor=None, department=org.research, pool=org.a100, resource="1g.10gb", limit=1
        )
    assert "Pool a100 does not offer the MIG profile 1g.10gb" in _errors(exc)["resource"][0]


def test_quota_services_are_for_staff_only(org, django_user_model):
    from django.core.exceptions import PermissionDenied

    user = django_user_model.objects.create_user("mallory", password="x-password-123")
    with pytest.raises(PermissionDenied, match="Only staff can set quotas"):
        services.quota_set(actor=user, project=org.vision, pool=org.h100, nominal=1)
    with pytest.raises(PermissionDenied):
        services.pool_create(actor=user, slug="x", name="x", gpu_model="Tesla-T4", node_count=1)
    assert not ProjectQuota.objects.exists()


def test_quota_delete(org, staff_user):
    services.quota_set(actor=staff_user, project=org.vision, pool=org.h100, nominal=2)
    assert services.quota_delete(actor=staff_user, project=org.vision, pool=org.h100)
    assert not services.quota_delete(actor=staff_user, project=org.vision, pool=org.h100)


def test_every_install_has_three_priority_classes(db):
    rows = list(PriorityClass.objects.values_list("name", "value", "preemptible"))
    assert rows == [("high", 1000, False), ("normal", 100, True), ("low", 10, True)]
