#!/usr/bin/env bash
# Builds nicmr (release) and runs every benchmark program; each prints medians and the ratios
# against its baseline.
#   devtools/bench.sh                 all benchmarks
#   devtools/bench.sh bench-mem       some of them, by name (devtools/bench.sh --help lists them)
# Exit status: 0 when every benchmark ran, non-zero when one failed (its program's status), 2 for
# an unknown option or benchmark name (checked before anything is installed or built).
set -euo pipefail

# The benchmarks by name: the programs the build makes under bench/, and vfio (the VFIO
# map/unmap benchmark, which runs in the QEMU guest).
benches=(bench-dataplane bench-fi-mr bench-mem bench-mr bench-mr-core bench-prm bench-roce bench-wire vfio)

usage() {
	cat <<USAGE
usage: devtools/bench.sh [NAME...]
Installs what the build needs, reserves hugepages, builds nicmr (release) in build-release/ and
runs the benchmarks named (all when none is):
  ${benches[*]}
Exit status: 0 when every benchmark ran, non-zero when one failed, 2 for an unknown option or
name (before anything is installed or built).
USAGE
}

wanted=()
for arg in "$@"; do
	case $arg in
	-h | --help)
		usage
		exit 0
		;;
	-*)
		echo "bench.sh: unknown option '$arg'" >&2
		echo "try 'devtools/bench.sh --help'" >&2
		exit 2
		;;
	*)
		if [[ " ${benches[*]} " != *" $arg "* ]]; then
			echo "bench.sh: unknown benchmark '$arg' (one of: ${benches[*]})" >&2
			exit 2
		fi
		wanted+=("$arg")
		;;
	esac
done
[ ${#wanted[@]} -eq 0 ] && wanted=("${benches[@]}")

. "$(dirname "$0")/lib.sh"
cd "$NICMR_TOP"

phase "Debian packages"
install_packages $NICMR_BUILD_PACKAGES

phase "Hugepages"
reserve_hugepages 2048 1100

phase "Build (release): build-release/"
configure build-release -Dbuildtype=release
ninja -C build-release -j "$(nproc)"

for name in "${wanted[@]}"; do
	[ "$name" = vfio ] && continue
	b=$(find build-release/bench -type f -executable -name "$name" | head -n 1)
	if [ -z "$b" ]; then
		# A part the build left out (bench-mr needs DPDK, bench-fi-mr libfabric).
		phase "$name: not built by this configuration (see meson's 'Parts built')"
		if [ $# -gt 0 ]; then
			exit 1
		fi
		continue
	fi
	phase "$name"
	if [ "$name" = bench-fi-mr ]; then
		"$b" # a libfabric program, not a Google Benchmark one
	else
		"$b" --benchmark_color=false
	fi
done

# VFIO map/unmap runs inside the QEMU guest (a real VFIO stack), against the emulated IOMMU.
if [[ " ${wanted[*]} " == *" vfio "* ]]; then
	phase "vfio (in the QEMU guest)"
	meson test -C build-release --benchmark --suite vfio --verbose
fi
total_time
