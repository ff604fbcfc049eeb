#!/usr/bin/env bash
# vgpu-node on a real GPU (one call, about two minutes): builds the library, the CLI, the daemon
# and the registration benchmark, starts vgpu-node on real NVML, and checks
#   1. a PyTorch job under libvgpu.so registers and /metrics shows its memory within 1 s of each
#      allocation and free (poller at 20 Hz, matched to the job's own timestamps);
#   2. a PyTorch process started WITHOUT the library in the same limited group is flagged
#      (metric + log line), and the registered job is not;
#   3. vgpu ps / vgpu top through the daemon; SIGTERM shutdown;
#   4. bench/registration (200-process bursts) on this machine.
# The limited group is a cgroup v2 child created for the check when the cgroup filesystem is
# writable (the shell moves itself into it; the jobs inherit it); otherwise the check's own
# cgroup is the group. results.md says which.
#
# Usage: OUT=<dir> tests/node/gpu/node_gpu_check.sh      (files for $OUT listed at the end)
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BUILD=${VGPU_GPU_BUILD:-$ROOT/build-gpu}
OUT=${OUT:-$BUILD/node-out}
HERE="$ROOT/tests/node/gpu"
W=$(mktemp -d /tmp/vgpu-node-gpu.XXXXXX)
mkdir -p "$OUT"
R="$OUT/results.md"
: >"$R"
note() { echo "$@" | tee -a "$R"; }
fail=0

note "## vgpu-node on a real GPU"
note ""
note "- machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1), $(nproc) CPUs, kernel $(uname -r)"
note "- python: $(python3 -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1)"
start=$(date +%s)
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVGPU_BUILD_TESTS=OFF -DVGPU_BUILD_EXAMPLES=OFF >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" --target vgpu_preload vgpu vgpu-node registration >>"$OUT/build.log" 2>&1 ||
  { note "build FAILED"; tail -30 "$OUT/build.log"; exit 1; }
note "- build: $(( $(date +%s) - start )) s (targets vgpu_preload vgpu vgpu-node registration)"

# --- the daemon (started in the original cgroup) -------------------------------------------------
STATE="$W/state"
mkdir -p "$STATE"
"$BUILD/vgpu-node" --state-dir="$STATE" --metrics-listen=127.0.0.1:0 --ready-file="$W/ready" \
  --scan-interval=250ms --bypass-grace=500ms --log-level=info 2>"$OUT/daemon.log" &
DAEMON=$!
for _ in $(seq 100); do grep -q metrics= "$W/ready" 2>/dev/null && break; sleep 0.1; done
ADDR=$(sed -n 's/^metrics=//p' "$W/ready")
[ -n "$ADDR" ] || { note "daemon did not start"; cat "$OUT/daemon.log"; exit 1; }
note "- daemon: $(grep -o 'nvml="[^"]*"' "$OUT/daemon.log" | head -1)"
python3 "$HERE/poller.py" "$ADDR" demo 0.05 "$W/stop" "$OUT/samples.txt" &
POLLER=$!

# --- the limited group ---------------------------------------------------------------------------
CG=/sys/fs/cgroup/vgpu-node-check
MOVED=0
if [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
  how="the check's own cgroup (not a cgroup v2 mount at /sys/fs/cgroup, so no child group was created)"
elif mkdir "$CG" 2>"$W/cg.err" && echo $$ >"$CG/cgroup.procs" 2>>"$W/cg.err"; then
  MOVED=1
  how="a cgroup v2 child created for the check ($CG); the check's shell moved itself into it, the jobs inherit it"
else
  how="the check's own cgroup (creating a child group failed: $(head -1 "$W/cg.err"))"
  rmdir "$CG" 2>/dev/null
fi
# The path the daemon uses (procfs.h, ContainerCgroupPath): the v1 memory controller's line when
# there are v1 hierarchies, else the unified one.
GROUP=$(python3 -c '
lines=[l.rstrip("\n").split(":",2) for l in open("/proc/self/cgroup") if l.count(":")>=2]
v1={c:p for i,cs,p in lines if cs for c in cs.split(",")}
print(next((v1[c] for c in ("memory","pids","cpu","cpuacct","name=systemd") if c in v1), next(iter(v1.values()), None)) if v1 else [p for i,cs,p in lines if i=="0" and not cs][0])')
note "- limited group: cgroup \`$GROUP\`: $how"
"$BUILD/vgpu-node" container add --state-dir="$STATE" --pod-uid demo --container torch --cgroup "$GROUP" --memory 8GiB >>"$OUT/daemon.log" 2>&1 ||
  { note "container add FAILED"; fail=1; }

# --- 1 + 2: the registered PyTorch job and the rogue, at the same time ----------------------------
LD_PRELOAD="$BUILD/libvgpu.so" VGPU_SOCKET="$STATE/vgpu.sock" VGPU_POD_UID=demo VGPU_CONTAINER_NAME=torch LIBCUDA_LOG_LEVEL=3 \
  python3 "$HERE/torch_job.py" "$W/events" >"$W/torch.out" 2>"$W/torch.err" &
TORCH=$!
python3 "$HERE/rogue.py" "$W/rogue.ready" 8 >"$W/rogue.out" 2>&1 &
ROGUE=$!
for _ in $(seq 300); do [ -s "$W/rogue.ready" ] && grep -q "^alloc 3221225472" "$W/events" 2>/dev/null && break; sleep 0.1; done
sleep 1.5
# --- 3: the CLI through the daemon, while both run -----------------------------------------------
{ echo '$ vgpu ps'; "$BUILD/vgpu" ps --socket "$STATE/vgpu.sock"; echo; echo '$ vgpu top --once'; "$BUILD/vgpu" top --once --socket "$STATE/vgpu.sock"; } >"$OUT/cli.txt" 2>&1
curl -s "http://$ADDR/metrics" >"$OUT/metrics.txt" 2>/dev/null || python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://$ADDR/metrics').read().decode())" >"$OUT/metrics.txt"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >"$W/smi.txt" 2>&1
wait $TORCH; torch_rc=$?
wait $ROGUE; rogue_rc=$?
touch "$W/stop"; wait $POLLER
note "- torch job (pid $TORCH) exit $torch_rc; registration: $(grep -o 'registered with vgpu-node[^;]*' "$W/torch.err" | head -1 | cut -c1-160)"
note "- rogue (pid $ROGUE, no LD_PRELOAD) exit $rogue_rc"
note "- nvidia-smi compute apps while both ran (pid, memory): $(tr '\n' ';' <"$W/smi.txt")"
note ""
note '```'
cp "$W/events" "$OUT/events.txt"
python3 "$HERE/analyze.py" "$W/events" "$OUT/samples.txt" "$W/rogue.ready" "$TORCH" | tee -a "$R"
[ "${PIPESTATUS[0]}" = 0 ] || fail=1
note '```'
if grep -q "not accounted by vgpu\" host_pid=$(cut -d' ' -f1 "$W/rogue.ready")" "$OUT/daemon.log"; then
  note "- daemon log line for the rogue: \`$(grep 'not accounted by vgpu' "$OUT/daemon.log" | head -1 | cut -c1-400)\`"
else
  note "- daemon log line for the rogue: MISSING"
  fail=1
fi

# --- SIGTERM ---------------------------------------------------------------------------------------
kill -TERM $DAEMON; wait $DAEMON; daemon_rc=$?
[ -e "$STATE/vgpu.sock" ] && sock="left behind" || sock="removed"
note "- daemon SIGTERM: exit $daemon_rc, socket $sock"
[ "$daemon_rc" = 0 ] || fail=1

# --- 4: registration latency on this machine -------------------------------------------------------
"$BUILD/bench/registration" --clients 200 --rounds 5 >"$OUT/bench.txt" 2>&1 || fail=1
note ""
cat "$OUT/bench.txt" >>"$R"
if [ "$MOVED" = 1 ]; then echo $$ >/sys/fs/cgroup/cgroup.procs 2>/dev/null; rmdir "$CG" 2>/dev/null; fi
note ""
note "overall: $([ $fail = 0 ] && echo PASS || echo FAIL); files: results.md daemon.log samples.txt events.txt metrics.txt cli.txt bench.txt build.log"
rm -rf "$W"
exit $fail
