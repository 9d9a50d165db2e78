"""optitpu.jit and JAX arrays (skipped where jax is not installed)."""

import numpy as np
import pytest

import optitpu

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def test_jit_equals_jax_jit():
    def f(x, w, b):
        h = jnp.tanh(x @ w + b)
        return {"out": h * 2.0, "sum": h.sum()}

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    ours = optitpu.jit(f)
    got, want = ours(x, w, b), jax.jit(f)(x, w, b)
    np.testing.assert_allclose(np.asarray(got["out"]), np.asarray(want["out"]), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(float(np.asarray(got["sum"])), float(want["sum"]), rtol=1e-5)
    ours(x + 1, w, b)
    assert ours.cache_size() == 1  # same signature: compiled once
    ours(x[:4], w, b)
    assert ours.cache_size() == 2


def test_jax_arrays_in_and_out():
    f = optitpu.jit(lambda x, y: x * y + 1)
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    y = f(x, x)
    assert isinstance(y, optitpu.Array)
    back = jnp.from_dlpack(y)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(x * x + 1))
    assert optitpu._core.describe(x)[1] == (2, 3)


def test_unused_argument_kept():
    f = optitpu.jit(lambda x, unused: x + 1)
    np.testing.assert_array_equal(np.asarray(f(np.ones(3, np.float32), np.ones(2, np.float32))),
                                  2 * np.ones(3))


def test_transform_on_jax_pytree():
    tx = optitpu.optim.transform("adam", 0.1)
    params = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}
    state = tx.init(params)
    grads = jax.tree_util.tree_map(jnp.ones_like, params)
    updates, state = tx.update(grads, state, params)
    assert set(updates) == {"w", "b"} and updates["w"].shape == (2, 3)
    # adam's first step is -lr, up to optax's f32 bias correction (1 - f32(0.999) = 0.00099998713)
    np.testing.assert_allclose(np.asarray(updates["w"]), -0.1, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(updates["b"]), -0.1, rtol=1e-5)
