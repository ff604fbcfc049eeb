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
    every ms of the busy half; one 3 ms sleep per period. Mean busy 60%."""
    lines = ["# vgpu compute trace 1: many records, 0 dropped"]
    for p in range(10):
        t = T0 + p * 100 * MS
        lines.append(f"B 0 {t} {t + 50 * MS}")
        lines += [f"B 0 {t + 50 * MS + k * 10 * MS} {t + 52 * MS + k * 10 * MS}" for k in range(5)]
        lines += [f"L 0 {t + m * MS} {t + m * MS + 5000}" for m in range(50)]
        lines.append(f"S 0 {t + 60 * MS} {3 * MS}")
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

    def test_bad_input_is_named(self):
        for argv, needle in ((["--windows", "10,x"], "--windows '10,x'"), (["--limits", "0"], "--limits '0'")):
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
