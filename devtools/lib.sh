# shellcheck shell=bash
# Shared by the devtools scripts: phases with timings, Debian packages, hugepages.
# Sourced, never run. Every function prints what it does; running it twice is harmless.

NICMR_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NICMR_T0=$(date +%s)
_phase_name=""
_phase_t0=0

phase() {
	phase_end
	_phase_name="$*"
	_phase_t0=$(date +%s)
	printf '\n==> %s\n' "$*"
}

phase_end() {
	if [ -n "$_phase_name" ]; then
		printf '    (%s: %ds)\n' "$_phase_name" $(($(date +%s) - _phase_t0))
		_phase_name=""
	fi
}

total_time() {
	phase_end
	printf '\nTotal: %ds\n' $(($(date +%s) - NICMR_T0))
}

as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		return 1
	fi
}

# Debian packages the build needs, and those the tests add (sanitizer runtimes, fuzzing, the
# QEMU guest that proves VFIO, scapy for the RoCEv2 packets, dpdk-dev for DPDK's telemetry client
# dpdk-telemetry.py, which Debian ships there and not in the package dpdk).
NICMR_BUILD_PACKAGES="meson ninja-build pkg-config g++ libhugetlbfs-dev libnuma-dev libdpdk-dev
 libfabric-dev libfabric-bin libibverbs-dev ibverbs-providers liburcu-dev googletest libgtest-dev
 libgmock-dev libbenchmark-dev zlib1g-dev libisal-dev"
NICMR_TEST_PACKAGES="clang libclang-rt-14-dev clang-format clang-tidy qemu-system-x86
 busybox-static cpio kmod python3-scapy dpdk-dev ibverbs-utils tshark openmpi-bin libopenmpi-dev"

# install_packages PKG...: installs the ones not yet installed.
install_packages() {
	local missing=()
	local p
	for p in "$@"; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("$p")
		fi
	done
	if [ ${#missing[@]} -eq 0 ]; then
		echo "    all $# packages already installed"
		return 0
	fi
	echo "    installing: ${missing[*]}"
	if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq; then
		echo "    apt-get update failed: need root (or sudo) and Debian's package registry" >&2
		return 1
	fi
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"${missing[@]}" >/dev/null
}

# Where the kernel shows its hugepage sizes (a test points it at a fake tree).
NICMR_HUGEPAGES_SYSFS=${NICMR_HUGEPAGES_SYSFS:-/sys/kernel/mm/hugepages}

# free_hugepages SIZE_KB
free_hugepages() {
	local f="$NICMR_HUGEPAGES_SYSFS/hugepages-$1kB/free_hugepages"
	if [ -r "$f" ]; then cat "$f"; else echo 0; fi
}

# hugepage_requirement SIZE_KB:WANT...: the value of NICMR_REQUIRE_HUGEPAGES for the sizes
# the kernel offers and that have at least WANT pages free now, e.g. "2M" or "2M,1G" ("" for
# none). The tests then fail for a missing page of those sizes only, and skip, saying why, for
# the others (test/support/hugepage_need.h decides).
hugepage_requirement() {
	local out="" spec kb want name
	for spec in "$@"; do
		kb=${spec%%:*}
		want=${spec#*:}
		[ -d "$NICMR_HUGEPAGES_SYSFS/hugepages-${kb}kB" ] || continue
		[ "$(free_hugepages "$kb")" -ge "$want" ] || continue
		if [ "$kb" -ge 1048576 ]; then name="$((kb / 1048576))G"; else name="$((kb / 1024))M"; fi
		out="${out:+$out,}$name"
	done
	echo "$out"
}

# reserve_hugepages SIZE_KB COUNT: makes at least COUNT pages of that size free. Says what
# it could not do and what that disables; never fails the caller.
reserve_hugepages() {
	local kb=$1 want=$2
	local dir="$NICMR_HUGEPAGES_SYSFS/hugepages-${kb}kB"
	local name
	if [ "$kb" -ge 1048576 ]; then name="$((kb / 1048576)) GiB"; else name="$((kb / 1024)) MiB"; fi
	if [ ! -d "$dir" ]; then
		echo "    $name hugepages: not supported by this kernel"
		return 0
	fi
	local free total
	free=$(free_hugepages "$kb")
	if [ "$free" -ge "$want" ]; then
		echo "    $name hugepages: $free free (wanted $want)"
		return 0
	fi
	total=$(cat "$dir/nr_hugepages")
	local target=$((total + want - free))
	if echo "$target" | as_root tee "$dir/nr_hugepages" >/dev/null 2>&1; then
		free=$(free_hugepages "$kb")
	fi
	if [ "$free" -ge "$want" ]; then
		echo "    $name hugepages: reserved, $free free (wanted $want)"
	else
		echo "    $name hugepages: only $free free, wanted $want. Tests that need them fail or are"
		echo "    skipped with a reason. Reserve them as root:"
		echo "      echo $target > $dir/nr_hugepages"
	fi
	return 0
}

# configure DIR [meson options...]: sets up a build directory once, reconfigures it after.
configure() {
	local dir=$1
	shift
	if [ -f "$dir/build.ninja" ]; then
		meson configure "$dir" "$@" >/dev/null
	else
		meson setup "$dir" "$@"
	fi
}
