#!/usr/bin/env python3
"""Two builds of libvgpu.so against each other on a real GPU, alternating in one run, with native
runs in every round: what a change to the compute limiter does, as ratios measured together.

    python3 bench/compute_ab.py --old OLD/libvgpu.so --new NEW/libvgpu.so --out DIR
                                [--rows PATTERNS] [--limits 30,60,90] [--rounds 2]
                                [--serving LIMITS] [--serving-args ARGS] [--serving-cpus auto|all|LIST]
                                [--trace] [--old-env VAR=VALUE,...] [--new-env VAR=VALUE,...]
                                [--warmup W --seconds S] [--dry-run]

Rows (--rows takes ids or shell patterns, comma-separated): the concurrency matrix's rows of
bench/compute/concurrency.cu (bench/compute_matrix.py: 1x5us, 16x50us, 16x5ms, steps-20us-2ms,
...; the multi-process rows excepted), each with its matrix window (0.5 s warm-up, 1.6 s), and
rows of the limited launch path's cost, judged at a limit of 99 only: launch-1x2us and
launch-16x2us, one host thread launching 2 µs kernels on 1 or 16 streams (0.3 s warm-up, 1 s,
as tests/gpu/run.sh's launch path check), and launch-dry, 10 µs kernels with 20 µs of host work
after each launch, so that the stream is idle at every launch (bench/compute/launch_path.sh's
dry workload). Default: launch-1x2us, 1x5us, 16x50us, 16x5ms,
steps-20us-2ms at 30, 60, 90.

Each round runs every row natively, then at each limit with the old and the new library (which
one goes first alternates by round and limit), each limited run with a fresh ledger and
LIBCUDA_LOG_LEVEL=4: the limiter's summary at exit gives its marks and event queries per launch,
queue waits, measured share and period. --warmup / --seconds replace every row's window (serving's too).
Every run's GPU-Util over its window is the mean of the driver's samples (as
bench/compute_matrix.py reads it; none with --workload-cmd).
--serving L adds bench/serving/serve.py (bench/compute_matrix.py's
serving arguments unless --serving-args gives others, pinned as there) at the limits L, old and
new, with a native run per round;
its tokens/s, the limiter's busy time over the process's life, and its GPU-Util per decode step
(GPU-Util x window / serve.py's decode steps: the busy time each step of ~32 sequences costs,
which a limit should leave as it is natively), and the medians of serve.py's per-step host times:
the graph replay call and the wait from its return to the step's end.

--trace records VGPU_COMPUTE_TRACE in every limited serving run (DIR/traces/serving-LIB-LIMIT-rROUND.trace)
and adds to the serving table, from the trace's records within serve.py's window, the limiter's own
time around each synchronisation (Y records: the hook's time less the driver's wait; the wait for a
decode step includes it) and what it charged without a measurement (U records, % of the window).

--old-env / --new-env add variables to that side's limited runs (comma-separated VAR=VALUE), so
that one library can be compared with itself under another setting:
    --old build-gpu/libvgpu.so --new build-gpu/libvgpu.so --old-env VGPU_COMPUTE_RUN_HOLD=false

Output: DIR/compute-ab.md (per row and limit: the native rates, old and new as a share of the
round's native rate, their marks and event queries per launch, the time their launching threads
slept and their launches measured lightly, the limiter's measure, GPU-Util native / old / new, and
for serving the GPU-Util per decode step) and DIR/compute-ab.json, the
table printed too; every command and its output in DIR/compute-ab.log. Exit status 1 when a run failed.

An old library beside the working tree's, on a GPU machine whose git metadata may lag (archive
the commit where it exists, carry the folder, build both in one call):
    git archive REF CMakeLists.txt src | (mkdir -p scratch/old && tar -x -C scratch/old)
    cmake -S scratch/old -B /tmp/old -G Ninja -DCMAKE_BUILD_TYPE=Release -DVGPU_BUILD_TESTS=OFF \\
        -DVGPU_BUILD_EXAMPLES=OFF -DVGPU_BUILD_BENCH=OFF && cmake --build /tmp/old
"""
import argparse
import json
import os
import shlex
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compute_matrix as cm  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "compute"))
from trace_report import syncs_and_unmeasured  # noqa: E402
from compute_common import (ROOT, Launcher, UtilSampler, fmt, git_describe, log, nvcc_build,  # noqa: E402
                            summary_of, util_of)

OUTPUT = "compute-ab"
LAUNCH_ROWS = {
    "launch-1x2us": "--streams 1 --kernel-us 2 --warmup 0.3 --seconds 1",
    "launch-16x2us": "--streams 16 --kernel-us 2 --warmup 0.3 --seconds 1",
    "launch-dry": "--streams 1 --kernel-us 10 --host-ns 20000 --warmup 0.3 --seconds 1",
}
DEFAULT_ROWS = "launch-1x2us,1x5us,16x50us,16x5ms,steps-20us-2ms"
MATRIX_WINDOW = "--warmup 0.5 --seconds 1.6"


def spin_rows():
    """Row id -> concurrency.cu arguments, launch rows first, then the matrix's in its order."""
    rows = dict(LAUNCH_ROWS)
    for r in cm.ROWS:
        if r.kind == "spin" and r.procs == 1:
            rows[r.id] = f"{r.args} {MATRIX_WINDOW}"
    return rows


def limits_of(row, limits):
    return [99] if row in LAUNCH_ROWS else limits


class Runner:
    def __init__(self, args, logf, sampler=None):
        self.args = args
        self.sampler = sampler  # GPU-Util of each run's window; None: not read
        self.libs = {"old": Launcher(args.old, logf, prefix="vgpu-ab-old-"),
                     "new": Launcher(args.new, logf, prefix="vgpu-ab-new-")}
        self.native = self.libs["old"]  # native runs drop the library's variables either way
        self.binary = None
        self.failed = 0
        cpus = cm.serving_cpus(args.serving_cpus, lambda m: sys.exit(f"compute_ab: {m}"))
        self.serve_prefix = ["taskset", "-c", cpus] if cpus else []

    def close(self):
        for launcher in self.libs.values():
            launcher.close()

    def command(self, row):
        if row == "serving":
            prog = [sys.executable, self.args.serve_script]
            if self.args.workload_cmd:
                prog = shlex.split(self.args.workload_cmd) + ["serving"]
            return self.serve_prefix + prog + self.args.serving_words + self.window()
        prog = shlex.split(self.args.workload_cmd) + ["spin"] if self.args.workload_cmd else [self.binary, "run"]
        return prog + shlex.split(spin_rows()[row]) + self.window()

    def window(self):
        """--warmup / --seconds after the row's own: the workloads take the last one given."""
        out = []
        if self.args.warmup is not None:
            out += ["--warmup", f"{self.args.warmup:g}"]
        if self.args.seconds is not None:
            out += ["--seconds", f"{self.args.seconds:g}"]
        return out

    def run(self, row, lib, limit, rnd=0):
        """One run: lib None (native) or "old" / "new" at `limit` in round `rnd`. Returns its record."""
        launcher = self.native if lib is None else self.libs[lib]
        env = launcher.env_for(None if lib is None else limit, summary=True)
        trace = None
        if lib is not None:
            env.update(self.args.extra_env[lib])
            if self.args.trace and row == "serving":
                trace = os.path.join(self.args.out, "traces", f"serving-{lib}-{limit}-r{rnd}.trace")
                os.makedirs(os.path.dirname(trace), exist_ok=True)
                env["VGPU_COMPUTE_TRACE"] = trace
        timeout = 300 if row == "serving" else 90
        out, err, rc, _ = launcher.run(self.command(row), env, timeout)
        res = launcher.result_of(out, err, rc)
        rate = res.get("tokens_per_s" if row == "serving" else "rate")
        rec = {"row": row, "lib": lib or "native", "limit": limit, "rate": rate, "error": res.get("error")}
        for key in ("t_start", "t_end", "decode_steps", "window_s"):  # serve.py's steps and window
            if key in res:
                rec[key] = res[key]
        for key in ("replay_call_us", "step_wait_us"):  # serve.py's per-step host times: their medians
            if isinstance(res.get(key), dict) and res[key].get("p50") is not None:
                rec[key] = res[key]["p50"]
        if lib is not None:
            rec.update(summary_of(err))
        if trace is not None and "t_start" in rec and "t_end" in rec:
            rec.update(trace_figures(trace, rec["t_start"], rec["t_end"]))
        if rec["error"] or not isinstance(rate, (int, float)):
            self.failed += 1
            rec["error"] = rec["error"] or "no rate"
        log(f"{row} {rec['lib']}" + (f" at {limit}" if lib else "") + ": " +
            (rec["error"] if rec["error"] else fmt(rate, 1)))
        return rec

    def add_util(self, records):
        """Each run's GPU-Util over its window, once the driver's samples past the last are in."""
        for rec in records:
            if self.sampler and not rec["error"] and "t_start" in rec:
                rec["util"] = util_of(self.sampler, rec)


def trace_figures(path, t_start, t_end):
    """From a serving run's VGPU_COMPUTE_TRACE, within its window (CLOCK_MONOTONIC seconds): the
    synchronisations, the limiter's mean time around each (µs) and the charges that stood
    unmeasured (% of the window). {} where the trace is missing."""
    if not os.path.isfile(path):
        return {}
    t0, t1 = int(t_start * 1e9), int(t_end * 1e9)
    own, unmeasured = syncs_and_unmeasured(path, t0, t1)
    return {"syncs": len(own), "sync_own_us": sum(own) / len(own) / 1e3 if own else None,
            "unmeasured_pct": 100.0 * unmeasured / (t1 - t0) if t1 > t0 else None}


def step_busy_ms(rec):
    """GPU-Util per decode step of a serving run (ms), or None."""
    if not rec or rec.get("error") or rec.get("util") is None or not rec.get("decode_steps") or not rec.get("window_s"):
        return None
    return rec["util"] / 100.0 * rec["window_s"] * 1000.0 / rec["decode_steps"]


def step_host_times(rec):
    """"replay/wait" of a serving run: the medians of serve.py's replay_call_us and step_wait_us."""
    if not rec or rec.get("error"):
        return "–"
    return f"{fmt(rec.get('replay_call_us'), 0)}/{fmt(rec.get('step_wait_us'), 0)}"


def plan(rows, rounds, limits):
    """Every run in order: (row, lib or None, limit)."""
    steps = []
    for rnd in range(rounds):
        for i, row in enumerate(rows):
            steps.append((row, None, None))
            for j, limit in enumerate(limits_of(row, limits)):
                pair = ["old", "new"] if (rnd + i + j) % 2 == 0 else ["new", "old"]
                steps += [(row, lib, limit) for lib in pair]
    return steps


def table(records, rows, limits):
    """Markdown: per row and limit, the rounds' native rates and old / new shares of them."""
    with_trace = any("syncs" in r for r in records if r["row"] in rows)
    out = ["| row | limit | native rate per round | old: share of native | new: share of native | "
           "marks / event queries per launch, old / new | throttled (ms) / launches measured lightly, old / new | "
           "limiter's measure (ppm), old / new | GPU-Util per round, native / old / new | "
           "GPU-Util per decode step (ms), native / old / new | "
           "graph replay call / wait for the step, p50 (µs), native / old / new |"
           + (" limiter's time per synchronisation (µs) / charged unmeasured (% of the window), old / new |"
              if with_trace else ""),
           "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if with_trace else "")]
    for row in rows:
        natives = [r for r in records if r["row"] == row and r["lib"] == "native"]
        for limit in limits_of(row, limits):
            shares = {"old": [], "new": []}  # per round, None where a run failed
            marks = {"old": [], "new": []}
            throttle = {"old": [], "new": []}
            measure = {"old": [], "new": []}
            util = [fmt(nat.get("util"), 1) for nat in natives]
            per_step = [fmt(step_busy_ms(nat), 3) for nat in natives]
            host = [step_host_times(nat) for nat in natives]
            traced = {"old": [], "new": []}
            for rnd, nat in enumerate(natives):
                for lib in ("old", "new"):
                    rec = next((r for r in records if r["row"] == row and r["lib"] == lib and r["limit"] == limit
                                and r["round"] == rnd), None)
                    ok = rec and not rec["error"] and not nat["error"] and nat["rate"]
                    shares[lib].append(100.0 * rec["rate"] / nat["rate"] if ok else None)
                    marks[lib].append(f"{fmt(rec.get('marks_per_launch'), 3)}/{fmt(rec.get('queries_per_launch'), 2)}"
                                      if rec else "–")
                    throttle[lib].append(f"{fmt(rec.get('throttled_ms'), 0)}/{fmt(rec.get('light'), 0)}" if rec else "–")
                    measure[lib].append(str(int(rec["measured_ppm"])) if rec and "measured_ppm" in rec else "–")
                    util[rnd] += "/" + fmt(rec.get("util") if rec and not rec["error"] else None, 1)
                    per_step[rnd] += "/" + fmt(step_busy_ms(rec), 3)
                    host[rnd] += " / " + step_host_times(rec)
                    traced[lib].append(f"{fmt(rec.get('sync_own_us'), 1)}/{fmt(rec.get('unmeasured_pct'), 2)}"
                                       if rec and not rec["error"] else "–")
            rates = ", ".join(fmt(n["rate"], 0) if not n["error"] else "failed" for n in natives)
            shown = {}
            for lib, values in shares.items():
                got = [v for v in values if v is not None]
                shown[lib] = ", ".join(fmt(v, 1) for v in values) + (
                    f" (mean {statistics.mean(got):.1f})" if got else "")
            out.append(f"| {row} | {limit} | {rates} | {shown['old']} | {shown['new']} | "
                       f"{', '.join(marks['old'])} / {', '.join(marks['new'])} | "
                       f"{', '.join(throttle['old'])} / {', '.join(throttle['new'])} | "
                       f"{', '.join(measure['old'])} / {', '.join(measure['new'])} | {', '.join(util)} | "
                       f"{', '.join(per_step) if row == 'serving' else '–'} | "
                       f"{', '.join(host) if row == 'serving' else '–'} |"
                       + (f" {', '.join(traced['old'])} / {', '.join(traced['new'])} |" if with_trace else ""))
    return "\n".join(out)


def parse_env(text, option, error):
    """"VAR=VALUE,VAR2=VALUE2" -> dict; an entry without "=" or a bad name is an error naming it."""
    env = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name or not (name[0].isalpha() or name[0] == "_") or \
                not all(c.isalnum() or c == "_" for c in name):
            error(f"{option} {item!r}: expected VAR=VALUE")
        env[name] = value
    return env


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--old", required=True, help="the library to compare against (libvgpu.so)")
    p.add_argument("--new", required=True, help="the library under test (libvgpu.so)")
    p.add_argument("--out", default=os.environ.get("OUT", ""), help="output folder (default $OUT)")
    p.add_argument("--rows", default=DEFAULT_ROWS, help=f"row ids or shell patterns (default {DEFAULT_ROWS})")
    p.add_argument("--limits", default="30,60,90", help="limits of the rows but the launch rows (default 30,60,90)")
    p.add_argument("--rounds", type=int, default=2, help="rounds, each with its own native runs (default 2)")
    p.add_argument("--old-env", default="", help="VAR=VALUE,... for the old side's limited runs")
    p.add_argument("--new-env", default="", help="VAR=VALUE,... for the new side's limited runs")
    p.add_argument("--serving", default="", help="limits for bench/serving/serve.py (default: not run)")
    p.add_argument("--warmup", type=float, help="warm-up of every run, seconds (default: the row's)")
    p.add_argument("--seconds", type=float, help="window of every run, seconds (default: the row's)")
    p.add_argument("--serving-args", default=cm.DEFAULT_SERVING_ARGS,
                   help="bench/serving/serve.py options of the serving runs, one string (default: "
                   "bench/compute_matrix.py's, %(default)r); --warmup / --seconds still come last")
    p.add_argument("--trace", action="store_true", help="record VGPU_COMPUTE_TRACE in the limited serving runs "
                   "and add the limiter's time per synchronisation and its unmeasured charges to the table")
    p.add_argument("--serving-cpus", default="auto", help="CPUs the serving runs are pinned to (as "
                   "bench/compute_matrix.py's option; default auto)")
    p.add_argument("--serve-script", default=os.path.join(ROOT, "bench", "serving", "serve.py"), help=argparse.SUPPRESS)
    p.add_argument("--workload-cmd", help=argparse.SUPPRESS)  # tests: replaces every workload's program
    p.add_argument("--gpu-index", type=int, default=0, help="the GPU whose compute capability nvcc targets")
    p.add_argument("--dry-run", action="store_true", help="print the runs and exit; needs no GPU")
    return p


def main(argv=None):
    p = parser()
    s = p.parse_args(argv)
    rows = cm.select_rows(s.rows, p.error, list(spin_rows()))
    s.limits = cm.parse_limits(s.limits, "--limits", p.error)
    serving = cm.parse_limits(s.serving, "--serving", p.error) if s.serving else []
    s.extra_env = {"old": parse_env(s.old_env, "--old-env", p.error),
                   "new": parse_env(s.new_env, "--new-env", p.error)}
    try:
        s.serving_words = shlex.split(s.serving_args)
    except ValueError as e:
        p.error(f"--serving-args {s.serving_args!r}: cannot be split into options ({e})")
    if s.rounds < 1:
        p.error(f"--rounds {s.rounds}: expected 1 or more")
    if (s.warmup is not None and s.warmup < 0) or (s.seconds is not None and not s.seconds > 0):
        p.error("--warmup must be >= 0 and --seconds > 0")
    for name in ("old", "new"):
        if not s.dry_run and not os.path.isfile(getattr(s, name)):
            p.error(f"--{name} {getattr(s, name)}: no such file")
    if serving and not s.workload_cmd and not os.path.isfile(s.serve_script):
        p.error(f"--serving: {s.serve_script} does not exist")
    steps = plan(rows, s.rounds, s.limits)
    if serving:
        steps += plan(["serving"], s.rounds, serving)
    if s.dry_run:
        for row, lib, limit in steps:
            print(f"{row} {lib or 'native'}" + (f" at {limit}" if lib else ""))
        return 0
    if not s.out:
        p.error("--out (or $OUT) is required")
    os.makedirs(s.out, exist_ok=True)
    sampler = None
    if not s.workload_cmd:
        sampler = UtilSampler(s.gpu_index)
        sampler.start()
        sampler.warn_if_busy()
    with open(os.path.join(s.out, OUTPUT + ".log"), "w") as logf:
        runner = Runner(s, logf, sampler)
        try:
            if not s.workload_cmd:
                runner.binary = nvcc_build(cm.CONCURRENCY_SRC, os.path.join(s.out, "bench-compute", "concurrency"),
                                           s.gpu_index, runner.native.note)
                if not runner.binary:
                    return 1
            records = []
            rounds = {}
            for row, lib, limit in steps:
                if lib is None:
                    rounds[row] = rounds.get(row, -1) + 1
                rec = runner.run(row, lib, limit, rounds[row])
                rec["round"] = rounds[row]
                records.append(rec)
            runner.add_util(records)
        finally:
            runner.close()
            if sampler and sampler.source:
                sampler.stop()
    md = table(records, rows, s.limits)
    if serving:
        md += "\n\n" + table(records, ["serving"], serving)
    def side(name):
        extra = " ".join(f"{k}={v}" for k, v in s.extra_env[name].items())
        return f"{name} {os.path.abspath(getattr(s, name))}" + (f" with {extra}" if extra else "")
    header = (f"vgpu compute A/B: {side('old')}, {side('new')} "
              f"({git_describe()}); {s.rounds} rounds, native runs in each")
    if serving and s.serving_args != cm.DEFAULT_SERVING_ARGS:
        header += f"; serve.py {s.serving_args}"
    with open(os.path.join(s.out, OUTPUT + ".md"), "w") as f:
        f.write(header + "\n\n" + md + "\n")
    with open(os.path.join(s.out, OUTPUT + ".json"), "w") as f:
        json.dump({"old": s.old, "new": s.new, "old_env": s.extra_env["old"], "new_env": s.extra_env["new"],
                   "serving_args": s.serving_args if serving else None, "records": records}, f, indent=1)
    print(header + "\n\n" + md)
    return 1 if runner.failed else 0


if __name__ == "__main__":
    sys.exit(main())
