# SPDX-License-Identifier: BSD-3-Clause
"""The kernel and initramfs a QEMU test guest boots, for the host sides of the guest tests
(test/vfio/run_guest_test.py, test/rxe/run_rxe_test.py): fetch-kernel.sh unpacks the Debian
kernel, mkinitramfs.py builds the busybox image with the modules and the /init script asked for.
"""
import os
import subprocess
import sys

TOOLS = os.path.dirname(os.path.abspath(__file__))


class ImageError(Exception):
    """What is missing, in a sentence the tests print after "FAIL: "."""


def build(kernel_cache, initrd, init=None, modules=()):
    """Returns (vmlinuz, the mkinitramfs.py line saying what went in) and writes initrd."""
    r = subprocess.run([os.path.join(TOOLS, "fetch-kernel.sh"), kernel_cache],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise ImageError("no guest kernel: " + (r.stderr.strip() or "fetch-kernel.sh failed"))
    kroot = r.stdout.strip().splitlines()[-1]
    boot = os.path.join(kroot, "boot")
    vmlinuz = [f for f in os.listdir(boot) if f.startswith("vmlinuz-")]
    if not vmlinuz:
        raise ImageError("no vmlinuz in " + kroot)
    cmd = [sys.executable, os.path.join(TOOLS, "mkinitramfs.py"), kroot, initrd]
    if init:
        cmd += ["--init", init]
    for m in modules:
        cmd += ["--module", m]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise ImageError("initramfs: " + (r.stderr.strip() or r.stdout.strip()))
    return os.path.join(boot, vmlinuz[0]), r.stderr.strip()
