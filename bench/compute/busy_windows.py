#!/usr/bin/env python3
"""How busy a limited process kept the GPU window by window, from its VGPU_COMPUTE_TRACE: whether
a limit binds in a workload's bursts though its mean share is below it.

Usage: python3 bench/compute/busy_windows.py --library FILE (--serve-json FILE | --span T0 T1)
                                             [--windows 10,50,200,1000] [--limits 30,60,90]
                                             [--replay] [--long-ms MS]

  --library FILE    libvgpu.so's VGPU_COMPUTE_TRACE: the busy intervals the limiter measured (B)
                    and its launching threads' sleeps (S); launches (L) are counted, estimates
                    charged without a measurement (U) summed, and of its synchronisations (Y)
                    the limiter's time around the driver's wait
  --serve-json FILE bench/serving/serve.py's output (its last JSON line): the span is its token
                    window (t_start, t_end: CLOCK_MONOTONIC seconds, the trace's clock)
  --span T0 T1      or the span in seconds on CLOCK_MONOTONIC
  --windows MS,...  window lengths, milliseconds (default 10,50,200,1000)
  --limits P,...    limits, percent (default 30,60,90)
  --replay          also replay the span's busy intervals through the limiter's budget at each
                    limit (below)
  --long-ms MS      also split the span's measured intervals at MS milliseconds (below)

Prints the span's busy share (the union of B intervals in it) and the sleeps in it; per window
length, the windows' mean busy share, how many windows fall in each tenth (0-10% ... 90-100%),
and per limit P the part of the busy time that fits under P in every window:
100 x sum(min(busy, P)) / sum(busy). For a trace of a run the limit did not throttle (its busy
time as the workload wants it) that is what a limit of P enforced over such windows leaves of its
busy time; for a throttled run it says how often the limit bound.

--replay asks what a hard limit of P would leave of the run's throughput if the program were a
closed loop (everything after a launch that waits, waits with it, as a server's engine thread
does): the busy intervals, in order, are charged to a budget clock V at the limit's rate
(V += busy x 100 / P); V may lag the wall clock by at most the library's credit at that limit
(ControllerOptions: 100 ms of busy time, at most 500 ms of wall time, and at most what 250 ms at
full speed spends but at least 50 ms of wall time; none banked at the span's start) and an
interval starts no sooner than V - 2 ms (admit_ahead_ns); a delay moves everything after it. The
share printed is the span's length over its length so delayed. Runs and turns are not modelled:
alone, a run spends the same budget in one piece. For a trace taken where the limit did not bind
(a limit of 99 with VGPU_COMPUTE_LIGHT=false measures every launch and throttles nothing) it is
the expected share of a workload whose demand comes in waves, which the mean busy share alone
does not give (min(100, 100 x P / mean busy)).

--long-ms splits the measured intervals that start in the span at a length: a server's decode
steps replayed from CUDA graphs are one launch and one interval each (the matrix's serving
workload: ~5 ms), its eager launches (prefills, sampling) short ones. Printed: the long intervals'
count, mean and median length; per long interval, the short ones (how many, their milliseconds)
and the launches; the launch call's median and mean (an L record's length: the hook's entry to
the end of its bookkeeping, throttle sleeps included); and the long intervals' mean length by
how long after the end of the last sleep before them they started (does a step run slower after
a rest?). Two runs' lines side by side say where a step's busy time differs.

Only the intervals the limiter measured are B records: launches it measured lightly (charged
their estimates, VGPU_COMPUTE_LIGHT) are not, so where many were, the busy share here is low
(the exit summary, LIBCUDA_LOG_LEVEL=4, says how many launches were measured lightly).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_report import Timeline, quantile, read_library, syncs_and_unmeasured  # noqa: E402

TENTHS = 10
FULL = 1_000_000  # ppm
# The library's defaults (src/compute/controller.h, ControllerOptions).
ADMIT_AHEAD_NS = 2_000_000
MAX_CREDIT_BUSY_NS = 100_000_000
MAX_CREDIT_WALL_NS = 500_000_000
MAX_CREDIT_BURST_NS = 250_000_000
MIN_CREDIT_NS = 50_000_000


def span_of_serve(path):
    """(t0, t1) in ns from serve.py's last JSON line."""
    result = None
    with open(path) as f:
        for line in f:
            if line.startswith("{"):
                try:
                    result = json.loads(line)
                except ValueError:
                    continue
    if not result or "t_start" not in result or "t_end" not in result:
        sys.exit(f"busy_windows: {path}: no JSON line with t_start and t_end (bench/serving/serve.py's output)")
    return int(result["t_start"] * 1e9), int(result["t_end"] * 1e9)


def window_shares(timeline, t0, t1, length):
    """Busy share of each whole window of `length` ns from t0 (a partial last one is left out)."""
    return [timeline.busy_ns(t, t + length) / length for t in range(t0, t1 - length + 1, length)]


def fits_under(shares, limit):
    """Percent of the windows' busy time below `limit` percent in each window (None: no busy time)."""
    total = sum(shares)
    return 100.0 * sum(min(s, limit / 100.0) for s in shares) / total if total > 0 else None


def credit_ns(rate):
    """Controller::CreditNs: how far the budget clock may lag the wall clock at `rate` ppm."""
    burst = max(MAX_CREDIT_BURST_NS * (FULL - min(rate, FULL)) // rate, MIN_CREDIT_NS)
    return min(MAX_CREDIT_BUSY_NS * FULL // rate, MAX_CREDIT_WALL_NS, burst)


def replay(busy, t0, t1, limit):
    """Percent of the span's throughput left by a hard limit of `limit` percent, for a closed loop:
    the intervals of `busy` within [t0, t1), each charged and delayed as the module docstring says."""
    rate = round(limit * FULL / 100)
    credit = credit_ns(rate)
    clock = t0  # the budget clock V
    shift = 0
    for a, b in busy:
        a, b = max(a, t0), min(b, t1)
        if b <= a:
            continue
        start = a + shift
        clock = max(clock, start - credit)
        if clock - start > ADMIT_AHEAD_NS:
            shift += clock - ADMIT_AHEAD_NS - start
            start = clock - ADMIT_AHEAD_NS
        clock += (b - a) * FULL // rate
    return 100.0 * (t1 - t0) / (t1 - t0 + shift)


def histogram(shares):
    counts = [0] * TENTHS
    for s in shares:
        counts[min(int(s * TENTHS), TENTHS - 1)] += 1
    return counts


def report(args, out=sys.stdout):
    launches, sleeps, intervals = read_library(args.library)
    t0, t1 = span_of_serve(args.serve_json) if args.serve_json else (int(args.span[0] * 1e9), int(args.span[1] * 1e9))
    if t1 <= t0:
        sys.exit(f"busy_windows: the span {t0 / 1e9:.3f}-{t1 / 1e9:.3f} s is empty")
    timeline = Timeline([], intervals)  # the union of the B intervals
    inside = sum(1 for a, _ in launches if t0 <= a < t1)
    slept = sum(n for t, n in sleeps if t0 <= t < t1)
    print(f"span {(t1 - t0) / 1e9:.3f} s: busy {100.0 * timeline.busy_ns(t0, t1) / (t1 - t0):.1f}% "
          f"(union of {len(intervals)} measured intervals), {inside} launches, slept {slept / 1e6:.1f} ms", file=out)
    own, unmeasured = syncs_and_unmeasured(args.library, t0, t1)
    if unmeasured:
        print(f"charged without a measurement: {unmeasured / 1e6:.1f} ms ({100.0 * unmeasured / (t1 - t0):.2f}% of the span; "
              "estimates that stood for light tails, intervals of unknown start, broken events)", file=out)
    if own:
        print(f"{len(own)} synchronisations: the limiter's time around the driver's wait median "
              f"{quantile(own, 0.5) / 1e3:.1f} us, p99 {quantile(own, 0.99) / 1e3:.1f} us, mean "
              f"{sum(own) / len(own) / 1e3:.1f} us ({sum(own) / 1e6:.1f} ms in all)", file=out)
    print("| window | windows | mean busy | windows per tenth of busy (0-10% ... 90-100%) | "
          + " | ".join(f"fits under {p}" for p in args.limits) + " |", file=out)
    print("|---|---|---|---|" + "---|" * len(args.limits), file=out)
    for ms in args.windows:
        shares = window_shares(timeline, t0, t1, int(ms * 1e6))
        if not shares:
            print(f"| {ms:g} ms | 0 | – | – |" + " – |" * len(args.limits), file=out)
            continue
        fits = [fits_under(shares, p) for p in args.limits]
        print(f"| {ms:g} ms | {len(shares)} | {100.0 * sum(shares) / len(shares):.1f}% | "
              f"{' '.join(str(c) for c in histogram(shares))} | "
              + " | ".join("–" if f is None else f"{f:.1f}" for f in fits) + " |", file=out)
    if args.replay:
        print("replayed through the limiter's budget (closed loop): "
              + ", ".join(f"at {p:g} {replay(timeline.busy, t0, t1, p):.1f}% of the span's throughput"
                          for p in args.limits),
              file=out)
    if args.long_ms is not None:
        split_report(launches, sleeps, intervals, t0, t1, args.long_ms, out)


SINCE_SLEEP_MS = (1, 10, 50, 100)  # --long-ms: bins of the time since the last sleep ended


def split_report(launches, sleeps, intervals, t0, t1, long_ms, out):
    """--long-ms: the span's intervals at least long_ms long against the others (module docstring)."""
    cut = long_ms * 1e6
    inside = [(a, b) for a, b in intervals if t0 <= a < t1]
    long = [(a, b) for a, b in inside if b - a >= cut]
    short = [b - a for a, b in inside if b - a < cut]
    calls = [b - a for a, b in launches if t0 <= a < t1]
    if not long:
        print(f"intervals of {long_ms:g} ms or longer: none among {len(inside)} in the span", file=out)
        return
    lengths = [b - a for a, b in long]
    n = len(long)
    print(f"intervals of {long_ms:g} ms or longer: {n}, mean {sum(lengths) / n / 1e6:.3f} ms, "
          f"median {statistics.median(lengths) / 1e6:.3f} ms; per one of them {len(short) / n:.1f} shorter intervals "
          f"({sum(short) / n / 1e6:.3f} ms) and {len(calls) / n:.1f} launches", file=out)
    if calls:
        print(f"launch call (hook entry to the end of its bookkeeping): median {statistics.median(calls) / 1e3:.2f} us, "
              f"mean {sum(calls) / len(calls) / 1e3:.2f} us", file=out)
    ends = sorted(t + ns for t, ns in sleeps)
    bins = [[] for _ in range(len(SINCE_SLEEP_MS) + 2)]  # + no sleep before, + the last bin
    j = 0
    for a, b in long:
        while j < len(ends) and ends[j] <= a:
            j += 1
        if j == 0:
            bins[-1].append(b - a)
            continue
        since = (a - ends[j - 1]) / 1e6
        k = next((i for i, edge in enumerate(SINCE_SLEEP_MS) if since < edge), len(SINCE_SLEEP_MS))
        bins[k].append(b - a)
    names = [f"< {SINCE_SLEEP_MS[0]} ms"]
    names += [f"{lo}-{hi} ms" for lo, hi in zip(SINCE_SLEEP_MS, SINCE_SLEEP_MS[1:])]
    names += [f">= {SINCE_SLEEP_MS[-1]} ms", "no sleep before"]
    print("their mean length by the time since the last sleep ended: "
          + ", ".join(f"{name} {len(v)} x {sum(v) / len(v) / 1e6:.3f} ms" for name, v in zip(names, bins) if v),
          file=out)


def numbers(text, what):
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        sys.exit(f"busy_windows: {what} {text!r}: expected positive numbers, comma-separated")
    return values


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--library", required=True, help="the VGPU_COMPUTE_TRACE file")
    span = p.add_mutually_exclusive_group(required=True)
    span.add_argument("--serve-json", help="bench/serving/serve.py's output: its token window is the span")
    span.add_argument("--span", nargs=2, type=float, metavar=("T0", "T1"), help="the span, CLOCK_MONOTONIC seconds")
    p.add_argument("--windows", default="10,50,200,1000", help="window lengths in ms (default 10,50,200,1000)")
    p.add_argument("--limits", default="30,60,90", help="limits in percent (default 30,60,90)")
    p.add_argument("--replay", action="store_true", help="replay the busy intervals through the limiter's budget")
    p.add_argument("--long-ms", type=float, help="split the measured intervals at this length, ms (below)")
    args = p.parse_args(argv)
    if args.long_ms is not None and args.long_ms <= 0:
        sys.exit(f"busy_windows: --long-ms {args.long_ms:g}: expected a positive number of milliseconds")
    args.windows = numbers(args.windows, "--windows")
    args.limits = numbers(args.limits, "--limits")
    if any(p > 100 for p in args.limits):
        sys.exit(f"busy_windows: --limits {','.join(f'{p:g}' for p in args.limits)}: at most 100")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        report(args)
    except OSError as e:
        sys.exit(f"busy_windows: {e}")


if __name__ == "__main__":
    main()
