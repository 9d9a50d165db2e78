/* The JAX conformance corpus through the runtime: every case's module (and its VJP program) is
 * compiled (-O2, and -O0 for comparison) and executed on a host device with the reference kernels;
 * the result must be bit-identical to the reference evaluator's on the same module. The -O2
 * program also runs with the fast kernels, and both runs must match XLA's expected outputs at the
 * index's tolerance. Nothing may stay allocated afterwards.
 *
 * Usage: test_runtime_corpus [NAME-SUBSTRING] [-v] */
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#include <jansson.h>
#include <math.h>

#ifndef OT_SOURCE_DIR
#define OT_SOURCE_DIR "."
#endif

static const char *g_filter;
static bool g_verbose;
static ot_device *g_dev;

#include "jax_corpus_util.h"

/* Compiles m at `level`, runs it on g_dev with args, returns the result leaves as values. */
static ot_status run_compiled(const ot_module *m, int level, bool reference, const ot_value *args,
                              int nargs, ot_value *leaves, int *nleaves, int cap) {
    *nleaves = 0;
    ot_compile_options o = ot_compile_options_default();
    o.opt_level = level;
    ot_executable *exe = NULL;
    OT_CHECK(ot_compile(m, &o, &exe));
    int no = ot_executable_output_count(exe);
    ot_buffer **in = calloc((size_t)nargs + 1, sizeof *in);
    ot_buffer **out = calloc((size_t)no + 1, sizeof *out);
    ot_status s = OT_OK;
    for (int k = 0; k < nargs && s == OT_OK; k++)
        s = ot_buffer_from_host(g_dev, &args[k].array, &in[k]);
    if (s == OT_OK && no > cap) s = ot_error(OT_ERR_INTERNAL, "too many outputs");
    ot_run_options ro = ot_run_options_default();
    ro.reference_kernels = reference;
    if (s == OT_OK) s = ot_device_execute(g_dev, exe, in, nargs, out, no, &ro, NULL);
    for (int k = 0; k < no && s == OT_OK; k++) {
        ot_tensor t;
        s = ot_buffer_to_host(out[k], &t);
        if (s == OT_OK) {
            s = ot_value_from_tensor(&leaves[k], &t);
            ot_tensor_release(&t);
            if (s == OT_OK) (*nleaves)++;
        }
    }
    for (int k = 0; k < nargs; k++) ot_buffer_free(in[k]);
    for (int k = 0; k < no; k++) ot_buffer_free(out[k]);
    free(in);
    free(out);
    ot_executable_free(exe);
    return s;
}

static bool run_case_module(const char *dir, const char *modfile, const json_t *inputs,
                            const json_t *extra, const json_t *outputs, bool result_is_tuple,
                            const json_t *tolj, char *why, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, modfile);
    ot_module *m = NULL;
    ot_hlo_parse_options po = ot_hlo_parse_options_default();
    po.filename = path;
    if (ot_hlo_parse_file(path, &po, &m) != OT_OK) {
        snprintf(why, n, "parse: %s", ot_last_error());
        return false;
    }
    size_t ni = json_array_size(inputs), nx = extra ? json_array_size(extra) : 0;
    ot_value *args = calloc(ni + nx + 1, sizeof *args);
    bool ok = true;
    size_t loaded = 0;
    for (size_t k = 0; k < ni + nx && ok; k++, loaded++) {
        const json_t *e = k < ni ? json_array_get(inputs, k) : json_array_get(extra, k - ni);
        if (load_tensor(dir, e, &args[k]) != OT_OK) {
            snprintf(why, n, "input: %s", ot_last_error());
            ok = false;
        }
    }
    enum { CAP = 64 };
    ot_value ref = ot_value_empty(), got2[CAP], got0[CAP], gotf[CAP];
    int n2 = 0, n0 = 0, nf = 0;
    if (ok && ot_evaluate(m, args, (int)(ni + nx), NULL, &ref) != OT_OK) {
        snprintf(why, n, "evaluate: %s", ot_last_error());
        ok = false;
    }
    if (ok && run_compiled(m, 2, true, args, (int)(ni + nx), got2, &n2, CAP) != OT_OK) {
        snprintf(why, n, "-O2 run: %s", ot_last_error());
        ok = false;
    }
    if (ok && run_compiled(m, 0, true, args, (int)(ni + nx), got0, &n0, CAP) != OT_OK) {
        snprintf(why, n, "-O0 run: %s", ot_last_error());
        ok = false;
    }
    if (ok && run_compiled(m, 2, false, args, (int)(ni + nx), gotf, &nf, CAP) != OT_OK) {
        snprintf(why, n, "-O2 fast-kernel run: %s", ot_last_error());
        ok = false;
    }
    if (ok && (n2 != ot_value_leaf_count(&ref) || n0 != n2 || nf != n2)) {
        snprintf(why, n, "%d/%d results, the evaluator gives %d", n2, n0,
                 ot_value_leaf_count(&ref));
        ok = false;
    }
    for (int j = 0; ok && j < n2; j++) {
        if (!ot_value_equal(&got2[j], ot_value_leaf(&ref, j))) {
            snprintf(why, n, "output %d: -O2 execution differs from the reference evaluator", j);
            ok = false;
        } else if (!ot_value_equal(&got0[j], ot_value_leaf(&ref, j))) {
            snprintf(why, n, "output %d: -O0 execution differs from the reference evaluator", j);
            ok = false;
        }
    }
    tol tl = parse_tol(tolj);
    for (size_t j = 0; ok && j < json_array_size(outputs); j++) {
        bool tuple = result_is_tuple && ref.kind == OT_IR_TUPLE;
        if ((tuple && j >= (size_t)n2) || (!tuple && j > 0)) {
            snprintf(why, n, "result has no element %zu", j);
            ok = false;
            break;
        }
        ot_value exp;
        if (load_tensor(dir, json_array_get(outputs, j), &exp) != OT_OK) {
            snprintf(why, n, "expected: %s", ot_last_error());
            ok = false;
            break;
        }
        char w[512];
        /* a tuple element that is itself a tuple is not in the corpus; leaves map 1:1 */
        if (!compare(&got2[j], &exp, &tl, w, sizeof w)) {
            snprintf(why, n, "output %zu: %s", j, w);
            ok = false;
        } else if (!compare(&gotf[j], &exp, &tl, w, sizeof w)) {
            snprintf(why, n, "output %zu with the fast kernels: %s", j, w);
            ok = false;
        }
        ot_value_release(&exp);
    }
    for (int j = 0; j < n2; j++) ot_value_release(&got2[j]);
    for (int j = 0; j < n0; j++) ot_value_release(&got0[j]);
    for (int j = 0; j < nf; j++) ot_value_release(&gotf[j]);
    ot_value_release(&ref);
    for (size_t k = 0; k < loaded; k++) ot_value_release(&args[k]);
    free(args);
    ot_module_free(m);
    return ok;
}

static void test_corpus(void) {
    char idx[1024];
    snprintf(idx, sizeof idx, "%s/tests/data/jax/cases.json", OT_SOURCE_DIR);
    json_error_t je;
    json_t *root = json_load_file(idx, 0, &je);
    ASSERT_TRUE(root != NULL);
    json_t *cases = json_object_get(root, "cases");
    ASSERT_TRUE(json_is_array(cases) && json_array_size(cases) > 0);
    ot_threadpool_default(); /* the process-wide pool the fast kernels use lives until exit */
    int64_t live0 = ot_alloc_live();
    ASSERT_OK(ot_host_device_create(0, 0, &g_dev));
    int pass = 0, fail = 0, vpass = 0, vfail = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        const json_t *k = json_array_get(cases, c);
        const char *name = json_string_value(json_object_get(k, "name"));
        if (g_filter && !strstr(name, g_filter)) continue;
        char dir[1024], why[1024] = "";
        snprintf(dir, sizeof dir, "%s/tests/data/jax/%s", OT_SOURCE_DIR, name);
        uint64_t t0 = ot_now_ns();
        bool ok = run_case_module(dir, json_string_value(json_object_get(k, "module")),
                                  json_object_get(k, "inputs"), NULL, json_object_get(k, "outputs"),
                                  json_is_true(json_object_get(k, "result_is_tuple")),
                                  json_object_get(k, "tolerance"), why, sizeof why);
        if (ok) {
            pass++;
        } else {
            fail++;
            printf("FAIL %s: %s\n", name, why);
            ot_test_failures_++;
        }
        const json_t *vjp = json_object_get(k, "vjp");
        if (vjp) {
            char vwhy[1024] = "";
            bool vok =
                run_case_module(dir, json_string_value(json_object_get(vjp, "module")),
                                json_object_get(k, "inputs"), json_object_get(vjp, "cotangents"),
                                json_object_get(vjp, "grads"), true,
                                json_object_get(vjp, "tolerance"), vwhy, sizeof vwhy);
            if (vok) {
                vpass++;
            } else {
                vfail++;
                printf("FAIL %s (vjp): %s\n", name, vwhy);
                ot_test_failures_++;
            }
        }
        if (g_verbose)
            printf("%s %s %.1f ms\n", ok ? "ok  " : "FAIL", name, (ot_now_ns() - t0) / 1e6);
    }
    ot_mem_stats ms;
    ot_device_memory(g_dev, &ms);
    EXPECT_INT_EQ(ms.in_use, 0);
    EXPECT_INT_EQ(ms.live_blocks, 0);
    ot_device_free(g_dev);
    g_dev = NULL;
    EXPECT_INT_EQ(ot_alloc_live(), live0);
    printf("runtime corpus: %d cases pass, %d fail; vjp: %d pass, %d fail\n", pass, fail, vpass,
           vfail);
    ot_test_assertions_++;
    json_decref(root);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0)
            g_verbose = true;
        else
            g_filter = argv[i];
    }
    static const ot_test_case tests[] = {OT_TEST(test_corpus)};
    return ot_test_main(1, argv, tests, 1);
}
