#!/usr/bin/env bash
# profile.sh replays a simulated Pi-mega scan (24-bit LFSR bitplane,
# tomography scene) to a bitshuffle-LZ4 HDF5 file with a CPU profile, and
# prints the profile's top functions, and where perf can sample the
# kernel, how much of the CPU went there and to what.
#
# Usage: tools/bench/profile.sh [frames] [dir]   (default 100 frames, /dev/shm)
# Needs bin/h5ingest (make build). Keeps DIR/profile.pprof for
# go tool pprof -http=: bin/h5ingest DIR/profile.pprof
set -euo pipefail

cd "$(dirname "$0")/../.."
frames=${1:-100}
dir=${2:-/dev/shm/h5ingest-profile}
mkdir -p "$dir"
trap 'rm -f "$dir/scan.pmcap" "$dir/scan.h5"' EXIT

bin/h5ingest simulate --scene tomo --darks 0 --flats 0 --projections "$frames" -o "$dir/scan.pmcap" --overwrite
bin/h5ingest replay "$dir/scan.pmcap" -o "$dir/scan.h5" --projections "$frames" --backend cpu \
	--overwrite --cpuprofile "$dir/profile.pprof"
go tool pprof -top -nodecount=30 bin/h5ingest "$dir/profile.pprof" 2>/dev/null | sed -n '4,40p'

# Where the kernel's part goes, where perf can sample it (Linux perf, with
# perf_event_paranoid low enough or as root): the same replay again, its
# CPU split by object (the kernel, h5ingest, libc, HDF5), then the kernel's
# three callers by their share of all samples, children included.
if command -v perf >/dev/null && perf record -q -o /dev/null -- true 2>/dev/null; then
	perf record -q -g -F 4000 -o "$dir/perf.data" -- bin/h5ingest replay "$dir/scan.pmcap" \
		-o "$dir/scan.h5" --projections "$frames" --backend cpu --overwrite >/dev/null 2>&1
	echo
	echo "CPU by object (perf, self):"
	perf report -i "$dir/perf.data" --no-children --sort dso 2>/dev/null | grep -E '^ +[0-9]' | head -5
	echo
	echo "the kernel's part, by caller (perf, children included):"
	perf report -i "$dir/perf.data" --children --sort sym 2>/dev/null | awk '
		/^ +[0-9]/ { share[$NF] = $1 }
		function line(sym, what) { printf "  %7s  %s\n", (sym in share) ? share[sym] : "0%", what }
		END {
			line("__x64_sys_pwrite64", "the HDF5 file written (pwrite64), of which:")
			line("shmem_alloc_and_add_folio", "  its new pages, where the file is in tmpfs")
			line("copy_folio_from_iter_atomic", "  the copy into them")
			line("asm_exc_page_fault", "page faults: the mapped capture read for the first time")
			line("__x64_sys_madvise", "read frames'"'"' pages let go (madvise)")
			line("__x64_sys_futex", "goroutines waking each other (futex)")
		}'
	rm -f "$dir/perf.data"
fi
