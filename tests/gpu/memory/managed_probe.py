#!/usr/bin/env python3
"""What the driver does with managed memory the GPU touches, natively (run WITHOUT libvgpu.so):
the question behind vgpu's oversubscription, which keeps spilled memory on the host.

    managed_probe.py --advise none|host [--mib 1024] [--reps 3]

Allocates --mib of managed memory (cuMemAllocManaged: CU_MEM_ATTACH_GLOBAL for "none";
CU_MEM_ATTACH_HOST plus cuMemAdvise_v2 PREFERRED_LOCATION = host and ACCESSED_BY = device 0 for
"host", exactly what vgpu does when it spills), makes a float32 tensor of it
(__cuda_array_interface__), has the GPU write and read all of it, and reports this process's
NVML per-process device memory and the device's used memory (nvmlDeviceGetMemoryInfo; meaningful
on a GPU nobody else uses) before and after, and the bandwidth of an in-place multiply:

    probe advise=<mode> nvml_pid_growth=<bytes> nvml_device_growth=<bytes> mul_gbps=<GB/s> ...
"""
import argparse
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nvml_peak import Nvml  # noqa: E402  (same directory)

CU_MEM_ATTACH_GLOBAL = 1
CU_MEM_ATTACH_HOST = 2
CU_MEM_ADVISE_SET_PREFERRED_LOCATION = 3
CU_MEM_ADVISE_SET_ACCESSED_BY = 5
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_LOCATION_TYPE_HOST = 2


class Location(ctypes.Structure):  # CUmemLocation
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class Managed:
    """A managed allocation seen by torch through __cuda_array_interface__."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes // 4,), "typestr": "<f4", "data": (ptr, False),
                                         "version": 3, "strides": None}


def own_usage(nvml):
    pid = os.getpid()
    for p, used in nvml.processes(0):
        if p == pid:
            return used or 0
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--advise", choices=["none", "host"], required=True)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    torch.cuda.synchronize()
    nvml = Nvml()
    before = own_usage(nvml)
    device_before = nvml.used(0)
    cuda = ctypes.CDLL("libcuda.so.1")
    nbytes = args.mib << 20
    ptr = ctypes.c_uint64(0)
    flags = CU_MEM_ATTACH_GLOBAL if args.advise == "none" else CU_MEM_ATTACH_HOST
    rc = cuda.cuMemAllocManaged(ctypes.byref(ptr), ctypes.c_size_t(nbytes), ctypes.c_uint(flags))
    if rc != 0:
        raise RuntimeError(f"cuMemAllocManaged returned {rc}")
    if args.advise == "host":
        for advice, location in ((CU_MEM_ADVISE_SET_PREFERRED_LOCATION, Location(CU_MEM_LOCATION_TYPE_HOST, 0)),
                                 (CU_MEM_ADVISE_SET_ACCESSED_BY, Location(CU_MEM_LOCATION_TYPE_DEVICE, 0))):
            rc = cuda.cuMemAdvise_v2(ptr, ctypes.c_size_t(nbytes), ctypes.c_int(advice), location)
            if rc != 0:
                raise RuntimeError(f"cuMemAdvise_v2({advice}) returned {rc}")
    t = torch.as_tensor(Managed(ptr.value, nbytes), device="cuda")
    t.fill_(1.0)
    for _ in range(3):
        t.add_(1.0)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.reps):
        t.mul_(1.0)
    end.record()
    end.synchronize()
    gbps = 2 * nbytes * args.reps / (start.elapsed_time(end) / 1000.0) / 1e9
    value = float(t[-1].item())
    after = own_usage(nvml)
    device_after = nvml.used(0)
    del t
    rc = cuda.cuMemFree_v2(ptr)
    if rc != 0:
        raise RuntimeError(f"cuMemFree_v2 returned {rc}")
    print(f"probe advise={args.advise} nvml_pid_before={before} nvml_pid_growth={after - before} "
          f"nvml_device_before={device_before} nvml_device_growth={device_after - device_before} "
          f"mul_gbps={gbps:.1f} last_value={value}", flush=True)


if __name__ == "__main__":
    main()
