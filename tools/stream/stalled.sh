#!/usr/bin/env bash
# Does a consumer that stops reading slow the scan? Replays the same
# capture of full Pi-mega frames, in interleaved rounds, without a stream
# and with a stream whose consumer connects and never reads, and prints
# each row's median and spread of the scan's time (the summary's "time":
# until the file is finished) and the ratio of the medians, and the
# median wall time of each replay, which with the stalled consumer
# includes the stream's linger (stream.linger) after the file is done.
#
#   tools/stream/stalled.sh [FRAMES] [ROUNDS]     (default 200 frames, 5 rounds)
set -euo pipefail
frames=${1:-200}
rounds=${2:-5}
bin=${BIN:-bin/h5ingest}
dir=$(mktemp -d /dev/shm/h5ingest-stalled.XXXXXX)
consumer=
trap 'kill $consumer 2>/dev/null || true; rm -rf "$dir"' EXIT
port=$((32000 + RANDOM % 2000))
"$bin" simulate -o "$dir/scan.pmcap" --frames "$frames" --seed 5 >/dev/null 2>&1
declare -a plain stalled walls
for r in $(seq "$rounds"); do
	for row in plain stalled; do
		args=(replay "$dir/scan.pmcap" -o "$dir/$row.h5" --overwrite)
		if [ "$row" = stalled ]; then
			args+=(--stream "tcp://127.0.0.1:$port")
			# A stalled consumer for this round: connects, then never reads.
			/usr/bin/python3 -c '
import sys, time, zmq
s = zmq.Context().socket(zmq.PULL)
s.setsockopt(zmq.RCVHWM, 1)
s.connect(sys.argv[1])
time.sleep(3600)' "tcp://127.0.0.1:$port" &
			consumer=$!
		fi
		start=$(date +%s.%N)
		"$bin" "${args[@]}" >"$dir/$row.out" 2>&1 || { cat "$dir/$row.out"; exit 1; }
		end=$(date +%s.%N)
		if [ "$row" = stalled ]; then
			kill "$consumer"
			wait "$consumer" 2>/dev/null || true
			consumer=
		fi
		t=$(awk '$1 == "time" {print $2}' "$dir/$row.out")
		walls+=("$row $(echo "$end - $start" | bc)")
		if [ "$row" = plain ]; then plain+=("$t"); else stalled+=("$t"); fi
		grep -q "ok  *$frames\$" "$dir/$row.out" || { echo "$row: not every frame ok"; cat "$dir/$row.out"; exit 1; }
	done
	grep '^  stream' "$dir/stalled.out" | sed "s/^/round $r: /"
done
/usr/bin/python3 - "${plain[*]}" "${stalled[*]}" "$frames" "${walls[*]}" <<'PY'
import statistics, sys
plain = [float(x) for x in sys.argv[1].split()]
stalled = [float(x) for x in sys.argv[2].split()]
n = int(sys.argv[3])
w = sys.argv[4].split()
wall = {row: statistics.median(float(t) for r, t in zip(w[::2], w[1::2]) if r == row) for row in ("plain", "stalled")}
for name, v in (("no stream", plain), ("stalled consumer", stalled)):
    print(f"{name:18s} median {statistics.median(v):6.2f} s  min {min(v):6.2f}  max {max(v):6.2f}  ({n/statistics.median(v):.1f} frames/s)")
ratios = [s / p for p, s in zip(plain, stalled)]
print(f"stalled / no stream: median {statistics.median(ratios):.2f} (per round {min(ratios):.2f} to {max(ratios):.2f}); every frame ok in every file")
print(f"wall time of a replay, median: {wall['plain']:.2f} s without a stream, {wall['stalled']:.2f} s with the stalled consumer (the linger after the file)")
PY
