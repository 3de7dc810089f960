"""What a simulated container does: its command read as a tiny shell.

A container whose command is a shell script (`sh -c`, `bash -c`, or an exec-form `sleep`/`echo`/
`true`/`false`/`exit`) made only of `sleep N` (or `sleep infinity`), `echo ...`, `exit N`, `true`,
`false` (also `:`, `set ...` and comments), joined by newlines, `;`, `&&` and `||`, runs as written
in simulated time.
`alloc SIZE` (a Kubernetes quantity such as 80Gi or 512M) makes the script hold that much more
memory from then on; when what it holds exceeds the container's memory limit, the kernel's OOM
killer ends the container at that moment: exit code 137, reason OOMKilled (`apply_memory_limit`).
Anything else is an opaque program: it runs for the default duration, prints training progress
lines, and exits 0.

Scripts are deterministic, so the whole run is computed up front as a timeline of output lines;
the kubelet only has to wait and reveal the lines as simulated time passes.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import zlib
from dataclasses import dataclass, field

from kubesim.api.quantity import QuantityError, parse_quantity

SHELLS = {"sh", "bash", "ash", "dash", "zsh"}
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
# Output redirections: stdout (or both) to /dev/null hides a statement's output; stderr redirects
# and 2>/dev/null change nothing visible (container logs hold both streams).
_TO_DEVNULL = re.compile(r"(?:&>|(?<![2&>])1?>)\s*/dev/null")
_REDIRECT = re.compile(r"\s*(?:[12]?>&[12]|2>\s*/dev/null)\s*")
_DEVNULL_MARK = " __kubesim_devnull__ "


@dataclass
class Timeline:
    """Output lines (offset in simulated seconds from the container start, text), run time and
    exit code. `scripted` is False for opaque programs (default duration, progress lines)."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    duration: float = 0.0
    exit_code: int = 0
    scripted: bool = True
    # (offset, bytes held from then on, output lines before it) per `alloc` statement.
    memory: list[tuple[float, int, int]] = field(default_factory=list)
    oom_killed: bool = False


def _split_statements(script: str) -> list[tuple[str, str]] | None:
    """Split on newlines, ';', '&&', '||' outside quotes: [(connector, statement)] where the
    connector says how the statement depends on the previous one (';', '&&', '||')."""
    out: list[tuple[str, str]] = []
    buf: list[str] = []
    connector = ";"
    quote = ""
    i = 0
    while i < len(script):
        ch = script[i]
        if quote:
            buf.append(ch)
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"' and i + 1 < len(script):
                buf.append(script[i + 1])
                i += 1
        elif ch in "'\"":
            quote = ch
            buf.append(ch)
        elif ch == "#" and (not buf or buf[-1].isspace()):
            while i < len(script) and script[i] != "\n":
                i += 1
            continue
        elif ch in ";\n" or script.startswith("&&", i) or script.startswith("||", i):
            out.append((connector, "".join(buf).strip()))
            buf = []
            if script.startswith("&&", i) or script.startswith("||", i):
                connector = script[i : i + 2]
                i += 1
            else:
                connector = ";"
        elif ch == "&" or ch == "|" or ch == "`" or script.startswith("$(", i):
            return None  # pipes, background jobs, substitutions: not our tiny shell
        else:
            buf.append(ch)
        i += 1
    if quote:
        return None
    out.append((connector, "".join(buf).strip()))
    return [(c, s) for c, s in out if s]


def _expand(text: str, env: dict[str, str]) -> str:
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), text)


def _sleep_seconds(args: list[str]) -> float | None:
    total = 0.0
    if not args:
        return None
    if args == ["infinity"]:  # GNU sleep: never returns (reservation pods, upstream examples)
        return math.inf
    for arg in args:
        match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)", arg)
        if not match:
            return None
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"]
    return total


def _echo(args: list[str]) -> str:
    newline = True
    while args and args[0] in ("-n", "-e", "-E", "-ne", "-en"):
        if "n" in args[0]:
            newline = False
        args = args[1:]
    return " ".join(args) if newline or args else ""


def interpret(script: str, env: dict[str, str]) -> Timeline | None:
    """Timeline of a script, or None when it uses anything beyond the tiny shell."""
    statements = _split_statements(_REDIRECT.sub(" ", _TO_DEVNULL.sub(_DEVNULL_MARK, script)))
    if statements is None:
        return None
    timeline = Timeline()
    clock = 0.0
    status = 0
    for connector, statement in statements:
        if connector == "&&" and status != 0:
            continue
        if connector == "||" and status == 0:
            continue
        try:
            words = shlex.split(_expand(statement, env))
        except ValueError:
            return None
        silent = _DEVNULL_MARK.strip() in words
        words = [w for w in words if w != _DEVNULL_MARK.strip()]
        if not words:
            continue
        name, args = words[0], words[1:]
        if name in ("sleep", "/bin/sleep", "/usr/bin/sleep"):
            seconds = _sleep_seconds(args)
            if seconds is None:
                return None
            clock += seconds
            status = 0
        elif name in ("echo", "/bin/echo", "printf"):
            if silent:
                pass
            elif name == "printf":
                text = (args[0] if args else "").replace("\\n", "\n")
                for line in text.rstrip("\n").split("\n"):
                    timeline.lines.append((clock, line))
            else:
                timeline.lines.append((clock, _echo(args)))
            status = 0
        elif name in ("true", ":", "/bin/true"):
            status = 0
        elif name in ("false", "/bin/false"):
            status = 1
        elif name == "set":
            status = 0
        elif name == "alloc":
            size = _bytes(args[0]) if len(args) == 1 else None
            if size is None:
                return None
            held = (timeline.memory[-1][1] if timeline.memory else 0) + size
            timeline.memory.append((clock, held, len(timeline.lines)))
            status = 0
        elif name == "exit":
            if len(args) > 1 or (args and not args[0].lstrip("-").isdigit()):
                return None
            timeline.duration = clock
            timeline.exit_code = (int(args[0]) if args else status) % 256
            return timeline
        else:
            return None
    timeline.duration = clock
    timeline.exit_code = status
    return timeline


def _bytes(text: str) -> int | None:
    try:
        return int(parse_quantity(text).value)
    except (QuantityError, ValueError, TypeError):
        return None


def apply_memory_limit(timeline: Timeline, limit: str | None) -> Timeline:
    """Cut the timeline where the memory it holds first exceeds `limit` (OOM kill: exit 137)."""
    if not limit or not timeline.memory:
        return timeline
    cap = _bytes(str(limit))
    if cap is None:
        return timeline
    for offset, held, printed in timeline.memory:
        if held > cap and offset <= timeline.duration:
            timeline.lines = timeline.lines[:printed]
            timeline.duration = offset
            timeline.exit_code = 137
            timeline.oom_killed = True
            break
    return timeline


def command_line(container: dict) -> list[str]:
    return [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]


def plan(container: dict, env: dict[str, str], default_duration: float) -> Timeline:
    """What this container will do when started."""
    argv = command_line(container)
    timeline: Timeline | None = None
    if argv:
        program = os.path.basename(argv[0])
        if program in SHELLS:
            rest = argv[1:]
            # sh -c SCRIPT [name args...]; also "-ec", "-xc", "-lc" flag clusters
            while rest and rest[0].startswith("-") and rest[0] != "-c" and "c" not in rest[0]:
                rest = rest[1:]
            if rest and rest[0].startswith("-") and "c" in rest[0] and len(rest) > 1:
                timeline = interpret(rest[1], env)
        elif program in ("sleep", "echo", "true", "false", "exit", "printf"):
            timeline = interpret(shlex.join(argv), env)
    if timeline is not None:
        limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
        return apply_memory_limit(timeline, limit)
    return Timeline(duration=float(default_duration), exit_code=0, scripted=False)


def progress_lines(
    seed: str, duration: float, elapsed: float, *, gpus: list[str], command: str
) -> list[tuple[float, str]]:
    """Training-style output of an opaque program, as far as `elapsed` simulated seconds."""
    rng = zlib.crc32(seed.encode())
    lines: list[tuple[float, str]] = [
        (0.0, f"[kubesim] running {command or '(image entrypoint)'}"),
        (0.0, f"visible devices: {','.join(gpus) if gpus else 'none (CPU only)'}"),
    ]
    epochs = 5 + rng % 6
    steps_per_epoch = 100 * (2 + (rng >> 4) % 9)
    total_steps = epochs * steps_per_epoch
    interval = max(duration / 60.0, 5.0)
    count = int(min(elapsed, duration) // interval)
    batch = 32 * (1 + (rng >> 8) % 4)
    for k in range(1, count + 1):
        t = k * interval
        if t >= duration:
            break
        frac = t / duration
        step = max(1, int(frac * total_steps))
        epoch = min(epochs, step // steps_per_epoch + 1)
        noise = ((zlib.crc32(f"{seed}/{k}".encode()) % 1000) / 1000.0 - 0.5) * 0.06
        loss = 2.4 * math.exp(-3.0 * frac) + 0.12 + noise
        lr = 3e-4 * (0.5 * (1 + math.cos(math.pi * frac)))
        rate = batch * (9.5 + noise * 10) * max(1, len(gpus))
        lines.append(
            (
                t,
                f"epoch {epoch}/{epochs} step {step}/{total_steps} loss {loss:.4f} "
                f"lr {lr:.2e} throughput {rate:.1f} samples/s",
            )
        )
    if elapsed >= duration:
        final = 2.4 * math.exp(-3.0) + 0.12
        lines.append((duration, f"training finished: {total_steps} steps, final loss {final:.4f}"))
    return lines
