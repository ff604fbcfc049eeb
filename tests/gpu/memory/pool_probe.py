"""Diagnostic (not part of run.sh): how the device's default stream-ordered pool grows and what
its unused reserve can still serve, under PyTorch's cudaMallocAsync backend.

Replays free_check.py's seeded sequence (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, set by
the caller) and prints, for every allocation, how much the pool's reserve grew against the block
rounded to 2 MiB:

    alloc bytes=<n> rounded=<n> growth=<n> extra=<growth - rounded, when it grew> reserved=<n> used=<n>

then trims the pool as free_check.py does and prints what stays reserved, and which single
allocations the unused reserve serves without growing (largest found by bisection, 2 MiB steps):

    trimmed reserved=<n> used=<n> unused=<n>
    fragment largest_without_growth=<n>

    python3 pool_probe.py --seed 3 [--ops 60] [--max-mib 256]
"""
import argparse
import ctypes
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import free_check  # noqa: E402

MiB = 1 << 20
RESERVED, USED, RELEASE_THRESHOLD = 5, 7, 4  # CU_MEMPOOL_ATTR_*


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--ops", type=int, default=60)
    ap.add_argument("--max-mib", type=int, default=256)
    args = ap.parse_args()
    if "cudaMallocAsync" not in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        raise SystemExit("pool_probe.py: set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync")
    fw = free_check.Torch(2 * MiB)
    cu = ctypes.CDLL("libcuda.so.1")
    pool = ctypes.c_void_p()
    if cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), 0) != 0:
        raise SystemExit("pool_probe.py: cuDeviceGetDefaultMemPool failed")

    def attr(which):
        v = ctypes.c_uint64()
        rc = cu.cuMemPoolGetAttribute(pool, ctypes.c_int(which), ctypes.byref(v))
        if rc != 0:
            raise SystemExit(f"pool_probe.py: cuMemPoolGetAttribute({which}) failed: CUresult {rc}")
        return v.value

    print(f"pool release_threshold={attr(RELEASE_THRESHOLD)} reserved={attr(RESERVED)} used={attr(USED)}", flush=True)
    last = [attr(RESERVED)]

    def on_alloc(n):
        reserved = attr(RESERVED)
        growth = reserved - last[0]
        rounded = (n + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)
        extra = growth - rounded if growth > 0 else 0
        print(f"alloc bytes={n} rounded={rounded} growth={growth} extra={extra} reserved={reserved} used={attr(USED)}",
              flush=True)
        last[0] = reserved

    live, held = free_check.random_sequence(fw, random.Random(args.seed), args.ops, args.max_mib, on_alloc)
    fw.release_caches()
    reserved, used = attr(RESERVED), attr(USED)
    free, total = fw.mem_info()
    print(f"trimmed reserved={reserved} used={used} unused={reserved - used} held={held} mem_info_free={free}",
          flush=True)

    def fits_without_growth(size):
        before = attr(RESERVED)
        t = fw.alloc(size)
        grew = attr(RESERVED) > before
        del t
        fw.torch.cuda.synchronize()
        if grew:
            fw.release_caches()
        return not grew

    lo, hi = 0, (reserved - used) // (2 * MiB)
    while lo < hi:  # largest k with k * 2 MiB served from the reserve
        mid = (lo + hi + 1) // 2
        if fits_without_growth(mid * 2 * MiB):
            lo = mid
        else:
            hi = mid - 1
    print(f"fragment largest_without_growth={lo * 2 * MiB}", flush=True)
    for size_mib in (1, 2, 8, 32, 64):
        print(f"fragment size={size_mib * MiB} without_growth={'yes' if fits_without_growth(size_mib * MiB) else 'no'}",
              flush=True)
    del live


if __name__ == "__main__":
    main()
