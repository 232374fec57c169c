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

step "Installing compositor's CRDs and starting the operator"
run kubectl apply -f "$ROOT/crds/compositor.dev.yaml"
if ! { [ -f "$TESTBED_DIR/pids/operator" ] && kill -0 "$(cat "$TESTBED_DIR/pids/operator")" 2>/dev/null; }; then
  "$COMPOSITOR" run --metrics-address 127.0.0.1:0 --cache-dir "$TESTBED_DIR/chart-cache" \
    --controller-image compositor:dev >"$TESTBED_DIR/logs/operator.log" 2>&1 &
  echo $! >"$TESTBED_DIR/pids/operator"
fi

step "A platform team publishes fireworks-app 1.1.5 from the password-protected Helm repository"
kubectl create namespace demo --dry-run=client -o yaml | kubectl apply -f - >/dev/null
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

# The test bed has no kubelet: this plays it for controller Deployment $1, with its own token.
run_controller() {
  local controller=$1 pidfile="$TESTBED_DIR/pids/$1"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then return; fi
  local token
  token=$(kubectl -n demo create token "$controller")
  python3 - "$KUBECONFIG" "$token" >"$TESTBED_DIR/$controller.kubeconfig" <<'PY'
import sys, re
text = open(sys.argv[1]).read()
print(re.sub(r"token: .*", "token: " + sys.argv[2], text))
PY
  chmod 600 "$TESTBED_DIR/$controller.kubeconfig"
  mapfile -t args < <(kubectl -n demo get deployment "$controller" -o jsonpath='{range .spec.template.spec.containers[0].args[*]}{@}{"\n"}{end}')
  printf '\033[2m$ compositor %s\033[0m\n' "${args[*]}"
  KUBECONFIG="$TESTBED_DIR/$controller.kubeconfig" "$COMPOSITOR" "${args[@]}" --metrics-address 127.0.0.1:0 \
    --cache-dir "$TESTBED_DIR/$controller-cache" >"$TESTBED_DIR/logs/$controller.log" 2>&1 &
  echo $! >"$pidfile"
}

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

step "Done. Logs: $TESTBED_DIR/logs/. Stop everything with: make down"
