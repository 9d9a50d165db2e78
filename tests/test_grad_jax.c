/* Gradients of the JAX conformance corpus (tests/data/jax): for every case with a "vjp" entry,
 * ot_vjp of the forward module (module.hlo, and again XLA's optimized module.opt.hlo) with respect
 * to the case's wrt parameters is evaluated on the recorded inputs and cotangents (zeros for
 * outputs JAX gave none: integer outputs) and compared with JAX's gradients (grad_<k>.npy) at the
 * tolerance the index states for them (tests/data/README.md gives the rule). Cases whose forward
 * module holds an op with no rule must fail with UNIMPLEMENTED naming that op, and are listed
 * below, so a regression in either direction fails. Each gradient module is also compiled (-O2) and
 * run on a host device (the runtime's fast kernels), whose results must match JAX's at the same
 * tolerances.
 *
 * Usage: test_grad_jax [NAME-SUBSTRING] [-v] */
#include "optitpu/autodiff.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#include <jansson.h>
#include <math.h>

#ifndef OT_SOURCE_DIR
#define OT_SOURCE_DIR "."
#endif

#include "jax_corpus_util.h"

static const char *g_filter;
static bool g_verbose;
static bool g_optimized; /* differentiate module.opt.hlo (XLA's optimized graph) */
static ot_device *g_dev;

/* The vjp module compiled at -O2 and run on a host device (fast kernels): *leaves gets the
 * result leaves (ot_malloc'd values, *nleaves of them). */
static ot_status run_compiled(const ot_module *g, const ot_value *args, int nargs,
                              ot_value **leaves, int *nleaves) {
    *leaves = NULL;
    *nleaves = 0;
    ot_compile_options o = ot_compile_options_default();
    o.opt_level = 2;
    ot_executable *exe = NULL;
    OT_CHECK(ot_compile(g, &o, &exe));
    int no = ot_executable_output_count(exe);
    ot_buffer **in = calloc((size_t)nargs + 1, sizeof *in);
    ot_buffer **out = calloc((size_t)no + 1, sizeof *out);
    ot_value *v = calloc((size_t)no + 1, sizeof *v);
    ot_status s = OT_OK;
    for (int k = 0; k < nargs && s == OT_OK; k++)
        s = ot_buffer_from_host(g_dev, &args[k].array, &in[k]);
    if (s == OT_OK) s = ot_device_execute(g_dev, exe, in, nargs, out, no, NULL, NULL);
    for (int k = 0; k < no && s == OT_OK; k++) {
        ot_tensor t;
        s = ot_buffer_to_host(out[k], &t);
        if (s == OT_OK) {
            s = ot_value_from_tensor(&v[k], &t);
            ot_tensor_release(&t);
            if (s == OT_OK) (*nleaves)++;
        }
    }
    for (int k = 0; k < nargs; k++) ot_buffer_free(in[k]);
    for (int k = 0; k < no; k++) ot_buffer_free(out[k]);
    free(in);
    free(out);
    ot_executable_free(exe);
    *leaves = v;
    return s;
}

/* Cases whose gradient path holds an op with no reverse-mode rule, and the op the error names
 * (none today: scan_cumulative's while loop has a static trip count and is unrolled). */
static const struct {
    const char *name, *op;
} known_unimplemented[] = {
    {NULL, NULL},
};
#define NKNOWN 0

static const char *known_op(const char *name) {
    for (int k = 0; k < NKNOWN; k++)
        if (strcmp(known_unimplemented[k].name, name) == 0) return known_unimplemented[k].op;
    return NULL;
}

typedef enum { CASE_PASS, CASE_FAIL, CASE_UNIMPLEMENTED } case_result;

static case_result run_case(const char *dir, const json_t *k, char *why, size_t n) {
    const json_t *vjp = json_object_get(k, "vjp");
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir,
             json_string_value(json_object_get(k, g_optimized ? "module_optimized" : "module")));
    ot_module *m = NULL;
    if (ot_hlo_parse_file(path, NULL, &m) != OT_OK) {
        snprintf(why, n, "parse: %s", ot_last_error());
        return CASE_FAIL;
    }
    const json_t *jw = json_object_get(vjp, "wrt");
    int nwrt = (int)json_array_size(jw);
    int64_t wrt[16];
    for (int q = 0; q < nwrt && q < 16; q++) wrt[q] = json_integer_value(json_array_get(jw, q));
    ot_module *g = NULL;
    ot_status s = ot_vjp(m, wrt, nwrt, &g);
    if (s != OT_OK) {
        snprintf(why, n, "%s", ot_last_error());
        ot_module_free(m);
        return s == OT_ERR_UNIMPLEMENTED ? CASE_UNIMPLEMENTED : CASE_FAIL;
    }
    const json_t *inputs = json_object_get(k, "inputs"), *outputs = json_object_get(k, "outputs");
    const json_t *cts = json_object_get(vjp, "cotangents");
    const json_t *fout = json_object_get(vjp, "outputs_with_cotangent");
    const json_t *grads = json_object_get(vjp, "grads");
    size_t ni = json_array_size(inputs), nl = json_array_size(outputs);
    ot_value *args = calloc(ni + nl + 1, sizeof *args);
    case_result res = CASE_PASS;
    for (size_t q = 0; q < ni && res == CASE_PASS; q++)
        if (load_tensor(dir, json_array_get(inputs, q), &args[q]) != OT_OK) {
            snprintf(why, n, "input: %s", ot_last_error());
            res = CASE_FAIL;
        }
    /* one cotangent per root leaf: JAX's where it gave one, else zeros of the leaf's shape */
    for (size_t l = 0; l < nl && res == CASE_PASS; l++) {
        const json_t *ct = NULL;
        for (size_t q = 0; q < json_array_size(fout); q++)
            if ((size_t)json_integer_value(json_array_get(fout, q)) == l)
                ct = json_array_get(cts, q);
        ot_status ls;
        if (ct) {
            ls = load_tensor(dir, ct, &args[ni + l]);
        } else {
            ot_value e;
            ls = load_tensor(dir, json_array_get(outputs, l), &e);
            if (ls == OT_OK) ls = ot_value_alloc_array(&args[ni + l], &e.array.shape);
            ot_value_release(&e);
        }
        if (ls != OT_OK) {
            snprintf(why, n, "cotangent %zu: %s", l, ot_last_error());
            res = CASE_FAIL;
        }
    }
    ot_value r = ot_value_empty();
    if (res == CASE_PASS && ot_evaluate(g, args, (int)(ni + nl), NULL, &r) != OT_OK) {
        snprintf(why, n, "evaluate: %s", ot_last_error());
        res = CASE_FAIL;
    }
    if (res == CASE_PASS && (r.kind != OT_IR_TUPLE || r.ntuple != (int)nl + nwrt)) {
        snprintf(why, n, "result has %d elements, expected %zu", r.ntuple, nl + (size_t)nwrt);
        res = CASE_FAIL;
    }
    ot_value *cl = NULL;
    int ncl = 0;
    if (res == CASE_PASS && run_compiled(g, args, (int)(ni + nl), &cl, &ncl) != OT_OK) {
        snprintf(why, n, "compiled -O2: %s", ot_last_error());
        res = CASE_FAIL;
    }
    /* primal outputs at the case's tolerance, gradients at the vjp tolerance; the evaluator's
     * result and the compiled one */
    tol tp = parse_tol(json_object_get(k, "tolerance"));
    tol tg = parse_tol(json_object_get(vjp, "tolerance"));
    for (size_t j = 0; res == CASE_PASS && j < nl + (size_t)nwrt; j++) {
        bool primal = j < nl;
        const json_t *e = primal ? json_array_get(outputs, j) : json_array_get(grads, j - nl);
        ot_value exp;
        if (load_tensor(dir, e, &exp) != OT_OK) {
            snprintf(why, n, "expected: %s", ot_last_error());
            res = CASE_FAIL;
            break;
        }
        for (int how = 0; how < 2 && res == CASE_PASS; how++) {
            const ot_value *got = how == 0 ? &r.tuple[j] : (int)j < ncl ? &cl[j] : NULL;
            char w[512];
            if (!got) {
                snprintf(w, sizeof w, "missing");
            } else if (compare(got, &exp, primal ? &tp : &tg, w, sizeof w)) {
                continue;
            }
            const char *by = how == 0 ? "evaluator" : "compiled -O2";
            if (primal)
                snprintf(why, n, "%s: primal output %zu: %s", by, j, w);
            else
                snprintf(why, n, "%s: gradient %zu (wrt parameter %lld): %s", by, j - nl,
                         (long long)wrt[j - nl], w);
            res = CASE_FAIL;
        }
        ot_value_release(&exp);
    }
    for (int q = 0; q < ncl; q++) ot_value_release(&cl[q]);
    free(cl);
    ot_value_release(&r);
    for (size_t q = 0; q < ni + nl; q++) ot_value_release(&args[q]);
    free(args);
    ot_module_free(g);
    ot_module_free(m);
    return res;
}

static void run_corpus(bool optimized) {
    g_optimized = optimized;
    char idx[1024];
    snprintf(idx, sizeof idx, "%s/tests/data/jax/cases.json", OT_SOURCE_DIR);
    json_t *root = json_load_file(idx, 0, NULL);
    ASSERT_TRUE(root != NULL);
    json_t *cases = json_object_get(root, "cases");
    int total = 0, pass = 0, unimpl = 0, fail = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        const json_t *k = json_array_get(cases, c);
        if (!json_object_get(k, "vjp")) continue;
        const char *name = json_string_value(json_object_get(k, "name"));
        if (g_filter && !strstr(name, g_filter)) continue;
        total++;
        char dir[1024], why[1024] = "";
        snprintf(dir, sizeof dir, "%s/tests/data/jax/%s", OT_SOURCE_DIR, name);
        uint64_t t0 = ot_now_ns();
        case_result res = run_case(dir, k, why, sizeof why);
        const char *kop = known_op(name);
        if (res == CASE_PASS) {
            pass++;
            if (kop) {
                printf("FAIL %s: listed as unimplemented (%s) but passes: update the list\n", name,
                       kop);
                ot_test_failures_++;
            }
        } else if (res == CASE_UNIMPLEMENTED && kop) {
            char want[128];
            snprintf(want, sizeof want, "no reverse-mode rule for %s", kop);
            if (strstr(why, want)) {
                unimpl++;
            } else {
                printf("FAIL %s: UNIMPLEMENTED but not naming %s: %s\n", name, kop, why);
                ot_test_failures_++;
            }
        } else {
            fail++;
            printf("FAIL %s: %s\n", name, why);
            ot_test_failures_++;
        }
        if (g_verbose)
            printf("%-12s %s %.1f ms %s\n",
                   res == CASE_PASS            ? "ok"
                   : res == CASE_UNIMPLEMENTED ? "unimplemented"
                                               : "FAIL",
                   name, (ot_now_ns() - t0) / 1e6, res == CASE_PASS ? "" : why);
    }
    printf("jax gradients (%s): %d of %d cases pass, %d unimplemented (listed), %d fail\n",
           optimized ? "module.opt.hlo" : "module.hlo", pass, total, unimpl, fail);
    ot_test_assertions_++;
    if (!g_filter) {
        EXPECT_INT_EQ(total, 94);
        EXPECT_INT_EQ(unimpl, NKNOWN);
        EXPECT_INT_EQ(pass, 94 - NKNOWN);
    }
    json_decref(root);
}

static void test_jax_gradients(void) {
    run_corpus(false);
}
/* XLA's optimized modules (fusions, bitcasts, copies, loops with known_trip_count) */
static void test_jax_gradients_optimized(void) {
    run_corpus(true);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0)
            g_verbose = true;
        else
            g_filter = argv[i];
    }
    /* leaks are checked over the whole run: the device keeps caches until it is freed */
    int64_t live = ot_alloc_live();
    if (ot_host_device_create(0, 0, &g_dev) != OT_OK) {
        fprintf(stderr, "host device: %s\n", ot_last_error());
        return 1;
    }
    static const ot_test_case tests[] = {OT_TEST(test_jax_gradients),
                                         OT_TEST(test_jax_gradients_optimized)};
    int rc = ot_test_main(1, argv, tests, 2);
    ot_device_free(g_dev);
    if (ot_alloc_live() != live) {
        printf("LEAK: %lld allocations\n", (long long)(ot_alloc_live() - live));
        rc = 1;
    }
    return rc;
}
