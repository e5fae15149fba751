"""Ceiling row of h5ingest bench: the C bitshuffle + LZ4 library, no I/O.

Usage: OMP_NUM_THREADS=T ceiling.py FRAMES.h5 N

Reads the decoded frames of FRAMES.h5 (/entry/data/data) into memory, off
the clock, then compresses N of them (cycling) with bitshuffle.compress_lz4,
default block size, which splits each frame's blocks over OMP_NUM_THREADS
OpenMP threads, and prints the time and the compressed bytes as JSON.
"""
import json
import sys
import time

import bitshuffle
import h5py
import numpy as np


def main():
    src, n = sys.argv[1], int(sys.argv[2])
    with h5py.File(src, "r") as f:
        frames = np.ascontiguousarray(f["/entry/data/data"][:])
    k = len(frames)
    stored = 0
    start = time.perf_counter()
    for i in range(n):
        # The module leaves out the filter's 12-byte chunk header.
        stored += bitshuffle.compress_lz4(frames[i % k], 0).nbytes + 12
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "stored": stored}))


main()
