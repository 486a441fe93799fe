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

# apt-get for the hack/ scripts: two set-ups at once (two clones, or a set-up beside a test
# building the apiserver) would otherwise fail on dpkg's lock ("Could not get lock
# /var/lib/dpkg/lock-frontend"), so ours take turns on a lock of our own, and any other apt
# user on the machine is waited for (up to 10 minutes) rather than failed on.
apt_get() {
  (
    exec 8>"$CACHE/.apt.lock"
    flock 8
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"
  )
}
