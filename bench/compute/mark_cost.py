#!/usr/bin/env python3
"""Do timing events recorded around a serving decode step make the step longer? A diagnostic for
docs/compute.md ("The serving row"); no vgpu of its own (preload it to see the library's marks).

Usage: python3 bench/compute/mark_cost.py [--rounds 3] [--steps 300] [--batch 32] [--variants ...]
       (about 30 s with the defaults; PyTorch)

Builds bench/serving/serve.py's model (its decode-alone configuration by default: 16 layers,
d_model 4096, 32 heads), captures its decode step as one CUDA graph for --batch sequences and runs
serve.py's step: the positions' H2D copy, the graph's replay, the tokens' D2H copy, an event
recorded and synchronised. Each variant records timing events (CU_EVENT_DEFAULT, as the
library's marks) at some of these places:
  none    nothing added (serve.py's step)
  begin   before the H2D copy (the library's begin on an idle stream)
  h2d     between the H2D copy and the replay
  graph   between the replay and the D2H copy
  d2h     between the D2H copy and the step's own event
  after   after the step's own event, before the wait (the library's mark before a wait)
  all     at every place above
  all-nt  at every place, events without timing (CU_EVENT_DISABLE_TIMING)
Variants alternate within each round, --steps steps each. Prints per variant the median step span
(host: from before the H2D copy to the synchronisation's return), the replay call's and the wait's
medians, and the span's ratio to `none` in the same round.

--gap instead asks how much of a graph's replay call an event recorded just before it sees as GPU
time (the library's begin before a graph launched onto an idle stream): per round, the median
GPU time from such an event to one recorded after the replay, the stream idle before it ("idle")
and behind a ~1 ms torch.cuda._sleep, so that the graph is submitted before the stream reaches
the first event ("queued": the graph's own GPU time); their difference (the submission gap),
the replay call's median host time, and the gap minus the call: how long before the call
returned the graph started (negative) or after it (positive). A third case ("held") holds the
stream with cuStreamWaitValue32 on a host-mapped word before the first event and releases it
when the replay call has returned (through libcuda with ctypes; skipped where the driver lacks
it): whether a launch held so is measured at its own GPU time (held - queued near 0), and what
holding costs the step's span (host time from before the hold to the end's synchronisation,
against the idle case's). Never changes any GPU setting."""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "serving"))

VARIANTS = ("none", "begin", "h2d", "graph", "d2h", "after", "all", "all-nt")
PLACES = ("begin", "h2d", "graph", "d2h", "after")


def places_of(variant):
    return PLACES if variant.startswith("all") else () if variant == "none" else (variant,)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the variants (default 3)")
    ap.add_argument("--steps", type=int, default=300, help="steps per variant and round (default 300)")
    ap.add_argument("--batch", type=int, default=32, help="sequences per decode step (default 32)")
    ap.add_argument("--position", type=int, default=500, help="each sequence's position (default 500)")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--d-model", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--max-seq", type=int, default=1024)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {','.join(VARIANTS)}")
    ap.add_argument("--gap", action="store_true", help="measure the submission gap instead (above)")
    a = ap.parse_args()
    variants = [v for v in a.variants.split(",") if v]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        sys.exit(f"mark_cost: --variants {a.variants!r}: unknown {bad} (known: {','.join(VARIANTS)})")
    if a.rounds < 1 or a.steps < 10 or a.batch < 1 or not 0 <= a.position < a.max_seq:
        sys.exit("mark_cost: --rounds >= 1, --steps >= 10, --batch >= 1 and 0 <= --position < --max-seq")
    try:
        import torch
    except ImportError:
        sys.exit("mark_cost: PyTorch is not installed")
    if not torch.cuda.is_available():
        sys.exit("mark_cost: no CUDA device visible to PyTorch")
    import serve  # bench/serving/serve.py: the model and the graphs' static tensors

    torch.set_grad_enabled(False)
    dev = torch.device("cuda", 0)
    stream = torch.cuda.Stream(dev)
    torch.cuda.set_stream(stream)
    margs = argparse.Namespace(layers=a.layers, d_model=a.d_model, heads=a.heads, ffn=4 * a.d_model,
                               vocab=32000, max_seq=a.max_seq)
    torch.manual_seed(0)
    model = serve.Model(margs, dev)
    slots = a.batch
    per_slot = 2 * model.L * model.H * model.S * model.Dh
    model.attach_cache(torch.zeros(slots * per_slot, dtype=torch.bfloat16, device=dev), slots)
    s = serve.Static(torch, slots, model.H, model.S, dev)
    s.host_pos[:] = a.position
    side = torch.cuda.Stream(dev)
    side.wait_stream(stream)
    with torch.cuda.stream(side):
        model.decode(a.batch, s)
    stream.wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model.decode(a.batch, s)
    graph.replay()
    torch.cuda.synchronize()

    B = a.batch
    done = torch.cuda.Event()
    timing = {p: torch.cuda.Event(enable_timing=True) for p in PLACES}
    plain = {p: torch.cuda.Event() for p in PLACES}  # torch's default: CU_EVENT_DISABLE_TIMING

    def run(variant, n):
        marks = places_of(variant)
        events = plain if variant == "all-nt" else timing
        span, call, wait = [], [], []

        def mark(place):  # the same call in every variant, an event only where it has one
            if place in marks:
                events[place].record()

        for _ in range(n):
            t0 = time.perf_counter()
            mark("begin")
            s.pos[:B].copy_(s.host_pos[:B], non_blocking=True)
            mark("h2d")
            t1 = time.perf_counter()
            graph.replay()
            t2 = time.perf_counter()
            mark("graph")
            s.host_tok[:B].copy_(s.tok[:B], non_blocking=True)
            mark("d2h")
            done.record()
            mark("after")
            done.synchronize()
            t3 = time.perf_counter()
            span.append(1e6 * (t3 - t0))
            call.append(1e6 * (t2 - t1))
            wait.append(1e6 * (t3 - t2))
        return statistics.median(span), statistics.median(call), statistics.median(wait)

    if a.gap:
        gap(torch, graph, a)
        return
    run("none", 50)  # warm-up
    preload = os.environ.get("LD_PRELOAD", "")
    print(f"mark_cost on {torch.cuda.get_device_name(0)}: decode step of {B} sequences at position {a.position}, "
          f"{a.layers} layers, d_model {a.d_model}; {a.steps} steps per variant, {a.rounds} rounds"
          + (f"; LD_PRELOAD={preload} CUDA_DEVICE_SM_LIMIT={os.environ.get('CUDA_DEVICE_SM_LIMIT', '-')}"
             if preload else ""))
    print("| variant | round | step span p50 (µs) | replay call p50 (µs) | wait p50 (µs) | span / none |")
    print("|---|---|---|---|---|---|")
    for r in range(a.rounds):
        results = {v: run(v, a.steps) for v in variants}
        base = results.get("none", (float("nan"),))[0]
        for v in variants:
            sp, ca, wa = results[v]
            print(f"| {v} | {r + 1} | {sp:.0f} | {ca:.0f} | {wa:.0f} | {sp / base:.4f} |", flush=True)


class HostWord:
    """A 32-bit word in host memory mapped for the GPU, and cuStreamWaitValue32 on it through the
    driver API (ctypes): a stream held until the host writes the value it waits for."""

    def __init__(self):
        import ctypes
        self.ctypes = ctypes
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.host = ctypes.c_void_p()
        self.dev = ctypes.c_uint64()
        self._check("cuMemHostAlloc", self.cu.cuMemHostAlloc(ctypes.byref(self.host), ctypes.c_size_t(64),
                                                              ctypes.c_uint(0x02)))  # CU_MEMHOSTALLOC_DEVICEMAP
        self._check("cuMemHostGetDevicePointer", self.cu.cuMemHostGetDevicePointer_v2(
            ctypes.byref(self.dev), self.host, ctypes.c_uint(0)))
        self.word = ctypes.c_uint32.from_address(self.host.value)
        self.word.value = 0
        self.wait = self.cu.cuStreamWaitValue32_v2
        self.wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        self.seq = 0

    @staticmethod
    def _check(what, rc):
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    def hold(self, stream):
        """The stream waits (CU_STREAM_WAIT_VALUE_GEQ) until release()."""
        self.seq += 1
        self._check("cuStreamWaitValue32_v2", self.wait(self.ctypes.c_void_p(stream), self.dev.value, self.seq, 0))

    def release(self):
        self.word.value = self.seq


def gap(torch, graph, a):
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = int(torch.cuda.get_device_properties(0).clock_rate * 1000 * 1e-3)  # clock_rate in kHz: ~1 ms
    try:
        word = HostWord()
    except (OSError, AttributeError, RuntimeError) as e:
        word = None
        print(f"mark_cost --gap: no held case ({e})")
    stream = torch.cuda.current_stream().cuda_stream
    modes = ("idle", "queued") + (("held",) if word is not None else ())

    def step(mode):
        t0 = time.perf_counter()
        if mode == "queued":
            torch.cuda._sleep(cycles)
        elif mode == "held":
            word.hold(stream)
        begin.record()
        t1 = time.perf_counter()
        graph.replay()
        t2 = time.perf_counter()
        if mode == "held":
            word.release()
        end.record()
        end.synchronize()
        t3 = time.perf_counter()
        return 1000.0 * begin.elapsed_time(end), 1e6 * (t2 - t1), 1e6 * (t3 - t0)

    for mode in modes:
        step(mode)
    print(f"mark_cost --gap on {torch.cuda.get_device_name(0)}: decode graph of {a.batch} sequences, {a.layers} layers, "
          f"d_model {a.d_model}; {a.steps} launches per case, {a.rounds} rounds")
    print("| round | idle: event to event p50 (µs) | queued | held | submission gap: idle - queued (µs) "
          "| held - queued | replay call p50, idle (µs) | gap - call | step span p50, idle / held (µs) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in range(a.rounds):
        gpu = {m: [] for m in modes}
        call, span = {m: [] for m in modes}, {m: [] for m in modes}
        for i in range(len(modes) * a.steps):  # the cases in turn
            m = modes[i % len(modes)]
            g, c, sp = step(m)
            gpu[m].append(g)
            call[m].append(c)
            span[m].append(sp)
        med = {m: statistics.median(gpu[m]) for m in modes}
        c = statistics.median(call["idle"])
        held = f"{med['held']:.1f}" if "held" in med else "–"
        held_gap = f"{med['held'] - med['queued']:.1f}" if "held" in med else "–"
        spans = f"{statistics.median(span['idle']):.0f} / " + (
            f"{statistics.median(span['held']):.0f}" if "held" in med else "–")
        print(f"| {r + 1} | {med['idle']:.1f} | {med['queued']:.1f} | {held} | {med['idle'] - med['queued']:.1f} "
              f"| {held_gap} | {c:.1f} | {med['idle'] - med['queued'] - c:.1f} | {spans} |", flush=True)


if __name__ == "__main__":
    main()
