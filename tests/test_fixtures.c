/* Fixtures made by the peer scripts (scripts/gen_jax_corpus.py, scripts/gen_optim_fixtures.py):
 * every index parses with jansson and has the documented fields (tests/data/README.md,
 * tests/data/optim/README.md); every .npy it names loads with ot_npy_read_file with the recorded
 * dtype and shape (bf16 stored as uint16 bit patterns); SPMD files have one row per partition;
 * cross-references hold (VJP grads match their inputs, trajectories have one row per step, skipped
 * mixed-precision steps leave the parameters unchanged). The checker itself refuses broken entries
 * with a message naming the problem. */
#include "ot_test.h"
#include "ot_fixture.h"

#include "exec/expf_poly.h"

#include <dirent.h>
#include <stdarg.h>
#include <jansson.h>

#define DATA_DIR OT_SOURCE_DIR "/tests/data/"

/* ---- the checker ------------------------------------------------------------------------------
 */

typedef struct checker {
    char err[512]; /* first problem found */
    int problems;
    int files; /* tensors loaded and matched */
} checker;

static void problem(checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(checker *c, const char *fmt, ...) {
    if (c->problems++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        va_end(ap);
    }
}

/* Reads the start of a text file into buf (NUL-terminated). */
static bool read_head(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t got = fread(buf, 1, n - 1, f);
    buf[got] = '\0';
    fclose(f);
    return got > 0;
}

/* The dtype a stored file must have: bf16 lives in the file as u16 bit patterns. */
static ot_dtype stored_dtype(ot_dtype real) {
    return real == OT_BF16 ? OT_U16 : real;
}

/* Checks one {"file","dtype","shape","npy_descr"} entry against the file it names under dir.
 * On success *out (if not NULL) receives the tensor relabelled with its real dtype; the caller
 * releases it. Returns false (and records the problem) on any mismatch. */
static bool check_tensor(checker *c, const char *dir, const json_t *e, const char *what,
                         ot_tensor *out) {
    const char *file = json_string_value(json_object_get(e, "file"));
    const char *dts = json_string_value(json_object_get(e, "dtype"));
    const char *descr = json_string_value(json_object_get(e, "npy_descr"));
    const json_t *shape = json_object_get(e, "shape");
    if (!json_is_object(e) || !file || !dts || !descr || !json_is_array(shape)) {
        problem(c, "%s: entry needs file, dtype, shape and npy_descr", what);
        return false;
    }
    ot_dtype dt = ot_dtype_from_name(dts, strlen(dts));
    if (dt == OT_DTYPE_INVALID) {
        problem(c, "%s: unknown dtype '%s'", what, dts);
        return false;
    }
    size_t rank = json_array_size(shape);
    if (rank > OT_MAX_RANK) {
        problem(c, "%s: rank %zu exceeds %d", what, rank, OT_MAX_RANK);
        return false;
    }
    int64_t dims[OT_MAX_RANK];
    for (size_t i = 0; i < rank; i++) {
        const json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0) {
            problem(c, "%s: shape[%zu] is not a non-negative integer", what, i);
            return false;
        }
        dims[i] = (int64_t)json_integer_value(d);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    ot_tensor t;
    ot_status s = ot_npy_read_file(path, &t);
    if (s != OT_OK) {
        problem(c, "%s: %s: %s", what, file, ot_last_error());
        return false;
    }
    bool ok = true;
    if (t.shape.dtype != stored_dtype(dt)) {
        problem(c, "%s: %s holds %s, index says %s (stored as %s)", what, file,
                ot_dtype_name(t.shape.dtype), dts, ot_dtype_name(stored_dtype(dt)));
        ok = false;
    } else if ((size_t)t.shape.rank != rank) {
        problem(c, "%s: %s has rank %d, index says %zu", what, file, t.shape.rank, rank);
        ok = false;
    } else {
        for (size_t i = 0; i < rank; i++) {
            if (t.shape.dims[i] != dims[i]) {
                problem(c, "%s: %s dim %zu is %" PRId64 ", index says %" PRId64, what, file, i,
                        t.shape.dims[i], dims[i]);
                ok = false;
                break;
            }
        }
    }
    /* The header's descr must be what the index says (e.g. '<u2' for bf16). */
    static const char *descr_of[OT_DTYPE_COUNT] = {
        [OT_PRED] = "|b1", [OT_S8] = "|i1",  [OT_S16] = "<i2",  [OT_S32] = "<i4",
        [OT_S64] = "<i8",  [OT_U8] = "|u1",  [OT_U16] = "<u2",  [OT_U32] = "<u4",
        [OT_U64] = "<u8",  [OT_F16] = "<f2", [OT_BF16] = "<u2", [OT_F32] = "<f4",
        [OT_F64] = "<f8",  [OT_C64] = "<c8", [OT_C128] = "<c16"};
    if (ok && strcmp(descr, descr_of[dt]) != 0) {
        problem(c, "%s: npy_descr '%s' does not match dtype %s (expected '%s')", what, descr, dts,
                descr_of[dt]);
        ok = false;
    }
    if (!ok) {
        ot_tensor_release(&t);
        return false;
    }
    c->files++;
    t.shape.dtype = dt;
    if (out)
        *out = t;
    else
        ot_tensor_release(&t);
    return true;
}

static bool check_tolerance(checker *c, const json_t *tol, const char *what) {
    if (!json_is_object(tol)) {
        problem(c, "%s: tolerance is not an object", what);
        return false;
    }
    if (json_is_true(json_object_get(tol, "exact"))) return true;
    int criteria = 0;
    static const char *keys[] = {"ulp", "atol", "rtol"};
    for (size_t i = 0; i < 3; i++) {
        const json_t *v = json_object_get(tol, keys[i]);
        if (!v) continue;
        if (!json_is_number(v) || json_number_value(v) < 0) {
            problem(c, "%s: tolerance %s must be a non-negative number", what, keys[i]);
            return false;
        }
        criteria++;
    }
    if (!criteria) problem(c, "%s: tolerance has neither exact nor ulp/atol/rtol", what);
    return criteria > 0;
}

static bool same_shape(const ot_tensor *a, const ot_tensor *b) {
    return ot_shape_equal(&a->shape, &b->shape);
}

static void release_all(ot_tensor *t, size_t n) {
    for (size_t i = 0; i < n; i++) ot_tensor_release(&t[i]);
}

#define MAX_IO 32

/* One corpus case: module files, inputs, outputs, tolerance, and the optional vjp block. */
static void check_jax_case(checker *c, const json_t *cs) {
    const char *name = json_string_value(json_object_get(cs, "name"));
    if (!name || !*name || strchr(name, '/')) {
        problem(c, "case without a valid name");
        return;
    }
    char dir[512], path[1024], head[64];
    snprintf(dir, sizeof dir, DATA_DIR "jax/%s", name);
    const char *mods[] = {"module", "module_optimized"};
    for (size_t i = 0; i < 2; i++) {
        const char *m = json_string_value(json_object_get(cs, mods[i]));
        snprintf(path, sizeof path, "%s/%s", dir, m ? m : "");
        if (!m || !read_head(path, head, sizeof head) || strncmp(head, "HloModule ", 10) != 0)
            problem(c, "%s: %s missing or not HLO text", name, mods[i]);
    }
    if (!json_is_array(json_object_get(cs, "ops")) ||
        !json_is_string(json_object_get(cs, "group")) ||
        !json_is_boolean(json_object_get(cs, "result_is_tuple")))
        problem(c, "%s: needs ops, group and result_is_tuple", name);
    check_tolerance(c, json_object_get(cs, "tolerance"), name);

    const json_t *ins = json_object_get(cs, "inputs"), *outs = json_object_get(cs, "outputs");
    if (!json_is_array(ins) || !json_is_array(outs) || json_array_size(outs) == 0 ||
        json_array_size(ins) > MAX_IO || json_array_size(outs) > MAX_IO) {
        problem(c, "%s: inputs/outputs missing or out of range", name);
        return;
    }
    if (!json_is_true(json_object_get(cs, "result_is_tuple")) && json_array_size(outs) != 1)
        problem(c, "%s: a non-tuple result must have exactly one output", name);
    ot_tensor in[MAX_IO] = {0}, out[MAX_IO] = {0};
    char what[600];
    for (size_t i = 0; i < json_array_size(ins); i++) {
        snprintf(what, sizeof what, "%s input %zu", name, i);
        check_tensor(c, dir, json_array_get(ins, i), what, &in[i]);
    }
    for (size_t i = 0; i < json_array_size(outs); i++) {
        snprintf(what, sizeof what, "%s output %zu", name, i);
        check_tensor(c, dir, json_array_get(outs, i), what, &out[i]);
    }

    const json_t *vjp = json_object_get(cs, "vjp");
    if (vjp) {
        const char *m = json_string_value(json_object_get(vjp, "module"));
        snprintf(path, sizeof path, "%s/%s", dir, m ? m : "");
        if (!m || !read_head(path, head, sizeof head) || strncmp(head, "HloModule ", 10) != 0)
            problem(c, "%s: vjp module missing", name);
        snprintf(what, sizeof what, "%s vjp", name);
        check_tolerance(c, json_object_get(vjp, "tolerance"), what);
        const json_t *wrt = json_object_get(vjp, "wrt"), *grads = json_object_get(vjp, "grads");
        const json_t *ow = json_object_get(vjp, "outputs_with_cotangent");
        const json_t *cts = json_object_get(vjp, "cotangents");
        if (!json_is_array(wrt) || !json_is_array(grads) || !json_is_array(ow) ||
            !json_is_array(cts) || json_array_size(wrt) != json_array_size(grads) ||
            json_array_size(ow) != json_array_size(cts) || json_array_size(wrt) == 0) {
            problem(c,
                    "%s: vjp needs wrt/grads and outputs_with_cotangent/cotangents of equal "
                    "lengths",
                    name);
        } else {
            for (size_t k = 0; k < json_array_size(wrt); k++) {
                json_int_t i = json_integer_value(json_array_get(wrt, k));
                snprintf(what, sizeof what, "%s vjp grad %zu", name, k);
                ot_tensor g = {0};
                if (i < 0 || (size_t)i >= json_array_size(ins)) {
                    problem(c, "%s: wrt index %lld out of range", what, (long long)i);
                } else if (check_tensor(c, dir, json_array_get(grads, k), what, &g)) {
                    if (!same_shape(&g, &in[i]) || !ot_dtype_is_float(g.shape.dtype))
                        problem(c, "%s: shape/dtype differs from input %lld", what, (long long)i);
                }
                ot_tensor_release(&g);
            }
            for (size_t k = 0; k < json_array_size(ow); k++) {
                json_int_t j = json_integer_value(json_array_get(ow, k));
                snprintf(what, sizeof what, "%s vjp cotangent %zu", name, k);
                ot_tensor ct = {0};
                if (j < 0 || (size_t)j >= json_array_size(outs)) {
                    problem(c, "%s: output index %lld out of range", what, (long long)j);
                } else if (check_tensor(c, dir, json_array_get(cts, k), what, &ct)) {
                    if (!same_shape(&ct, &out[j]))
                        problem(c, "%s: shape/dtype differs from output %lld", what, (long long)j);
                }
                ot_tensor_release(&ct);
            }
        }
    }
    release_all(in, MAX_IO);
    release_all(out, MAX_IO);
}

static json_t *load_json(const char *path) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) fprintf(stderr, "  %s:%d:%d: %s\n", path, je.line, je.column, je.text);
    return root;
}

/* ---- the JAX corpus -----------------------------------------------------------------------------
 */

static void test_jax_corpus_index(void) {
    int64_t live = ot_alloc_live();
    json_t *root = load_json(DATA_DIR "jax/cases.json");
    ASSERT_TRUE(root != NULL);
    EXPECT_STR_EQ(json_string_value(json_object_get(root, "format")), "optitpu-jax-corpus/1");
    const json_t *ver = json_object_get(root, "versions");
    EXPECT_TRUE(json_is_string(json_object_get(ver, "jax")));
    EXPECT_TRUE(json_is_string(json_object_get(ver, "jaxlib")));
    const json_t *cases = json_object_get(root, "cases");
    EXPECT_TRUE(json_array_size(cases) > 400);
    checker c = {0};
    size_t i;
    json_t *cs;
    int with_vjp = 0, bf16_inputs = 0;
    json_t *seen = json_object();
    json_array_foreach(cases, i, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        if (name && json_object_get(seen, name)) problem(&c, "duplicate case %s", name);
        if (name) json_object_set_new(seen, name, json_true());
        check_jax_case(&c, cs);
        if (json_object_get(cs, "vjp")) with_vjp++;
        size_t k;
        json_t *e;
        json_array_foreach(json_object_get(cs, "inputs"), k, e) {
            const char *dt = json_string_value(json_object_get(e, "dtype"));
            if (dt && !strcmp(dt, "bf16")) bf16_inputs++;
        }
    }
    json_decref(seen);
    if (c.problems) fprintf(stderr, "  %d problems; first: %s\n", c.problems, c.err);
    EXPECT_INT_EQ(c.problems, 0);
    EXPECT_TRUE(c.files > 1500);
    EXPECT_TRUE(with_vjp > 50);
    EXPECT_TRUE(bf16_inputs > 20);
    json_decref(root);
    EXPECT_INT_EQ(ot_alloc_live(), live);
}

/* Spot values: what the corpus pins down must be in the files (bf16 bits, XLA's integer division
 * by zero, the denormal flush). */
static void test_jax_corpus_values(void) {
    ot_tensor t;
    ASSERT_OK(ot_npy_read_file(DATA_DIR "jax/binary_divide_s32/expected_0.npy", &t));
    ot_tensor a, b;
    ot_status sa = ot_npy_read_file(DATA_DIR "jax/binary_divide_s32/input_0.npy", &a);
    ot_status sb = ot_npy_read_file(DATA_DIR "jax/binary_divide_s32/input_1.npy", &b);
    EXPECT_TRUE(sa == OT_OK && sb == OT_OK);
    if (sa == OT_OK && sb == OT_OK) {
        const int32_t *x = a.data, *y = b.data, *q = t.data;
        int64_t n = (int64_t)(t.nbytes / 4), zeros = 0;
        for (int64_t i = 0; i < n; i++) {
            if (y[i] == 0) {
                zeros++;
                EXPECT_INT_EQ(q[i], -1); /* HLO: x / 0 = -1 for signed integers */
            } else if (x[i] == INT32_MIN && y[i] == -1) {
                EXPECT_INT_EQ(q[i], INT32_MIN);
            } else {
                EXPECT_INT_EQ(q[i], x[i] / y[i]); /* C and HLO both truncate */
            }
        }
        EXPECT_TRUE(zeros > 0);
    }
    ot_tensor_release(&a);
    ot_tensor_release(&b);
    ot_tensor_release(&t);

    /* bf16 inputs are u16 bit patterns: converting to f32 must give finite, sane values. */
    ASSERT_OK(ot_npy_read_file(DATA_DIR "jax/dot_bf16/input_0.npy", &t));
    EXPECT_INT_EQ(t.shape.dtype, OT_U16);
    const uint16_t *bits = t.data;
    for (size_t i = 0; i < t.nbytes / 2; i++) {
        float f = ot_bf16_to_f32(bits[i]);
        EXPECT_TRUE(isfinite(f) && fabsf(f) < 10.0f);
    }
    ot_tensor_release(&t);

    ASSERT_OK(ot_npy_read_file(DATA_DIR "jax/denormal_ftz_f32/expected_0.npy", &t));
    const float *d = t.data;
    EXPECT_TRUE(d[2] == 0.0f && d[4] == 0.0f); /* 1e-39 * 0.5 and 1e-45 * 0.5 flushed */
    EXPECT_TRUE(d[5] == 0.5f);
    ot_tensor_release(&t);
}

/* ---- the comparison rule (tests/ot_fixture.h)
 * ------------------------------------------------------ */

static ot_tensor wrap(ot_dtype dt, int64_t n, void *data) {
    ot_shape s;
    ot_tensor t = {0};
    if (ot_shape_make(&s, dt, 1, &n) == OT_OK) ot_tensor_borrow(&t, &s, data);
    return t;
}

static bool cmp(const ot_tensor *g, const ot_tensor *e, const char *tol_json) {
    json_t *j = json_loads(tol_json, 0, NULL);
    ot_fixture_tol tol;
    bool parsed = ot_fixture_tol_parse(j, &tol);
    json_decref(j);
    char why[256];
    return parsed && ot_fixture_compare(g, e, &tol, why, sizeof why);
}

static void test_compare_rule(void) {
    float e[4] = {1.0f, -0.0f, NAN, INFINITY}, g[4];
    memcpy(g, e, sizeof g);
    ot_tensor te = wrap(OT_F32, 4, e), tg = wrap(OT_F32, 4, g);
    EXPECT_TRUE(cmp(&tg, &te, "{\"exact\": true}"));
    g[2] = -NAN; /* any NaN matches any NaN */
    EXPECT_TRUE(cmp(&tg, &te, "{\"exact\": true}"));
    g[1] = 0.0f; /* sign of zero counts when exact, not for ulp */
    EXPECT_TRUE(!cmp(&tg, &te, "{\"exact\": true}"));
    EXPECT_TRUE(cmp(&tg, &te, "{\"ulp\": 0}"));
    g[1] = -0.0f;
    g[0] = nextafterf(nextafterf(1.0f, 2.0f), 2.0f); /* 2 ulp above */
    EXPECT_TRUE(!cmp(&tg, &te, "{\"exact\": true}"));
    EXPECT_TRUE(!cmp(&tg, &te, "{\"ulp\": 1}"));
    EXPECT_TRUE(cmp(&tg, &te, "{\"ulp\": 2}"));
    EXPECT_TRUE(cmp(&tg, &te, "{\"ulp\": 1, \"rtol\": 1e-6}")); /* either criterion */
    EXPECT_TRUE(!cmp(&tg, &te, "{\"rtol\": 1e-7, \"atol\": 0}"));
    g[0] = 1.0f;
    g[3] = -INFINITY;
    EXPECT_TRUE(!cmp(&tg, &te, "{\"rtol\": 1}"));
    g[3] = INFINITY;
    g[2] = 0.0f;
    EXPECT_TRUE(!cmp(&tg, &te, "{\"rtol\": 1}")); /* NaN positions must match */
    g[2] = NAN;
    EXPECT_TRUE(!cmp(&tg, &te, "{}")); /* no criterion: not a tolerance */
    EXPECT_TRUE(!cmp(&tg, &te, "{\"ulp\": -1}"));
    /* ulp across zero: the smallest positive and negative f32 are 2 apart */
    float a = 1e-45f, b = -1e-45f;
    ot_tensor ta = wrap(OT_F32, 1, &a), tb = wrap(OT_F32, 1, &b);
    EXPECT_TRUE(cmp(&ta, &tb, "{\"ulp\": 2}") && !cmp(&ta, &tb, "{\"ulp\": 1}"));
    /* bf16: ulps of the 16-bit format */
    uint16_t h1[1] = {0x3f80}, h2[1] = {0x3f81}; /* 1.0 and the next bf16 */
    ot_tensor b1 = wrap(OT_BF16, 1, h1), b2 = wrap(OT_BF16, 1, h2);
    EXPECT_TRUE(cmp(&b1, &b2, "{\"ulp\": 1}") && !cmp(&b1, &b2, "{\"exact\": true}"));
    /* integers: exact only, dtype and shape must match */
    int32_t i1[2] = {1, -2}, i2[2] = {1, -3};
    ot_tensor t1 = wrap(OT_S32, 2, i1), t2 = wrap(OT_S32, 2, i2), t3 = wrap(OT_U32, 2, i1);
    EXPECT_TRUE(!cmp(&t1, &t2, "{\"exact\": true}"));
    EXPECT_TRUE(cmp(&t1, &t1, "{\"exact\": true}"));
    EXPECT_TRUE(!cmp(&t1, &t3, "{\"exact\": true}"));
}

/* The stated tolerances admit a correct C implementation: libm on the corpus inputs, compared with
 * XLA's outputs under each case's own tolerance; and the library's own f32 tanh
 * (src/exec/expf_poly.h; f16/bf16 are computed with it too, the table's last row) fits them. */
OT_EXPF_DEF
OT_TANHF_DEF

typedef struct libm_op {
    const char *op;
    double (*f64_1)(double);
    float (*f32_1)(float);
    double (*f64_2)(double, double);
    float (*f32_2)(float, float);
} libm_op;
static double rsqrt_d(double x) {
    return 1.0 / sqrt(x);
}
static float rsqrt_f(float x) {
    return 1.0f / sqrtf(x);
}

static bool libm_case(const char *name, const libm_op *op, const json_t *index, char *why,
                      size_t n) {
    const json_t *cs = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(index, "cases"), i, e) {
        if (!strcmp(json_string_value(json_object_get(e, "name")), name)) cs = e;
    }
    if (!cs) {
        snprintf(why, n, "not in the corpus");
        return false;
    }
    char dir[512], path[1024];
    snprintf(dir, sizeof dir, DATA_DIR "jax/%s", name);
    ot_tensor x = {0}, y = {0}, want = {0}, got = {0};
    ot_fixture_tol tol;
    bool ok = false, binary = op->f64_2 != NULL;
    snprintf(why, n, "fixture files unreadable");
    snprintf(path, sizeof path, "%s/input_0.npy", dir);
    if (ot_npy_read_file(path, &x) != OT_OK) goto out;
    if (binary) {
        snprintf(path, sizeof path, "%s/input_1.npy", dir);
        if (ot_npy_read_file(path, &y) != OT_OK) goto out;
    }
    snprintf(path, sizeof path, "%s/expected_0.npy", dir);
    if (ot_npy_read_file(path, &want) != OT_OK) goto out;
    const char *dts = json_string_value(
        json_object_get(json_array_get(json_object_get(cs, "outputs"), 0), "dtype"));
    ot_dtype dt = ot_dtype_from_name(dts, strlen(dts));
    ot_fixture_relabel(&x, dt);
    ot_fixture_relabel(&y, dt);
    ot_fixture_relabel(&want, dt);
    if (ot_tensor_alloc(&got, &want.shape) != OT_OK ||
        !ot_fixture_tol_parse(json_object_get(cs, "tolerance"), &tol))
        goto out;
    int64_t count = ot_shape_numel_unchecked(&want.shape), ord;
    for (int64_t k = 0; k < count; k++) {
        double a = ot_fixture_f64(&x, k, &ord), b = binary ? ot_fixture_f64(&y, k, &ord) : 0.0;
        /* f16/bf16/f32 are evaluated with libm's float functions, as an f32 kernel would */
        double r = dt == OT_F64 ? (binary ? op->f64_2(a, b) : op->f64_1(a))
                                : (binary ? op->f32_2((float)a, (float)b) : op->f32_1((float)a));
        switch (dt) {
        case OT_F64: ((double *)got.data)[k] = r; break;
        case OT_F32: ((float *)got.data)[k] = (float)r; break;
        case OT_F16: ((uint16_t *)got.data)[k] = ot_f32_to_f16((float)r); break;
        default: ((uint16_t *)got.data)[k] = ot_f32_to_bf16((float)r); break;
        }
    }
    ok = ot_fixture_compare(&got, &want, &tol, why, n);
out:
    ot_tensor_release(&x);
    ot_tensor_release(&y);
    ot_tensor_release(&want);
    ot_tensor_release(&got);
    return ok;
}

static void test_libm_within_stated_tolerance(void) {
    json_t *root = load_json(DATA_DIR "jax/cases.json");
    ASSERT_TRUE(root != NULL);
    static const libm_op ops[] = {{"unary_exp", exp, expf, NULL, NULL},
                                  {"unary_expm1", expm1, expm1f, NULL, NULL},
                                  {"unary_log", log, logf, NULL, NULL},
                                  {"unary_log1p", log1p, log1pf, NULL, NULL},
                                  {"unary_sqrt", sqrt, sqrtf, NULL, NULL},
                                  {"unary_rsqrt", rsqrt_d, rsqrt_f, NULL, NULL},
                                  {"unary_cbrt", cbrt, cbrtf, NULL, NULL},
                                  {"unary_tanh", tanh, tanhf, NULL, NULL},
                                  {"unary_sine", sin, sinf, NULL, NULL},
                                  {"unary_cosine", cos, cosf, NULL, NULL},
                                  {"unary_tan", tan, tanf, NULL, NULL},
                                  {"unary_erf", erf, erff, NULL, NULL},
                                  {"binary_power", NULL, NULL, pow, powf},
                                  {"binary_atan2", NULL, NULL, atan2, atan2f},
                                  {"binary_remainder", NULL, NULL, fmod, fmodf},
                                  {"unary_tanh", tanh, ot_tanhf, NULL, NULL}};
    static const char *dts[] = {"f16", "bf16", "f32", "f64"};
    int checked = 0;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        for (size_t d = 0; d < 4; d++) {
            char name[64], why[256] = "";
            snprintf(name, sizeof name, "%s_%s", ops[o].op, dts[d]);
            bool ok = libm_case(name, &ops[o], root, why, sizeof why);
            if (!ok) fprintf(stderr, "  %s: %s\n", name, why);
            EXPECT_TRUE(ok);
            checked++;
        }
    }
    EXPECT_INT_EQ(checked, 64);
    json_decref(root);
}

/* ---- multi-device (SPMD) corpus
 * -------------------------------------------------------------------- */

static void test_jax_spmd_index(void) {
    int64_t live = ot_alloc_live();
    json_t *root = load_json(DATA_DIR "jax_spmd/cases.json");
    ASSERT_TRUE(root != NULL);
    EXPECT_STR_EQ(json_string_value(json_object_get(root, "format")), "optitpu-jax-spmd-corpus/1");
    const json_t *cases = json_object_get(root, "cases");
    EXPECT_TRUE(json_array_size(cases) >= 10);
    checker c = {0};
    size_t i;
    json_t *cs;
    int collectives = 0;
    json_array_foreach(cases, i, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        json_int_t parts = json_integer_value(json_object_get(cs, "partitions"));
        if (!name || parts < 2) {
            problem(&c, "case %zu: needs name and partitions >= 2", i);
            continue;
        }
        char dir[512], path[1024], head[64], what[600];
        snprintf(dir, sizeof dir, DATA_DIR "jax_spmd/%s", name);
        const char *mods[] = {"module", "module_spmd"};
        for (size_t m = 0; m < 2; m++) {
            const char *f = json_string_value(json_object_get(cs, mods[m]));
            snprintf(path, sizeof path, "%s/%s", dir, f ? f : "");
            if (!f || !read_head(path, head, sizeof head) || strncmp(head, "HloModule ", 10) != 0)
                problem(&c, "%s: %s missing or not HLO text", name, mods[m]);
        }
        check_tolerance(&c, json_object_get(cs, "tolerance"), name);
        size_t k;
        json_t *op;
        json_array_foreach(json_object_get(cs, "ops"), k, op) {
            const char *o = json_string_value(op);
            if (o && (!strncmp(o, "all-", 4) || !strcmp(o, "reduce-scatter") ||
                      !strcmp(o, "collective-permute") || !strcmp(o, "partition-id"))) {
                collectives++;
                break;
            }
        }
        const char *lists[] = {"inputs", "outputs"};
        for (size_t l = 0; l < 2; l++) {
            const json_t *arr = json_object_get(cs, lists[l]);
            if (!json_array_size(arr)) problem(&c, "%s: no %s", name, lists[l]);
            json_t *e;
            json_array_foreach(arr, k, e) {
                snprintf(what, sizeof what, "%s %s %zu", name, lists[l], k);
                ot_tensor t = {0};
                if (check_tensor(&c, dir, e, what, &t) &&
                    (t.shape.rank < 1 || t.shape.dims[0] != parts))
                    problem(&c, "%s: leading axis is not the %lld partitions", what,
                            (long long)parts);
                ot_tensor_release(&t);
            }
        }
    }
    if (c.problems) fprintf(stderr, "  %d problems; first: %s\n", c.problems, c.err);
    EXPECT_INT_EQ(c.problems, 0);
    EXPECT_INT_EQ(collectives, (int)json_array_size(cases)); /* every case talks across devices */
    json_decref(root);
    EXPECT_INT_EQ(ot_alloc_live(), live);
}

/* ---- parser-only HLO ----------------------------------------------------------------------------
 */

static void test_hlo_jax_dir(void) {
    DIR *d = opendir(DATA_DIR "hlo/jax");
    ASSERT_TRUE(d != NULL);
    int n = 0, collectives = 0, custom = 0, bad = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 4, ".hlo") != 0) continue;
        char path[1024], head[64];
        snprintf(path, sizeof path, DATA_DIR "hlo/jax/%s", de->d_name);
        if (!read_head(path, head, sizeof head) || strncmp(head, "HloModule ", 10) != 0) {
            fprintf(stderr, "  %s is not HLO text\n", de->d_name);
            bad++;
        }
        n++;
        if (!strncmp(de->d_name, "pmap_", 5) || !strncmp(de->d_name, "shard_map_", 10))
            collectives++;
        if (!strncmp(de->d_name, "custom_", 7)) custom++;
    }
    closedir(d);
    EXPECT_INT_EQ(bad, 0);
    EXPECT_TRUE(n > 200);
    EXPECT_TRUE(collectives >= 20);
    EXPECT_TRUE(custom >= 10);
}

/* ---- optimizer trajectories
 * ---------------------------------------------------------------------- */

typedef struct traj_param {
    const char *name;
    ot_shape shape;
} traj_param;

static void test_optim_index(void) {
    int64_t live = ot_alloc_live();
    json_t *root = load_json(DATA_DIR "optim/index.json");
    ASSERT_TRUE(root != NULL);
    EXPECT_STR_EQ(json_string_value(json_object_get(root, "format")),
                  "optitpu-optim-trajectories/1");
    const json_t *ver = json_object_get(root, "versions");
    EXPECT_TRUE(json_is_string(json_object_get(ver, "torch")));
    EXPECT_TRUE(json_is_string(json_object_get(ver, "optax")));
    json_int_t steps = json_integer_value(json_object_get(root, "steps"));
    EXPECT_INT_EQ(steps, 100);
    const json_t *order = json_object_get(root, "param_order");
    const json_t *params = json_object_get(root, "params");
    EXPECT_INT_EQ(json_array_size(order), 4);
    checker c = {0};
    const json_t *inputs = json_object_get(root, "inputs");
    size_t np = json_array_size(order);
    int ranks_seen = 0; /* bit r set when a parameter of rank r exists */
    for (size_t i = 0; i < np; i++) {
        const char *p = json_string_value(json_array_get(order, i));
        if (!p) {
            problem(&c, "param_order[%zu] is not a string", i);
            continue;
        }
        ranks_seen |= 1 << json_array_size(json_object_get(params, p));
        char key[128];
        ot_tensor p0 = {0}, g = {0};
        snprintf(key, sizeof key, "param.%s", p);
        check_tensor(&c, DATA_DIR "optim", json_object_get(inputs, key), key, &p0);
        snprintf(key, sizeof key, "grad.%s", p);
        if (check_tensor(&c, DATA_DIR "optim", json_object_get(inputs, key), key, &g)) {
            if (g.shape.rank != p0.shape.rank + 1 || g.shape.dims[0] != steps ||
                memcmp(g.shape.dims + 1, p0.shape.dims, sizeof(int64_t) * p0.shape.rank))
                problem(&c, "%s: not [steps, *param shape]", key);
        }
        ot_tensor_release(&p0);
        ot_tensor_release(&g);
    }
    EXPECT_INT_EQ(ranks_seen, 0xF); /* a scalar, a vector, a matrix and a 3-D tensor */

    const json_t *cases = json_object_get(root, "cases");
    EXPECT_TRUE(json_array_size(cases) >= 30);
    size_t ci;
    json_t *cs;
    int torch_n = 0, optax_n = 0, skipped_total = 0;
    json_array_foreach(cases, ci, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        const char *fw = json_string_value(json_object_get(cs, "framework"));
        if (!name || !fw || !json_is_object(json_object_get(cs, "hyperparams")) ||
            !json_is_string(json_object_get(cs, "optimizer"))) {
            problem(&c, "case %zu: needs name, framework, optimizer, hyperparams", ci);
            continue;
        }
        if (!strcmp(fw, "torch"))
            torch_n++;
        else if (!strcmp(fw, "optax"))
            optax_n++;
        else
            problem(&c, "%s: unknown framework %s", name, fw);
        char dir[512];
        snprintf(dir, sizeof dir, DATA_DIR "optim/%s", name);
        const json_t *files = json_object_get(cs, "files");
        const char *key;
        json_t *e;
        json_object_foreach((json_t *)files, key, e) {
            char what[600];
            snprintf(what, sizeof what, "%s %s", name, key);
            ot_tensor t = {0};
            if (!check_tensor(&c, dir, e, what, &t)) continue;
            if (t.shape.rank < 1 || t.shape.dims[0] != steps)
                problem(&c, "%s: leading axis is not the %lld steps", what, (long long)steps);
            /* parameter trajectories: [steps, *shape], finite */
            if (!strncmp(key, "param.", 6) && t.shape.dtype == OT_F32) {
                const json_t *want = json_object_get(params, key + 6);
                if (!want || (size_t)t.shape.rank != json_array_size(want) + 1)
                    problem(&c, "%s: rank does not match the parameter", what);
                const float *v = t.data;
                for (size_t k = 0; k < t.nbytes / 4; k++) {
                    if (!isfinite(v[k])) {
                        problem(&c, "%s: non-finite value at %zu", what, k);
                        break;
                    }
                }
            }
            ot_tensor_release(&t);
        }
        json_t *pm = json_object_get(files, "param.matrix");
        if (!pm) problem(&c, "%s: no param.matrix trajectory", name);
        /* Mixed precision: a skipped step leaves the master weights exactly as they were. */
        json_t *sk = json_object_get(files, "skipped");
        if (sk && pm) {
            ot_tensor s = {0}, m = {0};
            if (check_tensor(&c, dir, sk, "skipped", &s) &&
                check_tensor(&c, dir, pm, "param.matrix", &m) && s.shape.dtype == OT_PRED) {
                const bool *skip = s.data;
                size_t row = m.nbytes / (size_t)steps;
                for (json_int_t t = 1; t < steps; t++) {
                    if (!skip[t]) continue;
                    skipped_total++;
                    if (memcmp((char *)m.data + row * (size_t)t,
                               (char *)m.data + row * (size_t)(t - 1), row) != 0)
                        problem(&c, "%s: step %lld was skipped but the parameters changed", name,
                                (long long)t);
                }
            }
            ot_tensor_release(&s);
            ot_tensor_release(&m);
        }
    }
    /* schedules: lr per step, finite and non-negative */
    const json_t *scheds = json_object_get(root, "schedules");
    EXPECT_TRUE(json_array_size(scheds) >= 15);
    json_array_foreach(scheds, ci, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        char what[300];
        snprintf(what, sizeof what, "schedule %s", name ? name : "?");
        if (!name || !json_is_object(json_object_get(cs, "definition"))) {
            problem(&c, "%s: needs name and definition", what);
            continue;
        }
        ot_tensor t = {0};
        if (check_tensor(&c, DATA_DIR "optim", json_object_get(cs, "lr"), what, &t)) {
            if (t.shape.dtype != OT_F64 || t.shape.rank != 1 || t.shape.dims[0] < steps)
                problem(&c, "%s: lr must be f64 [>= %lld]", what, (long long)steps);
            else
                for (int64_t k = 0; k < t.shape.dims[0]; k++)
                    if (!(((const double *)t.data)[k] >= 0.0)) {
                        problem(&c, "%s: lr[%lld] is negative or NaN", what, (long long)k);
                        break;
                    }
        }
        ot_tensor_release(&t);
    }
    if (c.problems) fprintf(stderr, "  %d problems; first: %s\n", c.problems, c.err);
    EXPECT_INT_EQ(c.problems, 0);
    EXPECT_TRUE(torch_n >= 15 && optax_n >= 15);
    EXPECT_TRUE(skipped_total >= 4); /* the injected inf/NaN steps at least */
    EXPECT_TRUE(c.files > 300);
    json_decref(root);
    EXPECT_INT_EQ(ot_alloc_live(), live);
}

/* ---- the checker refuses broken entries
 * ----------------------------------------------------------- */

static int check_entry_text(const char *json, char *err, size_t n) {
    json_error_t je;
    json_t *e = json_loads(json, 0, &je);
    if (!e) {
        snprintf(err, n, "bad test JSON: %s", je.text);
        return -1;
    }
    checker c = {0};
    check_tensor(&c, DATA_DIR "jax/conv2d_valid", e, "entry", NULL);
    json_decref(e);
    snprintf(err, n, "%s", c.err);
    return c.problems;
}

static void test_checker_refuses(void) {
    int64_t live = ot_alloc_live();
    char err[512];
    EXPECT_INT_EQ(check_entry_text("{\"file\": \"input_0.npy\", \"dtype\": \"f32\", \"shape\": "
                                   "[2, 4, 7, 6], \"npy_descr\": \"<f4\"}",
                                   err, sizeof err),
                  0);
    EXPECT_INT_EQ(check_entry_text("{\"file\": \"input_0.npy\", \"dtype\": \"f32\", \"shape\": "
                                   "[2, 4, 7, 5], \"npy_descr\": \"<f4\"}",
                                   err, sizeof err),
                  1);
    EXPECT_STR_CONTAINS(err, "dim 3 is 6, index says 5");
    EXPECT_INT_EQ(check_entry_text("{\"file\": \"input_0.npy\", \"dtype\": \"f32\", \"shape\": "
                                   "[2, 4, 42], \"npy_descr\": \"<f4\"}",
                                   err, sizeof err),
                  1);
    EXPECT_STR_CONTAINS(err, "rank 4, index says 3");
    EXPECT_INT_EQ(check_entry_text("{\"file\": \"input_0.npy\", \"dtype\": \"bf16\", \"shape\": "
                                   "[2, 4, 7, 6], \"npy_descr\": \"<u2\"}",
                                   err, sizeof err),
                  1);
    EXPECT_STR_CONTAINS(err, "holds f32, index says bf16 (stored as u16)");
    EXPECT_INT_EQ(check_entry_text("{\"file\": \"input_0.npy\", \"dtype\": \"f32\", \"shape\": "
                                   "[2, 4, 7, 6], \"npy_descr\": \"<f8\"}",
                                   err, sizeof err),
                  1);
    EXPECT_STR_CONTAINS(err, "npy_descr '<f8' does not match dtype f32");
    EXPECT_INT_EQ(check_entry_text("{\"file\": \"nope.npy\", \"dtype\": \"f32\", \"shape\": [], "
                                   "\"npy_descr\": \"<f4\"}",
                                   err, sizeof err),
                  1);
    EXPECT_STR_CONTAINS(err, "nope.npy");
    EXPECT_INT_EQ(check_entry_text("{\"file\": \"input_0.npy\", \"dtype\": \"f31\", \"shape\": [], "
                                   "\"npy_descr\": \"<f4\"}",
                                   err, sizeof err),
                  1);
    EXPECT_STR_CONTAINS(err, "unknown dtype 'f31'");
    EXPECT_INT_EQ(check_entry_text("{\"file\": \"input_0.npy\", \"shape\": []}", err, sizeof err),
                  1);
    EXPECT_STR_CONTAINS(err, "needs file, dtype, shape and npy_descr");
    EXPECT_INT_EQ(check_entry_text("{\"file\": \"input_0.npy\", \"dtype\": \"f32\", \"shape\": "
                                   "[2, -4], \"npy_descr\": \"<f4\"}",
                                   err, sizeof err),
                  1);
    EXPECT_STR_CONTAINS(err, "shape[1] is not a non-negative integer");

    checker c = {0};
    json_t *tol = json_loads("{\"ulp\": -1}", 0, NULL);
    EXPECT_TRUE(!check_tolerance(&c, tol, "t"));
    EXPECT_STR_CONTAINS(c.err, "tolerance ulp must be a non-negative number");
    json_decref(tol);
    tol = json_loads("{\"exact\": false}", 0, NULL);
    EXPECT_TRUE(!check_tolerance(&c, tol, "t"));
    json_decref(tol);
    tol = json_loads("{\"rtol\": 1e-5, \"atol\": 0}", 0, NULL);
    EXPECT_TRUE(check_tolerance(&c, tol, "t"));
    json_decref(tol);
    EXPECT_INT_EQ(ot_alloc_live(), live);
}

OT_TEST_MAIN(OT_TEST(test_jax_corpus_index), OT_TEST(test_jax_corpus_values),
             OT_TEST(test_compare_rule), OT_TEST(test_libm_within_stated_tolerance),
             OT_TEST(test_jax_spmd_index), OT_TEST(test_hlo_jax_dir), OT_TEST(test_optim_index),
             OT_TEST(test_checker_refuses))
