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
