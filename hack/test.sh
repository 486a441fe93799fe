#!/usr/bin/env bash
# The whole test suite, from a fresh clone: install what is missing, then every check.
# This is the README's test command, and .ci/run calls exactly this.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
"$ROOT/hack/setup.sh"
export PATH="$VENV/bin:$PATH"

status=0
step() { log "$1"; shift; "$@" || { echo "FAILED: $*" >&2; status=1; }; }

step "ruff check" ruff check operator tests benchmarks
step "ruff format --check" ruff format --check operator tests benchmarks
step "mypy (strict)" mypy
step "import-linter (layers)" lint-imports
if compgen -G "Dockerfile" >/dev/null || compgen -G "images/*/Dockerfile" >/dev/null; then
  step "hadolint" hadolint Dockerfile images/*/Dockerfile
fi
if compgen -G ".github/workflows/*.y*ml" >/dev/null; then
  # shellcheck (the venv's) checks every `run:` script too.
  step "actionlint" actionlint -no-color .github/workflows/*.y*ml
fi
log "pytest"
set +e
python -m pytest -p no:cacheprovider -q "$@"
rc=$?
set -e
# pytest exits 5 when it collected nothing; that must not pass silently.
if (( rc != 0 )); then status=1; fi
exit $status
