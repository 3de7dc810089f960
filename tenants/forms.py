"""HTML forms of the tenants pages."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model

from tenants.models import Role

# Lifetimes offered for personal API tokens, in days; "" = the site's default
# (PORTAL_TOKEN_TTL_DAYS). Every token expires unless the site disables expiry.
TOKEN_LIFETIMES = [
    ("7", "7 days"),
    ("30", "30 days"),
    ("90", "90 days"),
    ("365", "1 year"),
]


def _lifetime_choices() -> list[tuple[str, str]]:
    days = settings.PORTAL_TOKEN_TTL_DAYS
    default = f"{days} days" if days else "never expires"
    return [("", f"Site default ({default})"), *TOKEN_LIFETIMES]


class TokenCreateForm(forms.Form):
    expires_in_days = forms.ChoiceField(
        choices=_lifetime_choices,
        initial="",
        required=False,
        label="Expires after",
        help_text="Revoke a token as soon as no script uses it.",
    )

    def expires_in(self) -> timedelta | None:
        """The chosen lifetime; None = the site default (see tenants.services.token_create)."""
        days = self.cleaned_data.get("expires_in_days")
        return timedelta(days=int(days)) if days else None


class MemberAddForm(forms.Form):
    user = forms.CharField(
        label="Username or e-mail",
        max_length=254,
        help_text="The person's portal username (shown at the top right of their pages).",
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def clean_user(self):
        username = self.cleaned_data["user"].strip()
        User = get_user_model()
        user = User.objects.filter(**{User.USERNAME_FIELD: username}).first()
        if user is None and "@" in username:
            # People know each other's e-mail more often than their username.
            matches = list(User.objects.filter(email__iexact=username, is_active=True)[:2])
            if len(matches) > 1:
                raise forms.ValidationError(
                    f"Several users have the e-mail '{username}': give the username instead."
                )
            user = matches[0] if matches else None
        if user is None:
            raise forms.ValidationError(f"No user named '{username}'.")
        return user


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
