#!/usr/bin/env bash
# The controller bench on fresh test beds: RUNS runs (default 5) of COUNT compositions each (the
# bench's default, 50), then the median of their compositor / `helm install` ratios; with
# BENCH_SCALE set, one more run at that scale (memory, requests, idle resync; no baseline).
#
#   e2e/bench-controller.sh BENCH_BINARY
#
# Each run gets a test bed of its own, so no run inherits another's etcd, caches or load.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=${1:?usage: $0 BENCH_BINARY}
RUNS=${RUNS:-5}
SCALE=${BENCH_SCALE:-}

# run_once LOG: one bench on a fresh test bed, its figures to stdout and LOG.
run_once() {
  local dir
  dir=$(mktemp -d /tmp/compositor-testbed.XXXXXX)
  TESTBED_DIR=$dir "$ROOT/e2e/with-testbed.sh" "$BENCH" | tee "$1"
}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
ratios=()
for run in $(seq "$RUNS"); do
  echo "[bench-controller] run $run of $RUNS" >&2
  BENCH_SCALE='' run_once "$scratch/$run.out"
  ratio=$(sed -n 's/^| compositor \/ baseline (goal ≤ [0-9.]*) | \([0-9.]*\) .*/\1/p' "$scratch/$run.out")
  [ -n "$ratio" ] || { echo "[bench-controller] run $run printed no ratio" >&2; exit 1; }
  ratios+=("$ratio")
done

printf '\n| run | compositor / baseline |\n|---|---|\n'
for i in "${!ratios[@]}"; do printf '| %d | %s |\n' $((i + 1)) "${ratios[$i]}"; done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}')
goal=$(awk -v m="$median" 'BEGIN {print (m <= 1.15) ? "met" : "missed"}')
printf '| median of %d (goal ≤ 1.15) | **%s — goal %s** |\n' "$RUNS" "$median" "$goal"

if [ -n "$SCALE" ]; then
  echo "[bench-controller] one run at BENCH_SCALE=$SCALE" >&2
  run_once "$scratch/scale.out"
fi
