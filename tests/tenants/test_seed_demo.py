"""seed_demo: the demo organisation, its logins, and that seeding twice changes nothing."""

import io

from django.contrib.auth import get_user_model
from django.core.management import call_command

from quotas.models import DepartmentQuota, GpuPool, PriorityClass, ProjectQuota
from quotas.selectors import pool_list, pool_subscriptions, quota_rows_for_projects
from tenants.models import Department, Membership, Project


def _snapshot() -> dict[str, list]:
    User = get_user_model()
    return {
        "users": list(
            User.objects.order_by("username").values_list(
                "username", "password", "is_staff", "is_superuser"
            )
        ),
        "departments": list(Department.objects.order_by("slug").values()),
        "projects": list(Project.objects.order_by("slug").values()),
        "memberships": list(Membership.objects.order_by("pk").values()),
        "pools": list(GpuPool.objects.order_by("slug").values()),
        "quotas": list(ProjectQuota.objects.order_by("pk").values()),
        "caps": list(DepartmentQuota.objects.order_by("pk").values()),
        "priorities": list(PriorityClass.objects.order_by("name").values()),
    }


def test_seeding_twice_changes_nothing(db, fast_passwords):
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    assert "created 13 users, 2 departments, 4 projects, 3 pools, 14 quotas" in out.getvalue()
    first = _snapshot()
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    assert "nothing to create" in out.getvalue()
    assert _snapshot() == first
    counts = {kind: len(rows) for kind, rows in first.items()}
    assert counts == {
        "users": 13,
        "departments": 2,
        "projects": 4,
        "memberships": 12,
        "pools": 3,
        "quotas": 14,
        "caps": 2,
        "priorities": 3,
    }


def test_reseeding_keeps_admin_edits(demo):
    quota = ProjectQuota.objects.get(project__slug="vision", pool__slug="a100")
    quota.nominal = 1
    quota.save()
    call_command("seed_demo", stdout=io.StringIO())
    quota.refresh_from_db()
    assert quota.nominal == 1


def test_printed_logins_work(db, fast_passwords, client):
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    text = out.getvalue()
    assert "admin          admin-demo-password  staff superuser" in text
    assert "vision-viewer  demo-password        viewer of project vision" in text
    assert client.login(username="admin", password="admin-demo-password")
    assert client.get("/admin/").status_code == 200
    assert client.login(username="speech-member", password="demo-password")


def test_every_project_has_an_admin_a_member_and_a_viewer(demo):
    for project in Project.objects.all():
        roles = sorted(project.memberships.values_list("role", flat=True))
        assert roles == ["admin", "member", "viewer"], project.slug
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_staff
    assert admin.is_superuser


def test_pools_select_kubesims_default_nodes_and_are_not_over_subscribed(demo):
    h100, a100 = GpuPool.objects.get(slug="h100"), GpuPool.objects.get(slug="a100")
    assert h100.node_labels == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert a100.node_labels == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
    assert (h100.total_gpus, a100.total_gpus) == (32, 16)
    assert h100.mig_profiles == ["1g.10gb", "2g.20gb"]
    subscriptions = pool_subscriptions(pools=pool_list())
    assert subscriptions[h100.pk].needed_gpus == 32  # 26 whole + 28 × 1g.10gb + 6 × 2g.20gb
    assert subscriptions[a100.pk].needed_gpus == 16
    assert not any(s.oversubscribed for s in subscriptions.values())


def test_demo_quotas_borrow(demo):
    vision = Project.objects.get(slug="vision")
    rows = quota_rows_for_projects(projects=[vision])[vision.pk]
    assert [(r.pool_slug, r.resource, r.nominal, r.borrowing_limit, r.maximum) for r in rows] == [
        ("a100", "gpu", 4, 4, 8),
        ("h100", "gpu", 8, 4, 12),
        ("h100", "1g.10gb", 14, 7, 21),
    ]
