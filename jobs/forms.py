"""The HTML submit form: parses text fields into the same request the API takes."""

import shlex

from django import forms

from jobs.models import JobKind
from jobs.validation import BACKENDS, PRIORITIES


class JobSubmitForm(forms.Form):
    project = forms.ChoiceField(help_text="The project the job runs in.")
    name = forms.CharField(required=False, help_text="Optional; generated when empty.")
    kind = forms.ChoiceField(choices=JobKind.choices, initial=JobKind.SINGLE)
    image = forms.CharField(initial="nvcr.io/nvidia/pytorch:24.08-py3")
    command = forms.CharField(
        required=False,
        help_text="As in a shell, e.g. torchrun --nproc-per-node=8 train.py --epochs 3",
    )
    env = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="NAME=value per line. Tokens and passwords belong in a project credential "
        "(API /api/v1/credentials/), referenced from the job instead of typed here.",
    )
    gpus = forms.IntegerField(required=False, initial=1, help_text="Whole GPUs per pod (1–8).")
    mig_profile = forms.CharField(required=False, help_text="MIG jobs only, e.g. 1g.10gb.")
    replicas = forms.IntegerField(required=False, help_text="Gang jobs only: 2–64 pods.")
    pool = forms.CharField(required=False, help_text="Optional pool slug; any of the project's.")
    cpu = forms.CharField(required=False, help_text="Per pod; the pool's default when empty.")
    memory = forms.CharField(required=False, help_text="Per pod, e.g. 64Gi.")
    priority = forms.ChoiceField(choices=[(p, p) for p in PRIORITIES], initial="normal")
    max_runtime_minutes = forms.IntegerField(required=False, initial=24 * 60)
    backend = forms.ChoiceField(
        choices=[("", "project default"), *[(b, b) for b in BACKENDS]], required=False
    )

    def __init__(self, *args, projects=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = [(p.slug, f"{p.name} ({p.slug})") for p in projects]

    def clean_command(self) -> list[str]:
        text = self.cleaned_data.get("command") or ""
        try:
            return shlex.split(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Cannot parse the command: {exc}.") from exc

    def clean_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for number, line in enumerate((self.cleaned_data.get("env") or "").splitlines(), 1):
            if not line.strip():
                continue
            name, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(f"Line {number}: expected NAME=value.")
            env[name.strip()] = value
        return env

    def request_data(self) -> dict:
        data = dict(self.cleaned_data)
        data.pop("project")
        return {k: v for k, v in data.items() if v not in (None, "")} | {
            "command": data["command"],
            "env": data["env"],
        }
