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
#   nicmr.dev=A.B.C.D    testmr's address (the device model's port) on the host side; with it,
#                        after the peer's rounds: ibv_rc_pingpong as client and as server
#                        against testmr, then the one-sided step (rxe-rdma-peer)
#   nicmr.rdma=PATH,SIZE rxe-rdma-peer (a path in the host's tree) and the bytes each RDMA
#                        moves (the MRs cross in testmr's exchange)
#   nicmr.timeout=S      rxe-rdma-peer's timeout for each step (default 60)
#   nicmr.devport=PORT   the TCP port of testmr's exchanges (default 18516)

. /guest-lib.sh

ip_addr=10.77.0.2/24
peer=10.77.0.1
size=4096
iters=20
mtu=1024
dev=
rdma=
timeout=60
devport=18516
for word in $(cat /proc/cmdline); do
	case "$word" in
	nicmr.ip=*) ip_addr=${word#nicmr.ip=} ;;
	nicmr.peer=*) peer=${word#nicmr.peer=} ;;
	nicmr.size=*) size=${word#nicmr.size=} ;;
	nicmr.iters=*) iters=${word#nicmr.iters=} ;;
	nicmr.mtu=*) mtu=${word#nicmr.mtu=} ;;
	nicmr.dev=*) dev=${word#nicmr.dev=} ;;
	nicmr.rdma=*) rdma=${word#nicmr.rdma=} ;;
	nicmr.timeout=*) timeout=${word#nicmr.timeout=} ;;
	nicmr.devport=*) devport=${word#nicmr.devport=} ;;
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
if [ -n "$dev" ]; then
	# The same rounds against the device model itself (testmr's qp pingpong on the host side:
	# it checks every echo), first as its client, then as its server.
	echo "init: ibv_rc_pingpong $opts -p $devport $dev (testmr)"
	if run ibv_rc_pingpong $opts -p "$devport" "$dev"; then
		result nicmr-pingpong-client PASS "$iters rounds of $size bytes with testmr"
	else
		result nicmr-pingpong-client FAIL "ibv_rc_pingpong (client of testmr) exit status $?"
	fi
	echo "init: ibv_rc_pingpong $opts -p $devport (testmr connects)"
	if run ibv_rc_pingpong $opts -p "$devport"; then
		result nicmr-pingpong-server PASS "$iters rounds of $size bytes with testmr"
	else
		result nicmr-pingpong-server FAIL "ibv_rc_pingpong (server for testmr) exit status $?"
	fi
	# RDMA WRITE and READ both ways and a stale rkey (test/rxe/rxe_rdma_peer.c).
	old_ifs=$IFS
	IFS=,
	# shellcheck disable=SC2086 # split at the commas
	set -- $rdma
	IFS=$old_ifs
	echo "init: rxe-rdma-peer rxe0 1 $dev $devport $2 $timeout"
	run "$1" rxe0 1 "$dev" "$devport" "$2" "$timeout" ||
		result rdma-peer FAIL "rxe-rdma-peer exit status $?"
fi
counters=
for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
	[ -f "$f" ] && counters="$counters ${f##*/}=$(cat "$f")"
done
echo "RXE-COUNTERS$counters"
finish
