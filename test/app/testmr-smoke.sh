#!/usr/bin/env bash
# testmr as a user runs it: the demo, commands from -c and from a file, and a bad command that
# must make it exit 1 with the reason.
#   testmr-smoke.sh TESTMR reg|noreg provider|noprovider
# (what the build has: the native API's registration demo, the libfabric provider)
set -euo pipefail
testmr=$1
reg=${2:?reg or noreg}
provider=${3:?provider or noprovider}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$testmr" --pool-size 8M >"$out"
grep -q '^-- the emulated ConnectX, brought up by the mlx5 driver' "$out"
grep -Eq 'pool "testmr-0": 8 MiB = (4 x 2 MiB|2048 x 4 KiB) pages' "$out"
grep -Eq 'VA 0x[0-9a-f]+ -> IOVA 0x[0-9a-f]+' "$out"
# The data path: verified RDMA between the ports, and the device refusing a revoked key.
grep -q '^  B equals A: yes' "$out"
grep -q '^RDMA WRITE through the revoked key .*CQE opcode 13 syndrome 0x13' "$out"
grep -q '^  responder event: type 0x11' "$out"
grep -q '^data path demo: all steps as expected' "$out"
no_surprise() {
	if grep -q 'UNEXPECTED' "$out"; then
		grep 'UNEXPECTED' "$out" >&2
		echo "testmr smoke: a demo step did not go as expected" >&2
		exit 1
	fi
}
# Registration through the native API: keys, raw keys, lookups, refusals with their codes.
if [ "$reg" = reg ]; then
	no_surprise
	grep -q '^-- memory registration through nicmr.s native API' "$out"
	grep -Eq '^  key of A: 0x[0-9a-f]{8} \(mkey index [0-9]+, variant 0x[0-9a-f]{2}\), fast' "$out"
	grep -q 'slow (pinned) path' "$out"
	grep -Eq '^    mapped key 0x[0-9a-f]{8} \(the same as A.s\)' "$out"
	grep -Eq '^  lookup A.s key after its deregistration returned +-> -ENOKEY' "$out"
	grep -Eq '^  key lookup \(lockless\) +[0-9.]+ ns' "$out"
fi
# The same demo through libfabric's fi_mr calls on the provider.
if [ "$provider" = provider ]; then
	"$testmr" --pool-size 8M --provider >"$out"
	no_surprise
	grep -q '^  fi_getinfo(prov_name nicmr) .*-> 0' "$out"
	grep -q '^  A: fast (pool) path; C: slow (pinned) path' "$out"
	grep -q '^  fi_mr_raw_attr with no room (asks the size) .*-> -FI_ETOOSMALL' "$out"
	grep -Eq '^  libfabric / native, 4 KiB in the pool: [0-9.]+x' "$out"
fi

printf 'pool create 4m page 4k\nshow pool 0\ntranslate 0 0x10\npool destroy 0\nshow pools\n' \
	| "$testmr" -i >"$out"
grep -q 'pool "testmr-0": 4 MiB = 1024 x 4 KiB pages' "$out"
grep -q 'pool 0 + 0x10: VA' "$out"
grep -q '^pool 0 destroyed' "$out"
grep -q '^no pools' "$out"

# The device: a PD, an mkey over pool bytes, its query, and the PD refused while the mkey lives.
"$testmr" -c 'pool create 4m' -c 'pd alloc' -c 'mkey create 0 0x1000 8k access lr,rr' \
	-c 'mkey query 1' -c 'show device' >"$out"
grep -q '^PD 1 allocated' "$out"
grep -q '^mkey index 1: MTT, access lr,rr, PD 1' "$out"
grep -q 'in use: 1 PDs, 1 mkeys (the device counts 1 PDs, 1 mkeys)' "$out"
if "$testmr" -c 'pool create 4m' -c 'pd alloc' -c 'mkey create 0 0 4k' -c 'pd free 1' >"$out"; then
	echo "freeing a PD that an mkey uses must fail" >&2
	exit 1
fi
grep -q '^error: PD 1 is used by mkey index 1' "$out"

if "$testmr" -c 'pool destroy 7' >"$out"; then
	echo "a failed command must make testmr exit non-zero" >&2
	exit 1
fi
grep -q '^error: no pool 7' "$out"
echo "testmr smoke: ok"
