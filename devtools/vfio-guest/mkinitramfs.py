#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Builds the busybox initramfs the VFIO guest test boots.

The Debian kernel package ships no modules.dep, so the module order is worked out here from
the `depends=` field of each module's .modinfo section; modules the kernel has built in
(modules.builtin) need no file. The image holds busybox, the modules in load order (listed in
/modules.order for the init script), init.sh (or --init) as /init and guest-lib.sh, which the
init scripts source, as /guest-lib.sh.

usage: mkinitramfs.py KERNEL_ROOT OUTPUT [--module NAME]... [--busybox PATH]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# What the guest needs: vfio-pci and the type-1 IOMMU for the device, virtio-pci and 9p for
# the host's root filesystem.
DEFAULT_MODULES = ["vfio_pci", "vfio_iommu_type1", "virtio_pci", "9pnet_virtio", "9p"]


def norm(name):
    return name.replace("-", "_")


def has_interpreter(path):
    """True when an ELF64 executable names a dynamic loader (has a PT_INTERP header)."""
    with open(path, "rb") as f:
        hdr = f.read(64)
        if hdr[:4] != b"\x7fELF" or hdr[4] != 2:
            return True
        phoff = int.from_bytes(hdr[32:40], "little")
        phentsize = int.from_bytes(hdr[54:56], "little")
        phnum = int.from_bytes(hdr[56:58], "little")
        f.seek(phoff)
        for _ in range(phnum):
            ph = f.read(phentsize)
            if int.from_bytes(ph[0:4], "little") == 3:  # PT_INTERP
                return True
    return False


def module_index(moddir):
    index = {}
    for dirpath, _, files in os.walk(os.path.join(moddir, "kernel")):
        for f in files:
            if f.endswith(".ko"):
                index[norm(f[:-3])] = os.path.join(dirpath, f)
    return index


def builtin_set(moddir):
    names = set()
    path = os.path.join(moddir, "modules.builtin")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                base = os.path.basename(line.strip())
                if base.endswith(".ko"):
                    names.add(norm(base[:-3]))
    return names


def depends_of(path):
    with open(path, "rb") as f:
        data = f.read()
    m = re.search(rb"depends=([^\x00]*)\x00", data)
    if not m or not m.group(1):
        return []
    return [norm(d) for d in m.group(1).decode().split(",") if d]


def resolve(wanted, index, builtin):
    """Returns module files in an order where each comes after its dependencies."""
    order, state = [], {}

    def visit(name, chain):
        if name in builtin:
            return
        if name not in index:
            raise SystemExit("mkinitramfs: module %s (needed by %s) is neither a file nor built in"
                             % (name, " <- ".join(chain) or "the guest"))
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            raise SystemExit("mkinitramfs: dependency cycle at %s" % name)
        state[name] = "visiting"
        for dep in depends_of(index[name]):
            visit(dep, [name] + chain)
        state[name] = "done"
        order.append(name)

    for name in wanted:
        visit(norm(name), [])
    return order


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel_root")
    ap.add_argument("output")
    ap.add_argument("--module", action="append", default=[])
    ap.add_argument("--busybox", default=shutil.which("busybox") or "/bin/busybox")
    ap.add_argument("--init", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "init.sh"))
    args = ap.parse_args()

    moddirs = [d for d in os.listdir(os.path.join(args.kernel_root, "lib/modules"))]
    if len(moddirs) != 1:
        raise SystemExit("mkinitramfs: expected one kernel under %s/lib/modules, found %s"
                         % (args.kernel_root, moddirs))
    moddir = os.path.join(args.kernel_root, "lib/modules", moddirs[0])
    if not os.path.exists(args.busybox):
        raise SystemExit("mkinitramfs: busybox not found (apt-get install -y busybox-static)")
    if not shutil.which("cpio"):
        raise SystemExit("mkinitramfs: cpio not found (apt-get install -y cpio)")
    # A dynamically linked busybox would need the host's libc inside the image.
    if has_interpreter(args.busybox):
        raise SystemExit("mkinitramfs: %s is not static (apt-get install -y busybox-static)"
                         % args.busybox)

    index, builtin = module_index(moddir), builtin_set(moddir)
    order = resolve(args.module or DEFAULT_MODULES, index, builtin)

    with tempfile.TemporaryDirectory() as tmp:
        for d in ("bin", "sbin", "proc", "sys", "dev", "hostroot", "modules", "tmp"):
            os.makedirs(os.path.join(tmp, d))
        shutil.copy(args.busybox, os.path.join(tmp, "bin/busybox"))
        os.symlink("busybox", os.path.join(tmp, "bin/sh"))
        for name in order:
            shutil.copy(index[name], os.path.join(tmp, "modules", name + ".ko"))
        with open(os.path.join(tmp, "modules.order"), "w") as f:
            f.write("".join(n + "\n" for n in order))
        shutil.copy(args.init, os.path.join(tmp, "init"))
        shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "guest-lib.sh"),
                    os.path.join(tmp, "guest-lib.sh"))
        os.chmod(os.path.join(tmp, "init"), 0o755)
        files = subprocess.run(["find", "."], cwd=tmp, check=True, capture_output=True).stdout
        out = os.path.abspath(args.output)
        with open(out + ".tmp", "wb") as f:
            subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=tmp, input=files,
                           stdout=f, check=True)
        os.replace(out + ".tmp", out)
    print("mkinitramfs: %s (modules: %s)" % (args.output, " ".join(order)), file=sys.stderr)


if __name__ == "__main__":
    main()
