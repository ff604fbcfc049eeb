#!/usr/bin/env python3
"""One LLM serving instance in PyTorch, built the way inference engines are: what vgpu must
support when several of them share a GPU.

    python3 bench/serving/serve.py [--seconds 10] [--warmup 3] [--clients 32] [--json FILE] ...

- A decoder-only transformer with random bf16 weights (default 12 layers, d_model 2048, 16 heads,
  vocab 32000: ~740 M parameters, ~1.5 GB).
- Memory sized as vLLM sizes itself: after the weights and a profiling forward pass (a prefill of
  --max-prompt tokens), KV cache = free x --gpu-memory-utilization (free from
  torch.cuda.mem_get_info(), i.e. cuMemGetInfo), allocated as ONE tensor, counted in blocks of
  --block-size tokens. An out-of-memory error there is reported as such (exit 3): under a memory
  limit, "free" must be what can be allocated.
- Decode steps replayed from CUDA graphs, one per batch-size bucket (1, 2, 4, ... --max-batch),
  captured into one shared graph memory pool; prefill eager.
- Continuous batching: the engine (main thread) admits waiting requests into free sequence slots
  (lowest first; prefill, up to --prefill-tokens prompt tokens per iteration), then runs one decode
  step for all slots below the highest one in use (padded to its bucket), and retires requests at
  their output length. The host synchronises after every step, as servers do to stream tokens.
- --clients closed-loop client threads: each sends a request (prompt and output lengths uniform in
  [--min-prompt, --max-prompt] and [--min-output, --max-output], from a seeded RNG), waits for its
  last token, thinks (exponential, mean --think-ms) and sends the next.
- Peak memory that NVML attributes to the instance's processes (per-process usage, what
  nvidia-smi lists), sampled every --nvml-interval-ms (default 10 ms) by a thread through
  libnvidia-ml.so.1 (tests/gpu/memory/nvml_peak.py), over the whole life of the instance.

--processes N runs N engine processes in the instance (like tensor-parallel workers or API +
engine processes sharing one limit). They size their caches together: each takes
min(free seen by the N) x utilisation / N. The first process only coordinates and samples NVML.

Clients start at the go time (at once, or when run.py says so through --barrier DIR NAME); the
window of --seconds starts --warmup seconds later. Reported over the window: generated tokens/s,
completed requests/s, request latency (submission to last token), time per output token (first to
last token / (tokens - 1)) and time to first token, p50 and p99; and per decode step, the host time
of the graph's replay call (replay_call_us: cudaGraphLaunch and what wraps it) and the time from
its return to the end of the step's synchronisation (step_wait_us: the part of the step's GPU time
the host waits for), p50 / p99 / mean / max.

Output: one summary line and one JSON line on stdout (also written to --json FILE). Exit status: 0,
3 when the GPU ran out of memory at start-up (weights, profiling, KV cache or graph capture), 1 for
any other failure (the JSON then says which phase failed and why), 2 for invalid options.
"""
import argparse
import heapq
import json
import os
import queue
import random
import shutil
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import common  # noqa: E402

EXIT_OOM = 3


def log(msg):
    print(f"serve: {msg}", file=sys.stderr, flush=True)


class SetupError(Exception):
    """A failure in a named phase (cuda, model, profile, kv-cache, capture, serve); `merged` when the
    message already names the phase of each failed worker."""

    def __init__(self, phase, message, oom=False, merged=False):
        super().__init__(message)
        self.phase = phase
        self.oom = oom
        self.merged = merged

    def describe(self):
        at_start = self.oom and self.phase != "serve"
        return ("" if self.merged else f"{self.phase}: ") + str(self) + (
            " (out of memory at start-up)" if at_start and not self.merged else "")


# --- options -------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    m = p.add_argument_group("model")
    m.add_argument("--layers", type=int, default=12)
    m.add_argument("--d-model", type=int, default=2048)
    m.add_argument("--heads", type=int, default=16)
    m.add_argument("--ffn", type=int, default=0, help="MLP width (default 4 x d_model)")
    m.add_argument("--vocab", type=int, default=32000)
    m.add_argument("--max-seq", type=int, default=1024, help="longest sequence (prompt + output) a slot holds")
    e = p.add_argument_group("engine")
    e.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                   help="fraction of the free memory (after weights and profiling) the KV cache takes")
    e.add_argument("--block-size", type=int, default=16, help="tokens per KV cache block")
    e.add_argument("--max-batch", type=int, default=64, help="most sequences decoded at once (graph buckets up to it)")
    e.add_argument("--prefill-tokens", type=int, default=2048,
                   help="prompt tokens prefilled per engine iteration at most (at least one request)")
    e.add_argument("--processes", type=int, default=1, help="engine processes in this instance")
    w = p.add_argument_group("load")
    w.add_argument("--clients", type=int, default=32, help="closed-loop client threads (split over --processes)")
    w.add_argument("--min-prompt", type=int, default=32)
    w.add_argument("--max-prompt", type=int, default=512)
    w.add_argument("--min-output", type=int, default=32)
    w.add_argument("--max-output", type=int, default=256)
    w.add_argument("--think-ms", type=float, default=0.0, help="mean think time between a client's requests")
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--warmup", type=float, default=3.0, help="seconds of load before the window")
    w.add_argument("--seconds", type=float, default=10.0, help="measurement window")
    o = p.add_argument_group("output and coordination")
    o.add_argument("--json", help="also write the result to this file")
    o.add_argument("--name", default="", help="instance name in the result (default: the barrier name or 'serve')")
    o.add_argument("--barrier", nargs=2, metavar=("DIR", "NAME"),
                   help="write DIR/ready.NAME when ready, start at the time in DIR/go (run.py)")
    o.add_argument("--nvml-interval-ms", type=float, default=10.0)
    o.add_argument("--barrier-timeout", type=float, default=900.0, help=argparse.SUPPRESS)
    # worker process of a --processes N instance (set by the instance itself)
    o.add_argument("--worker", nargs=3, metavar=("DIR", "INDEX", "COUNT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    problems = validate(args)
    if problems:
        p.error("; ".join(problems))
    if not args.ffn:
        args.ffn = 4 * args.d_model
    if not args.name:
        args.name = args.barrier[1] if args.barrier else "serve"
    return args


def validate(a):
    bad = []
    positive = {"--layers": a.layers, "--d-model": a.d_model, "--heads": a.heads, "--max-seq": a.max_seq,
                "--block-size": a.block_size, "--max-batch": a.max_batch, "--prefill-tokens": a.prefill_tokens,
                "--processes": a.processes, "--clients": a.clients, "--min-prompt": a.min_prompt,
                "--min-output": a.min_output}
    bad += [f"{k} {v}: must be at least 1" for k, v in positive.items() if v < 1]
    if a.vocab < 2:
        bad.append(f"--vocab {a.vocab}: must be at least 2")
    if a.ffn < 0:
        bad.append(f"--ffn {a.ffn}: must be positive (0 = 4 x d_model)")
    if a.heads >= 1 and a.d_model % a.heads:
        bad.append(f"--d-model {a.d_model} is not a multiple of --heads {a.heads}")
    if a.block_size >= 1 and a.max_seq % a.block_size:
        bad.append(f"--max-seq {a.max_seq} is not a multiple of --block-size {a.block_size}")
    if a.max_prompt < a.min_prompt:
        bad.append(f"--max-prompt {a.max_prompt} is below --min-prompt {a.min_prompt}")
    if a.max_output < a.min_output:
        bad.append(f"--max-output {a.max_output} is below --min-output {a.min_output}")
    if a.max_prompt + a.max_output > a.max_seq:
        bad.append(f"--max-prompt {a.max_prompt} + --max-output {a.max_output} exceed --max-seq {a.max_seq}")
    if not 0 < a.gpu_memory_utilization <= 1:
        bad.append(f"--gpu-memory-utilization {a.gpu_memory_utilization}: expected a fraction in (0, 1]")
    if a.clients < a.processes:
        bad.append(f"--clients {a.clients} is below --processes {a.processes} (each process needs a client)")
    if a.think_ms < 0 or a.warmup < 0 or a.seconds <= 0 or a.nvml_interval_ms <= 0:
        bad.append("--think-ms and --warmup must be >= 0, --seconds and --nvml-interval-ms > 0")
    return bad


# --- NVML: peak per-process memory of the instance -------------------------------------------------

class PeakSampler:
    """Samples, every interval_s, the device memory NVML attributes to the given pids (summed over
    all GPUs) and keeps the peak. NVML's process list is not interposed by libvgpu.so, so this is
    the driver's own figure even inside `vgpu run`."""

    def __init__(self, pids, interval_s):
        self.pids = set(pids)
        self.interval_s = interval_s
        self.peak = 0
        self.samples = 0
        self.listed = False  # NVML listed one of the pids at least once
        self.error = None
        self._stop = threading.Event()
        self._thread = None
        self._t0 = self._t1 = None

    def start(self):
        try:
            sys.path.insert(0, os.path.join(ROOT, "tests", "gpu", "memory"))
            import nvml_peak  # noqa: E402
            self._nvml = nvml_peak.Nvml()
        except (ImportError, OSError, RuntimeError, AttributeError) as e:
            self.error = f"NVML unavailable: {e}"
            log(self.error)
            return
        if self._nvml.proc_fn is None:
            self.error = "NVML has no nvmlDeviceGetComputeRunningProcesses"
            return
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="nvml-peak", daemon=True)
        self._thread.start()

    def add(self, pid):
        self.pids.add(pid)

    def _sample(self):
        total = 0
        for g in range(self._nvml.count()):
            for pid, used in self._nvml.processes(g):
                if pid in self.pids and used is not None:
                    self.listed = True
                    total += used
        self.peak = max(self.peak, total)
        self.samples += 1

    def _loop(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def stop(self):
        """Stops sampling (one last sample) and returns the figures for the result."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._sample()
            self._t1 = time.monotonic()
        if self._thread is not None and not self.listed and self.error is None:
            self.error = "NVML never listed the instance's processes"
        seconds = (self._t1 - self._t0) if self._t1 else 0.0
        return {"nvml_peak_bytes": self.peak if self.listed else None, "nvml_samples": self.samples,
                "nvml_hz": round(self.samples / seconds, 1) if seconds > 0 else None, "nvml_error": self.error}


# --- coordination ----------------------------------------------------------------------------------

class Solo:
    """One engine process: sizes its cache from its own free figure; starts at once or at run.py's go."""

    share = 1
    index = 0  # process 0 of 1 (a Worker's INDEX and COUNT): the clients' seeds are offset by it

    def __init__(self, args):
        self.args = args

    def profiled(self):
        pass

    def agree_free(self, free):
        return free

    def ready(self, info):
        if not self.args.barrier:
            return time.monotonic() + 0.1
        bdir, name = self.args.barrier
        common.arrive(bdir, "ready." + name, info)
        return common.await_file(bdir, common.GO, self.args.barrier_timeout)["t"]


class Worker:
    """Engine process INDEX of COUNT in one instance; the instance's first process coordinates."""

    def __init__(self, args):
        self.dir, index, count = args.worker
        self.index, self.share = int(index), int(count)
        self.parent = os.getppid()
        self.timeout = args.barrier_timeout

    def _alive(self):
        return "the instance's coordinating process is gone" if os.getppid() != self.parent else None

    def _meet(self, mine, payload, theirs):
        common.arrive(self.dir, f"{mine}.{self.index}", payload)
        return common.await_file(self.dir, theirs, self.timeout, self._alive)

    def profiled(self):
        self._meet("profiled", {}, "measure")

    def agree_free(self, free):
        return self._meet("measured", {"free": free}, "allocate")["free"]

    def ready(self, info):
        return self._meet("ready", info, common.GO)["t"]


# --- the model (torch from here on) -------------------------------------------------------------

class Model:
    """Random bf16 weights and the two forward passes. All tensors on `device`."""

    def __init__(self, args, device):
        import torch
        self.torch = torch
        self.L, self.D, self.H = args.layers, args.d_model, args.heads
        self.Dh = self.D // self.H
        self.S, self.V, self.F = args.max_seq, args.vocab, args.ffn
        self.scale = self.Dh ** -0.5

        def w(*shape, std=0.02):
            return torch.empty(*shape, dtype=torch.bfloat16, device=device).normal_(0.0, std)

        def ones(n):
            return torch.ones(n, dtype=torch.bfloat16, device=device)

        self.emb = w(self.V, self.D)
        self.pos_emb = w(self.S, self.D)
        self.layers = [{"n1": ones(self.D), "qkv": w(3 * self.D, self.D), "o": w(self.D, self.D),
                        "n2": ones(self.D), "up": w(self.F, self.D), "down": w(self.D, self.F)}
                       for _ in range(self.L)]
        self.norm = ones(self.D)
        self.head = w(self.V, self.D)
        self.params = sum(t.numel() for t in [self.emb, self.pos_emb, self.norm, self.head]
                          + [t for layer in self.layers for t in layer.values()])
        self.kv_bytes_per_token = 2 * self.L * self.D * 2  # K and V, every layer, bf16
        self.cache = None

    def _mlp(self, x, layer):
        F = self.torch.nn.functional
        h = F.rms_norm(x, (self.D,), layer["n2"], 1e-5)
        return x + F.linear(F.gelu(F.linear(h, layer["up"]), approximate="tanh"), layer["down"])

    def attach_cache(self, flat, slots):
        """Carves per-layer K and V views out of the one cache tensor: layer l's K of sequence slot s
        is k[l][s] = [heads, max_seq, head_dim], contiguous; kflat[l] is the same memory as rows of
        head_dim, which the decode step writes with index_copy_."""
        region = flat.view(self.L, 2, -1)
        n = slots * self.H * self.S * self.Dh
        self.k = [region[l, 0, :n].view(slots, self.H, self.S, self.Dh) for l in range(self.L)]
        self.v = [region[l, 1, :n].view(slots, self.H, self.S, self.Dh) for l in range(self.L)]
        self.kflat = [t.view(-1, self.Dh) for t in self.k]
        self.vflat = [t.view(-1, self.Dh) for t in self.v]
        self.cache = flat

    def prefill(self, n_tokens, slot=None, tok=None):
        """Eager forward over a prompt of n_tokens random tokens. With a slot: writes the prompt's K
        and V into that slot's cache and the first generated token into tok[slot]. Without (the
        profiling pass): neither."""
        torch, F = self.torch, self.torch.nn.functional
        P, H, Dh = n_tokens, self.H, self.Dh
        ids = torch.randint(0, self.V, (P,), device=self.emb.device)
        x = F.embedding(ids, self.emb) + self.pos_emb[:P]
        for l, layer in enumerate(self.layers):
            h = F.rms_norm(x, (self.D,), layer["n1"], 1e-5)
            qkv = F.linear(h, layer["qkv"]).view(P, 3, H, Dh)
            q, k, v = (qkv[:, i].transpose(0, 1) for i in range(3))  # [H, P, Dh]
            if slot is not None:
                self.k[l][slot, :, :P].copy_(k)
                self.v[l][slot, :, :P].copy_(v)
            o = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), is_causal=True)
            x = x + F.linear(o[0].transpose(0, 1).reshape(P, self.D), layer["o"])
            x = self._mlp(x, layer)
        last = F.rms_norm(x[-1:], (self.D,), self.norm, 1e-5)
        first = torch.argmax(F.linear(last, self.head), dim=-1)  # [1]
        if slot is not None:
            tok[slot:slot + 1].copy_(first)

    def decode(self, B, s):
        """One decode step for sequence slots 0..B-1 (what a graph captures): reads s.tok[:B] (the
        last token of each) and s.pos[:B] (its position), writes its K and V at that position,
        attends over positions <= it, and writes the next token (greedy) into s.tok[:B]. No host
        synchronisation, no allocation outside the caching allocator, fixed shapes."""
        torch, F = self.torch, self.torch.nn.functional
        H, Dh, S, D = self.H, self.Dh, self.S, self.D
        p = s.pos[:B].clamp(0, S - 1)  # inactive slots hold 0; never write outside a slot
        x = F.embedding(s.tok[:B], self.emb) + F.embedding(p, self.pos_emb)  # [B, D]
        hidden = (s.seq.view(1, S) > p.view(B, 1)).view(B, 1, 1, S)  # future positions
        rows = ((s.lanes[:B].view(B, 1) * H + s.heads.view(1, H)) * S + p.view(B, 1)).view(-1)
        for l, layer in enumerate(self.layers):
            h = F.rms_norm(x, (D,), layer["n1"], 1e-5)
            qkv = F.linear(h, layer["qkv"]).view(B, 3, H, Dh)
            q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]  # [B, H, Dh]
            self.kflat[l].index_copy_(0, rows, k.reshape(B * H, Dh))
            self.vflat[l].index_copy_(0, rows, v.reshape(B * H, Dh))
            scores = torch.matmul(q.unsqueeze(2), self.k[l][:B].transpose(2, 3)).float() * self.scale  # [B,H,1,S]
            probs = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1).to(torch.bfloat16)
            o = torch.matmul(probs, self.v[l][:B])  # [B, H, 1, Dh]
            x = x + F.linear(o.reshape(B, D), layer["o"])
            x = self._mlp(x, layer)
        last = F.rms_norm(x, (D,), self.norm, 1e-5)
        s.tok[:B].copy_(torch.argmax(F.linear(last, self.head), dim=-1))


class Static:
    """The decode graphs' fixed inputs and outputs (allocated before capture, never reallocated)."""

    def __init__(self, torch, slots, heads, max_seq, device):
        self.tok = torch.zeros(slots, dtype=torch.long, device=device)   # last token per slot
        self.pos = torch.zeros(slots, dtype=torch.long, device=device)   # its position
        self.lanes = torch.arange(slots, dtype=torch.long, device=device)
        self.heads = torch.arange(heads, dtype=torch.long, device=device)
        self.seq = torch.arange(max_seq, dtype=torch.long, device=device)
        # host side: positions are prepared here and copied in before each replay
        self.host_pos = torch.zeros(slots, dtype=torch.long, pin_memory=True)
        self.host_tok = torch.zeros(slots, dtype=torch.long, pin_memory=True)


def buckets_for(slots):
    out, b = [], 1
    while b < slots:
        out.append(b)
        b *= 2
    return out + [slots]


# --- requests and clients --------------------------------------------------------------------------

class Request:
    __slots__ = ("prompt", "output", "t_submit", "t_first", "t_done", "done")

    def __init__(self, prompt, output):
        self.prompt, self.output = prompt, output
        self.t_submit = self.t_first = self.t_done = None
        self.done = threading.Event()


def client_loop(index, args, seed, waiting, stop, go_at):
    rng = random.Random(seed * 1_000_003 + index)
    common.sleep_until(go_at)
    while not stop.is_set():
        req = Request(rng.randint(args.min_prompt, args.max_prompt), rng.randint(args.min_output, args.max_output))
        req.t_submit = time.monotonic()
        waiting.put(req)
        req.done.wait()
        if args.think_ms > 0:
            stop.wait(rng.expovariate(1000.0 / args.think_ms))


# --- the engine ------------------------------------------------------------------------------------

class Engine:
    def __init__(self, args, model, static, graphs, slots, stream):
        import numpy as np
        self.np = np
        self.args, self.model, self.s, self.graphs, self.stream = args, model, static, graphs, stream
        self.buckets = sorted(graphs)
        self.slots = slots
        self.free = list(range(slots))  # a heap: the lowest free slot first
        self.req = [None] * slots
        self.active = np.zeros(slots, dtype=bool)
        self.remaining = np.zeros(slots, dtype=np.int64)  # tokens still to generate
        self.pos = static.host_pos.numpy()                  # pinned, shared with the H2D copy
        self.step_done = model.torch.cuda.Event()
        self.waiting = queue.Queue()
        self.window = (0.0, 0.0)
        self.tokens_in_window = 0
        self.completed = []   # requests finished inside the window
        self.steps_in_window = 0
        self.lanes_in_window = 0
        self.replay_us = []     # per decode step in the window: the graph replay call's host time
        self.step_wait_us = []  # and the time from its return to the step's synchronisation's return

    def _in_window(self, t):
        return self.window[0] <= t <= self.window[1]

    def _finish(self, slot, t):
        req = self.req[slot]
        req.t_done = t
        self.req[slot] = None
        self.active[slot] = False
        self.pos[slot] = 0
        heapq.heappush(self.free, slot)
        if self._in_window(t):
            self.completed.append(req)
        req.done.set()

    def _admit(self, block):
        """Prefills waiting requests into free slots; returns their slots. Waits up to 50 ms for a
        request when `block` (nothing else to do)."""
        admitted, budget = [], self.args.prefill_tokens
        while self.free and budget > 0:
            try:
                req = self.waiting.get(timeout=0.05) if block and not admitted else self.waiting.get_nowait()
            except queue.Empty:
                break
            slot = heapq.heappop(self.free)
            self.model.prefill(req.prompt, slot, self.s.tok)
            self.req[slot] = req
            self.pos[slot] = req.prompt          # where the first generated token's K/V goes
            self.remaining[slot] = req.output - 1
            self.active[slot] = True
            admitted.append(slot)
            budget -= req.prompt
        return admitted

    def _step(self):
        np, s = self.np, self.s
        top = int(np.flatnonzero(self.active)[-1]) + 1
        B = next(b for b in self.buckets if b >= top)
        s.pos[:B].copy_(s.host_pos[:B], non_blocking=True)
        t_call = time.perf_counter()
        self.graphs[B].replay()
        t_return = time.perf_counter()
        s.host_tok[:B].copy_(s.tok[:B], non_blocking=True)
        self.step_done.record()
        self.step_done.synchronize()
        t_done = time.perf_counter()
        t = time.monotonic()
        act = self.active[:B].copy()
        n = int(act.sum())
        if self._in_window(t):
            self.tokens_in_window += n
            self.steps_in_window += 1
            self.lanes_in_window += n
            self.replay_us.append(1e6 * (t_return - t_call))
            self.step_wait_us.append(1e6 * (t_done - t_return))
        self.pos[:B][act] += 1
        self.remaining[:B][act] -= 1
        for slot in np.flatnonzero(act & (self.remaining[:B] == 0)):
            self._finish(int(slot), t)

    def run(self, window):
        """Serves until the end of the window; window = (start, end) in CLOCK_MONOTONIC seconds."""
        self.window = window
        while time.monotonic() < window[1]:
            admitted = self._admit(block=not self.active.any())
            if admitted:
                self.stream.synchronize()  # first tokens are out
                t = time.monotonic()
                for slot in admitted:
                    self.req[slot].t_first = t
                    if self._in_window(t):
                        self.tokens_in_window += 1
                    if self.remaining[slot] == 0:
                        self._finish(slot, t)
            if self.active.any():
                self._step()

    def release_clients(self):
        for req in self.req:
            if req is not None:
                req.done.set()
        while True:
            try:
                self.waiting.get_nowait().done.set()
            except queue.Empty:
                return


def serve_process(args, coord):
    """Everything one engine process does; returns its result (with raw samples under 'samples')."""
    phase = "start"
    info = {"pid": os.getpid()}
    t_spawn = time.monotonic()
    try:
        import numpy  # noqa: F401  (the engine's bookkeeping; fail here, clearly, if it is missing)
        import torch
        phase = "cuda"
        if not torch.cuda.is_available():
            raise SetupError("cuda", "torch.cuda.is_available() is False")
        torch.set_grad_enabled(False)
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        stream = torch.cuda.Stream(device)
        torch.cuda.set_stream(stream)
        info.update(torch=torch.__version__, gpu=torch.cuda.get_device_name(device))

        phase = "model"
        torch.manual_seed(args.seed)
        model = Model(args, device)
        torch.cuda.synchronize()
        info.update(params=model.params, weights_bytes=2 * model.params)

        phase = "profile"
        model.prefill(args.max_prompt)  # the largest activations serving will need
        torch.cuda.synchronize()
        coord.profiled()

        phase = "kv-cache"
        free, total = torch.cuda.mem_get_info(device)
        agreed = coord.agree_free(free)
        target = int(agreed * args.gpu_memory_utilization / coord.share)
        block_bytes = args.block_size * model.kv_bytes_per_token
        blocks = target // block_bytes
        per_seq = args.max_seq // args.block_size
        slots = min(args.max_batch, blocks // per_seq)
        info.update(free_bytes=free, total_bytes=total, free_agreed_bytes=agreed, kv_cache_bytes=blocks * block_bytes,
                    kv_blocks=blocks, block_size=args.block_size, slots=slots,
                    gpu_memory_utilization=args.gpu_memory_utilization)
        log(f"{args.name}: free {common.gib(free)} of {common.gib(total)}; KV cache {args.gpu_memory_utilization:g}"
            + (f" x min free {common.gib(agreed)} / {coord.share}" if coord.share > 1 else " x free")
            + f" = {common.gib(blocks * block_bytes)}: {blocks} blocks of {args.block_size} tokens, "
            f"{slots} sequence slots of {args.max_seq} tokens")
        if slots < 1:
            raise SetupError("kv-cache", f"a KV cache of {target} bytes ({blocks} blocks) cannot hold one sequence "
                             f"of {args.max_seq} tokens ({per_seq} blocks of {block_bytes} bytes)", oom=True)
        try:
            flat = torch.zeros(blocks * block_bytes // 2, dtype=torch.bfloat16, device=device)
        except torch.cuda.OutOfMemoryError as e:
            raise SetupError("kv-cache", f"allocating the KV cache of {blocks * block_bytes} bytes "
                             f"({args.gpu_memory_utilization:g} x the free {agreed} bytes"
                             + (f" / {coord.share}" if coord.share > 1 else "")
                             + f") failed: {str(e).splitlines()[0]}", oom=True) from e
        model.attach_cache(flat, slots)
        torch.cuda.synchronize()

        phase = "capture"
        static = Static(torch, slots, model.H, model.S, device)
        buckets = buckets_for(slots)
        side = torch.cuda.Stream(device)
        side.wait_stream(stream)
        with torch.cuda.stream(side):  # warm-up outside capture (library handles, workspaces)
            for B in reversed(buckets):
                model.decode(B, static)
        stream.wait_stream(side)
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        graphs = {}
        for B in reversed(buckets):  # largest first: smaller graphs reuse its pool memory
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                model.decode(B, static)
            graphs[B] = g
        for B in buckets:  # each graph once, so a bad one fails here and not mid-run
            graphs[B].replay()
        torch.cuda.synchronize()
        static.tok.zero_()
        static.pos.zero_()
        torch.cuda.synchronize()
        info.update(buckets=buckets, reserved_after_capture_bytes=torch.cuda.memory_reserved(device))
    except SetupError:
        raise
    except Exception as e:
        oom = type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e).lower()
        raise SetupError(phase, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", oom=oom) from e

    phase = "serve"
    info["startup_s"] = round(time.monotonic() - t_spawn, 2)
    go_at = coord.ready({"pid": os.getpid(), "startup_s": info["startup_s"]})
    window = (go_at + args.warmup, go_at + args.warmup + args.seconds)
    engine = Engine(args, model, static, graphs, slots, stream)
    stop = threading.Event()
    clients = [threading.Thread(target=client_loop, name=f"client-{i}", daemon=True,
                                args=(i, args, args.seed + 7919 * coord.index, engine.waiting, stop, go_at))
               for i in range(args.clients)]
    for c in clients:
        c.start()
    common.sleep_until(go_at)
    try:
        engine.run(window)
    except Exception as e:
        raise SetupError("serve", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                         oom=False) from e
    finally:
        stop.set()
        engine.release_clients()
    torch.cuda.synchronize()
    done = engine.completed
    info.update(
        t_start=window[0], t_end=window[1], window_s=args.seconds, tokens=engine.tokens_in_window,
        requests=len(done), decode_steps=engine.steps_in_window,
        mean_batch=engine.lanes_in_window / engine.steps_in_window if engine.steps_in_window else None,
        max_reserved_bytes=torch.cuda.max_memory_reserved(device),
        samples={"latency_ms": [1000 * (r.t_done - r.t_submit) for r in done],
                 "ttft_ms": [1000 * (r.t_first - r.t_submit) for r in done],
                 "tpot_ms": [1000 * (r.t_done - r.t_first) / (r.output - 1) for r in done if r.output > 1],
                 "replay_call_us": engine.replay_us, "step_wait_us": engine.step_wait_us})
    return info


def finish(result, args):
    """Adds rates and percentiles computed from the raw samples (merged over processes)."""
    samples = result.pop("samples")
    result["tokens_per_s"] = result["tokens"] / args.seconds
    result["requests_per_s"] = result["requests"] / args.seconds
    for key, values in samples.items():
        result[key] = common.summarize(values)
    return result


# --- an instance of several processes --------------------------------------------------------------

def run_workers(args, sampler):
    """Starts args.processes engine processes, coordinates their cache sizing and start, and merges
    their results. Uses no CUDA itself."""
    import tempfile
    wdir = tempfile.mkdtemp(prefix="vgpu-serve-workers-")
    n = args.processes
    procs = []
    for i in range(n):
        clients = args.clients // n + (1 if i < args.clients % n else 0)
        procs.append(subprocess.Popen(worker_argv(args, i, clients, wdir), stdout=subprocess.DEVNULL))
        sampler.add(procs[-1].pid)

    def alive():
        dead = [(i, p.returncode) for i, p in enumerate(procs) if p.poll() is not None]
        return f"worker {dead[0][0]} exited with status {dead[0][1]}" if dead else None

    def gather(phase):
        return [common.await_file(wdir, f"{phase}.{i}", args.barrier_timeout, alive) for i in range(n)]

    barrier_error = None
    try:
        gather("profiled")
        common.arrive(wdir, "measure")
        free = min(m["free"] for m in gather("measured"))
        common.arrive(wdir, "allocate", {"free": free})
        ready = gather("ready")
        info = {"startup_s": max(r["startup_s"] for r in ready)}
        go_at = Solo(args).ready(info)
        common.arrive(wdir, common.GO, {"t": go_at})
    except common.BarrierError as e:
        barrier_error = str(e)
        for p in procs:
            if p.poll() is None:
                p.kill()
    results = []
    for i, p in enumerate(procs):
        try:
            p.wait(timeout=args.warmup + args.seconds + args.barrier_timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        try:
            with open(os.path.join(wdir, f"result.{i}.json")) as f:
                results.append(json.load(f))
        except (OSError, ValueError):
            results.append({"ok": False, "phase": "?", "error": f"worker {i} exited with status {p.returncode} "
                            "and wrote no result"})
    shutil.rmtree(wdir, ignore_errors=True)
    # a worker's own error first; those killed after it only say that they were
    bad = sorted((r for r in results if not r.get("ok")), key=lambda r: r.get("phase") == "?")
    if bad or barrier_error:
        errors = [f"{r.get('name', '?')}: {r.get('error')}" for r in bad] + ([barrier_error] if barrier_error else [])
        return {"ok": False, "phase": bad[0].get("phase") if bad else "barrier",
                "oom": any(r.get("oom") for r in bad), "error": "; ".join(errors), "workers": results}
    merged = {"ok": True, "pid": os.getpid(), "worker_pids": [r["pid"] for r in results],
              "free_bytes": min(r["free_bytes"] for r in results), "total_bytes": results[0]["total_bytes"]}
    for key in ("kv_cache_bytes", "kv_blocks", "slots", "tokens", "requests", "decode_steps", "weights_bytes"):
        merged[key] = sum(r[key] for r in results)
    for key in ("t_start", "t_end", "window_s", "block_size", "buckets", "gpu", "torch", "gpu_memory_utilization",
                "params"):
        merged[key] = results[0][key]
    merged["startup_s"] = max(r["startup_s"] for r in results)
    merged["samples"] = {k: [v for r in results for v in r["samples"][k]] for k in results[0]["samples"]}
    merged["per_process"] = [{k: r.get(k) for k in ("pid", "free_bytes", "kv_cache_bytes", "slots", "tokens",
                                                    "requests", "max_reserved_bytes")} for r in results]
    return merged


# Options a worker gets from its instance, as parsed (not its argv: no abbreviations, no instance options).
WORKER_OPTIONS = ("layers", "d_model", "heads", "ffn", "vocab", "max_seq", "gpu_memory_utilization", "block_size",
                  "max_batch", "prefill_tokens", "min_prompt", "max_prompt", "min_output", "max_output", "think_ms",
                  "seed", "warmup", "seconds", "barrier_timeout")


def worker_argv(args, index, clients, wdir):
    argv = [sys.executable, os.path.abspath(__file__)]
    for key in WORKER_OPTIONS:
        argv += ["--" + key.replace("_", "-"), str(getattr(args, key))]
    return argv + ["--clients", str(clients), "--name", f"{args.name}.{index}",
                   "--worker", wdir, str(index), str(args.processes), "--json", os.path.join(wdir, f"result.{index}.json")]


# --- main ------------------------------------------------------------------------------------------

def summary_line(r):
    def ms(d, k):
        return "?" if not d or d.get(k) is None else f"{d[k]:.1f}"

    return (f"serve {r['name']}: {r['tokens_per_s']:.0f} tokens/s, {r['requests_per_s']:.1f} requests/s; "
            f"latency p50 {ms(r['latency_ms'], 'p50')} ms p99 {ms(r['latency_ms'], 'p99')} ms; "
            f"TPOT p50 {ms(r['tpot_ms'], 'p50')} ms p99 {ms(r['tpot_ms'], 'p99')} ms; "
            f"peak NVML {common.gib(r['nvml_peak_bytes'])}; free {common.gib(r['free_bytes'])}; "
            f"KV cache {common.gib(r['kv_cache_bytes'])} ({r['kv_blocks']} blocks, {r['slots']} slots)")


def main():
    args = parse_args()
    is_worker = args.worker is not None
    # the instance samples NVML for all its processes; a worker leaves that to its instance
    sampler = PeakSampler([os.getpid()], args.nvml_interval_ms / 1000.0)
    if not is_worker:
        sampler.start()
    result = {"name": args.name, "processes": args.processes, "args": vars(args)}
    status = 0
    try:
        if args.processes > 1 and not is_worker:
            merged = run_workers(args, sampler)
            if not merged.pop("ok"):
                raise SetupError(merged["phase"], merged["error"], oom=merged["oom"], merged=True)
            result.update(merged)
        else:
            coord = Worker(args) if is_worker else Solo(args)
            result.update(serve_process(args, coord))
        result["ok"] = True
        if not is_worker:
            finish(result, args)
    except SetupError as e:
        result.update(ok=False, phase=e.phase, oom=e.oom, error=e.describe())
        status = EXIT_OOM if e.oom and e.phase != "serve" else 1
        if e.__cause__ is not None:
            cause = e.__cause__
            result["traceback"] = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))[-3000:]
    except common.BarrierError as e:
        result.update(ok=False, phase="barrier", error=f"barrier: {e}")
        status = 1
    result.update(sampler.stop() if not is_worker else {})
    if result.get("ok") and not is_worker and result.get("nvml_peak_bytes") is None:
        log(f"warning: no NVML figure ({result.get('nvml_error')})")
    text = json.dumps(result, default=str)
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            f.write(text)
        os.rename(args.json + ".tmp", args.json)
    if not is_worker:
        print(summary_line(result) if result.get("ok") else f"serve {args.name}: FAILED: {result['error']}",
              flush=True)
        print(text, flush=True)
    elif not result.get("ok"):
        log(f"{args.name}: {result['error']}")
    return status


if __name__ == "__main__":
    sys.exit(main())
