#!/usr/bin/env python3
"""Prints the closing line of a test run over the meson builds given:
'tests: N passed, N failed, N skipped', counting GoogleTest cases one by one (a gtest binary
reports '[  PASSED  ] N tests', '[  SKIPPED ] N tests', '[  FAILED  ] N tests') and any other
test program as one."""
import argparse
import json
import os
import re

GTEST = re.compile(r"^\[  (PASSED|SKIPPED|FAILED) +\] (\d+) tests?", re.M)


def count(entry):
    """(passed, failed, skipped) of one meson test result."""
    result = entry.get("result")
    found = {k: int(n) for k, n in GTEST.findall(entry.get("stdout") or "")}
    if result not in ("OK", "EXPECTEDFAIL", "SKIP"):
        return found.get("PASSED", 0), max(found.get("FAILED", 0), 1), found.get("SKIPPED", 0)
    if "PASSED" in found:
        return found["PASSED"], found.get("FAILED", 0), found.get("SKIPPED", 0)
    if result == "SKIP":
        return 0, 0, 1
    return 1, 0, 0


ap = argparse.ArgumentParser(
    description="The closing line of a test run over meson build directories (their "
    "meson-logs/testlog.json; a directory without one counts nothing). Exit status 0, or 2 "
    "for bad arguments.")
ap.add_argument("builds", nargs="+", metavar="BUILD", help="a meson build directory")
args = ap.parse_args()
total = [0, 0, 0]
for build in args.builds:
    log = os.path.join(build, "meson-logs", "testlog.json")
    if not os.path.exists(log):
        continue
    b = [0, 0, 0]
    with open(log) as f:
        for line in f:
            for i, n in enumerate(count(json.loads(line))):
                b[i] += n
    print(f"    {build}: {b[0]} passed, {b[1]} failed, {b[2]} skipped")
    total = [t + n for t, n in zip(total, b)]
print(f"tests: {total[0]} passed, {total[1]} failed, {total[2]} skipped")
