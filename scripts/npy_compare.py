#!/usr/bin/env python3
"""Compares two .npy files (format 1.0/2.0, little-endian numeric dtypes) with the standard
library only, so tests need no NumPy: exact for integers and booleans, and for floats
|got - want| <= atol + rtol * |want| (NaN equals NaN). Exit 0 when they match.

usage: npy_compare.py GOT.npy WANT.npy [--rtol R] [--atol A] [--exact]"""
import ast
import math
import struct
import sys

CODES = {"<f4": "f", "<f8": "d", "<f2": "e", "|b1": "?", "|u1": "B", "|i1": "b", "<i2": "h",
         "<u2": "H", "<i4": "i", "<u4": "I", "<i8": "q", "<u8": "Q"}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise SystemExit(f"{path}: not a .npy file")
    major = data[6]
    if major == 1:
        hlen = struct.unpack("<H", data[8:10])[0]
        off = 10
    else:
        hlen = struct.unpack("<I", data[8:12])[0]
        off = 12
    header = ast.literal_eval(data[off:off + hlen].decode("latin1"))
    if header.get("fortran_order"):
        raise SystemExit(f"{path}: Fortran order")
    descr, shape = header["descr"], tuple(header["shape"])
    if descr not in CODES:
        raise SystemExit(f"{path}: dtype {descr} not handled")
    n = 1
    for d in shape:
        n *= d
    body = data[off + hlen:]
    vals = struct.unpack("<" + CODES[descr] * n, body[:n * struct.calcsize(CODES[descr])])
    return descr, shape, vals


def main():
    args = sys.argv[1:]
    rtol = atol = 0.0
    exact = False
    files = []
    i = 0
    while i < len(args):
        if args[i] == "--rtol":
            rtol = float(args[i + 1]); i += 2
        elif args[i] == "--atol":
            atol = float(args[i + 1]); i += 2
        elif args[i] == "--exact":
            exact = True; i += 1
        else:
            files.append(args[i]); i += 1
    (gd, gs, gv), (wd, ws, wv) = load(files[0]), load(files[1])
    if gd != wd or gs != ws:
        print(f"{files[0]}: {gd}{list(gs)}, expected {wd}{list(ws)}")
        return 1
    floating = CODES[gd] in "fde"
    for k, (g, w) in enumerate(zip(gv, wv)):
        if not floating or exact:
            if g != w and not (floating and math.isnan(g) and math.isnan(w)):
                print(f"{files[0]}: element {k}: {g!r}, expected {w!r}")
                return 1
            continue
        if math.isnan(g) or math.isnan(w):
            if math.isnan(g) and math.isnan(w):
                continue
            print(f"{files[0]}: element {k}: {g!r}, expected {w!r}")
            return 1
        if math.isinf(g) or math.isinf(w):
            if g != w:
                print(f"{files[0]}: element {k}: {g!r}, expected {w!r}")
                return 1
            continue
        if abs(g - w) > atol + rtol * abs(w):
            print(f"{files[0]}: element {k}: {g!r}, expected {w!r} (rtol {rtol}, atol {atol})")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
