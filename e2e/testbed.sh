#!/usr/bin/env bash
# The test bed: real parts on 127.0.0.1, free ports picked at start, every process tracked by PID.
#
#   e2e/testbed.sh up [--control-plane-only]   start etcd, kube-apiserver, kube-controller-manager,
#                                              an OCI registry and an HTTP chart repository
#   e2e/testbed.sh up --node [IMAGE_ARCHIVE...]  the same and a real node (kubelet, kube-scheduler,
#                                              containerd, runc, CNI) running pods of the images
#                                              in the archives (see node() below)
#   e2e/testbed.sh load IMAGE_ARCHIVE...       import images into the node's containerd
#   e2e/testbed.sh expose PORT...              let pods reach a loopback port at the node's address
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
# The `kubernetes` Service's address in the service range the API server is given: pods reach
# the API server there (through the node's DNAT, see node_network).
SERVICE_RANGE=10.0.0.0/16
SERVICE_IP=10.0.0.1
# Set by `up --node`: a node runs, and the chart repository listens on its bridge's address,
# which pods and this machine both reach (127.0.0.1 inside a pod is the pod). The OCI registry
# stays on 127.0.0.1, where clients speak plain HTTP to it; pods reach it through `expose`.
NODE=
HOST_ADDR=127.0.0.1
TOOLS=$TOOLS_BIN

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
  printf '%s\n' "subjectAltName=IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes.default.svc" \
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
  if [ -n "$NODE" ]; then
    local scheduler_token node_token
    scheduler_token=$(random_secret); node_token=$(random_secret)
    printf '%s\n' "$scheduler_token,system:kube-scheduler,kube-scheduler" \
      "$node_token,system:node:$NODE_NAME,kubelet,\"system:nodes\"" >>"$DIR/pki/tokens.csv"
  fi
  chmod 600 "$DIR/pki/tokens.csv"
  start kube-apiserver "$KUBE_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --tls-cert-file "$DIR/pki/server.crt" --tls-private-key-file "$DIR/pki/server.key" \
    --client-ca-file "$DIR/pki/ca.crt" --token-auth-file "$DIR/pki/tokens.csv" \
    --authorization-mode RBAC --endpoint-reconciler-type none \
    --service-account-key-file "$DIR/pki/sa.pub" --service-account-signing-key-file "$DIR/pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range "$SERVICE_RANGE" --cert-dir "$DIR/apiserver" \
    --kubelet-preferred-address-types InternalIP
  local server="https://127.0.0.1:$api_port"
  write_kubeconfig "$DIR/kubeconfig" "$server" "$admin_token"
  write_kubeconfig "$DIR/kcm.kubeconfig" "$server" "$kcm_token"
  if [ -n "$NODE" ]; then
    mkdir -p "$DIR/node"
    write_kubeconfig "$DIR/scheduler.kubeconfig" "$server" "$scheduler_token"
    write_kubeconfig "$DIR/node/kubelet.kubeconfig" "$server" "$node_token"
    echo "$api_port" >"$DIR/node/api-port"
  fi
  wait_until kube-apiserver 90 curl -fsS --cacert "$DIR/pki/ca.crt" -H "Authorization: Bearer $admin_token" "$server/readyz"

  # Aggregated ClusterRoles are filled as on any cluster (kyverno's are approved lines).
  local controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,clusterrole-aggregation-controller
  # What a node's pods need besides: Deployments become ReplicaSets become Pods, Jobs and
  # StatefulSets run theirs, each namespace gets the API server's CA for in-cluster config, and
  # pods of a lost node are cleaned up.
  [ -z "$NODE" ] || controllers=$controllers,deployment-controller,replicaset-controller,job-controller,statefulset-controller,root-ca-certificate-publisher-controller,node-lifecycle-controller,pod-garbage-collector-controller
  start kube-controller-manager "$KUBE_BIN/kube-controller-manager" \
    --kubeconfig "$DIR/kcm.kubeconfig" --bind-address 127.0.0.1 --secure-port "$kcm_port" \
    --cert-dir "$DIR/kcm" --leader-elect=false --controllers "$controllers" \
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
  for chart in fireworks-app tenant-addon plain optional-kind with-crds proxier; do
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
    start chart-repository python3 "$ROOT/e2e/chartrepo.py" --host "$HOST_ADDR" --dir "$DIR/repo" --port "$port" --log "$DIR/repo.log"
  wait_until chart-repository 20 bash -c "curl -sS -o /dev/null -w '%{http_code}' http://$HOST_ADDR:$port/index.yaml | grep -q 401"
  cat >>"$DIR/env" <<ENV
export COMPOSITOR_TEST_REPO_URL=http://$HOST_ADDR:$port
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

# --- The node -------------------------------------------------------------------------------
# kubelet and kube-scheduler of the pinned release, containerd, runc and the CNI plugins from
# Debian's packages. Each test bed's node has its own name, bridge, /24, DNAT chain and cgroup,
# all named after a hash of its directory, so several run side by side; `down` removes them.

# node_support: why this machine cannot run a node, or nothing.
node_support() {
  [ "$(id -u)" = 0 ] || { echo "a node needs root (mounts, a bridge, iptables)"; return; }
  unshare --mount --pid --fork true 2>/dev/null || { echo "a node needs CAP_SYS_ADMIN (unshare --mount --pid failed)"; return; }
  local bin
  for bin in containerd runc ctr iptables ip gcc; do
    command -v "$bin" >/dev/null || { echo "a node needs $bin: run e2e/install-deps.sh"; return; }
  done
  [ -x /usr/lib/cni/bridge ] || { echo "a node needs the CNI plugins: run e2e/install-deps.sh"; return; }
  for bin in kubelet kube-scheduler; do
    [ -x "$KUBE_BIN/$bin" ] || { echo "no $bin in $KUBE_BIN: run e2e/install-deps.sh"; return; }
  done
}

node_names() {
  local id
  id=$(printf '%s' "$DIR" | sha256sum | cut -c1-8)
  NODE_NAME=node-$id BRIDGE=cmp$id CHAIN=COMPOSITOR-$id CGROUP=compositor-testbed-$id
}

# pause_image: the pod sandbox image, a static pause built here once per machine.
pause_image() {
  local src=$ROOT/e2e/node/pause.c dir
  dir=$CACHE_DIR/pause-$(sha256sum "$src" | cut -c1-12)
  if [ ! -f "$dir/pause.tar" ]; then
    local work; work=$(mktemp -d)
    mkdir -p "$work/rootfs"
    gcc -static -O2 -s -o "$work/rootfs/pause" "$src"
    python3 "$ROOT/e2e/ociarchive.py" --rootfs "$work/rootfs" --name "$PAUSE_IMAGE" --out "$work/pause.tar" \
      --entrypoint '["/pause"]' --user 65535:65535
    mkdir -p "$dir"; mv "$work/pause.tar" "$dir/pause.tar"; rm -rf "$work"
  fi
  echo "$dir/pause.tar"
}
PAUSE_IMAGE=localhost/pause:3.10

# node_network: a bridge with a free 10.250.N.0/24 (the node's address is .1); pods route the
# service range through it, and the DNAT chain sends the `kubernetes` Service to the loopback
# API server. route_localnet (on this bridge only) lets those packets reach 127.0.0.1. Nothing
# else changes: no masquerade, no forwarding, no kube-proxy.
node_network() {
  local start n i
  # Test beds starting side by side take their subnets one at a time.
  exec 9>"$CACHE_DIR/node-network.lock"
  flock 9
  start=$((16#${NODE_NAME:5:2}))
  for i in $(seq 0 255); do
    n=$(((start + i) % 256))
    ip -4 -o addr show | grep -q " 10\.250\.$n\." || break
  done
  ip -4 -o addr show | grep -q " 10\.250\.$n\." && die "no free /24 in 10.250.0.0/16 for the node"
  NODE_SUBNET=10.250.$n.0/24 HOST_ADDR=10.250.$n.1
  printf '%s\n' "BRIDGE=$BRIDGE" "CHAIN=$CHAIN" "CGROUP=$CGROUP" "HOST_ADDR=$HOST_ADDR" >"$DIR/node/network"
  ip link add "$BRIDGE" type bridge
  ip addr add "$HOST_ADDR/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  echo 1 >"/proc/sys/net/ipv4/conf/$BRIDGE/route_localnet"
  iptables -w -t nat -N "$CHAIN"
  iptables -w -t nat -A "$CHAIN" -d "$SERVICE_IP/32" -p tcp --dport 443 -j DNAT \
    --to-destination "127.0.0.1:$(cat "$DIR/node/api-port")"
  iptables -w -t nat -A PREROUTING -i "$BRIDGE" -j "$CHAIN"
  exec 9>&-
}

node_network_down() {
  [ -f "$DIR/node/network" ] || return 0
  local BRIDGE CHAIN CGROUP
  # shellcheck disable=SC1091
  . "$DIR/node/network"
  iptables -w -t nat -D PREROUTING -i "$BRIDGE" -j "$CHAIN" 2>/dev/null || true
  iptables -w -t nat -F "$CHAIN" 2>/dev/null || true
  iptables -w -t nat -X "$CHAIN" 2>/dev/null || true
  ip link del "$BRIDGE" 2>/dev/null || true
}

# node_cgroup_down: the node's cgroup tree, removed once its processes are gone (a private
# mount of cgroup2, so the machine's mounts stay as they are).
node_cgroup_down() {
  [ -f "$DIR/node/network" ] || return 0
  local CGROUP
  # shellcheck disable=SC1091
  CGROUP=$(. "$DIR/node/network"; echo "$CGROUP")
  unshare --mount bash -c '
    mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null || exit 0
    root=/sys/fs/cgroup/$1
    [ -d "$root" ] || exit 0
    for _ in $(seq 100); do
      find "$root" -depth -type d -exec rmdir {} + 2>/dev/null
      [ -d "$root" ] || exit 0
      sleep 0.1
    done
    echo "cgroup $1 still has processes" >&2' _ "$CGROUP" || true
  if [ -f "$DIR/node/created-dirs" ]; then
    xargs -r rmdir 2>/dev/null <"$DIR/node/created-dirs" || true
  fi
}

node_config() {
  local node=$DIR/node kubelet_port healthz_port
  kubelet_port=$(free_port); healthz_port=$(free_port)
  mkdir -p "$node/cni" "$node/kubelet" "$DIR/pods"
  cat >"$node/containerd.toml" <<TOML
version = 2
root = "$node/containerd/root"
state = "$node/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$node/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Containers get no cgroup limits (the node's cgroup2 has no controllers) and keep the
  # machine's OOM score (no CAP_SYS_RESOURCE to lower it).
  disable_cgroup = true
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$node/cni"
[plugins."io.containerd.internal.v1.opt"]
  path = "$node/containerd/opt"
TOML
  cat >"$node/cni/10-testbed.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "testbed", "plugins": [{
  "type": "bridge", "bridge": "$BRIDGE", "isGateway": false, "ipMasq": false,
  "ipam": {"type": "host-local", "dataDir": "$node/ipam",
    "ranges": [[{"subnet": "$NODE_SUBNET", "gateway": "$HOST_ADDR"}]],
    "routes": [{"dst": "$SERVICE_RANGE", "gw": "$HOST_ADDR"}]}}]}
JSON
  cat >"$node/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $HOST_ADDR
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$node/containerd.sock
# No cgroup controllers on this node: limits are accepted, not enforced.
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
podLogsDir: $DIR/pods
# Every image was imported here and none can be pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
registerNode: true
# A container that keeps failing is restarted every 2 s at most (not 10 s doubling to 5 min), so
# that a crash loop shows within seconds.
crashLoopBackOff: {maxContainerRestartPeriod: 2s}
YAML
}

# images_policy: pods may only use images imported here (localhost/...); any other would make
# containerd try the internet, which the test bed never reaches.
images_policy() {
  "$TOOLS/kubectl" --kubeconfig "$DIR/kubeconfig" apply -f - >/dev/null <<'YAML'
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: testbed-local-images}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
    - expression: >-
        object.spec.containers.all(c, c.image.startsWith('localhost/')) &&
        (!has(object.spec.initContainers) || object.spec.initContainers.all(c, c.image.startsWith('localhost/')))
      messageExpression: >-
        'the test bed pulls no images: ' + object.spec.containers.map(c, c.image).join(', ') +
        ' must be built here and loaded (e2e/testbed.sh load ARCHIVE) under localhost/'
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: testbed-local-images}
spec:
  policyName: testbed-local-images
  validationActions: [Deny]
YAML
}

# expose PORT...: pods reach a loopback-only service of this machine (e.g. a second test bed's
# API server) at the node's address and the same port.
expose() {
  [ -f "$DIR/node/network" ] || die "no node in $DIR (up --node)"
  local CHAIN HOST_ADDR port
  # shellcheck disable=SC1091
  . "$DIR/node/network"
  for port in "$@"; do
    iptables -w -t nat -A "$CHAIN" -d "$HOST_ADDR/32" -p tcp --dport "$port" -j DNAT --to-destination "127.0.0.1:$port"
  done
}

# load ARCHIVE...: import OCI archives into the node's containerd (the kubelet's namespace).
load() {
  [ -S "$DIR/node/containerd.sock" ] || die "no node in $DIR (up --node)"
  local archive
  for archive in "$@"; do
    ctr --address "$DIR/node/containerd.sock" -n k8s.io images import "$archive" >/dev/null \
      || die "ctr images import $archive failed"
  done
}

node() {
  pause_image >"$DIR/node/pause-archive"
  node_network
  node_config
  start kube-scheduler "$KUBE_BIN/kube-scheduler" --kubeconfig "$DIR/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$(free_port)" --leader-elect=false
  "$TOOLS/kubectl" --kubeconfig "$DIR/kubeconfig" create clusterrolebinding testbed-node \
    --clusterrole system:node --user "system:node:$NODE_NAME" >/dev/null
  images_policy
  NODE_NAME=$NODE_NAME NODE_IP=$HOST_ADDR KUBELET=$KUBE_BIN/kubelet NODE_LOGS=$DIR/logs \
    start node unshare --mount --pid --fork --mount-proc --kill-child=SIGKILL --propagation private \
    "$ROOT/e2e/node/node.sh" "$DIR/node" "$CGROUP"
  wait_until node 30 test -S "$DIR/node/containerd.sock"
  load "$(cat "$DIR/node/pause-archive")" "$@"
  wait_until node 90 "$TOOLS/kubectl" --kubeconfig "$DIR/kubeconfig" wait "node/$NODE_NAME" --for=condition=Ready --timeout=1s
  printf '%s\n' "export COMPOSITOR_TEST_NODE=$NODE_NAME" "export COMPOSITOR_TEST_NODE_ADDRESS=$HOST_ADDR" >>"$DIR/env"
}

timed() { local start=$SECONDS; "$@"; log "$1 ready in $((SECONDS - start))s"; }

up() {
  if [ -f "$DIR/env" ] && alive kube-apiserver; then log "already up in $DIR"; cat "$DIR/env"; return; fi
  down >/dev/null 2>&1 || true
  local mode=${1:-}
  [ $# -eq 0 ] || shift
  if [ "$mode" = --node ]; then
    NODE=1
    node_names
    local why; why=$(node_support)
    [ -z "$why" ] || die "$why"
  fi
  mkdir -p "$DIR/logs" "$DIR/pids" "$DIR/helm" "$DIR/node"
  export HELM_CONFIG_HOME=$DIR/helm/config HELM_CACHE_HOME=$DIR/helm/cache HELM_DATA_HOME=$DIR/helm/data
  cat >"$DIR/env" <<ENV
export TESTBED_DIR=$DIR
export HELM_BIN=$TOOLS/helm
export HELM_ENGINE=$(helm_engine_bin)
export KUBECTL_BIN=$TOOLS/kubectl
export HELM_CONFIG_HOME=$HELM_CONFIG_HOME
export HELM_CACHE_HOME=$HELM_CACHE_HOME
export HELM_DATA_HOME=$HELM_DATA_HOME
ENV
  trap 'status=$?; if [ $status -ne 0 ]; then log "start failed; stopping what started"; down; fi' EXIT
  timed control_plane
  [ -z "$NODE" ] || timed node "$@"
  if [ "$mode" != "--control-plane-only" ]; then
    timed package_charts
    echo "export COMPOSITOR_TEST_CHARTS=$DIR/charts" >>"$DIR/env"
    timed chart_repository
    timed oci_registry
  fi
  trap - EXIT
  log "up in $DIR"
  cat "$DIR/env"
}

down() {
  [ -d "$DIR/pids" ] || return 0
  local pid
  # The node's state is thrown away: its namespace is killed at once (its unshare ignores
  # SIGTERM; with it go containerd, kubelet, shims and pods).
  if [ -f "$DIR/pids/node" ]; then kill -9 "$(cat "$DIR/pids/node")" 2>/dev/null || true; fi
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
  node_cgroup_down
  node_network_down
  # Logs stay for post-mortems; state goes.
  find "$DIR" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
  log "down: $DIR"
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  env) [ -f "$DIR/env" ] || die "test bed in $DIR is not up"; cat "$DIR/env" ;;
  restart) shift; restart "$@" ;;
  load) shift; load "$@" ;;
  expose) shift; expose "$@" ;;
  node-support) node_support ;;
  *) echo "usage: $0 up [--control-plane-only | --node [IMAGE_ARCHIVE...]] | env | load IMAGE_ARCHIVE... | expose PORT... | restart kube-apiserver | node-support | down" >&2; exit 2 ;;
esac
