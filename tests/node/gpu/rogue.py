"""A GPU process WITHOUT libvgpu.so (the bypass the daemon must flag): allocates 512 MiB, writes
"<pid> <unix time>" to READY_FILE, holds it for SECONDS.

usage: rogue.py READY_FILE SECONDS
"""
import os
import sys
import time

import torch

x = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {time.time():.6f}\n")
time.sleep(float(sys.argv[2]))
print("rogue done", x.numel(), flush=True)
