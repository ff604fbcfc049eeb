#!/usr/bin/env python3
"""CI test of bench/compute_ab.py (ctest bench_compute_ab): the order of the runs, the limiter's
summary read from a real one, and whole runs against bench/compute_matrix_test.py's fake workload,
with no GPU.

    python3 bench/compute_ab_test.py <library to preload>

The library (the build's bench/libvgpu_null_preload.so) is copied as old.so and new.so, so that
the fake can tell them apart by LD_PRELOAD.
"""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compute_ab as ab  # noqa: E402

LIBRARY = None  # set from argv
FAKE = os.path.join(HERE, "compute_matrix_test.py")

# The summary libvgpu.so printed at exit on the H200 (16 streams of 5 ms kernels at 60, 2026-11-26).
H200_SUMMARY = (
    "vgpu[1234] DEBUG: compute device 0: mode 0, target 600000 ppm, measured 577068 ppm, correction 0 ppm, "
    "busy 2957.4 ms, throttled 2326.9 ms, NVML share 0.680, others busy 0.000; 4577 launches, 4848 marks "
    "(442 begins), 23842 queries (15846 by polls), 0 event errors; 405 queue waits (81.0 ms; window 0, "
    "work 405, age 0); 0 intervals of other processes read (0 skipped); period 200.0 ms")


def dry_run(*args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = ab.main(["--old", "old.so", "--new", "new.so", "--dry-run", *args])
    return rc, out.getvalue().splitlines()


class Plan(unittest.TestCase):
    def test_native_first_then_old_and_new_alternating(self):
        rc, lines = dry_run("--rows", "1x5us,launch-1x2us", "--limits", "30,60", "--rounds", "2")
        self.assertEqual(rc, 0)
        self.assertEqual(lines, [
            "launch-1x2us native", "launch-1x2us old at 99", "launch-1x2us new at 99",  # launch rows: 99 only
            "1x5us native", "1x5us new at 30", "1x5us old at 30", "1x5us old at 60", "1x5us new at 60",
            "launch-1x2us native", "launch-1x2us new at 99", "launch-1x2us old at 99",
            "1x5us native", "1x5us old at 30", "1x5us new at 30", "1x5us new at 60", "1x5us old at 60"])

    def test_the_dry_launch_row_runs_at_99_only(self):
        self.assertIn("--host-ns 20000", ab.spin_rows()["launch-dry"])
        rc, lines = dry_run("--rows", "launch-dry", "--limits", "60", "--rounds", "1")
        self.assertEqual(rc, 0)
        self.assertEqual(lines, ["launch-dry native", "launch-dry old at 99", "launch-dry new at 99"])

    def test_rows_are_the_matrix_spin_rows_of_one_process(self):
        rows = ab.spin_rows()
        self.assertIn("steps-20us-2ms", rows)
        self.assertIn("--steps 4", rows["steps-20us-2ms"])
        self.assertNotIn("2procs-2x500us", rows)
        self.assertNotIn("matmul", rows)
        self.assertTrue(rows["16x5ms"].endswith(ab.MATRIX_WINDOW))

    def test_bad_options_name_the_input(self):
        for args, needle in ((["--rows", "nope*"], "--rows 'nope*'"), (["--limits", "0"], "0 is outside"),
                             (["--rounds", "0"], "--rounds 0"), (["--seconds", "0"], "--seconds > 0"),
                             (["--old-env", "VGPU_COMPUTE_RUN_HOLD"], "--old-env 'VGPU_COMPUTE_RUN_HOLD'"),
                             (["--new-env", "1X=2"], "--new-env '1X=2'")):
            err = io.StringIO()
            with contextlib.redirect_stderr(err), self.assertRaises(SystemExit):
                dry_run(*args)
            self.assertIn(needle, err.getvalue())

    def test_summary_of_a_real_one(self):
        got = ab.summary_of("other output\n" + H200_SUMMARY + "\n")
        self.assertEqual(got["launches"], 4577)
        self.assertEqual(got["marks"], 4848)
        self.assertAlmostEqual(got["marks_per_launch"], 4848 / 4577)
        self.assertAlmostEqual(got["queries_per_launch"], 23842 / 4577)
        self.assertEqual(got["queue_waits"], 405)
        self.assertEqual(got["measured_ppm"], 577068)
        self.assertEqual(got["busy_ms"], 2957.4)
        self.assertEqual(got["period_ms"], 200.0)
        self.assertEqual(ab.summary_of("no summary"), {})
        self.assertNotIn("light_samples", got)  # a library from before the light figures

    def test_summary_with_the_light_figures(self):
        got = ab.summary_of(H200_SUMMARY + "; light measurement allowed at 12 of 140 samples (refused: busy 90, "
                            "debt 31, mode 0, processes 0, no signal 7), launches onto dry streams measured "
                            "exactly while held after a wait 2051, beside another stream 17; launches overlap "
                            "16.02 (gives way: no)")
        self.assertEqual(got["period_ms"], 200.0)
        self.assertEqual((got["light_allowed"], got["light_samples"]), (12, 140))
        self.assertEqual((got["light_refused_busy"], got["light_refused_debt"]), (90, 31))
        self.assertEqual((got["light_held"], got["light_not_alone"]), (2051, 17))
        self.assertEqual((got["overlap"], got["gives_way"]), (16.02, 0.0))
        self.assertNotIn("gives_way", ab.summary_of(H200_SUMMARY))  # a library from before the overlap

    def test_summary_with_the_launches_the_bank_let_be_measured_lightly(self):
        got = ab.summary_of(H200_SUMMARY.replace("(442 begins), ", "(442 begins), 3120 measured lightly (2870 by the bank), "))
        self.assertEqual((got["light"], got["light_banked"]), (3120, 2870))
        self.assertEqual(got["queries"], 23842)
        self.assertNotIn("light_banked", ab.summary_of(H200_SUMMARY))  # a library from before the bank's light

    def test_gpu_util_per_round_and_per_decode_step(self):
        def rec(lib, limit, rate, util, steps):
            return {"row": "serving", "lib": lib, "limit": limit, "rate": rate, "error": None, "round": 0,
                    "util": util, "decode_steps": steps, "window_s": 12.0}
        records = [rec("native", None, 5000.0, 90.0, 1890), rec("old", 60, 3200.0, 60.0, 1200),
                   rec("new", 60, 3300.0, 60.0, 1240)]
        md = ab.table(records, ["serving"], [60])
        # 90% of 12 s over 1890 steps: 5.714 ms; 60% over 1200: 6.000; over 1240: 5.806
        self.assertIn("| 90.0/60.0/60.0 | 5.714/6.000/5.806 |", md)
        records[1]["error"] = "exit 1"
        records[2].pop("util")  # not read (no NVML, or --workload-cmd)
        self.assertIn("| 90.0/–/– | 5.714/–/– |", ab.table(records, ["serving"], [60]))
        records[0]["row"] = records[1]["row"] = records[2]["row"] = "1x5us"
        self.assertTrue(ab.table(records, ["1x5us"], [60]).rstrip().endswith("| 90.0/–/– | – | – |"))


class Runs(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="compute-ab-test-")
        self.old = os.path.join(self.tmp, "old.so")
        self.new = os.path.join(self.tmp, "new.so")
        shutil.copy(LIBRARY, self.old)
        shutil.copy(LIBRARY, self.new)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_ab(self, *args, deviate="", fail=""):
        env = dict(os.environ, FAKE_MATRIX_LOG=os.path.join(self.tmp, "fake.log"), FAKE_MATRIX_DEVIATE=deviate,
                   FAKE_MATRIX_FAIL=fail)
        out = os.path.join(self.tmp, "out")
        cmd = [sys.executable, os.path.join(HERE, "compute_ab.py"), "--old", self.old, "--new", self.new,
               "--out", out, "--workload-cmd", f"{sys.executable} {FAKE} fake", "--warmup", "0",
               "--seconds", "0.05", "--serving-cpus", "all", *args]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        md = ""
        if os.path.exists(os.path.join(out, "compute-ab.md")):
            with open(os.path.join(out, "compute-ab.md")) as f:
                md = f.read()
        return r, md

    def test_shares_of_each_rounds_native_and_the_summary(self):
        r, md = self.run_ab("--rows", "1x5us,launch-1x2us", "--limits", "30,60", "--serving", "10",
                            deviate=f"preload:{self.new}@60=-5")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| 1x5us | 30 | 200000, 200000 | 30.0, 30.0 (mean 30.0) | 30.0, 30.0 (mean 30.0) | "
                      "0.020/0.04, 0.020/0.04 / 0.020/0.04, 0.020/0.04 | 0/–, 0/– / 0/–, 0/– | 300000, 300000 / 300000, 300000 |",
                      md)  # the fake's summary has no light figures
        self.assertIn("| 1x5us | 60 | 200000, 200000 | 60.0, 60.0 (mean 60.0) | 55.0, 55.0 (mean 55.0) |", md)
        self.assertIn("| launch-1x2us | 99 | 500000, 500000 | 99.0, 99.0 (mean 99.0) |", md)
        self.assertIn("| serving | 10 | 5000, 5000 | 10.0, 10.0 (mean 10.0) | 10.0, 10.0 (mean 10.0) |", md)
        # serve.py's per-step host times, native / old / new per round (the fake's limited runs: 60 us)
        self.assertIn("| 50/5000 / 60/5000 / 60/5000, 50/5000 / 60/5000 / 60/5000 |", md)
        self.assertEqual(r.stdout.count("| 1x5us |"), 2)  # the table is printed too

    def test_trace_adds_the_limiters_time_per_synchronisation_and_its_unmeasured_charges(self):
        r, md = self.run_ab("--rows", "1x5us", "--limits", "30", "--rounds", "1", "--serving", "10,60", "--trace")
        self.assertEqual(r.returncode, 0, r.stderr)
        # The fake writes each limited serving run's trace as the library would: `limit` us around
        # each synchronisation, 1% of the window unmeasured. Spin rows are not traced.
        self.assertIn("| limiter's time per synchronisation (µs) / charged unmeasured (% of the window), old / new |", md)
        self.assertIn(" 10.0/1.00 / 10.0/1.00 |", md)
        self.assertIn(" 60.0/1.00 / 60.0/1.00 |", md)
        self.assertEqual(sorted(os.listdir(os.path.join(self.tmp, "out", "traces"))),
                         ["serving-new-10-r0.trace", "serving-new-60-r0.trace",
                          "serving-old-10-r0.trace", "serving-old-60-r0.trace"])
        header_rows = [l for l in md.splitlines() if l.startswith("| row |")]  # (the title names the commit)
        self.assertEqual([("limiter's time per synchronisation" in l) for l in header_rows], [False, True])

    def test_each_sides_variables_reach_its_limited_runs_only(self):
        r, md = self.run_ab("--rows", "1x5us", "--limits", "30", "--rounds", "1",
                            "--old-env", "VGPU_COMPUTE_RUN_HOLD=false, VGPU_COMPUTE_LIGHT=false")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.tmp, "fake.log")) as f:
            runs = [json.loads(line) for line in f]
        by_side = {("native" if not run["preload"] else "old" if run["preload"] == self.old else "new"):
                   run["vgpu_env"] for run in runs}
        self.assertEqual(by_side["old"], {"VGPU_COMPUTE_RUN_HOLD": "false", "VGPU_COMPUTE_LIGHT": "false"})
        self.assertEqual(by_side["new"], {})
        self.assertEqual(by_side["native"], {})
        self.assertIn("with VGPU_COMPUTE_RUN_HOLD=false VGPU_COMPUTE_LIGHT=false", md.splitlines()[0])

    def test_serving_args_replace_the_matrixs_and_the_window_comes_last(self):
        r, md = self.run_ab("--rows", "1x5us", "--limits", "30", "--rounds", "1", "--serving", "60",
                            "--serving-args", "--min-output 768 --max-output 768 --seconds 9")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.tmp, "fake.log")) as f:
            serving = [json.loads(line)["args"] for line in f if json.loads(line)["kind"] == "serving"]
        self.assertEqual(len(serving), 3)  # native, old, new
        for args in serving:
            self.assertEqual(args[:5], ["--min-output", "768", "--max-output", "768", "--seconds"])
            self.assertNotIn("--layers", args)
            self.assertEqual(args[-2:], ["--seconds", "0.05"])  # --seconds of the A/B itself wins
        self.assertIn("; serve.py --min-output 768 --max-output 768 --seconds 9", md.splitlines()[0])
        with open(os.path.join(self.tmp, "out", "compute-ab.json")) as f:
            self.assertEqual(json.load(f)["serving_args"], "--min-output 768 --max-output 768 --seconds 9")

    def test_serving_args_that_cannot_be_split_name_the_input(self):
        r, _ = self.run_ab("--rows", "1x5us", "--serving", "60", "--serving-args", "--layers '4")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--serving-args \"--layers '4\": cannot be split into options", r.stderr)

    def test_a_failed_run_shows_and_sets_the_exit_status(self):
        r, md = self.run_ab("--rows", "1x5us", "--limits", "30", "--rounds", "1", fail=f"preload:{self.old}@30")
        self.assertEqual(r.returncode, 1)
        self.assertIn("| 1x5us | 30 | 200000 | – | 30.0 (mean 30.0) |", md)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: compute_ab_test.py <library to preload>")
    LIBRARY = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
