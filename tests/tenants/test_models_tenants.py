"""Tenancy model rules: project slugs are DNS-1123 labels of at most 40 characters."""

import pytest
from django.core.exceptions import ValidationError

from tenants.models import Department, Membership, Project, namespace_for_slug


@pytest.fixture
def research(db):
    return Department.objects.create(slug="research", name="Research")


@pytest.mark.parametrize("slug", ["a", "vision", "team-42", "0day", "a" * 40, "a-b-c", "x1" * 20])
def test_valid_project_slugs(research, slug):
    project = Project(slug=slug, name="P", department=research)
    project.full_clean()
    project.save()
    assert project.namespace == f"gp-{slug}" == namespace_for_slug(slug)
    assert len(project.namespace) <= 63  # a valid namespace name


@pytest.mark.parametrize(
    ("slug", "fragment"),
    [
        ("Vision", "DNS-1123 label"),
        ("vision_1", "DNS-1123 label"),
        ("-vision", "DNS-1123 label"),
        ("vision-", "DNS-1123 label"),
        ("vi.sion", "DNS-1123 label"),
        ("visión", "DNS-1123 label"),
        ("a" * 41, "at most 40 characters"),
        ("", "cannot be blank"),
    ],
)
def test_invalid_project_slugs_are_refused(research, slug, fragment):
    project = Project(slug=slug, name="P", department=research)
    with pytest.raises(ValidationError) as exc:
        project.full_clean()
    assert fragment in " ".join(exc.value.message_dict["slug"])


def test_namespace_follows_the_slug_and_is_unique(research):
    project = Project.objects.create(slug="vision", name="Vision", department=research)
    assert project.namespace == "gp-vision"
    clash = Project(slug="vision", name="Again", department=research)
    with pytest.raises(ValidationError) as exc:
        clash.full_clean()
    assert "slug" in exc.value.message_dict


def test_department_slug_is_a_dns_label(db):
    with pytest.raises(ValidationError) as exc:
        Department(slug="Research Dept", name="R").full_clean()
    assert "slug" in exc.value.message_dict


def test_a_department_with_projects_cannot_be_deleted(research):
    from django.db.models import ProtectedError

    Project.objects.create(slug="vision", name="Vision", department=research)
    with pytest.raises(ProtectedError):
        research.delete()


def test_membership_role_must_be_known(research, django_user_model):
    project = Project.objects.create(slug="vision", name="Vision", department=research)
    user = django_user_model.objects.create(username="u")
    membership = Membership(user=user, project=project, role="owner")
    with pytest.raises(ValidationError) as exc:
        membership.full_clean()
    assert "role" in exc.value.message_dict


def test_moving_a_project_into_a_department_checks_that_departments_caps(research):
    from quotas import services

    applied = Department.objects.create(slug="applied", name="Applied")
    vision = Project.objects.create(slug="vision", name="Vision", department=research)
    speech = Project.objects.create(slug="speech", name="Speech", department=applied)
    pool = services.pool_create(
        actor=None, slug="a100", name="A100", gpu_model="NVIDIA-A100-SXM4-40GB", node_count=2
    )
    services.quota_set(actor=None, project=vision, pool=pool, nominal=6)
    services.quota_set(actor=None, project=speech, pool=pool, nominal=4)
    services.department_quota_set(actor=None, department=applied, pool=pool, limit=8)
    vision.department = applied
    with pytest.raises(ValidationError) as exc:
        vision.full_clean()
    assert exc.value.message_dict["department"] == [
        "Moving vision there would break a cap. Department applied caps GPUs in pool a100 at 8 "
        "and its other projects hold 4: this quota needs 6, at most 4 is allowed."
    ]
    services.quota_set(actor=None, project=vision, pool=pool, nominal=4)
    vision.full_clean()  # 4 + 4 fits under 8


def test_a_project_slug_cannot_take_a_department_queue_name(research):
    project = Project(slug="dept-research", name="P", department=research)
    with pytest.raises(ValidationError) as excinfo:
        project.full_clean()
    assert "may not start with 'dept-'" in excinfo.value.message_dict["slug"][0]
