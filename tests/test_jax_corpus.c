/* The JAX conformance corpus (tests/data/jax, made by scripts/gen_jax_corpus.py): every case's
 * module.hlo is parsed, evaluated by the reference evaluator on the recorded inputs and compared
 * with XLA's outputs at the tolerance the index states (tests/data/README.md gives the rule).
 * Cases with a "vjp" entry also run JAX's backward program (vjp.hlo) and compare the gradients.
 *
 * Usage: test_jax_corpus [NAME-SUBSTRING] [-v] [--opt]  (prints one line per failing case and a
 * summary) */
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "ot_test.h"

#include <jansson.h>
#include <math.h>

#ifndef OT_SOURCE_DIR
#define OT_SOURCE_DIR "."
#endif

static const char *g_filter;
static bool g_verbose;
static bool g_optimized; /* --opt: run module.opt.hlo (XLA's optimized graph) instead */

#include "jax_corpus_util.h"

/* Runs module `modfile` on inputs (+ extra), compares each result leaf with `outputs`. */
static bool run_case_module(const char *dir, const char *modfile, const json_t *inputs,
                            const json_t *extra, const json_t *outputs, bool result_is_tuple,
                            const json_t *tolj, char *why, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, modfile);
    ot_module *m = NULL;
    ot_hlo_parse_options po = ot_hlo_parse_options_default();
    po.filename = path;
    ot_status s = ot_hlo_parse_file(path, &po, &m);
    if (s != OT_OK) {
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
    ot_value r = ot_value_empty();
    if (ok) {
        s = ot_evaluate(m, args, (int)(ni + nx), NULL, &r);
        if (s != OT_OK) {
            snprintf(why, n, "evaluate: %s", ot_last_error());
            ok = false;
        }
    }
    tol tl = parse_tol(tolj);
    for (size_t j = 0; ok && j < json_array_size(outputs); j++) {
        /* a backward program with one gradient returns it bare, not in a tuple */
        bool tuple = result_is_tuple && r.kind == OT_IR_TUPLE;
        const ot_value *leaf =
            tuple ? (j < (size_t)r.ntuple ? &r.tuple[j] : NULL) : (j == 0 ? &r : NULL);
        if (!leaf) {
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
        if (!compare(leaf, &exp, &tl, w, sizeof w)) {
            snprintf(why, n, "output %zu: %s", j, w);
            ok = false;
        }
        ot_value_release(&exp);
    }
    ot_value_release(&r);
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
    int pass = 0, fail = 0, vpass = 0, vfail = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        const json_t *k = json_array_get(cases, c);
        const char *name = json_string_value(json_object_get(k, "name"));
        if (g_filter && !strstr(name, g_filter)) continue;
        char dir[1024], why[1024] = "";
        snprintf(dir, sizeof dir, "%s/tests/data/jax/%s", OT_SOURCE_DIR, name);
        int64_t live = ot_alloc_live();
        uint64_t t0 = ot_now_ns();
        const char *mod =
            json_string_value(json_object_get(k, g_optimized ? "module_optimized" : "module"));
        bool ok = run_case_module(dir, mod, json_object_get(k, "inputs"), NULL,
                                  json_object_get(k, "outputs"),
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
            /* vjp.hlo: the case's inputs then the cotangents -> a tuple of grads */
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
        if (ot_alloc_live() != live) {
            printf("LEAK %s: %lld allocations\n", name, (long long)(ot_alloc_live() - live));
            ot_test_failures_++;
        }
    }
    printf("corpus: %d cases pass, %d fail; vjp: %d pass, %d fail\n", pass, fail, vpass, vfail);
    ot_test_assertions_++;
    json_decref(root);
}

/* Every allocation failing in turn while evaluating the first case of each group (and a few
 * more): each failure is OUT_OF_MEMORY with nothing leaked, and the run finally succeeds. */
static void test_corpus_alloc_failures(void) {
    char idx[1024];
    snprintf(idx, sizeof idx, "%s/tests/data/jax/cases.json", OT_SOURCE_DIR);
    json_t *root = json_load_file(idx, 0, NULL);
    ASSERT_TRUE(root != NULL);
    json_t *cases = json_object_get(root, "cases");
    const char *seen[64];
    int nseen = 0;
    const char *extra[] = {"select_and_scatter", "reduce_window",   "while",
                           "scatter_add",        "gather_batching", "sort_stable_multi",
                           "argmax_variadic"};
    for (size_t c = 0; c < json_array_size(cases); c++) {
        const json_t *k = json_array_get(cases, c);
        const char *name = json_string_value(json_object_get(k, "name"));
        const char *group = json_string_value(json_object_get(k, "group"));
        if (g_filter && !strstr(name, g_filter)) continue;
        bool pick = true;
        for (int q = 0; q < nseen; q++)
            if (strcmp(seen[q], group) == 0) pick = false;
        for (size_t q = 0; q < sizeof extra / sizeof extra[0]; q++)
            if (strncmp(name, extra[q], strlen(extra[q])) == 0) {
                pick = true;
                extra[q] = "\x01"; /* once */
            }
        if (!pick) continue;
        if (nseen < 64) seen[nseen++] = group;
        char dir[1024], path[1100];
        snprintf(dir, sizeof dir, "%s/tests/data/jax/%s", OT_SOURCE_DIR, name);
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(k, "module")));
        ot_module *m = NULL;
        if (ot_hlo_parse_file(path, NULL, &m) != OT_OK) {
            printf("FAIL %s: parse: %s\n", name, ot_last_error());
            ot_test_failures_++;
            continue;
        }
        const json_t *inputs = json_object_get(k, "inputs");
        size_t ni = json_array_size(inputs);
        ot_value *args = calloc(ni + 1, sizeof *args);
        for (size_t q = 0; q < ni; q++) load_tensor(dir, json_array_get(inputs, q), &args[q]);
        int64_t base = ot_alloc_live();
        bool done = false;
        int64_t n = 1;
        for (; n < 100000 && !done; n++) {
            ot_value r;
            ot_alloc_fail_after(n);
            ot_status s = ot_evaluate(m, args, (int)ni, NULL, &r);
            ot_alloc_fail_after(0);
            if (s == OT_OK) {
                done = true;
                ot_value_release(&r);
            } else if (s != OT_ERR_OUT_OF_MEMORY || r.kind != OT_IR_TOKEN) {
                printf("FAIL %s: allocation %lld failing gave %s (%s)\n", name, (long long)n,
                       ot_status_str(s), ot_last_error());
                ot_test_failures_++;
                break;
            }
            if (ot_alloc_live() != base) {
                printf("FAIL %s: %lld allocations leaked when allocation %lld failed\n", name,
                       (long long)(ot_alloc_live() - base), (long long)n);
                ot_test_failures_++;
                break;
            }
        }
        if (g_verbose) printf("alloc-fail %s: %lld points\n", name, (long long)n);
        EXPECT_TRUE(done);
        for (size_t q = 0; q < ni; q++) ot_value_release(&args[q]);
        free(args);
        ot_module_free(m);
    }
    json_decref(root);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0)
            g_verbose = true;
        else if (strcmp(argv[i], "--opt") == 0)
            g_optimized = true;
        else
            g_filter = argv[i];
    }
    static const ot_test_case tests[] = {OT_TEST(test_corpus), OT_TEST(test_corpus_alloc_failures)};
    return ot_test_main(1, argv, tests, 2);
}
