#!/usr/bin/env bash
# The main job: sets up a fresh machine, builds nicmr and runs the testpmd-style tool testmr on
# the emulated ConnectX (the device model), showing what nicmr does step by step.
#
#   devtools/demo.sh                 the demo
#   devtools/demo.sh -i              testmr's interactive prompt instead
#   devtools/demo.sh -- ARGS...      any testmr arguments (see `testmr --help`), e.g.
#   devtools/demo.sh -- --provider   the registration part through libfabric's fi_mr calls
# Exit status: testmr's (0: every step as expected, 1: one was not; doc/testmr.md), or 2 for an
# unknown option of this script, found before anything is installed or built (testmr checks
# the arguments after --, once it is built).
set -euo pipefail

usage() {
	cat <<USAGE
usage: devtools/demo.sh [-i | -- TESTMR-ARGS...]
Installs what the build needs, builds testmr in build/ and runs it on the emulated ConnectX:
  (nothing)            the demo
  -i, --interactive    testmr's prompt instead
  -- TESTMR-ARGS...    any testmr arguments (build/app/testmr/testmr --help), e.g. -- --provider
Exit status: testmr's, or 2 for an unknown option (before anything is installed or built).
USAGE
}

args=()
case ${1:-} in
"") ;;
-h | --help)
	usage
	exit 0
	;;
-i | --interactive)
	if [ $# -ne 1 ]; then
		echo "demo.sh: unexpected argument '$2' after $1 (testmr arguments go after --)" >&2
		exit 2
	fi
	args=(-i)
	;;
--)
	args=("${@:2}")
	;;
*)
	echo "demo.sh: unknown option '$1'" >&2
	echo "try 'devtools/demo.sh --help'" >&2
	exit 2
	;;
esac

. "$(dirname "$0")/lib.sh"
cd "$NICMR_TOP"

phase "Debian packages"
install_packages $NICMR_BUILD_PACKAGES

phase "Hugepages"
reserve_hugepages 2048 64

phase "Build: build/"
configure build -Dbuildtype=debugoptimized
targets=(app/testmr/testmr)
# The provider too, for `devtools/demo.sh -- --provider` (when the build has libfabric): the
# loader libfabric opens and the provider proper it loads.
if ninja -C build -t targets all 2>/dev/null | grep -q '^fabric/libnicmr-fi.so:'; then
	targets+=(fabric/libnicmr-fi.so fabric/libnicmr-fi-impl.so)
fi
ninja -C build -j "$(nproc)" "${targets[@]}"

phase "testmr on the emulated NIC"
echo "    build/app/testmr/testmr ${args[*]}"
build/app/testmr/testmr "${args[@]}"
total_time
