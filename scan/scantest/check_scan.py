"""Check a file written by `h5ingest replay` against the simulator's truth.

Usage: check_scan.py FILE.h5 EXPECT.json  (scantest.CrossCheck runs it)

EXPECT.json, written by the Go test, holds the layout, the status and data
CRC-32C expected for every frame (from the simulator's ground truth), image
keys and angles for nxtomo, and the raw pixels of some frames. The file is read
with h5py + hdf5plugin, independent of h5ingest's own codecs; every frame's
pixels are checked through the CRC-32C of their little-endian bytes (crcmod),
and the listed frames pixel by pixel. Prints "ok" or raises.
"""
import json
import sys

import crcmod.predefined
import h5py
import hdf5plugin  # noqa: F401  (registers the filter plugins)
import numpy as np

crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def expect(name, got, want):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"{name}: got {got!r}, want {want!r}")


def main(path, expect_path):
    with open(expect_path) as f:
        exp = json.load(f)
    det = {"nxtomo": "/entry/instrument/detector", "cxi": "/entry_1/instrument_1/detector_1"}[exp["layout"]]
    with h5py.File(path, "r") as f:
        data = f[det + "/data"]
        n = len(exp["status"])
        expect("shape", data.shape, [n, exp["height"], exp["width"]])
        expect("dtype", data.dtype.itemsize, exp["elem_size"])
        expect("frame_status", f[det + "/frame_status"][:], exp["status"])
        expect("frame_number", f[det + "/frame_number"][:], np.arange(n))
        data_crc = f[det + "/data_crc32c"][:]
        for i in range(n):
            frame = data[i]
            st = exp["status"][i]
            if st == 0:
                crc = crc32c(frame.astype("<u%d" % exp["elem_size"]).tobytes())
                if crc != exp["data_crc"][i] or data_crc[i] != crc:
                    raise AssertionError(f"frame {i}: pixels give CRC {crc:08x}, record {data_crc[i]:08x}, truth {exp['data_crc'][i]:08x}")
            elif st in (1, 3) and frame.any():
                raise AssertionError(f"frame {i} (status {st}) does not read as the fill value 0")
        for i, pixels in exp.get("pixels", {}).items():
            expect(f"pixels of frame {i}", data[int(i)].ravel(), pixels)
        if exp["layout"] == "nxtomo":
            expect("image_key", f["/entry/instrument/detector/image_key"][:], exp["image_key"])
            expect("rotation_angle", f["/entry/sample/rotation_angle"][:], exp["rotation_angle"])
            expect("linked data", f["/entry/data/data"][exp["status"].index(0)], data[exp["status"].index(0)])
        else:
            expect("translation", f["/entry_1/sample_1/geometry_1/translation"][:], exp.get("translation", np.zeros((n, 3))))
            expect("data_1 link", f["/entry_1/data_1/data"].shape, data.shape)
    if exp["layout"] == "nxtomo" and exp.get("dxchange"):
        import dxchange
        proj, flat, dark, theta = dxchange.read_aps_32id(path)
        keys = np.array(exp["image_key"])
        expect("dxchange proj frames", proj.shape[0], (keys == 0).sum())
        expect("dxchange flat frames", flat.shape[0], (keys == 1).sum())
        expect("dxchange dark frames", dark.shape[0], (keys == 2).sum())
        want_theta = np.deg2rad(np.array(exp["rotation_angle"])[keys == 0])
        if not np.allclose(theta, want_theta):
            raise AssertionError(f"dxchange theta {theta} want {want_theta}")
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
