"""Judges the vgpu-node GPU check from the job's events and the poller's scrapes.

usage: analyze.py EVENTS SAMPLES ROGUE_READY TORCH_PID
Prints result lines ("metric_latency_<n> ...", "bypass ...") and exits 1 when a requirement
failed: every allocation/free visible in /metrics within 1 s; the rogue flagged; the torch job
never flagged.
"""
import sys

TOLERANCE = 64 << 20  # allocator rounding and overhead drift; the steps are 1 GiB apart


def main():
    events = [l.split() for l in open(sys.argv[1]) if l.strip()]
    samples = []
    for l in open(sys.argv[2]):
        f = l.split()
        if len(f) >= 5 and not f[4].startswith("error"):
            samples.append((float(f[0]), float(f[1]), int(f[2]), int(f[3]), f[4]))
    rogue_pid, rogue_t = open(sys.argv[3]).read().split()
    torch_pid = sys.argv[4]
    ok = True
    baseline = None  # ledger usage right after the context existed (context + module overhead)
    for i, (event, held, t) in enumerate(events):
        held, t = int(held), float(t)
        before = [s for s in samples if s[1] <= t]
        if event == "context":
            # The context overhead is reconciled from NVML shortly after creation: take the usage
            # seen just before the first allocation as the baseline.
            nxt = float(events[i + 1][2]) if i + 1 < len(events) else t + 1
            window = [s for s in samples if t < s[0] and s[1] < nxt and s[2] >= 0]
            baseline = window[-1][2] if window else None
            print(f"context at {t:.3f}: ledger usage before the first allocation {baseline} bytes")
            continue
        want = (baseline or 0) + held
        after = [s for s in samples if s[0] >= t - 0.5]
        if event == "alloc":
            hit = next((s for s in after if s[2] >= want - TOLERANCE), None)
        else:
            hit = next((s for s in after if 0 <= s[2] <= want + TOLERANCE), None)
        if hit is None:
            print(f"metric_latency {event} {held} bytes: NOT SEEN (wanted {'>=' if event == 'alloc' else '<='} {want})")
            ok = False
            continue
        latency = max(0.0, hit[1] - t)
        print(f"metric_latency {event} held={held >> 20} MiB: ledger usage {hit[2] >> 20} MiB seen in a scrape that ended "
              f"{latency * 1000:.0f} ms after the job's synchronize")
        ok &= latency < 1.0
    flagged = [s for s in samples if rogue_pid in s[4].split(",")]
    if flagged:
        print(f"bypass rogue pid {rogue_pid} flagged in /metrics {flagged[0][1] - float(rogue_t):.2f} s after it held its memory")
    else:
        print(f"bypass rogue pid {rogue_pid}: NOT FLAGGED")
        ok = False
    if any(torch_pid in s[4].split(",") for s in samples):
        print(f"bypass: the registered torch job {torch_pid} was flagged (wrong)")
        ok = False
    else:
        print(f"bypass: the registered torch job {torch_pid} was never flagged ({len(samples)} scrapes)")
    print("RESULT", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
