"""A JAX workload for bench/compute_matrix.py: the jitted training step of an MLP. One workload per
process; prints one JSON line.

    python3 jax_workload.py train <warmup_s> <measure_s> [--barrier DIR NAME]

train: 4 bf16 layers of 4096 x 4096 with GELU, a batch of 2048, jax.value_and_grad of a mean
squared error and an SGD update, all under jax.jit (XLA fuses it into a few launches per step).
Steps are dispatched asynchronously in batches of ~10 ms of native work with at most two batches
in flight (after submitting one, the host waits for the one before it), so the GPU never runs dry
natively. Throughput: the steps submitted between two host timestamps, each taken
once everything submitted before it has finished (block_until_ready), so that no step queued
before the window counts in it. --barrier: see spin.cu. JAX preallocates 75% of the GPU's memory
by default, which co-located containers cannot all do: XLA_PYTHON_CLIENT_PREALLOCATE defaults to
false here. Errors raise, and the process exits non-zero.
"""
import argparse
import json
import os
import sys
import time

from warmup_barrier import warm_up

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

BATCH_S = 0.010  # native work per batch
WIDTH, LAYERS, ROWS = 4096, 4, 2048


def make_train():
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.PRNGKey(0), LAYERS + 2)
    weights = [jax.random.normal(keys[i], (WIDTH, WIDTH), dtype=jnp.bfloat16) * 0.01 for i in range(LAYERS)]
    x = jax.random.normal(keys[LAYERS], (ROWS, WIDTH), dtype=jnp.bfloat16)
    y = jax.random.normal(keys[LAYERS + 1], (ROWS, WIDTH), dtype=jnp.bfloat16)

    def loss_fn(ws):
        h = x
        for w in ws:
            h = jax.nn.gelu(h @ w)
        return jnp.mean((h.astype(jnp.float32) - y.astype(jnp.float32)) ** 2)

    @jax.jit
    def step(ws):
        loss, grads = jax.value_and_grad(loss_fn)(ws)
        return [w - 0.01 * g for w, g in zip(ws, grads)], loss

    return step, weights


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("workload", choices=["train"])
    p.add_argument("warmup_s", type=float)
    p.add_argument("measure_s", type=float)
    p.add_argument("--barrier", nargs=2, metavar=("DIR", "NAME"))
    args = p.parse_args()
    if args.warmup_s < 0 or not args.measure_s > 0:
        p.error("the warm-up must be >= 0 s and the window > 0 s")
    t_launch = time.monotonic()
    try:
        import jax
    except ImportError as e:
        sys.exit(f"jax_workload: cannot import JAX ({e})")

    if jax.default_backend() != "gpu":
        sys.exit(f"jax_workload: JAX runs on {jax.default_backend()!r}, not on a GPU")
    step, weights = make_train()
    weights, loss = step(weights)  # compiles
    loss.block_until_ready()
    t0 = time.monotonic()
    for _ in range(5):
        weights, loss = step(weights)
    loss.block_until_ready()
    batch = max(1, round(BATCH_S / ((time.monotonic() - t0) / 5)))
    state = {"ws": weights, "loss": loss, "submitted": 0, "ends": []}
    t_ready = time.monotonic()

    def submit_batch():
        ws, loss = state["ws"], state["loss"]
        for _ in range(batch):
            ws, loss = step(ws)
        state["ws"], state["loss"] = ws, loss
        state["submitted"] += batch
        state["ends"].append(loss)
        if len(state["ends"]) > 1:  # wait for the batch before this one
            state["ends"].pop(0).block_until_ready()

    def drain():
        state["loss"].block_until_ready()
        state["ends"].clear()

    warm_up(submit_batch, t_ready + args.warmup_s, args.barrier, "jax_workload")

    drain()
    at_start = state["submitted"]
    t_start = time.monotonic()
    while time.monotonic() - t_start < args.measure_s:
        submit_batch()
    drain()
    t_end = time.monotonic()
    steps = state["submitted"] - at_start
    result = {"units": steps, "seconds": t_end - t_start, "rate": steps / (t_end - t_start), "t_launch": t_launch,
              "t_ready": t_ready, "t_start": t_start, "t_end": t_end, "batch": batch,
              "loss": float(state["loss"])}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
