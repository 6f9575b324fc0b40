# SPDX-License-Identifier: BSD-3-Clause
#
# What the QEMU test guests' /init scripts share (devtools/vfio-guest/init.sh and
# devtools/rxe-guest/init.sh source it; mkinitramfs.py puts it in every image as
# /guest-lib.sh): the busybox setup, the RESULT protocol the host reads on the serial console,
# module loading and the host's root over 9p.

/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev

# The firmware leaves terminal escapes on the first line: start the results on a fresh one.
echo
result() { echo "RESULT $*"; }
finish() {
	echo "NICMR-GUEST-DONE"
	sync
	poweroff -f
}

# module_args NAME: the parameters insmod gives module NAME; an init may redefine it.
module_args() { :; }

# Loads /modules.order's modules in order; RESULT guest-modules.
load_modules() {
	ok=1
	for m in $(cat /modules.order); do
		# shellcheck disable=SC2046 # the arguments are words
		if ! insmod /modules/$m.ko $(module_args "$m"); then
			echo "init: insmod $m failed"
			ok=0
		fi
	done
	[ $ok = 1 ] && result guest-modules PASS || result guest-modules FAIL "insmod failed"
}

# Mounts the host's root (shared read-only over 9p) at /hostroot with proc, sys and dev inside;
# RESULT guest-hostroot, and the end of the run when it cannot be had.
mount_hostroot() {
	if ! mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /hostroot; then
		result guest-hostroot FAIL "9p mount of the host root failed"
		finish
	fi
	result guest-hostroot PASS
	mount -t proc proc /hostroot/proc
	mount -t sysfs sys /hostroot/sys
	mount -t devtmpfs dev /hostroot/dev
}

# run CMD...: a program of the host's tree, with a clean environment.
run() { chroot /hostroot /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp "$@"; }
