#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Tests of devtools/nicmr-devbind against a fake sysfs tree (NICMR_SYSFS).

In a fake tree the kernel does not react to the files written, so a bind is checked by what the
script wrote (driver_override, unbind, drivers_probe) and by the error it gives when the driver
did not change; the real bind is exercised in the VFIO guest test.

usage: test_devbind.py PATH-TO-nicmr-devbind
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

DEVBIND = None


class FakeSysfs(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="nicmr-devbind-")
        os.makedirs(os.path.join(self.root, "bus/pci/devices"))
        os.makedirs(os.path.join(self.root, "bus/pci/drivers"))

    def tearDown(self):
        shutil.rmtree(self.root)

    def driver(self, name):
        os.makedirs(os.path.join(self.root, "bus/pci/drivers", name), exist_ok=True)

    def device(self, addr, group, driver, vendor="0x15b3", dev="0x101b"):
        d = os.path.join(self.root, "devices/pci0000:00", addr)
        os.makedirs(d)
        for f, v in (("vendor", vendor), ("device", dev), ("driver_override", "(null)")):
            with open(os.path.join(d, f), "w") as fh:
                fh.write(v + "\n")
        os.symlink(d, os.path.join(self.root, "bus/pci/devices", addr))
        if driver:
            self.driver(driver)
            os.symlink(os.path.join(self.root, "bus/pci/drivers", driver),
                       os.path.join(d, "driver"))
        if group is not None:
            g = os.path.join(self.root, "kernel/iommu_groups", str(group), "devices")
            os.makedirs(g, exist_ok=True)
            os.symlink(os.path.dirname(g), os.path.join(d, "iommu_group"))
            os.symlink(d, os.path.join(g, addr))

    def run_devbind(self, *args):
        env = dict(os.environ, NICMR_SYSFS=self.root)
        return subprocess.run([sys.executable, DEVBIND] + list(args), env=env,
                              capture_output=True, text=True)

    def read(self, rel):
        with open(os.path.join(self.root, rel)) as f:
            return f.read()

    def test_status_shows_driver_group_and_what_is_missing(self):
        self.device("0000:03:00.0", 7, "vfio-pci")
        self.device("0000:03:00.1", 7, "mlx5_core")
        self.device("0000:04:00.0", None, "e1000e", "0x8086", "0x10d3")
        r = self.run_devbind("--status")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = {l.split()[0]: l for l in r.stdout.splitlines()[1:]}
        self.assertIn("15b3:101b", lines["0000:03:00.0"])
        self.assertIn("group blocked by 0000:03:00.1 (mlx5_core)", lines["0000:03:00.0"])
        self.assertIn("bind with: nicmr-devbind --bind vfio-pci 0000:03:00.1",
                      lines["0000:03:00.1"])
        self.assertIn("intel_iommu=on", lines["0000:04:00.0"])

    def test_status_says_ready_when_the_group_is_viable(self):
        self.device("0000:03:00.0", 7, "vfio-pci")
        self.device("0000:03:00.1", 7, None)
        r = self.run_devbind("--status")
        self.assertRegex(r.stdout, r"0000:03:00.0 .* ready")

    def test_bind_writes_override_unbinds_and_probes(self):
        self.driver("vfio-pci")
        self.device("0000:03:00.0", 7, "mlx5_core")
        r = self.run_devbind("--bind", "vfio-pci", "03:00.0")
        self.assertEqual(self.read("devices/pci0000:00/0000:03:00.0/driver_override"),
                         "vfio-pci")
        self.assertEqual(self.read("bus/pci/drivers/mlx5_core/unbind"), "0000:03:00.0")
        self.assertEqual(self.read("bus/pci/drivers_probe"), "0000:03:00.0")
        # The fake kernel never rebinds: the script must notice and say so.
        self.assertEqual(r.returncode, 1)
        self.assertIn("not bound to vfio-pci after the probe", r.stderr)

    def test_bind_without_vfio_pci_loaded_names_modprobe(self):
        self.device("0000:03:00.0", 7, "mlx5_core")
        r = self.run_devbind("--bind", "vfio-pci", "0000:03:00.0")
        self.assertEqual(r.returncode, 1)
        self.assertIn("modprobe vfio-pci", r.stderr)

    def test_bind_without_iommu_group_names_the_kernel_parameter(self):
        self.driver("vfio-pci")
        self.device("0000:03:00.0", None, "mlx5_core")
        r = self.run_devbind("--bind", "vfio-pci", "0000:03:00.0")
        self.assertEqual(r.returncode, 1)
        self.assertIn("intel_iommu=on", r.stderr)
        self.assertIn("amd_iommu=on", r.stderr)

    def test_unknown_device_is_an_error(self):
        self.driver("vfio-pci")
        r = self.run_devbind("--bind", "vfio-pci", "0000:09:00.0")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no PCI device 0000:09:00.0", r.stderr)

    def test_bad_arguments_give_2_and_touch_nothing(self):
        self.device("0000:03:00.0", 7, "mlx5_core")
        self.driver("vfio-pci")
        cases = [
            (["--bogus"], "unrecognized arguments: --bogus"),
            (["--bind"], "expected one argument"),
            (["--bind", "vfio-pci"], "name the PCI address"),
            (["--bind", "vfio-pci", "--unbind", "03:00.0"], "exclude each other"),
            (["03:00.0"], "not with --status"),
            (["--bind", "vfio-pci", "3:00.0"], "'3:00.0' is not a PCI address"),
            (["--unbind", "0000:03:00.8"], "'0000:03:00.8' is not a PCI address"),
            (["--bind", "vfio-pci", "03:00.0", "zz:00.0"], "'zz:00.0' is not a PCI address"),
        ]
        for args, msg in cases:
            r = self.run_devbind(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(msg, r.stderr, args)
            self.assertEqual(self.read("devices/pci0000:00/0000:03:00.0/driver_override"),
                             "(null)\n", args)

    def test_help_prints_usage_and_exits_0(self):
        r = self.run_devbind("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("usage: nicmr-devbind", r.stdout)

    def test_already_bound_is_a_no_op(self):
        self.device("0000:03:00.0", 7, "vfio-pci")
        r = self.run_devbind("--bind", "vfio-pci", "0000:03:00.0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("already bound", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.root, "bus/pci/drivers_probe")))

    def test_unbind_clears_the_override(self):
        self.device("0000:03:00.0", 7, "vfio-pci")
        r = self.run_devbind("--unbind", "0000:03:00.0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.read("bus/pci/drivers/vfio-pci/unbind"), "0000:03:00.0")
        self.assertEqual(self.read("devices/pci0000:00/0000:03:00.0/driver_override"), "\n")


if __name__ == "__main__":
    DEVBIND = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
