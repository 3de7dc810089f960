from django import forms

from workspaces.models import WorkspaceKind


class WorkspaceForm(forms.Form):
    project = forms.ChoiceField()
    kind = forms.ChoiceField(label="Kind")
    shape = forms.CharField(
        required=False,
        max_length=40,
        help_text="Empty: the kind's default. gpu:N, mig:PROFILE (e.g. mig:1g.10gb).",
    )
    name = forms.CharField(required=False, max_length=30, help_text="Empty: a generated name.")
    volumes = forms.CharField(
        required=False,
        help_text="Data volumes of the project to mount, comma-separated (at their own paths).",
    )
    shared = forms.BooleanField(required=False, label="Let the project's members open it too")

    def __init__(self, *args, projects, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = [(p.slug, f"{p.name} ({p.slug})") for p in projects]
        self.fields["kind"].choices = [
            (k.slug, k.name) for k in WorkspaceKind.objects.filter(enabled=True)
        ]

    def mounts(self) -> list[dict[str, str]]:
        names = [n.strip() for n in (self.cleaned_data.get("volumes") or "").split(",")]
        return [{"volume": n} for n in names if n]
