#!/usr/bin/env python3
"""Runs scripts/audit-entry-points on LIB, or exits 77 (CTest: skipped) when LIB is absent.

Usage: audit_if_present.py AUDIT LIB
"""
import os
import subprocess
import sys

audit, lib = sys.argv[1], sys.argv[2]
if not os.path.exists(lib):
    print(f"{lib} not found (a CUDA toolkit without link stubs): skipped")
    sys.exit(77)
sys.exit(subprocess.run([sys.executable, audit, lib]).returncode)
