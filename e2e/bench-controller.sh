#!/usr/bin/env bash
# The controller's throughput on fresh test beds: RUNS runs (default 5), each on a test bed of
# its own running the controller bench (COUNT compositions, the bench's default 50, against as
# many `helm install`s in turn and 4 at a time, and the CPU of an install) and then the move
# bench (the chart-version patch of 3 and 50 compositions against sequential `helm upgrade`s);
# then each ratio per run and its median. With BENCH_SCALE set, one more controller run at that
# scale (memory, requests, idle resync; no baseline).
#
#   e2e/bench-controller.sh CONTROLLER_BENCH [MOVE_BENCH]
#
# MOVE_BENCH defaults to move_bench beside CONTROLLER_BENCH. Each run gets a test bed of its
# own, so no run inherits another's etcd, caches or load.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=${1:?usage: $0 CONTROLLER_BENCH [MOVE_BENCH]}
MOVE=${2:-$(dirname "$BENCH")/move_bench}
RUNS=${RUNS:-5}
SCALE=${BENCH_SCALE:-}

# The ratios, each as: the label the benches print it under | its name here | its goal.
RATIOS=(
  'all Ready / sequential `helm install`s|50 Ready / sequential installs|0.6'
  'all Ready / parallel `helm install`s|50 Ready / installs 4 at a time|1.0'
  'CPU per install: controller with its Helm processes / `helm install`|CPU per install / `helm install`|0.6'
  'move-50|patch of 50 / sequential upgrades|0.8'
)

# run_once LOG COMMAND: COMMAND on a fresh test bed, its figures to stdout and LOG.
run_once() {
  local log=$1 dir
  shift
  dir=$(mktemp -d /tmp/compositor-testbed.XXXXXX)
  TESTBED_DIR=$dir "$ROOT/e2e/with-testbed.sh" "$@" | tee "$log"
}

# ratio LOG LABEL: the ratio printed under LABEL (`move-50`: the move bench's row of 50).
ratio() {
  case $2 in
    move-50) sed -n 's/^| 50 | .* | \([0-9.]*\) — goal .*/\1/p' "$1" ;;
    *) awk -v label="| $2 (goal" 'index($0, label) == 1 {split($0, cells, "|"); split(cells[3], v, " "); print v[1]}' "$1" ;;
  esac
}

median() {
  sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'
}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for run in $(seq "$RUNS"); do
  echo "[bench-controller] run $run of $RUNS" >&2
  BENCH_SCALE='' run_once "$scratch/$run.out" bash -c '"$1" && "$2"' _ "$BENCH" "$MOVE"
done

printf '\n| ratio (%d fresh test beds) | runs | median | goal |\n|---|---|---|---|\n' "$RUNS"
for entry in "${RATIOS[@]}"; do
  IFS='|' read -r label name goal <<<"$entry"
  values=()
  for run in $(seq "$RUNS"); do
    value=$(ratio "$scratch/$run.out" "$label")
    [ -n "$value" ] || { echo "[bench-controller] run $run printed no '$name'" >&2; exit 1; }
    values+=("$value")
  done
  middle=$(printf '%s\n' "${values[@]}" | median)
  verdict=$(awk -v m="$middle" -v g="$goal" 'BEGIN {print (m <= g) ? "met" : "missed"}')
  printf '| %s | %s | **%s** | ≤ %s — %s |\n' "$name" "${values[*]}" "$middle" "$goal" "$verdict"
done

if [ -n "$SCALE" ]; then
  echo "[bench-controller] one run at BENCH_SCALE=$SCALE" >&2
  run_once "$scratch/scale.out" "$BENCH"
fi
