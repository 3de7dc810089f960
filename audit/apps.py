from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit trail"

    def ready(self) -> None:
        # Logins, failed logins, logouts and the admin's own log entries become audit rows.
        from audit import receivers

        receivers.connect()
