#!/bin/sh
# Shell-level tests of the vgpu executable: cli_test.sh <case> <vgpu> [<driver dir>]
#
# <driver dir> holds a libcuda.so.1 (the simulated driver, build/sim) for the cases that run a
# job. --library points at a dummy file, so the tests do not depend on libvgpu.so being built
# (ld.so warns that it cannot preload it and carries on). Exit 0 = pass, 77 = skipped.
set -u

CASE=$1
VGPU=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
DRIVER_DIR=${3:-}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-cli-test.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT
DUMMY_LIB=$WORK/libvgpu-dummy.so
: > "$DUMMY_LIB"
mkdir "$WORK/xdg" && chmod 700 "$WORK/xdg"

fail() {
  echo "FAIL ($CASE): $*" >&2
  exit 1
}

# expect_status <expected> <actual> <what>
expect_status() {
  [ "$2" -eq "$1" ] || fail "$3: exit status $2, expected $1; stderr: $(cat "$WORK/err" 2>/dev/null)"
}

# expect_in <file> <fixed string> <what>
expect_in() {
  grep -qF -- "$2" "$1" || fail "$3: \"$2\" not in $1: $(cat "$1")"
}

expect_not_in() {
  if grep -qF -- "$2" "$1"; then fail "$3: \"$2\" unexpectedly in $1: $(cat "$1")"; fi
}

# A job under the driver: vgpu run with the driver dir on the library path and a private
# XDG_RUNTIME_DIR, so run directories can be inspected.
vrun() {
  LD_LIBRARY_PATH=$DRIVER_DIR XDG_RUNTIME_DIR=$WORK/xdg "$VGPU" run --library "$DUMMY_LIB" "$@"
}

# The same as a background job whose $! is vgpu itself (a backgrounded shell function would be
# a subshell, and the signal would go to that instead). Sets VGPU_PID.
vrun_bg() {
  LD_LIBRARY_PATH=$DRIVER_DIR XDG_RUNTIME_DIR=$WORK/xdg "$VGPU" run --library "$DUMMY_LIB" "$@" \
    > "$WORK/out" 2> "$WORK/err" &
  VGPU_PID=$!
}

need_driver() {
  [ -n "$DRIVER_DIR" ] && [ -e "$DRIVER_DIR/libcuda.so.1" ] || {
    echo "SKIP: no libcuda.so.1 in '$DRIVER_DIR' (build the simulated driver)"; exit 77; }
}

# Waits up to 10 s for a file to exist.
wait_for() {
  i=0
  while [ ! -s "$1" ]; do
    i=$((i + 1))
    [ $i -le 200 ] || fail "timed out waiting for $1"
    sleep 0.05
  done
}

case $CASE in
help)
  "$VGPU" --help > "$WORK/out" 2> "$WORK/err"; expect_status 0 $? "vgpu --help"
  expect_in "$WORK/out" "run " "vgpu --help lists run"
  expect_in "$WORK/out" "info " "vgpu --help lists info"
  "$VGPU" run --help > "$WORK/out" 2> "$WORK/err"; expect_status 0 $? "vgpu run --help"
  for option in --memory --compute --soft-compute --priority --devices --oversubscribe --ledger \
                --library --verbose "REMOVES every inherited limit variable"; do
    expect_in "$WORK/out" "$option" "vgpu run --help"
  done
  "$VGPU" help info > "$WORK/out" 2> "$WORK/err"; expect_status 0 $? "vgpu help info"
  expect_in "$WORK/out" "Usage: vgpu info" "vgpu help info"
  "$VGPU" --version > "$WORK/out"; expect_status 0 $? "vgpu --version"
  expect_in "$WORK/out" "vgpu " "vgpu --version"
  "$VGPU" frobnicate > "$WORK/out" 2> "$WORK/err"; expect_status 2 $? "unknown command"
  expect_in "$WORK/err" "frobnicate" "unknown command"
  ;;

bad_value)
  # Validation comes before looking for a driver: no driver needed, nothing may run.
  for args in "--memory 12x" "--memory 0" "--compute 0" "--compute 101" "--soft-compute 20" \
              "--priority -1" "--devices 0,0" "--memory 5=1GiB --devices 0,1"; do
    option=${args%% *}
    value=${args#* }; value=${value%% *}
    # shellcheck disable=SC2086
    LD_LIBRARY_PATH= "$VGPU" run --library "$DUMMY_LIB" $args -- sh -c "touch '$WORK/ran'" \
      > "$WORK/out" 2> "$WORK/err"
    expect_status 2 $? "vgpu run $args"
    expect_in "$WORK/err" "$option" "vgpu run $args names the option"
    [ "$option" = "--soft-compute" ] || [ "$option" = "--memory" -a "$value" = "5=1GiB" ] ||
      expect_in "$WORK/err" "\"$value\"" "vgpu run $args names the value"
    [ ! -e "$WORK/ran" ] || fail "vgpu run $args ran the command"
  done
  LD_LIBRARY_PATH= "$VGPU" run --library "$WORK/missing.so" -- true > "$WORK/out" 2> "$WORK/err"
  expect_status 2 $? "--library missing"
  expect_in "$WORK/err" "$WORK/missing.so" "--library missing names the path"
  ;;

ps)
  "$VGPU" ps --help > "$WORK/out" 2> "$WORK/err"; expect_status 0 $? "vgpu ps --help"
  for text in "--json" "/tmp/vgpu-<uid>/ledger" "\$XDG_RUNTIME_DIR/vgpu/run-*/ledger" "\$VGPU_LEDGER_DIRS" \
              "Exit status"; do
    expect_in "$WORK/out" "$text" "vgpu ps --help"
  done
  "$VGPU" --help > "$WORK/out" 2> "$WORK/err"
  expect_in "$WORK/out" "ps " "vgpu --help lists ps"
  # A file that is not a ledger is listed with its error, and the status says so.
  printf 'not a ledger' > "$WORK/bad"
  "$VGPU" ps "$WORK/bad" > "$WORK/out" 2> "$WORK/err"; expect_status 1 $? "vgpu ps on a bad file"
  expect_in "$WORK/out" "$WORK/bad" "bad ledger listed"
  expect_in "$WORK/out" "not a vgpu ledger (bad magic)" "bad ledger's error"
  mkdir "$WORK/empty"
  "$VGPU" ps --json "$WORK/empty" > "$WORK/out" 2> "$WORK/err"; expect_status 0 $? "vgpu ps on an empty directory"
  expect_in "$WORK/out" '{"ledgers": []}' "empty JSON"
  "$VGPU" ps --frobnicate > "$WORK/out" 2> "$WORK/err"; expect_status 2 $? "vgpu ps with a bad option"
  ;;

no_driver)
  if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' ||
     ! LD_LIBRARY_PATH= "$VGPU" info 2>/dev/null | grep -q "no NVIDIA driver found"; then
    echo "SKIP: this machine has a real libcuda.so.1"; exit 77
  fi
  LD_LIBRARY_PATH= "$VGPU" run --library "$DUMMY_LIB" --memory 1GiB -- sh -c "touch '$WORK/ran'" \
    > "$WORK/out" 2> "$WORK/err"
  expect_status 69 $? "vgpu run without a driver"
  expect_in "$WORK/err" "vgpu: no NVIDIA driver found (libcuda.so.1: " "no-driver message"
  expect_in "$WORK/err" "nothing to limit, not running sh" "no-driver message"
  [ ! -e "$WORK/ran" ] || fail "the command ran without a driver"
  LD_LIBRARY_PATH= "$VGPU" info > "$WORK/out" 2> "$WORK/err"
  expect_status 0 $? "vgpu info without a driver"
  expect_in "$WORK/out" "no NVIDIA driver found" "vgpu info without a driver"
  ;;

exit_status)
  need_driver
  vrun --memory 1GiB -- sh -c 'exit 7' > "$WORK/out" 2> "$WORK/err"
  expect_status 7 $? "vgpu run -- sh -c 'exit 7'"
  if [ -e "$DRIVER_DIR/libcuda.so.1" ] && grep -q vgpu_sim_marker "$DRIVER_DIR/libcuda.so.1"; then
    expect_in "$WORK/err" "SIMULATED driver" "simulated driver announced"
  fi
  vrun -- true > "$WORK/out" 2> "$WORK/err"
  expect_status 0 $? "vgpu run -- true"
  ;;

env)
  need_driver
  CUDA_MEM_LIMIT_0=5g WRAPPER_MAX_MEMORY=1 CUDA_DISABLE_CONTROL=true CUDA_DEVICE_SM_LIMIT_3=10 \
  LD_PRELOAD="/opt/other.so $DUMMY_LIB" \
    vrun --memory 1GiB,1=2GiB --compute 30 --soft-compute 50 --priority 0 --devices 1,0 \
         --oversubscribe -v -- env > "$WORK/out" 2> "$WORK/err"
  expect_status 0 $? "vgpu run -- env"
  for line in CUDA_DEVICE_MEMORY_LIMIT=1073741824 CUDA_DEVICE_MEMORY_LIMIT_1=2147483648 \
              CUDA_DEVICE_SM_LIMIT=30 CUDA_CORE_SOFT_LIMIT=50 CUDA_TASK_PRIORITY=0 \
              CUDA_OVERSUBSCRIBE=true CUDA_VISIBLE_DEVICES=1,0 LIBCUDA_LOG_LEVEL=4 \
              "LD_PRELOAD=$DUMMY_LIB:/opt/other.so" "CUDA_DEVICE_MEMORY_SHARED_CACHE=$WORK/xdg/vgpu/run-"; do
    expect_in "$WORK/out" "$line" "job environment"
  done
  for name in CUDA_MEM_LIMIT_0 WRAPPER_MAX_MEMORY CUDA_DISABLE_CONTROL CUDA_DEVICE_SM_LIMIT_3; do
    expect_not_in "$WORK/out" "$name=" "inherited limit variable removed"
  done
  [ "$(grep -c '^LD_PRELOAD=' "$WORK/out")" -eq 1 ] || fail "LD_PRELOAD appears more than once"
  # --verbose prints what it sets and removes.
  expect_in "$WORK/err" "vgpu: set   CUDA_DEVICE_SM_LIMIT=30" "verbose output"
  expect_in "$WORK/err" "vgpu: unset CUDA_MEM_LIMIT_0" "verbose output"
  # An inherited variable that libvgpu would reject stops the run before it starts.
  LIBCUDA_LOG_LEVEL=loud vrun -- sh -c "touch '$WORK/ran'" > "$WORK/out" 2> "$WORK/err"
  expect_status 2 $? "job with an invalid LIBCUDA_LOG_LEVEL"
  expect_in "$WORK/err" "LIBCUDA_LOG_LEVEL=\"loud\"" "rejected variable named"
  [ ! -e "$WORK/ran" ] || fail "the job ran with an environment libvgpu rejects"
  [ -z "$(ls -A "$WORK/xdg/vgpu")" ] || fail "run directory left behind after a rejected environment"
  # A library path that LD_PRELOAD cannot hold.
  mkdir "$WORK/a:b" && : > "$WORK/a:b/libvgpu.so"
  LD_LIBRARY_PATH=$DRIVER_DIR "$VGPU" run --library "$WORK/a:b/libvgpu.so" -- true > "$WORK/out" 2> "$WORK/err"
  expect_status 2 $? "library path with a colon"
  expect_in "$WORK/err" "cannot preload" "library path with a colon"
  ;;

signal_forward)
  need_driver
  # The job traps SIGTERM and exits 3: status 3 proves the signal reached the job and vgpu waited
  # (9: the job gave up waiting for it; 143: vgpu itself was killed).
  vrun_bg -- sh -c "trap 'echo got-term > \"$WORK/marker\"; exit 3' TERM; echo ready > '$WORK/ready';
                    i=0; while [ \$i -lt 200 ]; do sleep 0.05; i=\$((i + 1)); done; exit 9"
  wait_for "$WORK/ready"
  kill -TERM $VGPU_PID
  wait $VGPU_PID
  expect_status 3 $? "job that traps SIGTERM"
  expect_in "$WORK/marker" got-term "job saw SIGTERM"
  ;;

signal_exit)
  need_driver
  vrun_bg -- sh -c "echo \$\$ > '$WORK/pid'; exec sleep 10"
  wait_for "$WORK/pid"
  JOB_PID=$(cat "$WORK/pid")
  kill -TERM $VGPU_PID
  wait $VGPU_PID
  expect_status 143 $? "job killed by SIGTERM"
  if kill -0 "$JOB_PID" 2>/dev/null; then
    kill -KILL "$JOB_PID"
    fail "SIGTERM was not forwarded: the job (pid $JOB_PID) still runs"
  fi
  [ -z "$(ls -A "$WORK/xdg/vgpu")" ] || fail "run directory left behind: $(ls -A "$WORK/xdg/vgpu")"
  ;;

not_found)
  need_driver
  vrun -- "$WORK/no-such-command" > "$WORK/out" 2> "$WORK/err"
  expect_status 127 $? "missing command"
  expect_in "$WORK/err" "vgpu: cannot run $WORK/no-such-command: No such file or directory" "exec error"
  : > "$WORK/not-executable"; chmod 644 "$WORK/not-executable"
  vrun -- "$WORK/not-executable" > "$WORK/out" 2> "$WORK/err"
  expect_status 126 $? "non-executable command"
  expect_in "$WORK/err" "vgpu: cannot run $WORK/not-executable: Permission denied" "exec error"
  [ -z "$(ls -A "$WORK/xdg/vgpu")" ] || fail "run directory left behind after exec failure"
  ;;

run_dir)
  need_driver
  # During the job: the ledger's directory exists, is private (700) and belongs to this run.
  vrun --memory 1GiB -- sh -c 'd=$(dirname "$CUDA_DEVICE_MEMORY_SHARED_CACHE");
      echo "$d"; test -d "$d" && stat -c %a "$d"' > "$WORK/out" 2> "$WORK/err"
  expect_status 0 $? "job inspecting its run directory"
  RUN_DIR=$(sed -n 1p "$WORK/out")
  case $RUN_DIR in "$WORK/xdg/vgpu/run-"*) ;; *) fail "run directory $RUN_DIR not under XDG_RUNTIME_DIR" ;; esac
  [ "$(sed -n 2p "$WORK/out")" = 700 ] || fail "run directory mode $(sed -n 2p "$WORK/out"), expected 700"
  [ ! -e "$RUN_DIR" ] || fail "run directory $RUN_DIR left behind"
  [ "$(stat -c %a "$WORK/xdg/vgpu")" = 700 ] || fail "$WORK/xdg/vgpu is not private"
  # Without XDG_RUNTIME_DIR: /tmp/vgpu-<uid>.
  LD_LIBRARY_PATH=$DRIVER_DIR XDG_RUNTIME_DIR= "$VGPU" run --library "$DUMMY_LIB" -- \
    sh -c 'echo "$CUDA_DEVICE_MEMORY_SHARED_CACHE"' > "$WORK/out" 2> "$WORK/err"
  expect_status 0 $? "job without XDG_RUNTIME_DIR"
  expect_in "$WORK/out" "/tmp/vgpu-$(id -u)/run-" "fallback run root"
  [ ! -e "$(dirname "$(cat "$WORK/out")")" ] || fail "fallback run directory left behind"
  # --ledger: the given path, made absolute; no run directory.
  (cd "$WORK" && LD_LIBRARY_PATH=$DRIVER_DIR XDG_RUNTIME_DIR=$WORK/xdg "$VGPU" run \
     --library "$DUMMY_LIB" --ledger shared.ledger -- sh -c 'echo "$CUDA_DEVICE_MEMORY_SHARED_CACHE"') \
    > "$WORK/out" 2> "$WORK/err"
  expect_status 0 $? "job with --ledger"
  [ "$(cat "$WORK/out")" = "$WORK/shared.ledger" ] || fail "--ledger gave $(cat "$WORK/out")"
  [ -z "$(ls -A "$WORK/xdg/vgpu")" ] || fail "--ledger created a run directory"
  ;;

run_ledger)
  need_driver
  # vgpu run is the ledger's authority: the limits are in the file (0644) before the job starts.
  vrun --memory 1GiB,1=2GiB --compute 30 --priority 2 -- \
    sh -c '"$0" ps --json "$CUDA_DEVICE_MEMORY_SHARED_CACHE" && stat -c "mode %a" "$CUDA_DEVICE_MEMORY_SHARED_CACHE"' \
    "$VGPU" > "$WORK/out" 2> "$WORK/err"
  expect_status 0 $? "job reading its own ledger"
  for text in '"ok": true, "authority": "vgpu run", "task_priority": 2' '"default_memory_limit": 1073741824' \
              '"default_sm_limit": 30' '"ordinal": 1, "uuid": "", "memory_limit": 2147483648' "mode 644"; do
    expect_in "$WORK/out" "$text" "the job's ledger"
  done
  # Without arguments, vgpu ps finds the job's run directory under XDG_RUNTIME_DIR.
  vrun --memory 512MiB -- sh -c '"$0" ps' "$VGPU" > "$WORK/out" 2> "$WORK/err"
  expect_in "$WORK/out" "$WORK/xdg/vgpu/run-" "vgpu ps finds the job"
  expect_in "$WORK/out" "default per GPU: memory 512 MiB" "vgpu ps shows the job's limits"
  # --ledger: the given file gets the limits too, and stays after the job.
  vrun --memory 3GiB --ledger "$WORK/shared.ledger" -- true > "$WORK/out" 2> "$WORK/err"
  expect_status 0 $? "job with --ledger"
  "$VGPU" ps --json "$WORK/shared.ledger" > "$WORK/out" 2> "$WORK/err"
  expect_in "$WORK/out" '"default_memory_limit": 3221225472' "--ledger file holds the limits"
  # A --ledger path that is not a ledger is refused, untouched, and nothing runs.
  printf 'precious' > "$WORK/precious"
  vrun --memory 1GiB --ledger "$WORK/precious" -- sh -c "touch '$WORK/ran'" > "$WORK/out" 2> "$WORK/err"
  expect_status 1 $? "--ledger on a non-ledger file"
  expect_in "$WORK/err" "not a vgpu ledger" "--ledger refusal"
  [ "$(cat "$WORK/precious")" = precious ] || fail "--ledger overwrote a file that is not a ledger"
  [ ! -e "$WORK/ran" ] || fail "the job ran without its ledger"
  ;;

*)
  fail "unknown case"
  ;;
esac
echo "PASS ($CASE)"
