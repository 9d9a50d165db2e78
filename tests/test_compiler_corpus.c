/* The compiler over the JAX conformance corpus (tests/data/jax): every case's module.hlo and
 * module.opt.hlo (XLA's optimized graph, with its own fusions) is compiled at -O0 and -O2 with
 * the verifier after every pass, and the compiled module evaluated by the reference evaluator on
 * the recorded inputs must give bit-identical results to the source module (every rewrite is
 * exact, see docs/compiler.md). Modules with features the parser, the evaluator or the compiler
 * reports as UNIMPLEMENTED are counted as skipped, never as passed.
 *
 * Usage: test_compiler_corpus [NAME-SUBSTRING] [-v] */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "ot_test.h"

#ifndef OT_SOURCE_DIR
#define OT_SOURCE_DIR "."
#endif

static const char *g_filter;
static bool g_verbose;
static int g_ran, g_skipped;

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Loads input_K.npy for each entry parameter (bf16 is stored as u16 and relabelled). */
static ot_status load_inputs(const char *dir, const ot_module *m, ot_value *args, int *n) {
    ot_computation *e = ot_module_entry(m);
    *n = 0;
    if (e->nparams > 64) return ot_error(OT_ERR_UNIMPLEMENTED, "more than 64 parameters");
    for (int k = 0; k < e->nparams; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/input_%d.npy", dir, k);
        ot_tensor t;
        ot_status s = ot_npy_read_file(path, &t);
        if (s != OT_OK) return s;
        if (e->params[k]->shape.kind == OT_IR_ARRAY && e->params[k]->shape.array.dtype == OT_BF16 &&
            t.shape.dtype == OT_U16)
            t.shape.dtype = OT_BF16;
        s = ot_value_from_tensor(&args[k], &t);
        ot_tensor_release(&t);
        if (s != OT_OK) return s;
        (*n)++;
    }
    return OT_OK;
}

static void run_module(const char *dir, const char *name, const char *file) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "r");
    if (!f) return;
    fclose(f);
    ot_module *m = NULL;
    ot_status s = ot_hlo_parse_file(path, NULL, &m);
    if (s != OT_OK) {
        g_skipped++;
        if (g_verbose) printf("skip %s/%s: %s\n", name, file, ot_last_error());
        return;
    }
    ot_value args[64];
    int nargs = 0;
    ot_value ref = ot_value_empty();
    s = load_inputs(dir, m, args, &nargs);
    if (s == OT_OK) s = ot_evaluate(m, args, nargs, NULL, &ref);
    if (s != OT_OK) {
        g_skipped++;
        if (g_verbose) printf("skip %s/%s: %s\n", name, file, ot_last_error());
        goto done;
    }
    for (int lvl = 0; lvl <= 2; lvl += 2) {
        ot_compile_options o = ot_compile_options_default();
        o.opt_level = lvl;
        o.verify_each = true;
        ot_executable *e = NULL;
        s = ot_compile(m, &o, &e);
        if (s == OT_ERR_UNIMPLEMENTED) {
            g_skipped++;
            if (g_verbose) printf("skip %s/%s -O%d: %s\n", name, file, lvl, ot_last_error());
            continue;
        }
        if (s != OT_OK) {
            OT_T_FAIL_("%s/%s -O%d: compile: %s", name, file, lvl, ot_last_error());
            continue;
        }
        ot_value got = ot_value_empty();
        s = ot_evaluate(ot_executable_module(e), args, nargs, NULL, &got);
        if (s != OT_OK)
            OT_T_FAIL_("%s/%s -O%d: evaluating the compiled module: %s", name, file, lvl,
                       ot_last_error());
        else if (!ot_value_equal(&ref, &got))
            OT_T_FAIL_("%s/%s -O%d: results differ from the source module", name, file, lvl);
        else
            g_ran++;
        ot_value_release(&got);
        ot_executable_free(e);
    }
done:
    ot_value_release(&ref);
    for (int k = 0; k < nargs; k++) ot_value_release(&args[k]);
    ot_module_free(m);
}

static void test_corpus(void) {
    const char *root = OT_SOURCE_DIR "/tests/data/jax";
    DIR *d = opendir(root);
    ASSERT_TRUE(d != NULL);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (g_filter && !strstr(de->d_name, g_filter)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            names = realloc(names, cap * sizeof *names);
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str);
    for (size_t k = 0; k < n; k++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", root, names[k]);
        run_module(dir, names[k], "module.hlo");
        run_module(dir, names[k], "module.opt.hlo");
        free(names[k]);
    }
    free(names);
    printf("compiled and compared: %d, skipped: %d\n", g_ran, g_skipped);
    EXPECT_TRUE(g_filter || g_ran > 500);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v"))
            g_verbose = true;
        else
            g_filter = argv[i];
    }
    static const ot_test_case tests[] = {OT_TEST(test_corpus)};
    return ot_test_main(1, argv, tests, 1);
}
