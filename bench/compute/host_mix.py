#!/usr/bin/env python3
"""Launchers slower than their kernels, with expensive kernels among cheap ones, and a server's
decode step replayed as a CUDA graph, natively and under one or more builds of libvgpu.so: is the
busy time they are charged the GPU's? A diagnostic for docs/compute.md ("Uniform streams").

Usage: python3 bench/compute/host_mix.py --library LIB[,LIB2...] [--limits 60,30] [--rounds 1]
                                         [--rows mixA,mixB,mixC,graphsteps] [--warmup 1] [--seconds 3]
                                         [--binary CONCURRENCY] [--stamps] [--out DIR]

Each row is bench/compute/concurrency.cu's --steps mode (one thread, one stream, a
synchronisation after every step; built here with nvcc, or --binary): launches of --kernel-us, every
--expensive-every-th one of --expensive-us, --host-ns of host work after each launch:
  mixA  50 per step, 3 us and every 5th 40 us, 10 us of host work per launch
  mixB  50 per step, 5 us and every 10th 100 us, 8 us of host work per launch
  mixC  20 per step, 4 us and every 4th 25 us, 6 us per launch and 100 us after each step
  graphsteps  a server's decode step as a CUDA graph: one replay of a chain of 256 kernels of
        16 us per step, 500 us of host work after each (no stamps: a graph's kernels cannot
        take a slot per launch)
Each round runs every row natively, then under each library at each limit (a fresh ledger each,
LIBCUDA_LOG_LEVEL=4 for the limiter's summary). Printed per run: kernels/s as a share of the
round's native run, E (what the limit leaves of the native busy time: min(100, 100 x limit /
native GPU-Util), the matrix's "of E"), GPU-Util from the driver's samples over the window, the
limiter's own measure and its marks (of them begins) and event queries per launch. A limiter
whose share is E gives the limit exactly (GPU-Util then reads a little above its measure where
marks are dense: GPU-Util counts the marks' GPU time, the limiter does not charge it). --out
keeps host-mix.json and the log.
--stamps: every run's kernels stamp their spans on the GPU (concurrency.cu --stamps), the limited
ones trace their busy intervals (VGPU_COMPUTE_TRACE), and bench/compute/busy_truth.py holds the
two against each other: printed per run, what the GPU ran (the kernels' busy share) against
GPU-Util and the limiter's measure on the same span, and where the measure's excess lies (per
launch: between an interval's kernels, in pieces longer than events take, and at its edges).
The files stay in --out's stamps/ folder (tens of MB per run: keep --seconds short).
Never changes any GPU setting; exit status 1 when a run failed."""
import argparse
import itertools
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from compute_common import Launcher, UtilSampler, fmt, log, nvcc_build, summary_of, util_of  # noqa: E402
from compute_matrix import parse_limits  # noqa: E402
import busy_truth  # noqa: E402

ROWS = {
    "mixA": "--steps 50 --kernel-us 3 --expensive-every 5 --expensive-us 40 --host-ns 10000",
    "mixB": "--steps 50 --kernel-us 5 --expensive-every 10 --expensive-us 100 --host-ns 8000",
    "mixC": "--steps 20 --kernel-us 4 --expensive-every 4 --expensive-us 25 --host-ns 6000 --host-us 100",
    "graphsteps": "--steps 1 --kernel-us 16 --graph-branches 1 --graph-depth 256 --host-us 500",
}
UNSTAMPED = {"graphsteps"}  # rows whose kernels cannot stamp themselves (concurrency.cu --stamps)
SOURCE = os.path.join(HERE, "concurrency.cu")


def expected_share(limit, native_util):
    return None if not native_util else min(100.0, 100.0 * limit / native_util)


def per_launch(rec, key):
    return rec[key] / rec["launches"] if rec.get("launches") and key in rec else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--library", required=True, help="libvgpu.so builds, comma-separated")
    p.add_argument("--limits", default="60,30")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--binary", help="a built bench/compute/concurrency.cu (default: build it with nvcc)")
    p.add_argument("--stamps", action="store_true", help="hold the limiter's busy time against the kernels' stamps")
    p.add_argument("--out")
    args = p.parse_args()
    error = p.error
    limits = parse_limits(args.limits, "--limits", error)
    rows = [r for r in args.rows.split(",") if r]
    for r in rows:
        if r not in ROWS:
            error(f"--rows: unknown row {r!r} (rows: {', '.join(ROWS)})")
    libraries = [l for l in args.library.split(",") if l]
    for lib in libraries:
        if not os.path.isfile(lib):
            error(f"--library {lib!r}: no such file")
    if args.binary and not os.access(args.binary, os.X_OK):
        error(f"--binary {args.binary!r}: not an executable file")
    if args.rounds < 1 or args.seconds <= 0 or args.warmup < 0:
        error("--rounds must be >= 1, --seconds > 0, --warmup >= 0")
    out = args.out or os.path.join(os.getcwd(), "host-mix")
    os.makedirs(out, exist_ok=True)
    logf = open(os.path.join(out, "host-mix.log"), "w")
    launchers = [Launcher(lib, logf, prefix="vgpu-host-mix-") for lib in libraries]
    binary = args.binary or nvcc_build(SOURCE, os.path.join(out, "concurrency"), 0, launchers[0].note)
    if binary is None:
        sys.exit("host_mix: could not build bench/compute/concurrency.cu (see the log)")
    sampler = UtilSampler(0)
    sampler.start()
    results, failed = [], 0

    stamps_dir = os.path.join(out, "stamps")
    if args.stamps:
        os.makedirs(stamps_dir, exist_ok=True)
    run_numbers = itertools.count(1)  # names each run's stamps and trace

    def run(row, launcher, limit):
        env = launcher.env_for(limit, summary=True) if limit is not None else launcher.env_for(None)
        cmd = [binary, "run"] + ROWS[row].split() + ["--warmup", f"{args.warmup:g}", "--seconds", f"{args.seconds:g}"]
        trace = None
        stamped = args.stamps and row not in UNSTAMPED
        if stamped:
            name = f"{next(run_numbers)}-{row}-{limit or 'native'}"
            stamps = os.path.join(stamps_dir, name + ".stamps")
            cmd += ["--stamps", stamps]
            if limit is not None:
                trace = os.path.join(stamps_dir, name + ".trace")
                env["VGPU_COMPUTE_TRACE"] = trace
        stdout, stderr, rc, _ = launcher.run(cmd, env, args.warmup + args.seconds + 60)
        launcher.note(stdout + stderr)
        if rc != 0:
            return {"error": f"exit {rc}: {stderr.strip()[-300:]}"}
        res = json.loads(stdout.strip().splitlines()[-1])
        rec = {"rate": res["rate"], "util": util_of(sampler, res)}
        if limit is not None:
            rec.update(summary_of(stderr))
        if stamped:
            busy = busy_truth.read_library(trace)[2] if trace else None
            rec["truth"] = busy_truth.analyse(busy_truth.read_stamps(stamps), busy)
            t = rec["truth"]
            if not t["launches"]:
                log("  stamps: no launch stamped")
                return rec
            text = (f"  stamps: {t['launches']:,} launches, the kernels busy {fmt(100 * t['kernel_busy'])}% of "
                    f"{t['span_s']:.3f} s, gaps mean {fmt(t['gap_us']['mean'], 2)} us (p50 "
                    f"{fmt(t['gap_us']['p50'], 2)}, p90 {fmt(t['gap_us']['p90'], 2)})")
            if trace:
                text += (f"; measured {fmt(100 * t['measured'])}%: excess {fmt(t['excess_us'], 3)} us per launch "
                         f"(between kernels {fmt(t['excess_inner_us'], 3)}, of it in pieces > 4 us "
                         f"{fmt(t['excess_inner_long_us'], 3)}; edges {fmt(t['excess_edge_us'], 3)}), missed "
                         f"{fmt(t['missed_us'], 3)} us per launch, offset plateau {fmt(t['plateau_us'], 2)} us")
            log(text)
        return rec

    try:
        for rnd in range(args.rounds):
            for row in rows:
                native = run(row, launchers[0], None)
                results.append(dict(native, row=row, round=rnd + 1, library=None, limit=None))
                if native.get("error"):
                    failed += 1
                    log(f"{row} native: {native['error']}")
                    continue
                log(f"round {rnd + 1} {row} native: {native['rate']:,.0f} kernels/s, GPU-Util {fmt(native['util'])}")
                for launcher in launchers:
                    for limit in limits:
                        rec = run(row, launcher, limit)
                        rec.update(row=row, round=rnd + 1, library=launcher.library, limit=limit)
                        results.append(rec)
                        if rec.get("error"):
                            failed += 1
                            log(f"{row} {launcher.library} at {limit}: {rec['error']}")
                            continue
                        rec["share"] = 100.0 * rec["rate"] / native["rate"]
                        rec["expected"] = expected_share(limit, native["util"])
                        log(f"round {rnd + 1} {row} {launcher.library} at {limit}: {rec['share']:.1f} of native "
                            f"(E {fmt(rec['expected'])}), GPU-Util {fmt(rec['util'])}, limiter's measure "
                            f"{fmt(rec.get('measured_ppm', 0) / 1e4)}, {fmt(rec.get('marks_per_launch'), 3)} marks "
                            f"(begins {fmt(per_launch(rec, 'begins'), 3)}) and "
                            f"{fmt(rec.get('queries_per_launch'), 3)} queries per launch")
    finally:
        sampler.stop()
        for launcher in launchers:
            launcher.close()
    with open(os.path.join(out, "host-mix.json"), "w") as f:
        json.dump({"rows": {r: ROWS[r] for r in rows}, "results": results}, f, indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
