#!/usr/bin/env bash
# What the limited launch path costs one host thread, taken apart: bench/compute/concurrency.cu's
# one stream of kernels with host work after each launch, run natively, natively with a timing
# event recorded and queried after every launch (the limiter's driver calls without the limiter),
# preloaded without a limit, preloaded at a limit of 99 (where almost nothing is throttled), and
# the same with VGPU_COMPUTE_LIGHT=false (every launch measured exactly: "exact99"), in rounds
# whose order rotates. Needs a GPU and nvcc.
#
#   bench/compute/launch_path.sh LIBRARY [ROUNDS]     (default 3 rounds)
#
# Workloads (kernels of fixed work, --host-ns of host spin after each launch):
#   dry      10 us kernels, 20 us host: the stream is idle at every launch
#   balanced 20 us kernels, 17 us host: about as fast as the GPU, the queue runs dry now and then
#   deep     20 us kernels, no host work: the queue never runs dry
# Prints per workload and variant the kernels per second of each round, their mean as a share of
# the native mean, and the launch call's host time (concurrency's --host-times), and for the
# limited runs the limiter's summary (marks and event queries per launch). Exit status 1 when a
# run failed.
set -u
LIB=${1:?usage: bench/compute/launch_path.sh LIBRARY [ROUNDS]}
ROUNDS=${2:-3}
[ -f "$LIB" ] || { echo "launch_path.sh: no library at $LIB" >&2; exit 2; }
case $ROUNDS in '' | *[!0-9]* | 0) echo "launch_path.sh: ROUNDS '$ROUNDS': a positive integer" >&2; exit 2 ;; esac
LIB=$(cd "$(dirname "$LIB")" && pwd)/$(basename "$LIB")
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/launch_path.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
nvcc -O2 -arch=sm_90 -o "$WORK/concurrency" "$HERE/concurrency.cu" || { echo "launch_path.sh: nvcc failed" >&2; exit 1; }
# run VARIANT ARGS... -> "rate launch_us [marks/launch queries/launch]"
run() {
  local variant=$1; shift
  local env=() extra=()
  case $variant in
    events) extra=(--mark-every 1 --query-every 1) ;;
    preload) env=(LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/ledger.$RANDOM$RANDOM") ;;
    limit99) env=(LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/ledger.$RANDOM$RANDOM"
                  CUDA_DEVICE_SM_LIMIT=99 LIBCUDA_LOG_LEVEL=4) ;;
    exact99) env=(LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/ledger.$RANDOM$RANDOM"
                  CUDA_DEVICE_SM_LIMIT=99 LIBCUDA_LOG_LEVEL=4 VGPU_COMPUTE_LIGHT=false) ;;
  esac
  if ! env "${env[@]}" "$WORK/concurrency" run "$@" "${extra[@]}" --warmup 0.3 --seconds 1.5 --host-times \
      >"$WORK/out" 2>"$WORK/err"; then
    echo "launch_path.sh: $variant $* failed: $(tail -1 "$WORK/err")" >&2
    touch "$WORK/failed"  # run is called in a subshell: the exit status is read from this file
    echo "0 0"
    return
  fi
  python3 - "$HERE/.." "$WORK/out" "$WORK/err" <<'EOF'
import json, sys
sys.path.insert(0, sys.argv[1])
from compute_common import summary_of
d = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
s = summary_of(open(sys.argv[3]).read())
extra = " %.3f %.3f" % (s["marks_per_launch"], s["queries_per_launch"]) if "marks_per_launch" in s else ""
print("%.0f %.2f%s" % (d["rate"], d.get("launch_us", 0), extra))
EOF
}

printf '| workload | variant | kernels/s per round | share of native | launch call (us) | marks / queries per launch |\n'
printf '|---|---|---|---|---|---|\n'
for workload in "dry:--kernel-us 10 --host-ns 20000" "balanced:--kernel-us 20 --host-ns 17000" "deep:--kernel-us 20"; do
  name=${workload%%:*}
  read -r -a args <<<"${workload#*:}"
  declare -A rates=() calls=() extras=()
  for r in $(seq 1 "$ROUNDS"); do
    case $((r % 3)) in 1) order="native events preload limit99 exact99" ;;
                       2) order="exact99 limit99 preload events native" ;;
                       *) order="events native exact99 limit99 preload" ;; esac
    for v in $order; do
      read -r rate launch_us marks queries <<<"$(run "$v" "${args[@]}")"
      rates[$v]="${rates[$v]:-} $rate"
      calls[$v]="${calls[$v]:-} $launch_us"
      [ -n "${marks:-}" ] && extras[$v]="${extras[$v]:-} $marks/$queries"
    done
  done
  for v in native events preload limit99 exact99; do
    python3 - "$name" "$v" "${rates[native]}" "${rates[$v]}" "${calls[$v]}" "${extras[$v]:-}" <<'EOF'
import statistics, sys
name, v, native, rates, calls, extras = sys.argv[1:7]
native = [float(x) for x in native.split()]; rates = [float(x) for x in rates.split()]
calls = [float(x) for x in calls.split()]
share = 100 * statistics.mean(rates) / statistics.mean(native) if statistics.mean(native) > 0 else 0
print("| %s | %s | %s | %.1f | %s | %s |" % (name, v, ", ".join("%.0f" % x for x in rates), share,
      ", ".join("%.2f" % x for x in calls), extras.strip() or "–"))
EOF
  done
  unset rates calls extras
done
[ ! -e "$WORK/failed" ]
