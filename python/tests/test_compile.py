"""compile, run, errors, profile, lifetime."""

import gc
import threading

import numpy as np
import pytest

import optitpu

from conftest import AXPY

TUPLE = """HloModule two
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY main {
  x = f32[3] parameter(0)
  s = f32[] constant(0)
  r = f32[] reduce(x, s), dimensions={0}, to_apply=add
  n = f32[3] negate(x)
  ROOT t = (f32[], f32[3]) tuple(r, n)
}
"""


def test_run_equals_expected(axpy):
    x = np.array([1, 2, 3, 4], np.float32)
    y = np.array([10, 20, 30, 40], np.float32)
    np.testing.assert_array_equal(np.asarray(axpy(2.0, x, y)), [12, 24, 36, 48])
    np.testing.assert_array_equal(np.asarray(axpy(np.float32(-1), x, y)), y - x)


@pytest.mark.parametrize("level", [0, 1, 2])
def test_opt_levels_and_tuple_outputs(level):
    exe = optitpu.compile(TUPLE, opt_level=level)
    x = np.array([1.5, -2, 4], np.float32)
    s, n = exe(x)
    assert float(np.asarray(s)) == 3.5
    np.testing.assert_array_equal(np.asarray(n), -x)
    assert exe.outputs == [("f32", ()), ("f32", (3,))]


def test_compile_from_path(tmp_path):
    p = tmp_path / "axpy.hlo"
    p.write_text(AXPY)
    for arg in (p, str(p)):
        exe = optitpu.compile(arg)
        assert exe.params == [("f32", ()), ("f32", (4,)), ("f32", (4,))]
    with pytest.raises(optitpu.NotFound):
        optitpu.compile(tmp_path / "missing.hlo")


def test_hlo_and_profile():
    exe = optitpu.compile(AXPY, profile=True)
    assert "HloModule axpy" in exe.hlo() and "fusion" in exe.hlo()
    x = np.ones(4, np.float32)
    for _ in range(3):
        exe(1.0, x, x)
    prof = exe.profile()
    assert prof["kernels"] == 1 and prof["flops"] > 0
    assert any(p["name"] == "fuse" for p in prof["passes"])
    assert sum(r["calls"] for r in prof["runs"]) == 3


def test_chrome_trace(tmp_path):
    exe = optitpu.compile(AXPY, profile=True)
    exe(1.0, np.ones(4, np.float32), np.ones(4, np.float32))
    exe.chrome_trace(str(tmp_path / "t.json"))
    assert "traceEvents" in (tmp_path / "t.json").read_text()
    with pytest.raises(optitpu.FailedPrecondition):
        optitpu.compile(AXPY).chrome_trace(str(tmp_path / "u.json"))


def test_save_load(tmp_path):
    exe = optitpu.compile(AXPY)
    exe.save(str(tmp_path / "axpy.otx"))
    exe2 = optitpu.load(tmp_path / "axpy.otx")
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(exe2(2.0, x, x)), 3 * x)
    data = bytearray((tmp_path / "axpy.otx").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "bad.otx").write_bytes(bytes(data))
    with pytest.raises(optitpu.CorruptData):
        optitpu.load(tmp_path / "bad.otx")


def test_errors_carry_status():
    with pytest.raises(optitpu.ShapeMismatch, match="<input>:4:") as e:
        optitpu.compile("HloModule m\nENTRY main {\n  x = f32[2] parameter(0)\n  ROOT r = f32[3] negate(x)\n}\n")
    assert e.value.status == "SHAPE_MISMATCH"
    with pytest.raises(optitpu.Error) as e:
        optitpu.compile("HloModule m\nENTRY main {\n  x = f32[2] bogus(0)\n}\n")
    assert str(e.value).startswith(e.value.status)
    assert issubclass(optitpu.InvalidArgument, ValueError)
    assert issubclass(optitpu.IOError, OSError)
    with pytest.raises(optitpu.InvalidArgument):
        optitpu.compile(12)
    with pytest.raises(optitpu.InvalidArgument):
        optitpu.compile(AXPY, opt_level=7)


def test_bad_run_arguments(axpy):
    x = np.ones(4, np.float32)
    with pytest.raises(optitpu.InvalidArgument, match="takes 3 arrays, got 2"):
        axpy(1.0, x)
    with pytest.raises(optitpu.ShapeMismatch, match="parameter 1: expected f32\\[4\\], got f32\\[5\\]"):
        axpy(1.0, np.ones(5, np.float32), x)
    with pytest.raises(optitpu.ShapeMismatch, match="got f64"):
        axpy(1.0, x.astype(np.float64), x)
    with pytest.raises(optitpu.ShapeMismatch):
        axpy(np.ones(1, np.float32), x, x)
    with pytest.raises(optitpu.InvalidArgument):
        axpy(1.0, x, x, donate=True, other=1)
    with pytest.raises(optitpu.InvalidArgument):
        axpy(1.0, x, x, bogus=1)


def test_closed_executable_raises():
    exe = optitpu.compile(AXPY)
    with exe:
        pass
    assert exe.closed
    x = np.ones(4, np.float32)
    for call in (lambda: exe(1.0, x, x), exe.hlo, exe.profile, lambda: exe.params):
        with pytest.raises(optitpu.FailedPrecondition):
            call()
    exe.close()  # twice is fine


def test_stable_abi_build():
    assert optitpu._core.__file__.endswith(".abi3.so")


def test_gc_frees():
    import weakref

    exe = optitpu.compile(AXPY)
    y = exe(1.0, np.ones(4, np.float32), np.ones(4, np.float32))
    del exe
    gc.collect()
    np.testing.assert_array_equal(np.asarray(y), 2 * np.ones(4))  # outputs outlive it
    assert weakref is not None


def test_threads_run_concurrently(axpy):
    x = np.arange(4, dtype=np.float32)
    errors = []

    def work(k):
        try:
            for _ in range(200):
                r = np.asarray(axpy(float(k), x, x))
                if not np.array_equal(r, k * x + x):
                    errors.append(k)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_donate_writes_in_place():
    hlo = """HloModule inc, input_output_alias={ {}: (0, {}, must-alias) }
ENTRY main {
  x = f32[4] parameter(0)
  one = f32[] constant(1)
  b = f32[4] broadcast(one), dimensions={}
  ROOT r = f32[4] add(x, b)
}
"""
    exe = optitpu.compile(hlo)
    x = np.zeros(4, np.float32)
    y = exe(x)  # not donated: x untouched, a new array
    assert np.all(x == 0) and np.all(np.asarray(y) == 1)
    r = exe(x, donate=True)
    assert r is x and np.all(x == 1)
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(optitpu.InvalidArgument, match="read-only"):
        exe(ro, donate=True)


def test_donated_memory_shared_with_another_argument():
    hlo = """HloModule acc, input_output_alias={ {}: (0, {}, must-alias) }
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  ROOT r = f32[4] add(x, y)
}
"""
    exe = optitpu.compile(hlo)
    buf = np.arange(8, dtype=np.float32)
    for x, y in ((buf[:4], buf[:4]), (buf[:4], buf[2:6]), (buf[2:6], buf[:4])):
        with pytest.raises(optitpu.InvalidArgument, match="share memory"):
            exe(x, y, donate=True)
    np.testing.assert_array_equal(buf, np.arange(8))  # nothing written
    np.testing.assert_array_equal(np.asarray(exe(buf[:4], buf[:4])), 2 * buf[:4])  # no donation
    x = buf[:4].copy()
    exe(x, buf[4:], donate=True)  # disjoint: fine
    np.testing.assert_array_equal(x, buf[:4] + buf[4:])


def test_compile_cache(tmp_path):
    exe = optitpu.compile(AXPY, cache=str(tmp_path / "cache"))
    exe2 = optitpu.compile(AXPY, cache=str(tmp_path / "cache"))
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(np.asarray(exe2(1.0, x, x)), np.asarray(exe(1.0, x, x)))
    assert any((tmp_path / "cache").iterdir())


ALLREDUCE4 = """HloModule ar, replica_count=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[3] parameter(0)
  id = u32[] replica-id()
  f = f32[] convert(id)
  b = f32[3] broadcast(f), dimensions={}
  y = f32[3] add(x, b)
  ROOT r = f32[3] all-reduce(y), replica_groups={{0,1,2,3}}, to_apply=add
}
"""


def test_run_on_pod_devices_with_collectives():
    pod = optitpu.Pod(devices=4, topology="ring-4")
    exe = optitpu.compile(ALLREDUCE4)
    x = np.zeros(3, np.float32)
    outs = exe(x, devices=pod)  # one input read by every device
    assert len(outs) == 4
    for o in outs:  # sum over replicas of (x + replica id)
        np.testing.assert_array_equal(np.asarray(o), [6, 6, 6])
    xs = [np.full(3, r, np.float32) for r in range(4)]  # one input per device
    outs = exe(xs, devices=pod._h)
    for o in outs:
        np.testing.assert_array_equal(np.asarray(o), [12, 12, 12])
    outs = exe(xs, devices=4)  # a pod of 4 for this call
    np.testing.assert_array_equal(np.asarray(outs[3]), [12, 12, 12])
    np.testing.assert_array_equal(xs[1], 1)  # inputs untouched
    with pytest.raises(optitpu.InvalidArgument, match="runs on 4 devices"):
        exe(x, devices=2)
    with pytest.raises(optitpu.InvalidArgument, match="one array per device"):
        exe(xs[:3], devices=pod)
    with pytest.raises(optitpu.ShapeMismatch, match="device 2"):
        exe(xs[:2] + [np.zeros(4, np.float32)] + xs[3:], devices=pod)
    with pytest.raises(optitpu.InvalidArgument, match="donate"):
        exe(x, devices=pod, donate=True)
    with pytest.raises(optitpu.InvalidArgument, match="Pod"):
        exe(x, devices="four")
    with pytest.raises(optitpu.InvalidArgument):
        exe(x, devices=0)
    with pytest.raises(optitpu.InvalidArgument):
        exe(x, x, devices=pod)
    np.testing.assert_array_equal(np.asarray(exe(x, devices=pod)[0]), [6, 6, 6])  # still usable
    # a pod collective and a call share the communicators: the pod still works
    np.testing.assert_array_equal(np.asarray(pod.allreduce(xs)[0]), [6, 6, 6])


def test_single_replica_module_on_every_device(axpy):
    xs = [np.full(4, r, np.float32) for r in range(3)]
    outs = axpy([1.0, 2.0, 3.0], xs, np.ones(4, np.float32), devices=3)
    for r, o in enumerate(outs):  # independent runs, each with its own inputs
        np.testing.assert_array_equal(np.asarray(o), (r + 1) * r + 1)
    assert axpy(2.0, xs[1], xs[2], devices=None).shape == (4,)  # devices=None: one device
