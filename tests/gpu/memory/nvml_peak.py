#!/usr/bin/env python3
"""The outside observer of the real-GPU memory checks: samples, from a process WITHOUT
libvgpu.so, how much device memory NVML attributes to the processes under test, about every
millisecond, and prints the peak.

    nvml_peak.py [--interval-ms 1] [--gpus all|0,1] -- command [args...]
        runs the command in a new session and watches every process of that session (children
        included, unless they start sessions of their own); exits with the command's status.
    nvml_peak.py [--interval-ms 1] [--gpus ...] --pids 123,456 [--seconds S]
        watches the given processes until they are all gone (or S seconds).
    --every-new    watch every process that appears on the GPU after the start instead of the
        command's session (for a GPU the check has to itself: no /proc scans, so it samples faster
        and never misses a process that started between two scans)
    --priority N   once the command runs, lowers the sampler's own nice value by N (root only;
        otherwise a note and the sampler runs as it was): with 32 processes x 4 threads busy on 16
        CPUs it competes with them for a CPU between its NVML calls. The command keeps the nice
        value it was started with.
    --trace FILE   also writes every change of a watched GPU's per-process figure to FILE:
        "<CLOCK_MONOTONIC ns> gpu=<i> pid_bytes=<n> device_used=<n>", for lining samples up with
        a program's own timestamps (time.monotonic_ns() shares the clock).

Output, after the command's own output, one line per watched GPU:
    nvml_peak gpu=<physical index> uuid=<GPU-...> peak_bytes=<n> peak_mib=<x> method=<pid|device>
              pid_peak_bytes=<n> device_delta_peak_bytes=<n> baseline_used_bytes=<n> samples=<n>
peak_bytes is the per-process figure (the sum over the watched processes, the same figure as
nvidia-smi's process list) when NVML reported any watched process on that GPU, else the rise of
the device's used memory over its value before the command started (method=device; meaningful
on a machine with no other GPU users).

NVML is used through ctypes (libnvidia-ml.so.1). nvmlDeviceGetComputeRunningProcesses_v3 takes
nvmlProcessInfo_t {unsigned int pid; unsigned long long usedGpuMemory; unsigned int
gpuInstanceId; unsigned int computeInstanceId;} = 24 bytes with natural alignment.
"""
import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

NVML_SUCCESS = 0
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_VALUE_NOT_AVAILABLE_ULL = 0xFFFFFFFFFFFFFFFF


def reexec_without_vgpu():
    """The observer must see the driver's own figures: never run with libvgpu.so preloaded."""
    preload = os.environ.get("LD_PRELOAD", "")
    if "vgpu" in preload:
        env = dict(os.environ)
        kept = [p for p in preload.replace(":", " ").split() if "vgpu" not in p]
        if kept:
            env["LD_PRELOAD"] = " ".join(kept)
        else:
            env.pop("LD_PRELOAD")
        os.execve(sys.executable, [sys.executable] + sys.argv, env)


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_t (v2/v3 layout)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class ProcessInfoV1(ctypes.Structure):  # nvmlProcessInfo_v1_t
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


assert ctypes.sizeof(ProcessInfo) == 24 and ctypes.sizeof(ProcessInfoV1) == 16


class Nvml:
    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.check(self.lib.nvmlInit_v2(), "nvmlInit_v2")
        count = ctypes.c_uint(0)
        self.check(self.lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2")
        self.handles = []
        for i in range(count.value):
            h = ctypes.c_void_p()
            self.check(self.lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)), "nvmlDeviceGetHandleByIndex_v2")
            self.handles.append(h)
        # Newest process-list entry point this driver has (v3, v2: 24-byte entries; v1: 16).
        self.proc_fn, self.proc_type = None, ProcessInfo
        for name, typ in (("nvmlDeviceGetComputeRunningProcesses_v3", ProcessInfo),
                          ("nvmlDeviceGetComputeRunningProcesses_v2", ProcessInfo),
                          ("nvmlDeviceGetComputeRunningProcesses", ProcessInfoV1)):
            fn = getattr(self.lib, name, None)
            if fn is not None:
                self.proc_fn, self.proc_type = fn, typ
                break
        self.capacity = 64

    @staticmethod
    def check(rc, what):
        if rc != NVML_SUCCESS:
            raise RuntimeError(f"{what} failed with NVML error {rc}")

    def count(self):
        return len(self.handles)

    def uuid(self, i):
        buf = ctypes.create_string_buffer(96)
        self.check(self.lib.nvmlDeviceGetUUID(self.handles[i], buf, 96), "nvmlDeviceGetUUID")
        return buf.value.decode()

    def used(self, i):
        m = Memory()
        self.check(self.lib.nvmlDeviceGetMemoryInfo(self.handles[i], ctypes.byref(m)), "nvmlDeviceGetMemoryInfo")
        return m.used

    def processes(self, i):
        """[(pid, used bytes or None)] of compute processes on GPU i; [] when unsupported."""
        if self.proc_fn is None:
            return []
        while True:
            n = ctypes.c_uint(self.capacity)
            arr = (self.proc_type * self.capacity)()
            rc = self.proc_fn(self.handles[i], ctypes.byref(n), arr)
            if rc == NVML_ERROR_INSUFFICIENT_SIZE:
                self.capacity *= 2
                continue
            if rc != NVML_SUCCESS:
                return []
            out = []
            for k in range(n.value):
                used = arr[k].usedGpuMemory
                out.append((arr[k].pid, None if used == NVML_VALUE_NOT_AVAILABLE_ULL else used))
            return out


def session_members(sid):
    """Pids of live processes in session sid (from /proc)."""
    members = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == sid:  # field 6 (session); fields[] starts at field 3 (state)
                members.add(int(entry))
        except (OSError, ValueError):
            continue
    return members


def main():
    reexec_without_vgpu()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval-ms", type=float, default=1.0)
    ap.add_argument("--gpus", default="all", help="physical NVML indices to watch, or 'all'")
    ap.add_argument("--pids", default="", help="comma-separated pids to watch instead of running a command")
    ap.add_argument("--seconds", type=float, default=0, help="with --pids: stop after this long")
    ap.add_argument("--trace", default="", help="write each change of the per-process figure to this file")
    ap.add_argument("--every-new", action="store_true",
                    help="watch every process that appears on the GPU after the start (no session scans)")
    ap.add_argument("--priority", type=int, default=0,
                    help="lower the sampler's own nice value by this much once the command runs (root)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if bool(command) == bool(args.pids):
        ap.error("give either a command (after --) or --pids")

    nvml = Nvml()
    gpus = list(range(nvml.count())) if args.gpus == "all" else [int(g) for g in args.gpus.split(",")]
    baseline = {g: min(nvml.used(g) for _ in range(5)) for g in gpus}
    present_before = {pid for g in gpus for pid, _ in nvml.processes(g)}
    pid_peak = {g: 0 for g in gpus}
    delta_peak = {g: 0 for g in gpus}
    seen_pid = {g: False for g in gpus}
    samples = 0
    trace = open(args.trace, "w") if args.trace else None
    last_traced = {g: None for g in gpus}

    child = None
    watched = set()
    sid = None
    if command:
        child = subprocess.Popen(command, start_new_session=True)
        sid = child.pid

        def stop(signum, _frame):  # e.g. timeout(1): take the command's whole session along
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except OSError:
                pass
            sys.exit(128 + signum)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        watched = {child.pid}
    else:
        watched = {int(p) for p in args.pids.split(",") if p}
    if args.priority > 0:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) - args.priority)
        except OSError as e:
            print(f"nvml_peak: --priority {args.priority}: cannot raise the sampler's priority ({e}); "
                  "sampling at the nice value it has", file=sys.stderr)
    started = time.monotonic()
    last_scan = 0.0
    interval = args.interval_ms / 1000.0

    def sample():
        nonlocal samples
        samples += 1
        for g in gpus:
            used = nvml.used(g)
            delta_peak[g] = max(delta_peak[g], used - baseline[g])
            total = 0
            for pid, pused in nvml.processes(g):
                mine = (pid not in present_before) if args.every_new else (pid in watched)
                if mine and pused is not None:
                    seen_pid[g] = True
                    total += pused
            pid_peak[g] = max(pid_peak[g], total)
            if trace is not None and total != last_traced[g]:
                trace.write(f"{time.monotonic_ns()} gpu={g} pid_bytes={total} device_used={used}\n")
                last_traced[g] = total

    while True:
        now = time.monotonic()
        if sid is not None and not args.every_new and now - last_scan > 0.02:  # the command's session
            watched |= session_members(sid)
            last_scan = now
        sample()
        if child is not None:
            if child.poll() is not None:
                break
        else:
            alive = [p for p in watched if os.path.exists(f"/proc/{p}")]
            if not alive or (args.seconds and now - started > args.seconds):
                break
        spare = interval - (time.monotonic() - now)  # a slow NVML call is the interval already
        if spare > 0:
            time.sleep(spare)
    sample()
    if trace is not None:
        trace.close()
    sys.stdout.flush()
    for g in gpus:
        method = "pid" if seen_pid[g] else "device"
        peak = pid_peak[g] if seen_pid[g] else max(delta_peak[g], 0)
        print(f"nvml_peak gpu={g} uuid={nvml.uuid(g)} peak_bytes={peak} peak_mib={peak / 2**20:.1f} "
              f"method={method} pid_peak_bytes={pid_peak[g]} device_delta_peak_bytes={max(delta_peak[g], 0)} "
              f"baseline_used_bytes={baseline[g]} samples={samples}", flush=True)
    if child is not None:
        rc = child.returncode
        sys.exit(rc if rc >= 0 else 128 - rc)


if __name__ == "__main__":
    main()
