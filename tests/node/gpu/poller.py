"""Scrapes vgpu-node's /metrics every INTERVAL seconds until STOP_FILE exists. Each scrape is one
line in OUT_FILE: "<start unix> <end unix> <hami_vgpu_memory_used_bytes of CONTAINER> <vgpu_bypass_processes>
<bypass host pids, comma-separated or ->" (-1 when the series is absent).

usage: poller.py ADDRESS CONTAINER_LABEL INTERVAL STOP_FILE OUT_FILE
"""
import os
import sys
import time
import urllib.request


def value(text, prefix):
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return -1.0


def main():
    address, container, interval, stop, out_path = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]
    out = open(out_path, "w")
    while not os.path.exists(stop):
        start = time.time()
        try:
            text = urllib.request.urlopen(f"http://{address}/metrics", timeout=2).read().decode()
        except Exception as error:  # keep polling; the line records the failure
            out.write(f"{start:.6f} {time.time():.6f} -1 -1 error:{type(error).__name__}\n")
            out.flush()
            time.sleep(interval)
            continue
        end = time.time()
        used = value(text, f'hami_vgpu_memory_used_bytes{{namespace="",pod="{container}"')
        bypass = value(text, "vgpu_bypass_processes{")
        pids = [l.split('host_pid="', 1)[1].split('"', 1)[0] for l in text.splitlines() if l.startswith("vgpu_bypass_process_info{")]
        out.write(f"{start:.6f} {end:.6f} {int(used)} {int(bypass)} {','.join(pids) or '-'}\n")
        out.flush()
        time.sleep(max(0.0, interval - (time.time() - start)))


if __name__ == "__main__":
    main()
