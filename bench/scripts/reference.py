"""Reference row of h5ingest bench: h5py + hdf5plugin writing bitshuffle-LZ4.

Usage: reference.py FRAMES.h5 OUT.h5 N

Reads the decoded frames of FRAMES.h5 (/entry/data/data) into memory, off
the clock, then writes N of them (cycling) frame by frame to OUT.h5 through
the HDF5 filter pipeline, chunks of one frame, and prints the time of the
write loop (file creation to close) as JSON.

Everything is as a user has it: h5py's default chunk cache, and the
filter's OpenMP threads as installed (OMP_NUM_THREADS from the
environment, if set).
"""
import json
import os
import sys
import time

import h5py
import hdf5plugin
import numpy as np


def main():
    src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with h5py.File(src, "r") as f:
        frames = np.ascontiguousarray(f["/entry/data/data"][:])
    k = len(frames)
    start = time.perf_counter()
    with h5py.File(out, "w") as f:
        d = f.create_dataset(
            "data",
            shape=(n,) + frames.shape[1:],
            dtype=frames.dtype,
            chunks=(1,) + frames.shape[1:],
            **hdf5plugin.Bitshuffle(cname="lz4"),
        )
        for i in range(n):
            d[i] = frames[i % k]
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "stored": os.path.getsize(out)}))


main()
