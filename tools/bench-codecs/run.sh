#!/usr/bin/env bash
# run.sh compares the Go bitshuffle and bitshuffle+LZ4 codecs with the C
# bitshuffle library, single-threaded, on the same 1536x1536 uint32 detector
# frame, and prints throughput and compression ratio side by side.
#
# Usage: tools/bench-codecs/run.sh [benchtime]   (default benchtime 2s)
# Needs go, and /usr/bin/python3 with numpy and bitshuffle (Debian packages
# python3-numpy and bitshuffle).
set -euo pipefail

cd "$(dirname "$0")/../.."
benchtime=${1:-2s}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

H5INGEST_TEST_BENCH_FRAME=$tmp/frame.u32 go test ./compress/ -run '^TestWriteBenchFrame$' -count=1 >/dev/null
go test ./compress/bitshuffle/ -run '^$' -bench 'Shuffle/(un)?shuffle/uint32$' -benchtime "$benchtime" -cpu 1 >"$tmp/go.txt"
go test ./compress/ -run '^$' -bench 'Codecs/(en|de)code/bslz4/uint32$' -benchtime "$benchtime" -cpu 1 >>"$tmp/go.txt"

# The C library parallelises with OpenMP; one thread makes it comparable.
OMP_NUM_THREADS=1 /usr/bin/python3 - "$tmp/frame.u32" "$tmp/go.txt" <<'PY'
import re, sys, time
import numpy as np, bitshuffle

frame_path, go_path = sys.argv[1:]
a = np.fromfile(frame_path, dtype="<u4")
nbytes = a.nbytes

def best_mbs(f, seconds=2.0):
    """Best throughput of f over repeated runs, in MB/s (1e6 bytes)."""
    best, end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return nbytes / best / 1e6

comp = bitshuffle.compress_lz4(a, 0)
shuf = bitshuffle.bitshuffle(a, 0)
c = {
    "bitshuffle alone": best_mbs(lambda: bitshuffle.bitshuffle(a, 0)),
    "bitunshuffle alone": best_mbs(lambda: bitshuffle.bitunshuffle(shuf, 0)),
    "bslz4 encode": best_mbs(lambda: bitshuffle.compress_lz4(a, 0)),
    "bslz4 decode": best_mbs(lambda: bitshuffle.decompress_lz4(comp, a.shape, a.dtype, 0)),
}
c_ratio = nbytes / (comp.nbytes + 12)  # the module leaves out the 12-byte header

go, go_ratio = {}, None
names = {
    "Shuffle/shuffle/uint32": "bitshuffle alone",
    "Shuffle/unshuffle/uint32": "bitunshuffle alone",
    "Codecs/encode/bslz4/uint32": "bslz4 encode",
    "Codecs/decode/bslz4/uint32": "bslz4 decode",
}
for line in open(go_path):
    m = re.match(r"Benchmark(\S+?)(-\d+)?\s+\d+\s+[\d.]+ ns/op\s+([\d.]+) MB/s(?:\s+([\d.]+) ratio)?", line)
    if m and m.group(1) in names:
        go[names[m.group(1)]] = float(m.group(3))
        if m.group(4):
            go_ratio = float(m.group(4))

print(f"1536x1536 uint32 frame, {nbytes} bytes, one thread")
print(f"C library: bitshuffle module, SSE2 {bitshuffle.using_SSE2()}, AVX2 {bitshuffle.using_AVX2()}")
print(f"{'':22}{'Go MB/s':>10}{'C MB/s':>10}{'Go/C':>8}")
for k in names.values():
    g, cv = go.get(k, float("nan")), c[k]
    print(f"{k:22}{g:10.0f}{cv:10.0f}{g / cv:8.2f}")
print(f"{'bslz4 ratio':22}{go_ratio or float('nan'):10.3f}{c_ratio:10.3f}")
PY
