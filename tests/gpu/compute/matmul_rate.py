"""Compute-limit check: bf16 8192^3 matmuls for a fixed time, synchronising every `batch`; prints
the rate. Achieved share = rate under a limit / native rate, measured in the same session.

The ratio equals the GPU busy share only if the native loop keeps the GPU ~100% busy: with a
synchronisation every 10 matmuls the H200 was busy only ~84% natively (1.40 ms kernels at
600 matmuls/s), so the default batch is now 100."""
import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 100
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ b
torch.cuda.synchronize()
count = 0
start = time.perf_counter()
while time.perf_counter() - start < seconds:
    for _ in range(batch):
        a @ b
    torch.cuda.synchronize()
    count += batch
elapsed = time.perf_counter() - start
print(f"matmul_rate {count / elapsed:.2f} matmuls/s")
