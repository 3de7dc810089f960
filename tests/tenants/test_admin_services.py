"""The admin console writes through the services: their cross-row rules show as field errors,
a refusal at save time rolls everything back with a message (never a 500), and each write leaves
the services' audit line."""

import logging

import pytest

from tenants.models import Department, Membership, Project


def _change_post(project: Project, **fields) -> dict[str, str]:
    """The project's change form as the admin page submits it, inline rows unchanged."""
    memberships = list(project.memberships.order_by("pk"))
    quotas = list(project.quotas.order_by("pk"))
    data = {
        "name": project.name,
        "department": str(project.department_id),
        "description": project.description,
        "default_gang_backend": project.default_gang_backend,
        "pod_security": project.pod_security,
        "memberships-TOTAL_FORMS": str(len(memberships)),
        "memberships-INITIAL_FORMS": str(len(memberships)),
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
        "quotas-TOTAL_FORMS": str(len(quotas)),
        "quotas-INITIAL_FORMS": str(len(quotas)),
        "quotas-MIN_NUM_FORMS": "0",
        "quotas-MAX_NUM_FORMS": "1000",
    }
    for i, membership in enumerate(memberships):
        data[f"memberships-{i}-id"] = str(membership.pk)
        data[f"memberships-{i}-project"] = str(project.pk)
        data[f"memberships-{i}-user"] = str(membership.user_id)
        data[f"memberships-{i}-role"] = membership.role
    for i, quota in enumerate(quotas):
        data[f"quotas-{i}-id"] = str(quota.pk)
        data[f"quotas-{i}-project"] = str(project.pk)
        data[f"quotas-{i}-pool"] = str(quota.pool_id)
        data[f"quotas-{i}-resource"] = quota.resource
        data[f"quotas-{i}-nominal"] = str(quota.nominal)
        data[f"quotas-{i}-borrowing_limit"] = (
            "" if quota.borrowing_limit is None else str(quota.borrowing_limit)
        )
    data.update(fields)
    return data


def test_moving_a_project_into_a_department_it_would_overfill_is_a_field_error(demo, staff_client):
    vision = Project.objects.get(slug="vision")
    applied = Department.objects.get(slug="applied")
    url = f"/admin/tenants/project/{vision.pk}/change/"

    response = staff_client.post(url, _change_post(vision, department=str(applied.pk)))

    assert response.status_code == 200  # the form again, with the error on the field
    errors = response.context["adminform"].form.errors
    assert errors["department"] == [
        "Moving vision there would break a cap. Department applied caps GPUs in pool a100 at 8 "
        "and its other projects hold 8: this quota needs 4, at most 0 is allowed."
    ]
    assert Project.objects.get(pk=vision.pk).department.slug == "research"


def test_a_service_refusal_at_save_time_rolls_back_and_says_why(demo, staff_client):
    """Removing the project's last admin in the inline: the membership service refuses; the
    name change in the same submission is rolled back too."""
    vision = Project.objects.get(slug="vision")
    admin_row = next(
        i
        for i, m in enumerate(vision.memberships.order_by("pk"))
        if m.role == "admin"  # the demo gives each project one admin
    )
    data = _change_post(vision, name="Renamed")
    data[f"memberships-{admin_row}-DELETE"] = "on"
    url = f"/admin/tenants/project/{vision.pk}/change/"

    response = staff_client.post(url, data, follow=True)

    assert response.status_code == 200
    content = response.content.decode()
    assert "Nothing was saved:" in content
    assert "vision-admin is the last admin of project" in content
    assert Project.objects.get(pk=vision.pk).name == "Vision"
    assert Membership.objects.filter(project=vision, role="admin").count() == 1


def test_admin_writes_go_through_the_services(demo, staff_client, caplog):
    from quotas.models import GpuPool

    pool = GpuPool.objects.get(slug="a100")
    vision = Project.objects.get(slug="vision")
    caplog.set_level(logging.INFO, logger="portal.audit")

    response = staff_client.post(
        f"/admin/tenants/project/{vision.pk}/change/", _change_post(vision, name="Vision 2")
    )
    assert response.status_code == 302
    response = staff_client.post(
        f"/admin/quotas/gpupool/{pool.pk}/change/",
        {
            "name": "A100 renamed",
            "gpu_model": pool.gpu_model,
            "node_count": "3",
            "gpus_per_node": str(pool.gpus_per_node),
            "node_labels": '{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}',
            "mig_profiles": "",
            "default_cpu": pool.default_cpu,
            "default_memory": pool.default_memory,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]

    audit = [r.getMessage() for r in caplog.records if r.name == "portal.audit"]
    assert any(line.startswith("project_update actor=root project=vision") for line in audit)
    assert any(line.startswith("pool_update actor=root pool=a100") for line in audit)
    assert GpuPool.objects.get(pk=pool.pk).node_count == 3


@pytest.mark.parametrize(
    "url", ["/admin/quotas/quotasyncstatus/", "/admin/quotas/orphanednamespace/"]
)
def test_quota_sync_pages_render_for_staff(demo, staff_client, url):
    assert staff_client.get(url).status_code == 200
