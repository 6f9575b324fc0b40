#!/usr/bin/env bash
# The tree's format and lint checks:
#   devtools/check-format.sh               clang-format (.clang-format) over every C/C++ file git tracks
#   devtools/check-format.sh --fix         reformat them
#   devtools/check-format.sh --tidy BUILD  also clang-tidy (.clang-tidy) over the library, driver
#                                          and tool sources, with BUILD's compile_commands.json
# Exit status 0 when the tree is clean.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp')
case "${1:-}" in
--fix)
	clang-format -i "${files[@]}"
	echo "formatted ${#files[@]} files"
	exit 0
	;;
esac
if ! clang-format --dry-run --Werror "${files[@]}"; then
	echo "format: files above differ from .clang-format; run devtools/check-format.sh --fix" >&2
	exit 1
fi
echo "format: ${#files[@]} files clean"

if [ "${1:-}" = "--tidy" ]; then
	build=${2:?--tidy needs a build directory with compile_commands.json}
	mapfile -t srcs < <(git ls-files 'lib/*.cpp' 'drivers/*.cpp' 'app/*.cpp')
	# Only sources this build compiles (parts a configuration leaves out have no command).
	mapfile -t srcs < <(for s in "${srcs[@]}"; do
		grep -q "\"file\": \"[^\"]*/${s//\//\\/}\"" "$build/compile_commands.json" && echo "$s"
	done)
	log=$(mktemp)
	trap 'rm -f "$log"' EXIT
	printf '%s\n' "${srcs[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet \
		>"$log" 2>&1 || true
	if grep -q -E '(warning|error):' "$log"; then
		grep -v -E '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$' "$log" >&2
		echo "lint: clang-tidy found the problems above" >&2
		exit 1
	fi
	echo "lint: clang-tidy clean over ${#srcs[@]} files"
fi
