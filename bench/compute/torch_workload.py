"""PyTorch workloads for bench/compute_accuracy.py and bench/compute_matrix.py. One workload per
process; prints one JSON line.

    python3 torch_workload.py <matmul|graph|train|spin> <warmup_s> <measure_s>
                              [--calibrate] [--barrier DIR NAME] [--spin-us US]
                              [--size N] [--streams S]

Each workload is a unit of work (a bf16 N^3 matmul, N = --size, 8192 by default; one replay of a
CUDA graph of a few kernels, one training step, one torch.cuda._sleep spin kernel) submitted in
~10 ms batches with at most two batches in flight (flow control through events, no host
synchronisation), so the GPU never runs dry natively. matmul --streams S issues the matmuls from S
streams (round robin, each stream its own operands, no dependencies between the streams: cuBLAS
kernels of different streams may overlap); a batch's flow-control event is recorded on every stream,
and the window's events wait for all of them. Throughput is measured between two CUDA events on the
GPU's timeline (no sync at the window's start). --calibrate (native runs only) measures the device
time per unit behind a long blocker kernel at the end and reports the GPU-busy fraction rate x
device time, which must be ~1.0 for the throughput ratio to measure the busy share. --barrier: see
spin.cu. Errors raise (every CUDA call in torch is checked), and the process exits non-zero.
"""
import argparse
import json
import math
import sys
import time

import torch

from warmup_barrier import warm_up


def sleep_cycles_per_us():
    """Cycles per µs of torch.cuda._sleep (a clock64 spin), measured with events."""
    best = 0.0
    probe = 20_000_000
    for _ in range(3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(probe)
        b.record()
        b.synchronize()
        best = max(best, probe / (a.elapsed_time(b) * 1000.0))
    return best


def device_time_per_unit(step, n, cycles_per_us, blocker_s=0.25):
    """GPU time per unit when units run back to back: n units queued behind a blocker kernel.
    Returns (seconds per unit, reliable); unreliable when the host could not queue all n units
    while the blocker ran (the GPU may then have waited for the host)."""
    for _ in range(4):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(cycles_per_us * blocker_s * 1e6))
        a.record()
        t0 = time.monotonic()
        for _ in range(n):
            step()
        submit = time.monotonic() - t0
        b.record()
        b.synchronize()
        per_unit = a.elapsed_time(b) / 1000.0 / n
        if submit < 0.8 * blocker_s:
            return per_unit, True
        if n == 1:
            return per_unit, False
        n = max(1, n // 2)
    return per_unit, False


def make_matmul(n, streams):
    """One step = one bf16 n^3 matmul on each of `streams`; returns (step, steps per batch)."""
    operands = []
    for s in streams:
        with torch.cuda.stream(s):
            operands.append((s, torch.randn(n, n, device="cuda", dtype=torch.bfloat16),
                             torch.randn(n, n, device="cuda", dtype=torch.bfloat16),
                             torch.empty(n, n, device="cuda", dtype=torch.bfloat16)))

    def step():
        for s, a, b, c in operands:
            with torch.cuda.stream(s):
                torch.matmul(a, b, out=c)

    if n == 8192 and len(streams) == 1:
        return step, 8  # ~1.4 ms each on an H200
    unit_s = 2.0 * n ** 3 / 600e12  # ~600 TFLOP/s of bf16 on an H200
    return step, max(1, round(0.010 / (unit_s * len(streams))))


def make_graph():
    n = 4096
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ws = [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) / math.sqrt(n) for _ in range(4)]

    def body():
        y = x
        for w in ws:
            y = torch.nn.functional.gelu(y @ w)
        return y

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()  # 4 matmuls + 4 GELUs, ~1 ms per replay on an H200
    torch.cuda.synchronize()

    def step():
        graph.replay()

    return step, 10


def make_train():
    torch.manual_seed(0)
    d, layers, batch, seq = 1024, 4, 32, 512
    layer = torch.nn.TransformerEncoderLayer(d, 16, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False),
                                torch.nn.Linear(d, d)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(batch, seq, d, device="cuda")
    target = torch.randn(batch, seq, d, device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)  # no loss.item(): no host synchronisation

    return step, 1  # ~10 ms per step on an H200; host ~5 ms per step


def make_spin(spin_us, cycles_per_us):
    cycles = int(spin_us * cycles_per_us)

    def step():
        torch.cuda._sleep(cycles)

    return step, max(1, round(10000 / spin_us))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("workload", choices=["matmul", "graph", "train", "spin"])
    p.add_argument("warmup_s", type=float)
    p.add_argument("measure_s", type=float)
    p.add_argument("--calibrate", action="store_true")
    p.add_argument("--barrier", nargs=2, metavar=("DIR", "NAME"))
    p.add_argument("--spin-us", type=float, default=2000.0)
    p.add_argument("--cycles-per-us", type=float, default=0.0, help="for spin; measured when 0")
    p.add_argument("--size", type=int, default=8192, help="matmul: N of the N^3 bf16 matmul")
    p.add_argument("--streams", type=int, default=1, help="matmul: streams issuing the matmuls")
    args = p.parse_args()
    if args.streams < 1 or args.size < 1:
        p.error("--streams and --size must be at least 1")
    if args.workload != "matmul" and (args.streams != 1 or args.size != 8192):
        p.error("--streams and --size apply to matmul only")
    if args.calibrate and args.streams > 1:
        p.error("--calibrate times one stream's units behind a blocker: not with --streams > 1")
    t_launch = time.monotonic()  # after `import torch`; the orchestrator knows the spawn time

    if not torch.cuda.is_available():
        sys.exit("torch_workload: CUDA not available")
    stream = torch.cuda.Stream()  # a stream of its own, like most applications' compute stream
    torch.cuda.set_stream(stream)
    streams = [stream] + [torch.cuda.Stream() for _ in range(args.streams - 1)]
    cpu = args.cycles_per_us
    if args.workload == "spin" and cpu <= 0:
        cpu = sleep_cycles_per_us()
    units_per_step = len(streams) if args.workload == "matmul" else 1
    if args.workload == "matmul":
        step, batch = make_matmul(args.size, streams)
    elif args.workload == "graph":
        step, batch = make_graph()
    elif args.workload == "train":
        step, batch = make_train()
    else:
        step, batch = make_spin(args.spin_us, cpu)
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    t_ready = time.monotonic()

    ring = [[torch.cuda.Event() for _ in streams] for _ in range(3)]
    state = {"submitted": 0, "batches": 0}

    def submit_batch():
        for _ in range(batch):
            step()
        state["submitted"] += batch * units_per_step
        for ev, s in zip(ring[state["batches"] % 3], streams):
            ev.record(s)
        state["batches"] += 1
        if state["batches"] >= 2:
            for ev in ring[(state["batches"] - 2) % 3]:
                ev.synchronize()

    def record_joined(ev):
        """Records `ev` on the first stream behind everything submitted so far on all of them."""
        for s in streams[1:]:
            stream.wait_stream(s)
        ev.record(stream)

    warm_up(submit_batch, t_ready + args.warmup_s, args.barrier, "torch_workload")

    ev_a, ev_b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    record_joined(ev_a)
    at_a = state["submitted"]
    t_start = time.monotonic()
    while time.monotonic() - t_start < args.measure_s:
        submit_batch()
    record_joined(ev_b)
    units = state["submitted"] - at_a
    ev_b.synchronize()
    t_end = time.monotonic()
    seconds = ev_a.elapsed_time(ev_b) / 1000.0
    torch.cuda.synchronize()
    rate = units / seconds

    result = {"units": units, "seconds": seconds, "rate": rate, "t_launch": t_launch, "t_ready": t_ready,
              "t_start": t_start, "t_end": t_end, "batch": batch}
    if args.workload == "spin":
        result["cycles_per_us"] = cpu
    if args.calibrate:
        if cpu <= 0:
            cpu = sleep_cycles_per_us()
        per_unit, ok = device_time_per_unit(step, max(1, batch), cpu)
        result.update(dev_unit_s=per_unit, dev_unit_ok=ok, busy=rate * per_unit)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
