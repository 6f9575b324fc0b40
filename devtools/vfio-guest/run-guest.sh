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
# Exit status: QEMU's, or 124 when the guest did not power off within TIMEOUT_S; 2 for bad
# arguments (fewer than three, an option, a TIMEOUT_S that is not a number of seconds), before
# QEMU starts.
set -eu
usage() {
	echo "usage: run-guest.sh VMLINUZ INITRD TIMEOUT_S [extra kernel parameters...]"
	echo "Boots the VFIO test guest under QEMU; exit status QEMU's, 124 on timeout, 2 for bad arguments."
}
bad_usage() {
	echo "run-guest: $*" >&2
	usage >&2
	exit 2
}
case ${1:-} in
-h | --help)
	usage
	exit 0
	;;
-*) bad_usage "unknown option '$1'" ;;
esac
[ $# -ge 3 ] || bad_usage "needs VMLINUZ, INITRD and TIMEOUT_S"
kernel=$1 initrd=$2 tmo=$3
shift 3
case $tmo in
'' | *[!0-9]* | 0*) bad_usage "TIMEOUT_S '$tmo' is not a number of seconds (1 or more)" ;;
esac
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
