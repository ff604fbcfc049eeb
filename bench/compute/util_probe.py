"""Does NVML's GPU-Util agree with the limiter's own busy time? A diagnostic for docs/compute.md.

Usage: python3 bench/compute/util_probe.py --library build-gpu/libvgpu.so [--limit 60[,90...]]
                                           [--seconds 10] [--cases matmul2,matmul,train,serving]
                                           [--repeat N] [--cpus LIST] [--out DIR]

Runs each case natively and under CUDA_DEVICE_SM_LIMIT at each --limit (with VGPU_COMPUTE_TRACE),
for --seconds each, --repeat rounds of them (native, then each limit; default 1, so that a drifting
native shows), while this process reads GPU-Util two ways. --cpus pins the cases' processes with
taskset -c (as the matrix pins its serving row, --serving-cpus). The cases: bench/compute/
torch_workload.py's (matmul2, matmul, train; the default) and serving, bench/serving/serve.py with
the concurrency matrix's arguments (requests of fixed lengths; ~10 s of set-up per run). GPU-Util:
  raw     nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES): the driver's own samples, each with
          its timestamp (the driver picks the sample period; printed)
  polled  nvmlDeviceGetUtilizationRates every 100 ms (bench/compute_matrix.py read it so until
          2026-11-27; now its fallback)
and compares them with the busy time the limiter measured (the union of the trace's B intervals)
and the time its launching threads were told to sleep (the trace's S records; threads may sleep
at once, so it can exceed 100) over the whole window, and the busy time and GPU-Util over
consecutive 1.3 s windows (the matrix's GPU-Util window), so the spread of each measure shows.
Prints a table per case; --out keeps the traces and a JSON. Reads NVML through
bench/compute_common.py's UtilSampler; never changes any GPU setting."""
import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from compute_common import UtilSampler, interval_mean  # noqa: E402
from compute_matrix import DEFAULT_SERVING_ARGS, SERVE_SCRIPT, parse_limits  # noqa: E402
from trace_report import Timeline, read_library  # noqa: E402

WORKER = os.path.join(HERE, "torch_workload.py")
CASES = {"matmul2": ["matmul", "--size", "4096", "--streams", "2"], "matmul": ["matmul"], "train": ["train"],
         "serving": None}
SETTLE_S = 0.3   # as the matrix read its polled GPU-Util: from t_start + 0.3 s
SUB_S = 1.3      # the matrix's GPU-Util window at --seconds 1.6


def raw_mean(sampler, t0, t1):
    return interval_mean(list(sampler.raw), t0, t1)


def raw_period_ms(sampler):
    ts = [t for t, _ in sampler.raw]
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    return 1000 * statistics.median(gaps) if gaps else None


def sleep_share(sleeps, t0, t1):
    """The sleeps handed out in [t0, t1] (seconds), % of it."""
    return 100.0 * sum(ns for t, ns in sleeps if t0 * 1e9 <= t < t1 * 1e9) / ((t1 - t0) * 1e9)


def busy_share(timeline, t0, t1):
    """The limiter's busy time in [t0, t1] (seconds), % of it: the union of the trace's intervals."""
    return 100.0 * timeline.busy_ns(t0 * 1e9, t1 * 1e9) / ((t1 - t0) * 1e9)


def command(case, seconds):
    if CASES[case] is None:  # serving: the matrix's arguments, then this window (the last given wins)
        return ([sys.executable, SERVE_SCRIPT] + shlex.split(DEFAULT_SERVING_ARGS)
                + ["--warmup", "2", "--seconds", str(seconds)])
    return [sys.executable, WORKER] + CASES[case][:1] + ["2", str(seconds)] + CASES[case][1:]


def run(case, args, sampler, tmp, limit, round_index=0):
    env = dict(os.environ)
    trace = None
    if limit is not None:
        name = f"{case}-{limit}" + (f"-{round_index + 1}" if args.repeat > 1 else "")
        trace = os.path.join(tmp, f"trace-{name}.txt")
        env.update(LD_PRELOAD=args.library, CUDA_DEVICE_SM_LIMIT=str(limit), VGPU_COMPUTE_TRACE=trace,
                   CUDA_DEVICE_MEMORY_SHARED_CACHE=os.path.join(tmp, f"ledger-{name}.cache"))
    cmd = command(case, args.seconds)
    if args.cpus:
        cmd = ["taskset", "-c", args.cpus] + cmd
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.seconds + 300)
    if r.returncode != 0:
        sys.exit(f"util_probe: {' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    t0, t1 = res["t_start"] + SETTLE_S, res["t_end"]
    sampler.wait_for_raw(t1)  # the driver's samples of the window's end arrive late
    out = {"rate": res["tokens_per_s"] if CASES[case] is None else res["rate"],
           "raw": raw_mean(sampler, t0, t1), "polled": sampler.polled_mean(t0, t1), "subs": []}
    timeline = None
    if trace:
        _, sleeps, busy = read_library(trace)
        timeline = Timeline([], busy)
        out["busy"], out["sleep"] = busy_share(timeline, t0, t1), sleep_share(sleeps, t0, t1)
    s = res["t_start"]
    while s + SETTLE_S + SUB_S <= t1:
        a, b = s + SETTLE_S, s + SETTLE_S + SUB_S
        out["subs"].append({"raw": raw_mean(sampler, a, b), "polled": sampler.polled_mean(a, b),
                            "busy": busy_share(timeline, a, b) if timeline is not None else None})
        s += SUB_S
    return out


def fmt(v):
    return "-" if v is None else f"{v:.1f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--library", required=True)
    p.add_argument("--limit", default="60", help="limits, comma-separated (default 60)")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--cases", default="matmul2,matmul,train")
    p.add_argument("--repeat", type=int, default=1, help="rounds of native + each limit (default 1)")
    p.add_argument("--cpus", help="pin the cases' processes to these CPUs (taskset -c LIST)")
    p.add_argument("--out")
    args = p.parse_args()
    limits = parse_limits(args.limit, "--limit", p.error)
    if 100 in limits:
        p.error("--limit: 100 is no limit; the probe compares limited runs with native ones")
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            p.error(f"--cases {c!r}: unknown; cases: {', '.join(CASES)}")
    if args.repeat < 1:
        p.error(f"--repeat {args.repeat}: at least 1")
    if args.cpus and shutil.which("taskset") is None:
        p.error("--cpus: taskset is not installed")
    if not os.path.exists(args.library):
        p.error(f"--library {args.library}: no such file")
    sampler = UtilSampler(0)
    sampler.start()
    if not sampler.raw_source():
        sys.exit("util_probe: needs NVML's nvmlDeviceGetSamples (GPU utilisation samples)")
    tmp = args.out or tempfile.mkdtemp(prefix="util-probe-")
    os.makedirs(tmp, exist_ok=True)
    results = {c: [] for c in cases}  # per case, its rounds: {"native": run, "limited": {limit: run}}
    for c in cases:
        for k in range(args.repeat):
            tag = f" (round {k + 1} of {args.repeat})" if args.repeat > 1 else ""
            print(f"== {c}: native{tag}", flush=True)
            rnd = {"native": run(c, args, sampler, tmp, None), "limited": {}}
            for limit in limits:
                print(f"== {c}: limit {limit}{tag}", flush=True)
                rnd["limited"][limit] = run(c, args, sampler, tmp, limit, k)
            results[c].append(rnd)
    sampler.stop()
    print(f"\nNVML raw sample period: median {fmt(raw_period_ms(sampler))} ms; "
          f"window {args.seconds:g} s from t_start + {SETTLE_S} s")
    print("The share is against the round's native run (the one just before); sleeps: % of the window.")
    print("| case | round | limit | share of native | busy (trace) | sleeps | GPU-Util raw | GPU-Util polled | native raw / polled |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c, rounds in results.items():
        for k, r in enumerate(rounds, 1):
            n = r["native"]
            for limit, lim in r["limited"].items():
                print(f"| {c} | {k} | {limit} | {100 * lim['rate'] / n['rate']:.1f} | {fmt(lim.get('busy'))} | "
                      f"{fmt(lim.get('sleep'))} | {fmt(lim['raw'])} | {fmt(lim['polled'])} | "
                      f"{fmt(n['raw'])} / {fmt(n['polled'])} |")
    for c, rounds in results.items():
        for k, r in enumerate(rounds, 1):
            for limit, lim in r["limited"].items():
                tag = f", round {k}" if len(rounds) > 1 else ""
                print(f"\n{c} at {limit}{tag}, consecutive {SUB_S} s windows (busy / raw / polled):")
                print("  " + "  ".join(f"{fmt(s['busy'])}/{fmt(s['raw'])}/{fmt(s['polled'])}" for s in lim["subs"]))
    if args.out:
        with open(os.path.join(args.out, "util-probe.json"), "w") as f:
            json.dump({"limits": limits, "period_ms": raw_period_ms(sampler), "results": results,
                       "raw": sampler.raw, "polled": sampler.samples}, f)


if __name__ == "__main__":
    main()
