/* The compiler on every graph-shape family (ot_graph_family_build, docs/compiler.md):
 *  - a guard against super-linear blow-ups: each family's ~5k-instruction module compiles at -O2
 *    within a generous bound (a hang is stopped by a watchdog that names the family);
 *  - exactness: a small module of each family, compiled at -O2 with the verifier after every
 *    pass, run with the reference kernels, with the fast kernels and interpreted fusions, and
 *    with native fused kernels, equals the reference evaluator bit for bit (outside the
 *    reference kernels a NaN may come out with another payload or sign; see check_exact);
 *  - the random and random_ops families over 100 seeds each of 50-400 instructions, and the
 *    random DAG that once made fusion build a cycle (tests/data/compiler/fusion_cycle_400.hlo),
 *    the same way.
 * Runs with a private code cache. */
#include "compiler/native.h"
#include "ot_test.h"
#include "optitpu/optitpu.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static char g_cache[256];

/* ---- watchdog: a compile that never finishes fails the program, naming what it compiled -- */

static char g_doing[160];

static void on_alarm(int sig) {
    (void)sig;
    static const char pre[] = "\nFAIL: did not finish in time: ";
    ssize_t w = write(2, pre, sizeof pre - 1);
    w = write(2, g_doing, strlen(g_doing));
    w = write(2, "\n", 1);
    (void)w;
    _exit(1);
}

static void watch(unsigned seconds, const char *fmt, const char *name, long long n) {
    snprintf(g_doing, sizeof g_doing, fmt, name, n);
    alarm(seconds);
}

/* ---- running a module ------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Finite values of both signs around 1 (zeros too): what parameters of a real program hold. */
static void fill(ot_tensor *t, uint64_t *s) {
    int64_t n = ot_shape_numel_unchecked(&t->shape);
    for (int64_t i = 0; i < n; i++) {
        double v = (double)((int64_t)(rng_next(s) % 4001) - 2000) / 997.0;
        switch (t->shape.dtype) {
        case OT_F32: ((float *)t->data)[i] = (float)v; break;
        case OT_F64: ((double *)t->data)[i] = v; break;
        case OT_S32: ((int32_t *)t->data)[i] = (int32_t)(v * 100); break;
        default:
            memset((char *)t->data + (size_t)i * ot_dtype_size(t->shape.dtype), 0,
                   ot_dtype_size(t->shape.dtype));
        }
    }
}

static bool is_nan_bits(ot_dtype t, const void *p, int64_t i) {
    switch (t) {
    case OT_F32: return (((const uint32_t *)p)[i] & 0x7fffffffu) > 0x7f800000u;
    case OT_F64: return (((const uint64_t *)p)[i] & ~(1ull << 63)) > 0x7ff0000000000000ull;
    case OT_F16: return (((const uint16_t *)p)[i] & 0x7fffu) > 0x7c00u;
    case OT_BF16: return (((const uint16_t *)p)[i] & 0x7fffu) > 0x7f80u;
    case OT_C64: /* either part */
        return (((const uint32_t *)p)[2 * i] & 0x7fffffffu) > 0x7f800000u ||
               (((const uint32_t *)p)[2 * i + 1] & 0x7fffffffu) > 0x7f800000u;
    default: return false;
    }
}

/* The first element that differs, or -1; nan_ok: a NaN equals any NaN. */
static int64_t first_diff(ot_dtype t, const void *want, const void *got, int64_t n, bool nan_ok) {
    size_t es = ot_dtype_size(t);
    for (int64_t i = 0; i < n; i++) {
        if (!memcmp((const char *)want + (size_t)i * es, (const char *)got + (size_t)i * es, es))
            continue;
        if (nan_ok && is_nan_bits(t, want, i) && is_nan_bits(t, got, i)) continue;
        return i;
    }
    return -1;
}

typedef struct run_totals {
    int modules, runs, outputs, native_kernels, interp_kernels;
} run_totals;
static run_totals g_tot;

/* How a compiled module runs: every kernel the reference kernel (ot_run_options.
 * reference_kernels, bit-identical to the evaluator by contract); the fast kernels with fusions
 * interpreted (OPTITPU_CODEGEN=0); the fast kernels with native fusions. */
enum { REFERENCE, INTERPRETED, NATIVE };
static const char *const k_mode[] = {"reference kernels", "interpreted", "native"};

/* Compiles m at -O2 (verifier after every pass, and on the result) for one mode and runs it on
 * in[], leaving the outputs in got[0..nout) (released by the caller). */
static bool run_mode(const char *label, const ot_module *m, ot_device *d, ot_buffer *const *in,
                     int np, int nout, int mode, ot_tensor *got) {
    int fails_before = ot_test_failures_;
    if (mode == NATIVE)
        unsetenv("OPTITPU_CODEGEN");
    else
        setenv("OPTITPU_CODEGEN", "0", 1);
    ot_compile_options o = ot_compile_options_default();
    o.verify_each = true;
    ot_executable *e = NULL;
    ot_status cs = ot_compile(m, &o, &e);
    if (cs != OT_OK) fprintf(stderr, "  %s: compile: %s\n", label, ot_last_error());
    EXPECT_OK(cs);
    ot_buffer **out = ot_calloc((size_t)nout + 1, sizeof *out);
    EXPECT_TRUE(out != NULL);
    if (e && out) {
        EXPECT_OK(ot_module_verify(ot_executable_module(e)));
        const cg_program *p = cc_executable_native(e);
        int nk = ot_executable_kernel_count(e), nnat = 0, nfus = 0;
        for (int k = 0; k < nk; k++) {
            const ot_kernel *kn = ot_executable_kernel(e, k);
            if (kn->kind != OT_KERNEL_FUSION) continue;
            nfus++;
            if (cg_native(p, k)) nnat++;
        }
        if (mode != NATIVE) EXPECT_INT_EQ(nnat, 0);
        g_tot.native_kernels += nnat;
        g_tot.interp_kernels += nfus - nnat;
        ot_run_options ro = ot_run_options_default();
        ro.reference_kernels = mode == REFERENCE;
        ot_status xs = ot_device_execute(d, e, in, np, out, nout, &ro, NULL);
        if (xs != OT_OK)
            fprintf(stderr, "  %s (%s): run: %s\n", label, k_mode[mode], ot_last_error());
        EXPECT_OK(xs);
        for (int j = 0; xs == OT_OK && j < nout; j++) EXPECT_OK(ot_buffer_to_host(out[j], &got[j]));
        g_tot.runs++;
    }
    for (int j = 0; out && j < nout; j++) ot_buffer_free(out[j]);
    ot_free(out);
    ot_executable_free(e);
    unsetenv("OPTITPU_CODEGEN");
    return ot_test_failures_ == fails_before;
}

/* Every output of `got` equals `want` bit for bit (nan_ok: a NaN equals any NaN). */
static bool same_outputs(const char *label, const char *what, int nout,
                         const ot_tensor *const *want, const ot_tensor *got, bool nan_ok) {
    bool all = true;
    for (int j = 0; j < nout; j++) {
        const ot_tensor *w = want[j], *t = &got[j];
        int64_t bad = -2;
        if (w && t->data && w->nbytes == t->nbytes && w->shape.dtype == t->shape.dtype)
            bad = first_diff(t->shape.dtype, w->data, t->data, ot_shape_numel_unchecked(&t->shape),
                             nan_ok);
        if (bad != -1 && all) {
            uint64_t wb = 0, gb = 0;
            size_t es = t->data ? ot_dtype_size(t->shape.dtype) : 0;
            if (bad >= 0 && es <= 8) {
                memcpy(&wb, (const char *)w->data + (size_t)bad * es, es);
                memcpy(&gb, (const char *)t->data + (size_t)bad * es, es);
            }
            fprintf(stderr, "  %s: %s: output %d element %lld: want 0x%llx, got 0x%llx\n", label,
                    what, j, (long long)bad, (unsigned long long)wb, (unsigned long long)gb);
        }
        if (bad != -1) all = false;
        g_tot.outputs++;
    }
    EXPECT_TRUE(all);
    return all;
}

static bool has_dot_or_conv(const ot_module *m) {
    for (int i = 0; i < ot_module_computation_count(m); i++)
        for (const ot_instr *x = ot_module_computation(m, i)->first; x; x = x->next)
            if (x->opcode == OT_OP_DOT || x->opcode == OT_OP_CONVOLUTION) return true;
    return false;
}

/* m at -O2 against the reference evaluator on inputs drawn from seed: run with the reference
 * kernels, bit for bit; interpreted (fast kernels, fusions interpreted) and, with native, native
 * fusions: bit for bit except which NaN a NaN result is (the fast row sum adds its lanes in the
 * canonical order but lets the C compiler pick each add's operand order, so of two NaNs of
 * different signs either may come out; generated code likewise, docs/codegen.md). A
 * module with dots or convolutions is not compared with the evaluator through the fast
 * kernels: OpenBLAS sums in its own order (docs/runtime.md, within 2·K·u·|A|·|B|); its fast runs
 * are compared with each other, which isolates the native fusions. */
static bool check_exact(const char *label, const ot_module *m, uint64_t seed, bool native) {
    const ot_computation *entry = ot_module_entry(m);
    int np = entry->nparams, nout = 0;
    int fails_before = ot_test_failures_;
    ot_value *args = ot_calloc((size_t)np + 1, sizeof *args);
    ot_buffer **in = ot_calloc((size_t)np + 1, sizeof *in);
    ot_device *d = NULL;
    ot_value ref = ot_value_empty();
    const ot_tensor **want = NULL;
    ot_tensor *got[3] = {NULL, NULL, NULL};
    bool blas = has_dot_or_conv(m);
    if (!args || !in || ot_host_device_create(0, 0, &d) != OT_OK) {
        EXPECT_TRUE(false);
        goto done;
    }
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 12345;
    for (int k = 0; k < np; k++) {
        EXPECT_TRUE(ot_ir_shape_is_array(&entry->params[k]->shape));
        if (!ot_ir_shape_is_array(&entry->params[k]->shape)) goto done;
        EXPECT_OK(ot_value_alloc_array(&args[k], &entry->params[k]->shape.array));
        fill(&args[k].array, &s);
        EXPECT_OK(ot_buffer_from_host(d, &args[k].array, &in[k]));
    }
    if (ot_test_failures_ != fails_before) goto done;
    EXPECT_OK(ot_evaluate(m, args, np, NULL, &ref));
    if (ot_test_failures_ != fails_before) goto done;
    nout = ot_value_leaf_count(&ref);
    want = ot_calloc((size_t)nout + 1, sizeof *want);
    for (int mode = 0; mode < 3; mode++) got[mode] = ot_calloc((size_t)nout + 1, sizeof(ot_tensor));
    if (!want || !got[0] || !got[1] || !got[2]) goto done;
    for (int j = 0; j < nout; j++) want[j] = &ot_value_leaf(&ref, j)->array;
    if (!run_mode(label, m, d, in, np, nout, REFERENCE, got[REFERENCE])) goto done;
    same_outputs(label, k_mode[REFERENCE], nout, want, got[REFERENCE], false);
    if (!run_mode(label, m, d, in, np, nout, INTERPRETED, got[INTERPRETED])) goto done;
    if (!blas) same_outputs(label, k_mode[INTERPRETED], nout, want, got[INTERPRETED], true);
    if (native) {
        if (!run_mode(label, m, d, in, np, nout, NATIVE, got[NATIVE])) goto done;
        if (!blas) same_outputs(label, "native vs evaluator", nout, want, got[NATIVE], true);
        const ot_tensor **interp = ot_calloc((size_t)nout + 1, sizeof *interp);
        for (int j = 0; interp && j < nout; j++) interp[j] = &got[INTERPRETED][j];
        if (interp) same_outputs(label, "native vs interpreted", nout, interp, got[NATIVE], true);
        ot_free(interp);
    }
    g_tot.modules++;
done:
    for (int mode = 0; mode < 3; mode++) {
        for (int j = 0; got[mode] && j < nout; j++) ot_tensor_release(&got[mode][j]);
        ot_free(got[mode]);
    }
    ot_free(want);
    ot_value_release(&ref);
    for (int k = 0; args && k < np; k++) {
        ot_value_release(&args[k]);
        if (in) ot_buffer_free(in[k]);
    }
    ot_free(args);
    ot_free(in);
    ot_device_free(d);
    return ot_test_failures_ == fails_before;
}

/* ---- the tests ------------------------------------------------------------------------- */

/* (a) Each family's ~5k-instruction module (2k under sanitizers) compiles at -O2 in a bound
 * two orders of magnitude above what a linear compiler takes (10-100 ms here): it catches a
 * blow-up, not a slow machine. Native code is off: the bound is on the compiler's own passes,
 * not on the system C compiler. */
static void test_families_compile_time_guard(void) {
    int64_t n = SANITIZED ? 2000 : 5000;
    double bound = SANITIZED ? 30.0 : 5.0;
    for (int f = 0; f < ot_graph_family_count(); f++) {
        const char *name = ot_graph_family_name(f);
        ot_module *m = NULL;
        EXPECT_OK(ot_graph_family_build(name, n, 1, &m));
        if (!m) continue;
        ot_executable *e = NULL;
        watch((unsigned)(bound * 4), "compiling family %s (%lld instructions) at -O2", name,
              (long long)ot_module_instr_count(m));
        ot_compile_options o = ot_compile_options_default();
        o.native = OT_NATIVE_OFF;
        uint64_t t0 = ot_now_ns();
        ot_status s = ot_compile(m, &o, &e);
        double sec = (double)(ot_now_ns() - t0) / 1e9;
        alarm(0);
        if (s != OT_OK) fprintf(stderr, "  %s: %s\n", name, ot_last_error());
        EXPECT_OK(s);
        if (sec > bound)
            fprintf(stderr, "  %s: %lld instructions took %.2f s (bound %.0f s)\n", name,
                    (long long)ot_module_instr_count(m), sec, bound);
        EXPECT_TRUE(sec <= bound);
        printf("  %-14s %6lld instrs  %.3f s\n", name, (long long)ot_module_instr_count(m), sec);
        ot_executable_free(e);
        ot_module_free(m);
    }
}

/* The generator's contract: about n instructions, the same module for the same seed. */
static void test_families_sizes_and_determinism(void) {
    for (int f = 0; f < ot_graph_family_count(); f++) {
        const char *name = ot_graph_family_name(f);
        ot_module *a = NULL, *b = NULL;
        EXPECT_OK(ot_graph_family_build(name, 3000, 7, &a));
        EXPECT_OK(ot_graph_family_build(name, 3000, 7, &b));
        if (!a || !b) {
            ot_module_free(a);
            ot_module_free(b);
            continue;
        }
        int64_t na = ot_module_instr_count(a);
        if (strcmp(name, "fori_unrolled") != 0) /* a fixed size below 6k */
            EXPECT_TRUE(na > 2700 && na < 3300);
        char *ta = ot_hlo_print(a, NULL), *tb = ot_hlo_print(b, NULL);
        EXPECT_TRUE(ta && tb && !strcmp(ta, tb));
        ot_free(ta);
        ot_free(tb);
        ot_module_free(a);
        ot_module_free(b);
    }
    ot_module *m = NULL;
    EXPECT_STATUS(ot_graph_family_build("no_such_family", 1000, 0, &m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(m == NULL);
    EXPECT_STATUS(ot_graph_family_build("residual", 3, 0, &m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(ot_graph_family_name(ot_graph_family_count()) == NULL);
}

/* (b) A small module of every family: -O2 native and interpreted equal the evaluator. */
static void test_families_exact(void) {
    for (int f = 0; f < ot_graph_family_count(); f++) {
        const char *name = ot_graph_family_name(f);
        for (uint64_t seed = 1; seed <= 2; seed++) {
            /* native code costs a system-compiler run per module: the native check takes the
             * smaller module */
            ot_module *m = NULL;
            EXPECT_OK(ot_graph_family_build(name, seed == 1 ? 120 : 300, seed, &m));
            if (!m) continue;
            char label[96];
            snprintf(label, sizeof label, "%s seed %llu (%lld instrs)", name,
                     (unsigned long long)seed, (long long)ot_module_instr_count(m));
            watch(SANITIZED ? 600 : 120, "checking family %s (seed %lld)", name, (long long)seed);
            uint64_t t0 = ot_now_ns();
            /* fori_unrolled's 2,000 fusions of 16 elements are one 3 MB C file, minutes of cc
             * (the default size threshold leaves them interpreted): not run natively here */
            check_exact(label, m, seed, seed == 1 && strcmp(name, "fori_unrolled") != 0);
            alarm(0);
            printf("  %-40s %.2f s\n", label, (double)(ot_now_ns() - t0) / 1e9);
            fflush(stdout);
            ot_module_free(m);
        }
    }
}

/* (c) A random family over many seeds of 50-400 instructions: every one compiles, verifies and
 * is exact with the reference kernels and interpreted; every 25th also with native code (a
 * system-compiler run each). */
static void random_seeds(const char *family, int nseeds, uint64_t seed0) {
    /* a longer search: OT_RANDOM_SEEDS=count[,first] */
    const char *env = getenv("OT_RANDOM_SEEDS");
    if (env && *env) {
        char *end = NULL;
        long c = strtol(env, &end, 10);
        if (c >= 2) nseeds = (int)c;
        if (end && *end == ',') seed0 = strtoull(end + 1, NULL, 10);
    }
    for (int k = 0; k < nseeds; k++) {
        uint64_t seed = seed0 + (uint64_t)k;
        int64_t n = 50 + (int64_t)k * 350 / (nseeds - 1);
        ot_module *m = NULL;
        EXPECT_OK(ot_graph_family_build(family, n, seed, &m));
        if (!m) continue;
        char label[80];
        snprintf(label, sizeof label, "%s seed %llu (%lld instrs)", family,
                 (unsigned long long)seed, (long long)ot_module_instr_count(m));
        watch(SANITIZED ? 600 : 60, "checking family %s (seed %lld)", family, (long long)seed);
        bool ok = check_exact(label, m, seed, k % 25 == 0);
        alarm(0);
        if (!ok) {
            char *t = ot_hlo_print(m, NULL);
            fprintf(stderr, "%s\n", t ? t : "");
            ot_free(t);
        }
        ot_module_free(m);
    }
}

/* The random family, 100 seeds from 1000. */
static void test_random_many_seeds(void) {
    random_seeds("random", SANITIZED ? 30 : 100, 1000);
}

/* random_ops (every dtype, rank 0-5 with size-0 and size-1 dims, shape ops, gather/scatter,
 * sort, windows, while/conditional, rng, bitcasts), 100 seeds from 1. */
static void test_random_ops_many_seeds(void) {
    random_seeds("random_ops", SANITIZED ? 30 : 100, 1);
}

/* Larger random DAGs, where fusion's exact cycle check splits clusters (before its split kept
 * copies in the clusters it did not split, one seed in four at 2k failed with "clusters still
 * form a cycle", seed 28 at 500 among them): they compile, verify and are exact, interpreted. */
static void test_random_large_seeds(void) {
    static const struct {
        uint64_t seed;
        int64_t n;
    } cases[] = {{28, 500}, {3, 1000}, {7, 2000}, {1, 2000}, {2, 2000}, {4, 2000}, {2, 5000}};
    int ncases = SANITIZED ? 3 : (int)(sizeof cases / sizeof cases[0]);
    for (int k = 0; k < ncases; k++) {
        ot_module *m = NULL;
        EXPECT_OK(ot_graph_family_build("random", cases[k].n, cases[k].seed, &m));
        if (!m) continue;
        char label[64];
        snprintf(label, sizeof label, "random seed %llu (%lld instrs)",
                 (unsigned long long)cases[k].seed, (long long)ot_module_instr_count(m));
        watch(SANITIZED ? 600 : 60, "checking family %s (seed %lld)", "random",
              (long long)cases[k].seed);
        check_exact(label, m, cases[k].seed, false);
        alarm(0);
        ot_module_free(m);
    }
}

/* random_ops modules that found a bug, native code included: an in-place c64 convert (seed
 * 28), a c64 reduce simplified away (1010), SIGFPE in the native code generator on a reduce of no
 * elements (326) and SIGSEGV on a remapped operand it could not emit (1026). */
static void test_random_ops_found(void) {
    static const struct {
        uint64_t seed;
        int64_t n;
    } cases[] = {{28, 145}, {1010, 233}, {326, 335}, {1026, 247}};
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        ot_module *m = NULL;
        EXPECT_OK(ot_graph_family_build("random_ops", cases[k].n, cases[k].seed, &m));
        if (!m) continue;
        char label[64];
        snprintf(label, sizeof label, "random_ops seed %llu (%lld instrs)",
                 (unsigned long long)cases[k].seed, (long long)ot_module_instr_count(m));
        watch(SANITIZED ? 600 : 180, "checking family %s (seed %lld)", "random_ops",
              (long long)cases[k].seed);
        check_exact(label, m, cases[k].seed, true);
        alarm(0);
        ot_module_free(m);
    }
}

/* The random DAG that made fusion build a cycle. */
static void test_fusion_cycle_fixture(void) {
    ot_module *m = NULL;
    ASSERT_OK(
        ot_hlo_parse_file(OT_SOURCE_DIR "/tests/data/compiler/fusion_cycle_400.hlo", NULL, &m));
    watch(SANITIZED ? 600 : 60, "checking %s%lld", "fusion_cycle_400.hlo", 0);
    check_exact("fusion_cycle_400.hlo", m, 1, true);
    check_exact("fusion_cycle_400.hlo", m, 2, false);
    alarm(0);
    ot_module_free(m);
}

static void test_summary(void) {
    printf("  %d modules, %d compiled runs, %d outputs compared; fusion kernels %d native, %d "
           "interpreted\n",
           g_tot.modules, g_tot.runs, g_tot.outputs, g_tot.native_kernels, g_tot.interp_kernels);
    /* the native path was exercised, not silently replaced by the interpreter */
    EXPECT_TRUE(g_tot.native_kernels > 0);
}

static void cleanup_cache(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_cache);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_cache);
}

int main(int argc, char **argv) {
    snprintf(g_cache, sizeof g_cache, "/tmp/ot_families_XXXXXX");
    if (!mkdtemp(g_cache)) {
        perror("mkdtemp");
        return 1;
    }
    setenv("OPTITPU_CACHE_DIR", g_cache, 1);
    /* native code for every fusion, however small (the default leaves small ones interpreted) */
    setenv("OPTITPU_CODEGEN_MIN_ELEMENTS", "0", 1);
    signal(SIGALRM, on_alarm);
    static const ot_test_case tests[] = {
        OT_TEST(test_families_sizes_and_determinism),
        OT_TEST(test_families_compile_time_guard),
        OT_TEST(test_families_exact),
        OT_TEST(test_random_many_seeds),
        OT_TEST(test_random_ops_many_seeds),
        OT_TEST(test_random_ops_found),
        OT_TEST(test_random_large_seeds),
        OT_TEST(test_fusion_cycle_fixture),
        OT_TEST(test_summary),
    };
    int rc = ot_test_main(argc, argv, tests, sizeof tests / sizeof tests[0]);
    cleanup_cache();
    return rc;
}
