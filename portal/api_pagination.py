"""API pagination for lists that grow without bound (jobs): an estimated count above a cap,
and `?cursor=` keyset pages for scripts. The mechanics are in portal.pagination."""

from __future__ import annotations

from django.core.paginator import InvalidPage
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from portal.api import PortalPagination, _positive_int
from portal.pagination import EstimatedCountPaginator, InvalidCursor, KeysetCursor, keyset_page


class EstimatedCountPagination(PortalPagination):
    """?page=N as everywhere, with `count` exact up to a cap and the planner's estimate above it
    (`count_is_estimate`: true); or ?cursor= (empty for the first page), whose answers carry
    only `next` and `results`: each page starts after the last row of the one before, at the
    cost of page 1 however deep. The view's queryset must be ordered by -created_at, -id."""

    django_paginator_class = EstimatedCountPaginator
    cursor_query_param = "cursor"

    def paginate_queryset(self, queryset, request, view=None):
        self.request = request
        self.next_cursor = None
        self.cursor_mode = self.cursor_query_param in request.query_params
        page_size = self.get_page_size(request)
        if self.cursor_mode:
            return self._cursor_page(queryset, request, page_size)
        raw = request.query_params.get(self.page_query_param)
        if raw is not None and raw not in self.last_page_strings and _positive_int(raw) is None:
            raise exceptions.ValidationError(
                {self.page_query_param: [f"{raw!r} is not a page number: use 1, 2, … or 'last'."]}
            )
        paginator = self.django_paginator_class(queryset, page_size)
        number: int | str = raw or 1
        if raw in self.last_page_strings:
            paginator.exact_count()  # asked for by name: the true last page, at a full COUNT
            number = paginator.num_pages
        try:
            self.page = paginator.page(number)
        except InvalidPage:
            raise exceptions.ValidationError(
                {
                    self.page_query_param: [
                        f"Page {raw} does not exist; the last page is "
                        f"{paginator.num_pages_display}."
                    ]
                }
            ) from None
        return list(self.page)

    def _cursor_page(self, queryset, request, page_size: int) -> list:
        if self.page_query_param in request.query_params:
            raise exceptions.ValidationError(
                {self.cursor_query_param: ["Use either ?cursor= or ?page=, not both."]}
            )
        raw = request.query_params[self.cursor_query_param]
        try:
            cursor = KeysetCursor.decode(raw) if raw else None
        except InvalidCursor:
            raise exceptions.ValidationError(
                {
                    self.cursor_query_param: [
                        "Not a cursor from this list: start with an empty ?cursor= and follow "
                        "each answer's `next`."
                    ]
                }
            ) from None
        rows, self.next_cursor = keyset_page(queryset, cursor=cursor, size=page_size)
        return rows

    def get_paginated_response(self, data):
        if self.cursor_mode:
            return Response({"next": self._next_cursor_link(), "previous": None, "results": data})
        return Response(
            {
                "count": self.page.paginator.count,
                "count_is_estimate": self.page.paginator.count_is_estimate,
                "next": self.get_next_link(),
                "previous": self.get_previous_link(),
                "results": data,
            }
        )

    def _next_cursor_link(self) -> str | None:
        if self.next_cursor is None:
            return None
        url = remove_query_param(self.request.build_absolute_uri(), self.page_query_param)
        return replace_query_param(url, self.cursor_query_param, self.next_cursor.encode())

    def get_paginated_response_schema(self, schema):
        answer = super().get_paginated_response_schema(schema)
        answer["required"] = ["results"]
        answer["properties"]["count"]["description"] = (
            "Number of results; the planner's estimate when count_is_estimate. Absent from "
            "?cursor= answers."
        )
        answer["properties"]["count_is_estimate"] = {
            "type": "boolean",
            "description": "True when count is an estimate (a large list), shown as 'about N'.",
        }
        return answer

    def get_schema_operation_parameters(self, view):
        return [
            *super().get_schema_operation_parameters(view),
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "Keyset pagination for walking the whole list: empty for the "
                "first page, then each answer's `next`. Not combinable with page.",
                "schema": {"type": "string"},
            },
        ]
