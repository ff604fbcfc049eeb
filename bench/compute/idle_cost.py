"""Does fixed GPU work take longer right after the GPU idled? A diagnostic for docs/compute.md
("The serving row"); no vgpu.

Usage: python3 bench/compute/idle_cost.py [--repeats 2] [--sequences 150]     (about 40 s; PyTorch)

Two sequences of fixed work, each timed on the GPU with CUDA events (first op to last op), run
--sequences times after each of several host pauses (the GPU idles through them):
  gemv   a decode step's memory-bound part: a batch of 32 rows through 48 bf16 weight matrices of
         4096 x 12288 (4.8 GB read per sequence, ~1.4 ms on an H200)
  mm     compute-bound: four bf16 8192^3 matmuls (power-capped when run back to back on an H200)
Pauses, in this order: none (the next sequence is enqueued as soon as the last completed), 3 ms
of sleep, 3 ms of spinning (the host busy, the GPU idle: tells the GPU's wake-up from the host's),
20 ms and 0.5 ms of sleep. Prints, per sequence and pause, the median and mean GPU time per sequence and the ratio
of the median to the no-pause median of the same repeat. A limiter that rests between runs adds
such pauses: where the ratio exceeds 1, the work after a rest costs more busy time than natively.
Never changes clocks or any GPU setting."""
import argparse
import statistics
import sys
import time

try:
    import torch
except ImportError:  # --help works without it
    torch = None

PAUSES = ((0.0, "none"), (0.003, "sleep"), (0.003, "spin"), (0.02, "sleep"), (0.0005, "sleep"))


def spin(seconds):
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


def timed(fn, pause, how, n):
    """GPU time of each of n sequences (ms), each started after the pause."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        starts[i].record()
        fn()
        ends[i].record()
        ends[i].synchronize()
        if pause > 0:
            (time.sleep if how == "sleep" else spin)(pause)
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2, help="rounds over every pause (default 2)")
    ap.add_argument("--sequences", type=int, default=150, help="sequences timed per pause and round (default 150)")
    a = ap.parse_args()
    if a.repeats < 1 or a.sequences < 10:
        sys.exit("idle_cost: --repeats must be at least 1 and --sequences at least 10")
    if torch is None or not torch.cuda.is_available():
        sys.exit("idle_cost: no CUDA device visible to PyTorch")
    dev = torch.device("cuda")
    torch.manual_seed(0)
    weights = [torch.randn(4096, 12288, device=dev, dtype=torch.bfloat16) for _ in range(48)]
    x = torch.randn(32, 4096, device=dev, dtype=torch.bfloat16)
    a_mat = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b_mat = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)

    def gemv():
        for w in weights:
            x @ w

    def mm():
        for _ in range(4):
            a_mat @ b_mat

    print(f"idle_cost on {torch.cuda.get_device_name(0)}: {a.sequences} sequences per pause, {a.repeats} rounds")
    print("| sequence | pause | round | GPU time per sequence, median (µs) | mean (µs) | median / no pause |")
    print("|---|---|---|---|---|---|")
    for name, fn in (("gemv 4.8 GB", gemv), ("mm 4 x 8192^3", mm)):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        for r in range(a.repeats):
            base = None
            for pause, how in PAUSES:
                d = timed(fn, pause, how, a.sequences)
                med = statistics.median(d)
                base = med if base is None else base
                label = "none" if pause == 0 else f"{pause * 1e3:g} ms {how}"
                print(f"| {name} | {label} | {r + 1} | {med * 1e3:.1f} | {statistics.mean(d) * 1e3:.1f} | {med / base:.3f} |",
                      flush=True)


if __name__ == "__main__":
    main()
