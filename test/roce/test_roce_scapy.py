#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""nicmr's RoCEv2 packets against scapy's (Debian python3-scapy, scapy.contrib.roce).

Both ways, over IPv4 (scapy 2.5's BTH.compute_icrc handles IPv4 only; it returns 0 with a
warning for IPv6, so IPv6 is checked by test_roce's byte-by-byte masked headers alone):
  1. roce-wire-tool emit: packets nicmr's builder laid out; scapy dissects each one, recomputes
     the ICRC with its own masking and must find the bytes nicmr sent, and reads the opcode nicmr
     wrote. Packets marked with FECN/BECN after the ICRC must still match (the mask).
  2. scapy builds a packet for every RC opcode (its BTH computes the ICRC); roce-wire-tool check
     parses them with nicmr's parser, which must accept each one and read the same opcode,
     DestQP, PSN and payload length. Changed copies check that the check can fail: a payload
     bit flipped must be bad_icrc, a new TTL (IP checksum recomputed) must still be ok.

scapy missing: a failure when CI is set in the environment (CI installs python3-scapy, see
devtools/lib.sh), a skip (exit 77, meson's code) with the reason otherwise.
Usage: test_roce_scapy.py <roce-wire-tool>
"""
import os
import subprocess
import sys

SKIP = 77

try:
    from scapy.all import IP, UDP, Raw, raw
    from scapy.contrib.roce import BTH
except ImportError as e:
    msg = (f'test_roce_scapy: scapy is not importable by {sys.executable} ({e}); '
           'install Debian python3-scapy')
    if os.environ.get('CI'):
        print(msg + ' (CI is set: this is a failure)')
        sys.exit(1)
    print(msg + ' (skipped: CI is not set)')
    sys.exit(SKIP)

# IBTA table 35, RC: opcode -> (IBTA name, extension header bytes after the BTH, payload).
# RETH 16, AETH 4, AtomicETH 28, AtomicAckETH 8, ImmDt 4, IETH 4.
RC = {
    0x00: ('SEND_FIRST', 0, True),
    0x01: ('SEND_MIDDLE', 0, True),
    0x02: ('SEND_LAST', 0, True),
    0x03: ('SEND_LAST_WITH_IMMEDIATE', 4, True),
    0x04: ('SEND_ONLY', 0, True),
    0x05: ('SEND_ONLY_WITH_IMMEDIATE', 4, True),
    0x06: ('RDMA_WRITE_FIRST', 16, True),
    0x07: ('RDMA_WRITE_MIDDLE', 0, True),
    0x08: ('RDMA_WRITE_LAST', 0, True),
    0x09: ('RDMA_WRITE_LAST_WITH_IMMEDIATE', 4, True),
    0x0a: ('RDMA_WRITE_ONLY', 16, True),
    0x0b: ('RDMA_WRITE_ONLY_WITH_IMMEDIATE', 20, True),
    0x0c: ('RDMA_READ_REQUEST', 16, False),
    0x0d: ('RDMA_READ_RESPONSE_FIRST', 4, True),
    0x0e: ('RDMA_READ_RESPONSE_MIDDLE', 0, True),
    0x0f: ('RDMA_READ_RESPONSE_LAST', 4, True),
    0x10: ('RDMA_READ_RESPONSE_ONLY', 4, True),
    0x11: ('ACKNOWLEDGE', 4, False),
    0x12: ('ATOMIC_ACKNOWLEDGE', 12, False),
    0x13: ('COMPARE_SWAP', 28, False),
    0x14: ('FETCH_ADD', 28, False),
    0x16: ('SEND_LAST_WITH_INVALIDATE', 4, True),
    0x17: ('SEND_ONLY_WITH_INVALIDATE', 4, True),
}
BY_NAME = {name: op for op, (name, _, _) in RC.items()}

failures = []


def fail(msg):
    failures.append(msg)
    print('FAIL: ' + msg)


def nicmr_built(tool):
    out = subprocess.run([tool, 'emit'], check=True, capture_output=True, text=True).stdout
    lines = out.split('\n')
    seen = 0
    marked = 0
    for line in filter(None, lines):
        label, text = line.split()
        data = bytes.fromhex(text)
        pkt = IP(data)
        if BTH not in pkt:
            fail(f'{label}: scapy finds no BTH')
            continue
        bth = pkt[BTH]
        want = bth.compute_icrc(None)
        if data[-4:] != want:
            fail(f'{label}: ICRC nicmr {data[-4:].hex()} scapy {want.hex()}')
        name = label.rsplit('-', 2 if label.endswith('-marked') else 1)[0]
        if bth.opcode != BY_NAME.get(name):
            fail(f'{label}: scapy reads opcode {bth.opcode:#x}')
        seen += 1
        marked += label.endswith('-marked')
    # 18 payload opcodes x 5 lengths + 5 without payload, each plain and marked.
    if seen != 2 * (18 * 5 + 5) or marked != seen // 2:
        fail(f'emit gave {seen} packets ({marked} marked), expected {2 * (18 * 5 + 5)}')
    print(f'nicmr -> scapy: {seen} packets, {len(failures)} failures')


def scapy_packet(op, length, ttl=64):
    name, ext, payload_ok = RC[op]
    payload = bytes((i * 7 + op) & 0xff for i in range(length if payload_ok else 0))
    pad = (4 - len(payload) % 4) % 4
    ext_bytes = bytes((0x40 + i) for i in range(ext))
    pkt = (IP(src='203.0.113.5', dst='203.0.113.6', id=0x2a2a, flags='DF', ttl=ttl, tos=0x02) /
           UDP(sport=50123, dport=4791) /
           BTH(opcode=op, solicited=1, padcount=pad, pkey=0xffff, dqpn=0x100 + op, ackreq=1,
               psn=0x7ff000 + op) /
           Raw(ext_bytes + payload + b'\0' * pad))
    return raw(pkt), len(payload)


def scapy_built(tool):
    lines = []
    want = {}
    for op in RC:
        for length in ([0, 3, 64, 4096] if RC[op][2] else [0]):
            data, plen = scapy_packet(op, length)
            label = f'{RC[op][0]}-{length}'
            lines.append(f'{label} {data.hex()}')
            want[label] = f'ok {op} {0x100 + op} {0x7ff000 + op} {plen}'
    # Controls: a flipped payload bit must fail the ICRC; a TTL the ICRC masks must not.
    data, _ = scapy_packet(0x0a, 64)
    bad = bytearray(data)
    bad[-10] ^= 0x01
    lines.append(f'flipped {bytes(bad).hex()}')
    want['flipped'] = 'bad_icrc 0 0 0 0'
    data, plen = scapy_packet(0x0a, 64, ttl=3)
    lines.append(f'ttl3 {data.hex()}')
    want['ttl3'] = f'ok 10 {0x100 + 10} {0x7ff000 + 10} {plen}'

    res = subprocess.run([tool, 'check'], input='\n'.join(lines) + '\n', check=True,
                         capture_output=True, text=True)
    got = {}
    for line in filter(None, res.stdout.split('\n')):
        label, rest = line.split(' ', 1)
        got[label] = rest
    for label, w in want.items():
        if got.get(label) != w:
            fail(f'scapy -> nicmr {label}: nicmr says "{got.get(label)}", expected "{w}"')
    print(f'scapy -> nicmr: {len(want)} packets checked')


def main():
    if len(sys.argv) != 2:
        print('usage: test_roce_scapy.py <roce-wire-tool>')
        return 2
    nicmr_built(sys.argv[1])
    scapy_built(sys.argv[1])
    if failures:
        print(f'test_roce_scapy: {len(failures)} failures')
        return 1
    print('test_roce_scapy: nicmr and scapy agree')
    return 0


if __name__ == '__main__':
    sys.exit(main())
