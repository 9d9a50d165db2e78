"""optitpu.Pod collectives and optitpu.train."""

import numpy as np
import pytest

import optitpu


@pytest.fixture(scope="module")
def pod():
    return optitpu.Pod(devices=8, topology="torus-2x4")


@pytest.mark.parametrize("algo", ["auto", "ring", "tree", "direct", "halving_doubling"])
def test_allreduce_every_algorithm(pod, algo):
    rng = np.random.default_rng(1)
    xs = [rng.integers(-8, 8, size=1000).astype(np.float32) for _ in range(8)]
    want = sum(xs)
    outs = pod.allreduce(xs, algo=algo)
    for o in outs:
        np.testing.assert_array_equal(np.asarray(o), want)  # small integers: exact in any order
    first = np.asarray(outs[0]).tobytes()
    assert all(np.asarray(o).tobytes() == first for o in outs)  # bit-identical on every device


def test_ops_and_other_collectives(pod):
    xs = [np.full(6, r + 1, np.float64) for r in range(8)]
    np.testing.assert_array_equal(np.asarray(pod.allreduce(xs, "max")[2]), 8)
    np.testing.assert_array_equal(np.asarray(pod.allreduce(xs, "mean")[0]), 4.5)
    g = pod.allgather([np.array([r, -r], np.int32) for r in range(8)])
    assert g[5].shape == (16,)
    np.testing.assert_array_equal(np.asarray(g[5]).reshape(8, 2)[:, 0], np.arange(8))
    rs = pod.reduce_scatter([np.arange(16, dtype=np.float32).reshape(8, 2) for _ in range(8)])
    np.testing.assert_array_equal(np.asarray(rs[3]), [[48, 56]])
    b = pod.broadcast(xs, root=6)
    assert all(np.all(np.asarray(x) == 7) for x in b)
    a2a = pod.alltoall([np.full(8, r, np.float32) for r in range(8)])
    np.testing.assert_array_equal(np.asarray(a2a[4]), np.arange(8))
    np.testing.assert_array_equal(xs[0], 1)  # inputs untouched


def test_bad_collectives(pod):
    xs = [np.ones(4, np.float32)] * 8
    with pytest.raises(optitpu.InvalidArgument):
        pod.allreduce(xs[:5])
    with pytest.raises(optitpu.ShapeMismatch):
        pod.allreduce(xs[:7] + [np.ones(5, np.float32)])
    with pytest.raises(optitpu.InvalidArgument):
        pod.allreduce(xs, "xor")
    with pytest.raises(optitpu.InvalidArgument):
        pod.allreduce([np.ones(4, np.uint8)] * 8)
    with pytest.raises(optitpu.ShapeMismatch):
        pod.reduce_scatter([np.ones(12, np.float32)] * 8)
    with pytest.raises(optitpu.InvalidArgument):
        pod.broadcast(xs, root=8)
    with pytest.raises(optitpu.InvalidArgument):
        optitpu.Pod(devices=4, topology="torus-2x4")
    with pytest.raises(optitpu.InvalidArgument):
        optitpu.Pod(devices=0)
    np.testing.assert_array_equal(np.asarray(pod.allreduce(xs)[0]), 8)  # still usable


def test_train_small_run(tmp_path):
    seen = []
    rep = optitpu.train(steps=40, devices=2, topology="ring-2", eval_every=20, seed=3,
                        ckpt_dir=str(tmp_path / "ck"), ckpt_every=20,
                        on_progress=lambda p: seen.append(p["step"]))
    assert rep["final_step"] == 40 and rep["steps_run"] == 40
    assert 0 < rep["test_accuracy"] <= 1
    assert seen == list(range(1, 41))
    assert set(rep["params"]) == {"dense0.w", "dense0.b", "dense1.w", "dense1.b"}
    assert rep["params"]["dense0.w"].shape == (64, 128)
    assert optitpu.ckpt.latest(tmp_path / "ck") == 40
    again = optitpu.train(steps=40, devices=2, topology="ring-2", eval_every=20, seed=3)
    for k, v in rep["params"].items():  # deterministic: the same bits
        np.testing.assert_array_equal(np.asarray(v), np.asarray(again["params"][k]))


def test_train_bad_options():
    with pytest.raises(optitpu.InvalidArgument):
        optitpu.train(steps=1, bogus=1)
    with pytest.raises(optitpu.InvalidArgument):
        optitpu.train(steps=1, model="transformer")
    with pytest.raises(optitpu.Error):
        optitpu.train(steps=1, devices=3, topology="torus-2x4")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_train_callback_error_does_not_stop_run():
    def boom(p):
        raise RuntimeError("callback failed")

    rep = optitpu.train(steps=5, devices=1, eval_every=5, on_progress=boom)
    assert rep["final_step"] == 5


def _small(**kw):
    base = dict(steps=12, devices=2, topology="ring-2", eval_every=12, seed=5)
    base.update(kw)
    return optitpu.train(**base)


def test_train_state_shard_and_accumulation_options():
    ref = _small()
    bf = _small(state="bf16")
    assert bf["optim_state_bytes_per_device"] * 2 == ref["optim_state_bytes_per_device"]
    # ZeRO-1: each device holds half the state, and the run is bit for bit the unsharded one
    sh = _small(shard_optimizer=True, allreduce="tree")
    assert sh["shard_optimizer"] and not ref["shard_optimizer"]
    assert sh["optim_state_bytes_per_device"] < ref["optim_state_bytes_per_device"]
    assert sh["params_sha256"] == ref["params_sha256"]
    acc = _small(grad_accum=2, batch_size=64)
    assert acc["final_step"] == 12 and acc["params_sha256"] != ref["params_sha256"]
    loc = _small(local_sgd=4)
    assert loc["final_step"] == 12
    gc = _small(grad_compress="bf16")
    assert gc["final_step"] == 12 and gc["params_sha256"] != ref["params_sha256"]


def test_train_overlap_and_int8_state():
    on = _small(overlap="on")
    off = _small(overlap="off")
    assert on["overlap"] and not off["overlap"]
    # overlapping the all-reduce with the backward changes when bytes move, not the sums
    assert on["params_sha256"] == off["params_sha256"]
    q8 = _small(state="int8")
    assert q8["final_step"] == 12
    # 1-byte moments for the large tensors (small ones stay f32, as in bitsandbytes)
    assert q8["optim_state_bytes_per_device"] * 2 < off["optim_state_bytes_per_device"]


def test_train_migrate_replicas_and_slice(tmp_path):
    ref = _small(devices=4, topology="ring-4")
    for mig in ((1, 6), "1@6"):
        m = _small(devices=4, topology="ring-4", migrate=mig)
        assert m["migrations"] == 1 and m["params_sha256"] == ref["params_sha256"]
    ck = tmp_path / "ck"
    _small(ckpt_dir=str(ck), ckpt_every=6, ckpt_replicas=2)
    for d in (ck, tmp_path / "ck.replica1", tmp_path / "ck.replica2"):
        assert optitpu.ckpt.latest(d) == 12
    s = _small(topology=None, devices=None, slice="v4-2x2x2:2x1x1",
               slice_registry=str(tmp_path / "slices"))
    assert len(s["slice_devices"]) == 2 and s["final_step"] == 12


def test_train_bad_new_options(tmp_path):
    with pytest.raises(optitpu.InvalidArgument):
        _small(state="int4")
    with pytest.raises(optitpu.InvalidArgument):
        _small(overlap="sometimes")
    with pytest.raises(optitpu.InvalidArgument):
        _small(migrate="1-6")
    with pytest.raises(optitpu.InvalidArgument):
        _small(ckpt_replicas=-1, ckpt_dir=str(tmp_path / "a"))
    with pytest.raises(optitpu.InvalidArgument):
        _small(ckpt_replicas=1)  # no ckpt_dir
    with pytest.raises(optitpu.InvalidArgument, match="0..8"):
        _small(ckpt_replicas=[str(tmp_path / f"r{i}") for i in range(9)],
               ckpt_dir=str(tmp_path / "b"))
    with pytest.raises(optitpu.InvalidArgument, match="couples elements"):
        _small(shard_optimizer=True, optimizer="adafactor")
    with pytest.raises(optitpu.InvalidArgument, match="migrate"):
        _small(migrate=(7, 3))  # no device 7 in a pod of 2
    with pytest.raises(optitpu.InvalidArgument, match="devices"):
        _small(topology=None, devices=None, slice="v4-2x2x2:9x9x9",
               slice_registry=str(tmp_path / "slices"))
    with pytest.raises(optitpu.InvalidArgument):
        _small(devices=1 << 40)


def test_train_compile_cache(tmp_path):
    first = _small(compile_cache=str(tmp_path / "cc"))
    again = _small(compile_cache=str(tmp_path / "cc"))
    assert first["compile_cache_misses"] > 0 and first["compile_cache_hits"] == 0
    assert again["compile_cache_hits"] == first["compile_cache_misses"]
    assert again["params_sha256"] == first["params_sha256"]
    assert _small(compile_cache=False)["compile_cache_misses"] == 0
