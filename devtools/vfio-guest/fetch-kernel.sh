#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
#
# Fetches the Debian kernel the VFIO guest test boots and unpacks it into a cache directory.
# The version is whatever linux-image-amd64 depends on today, so the guest tracks the
# distribution's kernel without a pinned name. Prints the unpacked root on stdout.
#
# usage: fetch-kernel.sh [cache-dir]     (default /var/cache/nicmr/kernel)
# Exit status 0 on success; 1 with a message that says what is missing otherwise; 2 for bad
# arguments (an option, more than one directory), before anything is fetched.
set -eu

usage() {
	echo "usage: fetch-kernel.sh [cache-dir]     (default /var/cache/nicmr/kernel)"
	echo "Fetches and unpacks the Debian kernel the VFIO guest boots; prints its root."
}
case ${1:-} in
-h | --help)
	usage
	exit 0
	;;
-*)
	echo "fetch-kernel: unknown option '$1'" >&2
	usage >&2
	exit 2
	;;
esac
if [ $# -gt 1 ]; then
	echo "fetch-kernel: unexpected argument '$2' (one cache directory at most)" >&2
	exit 2
fi
cache=${1:-/var/cache/nicmr/kernel}

command -v apt-cache >/dev/null 2>&1 || { echo "fetch-kernel: apt-cache not found (a Debian host is needed)" >&2; exit 1; }
command -v dpkg-deb >/dev/null 2>&1 || { echo "fetch-kernel: dpkg-deb not found" >&2; exit 1; }

resolve() {
	apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n 1
}
pkg=$(resolve)
# A machine whose package lists were never fetched knows no kernel package yet.
if [ -z "$pkg" ] && [ "$(id -u)" -eq 0 ]; then
	apt-get update -qq >&2 || true
	pkg=$(resolve)
fi
if [ -z "$pkg" ]; then
	echo "fetch-kernel: cannot resolve linux-image-amd64's kernel package (run apt-get update)" >&2
	exit 1
fi

mkdir -p "$cache"
root="$cache/$pkg"
if [ -f "$root/.unpacked" ]; then
	echo "$root"
	exit 0
fi

# apt-get download writes into the current directory; a cache owned by root is not writable by
# the _apt sandbox user, which apt reports as a warning and then downloads unsandboxed.
if ! ls "$cache"/"$pkg"_*.deb >/dev/null 2>&1; then
	(cd "$cache" && apt-get download "$pkg" >&2) || {
		echo "fetch-kernel: apt-get download $pkg failed (no apt source reachable?)" >&2
		exit 1
	}
fi
deb=$(ls "$cache"/"$pkg"_*.deb | head -n 1)
rm -rf "$root.tmp"
dpkg-deb -x "$deb" "$root.tmp"
mv "$root.tmp" "$root"
touch "$root/.unpacked"
echo "$root"
