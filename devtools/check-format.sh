#!/usr/bin/env bash
# The tree's format and lint checks:
#   devtools/check-format.sh               clang-format (.clang-format) over every C/C++ file git tracks
#   devtools/check-format.sh --fix         reformat them
#   devtools/check-format.sh --tidy BUILD  also clang-tidy (.clang-tidy) over the library, driver
#                                          and tool sources, with BUILD's compile_commands.json
# Exit status 0 when the tree is clean, 1 when it is not, 2 for an unknown option, a missing
# BUILD or a BUILD without compile_commands.json (checked before any file is read).
set -euo pipefail

usage() {
	cat <<USAGE
usage: devtools/check-format.sh [--fix | --tidy BUILD]
  (nothing)      clang-format (.clang-format) over every C/C++ file git tracks
  --fix          reformat them
  --tidy BUILD   also clang-tidy (.clang-tidy) over the library, driver and tool sources, with
                 BUILD's compile_commands.json
Exit status: 0 when the tree is clean, 1 when it is not, 2 for bad arguments.
USAGE
}
bad_usage() {
	echo "check-format.sh: $*" >&2
	echo "try 'devtools/check-format.sh --help'" >&2
	exit 2
}
case ${1:-} in
"" | --fix)
	[ $# -le 1 ] || bad_usage "unexpected argument '$2'"
	;;
--tidy)
	[ $# -ge 2 ] || bad_usage "--tidy needs a build directory"
	[ $# -eq 2 ] || bad_usage "unexpected argument '$3'"
	[ -f "$2/compile_commands.json" ] ||
		bad_usage "--tidy $2: no compile_commands.json there (a meson build directory?)"
	# The build directory as given, from the top of the tree where clang-tidy runs.
	tidy_build=$(cd "$2" && pwd)
	;;
-h | --help)
	usage
	exit 0
	;;
*)
	bad_usage "unknown option '$1'"
	;;
esac

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
	build=$tidy_build
	mapfile -t srcs < <(git ls-files 'lib/*.cpp' 'drivers/*.cpp' 'api/*.cpp' 'fabric/*.cpp' 'app/*.cpp')
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
