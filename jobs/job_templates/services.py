"""Saved job templates: reads and writes.

A template keeps the fields of a job request (not its name) for one project. It is checked with
the very validation a submission goes through (jobs.services.job_request_from and
jobs.validation.validate_job_request), so a saved template always submits; a submission that
names a template takes the template's fields and overrides them with its own explicit ones.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from audit.services import created, diff, record, removed
from jobs.models import JobTemplate
from jobs.selectors import pool_facts_for_project
from jobs.services import job_request_from
from jobs.validation import NAME_MAX, NAME_RE, validate_job_request
from tenants.models import Project
from tenants.permissions import can_write
from tenants.selectors import restrict_to_visible

# What a template may keep: a job request without its project and name.
TEMPLATE_FIELDS = (
    "kind",
    "image",
    "command",
    "env",
    "gpus",
    "mig_profile",
    "replicas",
    "pool",
    "cpu",
    "memory",
    "priority",
    "max_runtime_minutes",
    "backend",
    "gpu_fraction",
    "gpu_memory",
)


# --- reads -----------------------------------------------------------------------------------


def template_list_visible_to(*, user: Any, project: str | None = None) -> QuerySet[JobTemplate]:
    """Templates of the projects the user belongs to (staff: all), optionally of one project."""
    queryset = JobTemplate.objects.select_related("project", "created_by").order_by(
        "project__slug", "name"
    )
    if project:
        queryset = queryset.filter(project__slug=project)
    return restrict_to_visible(queryset, user=user, project_field="project")


def template_for_submission(*, user: Any, project: str, name: str) -> JobTemplate:
    """The named template of a project the user sees; ValidationError on "template" otherwise
    (another tenant's template is answered exactly like a missing one)."""
    found = template_list_visible_to(user=user, project=project).filter(name=name).first()
    if found is None:
        raise ValidationError(
            {"template": [f"No template {name!r} in project {project!r} that you can see."]}
        )
    return found


def with_template_fields(
    template_fields: dict[str, Any], explicit: dict[str, Any]
) -> dict[str, Any]:
    """The request a submission with a template makes: explicit fields win."""
    merged = {k: v for k, v in template_fields.items() if k in TEMPLATE_FIELDS}
    merged.update(explicit)
    return merged


# --- writes ----------------------------------------------------------------------------------


def _check_fields(*, project: Project, name: str, fields: Any) -> dict[str, Any]:
    errors: dict[str, list[str]] = {}
    if not name or len(name) > NAME_MAX or not NAME_RE.match(name):
        errors["name"] = [
            f"{name!r} is not a valid template name: lower-case letters, digits and '-', "
            f"starting and ending with a letter or digit, at most {NAME_MAX} characters."
        ]
    if not isinstance(fields, dict):
        errors["fields"] = ["The fields must be an object of job fields (kind, image, gpus …)."]
        raise ValidationError(errors)
    unknown = sorted(set(fields) - set(TEMPLATE_FIELDS))
    for key in unknown:
        errors[f"fields.{key}"] = [
            f"A template cannot keep {key!r}; it keeps only: {', '.join(TEMPLATE_FIELDS)}."
        ]
    wrong = {f"fields.{k}": [p] for k, v in fields.items() if (p := _type_problem(k, v))}
    if wrong:  # the rules below assume the shapes a request has
        raise ValidationError({**errors, **wrong})
    clean = {k: v for k, v in fields.items() if k in TEMPLATE_FIELDS and v not in (None, "")}
    result = validate_job_request(
        job_request_from(project=project, data=clean), pool_facts_for_project(project=project)
    )
    for key, messages in result.errors.items():
        errors.setdefault(f"fields.{key}", []).extend(messages)
    if errors:
        raise ValidationError(errors)
    return clean


_INTEGERS = {"gpus", "replicas", "max_runtime_minutes"}


def _type_problem(key: str, value: Any) -> str:
    """The JSON shape a job request takes for each field (as POST /api/v1/jobs/ enforces)."""
    if key not in TEMPLATE_FIELDS or value is None:
        return ""
    if key in _INTEGERS:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return "" if ok else "Must be a whole number."
    if key == "command":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return "" if ok else "Must be a list of strings."
    if key == "env":
        ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
        return "" if ok else "Must be an object of NAME: value strings."
    return "" if isinstance(value, str) else "Must be a string."


def _writable(actor: Any, project: Project) -> None:
    if not can_write(actor, project):
        raise PermissionDenied(f"Your role in project '{project.slug}' cannot change templates.")


def template_create(
    *, actor: Any, project: Project, name: str, fields: dict[str, Any]
) -> JobTemplate:
    """Save a new template; ValidationError ({"name" | "fields.<field>": [...]}) when the name is
    taken or the fields would not make a valid submission, PermissionDenied for a viewer."""
    _writable(actor, project)
    clean = _check_fields(project=project, name=name, fields=fields)
    try:
        with transaction.atomic():
            template = JobTemplate.objects.create(
                project=project, name=name, fields=clean, created_by=actor
            )
            record("template.create", actor=actor, target=template, changes=created({"name": name}))
            return template
    except IntegrityError as exc:
        raise ValidationError(
            {"name": [f"Project {project.slug} already has a template named {name!r}."]}
        ) from exc


def template_update(
    *, actor: Any, template: JobTemplate, name: str | None = None, fields: dict | None = None
) -> JobTemplate:
    """Rename a template and/or replace its fields (validated like a new one)."""
    _writable(actor, template.project)
    new_name = template.name if name is None else name
    new_fields = template.fields if fields is None else fields
    clean = _check_fields(project=template.project, name=new_name, fields=new_fields)
    before = {"name": template.name, "fields": sorted(template.fields)}
    template.name, template.fields = new_name, clean
    try:
        with transaction.atomic():
            template.save(update_fields=["name", "fields", "updated_at"])
            record(
                "template.change",
                actor=actor,
                target=template,
                changes=diff(before, {"name": new_name, "fields": sorted(clean)}),
            )
    except IntegrityError as exc:
        raise ValidationError(
            {"name": [f"Project {template.project.slug} already has a template named {name!r}."]}
        ) from exc
    return template


def template_delete(*, actor: Any, template: JobTemplate) -> None:
    _writable(actor, template.project)
    target = (template._meta.label_lower, template.pk, str(template))
    project, name = template.project, template.name
    with transaction.atomic():
        template.delete()
        record(
            "template.delete",
            actor=actor,
            target=target,
            project=project,
            changes=removed({"name": name}),
        )
