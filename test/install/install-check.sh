#!/usr/bin/env bash
# An install of nicmr as a user (not root) makes it, then its programs run from there:
#
#   install-check.sh destdir BUILD_DIR
#       stages BUILD_DIR's install (meson install --destdir) in a temporary directory: what the
#       'install' test suite runs, in seconds. Every file meson installs must be under the
#       prefix; the installed files find each other relative to their own place (run paths
#       $ORIGIN, testmr from its own directory), so the staged tree runs as it would at the
#       prefix.
#   install-check.sh prefix SOURCE_DIR [MESON_SETUP_OPTION...]
#       configures SOURCE_DIR with --prefix=<a temporary directory>, builds and installs it
#       there as an unprivileged user (nobody, through setpriv, when this runs as root): the
#       install a user makes, end to end (minutes: it builds the library once more).
#
# Then, from the installed tree, with an environment that names nothing of the build:
#   - testmr --provider runs its demo on the installed provider, which it finds by itself;
#   - nicmr.pc's providerdir is the installed provider's directory, and fi_info -p nicmr
#     lists the provider with FI_PROVIDER_PATH set to it;
#   - the provider proper resolves libnicmr.so.0 to the installed one.
# Exit status: 0 when all of that holds, 77 (skipped) when BUILD_DIR was configured to put the
# provider outside its prefix (-Dprovider_dir=/absolute/path), 1 otherwise.
set -euo pipefail
mode=${1:?destdir or prefix}
dir=${2:?build or source directory}
shift 2
tmp=$(mktemp -d /tmp/nicmr-install.XXXXXX)
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
unset LD_LIBRARY_PATH LD_PRELOAD FI_PROVIDER_PATH FI_PROVIDER FI_LOG_LEVEL PKG_CONFIG_PATH
unset NICMR_LOG_LEVEL

fail() {
	echo "install-check: $*" >&2
	exit 1
}
# as_user CMD...: CMD as an unprivileged user when this runs as root, else as it is, with
# a plain environment (no build paths). run_user CMD...: the same for nicmr's programs, which
# lock their pools' pages (mlock): as any RDMA stack's, their user needs RLIMIT_MEMLOCK above
# the pools' size (limits.conf's memlock) or CAP_IPC_LOCK. nobody gets CAP_IPC_LOCK alone, as
# an administrator would grant it (an ambient capability: kept across exec, nothing more),
# which works whatever the hard limit is; root cannot raise that without CAP_SYS_RESOURCE,
# which containers often lack.
user_env=(env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$tmp" LANG=C.UTF-8)
if [ "$(id -u)" -eq 0 ]; then
	user=nobody
	as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "${user_env[@]}" "$@"; }
	run_user() {
		setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=+ipc_lock \
			--ambient-caps=+ipc_lock -- "${user_env[@]}" "$@"
	}
else
	user=$(id -un)
	as_user() { "${user_env[@]}" "$@"; }
	run_user() { as_user "$@"; }
fi
# Sanitizer runtimes of the installed provider, for fi_info (not instrumented) to load it:
# a sanitizer build's modules load only into a process whose runtime came first.
sanitizer_preload() {
	ldd "$1" | awk '$1 ~ /^lib(asan|ubsan|tsan)\.so/ { printf "%s%s", sep, $3; sep=":" }'
}

# ---- The install --------------------------------------------------------------------------
case "$mode" in
destdir)
	build=$dir
	# The build's own install plan, and where it puts the provider.
	stage="$tmp/stage"
	meson install -C "$build" --no-rebuild --quiet --destdir "$stage" >"$tmp/install.log" 2>&1 ||
		{ cat "$tmp/install.log" >&2; fail "meson install --destdir failed"; }
	;;
prefix)
	src=$dir
	build="$tmp/build"
	stage=""
	mkdir "$tmp/prefix"
	chown 65534:65534 "$tmp" "$tmp/prefix" 2>/dev/null || true
	# A user builds from a checkout of their own: when this runs as root over a tree that
	# nobody cannot read (a clone under /root), the user gets a copy of the source files.
	if [ "$(id -u)" -eq 0 ] && ! setpriv --reuid=65534 --regid=65534 --clear-groups -- \
		test -r "$src/meson.build"; then
		mkdir "$tmp/src"
		(cd "$src" && git ls-files -z --cached --others --exclude-standard 2>/dev/null ||
			find . -path ./build\* -prune -o -type f -print0) |
			(cd "$src" && tar --null -T - -cf -) | tar -C "$tmp/src" -xf -
		chown -R 65534:65534 "$tmp/src"
		src="$tmp/src"
	fi
	touch "$tmp/.start"
	echo "install-check: configure, build and install into $tmp/prefix as $user"
	as_user meson setup "$build" "$src" --prefix="$tmp/prefix" -Dtests=disabled \
		-Dbenchmarks=disabled "$@" >"$tmp/setup.log" 2>&1 ||
		{ cat "$tmp/setup.log" >&2; fail "meson setup failed"; }
	as_user ninja -C "$build" -j "$(nproc)" >"$tmp/build.log" 2>&1 ||
		{ tail -50 "$tmp/build.log" >&2; fail "the build failed"; }
	as_user meson install -C "$build" --quiet >"$tmp/install.log" 2>&1 ||
		{ cat "$tmp/install.log" >&2; fail "meson install as $user failed"; }
	;;
*)
	fail "mode $mode: destdir or prefix"
	;;
esac

# The configured prefix and where the build said each file goes.
meson introspect "$build" --buildoptions >"$tmp/options.json"
meson introspect "$build" --installed >"$tmp/installed.json"
read -r prefix libdir bindir provider_dir < <(python3 - "$tmp/options.json" <<'PY'
import json, sys
o = {x['name']: x['value'] for x in json.load(open(sys.argv[1]))}
print(o['prefix'], o['libdir'], o['bindir'], o['provider_dir'] or '-')
PY
)
case "$provider_dir" in
/*)
	case "$provider_dir/" in
	"$prefix"/*) ;;
	*)
		echo "install-check: the provider goes to $provider_dir, outside $prefix (-Dprovider_dir): not checked"
		exit 77
		;;
	esac
	;;
esac
root="$stage$prefix"

# Every file of the install plan is in the prefix, and nothing else was written.
python3 - "$tmp/installed.json" "$prefix" <<'PY' || fail "files installed outside $prefix"
import json, sys
prefix = sys.argv[2].rstrip('/') + '/'
outside = [dst for dst in json.load(open(sys.argv[1])).values() if not dst.startswith(prefix)]
for dst in outside:
    print(f'  {dst}: outside the prefix', file=sys.stderr)
sys.exit(1 if outside else 0)
PY
if [ "$mode" = destdir ]; then
	stray=$(find "$stage" -mindepth 1 \( -path "$root" -prune \) -o \( -type f -print \) -o \( -type l -print \))
	[ -z "$stray" ] || fail "staged outside the prefix: $stray"
else
	stray=$(find /tmp /var/tmp /dev/shm -xdev -newer "$tmp/.start" -user 65534 \
		-not -path "$tmp" -not -path "$tmp/*" 2>/dev/null || true)
	[ -z "$stray" ] || fail "written outside the prefix by $user: $stray"
fi

# The provider's modules, and nicmr.pc.
libdir_abs="$root/$libdir" # meson keeps libdir relative to the prefix
pc="$libdir_abs/pkgconfig/nicmr.pc"
[ -f "$pc" ] || fail "no nicmr.pc at $pc"
# providerdir, as a user reads it (relocated to the stage for a staged install).
define=()
[ -z "$stage" ] || define=(--define-variable=prefix="$root")
pdir=$(PKG_CONFIG_PATH="$libdir_abs/pkgconfig" pkg-config "${define[@]}" --variable=providerdir nicmr)
[ -n "$pdir" ] || fail "nicmr.pc has no providerdir"
case "$pdir/" in
"$root"/*) ;;
*) fail "nicmr.pc's providerdir $pdir is not in the prefix ($root)" ;;
esac
for m in libnicmr-fi.so libnicmr-fi-impl.so; do
	[ -f "$pdir/$m" ] || fail "$m is not in providerdir $pdir"
done
impl="$pdir/libnicmr-fi-impl.so"

# Run paths of the installed ELF files: relative to their place, never the build tree's.
while IFS= read -r -d '' f; do
	head -c 4 "$f" | grep -q 'ELF' || continue
	rp=$(readelf -d "$f" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
	IFS=: read -r -a entries <<<"$rp"
	for e in "${entries[@]}"; do
		case "$e" in
		'$ORIGIN' | '$ORIGIN/'*) ;;
		*) fail "${f#"$root"/} has run path entry '$e' (not relative to \$ORIGIN)" ;;
		esac
	done
done < <(find "$root" -type f -print0)
# The provider proper loads the installed libnicmr.so.0.
got=$(as_user ldd "$impl" | awk '$1 == "libnicmr.so.0" { print $3 }')
[ -n "$got" ] && [ "$(realpath "$got")" = "$(realpath "$libdir_abs/libnicmr.so.0")" ] ||
	fail "libnicmr-fi-impl.so resolves libnicmr.so.0 to '$got', not $libdir_abs/libnicmr.so.0"

# ---- The installed programs ---------------------------------------------------------------
# testmr --provider finds the installed provider by itself.
testmr="$root/$bindir/testmr"
out="$tmp/testmr.out"
run_user "$testmr" --pool-size 8M --provider >"$out" 2>&1 ||
	{ cat "$out" >&2; fail "the installed testmr --provider failed (as $user)"; }
grep -qF "  provider path $pdir (the installed provider" "$out" ||
	{ grep 'provider path' "$out" >&2 || true; fail "testmr did not use the installed provider $pdir"; }
grep -q '^  fi_getinfo(prov_name nicmr) .*-> 0' "$out" || fail "testmr found no provider"
! grep -q 'UNEXPECTED' "$out" || { grep 'UNEXPECTED' "$out" >&2; fail "testmr's provider demo went wrong"; }

# fi_info lists it with FI_PROVIDER_PATH from nicmr.pc.
preload=$(sanitizer_preload "$impl")
run_user FI_PROVIDER_PATH="$pdir" FI_PROVIDER=nicmr LD_PRELOAD="$preload" \
	ASAN_OPTIONS=detect_leaks=0 fi_info -p nicmr >"$tmp/fi_info.out" 2>&1 ||
	{ cat "$tmp/fi_info.out" >&2; fail "fi_info -p nicmr failed with FI_PROVIDER_PATH=$pdir"; }
grep -q '^provider: nicmr$' "$tmp/fi_info.out" || fail "fi_info did not list nicmr"

echo "install-check ($mode): installed in $prefix${stage:+ (staged)}, nothing outside it;" \
	"testmr --provider and fi_info -p nicmr ran from it as $user"
