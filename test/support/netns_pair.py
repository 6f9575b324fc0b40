# SPDX-License-Identifier: BSD-3-Clause
"""Two network namespaces joined by a veth pair, for the test runners that put two "hosts" on
one machine (test/fabric/run_fi_pingpong.py, test/mpi/run_mpi_test.py). ip(8) makes them;
down() removes them (and any left over from an earlier run of the same names)."""
import subprocess


def run(cmd, check, fail):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        fail("%s: %s" % (" ".join(cmd), (r.stderr or r.stdout).strip()))
    return r


def down(names):
    for ns in names:
        run(["ip", "netns", "del", ns], False, None)


def up(names, veths, addrs, fail):
    """names and veths: two each; addrs[i]: the "a.b.c.d/len" addresses of namespace i's end.
    fail(msg) is called (and must not return) when a step fails."""
    down(names)
    for ns in names:
        run(["ip", "netns", "add", ns], True, fail)
    run(["ip", "link", "add", veths[0], "netns", names[0], "type", "veth", "peer", "name",
         veths[1], "netns", names[1]], True, fail)
    for i, ns in enumerate(names):
        run(["ip", "-n", ns, "link", "set", "lo", "up"], True, fail)
        run(["ip", "-n", ns, "link", "set", veths[i], "up"], True, fail)
        for addr in addrs[i]:
            run(["ip", "-n", ns, "addr", "add", addr, "dev", veths[i]], True, fail)
