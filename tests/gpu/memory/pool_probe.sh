#!/usr/bin/env bash
# Diagnostic (not part of run.sh): PyTorch's cudaMallocAsync backend and the device's default
# pool. For each seed, pool_probe.py natively (the pool's growth per block, what stays reserved
# after a trim and what that reserve still serves), then free_check.py under libvgpu.so at a
# 4 GiB limit with debug logging, watched by nvml_peak.py --trace: the check's result, NVML's peak,
# the library's pool and refusal lines, and the NVML figures above 4000 MiB in time order.
#
#   tests/gpu/memory/pool_probe.sh LIB [SEEDS...]   (default seeds: 3 11)
set -u
LIB=${1:?usage: pool_probe.sh path/to/libvgpu.so [SEEDS...]}
shift
SEEDS=${*:-3 11}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT_DIR=$(mktemp -d)
export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
for seed in $SEEDS; do
  echo "=== seed $seed, native"
  timeout -k 10 300 python3 "$HERE/pool_probe.py" --seed "$seed" 2>&1 | tail -80
  echo "=== seed $seed, libvgpu.so at 4 GiB"
  ledger=$(mktemp -d)
  timeout -k 10 300 python3 "$HERE/nvml_peak.py" --gpus 0 --trace "$OUT_DIR/trace-$seed" -- \
    env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT=4GiB CUDA_DEVICE_MEMORY_SHARED_CACHE="$ledger/ledger" \
    LIBCUDA_LOG_LEVEL=4 python3 "$HERE/free_check.py" --framework torch-async --seed "$seed" >"$OUT_DIR/vgpu-$seed.log" 2>&1
  echo "exit $?"
  grep -E '^(result|mem_info|nvml_peak|fit)' "$OUT_DIR/vgpu-$seed.log"
  grep -iE 'pool|refused|grew' "$OUT_DIR/vgpu-$seed.log" | head -60
  echo "--- NVML per-process figure above 4000 MiB (ns, MiB)"
  awk '{ split($3, a, "="); if (a[2] > 4000 * 1048576) printf "%s %.1f\n", $1, a[2] / 1048576 }' "$OUT_DIR/trace-$seed" | head -20
  rm -rf "$ledger"
done
