"""Pages: the project page's GPU limits and quota requests (project admins write them), and the
staff's decision on a quota request from the overview. Thin: a form, one service, a redirect (or
the section again with the errors, 400)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View

from governance.forms import DecisionForm, MemberLimitForm, QuotaRequestForm
from governance.models import MemberGpuLimit, QuotaRequest
from governance.selectors import section_context
from governance.services import (
    member_limit_delete,
    member_limit_set,
    quota_request_approve,
    quota_request_create,
    quota_request_refuse,
)
from tenants.permissions import is_project_admin, is_staff
from tenants.selectors import project_list_visible_to


def _administered(request: HttpRequest, slug: str):
    project = get_object_or_404(project_list_visible_to(user=request.user), slug=slug)
    if not is_project_admin(request.user, project):
        raise PermissionDenied(f"Only admins of project '{project.slug}' can do this.")
    return project


def _put_errors(form, exc: ValidationError) -> None:
    errors = exc.message_dict if hasattr(exc, "error_dict") else {None: exc.messages}
    for name, messages_ in errors.items():
        for message in messages_:
            form.add_error(name if name in form.fields else None, message)


def _section_again(request: HttpRequest, project, **forms) -> HttpResponse:
    context = section_context(user=request.user, project=project)
    context.update(limit_form=MemberLimitForm(), request_form=QuotaRequestForm())
    context.update(forms)
    return render(request, "governance/project_governance.html", context, status=400)


def _back(project, anchor: str) -> HttpResponse:
    return redirect(reverse("project", args=[project.slug]) + f"#{anchor}")


class MemberLimitSetView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        project = _administered(request, slug)
        form = MemberLimitForm(request.POST)
        if form.is_valid():
            try:
                limit = member_limit_set(actor=request.user, project=project, **form.cleaned_data)
            except ValidationError as exc:
                _put_errors(form, exc)
            else:
                messages.success(request, f"GPU limit set: {limit}.")
                return _back(project, "gpu-limits")
        return _section_again(request, project, limit_form=form)


class MemberLimitRemoveView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, slug: str, limit_id: int) -> HttpResponse:
        project = _administered(request, slug)
        limit = get_object_or_404(MemberGpuLimit, pk=limit_id, project=project)
        member_limit_delete(actor=request.user, limit=limit)
        messages.success(request, "GPU limit removed.")
        return _back(project, "gpu-limits")


class QuotaRequestCreateView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        project = _administered(request, slug)
        form = QuotaRequestForm(request.POST)
        if form.is_valid():
            try:
                quota_request_create(actor=request.user, project=project, **form.cleaned_data)
            except ValidationError as exc:
                _put_errors(form, exc)
            else:
                messages.success(request, "Quota request sent to staff.")
                return _back(project, "quota-requests")
        return _section_again(request, project, request_form=form)


class QuotaRequestDecideView(LoginRequiredMixin, View):
    """Staff approve or refuse a request from the overview page."""

    def post(self, request: HttpRequest, request_id: int) -> HttpResponse:
        if not is_staff(request.user):
            raise PermissionDenied("Only staff decide quota requests.")
        quota_request = get_object_or_404(QuotaRequest, pk=request_id)
        form = DecisionForm(request.POST)
        if not form.is_valid():
            messages.error(request, "Choose approve or refuse.")
            return redirect(reverse("overview") + "#quota-requests")
        decide = (
            quota_request_approve
            if form.cleaned_data["decision"] == "approve"
            else quota_request_refuse
        )
        try:
            decide(actor=request.user, request=quota_request, note=form.cleaned_data["note"])
        except ValidationError as exc:
            messages.error(request, f"Request #{quota_request.pk}: {' '.join(exc.messages)}")
        else:
            messages.success(
                request, f"Request #{quota_request.pk} {form.cleaned_data['decision']}d."
            )
        return redirect(reverse("overview") + "#quota-requests")
