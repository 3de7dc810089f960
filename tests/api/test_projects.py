"""/api/v1/projects/: what each persona sees, quotas per pool, filters, errors, query counts."""

import pytest

from tenants.models import Role
from tests.factories import (
    DepartmentFactory,
    GpuPoolFactory,
    MembershipFactory,
    ProjectFactory,
    ProjectQuotaFactory,
)


def _slugs(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [project["slug"] for project in response.json()["results"]]


@pytest.mark.parametrize(
    ("persona", "slugs"),
    [
        ("admin", ["alpha"]),
        ("member", ["alpha"]),
        ("viewer", ["alpha"]),
        ("outsider", ["beta"]),
        ("staff", ["alpha", "beta"]),
    ],
)
def test_each_persona_lists_only_their_projects(persona, slugs, personas, api_client_for):
    response = api_client_for(personas.by_name(persona)).get("/api/v1/projects/")
    assert _slugs(response) == slugs


def test_user_without_projects_gets_an_empty_list(personas, api_client_for):
    from tests.factories import UserFactory

    response = api_client_for(UserFactory(username="loner")).get("/api/v1/projects/")
    assert response.json()["count"] == 0


def test_detail_by_slug_shows_quotas_per_pool_and_my_role(personas, api_client_for):
    a100 = GpuPoolFactory(slug="a100", name="A100 40GB", gpu_model="NVIDIA-A100-SXM4-40GB")
    ProjectQuotaFactory(project=personas.project_a, pool=a100, resource="gpu", nominal=2)
    ProjectQuotaFactory(
        project=personas.project_a, pool=personas.pool, resource="1g.10gb", nominal=7
    )

    response = api_client_for(personas.viewer).get("/api/v1/projects/alpha/")

    assert response.status_code == 200
    body = response.json()
    assert body["slug"] == "alpha"
    assert body["namespace"] == "gp-alpha"
    assert body["department"] == {"slug": "research", "name": "Research"}
    assert body["my_role"] == "viewer"
    assert [(q["pool"], q["resource"], q["nominal"]) for q in body["quotas"]] == [
        ("a100", "gpu", 2),
        ("h100", "gpu", 8),
        ("h100", "1g.10gb", 7),
    ]
    h100_gpu = body["quotas"][1]
    assert h100_gpu["gpu_model"] == "NVIDIA-H100-80GB-HBM3"
    assert h100_gpu["borrowing_limit"] == 4
    assert h100_gpu["maximum"] >= h100_gpu["nominal"]


def test_staff_who_is_not_a_member_has_no_role(personas, api_client_for):
    body = api_client_for(personas.staff).get("/api/v1/projects/beta/").json()
    assert body["my_role"] is None
    assert body["quotas"][0]["nominal"] == 2


def test_another_tenants_project_and_a_missing_one_answer_the_same_404(personas, api_client_for):
    client = api_client_for(personas.outsider)
    hidden = client.get("/api/v1/projects/alpha/")
    missing = client.get("/api/v1/projects/no-such-project/")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json() == missing.json()
    assert hidden.json()["errors"] == {}


def test_filter_by_department(personas, api_client_for):
    client = api_client_for(personas.staff)
    assert _slugs(client.get("/api/v1/projects/", {"department": "platform"})) == ["beta"]
    assert _slugs(client.get("/api/v1/projects/", {"q": "alp"})) == ["alpha"]


def test_unknown_department_filter_is_a_400_naming_the_field(personas, api_client_for):
    response = api_client_for(personas.staff).get("/api/v1/projects/", {"department": "nope"})
    assert response.status_code == 400
    body = response.json()
    assert list(body["errors"]) == ["department"]
    assert body["detail"].startswith("department: ")


def test_projects_are_read_only(personas, api_client_for):
    client = api_client_for(personas.staff)
    assert client.post("/api/v1/projects/", {"slug": "x"}, format="json").status_code == 405
    assert client.delete("/api/v1/projects/alpha/").status_code == 405


def test_pagination(personas, api_client_for):
    for n in range(3):
        ProjectFactory(slug=f"extra-{n}", department=personas.project_a.department)
    client = api_client_for(personas.staff)
    first = client.get("/api/v1/projects/", {"page_size": 2}).json()
    assert first["count"] == 5
    assert [p["slug"] for p in first["results"]] == ["alpha", "beta"]
    third = client.get(first["next"].replace("page=2", "page=3")).json()
    assert [p["slug"] for p in third["results"]] == ["extra-2"]
    assert third["next"] is None
    # A page past the last one is a bad parameter (400 naming it), like page=0 or page_size=x.
    bad_page = client.get("/api/v1/projects/", {"page": 99})
    assert bad_page.status_code == 400
    assert bad_page.json()["errors"] == {"page": ["Page 99 does not exist; the last page is 1."]}


def _many_projects(member, count: int) -> None:
    department = DepartmentFactory(slug="bulk")
    pools = [GpuPoolFactory(slug=f"bulk-pool-{i}") for i in range(2)]
    for n in range(count):
        project = ProjectFactory(slug=f"bulk-{n}", department=department)
        MembershipFactory(project=project, user=member, role=Role.MEMBER)
        for pool in pools:
            ProjectQuotaFactory(project=project, pool=pool, nominal=n + 1)


def test_project_list_query_count_does_not_grow_with_projects(
    personas, api_client_for, django_assert_max_num_queries
):
    _many_projects(personas.member, 20)
    client = api_client_for(personas.member)
    # session + user, count, page, quota rows (3): fixed, whatever the number of projects.
    with django_assert_max_num_queries(8):
        response = client.get("/api/v1/projects/")
    assert response.json()["count"] == 21
    assert all(len(p["quotas"]) >= 1 for p in response.json()["results"])
