#!/usr/bin/env bash
# The demo: a chart becomes a Kubernetes API on the local control plane.
# The test bed and the operator stay up afterwards (stop both with `make down`).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export TESTBED_DIR=${TESTBED_DIR:-/tmp/compositor-testbed}
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '\033[2m$ %s\033[0m\n' "$*"; "$@"; }

step "Building compositor and its image (e2e/image.sh: an OCI archive, no container engine)"
cargo build --quiet --bin compositor
COMPOSITOR=${CARGO_TARGET_DIR:-$ROOT/target}/debug/compositor
# The debug build, as the tests use: `make image` makes the release one.
IMAGE=$(COMPOSITOR_BIN=$COMPOSITOR IMAGE_ARCHIVE="${CARGO_TARGET_DIR:-$ROOT/target}/image/compositor-debug.tar" \
  "$ROOT/e2e/image.sh")
ls -lh "$IMAGE"

# A real node where the machine allows one (root, CAP_SYS_ADMIN) unless NODE=0; else
# compositor's Deployments run as local processes.
if [ "${NODE:-1}" = 0 ]; then NODE_MISSING="NODE=0"; else NODE_MISSING=$("$ROOT/e2e/testbed.sh" node-support); fi
if [ -z "$NODE_MISSING" ]; then
  step "Starting the test bed in $TESTBED_DIR: a current kube-apiserver, a node (kubelet, containerd), an OCI registry, a Helm repository"
  "$ROOT/e2e/testbed.sh" up --node "$IMAGE" >/dev/null
else
  step "Starting the test bed in $TESTBED_DIR: a current kube-apiserver, an OCI registry, a Helm repository"
  echo "no node ($NODE_MISSING): compositor's Deployments run as local processes"
  "$ROOT/e2e/testbed.sh" up >/dev/null
fi
eval "$("$ROOT/e2e/testbed.sh" env)"
if [ -z "$NODE_MISSING" ]; then HEALTH_MODE=Wait; else HEALTH_MODE=Ignore; fi
kubectl() { "$KUBECTL_BIN" "$@"; }
if [ -z "$NODE_MISSING" ]; then run kubectl get nodes -o wide; fi
run kubectl get namespaces

step "Offline: the CRD a chart becomes (compositor crd), lossy steps on stderr"
run "$COMPOSITOR" crd "$COMPOSITOR_TEST_CHARTS/fireworks-app-1.1.5.tgz" | sed -n '/openAPIV3Schema/,/^ *git:/p' | head -32

# Deployment $2 in namespace $1 runs: on the node its pods become Ready; without a node this
# plays kubelet, running its arguments with the local binary and a token of its own
# ServiceAccount, so the process has exactly the RBAC compositor (or its chart) gave it.
deployment_runs() {
  if [ -z "$NODE_MISSING" ]; then
    for _ in $(seq 120); do kubectl -n "$1" get deployment "$2" >/dev/null 2>&1 && break; sleep 0.5; done
    run kubectl -n "$1" rollout status deployment "$2" --timeout=180s
    run kubectl -n "$1" get pods -l "$(kubectl -n "$1" get deployment "$2" \
      -o go-template='{{range $k, $v := .spec.selector.matchLabels}}{{$k}}={{$v}},{{end}}' | sed 's/,$//')" -o wide
    return
  fi
  local namespace=$1 deployment=$2 pidfile="$TESTBED_DIR/pids/$2"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then return; fi
  local token account
  account=$(kubectl -n "$namespace" get deployment "$deployment" -o jsonpath='{.spec.template.spec.serviceAccountName}')
  token=$(kubectl -n "$namespace" create token "$account")
  python3 - "$KUBECONFIG" "$token" >"$TESTBED_DIR/$deployment.kubeconfig" <<'PY'
import sys, re
text = open(sys.argv[1]).read()
print(re.sub(r"token: .*", "token: " + sys.argv[2], text))
PY
  chmod 600 "$TESTBED_DIR/$deployment.kubeconfig"
  mapfile -t args < <(kubectl -n "$namespace" get deployment "$deployment" -o jsonpath='{range .spec.template.spec.containers[0].args[*]}{@}{"\n"}{end}')
  printf '\033[2m$ compositor %s\033[0m\n' "${args[*]}"
  KUBECONFIG="$TESTBED_DIR/$deployment.kubeconfig" POD_NAME="$deployment-demo" POD_NAMESPACE="$namespace" \
    "$COMPOSITOR" "${args[@]}" --metrics-address 127.0.0.1:0 \
    --cache-dir "$TESTBED_DIR/$deployment-cache" >"$TESTBED_DIR/logs/$deployment.log" 2>&1 &
  echo $! >"$pidfile"
}
run_controller() { deployment_runs "${2:-demo}" "$1"; }

step "The Tenant chart (cert-manager v1.19.1) is published to the password-protected Helm repository"
cp "$ROOT/testdata/real-charts/cert-manager-v1.19.1.tgz" "$TESTBED_DIR/repo/"
"$HELM_BIN" repo index "$TESTBED_DIR/repo" >/dev/null
for namespace in compositor-system demo; do
  kubectl create namespace "$namespace" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
done
kubectl -n compositor-system create secret generic helm-repo --from-literal=token="$COMPOSITOR_TEST_REPO_PASSWORD" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null

step "helm install compositor: its CRDs, RBAC, admission policy, Deployment and the Tenant API"
if [ -z "$NODE_MISSING" ]; then IMAGE_VALUES=(--set image.repository=localhost/compositor); else IMAGE_VALUES=(--set image.tag=dev); fi
run "$HELM_BIN" upgrade --install compositor "$ROOT/charts/compositor" -n compositor-system \
  "${IMAGE_VALUES[@]}" --set 'credentialNamespaces={demo}' \
  --set tenant.chart.url="$COMPOSITOR_TEST_REPO_URL" \
  --set tenant.chart.credentials.username="$COMPOSITOR_TEST_REPO_USERNAME" \
  --set tenant.chart.credentials.passwordRef.name=helm-repo --set tenant.chart.credentials.passwordRef.key=token
run kubectl -n compositor-system get deployment,serviceaccount,compositiondefinitions
run kubectl get clusterrole "compositor-operator:compositor-system:compositor" -o jsonpath='{range .rules[*]}{.verbs}{" "}{.resources}{"\n"}{end}'
SA=system:serviceaccount:compositor-system:compositor
for check in "get secrets -n kube-system" "create customresourcedefinitions" "escalate clusterroles"; do
  # shellcheck disable=SC2086
  printf '  can the operator %-40s %s\n' "$check?" "$(kubectl auth can-i $check --as "$SA" 2>/dev/null || true)"
done

step "The operator Deployment runs (on the node, or locally with its ServiceAccount's token)"
deployment_runs compositor-system compositor
run kubectl -n compositor-system wait compositiondefinition/tenant --for=condition=Ready --timeout=180s

step "A platform team publishes fireworks-app 1.1.5 from the password-protected Helm repository"
kubectl -n demo create secret generic helm-repo --from-literal=token="$COMPOSITOR_TEST_REPO_PASSWORD" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
cat >"$TESTBED_DIR/fireworksapp.yaml" <<YAML
apiVersion: compositor.dev/v1alpha1
kind: CompositionDefinition
metadata:
  name: fireworksapp
  namespace: demo
spec:
  chart:
    url: $COMPOSITOR_TEST_REPO_URL
    repo: fireworks-app
    version: 1.1.5
    credentials:
      username: $COMPOSITOR_TEST_REPO_USERNAME
      passwordRef: {name: helm-repo, key: token}
  # Ready waits for what a release runs; without a node nothing runs, so Helm's write is enough.
  health: {mode: $HEALTH_MODE}
YAML
run kubectl apply -f "$TESTBED_DIR/fireworksapp.yaml"
run kubectl -n demo wait compositiondefinition/fireworksapp --for=condition=Ready --timeout=120s
run kubectl -n demo get compositiondefinitions

step "The new API"
run kubectl get crd fireworksapps.composition.compositor.dev
printf '  spec fields: %s\n' "$(kubectl get crd fireworksapps.composition.compositor.dev \
  -o jsonpath='{.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties}' \
  | python3 -c 'import json,sys; print(", ".join(sorted(json.load(sys.stdin))))')"

step "Its controller, with RBAC derived from what the chart writes with its default values"
run kubectl -n demo get compositiondefinition fireworksapp -o jsonpath='{.status.versions[0].footprint}'; echo
run kubectl -n demo get deployment,serviceaccount -l compositor.dev/definition=demo.fireworksapp
run kubectl get clusterrole -l compositor.dev/definition=demo.fireworksapp
SA=system:serviceaccount:demo:fireworksapps-v1-1-5-controller
for check in "list fireworksapps.composition.compositor.dev -A" "get secret/helm-repo -n demo" \
             "get secrets -n kube-system" "create clusterroles"; do
  # shellcheck disable=SC2086
  printf '  can the controller %-48s %s\n' "$check?" "$(kubectl auth can-i $check --as "$SA" 2>/dev/null || true)"
done

step "The controller Deployment runs (on the node, or locally with its own ServiceAccount token)"
run_controller fireworksapps-v1-1-5-controller

step "A user asks for a FireworksApp: it becomes a Helm release, Ready once its pod runs"
kubectl create namespace acme --dry-run=client -o yaml | kubectl apply -f - >/dev/null
cat >"$TESTBED_DIR/acme.yaml" <<YAML
apiVersion: composition.compositor.dev/v1-1-5
kind: FireworksApp
metadata:
  name: acme
  namespace: acme
spec:
  git: {repository: acme}
  app: {greeting: hello from acme}
  # The node has one image, its pause image, which runs as the app here.
  image: {repository: localhost/pause, tag: "3.10", pullPolicy: Never}
YAML
run kubectl apply -f "$TESTBED_DIR/acme.yaml"
run kubectl -n acme wait fireworksapp/acme --for=condition=Ready --timeout=120s
run kubectl -n acme get fireworksapps
run "$HELM_BIN" list -n acme
run kubectl -n acme get configmap acme-config -o jsonpath='{.data.greeting}'; echo

step "The platform team moves everyone to chart 1.1.6: one patch"
run kubectl -n demo patch compositiondefinition fireworksapp --type=merge -p '{"spec":{"chart":{"version":"1.1.6"}}}'
for _ in $(seq 120); do
  kubectl -n demo get deployment fireworksapps-v1-1-6-controller >/dev/null 2>&1 && break
  sleep 0.5
done
run_controller fireworksapps-v1-1-6-controller
# Read through the API itself: kubectl's discovery cache still knows the version that went.
moved() {
  kubectl get --raw /apis/composition.compositor.dev/v1-1-6/namespaces/acme/fireworksapps/acme 2>/dev/null |
    python3 -c 'import json, sys; s = json.load(sys.stdin).get("status", {}); sys.exit(s.get("chart", {}).get("version") != "1.1.6" or s.get("phase") != "Ready")'
}
for _ in $(seq 240); do
  moved && ! kubectl -n demo get deployment fireworksapps-v1-1-5-controller >/dev/null 2>&1 && break
  sleep 0.5
done
run "$HELM_BIN" history acme -n acme
run kubectl -n demo get deployments
run kubectl get crd fireworksapps.composition.compositor.dev -o jsonpath='{.spec.versions[*].name}'; echo

step "A bad chart version reaches one release, and is rolled back"
# fireworks-app 1.1.7: 1.1.6 with a ConfigMap whose name the API server refuses.
bad=$(mktemp -d)
tar -xzf "$COMPOSITOR_TEST_CHARTS/fireworks-app-1.1.6.tgz" -C "$bad"
sed -i 's/^version: 1.1.6$/version: 1.1.7/' "$bad/fireworks-app/Chart.yaml"
printf "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 'Not_A_Valid_Name'}\n" >"$bad/fireworks-app/templates/refused.yaml"
"$HELM_BIN" package "$bad/fireworks-app" -d "$TESTBED_DIR/repo" >/dev/null
"$HELM_BIN" repo index "$TESTBED_DIR/repo" >/dev/null
rm -rf "$bad"
run kubectl -n demo patch compositiondefinition fireworksapp --type=merge -p '{"spec":{"chart":{"version":"1.1.7"}}}'
for _ in $(seq 120); do
  kubectl -n demo get deployment fireworksapps-v1-1-7-controller >/dev/null 2>&1 && break
  sleep 0.5
done
# On the node its pod starts by itself, and the rollback removes its Deployment as soon as the
# refused upgrade is seen, which may be before the pod reports available: only without a node
# is it run here.
if [ -n "$NODE_MISSING" ]; then run_controller fireworksapps-v1-1-7-controller; fi
run kubectl -n demo wait compositiondefinition/fireworksapp --for=jsonpath='{.status.rollout.phase}'=RolledBack --timeout=180s
run kubectl -n demo get compositiondefinition fireworksapp -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}'; echo
for _ in $(seq 240); do moved && break; sleep 0.5; done
run "$HELM_BIN" history acme -n acme
run kubectl -n demo get compositiondefinition fireworksapp -o jsonpath='{.status.rollout}'; echo

step "A composition waits for the one it depends on"
# Named with its version: kubectl's discovery cache may still know the version that went.
apps=fireworksapps.v1-1-6.composition.compositor.dev
for name in acme-web acme-db; do
  needs=""
  if [ "$name" = acme-web ]; then needs="dependsOn: [{kind: FireworksApp, name: acme-db}]"; fi
  cat >"$TESTBED_DIR/$name.yaml" <<YAML
apiVersion: composition.compositor.dev/v1-1-6
kind: FireworksApp
metadata: {name: $name, namespace: acme}
spec:
  $needs
  git: {repository: acme}
  image: {repository: localhost/pause, tag: "3.10", pullPolicy: Never}
YAML
done
run kubectl apply -f "$TESTBED_DIR/acme-web.yaml"
run kubectl -n acme wait "$apps/acme-web" --for=jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'=DependencyNotReady --timeout=60s
run kubectl -n acme get "$apps/acme-web" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}'; echo
run kubectl apply -f "$TESTBED_DIR/acme-db.yaml"
run kubectl -n acme wait "$apps/acme-web" --for=condition=Ready --timeout=120s
run "$HELM_BIN" list -n acme

step "The default composition: a Tenant gets cert-manager in a namespace of its own"
run_controller tenants-v1-19-1-controller compositor-system
cat >"$TESTBED_DIR/tenant.yaml" <<YAML
apiVersion: composition.compositor.dev/v1-19-1
kind: Tenant
metadata:
  name: globex
  namespace: demo
spec:
  # cert-manager's post-install check waits for its pods, which never run here: their images are
  # public, and the test bed pulls none.
  startupapicheck: {enabled: false}
YAML
run kubectl apply -f "$TESTBED_DIR/tenant.yaml"
run kubectl -n demo wait tenant/globex --for=condition=Installed --timeout=180s
# Ready waits for cert-manager's pods, whose public images the test bed pulls none of (on the
# node, an admission policy refuses their pods): the Tenant says what it waits for.
run kubectl -n demo wait tenant/globex --for=jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'=Progressing --timeout=180s
run kubectl -n demo get tenant globex -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}'; echo
run kubectl -n demo get tenants
run "$HELM_BIN" list -n globex
run kubectl -n globex get deployments

step "A composition in the Tenant's namespace waits for the Tenant that made it"
cat >"$TESTBED_DIR/globex-web.yaml" <<YAML
apiVersion: composition.compositor.dev/v1-1-6
kind: FireworksApp
metadata: {name: web, namespace: globex}
spec:
  dependsOn: [{kind: Tenant, name: globex}]
  git: {repository: globex}
YAML
run kubectl apply -f "$TESTBED_DIR/globex-web.yaml"
run kubectl -n globex wait "$apps/web" --for=jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'=DependencyNotReady --timeout=60s
# Once the operator lets its controller read Tenants, it names the Tenant's own reason.
for _ in $(seq 120); do
  kubectl -n globex get "$apps/web" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}' \
    | grep -q '^waiting for Tenant demo/globex: Progressing' && break
  sleep 0.5
done
run kubectl -n globex get "$apps/web" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}'; echo

step "A second cluster registers with a Secret: every Tenant is installed there too"
EDGE_DIR="$TESTBED_DIR/edge"
TESTBED_DIR="$EDGE_DIR" "$ROOT/e2e/testbed.sh" up --control-plane-only >/dev/null
EDGE_KUBECONFIG=$EDGE_DIR/kubeconfig
if [ -z "$NODE_MISSING" ]; then
  # The controller runs in a pod, where 127.0.0.1 is the pod: it reaches the second API server
  # at the node's address, and checks its certificate against the name it was issued for.
  edge_port=$(sed -n 's#^ *server: https://127.0.0.1:\([0-9]*\)$#\1#p' "$EDGE_DIR/kubeconfig")
  "$ROOT/e2e/testbed.sh" expose "$edge_port"
  EDGE_KUBECONFIG=$TESTBED_DIR/edge-from-pods.kubeconfig
  sed "s#^\( *\)server: https://127.0.0.1:\([0-9]*\)\$#\1server: https://$COMPOSITOR_TEST_NODE_ADDRESS:\2\n\1tls-server-name: 127.0.0.1#" \
    "$EDGE_DIR/kubeconfig" >"$EDGE_KUBECONFIG"
fi
kubectl -n compositor-system create secret generic edge --from-file=kubeconfig="$EDGE_KUBECONFIG" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
run kubectl -n compositor-system label secret edge compositor.dev/cluster=true --overwrite
for _ in $(seq 240); do
  [ "$(kubectl -n demo get tenant globex -o jsonpath='{.status.clusters[?(@.phase=="Ready")].name}' | tr ' ' '\n' | sort | xargs)" = "edge local" ] && break
  sleep 0.5
done
run kubectl -n demo get tenants
run kubectl -n demo get tenant globex -o jsonpath='{range .status.clusters[*]}{.name}{": "}{.phase}{", release "}{.release}{" revision "}{.revision}{" in namespace "}{.namespace}{"\n"}{end}'
run "$HELM_BIN" --kubeconfig "$EDGE_DIR/kubeconfig" list -n globex

if [ -z "$NODE_MISSING" ]; then
  step "What runs on the node: the operator and one controller per chart version, as pods"
  run kubectl get nodes
  run kubectl get pods -A -l app.kubernetes.io/managed-by=compositor -o wide
  run kubectl -n compositor-system get pods -l app.kubernetes.io/name=compositor -o wide
fi

step "Done. Logs: $TESTBED_DIR/logs/. Stop everything with: make down"
