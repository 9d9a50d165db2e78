/* The fast window kernels (src/exec/fast_window.c: reduce-window and select-and-scatter) against
 * their reference kernels, bit for bit: random ranks, shapes and windows (strides, overlapping
 * windows, negative and positive padding, base and window dilation, reversal), f32 and f64, every
 * covered computation (add/max/min reducers, GE/GT/LE/LT selects, operands in either order),
 * inputs full of ties, NaNs (quiet and signalling, with payloads), infinities, signed zeros and
 * subnormals, under FTZ/DAZ and IEEE modes, on pools of 1, 2, 3 and 8 threads; prefix scans
 * (cumsum, cumprod, cummax, cummin) the same way. Then the pooling
 * layouts a conv net uses (NHWC and NCHW, 2x2 stride 2 and overlapping 3x3 stride 2) through the
 * runtime at sizes that split over the pool, and the computations the kernels leave to the
 * reference. */
#include "exec/kernels.h"
#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#include <float.h>

static uint64_t g_rng = 0x3a11;

static uint64_t next_u64(void) {
    return ot_test_splitmix64(&g_rng);
}
static int64_t rnd(int64_t lo, int64_t hi) { /* [lo, hi] */
    return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1));
}

static ot_threadpool *g_pools[4];
/* Leave NaNs out of fill_window_values: the kernels' vector paths run only on NaN-free windows
 * (a chunk holding a NaN is folded again one element at a time). */
static bool g_no_nan;

/* Small integers (many ties, both zeros) with about one element in five special: infinities,
 * subnormals of either sign, NaNs quiet or signalling, either sign, with payloads. */
static void fill_window_values(ot_tensor *t) {
    int64_t n = ot_shape_numel_unchecked(&t->shape);
    bool f32 = t->shape.dtype == OT_F32;
    if (!f32 && t->shape.dtype != OT_F64) { /* integers: small values, many ties */
        for (int64_t e = 0; e < n; e++) {
            uint64_t v = (uint64_t)rnd(-3, 3);
            memcpy((char *)t->data + e * (int64_t)ot_dtype_size(t->shape.dtype), &v,
                   ot_dtype_size(t->shape.dtype));
        }
        return;
    }
    for (int64_t e = 0; e < n; e++) {
        int k = (int)rnd(0, 39);
        double v = (double)rnd(-3, 3) * 0.5;
        if (k == 0) v = INFINITY;
        if (k == 1) v = -INFINITY;
        if (k == 2 || k == 3) v = -0.0;
        if (k == 4) v = (f32 ? FLT_MIN : DBL_MIN) * 0.25;
        if (k == 5) v = -(f32 ? FLT_MIN : DBL_MIN) * 0.75;
        if (k == 6) v = 1e-3 * (double)rnd(1, 100);
        if (k >= 7 && k <= 9 && !g_no_nan) { /* NaN: 7 quiet, 8 signalling, 9 negative quiet */
            uint64_t pay = next_u64() & 0xffff;
            if (f32) {
                uint32_t u = 0x7f800000u | (uint32_t)(pay + 1) | (k != 8 ? 0x400000u : 0) |
                             (k == 9 ? 0x80000000u : 0);
                memcpy((float *)t->data + e, &u, 4);
            } else {
                uint64_t u = 0x7ff0000000000000ull | (pay + 1) | (k != 8 ? 1ull << 51 : 0) |
                             (k == 9 ? 1ull << 63 : 0);
                memcpy((double *)t->data + e, &u, 8);
            }
            continue;
        }
        if (f32)
            ((float *)t->data)[e] = (float)v;
        else
            ((double *)t->data)[e] = v;
    }
}

/* op(p0, p1) or op(p1, p0) over scalars of t; compare when op is OT_OP_COMPARE. */
static ot_computation *binary_comp(ot_module *m, const char *name, ot_opcode op, ot_dtype t,
                                   bool swap, ot_cmp_dir dir) {
    ot_computation *f = ot_module_add_computation(m, name);
    ot_instr *a = ot_build_parameter(f, 0, ot_shape_scalar(t), "a");
    ot_instr *b = ot_build_parameter(f, 1, ot_shape_scalar(t), "b");
    ot_instr *x = swap ? b : a, *y = swap ? a : b;
    ot_instr *r = op == OT_OP_COMPARE ? ot_build_compare(f, x, y, dir, OT_CMP_TYPE_DEFAULT)
                                      : ot_build_binary(f, op, x, y);
    ot_computation_set_root(f, r);
    return f;
}

/* A random window over dims[r] with a non-empty output; out receives the output dims. */
static void random_window(int r, const int64_t *dims, ot_window *w, int64_t *out) {
    for (;;) {
        memset(w, 0, sizeof *w);
        w->rank = r;
        bool ok = true;
        for (int d = 0; d < r; d++) {
            ot_window_dim *wd = &w->dims[d];
            wd->size = rnd(1, 4);
            wd->stride = rnd(1, 3);
            wd->pad_lo = rnd(0, 5) == 0 ? -1 : rnd(0, 2);
            wd->pad_hi = rnd(0, 5) == 0 ? -1 : rnd(0, 2);
            wd->window_dilation = rnd(0, 4) == 0 ? 2 : 1;
            wd->base_dilation = rnd(0, 5) == 0 ? 2 : 1;
            wd->reversal = rnd(0, 7) == 0;
            int64_t base = (dims[d] - 1) * wd->base_dilation + 1;
            int64_t padded = base + wd->pad_lo + wd->pad_hi;
            int64_t win = (wd->size - 1) * wd->window_dilation + 1;
            if (padded < win) {
                ok = false;
                break;
            }
            out[d] = (padded - win) / wd->stride + 1;
        }
        if (ok) return;
    }
}

static bool bits_equal(const ot_tensor *a, const ot_tensor *b) {
    return a->nbytes == b->nbytes && (a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes));
}

/* Runs root (of shape osh) over args with the reference kernel, then the fast kernel on each
 * pool; every fast result must equal the reference bit for bit and come from the fast kernel. */
static bool check_kernel(const ot_instr *root, const ot_shape *osh, const ot_tensor *args,
                         int nargs, bool keep_denormals, const char *what) {
    ot_eval_options eo = ot_eval_options_default();
    eo.keep_denormals = keep_denormals;
    void *in[4];
    ex_leaf ins[4];
    for (int k = 0; k < nargs; k++) {
        in[k] = args[k].data;
        ins[k] = (ex_leaf){&args[k].shape, (int64_t)args[k].nbytes};
    }
    ot_tensor ref;
    if (ot_tensor_alloc(&ref, osh) != OT_OK) return false;
    ex_leaf ol = {osh, (int64_t)ref.nbytes};
    void *out[1] = {ref.data};
    ex_kernel_ctx c;
    ex_kernel_ctx_init(&c, g_pools[0], &eo, true);
    bool fast = true, ok = true;
    ot_status st = ex_kernel_run(&c, root, what, nargs, in, ins, 1, out, &ol, &fast);
    ex_kernel_ctx_release(&c);
    if (st != OT_OK || fast) {
        fprintf(stderr, "%s: reference kernel: %s\n", what, st ? ot_last_error() : "ran fast");
        ot_tensor_release(&ref);
        return false;
    }
    for (int p = 0; p < 4 && ok; p++) {
        ot_tensor got;
        if (ot_tensor_alloc(&got, osh) != OT_OK) {
            ok = false;
            break;
        }
        memset(got.data, 0xa5, got.nbytes); /* every element must be written */
        out[0] = got.data;
        ex_kernel_ctx_init(&c, g_pools[p], &eo, false);
        st = ex_kernel_run(&c, root, what, nargs, in, ins, 1, out, &ol, &fast);
        ex_kernel_ctx_release(&c);
        if (st != OT_OK || !fast) {
            fprintf(stderr, "%s: fast kernel: %s\n", what, st ? ot_last_error() : "did not run");
            ok = false;
        } else if (!bits_equal(&got, &ref)) {
            size_t es = ot_dtype_size(osh->dtype);
            for (size_t q = 0; q < ref.nbytes / es; q++) {
                uint64_t a = 0, b = 0;
                memcpy(&a, (char *)got.data + q * es, es);
                memcpy(&b, (char *)ref.data + q * es, es);
                if (a != b) {
                    fprintf(stderr, "%s (%d threads, %s): element %zu fast %llx reference %llx\n",
                            what, p + 1, keep_denormals ? "IEEE" : "FTZ", q, (unsigned long long)a,
                            (unsigned long long)b);
                    break;
                }
            }
            ok = false;
        }
        ot_tensor_release(&got);
    }
    ot_tensor_release(&ref);
    return ok;
}

static void random_dims(int r, int64_t *dims) {
    for (int d = 0; d < r; d++) dims[d] = rnd(1, 9);
    if (rnd(0, 3) == 0) dims[r - 1] = rnd(10, 40);
    if (rnd(0, 15) == 0) dims[r - 1] = rnd(300, 600); /* rows longer than one chunk */
}

static void random_init(ot_tensor *t, ot_opcode op) {
    fill_window_values(t);
    if (op == OT_OP_MAXIMUM && rnd(0, 1)) {
        if (t->shape.dtype == OT_F32)
            *(float *)t->data = -INFINITY;
        else
            *(double *)t->data = -INFINITY;
    }
}

/* A module whose entry is reduce-window(x, init) of dtype t over dims (rank r) with window w and
 * the binary reducer op (operands swapped when swap), and its two arguments allocated (not
 * filled). *rw stays NULL on failure. */
static void reduce_window_case(const char *name, ot_opcode op, ot_dtype t, bool swap, int r,
                               const int64_t *dims, const ot_window *w, ot_module **m,
                               ot_instr **rw, ot_tensor args[2]) {
    *m = ot_module_new(name);
    ot_computation *f = binary_comp(*m, "reducer", op, t, swap, OT_CMP_EQ);
    ot_computation *c = ot_module_add_computation(*m, "main");
    ot_shape xs, is = ot_shape_scalar(t);
    ASSERT_OK(ot_shape_make(&xs, t, r, dims));
    ot_instr *x = ot_build_parameter(c, 0, xs, "x");
    ot_instr *init = ot_build_parameter(c, 1, is, "init");
    ot_instr *y = ot_build_reduce_window(c, &x, &init, 1, w, f);
    ot_computation_set_root(c, y);
    ot_module_set_entry(*m, c);
    ASSERT_OK(ot_module_finalize(*m));
    ASSERT_OK(ot_tensor_alloc(&args[0], &xs));
    ASSERT_OK(ot_tensor_alloc(&args[1], &is));
    *rw = y;
}

static void test_reduce_window_random(void) {
    static const ot_opcode ops[3] = {OT_OP_ADD, OT_OP_MAXIMUM, OT_OP_MINIMUM};
    int cases = 0, failed = 0;
    for (int it = 0; it < 400; it++) {
        ot_dtype t = rnd(0, 2) ? OT_F32 : OT_F64;
        ot_opcode op = ops[rnd(0, 2)];
        bool swap = rnd(0, 3) == 0, ieee = rnd(0, 3) == 0;
        g_no_nan = rnd(0, 1);
        int r = (int)rnd(1, 4);
        int64_t dims[OT_MAX_RANK], odims[OT_MAX_RANK];
        random_dims(r, dims);
        ot_window w;
        random_window(r, dims, &w, odims);
        ot_module *m = NULL;
        ot_instr *rw = NULL;
        ot_tensor args[2];
        reduce_window_case("rw", op, t, swap, r, dims, &w, &m, &rw, args);
        ASSERT_TRUE(rw);
        ASSERT_TRUE(rw->shape.kind == OT_IR_ARRAY && rw->shape.array.rank == r);
        for (int d = 0; d < r; d++) EXPECT_INT_EQ(rw->shape.array.dims[d], odims[d]);
        fill_window_values(&args[0]);
        random_init(&args[1], op);
        char what[96];
        snprintf(what, sizeof what, "reduce-window %d: %s %s%s rank %d", it, ot_dtype_name(t),
                 ot_opcode_name(op), swap ? " swapped" : "", r);
        cases++;
        if (!check_kernel(rw, &rw->shape.array, args, 2, ieee, what)) failed++;
        for (int k = 0; k < 2; k++) ot_tensor_release(&args[k]);
        ot_module_free(m);
    }
    EXPECT_INT_EQ(failed, 0);
    EXPECT_INT_EQ(cases, 400);
    g_no_nan = false;
}

/* Scans (JAX's cumsum, cumprod, cummax and cummin): a window as long as its dim, padded below
 * (prefix) or above (suffix, lax.cumsum(reverse=True)) by all but one, along one dim of a random
 * shape; add, multiply, maximum and minimum, either operand order. Lengths cross the kernel's
 * inner blocks (1024) and come out long enough for products to overflow and underflow. */
static void test_reduce_window_scans(void) {
    static const ot_opcode ops[4] = {OT_OP_ADD, OT_OP_MULTIPLY, OT_OP_MAXIMUM, OT_OP_MINIMUM};
    int cases = 0, failed = 0, rev_cases = 0;
    for (int it = 0; it < 240; it++) {
        ot_dtype t = rnd(0, 2) ? OT_F32 : OT_F64;
        ot_opcode op = ops[rnd(0, 3)];
        bool swap = rnd(0, 3) == 0, ieee = rnd(0, 3) == 0, rev = rnd(0, 1);
        g_no_nan = rnd(0, 1);
        int r = (int)rnd(1, 4), sd = (int)rnd(0, r - 1);
        int64_t dims[OT_MAX_RANK];
        random_dims(r, dims);
        if (dims[sd] < 2) dims[sd] = rnd(2, 40);
        if (sd < r - 1 && rnd(0, 9) == 0) dims[r - 1] = rnd(1025, 1100); /* two inner blocks */
        if (rnd(0, 9) == 0) dims[sd] = rnd(200, 300);
        /* the reference folds n^2 / 2 elements per scanned line: keep its work small */
        for (int d = 0, big = 0; d < r; d++)
            if (d != sd && dims[d] > 9 && big++) dims[d] = rnd(1, 9);
        if (dims[sd] > 40)
            for (int d = 0; d < r; d++)
                if (d != sd) dims[d] = rnd(1, 3);
        ot_window w;
        memset(&w, 0, sizeof w);
        w.rank = r;
        for (int d = 0; d < r; d++) {
            w.dims[d] = (ot_window_dim){1, 1, 0, 0, 1, 1, false};
            if (d == sd) {
                w.dims[d].size = dims[d];
                if (rev)
                    w.dims[d].pad_hi = dims[d] - 1;
                else
                    w.dims[d].pad_lo = dims[d] - 1;
            }
        }
        ot_module *m = NULL;
        ot_instr *rw = NULL;
        ot_tensor args[2];
        reduce_window_case("scan", op, t, swap, r, dims, &w, &m, &rw, args);
        ASSERT_TRUE(rw);
        fill_window_values(&args[0]);
        random_init(&args[1], op);
        if (op == OT_OP_MULTIPLY && rnd(0, 1)) { /* the identity, as jnp.cumprod */
            if (t == OT_F32)
                *(float *)args[1].data = 1.0f;
            else
                *(double *)args[1].data = 1.0;
        }
        char what[96];
        snprintf(what, sizeof what, "scan %d: %s %s%s%s rank %d dim %d", it, ot_dtype_name(t),
                 ot_opcode_name(op), swap ? " swapped" : "", rev ? " suffix" : "", r, sd);
        cases++;
        rev_cases += rev;
        if (!check_kernel(rw, &rw->shape.array, args, 2, ieee, what)) failed++;
        for (int k = 0; k < 2; k++) ot_tensor_release(&args[k]);
        ot_module_free(m);
    }
    EXPECT_INT_EQ(failed, 0);
    EXPECT_INT_EQ(cases, 240);
    EXPECT_TRUE(rev_cases > 80);
    g_no_nan = false;
}

/* The reference's order for a suffix scan (numerics.h, ex_window_scan_dim): output k folds
 * x_{n-1} down to x_k, so lax.cumsum(x, reverse=True) — a reduce-window padded above — has the
 * bits of flip(cumsum(flip(x))), which JAX users also write. Checked in the reference evaluator
 * (-O0, reference kernels) on f32 sums and f64 products whose fold order shows in the bits, along
 * the last dim and along dim 0, against the module that flips around a prefix scan. */
static void scan_mirror_case(const char *ty, const char *op, const char *dims, const char *win,
                             const char *pad_rev, const char *pad_fwd, int flip_dim) {
    char suffix[1024], mirror[1024];
    snprintf(suffix, sizeof suffix,
             "HloModule s\nf {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
             "  ROOT r = %s[] %s(a, b)\n}\nENTRY e {\n  x = %s[%s] parameter(0)\n"
             "  i = %s[] parameter(1)\n  ROOT y = %s[%s] reduce-window(x, i), "
             "window={size=%s pad=%s}, to_apply=f\n}\n",
             ty, ty, ty, op, ty, dims, ty, ty, dims, win, pad_rev);
    snprintf(mirror, sizeof mirror,
             "HloModule m\nf {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
             "  ROOT r = %s[] %s(a, b)\n}\nENTRY e {\n  x = %s[%s] parameter(0)\n"
             "  i = %s[] parameter(1)\n  v = %s[%s] reverse(x), dimensions={%d}\n"
             "  s = %s[%s] reduce-window(v, i), window={size=%s pad=%s}, to_apply=f\n"
             "  ROOT y = %s[%s] reverse(s), dimensions={%d}\n}\n",
             ty, ty, ty, op, ty, dims, ty, ty, dims, flip_dim, ty, dims, win, pad_fwd, ty, dims,
             flip_dim);
    ot_module *ms = NULL, *mm = NULL;
    ASSERT_OK(ot_hlo_parse(suffix, strlen(suffix), NULL, &ms));
    ASSERT_OK(ot_hlo_parse(mirror, strlen(mirror), NULL, &mm));
    const ot_computation *c = ot_module_entry(ms);
    ot_tensor x, i;
    ASSERT_OK(ot_tensor_alloc(&x, &c->params[0]->shape.array));
    ASSERT_OK(ot_tensor_alloc(&i, &c->params[1]->shape.array));
    bool mul = !strcmp(op, "multiply"), f32 = x.shape.dtype == OT_F32;
    /* values of many magnitudes, so that the fold order shows in the bits; factors near 1 */
    for (int64_t e = 0, n = ot_shape_numel_unchecked(&x.shape); e < n; e++) {
        double v = mul ? 1.0 + (double)rnd(-1000, 1000) / 65536.0
                       : ldexp((double)rnd(-1000, 1000), (int)rnd(-20, 10));
        if (f32)
            ((float *)x.data)[e] = (float)v;
        else
            ((double *)x.data)[e] = v;
    }
    if (f32)
        *(float *)i.data = mul ? 1.0f : 0.0f;
    else
        *(double *)i.data = mul ? 1.0 : 0.0;
    ot_value args[2], rs, rm;
    ASSERT_OK(ot_value_from_tensor(&args[0], &x));
    ASSERT_OK(ot_value_from_tensor(&args[1], &i));
    ASSERT_OK(ot_evaluate(ms, args, 2, NULL, &rs));
    ASSERT_OK(ot_evaluate(mm, args, 2, NULL, &rm));
    EXPECT_TRUE(!memcmp(rs.array.data, rm.array.data, x.nbytes));
    ot_value_release(&rs);
    ot_value_release(&rm);
    ot_value_release(&args[0]);
    ot_value_release(&args[1]);
    ot_tensor_release(&x);
    ot_tensor_release(&i);
    ot_module_free(ms);
    ot_module_free(mm);
}

static void test_suffix_scan_order(void) {
    scan_mirror_case("f32", "add", "6,500", "1x500", "0_0x0_499", "0_0x499_0", 1);
    scan_mirror_case("f32", "add", "300,7", "300x1", "0_299x0_0", "299_0x0_0", 0);
    scan_mirror_case("f64", "multiply", "3,400", "1x400", "0_0x0_399", "0_0x399_0", 1);
}

/* Windows as long as a row along the last dim, whose per-output tables would pass the kernel's
 * 4M-entry budget (2,100 outputs of up to 2,100 taps): a one-sided window (padded 1 below and the
 * rest above: not a scan) and a centred moving sum/max run fast, walking the window by its affine
 * ranges, and give the reference's bits, NaNs (the exact fold) included. */
static void test_reduce_window_long(void) {
    static const ot_opcode ops[2] = {OT_OP_ADD, OT_OP_MAXIMUM};
    int cases = 0, failed = 0;
    for (int it = 0; it < 8; it++) {
        ot_dtype t = it & 1 ? OT_F64 : OT_F32;
        ot_opcode op = ops[(it >> 1) & 1];
        bool centred = it >= 4;
        g_no_nan = it % 3 == 0;
        int64_t n = 2100 + it, dims[2] = {2, n};
        ot_window w;
        memset(&w, 0, sizeof w);
        w.rank = 2;
        w.dims[0] = (ot_window_dim){1, 1, 0, 0, 1, 1, false};
        w.dims[1] = (ot_window_dim){n, 1, 0, 0, 1, 1, false};
        if (centred)
            w.dims[1].pad_lo = n / 2, w.dims[1].pad_hi = n - 1 - n / 2;
        else
            w.dims[1].pad_lo = 1, w.dims[1].pad_hi = n - 2;
        ot_module *m = NULL;
        ot_instr *rw = NULL;
        ot_tensor args[2];
        reduce_window_case("long", op, t, false, 2, dims, &w, &m, &rw, args);
        ASSERT_TRUE(rw);
        fill_window_values(&args[0]);
        random_init(&args[1], op);
        char what[96];
        snprintf(what, sizeof what, "long window %d: %s %s %s", it, ot_dtype_name(t),
                 ot_opcode_name(op), centred ? "centred" : "one-sided");
        cases++;
        if (!check_kernel(rw, &rw->shape.array, args, 2, it % 4 == 1, what)) failed++;
        for (int k = 0; k < 2; k++) ot_tensor_release(&args[k]);
        ot_module_free(m);
    }
    EXPECT_INT_EQ(failed, 0);
    EXPECT_INT_EQ(cases, 8);
    g_no_nan = false;
}

/* Integer prefix scans (jnp.cumsum of ids or masks, cummax of positions; lax.cumsum(...,
 * reverse=True) pads above instead): every integer dtype, add, multiply, maximum, minimum, either
 * operand order, forward and reverse, values that overflow and wrap (extremes mixed in), along one
 * dim of a random shape, lengths across the inner blocks. Exact in any order: the kernel must
 * give the reference's bits at 1/2/3/8 threads. */
static void test_reduce_window_int_scans(void) {
    static const ot_opcode ops[4] = {OT_OP_ADD, OT_OP_MULTIPLY, OT_OP_MAXIMUM, OT_OP_MINIMUM};
    static const ot_dtype types[8] = {OT_S8, OT_S16, OT_S32, OT_S64, OT_U8, OT_U16, OT_U32, OT_U64};
    int cases = 0, failed = 0, rev_cases = 0;
    for (int it = 0; it < 160; it++) {
        ot_dtype t = types[rnd(0, 7)];
        ot_opcode op = ops[rnd(0, 3)];
        bool swap = rnd(0, 3) == 0, rev = rnd(0, 1);
        int r = (int)rnd(1, 4), sd = (int)rnd(0, r - 1);
        int64_t dims[OT_MAX_RANK];
        random_dims(r, dims);
        if (dims[sd] < 2) dims[sd] = rnd(2, 40);
        if (sd < r - 1 && rnd(0, 9) == 0) dims[r - 1] = rnd(1025, 1100); /* two inner blocks */
        if (rnd(0, 9) == 0) dims[sd] = rnd(200, 300);
        for (int d = 0, big = 0; d < r; d++)
            if (d != sd && dims[d] > 9 && big++) dims[d] = rnd(1, 9);
        if (dims[sd] > 40)
            for (int d = 0; d < r; d++)
                if (d != sd) dims[d] = rnd(1, 3);
        ot_window w;
        memset(&w, 0, sizeof w);
        w.rank = r;
        for (int d = 0; d < r; d++) {
            w.dims[d] = (ot_window_dim){1, 1, 0, 0, 1, 1, false};
            if (d == sd) {
                w.dims[d].size = dims[d];
                if (rev)
                    w.dims[d].pad_hi = dims[d] - 1;
                else
                    w.dims[d].pad_lo = dims[d] - 1;
            }
        }
        ot_module *m = NULL;
        ot_instr *rw = NULL;
        ot_tensor args[2];
        reduce_window_case("iscan", op, t, swap, r, dims, &w, &m, &rw, args);
        ASSERT_TRUE(rw);
        size_t es = ot_dtype_size(t);
        int64_t n = ot_shape_numel_unchecked(&args[0].shape);
        for (int64_t e = 0; e < n; e++) { /* small values, ties, and extremes that wrap */
            int k = (int)rnd(0, 19);
            uint64_t v = k == 0 ? ~0ull >> 1 : k == 1 ? 1ull << (es * 8 - 1) : (uint64_t)rnd(-3, 3);
            memcpy((char *)args[0].data + e * (int64_t)es, &v, es);
        }
        uint64_t iv = op == OT_OP_MULTIPLY ? 1 : (uint64_t)rnd(-2, 2);
        memcpy(args[1].data, &iv, es);
        char what[96];
        snprintf(what, sizeof what, "iscan %d: %s %s%s%s rank %d dim %d", it, ot_dtype_name(t),
                 ot_opcode_name(op), swap ? " swapped" : "", rev ? " reverse" : "", r, sd);
        cases++;
        rev_cases += rev;
        if (!check_kernel(rw, &rw->shape.array, args, 2, false, what)) failed++;
        for (int k = 0; k < 2; k++) ot_tensor_release(&args[k]);
        ot_module_free(m);
    }
    EXPECT_INT_EQ(failed, 0);
    EXPECT_INT_EQ(cases, 160);
    EXPECT_TRUE(rev_cases > 40);
}

static void test_select_and_scatter_random(void) {
    static const ot_cmp_dir dirs[4] = {OT_CMP_GE, OT_CMP_GT, OT_CMP_LE, OT_CMP_LT};
    int failed = 0, overlapping = 0;
    for (int it = 0; it < 400; it++) {
        ot_dtype t = rnd(0, 2) ? OT_F32 : OT_F64;
        ot_cmp_dir dir = dirs[rnd(0, 3)];
        bool sswap = rnd(0, 3) == 0, aswap = rnd(0, 3) == 0, ieee = rnd(0, 3) == 0;
        g_no_nan = rnd(0, 1);
        int r = (int)rnd(1, 4);
        int64_t dims[OT_MAX_RANK], odims[OT_MAX_RANK];
        random_dims(r, dims);
        ot_window w;
        random_window(r, dims, &w, odims);
        for (int d = 0; d < r; d++)
            if (w.dims[d].stride < (w.dims[d].size - 1) * w.dims[d].window_dilation + 1)
                overlapping++;
        ot_module *m = ot_module_new("ss");
        ot_computation *sel = binary_comp(m, "select", OT_OP_COMPARE, t, sswap, dir);
        ot_computation *sca = binary_comp(m, "scatter", OT_OP_ADD, t, aswap, OT_CMP_EQ);
        ot_computation *c = ot_module_add_computation(m, "main");
        ot_shape xs, ss;
        ASSERT_OK(ot_shape_make(&xs, t, r, dims));
        ASSERT_OK(ot_shape_make(&ss, t, r, odims));
        ot_instr *x = ot_build_parameter(c, 0, xs, "x");
        ot_instr *s = ot_build_parameter(c, 1, ss, "s");
        ot_instr *init = ot_build_parameter(c, 2, ot_shape_scalar(t), "init");
        ot_instr *root = ot_build_select_and_scatter(c, x, s, init, &w, sel, sca);
        ot_computation_set_root(c, root);
        ot_module_set_entry(m, c);
        ASSERT_OK(ot_module_finalize(m));
        ot_tensor args[3];
        ot_shape is = ot_shape_scalar(t);
        ASSERT_OK(ot_tensor_alloc(&args[0], &xs));
        ASSERT_OK(ot_tensor_alloc(&args[1], &ss));
        ASSERT_OK(ot_tensor_alloc(&args[2], &is));
        fill_window_values(&args[0]);
        fill_window_values(&args[1]);
        fill_window_values(&args[2]);
        if (rnd(0, 1)) memset(args[2].data, 0, args[2].nbytes);
        char what[96];
        snprintf(what, sizeof what, "select-and-scatter %d: %s %s%s add%s rank %d", it,
                 ot_dtype_name(t), ot_cmp_dir_name(dir), sswap ? " swapped" : "",
                 aswap ? " swapped" : "", r);
        if (!check_kernel(root, &xs, args, 3, ieee, what)) failed++;
        for (int k = 0; k < 3; k++) ot_tensor_release(&args[k]);
        ot_module_free(m);
    }
    EXPECT_INT_EQ(failed, 0);
    EXPECT_TRUE(overlapping > 100); /* the sweep does cover overlapping windows */
    g_no_nan = false;
}

/* Max pooling and its gradient as a conv net lowers them, through the runtime (-O0: one kernel
 * per op), large enough to split over the pool: fast kernels ran, same bits as the reference on
 * every pool. */
static void pooling_case_once(const char *hlo, int nargs, int want_fast) {
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(hlo, strlen(hlo), NULL, &m));
    ot_compile_options co = ot_compile_options_default();
    co.opt_level = 0;
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, &co, &e));
    const ot_computation *c = ot_module_entry(m);
    ot_tensor args[3], ref;
    for (int a = 0; a < nargs; a++) {
        ASSERT_OK(ot_tensor_alloc(&args[a], &c->params[a]->shape.array));
        fill_window_values(&args[a]);
    }
    const ot_slot *sl = ot_executable_slot(e, ot_executable_output_slot(e, 0));
    ASSERT_OK(ot_tensor_alloc(&ref, &sl->shape));
    int64_t an = ot_executable_arena_size(e);
    void *arena = ot_aligned_alloc(64, (size_t)(an ? an : 64));
    void *params[3];
    for (int a = 0; a < nargs; a++) params[a] = args[a].data;
    ot_run_options o = ot_run_options_default();
    o.reference_kernels = true;
    ot_run_result rr;
    void *outs[1] = {ref.data};
    ASSERT_OK(ot_execute_on_host(e, arena, params, outs, &o, 0, &rr));
    for (int p = 0; p < 4; p++) { /* 1, 2, 3 and 8 threads */
        ot_tensor got;
        ASSERT_OK(ot_tensor_alloc(&got, &sl->shape));
        o.reference_kernels = false;
        o.pool = g_pools[p];
        outs[0] = got.data;
        ASSERT_OK(ot_execute_on_host(e, arena, params, outs, &o, 0, &rr));
        EXPECT_INT_EQ(rr.fast_kernels_run, want_fast);
        EXPECT_TRUE(bits_equal(&got, &ref));
        ot_tensor_release(&got);
    }
    ot_aligned_free(arena);
    ot_tensor_release(&ref);
    for (int a = 0; a < nargs; a++) ot_tensor_release(&args[a]);
    ot_executable_free(e);
    ot_module_free(m);
}

/* each case with NaN-free inputs (the vector paths) and with NaNs */
static void pooling_case(const char *hlo, int nargs, int want_fast) {
    g_no_nan = true;
    pooling_case_once(hlo, nargs, want_fast);
    g_no_nan = false;
    pooling_case_once(hlo, nargs, want_fast);
}

#define MAX_F32                                                                                    \
    "max {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = f32[] maximum(a, "      \
    "b)\n}\n"
#define GE_F32                                                                                     \
    "ge {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"                                   \
    "  ROOT c = pred[] compare(a, b), direction=GE\n}\n"
#define ADD_F32                                                                                    \
    "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"

static void test_pooling_layouts(void) {
    /* NHWC 2x2 stride 2 (a conv net's max pool), forward and gradient */
    pooling_case("HloModule p0\n" MAX_F32 "ENTRY e {\n  x = f32[8,32,32,32] parameter(0)\n"
                 "  i = f32[] parameter(1)\n  ROOT r = f32[8,16,16,32] reduce-window(x, i), "
                 "window={size=1x2x2x1 stride=1x2x2x1}, to_apply=max\n}\n",
                 2, 1);
    pooling_case("HloModule p1\n" GE_F32 ADD_F32 "ENTRY e {\n  x = f32[8,32,32,32] parameter(0)\n"
                 "  s = f32[8,16,16,32] parameter(1)\n  i = f32[] parameter(2)\n"
                 "  ROOT r = f32[8,32,32,32] select-and-scatter(x, s, i), "
                 "window={size=1x2x2x1 stride=1x2x2x1}, select=ge, scatter=add\n}\n",
                 3, 1);
    /* NCHW, 2x2 stride 2 */
    pooling_case("HloModule p2\n" MAX_F32 "ENTRY e {\n  x = f32[8,32,32,32] parameter(0)\n"
                 "  i = f32[] parameter(1)\n  ROOT r = f32[8,32,16,16] reduce-window(x, i), "
                 "window={size=1x1x2x2 stride=1x1x2x2}, to_apply=max\n}\n",
                 2, 1);
    pooling_case("HloModule p3\n" GE_F32 ADD_F32 "ENTRY e {\n  x = f32[8,32,32,32] parameter(0)\n"
                 "  s = f32[8,32,16,16] parameter(1)\n  i = f32[] parameter(2)\n"
                 "  ROOT r = f32[8,32,32,32] select-and-scatter(x, s, i), "
                 "window={size=1x1x2x2 stride=1x1x2x2}, select=ge, scatter=add\n}\n",
                 3, 1);
    /* overlapping 3x3 stride 2 with SAME padding (ResNet's stem pool), both layouts */
    pooling_case("HloModule p4\n" GE_F32 ADD_F32 "ENTRY e {\n  x = f32[8,33,33,24] parameter(0)\n"
                 "  s = f32[8,17,17,24] parameter(1)\n  i = f32[] parameter(2)\n"
                 "  ROOT r = f32[8,33,33,24] select-and-scatter(x, s, i), "
                 "window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}, select=ge, "
                 "scatter=add\n}\n",
                 3, 1);
    pooling_case("HloModule p5\n" GE_F32 ADD_F32 "ENTRY e {\n  x = f32[8,24,33,33] parameter(0)\n"
                 "  s = f32[8,24,17,17] parameter(1)\n  i = f32[] parameter(2)\n"
                 "  ROOT r = f32[8,24,33,33] select-and-scatter(x, s, i), "
                 "window={size=1x1x3x3 stride=1x1x2x2 pad=0_0x0_0x1_1x1_1}, select=ge, "
                 "scatter=add\n}\n",
                 3, 1);
    /* overlapping in every dim: one task, still the reference's bits */
    pooling_case("HloModule p6\n" GE_F32 ADD_F32 "ENTRY e {\n  x = f32[300,301] parameter(0)\n"
                 "  s = f32[298,299] parameter(1)\n  i = f32[] parameter(2)\n"
                 "  ROOT r = f32[300,301] select-and-scatter(x, s, i), "
                 "window={size=3x3 stride=1x1}, select=ge, scatter=add\n}\n",
                 3, 1);
    /* average pooling's sum */
    pooling_case("HloModule p7\n" ADD_F32 "ENTRY e {\n  x = f32[8,32,32,32] parameter(0)\n"
                 "  i = f32[] parameter(1)\n  ROOT r = f32[8,32,11,11] reduce-window(x, i), "
                 "window={size=1x1x3x3 stride=1x1x3x3 pad=0_0x0_0x1_0x1_0}, to_apply=add\n}\n",
                 2, 1);
    /* NHWC windows of stride 1 along W (W and C run as one dim): the average pool's gradient
     * (a 2x2 sum over padding), a SAME 3x3 max pool dilated along W, and an f64 sum with
     * negative padding and a reversed W window */
    pooling_case("HloModule p8\n" ADD_F32 "ENTRY e {\n  x = f32[8,29,29,32] parameter(0)\n"
                 "  i = f32[] parameter(1)\n  ROOT r = f32[8,29,29,32] reduce-window(x, i), "
                 "window={size=1x2x2x1 pad=0_0x1_0x1_0x0_0}, to_apply=add\n}\n",
                 2, 1);
    pooling_case("HloModule p9\n" MAX_F32 "ENTRY e {\n  x = f32[4,20,21,24] parameter(0)\n"
                 "  i = f32[] parameter(1)\n  ROOT r = f32[4,20,21,24] reduce-window(x, i), "
                 "window={size=1x3x3x1 pad=0_0x1_1x2_2x0_0 rhs_dilate=1x1x2x1}, to_apply=max\n}\n",
                 2, 1);
    pooling_case("HloModule p10\nadd {\n  a = f64[] parameter(0)\n  b = f64[] parameter(1)\n"
                 "  ROOT s = f64[] add(b, a)\n}\nENTRY e {\n  x = f64[6,17,19,8] parameter(0)\n"
                 "  i = f64[] parameter(1)\n  ROOT r = f64[6,9,18,8] reduce-window(x, i), "
                 "window={size=1x2x3x1 stride=1x2x1x1 pad=0_0x0_1x-1_2x0_0 rhs_reversal=0x0x1x0}, "
                 "to_apply=add\n}\n",
                 2, 1);
    /* NHWC windows of stride > 1 along W (rows of W x C outputs, C contiguous elements per
     * window position): a SAME 3x3 stride-2 max pool, rows longer than one chunk with C = 24 (not
     * a divisor of the chunk), and an f64 sum of stride 3 dilated and reversed along W */
    pooling_case("HloModule p11\n" MAX_F32 "ENTRY e {\n  x = f32[4,17,33,24] parameter(0)\n"
                 "  i = f32[] parameter(1)\n  ROOT r = f32[4,9,17,24] reduce-window(x, i), "
                 "window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}, to_apply=max\n}\n",
                 2, 1);
    pooling_case("HloModule p12\n" ADD_F32 "ENTRY e {\n  x = f32[2,9,130,24] parameter(0)\n"
                 "  i = f32[] parameter(1)\n  ROOT r = f32[2,4,64,24] reduce-window(x, i), "
                 "window={size=1x2x3x1 stride=1x2x2x1}, to_apply=add\n}\n",
                 2, 1);
    pooling_case("HloModule p13\nadd {\n  a = f64[] parameter(0)\n  b = f64[] parameter(1)\n"
                 "  ROOT s = f64[] add(a, b)\n}\nENTRY e {\n  x = f64[3,7,40,6] parameter(0)\n"
                 "  i = f64[] parameter(1)\n  ROOT r = f64[3,7,13,6] reduce-window(x, i), "
                 "window={size=1x1x3x1 stride=1x1x3x1 pad=0_0x0_0x2_-1x0_0 rhs_dilate=1x1x2x1 "
                 "rhs_reversal=0x0x1x0}, to_apply=add\n}\n",
                 2, 1);
    /* NHWC windows over a base-dilated W (the gradients of strided pools: the cotangent dilated
     * by the stride; window position k reaches every q-th w): a 2x2 stride-2 average pool's
     * gradient (each output one element), a 3x3 stride-2 SAME pool's (one or two elements), and
     * an f64 maximum of dilation 3 with stride 2, rhs dilation and reversal (q 3, input step 2),
     * C = 24 and rows longer than one chunk */
    pooling_case("HloModule p14\n" ADD_F32 "ENTRY e {\n  x = f32[8,14,14,32] parameter(0)\n"
                 "  i = f32[] parameter(1)\n  ROOT r = f32[8,28,28,32] reduce-window(x, i), "
                 "window={size=1x2x2x1 pad=0_0x1_1x1_1x0_0 lhs_dilate=1x2x2x1}, to_apply=add\n}\n",
                 2, 1);
    pooling_case("HloModule p15\n" ADD_F32 "ENTRY e {\n  x = f32[4,9,50,24] parameter(0)\n"
                 "  i = f32[] parameter(1)\n  ROOT r = f32[4,19,101,24] reduce-window(x, i), "
                 "window={size=1x3x3x1 pad=0_0x2_2x2_2x0_0 lhs_dilate=1x2x2x1}, to_apply=add\n}\n",
                 2, 1);
    pooling_case("HloModule p16\nmax {\n  a = f64[] parameter(0)\n  b = f64[] parameter(1)\n"
                 "  ROOT m = f64[] maximum(a, b)\n}\nENTRY e {\n  x = f64[3,5,20,8] parameter(0)\n"
                 "  i = f64[] parameter(1)\n  ROOT r = f64[3,5,28,8] reduce-window(x, i), "
                 "window={size=1x1x4x1 stride=1x1x2x1 pad=0_0x0_0x2_1x0_0 lhs_dilate=1x1x3x1 "
                 "rhs_dilate=1x1x2x1 rhs_reversal=0x0x1x0}, to_apply=max\n}\n",
                 2, 1);
}

/* What the fast kernels leave to the reference: a multiply reducer, a select that is not a float
 * compare of its parameters, integer elements, a multiply scatter. */
static void test_window_fallbacks(void) {
    pooling_case("HloModule f0\nmul {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                 "  ROOT m = f32[] multiply(a, b)\n}\nENTRY e {\n  x = f32[4,9] parameter(0)\n"
                 "  i = f32[] parameter(1)\n  ROOT r = f32[4,4] reduce-window(x, i), "
                 "window={size=1x2 stride=1x2}, to_apply=mul\n}\n",
                 2, 0);
    pooling_case("HloModule f1\nmax {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
                 "  ROOT m = s32[] maximum(a, b)\n}\nENTRY e {\n  x = s32[4,9] parameter(0)\n"
                 "  i = s32[] parameter(1)\n  ROOT r = s32[4,4] reduce-window(x, i), "
                 "window={size=1x2 stride=1x2}, to_apply=max\n}\n",
                 2, 0);
    pooling_case("HloModule f2\nsel {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                 "  ROOT c = pred[] compare(a, b), direction=GE, type=TOTALORDER\n}\n" ADD_F32
                 "ENTRY e {\n  x = f32[4,8] parameter(0)\n  s = f32[4,4] parameter(1)\n"
                 "  i = f32[] parameter(2)\n  ROOT r = f32[4,8] select-and-scatter(x, s, i), "
                 "window={size=1x2 stride=1x2}, select=sel, scatter=add\n}\n",
                 3, 0);
    pooling_case("HloModule f3\n" GE_F32 "mul {\n  a = f32[] parameter(0)\n"
                 "  b = f32[] parameter(1)\n  ROOT m = f32[] multiply(a, b)\n}\n"
                 "ENTRY e {\n  x = f32[4,8] parameter(0)\n  s = f32[4,4] parameter(1)\n"
                 "  i = f32[] parameter(2)\n  ROOT r = f32[4,8] select-and-scatter(x, s, i), "
                 "window={size=1x2 stride=1x2}, select=ge, scatter=mul\n}\n",
                 3, 0);
}

static void test_setup(void) {
    static const int n[4] = {1, 2, 3, 8};
    for (int k = 0; k < 4; k++) ASSERT_OK(ot_threadpool_create(n[k], &g_pools[k]));
    EXPECT_INT_EQ(ot_threadpool_size(g_pools[3]), 8);
}

static void test_teardown(void) {
    for (int k = 0; k < 4; k++) {
        ot_threadpool_free(g_pools[k]);
        g_pools[k] = NULL;
    }
    EXPECT_TRUE(true);
}

OT_TEST_MAIN(OT_TEST(test_setup), OT_TEST(test_reduce_window_random),
             OT_TEST(test_reduce_window_scans), OT_TEST(test_suffix_scan_order),
             OT_TEST(test_reduce_window_long), OT_TEST(test_reduce_window_int_scans),
             OT_TEST(test_select_and_scatter_random), OT_TEST(test_pooling_layouts),
             OT_TEST(test_window_fallbacks), OT_TEST(test_teardown))
