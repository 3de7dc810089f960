"""API rate limits: per personal token, per user, and per client address without a login.

DRF's throttles, counting in the shared cache (Redis in production, see CACHES in
portal.settings), with their rates read from the settings at every request, so a deployment
(or a test) changes them without restarting anything. An answer over a limit is DRF's 429 with
`Retry-After`. A cache that cannot be reached lets the request through (logged): rate limiting
protects the portal, it must not take the API down with it.
"""

import logging

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

log = logging.getLogger(__name__)

OFF = "off"


class _SettingsRateThrottle(SimpleRateThrottle):
    setting = ""

    def get_rate(self) -> str | None:
        rate = str(getattr(settings, self.setting, "") or "").strip()
        return None if rate.lower() in ("", OFF) else rate

    def allow_request(self, request, view) -> bool:
        try:
            return super().allow_request(request, view)
        except Exception as exc:  # the cache client raises many types; fail open
            log.warning("rate limit %s not checked (cache unavailable): %s", self.scope, exc)
            return True


class TokenRateThrottle(_SettingsRateThrottle):
    """Each personal API token on its own: a runaway script is stopped before it uses up its
    owner's whole per-user allowance."""

    scope = "token"
    setting = "PORTAL_API_RATE_TOKEN"

    def get_cache_key(self, request, view) -> str | None:
        token_key = getattr(request.auth, "token_key", None)
        if not token_key:
            return None  # a session, or no login: the other throttles count it
        return self.cache_format % {"scope": self.scope, "ident": token_key}


class UserRateThrottle(_SettingsRateThrottle):
    """All of one user's requests together: every token and the browser session."""

    scope = "user"
    setting = "PORTAL_API_RATE_USER"

    def get_cache_key(self, request, view) -> str | None:
        if not request.user or not request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


class AnonRateThrottle(_SettingsRateThrottle):
    """Requests without a login, per client address."""

    scope = "anon"
    setting = "PORTAL_API_RATE_ANON"

    def get_cache_key(self, request, view) -> str | None:
        if request.user and request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
