#!/usr/bin/env python3
"""CI test of the serving benchmark's orchestration (no GPU, no torch): run.py's plan, commands,
barrier, share and added-latency arithmetic and FAIL logic, against a fake `vgpu` and a fake
serve command that speak the same protocol as vgpu run and serve.py; serve.py's option checks.

    python3 bench/serving/run_test.py                 # the tests
    python3 bench/serving/run_test.py fake-vgpu ...   # (used by the tests) vgpu run stand-in
    python3 bench/serving/run_test.py fake-serve ...  # (used by the tests) serve.py stand-in

The fake vgpu records its command line and runs the command with FAKE_COMPUTE / FAKE_MEMORY set.
The fake serve meets run.py at the barrier and reports, for compute limit P (100 when native):
tokens/s = FAKE_BASE x P / 100 (native runs take FAKE_SOLO_TPS in turn), latency p50 / p99 =
100 / 300 ms x 100 / P, TPOT p50 / p99 = 2 / 4 ms x 100 / P, peak NVML 1 MiB below the limit
(FAKE_OVER=P: 5 MiB above it), and fails at start-up with an OOM when FAKE_OOM=P (exit 3), or
dies without a result before the barrier when FAKE_DIE=P.
"""
import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

RUN = os.path.join(HERE, "run.py")
SERVE = os.path.join(HERE, "serve.py")
GIB = 1 << 30
MIB = 1 << 20


# --- the fakes -------------------------------------------------------------------------------------

def fake_vgpu(argv):
    if not argv or argv[0] != "run" or "--" not in argv:
        sys.exit(f"fake vgpu: expected run OPTIONS -- COMMAND, got {argv}")
    split = argv.index("--")
    options = dict(zip(argv[1:split:2], argv[2:split:2]))
    with open(os.environ["FAKE_LOG"], "a") as f:
        f.write(json.dumps({"argv": argv}) + "\n")
    env = dict(os.environ, FAKE_MEMORY=options["--memory"], FAKE_COMPUTE=options["--compute"])
    os.execvpe(argv[split + 1], argv[split + 1:], env)


def fake_serve(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    p.add_argument("--barrier", nargs=2)
    args, _ = p.parse_known_args(argv)
    bdir, name = args.barrier
    compute = int(os.environ["FAKE_COMPUTE"]) if "FAKE_COMPUTE" in os.environ else None
    limit = common.parse_size(os.environ["FAKE_MEMORY"]) if compute else None
    seen = {k: v for k, v in os.environ.items() if k.startswith("VGPU_") or k.startswith("SERVE_TEST_")}
    base = {"name": name, "processes": 1, "argv": argv, "seen_env": seen}

    def write(result):
        with open(args.json, "w") as f:
            json.dump(dict(base, **result), f)

    if compute is not None and os.environ.get("FAKE_OOM") == str(compute):
        write({"ok": False, "phase": "kv-cache", "oom": True, "nvml_peak_bytes": limit // 2,
               "error": "kv-cache: allocating the KV cache failed: CUDA out of memory (out of memory at start-up)"})
        sys.exit(3)
    if compute is not None and os.environ.get("FAKE_DIE") == str(compute):
        sys.exit(1)
    if compute is None:
        counter = os.path.join(os.environ["FAKE_STATE"], "native-runs")
        n = int(open(counter).read()) if os.path.exists(counter) else 0
        with open(counter, "w") as f:
            f.write(str(n + 1))
        choices = [float(t) for t in os.environ.get("FAKE_SOLO_TPS", "1100").split(",")]
        tps = choices[n % len(choices)]
    else:
        tps = float(os.environ.get("FAKE_BASE", "1100")) * compute / 100
    common.arrive(bdir, "ready." + name, {})
    go = common.await_file(bdir, common.GO, 60)["t"]
    common.sleep_until(go)
    f = 100.0 / (compute or 100)
    peak = 50 * GIB if compute is None else limit - MIB
    if compute is not None and os.environ.get("FAKE_OVER") == str(compute):
        peak = limit + 5 * MIB
    write({"ok": True, "tokens_per_s": tps, "requests_per_s": tps / 100, "tokens": int(tps * 10), "requests": 100,
           "latency_ms": {"p50": 100 * f, "p99": 300 * f}, "tpot_ms": {"p50": 2 * f, "p99": 4 * f},
           "ttft_ms": {"p50": 20.0, "p99": 40.0}, "nvml_peak_bytes": peak,
           "free_bytes": (limit or 140 * GIB) - 2 * GIB, "kv_cache_bytes": ((limit or 140 * GIB) - 2 * GIB) * 9 // 10,
           "kv_blocks": 1000, "slots": 64, "t_start": go, "t_end": go + 0.1})
    print(f"fake serve {name}: {tps:.0f} tokens/s")


# --- helpers ---------------------------------------------------------------------------------------

class Env:
    """A temporary directory with the fake vgpu, and the environment the fakes read."""

    def __init__(self, **fake):
        self.tmp = tempfile.TemporaryDirectory(prefix="serving-test-")
        d = self.tmp.name
        self.vgpu = os.path.join(d, "vgpu")
        with open(self.vgpu, "w") as f:
            f.write(f"#!/bin/sh\nexec '{sys.executable}' '{os.path.abspath(__file__)}' fake-vgpu \"$@\"\n")
        os.chmod(self.vgpu, 0o755)
        self.log = os.path.join(d, "vgpu.log")
        self.out = os.path.join(d, "out")
        self.env = dict(os.environ, FAKE_LOG=self.log, FAKE_STATE=d, **fake)
        for k in ("FAKE_COMPUTE", "FAKE_MEMORY"):
            self.env.pop(k, None)

    def run(self, *extra, timeout=120):
        cmd = [sys.executable, RUN, "--vgpu", self.vgpu, "--out", self.out, "--seconds", "0.1", "--warmup", "0",
               "--serve-cmd", f"'{sys.executable}' '{os.path.abspath(__file__)}' fake-serve", *extra]
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        return r

    def report(self):
        with open(os.path.join(self.out, "serving.json")) as f:
            return json.load(f)

    def vgpu_calls(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return [json.loads(line)["argv"] for line in f]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.tmp.cleanup()
        return False


def row(report, scenario, instance):
    found = [r for r in report["rows"] if r["scenario"] == scenario and r["instance"] == instance]
    assert len(found) == 1, (scenario, instance, [(r["scenario"], r["instance"]) for r in report["rows"]])
    return found[0]


def result_of(report, scenario, instance):
    i = [st["scenario"] for st in report["plan"]].index(scenario)
    return report["results"][i][instance]


# --- tests -----------------------------------------------------------------------------------------

class PlanTest(unittest.TestCase):
    def test_dry_run_prints_plan_and_commands_and_runs_nothing(self):
        with Env() as e:
            r = subprocess.run([sys.executable, RUN, "--dry-run", "--vgpu", "/opt/vgpu/bin/vgpu"], env=e.env,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, r"plan: 7 steps, 10 instance runs, about \d+\.\d min")
            self.assertIn("/opt/vgpu/bin/vgpu run --memory 16GiB --compute 30 -- ", r.stdout)
            self.assertIn("co-located 30 + 30 + 30: A30 (compute 30), B30 (compute 30), C30 (compute 30)", r.stdout)
            self.assertEqual(r.stdout.count("serve.py --warmup 3 --seconds 10 "), 10)
            self.assertEqual(e.vgpu_calls(), [])
            self.assertFalse(os.path.exists(e.out))

    def test_invalid_options_are_named(self):
        cases = [(["--periods", "20"], "--periods '20'"), (["--memory", "12x"], "--memory: invalid size '12x'"),
                 (["--groups", "30+abc"], "--groups member 'abc'"), (["--groups", "30"], "at least two instances"),
                 (["--env", "NOEQUALS"], "--env 'NOEQUALS'"), (["--computes", "0"], "--computes '0'"),
                 (["--computes", "101"], "--computes '101'"), (["--solo-runs", "3"], "--solo-runs 3"),
                 (["--periods", "20ms", "--env", "VGPU_COMPUTE_PERIOD=1s"], "use --periods")]
        for args, message in cases:
            r = subprocess.run([sys.executable, RUN, "--dry-run", *args], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertIn(message, r.stderr, args)

    def test_missing_vgpu_is_an_error_before_anything_runs(self):
        with Env() as e:
            r = subprocess.run([sys.executable, RUN, "--vgpu", os.path.join(e.tmp.name, "nope"), "--out", e.out],
                               env=e.env, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2)
            self.assertIn("no executable there", r.stderr)


class EndToEndTest(unittest.TestCase):
    def test_default_plan_shares_added_latency_and_memory(self):
        with Env(FAKE_SOLO_TPS="1000,1200") as e:
            r = e.run()
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            rep = e.report()
            self.assertEqual(len(rep["rows"]), 10)
            self.assertAlmostEqual(rep["reference"]["tokens_per_s"], 1100.0)  # mean of the two solo runs
            self.assertAlmostEqual(rep["reference"]["latency_p50"], 100.0)
            for scenario, instance, share in (("limit 30", "c30", 30), ("limit 60", "c60", 60), ("limit 90", "c90", 90),
                                              ("co-located 30 + 60", "A30", 30), ("co-located 30 + 60", "B60", 60),
                                              ("co-located 30 + 30 + 30", "C30", 30),
                                              ("solo (native)", "native", 100 * 1000 / 1100),
                                              ("solo (native), again", "native", 100 * 1200 / 1100)):
                self.assertAlmostEqual(row(rep, scenario, instance)["share"], share, places=6, msg=scenario)
            c30 = row(rep, "limit 30", "c30")
            self.assertAlmostEqual(c30["added_latency_p50"], 100 * 100 / 30 - 100)
            self.assertAlmostEqual(c30["added_latency_p99"], 300 * 100 / 30 - 300)
            self.assertAlmostEqual(c30["added_tpot_p99"], 4 * 100 / 30 - 4)
            self.assertAlmostEqual(c30["added_ttft_p50"], 0.0)
            self.assertEqual(c30["memory_limit_bytes"], 16 * GIB)
            limited = [x for x in rep["rows"] if x["compute"] is not None]
            self.assertEqual(len(limited), 8)
            self.assertTrue(all(x["memory"] == "PASS" and x["pass"] for x in limited))
            self.assertTrue(all(x["memory"] == "–" for x in rep["rows"] if x["compute"] is None))
            calls = e.vgpu_calls()
            self.assertTrue(all(c[:4] == ["run", "--memory", "16GiB", "--compute"] for c in calls), calls)
            computes = [int(c[4]) for c in calls]  # members of a group start concurrently: any order within it
            self.assertEqual((computes[:3], sorted(computes[3:5]), computes[5:]), ([30, 60, 90], [30, 60], [30, 30, 30]))
            # the table comes last and is the file
            with open(os.path.join(e.out, "serving.md")) as f:
                md = f.read()
            self.assertTrue(r.stdout.endswith(md), r.stdout[-500:])
            self.assertIn("Memory: 8 of 8 limited instances stayed within their limit", md.splitlines()[-1])
            self.assertIn("| limit 30 | c30 | 30 | 330 | 30.0 | 3.3 | 333.3 / 1000.0 | +233.3 / +700.0 |", md)
            # progress lines came first, one per step
            self.assertEqual(r.stdout.count("] "), 7)

    def test_memory_above_the_limit_fails_that_row_only(self):
        with Env(FAKE_OVER="60") as e:
            r = e.run("--solo-runs", "1")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            rep = e.report()
            for scenario, instance in (("limit 60", "c60"), ("co-located 30 + 60", "B60")):
                x = row(rep, scenario, instance)
                self.assertEqual((x["memory"], x["pass"], x["ok"]), ("FAIL", False, True))
                self.assertEqual(x["memory_note"], "5 MiB above the limit")
            self.assertTrue(all(x["pass"] for x in rep["rows"] if x["compute"] != 60))
            self.assertIn("FAIL: memory (5 MiB above the limit)", r.stdout)
            self.assertIn("2 row(s) FAIL: limit 60 / c60, co-located 30 + 60 / B60", r.stdout)

    def test_oom_at_startup_fails_and_stops_its_group(self):
        with Env(FAKE_OOM="60") as e:
            r = e.run("--computes", "60", "--groups", "30+60", "--solo-runs", "1")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            rep = e.report()
            c60 = row(rep, "limit 60", "c60")
            self.assertFalse(c60["pass"])
            self.assertIn("out of memory at start-up", c60["error"])
            self.assertEqual(result_of(rep, "limit 60", "c60")["rc"], 3)
            self.assertIn("out of memory at start-up", row(rep, "co-located 30 + 60", "B60")["error"])
            a30 = row(rep, "co-located 30 + 60", "A30")
            self.assertFalse(a30["pass"])
            self.assertIn("step stopped: B60 ended before all were ready", a30["error"])
            self.assertTrue(row(rep, "solo (native)", "native")["pass"])

    def test_instance_dying_without_result_is_reported(self):
        with Env(FAKE_DIE="30") as e:
            r = e.run("--computes", "30", "--groups", "", "--solo-runs", "1")
            self.assertEqual(r.returncode, 1)
            x = row(e.report(), "limit 30", "c30")
            self.assertIn("exit 1, no result", x["error"])
            self.assertEqual(x["memory"], "FAIL")  # no NVML figure under a limit is never a PASS

    def test_periods_env_and_serve_args_reach_the_right_runs(self):
        with Env() as e:
            e.env["VGPU_COMPUTE_PERIOD"] = "3s"  # of the calling shell: must not leak
            r = e.run("--computes", "30", "--groups", "", "--periods", "default,20ms", "--env", "SERVE_TEST_X=1",
                      "--serve-args", "--layers 2 --processes 2")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            rep = e.report()
            self.assertEqual([x["scenario"] for x in rep["rows"]],
                             ["solo (native)", "limit 30", "limit 30 (period 20ms)", "solo (native), again"])
            native = result_of(rep, "solo (native)", "native")
            default = result_of(rep, "limit 30", "c30")
            period = result_of(rep, "limit 30 (period 20ms)", "c30")
            self.assertEqual(native["seen_env"], {})
            self.assertEqual(default["seen_env"], {"SERVE_TEST_X": "1"})
            self.assertEqual(period["seen_env"], {"SERVE_TEST_X": "1", "VGPU_COMPUTE_PERIOD": "20ms"})
            for res in (native, default, period):
                self.assertEqual(res["argv"][:4], ["--layers", "2", "--processes", "2"])
            self.assertIn("VGPU_COMPUTE_PERIOD of this shell not passed on", r.stdout)


class AnalysisTest(unittest.TestCase):
    def setUp(self):
        import run
        self.run = run

    def settings(self, *argv):
        return self.run.Settings(self.run.parse_args(["--dry-run", *argv])[1])

    def test_memory_verdict(self):
        v = self.run.memory_verdict
        self.assertEqual(v(16 * GIB, 16 * GIB)[0], "PASS")
        self.assertEqual(v(16 * GIB + 1, 16 * GIB)[0], "FAIL")
        self.assertEqual(v(None, 16 * GIB), ("FAIL", "no NVML figure"))
        self.assertEqual(v(None, None)[0], "–")
        self.assertEqual(v(99 * GIB, None)[0], "–")

    def test_no_successful_solo_run_leaves_shares_unknown_and_fails(self):
        s = self.settings("--computes", "30", "--groups", "", "--solo-runs", "1")
        plan = self.run.build_plan(s)
        ok = {"ok": True, "tokens_per_s": 300.0, "requests_per_s": 3.0, "nvml_peak_bytes": GIB,
              "latency_ms": {"p50": 10.0, "p99": 20.0}, "tpot_ms": {"p50": 1.0, "p99": 2.0},
              "ttft_ms": {"p50": 1.0, "p99": 2.0}, "t_start": 0, "t_end": 1}
        records = [{"native": {"ok": False, "error": "exit 1, no result"}}, {"c30": ok}]
        rows, ref = self.run.analyse(plan, records, s)
        self.assertIsNone(ref["tokens_per_s"])
        self.assertIsNone(rows[1]["share"])
        self.assertIsNone(rows[1]["added_latency_p50"])
        self.assertEqual([r["pass"] for r in rows], [False, True])
        text = self.run.markdown(rows, ref, ["header"])
        self.assertIn("| limit 30 | c30 | 30 | 300 | ? |", text)
        self.assertIn("FAIL: exit 1, no result", text)

    def test_group_names_and_period_labels(self):
        s = self.settings("--computes", "", "--groups", "30+60,10+20+30", "--periods", "default,50ms")
        plan = self.run.build_plan(s)
        self.assertEqual([(st.scenario(), [m.name for m in st.members]) for st in plan], [
            ("solo (native)", ["native"]), ("co-located 30 + 60", ["A30", "B60"]),
            ("co-located 10 + 20 + 30", ["A10", "B20", "C30"]), ("co-located 30 + 60 (period 50ms)", ["A30", "B60"]),
            ("co-located 10 + 20 + 30 (period 50ms)", ["A10", "B20", "C30"]), ("solo (native), again", ["native"])])
        argv, env = self.run.instance_command(s, plan[3], plan[3].members[1], "/t/B60.json", "/t")
        self.assertEqual(env, {"VGPU_COMPUTE_PERIOD": "50ms"})
        self.assertEqual(argv[1:7], ["run", "--memory", "16GiB", "--compute", "60", "--"])
        self.assertEqual(argv[-3:], ["--barrier", "/t", "B60"])


class CommonTest(unittest.TestCase):
    def test_parse_size(self):
        for text, n in (("16GiB", 16 * GIB), ("512m", 512 * MIB), ("1.5g", 3 * GIB // 2), ("1048576", MIB),
                        ("4 KiB", 4096), ("2t", 2 << 40), ("10b", 10)):
            self.assertEqual(common.parse_size(text), n, text)
        for text in ("12x", "", "GiB", "0.3", "-1g", "1ib"):
            with self.assertRaises(ValueError, msg=text):
                common.parse_size(text)

    def test_percentiles(self):
        self.assertEqual(common.summarize([]), {"n": 0, "p50": None, "p99": None, "mean": None, "max": None})
        s = common.summarize(list(range(1, 101)))
        self.assertAlmostEqual(s["p50"], 50.5)
        self.assertAlmostEqual(s["p99"], 99.01)
        self.assertEqual(common.percentile([7.0], 99), 7.0)

    def test_barrier_files(self):
        with tempfile.TemporaryDirectory() as d:
            common.arrive(d, "ready.a", {"x": 1})
            self.assertEqual(common.await_file(d, "ready.a", 1), {"x": 1})
            self.assertEqual(os.listdir(d), ["ready.a"])  # no temporary left behind
            with self.assertRaises(common.BarrierError):
                common.await_file(d, "go", 0.05)
            with self.assertRaisesRegex(common.BarrierError, "gone"):
                common.await_file(d, "go", 10, alive=lambda: "gone")


class ServeOptionsTest(unittest.TestCase):
    """serve.py's torch-free parts: option checks, worker command lines, graph buckets."""

    def setUp(self):
        import serve
        self.serve = serve

    def test_invalid_options(self):
        for argv, message in ((["--max-prompt", "900"], "exceed --max-seq 1024"),
                              (["--heads", "5"], "--d-model 2048 is not a multiple of --heads 5"),
                              (["--max-seq", "1000"], "not a multiple of --block-size 16"),
                              (["--gpu-memory-utilization", "1.5"], "expected a fraction"),
                              (["--clients", "2", "--processes", "3"], "below --processes 3"),
                              (["--proc", "2"], "unrecognized arguments: --proc")):
            err = io.StringIO()
            with self.assertRaises(SystemExit) as cm, redirect_stdout(io.StringIO()):
                sys.stderr, saved = err, sys.stderr
                try:
                    self.serve.parse_args(argv)
                finally:
                    sys.stderr = saved
            self.assertEqual(cm.exception.code, 2, argv)
            self.assertIn(message, err.getvalue(), argv)

    def test_worker_command_carries_the_parsed_options(self):
        a = self.serve.parse_args(["--layers", "4", "--clients", "7", "--processes", "2", "--barrier", "/b", "inst"])
        argv = self.serve.worker_argv(a, 1, 3, "/w")
        back = self.serve.parse_args(argv[2:])
        self.assertEqual((back.layers, back.clients, back.processes, back.name, back.worker, back.barrier),
                         (4, 3, 1, "inst.1", ["/w", "1", "2"], None))
        self.assertEqual(back.ffn, 4 * 2048)

    def test_buckets(self):
        self.assertEqual(self.serve.buckets_for(64), [1, 2, 4, 8, 16, 32, 64])
        self.assertEqual(self.serve.buckets_for(40), [1, 2, 4, 8, 16, 32, 40])
        self.assertEqual(self.serve.buckets_for(1), [1])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "fake-vgpu":
        fake_vgpu(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "fake-serve":
        fake_serve(sys.argv[2:])
    else:
        unittest.main(verbosity=2)
