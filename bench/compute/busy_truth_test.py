#!/usr/bin/env python3
"""bench/compute/busy_truth.py on stamps and traces made up here (no GPU): the figures it prints
are the ones they were built to give, and the clocks' offset is found where it was put."""
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import busy_truth  # noqa: E402

US = 1_000
BASE = 7_000_000_000          # the first kernel's start on the global timer
OFFSET = 5_000_000_123        # CLOCK_MONOTONIC = global timer + OFFSET (+ the drift below)
DRIFT_PPM = 10


def write(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


class Made:
    """20,000 launches, one every 10 us (each 0-0.5 us later: the host's jitter), of 3 us (every
    fifth 6 us). The limiter measured pairs of launches: from 1 us before the first one's start to
    1.5 us after the second one's end, on a clock drifting 10 ppm from the GPU's; every 100th pair
    it did not measure at all."""

    def __init__(self, d, drop_every=100):
        self.stamps = os.path.join(d, "stamps")
        self.trace = os.path.join(d, "trace")
        kernels = []
        jitter = random.Random(7)
        for i in range(20_000):
            s = BASE + i * 10 * US + jitter.randrange(0, 500)
            kernels.append((s, s + (6 if i % 5 == 4 else 3) * US, i % 5 == 4))
        # The stamps' own bound is 1 us off the truth and 16 us wide.
        write(self.stamps, ["# concurrency stamps 1", f"O {OFFSET - 7 * US} {OFFSET + 9 * US}",
                            f"O {OFFSET - 5 * US} {OFFSET + 11 * US}"] +
              [f"k {s} {e} {int(x)}" for s, e, x in kernels])
        lines = ["# vgpu compute trace 1: many records, 0 dropped"]
        self.dropped = 0
        for j in range(0, len(kernels), 2):
            if (j // 2) % drop_every == drop_every - 1:
                self.dropped += kernels[j][1] - kernels[j][0] + kernels[j + 1][1] - kernels[j + 1][0]
                continue
            a, b = kernels[j][0] - 1 * US, kernels[j + 1][1] + 1500
            shift = OFFSET + (a - BASE) * DRIFT_PPM // 1_000_000
            lines.append(f"L 0 {a + shift - 20 * US} {a + shift - 15 * US}")
            lines.append(f"B 0 {a + shift} {b + shift}")
        write(self.trace, lines)
        self.kernel_ns = sum(e - s for s, e, _ in kernels)
        self.span = kernels[-1][1] - kernels[0][0]
        self.inner = sum(kernels[j + 1][0] - kernels[j][1] for j in range(0, len(kernels), 2)
                         if (j // 2) % drop_every != drop_every - 1)
        self.inner_long = sum(kernels[j + 1][0] - kernels[j][1] for j in range(0, len(kernels), 2)
                              if (j // 2) % drop_every != drop_every - 1 and kernels[j + 1][0] - kernels[j][1] > 4 * US)
        self.pairs = len(kernels) // 2 - len(kernels) // 2 // drop_every
        self.launches = len(kernels)


class BusyTruthTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.made = Made(self.dir.name)

    def tearDown(self):
        self.dir.cleanup()

    def analyse(self, with_trace=True):
        busy = busy_truth.read_library(self.made.trace)[2] if with_trace else None
        return busy_truth.analyse(busy_truth.read_stamps(self.made.stamps), busy)

    def test_the_stamps_alone_give_the_gpus_busy_share_and_gaps(self):
        r = self.analyse(with_trace=False)
        self.assertEqual(r["launches"], 20_000)
        self.assertAlmostEqual(r["kernel_busy"], self.made.kernel_ns / self.made.span, places=6)
        self.assertAlmostEqual(r["gap_us"]["p50"], 7.0, delta=0.5)   # after a 3 us kernel
        self.assertAlmostEqual(r["gap_us"]["p90"], 7.0, delta=0.5)
        self.assertAlmostEqual(r["gap_us"]["mean"], (4 * 7 + 4) / 5, delta=0.01)  # after a 6 us one: 4
        self.assertNotIn("measured", r)

    def test_the_busy_time_is_split_into_what_ran_and_what_did_not(self):
        r = self.analyse()
        n = self.made.launches
        # Each measured pair: 1 us before, the 3.5-7.5 us between its kernels, 1.5 us after.
        self.assertAlmostEqual(r["excess_inner_us"], self.made.inner / n / US, delta=0.02)
        self.assertAlmostEqual(r["excess_inner_long_us"], self.made.inner_long / n / US, delta=0.02)
        self.assertAlmostEqual(r["excess_edge_us"], 2.5 * self.made.pairs / n, delta=0.02)
        self.assertAlmostEqual(r["missed_us"], self.made.dropped / n / US, delta=0.02)
        self.assertAlmostEqual(r["plateau_us"], 2.5, delta=0.6)  # less the drift within a chunk
        busy = self.made.kernel_ns - self.made.dropped + self.made.inner + 2.5 * US * self.made.pairs
        self.assertAlmostEqual(r["measured"], busy / self.made.span, delta=0.002)

    def test_the_command_line_prints_the_same(self):
        out = subprocess.run([sys.executable, os.path.join(HERE, "busy_truth.py"), "--stamps", self.made.stamps,
                              "--trace", self.made.trace], capture_output=True, text=True, check=True).stdout
        r = json.loads(out)
        self.assertEqual(r, json.loads(json.dumps(self.analyse())))

    def test_a_file_that_is_not_stamps_is_named(self):
        bad = os.path.join(self.dir.name, "bad")
        write(bad, ["# concurrency trace 1", "W 0 1"])
        p = subprocess.run([sys.executable, os.path.join(HERE, "busy_truth.py"), "--stamps", bad],
                           capture_output=True, text=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(bad, p.stderr)


if __name__ == "__main__":
    unittest.main()
