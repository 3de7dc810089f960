"""Login, callback and logout of single sign-on. Thin: the protocol is client.py's, the writes
services.py's. Every failure renders one page with a sentence (never a 500) and logs once."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import login as auth_login
from django.contrib.auth import logout as auth_logout
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.crypto import constant_time_compare
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from tenants.sso import client
from tenants.sso.client import SsoError
from tenants.sso.services import groups_from_claims, sync_group_memberships, user_for_identity

logger = logging.getLogger("portal.sso")

FLOW_SESSION_KEY = "sso_flow"
ID_TOKEN_SESSION_KEY = "sso_id_token"  # noqa: S105 - a session key name, not a secret
# The IdP's own error codes for a user who said no, and what we tell them.
DENIED_ERRORS = {"access_denied", "consent_required", "interaction_required", "login_required"}


def _error_page(request: HttpRequest, error: SsoError, *, log_detail: str = "") -> HttpResponse:
    logger.warning("sso login failed: %s %s", error.message, log_detail or repr(error.__cause__))
    return render(
        request, "registration/sso_error.html", {"message": error.message}, status=error.status
    )


def _callback_uri(request: HttpRequest) -> str:
    return request.build_absolute_uri(reverse("sso-callback"))


@require_GET
def sso_login(request: HttpRequest) -> HttpResponse:
    if not client.sso_enabled():
        return _error_page(request, SsoError("Single sign-on is not configured.", status=404))
    next_url = request.GET.get("next", "")
    if not url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        next_url = ""
    try:
        auth_request = client.authorization_request(_callback_uri(request))
    except SsoError as error:
        return _error_page(request, error)
    request.session[FLOW_SESSION_KEY] = {
        "state": auth_request.state,
        "nonce": auth_request.nonce,
        "code_verifier": auth_request.code_verifier,
        "next": next_url,
    }
    return HttpResponseRedirect(auth_request.url)


@require_GET
def sso_callback(request: HttpRequest) -> HttpResponse:
    # The flow is single-use: a replayed or second callback finds nothing.
    flow = request.session.pop(FLOW_SESSION_KEY, None)
    state = request.GET.get("state", "")
    if not flow or not state or not constant_time_compare(state, flow["state"]):
        return _error_page(
            request,
            SsoError(
                "This sign-in link is not the one the portal started (or it was already used); "
                "start the login again."
            ),
            log_detail="state mismatch",
        )
    if request.GET.get("error"):
        code = request.GET["error"]
        message = (
            "The sign-in was cancelled or consent was refused at the identity provider."
            if code in DENIED_ERRORS
            else "The identity provider could not sign you in."
        )
        return _error_page(request, SsoError(message, status=403), log_detail=f"idp error {code}")
    # RFC 9207: an IdP that names itself in the answer must name the one we asked (mix-up).
    answered_by = request.GET.get("iss")
    if answered_by is not None and answered_by.rstrip("/") != settings.PORTAL_OIDC_ISSUER:
        return _error_page(
            request,
            SsoError("The answer came from another identity provider than the configured one."),
            log_detail=f"iss {answered_by!r}",
        )
    code = request.GET.get("code", "")
    if not code:
        return _error_page(request, SsoError("The identity provider sent no authorization code."))
    try:
        tokens = client.exchange_code(
            code=code, code_verifier=flow["code_verifier"], redirect_uri=_callback_uri(request)
        )
        claims = client.validate_id_token(
            tokens["id_token"], keys=client.provider_keys(), nonce=flow["nonce"]
        )
    except SsoError as error:
        return _error_page(request, error)
    user = user_for_identity(issuer=settings.PORTAL_OIDC_ISSUER, claims=claims)
    if not user.is_active:
        return _error_page(
            request,
            SsoError("Your portal account is deactivated; ask the platform team.", status=403),
            log_detail=f"inactive user {user.get_username()}",
        )
    sync_group_memberships(
        user=user, groups=groups_from_claims(claims, settings.PORTAL_OIDC_GROUPS_CLAIM)
    )
    auth_login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    request.session[ID_TOKEN_SESSION_KEY] = tokens["id_token"]
    return redirect(flow["next"] or settings.LOGIN_REDIRECT_URL)


@require_POST
def logout(request: HttpRequest) -> HttpResponse:
    """Ends the portal session, then the IdP's when the user came through it and it has a page."""
    id_token = request.session.get(ID_TOKEN_SESSION_KEY)
    auth_logout(request)
    login_url = reverse(settings.LOGOUT_REDIRECT_URL)
    if id_token and client.sso_enabled():
        end_session = client.end_session_url(
            id_token=id_token, post_logout_redirect_uri=request.build_absolute_uri(login_url)
        )
        if end_session:
            return HttpResponseRedirect(end_session)
    return HttpResponseRedirect(login_url)


class LoginView(auth_views.LoginView):
    """Django's local login form, with the single sign-on button above it when SSO is on."""

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        if client.sso_enabled():
            context["sso_button_label"] = settings.PORTAL_OIDC_BUTTON_LABEL
        return context
