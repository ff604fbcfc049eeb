#!/usr/bin/env bash
# Diagnostic (real GPU): throughput of two contexts of 50 µs spin kernels running freely together
# against taking turns (bench/compute/turn_probe.cu), each against one process alone.
#   bench/compute/turn_probe.sh [KERNEL_US] [SECONDS]
# Prints one JSON line per process and run, then a table. Needs nvcc; changes no GPU setting.
set -euo pipefail
cd "$(dirname "$0")/../.."
KERNEL_US=${1:-50}
SECONDS_=${2:-3}
BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
nvcc -O2 -std=c++17 -o "$BIN/turn_probe" bench/compute/turn_probe.cu
nvcc -O2 -std=c++17 -o "$BIN/spin" bench/compute/spin.cu
CAL=$("$BIN/spin" calibrate "$KERNEL_US")
CYCLES=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["cycles"])' "$CAL")
DEV_US=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["dev_us"])' "$CAL")
echo "calibration: $CAL"
start_at() { python3 -c 'import time; print(f"{time.clock_gettime(time.CLOCK_MONOTONIC) + 3.0:.6f}")'; }
RESULTS="$BIN/results"
: > "$RESULTS"
run() {  # label, then one argument list per process (after the common four)
  local label=$1; shift
  local at; at=$(start_at)
  local pids=() outs=() i=0
  rm -f "$BIN/board"
  for args in "$@"; do
    # shellcheck disable=SC2086
    "$BIN/turn_probe" "$CYCLES" "$DEV_US" "$at" "$SECONDS_" $args > "$BIN/out.$i" &
    pids+=($!); outs+=("$BIN/out.$i"); i=$((i + 1))
  done
  for p in "${pids[@]}"; do wait "$p"; done
  for o in "${outs[@]}"; do echo "$label $(cat "$o")" | tee -a "$RESULTS"; done
}
run solo "free"
run "two-free" "free" "free"
for b in 500 1000 2000 4000; do
  run "turn-sync-$b" "turn $BIN/board 0 2 $b sync" "turn $BIN/board 1 2 $((2 * b)) sync"
  run "turn-early-$b" "turn $BIN/board 0 2 $b early" "turn $BIN/board 1 2 $((2 * b)) early"
done
python3 - "$RESULTS" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    label, js = line.split(" ", 1)
    rows.setdefault(label, []).append(json.loads(js))
print("| run | busy A | busy B | sum | events A | events B | events sum |")
print("|---|---|---|---|---|---|---|")
for label, rs in rows.items():
    busy = [r["busy"] for r in rs]
    ev = [r["events"] for r in rs]
    cells = [f"{b:.3f}" for b in busy] + ["-"] * (2 - len(busy))
    evc = [f"{e:.3f}" for e in ev] + ["-"] * (2 - len(ev))
    print(f"| {label} | {cells[0]} | {cells[1]} | {sum(busy):.3f} | {evc[0]} | {evc[1]} | {sum(ev):.3f} |")
PY
