"""The live stream behind the job list, the job page and the project page (server-sent events).

GET /jobs/live/               every project the user belongs to (all for staff)
GET /jobs/live/?project=SLUG  one project (404 unless the user belongs to it)
GET /jobs/live/?job=ID        one job (404 unless the user may see it)

Without pub/sub configured the answer is 204, which tells EventSource not to reconnect: the
page's script then polls instead.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import connections
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse

from jobs.selectors import job_list_visible_to
from portal import live
from tenants.selectors import project_list_visible_to


def _subscriber_for(user, project: str | None, job: str | None) -> live.Subscriber:
    """Who may hear what, decided once when the stream opens (sync: it queries the database)."""
    if job:
        if not job.isdigit():
            raise Http404("No such job.")
        found = (
            job_list_visible_to(user=user)
            .filter(pk=int(job))
            .values_list("project__slug", flat=True)
        )
        slug = next(iter(found), None)
        if slug is None:
            raise Http404("No such job.")
        return live.Subscriber(projects=frozenset({slug}), job_id=int(job))
    visible = project_list_visible_to(user=user)
    if project:
        if not visible.filter(slug=project).exists():
            raise Http404("No such project.")
        return live.Subscriber(projects=frozenset({project}))
    if user.is_staff:
        return live.Subscriber(projects=None)
    return live.Subscriber(projects=frozenset(visible.values_list("slug", flat=True)))


async def job_stream(request: HttpRequest) -> HttpResponse:
    user = await request.auser()
    if not user.is_authenticated:
        return HttpResponse("Sign in first.", status=401, content_type="text/plain")
    subscriber = await sync_to_async(_subscriber_for)(
        user, request.GET.get("project"), request.GET.get("job")
    )
    # A stream stays open for hours and never queries again: give its database connection back
    # now (Django would only close it when the response ends; 1,000 pages would exhaust the
    # server's connections). Runs in this request's thread, which holds the connection.
    await sync_to_async(connections.close_all)()
    hub = live.hub()
    if hub is None:
        return HttpResponse(status=204)
    response = StreamingHttpResponse(
        live.event_stream(hub, subscriber), content_type="text/event-stream"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass events through unbuffered
    return response
