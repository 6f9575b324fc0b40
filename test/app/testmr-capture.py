#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The device model's wire as Wireshark reads it: two testmr processes, each in its own network
namespace (two hosts joined by a veth pair the test makes and removes), connect their QPs with
`qp exchange` and run RDMA WRITE and READ of one and of several packets (MTU 1024), both
atomics, and a WRITE with a key the responder never gave out, while dumpcap records the veth.
Then tshark's InfiniBand dissector decodes every datagram to UDP port 4791: the test checks that
each is a well-formed RoCEv2 packet (no malformed frame), that the expected opcodes went each
way (WRITE first/middle/last/only, READ request and response first/middle/last/only, compare-swap,
fetch-add, ACK, atomic ACK) and that the refused WRITE was answered with a NAK whose AETH says
remote access error (syndrome 0x62, IBTA 9.7.5.2.8). The data is checked at both ends.

It skips (77) with the reason where namespaces or the veth cannot be made (not root, no ip(8)),
and fails where dumpcap or tshark is missing (the test command installs package tshark).

    testmr-capture.py TESTMR"""
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from testmr_proc import Testmr, check, fail, setup

SKIP = 77
# IBTA 9.2 Table 38 (RC opcodes) by name, as the test expects them each way.
FROM_REQUESTER = {"WRITE_FIRST": 0x06, "WRITE_MIDDLE": 0x07, "WRITE_LAST": 0x08,
                  "WRITE_ONLY": 0x0a, "READ_REQUEST": 0x0c, "CMP_SWAP": 0x13, "FETCH_ADD": 0x14}
FROM_RESPONDER = {"READ_RESP_FIRST": 0x0d, "READ_RESP_MIDDLE": 0x0e, "READ_RESP_LAST": 0x0f,
                  "READ_RESP_ONLY": 0x10, "ACK": 0x11, "ATOMIC_ACK": 0x12}
NAK_REMOTE_ACCESS = 0x62  # AETH syndrome: NAK (011b) with code 2, remote access error


def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).returncode == 0


class Namespaces:
    """nicmr-cA-PID and nicmr-cB-PID joined by a veth pair, 10.N.M.1/24 and .2/24, with static
    neighbours (ARP on a link just up would race the first request's retries)."""

    def __init__(self):
        pid = os.getpid()
        self.a, self.b = f"nicmr-cA-{pid}", f"nicmr-cB-{pid}"
        self.va, self.vb = f"nca{pid}", f"ncb{pid}"
        n, m = pid % 250 + 1, pid // 250 % 250
        self.addr_a, self.addr_b = f"10.{n}.{m}.1", f"10.{n}.{m}.2"
        self.made = False

    def make(self):
        """None, or why they cannot be made."""
        if os.geteuid() != 0 or not shutil.which("ip"):
            return "network namespaces need root and ip(8)"
        if not (sh(f"ip netns add {self.a}") and sh(f"ip netns add {self.b}")):
            return "cannot make network namespaces (ip netns add)"
        self.made = True
        mac_a, mac_b = "02:00:00:00:00:1a", "02:00:00:00:00:1b"
        if not sh(f"ip link add {self.va} address {mac_a} netns {self.a} type veth peer name "
                  f"{self.vb} address {mac_b} netns {self.b}"):
            return "cannot make a veth pair between namespaces"
        steps = [f"ip -n {self.a} addr add {self.addr_a}/24 dev {self.va}",
                 f"ip -n {self.b} addr add {self.addr_b}/24 dev {self.vb}",
                 f"ip -n {self.a} link set {self.va} up", f"ip -n {self.b} link set {self.vb} up",
                 f"ip -n {self.a} link set lo up", f"ip -n {self.b} link set lo up",
                 f"ip -n {self.a} neigh replace {self.addr_b} lladdr {mac_b} dev {self.va} "
                 "nud permanent",
                 f"ip -n {self.b} neigh replace {self.addr_a} lladdr {mac_a} dev {self.vb} "
                 "nud permanent"]
        if not all(sh(s) for s in steps):
            return "cannot address or bring up the veth pair"
        return None

    def remove(self):
        if self.made:
            sh(f"ip netns del {self.a}")
            sh(f"ip netns del {self.b}")


def start_capture(ns, dev, pcap):
    cap = subprocess.Popen(["ip", "netns", "exec", ns, "dumpcap", "-q", "-i", dev,
                            "-f", "udp port 4791", "-w", pcap],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for _ in range(100):  # dumpcap writes the file's header once it captures
        if cap.poll() is not None:
            fail("dumpcap exited: " + cap.stderr.read().strip())
        if os.path.exists(pcap) and os.path.getsize(pcap) > 0:
            return cap
        time.sleep(0.1)
    cap.kill()
    fail("dumpcap did not start capturing")


def decode(pcap):
    """(frames, Counter of (source IP, opcode), NAK syndromes by source, malformed frames)."""
    r = subprocess.run(["tshark", "-n", "-r", pcap, "-T", "fields", "-E", "separator=,",
                        "-e", "frame.number", "-e", "ip.src", "-e", "infiniband.bth.opcode",
                        "-e", "infiniband.aeth.syndrome", "-e", "_ws.malformed"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("tshark could not read the capture: " + r.stderr.strip())
    ops, syndromes, malformed, frames = collections.Counter(), collections.Counter(), [], 0
    for line in r.stdout.splitlines():
        num, src, op, syn, bad = (line.split(",") + [""] * 5)[:5]
        frames += 1
        if bad or not op:
            malformed.append(num)
            continue
        ops[(src, int(op, 0))] += 1
        if syn:
            syndromes[(src, int(syn, 0))] += 1
    return frames, ops, syndromes, malformed


def traffic(server, client, ns):
    """The operations, each checked at both ends."""
    skey, saddr = setup(server)
    ckey, caddr = setup(client)
    tcp = 18515
    server.run(f"qp exchange listen 0 {tcp} timeout 20", r"^QP 0: waiting on TCP port")
    client.send(f"qp exchange connect 0 {ns.addr_a} {tcp} timeout 20")
    client.expect(r"^QP 0 \(0x[0-9a-f]+, port 1\) connected to remote QP .* MTU 1024: RTS$",
                  "client connected")
    server.expect(r"^QP 0 \(0x[0-9a-f]+, port 1\) connected to remote QP .* MTU 1024: RTS$",
                  "server connected")

    # WRITE of 3000 bytes (first, middle, last at MTU 1024), then of 100 (only).
    client.run(f"mr fill {ckey} 0 3000 0x5a", r"set to 0x5a")
    client.run(f"post write 0 {ckey} 0 {skey} {saddr:#x} 3000 wrid 1", r"^posted RDMA WRITE")
    client.run("poll 0", r"wr_id 1, QP 0 .* RDMA_WRITE, success, 3000 bytes")
    client.run(f"mr fill {ckey} 4096 100 0x3c", r"set to 0x3c")
    client.run(f"post write 0 {ckey} 4096 {skey} {saddr + 4096:#x} 100 wrid 2",
               r"^posted RDMA WRITE")
    client.run("poll 0", r"wr_id 2, QP 0 .* RDMA_WRITE, success, 100 bytes")
    check(server.dump(skey, 0, 3000) == b"\x5a" * 3000, "the 3000-byte WRITE did not land")
    check(server.dump(skey, 4096, 100) == b"\x3c" * 100, "the 100-byte WRITE did not land")

    # READ of 3000 bytes (responses first, middle, last) and of 100 (only).
    client.run(f"post read 0 {ckey} 8k {skey} {saddr:#x} 3000 wrid 3", r"^posted RDMA READ")
    client.run("poll 0", r"wr_id 3, QP 0 .* RDMA_READ, success, 3000 bytes")
    client.run(f"post read 0 {ckey} 12k {skey} {saddr + 4096:#x} 100 wrid 4",
               r"^posted RDMA READ")
    client.run("poll 0", r"wr_id 4, QP 0 .* RDMA_READ, success, 100 bytes")
    check(client.dump(ckey, 8192, 3000) == b"\x5a" * 3000, "the 3000-byte READ brought other bytes")
    check(client.dump(ckey, 12288, 100) == b"\x3c" * 100, "the 100-byte READ brought other bytes")

    # Atomics on the word at 16k of the server's MR (zero: setup's MR is fresh).
    server.run(f"mr fill {skey} 16k 8 0", r"set to 0x00")
    client.run(f"post fadd 0 {ckey} 20k {skey} {saddr + 16384:#x} 5 wrid 5", r"^posted")
    m = client.run("poll 0", r"wr_id 5, QP 0 .* success.*old value (\d+)")
    check(m.group(1) == "0", f"fetch-add returned {m.group(1)}, 0 expected")
    client.run(f"post cswap 0 {ckey} 20k {skey} {saddr + 16384:#x} 5 77 wrid 6", r"^posted")
    m = client.run("poll 0", r"wr_id 6, QP 0 .* success.*old value (\d+)")
    check(m.group(1) == "5", f"compare-swap returned {m.group(1)}, 5 expected")
    check(server.dump(skey, 16384, 8) == (77).to_bytes(8, "little"),
          "the word is not 77 after fetch-add 5 and compare-swap 5 -> 77")

    # A key the server never gave out: NAK, REMOTE_ACCESS, nothing written.
    wrong = "0x{:08x}".format(int(skey, 16) ^ 1)
    client.run(f"mr fill {ckey} 0 16 0x77", r"set to 0x77")
    client.run(f"post write 0 {ckey} 0 {wrong} {saddr:#x} 16 wrid 7", r"^posted RDMA WRITE")
    client.run("poll 0", r"wr_id 7, QP 0 .* RDMA_WRITE, REMOTE_ACCESS, syndrome 0x13")
    check(server.dump(skey, 0, 16) == b"\x5a" * 16, "a refused WRITE changed the server's bytes")


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__ + "\n")
        return 2
    testmr = os.path.abspath(sys.argv[1])
    for prog in ("dumpcap", "tshark"):
        if not shutil.which(prog):
            fail(f"{prog} not found: apt-get install -y tshark")
    ns = Namespaces()
    cap = None
    work = tempfile.mkdtemp(prefix="nicmr-capture-")
    try:
        why = ns.make()
        if why:
            print(f"testmr-capture: SKIP: {why}")
            return SKIP
        pcap = os.path.join(work, "veth.pcapng")
        cap = start_capture(ns.a, ns.va, pcap)
        spec = "emu:mkeys=4096,addr={}"
        server = Testmr(testmr, "server", spec.format(ns.addr_a), ["ip", "netns", "exec", ns.a])
        client = Testmr(testmr, "client", spec.format(ns.addr_b), ["ip", "netns", "exec", ns.b])
        traffic(server, client, ns)
        rs, rc = server.quit(), client.quit()
        check(rs == 0 and rc == 0, f"exit statuses {rs} (server), {rc} (client); 0 expected")
        time.sleep(0.3)  # the last datagrams reach the file
        cap.send_signal(signal.SIGTERM)
        cap.wait(timeout=10)
        cap = None

        frames, ops, syndromes, malformed = decode(pcap)
        print(f"testmr-capture: tshark read {frames} RoCEv2 frames on the veth: " + ", ".join(
            f"{src} opcode {op:#04x} x{n}" for (src, op), n in sorted(ops.items())))
        check(frames > 0, "the capture holds no RoCEv2 frame")
        check(not malformed, "tshark found malformed or undecoded frames: " +
              " ".join(malformed[:20]))
        want = {(ns.addr_b, op) for op in FROM_REQUESTER.values()} | \
               {(ns.addr_a, op) for op in FROM_RESPONDER.values()}
        missing = sorted(want - set(ops))
        check(not missing, f"tshark did not see these (sender, opcode): {missing}")
        check(syndromes[(ns.addr_a, NAK_REMOTE_ACCESS)] == 1,
              f"one NAK with syndrome {NAK_REMOTE_ACCESS:#x} expected from the responder, AETH "
              f"syndromes seen: {dict(syndromes)}")
        print("testmr-capture: PASS (every frame well formed, every opcode seen, the bad key "
              "NAKed as a remote access error)")
        return 0
    finally:
        if cap is not None:
            cap.kill()
        ns.remove()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
