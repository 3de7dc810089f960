"""Tenancy model rules: what a row knows by itself (slugs are DNS-1123 labels of at most 40
characters; the namespace follows from the slug). Rules across rows are in the services."""

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


def test_a_project_slug_cannot_take_a_department_queue_name(research):
    project = Project(slug="dept-research", name="P", department=research)
    with pytest.raises(ValidationError) as excinfo:
        project.full_clean()
    assert "may not start with 'dept-'" in excinfo.value.message_dict["slug"][0]
