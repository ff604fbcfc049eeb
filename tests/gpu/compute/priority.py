#!/usr/bin/env python3
"""Priority on a real GPU: a low-priority container yields within 100 ms of a high-priority one
starting, and recovers after it stops.

Usage: python3 tests/gpu/compute/priority.py --library build-gpu/libvgpu.so [--out DIR]

Two processes under libvgpu.so with separate ledgers and one board (VGPU_BOARD in a temp dir):
  low   CUDA_DEVICE_SM_LIMIT=60 (default priority 1), runs 6 s
  high  CUDA_TASK_PRIORITY=0, no limit, starts 2 s later and runs 2 s
Each runs a loop of ~2 ms spin kernels (torch.cuda._sleep) with an event per kernel (at most 10
in flight, flow control through events, no device synchronisation),
and reports when each batch completed on the GPU's timeline (events, anchored to CLOCK_MONOTONIC
by a synchronised start event). The low process's share per 100 ms window = batch GPU time
completed in the window / 100 ms.

Checks (PASS/FAIL, exit 1 on a FAIL):
  before   low's share over [start + 0.5 s, high start] is 60 +- 3
  yield    low's share in every 100 ms window from high start + 100 ms to high end is <= 5
  recover  low's share over [high end + 0.5 s, low end] is 60 +- 3
Prints a table last; writes priority.md and priority.json to --out when given.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

WORKER = r"""
import json, sys, time, torch
seconds, delay = float(sys.argv[1]), float(sys.argv[2])
time.sleep(delay)  # before any GPU work: a priority-0 process's first kernel already makes others yield
torch.cuda.init()
# cycles of torch.cuda._sleep per ms, measured with events
a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
torch.cuda._sleep(1000000); torch.cuda.synchronize()
a.record(); torch.cuda._sleep(20000000); b.record(); b.synchronize()
cycles_2ms = int(20000000 / a.elapsed_time(b) * 2)
start = torch.cuda.Event(enable_timing=True)
start.record(); start.synchronize(); t0 = time.monotonic()
events = []
while time.monotonic() - t0 < seconds:
    torch.cuda._sleep(cycles_2ms)
    e = torch.cuda.Event(enable_timing=True); e.record(); events.append(e)
    if len(events) > 10:
        events[-11].synchronize()
events[-1].synchronize()
done = [t0 + start.elapsed_time(e) / 1000.0 for e in events]
print(json.dumps({"t0": t0, "done": done, "batch_s": 0.002}))
"""

TOL = 3.0


def share(done, batch_s, t_from, t_to):
    """GPU time of batches completed in [t_from, t_to) / window, in percent."""
    n = sum(1 for t in done if t_from <= t < t_to)
    return 100.0 * n * batch_s / (t_to - t_from)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--library", required=True, help="path of libvgpu.so")
    p.add_argument("--out", help="directory for priority.md and priority.json")
    args = p.parse_args()
    lib = os.path.abspath(args.library)
    tmp = tempfile.mkdtemp(prefix="vgpu-priority-")
    worker = os.path.join(tmp, "worker.py")
    with open(worker, "w") as f:
        f.write(WORKER)
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("CUDA_DEVICE_", "CUDA_TASK", "CUDA_CORE", "VGPU_", "LD_PRELOAD"))}
    base.update({"LD_PRELOAD": lib, "VGPU_BOARD": os.path.join(tmp, "board")})
    low_env = dict(base, CUDA_DEVICE_SM_LIMIT="60", CUDA_DEVICE_MEMORY_SHARED_CACHE=os.path.join(tmp, "low.ledger"))
    high_env = dict(base, CUDA_TASK_PRIORITY="0", CUDA_DEVICE_MEMORY_SHARED_CACHE=os.path.join(tmp, "high.ledger"))
    print("priority: low (limit 60) for 6 s; high (priority 0, no limit) from +2 s for 2 s", file=sys.stderr)
    low = subprocess.Popen([sys.executable, worker, "6", "0"], env=low_env, stdout=subprocess.PIPE, text=True)
    high = subprocess.Popen([sys.executable, worker, "2", "2.5"], env=high_env, stdout=subprocess.PIPE, text=True)
    out_low, _ = low.communicate(timeout=120)
    out_high, _ = high.communicate(timeout=120)
    if low.returncode != 0 or high.returncode != 0:
        print(f"FAIL: worker exit codes low {low.returncode}, high {high.returncode}")
        return 1
    lo, hi = json.loads(out_low.strip().splitlines()[-1]), json.loads(out_high.strip().splitlines()[-1])
    h_start, h_end = hi["t0"], hi["done"][-1]
    l_start, l_end = lo["t0"], lo["done"][-1]
    before = share(lo["done"], lo["batch_s"], l_start + 0.5, h_start)
    windows = []
    t = h_start + 0.1
    while t + 0.1 <= h_end:
        windows.append(share(lo["done"], lo["batch_s"], t, t + 0.1))
        t += 0.1
    worst = max(windows) if windows else None
    first = share(lo["done"], lo["batch_s"], h_start, h_start + 0.1)
    after = share(lo["done"], lo["batch_s"], h_end + 0.5, l_end)
    high_share = share(hi["done"], hi["batch_s"], h_start + 0.1, h_end)
    checks = [
        ("low before high starts", f"60 ± {TOL:g}", before, abs(before - 60) <= TOL),
        ("low, worst 100 ms window from high start + 100 ms to its end", "≤ 5",
         worst, worst is not None and worst <= 5),
        ("low after high stops (+0.5 s)", f"60 ± {TOL:g}", after, abs(after - 60) <= TOL),
    ]
    rows = ["| check | expected | measured (%) | result |", "|---|---|---|---|"]
    for name, exp, val, ok in checks:
        rows.append(f"| {name} | {exp} | {'–' if val is None else f'{val:.1f}'} | {'PASS' if ok else 'FAIL'} |")
    table = "\n".join(rows) + (f"\n\nlow's share in the first 100 ms after high started: {first:.1f}%; "
                               f"high's share while running: {high_share:.1f}%; "
                               f"low per 100 ms while high ran: {', '.join(f'{w:.0f}' for w in windows)}\n")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "priority.md"), "w") as f:
            f.write(table)
        with open(os.path.join(args.out, "priority.json"), "w") as f:
            json.dump({"low": lo, "high": hi}, f)
    print(table)
    return 0 if all(ok for *_, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
