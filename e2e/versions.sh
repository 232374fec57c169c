# The test bed's pinned versions and where their builds are cached; sourced by install-deps.sh
# and testbed.sh. A change of any version, or of the Go that builds them, is a new cache entry.
# shellcheck shell=bash

# The newest Kubernetes release whose modules build with the machine's Go (its go.mod asks for
# Go 1.26.0). etcd 3.6 is a series this apiserver supports; the release itself ships 3.7.0.
K8S_VERSION=1.37.2
ETCD_VERSION=3.6.16

CACHE_DIR="${COMPOSITOR_CACHE:-$HOME/.cache/compositor}"
TOOLS_BIN="$CACHE_DIR/tools"

# control_plane_dir: the directory holding kube-apiserver, kube-controller-manager and etcd.
control_plane_dir() {
  if [ -n "${KUBE_BIN_DIR:-}" ]; then echo "$KUBE_BIN_DIR"; return; fi
  local go_version
  go_version=$(go env GOVERSION 2>/dev/null) || go_version=no-go
  echo "$CACHE_DIR/control-plane/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-$go_version"
}

# helm_engine_bin: where the resident Helm engine built from helm-engine/ is cached; a change of
# its source or of the Go that builds it is a new entry.
helm_engine_bin() {
  local root key
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  key=$( (cat "$root"/helm-engine/go.mod "$root"/helm-engine/go.sum "$root"/helm-engine/*.go; go env GOVERSION 2>/dev/null) \
    | sha256sum | cut -c1-16)
  echo "$CACHE_DIR/helm-engine/$key/helm-engine"
}
