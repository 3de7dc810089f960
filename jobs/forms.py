"""The HTML submit form: parses text fields into the same request the API takes.

The kind switch decides which fields apply (KIND_FIELDS): the page hides the others, and
`request_data` drops them, so a value left in a hidden field never reaches the validation. Pool
and MIG profile are choices from the pools; a choice the chosen project has no quota for stays
visible but disabled, with the reason in its label.
"""

from __future__ import annotations

import shlex
from typing import Any

from django import forms

from jobs.models import Job, JobKind
from jobs.validation import BACKENDS, DEFAULT_RUNTIME_MINUTES, GANG_MAX, MAX_GPUS_PER_POD, PoolFacts

KIND_LABELS = [
    (JobKind.SINGLE, "Single pod: 1 to 8 whole GPUs on one node"),
    (JobKind.MIG, "MIG slice: a fraction of one GPU (e.g. 1g.10gb)"),
    (JobKind.GANG, "Gang: several pods that start together (distributed training)"),
]
# Fields that apply only to some kinds; every other field applies to all.
KIND_FIELDS = {
    "gpus": (JobKind.SINGLE, JobKind.GANG),
    "mig_profile": (JobKind.MIG,),
    "replicas": (JobKind.GANG,),
    "backend": (JobKind.GANG,),
}
PRIORITY_LABELS = [
    ("high", "High: may preempt lower-priority jobs of the project"),
    ("normal", "Normal"),
    ("low", "Low: runs when nothing else waits; may be preempted"),
]
IMAGE_EXAMPLE = "nvcr.io/nvidia/pytorch:24.08-py3"


class SelectWithReasons(forms.Select):
    """A <select> whose options listed in `reasons` are disabled and say why."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reasons: dict[str, str] = {}

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        reason = self.reasons.get(str(value))
        if reason:
            option["attrs"]["disabled"] = True
            option["label"] = f"{label} (not available: {reason})"
        return option


class JobSubmitForm(forms.Form):
    project = forms.ChoiceField(help_text="The project the job runs in and is counted against.")
    kind = forms.ChoiceField(
        label="What to run", choices=KIND_LABELS, initial=JobKind.SINGLE, widget=forms.RadioSelect
    )
    name = forms.CharField(
        required=False,
        help_text="Lower-case letters, digits and '-'; a name is generated when left empty.",
    )
    image = forms.CharField(
        label="Container image",
        help_text="The image to run, with its tag.",
        widget=forms.TextInput(attrs={"placeholder": IMAGE_EXAMPLE}),
    )
    command = forms.CharField(
        required=False,
        help_text="As in a shell, e.g. torchrun --nproc-per-node=8 train.py --epochs 3. "
        "Empty: the image's own command.",
    )
    env = forms.CharField(
        label="Environment variables",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "EPOCHS=3"}),
        help_text="One NAME=value per line. Tokens and passwords belong in a project credential "
        "(API /api/v1/credentials/), referenced from the job instead of typed here.",
    )
    gpus = forms.IntegerField(
        label="GPUs per pod",
        required=False,
        initial=1,
        help_text=f"Whole GPUs, 1 to {MAX_GPUS_PER_POD}; all on the same node.",
    )
    mig_profile = forms.ChoiceField(
        label="MIG profile",
        required=False,
        widget=SelectWithReasons,
        help_text="The slice size: compute slices (g) and memory (gb) of the GPU.",
    )
    replicas = forms.IntegerField(
        label="Pods",
        required=False,
        initial=2,
        help_text=f"2 to {GANG_MAX} pods; none starts until all of them can.",
    )
    backend = forms.ChoiceField(
        label="Gang scheduler",
        choices=[("", "The project's default"), *[(b, b.capitalize()) for b in BACKENDS]],
        required=False,
    )
    pool = forms.ChoiceField(
        label="GPU pool",
        required=False,
        widget=SelectWithReasons,
        help_text="Where to run; by default any pool the project has quota in.",
    )
    cpu = forms.CharField(
        label="CPU per pod",
        required=False,
        help_text="Cores, e.g. 8 or 500m; empty: the pool's default.",
    )
    memory = forms.CharField(
        label="Memory per pod",
        required=False,
        help_text="e.g. 64Gi; empty: the pool's default.",
    )
    priority = forms.ChoiceField(choices=PRIORITY_LABELS, initial="normal")
    max_runtime_minutes = forms.IntegerField(
        label="Maximum runtime (minutes)",
        required=False,
        initial=DEFAULT_RUNTIME_MINUTES,
        help_text="The job is stopped after this long; up to 10080 (7 days).",
    )

    def __init__(
        self,
        *args: Any,
        projects: list = (),  # type: ignore[assignment]
        pools: list = (),  # type: ignore[assignment]
        facts: list[PoolFacts] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = [(p.slug, f"{p.name} ({p.slug})") for p in projects]
        facts = facts or []
        quota_pools = {f.slug: f for f in facts}
        project = self.selected_project()
        pool_field = self.fields["pool"]
        pool_field.choices = [("", "Any pool of the project")] + [
            (p.slug, f"{p.name} ({p.slug}, {p.gpu_model})") for p in pools
        ]
        pool_field.widget.reasons = {
            p.slug: f"project {project} has no quota in this pool"
            for p in pools
            if p.slug not in quota_pools
        }
        profiles: dict[str, None] = {}
        for pool in pools:
            profiles.update(dict.fromkeys(pool.mig_profiles or ()))
        profile_field = self.fields["mig_profile"]
        profile_field.choices = [("", "Choose a profile")] + [(p, p) for p in profiles]
        quota_profiles = {r for f in facts for r, m in f.maximum.items() if r != "gpu" and m > 0}
        profile_field.widget.reasons = {
            p: f"project {project} has no quota for {p} slices"
            for p in profiles
            if p not in quota_profiles
        }

    def selected_project(self) -> str:
        if self.is_bound:
            return str(self.data.get("project") or "")
        value = self.initial.get("project") or ""
        choices = self.fields["project"].choices
        return str(value or (choices[0][0] if choices else ""))

    def selected_kind(self) -> str:
        source = self.data if self.is_bound else self.initial
        kind = str(source.get("kind") or JobKind.SINGLE)
        return kind if kind in JobKind.values else JobKind.SINGLE

    def fields_with_kinds(self) -> list[tuple[Any, str]]:
        """(bound field, the kinds it applies to as "single gang" or "") in display order."""
        return [(self[name], " ".join(KIND_FIELDS.get(name, ()))) for name in self.fields]

    def clean_command(self) -> list[str]:
        text = self.cleaned_data.get("command") or ""
        try:
            return shlex.split(text)
        except ValueError as exc:
            raise forms.ValidationError(
                f"The command cannot be read: {exc} (check the quotes)."
            ) from exc

    def clean_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for number, line in enumerate((self.cleaned_data.get("env") or "").splitlines(), 1):
            if not line.strip():
                continue
            name, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(f"Line {number} has no '=': write NAME=value.")
            env[name.strip()] = value
        return env

    def clean(self) -> dict:
        # A hidden field (not for this kind) cannot block the submission with its leftovers.
        kind = self.cleaned_data.get("kind")
        for name, kinds in KIND_FIELDS.items():
            if kind not in kinds and self._errors is not None:
                self._errors.pop(name, None)
        return self.cleaned_data

    def request_data(self) -> dict:
        """The API request body for the fields that apply to the chosen kind."""
        data = dict(self.cleaned_data)
        data.pop("project", None)
        kind = data.get("kind")
        for name, kinds in KIND_FIELDS.items():
            if kind not in kinds:
                data.pop(name, None)
        return {k: v for k, v in data.items() if v not in (None, "")} | {
            "command": data.get("command") or [],
            "env": data.get("env") or {},
        }


def initial_from_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Form initial values from request fields (a template's, or a past job's)."""
    initial = {k: v for k, v in fields.items() if v not in (None, "")}
    if isinstance(initial.get("command"), list):
        initial["command"] = shlex.join(initial["command"])
    if isinstance(initial.get("env"), dict):
        initial["env"] = "\n".join(f"{k}={v}" for k, v in initial["env"].items())
    return initial


def fields_of_job(job: Job) -> dict[str, Any]:
    """The request that would submit this job again (without its name)."""
    fields: dict[str, Any] = {
        "project": job.project.slug,
        "kind": job.kind,
        "image": job.image,
        "command": list(job.command or []),
        "env": dict(job.env or {}),
        "pool": job.pool.slug if job.pool_id else "",
        "cpu": job.cpu,
        "memory": job.memory,
        "priority": job.priority,
        "max_runtime_minutes": job.max_runtime_minutes,
    }
    if job.kind == JobKind.MIG:
        fields["mig_profile"] = job.mig_profile
    else:
        fields["gpus"] = job.gpus
    if job.kind == JobKind.GANG:
        fields.update(replicas=job.replicas, backend=job.backend)
    return fields


class SaveTemplateForm(forms.Form):
    template_name = forms.CharField(
        label="Template name",
        max_length=40,
        help_text="Lower-case letters, digits and '-'; saved for everyone in the project.",
    )
