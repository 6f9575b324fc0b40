#!/usr/bin/env bash
# Sets up a fresh machine and runs every nicmr test: the suite in a normal build, again under
# AddressSanitizer + UndefinedBehaviorSanitizer, the concurrency stress tests under
# ThreadSanitizer, the fuzz targets for a bounded time, an install into a temporary prefix as
# an unprivileged user, and the format check.
#
#   devtools/test.sh            everything (what CI runs)
#   NICMR_FUZZ_SECONDS=600 devtools/test.sh    fuzz each target longer (default 30 s each)
#
# It installs missing Debian packages (apt-get), reserves hugepages when it can, and says what it
# could not do. Exit status: 0 when every test passed, 1 when one failed, 2 for an argument
# (it takes none but --help) or a NICMR_FUZZ_SECONDS that is not a number of seconds; those are
# checked before anything is installed or built.
set -euo pipefail

case ${1:-} in
-h | --help)
	echo "usage: devtools/test.sh (no arguments; NICMR_FUZZ_SECONDS=N in the environment)"
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
	exit 0
	;;
esac
if [ $# -ne 0 ]; then
	echo "test.sh: unknown argument '$1' (it takes none; see devtools/test.sh --help)" >&2
	exit 2
fi
fuzz_seconds=${NICMR_FUZZ_SECONDS:-30}
if ! [[ $fuzz_seconds =~ ^[1-9][0-9]{0,5}$ ]]; then
	echo "test.sh: NICMR_FUZZ_SECONDS='$fuzz_seconds' is not a number of seconds (1 or more)" >&2
	exit 2
fi

. "$(dirname "$0")/lib.sh"
cd "$NICMR_TOP"

jobs=$(nproc)
failed_phases=()

phase "Debian packages"
install_packages $NICMR_BUILD_PACKAGES $NICMR_TEST_PACKAGES

phase "Hugepages"
reserve_hugepages 2048 1100
reserve_hugepages 1048576 1
# Per page size: a test of a size reserved here fails when its pages are missing; one of a size
# the kernel does not offer, or that could not be reserved, skips with the reason.
NICMR_REQUIRE_HUGEPAGES=$(hugepage_requirement 2048:1024 1048576:1)
export NICMR_REQUIRE_HUGEPAGES
if [ -n "$NICMR_REQUIRE_HUGEPAGES" ]; then
	echo "    hugepage tests of these sizes must run: NICMR_REQUIRE_HUGEPAGES=$NICMR_REQUIRE_HUGEPAGES"
else
	echo "    no hugepage size reserved: hugepage tests skip, saying why"
fi

# run_suite DIR [meson test args...]: records a failure instead of stopping, so that every
# build reports.
run_suite() {
	local dir=$1
	shift
	if ! meson test -C "$dir" --print-errorlogs --num-processes "$jobs" "$@"; then
		failed_phases+=("$dir")
	fi
}

phase "Build (debugoptimized): build/"
configure build -Dbuildtype=debugoptimized
ninja -C build -j "$jobs"

phase "Tests: build/"
run_suite build

phase "Build (ASan + UBSan): build-asan/"
configure build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false \
	-Dbenchmarks=disabled
ninja -C build-asan -j "$jobs"

phase "Tests under ASan + UBSan: build-asan/"
run_suite build-asan --timeout-multiplier 4

phase "Build (TSan): build-tsan/"
configure build-tsan -Dbuildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false \
	-Dbenchmarks=disabled
ninja -C build-tsan -j "$jobs"

phase "Concurrency stress under TSan: build-tsan/"
run_suite build-tsan --suite stress --timeout-multiplier 4

phase "Fuzz targets (${fuzz_seconds}s each): build-fuzz/"
CC=clang CXX=clang++ configure build-fuzz -Dfuzz=true -Dbuildtype=debugoptimized \
	-Db_lundef=false -Dbenchmarks=disabled -Dtests=disabled -Ddpdk=disabled
ninja -C build-fuzz -j "$jobs"
NICMR_FUZZ_SECONDS=$fuzz_seconds run_suite build-fuzz --suite fuzz

phase "Install into a temporary prefix as an unprivileged user"
# What a user does: configure with --prefix, build, install, then run the installed testmr
# --provider and fi_info -p nicmr from there (test/install/install-check.sh, about 80 s).
if ! test/install/install-check.sh prefix "$NICMR_TOP"; then
	failed_phases+=("install")
fi

phase "Format (clang-format) and lint (clang-tidy over build/)"
if ! devtools/check-format.sh --tidy build; then
	failed_phases+=("format")
fi

phase "Summary"
python3 devtools/test-summary.py build build-asan build-tsan build-fuzz
total_time
if [ ${#failed_phases[@]} -ne 0 ]; then
	echo "FAILED: ${failed_phases[*]}"
	exit 1
fi
