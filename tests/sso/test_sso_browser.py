"""Single sign-on in a real browser (Playwright driving Debian's chromium): through the local
`oidc-provider`'s own login and consent pages, a user of group vision-members lands in project
vision as a member; once the group is gone, the next login removes the membership."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = os.environ.get("PORTAL_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def chromium():
    from playwright.sync_api import sync_playwright

    found = shutil.which(CHROMIUM) or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if not found:
        pytest.fail(
            f"No chromium at {CHROMIUM}: `make test` installs Debian's chromium package "
            "(scripts/ensure-services.sh); set PORTAL_CHROMIUM to use another one."
        )
    # Playwright's sync API keeps an event loop in this thread; Django would then refuse every
    # database call of the test. The loop never runs Django code.
    saved = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=found,
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        yield browser
        browser.close()
    if saved is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = saved


def _log_in_through_the_provider(chromium, portal_url: str, login: str):
    """A fresh browser (no portal or provider session): the SSO button, the provider's login
    and consent pages, back to the portal."""
    context = chromium.new_context()
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(f"{portal_url}/accounts/login/")
    page.get_by_role("link", name="Log in with single sign-on").click()
    page.fill('input[name="login"]', login)
    page.fill('input[name="password"]', "any")
    page.click('button[type="submit"]')
    if not page.url.startswith(portal_url):  # the provider's consent page
        page.click('button[type="submit"]')
    page.wait_for_url(f"{portal_url}/")
    return context, page


def test_a_group_member_lands_in_the_project_and_loses_it_with_the_group(
    sso_settings, oidc_provider, portal_server, chromium
):
    from tenants.models import GroupMapping, Membership, Role
    from tests.factories import ProjectFactory

    vision = ProjectFactory(slug="vision", name="Vision")
    GroupMapping.objects.create(group="vision-members", project=vision, role=Role.MEMBER)
    oidc_provider.set_groups("lin", ["vision-members", "a-group-nobody-mapped"])

    context, page = _log_in_through_the_provider(chromium, portal_server.url, "lin")
    assert page.get_by_role("link", name="Vision").count() >= 1
    page.goto(f"{portal_server.url}/projects/vision/")
    assert page.locator(".card-head .badge.role-member").text_content().strip() == "member"
    assert list(Membership.objects.filter(user__username="lin").values_list("role", "source")) == [
        ("member", "sso")
    ]
    context.close()

    oidc_provider.set_groups("lin", [])
    context, page = _log_in_through_the_provider(chromium, portal_server.url, "lin")
    answer = page.goto(f"{portal_server.url}/projects/vision/")
    assert answer is not None
    assert answer.status == 404
    assert not Membership.objects.filter(user__username="lin").exists()
    context.close()
