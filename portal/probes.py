"""Exec probes that touch neither the database nor the broker:
`python -m portal.probes fresh SECONDS PATTERN [PATTERN ...]` exits 0 when a matching file
changed within the last SECONDS, else 1 with a line on stderr saying why.

The Celery worker touches its heartbeat file (PORTAL_WORKER_HEARTBEAT_FILE) every few seconds,
and beat rewrites its schedule file as it runs; a stale file means the process is stuck.
"""

from __future__ import annotations

import glob
import os
import sys
import time


def newest_age(patterns: list[str], *, now: float | None = None) -> float | None:
    """Seconds since the newest matching file changed; None when no file matches."""
    mtimes = []
    for pattern in patterns:
        for path in glob.glob(pattern):
            try:
                mtimes.append(os.stat(path).st_mtime)
            except OSError:
                continue
    if not mtimes:
        return None
    return (time.time() if now is None else now) - max(mtimes)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "fresh":
        sys.stderr.write("usage: python -m portal.probes fresh SECONDS PATTERN [PATTERN ...]\n")
        return 2
    max_age = float(argv[1])
    age = newest_age(argv[2:])
    if age is None:
        sys.stderr.write(f"no file matches {' '.join(argv[2:])}\n")
        return 1
    if age > max_age:
        sys.stderr.write(f"stale: last change {age:.0f} s ago (limit {max_age:g} s)\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
