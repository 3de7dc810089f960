"""HTML forms of the tenants pages."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib.auth import get_user_model

from tenants.models import Role

# Lifetimes offered for personal API tokens, in days ("" = never expires).
TOKEN_LIFETIMES = [
    ("30", "30 days"),
    ("90", "90 days"),
    ("365", "1 year"),
    ("", "Never expires"),
]


class TokenCreateForm(forms.Form):
    expires_in_days = forms.ChoiceField(
        choices=TOKEN_LIFETIMES,
        initial="90",
        required=False,
        label="Expires after",
        help_text="A token that never expires is convenient for scripts; revoke it when unused.",
    )

    def expires_in(self) -> timedelta | None:
        days = self.cleaned_data.get("expires_in_days")
        return timedelta(days=int(days)) if days else None


class MemberAddForm(forms.Form):
    user = forms.CharField(label="Username", max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def clean_user(self):
        username = self.cleaned_data["user"].strip()
        User = get_user_model()
        user = User.objects.filter(**{User.USERNAME_FIELD: username}).first()
        if user is None:
            raise forms.ValidationError(f"No user named '{username}'.")
        return user


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
