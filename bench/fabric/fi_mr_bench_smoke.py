#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Smoke test of bench-fi-mr: runs it with tiny counts and checks its exit code, that every
row (nicmr, nicmr-mmap, tcp, shm) gave figures or an explicit UNSUPPORTED line for every case,
that nicmr, the floor and the native pair gave figures, that each provider ran in a process of
its own, that the cross-process part gave every provider's figures (or its UNSUPPORTED line)
from a server and a client process of their own, with nicmr's bytes confirmed by its server, and
that the four RATIOS lines are the last lines of the output and well-formed (their values are
not checked: tiny counts on a shared machine say nothing)."""
import re
import subprocess
import sys

ROWS = ["nicmr", "nicmr-mmap", "tcp", "shm"]
CASES = ["4KiB/alone", "4KiB/live", "2MiB/alone", "2MiB/live", "regv4x4KiB/alone"]
NUM = r"[0-9]+(\.[0-9]+)?"
INT = r"(-?[0-9]+|n/a)"
RATIO = r"([0-9]+\.[0-9]{3}|n/a)"
VERDICT = r"(met|MISSED|n/a)"
# The last lines, in order (bench/common/bench_ratios.h).
LAST = [
    rf"RATIOS medians floor_ns={INT} native_ns={INT} provider_ns={INT}",
    rf"RATIOS native_over_floor_ns={INT} target<=40 {VERDICT}",
    rf"RATIOS provider_over_native_ns={INT} provider_over_native={RATIO} target<=20 {VERDICT}",
    rf"RATIOS live=1000 reg_1_ns={INT} reg_live_ns={INT} close_1_ns={INT} close_live_ns={INT} "
    rf"reg_live_over_1={RATIO} close_live_over_1={RATIO} target<=1.05 {VERDICT}",
]


def check_last_lines(out, errors):
    lines = out.rstrip("\n").split("\n")
    last = lines[-len(LAST):]
    if len(last) != len(LAST):
        errors.append("fewer lines than the RATIOS lines")
        return
    for pattern, line in zip(LAST, last):
        m = re.fullmatch(pattern, line)
        if not m:
            errors.append(f"last lines: {line!r} does not match {pattern!r}")
        elif "n/a" in line:
            # The smoke run measures every figure: none may be missing.
            errors.append(f"last lines: a figure is missing in {line!r}")


XP_CASES = {"xp-lat8": rf"ns={NUM}", "xp-write64k": rf"gbps={NUM}", "xp-write4k": rf"ns={NUM}",
            "xp-regwrite4k": rf"ns={NUM} close={NUM}"}
XP_FILTER = {"nicmr": "nicmr", "tcp": "tcp,ofi_rxm", "shm": "shm"}


def check_cross_process(out, parent, errors):
    """Each provider's cross-process figures, or an UNSUPPORTED line; nicmr's all present and
    its bytes confirmed; server and client in processes of their own."""
    seen = set([parent] if parent else [])
    for row, filt in XP_FILTER.items():
        unsupported = re.search(rf"^UNSUPPORTED {row} xp \S", out, re.M)
        for case, value in XP_CASES.items():
            figures = re.search(rf"^RESULT {row} {case} {value}$", out, re.M)
            if row == "nicmr" and not figures:
                errors.append(f"{row} {case}: no figures")
            elif not figures and not unsupported:
                errors.append(f"{row} {case}: neither figures nor an UNSUPPORTED line")
        if row == "nicmr" and not re.search(r"^XPCHECK nicmr ok answered=[0-9]+$", out, re.M):
            errors.append("nicmr cross-process: the server did not confirm the bytes")
        pids = {}
        for role, pid, got in re.findall(
                rf"^XPROC {row} (server|client) \S+ pid=([0-9]+) FI_PROVIDER=(\S*)$", out, re.M):
            pids[role] = pid
            if got != filt:
                errors.append(f"{row} cross-process {role}: FI_PROVIDER={got!r}, not {filt!r}")
        if set(pids) != {"server", "client"}:
            errors.append(f"{row} cross-process: XPROC lines for {sorted(pids)}")
            continue
        ids = set(pids.values())
        if len(ids) != 2 or ids & seen:
            errors.append(f"{row} cross-process: server and client not in processes of their own")
        seen |= ids
    if not re.search(r"^ratios nicmr/tcp: latency [0-9.]+ \(target <= 1.00: (met|MISSED)\), "
                     r"bandwidth [0-9.]+ \(target >= 2.00: (met|MISSED)\)", out, re.M):
        errors.append("no ratios nicmr/tcp line for the cross-process part")


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
    for row, case in [("floor", "umr/4KiB"), ("native", "4KiB/alone")]:
        if not re.search(rf"^RESULT {row} {re.escape(case)} reg={NUM} close={NUM} pair={NUM}$",
                         out, re.M):
            errors.append(f"{row} {case}: no figures")
    # Each provider in a process of its own, with FI_PROVIDER naming it alone; the floor and
    # the native pair in one with no provider; none of them the parent.
    parent = re.search(r"\(parent pid=([0-9]+)\)", out)
    procs = {}
    for row, pid, filt in re.findall(r"^PROV (\S+) \S+ pid=([0-9]+) FI_PROVIDER=(\S*)$",
                                      out, re.M):
        procs[row] = (pid, filt)
    want = {"nicmr": "nicmr", "nicmr-mmap": "nicmr", "tcp": "tcp,ofi_rxm", "shm": "shm",
            "floor": "", "native": ""}
    for row, filt in want.items():
        if row not in procs:
            errors.append(f"{row}: no PROV line")
        elif procs[row][1] != filt:
            errors.append(f"{row}: FI_PROVIDER={procs[row][1]!r} in its process, not {filt!r}")
    pids = {row: p for row, (p, _) in procs.items()}
    groups = [("nicmr", "nicmr-mmap"), ("tcp",), ("shm",), ("floor", "native")]
    seen = set([parent.group(1)] if parent else [])
    if not parent:
        errors.append("the header does not name the parent's pid")
    for group in groups:
        ids = {pids.get(r) for r in group}
        if None in ids:
            continue
        if len(ids) != 1:
            errors.append(f"rows {group} ran in different processes: {ids}")
        elif ids & seen:
            errors.append(f"rows {group} shared a process with another row or the parent")
        seen |= ids
    check_cross_process(out, parent.group(1) if parent else None, errors)
    # A child that did not end cleanly says ERROR.
    for line in re.findall(r"^ERROR .*$", out, re.M):
        errors.append(f"error line: {line}")
    check_last_lines(out, errors)
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
