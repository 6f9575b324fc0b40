#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Two testmr processes connect their QPs over the device model's UDP wire (doc/testmr.md,
"Connecting to another process or host"): each opens its registration engine's device with
port 1 on the wire at 127.0.0.1 (UDP ports of this run's own, each the other's peer), registers
64 KiB, and one waits with `qp exchange listen` while the other runs `qp exchange connect`:
ibv_rc_pingpong's 52-byte records cross over TCP on 127.0.0.1, each side connects its QP to the
other's address, and `show qp` prints the address the other received. Then the client fills
bytes, RDMA WRITEs them into the server's MR, and the server dumps them (the bytes around
untouched); an RDMA READ brings them back; a wrong rkey completes with REMOTE_ACCESS. Then
`qp pingpong` (ibv_rc_pingpong's SEND ping-pong) between two QPs with receive queues, after an
exchange that carries MR records too (`mr KEY`), and its errors. Last, the exchange's own errors: a QP on a port without the wire, nobody listening (the timeout), a port
already taken.

    testmr-exchange.py TESTMR

The processes read commands from a pipe (testmr flushes each command's output), so the test
drives both step by step; every wait has a timeout, and the processes are killed on failure."""
import os
import socket
import sys

from testmr_proc import Testmr, check, fail, setup

RECORD = r"([0-9a-f]{4}):([0-9a-f]{6}):([0-9a-f]{6}):([0-9a-f]{32})"


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    testmr = sys.argv[1]
    base = 42000 + (os.getpid() % 5000) * 3
    udp_a, udp_b, tcp = base, base + 1, base + 2
    spec = "emu:mkeys=4096,addr=127.0.0.1,udp_port={},peer_udp_port={}"
    server = Testmr(testmr, "server", spec.format(udp_a, udp_b))
    client = Testmr(testmr, "client", spec.format(udp_b, udp_a))

    skey, saddr = setup(server)
    ckey, caddr = setup(client)

    # The address each will send: show qp prints GID, QPN and PSN of a QP on the wire.
    addr_rx = r"GID (\S+) QPN 0x([0-9a-f]{6}) PSN 0x([0-9a-f]{6}),.* RESET$"
    s_gid, s_qpn, s_psn = server.run("show qp 0", addr_rx).groups()
    c_gid, c_qpn, c_psn = client.run("show qp 0", addr_rx).groups()
    check(s_gid == "::ffff:127.0.0.1" and c_gid == s_gid, f"GIDs {s_gid} {c_gid}")

    server.run("qp exchange listen 0 {} timeout 20".format(tcp), r"^QP 0: waiting on TCP port")
    client.send("qp exchange connect 0 127.0.0.1 {} timeout 20".format(tcp))
    # The server connects before it answers, then reports both records.
    m = server.expect(r"^QP 0 \(0x[0-9a-f]+, port 1\) connected to remote QP 0x([0-9a-f]{6}) "
                      r"at (\S+), PSN 0x([0-9a-f]{6}), MTU 1024: RTS$", "server connected")
    check(m.groups() == (c_qpn, c_gid, c_psn), f"server connected to {m.groups()}")
    ms = server.expect(r"^QP 0: sent " + RECORD + r", received " + RECORD + "$", "server records")
    mc = client.expect(r"^QP 0: sent " + RECORD + r", received " + RECORD + "$", "client records")
    gid_hex = "00000000000000000000ffff7f000001"
    check(ms.groups()[:4] == ("0000", s_qpn, s_psn, gid_hex), f"server sent {ms.groups()[:4]}")
    check(mc.groups()[:4] == ("0000", c_qpn, c_psn, gid_hex), f"client sent {mc.groups()[:4]}")
    check(ms.groups()[4:] == mc.groups()[:4], "the server did not receive what the client sent")
    check(mc.groups()[4:] == ms.groups()[:4], "the client did not receive what the server sent")
    m = client.expect(r"^QP 0 \(0x[0-9a-f]+, port 1\) connected to remote QP 0x([0-9a-f]{6}) "
                      r"at (\S+), PSN 0x([0-9a-f]{6}), MTU 1024: RTS$", "client connected")
    check(m.groups() == (s_qpn, s_gid, s_psn), f"client connected to {m.groups()}")
    client.run("show qp 0", r"remote QP 0x{} at ::ffff:127.0.0.1 PSN 0x{} MTU 1024, RTS$".format(
        s_qpn, s_psn))
    client.run("show qp 0 --json", r'"remote_qpn":"0x{:x}"'.format(int(s_qpn, 16)))

    # WRITE: 300 bytes of 0x5a at 0x100 of the server's MR; the server sees them.
    before = server.dump(skey, 0, 0x400)
    client.run(f"mr fill {ckey} 0 300 0x5a", r"set to 0x5a")
    client.run(f"post write 0 {ckey} 0 {skey} {saddr + 0x100:#x} 300 wrid 7",
               r"^posted RDMA WRITE, wr_id 7")
    client.run("poll 0", r"wr_id 7, QP 0 .* RDMA_WRITE, success, 300 bytes")
    after = server.dump(skey, 0, 0x400)
    want = before[:0x100] + b"\x5a" * 300 + before[0x100 + 300:]
    check(after == want, "the server's bytes after the WRITE are not 300 x 0x5a at 0x100 with "
          "the rest untouched")

    # READ them back into the client's MR at 8k.
    client.run(f"post read 0 {ckey} 8k {skey} {saddr + 0x100:#x} 300 wrid 8",
               r"^posted RDMA READ, wr_id 8")
    client.run("poll 0", r"wr_id 8, QP 0 .* RDMA_READ, success, 300 bytes")
    check(client.dump(ckey, 8192, 300) == b"\x5a" * 300, "the READ brought other bytes")

    # A key the server never handed out: REMOTE_ACCESS, nothing written.
    wrong = "0x{:08x}".format(int(skey, 16) ^ 1)
    client.run(f"mr fill {ckey} 0 16 0x77", r"set to 0x77")
    client.run(f"post write 0 {ckey} 0 {wrong} {saddr:#x} 16 wrid 9", r"^posted RDMA WRITE")
    client.run("poll 0", r"wr_id 9, QP 0 .* RDMA_WRITE, REMOTE_ACCESS, syndrome 0x13")
    check(server.dump(skey, 0, 0x400) == want, "a refused WRITE changed the server's bytes")

    # ibv_rc_pingpong's SEND ping-pong (qp pingpong) on new QPs with receive queues, after a
    # second exchange: the client's pattern travels 30 times there and back, checked on each
    # arrival; the server checks every message after the first against it.
    ping = []
    for t in (server, client):
        t.run("cq create depth 256", r"^CQ 1:")
        m = t.run("qp create 1 depth 16 recv 16",
                  r"^QP (\d+): number 0x[0-9a-f]+, port 1, CQ 1, depth 16, receive depth 16, RESET$")
        ping.append(m.group(1))
    sq, cq = ping
    server.run(f"qp pingpong {sq} {skey} 64 1", rf"^error: QP {sq} is not connected to a remote QP "
               r"\(qp exchange, qp connect remote\), -ENOTCONN", "pingpong unconnected")
    # This exchange carries MR records too (mr KEY): each side learns the other's MR.
    client.run(f"qp exchange connect {cq} 127.0.0.1 {tcp + 4} timeout 1 mr 0x7777",
               r"^error: no MR with key 0x00007777", "mr of no MR")
    server.run(f"qp exchange listen {sq} {tcp + 4} timeout 20 mr {skey}",
               r"^QP \d+: waiting on TCP port")
    client.send(f"qp exchange connect {cq} 127.0.0.1 {tcp + 4} timeout 20 mr {ckey}")
    mr_line = r"^QP {}: peer MR at {:#x}, rkey {}, 65536 bytes$"
    client.expect(mr_line.format(cq, saddr, skey), "the server's MR record")
    client.expect(r"^QP \d+ \(0x[0-9a-f]+, port 1\) connected to remote QP .*: RTS$", "client 2")
    server.expect(r"^QP \d+: sent ", "server 2 records")
    server.expect(mr_line.format(sq, caddr, ckey), "the client's MR record")
    server.send(f"qp pingpong {sq} {skey} 4093 30 timeout 20")
    client.run(f"qp pingpong {cq} {ckey} 4093 30 client timeout 20",
               rf"^QP {cq}: pingpong: 30 round trips of 4093 bytes as client, 30 messages checked, ",
               "client pingpong")
    server.expect(rf"^QP {sq}: pingpong: 30 round trips of 4093 bytes as server, 29 messages checked, ",
                  "server pingpong")
    # Its errors: a QP without a receive queue, bytes beyond the MR, nothing arriving, a message
    # of another size, and one longer than the receive (both QPs end in ERR).
    server.run(f"qp pingpong 0 {skey} 64 1", r"^error: QP 0 has no receive queue "
               r"\(qp create CQ recv N\), -ENOTSUP", "pingpong without RQ")
    server.run(f"qp pingpong {sq} {skey} 1m 1", r"^error: pingpong: 1048576 bytes do not fit in MR "
               r"0x[0-9a-f]{8} \(65536 bytes\), -ERANGE", "pingpong beyond the MR")
    server.run(f"qp pingpong {sq} {skey} 64 1 timeout 1", rf"^error: QP {sq}: pingpong: no "
               r"completion within 1 s \(0 sent, 0 received\), -ETIMEDOUT", "pingpong timeout")
    server.send(f"qp pingpong {sq} {skey} 64 3 timeout 5")
    client.send(f"qp pingpong {cq} {ckey} 32 3 client timeout 2")
    server.expect(rf"^error: QP {sq}: pingpong: message 1 has 32 bytes, not 64, -EBADMSG",
                  "pingpong size mismatch")
    client.expect(rf"^error: QP {cq}: pingpong: no completion within 2 s \(1 sent, 0 received\), "
                  r"-ETIMEDOUT", "client waits for the answer")
    server.send(f"qp pingpong {sq} {skey} 4093 2 timeout 5")
    client.send(f"qp pingpong {cq} {ckey} 8000 2 client timeout 5")
    server.expect(rf"^error: QP {sq}: pingpong: receive completion LOCAL_LEN, syndrome 0x01 "
                  r"\(.*\) after 0 sent, 0 received, -EIO", "longer than the receive")
    client.expect(rf"^error: QP {cq}: pingpong: send completion REMOTE_INVAL_REQ, syndrome 0x12 "
                  r"\(.*\) after 0 sent, 0 received, -EIO", "the sender's error")

    # The exchange's own errors.
    client.run("qp create 0 port 2", r"^QP 2: number")
    client.run("qp exchange listen 2 {}".format(tcp),
               r"^error: QP 2: its port 2 is not on a wire, -EADDRNOTAVAIL", "not on a wire")
    client.run("qp exchange connect 0 127.0.0.1 {} timeout 1".format(tcp + 3000),
               r"^error: qp exchange \(-ETIMEDOUT\): connecting to 127\.0\.0\.1:\d+: nobody accepted within "
               r"1 s \(timeout", "timeout")
    server.run("qp create 0", r"^QP 2: number")
    server.run("qp exchange listen 2 {} timeout 1".format(tcp + 3000),
               r"^error: qp exchange \(-ETIMEDOUT\): waiting for a peer on TCP port \d+: nothing within 1 s "
               r"\(timeout\)", "listen timeout")
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("0.0.0.0", tcp + 3001))
    taken.listen(1)
    server.run("qp exchange listen 2 {} timeout 1".format(tcp + 3001),
               r"^error: qp exchange \(-EADDRINUSE\): listening on TCP port \d+: ",
               "port taken")
    taken.close()
    client.run("qp connect remote 0 ::ffff:127.0.0.1 0x12 0x34",
               r"^error: nicmr_qp_connect_remote: -EISCONN", "EISCONN")

    # Failed commands make the status 1 (doc/testmr.md, "Exit status"); the server had one.
    rs, rc = server.quit(), client.quit()
    check(rs == 1 and rc == 1, f"exit statuses {rs} (server), {rc} (client); 1 expected")
    print("testmr-exchange: records crossed, WRITE seen by the peer, READ back, REMOTE_ACCESS "
          "refused, errors as documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
