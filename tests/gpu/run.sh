#!/usr/bin/env bash
# Builds vgpu on the GPU machine (CMake + CUDA headers only, no Debian packages) and runs every
# real-GPU check in one go. Prints a table last. Full logs go to $OUT (or build-gpu/out).
#
# Usage: tests/gpu/run.sh [--quick]     --quick skips the framework checks and uses fewer rounds
# Rules honoured here: no clock / compute-mode / MIG / persistence changes, no GPU reset, no
# managed memory beyond what the card has free, every CUDA return code checked.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${VGPU_GPU_BUILD:-$ROOT/build-gpu}
OUT=${OUT:-$BUILD/out}
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
DETAIL="$BUILD/detail"  # per-check outputs; $OUT keeps the few files that come back
mkdir -p "$BUILD/gpu" "$OUT" "$DETAIL"
LOG="$OUT/gpu-checks.log"
: >"$LOG"
ROWS=()
FAILED=0
row() {  # row <check> <PASS|FAIL|INFO> <detail>
  ROWS+=("| $1 | $2 | $3 |")
  [ "$2" = FAIL ] && FAILED=1
  echo "== $1: $2 $3" | tee -a "$LOG"
}
log() { echo "$@" >>"$LOG"; }

echo "== building" | tee -a "$LOG"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt" | tee -a "$LOG"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVGPU_BUILD_TESTS=OFF >>"$LOG" 2>&1 &&
  cmake --build "$BUILD" >>"$LOG" 2>&1 || { echo "build failed; see $LOG"; tail -30 "$LOG"; exit 1; }
LIB="$BUILD/libvgpu.so"
CUDA_INC=/usr/local/cuda/include
STUBS=/usr/local/cuda/lib64/stubs
G="$BUILD/gpu"
P="$ROOT/tests/preload/programs"
set -e
nvcc -O2 -arch=sm_90 -o "$G/runtime_api_check" "$ROOT/tests/gpu/runtime_api_check.cu" >>"$LOG" 2>&1
nvcc -O2 -arch=sm_90 -o "$G/overhead_runtime" "$ROOT/bench/overhead_runtime.cu" >>"$LOG" 2>&1
g++ -std=c++20 -O2 -I"$CUDA_INC" -o "$G/driver_api_check" "$ROOT/tests/gpu/driver_api_check.cc" -L"$STUBS" -lcuda
g++ -std=c++20 -O2 -I"$CUDA_INC" -I"$ROOT/src" -o "$G/proc_address" "$P/proc_address.cc" -ldl
g++ -std=c++20 -O2 -fPIC -shared -o "$G/libvgpu_test_next_a.so" "$P/next_a.cc" -ldl
g++ -std=c++20 -O2 -fPIC -shared -o "$G/libvgpu_test_next_b.so" "$P/next_b.cc"
g++ -std=c++20 -O2 -I"$CUDA_INC" -o "$G/dlsym_lookup" "$P/dlsym_lookup.cc" -L"$G" -Wl,--no-as-needed \
  -lvgpu_test_next_a -lvgpu_test_next_b -Wl,-rpath,"$G" -ldl
set +e

# --- 1. the library's shape --------------------------------------------------------------------
extra=$(nm -D --defined-only "$LIB" | awk '{print $3}' | grep -v -E '^(cu|nvml)' | grep -v -x dlsym | tr '\n' ' ')
[ -z "$extra" ] && row "exports: only cu*/nvml*/dlsym" PASS "$(nm -D --defined-only "$LIB" | wc -l) symbols" ||
  row "exports: only cu*/nvml*/dlsym" FAIL "$extra"
ldd "$LIB" | grep -q libstdc++ && row "no libstdc++ dependency" FAIL "$(ldd "$LIB" | grep libstdc++)" ||
  row "no libstdc++ dependency" PASS "ldd: $(ldd "$LIB" | awk '{print $1}' | tr '\n' ' ')"

# --- 2. same results with and without the library, and the layers reached ----------------------
# same_output <name> <command...>: runs natively and under LD_PRELOAD, compares stdout.
same_output() {
  local name=$1; shift
  local native="$DETAIL/$name.native.out" hooked="$DETAIL/$name.vgpu.out"
  if ! "$@" >"$native" 2>>"$LOG"; then row "$name: native run" FAIL "exit $?"; return; fi
  if ! LD_PRELOAD="$LIB" "$@" >"$hooked" 2>>"$LOG"; then row "$name: same results under vgpu" FAIL "exit $?"; return; fi
  if cmp -s "$native" "$hooked"; then
    row "$name: same results under vgpu" PASS "$(tail -1 "$hooked" | cut -c1-40); $(wc -l <"$hooked") lines identical"
  else
    row "$name: same results under vgpu" FAIL "$(diff "$native" "$hooked" | head -3 | tr '\n' ' ')"
  fi
}
# layers <name> <pattern...> -- <command...>: verbose run; every pattern must appear in stderr.
layers() {
  local name=$1; shift
  local patterns=()
  while [ "$1" != "--" ]; do patterns+=("$1"); shift; done; shift
  local err="$DETAIL/$name.verbose.err"
  LD_PRELOAD="$LIB" LIBCUDA_LOG_LEVEL=4 "$@" >/dev/null 2>"$err"
  local missing=""
  for p in "${patterns[@]}"; do grep -q -- "$p" "$err" || missing+="'$p' "; done
  [ -z "$missing" ] && row "$name: verbose log shows layers" PASS "$(grep -c 'reached through' "$err") hook/layer lines" ||
    row "$name: verbose log shows layers" FAIL "missing $missing"
}

same_output driver-api "$G/driver_api_check"
layers driver-api "cuInit reached through exported symbol" "cuMemAlloc_v2 reached through exported symbol" \
  "cuLaunchKernel reached through exported symbol" -- "$G/driver_api_check"
same_output runtime-api "$G/runtime_api_check"
layers runtime-api "cuGetProcAddress_v2 reached through dlsym" "cuMemAlloc_v2 reached through cuGetProcAddress" \
  "cuLaunchKernel reached through cuGetProcAddress" "cuGraphLaunch reached through cuGetProcAddress" -- "$G/runtime_api_check"

if "$G/proc_address" driver >>"$LOG" 2>&1; then n=PASS; else n=FAIL; fi
if LD_PRELOAD="$LIB" "$G/proc_address" vgpu >"$DETAIL/proc_address.out" 2>>"$LOG"; then
  row "cuGetProcAddress pointer identity (real driver)" PASS "native $n; $(cat "$DETAIL/proc_address.out")"
else
  row "cuGetProcAddress pointer identity (real driver)" FAIL "native $n; see log"
fi
LD_PRELOAD="$LIB" "$G/dlsym_lookup" vgpu >>"$LOG" 2>&1 && row "dlsym: driver handles only, RTLD_NEXT intact" PASS "" ||
  row "dlsym: driver handles only, RTLD_NEXT intact" FAIL "see log"
CUDA_DISABLE_CONTROL=true LD_PRELOAD="$LIB" "$G/proc_address" driver >>"$LOG" 2>&1 &&
  row "CUDA_DISABLE_CONTROL=true: pure pass-through" PASS "driver pointers handed out" ||
  row "CUDA_DISABLE_CONTROL=true: pure pass-through" FAIL "see log"
LD_PRELOAD="$LIB" nvidia-smi >"$DETAIL/nvidia-smi.vgpu.out" 2>&1 && row "nvidia-smi under vgpu" PASS "runs" ||
  row "nvidia-smi under vgpu" FAIL "$(tail -2 "$DETAIL/nvidia-smi.vgpu.out" | tr '\n' ' ')"

if [ $QUICK = 0 ]; then
  same_output pytorch python3 "$ROOT/tests/gpu/torch_train.py"
  layers pytorch "reached through cuGetProcAddress" -- python3 "$ROOT/tests/gpu/torch_train.py"
  same_output jax python3 "$ROOT/tests/gpu/jax_train.py"
  same_output cupy python3 "$ROOT/tests/gpu/cupy_check.py"
fi

# --- memory limit: paths, NVML peak, frameworks (tests/gpu/memory/run_memory.sh) ------------------
source "$ROOT/tests/gpu/memory/run_memory.sh"
# Oversubscription: 3 GiB of PyTorch tensors under a 1 GiB limit (tests/gpu/memory/oversubscribe.sh).
[ $QUICK = 0 ] && source "$ROOT/tests/gpu/memory/oversubscribe.sh"

# --- 3. overhead, library against native in one run ----------------------------------------------
ROUNDS=$([ $QUICK = 1 ] && echo 3 || echo 15)
PIN="taskset -c 2"  # one core for every run, so scheduling differences stay out of the ratio
bench() {  # bench <label> <target> <command...>
  local label=$1 target=$2; shift 2
  local line
  line=$(python3 "$ROOT/bench/compare.py" --library "$LIB" --rounds "$ROUNDS" --label "$label" --target "$target" -- "$@" 2>>"$LOG")
  local rc=$?
  echo "$line" >>"$OUT/bench.md"
  local metric ratio
  metric=$(echo "$line" | awk -F'|' '{print $2}' | xargs)
  ratio=$(echo "$line" | awk -F'|' '{print "native " $3 " vgpu " $4 " ratio " $5 " " $6 " (" $7 ")"}' | xargs)
  [ $rc = 0 ] && row "bench $metric" PASS "$ratio" || row "bench $metric" FAIL "$ratio"
}
: >"$OUT/bench.md"
# In-process interleaved A/B (driver entries vs vgpu's wrappers of them, one process): resolves 1%.
ab=$($PIN "$BUILD/bench/overhead_driver" ab "$LIB" 25600 5000 1048576 "$ROUNDS" 2>>"$LOG")
echo "$ab" >>"$OUT/bench.md"
abv() { echo "$ab" | awk -v m="$1" '$1 == m {print $2}'; }
lr=$(abv ab_launch_rate_ratio); ar=$(abv ab_alloc_free_pair_ratio)
awk -v r="$lr" 'BEGIN{exit !(r >= 0.99)}' && v=PASS || v=FAIL
row "bench in-process A/B: cuLaunchKernel calls/s (CPU cost, queue not full)" $v "native $(abv ab_launch_rate_native)/s vgpu $(abv ab_launch_rate_vgpu)/s ratio $lr (min 0.99)"
awk -v r="$ar" 'BEGIN{exit !(r <= 1.03)}' && v=PASS || v=FAIL
row "bench in-process A/B: cuMemAlloc+cuMemFree" $v "native $(abv ab_alloc_free_pair_native) ns vgpu $(abv ab_alloc_free_pair_vgpu) ns ratio $ar (max 1.03)"
# The same with memory accounting on (a limit far above what the benchmark uses).
rm -f "$BUILD/ab-ledger"
abm=$(CUDA_DEVICE_MEMORY_LIMIT=64GiB CUDA_DEVICE_MEMORY_SHARED_CACHE="$BUILD/ab-ledger" \
  $PIN "$BUILD/bench/overhead_driver" ab "$LIB" 2560 5000 1048576 "$ROUNDS" 2>>"$LOG")
echo "$abm" >>"$OUT/bench.md"
mr=$(echo "$abm" | awk '$1 == "ab_alloc_free_pair_ratio" {print $2}')
awk -v r="$mr" 'BEGIN{exit !(r <= 1.05)}' && v=PASS || v=FAIL
row "bench in-process A/B, accounting on: cuMemAlloc+cuMemFree" $v "native $(echo "$abm" | awk '$1=="ab_alloc_free_pair_native"{print $2}') ns vgpu $(echo "$abm" | awk '$1=="ab_alloc_free_pair_vgpu"{print $2}') ns ratio $mr (max 1.05)"
# Process-level, alternating runs with and without LD_PRELOAD (end to end, noisier).
bench runtime empty_kernel_launch_rate:min:0.99 $PIN "$G/overhead_runtime" launch 300000
bench runtime cudaMalloc_cudaFree_pair:max:1.03 $PIN "$G/overhead_runtime" alloc 20000 1048576
bench driver empty_kernel_launch_rate:min:0.99 $PIN "$BUILD/bench/overhead_driver" launch 300000
bench driver cuMemAlloc_cuMemFree_pair:max:1.03 $PIN "$BUILD/bench/overhead_driver" alloc 20000 1048576

{
  echo "vgpu real-GPU checks on $(cut -d, -f1,2 "$OUT/gpu.txt" | head -1), $(date -u +%F)"
  echo "| check | result | detail |"
  echo "|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
} >"$OUT/table.md"
echo
cat "$OUT/table.md"
exit $FAILED
