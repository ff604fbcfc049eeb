"""Compute-limit check: bf16 8192^3 matmuls for a fixed time, synchronising every 10; prints the
rate. Achieved share = rate under a limit / native rate, measured in the same session."""
import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ b
torch.cuda.synchronize()
count = 0
start = time.perf_counter()
while time.perf_counter() - start < seconds:
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    count += 10
elapsed = time.perf_counter() - start
print(f"matmul_rate {count / elapsed:.2f} matmuls/s")
