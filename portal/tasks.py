"""Celery tasks of the portal's own infrastructure."""

from celery import shared_task


@shared_task(acks_late=True, ignore_result=True)
def analyze_small_tables() -> list[str]:
    """Beat, every PORTAL_ANALYZE_SECONDS: keep the small tables' planner statistics current
    (see portal.dbstats)."""
    from portal.dbstats import analyze_small_tables as run

    return run()
