"""Diagnostic for the stream-ordered pool under a memory limit: what NVML attributes to a PyTorch
process (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) at each step of filling the limit.

Prints one line per step, each starting with CLOCK_MONOTONIC nanoseconds so that it sorts
together with the lines of `nvml_peak.py --trace`:

    <ns> event <name> obtained=<bytes> pool_reserved=<bytes> pool_used=<bytes>

Usage (tests/gpu/memory/async_probe.sh runs it that way):
    nvml_peak.py --gpus 0 --trace T -- env LD_PRELOAD=libvgpu.so CUDA_DEVICE_MEMORY_LIMIT=1g \
        PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 async_probe.py [--cap-mib 4096]
"""
import sys
import time

import torch

STEP = 64 << 20


def event(name, obtained):
    stats = torch.cuda.memory_stats()
    reserved = torch.cuda.memory_reserved()
    used = stats.get("allocated_bytes.all.current", -1)
    print(f"{time.monotonic_ns()} event {name} obtained={obtained} pool_reserved={reserved} pool_used={used}",
          flush=True)


def main():
    cap = 4096 << 20
    if len(sys.argv) == 3 and sys.argv[1] == "--cap-mib":
        cap = int(sys.argv[2]) << 20
    torch.cuda.init()
    torch.cuda.synchronize()
    time.sleep(0.05)
    event("context", 0)
    tensors = []
    obtained = 0
    try:
        while obtained + STEP <= cap:
            tensors.append(torch.empty(STEP, dtype=torch.uint8, device="cuda"))
            obtained += STEP
            event(f"alloc{len(tensors)}", obtained)
        torch.cuda.synchronize()
        event("cap-reached", obtained)
    except torch.cuda.OutOfMemoryError as e:
        event("oom-caught", obtained)
        print(f"{time.monotonic_ns()} exception {str(e).splitlines()[0][:200]}", flush=True)
    time.sleep(0.05)
    torch.cuda.synchronize()
    event("synchronized", obtained)
    del tensors
    torch.cuda.synchronize()
    event("freed", 0)
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    time.sleep(0.05)
    event("empty-cache", 0)


if __name__ == "__main__":
    main()
