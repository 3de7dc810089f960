#!/usr/bin/env bash
# A clone stands alone: fail when a tracked file refers to the team's folder beside the checkout
# (../shared), which a fresh clone does not have. Run by `make test`.
#
# What counts as a reference (extended regular expressions, case-sensitive, in every tracked
# text file):
#   \.\./shared                     a relative path to it: ../shared, ../../shared/docs/...
#   (^|[^A-Za-z0-9_.-])/?shared/(docs|crds|fixtures|conformance|hooks)([/`'" ]|$)
#                                   one of its folders cited by name: shared/docs/nvidia.md,
#                                   /shared/crds, /work/shared/fixtures/dcgm (but not the word
#                                   "shared" alone, nor names like "unshared/docs")
#   /work/shared                    its absolute path on the team's machines
#   PORTAL_SHARED_DIR               the environment variable that used to point at it
#   / *["']shared["']               a path built in code: Path(...).parent / "shared"
# Exempt: this script (it names the patterns) and the one optional test allowed to use the
# folder when it exists, tests/kubesim/test_conformance_client_e2e.py.
# Usage: scripts/check-standalone.sh [REPO_DIR]   (default: this script's repository)
set -euo pipefail

repo="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
patterns=(
  -e '\.\./shared'
  -e "(^|[^A-Za-z0-9_.-])/?shared/(docs|crds|fixtures|conformance|hooks)([/\`'\" ]|\$)"
  -e '/work/shared'
  -e 'PORTAL_SHARED_DIR'
  -e "/ *[\"']shared[\"']"
)
exempt=(
  ':(exclude)scripts/check-standalone.sh'
  ':(exclude)tests/kubesim/test_conformance_client_e2e.py'
)

if found=$(git -C "$repo" grep -n -I -E "${patterns[@]}" -- . "${exempt[@]}"); then
  echo "check-standalone: these tracked files refer to ../shared, which a fresh clone lacks:" >&2
  echo "$found" >&2
  echo "Use the vendored copies (kubesim/crds/, tests/fixtures/) or cite the upstream source." >&2
  exit 1
fi
echo "check-standalone: no tracked file refers to ../shared."
