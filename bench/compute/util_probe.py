"""Does NVML's GPU-Util agree with the limiter's own busy time? A diagnostic for docs/compute.md.

Usage: python3 bench/compute/util_probe.py --library build-gpu/libvgpu.so [--limit 60[,90...]]
                                           [--seconds 10] [--cases matmul2,matmul,train,serving]
                                           [--out DIR]

Runs each case natively and under CUDA_DEVICE_SM_LIMIT at each --limit (with VGPU_COMPUTE_TRACE),
for --seconds each, while this process reads GPU-Util two ways. The cases: bench/compute/
torch_workload.py's (matmul2, matmul, train; the default) and serving, bench/serving/serve.py with
the concurrency matrix's arguments (requests of fixed lengths; ~10 s of set-up per run). GPU-Util:
  raw     nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES): the driver's own samples, each with
          its timestamp (the driver picks the sample period; printed)
  polled  nvmlDeviceGetUtilizationRates every 100 ms (bench/compute_matrix.py read it so until
          2026-11-27; now its fallback)
and compares them with the busy time the limiter measured (the union of the trace's B intervals)
over the whole window and over consecutive 1.3 s windows (the matrix's GPU-Util window), so the
spread of each measure shows. Prints a table per case; --out keeps the traces and a JSON.
Reads NVML through bench/compute_common.py's UtilSampler; never changes any GPU setting."""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

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


def busy_share(timeline, t0, t1):
    """The limiter's busy time in [t0, t1] (seconds), % of it: the union of the trace's intervals."""
    return 100.0 * timeline.busy_ns(t0 * 1e9, t1 * 1e9) / ((t1 - t0) * 1e9)


def command(case, seconds):
    if CASES[case] is None:  # serving: the matrix's arguments, then this window (the last given wins)
        return ([sys.executable, SERVE_SCRIPT] + shlex.split(DEFAULT_SERVING_ARGS)
                + ["--warmup", "2", "--seconds", str(seconds)])
    return [sys.executable, WORKER] + CASES[case][:1] + ["2", str(seconds)] + CASES[case][1:]


def run(case, args, sampler, tmp, limit):
    env = dict(os.environ)
    trace = None
    if limit is not None:
        trace = os.path.join(tmp, f"trace-{case}-{limit}.txt")
        env.update(LD_PRELOAD=args.library, CUDA_DEVICE_SM_LIMIT=str(limit), VGPU_COMPUTE_TRACE=trace,
                   CUDA_DEVICE_MEMORY_SHARED_CACHE=os.path.join(tmp, f"ledger-{case}-{limit}.cache"))
    cmd = command(case, args.seconds)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.seconds + 300)
    if r.returncode != 0:
        sys.exit(f"util_probe: {' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    time.sleep(1.5)  # the driver's samples of the window's end arrive late
    t0, t1 = res["t_start"] + SETTLE_S, res["t_end"]
    out = {"rate": res["tokens_per_s"] if CASES[case] is None else res["rate"],
           "raw": raw_mean(sampler, t0, t1), "polled": sampler.polled_mean(t0, t1), "subs": []}
    timeline = Timeline([], read_library(trace)[2]) if trace else None
    if timeline is not None:
        out["busy"] = busy_share(timeline, t0, t1)
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
    p.add_argument("--out")
    args = p.parse_args()
    limits = parse_limits(args.limit, "--limit", p.error)
    if 100 in limits:
        p.error("--limit: 100 is no limit; the probe compares limited runs with native ones")
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            p.error(f"--cases {c!r}: unknown; cases: {', '.join(CASES)}")
    if not os.path.exists(args.library):
        p.error(f"--library {args.library}: no such file")
    sampler = UtilSampler(0)
    sampler.start()
    if not sampler.raw_source():
        sys.exit("util_probe: needs NVML's nvmlDeviceGetSamples (GPU utilisation samples)")
    tmp = args.out or tempfile.mkdtemp(prefix="util-probe-")
    os.makedirs(tmp, exist_ok=True)
    results = {}
    for c in cases:
        print(f"== {c}: native", flush=True)
        results[c] = {"native": run(c, args, sampler, tmp, None), "limited": {}}
        for limit in limits:
            print(f"== {c}: limit {limit}", flush=True)
            results[c]["limited"][limit] = run(c, args, sampler, tmp, limit)
    sampler.stop()
    print(f"\nNVML raw sample period: median {fmt(raw_period_ms(sampler))} ms; "
          f"window {args.seconds:g} s from t_start + {SETTLE_S} s")
    print("| case | limit | share of native | busy (trace) | GPU-Util raw | GPU-Util polled | native raw / polled |")
    print("|---|---|---|---|---|---|---|")
    for c, r in results.items():
        n = r["native"]
        for limit, lim in r["limited"].items():
            print(f"| {c} | {limit} | {100 * lim['rate'] / n['rate']:.1f} | {fmt(lim.get('busy'))} | "
                  f"{fmt(lim['raw'])} | {fmt(lim['polled'])} | {fmt(n['raw'])} / {fmt(n['polled'])} |")
    for c, r in results.items():
        for limit, lim in r["limited"].items():
            print(f"\n{c} at {limit}, consecutive {SUB_S} s windows (busy / raw / polled):")
            print("  " + "  ".join(f"{fmt(s['busy'])}/{fmt(s['raw'])}/{fmt(s['polled'])}" for s in lim["subs"]))
    if args.out:
        with open(os.path.join(args.out, "util-probe.json"), "w") as f:
            json.dump({"limits": limits, "period_ms": raw_period_ms(sampler), "results": results,
                       "raw": sampler.raw, "polled": sampler.samples}, f)


if __name__ == "__main__":
    main()
