#!/usr/bin/env bash
# Diagnostic (not part of run.sh): the stream-ordered pool under a 1 GiB limit, step by step.
# Runs async_probe.py natively (capped at 512 MiB) and RUNS times under libvgpu.so with debug
# logging, each watched by nvml_peak.py --trace, and prints each run's merged timeline: the
# probe's steps and every change of NVML's per-process figure, in time order, in MiB.
#
#   tests/gpu/memory/async_probe.sh LIB [RUNS] [OUTDIR]
set -u
LIB=${1:?usage: async_probe.sh path/to/libvgpu.so [RUNS] [OUTDIR]}
RUNS=${2:-3}
OUT_DIR=${3:-$(mktemp -d)}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT_DIR"

timeline() {  # $1 = probe output, $2 = trace
  { grep -E '^[0-9]+ (event|exception)' "$1"; cat "$2"; } | sort -n | awk '
    NR == 1 { t0 = $1 }
    { ms = ($1 - t0) / 1e6 }
    / event / { line = sprintf("%9.2f ms  %-14s", ms, $3)
                for (i = 4; i <= NF; i++) { split($i, kv, "="); line = line sprintf(" %s=%.1f", kv[1], kv[2] / 1048576) }
                print line; next }
    / exception / { printf "%9.2f ms  exception %s\n", ms, substr($0, index($0, "exception") + 10); next }
    { split($3, a, "="); split($4, b, "="); printf "%9.2f ms    nvml pid=%.1f MiB device_used=%.1f MiB\n", ms, a[2] / 1048576, b[2] / 1048576 }'
}

probe() {  # name, cap in MiB, then env assignments
  local name=$1 cap=$2
  shift 2
  timeout -k 10 120 python3 "$HERE/nvml_peak.py" --gpus 0 --interval-ms 0.2 --trace "$OUT_DIR/$name.trace" -- \
    env "$@" python3 "$HERE/async_probe.py" --cap-mib "$cap" >"$OUT_DIR/$name.log" 2>&1
  echo "=== $name, capped at $cap MiB (exit $?): $(grep '^nvml_peak' "$OUT_DIR/$name.log" | sed 's/.*peak_mib=\([^ ]*\).*/NVML peak \1 MiB/')"
  timeline "$OUT_DIR/$name.log" "$OUT_DIR/$name.trace"
  grep -E 'vgpu' "$OUT_DIR/$name.log" | grep -v '^[0-9]' | head -40
}

probe native 512 PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync

for i in $(seq 1 "$RUNS"); do
  ledger=$(mktemp -d)
  probe "vgpu$i" 4096 LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$ledger/ledger" \
    LIBCUDA_LOG_LEVEL=4 PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
  rm -rf "$ledger"
done
