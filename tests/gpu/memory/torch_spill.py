#!/usr/bin/env python3
"""Real-GPU check of memory oversubscription, PyTorch: allocates --gib GiB of float32 tensors
(--chunk-mib each, filled with torch.rand from seeded CUDA generators), computes with them and
prints checksums that must be identical whether the tensors live on the device or spilled to
host memory. Then times a memory-bound op on each tensor.

Run natively, and under LD_PRELOAD=libvgpu.so CUDA_DEVICE_MEMORY_LIMIT=1GiB with or without
CUDA_OVERSUBSCRIBE=true. Output, one line each:

    mem_get_info free=<n> total=<n>
    tensor i=<k> managed=<0|1> preferred=<loc> accessed_by=<loc> memory_type=<n> ptr=<hex>
    ledger used=<n> spilled=<n> host_limit=<n> spill_peak=<n>   (with --vgpu: `vgpu ps --json`)
    result framework=torch allocated_bytes=<n> tensors=<n> device_tensors=<n> spilled_tensors=<n>
           checksum_int=<n> checksum_f64=<repr> error=<type or none> expected_type=yes|no
    bandwidth kind=<device|spilled> op=<mul_|sum> gbps=<median GB/s over tensors> tensors=<n>

"managed", "preferred" and "accessed_by" come from the driver (cuPointerGetAttribute,
cuMemRangeGetAttribute): a spilled tensor is managed memory, preferred on the host (-1) and
accessed by device 0. expected_type: the exception, if any, is exactly torch.cuda.OutOfMemoryError.

With --prefetch-spilled the job also asks the driver to bring every spilled tensor onto GPU 0
(cuMemPrefetchAsync_v2 to the device, cuMemAdvise_v2 preferred location = the device), which
vgpu must ignore: "prefetch codes=<results>" reports what those calls returned.

Usage: torch_spill.py [--gib 3] [--chunk-mib 256] [--reps 3] [--vgpu PATH-TO-vgpu --ledger PATH]
                      [--prefetch-spilled]
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys

import torch

CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION = 2
CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY = 3
CU_MEM_ADVISE_SET_PREFERRED_LOCATION = 3
CU_MEM_LOCATION_TYPE_DEVICE = 1


class Location(ctypes.Structure):  # CUmemLocation
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class Driver:
    """The few driver queries used here, through the process's own libcuda (vgpu passes them)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")

    def check(self, rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} returned CUresult {rc}")

    def pointer(self, attribute, ptr):
        value = ctypes.c_uint(0)
        self.check(self.lib.cuPointerGetAttribute(ctypes.byref(value), ctypes.c_int(attribute), ctypes.c_uint64(ptr)),
                   "cuPointerGetAttribute")
        return value.value

    def to_device(self, ptr, size):
        """Asks for [ptr, ptr + size) on device 0 by prefetch and by advice; the two results."""
        where = Location(CU_MEM_LOCATION_TYPE_DEVICE, 0)
        prefetch = self.lib.cuMemPrefetchAsync_v2(ctypes.c_uint64(ptr), ctypes.c_size_t(size), where, ctypes.c_uint(0),
                                                  ctypes.c_void_p(0))
        advise = self.lib.cuMemAdvise_v2(ctypes.c_uint64(ptr), ctypes.c_size_t(size),
                                         ctypes.c_int(CU_MEM_ADVISE_SET_PREFERRED_LOCATION), where)
        return prefetch, advise

    def range_int(self, attribute, ptr, size):
        value = ctypes.c_int(0)
        self.check(self.lib.cuMemRangeGetAttribute(ctypes.byref(value), ctypes.c_size_t(4), ctypes.c_int(attribute),
                                                   ctypes.c_uint64(ptr), ctypes.c_size_t(size)),
                   "cuMemRangeGetAttribute")
        return value.value


def ledger_line(vgpu, ledger):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run([vgpu, "ps", "--json", ledger], env=env, capture_output=True, text=True, check=True).stdout
    device = json.loads(out)["ledgers"][0]["devices"][0]
    print(f"ledger used={device['used']} spilled={device['spilled']} host_limit={device['host_limit']} "
          f"spill_peak={device['spill_peak']}", flush=True)


def timed(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()  # warm-up (first touch of spilled pages, kernel selection)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0 / reps  # seconds per call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=3.0)
    ap.add_argument("--chunk-mib", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--vgpu", default="")
    ap.add_argument("--ledger", default="")
    ap.add_argument("--prefetch-spilled", action="store_true")
    args = ap.parse_args()

    free, total = torch.cuda.mem_get_info()
    print(f"mem_get_info free={free} total={total}", flush=True)
    driver = Driver()
    chunk = args.chunk_mib << 20
    count = int(args.gib * (1 << 30)) // chunk
    numel = chunk // 4
    tensors, spilled = [], []
    error, expected_type = "none", "no"
    checksum_int, checksum_f64 = 0, 0.0
    try:
        for i in range(count):
            generator = torch.Generator(device="cuda").manual_seed(1000 + i)
            t = torch.rand(numel, generator=generator, device="cuda")
            ptr = t.data_ptr()
            managed = driver.pointer(CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr)
            preferred = accessed = -2
            if managed:
                preferred = driver.range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, ptr, chunk)
                accessed = driver.range_int(CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, ptr, chunk)
            memory_type = driver.pointer(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)
            print(f"tensor i={i} managed={managed} preferred={preferred} accessed_by={accessed} "
                  f"memory_type={memory_type} ptr={ptr:#x}", flush=True)
            tensors.append(t)
            spilled.append(bool(managed) and preferred == -1 and accessed == 0)
        torch.cuda.synchronize()
        if args.prefetch_spilled:
            codes = [driver.to_device(t.data_ptr(), chunk) for t, s in zip(tensors, spilled) if s]
            print(f"prefetch codes={','.join(f'{p}/{a}' for p, a in codes)}", flush=True)
            torch.cuda.synchronize()
        if args.vgpu and args.ledger:
            ledger_line(args.vgpu, args.ledger)
        # Work that mixes the first tensor (on the device when anything is) with all the others.
        first = tensors[0]
        for i, t in enumerate(tensors):
            t.mul_(1.5).add_(float(i))
            if i > 0:
                t.add_(first)
        for t in tensors:
            checksum_int = (checksum_int + int(t.view(torch.int32).sum(dtype=torch.int64).item())) % (1 << 64)
            checksum_f64 += float(t.sum(dtype=torch.float64).item())
        torch.cuda.synchronize()
    except Exception as e:  # the exact type is part of the result
        error = f"{type(e).__module__}.{type(e).__qualname__}"
        expected_type = "yes" if type(e) is torch.cuda.OutOfMemoryError else "no"
        print(f"exception {error}: {str(e).splitlines()[0][:300]}", flush=True)
    device_count = sum(1 for s in spilled if not s)
    print(f"result framework=torch allocated_bytes={len(tensors) * chunk} tensors={len(tensors)} "
          f"device_tensors={device_count} spilled_tensors={len(spilled) - device_count} "
          f"checksum_int={checksum_int} checksum_f64={checksum_f64!r} error={error} expected_type={expected_type}",
          flush=True)
    if error != "none":
        return
    # Throughput of a memory-bound op: in-place multiply (reads and writes the tensor) and a sum
    # (reads it), per tensor; the median over tensors of each kind.
    rates = {}
    for t, is_spilled in zip(tensors, spilled):
        kind = "spilled" if is_spilled else "device"
        mul = timed(lambda: t.mul_(1.0), args.reps)
        red = timed(lambda: t.sum(), args.reps)
        rates.setdefault((kind, "mul_"), []).append(2 * chunk / mul / 1e9)
        rates.setdefault((kind, "sum"), []).append(chunk / red / 1e9)
    for (kind, op), values in sorted(rates.items()):
        print(f"bandwidth kind={kind} op={op} gbps={statistics.median(values):.1f} tensors={len(values)}", flush=True)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
