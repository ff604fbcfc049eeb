"""Judges the vgpu-node GPU check from the job's events and the poller's scrapes.

usage: analyze.py EVENTS SAMPLES ROGUE_READY TORCH_PID

For each allocation or free of the job (events 1.5 s apart), the ledger usage /metrics reports
must change by the bytes allocated / freed, relative to the steady level of the previous step
(measured 0.3..1.3 s after the previous event, so context overhead that NVML reconciliation adds
along the way does not matter), and the first scrape showing the change must end less than 1 s
after the job's own timestamp (taken after torch.cuda.synchronize()). Also: the rogue process is
flagged, the registered job never is. Exit 1 when a requirement failed.
"""
import sys

TOLERANCE = 64 << 20  # allocator rounding and overhead drift; the steps are 1 GiB apart


def main():
    events = [(e, int(b), float(t)) for e, b, t in (l.split() for l in open(sys.argv[1]) if l.strip())]
    samples = []
    for l in open(sys.argv[2]):
        f = l.split()
        if len(f) >= 5 and not f[4].startswith("error"):
            samples.append((float(f[0]), float(f[1]), int(f[2]), int(f[3]), f[4]))
    rogue_pid, rogue_t = open(sys.argv[3]).read().split()
    torch_pid = sys.argv[4]
    ok = True

    def steady(t):  # the ledger level while the job holds what it had at time t
        window = [s[2] for s in samples if t + 0.3 <= s[0] and s[1] <= t + 1.3 and s[2] >= 0]
        return window[-1] if window else None

    for i in range(1, len(events)):
        event, held, t = events[i]
        before = steady(events[i - 1][2])
        delta = held - events[i - 1][1]
        if before is None:
            print(f"{event} {held >> 20} MiB: no steady level before it")
            ok = False
            continue
        want = before + delta
        after = [s for s in samples if s[1] >= t - 0.5 and s[2] >= 0]
        if delta >= 0:
            hit = next((s for s in after if s[2] >= want - TOLERANCE), None)
        else:
            hit = next((s for s in after if s[2] <= want + TOLERANCE), None)
        if hit is None:
            print(f"metric_latency {event} {delta >> 20:+} MiB: NOT SEEN (level before {before >> 20} MiB)")
            ok = False
            continue
        latency = max(0.0, hit[1] - t)
        print(f"metric_latency {event} {delta >> 20:+} MiB (job holds {held >> 20} MiB): ledger usage {before >> 20} -> "
              f"{hit[2] >> 20} MiB, in a scrape that ended {latency * 1000:.0f} ms after the job's synchronize")
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
        print(f"bypass: the registered torch job {torch_pid} was never flagged ({len(samples)} scrapes at 20 Hz)")
    print("RESULT", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
