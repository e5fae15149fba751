"""Cross-reader check of a file written by package writer's tests.

Usage: crosscheck.py FILE EXPECT.json

Reads FILE with h5py (as a SWMR reader) and, for nxtomo files, with
dxchange, and compares everything with EXPECT.json, which the Go test wrote.
Prints "ok" on success; raises on the first difference.
"""
import json
import sys

import h5py
import numpy as np


def pattern(frame, h, w, dtype):
    """The pixel pattern the Go test writes (see writer_test.go)."""
    y, x = np.mgrid[0:h, 0:w]
    return ((frame * 7919 + y * w + x) % 65521).astype(dtype)


def expect_equal(name, got, want):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"{name}: got {got!r}, want {want!r}")


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def check_stack(f, path, e):
    d = f[path]
    n, h, w = e["frames"], e["height"], e["width"]
    dtype = np.uint16 if e["elem_size"] == 2 else np.uint32
    expect_equal(path + " shape", d.shape, (n, h, w))
    expect_equal(path + " dtype", str(d.dtype), np.dtype(dtype).name)
    stack = d[...]
    for i in range(n):
        want = pattern(i, h, w, dtype) if i in e["written"] else np.zeros((h, w), dtype)
        expect_equal(f"{path}[{i}]", stack[i], want)
    return stack


def check_records(f, det, e):
    expect_equal("frame_number", f[det + "/frame_number"][...], np.arange(e["frames"], dtype=np.uint64))
    for name in ("timestamp", "raw_crc32c", "data_crc32c", "frame_status"):
        expect_equal(name, f[det + "/" + name][...], e[name])


def check_nxtomo(f, path, e):
    det = "/entry/instrument/detector"
    stack = check_stack(f, det + "/data", e)
    check_records(f, det, e)
    keys = np.array(e["image_key"], dtype=np.int8)
    angles = np.array(e["rotation_angle"])
    expect_equal("image_key", f[det + "/image_key"][...], keys)
    expect_equal("rotation_angle", f["/entry/sample/rotation_angle"][...], angles)
    expect_equal("rotation_angle units", text(f["/entry/sample/rotation_angle"].attrs["units"]), "degree")
    expect_equal("definition", text(f["/entry/definition"][()]), "NXtomo")
    mono = f["/entry/instrument/monochromator/energy"]
    if abs(mono[()] - e["energy"] / 1.602176634e-16) > 1e-9 or text(mono.attrs["units"]) != "keV":
        raise AssertionError(f"monochromator energy {mono[()]} {mono.attrs['units']}, want {e['energy']} J in keV")
    expect_equal("root default", text(f.attrs["default"]), "entry")
    expect_equal("root NX_class", text(f.attrs["NX_class"]), "NXroot")
    nxdata = f["/entry/data"]
    expect_equal("NXdata class", text(nxdata.attrs["NX_class"]), "NXdata")
    expect_equal("NXdata signal", text(nxdata.attrs["signal"]), "data")
    expect_equal("NXdata axes", [text(a) for a in nxdata.attrs["axes"]], ["rotation_angle", ".", "."])
    for name, target in (("data", det + "/data"), ("rotation_angle", "/entry/sample/rotation_angle"),
                         ("image_key", det + "/image_key")):
        link = nxdata.get(name, getlink=True)
        if not isinstance(link, h5py.HardLink):
            raise AssertionError(f"/entry/data/{name} is {link!r}, not a hard link")
        if nxdata[name] != f[target]:
            raise AssertionError(f"/entry/data/{name} is not the object {target}")
        expect_equal(target + " target", text(f[target].attrs["target"]), target)
    for name, key in (("data", 0), ("data_white", 1), ("data_dark", 2)):
        expect_equal("/exchange/" + name, f["/exchange/" + name][...], stack[keys == key])
    expect_equal("/exchange/theta", f["/exchange/theta"][...], angles[keys == 0])

    import dxchange
    proj, flat, dark, theta = dxchange.read_aps_32id(path)
    expect_equal("dxchange proj", proj, stack[keys == 0])
    expect_equal("dxchange flat", flat, stack[keys == 1])
    expect_equal("dxchange dark", dark, stack[keys == 2])
    expect_equal("dxchange theta", theta, np.deg2rad(angles[keys == 0]))


def check_cxi(f, e):
    det = "/entry_1/instrument_1/detector_1"
    check_stack(f, det + "/data", e)
    check_records(f, det, e)
    expect_equal("cxi_version", f["/cxi_version"][()], 150)
    link = f["/entry_1/data_1"].get("data", getlink=True)
    if not isinstance(link, h5py.SoftLink) or link.path != det + "/data":
        raise AssertionError(f"/entry_1/data_1/data is {link!r}")
    check_stack(f, "/entry_1/data_1/data", e)
    expect_equal("translation", f["/entry_1/sample_1/geometry_1/translation"][...], np.array(e["translation"]))
    expect_equal("energy", f["/entry_1/instrument_1/source_1/energy"][()], e["energy"])


def main():
    path, expect = sys.argv[1], sys.argv[2]
    with open(expect) as fh:
        e = json.load(fh)
    with h5py.File(path, "r", swmr=True) as f:
        if not f.swmr_mode:
            raise AssertionError("not opened in SWMR mode")
        if e["layout"] == "nxtomo":
            check_nxtomo(f, path, e)
        else:
            check_cxi(f, e)
    print("ok")


if __name__ == "__main__":
    main()
