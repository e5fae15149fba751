#!/bin/sh
# check-binaries.sh DIR: checks the GPU test binaries that make gpu-binaries
# built into DIR, and writes DIR/glibc.txt for run.sh.
#
# Each *.test binary must be built with cgo (go version -m shows
# CGO_ENABLED=1; without cgo the cuda backend reports itself unavailable and
# every device test skips) and link only libc and the loader. The newest
# GLIBC_ symbol version any of them needs is the oldest glibc they run on:
# printed, and written to DIR/glibc.txt.
set -u
dir=${1:?usage: check-binaries.sh DIR}
go=${GO:-go}
newest=
found=0
for b in "$dir"/*.test; do
	[ -e "$b" ] || continue
	found=1
	if ! "$go" version -m "$b" 2>/dev/null | grep -q '[[:space:]]CGO_ENABLED=1$'; then
		echo "$b: not built with cgo (go version -m shows no CGO_ENABLED=1): its cuda backend could not load the driver" >&2
		exit 1
	fi
	libs=$(ldd "$b" 2>&1 | grep -v 'linux-vdso\|libc\.so\.6\|ld-linux')
	if [ -n "$libs" ]; then
		echo "$b needs more than libc:" $libs >&2
		exit 1
	fi
	v=$(readelf --dyn-syms -W "$b" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -n 1)
	if [ -z "$v" ]; then
		echo "$b: no GLIBC_ symbol versions found (readelf --dyn-syms): not a dynamically linked ELF binary?" >&2
		exit 1
	fi
	newest=$(printf '%s\n%s\n' "$newest" "$v" | sed '/^$/d' | sort -V | tail -n 1)
done
if [ $found -eq 0 ]; then
	echo "$dir: no *.test binaries" >&2
	exit 1
fi
echo "$newest" >"$dir/glibc.txt"
echo "$dir: test binaries built with cgo, linking only libc; they need glibc $newest or newer (GLIBC_$newest)"
