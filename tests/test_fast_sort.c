/* The fast sort (src/exec/fast_sort.c) against the reference sort (reduce.c), bit for bit,
 * kernel against kernel on pools of 1, 2, 3 and 8 threads: the comparators JAX writes (jnp.sort of
 * floats: TOTALORDER on canonical NaNs and zeros; of integers: LT/GT, SIGNED and UNSIGNED; raw
 * TOTALORDER), along every dim of 1-D to 3-D shapes, on rows full of ties, both zeros, NaNs with
 * payloads and subnormals (FTZ and IEEE runs: the canonical form's compares read subnormals as
 * zero under DAZ); topk (largest and smallest, every k); argmax/argmin reduces of (values,
 * indices) (fast_reduce.c). A comparator or reducer outside the covered forms stays with the
 * reference. */
#include "exec/kernels.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "ot_test.h"

#include <float.h>

static uint64_t g_rng = 0x50f7;

static uint64_t next_u64(void) {
    return ot_test_splitmix64(&g_rng);
}
static int64_t rnd(int64_t lo, int64_t hi) { /* [lo, hi] */
    return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1));
}

static ot_threadpool *g_pools[4];

/* Small values (many ties), both zeros, infinities, subnormals, NaNs of either sign with
 * payloads, quiet and signalling; integers: small values and extremes. */
static void fill_values(ot_tensor *t) {
    int64_t n = ot_shape_numel_unchecked(&t->shape);
    ot_dtype dt = t->shape.dtype;
    size_t es = ot_dtype_size(dt);
    for (int64_t e = 0; e < n; e++) {
        int k = (int)rnd(0, 29);
        if (dt == OT_F32 || dt == OT_F64) {
            bool f32 = dt == OT_F32;
            double v = (double)rnd(-4, 4) * 0.5;
            if (k == 0) v = INFINITY;
            if (k == 1) v = -INFINITY;
            if (k == 2 || k == 3) v = -0.0;
            if (k == 4) v = (f32 ? FLT_MIN : DBL_MIN) * 0.25;
            if (k == 5) v = -(f32 ? FLT_MIN : DBL_MIN) * 0.5;
            if (k >= 6 && k <= 8) { /* NaN: quiet, signalling, negative */
                uint64_t pay = next_u64() & 0xffff;
                if (f32) {
                    uint32_t u = 0x7f800000u | (uint32_t)(pay + 1) | (k != 7 ? 0x400000u : 0) |
                                 (k == 8 ? 0x80000000u : 0);
                    memcpy((char *)t->data + e * 4, &u, 4);
                } else {
                    uint64_t u = 0x7ff0000000000000ull | (pay + 1) | (k != 7 ? 1ull << 51 : 0) |
                                 (k == 8 ? 1ull << 63 : 0);
                    memcpy((char *)t->data + e * 8, &u, 8);
                }
                continue;
            }
            if (f32) {
                float f = (float)v;
                memcpy((char *)t->data + e * 4, &f, 4);
            } else {
                memcpy((char *)t->data + e * 8, &v, 8);
            }
        } else {
            uint64_t v = (uint64_t)rnd(-5, 5);
            if (k == 0) v = ~0ull;                /* -1 / the largest unsigned */
            if (k == 1) v = 1ull << (es * 8 - 1); /* the most negative / the top bit */
            memcpy((char *)t->data + (size_t)e * es, &v, es);
        }
    }
}

/* Parses hlo, runs its root (a sort, a topk with two outputs, or a reduce of (values, indices)
 * whose operands are the entry's parameters in order) with the reference kernel, then with the
 * fast kernel on each pool (ieee: denormals kept, else FTZ/DAZ): same bits; want_fast: the fast
 * kernel ran. */
static bool check_hlo(const char *hlo, bool ieee, bool want_fast) {
    ot_module *m = NULL;
    if (ot_hlo_parse(hlo, strlen(hlo), NULL, &m) != OT_OK) {
        fprintf(stderr, "parse: %s\n%s\n", ot_last_error(), hlo);
        return false;
    }
    const ot_computation *c = ot_module_entry(m);
    const ot_instr *root = c->root;
    int nout = root->shape.kind == OT_IR_TUPLE ? root->shape.ntuple : 1;
    const ot_shape *osh[4];
    for (int q = 0; q < nout && q < 4; q++)
        osh[q] = nout == 1 ? &root->shape.array : &root->shape.tuple[q].array;
    ot_tensor args[4], ref[4], got[4];
    int nin = c->nparams;
    bool ok = nout <= 4 && nin <= 4;
    for (int k = 0; k < nin && ok; k++)
        ok = ot_tensor_alloc(&args[k], &c->params[k]->shape.array) == OT_OK;
    for (int q = 0; q < nout && ok; q++) {
        ok = ot_tensor_alloc(&ref[q], osh[q]) == OT_OK && ot_tensor_alloc(&got[q], osh[q]) == OT_OK;
    }
    if (!ok) {
        fprintf(stderr, "cannot allocate\n");
        ot_module_free(m);
        return false; /* a test process: the leak on this path does not matter */
    }
    void *in[4], *out[4];
    ex_leaf ins[4], ol[4];
    for (int k = 0; k < nin; k++) {
        fill_values(&args[k]);
        in[k] = args[k].data;
        ins[k] = (ex_leaf){&args[k].shape, (int64_t)args[k].nbytes};
    }
    ot_eval_options eo = ot_eval_options_default();
    eo.keep_denormals = ieee;
    for (int q = 0; q < nout; q++) {
        out[q] = ref[q].data;
        ol[q] = (ex_leaf){osh[q], (int64_t)ref[q].nbytes};
    }
    ex_kernel_ctx kc;
    ex_kernel_ctx_init(&kc, g_pools[0], &eo, true);
    bool fast = true;
    ot_status st = ex_kernel_run(&kc, root, "sort", nin, in, ins, nout, out, ol, &fast);
    ex_kernel_ctx_release(&kc);
    if (st != OT_OK || fast) {
        fprintf(stderr, "reference kernel: %s\n", st ? ot_last_error() : "ran fast");
        ok = false;
    }
    for (int p = 0; p < 4 && ok; p++) {
        for (int q = 0; q < nout; q++) {
            memset(got[q].data, 0xa5, got[q].nbytes); /* every element must be written */
            out[q] = got[q].data;
        }
        ex_kernel_ctx_init(&kc, g_pools[p], &eo, false);
        st = ex_kernel_run(&kc, root, "sort", nin, in, ins, nout, out, ol, &fast);
        ex_kernel_ctx_release(&kc);
        if (st != OT_OK || fast != want_fast) {
            fprintf(stderr, "fast kernel: %s\n%s\n",
                    st     ? ot_last_error()
                    : fast ? "ran, not expected"
                           : "did not run",
                    hlo);
            ok = false;
        }
        for (int q = 0; q < nout && ok; q++)
            if (memcmp(got[q].data, ref[q].data, ref[q].nbytes) != 0) {
                fprintf(stderr, "%d threads (%s): output %d differs from the reference:\n%s\n",
                        ot_threadpool_size(g_pools[p]), ieee ? "IEEE" : "FTZ", q, hlo);
                ok = false;
            }
    }
    for (int q = 0; q < nout; q++) {
        ot_tensor_release(&ref[q]);
        ot_tensor_release(&got[q]);
    }
    for (int k = 0; k < nin; k++) ot_tensor_release(&args[k]);
    ot_module_free(m);
    return ok;
}

/* JAX's float comparator: canonical NaN and zero, then TOTALORDER. */
static const char k_canon[] =
    "cmp {\n  a = $[] parameter(0)\n  na = pred[] compare(a, a), direction=NE\n"
    "  nan = $[] constant(nan)\n  z = $[] constant(0)\n"
    "  ea = pred[] compare(a, z), direction=EQ\n  sa = $[] select(ea, z, a)\n"
    "  ca = $[] select(na, nan, sa)\n"
    "  b = $[] parameter(1)\n  nb = pred[] compare(b, b), direction=NE\n"
    "  eb = pred[] compare(b, z), direction=EQ\n  sb = $[] select(eb, z, b)\n"
    "  cb = $[] select(nb, nan, sb)\n"
    "  ROOT r = pred[] compare(ca, cb), direction=@, type=TOTALORDER\n}\n";
static const char k_raw[] = "cmp {\n  a = $[] parameter(0)\n  b = $[] parameter(1)\n"
                            "  ROOT r = pred[] compare(a, b), direction=@%s\n}\n";

/* text with '$' replaced by the type and '@' by the direction. */
static void subst(char *out, size_t cap, const char *text, const char *ty, const char *dir) {
    size_t n = 0;
    for (const char *q = text; *q && n + 8 < cap; q++) {
        const char *r = *q == '$' ? ty : *q == '@' ? dir : NULL;
        if (r)
            n += (size_t)snprintf(out + n, cap - n, "%s", r);
        else
            out[n++] = *q;
    }
    out[n] = 0;
}

static void test_sort_random(void) {
    static const char *const types[] = {"f32", "f64", "s32", "u32", "s8", "u64", "s64", "u16"};
    int failed = 0, cases = 0;
    for (int it = 0; it < 120; it++) {
        const char *ty = types[rnd(0, 7)];
        bool fl = ty[0] == 'f';
        const char *dir = rnd(0, 1) ? "LT" : "GT";
        int form = fl ? (int)rnd(0, 2) : 3; /* 0-1 canonical, 2 raw TOTALORDER, 3 integer */
        int r = (int)rnd(1, 3), sd = (int)rnd(0, r - 1);
        int64_t dims[3];
        for (int d = 0; d < r; d++) dims[d] = rnd(1, 6);
        dims[sd] = rnd(0, 3) ? rnd(2, 70) : rnd(300, 1500); /* merge passes, and the radix sort */
        char shape[64];
        int sn = snprintf(shape, sizeof shape, "%s[", ty);
        for (int d = 0; d < r; d++)
            sn += snprintf(shape + sn, sizeof shape - (size_t)sn, "%s%lld", d ? "," : "",
                           (long long)dims[d]);
        snprintf(shape + sn, sizeof shape - (size_t)sn, "]");
        char cmp[4096], text[8192];
        if (form <= 1) {
            subst(cmp, sizeof cmp, k_canon, ty, dir);
        } else {
            char raw[512];
            snprintf(raw, sizeof raw, k_raw,
                     form == 2                   ? ", type=TOTALORDER"
                     : ty[0] == 'u' && rnd(0, 1) ? ", type=UNSIGNED"
                                                 : "");
            subst(cmp, sizeof cmp, raw, ty, dir);
        }
        /* jnp.argsort, lax.sort_key_val, lax.sort(..., num_keys=1): up to three more operands
         * of other types, permuted as the keys (the comparator's parameters for them unused) */
        static const char *const more_types[] = {"s32", "f32", "u8", "f64", "bf16"};
        int nmore = rnd(0, 1) ? (int)rnd(1, 3) : 0;
        char params[512] = "", sorted[512] = "", tys[512] = "";
        int pn = 0, qn = 0, tn = 0;
        qn += snprintf(sorted + qn, sizeof sorted - (size_t)qn, "x");
        tn += snprintf(tys + tn, sizeof tys - (size_t)tn, "%s", shape);
        for (int q = 0; q < nmore; q++) {
            const char *mt = more_types[rnd(0, 4)];
            char msh[64];
            snprintf(msh, sizeof msh, "%s%s", mt, strchr(shape, '['));
            pn += snprintf(params + pn, sizeof params - (size_t)pn, "  v%d = %s parameter(%d)\n", q,
                           msh, q + 1);
            qn += snprintf(sorted + qn, sizeof sorted - (size_t)qn, ", v%d", q);
            tn += snprintf(tys + tn, sizeof tys - (size_t)tn, ", %s", msh);
            char cp[128];
            snprintf(cp, sizeof cp,
                     "cmp {\n  m%d = %s[] parameter(%d)\n  n%d = %s[] parameter(%d)\n", q, mt,
                     2 * q + 2, q, mt, 2 * q + 3);
            char rest[sizeof cmp + sizeof cp];
            snprintf(rest, sizeof rest, "%s%s", cp, cmp + strlen("cmp {\n"));
            if (strlen(rest) < sizeof cmp) memcpy(cmp, rest, strlen(rest) + 1);
        }
        if (nmore)
            snprintf(text, sizeof text,
                     "HloModule sort_%d\n%sENTRY e {\n  x = %s parameter(0)\n%s"
                     "  ROOT s = (%s) sort(%s), dimensions={%d}, is_stable=%s, to_apply=cmp\n}\n",
                     it, cmp, shape, params, tys, sorted, sd, rnd(0, 1) ? "true" : "false");
        else
            snprintf(text, sizeof text,
                     "HloModule sort_%d\n%sENTRY e {\n  x = %s parameter(0)\n"
                     "  ROOT s = %s sort(x), dimensions={%d}, is_stable=%s, to_apply=cmp\n}\n",
                     it, cmp, shape, shape, sd, rnd(0, 1) ? "true" : "false");
        cases++;
        if (!check_hlo(text, rnd(0, 3) == 0, true)) failed++;
    }
    EXPECT_INT_EQ(failed, 0);
    EXPECT_INT_EQ(cases, 120);
}

/* topk of every covered type, largest and smallest, k from 1 to the row (the ordered pass for
 * k <= 32, the heap for larger k up to an eighth of the row, the sort path above), rows full of
 * ties. */
static void test_topk_random(void) {
    static const char *const types[] = {"f32", "f64", "s32", "u32", "s8", "u64", "s64", "u16"};
    int failed = 0;
    for (int it = 0; it < 80; it++) {
        const char *ty = types[rnd(0, 7)];
        int64_t rows = rnd(1, 40), m = rnd(0, 2) ? rnd(1, 60) : rnd(100, 1200);
        int64_t pick = rnd(0, 2), k = pick == 0               ? rnd(1, m < 8 ? m : 8)
                                      : pick == 1 && m >= 320 ? rnd(33, m / 8)
                                                              : rnd(1, m);
        char text[1024];
        snprintf(text, sizeof text,
                 "HloModule topk_%d\nENTRY e {\n  x = %s[%lld,%lld] parameter(0)\n"
                 "  ROOT t = (%s[%lld,%lld], s32[%lld,%lld]) topk(x), k=%lld, largest=%s\n}\n",
                 it, ty, (long long)rows, (long long)m, ty, (long long)rows, (long long)k,
                 (long long)rows, (long long)k, (long long)k, rnd(0, 2) ? "true" : "false");
        if (!check_hlo(text, rnd(0, 3) == 0, true)) failed++;
    }
    EXPECT_INT_EQ(failed, 0);
}

/* XLA's CPU pipeline writes custom-call "TopK" (its optimized modules hold it, with the sort's
 * NaN-safe greater-than comparator attached): the parser reads it as topk, largest=true. Checked
 * against XLA's runtime semantics (runtime_topk.cc: the k largest in total order,
 * -NaN < -Inf < -0 < +0 < +Inf < +NaN, ties to the lower index) on a row written out by hand,
 * rank 1 and rank 2; the fast kernel against the reference on random rows at 1/2/3/8 threads; a
 * comparator that is not greater-than is refused at parse time. */
static const char k_topk_gt[] =
    "gt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  c = s32[] parameter(2)\n"
    "  d = s32[] parameter(3)\n  z = s32[] constant(0)\n  mx = s32[] constant(2147483647)\n"
    "  ba = s32[] bitcast-convert(a)\n  bb = s32[] bitcast-convert(b)\n"
    "  xa = s32[] xor(mx, ba)\n  la = pred[] compare(ba, z), direction=LT\n"
    "  xb = s32[] xor(mx, bb)\n  lb = pred[] compare(bb, z), direction=LT\n"
    "  sa = s32[] select(la, xa, ba)\n  sb = s32[] select(lb, xb, bb)\n"
    "  ROOT r = pred[] compare(sa, sb), direction=GT\n}\n";

static bool topk_call_case(const char *in_shape, const char *out_v, const char *out_i, int64_t k,
                           const float *row, int64_t n, const float *want_v,
                           const int32_t *want_i) {
    char text[2048];
    snprintf(text, sizeof text,
             "HloModule tk\n%sENTRY e {\n  x = f32%s parameter(0)\n"
             "  ROOT t = (f32%s, s32%s) custom-call(x), custom_call_target=\"TopK\", "
             "called_computations={gt}\n}\n",
             k_topk_gt, in_shape, out_v, out_i);
    ot_module *m = NULL;
    if (ot_hlo_parse(text, strlen(text), NULL, &m) != OT_OK) {
        fprintf(stderr, "parse: %s\n", ot_last_error());
        return false;
    }
    const ot_instr *root = ot_module_entry(m)->root;
    bool ok = root->opcode == OT_OP_TOPK && root->attrs->index == k && root->attrs->largest;
    ot_tensor in;
    ok = ok && ot_tensor_alloc(&in, &ot_module_entry(m)->params[0]->shape.array) == OT_OK;
    if (ok) memcpy(in.data, row, (size_t)n * sizeof *row);
    ot_value res = ot_value_empty();
    ok = ok && ot_evaluate_tensors(m, &in, 1, NULL, &res) == OT_OK;
    if (ok) {
        const ot_value *v = ot_value_leaf(&res, 0), *ix = ot_value_leaf(&res, 1);
        int64_t nk = ot_shape_numel_unchecked(&v->array.shape);
        ok = memcmp(v->array.data, want_v, (size_t)nk * sizeof *want_v) == 0 &&
             memcmp(ix->array.data, want_i, (size_t)nk * sizeof *want_i) == 0;
        if (!ok)
            for (int64_t q = 0; q < nk; q++)
                fprintf(stderr, "  %lld: %g @%d (want %g @%d)\n", (long long)q,
                        (double)((const float *)v->array.data)[q],
                        ((const int32_t *)ix->array.data)[q], (double)want_v[q], want_i[q]);
    }
    ot_value_release(&res);
    ot_tensor_release(&in);
    ot_module_free(m);
    return ok;
}

static void test_topk_custom_call(void) {
    float nan = NAN, nnan = -NAN; /* a negative NaN: below -Inf in total order */
    const float row[10] = {1.0f, nan, -0.0f, 0.0f, 3.0f, 3.0f, -INFINITY, nnan, 1.0f, -2.0f};
    const float v5[5] = {nan, 3.0f, 3.0f, 1.0f, 1.0f};
    const int32_t i5[5] = {1, 4, 5, 0, 8};
    EXPECT_TRUE(topk_call_case("[10]", "[5]", "[5]", 5, row, 10, v5, i5));
    /* two rows: the second is the first reversed; the tail holds +0 before -0, then -Inf, -NaN */
    float rows[20];
    for (int q = 0; q < 10; q++) rows[q] = row[q], rows[10 + q] = row[9 - q];
    const float v9[18] = {nan, 3.0f, 3.0f, 1.0f, 1.0f, 0.0f, -0.0f, -2.0f, -INFINITY,
                          nan, 3.0f, 3.0f, 1.0f, 1.0f, 0.0f, -0.0f, -2.0f, -INFINITY};
    const int32_t i9[18] = {1, 4, 5, 0, 8, 3, 2, 9, 6, 8, 4, 5, 1, 9, 6, 7, 0, 3};
    EXPECT_TRUE(topk_call_case("[2,10]", "[2,9]", "[2,9]", 9, rows, 20, v9, i9));
    /* the fast kernel (what the compiled program runs) against the reference */
    char text[2048];
    snprintf(text, sizeof text,
             "HloModule tkr\n%sENTRY e {\n  x = f32[37,400] parameter(0)\n"
             "  ROOT t = (f32[37,40], s32[37,40]) custom-call(x), custom_call_target=\"TopK\", "
             "called_computations={gt}\n}\n",
             k_topk_gt);
    EXPECT_TRUE(check_hlo(text, false, true));
    /* a less-than comparator (the k smallest) is not what XLA's TopK computes: refused */
    char lt[sizeof k_topk_gt + 16];
    snprintf(lt, sizeof lt, "%s", k_topk_gt);
    char *dir = strstr(lt, "direction=GT");
    if (dir) memcpy(dir + 10, "LT", 2);
    snprintf(text, sizeof text,
             "HloModule tkl\n%sENTRY e {\n  x = f32[3,50] parameter(0)\n"
             "  ROOT t = (f32[3,4], s32[3,4]) custom-call(x), custom_call_target=\"TopK\", "
             "called_computations={gt}\n}\n",
             lt);
    ot_module *m = NULL;
    EXPECT_STATUS(ot_hlo_parse(text, strlen(text), NULL, &m), OT_ERR_UNIMPLEMENTED);
    EXPECT_STR_CONTAINS(ot_last_error(), "greater-than");
    ot_module_free(m);
    /* a result that is not (values, s32 indices) */
    snprintf(text, sizeof text,
             "HloModule tkb\n%sENTRY e {\n  x = f32[3,50] parameter(0)\n"
             "  ROOT t = f32[3,4] custom-call(x), custom_call_target=\"TopK\", "
             "called_computations={gt}\n}\n",
             k_topk_gt);
    m = NULL;
    EXPECT_STATUS(ot_hlo_parse(text, strlen(text), NULL, &m), OT_ERR_INVALID_ARGUMENT);
    ot_module_free(m);
}

/* Comparators the fast sort leaves to the reference: a float compare (NaNs unordered), the
 * parameters swapped, a lexicographic sort of two operands, a key from the second operand. */
static void test_sort_fallbacks(void) {
    EXPECT_TRUE(check_hlo("HloModule f2\ncmp {\n  a = s32[] parameter(0)\n"
                          "  b = s32[] parameter(1)\n  c = s32[] parameter(2)\n"
                          "  d = s32[] parameter(3)\n  lt = pred[] compare(a, b), direction=LT\n"
                          "  eq = pred[] compare(a, b), direction=EQ\n"
                          "  lt2 = pred[] compare(c, d), direction=LT\n"
                          "  both = pred[] and(eq, lt2)\n  ROOT r = pred[] or(lt, both)\n}\n"
                          "ENTRY e {\n  x = s32[50] parameter(0)\n  y = s32[50] parameter(1)\n"
                          "  ROOT s = (s32[50], s32[50]) sort(x, y), dimensions={0}, "
                          "is_stable=true, to_apply=cmp\n}\n",
                          false, false));
    EXPECT_TRUE(check_hlo("HloModule f3\ncmp {\n  a = f32[] parameter(0)\n"
                          "  b = f32[] parameter(1)\n  c = s32[] parameter(2)\n"
                          "  d = s32[] parameter(3)\n  ROOT r = pred[] compare(c, d), "
                          "direction=LT\n}\nENTRY e {\n  x = f32[50] parameter(0)\n"
                          "  y = s32[50] parameter(1)\n  ROOT s = (f32[50], s32[50]) sort(x, y), "
                          "dimensions={0}, is_stable=true, to_apply=cmp\n}\n",
                          false, false));
    EXPECT_TRUE(check_hlo("HloModule f0\ncmp {\n  a = f32[] parameter(0)\n"
                          "  b = f32[] parameter(1)\n  ROOT r = pred[] compare(a, b), "
                          "direction=LT\n}\nENTRY e {\n  x = f32[40,9] parameter(0)\n"
                          "  ROOT s = f32[40,9] sort(x), dimensions={0}, to_apply=cmp\n}\n",
                          false, false));
    EXPECT_TRUE(check_hlo("HloModule f1\ncmp {\n  a = s32[] parameter(0)\n"
                          "  b = s32[] parameter(1)\n  ROOT r = pred[] compare(b, a), "
                          "direction=LT\n}\nENTRY e {\n  x = s32[40,9] parameter(0)\n"
                          "  ROOT s = s32[40,9] sort(x), dimensions={1}, to_apply=cmp\n}\n",
                          false, false));
}

/* argmax/argmin as JAX writes them: a reduce of (values, indices) whose reducer picks the
 * accumulator's pair when its value is larger (smaller) or NaN, and the smaller index on equal
 * values; also with the selects taking the input's pair first and the or/and operands swapped.
 * Values with ties, both zeros, infinities, subnormals (FTZ and IEEE) and NaN payloads; indices
 * (random, so ties are decided by the index rule) and inits of every kind; along each dim and
 * over two dims. A reducer that differs (LE on the indices) stays with the reference. */
static void argreduce_hlo(char *buf, size_t n, const char *vt, const char *it, const char *dir,
                          bool input_first, bool swap, const char *ilt, const char *shape,
                          const char *oshape, const char *dims) {
    const char *a = input_first ? "c" : "a", *b = input_first ? "a" : "c";
    const char *ia = input_first ? "d" : "b", *ib = input_first ? "b" : "d";
    snprintf(buf, n,
             "HloModule arg\nred {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
             "  c = %s[] parameter(2)\n  d = %s[] parameter(3)\n"
             "  g = pred[] compare(%s, %s), direction=%s\n"
             "  n = pred[] compare(%s, %s), direction=NE\n  p = pred[] or(%s, %s)\n"
             "  sv = %s[] select(p, %s, %s)\n  e = pred[] compare(%s, %s), direction=EQ\n"
             "  l = pred[] compare(%s, %s), direction=%s\n  q = pred[] and(%s, %s)\n"
             "  r = pred[] or(%s, %s)\n  si = %s[] select(r, %s, %s)\n"
             "  ROOT t = (%s[], %s[]) tuple(sv, si)\n}\n"
             "ENTRY e {\n  x = %s[%s] parameter(0)\n  i = %s[%s] parameter(1)\n"
             "  xi = %s[] parameter(2)\n  ii = %s[] parameter(3)\n"
             "  ROOT o = (%s[%s], %s[%s]) reduce(x, i, xi, ii), dimensions={%s}, to_apply=red\n}\n",
             vt, it, vt, it, a, b, dir, a, a, swap ? "n" : "g", swap ? "g" : "n", vt, a, b,
             swap ? b : a, swap ? a : b, ia, ib, ilt, swap ? "l" : "e", swap ? "e" : "l",
             swap ? "q" : "p", swap ? "p" : "q", it, ia, ib, vt, it, vt, shape, it, shape, vt, it,
             vt, oshape, it, oshape, dims);
}

static void test_argreduce(void) {
    g_rng = 0xa29;
    static const char *shapes[][3] = {
        {"37,29", "37", "1"},       {"37,29", "29", "0"},       {"1,300", "1", "1"},
        {"5,7,9", "7", "0,2"},      {"5,7,9", "5,9", "1"},      {"3,0,4", "3,4", "1"},
        {"2,1000", "2", "1"},       {"3000,40", "40", "0"},     {"4,1,33", "4,1", "2"},
        {"6,4096", "6", "1"},       {"32,48,48", "32,48", "1"}, {"9,70,130", "9,130", "1"},
        {"6,5,3,67", "5,67", "0,2"}};
    char hlo[2048];
    for (int cs = 0; cs < 78; cs++) {
        const char *vt = cs % 2 ? "f64" : "f32", *it = (cs / 2) % 2 ? "s64" : "s32";
        const char *dir = (cs / 4) % 2 ? "LT" : "GT";
        bool input_first = cs % 8 >= 6, swap = cs % 3 == 0;
        const char *const *sh = shapes[cs % 13];
        argreduce_hlo(hlo, sizeof hlo, vt, it, dir, input_first, swap, "LT", sh[0], sh[1], sh[2]);
        EXPECT_TRUE(check_hlo(hlo, cs % 5 == 0, true));
    }
    /* f32 values, s32 indices over trailing dims: 16 rows side by side (arg_short_*), whatever
     * the reducer's form; rows past the last 16 (333 = 20 x 16 + 13), short and long rows, two
     * reduced dims */
    static const char *rows[][3] = {{"20000,10", "20000", "1"}, {"333,7", "333", "1"},
                                    {"50,4,3", "50", "1,2"},    {"40,2", "40", "1"},
                                    {"16,300", "16", "1"},      {"6,20,9", "6,20", "2"}};
    for (int cs = 0; cs < 48; cs++) {
        const char *dir = cs % 2 ? "LT" : "GT";
        bool input_first = (cs / 2) % 2, swap = (cs / 4) % 2;
        const char *const *sh = rows[cs % 6];
        argreduce_hlo(hlo, sizeof hlo, "f32", "s32", dir, input_first, swap, "LT", sh[0], sh[1],
                      sh[2]);
        EXPECT_TRUE(check_hlo(hlo, cs % 3 == 0, true));
    }
    argreduce_hlo(hlo, sizeof hlo, "f32", "s32", "GT", false, false, "LE", "37,29", "37", "1");
    EXPECT_TRUE(check_hlo(hlo, false, false));
    argreduce_hlo(hlo, sizeof hlo, "f32", "s32", "GE", false, false, "LT", "37,29", "37", "1");
    EXPECT_TRUE(check_hlo(hlo, false, false));
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

OT_TEST_MAIN(OT_TEST(test_setup), OT_TEST(test_sort_random), OT_TEST(test_topk_random),
             OT_TEST(test_topk_custom_call), OT_TEST(test_sort_fallbacks), OT_TEST(test_argreduce),
             OT_TEST(test_teardown))
