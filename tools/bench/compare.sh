#!/usr/bin/env bash
# compare.sh times a replay of a simulated Pi-mega scan (24-bit LFSR
# bitplane, tomography scene, bitshuffle-LZ4, CPU backend, files on
# /dev/shm) with two or more builds in interleaved rounds (A B A B ...),
# and prints each build's median wall time and median CPU time (user plus
# system, which another process on the machine sways less) with their
# spreads (min to max), and the medians of the per-round ratios of each
# build's times to the first's.
#
# Usage: tools/bench/compare.sh [rounds] [frames] BINARY...   (default 10 rounds, 200 frames)
# Example: tools/bench/compare.sh 10 200 /tmp/before/h5ingest bin/h5ingest
set -euo pipefail

rounds=10 frames=200
if [[ ${1:-} =~ ^[0-9]+$ ]]; then rounds=$1; shift; fi
if [[ ${1:-} =~ ^[0-9]+$ ]]; then frames=$1; shift; fi
(($# > 1)) || { echo "usage: $0 [rounds] [frames] BINARY BINARY..." >&2; exit 2; }
dir=$(mktemp -d /dev/shm/h5ingest-compare-XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$1" simulate --scene tomo --darks 0 --flats 0 --projections 50 -o "$dir/unique.pmcap" --overwrite >/dev/null
"$1" bench cycle "$dir/unique.pmcap" "$dir/scan.pmcap" "$frames"

# run prints the wall and the CPU time (user plus system) of a command, in ms.
run() {
	local s e cpu TIMEFORMAT='%3U %3S'
	s=$(date +%s%N)
	cpu=$({ time "$@" >/dev/null 2>&1; } 2>&1)
	e=$(date +%s%N)
	echo "$(((e - s) / 1000000)) $(echo "$cpu" | awk '{ printf "%d", ($1 + $2) * 1000 }')"
}
declare -A wall cpu
for ((r = 0; r < rounds; r++)); do
	for b in "$@"; do
		rm -f "$dir/scan.h5" # a new file, as a scan writes: not the old one's pages freed in the round
		read -r w c < <(run "$b" replay "$dir/scan.pmcap" -o "$dir/scan.h5" --projections "$frames" --backend cpu --overwrite)
		wall["$b"]+="$w " cpu["$b"]+="$c "
	done
done
# median reads numbers, one a line, and prints their median.
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# column prints, for the times of one kind, build b's median, spread and
# median ratio to the first build's.
column() {
	local -n t=$1
	local b=$2 mine base
	read -ra mine <<<"${t["$b"]}"
	read -ra base <<<"${t["$first"]}"
	ratio=$(for i in "${!mine[@]}"; do echo "${mine[$i]} ${base[$i]}"; done | awk '{ printf "%.4f\n", $1 / $2 }' | median)
	printf '%s\n' "${mine[@]}" | sort -n | awk -v q="$ratio" '
		{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%8.0f %6.0f to %-6.0f %7.3f", m, v[1], v[NR], q }'
}
first=$1
printf '%-32s %35s   %35s\n' "" "wall ms: median, spread, ratio" "CPU ms: median, spread, ratio"
for b in "$@"; do
	printf '%-32s %35s   %35s\n' "$b" "$(column wall "$b")" "$(column cpu "$b")"
done
