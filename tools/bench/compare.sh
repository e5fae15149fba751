#!/usr/bin/env bash
# compare.sh times a replay of a simulated Pi-mega scan (24-bit LFSR
# bitplane, tomography scene, bitshuffle-LZ4, CPU backend, files on
# /dev/shm) with two or more builds in interleaved rounds (A B A B ...),
# and prints each build's median wall time with the spread (min to max),
# and the median of the per-round ratios of each build's time to the
# first's.
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

ms() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(((e - s) / 1000)); }
declare -A t
for ((r = 0; r < rounds; r++)); do
	for b in "$@"; do
		rm -f "$dir/scan.h5" # a new file, as a scan writes: not the old one's pages freed in the round
		t["$b"]+="$(ms "$b" replay "$dir/scan.pmcap" -o "$dir/scan.h5" --projections "$frames" --backend cpu --overwrite) "
	done
done
printf '%-40s %12s %24s %18s\n' binary "median ms" "spread ms" "ratio to first"
for b in "$@"; do
	read -ra mine <<<"${t["$b"]}"
	read -ra base <<<"${t["$1"]}"
	ratios=$(for i in "${!mine[@]}"; do echo "${mine[$i]} ${base[$i]}"; done | awk '{ printf "%.4f\n", $1 / $2 }' | sort -n | awk '
		{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
	printf '%s\n' "${mine[@]}" | sort -n | awk -v b="$b" -v q="$ratios" '
		{ v[NR] = $1 / 1000 }
		END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		      printf "%-40s %12.1f %11.1f to %-10.1f %18s\n", b, m, v[1], v[NR], q }'
done
