#!/usr/bin/python3
"""Receive one scan's h5ingest live stream (DECTRIS Stream V2: CBOR over a
ZeroMQ PUSH socket) and decode every image.

Uses only Debian's packages: python3-zmq, python3-cbor2, python3-numpy,
bitshuffle (the C library's Python module) and python3-crcmod.

    consume.py tcp://127.0.0.1:31001 [--timeout SECONDS]

It prints one JSON line per message, the image's pixels summarised (shape,
dtype, sum) with the CRC-32C of its decoded bytes beside the CRC the file's
record holds (a processor's float32 series, such as flat-field previews,
has no record to check), and whether the message began with the self-described CBOR
tag (d9 d9 f7) that DECTRIS's own parser requires; it exits 0 at the end
message, 1 on a CRC mismatch, 2 on a timeout.
"""
import argparse
import json
import struct
import sys

import bitshuffle
import cbor2
import crcmod.predefined
import numpy as np
import zmq

DTYPES = {64: np.dtype("u1"), 69: np.dtype("<u2"), 70: np.dtype("<u4"), 85: np.dtype("<f4")}
crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def decompress(algorithm, modifier, data, dtype):
    """Decode a tag-56500 byte string: HDF5 filter framing of bitshuffle-LZ4 or LZ4."""
    if algorithm == "bslz4":
        total, block = struct.unpack(">QI", data[:12])
        n = total // modifier
        out = bitshuffle.decompress_lz4(np.frombuffer(data, np.uint8, offset=12), (n,), dtype, block // modifier)
        return out.tobytes()
    if algorithm == "lz4":
        import lz4.block  # not needed by h5ingest's own tests, which stream bslz4
        total, block = struct.unpack(">QI", data[:12])
        out, pos = bytearray(), 12
        while len(out) < total:
            (size,) = struct.unpack(">I", data[pos:pos + 4])
            pos += 4
            out += lz4.block.decompress(data[pos:pos + size], uncompressed_size=min(block, total - len(out)))
            pos += size
        return bytes(out)
    raise ValueError(f"unknown compression {algorithm}")


def tag_hook(decoder, tag):
    if tag.tag == 56500:
        return ("compressed", tag.value)
    if tag.tag in DTYPES:
        return ("typed", DTYPES[tag.tag], tag.value)
    if tag.tag == 40:
        dims, typed = tag.value
        _, dtype, content = typed
        if isinstance(content, tuple) and content[0] == "compressed":
            algorithm, modifier, data = content[1]
            raw = decompress(algorithm, modifier, data, dtype)
        else:
            raw = content
        return np.frombuffer(raw, dtype).reshape(dims)
    return tag


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("--timeout", type=float, default=30)
    args = ap.parse_args()
    sock = zmq.Context().socket(zmq.PULL)
    sock.setsockopt(zmq.RCVTIMEO, int(args.timeout * 1000))
    sock.connect(args.endpoint)
    print(json.dumps({"connected": args.endpoint}), flush=True)
    bad = 0
    while True:
        try:
            raw = sock.recv()
        except zmq.Again:
            print(json.dumps({"error": "timeout"}), flush=True)
            return 2
        msg = cbor2.loads(raw, tag_hook=tag_hook)
        first = next(iter(msg))
        out = {"type": msg["type"], "first_key": first, "self_described": raw[:3] == b"\xd9\xd9\xf7"}
        if msg["type"] == "image":
            img = msg["data"]["threshold_1"]
            ud = msg["user_data"]
            out.update(image_id=msg["image_id"], start_time=msg.get("start_time"), shape=list(img.shape), dtype=str(img.dtype),
                       image_key=ud.get("image_key"))
            if img.dtype.kind == "f":  # a processor's series (flat-field previews): no chunk of the file, no record
                out.update(sum=float(img.sum(dtype=np.float64)))
            else:
                crc = crc32c(img.tobytes())
                out.update(sum=int(img.sum(dtype=np.uint64)), crc=crc, record_crc=ud["data_crc32c"], status=ud["status"])
                bad += crc != ud["data_crc32c"]
        else:
            out.update({k: v for k, v in msg.items() if k in ("series_id", "series_unique_id", "number_of_images", "image_size_x", "image_size_y",
                                                             "image_dtype", "count_time", "flatfield_enabled", "user_data")})
        print(json.dumps(out, default=str), flush=True)
        if msg["type"] == "end":
            return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
