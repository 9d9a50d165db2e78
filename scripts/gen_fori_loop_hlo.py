#!/usr/bin/env python3
"""Writes the `fori_unrolled` graph-shape family's fixture: a JAX program with
`lax.fori_loop(0, 1000, body, carry, unroll=True)` lowered by JAX to HLO text.

    python3 scripts/gen_fori_loop_hlo.py [--out tests/data/compiler/fori_loop_unrolled_1000.hlo]

JAX lowers the fully unrolled loop to 1,000 `call`s of one closed body computation chained through
get-tuple-element (about 4k instructions; about 22k once the calls are inlined). The body reads
both carried values (a two-back recurrence, the residual shape), a per-iteration scalar from the
loop counter, a mean (reduce + broadcast) and two transcendentals. The entry takes (x, y) and
returns (x, y), both f32[16], so that copies can be chained to make larger modules
(src/bench/families.c). Needs jax (CPU); deterministic: no randomness, no source metadata.
"""

import argparse
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402


def f(x, y):
    def body(i, c):
        x, y = c
        t = jnp.tanh(x * 0.5 + y * 0.25 + i.astype(jnp.float32) * 1e-3)
        z = t - jnp.mean(t) + jnp.sin(y)
        return (z, x)

    return lax.fori_loop(0, 1000, body, (x, y), unroll=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument(
        "--out",
        default=os.path.join(here, "..", "tests", "data", "compiler", "fori_loop_unrolled_1000.hlo"),
    )
    a = ap.parse_args()
    s = jax.ShapeDtypeStruct((16,), jnp.float32)
    text = jax.jit(f).lower(s, s).as_text(dialect="hlo")
    if "metadata=" in text:  # source paths would make the file depend on the machine
        raise SystemExit("unexpected metadata in the lowered module")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as fh:
        fh.write(text)
    print(f"{a.out}: {text.count(chr(10))} lines (jax {jax.__version__})")


if __name__ == "__main__":
    main()
