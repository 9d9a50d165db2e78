/* The fast data-movement kernels (src/exec/fast_shape.c) against the reference kernels
 * (src/exec/shape_ops.c): slice (strided too), dynamic-slice and dynamic-update-slice (start
 * indices out of range, clamped; in place on a donated operand), concatenate, pad (negative and
 * interior padding), broadcast and reverse over random shapes of rank 1 to 5 with unit dims, on
 * u8, s16, f32 and f64 and on sizes that split over the pool and into pieces of long runs. Each
 * module is one op compiled at -O0, run with reference kernels and then with fast kernels on pools
 * of 1, 2, 3 and 8 threads: every result bit for bit equal to the reference, and the fast kernel
 * must have run. */
#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#include <stdarg.h>

static uint64_t g_rng = 0x5a1ce;

static uint64_t next_u64(void) {
    return ot_test_splitmix64(&g_rng);
}
static int64_t rnd(int64_t lo, int64_t hi) { /* [lo, hi] */
    return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1));
}

static ot_threadpool *g_pools[4];
static const int g_nthreads[4] = {1, 2, 3, 8};

enum { MAXARGS = 16 };

/* Every byte random: bit patterns of every kind, NaNs included (copies must keep them). */
static void fill_bytes(ot_tensor *t) {
    for (size_t k = 0; k < t->nbytes; k++)
        ((unsigned char *)t->data)[k] = (unsigned char)next_u64();
}

/* Runs exe on args into a fresh *out; pool NULL: reference kernels. donate: parameter 0 is the
 * output's buffer (the module aliases them), holding parameter 0's values. */
static ot_status run_exe(const ot_executable *exe, const ot_tensor *args, int nargs, ot_tensor *out,
                         ot_threadpool *pool, bool reference, bool donate, int *fast_run) {
    int32_t os = ot_executable_output_slot(exe, 0);
    const ot_slot *sl = ot_executable_slot(exe, os);
    OT_CHECK(ot_tensor_alloc(out, &sl->shape));
    int64_t an = ot_executable_arena_size(exe);
    void *arena = an ? ot_aligned_alloc(64, (size_t)an) : NULL;
    void *params[MAXARGS];
    for (int k = 0; k < nargs; k++) params[k] = args[k].data;
    if (donate) {
        memcpy(out->data, args[0].data, out->nbytes);
        params[0] = out->data;
    }
    void *outs[1] = {out->data};
    ot_run_options o = ot_run_options_default();
    o.reference_kernels = reference;
    o.pool = pool;
    ot_run_result r;
    ot_status st = ot_execute_on_host(exe, arena, params, outs, &o, 0, &r);
    if (fast_run) *fast_run = r.fast_kernels_run;
    ot_aligned_free(arena);
    if (st != OT_OK) ot_tensor_release(out);
    return st;
}

static bool bits_equal(const ot_tensor *a, const ot_tensor *b) {
    return a->nbytes == b->nbytes && (a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes));
}

/* Parses, compiles at -O`opt` (native code off) and checks the fast kernel against the reference on
 * every pool. Parameters named i* are scalar start indices, filled in [-2, 2 + hi] (out of range
 * too). */
static void check_module(const char *hlo, int64_t hi, bool donate, const char *what, int opt) {
    ot_module *m = NULL;
    if (ot_hlo_parse(hlo, strlen(hlo), NULL, &m) != OT_OK) {
        fprintf(stderr, "%s: %s\n%s\n", what, ot_last_error(), hlo);
        EXPECT_TRUE(false);
        return;
    }
    ot_compile_options co = ot_compile_options_default();
    co.opt_level = opt;
    co.native = OT_NATIVE_OFF;
    ot_executable *e = NULL;
    if (ot_compile(m, &co, &e) != OT_OK) {
        fprintf(stderr, "%s: compile: %s\n", what, ot_last_error());
        EXPECT_TRUE(false);
        ot_module_free(m);
        return;
    }
    const ot_computation *c = ot_module_entry(m);
    int n = c->nparams;
    ot_tensor args[MAXARGS];
    for (int a = 0; a < n; a++) {
        ASSERT_OK(ot_tensor_alloc(&args[a], &c->params[a]->shape.array));
        if (args[a].shape.rank == 0 && ot_dtype_is_integer(args[a].shape.dtype)) {
            int64_t v = rnd(-2, hi + 2);
            if (args[a].shape.dtype == OT_U64 && rnd(0, 3) == 0) v = -1; /* above INT64_MAX */
            memcpy(args[a].data, &v, args[a].nbytes); /* little-endian low bytes */
        } else {
            fill_bytes(&args[a]);
        }
    }
    ot_tensor ref;
    EXPECT_OK(run_exe(e, args, n, &ref, NULL, true, donate, NULL));
    for (int p = 0; p < 4; p++) {
        ot_tensor t;
        int fr = 0;
        if (run_exe(e, args, n, &t, g_pools[p], false, donate, &fr) != OT_OK) {
            fprintf(stderr, "%s: fast run: %s\n", what, ot_last_error());
            EXPECT_TRUE(false);
            continue;
        }
        bool nfast = opt == 0 ? fr == 1 : fr >= 1; /* -O1: other kernels may be fast too */
        if (!nfast || !bits_equal(&t, &ref))
            fprintf(stderr, "%s, %d threads: %d fast kernels, %s\n%s\n", what, g_nthreads[p], fr,
                    bits_equal(&t, &ref) ? "equal" : "DIFFERS", hlo);
        EXPECT_TRUE(nfast);
        EXPECT_TRUE(bits_equal(&t, &ref));
        ot_tensor_release(&t);
    }
    ot_tensor_release(&ref);
    for (int a = 0; a < n; a++) ot_tensor_release(&args[a]);
    ot_executable_free(e);
    ot_module_free(m);
}

/* ---- HLO text ----------------------------------------------------------------------------- */

typedef struct buf {
    char s[8192];
    size_t n;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->s + b->n, sizeof b->s - b->n, fmt, ap);
    va_end(ap);
    if (w > 0) b->n += (size_t)w < sizeof b->s - b->n ? (size_t)w : sizeof b->s - b->n - 1;
}

static void put_shape(buf *b, const char *t, int r, const int64_t *d) {
    put(b, "%s[", t);
    for (int k = 0; k < r; k++) put(b, "%s%lld", k ? "," : "", (long long)d[k]);
    put(b, "]");
}

static void put_list(buf *b, int n, const int64_t *v) {
    put(b, "{");
    for (int k = 0; k < n; k++) put(b, "%s%lld", k ? "," : "", (long long)v[k]);
    put(b, "}");
}

static const char *const k_types[] = {"u8", "s16", "f32", "f64"};

/* Random dims of rank r: mostly small, some 1s, occasionally one large dim (so the kernel splits
 * over the pool) when big. */
static void rand_dims(int r, int64_t *d, bool big) {
    for (int k = 0; k < r; k++) d[k] = rnd(0, 4) == 0 ? 1 : rnd(2, r <= 2 ? 40 : 9);
    if (big) d[rnd(0, r - 1)] = rnd(2000, 6000) / (r <= 2 ? 1 : 8);
}

static void test_slice(void) {
    g_rng = 0x511ce;
    for (int cs = 0; cs < 80; cs++) {
        const char *t = k_types[cs % 4];
        int r = (int)rnd(1, 5);
        int64_t d[OT_MAX_RANK], o[OT_MAX_RANK], st[OT_MAX_RANK], li[OT_MAX_RANK], sd[OT_MAX_RANK];
        rand_dims(r, d, cs % 5 == 0);
        for (int k = 0; k < r; k++) {
            st[k] = rnd(0, d[k] - 1);
            li[k] = rnd(st[k] + 1, d[k]);
            sd[k] = rnd(0, 2) == 0 ? rnd(1, 3) : 1;
            o[k] = (li[k] - st[k] + sd[k] - 1) / sd[k];
        }
        buf b = {0};
        put(&b, "HloModule s\nENTRY e {\n  x = ");
        put_shape(&b, t, r, d);
        put(&b, " parameter(0)\n  ROOT y = ");
        put_shape(&b, t, r, o);
        put(&b, " slice(x), slice={");
        for (int k = 0; k < r; k++)
            put(&b, "%s[%lld:%lld:%lld]", k ? ", " : "", (long long)st[k], (long long)li[k],
                (long long)sd[k]);
        put(&b, "}\n}\n");
        check_module(b.s, 0, false, "slice", 0);
    }
    /* one long contiguous run (pieces over the pool), and the transformer's QKV split */
    check_module("HloModule s\nENTRY e {\n  x = f32[300001] parameter(0)\n"
                 "  ROOT y = f32[299990] slice(x), slice={[7:299997]}\n}\n",
                 0, false, "long slice", 0);
    check_module("HloModule s\nENTRY e {\n  x = f32[8,128,3,4,64] parameter(0)\n"
                 "  ROOT y = f32[8,128,1,4,64] slice(x), slice={[0:8], [0:128], [1:2], [0:4], "
                 "[0:64]}\n}\n",
                 0, false, "qkv slice", 0);
}

static void test_dynamic_slice(void) {
    g_rng = 0xd5;
    static const char *const itypes[] = {"s32", "s64", "u32", "u64", "s8"};
    for (int cs = 0; cs < 60; cs++) {
        const char *t = k_types[cs % 4], *it = itypes[cs % 5];
        int r = (int)rnd(1, 5);
        int64_t d[OT_MAX_RANK], o[OT_MAX_RANK], hi = 0;
        rand_dims(r, d, cs % 6 == 0);
        for (int k = 0; k < r; k++) {
            o[k] = rnd(1, d[k]);
            if (d[k] > hi) hi = d[k];
        }
        buf b = {0};
        put(&b, "HloModule s\nENTRY e {\n  x = ");
        put_shape(&b, t, r, d);
        put(&b, " parameter(0)\n");
        for (int k = 0; k < r; k++) put(&b, "  i%d = %s[] parameter(%d)\n", k, it, k + 1);
        put(&b, "  ROOT y = ");
        put_shape(&b, t, r, o);
        put(&b, " dynamic-slice(x");
        for (int k = 0; k < r; k++) put(&b, ", i%d", k);
        put(&b, "), dynamic_slice_sizes=");
        put_list(&b, r, o);
        put(&b, "\n}\n");
        check_module(b.s, hi, false, "dynamic-slice", 0);
    }
}

static void test_dynamic_update_slice(void) {
    g_rng = 0xd05;
    for (int cs = 0; cs < 60; cs++) {
        const char *t = k_types[cs % 4];
        bool donate = cs % 3 == 0;
        int r = (int)rnd(1, 5);
        int64_t d[OT_MAX_RANK], u[OT_MAX_RANK], hi = 0;
        rand_dims(r, d, cs % 7 == 0);
        for (int k = 0; k < r; k++) {
            u[k] = rnd(1, d[k]);
            if (d[k] > hi) hi = d[k];
        }
        buf b = {0};
        put(&b, "HloModule s%s\nENTRY e {\n  x = ",
            donate ? ", input_output_alias={ {}: (0, {}, may-alias) }" : "");
        put_shape(&b, t, r, d);
        put(&b, " parameter(0)\n  u = ");
        put_shape(&b, t, r, u);
        put(&b, " parameter(1)\n");
        for (int k = 0; k < r; k++) put(&b, "  i%d = s32[] parameter(%d)\n", k, k + 2);
        put(&b, "  ROOT y = ");
        put_shape(&b, t, r, d);
        put(&b, " dynamic-update-slice(x, u");
        for (int k = 0; k < r; k++) put(&b, ", i%d", k);
        put(&b, ")\n}\n");
        check_module(b.s, hi, donate,
                     donate ? "dynamic-update-slice (donated)" : "dynamic-update-slice", 0);
    }
}

/* A dynamic-update-slice whose operand is a temporary dying there (at -O1) or a donated
 * parameter writes into its operand's buffer: the kernel runs in place, same bits. */
static void test_dynamic_update_slice_in_place(void) {
    g_rng = 0x1dd;
    static const char *const hlo[] = {
        "HloModule s\nENTRY e {\n  p = f32[300,64] parameter(0)\n  u = f32[40,64] parameter(1)\n"
        "  i = s32[] parameter(2)\n  j = s32[] parameter(3)\n  x = f32[300,64] sine(p)\n"
        "  d = f32[300,64] dynamic-update-slice(x, u, i, j)\n"
        "  ROOT r = f32[300,64] cosine(d)\n}\n",
        "HloModule s, input_output_alias={ {}: (0, {}, may-alias) }\nENTRY e {\n"
        "  x = f64[50,7,9] parameter(0)\n  u = f64[3,7,2] parameter(1)\n  i = s32[] parameter(2)\n"
        "  j = s32[] parameter(3)\n  k = s32[] parameter(4)\n"
        "  ROOT d = f64[50,7,9] dynamic-update-slice(x, u, i, j, k)\n}\n",
    };
    for (int h = 0; h < 2; h++) {
        ot_module *m = NULL;
        ASSERT_OK(ot_hlo_parse(hlo[h], strlen(hlo[h]), NULL, &m));
        ot_compile_options co = ot_compile_options_default();
        co.opt_level = 1;
        co.native = OT_NATIVE_OFF;
        ot_executable *e = NULL;
        ASSERT_OK(ot_compile(m, &co, &e));
        int found = 0;
        for (int k = 0; k < ot_executable_kernel_count(e); k++) {
            const ot_kernel *kn = ot_executable_kernel(e, k);
            if (kn->opcode != OT_OP_DYNAMIC_UPDATE_SLICE) continue;
            found++;
            if (h == 0)
                EXPECT_INT_EQ(ot_executable_slot(e, kn->outputs[0])->offset,
                              ot_executable_slot(e, kn->inputs[0])->offset);
        }
        EXPECT_INT_EQ(found, 1);
        EXPECT_INT_EQ(ot_executable_kernel_count(e), h == 0 ? 3 : 1); /* no donation copy */
        ot_executable_free(e);
        ot_module_free(m);
        for (int rep = 0; rep < 8; rep++) check_module(hlo[h], 300, h == 1, "in-place DUS", 1);
    }
}

static void test_concatenate(void) {
    g_rng = 0xc0c;
    for (int cs = 0; cs < 60; cs++) {
        const char *t = k_types[cs % 4];
        int r = (int)rnd(1, 5), n = (int)rnd(1, 4), cd = (int)rnd(0, r - 1);
        int64_t d[OT_MAX_RANK], o[OT_MAX_RANK], part[4];
        rand_dims(r, d, cs % 6 == 0);
        memcpy(o, d, sizeof o);
        o[cd] = 0;
        for (int k = 0; k < n; k++) {
            part[k] = rnd(0, 5) == 0 ? 1 : rnd(1, 7); /* single slices too */
            o[cd] += part[k];
        }
        buf b = {0};
        put(&b, "HloModule s\nENTRY e {\n");
        for (int k = 0; k < n; k++) {
            d[cd] = part[k];
            put(&b, "  x%d = ", k);
            put_shape(&b, t, r, d);
            put(&b, " parameter(%d)\n", k);
        }
        put(&b, "  ROOT y = ");
        put_shape(&b, t, r, o);
        put(&b, " concatenate(");
        for (int k = 0; k < n; k++) put(&b, "%sx%d", k ? ", " : "", k);
        put(&b, "), dimensions={%d}\n}\n", cd);
        check_module(b.s, 0, false, "concatenate", 0);
    }
}

static void test_pad(void) {
    g_rng = 0xbad;
    for (int cs = 0; cs < 80; cs++) {
        const char *t = k_types[cs % 4];
        int r = (int)rnd(1, 5);
        int64_t d[OT_MAX_RANK], o[OT_MAX_RANK], lo[OT_MAX_RANK], hi[OT_MAX_RANK], in[OT_MAX_RANK];
        rand_dims(r, d, cs % 8 == 0);
        for (int k = 0; k < r; k++) {
            in[k] = rnd(0, 2) == 0 ? rnd(1, 2) : 0;
            int64_t span = d[k] + (d[k] - 1) * in[k];
            lo[k] = rnd(-span / 2 - 1, 3);
            hi[k] = rnd(-span / 2 - 1, 3);
            o[k] = lo[k] + span + hi[k];
            if (o[k] < 0) { /* not a valid pad: no cropping on the high side */
                hi[k] = 0;
                o[k] = lo[k] + span;
            }
            if (o[k] < 0) {
                lo[k] = 0;
                o[k] = span;
            }
        }
        buf b = {0};
        put(&b, "HloModule s\nENTRY e {\n  x = ");
        put_shape(&b, t, r, d);
        put(&b, " parameter(0)\n  v = %s[] parameter(1)\n  ROOT y = ", t);
        put_shape(&b, t, r, o);
        put(&b, " pad(x, v), padding=");
        for (int k = 0; k < r; k++)
            put(&b, "%s%lld_%lld_%lld", k ? "x" : "", (long long)lo[k], (long long)hi[k],
                (long long)in[k]);
        put(&b, "\n}\n");
        check_module(b.s, 0, false, "pad", 0);
    }
}

static void test_broadcast(void) {
    g_rng = 0xb0;
    for (int cs = 0; cs < 60; cs++) {
        const char *t = k_types[cs % 4];
        int r = (int)rnd(1, 5), xr = (int)rnd(0, r);
        int64_t d[OT_MAX_RANK], xd[OT_MAX_RANK], map[OT_MAX_RANK];
        rand_dims(r, d, cs % 6 == 0);
        /* xr result dims in increasing order (HLO broadcast keeps the operand's order) */
        int k = 0;
        for (int q = 0; q < r && k < xr; q++)
            if (rnd(0, r - q - 1) < xr - k) {
                map[k] = q;
                xd[k] = d[q];
                k++;
            }
        buf b = {0};
        put(&b, "HloModule s\nENTRY e {\n  x = ");
        put_shape(&b, t, xr, xd);
        put(&b, " parameter(0)\n  ROOT y = ");
        put_shape(&b, t, r, d);
        put(&b, " broadcast(x), dimensions=");
        put_list(&b, xr, map);
        put(&b, "\n}\n");
        check_module(b.s, 0, false, "broadcast", 0);
    }
}

static void test_reverse(void) {
    g_rng = 0x4e5;
    for (int cs = 0; cs < 60; cs++) {
        const char *t = k_types[cs % 4];
        int r = (int)rnd(1, 5), nd = 0;
        int64_t d[OT_MAX_RANK], rv[OT_MAX_RANK];
        rand_dims(r, d, cs % 6 == 0);
        for (int k = 0; k < r; k++)
            if (rnd(0, 1)) rv[nd++] = k;
        buf b = {0};
        put(&b, "HloModule s\nENTRY e {\n  x = ");
        put_shape(&b, t, r, d);
        put(&b, " parameter(0)\n  ROOT y = ");
        put_shape(&b, t, r, d);
        put(&b, " reverse(x), dimensions=");
        put_list(&b, nd, rv);
        put(&b, "\n}\n");
        check_module(b.s, 0, false, "reverse", 0);
    }
}

static void test_setup(void) {
    for (int k = 0; k < 4; k++)
        if (!g_pools[k]) ASSERT_OK(ot_threadpool_create(g_nthreads[k], &g_pools[k]));
    EXPECT_INT_EQ(ot_threadpool_size(g_pools[3]), 8);
}

static void test_teardown(void) {
    for (int k = 0; k < 4; k++) {
        ot_threadpool_free(g_pools[k]);
        g_pools[k] = NULL;
    }
    EXPECT_TRUE(true);
}

OT_TEST_MAIN(OT_TEST(test_setup), OT_TEST(test_slice), OT_TEST(test_dynamic_slice),
             OT_TEST(test_dynamic_update_slice), OT_TEST(test_dynamic_update_slice_in_place),
             OT_TEST(test_concatenate), OT_TEST(test_pad), OT_TEST(test_broadcast),
             OT_TEST(test_reverse), OT_TEST(test_teardown))
