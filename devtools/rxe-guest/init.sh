#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
#
# /init of the soft-RoCE guest (busybox), built by devtools/vfio-guest/mkinitramfs.py with
# --init pointing here. It loads the modules in /modules.order, mounts the host's root (shared
# read-only over 9p) at /hostroot, gives eth0 (virtio-net, on the host's tap) an address, makes
# rdma_rxe's device rxe0 on it and runs rdma-core's ibv_rc_pingpong from the host's tree against a
# peer on the host side of the tap: first as the client, then as the server. Everything the host checks is a
# "RESULT <name> PASS|FAIL [detail]" line on the serial console; "NICMR-GUEST-DONE" ends it.
#
# Kernel command line parameters read here:
#   nicmr.ip=A.B.C.D/N   eth0's address (default 10.77.0.2/24)
#   nicmr.peer=A.B.C.D   the host side's address, the client's server (default 10.77.0.1)
#   nicmr.size=BYTES     ibv_rc_pingpong -s (default 4096)
#   nicmr.iters=N        ibv_rc_pingpong -n (default 20)
#   nicmr.mtu=BYTES      ibv_rc_pingpong -m (default 1024)

. /guest-lib.sh

ip_addr=10.77.0.2/24
peer=10.77.0.1
size=4096
iters=20
mtu=1024
for word in $(cat /proc/cmdline); do
	case "$word" in
	nicmr.ip=*) ip_addr=${word#nicmr.ip=} ;;
	nicmr.peer=*) peer=${word#nicmr.peer=} ;;
	nicmr.size=*) size=${word#nicmr.size=} ;;
	nicmr.iters=*) iters=${word#nicmr.iters=} ;;
	nicmr.mtu=*) mtu=${word#nicmr.mtu=} ;;
	esac
done

load_modules
mount_hostroot
mount -t tmpfs tmp /hostroot/tmp

ip link set lo up
ip link set eth0 up
if ip addr add "$ip_addr" dev eth0; then
	result guest-net PASS "eth0 $ip_addr"
else
	result guest-net FAIL "ip addr add $ip_addr dev eth0"
	finish
fi

# rdma_rxe's crc32 comes from crc32_generic, which its modinfo does not name (the module list
# of run_rxe_test.py loads it): without it "rdma link add" fails to init the crc32 algorithm.
if run rdma link add rxe0 type rxe netdev eth0; then
	gid=$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null)
	result rxe-link PASS "rxe0 on eth0, GID 1 $gid"
else
	result rxe-link FAIL "rdma link add rxe0 type rxe netdev eth0"
	finish
fi

# Event mode (-e): on one emulated CPU a busy-polling process starves rxe's own work.
opts="-d rxe0 -g 1 -e -s $size -n $iters -m $mtu"
echo "init: ibv_rc_pingpong $opts $peer"
if run ibv_rc_pingpong $opts "$peer"; then
	result rc-pingpong-client PASS "$iters rounds of $size bytes"
else
	result rc-pingpong-client FAIL "ibv_rc_pingpong (client) exit status $?"
fi
echo "init: ibv_rc_pingpong $opts"
if run ibv_rc_pingpong $opts; then
	result rc-pingpong-server PASS "$iters rounds of $size bytes"
else
	result rc-pingpong-server FAIL "ibv_rc_pingpong (server) exit status $?"
fi
counters=
for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
	[ -f "$f" ] && counters="$counters ${f##*/}=$(cat "$f")"
done
echo "RXE-COUNTERS$counters"
finish
