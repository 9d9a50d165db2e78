#!/usr/bin/env python3
"""Times the same HLO modules with JAX (XLA's CPU backend) and with `optitpu run`, in one run, and
prints the ratio per module.

    scripts/xla_compare.py [--optitpu build/optitpu] [--repeat 50] [--json] [--no-large]
                           [--only TEXT]

Modules:
  corpus  tests/data/jax/<case>/module.hlo (what jax.jit lowered) on that case's own inputs:
          mlp_forward_backward (an MLP train step: loss and gradients), adam_update_optax,
          layer_norm, softmax_cross_entropy, attention_causal. JAX runs the same function the
          corpus generator lowered (scripts/gen_jax_corpus.py), on the same inputs.
  large   bandwidth-bound sizes: bench/hlo/adam_update_4m.hlo (p, m, v donated) and layer norm /
          softmax cross-entropy on 4096x1024 f32, lowered here with jax.jit(...).lower() and given
          to optitpu as HLO text (so both run the same module).

JAX: jax.jit, three warm-up calls, then --repeat calls each ended by block_until_ready; median.
optitpu: `optitpu run FILE --repeat R --json` (inputs from the case's .npy files, or --fill
random:1), median of run_ms without the first run (which builds native code on a cold cache).
ratio = JAX time / optitpu time: > 1 means optitpu is faster.

Needs jax (and optax for adam_update_optax): /work/venv-peers/bin/python, or `pip install jax
optax` in a venv. Not used by CI. Thread settings: XLA's defaults; optitpu uses OPTITPU_THREADS
or every CPU.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

try:
    import jax  # noqa: E402
    import jax.numpy as jnp  # noqa: E402
    from jax import lax  # noqa: E402
except ImportError:
    sys.exit("xla_compare: jax is missing (use /work/venv-peers/bin/python or pip install jax)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "data", "jax")


# ---- the functions scripts/gen_jax_corpus.py lowered ------------------------------------------

def mlp_loss(params, x, y):
    w1, b1, w2, b2 = params
    h = jax.nn.relu(x @ w1 + b1)
    logits = h @ w2 + b2
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


def mlp_train_step(w1, b1, w2, b2, x, y):
    return jax.value_and_grad(mlp_loss)((w1, b1, w2, b2), x, y)


def softmax_xent(lg, lb):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(lg), lb[:, None], axis=1))


def layer_norm(v, g, b):
    mu = jnp.mean(v, axis=-1, keepdims=True)
    var = jnp.mean((v - mu) ** 2, axis=-1, keepdims=True)
    return (v - mu) * lax.rsqrt(var + 1e-5) * g + b


def attention(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(q.shape[-1]).astype(q.dtype)
    mask = jnp.tril(jnp.ones((q.shape[2], k.shape[2]), bool))
    s = jnp.where(mask, s, jnp.finfo(q.dtype).min)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)


def optax_adam_step():
    import optax

    opt = optax.adam(1e-2, b1=0.9, b2=0.999, eps=1e-8)

    def adam_step(w, b, gw, gb, mw, mb, vw, vb, cnt):
        state = (optax.ScaleByAdamState(count=cnt, mu={"b": mb, "w": mw}, nu={"b": vb, "w": vw}),
                 optax.EmptyState())
        upd, new = opt.update({"w": gw, "b": gb}, state, {"w": w, "b": b})
        newp = optax.apply_updates({"w": w, "b": b}, upd)
        return (newp["w"], newp["b"], new[0].mu["w"], new[0].mu["b"], new[0].nu["w"],
                new[0].nu["b"], new[0].count)

    return adam_step


def adam_4m(p, g, m, v):
    """bench/hlo/adam_update_4m.hlo"""
    mn = 0.9 * m + 0.1 * g
    vn = 0.999 * v + 0.001 * (g * g)
    pn = p - 0.001 * (mn / (jnp.sqrt(vn) + 1e-8))
    return pn, mn, vn


# ---- timing -----------------------------------------------------------------------------------

def time_jax(fn, args, repeat, donate=()):
    f = jax.jit(fn, donate_argnums=donate)
    dev = [jax.device_put(a) for a in args]
    chain = donate == (0, 2, 3)  # the Adam update: outputs p', m', v' feed the next step

    def call(xs):
        out = f(*xs)
        jax.block_until_ready(out)
        if chain:
            return [out[0], xs[1], out[1], out[2]]
        if donate:
            return [jax.device_put(a) for a in args]
        return xs

    for _ in range(3):
        dev = call(dev)
    ts = []
    for _ in range(repeat):
        if donate and not chain:
            dev = [jax.device_put(a) for a in args]
        t0 = time.perf_counter()
        out = f(*dev)
        jax.block_until_ready(out)
        ts.append(time.perf_counter() - t0)
        if chain:
            dev = [out[0], dev[1], out[1], out[2]]
    return float(np.median(ts)) * 1e3


def time_optitpu(exe, hlo, inputs, repeat, tmp):
    cmd = [exe, "run", hlo, "--repeat", str(repeat + 1), "--json", "--output-dir", tmp]
    if inputs:
        for i, path in enumerate(inputs):
            cmd += ["--input", f"{i}={path}"]
    else:
        cmd += ["--fill", "random:1"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr or r.stdout).strip().splitlines()[-1:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1]
    js = json.loads(line)
    runs = js["run_ms"][1:] or js["run_ms"]
    return float(np.median(runs)), js


def corpus_inputs(case):
    d = os.path.join(CORPUS, case)
    paths = []
    i = 0
    while os.path.exists(os.path.join(d, f"input_{i}.npy")):
        paths.append(os.path.join(d, f"input_{i}.npy"))
        i += 1
    return paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--optitpu", default=os.path.join(ROOT, "build", "optitpu"))
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-large", action="store_true")
    ap.add_argument("--only", metavar="TEXT",
                    help="run only the modules whose name contains TEXT (e.g. 'cross_entropy 4096')")
    a = ap.parse_args()

    def wanted(name):
        return a.only is None or a.only in name

    cases = [
        ("mlp_forward_backward", mlp_train_step),
        ("adam_update_optax", None),
        ("layer_norm", layer_norm),
        ("softmax_cross_entropy", softmax_xent),
        ("attention_causal", attention),
    ]
    rows = []
    tmp = tempfile.mkdtemp(prefix="xla_compare_")
    for name, fn in cases:
        if not wanted(name):
            continue
        if fn is None:
            try:
                fn = optax_adam_step()
            except ImportError:
                rows.append((name, "", None, None, "optax missing"))
                continue
        paths = corpus_inputs(name)
        args = [np.load(p) for p in paths]
        shapes = " ".join("x".join(map(str, x.shape)) or "()" for x in args[:2])
        jt = time_jax(fn, args, a.repeat)
        ot, js = time_optitpu(a.optitpu, os.path.join(CORPUS, name, "module.hlo"), paths,
                              a.repeat, tmp)
        rows.append((name, shapes, jt, ot, "" if ot is not None else " ".join(js)))

    if not a.no_large:
        rng = np.random.default_rng(1)
        n = 4194304
        adam_args = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
        adam_args.append(np.abs(rng.standard_normal(n)).astype(np.float32))
        adam_args = [adam_args[0], adam_args[1], adam_args[2], adam_args[3]]
        if wanted("adam_update_4m (donated)"):
            jt = time_jax(adam_4m, adam_args, a.repeat, donate=(0, 2, 3))
            ot, js = time_optitpu(a.optitpu,
                                  os.path.join(ROOT, "bench", "hlo", "adam_update_4m.hlo"), None,
                                  a.repeat, tmp)
            rows.append(("adam_update_4m (donated)", "4194304", jt, ot,
                         "" if ot is not None else " ".join(js)))
        x = rng.standard_normal((4096, 1024)).astype(np.float32)
        gam = rng.standard_normal(1024).astype(np.float32)
        bet = rng.standard_normal(1024).astype(np.float32)
        lbl = rng.integers(0, 1024, 4096).astype(np.int32)
        for name, fn, args in [("layer_norm 4096x1024", layer_norm, [x, gam, bet]),
                               ("softmax_cross_entropy 4096x1024", softmax_xent, [x, lbl])]:
            if not wanted(name):
                continue
            hlo_text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
            path = os.path.join(tmp, name.split()[0] + "_large.hlo")
            with open(path, "w") as f:
                f.write(hlo_text)
            ins = []
            for i, arr in enumerate(args):
                p = os.path.join(tmp, f"{name.split()[0]}_in{i}.npy")
                np.save(p, arr)
                ins.append(p)
            jt = time_jax(fn, args, a.repeat)
            ot, js = time_optitpu(a.optitpu, path, ins, a.repeat, tmp)
            rows.append((name, "4096x1024", jt, ot, "" if ot is not None else " ".join(js)))

    info = f"jax {jax.__version__}, {jax.devices()[0].platform}, {os.cpu_count()} CPUs"
    if a.json:
        for name, shapes, jt, ot, note in rows:
            print(json.dumps({"bench": "xla_compare", "case": name, "metric": "ms",
                              "value": ot, "baseline": "jax.jit (XLA CPU)", "baseline_value": jt,
                              "ratio": (jt / ot) if (jt and ot) else None, "note": note or None,
                              "peer": info}))
    else:
        print(f"# {info}; median ms per call over {a.repeat} calls; ratio = XLA / optitpu "
              "(> 1: optitpu faster)")
        print(f"{'module':34} {'inputs':>16} {'XLA ms':>10} {'optitpu ms':>11} {'ratio':>8}")
        for name, shapes, jt, ot, note in rows:
            js = f"{jt:10.4f}" if jt is not None else f"{'-':>10}"
            os_ = f"{ot:11.4f}" if ot is not None else f"{'-':>11}"
            r = f"{jt / ot:8.3f}" if (jt and ot) else f"{'-':>8}"
            print(f"{name:34} {shapes:>16} {js} {os_} {r}  {note}")


if __name__ == "__main__":
    main()
