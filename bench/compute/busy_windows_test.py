#!/usr/bin/env python3
"""bench/compute/busy_windows.py on a trace made up here (no GPU): the shares it prints are the
ones the trace was built to give."""
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import busy_windows  # noqa: E402

MS = 1_000_000
T0 = 5_000 * MS  # the span starts 5 s into the clock


def write_trace(path):
    """Ten periods of 100 ms: busy for the first 50 ms, then 2 ms in every 10 (20%); a launch
    every ms of the busy half; one 3 ms sleep per period; one synchronisation per period, whose
    hook takes 10 us (5th period: 30 us) around a 90 us wait; 0.5 ms charged unmeasured per
    period. Mean busy 60%."""
    lines = ["# vgpu compute trace 1: many records, 0 dropped"]
    for p in range(10):
        t = T0 + p * 100 * MS
        lines.append(f"B 0 {t} {t + 50 * MS}")
        lines += [f"B 0 {t + 50 * MS + k * 10 * MS} {t + 52 * MS + k * 10 * MS}" for k in range(5)]
        lines += [f"L 0 {t + m * MS} {t + m * MS + 5000}" for m in range(50)]
        lines.append(f"S 0 {t + 60 * MS} {3 * MS}")
        lines.append(f"Y 0 {t + 55 * MS} {t + 55 * MS + (120_000 if p == 4 else 100_000)} 90000")
        lines.append(f"U 0 {t + 70 * MS} {MS // 2}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


class BusyWindowsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.trace = os.path.join(self.dir.name, "lib.trace")
        write_trace(self.trace)
        self.serve = os.path.join(self.dir.name, "serve.txt")
        with open(self.serve, "w") as f:
            f.write("serve serve: 1 tokens/s\n" + json.dumps({"t_start": T0 / 1e9, "t_end": (T0 + 1000 * MS) / 1e9}) + "\n")

    def tearDown(self):
        self.dir.cleanup()

    def run_report(self, *argv):
        out = io.StringIO()
        busy_windows.report(busy_windows.parse_args(list(argv)), out)
        return out.getvalue()

    def row(self, text, window):
        line = next(l for l in text.splitlines() if l.startswith(f"| {window} |"))
        return [c.strip() for c in line.strip("|").split("|")]

    def test_bursts_above_a_limit_show_in_short_windows_only(self):
        text = self.run_report("--library", self.trace, "--serve-json", self.serve, "--limits", "30,90")
        self.assertIn("span 1.000 s: busy 60.0%", text)
        self.assertIn("500 launches, slept 30.0 ms", text)
        self.assertIn("charged without a measurement: 5.0 ms (0.50% of the span;", text)
        self.assertIn("10 synchronisations: the limiter's time around the driver's wait median 10.0 us, "
                      "p99 30.0 us, mean 12.0 us (0.1 ms in all)", text)
        # 10 ms windows: 50 fully busy, 50 at 20%; under 90 the busy ones keep 0.9 of theirs.
        ten = self.row(text, "10 ms")
        self.assertEqual(ten[1:4], ["100", "60.0%", "0 0 50 0 0 0 0 0 0 50"])
        self.assertEqual(ten[4:], [f"{100 * (50 * 0.3 + 50 * 0.2) / 60:.1f}", f"{100 * (50 * 0.9 + 50 * 0.2) / 60:.1f}"])
        # One second: 60% busy, under 90 entirely; under 30 half of it.
        self.assertEqual(self.row(text, "1000 ms")[1:], ["1", "60.0%", "0 0 0 0 0 0 1 0 0 0", "50.0", "100.0"])

    def test_an_explicit_span(self):
        text = self.run_report("--library", self.trace, "--span", str(T0 / 1e9), str((T0 + 50 * MS) / 1e9),
                               "--windows", "10")
        self.assertIn("span 0.050 s: busy 100.0%", text)
        self.assertEqual(self.row(text, "10 ms")[1:3], ["5", "100.0%"])

    def test_replay_through_the_budget(self):
        ms = [(T0 + i * MS, T0 + (i + 1) * MS) for i in range(2000)]  # 2 s busy, launch by launch
        full = busy_windows.replay(ms, T0, T0 + 2000 * MS, 90)
        self.assertAlmostEqual(full, 100 * 2 / (2 / 0.9 - 0.002), delta=0.05)  # the limit, less the 2 ms ahead
        self.assertEqual(busy_windows.replay(ms, T0, T0 + 2000 * MS, 100), 100.0)
        # Half busy in pulses of 5 ms every 10 ms: a limit of 90 never binds; at 30 the loop
        # stretches each period to 5 / 0.3 ms once the credit the pulses never leave is gone.
        pulses = [(T0 + p * 10 * MS + i * MS, T0 + p * 10 * MS + (i + 1) * MS) for p in range(500) for i in range(5)]
        self.assertEqual(busy_windows.replay(pulses, T0, T0 + 5000 * MS, 90), 100.0)
        self.assertAlmostEqual(busy_windows.replay(pulses, T0, T0 + 5000 * MS, 30), 60.0, delta=0.5)
        # Half busy in waves, 2 s at full speed then 2 s idle: the mean says a limit of 90 leaves
        # everything, but each wave runs at 90 once the credit (50 ms of wall time at 90) is spent:
        # 222 ms of budget for each 2 s wave, less the credit after the first.
        waves = [(T0 + w * 4000 * MS + i * MS, T0 + w * 4000 * MS + (i + 1) * MS) for w in range(3) for i in range(2000)]
        expected = 100 * 12000 / (12000 + (2000 / 0.9 - 2000 - 2) + 2 * (2000 / 0.9 - 2000 - 50 - 2))
        self.assertAlmostEqual(busy_windows.replay(waves, T0, T0 + 12000 * MS, 90), expected, delta=0.1)
        text = self.run_report("--library", self.trace, "--serve-json", self.serve, "--limits", "30,90", "--replay")
        self.assertRegex(text, r"replayed through the limiter's budget \(closed loop\): at 30 [\d.]+% of the "
                               r"span's throughput, at 90 100.0% of the span's throughput")

    def test_long_intervals_split_from_the_rest(self):
        # Each period's 50 ms interval is long at 10 ms, its five 2 ms ones short; it starts 37 ms
        # after the previous period's sleep ended (the first one has no sleep before it).
        text = self.run_report("--library", self.trace, "--serve-json", self.serve, "--long-ms", "10")
        self.assertIn("intervals of 10 ms or longer: 10, mean 50.000 ms, median 50.000 ms; per one of them "
                      "5.0 shorter intervals (10.000 ms) and 50.0 launches", text)
        self.assertIn("launch call (hook entry to the end of its bookkeeping): median 5.00 us, mean 5.00 us", text)
        self.assertIn("their mean length by the time since the last sleep ended: 10-50 ms 9 x 50.000 ms, "
                      "no sleep before 1 x 50.000 ms", text)
        text = self.run_report("--library", self.trace, "--serve-json", self.serve, "--long-ms", "60")
        self.assertIn("intervals of 60 ms or longer: none among 60 in the span", text)

    def test_bad_input_is_named(self):
        for argv, needle in ((["--windows", "10,x"], "--windows '10,x'"), (["--limits", "0"], "--limits '0'"),
                             (["--limits", "90,120"], "--limits 90,120: at most 100"),
                             (["--long-ms", "0"], "--long-ms 0: expected a positive number")):
            with self.assertRaises(SystemExit) as e:
                busy_windows.parse_args(["--library", self.trace, "--serve-json", self.serve] + argv)
            self.assertIn(needle, str(e.exception.code))
        empty = os.path.join(self.dir.name, "empty.txt")
        open(empty, "w").close()
        with self.assertRaises(SystemExit) as e:
            self.run_report("--library", self.trace, "--serve-json", empty)
        self.assertIn("no JSON line with t_start and t_end", str(e.exception.code))


if __name__ == "__main__":
    unittest.main()
