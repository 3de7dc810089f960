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

from jobs.models import JobKind
from jobs.submission import form_advanced
from jobs.validation import BACKENDS, DEFAULT_RUNTIME_MINUTES, GANG_MAX, MAX_GPUS_PER_POD, PoolFacts
from quotas import sharing

# Issue 25: a fourth choice of the form only; it is sent as kind "single" with gpu_fraction.
FRACTION_KIND = "fraction"
KIND_LABELS = [
    (JobKind.SINGLE, "Single pod: 1 to 8 whole GPUs on one node"),
    (JobKind.MIG, "MIG slice: a fraction of one GPU (e.g. 1g.10gb)"),
    (JobKind.GANG, "Gang: several pods that start together (distributed training)"),
    (FRACTION_KIND, "A fraction of a GPU: part of one GPU, shared with other jobs (KAI pools)"),
]
FRACTION_CAVEAT = (
    "The job shares one GPU with other jobs. A fraction is not memory-isolated: KAI Scheduler "
    "counts it against the quota and packs fractions onto a GPU, but nothing stops a job from "
    "using more of the GPU's memory than it asked for, and compute is time-sliced between the "
    "jobs on the GPU. Ask for what the job really uses."
)
BACKEND_LABELS = {"kueue": "Kueue", "volcano": "Volcano", "kai": "KAI Scheduler"}
# Fields that apply only to some kinds; every other field applies to all.
KIND_FIELDS = {
    "gpus": (JobKind.SINGLE, JobKind.GANG),
    "mig_profile": (JobKind.MIG,),
    "replicas": (JobKind.GANG,),
    "backend": (JobKind.GANG,),
    "gpu_fraction": (FRACTION_KIND,),
    "device": (JobKind.SINGLE, JobKind.GANG),
}
PRIORITY_LABELS = [
    ("high", "High: may preempt lower-priority jobs of the project"),
    ("normal", "Normal"),
    ("low", "Low: runs when nothing else waits; may be preempted"),
]
IMAGE_EXAMPLE = "nvcr.io/nvidia/pytorch:24.08-py3"
# Shown folded under "Advanced: data, secrets, sweeps" (issue 12's fields).
ADVANCED_FIELDS = (
    "volumes",
    "shm_size",
    "termination_grace_seconds",
    "resume_from",
    "secret_env",
    "secret_files",
    "sweep",
    "array_count",
    "parallelism",
)


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
    gpu_fraction = forms.DecimalField(
        label="Fraction of one GPU",
        required=False,
        initial="0.5",
        max_digits=4,
        decimal_places=3,
        help_text="e.g. 0.25 or 0.5, a multiple of the pool's step. " + FRACTION_CAVEAT,
    )
    device = forms.CharField(
        label="GPU by its attributes",
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "min_memory=40Gi, architecture=Hopper"}),
        help_text="DRA-managed pools only; empty: any GPU of the pool. KEY=value pairs, "
        "separated by commas: product_name, architecture, min_compute_capability, min_memory.",
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
        choices=[("", "The pool's (or the project's default)")]
        + [(b, BACKEND_LABELS.get(b, b)) for b in BACKENDS],
        required=False,
    )
    pool = forms.ChoiceField(
        label="GPU pool",
        required=False,
        widget=SelectWithReasons,
        help_text="Where to run; by default any exclusive pool the project has quota in (shared "
        "and DRA-managed pools only when chosen here). "
        + sharing.ISOLATION[sharing.EXCLUSIVE]
        + " "
        + sharing.ISOLATION["mig"],
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
    # --- advanced (issue 12) ---
    volumes = forms.MultipleChoiceField(
        label="Data volumes",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Each is mounted at its default path with its access.",
    )
    shm_size = forms.CharField(
        label="/dev/shm size",  # noqa: S108 - a label naming the mount, not a temporary file
        required=False,
        max_length=16,
        help_text="Shared memory, e.g. 8Gi; empty: half the memory, capped by the pool.",
    )
    termination_grace_seconds = forms.IntegerField(
        label="Grace period (seconds)",
        required=False,
        min_value=0,
        help_text="Between SIGTERM and the kill on preemption or cancel; empty: 60.",
    )
    resume_from = forms.ChoiceField(
        label="Resume from",
        required=False,
        help_text="Continue in the checkpoint directory of an earlier, finished job.",
    )
    secret_env = forms.CharField(
        label="Environment from credentials",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "HF_TOKEN=hf/token"}),
    )
    secret_files = forms.CharField(
        label="Credential files",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "gcp:/var/run/gcp"}),
        help_text="One credential:/directory per line: its keys as read-only files there.",
    )
    sweep = forms.CharField(
        label="Parameter sweep",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "lr=0.1,0.01"}),
        help_text="One name=value1,value2 per line; one job per combination, each with "
        "SWEEP_<NAME> set (numbers stay numbers).",
    )
    array_count = forms.IntegerField(
        label="Array: number of copies",
        required=False,
        min_value=1,
        help_text="Instead of a sweep: N identical jobs, each with ARRAY_INDEX 0 to N-1.",
    )
    parallelism = forms.IntegerField(
        label="Parallelism",
        required=False,
        min_value=1,
        help_text="With a sweep or an array: at most this many of its jobs at once.",
    )

    def __init__(
        self,
        *args: Any,
        projects: list = (),  # type: ignore[assignment]
        pools: list = (),  # type: ignore[assignment]
        facts: list[PoolFacts] | None = None,
        volumes: list | None = None,
        credentials: list | None = None,
        resumable: list | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._advanced_choices(volumes or [], credentials or [], resumable)
        self.fields["project"].choices = [(p.slug, f"{p.name} ({p.slug})") for p in projects]
        facts = facts or []
        if not any(f.fractions_allowed for f in facts):
            # Offered only where a pool of the project allows fractions.
            self.fields["kind"].choices = [c for c in KIND_LABELS if c[0] != FRACTION_KIND]
        quota_pools = {f.slug: f for f in facts}
        project = self.selected_project()
        pool_field = self.fields["pool"]
        pool_field.choices = [("", "Any pool of the project")] + [
            # Issue 26: a shared or DRA pool says, in one sentence, what isolation it gives
            # (the field's help says it for exclusive GPUs and MIG).
            (
                p.slug,
                f"{p.name} ({p.slug}, {p.gpu_model})"
                + (f" — {p.isolation}" if p.is_shared or p.dra_managed else ""),
            )
            for p in pools
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

    def _advanced_choices(self, volumes: list, credentials: list, resumable: list | None) -> None:
        """Volumes (VolumeFacts), credentials and finished jobs of the selected project;
        resumable None: the project has no checkpoint volume, so no "resume from"."""
        self.fields["volumes"].choices = [
            (
                v.name,
                f"{v.name}: {v.default_path}, {'read-only' if v.read_only else 'read-write'}"
                + (" (checkpoint volume)" if v.is_checkpoint else ""),
            )
            for v in volumes
        ]
        if not volumes:
            self.fields["volumes"].help_text = "The project has no data volumes."
        if resumable is None:
            del self.fields["resume_from"]
        else:
            self.fields["resume_from"].choices = [("", "Start afresh")] + [
                (str(j.pk), f"{j.name} ({j.pk}, {j.state})") for j in resumable
            ]
        keys = [f"{c.name}/{k}" for c in credentials if c.kind == "secret" for k in (c.keys or [])]
        self.fields["secret_env"].help_text = (
            "One NAME=credential/key per line; the value is read from the project's credential. "
            + (f"Choices: {', '.join(keys)}." if keys else "The project has no credentials.")
        )

    def advanced_fields(self) -> list:
        return [self[name] for name in ADVANCED_FIELDS if name in self.fields]

    def advanced_open(self) -> bool:
        """Unfold the advanced fieldset when one of its fields has a value or an error."""
        source = self.data if self.is_bound else self.initial
        return any(self[n].errors or source.get(n) for n in ADVANCED_FIELDS if n in self.fields)

    def selected_project(self) -> str:
        if self.is_bound:
            return str(self.data.get("project") or "")
        value = self.initial.get("project") or ""
        choices = self.fields["project"].choices
        return str(value or (choices[0][0] if choices else ""))

    def selected_kind(self) -> str:
        source = self.data if self.is_bound else self.initial
        kind = str(source.get("kind") or JobKind.SINGLE)
        return kind if kind in (*JobKind.values, FRACTION_KIND) else JobKind.SINGLE

    def fields_with_kinds(self) -> list[tuple[Any, str]]:
        """(bound field, the kinds it applies to as "single gang" or "") in display order."""
        return [
            (self[name], " ".join(KIND_FIELDS.get(name, ())))
            for name in self.fields
            if name not in ADVANCED_FIELDS
        ]

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

    def _parsed(self, name: str, parse: Any) -> Any:
        try:
            return parse(self.cleaned_data.get(name) or "")
        except form_advanced.TextError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean_device(self) -> dict:
        return self._parsed("device", form_advanced.parse_device)

    def clean_secret_env(self) -> dict:
        return self._parsed("secret_env", form_advanced.parse_secret_env)

    def clean_secret_files(self) -> list:
        return self._parsed("secret_files", form_advanced.parse_secret_files)

    def clean_sweep(self) -> dict:
        return self._parsed("sweep", form_advanced.parse_sweep)

    def clean(self) -> dict:
        both = set(self.cleaned_data.get("env") or {}) & set(
            self.cleaned_data.get("secret_env") or {}
        )
        if both:
            self.add_error(
                "secret_env", f"{', '.join(sorted(both))}: also set as a plain value above."
            )
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
        advanced = {name: data.pop(name, None) for name in ADVANCED_FIELDS}
        kind = data.get("kind")
        for name, kinds in KIND_FIELDS.items():
            if kind not in kinds:
                data.pop(name, None)
        if kind == FRACTION_KIND:
            data["kind"] = JobKind.SINGLE
            if data.get("gpu_fraction") is not None:
                data["gpu_fraction"] = float(data["gpu_fraction"])
        body = {k: v for k, v in data.items() if v not in (None, "", {})} | {
            "command": data.get("command") or [],
            "env": {**(data.get("env") or {}), **(advanced["secret_env"] or {})},
        }
        return body | _advanced_request(advanced)

    def add_api_errors(self, errors: dict) -> None:
        """The API-side validation's errors ({key: [messages]}) next to the matching fields."""
        volumes = list(self.cleaned_data.get("volumes") or [])
        secret_env = set(self.cleaned_data.get("secret_env") or {})
        for key, messages_ in errors.items():
            for message in messages_:
                field, text = form_advanced.form_field_for(
                    key, str(message), volumes=volumes, secret_env=secret_env
                )
                self.add_error(field if field in self.fields else None, text)


def _advanced_request(advanced: dict[str, Any]) -> dict[str, Any]:
    """The API fields of the advanced part, only those filled in."""
    body: dict[str, Any] = {}
    if advanced["volumes"]:
        # Path and access left out: the API takes the volume's defaults.
        body["mounts"] = [{"volume": name} for name in advanced["volumes"]]
    if advanced["shm_size"]:
        body["shm_size"] = advanced["shm_size"]
    if advanced["termination_grace_seconds"] is not None:
        body["termination_grace_seconds"] = advanced["termination_grace_seconds"]
    if advanced["resume_from"]:
        body["resume_from"] = int(advanced["resume_from"])
    if advanced["secret_files"]:
        body["secret_files"] = advanced["secret_files"]
    parallelism = advanced["parallelism"]
    if advanced["sweep"]:
        body["sweep"] = advanced["sweep"]
        if advanced["array_count"] is not None:
            body["array"] = {"count": advanced["array_count"]}  # the API says: not both
        if parallelism is not None:
            body["parallelism"] = parallelism
    elif advanced["array_count"] is not None:
        body["array"] = {"count": advanced["array_count"]}
        if parallelism is not None:
            body["array"]["parallelism"] = parallelism
    elif parallelism is not None:
        body["parallelism"] = parallelism  # alone: the API says what it goes with
    return body


def initial_from_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Form initial values from request fields (a template's, or a past job's)."""
    initial = {k: v for k, v in fields.items() if v not in (None, "")}
    if initial.get("gpu_fraction") is not None and initial.get("kind") == JobKind.SINGLE:
        initial["kind"] = FRACTION_KIND
    if isinstance(initial.get("command"), list):
        initial["command"] = shlex.join(initial["command"])
    if isinstance(initial.get("env"), dict):
        plain, refs = form_advanced.env_reference_text(initial["env"])
        initial["env"] = "\n".join(f"{k}={v}" for k, v in plain.items())
        if refs:
            initial["secret_env"] = refs
    if isinstance(initial.get("mounts"), list):
        initial["volumes"] = [m.get("volume") for m in initial.pop("mounts") if isinstance(m, dict)]
    if isinstance(initial.get("secret_files"), list):
        files = [f for f in initial["secret_files"] if isinstance(f, dict)]
        initial["secret_files"] = "\n".join(f"{f.get('secret')}:{f.get('path')}" for f in files)
    if isinstance(initial.get("device"), dict):
        initial["device"] = form_advanced.device_text(initial["device"])
    if isinstance(initial.get("sweep"), dict):
        initial["sweep"] = form_advanced.sweep_text(initial["sweep"])
    if isinstance(initial.get("array"), dict):
        array = initial.pop("array")
        initial["array_count"] = array.get("count")
        if array.get("parallelism") is not None:
            initial["parallelism"] = array["parallelism"]
    return initial


class SaveTemplateForm(forms.Form):
    template_name = forms.CharField(
        label="Template name",
        max_length=40,
        help_text="Lower-case letters, digits and '-'; saved for everyone in the project.",
    )
