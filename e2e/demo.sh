#!/usr/bin/env bash
# The demo: a chart becomes a Kubernetes API on the local control plane.
# The test bed and the operator stay up afterwards (stop both with `make down`).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export TESTBED_DIR=${TESTBED_DIR:-/tmp/compositor-testbed}
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '\033[2m$ %s\033[0m\n' "$*"; "$@"; }

step "Building compositor"
cargo build --quiet --bin compositor
COMPOSITOR=${CARGO_TARGET_DIR:-$ROOT/target}/debug/compositor

step "Starting the test bed in $TESTBED_DIR: a current kube-apiserver, an OCI registry, a Helm repository"
"$ROOT/e2e/testbed.sh" up >/dev/null
eval "$("$ROOT/e2e/testbed.sh" env)"
kubectl() { "$KUBECTL_BIN" "$@"; }
run kubectl get namespaces

step "Offline: the CRD a chart becomes (compositor crd), lossy steps on stderr"
run "$COMPOSITOR" crd "$COMPOSITOR_TEST_CHARTS/fireworks-app-1.1.5.tgz" | sed -n '/openAPIV3Schema/,/^ *git:/p' | head -32

# The test bed has no kubelet: this plays it for Deployment $2 in namespace $1, running its
# arguments with the local binary and a token of its own ServiceAccount, so the process has
# exactly the RBAC compositor (or its chart) gave it.
play_kubelet() {
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
run_controller() { play_kubelet "${2:-demo}" "$1"; }

step "The Tenant chart (cert-manager v1.19.1) is published to the password-protected Helm repository"
cp "$COMPOSITOR_REAL_CHARTS/cert-manager-v1.19.1.tgz" "$TESTBED_DIR/repo/"
"$HELM_BIN" repo index "$TESTBED_DIR/repo" >/dev/null
for namespace in compositor-system demo; do
  kubectl create namespace "$namespace" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
done
kubectl -n compositor-system create secret generic helm-repo --from-literal=token="$COMPOSITOR_TEST_REPO_PASSWORD" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null

step "helm install compositor: its CRDs, RBAC, admission policy, Deployment and the Tenant API"
run "$HELM_BIN" upgrade --install compositor "$ROOT/charts/compositor" -n compositor-system \
  --set image.tag=dev --set 'credentialNamespaces={demo}' \
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

step "The test bed has no kubelet: run the operator Deployment locally, with its ServiceAccount's token"
play_kubelet compositor-system compositor
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

step "The test bed has no kubelet: run the controller Deployment locally, with its own ServiceAccount token"
run_controller fireworksapps-v1-1-5-controller

step "A user asks for a FireworksApp: it becomes a Helm release"
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
YAML
run kubectl apply -f "$TESTBED_DIR/acme.yaml"
for _ in $(seq 120); do
  [ "$(kubectl -n acme get fireworksapp acme -o jsonpath='{.status.phase}')" = Ready ] && break
  sleep 0.5
done
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

step "The default composition: a Tenant gets cert-manager in a namespace of its own"
run_controller tenants-v1-19-1-controller compositor-system
cat >"$TESTBED_DIR/tenant.yaml" <<YAML
apiVersion: composition.compositor.dev/v1-19-1
kind: Tenant
metadata:
  name: globex
  namespace: demo
spec:
  # cert-manager's post-install check waits for pods, which a test bed without a kubelet never runs.
  startupapicheck: {enabled: false}
YAML
run kubectl apply -f "$TESTBED_DIR/tenant.yaml"
run kubectl -n demo wait tenant/globex --for=condition=Ready --timeout=180s
run kubectl -n demo get tenants
run "$HELM_BIN" list -n globex
run kubectl -n globex get deployments

step "A second cluster registers with a Secret: every Tenant is installed there too"
EDGE_DIR="$TESTBED_DIR/edge"
TESTBED_DIR="$EDGE_DIR" "$ROOT/e2e/testbed.sh" up --control-plane-only >/dev/null
kubectl -n compositor-system create secret generic edge --from-file=kubeconfig="$EDGE_DIR/kubeconfig" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
run kubectl -n compositor-system label secret edge compositor.dev/cluster=true --overwrite
for _ in $(seq 240); do
  [ "$(kubectl -n demo get tenant globex -o jsonpath='{.status.clusters[?(@.phase=="Ready")].name}')" = "edge local" ] && break
  sleep 0.5
done
run kubectl -n demo get tenants
run kubectl -n demo get tenant globex -o jsonpath='{range .status.clusters[*]}{.name}{": "}{.phase}{", release "}{.release}{" revision "}{.revision}{" in namespace "}{.namespace}{"\n"}{end}'
run "$HELM_BIN" --kubeconfig "$EDGE_DIR/kubeconfig" list -n globex

step "Done. Logs: $TESTBED_DIR/logs/. Stop everything with: make down"
