"""HTML pages for jobs: list (filters shared with the API), detail with the rendered manifest
YAML and live fragments (which stop updating once the job is finished), submit (with the live
feasibility line and YAML preview, "submit again" and saved templates), cancel."""

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import View

from gpumetrics.attribution import SHARED_NOTE
from jobs.arrays import shape as arrays
from jobs.arrays.services import array_submit
from jobs.job_templates.services import template_create, template_list_visible_to
from jobs.redact import redact_manifests
from jobs.render import manifests_yaml
from jobs.selectors import (
    dra_devices_for_job,
    job_events,
    job_list_visible_to,
    job_manifests,
    pods_with_shares,
    pool_facts_for_project,
)
from jobs.services import InvalidTransition, job_cancel, job_request_from, job_submit
from jobs.submission import form_advanced, page_selectors
from jobs.submission.again import fields_of_job
from jobs.submission.feasibility import feasibility
from jobs.submission.filters import JobListPageFilter
from jobs.submission.forms import JobSubmitForm, SaveTemplateForm, initial_from_fields
from jobs.validation import validate_job_request
from planner.selectors import forecast_for_unsaved
from planner.views import advice_overrides, cancel_replaced, job_planner_context, replaced_job
from portal.pagination import EstimatedCountPaginator
from tenants.permissions import WRITER_ROLES, can_write
from tenants.selectors import project_list_visible_to

PAGE_SIZE = 50


def _visible_job(request, pk: int):
    return get_object_or_404(job_list_visible_to(user=request.user), pk=pk)


class JobListView(LoginRequiredMixin, View):
    def get(self, request):
        projects = list(project_list_visible_to(user=request.user))
        jobs = JobListPageFilter(
            request.GET, queryset=job_list_visible_to(user=request.user), projects=projects
        )
        # Counts exactly up to a cap and estimates above it ('about N'): no full COUNT.
        page = EstimatedCountPaginator(jobs.qs, PAGE_SIZE).get_page(request.GET.get("page"))
        writable = _writable_ids(request.user, projects)
        query = request.GET.copy()
        query.pop("page", None)
        context = {
            "filter": jobs,
            "page": page,
            "writable": writable,
            "can_submit": writable is None or bool(writable),
            "query": query.urlencode(),
            "filtered": any(v for k, v in request.GET.items() if k != "page"),
        }
        return render(request, "jobs/list.html", context)


class JobDetailView(LoginRequiredMixin, View):
    def get(self, request, pk: int):
        job = _visible_job(request, pk)
        context = {
            "job": job,
            "events": job_events(job=job),
            "pods": pods_with_shares(job=job),
            "can_write": can_write(request.user, job.project),
            "summary": _summary(job),
        }
        if not request.htmx:
            # planner: the forecast and advice of a waiting job, right-sizing of a finished one
            context["planner"] = job_planner_context(job=job, user=request.user)
            # issue 26: a shared GPU's figures, a DRA claim's device
            context["sharing_note"] = SHARED_NOTE
            context["dra_devices"], context["dra_error"] = dra_devices_for_job(job=job)
        if request.htmx:
            # The live fragments; once finished they come back without their triggers.
            return render(request, "jobs/partials/live.html", context)
        manifests = job_manifests(job)
        if not context["can_write"]:
            # Viewers see the env names, never the values (which may be credentials).
            manifests = redact_manifests(manifests, job.env)
        context["manifest_yaml"] = manifests_yaml(manifests)
        return render(request, "jobs/detail.html", context)


def _summary(job):
    """The GPU efficiency summary of a finished job, or None (metrics not collected)."""
    if not job.is_terminal:
        return None
    from gpumetrics.selectors import summary_dict  # gpumetrics sits above jobs

    return summary_dict(job)


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
        back = request.POST.get("next", "")
        if back and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
            return redirect(back)
        return redirect("job-detail", pk=job.pk)


# --- submit ----------------------------------------------------------------------------------


def _writable_ids(user, projects) -> set[int] | None:
    """Projects (of those listed, annotated with my_role) the user may submit to and cancel in;
    None means all (staff)."""
    if user.is_staff:
        return None
    return {p.pk for p in projects if getattr(p, "my_role", None) in WRITER_ROLES}


def _writable_projects(request):
    projects = list(project_list_visible_to(user=request.user))
    writable = _writable_ids(request.user, projects)
    return [p for p in projects if writable is None or p.pk in writable]


def _build_form(request, data=None, initial=None):
    projects = _writable_projects(request)
    form = JobSubmitForm(data, initial=initial or {}, projects=projects)
    slug = form.selected_project()
    project = next((p for p in projects if p.slug == slug), None)
    facts = pool_facts_for_project(project=project) if project else []
    advanced = page_selectors.advanced_choices(project=project) if project else {}
    form = JobSubmitForm(
        data,
        initial=initial or {},
        projects=projects,
        pools=page_selectors.pool_choices(),
        facts=facts,
        **advanced,
    )
    return form, projects, project, facts


def _initial_for(request) -> dict:
    """Pre-fill: "submit again" (?again=<job id>), a template (?template=<id>), or the fields
    in the query (the page re-rendered for another project)."""
    if request.GET.get("again", "").isdigit():
        job = _visible_job(request, int(request.GET["again"]))
        # planner: "submit this instead" changes a few fields of the job it replaces
        return initial_from_fields(fields_of_job(job) | advice_overrides(request.GET))
    if request.GET.get("template", "").isdigit():
        template = get_object_or_404(
            template_list_visible_to(user=request.user), pk=int(request.GET["template"])
        )
        return initial_from_fields(
            {**template.fields, "project": template.project.slug, "template": template.pk}
        )
    return {k: v for k, v in request.GET.items() if k in JobSubmitForm.base_fields}


def _again_id(request) -> str:
    value = request.POST.get("again") or request.GET.get("again") or ""
    return value if value.isdigit() else ""


def _resubmitted_job(request):
    """The job a "submit again" submission repeats, when the user can see it; else None."""
    again = _again_id(request)
    return job_list_visible_to(user=request.user).filter(pk=int(again)).first() if again else None


def _render_submit(request, form, projects, *, save_form=None, status=200):
    templates = page_selectors.templates_for_projects(projects=projects)
    context = {
        "form": form,
        "templates": templates,
        "chosen_template": form.initial.get("template"),
        "save_form": save_form or SaveTemplateForm(),
        "no_projects": not projects,
        # planner: the waiting job this submission would replace (cancelled only if ticked)
        "replaces": replaced_job(request),
        # "submit again": kept through the POST so the audit trail says job.resubmit
        "again_of": _again_id(request),
    }
    return render(request, "jobs/submit.html", context, status=status)


class JobSubmitView(LoginRequiredMixin, View):
    def get(self, request):
        form, projects, _, _ = _build_form(request, initial=_initial_for(request))
        return _render_submit(request, form, projects)

    def post(self, request):
        form, projects, _, _ = _build_form(request, data=request.POST)
        if "save_template" in request.POST:
            return self._save_template(request, form, projects)
        if not form.is_valid():
            return _render_submit(request, form, projects, status=400)
        data = form.request_data()
        try:
            if arrays.is_array_request(data) or "parallelism" in data:
                # The same path as the API's: one array of jobs, shown on its own page.
                array = array_submit(
                    actor=request.user, project=form.cleaned_data["project"], data=data, source="ui"
                )
                messages.success(request, f"Array {array.name} of {array.count} jobs submitted.")
                return redirect("job-array-detail", pk=array.pk)
            outcome = job_submit(
                actor=request.user,
                project=form.cleaned_data["project"],
                data=data,
                source="ui",
                resubmit_of=_resubmitted_job(request),
            )
        except ValidationError as exc:
            form.add_api_errors(exc.message_dict)
            return _render_submit(request, form, projects, status=400)
        messages.success(request, f"Job {outcome.job.name} submitted.")
        cancelled = cancel_replaced(request)  # planner: only when the user ticked it
        if cancelled is not None:
            messages.success(request, f"Job {cancelled.name} cancelled: replaced by this one.")
        for warning in outcome.warnings:
            messages.warning(request, warning)
        return redirect("job-detail", pk=outcome.job.pk)

    def _save_template(self, request, form, projects):
        save_form = SaveTemplateForm(request.POST)
        if not (form.is_valid() & save_form.is_valid()):
            return _render_submit(request, form, projects, save_form=save_form, status=400)
        project = next(p for p in projects if p.slug == form.cleaned_data["project"])
        fields = form.request_data()
        fields.pop("name", None)
        try:
            template = template_create(
                actor=request.user,
                project=project,
                name=save_form.cleaned_data["template_name"],
                fields=fields,
            )
        except ValidationError as exc:
            errors = exc.message_dict
            for message in errors.pop("name", []):
                save_form.add_error("template_name", message)
            form.add_api_errors({k.removeprefix("fields."): v for k, v in errors.items()})
            return _render_submit(request, form, projects, save_form=save_form, status=400)
        messages.success(request, f"Saved template {template.name} for project {project.slug}.")
        return redirect(f"{request.path}?template={template.pk}")


class JobSubmitCheckView(LoginRequiredMixin, View):
    """The live line under the form: feasibility and the YAML that would be applied."""

    def post(self, request):
        form, _, project, facts = _build_form(request, data=request.POST)
        valid = form.is_valid()  # also fills cleaned_data with the fields that are fine
        # A field not filled in yet is not an error to shout about while the user types (the
        # submission says so by the field).
        typed = {k: v for k, v in form.errors.items() if str(request.POST.get(k, "")).strip()}
        context = {"form": form, "result": None, "yaml": "", "errors": _labelled(form, typed)}
        if project is None or "kind" not in form.cleaned_data:
            return render(request, "jobs/partials/submit_check.html", context)
        data = form.request_data()
        kind = data.get("kind", "")
        if arrays.is_array_request(data) or "parallelism" in data:
            data, context["array_note"], array_errors = _first_element(project, data)
            if array_errors:
                context["errors"] = {**context["errors"], **_labelled(form, array_errors)}
                valid = False
        # Whether it fits does not depend on the image, command or environment: judge the
        # shape even while those are still being typed.
        shape = {**data, "image": "busybox", "command": [], "env": {}, "name": ""}
        result = validate_job_request(job_request_from(project=project, data=shape), facts)
        in_use = page_selectors.in_use_for_projects(projects=[project])[project.pk]
        context["result"] = feasibility(
            result=result,
            kind=kind,
            mig_profile=data.get("mig_profile", ""),
            pools=facts,
            in_use=in_use,
        )
        unsaved = None
        if valid:
            outcome = job_submit(actor=request.user, project=project, data=data, dry_run=True)
            if outcome.validation.ok:
                context["yaml"] = manifests_yaml(outcome.manifests)
                unsaved = outcome.unsaved
            else:
                context["errors"] = _labelled(form, outcome.validation.errors)
        elif result.ok:
            unsaved = job_submit(
                actor=request.user, project=project, data=shape, dry_run=True
            ).unsaved
        if unsaved is not None:
            context["forecast"] = forecast_for_unsaved(unsaved)  # planner: when it would start
        return render(request, "jobs/partials/submit_check.html", context)


def _first_element(project, data: dict) -> tuple[dict, str, dict]:
    """An array request as its first element (what the preview shows), a sentence saying it is
    an array, and the array's own errors (count, grid, parallelism)."""
    data = dict(data)
    spec, errors = arrays.parse_array_request(
        array=data.pop("array", None),
        sweep=data.pop("sweep", None),
        parallelism=data.pop("parallelism", None),
        limit=project.max_array_elements,
    )
    if spec is None or errors:
        return data, "", errors
    params = arrays.element_params(spec)[0]
    data["name"] = arrays.element_name(data.get("name") or "array", 0)
    data["env"] = {**data.get("env", {}), **arrays.element_env(0, spec.count, params)}
    note = (
        f"An array of {spec.count} jobs, at most {spec.parallelism} at once; "
        "the preview shows its first job."
    )
    return data, note, {}


def _labelled(form, errors) -> dict[str, list[str]]:
    """{field label: messages} for the check line (the form shows them by the fields too); the
    API's keys (mounts[0].path, env.HF_TOKEN, array) under the form field they belong to."""
    cleaned = getattr(form, "cleaned_data", {})
    volumes = list(cleaned.get("volumes") or [])
    secret_env = set(cleaned.get("secret_env") or {})
    labelled: dict[str, list[str]] = {}
    for key, messages_ in errors.items():
        for message in messages_:
            field, text = form_advanced.form_field_for(
                key, str(message), volumes=volumes, secret_env=secret_env
            )
            label = str(form[field].label) if field in form.fields else ""
            labelled.setdefault(label, []).append(text)
    return labelled
