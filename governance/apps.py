from django.apps import AppConfig


class GovernanceConfig(AppConfig):
    """Rules over how a project's GPUs are shared: per-member GPU limits inside a project and
    temporary quota requests (see governance/models.py)."""

    name = "governance"
