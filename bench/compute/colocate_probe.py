#!/usr/bin/env python3
"""Diagnoses co-located compute limits on a real GPU: how much throughput time-slicing between
two contexts costs by itself, and what each limiter measured (its debug summary) against the
throughput it achieved.

  colocate_probe.py --library build-gpu/libvgpu.so [--kernel-us 50] [--seconds 4] [--pairs 30,60]

Steps (each prints one line; the last lines are a table):
  1. native: one unlimited spin process alone                 -> rate R
  2. two unlimited spin processes together                    -> (rate_a + rate_b) / R
  3. limited alone at each limit of --pairs                    -> rate / R, limiter summary
  4. limited together at --pairs (separate ledgers)            -> rate / R each, limiter summary
GPU utilisation (nvidia-smi) is sampled during every step. Needs nvcc and the spin workload of
bench/compute_accuracy.py (bench/compute/spin.cu), built here into --build-dir. The GPU's settings
are never changed; every CUDA return code is checked by spin.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPIN_SRC = os.path.join(ROOT, "bench", "compute", "spin.cu")
SUMMARY = re.compile(r"compute device \d+: mode (\d+), target (\d+) ppm, measured (\d+) ppm, correction (-?\d+) ppm, "
                     r"busy ([\d.]+) ms, throttled ([\d.]+) ms, NVML share (-?[\d.]+), others busy (-?[\d.]+)")


class UtilSampler(threading.Thread):
    """nvidia-smi GPU-Util, every 200 ms, with timestamps."""

    def __init__(self, index):
        super().__init__(daemon=True)
        self.index = index
        self.samples = []
        self.stop = False

    def run(self):
        while not self.stop:
            r = subprocess.run(["nvidia-smi", "-i", str(self.index), "--query-gpu=utilization.gpu",
                                "--format=csv,noheader,nounits"], capture_output=True, text=True)
            if r.returncode == 0 and r.stdout.strip().isdigit():
                self.samples.append((time.monotonic(), int(r.stdout.strip())))
            time.sleep(0.2)

    def mean(self, t0, t1):
        v = [u for t, u in self.samples if t0 <= t <= t1]
        return sum(v) / len(v) if v else float("nan")


_LEDGERS = [0]


def spawn(args, spin, cal, limit, barrier, name, tmp):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_DEVICE", "LD_PRELOAD", "LIBCUDA"))}
    if limit is not None:
        env["LD_PRELOAD"] = os.path.abspath(args.library)
        env["CUDA_DEVICE_SM_LIMIT"] = str(limit)
        _LEDGERS[0] += 1  # a fresh ledger per process: a ledger keeps the limits it was created with
        env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = os.path.join(tmp, f"ledger-{_LEDGERS[0]}")
        env["LIBCUDA_LOG_LEVEL"] = "4"
    cmd = [spin, "run", str(cal["cycles"]), f"{cal['dev_us']:.4f}", str(args.warmup), str(args.seconds)]
    if barrier:
        cmd += ["--barrier", barrier, name]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def group(args, spin, cal, limits, tmp, util):
    bdir = tempfile.mkdtemp(dir=tmp)
    procs = [(f"p{i}", lim, spawn(args, spin, cal, lim, bdir, f"p{i}", tmp)) for i, lim in enumerate(limits)]
    while not all(os.path.exists(os.path.join(bdir, f"ready.{n}")) for n, _, _ in procs):
        if any(p.poll() is not None for _, _, p in procs):
            break
        time.sleep(0.05)
    with open(os.path.join(bdir, "go.tmp"), "w") as f:
        f.write(f"{time.monotonic() + 0.3:.6f}\n")
    os.rename(os.path.join(bdir, "go.tmp"), os.path.join(bdir, "go"))
    out = []
    for name, lim, p in procs:
        so, se = p.communicate(timeout=120 + args.seconds + args.warmup)
        if p.returncode != 0:
            sys.exit(f"spin ({name}, limit {lim}) failed: exit {p.returncode}: {se.strip()[-400:]}")
        res = json.loads([l for l in so.splitlines() if l.startswith("{")][-1])
        m = SUMMARY.search(se)
        res["summary"] = m.groups() if m else None
        res["util"] = util.mean(res["t_start"], res["t_end"])
        out.append((lim, res))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--library", required=True, help="libvgpu.so preloaded into the limited processes")
    p.add_argument("--kernel-us", type=float, default=50, help="spin kernel device time (default 50)")
    p.add_argument("--seconds", type=float, default=4, help="measurement window (default 4)")
    p.add_argument("--warmup", type=float, default=1.5, help="warm-up before the window (default 1.5)")
    p.add_argument("--pairs", default="30,60", help="the two limits run together (default 30,60)")
    p.add_argument("--gpu-index", type=int, default=0, help="nvidia-smi index for utilisation (default 0)")
    p.add_argument("--build-dir", default=os.path.join(tempfile.gettempdir(), "vgpu-colocate-probe"),
                   help="where spin is built")
    args = p.parse_args()
    limits = [int(x) for x in args.pairs.split(",")]

    os.makedirs(args.build_dir, exist_ok=True)
    spin = os.path.join(args.build_dir, "spin")
    subprocess.run(["nvcc", "-O2", "-arch=native", "-o", spin, SPIN_SRC], check=True)
    cal = json.loads(subprocess.run([spin, "calibrate", str(args.kernel_us)], capture_output=True, text=True,
                                    check=True).stdout.strip().splitlines()[-1])
    print(f"calibrated: {cal}", flush=True)

    util = UtilSampler(args.gpu_index)
    util.start()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        native = group(args, spin, cal, [None], tmp, util)[0][1]
        R = native["rate"]
        rows.append(("native alone", "-", 100.0, native["util"], None))
        print(f"native: {R:.1f} kernels/s, util {native['util']:.0f}", flush=True)
        both = group(args, spin, cal, [None, None], tmp, util)
        rows.append(("two unlimited", "-+-", 100 * sum(r["rate"] for _, r in both) / R,
                     sum(r["util"] for _, r in both) / 2, None))
        for lim in limits:
            (_, r), = group(args, spin, cal, [lim], tmp, util)
            rows.append(("alone", str(lim), 100 * r["rate"] / R, r["util"], r["summary"]))
        for lim, r in group(args, spin, cal, limits, tmp, util):
            rows.append(("together", str(lim), 100 * r["rate"] / R, r["util"], r["summary"]))
    util.stop = True

    print(f"\n{args.kernel_us:g} us spin kernels, native {R:.1f} kernels/s")
    print(f"{'run':<14} {'limit':>6} {'achieved %':>10} {'GPU-Util':>8} {'measured':>9} {'corr':>7} {'others':>7}")
    for run, lim, ach, u, s in rows:
        meas = f"{int(s[2]) / 1e4:.1f}" if s else "-"
        corr = f"{int(s[3]) / 1e4:+.1f}" if s else "-"
        oth = f"{float(s[7]):.2f}" if s else "-"
        print(f"{run:<14} {lim:>6} {ach:>10.1f} {u:>8.0f} {meas:>9} {corr:>7} {oth:>7}")


if __name__ == "__main__":
    main()
