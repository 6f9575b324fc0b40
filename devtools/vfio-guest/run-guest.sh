#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
#
# Boots the VFIO test guest under QEMU (TCG: no KVM needed) and copies its serial console to
# stdout. The machine: q35 with split irqchip (intel-iommu's interrupt remapping needs it), an
# emulated VT-d IOMMU in caching mode (so that VFIO's maps reach QEMU), two of QEMU's edu DMA
# devices (each in its own IOMMU group) and the host's root shared read-only over 9p so that
# host-built binaries run in the guest.
#
# usage: run-guest.sh VMLINUZ INITRD TIMEOUT_S [extra kernel parameters...]
# Exit status: QEMU's, or 124 when the guest did not power off within TIMEOUT_S.
set -eu
kernel=$1 initrd=$2 tmo=$3
shift 3
qemu=${QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null 2>&1 || {
	echo "run-guest: $qemu not found (apt-get install -y qemu-system-x86)" >&2
	exit 127
}
# -cpu max: host binaries built for this machine (and Debian's DPDK) use SSE4.2 and more.
exec timeout --foreground -k 5 "$tmo" "$qemu" \
	-machine q35,kernel-irqchip=split -accel tcg -cpu max -smp 1 -m "${GUEST_MEM:-3072}" \
	-nodefaults -nographic -no-reboot -serial stdio -monitor none \
	-device intel-iommu,intremap=on,caching-mode=on \
	-device edu,dma_mask=0xffffffffffff \
	-device edu,dma_mask=0xffffffffffff \
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
	-kernel "$kernel" -initrd "$initrd" \
	-append "console=ttyS0 intel_iommu=on panic=-1 quiet $*"
