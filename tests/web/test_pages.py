"""The HTML pages: login/logout, home (my projects with a quota table), base layout and htmx."""

import re

import pytest
from django.test import Client

from tests.conftest import PERSONA_NAMES
from tests.factories import (
    TEST_PASSWORD,
    GpuPoolFactory,
    MembershipFactory,
    ProjectFactory,
    ProjectQuotaFactory,
    UserFactory,
)

HTMX_PATH = "/static/vendor/htmx-2.0.11.min.js"


def test_anonymous_visitors_are_sent_to_login(db):
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"


def test_login_page_and_login(personas):
    client = Client(enforce_csrf_checks=True)
    page = client.get("/accounts/login/?next=/profile/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="username"' in html
    assert 'name="password"' in html
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)

    response = client.post(
        "/accounts/login/",
        {
            "username": "bob",
            "password": TEST_PASSWORD,
            "next": "/profile/",
            "csrfmiddlewaretoken": token,
        },
    )
    assert response.status_code == 302
    assert response["Location"] == "/profile/"
    assert client.get("/").status_code == 200


def test_wrong_password_is_a_form_error(personas):
    response = Client().post("/accounts/login/", {"username": "bob", "password": "nope"})
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert "_auth_user_id" not in Client().session


def test_logout_is_a_post_and_ends_the_session(personas, web_client_for):
    client = web_client_for(personas.member)
    page = client.get("/").content.decode()
    assert 'action="/accounts/logout/"' in page
    response = client.post("/accounts/logout/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/"
    assert client.get("/").status_code == 302


# persona: (projects shown, projects not shown)
HOME = {
    "admin": (["alpha"], ["beta"]),
    "member": (["alpha"], ["beta"]),
    "viewer": (["alpha"], ["beta"]),
    "outsider": (["beta"], ["alpha"]),
    "staff": (["alpha", "beta"], []),
}


@pytest.mark.parametrize("persona", PERSONA_NAMES)
def test_home_lists_my_projects_with_their_quota_bars(persona, personas, web_client_for):
    response = web_client_for(personas.by_name(persona)).get("/")
    assert response.status_code == 200
    html = response.content.decode()
    shown, hidden = HOME[persona]
    for slug in shown:
        assert f'id="project-{slug}"' in html
    for slug in hidden:
        assert f'id="project-{slug}"' not in html
    assert 'class="quota-bars"' in html
    assert "guaranteed" in html


def test_home_quota_bars_show_each_pool_and_resource(personas, web_client_for):
    a100 = GpuPoolFactory(slug="a100", name="A100 40GB", gpu_model="NVIDIA-A100-SXM4-40GB")
    ProjectQuotaFactory(project=personas.project_a, pool=a100, nominal=3, borrowing_limit=0)
    ProjectQuotaFactory(
        project=personas.project_a, pool=personas.pool, resource="1g.10gb", nominal=14
    )
    html = web_client_for(personas.viewer).get("/").content.decode()
    section = html[html.index('id="project-alpha"') :]
    section = section[: section.index("</section>")]
    bars = [
        " ".join(re.sub(r"<[^>]+>", " ", item).split())
        for item in re.findall(r'<li class="quota-bar">(.*?)</li>', section, flags=re.S)
    ]
    assert bars == [
        "a100 · GPUs 0 in use 3 guaranteed 0 borrowable",
        "h100 · GPUs 0 in use 8 guaranteed 0 borrowable",
        "h100 · MIG 1g.10gb 0 in use 14 guaranteed 0 borrowable",
    ]
    assert "viewer</span>" in section


def test_home_for_a_user_without_projects_says_what_to_do(db, web_client_for):
    html = web_client_for(UserFactory(username="loner")).get("/").content.decode()
    assert "You do not belong to any project yet" in html
    assert "<strong>loner</strong>" in html


def test_project_without_quota_says_so(personas, web_client_for):
    MembershipFactory(user=personas.member, project=ProjectFactory(slug="empty"), role="member")
    html = web_client_for(personas.member).get("/").content.decode()
    section = html[html.index('id="project-empty"') :]
    assert "No GPU quota yet" in section


def test_home_query_count_does_not_grow_with_projects(
    personas, web_client_for, django_assert_max_num_queries
):
    for n in range(15):
        project = ProjectFactory(slug=f"bulk-{n}")
        MembershipFactory(user=personas.member, project=project, role="member")
        ProjectQuotaFactory(project=project, pool=personas.pool, nominal=1)
    client = web_client_for(personas.member)
    # Session, user, projects, quota (3), usage, my jobs, my GPU-hours, my workspaces.
    with django_assert_max_num_queries(10):
        response = client.get("/")
    assert response.content.decode().count('class="card project"') == 16


def test_layout_nav_and_csrf_header_for_htmx(personas, web_client_for):
    html = web_client_for(personas.member).get("/").content.decode()
    assert f'<script src="{HTMX_PATH}" defer></script>' in html
    csrf = re.search(r"""<body hx-headers='\{"X-CSRFToken": "([^"]+)"\}'>""", html)
    assert csrf is not None
    assert len(csrf.group(1)) >= 32
    assert 'href="/api/docs/"' in html
    assert 'href="/profile/"' in html
    assert 'href="/admin/"' not in html


def test_staff_get_the_admin_link(personas, web_client_for):
    assert 'href="/admin/"' in web_client_for(personas.staff).get("/").content.decode()


def test_htmx_is_served_from_static(db):
    response = Client().get(HTMX_PATH)
    assert response.status_code == 200
    body = b"".join(response.streaming_content)
    assert b'version:"2.0.11"' in body
    assert response["Content-Type"].startswith(("text/javascript", "application/javascript"))


def test_stylesheet_is_served(db):
    assert Client().get("/static/css/portal.css").status_code == 200


def test_htmx_post_with_csrf_header_is_accepted(personas):
    # What htmx does: the token from <body hx-headers> goes in X-CSRFToken.
    client = Client(enforce_csrf_checks=True)
    client.force_login(personas.member)
    html = client.get("/profile/").content.decode()
    token = re.search(r'"X-CSRFToken": "([^"]+)"', html).group(1)
    refused = client.post("/profile/", {"expires_in_days": "30"}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 403
    accepted = client.post(
        "/profile/", {"expires_in_days": "30"}, HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=token
    )
    assert accepted.status_code == 200


def test_not_found_page_uses_the_layout(personas, web_client_for):
    response = web_client_for(personas.member).get("/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "belongs to a project you are not a member of" in html
    assert 'href="/profile/"' in html


def test_page_script_is_served_and_loaded(personas, web_client_for):
    html = web_client_for(personas.member).get("/").content.decode()
    assert '<script src="/static/js/portal.js" defer></script>' in html
    body = b"".join(Client().get("/static/js/portal.js").streaming_content)
    assert b"htmx:responseError" in body
