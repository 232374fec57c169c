#!/usr/bin/env bash
# The test bed: real parts on 127.0.0.1, free ports picked at start, every process tracked by PID.
#
#   e2e/testbed.sh up [--control-plane-only]   start etcd, kube-apiserver, kube-controller-manager,
#                                              an OCI registry and an HTTP chart repository
#   e2e/testbed.sh env                         print the environment tests read (export lines)
#   e2e/testbed.sh restart kube-apiserver      start a stopped API server again, as it was
#   e2e/testbed.sh down                        stop every process this test bed started
#
# TESTBED_DIR (default /tmp/compositor-testbed) holds state, logs and PID files, so several test
# beds (e.g. a second "remote" control plane) can run side by side.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${TESTBED_DIR:-/tmp/compositor-testbed}
# shellcheck source=e2e/versions.sh
. "$ROOT/e2e/versions.sh"
KUBE_BIN=$(control_plane_dir)
TOOLS=$TOOLS_BIN
CORPUS=${COMPOSITOR_CORPUS:-$ROOT/../shared/testdata/corpus}
REAL_CHARTS=${COMPOSITOR_REAL_CHARTS:-$ROOT/../shared/testdata/charts}

log() { printf '[testbed %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start NAME COMMAND...: run in the background, log to logs/NAME.log, remember the PID and the
# command (for restart).
start() {
  local name=$1; shift
  mkdir -p "$DIR/commands"
  printf '%q ' "$@" >"$DIR/commands/$name"
  "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/pids/$name"
}

# restart kube-apiserver: the same command on the same port and data, as after a crash; the
# previous log is kept beside the new one.
restart() {
  local name=${1:-}
  [ "$name" = kube-apiserver ] || die "only kube-apiserver can be restarted"
  [ -f "$DIR/commands/$name" ] || die "no $name was started in $DIR"
  alive "$name" && die "$name is running"
  mv "$DIR/logs/$name.log" "$DIR/logs/$name.previous.log"
  eval "start $name $(cat "$DIR/commands/$name")"
  wait_until "$name" 90 "$TOOLS/kubectl" --kubeconfig "$DIR/kubeconfig" get --raw /readyz
  log "$name restarted"
}

# alive NAME: its process runs (a killed one nobody reaped yet is a zombie, state Z: not alive).
alive() {
  [ -f "$DIR/pids/$1" ] || return 1
  local stat
  stat=$(cat "/proc/$(cat "$DIR/pids/$1")/stat" 2>/dev/null) || return 1
  [ "$(echo "${stat##*) }" | cut -d' ' -f1)" != Z ]
}

# wait_until NAME SECONDS COMMAND...: poll until COMMAND succeeds; fail early if NAME died.
wait_until() {
  local name=$1 limit=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if ! alive "$name"; then tail -30 "$DIR/logs/$name.log" >&2; die "$name exited"; fi
    if [ $SECONDS -ge $deadline ]; then tail -30 "$DIR/logs/$name.log" >&2; die "$name not ready after ${limit}s"; fi
    sleep 0.5
  done
}

random_secret() { head -c 18 /dev/urandom | base64 | tr -d '/+='; }

write_kubeconfig() { # PATH SERVER TOKEN
  cat >"$1" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: $2
    certificate-authority-data: $(base64 -w0 "$DIR/pki/ca.crt")
users:
- name: testbed
  user:
    token: $3
contexts:
- name: testbed
  context: {cluster: testbed, user: testbed, namespace: default}
current-context: testbed
KUBECONFIG
  chmod 600 "$1"
}

pki() {
  mkdir -p "$DIR/pki"; cd "$DIR/pki"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
    -subj "/CN=compositor-testbed-ca" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=127.0.0.1" 2>/dev/null
  printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc" \
    "basicConstraints=CA:FALSE" "keyUsage=digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" >server.ext
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 3650 \
    -extfile server.ext 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  chmod 600 ./*.key
  cd - >/dev/null
}

# check_versions: the binaries are the pinned release (KUBE_BIN_DIR may hold others: say which).
check_versions() {
  local bin
  for bin in kube-apiserver kube-controller-manager etcd; do
    [ -x "$KUBE_BIN/$bin" ] || die "no $bin in $KUBE_BIN: run e2e/install-deps.sh (or set KUBE_BIN_DIR)"
  done
  local kube etcd
  kube=$("$KUBE_BIN/kube-apiserver" --version | awk '{print $2}')
  etcd=$("$KUBE_BIN/etcd" --version | awk '/^etcd Version:/ {print $3}')
  if [ -z "${KUBE_BIN_DIR:-}" ]; then
    [ "$kube" = "v$K8S_VERSION" ] || die "kube-apiserver in $KUBE_BIN is $kube, expected v$K8S_VERSION"
    [ "$etcd" = "$ETCD_VERSION" ] || die "etcd in $KUBE_BIN is $etcd, expected $ETCD_VERSION"
  fi
  log "kube-apiserver $kube, etcd $etcd"
  echo "export COMPOSITOR_TEST_KUBE_VERSION=$kube" >>"$DIR/env"
}

control_plane() {
  check_versions
  local etcd_port etcd_peer api_port kcm_port admin_token kcm_token
  etcd_port=$(free_port); etcd_peer=$(free_port); api_port=$(free_port); kcm_port=$(free_port)
  admin_token=$(random_secret); kcm_token=$(random_secret)
  pki
  start etcd "$KUBE_BIN/etcd" --name testbed --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "testbed=http://127.0.0.1:$etcd_peer" --quota-backend-bytes 4294967296
  wait_until etcd 30 curl -fsS "http://127.0.0.1:$etcd_port/health"

  printf '%s\n' "$admin_token,admin,admin,\"system:masters\"" \
    "$kcm_token,system:kube-controller-manager,kube-controller-manager" >"$DIR/pki/tokens.csv"
  chmod 600 "$DIR/pki/tokens.csv"
  start kube-apiserver "$KUBE_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --tls-cert-file "$DIR/pki/server.crt" --tls-private-key-file "$DIR/pki/server.key" \
    --client-ca-file "$DIR/pki/ca.crt" --token-auth-file "$DIR/pki/tokens.csv" \
    --authorization-mode RBAC --endpoint-reconciler-type none \
    --service-account-key-file "$DIR/pki/sa.pub" --service-account-signing-key-file "$DIR/pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range 10.0.0.0/16 --cert-dir "$DIR/apiserver"
  local server="https://127.0.0.1:$api_port"
  write_kubeconfig "$DIR/kubeconfig" "$server" "$admin_token"
  write_kubeconfig "$DIR/kcm.kubeconfig" "$server" "$kcm_token"
  wait_until kube-apiserver 90 curl -fsS --cacert "$DIR/pki/ca.crt" -H "Authorization: Bearer $admin_token" "$server/readyz"

  start kube-controller-manager "$KUBE_BIN/kube-controller-manager" \
    --kubeconfig "$DIR/kcm.kubeconfig" --bind-address 127.0.0.1 --secure-port "$kcm_port" \
    --cert-dir "$DIR/kcm" --leader-elect=false \
    --controllers garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller \
    --service-account-private-key-file "$DIR/pki/sa.key" --root-ca-file "$DIR/pki/ca.crt" \
    --use-service-account-credentials
  wait_until kube-controller-manager 60 curl -fsSk "https://127.0.0.1:$kcm_port/healthz"
  # The serviceaccount controller creates `default` in every namespace; wait for it as a sign of life.
  wait_until kube-controller-manager 60 "$TOOLS/kubectl" --kubeconfig "$DIR/kubeconfig" get serviceaccount default
  echo "export KUBECONFIG=$DIR/kubeconfig" >>"$DIR/env"
}

package_charts() {
  mkdir -p "$DIR/charts"
  local helm=("$TOOLS/helm")
  for chart in fireworks-app tenant-addon plain optional-kind with-crds; do
    "${helm[@]}" package "$ROOT/testdata/charts/$chart" -d "$DIR/charts" >/dev/null
  done
  "${helm[@]}" package "$ROOT/testdata/charts/fireworks-app" --version 1.1.6 -d "$DIR/charts" >/dev/null
  "${helm[@]}" package "$ROOT/testdata/charts/fireworks-app-2" -d "$DIR/charts" >/dev/null
}

chart_repository() {
  local port user password
  port=$(free_port); user=charts; password=$(random_secret)
  mkdir -p "$DIR/repo"
  cp "$DIR"/charts/*.tgz "$DIR/repo/"
  "$TOOLS/helm" repo index "$DIR/repo" >/dev/null
  : >"$DIR/repo.log"
  CHARTREPO_USERNAME=$user CHARTREPO_PASSWORD=$password \
    start chart-repository python3 "$ROOT/e2e/chartrepo.py" --dir "$DIR/repo" --port "$port" --log "$DIR/repo.log"
  wait_until chart-repository 20 bash -c "curl -sS -o /dev/null -w '%{http_code}' http://127.0.0.1:$port/index.yaml | grep -q 401"
  cat >>"$DIR/env" <<ENV
export COMPOSITOR_TEST_REPO_URL=http://127.0.0.1:$port
export COMPOSITOR_TEST_REPO_USERNAME=$user
export COMPOSITOR_TEST_REPO_PASSWORD=$password
export COMPOSITOR_TEST_REPO_LOG=$DIR/repo.log
ENV
}

oci_registry() {
  local port user password
  port=$(free_port); user=registry; password=$(random_secret)
  mkdir -p "$DIR/registry"
  htpasswd -Bbn "$user" "$password" >"$DIR/registry/htpasswd" 2>/dev/null
  cat >"$DIR/registry/config.yml" <<CONFIG
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $DIR/registry/data}
  delete: {enabled: true}
http:
  addr: 127.0.0.1:$port
  secret: $(random_secret)
auth:
  htpasswd: {realm: compositor-testbed, path: $DIR/registry/htpasswd}
CONFIG
  start oci-registry docker-registry serve "$DIR/registry/config.yml"
  wait_until oci-registry 20 bash -c "curl -sS -o /dev/null -w '%{http_code}' http://127.0.0.1:$port/v2/ | grep -q 401"
  printf '%s' "$password" | "$TOOLS/helm" registry login "127.0.0.1:$port" --username "$user" --password-stdin --plain-http >/dev/null
  for chart in "$DIR"/charts/*.tgz; do
    "$TOOLS/helm" push "$chart" "oci://127.0.0.1:$port/charts" --plain-http >/dev/null 2>&1 \
      || die "helm push $chart failed"
  done
  # Tests log in themselves: credentials must be proven necessary, not inherited.
  "$TOOLS/helm" registry logout "127.0.0.1:$port" >/dev/null 2>&1
  cat >>"$DIR/env" <<ENV
export COMPOSITOR_TEST_REGISTRY=127.0.0.1:$port
export COMPOSITOR_TEST_REGISTRY_USERNAME=$user
export COMPOSITOR_TEST_REGISTRY_PASSWORD=$password
ENV
}

timed() { local start=$SECONDS; "$@"; log "$1 ready in $((SECONDS - start))s"; }

up() {
  if [ -f "$DIR/env" ] && alive kube-apiserver; then log "already up in $DIR"; cat "$DIR/env"; return; fi
  down >/dev/null 2>&1 || true
  mkdir -p "$DIR/logs" "$DIR/pids" "$DIR/helm"
  export HELM_CONFIG_HOME=$DIR/helm/config HELM_CACHE_HOME=$DIR/helm/cache HELM_DATA_HOME=$DIR/helm/data
  cat >"$DIR/env" <<ENV
export TESTBED_DIR=$DIR
export HELM_BIN=$TOOLS/helm
export KUBECTL_BIN=$TOOLS/kubectl
export HELM_CONFIG_HOME=$HELM_CONFIG_HOME
export HELM_CACHE_HOME=$HELM_CACHE_HOME
export HELM_DATA_HOME=$HELM_DATA_HOME
ENV
  trap 'status=$?; if [ $status -ne 0 ]; then log "start failed; stopping what started"; down; fi' EXIT
  timed control_plane
  if [ "${1:-}" != "--control-plane-only" ]; then
    timed package_charts
    echo "export COMPOSITOR_TEST_CHARTS=$DIR/charts" >>"$DIR/env"
    timed chart_repository
    timed oci_registry
    [ -d "$CORPUS" ] && echo "export COMPOSITOR_CORPUS=$(cd "$CORPUS" && pwd)" >>"$DIR/env"
    [ -d "$REAL_CHARTS" ] && echo "export COMPOSITOR_REAL_CHARTS=$(cd "$REAL_CHARTS" && pwd)" >>"$DIR/env"
  fi
  trap - EXIT
  log "up in $DIR"
  cat "$DIR/env"
}

down() {
  [ -d "$DIR/pids" ] || return 0
  local pid
  for pidfile in "$DIR"/pids/*; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
  done
  for pidfile in "$DIR"/pids/*; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
  # Logs stay for post-mortems; state goes.
  find "$DIR" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
  log "down: $DIR"
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  env) [ -f "$DIR/env" ] || die "test bed in $DIR is not up"; cat "$DIR/env" ;;
  restart) shift; restart "$@" ;;
  *) echo "usage: $0 up [--control-plane-only] | env | restart kube-apiserver | down" >&2; exit 2 ;;
esac
