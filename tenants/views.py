"""HTML pages of the tenants app: the home page (my projects and quotas) and the profile page
(personal API tokens). Thin views: they call selectors and services and render."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import ObjectDoesNotExist
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views import View
from django.views.generic import TemplateView

from quotas.selectors import quota_rows_for_projects
from tenants.forms import TokenCreateForm
from tenants.selectors import project_list_visible_to, token_list_for_user
from tenants.services import token_create, token_revoke


class HomeView(LoginRequiredMixin, TemplateView):
    template_name = "tenants/home.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        projects = list(project_list_visible_to(user=self.request.user))
        rows = quota_rows_for_projects(projects=projects)
        context["projects"] = [(project, rows.get(project.pk, [])) for project in projects]
        return context


def _render_profile(
    request: HttpRequest, *, form: TokenCreateForm, new_token: str | None = None, status: int = 200
) -> HttpResponse:
    context = {
        "form": form,
        "tokens": token_list_for_user(user=request.user),
        "new_token": new_token,
    }
    # htmx swaps only the tokens section; a plain request gets the whole page.
    template = "tenants/partials/tokens.html" if request.htmx else "tenants/profile.html"
    return render(request, template, context, status=status)


class ProfileView(LoginRequiredMixin, View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return _render_profile(request, form=TokenCreateForm())

    def post(self, request: HttpRequest) -> HttpResponse:
        form = TokenCreateForm(request.POST)
        if not form.is_valid():
            return _render_profile(request, form=form, status=400)
        _, secret = token_create(actor=request.user, expires_in=form.expires_in())
        # Rendered in this response only (never stored in the session): the secret is shown once.
        return _render_profile(request, form=TokenCreateForm(), new_token=secret)


class TokenRevokeView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, token_key: str) -> HttpResponse:
        try:
            token_revoke(actor=request.user, token_key=token_key)
        except ObjectDoesNotExist as exc:
            raise Http404(str(exc)) from exc
        if request.htmx:
            return _render_profile(request, form=TokenCreateForm())
        messages.success(request, f"Token {token_key}… revoked.")
        return redirect("profile")
