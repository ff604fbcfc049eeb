#!/usr/bin/env python3
"""bench/compute/warmup_barrier.py without a GPU: the warm-up keeps submitting until its end, and
with a barrier until the go time the orchestrator writes, after writing its ready file."""
import os
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import warmup_barrier  # noqa: E402


class Counter:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        time.sleep(0.001)


class WarmUp(unittest.TestCase):
    def test_without_a_barrier_it_submits_until_the_warm_up_ends(self):
        submit = Counter()
        end = time.monotonic() + 0.05
        warmup_barrier.warm_up(submit, end, None, "test")
        self.assertGreaterEqual(time.monotonic(), end)
        self.assertGreater(submit.calls, 5)

    def test_with_a_barrier_it_is_ready_then_waits_for_the_go_time(self):
        with tempfile.TemporaryDirectory() as d:
            submit = Counter()
            go_at = []

            def orchestrator():
                ready = os.path.join(d, "ready.c1")
                while not os.path.exists(ready):
                    time.sleep(0.002)
                go_at.append(time.monotonic() + 0.05)
                with open(os.path.join(d, "go"), "w") as f:
                    f.write(repr(go_at[0]))

            t = threading.Thread(target=orchestrator)
            t.start()
            warmup_barrier.warm_up(submit, time.monotonic() + 0.02, (d, "c1"), "test")
            returned = time.monotonic()
            t.join()
            self.assertGreaterEqual(returned, go_at[0])
            self.assertLess(returned, go_at[0] + 0.05)
            self.assertGreater(submit.calls, 10)  # it kept the GPU busy while it waited

    def test_no_go_time_ends_the_process_naming_the_worker(self):
        with tempfile.TemporaryDirectory() as d:
            timeout = warmup_barrier.TIMEOUT_S
            warmup_barrier.TIMEOUT_S = 0.05
            try:
                with self.assertRaises(SystemExit) as e:
                    warmup_barrier.warm_up(Counter(), time.monotonic(), (d, "c1"), "jax_workload")
            finally:
                warmup_barrier.TIMEOUT_S = timeout
            self.assertEqual(str(e.exception.code), "jax_workload: barrier timeout")
            self.assertTrue(os.path.exists(os.path.join(d, "ready.c1")))


if __name__ == "__main__":
    unittest.main()
