"""What the real-GPU compute benchmarks share (bench/compute_accuracy.py, bench/compute_matrix.py).

- The library's variables, which must not leak from the calling shell into the runs
  (is_library_variable), and the VGPU_COMPUTE_* variables, which do (compute_variables).
- UtilSampler: NVML GPU-Util (the driver's own samples, else polled every 100 ms), SM clock and
  clock-event reasons (every 100 ms) for the whole benchmark (nvidia-smi -lms 100 for the
  utilisation alone when NVML cannot be loaded), averaged over a run's window afterwards.
- Launcher: starts workload processes natively or under LD_PRELOAD with a limit and a ledger
  (a fresh one per container), alone or as a group started together through barrier files, logs
  every command with its output, and parses a workload's JSON result line.
- nvcc_build: builds a bench/compute/*.cu program for the GPU's compute capability.
Standard library only; nothing here needs a GPU until a sampler is started or a command runs.
"""
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
TOLERANCE = 3.0  # points

# Library variables that must not leak from this shell into the runs (cf. IsInheritedLimitVariable).
_INDEXED = ("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT", "CUDA_MEM_LIMIT", "CUDA_CORE_LIMIT",
            "CUDA_CORE_SOFT_LIMIT", "WRAPPER_MAX_MEMORY")
_EXACT = ("CUDA_OVERSUBSCRIBE", "CUDA_MEMORY_OVERSUBSCRIBE", "CUDA_TASK_PRIORITY",
          "CUDA_DEVICE_MEMORY_SHARED_CACHE", "GPU_CORE_UTILIZATION_POLICY", "CUDA_DISABLE_CONTROL",
          "LD_PRELOAD", "LIBCUDA_LOG_LEVEL", "LOGGER_LEVEL")

# NVML clock-event reasons that mean "held down by power or heat" (nvmlClocksEventReason*: SW power
# cap 0x4, HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80).
POWER_THERMAL_REASONS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def is_library_variable(name):
    if name in _EXACT:
        return True
    if any(re.fullmatch(re.escape(b) + r"(_\d+)?", name) for b in _INDEXED):
        return True
    return bool(re.fullmatch(r"CUDA_DEVICE_\w+_LIMIT(_\d+)?", name))


def compute_variables():
    """VGPU_COMPUTE_* variables of this shell: they reach the limited runs."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("VGPU_COMPUTE_")}


def other_compute_variables(sep):
    """The VGPU_COMPUTE_* variables of this shell but the period, each as `sep`NAME=VALUE."""
    return "".join(f"{sep}{k}={v}" for k, v in compute_variables().items() if k != "VGPU_COMPUTE_PERIOD")


def limited_runs_line(library, period):
    """What the plan says about the environment of a limited run."""
    return (f"limited runs: LD_PRELOAD={os.path.abspath(library)} CUDA_DEVICE_SM_LIMIT=<limit> "
            "CUDA_DEVICE_MEMORY_SHARED_CACHE=<a fresh ledger per container>"
            + (f" VGPU_COMPUTE_PERIOD={period}" if period else "") + other_compute_variables(" "))


def interleaved_targets(targets, reverse, per_native=2):
    """A row's runs in order: None (native) and the targets as native t1 t2 native t3 t4 native
    (a native run after every `per_native` targets), the targets reversed when `reverse` (every
    other row, so that no target always follows a native run)."""
    if reverse:
        targets = targets[::-1]
    order = [None]
    for k in range(0, len(targets), per_native):
        order += [*targets[k:k + per_native], None]
    return order


def check_window(measure, period):
    """Warns when the window of `measure` seconds is not a whole number of periods of the --period
    text (each rate then depends on where the window falls in one); nothing without a period."""
    if not period:
        return
    periods = measure / parse_period(period)
    if abs(periods - round(periods)) > 0.01 or round(periods) < 1:
        log(f"warning: the window ({measure:g} s) is not a whole number of periods ({period}): "
            "each rate then depends on where the window falls in a period")


def parse_period(text):
    """'500ms' / '1s' -> seconds; exits with a message naming the option otherwise."""
    m = re.fullmatch(r"(\d+)(ms|s)", text.strip())
    if not m:
        sys.exit(f"--period {text!r}: expected a duration such as 500ms or 1s")
    return int(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def fmt(v, digits=1, suffix=""):
    return "–" if v is None else f"{v:.{digits}f}{suffix}"


def git_describe(root=ROOT):
    """The checkout's commit and subject for a report's header, and how many tracked files differ
    from it: a copy of a working tree whose git metadata lags (the device machine's) is not that
    commit, and the header must not say it is."""
    try:
        r = subprocess.run(["git", "-C", root, "log", "-1", "--format=%h %s"], capture_output=True, text=True,
                           timeout=10)
        if r.returncode != 0:
            return ""
        d = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    text = r.stdout.strip()[:80]
    changed = len(d.stdout.splitlines()) if d.returncode == 0 else 0
    return text + (f" (+ changes to {changed} tracked file{'s' if changed > 1 else ''})" if changed else "")


def summary_of(stderr):
    """The limiter's summary at exit (LIBCUDA_LOG_LEVEL=4), device 0's last line: what it says of
    launches, marks, event queries, queue waits, its measured share, busy and throttled time and
    period, and of
    light measurement (the monitor's samples that allowed it, those refused for the GPU's busy
    share or a debt, and launches onto dry streams measured exactly after a wait or beside another
    stream), and how much its launches overlapped and whether its runs would give way (1 or 0)."""
    lines = [l for l in stderr.splitlines() if "compute device 0:" in l]
    if not lines:
        return {}
    line = lines[-1]
    out = {}
    for key, pattern in (("launches", r"(\d+) launches"), ("marks", r"(\d+) marks"),
                         ("begins", r"\((\d+) begins"), ("light", r"(\d+) measured lightly"),
                         ("light_banked", r"\((\d+) by the bank\)"),
                         ("queries", r"(\d+) queries"),
                         ("queue_waits", r"(\d+) queue waits"), ("measured_ppm", r"measured (\d+) ppm"),
                         ("busy_ms", r"busy ([\d.]+) ms"), ("period_ms", r"period ([\d.]+) ms"),
                         ("throttled_ms", r"throttled ([\d.]+) ms"),
                         ("light_allowed", r"light measurement allowed at (\d+) of"),
                         ("light_samples", r"light measurement allowed at \d+ of (\d+) samples"),
                         ("light_refused_busy", r"refused: busy (\d+)"), ("light_refused_debt", r", debt (\d+)"),
                         ("light_held", r"while held after a wait (\d+)"),
                         ("light_not_alone", r"beside another stream (\d+)"),
                         ("overlap", r"launches overlap ([\d.]+)")):
        m = re.search(pattern, line)
        if m:
            out[key] = float(m.group(1))
    m = re.search(r"gives way: (yes|no)", line)
    if m:
        out["gives_way"] = 1.0 if m.group(1) == "yes" else 0.0
    if out.get("launches"):
        out["marks_per_launch"] = out.get("marks", 0) / out["launches"]
        out["queries_per_launch"] = out.get("queries", 0) / out["launches"]
    return out


# --- GPU utilisation sampling --------------------------------------------------------------------

class _NvmlUtil(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _NvmlValue(ctypes.Union):  # nvmlValue_t
    _fields_ = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong)]


class _NvmlSample(ctypes.Structure):  # nvmlSample_t: a CPU timestamp (us) and a value
    _fields_ = [("timestamp", ctypes.c_ulonglong), ("value", _NvmlValue)]


_NVML_GPU_UTILIZATION_SAMPLES = 1
_NVML_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal"}  # nvmlValueType_t
_NVML_ERROR_NOT_FOUND = 6  # nvmlDeviceGetSamples: no sample newer than the last one seen


def interval_mean(samples, t0, t1):
    """Time-weighted mean of the consecutive samples [(end, value)] whose spans lie within [t0, t1],
    each sample the average over the time since the previous one (the first only bounds the second;
    a gap longer than twice the median counts as twice the median). A sample straddling an end of
    the window is left out: its part outside may be anything (a workload's window ends with the GPU
    going idle). None when the samples left cover less than half of the window."""
    gaps = [b[0] - a[0] for a, b in zip(samples, samples[1:])]
    if not gaps or t1 <= t0:
        return None
    cap = 2 * statistics.median(gaps)
    total = covered = 0.0
    for (end, value), gap in zip(samples[1:], gaps):
        span = min(gap, cap)
        if end - span >= t0 and end <= t1:
            total += span * value
            covered += span
    return total / covered if covered >= 0.5 * (t1 - t0) else None


def _wait_until(ready, timeout_s=2.0):
    """Polls `ready` every 100 ms for at most timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not ready():
        time.sleep(0.1)


class UtilSampler:
    """GPU-Util for the whole benchmark; mean(t0, t1) over CLOCK_MONOTONIC.

    With NVML, the driver's own utilisation samples (nvmlDeviceGetSamples: each the busy share of
    the ~200 ms before its timestamp on an H200), averaged over those lying within the window.
    Polling nvmlDeviceGetUtilizationRates instead (every 100 ms; the fallback) aliases with a
    limiter's run / rest periods: 1.3 s windows of one steady limited run read 49-72 where the
    driver's samples read 58.8-60.0 (bench/compute/util_probe.py; docs/benchmarks.md, 2026-11-27,
    "Where GPU-Util's spread comes from").
    The poll also reads the SM clock and the clock-event reasons (capped_fraction)."""

    def __init__(self, index):
        self.index = index
        self.samples = []  # (monotonic seconds, util %): polled
        self.raw = []      # (monotonic seconds, util %): the driver's samples, each ending at its time
        self.clocks = []   # (monotonic seconds, SM clock MHz or None); NVML source only
        self.reasons = []  # (monotonic seconds, clock-event reason mask); NVML source only
        self.source = None
        self.name = self.driver = "?"
        self._stop = threading.Event()
        self._thread = None
        self._proc = None
        self._nvml = None
        self._handle = None
        self._reasons_call = None
        self._raw_thread = None
        self._raw_seen = 0

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
        for call in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            try:
                self._reasons_call = getattr(lib, call)
                break
            except AttributeError:
                continue
        self._nvml, self._handle = lib, handle
        return True

    def start(self):
        if self._try_nvml():
            self.source = "NVML nvmlDeviceGetUtilizationRates, 100 ms"
            self._thread = threading.Thread(target=self._nvml_loop, daemon=True)
            if self._raw_supported():
                self.source = "NVML nvmlDeviceGetSamples (the driver's samples)"
                self._raw_thread = threading.Thread(target=self._raw_loop, daemon=True)
                self._raw_thread.start()
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
        mask = ctypes.c_ulonglong()
        errors = 0
        while not self._stop.is_set():
            rc = self._nvml.nvmlDeviceGetUtilizationRates(self._handle, ctypes.byref(util))
            if rc == 0:
                # SM clock too (NVML_CLOCK_SM = 1): under a power cap a saturating matmul runs at lower
                # clocks natively than under a limit, which moves throughput ratios off busy shares.
                clock = None
                if self._nvml.nvmlDeviceGetClockInfo(self._handle, ctypes.c_uint(1), ctypes.byref(mhz)) == 0:
                    clock = float(mhz.value)
                now = time.monotonic()
                self.clocks.append((now, clock))
                if self._reasons_call is not None and self._reasons_call(self._handle, ctypes.byref(mask)) == 0:
                    self.reasons.append((now, int(mask.value)))
                self.samples.append((now, float(util.gpu)))
            else:
                errors += 1
                if errors in (1, 100):
                    log(f"nvmlDeviceGetUtilizationRates returned {rc}")
            self._stop.wait(0.1)

    def _raw_supported(self):
        try:
            call = self._nvml.nvmlDeviceGetSamples
        except AttributeError:
            log("NVML has no nvmlDeviceGetSamples: GPU-Util polled every 100 ms")
            return False
        rc = self._read_raw(call)
        if rc not in (0, _NVML_ERROR_NOT_FOUND):
            log(f"nvmlDeviceGetSamples(GPU utilisation) returned {rc}: GPU-Util polled every 100 ms")
            return False
        return True

    def _read_raw(self, call):
        """Appends the driver's utilisation samples newer than the last one seen; NVML's status."""
        buf = (_NvmlSample * 1024)()
        vtype, count = ctypes.c_int(), ctypes.c_uint(len(buf))
        rc = call(self._handle, ctypes.c_int(_NVML_GPU_UTILIZATION_SAMPLES), ctypes.c_ulonglong(self._raw_seen),
                  ctypes.byref(vtype), ctypes.byref(count), buf)
        if rc == 0:
            field = _NVML_VALUE_FIELDS.get(vtype.value, "uiVal")  # utilisation samples are unsigned ints
            offset = time.time() - time.monotonic()  # the timestamps are CPU wall-clock microseconds
            for sample in sorted(buf[:count.value], key=lambda x: x.timestamp):
                if sample.timestamp > self._raw_seen:
                    self.raw.append((sample.timestamp / 1e6 - offset, float(getattr(sample.value, field))))
                    self._raw_seen = sample.timestamp
        return rc

    def _raw_loop(self):
        errors = 0
        while not self._stop.wait(0.25):
            rc = self._read_raw(self._nvml.nvmlDeviceGetSamples)
            if rc not in (0, _NVML_ERROR_NOT_FOUND):
                errors += 1
                if errors in (1, 100):
                    log(f"nvmlDeviceGetSamples returned {rc}")

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
        for thread in (self._thread, self._raw_thread):
            if thread:
                thread.join(timeout=5)
        if self._nvml:
            self._nvml.nvmlShutdown()

    def mean(self, t0, t1, wait=True):
        if not self.source:
            return None
        if self._raw_thread:
            if wait:
                self.wait_for_raw(t1)
            value = interval_mean(list(self.raw), t0, t1)
            if value is not None:
                return value
        if wait and self._proc:  # nvidia-smi output may lag
            _wait_until(lambda: any(t > t1 for t, _ in self.samples[-50:]))
        return self.polled_mean(t0, t1)

    def wait_for_raw(self, t1):
        """Waits (at most 2 s) for the driver's first sample past t1: it arrives up to a sample
        period and a read later."""
        _wait_until(lambda: self.raw and self.raw[-1][0] >= t1)

    def polled_mean(self, t0, t1):
        """The mean of the polled (or nvidia-smi) readings taken in [t0, t1]; None without any."""
        vals = [u for t, u in list(self.samples) if t0 <= t <= t1]
        return statistics.mean(vals) if vals else None

    def raw_source(self):
        """True when mean() reads the driver's samples."""
        return self._raw_thread is not None

    def clock_mean(self, t0, t1):
        vals = [c for t, c in list(self.clocks) if t0 <= t <= t1 and c is not None]
        return statistics.mean(vals) if vals else None

    def capped_fraction(self, t0, t1):
        """Fraction of the samples in [t0, t1] whose clocks were held down by power or heat; None
        without NVML's clock-event reasons."""
        vals = [m for t, m in list(self.reasons) if t0 <= t <= t1]
        return sum(1 for m in vals if m & POWER_THERMAL_REASONS) / len(vals) if vals else None

    def warn_if_busy(self):
        """Warns when the GPU is busy before the benchmark starts (call after start())."""
        time.sleep(1.0)
        idle = self.mean(time.monotonic() - 1.0, time.monotonic())
        if idle is not None and idle > 5:
            log(f"warning: GPU-Util is {idle:.0f}% before the benchmark: is something else running on it?")


# The first 0.3 s of a window still averages in the previous period in NVML's polled counter (the
# driver's samples are averaged over the window itself).
_SETTLE_S = 0.3


def util_of(sampler, res, wait=True):
    settle = 0.0 if sampler.raw_source() else _SETTLE_S
    return sampler.mean(res["t_start"] + settle, res["t_end"], wait=wait)


def clock_of(sampler, res):
    return sampler.clock_mean(res["t_start"] + _SETTLE_S, res["t_end"])


def capped_of(sampler, res):
    return sampler.capped_fraction(res["t_start"] + _SETTLE_S, res["t_end"])


# --- building and starting workloads -------------------------------------------------------------

def nvcc_build(source, binary, gpu_index, note):
    """Builds `source` into `binary` for the GPU's compute capability (sm_90 when nvidia-smi does not
    say). Returns the binary, or None with the reason logged (`note` gets the command and output)."""
    os.makedirs(os.path.dirname(binary), exist_ok=True)
    arch = "sm_90"
    try:
        q = subprocess.run(["nvidia-smi", "-i", str(gpu_index), "--query-gpu=compute_cap",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        m = re.fullmatch(r"(\d+)\.(\d+)", q.stdout.strip()) if q.returncode == 0 else None
        if m:
            arch = f"sm_{m.group(1)}{m.group(2)}"
    except (OSError, subprocess.SubprocessError):
        pass
    cmd = ["nvcc", "-O2", f"-arch={arch}", "-o", binary, source]
    note("$ " + " ".join(cmd))
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        log(f"nvcc failed ({e})")
        return None
    note(r.stdout + r.stderr)
    if r.returncode != 0:
        log(f"nvcc failed (exit {r.returncode}, see the log)")
        return None
    return binary


class Launcher:
    """Starts workload processes and keeps the log. Not thread-safe; one benchmark at a time.

    A limited process gets LD_PRELOAD=library, the limit variables and a ledger
    (CUDA_DEVICE_MEMORY_SHARED_CACHE): a fresh one per call of env_for, which the processes started
    with that environment (one container) share. A native process gets the calling shell's
    environment less the library's variables. VGPU_COMPUTE_* variables of the shell reach every
    process; `period` sets VGPU_COMPUTE_PERIOD for the limited ones, and env_for's `summary`
    LIBCUDA_LOG_LEVEL=4 for one, whose limiter then logs its summary at exit (summary_of)."""

    def __init__(self, library, logf, period=None, prefix="vgpu-compute-"):
        self.library = os.path.abspath(library)
        self.logf = logf
        self.period = period
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.ledgers = 0
        self.base_env = {k: v for k, v in os.environ.items() if not is_library_variable(k)}

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def note(self, text):
        self.logf.write(text + "\n")
        self.logf.flush()

    def env_for(self, target, soft=None, priority=None, summary=False):
        env = dict(self.base_env)
        if target is None and soft is None and priority is None:
            return env
        env["LD_PRELOAD"] = self.library
        self.ledgers += 1
        env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = os.path.join(self.tmp, f"ledger-{self.ledgers}.cache")
        if target is not None:
            env["CUDA_DEVICE_SM_LIMIT"] = str(target)
        if soft is not None:
            env["CUDA_CORE_SOFT_LIMIT"] = str(soft)
        if priority is not None:
            env["CUDA_TASK_PRIORITY"] = str(priority)
        if self.period:
            env["VGPU_COMPUTE_PERIOD"] = self.period
        if summary:
            env["LIBCUDA_LOG_LEVEL"] = "4"
        return env

    @staticmethod
    def describe_env(env):
        keys = ("LD_PRELOAD", "CUDA_DEVICE_SM_LIMIT", "CUDA_CORE_SOFT_LIMIT", "CUDA_TASK_PRIORITY",
                "CUDA_DEVICE_MEMORY_SHARED_CACHE")
        shown = " ".join(f"{k}={env[k]}" for k in keys if k in env)
        if "LD_PRELOAD" in env:
            shown += "".join(f" {k}={v}" for k, v in env.items() if k.startswith("VGPU_COMPUTE_"))
        return shown

    def run(self, cmd, env, timeout):
        """Runs one process to its end. Returns (stdout, stderr, exit status, spawn time); a process
        that could not start or ran past `timeout` gets exit status None and the reason as stderr."""
        self.note(f"$ {self.describe_env(env)} {' '.join(cmd)}")
        spawn = time.monotonic()
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return (e.stdout or "") if isinstance(e.stdout, str) else "", "timeout", None, spawn
        except OSError as e:
            return "", f"cannot start: {e}", None, spawn
        return r.stdout, r.stderr, r.returncode, spawn

    def group(self, members, timeout):
        """Starts processes together: members = [(name, cmd without --barrier, env)]. Each gets
        `--barrier DIR NAME`, warms up, creates DIR/ready.NAME and waits for DIR/go, which holds the
        CLOCK_MONOTONIC start time of the window (0.3 s after every member is ready). Returns
        {name: (stdout, stderr, exit status, spawn time)} as run() does."""
        bdir = tempfile.mkdtemp(prefix="barrier-", dir=self.tmp)
        procs = []
        for name, cmd, env in members:
            cmd = cmd + ["--barrier", bdir, name]
            self.note(f"$ {self.describe_env(env)} {' '.join(cmd)} &")
            out_f = open(os.path.join(bdir, f"{name}.out"), "w+")
            err_f = open(os.path.join(bdir, f"{name}.err"), "w+")
            try:
                proc = subprocess.Popen(cmd, env=env, stdout=out_f, stderr=err_f)
            except OSError as e:
                proc = None
                err_f.write(f"cannot start: {e}")
            procs.append((name, proc, out_f, err_f, time.monotonic()))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # every member warmed up, then all start together
            if all(os.path.exists(os.path.join(bdir, "ready." + m[0])) for m in members):
                break
            if any(p is None or p.poll() is not None for _, p, *_ in procs):
                break
            time.sleep(0.05)
        with open(os.path.join(bdir, "go.tmp"), "w") as f:
            f.write(f"{time.monotonic() + 0.3:.6f}\n")
        os.rename(os.path.join(bdir, "go.tmp"), os.path.join(bdir, "go"))
        results = {}
        for name, p, out_f, err_f, spawn in procs:
            rc = None
            if p is not None:
                try:
                    rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                    err_f.write("\ntimeout")
            out_f.seek(0)
            err_f.seek(0)
            self.note(f"[{name}]")
            results[name] = (out_f.read(), err_f.read(), rc, spawn)
            out_f.close()
            err_f.close()
        return results

    def result_of(self, stdout, stderr, rc):
        """Logs a finished process and parses its last JSON line: the dict, or {"error": why}."""
        self.note(f"exit {rc}\n--- stdout\n{stdout}\n--- stderr\n{stderr[-4000:]}")
        res = None
        lines = [l for l in stdout.splitlines() if l.startswith("{")]
        if lines:
            try:
                res = json.loads(lines[-1])
            except ValueError as e:
                res = {"error": f"bad result line: {e}"}
            if not isinstance(res, dict):
                res = {"error": "result line is not a JSON object"}
        if rc != 0:
            # a workload that explains its failure in its result line (serve.py) is quoted from it
            why = str(res["error"]) if res and res.get("error") else (
                stderr.strip().splitlines()[-1] if stderr.strip() else "")
            return {"error": (f"exit {rc}: " if rc is not None else "") + why[:200]}
        return res if res is not None else {"error": "no result line"}
