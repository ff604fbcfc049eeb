"""Real-GPU memory check, PyTorch: run under LD_PRELOAD=libvgpu.so CUDA_DEVICE_MEMORY_LIMIT=<L>
(PYTORCH_CUDA_ALLOC_CONF as the caller sets it). Prints torch.cuda.mem_get_info(), then
allocates 64 MiB tensors until PyTorch raises, and reports one line:

    result framework=torch alloc_conf=<conf> total_bytes=<n> free_bytes=<n> obtained_bytes=<n>
           error=<exception type> expected_type=yes|no reserved_bytes=<n>
(expected_type: the exception is exactly torch.cuda.OutOfMemoryError)

Usage: torch_oom.py [--cap-mib 4096]   (stops at the cap: a limit that is not enforced)
"""
import os
import sys
import time

import torch

STEP = 64 << 20


def main():
    cap = 4096 << 20
    if len(sys.argv) == 3 and sys.argv[1] == "--cap-mib":
        cap = int(sys.argv[2]) << 20
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") or "default"
    free, total = torch.cuda.mem_get_info()
    print(f"mem_get_info free={free} total={total}", flush=True)
    tensors = []
    obtained = 0
    error = "none"
    expected_type = "no"
    try:
        while obtained + STEP <= cap:
            tensors.append(torch.empty(STEP, dtype=torch.uint8, device="cuda"))
            obtained += STEP
        torch.cuda.synchronize()
    except Exception as e:  # the exact type is the result
        error = f"{type(e).__module__}.{type(e).__qualname__}"
        expected_type = "yes" if type(e) is torch.cuda.OutOfMemoryError else "no"
        print(f"exception {error}: {str(e).splitlines()[0][:300]}", flush=True)
    # Hold the fullest state for 0.2 s: the outside observer samples about every millisecond and
    # once missed a hold of a few milliseconds (its peak then read as the bare context).
    time.sleep(0.2)
    reserved = torch.cuda.memory_reserved()
    del tensors
    torch.cuda.empty_cache()
    print(f"result framework=torch alloc_conf={conf.replace(' ', '')} total_bytes={total} free_bytes={free} "
          f"obtained_bytes={obtained} error={error} expected_type={expected_type} reserved_bytes={reserved}", flush=True)


if __name__ == "__main__":
    main()
