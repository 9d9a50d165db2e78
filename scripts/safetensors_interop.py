#!/usr/bin/env python3
"""safetensors interoperability between optitpu and the reference Python package.

    pip install safetensors numpy
    python3 scripts/safetensors_interop.py gen   tests/data/safetensors   # Python -> fixtures
    python3 scripts/safetensors_interop.py check tests/data/safetensors/c # files optitpu wrote

`gen` writes files with the reference writer into DIR/py/, and malformed or unusual headers into
DIR/accept/ or DIR/reject/ according to what the reference reader (safetensors.deserialize)
decides; tests/test_safetensors.c reads all of them (CI needs no Python). `check` loads the files
tests/test_safetensors.c wrote (committed under DIR/c/) with the reference reader and compares every
value with the same deterministic pattern. Both directions exit non-zero on any mismatch.
"""
import json
import os
import struct
import sys

import numpy as np
import safetensors
from safetensors import TensorSpec, deserialize, serialize_file
from safetensors.numpy import load_file, save_file

# dtype name in the file, numpy dtype (None: raw bits), element size
DTYPES = [
    ("BOOL", np.bool_, 1), ("U8", np.uint8, 1), ("I8", np.int8, 1), ("I16", np.int16, 2),
    ("U16", np.uint16, 2), ("F16", np.float16, 2), ("BF16", None, 2), ("I32", np.int32, 4),
    ("U32", np.uint32, 4), ("F32", np.float32, 4), ("F64", np.float64, 8), ("I64", np.int64, 8),
    ("U64", np.uint64, 8),
]
SHAPES = {"BOOL": [3, 5], "U8": [7], "I8": [2, 2, 2], "I16": [4, 3], "U16": [1, 9], "F16": [6],
          "BF16": [2, 5], "I32": [3, 1, 2], "U32": [5], "F32": [2, 3, 4], "F64": [3, 3],
          "I64": [4], "U64": [2, 2]}
M64 = (1 << 64) - 1


def pattern(dtype, n, salt=0):
    """Element i's bytes: the low `size` bytes of a 64-bit mix of i (the C tests use the same)."""
    size = dict((d, s) for d, _, s in DTYPES)[dtype]
    out = bytearray()
    for i in range(n):
        x = (i * 0x9E3779B97F4A7C15 + 0x0123456789ABCDEF + salt * 0x51ED27) & M64
        x ^= x >> 29
        if dtype == "BOOL":
            out += bytes([x & 1])
        else:
            out += (x & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    return bytes(out)


def array(dtype, shape, salt=0):
    n = int(np.prod(shape)) if shape else 1
    raw = pattern(dtype, n, salt)
    npdt = dict((d, t) for d, t, _ in DTYPES)[dtype]
    if npdt is None:
        return None, raw
    return np.frombuffer(raw, dtype=npdt).reshape(shape).copy(), raw


def gen(root):
    py = os.path.join(root, "py")
    os.makedirs(py, exist_ok=True)
    # 1. every dtype numpy has, one metadata entry: byte-identical with optitpu's writer
    tensors = {}
    for d, t, _ in DTYPES:
        if t is not None:
            tensors["t_" + d.lower()] = array(d, SHAPES[d])[0]
    save_file(tensors, os.path.join(py, "all_dtypes.safetensors"), metadata={"format": "np"})
    # 2. bf16 (numpy has no bf16): through the raw TensorSpec interface
    keep = []
    specs = {}
    for name, shape, salt in (("b", [2, 5], 0), ("a", [3], 1)):
        raw = np.frombuffer(pattern("BF16", int(np.prod(shape)), salt), dtype=np.uint8).copy()
        keep.append(raw)
        specs[name] = TensorSpec(dtype="bfloat16", shape=shape, data_ptr=raw.ctypes.data,
                                 data_len=raw.nbytes)
    serialize_file(specs, os.path.join(py, "bf16.safetensors"), None)
    # 3. scalars and empty tensors, no metadata
    save_file({"scalar": array("F32", [])[0].reshape(()),
               "empty_i32": np.zeros((0, 4), np.int32),
               "empty_f16": np.zeros((3, 0), np.float16),
               "one": array("I64", [1])[0]}, os.path.join(py, "scalar_empty.safetensors"))
    # 4. several metadata entries, unicode names
    save_file({"layer.0/wëight": array("F32", [4, 4])[0], "日本": array("U8", [3])[0],
               "with space": array("I16", [2])[0]},
              os.path.join(py, "names_meta.safetensors"),
              metadata={"framework": "np", "unicode": "päß ✓", "empty": "", "quote": "a\"b\\c\n"})
    # 5. no tensors at all
    save_file({}, os.path.join(py, "empty.safetensors"))
    gen_conformance(root)


def raw_file(header_obj=None, header_text=None, data=b"", pad=True, n_override=None):
    h = header_text if header_text is not None else json.dumps(header_obj, separators=(",", ":"))
    hb = h.encode("utf-8") if isinstance(h, str) else h
    if pad:
        hb += b" " * ((8 - len(hb) % 8) % 8)
    n = len(hb) if n_override is None else n_override
    return struct.pack("<Q", n) + hb + data


def gen_conformance(root):
    """Unusual and malformed files; the reference reader decides accept or reject."""
    f32 = lambda b, e: {"dtype": "F32", "shape": [(e - b) // 4], "data_offsets": [b, e]}
    d8 = bytes(range(8))
    cases = {
        "leading_space": raw_file(header_text='   {"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', data=d8),
        "leading_newline": raw_file(header_text='\n{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', data=d8),
        "no_padding": raw_file(header_text='{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', data=d8, pad=False),
        "reverse_order": raw_file({"b": f32(8, 16), "a": f32(0, 8)}, data=d8 + d8),
        "null_metadata": raw_file(header_text='{"__metadata__":null,"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', data=d8),
        "extra_field": raw_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1}}, data=d8),
        "metadata_last": raw_file(header_text='{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":"v"}}', data=d8),
        "empty_name": raw_file({"": f32(0, 8)}, data=d8),
        "f8": raw_file({"a": {"dtype": "F8_E4M3", "shape": [3], "data_offsets": [0, 3]}}, data=b"abc"),
        "zero_len_pair": raw_file({"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
                                   "b": {"dtype": "I8", "shape": [2, 0], "data_offsets": [0, 0]}}),
        "tab_padding": raw_file(header_text='{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}\t\t', data=d8, pad=False),
        # malformed
        "short": b"\x08\x00\x00\x00",
        "header_too_large": struct.pack("<Q", 100_000_001) + b"{}" + b" " * 6,
        "header_past_end": raw_file({}, n_override=64),
        "not_utf8": raw_file(header_text=b'{"a\xff":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', data=d8),
        "not_json": raw_file(header_text="{nope}", data=b""),
        "not_object": raw_file(header_text="[1,2]"),
        "unknown_dtype": raw_file({"a": {"dtype": "F128", "shape": [2], "data_offsets": [0, 8]}}, data=d8),
        "lowercase_dtype": raw_file({"a": {"dtype": "f32", "shape": [2], "data_offsets": [0, 8]}}, data=d8),
        "negative_dim": raw_file({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, data=d8),
        "float_dim": raw_file({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, data=d8),
        "three_offsets": raw_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 8]}}, data=d8),
        "missing_shape": raw_file({"a": {"dtype": "F32", "data_offsets": [0, 8]}}, data=d8),
        "hole": raw_file({"a": f32(0, 8), "b": f32(12, 20)}, data=d8 + d8 + b"0000"),
        "overlap": raw_file({"a": f32(0, 8), "b": f32(4, 12)}, data=d8 + b"0000"),
        "not_from_zero": raw_file({"a": f32(4, 12)}, data=d8 + b"0000"),
        "end_before_begin": raw_file({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}}, data=d8),
        "size_mismatch": raw_file({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, data=d8),
        "truncated": raw_file({"a": f32(0, 8)}, data=d8[:7]),
        "trailing": raw_file({"a": f32(0, 8)}, data=d8 + b"x"),
        "overflow_shape": raw_file({"a": {"dtype": "F32", "shape": [1 << 32, 1 << 32, 16], "data_offsets": [0, 8]}}, data=d8),
        "metadata_not_string": raw_file(header_text='{"__metadata__":{"k":1}}'),
        "entry_not_object": raw_file(header_text='{"a":[1]}'),
        "nul_in_header": raw_file(header_text=b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}\x00', data=d8, pad=False),
        "trailing_garbage": raw_file(header_text='{}x'),
    }
    for sub in ("accept", "reject"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    for name, blob in sorted(cases.items()):
        try:
            deserialize(blob)
            ok = True
        except Exception:
            ok = False
        with open(os.path.join(root, "accept" if ok else "reject", name + ".safetensors"), "wb") as f:
            f.write(blob)
        print(f"{'accept' if ok else 'reject'}: {name}")


def check(cdir):
    """Loads the files optitpu wrote (tests/test_safetensors.c) and compares every value."""
    bad = 0
    files = sorted(f for f in os.listdir(cdir) if f.endswith(".safetensors"))
    if not files:
        print(f"no .safetensors files in {cdir}")
        return 1
    for fn in files:
        path = os.path.join(cdir, fn)
        with open(path, "rb") as f:
            blob = f.read()
        items = dict(deserialize(blob))
        # names are "<dtype>_<salt>" or "<dtype>_<salt>_<anything>"; shapes come from the file
        for name, t in items.items():
            dtype = t["dtype"].upper()
            ref_name = {"BFLOAT16": "BF16", "FLOAT16": "F16", "FLOAT32": "F32", "FLOAT64": "F64",
                        "INT8": "I8", "INT16": "I16", "INT32": "I32", "INT64": "I64",
                        "UINT8": "U8", "UINT16": "U16", "UINT32": "U32", "UINT64": "U64"}.get(dtype, dtype)
            salt = int(name.split("_")[1])
            n = int(np.prod(t["shape"])) if t["shape"] else 1
            want = pattern(ref_name, n, salt)
            if bytes(t["data"]) != want:
                print(f"MISMATCH {fn}:{name}")
                bad += 1
        if all(t["dtype"].upper() not in ("BF16", "BFLOAT16") for t in items.values()):
            arrays = load_file(path)  # the numpy loader too
            assert set(arrays) == set(items), fn
        print(f"ok {fn}: {len(items)} tensors")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("gen", "check"):
        print(__doc__)
        sys.exit(2)
    print(f"safetensors {safetensors.__version__}, numpy {np.__version__}")
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
