#!/usr/bin/env python3
"""Compute-limit accuracy on a real GPU: does "limit N" give N% of the GPU, whatever the kernels?

Usage: python3 bench/compute_accuracy.py --library build-gpu/libvgpu.so --out DIR
                                          [--quick] [--soft-priority] [--dry-run]
                                          [--workloads spin2ms,matmul,...] [--targets 10,30,60,90]

Workloads (each keeps the GPU ~100% busy natively: no host synchronisation in the loop, at most
two ~10 ms batches in flight, flow control through events):
  spin2ms, spin50us, spin5us  spin kernels of 2 ms / 50 µs / 5 µs device time on every SM
                              (bench/compute/spin.cu, built here with nvcc; torch.cuda._sleep
                              if nvcc fails)
  matmul                      bf16 8192^3 torch.matmul loop
  graph                       torch.cuda.CUDAGraph replay (4 matmuls 4096^2 + 4 GELUs)
  train                       PyTorch training loop (4-layer transformer, bf16 autocast, fused AdamW)
  (bench/compute/torch_workload.py)

For every workload: native runs and runs under LD_PRELOAD=libvgpu.so with CUDA_DEVICE_SM_LIMIT=N
(10, 30, 60, 90; --quick: 30, 60), each in its own process with a fresh ledger
(CUDA_DEVICE_MEMORY_SHARED_CACHE), in the order N t1 t2 N t3 t4 N so each limited run lies
between two native runs (drift cancels: its reference is their mean). Throughput is measured
between two CUDA events after a warm-up. Achieved share = 100 x throughput / native throughput;
PASS when within +-3 points of the target. Native runs also measure the device time per unit
behind a blocker kernel and report the GPU-busy fraction (rate x device time): a workload below
95% is flagged, its ratio overstates the share ("power-capped" instead of "not saturating" when
GPU-Util is >= 98 all the same: the unit was timed at a higher clock than the loop ran at). NVML GPU-Util (nvidia-smi's utilization.gpu),
sampled every 100 ms by this process (NVML via ctypes, no preload; nvidia-smi -lms 100 if NVML
cannot be loaded), is averaged over each measurement window as a second opinion.

Scenarios: two co-located processes with separate ledgers at 30 and 60 (each against its own
workload's native throughput; the util column is the whole GPU's). --soft-priority adds the soft
limit (hard 30, soft 80: alone it should reach 80 +-3, beside an unlimited neighbour hold 30 +-3).
Priority (yield within 100 ms, recovery after) needs a timeline, not a mean rate: it is checked by
tests/gpu/compute/priority.py (tests/gpu/run.sh runs both).

Slices: --period 1s runs every limited process with VGPU_COMPUTE_PERIOD=1s (docs/compute.md,
"Slices"); make the window a whole number of periods (a throughput averaged over part of a period
depends on where the window falls in it). VGPU_COMPUTE_* variables of this shell (VGPU_COMPUTE_TURNS)
reach the limited runs as they are, and the report's header lists them.

Output: progress on stderr; $OUT/compute-accuracy.md (the table, also printed last on stdout),
$OUT/compute-accuracy.png (target vs achieved, +-3 band), $OUT/compute-accuracy.json (raw runs),
$OUT/compute-accuracy.log (every command, its stdout and stderr). Exit 1 when a row FAILs or a run
errs. Never changes clocks or GPU settings.
"""
import argparse
import ctypes
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPIN_SRC = os.path.join(ROOT, "bench", "compute", "spin.cu")
TORCH_WORKER = os.path.join(ROOT, "bench", "compute", "torch_workload.py")
TOLERANCE = 3.0        # points
MIN_NATIVE_BUSY = 0.95  # below this the throughput ratio overstates the busy share

WORKLOADS = [
    # id, label, backend, parameter, unit
    ("spin2ms", "2 ms spin kernels", "spin", 2000.0, "kernels/s"),
    ("spin50us", "50 µs spin kernels", "spin", 50.0, "kernels/s"),
    ("spin5us", "5 µs spin kernels", "spin", 5.0, "kernels/s"),
    ("matmul", "bf16 8192³ matmul", "torch", "matmul", "matmuls/s"),
    ("graph", "CUDA graph replay (4 matmul + 4 GELU)", "torch", "graph", "replays/s"),
    ("train", "PyTorch training (4-layer transformer)", "torch", "train", "steps/s"),
]
WL = {w[0]: w for w in WORKLOADS}

# Library variables that must not leak from this shell into the runs (cf. IsInheritedLimitVariable).
_INDEXED = ("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT", "CUDA_MEM_LIMIT", "CUDA_CORE_LIMIT",
            "CUDA_CORE_SOFT_LIMIT", "WRAPPER_MAX_MEMORY")
_EXACT = ("CUDA_OVERSUBSCRIBE", "CUDA_MEMORY_OVERSUBSCRIBE", "CUDA_TASK_PRIORITY",
          "CUDA_DEVICE_MEMORY_SHARED_CACHE", "GPU_CORE_UTILIZATION_POLICY", "CUDA_DISABLE_CONTROL",
          "LD_PRELOAD", "LIBCUDA_LOG_LEVEL", "LOGGER_LEVEL")


def is_library_variable(name):
    if name in _EXACT:
        return True
    if any(re.fullmatch(re.escape(b) + r"(_\d+)?", name) for b in _INDEXED):
        return True
    return bool(re.fullmatch(r"CUDA_DEVICE_\w+_LIMIT(_\d+)?", name))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --- GPU utilisation sampling --------------------------------------------------------------------

class _NvmlUtil(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class UtilSampler:
    """Samples GPU-Util every 100 ms for the whole benchmark; mean(t0, t1) over CLOCK_MONOTONIC."""

    def __init__(self, index):
        self.index = index
        self.samples = []  # (monotonic seconds, util %)
        self.clocks = []   # (monotonic seconds, SM clock MHz or None); NVML source only
        self.source = None
        self.name = self.driver = "?"
        self._stop = threading.Event()
        self._thread = None
        self._proc = None
        self._nvml = None
        self._handle = None

    def _try_nvml(self):
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as e:
            log(f"NVML not loadable ({e}); falling back to nvidia-smi -lms 100")
            return False
        handle = ctypes.c_void_p()
        for call, args in (("nvmlInit_v2", ()), ("nvmlDeviceGetHandleByIndex_v2",
                                                   (ctypes.c_uint(self.index), ctypes.byref(handle)))):
            rc = getattr(lib, call)(*args)
            if rc != 0:
                log(f"{call} returned {rc}; falling back to nvidia-smi -lms 100")
                return False
        buf = ctypes.create_string_buffer(96)
        if lib.nvmlDeviceGetName(handle, buf, ctypes.c_uint(96)) == 0:
            self.name = buf.value.decode(errors="replace")
        if lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) == 0:
            self.driver = buf.value.decode(errors="replace")
        self._nvml, self._handle = lib, handle
        return True

    def start(self):
        if self._try_nvml():
            self.source = "NVML nvmlDeviceGetUtilizationRates, 100 ms"
            self._thread = threading.Thread(target=self._nvml_loop, daemon=True)
        else:
            self.source = "nvidia-smi -lms 100"
            try:
                q = subprocess.run(["nvidia-smi", "-i", str(self.index), "--query-gpu=name,driver_version",
                                    "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
                if q.returncode == 0 and "," in q.stdout:
                    self.name, self.driver = [s.strip() for s in q.stdout.strip().split(",", 1)]
                # timestamps come from nvidia-smi itself: its output may be block-buffered in a pipe
                line_buffered = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
                self._proc = subprocess.Popen(
                    line_buffered + ["nvidia-smi", "-i", str(self.index), "--query-gpu=timestamp,utilization.gpu",
                     "--format=csv,noheader,nounits", "-lms", "100"],
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            except (OSError, subprocess.SubprocessError) as e:
                log(f"nvidia-smi unavailable ({e}): no utilisation column")
                self.source = None
                return
            self._thread = threading.Thread(target=self._smi_loop, daemon=True)
        self._thread.start()

    def _nvml_loop(self):
        util = _NvmlUtil()
        mhz = ctypes.c_uint()
        errors = 0
        while not self._stop.is_set():
            rc = self._nvml.nvmlDeviceGetUtilizationRates(self._handle, ctypes.byref(util))
            if rc == 0:
                # SM clock too (NVML_CLOCK_SM = 1): under a power cap a saturating matmul runs at lower
                # clocks natively than under a limit, which moves throughput ratios off busy shares.
                clock = None
                if self._nvml.nvmlDeviceGetClockInfo(self._handle, ctypes.c_uint(1), ctypes.byref(mhz)) == 0:
                    clock = float(mhz.value)
                self.clocks.append((time.monotonic(), clock))
                self.samples.append((time.monotonic(), float(util.gpu)))
            else:
                errors += 1
                if errors in (1, 100):
                    log(f"nvmlDeviceGetUtilizationRates returned {rc}")
            self._stop.wait(0.1)

    def _smi_loop(self):
        offset = time.time() - time.monotonic()
        for line in self._proc.stdout:
            try:
                stamp, value = [s.strip() for s in line.split(",")]
                wall = datetime.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp()
                self.samples.append((wall - offset, float(value)))
            except ValueError:
                continue

    def stop(self):
        self._stop.set()
        if self._proc:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._thread:
            self._thread.join(timeout=5)
        if self._nvml:
            self._nvml.nvmlShutdown()

    def mean(self, t0, t1, wait=True):
        if not self.source:
            return None
        if wait and self._proc:  # nvidia-smi output may lag: wait up to 2 s for a sample past t1
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and not any(t > t1 for t, _ in self.samples[-50:]):
                time.sleep(0.1)
        vals = [u for t, u in list(self.samples) if t0 <= t <= t1]
        return statistics.mean(vals) if vals else None


    def clock_mean(self, t0, t1):
        vals = [c for t, c in list(self.clocks) if t0 <= t <= t1 and c is not None]
        return statistics.mean(vals) if vals else None


def clock_of(sampler, res):
    return sampler.clock_mean(res["t_start"] + 0.3, res["t_end"])


def util_of(sampler, res, wait=True):
    # the first 0.3 s of a window still averages in the previous period in NVML's counter
    return sampler.mean(res["t_start"] + 0.3, res["t_end"], wait=wait)


# --- plan ----------------------------------------------------------------------------------------

class Settings:
    def __init__(self, args):
        self.quick = args.quick
        self.targets = [int(t) for t in args.targets.split(",")] if args.targets else (
            [30, 60] if args.quick else [10, 30, 60, 90])
        self.warmup = args.warmup if args.warmup is not None else (0.8 if args.quick else 1.5)
        self.measure = args.seconds if args.seconds is not None else (2.0 if args.quick else 3.5)
        self.workloads = args.workloads.split(",") if args.workloads else [w[0] for w in WORKLOADS]
        for w in self.workloads:
            if w not in WL:
                sys.exit(f"unknown workload {w}; known: {', '.join(WL)}")
        coloc = ["spin50us", "matmul"] if args.quick else ["spin2ms", "spin50us", "matmul"]
        self.colocated = [w for w in coloc if w in self.workloads]
        self.soft_priority = args.soft_priority
        self.sp_workload = next((w for w in ("spin50us", "spin2ms", "matmul") if w in self.workloads), None)
        self.period = args.period
        self.period_s = parse_period(args.period) if args.period else 0.0


def parse_period(text):
    m = re.fullmatch(r"(\d+)(ms|s)", text.strip())
    if not m:
        sys.exit(f"--period {text!r}: expected a duration such as 500ms or 1s")
    return int(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)


def compute_variables():
    """VGPU_COMPUTE_* variables of this shell: they reach the limited runs."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("VGPU_COMPUTE_")}


def build_plan(s):
    """A list of steps: ('calibrate', wl) | ('run', wl, target or None) | ('group', scenario, wl, members).
    A member is (name, target or None, soft, priority, expected) with expected a (kind, value) check."""
    plan = []
    for wl in s.workloads:
        if WL[wl][2] == "spin":
            plan.append(("calibrate", wl))
    for i, wl in enumerate(s.workloads):
        targets = s.targets if i % 2 == 0 else s.targets[::-1]  # alternate, so no target always follows native
        plan.append(("run", wl, None))
        for k in range(0, len(targets), 2):
            for t in targets[k:k + 2]:
                plan.append(("run", wl, t))
            plan.append(("run", wl, None))
    for wl in s.colocated:
        plan.append(("group", "co-located 30 + 60", wl, [
            ("a30", 30, None, None, ("near", 30)), ("b60", 60, None, None, ("near", 60))]))
    if s.soft_priority and s.sp_workload:
        wl = s.sp_workload
        plan.append(("group", "soft 30/80, alone", wl, [("soft", 30, 80, None, ("near", 80))]))
        plan.append(("group", "soft 30/80, unlimited neighbour", wl, [
            ("soft", 30, 80, None, ("near", 30)), ("neighbour", None, None, None, None)]))
    return plan


def estimate_seconds(plan, s):
    init = {"spin": 1.0, "torch": 5.0}  # process start-up, guessed
    total = 0.0
    for step in plan:
        if step[0] == "calibrate":
            total += 1.5
        elif step[0] == "run":
            total += init[WL[step[1]][2]] + (2 if WL[step[1]][0] == "train" else 0) + s.warmup + s.measure + (
                1.0 if step[2] is None else 0)
        else:
            total += init[WL[step[2]][2]] + 2 + s.warmup + s.measure
    return total


# --- running -------------------------------------------------------------------------------------

class Runner:
    def __init__(self, s, library, out, build_dir, sampler, logf):
        self.s = s
        self.library = os.path.abspath(library)
        self.out = out
        self.build_dir = build_dir
        self.sampler = sampler
        self.logf = logf
        self.tmp = tempfile.mkdtemp(prefix="vgpu-compute-accuracy-")
        self.ledgers = 0
        self.base_env = {k: v for k, v in os.environ.items() if not is_library_variable(k)}
        self.spin_bin = None
        self.spin_cal = {}     # wl -> {"cycles", "dev_us"}
        self.torch_cpu = {}    # wl -> cycles per µs of torch.cuda._sleep (spin fallback)
        self.init_s = {}       # wl -> longest observed start-up (spawn to ready)

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def note(self, text):
        self.logf.write(text + "\n")
        self.logf.flush()

    def build_spin(self):
        os.makedirs(self.build_dir, exist_ok=True)
        binary = os.path.join(self.build_dir, "spin")
        arch = "sm_90"
        try:
            q = subprocess.run(["nvidia-smi", "-i", str(self.sampler.index), "--query-gpu=compute_cap",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
            m = re.fullmatch(r"(\d+)\.(\d+)", q.stdout.strip()) if q.returncode == 0 else None
            if m:
                arch = f"sm_{m.group(1)}{m.group(2)}"
        except (OSError, subprocess.SubprocessError):
            pass
        cmd = ["nvcc", "-O2", f"-arch={arch}", "-o", binary, SPIN_SRC]
        self.note("$ " + " ".join(cmd))
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as e:
            log(f"nvcc failed ({e}); spin workloads fall back to torch.cuda._sleep")
            return
        self.note(r.stdout + r.stderr)
        if r.returncode != 0:
            log(f"nvcc failed (exit {r.returncode}, see the log); spin workloads fall back to torch.cuda._sleep")
            return
        self.spin_bin = binary

    def env_for(self, target, soft=None, priority=None):
        env = dict(self.base_env)
        if target is None and soft is None and priority is None:
            return env
        self.ledgers += 1
        env["LD_PRELOAD"] = self.library
        env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = os.path.join(self.tmp, f"ledger-{self.ledgers}.cache")
        if target is not None:
            env["CUDA_DEVICE_SM_LIMIT"] = str(target)
        if soft is not None:
            env["CUDA_CORE_SOFT_LIMIT"] = str(soft)
        if priority is not None:
            env["CUDA_TASK_PRIORITY"] = str(priority)
        if self.s.period:
            env["VGPU_COMPUTE_PERIOD"] = self.s.period
        return env

    def command(self, wl, calibrate, barrier=None):
        _, _, backend, param, _ = WL[wl]
        if backend == "spin" and self.spin_bin:
            cal = self.spin_cal[wl]
            cmd = [self.spin_bin, "run", str(cal["cycles"]), f"{cal['dev_us']:.4f}", str(self.s.warmup),
                   str(self.s.measure)]
            if calibrate:
                cmd.append("--calibrate")
        else:
            name = "spin" if backend == "spin" else param
            cmd = [sys.executable, TORCH_WORKER, name, str(self.s.warmup), str(self.s.measure)]
            if backend == "spin":
                cmd += ["--spin-us", str(param)]
                if wl in self.torch_cpu:
                    cmd += ["--cycles-per-us", f"{self.torch_cpu[wl]:.4f}"]
            if calibrate:
                cmd.append("--calibrate")
        if barrier:
            cmd += ["--barrier", barrier[0], barrier[1]]
        return cmd

    def timeout(self):
        return 180 + self.s.warmup + self.s.measure

    def _describe_env(self, env):
        keys = ("LD_PRELOAD", "CUDA_DEVICE_SM_LIMIT", "CUDA_CORE_SOFT_LIMIT", "CUDA_TASK_PRIORITY",
                "CUDA_DEVICE_MEMORY_SHARED_CACHE")
        shown = " ".join(f"{k}={env[k]}" for k in keys if k in env)
        if "LD_PRELOAD" in env:
            shown += "".join(f" {k}={v}" for k, v in env.items() if k.startswith("VGPU_COMPUTE_"))
        return shown

    def _finish(self, wl, proc_out, proc_err, rc, spawn):
        self.note(f"exit {rc}\n--- stdout\n{proc_out}\n--- stderr\n{proc_err[-4000:]}")
        if rc != 0:
            return {"error": f"exit {rc}: {proc_err.strip().splitlines()[-1] if proc_err.strip() else ''}"[:200]}
        lines = [l for l in proc_out.splitlines() if l.startswith("{")]
        if not lines:
            return {"error": "no result line"}
        res = json.loads(lines[-1])
        self.init_s[wl] = max(self.init_s.get(wl, 0.0), res["t_ready"] - spawn)
        if "cycles_per_us" in res and wl not in self.torch_cpu:
            self.torch_cpu[wl] = res["cycles_per_us"]
        res["util"] = util_of(self.sampler, res, wait=False)  # for the progress line; redone at the end
        return res

    def calibrate(self, wl):
        if not self.spin_bin:
            return {"skipped": "torch fallback: calibrated in the first native run"}
        cmd = [self.spin_bin, "calibrate", str(WL[wl][3])]
        self.note("$ " + " ".join(cmd))
        r = subprocess.run(cmd, env=self.base_env, capture_output=True, text=True, timeout=120)
        self.note(f"exit {r.returncode}\n{r.stdout}\n{r.stderr}")
        if r.returncode != 0:
            raise RuntimeError(f"spin calibrate {WL[wl][3]} failed: {r.stderr.strip()[-300:]}")
        cal = json.loads(r.stdout.strip().splitlines()[-1])
        self.spin_cal[wl] = cal
        return cal

    def run(self, wl, target):
        env = self.env_for(target)
        cmd = self.command(wl, calibrate=target is None)
        self.note(f"$ {self._describe_env(env)} {' '.join(cmd)}")
        spawn = time.monotonic()
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=self.timeout())
        except subprocess.TimeoutExpired as e:
            self.note(f"timeout\n{e.stdout}\n{e.stderr}")
            return {"error": "timeout"}
        except OSError as e:
            self.note(f"cannot start: {e}")
            return {"error": f"cannot start: {e}"}
        return self._finish(wl, r.stdout, r.stderr, r.returncode, spawn)

    def group(self, wl, members):
        bdir = tempfile.mkdtemp(prefix="barrier-", dir=self.tmp)
        procs = []
        for name, target, soft, prio, _ in members:
            env = self.env_for(target, soft, prio)
            cmd = self.command(wl, calibrate=False, barrier=(bdir, name))
            self.note(f"$ {self._describe_env(env)} {' '.join(cmd)} &")
            out_f = open(os.path.join(bdir, f"{name}.out"), "w+")
            err_f = open(os.path.join(bdir, f"{name}.err"), "w+")
            procs.append((name, subprocess.Popen(cmd, env=env, stdout=out_f, stderr=err_f), out_f, err_f,
                          time.monotonic()))
        deadline = time.monotonic() + self.timeout()
        while time.monotonic() < deadline:  # every member warmed up, then all start together
            if all(os.path.exists(os.path.join(bdir, "ready." + m[0])) for m in members):
                break
            if any(p.poll() is not None for _, p, *_ in procs):
                break
            time.sleep(0.05)
        with open(os.path.join(bdir, "go.tmp"), "w") as f:
            f.write(f"{time.monotonic() + 0.3:.6f}\n")
        os.rename(os.path.join(bdir, "go.tmp"), os.path.join(bdir, "go"))
        results = {}
        for name, p, out_f, err_f, spawn in procs:
            try:
                rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
                self.note(f"{name}: timeout")
            out_f.seek(0)
            err_f.seek(0)
            self.note(f"[{name}]")
            results[name] = self._finish(wl, out_f.read(), err_f.read(), rc, spawn)
            out_f.close()
            err_f.close()
        return results


# --- analysis and report -------------------------------------------------------------------------

def verdict(value, check):
    if value is None or check is None:
        return None
    kind, bound = check
    return abs(value - bound) <= TOLERANCE if kind == "near" else value <= bound


def fmt(v, digits=1, suffix=""):
    return "–" if v is None else f"{v:.{digits}f}{suffix}"


def analyse(plan, records, s):
    """records: list of (step, result) in plan order. Returns rows and per-workload native summaries."""
    natives = {}  # wl -> list of (index, result)
    for i, (step, res) in enumerate(records):
        if step[0] == "run" and step[2] is None and "rate" in res:
            natives.setdefault(step[1], []).append((i, res))
    summary = {}
    for wl, lst in natives.items():
        rates = [r["rate"] for _, r in lst]
        busies = [r["busy"] for _, r in lst if r.get("busy") is not None]
        utils = [r["util"] for _, r in lst if r.get("util") is not None]
        clocks = [r["clock"] for _, r in lst if r.get("clock") is not None]
        summary[wl] = {
            "rate": statistics.median(rates),
            "spread": 100.0 * (max(rates) / min(rates) - 1.0) if len(rates) > 1 else 0.0,
            "busy": min(busies) if busies else None,
            "busy_ok": all(r.get("dev_unit_ok", True) for _, r in lst),
            "util": statistics.mean(utils) if utils else None,
            "clock": statistics.mean(clocks) if clocks else None,
        }
    rows = []
    for i, (step, res) in enumerate(records):
        if step[0] == "run" and step[2] is not None:
            wl, target = step[1], step[2]
            row = {"scenario": "alone", "wl": wl, "target": target, "util": res.get("util"),
                   "clock": res.get("clock"),
                   "error": res.get("error"), "check": ("near", target), "expected_fail": False}
            before = [r for j, r in natives.get(wl, []) if j < i]
            after = [r for j, r in natives.get(wl, []) if j > i]
            refs = [r["rate"] for r in before[-1:] + after[:1]]  # the native runs either side
            if "rate" in res and refs:
                row["achieved"] = 100.0 * res["rate"] / statistics.mean(refs)
                row["rate"] = res["rate"]
            rows.append(row)
        elif step[0] == "group":
            _, scenario, wl, members = step
            expected_fail = False
            for name, target, soft, prio, check in members:
                step_res = res.get(name, {"error": "missing"})
                if check is None:
                    continue  # the unlimited neighbour is not judged
                label = {"a30": "30", "b60": "60", "soft": "30/soft 80", "high": "60 prio 0",
                         "low": "30 prio 3"}.get(name, name)
                row = {"scenario": scenario, "wl": wl, "target": target, "label": label,
                       "util": step_res.get("util"), "error": step_res.get("error"), "check": check,
                       "expected_fail": expected_fail}
                if "rate" in step_res and wl in summary:
                    row["achieved"] = 100.0 * step_res["rate"] / summary[wl]["rate"]
                    row["rate"] = step_res["rate"]
                rows.append(row)
    for row in rows:
        ok = verdict(row.get("achieved"), row["check"])
        row["pass"] = bool(ok) and not row["error"]
    return rows, summary


def _result(row):
    if row["error"]:
        return f"FAIL ({row['error']})"
    return "PASS" if row["pass"] else "FAIL"


def _clock_bound(n):
    """A native loop whose GPU-Util is full while rate x device time per unit reads low: the unit
    was timed at a higher clock than the power-capped loop ran at, not a loop that leaves gaps."""
    return n.get("util") is not None and n["util"] >= 98 and (n.get("clock") or 0) > 0


def markdown(rows, summary, s, header):
    out = [header, ""]
    notes = []
    # Single process per workload: workload x target.
    alone = [r for r in rows if r["scenario"] == "alone"]
    targets = sorted({r["target"] for r in alone})
    out.append("Achieved share = throughput under the limit ÷ native throughput (the native runs either side), "
               f"PASS within ±{TOLERANCE:g} points; in brackets nvidia-smi GPU-Util and the mean SM clock over the run.")
    out.append("")
    out.append("| workload | native: rate (GPU busy, util, spread of runs) | "
               + " | ".join(f"limit {t}" for t in targets) + " |")
    out.append("|---|---|" + "---|" * len(targets))
    for wl in dict.fromkeys(r["wl"] for r in alone):
        n = summary.get(wl)
        if n:
            busy = "?" if n["busy"] is None else f"{100 * n['busy']:.1f}%{'' if n['busy_ok'] else ' (upper bound)'}"
            rate = f"{n['rate']:,.0f}" if n["rate"] >= 1000 else f"{n['rate']:.1f}"
            native = (f"{rate} {WL[wl][4]} (busy {busy}, util {fmt(n['util'], 0)}, SM {fmt(n.get('clock'), 0)} MHz, "
                      f"±{n['spread']:.1f}%)")
            if n["busy"] is not None and n["busy"] < MIN_NATIVE_BUSY:
                native += " ⚠ power-capped" if _clock_bound(n) else " ⚠ not saturating"
        else:
            native = "– (no native run)"
        cells = []
        for t in targets:
            r = next((r for r in alone if r["wl"] == wl and r["target"] == t), None)
            cells.append("" if r is None else
                         f"**{fmt(r.get('achieved'))}** ({fmt(r['util'], 0)}, {fmt(r.get('clock'), 0)} MHz) {_result(r)}")
        out.append(f"| {WL[wl][1]} | {native} | " + " | ".join(cells) + " |")
    # Scenarios: processes started together (barrier), each against its workload's native rate.
    scen = [r for r in rows if r["scenario"] != "alone"]
    if scen:
        out.append("")
        out.append("Scenarios: processes with separate ledgers started together; achieved = throughput ÷ the "
                   "workload's native throughput (median); nvidia-smi GPU-Util is the whole GPU's.")
        out.append("")
        out.append("| scenario | workload | process (limit) | expected | achieved | GPU-Util (whole GPU) | result |")
        out.append("|---|---|---|---|---|---|---|")
        for r in scen:
            kind, bound = r["check"]
            expected = f"{bound:g} ± {TOLERANCE:g}" if kind == "near" else f"≤ {bound:g}"
            result = _result(r) + (" (not wired yet: not judged)" if r["expected_fail"] else "")
            out.append(f"| {r['scenario']} | {WL[r['wl']][1]} | {r['label']} | {expected} | "
                       f"{fmt(r.get('achieved'))} | {fmt(r['util'], 0)} | {result} |")
    for wl, n in summary.items():
        if n["busy"] is not None and n["busy"] < MIN_NATIVE_BUSY and _clock_bound(n):
            notes.append(f"- {WL[wl][1]}: rate × device time per unit reads {100 * n['busy']:.1f}% while GPU-Util "
                         f"reads {fmt(n['util'], 0)}: the loop saturates the GPU at the power cap "
                         f"({fmt(n.get('clock'), 0)} MHz), and the unit was timed behind a blocker at a higher "
                         "clock. Under a limit the loop runs at a higher clock too, so each busy second does more "
                         "work: its throughput ratio exceeds its busy share (trust the GPU-Util column more).")
        elif n["busy"] is not None and n["busy"] < MIN_NATIVE_BUSY:
            notes.append(f"- {WL[wl][1]}: the native loop kept the GPU only {100 * n['busy']:.1f}% busy; "
                         "throughput ratios overstate its busy share (trust the GPU-Util column more).")
        if not n["busy_ok"]:
            notes.append(f"- {WL[wl][1]}: device time per unit unreliable (the host could not queue the "
                         "calibration batch behind the blocker): its GPU-busy fraction is an upper bound.")
    judged = [r for r in rows if not r["expected_fail"]]
    out.append("")
    out.append(f"{sum(r['pass'] for r in judged)} of {len(judged)} PASS (±{TOLERANCE:g} points)"
               + (f"; soft limit / priority: {sum(r['pass'] for r in rows if r['expected_fail'])} of "
                  f"{sum(1 for r in rows if r['expected_fail'])} PASS (not wired yet, not judged)"
                  if any(r["expected_fail"] for r in rows) else ""))
    out.extend(notes)
    return "\n".join(out) + "\n"


def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.6), sharey=True)
    xs = [0, 100]
    for ax, key, ylabel in ((axes[0], "achieved", "achieved share (throughput ÷ native, %)"),
                            (axes[1], "util", "nvidia-smi GPU-Util during the run (%)")):
        ax.fill_between(xs, [x - TOLERANCE for x in xs], [x + TOLERANCE for x in xs], color="0.85",
                        label=f"target ±{TOLERANCE:g}")
        ax.plot(xs, xs, color="0.4", lw=0.8, ls="--")
        for wl in dict.fromkeys(r["wl"] for r in rows):
            pts = sorted((r["target"], r[key]) for r in rows
                         if r["wl"] == wl and r["scenario"] == "alone" and r.get(key) is not None)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=5, lw=1.2, label=WL[wl][1])
        if key == "achieved":
            co = [r for r in rows if r["scenario"].startswith("co-located") and r.get(key) is not None]
            for wl in dict.fromkeys(r["wl"] for r in co):
                pts = [(r["target"], r[key]) for r in co if r["wl"] == wl]
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker="x", s=60, zorder=5,
                           label=f"co-located 30+60: {WL[wl][1]}")
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 105)
        ax.set_xlabel("compute limit (%)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7.5, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def git_describe():
    try:
        r = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %s"], capture_output=True, text=True,
                           timeout=10)
        return r.stdout.strip()[:80] if r.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def demo_records(plan, s):
    """Made-up results to exercise the report without a GPU (--demo)."""
    import random
    rnd = random.Random(1)
    recs = []
    base = {"spin2ms": 499.0, "spin50us": 19900.0, "spin5us": 190000.0, "matmul": 560.0, "graph": 950.0,
            "train": 95.0}
    for step in plan:
        if step[0] == "calibrate":
            recs.append((step, {"cycles": 1, "dev_us": WL[step[1]][3]}))
        elif step[0] == "run":
            wl, t = step[1], step[2]
            frac = 1.0 if t is None else t / 100.0 + rnd.uniform(-0.03, 0.04)
            r = {"rate": base[wl] * frac * rnd.uniform(0.995, 1.005), "util": 100 * frac + rnd.uniform(-2, 2)}
            if t is None:
                r.update(busy=0.999 if wl != "spin5us" else 0.93, dev_unit_ok=True)
            recs.append((step, r))
        else:
            wl, members = step[2], step[3]
            recs.append((step, {m[0]: {"rate": base[wl] * ((m[1] or 100) / 100.0) * rnd.uniform(0.9, 1.0),
                                       "util": 88.0} for m in members}))
    return recs


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--library", required=True, help="libvgpu.so to preload in the limited runs")
    p.add_argument("--out", default=os.environ.get("OUT", ""), help="output folder (default $OUT)")
    p.add_argument("--quick", action="store_true", help="targets 30 and 60, shorter runs (< 3 min)")
    p.add_argument("--soft-priority", action="store_true",
                   help="add the soft-limit scenarios (30/80 alone, and beside an unlimited neighbour)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit; needs no GPU")
    p.add_argument("--workloads", help="comma-separated subset of " + ",".join(WL))
    p.add_argument("--targets", help="comma-separated limits (default 10,30,60,90; --quick 30,60)")
    p.add_argument("--seconds", type=float, help="measurement window per run (default 3.5; --quick 2)")
    p.add_argument("--warmup", type=float, help="warm-up per run (default 1.5; --quick 0.8)")
    p.add_argument("--period", help="slices: VGPU_COMPUTE_PERIOD for the limited runs (e.g. 1s); "
                   "use a window that is a whole number of periods")
    p.add_argument("--gpu-index", type=int, default=0, help="NVML index of the GPU the runs use (default 0)")
    p.add_argument("--build-dir", help="where spin is built (default: <library dir>/bench-compute)")
    p.add_argument("--demo", action="store_true", help=argparse.SUPPRESS)  # report from made-up numbers
    args = p.parse_args()
    s = Settings(args)
    plan = build_plan(s)
    est = estimate_seconds(plan, s)
    if s.period_s:
        periods = s.measure / s.period_s
        if abs(periods - round(periods)) > 0.01 or round(periods) < 1:
            log(f"warning: the window ({s.measure:g} s) is not a whole number of periods ({s.period}): "
                "each rate then depends on where the window falls in a period")

    if args.dry_run:
        print(f"plan: {len(plan)} steps, about {est / 60:.1f} min; warm-up {s.warmup} s, window {s.measure} s, "
              f"targets {s.targets}, PASS within ±{TOLERANCE:g} points")
        print(f"limited runs: LD_PRELOAD={os.path.abspath(args.library)} CUDA_DEVICE_SM_LIMIT=N "
              "CUDA_DEVICE_MEMORY_SHARED_CACHE=<fresh ledger per process>"
              + (f" VGPU_COMPUTE_PERIOD={s.period}" if s.period else "")
              + "".join(f" {k}={v}" for k, v in compute_variables().items() if k != "VGPU_COMPUTE_PERIOD"))
        for i, step in enumerate(plan, 1):
            if step[0] == "calibrate":
                print(f"{i:3d}. calibrate {WL[step[1]][1]}: spin calibrate {WL[step[1]][3]:g} (native)")
            elif step[0] == "run":
                what = "native (+ busy fraction)" if step[2] is None else f"limit {step[2]}"
                print(f"{i:3d}. {WL[step[1]][1]}: {what}")
            else:
                desc = ", ".join(
                    f"{m[0]}: " + ("unlimited" if m[1] is None else f"limit {m[1]}")
                    + (f" soft {m[2]}" if m[2] else "") + (f" priority {m[3]}" if m[3] is not None else "")
                    for m in step[3])
                print(f"{i:3d}. {step[1]} [{WL[step[2]][1]}]: {desc}, started together")
        print("outputs: compute-accuracy.md, compute-accuracy.png, compute-accuracy.json, compute-accuracy.log")
        return 0

    if not args.out:
        p.error("--out (or $OUT) is required")
    os.makedirs(args.out, exist_ok=True)
    md_path = os.path.join(args.out, "compute-accuracy.md")
    png_path = os.path.join(args.out, "compute-accuracy.png")
    json_path = os.path.join(args.out, "compute-accuracy.json")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")

    if args.demo:
        records = demo_records(plan, s)
        startup = {}
        gpu, driver, source = "DEMO (made-up numbers)", "-", "-"
    else:
        if not os.path.isfile(args.library):
            sys.exit(f"no library at {args.library}")
        sampler = UtilSampler(args.gpu_index)
        sampler.start()
        gpu, driver, source = sampler.name, sampler.driver, sampler.source
        logf = open(os.path.join(args.out, "compute-accuracy.log"), "w")
        runner = Runner(s, args.library, args.out,
                        args.build_dir or os.path.join(os.path.dirname(os.path.abspath(args.library)), "bench-compute"),
                        sampler, logf)
        time.sleep(1.0)
        idle = sampler.mean(time.monotonic() - 1.0, time.monotonic())
        if idle is not None and idle > 5:
            log(f"warning: GPU-Util is {idle:.0f}% before the benchmark: is something else running on it?")
        log(f"{gpu}, driver {driver}; utilisation from {source}; plan: {len(plan)} steps, about {est / 60:.1f} min")
        if any(WL[w][2] == "spin" for w in s.workloads):
            runner.build_spin()
        records = []
        started = time.monotonic()
        try:
            for i, step in enumerate(plan, 1):
                t0 = time.monotonic()
                if step[0] == "calibrate":
                    try:
                        res = runner.calibrate(step[1])
                    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError, IndexError, KeyError) as e:
                        log(f"{e}; falling back to torch.cuda._sleep for all spin workloads")
                        runner.spin_bin = None
                        res = {"error": str(e)}
                    desc = f"calibrate {WL[step[1]][1]}: {res}"
                elif step[0] == "run":
                    res = runner.run(step[1], step[2])
                    what = "native" if step[2] is None else f"limit {step[2]}"
                    desc = (f"{WL[step[1]][1]} {what}: " + (res["error"] if "error" in res else
                            f"{res['rate']:.2f} {WL[step[1]][4]}" + (f", busy {100 * res['busy']:.1f}%"
                                                                     if res.get("busy") is not None else "")
                            + f", util {fmt(res.get('util'), 0)}"))
                else:
                    res = runner.group(step[2], step[3])
                    desc = f"{step[1]} [{WL[step[2]][1]}]: " + ", ".join(
                        f"{k} " + (v["error"] if "error" in v else f"{v['rate']:.2f}") for k, v in res.items())
                records.append((step, res))
                log(f"[{i}/{len(plan)}, {time.monotonic() - t0:.1f} s, total {time.monotonic() - started:.0f} s] {desc}")
            # Utilisation of every window again, now that every sample is in (nvidia-smi's output
            # may arrive late through a pipe).
            for step, res in records:
                for r in (res.values() if step[0] == "group" else [res]):
                    if isinstance(r, dict) and "t_start" in r:
                        r["util"] = util_of(sampler, r)
                        r["clock"] = clock_of(sampler, r)
        finally:
            startup = runner.init_s  # spawn to ready, per workload: to tune the plan's estimate
            runner.close()
            sampler.stop()
            logf.close()

    rows, summary = analyse(plan, records, s)
    mode = "quick" if s.quick else "full"
    commit = git_describe()
    header = (f"vgpu compute-limit accuracy on {gpu}, driver {driver}, {date} ({mode}: targets "
              f"{', '.join(map(str, s.targets))}; warm-up {s.warmup:g} s, window {s.measure:g} s per run; "
              f"GPU-Util from {source}; library {args.library}"
              + "".join(f"; {k}={v}" for k, v in compute_variables().items() if k != "VGPU_COMPUTE_PERIOD")
              + (f"; slices: VGPU_COMPUTE_PERIOD={s.period}" if s.period else "")
              + (f", commit {commit}" if commit else "") + ")")
    text = markdown(rows, summary, s, header)
    with open(md_path, "w") as f:
        f.write(text)
    with open(json_path, "w") as f:
        json.dump({"settings": vars(args), "records": [{"step": st, "result": r} for st, r in records],
                   "rows": rows, "native": summary, "startup_s": startup}, f, indent=1, default=str)
    try:
        plot(rows, png_path, f"vgpu compute limit: target vs achieved on {gpu} ({date}, {mode}"
                             + (f", slices of {s.period}" if s.period else "") + ")")
    except Exception as e:  # the table matters more than the plot
        log(f"plot failed: {e!r}")
    errors = [r for r in rows if r["error"] and not r["expected_fail"]]
    print(text, end="", flush=True)
    return 1 if errors or not all(r["pass"] for r in rows if not r["expected_fail"]) else 0


if __name__ == "__main__":
    sys.exit(main())
