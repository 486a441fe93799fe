# Shared settings for the hack/ scripts: where heavy, reusable things are cached.
# shellcheck shell=bash
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${AGENTRL_CACHE:-$HOME/.cache/agentrl}"
TOOLS="$CACHE/tools"
VENV="${AGENTRL_VENV:-$ROOT/.venv}"
export PIP_CACHE_DIR="$CACHE/pip"
export PIP_DISABLE_PIP_VERSION_CHECK=1
mkdir -p "$CACHE" "$TOOLS"
log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
