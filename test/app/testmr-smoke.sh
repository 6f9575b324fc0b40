#!/usr/bin/env bash
# testmr as a user runs it: the demo, commands from -c, from a file and from standard input, and
# its exit status on every path (doc/testmr.md): 0 when every command succeeded, 1 when one
# failed (with the reason), 2 for a bad option or value (before the device opens).
#   testmr-smoke.sh TESTMR reg|noreg provider|noprovider
# (what the build has: the native API's registration demo, the libfabric provider)
set -euo pipefail
testmr=$1
reg=${2:?reg or noreg}
provider=${3:?provider or noprovider}
out=$(mktemp)
err=$(mktemp)
cmds=$(mktemp)
trap 'rm -f "$out" "$err" "$cmds"' EXIT

# expect_status CODE ARGS...: runs testmr (standard input: this script's) and checks its exact
# exit status; stdout goes to $out, stderr to $err.
expect_status() {
	local want=$1 got=0
	shift
	"$testmr" "$@" >"$out" 2>"$err" || got=$?
	if [ "$got" -ne "$want" ]; then
		echo "testmr $*: exit status $got, expected $want" >&2
		cat "$out" "$err" >&2
		exit 1
	fi
}

# Bad options and values: status 2, a message naming them, and no device opened.
usage_error() {
	local pattern=$1
	shift
	expect_status 2 "$@"
	if ! grep -q -- "$pattern" "$err"; then
		echo "testmr $*: the message does not say '$pattern':" >&2
		cat "$err" >&2
		exit 1
	fi
	if grep -q '^testmr (nicmr' "$out"; then
		echo "testmr $*: opened the device before refusing its options" >&2
		exit 1
	fi
}
usage_error "--page-size takes 4k, 2m or 1g, not '3m'" --page-size 3m
usage_error "--page-size takes 4k, 2m or 1g, not '2'" --page-size 2
usage_error "--pool-size takes a size above 0" --pool-size 0
usage_error "not '64q'" --pool-size 64q
usage_error "--pool-size 18446744073709551615 is too large" --pool-size 0xffffffffffffffff
usage_error "--node takes a NUMA node of this machine" --node 1024
usage_error "not 'x'" --node x
usage_error "not '-1'" --node -1
usage_error "--delivery takes inline or thread, not 'fast'" --delivery fast
usage_error "unrecognized option '--bogus'" --bogus
usage_error "option '--pool-size' requires an argument" --pool-size
usage_error "invalid option -- 'z'" -z
usage_error "unexpected argument 'extra'" -c help extra
usage_error "cannot read -f /nonexistent/cmds" -f /nonexistent/cmds -c help
usage_error "--provider" --provider -c help
if [ "$reg" = reg ]; then
	usage_error "--engine takes a device spec (emu, emu:mkeys=4096), not ''" --engine '' -c help
else
	usage_error "--engine: built without the native API (DPDK)" --engine emu -c help
fi
expect_status 0 --help
grep -q '^usage: testmr' "$out"
grep -q '^Exit status: 0 when every command succeeded, 1 when one failed, 2 for bad' "$out"

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
# The device chooses the index: the model's first is 4 (doc/device-model.md, "mkey indices").
"$testmr" -c 'pool create 4m' -c 'pd alloc' -c 'mkey create 0 0x1000 8k access lr,rr' \
	-c 'mkey query 4' -c 'show device' >"$out"
grep -q '^PD 1 allocated' "$out"
grep -q '^mkey index 4: MTT, access lr,rr, PD 1' "$out"
grep -q 'in use: 1 PDs, 1 mkeys (the device counts 1 PDs, 1 mkeys)' "$out"
# Bring-up asked for host-endian atomics, and the device line says that mode is in force.
grep -q 'atomics: yes (host byte order)' "$out"
if "$testmr" -c 'pool create 4m' -c 'pd alloc' -c 'mkey create 0 0 4k' -c 'pd free 1' >"$out"; then
	echo "freeing a PD that an mkey uses must fail" >&2
	exit 1
fi
grep -q '^error: PD 1 is used by mkey index 4' "$out"

expect_status 1 -c 'pool destroy 7'
grep -q '^error: no pool 7' "$out"
# A failed command does not stop the ones after it, and the status stays 1.
expect_status 1 -c 'pool destroy 7' -c 'pool create 4m'
grep -q 'pool "testmr-0": 4 MiB' "$out"
# `quit` leaves: nothing after it runs.
expect_status 0 -c quit -c 'pool destroy 7'
if grep -q 'error:' "$out"; then
	echo "a command after quit ran" >&2
	exit 1
fi

# Standard input (-i, not a terminal here) and files (-f): the same rule as -c.
printf 'pool destroy 7\nbogus\n' | expect_status 1 -i
grep -q '^error: no pool 7' "$out"
grep -q "^error: unknown command 'bogus'" "$out"
printf 'pool create 4m\n# a comment\n\nshow pools\n' | expect_status 0 -i
printf 'pool create 4m page 3m\n' | expect_status 1 -i
grep -q '^error: page: expected 4k, 2m or 1g' "$out"
printf 'pool create 4m\nshow pool 0\n' >"$cmds"
expect_status 0 -f "$cmds"
# A command file is a script: its first failed line stops testmr (status 1), and is repeated on
# standard error as FILE:LINE: <line>: <error>; nothing after it runs, -i neither.
printf 'pool create 4m\nmkey query 99\nshow pool 0\n' >"$cmds"
printf 'show pools\n' | expect_status 1 -f "$cmds" -i
grep -q '^error: QUERY_MKEY 99' "$out"
grep -qx "$cmds:2: mkey query 99: QUERY_MKEY 99: Invalid argument (status 0x9, syndrome 0xe000053)" "$err"
# The pool was shown once (by pool create): neither line 3 nor -i's 'show pools' ran.
[ "$(grep -c '^\[0\] pool "testmr-0"' "$out")" -eq 1 ]
# A parse error names its line the same way.
printf '# setup\n\npool create 4m page 3m\n' >"$cmds"
expect_status 1 -f "$cmds"
grep -qx "$cmds:3: pool create 4m page 3m: page: expected 4k, 2m or 1g" "$err"
echo "testmr smoke: ok"
