#!/usr/bin/env python3
"""The compute limit's concurrency matrix on a real GPU: does "limit P" give P% of the throughput
a container achieves alone, whatever its concurrency (streams, host threads, processes, graphs)?

Usage: python3 bench/compute_matrix.py --library build-gpu/libvgpu.so --out DIR
                                        [--rows PATTERNS] [--targets 10,30,60,90] [--quick]
                                        [--groups 30+60,30+30+30] [--colocated ROWS]
                                        [--seconds S] [--warmup S] [--budget S] [--clock-spin] [--summary]
                                        [--dry-run]
                                        [--serving-args ARGS] [--serving-cpus auto|all|LIST]
       python3 bench/compute_matrix.py --from-json DIR/compute-matrix.json [DIR3/compute-matrix.json ...] --out DIR2

Rows (workloads; --rows takes ids or shell patterns such as '16x*,matmul*'):
  kernels of bench/compute/concurrency.cu (built here with nvcc; 1 block of 256 threads per SM
  unless wider; each a fixed amount of work lasting its time alone, or with --clock-spin a spin on
  clock64(); throughput in kernels/s): 1 stream of 5 µs, 50 µs, 2 ms kernels; 2 streams of
  500 µs; 4 of 200 µs; 8 of 1 ms; 16 of 50 µs; 16 of 5 ms; 8 of 1 ms kernels 2 blocks per SM wide;
  4 host threads each launching on its own stream (200 µs); a CUDA graph of 4 parallel branches of
  4 kernels (500 µs); 2 processes of one container x 2 streams (500 µs) and 4 processes x 1
  stream (50 µs), started together through a barrier, rate = the processes' sum; a server's
  steps on one stream (4 launches of 20 µs, every 8th 2 ms, each step synchronised and followed
  by 500 µs of host work), and of 8 launches of 50 µs synchronised with no host work.
  bench/compute/torch_workload.py: cuBLAS bf16 8192³ matmul on 1 stream, bf16 4096³ matmuls on 2
  streams, a PyTorch training step (4-layer transformer).
  bench/compute/jax_workload.py: a jitted JAX training step (an MLP of 4 bf16 layers of 4096²)
  when JAX is installed; skipped with a message otherwise.
  bench/serving/serve.py (LLM serving, tokens/s) when present; skipped with a message otherwise;
  its processes pinned to the CPUs of --serving-cpus (default: half of the CPUs, when there are
  at least 8), natively and limited alike.

Every row runs natively and under LD_PRELOAD=libvgpu.so with CUDA_DEVICE_SM_LIMIT=P for each
target (10, 30, 60, 90; --quick: 30, 60), each container with a fresh ledger
(CUDA_DEVICE_MEMORY_SHARED_CACHE; the processes of one container share it), in the order native
t1 t2 native t3 t4 native, so that each limited run lies between two native runs (its reference
is their mean). Throughput share = 100 x rate / native rate; PASS within +-3 points. A row busy
less than 97% natively (its natives' mean GPU-Util: a server waiting for its requests) is judged
against E = min(100, 100 x P / U), the part of its busy time the limit leaves, U the mean
GPU-Util of the same two native runs its reference rate comes from: such a row's native rate and
GPU-Util drift together from round to round while its busy time per unit of work does not, so
both must come from the same runs (a U from all the natives would turn the drift into an error
of E; co-located containers, judged against the median native rate, use the mean U). NVML
GPU-Util over the window (the driver's own samples, nvmlDeviceGetSamples, read by this
unpreloaded process; polled every 100 ms where they are missing) is the second opinion. A
power-capped row (natively, NVML's clock-event reasons show the power cap or a thermal slowdown
in at least half the samples; without them: the SM clock under a limit rises 3% above the native
one) may exceed P in throughput when limited alone (its clocks rise while it rests): it passes
when its GPU-Util is within +-3 of P x its native GPU-Util / 100.

Co-located (--groups, on the rows of --colocated): containers with separate ledgers started
together at the limits of a group (30+60, 30+30+30 by default; on 4x200us, steps-8x50us and
matmul); each container's share is its rate over its row's native rate (the median of the row's
native runs), judged +-3 with no exception. On a power-capped row a group whose limits leave part
of the GPU idle gets one more container of the same workload, a filler at the rest (30+60+10,
30+30+30+10), judged like the others: with the GPU idle 10% of the time its power manager raises
the clocks of all of them (on the H200 a matmul at 60 beside one at 30 did 64.1 of its native
throughput at 1564 MHz against 1433 natively), and the limit's definition (docs/compute.md) judges
a power-capped workload co-located beside neighbours that fill the GPU.

Time: the plan and its estimate are printed first; --budget S skips any row or group that would
end later than S seconds after the start (estimated from the start-up times seen so far), so that
the run fits a device call; skipped rows are listed and make the exit status 1. --rows, --targets,
--groups, --colocated, --seconds and --warmup narrow it down.

Output (--out, default $OUT): progress on stderr; compute-matrix.md (the table, also printed last
on stdout; for the rows judged "of E", their GPU-Util per unit of rate under each limit over the
natives' either side: above 1, a limit that holds the busy share leaves less than E of the
work), compute-matrix.json (plan, every run, the analysis; rewritten after every run, so a
killed benchmark leaves its runs), compute-matrix.tsv (verdict, check, detail per judged line, for
tests/gpu/run.sh), compute-matrix.png (the matrix as a grid, drawn from the JSON) and
compute-matrix.log (every command and its output). --from-json redraws all of them from a JSON
without a GPU, or from the JSONs of a matrix run in parts (their runs joined in the order given).
Exit status: 0 when every judged line passes, 1 when one fails, errs or was not run, 2 for
invalid options. Never changes clocks or GPU settings.
"""
import argparse
import collections
import datetime
import fnmatch
import importlib.util
import json
import os
import re
import shlex
import shutil
import statistics
import sys
import time

from compute_common import (ROOT, TOLERANCE, Launcher, UtilSampler, capped_of, check_window, clock_of, fmt,
                            git_describe, interleaved_targets, limited_runs_line, log, nvcc_build,
                            other_compute_variables, parse_period, summary_of, util_of)

CONCURRENCY_SRC = os.path.join(ROOT, "bench", "compute", "concurrency.cu")
TORCH_WORKER = os.path.join(ROOT, "bench", "compute", "torch_workload.py")
JAX_WORKER = os.path.join(ROOT, "bench", "compute", "jax_workload.py")
SERVE_SCRIPT = os.path.join(ROOT, "bench", "serving", "serve.py")
OUTPUT = "compute-matrix"

# kind: spin (concurrency.cu), torch (torch_workload.py), jax (jax_workload.py) or serving
# (serve.py); args: the workload's own arguments; procs: processes of one container; init_s:
# start-up estimate (spawn to the end of set-up, before the warm-up), seconds; windows: its window
# is this many times --seconds. 16x5ms and 16x50us get 2.5 (4 s): the limiter stretches their
# periods to 200 ms (16x5ms for its long concurrent launches; 16x50us because a launch waits
# behind another stream's batch in their shared hardware queue: the limiter's summary says period
# 200.0 ms), and where a window falls in its last period moves the share by up to share x (1 -
# share) x period / window: at 60, +-3.2 points in 1.6 s (16x50us read 55.9-60.4 at 60 in 1.6 s
# windows, 56.1-59.6 in 2 s), +-2.0 in 2.4 s (16x5ms read 56.6-60.4 at 60 in 2.4 s windows, about
# 1.3 points of which its runs' ends lose), +-1.2 in 4 s.
Row = collections.namedtuple("Row", "id label kind args procs unit init_s windows", defaults=(1,))
ROWS = [
    Row("1x5us", "1 stream, 5 µs kernels", "spin", "--streams 1 --kernel-us 5", 1, "kernels/s", 0.5),
    Row("1x50us", "1 stream, 50 µs kernels", "spin", "--streams 1 --kernel-us 50", 1, "kernels/s", 0.5),
    Row("1x2ms", "1 stream, 2 ms kernels", "spin", "--streams 1 --kernel-us 2000", 1, "kernels/s", 0.5),
    Row("2x500us", "2 streams, 500 µs kernels", "spin", "--streams 2 --kernel-us 500", 1, "kernels/s", 0.5),
    Row("4x200us", "4 streams, 200 µs kernels", "spin", "--streams 4 --kernel-us 200", 1, "kernels/s", 0.5),
    Row("8x1ms", "8 streams, 1 ms kernels", "spin", "--streams 8 --kernel-us 1000", 1, "kernels/s", 0.5),
    Row("16x50us", "16 streams, 50 µs kernels", "spin", "--streams 16 --kernel-us 50", 1, "kernels/s", 0.5, 2.5),
    Row("16x5ms", "16 streams, 5 ms kernels", "spin", "--streams 16 --kernel-us 5000", 1, "kernels/s", 0.5, 2.5),
    Row("8x1ms-wide2", "8 streams, 1 ms kernels, 2 blocks/SM", "spin",
        "--streams 8 --kernel-us 1000 --blocks-per-sm 2", 1, "kernels/s", 0.5),
    Row("4threads-4x200us", "4 host threads × 1 stream, 200 µs kernels", "spin",
        "--streams 4 --threads 4 --kernel-us 200", 1, "kernels/s", 0.5),
    Row("graph-4x4x500us", "CUDA graph, 4 branches × 4 kernels of 500 µs", "spin",
        "--graph-branches 4 --graph-depth 4 --kernel-us 500", 1, "kernels/s", 0.5),
    Row("2procs-2x500us", "2 processes × 2 streams, 500 µs kernels", "spin",
        "--streams 2 --kernel-us 500", 2, "kernels/s", 0.5),
    Row("4procs-1x50us", "4 processes × 1 stream, 50 µs kernels", "spin",
        "--streams 1 --kernel-us 50", 4, "kernels/s", 0.5),
    # a server's steps: the shape whose expensive launches a uniform stream's cap once hid
    # (docs/compute.md, "Uniform streams"); ~2/3 busy natively
    Row("steps-20us-2ms", "server steps: 4 launches of 20 µs, every 8th 2 ms, synchronised, 500 µs host", "spin",
        "--kernel-us 20 --steps 4 --expensive-every 8 --expensive-us 2000 --host-us 500", 1, "kernels/s", 0.5),
    # a GPU-bound program that synchronises every 8 launches (a step's end, a copy to the host):
    # co-located, a neighbour once took the turn at every synchronisation inside a run and the
    # containers alternated, each hand-over leaving the GPU idle (simulated 3 x 30: 26.6 each;
    # ControllerOptions::run_hold_ns)
    Row("steps-8x50us", "server steps: 8 launches of 50 µs, synchronised, no host work", "spin",
        "--kernel-us 50 --steps 8", 1, "kernels/s", 0.5),
    # a small model's decode step captured as a graph, replayed onto the idle stream at every step
    # (bracketed by a begin and a mark): the graph's submission gap after the begin is a larger
    # part of its span than of serve.py's (docs/compute.md, the serving row)
    Row("steps-graph-8x20us", "server steps: a graph of 8 kernels of 20 µs, replayed and synchronised", "spin",
        "--kernel-us 20 --steps 1 --graph-branches 1 --graph-depth 8", 1, "kernels/s", 0.5),
    Row("matmul", "cuBLAS bf16 8192³ matmul, 1 stream", "torch", "matmul", 1, "matmuls/s", 5.0),
    Row("matmul-2streams", "cuBLAS bf16 4096³ matmuls, 2 streams", "torch", "matmul --size 4096 --streams 2", 1,
        "matmuls/s", 5.0),
    Row("train", "PyTorch training step (4-layer transformer)", "torch", "train", 1, "steps/s", 7.0),
    # not in the matrix; on the H200 (2026-11-27, a scratch run) 34 / 67-70 / 97-98 of
    # native at 30 / 60 / 90, like the power-capped cuBLAS rows; start-up (import, compile) ~9 s
    Row("jax-train", "JAX jitted training step (MLP, 4 bf16 layers of 4096²)", "jax", "train", 1, "steps/s",
        9.0),
    # start-up 6.5-7.8 s on the H200 machine (2026-11-26): model, profiling pass, CUDA graphs
    Row("serving", "LLM serving (bench/serving/serve.py)", "serving", "", 1, "tokens/s", 10.0),
]
ROW = {r.id: r for r in ROWS}
DEFAULT_COLOCATED = "4x200us,steps-8x50us,matmul"
DEFAULT_GROUPS = "30+60,30+30+30"
# bench/serving's GPU-bound model with requests of fixed lengths (256 prompt, 128 output tokens,
# as vLLM's benchmarks draw random prompts of one length), so that the GPU, not the engine's host
# time, sets most of its rate and every limit binds; its window of its own, as a server needs
# longer than a spin loop to settle. With lengths drawn from ranges (serve.py's default) the
# engine's host time dominates (~35% busy natively on an H200) and its native tokens/s drifted with
# the host by ±8.9-36% between the natives of one matrix: verdicts that said nothing. With fixed
# lengths, 32 clients (serve.py's default) ran 86-96% busy natively, 64 clients 84-90 (more
# requests prefilled one by one); both lie near DEMAND_UTIL (H200, 2026-11-27, docs/compute.md).
# A server's demand-limited shape is the steps row's, judged "of E".
DEFAULT_SERVING_ARGS = ("--warmup 2 --seconds 12 --layers 16 --d-model 4096 --heads 32 "
                        "--min-prompt 256 --max-prompt 256 --min-output 128 --max-output 128")
# A row busy less than this (native GPU-Util, %) is limited by its own demand, not the GPU: a
# limit takes the part of its busy time above the limit (expected_share). Rows that fill the GPU
# read 99-100 (the driver's samples); the serving row's natives run 86-96% busy, and it got its E
# on both sides of the 90 this line was until 2026-11-27, where one verdict was against the limit
# itself: 65.6 at 60 with natives 90.0% busy (E 66.6) and 94.7 at 90 with natives 94.7% busy (E
# 95.1; H200, docs/benchmarks.md).
DEMAND_UTIL = 97.0
REPEAT = "measured again in"  # --from-json: a row or group a later part measured again
BUILD_S = 20.0     # nvcc of concurrency.cu, estimated
SPAWN_S = 0.3      # process exit and spawn around the run, estimated
BARRIER_S = 0.5    # a group's start: the last member ready + the 0.3 s start delay
MIN_CAPPED = 0.5   # native samples with power / thermal clock-event reasons: from here on "power-capped"
CLOCK_RISE = 1.03  # without reasons: power-capped when a limited run's SM clock is 3% above native


def jax_installed():
    """Whether this interpreter can import JAX (the jax row's worker runs on it)."""
    return importlib.util.find_spec("jax") is not None


def label_of(row_id, labels=None):
    return (labels or {}).get(row_id) or (ROW[row_id].label if row_id in ROW else row_id)


def group_name(targets, filler=None):
    return "co-located " + " + ".join(str(t) for t in targets) + (f" + {filler} (filler)" if filler else "")


def filler_limit(targets, native):
    """The limit of the filler a group gets on a power-capped row (see the module's docstring): the
    part of the GPU its limits leave, or None (not power-capped, or nothing left)."""
    rest = 100 - sum(targets)
    return rest if native and native.get("power_capped") and rest > 0 else None


# --- settings and plan ---------------------------------------------------------------------------

class Settings:
    """The options, validated; `error` is argparse's (exit status 2, message naming the input)."""

    def __init__(self, args, error):
        self.targets = parse_limits(args.targets, "--targets", error) if args.targets else (
            [30, 60] if args.quick else [10, 30, 60, 90])
        self.warmup = args.warmup
        self.measure = args.seconds
        if not self.measure > 0 or self.warmup < 0:
            error(f"--seconds {self.measure:g} / --warmup {self.warmup:g}: the window must be > 0 s, the warm-up >= 0 s")
        self.rows = select_rows(args.rows, error)
        self.groups = []
        for text in (args.groups.split(",") if args.groups else []):
            members = parse_limits(text.replace("+", ","), f"--groups member {text!r}", error)
            if len(members) < 2:
                error(f"--groups {text!r}: a group has at least two containers (30+60)")
            self.groups.append(members)
        self.colocated, self.notes = [], []
        for rid in [x for x in (args.colocated or "").split(",") if x]:
            if rid not in ROW:
                error(f"--colocated {rid!r}: unknown row; rows: {', '.join(ROW)}")
            if ROW[rid].kind == "serving":
                error("--colocated serving: serve.py has a barrier format of its own; run "
                      "bench/serving/run.py for co-located serving instances")
            if rid in self.rows:
                self.colocated.append(rid)
            elif self.groups:
                self.notes.append(f"co-located groups on {rid}: not run, the row is not selected (--rows)")
        self.period = args.period
        if args.period:
            try:
                parse_period(args.period)
            except SystemExit as e:
                error(str(e.code))
        self.budget = args.budget
        if self.budget is not None and self.budget <= 0:
            error(f"--budget {self.budget:g}: expected seconds > 0")
        self.serve_script = os.path.abspath(args.serve_script)
        self.serving_args = args.serving_args
        try:  # the serving row's own window: its --warmup / --seconds, the last given winning
            known = argparse.ArgumentParser(add_help=False)
            known.add_argument("--warmup", type=float)
            known.add_argument("--seconds", type=float)
            given = known.parse_known_args(shlex.split(args.serving_args))[0]
        except (ValueError, SystemExit):
            error(f"--serving-args {args.serving_args!r}: cannot be split into options")
        self.serving_window = (self.warmup if given.warmup is None else given.warmup,
                               self.measure if given.seconds is None else given.seconds)
        self.serving_cpus = serving_cpus(args.serving_cpus, error)
        self.summary = args.summary
        self.workload_cmd = shlex.split(args.workload_cmd) if args.workload_cmd else None
        self.clock_spin = args.clock_spin
        self.skipped = []  # (row or group, reason): decided before running
        if "serving" in self.rows and not os.path.isfile(self.serve_script):
            self.rows.remove("serving")
            shown = os.path.relpath(self.serve_script, ROOT) if args.serve_script == SERVE_SCRIPT else self.serve_script
            self.skipped.append(("serving", f"{shown} not found: the serving row is skipped"))
        for rid in [r for r in self.rows if ROW[r].kind == "jax"]:
            if not self.workload_cmd and not jax_installed():
                self.rows.remove(rid)
                self.skipped.append((rid, f"JAX is not installed for {sys.executable}: the {rid} row is skipped"))


def serving_cpus(text, error, allowed=None, have_taskset=None):
    """The CPU list the serving row's processes are pinned to (taskset -c), or None. A server's
    engine thread is host-bound (it synchronises after every step): left to the scheduler, its
    native tokens/s spread ±8% between 12 s runs on the H200's 16-CPU host, pinned to 8 CPUs
    ±1.3% in two calls (2026-11-26), though ±8.9-26.5% in later matrix runs: pinning narrows the
    spread, it does not make the row's reference steady. 'auto': the first half of the CPUs this
    process may use, when there are at least 8 and taskset exists; 'all': not pinned; else a list
    such as 0-7 or 0,2,4-6."""
    if text == "all":
        return None
    if text == "auto":
        allowed = sorted(os.sched_getaffinity(0)) if allowed is None else allowed
        have_taskset = shutil.which("taskset") is not None if have_taskset is None else have_taskset
        if len(allowed) < 8 or not have_taskset:
            return None
        return ",".join(str(c) for c in allowed[:len(allowed) // 2])
    if not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", text or ""):
        error(f"--serving-cpus {text!r}: expected auto, all or a CPU list such as 0-7 or 0,2,4-6")
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if hi and int(hi) < int(lo):
            error(f"--serving-cpus {text!r}: the range {part} runs backwards")
    return text


def parse_limits(text, what, error):
    out = []
    for part in text.split(","):
        try:
            value = int(part.strip())
        except ValueError:
            error(f"{what}: {part.strip()!r} is not a whole number of percent")
        if not 1 <= value <= 100:
            error(f"{what}: {value} is outside 1..100")
        out.append(value)
    return out


def select_rows(patterns, error, ids=None):
    """The row ids (of ROWS, or of `ids`) that comma-separated ids or shell patterns name, in order."""
    ids = [r.id for r in ROWS] if ids is None else ids
    if not patterns:
        return list(ids)
    chosen = set()
    for pat in [p.strip() for p in patterns.split(",") if p.strip()]:
        hits = [i for i in ids if fnmatch.fnmatchcase(i, pat)]
        if not hits:
            error(f"--rows {pat!r} matches no row; rows: {', '.join(ids)}")
        chosen.update(hits)
    return [i for i in ids if i in chosen]  # in table order


def build_plan(s):
    """Blocks, each run whole or skipped whole: a row's native and limited runs in the order
    native t1 t2 native t3 t4 native (targets reversed on every other row, so that no target
    always follows a native run; the serving row native t1 native t2 native ..., as its native
    rate drifts over minutes), the co-located groups, and the serving row last (the longest, the
    first to go when the budget runs short). A step is ["run", row, target or None] or
    ["group", row, [targets]]."""
    blocks = []
    serving = []
    for i, rid in enumerate(s.rows):
        is_serving = ROW[rid].kind == "serving"
        order = interleaved_targets(s.targets, reverse=i % 2 == 1, per_native=1 if is_serving else 2)
        (serving if is_serving else blocks).append([["run", rid, t] for t in order])
    for rid in s.colocated:
        for members in s.groups:
            blocks.append([["group", rid, list(members)]])
    return blocks + serving


def step_seconds(step, s, seen=None):
    """Estimated wall time of a step. `seen` (MatrixRunner.init_seen) holds start-up times seen so
    far: by row id, and by kind the largest excess over a row's estimate, which applies to the
    rows of that kind not run yet."""
    row = ROW[step[1]]
    seen = seen or {}
    start = seen[row.id] if row.id in seen else row.init_s + seen.get(row.kind, 0.0)
    many = step[0] == "group" or row.procs > 1
    window = sum(s.serving_window) if row.kind == "serving" else s.warmup + measure_of(row, s)
    return start + window + SPAWN_S + (BARRIER_S if many else 0.0)


def measure_of(row, s):
    """A row's window, seconds."""
    return s.measure * row.windows


def estimate_seconds(blocks, s, init=None):
    spin = any(ROW[b[0][1]].kind == "spin" for b in blocks) and not s.workload_cmd
    return 1.0 + (BUILD_S if spin else 0.0) + sum(step_seconds(st, s, init) for b in blocks for st in b)


def describe_step(step):
    row = ROW[step[1]]
    if step[0] == "group":
        return (f"{group_name(step[2])} [{row.label}]: {len(step[2])} containers, separate ledgers, started together"
                + (" (and a filler if the row is power-capped)" if sum(step[2]) < 100 else ""))
    what = "native" if step[2] is None else f"limit {step[2]}"
    return f"{row.label}: {what}" + (f" ({row.procs} processes of one container, started together)"
                                     if row.procs > 1 else "")


# --- running -------------------------------------------------------------------------------------

class MatrixRunner:
    """Runs the steps: builds the commands, starts the containers, combines their processes."""

    def __init__(self, s, launcher, sampler, spin_bin):
        self.s = s
        self.launcher = launcher
        self.sampler = sampler
        self.spin_bin = spin_bin
        self.init_seen = {}  # row id / kind -> start-up seen: see step_seconds

    def command(self, rid):
        row = ROW[rid]
        w, d = f"{self.s.warmup:g}", f"{measure_of(row, self.s):g}"
        if row.kind == "spin":
            program, tail = [self.spin_bin or "concurrency"], ["run"] + row.args.split() + ["--warmup", w, "--seconds", d]
            if self.s.clock_spin:
                tail.append("--clock-spin")
        elif row.kind in ("torch", "jax"):
            name, *extra = row.args.split()
            worker = TORCH_WORKER if row.kind == "torch" else JAX_WORKER
            program, tail = [sys.executable, worker], [name, w, d] + extra
        else:
            program, tail = [sys.executable, self.s.serve_script], ["--warmup", w, "--seconds", d] + shlex.split(
                self.s.serving_args)
        if self.s.workload_cmd:
            program = self.s.workload_cmd + [row.kind]
        if row.kind == "serving" and self.s.serving_cpus:
            program = ["taskset", "-c", self.s.serving_cpus] + program
        return program + tail

    def timeout(self, rid):
        """A hung run must not eat a device call: 60 s + 3 x its estimate (start-up under a limit of
        10 may take longer than natively); a server's set-up (graph capture) 300 s."""
        if ROW[rid].kind == "serving":
            return 300 + sum(self.s.serving_window)
        return 60 + 3 * (ROW[rid].init_s + self.s.warmup + measure_of(ROW[rid], self.s))

    def _container(self, rid, finished):
        """Combines one container's processes: rate = their sum, window = the intersection."""
        row = ROW[rid]
        rate_key = "tokens_per_s" if row.kind == "serving" else "rate"
        warmup = self.s.serving_window[0] if row.kind == "serving" else self.s.warmup
        procs = []
        for out, err, rc, spawn in finished:
            res = self.launcher.result_of(out, err, rc)
            summary = summary_of(err) if self.s.summary and "error" not in res else {}
            if summary:
                res["limiter"] = summary
            if "error" not in res:
                if not isinstance(res.get(rate_key), (int, float)) or not all(
                        isinstance(res.get(k), (int, float)) for k in ("t_start", "t_end")):
                    res = {"error": f"result without {rate_key}, t_start and t_end"}
                else:  # a group's barrier wait counts as start-up: the estimate stays on the safe side
                    started = res["t_start"] - spawn - warmup
                    self.init_seen[rid] = max(self.init_seen.get(rid, started), started)
                    excess = self.init_seen[rid] - row.init_s
                    self.init_seen[row.kind] = max(self.init_seen.get(row.kind, excess), excess)
            procs.append(res)
        errors = [p["error"] for p in procs if "error" in p]
        if errors:
            return {"error": errors[0] + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""),
                    "procs": procs}
        res = {"rate": sum(p[rate_key] for p in procs), "t_start": max(p["t_start"] for p in procs),
               "t_end": min(p["t_end"] for p in procs), "procs": procs}
        if res["t_end"] <= res["t_start"]:
            res["t_end"] = max(p["t_end"] for p in procs)  # windows that did not overlap: still show one
        if self.sampler:  # redone once every sample is in (refresh_samples); a group's filler needs them now
            res.update(util=util_of(self.sampler, res, wait=False), clock=clock_of(self.sampler, res),
                       capped=capped_of(self.sampler, res))
        else:
            res["util"] = None
        return res

    def run(self, rid, target):
        row = ROW[rid]
        env = self.launcher.env_for(target, summary=self.s.summary)  # the container's processes share its ledger
        if row.procs == 1:
            return self._container(rid, [self.launcher.run(self.command(rid), env, self.timeout(rid))])
        started = self.launcher.group([(f"p{k + 1}", self.command(rid), env) for k in range(row.procs)],
                                      self.timeout(rid))
        return self._container(rid, list(started.values()))

    def group(self, rid, targets, filler=None):
        """The containers of a group, started together; `filler`: the limit of one more container
        (filler_limit). Returns {"containers": [...], "filler": filler}."""
        limits = list(targets) + ([filler] if filler else [])
        members, names = [], []
        for j, target in enumerate(limits):
            env = self.launcher.env_for(target, summary=self.s.summary)
            name = f"c{j + 1}-{target}"
            names.append(name)
            members += [(f"{name}-p{k + 1}", self.command(rid), env) for k in range(ROW[rid].procs)]
        started = self.launcher.group(members, self.timeout(rid))
        containers = []
        for name, target in zip(names, limits):
            mine = [v for k, v in started.items() if k.startswith(name + "-p")]
            containers.append(dict(self._container(rid, mine), name=name, target=target))
        return {"containers": containers, "filler": filler}


def refresh_samples(records, sampler):
    """GPU-Util, SM clock and capped fraction of every window, once every sample is in."""
    for step, res in records:
        for r in (res.get("containers", []) if step[0] == "group" else [res]):
            if "t_start" in r and "error" not in r:
                r["util"] = util_of(sampler, r)
                r["clock"] = clock_of(sampler, r)
                r["capped"] = capped_of(sampler, r)


# --- analysis ------------------------------------------------------------------------------------

def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def native_summaries(records):
    """Per row: median native rate, spread, mean GPU-Util / SM clock / capped fraction, and
    whether it is power-capped (see the module's docstring)."""
    natives, limited_clocks = collections.defaultdict(list), collections.defaultdict(list)
    for i, (step, res) in enumerate(records):
        if step[0] != "run" or "error" in res or res.get("rate") is None:
            continue
        if step[2] is None:
            natives[step[1]].append((i, res))
        elif res.get("clock") is not None:
            limited_clocks[step[1]].append(res["clock"])
    summary = {}
    for rid, lst in natives.items():
        rates = [r["rate"] for _, r in lst]
        capped = _mean([r.get("capped") for _, r in lst])
        clock = _mean([r.get("clock") for _, r in lst])
        if capped is not None:
            power, basis = capped >= MIN_CAPPED, "clock-event reasons"
        elif clock and limited_clocks[rid]:
            power, basis = max(limited_clocks[rid]) >= CLOCK_RISE * clock, "SM clock"
        else:
            power, basis = False, None
        summary[rid] = {"rate": statistics.median(rates), "runs": len(rates),
                        "spread": 100.0 * (max(rates) / min(rates) - 1.0) if len(rates) > 1 and min(rates) > 0 else 0.0,
                        "util": _mean([r.get("util") for _, r in lst]), "clock": clock, "capped": capped,
                        "power_capped": power, "power_basis": basis}
    return natives, summary


def expected_share(target, native, reference_util=None):
    """The throughput share a limit of `target` should leave: the target itself, or, for a workload
    that keeps the GPU busy less than DEMAND_UTIL % of the time alone (the mean over its natives: a
    server waiting for its requests), the part of its native busy time the limit leaves:
    min(100, 100 x target / util), with util the GPU-Util of the native runs the share is taken
    against (reference_util) where known, else the mean over all of them."""
    util = native.get("util") if native else None
    if util is None or util >= DEMAND_UTIL or util <= 0:
        return float(target)
    if reference_util is not None and reference_util > 0:
        util = reference_util
    return min(100.0, 100.0 * target / util)


def judge(line, native, alone):
    """Adds share, expected, util_target, pass and basis to a line {target, rate, reference, util,
    error, reference_util (optional)}. Within +-3 of the expected share passes; alone, a
    power-capped row above it passes when its GPU-Util is within +-3 of the target scaled by its
    native GPU-Util."""
    target = line["target"]
    line["expected"] = expected = expected_share(target, native, line.get("reference_util"))
    ref = line.get("reference")
    line["share"] = 100.0 * line["rate"] / ref if line.get("rate") is not None and ref else None
    line["util_target"] = target * native["util"] / 100.0 if native and native.get("util") is not None else None
    line["pass"], line["basis"] = False, "throughput"
    if line.get("error"):
        return line
    if line["share"] is None:
        line["error"] = "no native reference"
        return line
    if abs(line["share"] - expected) <= TOLERANCE:
        line["pass"] = True
    elif (alone and native and native["power_capped"] and line["share"] > expected + TOLERANCE
          and line.get("util") is not None and line["util_target"] is not None
          and abs(line["util"] - line["util_target"]) <= TOLERANCE):
        line["pass"], line["basis"] = True, "GPU-Util (power-capped)"
    return line


def busy_per_work(res, natives):
    """GPU-Util per unit of rate under the limit over that of the natives (the mean of theirs), or
    None: above 1, each unit of work cost more busy time than natively, so a limit that holds the
    busy share leaves less than E of the work."""
    def cost(r):
        return r["util"] / r["rate"] if r.get("util") and r.get("rate") else None
    mine, theirs = cost(res), _mean([cost(r) for r in natives])
    return mine / theirs if mine is not None and theirs else None


def analyse(records):
    """records: [(step, result)] in run order. Returns (judged lines, native summaries)."""
    natives, summary = native_summaries(records)
    lines = []
    for i, (step, res) in enumerate(records):
        if step[0] == "run" and step[2] is not None:
            rid, target = step[1], step[2]
            around = [r for j, r in natives.get(rid, []) if j < i][-1:] + [r for j, r in natives.get(rid, []) if j > i][:1]
            line = {"scenario": "alone", "row": rid, "target": target, "container": None,
                    "rate": res.get("rate"), "util": res.get("util"), "clock": res.get("clock"),
                    "error": res.get("error"), "reference": _mean([r["rate"] for r in around]),
                    "reference_util": _mean([r.get("util") for r in around]),
                    "busy_per_work": busy_per_work(res, around)}
            lines.append(judge(line, summary.get(rid), alone=True))
        elif step[0] == "group":
            rid, targets = step[1], step[2]
            containers = res.get("containers") or [{"name": f"c{j + 1}-{t}", "target": t, "error": res.get("error")
                                                    or "no result"} for j, t in enumerate(targets)]
            for c in containers:
                line = {"scenario": group_name(targets, res.get("filler")), "row": rid, "target": c["target"],
                        "container": c["name"],
                        "rate": c.get("rate"), "util": c.get("util"), "clock": c.get("clock"),
                        "error": c.get("error"),
                        "reference": summary[rid]["rate"] if rid in summary else None}
                lines.append(judge(line, summary.get(rid), alone=False))
    return lines, summary


# --- report --------------------------------------------------------------------------------------

def _verdict(line):
    if line.get("error"):
        return f"FAIL ({line['error']})"
    return ("PASS†" if line["basis"] != "throughput" else "PASS") if line["pass"] else "FAIL"


def _skip_word(why):
    return "left out" if why.startswith(REPEAT) else "not run"


def _rate(v):
    return "–" if v is None else (f"{v:,.0f}" if v >= 1000 else f"{v:.1f}")


def markdown(lines, summary, skipped, header, labels=None):
    out = [header, ""]
    alone = [l for l in lines if l["scenario"] == "alone"]
    targets = sorted({l["target"] for l in alone})
    out.append("Throughput share = 100 × rate under the limit ÷ native rate (the native runs either side), "
               f"PASS within ±{TOLERANCE:g} points; in brackets NVML GPU-Util during the run (the second "
               "opinion). † power-capped row judged by GPU-Util: its throughput share exceeds the target "
               f"(its clocks rise while it rests) and its GPU-Util is within ±{TOLERANCE:g} of the target "
               "× its native GPU-Util ÷ 100. A row busy less than "
               f"{DEMAND_UTIL:g}% of the time natively (by GPU-Util) is judged against \"of E\": the part of "
               "its native busy time the limit leaves, E = min(100, 100 × limit ÷ the GPU-Util of the "
               "same native runs either side).")
    out.append("")
    out.append("| workload | native: rate (GPU-Util, SM MHz, spread of runs) | "
               + " | ".join(f"limit {t}" for t in targets) + " |")
    out.append("|---|---|" + "---|" * len(targets))
    for rid in dict.fromkeys(l["row"] for l in alone):
        n = summary.get(rid)
        unit = ROW[rid].unit if rid in ROW else "/s"
        native = "– (no native run)" if not n else (
            f"{_rate(n['rate'])} {unit} ({fmt(n['util'], 0)}, {fmt(n['clock'], 0)} MHz, ±{n['spread']:.1f}%)"
            + (" ⚠ power-capped" if n["power_capped"] else ""))
        cells = []
        for t in targets:
            line = next((l for l in alone if l["row"] == rid and l["target"] == t), None)
            of = "" if line is None or line["expected"] == t else f" of {fmt(line['expected'])}"
            cells.append("" if line is None else f"**{fmt(line['share'])}**{of} ({fmt(line['util'], 0)}) {_verdict(line)}")
        out.append(f"| {label_of(rid, labels)} | {native} | " + " | ".join(cells) + " |")
    demand = [l for l in alone if l["expected"] != l["target"] and l.get("busy_per_work") is not None]
    if demand:
        out.append("")
        out.append("Rows judged \"of E\": GPU-Util per unit of rate under the limit ÷ the natives' either side "
                   "(above 1: each unit of work cost more busy time than natively): "
                   + "; ".join(f"{label_of(rid, labels)} ("
                               + ", ".join(f"at {l['target']} {l['busy_per_work']:.3f}"
                                           for l in sorted(demand, key=lambda l: l["target"]) if l["row"] == rid) + ")"
                               for rid in dict.fromkeys(l["row"] for l in demand)) + ".")
    scen = [l for l in lines if l["scenario"] != "alone"]
    if scen:
        out.append("")
        out.append("Co-located: containers with separate ledgers started together; share = rate ÷ the row's "
                   "native rate (median of its native runs); GPU-Util is the whole GPU's.")
        out.append("")
        out.append("| scenario | workload | container (limit) | expected | share | GPU-Util (whole GPU) | result |")
        out.append("|---|---|---|---|---|---|---|")
        for l in scen:
            out.append(f"| {l['scenario']} | {label_of(l['row'], labels)} | {l['container']} ({l['target']}) | "
                       f"{l['expected']:.3g} ± {TOLERANCE:g} | {fmt(l['share'])} | {fmt(l['util'], 0)} | {_verdict(l)} |")
    out.append("")
    capped = sum(1 for l in lines if l["pass"] and l["basis"] != "throughput")
    out.append(f"{sum(1 for l in lines if l['pass'])} of {len(lines)} PASS (±{TOLERANCE:g} points)"
               + (f"; {capped} of them power-capped, judged by GPU-Util (†)" if capped else ""))
    for what, why in skipped:
        out.append(f"- {_skip_word(why)}: {what}: {why}")
    return "\n".join(out) + "\n"


def tsv(lines, skipped, labels=None):
    """verdict, check, detail per judged line (tests/gpu/run.sh's rows); budget skips FAIL."""
    out = []
    for l in lines:
        where = "" if l["scenario"] == "alone" else f"{l['scenario']} {l['container']} "
        detail = l["error"] or (f"share {l['share']:.1f}"
                                + (f" of {l['expected']:.1f}" if l["expected"] != l["target"] else "")
                                + f" (util {fmt(l['util'], 0)}"
                                + (f", judged by GPU-Util {fmt(l['util'], 0)} vs {fmt(l['util_target'])}"
                                   if l["basis"] != "throughput" else "") + ")")
        out.append(f"{'PASS' if l['pass'] else 'FAIL'}\tmatrix {where}{label_of(l['row'], labels)} limit {l['target']}"
                   f"\t{detail}")
    for what, why in skipped:
        out.append(f"{'FAIL' if why.startswith('budget') else 'INFO'}\tmatrix {what}\t{_skip_word(why)}: {why}")
    return "\n".join(out) + ("\n" if out else "")


def plot(lines, summary, path, title, labels=None):
    """The matrix as a grid: a row per workload (then per co-located scenario), a column per limit;
    a cell shows the throughput share (GPU-Util below), green within ±3, blue when passed on GPU-Util
    (power-capped), red otherwise."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    targets = sorted({l["target"] for l in lines})
    keys = list(dict.fromkeys((l["scenario"], l["row"]) for l in lines))
    colour = {"pass": "#cde8c9", "util": "#cfe0f3", "fail": "#f3c5c0"}
    fig_h = 1.3 + 0.42 * len(keys)
    fig, ax = plt.subplots(figsize=(11, fig_h))
    for y, (scenario, rid) in enumerate(keys):
        for x, t in enumerate(targets):
            mine = [l for l in lines if l["scenario"] == scenario and l["row"] == rid and l["target"] == t]
            if not mine:
                continue
            worst = "fail" if any(not l["pass"] for l in mine) else (
                "util" if any(l["basis"] != "throughput" for l in mine) else "pass")
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=colour[worst], edgecolor="white", lw=2))
            # "of E" once when the containers of a cell share it (3 x 30 of a row below the GPU)
            expected = {l["expected"] for l in mine}
            once = len(mine) > 1 and len(expected) == 1
            shares = " / ".join("err" if l.get("error") else fmt(l["share"])
                                + (f" of {fmt(l['expected'])}" if l["expected"] != l["target"] and not once else "")
                                for l in mine)
            if once and mine[0]["expected"] != mine[0]["target"]:
                shares += f" of {fmt(mine[0]['expected'])}"
            utils = " / ".join(fmt(l["util"], 0) for l in mine)
            ax.text(x + 0.5, y + 0.42, shares, ha="center", va="center", fontsize=8.5 if len(shares) <= 20 else 7,
                    weight="bold")
            ax.text(x + 0.5, y + 0.78, f"util {utils}", ha="center", va="center", fontsize=6.5, color="0.3")
    ax.set_xlim(0, len(targets))
    ax.set_ylim(len(keys), 0)
    ax.set_xticks([x + 0.5 for x in range(len(targets))])
    ax.set_xticklabels([f"limit {t}" for t in targets])
    ax.xaxis.tick_top()
    ax.set_yticks([y + 0.5 for y in range(len(keys))])
    names = []
    for scenario, rid in keys:
        name = label_of(rid, labels)
        if scenario != "alone":
            name = f"{scenario}: {name}"
        elif summary.get(rid, {}).get("power_capped"):
            name += " (power-capped)"
        names.append(name)
    ax.set_yticklabels(names, fontsize=8)
    ax.tick_params(length=0)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    fig.suptitle(title, fontsize=10)
    fig.text(0.99, 0.01, f"throughput share, % of native (±{TOLERANCE:g}: green; blue: power-capped, on target "
             "by GPU-Util; red: outside; \"of E\": a row below the GPU, expected E)", ha="right", fontsize=7,
             color="0.3")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def write_outputs(out, data, final):
    """compute-matrix.json always (with `final`, the analysis in it); with `final` also the table, the
    TSV and the plot."""
    if final:
        lines, summary = analyse([(r["step"], r["result"]) for r in data["records"]])
        data.update(lines=lines, native=summary)
    with open(os.path.join(out, OUTPUT + ".json.tmp"), "w") as f:
        json.dump(data, f, indent=1, default=str)
    os.replace(os.path.join(out, OUTPUT + ".json.tmp"), os.path.join(out, OUTPUT + ".json"))
    if not final:
        return None
    skipped = [tuple(x) for x in data.get("skipped", [])]
    labels = data.get("labels")
    text = markdown(lines, summary, skipped, data["header"], labels)
    with open(os.path.join(out, OUTPUT + ".md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, OUTPUT + ".tsv"), "w") as f:
        f.write(tsv(lines, skipped, labels))
    try:
        plot(lines, summary, os.path.join(out, OUTPUT + ".png"), data["title"], labels)
    except Exception as e:  # the table matters more than the plot
        log(f"plot failed: {e!r}")
    failed = any(not l["pass"] for l in lines) or any(why.startswith("budget") for _, why in skipped)
    return text, failed


# --- main ----------------------------------------------------------------------------------------

def print_plan(blocks, s, library, est, show_commands, stream):
    p = lambda text: print(text, file=stream, flush=True)  # noqa: E731
    steps = sum(len(b) for b in blocks)
    p(f"plan: {len(blocks)} blocks, {steps} steps, about {est / 60:.1f} min ({est:.0f} s); warm-up {s.warmup:g} s, "
      f"window {s.measure:g} s, targets {', '.join(map(str, s.targets))}, PASS within ±{TOLERANCE:g} points"
      + (f"; budget {s.budget:g} s" if s.budget else ""))
    p(limited_runs_line(library, s.period))
    runner = MatrixRunner(s, None, None, "<build>/bench-compute/concurrency") if show_commands else None
    n = 0
    for block in blocks:
        for step in block:
            n += 1
            p(f"{n:3d}. {describe_step(step)}")
        if runner:
            step = block[0]
            many = step[0] == "group" or ROW[step[1]].procs > 1
            p(f"     $ {' '.join(shlex.quote(a) for a in runner.command(step[1]))}"
              + (" --barrier DIR NAME  (each process)" if many else ""))
    for what, why in s.skipped:
        p(f"not run: {what}: {why}")
    for note in s.notes:
        p(note)


def parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--library", help="libvgpu.so to preload in the limited runs (required unless --from-json)")
    p.add_argument("--out", default=os.environ.get("OUT", ""), help="output folder (default $OUT)")
    p.add_argument("--rows", help="comma-separated row ids or shell patterns (default: all): " + ",".join(ROW))
    p.add_argument("--targets", help="comma-separated limits, 1..100 (default 10,30,60,90; --quick 30,60)")
    p.add_argument("--quick", action="store_true", help="targets 30 and 60 only")
    p.add_argument("--groups", default=DEFAULT_GROUPS,
                   help=f"co-located groups, limits joined by + (default {DEFAULT_GROUPS}; '' for none)")
    p.add_argument("--colocated", default=DEFAULT_COLOCATED,
                   help=f"rows the groups run on (default {DEFAULT_COLOCATED}; '' for none)")
    p.add_argument("--seconds", type=float, default=1.6,
                   help="measurement window per run (default 1.6; 2.5 times that for 16x5ms and 16x50us, "
                        "whose periods the limiter stretches to 200 ms)")
    p.add_argument("--warmup", type=float, default=0.5, help="warm-up per run (default 0.5)")
    p.add_argument("--budget", type=float,
                   help="seconds from the start: skip rows and groups that would end later (default: no limit)")
    p.add_argument("--period", help="VGPU_COMPUTE_PERIOD for the limited runs (e.g. 100ms); use a window of "
                   "whole periods")
    p.add_argument("--serving-args", default=DEFAULT_SERVING_ARGS,
                   help="bench/serving/serve.py options after the matrix's --warmup and --seconds, one string "
                   f"(default {DEFAULT_SERVING_ARGS!r}: bench/serving's GPU-bound model with requests of fixed lengths, "
                        "in a window of its own, as a server needs longer than a spin loop to reach steady state)")
    p.add_argument("--serving-cpus", default="auto",
                   help="CPUs the serving row's processes (native and limited) are pinned to with taskset -c: "
                        "auto (default: the first half of this process's CPUs when it has at least 8), all (not "
                        "pinned) or a list such as 0-7; a host-bound server's rate varies less when pinned")
    p.add_argument("--serve-script", default=SERVE_SCRIPT, help="the serving workload (default bench/serving/serve.py)")
    p.add_argument("--gpu-index", type=int, default=0, help="NVML index of the GPU the runs use (default 0)")
    p.add_argument("--build-dir", help="where concurrency.cu is built (default: <library dir>/bench-compute)")
    p.add_argument("--workload-cmd", help="replaces every workload's program with this command, given the row's "
                   "kind (spin, torch, serving) and the workload's arguments: for tests, with a fake workload")
    p.add_argument("--summary", action="store_true",
                   help="limited runs with LIBCUDA_LOG_LEVEL=4: the limiter's summary at exit (its own measured "
                        "share, marks per launch, queue waits, period) goes into the JSON ('limiter' of each "
                        "process) and the progress lines")
    p.add_argument("--clock-spin", action="store_true",
                   help="concurrency.cu's kernels spin on clock64() for their time instead of doing a fixed "
                        "amount of work (a kernel switched out by another "
                        "context keeps counting, so time-sliced processes overstate their throughput)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the commands and exit; needs no GPU")
    p.add_argument("--from-json", metavar="FILE", nargs="+",
                   help="redraw the table, TSV and plot from a compute-matrix.json, or from several (a matrix "
                        "run in parts, e.g. one per device call: their runs are joined in the order given; a row or "
                        "group measured in several parts counts from the first)")
    return p


def _part_key(step):
    """What a run belongs to when parts are joined: its row (native and limited runs alike) or its
    group of limits on a row."""
    return (step[0], step[1], tuple(step[2]) if step[0] == "group" else None)


def redraw(args, error):
    """--from-json: the table, TSV and plot again from a saved JSON, or from the JSONs of a run in parts."""
    if not args.out:
        error("--out (or $OUT) is required")
    data = None
    for path in args.from_json:
        try:
            with open(path) as f:
                part = json.load(f)
            part["records"], part["header"], part["title"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            error(f"--from-json {path}: not a compute-matrix.json ({e!r})")
        if data is None:
            data = part
            continue
        # The first part's header and title; every part's runs, labels and skips. A row or group
        # an earlier part measured keeps that part's runs (the native runs either side of a
        # limited one belong to its own run), and the later ones are listed as left out.
        seen = {_part_key(r["step"]) for r in data["records"]}
        again = {_part_key(r["step"]) for r in part["records"]} & seen
        data["records"] = data["records"] + [r for r in part["records"] if _part_key(r["step"]) not in again]
        data["skipped"] = (data.get("skipped", []) + part.get("skipped", [])
                           + [(group_name(list(k[2])) + f" [{k[1]}]" if k[0] == "group" else k[1],
                               f"{REPEAT} {path} (the first part's runs count)")
                              for k in sorted(again, key=str)])
        data["labels"] = {**data.get("labels", {}), **part.get("labels", {})}
    # The rows in the matrix's order whatever the parts' order (a stable sort: each row's runs keep
    # theirs, so a limited run's natives either side stay its own).
    order = {r.id: i for i, r in enumerate(ROWS)}
    data["records"].sort(key=lambda r: (r["step"][0] == "group", order.get(r["step"][1], len(order))))
    os.makedirs(args.out, exist_ok=True)
    text, failed = write_outputs(args.out, data, final=True)
    print(text, end="", flush=True)
    return 1 if failed else 0


def block_name(block):
    step = block[0]
    return f"{group_name(step[2])} [{ROW[step[1]].label}]" if step[0] == "group" else ROW[step[1]].label


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    if args.from_json:
        return redraw(args, p.error)
    if not args.library:
        p.error("--library is required")
    s = Settings(args, p.error)
    blocks = build_plan(s)
    est = estimate_seconds(blocks, s)
    check_window(s.measure, s.period)
    if args.dry_run:
        print_plan(blocks, s, args.library, est, True, sys.stdout)
        print(f"outputs: {OUTPUT}.md, {OUTPUT}.json, {OUTPUT}.tsv, {OUTPUT}.png, {OUTPUT}.log")
        return 0
    if not args.out:
        p.error("--out (or $OUT) is required")
    if not os.path.isfile(args.library):
        p.error(f"--library {args.library}: no such file")
    os.makedirs(args.out, exist_ok=True)
    started = time.monotonic()
    sampler = UtilSampler(args.gpu_index)
    if not s.workload_cmd:
        sampler.start()
        sampler.warn_if_busy()
    print_plan(blocks, s, args.library, est, False, sys.stderr)
    with open(os.path.join(args.out, OUTPUT + ".log"), "w") as logf:
        launcher = Launcher(args.library, logf, period=s.period, prefix="vgpu-compute-matrix-")
        try:
            data = run_blocks(args, s, blocks, est, started, sampler, launcher)
        finally:
            launcher.close()
            if sampler.source:
                sampler.stop()
    text, failed = write_outputs(args.out, data, final=True)
    log(f"done in {data['elapsed_s']:.0f} s (estimate {est:.0f} s); start-up seen (s): "
        + ", ".join(f"{k} {v:.1f}" for k, v in data["startup_s"].items() if k in ROW))
    print(text, end="", flush=True)
    return 1 if failed else 0


def run_blocks(args, s, blocks, est, started, sampler, launcher):
    """Builds concurrency.cu, runs the blocks within the budget, writing the JSON after every run.
    Returns the data for write_outputs (the start-up times seen under "startup_s")."""
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    data = {"settings": vars(args), "targets": s.targets, "estimate_s": est, "date": date,
            "labels": {r.id: r.label for r in ROWS}, "plan": blocks, "records": [], "skipped": list(s.skipped),
            "header": "", "title": "", "complete": False}
    spin_bin = None
    if any(ROW[b[0][1]].kind == "spin" for b in blocks) and not s.workload_cmd:
        build_dir = args.build_dir or os.path.join(os.path.dirname(os.path.abspath(args.library)), "bench-compute")
        spin_bin = nvcc_build(CONCURRENCY_SRC, os.path.join(build_dir, "concurrency"), args.gpu_index, launcher.note)
        if not spin_bin:
            data["skipped"] += [(block_name(b), "bench/compute/concurrency.cu did not build (see the log)")
                                for b in blocks if ROW[b[0][1]].kind == "spin"]
            blocks = [b for b in blocks if ROW[b[0][1]].kind != "spin"]
    runner = MatrixRunner(s, launcher, sampler if sampler.source else None, spin_bin)
    gpu = "fake workload" if s.workload_cmd else sampler.name
    commit = git_describe()
    data["header"] = (f"vgpu compute-limit concurrency matrix on {gpu}, driver {sampler.driver}, {date} (targets "
                      f"{', '.join(map(str, s.targets))}; warm-up {s.warmup:g} s, window {s.measure:g} s per run; "
                      f"GPU-Util from {sampler.source or 'nowhere'}; library {args.library}"
                      + other_compute_variables("; ")
                      + (f"; VGPU_COMPUTE_PERIOD={s.period}" if s.period else "")
                      + ("; kernels spin on clock64() (--clock-spin)" if s.clock_spin else "")
                      + (f", commit {commit}" if commit else "") + ")")
    data["title"] = f"vgpu compute limit, concurrency matrix on {gpu} ({date})"
    total = sum(len(b) for b in blocks)
    n = 0
    try:
        for block in blocks:
            need = sum(step_seconds(st, s, runner.init_seen) for st in block)
            left = None if s.budget is None else s.budget - (time.monotonic() - started)
            if left is not None and need > left:
                why = f"budget: needs about {need:.0f} s, {max(left, 0):.0f} s left of {s.budget:g}"
                data["skipped"].append((block_name(block), why))
                log(f"skipped {block_name(block)}: {why}")
                n += len(block)
                continue
            for step in block:
                n += 1
                t0 = time.monotonic()
                if step[0] == "run":
                    res = runner.run(step[1], step[2])
                else:
                    native = native_summaries([(r["step"], r["result"]) for r in data["records"]])[1].get(step[1])
                    res = runner.group(step[1], step[2], filler_limit(step[2], native))
                data["records"].append({"step": step, "result": res})
                log(f"[{n}/{total}, {time.monotonic() - t0:.1f} s, total {time.monotonic() - started:.0f} s of "
                    f"~{est:.0f}] {progress(step, res, data['records'])}")
                write_outputs(args.out, data, final=False)
        if runner.sampler:
            refresh_samples([(r["step"], r["result"]) for r in data["records"]], sampler)
        data["complete"] = True
    finally:
        data["startup_s"] = runner.init_seen  # spawn to window start less warm-up: tunes the estimates
        data["elapsed_s"] = time.monotonic() - started
        write_outputs(args.out, data, final=False)  # an interrupted run keeps what it measured
    return data


def progress(step, res, records):
    """One progress line; a limited run's share against the row's latest native run."""
    row = ROW[step[1]]
    if step[0] == "group":
        return f"{group_name(step[2], res.get('filler'))} [{row.label}]: " + ", ".join(
            f"{c['name']} " + (c["error"] if "error" in c else f"{_rate(c['rate'])} {row.unit}")
            for c in res["containers"])
    what = "native" if step[2] is None else f"limit {step[2]}"
    if "error" in res:
        return f"{row.label} {what}: {res['error']}"
    text = f"{row.label} {what}: {_rate(res['rate'])} {row.unit}, util {fmt(res.get('util'), 0)}"
    if step[2] is not None:
        native = [r["result"] for r in records if r["step"][0] == "run" and r["step"][1] == step[1]
                  and r["step"][2] is None and "rate" in r["result"]]
        if native and native[-1]["rate"]:
            text += f" = {100.0 * res['rate'] / native[-1]['rate']:.1f}% of the last native run"
        summaries = [_limiter_text(p["limiter"]) for p in res.get("procs", []) if p.get("limiter")]
        if summaries:
            text += "; limiter: " + ", ".join(summaries)
    return text


def _limiter_text(q):
    """A process's limiter summary (summary_of) in a progress line."""
    measured = q["measured_ppm"] / 1e4 if "measured_ppm" in q else None
    return (f"measured {fmt(measured)}%, {fmt(q.get('marks_per_launch'), 3)} marks per launch, "
            f"{q.get('queue_waits', 0):.0f} queue waits, period {fmt(q.get('period_ms'), 0)} ms")


if __name__ == "__main__":
    sys.exit(main())
