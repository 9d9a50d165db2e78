#!/usr/bin/env python3
"""Writes the JAX conformance corpus: HLO modules with inputs and expected outputs.

    python3 scripts/gen_jax_corpus.py [--out tests/data] [--only SUBSTRING]

Output (see tests/data/README.md for the exact formats):
  tests/data/jax/<case>/module.hlo         jax.jit(f).lower(*args).as_text(dialect="hlo")
  tests/data/jax/<case>/module.opt.hlo     the same after XLA's CPU pipeline (.compile().as_text())
  tests/data/jax/<case>/input_<i>.npy      parameter i of the entry computation
  tests/data/jax/<case>/expected_<j>.npy   element j of the result tuple (or the single result)
  tests/data/jax/<case>/vjp.hlo, cotangent_<j>.npy, grad_<i>.npy   reverse-mode checks (some cases)
  tests/data/jax/cases.json                the index: files, dtypes, shapes, tolerances, versions
  tests/data/hlo/jax/*.hlo                 HLO text only, for the parser's conformance run

Needs jax[cpu] (and optax for the Adam case). Deterministic: fixed seeds (derived from each case
name), single-threaded XLA, source paths stripped from metadata; re-running rewrites identical files.
bf16 arrays are stored as their uint16 bit patterns ('<u2'); cases.json records the real dtype.
"""

import argparse
import json
import os
import re
import shutil
import sys
import zlib

os.environ["XLA_FLAGS"] = (
    "--xla_force_host_platform_device_count=8 --xla_cpu_multi_thread_eigen=false "
    "intra_op_parallelism_threads=1"
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

jax.config.update("jax_enable_x64", True)
# Keep only the file's base name in HLO metadata, so the output does not depend on the checkout.
jax.config.update("jax_hlo_source_file_canonicalization_regex", r".*/")

BF16 = ml_dtypes.bfloat16
DTYPES = {
    "pred": np.bool_, "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
    "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
    "f16": np.float16, "bf16": BF16, "f32": np.float32, "f64": np.float64,
    "c64": np.complex64, "c128": np.complex128,
}
FLOATS = ["f16", "bf16", "f32", "f64"]
SINTS = ["s8", "s16", "s32", "s64"]
UINTS = ["u8", "u16", "u32", "u64"]
INTS = SINTS + UINTS


def dtname(a):
    dt = np.asarray(a).dtype
    for k, v in DTYPES.items():
        if dt == np.dtype(v):
            return k
    raise ValueError(f"unsupported dtype {dt}")


EXACT = {"exact": True}


def ulp_tol(n, atol=None):
    t = {"ulp": n}
    if atol is not None:
        t["atol"] = atol
    return t


def close_tol(rtol, atol):
    return {"rtol": rtol, "atol": atol}


# ------------------------------------------------------------------------------------------------
# Comparison helpers (the same rule the C tests apply; see tests/data/README.md)
# ------------------------------------------------------------------------------------------------

def ordered_bits(a):
    """Maps floats to integers whose difference is the distance in ulps (+0 == -0)."""
    a = np.asarray(a)
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    i = a.view(bits).astype(np.int64)
    mask = (1 << (8 * a.dtype.itemsize - 1)) - 1
    return np.where(i >= 0, i, -(i & mask))


def ulp_dist(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype
    return np.abs(ordered_bits(a) - ordered_bits(b))


def check(got, exp, tol):
    """Returns None when got matches exp under tol, else a message."""
    got, exp = np.asarray(got), np.asarray(exp)
    if got.shape != exp.shape or got.dtype != exp.dtype:
        return f"shape/dtype {got.shape}/{got.dtype} vs {exp.shape}/{exp.dtype}"
    if got.dtype.kind == "c":  # each component compared as a real number
        part = np.float32 if got.dtype == np.complex64 else np.float64
        got = np.ascontiguousarray(got).view(part)
        exp = np.ascontiguousarray(exp).view(part)
    if got.dtype.kind not in "f" and got.dtype != np.dtype(BF16):
        return None if np.array_equal(got, exp) else "integer mismatch"
    g64, e64 = got.astype(np.float64), exp.astype(np.float64)
    gn, en = np.isnan(g64), np.isnan(e64)
    if not np.array_equal(gn, en):
        return "nan positions differ"
    gi, ei = np.isinf(g64), np.isinf(e64)
    if not np.array_equal(gi, ei) or not np.array_equal(g64[gi], e64[ei]):
        return "infinities differ"
    fin = ~(gn | gi)
    if tol.get("exact"):
        ok = ordered_bits(got)[fin] == ordered_bits(exp)[fin]
        same_sign = np.signbit(g64[fin]) == np.signbit(e64[fin])
        return None if np.all(ok & same_sign) else "not bit-exact"
    ok = np.zeros(fin.sum(), bool)
    if "ulp" in tol:
        ok |= ulp_dist(got, exp)[fin] <= tol["ulp"]
    d = np.abs(g64[fin] - e64[fin])
    if "atol" in tol or "rtol" in tol:
        ok |= d <= tol.get("atol", 0.0) + tol.get("rtol", 0.0) * np.abs(e64[fin])
    if np.all(ok):
        return None
    k = np.argmax(~ok)
    return f"element {k}: {g64[fin][k]!r} vs {e64[fin][k]!r}"


# ------------------------------------------------------------------------------------------------
# Case registry
# ------------------------------------------------------------------------------------------------

CASES = []


class Case:
    def __init__(self, name, fn, args, tol, group, ops_note=None, grad=False, ref=None,
                 ref_tol=None, f64_ref=False, note=None, hlo_copy=False):
        self.name, self.fn, self.args, self.tol, self.group = name, fn, args, tol, group
        self.grad, self.ref, self.ref_tol, self.f64_ref = grad, ref, ref_tol, f64_ref
        self.note, self.hlo_copy = note, hlo_copy


def case(name, fn, args, tol, group, **kw):
    assert re.fullmatch(r"[a-z0-9_]+", name), name
    assert all(c.name != name for c in CASES), name
    CASES.append(Case(name, fn, [np.asarray(a) for a in args], tol, group, **kw))


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def rand(rng, shape, dt, lo=-1.0, hi=1.0):
    dt = DTYPES[dt] if isinstance(dt, str) else dt
    if np.dtype(dt).kind in "iu":
        return rng.integers(lo, hi, size=shape, endpoint=True, dtype=dt)
    if np.dtype(dt) == np.bool_:
        return rng.random(shape) < 0.5
    return rng.uniform(lo, hi, size=shape).astype(dt)


def normal(rng, shape, dt="f32", scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(DTYPES[dt])


def ints(vals, dt):
    """Python ints -> an integer array of dtype dt, wrapping like a C cast."""
    dt = np.dtype(DTYPES[dt])
    bits = 8 * dt.itemsize
    if dt.kind == "u":
        return np.array([int(v) % 2 ** bits for v in vals], np.uint64).astype(dt)
    half = 2 ** (bits - 1)
    return np.array([(int(v) + half) % 2 ** bits - half for v in vals], np.int64).astype(dt)


def float_specials(dt):
    fi = ml_dtypes.finfo(DTYPES[dt])
    return [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5,
            float(fi.max), -float(fi.max), float(fi.smallest_normal), -float(fi.smallest_normal)]


# ---- elementwise: floats ------------------------------------------------------------------------

def sigmoid_ref(x):
    return 1.0 / (1.0 + np.exp(-x))


def erf_ref(x):
    import math
    return np.vectorize(math.erf)(x)


# name -> (lax function, HLO opcode, domain (lo, hi), numpy float64 reference or None if exact)
FLOAT_UNARY = {
    "abs": (lax.abs, "abs", (-4, 4), None),
    "negate": (lax.neg, "negate", (-4, 4), None),
    "sign": (lax.sign, "sign", (-4, 4), None),
    "floor": (lax.floor, "floor", (-4, 4), None),
    "ceil": (lax.ceil, "ceil", (-4, 4), None),
    "round_afz": (lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
                  "round-nearest-afz", (-4, 4), None),
    "round_even": (lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
                   "round-nearest-even", (-4, 4), None),
    "is_finite": (lax.is_finite, "is-finite", (-4, 4), None),
    "exp": (lax.exp, "exponential", (-10, 10), np.exp),
    "expm1": (lax.expm1, "exponential-minus-one", (-3, 3), np.expm1),
    "log": (lax.log, "log", (0.01, 100), np.log),
    "log1p": (lax.log1p, "log-plus-one", (-0.9, 10), np.log1p),
    "sqrt": (lax.sqrt, "sqrt", (0, 100), np.sqrt),
    "rsqrt": (lax.rsqrt, "rsqrt", (0.01, 100), lambda x: 1.0 / np.sqrt(x)),
    "cbrt": (lax.cbrt, "cbrt", (-100, 100), np.cbrt),
    "tanh": (lax.tanh, "tanh", (-5, 5), np.tanh),
    "sine": (lax.sin, "sine", (-6, 6), np.sin),
    "cosine": (lax.cos, "cosine", (-6, 6), np.cos),
    "tan": (lax.tan, "tan", (-1.4, 1.4), np.tan),
    "erf": (lax.erf, "erf", (-3, 3), erf_ref),
    "logistic": (jax.nn.sigmoid, "logistic", (-10, 10), sigmoid_ref),
}

# Exact ops carry a reference too: rounding the float64 result once is the correctly rounded
# answer, so any difference beyond the stated ulps (denormal flushing, say) stops the generator.
FLOAT_BINARY = {
    "add": (lax.add, (-4, 4), np.add),
    "subtract": (lax.sub, (-4, 4), np.subtract),
    "multiply": (lax.mul, (-4, 4), np.multiply),
    "divide": (lax.div, (-4, 4), np.divide),
    "remainder": (lax.rem, (-8, 8), np.fmod),
    "maximum": (lax.max, (-4, 4), np.maximum),
    "minimum": (lax.min, (-4, 4), np.minimum),
    "power": (lax.pow, (0.1, 4), np.power),
    "atan2": (lax.atan2, (-4, 4), np.arctan2),
}


def transcendental_tol(dt):
    # The C implementation and XLA each sit within a few ulps of the true value; the generator
    # checks XLA's distance to a float64 reference and widens this bound when it is larger.
    return {"f16": ulp_tol(1), "bf16": ulp_tol(1), "f32": ulp_tol(4, 1e-6),
            "f64": ulp_tol(4, 1e-14)}[dt]


def add_float_elementwise():
    n = 40
    for op, (fn, hlo, (lo, hi), ref) in FLOAT_UNARY.items():
        for dt in FLOATS:
            name = f"unary_{op}_{dt}"
            rng = rng_for(name)
            vals = rand(rng, (n,), "f64", lo, hi)
            if ref is None:
                vals = np.concatenate([float_specials(dt), vals])
                vals[20:26] = [0.49999997, -0.49999997, 3.5, -3.5, 4.5, -4.5]
            else:
                vals = np.concatenate([[np.nan, 0.0, -0.0], vals])
                if op in ("exp", "tanh", "sine", "cosine", "cbrt", "expm1", "erf", "logistic"):
                    pass
                if op in ("exp", "tanh", "erf", "logistic", "cbrt", "expm1"):
                    vals = np.concatenate([vals, [np.inf, -np.inf]])
                if op in ("log", "sqrt", "log1p"):
                    vals = np.concatenate([vals, [np.inf]])
            x = vals.astype(DTYPES[dt])
            tol = EXACT if ref is None else transcendental_tol(dt)
            case(name, fn, [x], tol, "elementwise",
                 ref=(None if ref is None else (lambda r: lambda a: r(a.astype(np.float64)))(ref)),
                 note="JAX writes the logistic function out as 1/(1+exp(-x))"
                 if hlo == "logistic" else None, hlo_copy=(dt == "f32"))
    for op, (fn, (lo, hi), ref) in FLOAT_BINARY.items():
        for dt in FLOATS:
            name = f"binary_{op}_{dt}"
            rng = rng_for(name)
            a = rand(rng, (n,), "f64", lo, hi)
            b = rand(rng, (n,), "f64", lo, hi)
            exact_op = op not in ("power", "atan2")
            if exact_op:
                sp = float_specials(dt)
                a = np.concatenate([sp, sp[::-1], a])
                b = np.concatenate([sp[3:] + sp[:3], sp, b])
                if op in ("divide", "remainder"):
                    b[-4:] = [0.0, -0.0, 0.0, -0.0]
                # XLA's CPU backend flushes denormal results; keep them out of these cases
                # (denormal_ftz_f32 records that behaviour on its own).
                with np.errstate(all="ignore"):
                    r64 = ref(a.astype(DTYPES[dt]).astype(np.float64),
                              b.astype(DTYPES[dt]).astype(np.float64))
                tiny = float(ml_dtypes.finfo(DTYPES[dt]).smallest_normal)
                b = np.where((r64 != 0) & (np.abs(r64) < tiny), 1.0, b)
            else:
                if op == "power":
                    a = np.concatenate([a, [-2.0, -2.0, 0.0, 0.0, 1.0, np.nan, 2.0]])
                    b = np.concatenate([b, [3.0, 2.0, 0.0, -1.0, np.nan, 0.0, np.inf]])
                else:
                    a = np.concatenate([a, [0.0, -0.0, 0.0, -0.0, 1.0, np.inf]])
                    b = np.concatenate([b, [0.0, 0.0, -0.0, -0.0, np.nan, np.inf]])
            x, y = a.astype(DTYPES[dt]), b.astype(DTYPES[dt])
            strict = None
            if exact_op:
                tol = EXACT if (dt in ("f32", "f64") or op in ("maximum", "minimum", "remainder")) \
                    else ulp_tol(1)
                strict = tol.get("ulp", 0)
            else:
                tol = transcendental_tol(dt)
            case(name, fn, [x, y], tol, "elementwise", ref_tol=strict,
                 ref=(None if ref is None else (lambda r: lambda a, b: r(a.astype(np.float64),
                                                                        b.astype(np.float64)))(ref)),
                 hlo_copy=(dt == "f32"))
    # Gradient cases: finite inputs inside each op's domain, away from points where the
    # derivative is undefined, so every rule is checked on clean values (the cases above include
    # NaN/inf/0 inputs and carry no vjp).
    for op in ("add", "subtract", "multiply", "divide", "maximum", "minimum"):
        name = f"grad_{op}_f64"
        rng = rng_for(name)
        x, y = rand(rng, (3, 5), "f64", 0.5, 2), rand(rng, (3, 5), "f64", -2, -0.5)
        case(name, FLOAT_BINARY[op][0], [x, y], EXACT, "grad", grad=True)
    grad_domains = {"exp": (-3, 3), "expm1": (-2, 2), "log": (0.1, 10), "log1p": (-0.5, 5),
                    "sqrt": (0.1, 10), "rsqrt": (0.1, 10), "cbrt": (0.2, 5), "tanh": (-3, 3),
                    "sine": (-3, 3), "cosine": (-3, 3), "tan": (-1.2, 1.2), "erf": (-2, 2),
                    "logistic": (-5, 5), "abs": (0.1, 2), "negate": (-2, 2)}
    for op, (lo, hi) in grad_domains.items():
        fn, _, _, ref = FLOAT_UNARY[op]
        for dt in ("f32", "f64"):
            name = f"grad_{op}_{dt}"
            rng = rng_for(name)
            x = rand(rng, (12,), dt, lo, hi)
            if op == "abs":
                x = x * np.where(rng.random(12) < 0.5, -1, 1).astype(x.dtype)
            case(name, fn, [x], transcendental_tol(dt) if ref is not None else EXACT, "grad",
                 grad=True, ref=None if ref is None else (lambda r: lambda a: r(
                     a.astype(np.float64)))(ref))
    for op in ("power", "atan2"):
        fn, (lo, hi), ref = FLOAT_BINARY[op]
        for dt in ("f32", "f64"):
            name = f"grad_{op}_{dt}"
            rng = rng_for(name)
            x, y = rand(rng, (12,), dt, max(lo, 0.2), hi), rand(rng, (12,), dt, -2, 2)
            case(name, fn, [x, y], transcendental_tol(dt), "grad", grad=True,
                 ref=(lambda r: lambda a, b: r(a.astype(np.float64), b.astype(np.float64)))(ref))
    rng = rng_for("grad_select_compare")
    case("grad_select_compare_f32", lambda a, b: jnp.where(a > b, a * a, b * 3.0),
         [normal(rng, (4, 5)), normal(rng, (4, 5))], close_tol(1e-6, 1e-7), "grad", grad=True,
         note="select on a compare: the gradient flows to the taken branch only")
    case("grad_convert_f32_f64", lambda a: jnp.sin(a.astype(jnp.float64)).astype(jnp.float32),
         [normal(rng, (6,))], ulp_tol(4, 1e-6), "grad", grad=True,
         note="convert in both directions around a float64 op")
    case("grad_clamp_f32", lambda a: lax.clamp(np.float32(-0.5), a, np.float32(0.7)),
         [np.array([-1.2, -0.3, 0.1, 0.65, 0.9, 2.0], np.float32)], EXACT, "grad", grad=True)
    case("grad_reduce_max_no_ties_f32", lambda a: jnp.max(a, axis=1),
         [normal(rng, (3, 7))], EXACT, "grad", grad=True)
    case("grad_integer_pow_f32", lambda a: a ** 3 + lax.integer_pow(a, -2),
         [rand(rng, (6,), "f32", 0.5, 2)], close_tol(1e-6, 1e-6), "grad", grad=True,
         f64_ref=True, note="integer_pow is written out as multiplies and a divide")
    # denormals: XLA's CPU backend flushes them (FTZ/DAZ); this case records that behaviour.
    tiny = np.float32(ml_dtypes.finfo(np.float32).smallest_normal)
    x = np.array([tiny, tiny * 3, 1e-39, -1e-39, 1e-45, 1.0], np.float32)
    case("denormal_ftz_f32", lambda a, b: a * b, [x, np.full(6, 0.5, np.float32)], EXACT,
         "elementwise", note="XLA CPU flushes denormal results (and inputs) to zero: "
         "an implementation that keeps denormals differs here and only here")


# ---- elementwise: integers and pred ------------------------------------------------------------

def int_edge_values(dt):
    ii = np.iinfo(DTYPES[dt])
    v = [0, 1, 2, 3, 7, ii.max, ii.max - 1, ii.min, ii.min + 1]
    if ii.min < 0:
        v += [-1, -2, -3, -7]
    return v


def add_int_elementwise():
    n = 24
    unary = {"abs": lax.abs, "negate": lax.neg, "sign": lax.sign}
    for op, fn in unary.items():
        for dt in SINTS:
            name = f"unary_{op}_{dt}"
            x = ints(int_edge_values(dt) + list(rand(rng_for(name), (n,), dt, -100, 100)), dt)
            case(name, fn, [x], EXACT, "elementwise", hlo_copy=(dt == "s32"))
    for op, fn in {"not": lax.bitwise_not, "popcnt": lax.population_count, "clz": lax.clz}.items():
        for dt in INTS:
            name = f"unary_{op}_{dt}"
            ii = np.iinfo(DTYPES[dt])
            x = ints(int_edge_values(dt) + list(rand(rng_for(name), (n,), dt, ii.min, ii.max)), dt)
            case(name, fn, [x], EXACT, "elementwise", hlo_copy=(dt == "u32"))
    binary = {"add": lax.add, "subtract": lax.sub, "multiply": lax.mul, "divide": lax.div,
              "remainder": lax.rem, "maximum": lax.max, "minimum": lax.min, "and": lax.bitwise_and,
              "or": lax.bitwise_or, "xor": lax.bitwise_xor, "shift_left": lax.shift_left,
              "shift_right_arithmetic": lax.shift_right_arithmetic,
              "shift_right_logical": lax.shift_right_logical}
    for op, fn in binary.items():
        for dt in INTS:
            name = f"binary_{op}_{dt}"
            rng = rng_for(name)
            ii = np.iinfo(DTYPES[dt])
            bits = 8 * np.dtype(DTYPES[dt]).itemsize
            ev = int_edge_values(dt)
            if op.startswith("shift"):
                a = ev + list(rand(rng, (n,), dt, ii.min, ii.max))
                amounts = [0, 1, bits - 1, bits, bits + 1, 2 * bits] + ([-1] if ii.min < 0 else [])
                b = (amounts * 8)[:len(ev)] + list(rng.integers(0, bits, n))
            elif op in ("divide", "remainder"):
                a = ev + [5, 5, -5 if ii.min < 0 else 6, ii.min] + list(rand(rng, (n,), dt, ii.min,
                                                                            ii.max))
                b = [0] * len(ev) + [2, 3, 2, -1 if ii.min < 0 else 1] + \
                    [v if v != 0 else 1 for v in rand(rng, (n,), dt, -20 if ii.min < 0 else 0, 20)]
            else:
                a = ev + list(rand(rng, (n,), dt, ii.min, ii.max))
                b = ev[::-1] + list(rand(rng, (n,), dt, ii.min, ii.max))
            x, y = ints(a, dt), ints(b, dt)
            case(name, fn, [x, y], EXACT, "elementwise", hlo_copy=(dt == "s32"))
    rng = rng_for("pred")
    p, q = rand(rng, (16,), "pred"), rand(rng, (16,), "pred")
    for op, fn in {"and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor}.items():
        case(f"binary_{op}_pred", fn, [p, q], EXACT, "elementwise")
    case("unary_not_pred", lax.bitwise_not, [p], EXACT, "elementwise")


def add_compare_select_convert():
    def compare_all(a, b):
        return (lax.eq(a, b), lax.ne(a, b), lax.lt(a, b), lax.le(a, b), lax.gt(a, b), lax.ge(a, b))

    for dt in FLOATS + INTS + ["pred"]:
        name = f"compare_{dt}"
        rng = rng_for(name)
        if dt in FLOATS:
            sp = float_specials(dt)
            a = np.array(sp + sp + list(rand(rng, (16,), "f64", -2, 2).round(1)), DTYPES[dt])
            b = np.array(sp + sp[::-1] + list(rand(rng, (16,), "f64", -2, 2).round(1)), DTYPES[dt])
        elif dt == "pred":
            a, b = rand(rng, (16,), "pred"), rand(rng, (16,), "pred")
        else:
            ev = int_edge_values(dt)
            a = ints(ev + ev + list(rand(rng, (16,), dt, 0, 5)), dt)
            b = ints(ev + ev[::-1] + list(rand(rng, (16,), dt, 0, 5)), dt)
        case(name, compare_all, [a, b], EXACT, "elementwise", hlo_copy=dt in ("f32", "u32"),
             note="outputs: EQ, NE, LT, LE, GT, GE")
    # total order comparisons as jnp.sort prints them (type=TOTALORDER)
    rng = rng_for("compare_totalorder_f32")
    for dt in ("f32", "bf16"):
        name = f"select_{dt}"
        rng = rng_for(name)
        c = rand(rng, (4, 6), "pred")
        case(name, lax.select, [c, normal(rng, (4, 6), dt), normal(rng, (4, 6), dt)], EXACT,
             "elementwise", grad=False)
    rng = rng_for("select_s32")
    case("select_s32", lax.select, [rand(rng, (4, 6), "pred"), rand(rng, (4, 6), "s32", -9, 9),
                                    rand(rng, (4, 6), "s32", -9, 9)], EXACT, "elementwise")
    rng = rng_for("select_scalar_pred_f32")
    case("select_scalar_pred_f32", lambda p, a, b: lax.select(p, a, b),
         [np.bool_(False), normal(rng, (3,)), normal(rng, (3,))], EXACT, "elementwise")
    rng = rng_for("clamp_f32")
    x = np.concatenate([normal(rng, (20,), scale=2), [np.nan, np.inf, -np.inf]]).astype(np.float32)
    case("clamp_f32", lambda lo, v, hi: lax.clamp(lo, v, hi),
         [np.float32(-1.0), x, np.float32(1.5)], EXACT, "elementwise", hlo_copy=True)
    rng = rng_for("clamp_array_s32")
    case("clamp_array_s32", lax.clamp, [rand(rng, (10,), "s32", -5, 0), rand(rng, (10,), "s32", -20, 20),
                                        rand(rng, (10,), "s32", 1, 5)], EXACT, "elementwise")
    # convert between every pair of a representative set, including out-of-range and NaN values
    src_vals = {
        "f32": [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e10, -1e10,
                3e9, -3e9, 255.5, 256.0, -129.0, 65504.0, 65520.0, 1e-5, 3.14159, -2.71828,
                1.00390625, 1.01171875, 33554431.0],
        "f64": [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 2.5, -2.5, 1e300, -1e300, 3e9, 1e-8,
                0.1, 1.0 + 2 ** -30, 16777217.0, 9.3e18],
        "f16": [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 2.5, -2.5, 65504.0, -300.0, 0.1, 1000.0],
        "bf16": [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 2.5, -2.5, 3e38, -300.0, 0.1, 1e10],
        "s32": [0, 1, -1, 127, 128, -129, 255, 256, 65535, 16777217, 2 ** 31 - 1, -2 ** 31],
        "s64": [0, 1, -1, 2 ** 31, -2 ** 31 - 1, 2 ** 53 + 1, 2 ** 63 - 1, -2 ** 63],
        "u32": [0, 1, 127, 128, 255, 256, 2 ** 31, 2 ** 32 - 1, 16777217],
        "u8": [0, 1, 127, 128, 200, 255],
        "s8": [0, 1, -1, 127, -128, 100],
        "pred": [True, False, True],
    }
    targets = ["pred", "s8", "s32", "s64", "u8", "u32", "f16", "bf16", "f32", "f64"]
    for src, vals in src_vals.items():
        if src in FLOATS:
            x = np.array(vals, np.float64).astype(DTYPES[src])
        elif src == "pred":
            x = np.array(vals, np.bool_)
        else:
            x = ints(vals, src)
        for dst in targets:
            if dst == src:
                continue
            name = f"convert_{src}_to_{dst}"
            case(name, (lambda d: lambda a: lax.convert_element_type(a, DTYPES[d]))(dst), [x],
                 EXACT, "elementwise", hlo_copy=(src == "f32"),
                 note="float to integer saturates; NaN converts to 0 (XLA CPU semantics)"
                 if src in FLOATS and dst not in FLOATS + ["pred"] else None)
    rng = rng_for("bitcast")
    f = normal(rng, (6,))
    case("bitcast_f32_to_s32", lambda a: lax.bitcast_convert_type(a, jnp.int32), [f], EXACT,
         "elementwise", hlo_copy=True)
    case("bitcast_u32_to_f32", lambda a: lax.bitcast_convert_type(a, jnp.float32),
         [np.array([0, 0x3F800000, 0x7F800000, 0xFF800000, 0x80000000, 0x7FC00000, 0x00000001,
                    0x40490FDB], np.uint32)], EXACT, "elementwise")
    case("bitcast_f32_to_u16", lambda a: lax.bitcast_convert_type(a, jnp.uint16), [f], EXACT,
         "elementwise", note="narrowing bitcast adds a minor dimension of 2 (little-endian halves)")
    case("bitcast_u8x4_to_f32", lambda a: lax.bitcast_convert_type(a, jnp.float32),
         [rand(rng, (3, 4), "u8", 0, 63)], EXACT, "elementwise",
         note="widening bitcast consumes the minor dimension")
    case("bitcast_bf16_to_s16", lambda a: lax.bitcast_convert_type(a, jnp.int16),
         [normal(rng, (5,), "bf16")], EXACT, "elementwise")
    case("bitcast_f64_to_u64", lambda a: lax.bitcast_convert_type(a, jnp.uint64),
         [normal(rng, (5,), "f64")], EXACT, "elementwise")
    x = np.array([1.0, 1.0009765625, 1.00048828125, 1.000732421875, 65504.0, 65520.0, 1e6, 1e-5,
                  6e-8, 3e-8, np.nan, np.inf, -3.14159265, 0.1], np.float32)
    case("reduce_precision_f32_e5m10", lambda a: lax.reduce_precision(a, 5, 10), [x], EXACT,
         "elementwise", hlo_copy=True, note="rounds to f16's precision and range, in f32")
    case("reduce_precision_f32_e8m7", lambda a: lax.reduce_precision(a, 8, 7), [x], EXACT,
         "elementwise", note="rounds to bf16's precision, in f32")
    case("iota_2d_s32", lambda: (lax.broadcasted_iota(jnp.int32, (3, 5), 0),
                                 lax.broadcasted_iota(jnp.int32, (3, 5), 1),
                                 lax.broadcasted_iota(jnp.float32, (2, 4), 1)),
         [], EXACT, "elementwise", hlo_copy=True)


# ---- shape ops -------------------------------------------------------------------------------

def add_shape_ops():
    r = rng_for("shape")
    x = normal(r, (2, 3, 4))
    case("broadcast_scalar", lambda a: jnp.broadcast_to(a, (3, 4)), [np.float32(2.5)], EXACT,
         "shape", hlo_copy=True, grad=True)
    case("broadcast_in_dim_1_to_023", lambda a: lax.broadcast_in_dim(a, (2, 5, 3), (2,)),
         [normal(r, (3,))], EXACT, "shape", grad=True)
    case("broadcast_in_dim_size1", lambda a: lax.broadcast_in_dim(a, (4, 3, 2), (0, 2)),
         [normal(r, (1, 2))], EXACT, "shape", grad=True)
    case("broadcast_s8", lambda a: lax.broadcast_in_dim(a, (3, 2, 4), (0, 2)),
         [rand(r, (3, 4), "s8", -100, 100)], EXACT, "shape")
    case("reshape_f32", lambda a: a.reshape(4, 6), [x], EXACT, "shape", hlo_copy=True, grad=True)
    case("reshape_to_scalar_and_back", lambda a: (a.reshape(()), a.reshape(1, 1, 1)),
         [normal(r, (1,))], EXACT, "shape")
    case("reshape_bf16", lambda a: a.reshape(3, 8), [normal(r, (2, 3, 4), "bf16")], EXACT, "shape")
    case("transpose_f32", lambda a: jnp.transpose(a, (2, 0, 1)), [x], EXACT, "shape", grad=True,
         hlo_copy=True)
    case("transpose_s64_4d", lambda a: jnp.transpose(a, (3, 1, 0, 2)),
         [rand(r, (2, 3, 2, 4), "s64", -1000, 1000)], EXACT, "shape")
    case("slice_strided", lambda a: lax.slice(a, (0, 1, 0), (2, 3, 4), (1, 1, 2)), [x], EXACT,
         "shape", grad=True, hlo_copy=True)
    case("slice_basic_u8", lambda a: a[1:4, 2:], [rand(r, (5, 5), "u8", 0, 255)], EXACT, "shape")
    case("concatenate_3", lambda a, b, c: jnp.concatenate([a, b, c], axis=1),
         [normal(r, (2, 1, 3)), normal(r, (2, 4, 3)), normal(r, (2, 2, 3))], EXACT, "shape",
         grad=True, hlo_copy=True)
    case("concatenate_s32_axis0", lambda a, b: jnp.concatenate([a, b], 0),
         [rand(r, (2, 3), "s32", -9, 9), rand(r, (1, 3), "s32", -9, 9)], EXACT, "shape")
    case("pad_low_high_interior",
         lambda a: lax.pad(a, jnp.asarray(-1.0, a.dtype), ((1, 2, 0), (0, 1, 2))), [normal(r, (3, 3))],
         EXACT, "shape", grad=True, hlo_copy=True)
    case("pad_negative", lambda a: lax.pad(a, jnp.asarray(0.0, a.dtype), ((-1, 1, 0), (2, -2, 1))),
         [normal(r, (4, 5))], EXACT, "shape", grad=True)
    case("pad_s32_value", lambda a, v: lax.pad(a, v, ((2, 0, 1),)),
         [rand(r, (4,), "s32", 0, 9), np.int32(-7)], EXACT, "shape")
    case("reverse", lambda a: lax.rev(a, (0, 2)), [x], EXACT, "shape", grad=True, hlo_copy=True)
    case("copy_via_opt_barrier", lambda a: lax.optimization_barrier(a * 2.0), [normal(r, (3,))],
         EXACT, "shape", note="opt-barrier")
    # gather
    table = normal(r, (6, 4))
    case("gather_take_rows", lambda t, i: jnp.take(t, i, axis=0),
         [table, np.array([5, 0, 2, 2], np.int32)], EXACT, "gather", grad=True, hlo_copy=True)
    case("gather_take_cols_clip", lambda t, i: jnp.take(t, i, axis=1, mode="clip"),
         [table, np.array([[0, 3], [7, -2]], np.int32)], EXACT, "gather", grad=True,
         note="out-of-range indices clamped by XLA gather semantics")
    case("gather_advanced_2d", lambda t, i, j: t[i, j],
         [table, np.array([0, 5, 3], np.int32), np.array([1, 3, 0], np.int32)], EXACT, "gather",
         grad=True)
    dnums = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                       start_index_map=(0, 1))
    case("gather_general_slices",
         lambda t, i: lax.gather(t, i, dnums, slice_sizes=(1, 2),
                                 mode=lax.GatherScatterMode.CLIP),
         [table, np.array([[0, 0], [5, 3], [2, 1]], np.int32)], EXACT, "gather", grad=True,
         note="start indices clamped so the 1x2 slice stays in bounds")
    x3 = normal(r, (2, 5, 3))
    dnb = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(1,),
                                     start_index_map=(1,), operand_batching_dims=(0,),
                                     start_indices_batching_dims=(0,))
    case("gather_batching_dims",
         lambda t, i: lax.gather(t, i, dnb, slice_sizes=(1, 1, 3), mode=lax.GatherScatterMode.CLIP),
         [x3, np.array([[4], [1]], np.int32)], EXACT, "gather",
         note="operand_batching_dims / start_indices_batching_dims")
    # scatter
    base = normal(r, (5, 3))
    upd = normal(r, (3, 3))
    idx = np.array([4, 0, 2], np.int32)
    case("scatter_set_rows", lambda b, i, u: b.at[i].set(u), [base, idx, upd], EXACT, "scatter",
         grad=True, hlo_copy=True)
    intbase = rand(r, (6,), "s32", -5, 5)
    case("scatter_add_duplicates_s32", lambda b, i, u: b.at[i].add(u),
         [intbase, np.array([1, 3, 1, 1, 5, 3], np.int32), rand(r, (6,), "s32", -5, 5)], EXACT,
         "scatter", note="duplicate indices accumulate")
    case("scatter_add_f32", lambda b, i, u: b.at[i].add(u),
         [base, np.array([1, 3, 1], np.int32), np.round(upd * 8) / 8], EXACT, "scatter",
         grad=True, note="duplicate row 1; values are multiples of 1/8 so any order is exact")
    case("scatter_mul_min_max", lambda b, i, u: (b.at[i].mul(u), b.at[i].min(u), b.at[i].max(u)),
         [base, idx, upd], EXACT, "scatter")
    case("scatter_oob_dropped", lambda b, i, u: b.at[i].set(u, mode="drop"),
         [base, np.array([1, 9, -7], np.int32), upd], EXACT, "scatter",
         note="out-of-bounds updates are skipped")
    case("scatter_2d_points", lambda b, i, j, u: b.at[i, j].add(u),
         [normal(r, (4, 4)), np.array([0, 3, 2], np.int32), np.array([1, 3, 0], np.int32),
          normal(r, (3,))], EXACT, "scatter", grad=True)
    # dynamic slice / update
    case("dynamic_slice", lambda a, i, j: lax.dynamic_slice(a, (i, j), (2, 3)),
         [normal(r, (5, 6)), np.int32(1), np.int32(2)], EXACT, "shape", grad=True, hlo_copy=True)
    case("dynamic_slice_clamped", lambda a, i, j: lax.dynamic_slice(a, (i, j), (2, 3)),
         [normal(r, (5, 6)), np.int32(4), np.int32(-3)], EXACT, "shape",
         note="start indices clamped to [0, dim - size]")
    case("dynamic_slice_s64_index", lambda a, i: lax.dynamic_slice_in_dim(a, i, 3, axis=0),
         [rand(r, (7,), "s32", -9, 9), np.int64(2)], EXACT, "shape")
    case("dynamic_update_slice", lambda a, u, i, j: lax.dynamic_update_slice(a, u, (i, j)),
         [normal(r, (5, 6)), normal(r, (2, 2)), np.int32(3), np.int32(1)], EXACT, "shape",
         grad=True, hlo_copy=True)
    case("dynamic_update_slice_clamped", lambda a, u, i: lax.dynamic_update_slice(a, u, (i, jnp.int32(0))),
         [rand(r, (4, 3), "u8", 0, 200), rand(r, (2, 3), "u8", 0, 200), np.int32(9)], EXACT,
         "shape")


# ---- reductions ---------------------------------------------------------------------------------

def add_reductions():
    r = rng_for("reduce")
    x = normal(r, (4, 5, 6))
    sum_tol = close_tol(1e-6, 1e-6)
    case("reduce_sum_all_f32", jnp.sum, [x], sum_tol, "reduce", grad=True, f64_ref=True,
         hlo_copy=True)
    case("reduce_sum_axes_f32", lambda a: jnp.sum(a, axis=(0, 2)), [x], sum_tol, "reduce",
         grad=True, f64_ref=True)
    case("reduce_sum_f64", lambda a: jnp.sum(a, axis=1), [normal(r, (3, 7), "f64")],
         close_tol(1e-15, 1e-15), "reduce")
    case("reduce_sum_bf16", lambda a: jnp.sum(a, axis=1), [normal(r, (3, 16), "bf16")],
         close_tol(2 ** -7, 2 ** -6), "reduce",
         note="XLA accumulates bf16 reductions in f32 and rounds once")
    case("reduce_sum_f16", lambda a: jnp.sum(a, axis=0), [normal(r, (16, 3), "f16")],
         close_tol(2 ** -10, 2 ** -9), "reduce")
    case("reduce_sum_s32", lambda a: jnp.sum(a, axis=0, dtype=jnp.int32),
         [rand(r, (6, 4), "s32", -2 ** 30, 2 ** 30)], EXACT, "reduce", note="wraps on overflow")
    case("reduce_max_f32", lambda a: jnp.max(a, axis=1), [x], EXACT, "reduce", grad=True,
         hlo_copy=True)
    xn = x.copy()
    xn[1, 2, 3] = np.nan
    case("reduce_max_min_nan_f32", lambda a: (jnp.max(a, axis=2), jnp.min(a, axis=2)), [xn],
         EXACT, "reduce", note="NaN propagates through max/min")
    case("reduce_min_s8", lambda a: jnp.min(a, axis=(0, 1)), [rand(r, (3, 4, 2), "s8", -128, 127)],
         EXACT, "reduce")
    case("reduce_max_u32", lambda a: jnp.max(a, axis=0), [rand(r, (5, 3), "u32", 0, 2 ** 32 - 1)],
         EXACT, "reduce")
    case("reduce_prod_f32", lambda a: jnp.prod(a, axis=0), [rand(r, (5, 4), "f32", 0.5, 1.5)],
         close_tol(1e-6, 1e-7), "reduce", grad=True, f64_ref=True)
    case("reduce_prod_s64", lambda a: jnp.prod(a, axis=1), [rand(r, (3, 6), "s64", -9, 9)], EXACT,
         "reduce")
    case("reduce_and_or_pred", lambda a: (jnp.all(a, axis=1), jnp.any(a, axis=0)),
         [rand(r, (4, 5), "pred")], EXACT, "reduce")
    xt = np.round(x * 2) / 2  # ties, so the tie-break rule (lowest index) is exercised
    case("argmax_variadic_f32", lambda a: jnp.argmax(a, axis=1), [xt], EXACT, "reduce",
         hlo_copy=True, note="variadic reduce over (value, index); ties pick the lowest index")
    case("argmin_variadic_s32", lambda a: jnp.argmin(a, axis=0), [rand(r, (6, 3), "s32", -3, 3)],
         EXACT, "reduce")
    case("argmax_nan_f32", lambda a: jnp.argmax(a, axis=-1), [xn.reshape(20, 6)], EXACT,
         "reduce", note="NaN counts as the maximum")
    case("reduce_variadic_sum_max",
         lambda a, b: lax.reduce((a, b), (np.float32(0), np.int32(-2 ** 31)),
                                 lambda x1, x2: (x1[0] + x2[0], jnp.maximum(x1[1], x2[1])), (1,)),
         [np.round(x[0] * 4) / 4, rand(r, (5, 6), "s32", -99, 99)], EXACT, "reduce",
         note="inputs are multiples of 1/4, so the float sum is exact in any order")
    # windows
    img = normal(r, (2, 6, 6, 3))
    case("reduce_window_maxpool", lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (1, 2, 2, 1),
                                                              (1, 2, 2, 1), "VALID"),
         [img], EXACT, "reduce", grad=True, hlo_copy=True)
    case("reduce_window_avgpool_same",
         lambda a: lax.reduce_window(a, 0.0, lax.add, (1, 3, 3, 1), (1, 2, 2, 1), "SAME") / 9.0,
         [img], close_tol(1e-6, 1e-6), "reduce", grad=True, f64_ref=True)
    case("reduce_window_dilated",
         lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (2, 2), (1, 1), ((1, 0), (0, 1)),
                                     base_dilation=(1, 2), window_dilation=(2, 1)),
         [normal(r, (5, 4))], EXACT, "reduce", note="base and window dilation, explicit padding")
    case("cumsum_s32", lambda a: jnp.cumsum(a, axis=1, dtype=jnp.int32),
         [rand(r, (3, 8), "s32", -9, 9)], EXACT, "reduce")
    case("cumsum_f32", lambda a: jnp.cumsum(a, axis=0), [normal(r, (8, 2))], close_tol(1e-6, 1e-6),
         "reduce", f64_ref=True)
    # prefix scans along the last axis and along the first, with a NaN and a subnormal in the
    # lines (the fast scan does such a line again in the reference's per-element order)
    xs = normal(r, (11, 37))
    xs[3, 5] = np.nan
    xs[6, 0] = 1e-40
    case("cumsum_cummax_last_axis_f32",
         lambda a: (jnp.cumsum(a, axis=1), lax.cummax(a, axis=1), lax.cummin(a, axis=0)),
         [xs], close_tol(1e-6, 1e-6), "reduce", f64_ref=False)
    case("select_and_scatter_maxpool_grad",
         jax.grad(lambda a: jnp.sum(lax.reduce_window(a, -jnp.inf, lax.max, (2, 2), (2, 2),
                                                      "VALID") ** 2)),
         [normal(r, (6, 4))], close_tol(1e-6, 1e-6), "reduce", hlo_copy=True,
         note="jax.grad of max pooling: select-and-scatter")


# ---- dot and convolution -------------------------------------------------------------------------

def add_dot_conv():
    r = rng_for("dot")
    dtol = close_tol(1e-5, 1e-5)
    case("dot_matmul_f32", jnp.matmul, [normal(r, (4, 8)), normal(r, (8, 5))], dtol, "dot",
         grad=True, f64_ref=True, hlo_copy=True)
    case("dot_vector_f32", jnp.dot, [normal(r, (16,)), normal(r, (16,))], dtol, "dot", grad=True,
         f64_ref=True)
    case("dot_matvec_f64", jnp.matmul, [normal(r, (5, 7), "f64"), normal(r, (7,), "f64")],
         close_tol(1e-13, 1e-13), "dot", grad=True)
    case("dot_batch_f32", lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
         [normal(r, (3, 4, 6)), normal(r, (3, 6, 2))], dtol, "dot", grad=True, f64_ref=True,
         hlo_copy=True)
    case("dot_general_multi_contract",
         lambda a, b: lax.dot_general(a, b, (((1, 3), (2, 0)), ((0,), (1,)))),
         [normal(r, (2, 3, 4, 5)), normal(r, (5, 2, 3, 6))], dtol, "dot", grad=True, f64_ref=True,
         hlo_copy=True, note="batch (0|1), contracting (1,3|2,0): result batch, lhs free, rhs free")
    case("dot_general_two_batch_dims", lambda a, b: jnp.einsum("abij,abjk->abik", a, b),
         [normal(r, (2, 2, 3, 4)), normal(r, (2, 2, 4, 3))], dtol, "dot", grad=True, f64_ref=True)
    case("dot_outer_f32", lambda a, b: jnp.einsum("i,j->ij", a, b),
         [normal(r, (4,)), normal(r, (3,))], EXACT, "dot",
         note="no contraction: each element is one product")
    case("dot_s32", jnp.matmul, [rand(r, (3, 5), "s32", -50, 50), rand(r, (5, 2), "s32", -50, 50)],
         EXACT, "dot")
    case("dot_s8_to_s32",
         lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32),
         [rand(r, (4, 8), "s8", -128, 127), rand(r, (8, 3), "s8", -128, 127)], EXACT, "dot",
         note="preferred_element_type=s32")
    case("dot_bf16", jnp.matmul, [normal(r, (4, 16), "bf16"), normal(r, (16, 4), "bf16")],
         close_tol(2 ** -7, 2 ** -5), "dot", note="bf16 operands, bf16 result")
    case("dot_bf16_to_f32", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.float32),
         [normal(r, (4, 16), "bf16"), normal(r, (16, 4), "bf16")], dtol, "dot",
         note="bf16 operands, f32 accumulation and result (products are exact in f32)")
    case("dot_f16", jnp.matmul, [normal(r, (3, 8), "f16"), normal(r, (8, 3), "f16")],
         close_tol(2 ** -9, 2 ** -8), "dot")
    case("dot_precision_highest",
         lambda a, b: jnp.matmul(a, b, precision=lax.Precision.HIGHEST),
         [normal(r, (3, 4)), normal(r, (4, 3))], dtol, "dot", f64_ref=True,
         note="operand_precision={highest,highest}")

    ctol = close_tol(1e-5, 1e-5)

    def conv(strides=(1, 1), padding="VALID", lhs_dil=None, rhs_dil=None, fgc=1, bgc=1,
             dn=("NCHW", "OIHW", "NCHW")):
        return lambda a, w: lax.conv_general_dilated(
            a, w, strides, padding, lhs_dilation=lhs_dil, rhs_dilation=rhs_dil,
            dimension_numbers=dn, feature_group_count=fgc, batch_group_count=bgc)

    r = rng_for("conv")
    x = normal(r, (2, 4, 7, 6))
    w = normal(r, (3, 4, 3, 2))
    case("conv2d_valid", conv(), [x, w], ctol, "conv", grad=True, f64_ref=True, hlo_copy=True)
    case("conv2d_strided_same", conv((2, 2), "SAME"), [x, w], ctol, "conv", grad=True,
         f64_ref=True, hlo_copy=True)
    case("conv2d_explicit_padding", conv((1, 2), ((2, 1), (0, 3))), [x, w], ctol, "conv",
         grad=True, f64_ref=True)
    case("conv2d_rhs_dilation", conv((1, 1), ((1, 1), (2, 2)), rhs_dil=(2, 2)), [x, w], ctol,
         "conv", grad=True, f64_ref=True)
    case("conv2d_lhs_dilation_transposed", conv((1, 1), ((2, 2), (1, 1)), lhs_dil=(2, 2)), [x, w],
         ctol, "conv", grad=True, f64_ref=True, hlo_copy=True,
         note="lhs dilation (a transposed convolution)")
    case("conv2d_feature_groups", conv(fgc=2), [x, normal(r, (6, 2, 3, 3))], ctol, "conv",
         grad=True, f64_ref=True, hlo_copy=True, note="feature_group_count=2")
    case("conv2d_depthwise", conv((1, 1), "SAME", fgc=4), [x, normal(r, (4, 1, 3, 3))], ctol,
         "conv", grad=True, f64_ref=True, note="feature_group_count = input features")
    case("conv2d_batch_groups", conv(bgc=2), [normal(r, (4, 3, 5, 5)), normal(r, (4, 3, 2, 2))],
         ctol, "conv", f64_ref=True, hlo_copy=True,
         note="batch_group_count=2 (the shape of a weight-gradient convolution)")
    case("conv2d_nhwc", conv((1, 1), "SAME", dn=("NHWC", "HWIO", "NHWC")),
         [normal(r, (2, 5, 5, 3)), normal(r, (3, 3, 3, 4))], ctol, "conv", grad=True, f64_ref=True,
         hlo_copy=True, note="dim_labels b01f_01io->b01f")
    case("conv1d", lambda a, k: lax.conv_general_dilated(a, k, (2,), ((1, 2),)),
         [normal(r, (2, 3, 9)), normal(r, (4, 3, 3))], ctol, "conv", grad=True, f64_ref=True)
    case("conv3d", lambda a, k: lax.conv_general_dilated(a, k, (1, 1, 1), "VALID"),
         [normal(r, (1, 2, 4, 4, 3)), normal(r, (2, 2, 2, 2, 2))], ctol, "conv", f64_ref=True)
    case("conv2d_f64", conv((2, 1), "SAME"), [normal(r, (1, 2, 5, 5), "f64"),
                                             normal(r, (2, 2, 3, 3), "f64")],
         close_tol(1e-13, 1e-13), "conv", grad=True)
    case("conv2d_bf16", conv(), [normal(r, (1, 4, 5, 5), "bf16"), normal(r, (2, 4, 3, 3), "bf16")],
         close_tol(2 ** -7, 2 ** -5), "conv")
    case("conv2d_s32", conv(), [rand(r, (1, 2, 4, 4), "s32", -9, 9),
                               rand(r, (2, 2, 2, 2), "s32", -9, 9)], EXACT, "conv")


# ---- sort ------------------------------------------------------------------------------------

def add_sort():
    r = rng_for("sort")
    x = normal(r, (3, 10))
    x[1, 3] = np.nan
    x[2, 4] = -0.0
    x[2, 5] = 0.0
    x[0, 1] = np.inf
    case("sort_f32_total_order", lambda a: jnp.sort(a, axis=1), [x], EXACT, "sort",
         hlo_copy=True, note="jnp.sort: NaN last, -0.0 == 0.0 (comparator type=TOTALORDER)")
    case("sort_axis0_s32", lambda a: jnp.sort(a, axis=0), [rand(r, (6, 3), "s32", -5, 5)], EXACT,
         "sort")
    case("sort_descending_lax", lambda a: lax.sort(a, dimension=0, is_stable=False)[::-1],
         [rand(r, (12,), "u8", 0, 255)], EXACT, "sort")
    keys = rand(r, (16,), "s32", 0, 3)
    case("sort_stable_multi_operand",
         lambda k, v, w: lax.sort((k, v, w), dimension=0, is_stable=True, num_keys=1),
         [keys, np.arange(16, dtype=np.int32), normal(r, (16,))], EXACT, "sort", hlo_copy=True,
         note="3 operands, 1 key, stable: equal keys keep their input order")
    case("sort_two_keys",
         lambda k1, k2, v: lax.sort((k1, k2, v), dimension=0, is_stable=True, num_keys=2),
         [rand(r, (12,), "s32", 0, 2), rand(r, (12,), "s32", 0, 2), normal(r, (12,))], EXACT,
         "sort", note="lexicographic on (k1, k2)")
    case("argsort_stable_f32", lambda a: jnp.argsort(a, axis=-1, stable=True),
         [np.round(normal(r, (2, 12)) * 2) / 2], EXACT, "sort")
    case("sort_bf16", lambda a: jnp.sort(a), [normal(r, (9,), "bf16")], EXACT, "sort")
    # top-k with k above 32 and under an eighth of the row (the fast kernel's heap), ties
    case("top_k_40_of_400_f32", lambda a: lax.top_k(a, 40),
         [np.round(normal(r, (3, 400)) * 4) / 4], EXACT, "sort",
         note="k=40 of 400, many ties: equal values in index order")
    # searchsorted (a while loop of TOTALORDER compares and gathers) and the histogram built on
    # it: queries on the edges, between them, outside the range, -0.0 and NaN
    edges = np.linspace(-2, 2, 17).astype(np.float32)
    q = np.concatenate([edges[::3], normal(r, (40,)) * 2, [-0.0, 0.0, np.nan, -np.inf, 7.0]])
    q = q.astype(np.float32)
    case("searchsorted_f32", lambda e, v: (jnp.searchsorted(e, v, side="left"),
                                           jnp.searchsorted(e, v, side="right")),
         [edges, q], EXACT, "sort", note="TOTALORDER compares: -0.0 before 0.0, NaN last")
    case("histogram_bincount", lambda v, k: (jnp.histogram(v, bins=16, range=(-2.0, 2.0))[0],
                                             jnp.bincount(k, length=9)),
         [q[np.isfinite(q)], rand(r, (50,), "s32", 0, 8)], EXACT, "sort",
         note="searchsorted bins (edges exact in f32) and scatter-add counts")


# ---- control flow -----------------------------------------------------------------------------

def add_control_flow():
    r = rng_for("control")
    case("while_fori_loop", lambda a: lax.fori_loop(0, 5, lambda i, c: c * 1.5 + i, a),
         [normal(r, (4,))], close_tol(1e-6, 1e-6), "control", hlo_copy=True, f64_ref=True)

    def collatz(n):
        return lax.while_loop(lambda s: s[0] != 1,
                              lambda s: (jnp.where(s[0] % 2 == 0, s[0] // 2, 3 * s[0] + 1),
                                         s[1] + 1), (n, jnp.int32(0)))

    case("while_data_dependent", collatz, [np.int32(27)], EXACT, "control", hlo_copy=True,
         note="Collatz steps of 27: trip count depends on the data")
    case("cond_true_false", lambda p, a: (lax.cond(p, lambda v: v * 2.0, lambda v: v - 1.0, a),
                                          lax.cond(jnp.logical_not(p), lambda v: v * 2.0,
                                                   lambda v: v - 1.0, a)),
         [np.bool_(True), normal(r, (3,))], EXACT, "control", hlo_copy=True)
    case("switch_index", lambda i, a: lax.switch(i, [lambda v: v + 1.0, lambda v: v * v,
                                                     lambda v: -v], a),
         [np.int32(1), normal(r, (2, 2))], EXACT, "control", hlo_copy=True,
         note="conditional with branch_computations; index 1")
    case("switch_index_out_of_range", lambda i, a: lax.switch(i, [lambda v: v + 1.0,
                                                                  lambda v: -v], a),
         [np.int32(7), normal(r, (2,))], EXACT, "control",
         note="out-of-range index clamps to the last branch")
    case("scan_cumulative", lambda a: lax.scan(lambda c, v: (c + v, c * v), jnp.zeros((), a.dtype), a),
         [normal(r, (6,))], close_tol(1e-6, 1e-6), "control", grad=True, f64_ref=True)
    case("call_nested_jit", lambda a: jax.jit(lambda v: jnp.tanh(v) * 2.0)(a) + 1.0,
         [normal(r, (3,))], ulp_tol(4, 1e-6), "control", note="a call instruction")


# ---- models -----------------------------------------------------------------------------------

def mlp_loss(params, x, y):
    w1, b1, w2, b2 = params
    h = jax.nn.relu(x @ w1 + b1)
    logits = h @ w2 + b2
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


def add_models():
    r = rng_for("models")
    mtol = close_tol(1e-5, 1e-6)
    w1, b1 = normal(r, (8, 16), scale=0.3), normal(r, (16,), scale=0.1)
    w2, b2 = normal(r, (16, 4), scale=0.3), normal(r, (4,), scale=0.1)
    x = normal(r, (6, 8))
    y = np.eye(4, dtype=np.float32)[r.integers(0, 4, 6)]
    case("mlp_forward", lambda w1_, b1_, w2_, b2_, x_, y_: mlp_loss((w1_, b1_, w2_, b2_), x_, y_),
         [w1, b1, w2, b2, x, y], mtol, "model", grad=True, f64_ref=True, hlo_copy=True)
    case("mlp_forward_backward",
         lambda w1_, b1_, w2_, b2_, x_, y_: jax.value_and_grad(mlp_loss)((w1_, b1_, w2_, b2_),
                                                                         x_, y_),
         [w1, b1, w2, b2, x, y], mtol, "model", f64_ref=True, hlo_copy=True,
         note="outputs: loss, dW1, db1, dW2, db2 (jax.value_and_grad)")
    logits = normal(r, (5, 7), scale=3)
    labels = r.integers(0, 7, 5).astype(np.int32)

    def softmax_xent(lg, lb):
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(lg), lb[:, None], axis=1))

    case("softmax_cross_entropy", softmax_xent, [logits, labels], mtol, "model", grad=True,
         f64_ref=True, hlo_copy=True)
    case("softmax", lambda a: jax.nn.softmax(a, axis=-1), [logits], mtol, "model", grad=True,
         f64_ref=True)

    def layer_norm(v, g, b):
        mu = jnp.mean(v, axis=-1, keepdims=True)
        var = jnp.mean((v - mu) ** 2, axis=-1, keepdims=True)
        return (v - mu) * lax.rsqrt(var + 1e-5) * g + b

    case("layer_norm", layer_norm, [normal(r, (4, 16), scale=2), normal(r, (16,)),
                                    normal(r, (16,))], close_tol(1e-5, 1e-5), "model", grad=True,
         f64_ref=True, hlo_copy=True)

    def attention(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(q.shape[-1]).astype(q.dtype)
        mask = jnp.tril(jnp.ones((q.shape[2], k.shape[2]), bool))
        s = jnp.where(mask, s, jnp.finfo(q.dtype).min)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    qkv = [normal(r, (2, 2, 5, 4)) for _ in range(3)]
    case("attention_causal", attention, qkv, close_tol(1e-5, 1e-5), "model", grad=True,
         f64_ref=True, hlo_copy=True)
    case("gelu_tanh", lambda a: jax.nn.gelu(a, approximate=True), [normal(r, (20,))],
         close_tol(1e-6, 1e-6), "model", grad=True, f64_ref=True)
    case("gelu_erf", lambda a: jax.nn.gelu(a, approximate=False), [normal(r, (20,))],
         close_tol(1e-6, 1e-6), "model", grad=True, f64_ref=True)

    def cnn(wc, wd, img):
        h = lax.conv_general_dilated(img, wc, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO",
                                                                                 "NHWC"))
        h = jax.nn.relu(h)
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return jnp.sum(jnp.tanh(h.reshape(h.shape[0], -1) @ wd))

    case("cnn_forward_backward", jax.value_and_grad(cnn, argnums=(0, 1)),
         [normal(r, (3, 3, 1, 4), scale=0.5), normal(r, (16, 3), scale=0.3),
          normal(r, (2, 4, 4, 1))], close_tol(1e-5, 1e-5), "model", f64_ref=True, hlo_copy=True,
         note="outputs: loss, dWconv, dWdense")

    # softmax and log-softmax over a middle axis ((batch, classes, positions) logits) with their
    # gradient: the exp beside its sum over the middle axis is one multi-output fusion
    def softmax_mid(v, c1, c2):
        return (jnp.sum(jax.nn.softmax(v, axis=1) * c1) +
                jnp.sum(jax.nn.log_softmax(v, axis=1) * c2))

    r2 = rng_for("models_building_blocks")  # (r's draws stay those of the cases above)
    case("softmax_middle_axis_value_and_grad", jax.value_and_grad(softmax_mid),
         [normal(r2, (2, 7, 5), scale=3), normal(r2, (2, 7, 5)), normal(r2, (2, 7, 5))],
         close_tol(1e-5, 1e-5), "model", f64_ref=True, note="outputs: loss, d/dv")
    # jax.image.resize x2 (NHWC): nearest is two gathers whose offset dims surround the batch dim,
    # bilinear two dots with interpolation matrices
    case("resize_nearest_bilinear",
         lambda v: (jax.image.resize(v, (2, 8, 6, 3), "nearest"),
                    jax.image.resize(v, (2, 8, 6, 3), "bilinear")),
         [normal(r2, (2, 4, 3, 3))], close_tol(1e-6, 1e-6), "model", f64_ref=True)

    # a bf16 dense layer's gradients over 600 rows: the bias gradient is a reduce over bf16 with
    # a bf16 add (JAX's transpose of the broadcast), of 600 positive terms; summed one by one in
    # bf16 it stops growing near 256 times a term, XLA's sum stays within a few bf16 ulps
    r3 = rng_for("bf16_dense_grad")

    def dense_bf16(w, b, x):
        return jnp.sum(jnp.tanh(x @ w + b).astype(jnp.float32))

    case("bf16_dense_grad_600_rows", jax.grad(dense_bf16, argnums=(0, 1)),
         [normal(r3, (8, 4), "bf16", scale=0.3), normal(r3, (4,), "bf16", scale=0.1),
          normal(r3, (600, 8), "bf16")], close_tol(2 ** -6, 0.0), "model",
         note="outputs: dW, db in bf16 (reduces over 600 rows with a bf16 add)")

    try:
        import optax
    except ImportError:
        print("optax missing: skipping adam_update_optax", file=sys.stderr)
        return
    opt = optax.adam(1e-2, b1=0.9, b2=0.999, eps=1e-8)
    p = {"w": normal(r, (4, 3)), "b": normal(r, (3,))}
    st = opt.init(p)
    g0 = {"w": normal(r, (4, 3)), "b": normal(r, (3,))}
    _, st = opt.update(g0, st, p)  # one step in, so the moments are non-zero
    mu, nu, count = st[0].mu, st[0].nu, st[0].count

    def adam_step(w, b, gw, gb, mw, mb, vw, vb, cnt):
        state = (optax.ScaleByAdamState(count=cnt, mu={"b": mb, "w": mw}, nu={"b": vb, "w": vw}),
                 optax.EmptyState())
        upd, new = opt.update({"w": gw, "b": gb}, state, {"w": w, "b": b})
        newp = optax.apply_updates({"w": w, "b": b}, upd)
        return (newp["w"], newp["b"], new[0].mu["w"], new[0].mu["b"], new[0].nu["w"],
                new[0].nu["b"], new[0].count)

    case("adam_update_optax", adam_step,
         [p["w"], p["b"], normal(r, (4, 3)), normal(r, (3,)), np.asarray(mu["w"]),
          np.asarray(mu["b"]), np.asarray(nu["w"]), np.asarray(nu["b"]), np.asarray(count)],
         close_tol(1e-6, 1e-7), "model", f64_ref=False, hlo_copy=True,
         note="optax.adam(1e-2) step 2: outputs new w, b, mu_w, mu_b, nu_w, nu_b, count")


def add_random():
    case("rng_bit_generator_philox",
         lambda k: lax.rng_bit_generator(k, (2, 8), jnp.uint32, lax.RandomAlgorithm.RNG_PHILOX),
         [np.array([0x12345678, 0x9ABCDEF0], np.uint64)], EXACT, "random", hlo_copy=True,
         note="outputs: new state, bits")
    case("rng_bit_generator_threefry",
         lambda k: lax.rng_bit_generator(k, (3, 4), jnp.uint32, lax.RandomAlgorithm.RNG_THREE_FRY),
         [np.array([42, 7], np.uint64)], EXACT, "random", hlo_copy=True,
         note="outputs: new state, bits")
    case("rng_bit_generator_philox_u64",
         lambda k: lax.rng_bit_generator(k, (5,), jnp.uint64, lax.RandomAlgorithm.RNG_PHILOX),
         [np.array([1, 2], np.uint64)], EXACT, "random", note="u64 output bits")
    case("jax_random_threefry_bits", lambda k: jax.random.bits(jax.random.wrap_key_data(k), (8,)),
         [np.array([0, 42], np.uint32)], EXACT, "random",
         note="JAX's threefry2x32 written out in HLO ops (shifts, xors, adds on u32)")
    case("jax_random_normal", lambda k: jax.random.normal(jax.random.wrap_key_data(k), (10,),
                                                          jnp.float32),
         [np.array([0, 7], np.uint32)], ulp_tol(8, 1e-6), "random")


def add_fft():
    """jnp.fft and complex arithmetic around it: HLO fft (FFT, IFFT, RFFT, IRFFT over 1 to 3
    dims), complex, real, imag and elementwise ops on c64, a complex dot (an FNO layer's
    per-mode channel mixing); c128/f64 transforms (fft64_*), a Bluestein length among them.
    optitpu's FFT (src/exec/fft.c) and XLA's (ducc) differ by rounding: tolerances scale with
    the spectrum's magnitude."""
    r = rng_for("fft")

    def cplx(shape):
        return (r.uniform(-1, 1, shape) + 1j * r.uniform(-1, 1, shape)).astype(np.complex64)

    def real(shape):
        return r.uniform(-1, 1, shape).astype(np.float32)

    tol = close_tol(1e-5, 2e-5)
    case("fft_c64", jnp.fft.fft, [cplx((4, 16))], close_tol(1e-5, 1e-4), "fft")
    case("ifft_c64", jnp.fft.ifft, [cplx((3, 12))], tol, "fft")
    case("rfft_f32", jnp.fft.rfft, [real((8, 64))], close_tol(1e-5, 2e-4), "fft")
    case("rfft_odd_f32", jnp.fft.rfft, [real((5, 15))], close_tol(1e-5, 1e-4), "fft")
    case("irfft_f32", lambda x: jnp.fft.irfft(x, n=64), [cplx((8, 33))], tol, "fft")
    case("irfft_odd_f32", lambda x: jnp.fft.irfft(x, n=9), [cplx((4, 5))], tol, "fft")
    case("fft2_c64", jnp.fft.fft2, [cplx((2, 8, 12))], close_tol(1e-5, 4e-4), "fft")
    case("rfftn_3d_f32", jnp.fft.rfftn, [real((4, 6, 10))], close_tol(1e-5, 4e-4), "fft")
    case("fft_power_spectrum_f32", lambda x: jnp.abs(jnp.fft.rfft(x)) ** 2, [real((16, 128))],
         close_tol(1e-4, 2e-2), "fft")

    def complex_arith(a, b):
        c = a * b - jnp.conj(a) / (b + jnp.complex64(2 + 1j))
        return c, jnp.abs(c), jnp.real(c) + jnp.imag(-c), jnp.exp(a * 0.5j), c == a

    case("fft_complex_arith_c64", complex_arith, [cplx((6, 5)), cplx((6, 5))],
         close_tol(1e-5, 1e-5), "fft")

    def spectral_conv(x, w):
        # an FNO layer: rfft over space, mix channels per kept mode, irfft back
        xf = jnp.fft.rfft(x, axis=-1)[:, :, :8]
        yf = jnp.einsum("bik,iok->bok", xf, w)
        yf = jnp.pad(yf, ((0, 0), (0, 0), (0, 33 - 8)))
        return jnp.fft.irfft(yf, n=64, axis=-1)

    case("fft_spectral_conv_fno", spectral_conv, [real((2, 3, 64)), cplx((3, 4, 8))],
         close_tol(1e-4, 1e-5), "fft")

    def cplx128(shape):
        return r.uniform(-1, 1, shape) + 1j * r.uniform(-1, 1, shape)

    t64 = close_tol(1e-12, 1e-12)
    case("fft64_fft_c128", jnp.fft.fft, [cplx128((4, 30))], close_tol(1e-12, 1e-11), "fft")
    case("fft64_ifft2_c128", jnp.fft.ifft2, [cplx128((2, 12, 7))], t64, "fft")
    case("fft64_rfft_f64", jnp.fft.rfft, [r.uniform(-1, 1, (6, 100))], close_tol(1e-12, 1e-11),
         "fft")
    case("fft64_irfft_odd_f64", lambda x: jnp.fft.irfft(x, n=27), [cplx128((3, 14))], t64, "fft")
    case("fft64_irfftn_f64", lambda x: jnp.fft.irfftn(x, s=(6, 10)), [cplx128((2, 6, 6))], t64,
         "fft")
    case("fft64_bluestein_c128", jnp.fft.fft, [cplx128((3, 263))], close_tol(1e-12, 1e-11),
         "fft")


def add_linalg():
    """jnp.linalg and jax.scipy.linalg: JAX lowers them to jaxlib's LAPACK custom calls
    (lapack_<s|d><routine>_ffi, src/exec/lapack.c). Outputs whose sign LAPACK chooses
    (eigenvectors, singular vectors) are given sign-free: each column scaled by the sign of its
    largest element, or the product that reconstructs the input."""
    import jax.scipy.linalg as jsl
    r = rng_for("linalg")
    tol = {"f32": close_tol(1e-4, 1e-5), "f64": close_tol(1e-10, 1e-12)}

    def spd(n, batch=(), dt="f32"):
        a = r.standard_normal(batch + (n, n))
        return (a @ np.swapaxes(a, -1, -2) / n + np.eye(n)).astype(DTYPES[dt])

    def fix_sign(v):  # columns of v, each times the sign of its largest-magnitude element
        k = jnp.argmax(jnp.abs(v), axis=-2, keepdims=True)
        return v * jnp.sign(jnp.take_along_axis(v, k, axis=-2))

    for dt in ("f32", "f64"):
        t = tol[dt]
        case(f"linalg_cholesky_{dt}", jnp.linalg.cholesky, [spd(6, dt=dt)], t, "linalg",
             hlo_copy=dt == "f32", note="lapack_potrf (uplo L), masked by its info")
        case(f"linalg_cholesky_batched_{dt}", jnp.linalg.cholesky, [spd(4, (3, 2), dt=dt)], t,
             "linalg")
        case(f"linalg_solve_{dt}", jnp.linalg.solve, [spd(5, dt=dt), normal(r, (5, 3), dt)], t,
             "linalg", note="lapack_getrf, then two lapack_trsm")
        case(f"linalg_inv_batched_{dt}", jnp.linalg.inv, [normal(r, (4, 5, 5), dt)], t, "linalg")
        case(f"linalg_slogdet_det_{dt}", lambda a: (*jnp.linalg.slogdet(a), jnp.linalg.det(a)),
             [normal(r, (2, 6, 6), dt)], t, "linalg", note="outputs: sign, log|det|, det")
        case(f"linalg_qr_{dt}", jnp.linalg.qr, [normal(r, (7, 4), dt)], t, "linalg",
             note="lapack_geqrf then lapack_orgqr; outputs: q, r")
        case(f"linalg_qr_complete_batched_{dt}", lambda a: jnp.linalg.qr(a, mode="complete"),
             [normal(r, (2, 5, 3), dt)], t, "linalg")
        case(f"linalg_eigh_{dt}", lambda a: (lambda w, v: (w, fix_sign(v)))(*jnp.linalg.eigh(a)),
             [spd(6, (2,), dt=dt)], t, "linalg", note="lapack_syevd; outputs: w, v (signs fixed)")
        case(f"linalg_svd_{dt}",
             lambda a: (lambda u, s, vt: (s, (u * s[..., None, :]) @ vt))(
                 *jnp.linalg.svd(a, full_matrices=False)),
             [normal(r, (6, 4), dt)], t, "linalg", note="lapack_gesdd; outputs: s, u diag(s) vt")
        case(f"linalg_lstsq_{dt}", lambda a, b: jnp.linalg.lstsq(a, b)[0],
             [normal(r, (8, 3), dt), normal(r, (8, 2), dt)], t, "linalg")
        case(f"linalg_triangular_solves_{dt}",
             lambda a, b, c: (jsl.solve_triangular(a, b, lower=True),
                              jsl.solve_triangular(a, b, lower=False, trans=1, unit_diagonal=True),
                              lax.linalg.triangular_solve(a, c, left_side=False, lower=True,
                                                          transpose_a=True)),
             [spd(4, dt=dt), normal(r, (4, 3), dt), normal(r, (2, 4), dt)], t, "linalg",
             note="lapack_trsm: left lower, left upper transposed unit, right lower transposed")
        case(f"linalg_cho_solve_{dt}",
             lambda a, b: jsl.cho_solve(jsl.cho_factor(a, lower=True), b),
             [spd(5, dt=dt), normal(r, (5, 2), dt)], t, "linalg")
        case(f"linalg_lu_factor_{dt}", jsl.lu_factor, [normal(r, (5, 5), dt)], t, "linalg",
             note="outputs: lu, pivots (0-based, s32)")
    case("linalg_cholesky_not_spd_f32", jnp.linalg.cholesky,
         [np.array([[1, 2], [2, 1]], np.float32)], EXACT, "linalg",
         note="potrf's info > 0: JAX's result is NaN, as XLA's")
    case("linalg_det_singular_f64", jnp.linalg.det, [np.ones((3, 3), np.float64)], EXACT,
         "linalg", note="getrf's info > 0 (an exactly zero pivot)")


# ------------------------------------------------------------------------------------------------
# Generation
# ------------------------------------------------------------------------------------------------

OP_RE = re.compile(r" = [^\n]*?\s([a-z][a-z0-9\-]*)\(")


def opcodes(text):
    return sorted(set(m.group(1) for m in OP_RE.finditer(text)))


def save_npy(path, a):
    a = np.asarray(a)
    if a.dtype == np.dtype(BF16):
        a = a.view(np.uint16)
    a = np.array(a, order="C", copy=True)  # keeps rank 0 (ascontiguousarray would not)
    if a.dtype.byteorder == ">":
        raise ValueError("big-endian")
    np.save(path, a, allow_pickle=False)


def tensor_entry(fname, a):
    a = np.asarray(a)
    dt = dtname(a)
    stored = np.dtype(np.uint16) if dt == "bf16" else a.dtype
    return {"file": fname, "dtype": dt, "shape": list(a.shape), "npy_descr": stored.str}


def to_f64(a):
    a = np.asarray(a)
    return a.astype(np.float64) if dtname(a) in ("f16", "bf16", "f32") else a


def lower(fn, args, name):
    f = jax.jit(fn, keep_unused=True)
    low = f.lower(*args)
    comp = low.compile()
    return low.as_text(dialect="hlo"), comp.as_text(), comp


def named(fn, name):
    def wrapper(*a):
        return fn(*a)
    wrapper.__name__ = name
    wrapper.__qualname__ = name
    return wrapper


def gen_case(c, outdir):
    d = os.path.join(outdir, c.name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    fn = named(c.fn, c.name)
    hlo, opt, comp = lower(fn, c.args, c.name)
    outs = [np.asarray(o) for o in jax.tree_util.tree_leaves(comp(*c.args))]
    entry_params = len(re.findall(r"parameter\((\d+)\)", hlo.split("\nENTRY ")[1].split("\n}")[0]))
    if entry_params != len(c.args):
        raise RuntimeError(f"{c.name}: {entry_params} entry parameters for {len(c.args)} inputs")
    root = re.search(r"ROOT \S+ = (\S)", hlo.split("\nENTRY ")[1]).group(1)
    tuple_root = root == "("
    if not tuple_root and len(outs) != 1:
        raise RuntimeError(f"{c.name}: {len(outs)} outputs but a non-tuple root")
    with open(os.path.join(d, "module.hlo"), "w") as f:
        f.write(hlo)
    with open(os.path.join(d, "module.opt.hlo"), "w") as f:
        f.write(opt)
    entry = {"name": c.name, "group": c.group, "module": "module.hlo",
             "module_optimized": "module.opt.hlo", "ops": opcodes(hlo),
             "inputs": [], "outputs": [], "result_is_tuple": tuple_root, "tolerance": c.tol}
    if c.note:
        entry["note"] = c.note
    for i, a in enumerate(c.args):
        save_npy(os.path.join(d, f"input_{i}.npy"), a)
        entry["inputs"].append(tensor_entry(f"input_{i}.npy", a))
    for j, o in enumerate(outs):
        save_npy(os.path.join(d, f"expected_{j}.npy"), o)
        entry["outputs"].append(tensor_entry(f"expected_{j}.npy", o))
    # Tolerance sanity: XLA's own result against an independent float64 reference.
    if c.ref is not None:
        with np.errstate(all="ignore"):
            ref = np.asarray(c.ref(*c.args)).astype(outs[0].dtype)
        finite = np.isfinite(ref.astype(np.float64)) & np.isfinite(outs[0].astype(np.float64))
        nan_mismatch = np.isnan(ref.astype(np.float64)) != np.isnan(outs[0].astype(np.float64))
        if np.any(nan_mismatch):
            raise RuntimeError(f"{c.name}: NaN positions differ from the float64 reference")
        inf_mismatch = np.isinf(ref.astype(np.float64)) != np.isinf(outs[0].astype(np.float64))
        if np.any(inf_mismatch):
            raise RuntimeError(f"{c.name}: infinities differ from the float64 reference")
        u = int(ulp_dist(outs[0], ref)[finite].max()) if finite.any() else 0
        entry["xla_max_ulp_vs_f64_reference"] = u
        if c.ref_tol is not None:
            if u > c.ref_tol:
                k = int(np.argmax(np.where(finite, ulp_dist(outs[0], ref), 0)))
                raise RuntimeError(f"{c.name}: XLA is {u} ulp from the correctly rounded result "
                                   f"at {k}: inputs {[a.ravel()[k] for a in c.args]}")
        else:
            # |ours - XLA| <= |ours - true| + |XLA - true|: allow one ulp for ours.
            tol = dict(entry["tolerance"])
            if tol.get("ulp", 0) < u + 1:
                tol["ulp"] = u + 1
            entry["tolerance"] = tol
    if c.f64_ref:
        args64 = [to_f64(a) for a in c.args]
        ref = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(c.fn)(*args64))]
        for j, (o, rf) in enumerate(zip(outs, ref)):
            if o.dtype.kind == "f":
                half = {k: (v / 2 if k in ("rtol", "atol") else v) for k, v in c.tol.items()}
                msg = check(rf.astype(o.dtype), o, half)
                if msg:
                    raise RuntimeError(f"{c.name}: output {j} vs float64 run beyond half the "
                                       f"tolerance: {msg}")
        entry["checked_against_f64"] = True
    if c.grad:
        entry["vjp"] = gen_vjp(c, d, outs)
    return entry, hlo, opt


def gen_vjp(c, d, outs):
    wrt = [i for i, a in enumerate(c.args) if dtname(a) in ("f32", "f64")]
    fout = [j for j, o in enumerate(outs) if dtname(o) in ("f32", "f64")]
    if not wrt or not fout:
        raise RuntimeError(f"{c.name}: nothing to differentiate")
    rng = rng_for(c.name + "/vjp")
    cts = [rng.standard_normal(outs[j].shape).astype(outs[j].dtype) for j in fout]
    n_in = len(c.args)

    def vjp_fn(*a):
        args, cot = list(a[:n_in]), a[n_in:]

        def g(*diff):
            full = list(args)
            for i, v in zip(wrt, diff):
                full[i] = v
            leaves = jax.tree_util.tree_leaves(c.fn(*full))
            return tuple(leaves[j] for j in fout)

        _, pull = jax.vjp(g, *[args[i] for i in wrt])
        return pull(tuple(cot))

    vfn = named(vjp_fn, c.name + "_vjp")
    all_args = list(c.args) + cts
    hlo, _, comp = lower(vfn, all_args, c.name + "_vjp")
    grads = [np.asarray(g) for g in comp(*all_args)]
    with open(os.path.join(d, "vjp.hlo"), "w") as f:
        f.write(hlo)
    vroot = re.search(r"ROOT \S+ = (\S)", hlo.split("\nENTRY ")[1]).group(1)
    ent = {"module": "vjp.hlo", "wrt": wrt, "outputs_with_cotangent": fout,
           "result_is_tuple": vroot == "(", "cotangents": [], "grads": []}
    for k, ct in enumerate(cts):
        save_npy(os.path.join(d, f"cotangent_{k}.npy"), ct)
        ent["cotangents"].append(tensor_entry(f"cotangent_{k}.npy", ct))
    for k, g in enumerate(grads):
        save_npy(os.path.join(d, f"grad_{k}.npy"), g)
        ent["grads"].append(tensor_entry(f"grad_{k}.npy", g))
    gtol = c.tol if not c.tol.get("exact") else close_tol(1e-6, 1e-7)
    if "ulp" in gtol:
        gtol = close_tol(1e-5 if any(dtname(g) == "f32" for g in grads) else 1e-12,
                         1e-6 if any(dtname(g) == "f32" for g in grads) else 1e-13)
    # Gradients in f32 get a wider bound: the backward pass sums more terms.
    if any(dtname(g) == "f32" for g in grads):
        gtol = close_tol(max(gtol.get("rtol", 0), 1e-5), max(gtol.get("atol", 0), 1e-5))
    ent["tolerance"] = gtol
    # cross-check f32 gradients against the same pullback in float64
    if any(dtname(g) == "f32" for g in grads):
        try:
            ref = jax.jit(vfn)(*[to_f64(a) for a in all_args])
        except (TypeError, ValueError):  # the function fixes its own dtypes (e.g. converts)
            ent["checked_against_f64"] = False
            return ent
        ent["checked_against_f64"] = True
        for k, (g, rf) in enumerate(zip(grads, ref)):
            half = {kk: v / 2 for kk, v in gtol.items()}
            msg = check(np.asarray(rf).astype(g.dtype), g, half)
            if msg:
                raise RuntimeError(f"{c.name}: vjp grad {k} vs float64 beyond half tolerance: {msg}")
    return ent


# ---- HLO-only modules (parser conformance) -------------------------------------------------------

def hlo_only_modules():
    """Modules that are parsed but not run here: collectives, custom calls, SPMD sharding."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mods = {}
    n = jax.device_count()
    assert n == 8, "needs XLA_FLAGS=--xla_force_host_platform_device_count=8"
    x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)

    def pm(name, f, *args, **kw):
        low = jax.pmap(f, axis_name="i", **kw).lower(*args)
        mods[f"pmap_{name}"] = low.as_text(dialect="hlo")
        mods[f"pmap_{name}.opt"] = low.compile().as_text()

    pm("psum", lambda v: lax.psum(v, "i"), x)
    pm("pmean_pmax", lambda v: (lax.pmean(v, "i"), lax.pmax(v, "i"), lax.pmin(v, "i")), x)
    pm("all_gather", lambda v: lax.all_gather(v, "i"), x)
    pm("all_gather_tiled", lambda v: lax.all_gather(v, "i", tiled=True), x)
    pm("psum_scatter", lambda v: lax.psum_scatter(jnp.tile(v, 2), "i", tiled=True), x)
    pm("all_to_all", lambda v: lax.all_to_all(v.reshape(8, 1, 4)[:, 0], "i", 0, 0, tiled=True),
       np.arange(8 * 8 * 4, dtype=np.float32).reshape(8, 8, 4))
    pm("ppermute_ring", lambda v: lax.ppermute(v, "i", [(k, (k + 1) % 8) for k in range(8)]), x)
    pm("axis_index", lambda v: v * lax.axis_index("i"), x)
    pm("psum_groups", lambda v: lax.psum(v, "i", axis_index_groups=[[0, 1, 2, 3], [4, 5, 6, 7]]), x)
    pm("grad_allreduce", lambda w, v: lax.pmean(jax.grad(lambda ww: jnp.sum(jnp.tanh(v @ ww)))(w),
                                                "i"),
       np.ones((8, 4, 3), np.float32), np.ones((8, 2, 4), np.float32))
    try:
        from jax import shard_map
    except ImportError:
        from jax.experimental.shard_map import shard_map
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))

    def sm(name, f, in_specs, out_specs, *args):
        g = jax.jit(shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                              check_vma=False))
        low = g.lower(*args)
        mods[f"shard_map_{name}"] = low.as_text(dialect="hlo")
        mods[f"shard_map_{name}.opt"] = low.compile().as_text()

    a = np.arange(8 * 8, dtype=np.float32).reshape(8, 8)
    sm("psum_model", lambda v: lax.psum(v, "model"), P("data", "model"), P("data", None), a)
    sm("all_gather_data", lambda v: lax.all_gather(v, "data", tiled=True), P("data", "model"),
       P(None, "model"), a)
    sm("psum_scatter", lambda v: lax.psum_scatter(v, "model", scatter_dimension=1, tiled=True),
       P("data", None), P("data", "model"), a)
    sm("ppermute", lambda v: lax.ppermute(v, "model", [(k, (k + 1) % 4) for k in range(4)]),
       P("data", "model"), P("data", "model"), a)
    sm("all_to_all", lambda v: lax.all_to_all(v, "model", 0, 1, tiled=True), P(None, "model"),
       P("model", None), a)

    # jit with shardings: SPMD partitioner output (sharding attributes before, collectives after)
    def sharded(name, f, shardings, *args):
        g = jax.jit(f, in_shardings=shardings)
        low = g.lower(*args)
        mods[f"spmd_{name}"] = low.as_text(dialect="hlo")
        mods[f"spmd_{name}.opt"] = low.compile().as_text()

    sh = NamedSharding(mesh, P("data", "model"))
    sharded("matmul", lambda u, v: jnp.tanh(u @ v), (sh, NamedSharding(mesh, P("model", None))),
            a, a)
    sharded("reduce", lambda u: jnp.sum(u * u), (sh,), a)

    # custom calls that XLA's CPU backend prints (LAPACK, top-k, sharding annotations)
    spd = np.eye(4, dtype=np.float32) * 4 + 1
    for nm, f, args in [
        ("cholesky", jnp.linalg.cholesky, (spd,)),
        ("eigh", jnp.linalg.eigh, (spd,)),
        ("lu_solve", jnp.linalg.solve, (spd, np.ones((4,), np.float32))),
        ("qr", jnp.linalg.qr, (spd,)),
        ("svd", jnp.linalg.svd, (spd,)),
        ("top_k", lambda v: lax.top_k(v, 3), (x,)),
        ("triangular_solve", lambda m, b: jax.scipy.linalg.solve_triangular(m, b, lower=True),
         (np.tril(spd), np.ones((4, 2), np.float32))),
        ("fft", jnp.fft.rfft, (np.ones(8, np.float32),)),
        ("sharding_constraint", lambda v: jax.lax.with_sharding_constraint(v * 2, sh), (a,)),
    ]:
        low = jax.jit(named(f, nm)).lower(*args)
        mods[f"custom_{nm}"] = low.as_text(dialect="hlo")
        mods[f"custom_{nm}.opt"] = low.compile().as_text()
    return mods


def compact_json(obj):
    """Indented JSON with short lists of numbers (shapes, indices) kept on one line."""
    text = json.dumps(obj, indent=1)
    text = re.sub(r"\[\s*((?:-?[0-9.e+-]+,\s*)*-?[0-9.e+-]+)\s*\]",
                  lambda m: "[" + ", ".join(m.group(1).split(",")).replace("  ", " ").replace(
                      ", ", ",").replace(",", ", ") + "]", text)
    text = re.sub(r"\[\s+\]", "[]", text)
    return re.sub(r"\[((?:-?[0-9.e+-]+, )*-?[0-9.e+-]+)\]",
                  lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]",
                  text) + "\n"

# ---- multi-device (SPMD) cases: collectives with per-partition inputs and outputs -------------------

def spmd_cases(outdir):
    """Writes jax_spmd/<case>/ and returns the index entries.

    Each program is partitioned over 8 host devices (mesh 2x4, axes ('data', 'model')). The file
    module.spmd.hlo is XLA's per-partition program after SPMD partitioning and the CPU pipeline
    (num_partitions=8; collectives with replica_groups / source_target_pairs over partition ids);
    module.hlo is JAX's global program before partitioning (parse only). Row p of every input and
    expected file is the shard partition p holds. Inputs are multiples of 1/8 (small), so every
    float sum is exact in any order and all comparisons are exact."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    try:
        from jax import shard_map
    except ImportError:
        from jax.experimental.shard_map import shard_map
    devs = jax.devices()
    assert len(devs) == 8 and [d.id for d in devs] == list(range(8))
    mesh = Mesh(np.array(devs).reshape(2, 4), ("data", "model"))
    entries = []

    def shards(arr):
        by_dev = sorted(arr.addressable_shards, key=lambda sh: sh.device.id)
        return np.stack([np.asarray(sh.data) for sh in by_dev])

    def emit(name, jf, args, in_specs, ref, note):
        d = os.path.join(outdir, name)
        os.makedirs(d)
        placed = [jax.device_put(a, NamedSharding(mesh, sp)) for a, sp in zip(args, in_specs)]
        low = jf.lower(*placed)
        comp = low.compile()
        hlo, spmd_text = low.as_text(dialect="hlo"), comp.as_text()
        if "num_partitions=8" not in spmd_text:
            raise RuntimeError(f"{name}: not an 8-partition program")
        outs = jax.tree_util.tree_leaves(comp(*placed))
        with open(os.path.join(d, "module.hlo"), "w") as f:
            f.write(hlo)
        with open(os.path.join(d, "module.spmd.hlo"), "w") as f:
            f.write(spmd_text)
        ent = {"name": name, "partitions": 8, "mesh": {"shape": [2, 4], "axes": ["data", "model"],
                                                       "partition_of_mesh_index": "4*data+model"},
               "module": "module.hlo", "module_spmd": "module.spmd.hlo",
               "ops": opcodes(spmd_text), "inputs": [], "outputs": [], "tolerance": EXACT,
               "note": note}
        for i, (a, pl) in enumerate(zip(args, placed)):
            sh = shards(pl)
            save_npy(os.path.join(d, f"input_{i}.npy"), sh)
            e = tensor_entry(f"input_{i}.npy", sh)
            e["global_shape"] = list(np.shape(a))
            ent["inputs"].append(e)
        for j, o in enumerate(outs):
            sh = shards(o)
            save_npy(os.path.join(d, f"expected_{j}.npy"), sh)
            ent["outputs"].append(tensor_entry(f"expected_{j}.npy", sh))
        # the per-partition result must equal an independent numpy model of the collective
        want = ref(*[shards(pl) for pl in placed])
        want = want if isinstance(want, (list, tuple)) else [want]
        for j, (o, w) in enumerate(zip(outs, want)):
            msg = check(shards(o), np.asarray(w).astype(shards(o).dtype), EXACT)
            if msg:
                raise RuntimeError(f"{name}: output {j} differs from the numpy model: {msg}")
        entries.append(ent)
        print(f"spmd {name}", flush=True)

    def sm(f, in_specs, out_specs):
        return jax.jit(shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                 check_vma=False))

    r = rng_for("spmd")
    a = (r.integers(-64, 64, (8, 8)) / 8).astype(np.float32)
    b = (r.integers(-64, 64, (8, 12)) / 8).astype(np.float32)
    ai = r.integers(-1000, 1000, (8, 8)).astype(np.int32)
    full = P("data", "model")
    # partition p = 4*data + model holds block (p // 4, p % 4) of a 2x4 grid of blocks
    grp_model = [[0, 1, 2, 3], [4, 5, 6, 7]]
    grp_data = [[0, 4], [1, 5], [2, 6], [3, 7]]

    def in_groups(x, groups, fn):
        out = [None] * 8
        for g in groups:
            red = fn(np.stack([x[p] for p in g]))
            for p in g:
                out[p] = red
        return np.stack(out)

    emit("all_reduce_sum_model", sm(lambda v: lax.psum(v, "model"), (full,), full), [a], [full],
         lambda x: in_groups(x, grp_model, lambda s: s.sum(0)),
         "all-reduce over replica_groups {{0,1,2,3},{4,5,6,7}}")
    emit("all_reduce_sum_all", sm(lambda v: lax.psum(v, ("data", "model")), (full,), full), [a],
         [full], lambda x: in_groups(x, [list(range(8))], lambda s: s.sum(0)),
         "all-reduce over all 8 partitions")
    emit("all_reduce_max_data", sm(lambda v: lax.pmax(v, "data"), (full,), full), [a], [full],
         lambda x: in_groups(x, grp_data, lambda s: s.max(0)),
         "all-reduce max over replica_groups {{0,4},{1,5},{2,6},{3,7}}")
    emit("all_reduce_min_s32", sm(lambda v: lax.pmin(v, "model"), (full,), full), [ai], [full],
         lambda x: in_groups(x, grp_model, lambda s: s.min(0)), "s32 all-reduce min")
    emit("all_reduce_sum_s32", sm(lambda v: lax.psum(v, ("data", "model")), (full,), full), [ai],
         [full], lambda x: in_groups(x, [list(range(8))], lambda s: s.sum(0)), "s32 all-reduce sum")
    emit("all_gather_model", sm(lambda v: lax.all_gather(v, "model", axis=1, tiled=True), (full,),
                                P("data", None)), [a], [full],
         lambda x: in_groups(x, grp_model, lambda s: np.concatenate(list(s), axis=1)),
         "all-gather along dimension 1 within each model group")
    emit("all_gather_data_stacked", sm(lambda v: lax.all_gather(v, "data", axis=0), (full,),
                                       P(None, None, "model")), [a], [full],
         lambda x: in_groups(x, grp_data, lambda s: s), "untiled all-gather: a new leading axis")
    emit("reduce_scatter_model",
         sm(lambda v: lax.psum_scatter(v, "model", scatter_dimension=1, tiled=True), (P("data"),),
            full), [b], [P("data")],
         lambda x: np.stack([np.split(sum(x[q] for q in grp_model[p // 4]), 4, axis=1)[p % 4]
                             for p in range(8)]),
         "reduce-scatter: sum over the model group, partition k keeps column block k")
    emit("all_to_all_model",
         sm(lambda v: lax.all_to_all(v, "model", 0, 1, tiled=True), (P(None, "model"),),
            P("model", None)), [a], [P(None, "model")],
         lambda x: np.stack([np.concatenate([np.split(x[q], 4, axis=0)[p % 4]
                                             for q in grp_model[p // 4]], axis=1)
                             for p in range(8)]),
         "all-to-all: split dimension 0 in 4, send piece k to group member k, concat along 1")
    perm = [(k, (k + 1) % 4) for k in range(4)]
    emit("collective_permute_ring", sm(lambda v: lax.ppermute(v, "model", perm), (full,), full),
         [a], [full],
         lambda x: np.stack([x[(p // 4) * 4 + (p % 4 - 1) % 4] for p in range(8)]),
         "collective-permute: each partition receives from its left neighbour in the model ring")
    emit("collective_permute_partial",
         sm(lambda v: lax.ppermute(v, "data", [(0, 1)]), (full,), full), [a], [full],
         lambda x: np.stack([x[p - 4] if p >= 4 else np.zeros_like(x[p]) for p in range(8)]),
         "partitions that receive nothing get zeros")
    emit("partition_id_axis_index",
         sm(lambda v: v * 10 + lax.axis_index("model") + 100 * lax.axis_index("data"), (full,),
            full), [ai], [full],
         lambda x: np.stack([x[p] * 10 + (p % 4) + 100 * (p // 4) for p in range(8)]),
         "axis_index lowers through partition-id")

    def dp_step(w, xb):
        g = jax.grad(lambda ww: jnp.sum((xb @ ww) ** 2) / 8)(w)
        return w - 0.125 * lax.pmean(g, ("data", "model"))

    xb = (r.integers(-8, 8, (16, 4)) / 8).astype(np.float32)
    w0 = (r.integers(-8, 8, (4, 3)) / 8).astype(np.float32)

    def dp_ref(w, x):
        out = []
        gs = [2 * x[p].T @ (x[p] @ w[p]) / 8 for p in range(8)]
        gm = sum(gs) / 8
        return np.stack([w[p] - 0.125 * gm for p in range(8)])

    emit("data_parallel_sgd_step", sm(dp_step, (P(), P(("data", "model"))), P()), [w0, xb],
         [P(), P(("data", "model"))], dp_ref,
         "replicated weights, batch split 8 ways, gradient mean all-reduce, SGD step")
    return entries


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "tests", "data"))
    ap.add_argument("--only", default=None, help="generate only cases whose name contains this")
    args = ap.parse_args()
    add_float_elementwise()
    add_int_elementwise()
    add_compare_select_convert()
    add_shape_ops()
    add_reductions()
    add_dot_conv()
    add_sort()
    add_control_flow()
    add_models()
    add_random()
    add_fft()
    add_linalg()
    jdir = os.path.join(args.out, "jax")
    hdir = os.path.join(args.out, "hlo", "jax")
    if args.only is None:
        for dd in (jdir, hdir):
            if os.path.isdir(dd):
                shutil.rmtree(dd)
    os.makedirs(jdir, exist_ok=True)
    os.makedirs(hdir, exist_ok=True)
    index = []
    for c in CASES:
        if args.only is not None and args.only not in c.name:
            continue
        entry, hlo, opt = gen_case(c, jdir)
        index.append(entry)
        if c.hlo_copy:
            with open(os.path.join(hdir, f"{c.name}.hlo"), "w") as f:
                f.write(hlo)
            with open(os.path.join(hdir, f"{c.name}.opt.hlo"), "w") as f:
                f.write(opt)
        print(f"{c.name}: {len(entry['inputs'])} in, {len(entry['outputs'])} out"
              f"{' +vjp' if 'vjp' in entry else ''}", flush=True)
    if args.only is not None:
        # only some cases regenerated: merge their entries into the existing index
        path = os.path.join(jdir, "cases.json")
        with open(path) as f:
            meta = json.load(f)
        new = {e["name"]: e for e in index}
        names = [e["name"] for e in meta["cases"]]
        meta["cases"] = [new.pop(e["name"], e) for e in meta["cases"]]
        meta["cases"] += [e for e in index if e["name"] in new]
        with open(path, "w") as f:
            f.write(compact_json(meta))
        print(f"{len(index)} cases merged into {len(names)}", flush=True)
        return
    for name, text in sorted(hlo_only_modules().items()):
        with open(os.path.join(hdir, f"{name}.hlo"), "w") as f:
            f.write(text)
    sdir = os.path.join(args.out, "jax_spmd")
    if os.path.isdir(sdir):
        shutil.rmtree(sdir)
    os.makedirs(sdir)
    spmd_index = spmd_cases(sdir)
    import optax
    meta = {
        "format": "optitpu-jax-corpus/1",
        "generator": "scripts/gen_jax_corpus.py",
        "versions": {"jax": jax.__version__, "jaxlib": __import__("jaxlib").__version__,
            "optax": optax.__version__, "numpy": np.__version__,
            "ml_dtypes": ml_dtypes.__version__, "python": sys.version.split()[0]},
        "platform": "cpu",
        "xla_flags": os.environ["XLA_FLAGS"],
        "x64": True,
        "tolerance_rule": "see tests/data/README.md: exact = bit-equal (any NaN matches any NaN); "
                          "otherwise an element passes if |got-exp| <= atol + rtol*|exp| or the "
                          "ulp distance <= ulp; NaN and infinity positions must match",
        "cases": index,
    }
    with open(os.path.join(jdir, "cases.json"), "w") as f:
        f.write(compact_json(meta))
    smeta = {k: v for k, v in meta.items() if k not in ("cases", "tolerance_rule")}
    smeta["format"] = "optitpu-jax-spmd-corpus/1"
    smeta["cases"] = spmd_index
    with open(os.path.join(sdir, "cases.json"), "w") as f:
        f.write(compact_json(smeta))
    print(f"{len(index)} cases", flush=True)


if __name__ == "__main__":
    main()
