"""manage.py seed_demo: create the demo organisation (idempotent) and print its logins."""

from django.core.management.base import BaseCommand

from tenants.management.demo_org import seed_demo_org


class Command(BaseCommand):
    help = "Create the demo departments, projects, GPU pools, quotas and users (safe to re-run)."

    def handle(self, *args, **options) -> None:
        result = seed_demo_org()
        created = ", ".join(f"{n} {kind}" for kind, n in result.created.items() if n)
        self.stdout.write(
            f"Demo organisation ready ({'created ' + created if created else 'nothing to create'})."
        )
        self.stdout.write("Demo logins (username / password — what):")
        width = max(len(username) for username, _, _ in result.logins)
        for username, password, what in result.logins:
            self.stdout.write(f"  {username:<{width}}  {password:<20} {what}")
