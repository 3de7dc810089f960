"""Print a new personal API token for a user, for scripts: `manage.py issue_token USERNAME`."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.services import token_create


class Command(BaseCommand):
    help = (
        "Issue a personal API token for USERNAME and print it (only once: just a hash is "
        "stored). Use it as 'Authorization: Token <token>'."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--expires-in-days",
            type=int,
            default=None,
            help="Days until the token expires (default: PORTAL_TOKEN_TTL_DAYS, 90).",
        )

    def handle(self, *args, username: str, expires_in_days: int | None, **options) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: username})
        except User.DoesNotExist:
            raise CommandError(f"No user named '{username}'.") from None
        if not user.is_active:
            raise CommandError(f"User '{username}' is deactivated; activate them first.")
        if expires_in_days is not None and expires_in_days < 1:
            raise CommandError("--expires-in-days must be at least 1.")
        expires_in = timedelta(days=expires_in_days) if expires_in_days else None
        token, secret = token_create(actor=user, expires_in=expires_in)
        # The secret alone on stdout (for `TOKEN=$(manage.py issue_token ...)`); the expiry
        # on stderr, where a person sees it.
        self.stdout.write(secret)
        expiry = f"expires {token.expiry:%Y-%m-%d %H:%M} UTC" if token.expiry else "never expires"
        self.stderr.write(f"Token {token.token_key}… for {username} {expiry}.")
