#!/usr/bin/env python3
"""bench/compute/server_trainer.py without a GPU: against bench/compute_matrix_test.py's fake
workload (a limited run does its limit's share of its rate), with an empty library as the preload.
The plan alternates which give-way setting goes first, each side's variables reach its processes,
and the shares are each workload's rate over its alone run of the round."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import server_trainer as st  # noqa: E402

FAKE = os.path.join(os.path.dirname(HERE), "compute_matrix_test.py")
LIBRARY = None


class Plan(unittest.TestCase):
    def test_natives_first_then_both_settings_alternating(self):
        self.assertEqual(st.plan(2), [(0, "alone"), (0, "together"), (0, "give-way-on"), (0, "give-way-off"),
                                      (1, "alone"), (1, "together"), (1, "give-way-off"), (1, "give-way-on")])

    def test_bad_options_name_the_input(self):
        for args, needle in ((["--server-limit", "0"], "--server-limit 0"), (["--rounds", "0"], "--rounds 0"),
                             (["--seconds", "0"], "--seconds > 0"), (["--trainer", "wide"], "--trainer")):
            r = subprocess.run([sys.executable, os.path.join(HERE, "server_trainer.py"), "--library", "x",
                                "--dry-run", *args], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2)
            self.assertIn(needle, r.stderr)


class Runs(unittest.TestCase):
    def run_fake(self, *extra):
        """server_trainer.py for one round against the fake workload: (its JSON, the fake's log of runs)."""
        with tempfile.TemporaryDirectory(prefix="server-trainer-test-") as tmp:
            log = os.path.join(tmp, "fake.log")
            env = dict(os.environ, FAKE_MATRIX_LOG=log, FAKE_MATRIX_DEVIATE="", FAKE_MATRIX_FAIL="")
            out = os.path.join(tmp, "out")
            r = subprocess.run([sys.executable, os.path.join(HERE, "server_trainer.py"), "--library", LIBRARY,
                                "--out", out, "--rounds", "1", "--warmup", "0", "--seconds", "0.05", *extra,
                                "--workload-cmd", f"{sys.executable} {FAKE} fake"],
                               env=env, capture_output=True, text=True, timeout=100)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "server-trainer.json")) as f:
                data = json.load(f)
            with open(log) as f:
                return data, [json.loads(line) for line in f]

    def test_shares_of_the_alone_runs_and_each_settings_variables(self):
        data, runs = self.run_fake()
        by_step = {rec["step"]: rec for rec in data["results"]}
        self.assertEqual(by_step["together"]["server"]["share"], 100.0)
        self.assertAlmostEqual(by_step["give-way-on"]["server"]["share"], 30.0)
        self.assertAlmostEqual(by_step["give-way-off"]["trainer"]["share"], 60.0)
        self.assertEqual(data["mean"]["give-way-on"]["trainer"], 60.0)
        limited = [run for run in runs if run["limit"] is not None]
        self.assertEqual(len(limited), 4)  # server and trainer, each setting once
        self.assertEqual(sorted(run["vgpu_env"]["VGPU_COMPUTE_GIVE_WAY"] for run in limited),
                         ["false", "false", "true", "true"])
        self.assertEqual(len({run["ledger"] for run in limited}), 4)  # separate containers
        self.assertTrue(all(run["barrier"] for run in runs if run["limit"] is not None))
        self.assertIn("--steps", next(run for run in runs if run["limit"] == 30)["args"])
        self.assertEqual(data["trainer"], "long")
        self.assertIn("2000", next(run for run in runs if run["limit"] == 60)["args"])

    def test_the_trainer_of_concurrent_streams(self):
        data, runs = self.run_fake("--trainer", "streams")
        self.assertEqual(data["trainer"], "streams")
        args = next(run for run in runs if run["limit"] == 60)["args"]
        self.assertEqual(args[args.index("--streams") + 1], "16")
        self.assertEqual(args[args.index("--kernel-us") + 1], "50")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: server_trainer_test.py <library to preload>")
    LIBRARY = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
