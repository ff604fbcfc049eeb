"""Diagnostic: how NVML's per-process figure of a PyTorch process grows step by step, natively or
under the library (then the library's own view, cuMemGetInfo through torch.cuda.mem_get_info, is
printed beside it). What grows without an allocation call (lazily loaded modules, cuBLAS
workspaces, the stream-ordered allocator's setup) is what admission has to keep room for.

    torch_growth.py        one line per step: "step <name> nvml_mib=<x> delta_mib=<x>
                           torch_reserved_mib=<x> mem_get_info_free_mib=<x> total_mib=<x>"
"""
import ctypes
import os

import torch


class ProcessInfo(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0
dev = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
last = 0


def nvml_used():
    infos = (ProcessInfo * 256)()
    count = ctypes.c_uint(256)
    rc = nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(count), infos)
    assert rc == 0, rc
    for i in range(count.value):
        if infos[i].pid == os.getpid():
            return infos[i].usedGpuMemory
    return 0


def step(name):
    global last
    torch.cuda.synchronize()
    used = nvml_used()
    free, total = torch.cuda.mem_get_info()
    print(f"step {name:28s} nvml_mib={used / 2**20:8.1f} delta_mib={(used - last) / 2**20:7.1f} "
          f"torch_reserved_mib={torch.cuda.memory_reserved() / 2**20:8.1f} "
          f"mem_get_info_free_mib={free / 2**20:9.1f} total_mib={total / 2**20:9.1f}", flush=True)
    last = used


torch.cuda.init()
torch.zeros(1, device="cuda")
step("first tensor")
x = torch.randn(1024, 1024, device="cuda")
step("randn")
y = x @ x
step("fp32 matmul (cuBLAS)")
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
b = a @ a
step("bf16 matmul")
c = torch.nn.functional.gelu(b).softmax(-1)
step("gelu+softmax")
ln = torch.nn.LayerNorm(2048).cuda().to(torch.bfloat16)
d = ln(c)
step("layernorm")
e = torch.nn.functional.scaled_dot_product_attention(d[None, None], d[None, None], d[None, None])
step("sdpa")
loss = e.float().sum()
step("reduction")
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    f = d * 2
step("second stream")
g = torch.cuda.CUDAGraph()
static = torch.randn(256, 256, device="cuda")
with torch.cuda.graph(g):
    out = static @ static
g.replay()
step("cuda graph")
del x, y, a, b, c, d, e, f, out
torch.cuda.empty_cache()
step("freed + empty_cache")
