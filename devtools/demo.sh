#!/usr/bin/env bash
# The main job: sets up a fresh machine, builds nicmr and runs the testpmd-style tool testmr on
# the emulated ConnectX (the device model), showing what nicmr does step by step.
#
#   devtools/demo.sh                 the demo
#   devtools/demo.sh -i              testmr's interactive prompt instead
#   devtools/demo.sh -- ARGS...      any testmr arguments (see `testmr --help`), e.g.
#   devtools/demo.sh -- --provider   the registration part through libfabric's fi_mr calls
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$NICMR_TOP"

args=("$@")
[ "${1:-}" = "--" ] && args=("${@:2}")

phase "Debian packages"
install_packages $NICMR_BUILD_PACKAGES

phase "Hugepages"
reserve_hugepages 2048 64

phase "Build: build/"
configure build -Dbuildtype=debugoptimized
targets=(app/testmr/testmr)
# The provider too, for `devtools/demo.sh -- --provider` (when the build has libfabric).
if ninja -C build -t targets all 2>/dev/null | grep -q '^lib/fabric/libnicmr-fi.so:'; then
	targets+=(lib/fabric/libnicmr-fi.so)
fi
ninja -C build -j "$(nproc)" "${targets[@]}"

phase "testmr on the emulated NIC"
echo "    build/app/testmr/testmr ${args[*]}"
build/app/testmr/testmr "${args[@]}"
total_time
