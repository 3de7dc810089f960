"""Single sign-on end to end: the portal under a live server, the real `oidc-provider` as IdP,
and httpx as the browser (following redirects, filling the provider's login and consent forms)."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest

pytestmark = pytest.mark.django_db(transaction=True)


class _FirstForm(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}
        self._in_form = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form" and self.action is None:
            self.action, self._in_form = attrs.get("action", ""), True
        elif tag == "input" and self._in_form and attrs.get("name"):
            self.fields[attrs["name"]] = attrs.get("value") or ""

    def handle_endtag(self, tag):
        if tag == "form":
            self._in_form = False


def _submit_first_form(http: httpx.Client, page: httpx.Response, **values: str) -> httpx.Response:
    form = _FirstForm()
    form.feed(page.text)
    assert form.action is not None, f"no form on {page.url}: {page.text[:500]}"
    return http.post(urljoin(str(page.url), form.action), data={**form.fields, **values})


def _is_portal(response: httpx.Response, portal_url: str) -> bool:
    return str(response.url).startswith(portal_url)


def sso_login(http: httpx.Client, portal_url: str, login: str) -> httpx.Response:
    """Start at the portal's SSO button and go through the provider's pages back to the portal."""
    page = http.get(f"{portal_url}/accounts/sso/login/")
    for _ in range(4):
        if _is_portal(page, portal_url):
            return page
        if 'name="login"' in page.text:
            page = _submit_first_form(http, page, login=login, password="any")
        else:  # the consent page
            page = _submit_first_form(http, page)
    raise AssertionError(f"the login did not come back to the portal: {page.url}")


@pytest.fixture
def browser() -> httpx.Client:
    with httpx.Client(follow_redirects=True, timeout=20) as client:
        yield client


@pytest.fixture
def mapped_projects(transactional_db):
    from tenants.models import GroupMapping, Role
    from tests.factories import ProjectFactory

    vision = ProjectFactory(slug="vision", name="Vision")
    nlp = ProjectFactory(slug="nlp", name="NLP")
    shared = ProjectFactory(slug="shared", name="Shared")
    GroupMapping.objects.create(group="vision-members", project=vision, role=Role.MEMBER)
    GroupMapping.objects.create(group="nlp-admins", project=nlp, role=Role.ADMIN)
    GroupMapping.objects.create(group="shared-users", project=shared, role=Role.MEMBER)
    return {"vision": vision, "nlp": nlp, "shared": shared}


def _memberships(username: str) -> dict[str, tuple[str, str]]:
    from tenants.models import Membership

    return {
        m.project.slug: (m.role, m.source)
        for m in Membership.objects.select_related("project").filter(user__username=username)
    }


def test_first_login_creates_the_user_with_the_memberships_of_their_groups(
    sso_settings, oidc_provider, live_server, browser, mapped_projects
):
    from django.contrib.auth import get_user_model

    from tenants.models import ExternalIdentity

    oidc_provider.set_groups("ada", ["vision-members", "nlp-admins", "unmapped-group"])

    landed = sso_login(browser, live_server.url, "ada")

    assert landed.status_code == 200
    assert landed.url.path == "/"
    user = get_user_model().objects.get(username="ada")
    assert user.email == "ada@example.org"
    assert not user.has_usable_password()
    identity = ExternalIdentity.objects.get(user=user)
    assert (identity.issuer, identity.subject) == (oidc_provider.issuer, "ada")
    assert _memberships("ada") == {"vision": ("member", "sso"), "nlp": ("admin", "sso")}
    assert "Vision" in browser.get(f"{live_server.url}/").text


def test_leaving_a_group_removes_only_the_membership_the_mapping_created(
    sso_settings, oidc_provider, live_server, browser, mapped_projects
):
    from django.contrib.auth import get_user_model

    from tenants.models import Membership, Role

    oidc_provider.set_groups("grace", ["vision-members", "shared-users"])
    sso_login(browser, live_server.url, "grace")
    grace = get_user_model().objects.get(username="grace")
    # A project admin grants grace a role in nlp in the portal; shared was granted locally too
    # before the mapping could: neither is the identity provider's to take away.
    Membership.objects.create(user=grace, project=mapped_projects["nlp"], role=Role.VIEWER)
    Membership.objects.filter(user=grace, project__slug="shared").update(source="local")

    oidc_provider.set_groups("grace", [])
    browser.cookies.clear()
    sso_login(browser, live_server.url, "grace")

    assert _memberships("grace") == {"nlp": ("viewer", "local"), "shared": ("member", "local")}
    assert get_user_model().objects.filter(username__startswith="grace").count() == 1


def test_a_group_mapped_again_changes_the_sso_role(
    sso_settings, oidc_provider, live_server, browser, mapped_projects
):
    from tenants.models import GroupMapping, Role

    oidc_provider.set_groups("linus", ["vision-members"])
    sso_login(browser, live_server.url, "linus")
    GroupMapping.objects.create(
        group="vision-leads", project=mapped_projects["vision"], role="admin"
    )
    oidc_provider.set_groups("linus", ["vision-members", "vision-leads"])
    browser.cookies.clear()
    sso_login(browser, live_server.url, "linus")

    assert _memberships("linus") == {"vision": (Role.ADMIN, "sso")}


def test_a_tampered_state_gets_an_error_page_not_a_login(
    sso_settings, oidc_provider, live_server, browser, mapped_projects
):
    started = browser.get(f"{live_server.url}/accounts/sso/login/", follow_redirects=False)
    assert started.status_code == 302
    assert "code_challenge_method=S256" in started.headers["location"]

    answer = browser.get(f"{live_server.url}/accounts/sso/callback/?state=forged&code=whatever")

    assert answer.status_code == 400
    assert "not the one the portal started" in answer.text
    assert browser.get(f"{live_server.url}/").url.path == "/accounts/login/"


def test_refused_consent_gets_an_error_page(
    sso_settings, oidc_provider, live_server, browser, mapped_projects
):
    page = browser.get(f"{live_server.url}/accounts/sso/login/")
    page = _submit_first_form(browser, page, login="mallory", password="any")
    assert "consent" in page.text
    # The provider's "cancel" link: it sends the browser back with error=access_denied.
    answer = browser.get(f"{page.url}/abort")

    assert answer.status_code == 403
    assert "consent was refused" in answer.text


def test_logout_ends_the_portal_session_and_the_providers(
    sso_settings, oidc_provider, live_server, browser, mapped_projects
):
    oidc_provider.set_groups("ada", ["vision-members"])
    sso_login(browser, live_server.url, "ada")

    logout_page = browser.post(
        f"{live_server.url}/accounts/logout/",
        headers={"X-CSRFToken": browser.cookies["csrftoken"]},
    )
    # The provider asks to confirm its own sign-out, then sends the browser to the login page.
    assert str(logout_page.url).startswith(oidc_provider.issuer)
    back = _submit_first_form(browser, logout_page, logout="yes")

    assert back.url.path == "/accounts/login/"
    assert browser.get(f"{live_server.url}/").url.path == "/accounts/login/"
    # The provider's session is gone too: the next SSO login asks for credentials again.
    page = browser.get(f"{live_server.url}/accounts/sso/login/")
    assert 'name="login"' in page.text


def test_an_answer_naming_another_issuer_is_refused(
    sso_settings, oidc_provider, live_server, browser, mapped_projects
):
    started = browser.get(f"{live_server.url}/accounts/sso/login/", follow_redirects=False)
    state = parse_qs(urlsplit(started.headers["location"]).query)["state"][0]

    answer = browser.get(
        f"{live_server.url}/accounts/sso/callback/",
        params={"state": state, "code": "whatever", "iss": "https://evil.example.org"},
    )

    assert answer.status_code == 400
    assert "another identity provider" in answer.text
