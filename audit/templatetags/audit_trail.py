"""{% project_trail project %}: the project's audit trail on the project page, for its admins and
staff only (anyone else sees nothing), newest first, paged with ?trail_page=N."""

from __future__ import annotations

from django import template

from audit import selectors
from portal.pagination import EstimatedCountPaginator

register = template.Library()

TRAIL_PAGE_SIZE = 25


@register.inclusion_tag("audit/project_trail.html", takes_context=True)
def project_trail(context, project) -> dict:
    request = context["request"]
    if not selectors.project_trail_readable(request.user, project):
        return {"readable": False}
    paginator = EstimatedCountPaginator(selectors.project_trail(project), TRAIL_PAGE_SIZE)
    # A bad page number shows the first page (get_page), never an error on the project page.
    page = paginator.get_page(request.GET.get("trail_page"))
    return {"readable": True, "project": project, "page": page}


@register.filter
def change_text(value) -> str:
    """[old, new] as "old → new" ("–" for none); anything else as it is."""
    if isinstance(value, list) and len(value) == 2:
        old, new = ("–" if v is None else v for v in value)
        return f"{old} → {new}"
    return str(value)
