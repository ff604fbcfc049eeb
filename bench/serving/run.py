#!/usr/bin/env python3
"""The serving benchmark in one command: bench/serving/serve.py natively, under `vgpu run` limits
alone, and as co-located instances on one GPU; a throughput share, added latency and a memory
check for each.

    python3 bench/serving/run.py --vgpu build-gpu/vgpu --out $OUT
    python3 bench/serving/run.py --dry-run          # the plan and the commands; needs no GPU

Plan (defaults), in order:
  1. solo: serve.py natively (no library)
  2. for each --periods entry: serve.py under `vgpu run --memory 16GiB --compute P` for P in
     --computes (30, 60, 90), then each --groups entry (30+60, 30+30+30): instances under their own
     `vgpu run` (separate ledgers, i.e. separate containers) started together on one GPU
  3. solo again (--solo-runs 2): the reference is the mean of the solo runs, so drift shows
Every instance waits, after start-up, until all instances of its step are ready (barrier files),
then all start their clients at once; the window is --warmup + --seconds long for all.

For each instance: generated tokens/s and its share of solo (100 x tokens/s / the solo tokens/s,
same serve.py settings); requests/s; request latency, time per output token (TPOT) and time to
first token, p50 / p99, and the added latency against solo (difference of the percentiles); the
peak NVML per-process memory of its processes against its memory limit (FAIL when above, or when
no NVML figure came back); the free figure it saw and the KV cache it sized from it; NVML GPU-Util
of the whole GPU during its window (sampled by this process, which runs without the library).
A run that fails (an out-of-memory error at start-up included) is a FAIL row with its error.

--periods 20ms,50ms repeats step 2 with VGPU_COMPUTE_PERIOD set for the limited runs (`default`
leaves it unset: the library's default). --env K=V (repeatable) passes variables to the limited
runs only. VGPU_COMPUTE_* variables of this shell are NOT passed on (say them with --env).
--serve-args "..." are appended to every serve.py command (e.g. "--processes 2 --layers 8").

Output: progress lines; the plan with its estimated duration first; the Markdown table last
(also $OUT/serving.md), $OUT/serving.json (settings, rows, every instance's result),
$OUT/serving.log (every command and its output). Exit status 1 when a row FAILs, 2 for invalid
options.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, HERE)
sys.path.insert(0, BENCH)
import common  # noqa: E402
from compute_common import UtilSampler, git_describe, is_library_variable, util_of  # noqa: E402

SERVE = os.path.join(HERE, "serve.py")
STARTUP_S = 10.0       # spawn to ready, per step (estimate only; the JSON records the real ones)
TEARDOWN_S = 2.0
GO_DELAY_S = 0.5       # go is written this long after the last instance is ready
EXIT_GRACE_S = 120.0   # after the window, how long instances may take to write their result and exit


# --- settings ------------------------------------------------------------------------------------

class Member:
    def __init__(self, name, compute):
        self.name = name          # unique within its step; names barrier and result files
        self.compute = compute    # None = native (no library)


class Step:
    def __init__(self, kind, label, period, members):
        self.kind = kind          # "solo" | "single" | "group"
        self.label = label
        self.period = period      # VGPU_COMPUTE_PERIOD for the limited runs; None = unset
        self.members = members

    def scenario(self):
        return self.label + (f" (period {self.period})" if self.period else "")


def parse_percent(text, what):
    if not re.fullmatch(r"\d{1,3}", text.strip()) or not 1 <= int(text) <= 100:
        raise ValueError(f"{what} {text!r}: expected a whole percentage from 1 to 100")
    return int(text)


def parse_list(text, what):
    return [parse_percent(t, what) for t in text.split(",") if t.strip()] if text.strip() else []


def parse_groups(text):
    groups = []
    for g in (t for t in text.split(",") if t.strip()):
        members = [parse_percent(c, "--groups member") for c in g.split("+")]
        if len(members) < 2:
            raise ValueError(f"--groups {g!r}: a group has at least two instances, such as 30+60")
        groups.append(members)
    return groups


def parse_periods(text):
    out = []
    for p in (t.strip() for t in text.split(",") if t.strip()):
        if p == "default":
            out.append(None)
        elif re.fullmatch(r"\d+(ms|s)|0|off", p):
            out.append(p)
        else:
            raise ValueError(f"--periods {p!r}: expected default, 0, off or a duration such as 20ms or 1s")
    if not out:
        raise ValueError("--periods is empty (use default for the library's default)")
    return out


def parse_env(pairs):
    env = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"--env {pair!r}: expected NAME=VALUE")
        env[key] = value
    return env


class Settings:
    def __init__(self, args):
        self.vgpu = os.path.abspath(args.vgpu)
        self.memory = args.memory
        try:
            self.memory_bytes = common.parse_size(args.memory)
        except ValueError as e:
            raise ValueError(f"--memory: {e}") from None
        self.computes = parse_list(args.computes, "--computes")
        self.groups = parse_groups(args.groups)
        self.periods = parse_periods(args.periods)
        self.env = parse_env(args.env)
        if "VGPU_COMPUTE_PERIOD" in self.env and any(self.periods):
            raise ValueError("--env VGPU_COMPUTE_PERIOD and --periods both set the period: use --periods")
        if args.solo_runs not in (1, 2):
            raise ValueError(f"--solo-runs {args.solo_runs}: expected 1 or 2")
        self.solo_runs = args.solo_runs
        if args.seconds <= 0 or args.warmup < 0:
            raise ValueError(f"--seconds {args.seconds:g} / --warmup {args.warmup:g}: expected > 0 / >= 0")
        self.seconds, self.warmup = args.seconds, args.warmup
        self.serve_cmd = shlex.split(args.serve_cmd) if args.serve_cmd else [sys.executable, SERVE]
        self.serve_args = shlex.split(args.serve_args)
        self.startup_timeout = args.startup_timeout

    def describe(self):
        return {"vgpu": self.vgpu, "memory": self.memory, "memory_bytes": self.memory_bytes,
                "computes": self.computes, "groups": self.groups, "periods": [p or "default" for p in self.periods],
                "env": self.env, "solo_runs": self.solo_runs, "seconds": self.seconds, "warmup": self.warmup,
                "serve_cmd": self.serve_cmd, "serve_args": self.serve_args}


def build_plan(s):
    solo = Step("solo", "solo (native)", None, [Member("native", None)])
    plan = [solo]
    for period in s.periods:
        for c in s.computes:
            plan.append(Step("single", f"limit {c}", period, [Member(f"c{c}", c)]))
        for g in s.groups:
            plan.append(Step("group", "co-located " + " + ".join(map(str, g)), period,
                             [Member(f"{chr(ord('A') + i)}{c}", c) for i, c in enumerate(g)]))
    if s.solo_runs == 2:
        plan.append(Step("solo", "solo (native), again", None, [Member("native", None)]))
    return plan


def instance_command(s, step, member, json_path, barrier_dir):
    """(argv, variables added to the environment) of one instance."""
    serve = s.serve_cmd + s.serve_args + ["--warmup", f"{s.warmup:g}", "--seconds", f"{s.seconds:g}",
                                          "--json", json_path, "--barrier", barrier_dir, member.name]
    if member.compute is None:
        return serve, {}
    env = dict(s.env)
    if step.period:
        env["VGPU_COMPUTE_PERIOD"] = step.period
    return [s.vgpu, "run", "--memory", s.memory, "--compute", str(member.compute), "--"] + serve, env


def estimate_seconds(plan, s):
    per_step = STARTUP_S + GO_DELAY_S + s.warmup + s.seconds + TEARDOWN_S
    return sum(per_step + 2.0 * (len(step.members) - 1) for step in plan)


def print_plan(plan, s, commands):
    est = estimate_seconds(plan, s)
    print(f"plan: {len(plan)} steps, {sum(len(st.members) for st in plan)} instance runs, about {est / 60:.1f} min "
          f"(start-up ~{STARTUP_S:g} s + warm-up {s.warmup:g} s + window {s.seconds:g} s per step); "
          f"memory limit {s.memory}" + "".join(f"; {k}={v}" for k, v in s.env.items()), flush=True)
    for i, step in enumerate(plan, 1):
        desc = ", ".join(m.name + ("" if m.compute is None else f" (compute {m.compute})") for m in step.members)
        print(f"{i:3d}. {step.scenario()}: {desc}" + (", started together" if len(step.members) > 1 else ""),
              flush=True)
        if commands:
            for m in step.members:
                argv, env = instance_command(s, step, m, f"<tmp>/step{i}/{m.name}.json", f"<tmp>/step{i}")
                print("       " + "".join(f"{k}={shlex.quote(v)} " for k, v in env.items()) + shlex.join(argv)
                      + (" &" if len(step.members) > 1 else ""), flush=True)


# --- running -------------------------------------------------------------------------------------

def stop_group(proc):
    """SIGTERM to the instance's process group (vgpu and serve.py), SIGKILL 5 s later."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass


class Runner:
    def __init__(self, s, logf):
        self.s = s
        self.logf = logf
        self.tmp = tempfile.mkdtemp(prefix="vgpu-serving-")
        stripped = sorted(k for k in os.environ if k.startswith("VGPU_COMPUTE_"))
        if stripped:
            print(f"note: {', '.join(stripped)} of this shell not passed on (use --env)", flush=True)
        self.base_env = {k: v for k, v in os.environ.items()
                         if not is_library_variable(k) and not k.startswith("VGPU_COMPUTE_")}
        self.base_env["PYTHONUNBUFFERED"] = "1"

    def note(self, text):
        self.logf.write(text + "\n")
        self.logf.flush()

    def run_step(self, index, step):
        """Runs the step's instances together; returns {name: result}, each result serve.py's JSON
        (or {'ok': False, 'error': ...}) with 'rc' and 'ready_s' (spawn to ready) added."""
        s = self.s
        bdir = os.path.join(self.tmp, f"step{index}")
        os.makedirs(bdir)
        procs = {}
        results = {}
        self.note(f"== step {index}: {step.scenario()}")
        spawn = time.monotonic()
        for m in step.members:
            argv, extra = instance_command(s, step, m, os.path.join(bdir, m.name + ".json"), bdir)
            env = dict(self.base_env)
            env.update(extra)
            self.note("$ " + "".join(f"{k}={shlex.quote(v)} " for k, v in extra.items()) + shlex.join(argv)
                      + (" &" if len(step.members) > 1 else ""))
            out = open(os.path.join(bdir, m.name + ".out"), "w")
            try:
                procs[m.name] = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                 start_new_session=True)
            except OSError as e:
                results[m.name] = {"ok": False, "error": f"cannot start {argv[0]}: {e}"}
            finally:
                out.close()
        ready, abort = {}, None
        deadline = spawn + s.startup_timeout
        while not abort and len(ready) < len(procs):
            for name, p in procs.items():
                if name not in ready and common.present(bdir, "ready." + name):
                    ready[name] = time.monotonic() - spawn
            dead = [n for n, p in procs.items() if n not in ready and p.poll() is not None]
            if results or dead:
                abort = f"{', '.join(sorted(set(dead) | set(results)))} ended before all were ready"
            elif time.monotonic() > deadline:
                abort = f"not all ready after {s.startup_timeout:g} s"
            else:
                time.sleep(0.05)
        if abort:
            for p in procs.values():
                stop_group(p)
        else:
            common.arrive(bdir, common.GO, {"t": time.monotonic() + GO_DELAY_S})
            end = time.monotonic() + GO_DELAY_S + s.warmup + s.seconds + EXIT_GRACE_S
            for name, p in procs.items():
                try:
                    p.wait(timeout=max(1.0, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    stop_group(p)
                    results[name] = {"ok": False, "error": "did not finish (killed)"}
        for m in step.members:
            name = m.name
            p = procs.get(name)
            with open(os.path.join(bdir, name + ".out"), errors="replace") as f:
                output = f.read()
            self.note(f"--- {name}: exit {None if p is None else p.returncode}\n{output[-20000:]}")
            if name not in results:
                results[name] = self._result(bdir, name, p, output, abort)
            results[name]["rc"] = None if p is None else p.returncode
            results[name]["ready_s"] = ready.get(name)
        return results

    @staticmethod
    def _result(bdir, name, proc, output, abort):
        try:
            with open(os.path.join(bdir, name + ".json")) as f:
                res = json.load(f)
        except (OSError, ValueError):
            tail = " | ".join(line for line in output.strip().splitlines()[-3:])
            why = f"exit {proc.returncode}, no result" + (f"; step stopped: {abort}" if abort else "")
            return {"ok": False, "error": why + (f" ({tail[-300:]})" if tail else "")}
        problem = common.check_result(res)
        if problem:
            res["ok"] = False
            res["error"] = problem
        elif proc.returncode != 0:
            res["ok"] = False
            res["error"] = f"exit {proc.returncode} after a complete result"
        return res


# --- analysis ------------------------------------------------------------------------------------

METRICS = (("latency", "latency_ms"), ("tpot", "tpot_ms"), ("ttft", "ttft_ms"))


def pct(res, key, q):
    d = res.get(key) if res else None
    return d.get(q) if isinstance(d, dict) else None


def mean_of(values):
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def reference(plan, records):
    """The solo reference: means over the successful solo runs."""
    solos = [r for step, res in zip(plan, records) if step.kind == "solo" for r in res.values() if r.get("ok")]
    ref = {"runs": len(solos), "tokens_per_s_runs": [r["tokens_per_s"] for r in solos],
           "tokens_per_s": mean_of([r["tokens_per_s"] for r in solos])}
    for short, key in METRICS:
        for q in ("p50", "p99"):
            ref[f"{short}_{q}"] = mean_of([pct(r, key, q) for r in solos])
    return ref


def memory_verdict(peak, limit):
    """(verdict, note) of an instance's peak NVML memory against its limit (None = no limit)."""
    if limit is None:
        return "–", ""
    if peak is None:
        return "FAIL", "no NVML figure"
    if peak > limit:
        return "FAIL", f"{(peak - limit) / 2**20:.0f} MiB above the limit"
    return "PASS", f"{100.0 * peak / limit:.1f}% of the limit"


def diff(a, b):
    return None if a is None or b is None else a - b


def analyse(plan, records, s, util=None):
    """One row per instance run. util(result) -> GPU-Util over its window, or None."""
    ref = reference(plan, records)
    rows = []
    for i, (step, res) in enumerate(zip(plan, records), 1):
        for m in step.members:
            r = res.get(m.name, {"ok": False, "error": "not run"})
            limit = None if m.compute is None else s.memory_bytes
            ok = bool(r.get("ok"))
            row = {"step": i, "kind": step.kind, "scenario": step.scenario(), "period": step.period,
                   "instance": m.name, "compute": m.compute, "memory_limit_bytes": limit, "ok": ok,
                   "error": None if ok else (r.get("error") or "failed"), "processes": r.get("processes"),
                   "nvml_peak_bytes": r.get("nvml_peak_bytes"), "free_bytes": r.get("free_bytes"),
                   "kv_cache_bytes": r.get("kv_cache_bytes"), "kv_blocks": r.get("kv_blocks"),
                   "slots": r.get("slots"), "ready_s": r.get("ready_s"),
                   "util": util(r) if (util and ok) else None}
            tps = r.get("tokens_per_s") if ok else None
            row["tokens_per_s"] = tps
            row["requests_per_s"] = r.get("requests_per_s") if ok else None
            row["share"] = 100.0 * tps / ref["tokens_per_s"] if tps is not None and ref["tokens_per_s"] else None
            for short, key in METRICS:
                for q in ("p50", "p99"):
                    v = pct(r, key, q) if ok else None
                    row[f"{short}_{q}"] = v
                    row[f"added_{short}_{q}"] = diff(v, ref[f"{short}_{q}"])
            row["memory"], row["memory_note"] = memory_verdict(row["nvml_peak_bytes"], limit)
            row["pass"] = ok and row["memory"] != "FAIL"
            rows.append(row)
    return rows, ref


# --- report --------------------------------------------------------------------------------------

def fmt(v, nd=1):
    return "?" if v is None else f"{v:.{nd}f}"


def pair(a, b, nd=1, sign=False):
    f = (lambda v: "?" if v is None else f"{v:+.{nd}f}") if sign else (lambda v: fmt(v, nd))
    return f"{f(a)} / {f(b)}"


def gib(n):
    return "?" if n is None else f"{n / 2**30:.2f}"


def row_result(row):
    if not row["ok"]:
        over = row["memory"] == "FAIL" and row["nvml_peak_bytes"] is not None
        return "FAIL: " + row["error"].replace("|", "/")[:300] + (f"; memory: {row['memory_note']}" if over else "")
    if row["memory"] == "FAIL":
        return f"FAIL: memory ({row['memory_note']})"
    return "PASS" + (f" ({row['memory_note']})" if row["memory_note"] else "")


def markdown(rows, ref, header_lines):
    out = list(header_lines)
    out.append("")
    out.append(f"Solo reference (mean of {ref['runs']} native run(s)): {fmt(ref['tokens_per_s'], 0)} tokens/s "
               f"({', '.join(fmt(t, 0) for t in ref['tokens_per_s_runs'])}); latency p50 / p99 "
               f"{pair(ref['latency_p50'], ref['latency_p99'])} ms; TPOT p50 / p99 "
               f"{pair(ref['tpot_p50'], ref['tpot_p99'], 2)} ms; TTFT p50 / p99 {pair(ref['ttft_p50'], ref['ttft_p99'])} ms.")
    out.append("")
    out.append("| scenario | instance | compute | tokens/s | share of solo % | req/s | latency p50 / p99 ms "
               "| added p50 / p99 ms | TPOT p50 / p99 ms | added TPOT p50 / p99 ms | TTFT p50 / p99 ms "
               "| peak NVML / limit GiB | free → KV cache GiB (slots) | GPU-Util % | result |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        procs = f" ({r['processes']} processes)" if (r["processes"] or 1) > 1 else ""
        out.append(
            f"| {r['scenario']} | {r['instance']}{procs} | {r['compute'] or 'native'} | {fmt(r['tokens_per_s'], 0)} "
            f"| {fmt(r['share'])} | {fmt(r['requests_per_s'])} | {pair(r['latency_p50'], r['latency_p99'])} "
            f"| {pair(r['added_latency_p50'], r['added_latency_p99'], sign=True)} "
            f"| {pair(r['tpot_p50'], r['tpot_p99'], 2)} | {pair(r['added_tpot_p50'], r['added_tpot_p99'], 2, True)} "
            f"| {pair(r['ttft_p50'], r['ttft_p99'])} "
            f"| {gib(r['nvml_peak_bytes'])} / {gib(r['memory_limit_bytes']) if r['memory_limit_bytes'] else '–'} "
            f"| {gib(r['free_bytes'])} → {gib(r['kv_cache_bytes'])} ({r['slots'] if r['slots'] is not None else '?'}) "
            f"| {fmt(r['util'], 0)} | {row_result(r)} |")
    limited = [r for r in rows if r["memory_limit_bytes"] is not None]
    failed = [r for r in rows if not r["pass"]]
    out.append("")
    out.append(f"Memory: {sum(r['memory'] == 'PASS' for r in limited)} of {len(limited)} limited instances stayed "
               f"within their limit (NVML per-process peak); {len(failed)} row(s) FAIL"
               + (": " + ", ".join(f"{r['scenario']} / {r['instance']}" for r in failed) if failed else "") + ".")
    return "\n".join(out) + "\n"


def header(s, records, gpu, driver, date, commit):
    first = next((r for res in records for r in res.values() if r.get("ok") and "args" in r), None)
    a = (first or {}).get("args", {})
    lines = [f"vgpu serving benchmark on {gpu}, driver {driver}, {date}"
             + (f", commit {commit}" if commit else "")]
    if a:
        lines.append(f"Model: {a.get('layers')} layers, d_model {a.get('d_model')}, {a.get('heads')} heads, "
                     f"FFN {a.get('ffn')}, vocab {a.get('vocab')}, bf16, {first.get('params', 0) / 1e6:.0f} M parameters "
                     f"(random weights); KV cache {a.get('gpu_memory_utilization')} x free, blocks of "
                     f"{a.get('block_size')} tokens, sequences up to {a.get('max_seq')} tokens, at most "
                     f"{a.get('max_batch')} decoded at once; decode in CUDA graphs (buckets {first.get('buckets')}), "
                     f"prefill eager.")
        lines.append(f"Load per instance: {a.get('clients')} closed-loop clients, prompts {a.get('min_prompt')}–"
                     f"{a.get('max_prompt')} tokens, outputs {a.get('min_output')}–{a.get('max_output')} tokens, "
                     f"think {a.get('think_ms')} ms, seed {a.get('seed')}, {a.get('processes')} process(es) per "
                     f"instance; warm-up {s.warmup:g} s, window {s.seconds:g} s.")
    lines.append(f"Limited runs: `{s.vgpu} run --memory {s.memory} --compute P`"
                 + "".join(f", {k}={v}" for k, v in s.env.items())
                 + "; co-located instances each under their own `vgpu run` (own ledger), started together. "
                 "GPU-Util is the whole GPU's (NVML, sampled outside the library). Share = 100 × tokens/s ÷ solo "
                 "tokens/s; added latency = percentile − solo percentile.")
    lines.append(f"Command: `{shlex.join(['python3', 'bench/serving/run.py'] + sys.argv[1:])}`")
    return lines


# --- main ----------------------------------------------------------------------------------------

def progress_line(step, results):
    parts = []
    for m in step.members:
        r = results[m.name]
        if not r.get("ok"):
            parts.append(f"{m.name} FAILED: {r.get('error')}")
            continue
        parts.append(f"{m.name} {r['tokens_per_s']:.0f} tok/s, p50 {fmt(pct(r, 'latency_ms', 'p50'), 0)} ms "
                     f"p99 {fmt(pct(r, 'latency_ms', 'p99'), 0)} ms, peak NVML {gib(r.get('nvml_peak_bytes'))} GiB, "
                     f"free {gib(r.get('free_bytes'))} → KV {gib(r.get('kv_cache_bytes'))} GiB, ready after "
                     f"{fmt(r.get('ready_s'))} s")
    return "; ".join(parts)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("--vgpu", default=os.path.join(ROOT, "build-gpu", "vgpu"),
                   help="the vgpu binary (default: build-gpu/vgpu); libvgpu.so is found beside it")
    p.add_argument("--out", default=os.environ.get("OUT", ""), help="output folder (default $OUT)")
    p.add_argument("--memory", default="16GiB", help="memory limit of every limited instance (default 16GiB)")
    p.add_argument("--computes", default="30,60,90", help="compute limits of the single limited runs ('' = none)")
    p.add_argument("--groups", default="30+60,30+30+30",
                   help="co-located groups, comma-separated, members joined by + ('' = none)")
    p.add_argument("--periods", default="default",
                   help="VGPU_COMPUTE_PERIOD values to repeat the limited runs with; 'default' = unset")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="variable for the limited runs (repeatable)")
    p.add_argument("--solo-runs", type=int, default=2, help="native runs: 1 (first) or 2 (first and last)")
    p.add_argument("--seconds", type=float, default=10.0, help="measurement window per instance (default 10)")
    p.add_argument("--warmup", type=float, default=3.0, help="load before the window (default 3)")
    p.add_argument("--serve-args", default="", help="extra serve.py options for every instance, one string")
    p.add_argument("--serve-cmd", default="", help="command that replaces 'python3 bench/serving/serve.py' (tests)")
    p.add_argument("--startup-timeout", type=float, default=300.0, help="seconds an instance may take to be ready")
    p.add_argument("--gpu-index", type=int, default=0, help="NVML index of the GPU, for GPU-Util (default 0)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the commands; run nothing")
    return p, p.parse_args(argv)


def main(argv=None):
    p, args = parse_args(argv)
    try:
        s = Settings(args)
    except ValueError as e:
        p.error(str(e))
    plan = build_plan(s)
    print_plan(plan, s, commands=args.dry_run)
    if args.dry_run:
        print("outputs: serving.md, serving.json, serving.log", flush=True)
        return 0
    if not args.out:
        p.error("--out (or $OUT) is required")
    needs_vgpu = any(m.compute is not None for step in plan for m in step.members)
    if needs_vgpu and not (os.path.isfile(s.vgpu) and os.access(s.vgpu, os.X_OK)):
        p.error(f"--vgpu {s.vgpu}: no executable there (build it: cmake --build build-gpu)")
    os.makedirs(args.out, exist_ok=True)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    sampler = UtilSampler(args.gpu_index)
    sampler.start()
    records = []
    started = time.monotonic()
    with open(os.path.join(args.out, "serving.log"), "w") as logf:
        runner = Runner(s, logf)
        try:
            for i, step in enumerate(plan, 1):
                t0 = time.monotonic()
                results = runner.run_step(i, step)
                records.append(results)
                print(f"[{i}/{len(plan)}, {time.monotonic() - t0:.1f} s, total {time.monotonic() - started:.0f} s] "
                      f"{step.scenario()}: {progress_line(step, results)}", flush=True)
        finally:
            sampler.stop()
    records += [{} for _ in plan[len(records):]]
    rows, ref = analyse(plan, records, s, util=lambda r: util_of(sampler, r, wait=False))
    commit = git_describe()
    text = markdown(rows, ref, header(s, records, sampler.name, sampler.driver, date, commit))
    with open(os.path.join(args.out, "serving.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "serving.json"), "w") as f:
        json.dump({"date": date, "gpu": sampler.name, "driver": sampler.driver, "commit": commit,
                   "settings": s.describe(), "reference": ref, "rows": rows,
                   "plan": [{"scenario": st.scenario(), "kind": st.kind, "period": st.period,
                             "members": [[m.name, m.compute] for m in st.members]} for st in plan],
                   "results": [{k: v for k, v in res.items()} for res in records]}, f, indent=1, default=str)
    print(text, end="", flush=True)
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
