#!/usr/bin/env bash
# Checks that every C/C++ file git tracks is formatted by .clang-format, and runs clang-tidy
# (.clang-tidy) over the sources of build/ when NICMR_TIDY=1 (slow: minutes).
# Fix formatting with: devtools/check-format.sh --fix
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' | grep -v '^subprojects/')
if [ "${1:-}" = "--fix" ]; then
	clang-format -i "${files[@]}"
	echo "formatted ${#files[@]} files"
	exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}"; then
	echo "format: files above differ from .clang-format; run devtools/check-format.sh --fix" >&2
	exit 1
fi
echo "format: ${#files[@]} files clean"
if [ "${NICMR_TIDY:-0}" = 1 ]; then
	mapfile -t srcs < <(git ls-files '*.cpp' | grep -E '^(lib|drivers|app)/')
	run-clang-tidy -quiet -p build "${srcs[@]}"
	echo "lint: clang-tidy clean"
fi
