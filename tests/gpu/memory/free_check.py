"""Real-GPU check: the free figure is what can be allocated.

Run under LD_PRELOAD=libvgpu.so with a memory limit (or natively, for comparison). After a seeded
random sequence of allocations and frees (1-256 MiB, most sizes not multiples of 2 MiB, a kernel
now and then), with part of it still held, the framework's caches are emptied (what vLLM does
before sizing its KV cache) and the free figure is read the framework's way. Then:

  - one allocation of (free - granule) must succeed (granule: what the allocator rounds to);
  - after releasing it, one allocation of (free + 64 MiB) must be refused with the framework's
    own out-of-memory error.

Frameworks (--framework):
  driver             plain cuMemAlloc_v2 through ctypes (cuMemGetInfo_v2), granule 2 MiB
  torch              PyTorch default caching allocator (torch.cuda.mem_get_info), granule 2 MiB
  torch-expandable   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set by the caller), 20 MiB
  torch-async        PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (set by the caller), 2 MiB
  cupy               CuPy's default pool (cupy.cuda.runtime.memGetInfo), granule 2 MiB
  jax                JAX with XLA_PYTHON_CLIENT_ALLOCATOR=platform (set by the caller); the free
                     figure from cuMemGetInfo_v2 through ctypes in the same process, granule 2 MiB

Prints one line:
  result framework=<f> seed=<n> ops=<n> held_mib=<x> free_bytes=<n> total_bytes=<n> granule=<n>
         fit=yes|no fit_error=<type> refused=yes|no refused_error=<type> expected_type=yes|no
(expected_type: the refusal raised the framework's normal OOM type). Exit status 0 either way;
the caller judges (tests/gpu/memory/run_memory.sh).
"""
import argparse
import ctypes
import os
import random
import sys
import time

MiB = 1 << 20
EXTRA = 64 * MiB


class Driver:
    """cuMemAlloc_v2 / cuMemFree_v2 / cuMemGetInfo_v2 through ctypes (the dlsym layer of libvgpu)."""
    granule = 2 * MiB

    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.check(self.cu.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self.check(self.cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self.check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "cuDevicePrimaryCtxRetain")
        self.check(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    @staticmethod
    def check(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    def alloc(self, n):
        p = ctypes.c_uint64()
        rc = self.cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n))
        if rc == 2:  # CUDA_ERROR_OUT_OF_MEMORY
            raise MemoryError("CUDA_ERROR_OUT_OF_MEMORY")
        self.check(rc, "cuMemAlloc_v2")
        return p.value

    def free_buffer(self, p):
        self.check(self.cu.cuMemFree_v2(ctypes.c_uint64(p)), "cuMemFree_v2")

    def kernel(self, _):
        pass  # no module: the driver path allocates only

    def release_caches(self):
        pass

    def mem_info(self):
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.check(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        self.check(self.cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
        return free.value, total.value

    def is_oom(self, e):
        return isinstance(e, MemoryError)


class Torch:
    def __init__(self, granule):
        import torch
        self.torch = torch
        self.granule = granule
        torch.cuda.init()
        torch.zeros(1, device="cuda")

    def alloc(self, n):
        return self.torch.empty(n, dtype=self.torch.uint8, device="cuda")

    def free_buffer(self, t):
        del t

    def kernel(self, t):
        t[: min(t.numel(), 1 << 20)].add_(1)
        self.torch.cuda.synchronize()

    def release_caches(self):
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()
        if "cudaMallocAsync" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
            # The backend allocates from the device's default pool, whose unused reserve counts as
            # used (natively too); give it back, as an engine sizing itself would.
            cu = ctypes.CDLL("libcuda.so.1")
            pool = ctypes.c_void_p()
            if cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), 0) != 0 or cu.cuMemPoolTrimTo(pool, ctypes.c_size_t(0)) != 0:
                raise RuntimeError("cannot trim the default memory pool")

    def mem_info(self):
        return self.torch.cuda.mem_get_info()

    def is_oom(self, e):
        return type(e) is self.torch.cuda.OutOfMemoryError


class Cupy:
    granule = 2 * MiB

    def __init__(self):
        import cupy
        self.cupy = cupy
        cupy.zeros(1)

    def alloc(self, n):
        return self.cupy.empty(n, dtype=self.cupy.uint8)

    def free_buffer(self, a):
        del a

    def kernel(self, a):
        a[: min(a.size, 1 << 20)] += 1
        self.cupy.cuda.Device().synchronize()

    def release_caches(self):
        self.cupy.cuda.Device().synchronize()
        self.cupy.get_default_memory_pool().free_all_blocks()

    def mem_info(self):
        return self.cupy.cuda.runtime.memGetInfo()

    def is_oom(self, e):
        return type(e) is self.cupy.cuda.memory.OutOfMemoryError


class Jax:
    granule = 2 * MiB

    def __init__(self):
        import jax
        import jax.numpy as jnp
        self.jax, self.jnp = jax, jnp
        jnp.zeros(1).block_until_ready()
        self.driver_view = Driver()  # the same primary context JAX uses

    def alloc(self, n):
        return self.jnp.zeros((n,), dtype=self.jnp.uint8).block_until_ready()

    def free_buffer(self, a):
        a.delete()

    def kernel(self, a):
        (a[:1024] + 1).block_until_ready()

    def release_caches(self):
        import gc
        gc.collect()

    def mem_info(self):
        return self.driver_view.mem_info()

    def is_oom(self, e):
        return "RESOURCE_EXHAUSTED" in str(e) or "out of memory" in str(e).lower()


def make(framework):
    if framework == "driver":
        return Driver()
    if framework == "torch":
        return Torch(2 * MiB)
    if framework == "torch-expandable":
        return Torch(20 * MiB)  # PyTorch maps expandable segments of the large pool in 20 MiB pages
    if framework == "torch-async":
        return Torch(2 * MiB)
    if framework == "cupy":
        return Cupy()
    if framework == "jax":
        return Jax()
    raise SystemExit(f"free_check.py: unknown framework {framework}")


def type_name(e):
    return f"{type(e).__module__}.{type(e).__qualname__}" if e is not None else "none"


def random_sequence(fw, rng, ops, max_mib, on_alloc=None):
    """The seeded random allocations and frees; returns (live [(bytes, buffer)], bytes held).
    on_alloc(n) is called after each successful allocation (tests/gpu/memory/pool_probe.py)."""
    live = []
    held = 0
    for op in range(ops):
        if live and (rng.random() < 0.4):
            n, buf = live.pop(rng.randrange(len(live)))
            fw.free_buffer(buf)
            held -= n
            continue
        n = rng.randint(1 * MiB, max_mib * MiB)
        if rng.random() < 0.8:
            n += rng.randint(1, 2 * MiB - 1)  # not a multiple of the granule
        try:
            buf = fw.alloc(n)
        except Exception as e:  # the limit is near: give something back
            if not fw.is_oom(e):
                raise
            if live:
                m, old = live.pop(rng.randrange(len(live)))
                fw.free_buffer(old)
                held -= m
            continue
        live.append((n, buf))
        held += n
        if on_alloc is not None:
            on_alloc(n)
        if op % 7 == 0:
            fw.kernel(buf)
    return live, held


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--framework", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ops", type=int, default=60)
    ap.add_argument("--max-mib", type=int, default=256)
    args = ap.parse_args()
    fw = make(args.framework)
    live, held = random_sequence(fw, random.Random(args.seed), args.ops, args.max_mib)
    fw.release_caches()
    free, total = fw.mem_info()
    print(f"mem_info free={free} total={total} held={held} live={len(live)}", flush=True)

    fit_error = None
    size = max(free - fw.granule, 0)
    try:
        buf = fw.alloc(size)
        time.sleep(0.2)  # hold: the outside observer samples every millisecond
        fw.free_buffer(buf)
        del buf
    except Exception as e:
        fit_error = e
        print(f"fit: {type_name(e)}: {str(e).splitlines()[0][:300]}", flush=True)
    fw.release_caches()
    free2, _ = fw.mem_info()
    refused_error = None
    try:
        buf = fw.alloc(free2 + EXTRA)
        time.sleep(0.2)
        fw.free_buffer(buf)
        del buf
    except Exception as e:
        refused_error = e
    expected = refused_error is not None and fw.is_oom(refused_error)
    print(f"result framework={args.framework} seed={args.seed} ops={args.ops} held_mib={held / MiB:.1f} "
          f"free_bytes={free} free_after_bytes={free2} total_bytes={total} granule={fw.granule} "
          f"fit={'no' if fit_error is not None else 'yes'} fit_error={type_name(fit_error)} "
          f"refused={'yes' if refused_error is not None else 'no'} refused_error={type_name(refused_error)} "
          f"expected_type={'yes' if expected else 'no'}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
