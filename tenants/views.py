"""HTML pages of the tenants app: home (my projects and their quotas), a project's page with
its members (admins manage them), and the profile page (personal API tokens).

Thin views: they parse a form, call one selector or service and render. With htmx a write
answers with the section it changed; without, it redirects back (or re-renders with errors).
"""

from __future__ import annotations

import time

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View
from django.views.generic import TemplateView

from gpumetrics.selectors import project_usage
from jobs.selectors import usage_rows_for_projects
from jobs.submission import page_selectors
from quotas.selectors import quota_rows_for_projects
from tenants.forms import MemberAddForm, MemberRoleForm, TokenCreateForm
from tenants.models import Membership, Project
from tenants.permissions import WRITER_ROLES, can_manage_members, can_write
from tenants.selectors import (
    membership_list_for_project,
    project_list_visible_to,
    staff_contacts,
    token_list_for_user,
)
from tenants.services import (
    membership_add,
    membership_change_role,
    membership_remove,
    token_create,
    token_revoke,
)
from workspaces.selectors import workspace_rows


class HomeView(LoginRequiredMixin, TemplateView):
    """My projects with a bar per pool and resource, my unfinished jobs (live) and my GPU-hours
    this week."""

    template_name = "tenants/home.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        user = self.request.user
        projects = list(project_list_visible_to(user=user))
        bars = page_selectors.quota_bars_for_projects(projects=projects)
        context["projects"] = [(project, bars.get(project.pk, [])) for project in projects]
        context["my_jobs"] = list(page_selectors.my_active_jobs(user=user))
        context["gpu_hours"] = page_selectors.my_gpu_hours_this_week(user=user)
        context["my_workspaces"] = workspace_rows(user)
        # my_role is annotated on each project: no extra query to know whether I may submit.
        context["can_submit"] = user.is_staff or any(
            getattr(p, "my_role", None) in WRITER_ROLES for p in projects
        )
        if not projects:
            context["contacts"] = staff_contacts()  # whom to ask for access
        return context


# --- project page and members -------------------------------------------------------------


def _visible_project(request: HttpRequest, slug: str) -> Project:
    """The project if the user may see it; otherwise the same 404 as a missing project."""
    return get_object_or_404(project_list_visible_to(user=request.user), slug=slug)


def _managed_project(request: HttpRequest, slug: str) -> Project:
    """The project if the user may manage its members: 404 when not visible, else 403."""
    project = _visible_project(request, slug)
    if not can_manage_members(request.user, project):
        raise PermissionDenied(f"Only admins of project '{project.slug}' can manage its members.")
    return project


def _render_project(
    request: HttpRequest,
    project: Project,
    *,
    add_form: MemberAddForm | None = None,
    error: str | None = None,
    error_for: int | None = None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "project": project,
        "members": membership_list_for_project(project=project),
        "can_manage": can_manage_members(request.user, project),
        "can_write": can_write(request.user, project),
        "add_form": add_form or MemberAddForm(),
        "role_choices": MemberRoleForm.base_fields["role"].choices,
        "member_error": error,
        # The membership row the error is about: shown next to that row's controls.
        "member_error_for": error_for,
    }
    if request.htmx:
        return render(request, "tenants/partials/members.html", context, status=status)
    context["quota_rows"] = quota_rows_for_projects(projects=[project])[project.pk]
    context["usage_rows"] = usage_rows_for_projects(projects=[project])[project.pk]
    context["usage_by_user"] = usage_by_user(project)
    return render(request, "tenants/project.html", context, status=status)


USAGE_DAYS = 30


def usage_by_user(project: Project) -> list[dict]:
    """GPU-hours per user over the last USAGE_DAYS days (the chart above shows them per day)."""
    since = int(time.time()) - USAGE_DAYS * 86400
    return project_usage(project, since=since, until=None, group_by="user")


def _after_member_change(request: HttpRequest, project: Project, done: str) -> HttpResponse:
    if request.htmx:
        return _render_project(request, project)
    messages.success(request, done)
    return redirect("project", slug=project.slug)


def _first_message(exc: ValidationError) -> str:
    return exc.messages[0] if exc.messages else "Invalid input."


class ProjectView(LoginRequiredMixin, View):
    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        return _render_project(request, _visible_project(request, slug))


class MemberAddView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        project = _managed_project(request, slug)
        form = MemberAddForm(request.POST)
        if form.is_valid():
            try:
                membership = membership_add(
                    actor=request.user,
                    project=project,
                    user=form.cleaned_data["user"],
                    role=form.cleaned_data["role"],
                )
            except ValidationError as exc:
                form.add_error(None, exc)
            else:
                done = f"Added {membership.user.get_username()} as {membership.role}."
                return _after_member_change(request, project, done)
        return _render_project(request, project, add_form=form, status=400)


class MemberRoleView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, slug: str, membership_id: int) -> HttpResponse:
        project = _managed_project(request, slug)
        membership = get_object_or_404(Membership, pk=membership_id, project=project)
        form = MemberRoleForm(request.POST)
        if not form.is_valid():
            return _render_project(
                request, project, error=form.errors["role"][0], error_for=membership.pk, status=400
            )
        try:
            membership = membership_change_role(
                actor=request.user, membership=membership, role=form.cleaned_data["role"]
            )
        except ValidationError as exc:
            return _render_project(
                request, project, error=_first_message(exc), error_for=membership.pk, status=400
            )
        done = f"{membership.user.get_username()} is now {membership.role}."
        return _after_member_change(request, project, done)


class MemberRemoveView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, slug: str, membership_id: int) -> HttpResponse:
        project = _managed_project(request, slug)
        membership = get_object_or_404(
            Membership.objects.select_related("user"), pk=membership_id, project=project
        )
        username = membership.user.get_username()
        try:
            membership_remove(actor=request.user, membership=membership)
        except ValidationError as exc:
            return _render_project(
                request, project, error=_first_message(exc), error_for=membership.pk, status=400
            )
        return _after_member_change(request, project, f"Removed {username} from {project.slug}.")


# --- profile and personal API tokens ------------------------------------------------------


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
