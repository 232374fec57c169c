#!/usr/bin/env bash
# The demo: the local control plane, chart repository and OCI registry that compositor works with.
# The test bed stays up afterwards (stop it with `make down`).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export TESTBED_DIR=${TESTBED_DIR:-/tmp/compositor-testbed}
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Starting the test bed in $TESTBED_DIR"
"$ROOT/e2e/testbed.sh" up >/dev/null
eval "$("$ROOT/e2e/testbed.sh" env)"

step "The control plane"
"$KUBECTL_BIN" version -o yaml | grep -E 'gitVersion'
"$KUBECTL_BIN" get namespaces

step "Charts in the HTTP repository at $COMPOSITOR_TEST_REPO_URL (basic auth)"
curl -fsS -u "$COMPOSITOR_TEST_REPO_USERNAME:$COMPOSITOR_TEST_REPO_PASSWORD" "$COMPOSITOR_TEST_REPO_URL/index.yaml" \
  | grep -E '^  [a-z]|^  - .*version|^    version:' | sed 's/^/  /'

step "Charts in the OCI registry at $COMPOSITOR_TEST_REGISTRY (htpasswd)"
curl -fsS -u "$COMPOSITOR_TEST_REGISTRY_USERNAME:$COMPOSITOR_TEST_REGISTRY_PASSWORD" \
  "http://$COMPOSITOR_TEST_REGISTRY/v2/_catalog"; echo

step "Stop it with: make down"
