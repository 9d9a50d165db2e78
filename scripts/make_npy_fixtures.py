#!/usr/bin/env python3
"""Writes the .npy fixtures in tests/data/npy/ with NumPy itself (tests/test_npy.c reads them).

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install numpy ml-dtypes
    /tmp/venv/bin/python scripts/make_npy_fixtures.py

The files are committed, so CI needs no Python. ml_dtypes is optional (bfloat16 fixture).
"""
import os
import sys

import numpy as np
from numpy.lib import format as npf

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "npy")
os.makedirs(out, exist_ok=True)


def save(name, a):
    np.save(os.path.join(out, name), a, allow_pickle=False)


def write_version(name, a, version):
    with open(os.path.join(out, name), "wb") as f:
        npf.write_array(f, a, version=version, allow_pickle=False)


# good files, C order, little-endian: tests/test_npy.c checks every value and that optitpu writes
# the same bytes back
save("f4_2x3.npy", (np.arange(6, dtype="<f4") * 0.5).reshape(2, 3))
save("f8_scalar.npy", np.array(3.25, dtype="<f8"))
save("f2_3.npy", np.array([1.0, -2.5, 65504.0], dtype="<f2"))
save("i1_3.npy", np.array([-128, 0, 127], dtype="i1"))
save("i2_3.npy", np.array([-32768, 1, 32767], dtype="<i2"))
save("i4_0x3.npy", np.zeros((0, 3), dtype="<i4"))
save("i8_5.npy", np.array([-2, -1, 0, 1, 2**62], dtype="<i8"))
save("u1_4.npy", np.array([0, 1, 127, 255], dtype="u1"))
save("u2_2.npy", np.array([0, 65535], dtype="<u2"))
save("u4_2.npy", np.array([7, 4294967295], dtype="<u4"))
save("u8_2.npy", np.array([9, 18446744073709551615], dtype="<u8"))
save("b1_2x2.npy", np.array([[True, False], [False, True]]))
save("u1_rank8.npy", np.arange(16, dtype="u1").reshape(1, 2, 1, 2, 1, 2, 1, 2))
# other format versions (same data as f4_2x3)
write_version("f4_2x3_v2.npy", (np.arange(6, dtype="<f4") * 0.5).reshape(2, 3), (2, 0))
write_version("f4_2x3_v3.npy", (np.arange(6, dtype="<f4") * 0.5).reshape(2, 3), (3, 0))
# big-endian: read and byte-swapped
save("f4_be.npy", np.array([1.5, -2.0, 3.25], dtype=">f4"))
save("i4_be.npy", np.array([1, -2, 305419896], dtype=">i4"))
save("c16_be.npy", np.array([1.5 - 2j, -0.25 + 4j], dtype=">c16"))
# complex: read and written
save("c8_2.npy", np.array([1 + 2j, 3], dtype="<c8"))
# refused with a clear error
save("f4_fortran.npy", np.asfortranarray((np.arange(6, dtype="<f4")).reshape(2, 3)))
save("u1_rank9.npy", np.zeros((1,) * 9, dtype="u1"))
save("structured.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
try:
    import ml_dtypes

    save("bf16_ml_dtypes.npy", np.array([1.0, -2.0], dtype=ml_dtypes.bfloat16))
except ImportError:
    print("ml_dtypes not installed: bf16_ml_dtypes.npy not regenerated", file=sys.stderr)
print("numpy", np.__version__, "->", os.path.normpath(out))
