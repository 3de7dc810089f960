"""Label and field selectors, parsed as kube-apiserver parses them."""

from __future__ import annotations

import re

from kubesim.api import errors

# (key, operator, values) with operator one of "=", "!=", "in", "notin", "exists", "!exists"
Requirement = tuple[str, str, tuple[str, ...]]

_TOKEN_RE = re.compile(r"\s*(!=|==|=|\(|\)|,|!|[^\s!=(),]+)")
_LABEL_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _tokens(text: str) -> list[str]:
    tokens = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN_RE.match(text, pos)
        if not match:
            raise errors.bad_request(f"unable to parse requirement: {text!r}")
        tokens.append(match.group(1))
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return tokens


def _check_key(key: str, text: str) -> None:
    if not _LABEL_KEY_RE.match(key) or len(key.rpartition("/")[2]) > 63:
        raise errors.bad_request(
            f'unable to parse requirement: <nil>: Invalid value: "{key}": name part must consist '
            f"of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            f"alphanumeric character (selector {text!r})"
        )


def _check_value(value: str, text: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE_RE.match(value):
        raise errors.bad_request(
            f'unable to parse requirement: values[0][{value}]: Invalid value: "{value}": a valid '
            f"label must be an empty string or consist of alphanumeric characters, '-', '_' or "
            f"'.' (selector {text!r})"
        )


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse 'a=b,c!=d,e in (x,y),f notin (z),g,!h'."""
    if not text or not text.strip():
        return []
    tokens = _tokens(text)
    reqs: list[Requirement] = []
    i = 0
    n = len(tokens)

    def expect_end_of_requirement() -> None:
        if i < n and tokens[i] != ",":
            raise errors.bad_request(
                f"unable to parse requirement: found '{tokens[i]}', "
                f"expected: ',' (selector {text!r})"
            )

    while i < n:
        tok = tokens[i]
        if tok == "!":
            if i + 1 >= n:
                raise errors.bad_request(f"unable to parse requirement: {text!r}")
            key = tokens[i + 1]
            _check_key(key, text)
            reqs.append((key, "!exists", ()))
            i += 2
        else:
            key = tok
            _check_key(key, text)
            i += 1
            if i >= n or tokens[i] == ",":
                reqs.append((key, "exists", ()))
            elif tokens[i] in ("=", "==", "!="):
                op = "!=" if tokens[i] == "!=" else "="
                i += 1
                value = ""
                if i < n and tokens[i] != ",":
                    value = tokens[i]
                    i += 1
                _check_value(value, text)
                reqs.append((key, op, (value,)))
            elif tokens[i].lower() in ("in", "notin"):
                op = tokens[i].lower()
                i += 1
                if i >= n or tokens[i] != "(":
                    raise errors.bad_request(
                        f"unable to parse requirement: found '{tokens[i] if i < n else ''}', "
                        f"expected: '(' (selector {text!r})"
                    )
                i += 1
                values: list[str] = []
                while i < n and tokens[i] != ")":
                    if tokens[i] != ",":
                        _check_value(tokens[i], text)
                        values.append(tokens[i])
                    i += 1
                if i >= n:
                    raise errors.bad_request(
                        f"unable to parse requirement: found '', expected: ')' (selector {text!r})"
                    )
                i += 1
                reqs.append((key, op, tuple(values)))
            else:
                raise errors.bad_request(
                    f"unable to parse requirement: found '{tokens[i]}', expected: "
                    f"'=', '!=', '==', 'in', notin' (selector {text!r})"
                )
        expect_end_of_requirement()
        if i < n:
            i += 1  # the comma
    return reqs


def label_selector_from_dict(selector: dict | None) -> list[Requirement]:
    """metav1.LabelSelector (matchLabels + matchExpressions) as requirements."""
    if not selector:
        return []
    reqs: list[Requirement] = [
        (k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()
    ]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in selector.get("matchExpressions") or []:
        op = ops.get(expr.get("operator"))
        if op is None:
            raise errors.bad_request(
                f"{expr.get('operator')!r} is not a valid label selector operator"
            )
        reqs.append((expr["key"], op, tuple(expr.get("values") or ())))
    return reqs


def to_requirements(selector: str | dict | list | None) -> list[Requirement]:
    if selector is None:
        return []
    if isinstance(selector, str):
        return parse_label_selector(selector)
    if isinstance(selector, dict):
        if "matchLabels" in selector or "matchExpressions" in selector:
            return label_selector_from_dict(selector)
        return [(k, "=", (str(v),)) for k, v in selector.items()]
    return list(selector)


def labels_match(reqs: list[Requirement], labels: dict | None) -> bool:
    labels = labels or {}
    for key, op, values in reqs:
        if op == "=":
            if labels.get(key) != values[0]:
                return False
        elif op == "!=":
            if labels.get(key) == values[0]:
                return False
        elif op == "in":
            if key not in labels or labels[key] not in values:
                return False
        elif op == "notin":
            if key in labels and labels[key] in values:
                return False
        elif op == "exists":
            if key not in labels:
                return False
        elif op == "!exists" and key in labels:
            return False
    return True


def equality_index(reqs: list[Requirement]) -> tuple[str, str] | None:
    """The first key=value requirement, usable to narrow candidates through a label index."""
    for key, op, values in reqs:
        if op == "=":
            return key, values[0]
    return None


# field selectors ---------------------------------------------------------------------------
FieldRequirement = tuple[str, str, str]  # (field path "metadata.name", "=" | "!=", value)

BASE_FIELDS = ("metadata.name", "metadata.namespace")
BUILTIN_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    ("", "Event"): (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    ("events.k8s.io", "Event"): (
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "reason",
        "type",
        "reportingController",
    ),
    ("", "Node"): ("spec.unschedulable",),
    ("", "Namespace"): ("status.phase",),
    ("", "Secret"): ("type",),
    ("batch", "Job"): ("status.successful",),
    ("apps", "ReplicaSet"): ("status.replicas",),
}


def parse_field_selector(text: str | None) -> list[FieldRequirement]:
    if not text or not text.strip():
        return []
    reqs: list[FieldRequirement] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "!=" in part:
            key, _, value = part.partition("!=")
            op = "!="
        elif "==" in part:
            key, _, value = part.partition("==")
            op = "="
        elif "=" in part:
            key, _, value = part.partition("=")
            op = "="
        else:
            raise errors.bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        reqs.append((key.strip(), op, value.strip()))
    return reqs


def field_value(obj: dict, path: str) -> str:
    node = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
        if node is None:
            return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    if isinstance(node, dict | list):
        return ""
    return str(node)


def fields_match(reqs: list[FieldRequirement], obj: dict) -> bool:
    for path, op, value in reqs:
        actual = field_value(obj, path)
        if (actual == value) != (op == "="):
            return False
    return True


def check_fields_supported(
    reqs: list[FieldRequirement], allowed: tuple[str, ...] | list[str], resource: str, version: str
) -> None:
    for path, _, _ in reqs:
        if path not in allowed:
            raise errors.bad_request(f"field label not supported: {path}")
