#!/bin/sh
# pack-h5ingest.sh BINARY ARCHIVE: packs h5ingest for a machine without our
# Debian libraries (a lent GPU machine), and checks that the kit still fits
# what a call to that machine carries.
#
# ARCHIVE (a .tar.gz) holds h5ingest, lib/ with every shared library
# BINARY needs (ldd) except the glibc family (libc, libm, libpthread, libdl,
# librt, libresolv, the loader), which the machine's own must provide, and
# glibc.txt: the newest GLIBC_ symbol version the binary and those
# libraries need, the oldest glibc they run on. first-contact.sh unpacks it
# and runs h5ingest with LD_LIBRARY_PATH set to lib/. Packed, the libraries
# and the binary take about 17 MB instead of 43.
#
# Then the whole folder of ARCHIVE and the repository's tracked files
# together must stay under KIT_LIMIT_MIB (64 MiB: what a call to the lent
# machine carries, working tree included); else it fails saying so.
set -u
binary=${1:?usage: pack-h5ingest.sh BINARY ARCHIVE}
archive=${2:?usage: pack-h5ingest.sh BINARY ARCHIVE}
limit=${KIT_LIMIT_MIB:-64}
root=$(cd "$(dirname "$0")/../.." && pwd)

if ! deps=$(ldd "$binary" 2>&1); then
	echo "$binary: ldd failed: $deps" >&2
	exit 1
fi
if echo "$deps" | grep -q 'not found'; then
	echo "$binary: libraries not found here:" >&2
	echo "$deps" | grep 'not found' >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lib"
cp "$binary" "$tmp/h5ingest" || exit 1
for lib in $(echo "$deps" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'); do
	case $(basename "$lib") in
	libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | ld-linux*) continue ;;
	esac
	cp -L "$lib" "$tmp/lib/" || exit 1
done

newest=$(for f in "$tmp/h5ingest" "$tmp"/lib/*; do readelf --dyn-syms -W "$f" 2>/dev/null; done |
	grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -n 1)
if [ -z "$newest" ]; then
	echo "$binary: no GLIBC_ symbol versions found (readelf --dyn-syms)" >&2
	exit 1
fi
echo "$newest" >"$tmp/glibc.txt"
mkdir -p "$(dirname "$archive")"
tar -C "$tmp" -czf "$archive" h5ingest lib glibc.txt || exit 1
nlibs=$(ls "$tmp/lib" | wc -l)

# What a call to the lent machine carries: the tracked files and this kit.
kit=$(du -sb "$(dirname "$archive")" | awk '{ print $1 }')
tracked=0
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
	tracked=$(cd "$root" && git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
fi
mib=1048576
if [ $((kit + tracked)) -gt $((limit * mib)) ]; then
	echo "$(dirname "$archive") is $((kit / mib)) MiB; with the repository's $((tracked / mib)) MiB of tracked files that is over the ${limit} MiB a call to the lent GPU machine carries: make the kit smaller" >&2
	exit 1
fi
echo "$archive: h5ingest and $nlibs libraries, $((kit / mib)) MiB kit with $((tracked / mib)) MiB of tracked files (under ${limit} MiB); they need glibc $newest or newer"
