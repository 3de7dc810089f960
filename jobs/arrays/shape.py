"""Job arrays and parameter sweeps: the request's shape, the grid, each element's name and env.

Pure functions (no database, no cluster). A request carries either
  "array": {"count": N, "parallelism": P}      N elements, indices 0..N-1, or
  "sweep": {"lr": [0.1, 0.01], "batch": [32, 64]}  (plus an optional top-level "parallelism")
one element per combination of the grid (the cartesian product, in the order the parameters and
their values were given, the last parameter varying fastest: lr=0.1,batch=32 is index 0,
lr=0.1,batch=64 index 1, ...). Never both. The project's `max_array_elements` is the limit.

Kubernetes shape: one batch/v1 Job per element (each its own Kueue Workload), so every element is
admitted on its own as quota frees up; an Indexed Job with partial admission would admit a block
of indices together and shrink, not start elements one by one. Parallelism P means at most P
elements are in the cluster at once (applied and not finished); the rest wait in the portal
(Submitted, not yet applied) and are applied as earlier ones finish.

Each element sees ARRAY_INDEX, ARRAY_COUNT and, for a sweep, one variable per parameter:
SWEEP_<NAME> with the parameter's name upper-cased (lr → SWEEP_LR), its value as text (strings
as given, numbers and booleans as JSON writes them: 0.01, 32, true). Element names are
`<array name>-<index>`.
"""

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

INDEX_ENV = "ARRAY_INDEX"
COUNT_ENV = "ARRAY_COUNT"
SWEEP_ENV_PREFIX = "SWEEP_"
RESERVED_ENV = frozenset({INDEX_ENV, COUNT_ENV})
PARAM_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
PARAM_VALUE_MAX = 256
NAME_MAX = 40


@dataclass
class ArraySpec:
    count: int
    parallelism: int
    grid: dict[str, list[Any]] = field(default_factory=dict)


def is_array_request(data: dict[str, Any]) -> bool:
    return any(data.get(key) is not None for key in ("array", "sweep"))


def _whole(value: Any) -> int | None:
    # bool is an int in Python; true is not a count.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def parse_array_request(
    *, array: Any, sweep: Any, parallelism: Any, limit: int
) -> tuple[ArraySpec | None, dict[str, list[str]]]:
    """The array or sweep of a request, or the errors per field ("array", "sweep",
    "parallelism"), each naming the limit where one applies."""
    errors: dict[str, list[str]] = {}

    def add(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    if array is not None and sweep is not None:
        add("sweep", "Send either array or sweep, not both (a sweep's size is its grid's).")
        return None, errors
    if array is None and sweep is None:
        add("parallelism", "parallelism goes with a sweep (an array takes array.parallelism).")
        return None, errors
    grid: dict[str, list[Any]] = {}
    if array is not None:
        if not isinstance(array, dict):
            add("array", 'Expected an object: {"count": N, "parallelism": P}.')
            return None, errors
        unknown = sorted(set(array) - {"count", "parallelism"})
        if unknown:
            add("array", f"Unknown key(s) {', '.join(unknown)}; an array takes count, parallelism.")
        if parallelism is not None:
            add("parallelism", "An array takes its parallelism inside array.parallelism.")
        count = _whole(array.get("count"))
        if count is None or count < 1:
            add("array", f"array.count must be a whole number from 1 to {limit}.")
        elif count > limit:
            add("array", f"array.count {count} is over this project's limit of {limit} elements.")
        parallelism = array.get("parallelism")
    else:
        if not isinstance(sweep, dict) or not sweep:
            add("sweep", 'Expected a non-empty grid: {"name": [values], ...}.')
            return None, errors
        count = 1
        for name, values in sweep.items():
            if not PARAM_NAME_RE.match(str(name)):
                add(
                    "sweep",
                    f"{name!r} is not a parameter name: letters, digits and '_', not starting "
                    "with a digit, at most 63 characters (it becomes SWEEP_<NAME>).",
                )
                continue
            if not isinstance(values, list) or not values:
                add("sweep", f"sweep.{name} must be a non-empty list of values.")
                continue
            bad = [
                v
                for v in values
                if not isinstance(v, str | int | float)
                or (isinstance(v, float) and not math.isfinite(v))
            ]
            if bad:
                add("sweep", f"sweep.{name}: values must be strings, numbers or booleans.")
                continue
            texts = [_value_text(v) for v in values]
            if any(len(t) > PARAM_VALUE_MAX for t in texts):
                add("sweep", f"sweep.{name}: a value is longer than {PARAM_VALUE_MAX} characters.")
                continue
            if len(set(texts)) != len(texts):
                add("sweep", f"sweep.{name} lists a value twice.")
                continue
            grid[str(name)] = list(values)
        upper = [name.upper() for name in grid]
        if len(set(upper)) != len(upper):
            add("sweep", "Two parameters differ only in case; their variables would clash.")
        if not errors:
            count = math.prod(len(v) for v in grid.values())
            if count > limit:
                sizes = " × ".join(str(len(v)) for v in grid.values())
                add(
                    "sweep",
                    f"The grid has {sizes} = {count} elements, over this project's limit of "
                    f"{limit} elements.",
                )
    if errors:
        return None, errors
    if parallelism is None:
        parallelism = count
    field_name = "array" if array is not None else "parallelism"
    parallel = _whole(parallelism)
    if parallel is None or parallel < 1:
        add(field_name, "parallelism must be a whole number from 1 (at most the element count).")
        return None, errors
    return ArraySpec(count=count, parallelism=min(parallel, count), grid=grid), errors


def grid_params(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid, index order (the last parameter varies fastest)."""
    names = list(grid)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*grid.values())]


def element_params(spec: ArraySpec) -> list[dict[str, Any]]:
    return grid_params(spec.grid) if spec.grid else [{} for _ in range(spec.count)]


def param_env_name(name: str) -> str:
    return SWEEP_ENV_PREFIX + name.upper()


def element_env(index: int, count: int, params: dict[str, Any]) -> dict[str, str]:
    """The variables the portal sets for one element (added to the user's env)."""
    env = {INDEX_ENV: str(index), COUNT_ENV: str(count)}
    for name, value in params.items():
        env[param_env_name(name)] = _value_text(value)
    return env


def reserved_env_clashes(env: dict[str, Any]) -> list[str]:
    """User env names an array element's own variables would overwrite."""
    return sorted(
        name for name in env if name in RESERVED_ENV or str(name).startswith(SWEEP_ENV_PREFIX)
    )


def element_name(array_name: str, index: int) -> str:
    return f"{array_name}-{index}"


def longest_array_name(count: int) -> int:
    """How long an array's name may be so that `<name>-<last index>` is a valid job name."""
    return NAME_MAX - 1 - len(str(max(count - 1, 0)))
