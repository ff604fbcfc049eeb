"""Real-GPU memory check, CuPy: run under LD_PRELOAD=libvgpu.so CUDA_DEVICE_MEMORY_LIMIT=<L>.
Prints cupy.cuda.runtime.memGetInfo(), allocates 64 MiB arrays until CuPy raises, and reports:

    result framework=cupy total_bytes=<n> free_bytes=<n> obtained_bytes=<n> error=<type>
           expected_type=yes|no   (exactly cupy.cuda.memory.OutOfMemoryError)

Usage: cupy_oom.py [--cap-mib 4096]
"""
import sys
import time

import cupy as cp

STEP = 64 << 20


def main():
    cap = 4096 << 20
    if len(sys.argv) == 3 and sys.argv[1] == "--cap-mib":
        cap = int(sys.argv[2]) << 20
    free, total = cp.cuda.runtime.memGetInfo()
    print(f"memGetInfo free={free} total={total}", flush=True)
    arrays = []
    obtained = 0
    error = "none"
    expected_type = "no"
    try:
        while obtained + STEP <= cap:
            arrays.append(cp.empty((STEP,), dtype=cp.uint8))
            obtained += STEP
        cp.cuda.Device().synchronize()
    except Exception as e:
        error = f"{type(e).__module__}.{type(e).__qualname__}"
        expected_type = "yes" if type(e) is cp.cuda.memory.OutOfMemoryError else "no"
        print(f"exception {error}: {str(e).splitlines()[0][:300]}", flush=True)
    # Hold the fullest state for 0.2 s: the outside observer samples about every millisecond and
    # once missed a hold of a few milliseconds (its peak then read as the bare context).
    time.sleep(0.2)
    del arrays
    cp.get_default_memory_pool().free_all_blocks()
    print(f"result framework=cupy total_bytes={total} free_bytes={free} obtained_bytes={obtained} error={error} "
          f"expected_type={expected_type}",
          flush=True)


if __name__ == "__main__":
    main()
