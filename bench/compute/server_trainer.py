#!/usr/bin/env python3
"""A server below its limit beside a trainer that fills its share, on a real GPU: does the server
keep its rate when the trainer's runs give way to it (docs/compute.md, "Turns", "Give way")?

Usage: python3 bench/compute/server_trainer.py --library LIB [--server-limit 30] [--trainer-limit 60]
                                               [--trainer long|streams] [--rounds 2] [--warmup 1]
                                               [--seconds 4] [--binary CONCURRENCY] [--out DIR]
                                               [--dry-run]

Workloads of bench/compute/concurrency.cu (built here with nvcc, or --binary):
  server   a server's steps: 8 launches of 60 us, synchronised, then 1.5 ms of host work
           (--steps 8 --kernel-us 60 --host-us 1500; about a quarter busy alone)
  trainer  --trainer long (the default): 2 ms kernels on one stream, as many as its queue takes
           (--kernel-us 2000); --trainer streams: the matrix's 16 streams of 50 us kernels
           (--streams 16 --kernel-us 50), whose launches overlap, so that its runs do not give way
           (ControllerOptions::give_way_max_overlap)
Each round runs the server alone and the trainer alone natively, the two together natively, and
the two together as separate containers (separate ledgers, started through a barrier) under
--server-limit and --trainer-limit, once with VGPU_COMPUTE_GIVE_WAY=true and once with false
(which goes first alternates by round), each limited process with LIBCUDA_LOG_LEVEL=4. Shares are
each workload's rate over its alone run of the round. Printed: a table per round and the mean;
--out keeps server-trainer.json and the log. What to expect from the simulation (120 us
hand-over): with give way (off by default) the server 55.1% of its native rate against 40.5
without, the trainer 57.9 against 60.0; beside 16 streams of 50 us 38.9 either way, the trainer
58.4 / 58.3. Never changes any GPU setting; exit status 1 when a run failed."""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from compute_common import Launcher, fmt, log, nvcc_build, summary_of  # noqa: E402

OUTPUT = "server-trainer"
SERVER = ["--steps", "8", "--kernel-us", "60", "--host-us", "1500"]
TRAINERS = {"long": ["--streams", "1", "--kernel-us", "2000"], "streams": ["--streams", "16", "--kernel-us", "50"]}


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--library", required=True, help="libvgpu.so")
    p.add_argument("--server-limit", type=int, default=30, help="the server's limit (default 30)")
    p.add_argument("--trainer-limit", type=int, default=60, help="the trainer's limit (default 60)")
    p.add_argument("--trainer", choices=sorted(TRAINERS), default="long",
                   help="the trainer: long, 2 ms kernels on one stream (default); streams, 16 streams of 50 us")
    p.add_argument("--rounds", type=int, default=2, help="rounds (default 2)")
    p.add_argument("--warmup", type=float, default=1.0, help="warm-up of every run, seconds (default 1)")
    p.add_argument("--seconds", type=float, default=4.0, help="window of every run, seconds (default 4)")
    p.add_argument("--binary", help="a built bench/compute/concurrency.cu (default: build it with nvcc)")
    p.add_argument("--out", default=os.environ.get("OUT", ""), help="output folder (default $OUT)")
    p.add_argument("--gpu-index", type=int, default=0, help="the GPU whose compute capability nvcc targets")
    p.add_argument("--workload-cmd", help=argparse.SUPPRESS)  # tests: replaces the workload's program
    p.add_argument("--dry-run", action="store_true", help="print the runs and exit; needs no GPU")
    return p


def plan(rounds):
    """[(round, step)]: step is "alone", "together" (both native) or "give-way-on" / "-off"."""
    steps = []
    for r in range(rounds):
        limited = ["give-way-on", "give-way-off"] if r % 2 == 0 else ["give-way-off", "give-way-on"]
        steps += [(r, s) for s in ["alone", "together"] + limited]
    return steps


def main(argv=None):
    p = parser()
    s = p.parse_args(argv)
    for name, v in (("--server-limit", s.server_limit), ("--trainer-limit", s.trainer_limit)):
        if not 1 <= v <= 100:
            p.error(f"{name} {v}: expected a whole percentage from 1 to 100")
    if s.rounds < 1:
        p.error(f"--rounds {s.rounds}: expected 1 or more")
    if s.warmup < 0 or not s.seconds > 0:
        p.error("--warmup must be >= 0 and --seconds > 0")
    steps = plan(s.rounds)
    if s.dry_run:
        for r, step in steps:
            print(f"round {r + 1}: {step}")
        return 0
    if not os.path.isfile(s.library):
        p.error(f"--library {s.library}: no such file")
    if not s.out:
        p.error("--out (or $OUT) is required")
    os.makedirs(s.out, exist_ok=True)
    window = ["--warmup", f"{s.warmup:g}", "--seconds", f"{s.seconds:g}"]
    failed = 0
    results = []
    with open(os.path.join(s.out, OUTPUT + ".log"), "w") as logf:
        launcher = Launcher(s.library, logf, prefix="vgpu-server-trainer-")
        try:
            if s.workload_cmd:
                prog = s.workload_cmd.split() + ["spin"]
            else:
                binary = s.binary or nvcc_build(os.path.join(HERE, "concurrency.cu"),
                                                os.path.join(s.out, "bench-compute", "concurrency"), s.gpu_index,
                                                launcher.note)
                if not binary:
                    return 1
                prog = [binary, "run"]
            cmds = {"server": prog + SERVER + window, "trainer": prog + TRAINERS[s.trainer] + window}
            timeout = 60 + 3 * (s.warmup + s.seconds)
            alone = {}
            for r, step in steps:
                rec = {"round": r, "step": step}
                if step == "alone":
                    for name, cmd in cmds.items():
                        res = launcher.result_of(*launcher.run(cmd, launcher.env_for(None), timeout)[:3])
                        alone[name] = res.get("rate")
                        rec[name] = {"rate": alone[name], "error": res.get("error")}
                else:
                    limits = {"server": s.server_limit, "trainer": s.trainer_limit}
                    members = []
                    for name, cmd in cmds.items():
                        if step == "together":
                            env = launcher.env_for(None)
                        else:
                            env = launcher.env_for(limits[name], summary=True)
                            env["VGPU_COMPUTE_GIVE_WAY"] = "true" if step == "give-way-on" else "false"
                        members.append((name, cmd, env))
                    out = launcher.group(members, timeout)
                    for name in cmds:
                        stdout, stderr, rc, _ = out[name]
                        res = launcher.result_of(stdout, stderr, rc)
                        rate, base = res.get("rate"), alone.get(name)
                        share = 100.0 * rate / base if isinstance(rate, (int, float)) and base else None
                        rec[name] = {"rate": rate, "share": share, "error": res.get("error")}
                        if step != "together":
                            rec[name].update(limit=limits[name], **summary_of(stderr))
                for name in cmds:
                    if rec[name].get("error") or not isinstance(rec[name].get("rate"), (int, float)):
                        failed += 1
                        rec[name]["error"] = rec[name].get("error") or "no rate"
                log(f"round {r + 1} {step}: " + ", ".join(
                    f"{n} {rec[n]['error'] or fmt(rec[n].get('share', rec[n]['rate']))}" for n in cmds))
                results.append(rec)
        finally:
            launcher.close()
    md = table(results, s)
    with open(os.path.join(s.out, OUTPUT + ".json"), "w") as f:
        json.dump({"server_limit": s.server_limit, "trainer_limit": s.trainer_limit, "trainer": s.trainer,
                   "results": results,
                   "mean": means(results)}, f, indent=1)
    with open(os.path.join(s.out, OUTPUT + ".md"), "w") as f:
        f.write(md + "\n")
    print(md)
    return 1 if failed else 0


def means(results):
    """{step: {workload: mean share}} over the rounds, for the co-located steps."""
    out = {}
    for step in ("together", "give-way-on", "give-way-off"):
        for name in ("server", "trainer"):
            shares = [r[name]["share"] for r in results if r["step"] == step and r[name].get("share") is not None]
            if shares:
                out.setdefault(step, {})[name] = sum(shares) / len(shares)
    return out


def table(results, s):
    lines = [f"server at {s.server_limit} beside trainer ({' '.join(TRAINERS[s.trainer])}) at {s.trainer_limit}: "
             "each rate as a share of its alone run in the round (alone: its rate)", "",
             "| round | run | server | trainer | server: throttled ms, measured ppm | trainer: throttled ms, "
             "measured ppm, launches' overlap, gives way |", "|---|---|---|---|---|---|"]
    for r in results:
        cells = []
        for name in ("server", "trainer"):
            x = r[name]
            cells.append(x["error"] if x.get("error") else fmt(x.get("share", x["rate"])))
        extra = []
        for name in ("server", "trainer"):
            x = r[name]
            cell = f"{fmt(x.get('throttled_ms'))}, {fmt(x.get('measured_ppm'), 0)}" if "limit" in x else ""
            if name == "trainer" and "limit" in x:
                gives = {1.0: "yes", 0.0: "no"}.get(x.get("gives_way"), "–")
                cell += f", {fmt(x.get('overlap'), 2)}, {gives}"
            extra.append(cell)
        lines.append(f"| {r['round'] + 1} | {r['step']} | {cells[0]} | {cells[1]} | {extra[0]} | {extra[1]} |")
    m = means(results)
    lines.append("")
    for step, v in m.items():
        lines.append(f"mean {step}: server {fmt(v.get('server'))}, trainer {fmt(v.get('trainer'))}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
