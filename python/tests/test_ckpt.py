"""optitpu.ckpt: verified checkpoints and safetensors files."""

import numpy as np
import pytest

import optitpu
from optitpu import ckpt


def tensors():
    return {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.array([1, 2], np.int64)}


def test_save_restore_verify_latest(tmp_path):
    root = tmp_path / "ck"
    assert ckpt.latest(root) is None
    ckpt.save(root, 10, tensors())
    ckpt.save(root, 20, {"w": np.zeros((3, 4), np.float32), "b": np.zeros(2, np.int64)},
              metrics={"loss": 0.5})
    assert ckpt.latest(root) == 20
    assert ckpt.verify(root)["step"] == 20
    step, t = ckpt.restore(root, 10)
    assert step == 10
    np.testing.assert_array_equal(np.asarray(t["w"]), tensors()["w"])
    np.testing.assert_array_equal(np.asarray(t["b"]), tensors()["b"])
    with pytest.raises(optitpu.AlreadyExists):
        ckpt.save(root, 20, tensors())


def test_corruption_detected_and_rolled_back(tmp_path):
    root = tmp_path / "ck"
    ckpt.save(root, 1, tensors())
    ckpt.save(root, 2, tensors())
    f = next((tmp_path / "ck" / "step_00000002").glob("*.safetensors"))
    data = bytearray(f.read_bytes())
    data[-1] ^= 0x55
    f.write_bytes(bytes(data))
    with pytest.raises(optitpu.CorruptData, match="safetensors"):
        ckpt.verify(root, 2)
    with pytest.raises(optitpu.CorruptData):
        ckpt.restore(root, 2)
    step, _ = ckpt.restore(root)  # the newest that verifies
    assert step == 1
    assert ckpt.latest(root) == 1 and ckpt.latest(root, verified=False) == 2


def test_restore_missing(tmp_path):
    with pytest.raises(optitpu.NotFound):
        ckpt.restore(tmp_path / "none")


def test_roles(tmp_path):
    ckpt.save(tmp_path, 5, None, roles={"model": tensors(), "optim": {"m": np.ones(3, np.float32)}})
    step, roles = ckpt.restore(tmp_path, all_roles=True)
    assert step == 5 and set(roles) == {"model", "optim"}
    np.testing.assert_array_equal(np.asarray(roles["optim"]["m"]), np.ones(3))


def test_safetensors_interop(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    t = {"a": np.arange(6, dtype=np.float16).reshape(2, 3), "b": np.array([True, False]),
         "c": np.ones((2, 2), np.float64)}
    st.save_file(t, str(tmp_path / "ref.safetensors"))
    got = ckpt.load_file(tmp_path / "ref.safetensors")
    for k in t:
        np.testing.assert_array_equal(np.asarray(got[k]), t[k])
    ckpt.save_file(tmp_path / "ours.safetensors", got, {"format": "np"})
    back = st.load_file(str(tmp_path / "ours.safetensors"))
    for k in t:
        np.testing.assert_array_equal(back[k], t[k])
    # byte-identical to the reference writer
    st.save_file(t, str(tmp_path / "ref2.safetensors"), metadata={"format": "np"})
    assert (tmp_path / "ref2.safetensors").read_bytes() == (tmp_path / "ours.safetensors").read_bytes()
    bf = {"x": np.array([1.5, -2], dtype=ml_dtypes.bfloat16)}
    ckpt.save_file(tmp_path / "bf.safetensors", bf)
    got = ckpt.load_file(tmp_path / "bf.safetensors")["x"]
    assert got.dtype == "bf16"
    np.testing.assert_array_equal(np.asarray(got).astype(np.float32), [1.5, -2])


def test_safetensors_corrupt(tmp_path):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{bad}xxx")
    with pytest.raises(optitpu.CorruptData):
        ckpt.load_file(p)
    with pytest.raises(optitpu.NotFound):
        ckpt.load_file(tmp_path / "missing.safetensors")
    with pytest.raises(optitpu.InvalidArgument):
        ckpt.save_file(tmp_path / "x.safetensors", {"a": object()})
