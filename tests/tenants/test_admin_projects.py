"""The admin console for departments, projects and memberships, driven as a staff user."""

import re

import pytest

from quotas.models import DepartmentQuota, GpuPool, ProjectQuota
from tenants.models import Department, Membership, Project


def _management(prefix: str, total: int = 0, initial: int = 0) -> dict[str, str]:
    return {
        f"{prefix}-TOTAL_FORMS": str(total),
        f"{prefix}-INITIAL_FORMS": str(initial),
        f"{prefix}-MIN_NUM_FORMS": "0",
        f"{prefix}-MAX_NUM_FORMS": "1000",
    }


def _project_post(department, *, slug="robotics", quotas=(), memberships=()) -> dict[str, str]:
    data = {"slug": slug, "name": "Robotics", "department": str(department.pk), "description": ""}
    data["default_gang_backend"] = "kueue"
    data["pod_security"] = "restricted"
    data.update(_management("memberships", len(memberships)))
    for i, (user, role) in enumerate(memberships):
        data[f"memberships-{i}-user"] = str(user.pk)
        data[f"memberships-{i}-role"] = role
    data.update(_management("quotas", len(quotas)))
    for i, (pool, resource, nominal, borrowing_limit) in enumerate(quotas):
        data[f"quotas-{i}-pool"] = str(pool.pk)
        data[f"quotas-{i}-resource"] = resource
        data[f"quotas-{i}-nominal"] = str(nominal)
        data[f"quotas-{i}-borrowing_limit"] = (
            "" if borrowing_limit is None else str(borrowing_limit)
        )
    return data


@pytest.mark.parametrize(
    "url",
    [
        "/admin/",
        "/admin/tenants/department/",
        "/admin/tenants/department/add/",
        "/admin/tenants/project/",
        "/admin/tenants/project/add/",
        "/admin/tenants/membership/",
        "/admin/quotas/gpupool/",
        "/admin/quotas/gpupool/add/",
        "/admin/quotas/projectquota/",
        "/admin/quotas/departmentquota/",
        "/admin/quotas/priorityclass/",
    ],
)
def test_admin_pages_render_for_staff(demo, staff_client, url):
    assert staff_client.get(url).status_code == 200


def test_admin_change_pages_render(demo, staff_client):
    project = Project.objects.get(slug="vision")
    pool = GpuPool.objects.get(slug="h100")
    department = Department.objects.get(slug="research")
    for url in (
        f"/admin/tenants/project/{project.pk}/change/",
        f"/admin/tenants/department/{department.pk}/change/",
        f"/admin/quotas/gpupool/{pool.pk}/change/",
        f"/admin/quotas/projectquota/{ProjectQuota.objects.first().pk}/change/",
        f"/admin/quotas/departmentquota/{DepartmentQuota.objects.first().pk}/change/",
    ):
        assert staff_client.get(url).status_code == 200, url


def test_admin_is_for_staff_only(demo, client):
    client.login(username="vision-admin", password="demo-password")
    response = client.get("/admin/tenants/project/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_project_list_shows_guaranteed_and_borrowing_per_pool(demo, staff_client):
    content = staff_client.get("/admin/tenants/project/").content.decode()
    assert "a100: 4 gpu (+4); h100: 8 gpu (+4), 1g.10gb ×14 (+7)" in content  # vision
    assert "a100: 4 gpu; h100: 6 gpu (+2), 2g.20gb ×3 (+3)" in content  # recsys: may not borrow
    assert "a100: 4 gpu (+any); h100: 8 gpu (+any), 1g.10gb ×14 (+any)" in content  # nlp


def test_department_list_shows_caps(demo, staff_client):
    content = staff_client.get("/admin/tenants/department/").content.decode()
    assert "h100: ≤ 16 gpu" in content
    assert "a100: ≤ 8 gpu" in content


def test_project_quota_list_shows_the_maximum(demo, staff_client):
    h100 = GpuPool.objects.get(slug="h100")
    url = f"/admin/quotas/projectquota/?pool__id__exact={h100.pk}"
    content = staff_client.get(url).content.decode()
    # vision h100 gpu: 8 + min(4, nlp's 8) = 12; nlp: 8 + vision's 8 = 16 (cap 16)
    assert '<td class="field-maximum">12</td>' in content
    assert '<td class="field-maximum">16</td>' in content


def test_add_project_with_inline_members_and_quotas(demo, staff_client, django_user_model):
    department = Department.objects.get(slug="research")
    a100 = GpuPool.objects.get(slug="a100")
    h100 = GpuPool.objects.get(slug="h100")
    user = django_user_model.objects.get(username="vision-member")
    data = _project_post(
        department,
        quotas=[(a100, "gpu", 2, None), (h100, "1g.10gb", 0, 3)],
        memberships=[(user, "admin")],
    )
    response = staff_client.post("/admin/tenants/project/add/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    project = Project.objects.get(slug="robotics")
    assert project.namespace == "gp-robotics"
    assert sorted(project.quotas.values_list("resource", "nominal", "borrowing_limit")) == [
        ("1g.10gb", 0, 3),
        ("gpu", 2, None),
    ]
    assert Membership.objects.get(project=project).role == "admin"


def _assert_refused(response, *fragments):
    assert response.status_code == 200  # the form again, with errors; never a 500
    content = response.content.decode()
    assert "errorlist" in content
    for fragment in fragments:
        assert fragment in content, fragment


@pytest.mark.parametrize(
    ("quota", "fragments"),
    [
        (
            ("a100", "3g.40gb", 1, None),
            [
                "3g.40gb is not a MIG profile of NVIDIA-A100-SXM4-40GB; valid profiles: 1g.5gb, "
                "1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb."
            ],
        ),
        (
            ("h100", "3g.40gb", 1, None),
            ["Pool h100 does not offer the MIG profile 3g.40gb; it offers: gpu, 1g.10gb, 2g.20gb."],
        ),
        (
            ("h100", "gpu", 1, None),
            [
                "Department research caps GPUs in pool h100 at 16 and its other projects hold 16: "
                "this quota needs 1, at most 0 is allowed."
            ],
        ),
        (("a100", "gpu", -1, None), ["Ensure this value is greater than or equal to 0."]),
        (("a100", "gpu", 1, -5), ["Ensure this value is greater than or equal to 0."]),
        (("a100", "gpu", "many", None), ["Enter a whole number."]),
    ],
)
def test_add_project_with_a_bad_inline_quota_is_refused(demo, staff_client, quota, fragments):
    department = Department.objects.get(slug="research")
    pool_slug, resource, nominal, borrowing_limit = quota
    pool = GpuPool.objects.get(slug=pool_slug)
    data = _project_post(department, quotas=[(pool, resource, nominal, borrowing_limit)])
    _assert_refused(staff_client.post("/admin/tenants/project/add/", data), *fragments)
    assert not Project.objects.filter(slug="robotics").exists()


def test_two_quotas_for_the_same_resource_are_refused(demo, staff_client):
    department = Department.objects.get(slug="applied")
    a100 = GpuPool.objects.get(slug="a100")
    data = _project_post(department, quotas=[(a100, "gpu", 0, None), (a100, "gpu", 0, None)])
    _assert_refused(staff_client.post("/admin/tenants/project/add/", data), "duplicate")
    assert not Project.objects.filter(slug="robotics").exists()


@pytest.mark.parametrize(
    ("slug", "fragment"),
    [
        ("Robotics", "DNS-1123 label"),
        ("robo_tics", "DNS-1123 label"),
        ("-robotics", "DNS-1123 label"),
        ("robotics-", "DNS-1123 label"),
        ("r" * 41, "at most 40 characters"),
        ("vision", "Project with this Slug already exists."),
        ("", "This field is required."),
    ],
)
def test_project_slug_must_be_a_dns_label_of_at_most_40(demo, staff_client, slug, fragment):
    department = Department.objects.get(slug="research")
    response = staff_client.post(
        "/admin/tenants/project/add/", _project_post(department, slug=slug)
    )
    _assert_refused(response, fragment)
    assert Project.objects.count() == 4


def test_a_40_character_slug_is_accepted(demo, staff_client):
    department = Department.objects.get(slug="research")
    slug = "a" * 39 + "1"
    response = staff_client.post(
        "/admin/tenants/project/add/", _project_post(department, slug=slug)
    )
    assert response.status_code == 302
    assert Project.objects.get(slug=slug).namespace == f"gp-{slug}"


def test_changing_a_project_keeps_its_slug_and_validates_inline_quotas(demo, staff_client):
    project = Project.objects.get(slug="speech")
    quotas = list(project.quotas.select_related("pool").order_by("pk"))
    memberships = list(project.memberships.order_by("pk"))
    data = {"name": "Speech & Audio", "department": str(project.department_id), "description": ""}
    data["default_gang_backend"] = "kueue"
    data["pod_security"] = "restricted"
    data.update(_management("memberships", len(memberships), len(memberships)))
    for i, membership in enumerate(memberships):
        data[f"memberships-{i}-id"] = str(membership.pk)
        data[f"memberships-{i}-project"] = str(project.pk)
        data[f"memberships-{i}-user"] = str(membership.user_id)
        data[f"memberships-{i}-role"] = membership.role
    data.update(_management("quotas", len(quotas), len(quotas)))
    for i, quota in enumerate(quotas):
        data[f"quotas-{i}-id"] = str(quota.pk)
        data[f"quotas-{i}-project"] = str(project.pk)
        data[f"quotas-{i}-pool"] = str(quota.pool_id)
        data[f"quotas-{i}-resource"] = quota.resource
        data[f"quotas-{i}-nominal"] = str(quota.nominal)
        data[f"quotas-{i}-borrowing_limit"] = (
            "" if quota.borrowing_limit is None else str(quota.borrowing_limit)
        )
    a100_index = next(i for i, q in enumerate(quotas) if q.pool.slug == "a100")
    # applied caps a100 at 8 and recsys holds 4: speech may have at most 4
    data[f"quotas-{a100_index}-nominal"] = "5"
    url = f"/admin/tenants/project/{project.pk}/change/"
    _assert_refused(staff_client.post(url, data), "at most 4 is allowed")
    assert ProjectQuota.objects.get(pk=quotas[a100_index].pk).nominal == 4

    data[f"quotas-{a100_index}-nominal"] = "3"
    data["slug"] = "renamed"  # read-only on change: ignored
    assert staff_client.post(url, data).status_code == 302
    project.refresh_from_db()
    assert (project.slug, project.name) == ("speech", "Speech & Audio")
    assert ProjectQuota.objects.get(pk=quotas[a100_index].pk).nominal == 3


def test_department_cap_inline_below_what_projects_hold_is_refused(demo, staff_client):
    department = Department.objects.get(slug="research")
    cap = department.quotas.get()
    data = {"slug": "research", "name": "Research", "description": ""}
    data.update(_management("quotas", 1, 1))
    data.update(
        {
            "quotas-0-id": str(cap.pk),
            "quotas-0-department": str(department.pk),
            "quotas-0-pool": str(cap.pool_id),
            "quotas-0-resource": "gpu",
            "quotas-0-limit": "10",
        }
    )
    url = f"/admin/tenants/department/{department.pk}/change/"
    _assert_refused(
        staff_client.post(url, data),
        "The projects of department research already hold 16 GPUs in pool h100; the cap must be "
        "at least 16 (got 10).",
    )
    cap.refresh_from_db()
    assert cap.limit == 16


def test_deleting_a_department_with_projects_is_refused_not_a_500(demo, staff_client):
    department = Department.objects.get(slug="research")
    url = f"/admin/tenants/department/{department.pk}/delete/"
    response = staff_client.post(url, {"post": "yes"})
    assert response.status_code == 200
    assert "would require deleting the following protected related objects" in (
        response.content.decode()
    )
    assert Department.objects.filter(slug="research").exists()


def test_saving_quotas_that_over_subscribe_a_pool_warns(demo, staff_client):
    department = Department.objects.get(slug="research")
    a100 = GpuPool.objects.get(slug="a100")  # the demo guarantees all 16 of its GPUs already
    data = _project_post(department, quotas=[(a100, "gpu", 2, None)])
    response = staff_client.post("/admin/tenants/project/add/", data, follow=True)
    assert response.status_code == 200
    assert "Pool a100 is over-subscribed: 18 of 16 GPUs guaranteed" in response.content.decode()
    assert ProjectQuota.objects.filter(
        project__slug="robotics"
    ).exists()  # a warning, not a refusal


def test_the_same_member_twice_is_refused(demo, staff_client, django_user_model):
    department = Department.objects.get(slug="research")
    user = django_user_model.objects.get(username="nlp-viewer")
    data = _project_post(department, memberships=[(user, "admin"), (user, "viewer")])
    _assert_refused(staff_client.post("/admin/tenants/project/add/", data), "duplicate")
    assert not Project.objects.filter(slug="robotics").exists()


def test_an_unknown_role_is_refused(demo, staff_client, django_user_model):
    department = Department.objects.get(slug="research")
    user = django_user_model.objects.get(username="nlp-viewer")
    data = _project_post(department, memberships=[(user, "owner")])
    _assert_refused(
        staff_client.post("/admin/tenants/project/add/", data),
        "Select a valid choice. owner is not one of the available choices.",
    )


@pytest.mark.parametrize(
    "url",
    [
        "/admin/tenants/project/",
        "/admin/tenants/department/",
        "/admin/quotas/gpupool/",
        "/admin/quotas/projectquota/",
        "/admin/quotas/departmentquota/",
    ],
)
def test_admin_lists_take_the_same_number_of_queries_for_more_rows(demo, staff_client, url):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from quotas import services

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert staff_client.get(url).status_code == 200
        return len(captured)

    before = queries()
    a100 = GpuPool.objects.get(slug="a100")
    for i in range(5):
        department = Department.objects.create(slug=f"extra-{i}", name=f"Extra {i}")
        project = Project.objects.create(
            slug=f"extra-{i}", name=f"Extra {i}", department=department
        )
        services.quota_set(actor=None, project=project, pool=a100, nominal=0)
        services.department_quota_set(actor=None, department=department, pool=a100, limit=1)
        services.pool_create(
            actor=None, slug=f"extra-{i}", name="x", gpu_model="NVIDIA-A30", node_count=1
        )
    assert queries() == before


def test_project_page_shows_each_quotas_maximum(demo, staff_client):
    vision = Project.objects.get(slug="vision")
    page = staff_client.get(f"/admin/tenants/project/{vision.pk}/change/").content.decode()
    # h100 gpu 8 (+4) → 12, 1g.10gb 14 (+7) → 21, a100 gpu 4 (+4) → 8, l40s-kai gpu 2 (+2) → 4
    shown = re.findall(r'<td class="field-maximum">\s*<p>(\S+?)</p>', page)
    assert sorted(shown) == ["12", "21", "4", "8", "—"]  # the last is the empty template row
