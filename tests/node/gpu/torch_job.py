"""PyTorch job for the vgpu-node GPU check: creates its context, then allocates 1 GiB, 2 GiB and
1 GiB more (holding each step 1.5 s), then frees everything. After each step it has synchronized
and appends "<event> <bytes held> <unix time>" to EVENTS_FILE, so the poller's scrapes can be
matched to the moment the memory existed.

usage: torch_job.py EVENTS_FILE
"""
import sys
import time

import torch


def main():
    events = open(sys.argv[1], "w")

    def note(event, held):
        events.write(f"{event} {held} {time.time():.6f}\n")
        events.flush()

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    note("context", 0)
    time.sleep(1.5)
    held = []
    for gib in (1, 2, 1):
        held.append(torch.empty(gib << 30, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        note("alloc", sum(t.numel() for t in held))
        time.sleep(1.5)
    held.clear()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    note("freed", 0)
    time.sleep(1.5)
    print("torch job done", flush=True)


if __name__ == "__main__":
    main()
