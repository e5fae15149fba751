#!/bin/sh
# Benchmarks the libfabric receiver on loopback, in one run, beside a
# reference on the same machine:
#   1. the receiver alone (frames released as they arrive) in GB/s, beside
#      fi_pingpong -p tcp -e msg at the same message size;
#   2. h5ingest acquire end to end in frames/s, beside h5ingest replay of
#      the same capture.
# Usage: tools/bench-fabric/run.sh [frames]   (run from the repository root)
set -eu
frames=${1:-300}
size=7077952 # one Pi-mega frame: 64-byte header + 7,077,888 bytes of payload
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/h5ingest" ./cmd/h5ingest

echo "== receiver alone (go test -bench Receive), tcp provider on 127.0.0.1"
go test -run '^$' -bench 'Receive/1536x1536' -benchtime "${frames}x" ./source/fabric | grep Benchmark

echo "== fi_pingpong -p tcp -e msg -S $size (reference, same message size)"
fi_pingpong -p tcp -e msg -S "$size" -I 200 -B 47990 >"$tmp/pp-server" 2>&1 &
server=$!
sleep 1
fi_pingpong -p tcp -e msg -S "$size" -I 200 -P 47990 127.0.0.1 2>&1 | tail -2
wait "$server" || true

echo "== acquire end to end vs replay, $frames Pi-mega frames"
"$tmp/h5ingest" simulate -o "$tmp/scan.pmcap" --darks 0 --flats 0 --projections "$frames" >/dev/null
"$tmp/h5ingest" replay "$tmp/scan.pmcap" -o "$tmp/replay.h5" --projections "$frames" --backend cpu |
	sed -n 's/^  time /  replay  time /p'
port=47991
"$tmp/h5ingest" acquire --listen 127.0.0.1:$port -o "$tmp/acquire.h5" --projections "$frames" \
	--backend cpu --connect-timeout 30s >"$tmp/acquire.out" &
acq=$!
"$tmp/h5ingest" send "$tmp/scan.pmcap" --to 127.0.0.1:$port --timeout 30s | sed -n 's/^  time /  send    time /p'
wait "$acq"
sed -n 's/^  time /  acquire time /p; /received/p' "$tmp/acquire.out"
