#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs one libFuzzer target as a meson test: every seed once, then, when NICMR_FUZZ_SECONDS is
# set and positive, mutation for that many seconds on a scratch corpus in the build directory
# (the committed seeds are never written to).
#
#   fuzz_run.sh <fuzz binary> <seed dir> <scratch dir>
set -euo pipefail
bin=$1
seeds=$2
scratch=$3
secs=${NICMR_FUZZ_SECONDS:-0}
mkdir -p "$scratch/corpus"
# A finding exits 1, not libFuzzer's default 77, which meson takes for a skipped test.
common=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 -max_len=16384
	-error_exitcode=1 -timeout_exitcode=1 "-artifact_prefix=$scratch/")
if [ "$secs" -gt 0 ]; then
	exec "$bin" "${common[@]}" -max_total_time="$secs" -print_final_stats=1 \
		"$scratch/corpus" "$seeds"
fi
exec "$bin" "${common[@]}" -runs=0 "$seeds"
