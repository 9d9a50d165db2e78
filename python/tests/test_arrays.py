"""Arrays in and out without copies: buffer protocol, __dlpack__, dtypes."""

import numpy as np
import pytest

import optitpu
from optitpu import _core

IDENTITY = """HloModule id_{t}
ENTRY main {{
  x = {t}[2,3] parameter(0)
  ROOT r = {t}[2,3] add(x, x)
}}
"""

DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "s32": np.int32,
          "s64": np.int64, "u8": np.uint8, "s8": np.int8, "u32": np.uint32, "s16": np.int16}


@pytest.mark.parametrize("t", sorted(DTYPES))
def test_dtype_roundtrip(t):
    x = (np.arange(6) % 5).astype(DTYPES[t]).reshape(2, 3)
    exe = optitpu.compile(IDENTITY.format(t=t))
    y = exe(x)
    assert y.dtype == t and y.shape == (2, 3)
    got = np.asarray(y)
    assert got.dtype == DTYPES[t]
    np.testing.assert_array_equal(got, x + x)


def test_bf16_with_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([[1.5, -2, 3], [0.25, 8, -0.5]], dtype=ml_dtypes.bfloat16)
    exe = optitpu.compile(IDENTITY.format(t="bf16"))
    y = exe(x)
    assert y.dtype == "bf16"
    got = np.asarray(y)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.astype(np.float32), 2 * x.astype(np.float32))
    # bf16 has no buffer-protocol format: a formatted buffer request is refused, not misread
    with pytest.raises(BufferError):
        memoryview(y)
    assert np.shares_memory(got, np.asarray(y))


def test_output_zero_copy(axpy):
    x = np.arange(4, dtype=np.float32)
    y = axpy(np.float32(2), x, x)
    a, b = np.asarray(y), np.from_dlpack(y)
    assert a.ctypes.data == y.data_ptr == b.ctypes.data
    assert np.shares_memory(a, b)
    a[0] = 99  # writable, and the same memory
    assert np.asarray(y)[0] == 99
    assert y.data_ptr % 64 == 0
    mv = memoryview(y)
    assert mv.format == "f" and mv.shape == (4,) and mv.c_contiguous


def test_output_outlives_views(axpy):
    x = np.arange(4, dtype=np.float32)
    views = [np.asarray(axpy(1.0, x, x)), np.from_dlpack(axpy(1.0, x, x))]
    import gc

    gc.collect()
    for v in views:  # the arrays are kept alive by the views
        np.testing.assert_array_equal(v, 2 * x)


def test_input_zero_copy():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    dt, shape, addr, ro = _core.describe(x)
    assert (dt, shape, addr, ro) == ("f32", (2, 3), x.ctypes.data, False)
    # through __dlpack__ (a NumPy array's capsule) the same memory
    class DL:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    assert _core.describe(DL(x))[2] == x.ctypes.data


def test_inputs_not_modified(axpy):
    x = np.arange(4, dtype=np.float32)
    y = np.ones(4, np.float32)
    x0, y0 = x.copy(), y.copy()
    axpy(3.0, x, y)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)


def test_non_contiguous_rejected(axpy):
    x = np.arange(8, dtype=np.float32)[::2]
    with pytest.raises(optitpu.InvalidArgument, match="C-contiguous"):
        axpy(1.0, x, x)
    with pytest.raises(optitpu.InvalidArgument):
        _core.describe(np.ones((3, 4), np.float32).T)


def test_misaligned_buffer_copied():
    raw = bytearray(4 * 6 + 1)
    x = np.frombuffer(raw, dtype=np.float32, count=6, offset=1).reshape(2, 3)
    exe = optitpu.compile(IDENTITY.format(t="f32"))
    np.testing.assert_array_equal(np.asarray(exe(x)), np.zeros((2, 3), np.float32))


def test_array_copy_and_repr():
    x = np.arange(3, dtype=np.int64)
    a = optitpu.array(x)
    assert repr(a) == "optitpu.Array(s64[3])"
    assert a.data_ptr != x.ctypes.data
    np.testing.assert_array_equal(a.numpy(), x)
    with pytest.raises(TypeError):
        optitpu.Array()  # only the library makes arrays


def test_dlpack_device_and_stream(axpy):
    y = axpy(1.0, np.ones(4, np.float32), np.ones(4, np.float32))
    assert y.__dlpack_device__() == (1, 0)
    with pytest.raises(optitpu.InvalidArgument):
        y.__dlpack__(stream=1)


def test_unknown_objects_rejected(axpy):
    x = np.ones(4, np.float32)
    for bad in (object(), "abc", [1.0, 2.0, 3.0, 4.0], None):
        with pytest.raises(optitpu.InvalidArgument):
            axpy(1.0, bad, x)
    with pytest.raises(optitpu.InvalidArgument):
        axpy(1.0, np.ones(4, np.complex64), x)
