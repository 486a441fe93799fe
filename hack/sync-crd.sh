#!/usr/bin/env bash
# Copy the generated CRD (crds/, written by `agentrl crd`) into the chart, which templates it
# from charts/agentrl/files/crds/. crds/ stays the one source of truth; `--check` fails when
# the chart's copy differs (tests/chart runs the same comparison).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$ROOT/crds/rlexperiments.agentrl.io.yaml"
DST="$ROOT/charts/agentrl/files/crds/rlexperiments.agentrl.io.yaml"

if [[ "${1:-}" == "--check" ]]; then
  if ! cmp -s "$SRC" "$DST"; then
    echo "charts/agentrl/files/crds is out of date: run hack/sync-crd.sh" >&2
    diff -u "$SRC" "$DST" >&2 || true
    exit 1
  fi
  exit 0
fi
mkdir -p "$(dirname "$DST")"
cp "$SRC" "$DST"
echo "synced $DST"
