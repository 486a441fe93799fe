#!/usr/bin/env bash
# Builds kube-apiserver and kube-controller-manager v1.20.2 offline from Debian's `kubernetes`
# source package, for the real-apiserver (e2e) test tier. No registry ships binaries we can use
# here, and Debian's source package carries the full tree with vendor/, so a GOPATH-mode `make`
# works without a module proxy. The controller manager runs only the controllers a test names
# (e.g. clusterrole-aggregation, which fills the built-in edit/view/admin roles). Idempotent:
# returns at once when both binaries are cached under ~/.cache/agentrl/kube-apiserver-1.20.2/,
# and builds only the one missing otherwise. Needs root (apt) on the first run only.
source "$(dirname "$0")/lib.sh"

VERSION=1.20.2
DEST="$CACHE/kube-apiserver-$VERSION"
BINARIES=(kube-apiserver kube-controller-manager)
missing() {
  local name
  for name in "${BINARIES[@]}"; do
    if ! { [[ -x "$DEST/$name" ]] && "$DEST/$name" --version 2>/dev/null | grep -q "v$VERSION"; }; then
      echo "$name"
    fi
  done
}
if [[ -z "$(missing)" ]]; then
  exit 0
fi

WORK="$CACHE/build/kube-apiserver-$VERSION"
export GOCACHE="$CACHE/go-build"    # ~1 GB; kept so a rebuild only relinks
export GOFLAGS="" GOPROXY=off CGO_ENABLED=0
mkdir -p "$WORK" "$DEST" "$GOCACHE"

# A lock so two concurrent callers (setup + a test) do not build twice.
exec 9>"$DEST/.lock"
flock 9
mapfile -t TODO < <(missing)
if (( ${#TODO[@]} == 0 )); then exit 0; fi

need=()
command -v go >/dev/null || need+=(golang-go)
command -v rsync >/dev/null || need+=(rsync)
command -v etcd >/dev/null || need+=(etcd-server)
dpkg -s golang-github-modern-go-reflect2-dev >/dev/null 2>&1 || need+=(golang-github-modern-go-reflect2-dev)
src_list=/etc/apt/sources.list.d/agentrl-deb-src.sources
if [[ ! -f "$src_list" ]] && ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  # Reuse the machine's configured Debian mirror: same stanzas, source packages only.
  base=/etc/apt/sources.list.d/debian.sources
  [[ -f "$base" ]] || { echo "no $base to derive a deb-src entry from" >&2; exit 1; }
  sed 's/^Types:.*/Types: deb-src/' "$base" >"$src_list"
  need_update=1
fi
if (( ${#need[@]} )) || [[ "${need_update:-0}" == 1 ]]; then
  log "apt-get install ${need[*]:-(source index only)}"
  apt_get update -qq
  (( ${#need[@]} )) && apt_get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  (systemctl stop etcd 2>/dev/null || service etcd stop 2>/dev/null || true) >/dev/null 2>&1
fi

cd "$WORK"
if ! ls kubernetes_*.orig.tar.gz >/dev/null 2>&1; then
  log "apt-get source --download-only kubernetes"
  apt_get source -qq --download-only kubernetes >/dev/null
fi
tree="$WORK/kubernetes-$VERSION"
if [[ ! -d "$tree/vendor" ]]; then
  tar xzf kubernetes_*.orig.tar.gz
fi
mkdir -p gp/src/k8s.io
ln -sfn "$tree" gp/src/k8s.io/kubernetes

# The vendored reflect2 1.0.1 segfaults on Go >= 1.18 (UnsafeMapType.UnsafeIterate);
# Debian's reflect2 1.0.2 source is a drop-in replacement.
V="$tree/vendor/github.com/modern-go/reflect2"
if ! grep -qs 'agentrl: reflect2 swapped' "$V/.agentrl"; then
  rm -f "$V"/*.go "$V"/*.s
  dpkg -L golang-github-modern-go-reflect2-dev | grep -E 'reflect2/[^/]+\.(go|s)$' | grep -v _test \
    | xargs -I{} cp {} "$V/"
  echo 'agentrl: reflect2 swapped' >"$V/.agentrl"
fi

log "building ${TODO[*]} $VERSION (5-15 min each on 2 cores)"
cd "$WORK/gp/src/k8s.io/kubernetes"
targets=()
for name in "${TODO[@]}"; do targets+=("cmd/$name"); done
GOPATH="$WORK/gp" make WHAT="${targets[*]}" >"$WORK/build.log" 2>&1 \
  || { tail -40 "$WORK/build.log" >&2; exit 1; }
for name in "${TODO[@]}"; do
  install -m 0755 "_output/bin/$name" "$DEST/$name.tmp"
  mv "$DEST/$name.tmp" "$DEST/$name"
  "$DEST/$name" --version
done
# The extracted tree is ~600 MB and only needed for a rebuild; the tarball stays for that.
rm -rf "$tree" "$WORK/gp"
log "${TODO[*]} cached in $DEST"
