#!/usr/bin/env bash
# Runs a command against a fresh test bed: installs what is missing, starts the test bed (with a
# node when IMAGE_ARCHIVE names compositor's image) in a private directory, exports its
# environment, runs the command, checks that no test bed process died on the way (a crash under
# load must fail the run), and stops everything.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

"$ROOT/e2e/install-deps.sh"
export TESTBED_DIR=${TESTBED_DIR:-$(mktemp -d /tmp/compositor-testbed.XXXXXX)}
trap '"$ROOT/e2e/testbed.sh" down' EXIT
# With IMAGE_ARCHIVE (compositor's image) the test bed gets a node running it, where the
# machine allows one; NODE=0 asks for none.
up=(up)
if [ -n "${IMAGE_ARCHIVE:-}" ] && [ "${NODE:-1}" != 0 ]; then
  why=$("$ROOT/e2e/testbed.sh" node-support)
  if [ -z "$why" ]; then up=(up --node "$IMAGE_ARCHIVE")
  else echo "[with-testbed] no node ($why): compositor's Deployments run as local processes"; fi
fi
start=$SECONDS
"$ROOT/e2e/testbed.sh" "${up[@]}" >/dev/null
echo "[with-testbed] test bed${up[1]:+ with a node} up in $((SECONDS - start))s ($TESTBED_DIR)"
eval "$("$ROOT/e2e/testbed.sh" env)"

start=$SECONDS
status=0
"$@" || status=$?
echo "[with-testbed] '$*' took $((SECONDS - start))s"

for pidfile in "$TESTBED_DIR"/pids/*; do
  if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    name=$(basename "$pidfile")
    echo "[with-testbed] $name died during the run; its last log lines:" >&2
    tail -20 "$TESTBED_DIR/logs/$name.log" >&2
    status=1
  fi
done
exit $status
