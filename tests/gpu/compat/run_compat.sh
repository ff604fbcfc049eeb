#!/usr/bin/env bash
# The runtime matrix: every real-GPU check of tests/gpu under each CUDA runtime. The programs
# (tests/gpu/compat/build.sh: static runtime, sm_90) are built here with this machine's toolkit
# (/usr/local/cuda, CUDA 13.x on the GPU machine) and carried prebuilt for the older runtimes
# (Debian's 11.8 and 12.4, built on a CPU machine: tests/gpu/compat/README.md).
#
# Checks, per runtime (limit 1 GiB, fresh ledger each; NVML watched from outside by
# tests/gpu/memory/nvml_peak.py):
#   runtime API        runtime_api_check: same output with and without libvgpu.so
#   runtime layers     its verbose log: cuMemAlloc_v2, cuLaunchKernel, cuGraphLaunch reached through
#                      cuGetProcAddress (the runtime's own requests)
#   driver API         driver_api_check (this toolkit's cuda.h): same output with and without
#   memory queries     query_check: cudaMemGetInfo, totalGlobalMem, cuMemGetInfo, cuDeviceTotalMem = 1 GiB
#   path <name>        paths_check <name> (every allocation path: driver and runtime API, pools,
#                      VMM, arrays, graph memory nodes incl. cudaGraphAddMemAllocNode): refused with
#                      out-of-memory at <= 1 GiB, NVML peak <= 1 GiB
#   pinned host        paths_check pinned: 2 GiB of pinned host memory is not charged
#   compute 2 ms at 30 spin: 2 ms kernels under CUDA_DEVICE_SM_LIMIT=30 reach 30 +-3 % of the
#                      native throughput (native runs before and after)
# Prints the matrix (check x runtime, PASS/FAIL with the figure) and writes it to
# $OUT/compat-matrix.md; logs to $OUT/compat-checks.log.
#
# Sourced by tests/gpu/run.sh --only compat [--compat-bins DIR] (uses its row(), $ROOT, $BUILD,
# $LIB, $OUT, $LOG). DIR (default: compat-bins/ in the repository) holds one folder per prebuilt
# runtime, each with the programs and BUILD_INFO; 11.8 and 12.4 are expected. About 4 minutes on
# an H200.
# Rules honoured: every CUDA return code checked (by the programs), no managed memory beyond 4 GiB,
# no clock / MIG / compute-mode changes.

COMPAT_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
COMPAT_BINS=${COMPAT_BINS:-$ROOT/compat-bins}
COMPAT_EXPECTED="12.4 11.8"  # prebuilt runtimes the matrix must have, besides this machine's
COMPAT_LOG="$OUT/compat-checks.log"
COMPAT_TMP=$(mktemp -d /tmp/vgpu-compat.XXXXXX)
COMPAT_LIMIT_MIB=1024
COMPAT_LIMIT=$((COMPAT_LIMIT_MIB << 20))
COMPAT_STARTED=$(date +%s)
: >"$COMPAT_LOG"
declare -A COMPAT_CELL COMPAT_DIR
COMPAT_CHECKS=()
COMPAT_RUNTIMES=()

# compat_cell <runtime> <check> <PASS|FAIL> <figure>
compat_cell() {
  local rt=$1 check=$2
  [[ " ${COMPAT_CHECKS[*]} " == *" ${check// /_} "* ]] || COMPAT_CHECKS+=("${check// /_}")
  COMPAT_CELL["$rt|${check// /_}"]="$3 $4"
  echo "== compat $rt: $check: $3 $4" >>"$COMPAT_LOG"
}
# compat_run <name> [VAR=value...] -- <command...>: under vgpu (1 GiB, fresh ledger), watched by
# nvml_peak.py. Sets COMPAT_OUTPUT, COMPAT_RESULT (last "result" line), COMPAT_PEAK (bytes).
compat_run() {
  local name=$1
  shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local ledger
  ledger=$(mktemp -d "$COMPAT_TMP/$name.XXXX")
  COMPAT_OUTPUT=$(timeout -k 10 120 python3 "$ROOT/tests/gpu/memory/nvml_peak.py" --gpus 0 -- \
    env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT=${COMPAT_LIMIT_MIB}MiB CUDA_DEVICE_MEMORY_SHARED_CACHE="$ledger/ledger" \
    ${envs[@]+"${envs[@]}"} "$@" 2>&1)
  { echo "### $name (exit $?): $*"; printf '%s\n' "$COMPAT_OUTPUT"; echo; } >>"$COMPAT_LOG"
  COMPAT_RESULT=$(printf '%s\n' "$COMPAT_OUTPUT" | grep '^result ' | tail -1)
  COMPAT_PEAK=$(field "$(printf '%s\n' "$COMPAT_OUTPUT" | grep '^nvml_peak gpu=0 ' | tail -1)" peak_bytes)
}
compat_no_result() { echo "no result: $(printf '%s\n' "$COMPAT_OUTPUT" | grep -v '^nvml_peak' | tail -1 | cut -c1-120)"; }

# spin_rate <bin> <cycles> <dev_us> [VAR=value...]: kernels/s of one spin run (empty on failure).
compat_spin_rate() {
  local bin=$1 cycles=$2 dev_us=$3
  shift 3
  local ledger out
  ledger=$(mktemp -d "$COMPAT_TMP/spin.XXXX")
  out=$(env "$@" CUDA_DEVICE_MEMORY_SHARED_CACHE="$ledger/ledger" timeout 60 "$bin" run "$cycles" "$dev_us" 0.8 2.5 2>>"$COMPAT_LOG")
  echo "spin $* -> $out" >>"$COMPAT_LOG"
  printf '%s\n' "$out" | python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["rate"])' 2>/dev/null
}

compat_runtime() {  # compat_runtime <label> <folder of programs>
  local rt=$1 bin=$2
  COMPAT_RUNTIMES+=("$rt")
  COMPAT_DIR[$rt]=$bin
  echo "== compat: runtime $rt ($bin: $(tr '\n' ' ' <"$bin/BUILD_INFO" 2>/dev/null))" | tee -a "$LOG" >>"$COMPAT_LOG"

  # Runtime API, same results; the runtime's requests reach the hooks.
  local native="$COMPAT_TMP/$rt.rt.native" hooked="$COMPAT_TMP/$rt.rt.vgpu" err="$COMPAT_TMP/$rt.rt.err"
  if "$bin/runtime_api_check" >"$native" 2>>"$COMPAT_LOG" && LD_PRELOAD="$LIB" "$bin/runtime_api_check" >"$hooked" 2>>"$COMPAT_LOG" &&
    cmp -s "$native" "$hooked"; then
    compat_cell "$rt" "runtime API: same results under vgpu" PASS "$(wc -l <"$hooked") lines, $(grep -c checksum "$hooked") checksums"
  else
    compat_cell "$rt" "runtime API: same results under vgpu" FAIL "$(diff "$native" "$hooked" 2>&1 | head -2 | tr '\n' ' ' | cut -c1-80)"
  fi
  LD_PRELOAD="$LIB" LIBCUDA_LOG_LEVEL=4 "$bin/runtime_api_check" >/dev/null 2>"$err"
  local missing="" p
  for p in "cuMemAlloc_v2 reached through cuGetProcAddress" "cuLaunchKernel reached through cuGetProcAddress" \
    "cuGraphLaunch reached through cuGetProcAddress"; do
    grep -q -- "$p" "$err" || missing+="${p%% *} "
  done
  [ -z "$missing" ] && compat_cell "$rt" "runtime: hooks reached through its cuGetProcAddress" PASS "$(grep -c 'reached through cuGetProcAddress' "$err") hooks" ||
    compat_cell "$rt" "runtime: hooks reached through its cuGetProcAddress" FAIL "missing $missing"

  # Driver API through this toolkit's cuda.h (its versioned names).
  native="$COMPAT_TMP/$rt.drv.native"
  hooked="$COMPAT_TMP/$rt.drv.vgpu"
  if "$bin/driver_api_check" >"$native" 2>>"$COMPAT_LOG" && LD_PRELOAD="$LIB" "$bin/driver_api_check" >"$hooked" 2>>"$COMPAT_LOG" &&
    cmp -s "$native" "$hooked"; then
    compat_cell "$rt" "driver API (its cuda.h): same results under vgpu" PASS "$(wc -l <"$hooked") lines"
  else
    compat_cell "$rt" "driver API (its cuda.h): same results under vgpu" FAIL "see compat-checks.log"
  fi

  # Memory queries.
  compat_run "$rt-query" -- "$bin/query_check" --limit-mib $COMPAT_LIMIT_MIB
  if [ -z "$COMPAT_RESULT" ]; then
    compat_cell "$rt" "memory queries show 1 GiB" FAIL "$(compat_no_result)"
  else
    compat_cell "$rt" "memory queries show 1 GiB" "$(field "$COMPAT_RESULT" verdict)" \
      "runtime $(mib "$(field "$COMPAT_RESULT" rt_total)"), props $(mib "$(field "$COMPAT_RESULT" props_total)"), cuMemGetInfo $(mib "$(field "$COMPAT_RESULT" cu_total)"), cuDeviceTotalMem $(mib "$(field "$COMPAT_RESULT" device_total)") MiB"
  fi

  # Every allocation path, then pinned host memory.
  local path verdict figure
  for path in $("$bin/paths_check" --list 2>>"$COMPAT_LOG") pinned; do
    compat_run "$rt-$path" -- "$bin/paths_check" "$path" --limit-mib $COMPAT_LIMIT_MIB --step-mib 64 --cap-mib 4096
    if [ -z "$COMPAT_RESULT" ]; then
      compat_cell "$rt" "path $path" FAIL "$(compat_no_result)"
      continue
    fi
    verdict=$(field "$COMPAT_RESULT" verdict)
    if [ "$(field "$COMPAT_RESULT" refused)" = yes ]; then
      figure="$(field "$COMPAT_RESULT" code_name | sed 's/CUDA_ERROR_OUT_OF_MEMORY\|cudaErrorMemoryAllocation/OOM/')"
      figure+=" at $(field "$COMPAT_RESULT" stage) after $(field "$COMPAT_RESULT" obtained_mib) MiB"
    else
      figure="NOT refused, got $(field "$COMPAT_RESULT" obtained_mib) MiB"
    fi
    [ "$path" = pinned ] && figure="host $(field "$COMPAT_RESULT" host_ok), then $figure"
    if [ -z "$COMPAT_PEAK" ] || [ "$COMPAT_PEAK" -gt $COMPAT_LIMIT ]; then verdict=FAIL; fi
    compat_cell "$rt" "path $path" "$verdict" "$figure, peak $(mib "$COMPAT_PEAK")"
  done

  # Compute: 2 ms spin kernels at limit 30, against native runs before and after.
  local cal cycles dev_us n1 lim n2
  cal=$(timeout 60 "$bin/spin" calibrate 2000 2>>"$COMPAT_LOG")
  cycles=$(printf '%s' "$cal" | python3 -c 'import json, sys; print(json.load(sys.stdin)["cycles"])' 2>/dev/null)
  dev_us=$(printf '%s' "$cal" | python3 -c 'import json, sys; print(json.load(sys.stdin)["dev_us"])' 2>/dev/null)
  if [ -z "$cycles" ]; then
    compat_cell "$rt" "compute: 2 ms kernels at limit 30" FAIL "calibration failed: $(printf '%s' "$cal" | tail -1)"
  else
    n1=$(compat_spin_rate "$bin/spin" "$cycles" "$dev_us")
    lim=$(compat_spin_rate "$bin/spin" "$cycles" "$dev_us" LD_PRELOAD="$LIB" CUDA_DEVICE_SM_LIMIT=30)
    n2=$(compat_spin_rate "$bin/spin" "$cycles" "$dev_us")
    local share
    share=$(awk -v a="$n1" -v l="$lim" -v b="$n2" 'BEGIN { if (a > 0 && b > 0 && l > 0) printf "%.1f", 200 * l / (a + b) }')
    if [ -n "$share" ] && awk -v s="$share" 'BEGIN { exit !(s >= 27 && s <= 33) }'; then v=PASS; else v=FAIL; fi
    compat_cell "$rt" "compute: 2 ms kernels at limit 30" $v "achieved ${share:-?} (native $(printf '%.1f' "${n1:-0}")/$(printf '%.1f' "${n2:-0}") kernels/s, limited $(printf '%.1f' "${lim:-0}"))"
  fi
}

echo "== compat: runtime matrix (log: $COMPAT_LOG)" | tee -a "$LOG"
COMPAT_NATIVE="$BUILD/compat/native"
if compat_build=$(bash "$COMPAT_HERE/build.sh" /usr/local/cuda "$COMPAT_NATIVE" 2>&1); then
  echo "$compat_build" >>"$COMPAT_LOG"
  compat_runtime "$(sed -n 's/^cuda_release=//p' "$COMPAT_NATIVE/BUILD_INFO")" "$COMPAT_NATIVE"
else
  echo "$compat_build" >>"$COMPAT_LOG"
  row "compat: build with /usr/local/cuda" FAIL "$(printf '%s\n' "$compat_build" | tail -1 | cut -c1-120)"
fi
for rt in $COMPAT_EXPECTED; do
  if [ -f "$COMPAT_BINS/$rt/BUILD_INFO" ]; then
    compat_runtime "$rt" "$COMPAT_BINS/$rt"
  else
    row "compat: prebuilt programs for runtime $rt" FAIL "$COMPAT_BINS/$rt/BUILD_INFO missing: build them with tests/gpu/compat/build.sh (README there)"
  fi
done

# The matrix, and one summary row per runtime for run.sh's table.
{
  echo "vgpu runtime matrix on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(date -u +%F), limit 1 GiB"
  printf '| check |'
  for rt in "${COMPAT_RUNTIMES[@]}"; do
    printf ' runtime %s (CUDART_VERSION %s) |' "$rt" "$(sed -n 's/^cudart_version=//p' "${COMPAT_DIR[$rt]}/BUILD_INFO")"
  done
  printf '\n|---|'
  for rt in "${COMPAT_RUNTIMES[@]}"; do printf -- '---|'; done
  printf '\n'
  for check in "${COMPAT_CHECKS[@]}"; do
    printf '| %s |' "${check//_/ }"
    for rt in "${COMPAT_RUNTIMES[@]}"; do printf ' %s |' "${COMPAT_CELL["$rt|$check"]:-not run}"; done
    printf '\n'
  done
} >"$OUT/compat-matrix.md"
for rt in "${COMPAT_RUNTIMES[@]}"; do
  pass=0 total=0 failed=""
  for check in "${COMPAT_CHECKS[@]}"; do
    total=$((total + 1))
    case "${COMPAT_CELL["$rt|$check"]:-}" in PASS*) pass=$((pass + 1)) ;; *) failed+="${check//_/ }; " ;; esac
  done
  [ $pass = $total ] && v=PASS || v=FAIL
  row "compat: runtime $rt, every check" $v "$pass of $total${failed:+; failed: ${failed%; }}"
done
rm -rf "$COMPAT_TMP"
echo "== compat checks took $(($(date +%s) - COMPAT_STARTED)) s" | tee -a "$LOG"
echo
cat "$OUT/compat-matrix.md"
