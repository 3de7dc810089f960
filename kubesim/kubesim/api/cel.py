"""CEL evaluation for CRD ``x-kubernetes-validations`` rules.

Built on the PyPI package ``common-expression-language`` (import name ``cel``; a Rust
interpreter), which provides the CEL core: macros (has/all/exists/exists_one/map/filter),
size, matches/startsWith/endsWith/contains, timestamps and durations.  On top of it this
module registers the parts of the Kubernetes CEL library that CRD rules use:

- cel-go extension libraries (strings, lists, sets, math) from ``cel.stdlib``;
- Kubernetes list functions: ``isSorted``, ``sum``, ``min``, ``max``, ``indexOf`` and
  ``lastIndexOf`` on lists as well as strings;
- Kubernetes regex functions: ``find``, ``findAll``;
- Kubernetes quantity library: ``quantity(s)``, ``isQuantity(s)`` and the methods
  ``isLessThan``, ``isGreaterThan``, ``compareTo``, ``add``, ``sub``, ``sign``,
  ``isInteger``, ``asInteger``, ``asApproximateFloat``.

Known gaps against the API server (see ``UNSUPPORTED_FEATURES``): the optional syntax
``self.?field`` / ``optional.of`` field selection, ``fold``-style macros, the IP/CIDR/URL/
format libraries, cost limits, and CEL's type checking at CRD creation (rules are parsed
here, so a type error only shows when the rule runs).  Rules that fail to compile are
skipped by the schema validator and reported through :func:`unsupported_rules_in`.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

import cel as _cel
from cel import stdlib as _stdlib

from kubesim.api.quantity import Quantity, QuantityError, is_quantity

# Rules found in the shipped CRD sets (Kueue v0.19, Volcano v1.15, KAI v0.17) that this
# library cannot evaluate.  All 82 rules (about forty distinct, all in Kueue's CRDs; Volcano's
# and KAI's carry none) compile; tests/kubesim/schema/test_cel.py keeps this list honest and
# test_kueue_schemas.py and test_kueue_rules.py run them against real objects.
UNSUPPORTED_RULES: list[dict] = []

UNSUPPORTED_FEATURES = [
    "optional field selection (self.?field, optional.of) — not parsed by the library",
    "the IP/CIDR/URL/format/semver/authz Kubernetes CEL libraries",
    "static type checking and cost estimation at CRD registration",
    "escaped property names (self.foo__dash__bar, self.__namespace__) — data keys are used as is",
    "format: date-time/duration strings stay strings (the API server types them as "
    "timestamp/duration)",
    "size() of strings counts UTF-8 bytes instead of code points",
]

_QUANTITY_KEY = "__kubesim_quantity__"


class CelEvaluationError(Exception):
    """A rule failed at run time; the message is worded as the API server words it."""


def _reraise_if_fatal(exc: BaseException) -> None:
    # the Rust engine reports panics as pyo3's PanicException, a BaseException: treat it as
    # a rule error, but never swallow interpreter exits or task cancellation
    if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError)):
        raise exc


# -- Kubernetes quantity library ----------------------------------------------------------
def _to_quantity(value) -> Quantity:
    if isinstance(value, dict) and _QUANTITY_KEY in value:
        return Quantity(Fraction(value[_QUANTITY_KEY]))
    raise TypeError("no such overload")


def _from_quantity(quantity: Quantity) -> dict:
    return {_QUANTITY_KEY: str(quantity.value)}


def _quantity(text):
    try:
        return _from_quantity(Quantity.parse(text if isinstance(text, str) else str(text)))
    except QuantityError as exc:
        raise ValueError(f"quantities must match the regular expression: {exc}") from None


def _is_quantity(text) -> bool:
    return isinstance(text, str) and is_quantity(text)


def _compare_to(a, b) -> int:
    return _to_quantity(a).compare(_to_quantity(b))


def _add(a, b):
    qa = _to_quantity(a)
    qb = _to_quantity(b) if isinstance(b, dict) else Quantity(int(b))
    return _from_quantity(qa + qb)


def _sub(a, b):
    qa = _to_quantity(a)
    qb = _to_quantity(b) if isinstance(b, dict) else Quantity(int(b))
    return _from_quantity(qa - qb)


def _as_integer(a) -> int:
    q = _to_quantity(a)
    if not q.is_integer() or abs(q.value) >= 2**63:
        raise ValueError("cannot convert value to integer")
    return int(q.value)


# -- lists and strings ---------------------------------------------------------------------
def _index_of(container, item, *offset):
    if isinstance(container, str):
        return _stdlib.index_of(container, item, *offset)
    for index, element in enumerate(container):
        if element == item:
            return index
    return -1


def _last_index_of(container, item, *offset):
    if isinstance(container, str):
        return _stdlib.last_index_of(container, item, *offset)
    for index in range(len(container) - 1, -1, -1):
        if container[index] == item:
            return index
    return -1


def _is_sorted(items) -> bool:
    return all(items[i] <= items[i + 1] for i in range(len(items) - 1))


def _find(text: str, pattern: str) -> str:
    match = re.search(pattern, text)
    return match.group(0) if match else ""


def _find_all(text: str, pattern: str, *limit):
    found = [m.group(0) for m in re.finditer(pattern, text)]
    if limit and limit[0] >= 0:
        found = found[: limit[0]]
    return found


FUNCTIONS: dict = dict(_stdlib.STDLIB_FUNCTIONS)
FUNCTIONS.update(
    {
        "quantity": _quantity,
        "isQuantity": _is_quantity,
        "isLessThan": lambda a, b: _compare_to(a, b) < 0,
        "isGreaterThan": lambda a, b: _compare_to(a, b) > 0,
        "compareTo": _compare_to,
        "add": _add,
        "sub": _sub,
        "sign": lambda a: _to_quantity(a).sign(),
        "isInteger": lambda a: _to_quantity(a).is_integer(),
        "asInteger": _as_integer,
        "asApproximateFloat": lambda a: _to_quantity(a).as_float(),
        "indexOf": _index_of,
        "lastIndexOf": _last_index_of,
        "isSorted": _is_sorted,
        "find": _find,
        "findAll": _find_all,
    }
)


# -- compiled rules ------------------------------------------------------------------------
@dataclass(frozen=True)
class CompiledRule:
    """One x-kubernetes-validations entry, parsed once."""

    rule: str
    program: object | None  # cel.Program, None when the rule does not compile
    error: str | None  # compile error
    transition: bool  # references oldSelf
    message: str | None = None
    message_program: object | None = None  # messageExpression
    field_path: str | None = None
    reason: str | None = None
    optional_old_self: bool = False
    functions: dict | None = None  # the extension functions the rule calls (None: none)
    # the parts of self/oldSelf the rule can observe: {"self": tree, "oldSelf": tree} where a
    # tree is True (the whole value) or {field: tree}; used to convert less data to CEL
    access: dict | None = None

    @property
    def compiled(self) -> bool:
        return self.program is not None

    def failure_message(self) -> str:
        """The rule's message, or the API server's default one."""
        return self.message or f"failed rule: {self.rule.strip()}"


@functools.lru_cache(maxsize=4096)
def compile_expression(expression: str):
    """Parse a CEL expression once; returns (program, error_text)."""
    try:
        return _cel.compile(expression), None
    except BaseException as exc:  # the library raises ValueError with the parser's report
        _reraise_if_fatal(exc)
        return None, str(exc)


_CHAIN_RE = re.compile(r"\b(self|oldSelf)\b((?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)*)(\s*\(?)")
_SIZE_OF_CHAIN_RE = re.compile(
    r"\bsize\(\s*(self|oldSelf)((?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)+)\s*\)"
    r"|\b(self|oldSelf)((?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)+?)\s*\.\s*size\(\s*\)"
)
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SIZE_ONLY = "size"  # access-tree leaf: only the length of the value is read


def merge_access(a, b):
    """Union of two access trees (True = whole value, SIZE_ONLY = its length, dict = fields)."""
    if a == b:
        return a
    if a is True or b is True or a == SIZE_ONLY or b == SIZE_ONLY:
        return True
    merged = dict(a)
    for key, sub in b.items():
        merged[key] = merge_access(merged[key], sub) if key in merged else sub
    return merged


def _chain_tree(chain: list, leaf):
    tree = leaf
    for name in reversed(chain):
        tree = {name: tree}
    return tree


def access_paths(*expressions: str) -> dict:
    """Which fields of self/oldSelf the expressions read, as access trees (see CompiledRule).

    Only explicit chains like ``self.spec.priorityClassRef`` narrow the tree, and a chain
    only measured (``size(self.spec.podSets)``) needs just its length; any other use of the
    variable (``self == oldSelf``, ``size(self)``, ``self.all(...)``) keeps it whole.
    """
    access: dict = {"self": {}, "oldSelf": {}}
    for expression in expressions:
        if not expression:
            continue
        for match in _SIZE_OF_CHAIN_RE.finditer(expression):
            var = match.group(1) or match.group(3)
            chain = _IDENT_RE.findall(match.group(2) or match.group(4))
            access[var] = merge_access(access[var], _chain_tree(chain, SIZE_ONLY))
        rest = _SIZE_OF_CHAIN_RE.sub(" 0 ", expression)
        for match in _CHAIN_RE.finditer(rest):
            var = match.group(1)
            chain = _IDENT_RE.findall(match.group(2))
            if match.group(3).strip() == "(" and chain:
                chain = chain[:-1]  # self.items.all(...) calls a macro on self.items
            access[var] = merge_access(access[var], _chain_tree(chain, True))
    return access


def trim(value, tree):
    """The part of a JSON value an access tree can observe (the value itself when whole)."""
    if tree is True:
        return value
    if tree == SIZE_ONLY:
        if isinstance(value, list):
            return [None] * len(value)
        if isinstance(value, dict):
            return dict.fromkeys(value)
        return value
    if not isinstance(value, dict):
        return value
    return {key: trim(value[key], sub) for key, sub in tree.items() if key in value}


def _functions_used(program) -> dict | None:
    # Building a Context with every extension costs ~30 us per run, so pass only the ones
    # the rule names (namespaced ones like math.abs are reported by their last segment).
    try:
        names = set(program.functions())
    except Exception:
        return dict(FUNCTIONS)
    used = {name: fn for name, fn in FUNCTIONS.items() if name.rsplit(".", 1)[-1] in names}
    return used or None


def compile_rule(spec: dict) -> CompiledRule:
    """Compile one ``x-kubernetes-validations`` item ({rule, message, messageExpression, ...})."""
    rule = spec.get("rule", "")
    program, error = compile_expression(rule)
    transition = False
    if program is not None:
        try:
            transition = "oldSelf" in program.variables()
        except Exception:
            transition = "oldSelf" in rule
    message_program = None
    if spec.get("messageExpression"):
        message_program, _ = compile_expression(spec["messageExpression"])
    return CompiledRule(
        rule=rule,
        program=program,
        error=error,
        transition=transition,
        message=spec.get("message") or None,
        message_program=message_program,
        field_path=spec.get("fieldPath") or None,
        reason=spec.get("reason") or None,
        optional_old_self=bool(spec.get("optionalOldSelf")),
        functions=_functions_used(program) if program is not None else None,
        access=access_paths(rule, spec.get("messageExpression") or ""),
    )


_MISSING = object()


def _error_text(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        key = exc.args[0] if exc.args else ""
        return f"no such key: {key}"
    if isinstance(exc, ZeroDivisionError):
        return "division by zero"
    if isinstance(exc, IndexError):
        return f"index out of bounds: {exc}"
    if isinstance(exc, TypeError) and "overload" in str(exc).lower():
        return "no such overload"
    return str(exc)


def evaluate(program, variables: dict, functions: dict | None = FUNCTIONS):
    """Run a compiled program; raises CelEvaluationError with the API server's wording."""
    try:
        context = _cel.Context(variables, functions) if functions else variables
        return program.execute(context)
    except BaseException as exc:
        _reraise_if_fatal(exc)
        raise CelEvaluationError(_error_text(exc)) from None


def check_rule(compiled: CompiledRule, value, old=_MISSING) -> tuple[bool, str | None]:
    """Evaluate one rule against ``value`` (and ``old`` for transition rules).

    Returns (passed, detail): detail is the failure message (the rule's message, the
    messageExpression result or "failed rule: ...") or the evaluation error.
    """
    failures = check_rules((compiled,), value, old)
    return (False, failures[0][1]) if failures else (True, None)


def check_rules(rules, value, old=_MISSING) -> list[tuple[CompiledRule, str]]:
    """Evaluate the rules of one schema node; returns (rule, detail) for each failure.

    The value is converted to CEL once per node (a Context), not once per rule: for the
    root of a Workload that conversion is most of the cost.  Transition rules are skipped
    when there is no old value, unless they set optionalOldSelf.
    """
    plain: dict | None = None
    optional: dict | None = None
    functions: dict = {}
    selected = []
    for compiled in rules:
        if compiled.transition and old is _MISSING and not compiled.optional_old_self:
            continue
        selected.append(compiled)
        if compiled.functions:
            functions.update(compiled.functions)
    if not selected:
        return []
    self_tree: dict | bool = {}
    old_tree: dict | bool = {}
    for compiled in selected:
        self_tree = merge_access(self_tree, compiled.access["self"])
        old_tree = merge_access(old_tree, compiled.access["oldSelf"])
    value = trim(value, self_tree)
    if old is not _MISSING:
        old = trim(old, old_tree)
    failures = []
    for compiled in selected:
        if compiled.transition and compiled.optional_old_self:
            if optional is None:
                wrapped = (
                    _cel.OptionalValue.none() if old is _MISSING else _cel.OptionalValue.of(old)
                )
                optional = _make_context({"self": value, "oldSelf": wrapped}, functions, False)
            context = optional
        else:
            if plain is None:
                variables = {"self": value}
                if old is not _MISSING and any(r.transition for r in selected):
                    variables["oldSelf"] = old
                # a plain dict is cheaper than a Context when only one rule reads it
                single = len(selected) == 1 and not functions
                plain = _make_context(variables, functions, single)
            context = plain
        detail = _run_one(compiled, context)
        if detail is not None:
            failures.append((compiled, detail))
    return failures


def _make_context(variables: dict, functions: dict, plain: bool):
    """A Context (or the plain dict); a conversion failure is returned, not raised."""
    if plain:
        return variables
    try:
        return _cel.Context(variables, functions or None)
    except BaseException as exc:
        _reraise_if_fatal(exc)
        return exc


def _run_one(compiled: CompiledRule, context) -> str | None:
    rule = compiled.rule.strip()
    try:
        if isinstance(context, BaseException):
            raise context
        result = compiled.program.execute(context)
    except BaseException as exc:
        _reraise_if_fatal(exc)
        text = _error_text(exc)
        if text == "no such overload":
            return (
                "'no such overload': call arguments did not match a supported operator, "
                f"function or macro signature for rule: {rule}"
            )
        return f"{text} evaluating rule: {rule}"
    if result is True:
        return None
    if result is not False:
        return f"rule did not evaluate to a boolean: {rule}"
    if compiled.message_program is not None:
        try:
            message = compiled.message_program.execute(context)
        except BaseException as exc:
            _reraise_if_fatal(exc)
            message = None
        if isinstance(message, str) and message.strip() and "\n" not in message:
            return message
    return compiled.failure_message()


MISSING = _MISSING


def iter_rules(schema: dict, path: str = "") -> Iterable[tuple[str, dict]]:
    """Yield (schema path, rule spec) for every x-kubernetes-validations rule in a schema."""
    if not isinstance(schema, dict):
        return
    for spec in schema.get("x-kubernetes-validations") or ():
        yield path or ".", spec
    for name, sub in (schema.get("properties") or {}).items():
        yield from iter_rules(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from iter_rules(schema["items"], f"{path}[*]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from iter_rules(schema["additionalProperties"], f"{path}[*]")
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            yield from iter_rules(sub, path)


def unsupported_rules_in(crd: dict) -> list[dict]:
    """Rules of a CustomResourceDefinition that this library cannot compile.

    Each item: {"kind", "version", "path", "rule", "error"}.
    """
    found = []
    kind = crd.get("spec", {}).get("names", {}).get("kind", "")
    for version in crd.get("spec", {}).get("versions", []):
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        for path, spec in iter_rules(schema):
            compiled = compile_rule(spec)
            if not compiled.compiled:
                found.append(
                    {
                        "kind": kind,
                        "version": version.get("name"),
                        "path": path,
                        "rule": compiled.rule,
                        "error": compiled.error,
                    }
                )
    return found
