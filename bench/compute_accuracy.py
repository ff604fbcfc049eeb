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
GPU-Util is >= 98 all the same: the unit was timed at a higher clock than the loop ran at). A
not-saturating workload alone is judged against min(100, target / busy), what a limit leaves of
its throughput when it takes the target's share of the GPU's time. NVML GPU-Util (nvidia-smi's utilization.gpu),
read by this process (NVML via ctypes, no preload: the driver's own samples, or polled every
100 ms; nvidia-smi -lms 100 if NVML cannot be loaded), is averaged over each measurement window
as a second opinion.

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
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

from compute_common import (ROOT, TOLERANCE, Launcher, UtilSampler, check_window, clock_of, fmt, git_describe,
                            interleaved_targets, limited_runs_line, log, nvcc_build, other_compute_variables, util_of)

SPIN_SRC = os.path.join(ROOT, "bench", "compute", "spin.cu")
TORCH_WORKER = os.path.join(ROOT, "bench", "compute", "torch_workload.py")
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


def build_plan(s):
    """A list of steps: ('calibrate', wl) | ('run', wl, target or None) | ('group', scenario, wl, members).
    A member is (name, target or None, soft, priority, expected) with expected a (kind, value) check."""
    plan = []
    for wl in s.workloads:
        if WL[wl][2] == "spin":
            plan.append(("calibrate", wl))
    for i, wl in enumerate(s.workloads):
        plan += [("run", wl, t) for t in interleaved_targets(s.targets, reverse=i % 2 == 1)]
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
        self.launcher = Launcher(library, logf, period=s.period, prefix="vgpu-compute-accuracy-")
        self.out = out
        self.build_dir = build_dir
        self.sampler = sampler
        self.spin_bin = None
        self.spin_cal = {}     # wl -> {"cycles", "dev_us"}
        self.torch_cpu = {}    # wl -> cycles per µs of torch.cuda._sleep (spin fallback)
        self.init_s = {}       # wl -> longest observed start-up (spawn to ready)

    def close(self):
        self.launcher.close()

    def build_spin(self):
        self.spin_bin = nvcc_build(SPIN_SRC, os.path.join(self.build_dir, "spin"), self.sampler.index,
                                   self.launcher.note)
        if not self.spin_bin:
            log("spin workloads fall back to torch.cuda._sleep")

    def command(self, wl, calibrate):
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
        return cmd

    def timeout(self):
        return 180 + self.s.warmup + self.s.measure

    def _finish(self, wl, finished):
        proc_out, proc_err, rc, spawn = finished
        res = self.launcher.result_of(proc_out, proc_err, rc)
        if "error" in res:
            return res
        self.init_s[wl] = max(self.init_s.get(wl, 0.0), res["t_ready"] - spawn)
        if "cycles_per_us" in res and wl not in self.torch_cpu:
            self.torch_cpu[wl] = res["cycles_per_us"]
        res["util"] = util_of(self.sampler, res, wait=False)  # for the progress line; redone at the end
        return res

    def calibrate(self, wl):
        if not self.spin_bin:
            return {"skipped": "torch fallback: calibrated in the first native run"}
        cmd = [self.spin_bin, "calibrate", str(WL[wl][3])]
        self.launcher.note("$ " + " ".join(cmd))
        r = subprocess.run(cmd, env=self.launcher.base_env, capture_output=True, text=True, timeout=120)
        self.launcher.note(f"exit {r.returncode}\n{r.stdout}\n{r.stderr}")
        if r.returncode != 0:
            raise RuntimeError(f"spin calibrate {WL[wl][3]} failed: {r.stderr.strip()[-300:]}")
        cal = json.loads(r.stdout.strip().splitlines()[-1])
        self.spin_cal[wl] = cal
        return cal

    def run(self, wl, target):
        env = self.launcher.env_for(target)
        return self._finish(wl, self.launcher.run(self.command(wl, calibrate=target is None), env, self.timeout()))

    def group(self, wl, members):
        started = self.launcher.group(
            [(name, self.command(wl, calibrate=False), self.launcher.env_for(target, soft, prio))
             for name, target, soft, prio, _ in members], self.timeout())
        results = {}
        for name, finished in started.items():
            results[name] = self._finish(wl, finished)
        return results


# --- analysis and report -------------------------------------------------------------------------

def verdict(value, check):
    if value is None or check is None:
        return None
    kind, bound = check
    return abs(value - bound) <= TOLERANCE if kind == "near" else value <= bound


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
    # A native loop that leaves the GPU idle part of the time (not saturating, and not the power
    # cap's doing): a limit of P leaves it P% of the GPU's time, min(100, P / busy) of its
    # throughput (bench/compute_matrix.py's "of E").
    for row in rows:
        n = summary.get(row["wl"])
        if (row["scenario"] == "alone" and n and n["busy"] is not None and n["busy"] < MIN_NATIVE_BUSY
                and not _clock_bound(n)):
            row["of_e"] = min(100.0, row["target"] / n["busy"])
            row["check"] = ("near", row["of_e"])
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
            of_e = f" of {r['of_e']:.1f}" if r is not None and "of_e" in r else ""
            cells.append("" if r is None else
                         f"**{fmt(r.get('achieved'))}**{of_e} ({fmt(r['util'], 0)}, {fmt(r.get('clock'), 0)} MHz) "
                         f"{_result(r)}")
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
                         "a limit of P leaves it P% of the GPU's time, min(100, P / busy) of its throughput: "
                         "judged against that (\"of\" in its cells).")
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
    check_window(s.measure, s.period)

    if args.dry_run:
        print(f"plan: {len(plan)} steps, about {est / 60:.1f} min; warm-up {s.warmup} s, window {s.measure} s, "
              f"targets {s.targets}, PASS within ±{TOLERANCE:g} points")
        print(limited_runs_line(args.library, s.period))
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
        sampler.warn_if_busy()
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
              + other_compute_variables("; ")
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
