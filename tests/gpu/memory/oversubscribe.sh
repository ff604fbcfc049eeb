#!/usr/bin/env bash
# Real-GPU acceptance of memory oversubscription (one GPU): with a 1 GiB limit and
# CUDA_OVERSUBSCRIBE=true a PyTorch job holds 3 GiB of tensors, computes the same checksums as
# natively, and the device memory NVML attributes to it (sampled from outside, ~1 ms) stays
# <= 1 GiB; without oversubscription the same job gets torch.cuda.OutOfMemoryError; at the host
# spill limit it gets OutOfMemoryError and a log line naming the limit. Also: what the driver
# does with managed memory the GPU touches (advised to the host or not), and the bandwidth of a
# memory-bound op on spilled vs device tensors vs native.
#
# Sourced by tests/gpu/run.sh (uses its row(), $LIB, $OUT, $LOG, $BUILD), or run alone:
#   tests/gpu/memory/oversubscribe.sh     (builds build-gpu/libvgpu.so and build-gpu/vgpu if missing;
#                                          prints its own table; about 1.5 minutes)
# Output of every run goes to $OUT/oversubscribe.log. Rules honoured: every CUDA return code
# checked (the Python scripts raise on any error), at most 1 GiB of managed memory per probe and
# 3 GiB of spilled (managed) memory, no clock / MIG / compute-mode changes.

OS_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OS_STANDALONE=0
[ "${BASH_SOURCE[0]}" = "$0" ] && OS_STANDALONE=1

if [ $OS_STANDALONE = 1 ]; then
  set -u
  ROOT=$(cd "$OS_HERE/../../.." && pwd)
  BUILD=${VGPU_GPU_BUILD:-$ROOT/build-gpu}
  OUT=${OUT:-$BUILD/out}
  LIB="$BUILD/libvgpu.so"
  mkdir -p "$OUT"
  . "$ROOT/tests/gpu/report.sh"
  report_init "$OUT/gpu-checks.log"
  if [ ! -f "$LIB" ] || [ ! -x "$BUILD/vgpu" ]; then
    echo "== building $LIB and $BUILD/vgpu" | tee -a "$LOG"
    { cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVGPU_BUILD_TESTS=OFF &&
      cmake --build "$BUILD" --target vgpu_preload vgpu; } >>"$LOG" 2>&1 || { echo "build failed; see $LOG"; tail -20 "$LOG"; exit 1; }
  fi
fi

OS_LOG="$OUT/oversubscribe.log"
OS_TMP=$(mktemp -d /tmp/vgpu-oversubscribe.XXXXXX)
OS_LIMIT=1GiB
OS_LIMIT_BYTES=$((1 << 30))
OS_CHUNK_BYTES=$((256 << 20))
OS_STARTED=$(date +%s)
: >"$OS_LOG"


# os_watch <name> <timeout s> <vgpu|native> [VAR=value...] -- <command...>
# Runs the command watched by nvml_peak.py (GPU 0); under vgpu with LD_PRELOAD, the 1 GiB limit
# and a fresh ledger ($OS_LEDGER; an argument @LEDGER@ is replaced by its path). Sets OS_OUTPUT,
# OS_RC, OS_RESULT (last "result ..." line), OS_PEAK (bytes) and OS_PEAK_METHOD.
os_watch() {
  local name=$1 seconds=$2 mode=$3
  shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  OS_LEDGER=$(mktemp -d "$OS_TMP/$name.XXXX")/ledger
  local args=()
  for a in "$@"; do args+=("${a//@LEDGER@/$OS_LEDGER}"); done
  set -- "${args[@]}"
  local pre=(env -u PYTORCH_CUDA_ALLOC_CONF -u CUDA_OVERSUBSCRIBE -u CUDA_MEMORY_OVERSUBSCRIBE -u LD_PRELOAD)
  if [ "$mode" = vgpu ]; then
    pre+=(LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT="$OS_LIMIT" CUDA_DEVICE_MEMORY_SHARED_CACHE="$OS_LEDGER")
  fi
  OS_OUTPUT=$(timeout -k 10 "$seconds" python3 "$OS_HERE/nvml_peak.py" --gpus 0 -- \
    "${pre[@]}" ${envs[@]+"${envs[@]}"} "$@" 2>&1)
  OS_RC=$?
  { echo "### $name (exit $OS_RC): $mode ${envs[*]:-} $*"; printf '%s\n' "$OS_OUTPUT"; echo; } >>"$OS_LOG"
  OS_RESULT=$(printf '%s\n' "$OS_OUTPUT" | grep '^result ' | tail -1)
  local peak_line
  peak_line=$(printf '%s\n' "$OS_OUTPUT" | grep '^nvml_peak gpu=0 ' | tail -1)
  OS_PEAK=$(field "$peak_line" peak_bytes)
  OS_PEAK_METHOD=$(field "$peak_line" method)
  OS_DEVICE_PEAK=$(field "$peak_line" device_delta_peak_bytes)
}
# "NVML peak": per-process (what nvidia-smi lists) and the rise of the GPU's used memory (which
# also shows managed memory on the GPU; nothing else runs there during these checks).
os_peak_text() { echo "NVML peak $(mib "$OS_PEAK") MiB per-process, GPU used +$(mib "$OS_DEVICE_PEAK") MiB"; }
os_peaks_within() { le "$OS_PEAK" "$1" && le "$OS_DEVICE_PEAK" "$1"; }
os_no_result() { echo "no result (exit $OS_RC): $(printf '%s\n' "$OS_OUTPUT" | grep -v '^nvml_peak' | tail -1 | cut -c1-160)"; }
os_bw() { printf '%s\n' "$OS_OUTPUT" | awk -v k="kind=$1" -v o="op=$2" '$1 == "bandwidth" && $2 == k && $3 == o { sub("gbps=", "", $4); print $4 }' | tail -1; }

echo "== oversubscription checks (log: $OS_LOG)" | tee -a "$LOG"

# --- 1. the driver: managed memory the GPU touches, natively ----------------------------------------
declare -A OS_PROBE
for advise in none host; do
  OS_PROBE[$advise]=$(timeout -k 10 120 python3 "$OS_HERE/managed_probe.py" --advise "$advise" --mib 1024 2>&1)
  { echo "### managed_probe --advise $advise"; printf '%s\n' "${OS_PROBE[$advise]}"; echo; } >>"$OS_LOG"
done
probe_none=$(printf '%s\n' "${OS_PROBE[none]}" | grep '^probe ' | tail -1)
probe_host=$(printf '%s\n' "${OS_PROBE[host]}" | grep '^probe ' | tail -1)
# NVML's per-process figure does not include managed memory at all (measured: it stays flat even
# when the driver migrates managed memory onto the GPU), so the device's used memory is what
# shows where the pages are (nothing else runs on the GPU during these checks).
probe_text() {  # probe_text <probe line>
  echo "GPU used +$(mib "$(field "$1" nvml_device_growth)") MiB (NVML device), per-process +$(mib "$(field "$1" nvml_pid_growth)") MiB; in-place multiply $(field "$1" mul_gbps) GB/s"
}
if [ -n "$probe_none" ]; then
  row "oversubscribe: driver, 1 GiB managed (no advice) written and read by the GPU" INFO "$(probe_text "$probe_none")"
else
  row "oversubscribe: driver, 1 GiB managed (no advice) written and read by the GPU" FAIL "$(printf '%s\n' "${OS_PROBE[none]}" | tail -1 | cut -c1-160)"
fi
if [ -n "$probe_host" ] && le "$(field "$probe_host" nvml_device_growth)" $((64 << 20)); then v=PASS; else v=FAIL; fi
if [ -n "$probe_host" ]; then detail=$(probe_text "$probe_host"); else detail=$(printf '%s\n' "${OS_PROBE[host]}" | tail -1 | cut -c1-160); fi
row "oversubscribe: driver keeps 1 GiB managed advised to the host off the GPU (max +64 MiB)" $v "$detail"

# --- 2. PyTorch, 3 GiB of tensors: native, then 1 GiB + oversubscription ------------------------------
os_watch torch-native 300 native -- python3 "$OS_HERE/torch_spill.py" --gib 3
OS_NATIVE_RESULT=$OS_RESULT
OS_NATIVE_OUTPUT=$OS_OUTPUT
if [ -n "$OS_NATIVE_RESULT" ] && [ "$(field "$OS_NATIVE_RESULT" error)" = none ]; then
  row "oversubscribe: PyTorch 3 GiB natively" INFO \
    "checksum_int $(field "$OS_NATIVE_RESULT" checksum_int); $(os_peak_text)"
else
  row "oversubscribe: PyTorch 3 GiB natively" FAIL "${OS_NATIVE_RESULT:-$(os_no_result)}"
fi

os_watch torch-oversubscribed 300 vgpu CUDA_OVERSUBSCRIBE=true CUDA_OVERSUBSCRIBE_HOST_LIMIT=4GiB -- \
  python3 "$OS_HERE/torch_spill.py" --gib 3 --vgpu "$BUILD/vgpu" --ledger @LEDGER@
OS_SPILL_RESULT=$OS_RESULT
OS_SPILL_OUTPUT=$OS_OUTPUT
if [ -z "$OS_SPILL_RESULT" ]; then
  row "oversubscribe: PyTorch 3 GiB under a 1 GiB limit" FAIL "$(os_no_result)"
else
  spilled_n=$(field "$OS_SPILL_RESULT" spilled_tensors)
  ledger_line=$(printf '%s\n' "$OS_SPILL_OUTPUT" | grep '^ledger ' | tail -1)
  ledger_spilled=$(field "$ledger_line" spilled)
  ledger_used=$(field "$ledger_line" used)
  same=no
  [ "$(field "$OS_SPILL_RESULT" checksum_int)" = "$(field "$OS_NATIVE_RESULT" checksum_int)" ] &&
    [ "$(field "$OS_SPILL_RESULT" checksum_f64)" = "$(field "$OS_NATIVE_RESULT" checksum_f64)" ] && same=yes
  v=FAIL
  if [ "$(field "$OS_SPILL_RESULT" error)" = none ] && [ "$same" = yes ] && [ -n "$OS_NATIVE_RESULT" ] &&
    [ "$(field "$OS_SPILL_RESULT" allocated_bytes)" = $((3 << 30)) ] && [ "${spilled_n:-0}" -gt 0 ]; then v=PASS; fi
  row "oversubscribe: PyTorch 3 GiB under a 1 GiB limit, same checksums as native" $v \
    "$(field "$OS_SPILL_RESULT" device_tensors) tensors on the device, $spilled_n spilled (managed, preferred on the host, accessed by GPU 0); checksums identical: $same; $(field "$OS_SPILL_RESULT" error)"
  os_peaks_within "$OS_LIMIT_BYTES" && v=PASS || v=FAIL
  row "oversubscribe: NVML device peak <= 1 GiB while the job uses 3 GiB" $v \
    "$(os_peak_text), sampled every ~1 ms from outside ($(printf '%s\n' "$OS_OUTPUT" | grep '^nvml_peak gpu=0 ' | tail -1 | sed -n 's/.* samples=//p') samples)"
  v=FAIL
  if [ -n "$ledger_spilled" ] && [ "$ledger_spilled" -ge $((spilled_n * OS_CHUNK_BYTES)) ] && le "$ledger_used" "$OS_LIMIT_BYTES"; then v=PASS; fi
  row "oversubscribe: ledger counts device and host apart (vgpu ps --json)" $v \
    "${ledger_line:-no ledger line}"
fi

# The job itself asks for its spilled tensors on the GPU (prefetch, preferred location): vgpu
# keeps them on the host.
os_watch torch-prefetch 300 vgpu CUDA_OVERSUBSCRIBE=true CUDA_OVERSUBSCRIBE_HOST_LIMIT=4GiB -- \
  python3 "$OS_HERE/torch_spill.py" --gib 3 --reps 1 --prefetch-spilled
codes=$(printf '%s\n' "$OS_OUTPUT" | grep '^prefetch codes=' | tail -1 | sed 's/^prefetch codes=//')
v=FAIL
if [ -n "$OS_RESULT" ] && [ "$(field "$OS_RESULT" error)" = none ] && os_peaks_within "$OS_LIMIT_BYTES" &&
  [ "$(field "$OS_RESULT" checksum_int)" = "$(field "$OS_NATIVE_RESULT" checksum_int)" ] &&
  [ -n "$codes" ] && [ -z "$(echo "$codes" | tr ',' '\n' | grep -v '^0/0$')" ]; then v=PASS; fi
if [ -n "$OS_RESULT" ]; then detail="$(os_peak_text); calls returned ${codes:-nothing}; checksums as native: $([ "$(field "$OS_RESULT" checksum_int)" = "$(field "$OS_NATIVE_RESULT" checksum_int)" ] && echo yes || echo no)"; else detail=$(os_no_result); fi
row "oversubscribe: the job's own prefetch/advice to the GPU leaves spilled tensors on the host" $v "$detail"

# --- 3. without oversubscription the same job runs out of memory -------------------------------------
os_watch torch-limited 300 vgpu -- python3 "$OS_HERE/torch_spill.py" --gib 3
if [ -n "$OS_RESULT" ] && [ "$(field "$OS_RESULT" expected_type)" = yes ] && os_peaks_within "$OS_LIMIT_BYTES"; then v=PASS; else v=FAIL; fi
if [ -n "$OS_RESULT" ]; then
  detail="$(field "$OS_RESULT" error) after $(mib "$(field "$OS_RESULT" allocated_bytes)") MiB; $(os_peak_text)"
else
  detail=$(os_no_result)
fi
row "oversubscribe: without it the same job raises torch.OutOfMemoryError" $v "$detail"

# --- 4. the host spill limit ---------------------------------------------------------------------------
os_watch torch-host-limit 300 vgpu CUDA_OVERSUBSCRIBE=true CUDA_OVERSUBSCRIBE_HOST_LIMIT=1GiB -- \
  python3 "$OS_HERE/torch_spill.py" --gib 3
log_line=$(printf '%s\n' "$OS_OUTPUT" | grep 'would pass the host spill limit' | head -1)
v=FAIL
if [ -n "$OS_RESULT" ] && [ "$(field "$OS_RESULT" expected_type)" = yes ] && [ -n "$log_line" ] &&
  os_peaks_within "$OS_LIMIT_BYTES"; then v=PASS; fi
if [ -n "$OS_RESULT" ]; then
  detail="$(field "$OS_RESULT" error) after $(mib "$(field "$OS_RESULT" allocated_bytes)") MiB ($(field "$OS_RESULT" spilled_tensors) tensors spilled); $(os_peak_text); log: $(echo "$log_line" | sed 's/^vgpu\[[0-9]*\] //')"
else
  detail=$(os_no_result)
fi
row "oversubscribe: host spill limit 1 GiB reached -> CUDA_ERROR_OUT_OF_MEMORY and a log line" $v "$detail"

# --- 5. throughput of spilled tensors -------------------------------------------------------------------
OS_OUTPUT=$OS_NATIVE_OUTPUT
n_mul=$(os_bw device mul_); n_sum=$(os_bw device sum)
OS_OUTPUT=$OS_SPILL_OUTPUT
d_mul=$(os_bw device mul_); d_sum=$(os_bw device sum)
s_mul=$(os_bw spilled mul_); s_sum=$(os_bw spilled sum)
ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }'; }
row "oversubscribe: bandwidth, in-place multiply (read+write) of a 256 MiB tensor" INFO \
  "native ${n_mul:-?} GB/s; vgpu device-resident ${d_mul:-?} GB/s; vgpu spilled ${s_mul:-?} GB/s = $(ratio "$s_mul" "$n_mul") of native"
row "oversubscribe: bandwidth, sum (read) of a 256 MiB tensor" INFO \
  "native ${n_sum:-?} GB/s; vgpu device-resident ${d_sum:-?} GB/s; vgpu spilled ${s_sum:-?} GB/s = $(ratio "$s_sum" "$n_sum") of native"

rm -rf "$OS_TMP"
echo "== oversubscription checks took $(($(date +%s) - OS_STARTED)) s" | tee -a "$LOG"

if [ $OS_STANDALONE = 1 ]; then
  {
    echo "vgpu oversubscription checks on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(date -u +%F)"
    echo "| check | result | detail |"
    echo "|---|---|---|"
    report_print
  } | tee "$OUT/oversubscribe.md"
  exit $FAILED
fi
