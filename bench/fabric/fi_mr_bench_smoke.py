#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Smoke test of bench-fi-mr: runs it with tiny counts and checks its exit code, and that
every row (nicmr, nicmr-mmap, tcp, shm) gave figures or an explicit UNSUPPORTED line for
every case, and that nicmr gave figures for all of them."""
import re
import subprocess
import sys

ROWS = ["nicmr", "nicmr-mmap", "tcp", "shm"]
CASES = ["4KiB/alone", "4KiB/live", "2MiB/alone", "2MiB/live", "regv4x4KiB/alone"]
NUM = r"[0-9]+(\.[0-9]+)?"


def main():
    proc = subprocess.run([sys.argv[1], "--smoke"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=280, check=False)
    out = proc.stdout
    print(out)
    errors = []
    if proc.returncode != 0:
        errors.append(f"exit status {proc.returncode}")
    for row in ROWS:
        whole = re.search(rf"^UNSUPPORTED {re.escape(row)} all \S", out, re.M)
        cases = CASES + ([] if row == "nicmr-mmap" else ["write64k"])
        for case in cases:
            key = rf"^RESULT {re.escape(row)} {re.escape(case)} "
            if case == "write64k":
                figures = re.search(key + rf"gbps={NUM}$", out, re.M)
            else:
                figures = re.search(key + rf"reg={NUM} close={NUM} pair={NUM}$", out, re.M)
            unsupported = whole or re.search(
                rf"^UNSUPPORTED {re.escape(row)} {re.escape(case)} \S", out, re.M)
            if row.startswith("nicmr") and not figures:
                errors.append(f"{row} {case}: no figures")
            elif not figures and not unsupported:
                errors.append(f"{row} {case}: neither figures nor an UNSUPPORTED line")
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
