"""HTML pages for jobs: list (filters shared with the API), detail with the rendered manifest
YAML and a live state fragment (htmx polling stops once the job is finished), submit, cancel."""

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from jobs.filters import JobFilter
from jobs.forms import JobSubmitForm
from jobs.redact import redact_manifests
from jobs.render import manifests_yaml
from jobs.selectors import job_events, job_list_visible_to, job_manifests
from jobs.services import InvalidTransition, job_cancel, job_submit
from portal.pagination import EstimatedCountPaginator
from tenants.permissions import can_write
from tenants.selectors import project_list_visible_to

PAGE_SIZE = 50


def _visible_job(request, pk: int):
    return get_object_or_404(job_list_visible_to(user=request.user), pk=pk)


class JobListView(LoginRequiredMixin, View):
    def get(self, request):
        jobs = JobFilter(request.GET, queryset=job_list_visible_to(user=request.user))
        # Counts exactly up to a cap and estimates above it ('about N'): no full COUNT.
        page = EstimatedCountPaginator(jobs.qs, PAGE_SIZE).get_page(request.GET.get("page"))
        context = {"filter": jobs, "page": page}
        return render(request, "jobs/list.html", context)


class JobDetailView(LoginRequiredMixin, View):
    def get(self, request, pk: int):
        job = _visible_job(request, pk)
        context = {
            "job": job,
            "events": job_events(job=job),
            "pods": job.pod_records.all(),
            "can_write": can_write(request.user, job.project),
        }
        if request.htmx:
            # The polled state fragment; once finished it comes back without its trigger.
            return render(request, "jobs/partials/state.html", context)
        manifests = job_manifests(job)
        if not context["can_write"]:
            # Viewers see the env names, never the values (which may be credentials).
            manifests = redact_manifests(manifests, job.env)
        context["manifest_yaml"] = manifests_yaml(manifests)
        return render(request, "jobs/detail.html", context)


class JobCancelView(LoginRequiredMixin, View):
    def post(self, request, pk: int):
        job = _visible_job(request, pk)
        try:
            job_cancel(actor=request.user, job=job, source="ui")
            messages.success(request, f"Job {job.name} cancelled; its pods are being removed.")
        except InvalidTransition as exc:
            messages.error(request, str(exc))
        except PermissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc
        return redirect("job-detail", pk=job.pk)


class JobSubmitView(LoginRequiredMixin, View):
    def _projects(self, request):
        return [p for p in project_list_visible_to(user=request.user) if can_write(request.user, p)]

    def get(self, request):
        form = JobSubmitForm(projects=self._projects(request))
        return render(request, "jobs/submit.html", {"form": form})

    def post(self, request):
        form = JobSubmitForm(request.POST, projects=self._projects(request))
        if not form.is_valid():
            return render(request, "jobs/submit.html", {"form": form}, status=400)
        try:
            outcome = job_submit(
                actor=request.user,
                project=form.cleaned_data["project"],
                data=form.request_data(),
                source="ui",
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
            return render(request, "jobs/submit.html", {"form": form}, status=400)
        messages.success(request, f"Job {outcome.job.name} submitted.")
        for warning in outcome.warnings:
            messages.warning(request, warning)
        return redirect("job-detail", pk=outcome.job.pk)
