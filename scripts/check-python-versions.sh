#!/usr/bin/env bash
# The project supports Python 3.11-3.13 (pyproject's requires-python), but only one interpreter
# runs here. Prove the others by resolving the whole dependency set (every extra) for 3.12 and
# 3.13 with binary wheels only, as pip would install it there, without downloading the wheels
# (pip install --dry-run): the portal with every extra, kubesim (kubesim/pyproject.toml, with its
# client extra) and the CLI (cli/pyproject.toml). Also check that the production set (the portal,
# no extra) resolves without any of kubesim's dependencies. Run by `make test`; needs PyPI.
# Usage: scripts/check-python-versions.sh [PYTHON]   (default: .venv/bin/python)
# SKIP_PYTHON_VERSIONS=1 skips it (offline machines), saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-.venv/bin/python}"

if [ "${SKIP_PYTHON_VERSIONS:-}" = 1 ]; then
  echo "check-python-versions: SKIPPED (SKIP_PYTHON_VERSIONS=1)"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# requirements-all.txt: every dependency and every extra's of the three distributions;
# requirements-prod.txt: the portal's, no extra; sim.txt: the names of kubesim's dependencies.
"$python" - "$tmp" <<'PY'
import re
import sys
import tomllib
from pathlib import Path

out = Path(sys.argv[1])
def read(path):
    return tomllib.loads(Path(path).read_text())["project"]

portal, kubesim, cli = read("pyproject.toml"), read("kubesim/pyproject.toml"), read("cli/pyproject.toml")
local = {portal["name"], kubesim["name"], cli["name"]}  # installed from this checkout, not PyPI
every = []
for project in (portal, kubesim, cli):
    requirements = project["dependencies"] + [
        r for reqs in project.get("optional-dependencies", {}).values() for r in reqs
    ]
    every += [r for r in requirements if re.split(r"[\[<>=~!; ]", r, maxsplit=1)[0] not in local]
(out / "requirements-prod.txt").write_text("\n".join(portal["dependencies"]) + "\n")
(out / "requirements-all.txt").write_text("\n".join(every) + "\n")
def name(requirement):
    return re.split(r"[\[<>=~!; ]", requirement, maxsplit=1)[0]

# kubesim's own: what it needs and the portal does not (both use PyYAML, say).
names = sorted({name(r) for r in kubesim["dependencies"]} - {name(r) for r in portal["dependencies"]})
(out / "sim.txt").write_text("\n".join(names) + "\n")
PY

resolve() {  # resolve VERSION REQUIREMENTS REPORT; pip's errors shown only when it fails
  if ! "$python" -m pip install --dry-run --quiet --ignore-installed --only-binary=:all: \
    --python-version "$1" --target "$tmp/target" --report "$3" -r "$2" 2>"$tmp/pip.err"; then
    grep -v "is ignored: it is neither a file nor a directory" "$tmp/pip.err" >&2
    return 1
  fi
}

status=0
for version in 3.12 3.13; do
  if resolve "$version" "$tmp/requirements-all.txt" "$tmp/report-$version.json"; then
    count=$("$python" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["install"]))' \
      "$tmp/report-$version.json")
    echo "check-python-versions: Python $version resolves all $count packages as binary wheels."
  else
    echo "check-python-versions: Python $version: the dependency set does not resolve." >&2
    status=1
  fi
done

current=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if resolve "$current" "$tmp/requirements-prod.txt" "$tmp/report-prod.json"; then
  # A sim package may still be there because another dependency requires it (aiohttp: the
  # kubernetes client's own requirement); one that only this project asks for is a failure.
  "$python" - "$tmp/report-prod.json" "$tmp/sim.txt" "$current" <<'PY' || status=1
import json
import re
import sys

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

installed = json.load(open(sys.argv[1]))["install"]
sim = {norm(n) for n in open(sys.argv[2]).read().split()}
requirers = {}
for item in installed:
    for requirement in item["metadata"].get("requires_dist") or []:
        if "extra ==" in requirement:
            continue
        name = norm(re.split(r"[\[<>=~!; (]", requirement, maxsplit=1)[0])
        requirers.setdefault(name, []).append(item["metadata"]["name"])
present = sorted(sim & {norm(i["metadata"]["name"]) for i in installed})
ours = [name for name in present if not requirers.get(name)]
for name in present:
    if requirers.get(name):
        print(f"check-python-versions: note: {name} is in the production set because "
              f"{', '.join(requirers[name])} requires it")
if ours:
    print(f"check-python-versions: the production install pulls in kubesim's {', '.join(ours)}",
          file=sys.stderr)
    sys.exit(1)
print(f"check-python-versions: the production set (Python {sys.argv[3]}) pulls in none of "
      "kubesim's dependencies on its own account.")
PY
else
  echo "check-python-versions: the production set does not resolve for Python $current." >&2
  status=1
fi
exit $status
