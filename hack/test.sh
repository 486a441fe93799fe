#!/usr/bin/env bash
# The whole test suite, from a fresh clone: install what is missing, then every check.
# This is the README's test command, and .ci/run calls exactly this. The static checks (ruff,
# mypy, import-linter, hadolint, actionlint) are tests too (tests/test_static_checks.py), so
# the run ends with pytest's summary line and exits with pytest's status.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
"$ROOT/hack/setup.sh"
export PATH="$VENV/bin:$PATH"
log "pytest (static checks included)"
# pytest exits 5 when it collected nothing, which fails this command too.
exec python -m pytest -p no:cacheprovider -q "$@"
