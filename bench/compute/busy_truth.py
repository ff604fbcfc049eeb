#!/usr/bin/env python3
"""A limiter's busy time held against what the GPU ran: the kernels' own stamps of the global timer
(bench/compute/concurrency.cu --steps --stamps) and the busy intervals the limiter measured
(libvgpu.so's VGPU_COMPUTE_TRACE, B records) of one run.

Usage: python3 bench/compute/busy_truth.py --stamps FILE [--trace FILE] [--chunk-ms 50]
                                           [--search-us 60]

Prints one JSON line:
  launches, span_s       the stamped launches (those of the steps that started inside the window)
                         and the GPU time from the first one's start to the last one's end
  kernel_busy            the union of the kernels' spans over span_s: what the GPU ran
  gap_us                 between one kernel's end and the next one's start: mean, p50, p90, p99
                         (a kernel that starts before the previous one ended counts 0)
With --trace, on the same span (the stamps put on CLOCK_MONOTONIC per chunk of --chunk-ms: the
offset within --search-us of the stamps' own bound that lays the kernels best inside the busy
intervals, the middle of the offsets that do equally well):
  measured               the union of the B intervals over span_s: what the limiter counted
  excess_us, missed_us   per launch: busy time outside every kernel, kernel time outside every
                         busy interval
  excess_inner_us        per launch: the excess between two kernels of one busy interval (idle
                         gaps it could not cut out, and whatever ran between the kernels: the
                         limiter's events), and of it excess_inner_long_us in pieces longer than
                         --long-gap-us (default 4: longer than events between queued kernels take)
  excess_edge_us         per launch: the excess before an interval's first kernel and after its
                         last (an idle start's begin, a mark's own time)
  plateau_us             how far the offset could move without changing the overlap (the first
                         chunk's); the split between inner and edge excess is exact only for
                         intervals whose kernels all lie inside them
  intervals              the busy intervals (merged) on the span
Needs no GPU: it reads files. host_mix.py --stamps runs it on every run."""
import argparse
import bisect
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from trace_report import read_library, union  # noqa: E402


def read_stamps(path):
    """(offset bounds [(low, high)], kernels [(start, end, expensive)] in launch order)."""
    offsets, kernels = [], []
    with open(path) as f:
        first = f.readline()
        if not first.startswith("# concurrency stamps 1"):
            sys.exit(f"busy_truth: {path}: not a --stamps file (first line {first.strip()!r})")
        for n, line in enumerate(f, 2):
            p = line.split()
            try:
                if p[0] == "O":
                    offsets.append((int(p[1]), int(p[2])))
                elif p[0] == "k":
                    kernels.append((int(p[1]), int(p[2]), p[3] == "1"))
                else:
                    raise ValueError(p[0])
            except (ValueError, IndexError):
                sys.exit(f"busy_truth: {path}:{n}: not a stamps line: {line.strip()!r}")
    if not offsets:
        sys.exit(f"busy_truth: {path}: no offset line")
    for s, e, _ in kernels:
        if e < s or s == 0:
            sys.exit(f"busy_truth: {path}: a kernel without both stamps ({s}, {e})")
    return offsets, kernels


def quantile(values, q):
    return values[min(int(q * (len(values) - 1) + 0.5), len(values) - 1)] if values else None


def overlap(a, b, shift):
    """Length of the intersection of two sorted lists of disjoint intervals, b moved by shift."""
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0] + shift)
        hi = min(a[i][1], b[j][1] + shift)
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1] + shift:
            i += 1
        else:
            j += 1
    return total


def best_shift(busy, kernels, center, radius, step):
    """(shift, plateau width): among the shifts in [center - radius, center + radius], the one
    whose overlap of the kernels with the busy intervals is the largest, or the middle of the run
    of neighbouring shifts that do as well (within 0.01% of the kernels' time)."""
    shifts = list(range(center - radius, center + radius + 1, step))
    scores = [overlap(busy, kernels, s) for s in shifts]
    best = max(range(len(shifts)), key=lambda k: scores[k])
    tolerance = 0.0001 * sum(e - s for s, e in kernels)
    lo = hi = best
    while lo > 0 and scores[lo - 1] >= scores[best] - tolerance:
        lo -= 1
    while hi + 1 < len(shifts) and scores[hi + 1] >= scores[best] - tolerance:
        hi += 1
    return shifts[(lo + hi) // 2], shifts[hi] - shifts[lo]


def subtract(intervals, minus):
    """The parts of sorted disjoint `intervals` outside sorted disjoint `minus`, with for each piece
    the index of the interval it came from."""
    out, j = [], 0
    for k, (a, b) in enumerate(intervals):
        while j < len(minus) and minus[j][1] <= a:
            j += 1
        cur, m = a, j
        while m < len(minus) and minus[m][0] < b:
            if minus[m][0] > cur:
                out.append((cur, minus[m][0], k))
            cur = max(cur, minus[m][1])
            m += 1
        if cur < b:
            out.append((cur, b, k))
    return out


def analyse(stamps, trace=None, chunk_ms=50.0, search_us=60.0, long_gap_us=4.0):
    offsets, launched = stamps
    if not launched:
        return {"launches": 0}
    spans = [(s, e) for s, e, _ in launched]
    kernels = union(spans)
    first, last = kernels[0][0], kernels[-1][1]
    span = last - first
    gaps = sorted(max(0, launched[i + 1][0] - launched[i][1]) for i in range(len(launched) - 1))
    res = {
        "launches": len(launched), "span_s": span / 1e9,
        "kernel_busy": sum(b - a for a, b in kernels) / span if span > 0 else None,
        "gap_us": {"mean": sum(gaps) / len(gaps) / 1e3 if gaps else None,
                   **{f"p{int(q * 100)}": (quantile(gaps, q) / 1e3 if gaps else None) for q in (0.5, 0.9, 0.99)}},
    }
    if trace is None:
        return res
    busy_all = union(trace)
    busy_starts = [a for a, _ in busy_all]
    # Per chunk of kernels: the offset onto CLOCK_MONOTONIC; the first chunk searched around the
    # stamps' bound, the next ones around the one before (the clocks drift slowly).
    low, high = offsets[0]
    center = (low + high) // 2
    radius = int(search_us * 1e3)
    chunk_ns = int(chunk_ms * 1e6)
    placed, plateau = [], None
    i = 0
    while i < len(kernels):
        j = i
        while j < len(kernels) and kernels[j][0] < kernels[i][0] + chunk_ns:
            j += 1
        chunk = kernels[i:j]
        lo = chunk[0][0] + center - radius - 10_000
        hi = chunk[-1][1] + center + radius + 10_000
        k0, k1 = max(bisect.bisect_left(busy_starts, lo) - 1, 0), bisect.bisect_left(busy_starts, hi)
        busy = [(max(a, lo), min(b, hi)) for a, b in busy_all[k0:k1] if b > lo and a < hi]
        if busy:
            center, width = best_shift(busy, chunk, center, radius, 250)
            if plateau is None:
                plateau = width
            radius = 3_000
        placed.extend((a + center, b + center) for a, b in chunk)
        i = j
    w0, w1 = placed[0][0], placed[-1][1]
    busy = [(max(a, w0), min(b, w1)) for a, b in busy_all if b > w0 and a < w1]
    excess = subtract(busy, placed)
    missed = subtract(placed, busy)
    # An excess piece is inner when kernels lie on both sides of it inside its busy interval.
    inner = long_inner = edge = 0
    starts = [a for a, _ in placed]
    for a, b, k in excess:
        ba, bb = busy[k]
        before = bisect.bisect_left(starts, a) - 1  # the last kernel starting before the piece
        has_before = before >= 0 and placed[before][1] > ba
        after = bisect.bisect_left(starts, b)
        has_after = after < len(placed) and placed[after][0] < bb
        if has_before and has_after:
            inner += b - a
            if b - a > long_gap_us * 1e3:
                long_inner += b - a
        else:
            edge += b - a
    n = len(launched)
    res.update({
        "measured": sum(b - a for a, b in busy) / span if span > 0 else None,
        "excess_us": sum(b - a for a, b, _ in excess) / n / 1e3,
        "missed_us": sum(b - a for a, b, _ in missed) / n / 1e3,
        "excess_inner_us": inner / n / 1e3, "excess_inner_long_us": long_inner / n / 1e3,
        "excess_edge_us": edge / n / 1e3,
        "plateau_us": plateau / 1e3 if plateau is not None else None,
        "intervals": len(busy),
    })
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stamps", required=True, help="concurrency.cu --stamps output")
    p.add_argument("--trace", help="libvgpu.so's VGPU_COMPUTE_TRACE of the same run (its B records)")
    p.add_argument("--chunk-ms", type=float, default=50.0, help="kernels placed per chunk of this much GPU time")
    p.add_argument("--search-us", type=float, default=60.0,
                   help="the first chunk's offset is searched this far around the stamps' own bound")
    p.add_argument("--long-gap-us", type=float, default=4.0,
                   help="excess pieces between kernels longer than this are counted apart")
    args = p.parse_args()
    if args.chunk_ms <= 0 or args.search_us <= 0 or args.long_gap_us < 0:
        p.error("--chunk-ms and --search-us must be > 0, --long-gap-us >= 0")
    for path in (args.stamps, args.trace):
        if path and not os.path.isfile(path):
            p.error(f"{path!r}: no such file")
    busy = read_library(args.trace)[2] if args.trace else None
    print(json.dumps(analyse(read_stamps(args.stamps), busy, args.chunk_ms, args.search_us, args.long_gap_us)))


if __name__ == "__main__":
    main()
