import logging
import re

from django.apps import AppConfig

_TOKEN_RE = re.compile(r"([?&]token=)[^&\s\"]+")


class RedactWorkspaceTokens(logging.Filter):
    """httpx logs each request's URL at INFO; through the API server the workspace token rides
    in the query (workspaces.launch), so it is masked before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "token=" in message:
            record.msg, record.args = _TOKEN_RE.sub(r"\1(hidden)", message), ()
        return True


class WorkspacesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "workspaces"
    verbose_name = "Interactive workspaces"

    def ready(self) -> None:
        logging.getLogger("httpx").addFilter(RedactWorkspaceTokens())
