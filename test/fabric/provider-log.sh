#!/usr/bin/env bash
# What the provider says in libfabric's log (suite 'fabric'):
#  - a provider whose libnicmr.so.0 cannot be loaded says why at FI_LOG_LEVEL=warn (the loader,
#    fabric/fi_loader.cpp): a libnicmr.so.0 that is not nicmr's, and a missing one;
#  - nicmr's own lines go through libfabric's log and follow FI_LOG_LEVEL: none at libfabric's
#    default level (whatever NICMR_LOG_LEVEL says), errors at warn, the device's info lines at
#    info and debug, and FI_LOG_SUBSYS filters them by subsystem;
#  - a vfio: or devx: device that cannot be opened is named with the native error.
#   provider-log.sh PROVIDER_DIR PROBE STUB_LIBRARY
# PROBE is test/fabric/fabric_log_probe (opens and closes a domain); STUB_LIBRARY a shared
# library that is not libnicmr.
set -euo pipefail
provdir=$1
probe=$2
stub=$3
# Only what each case sets: no library path that would find the build's libnicmr.so.
unset LD_LIBRARY_PATH FI_LOG_LEVEL FI_LOG_PROV FI_LOG_SUBSYS NICMR_LOG_LEVEL FI_NICMR_DEVICE
export FI_PROVIDER=nicmr
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
	echo "provider-log: $*" >&2
	if [ -s "$tmp/err" ]; then
		echo "--- its stderr:" >&2
		cat "$tmp/err" >&2
	fi
	exit 1
}
# run STATUS [VAR=VALUE...]: the probe with that environment; its stderr in $tmp/err.
run() {
	local want=$1 rc=0
	shift
	env "$@" "$probe" >"$tmp/out" 2>"$tmp/err" || rc=$?
	[ "$rc" -eq "$want" ] || fail "probe with $* exited $rc, expected $want ($(tr '\n' ' ' <"$tmp/out"))"
}
# One of libfabric's lines for provider nicmr: "libfabric:<pid>:<time>:<prefix>:nicmr:<subsys>:
# <function>():<line><<level>> <message>".
line_re() { # SUBSYS LEVEL MESSAGE-REGEX
	echo "^libfabric:[0-9]+:[0-9]+:[^:]*:nicmr:$1:[A-Za-z0-9_]+\(\):[0-9]+<$2> $3"
}

# ---- A provider whose libnicmr.so.0 cannot be loaded --------------------------------------
# Copies of the two modules in $tmp/prov; the provider proper looks for libnicmr.so.0 first
# where its run path's $ORIGIN entry points (in the build tree $ORIGIN/../api, the build's api/).
mkdir "$tmp/prov"
cp "$provdir/libnicmr-fi.so" "$provdir/libnicmr-fi-impl.so" "$tmp/prov/"
runpath=$(readelf -d "$tmp/prov/libnicmr-fi-impl.so" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
libdir=
IFS=: read -ra entries <<<"$runpath"
for e in "${entries[@]}"; do
	case "$e" in
	'$ORIGIN'/*) libdir="$tmp/prov/${e#'$ORIGIN'/}"; break ;;
	esac
done
[ -n "$libdir" ] || fail "the build's libnicmr-fi-impl.so has run path '$runpath', without an \$ORIGIN/ entry"
mkdir -p "$libdir"
impl="$tmp/prov/libnicmr-fi-impl.so"

# A libnicmr.so.0 that is not nicmr's: the loader names the module and the first nicmr symbol
# of version NICMR_0.1 that the library lacks.
cp "$stub" "$libdir/libnicmr.so.0"
run 1 FI_PROVIDER_PATH="$tmp/prov" FI_LOG_LEVEL=warn
grep -q '^fi_getinfo: -61$' "$tmp/out" || fail "fi_getinfo did not answer -FI_ENODATA"
grep -Eq "$(line_re core warn "cannot load $impl: $impl: undefined symbol: nicmr_[a-z_]+, version NICMR_0\.1$")" "$tmp/err" ||
	fail "no warning that names the foreign libnicmr.so.0's missing symbols"
# At libfabric's default level the same failure is silent, as every libfabric warning.
run 1 FI_PROVIDER_PATH="$tmp/prov"
[ ! -s "$tmp/err" ] || fail "a line at libfabric's default level"

# No libnicmr.so.0 at all (unless the system has one installed, which the loader would find).
rm "$libdir/libnicmr.so.0"
if ldconfig -p | grep -q 'libnicmr\.so\.0 '; then
	echo "provider-log: the system has a libnicmr.so.0 (ldconfig -p): missing-library case not run"
else
	run 1 FI_PROVIDER_PATH="$tmp/prov" FI_LOG_LEVEL=warn
	grep -Eq "$(line_re core warn "cannot load $impl: libnicmr\.so\.0: cannot open shared object file: No such file or directory$")" "$tmp/err" ||
		fail "no warning that names the missing libnicmr.so.0"
fi

# ---- nicmr's lines follow FI_LOG_LEVEL ----------------------------------------------------
export FI_PROVIDER_PATH="$provdir"
refused='api: emu ports=3: 1 or 2$'
opened='api: emu:mkeys=1024: open, 1024 keys'
pool='mem: pool mlx5-ctrl: '
# Default level: nothing, not even nicmr's error, and NICMR_LOG_LEVEL does not bring it back.
run 2 FI_NICMR_DEVICE=emu:ports=3
[ ! -s "$tmp/err" ] || fail "lines at libfabric's default level"
run 2 FI_NICMR_DEVICE=emu:ports=3 NICMR_LOG_LEVEL=debug
[ ! -s "$tmp/err" ] || fail "lines at libfabric's default level with NICMR_LOG_LEVEL=debug"
# warn: nicmr's error, as the provider's warning of the domain subsystem; no info lines.
run 2 FI_NICMR_DEVICE=emu:ports=3 FI_LOG_LEVEL=warn
grep -Eq "$(line_re domain warn "$refused")" "$tmp/err" || fail "no warning for the refused device"
run 0 FI_NICMR_DEVICE=emu:mkeys=1024 FI_LOG_LEVEL=warn
! grep -E ':nicmr:[a-z_]+:.*<info>' "$tmp/err" || fail "info lines at FI_LOG_LEVEL=warn"
# info and debug: the device's info lines (domain: the API's; mr: the memory's).
for level in info debug; do
	run 0 FI_NICMR_DEVICE=emu:mkeys=1024 FI_LOG_LEVEL=$level
	grep -Eq "$(line_re domain info "$opened")" "$tmp/err" ||
		fail "no info line for the opened device at FI_LOG_LEVEL=$level"
	grep -Eq "$(line_re mr info "$pool")" "$tmp/err" ||
		fail "no info line for the device's pool at FI_LOG_LEVEL=$level"
done
# FI_LOG_SUBSYS keeps one subsystem's lines.
run 0 FI_NICMR_DEVICE=emu:mkeys=1024 FI_LOG_LEVEL=info FI_LOG_SUBSYS=mr
grep -Eq "$(line_re mr info "$pool")" "$tmp/err" || fail "no mr line with FI_LOG_SUBSYS=mr"
! grep -Eq "$(line_re domain info "$opened")" "$tmp/err" || fail "a domain line with FI_LOG_SUBSYS=mr"
# Devices of the machine: fi_getinfo opens the device to ask its attributes; one that cannot be
# opened is -FI_ENODATA with the native error (the API's line, then the provider's), and a spec
# that names no kind of device is refused before anything is opened.
run 1 FI_NICMR_DEVICE=vfio:0000:ff:1f.7 FI_LOG_LEVEL=warn
grep -q '^fi_getinfo: -61$' "$tmp/out" || fail "vfio: fi_getinfo did not answer -FI_ENODATA"
grep -Eq "$(line_re domain warn 'api: vfio:0000:ff:1f\.7: ')" "$tmp/err" ||
	fail "no warning of the API for the vfio device that cannot be opened"
grep -Eq "$(line_re core warn 'FI_NICMR_DEVICE=vfio:0000:ff:1f\.7: the device cannot be opened: -[0-9]+$')" "$tmp/err" ||
	fail "no warning of the provider for the vfio device that cannot be opened"
run 1 FI_NICMR_DEVICE=devx:nicmr_none FI_LOG_LEVEL=warn
grep -Eq "$(line_re core warn 'FI_NICMR_DEVICE=devx:nicmr_none: the device cannot be opened: -[0-9]+$')" "$tmp/err" ||
	fail "no warning for the devx device that cannot be opened"
run 1 FI_NICMR_DEVICE=ib0 FI_LOG_LEVEL=warn
grep -Eq "$(line_re core warn 'FI_NICMR_DEVICE=ib0: not a device spec ')" "$tmp/err" ||
	fail "no warning for a spec of no kind"
! grep -q 'api:' "$tmp/err" || fail "a spec of no kind reached the API"
echo "provider-log: load failures named at warn; nicmr's lines follow FI_LOG_LEVEL and FI_LOG_SUBSYS; devices that cannot be opened named"

