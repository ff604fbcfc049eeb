"""What serve.py, run.py and their test share; imports nothing beyond the standard library.

Barrier files. Processes that must start their measurement together (co-located instances, the
worker processes of one instance) meet through files in a directory: a process announces a phase
by creating `<phase>.<name>` (a JSON payload, written to a temporary name and renamed, so a reader
never sees half a file), and waits for the coordinator's file (`go`, `measure`, `allocate`). The
coordinator is run.py for instances and the instance's first process for its workers.

    instance (serve.py --barrier DIR NAME)        run.py
      capture graphs, then  DIR/ready.NAME  ->    waits for every ready.*
      waits for DIR/go  <-  {"t": T}              writes go once all are ready
      clients start at T (CLOCK_MONOTONIC, shared by all processes of the machine)

Sizes follow the library's syntax: a byte count, or a number with k/m/g or KiB/MiB/GiB (all powers
of 1024, case-insensitive).
"""
import json
import math
import os
import re
import time

GO = "go"


class BarrierError(RuntimeError):
    """A barrier file did not appear in time, or the process it waits for is gone."""


def arrive(directory, name, payload=None):
    """Creates directory/name atomically with a JSON payload."""
    path = os.path.join(directory, name)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(payload if payload is not None else {}, f)
    os.rename(tmp, path)


def present(directory, name):
    return os.path.exists(os.path.join(directory, name))


def await_file(directory, name, timeout_s, alive=None, poll_s=0.02):
    """Waits for directory/name and returns its payload. Raises BarrierError after timeout_s, or as
    soon as alive() (when given) returns a reason (a non-empty string) to stop waiting."""
    path = os.path.join(directory, name)
    deadline = time.monotonic() + timeout_s
    while True:
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        if alive is not None:
            reason = alive()
            if reason:
                raise BarrierError(f"stopped waiting for {path}: {reason}")
        if time.monotonic() > deadline:
            raise BarrierError(f"{path} did not appear within {timeout_s:g} s")
        time.sleep(poll_s)


def sleep_until(t):
    """Sleeps until CLOCK_MONOTONIC time t (seconds)."""
    while True:
        left = t - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.05))


# --- sizes ---------------------------------------------------------------------------------------

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*", re.I)


def parse_size(text):
    """Bytes from '16GiB', '512m', '1.5g', '1048576'; ValueError naming the text otherwise."""
    m = _SIZE.fullmatch(text or "")
    if not m or (m.group(3) and not m.group(2) and m.group(3).lower() != "b"):
        raise ValueError(f"invalid size {text!r}: expected bytes or a number with k/m/g/t or KiB/MiB/GiB/TiB")
    scale = 1024 ** " kmgt".index((m.group(2) or " ").lower())
    value = float(m.group(1)) * scale
    if value != int(value) or value < 1:
        raise ValueError(f"invalid size {text!r}: not a whole number of bytes")
    return int(value)


def gib(n):
    return "?" if n is None else f"{n / 2**30:.2f} GiB"


# --- statistics ----------------------------------------------------------------------------------

def percentile(values, q):
    """The q-th percentile (0..100) by linear interpolation between closest ranks; None if empty."""
    if not values:
        return None
    s = sorted(values)
    rank = (len(s) - 1) * q / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


def summarize(values):
    """{'n', 'p50', 'p99', 'mean', 'max'} of a list of numbers (None entries when it is empty)."""
    return {"n": len(values), "p50": percentile(values, 50), "p99": percentile(values, 99),
            "mean": sum(values) / len(values) if values else None, "max": max(values) if values else None}


# --- the result of one instance (serve.py --json), read by run.py ---------------------------------

# Keys every successful result carries; run.py refuses a result without them.
RESULT_KEYS = ("ok", "name", "processes", "tokens_per_s", "requests_per_s", "tokens", "requests",
               "latency_ms", "tpot_ms", "ttft_ms", "nvml_peak_bytes", "free_bytes", "kv_cache_bytes",
               "kv_blocks", "slots", "t_start", "t_end")


def check_result(result):
    """None when result is a complete successful result, else what is wrong with it."""
    if not isinstance(result, dict):
        return "not a JSON object"
    if not result.get("ok"):
        return result.get("error") or "ok is false"
    missing = [k for k in RESULT_KEYS if k not in result]
    return f"missing keys: {', '.join(missing)}" if missing else None
