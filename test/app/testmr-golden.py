#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Golden-output tests of testmr's commands (doc/testmr.md): each case runs testmr with -c
commands (a failed command does not stop the ones after it) or a -f file, and compares its exit
status and its standard output, with the addresses that change from run to run masked, to
test/app/golden/CASE.out. Every `show ... --json` line must be one valid JSON object.

    testmr-golden.py TESTMR reg|noreg [--regen]

--regen writes the golden files from this build's output (read them before committing)."""
import json
import os
import re
import subprocess
import sys
import tempfile

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")

# (name, arguments, exit status). Commands run in order; the registration engine's device (the
# native API's emu) runs with key_seed=1 (ENGINE), so it chooses the same keys on every run and
# keys are part of the output (without a seed every device open draws new ones).
ENGINE = "emu:key_seed=1"
# EAL as testmr-telemetry.py starts it in CI: no hugepages, no PCI scan, no shared files, and
# only EAL's warnings on standard error.
EAL = ["--no-huge", "--no-pci", "-m", "256", "--no-shconf", "--log-level=lib.eal:warning",
       "--no-telemetry"]
POOL = "mr pool 8m page 4k"
REG_A = "mr reg 0 0 64k read,local_write,remote_read,remote_write,mw_bind"
CASES_REG = [
    ("help", ["help", "help mr", "help key", "help window", "help bogus"], 1),
    ("mr-reg", [POOL, REG_A, "mr reg 0 64k 4k read", "show mrs", "mr reg 1 0 4k read",
                "mr reg 0 8m 4k read", "mr reg 0 0 4k remote_atomic", "mr pool 8m page 3m",
                "mr pool 0"], 1),
    ("mr-regv", [POOL, "mr regv 0 0:4k,64k:8k read,remote_read", "show mrs",
                 "mr regv 0 0:4k,8m:4k read", "mr regv 3 0:4k read"], 1),
    ("mr-sub", [POOL, REG_A, "mr sub 0x1581 4k 4k read", "mr sub 0x1581 4k 4k remote_atomic",
                "mr sub 0x1581 4k 4k local_write,remote_atomic",
                "mr sub 0x1581 60k 8k read", "mr sub 0x1234 0 4k read", "mr dereg 0x1581",
                "mr dereg 0xd66", "mr dereg 0x1581", "mr dereg 0x1581", "show mrs"], 1),
    ("show-mr", [POOL, REG_A, "mr reg 0 64k 4k read", "mr pool 4m page 4k",
                 "mr reg 1 0 4k remote_read", "show mr 0x1581", "show mr 0xd66",
                 "show mrs pool 1", "show mrs access remote_read", "show mrs access mw_bind",
                 "show mrs pool 7", "show mr 0x99"], 1),
    ("key-lookup", [POOL, REG_A, "key lookup 0x1581 remote_read",
                    "key lookup 0x1581 read offset 4k len 16",
                    "key lookup 0x1581 remote_atomic", "key lookup 0x1581 read offset 64k",
                    "key lookup 0x1581 read offset 60k len 8k", "key lookup 0x2100 read",
                    "mr dereg 0x1581", "key lookup 0x1581 read"], 0),
    ("key-raw", [POOL, REG_A, "key raw 0x1581", "key raw 0x77", "key map 4e4d524b01",
                 "key map " + "00" * 64], 1),
    ("window", [POOL, REG_A, "mr reg 0 64k 4k read,remote_read,local_write",
                "window bind 0x1581 0 4k remote_read", "key lookup 0x1935 remote_read",
                "key lookup 0x1935 remote_write", "mr dereg 0x1581",
                "window bind 0xd66 0 4k remote_read", "window bind 0x1581 60k 8k remote_read",
                "window bind 0x1581 0 4k remote_atomic", "window bind 0x99 0 4k remote_read",
                "window unbind 0", "key lookup 0x1935 remote_read", "window unbind 0",
                "mr dereg 0x1581"], 1),
    # The native API's own refusals, and the engine's device (--engine) failing to open.
    ("mr-api-errors", [POOL, "mr pool 0xfffffffffffff000 page 4k",
                       "mr regv 0 0:4k remote_atomic", "show mrs"], 1),
    ("engine-bad-spec", ["--engine", "emu:bogus=1", "mr pool 8m", "show mrs"], 1),
    ("engine-refused", ["--engine", "emu:fail_opcode=0x800", "mr pool 8m"], 1),
    ("engine-spec", ["--engine", "emu:mkeys=4096,key_seed=1", POOL, "mr reg 0 0 4k read"], 0),
    ("json", ["show pools --json", "pool create 4m page 4k", "show pools --json",
              "show pool 0 --json", "show pool 3 --json", POOL, REG_A, "show mr 0x1581 --json",
              "show mrs --json", "show mrs pool 1 --json", "show device --json"], 1),
]
# Queues of the engine's device: a CQ, an RC QP on each port connected to the other over the
# device's loopback wire, RDMA WRITE, READ and atomics with their completions, and the errors.
REG_RW = "mr reg 0 0 64k read,write,local_write,remote_read,remote_write,remote_atomic"
QUEUES = ["cq create", "qp create 0", "qp create 0 port 2", "qp connect 0 1", "qp connect 1 0"]
CASES_REG += [
    ("qp", [POOL, REG_RW, "show cqs", "show qps"] + QUEUES +
     ["show cqs", "show cq 0 --json", "show qps", "show qp 1 --json", "show qps --json",
      "post write 0 0x1581 0 0x1581 4k 64 wrid 7", "post read 0 0x1581 8k 0x1581 4k 64",
      "post fadd 0 0x1581 16 0x1581 32 5", "post fadd 0 0x1581 24 0x1581 32 5",
      "post cswap 0 0x1581 40 0x1581 32 10 99", "post cswap 0 0x1581 56 0x1581 32 10 7",
      "post write 0 0x1581 0 0x1581 48 8 inline",
      "post write 0 0x1581 0 0x1581 4k 64 unsignaled", "poll 0", "poll 0 max 1",
      # errors: no CQ, no QP, a port, a depth, a key outside its region, a QP not connected
      "qp create 5", "qp create 0 port 3", "cq create depth 0", "cq create depth 100000",
      "qp connect 0 9", "post write 9 0x1581 0 0x1581 0 8", "post write 0 0x99 0 0x1581 0 8",
      "post write 0 0x1581 60k 0x1581 0 8k", "post fadd 0 0x1581 3 0x1581 0 1",
      "qp create 0 port 2", "post write 2 0x1581 0 0x1581 0 8", "poll 7", "poll 0 max 0",
      "qp recover 2", "qp connect 0 1", "qp recover 9", "show qp 9", "show cq 9",
      "cq destroy 9", "post write 0 0x1581 0 0x1581 0 8 wrid x",
      "cq destroy 0", "qp destroy 2", "qp destroy 2", "qp destroy 1", "qp destroy 0",
      "cq destroy 0", "show cqs --json"], 1),
    # A remote key without the right the request needs: refused by the device, recorded.
    ("violations", [POOL, REG_RW, "mr reg 0 64k 4k read,remote_read", "show violations",
                    "show violations --json"] + QUEUES +
     ["post write 0 0x1581 0 0xd66 0 64", "poll 0", "show qp 0", "show qp 1",
      "qp recover 0", "qp recover 1", "post fadd 0 0x1581 0 0xd66 0 1", "poll 0",
      "qp recover 0", "qp recover 1", "post read 0 0x1581 0 0xd66 0 64", "poll 0",
      "post write 1 0x1581 0 0x1681 0 8", "poll 0", "show violations",
      "show violations --json", "qp recover 0"], 0),
    # Counters of remote writes into an RMA-event MR (fi_mr(3) FI_RMA_EVENT), and their errors.
    ("cntr", [POOL, REG_RW, "mr reg 0 64k 4k local_write,remote_write rma_event",
              "show cntrs", "cntr alloc", "show mr 0xd66", "mr bind 0xd66 0", "show cntrs"]
     + QUEUES +
     ["post write 0 0x1581 0 0xd66 0 8", "poll 0", "qp recover 0", "qp recover 1",
      "mr enable 0xd66", "post write 0 0x1581 0 0xd66 0 8",
      "post write 0 0x1581 0 0xd66 8 8", "post read 0 0x1581 0 0xd66 0 8", "poll 0",
      "show cntrs", "show cntrs --json", "show mr 0xd66 --json", "mr dereg 0xd66",
      "cntr free 0", "mr bind 0x1581 0", "mr enable 0x1581", "mr bind 0x99 0",
      "mr bind 0xd66 7", "mr enable 0x99", "mr unbind 0x99", "cntr free 7", "mr unbind 0xd66",
      "show mr 0xd66", "mr dereg 0xd66", "cntr free 0", "show cntrs"], 1),
    # On-demand MRs (doc/odp.md): registration with the access word odp, advice, its errors.
    ("odp", [POOL, "mr reg 0 0 64k read,local_write,remote_write,odp",
             "mr reg 0 64k 16k remote_read,odp", "mr reg 0 128k 4k read", "show mrs",
             "mr advise 0x4144f 0 8k prefetch_write flush", "mr advise 0x4144f 4k 4k prefetch",
             "mr advise 0x4144f 60k 8k prefetch", "mr advise 0x4045a 0 4k prefetch_write",
             "mr advise 0x4045a 0 16k no_fault", "mr advise 0x1581 0 4k prefetch",
             "mr advise 0x99 0 4k prefetch", "mr advise 0x4144f 0 4k fetch",
             "mr dereg 0x4144f", "mr dereg 0x4045a", "show mrs"], 1),
    ("show-mrs-size", [POOL, REG_A, "mr reg 0 64k 4k read", "mr reg 0 1m 2m read",
                       "show mrs min 64k", "show mrs max 4k", "show mrs min 5k max 64k",
                       "show mrs min 4m", "show mrs min 4k access read pool 0 --json",
                       "show mrs min x"], 1),
    # nicmr inside DPDK: with EAL up ("--eal": testmr-telemetry.py's CI options before --) the
    # engine's device takes DPDK's memory as pools and registers mbuf mempools; without EAL
    # the same commands are refused.
    ("dpdk", ["--eal", "show dpdk", "show dpdk --json", "show mempools",
              "mempool create 512 local_write,remote_read", "show mempools",
              "show mempools --json", "key lookup 0x1581 remote_read offset 4k len 64",
              "key lookup 0x1581 remote_write", "mempool create 0 read",
              "mempool create 100 bogus", "mempool destroy 3", "mempool destroy 0",
              "show mempools", "key lookup 0x1581 remote_read"], 1),
    ("dpdk-no-eal", ["show dpdk", "mempool create 8 read", "show mempools",
                     "mempool destroy 0"], 1),
    # Figures vary from run to run: masked (mask()); small counts keep the test short.
    ("bench", ["bench reg count 200", "bench lookup count 10000", "bench rdma count 100",
               "bench reg count 0"], 1),
]
CASES_NOREG = [
    ("noreg", ["mr pool 8m", "show mrs", "key lookup 1 read"], 1),
]


def mask(text):
    # Virtual addresses, and the IOVAs that follow them (a pool's IOVA is congruent with its
    # address modulo its alignment: doc/mem.md).
    text = re.sub(r"0x7[0-9a-f]{11}\b", "<VA>", text)
    text = re.sub(r"IOVA 0x[0-9a-f]+", "IOVA <IOVA>", text)
    # DPDK's memory (EAL mode) lies where EAL put it: below 0x7..., in the 4 GiB and up.
    text = re.sub(r"\[0x[0-9a-f]{9,}, ", "[<VA>, ", text)
    text = re.sub(r"IOVA \[0x[0-9a-f]+, 0x[0-9a-f]+\)", "IOVA [<IOVA>)", text)
    text = re.sub(r'"iova":"0x[0-9a-f]+"', '"iova":"<IOVA>"', text)
    text = re.sub(r"raw key \(64 bytes\): [0-9a-f]{128}", "raw key (64 bytes): <RAW>", text)
    text = re.sub(r'"(va|addr)":"0x[0-9a-f]+"', r'"\1":"<VA>"', text)
    text = re.sub(r"\(fd \d+\)", "(fd N)", text)
    text = re.sub(r"^EAL up: no telemetry socket \(.*\)$", "EAL up: no telemetry socket (<PATH>)",
                  text, flags=re.M)
    text = re.sub(r'"fd":\d+', '"fd":N', text)
    # bench figures: the measured numbers of its RESULT lines.
    text = re.sub(r"^(RESULT .*)$", lambda m: re.sub(r"=[0-9.]+", "=N", m.group(1)), text,
                  flags=re.M)
    return text


def check_json(name, out):
    """Every line a show --json printed is one JSON object."""
    n = 0
    for line in out.splitlines():
        if line.startswith("{"):
            obj = json.loads(line)
            if not isinstance(obj, dict):
                sys.exit(f"{name}: not a JSON object: {line}")
            n += 1
    return n


def run(testmr, args):
    return subprocess.run([testmr] + args, capture_output=True, text=True, timeout=60)


def main():
    testmr, reg = sys.argv[1], sys.argv[2]
    regen = "--regen" in sys.argv
    cases = CASES_REG if reg == "reg" else CASES_NOREG
    failed = 0
    for name, cmds, status in cases:
        args = ["--engine", ENGINE] if reg == "reg" else []
        if cmds[0] == "--engine":
            args, cmds = cmds[:2], cmds[2:]
        if cmds[0] == "--eal":
            args = EAL + [f"--file-prefix=golden{os.getpid()}", "--"] + args
            cmds = cmds[1:]
        for c in cmds:
            args += ["-c", c]
        p = run(testmr, args)
        out = mask(p.stdout)
        path = os.path.join(GOLDEN, name + ".out")
        if regen:
            with open(path, "w") as f:
                f.write(out)
        with open(path) as f:
            want = f.read()
        if p.returncode != status:
            print(f"{name}: exit status {p.returncode}, expected {status}\n{p.stdout}{p.stderr}")
            failed += 1
        if out != want:
            diff = subprocess.run(["diff", "-u", path, "-"], input=out, capture_output=True,
                                  text=True).stdout
            print(f"{name}: output differs from {path}:\n{diff}")
            failed += 1
        if name == "bench":
            # The figures masked above: one RESULT line per bench, every figure above 0.
            res = re.findall(r"^RESULT .*$", p.stdout, re.M)
            vals = [float(v) for line in res for v in re.findall(r"=([0-9.]+)", line)]
            if len(res) != 3 or len(vals) != 6 or min(vals) <= 0:
                print(f"bench: RESULT lines {res}")
                failed += 1
        # Every line a --json printed is one JSON object, whatever the case.
        check_json(name, p.stdout)
        if name == "json":
            # The JSON lines: 2 for pool lists, 1 for the pool, 1 for the MR, 2 for MR lists,
            # 1 for the device (the failing show pool 3 prints an error, not JSON).
            n = check_json(name, p.stdout)
            if n != 7:
                print(f"json: {n} JSON objects, expected 7")
                failed += 1
            # And python3 -m json.tool, the checker an operator would pipe into, agrees.
            for line in p.stdout.splitlines():
                if line.startswith("{"):
                    subprocess.run([sys.executable, "-m", "json.tool"], input=line,
                                   text=True, check=True, capture_output=True)
            dev = [json.loads(l) for l in p.stdout.splitlines() if l.startswith('{"name"')][0]
            if dev["firmware"] != "22.36.1010" or dev["atomics"] != "host":
                print(f"json: show device --json: {dev}")
                failed += 1
    # Command files (-f): the first failed line stops testmr with status 1 and is named on
    # standard error as FILE:LINE: <line>: <error>.
    if reg == "reg":
        with tempfile.NamedTemporaryFile("w", suffix=".cmds", delete=False) as f:
            f.write(f"# an engine pool and an MR\n{POOL}\n\n{REG_A}\nmr dereg 0x1234\n"
                    "show mrs\n")
            path = f.name
        try:
            p = run(testmr, ["--engine", ENGINE, "-f", path])
            want_err = f"{path}:5: mr dereg 0x1234: no MR with key 0x00001234\n"
            if p.returncode != 1 or want_err not in p.stderr or "show mrs" in p.stdout \
                    or "no MRs" in p.stdout or p.stdout.count("MR key 0x00001581") != 1:
                print(f"-f: status {p.returncode}, stdout:\n{p.stdout}stderr:\n{p.stderr}")
                failed += 1
        finally:
            os.unlink(path)
    if failed:
        sys.exit(f"testmr golden: {failed} failure(s)")
    print(f"testmr golden: {len(cases)} cases ok")


if __name__ == "__main__":
    main()
