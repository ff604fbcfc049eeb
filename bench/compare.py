#!/usr/bin/env python3
"""Runs a benchmark command alternately without and with libvgpu.so, in one session, and reports
the median of each metric for both and their ratio (with / without).

Usage: compare.py --library build/libvgpu.so [--rounds 7] [--env KEY=VALUE ...]
                  [--target METRIC:min_ratio|max_ratio:VALUE ...] -- command args...

The command prints "<metric> <value> <unit>" lines. Rounds alternate native / vgpu so drift in the
machine's state affects both sides alike. A --target such as
"empty_kernel_launch_rate:min:0.99" makes the script exit 1 when the ratio misses it.
"""
import argparse
import os
import statistics
import subprocess
import sys


def run_once(command, env):
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    metrics = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            try:
                metrics[parts[0]] = (float(parts[1]), parts[2])
            except ValueError:
                pass
    if not metrics:
        sys.exit(f"no metrics in the output of {' '.join(command)}:\n{out}")
    return metrics


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", required=True, help="path of libvgpu.so")
    parser.add_argument("--rounds", type=int, default=7, help="runs of each side (default 7)")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the vgpu runs")
    parser.add_argument("--target", action="append", default=[], help="METRIC:min|max:RATIO")
    parser.add_argument("--label", default="", help="label printed in the table")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = [c for c in args.command if c != "--"] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")

    native_env = dict(os.environ)
    native_env.pop("LD_PRELOAD", None)
    vgpu_env = dict(native_env)
    vgpu_env["LD_PRELOAD"] = os.path.abspath(args.library)
    for kv in args.env:
        key, _, value = kv.partition("=")
        vgpu_env[key] = value

    samples = {"native": {}, "vgpu": {}}
    units = {}
    for i in range(args.rounds):
        # ABBA order: a side that always ran second would carry any warm-up or drift effect.
        order = (("native", native_env), ("vgpu", vgpu_env))
        for side, env in (order if i % 2 == 0 else order[::-1]):
            for metric, (value, unit) in run_once(command, env).items():
                samples[side].setdefault(metric, []).append(value)
                units[metric] = unit
        print(f"round {i + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    failed = False
    targets = {}
    for t in args.target:
        metric, kind, value = t.split(":")
        targets[metric] = (kind, float(value))
    for metric in sorted(units):
        native = statistics.median(samples["native"][metric])
        vgpu = statistics.median(samples["vgpu"][metric])
        ratio = vgpu / native if native else float("nan")
        verdict = ""
        if metric in targets:
            kind, bound = targets[metric]
            ok = ratio >= bound if kind == "min" else ratio <= bound
            verdict = f"{'PASS' if ok else 'FAIL'} ({kind} {bound})"
            failed |= not ok
        spread = " ".join(
            f"{side} {min(samples[side][metric]):.0f}..{max(samples[side][metric]):.0f}" for side in ("native", "vgpu"))
        print(f"| {args.label} {metric} | {native:.0f} {units[metric]} | {vgpu:.0f} {units[metric]} | "
              f"{ratio:.4f} | {verdict} | {spread} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
