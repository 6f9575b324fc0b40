#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""libfabric's own fi_pingpong (package libfabric-bin) between two processes over one provider:
server and client, every transfer size it has (`-S all`), its data integrity check (`-c`), in
each transmit mode given (msg, tagged), on one host or across two network namespaces joined by
a veth pair.

fi_pingpong exchanges the endpoints' names (fi_getname) over its own TCP control connection
(port 47592 by default) and inserts the peer's into its AV, so the provider's names must be
valid in another process. Each side gets its own device spec through FI_NICMR_DEVICE: --spec's
{addr} is replaced by the side's address (127.0.0.11 / .12 on one host, 10.79.0.1 / .2 across
the namespaces nicmr-pp-a and nicmr-pp-b, which the test makes and removes).

It FAILS, saying why, when fi_pingpong or the namespaces cannot be had, when either side exits
other than 0, or when either side's output lacks a row for a size.

Then a tagged pass of 64 KiB with fi_pingpong's other options: -d (the domain by name,
--domain), -B and -P (a control port of the test's own), -v, and on one host -6 (the control
connection over IPv6).

usage: run_fi_pingpong.py --provider NAME [--provider-path DIR] [--spec SPEC] [--ep rdm]
                          [--mode msg] [--mode tagged] [--iters N] [--netns] [--timeout S]
                          [--domain NAME]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import netns_pair  # noqa: E402

NS = ["nicmr-pp-a", "nicmr-pp-b"]
VETH = ["npp-a", "npp-b"]
NS_ADDR = ["10.79.0.1", "10.79.0.2"]
HOST_ADDR = ["127.0.0.11", "127.0.0.12"]
# The control port of the options pass (fi_pingpong's default is 47592).
CTRL_PORT = 47611
# fi_pingpong -S all: 64 B .. 1 MiB by its own table; the rows its output must have.
ROW = re.compile(r"^(\d+[km]?)\s+(\d+)\s+=(\d+)\s")


def fail(msg):
    print("fi_pingpong: FAIL: " + msg, flush=True)
    sys.exit(1)


def netns_up():
    netns_pair.up(NS, VETH, [[NS_ADDR[0] + "/24"], [NS_ADDR[1] + "/24"]], fail)


def netns_down():
    netns_pair.down(NS)


def run_pair(a, mode, exe, addrs, options=False):
    """Runs the server, then the client; returns both outputs. options: fi_pingpong's other
    options too: the domain by name (-d, with --domain), its control connection over IPv6 (-6:
    the client reaches the server at ::1, one host only) on a port of the test's own (-B, -P),
    and its debugging output (-v), with one size of 64 KiB."""
    base = [exe, "-p", a.provider, "-e", a.ep, "-m", mode, "-I", str(a.iters), "-S", "all",
            "-c"]
    server_addr = addrs[0]
    if options:
        # -v prints lines per transfer: one size (a rendezvous one for nicmr), not all.
        base[base.index("all")] = "65536"
        base += ["-v"]
        if a.domain:
            base += ["-d", a.domain]
        if not a.netns:
            base += ["-6"]
            server_addr = "::1"
    procs = []
    logs = []
    for side in range(2):
        env = dict(os.environ, FI_PROVIDER=a.provider)
        if a.provider_path:
            env["FI_PROVIDER_PATH"] = a.provider_path
        if a.spec:
            env["FI_NICMR_DEVICE"] = a.spec.replace("{addr}", addrs[side])
        cmd = list(base)
        if options:
            cmd += ["-B", str(CTRL_PORT)] if side == 0 else ["-P", str(CTRL_PORT)]
        if side == 1:
            cmd.append(server_addr)
        if a.netns:
            cmd = ["ip", "netns", "exec", NS[side]] + cmd
        print("fi_pingpong: %s: %s" % ("server" if side == 0 else "client", " ".join(cmd)),
              flush=True)
        # Each side's output into a file of its own: a pipe read only after the other side
        # ended would fill with -v's lines and stop the writer.
        logs.append(tempfile.TemporaryFile(mode="w+"))
        procs.append(subprocess.Popen(cmd, env=env, stdout=logs[-1],
                                      stderr=subprocess.STDOUT, text=True))
        if side == 0:
            time.sleep(0.5)  # the server listens on its control port first
    outs = []
    deadline = time.monotonic() + a.timeout
    for side, p in enumerate(procs):
        try:
            p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            fail("%s mode: did not finish in %d s" % (mode, a.timeout))
        logs[side].seek(0)
        out = logs[side].read()
        logs[side].close()
        outs.append(out)
        name = "server" if side == 0 else "client"
        if p.returncode != 0:
            for q in procs:
                q.kill()
            fail("%s mode: the %s exited with %d:\n%s" % (mode, name, p.returncode, out))
    return outs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--provider", required=True)
    p.add_argument("--provider-path")
    p.add_argument("--spec")
    p.add_argument("--ep", default="rdm")
    p.add_argument("--mode", action="append", choices=["msg", "tagged"])
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--netns", action="store_true")
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument("--domain", help="the provider's domain name, for the options pass's -d")
    a = p.parse_args()
    exe = shutil.which("fi_pingpong")
    if not exe:
        fail("fi_pingpong not found (package libfabric-bin)")
    addrs = HOST_ADDR
    if a.netns:
        if os.geteuid() != 0:
            fail("--netns needs root (ip netns)")
        netns_up()
        addrs = NS_ADDR
    try:
        passes = [(m, False) for m in a.mode or ["msg", "tagged"]] + [("tagged", True)]
        for mode, options in passes:
            outs = run_pair(a, mode, exe, addrs, options)
            for side, out in enumerate(outs):
                rows = [m.groups() for m in map(ROW.match, out.splitlines()) if m]
                if not rows:
                    fail("%s mode: no result rows from the %s:\n%s" %
                         (mode, "server" if side == 0 else "client", out))
                for size, iters, done in rows:
                    if iters != done:
                        fail("%s mode: size %s: %s of %s iterations" %
                             (mode, size, done, iters))
            print("fi_pingpong: %s mode%s: %d sizes (%s .. %s), %d iterations each, data "
                  "checked" % (mode, " with -v -B -P" + (" -d" if a.domain else "") +
                               ("" if a.netns else " -6") if options else "",
                               len(rows), rows[0][0], rows[-1][0], a.iters), flush=True)
    finally:
        if a.netns:
            netns_down()
    print("fi_pingpong: PASS: %s, %s endpoints%s" %
          (a.provider, a.ep, " across two namespaces" if a.netns else ""))


if __name__ == "__main__":
    main()
