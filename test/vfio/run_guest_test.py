#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Host side of the VFIO guest test: boots a QEMU guest (TCG) with an emulated VT-d IOMMU and
QEMU's edu DMA device, runs the project's vfio-guest-test inside it and checks its RESULT lines.

It fetches the Debian kernel (devtools/vfio-guest/fetch-kernel.sh), builds the busybox
initramfs (devtools/vfio-guest/mkinitramfs.py) and boots with devtools/vfio-guest/run-guest.sh.
It FAILS, saying why, when QEMU, busybox-static, cpio or the kernel package cannot be had: a
missing VFIO proof is never a silent pass. The console goes to <workdir>/vfio-guest-console.log;
BENCH lines (with --bench) to <workdir>/vfio-guest-bench.txt.

usage: run_guest_test.py --source-root DIR --workdir DIR --test-bin PATH [--bench PATH]
                         [--timeout S] [--kernel-cache DIR]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "devtools", "vfio-guest"))
import guest_image  # noqa: E402

# Every check the guest must report, in the order it reports them.
EXPECTED = [
    "guest-modules", "guest-hostroot", "guest-iommu", "edu-present", "devbind-vfio-pci",
    "vfio-open", "iommu-info", "edu-bar0-mmio", "bus-master-set-by-open", "device-reset",
    "pool-dma-mapped", "edu-dma-roundtrip", "edu-msi-eventfd", "shared-container-two-groups",
    "pool-dma-unmapped",
    "dma-revoked-after-unmap", "iova-outside-ranges-erange", "map-errors",
    "mapping-limit-enospc", "mlx5-refuses-edu", "guest-test-exit", "dmar-fault-logged",
]
# With --fabric-probe: the provider through libfabric on the edu.
EXPECTED_FABRIC = ["fabric-vfio-refuses-edu"]


def fail(msg):
    print("vfio-guest: FAIL: " + msg)
    sys.exit(1)


def seconds(text):
    """A --timeout: digits only, 1 or more (argparse makes a refusal exit status 2)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError("'%s' is not a number of seconds (1 or more)" % text)
    return int(text)


def main():
    ap = argparse.ArgumentParser(
        description="Boots the VFIO test guest and checks its results. Exit status 0 when "
        "every check passed, 1 when one failed or something is missing, 2 for bad arguments.")
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--test-bin", required=True)
    ap.add_argument("--bench")
    ap.add_argument("--fabric-probe", help="test/fabric/fabric_log_probe, run in the guest with "
                    "the provider of --fabric-dir and FI_NICMR_DEVICE=vfio:<edu>")
    ap.add_argument("--fabric-dir")
    ap.add_argument("--timeout", type=seconds, default=300)
    ap.add_argument("--kernel-cache", default=os.environ.get("NICMR_KERNEL_CACHE",
                                                             "/var/cache/nicmr/kernel"))
    args = ap.parse_args()
    src = os.path.abspath(args.source_root)
    work = os.path.abspath(args.workdir)
    tools = os.path.join(src, "devtools", "vfio-guest")
    os.makedirs(work, exist_ok=True)

    if os.geteuid() != 0:
        fail("needs root: the guest shares the host's root read-only over 9p and reads it as "
             "root")
    if not shutil.which("qemu-system-x86_64"):
        fail("qemu-system-x86_64 not found: apt-get install -y qemu-system-x86")
    if not os.path.exists("/bin/busybox"):
        fail("busybox not found: apt-get install -y busybox-static")
    if not shutil.which("cpio"):
        fail("cpio not found: apt-get install -y cpio")
    test_bin = os.path.abspath(args.test_bin)
    if not os.access(test_bin, os.X_OK):
        fail("guest test binary %s is missing (build it: ninja test/vfio/vfio-guest-test)"
             % test_bin)

    t0 = time.monotonic()
    initrd = os.path.join(work, "vfio-guest-initrd.cpio")
    try:
        vmlinuz, made = guest_image.build(args.kernel_cache, initrd)
    except guest_image.ImageError as e:
        fail(str(e))
    print(made)
    t_prep = time.monotonic() - t0

    params = ["nicmr.test=" + test_bin,
              "nicmr.devbind=" + os.path.join(src, "devtools", "nicmr-devbind")]
    expected = list(EXPECTED)
    if args.fabric_probe and args.fabric_dir:
        params += ["nicmr.fiprobe=" + os.path.abspath(args.fabric_probe),
                   "nicmr.fiprov=" + os.path.abspath(args.fabric_dir)]
        expected += EXPECTED_FABRIC
    if args.bench:
        # The 1 GiB pool of the benchmark needs 512 pages of 2 MiB besides the 2 MiB pools.
        params += ["nicmr.bench=" + os.path.abspath(args.bench), "nicmr.hugepages=600"]
    log_path = os.path.join(work, "vfio-guest-console.log")
    t1 = time.monotonic()
    with open(log_path, "w") as log:
        p = subprocess.run([os.path.join(tools, "run-guest.sh"), vmlinuz, initrd,
                            str(args.timeout)] + params,
                           stdout=log, stderr=subprocess.STDOUT)
    t_boot = time.monotonic() - t1
    with open(log_path, errors="replace") as f:
        console = f.read()
    sys.stdout.write(console)
    print("vfio-guest: kernel+initramfs %.1f s, guest run %.1f s, console in %s"
          % (t_prep, t_boot, log_path))
    if p.returncode == 124:
        fail("the guest did not finish within %d s (console above)" % args.timeout)

    results = {}
    for m in re.finditer(r"RESULT (\S+) (PASS|FAIL)(.*)$", console, re.M):
        results[m.group(1)] = (m.group(2), m.group(3).strip())
    bench = re.findall(r"BENCH .*$", console, re.M)
    if args.bench:
        with open(os.path.join(work, "vfio-guest-bench.txt"), "w") as f:
            f.write("".join(b + "\n" for b in bench))
    missing = [n for n in expected if n not in results]
    failed = [n for n, (st, _) in results.items() if st != "PASS"]
    if "NICMR-GUEST-DONE" not in console:
        fail("the guest did not reach its end (QEMU exit %d)" % p.returncode)
    if failed:
        fail("checks failed in the guest: " + ", ".join(
            "%s (%s)" % (n, results[n][1]) for n in failed))
    if missing:
        fail("checks the guest never reported: " + ", ".join(missing))
    if args.bench and not bench:
        fail("the benchmark printed no BENCH lines")
    print("vfio-guest: PASS (%d checks)" % len(results))


if __name__ == "__main__":
    main()
