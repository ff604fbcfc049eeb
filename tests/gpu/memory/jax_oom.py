"""Real-GPU memory check, JAX: run under LD_PRELOAD=libvgpu.so CUDA_DEVICE_MEMORY_LIMIT=<L> with
JAX's default preallocation (75% of the device total). Reports the allocator's limit
(memory_stats()['bytes_limit']), then allocates 64 MiB arrays until JAX raises, and prints:

    result framework=jax bytes_limit=<n> pool_bytes=<n> obtained_bytes=<n> error=<type>
           expected_type=yes|no resource_exhausted=yes|no
(expected_type: XlaRuntimeError / jax.errors.JaxRuntimeError; the message must say RESOURCE_EXHAUSTED)

Usage: jax_oom.py [--cap-mib 4096]
"""
import sys
import time

import jax
import jax.numpy as jnp

STEP = 64 << 20


def main():
    cap = 4096 << 20
    if len(sys.argv) == 3 and sys.argv[1] == "--cap-mib":
        cap = int(sys.argv[2]) << 20
    dev = jax.devices()[0]
    # The first operation makes XLA create its allocator (and preallocate).
    jnp.zeros((1,), dtype=jnp.float32).block_until_ready()
    stats = dev.memory_stats() or {}
    print("memory_stats " + " ".join(f"{k}={v}" for k, v in sorted(stats.items()) if "bytes" in k), flush=True)
    bytes_limit = stats.get("bytes_limit", -1)
    pool_bytes = stats.get("pool_bytes", stats.get("bytes_reserved", -1))
    arrays = []
    obtained = 0
    error = "none"
    exhausted = "no"
    expected_type = "no"
    try:
        while obtained + STEP <= cap:
            a = jnp.zeros((STEP // 4,), dtype=jnp.float32)
            a.block_until_ready()
            arrays.append(a)
            obtained += STEP
    except Exception as e:
        error = f"{type(e).__module__}.{type(e).__qualname__}"
        exhausted = "yes" if "RESOURCE_EXHAUSTED" in str(e) else "no"
        runtime_error = getattr(jax.errors, "JaxRuntimeError", None)
        if runtime_error is not None and isinstance(e, runtime_error):
            expected_type = "yes"
        elif type(e).__name__ in ("XlaRuntimeError", "JaxRuntimeError"):
            expected_type = "yes"
        print(f"exception {error}: {str(e).splitlines()[0][:300]}", flush=True)
    # Hold the fullest state for 0.2 s: the outside observer samples about every millisecond and
    # once missed a hold of a few milliseconds (its peak then read as the bare context).
    time.sleep(0.2)
    del arrays
    print(f"result framework=jax bytes_limit={bytes_limit} pool_bytes={pool_bytes} obtained_bytes={obtained} "
          f"error={error} expected_type={expected_type} resource_exhausted={exhausted}", flush=True)


if __name__ == "__main__":
    main()
