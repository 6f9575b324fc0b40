#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
#
# /init of the VFIO guest (busybox). It loads the modules mkinitramfs.py put in /modules, mounts
# the host's root (shared read-only over 9p) at /hostroot, binds QEMU's edu device to vfio-pci
# with the project's devtools/nicmr-devbind and runs the project's guest test binary inside the
# host root. Everything the host checks is a "RESULT <name> PASS|FAIL [detail]" line on the
# serial console; "NICMR-GUEST-DONE" marks the end.
#
# Kernel command line parameters read here:
#   nicmr.test=PATH      the guest test binary (a path in the host's tree)
#   nicmr.devbind=PATH   devtools/nicmr-devbind in the host's tree
#   nicmr.hugepages=N    2 MiB hugepages to reserve (default 64)
#   nicmr.dma_limit=N    vfio_iommu_type1 dma_entry_limit (default 256)
#   nicmr.bench=PATH     a benchmark program to run after the test (prints BENCH lines)
#   nicmr.fiprobe=PATH   a libfabric program (test/fabric/fabric_log_probe) to run with the
#                        provider on the edu device
#   nicmr.fiprov=DIR     the provider's directory (FI_PROVIDER_PATH) for it

. /guest-lib.sh

test_bin=
devbind=
hugepages=64
dma_limit=256
bench=
fiprobe=
fiprov=
for word in $(cat /proc/cmdline); do
	case "$word" in
	nicmr.test=*) test_bin=${word#nicmr.test=} ;;
	nicmr.devbind=*) devbind=${word#nicmr.devbind=} ;;
	nicmr.hugepages=*) hugepages=${word#nicmr.hugepages=} ;;
	nicmr.dma_limit=*) dma_limit=${word#nicmr.dma_limit=} ;;
	nicmr.bench=*) bench=${word#nicmr.bench=} ;;
	nicmr.fiprobe=*) fiprobe=${word#nicmr.fiprobe=} ;;
	nicmr.fiprov=*) fiprov=${word#nicmr.fiprov=} ;;
	esac
done

# A low mapping limit lets the guest test reach it (-ENOSPC) with a few hundred maps.
module_args() { [ "$1" = vfio_iommu_type1 ] && echo "dma_entry_limit=$dma_limit"; }
load_modules
mount_hostroot
# The guest writes to a tmpfs /tmp, not to the host's. A checkout under the host's /tmp (a CI
# clone may be there) stays visible: its top folder is bound back in over the tmpfs.
mkdir -p /hosttmp
mount -o bind /hostroot/tmp /hosttmp
mount -t tmpfs tmp /hostroot/tmp
for p in "$test_bin" "$devbind" "$bench" "$fiprobe" "$fiprov"; do
	case "$p" in
	/tmp/?*)
		top=${p#/tmp/}
		top=${top%%/*}
		if [ ! -d "/hostroot/tmp/$top" ]; then
			mkdir -p "/hostroot/tmp/$top"
			mount -o bind "/hosttmp/$top" "/hostroot/tmp/$top"
		fi
		;;
	esac
done
[ -d /hostroot/dev/hugepages ] && mount -t hugetlbfs none /hostroot/dev/hugepages
echo "$hugepages" >/proc/sys/vm/nr_hugepages
echo "init: hugepages 2M reserved: $(cat /proc/sys/vm/nr_hugepages)"

grep -q . /sys/class/iommu/*/devices/* 2>/dev/null
if ls /sys/kernel/iommu_groups/ | grep -q .; then
	result guest-iommu PASS "$(ls /sys/kernel/iommu_groups | wc -l) groups"
else
	result guest-iommu FAIL "no IOMMU groups (intel_iommu=on missing?)"
fi

# Every edu function: the first is the test's device, a second one shares its container.
edus=
for d in /sys/bus/pci/devices/*; do
	if [ "$(cat $d/vendor)" = 0x1234 ] && [ "$(cat $d/device)" = 0x11e8 ]; then
		edus="$edus ${d##*/}"
	fi
done
edus=${edus# }
edu=${edus%% *}
if [ -z "$edu" ]; then
	result edu-present FAIL "no 1234:11e8 on the PCI bus"
	finish
fi
result edu-present PASS "$edus"

if [ -n "$devbind" ]; then
	run python3 "$devbind" --status
	bound=0
	for e in $edus; do
		run python3 "$devbind" --bind vfio-pci "$e" &&
			[ "$(basename "$(readlink /sys/bus/pci/devices/$e/driver)")" = vfio-pci ] &&
			bound=$((bound + 1))
	done
	if [ "$bound" = "$(echo $edus | wc -w)" ]; then
		result devbind-vfio-pci PASS "$edus"
	else
		result devbind-vfio-pci FAIL "$bound of $edus bound to vfio-pci"
	fi
fi

if [ -n "$test_bin" ]; then
	dmesg -c >/dev/null
	run "$test_bin" $edus
	status=$?
	# Non-zero also when a sanitizer in an instrumented build reported at exit.
	[ $status = 0 ] && result guest-test-exit PASS || result guest-test-exit FAIL "status $status"
	# The IOMMU refuses the DMA that follows an unmap and the kernel logs it as a DMAR fault.
	faults=$(dmesg | grep -c 'DMAR: \[DMA \(Read\|Write\)')
	dmesg | grep 'DMAR' | head -n 8
	if [ "$faults" -gt 0 ]; then
		result dmar-fault-logged PASS "$faults fault lines"
	else
		result dmar-fault-logged FAIL "no DMAR fault in dmesg"
	fi
fi
if [ -n "$fiprobe" ]; then
	# The provider through the system libfabric with FI_NICMR_DEVICE naming the edu: fi_getinfo
	# opens the device over VFIO to ask its attributes, the driver refuses it (not a ConnectX),
	# fi_getinfo answers -FI_ENODATA and the log names the device and why.
	out=$(run env FI_PROVIDER=nicmr FI_PROVIDER_PATH="$fiprov" FI_NICMR_DEVICE="vfio:$edu" \
		FI_LOG_LEVEL=warn "$fiprobe" 2>&1)
	echo "$out" | grep ':nicmr:'
	if echo "$out" | grep -q '^fi_getinfo: -61$' &&
		echo "$out" | grep -q "nicmr:.*vfio:$edu.*not a ConnectX" &&
		echo "$out" | grep -q "nicmr:core:.*FI_NICMR_DEVICE=vfio:$edu: the device cannot be opened: -19"; then
		result fabric-vfio-refuses-edu PASS
	else
		result fabric-vfio-refuses-edu FAIL "$(echo "$out" | tail -n 3 | tr '\n' ' ')"
	fi
fi
if [ -n "$bench" ]; then
	echo "init: running $bench"
	run env NICMR_VFIO_DEVICE="$edu" "$bench" --benchmark_color=false
	echo "init: bench exit status $?"
fi
finish
