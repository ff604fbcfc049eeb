"""How fast does the GPU's power cap act? A diagnostic for docs/compute.md ("Slices"); no vgpu.

Usage: python3 bench/compute/power_probe.py        (about 50 s; PyTorch and NVML)

bf16 8192^3 matmuls, one at a time (synchronised), in three parts:
  native   3 s continuous: rate, mean SM clock and board power (NVML, sampled every ~1 ms)
  step     1 s idle, then 1 s continuous: the SM clock and power at 0..800 ms into the load
  duty     on/off cycles of duty d (30%, 60%) with runs of B ms (2..512): rate relative to the
           native one and the mean SM clock during the runs
Prints a table last. If the throughput ratio of a duty cycle exceeds d, the rests gave the runs
power headroom (a higher clock) that the continuous loop does not have.
Never changes clocks or any GPU setting; checks every NVML return code it relies on."""
import ctypes
import statistics
import sys
import threading
import time

import torch

lib = ctypes.CDLL("libnvidia-ml.so.1")
h = ctypes.c_void_p()
for call, args in (("nvmlInit_v2", ()), ("nvmlDeviceGetHandleByIndex_v2", (ctypes.c_uint(0), ctypes.byref(h)))):
    rc = getattr(lib, call)(*args)
    if rc != 0:
        sys.exit(f"{call} returned {rc}")
samples = []  # (t, clock MHz, power W)
stop = threading.Event()


def sampler():
    mhz = ctypes.c_uint()
    mw = ctypes.c_uint()
    while not stop.is_set():
        rc1 = lib.nvmlDeviceGetClockInfo(h, ctypes.c_uint(1), ctypes.byref(mhz))
        rc2 = lib.nvmlDeviceGetPowerUsage(h, ctypes.byref(mw))
        if rc1 == 0 and rc2 == 0:
            samples.append((time.monotonic(), mhz.value, mw.value / 1000.0))
        time.sleep(0.001)


threading.Thread(target=sampler, daemon=True).start()
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    a @ b
torch.cuda.synchronize()


def window(t0, t1):
    return [s for s in list(samples) if t0 <= s[0] <= t1]


def matmuls_for(seconds):
    """Matmuls one at a time (each synchronised) for `seconds`; how many."""
    n = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        a @ b
        torch.cuda.synchronize()
        n += 1
    return n


def native(seconds):
    t0 = time.monotonic()
    n = matmuls_for(seconds)
    t1 = time.monotonic()
    w = window(t0 + 0.3, t1)
    return n / (t1 - t0), statistics.mean(s[1] for s in w), statistics.mean(s[2] for s in w)


def duty(d, burst_s, seconds):
    n = 0
    on = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        b0 = time.monotonic()
        n += matmuls_for(burst_s)
        b1 = time.monotonic()
        on.append((b0, b1))
        time.sleep((b1 - b0) * (1 - d) / d)
    t1 = time.monotonic()
    clocks = [s[1] for b0, b1 in on for s in window(b0, b1)]
    power = [s[2] for s in window(t0, t1)]
    return n / (t1 - t0), (statistics.mean(clocks) if clocks else float("nan")), statistics.mean(power)


r0, c0, p0 = native(3.0)
print(f"native: {r0:.1f} matmuls/s, SM {c0:.0f} MHz, {p0:.0f} W", flush=True)
# step response: idle 1 s, then 1 s continuous
time.sleep(1.0)
s0 = time.monotonic()
native(1.0)
trace = [(round((t - s0) * 1000), c, p) for t, c, p in window(s0 - 0.01, s0 + 1.0)]
for ms in (0, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 800):
    near = min(trace, key=lambda x: abs(x[0] - ms))
    print(f"  step t={near[0]:4d} ms: SM {near[1]} MHz, {near[2]:.0f} W")
rows = []
for d in (0.3, 0.6):
    for burst_ms in (2, 8, 32, 128, 512):
        secs = 3.0 if burst_ms < 128 else 5.0
        r, c, p = duty(d, burst_ms / 1000.0, secs)
        rows.append((d, burst_ms, r, c, p))
        print(f"duty {d:.1f} burst {burst_ms:4d} ms: {r:.1f} matmuls/s ratio {100 * r / r0:.1f}%, "
              f"SM in bursts {c:.0f} MHz, mean {p:.0f} W", flush=True)
r1, c1, p1 = native(3.0)
print(f"native again: {r1:.1f} matmuls/s, SM {c1:.0f} MHz, {p1:.0f} W")
stop.set()
print("| duty | burst ms | ratio vs mean native | SM MHz in bursts | W |")
for d, bm, r, c, p in rows:
    print(f"| {int(d * 100)} | {bm} | {200 * r / (r0 + r1):.1f} | {c:.0f} | {p:.0f} |")
