#!/usr/bin/env python3
"""bench/compute/trace_report.py on traces made up here (no GPU): the numbers it prints are the
ones the traces were built to give."""
import io
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_report  # noqa: E402

MS = 1_000_000


def write(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


class Traces:
    """Native 1,000 kernels/s (one kernel per ms). Periods of 100 ms: a run of 60 ms (a launch
    every ms), then a rest of 40 ms; the GPU is busy from the run's start to 2 ms after its end.
    In the run's first 3 ms one kernel completes (a third of native), then one per ms."""

    def __init__(self, d):
        self.bench = os.path.join(d, "bench.trace")
        self.library = os.path.join(d, "library.trace")
        self.native = os.path.join(d, "native.trace")
        periods = 12
        k, lib = [], ["# vgpu compute trace 1: many records, 0 dropped"]
        for p in range(periods):
            t = p * 100 * MS
            k.append(f"K {t + 1.5 * MS:.0f} 1")
            k += [f"K {t + (m + 0.5) * MS:.0f} 1" for m in range(3, 62)]
            lib += [f"L 0 {t + m * MS} {t + m * MS + 5000}" for m in range(60)]
            lib += [f"S 0 {t + 60 * MS + 10} {20 * MS}", f"S 0 {t + 80 * MS + 10} {20 * MS}"]
            lib.append(f"B 0 {t} {t + 62 * MS}")
        write(self.bench, ["# concurrency trace 1", f"W 0 {periods * 100 * MS}"] + k)
        write(self.library, lib)
        write(self.native, ["# concurrency trace 1", f"W 0 {1000 * MS}"] + [f"K {m * MS} 1" for m in range(1000)])


class TraceReportTest(unittest.TestCase):
    def run_report(self, argv):
        out = io.StringIO()
        trace_report.report(trace_report.parse_args(argv), out)
        return out.getvalue()

    def test_phases_of_the_runs(self):
        with tempfile.TemporaryDirectory() as d:
            t = Traces(d)
            out = self.run_report(["--bench", t.bench, "--library", t.library, "--native-rate", "1000"])
        self.assertIn("60.0% of native", out)
        self.assertIn("busy 62.0% of the window; work per busy ms 0.968 of native", out)
        self.assertRegex(out, r"10 runs of 60\.0 ms")  # the first and last periods are not whole runs
        phases = dict(re.findall(r"^  (run 0-3 ms|run 3-10 ms|run 10 ms-end|after the run)\s+[\d.]+ ms\s+([\d.]+)", out, re.M))
        self.assertEqual(phases, {"run 0-3 ms": "0.333", "run 3-10 ms": "1.000", "run 10 ms-end": "1.000",
                                  "after the run": "1.000"})
        self.assertIn("0-10:0.80", out)  # 8 kernels in the first 10 busy ms
        self.assertIn("launch hook + driver call inside runs: median 5.0 us", out)

    def test_native_rate_from_a_native_trace(self):
        with tempfile.TemporaryDirectory() as d:
            t = Traces(d)
            out = self.run_report(["--bench", t.bench, "--native", t.native])
        self.assertIn("60.0% of native (1,000)", out)

    def test_pauses_of_the_program_itself(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "paused.trace")
            k = []
            resumes = []
            for p in range(10):
                t = p * 100 * MS
                resumes.append(f"P {t}")
                k += [f"K {t + m * MS} 1" for m in range(5, 60)]
            write(path, ["# concurrency trace 1", f"W 0 {1000 * MS}"] + k + resumes)
            out = self.run_report(["--bench", path, "--native-rate", "1000"])
        self.assertIn("9 pauses; work per ms against native, per 10 ms after a pause's end: 0-10:0.50 10-20:1.00", out)

    def test_a_file_that_is_not_a_library_trace_is_named(self):
        with tempfile.TemporaryDirectory() as d:
            t = Traces(d)
            write(t.library, ["hello"])
            with self.assertRaises(SystemExit) as e:
                self.run_report(["--bench", t.bench, "--library", t.library, "--native-rate", "1000"])
        self.assertIn("library.trace", str(e.exception))
        self.assertIn("not a VGPU_COMPUTE_TRACE file", str(e.exception))


if __name__ == "__main__":
    unittest.main()
