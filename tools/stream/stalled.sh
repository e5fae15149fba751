#!/usr/bin/env bash
# Does a consumer that stops reading slow the scan? Replays the same
# capture of full Pi-mega frames, in interleaved rounds, without a stream
# and with a stream whose consumer connects and never reads, and prints
# each row's median and spread of wall time and the ratio of the medians.
#
#   tools/stream/stalled.sh [FRAMES] [ROUNDS]     (default 200 frames, 5 rounds)
set -euo pipefail
frames=${1:-200}
rounds=${2:-5}
bin=${BIN:-bin/h5ingest}
dir=$(mktemp -d /dev/shm/h5ingest-stalled.XXXXXX)
trap 'kill $consumer 2>/dev/null || true; rm -rf "$dir"' EXIT
port=$((32000 + RANDOM % 2000))
"$bin" simulate -o "$dir/scan.pmcap" --frames "$frames" --seed 5 >/dev/null 2>&1
# The stalled consumer: connects, then never reads.
/usr/bin/python3 -c '
import sys, time, zmq
s = zmq.Context().socket(zmq.PULL)
s.setsockopt(zmq.RCVHWM, 1)
s.connect(sys.argv[1])
time.sleep(3600)' "tcp://127.0.0.1:$port" &
consumer=$!
declare -a plain stalled
for r in $(seq "$rounds"); do
	for row in plain stalled; do
		args=(replay "$dir/scan.pmcap" -o "$dir/$row.h5" --overwrite)
		[ "$row" = stalled ] && args+=(--stream "tcp://127.0.0.1:$port")
		start=$(date +%s.%N)
		"$bin" "${args[@]}" >"$dir/$row.out" 2>&1 || { cat "$dir/$row.out"; exit 1; }
		end=$(date +%s.%N)
		t=$(echo "$end - $start" | bc)
		if [ "$row" = plain ]; then plain+=("$t"); else stalled+=("$t"); fi
		grep -q "ok  *$frames\$" "$dir/$row.out" || { echo "$row: not every frame ok"; cat "$dir/$row.out"; exit 1; }
	done
	grep '^  stream' "$dir/stalled.out" | sed "s/^/round $r: /"
done
/usr/bin/python3 - "${plain[*]}" "${stalled[*]}" "$frames" <<'PY'
import statistics, sys
plain = [float(x) for x in sys.argv[1].split()]
stalled = [float(x) for x in sys.argv[2].split()]
n = int(sys.argv[3])
for name, v in (("no stream", plain), ("stalled consumer", stalled)):
    print(f"{name:18s} median {statistics.median(v):6.2f} s  min {min(v):6.2f}  max {max(v):6.2f}  ({n/statistics.median(v):.1f} frames/s)")
ratios = [s / p for p, s in zip(plain, stalled)]
print(f"stalled / no stream: median {statistics.median(ratios):.2f} (per round {min(ratios):.2f} to {max(ratios):.2f}); every frame ok in every file")
PY
