#!/usr/bin/env python3
"""Where a workload loses throughput under a compute limit, from two traces of one run.

Usage: python3 bench/compute/trace_report.py --bench FILE [--library FILE]
                                             (--native-rate R | --native FILE) [--min-rest-ms M]

  --bench FILE     bench/compute/concurrency.cu's --trace: each batch's completion time on the
                   GPU (K lines), the ends of its own pauses (P, --pause) and the window (W)
  --library FILE   libvgpu.so's VGPU_COMPUTE_TRACE of the same run: launches (L), sleeps of the
                   launching threads (S) and the busy intervals the limiter measured (B); its
                   charges (C) are not read here
  --native-rate R  the workload's native throughput, kernels/s; or
  --native FILE    a native run's --trace (its rate over its window)
  --min-rest-ms M  sleeps adding up to at least M ms between two launches are a rest (default 1;
                   shorter ones are waits for a full queue or another container's turn)

Prints: the window's throughput and share of native; with --library, the busy share (the union of
B intervals in the window) and the work done per busy millisecond against native, by phase of
the runs (a run starts at the first launch after a rest and ends where the next rest begins;
after it, the queued work drains), per 10 ms after a run's start, and the launcher's time per
launch inside the hook; with P lines instead (the program pausing itself), the work per 10 ms
after each pause against native. docs/compute.md, "Tracing", says how to read it.
"""
import argparse
import bisect
import statistics
import sys


def read_bench(path):
    """(completions [(t_ns, kernels)] sorted, resumes [t_ns], window (start, end) or None)."""
    completions, resumes, window = [], [], None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            p = line.split()
            if not p or p[0].startswith("#"):
                continue
            try:
                if p[0] == "K":
                    completions.append((int(float(p[1])), int(p[2])))
                elif p[0] == "P":
                    resumes.append(int(float(p[1])))
                elif p[0] == "W":
                    window = (int(float(p[1])), int(float(p[2])))
                else:
                    raise ValueError(p[0])
            except (ValueError, IndexError):
                sys.exit(f"trace_report: {path}:{n}: not a concurrency trace line: {line.strip()!r}")
    completions.sort()
    return completions, sorted(resumes), window


def read_library(path):
    """(launches [(start, end)], sleeps [(t, ns)], busy [(begin, end)]), each sorted."""
    launches, sleeps, busy = [], [], []
    with open(path) as f:
        first = f.readline()
        if not first.startswith("# vgpu compute trace 1"):
            sys.exit(f"trace_report: {path}: not a VGPU_COMPUTE_TRACE file (first line {first.strip()!r})")
        if ", 0 dropped" not in first:
            print(f"note: {path}: {first.strip()[2:]}: the run's end is missing", file=sys.stderr)
        for n, line in enumerate(f, 2):
            p = line.split()
            try:
                kind, a, b = p[0], int(p[2]), int(p[3])
            except (ValueError, IndexError):
                sys.exit(f"trace_report: {path}:{n}: not a trace record: {line.strip()!r}")
            {"L": launches, "S": sleeps, "B": busy}.get(kind, []).append((a, b))
    return sorted(launches), sorted(sleeps), sorted(busy)


def syncs_and_unmeasured(path, t0, t1):
    """A VGPU_COMPUTE_TRACE file's figures within [t0, t1) (ns), in one pass: the limiter's own
    time around each synchronisation (a Y record's hook time less the driver's wait inside), sorted,
    and the estimates charged without a measurement (U records), summed."""
    own, unmeasured = [], 0
    with open(path) as f:
        for n, line in enumerate(f, 1):
            p = line.split()
            if not p or p[0] not in ("Y", "U"):
                continue
            try:
                if p[0] == "Y":
                    entry, exit_, wait = int(p[2]), int(p[3]), int(p[4])
                    if t0 <= entry < t1:
                        own.append(exit_ - entry - wait)
                else:
                    time, ns = int(p[2]), int(p[3])
                    if t0 <= time < t1:
                        unmeasured += ns
            except (ValueError, IndexError):
                sys.exit(f"trace_report: {path}:{n}: not a {p[0]} record: {line.strip()!r}")
    return sorted(own), unmeasured


def union(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


class Timeline:
    """Kernels completed and busy time over any span, from the sorted records."""

    def __init__(self, completions, busy):
        self.times = [t for t, _ in completions]
        self.cumulative = [0]
        for _, k in completions:
            self.cumulative.append(self.cumulative[-1] + k)
        self.busy = union(busy)
        self.busy_starts = [a for a, _ in self.busy]

    def kernels(self, a, b):
        return self.cumulative[bisect.bisect_left(self.times, b)] - self.cumulative[bisect.bisect_left(self.times, a)]

    def busy_ns(self, a, b):
        total = 0
        for x, y in self.busy[max(bisect.bisect_right(self.busy_starts, a) - 1, 0):]:
            if x >= b:
                break
            total += max(0, min(y, b) - max(x, a))
        return total


def runs_of(launches, sleeps, min_rest_ns):
    """[(run start, rest start, next run start)]: a run starts at the first launch after a rest
    (sleeps adding up to min_rest_ns between two launches) and lasts until the next rest's first
    sleep; the work it queued drains until the next run starts."""
    starts = [a for a, _ in launches]
    rests = []  # (first sleep, first launch after it)
    i = 0
    while i < len(sleeps):
        t0 = sleeps[i][0]
        nxt = bisect.bisect_right(starts, t0)
        resume = starts[nxt] if nxt < len(starts) else None
        total = 0
        while i < len(sleeps) and (resume is None or sleeps[i][0] < resume):
            total += sleeps[i][1]
            i += 1
        if total >= min_rest_ns and resume is not None:
            rests.append((t0, resume))
    return [(rests[k][1], rests[k + 1][0], rests[k + 1][1]) for k in range(len(rests) - 1)]


def quantile(values, q):
    return values[min(int(q * (len(values) - 1) + 0.5), len(values) - 1)]


def report(args, out=sys.stdout):
    completions, resumes, window = read_bench(args.bench)
    if window is None or not completions:
        sys.exit(f"trace_report: {args.bench}: no window or no completions (was it written with --trace?)")
    if args.native:
        n_completions, _, n_window = read_bench(args.native)
        if n_window is None:
            sys.exit(f"trace_report: {args.native}: no window")
        n_timeline = Timeline(n_completions, [])
        native = n_timeline.kernels(*n_window) / ((n_window[1] - n_window[0]) / 1e9)
    else:
        native = args.native_rate
    if not native or native <= 0:
        sys.exit("trace_report: the native rate must be positive")
    per_ms = native / 1e3
    launches, sleeps, busy = read_library(args.library) if args.library else ([], [], [])
    tl = Timeline(completions, busy)
    w0, w1 = window
    seconds = (w1 - w0) / 1e9
    rate = tl.kernels(w0, w1) / seconds
    print(f"window {seconds:.3f} s: {rate:,.0f} kernels/s, {100 * rate / native:.1f}% of native ({native:,.0f})", file=out)

    if args.library:
        busy_w = tl.busy_ns(w0, w1)
        if busy_w <= 0:
            sys.exit(f"trace_report: {args.library}: no busy intervals in the window")
        print(f"busy {100 * busy_w / (w1 - w0):.1f}% of the window; work per busy ms {tl.kernels(w0, w1) / (busy_w / 1e6) / per_ms:.3f} of native", file=out)
        found = [r for r in runs_of(launches, sleeps, args.min_rest_ms * 1e6) if r[0] >= w0 and r[2] <= w1]
        if not found:
            print("no complete run inside the window (no rests: not throttled?)", file=out)
            return
        runs = [(a, b) for a, b, _ in found]
        next_start = [c for _, _, c in found]
        phases = {"run 0-3 ms": [0, 0], "run 3-10 ms": [0, 0], "run 10 ms-end": [0, 0], "after the run": [0, 0]}
        for (a, b), c in zip(runs, next_start):
            for name, (x, y) in (("run 0-3 ms", (a, min(a + 3_000_000, b))), ("run 3-10 ms", (min(a + 3_000_000, b), min(a + 10_000_000, b))),
                                 ("run 10 ms-end", (min(a + 10_000_000, b), b)), ("after the run", (b, c))):
                phases[name][0] += tl.kernels(x, y)
                phases[name][1] += tl.busy_ns(x, y)
        lengths = [b - a for a, b in runs]
        print(f"{len(runs)} runs of {statistics.median(lengths) / 1e6:.1f} ms (median); per phase, busy ms per run, "
              f"work per busy ms against native, native ms lost per run:", file=out)
        for name, (k, b) in phases.items():
            if b > 0:
                print(f"  {name:14s} {b / 1e6 / len(runs):7.2f} ms  {k / (b / 1e6) / per_ms:6.3f}  {round((b / 1e6 - k / per_ms) / len(runs), 2) + 0.0:6.2f}", file=out)
        profile = []
        for j in range(12):
            k = b_ns = 0
            for a, b in runs:
                x, y = a + j * 10_000_000, min(a + (j + 1) * 10_000_000, b)
                if y - x >= 1_000_000:  # a sliver at the run's end says nothing
                    k += tl.kernels(x, y)
                    b_ns += tl.busy_ns(x, y)
            if b_ns > 0:
                profile.append(f"{j * 10}-{j * 10 + 10}:{k / (b_ns / 1e6) / per_ms:.2f}")
        print("work per busy ms against native, per 10 ms after a run's start: " + " ".join(profile), file=out)
        inside = sorted(e - s for s, e in launches if any(a <= s < b for a, b in runs[:50]))
        if inside:
            print(f"launch hook + driver call inside runs: median {quantile(inside, 0.5) / 1e3:.1f} us, p99 "
                  f"{quantile(inside, 0.99) / 1e3:.1f} us, over 20 us {sum(1 for v in inside if v > 20_000)} of {len(inside)}", file=out)
    elif resumes:
        inside = [r for r in resumes if w0 <= r]
        spans = [(inside[k], inside[k + 1]) for k in range(len(inside) - 1) if inside[k + 1] <= w1]
        profile = []
        for j in range(12):
            k = n = 0
            for a, b in spans:
                x, y = a + j * 10_000_000, a + (j + 1) * 10_000_000
                if y <= b:
                    k += tl.kernels(x, y)
                    n += 1
            if n:
                profile.append(f"{j * 10}-{j * 10 + 10}:{k / n / 10 / per_ms:.2f}")
        print(f"{len(spans)} pauses; work per ms against native, per 10 ms after a pause's end: " + " ".join(profile), file=out)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", required=True)
    p.add_argument("--library")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--native-rate", type=float)
    g.add_argument("--native")
    p.add_argument("--min-rest-ms", type=float, default=1.0)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        report(args)
    except OSError as e:
        sys.exit(f"trace_report: {e}")


if __name__ == "__main__":
    main()
