"""optitpu.jit: a JAX function lowered by JAX to HLO text, compiled and run by optitpu."""

import functools


def jit(fn, **compile_kwargs):
    """Wraps fn: each new input signature (pytree structure, shapes, dtypes) lowers fn once with
    jax.jit(fn, keep_unused=True).lower(*args).as_text(dialect="hlo") and compiles that HLO with
    optitpu.compile(**compile_kwargs); every call runs the executable on the arguments' memory
    and returns the outputs in fn's output structure as optitpu.Array leaves (jax.numpy.asarray
    or np.asarray take them without a copy)."""
    import jax

    from . import compile as _compile

    cache = {}

    @functools.wraps(fn)
    def wrapped(*args):
        leaves, tree = jax.tree_util.tree_flatten(args)
        sig = (tree, tuple((getattr(x, "shape", ()), str(getattr(x, "dtype", type(x))))
                           for x in leaves))
        hit = cache.get(sig)
        if hit is None:
            lowered = jax.jit(fn, keep_unused=True).lower(*args)
            exe = _compile(lowered.as_text(dialect="hlo"), **compile_kwargs)
            hit = cache[sig] = (exe, lowered.out_tree)
        exe, out_tree = hit
        outs = exe(*leaves)
        if not isinstance(outs, tuple):
            outs = (outs,)
        return jax.tree_util.tree_unflatten(out_tree, list(outs))

    wrapped.cache_size = lambda: len(cache)
    return wrapped
