#!/usr/bin/env bash
# Builds vgpu on the GPU machine (CMake + CUDA headers only, no Debian packages) and runs every
# real-GPU check in one go. Prints a table last. Full logs go to $OUT (or build-gpu/out).
#
# Usage: tests/gpu/run.sh [--quick] [--only PARTS] [--compat-bins DIR]
#   --quick        skips the framework checks and oversubscription, fewer benchmark rounds, and the
#                  compute part runs targets 30 and 60 only
#   --only PARTS   comma-separated subset of the parts below (default: all of them but compat)
#   --compat-bins DIR  the compat part's prebuilt programs, one folder per runtime (default:
#                  compat-bins/ in the repository; tests/gpu/compat/README.md)
# Parts, with their duration on an H200 (the full run, about 20 minutes, does not fit one
# 10-minute device call: run "--only interpose,memory,oversub", "--only overhead,node",
# "--only compute", the matrix in two parts (below) and "--only compat"; on 2026-11-26
# "interpose,memory,oversub,overhead" ran past 10 minutes in the overhead part's rounds):
#   interpose  the library's shape; same results with and without it (driver/runtime API,
#              PyTorch, JAX, CuPy); hook layers; pass-through (~2 min)
#   memory     the hard memory limit on all 14 allocation paths, under the frameworks, the free
#              figure at three seeds per allocator, groups of 8, 16 and 32 processes (~3 min)
#   oversub    memory oversubscription (~0.5 min)
#   overhead   launch and alloc/free cost, library against native (~2 min)
#   compute    compute-limit accuracy, spin kernels and PyTorch training (bench/compute_accuracy.py,
#              ~4 min; --quick ~2 min); the period stretched for 16 streams of 5 ms kernels, kept
#              for one stream (~10 s); VGPU_COMPUTE_TRACE read by bench/compute/trace_report.py
#              (~10 s); the limited launch path's rate against native, 1 and 16 streams (~20 s);
#              light measurement: a launcher slower than its kernels well below its limit keeps
#              its native rate (~15 s); launchers slower than their kernels, with expensive ones among cheap ones, held
#              within their share at a limit of 60 (bench/compute/host_mix.py, ~20 s); a server
#              below its limit beside a trainer of one stream and one of 16 streams, with and
#              without give way (bench/compute/server_trainer.py, ~2 min)
#   matrix     the compute limit's concurrency matrix: streams, host threads, processes, graphs,
#              a server's steps, cuBLAS, training (PyTorch; JAX when installed), serving when serve.py exists,
#              co-located 30+60 and 3 x 30 (bench/compute_matrix.py, ~14 min with serving: more
#              than one device call; --quick: limits 30 and 60, ~6 min); VGPU_MATRIX_BUDGET=S
#              passes --budget S (rows that would end later are not run), VGPU_MATRIX_ARGS="..."
#              more options, e.g. one part per call:
#                "--rows '1x*,2x*,4x*,8x*,16x*,4threads*,graph*,*procs*,steps*,jax*' --colocated 4x200us",
#                then "--rows 'matmul*,train,serving' --colocated matmul"
#              (bench/compute_matrix_test.py checks that each fits a call), joined
#              afterwards with bench/compute_matrix.py --from-json A.json B.json --out DIR
#   node       vgpu-node on real NVML (tests/node/gpu/node_gpu_check.sh, ~2 min)
#   compat     only when named: the runtime matrix, every check of the real-GPU test programs
#              built with CUDA 13.x here and 12.4 / 11.8 prebuilt (tests/gpu/compat/run_compat.sh,
#              ~4 min)
# Rules honoured here: no clock / compute-mode / MIG / persistence changes, no GPU reset, no
# managed memory beyond what the card has free, every CUDA return code checked.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${VGPU_GPU_BUILD:-$ROOT/build-gpu}
OUT=${OUT:-$BUILD/out}
QUICK=0
ONLY=all
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --only) ONLY=${2:?--only needs a list of parts}; shift ;;
    --compat-bins) COMPAT_BINS=${2:?--compat-bins needs a folder}; shift ;;
    *) echo "usage: tests/gpu/run.sh [--quick] [--only interpose,memory,oversub,overhead,compute,matrix,node,compat] [--compat-bins DIR]" >&2; exit 2 ;;
  esac
  shift
done
for part in ${ONLY//,/ }; do
  case $part in all | interpose | memory | oversub | overhead | compute | matrix | node | compat) ;;
    *) echo "tests/gpu/run.sh: unknown part '$part' in --only (parts: interpose memory oversub overhead compute matrix node compat)" >&2; exit 2 ;;
  esac
done
want() { { [ "$ONLY" = all ] && [ "$1" != compat ]; } || [[ ",$ONLY," == *",$1,"* ]]; }
DETAIL="$BUILD/detail"  # per-check outputs; $OUT keeps the few files that come back
mkdir -p "$BUILD/gpu" "$OUT" "$DETAIL"
. "$ROOT/tests/gpu/report.sh"
report_init "$OUT/gpu-checks.log"
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

if want interpose; then
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

fi  # interpose

# --- memory limit: paths, NVML peak, frameworks (tests/gpu/memory/run_memory.sh) ------------------
want memory && source "$ROOT/tests/gpu/memory/run_memory.sh"
# Oversubscription: 3 GiB of PyTorch tensors under a 1 GiB limit (tests/gpu/memory/oversubscribe.sh).
[ $QUICK = 0 ] && want oversub && source "$ROOT/tests/gpu/memory/oversubscribe.sh"

if want overhead; then
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
# ratio_ok <ratio> <min|max> <bound>: an empty or non-numeric ratio (the benchmark failed) is a FAIL.
ratio_ok() { awk -v r="$1" -v k="$2" -v b="$3" 'BEGIN{ if (r !~ /^[0-9]+(\.[0-9]+)?$/) exit 1; exit !(k == "min" ? r + 0 >= b : r + 0 <= b) }'; }
ratio_ok "$lr" min 0.99 && v=PASS || v=FAIL
row "bench in-process A/B: cuLaunchKernel calls/s (CPU cost, queue not full)" $v "native $(abv ab_launch_rate_native)/s vgpu $(abv ab_launch_rate_vgpu)/s ratio $lr (min 0.99)"
ratio_ok "$ar" max 1.03 && v=PASS || v=FAIL
row "bench in-process A/B: cuMemAlloc+cuMemFree" $v "native $(abv ab_alloc_free_pair_native) ns vgpu $(abv ab_alloc_free_pair_vgpu) ns ratio $ar (max 1.03)"
# ab_limited <label> <memory limit> <max ratio, or "-" to show without judging>: the alloc/free
# A/B with memory accounting on, under a fresh ledger with that limit.
ab_limited() {
  local label=$1 limit=$2 bound=$3 out ratio v
  rm -f "$BUILD/ab-ledger"
  out=$(CUDA_DEVICE_MEMORY_LIMIT=$limit CUDA_DEVICE_MEMORY_SHARED_CACHE="$BUILD/ab-ledger" \
    $PIN "$BUILD/bench/overhead_driver" ab "$LIB" 2560 5000 1048576 "$ROUNDS" 2>>"$LOG")
  echo "$out" >>"$OUT/bench.md"
  ratio=$(echo "$out" | awk '$1 == "ab_alloc_free_pair_ratio" {print $2}')
  if [ "$bound" = - ]; then
    ratio_ok "$ratio" min 0 && v=INFO || v=FAIL
  else
    ratio_ok "$ratio" max "$bound" && v=PASS || v=FAIL
  fi
  row "bench in-process A/B, $label: cuMemAlloc+cuMemFree" $v "native $(echo "$out" | awk '$1=="ab_alloc_free_pair_native"{print $2}') ns vgpu $(echo "$out" | awk '$1=="ab_alloc_free_pair_vgpu"{print $2}') ns ratio $ratio$([ "$bound" = - ] || echo " (max $bound)")"
}
# Memory accounting on, a limit far above what the benchmark uses.
ab_limited "accounting on" 64GiB 1.05
# Near the limit (within 256 MiB of it) every reservation reads NVML first (Reconcile): the
# price of an exact limit where it matters, shown rather than judged. 640 MiB: the context
# (about 520 MiB) plus the 1 MiB blocks stay under it, always within 256 MiB of it.
ab_limited "within 256 MiB of the limit" 640MiB -
# Process-level, alternating runs with and without LD_PRELOAD (end to end, noisier).
bench runtime empty_kernel_launch_rate:min:0.99 $PIN "$G/overhead_runtime" launch 300000
# Control: the same alternation with an empty library preloaded instead of libvgpu.so. A ratio
# below 1 here is what preloading any library costs, not vgpu's hooks.
ctl=$(python3 "$ROOT/bench/compare.py" --library "$BUILD/bench/libvgpu_null_preload.so" --rounds "$ROUNDS" \
  --label control -- $PIN "$G/overhead_runtime" launch 300000 2>>"$LOG")
echo "$ctl" >>"$OUT/bench.md"
row "bench runtime empty_kernel_launch_rate, an empty library preloaded (control)" INFO \
  "$(echo "$ctl" | awk -F'|' '{print "native " $3 " empty library " $4 " ratio " $5 " (" $7 ")"}' | xargs)"
bench runtime cudaMalloc_cudaFree_pair:max:1.03 $PIN "$G/overhead_runtime" alloc 20000 1048576
bench driver empty_kernel_launch_rate:min:0.99 $PIN "$BUILD/bench/overhead_driver" launch 300000
bench driver cuMemAlloc_cuMemFree_pair:max:1.03 $PIN "$BUILD/bench/overhead_driver" alloc 20000 1048576
fi  # overhead

# --- compute limit: achieved share against the target (bench/compute_accuracy.py) -----------------
# The workloads that run at full clock natively; the power-capped bf16 matmul and graph replay
# are measured by the full benchmark (docs/compute.md explains why their throughput ratio differs).
if want compute; then
  echo "== compute-limit accuracy (log: $DETAIL/compute/compute-accuracy.log)" | tee -a "$LOG"
  mkdir -p "$DETAIL/compute"
  args=(--library "$LIB" --out "$DETAIL/compute" --workloads spin2ms,spin50us,spin5us,train)
  [ $QUICK = 1 ] && args+=(--quick) || args+=(--targets 10,30,60,90 --seconds 2.5 --warmup 1)
  python3 "$ROOT/bench/compute_accuracy.py" "${args[@]}" >"$DETAIL/compute/stdout.txt" 2>>"$LOG"
  rc=$?
  cp "$DETAIL/compute/compute-accuracy.md" "$OUT/" 2>/dev/null
  if [ -s "$DETAIL/compute/compute-accuracy.json" ]; then
    while IFS=$'\t' read -r verdict name detail; do row "$name" "$verdict" "$detail"; done < <(python3 - "$DETAIL/compute/compute-accuracy.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    if r.get("expected_fail"):
        continue
    label = f"compute {r['wl']} {r['scenario']} limit {r.get('label', r.get('target'))}"
    got = r.get("achieved")
    detail = r.get("error") or (f"achieved {got:.1f}" if isinstance(got, (int, float)) else "no result")
    print(("PASS" if r.get("pass") else "FAIL") + "\t" + label + "\t" + detail)
PY
)
  else
    row "compute-limit accuracy" FAIL "no results (exit $rc); see $DETAIL/compute"
  fi
  # Long concurrent launches stretch the period (docs/compute.md, Runs): 16 streams of 5 ms kernels
  # from one thread run in periods of 150-200 ms at a limit of 60 (40 launch spans, at most
  # 200 ms); one stream of 50 us kernels keeps the configured 50 ms. Read from the limiter's
  # summary at exit (LIBCUDA_LOG_LEVEL=4).
  if nvcc -O2 -arch=sm_90 -o "$G/concurrency" "$ROOT/bench/compute/concurrency.cu" >>"$LOG" 2>&1; then
    for shape in "16 5000" "1 50"; do
      streams=${shape% *} kernel_us=${shape#* }
      out="$DETAIL/compute/period-$streams.txt"
      env LD_PRELOAD="$LIB" CUDA_DEVICE_SM_LIMIT=60 CUDA_DEVICE_MEMORY_SHARED_CACHE="$DETAIL/compute/period-$streams.ledger" \
        LIBCUDA_LOG_LEVEL=4 "$G/concurrency" run --streams "$streams" --kernel-us "$kernel_us" --warmup 0.5 --seconds 2 >"$out" 2>&1
      rc=$?
      period=$(sed -n 's/.*compute device 0: .*period \([0-9.]*\) ms.*/\1/p' "$out" | tail -1)
      name="compute period, $streams x $kernel_us us streams from one thread, limit 60"
      if [ $rc -ne 0 ] || [ -z "$period" ]; then
        row "$name" FAIL "exit $rc, no summary; see $out"
      elif { [ "$streams" = 16 ] && le 150 "$period" && le "$period" 200; } || { [ "$streams" = 1 ] && le "$period" 50; }; then
        row "$name" PASS "period $period ms"
      else
        row "$name" FAIL "period $period ms"
      fi
    done
    # VGPU_COMPUTE_TRACE and concurrency --trace (docs/compute.md, Tracing): 16 streams of 50 us
    # at 60 and natively; the report must read the traces, and the busy share it finds in them
    # must be the limit (the work per busy ms against native is shown: what the row loses).
    T="$DETAIL/compute/trace"
    rm -rf "$T" && mkdir -p "$T"  # lib.<pid> of an earlier run would be read instead
    args=(run --streams 16 --kernel-us 50 --warmup 0.5 --seconds 2)
    if "$G/concurrency" "${args[@]}" --trace "$T/native.trace" >"$T/native.txt" 2>&1 &&
      env LD_PRELOAD="$LIB" CUDA_DEVICE_SM_LIMIT=60 CUDA_DEVICE_MEMORY_SHARED_CACHE="$T/ledger" VGPU_COMPUTE_TRACE="$T/lib.%p" \
        "$G/concurrency" "${args[@]}" --trace "$T/bench.trace" >"$T/limited.txt" 2>&1 &&
      python3 "$ROOT/bench/compute/trace_report.py" --bench "$T/bench.trace" --library "$(ls "$T"/lib.* | head -1)" \
        --native "$T/native.trace" >"$T/report.txt" 2>&1; then
      cp "$T/report.txt" "$OUT/compute-trace-report.txt"
      busy=$(sed -n 's/^busy \([0-9.]*\)% of the window.*/\1/p' "$T/report.txt")
      work=$(sed -n 's/.*work per busy ms \([0-9.]*\) of native.*/\1/p' "$T/report.txt")
      name="compute trace, 16 x 50 us at 60: busy share from VGPU_COMPUTE_TRACE"
      if [ -n "$busy" ] && le 57 "$busy" && le "$busy" 63; then
        row "$name" PASS "busy $busy% of the window, work per busy ms $work of native (compute-trace-report.txt)"
      else
        row "$name" FAIL "busy '$busy'% (expected 60 +-3); see $T/report.txt"
      fi
    else
      row "compute trace, 16 x 50 us at 60" FAIL "a run or the report failed; see $T"
    fi
    # The limited launch path's host cost (docs/compute.md, Costs): one host thread launching 2 us
    # kernels (host-bound) natively and at a limit of 99, whose runs admit every launch at once;
    # three alternations of 1 s each, the median ratio of launch rates. Host-bound launch rates
    # vary by up to 30% between runs on the device machine (2026-11-26), hence the bound: 0.85 for
    # one stream; 16 streams (a begin, a mark and a timestamp per idle start of each) are shown.
    # Each limited round also shows the tracker's marks per launch (its summary at exit): on the
    # H200 a stream of 2 us kernels classified uniform was marked 0.02-0.11 times per launch and
    # ran at 0.94-0.99 of native; one that was not, 0.30-0.52 times with a query per launch, at
    # 0.58-0.78 (docs/compute.md, "Uniform streams").
    rate_of() { sed -n 's/.*"rate": \([0-9.]*\).*/\1/p'; }  # concurrency's JSON line
    marks_of() {  # the summary's "N launches, M marks" -> M / N
      sed -n 's/.* \([0-9][0-9]*\) launches, \([0-9][0-9]*\) marks .*/\1 \2/p' "$1" | tail -1 |
        awk '$1 > 0 { printf "%.2f", $2 / $1; found = 1 } END { if (!found) printf "?" }'
    }
    # alternate KEY LIMIT EXTRA_ENV ARGS...: three rounds of concurrency ARGS natively, then
    # preloaded at LIMIT with EXTRA_ENV (a word such as VAR=value, or ""); sets ratios (limited
    # over native launches/s), rates and marks per round, and median (empty: a run failed).
    alternate() {
      local key=$1 limit=$2 extra=$3 native limited round
      shift 3
      local ledger="$DETAIL/compute/$key.ledger" summary="$DETAIL/compute/$key.summary"
      ratios="" rates="" marks="" median=""
      for round in 1 2 3; do
        rm -f "$ledger"
        native=$("$G/concurrency" "$@" 2>>"$LOG" | rate_of)
        limited=$(env LD_PRELOAD="$LIB" CUDA_DEVICE_SM_LIMIT="$limit" CUDA_DEVICE_MEMORY_SHARED_CACHE="$ledger" \
          $extra LIBCUDA_LOG_LEVEL=4 "$G/concurrency" "$@" 2>"$summary" | rate_of)
        cat "$summary" >>"$LOG"
        [ -n "$native" ] && [ -n "$limited" ] || { ratios=""; return; }
        ratios+="$(awk -v a="$limited" -v b="$native" 'BEGIN { printf "%.3f", a / b }') "
        rates+="${limited%.*}/${native%.*} "
        marks+="$(marks_of "$summary") "
      done
      median=$(echo $ratios | tr ' ' '\n' | sort -n | sed -n 2p)
    }
    for streams in 1 16; do
      alternate "launch-$streams" 99 "" run --streams "$streams" --kernel-us 2 --warmup 0.3 --seconds 1
      name="compute launch path: $streams stream(s) of 2 us kernels at 99, launch rate against native"
      if [ -z "$ratios" ]; then
        row "$name" FAIL "a run failed; see $LOG"
        continue
      fi
      detail="median ratio $median of ${ratios% } (limited/native launches/s: ${rates% }; marks per launch: ${marks% })"
      if [ "$streams" != 1 ]; then
        row "$name" INFO "$detail"
      elif le 0.85 "$median"; then
        row "$name" PASS "$detail; min 0.85"
      else
        row "$name" FAIL "$detail; min 0.85"
      fi
    done
    # Light measurement (docs/compute.md, "Light measurement"): a launcher slower than its kernels
    # (10 us kernels, 20 us of host work after each launch: its stream is idle at every launch)
    # well below its limit (90) keeps its native rate; measured exactly (VGPU_COMPUTE_LIGHT=false)
    # every launch pays a begin and a mark, shown as INFO (on the H200 0.976 and 0.893 of native,
    # 2026-11-27). Three alternations, the median ratio of launch rates.
    for light in true false; do
      alternate "light-$light" 90 "VGPU_COMPUTE_LIGHT=$light" run --streams 1 --kernel-us 10 --host-ns 20000 \
        --warmup 0.3 --seconds 1
      name="compute light measurement: 10 us kernels with 20 us host work at 90, VGPU_COMPUTE_LIGHT=$light"
      if [ -z "$ratios" ]; then
        row "$name" FAIL "a run failed; see $LOG"
        continue
      fi
      detail="median ratio $median of ${ratios% } against native; marks per launch: ${marks% }"
      if [ "$light" = false ]; then
        row "$name" INFO "$detail"
      elif le 0.95 "$median"; then
        row "$name" PASS "$detail; min 0.95"
      else
        row "$name" FAIL "$detail; min 0.95"
      fi
    done
    # Launchers slower than their kernels, expensive kernels among cheap ones (docs/compute.md,
    # "Launches measured alone"): at a limit of 60 their throughput must stay within what their
    # native busy share leaves (E) + 3 (on the H200 mixA ran at 72.7-84.0% GPU-Util before
    # launches were measured alone, all of its native throughput). GPU-Util is shown: it counts
    # the limiter's events, which the limiter does not charge (BusyTrackerOptions::mark_gpu_ns).
    H="$DETAIL/compute/host-mix"
    if python3 "$ROOT/bench/compute/host_mix.py" --library "$LIB" --binary "$G/concurrency" --limits 60 \
      --rows mixA,mixC --out "$H" >>"$LOG" 2>&1; then
      mixes=0
      while IFS='|' read -r mix share bound detail; do
        mixes=$((mixes + 1))
        name="compute host-bound mix $mix at 60: throughput within its share"
        if le "$share" "$bound"; then row "$name" PASS "$detail"; else row "$name" FAIL "$detail; max $bound"; fi
      done < <(python3 - "$H/host-mix.json" <<'PY'
import json, sys
f = lambda v: "?" if v is None else f"{v:.1f}"
for r in json.load(open(sys.argv[1]))["results"]:
    if r.get("limit") is not None:  # no share or no E: empty fields, which fail the bound
        share, e = r.get("share"), r.get("expected")
        print(f"{r['row']}|{f(share) if share is not None else ''}|{f(e + 3) if e is not None else ''}|"
              f"{f(share)} of native where its busy share leaves {f(e)}, GPU-Util {f(r.get('util'))}, "
              f"limiter's measure {f(r.get('measured_ppm', 0) / 1e4)}")
PY
      )
      [ "$mixes" -gt 0 ] || row "compute host-bound mixes at 60" FAIL "no limited run in $H/host-mix.json"
    else
      row "compute host-bound mixes at 60" FAIL "bench/compute/host_mix.py failed; see $LOG"
    fi
    # A server below its limit beside a trainer that fills its share (docs/compute.md, "Turns",
    # "Give way", off by default): server at 30, trainer at 60, separate containers started
    # together, with VGPU_COMPUTE_GIVE_WAY true and false alternating over two rounds. Beside a
    # trainer of 2 ms kernels on one stream, PASS: with give way the trainer keeps its limit (+-3)
    # and the server does more of its native rate than without (simulated: 55.1 against 40.5, the
    # trainer 57.9). Beside 16 streams of 50 us, whose launches overlap and whose runs therefore do
    # not give way, PASS: the setting moves neither the trainer nor the server by more than 3
    # points (simulated: the server 38.9 either way, the trainer 58.4 / 58.3).
    for trainer in long streams; do
      S="$DETAIL/compute/server-trainer-$trainer"
      if [ "$trainer" = long ]; then
        name="compute server at 30 beside a trainer at 60: give way"
      else
        name="compute server at 30 beside a trainer of 16 streams at 60: no give way"
      fi
      if python3 "$ROOT/bench/compute/server_trainer.py" --library "$LIB" --binary "$G/concurrency" --rounds 2 \
        --warmup 1 --seconds 3 --trainer "$trainer" --out "$S" >>"$LOG" 2>&1; then
        read -r verdict detail < <(python3 - "$S/server-trainer.json" "$trainer" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["mean"]
on, off, nat = m.get("give-way-on", {}), m.get("give-way-off", {}), m.get("together", {})
f = lambda v: "?" if v is None else f"{v:.1f}"
known = all(x.get(k) is not None for x in (on, off) for k in ("server", "trainer"))
if not known:
    ok = False
elif sys.argv[2] == "long":
    ok = abs(on["trainer"] - 60) <= 3 and on["server"] > off["server"]
else:
    ok = abs(on["trainer"] - off["trainer"]) <= 3 and abs(on["server"] - off["server"]) <= 3
rule = "60 +-3 with give way" if sys.argv[2] == "long" else "each within 3 of the other setting"
runs = [r["trainer"] for r in json.load(open(sys.argv[1]))["results"] if r["step"] == "give-way-on"]
overlap = [x["overlap"] for x in runs if "overlap" in x]
gives = sorted({"yes" if x["gives_way"] else "no" for x in runs if "gives_way" in x})
print("PASS" if ok else "FAIL", f"server {f(on.get('server'))} of native with give way, {f(off.get('server'))} "
      f"without; trainer {f(on.get('trainer'))} / {f(off.get('trainer'))} ({rule}); "
      f"natively together {f(nat.get('server'))} / {f(nat.get('trainer'))}; the trainer's launches overlap "
      f"{'/'.join(f'{v:.2f}' for v in overlap) or '?'} at exit with give way on, giving way: {'/'.join(gives) or '?'}")
PY
        )
        row "$name" "$verdict" "$detail"
      else
        row "$name" FAIL "bench/compute/server_trainer.py failed; see $LOG"
      fi
    done
  else
    row "compute period: bench/compute/concurrency.cu" FAIL "nvcc failed; see $LOG"
  fi
fi

# --- compute limit under concurrency: one row per workload and limit (bench/compute_matrix.py) ----
if want matrix; then
  echo "== compute-limit concurrency matrix (log: $DETAIL/matrix/compute-matrix.log)" | tee -a "$LOG"
  mkdir -p "$DETAIL/matrix"
  args=(--library "$LIB" --out "$DETAIL/matrix")
  [ $QUICK = 1 ] && args+=(--quick)
  [ -n "${VGPU_MATRIX_BUDGET:-}" ] && args+=(--budget "$VGPU_MATRIX_BUDGET")
  if [ -n "${VGPU_MATRIX_ARGS:-}" ]; then  # split as a shell would, without running anything in it
    mapfile -t extra < <(python3 -c 'import shlex, sys; print("\n".join(shlex.split(sys.argv[1])))' "$VGPU_MATRIX_ARGS" 2>/dev/null) &&
      [ ${#extra[@]} -gt 0 ] || { echo "VGPU_MATRIX_ARGS: cannot be split into options" >&2; exit 2; }
    args+=("${extra[@]}")
  fi
  python3 "$ROOT/bench/compute_matrix.py" "${args[@]}" >"$DETAIL/matrix/stdout.txt" 2>>"$LOG"
  rc=$?
  cp "$DETAIL/matrix/compute-matrix".{md,json,png} "$OUT/" 2>/dev/null
  if [ -s "$DETAIL/matrix/compute-matrix.tsv" ]; then
    while IFS=$'\t' read -r verdict name detail; do row "$name" "$verdict" "$detail"; done <"$DETAIL/matrix/compute-matrix.tsv"
  else
    row "compute-limit concurrency matrix" FAIL "no results (exit $rc); see $DETAIL/matrix"
  fi
fi

# --- vgpu-node on real NVML (tests/node/gpu/node_gpu_check.sh) ------------------------------------
if want node; then
  echo "== vgpu-node checks (results: $OUT/node-results.md)" | tee -a "$LOG"
  OUT="$DETAIL/node" VGPU_GPU_BUILD="$BUILD" bash "$ROOT/tests/node/gpu/node_gpu_check.sh" >>"$LOG" 2>&1
  rc=$?
  cp "$DETAIL/node/results.md" "$OUT/node-results.md" 2>/dev/null
  [ $rc = 0 ] && row "vgpu-node on real NVML (registration, /metrics within 1 s, bypass, ps/top)" PASS "$(grep -c PASS "$DETAIL/node/results.md" 2>/dev/null) PASS lines; node-results.md" ||
    row "vgpu-node on real NVML (registration, /metrics within 1 s, bypass, ps/top)" FAIL "exit $rc; node-results.md"
fi

# --- the runtime matrix: CUDA 13.x built here, 12.4 and 11.8 prebuilt (tests/gpu/compat) -----------
want compat && source "$ROOT/tests/gpu/compat/run_compat.sh"

{
  echo "vgpu real-GPU checks on $(cut -d, -f1,2 "$OUT/gpu.txt" | head -1), $(date -u +%F)"
  echo "| check | result | detail |"
  echo "|---|---|---|"
  report_print
} >"$OUT/table.md"
echo
cat "$OUT/table.md"
exit $FAILED
