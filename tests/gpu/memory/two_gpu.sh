#!/usr/bin/env bash
# Two-GPU memory-limit check (machine kind nvidia-h200-x2; run on its own, not by run.sh).
#
# With CUDA_VISIBLE_DEVICES=1,0 (and again with the UUID form), CUDA_DEVICE_MEMORY_LIMIT_0=1GiB and
# CUDA_DEVICE_MEMORY_LIMIT_1=2GiB: CUDA ordinal 0 must be physical GPU 1 and get 1 GiB, ordinal 1
# (GPU 0) 2 GiB; both refuse with cudaErrorMemoryAllocation; and NVML, read from outside by
# physical index (nvml_peak.py, no libvgpu.so), shows each charge on the right physical GPU and
# never above that GPU's limit. About 30 s.
#
# Usage: tests/gpu/memory/two_gpu.sh     (builds build-gpu/libvgpu.so if missing; logs in $OUT)
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
BUILD=${VGPU_GPU_BUILD:-$ROOT/build-gpu}
OUT=${OUT:-$BUILD/out}
G="$BUILD/gpu"
LIB="$BUILD/libvgpu.so"
mkdir -p "$G" "$OUT"
. "$ROOT/tests/gpu/report.sh"
report_init "$OUT/two-gpu-checks.log"

nvidia-smi --query-gpu=index,name,uuid,memory.total --format=csv,noheader | tee -a "$LOG"
if [ ! -f "$LIB" ]; then
  { cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVGPU_BUILD_TESTS=OFF &&
    cmake --build "$BUILD"; } >>"$LOG" 2>&1 || { echo "build failed; see $LOG"; exit 1; }
fi
nvcc -O2 -arch=sm_90 -o "$G/two_gpu_check" "$HERE/two_gpu_check.cu" >>"$LOG" 2>&1 || { echo "nvcc failed; see $LOG"; exit 1; }

GIB=$((1 << 30))
if [ "$(nvidia-smi -L | grep -c '^GPU ')" -lt 2 ]; then
  row "two GPUs" FAIL "this machine has fewer than 2 GPUs"
else
  UUID0=$(nvidia-smi -i 0 --query-gpu=uuid --format=csv,noheader | tr -d ' ')
  UUID1=$(nvidia-smi -i 1 --query-gpu=uuid --format=csv,noheader | tr -d ' ')
  TMP=$(mktemp -d /tmp/vgpu-two-gpu.XXXXXX)
  for form in indices uuids; do
    [ $form = indices ] && cvd="1,0" || cvd="$UUID1,$UUID0"
    out=$(timeout -k 10 120 python3 "$HERE/nvml_peak.py" --gpus 0,1 -- env LD_PRELOAD="$LIB" \
      CUDA_VISIBLE_DEVICES="$cvd" CUDA_DEVICE_MEMORY_LIMIT_0=1GiB CUDA_DEVICE_MEMORY_LIMIT_1=2GiB \
      CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/$form.ledger" "$G/two_gpu_check" 2>&1)
    rc=$?
    { echo "### CUDA_VISIBLE_DEVICES=$cvd (exit $rc)"; printf '%s\n' "$out"; echo; } >>"$LOG"
    o0=$(printf '%s\n' "$out" | grep '^ordinal=0 ' | tail -1)
    o1=$(printf '%s\n' "$out" | grep '^ordinal=1 ' | tail -1)
    p0=$(field "$(printf '%s\n' "$out" | grep '^nvml_peak gpu=0 ' | tail -1)" peak_bytes)
    p1=$(field "$(printf '%s\n' "$out" | grep '^nvml_peak gpu=1 ' | tail -1)" peak_bytes)
    m1=$(field "$(printf '%s\n' "$out" | grep '^nvml_peak gpu=1 ' | tail -1)" method)
    label="two GPUs, CUDA_VISIBLE_DEVICES=1,0 ($form)"
    if [ -z "$o0" ] || [ -z "$o1" ]; then
      row "$label" FAIL "no result (exit $rc): $(printf '%s\n' "$out" | grep -v '^nvml_peak' | tail -1 | cut -c1-160)"
      continue
    fi
    [ "$(field "$o0" uuid)" = "$UUID1" ] && [ "$(field "$o1" uuid)" = "$UUID0" ] && v=PASS || v=FAIL
    row "$label: ordinal 0 is GPU 1" $v "ordinal 0 $(field "$o0" uuid), ordinal 1 $(field "$o1" uuid); GPU 0 $UUID0, GPU 1 $UUID1"
    [ "$(field "$o0" total_bytes)" = $GIB ] && [ "$(field "$o1" total_bytes)" = $((2 * GIB)) ] && v=PASS || v=FAIL
    row "$label: totals 1 GiB / 2 GiB" $v "cudaMemGetInfo total: ordinal 0 $(mib "$(field "$o0" total_bytes)") MiB, ordinal 1 $(mib "$(field "$o1" total_bytes)") MiB"
    g0=$(field "$o0" obtained_bytes)
    g1=$(field "$o1" obtained_bytes)
    v=FAIL
    if [ "$(field "$o0" code_name)" = cudaErrorMemoryAllocation ] && [ "$(field "$o1" code_name)" = cudaErrorMemoryAllocation ] &&
      le "$g0" $GIB && le "$g1" $((2 * GIB)) && [ "$g0" -gt 0 ] && [ "$g1" -gt 0 ]; then v=PASS; fi
    row "$label: refused at each limit" $v "ordinal 0: $(field "$o0" code_name) after $(mib "$g0") MiB; ordinal 1: $(field "$o1" code_name) after $(mib "$g1") MiB"
    v=FAIL
    if le "$p1" $GIB && le "$g0" "$p1" && le "$p0" $((2 * GIB)) && le "$g1" "$p0"; then v=PASS; fi
    row "$label: NVML charges on the right GPUs" $v "GPU 1 peak $(mib "$p1") MiB (limit 1024, holds $(mib "$g0")), GPU 0 peak $(mib "$p0") MiB (limit 2048, holds $(mib "$g1")); method $m1"
  done
  rm -rf "$TMP"
fi

echo
echo "vgpu two-GPU memory checks on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(date -u +%F)"
echo "| check | result | detail |"
echo "|---|---|---|"
report_print
exit $FAILED
