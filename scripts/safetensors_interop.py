#!/usr/bin/env python3
"""safetensors interoperability between optitpu and the reference Python package.

    pip install safetensors numpy torch   # torch: the CPU wheel is enough
    python3 scripts/safetensors_interop.py gen   tests/data/safetensors   # Python -> fixtures
    python3 scripts/safetensors_interop.py check tests/data/safetensors/c # files optitpu wrote

`gen` writes files with the reference writer into DIR/py/ (safetensors.numpy, and the raw
TensorSpec interface for bf16), files saved by safetensors.torch.save_file into DIR/torch/ (every
dtype including bf16 and f16, and f32 values rounded to bf16 and f16 by torch), and malformed or
unusual headers into DIR/accept/ or DIR/reject/ according to what the reference reader
(safetensors.deserialize) decides; tests/test_safetensors.c reads all of them (CI needs no
Python). `check` loads the files tests/test_safetensors.c wrote (committed under DIR/c/) with the
reference reader, safetensors.numpy.load_file and safetensors.torch.load_file, and compares every
value bit for bit with the same deterministic pattern. Both directions exit non-zero on any
mismatch; without torch installed both stop with an error (--no-torch skips the torch parts).
"""
import json
import os
import struct
import sys

import numpy as np
import safetensors
from safetensors import TensorSpec, deserialize, serialize_file
from safetensors.numpy import load_file, save_file

try:
    import torch
    import safetensors.torch as st_torch
except ImportError:  # reported in main()
    torch = None

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
    if torch is not None:
        gen_torch(root)
    gen_conformance(root)


def torch_dtypes():
    """File dtype name -> torch dtype, for the dtypes of the format that torch has."""
    return {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
            "U16": torch.uint16, "F16": torch.float16, "BF16": torch.bfloat16,
            "I32": torch.int32, "U32": torch.uint32, "F32": torch.float32,
            "F64": torch.float64, "I64": torch.int64, "U64": torch.uint64}


def torch_tensor(dtype, shape, salt=0):
    """The pattern as a torch tensor (its bits, not converted values)."""
    n = int(np.prod(shape)) if shape else 1
    raw = bytearray(pattern(dtype, n, salt))
    t = torch.frombuffer(raw, dtype=torch.uint8).clone() if raw else torch.zeros(0, dtype=torch.uint8)
    return t.view(torch_dtypes()[dtype]).reshape(shape)


def finite_f32(n, salt):
    """The F32 pattern with bit 30 cleared: every value finite, |x| < 2 (subnormals included)."""
    bits = np.frombuffer(pattern("F32", n, salt), dtype=np.uint32) & np.uint32(0xBFFFFFFF)
    return torch.from_numpy(bits.view(np.float32).copy())


def f16_range_f32(n, salt):
    """The F32 pattern with the exponent moved into 2^-24 .. 2^15 (f16 subnormals and normals);
    every 4th value is an exact bf16 rounding tie, every 4th + 1 an exact f16 tie."""
    bits = np.frombuffer(pattern("F32", n, salt), dtype=np.uint32).astype(np.uint64)
    exp = (bits >> 23) & 0xFF
    bits = (bits & 0x807FFFFF) | (((exp % 40) + 103) << 23)
    i = np.arange(n)
    bits = np.where(i % 4 == 0, (bits & ~np.uint64(0xFFFF)) | 0x8000, bits)
    bits = np.where(i % 4 == 1, (bits & ~np.uint64(0x1FFF)) | 0x1000, bits)
    return torch.from_numpy(bits.astype(np.uint32).view(np.float32).copy())


def gen_torch(root):
    """Files written by safetensors.torch.save_file."""
    d = os.path.join(root, "torch")
    os.makedirs(d, exist_ok=True)
    # 1. every dtype (bf16 and f16 included), the bits of the pattern
    tensors = {"t_" + name.lower(): torch_tensor(name, SHAPES[name]) for name, _, _ in DTYPES}
    st_torch.save_file(tensors, os.path.join(d, "all_dtypes.safetensors"),
                       metadata={"format": "pt"})
    # 2. torch's own rounding: f32 values and the same values cast to bf16 and f16 by torch
    #    (round to nearest even; below the f16 range: zero), a non-contiguous source made
    #    contiguous, and a scalar
    src = finite_f32(4096, 3)
    mid = f16_range_f32(512, 5)
    wide = finite_f32(6 * 8, 4).reshape(8, 6).t()  # transposed view, saved contiguous
    rounded = {"src": src.reshape(64, 64), "bf16": src.to(torch.bfloat16).reshape(64, 64),
               "f16": src.to(torch.float16).reshape(64, 64),
               # magnitudes in the f16 range, with exact rounding ties
               "src_mid": mid, "f16_mid": mid.to(torch.float16), "bf16_mid": mid.to(torch.bfloat16),
               "wide_t": wide.contiguous(), "scalar_bf16": torch.tensor(1.5, dtype=torch.bfloat16)}
    st_torch.save_file(rounded, os.path.join(d, "rounded.safetensors"), metadata={"format": "pt"})
    # each saved file loads back in torch with the same bits
    for fn, ts in (("all_dtypes.safetensors", tensors), ("rounded.safetensors", rounded)):
        back = st_torch.load_file(os.path.join(d, fn))
        for k, v in ts.items():
            assert back[k].dtype == v.dtype and torch.equal(back[k].view(torch.uint8) if v.dim() else back[k],
                                                            v.contiguous().view(torch.uint8) if v.dim() else v), (fn, k)
    print(f"torch {torch.__version__}: {d}/all_dtypes.safetensors, rounded.safetensors")


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
            for name, a in arrays.items():
                if a.tobytes() != bytes(items[name]["data"]):
                    print(f"MISMATCH (numpy) {fn}:{name}")
                    bad += 1
        loaders = "raw, numpy" if all(t["dtype"].upper() not in ("BF16", "BFLOAT16")
                                      for t in items.values()) else "raw"
        if torch is not None:
            tensors = st_torch.load_file(path)  # the torch loader: bf16 and f16 included
            if set(tensors) != set(items):
                print(f"MISMATCH (torch) {fn}: names {sorted(tensors)} vs {sorted(items)}")
                bad += 1
            for name, t in tensors.items():
                want = bytes(items[name]["data"])
                got = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
                if list(t.shape) != list(items[name]["shape"]) or got != want:
                    print(f"MISMATCH (torch) {fn}:{name} {t.dtype}")
                    bad += 1
            loaders += ", torch " + ",".join(sorted({str(t.dtype).replace("torch.", "")
                                                    for t in tensors.values()}))
        print(f"ok {fn}: {len(items)} tensors ({loaders})")
    return 1 if bad else 0


if __name__ == "__main__":
    no_torch = "--no-torch" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--no-torch"]
    if len(args) != 2 or args[0] not in ("gen", "check"):
        print(__doc__)
        sys.exit(2)
    sys.argv[1:] = args
    if torch is None and not no_torch:
        print("torch is not installed (pip install torch, the CPU wheel is enough); "
              "--no-torch skips the torch direction")
        sys.exit(2)
    if no_torch:
        torch = None
    print(f"safetensors {safetensors.__version__}, numpy {np.__version__}, "
          f"torch {torch.__version__ if torch is not None else 'not used'}")
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
