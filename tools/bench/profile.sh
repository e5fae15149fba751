#!/usr/bin/env bash
# profile.sh replays a simulated Pi-mega scan (24-bit LFSR bitplane,
# tomography scene) to a bitshuffle-LZ4 HDF5 file with a CPU profile, and
# prints the profile's top functions.
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
