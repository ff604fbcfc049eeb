#!/usr/bin/env python3
"""Tests of scripts/entry_points.py and scripts/audit-entry-points (run by CTest)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import entry_points as ep  # noqa: E402

AUDIT = os.path.join(REPO, "scripts", "audit-entry-points")
REQUESTS_DEF = os.path.join(REPO, "tests", "preload", "programs", "runtime_requests.def")


class Families(unittest.TestCase):
    def test_suffixes_are_stripped(self):
        self.assertEqual(ep.family("cuMemAlloc_v2"), "cuMemAlloc")
        self.assertEqual(ep.family("cuMemPrefetchAsync_v2_ptsz"), "cuMemPrefetchAsync")
        self.assertEqual(ep.family("cuMemcpyHtoD_v2_ptds"), "cuMemcpyHtoD")
        self.assertEqual(ep.family("cuGraphInstantiate_v2"), "cuGraphInstantiate")
        self.assertEqual(ep.family("nvmlDeviceGetMemoryInfo_v2"), "nvmlDeviceGetMemoryInfo")
        self.assertEqual(ep.family("cuGraphInstantiateWithParams_ptsz"), "cuGraphInstantiateWithParams")

    def test_classes(self):
        cases = {
            "cuGraphInstantiate": "allocation", "cuGraphInstantiate_v2": "allocation",
            "cuArrayCreate": "allocation", "cuMemFree_v2": "allocation", "cuMemAllocHost_v2": "host",
            "cuMemFreeHost": "host", "cuLaunchGridAsync": "launch", "cuLaunchHostFunc_ptsz": "host_callback",
            "cuLaunchCooperativeKernelMultiDevice": "launch", "cuGraphLaunch_ptsz": "launch",
            "cuCtxSynchronize_v2": "synchronisation", "cuStreamDestroy": "synchronisation",
            "cuMemGetInfo": "memory_query", "nvmlDeviceGetMemoryInfo_v2": "memory_query",
            "cuGetProcAddress_v2": "initialisation", "cuCtxCreate_v4": "reconciled",
            "cuIpcOpenMemHandle_v2": "import", "cuGraphAddMemAllocNode": "pass", "cuMemcpyHtoD_v2": "pass",
            # A future allocation or launch entry is caught by its name.
            "cuMemAllocWithHints": "allocation", "cuLaunchKernelMulti": "launch",
        }
        for name, key in cases.items():
            self.assertEqual(ep.classify(name).key, key, name)

    def test_every_hook_is_of_a_known_family_class(self):
        # A hook in the pass-through class would mean the classes miss a family we care about.
        for name in ep.hooked_names():
            if name.startswith("nvml") or name.startswith("cuMemPool") or name == "cuModuleLoadData":
                continue
            self.assertNotEqual(ep.classify(name).key, "pass", name)


class Resolution(unittest.TestCase):
    rows = ep.sim_table()

    def resolve(self, symbol, version, flags=0):
        return ep.resolve(self.rows, ep.Request(symbol, version, flags))

    def test_newest_abi_not_newer_than_the_version(self):
        self.assertEqual(self.resolve("cuMemAlloc", 2000), "cuMemAlloc")
        self.assertEqual(self.resolve("cuMemAlloc", 3020), "cuMemAlloc_v2")
        self.assertEqual(self.resolve("cuGraphInstantiate", 10000), "cuGraphInstantiate")
        self.assertEqual(self.resolve("cuGraphInstantiate", 11080), "cuGraphInstantiate_v2")
        self.assertEqual(self.resolve("cuCtxSynchronize", 13000), "cuCtxSynchronize_v2")
        self.assertIsNone(self.resolve("cuMemAllocAsync", 11000))
        self.assertIsNone(self.resolve("cuNoSuchFunction", 13000))

    def test_per_thread_variant(self):
        ptds = ep.PER_THREAD_DEFAULT_STREAM
        self.assertEqual(self.resolve("cuLaunchKernel", 7000, ptds), "cuLaunchKernel_ptsz")
        self.assertEqual(self.resolve("cuMemPrefetchAsync", 12020, ptds), "cuMemPrefetchAsync_v2_ptsz")
        self.assertEqual(self.resolve("cuMemPrefetchAsync", 8000, ptds), "cuMemPrefetchAsync_ptsz")
        self.assertEqual(self.resolve("cuMemAlloc", 13000, ptds), "cuMemAlloc_v2")  # no per-thread ABI


@unittest.skipUnless(shutil.which("cc"), "needs cc")
class RequestExtraction(unittest.TestCase):
    """An object whose code calls a function pointer the way the CUDA 11.8, 12.4 and 13.0 runtimes
    call cuGetProcAddress (the instruction pattern of their libcudart_static.a): the reader must
    find every (symbol, cudaVersion, flags) and nothing else."""

    SOURCE = r"""
        .section .rodata.str1.1,"aMS",@progbits,1
.Lalloc: .string "cuMemAlloc"
.Linst:  .string "cuGraphInstantiate"
.Llaunch: .string "cuLaunchKernel"
.Lother: .string "cuNotARequest"
        .text
        .globl resolve_all
resolve_all:
        mov $0xbcc,%edx
        xor %ecx,%ecx
        lea slots(%rip),%rsi
        lea .Lalloc(%rip),%rdi
        call *gpa(%rip)
        xor %ecx,%ecx
        lea .Linst(%rip),%rdi
        lea slots+8(%rip),%rsi
        mov $0x2af8,%edx
        call *gpa(%rip)
        mov $0x1b58,%edx
        mov $0x2,%ecx
        lea slots+16(%rip),%rsi
        lea .Llaunch(%rip),%rdi
        call *gpa(%rip)
        mov $0x2710,%edx
        xor %ecx,%ecx
        lea slots+24(%rip),%rsi
        lea .Linst(%rip),%rdi
        call *gpa(%rip)
        mov $0x5,%esi
        lea .Lother(%rip),%rdi
        call other@PLT
        ret
"""

    def test_reads_the_requests_of_an_object(self):
        with tempfile.TemporaryDirectory() as tmp:
            src, obj = os.path.join(tmp, "r.s"), os.path.join(tmp, "r.o")
            with open(src, "w") as f:
                f.write(self.SOURCE)
            subprocess.run(["cc", "-c", src, "-o", obj], check=True)
            requests, calls = ep.requests_of_object(obj)
        self.assertEqual(calls, 4)
        self.assertEqual(requests, {ep.Request("cuMemAlloc", 3020, 0), ep.Request("cuGraphInstantiate", 11000, 0),
                                    ep.Request("cuLaunchKernel", 7000, 2), ep.Request("cuGraphInstantiate", 10000, 0)})


class RequestTable(unittest.TestCase):
    """runtime_requests.def (derived from the toolkits' libcudart_static.a) agrees with the
    classes and the simulated driver's resolution of today."""

    def test_table_matches_classes_and_resolution(self):
        rows = ep.sim_table()
        with open(REQUESTS_DEF) as f:
            text = f.read()
        entries = re.findall(r'^VGPU_RUNTIME_REQUEST\("(\w+)", (\d+), (\d+), "(\w+)", "([\w-]+)", "([\d. ]+)"\)$', text, re.M)
        self.assertGreater(len(entries), 400)
        generations = set()
        for symbol, version, flags, klass, variant, runtimes in entries:
            r = ep.Request(symbol, int(version), int(flags))
            self.assertEqual(ep.classify(symbol).key, klass, f"{r}: regenerate runtime_requests.def")
            resolved = ep.resolve(rows, r)
            if variant != "-":  # the simulated driver may have learnt an entry since: the guard checks more
                self.assertEqual(resolved, variant, f"{r}: the simulated driver now resolves it differently")
            generations.update(v.split(".")[0] for v in runtimes.split())
        self.assertEqual(generations, {"11", "12", "13"})


class Audit(unittest.TestCase):
    def run_audit(self, *args):
        return subprocess.run([sys.executable, AUDIT, *args], capture_output=True, text=True)

    @unittest.skipUnless(shutil.which("cc"), "needs cc")
    def test_unhooked_allocation_and_launch_entries_fail(self):
        with tempfile.TemporaryDirectory() as tmp:
            src, lib = os.path.join(tmp, "fake.c"), os.path.join(tmp, "libcuda.so.1")
            with open(src, "w") as f:
                f.write("int cuMemAlloc_v2(void) { return 0; }\nint cuMemAlloc_v9(void) { return 0; }\n"
                        "int cuLaunchKernel(void) { return 0; }\nint cuLaunchKernelMulti(void) { return 0; }\n"
                        "int cuMemcpy(void) { return 0; }\nint cuMemHostAlloc(void) { return 0; }\n")
            subprocess.run(["cc", "-shared", "-fPIC", src, "-o", lib], check=True)
            r = self.run_audit(lib)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        must = []
        for line in r.stdout.split("MUST BE", 1)[1].splitlines()[1:]:
            if not line.startswith("    "):
                break
            must.append(line.split()[-1])
        self.assertIn("cuMemAlloc_v9", must)
        self.assertIn("cuLaunchKernelMulti", must)
        self.assertNotIn("cuLaunchKernel", must)
        self.assertNotIn("cuMemcpy", must)
        self.assertNotIn("cuMemHostAlloc", must)

    def test_bad_input_is_an_error_naming_it(self):
        r = self.run_audit("/nonexistent/libcuda.so.1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("/nonexistent/libcuda.so.1", r.stderr)
        r = self.run_audit("--runtime", "no-equals-sign")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no-equals-sign", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
