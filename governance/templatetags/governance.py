"""{% project_governance project %} on the project page and {% pending_quota_requests %} on the
staff overview: each section reads its own data, so the pages that show them need no change."""

from django import template

from governance import selectors
from governance.forms import MemberLimitForm, QuotaRequestForm

register = template.Library()


@register.inclusion_tag("governance/partials/project_sections.html", takes_context=True)
def project_governance(context, project):
    request = context["request"]
    section = selectors.section_context(user=request.user, project=project)
    section.update(
        request=request,
        csrf_token=context.get("csrf_token"),
        limit_form=MemberLimitForm(),
        request_form=QuotaRequestForm(),
    )
    return section


@register.inclusion_tag("governance/partials/pending_requests.html", takes_context=True)
def pending_quota_requests(context):
    return {
        "pending": list(selectors.pending_quota_requests()[:100]),
        "csrf_token": context.get("csrf_token"),
    }
