#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Smoke test of bench-wire: runs it with --smoke (few iterations, two repetitions) and checks its
exit status, that every benchmark reported a median and no error, and that the four RATIOS lines
are the last lines and well-formed with every figure measured. The values are not checked: tiny
counts on a shared machine say nothing. Where the host has no IPv6 loopback it runs with --ipv4."""
import re
import subprocess
import sys

BENCHES = ["BM_UdpPingPong", "BM_WritePingPong", "BM_SendPingPong", "BM_UdpGsoStream",
           "BM_Write64K", "BM_Write8Rate"]
NUM = r"[0-9]+(\.[0-9]+)?"
RATIO = r"[0-9]+\.[0-9]{3}"
VERDICT = r"(met|MISSED)"
LAST = [
    rf"RATIOS medians udp_pingpong_ns={NUM} write_pingpong_ns={NUM} send_pingpong_ns={NUM} "
    rf"udp_gso_gbps={NUM} write64k_gbps={NUM} write8_mps={NUM} log_ack_req_freq=5",
    rf"RATIOS write_pingpong_over_udp={RATIO} target<=1.3 {VERDICT}",
    rf"RATIOS send_pingpong_over_udp={RATIO} target<=1.3 {VERDICT}",
    rf"RATIOS write64k_over_udp_gso={RATIO} target>=0.7 {VERDICT}",
]


def has_ipv6_loopback():
    import socket
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def main():
    cmd = [sys.argv[1], "--smoke"] + ([] if has_ipv6_loopback() else ["--ipv4"])
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=280, check=False)
    out = proc.stdout
    print(out)
    errors = []
    if proc.returncode != 0:
        errors.append(f"exit status {proc.returncode}")
    for b in BENCHES:
        if not re.search(rf"^{b}/\S*_median\s+{NUM} ns", out, re.M):
            errors.append(f"{b}: no median")
    for line in re.findall(r"^.*ERROR OCCURRED.*$", out, re.M):
        errors.append(f"error: {line}")
    lines = out.rstrip("\n").split("\n")
    last = lines[-len(LAST):]
    for pattern, line in zip(LAST, last):
        if not re.fullmatch(pattern, line):
            errors.append(f"last lines: {line!r} does not match {pattern!r}")
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
