#!/usr/bin/env python3
"""CI test of bench/compute_matrix.py (ctest bench_compute_matrix): the plan, the options' errors,
the share / PASS arithmetic (power-capped rows included), and whole runs against a fake workload,
with no GPU. Also a run of bench/compute_accuracy.py against the same fake (they share
bench/compute_common.py's launcher).

    python3 bench/compute_matrix_test.py <library to preload>

The library is preloaded into the fake's processes in the "limited" runs: give it one that does
nothing (the build's bench/libvgpu_null_preload.so). The same file is the fake workload:

    compute_matrix_test.py fake <spin|torch|jax|serving> <the workload's arguments>

It honours --barrier DIR NAME like the real workloads, sleeps through its window and prints the
real workload's JSON line: a native rate that depends on the arguments, times P / 100 when
LD_PRELOAD and CUDA_DEVICE_SM_LIMIT=P are set, plus the points of FAKE_MATRIX_DEVIATE
("SUBSTRING@P=POINTS;...": when SUBSTRING is in its arguments, or in "preload:" + LD_PRELOAD,
and P is its limit); it fails (exit 2) where FAKE_MATRIX_FAIL ("SUBSTRING@P;...") says. Limited
with LIBCUDA_LOG_LEVEL=4, it prints a limiter's summary line as libvgpu.so does at exit (20 marks
per 1,000 launches, the limit as the measured share). Every process appends what it saw (kind,
arguments, preload, limit, ledger, barrier name) to the JSON lines file FAKE_MATRIX_LOG.
bench/compute_ab_test.py uses the same fake.
"""
import contextlib
import io
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compute_matrix as cm  # noqa: E402

JAX_INSTALLED = cm.jax_installed
cm.jax_installed = lambda: True  # plans as on the GPU machine, where JAX is installed, wherever this runs

LIBRARY = None  # set from argv


# --- the fake workload ---------------------------------------------------------------------------

def _option(argv, name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default


def _matches(spec, text, limit):
    """Entries of "SUBSTRING@P[=VALUE];..." whose substring is in text and P equals limit."""
    for entry in [e for e in (spec or "").split(";") if e]:
        where, _, value = entry.partition("=")
        sub, _, p = where.rpartition("@")
        if sub in text and limit is not None and int(p) == limit:
            yield value


def fake(argv):
    kind, args = argv[0], argv[1:]
    text = " ".join(args) + " preload:" + os.environ.get("LD_PRELOAD", "")
    limited = bool(os.environ.get("LD_PRELOAD")) and "CUDA_DEVICE_SM_LIMIT" in os.environ
    limit = int(os.environ["CUDA_DEVICE_SM_LIMIT"]) if limited else None
    barrier = None
    if "--barrier" in args:
        i = args.index("--barrier")
        barrier = (args[i + 1], args[i + 2])
        args = args[:i] + args[i + 3:]
    with open(os.environ["FAKE_MATRIX_LOG"], "a") as f:
        f.write(json.dumps({"kind": kind, "args": args, "pid": os.getpid(), "preload": os.environ.get("LD_PRELOAD"),
                            "limit": limit, "ledger": os.environ.get("CUDA_DEVICE_MEMORY_SHARED_CACHE"),
                            "barrier": barrier[1] if barrier else None,
                            "vgpu_env": {k: v for k, v in os.environ.items() if k.startswith("VGPU_COMPUTE_")}})
                + "\n")
    if list(_matches(os.environ.get("FAKE_MATRIX_FAIL"), text, limit)):
        print("fake: told to fail here", file=sys.stderr)
        return 2
    if kind == "spin":
        warmup, seconds = float(_option(args, "--warmup")), float(_option(args, "--seconds"))
        base = int(_option(args, "--streams", "1")) * 1e6 / float(_option(args, "--kernel-us"))
    elif kind in ("torch", "jax"):
        warmup, seconds = float(args[1]), float(args[2])
        rates = {"matmul": 600.0, "train": 58.0} if kind == "torch" else {"train": 720.0}
        base = rates[args[0]] * int(_option(args, "--streams", "1"))
    else:
        warmup, seconds = float(_option(args, "--warmup")), float(_option(args, "--seconds"))
        for i, a in enumerate(args):  # the last --warmup / --seconds win, as argparse has it
            if a == "--warmup":
                warmup = float(args[i + 1])
            elif a == "--seconds":
                seconds = float(args[i + 1])
        base = 5000.0
    t_ready = time.monotonic()
    start = t_ready + warmup
    if barrier:
        time.sleep(warmup)
        open(os.path.join(barrier[0], "ready." + barrier[1]), "w").close()
        go = os.path.join(barrier[0], "go")
        while not os.path.exists(go):
            time.sleep(0.005)
        with open(go) as f:
            start = float(f.read())
    time.sleep(max(0.0, start - time.monotonic()))
    t_start = time.monotonic()
    time.sleep(seconds)
    share = 100.0 if limit is None else limit + sum(float(v) for v in _matches(
        os.environ.get("FAKE_MATRIX_DEVIATE"), text, limit))
    rate = base * share / 100.0
    if limited and os.environ.get("LIBCUDA_LOG_LEVEL") == "4":
        print(f"vgpu[{os.getpid()}] DEBUG: compute device 0: mode 0, target {limit * 10000} ppm, measured "
              f"{limit * 10000} ppm, correction 0 ppm, busy 1.0 ms, throttled 0.0 ms; 1000 launches, 20 marks "
              "(2 begins), 40 queries (0 by polls), 0 event errors; 3 queue waits (0.6 ms; window 3, work 0, age "
              "0); 0 intervals of other processes read (0 skipped); period 50.0 ms", file=sys.stderr)
    result = {"rate": rate, "t_start": t_start, "t_end": time.monotonic()}
    if kind in ("torch", "jax"):
        result["t_ready"] = t_ready
        if "--calibrate" in args:
            result.update(busy=1.0, dev_unit_ok=True, dev_unit_s=1.0 / base)
    if kind == "serving" and limited and os.environ.get("VGPU_COMPUTE_TRACE"):
        # As libvgpu.so's trace would: 4 synchronisations in the window, each with `limit` us of the
        # limiter's own time around a 5 ms wait, and 1% of the window charged unmeasured.
        t0, t1 = int(t_start * 1e9), int(result["t_end"] * 1e9)
        lines = ["# vgpu compute trace 1: 5 records, 0 dropped"]
        lines += [f"Y 0 {t0 + i * 1000} {t0 + i * 1000 + 5_000_000 + limit * 1000} 5000000" for i in range(4)]
        lines.append(f"U 0 {t0 + 10_000} {(t1 - t0) // 100}")
        with open(os.environ["VGPU_COMPUTE_TRACE"], "w") as f:
            f.write("\n".join(lines) + "\n")
    if kind == "serving":
        result = {"ok": True, "tokens_per_s": rate, "t_start": t_start, "t_end": result["t_end"],
                  "replay_call_us": {"p50": 60.0 if limited else 50.0}, "step_wait_us": {"p50": 5000.0}}
        print(f"serve: {rate:.0f} tokens/s")
    print(json.dumps(result), flush=True)
    return 0


# --- helpers -------------------------------------------------------------------------------------

def run_matrix(tmp, *args, deviate="", fail="", serve_script=None):
    log = os.path.join(tmp, "fake.log")
    env = dict(os.environ, FAKE_MATRIX_LOG=log, FAKE_MATRIX_DEVIATE=deviate, FAKE_MATRIX_FAIL=fail)
    env.pop("OUT", None)
    cmd = [sys.executable, os.path.join(HERE, "compute_matrix.py"), "--library", LIBRARY, "--out",
           os.path.join(tmp, "out"), "--workload-cmd", f"{sys.executable} {os.path.abspath(__file__)} fake",
           "--seconds", "0.05", "--warmup", "0", "--serve-script", serve_script or os.path.abspath(__file__),
           "--serving-args", "--warmup 0 --seconds 0.05"] + list(args)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    seen = []
    if os.path.exists(log):
        with open(log) as f:
            seen = [json.loads(l) for l in f]
    return r, seen


def load(tmp, name):
    with open(os.path.join(tmp, "out", name)) as f:
        return json.load(f) if name.endswith(".json") else f.read()


def rec(step, **res):
    return (step, res)


class Args:
    """The options main() would pass to Settings, with defaults."""

    def __init__(self, **kw):
        self.quick, self.targets, self.warmup, self.seconds, self.rows = False, None, 0.5, 1.6, None
        self.groups, self.colocated = cm.DEFAULT_GROUPS, cm.DEFAULT_COLOCATED
        self.period, self.budget, self.serve_script = None, None, "/nonexistent/serve.py"
        self.serving_args, self.workload_cmd, self.clock_spin = cm.DEFAULT_SERVING_ARGS, None, False
        self.serving_cpus, self.summary = "all", False
        self.__dict__.update(kw)


def settings(**kw):
    def error(msg):
        raise ValueError(msg)
    return cm.Settings(Args(**kw), error)


# --- tests ---------------------------------------------------------------------------------------

class Plan(unittest.TestCase):
    def test_order_of_every_row(self):
        s = settings()
        blocks = cm.build_plan(s)
        rows = [b[0][1] for b in blocks if b[0][0] == "run"]
        self.assertEqual(rows, [r.id for r in cm.ROWS if r.id != "serving"])  # serve.py absent: skipped
        self.assertEqual(s.skipped[0][0], "serving")
        for i, block in enumerate(b for b in blocks if b[0][0] == "run"):
            targets = [10, 30, 60, 90] if i % 2 == 0 else [90, 60, 30, 10]
            self.assertEqual([st[2] for st in block], [None, targets[0], targets[1], None, targets[2], targets[3], None])
        groups = [b[0] for b in blocks if b[0][0] == "group"]
        self.assertEqual(groups, [["group", "4x200us", [30, 60]], ["group", "4x200us", [30, 30, 30]],
                                  ["group", "steps-8x50us", [30, 60]], ["group", "steps-8x50us", [30, 30, 30]],
                                  ["group", "matmul", [30, 60]], ["group", "matmul", [30, 30, 30]]])
        # the acceptance's concurrency: every stream count, kernels 5 µs .. 5 ms, threads, processes, graphs
        args = " ".join(cm.ROW[r].args for r in rows)
        for needle in ("--streams 1 ", "--streams 2 ", "--streams 4 ", "--streams 8 ", "--streams 16 ",
                       "--kernel-us 5 ", "--kernel-us 5000", "--threads 4", "--graph-branches", "--blocks-per-sm",
                       "--streams 2"):
            self.assertIn(needle, args + " ")
        self.assertEqual(sorted(cm.ROW[r].procs for r in rows if cm.ROW[r].procs > 1), [2, 4])

    def test_serving_last_and_estimate(self):
        s = settings(serve_script=os.path.abspath(__file__), rows="serving,1x5us,train", quick=True)
        blocks = cm.build_plan(s)
        self.assertEqual([b[0][1] for b in blocks], ["1x5us", "train", "serving"])
        self.assertEqual([[st[2] for st in b] for b in blocks],  # every other reversed; serving: a native
                         [[None, 30, 60, None], [None, 60, 30, None], [None, 30, None, 60, None]])  # between
        self.assertEqual([st[2] for st in cm.build_plan(settings(serve_script=os.path.abspath(__file__),
                                                                 rows="serving"))[0]],
                         [None, 10, None, 30, None, 60, None, 90, None])
        self.assertEqual(s.serving_window, (2.0, 12.0))
        one = {"spin": 0.5 + 0.5 + 1.6 + cm.SPAWN_S, "torch": 7.0 + 0.5 + 1.6 + cm.SPAWN_S,
               "serving": 10.0 + 2.0 + 12.0 + cm.SPAWN_S}
        expected = 1.0 + cm.BUILD_S + 4 * (one["spin"] + one["torch"]) + 5 * one["serving"]
        self.assertAlmostEqual(cm.estimate_seconds(blocks, s), expected)
        # start-up seen: a row's own replaces its estimate; its kind's excess corrects the others'
        tail = 0.5 + 1.6 + cm.SPAWN_S
        self.assertAlmostEqual(cm.step_seconds(["run", "train", None], s, {"torch": -2.0}), 5.0 + tail)
        self.assertAlmostEqual(cm.step_seconds(["run", "train", None], s, {"torch": -2.0, "train": 9.0}), 9.0 + tail)
        self.assertAlmostEqual(cm.step_seconds(["group", "1x5us", [30, 60]], s, {"spin": 0.25}),
                               0.75 + tail + cm.BARRIER_S)

    def test_each_part_fits_a_device_call(self):
        # tests/gpu/run.sh runs the matrix in two parts (its header), each with ~1 min of library
        # build in one 10-minute call; between them they run every row and both co-located rows
        rows = set()
        for part, colocated in (("1x*,2x*,4x*,8x*,16x*,4threads*,graph*,*procs*,steps*,jax*", "4x200us"),
                                ("matmul*,train,serving", "matmul")):
            s = settings(rows=part, colocated=colocated, serve_script=os.path.abspath(__file__))
            self.assertLess(cm.estimate_seconds(cm.build_plan(s), s), 500, part)
            rows.update(s.rows)
        self.assertEqual(rows, set(cm.ROW))

    def test_the_jax_row_is_skipped_without_jax(self):
        try:
            cm.jax_installed = lambda: False
            s = settings(rows="jax*,train")
            self.assertEqual(s.rows, ["train"])
            self.assertEqual(s.skipped, [("jax-train", f"JAX is not installed for {sys.executable}: the jax-train row "
                                                       "is skipped")])
            self.assertEqual(settings(rows="jax*", workload_cmd="fake").rows, ["jax-train"])  # the fake needs no JAX
        finally:
            cm.jax_installed = lambda: True
        self.assertIsInstance(JAX_INSTALLED(), bool)

    def test_rows_by_pattern_and_groups_follow_rows(self):
        s = settings(rows="16x*,matmul*")
        self.assertEqual(s.rows, ["16x50us", "16x5ms", "matmul", "matmul-2streams"])
        self.assertEqual(s.colocated, ["matmul"])
        self.assertIn("4x200us", " ".join(s.notes))

    def test_bad_options_name_the_input(self):
        for kw, needle in ((dict(rows="nope*"), "--rows 'nope*'"), (dict(targets="0"), "0 is outside"),
                           (dict(targets="101"), "101 is outside"), (dict(targets="3x"), "'3x'"),
                           (dict(groups="30"), "--groups '30'"), (dict(groups="30+abc"), "'abc'"),
                           (dict(colocated="nope"), "--colocated 'nope'"), (dict(colocated="serving"), "serving"),
                           (dict(budget=0.0), "--budget 0"), (dict(seconds=0.0), "--seconds 0"),
                           (dict(serving_args="--warmup 'x"), "--serving-args"), (dict(period="3x"), "--period '3x'"),
                           (dict(serving_cpus="0-x"), "--serving-cpus '0-x'"),
                           (dict(serving_cpus="7-0"), "runs backwards")):
            with self.subTest(kw=kw):
                with self.assertRaises(ValueError) as e:
                    settings(**kw)
                self.assertIn(needle, str(e.exception))

    def test_serving_cpus(self):
        def fail(msg):
            raise ValueError(msg)
        self.assertEqual(cm.serving_cpus("auto", fail, allowed=list(range(16)), have_taskset=True), "0,1,2,3,4,5,6,7")
        self.assertEqual(cm.serving_cpus("auto", fail, allowed=[2, 3, 5, 8, 9, 10, 11, 12], have_taskset=True),
                         "2,3,5,8")
        self.assertIsNone(cm.serving_cpus("auto", fail, allowed=list(range(4)), have_taskset=True))
        self.assertIsNone(cm.serving_cpus("auto", fail, allowed=list(range(16)), have_taskset=False))
        self.assertIsNone(cm.serving_cpus("all", fail))
        self.assertEqual(cm.serving_cpus("0-7,9", fail), "0-7,9")
        s = settings(serving_cpus="0-3", serve_script=__file__, rows="serving")
        runner = cm.MatrixRunner(s, None, None, None)
        self.assertEqual(runner.command("serving")[:4], ["taskset", "-c", "0-3", sys.executable])
        self.assertNotIn("taskset", runner.command("1x5us"))

    def test_dry_run_prints_plan_and_commands(self):
        r = subprocess.run([sys.executable, os.path.join(HERE, "compute_matrix.py"), "--library", "lib.so",
                            "--dry-run", "--serve-script", "/nonexistent/serve.py"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertRegex(out.splitlines()[0], r"^plan: 25 blocks, 139 steps, about [\d.]+ min")
        self.assertIn("concurrency' run --streams 8 --kernel-us 1000 --blocks-per-sm 2 --warmup 0.5 --seconds 1.6", out)
        # the rows whose period stretches to 200 ms: 2.5 windows
        self.assertIn("concurrency' run --streams 16 --kernel-us 50 --warmup 0.5 --seconds 4", out)
        self.assertIn("concurrency' run --streams 16 --kernel-us 5000 --warmup 0.5 --seconds 4", out)
        self.assertIn("torch_workload.py matmul 0.5 1.6 --size 4096 --streams 2", out)
        self.assertIn("--barrier DIR NAME", out)
        self.assertIn("4 processes × 1 stream, 50 µs kernels: limit 10 (4 processes of one container, started together)", out)
        self.assertIn("not run: serving: /nonexistent/serve.py not found", out)
        self.assertNotIn("--clock-spin", out)
        r = subprocess.run([sys.executable, os.path.join(HERE, "compute_matrix.py"), "--library", "lib.so",
                            "--dry-run", "--rows", "1x5us", "--clock-spin"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("run --streams 1 --kernel-us 5 --warmup 0.5 --seconds 1.6 --clock-spin", r.stdout)
        r = subprocess.run([sys.executable, os.path.join(HERE, "compute_matrix.py"), "--library", "lib.so",
                            "--dry-run", "--targets", "101"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--targets: 101 is outside 1..100", r.stderr)


class Arithmetic(unittest.TestCase):
    def test_reference_is_the_natives_either_side(self):
        records = [rec(["run", "4x200us", None], rate=100.0), rec(["run", "4x200us", 30], rate=30.0),
                   rec(["run", "4x200us", 60], rate=66.0), rec(["run", "4x200us", None], rate=120.0),
                   rec(["run", "4x200us", 10], rate=11.0), rec(["run", "4x200us", None], rate=110.0)]
        lines, summary = cm.analyse(records)
        self.assertEqual(summary["4x200us"]["rate"], 110.0)
        self.assertAlmostEqual(summary["4x200us"]["spread"], 20.0)
        by = {l["target"]: l for l in lines}
        self.assertAlmostEqual(by[30]["share"], 100 * 30 / 110)  # natives 100 and 120
        self.assertTrue(by[30]["pass"])
        self.assertAlmostEqual(by[60]["share"], 60.0)
        self.assertAlmostEqual(by[10]["share"], 100 * 11 / 115)
        self.assertTrue(by[10]["pass"])

    def test_tolerance_is_three_points(self):
        for rate, ok in ((33.0, True), (27.0, True), (33.2, False), (26.8, False)):
            lines, _ = cm.analyse([rec(["run", "1x5us", None], rate=100.0), rec(["run", "1x5us", 30], rate=rate),
                                   rec(["run", "1x5us", None], rate=100.0)])
            self.assertEqual(lines[0]["pass"], ok, rate)

    def test_workload_below_the_gpu_is_judged_by_the_busy_time_a_limit_leaves(self):
        native = dict(rate=2000.0, util=47.0)
        for target, rate, expected, ok in ((30, 1280.0, 63.8, True), (30, 600.0, 63.8, False),
                                           (60, 1990.0, 100.0, True), (90, 1800.0, 100.0, False)):
            lines, summary = cm.analyse([rec(["run", "serving", None], **native), rec(["run", "serving", target], rate=rate),
                                         rec(["run", "serving", None], **native)])
            self.assertAlmostEqual(lines[0]["expected"], expected, places=1)
            self.assertEqual(lines[0]["pass"], ok, (target, rate))
        self.assertIn(" of 100.0 ", cm.markdown(lines, summary, [], "h"))
        self.assertIn("share 90.0 of 100.0", cm.tsv(lines, []))

    def test_e_comes_from_the_same_natives_as_the_reference_rate(self):
        # a server whose native rate and GPU-Util drift together (the same busy time per token):
        # a limited run holding 60% busy does 60 / 0.018 tokens/s whichever natives are around it
        slow, fast = dict(rate=4750.0, util=85.5), dict(rate=5300.0, util=95.4)
        rate = 60.0 / (95.4 / 5300.0)
        lines, summary = cm.analyse([rec(["run", "serving", None], **slow), rec(["run", "serving", 60], rate=rate),
                                     rec(["run", "serving", None], **slow), rec(["run", "serving", None], **fast),
                                     rec(["run", "serving", 60], rate=rate), rec(["run", "serving", None], **fast)])
        self.assertAlmostEqual(summary["serving"]["util"], 90.45)
        for line, util in zip(lines, (85.5, 95.4)):
            self.assertAlmostEqual(line["expected"], 6000.0 / util)
            self.assertAlmostEqual(line["share"], line["expected"], places=6)
            self.assertTrue(line["pass"])
        # against the natives' mean GPU-Util (E 66.3) both would miss, one each way
        self.assertGreater(abs(lines[0]["share"] - 6000.0 / 90.45), cm.TOLERANCE)
        self.assertGreater(abs(lines[1]["share"] - 6000.0 / 90.45), cm.TOLERANCE)

    def test_busy_time_per_unit_of_work_against_the_natives_either_side(self):
        # natives 18.0 and 18.2 GPU-Util points per 1,000 tokens/s, the limited run 18.72: 4% more
        lines, summary = cm.analyse([rec(["run", "serving", None], rate=5000.0, util=90.0),
                                     rec(["run", "serving", 60], rate=3205.0, util=60.0),
                                     rec(["run", "serving", None], rate=5000.0, util=91.0),
                                     rec(["run", "1x2ms", None], rate=100.0, util=99.0),
                                     rec(["run", "1x2ms", 60], rate=60.0, util=60.0),
                                     rec(["run", "1x2ms", None], rate=100.0, util=99.0)])
        by = {l["row"]: l for l in lines}
        self.assertAlmostEqual(by["serving"]["busy_per_work"], (60.0 / 3205.0) / (90.5 / 5000.0))
        self.assertAlmostEqual(by["1x2ms"]["busy_per_work"], (60.0 / 60.0) / (99.0 / 100.0))
        md = cm.markdown(lines, summary, [], "h")
        self.assertIn("LLM serving (bench/serving/serve.py) (at 60 1.034)", md)
        self.assertNotIn("1 stream, 2 ms kernels (at 60", md)  # judged against the limit itself
        no_util = cm.analyse([rec(["run", "serving", None], rate=5000.0), rec(["run", "serving", 60], rate=3000.0),
                              rec(["run", "serving", None], rate=5000.0)])[0]
        self.assertIsNone(no_util[0]["busy_per_work"])

    def test_a_row_that_fills_the_gpu_is_judged_against_the_limit_whatever_its_neighbours(self):
        lines, _ = cm.analyse([rec(["run", "1x2ms", None], rate=100.0, util=99.0),
                               rec(["run", "1x2ms", 60], rate=60.0),
                               rec(["run", "1x2ms", None], rate=100.0, util=94.0),
                               rec(["run", "1x2ms", None], rate=100.0, util=100.0)])
        self.assertEqual(lines[0]["expected"], 60.0)  # the row's mean GPU-Util is 97.7

    def test_a_row_a_few_points_below_the_gpu_is_judged_by_its_busy_time_too(self):
        # natives 95% busy: a limit of 90 leaves 94.7% of their busy time; a row filling the GPU
        # (99) is judged against the limit
        for util, rate, expected in ((95.0, 1894.0, 94.7), (99.0, 1800.0, 90.0)):
            native = dict(rate=2000.0, util=util)
            lines, _ = cm.analyse([rec(["run", "serving", None], **native), rec(["run", "serving", 90], rate=rate),
                                   rec(["run", "serving", None], **native)])
            self.assertAlmostEqual(lines[0]["expected"], expected, places=1)
            self.assertTrue(lines[0]["pass"], util)

    def capped(self, limited, native_extra=None, alone=True):
        native = dict(rate=600.0, util=100.0, clock=1460.0, capped=0.9, **(native_extra or {}))
        if alone:
            return cm.analyse([rec(["run", "matmul", None], **native), rec(["run", "matmul", 30], **limited),
                               rec(["run", "matmul", None], **native)])
        return cm.analyse([rec(["run", "matmul", None], **native),
                           rec(["group", "matmul", [30, 60]], containers=[
                               dict(name="c1-30", target=30, **limited),
                               dict(name="c2-60", target=60, rate=360.0, util=95.0)])])

    def test_power_capped_passes_on_gpu_util(self):
        lines, summary = self.capped(dict(rate=210.0, util=31.0, clock=1950.0))  # share 35
        self.assertTrue(summary["matmul"]["power_capped"])
        self.assertEqual(summary["matmul"]["power_basis"], "clock-event reasons")
        self.assertTrue(lines[0]["pass"])
        self.assertEqual(lines[0]["basis"], "GPU-Util (power-capped)")
        self.assertIn("PASS†", cm.markdown(lines, summary, [], "h"))
        self.assertIn("judged by GPU-Util 31 vs 30.0", cm.tsv(lines, []))

    def test_power_capped_util_off_target_fails(self):
        lines, _ = self.capped(dict(rate=210.0, util=40.0, clock=1950.0))
        self.assertFalse(lines[0]["pass"])

    def test_util_target_scales_with_native_util(self):
        lines, _ = self.capped(dict(rate=210.0, util=26.0), native_extra=None)  # native util 100: 26 is off
        self.assertFalse(lines[0]["pass"])
        native = dict(rate=600.0, util=90.0, capped=1.0)
        lines, _ = cm.analyse([rec(["run", "matmul", None], **native),
                               rec(["run", "matmul", 30], rate=210.0, util=26.0),
                               rec(["run", "matmul", None], **native)])
        self.assertAlmostEqual(lines[0]["util_target"], 27.0)
        self.assertTrue(lines[0]["pass"])

    def test_power_capped_below_target_fails(self):
        lines, _ = self.capped(dict(rate=150.0, util=30.0))  # share 25: the exception is for above only
        self.assertFalse(lines[0]["pass"])

    def test_not_capped_above_target_fails_even_with_util_on_target(self):
        native = dict(rate=600.0, util=100.0, clock=1980.0, capped=0.0)
        lines, summary = cm.analyse([rec(["run", "matmul", None], **native),
                                     rec(["run", "matmul", 30], rate=210.0, util=30.0, clock=1980.0),
                                     rec(["run", "matmul", None], **native)])
        self.assertFalse(summary["matmul"]["power_capped"])
        self.assertFalse(lines[0]["pass"])

    def test_clock_rise_flags_power_capped_without_reasons(self):
        native = dict(rate=600.0, util=100.0, clock=1460.0)
        for limited_clock, capped in ((1950.0, True), (1480.0, False)):
            lines, summary = cm.analyse([rec(["run", "matmul", None], **native),
                                         rec(["run", "matmul", 30], rate=210.0, util=30.0, clock=limited_clock),
                                         rec(["run", "matmul", None], **native)])
            self.assertEqual(summary["matmul"]["power_capped"], capped)
            self.assertEqual(summary["matmul"]["power_basis"], "SM clock")
            self.assertEqual(lines[0]["pass"], capped)

    def test_colocated_has_no_power_capped_exception(self):
        lines, _ = self.capped(dict(rate=210.0, util=30.0), alone=False)
        self.assertEqual([l["container"] for l in lines], ["c1-30", "c2-60"])
        self.assertAlmostEqual(lines[0]["share"], 35.0)
        self.assertFalse(lines[0]["pass"])
        self.assertAlmostEqual(lines[1]["share"], 60.0)
        self.assertTrue(lines[1]["pass"])

    def test_filler_only_for_power_capped_rows_with_room(self):
        self.assertEqual(cm.filler_limit([30, 60], {"power_capped": True}), 10)
        self.assertEqual(cm.filler_limit([30, 30, 30], {"power_capped": True}), 10)
        self.assertIsNone(cm.filler_limit([30, 60], {"power_capped": False}))
        self.assertIsNone(cm.filler_limit([30, 60], None))
        self.assertIsNone(cm.filler_limit([40, 60], {"power_capped": True}))

    def test_filler_is_named_and_judged(self):
        native = dict(rate=600.0, util=100.0, clock=1460.0, capped=0.9)
        lines, _ = cm.analyse([rec(["run", "matmul", None], **native),
                               rec(["group", "matmul", [30, 60]], filler=10, containers=[
                                   dict(name="c1-30", target=30, rate=180.0), dict(name="c2-60", target=60, rate=366.0),
                                   dict(name="c3-10", target=10, rate=90.0)])])
        self.assertEqual([l["scenario"] for l in lines], ["co-located 30 + 60 + 10 (filler)"] * 3)
        self.assertEqual([l["pass"] for l in lines], [True, True, False])  # the filler at 15: outside 10 +-3
        table = cm.markdown(lines, {}, [], "h")
        self.assertIn("| co-located 30 + 60 + 10 (filler) |", table)
        self.assertIn("c3-10 (10)", table)

    def test_errors_and_missing_natives_fail(self):
        lines, _ = cm.analyse([rec(["run", "1x5us", None], rate=100.0), rec(["run", "1x5us", 30], error="exit 2: x"),
                               rec(["run", "8x1ms", 60], rate=60.0),
                               rec(["group", "4x200us", [30, 60]], error="cannot start")])
        self.assertEqual([l["pass"] for l in lines], [False] * 4)
        self.assertEqual(lines[0]["error"], "exit 2: x")
        self.assertEqual(lines[1]["error"], "no native reference")
        self.assertEqual([l["container"] for l in lines[2:]], ["c1-30", "c2-60"])
        self.assertIn("FAIL (exit 2: x)", cm.markdown(lines, {}, [], "h"))


class FakeRuns(unittest.TestCase):
    ROWS = "1x50us,4x200us,2procs-2x500us,matmul,serving"

    def test_all_pass(self):
        with tempfile.TemporaryDirectory() as tmp:
            r, seen = run_matrix(tmp, "--rows", self.ROWS, "--targets", "30,60")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("plan: 9 blocks, 25 steps", r.stderr)  # serving: a native run between its two
            data = load(tmp, "compute-matrix.json")
            self.assertTrue(data["complete"])
            lines = data["lines"]
            alone = [l for l in lines if l["scenario"] == "alone"]
            self.assertEqual(len(alone), 10)  # 5 rows x 2 targets
            self.assertEqual(len(lines), 10 + 2 * (2 + 3))
            for l in lines:
                self.assertTrue(l["pass"], l)
                self.assertAlmostEqual(l["share"], l["target"], places=6)
            procs = next(l for l in alone if l["row"] == "2procs-2x500us" and l["target"] == 30)
            self.assertAlmostEqual(procs["rate"], 2 * 2e6 / 500 * 0.3)  # the processes' sum
            serving = next(l for l in alone if l["row"] == "serving")
            self.assertAlmostEqual(serving["reference"], 5000.0)
            table = r.stdout
            self.assertIn("| 2 processes × 2 streams, 500 µs kernels | 8,000 kernels/s", table)
            self.assertIn("| co-located 30 + 30 + 30 | cuBLAS bf16 8192³ matmul, 1 stream | c3-30 (30) | 30 ± 3 | 30.0", table)
            self.assertIn("20 of 20 PASS", table)
            self.assertEqual(table, load(tmp, "compute-matrix.md"))
            tsv = load(tmp, "compute-matrix.tsv").splitlines()
            self.assertEqual(len(tsv), 20)
            self.assertTrue(all(t.startswith("PASS\tmatrix ") for t in tsv))
            self.check_environments(seen)
            # redrawn from the JSON: the same table
            r2 = subprocess.run([sys.executable, os.path.join(HERE, "compute_matrix.py"), "--from-json",
                                 os.path.join(tmp, "out", "compute-matrix.json"), "--out", os.path.join(tmp, "again")],
                                capture_output=True, text=True, timeout=60)
            self.assertEqual(r2.returncode, 0, r2.stderr)
            self.assertEqual(r2.stdout, table)
            # a run in two parts: the parts' runs joined, the first part's header
            data = load(tmp, "compute-matrix.json")
            cut = next(i for i, r in enumerate(data["records"]) if r["step"][0] == "group")
            parts = []
            for k, records in enumerate((data["records"][:cut], data["records"][cut:])):
                parts.append(os.path.join(tmp, f"part{k}.json"))
                with open(parts[-1], "w") as f:
                    json.dump({**data, "records": records}, f)
            r3 = subprocess.run([sys.executable, os.path.join(HERE, "compute_matrix.py"), "--from-json", *parts,
                                 "--out", os.path.join(tmp, "joined")], capture_output=True, text=True, timeout=60)
            self.assertEqual(r3.returncode, 0, r3.stderr)
            self.assertEqual(r3.stdout, table)
            # the parts in the other order: the rows still in the matrix's order
            r3b = subprocess.run([sys.executable, os.path.join(HERE, "compute_matrix.py"), "--from-json",
                                  *reversed(parts), "--out", os.path.join(tmp, "joined-b")], capture_output=True,
                                 text=True, timeout=60)
            self.assertEqual(r3b.returncode, 0, r3b.stderr)
            self.assertEqual(r3b.stdout, table)
            # a part that measured a row again: the first part's runs count, the repeat is listed
            r4 = subprocess.run([sys.executable, os.path.join(HERE, "compute_matrix.py"), "--from-json", *parts,
                                 parts[0], "--out", os.path.join(tmp, "again2")], capture_output=True, text=True,
                                timeout=60)
            self.assertEqual(r4.returncode, 0, r4.stderr)
            self.assertTrue(r4.stdout.startswith(table.rstrip("\n")), r4.stdout)
            self.assertIn("- left out: 1x50us: measured again in", r4.stdout)

    def check_environments(self, seen):
        """Natives unpreloaded without a ledger; one fresh ledger per container; the processes of a
        container share it; co-located containers do not; serving got its own window."""
        native = [p for p in seen if p["limit"] is None]
        limited = [p for p in seen if p["limit"] is not None]
        self.assertTrue(native and limited)
        for p in native:
            self.assertIsNone(p["preload"])
            self.assertIsNone(p["ledger"])
        for p in limited:
            self.assertEqual(os.path.realpath(p["preload"]), os.path.realpath(LIBRARY))
        by_ledger = {}
        for p in limited:
            by_ledger.setdefault(p["ledger"], []).append(p)
        for ledger, procs in by_ledger.items():
            self.assertEqual(len({p["limit"] for p in procs}), 1)
            names = sorted(p["barrier"] or "" for p in procs)
            if procs[0]["args"][:3] == ["run", "--streams", "2"] and procs[0]["args"][4] == "500":
                self.assertEqual(names, ["p1", "p2"], "two processes of one container share one ledger")
            elif procs[0]["barrier"] and procs[0]["barrier"].startswith("c"):
                self.assertEqual(len(procs), 1, "co-located containers have ledgers of their own")
            else:
                self.assertEqual(len(procs), 1)
        groups = [p for p in limited if p["barrier"] and p["barrier"].startswith("c")]
        self.assertEqual(sorted(p["barrier"] for p in groups),
                         sorted(["c1-30-p1", "c2-60-p1", "c1-30-p1", "c2-30-p1", "c3-30-p1"] * 2))
        serving = [p for p in seen if p["kind"] == "serving"]
        self.assertEqual(len(serving), 5)  # native 30 native 60 native
        self.assertEqual(serving[0]["args"][-4:], ["--warmup", "0", "--seconds", "0.05"])

    def test_failures_and_errors(self):
        with tempfile.TemporaryDirectory() as tmp:
            r, _ = run_matrix(tmp, "--rows", "4x200us,matmul", "--targets", "30,60", "--groups", "30+60",
                              deviate="--kernel-us 200@60=5;--kernel-us 200@30=-3", fail="matmul@30")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            lines = load(tmp, "compute-matrix.json")["lines"]
            verdict = {(l["scenario"], l["row"], l["target"]): l for l in lines}
            self.assertFalse(verdict[("alone", "4x200us", 60)]["pass"])
            self.assertAlmostEqual(verdict[("alone", "4x200us", 60)]["share"], 65.0)
            self.assertTrue(verdict[("alone", "4x200us", 30)]["pass"])  # 27.0: on the edge, inside
            self.assertFalse(verdict[("co-located 30 + 60", "4x200us", 60)]["pass"])
            self.assertIn("exit 2: fake: told to fail here", verdict[("alone", "matmul", 30)]["error"])
            self.assertIn("exit 2", verdict[("co-located 30 + 60", "matmul", 30)]["error"])
            self.assertTrue(verdict[("co-located 30 + 60", "matmul", 60)]["pass"])
            self.assertIn("4 of 8 PASS", r.stdout)
            self.assertIn("| **65.0** (–) FAIL |", r.stdout)
            tsv = load(tmp, "compute-matrix.tsv")
            self.assertIn("FAIL\tmatrix 4 streams, 200 µs kernels limit 60\tshare 65.0", tsv)

    def test_budget_skips_whole_blocks(self):
        with tempfile.TemporaryDirectory() as tmp:
            # the spin row's estimate fits (7 x under a second), the torch row's (7 x 5 s) does not
            r, seen = run_matrix(tmp, "--rows", "1x50us,matmul,serving", "--groups", "", "--budget", "12")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertEqual({p["kind"] for p in seen}, {"spin"})
            data = load(tmp, "compute-matrix.json")
            self.assertEqual([s[0] for s in data["skipped"]], ["cuBLAS bf16 8192³ matmul, 1 stream",
                                                               "LLM serving (bench/serving/serve.py)"])
            self.assertIn("4 of 4 PASS", r.stdout)
            self.assertIn("- not run: cuBLAS bf16 8192³ matmul, 1 stream: budget: needs about", r.stdout)
            self.assertIn("FAIL\tmatrix cuBLAS bf16 8192³ matmul, 1 stream\tnot run: budget", load(tmp, "compute-matrix.tsv"))

    def test_killed_run_leaves_its_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, FAKE_MATRIX_LOG=os.path.join(tmp, "log"))
            out = os.path.join(tmp, "out")
            proc = subprocess.Popen([sys.executable, os.path.join(HERE, "compute_matrix.py"), "--library", LIBRARY,
                                     "--out", out, "--workload-cmd", f"{sys.executable} {os.path.abspath(__file__)} fake",
                                     "--rows", "1x50us", "--groups", "", "--seconds", "0.3", "--warmup", "0"],
                                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            path = os.path.join(out, "compute-matrix.json")
            deadline = time.monotonic() + 60
            records = []
            while time.monotonic() < deadline and len(records) < 3:
                time.sleep(0.05)
                try:
                    with open(path) as f:
                        records = json.load(f)["records"]
                except (OSError, ValueError):
                    pass
            # The whole session: a workload left running would write into tmp while it is removed.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            with open(path) as f:
                data = json.load(f)
            self.assertFalse(data["complete"])
            self.assertGreaterEqual(len(data["records"]), 3)
            r = subprocess.run([sys.executable, os.path.join(HERE, "compute_matrix.py"), "--from-json", path,
                                "--out", os.path.join(tmp, "again")], capture_output=True, text=True, timeout=60)
            self.assertIn("| 1 stream, 50 µs kernels | 20,000 kernels/s", r.stdout)
            self.assertIn("**10.0** (–) PASS", r.stdout)

    def test_serving_absent_is_reported_not_failed(self):
        with tempfile.TemporaryDirectory() as tmp:
            r, seen = run_matrix(tmp, "--rows", "1x5us,serving", "--quick", "--groups", "",
                                 serve_script=os.path.join(tmp, "no-serve.py"))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertNotIn("serving", {p["kind"] for p in seen})
            self.assertIn("- not run: serving: " + os.path.join(tmp, "no-serve.py") + " not found", r.stdout)
            self.assertIn("INFO\tmatrix serving\tnot run", load(tmp, "compute-matrix.tsv"))

    def test_summary_of_limited_runs(self):
        for summary in (True, False):
            with tempfile.TemporaryDirectory() as tmp:
                r, _ = run_matrix(tmp, "--rows", "1x50us", "--quick", "--groups", "",
                                  *(["--summary"] if summary else []))
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                records = load(tmp, "compute-matrix.json")["records"]
                limited = [x["result"] for x in records if x["step"][2] is not None]
                natives = [x["result"] for x in records if x["step"][2] is None]
                self.assertEqual(len(limited), 2)
                for res in natives:
                    self.assertNotIn("limiter", res["procs"][0])
                for res, target in zip(limited, (30, 60)):
                    if summary:
                        self.assertEqual(res["procs"][0]["limiter"]["measured_ppm"], target * 10000)
                        self.assertAlmostEqual(res["procs"][0]["limiter"]["marks_per_launch"], 0.02)
                    else:
                        self.assertNotIn("limiter", res["procs"][0])
                self.assertEqual("limiter: measured 30.0%, 0.020 marks per launch, 3 queue waits, period 50 ms"
                                 in r.stderr, summary, r.stderr)


class UtilSamples(unittest.TestCase):
    """compute_common.interval_mean: the driver's samples, each the mean since the previous one."""

    def test_only_samples_inside_the_window_count(self):
        from compute_common import interval_mean
        samples = [(0.0, 0.0), (0.2, 50.0), (0.4, 70.0), (0.6, 90.0), (1.0, 10.0)]
        # [0.1, 0.7]: only (0.2, 0.4] and (0.4, 0.6] lie within; they cover 0.4 of 0.6 s
        self.assertAlmostEqual(interval_mean(samples, 0.1, 0.7), 80.0)
        self.assertAlmostEqual(interval_mean(samples, 0.2, 0.4), 70.0)
        # the last span (0.6, 1.0] counts 0.4 s: [0.2, 1.0] averages 70, 90, 10 by time
        self.assertAlmostEqual(interval_mean(samples, 0.2, 1.0), (0.2 * 70 + 0.2 * 90 + 0.4 * 10) / 0.8)

    def test_first_sample_only_bounds_and_long_gaps_are_capped(self):
        from compute_common import interval_mean
        samples = [(0.0, 100.0), (0.2, 0.0), (0.4, 0.0), (2.0, 40.0)]
        # the first sample's own span is unknown: a window before 0.0 finds nothing
        self.assertIsNone(interval_mean(samples, -0.2, 0.0))
        # the last gap (1.6 s) counts as 2 x the median (0.2 s): (1.6, 2.0] is 40
        self.assertAlmostEqual(interval_mean(samples, 1.6, 2.0), 40.0)
        # (0.4, 1.6] has no sample: the window [0.2, 2.0] is covered 0.2 + 0.4 of 1.8 s
        self.assertIsNone(interval_mean(samples, 0.2, 2.0))

    def test_nothing_to_average(self):
        from compute_common import interval_mean
        self.assertIsNone(interval_mean([], 0.0, 1.0))
        self.assertIsNone(interval_mean([(0.0, 5.0)], 0.0, 1.0))
        self.assertIsNone(interval_mean([(0.0, 5.0), (0.2, 5.0)], 1.0, 1.0))
        # a window inside one sample's span: nothing lies within it
        self.assertIsNone(interval_mean([(0.0, 5.0), (0.2, 5.0)], 0.05, 0.15))


class Header(unittest.TestCase):
    def test_commit_names_changed_tracked_files(self):
        import compute_common
        with tempfile.TemporaryDirectory() as tmp:
            def git(*args):
                subprocess.run(["git", "-C", tmp, "-c", "user.name=t", "-c", "user.email=t@t", *args],
                               check=True, capture_output=True)
            git("init", "-q")
            with open(os.path.join(tmp, "a.txt"), "w") as f:
                f.write("one\n")
            git("add", "a.txt")
            git("commit", "-q", "-m", "first commit")
            clean = compute_common.git_describe(tmp)
            self.assertTrue(clean.endswith(" first commit"), clean)
            with open(os.path.join(tmp, "a.txt"), "w") as f:
                f.write("two\n")
            with open(os.path.join(tmp, "untracked.txt"), "w") as f:
                f.write("not counted\n")
            self.assertEqual(compute_common.git_describe(tmp), clean + " (+ changes to 1 tracked file)")
        self.assertEqual(compute_common.git_describe(os.path.join(tmp, "gone")), "")


class AccuracyBenchmark(unittest.TestCase):
    """bench/compute_accuracy.py's runs through the shared launcher, against the fake."""

    def test_matmul_alone_and_colocated(self):
        import compute_accuracy as ca
        with tempfile.TemporaryDirectory() as tmp:
            worker = os.path.join(tmp, "torch_worker.py")
            with open(worker, "w") as f:
                f.write(f"import runpy, sys\nsys.argv = [{os.path.abspath(__file__)!r}, 'fake', 'torch'] + sys.argv[1:]\n"
                        f"sys.exit(runpy.run_path({os.path.abspath(__file__)!r}, run_name='__main__'))\n")
            old_worker, old_argv, old_env = ca.TORCH_WORKER, sys.argv, dict(os.environ)
            ca.TORCH_WORKER = worker
            os.environ.update(FAKE_MATRIX_LOG=os.path.join(tmp, "log"), FAKE_MATRIX_DEVIATE="matmul@60=4")
            sys.argv = ["compute_accuracy.py", "--library", LIBRARY, "--out", os.path.join(tmp, "out"),
                        "--workloads", "matmul", "--quick", "--seconds", "0.05", "--warmup", "0"]
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                    rc = ca.main()
            finally:
                ca.TORCH_WORKER, sys.argv = old_worker, old_argv
                os.environ.clear()
                os.environ.update(old_env)
            self.assertEqual(rc, 1)  # limit 60 got 64
            rows = json.load(open(os.path.join(tmp, "out", "compute-accuracy.json")))["rows"]
            got = {(r["scenario"], r["target"]): (round(r["achieved"], 6), r["pass"]) for r in rows}
            self.assertEqual(got, {("alone", 30): (30.0, True), ("alone", 60): (64.0, False),
                                   ("co-located 30 + 60", 30): (30.0, True),
                                   ("co-located 30 + 60", 60): (64.0, False)})
            self.assertIn("2 of 4 PASS", out.getvalue())


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "fake":
        sys.exit(fake(sys.argv[2:]))
    if len(sys.argv) < 2 or not os.path.isfile(sys.argv[1]):
        sys.exit("usage: compute_matrix_test.py <library to preload (bench/libvgpu_null_preload.so)>")
    LIBRARY = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
