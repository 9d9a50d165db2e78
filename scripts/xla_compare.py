#!/usr/bin/env python3
"""A suite of JAX programs people run, timed with XLA's CPU backend (jax.jit) and with `optitpu
run` on the same HLO module and the same inputs, in one run; prints each program's times, their
ratio and optitpu's error against JAX's outputs.

    scripts/xla_compare.py [--optitpu build/optitpu] [--threads N] [--repeat 30] [--rounds 3]
                           [--group suite|extra|utils|models|vision_nlp|train|linalg|fft|wild|all]
                           [--quick]
                           [--only TEXT] [--list] [--json]
                           [--tol-scale S]

Getting jax (not used by CI; nothing in CTest needs it):
    python3 -m venv /work/venv-peers && /work/venv-peers/bin/pip install jax optax numpy
    /work/venv-peers/bin/python scripts/xla_compare.py --optitpu build/optitpu
Build optitpu in release first (cmake -DCMAKE_BUILD_TYPE=Release, target optitpu_cli).

Programs (`--list` prints them with their sizes; `--quick` shrinks every size for a smoke run):
  MLP 784-1024-1024-10, batch 512: forward with ReLU and with exact GELU; value_and_grad of the
    softmax cross-entropy (integer labels) with ReLU, exact GELU, tanh GELU and SiLU
  GELU (tanh and exact) of x + bias, 4096x4096; exact GELU written with jax.scipy.special.erf
    (jax.nn.gelu expands erfc into polynomials in the HLO; this one keeps an erf op)
  pre-LN transformer block (batch 8, seq 128, d 256, 4 heads, MLP 1024, causal): forward and
    value_and_grad with respect to its 10 parameters
  attention b4 h8 s256 d64: causal and not (forward), causal value_and_grad w.r.t. q, k, v
  3x3 conv 16x32x32x64 -> 64 + bias + ReLU, NHWC/HWIO and NCHW/OIHW (forward); a conv net
    (conv-ReLU-maxpool 2x2-conv-ReLU-mean-dense-cross-entropy) value_and_grad in both layouts
  layer norm 8192x1024 (forward and value_and_grad), RMS norm + residual 8192x1024
  softmax cross-entropy 2048x8192 (integer labels): loss, and value_and_grad w.r.t. the logits
  embedding 32000x512 gathered at 8x1024 token ids, and its gradient (scatter-add into the table)
  sum of 256x256x256 along axis 0, 1, 2 and over all of it
  transposes: 4096x4096, NHWC -> NCHW 64x56x56x64, (b, s, h, d) -> (b, h, s, d) 8x512x16x64
  optax.adamw over 8M f32 and a hand-written jnp Adam over 8M f32, params and moments donated
  the first version's modules, under their names: adam_update_4m (donated), layer_norm and
    softmax_cross_entropy 4096x1024, and "corpus CASE": the tiny tests/data/jax programs
    mlp_forward_backward, adam_update_optax, layer_norm, softmax_cross_entropy, attention_causal
    on their own inputs (dispatch-bound: microseconds)

The second group (`--group extra`, names starting with "x "; `--group all` runs both) holds
programs unlike the first group's, at sizes that are not multiples of 16: value_and_grad of SiLU
and tanh-GELU MLPs (333-1000-1000-77 b250, 1000-333-77 b129); a 3x3 stride-2 NCHW convolution
forward and value_and_grad; a ResNet basic block's forward (two 3x3 convolutions, bias, ReLU, the
residual) at batch 1 (inference) NHWC and NCHW and batch 3 NHWC; max-pool 3x3/2 and avg-pool 2x2
gradients; train-mode batch norm
value_and_grad; grouped-query attention (8 query, 2 key/value heads) with rotary embeddings,
forward and value_and_grad; cumsum/cumprod/cummax; argmax, top_k and sort; one_hot @ W;
segment_sum with unsorted duplicate ids; a where/clip/sign chain; int32 hashing with floor
division and modulo; an f64 layer norm-dense-tanh-logsumexp; a bf16 matmul with f32
accumulation and GELU; pad/slice/concatenate stencils; reductions over non-contiguous axes;
rank-5 broadcasting; an einsum with the batch dim in the middle; an RNN as lax.scan, forward and
value_and_grad; dropout from jax.random (threefry) and from lax.rng_bit_generator; logsumexp
along axis 0; L2 normalization value_and_grad. f64 cases run with jax.enable_x64; bf16 arrays
travel as their u16 bit patterns.

The third group (`--group utils`, names starting with "u ") holds the utility and training-loop
code written around models: power iteration in lax.fori_loop (30 steps, 1024x1024); Newton cube
roots in lax.while_loop with a data-dependent stop (1M); a gather of 262144 rows of a 100000x64
table and take_along_axis; a k-means step (20000x64, 256 centroids: distances, argmin, segment
mean); cdist and top_k nearest neighbours (2048 queries, 8192 points, d 64, k 10, integer-valued
coordinates so that ties are exact); optax chains clip_by_global_norm + sgd momentum and +
adamw over a donated pytree of 20 tensors of mixed shapes; label-smoothed cross-entropy + Huber
loss value_and_grad; argsort and sort of 1M f32 and a stable key/value sort; an int8 x int8 ->
int32 dot with dequantization; scatter max, min and set with duplicate ids; cumulative
logsumexp by lax.associative_scan; jnp.histogram and bincount of 4M values; masked mean and
variance (where=); sliding windows by dynamic_slice in a fori_loop.

The fourth group (`--group models`, names starting with "m ") holds model building blocks: LSTM
and GRU cells under lax.scan (forward and value_and_grad); a transformer decoding step that writes
k and v into a donated [8, 1024, 16, 64] KV cache with dynamic_update_slice and attends over it;
top-2 mixture-of-experts routing over 8 experts (top_k, one-hot dispatch/combine einsums with a
capacity); group and instance norm value_and_grad (NHWC); max-pool 3x3/2 SAME forward; nearest and
bilinear jax.image.resize x2; DP-SGD per-example gradients (jax.vmap(jax.grad)) of an MLP; a
mixed-precision step (bf16 compute, f32 master weights, loss scaling, finite check); softmax and
log_softmax over a middle axis with their gradient; a depthwise 3x3 conv (feature_group_count =
C) + ReLU6 and a 1-D convolution value_and_grad; sinusoidal position embeddings with atan2/hypot.

The fifth group (`--group vision_nlp`, names starting with "v ") holds vision and language
layers: a ViT patch embedding (16x16 stride-16 convolution) + position + layer norm; a stride-2
3x3 convolution + inference batch norm + ReLU; grouped (4 groups), dilated (2) and transposed
(4x4 stride 2 upsampling) convolutions and a 3x3x3 NDHWC convolution; reflect padding + a VALID
convolution; global average pooling + a dense head's cross-entropy value_and_grad; multi-head
attention value_and_grad with a padding mask; RoPE on interleaved pairs of q and k; BERT token +
position embeddings + layer norm value_and_grad (scatter-adds with duplicate ids); a running mean
by cumsum over the sequence axis and a cumprod over axis 0; one_hot of (batch, seq) ids @ W
value_and_grad; top-k sampling with temperature and a Gumbel draw (jax.random.categorical); an
SGD step with threefry dropout; a bf16 autocast feed-forward block value_and_grad.

The sixth group (`--group train`, names starting with "t ") holds complete training steps as users
write them: jax.jit of loss -> grad -> optax update -> new params, the parameters and optimizer
state donated and fed to the next call, starting two steps into training (nonzero moments): a
GELU MLP with optax.adamw and a weight-decay mask; a 2-conv + max-pool + dense NHWC CNN with SGD
momentum; a pre-LN encoder layer (4 heads) with clip_by_global_norm + Adam; a sigmoid-BCE
autoencoder; L2 logistic regression on 100000x256; linear regression with optax.lamb; a GAN's
discriminator and generator steps; label-smoothed cross-entropy with Nesterov SGD; symmetric
InfoNCE over a cosine similarity matrix; skip-gram with negative sampling (gathers, scatter-add
gradients into two 30000x128 tables); an embedding bag (segment_sum) + MLP with Adagrad; a LoRA
step (frozen W, trainable A B, AdamW); gradient accumulation over 4 microbatches in lax.scan; bf16
working params with f32 master weights; RMSProp with an EMA of the parameters.

The seventh group (`--group linalg`, names starting with "l ") holds linear algebra, which JAX
lowers to LAPACK custom calls on CPU: a Gaussian-process marginal log likelihood (RBF kernel,
Cholesky, cho_solve, log det); least squares (SVD); batched solve, inverse and Cholesky of
64x64 matrices; eigh of a 256x256 covariance with its matrix square root; PCA by the thin SVD
with a rank-16 reconstruction; QR orthogonalization with a projection; batched slogdet in f64;
ZCA whitening (eigh); a triangular solve. Outputs avoid LAPACK's sign choices (products that
reconstruct something), so the comparison is a residual.

The eighth group (`--group fft`, names starting with "f ") holds Fourier transforms (HLO fft) and
the complex arithmetic around them: an rfft power spectrum; a low-pass filter (rfft, scale,
irfft); fft2 of a c64 batch, a complex scale and ifft2; an FNO spectral convolution (rfft, 64
kept modes mixed across 32 channels by a complex einsum, irfft); a circular convolution of c128
rows (fft, multiply by a transformed kernel, ifft); FFTs of lengths that are not powers of two
(1000; the prime 10007, Bluestein's algorithm); the magnitude spectrum of 44100-sample audio
frames; image and volume convolution by rfft2/rfftn and irfft2/irfftn; an fft along axis 0; an
STFT (frames gathered, Hann-windowed, rfft, abs); a c64 matmul; complex sum and mean; jnp.where
on c64; jnp.abs and jnp.angle of c64.

The ninth group (`--group wild`, names starting with "w ") holds programs written the way outside
users write them, at their sizes, from idioms the other groups do not combine: a bidirectional GRU
with a length mask (forward and reverse lax.scan) value_and_grad; a two-layer LSTM; optax.ctc_loss
value_and_grad; Viterbi decoding (max-plus scan with argmax back-pointers, a reverse scan for the
backtrace); a depthwise-separable block (5x5 stride 2, pointwise, train-mode batch norm)
value_and_grad; a dilation-3 NCHW convolution value_and_grad; lax.conv_transpose stride 3; DeepLab's
atrous pyramid; average pooling that excludes padding + max pooling NCHW value_and_grad; antialiased
bilinear, lanczos3 and bicubic resizes, a bilinear resize value_and_grad; reverse, integer and
boolean cumulative sums, cummin/cummax; cumsum along axis 0, a reverse f64 cumprod, int8
cummax/cummin and the gradient of a cumsum; an Elman RNN in lax.fori_loop; jnp.lexsort and a descending stable argsort along axis 0;
lax.top_k with k = 100 of a 32003 vocabulary; argmax, a confusion matrix and recall; a 3-operand
einsum, a trace and a bilinear form; per-example gradients of a CNN (vmap(grad)), and clipped ones
of a 1-D CNN; ALiBi attention
value_and_grad; sliding-window causal attention with rotary embeddings; switch (top-1) routing by
argsort, gather and scatter-add; KL, Jensen-Shannon and a masked logsumexp value_and_grad (also
in f64 at another size) and a plain KL mean value_and_grad;
wav2vec 2.0's convolutional front end on 1 s of 16 kHz audio; an embedding bag with per-sample
weights and segment_max value_and_grad; token + position embeddings with a layer norm; a clipped
embedding lookup scaled, dropout-masked and tanh'd;
an optax chain (clip, Adam, masked weight decay, warmup +
cosine schedule) over a donated pytree; special functions (gammaln, digamma, erfinv, erfc, ndtr,
i0e, i1e, gammainc); the activation zoo value_and_grad; int32 index arithmetic (unravel/ravel,
floor and truncating division of negatives, shifts, popcount, clz, wrapping multiply); boolean
masks; an f64 softmax regression value_and_grad and f64 elementwise math; an f16 layer norm +
matmul + GELU; a bf16 MLP value_and_grad; f16 attention with an f16 softmax; f16 operands with
f32 accumulation (preferred_element_type); jax.random samplers (normal, truncated normal, gumbel, bernoulli, permutation);
searchsorted/digitize bucketing; median/quantile; a pixel-shuffle super-resolution head; uint8
image preprocessing; a batch-hard triplet loss value_and_grad; NeRF volume rendering; a greedy
decode in lax.while_loop that stops at an end token. Integer outputs come from data whose order
does not depend on rounding.

Each program is lowered with jax.jit(f, donate_argnums=...).lower(*args).as_text(dialect="hlo")
and written to a temporary directory with its inputs as .npy; optitpu runs it with `optitpu run
FILE --input K=in_K.npy ... --repeat R --warmup 3 --profile warmup --json --trace T` and its
outputs out_K.npy are compared
with what jax.jit(f) returns on the same inputs.

Timing: --rounds rounds alternate the two sides (JAX first in even rounds, optitpu first in odd
ones), each side timing --repeat/--rounds calls a round; the median over all rounds is printed.
JAX: jax.jit on device_put inputs, three warm-up calls before the first round and one before the
others, each call ended by block_until_ready. Where users donate (the optimizer updates), jax.jit
gets donate_argnums and the outputs feed the next call (a training loop); optitpu runs the same
module, whose input_output_alias donates the same parameters (a donated input is uploaded again
before each run, outside the time). Inputs not donated are uploaded once and kept from run to run
on both sides (jax.jit's device_put arrays; `optitpu run --repeat`). optitpu: each invocation (one
per round) makes three untimed warm-up runs first, as JAX gets three warm-up calls (the first builds
native code on a cold cache); only those are profiled (`--profile warmup`: the trace's kernel kinds
come from them), so the timed runs carry no profiler cost, as jax.jit's carry none. Compile time is
outside the figure on both sides.

Threads: both sides get --threads N (default: the CPU count). optitpu: OPTITPU_THREADS=N. XLA:
PJRT_NPROC=N, which jaxlib's CPU client reads for the size of its intra-op thread pool (checked
with jax 0.10.2: N=1 keeps a matmul loop at one CPU busy, N=2 at two), plus
XLA_FLAGS=--xla_cpu_multi_thread_eigen=false when N is 1. The header line states both.

Errors: per output, max |optitpu - jax| and that divided by max |jax| (normwise relative); a case
passes when every output's normwise error is within its tolerance (1e-4 for most programs, 1e-3
for the deep value_and_grad ones, 0 for integer outputs; --tol-scale multiplies them) and no NaN
or Inf differs. A case optitpu cannot compile or run, or whose outputs are beyond tolerance, is
reported as FAIL with the reason and left out of the geometric mean.

ratio = JAX time / optitpu time: > 1 means optitpu is faster. kernels n/i/f/o: the distinct
kernels optitpu ran, by kind, from the Chrome trace of its last invocation (native =
fusion-native, interp = fusion-interp, fast = fusion-fast, other = dot, convolution, gather,
...); then the two kinds taking most of the kernels' time, with their shares.

--json: one JSON object per case in the benchmarks' format ({"bench", "case", "metric", "value",
"baseline", "baseline_value", "ratio", ...} with errors, verdict and kernel counts), then one
object for the geometric mean.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

np = jax = jnp = lax = None  # imported in main() once the thread settings are in the environment


# ---- the programs -------------------------------------------------------------------------------

def _rng(seed):
    return np.random.default_rng(seed)


def _f32(a):
    return np.asarray(a, dtype=np.float32)


def mlp_params(rng, sizes):
    ps = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        ps.append(_f32(rng.standard_normal((a, b)) / math.sqrt(a)))
        ps.append(_f32(rng.standard_normal(b) * 0.1))
    return ps


def act(name):
    return {
        "relu": jax.nn.relu,
        "gelu_exact": lambda v: jax.nn.gelu(v, approximate=False),
        "gelu_tanh": lambda v: jax.nn.gelu(v, approximate=True),
        "silu": jax.nn.silu,
    }[name]


def mlp_apply(params, x, f):
    h = x
    n = len(params) // 2
    for i in range(n):
        h = h @ params[2 * i] + params[2 * i + 1]
        if i < n - 1:
            h = f(h)
    return h


def xent_int(logits, labels):
    lp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(lp, labels[:, None], axis=1))


def make_mlp(actname, grad, quick):
    sizes = [784, 1024, 1024, 10] if not quick else [64, 128, 128, 10]
    batch = 512 if not quick else 32
    rng = _rng(11)
    ps = mlp_params(rng, sizes)
    x = _f32(rng.standard_normal((batch, sizes[0])))
    y = rng.integers(0, sizes[-1], batch).astype(np.int32)
    f = act(actname)
    if not grad:
        def fwd(x, *params):
            return mlp_apply(params, x, f)
        return fwd, [x] + ps, {}

    def step(x, y, *params):
        return jax.value_and_grad(lambda p: xent_int(mlp_apply(p, x, f), y))(params)
    return step, [x, y] + ps, {"tol": 1e-3}


def make_gelu_bias(approx, quick):
    n = 4096 if not quick else 256
    rng = _rng(12)
    x = _f32(rng.standard_normal((n, n)))
    b = _f32(rng.standard_normal(n))

    def f(x, b):
        if approx == "erf":  # written with erf by hand, as a port of PyTorch's GELU: an erf op
            v = x + b
            return v * 0.5 * (1 + jax.scipy.special.erf(v * np.float32(0.7071067811865476)))
        return jax.nn.gelu(x + b, approximate=approx)
    return f, [x, b], {}


def layer_norm(v, g, b):
    mu = jnp.mean(v, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(v - mu), axis=-1, keepdims=True)
    return (v - mu) * lax.rsqrt(var + 1e-5) * g + b


def attention(q, k, v, causal):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(np.sqrt(q.shape[-1]))
    if causal:
        mask = jnp.tril(jnp.ones((q.shape[2], k.shape[2]), bool))
        s = jnp.where(mask, s, jnp.finfo(q.dtype).min)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)


TB_NAMES = ["ln1_g", "ln1_b", "wqkv", "wo", "ln2_g", "ln2_b", "w1", "b1", "w2", "b2"]


def tblock(x, p, heads):
    ln1_g, ln1_b, wqkv, wo, ln2_g, ln2_b, w1, b1, w2, b2 = p
    b, s, d = x.shape
    hd = d // heads
    h = layer_norm(x, ln1_g, ln1_b)
    qkv = (h @ wqkv).reshape(b, s, 3, heads, hd)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    a = attention(q, k, v, True).transpose(0, 2, 1, 3).reshape(b, s, d)
    x = x + a @ wo
    h = layer_norm(x, ln2_g, ln2_b)
    return x + jax.nn.gelu(h @ w1 + b1) @ w2 + b2


def make_tblock(grad, quick):
    b, s, d, heads, ff = (8, 128, 256, 4, 1024) if not quick else (2, 16, 32, 2, 64)
    rng = _rng(13)
    p = [_f32(1 + 0.1 * rng.standard_normal(d)), _f32(0.1 * rng.standard_normal(d)),
         _f32(rng.standard_normal((d, 3 * d)) / math.sqrt(d)),
         _f32(rng.standard_normal((d, d)) / math.sqrt(d)),
         _f32(1 + 0.1 * rng.standard_normal(d)), _f32(0.1 * rng.standard_normal(d)),
         _f32(rng.standard_normal((d, ff)) / math.sqrt(d)), _f32(0.1 * rng.standard_normal(ff)),
         _f32(rng.standard_normal((ff, d)) / math.sqrt(ff)), _f32(0.1 * rng.standard_normal(d))]
    x = _f32(rng.standard_normal((b, s, d)))
    if not grad:
        def fwd(x, *p):
            return tblock(x, p, heads)
        return fwd, [x] + p, {}

    def step(x, *p):
        return jax.value_and_grad(lambda p: jnp.mean(jnp.square(tblock(x, p, heads))))(p)
    return step, [x] + p, {"tol": 1e-3}


def make_attention(causal, grad, quick):
    b, h, s, d = (4, 8, 256, 64) if not quick else (2, 2, 16, 8)
    rng = _rng(14)
    q, k, v = (_f32(rng.standard_normal((b, h, s, d))) for _ in range(3))
    if not grad:
        def fwd(q, k, v):
            return attention(q, k, v, causal)
        return fwd, [q, k, v], {}
    ct = _f32(rng.standard_normal((b, h, s, d)))

    def step(q, k, v, ct):
        return jax.value_and_grad(lambda q, k, v: jnp.sum(attention(q, k, v, causal) * ct),
                                  argnums=(0, 1, 2))(q, k, v)
    return step, [q, k, v, ct], {"tol": 1e-3}


def conv(x, w, layout):
    dn = ("NHWC", "HWIO", "NHWC") if layout == "NHWC" else ("NCHW", "OIHW", "NCHW")
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn)


def conv_weight(rng, cin, cout, layout):
    w = _f32(rng.standard_normal((3, 3, cin, cout)) / math.sqrt(9 * cin))
    return w if layout == "NHWC" else np.ascontiguousarray(w.transpose(3, 2, 0, 1))


def conv_input(rng, n, hw, c, layout):
    x = _f32(rng.standard_normal((n, hw, hw, c)))
    return x if layout == "NHWC" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def make_conv(layout, quick):
    n, hw, c = (16, 32, 64) if not quick else (2, 8, 8)
    rng = _rng(15)
    x = conv_input(rng, n, hw, c, layout)
    w = conv_weight(rng, c, c, layout)
    b = _f32(0.1 * rng.standard_normal(c))
    bshape = (1, 1, 1, c) if layout == "NHWC" else (1, c, 1, 1)

    def f(x, w, b):
        return jax.nn.relu(conv(x, w, layout) + b.reshape(bshape))
    return f, [x, w, b], {}


def make_convnet(layout, quick):
    n, hw, c1, c2, ncls = (16, 32, 32, 64, 10) if not quick else (2, 8, 4, 8, 10)
    cin = 3
    rng = _rng(16)
    x = conv_input(rng, n, hw, cin, layout)
    y = rng.integers(0, ncls, n).astype(np.int32)
    p = [conv_weight(rng, cin, c1, layout), _f32(0.1 * rng.standard_normal(c1)),
         conv_weight(rng, c1, c2, layout), _f32(0.1 * rng.standard_normal(c2)),
         _f32(rng.standard_normal((c2, ncls)) / math.sqrt(c2)), _f32(np.zeros(ncls))]
    nhwc = layout == "NHWC"
    bshape = (lambda c: (1, 1, 1, c)) if nhwc else (lambda c: (1, c, 1, 1))
    win = (1, 2, 2, 1) if nhwc else (1, 1, 2, 2)
    sp = (1, 2) if nhwc else (2, 3)

    def net(p, x):
        w1, b1, w2, b2, wd, bd = p
        h = jax.nn.relu(conv(x, w1, layout) + b1.reshape(bshape(c1)))
        h = lax.reduce_window(h, -jnp.inf, lax.max, win, win, "VALID")
        h = jax.nn.relu(conv(h, w2, layout) + b2.reshape(bshape(c2)))
        return jnp.mean(h, axis=sp) @ wd + bd

    def step(x, y, *p):
        return jax.value_and_grad(lambda p: xent_int(net(p, x), y))(p)
    return step, [x, y] + p, {"tol": 1e-3}


def make_layer_norm(grad, quick):
    r, c = (8192, 1024) if not quick else (64, 128)
    rng = _rng(17)
    x = _f32(rng.standard_normal((r, c)))
    g = _f32(1 + 0.1 * rng.standard_normal(c))
    b = _f32(0.1 * rng.standard_normal(c))
    if not grad:
        return layer_norm, [x, g, b], {}
    ct = _f32(rng.standard_normal((r, c)))

    def step(x, g, b, ct):
        return jax.value_and_grad(lambda x, g, b: jnp.sum(layer_norm(x, g, b) * ct),
                                  argnums=(0, 1, 2))(x, g, b)
    return step, [x, g, b, ct], {"tol": 1e-3}


def make_rms_residual(quick):
    r, c = (8192, 1024) if not quick else (64, 128)
    rng = _rng(18)
    x = _f32(rng.standard_normal((r, c)))
    res = _f32(rng.standard_normal((r, c)))
    g = _f32(1 + 0.1 * rng.standard_normal(c))

    def f(x, res, g):
        h = x + res
        ms = jnp.mean(jnp.square(h), axis=-1, keepdims=True)
        return h * lax.rsqrt(ms + 1e-6) * g, h
    return f, [x, res, g], {}


def make_xent(grad, quick):
    n, v = (2048, 8192) if not quick else (32, 64)
    rng = _rng(19)
    lg = _f32(rng.standard_normal((n, v)) * 2)
    lb = rng.integers(0, v, n).astype(np.int32)
    if not grad:
        return xent_int, [lg, lb], {}

    def step(lg, lb):
        return jax.value_and_grad(xent_int)(lg, lb)
    return step, [lg, lb], {}


def make_embed(grad, quick):
    vocab, d, b, s = (32000, 512, 8, 1024) if not quick else (100, 16, 2, 8)
    rng = _rng(20)
    table = _f32(rng.standard_normal((vocab, d)))
    ids = rng.integers(0, vocab, (b, s)).astype(np.int32)
    if not grad:
        def gather(table, ids):
            return table[ids]
        return gather, [table, ids], {}
    ct = _f32(rng.standard_normal((b, s, d)))

    def scatter(table, ids, ct):
        return jax.vjp(lambda t: t[ids], table)[1](ct)[0]
    return scatter, [table, ids, ct], {}


def make_reduce(axis, quick):
    n = 256 if not quick else 16
    rng = _rng(21)
    x = _f32(rng.standard_normal((n, n, n)))

    def f(x):
        return jnp.sum(x, axis=axis)
    return f, [x], {"tol": 1e-4}


def make_transpose(kind, quick):
    rng = _rng(22)
    if kind == "2d":
        shape, perm = ((4096, 4096) if not quick else (64, 48)), (1, 0)
    elif kind == "nhwc_nchw":
        shape, perm = ((64, 56, 56, 64) if not quick else (2, 6, 6, 8)), (0, 3, 1, 2)
    else:
        shape, perm = ((8, 512, 16, 64) if not quick else (2, 8, 4, 8)), (0, 2, 1, 3)
    x = _f32(rng.standard_normal(shape))

    def f(x):
        return jnp.transpose(x, perm)
    return f, [x], {"tol": 0.0}


def make_adamw_optax(quick):
    import optax
    n = 8 * 1024 * 1024 if not quick else 4096
    rng = _rng(23)
    p = _f32(rng.standard_normal(n))
    g = _f32(rng.standard_normal(n) * 0.01)
    m = _f32(rng.standard_normal(n) * 0.001)
    v = _f32(np.abs(rng.standard_normal(n)) * 1e-5)
    cnt = np.int32(3)
    opt = optax.adamw(1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-4)

    treedef = jax.tree_util.tree_structure(opt.init(p))  # leaves: count, mu, nu

    def step(p, m, v, cnt, g):
        state = jax.tree_util.tree_unflatten(treedef, [cnt, m, v])
        upd, new = opt.update(g, state, p)
        cnt, m, v = jax.tree_util.tree_leaves(new)
        return optax.apply_updates(p, upd), m, v, cnt

    def chain(out, args):
        return [out[0], out[1], out[2], out[3], args[4]]
    return step, [p, m, v, cnt, g], {"donate": (0, 1, 2), "chain": chain}


def make_adam_jnp(quick):
    n = 8 * 1024 * 1024 if not quick else 4096
    rng = _rng(24)
    p = _f32(rng.standard_normal(n))
    g = _f32(rng.standard_normal(n) * 0.01)
    m = _f32(rng.standard_normal(n) * 0.001)
    v = _f32(np.abs(rng.standard_normal(n)) * 1e-5)
    t = np.float32(3)

    def step(p, m, v, t, g, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
        t = t + 1
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mh = m / (1 - b1 ** t)
        vh = v / (1 - b2 ** t)
        return p - lr * mh / (jnp.sqrt(vh) + eps), m, v, t

    def chain(out, args):
        return [out[0], out[1], out[2], out[3], args[4]]
    return step, [p, m, v, t, g], {"donate": (0, 1, 2), "chain": chain}


# The modules the suite's first version timed, kept under their names so earlier figures stay
# comparable (docs/codegen.md): the tiny corpus cases on their own inputs, and three larger ones.
CORPUS = os.path.join(ROOT, "tests", "data", "jax")


def corpus_args(case):
    paths, i = [], 0
    while os.path.exists(os.path.join(CORPUS, case, f"input_{i}.npy")):
        paths.append(os.path.join(CORPUS, case, f"input_{i}.npy"))
        i += 1
    if not paths:
        raise FileNotFoundError(f"{CORPUS}/{case}/input_0.npy")
    return [np.load(p) for p in paths]


def mlp_onehot_step(w1, b1, w2, b2, x, y):
    def loss(params):
        w1, b1, w2, b2 = params
        logits = jax.nn.relu(x @ w1 + b1) @ w2 + b2
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))
    return jax.value_and_grad(loss)((w1, b1, w2, b2))


def optax_adam_corpus_step():
    import optax
    opt = optax.adam(1e-2, b1=0.9, b2=0.999, eps=1e-8)

    def step(w, b, gw, gb, mw, mb, vw, vb, cnt):
        state = (optax.ScaleByAdamState(count=cnt, mu={"b": mb, "w": mw}, nu={"b": vb, "w": vw}),
                 optax.EmptyState())
        upd, new = opt.update({"w": gw, "b": gb}, state, {"w": w, "b": b})
        newp = optax.apply_updates({"w": w, "b": b}, upd)
        return (newp["w"], newp["b"], new[0].mu["w"], new[0].mu["b"], new[0].nu["w"],
                new[0].nu["b"], new[0].count)
    return step


def make_corpus(case):
    fns = {"mlp_forward_backward": lambda: mlp_onehot_step,
           "adam_update_optax": optax_adam_corpus_step,
           "layer_norm": lambda: layer_norm,
           "softmax_cross_entropy": lambda: xent_int,
           "attention_causal": lambda: (lambda q, k, v: attention(q, k, v, True))}
    return fns[case](), corpus_args(case), {}


def make_legacy_large(kind, quick):
    rng = _rng(1)
    if kind == "adam":
        n = 4194304 if not quick else 4096
        p, g, m = (_f32(rng.standard_normal(n)) for _ in range(3))
        v = _f32(np.abs(rng.standard_normal(n)))

        def adam_4m(p, g, m, v):
            mn = 0.9 * m + 0.1 * g
            vn = 0.999 * v + 0.001 * (g * g)
            return p - 0.001 * (mn / (jnp.sqrt(vn) + 1e-8)), mn, vn

        def chain(out, args):
            return [out[0], args[1], out[1], out[2]]
        return adam_4m, [p, g, m, v], {"donate": (0, 2, 3), "chain": chain}
    r, c = (4096, 1024) if not quick else (64, 128)
    x = _f32(rng.standard_normal((r, c)))
    if kind == "layer_norm":
        return layer_norm, [x, _f32(rng.standard_normal(c)), _f32(rng.standard_normal(c))], {}
    return xent_int, [x, rng.integers(0, c, r).astype(np.int32)], {}


def case_list(quick):
    """(name, builder) in the order they run; names carry the sizes of a full run or of --quick."""
    q = quick

    def sz(full, small):
        return small if q else full
    mlp = sz("784-1024-1024-10 b512", "64-128-128-10 b32")
    att = sz("b4 h8 s256 d64", "b2 h2 s16 d8")
    cnv = sz("16x32x32x64", "2x8x8x8")
    net = sz("16x32x32x3 c32,64", "2x8x8x3 c4,8")
    tb = sz("b8 s128 d256 h4 ff1024", "b2 s16 d32 h2 ff64")
    ln = sz("8192x1024", "64x128")
    r3 = sz("256^3", "16^3")
    opt = sz("8M f32", "4096 f32")
    c = []
    for a in ("relu", "gelu_exact"):
        c.append((f"mlp_{a} forward {mlp}", lambda a=a: make_mlp(a, False, q)))
    for a in ("relu", "gelu_exact", "gelu_tanh", "silu"):
        c.append((f"mlp_{a} value_and_grad {mlp}", lambda a=a: make_mlp(a, True, q)))
    c.append((f"gelu_tanh(x+bias) {sz('4096x4096', '256x256')}",
              lambda: make_gelu_bias(True, q)))
    c.append((f"gelu_exact(x+bias) {sz('4096x4096', '256x256')}",
              lambda: make_gelu_bias(False, q)))
    c.append((f"gelu_erf(x+bias) {sz('4096x4096', '256x256')}",
              lambda: make_gelu_bias("erf", q)))
    c.append((f"transformer_block forward {tb}", lambda: make_tblock(False, q)))
    c.append((f"transformer_block value_and_grad {tb}", lambda: make_tblock(True, q)))
    c.append((f"attention causal forward {att}", lambda: make_attention(True, False, q)))
    c.append((f"attention full forward {att}", lambda: make_attention(False, False, q)))
    c.append((f"attention causal value_and_grad {att}", lambda: make_attention(True, True, q)))
    for lay in ("NHWC", "NCHW"):
        c.append((f"conv3x3+bias+relu {lay} {cnv}", lambda lay=lay: make_conv(lay, q)))
    for lay in ("NHWC", "NCHW"):
        c.append((f"convnet value_and_grad {lay} {net}", lambda lay=lay: make_convnet(lay, q)))
    c.append((f"layer_norm forward {ln}", lambda: make_layer_norm(False, q)))
    c.append((f"layer_norm value_and_grad {ln}", lambda: make_layer_norm(True, q)))
    c.append((f"rms_norm+residual {ln}", lambda: make_rms_residual(q)))
    xe = sz("2048x8192", "32x64")
    c.append((f"softmax_xent forward {xe}", lambda: make_xent(False, q)))
    c.append((f"softmax_xent value_and_grad {xe}", lambda: make_xent(True, q)))
    em = sz("32000x512 ids 8x1024", "100x16 ids 2x8")
    c.append((f"embedding gather {em}", lambda: make_embed(False, q)))
    c.append((f"embedding scatter-add grad {em}", lambda: make_embed(True, q)))
    for ax, label in ((0, "axis0"), (1, "axis1"), (2, "axis2"), (None, "all")):
        c.append((f"reduce_sum {label} {r3}", lambda ax=ax: make_reduce(ax, q)))
    c.append((f"transpose 2d {sz('4096x4096', '64x48')}", lambda: make_transpose("2d", q)))
    c.append((f"transpose NHWC->NCHW {sz('64x56x56x64', '2x6x6x8')}",
              lambda: make_transpose("nhwc_nchw", q)))
    c.append((f"transpose bshd->bhsd {sz('8x512x16x64', '2x8x4x8')}",
              lambda: make_transpose("heads", q)))
    c.append((f"adamw optax donated {opt}", lambda: make_adamw_optax(q)))
    c.append((f"adam jnp donated {opt}", lambda: make_adam_jnp(q)))
    c.append((f"adam_update_4m donated {sz('4194304', '4096')}",
              lambda: make_legacy_large("adam", q)))
    c.append((f"layer_norm {sz('4096x1024', '64x128')}", lambda: make_legacy_large("layer_norm", q)))
    c.append((f"softmax_cross_entropy {sz('4096x1024', '64x128')}",
              lambda: make_legacy_large("xent", q)))
    for case in ("mlp_forward_backward", "adam_update_optax", "layer_norm",
                 "softmax_cross_entropy", "attention_causal"):
        c.append((f"corpus {case}", lambda case=case: make_corpus(case)))
    return c


# ---- the second group: programs unlike the suite's, at odd sizes (`--group extra`) -------------
# Sizes that are not multiples of 16, layouts and ops the first group does not use: each case is
# something a user writes without thinking of the compiler (strided NCHW convolutions and their
# gradients, pooling gradients, train-mode batch norm, grouped-query attention with rotary
# embeddings, scans, sorting, scatter-adds with duplicate indices, integer and f64 arithmetic,
# bf16 matmuls, counter-based random numbers).

def make_x_mlp(actname, sizes, batch, quick):
    if quick:
        sizes, batch = [s // 8 + 3 for s in sizes[:-1]] + [sizes[-1]], 13
    rng = _rng(31)
    ps = mlp_params(rng, sizes)
    x = _f32(rng.standard_normal((batch, sizes[0])))
    y = rng.integers(0, sizes[-1], batch).astype(np.int32)
    f = act(actname)

    def step(x, y, *params):
        return jax.value_and_grad(lambda p: xent_int(mlp_apply(p, x, f), y))(params)
    return step, [x, y] + ps, {"tol": 1e-3}


def make_x_conv_s2(grad, quick):
    n, c, hw, co = (16, 32, 56, 64) if not quick else (2, 3, 9, 5)
    rng = _rng(32)
    x = _f32(rng.standard_normal((n, c, hw, hw)))
    w = _f32(rng.standard_normal((co, c, 3, 3)) / math.sqrt(9 * c))
    b = _f32(0.1 * rng.standard_normal(co))

    def f(x, w, b):
        y = lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1)),
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return jax.nn.relu(y + b.reshape(1, co, 1, 1))
    if not grad:
        return f, [x, w, b], {}
    ct = _f32(rng.standard_normal(jax.eval_shape(f, x, w, b).shape))

    def step(x, w, b, ct):
        return jax.value_and_grad(lambda x, w, b: jnp.sum(f(x, w, b) * ct),
                                  argnums=(0, 1, 2))(x, w, b)
    return step, [x, w, b, ct], {"tol": 1e-3}


def make_x_resblock(layout, n, quick):
    """A ResNet basic block's forward (inference: batch 1, or an odd batch): 3x3 conv + bias + ReLU,
    3x3 conv + bias, the residual added, ReLU."""
    hw, c = (56, 64) if not quick else (7, 5)
    rng = _rng(35)
    x = conv_input(rng, n, hw, c, layout)
    w1, w2 = conv_weight(rng, c, c, layout), conv_weight(rng, c, c, layout)
    b1, b2 = _f32(0.1 * rng.standard_normal(c)), _f32(0.1 * rng.standard_normal(c))
    bshape = (1, 1, 1, c) if layout == "NHWC" else (1, c, 1, 1)

    def f(x, w1, b1, w2, b2):
        h = jax.nn.relu(conv(x, w1, layout) + b1.reshape(bshape))
        return jax.nn.relu(conv(h, w2, layout) + b2.reshape(bshape) + x)
    return f, [x, w1, b1, w2, b2], {}


def make_x_pool_grad(kind, quick):
    n, hw, c = (32, 55, 64) if not quick else (2, 7, 3)
    rng = _rng(33)
    x = _f32(rng.standard_normal((n, hw, hw, c)))

    def pool(x):
        if kind == "max":  # 3x3 stride 2, as in AlexNet/ResNet stems
            return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "VALID")
        s = lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")
        return s * 0.25
    ct = _f32(rng.standard_normal(jax.eval_shape(pool, x).shape))

    def step(x, ct):
        return jax.value_and_grad(lambda x: jnp.sum(pool(x) * ct))(x)
    return step, [x, ct], {"tol": 1e-3}


def make_x_batchnorm(quick):
    n, hw, c = (32, 28, 96) if not quick else (2, 5, 3)
    rng = _rng(34)
    x = _f32(rng.standard_normal((n, hw, hw, c)) * 2 + 1)
    g = _f32(1 + 0.1 * rng.standard_normal(c))
    b = _f32(0.1 * rng.standard_normal(c))
    ct = _f32(rng.standard_normal((n, hw, hw, c)))

    def bn(x, g, b):  # train mode: batch statistics over N, H, W
        mu = jnp.mean(x, axis=(0, 1, 2))
        var = jnp.var(x, axis=(0, 1, 2))
        return (x - mu) * lax.rsqrt(var + 1e-5) * g + b, mu, var

    def step(x, g, b, ct):
        (loss, (mu, var)), grads = jax.value_and_grad(
            lambda x, g, b: (lambda y: (jnp.sum(y[0] * ct), y[1:]))(bn(x, g, b)),
            argnums=(0, 1, 2), has_aux=True)(x, g, b)
        return loss, mu, var, grads
    return step, [x, g, b, ct], {"tol": 1e-3}


def rope(x, pos):  # x: (b, s, h, d), rotary embedding on interleaved halves
    d = x.shape[-1]
    inv = 1.0 / (10000.0 ** (jnp.arange(0, d // 2, dtype=jnp.float32) / (d // 2)))
    ang = pos[:, None].astype(jnp.float32) * inv[None, :]
    cos, sin = jnp.cos(ang)[None, :, None, :], jnp.sin(ang)[None, :, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def make_x_gqa(grad, quick):
    b, s, hq, hkv, d = (2, 300, 8, 2, 64) if not quick else (1, 11, 4, 2, 8)
    rng = _rng(35)
    q = _f32(rng.standard_normal((b, s, hq, d)))
    k = _f32(rng.standard_normal((b, s, hkv, d)))
    v = _f32(rng.standard_normal((b, s, hkv, d)))
    pos = np.arange(s, dtype=np.int32)

    def f(q, k, v, pos):
        q, k = rope(q, pos), rope(k, pos)
        qg = q.reshape(b, s, hkv, hq // hkv, d)
        sc = jnp.einsum("bqgrd,bkgd->bgrqk", qg, k) / np.float32(math.sqrt(d))
        mask = jnp.tril(jnp.ones((s, s), bool))
        sc = jnp.where(mask, sc, -1e30)
        o = jnp.einsum("bgrqk,bkgd->bqgrd", jax.nn.softmax(sc, axis=-1), v)
        return o.reshape(b, s, hq, d)
    if not grad:
        return f, [q, k, v, pos], {}
    ct = _f32(rng.standard_normal((b, s, hq, d)))

    def step(q, k, v, pos, ct):
        return jax.value_and_grad(lambda q, k, v: jnp.sum(f(q, k, v, pos) * ct),
                                  argnums=(0, 1, 2))(q, k, v)
    return step, [q, k, v, pos, ct], {"tol": 1e-3}


def make_x_cumulative(quick):
    r, c = (1000, 777) if not quick else (9, 7)
    rng = _rng(36)
    x = _f32(rng.standard_normal((r, c)))
    y = _f32(1 + 0.001 * rng.standard_normal((r, c)))

    def f(x, y):
        return jnp.cumsum(x, axis=1), jnp.cumprod(y, axis=0), lax.cummax(x, axis=0)
    return f, [x, y], {"tol": 1e-4}


def make_x_sort(quick):
    r, c = (1000, 1000) if not quick else (7, 33)
    rng = _rng(37)
    x = _f32(rng.standard_normal((r, c)))

    def f(x):
        vals, idx = lax.top_k(x, 5)
        return jnp.argmax(x, axis=-1).astype(jnp.int32), vals, idx, jnp.sort(x, axis=0)
    return f, [x], {"tol": 0.0}


def make_x_onehot(quick):
    n, vocab, d = (4000, 1000, 333) if not quick else (17, 11, 5)
    rng = _rng(38)
    ids = rng.integers(0, vocab, n).astype(np.int32)
    w = _f32(rng.standard_normal((vocab, d)))

    def f(ids, w):
        return jax.nn.one_hot(ids, vocab, dtype=jnp.float32) @ w
    return f, [ids, w], {}


def make_x_segment_sum(quick):
    n, d, segs = (200000, 48, 1000) if not quick else (50, 3, 7)
    rng = _rng(39)
    data = _f32(rng.standard_normal((n, d)))
    seg = rng.integers(0, segs, n).astype(np.int32)  # unsorted, many duplicates

    def f(data, seg):
        return jax.ops.segment_sum(data, seg, num_segments=segs)
    return f, [data, seg], {"tol": 1e-4}


def make_x_where_chain(quick):
    n = (2000, 1001) if not quick else (9, 13)
    rng = _rng(40)
    x, y = (_f32(rng.standard_normal(n) * 3) for _ in range(2))

    def f(x, y):
        a = jnp.clip(x, -1.5, 2.5)
        s = jnp.where(x > y, a * y, jnp.where(y > 1, x - y, jnp.abs(x) + 1))
        m = jnp.maximum(s, -a) * jnp.sign(y)
        return jnp.where(jnp.isfinite(m) & (m != 0), m / (1 + jnp.abs(s)), 0.0)
    return f, [x, y], {}


def make_x_int32(quick):
    n = 4000037 if not quick else 101
    rng = _rng(41)
    a = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int64).astype(np.int32)
    b = rng.integers(1, 1000, n).astype(np.int32)

    def f(a, b):
        h = a * np.int32(-1640531535) + b  # wrapping multiply-add (a hash)
        h = h ^ lax.shift_right_logical(h, np.int32(15))
        h = h ^ lax.shift_left(h, np.int32(7))
        q = h // b  # floor division and modulo of signed values
        r = h % b
        return q, r, jnp.sum(r), jnp.max(jnp.abs(q) // 7)
    return f, [a, b], {"tol": 0.0}


def make_x_f64(quick):
    r, c, o = (1000, 333, 77) if not quick else (9, 7, 5)
    rng = _rng(42)
    x = rng.standard_normal((r, c))
    w = rng.standard_normal((c, o)) / math.sqrt(c)
    g = 1 + 0.1 * rng.standard_normal(c)

    def f(x, w, g):  # layer norm, dense, tanh, log-sum-exp in double precision
        mu = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
        h = jnp.tanh((x - mu) / jnp.sqrt(var + 1e-12) * g @ w)
        return h, jax.nn.logsumexp(h, axis=-1)
    return f, [x, w, g], {"tol": 1e-10, "x64": True}


def make_x_bf16(quick):
    m, k, n = (1000, 768, 3072) if not quick else (9, 16, 24)
    import ml_dtypes
    rng = _rng(43)
    bf = ml_dtypes.bfloat16
    x = (rng.standard_normal((m, k))).astype(bf)
    w = (rng.standard_normal((k, n)) / math.sqrt(k)).astype(bf)
    b = _f32(0.1 * rng.standard_normal(n))

    def f(x, w, b):  # bf16 operands, f32 accumulation, bf16 activations out
        h = jnp.dot(x, w, preferred_element_type=jnp.float32) + b
        return jax.nn.gelu(h).astype(jnp.bfloat16)
    return f, [x, w, b], {"tol": 1e-2}


def make_x_stencil(quick):
    n, hw = (64, 127) if not quick else (2, 9)
    rng = _rng(44)
    x = _f32(rng.standard_normal((n, hw, hw)))

    def f(x):  # pad, shifted slices, concatenation: a 5-point Laplacian and a space-to-depth
        p = jnp.pad(x, ((0, 0), (1, 1), (1, 1)), mode="edge")
        lap = (p[:, :-2, 1:-1] + p[:, 2:, 1:-1] + p[:, 1:-1, :-2] + p[:, 1:-1, 2:]
               - 4 * x)
        e = jnp.pad(x, ((0, 0), (0, 1), (0, 1)))
        s2d = jnp.concatenate([e[:, 0::2, 0::2], e[:, 1::2, 0::2], e[:, 0::2, 1::2],
                               e[:, 1::2, 1::2]], axis=0)
        return lap, s2d
    return f, [x], {}


def make_x_reduce_axes(quick):
    shape = (64, 120, 33, 40) if not quick else (3, 5, 7, 4)
    rng = _rng(45)
    x = _f32(rng.standard_normal(shape))

    def f(x):
        return jnp.sum(x, axis=(0, 2)), jnp.max(x, axis=1), jnp.mean(x * x, axis=(1, 3))
    return f, [x], {}


def make_x_broadcast(quick):
    a, b, c, d, e = (16, 24, 65, 31, 7) if not quick else (2, 3, 5, 4, 3)
    rng = _rng(46)
    x = _f32(rng.standard_normal((a, 1, c, 1, e)))
    y = _f32(rng.standard_normal((1, b, 1, d, e)))
    z = _f32(rng.standard_normal((b, 1, 1, 1)))

    def f(x, y, z):
        return jnp.tanh(x * y + z) - x

    return f, [x, y, z], {}


def make_x_einsum(quick):
    i, bt, j, k, l = (48, 6, 64, 40, 96) if not quick else (5, 2, 3, 4, 7)
    rng = _rng(47)
    x = _f32(rng.standard_normal((i, bt, j, k)))
    y = _f32(rng.standard_normal((j, bt, k, l)))

    def f(x, y):  # the batch dimension second in one operand, contracted j,k split around it
        return jnp.einsum("ibjk,jbkl->lbi", x, y)
    return f, [x, y], {}


def make_x_rnn(grad, quick):
    t, b, nin, nh = (64, 32, 129, 257) if not quick else (5, 3, 4, 6)
    rng = _rng(48)
    xs = _f32(rng.standard_normal((t, b, nin)))
    wx = _f32(rng.standard_normal((nin, nh)) / math.sqrt(nin))
    wh = _f32(rng.standard_normal((nh, nh)) / math.sqrt(nh))
    bias = _f32(0.1 * rng.standard_normal(nh))

    def run(wx, wh, bias, xs):
        def cell(h, x):
            h = jnp.tanh(x @ wx + h @ wh + bias)
            return h, h
        h, hs = lax.scan(cell, jnp.zeros((b, nh), jnp.float32), xs)
        return h, hs
    if not grad:
        return run, [wx, wh, bias, xs], {}

    def step(wx, wh, bias, xs):
        return jax.value_and_grad(lambda p: jnp.mean(jnp.square(run(*p, xs)[1])))((wx, wh, bias))
    return step, [wx, wh, bias, xs], {"tol": 1e-3}


def make_x_dropout(impl, quick):
    m, k, n = (1024, 999, 512) if not quick else (9, 7, 5)
    rng = _rng(49)
    x = _f32(rng.standard_normal((m, k)))
    w = _f32(rng.standard_normal((k, n)) / math.sqrt(k))
    seed = np.array([0, 1234], np.uint32) if impl == "threefry" else \
        np.arange(4, dtype=np.uint32) * 977
    if impl == "threefry":
        def f(x, w, key):  # jax.random with its default threefry2x32 key
            keep = jax.random.bernoulli(jax.random.wrap_key_data(key), 0.9, x.shape)
            return jnp.where(keep, x / 0.9, 0.0) @ w
    else:
        def f(x, w, key):  # lax.rng_bit_generator (XLA's RngBitGenerator op, default algorithm)
            _, bits = lax.rng_bit_generator(key, x.shape, dtype=jnp.uint32)
            keep = bits < np.uint32(int(0.9 * 2**32))
            return jnp.where(keep, x / 0.9, 0.0) @ w
    return f, [x, w, seed], {}


def make_x_logsumexp(quick):
    r, c = (4000, 1000) if not quick else (9, 7)
    rng = _rng(50)
    x = _f32(rng.standard_normal((r, c)) * 4)

    def f(x):  # along the first (non-contiguous) axis, and over the whole array
        return jax.nn.logsumexp(x, axis=0), jax.nn.logsumexp(x)
    return f, [x], {}


def make_x_cond(quick):
    n = 1024 if not quick else 16
    rng = _rng(57)
    x = _f32(rng.standard_normal((n, n)))
    w = _f32(rng.standard_normal((n, n)) / math.sqrt(n))

    def f(x, w):  # lax.cond on a value of the data: the branch runs compiled
        return jax.lax.cond(jnp.sum(x) > 0, lambda x: jax.nn.gelu(x @ w) * 2.0,
                            lambda x: jnp.tanh(x @ w.T) + 1.0, x)
    return f, [x, w], {"tol": 1e-4}


def make_x_l2norm(quick):
    r, c = (8191, 300) if not quick else (9, 7)
    rng = _rng(51)
    x = _f32(rng.standard_normal((r, c)))
    ct = _f32(rng.standard_normal((r, c)))

    def norm(x):
        return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)

    def step(x, ct):
        return jax.value_and_grad(lambda x: jnp.sum(norm(x) * ct))(x)
    return step, [x, ct], {"tol": 1e-3}


def extra_case_list(quick):
    """The second group, each name starting with "x ". Sizes are those of a full run."""
    q = quick
    c = [("x mlp_silu value_and_grad 333-1000-1000-77 b250",
          lambda: make_x_mlp("silu", [333, 1000, 1000, 77], 250, q)),
         ("x mlp_gelu_tanh value_and_grad 1000-333-77 b129",
          lambda: make_x_mlp("gelu_tanh", [1000, 333, 77], 129, q)),
         ("x conv3x3 stride2 NCHW 16x32x56x56->64 forward", lambda: make_x_conv_s2(False, q)),
         ("x conv3x3 stride2 NCHW 16x32x56x56->64 value_and_grad",
          lambda: make_x_conv_s2(True, q)),
         ("x resnet block forward b1 NHWC 56x56x64", lambda: make_x_resblock("NHWC", 1, q)),
         ("x resnet block forward b1 NCHW 64x56x56", lambda: make_x_resblock("NCHW", 1, q)),
         ("x resnet block forward b3 NHWC 56x56x64", lambda: make_x_resblock("NHWC", 3, q)),
         ("x maxpool3x3s2 grad NHWC 32x55x55x64", lambda: make_x_pool_grad("max", q)),
         ("x avgpool2x2 grad NHWC 32x55x55x64", lambda: make_x_pool_grad("avg", q)),
         ("x batchnorm train value_and_grad NHWC 32x28x28x96", lambda: make_x_batchnorm(q)),
         ("x gqa+rope causal forward b2 s300 hq8 hkv2 d64", lambda: make_x_gqa(False, q)),
         ("x gqa+rope causal value_and_grad b2 s300 hq8 hkv2 d64",
          lambda: make_x_gqa(True, q)),
         ("x cumsum/cumprod/cummax 1000x777", lambda: make_x_cumulative(q)),
         ("x argmax/top_k/sort 1000x1000", lambda: make_x_sort(q)),
         ("x one_hot(4000 of 1000) @ 1000x333", lambda: make_x_onehot(q)),
         ("x segment_sum 200000x48 -> 1000 segments", lambda: make_x_segment_sum(q)),
         ("x where/clip/select chain 2000x1001", lambda: make_x_where_chain(q)),
         ("x int32 hash/div/mod 4000037", lambda: make_x_int32(q)),
         ("x f64 layer_norm-dense-tanh-logsumexp 1000x333x77", lambda: make_x_f64(q)),
         ("x bf16 matmul 1000x768x3072 + gelu", lambda: make_x_bf16(q)),
         ("x pad/slice/concat stencil 64x127x127", lambda: make_x_stencil(q)),
         ("x reduce axes (0,2) 1 (1,3) 64x120x33x40", lambda: make_x_reduce_axes(q)),
         ("x broadcast rank5 16x24x65x31x7", lambda: make_x_broadcast(q)),
         ("x einsum ibjk,jbkl->lbi 48x6x64x40x96", lambda: make_x_einsum(q)),
         ("x rnn scan forward T64 b32 129->257", lambda: make_x_rnn(False, q)),
         ("x rnn scan value_and_grad T64 b32 129->257", lambda: make_x_rnn(True, q)),
         ("x dropout threefry + matmul 1024x999x512", lambda: make_x_dropout("threefry", q)),
         ("x dropout rng_bit_generator + matmul 1024x999x512",
          lambda: make_x_dropout("rbg", q)),
         ("x logsumexp axis0 and all 4000x1000", lambda: make_x_logsumexp(q)),
         ("x l2_normalize value_and_grad 8191x300", lambda: make_x_l2norm(q)),
         ("x lax.cond matmul+gelu or matmul+tanh 1024x1024", lambda: make_x_cond(q))]
    return c


# ---- the third group: utility and training-loop programs (`--group utils`) ---------------------
# What a user writes around a model rather than inside it: loops (fori_loop, while_loop with a
# data-dependent stop, dynamic slices), gathers by large index vectors, k-means and nearest
# neighbours, optimizer chains over a pytree, losses with their gradients, sorting, integer dots,
# scatters that are not additions, prefix scans built by lax.associative_scan, histograms and
# masked statistics. Data whose integer results would depend on rounding (argmin, top_k indices)
# is built so that they do not: clustered points, integer-valued coordinates.
def make_u_power_iteration(quick):
    n, steps = (1024, 30) if not quick else (33, 5)
    rng = _rng(60)
    a = _f32(rng.standard_normal((n, n)) / math.sqrt(n))
    a = _f32(a @ a.T)  # symmetric positive semi-definite: the iteration converges
    v0 = _f32(rng.standard_normal(n))

    def f(a, v0):
        def body(_, v):
            w = a @ v
            return w / jnp.linalg.norm(w)
        v = lax.fori_loop(0, steps, body, v0)
        return v, v @ (a @ v)
    return f, [a, v0], {"tol": 1e-3}


def make_u_newton(quick):
    n = 1 << 20 if not quick else 37
    rng = _rng(61)
    c = _f32(rng.uniform(0.5, 1000.0, n))

    def f(c):  # cube roots by Newton's method until every relative residual is below 1e-6
        def cond(s):
            x, it = s
            return (jnp.max(jnp.abs(x * x * x - c) / c) > 1e-6) & (it < 60)

        def body(s):
            x, it = s
            return x - (x * x * x - c) / (3 * x * x), it + 1
        x, it = lax.while_loop(cond, body, (jnp.maximum(c / 3, 1.0), np.int32(0)))
        return x, it
    return f, [c], {"tol": 1e-5}


def make_u_gather(quick):
    rows, d, n, r2, c2, k2 = ((100000, 64, 262144, 4096, 1000, 64) if not quick else
                              (50, 3, 40, 6, 9, 4))
    rng = _rng(62)
    table = _f32(rng.standard_normal((rows, d)))
    ids = rng.integers(0, rows, n).astype(np.int32)
    x = _f32(rng.standard_normal((r2, c2)))
    idx = rng.integers(0, c2, (r2, k2)).astype(np.int32)

    def f(table, ids, x, idx):
        return table[ids], jnp.take_along_axis(x, idx, axis=1)
    return f, [table, ids, x, idx], {"tol": 0.0}


def make_u_kmeans(quick):
    n, d, k = (20000, 64, 256) if not quick else (300, 5, 7)
    rng = _rng(63)
    centers = _f32(rng.standard_normal((k, d)) * 10)
    x = _f32(centers[rng.integers(0, k, n)] + rng.standard_normal((n, d)))
    c0 = _f32(centers + 0.5 * rng.standard_normal((k, d)))

    def f(x, c):  # one Lloyd step: squared distances, nearest centroid, segment mean
        d2 = (jnp.sum(x * x, 1)[:, None] - 2 * x @ c.T + jnp.sum(c * c, 1)[None, :])
        a = jnp.argmin(d2, axis=1).astype(jnp.int32)
        s = jax.ops.segment_sum(x, a, num_segments=k)
        cnt = jax.ops.segment_sum(jnp.ones_like(a, jnp.float32), a, num_segments=k)
        return s / jnp.maximum(cnt, 1)[:, None], a, jnp.sum(jnp.min(d2, axis=1))
    return f, [x, c0], {"tol": 1e-4}


def make_u_knn(quick):
    q, nb, d, k = (2048, 8192, 64, 10) if not quick else (9, 40, 5, 3)
    rng = _rng(64)  # small integer coordinates: every distance exact in f32, ties by index
    xq = _f32(rng.integers(-4, 5, (q, d)))
    xb = _f32(rng.integers(-4, 5, (nb, d)))

    def f(xq, xb):  # cdist, then the k nearest by lax.top_k of the negated distances
        d2 = (jnp.sum(xq * xq, 1)[:, None] - 2 * xq @ xb.T + jnp.sum(xb * xb, 1)[None, :])
        v, i = lax.top_k(-d2, k)
        return -v, i
    return f, [xq, xb], {"tol": 0.0}


def _pytree_shapes(quick):
    if quick:
        return [(7, 5), (5,), (3, 3, 2, 4), (4,), (11,), (6, 2)]
    s = []
    for cin, cout in ((3, 32), (32, 64), (64, 128)):
        s += [(3, 3, cin, cout), (cout,), (cout,), (cout,)]  # conv kernel, bias, norm scale/bias
    s += [(2048, 512), (512,), (512, 256), (256,), (256, 10), (10,), (1000, 64), (64, 64)]
    return s  # 20 tensors, 1.4M parameters


def make_u_optax_chain(kind, quick):
    import optax
    shapes = _pytree_shapes(quick)
    rng = _rng(65)
    params = [_f32(rng.standard_normal(s) * 0.1) for s in shapes]
    grads = [_f32(rng.standard_normal(s) * 0.05) for s in shapes]
    if kind == "sgd":
        opt = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(1e-2, momentum=0.9))
    else:
        opt = optax.chain(optax.clip_by_global_norm(1.0),
                          optax.adamw(1e-3, b1=0.9, b2=0.999, weight_decay=1e-4))
    state0 = opt.init(params)
    leaves0, treedef = jax.tree_util.tree_flatten(state0)
    leaves0 = [np.asarray(v) for v in leaves0]
    # a state a few steps in: moments nonzero, count 3
    leaves0 = [(np.int32(3) if v.dtype == np.int32 else
                _f32(np.abs(rng.standard_normal(v.shape)) * 1e-3)) for v in leaves0]
    np_, ns = len(params), len(leaves0)

    def step(*args):
        p, st, g = list(args[:np_]), args[np_:np_ + ns], list(args[np_ + ns:])
        upd, new = opt.update(g, jax.tree_util.tree_unflatten(treedef, list(st)), p)
        return optax.apply_updates(p, upd), jax.tree_util.tree_leaves(new)

    def chain(out, args):
        return out[:np_ + ns] + args[np_ + ns:]
    return step, params + leaves0 + grads, {"donate": tuple(range(np_ + ns)), "chain": chain}


def make_u_losses(quick):
    n, d, ncls, nreg = (4096, 512, 1000, 16) if not quick else (9, 7, 11, 3)
    rng = _rng(66)
    x = _f32(rng.standard_normal((n, d)))
    w = _f32(rng.standard_normal((d, ncls)) / math.sqrt(d))
    w2 = _f32(rng.standard_normal((d, nreg)) / math.sqrt(d))
    y = rng.integers(0, ncls, n).astype(np.int32)
    t = _f32(rng.standard_normal((n, nreg)) * 2)

    def loss(w, w2, x, y, t):  # label-smoothed cross-entropy + Huber loss of a regression head
        eps = 0.1
        lp = jax.nn.log_softmax(x @ w)
        tgt = jax.nn.one_hot(y, ncls) * (1 - eps) + eps / ncls
        ce = -jnp.mean(jnp.sum(tgt * lp, axis=-1))
        r = jnp.abs(x @ w2 - t)
        hub = jnp.mean(jnp.where(r < 1.0, 0.5 * r * r, r - 0.5))
        return ce + hub

    def step(w, w2, x, y, t):
        return jax.value_and_grad(loss, argnums=(0, 1))(w, w2, x, y, t)
    return step, [w, w2, x, y, t], {"tol": 1e-3}


def make_u_sort(quick):
    n = 1 << 20 if not quick else 101
    rng = _rng(67)
    x = _f32(rng.standard_normal(n))
    keys = rng.integers(0, 1000, n).astype(np.int32)  # many equal keys: stability matters
    vals = _f32(rng.standard_normal(n))

    def f(x, keys, vals):
        ks, vs = lax.sort((keys, vals), num_keys=1, is_stable=True)
        return jnp.argsort(x).astype(jnp.int32), jnp.sort(x), ks, vs
    return f, [x, keys, vals], {"tol": 0.0}


def make_u_int8_dot(quick):
    m, k, n = (1024, 1024, 1024) if not quick else (9, 33, 7)
    rng = _rng(68)
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    s = _f32(rng.uniform(0.001, 0.01, n))

    def f(a, b, s):  # quantized matmul: int8 x int8 -> int32, then dequantized
        acc = jnp.dot(a, b, preferred_element_type=jnp.int32)
        return acc, acc.astype(jnp.float32) * s
    return f, [a, b, s], {"tol": 0.0}


def make_u_scatter(quick):
    size, n = (1 << 16, 1 << 20) if not quick else (13, 50)
    rng = _rng(69)
    base = _f32(rng.standard_normal(size))
    ids = rng.integers(0, size, n).astype(np.int32)  # about 16 updates per element
    upd = _f32(rng.standard_normal(n) * 2)

    def f(base, ids, upd):  # .at[].max/.min, and .at[].set whose duplicate ids carry one value
        return (base.at[ids].max(upd), base.at[ids].min(upd),
                base.at[ids].set(ids.astype(jnp.float32) * 0.5))
    return f, [base, ids, upd], {"tol": 0.0}


def make_u_cumlogsumexp(quick):
    r, c = (256, 4096) if not quick else (3, 37)
    rng = _rng(70)
    x = _f32(rng.standard_normal((r, c)) * 3)

    def f(x):
        return lax.associative_scan(jnp.logaddexp, x, axis=1)
    return f, [x], {"tol": 1e-5}


def make_u_histogram(quick):
    n, nb, nk = (1 << 22, 128, 1000) if not quick else (200, 8, 11)
    rng = _rng(71)
    x = _f32(rng.standard_normal(n))
    k = rng.integers(0, nk, n).astype(np.int32)

    def f(x, k):  # 128 bins over [-4, 4]: edges exact in f32, whatever the rounding of linspace
        h, _ = jnp.histogram(x, bins=nb, range=(-4.0, 4.0))
        return h.astype(jnp.int32), jnp.bincount(k, length=nk).astype(jnp.int32)
    return f, [x, k], {"tol": 0.0}


def make_u_masked_stats(quick):
    r, c = (4096, 2048) if not quick else (9, 13)
    rng = _rng(72)
    x = _f32(rng.standard_normal((r, c)) + 3)
    m = rng.random((r, c)) < 0.7

    def f(x, m):
        return (jnp.mean(x, axis=1, where=m), jnp.var(x, axis=1, where=m),
                jnp.sum(jnp.where(m, x, 0.0), axis=0))
    return f, [x, m], {"tol": 1e-4}


def make_u_windows(quick):
    n, w, hop = (1 << 20, 4096, 1024) if not quick else (100, 16, 8)
    nwin = (n - w) // hop + 1
    rng = _rng(73)
    sig = _f32(rng.standard_normal(n))
    win = _f32(np.hanning(w))

    def f(sig, win):  # framed energy and windowed frames, one dynamic_slice per loop step
        def body(i, acc):
            e, frames = acc
            fr = lax.dynamic_slice(sig, (i * hop,), (w,)) * win
            return (e.at[i].set(jnp.sum(fr * fr)),
                    lax.dynamic_update_slice(frames, fr[None, :], (i, 0)))
        return lax.fori_loop(0, nwin, body, (jnp.zeros(nwin, jnp.float32),
                                             jnp.zeros((nwin, w), jnp.float32)))
    return f, [sig, win], {"tol": 1e-5}


def utils_case_list(quick):
    """The third group, each name starting with "u ". Sizes are those of a full run."""
    q = quick
    return [("u power iteration fori_loop 30 x 1024x1024", lambda: make_u_power_iteration(q)),
            ("u newton cbrt while_loop (data-dependent stop) 1M", lambda: make_u_newton(q)),
            ("u gather 262144 rows of 100000x64 + take_along_axis",
             lambda: make_u_gather(q)),
            ("u kmeans step 20000x64, 256 centroids", lambda: make_u_kmeans(q)),
            ("u knn cdist 2048x8192x64 + top_k 10", lambda: make_u_knn(q)),
            ("u optax clip+sgd momentum, 20 tensors donated",
             lambda: make_u_optax_chain("sgd", q)),
            ("u optax clip+adamw, 20 tensors donated", lambda: make_u_optax_chain("adamw", q)),
            ("u label-smoothed xent + huber value_and_grad 4096x512x1000",
             lambda: make_u_losses(q)),
            ("u argsort/sort 1M f32 + sort keys/values", lambda: make_u_sort(q)),
            ("u int8 dot -> int32 1024^3 + dequantize", lambda: make_u_int8_dot(q)),
            ("u scatter max/min/set dup ids 1M into 65536", lambda: make_u_scatter(q)),
            ("u cumulative logsumexp associative_scan 256x4096",
             lambda: make_u_cumlogsumexp(q)),
            ("u histogram 4M + bincount", lambda: make_u_histogram(q)),
            ("u masked mean/var where 4096x2048", lambda: make_u_masked_stats(q)),
            ("u sliding windows dynamic_slice fori_loop 1M/4096", lambda: make_u_windows(q))]


# ---- the fourth group: model building blocks (`--group models`) -----------------------------------
# Layers and steps of the models people build with JAX, none of which the first two groups run:
# recurrent cells under lax.scan, a decoding step with a KV cache, mixture-of-experts routing,
# group/instance norm, pooling and resizing, per-example gradients, a mixed-precision step,
# softmax over a middle axis, depthwise and 1-D convolutions, sinusoidal embeddings.

def lstm_cell(wx, wh, bias):
    def cell(carry, x):
        h, c = carry
        i, f, g, o = jnp.split(x @ wx + h @ wh + bias, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h
    return cell


def gru_cell(wx, wh, bias):
    def cell(h, x):
        gx, gh = x @ wx + bias, h @ wh
        xr, xz, xn = jnp.split(gx, 3, axis=-1)
        hr, hz, hn = jnp.split(gh, 3, axis=-1)
        r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        h = (1 - z) * n + z * h
        return h, h
    return cell


def make_m_rnn(kind, grad, quick):
    t, b, nin, nh = (64, 64, 256, 512) if not quick else (5, 3, 4, 6)
    gates = 4 if kind == "lstm" else 3
    rng = _rng(61 if kind == "lstm" else 62)
    xs = _f32(rng.standard_normal((t, b, nin)))
    wx = _f32(rng.standard_normal((nin, gates * nh)) / math.sqrt(nin))
    wh = _f32(rng.standard_normal((nh, gates * nh)) / math.sqrt(nh))
    bias = _f32(0.1 * rng.standard_normal(gates * nh))

    def run(wx, wh, bias, xs):
        h0 = jnp.zeros((b, nh), jnp.float32)
        if kind == "lstm":
            (h, _), hs = lax.scan(lstm_cell(wx, wh, bias), (h0, h0), xs)
        else:
            h, hs = lax.scan(gru_cell(wx, wh, bias), h0, xs)
        return h, hs
    if not grad:
        return run, [wx, wh, bias, xs], {}

    def step(wx, wh, bias, xs):
        return jax.value_and_grad(lambda p: jnp.mean(jnp.square(run(*p, xs)[1])))((wx, wh, bias))
    return step, [wx, wh, bias, xs], {"tol": 1e-3}


def make_m_decode(quick):
    b, c, h, d = (8, 1024, 16, 64) if not quick else (2, 16, 2, 8)
    dm = h * d
    rng = _rng(63)
    x = _f32(rng.standard_normal((b, dm)))
    ws = [_f32(rng.standard_normal((dm, dm)) / math.sqrt(dm)) for _ in range(4)]
    ck = _f32(rng.standard_normal((b, c, h, d)))
    cv = _f32(rng.standard_normal((b, c, h, d)))
    pos = np.int32(c * 3 // 4)

    def step(ck, cv, x, wq, wk, wv, wo, pos):  # one decoding step: append k, v; attend to 0..pos
        q, k, v = ((x @ w).reshape(b, h, d) for w in (wq, wk, wv))
        ck = lax.dynamic_update_slice(ck, k[:, None], (0, pos, 0, 0))
        cv = lax.dynamic_update_slice(cv, v[:, None], (0, pos, 0, 0))
        s = jnp.einsum("bhd,bshd->bhs", q, ck) / np.float32(math.sqrt(d))
        s = jnp.where(jnp.arange(c)[None, None, :] <= pos, s, -jnp.inf)
        o = jnp.einsum("bhs,bshd->bhd", jax.nn.softmax(s, axis=-1), cv)
        return o.reshape(b, dm) @ wo, ck, cv

    def chain(out, args):
        return [out[1], out[2]] + args[2:]
    return step, [ck, cv, x] + ws + [pos], {"donate": (0, 1), "chain": chain}


def make_m_moe(quick):
    t, dm, ff, e = (1024, 512, 1024, 8) if not quick else (16, 8, 12, 4)
    cap = 2 * t // e * 5 // 4  # capacity factor 1.25 for top-2 routing
    rng = _rng(64)
    x = _f32(rng.standard_normal((t, dm)))
    wg = _f32(rng.standard_normal((dm, e)) / math.sqrt(dm))
    w1 = _f32(rng.standard_normal((e, dm, ff)) / math.sqrt(dm))
    w2 = _f32(rng.standard_normal((e, ff, dm)) / math.sqrt(ff))

    def f(x, wg, w1, w2):  # GShard-style top-2 dispatch with a fixed capacity per expert
        probs = jax.nn.softmax(x @ wg, axis=-1)
        gate, idx = lax.top_k(probs, 2)  # (t, 2)
        mask = jax.nn.one_hot(idx, e, dtype=jnp.float32)  # (t, 2, e)
        flat = mask.transpose(1, 0, 2).reshape(2 * t, e)  # first choices before second ones
        slot = (jnp.cumsum(flat, axis=0) - 1) * flat
        slot = slot.reshape(2, t, e).transpose(1, 0, 2)
        keep = mask * (slot < cap)
        slot1 = jax.nn.one_hot(jnp.sum(slot * keep, axis=-1).astype(jnp.int32), cap)  # (t,2,c)
        dispatch = jnp.einsum("tke,tkc->tec", keep, slot1)
        combine = jnp.einsum("tk,tke,tkc->tec", gate, keep, slot1)
        xin = jnp.einsum("tec,td->ecd", dispatch, x)
        hid = jax.nn.gelu(jnp.einsum("ecd,edf->ecf", xin, w1))
        out = jnp.einsum("ecf,efd->ecd", hid, w2)
        return jnp.einsum("tec,ecd->td", combine, out)
    return f, [x, wg, w1, w2], {"tol": 1e-3}


def make_m_norm(kind, quick):
    n, hw, c, g = (16, 32, 128, 32) if kind == "group" else (16, 64, 64, 64)
    if quick:
        n, hw, c, g = 2, 5, 8, (4 if kind == "group" else 8)
    rng = _rng(65)
    x = _f32(rng.standard_normal((n, hw, hw, c)) * 2 + 0.5)
    gamma = _f32(1 + 0.1 * rng.standard_normal(c))
    beta = _f32(0.1 * rng.standard_normal(c))
    ct = _f32(rng.standard_normal((n, hw, hw, c)))

    def norm(x, gamma, beta):  # group norm over (H, W, C/G); instance norm is G = C
        xg = x.reshape(n, hw, hw, g, c // g)
        mu = jnp.mean(xg, axis=(1, 2, 4), keepdims=True)
        var = jnp.var(xg, axis=(1, 2, 4), keepdims=True)
        return ((xg - mu) * lax.rsqrt(var + 1e-5)).reshape(x.shape) * gamma + beta

    def step(x, gamma, beta, ct):
        return jax.value_and_grad(lambda *p: jnp.sum(norm(*p) * ct), argnums=(0, 1, 2))(
            x, gamma, beta)
    return step, [x, gamma, beta, ct], {"tol": 1e-3}


def make_m_maxpool(quick):
    n, hw, c = (16, 112, 64) if not quick else (2, 9, 3)
    x = _f32(_rng(66).standard_normal((n, hw, hw, c)))

    def f(x):  # the ResNet stem's pool: 3x3 stride 2, SAME padding
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    return f, [x], {"tol": 0.0}


def make_m_resize(quick):
    n, hw, c = (8, 64, 64) if not quick else (2, 5, 3)
    x = _f32(_rng(67).standard_normal((n, hw, hw, c)))

    def f(x):
        shape = (n, 2 * hw, 2 * hw, c)
        return jax.image.resize(x, shape, "nearest"), jax.image.resize(x, shape, "bilinear")
    return f, [x], {}


def make_m_per_example(quick):
    ex, sizes = (128, [256, 256, 10]) if not quick else (4, [6, 5, 3])
    rng = _rng(68)
    ps = mlp_params(rng, sizes)
    x = _f32(rng.standard_normal((ex, sizes[0])))
    y = rng.integers(0, sizes[-1], ex).astype(np.int32)

    def loss(p, x, y):  # one example
        logits = mlp_apply(p, x[None], jax.nn.relu)
        return xent_int(logits, y[None])

    def f(x, y, *p):  # DP-SGD's per-example gradients, clipped to norm 1
        g = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(list(p), x, y)
        norms = jnp.sqrt(sum(jnp.sum(jnp.square(t.reshape(ex, -1)), axis=1) for t in g))
        scale = 1.0 / jnp.maximum(norms, 1.0)
        return [jnp.mean(t * scale.reshape((ex,) + (1,) * (t.ndim - 1)), axis=0) for t in g]
    return f, [x, y] + ps, {"tol": 1e-3}


def make_m_mixed(quick):
    batch, sizes = (256, [512, 1024, 1024, 10]) if not quick else (8, [6, 12, 12, 3])
    rng = _rng(69)
    ps = mlp_params(rng, sizes)
    x = _f32(rng.standard_normal((batch, sizes[0])))
    y = rng.integers(0, sizes[-1], batch).astype(np.int32)
    scale = np.float32(1024.0)

    def step(x, y, scale, *p):  # bf16 compute, f32 master weights, static loss scaling
        def loss(p):
            pb = [t.astype(jnp.bfloat16) for t in p]
            logits = mlp_apply(pb, x.astype(jnp.bfloat16), jax.nn.gelu).astype(jnp.float32)
            return xent_int(logits, y) * scale
        lv, g = jax.value_and_grad(loss)(list(p))
        g = [t / scale for t in g]
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(t)) for t in g]))
        new = [jnp.where(finite, w - 0.01 * t, w) for w, t in zip(p, g)]
        return [lv / scale, finite] + new
    return step, [x, y, scale] + ps, {"tol": 1e-2}


def make_m_softmax_axis(quick):
    b, v, s = (64, 1000, 50) if not quick else (2, 7, 5)
    rng = _rng(70)
    x = _f32(rng.standard_normal((b, v, s)) * 3)
    c1 = _f32(rng.standard_normal((b, v, s)))
    c2 = _f32(rng.standard_normal((b, v, s)))

    def step(x, c1, c2):  # class axis in the middle, as in (batch, classes, positions) logits
        def loss(x):
            return (jnp.sum(jax.nn.softmax(x, axis=1) * c1) +
                    jnp.sum(jax.nn.log_softmax(x, axis=1) * c2))
        return jax.value_and_grad(loss)(x)
    return step, [x, c1, c2], {"tol": 1e-3}


def make_m_depthwise(quick):
    n, hw, c = (16, 56, 128) if not quick else (2, 6, 4)
    rng = _rng(71)
    x = _f32(rng.standard_normal((n, hw, hw, c)))
    w = _f32(rng.standard_normal((3, 3, 1, c)) / 3)
    b = _f32(0.1 * rng.standard_normal(c))

    def f(x, w, b):  # MobileNet's depthwise 3x3 + bias + ReLU6
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=c,
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.clip(y + b, 0.0, 6.0)
    return f, [x, w, b], {}


def make_m_conv1d(quick):
    b, s, c, k = (16, 1000, 128, 5) if not quick else (2, 9, 4, 3)
    rng = _rng(72)
    x = _f32(rng.standard_normal((b, s, c)))
    w = _f32(rng.standard_normal((k, c, c)) / math.sqrt(k * c))
    ct = _f32(rng.standard_normal((b, s, c)))

    def step(x, w, ct):  # a 1-D convolution over a sequence (NWC/WIO), SAME, with GELU
        def loss(x, w):
            y = lax.conv_general_dilated(x, w, (1,), "SAME",
                                         dimension_numbers=("NWC", "WIO", "NWC"))
            return jnp.sum(jax.nn.gelu(y) * ct)
        return jax.value_and_grad(loss, argnums=(0, 1))(x, w)
    return step, [x, w, ct], {"tol": 1e-3}


def make_m_sinusoid(quick):
    n, d = (8192, 512) if not quick else (9, 8)
    rng = _rng(73)
    pos = _f32(np.arange(n) + rng.uniform(0, 1, n))
    x = _f32(rng.standard_normal((n, d)))
    # the inverse frequencies as a buffer (as models keep them): computed in the program, an
    # exp one ulp apart (XLA's and optitpu's are both within an ulp, not always the same one)
    # moves angles near 8192 by up to 5e-4, which is the program's conditioning, not an error
    freq = _f32(np.exp(-math.log(10000.0) * np.arange(0, d, 2) / d))

    def f(pos, x, freq):  # transformer position embedding, then angle/phase math on it
        ang = pos[:, None] * freq[None, :]
        emb = jnp.concatenate([jnp.sin(ang), jnp.cos(ang)], axis=-1)
        y = x + emb
        phase = jnp.arctan2(y[:, d // 2:], y[:, :d // 2])
        return y, phase, jnp.hypot(y[:, :d // 2], y[:, d // 2:]) * jnp.cos(phase)
    return f, [pos, x, freq], {}


def models_case_list(quick):
    """The fourth group, each name starting with "m ". Sizes are those of a full run."""
    q = quick
    return [("m lstm scan forward T64 b64 256->512", lambda: make_m_rnn("lstm", False, q)),
            ("m lstm scan value_and_grad T64 b64 256->512", lambda: make_m_rnn("lstm", True, q)),
            ("m gru scan forward T64 b64 256->512", lambda: make_m_rnn("gru", False, q)),
            ("m gru scan value_and_grad T64 b64 256->512", lambda: make_m_rnn("gru", True, q)),
            ("m decode step kv-cache b8 c1024 h16 d64 (donated)", lambda: make_m_decode(q)),
            ("m moe top-2 of 8 experts t1024 d512 ff1024", lambda: make_m_moe(q)),
            ("m group_norm g32 value_and_grad NHWC 16x32x32x128",
             lambda: make_m_norm("group", q)),
            ("m instance_norm value_and_grad NHWC 16x64x64x64",
             lambda: make_m_norm("instance", q)),
            ("m maxpool3x3s2 SAME forward NHWC 16x112x112x64", lambda: make_m_maxpool(q)),
            ("m resize x2 nearest+bilinear NHWC 8x64x64x64", lambda: make_m_resize(q)),
            ("m per-example grads vmap(grad) mlp 256-256-10 x128",
             lambda: make_m_per_example(q)),
            ("m mixed precision bf16 step 512-1024-1024-10 b256", lambda: make_m_mixed(q)),
            ("m softmax+log_softmax axis1 value_and_grad 64x1000x50",
             lambda: make_m_softmax_axis(q)),
            ("m depthwise conv3x3 NHWC 16x56x56x128 + relu6", lambda: make_m_depthwise(q)),
            ("m conv1d k5 NWC 16x1000x128 value_and_grad", lambda: make_m_conv1d(q)),
            ("m sinusoid embedding + atan2/hypot 8192x512", lambda: make_m_sinusoid(q))]


# ---- the fifth group: vision and language layers (`--group vision_nlp`) --------------------------
# Layers of vision and language models that the other groups do not run: patch embeddings (a
# convolution whose stride is its window), strided, grouped, dilated, transposed and 3-D
# convolutions, inference batch norm, reflect padding, a classification head's gradient, padded
# multi-head attention, RoPE on interleaved pairs, token + position embeddings with their
# gradients, running means by cumsum, one-hot matmuls on (batch, seq) ids, top-k sampling with
# Gumbel noise, dropout in a training step and a bf16 autocast feed-forward block.

def make_v_vit_patch(quick):
    n, hw, p, d = (8, 224, 16, 384) if not quick else (2, 8, 4, 8)
    rng = _rng(81)
    x = _f32(rng.standard_normal((n, hw, hw, 3)))
    w = _f32(rng.standard_normal((p, p, 3, d)) / math.sqrt(p * p * 3))
    b = _f32(0.1 * rng.standard_normal(d))
    pos = _f32(0.02 * rng.standard_normal(((hw // p) ** 2, d)))
    g, beta = _f32(1 + 0.1 * rng.standard_normal(d)), _f32(0.1 * rng.standard_normal(d))

    def f(x, w, b, pos, g, beta):  # ViT stem: patchify conv, flatten, + position, layer norm
        y = lax.conv_general_dilated(x, w, (p, p), "VALID",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = y.reshape(n, -1, d) + b + pos
        return layer_norm(y, g, beta)
    return f, [x, w, b, pos, g, beta], {"tol": 1e-4}


def make_v_conv_bn(quick):
    n, hw, ci, co = (16, 56, 64, 128) if not quick else (2, 7, 3, 5)
    rng = _rng(82)
    x = _f32(rng.standard_normal((n, hw, hw, ci)))
    w = _f32(rng.standard_normal((3, 3, ci, co)) / math.sqrt(9 * ci))
    mean, var = _f32(0.1 * rng.standard_normal(co)), _f32(1 + 0.2 * rng.uniform(size=co))
    g, beta = _f32(1 + 0.1 * rng.standard_normal(co)), _f32(0.1 * rng.standard_normal(co))

    def f(x, w, mean, var, g, beta):  # ResNet downsampling conv, BN with running statistics
        y = lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1)),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu((y - mean) * lax.rsqrt(var + 1e-5) * g + beta)
    return f, [x, w, mean, var, g, beta], {}


def make_v_conv_variant(kind, quick):
    """Grouped (feature_group_count 4, as in ResNeXt), dilated (rhs_dilation 2, as in DeepLab)
    3x3 convolutions, NHWC, SAME, + bias + ReLU."""
    n, hw, c = (8, 28, 128) if kind == "grouped" else (8, 32, 64)
    if quick:
        n, hw, c = 2, 9, 8
    groups = 4 if kind == "grouped" else 1
    rng = _rng(83)
    x = _f32(rng.standard_normal((n, hw, hw, c)))
    w = _f32(rng.standard_normal((3, 3, c // groups, c)) / math.sqrt(9 * c // groups))
    b = _f32(0.1 * rng.standard_normal(c))
    dil = (2, 2) if kind == "dilated" else (1, 1)

    def f(x, w, b):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", rhs_dilation=dil,
                                     feature_group_count=groups,
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y + b)
    return f, [x, w, b], {}


def make_v_conv_transpose(quick):
    n, hw, ci, co = (8, 32, 64, 32) if not quick else (2, 5, 4, 3)
    rng = _rng(84)
    x = _f32(rng.standard_normal((n, hw, hw, ci)))
    w = _f32(rng.standard_normal((4, 4, ci, co)) / math.sqrt(4 * ci))
    b = _f32(0.1 * rng.standard_normal(co))

    def f(x, w, b):  # a U-Net/GAN decoder's x2 upsampling: 4x4 kernel, stride 2
        y = lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y + b)
    return f, [x, w, b], {}


def make_v_conv3d(quick):
    n, s, ci, co = (4, 16, 16, 32) if not quick else (1, 5, 2, 3)
    rng = _rng(85)
    x = _f32(rng.standard_normal((n, s, s, s, ci)))
    w = _f32(rng.standard_normal((3, 3, 3, ci, co)) / math.sqrt(27 * ci))
    b = _f32(0.1 * rng.standard_normal(co))

    def f(x, w, b):  # a video/volume model's 3x3x3 convolution, NDHWC
        y = lax.conv_general_dilated(x, w, (1, 1, 1), "SAME",
                                     dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
        return jax.nn.relu(y + b)
    return f, [x, w, b], {}


def make_v_gap_head(quick):
    n, hw, c, k = (64, 7, 512, 1000) if not quick else (3, 3, 8, 5)
    rng = _rng(86)
    feat = _f32(jax.nn.relu(rng.standard_normal((n, hw, hw, c))))
    w = _f32(rng.standard_normal((c, k)) / math.sqrt(c))
    b = _f32(np.zeros(k))
    y = rng.integers(0, k, n).astype(np.int32)

    def step(feat, y, w, b):  # global average pool + dense + cross-entropy, w.r.t. all three
        def loss(feat, w, b):
            return xent_int(jnp.mean(feat, axis=(1, 2)) @ w + b, y)
        return jax.value_and_grad(loss, argnums=(0, 1, 2))(feat, w, b)
    return step, [feat, y, w, b], {"tol": 1e-3}


def make_v_mha_pad(quick):
    b, s, dm, h = (8, 128, 256, 8) if not quick else (2, 7, 8, 2)
    hd = dm // h
    rng = _rng(87)
    x = _f32(rng.standard_normal((b, s, dm)))
    ws = [_f32(rng.standard_normal((dm, dm)) / math.sqrt(dm)) for _ in range(4)]
    lengths = rng.integers(s // 2, s + 1, b).astype(np.int32)

    def mha(x, lengths, wq, wk, wv, wo):  # BERT-style: keys past each sequence's length masked
        q, k, v = ((x @ w).reshape(b, s, h, hd) for w in (wq, wk, wv))
        sc = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.float32(math.sqrt(hd))
        valid = jnp.arange(s)[None, :] < lengths[:, None]  # (b, k)
        sc = jnp.where(valid[:, None, None, :], sc, -1e9)
        o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(sc, axis=-1), v).reshape(b, s, dm)
        return o @ wo

    def step(x, lengths, *ws):
        qmask = (jnp.arange(s)[None, :] < lengths[:, None])[..., None]
        return jax.value_and_grad(
            lambda ws: jnp.sum(jnp.where(qmask, jnp.square(mha(x, lengths, *ws)), 0.0)) /
            jnp.sum(lengths))(list(ws))
    return step, [x, lengths] + ws, {"tol": 1e-3}


def make_v_rope(quick):
    b, s, h, d = (4, 512, 16, 64) if not quick else (1, 5, 2, 4)
    rng = _rng(88)
    q = _f32(rng.standard_normal((b, s, h, d)))
    k = _f32(rng.standard_normal((b, s, h, d)))
    pos = (np.arange(s)[None, :] + rng.integers(0, 100, (b, 1))).astype(np.int32)

    def rope_pairs(x, pos):  # LLaMA-style: rotate (x[2i], x[2i+1]) by pos * theta_i
        inv = 1.0 / (10000.0 ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
        ang = pos[:, :, None, None].astype(jnp.float32) * inv  # (b, s, 1, d/2)
        cos, sin = jnp.cos(ang), jnp.sin(ang)
        xe, xo = x[..., 0::2], x[..., 1::2]
        return jnp.stack([xe * cos - xo * sin, xe * sin + xo * cos], axis=-1).reshape(x.shape)

    def f(q, k, pos):
        return rope_pairs(q, pos), rope_pairs(k, pos)
    return f, [q, k, pos], {"tol": 1e-4}


def make_v_tok_pos_embed(quick):
    b, s, vocab, d = (16, 256, 30522, 256) if not quick else (2, 5, 11, 4)
    rng = _rng(89)
    ids = rng.integers(0, vocab, (b, s)).astype(np.int32)
    ids[:, : s // 8] = 101  # every sequence starts with the same tokens: duplicate ids
    tok = _f32(0.02 * rng.standard_normal((vocab, d)))
    pos = _f32(0.02 * rng.standard_normal((512 if not quick else 8, d)))
    g, beta = _f32(np.ones(d)), _f32(np.zeros(d))
    ct = _f32(rng.standard_normal((b, s, d)))

    def step(ids, tok, pos, g, beta, ct):  # BERT embeddings: token + position, layer norm
        def loss(tok, pos, g, beta):
            e = tok[ids] + pos[jnp.arange(s)][None]
            return jnp.sum(layer_norm(e, g, beta) * ct)
        return jax.value_and_grad(loss, argnums=(0, 1, 2, 3))(tok, pos, g, beta)
    return step, [ids, tok, pos, g, beta, ct], {"tol": 1e-3}


def make_v_cumulative(quick):
    b, s, d = (16, 512, 256) if not quick else (2, 7, 3)
    rng = _rng(90)
    x = _f32(rng.standard_normal((b, s, d)))
    p = _f32(1 + 0.01 * rng.standard_normal((s, d)))

    def f(x, p):  # a causal running mean over the sequence axis; a discount product over axis 0
        run_mean = jnp.cumsum(x, axis=1) / jnp.arange(1, s + 1, dtype=jnp.float32)[:, None]
        return run_mean, jnp.cumprod(p, axis=0), jnp.cumsum(x[0], axis=0)
    return f, [x, p], {"tol": 1e-4}


def make_v_onehot_seq(quick):
    b, s, vocab, d = (8, 256, 2048, 128) if not quick else (2, 3, 7, 4)
    rng = _rng(91)
    ids = rng.integers(0, vocab, (b, s)).astype(np.int32)
    w = _f32(rng.standard_normal((vocab, d)) / math.sqrt(vocab))
    ct = _f32(rng.standard_normal((b, s, d)))

    def step(ids, w, ct):  # the TPU-style embedding: one_hot(ids) @ table, and its gradient
        return jax.value_and_grad(
            lambda w: jnp.sum((jax.nn.one_hot(ids, vocab, dtype=jnp.float32) @ w) * ct))(w)
    return step, [ids, w, ct], {"tol": 1e-3}


def make_v_topk_sample(quick):
    b, vocab, k = (64, 32000, 50) if not quick else (3, 37, 5)
    rng = _rng(92)
    logits = _f32(rng.standard_normal((b, vocab)) * 3)
    key = np.array([0, 42], np.uint32)
    temp = np.float32(0.7)

    def f(logits, key, temp):  # top-k sampling: scale, keep the k best, Gumbel-max draw
        vals, idx = lax.top_k(logits / temp, k)
        choice = jax.random.categorical(jax.random.wrap_key_data(key), vals, axis=-1)
        tok = jnp.take_along_axis(idx, choice[:, None], axis=1)[:, 0]
        return tok.astype(jnp.int32), jax.nn.log_softmax(vals, axis=-1)
    return f, [logits, key, temp], {"tol": 1e-4}


def make_v_reflect_conv(quick):
    n, hw, c = (8, 64, 32) if not quick else (2, 6, 3)
    rng = _rng(93)
    x = _f32(rng.standard_normal((n, hw, hw, c)))
    w = _f32(rng.standard_normal((3, 3, c, c)) / math.sqrt(9 * c))

    def f(x, w):  # style-transfer/super-resolution nets: reflect padding instead of zeros
        xp = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect")
        y = lax.conv_general_dilated(xp, w, (1, 1), "VALID",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y)
    return f, [x, w], {}


def make_v_dropout_step(quick):
    batch, sizes = (256, [512, 1024, 10]) if not quick else (5, [6, 7, 3])
    rng = _rng(94)
    ps = mlp_params(rng, sizes)
    x = _f32(rng.standard_normal((batch, sizes[0])))
    y = rng.integers(0, sizes[-1], batch).astype(np.int32)
    key = np.array([0, 7], np.uint32)

    def step(x, y, key, w1, b1, w2, b2):  # SGD step with dropout 0.1 on the hidden layer
        def loss(p):
            w1, b1, w2, b2 = p
            h = jax.nn.relu(x @ w1 + b1)
            keep = jax.random.bernoulli(jax.random.wrap_key_data(key), 0.9, h.shape)
            h = jnp.where(keep, h / 0.9, 0.0)
            return xent_int(h @ w2 + b2, y)
        lv, g = jax.value_and_grad(loss)((w1, b1, w2, b2))
        return [lv] + [p - 0.1 * t for p, t in zip((w1, b1, w2, b2), g)]
    return step, [x, y, key] + ps, {"tol": 1e-3}


def make_v_bf16_ffn(quick):
    b, s, d, ff = (8, 128, 512, 2048) if not quick else (2, 3, 8, 16)
    rng = _rng(95)
    x = _f32(rng.standard_normal((b, s, d)))
    g, beta = _f32(np.ones(d)), _f32(np.zeros(d))
    w1 = _f32(rng.standard_normal((d, ff)) / math.sqrt(d))
    w2 = _f32(rng.standard_normal((ff, d)) / math.sqrt(ff))

    def step(x, g, beta, w1, w2):  # autocast: layer norm in f32, matmuls and GELU in bf16
        def loss(p):
            g, beta, w1, w2 = p
            h = layer_norm(x, g, beta).astype(jnp.bfloat16)
            h = jax.nn.gelu(h @ w1.astype(jnp.bfloat16)) @ w2.astype(jnp.bfloat16)
            return jnp.mean(jnp.square((x + h.astype(jnp.float32))))
        return jax.value_and_grad(loss)((g, beta, w1, w2))
    return step, [x, g, beta, w1, w2], {"tol": 2e-2}


def vision_nlp_case_list(quick):
    """The fifth group, each name starting with "v ". Sizes are those of a full run."""
    q = quick
    return [("v vit patch16 embed + pos + layer norm 8x224x224x3 -> 384",
             lambda: make_v_vit_patch(q)),
            ("v conv3x3 s2 + bn(inference) + relu NHWC 16x56x56x64->128",
             lambda: make_v_conv_bn(q)),
            ("v grouped conv3x3 g4 NHWC 8x28x28x128", lambda: make_v_conv_variant("grouped", q)),
            ("v dilated conv3x3 d2 NHWC 8x32x32x64", lambda: make_v_conv_variant("dilated", q)),
            ("v conv_transpose 4x4 s2 NHWC 8x32x32x64->32", lambda: make_v_conv_transpose(q)),
            ("v conv3d 3x3x3 NDHWC 4x16x16x16x16->32", lambda: make_v_conv3d(q)),
            ("v gap + dense head xent value_and_grad 64x7x7x512->1000",
             lambda: make_v_gap_head(q)),
            ("v mha padding mask value_and_grad b8 s128 d256 h8", lambda: make_v_mha_pad(q)),
            ("v rope interleaved pairs q,k 4x512x16x64", lambda: make_v_rope(q)),
            ("v token+position embed + ln value_and_grad 16x256 V30522 d256",
             lambda: make_v_tok_pos_embed(q)),
            ("v cumsum running mean axis1 + cumprod axis0 16x512x256",
             lambda: make_v_cumulative(q)),
            ("v one_hot(b,s) @ W value_and_grad 8x256 V2048 d128", lambda: make_v_onehot_seq(q)),
            ("v top-k 50 sampling gumbel temperature 64x32000", lambda: make_v_topk_sample(q)),
            ("v reflect pad + conv3x3 NHWC 8x64x64x32", lambda: make_v_reflect_conv(q)),
            ("v dropout threefry mlp sgd step 512-1024-10 b256", lambda: make_v_dropout_step(q)),
            ("v bf16 autocast ffn value_and_grad 8x128x512-2048", lambda: make_v_bf16_ffn(q))]


# ---- the sixth group: complete training steps (`--group train`) ---------------------------------
# Whole steps as users write them: jax.jit of loss -> grad -> optax update -> new params, with the
# parameters and the optimizer state donated and fed back (a training loop). Models, losses and
# optimizers that the other groups do not combine: masked weight decay, momentum SGD on a CNN,
# clipping + Adam on an encoder layer, BCE autoencoders, L2 logistic regression, LAMB, a GAN's two
# networks, label smoothing, InfoNCE, skip-gram negative sampling, embedding bags, LoRA, gradient
# accumulation under lax.scan, bf16 working copies of f32 master weights, and parameter EMA.

def _warm_steps(step, args, nlead, nstate, warm):
    """args after `warm` jitted steps: the state (the first nstate args, fed by outputs nlead..)
    a few steps into training, so that optimizer moments are nonzero as in a real loop."""
    f = jax.jit(step)
    for _ in range(warm):
        out = jax.tree_util.tree_leaves(f(*args))
        args = [np.asarray(v) for v in out[nlead:nlead + nstate]] + list(args[nstate:])
    return args


def _train_opts(nlead, nstate, tol=1e-3):
    def chain(out, args):
        return out[nlead:nlead + nstate] + args[nstate:]
    return {"donate": tuple(range(nstate)), "chain": chain, "tol": tol}


def _train_case(loss, params, data, opt, vg=None, warm=2, tol=1e-3):
    """A training step: (loss, grads) = vg(params, *data) (default jax.value_and_grad(loss)),
    opt.update, optax.apply_updates; returns (loss, new params, new optimizer state leaves)."""
    import optax
    vg = vg or jax.value_and_grad(loss)
    leaves, treedef = jax.tree_util.tree_flatten(opt.init(params))
    npar, nst = len(params), len(leaves)

    def step(*args):
        p = list(args[:npar])
        st = jax.tree_util.tree_unflatten(treedef, list(args[npar:npar + nst]))
        lv, g = vg(p, *args[npar + nst:])
        upd, st = opt.update(g, st, p)
        return lv, optax.apply_updates(p, upd), jax.tree_util.tree_leaves(st)
    args = list(params) + [np.asarray(v) for v in leaves] + list(data)
    return step, _warm_steps(step, args, 1, npar + nst, warm), _train_opts(1, npar + nst, tol)


def _dense(rng, a, b):
    return [_f32(rng.standard_normal((a, b)) / math.sqrt(a)), _f32(0.01 * rng.standard_normal(b))]


def make_t_mlp_adamw(quick):
    import optax
    batch, sizes = (512, [784, 1024, 512, 10]) if not quick else (8, [6, 12, 9, 3])
    rng = _rng(81)
    ps = mlp_params(rng, sizes)
    x = _f32(rng.standard_normal((batch, sizes[0])))
    y = rng.integers(0, sizes[-1], batch).astype(np.int32)
    # weight decay on the matrices only (the usual mask: no decay for biases and norms)
    opt = optax.adamw(1e-3, weight_decay=1e-2, mask=lambda p: [t.ndim > 1 for t in p])
    # GELU, not ReLU: a ReLU input within rounding of 0 flips its unit's whole gradient column,
    # which Adam scales to a full step either way (an ill-conditioned comparison, not an error)
    return _train_case(lambda p, x, y: xent_int(mlp_apply(p, x, jax.nn.gelu), y), ps, [x, y], opt)


def make_t_cnn_sgd(quick):
    import optax
    n, hw, c1, c2, dh = (64, 28, 32, 64, 128) if not quick else (2, 8, 3, 4, 5)
    rng = _rng(82)
    x = _f32(rng.standard_normal((n, hw, hw, 1)))
    y = rng.integers(0, 10, n).astype(np.int32)
    flat = (hw // 4) * (hw // 4) * c2
    p = ([_f32(rng.standard_normal((3, 3, 1, c1)) / 3), _f32(np.zeros(c1)),
          _f32(rng.standard_normal((3, 3, c1, c2)) / math.sqrt(9 * c1)), _f32(np.zeros(c2))] +
         _dense(rng, flat, dh) + _dense(rng, dh, 10))

    def loss(p, x, y):  # the classic MNIST convnet: (conv-relu-maxpool) x 2, dense-relu-dense
        w1, b1, w2, b2, w3, b3, w4, b4 = p
        h = x
        for w, b in ((w1, b1), (w2, b2)):
            h = jax.nn.relu(conv(h, w, "NHWC") + b)
            h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = jax.nn.relu(h.reshape(n, -1) @ w3 + b3)
        return xent_int(h @ w4 + b4, y)
    return _train_case(loss, p, [x, y], optax.sgd(0.05, momentum=0.9))


def make_t_encoder(quick):
    import optax
    b, s, d, heads, ff, ncls = (8, 128, 256, 4, 1024, 10) if not quick else (2, 6, 8, 2, 12, 3)
    hd = d // heads
    rng = _rng(83)
    x = _f32(rng.standard_normal((b, s, d)))
    y = rng.integers(0, ncls, b).astype(np.int32)
    # no q/k/v bias: a key bias has a zero gradient in exact arithmetic (softmax ignores a
    # constant per query), so Adam would turn its rounding noise into full-size steps
    p = ([_f32(np.ones(d)), _f32(np.zeros(d)), _dense(rng, d, 3 * d)[0]] + _dense(rng, d, d) +
         [_f32(np.ones(d)), _f32(np.zeros(d))] + _dense(rng, d, ff) + _dense(rng, ff, d) +
         _dense(rng, d, ncls))

    def loss(p, x, y):  # pre-LN encoder layer (no mask), mean pooling, a classifier head
        g1, be1, wqkv, wo, bo, g2, be2, w1, b1, w2, b2, wh, bh = p
        h = layer_norm(x, g1, be1)
        qkv = (h @ wqkv).reshape(b, s, 3, heads, hd)
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        a = attention(q, k, v, False).transpose(0, 2, 1, 3).reshape(b, s, d)
        x = x + a @ wo + bo
        h = layer_norm(x, g2, be2)
        x = x + jax.nn.gelu(h @ w1 + b1) @ w2 + b2
        return xent_int(jnp.mean(x, axis=1) @ wh + bh, y)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
    return _train_case(loss, p, [x, y], opt)


def make_t_autoencoder(quick):
    import optax
    batch, sizes = (256, [784, 512, 64, 512, 784]) if not quick else (4, [6, 5, 3, 5, 6])
    rng = _rng(84)
    ps = mlp_params(rng, sizes)
    x = _f32(rng.uniform(0, 1, (batch, sizes[0])))

    def loss(p, x):  # reconstruction logits against pixel intensities in [0, 1]
        return jnp.mean(optax.sigmoid_binary_cross_entropy(mlp_apply(p, x, jax.nn.relu), x))
    return _train_case(loss, ps, [x], optax.adam(1e-3))


def make_t_logreg(quick):
    import optax
    n, d = (100000, 256) if not quick else (50, 7)
    rng = _rng(85)
    x = _f32(rng.standard_normal((n, d)))
    y = _f32(rng.integers(0, 2, n))
    p = [_f32(0.01 * rng.standard_normal(d)), np.float32(0.0)]

    def loss(p, x, y):  # L2-regularized logistic regression, full batch
        w, b = p
        return (jnp.mean(optax.sigmoid_binary_cross_entropy(x @ w + b, y)) +
                1e-4 * jnp.sum(jnp.square(w)))
    return _train_case(loss, p, [x, y], optax.sgd(0.1))


def make_t_linreg_lamb(quick):
    import optax
    n, d, m = (32768, 256, 32) if not quick else (40, 6, 3)
    rng = _rng(86)
    x = _f32(rng.standard_normal((n, d)))
    wt = _f32(rng.standard_normal((d, m)) / math.sqrt(d))
    yt = _f32(x @ wt + 0.1 * rng.standard_normal((n, m)))
    p = [_f32(np.zeros((d, m))), _f32(np.zeros(m))]

    def loss(p, x, y):
        return jnp.mean(jnp.square(x @ p[0] + p[1] - y))
    return _train_case(loss, p, [x, yt], optax.lamb(1e-2, weight_decay=1e-4))


def make_t_gan(quick):
    import optax
    batch, z, hid, img = (256, 64, 512, 784) if not quick else (4, 3, 5, 6)
    rng = _rng(87)
    gp = _dense(rng, z, hid) + _dense(rng, hid, img)
    dp = _dense(rng, img, hid) + _dense(rng, hid, 1)
    real = _f32(rng.uniform(-1, 1, (batch, img)))
    noise = _f32(rng.standard_normal((batch, z)))
    opt = optax.adam(2e-4, b1=0.5)
    gl, gdef = jax.tree_util.tree_flatten(opt.init(gp))
    dl, ddef = jax.tree_util.tree_flatten(opt.init(dp))
    ng, nd, ngs, nds = len(gp), len(dp), len(gl), len(dl)

    def gen(g, zz):
        return jnp.tanh(jax.nn.relu(zz @ g[0] + g[1]) @ g[2] + g[3])

    def disc(dd, xx):
        return (jax.nn.leaky_relu(xx @ dd[0] + dd[1], 0.2) @ dd[2] + dd[3])[:, 0]

    bce = optax.sigmoid_binary_cross_entropy

    def step(*a):  # the discriminator on real vs fake, then the non-saturating generator loss
        g, dd = list(a[:ng]), list(a[ng:ng + nd])
        gs = jax.tree_util.tree_unflatten(gdef, list(a[ng + nd:ng + nd + ngs]))
        ds = jax.tree_util.tree_unflatten(ddef, list(a[ng + nd + ngs:ng + nd + ngs + nds]))
        xr, zz = a[ng + nd + ngs + nds:]
        fake = lax.stop_gradient(gen(g, zz))

        def dloss(dd):
            return (jnp.mean(bce(disc(dd, xr), jnp.ones(batch))) +
                    jnp.mean(bce(disc(dd, fake), jnp.zeros(batch))))
        lv_d, gd = jax.value_and_grad(dloss)(dd)
        upd, ds = opt.update(gd, ds, dd)
        dd = optax.apply_updates(dd, upd)
        lv_g, gg = jax.value_and_grad(lambda g: jnp.mean(bce(disc(dd, gen(g, zz)),
                                                             jnp.ones(batch))))(g)
        upd, gs = opt.update(gg, gs, g)
        g = optax.apply_updates(g, upd)
        return (lv_d, lv_g, g, dd, jax.tree_util.tree_leaves(gs), jax.tree_util.tree_leaves(ds))
    nstate = ng + nd + ngs + nds
    args = gp + dp + [np.asarray(v) for v in gl + dl] + [real, noise]
    return step, _warm_steps(step, args, 2, nstate, 2), _train_opts(2, nstate)


def make_t_label_smooth(quick):
    import optax
    batch, sizes = (512, [512, 1024, 1000]) if not quick else (8, [6, 12, 11])
    rng = _rng(88)
    ps = mlp_params(rng, sizes)
    x = _f32(rng.standard_normal((batch, sizes[0])))
    y = rng.integers(0, sizes[-1], batch).astype(np.int32)

    def loss(p, x, y):
        t = optax.smooth_labels(jax.nn.one_hot(y, sizes[-1]), 0.1)
        return jnp.mean(optax.softmax_cross_entropy(mlp_apply(p, x, jax.nn.relu), t))
    return _train_case(loss, ps, [x, y], optax.sgd(0.05, momentum=0.9, nesterov=True))


def make_t_infonce(quick):
    import optax
    batch, sizes = (512, [512, 1024, 128]) if not quick else (6, [5, 7, 4])
    rng = _rng(89)
    ps = mlp_params(rng, sizes)
    x1 = _f32(rng.standard_normal((batch, sizes[0])))
    x2 = _f32(x1 + 0.3 * rng.standard_normal((batch, sizes[0])))

    def loss(p, x1, x2):  # SimCLR/CLIP-style symmetric InfoNCE over cosine similarities
        z1, z2 = (mlp_apply(p, v, jax.nn.relu) for v in (x1, x2))
        z1 = z1 / jnp.linalg.norm(z1, axis=1, keepdims=True)
        z2 = z2 / jnp.linalg.norm(z2, axis=1, keepdims=True)
        sim = z1 @ z2.T / 0.1
        diag = jnp.diagonal(sim)
        return jnp.mean(jax.nn.logsumexp(sim, axis=1) + jax.nn.logsumexp(sim, axis=0) -
                        2 * diag) / 2
    return _train_case(loss, ps, [x1, x2], optax.adam(1e-3))


def make_t_word2vec(quick):
    import optax
    vocab, d, batch, neg = (30000, 128, 4096, 5) if not quick else (20, 4, 9, 3)
    rng = _rng(90)
    p = [_f32(rng.uniform(-0.5, 0.5, (vocab, d)) / d), _f32(rng.uniform(-0.5, 0.5, (vocab, d)))]
    # Zipf-like ids: frequent words repeat within a batch (duplicate rows in the scatter-add)
    zipf = lambda shape: (np.minimum(rng.zipf(1.3, shape), vocab) - 1).astype(np.int32)
    center, ctx, negs = zipf(batch), zipf(batch), zipf((batch, neg))

    def loss(p, c, o, ng):  # skip-gram with negative sampling
        ein, eout = p
        v = ein[c]
        pos = jnp.sum(v * eout[o], axis=-1)
        sneg = jnp.einsum("bd,bkd->bk", v, eout[ng])
        return -jnp.mean(jax.nn.log_sigmoid(pos) + jnp.sum(jax.nn.log_sigmoid(-sneg), axis=-1))
    return _train_case(loss, p, [center, ctx, negs], optax.sgd(0.5))


def make_t_embedding_bag(quick):
    import optax
    vocab, d, nids, bags, hid = (50000, 64, 16384, 1024, 256) if not quick else (30, 4, 20, 5, 6)
    rng = _rng(91)
    table = _f32(rng.standard_normal((vocab, d)) * 0.1)
    ps = [table] + _dense(rng, d, hid) + _dense(rng, hid, 2)
    ids = rng.integers(0, vocab, nids).astype(np.int32)
    seg = np.sort(rng.integers(0, bags, nids)).astype(np.int32)
    y = rng.integers(0, 2, bags).astype(np.int32)

    def loss(p, ids, seg, y):  # EmbeddingBag(mode="mean") + MLP classifier
        t, w1, b1, w2, b2 = p
        s = jax.ops.segment_sum(t[ids], seg, num_segments=bags, indices_are_sorted=True)
        cnt = jax.ops.segment_sum(jnp.ones(nids), seg, num_segments=bags, indices_are_sorted=True)
        h = s / jnp.maximum(cnt, 1.0)[:, None]
        return xent_int(jax.nn.relu(h @ w1 + b1) @ w2 + b2, y)
    return _train_case(loss, ps, [ids, seg, y], optax.adagrad(0.05))


def make_t_lora(quick):
    import optax
    batch, d, r = (512, 1024, 8) if not quick else (4, 6, 2)
    rng = _rng(92)
    w1, w2 = (_f32(rng.standard_normal((d, d)) / math.sqrt(d)) for _ in range(2))
    x = _f32(rng.standard_normal((batch, d)))
    yt = _f32(rng.standard_normal((batch, d)))
    p = [_f32(rng.standard_normal((d, r)) / math.sqrt(d)), _f32(np.zeros((r, d))),
         _f32(rng.standard_normal((d, r)) / math.sqrt(d)), _f32(np.zeros((r, d)))]
    scale = 16.0 / r

    def loss(p, w1, w2, x, y):  # frozen W (not donated, no gradient) + trainable A @ B
        a1, b1, a2, b2 = p
        h = jax.nn.gelu(x @ w1 + (x @ a1) @ b1 * scale)
        return jnp.mean(jnp.square(h @ w2 + (h @ a2) @ b2 * scale - y))
    return _train_case(loss, p, [w1, w2, x, yt], optax.adamw(1e-3, weight_decay=1e-2))


def make_t_grad_accum(quick):
    import optax
    micro, mb, sizes = (4, 256, [512, 1024, 10]) if not quick else (4, 3, [6, 8, 3])
    rng = _rng(93)
    ps = mlp_params(rng, sizes)
    x = _f32(rng.standard_normal((micro, mb, sizes[0])))
    y = rng.integers(0, sizes[-1], (micro, mb)).astype(np.int32)

    def loss(p, x, y):
        return xent_int(mlp_apply(p, x, jax.nn.silu), y)

    def vg(p, xs, ys):  # gradients summed over the microbatches by lax.scan, then averaged
        def body(acc, xy):
            lv, g = jax.value_and_grad(loss)(p, *xy)
            return (acc[0] + lv, [a + b for a, b in zip(acc[1], g)]), None
        zero = (jnp.float32(0), [jnp.zeros_like(t) for t in p])
        (lv, g), _ = lax.scan(body, zero, (xs, ys))
        return lv / micro, [t / micro for t in g]
    return _train_case(loss, ps, [x, y], optax.adam(1e-3), vg=vg)


def make_t_bf16_master(quick):
    import optax
    batch, sizes = (256, [784, 1024, 1024, 10]) if not quick else (4, [6, 8, 8, 3])
    rng = _rng(94)
    master = mlp_params(rng, sizes)
    x = _f32(rng.standard_normal((batch, sizes[0])))
    y = rng.integers(0, sizes[-1], batch).astype(np.int32)
    opt = optax.adam(1e-3)
    leaves, treedef = jax.tree_util.tree_flatten(opt.init(master))
    npar, nst = len(master), len(leaves)

    def step(*a):  # bf16 working params (donated) and f32 master params + Adam state (donated)
        pb, pm = list(a[:npar]), list(a[npar:2 * npar])
        st = jax.tree_util.tree_unflatten(treedef, list(a[2 * npar:2 * npar + nst]))
        xx, yy = a[2 * npar + nst:]

        def loss(pb):
            logits = mlp_apply(pb, xx.astype(jnp.bfloat16), jax.nn.gelu)  # smooth (see mlp)
            return xent_int(logits.astype(jnp.float32), yy)
        lv, g = jax.value_and_grad(loss)(pb)
        upd, st = opt.update([t.astype(jnp.float32) for t in g], st, pm)
        pm = optax.apply_updates(pm, upd)
        return lv, [t.astype(jnp.bfloat16) for t in pm], pm, jax.tree_util.tree_leaves(st)
    nstate = 2 * npar + nst
    args = ([t.astype(jnp.bfloat16) for t in master] + master + [np.asarray(v) for v in leaves] +
            [x, y])
    return step, _warm_steps(step, args, 1, nstate, 2), _train_opts(1, nstate, 1e-2)


def make_t_ema(quick):
    import optax
    batch, sizes = (256, [256, 1024, 1024, 256]) if not quick else (4, [5, 8, 8, 5])
    rng = _rng(95)
    ps = mlp_params(rng, sizes)
    x = _f32(rng.standard_normal((batch, sizes[0])))
    yt = _f32(rng.standard_normal((batch, sizes[-1])))
    opt = optax.rmsprop(1e-3)
    leaves, treedef = jax.tree_util.tree_flatten(opt.init(ps))
    npar, nst = len(ps), len(leaves)

    def step(*a):  # RMSProp on an MLP regression, then an exponential moving average of params
        p, ema = list(a[:npar]), list(a[npar:2 * npar])
        st = jax.tree_util.tree_unflatten(treedef, list(a[2 * npar:2 * npar + nst]))
        xx, yy = a[2 * npar + nst:]
        lv, g = jax.value_and_grad(
            lambda p: jnp.mean(jnp.square(mlp_apply(p, xx, jax.nn.silu) - yy)))(p)
        upd, st = opt.update(g, st, p)
        p = optax.apply_updates(p, upd)
        ema = [0.999 * e + 0.001 * t for e, t in zip(ema, p)]
        return lv, p, ema, jax.tree_util.tree_leaves(st)
    nstate = 2 * npar + nst
    args = ps + [t.copy() for t in ps] + [np.asarray(v) for v in leaves] + [x, yt]
    return step, _warm_steps(step, args, 1, nstate, 2), _train_opts(1, nstate)


def train_case_list(quick):
    """The sixth group, each name starting with "t ". Sizes are those of a full run."""
    q = quick
    return [("t mlp gelu 784-1024-512-10 b512 adamw wd-mask", lambda: make_t_mlp_adamw(q)),
            ("t cnn 2conv+pool+dense NHWC 64x28x28 sgd momentum", lambda: make_t_cnn_sgd(q)),
            ("t encoder pre-LN h4 b8 s128 d256 clip+adam", lambda: make_t_encoder(q)),
            ("t autoencoder 784-512-64 sigmoid bce b256 adam", lambda: make_t_autoencoder(q)),
            ("t logistic regression L2 100000x256 sgd", lambda: make_t_logreg(q)),
            ("t linear regression 32768x256->32 lamb", lambda: make_t_linreg_lamb(q)),
            ("t gan mlp G 64-512-784 D 784-512-1 b256 adam x2", lambda: make_t_gan(q)),
            ("t label smoothing xent 512-1024-1000 b512 nesterov", lambda: make_t_label_smooth(q)),
            ("t infonce cosine 512x512 mlp 512-1024-128 adam", lambda: make_t_infonce(q)),
            ("t word2vec sgns V30000 d128 b4096 neg5 sgd", lambda: make_t_word2vec(q)),
            ("t embedding bag segment_sum V50000 d64 + mlp adagrad",
             lambda: make_t_embedding_bag(q)),
            ("t lora r8 2x1024x1024 frozen b512 adamw", lambda: make_t_lora(q)),
            ("t grad accumulation scan 4x256 mlp 512-1024-10 adam",
             lambda: make_t_grad_accum(q)),
            ("t bf16 params + f32 master gelu 784-1024-1024-10 adam", lambda: make_t_bf16_master(q)),
            ("t ema params rmsprop mlp 256-1024-1024-256 b256", lambda: make_t_ema(q))]


# ---- the seventh group: linear algebra (`--group linalg`) ------------------------------------------
# jnp.linalg and jax.scipy.linalg lower on CPU to jaxlib's LAPACK custom calls (potrf, getrf,
# geqrf/orgqr, syevd, gesdd, trsm); optitpu runs them with OpenBLAS's LAPACK (src/exec/lapack.c).
# Outputs are chosen free of LAPACK's sign choices (eigenvectors and singular vectors enter
# through products that reconstruct something), so the comparison with JAX is a residual.

def _spd(rng, n, batch=(), jitter=1.0):
    a = rng.standard_normal(batch + (n, n))
    return (a @ np.swapaxes(a, -1, -2) / n + jitter * np.eye(n)).astype(np.float32)


def make_l_gp(quick):
    n, d = (1024, 8) if not quick else (64, 3)
    rng = _rng(61)
    x = _f32(rng.uniform(-2, 2, (n, d)))
    y = _f32(np.sin(x.sum(1)) + 0.1 * rng.standard_normal(n))
    ls, noise = _f32(1.3), _f32(0.1)
    import jax.scipy.linalg as jsl

    def f(x, y, ls, noise):  # GP regression: RBF kernel, exact marginal log likelihood
        d2 = jnp.sum(jnp.square(x[:, None, :] - x[None, :, :]), axis=-1)
        k = jnp.exp(-0.5 * d2 / (ls * ls)) + noise * jnp.eye(x.shape[0], dtype=x.dtype)
        c = jsl.cho_factor(k, lower=True)
        alpha = jsl.cho_solve(c, y)
        logdet = 2 * jnp.sum(jnp.log(jnp.diagonal(c[0])))
        return -0.5 * (y @ alpha) - 0.5 * logdet - 0.5 * x.shape[0] * jnp.log(2 * jnp.pi), alpha
    return f, [x, y, ls, noise], {"tol": 1e-3}


def make_l_lstsq(quick):
    m, n, k = (2048, 64, 4) if not quick else (64, 8, 2)
    rng = _rng(62)
    a = _f32(rng.standard_normal((m, n)))
    b = _f32(a @ rng.standard_normal((n, k)) + 0.01 * rng.standard_normal((m, k)))
    return (lambda a, b: jnp.linalg.lstsq(a, b)[0]), [a, b], {"tol": 1e-4}


def make_l_batch(kind, quick):
    bt, n, k = (64, 64, 8) if not quick else (4, 8, 2)
    rng = _rng(63)
    a = _f32(rng.standard_normal((bt, n, n)) + 4 * np.eye(n))
    if kind == "solve":
        b = _f32(rng.standard_normal((bt, n, k)))
        return jnp.linalg.solve, [a, b], {"tol": 1e-4}
    if kind == "inv":
        return jnp.linalg.inv, [a], {"tol": 1e-4}
    return jnp.linalg.cholesky, [_spd(rng, n, (bt,))], {"tol": 1e-5}


def make_l_eigh(quick):
    n, d = (2048, 256) if not quick else (64, 16)
    rng = _rng(64)
    x = _f32(rng.standard_normal((n, d)) * np.linspace(0.2, 2, d))
    cov = _f32(x.T @ x / n)

    def f(c):  # eigenvalues and the matrix square root V diag(sqrt(w)) V^T (sign-free)
        w, v = jnp.linalg.eigh(c)
        return w, (v * jnp.sqrt(jnp.maximum(w, 0))) @ v.T
    return f, [cov], {"tol": 1e-4}


def make_l_pca(quick):
    n, d, r = (1024, 64, 16) if not quick else (64, 8, 3)
    rng = _rng(65)
    x = _f32(rng.standard_normal((n, r)) @ (3 * rng.standard_normal((r, d))) +
             0.1 * rng.standard_normal((n, d)))

    def f(x):  # PCA by the thin SVD of the centred data: spectrum and the rank-r reconstruction
        xc = x - jnp.mean(x, axis=0)
        u, s, vt = jnp.linalg.svd(xc, full_matrices=False)
        return s, (u[:, :r] * s[:r]) @ vt[:r]
    return f, [x], {"tol": 1e-4}


def make_l_qr(quick):
    m, n = (512, 128) if not quick else (32, 8)
    rng = _rng(66)
    a = _f32(rng.standard_normal((m, n)))
    b = _f32(rng.standard_normal((m, 16)))

    def f(a, b):  # Gram-Schmidt by Householder QR: Q, R and the projection of b onto range(A)
        q, r = jnp.linalg.qr(a)
        return q, r, q @ (q.T @ b)
    return f, [a, b], {"tol": 1e-4}


def make_l_slogdet(quick):
    bt, n = (16, 128) if not quick else (2, 8)
    rng = _rng(67)
    a = rng.standard_normal((bt, n, n)) + np.sqrt(n) * np.eye(n)
    return (lambda a: jnp.linalg.slogdet(a)), [a], {"tol": 1e-10, "x64": True}


def make_l_whiten(quick):
    n, d = (4096, 64) if not quick else (64, 8)
    rng = _rng(68)
    mix = rng.standard_normal((d, d)) / np.sqrt(d) + np.eye(d)
    x = _f32(rng.standard_normal((n, d)) @ mix)

    def f(x):  # ZCA whitening: X_c V diag(1 / sqrt(w + eps)) V^T
        xc = x - jnp.mean(x, axis=0)
        w, v = jnp.linalg.eigh(xc.T @ xc / x.shape[0])
        return xc @ ((v / jnp.sqrt(w + 1e-5)) @ v.T)
    return f, [x], {"tol": 1e-3}


def make_l_trsolve(quick):
    n, k = (1024, 64) if not quick else (32, 4)
    rng = _rng(69)
    lo = _f32(np.tril(rng.standard_normal((n, n)) / np.sqrt(n)) + 2 * np.eye(n))
    b = _f32(rng.standard_normal((n, k)))
    import jax.scipy.linalg as jsl
    return (lambda a, b: jsl.solve_triangular(a, b, lower=True)), [lo, b], {"tol": 1e-4}


def linalg_case_list(quick):
    """The seventh group, each name starting with "l ". Sizes are those of a full run."""
    q = quick
    return [("l gp log likelihood rbf cholesky + cho_solve n1024", lambda: make_l_gp(q)),
            ("l lstsq (svd) 2048x64 rhs 4", lambda: make_l_lstsq(q)),
            ("l solve batch 64x64x64 rhs 8", lambda: make_l_batch("solve", q)),
            ("l inv batch 64x64x64", lambda: make_l_batch("inv", q)),
            ("l cholesky batch 64x64x64", lambda: make_l_batch("cholesky", q)),
            ("l eigh covariance 256x256 + sqrtm", lambda: make_l_eigh(q)),
            ("l pca svd 1024x64 rank-16 reconstruction", lambda: make_l_pca(q)),
            ("l qr orthogonalization 512x128 + projection", lambda: make_l_qr(q)),
            ("l slogdet batch 16x128x128 f64", lambda: make_l_slogdet(q)),
            ("l zca whitening 4096x64 (eigh)", lambda: make_l_whiten(q)),
            ("l solve_triangular 1024x1024 rhs 64", lambda: make_l_trsolve(q))]


# ---- the eighth group: Fourier transforms (`--group fft`) ----------------------------------------
# jnp.fft lowers to HLO fft (FFT, IFFT, RFFT, IRFFT); around it, complex arithmetic on c64.
# optitpu transforms lines with its own FFT (src/exec/fft.c), XLA with ducc.

def _c64(rng, shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def make_f_power(quick):
    b, n = (256, 4096) if not quick else (4, 64)
    x = _f32(_rng(71).standard_normal((b, n)))
    return (lambda x: jnp.abs(jnp.fft.rfft(x)) ** 2), [x], {"tol": 1e-4}


def make_f_lowpass(quick):
    b, n = (512, 2048) if not quick else (4, 64)
    rng = _rng(72)
    x = _f32(rng.standard_normal((b, n)))
    h = _f32(1.0 / (1.0 + (np.arange(n // 2 + 1) / 64.0) ** 4))

    def f(x, h):  # a zero-phase low-pass filter: rfft, scale each frequency, irfft
        return jnp.fft.irfft(jnp.fft.rfft(x) * h, n=x.shape[-1])
    return f, [x, h], {"tol": 1e-4}


def make_f_fft2(quick):
    b, n = (16, 256) if not quick else (2, 16)
    z = _c64(_rng(73), (b, n, n))
    return (lambda z: jnp.fft.ifft2(jnp.fft.fft2(z) * 0.5j)), [z], {"tol": 1e-4}


def make_f_fno(quick):
    b, c, n, k = (16, 32, 1024, 64) if not quick else (2, 4, 64, 8)
    rng = _rng(74)
    x = _f32(rng.standard_normal((b, c, n)))
    w = (_c64(rng, (c, c, k)) / c).astype(np.complex64)

    def f(x, w):  # an FNO spectral convolution: keep k modes, mix channels per mode
        xf = jnp.fft.rfft(x, axis=-1)[:, :, :k]
        yf = jnp.einsum("bik,iok->bok", xf, w)
        yf = jnp.pad(yf, ((0, 0), (0, 0), (0, n // 2 + 1 - k)))
        return jnp.fft.irfft(yf, n=n, axis=-1)
    return f, [x, w], {"tol": 1e-4}


def make_f_conv128(quick):
    b, n = (64, 4096) if not quick else (2, 64)
    rng = _rng(75)
    z = rng.standard_normal((b, n)) + 1j * rng.standard_normal((b, n))
    k = rng.standard_normal(n) + 1j * rng.standard_normal(n)

    def f(z, k):  # each row circularly convolved with k, in c128
        return jnp.fft.ifft(jnp.fft.fft(z) * jnp.fft.fft(k))
    return f, [z, k], {"tol": 1e-10, "x64": True}


def make_f_fft_len(b, n, quick, seed):
    b, n = (b, n) if not quick else (2, n if n < 2000 else 263)
    z = _c64(_rng(seed), (b, n))
    return (lambda z: jnp.fft.fft(z)), [z], {"tol": 1e-4}


def make_f_audio(quick):
    b, n = (16, 44100) if not quick else (2, 441)
    x = _f32(_rng(77).standard_normal((b, n)))
    return (lambda x: jnp.abs(jnp.fft.rfft(x))), [x], {"tol": 1e-4}


def make_f_rfft2_conv(quick):
    b, n = (8, 512) if not quick else (2, 32)
    rng = _rng(78)
    x = _f32(rng.standard_normal((b, n, n)))
    k = _f32(rng.standard_normal((n, n)) / n)

    def f(x, k):  # each image circularly convolved with k through rfft2 / irfft2
        return jnp.fft.irfft2(jnp.fft.rfft2(x) * jnp.fft.rfft2(k), s=x.shape[-2:])
    return f, [x, k], {"tol": 1e-4}


def make_f_rfft3_conv(quick):
    b, n = (4, 64) if not quick else (2, 8)
    rng = _rng(79)
    x = _f32(rng.standard_normal((b, n, n, n)))
    k = _f32(rng.standard_normal((n, n, n)) / n)

    def f(x, k):  # each volume circularly convolved with k through rfftn / irfftn
        ax = (-3, -2, -1)
        return jnp.fft.irfftn(jnp.fft.rfftn(x, axes=ax) * jnp.fft.rfftn(k, axes=ax),
                              s=x.shape[-3:], axes=ax)
    return f, [x, k], {"tol": 1e-4}


def make_f_axis0(quick):
    n, c = (4096, 64) if not quick else (64, 4)
    z = _c64(_rng(80), (n, c))
    return (lambda z: jnp.fft.fft(z, axis=0)), [z], {"tol": 1e-4}


def make_f_stft(quick):
    b, n, w, hop = (8, 65536, 512, 128) if not quick else (2, 1024, 64, 16)
    x = _f32(_rng(81).standard_normal((b, n)))
    nfr = (n - w) // hop + 1
    idx = np.arange(nfr)[:, None] * hop + np.arange(w)[None, :]
    win = _f32(0.5 - 0.5 * np.cos(2 * np.pi * np.arange(w) / w))

    def f(x, win):  # framed by a gather, Hann-windowed, rfft, magnitude
        return jnp.abs(jnp.fft.rfft(x[:, idx] * win, axis=-1))
    return f, [x, win], {"tol": 1e-4}


def make_f_cmatmul(quick):
    n = 512 if not quick else 16
    rng = _rng(82)
    a, b = _c64(rng, (n, n)), _c64(rng, (n, n))
    return (lambda a, b: a @ b), [a, b], {"tol": 1e-4}


def make_f_csum(quick):
    b, n = (1024, 4096) if not quick else (4, 64)
    z = _c64(_rng(83), (b, n))
    return (lambda z: (jnp.sum(z, axis=-1), jnp.mean(z, axis=0))), [z], {"tol": 1e-4}


def make_f_cwhere(quick):
    b, n = (1024, 4096) if not quick else (4, 64)
    z = _c64(_rng(84), (b, n))
    return (lambda z: jnp.where(z.real > 0, z, z * 1j)), [z], {"tol": 1e-4}


def make_f_polar(quick):
    b, n = (1024, 4096) if not quick else (4, 64)
    z = _c64(_rng(85), (b, n))
    return (lambda z: (jnp.abs(z), jnp.angle(z))), [z], {"tol": 1e-4}


def fft_case_list(quick):
    """The eighth group, each name starting with "f ". Sizes are those of a full run."""
    q = quick
    return [("f rfft power spectrum 256x4096", lambda: make_f_power(q)),
            ("f rfft-filter-irfft 512x2048", lambda: make_f_lowpass(q)),
            ("f fft2 * 0.5j ifft2 c64 16x256x256", lambda: make_f_fft2(q)),
            ("f fno spectral conv b16 c32 n1024 modes 64", lambda: make_f_fno(q)),
            ("f circular conv c128 64x4096", lambda: make_f_conv128(q)),
            ("f fft c64 256x1000", lambda: make_f_fft_len(256, 1000, q, 76)),
            ("f fft c64 prime 16x10007 (bluestein)", lambda: make_f_fft_len(16, 10007, q, 86)),
            ("f rfft abs audio 16x44100", lambda: make_f_audio(q)),
            ("f rfft2-conv-irfft2 8x512x512", lambda: make_f_rfft2_conv(q)),
            ("f rfftn-conv-irfftn 3-D 4x64x64x64", lambda: make_f_rfft3_conv(q)),
            ("f fft axis 0 c64 4096x64", lambda: make_f_axis0(q)),
            ("f stft frames 512 hop 128 8x65536 abs", lambda: make_f_stft(q)),
            ("f complex matmul c64 512x512", lambda: make_f_cmatmul(q)),
            ("f complex sum and mean c64 1024x4096", lambda: make_f_csum(q)),
            ("f complex where c64 1024x4096", lambda: make_f_cwhere(q)),
            ("f complex abs and angle c64 1024x4096", lambda: make_f_polar(q))]


# ---- the ninth group: programs from outside (`--group wild`) -------------------------------------
# Programs written the way users outside write them, at their sizes (odd, not multiples of 16),
# built from ops and idioms the other groups do not combine: bidirectional and stacked recurrent
# nets with length masks, CTC and Viterbi (max-plus) scans, separable/dilated/transposed/atrous
# convolutions, pooling that excludes padding, antialiased and non-integer resizes with gradients,
# reverse and integer scans, lexicographic sorts, large-k top_k, confusion matrices, 3-operand
# einsums, per-example gradients of a conv net, ALiBi and sliding-window attention, switch routing
# by gather and scatter-add, divergences, an audio front end, weighted/max embedding bags, a
# scheduled optax chain, special functions, the activation zoo, integer index arithmetic, boolean
# masks, f64 and f16 programs, jax.random samplers, bucketing by searchsorted, quantiles, pixel
# shuffle, uint8 image preprocessing, triplet mining, volume rendering and a greedy decode loop.
# Integer outputs (argmax, indices) come from data whose order does not depend on rounding.

def make_w_bigru(quick):
    t, b, nin, nh = (50, 32, 128, 192) if not quick else (6, 3, 4, 5)
    rng = _rng(201)
    xs = _f32(rng.standard_normal((t, b, nin)))
    lens = rng.integers(t // 3, t + 1, b).astype(np.int32)
    ws = []
    for _ in range(2):
        ws += [_f32(rng.standard_normal((nin, 3 * nh)) / math.sqrt(nin)),
               _f32(rng.standard_normal((nh, 3 * nh)) / math.sqrt(nh)),
               _f32(0.1 * rng.standard_normal(3 * nh))]

    def run(p, xs, lens):  # a bidirectional GRU; steps past each sequence's length keep h
        mask = (jnp.arange(t)[:, None] < lens[None, :])[..., None]

        def scan_dir(wx, wh, bias, reverse):
            cell = gru_cell(wx, wh, bias)

            def body(h, xm):
                x, m = xm
                hn, _ = cell(h, x)
                h = jnp.where(m, hn, h)
                return h, h
            return lax.scan(body, jnp.zeros((b, nh), jnp.float32), (xs, mask), reverse=reverse)
        hf, ysf = scan_dir(*p[:3], False)
        hb, ysb = scan_dir(*p[3:], True)
        return jnp.concatenate([ysf, ysb], axis=-1) * mask, hf + hb

    def step(xs, lens, *p):
        def loss(p):
            ys, h = run(p, xs, lens)
            return jnp.mean(jnp.square(ys)) + jnp.mean(h)
        return jax.value_and_grad(loss)(list(p))
    return step, [xs, lens] + ws, {"tol": 1e-3}


def make_w_lstm2(quick):
    t, b, nin, nh = (40, 24, 96, 160) if not quick else (5, 2, 3, 4)
    rng = _rng(202)
    xs = _f32(rng.standard_normal((t, b, nin)))
    ps = []
    for i in range(2):
        k = nin if i == 0 else nh
        ps += [_f32(rng.standard_normal((k, 4 * nh)) / math.sqrt(k)),
               _f32(rng.standard_normal((nh, 4 * nh)) / math.sqrt(nh)),
               _f32(0.1 * rng.standard_normal(4 * nh))]
    wout = _f32(rng.standard_normal((nh, 7)) / math.sqrt(nh))

    def f(xs, wout, *p):  # a two-layer LSTM; the top layer's outputs through a dense head
        h0 = jnp.zeros((b, nh), jnp.float32)
        _, h1 = lax.scan(lstm_cell(*p[:3]), (h0, h0), xs)
        (hl, cl), h2 = lax.scan(lstm_cell(*p[3:]), (h0, h0), h1)
        return h2 @ wout, hl, cl
    return f, [xs, wout] + ps, {}


def make_w_ctc(quick):
    import optax
    b, t, v, lab = (16, 100, 40, 30) if not quick else (2, 8, 5, 3)
    rng = _rng(203)
    logits = _f32(rng.standard_normal((b, t, v)))
    lpad = _f32((np.arange(t)[None, :] >= rng.integers(3 * t // 4, t + 1, b)[:, None]))
    labels = rng.integers(1, v, (b, lab)).astype(np.int32)
    ypad = _f32((np.arange(lab)[None, :] >= rng.integers(lab // 2, lab + 1, b)[:, None]))

    def step(logits, lpad, labels, ypad):  # optax.ctc_loss: a logsumexp recursion in lax.scan
        return jax.value_and_grad(
            lambda lg: jnp.mean(optax.ctc_loss(lg, lpad, labels, ypad)))(logits)
    return step, [logits, lpad, labels, ypad], {"tol": 1e-3}


def make_w_viterbi(quick):
    t, b, s = (128, 32, 48) if not quick else (6, 2, 4)
    rng = _rng(204)
    # emissions on a grid of 1/8 with distinct sums: every max is taken by one state only
    em = _f32(rng.integers(-64, 64, (t, b, s)) / 8.0)
    tr = _f32(rng.permutation(s * s).reshape(s, s) / 1024.0)

    def f(em, tr):  # max-plus forward pass with back-pointers, then the backtrace scan
        def fwd(score, e):
            cand = score[:, :, None] + tr[None]  # (b, from, to)
            return jnp.max(cand, axis=1) + e, jnp.argmax(cand, axis=1).astype(jnp.int32)
        score, bp = lax.scan(fwd, em[0], em[1:])
        last = jnp.argmax(score, axis=-1).astype(jnp.int32)

        def back(state, ptr):
            prev = jnp.take_along_axis(ptr, state[:, None], axis=1)[:, 0]
            return prev, state
        first, path = lax.scan(back, last, bp, reverse=True)
        return jnp.max(score, axis=-1), jnp.concatenate([first[None], path], axis=0)
    return f, [em, tr], {}


def bn_train(x, g, b, axes):
    mu = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=axes, keepdims=True)
    return (x - mu) * lax.rsqrt(var + 1e-5) * g + b


def make_w_sepconv(quick):
    n, hw, c, co = (8, 63, 48, 96) if not quick else (2, 7, 3, 5)
    rng = _rng(205)
    x = _f32(rng.standard_normal((n, hw, hw, c)))
    wd = _f32(rng.standard_normal((5, 5, 1, c)) / 5)
    wp = _f32(rng.standard_normal((1, 1, c, co)) / math.sqrt(c))
    g, bb = _f32(1 + 0.1 * rng.standard_normal(co)), _f32(0.1 * rng.standard_normal(co))

    def block(x, wd, wp, g, bb):  # EfficientNet/Xception: depthwise 5x5 stride 2, pointwise, BN
        y = lax.conv_general_dilated(x, wd, (2, 2), "SAME", feature_group_count=c,
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = jax.nn.swish(y)
        y = lax.conv_general_dilated(y, wp, (1, 1), "VALID",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return bn_train(y, g, bb, (0, 1, 2))
    ho = (hw + 1) // 2
    ct = _f32(rng.standard_normal((n, ho, ho, co)))

    def step(x, wd, wp, g, bb, ct):
        return jax.value_and_grad(lambda *p: jnp.sum(block(*p) * ct), argnums=(0, 1, 2, 3, 4))(
            x, wd, wp, g, bb)
    return step, [x, wd, wp, g, bb, ct], {"tol": 1e-3}


def make_w_dilated_grad(quick):
    n, c, hw, co, d = (4, 32, 45, 40, 3) if not quick else (1, 2, 9, 3, 2)
    rng = _rng(206)
    x = _f32(rng.standard_normal((n, c, hw, hw)))
    w = _f32(rng.standard_normal((co, c, 3, 3)) / math.sqrt(9 * c))
    ct = _f32(rng.standard_normal((n, co, hw, hw)))

    def step(x, w, ct):  # a dilated 3x3 NCHW convolution, gradients w.r.t. input and kernel
        def loss(x, w):
            y = lax.conv_general_dilated(x, w, (1, 1), "SAME", rhs_dilation=(d, d),
                                         dimension_numbers=("NCHW", "OIHW", "NCHW"))
            return jnp.sum(y * ct)
        return jax.value_and_grad(loss, argnums=(0, 1))(x, w)
    return step, [x, w, ct], {"tol": 1e-3}


def make_w_conv_transpose(quick):
    n, hw, c, co = (4, 21, 32, 24) if not quick else (1, 4, 2, 3)
    rng = _rng(207)
    x = _f32(rng.standard_normal((n, hw, hw, c)))
    w = _f32(rng.standard_normal((5, 5, c, co)) / math.sqrt(25 * c))

    def f(x, w):  # lax.conv_transpose, stride 3, kernel 5, VALID (lhs dilation, odd output)
        return jax.nn.relu(lax.conv_transpose(x, w, (3, 3), "VALID",
                                              dimension_numbers=("NHWC", "HWIO", "NHWC")))
    return f, [x, w], {}


def make_w_aspp(quick):
    n, hw, c, co = (2, 33, 64, 48) if not quick else (1, 9, 3, 2)
    rates = (1, 6, 12) if not quick else (1, 2, 3)
    rng = _rng(208)
    x = _f32(rng.standard_normal((n, hw, hw, c)))
    ws = [_f32(rng.standard_normal((3, 3, c, co)) / math.sqrt(9 * c)) for _ in rates]
    wp = _f32(rng.standard_normal((1, 1, co * (len(rates) + 1), co)) / math.sqrt(co * 4))
    wg = _f32(rng.standard_normal((c, co)) / math.sqrt(c))

    def f(x, wp, wg, *ws):  # DeepLab's atrous pyramid: dilated branches + image pooling, concat
        br = [lax.conv_general_dilated(x, w, (1, 1), "SAME", rhs_dilation=(r, r),
                                       dimension_numbers=("NHWC", "HWIO", "NHWC"))
              for w, r in zip(ws, rates)]
        pool = jnp.mean(x, axis=(1, 2)) @ wg
        br.append(jnp.broadcast_to(pool[:, None, None, :], br[0].shape))
        y = jax.nn.relu(jnp.concatenate(br, axis=-1))
        return lax.conv_general_dilated(y, wp, (1, 1), "VALID",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return f, [x, wp, wg] + ws, {}


def make_w_pool_nchw(quick):
    n, c, hw = (8, 64, 37) if not quick else (2, 3, 7)
    rng = _rng(209)
    x = _f32(rng.permutation(n * c * hw * hw).reshape(n, c, hw, hw) / (n * c * hw * hw))
    ct = _f32(rng.standard_normal((n, c, hw // 2, hw // 2)))

    def step(x, ct):  # avg pool 3x3/1 SAME excluding padding (PyTorch count_include_pad=False),
        # then max pool 3x3/2 VALID NCHW (distinct inputs: no ties), value_and_grad
        def loss(x):
            ones = jnp.ones((1, 1, hw, hw), jnp.float32)
            s = lax.reduce_window(x, 0.0, lax.add, (1, 1, 3, 3), (1, 1, 1, 1), "SAME")
            cnt = lax.reduce_window(ones, 0.0, lax.add, (1, 1, 3, 3), (1, 1, 1, 1), "SAME")
            y = x + s / cnt
            m = lax.reduce_window(y, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), "VALID")
            return jnp.sum(m * ct)
        return jax.value_and_grad(loss)(x)
    return step, [x, ct], {"tol": 1e-3}


def make_w_resize(quick):
    n, hw, c = (4, 96, 16) if not quick else (1, 8, 2)
    rng = _rng(210)
    x = _f32(rng.standard_normal((n, hw, hw, c)))

    def f(x):  # antialiased bilinear downscale to 0.5 (a triangle filter of width 2), lanczos3
        # upscale to 1.5, bicubic to a non-integer size
        down = jax.image.resize(x, (n, hw // 2, hw // 2, c), "bilinear", antialias=True)
        up = jax.image.resize(x, (n, hw * 3 // 2, hw * 3 // 2, c), "lanczos3")
        odd = jax.image.resize(x, (n, hw * 2 // 3 + 1, hw * 5 // 4 - 1, c), "bicubic")
        return down, up, odd
    return f, [x], {}


def make_w_resize_grad(quick):
    n, h, w, c, ho, wo = (8, 45, 60, 32, 64, 80) if not quick else (1, 5, 6, 2, 7, 9)
    rng = _rng(211)
    x = _f32(rng.standard_normal((n, h, w, c)))
    ct = _f32(rng.standard_normal((n, ho, wo, c)))

    def step(x, ct):  # a decoder's bilinear upsampling to a non-integer size, value_and_grad
        return jax.value_and_grad(
            lambda x: jnp.sum(jax.image.resize(x, (n, ho, wo, c), "bilinear") * ct))(x)
    return step, [x, ct], {"tol": 1e-3}


def make_w_scans(quick):
    r, c = (512, 3000) if not quick else (3, 7)
    rng = _rng(212)
    x = _f32(rng.standard_normal((r, c)))
    k = rng.integers(-1000, 1000, (r, c)).astype(np.int32)

    def f(x, k):  # reverse cumsum (returns-to-go), cummin, int32 cumsum/cummax, bool counts
        rtg = jnp.flip(jnp.cumsum(jnp.flip(x, 1), axis=1), 1)
        return (rtg, lax.cummin(x, axis=0), jnp.cumsum(k, axis=1), lax.cummax(k, axis=0),
                jnp.cumsum(x > 0.5, axis=1, dtype=jnp.int32), lax.cumsum(x, axis=1, reverse=True))
    return f, [x, k], {}


def make_w_scans_axes(quick):
    r, c = (1000, 777) if not quick else (5, 6)
    rng = _rng(240)
    x = rng.standard_normal((r, c)).astype(np.float32)
    p = 1.0 + 1e-3 * rng.standard_normal((r, c))  # f64 factors near 1: the products stay finite
    k = rng.integers(-128, 128, (r, c)).astype(np.int8)
    w = rng.standard_normal((r, c)).astype(np.float32)

    def f(x, p, k, w):  # cumsum along axis 0, a reverse f64 cumprod, int8 cummax, and the
        # gradient of a weighted cumsum (a reverse scan of the cotangent)
        loss, g = jax.value_and_grad(lambda x: jnp.sum(jnp.cumsum(x, axis=1) * w))(x)
        return (jnp.cumsum(x, axis=0), lax.cumprod(p, axis=1, reverse=True),
                lax.cummax(k, axis=1), lax.cummin(k, axis=0, reverse=True), loss, g)
    return f, [x, p, k, w], {"x64": True, "tol": 1e-5}


def make_w_rnn_while(quick):
    t, b, nin, nh = (64, 16, 64, 128) if not quick else (5, 2, 3, 4)
    rng = _rng(241)
    xs = _f32(rng.standard_normal((t, b, nin)))
    wx = _f32(rng.standard_normal((nin, nh)) / math.sqrt(nin))
    wh = _f32(rng.standard_normal((nh, nh)) / math.sqrt(nh))
    bias = _f32(0.1 * rng.standard_normal(nh))

    def f(xs, wx, wh, bias):  # an Elman RNN written as lax.fori_loop: the state carries h and
        # the outputs, written one step at a time by dynamic_update_slice
        def body(i, s):
            h, ys = s
            h = jnp.tanh(xs[i] @ wx + h @ wh + bias)
            return h, lax.dynamic_update_slice(ys, h[None], (i, 0, 0))
        h, ys = lax.fori_loop(0, t, body, (jnp.zeros((b, nh), jnp.float32),
                                           jnp.zeros((t, b, nh), jnp.float32)))
        return h, jnp.mean(ys, axis=0)
    return f, [xs, wx, wh, bias], {"tol": 1e-4}


def make_w_lexsort(quick):
    n, c = (4096, 37) if not quick else (9, 4)
    rng = _rng(213)
    key1 = rng.integers(0, 16, n).astype(np.int32)
    key2 = _f32(rng.standard_normal(n))
    x = _f32(rng.standard_normal((n, c)))

    def f(key1, key2, x):  # a lexicographic order, descending stable argsort along axis 0,
        # sort of int keys descending
        order = jnp.lexsort((key2, key1))
        desc = jnp.argsort(-x, axis=0, stable=True).astype(jnp.int32)
        return (order.astype(jnp.int32), x[order], desc, jnp.sort(key1)[::-1],
                jnp.sort(x, axis=0))
    return f, [key1, key2, x], {}


def make_w_topk_large(quick):
    b, v, k = (64, 32003, 100) if not quick else (2, 50, 7)
    rng = _rng(214)
    # distinct values per row, with runs of equal values across rows
    x = _f32(np.stack([rng.permutation(v) for _ in range(b)]) / v - 0.5)

    def f(x):  # a vocabulary's top-100 (beam search / nucleus sampling) and a renormalization
        vals, idx = lax.top_k(x, k)
        p = jax.nn.softmax(vals * 10.0, axis=-1)
        return vals, idx, p, lax.top_k(-x, 3)[1]
    return f, [x], {}


def make_w_confusion(quick):
    n, k = (100000, 10) if not quick else (50, 4)
    rng = _rng(215)
    logits = _f32(rng.permutation(n * k).reshape(n, k) / (n * k))
    y = rng.integers(0, k, n).astype(np.int32)

    def f(logits, y):  # argmax, accuracy, a confusion matrix by one_hot products, per-class recall
        pred = jnp.argmax(logits, axis=-1)
        oh_p = jax.nn.one_hot(pred, k, dtype=jnp.int32)
        oh_y = jax.nn.one_hot(y, k, dtype=jnp.int32)
        cm = jnp.einsum("ni,nj->ij", oh_y, oh_p)
        acc = jnp.mean((pred == y).astype(jnp.float32))
        recall = jnp.diag(cm) / jnp.maximum(jnp.sum(cm, axis=1), 1)
        return pred.astype(jnp.int32), cm, acc, recall
    return f, [logits, y], {}


def make_w_einsum3(quick):
    b, i, j, k, l = (16, 64, 96, 80, 48) if not quick else (2, 3, 4, 5, 6)
    rng = _rng(216)
    x = _f32(rng.standard_normal((b, i, j)))
    y = _f32(rng.standard_normal((b, j, k)) / math.sqrt(j))
    z = _f32(rng.standard_normal((b, k, l)) / math.sqrt(k))
    m = _f32(rng.standard_normal((b, i, i)))

    def f(x, y, z, m):  # a 3-operand chain, a trace and a diagonal, a bilinear form
        chain = jnp.einsum("bij,bjk,bkl->bil", x, y, z)
        tr = jnp.einsum("bii->b", m)
        dg = jnp.einsum("bii->bi", m)
        bil = jnp.einsum("bi,bij,bj->b", dg, x[:, :, :i], dg)
        return chain, tr, bil
    return f, [x, y, z, m], {}


def make_w_per_example_cnn(quick):
    ex, hw, c1, c2, k = (32, 28, 16, 32, 10) if not quick else (2, 6, 2, 3, 3)
    rng = _rng(217)
    x = _f32(rng.standard_normal((ex, hw, hw, 1)))
    y = rng.integers(0, k, ex).astype(np.int32)
    ps = [_f32(rng.standard_normal((3, 3, 1, c1)) / 3),
          _f32(rng.standard_normal((3, 3, c1, c2)) / math.sqrt(9 * c1)),
          _f32(rng.standard_normal((c2, k)) / math.sqrt(c2))]

    def loss(p, x, y):  # one example of a small CNN (Opacus-style per-sample gradients)
        h = x[None]
        for w in p[:2]:
            h = jax.nn.relu(lax.conv_general_dilated(h, w, (2, 2), "SAME",
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC")))
        logits = jnp.mean(h, axis=(1, 2)) @ p[2]
        return xent_int(logits, y[None])

    def f(x, y, *p):
        g = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(list(p), x, y)
        return [jnp.sum(jnp.square(t), axis=tuple(range(1, t.ndim))) for t in g] + \
               [jnp.mean(t, axis=0) for t in g]
    return f, [x, y] + ps, {"tol": 1e-3}


def make_w_alibi(quick):
    b, h, s, d = (4, 12, 200, 64) if not quick else (1, 2, 6, 4)
    rng = _rng(218)
    q, k, v = (_f32(rng.standard_normal((b, h, s, d))) for _ in range(3))
    ct = _f32(rng.standard_normal((b, h, s, d)))
    slopes = _f32(2.0 ** (-8.0 * np.arange(1, h + 1) / h))

    def attn(q, k, v):  # ALiBi: a linear distance bias per head instead of position embeddings
        sc = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(math.sqrt(d))
        dist = (jnp.arange(s)[None, :] - jnp.arange(s)[:, None]).astype(jnp.float32)
        sc = sc + slopes[:, None, None] * dist[None]
        sc = jnp.where(dist[None] <= 0, sc, -1e9)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(sc, axis=-1), v)

    def step(q, k, v, ct):
        return jax.value_and_grad(lambda *a: jnp.sum(attn(*a) * ct), argnums=(0, 1, 2))(q, k, v)
    return step, [q, k, v, ct], {"tol": 1e-3}


def make_w_sliding(quick):
    b, h, s, d, win = (2, 8, 512, 64, 64) if not quick else (1, 2, 9, 4, 3)
    rng = _rng(219)
    x = _f32(rng.standard_normal((b, s, h * d)))
    wqkv = _f32(rng.standard_normal((h * d, 3 * h * d)) / math.sqrt(h * d))

    def f(x, wqkv):  # Longformer/Mistral-style sliding-window causal attention, rotary (half split)
        q, k, v = jnp.split((x @ wqkv).reshape(b, s, 3, h, d), 3, axis=2)
        q, k, v = q[:, :, 0], k[:, :, 0], v[:, :, 0]
        inv = 1.0 / (10000.0 ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
        ang = jnp.arange(s, dtype=jnp.float32)[:, None] * inv[None]
        cos, sin = jnp.cos(ang)[None, :, None], jnp.sin(ang)[None, :, None]

        def rot(t):
            t1, t2 = t[..., :d // 2], t[..., d // 2:]
            return jnp.concatenate([t1 * cos - t2 * sin, t1 * sin + t2 * cos], axis=-1)
        q, k = rot(q), rot(k)
        sc = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.float32(math.sqrt(d))
        i, j = jnp.arange(s)[:, None], jnp.arange(s)[None, :]
        sc = jnp.where((j <= i) & (j > i - win), sc, -jnp.inf)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(sc, axis=-1), v).reshape(b, s, h * d)
    return f, [x, wqkv], {}


def make_w_switch_moe(quick):
    t, dm, ff, e = (2048, 256, 512, 16) if not quick else (12, 4, 6, 3)
    rng = _rng(220)
    x = _f32(rng.standard_normal((t, dm)))
    wg = _f32(rng.standard_normal((dm, e)) / math.sqrt(dm))
    w1 = _f32(rng.standard_normal((e, dm, ff)) / math.sqrt(dm))
    w2 = _f32(rng.standard_normal((e, ff, dm)) / math.sqrt(ff))
    route = rng.permutation(t * e).reshape(t, e).astype(np.float32) / (t * e)

    def f(x, wg, w1, w2, route):  # switch (top-1) routing by gather and scatter-add: no one-hot
        # dispatch; the route scores are data, so the chosen expert is exact
        logits = x @ wg + route * 8.0
        gate, idx = lax.top_k(jax.nn.softmax(logits, axis=-1), 1)
        idx, gate = idx[:, 0], gate[:, 0]
        order = jnp.argsort(idx, stable=True)
        xs = x[order]
        h = jax.nn.gelu(jnp.einsum("td,tdf->tf", xs, w1[idx[order]]))
        ys = jnp.einsum("tf,tfd->td", h, w2[idx[order]]) * gate[order][:, None]
        out = jnp.zeros_like(x).at[order].add(ys)
        load = jax.ops.segment_sum(jnp.ones(t), idx, num_segments=e)
        aux = e * jnp.sum(load / t * jnp.mean(jax.nn.softmax(logits, axis=-1), axis=0))
        return out, idx.astype(jnp.int32), aux
    return f, [x, wg, w1, w2, route], {"tol": 1e-3}


def make_w_divergence(quick, size=(1024, 5000), f64=False):
    n, v = size if not quick else (3, 11)
    rng = _rng(221)
    cast = (lambda a: a.astype(np.float64)) if f64 else _f32
    p = cast(rng.standard_normal((n, v)) * 2)
    q = cast(rng.standard_normal((n, v)) * 2)
    mask = rng.uniform(size=(n, v)) < 0.9

    def step(p, q, mask):  # distillation: KL(teacher || student), Jensen-Shannon, a masked
        # logsumexp, value_and_grad w.r.t. the student
        def loss(q):
            lp, lq = jax.nn.log_softmax(p), jax.nn.log_softmax(q)
            kl = jnp.sum(jnp.exp(lp) * (lp - lq), axis=-1)
            m = 0.5 * (jnp.exp(lp) + jnp.exp(lq))
            js = 0.5 * jnp.sum(jnp.exp(lp) * (lp - jnp.log(m)) + jnp.exp(lq) * (lq - jnp.log(m)),
                               axis=-1)
            mlse = jax.nn.logsumexp(q, axis=-1, where=mask)
            return jnp.mean(kl) + jnp.mean(js) + 1e-3 * jnp.mean(mlse)
        return jax.value_and_grad(loss)(q)
    return step, [p, q, mask], ({"tol": 1e-10, "x64": True} if f64 else {"tol": 1e-3})


def make_w_kl_mean(quick):
    n, v = (512, 3001) if not quick else (3, 7)
    rng = _rng(227)
    p = _f32(rng.standard_normal((n, v)) * 2)
    q = _f32(rng.standard_normal((n, v)) * 2)

    def step(p, q):  # the plain distillation loss: mean over rows of KL(teacher || student)
        def loss(q):
            lp, lq = jax.nn.log_softmax(p), jax.nn.log_softmax(q)
            return jnp.mean(jnp.sum(jnp.exp(lp) * (lp - lq), axis=-1))
        return jax.value_and_grad(loss)(q)
    return step, [p, q], {"tol": 1e-3}


def make_w_per_example_conv1d(quick):
    ex, t, c1, c2, k = (16, 400, 8, 24, 5) if not quick else (2, 12, 2, 3, 3)
    rng = _rng(229)
    x = _f32(rng.standard_normal((ex, t, 3)))
    y = rng.integers(0, k, ex).astype(np.int32)
    ps = [_f32(rng.standard_normal((5, 3, c1)) / math.sqrt(15)),
          _f32(rng.standard_normal((5, c1, c2)) / math.sqrt(5 * c1)),
          _f32(rng.standard_normal((c2, k)) / math.sqrt(c2))]

    def loss(p, x, y):  # one example of a 1-D CNN on 3-channel signals (k5 s2, k5 s3)
        h = x[None]
        for w, st in zip(p[:2], (2, 3)):
            h = jax.nn.gelu(lax.conv_general_dilated(h, w, (st,), "SAME",
                                                     dimension_numbers=("NWC", "WIO", "NWC")))
        logits = jnp.max(h, axis=1) @ p[2]
        return xent_int(logits, y[None])

    def f(x, y, *p):  # DP-SGD: per-example gradients, each clipped to norm 1, then averaged
        g = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(list(p), x, y)
        norms = jnp.sqrt(sum(jnp.sum(jnp.square(t), axis=tuple(range(1, t.ndim))) for t in g))
        scale = 1.0 / jnp.maximum(norms, 1.0)
        return [jnp.mean(t * scale.reshape((-1,) + (1,) * (t.ndim - 1)), axis=0) for t in g]
    return f, [x, y] + ps, {"tol": 1e-3}


def make_w_audio(quick):
    b, n, c = (4, 16000, 256) if not quick else (1, 64, 4)
    rng = _rng(222)
    wav = _f32(rng.standard_normal((b, n, 1)) * 0.1)
    w0 = _f32(rng.standard_normal((10, 1, c)) / math.sqrt(10))
    w1 = _f32(rng.standard_normal((3, c, c)) / math.sqrt(3 * c))
    g, beta = _f32(1 + 0.1 * rng.standard_normal(c)), _f32(0.1 * rng.standard_normal(c))

    def f(wav, w0, w1, g, beta):  # wav2vec 2.0's feature encoder start: conv k10 s5, group norm
        # with a group per channel (over time), GELU, conv k3 s2, GELU
        dn = ("NWC", "WIO", "NWC")
        y = lax.conv_general_dilated(wav, w0, (5,), "VALID", dimension_numbers=dn)
        mu = jnp.mean(y, axis=1, keepdims=True)
        var = jnp.var(y, axis=1, keepdims=True)
        y = jax.nn.gelu((y - mu) * lax.rsqrt(var + 1e-5) * g + beta, approximate=False)
        y = lax.conv_general_dilated(y, w1, (2,), "VALID", dimension_numbers=dn)
        return jax.nn.gelu(y, approximate=False)
    return f, [wav, w0, w1, g, beta], {}


def make_w_embedding_bag(quick):
    vocab, d, bags, per = (50000, 64, 2048, 20) if not quick else (30, 4, 5, 3)
    rng = _rng(223)
    table = _f32(rng.standard_normal((vocab, d)) * 0.1)
    ids = rng.integers(0, vocab, bags * per).astype(np.int32)
    seg = np.sort(rng.integers(0, bags, bags * per)).astype(np.int32)
    wts = _f32(rng.uniform(0, 1, bags * per))
    ct = _f32(rng.standard_normal((bags, d)))

    def step(table, ids, seg, wts, ct):  # EmbeddingBag(mode="sum", per_sample_weights) and
        # mode="max" (segment_max), value_and_grad w.r.t. the table
        def loss(table):
            e = table[ids]
            s = jax.ops.segment_sum(e * wts[:, None], seg, num_segments=bags,
                                    indices_are_sorted=True)
            m = jax.ops.segment_max(e, seg, num_segments=bags, indices_are_sorted=True)
            m = jnp.where(jnp.isfinite(m), m, 0.0)
            return jnp.sum(s * ct) + jnp.sum(m * ct)
        return jax.value_and_grad(loss)(table)
    return step, [table, ids, seg, wts, ct], {"tol": 1e-3}


def make_w_embed_ln(quick):
    vocab, d, b, s, npos = (32000, 256, 8, 512, 1024) if not quick else (50, 8, 2, 5, 9)
    rng = _rng(229)
    tok = _f32(rng.standard_normal((vocab, d)) * 0.02)
    pos = _f32(rng.standard_normal((npos, d)) * 0.02)
    ids = rng.integers(0, vocab, (b, s)).astype(np.int32)
    pids = np.broadcast_to(np.arange(s, dtype=np.int32), (b, s)).copy()  # position ids input
    gamma = _f32(1 + 0.1 * rng.standard_normal(d))
    beta = _f32(0.1 * rng.standard_normal(d))

    def step(tok, pos, ids, pids, gamma, beta):  # BERT/GPT input: token + position, layer norm
        h = tok[ids] + pos[pids]
        mu = jnp.mean(h, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(h - mu), axis=-1, keepdims=True)
        return (h - mu) * jax.lax.rsqrt(var + 1e-5) * gamma + beta
    return step, [tok, pos, ids, pids, gamma, beta], {"tol": 1e-4}


def make_w_embed_scale_mask(quick):
    vocab, d, n = (32000, 128, 16384) if not quick else (40, 8, 11)
    rng = _rng(230)
    table = _f32(rng.standard_normal((vocab, d)) * 0.05)
    ids = rng.integers(-5, vocab + 5, n).astype(np.int32)  # a few out of range: clamped
    keep = rng.uniform(0, 1, (n, d)) > 0.1

    def step(table, ids, keep):  # embedding * sqrt(d) with a dropout mask, then a tanh
        e = jnp.take(table, ids, axis=0, mode="clip") * np.float32(np.sqrt(d))
        return jnp.tanh(jnp.where(keep, e / np.float32(0.9), 0.0))
    return step, [table, ids, keep], {"tol": 1e-5}


def make_w_optax_sched(quick):
    import optax
    shapes = _pytree_shapes(quick)
    rng = _rng(224)
    params = [_f32(rng.standard_normal(s) * 0.1) for s in shapes]
    grads = [_f32(rng.standard_normal(s) * 0.05) for s in shapes]
    sched = optax.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 10000, 1e-5)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.scale_by_adam(),
                      optax.add_decayed_weights(1e-2, mask=lambda p: [t.ndim > 1 for t in p]),
                      optax.scale_by_schedule(sched), optax.scale(-1.0))
    state0 = opt.init(params)
    leaves0, treedef = jax.tree_util.tree_flatten(state0)
    leaves0 = [(np.int32(57) if np.asarray(v).dtype == np.int32 else
                _f32(np.abs(rng.standard_normal(np.shape(v))) * 1e-3)) for v in leaves0]
    np_, ns = len(params), len(leaves0)

    def step(*args):  # clip, Adam, masked decoupled weight decay, warmup + cosine schedule
        p, st, g = list(args[:np_]), args[np_:np_ + ns], list(args[np_ + ns:])
        upd, new = opt.update(g, jax.tree_util.tree_unflatten(treedef, list(st)), p)
        return optax.apply_updates(p, upd), jax.tree_util.tree_leaves(new)

    def chain(out, args):
        return out[:np_ + ns] + args[np_ + ns:]
    return step, params + leaves0 + grads, {"donate": tuple(range(np_ + ns)), "chain": chain}


def make_w_special(quick):
    n = 1 << 20 if not quick else 64
    rng = _rng(225)
    x = _f32(rng.uniform(0.05, 20.0, n))
    u = _f32(rng.uniform(-0.999, 0.999, n))
    z = _f32(rng.standard_normal(n) * 3)

    def f(x, u, z):  # special functions: log-gamma, digamma, erfinv, erfc, ndtr, log1p/expm1,
        # Bessel i0e/i1e, the regularized incomplete gamma
        sp = jax.scipy.special
        return (sp.gammaln(x), sp.digamma(x), sp.erfinv(u), sp.erfc(z), sp.ndtr(z),
                jnp.log1p(u) + jnp.expm1(u), sp.i0e(z), sp.i1e(z), sp.gammainc(2.5, x))
    return f, [x, u, z], {"tol": 1e-4}


def make_w_activations(quick):
    n = 2_000_003 if not quick else 97
    rng = _rng(226)
    x = _f32(rng.standard_normal(n) * 4)
    ct = _f32(rng.standard_normal(n))

    def step(x, ct):  # the activation zoo and its gradients
        def loss(x):
            nn = jax.nn
            ys = [nn.elu(x), nn.selu(x), nn.celu(x, 0.5), nn.softplus(x), nn.log_sigmoid(x),
                  x * jnp.tanh(nn.softplus(x)), nn.hard_swish(x), nn.hard_tanh(x),
                  nn.sparse_plus(x), nn.squareplus(x), nn.glu(jnp.stack([x, ct], -1))[..., 0]]
            return sum(jnp.sum(y * ct) for y in ys)
        return jax.value_and_grad(loss)(x)
    return step, [x, ct], {"tol": 1e-3}


def make_w_index_arith(quick):
    n = 1_000_003 if not quick else 101
    rng = _rng(227)
    a = rng.integers(-2**30, 2**30, n).astype(np.int32)
    b = rng.integers(-97, 98, n).astype(np.int32)
    b[b == 0] = 7
    flat = rng.integers(0, 17 * 31 * 63, n).astype(np.int32)

    def f(a, b, flat):  # unravel/ravel indices, truncating and flooring division and remainder
        # of negatives, shifts, popcount, leading zeros, clamps, wraparound multiply
        i, j, k = jnp.unravel_index(flat, (17, 31, 63))
        back = jnp.ravel_multi_index((k, j, i), (63, 31, 17), mode="clip")
        q1, r1 = a // b, a % b
        q2, r2 = lax.div(a, b), lax.rem(a, b)
        bits = lax.population_count(a) + lax.clz(jnp.abs(a) + 1)
        sh = jnp.right_shift(a, 3) ^ lax.shift_right_logical(a, 5) ^ jnp.left_shift(b, 7)
        wrap = a * np.int32(1664525) + np.int32(1013904223)
        return (back.astype(jnp.int32), q1, r1, q2, r2, bits, sh, wrap,
                jnp.clip(a, -1000, 1000) // 3)
    return f, [a, b, flat], {}


def make_w_bool_masks(quick):
    r, c = (2048, 2047) if not quick else (5, 7)
    rng = _rng(228)
    x = _f32(rng.standard_normal((r, c)))
    m = rng.uniform(size=(r, c)) < 0.3

    def f(x, m):  # masks as data: logic ops, any/all, counts, where with broadcast bools,
        # masked mean and max
        p = x > 0
        q = jnp.logical_xor(p, m) | (jnp.abs(x) > 2.5)
        rows_any, cols_all = jnp.any(q, axis=1), jnp.all(~q | m, axis=0)
        cnt = jnp.count_nonzero(q, axis=0).astype(jnp.int32)
        sel = jnp.where(rows_any[:, None] & ~cols_all[None, :], x, -x)
        mmean = jnp.sum(jnp.where(m, x, 0.0), axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1)
        mmax = jnp.max(jnp.where(m, x, -jnp.inf), axis=1)
        return q, rows_any, cols_all, cnt, sel, mmean, mmax
    return f, [x, m], {}


def make_w_f64_xent(quick):
    n, d, k = (512, 300, 1000) if not quick else (4, 5, 6)
    rng = _rng(229)
    x = rng.standard_normal((n, d))
    w = rng.standard_normal((d, k)) / math.sqrt(d)
    y = rng.integers(0, k, n).astype(np.int32)

    def step(x, w, y):  # double-precision logistic regression head: value_and_grad
        def loss(w):
            lg = x @ w
            return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(lg), y[:, None], 1)) + \
                1e-4 * jnp.sum(w * w)
        return jax.value_and_grad(loss)(w)
    return step, [x, w, y], {"x64": True, "tol": 1e-10}


def make_w_f64_elem(quick):
    n = 1 << 19 if not quick else 64
    rng = _rng(230)
    x = rng.uniform(0.01, 30.0, n)
    z = rng.standard_normal(n) * 2

    def f(x, z):  # f64 elementwise: erf, lgamma, log1p, expm1, atan2, cbrt, pow, sinh/cosh
        sp = jax.scipy.special
        return (sp.erf(z), sp.gammaln(x), jnp.log1p(x), jnp.expm1(z), jnp.arctan2(z, x),
                jnp.cbrt(z), jnp.power(x, 1.7), jnp.sinh(z) / jnp.cosh(z), jnp.tan(z * 0.7))
    return f, [x, z], {"x64": True, "tol": 1e-12}


def make_w_f16(quick):
    n, d = (4096, 768) if not quick else (5, 8)
    rng = _rng(231)
    x = rng.standard_normal((n, d)).astype(np.float16)
    g = (1 + 0.1 * rng.standard_normal(d)).astype(np.float16)
    w = (rng.standard_normal((d, 256)) / math.sqrt(d)).astype(np.float16)

    def f(x, g, w):  # half precision: a layer norm in f32, an f16 matmul, a GELU in f16
        x32 = x.astype(jnp.float32)
        mu = jnp.mean(x32, -1, keepdims=True)
        h = ((x32 - mu) * lax.rsqrt(jnp.var(x32, -1, keepdims=True) + 1e-5)).astype(jnp.float16)
        return jax.nn.gelu((h * g) @ w)
    return f, [x, g, w], {"tol": 1e-2}


def make_w_bf16_mlp(quick):
    b, d, h, c = (512, 1024, 1024, 10) if not quick else (8, 16, 24, 5)
    import ml_dtypes
    rng = _rng(232)
    bf = ml_dtypes.bfloat16
    x = rng.standard_normal((b, d)).astype(bf)
    y = rng.integers(0, c, b).astype(np.int32)
    w1 = (rng.standard_normal((d, h)) / math.sqrt(d)).astype(bf)
    w2 = (rng.standard_normal((h, h)) / math.sqrt(h)).astype(bf)
    w3 = (rng.standard_normal((h, c)) / math.sqrt(h)).astype(bf)

    def loss(p, x, y):  # bf16 matmuls and GELUs, the loss in f32
        w1, w2, w3 = p
        a = jax.nn.gelu(x @ w1)
        a = jax.nn.gelu(a @ w2)
        logits = (a @ w3).astype(jnp.float32)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    def f(w1, w2, w3, x, y):  # bf16 MLP forward and backward: the gradients in bf16
        return jax.value_and_grad(loss)((w1, w2, w3), x, y)
    return f, [w1, w2, w3, x, y], {"tol": 3e-2}


def make_w_f16_attention(quick):
    b, hh, s, d = (4, 8, 256, 64) if not quick else (1, 2, 9, 8)
    rng = _rng(233)
    q, k, v = (rng.standard_normal((b, hh, s, d)).astype(np.float16) for _ in range(3))

    def f(q, k, v):  # f16 attention: scores, softmax and the weighted sum all in f16
        sc = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.float16(math.sqrt(d))
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(sc, axis=-1), v)
    return f, [q, k, v], {"tol": 1e-2}


def make_w_f16_f32acc(quick):
    m, k, n = (2048, 1024, 1024) if not quick else (13, 16, 24)
    rng = _rng(234)
    x = rng.standard_normal((m, k)).astype(np.float16)
    w = (rng.standard_normal((k, n)) / math.sqrt(k)).astype(np.float16)
    b = _f32(0.1 * rng.standard_normal(n))

    def f(x, w, b):  # mixed precision: f16 operands, f32 products (preferred_element_type)
        h = jnp.dot(x, w, preferred_element_type=jnp.float32) + b
        return jax.nn.relu(h), jnp.sum(h * h, axis=-1)
    return f, [x, w, b], {"tol": 1e-4}


def make_w_random(quick):
    n = 1 << 20 if not quick else 64
    key = np.asarray(jax.random.key_data(jax.random.PRNGKey(1234)))

    def f(key):  # jax.random samplers: normal (erf_inv), truncated normal, gumbel, bernoulli,
        # a permutation (sort by random keys), categorical
        k = jax.random.wrap_key_data(key)
        k1, k2, k3, k4, k5 = jax.random.split(k, 5)
        return (jax.random.normal(k1, (n,)), jax.random.truncated_normal(k2, -2.0, 2.0, (n,)),
                jax.random.gumbel(k3, (n,)), jax.random.bernoulli(k4, 0.3, (n,)),
                jax.random.permutation(k5, 4099).astype(jnp.int32))
    return f, [key], {}


def make_w_bucketize(quick):
    n, e = (1 << 20, 1000) if not quick else (50, 7)
    rng = _rng(232)
    x = _f32(rng.standard_normal(n) * 2)
    edges = _f32(np.sort(rng.standard_normal(e) * 2))

    def f(x, edges):  # bucketize by searchsorted (left and right), digitize, a bucket histogram
        il = jnp.searchsorted(edges, x, side="left").astype(jnp.int32)
        ir = jnp.searchsorted(edges, x, side="right").astype(jnp.int32)
        hist = jnp.zeros(e + 1, jnp.int32).at[ir].add(1)
        return il, ir, jnp.digitize(x, edges).astype(jnp.int32), hist
    return f, [x, edges], {}


def make_w_quantile(quick):
    r, c = (512, 1001) if not quick else (3, 11)
    x = _f32(_rng(233).standard_normal((r, c)))

    def f(x):  # median, quantiles (linear interpolation) and a trimmed mean along rows
        qs = jnp.quantile(x, jnp.array([0.05, 0.25, 0.75, 0.95], jnp.float32), axis=-1)
        s = jnp.sort(x, axis=-1)
        trimmed = jnp.mean(s[:, c // 10: c - c // 10], axis=-1)
        return jnp.median(x, axis=-1), qs, trimmed
    return f, [x], {}


def make_w_pixel_shuffle(quick):
    n, hw, c, r = (8, 48, 64, 2) if not quick else (1, 4, 2, 2)
    rng = _rng(234)
    x = _f32(rng.standard_normal((n, hw, hw, c)))
    w = _f32(rng.standard_normal((3, 3, c, 3 * r * r)) / math.sqrt(9 * c))

    def f(x, w):  # ESPCN super-resolution: conv to 3 r^2 channels, depth_to_space, tanh
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = y.reshape(n, hw, hw, r, r, 3).transpose(0, 1, 3, 2, 4, 5).reshape(n, hw * r,
                                                                            hw * r, 3)
        return jnp.tanh(y)
    return f, [x, w], {}


def make_w_uint8(quick):
    n, hw, crop = (32, 256, 224) if not quick else (2, 9, 6)
    rng = _rng(235)
    img = rng.integers(0, 256, (n, hw, hw, 3)).astype(np.uint8)
    flip = rng.uniform(size=n) < 0.5
    mean = _f32([0.485, 0.456, 0.406])
    std = _f32([0.229, 0.224, 0.225])

    def f(img, flip, mean, std):  # input pipeline: center crop, random flip, to f32, normalize,
        # to NCHW; and a uint8 re-quantization with saturation. The scale 1.25 keeps x * s - 20
        # exact: XLA's CPU backend contracts it into a fused multiply-add (one rounding, not
        # HLO's two), which moves values that land near a .5 to the other integer otherwise
        o = (hw - crop) // 2
        x = img[:, o:o + crop, o:o + crop, :]
        x = jnp.where(flip[:, None, None, None], x[:, :, ::-1, :], x)
        xf = (x.astype(jnp.float32) / 255.0 - mean) / std
        q = jnp.clip(jnp.round(x.astype(jnp.float32) * 1.25 - 20), 0, 255).astype(jnp.uint8)
        return xf.transpose(0, 3, 1, 2), q
    return f, [img, flip, mean, std], {}


def make_w_argmin_cooc(quick):
    n, k, c = (200000, 5, 8) if not quick else (40, 3, 4)
    rng = _rng(238)
    d = _f32(rng.permutation(n * k).reshape(n, k) / (n * k))
    lab = rng.integers(0, c, n).astype(np.int32)

    def f(d, lab):  # nearest of 5 centroids by argmin over a short minor axis, and the
        # cluster x label co-occurrence counts as an s32 one-hot product (5 x 8 over 200000)
        a = jnp.argmin(d, axis=-1)
        cooc = jnp.einsum("nk,nc->kc", jax.nn.one_hot(a, k, dtype=jnp.int32),
                          jax.nn.one_hot(lab, c, dtype=jnp.int32))
        return a.astype(jnp.int32), cooc
    return f, [d, lab], {}


def make_w_uint16_nchw(quick):
    n, hw, crop = (16, 256, 224) if not quick else (2, 9, 6)
    rng = _rng(239)
    img = rng.integers(0, 65536, (n, 3, hw, hw)).astype(np.uint16)
    scale = _f32([1 / 65535.0, 1 / 60000.0, 1 / 50000.0])

    def f(img, scale):  # 16-bit NCHW: center crop, vertical and horizontal flip, per-channel
        # scale to f32 (the flips reverse the last dim and a row dim)
        o = (hw - crop) // 2
        x = img[:, :, o:o + crop, o:o + crop][:, :, ::-1, ::-1]
        return x.astype(jnp.float32) * scale[None, :, None, None]
    return f, [img, scale], {}


def make_w_int8_dequant(quick):
    n, hw, crop, ch = (64, 96, 80, 4) if not quick else (2, 9, 6, 4)
    rng = _rng(240)
    img = rng.integers(-128, 128, (n, hw, hw, ch)).astype(np.int8)
    flip = rng.uniform(size=n) < 0.5
    scale = _f32(rng.uniform(0.01, 0.02, ch))

    def f(img, flip, scale):  # s8 NHWC with 4 channels: crop, per-example horizontal flip,
        # dequantize per channel
        o = (hw - crop) // 2
        x = img[:, o:o + crop, o:o + crop, :]
        x = jnp.where(flip[:, None, None, None], x[:, :, ::-1, :], x)
        return x.astype(jnp.float32) * scale
    return f, [img, flip, scale], {}


def make_w_triplet(quick):
    n, d, k = (1024, 128, 64) if not quick else (8, 3, 4)
    rng = _rng(236)
    emb = _f32(rng.standard_normal((n, d)))
    lab = (np.arange(n) % k).astype(np.int32)

    def step(emb, lab):  # batch-hard triplet loss: pairwise distances, hardest positive and
        # negative by masked max/min, value_and_grad
        def loss(e):
            e = e / jnp.linalg.norm(e, axis=-1, keepdims=True)
            sq = jnp.sum(e * e, -1)
            dist = jnp.sqrt(jnp.maximum(sq[:, None] + sq[None] - 2 * e @ e.T, 1e-12))
            same = lab[:, None] == lab[None]
            eye = jnp.eye(n, dtype=bool)
            hp = jnp.max(jnp.where(same & ~eye, dist, 0.0), axis=1)
            hn = jnp.min(jnp.where(same, jnp.inf, dist), axis=1)
            return jnp.mean(jax.nn.relu(hp - hn + 0.2))
        return jax.value_and_grad(loss)(emb)
    return step, [emb, lab], {"tol": 1e-3}


def make_w_nerf(quick):
    rays, smp, nf = (4096, 128, 10) if not quick else (3, 5, 2)
    rng = _rng(237)
    pts = _f32(rng.uniform(-1, 1, (rays, smp, 3)))
    tv = _f32(np.sort(rng.uniform(2, 6, (rays, smp)), axis=-1))
    w1 = _f32(rng.standard_normal((3 + 6 * nf, 64)) / 6)
    w2 = _f32(rng.standard_normal((64, 4)) / 8)

    def f(pts, tv, w1, w2):  # NeRF: positional encoding, a small MLP, alpha compositing with an
        # exclusive cumprod of transmittance
        freqs = 2.0 ** jnp.arange(nf, dtype=jnp.float32)
        ang = pts[..., None] * freqs
        enc = jnp.concatenate([pts, jnp.sin(ang).reshape(rays, smp, -1),
                               jnp.cos(ang).reshape(rays, smp, -1)], -1)
        out = jax.nn.relu(enc @ w1) @ w2
        sigma, rgb = jax.nn.relu(out[..., 0]), jax.nn.sigmoid(out[..., 1:])
        delta = jnp.concatenate([jnp.diff(tv, axis=-1), jnp.full((rays, 1), 1e10)], -1)
        alpha = 1 - jnp.exp(-sigma * delta)
        trans = jnp.cumprod(jnp.concatenate([jnp.ones((rays, 1)), 1 - alpha + 1e-10], -1),
                            axis=-1)[:, :-1]
        wgt = alpha * trans
        return jnp.sum(wgt[..., None] * rgb, axis=1), jnp.sum(wgt * tv, axis=-1)
    return f, [pts, tv, w1, w2], {}


def make_w_greedy(quick):
    b, v, d, steps = (16, 5003, 256, 32) if not quick else (2, 11, 4, 5)
    rng = _rng(238)
    emb = _f32(rng.standard_normal((v, d)) * 0.5)
    wo = _f32(rng.standard_normal((d, v)) / math.sqrt(d))
    bias = _f32(rng.permutation(v) * 0.1)  # one clear winner per row: integer results exact
    start = rng.integers(0, v, b).astype(np.int32)
    eos = np.int32(int(np.argsort(bias)[-3]))

    def f(emb, wo, bias, start):  # a greedy decoder: while_loop until every row emitted eos
        # or the step limit, tokens written by dynamic_update_slice
        def cond(s):
            i, _, done, _ = s
            return (i < steps) & ~jnp.all(done)

        def body(s):
            i, tok, done, out = s
            h = jnp.tanh(emb[tok])
            nxt = jnp.argmax(h @ wo + bias + 0.5 * (jnp.arange(v) == (tok[:, None] * 7) % v),
                             axis=-1).astype(jnp.int32)
            nxt = jnp.where(done, eos, nxt)
            out = lax.dynamic_update_slice(out, nxt[:, None], (0, i))
            return i + 1, nxt, done | (nxt == eos), out
        i, _, done, out = lax.while_loop(
            cond, body, (jnp.int32(0), start, jnp.zeros(b, bool), jnp.zeros((b, steps), jnp.int32)))
        return i, done, out
    return f, [emb, wo, bias, start], {}


def wild_case_list(quick):
    """The ninth group, each name starting with "w ". Sizes are those of a full run."""
    q = quick
    return [("w bigru masked lengths value_and_grad T50 b32 128->192", lambda: make_w_bigru(q)),
            ("w lstm 2-layer forward T40 b24 96->160", lambda: make_w_lstm2(q)),
            ("w optax.ctc_loss value_and_grad b16 T100 V40 L30", lambda: make_w_ctc(q)),
            ("w viterbi max-plus scan + backtrace T128 b32 S48", lambda: make_w_viterbi(q)),
            ("w sepconv dw5x5s2+pw+bn value_and_grad 8x63x63x48", lambda: make_w_sepconv(q)),
            ("w dilated3 conv NCHW value_and_grad 4x32x45x45", lambda: make_w_dilated_grad(q)),
            ("w conv_transpose s3 k5 NHWC 4x21x21x32->24", lambda: make_w_conv_transpose(q)),
            ("w aspp rates 1/6/12 + image pool NHWC 2x33x33x64", lambda: make_w_aspp(q)),
            ("w avgpool excl-pad + maxpool NCHW value_and_grad 8x64x37",
             lambda: make_w_pool_nchw(q)),
            ("w resize antialias/lanczos3/bicubic NHWC 4x96x96x16", lambda: make_w_resize(q)),
            ("w resize bilinear 45x60->64x80 value_and_grad", lambda: make_w_resize_grad(q)),
            ("w reverse/int/bool scans 512x3000", lambda: make_w_scans(q)),
            ("w cumsum axis0 + reverse cumprod f64 + int8 cummax/cummin + cumsum grad 1000x777",
             lambda: make_w_scans_axes(q)),
            ("w elman rnn fori_loop + dynamic_update_slice T64 b16 64->128",
             lambda: make_w_rnn_while(q)),
            ("w lexsort + argsort axis0 desc 4096x37", lambda: make_w_lexsort(q)),
            ("w top_k k100 of 32003 b64", lambda: make_w_topk_large(q)),
            ("w argmax confusion matrix 100000x10", lambda: make_w_confusion(q)),
            ("w einsum 3-operand + trace/diag b16", lambda: make_w_einsum3(q)),
            ("w per-example grads vmap(grad) cnn 32x28x28", lambda: make_w_per_example_cnn(q)),
            ("w per-example clipped grads vmap(grad) conv1d 16x400x3",
             lambda: make_w_per_example_conv1d(q)),
            ("w alibi causal attention value_and_grad b4 h12 s200", lambda: make_w_alibi(q)),
            ("w sliding-window rotary attention b2 h8 s512 w64", lambda: make_w_sliding(q)),
            ("w switch moe top-1 gather/scatter-add t2048 e16", lambda: make_w_switch_moe(q)),
            ("w kl/js/masked logsumexp value_and_grad 1024x5000", lambda: make_w_divergence(q)),
            ("w f64 kl/js/masked logsumexp value_and_grad 256x1001",
             lambda: make_w_divergence(q, (256, 1001), f64=True)),
            ("w kl mean value_and_grad 512x3001", lambda: make_w_kl_mean(q)),
            ("w wav2vec conv k10s5 + groupnorm + conv k3s2 4x16000", lambda: make_w_audio(q)),
            ("w embedding bag weighted sum + max value_and_grad", lambda: make_w_embedding_bag(q)),
            ("w embedding token + position sum + layernorm b8 s512 d256",
             lambda: make_w_embed_ln(q)),
            ("w embedding clip-gather * sqrt(d) + dropout mask + tanh 16384x128",
             lambda: make_w_embed_scale_mask(q)),
            ("w optax clip+adam+decay mask+cosine schedule (donated)",
             lambda: make_w_optax_sched(q)),
            ("w special functions gammaln/digamma/erfinv/i0e/gammainc 1M",
             lambda: make_w_special(q)),
            ("w activation zoo value_and_grad 2M", lambda: make_w_activations(q)),
            ("w int32 index arithmetic 1M", lambda: make_w_index_arith(q)),
            ("w boolean masks 2048x2047", lambda: make_w_bool_masks(q)),
            ("w f64 softmax regression value_and_grad 512x300x1000",
             lambda: make_w_f64_xent(q)),
            ("w f64 elementwise erf/lgamma/atan2/cbrt/pow 512K", lambda: make_w_f64_elem(q)),
            ("w f16 layernorm + matmul + gelu 4096x768x256", lambda: make_w_f16(q)),
            ("w bf16 mlp value_and_grad 512-1024-1024-10", lambda: make_w_bf16_mlp(q)),
            ("w f16 attention softmax b4 h8 s256 d64", lambda: make_w_f16_attention(q)),
            ("w f16 matmul f32 accumulate + bias relu 2048x1024x1024",
             lambda: make_w_f16_f32acc(q)),
            ("w jax.random normal/trunc/gumbel/bernoulli/permutation 1M",
             lambda: make_w_random(q)),
            ("w searchsorted/digitize bucketize 1M into 1000", lambda: make_w_bucketize(q)),
            ("w median/quantile/trimmed mean 512x1001", lambda: make_w_quantile(q)),
            ("w pixel shuffle conv + depth_to_space 8x48x48x64", lambda: make_w_pixel_shuffle(q)),
            ("w uint8 crop/flip/normalize 32x256x256x3", lambda: make_w_uint8(q)),
            ("w argmin over 5 + s32 one-hot co-occurrence 200000", lambda: make_w_argmin_cooc(q)),
            ("w uint16 NCHW crop + 2 flips + scale 16x3x256x256", lambda: make_w_uint16_nchw(q)),
            ("w int8 NHWC crop/flip/dequantize 64x96x96x4", lambda: make_w_int8_dequant(q)),
            ("w batch-hard triplet loss value_and_grad 1024x128", lambda: make_w_triplet(q)),
            ("w nerf encoding + mlp + volume render 4096x128", lambda: make_w_nerf(q)),
            ("w greedy decode while_loop eos b16 V5003", lambda: make_w_greedy(q))]


def group_cases(group, quick):
    return ((case_list(quick) if group in ("suite", "all") else []) +
            (extra_case_list(quick) if group in ("extra", "all") else []) +
            (utils_case_list(quick) if group in ("utils", "all") else []) +
            (models_case_list(quick) if group in ("models", "all") else []) +
            (vision_nlp_case_list(quick) if group in ("vision_nlp", "all") else []) +
            (train_case_list(quick) if group in ("train", "all") else []) +
            (linalg_case_list(quick) if group in ("linalg", "all") else []) +
            (fft_case_list(quick) if group in ("fft", "all") else []) +
            (wild_case_list(quick) if group in ("wild", "all") else []))


# ---- timing and checking ------------------------------------------------------------------------

class JaxSide:
    """One jitted program and its device inputs, timed in batches (one batch per round)."""

    def __init__(self, fn, args, donate, chain):
        self.f = jax.jit(fn, donate_argnums=donate)
        self.args = args
        self.donate = donate
        self.chain = chain
        self.dev = [jax.device_put(a) for a in args]
        self.warm = 3

    def _call_timed(self):
        if self.donate and not self.chain:
            self.dev = [jax.device_put(a) for a in self.args]  # fresh buffers, outside the time
        t0 = time.perf_counter()
        out = self.f(*self.dev)
        jax.block_until_ready(out)
        dt = time.perf_counter() - t0
        if self.chain:
            self.dev = self.chain(list(jax.tree_util.tree_leaves(out)), self.dev)
        return dt

    def batch(self, n):
        for _ in range(self.warm):
            self._call_timed()
        self.warm = 1
        return [self._call_timed() * 1e3 for _ in range(n)]


def run_optitpu(exe, hlo, inputs, n, tmp, env):
    """One `optitpu run` of 3 profiled warm-up runs and n timed ones: (the n times, parsed JSON,
    trace path) or raises."""
    trace = os.path.join(tmp, "trace.json")
    outdir = os.path.join(tmp, "out")
    cmd = [exe, "run", hlo, "--repeat", str(n), "--warmup", "3", "--profile", "warmup", "--json",
           "--output-dir", outdir, "--trace", trace]
    for i, path in enumerate(inputs):
        cmd += ["--input", f"{i}={path}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise RuntimeError(" | ".join(msg[-3:]) if msg else f"exit status {r.returncode}")
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1]
    js = json.loads(line)
    return js["run_ms"], js, trace


def kernel_kinds(trace_path):
    """From one invocation's Chrome trace: the distinct kernels by kind, and each kind's share of
    the kernels' total time (the trace's category: fusion-native, dot, convolution, ...)."""
    with open(trace_path) as f:
        d = json.load(f)
    ev = d["traceEvents"] if isinstance(d, dict) else d
    skip = {"compile-pass", "compile", "codegen", "alloc", "free", "reserve", None}
    kinds, dur = {}, {}
    for e in ev:
        cat = e.get("cat")
        if e.get("ph") == "X" and cat not in skip:
            kinds.setdefault(cat, set()).add(e.get("name"))
            dur[cat] = dur.get(cat, 0.0) + float(e.get("dur", 0.0))
    out = {"native": 0, "interp": 0, "fast": 0, "other": 0}
    for cat, names in kinds.items():
        key = {"fusion-native": "native", "fusion-interp": "interp",
               "fusion-fast": "fast"}.get(cat, "other")
        out[key] += len(names)
    total = sum(dur.values())
    out["time_share"] = {c: round(t / total, 3) for c, t in
                         sorted(dur.items(), key=lambda kv: -kv[1])} if total > 0 else {}
    return out


def compare(outs, refs, tol):
    """(max abs error, worst normwise relative error, reason or None) over all outputs."""
    if len(outs) != len(refs):
        return None, None, f"{len(outs)} outputs, JAX has {len(refs)}"
    worst_abs = worst_rel = 0.0
    for k, (o, r) in enumerate(zip(outs, refs)):
        if o.shape != r.shape:
            return None, None, f"output {k}: shape {o.shape}, JAX {r.shape}"
        if r.dtype.kind in "iub":
            bad = int(np.count_nonzero(o != r))
            if bad:
                return None, None, f"output {k}: {bad} of {r.size} integer elements differ"
            continue
        wide = np.complex128 if r.dtype.kind == "c" else np.float64
        o64, r64 = o.astype(wide), r.astype(wide)
        fo, fr = np.isfinite(o64), np.isfinite(r64)
        nf_o, nf_r = o64[~fr], r64[~fr]
        same_nonfinite = np.all((nf_o == nf_r) | (np.isnan(nf_o) & np.isnan(nf_r)))
        if np.any(fo != fr) or not same_nonfinite:
            return None, None, f"output {k}: NaN/Inf where JAX has none (or the other way)"
        diff = np.abs(o64[fr] - r64[fr])
        if diff.size == 0:
            continue
        ab = float(diff.max())
        scale = float(np.abs(r64[fr]).max())
        rel = ab / scale if scale > 0 else (0.0 if ab == 0 else math.inf)
        worst_abs, worst_rel = max(worst_abs, ab), max(worst_rel, rel)
        if rel > tol:
            return ab, worst_rel, (f"output {k} {r.dtype}{list(r.shape)}: max abs error {ab:.3g}"
                                   f" = {rel:.3g} of max |jax| {scale:.3g}, tolerance {tol:g}")
    return worst_abs, worst_rel, None


def run_case(name, builder, a, tmp, env):
    fn, args, opts = builder()
    if not opts.get("x64"):
        return run_case_in(name, fn, args, opts, a, tmp, env)
    with jax.enable_x64(True):  # f64 programs: lowered, run and timed with 64-bit types on
        return run_case_in(name, fn, args, opts, a, tmp, env)


def npy_for_optitpu(arr):
    """bf16 travels as its u16 bit patterns (what `optitpu run` reads and writes for bf16)."""
    arr = np.asarray(arr)
    return arr.view(np.uint16) if arr.dtype.name == "bfloat16" else arr


def run_case_in(name, fn, args, opts, a, tmp, env):
    row = {"case": name, "xla_ms": None, "optitpu_ms": None, "ratio": None, "max_abs": None,
           "rel": None, "verdict": "FAIL", "reason": None, "kernels": None}
    donate = opts.get("donate", ())
    tol = opts.get("tol", 1e-4) * a.tol_scale
    d = tempfile.mkdtemp(prefix="case_", dir=tmp)
    lowered = jax.jit(fn, donate_argnums=donate).lower(*args)
    try:  # jit drops unused arguments from the module's parameters; these are the ones kept
        kept = sorted(lowered._lowering.compile_args["kept_var_idx"])
    except (AttributeError, KeyError, TypeError):  # private API gone: keep every argument
        lowered = jax.jit(fn, donate_argnums=donate, keep_unused=True).lower(*args)
        kept = list(range(len(args)))
    hlo_path = os.path.join(d, "module.hlo")
    with open(hlo_path, "w") as f:
        f.write(lowered.as_text(dialect="hlo"))
    inputs = []  # parameter K of the module <- inputs[K]
    for i in kept:
        p = os.path.join(d, f"in_{i}.npy")
        np.save(p, npy_for_optitpu(args[i]))
        inputs.append(p)
    refs = [np.asarray(r) for r in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]

    js_side = JaxSide(fn, args, donate, opts.get("chain"))
    per_round = max(1, -(-a.repeat // a.rounds))
    xt, ot = [], []
    js = trace = None
    for r in range(a.rounds):
        order = ("jax", "optitpu") if r % 2 == 0 else ("optitpu", "jax")
        for side in order:
            if side == "jax":
                xt += js_side.batch(per_round)
            elif row["reason"] is None:
                try:
                    t, js, trace = run_optitpu(a.optitpu, hlo_path, inputs, per_round, d, env)
                    ot += t
                except RuntimeError as e:
                    row["reason"] = f"optitpu run: {e}"
    row["xla_ms"] = float(np.median(xt))
    row["hlo"] = hlo_path
    if row["reason"] is not None:
        return row
    row["optitpu_ms"] = float(np.median(ot))
    row["ratio"] = row["xla_ms"] / row["optitpu_ms"] if row["optitpu_ms"] > 0 else None
    row["kernels"] = kernel_kinds(trace)
    row["kernels"]["total"] = js.get("kernels")
    outs = []
    for o, r in zip(js["outputs"], refs):
        v = np.load(o["file"])
        outs.append(v.view(r.dtype) if r.dtype.name == "bfloat16" and v.dtype == np.uint16
                    else v)
    ab, rel, why = compare(outs, refs, tol)
    row["max_abs"], row["rel"], row["tol"] = ab, rel, tol
    if why is not None:
        row["reason"] = f"wrong result: {why}"
    else:
        row["verdict"] = "ok"
    return row


def main():
    global np, jax, jnp, lax
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--optitpu", default=os.path.join(ROOT, "build", "optitpu"))
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="threads for both sides (default: the CPU count)")
    ap.add_argument("--repeat", type=int, default=30, help="timed calls per side, all rounds")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the two sides")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--group",
                    choices=("suite", "extra", "utils", "models", "vision_nlp", "train", "linalg",
                             "fft", "wild", "all"),
                    default="suite",
                    help="suite: the programs above (default); extra: the second group "
                    "(names starting with 'x '); utils: the third ('u '); models: the fourth "
                    "('m '); vision_nlp: the fifth ('v '); train: the sixth ('t '); linalg: the "
                    "seventh ('l '); fft: the eighth ('f '); wild: the ninth ('w '); all: every group")
    ap.add_argument("--only", metavar="TEXT", help="run only the cases whose name contains TEXT")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--json", action="store_true", help="one JSON object per case")
    ap.add_argument("--tol-scale", type=float, default=1.0, help="multiply every tolerance")
    ap.add_argument("--keep", action="store_true", help="keep the temporary HLO and .npy files")
    a = ap.parse_args()
    if a.threads < 1 or a.repeat < 1 or a.rounds < 1:
        ap.error("--threads, --repeat and --rounds must be >= 1")

    # Both sides' thread counts, fixed before jax is imported (its CPU client reads them once).
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["PJRT_NPROC"] = str(a.threads)
    if a.threads == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false").strip()
    env = dict(os.environ, OPTITPU_THREADS=str(a.threads))

    if a.list:
        for name, _ in group_cases(a.group, a.quick):
            print(name)
        return
    try:
        import numpy
        import jax as jax_
        import jax.numpy as jnp_
        from jax import lax as lax_
    except ImportError:
        sys.exit("xla_compare: jax or numpy is missing (python3 -m venv /work/venv-peers && "
                 "/work/venv-peers/bin/pip install jax optax numpy)")
    np, jax, jnp, lax = numpy, jax_, jnp_, lax_
    if not os.access(a.optitpu, os.X_OK):
        sys.exit(f"xla_compare: {a.optitpu} is not an executable (build target optitpu_cli)")

    cases = [(n, b) for n, b in group_cases(a.group, a.quick) if a.only is None or a.only in n]
    tmp = tempfile.mkdtemp(prefix="xla_compare_")
    load0 = os.getloadavg()
    label = (f"jax {jax.__version__} CPU, {a.threads} threads each (XLA: PJRT_NPROC="
             f"{a.threads}{' + --xla_cpu_multi_thread_eigen=false' if a.threads == 1 else ''}; "
             f"optitpu: OPTITPU_THREADS={a.threads}); {os.cpu_count()} CPUs")
    if not a.json:
        print(f"# {label}; load {load0[0]:.1f} at start")
        print(f"# median ms over {a.repeat} calls per side in {a.rounds} alternating rounds; "
              "ratio = XLA / optitpu (> 1: optitpu faster); rel = max abs error / max |jax|")
        print(f"{'case':52} {'optitpu ms':>11} {'XLA ms':>10} {'ratio':>7} {'max abs':>9} "
              f"{'rel':>9} {'verdict':7} {'kernels n/i/f/o':>16}  optitpu time by kind")
    rows = []
    for name, builder in cases:
        try:
            row = run_case(name, builder, a, tmp, env)
        except Exception as e:  # a program JAX itself cannot build is reported, not dropped
            row = {"case": name, "xla_ms": None, "optitpu_ms": None, "ratio": None,
                   "max_abs": None, "rel": None, "verdict": "FAIL", "kernels": None,
                   "reason": f"jax side: {type(e).__name__}: {e}"}
        rows.append(row)
        if a.json:
            print(json.dumps({
                "bench": "xla_compare", "case": name, "metric": "ms", "value": row["optitpu_ms"],
                "baseline": f"jax.jit (XLA CPU, {a.threads} threads)",
                "baseline_value": row["xla_ms"], "ratio": row["ratio"],
                "max_abs_err": row["max_abs"], "rel_err": row["rel"],
                "verdict": row["verdict"], "reason": row["reason"], "kernels": row["kernels"],
                "threads": a.threads, "peer": label}), flush=True)
        else:
            def fmt(v, w, spec):
                return f"{v:{w}{spec}}" if v is not None else f"{'-':>{w}}"
            k = row["kernels"]
            ks = (f"{k['native']}/{k['interp']}/{k['fast']}/{k['other']}" if k else "-")
            top = ""
            if k and k["time_share"]:
                top = " ".join(f"{c} {100 * v:.0f}%" for c, v in
                               list(k["time_share"].items())[:2])
            print(f"{name:52} {fmt(row['optitpu_ms'], 11, '.3f')} {fmt(row['xla_ms'], 10, '.3f')} "
                  f"{fmt(row['ratio'], 7, '.3f')} {fmt(row['max_abs'], 9, '.2e')} "
                  f"{fmt(row['rel'], 9, '.2e')} {row['verdict']:7} {ks:>16}  {top}", flush=True)
            if row["reason"]:
                print(f"    FAIL: {row['reason']}" + (f" (module {row['hlo']})" if a.keep and
                                                      row.get("hlo") else ""), flush=True)

    ok = [r for r in rows if r["verdict"] == "ok" and r["ratio"]]
    gm = math.exp(sum(math.log(r["ratio"]) for r in ok) / len(ok)) if ok else None
    ahead = sum(1 for r in ok if r["ratio"] >= 1.0)
    load1 = os.getloadavg()
    if a.json:
        print(json.dumps({"bench": "xla_compare", "case": "geomean", "metric": "ratio",
                          "value": gm, "baseline": f"jax.jit (XLA CPU, {a.threads} threads)",
                          "baseline_value": 1.0, "ratio": gm, "cases": len(rows),
                          "passed": len(ok), "at_or_above_1": ahead,
                          "failed": [r["case"] for r in rows if r["verdict"] != "ok"],
                          "load": [load0[0], load1[0]], "peer": label}))
    else:
        fails = len(rows) - len(ok)
        print(f"# geomean ratio {gm:.3f} over the {len(ok)} passing cases; {ahead} of them at "
              f">= 1.0; {fails} FAIL; load {load0[0]:.1f} -> {load1[0]:.1f}"
              if gm is not None else f"# no passing case; {fails} FAIL")
    if not a.keep:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"# files kept in {tmp}", file=sys.stderr)


if __name__ == "__main__":
    main()
