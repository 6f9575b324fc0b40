#!/usr/bin/env bash
# devtools/lib.sh's hugepage decisions against fake sysfs trees: which sizes test.sh requires
# (hugepage_requirement), and the reservation reserve_hugepages asks for.
#   test_lib_hugepages.sh PATH/TO/devtools/lib.sh
set -uo pipefail
. "$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

expect() { # expect NAME WANTED GOT
	if [ "$2" = "$3" ]; then
		echo "ok   $1"
	else
		echo "FAIL $1: wanted '$2', got '$3'"
		failures=$((failures + 1))
	fi
}

# size KB NR FREE: a page size the fake kernel offers.
size() {
	mkdir -p "$NICMR_HUGEPAGES_SYSFS/hugepages-$1kB"
	echo "$2" >"$NICMR_HUGEPAGES_SYSFS/hugepages-$1kB/nr_hugepages"
	echo "$3" >"$NICMR_HUGEPAGES_SYSFS/hugepages-$1kB/free_hugepages"
}

fresh() {
	NICMR_HUGEPAGES_SYSFS="$tmp/$1"
	mkdir -p "$NICMR_HUGEPAGES_SYSFS"
}

fresh no-gig
size 2048 1100 1100
expect "2 MiB reserved, kernel without 1 GiB pages" "2M" \
	"$(hugepage_requirement 2048:1024 1048576:1)"

fresh both
size 2048 1100 1100
size 1048576 1 1
expect "2 MiB and 1 GiB reserved" "2M,1G" "$(hugepage_requirement 2048:1024 1048576:1)"

fresh gig-taken
size 2048 1100 1100
size 1048576 1 0
expect "1 GiB offered but none free" "2M" "$(hugepage_requirement 2048:1024 1048576:1)"

fresh few-2m
size 2048 10 10
size 1048576 1 1
expect "too few 2 MiB pages" "1G" "$(hugepage_requirement 2048:1024 1048576:1)"

fresh none
expect "no hugepages at all" "" "$(hugepage_requirement 2048:1024 1048576:1)"

# reserve_hugepages: a kernel without the size says so and changes nothing.
fresh no-gig-reserve
size 2048 1100 1100
out=$(reserve_hugepages 1048576 1)
expect "reserve of a size the kernel lacks" "    1 GiB hugepages: not supported by this kernel" \
	"$out"

# The reservation it writes (and, when that is not enough, the one it suggests) is what the
# system holds plus what is missing: 1100 reserved, 10 free, 32 wanted -> 1122, never 32.
fresh taken
size 2048 1100 10
out=$(reserve_hugepages 2048 32)
if [ "$(id -u)" -eq 0 ]; then
	expect "nr_hugepages written" "1122" "$(cat "$NICMR_HUGEPAGES_SYSFS/hugepages-2048kB/nr_hugepages")"
fi
case "$out" in
*"echo 1122 > $NICMR_HUGEPAGES_SYSFS/hugepages-2048kB/nr_hugepages"*) expect "suggested total" 1 1 ;;
*) expect "suggested total" "echo 1122 > .../nr_hugepages" "$out" ;;
esac

fresh enough
size 2048 1100 1100
expect "enough free: nothing to do" "    2 MiB hugepages: 1100 free (wanted 64)" \
	"$(reserve_hugepages 2048 64)"

if [ "$failures" -ne 0 ]; then
	echo "$failures failed"
	exit 1
fi
