"""Keeping a job's env values away from people who may not read them. Pure functions.

Plain env values can hold credentials (the safe way is a reference to a project credential,
jobs.secret_refs, which holds no value and is shown to everyone in the project). Project members
and admins (and staff) see plain values; viewers see the names only, in the API, on the job page
and in the rendered manifests. Messages the cluster sends back (which can quote an invalid value)
are scrubbed before they become a job's state message or event.
"""

from __future__ import annotations

import copy
from typing import Any

HIDDEN = "(hidden)"
# A value this short is replaced only where quoted ("x"), so that hiding "1" does not garble
# every digit of a message.
_RAW_REPLACE_MIN = 6


def hidden_env(env: dict[str, Any]) -> dict[str, Any]:
    """The names of the variables, their values withheld (null). A secret reference
    ({"secret": ..., "key": ...}) holds no value and is kept."""
    return {name: (value if isinstance(value, dict) else None) for name, value in env.items()}


def redact_manifests(manifests: list[dict[str, Any]], env: dict[str, Any]) -> list[dict[str, Any]]:
    """A copy of the manifests with every user env value replaced by HIDDEN."""
    names = set(env)
    redacted = copy.deepcopy(manifests)
    stack: list[Any] = [redacted]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("name") in names and "value" in node and set(node) <= {"name", "value"}:
                node["value"] = HIDDEN
                continue
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return redacted


def redact_text(text: str, env: dict[str, Any]) -> str:
    """`text` with the env values in it replaced by HIDDEN (longest first)."""
    values = sorted({v for v in env.values() if isinstance(v, str) and v}, key=len, reverse=True)
    for value in values:
        if len(value) >= _RAW_REPLACE_MIN:
            text = text.replace(value, HIDDEN)
        else:
            text = text.replace(f'"{value}"', f'"{HIDDEN}"')
    return text
