#!/usr/bin/env bash
# startup.sh times the start of h5ingest: `--help` and a one-frame replay,
# for one or more builds, in interleaved rounds (A B A B ...), and prints
# each command's median wall time and the spread (min to max) in ms.
#
# Usage: tools/bench/startup.sh [rounds] BINARY...   (default 15 rounds)
# Example: tools/bench/startup.sh 15 /tmp/old/h5ingest bin/h5ingest
set -euo pipefail

rounds=15
if [[ ${1:-} =~ ^[0-9]+$ ]]; then rounds=$1; shift; fi
(($# > 0)) || { echo "usage: $0 [rounds] BINARY..." >&2; exit 2; }
dir=$(mktemp -d /dev/shm/h5ingest-startup-XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$1" simulate --scene tomo --projections 1 --darks 0 --flats 0 -o "$dir/one.pmcap" --overwrite >/dev/null 2>&1

ms() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(((e - s) / 1000)); }
declare -A t
for ((r = 0; r < rounds; r++)); do
	for b in "$@"; do
		t["$b help"]+="$(ms "$b" --help) "
		t["$b replay"]+="$(ms "$b" replay "$dir/one.pmcap" -o "$dir/one.h5" --projections 1 --overwrite) "
	done
done
printf '%-40s %-8s %10s %22s\n' binary command "median ms" "spread ms"
for b in "$@"; do
	for c in help replay; do
		echo ${t["$b $c"]} | tr ' ' '\n' | sort -n | awk -v b="$b" -v c="$c" '
			{ v[NR] = $1 / 1000 }
			END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
			      printf "%-40s %-8s %10.1f %10.1f to %-10.1f\n", b, c, m, v[1], v[NR] }'
	done
done
