#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""testmr's EAL mode and its DPDK telemetry endpoints, read by DPDK's own client
(dpdk-telemetry.py, Debian package dpdk-dev) against a running testmr (doc/testmr.md, "EAL mode
and telemetry").

First the EAL mode's usage errors and failures (exit 2 and 1). Then testmr starts with EAL
options that need no hugepages and a file prefix of its own, reading commands from a pipe
(-i), so that it stays alive between them; the endpoints answer null before the registration
engine is open, then follow what the commands registered: 3 MRs give /nicmr/mrs count 3, and
so on. `quit` stops it; nothing is left: no process, no socket, no file under the runtime
directory (RUNTIME_DIRECTORY, which EAL and dpdk-telemetry.py both honour, points at a
temporary directory, so that /var/run/dpdk is not touched).

Without dpdk-telemetry.py the test skips (77) with the reason, and fails in CI (CI set).

    testmr-telemetry.py TESTMR"""
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading

# The EAL options of doc/testmr.md's CI line: no hugepages (malloc'd memory, which implies
# legacy memory, hence --no-shconf rather than --in-memory), no PCI scan, no shared files.
EAL = ["--no-huge", "--no-pci", "-m", "256", "--no-shconf"]
ENGINE = "emu:mkeys=4096"
TIMEOUT = 30


def fail(msg):
    sys.exit(f"testmr-telemetry: {msg}")


def expect(what, cond, got):
    if not cond:
        fail(f"{what}; got {got!r}")


def run(testmr, args, env):
    """testmr with args to its end: (status, stdout, stderr)."""
    p = subprocess.run([testmr] + args, capture_output=True, text=True, env=env,
                       timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def usage_errors(testmr, env, prefix):
    # A bad testmr option is found before EAL starts: no EAL line at all.
    rc, out, err = run(testmr, EAL + [f"--file-prefix={prefix}u1", "--", "--frob"], env)
    expect("a bad testmr option after --: status 2", rc == 2, (rc, err))
    expect("a bad testmr option: no EAL start", "EAL:" not in out, out)
    # An option EAL does not know: rte_eal_init's EINVAL, status 2.
    rc, out, err = run(testmr, ["--frob", "--", "-c", "help"], env)
    expect("a bad EAL option: status 2", rc == 2, (rc, err))
    expect("a bad EAL option: said", "testmr: rte_eal_init: Invalid argument" in err, err)
    # A word before -- that is no EAL option: status 2.
    rc, out, err = run(testmr, EAL + [f"--file-prefix={prefix}u2", "extra", "--", "-c", "help"],
                       env)
    expect("a word that is no EAL option: status 2", rc == 2, (rc, err))
    expect("a word that is no EAL option: said",
           "testmr: 'extra' is not an EAL option (testmr's options go after --)" in err, err)
    # EAL cannot start (memory it cannot have): status 1, with rte_eal_init's reason.
    big = ["--no-huge", "--no-pci", "-m", "100000000", "--no-shconf"]
    rc, out, err = run(testmr, big + [f"--file-prefix={prefix}u3", "--", "-c", "help"], env)
    expect("EAL failing to start: status 1", rc == 1, (rc, err))
    expect("EAL failing to start: said",
           "testmr: rte_eal_init: Cannot allocate memory" in err, err)
    # EAL with a command: it runs, and testmr leaves with its status.
    rc, out, err = run(testmr, EAL + [f"--file-prefix={prefix}u4", "--", "-c", "help general"],
                       env)
    expect("EAL then -c: status 0", rc == 0, (rc, out, err))
    expect("EAL then -c: the command ran", "general: help, the demo, leaving" in out, out)
    # --no-telemetry: EAL serves no socket, and testmr says so instead of naming one.
    rc, out, err = run(testmr, EAL + [f"--file-prefix={prefix}u5", "--no-telemetry", "--",
                                      "-c", "help general"], env)
    expect("--no-telemetry: status 0", rc == 0, (rc, out, err))
    expect("--no-telemetry: no socket, said", re.search(
        r"^EAL up: no telemetry socket \(\S+/dpdk_telemetry.v2: No such file or directory\)$",
        out, re.M), out)


class Testmr:
    """testmr -i in EAL mode, its standard input a pipe, its output read by a thread."""

    def __init__(self, testmr, env, prefix):
        self.p = subprocess.Popen(
            [testmr] + EAL + [f"--file-prefix={prefix}", "--", "-i", "--engine", ENGINE],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=env, bufsize=1)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern):
        """The match of the first line (from here on) that matches pattern."""
        while True:
            try:
                line = self.lines.get(timeout=TIMEOUT)
            except queue.Empty:
                fail(f"testmr printed no line matching {pattern!r} within {TIMEOUT} s; "
                     f"it printed {self.seen!r}")
            if line is None:
                fail(f"testmr ended before a line matching {pattern!r}; "
                     f"it printed {self.seen!r}")
            self.seen.append(line)
            m = re.search(pattern, line)
            if m:
                return m

    def command(self, line, pattern):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.wait_for(pattern)

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def query(client, env, prefix, cmds):
    """Runs dpdk-telemetry.py -f prefix with cmds on its standard input: {cmd: answer}."""
    p = subprocess.run([client, "-f", prefix], input="\n".join(cmds) + "\n", text=True,
                       capture_output=True, env=env, timeout=TIMEOUT)
    expect(f"dpdk-telemetry.py {cmds}: status 0", p.returncode == 0, (p.stdout, p.stderr))
    expect("dpdk-telemetry.py connected", "Error connecting" not in p.stdout, p.stdout)
    answers = {}
    for line in p.stdout.splitlines():
        obj = json.loads(line)
        expect("one command a JSON object", len(obj) == 1, obj)
        answers.update(obj)
    return answers


def check_telemetry(testmr, client, env, prefix, rundir):
    t = Testmr(testmr, env, prefix)
    try:
        m = t.wait_for(r"^EAL up: telemetry /nicmr/device /nicmr/pools /nicmr/mrs "
                       r"/nicmr/stats /nicmr/keys/violations on (\S+)$")
        sock = os.path.join(rundir, "dpdk", prefix, "dpdk_telemetry.v2")
        expect("the socket testmr names is under RUNTIME_DIRECTORY", m.group(1) == sock,
               m.group(1))
        t.wait_for(r"^testmr \(nicmr ")

        # Registered, with their help; null while the engine is not open.
        eps = ["/nicmr/device", "/nicmr/pools", "/nicmr/mrs", "/nicmr/stats",
               "/nicmr/keys/violations"]
        a = query(client, env, prefix, ["/"] + eps + ["/help,/nicmr/mrs"])
        for ep in eps:
            expect(f"{ep} is listed", ep in a["/"], a["/"])
            expect(f"{ep} before the engine opens: null", a[ep] is None, a[ep])
        expect("/help,/nicmr/mrs", "count, by kind, size class, access right"
               in a["/help"]["/nicmr/mrs"], a["/help"])

        pool = t.command("mr pool 8m page 4k", r"^engine pool 0: (\d+) bytes at (0x[0-9a-f]+)")
        pool_len, pool_addr = int(pool.group(1)), int(pool.group(2), 16)
        keys = []
        for cmd in ["mr reg 0 0 64k read", "mr reg 0 64k 4k read,write",
                    "mr regv 0 128k:4k,256k:8k remote_read"]:
            keys.append(t.command(cmd, r"^MR key (0x[0-9a-f]{8}) ").group(1))

        a = query(client, env, prefix, eps)
        mrs = a["/nicmr/mrs"]
        expect("/nicmr/mrs count: the 3 MRs", mrs["count"] == 3, mrs)
        expect("/nicmr/mrs device_mrs: the device counts 3", mrs["device_mrs"] == 3, mrs)
        expect("/nicmr/mrs bytes", mrs["bytes"] == 65536 + 4096 + 4096 + 8192, mrs)
        expect("/nicmr/mrs windows", mrs["windows"] == 0, mrs)
        expect("/nicmr/mrs by_kind", mrs["by_kind"] == {"reg": 2, "regv": 1, "sub": 0}, mrs)
        expect("/nicmr/mrs by_size", mrs["by_size"] == {
            "up_to_4k": 1, "up_to_64k": 2, "up_to_2m": 0, "up_to_1g": 0, "over_1g": 0}, mrs)
        acc = mrs["by_access"]
        expect("/nicmr/mrs by_access", (acc["read"], acc["write"], acc["remote_read"],
                                        acc["remote_write"], acc["none"]) == (2, 1, 1, 0, 0), acc)
        expect("/nicmr/mrs by_access: every right named", list(acc) == [
            "send", "recv", "read", "write", "remote_read", "remote_write", "local_write",
            "remote_atomic", "mw_bind", "odp", "none"], acc)

        pools = a["/nicmr/pools"]
        expect("/nicmr/pools count", pools["count"] == 1, pools)
        p0 = pools["0"]
        expect("/nicmr/pools 0: what testmr printed", int(p0["addr"], 16) == pool_addr and
               p0["len"] == pool_len == 8 << 20, (p0, pool_addr, pool_len))
        expect("/nicmr/pools 0: 4 KiB pages", p0["page_size"] == 4096, p0)
        expect("/nicmr/pools 0: its MRs", (p0["mrs"], p0["mr_bytes"]) == (3, mrs["bytes"]), p0)

        st = a["/nicmr/stats"]
        expect("/nicmr/stats: every field", list(st) == [
            "mrs", "pools", "pds", "slow_mappings", "pinned_pages", "keys_free",
            "keys_retiring", "dev_mkeys", "iommu_mappings", "mws", "cntrs", "mkey_pool"], st)
        # The device's pools: the engine pool, and DPDK's memory, which EAL mode attaches
        # (nicmr_dpdk_mem_attach; one pool in legacy memory).
        expect("/nicmr/stats: 3 MRs, 2 pools, 1 PD, no window",
               (st["mrs"], st["pools"], st["pds"], st["mws"]) == (3, 2, 1, 0), st)
        expect("/nicmr/stats: the emulated device's mkeys are known", st["dev_mkeys"] > 0, st)

        dev = a["/nicmr/device"]
        expect("/nicmr/device: the --engine spec", dev["spec"] == ENGINE, dev)
        # The pool's cap: every index but 0 and the on-demand mkey cache's 176 (doc/odp.md).
        expect("/nicmr/device: mkey_count as the spec asked",
               (dev["mkey_count"], dev["mkey_pool_max"]) == (4096, 4095 - 176), dev)
        expect("/nicmr/device: firmware", re.fullmatch(r"\d+\.\d+\.\d+", dev["firmware"]), dev)
        expect("/nicmr/device: atomics", dev["atomic_mode"] == "host", dev)
        expect("/nicmr/device: the counters", dev["stats"] == st, dev)
        # A parameter is refused: null, as DPDK answers a request its callback refuses.
        for cmd in ["/nicmr/stats,1", "/nicmr/mrs,x"]:
            ep = cmd.split(",")[0]
            got = query(client, env, prefix, [cmd])
            expect(f"{cmd}: null", got == {ep: None}, got)

        # The endpoints follow the session: one MR less.
        t.command(f"mr dereg {keys[0]}", rf"^MR key {keys[0]} deregistered$")
        a = query(client, env, prefix, ["/nicmr/mrs", "/nicmr/stats"])
        expect("/nicmr/mrs after a deregistration", (a["/nicmr/mrs"]["count"],
               a["/nicmr/mrs"]["by_kind"]["reg"], a["/nicmr/stats"]["mrs"]) == (1 + 1, 1, 2), a)

        # Requests while commands run: each answer is the state between two commands (the
        # engine lock), so testmr's count, the device's and the kinds' sum agree in every one.
        client_p = subprocess.Popen([client, "-f", prefix], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True, env=env)
        # Connected once it answered one.
        client_p.stdin.write("/nicmr/mrs\n")
        client_p.stdin.flush()
        first = client_p.stdout.readline()
        done = threading.Event()

        def ask():
            while not done.wait(0.002):
                client_p.stdin.write("/nicmr/mrs\n")
                client_p.stdin.flush()

        asker = threading.Thread(target=ask)
        asker.start()
        try:
            for i in range(100):
                key = t.command(f"mr reg 0 {1024 + 8 * i}k 4k read",
                                r"^MR key (0x[0-9a-f]{8}) ").group(1)
                t.command(f"mr dereg {key}", rf"^MR key {key} deregistered$")
        finally:
            done.set()
            asker.join()
        out, _ = client_p.communicate(timeout=TIMEOUT)
        answers = [json.loads(line)["/nicmr/mrs"] for line in [first] + out.splitlines()]
        expect("answers while commands ran", len(answers) > 0, out)
        for m in answers:
            expect("an answer between two commands", m["count"] == m["device_mrs"] ==
                   sum(m["by_kind"].values()) == sum(m["by_size"].values()) and
                   m["count"] in (2, 3), m)
        print(f"testmr-telemetry: {len(answers)} answers while 200 commands ran, "
              f"{sum(m['count'] == 3 for m in answers)} of them with the extra MR registered")

        # Key violations: a remote write through the regv MR's key, which grants remote_read
        # only, refused twice by the device; a read it allows is no violation. Read back
        # through the endpoint and through `show violations --json`, which must agree.
        a = query(client, env, prefix, ["/nicmr/keys/violations"])
        expect("/nicmr/keys/violations before any refusal", a["/nicmr/keys/violations"] ==
               {"count": 0, "dropped": 0}, a)
        t.command("cq create", r"^CQ 0: ")
        qpn = [int(t.command(c, r"^QP \d: number (0x[0-9a-f]+), ").group(1), 16)
               for c in ["qp create 0", "qp create 0 port 2"]]
        t.command("qp connect 0 1", r"^QP 0 .* connected to QP 1 .*: RTS$")
        t.command("qp connect 1 0", r"^QP 1 .* connected to QP 0 .*: RTS$")
        for i in range(2):
            t.command(f"post write 0 {keys[1]} 0 {keys[2]} 0 64", r"^posted RDMA WRITE, ")
            t.command("poll 0", r"^CQ 0: wr_id \d+, QP 0 .*RDMA_WRITE, REMOTE_ACCESS, "
                      r"syndrome 0x13 ")
            t.command("qp recover 0", r"^QP 0 recovered: RTS$")
            t.command("qp recover 1", r"^QP 1 recovered: RTS$")
        t.command(f"post read 0 {keys[1]} 0 {keys[2]} 0 64", r"^posted RDMA READ, ")
        t.command("poll 0", r"^CQ 0: wr_id \d+, QP 0 .*RDMA_READ, success, 64 bytes$")
        v = query(client, env, prefix, ["/nicmr/keys/violations"])["/nicmr/keys/violations"]
        want = {"access": "remote_write", "count": 2, "last_peer_port": 2,
                "last_peer_qpn": hex(qpn[1]), "local_qpn": hex(qpn[0])}
        expect("/nicmr/keys/violations: one key, the write refused twice",
               v == {"count": 1, "dropped": 0, keys[2]: want}, (v, keys[2], want))
        shown = json.loads(t.command("show violations --json", r"^(\{.*\})$").group(1))
        expect("show violations --json: the same record", shown["count"] == 1 and
               shown["dropped"] == 0 and len(shown["violations"]) == 1, shown)
        sv = shown["violations"][0]
        expect("show violations --json: the same key and figures",
               (int(sv["key"], 16), sv["access"], sv["count"], sv["peer_port"],
                int(sv["peer_qpn"], 16), int(sv["local_qpn"], 16)) ==
               (int(keys[2], 16), "remote_write", 2, 2, qpn[1], qpn[0]), (sv, v))

        t.p.stdin.write("quit\n")
        t.p.stdin.close()
        rc = t.p.wait(timeout=TIMEOUT)
        expect("testmr after quit: status 0", rc == 0, t.seen)
    finally:
        t.kill()
    # Nothing left: the socket and EAL's files are gone (the empty directory of the file
    # prefix is EAL's and stays, doc/testmr.md), and no process holds the prefix.
    left = os.listdir(os.path.join(rundir, "dpdk", prefix))
    expect("no file left under the file prefix's runtime directory", left == [], left)
    expect("nothing under /var/run/dpdk", not os.path.exists(
        os.path.join("/var/run/dpdk", prefix)), prefix)


def main():
    testmr = sys.argv[1]
    client = shutil.which("dpdk-telemetry.py")
    rundir = tempfile.mkdtemp(prefix="testmr-telemetry-")
    env = dict(os.environ, RUNTIME_DIRECTORY=rundir)
    prefix = f"testmr-tel-{os.getpid()}"
    try:
        usage_errors(testmr, env, prefix)
        if client is None:
            why = "dpdk-telemetry.py is not installed (Debian package dpdk-dev)"
            if os.environ.get("CI"):
                fail(why)
            print(f"testmr-telemetry: SKIP: {why}")
            return 77
        check_telemetry(testmr, client, env, prefix, rundir)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)
    print("testmr-telemetry: EAL mode and the 5 endpoints as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
