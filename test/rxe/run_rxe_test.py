#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""nicmr's RoCEv2 packets against Linux soft-RoCE (rdma_rxe) and rdma-core's ibv_rc_pingpong.

The host side makes a network namespace with a tap device and boots a QEMU guest (TCG) on the
tap whose init (devtools/rxe-guest/init.sh) loads rdma_rxe, makes rxe0 on its virtio-net NIC and
runs ibv_rc_pingpong, first as the client of rxe-pingpong-peer on the host side, then as its
server. The peer speaks RC SEND and ACK with drivers/common/roce's builder, parser and ICRC. The
test passes when both sides finish every round in both roles: rxe accepted every packet nicmr
built (its completions need them), nicmr's parser accepted every packet rxe sent (ICRC
included), rxe sent our data back byte for byte, rxe dropped a packet whose ICRC was wrong, and
Wireshark's InfiniBand dissector (tshark) read every datagram on the tap as well formed.

With --testmr and --rdma-peer, the same guest then meets the device model itself: testmr, on a
second address of the tap's host side with its engine's port 1 on the UDP wire, runs `qp
pingpong` against ibv_rc_pingpong as its server and as its client (testmr checks every echo),
and then serves test/rxe/rxe_rdma_peer.c: rxe WRITEs into and READs from an MR testmr registered
and testmr READs from and WRITEs into the guest's buffer (the two MRs' addresses and rkeys
cross in testmr's exchange, `qp exchange listen ... mr KEY`), each side checking the bytes, and an rkey with another variant completes with IBV_WC_REM_ACCESS_ERR in the guest
while testmr's memory keeps its bytes.

It FAILS, saying why, when root, network namespaces, /dev/net/tun, QEMU, busybox, cpio, the
guest kernel, ibv_rc_pingpong (package ibverbs-utils) or tshark cannot be had: a missing interop proof is
never a silent pass. The console goes to <workdir>/rxe-guest-console.log.

usage: run_rxe_test.py --source-root DIR --workdir DIR --peer PATH [--iters N] [--size BYTES]
                       [--mtu BYTES] [--timeout S] [--kernel-cache DIR]
                       [--testmr PATH --rdma-peer PATH]
"""
import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "devtools", "vfio-guest"))
import guest_image  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "app"))
from testmr_proc import LineProc  # noqa: E402

EXPECTED = ["guest-modules", "guest-hostroot", "guest-net", "rxe-link", "rc-pingpong-client",
            "rc-pingpong-server"]

# What the guest loads (mkinitramfs.py adds the dependencies): virtio-net for the tap, 9p for the
# host's root, rdma_rxe and the verbs device files; crc32_generic because rdma_rxe needs the
# crc32 algorithm without naming the module that provides it.
MODULES = ["virtio_pci", "virtio_net", "9pnet_virtio", "9p", "crc32_generic", "ib_uverbs",
           "rdma_rxe"]

HOST_IP, GUEST_IP, PREFIX = "10.77.0.1", "10.77.0.2", 24
# testmr's own address on the tap's host side: its datagrams stay out of the peer's capture.
NICMR_IP = "10.77.0.3"
NICMR_EXPECTED = ["nicmr-pingpong-client", "nicmr-pingpong-server", "rdma-connect",
                  "rdma-guest-write", "rdma-guest-read", "rdma-host-write", "rdma-bad-rkey"]
# The TCP port of testmr's exchanges (the peer's are on ibv_rc_pingpong's default, 18515).
NICMR_TCP = 18516
RDMA_SIZE = 4096  # bytes of each RDMA WRITE and READ: 4 packets at MTU 1024
MR_ACCESS = "read,write,local_write,remote_read,remote_write"
# Offsets in testmr's MR (rxe_rdma_peer.c names the guest's side of them).
OFF_GUEST_WRITE, OFF_GUEST_READ, OFF_HOST_READ, OFF_HOST_WRITE = 8192, 16384, 24576, 32768


def fail(msg):
    print("rxe-interop: FAIL: " + msg)
    sys.exit(1)


def positive(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError("'%s' is not a positive number" % text)
    return int(text)


def sh(*cmd, check=True):
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and r.returncode != 0:
        fail("%s: %s" % (" ".join(cmd), (r.stderr or r.stdout).strip()))
    return r


def wait_for_capture(cap, pcap):
    """Waits until dumpcap has its file open (it writes the header first)."""
    for _ in range(100):
        if cap.poll() is not None:
            fail("dumpcap on tap0 exited: " + cap.stderr.read().strip())
        if os.path.exists(pcap) and os.path.getsize(pcap) > 0:
            return
        time.sleep(0.1)
    fail("dumpcap did not start capturing on tap0")


def decode_capture(pcap):
    """Wireshark's reading of the capture: (opcode counts by sender, malformed frame numbers)."""
    r = sh("tshark", "-n", "-r", pcap, "-T", "fields", "-E", "separator=,", "-e", "frame.number",
           "-e", "ip.src", "-e", "infiniband.bth.opcode", "-e", "_ws.malformed",
           "-e", "_ws.expert.severity")
    ops, malformed, frames = collections.Counter(), [], 0
    for line in r.stdout.splitlines():
        num, src, op, bad, severity = (line.split(",") + [""] * 5)[:5]
        frames += 1
        if bad or not op:
            malformed.append(num)
            continue
        ops[(src, int(op, 0))] += 1
    return frames, ops, malformed


def guest_pattern(n):
    """rxe_rdma_peer.c's pattern(): what the guest WRITEs and testmr READs."""
    return bytes((j * 13 + 5 + (j >> 8)) & 0xff for j in range(n))


def quarters(values, n):
    return bytes(values[j * 4 // n] for j in range(n))


class Testmr(LineProc):
    """testmr on a pipe whose waits give None and leave the reason in self.why."""

    def __init__(self, cmd):
        super().__init__("testmr", cmd)
        self.why = None

    def expect(self, pattern, what, timeout=30):
        """The first line matching pattern; None (and the reason in self.why) otherwise."""
        m, self.why = self.search(pattern, what, timeout)
        return m

    def run(self, cmd, pattern, timeout=30):
        self.send(cmd)
        return self.expect(pattern, cmd, timeout)

    def dump(self, key, off, length):
        self.send("mr dump %s %#x %d" % (key, off, length))
        out = bytearray()
        while len(out) < length:
            m = self.expect(r"^([0-9a-f]{8}):((?: [0-9a-f]{2})+)$", "dump")
            if m is None:
                return None
            out += bytes(int(b, 16) for b in m.group(2).split())
        return bytes(out)

    def completion(self, wr_id, opcode, timeout):
        """Polls CQ 0 until wr_id completes: True on success, else the reason in self.why."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            m = self.run("poll 0", r"^CQ 0: (no completion|wr_id (\d+), .*)$")
            if m is None:
                return False
            if m.group(2) == str(wr_id):
                if re.search(r"%s, success, " % opcode, m.group(1)):
                    return True
                self.why = "testmr: " + m.group(1)
                return False
        self.why = "testmr: no completion of wr_id %d within %d s" % (wr_id, timeout)
        return False


def wait_console(path, pattern, timeout):
    rx = re.compile(pattern, re.M)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with open(path, errors="replace") as f:
            m = rx.search(f.read())
        if m:
            return m
        time.sleep(0.2)
    return None


def nicmr_steps(t, key, args, log_path):
    """The host side of the device model's steps; a list of failures (empty: all passed)."""
    failures = []
    # Each testmr step waits at most this long (a broken peer makes rxe retry without end).
    wait = min(args.timeout, 120)
    pp = "qp pingpong {} %s %d %d{} timeout %d" % (key, args.size, args.iters, wait)
    # ibv_rc_pingpong as client: testmr serves it (listening since the guest started, so that
    # it is there whenever the guest gets to it: rc_pingpong's client tries once).
    if not t.expect(r"^QP 0: waiting", "qp exchange listen 0", wait):
        return [t.why]
    if not t.expect(r"^QP 0: sent ", "the first exchange", args.timeout):
        return [t.why]
    if not t.run(pp.format(0, ""), r"^QP 0: pingpong: %d round trips .* as server, %d messages "
                 r"checked" % (args.iters, args.iters - 1), wait):
        failures.append(t.why)
    # ibv_rc_pingpong as server: testmr connects (tried again while the guest starts it).
    if not t.run("qp exchange connect 1 %s %d timeout %d" % (GUEST_IP, NICMR_TCP, wait),
                 r"^QP 1: sent ", wait):
        return failures + [t.why]
    if not t.run(pp.format(1, " client"), r"^QP 1: pingpong: %d round trips .* as client, %d "
                 r"messages checked" % (args.iters, args.iters), wait):
        failures.append(t.why)
    # One-sided: rxe-rdma-peer connects, WRITEs and READs, then waits for testmr's RDMA.
    # The MRs travel after the address records (qp exchange ... mr KEY, doc/testmr.md).
    if not t.run("qp exchange listen 2 %d timeout %d mr %s" % (NICMR_TCP, wait, key),
                 r"^QP 2: waiting"):
        return failures + [t.why]
    if not t.expect(r"^QP 2: sent ", "the third exchange", wait):
        return failures + [t.why]
    m = t.expect(r"^QP 2: peer MR at (0x[0-9a-f]+), rkey (0x[0-9a-f]{8}), (\d+) bytes$",
                 "the guest's MR record")
    if m is None:
        return failures + [t.why]
    gaddr, grkey = int(m.group(1), 16), m.group(2)
    if wait_console(log_path, r"^RDMA-GUEST-READY", wait) is None:
        return failures + ["the guest never got to testmr's RDMA (RDMA-GUEST-READY)"]
    t.send("post read 2 %s %#x %s %#x %d wrid 1" % (key, OFF_HOST_READ, grkey, gaddr, RDMA_SIZE))
    if not t.completion(1, "RDMA_READ", wait):
        failures.append(t.why)
    elif t.dump(key, OFF_HOST_READ, RDMA_SIZE) != guest_pattern(RDMA_SIZE):
        failures.append("testmr's RDMA READ of the guest's buffer brought other bytes")
    t.send("post write 2 %s %#x %s %#x %d wrid 2" % (key, OFF_HOST_WRITE, grkey,
                                                     gaddr + OFF_GUEST_WRITE, RDMA_SIZE))
    if not t.completion(2, "RDMA_WRITE", wait):
        failures.append(t.why)
    # The guest's stale-rkey WRITE comes last; then its WRITE's bytes must still be there.
    if wait_console(log_path, r"^RESULT rdma-bad-rkey ", wait) is None:
        return failures + ["the guest never reported its stale-rkey WRITE"]
    if t.dump(key, OFF_GUEST_WRITE, RDMA_SIZE) != guest_pattern(RDMA_SIZE):
        failures.append("testmr's MR at +8k does not hold the guest's WRITE (or the stale-rkey "
                        "WRITE changed it)")
    if t.dump(key, OFF_GUEST_READ, RDMA_SIZE) != quarters((0x11, 0x22, 0x33, 0x44), RDMA_SIZE):
        failures.append("the bytes the guest READ changed in testmr's MR")
    return failures


def start_testmr(ns, testmr):
    """testmr on NICMR_IP with its MR, CQ and three QPs: (Testmr, MR key) or fail()."""
    t = Testmr(["ip", "netns", "exec", ns, testmr, "-i", "--engine", "emu:addr=" + NICMR_IP])
    steps = [("mr pool 8m page 4k", r"^engine pool 0:"),
             ("mr reg 0 0 64k " + MR_ACCESS, r"^MR key (0x[0-9a-f]{8}) "),
             ("cq create depth 256", r"^CQ 0:"),
             ("qp create 0 depth 16 recv 16", r"^QP 0: .* receive depth 16"),
             ("qp create 0 depth 16 recv 16", r"^QP 1: .* receive depth 16"),
             ("qp create 0 depth 16", r"^QP 2: ")]
    key = None
    for cmd, pattern in steps:
        m = t.run(cmd, pattern)
        if m is None:
            t.p.kill()
            fail(t.why + "\n" + "\n".join(t.log[-20:]))
        if cmd.startswith("mr reg"):
            key = m.group(1)
    fills = [(OFF_GUEST_WRITE, RDMA_SIZE, 0)]
    q = RDMA_SIZE // 4
    fills += [(OFF_GUEST_READ + i * q, q, b) for i, b in enumerate((0x11, 0x22, 0x33, 0x44))]
    fills += [(OFF_HOST_WRITE + i * q, q, b) for i, b in enumerate((0xa1, 0xb2, 0xc3, 0xd4))]
    for off, n, b in fills:
        if t.run("mr fill %s %#x %d %#x" % (key, off, n, b), r"set to ") is None:
            t.p.kill()
            fail(t.why)
    return t, key


def main():
    ap = argparse.ArgumentParser(
        description="Runs ibv_rc_pingpong on rxe in a QEMU guest against nicmr's RoCEv2 "
        "packets. Exit status 0 when every round passed, 1 when one failed or something is "
        "missing, 2 for bad arguments.")
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--peer", required=True)
    ap.add_argument("--iters", type=positive, default=20)
    ap.add_argument("--size", type=positive, default=4096)
    ap.add_argument("--mtu", type=int, choices=[256, 512, 1024, 2048, 4096], default=1024)
    ap.add_argument("--timeout", type=positive, default=300)
    ap.add_argument("--kernel-cache", default=os.environ.get("NICMR_KERNEL_CACHE",
                                                             "/var/cache/nicmr/kernel"))
    ap.add_argument("--testmr", help="testmr, for the device model's steps")
    ap.add_argument("--rdma-peer", help="rxe-rdma-peer (test/rxe/rxe_rdma_peer.c)")
    args = ap.parse_args()
    if bool(args.testmr) != bool(args.rdma_peer):
        ap.error("--testmr and --rdma-peer go together")
    if args.size > 4096:
        ap.error("--size above 4096 does not fit testmr's ping-pong buffer")
    src = os.path.abspath(args.source_root)
    work = os.path.abspath(args.workdir)
    os.makedirs(work, exist_ok=True)

    if os.geteuid() != 0:
        fail("needs root: a network namespace, a tap device and a raw socket")
    for prog, pkg in (("qemu-system-x86_64", "qemu-system-x86"), ("cpio", "cpio"),
                      ("dumpcap", "tshark"), ("tshark", "tshark"),
                      ("ip", "iproute2"), ("rdma", "iproute2"),
                      ("ibv_rc_pingpong", "ibverbs-utils")):
        if not shutil.which(prog):
            fail("%s not found: apt-get install -y %s" % (prog, pkg))
    if not os.path.exists("/bin/busybox"):
        fail("busybox not found: apt-get install -y busybox-static")
    if not os.path.exists("/dev/net/tun"):
        fail("/dev/net/tun is missing: no tap device can be made")
    peer = os.path.abspath(args.peer)
    if not os.access(peer, os.X_OK):
        fail("peer %s is missing (ninja test/rxe/rxe-pingpong-peer)" % peer)
    for prog in (args.testmr, args.rdma_peer):
        if prog and not os.access(prog, os.X_OK):
            fail("%s is missing (build it: ninja -C BUILD)" % prog)

    t0 = time.monotonic()
    initrd = os.path.join(work, "rxe-guest-initrd.cpio")
    try:
        vmlinuz, made = guest_image.build(
            args.kernel_cache, initrd,
            init=os.path.join(src, "devtools", "rxe-guest", "init.sh"), modules=MODULES)
    except guest_image.ImageError as e:
        fail(str(e))
    print(made)
    t_prep = time.monotonic() - t0

    ns = "nicmr-rxe-%d" % os.getpid()
    r = sh("ip", "netns", "add", ns, check=False)
    if r.returncode != 0:
        fail("cannot make a network namespace: " + r.stderr.strip())
    peer_proc = cap = t = None
    try:
        sh("ip", "netns", "exec", ns, "ip", "tuntap", "add", "dev", "tap0", "mode", "tap")
        sh("ip", "-n", ns, "addr", "add", "%s/%d" % (HOST_IP, PREFIX), "dev", "tap0")
        sh("ip", "-n", ns, "addr", "add", "%s/%d" % (NICMR_IP, PREFIX), "dev", "tap0")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "link", "set", "tap0", "up")
        peer_log = os.path.join(work, "rxe-peer.log")
        plog = open(peer_log, "w")
        common = ["--addr", HOST_IP, "--iters", str(args.iters), "--size", str(args.size),
                  "--mtu", str(args.mtu), "--timeout", str(args.timeout), "--bad-icrc"]
        # The guest's client first: the peer serves it.
        peer_proc = subprocess.Popen(["ip", "netns", "exec", ns, peer] + common,
                                     stdout=plog, stderr=subprocess.STDOUT)
        params = ["nicmr.ip=%s/%d" % (GUEST_IP, PREFIX), "nicmr.peer=" + HOST_IP,
                  "nicmr.size=%d" % args.size, "nicmr.iters=%d" % args.iters,
                  "nicmr.mtu=%d" % args.mtu]
        if args.testmr:
            t, mr_key = start_testmr(ns, os.path.abspath(args.testmr))
            params += ["nicmr.dev=" + NICMR_IP, "nicmr.timeout=%d" % min(args.timeout, 120),
                       "nicmr.devport=%d" % NICMR_TCP,
                       "nicmr.rdma=%s,%d" % (os.path.abspath(args.rdma_peer), RDMA_SIZE)]
        qemu = ["ip", "netns", "exec", ns, "timeout", "--foreground", "-k", "5",
                str(args.timeout), "qemu-system-x86_64",
                "-machine", "q35", "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", "1024",
                "-nodefaults", "-nographic", "-no-reboot", "-serial", "stdio",
                "-monitor", "none",
                "-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no",
                "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:4e:49:43",
                "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,"
                "multidevs=remap",
                "-kernel", vmlinuz, "-initrd", initrd,
                "-append", "console=ttyS0 panic=-1 quiet " + " ".join(params)]
        # Every RoCEv2 datagram on the tap, for Wireshark's InfiniBand dissector afterwards.
        pcap = os.path.join(work, "rxe-tap.pcap")
        cap = subprocess.Popen(["ip", "netns", "exec", ns, "dumpcap", "-q", "-B", "16", "-i", "tap0",
                                "-f", "udp port 4791 and host " + HOST_IP, "-w", pcap],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_for_capture(cap, pcap)
        if t is not None:
            t.send("qp exchange listen 0 %d timeout %d" % (NICMR_TCP, args.timeout))
        log_path = os.path.join(work, "rxe-guest-console.log")
        t1 = time.monotonic()
        log = open(log_path, "w")
        q = subprocess.Popen(qemu, stdout=log, stderr=subprocess.STDOUT)
        peer_rc = [peer_proc.wait()]
        # Then the guest's server: the peer connects to it.
        peer_proc = subprocess.Popen(["ip", "netns", "exec", ns, peer, "--connect", GUEST_IP]
                                     + common, stdout=plog, stderr=subprocess.STDOUT)
        nicmr_failures = None
        if t is not None:
            # The peer's rounds come first in the guest: the device model's follow.
            peer_rc.append(peer_proc.wait())
            peer_proc = None
            nicmr_failures = nicmr_steps(t, mr_key, args, log_path)
        q_rc = q.wait()
        log.close()
        t_run = time.monotonic() - t1
        if peer_proc is not None:
            try:
                peer_rc.append(peer_proc.wait(timeout=30))
            except subprocess.TimeoutExpired:
                peer_proc.kill()
                peer_rc.append(peer_proc.wait())
        peer_proc = None
        plog.close()
        # libpcap hands packets over a block at a time, and the kernel retires a partly
        # filled block only on its timeout: let the last block through before stopping.
        time.sleep(2)
        cap.send_signal(signal.SIGINT)
        cap.wait(timeout=30)
        cap_report = cap.stderr.read()
        cap = None
    finally:
        if cap is not None:
            cap.kill()
            cap.wait()
        if peer_proc is not None:
            peer_proc.kill()
            peer_proc.wait()
        if t is not None:
            if t.p.poll() is None:
                t.send("quit")
                try:
                    t.p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    t.p.kill()
                    t.p.wait()
        sh("ip", "netns", "del", ns, check=False)

    with open(log_path, errors="replace") as f:
        console = f.read()
    with open(peer_log, errors="replace") as f:
        peer_out = f.read()
    sys.stdout.write(console)
    print("--- peer (host side, nicmr's packets) ---")
    sys.stdout.write(peer_out)
    print("rxe-interop: kernel+initramfs %.1f s, guest run %.1f s, console in %s"
          % (t_prep, t_run, log_path))
    if q_rc == 124:
        fail("the guest did not finish within %d s (console above)" % args.timeout)
    results = {}
    for m in re.finditer(r"RESULT (\S+) (PASS|FAIL)(.*)$", console, re.M):
        results[m.group(1)] = (m.group(2), m.group(3).strip())
    if "NICMR-GUEST-DONE" not in console:
        fail("the guest did not reach its end (QEMU exit %d)" % q_rc)
    failed = [n for n, (st, _) in results.items() if st != "PASS"]
    if failed:
        fail("checks failed in the guest: " + ", ".join(
            "%s (%s)" % (n, results[n][1]) for n in failed))
    if t is not None:
        print("--- testmr (the device model, host side) ---")
        # Its commands and answers, without the hex dumps.
        print("\n".join(line for line in t.log
                        if not re.match(r"^[0-9a-f]{8}:( [0-9a-f]{2})+$", line)))
        if nicmr_failures:
            fail("the device model's steps: " + "; ".join(nicmr_failures))
    missing = [n for n in EXPECTED + (NICMR_EXPECTED if t is not None else [])
               if n not in results]
    if missing:
        fail("checks the guest never reported: " + ", ".join(missing))
    frames, ops, malformed = decode_capture(pcap)
    print("rxe-interop: tshark read %d RoCEv2 frames on the tap: %s" % (frames, ", ".join(
        "%s opcode %#x x%d" % (src, op, n) for (src, op), n in sorted(ops.items()))))
    if malformed:
        fail("tshark found malformed or undecoded frames: " + " ".join(malformed[:20]))
    want = {(HOST_IP, 0x11), (GUEST_IP, 0x11)}
    if args.size > args.mtu:
        want |= {(ip, op) for ip in (HOST_IP, GUEST_IP) for op in (0x00, 0x02)}
    else:
        want |= {(HOST_IP, 0x04), (GUEST_IP, 0x04)}
    if not want <= set(ops):
        fail("tshark did not see these (sender, opcode): %s" % sorted(want - set(ops)))
    # Every datagram either side sent crossed the tap once: the peer's counts add up to it.
    counted = sum(int(a) + int(b) for a, b in
                  re.findall(r"PEER result=pass .*? pkts_in=(\d+) pkts_out=(\d+)", peer_out))
    if counted != frames:
        fail("the peer sent and received %d datagrams, the tap carried %d (dumpcap: %s)"
             % (counted, frames, " ".join(cap_report.split())))
    for role, rc in zip(("server", "client"), peer_rc):
        if rc != 0 or ("PEER result=pass role=" + role) not in peer_out:
            fail("the peer as %s failed (exit %d, its output above)" % (role, rc))
    if peer_out.count("PEER bad_icrc_probe=dropped") != 2:
        fail("the peer did not probe rxe with a bad ICRC in both roles")
    print("rxe-interop: PASS (%d rounds of %d bytes, MTU %d, rxe as client and as server%s)"
          % (args.iters, args.size, args.mtu,
             "; against the device model: ping-pong both ways, RDMA WRITE and READ both ways "
             "of %d bytes, a stale rkey refused" % RDMA_SIZE if t is not None else ""))


if __name__ == "__main__":
    main()
