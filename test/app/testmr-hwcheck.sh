#!/usr/bin/env bash
# testmr hw-check against the emulated device (doc/testmr.md, "hw-check"): every step passes
# on a good device (exit 0); a device that refuses one command stops the check at the step that
# sent it, with the command, its status and its syndrome (exit 1); a device that cannot open
# fails step 1 (exit 1); misuse of the mode is a usage error (exit 2, before any device opens).
#   testmr-hwcheck.sh TESTMR reg|noreg   (whether the build has the native API, hence hw-check)
set -euo pipefail
testmr=$1
reg=${2:?reg or noreg}
out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

fail() {
	echo "testmr-hwcheck: $*" >&2
	echo "--- stdout" >&2
	cat "$out" >&2
	echo "--- stderr" >&2
	cat "$err" >&2
	exit 1
}

# run WANT ARGS...: runs testmr, checks its exact exit status.
run() {
	local want=$1 got=0
	shift
	"$testmr" "$@" >"$out" 2>"$err" || got=$?
	[ "$got" -eq "$want" ] || fail "testmr $*: exit status $got, expected $want"
}
# says PATTERN: stdout has a line matching the extended regular expression.
says() { grep -Eq -- "$1" "$out" || fail "stdout does not say '$1'"; }
says_not() { ! grep -Eq -- "$1" "$out" || fail "stdout says '$1'"; }

if [ "$reg" != reg ]; then
	run 2 hw-check
	grep -q "hw-check: built without the native API" "$err" || fail "no reason given"
	exit 0
fi

# Misuse: exit 2, no device opened.
run 2 --device emu
grep -q -- "--device is hw-check's option" "$err" || fail "--device alone: no reason"
run 2 hw-check -c help
grep -q "hw-check runs alone" "$err" || fail "hw-check -c: no reason"
run 2 hw-check --device ''
grep -q -- "--device takes a device spec" "$err" || fail "empty --device: no reason"
run 2 hw-check extra
grep -q "unexpected argument 'extra'" "$err" || fail "extra word: no reason"
says_not '^testmr \(nicmr'

# A good device: nine steps, each PASS, in order.
run 0 hw-check
says '^hw-check: device emu$'
n=1
for step in open pd mkeys pool cq qp register write teardown; do
	says "^\[$n/9\] $step +\.\.\. PASS \("
	n=$((n + 1))
done
says '^\[8/9\] write +\.\.\. PASS \(4096 bytes, checked byte for byte\)$'
says '^hw-check: PASS \(9 steps\)$'
says_not 'FAIL'

# QUERY_QP refused (fault injection, EmuConfig::fail_opcode): step 6 fails with the command,
# its status and its syndrome; nothing after it runs.
run 1 hw-check --device emu:fail_opcode=0x50b
for n in 1 2 3 4 5; do says "^\[$n/9\] .* PASS \("; done
says '^\[6/9\] qp +\.\.\. FAIL: nicmr_qp_state returned -5 \(Input/output error\)$'
says '^      logged: mlx5: emu:[0-9]+: QUERY_QP \(0x50b\) op_mod 0x0: status INTERNAL_ERR \(0x1\) syndrome 0x0e0000f0$'
says '^hw-check: FAIL at step 6 \(qp\); the steps after it did not run$'
says_not '^\[7/9\]'

# INIT_HCA refused: bring-up, step 1.
run 1 hw-check --device emu:fail_opcode=0x102
says '^\[1/9\] open +\.\.\. FAIL: nicmr_device_open returned -5 \(Input/output error\)$'
says 'INIT_HCA \(0x102\) op_mod 0x0: status INTERNAL_ERR \(0x1\) syndrome 0x0e0000f0'
says '^hw-check: FAIL at step 1 \(open\)'
says_not '^\[2/9\]'

# A device that is not there: step 1, with the open's error.
run 1 hw-check --device emu:color=red
says '^\[1/9\] open +\.\.\. FAIL: nicmr_device_open returned -22 \(Invalid argument\)$'
says "logged: api: unknown emu option 'color'"
says_not '^\[2/9\]'
echo "testmr-hwcheck: ok"
