"""The warm-up of bench/compute's Python workers (torch_workload.py, jax_workload.py), with the
start barrier of co-located containers (the protocol of spin.cu's --barrier): keep the GPU busy
through the warm-up, then, with a barrier, write DIR/ready.NAME and keep it busy until the time
the orchestrator writes into DIR/go (CLOCK_MONOTONIC seconds) has come."""
import os
import sys
import time

TIMEOUT_S = 120.0  # after the warm-up, how long to wait for the go


def warm_up(submit_batch, warm_end, barrier, who):
    """Calls submit_batch() until warm_end (monotonic seconds) and, with barrier = (DIR, NAME),
    until the go time; exits the process naming `who` if no go time comes within TIMEOUT_S."""
    ready_written = barrier is None
    go_at = None
    while True:
        submit_batch()
        now = time.monotonic()
        if now < warm_end:
            continue
        if barrier is None:
            return
        bdir, name = barrier
        if not ready_written:
            open(os.path.join(bdir, "ready." + name), "w").close()
            ready_written = True
        go = os.path.join(bdir, "go")
        if go_at is None and os.path.exists(go):
            with open(go) as f:
                text = f.read().strip()
            go_at = float(text) if text else None
        if go_at is not None and now >= go_at:
            return
        if now > warm_end + TIMEOUT_S:
            sys.exit(f"{who}: barrier timeout")
