#!/usr/bin/env bash
# Builds nicmr (release) and runs every benchmark program; each prints medians and the ratios
# against its baseline.
#   devtools/bench.sh                 all benchmarks
#   devtools/bench.sh bench-mem       some of them (bench-mem, bench-prm, ..., vfio)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$NICMR_TOP"

phase "Debian packages"
install_packages $NICMR_BUILD_PACKAGES

phase "Hugepages"
reserve_hugepages 2048 1100

phase "Build (release): build-release/"
configure build-release -Dbuildtype=release
ninja -C build-release -j "$(nproc)"

mapfile -t benches < <(find build-release/bench -type f -executable -name 'bench-*' | sort)
for b in "${benches[@]}"; do
	name=$(basename "$b")
	if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then
		continue
	fi
	phase "$name"
	"$b" --benchmark_color=false
done

# VFIO map/unmap runs inside the QEMU guest (a real VFIO stack), against the emulated IOMMU.
if [ $# -eq 0 ] || [[ " $* " == *" vfio "* ]]; then
	phase "vfio (in the QEMU guest)"
	meson test -C build-release --benchmark --suite vfio --verbose
fi
total_time
