"""Forms of the project page's governance sections and the overview's decisions. They parse
input only; the services check it (their errors are put on the fields)."""

from django import forms


class MemberLimitForm(forms.Form):
    pool = forms.CharField(max_length=40, help_text="A pool the project has a quota in.")
    user = forms.CharField(
        max_length=150, required=False, help_text="A member's username; empty: every member."
    )
    max_gpus = forms.IntegerField(label="GPUs at once", help_text="0 or more.")


class QuotaRequestForm(forms.Form):
    pool = forms.CharField(max_length=40)
    gpus = forms.IntegerField(label="More GPUs", help_text="Whole GPUs above the quota.")
    until = forms.DateField(
        label="Until (last day)", widget=forms.DateInput(attrs={"type": "date"})
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("refuse", "Refuse")])
    note = forms.CharField(required=False, max_length=2000)
