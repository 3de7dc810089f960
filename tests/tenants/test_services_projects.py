"""Department and project writes go through tenants.services: staff only, validated, and the
rules that involve other rows (a department's caps) are checked there, not in Project.clean."""

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from quotas import services as quota_services
from tenants import services
from tenants.models import Department, Project


@pytest.fixture
def research(db):
    return services.department_create(actor=None, slug="research", name="Research")


def test_project_create_derives_the_namespace_and_validates(research):
    project = services.project_create(actor=None, slug="vision", name="Vision", department=research)
    assert Project.objects.get(pk=project.pk).namespace == "gp-vision"
    with pytest.raises(ValidationError) as exc:
        services.project_create(actor=None, slug="Vision!", name="V", department=research)
    assert "DNS-1123" in exc.value.message_dict["slug"][0]
    with pytest.raises(ValidationError) as exc:
        services.project_create(actor=None, slug="dept-x", name="V", department=research)
    assert "may not start with 'dept-'" in exc.value.message_dict["slug"][0]


def test_department_and_project_writes_are_for_staff_only(research, django_user_model):
    user = django_user_model.objects.create_user("mallory", password="x-password-123")
    with pytest.raises(PermissionDenied):
        services.department_create(actor=user, slug="evil", name="Evil")
    with pytest.raises(PermissionDenied):
        services.project_create(actor=user, slug="evil", name="Evil", department=research)
    project = services.project_create(actor=None, slug="vision", name="V", department=research)
    with pytest.raises(PermissionDenied):
        services.project_update(actor=user, project=project, name="Mine")
    with pytest.raises(PermissionDenied):
        services.project_delete(actor=user, project=project)
    assert Project.objects.get(pk=project.pk).name == "V"


def test_project_update_refuses_unknown_fields(research):
    project = services.project_create(actor=None, slug="vision", name="V", department=research)
    with pytest.raises(TypeError, match="cannot change slug"):
        services.project_update(actor=None, project=project, slug="renamed")


def test_moving_a_project_into_a_department_checks_that_departments_caps(research):
    applied = services.department_create(actor=None, slug="applied", name="Applied")
    vision = services.project_create(actor=None, slug="vision", name="V", department=research)
    speech = services.project_create(actor=None, slug="speech", name="S", department=applied)
    pool = quota_services.pool_create(
        actor=None, slug="a100", name="A100", gpu_model="NVIDIA-A100-SXM4-40GB", node_count=2
    )
    quota_services.quota_set(actor=None, project=vision, pool=pool, nominal=6)
    quota_services.quota_set(actor=None, project=speech, pool=pool, nominal=4)
    quota_services.department_quota_set(actor=None, department=applied, pool=pool, limit=8)
    with pytest.raises(ValidationError) as exc:
        services.project_update(actor=None, project=vision, department=applied)
    assert exc.value.message_dict["department"] == [
        "Moving vision there would break a cap. Department applied caps GPUs in pool a100 at 8 "
        "and its other projects hold 4: this quota needs 6, at most 4 is allowed."
    ]
    assert Project.objects.get(pk=vision.pk).department == research
    quota_services.quota_set(actor=None, project=vision, pool=pool, nominal=4)
    services.project_update(actor=None, project=vision, department=applied)  # 4 + 4 fits in 8
    assert Project.objects.get(pk=vision.pk).department == applied


def test_a_department_with_projects_cannot_be_deleted_through_the_service(research):
    from django.db.models import ProtectedError

    services.project_create(actor=None, slug="vision", name="V", department=research)
    with pytest.raises(ProtectedError):
        services.department_delete(actor=None, department=research)
    assert Department.objects.filter(slug="research").exists()
