"""Parsing and rendering for the API: the DRF parser and renderer classes in settings.

Imports nothing from DRF's views, so the settings can name these classes without a cycle.
"""

from __future__ import annotations

import logging
from typing import Any

from rest_framework import exceptions
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.renderers import JSONRenderer

logger = logging.getLogger(__name__)

NON_FIELD = "non_field_errors"


# --- request bodies: text the database and the JSON encoder can hold ------------------------------
# Deeper nesting than this is never a valid request (the deepest field, env, is two levels); a
# cap keeps the recursive serializers and the error renderer far from Python's recursion limit.
MAX_BODY_DEPTH = 32


def display_key(key: Any) -> str:
    """A field name safe to echo in an error: lone surrogates and NUL written as escapes."""
    text = str(key).replace("\x00", "\\u0000")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def text_problem(text: str) -> str | None:
    """Why `text` cannot be accepted (stored in PostgreSQL, encoded as UTF-8), or None."""
    if "\x00" in text:
        return "Contains a NUL character (U+0000), which text fields cannot hold."
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "Contains a lone UTF-16 surrogate (such as \\ud800), which is not valid Unicode."
    return None


def check_request_data(data: Any) -> None:
    """Raise a 400 naming the first field whose name or text is not storable Unicode, or that
    nests deeper than MAX_BODY_DEPTH. Iterative, so no input can exhaust the stack here."""
    errors: dict[str, list[str]] = {}
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack and not errors:
        value, path, depth = stack.pop()
        if depth > MAX_BODY_DEPTH:
            errors[path or NON_FIELD] = [f"Nested deeper than {MAX_BODY_DEPTH} levels."]
            break
        if isinstance(value, str):
            problem = text_problem(value)
            if problem:
                errors[path or NON_FIELD] = [problem]
            continue
        if hasattr(value, "lists"):  # a QueryDict from a form body: key → [values]
            items = list(value.lists())
        elif isinstance(value, dict):
            items = list(value.items())
        elif isinstance(value, list | tuple):
            items = list(enumerate(value))
        else:
            continue
        for key, child in items:
            name = display_key(key)
            child_path = f"{path}.{name}" if path else name
            if isinstance(key, str):
                problem = text_problem(key)
                if problem:
                    errors[child_path] = [f"The field name is not valid: {problem}"]
                    break
            if hasattr(value, "lists"):
                stack.extend((item, child_path, depth + 1) for item in child)
            else:
                stack.append((child, child_path, depth + 1))
    if errors:
        raise exceptions.ValidationError(errors)


class PortalJSONParser(JSONParser):
    """JSON, refusing what the stdlib parser cannot nest and text PostgreSQL cannot store."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError(
                f"JSON parse error - nested too deeply (at most {MAX_BODY_DEPTH} levels)."
            ) from None
        check_request_data(data)
        return data


class PortalFormParser(FormParser):
    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        check_request_data(data)
        return data


class PortalMultiPartParser(MultiPartParser):
    def parse(self, stream, media_type=None, parser_context=None):
        parsed = super().parse(stream, media_type, parser_context)
        check_request_data(parsed.data)
        return parsed


class PortalJSONRenderer(JSONRenderer):
    """UTF-8 JSON; text that is not valid Unicode (a lone surrogate echoed back) is written as a
    \\u escape instead of failing the whole answer with a 500."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            logger.warning("answer held text that is not valid Unicode; escaped it")
            self.ensure_ascii = True
            try:
                return super().render(data, accepted_media_type, renderer_context)
            finally:
                self.ensure_ascii = False
