"""Workspace pages: my workspaces and the start form, one workspace's page, stop, start again."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from planner.selectors import forecast_for_queued
from tenants.permissions import WRITER_ROLES
from tenants.selectors import project_list_visible_to
from workspaces import selectors
from workspaces.forms import WorkspaceForm
from workspaces.models import WorkspaceKind
from workspaces.services import workspace_start, workspace_start_again, workspace_stop
from workspaces.states import LABELS, QUEUED


def _writable_projects(user):
    projects = list(project_list_visible_to(user=user))
    if user.is_staff:
        return projects
    return [p for p in projects if getattr(p, "my_role", None) in WRITER_ROLES]


class WorkspaceListView(LoginRequiredMixin, View):
    template_name = "workspaces/list.html"

    def _render(self, request, form, status=200):
        context = {
            "rows": selectors.workspace_rows(request.user, mine_only=False),
            "form": form,
            "kinds": WorkspaceKind.objects.filter(enabled=True),
        }
        return render(request, self.template_name, context, status=status)

    def get(self, request):
        return self._render(request, WorkspaceForm(projects=_writable_projects(request.user)))

    def post(self, request):
        form = WorkspaceForm(request.POST, projects=_writable_projects(request.user))
        if not form.is_valid():
            return self._render(request, form, status=400)
        data = form.cleaned_data
        try:
            ws = workspace_start(
                actor=request.user,
                project=data["project"],
                kind=data["kind"],
                shape=data["shape"],
                name=data["name"],
                mounts=form.mounts(),
                shared=data["shared"],
                source="ui",
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                target = field if field in form.fields else None
                if field.startswith("mounts"):
                    target = "volumes"
                for error in errors:
                    form.add_error(target, f"{field}: {error}" if target is None else error)
            return self._render(request, form, status=400)
        messages.success(request, f"Workspace {ws.name} submitted; it opens once it runs.")
        return redirect("workspace-detail", pk=ws.pk)


def _visible(request, pk: int):
    return get_object_or_404(selectors.workspaces_visible_to(request.user), pk=pk)


class WorkspaceDetailView(LoginRequiredMixin, View):
    def get(self, request, pk: int):
        ws = _visible(request, pk)
        state = selectors.state_of(ws)
        row = {
            "ws": ws,
            "state": state,
            "label": LABELS[state],
            "time_left": selectors.time_left(ws),
        }
        # When a waiting workspace would likely start: the same forecast as a waiting job's.
        forecast = forecast_for_queued(ws.job) if ws.job_id and state == QUEUED else None
        return render(
            request,
            "workspaces/detail.html",
            {
                **row,
                "is_owner": ws.owner_id == request.user.pk,
                "job": ws.job,
                "forecast": forecast,
            },
        )


class WorkspaceStopView(LoginRequiredMixin, View):
    def post(self, request, pk: int):
        ws = _visible(request, pk)
        try:
            workspace_stop(actor=request.user, workspace=ws, source="ui")
            messages.success(request, f"Workspace {ws.name} is stopping; its volumes are kept.")
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        except PermissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc
        return redirect("workspace-detail", pk=ws.pk)


class WorkspaceStartAgainView(LoginRequiredMixin, View):
    def post(self, request, pk: int):
        ws = _visible(request, pk)
        try:
            workspace_start_again(actor=request.user, workspace=ws, source="ui")
            messages.success(request, f"Workspace {ws.name} submitted again, same volumes.")
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        except PermissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc
        return redirect("workspace-detail", pk=ws.pk)
