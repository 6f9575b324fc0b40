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

It FAILS, saying why, when root, network namespaces, /dev/net/tun, QEMU, busybox, cpio, the
guest kernel, ibv_rc_pingpong (package ibverbs-utils) or tshark cannot be had: a missing interop proof is
never a silent pass. The console goes to <workdir>/rxe-guest-console.log.

usage: run_rxe_test.py --source-root DIR --workdir DIR --peer PATH [--iters N] [--size BYTES]
                       [--mtu BYTES] [--timeout S] [--kernel-cache DIR]
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

EXPECTED = ["guest-modules", "guest-hostroot", "guest-net", "rxe-link", "rc-pingpong-client",
            "rc-pingpong-server"]

# What the guest loads (mkinitramfs.py adds the dependencies): virtio-net for the tap, 9p for the
# host's root, rdma_rxe and the verbs device files; crc32_generic because rdma_rxe needs the
# crc32 algorithm without naming the module that provides it.
MODULES = ["virtio_pci", "virtio_net", "9pnet_virtio", "9p", "crc32_generic", "ib_uverbs",
           "rdma_rxe"]

HOST_IP, GUEST_IP, PREFIX = "10.77.0.1", "10.77.0.2", 24


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
    args = ap.parse_args()
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
    peer_proc = cap = None
    try:
        sh("ip", "netns", "exec", ns, "ip", "tuntap", "add", "dev", "tap0", "mode", "tap")
        sh("ip", "-n", ns, "addr", "add", "%s/%d" % (HOST_IP, PREFIX), "dev", "tap0")
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
                                "-f", "udp port 4791", "-w", pcap],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_for_capture(cap, pcap)
        log_path = os.path.join(work, "rxe-guest-console.log")
        t1 = time.monotonic()
        log = open(log_path, "w")
        q = subprocess.Popen(qemu, stdout=log, stderr=subprocess.STDOUT)
        peer_rc = [peer_proc.wait()]
        # Then the guest's server: the peer connects to it.
        peer_proc = subprocess.Popen(["ip", "netns", "exec", ns, peer, "--connect", GUEST_IP]
                                     + common, stdout=plog, stderr=subprocess.STDOUT)
        q_rc = q.wait()
        log.close()
        t_run = time.monotonic() - t1
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
    missing = [n for n in EXPECTED if n not in results]
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
    print("rxe-interop: PASS (%d rounds of %d bytes, MTU %d, rxe as client and as server)"
          % (args.iters, args.size, args.mtu))


if __name__ == "__main__":
    main()
