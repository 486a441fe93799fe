#!/usr/bin/env bash
# Refreshes hack/constraints.txt, the exact versions hack/setup.sh installs the dev extras at,
# and hack/checkov-constraints.txt, the same for checkov's venv (a new checkov release: edit its
# `checkov==` line first).
# pyproject.toml keeps ranges (what a user's `pip install agentrl[operator]` may resolve to);
# the test suite runs on the locked set, so a release of a dev tool or a dependency (a new
# ruff rule, a changed type hint in stamina) cannot fail CI on a commit that changed nothing.
# Run it on purpose, read the diff, run `bash hack/test.sh`, and commit both together.
source "$(dirname "$0")/lib.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
log "resolving the dev extras afresh in $tmp"
python3 -m venv "$tmp/venv"
# The newest setuptools, as a fresh build environment would take: the venv's own is the one
# Python bundled (65.5 with 3.11), older than pyproject.toml's build-system floor.
"$tmp/venv/bin/pip" install -q --upgrade setuptools
"$tmp/venv/bin/pip" install -q -e "$ROOT[dev]"
{
  echo "# The dev extras' exact versions, written by hack/lock.sh; hack/setup.sh installs with -c."
  echo "# Regenerate it with hack/lock.sh rather than editing it by hand."
  # torch's local label (+cpu) names the build, not the release: the pin stays the release
  # pyproject.toml names, so pip keeps taking whichever build the machine provides.
  # --all: setuptools too (torch requires it at run time, and it builds agentrl's editable
  # install); pip itself is the one the machine's Python ships.
  "$tmp/venv/bin/pip" freeze --all --exclude pip --exclude-editable \
    | sed -E 's/^(torch==[^+]+)\+.*/\1/' | LC_ALL=C sort -f
} > "$ROOT/hack/constraints.txt"
log "wrote hack/constraints.txt ($(grep -vc '^#' "$ROOT/hack/constraints.txt") packages)"

# checkov's venv of its own (hack/setup.sh): checkov at the release named there now, its
# dependencies resolved afresh.
checkov="$(sed -n 's/^checkov==//p' "$ROOT/hack/checkov-constraints.txt")"
log "resolving checkov $checkov's dependencies afresh in $tmp"
python3 -m venv "$tmp/checkov"
"$tmp/checkov/bin/pip" install -q "checkov==$checkov"
{
  echo "# checkov's own venv at exact versions (its dependencies included), written by hack/lock.sh;"
  echo "# hack/setup.sh installs checkov with -c. Regenerate it with hack/lock.sh rather than by hand."
  "$tmp/checkov/bin/pip" freeze | LC_ALL=C sort -f
} > "$ROOT/hack/checkov-constraints.txt"
log "wrote hack/checkov-constraints.txt ($(grep -vc '^#' "$ROOT/hack/checkov-constraints.txt") packages)"
