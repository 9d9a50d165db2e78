/* The compiler's work grows linearly (or n log n) with the graph on shapes that once made a pass
 * quadratic or recurse as deep as the graph (scripts/gen_scale_hlo.py has larger versions of them
 * for scripts/scale_check.py):
 *  - fanout_tuple: one value read by n ops, all duplicates of four, in one root tuple (CSE
 *    redirected the tuple's operands one merge at a time, scanning all of them each time);
 *  - dead_wide: a dead concatenate and tuple of n distinct slices (removing an instruction
 *    scanned its earlier operands for each operand);
 *  - nest_call: calls nested n/4 deep (inlining callees first copied d·(d+1)/2 instructions);
 *  - nest_fusion: fusions nested n/4 deep (the fusion analysis recursed once per level and
 *    analysed each level again for every fusion above it);
 *  - many_calls: n/5 computations each called once in a chain (CSE's hash left the inlined
 *    chain's hashes one tag and neighbouring slots: probes walked one long run);
 *  - nest_while, nest_cond: while loops (conditionals) nested n/6 deep, every level taken: four
 *    levels compiled, the rest evaluated by the runtime, one evaluator level per level (which
 *    overflowed a 256 KiB stack at about 200 levels).
 * Each module is parsed and compiled (-O2, native code off) on a thread with a 256 KiB stack, at
 * n and 4n; the thread's CPU time at 4n must stay within 8 times that at n (a quadratic pass
 * takes 16 times) plus a margin for timer noise, the best of three runs each. At n, all but the
 * 1,000-level nests also run on that stack, equal to the evaluator bit for bit (the runtime's
 * leaf tables, a fixed 289 KiB frame, overflowed it on every program). */
#include "ot_test.h"
#include "optitpu/optitpu.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* ---- HLO text ------------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->n;
        int w = b->p ? vsnprintf(b->p + b->n, room, fmt, ap) : -1;
        va_end(ap);
        if (w >= 0 && (size_t)w < room) {
            b->n += (size_t)w;
            return;
        }
        size_t ncap = b->cap ? b->cap * 2 : 1 << 16;
        while (w >= 0 && ncap - b->n <= (size_t)w) ncap *= 2;
        char *np = realloc(b->p, ncap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
}

static void gen_fanout_tuple(sbuf *b, int n) {
    static const char *const ops[] = {"add", "multiply", "subtract", "maximum"};
    sb_printf(b, "HloModule fanout_tuple\nENTRY main {\n  p0 = f32[4] parameter(0)\n"
                 "  x = f32[4] exponential(p0)\n");
    for (int i = 0; i < n; i++) sb_printf(b, "  u%d = f32[4] %s(x, x)\n", i, ops[i % 4]);
    sb_printf(b, "  ROOT r = (");
    for (int i = 0; i < n; i++) sb_printf(b, "%sf32[4]", i ? ", " : "");
    sb_printf(b, ") tuple(");
    for (int i = 0; i < n; i++) sb_printf(b, "%su%d", i ? ", " : "", i);
    sb_printf(b, ")\n}\n");
}

static void gen_dead_wide(sbuf *b, int n) {
    sb_printf(b, "HloModule dead_wide\nENTRY main {\n  p0 = f32[%d] parameter(0)\n", n);
    for (int i = 0; i < n; i++)
        sb_printf(b, "  s%d = f32[1] slice(p0), slice={[%d:%d]}\n", i, i, i + 1);
    sb_printf(b, "  c = f32[%d] concatenate(", n);
    for (int i = 0; i < n; i++) sb_printf(b, "%ss%d", i ? ", " : "", i);
    sb_printf(b, "), dimensions={0}\n  t = (");
    for (int i = 0; i < n; i++) sb_printf(b, "%sf32[1]", i ? ", " : "");
    sb_printf(b, ") tuple(");
    for (int i = 0; i < n; i++) sb_printf(b, "%ss%d", i ? ", " : "", i);
    sb_printf(b, ")\n  ROOT r = f32[1] sine(s0)\n}\n");
}

/* lvl_d: y = OP(negate(p)) calling lvl_{d+1}; ROOT cosine(y) (+ p for fusions) */
static void gen_nest(sbuf *b, int n, bool fusion) {
    int depth = n / 4;
    sb_printf(b,
              "HloModule nest\nlvl%d {\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] tanh(p)\n}\n",
              depth);
    for (int d = depth - 1; d >= 0; d--) {
        if (d == 0)
            sb_printf(b, "ENTRY main {\n");
        else
            sb_printf(b, "lvl%d {\n", d);
        sb_printf(b, "  p = f32[4] parameter(0)\n  a = f32[4] negate(p)\n");
        if (fusion)
            sb_printf(b,
                      "  y = f32[4] fusion(a), kind=kLoop, calls=lvl%d\n"
                      "  ROOT r = f32[4] add(y, p)\n}\n",
                      d + 1);
        else
            sb_printf(b, "  y = f32[4] call(a), to_apply=lvl%d\n  ROOT r = f32[4] cosine(y)\n}\n",
                      d + 1);
    }
}

static void gen_nest_call(sbuf *b, int n) {
    gen_nest(b, n, false);
}
static void gen_nest_fusion(sbuf *b, int n) {
    gen_nest(b, n, true);
}

/* Control flow nested n/6 deep: lvl_d is a while body over (s32[], f32[4]) running one
 * iteration whose value goes through a loop on lvl_{d+1} (cond = true: through a conditional
 * whose true branch, always taken, is lvl_{d+1}). Past the compiler's loop depth
 * (CC_LOOP_MAX_DEPTH) the runtime evaluates the rest, one evaluator level per level. */
static void gen_nest_flow(sbuf *b, int n, bool cond) {
    int depth = n / 6;
    sb_printf(b,
              "HloModule nest_flow\nlvl%d {\n  t = (s32[], f32[4]) parameter(0)\n"
              "  i = s32[] get-tuple-element(t), index=0\n  one = s32[] constant(1)\n"
              "  i1 = s32[] add(i, one)\n  p = f32[4] get-tuple-element(t), index=1\n"
              "  q = f32[4] tanh(p)\n  ROOT r = (s32[], f32[4]) tuple(i1, q)\n}\n",
              depth);
    sb_printf(b, "cond {\n  p = (s32[], f32[4]) parameter(0)\n"
                 "  i = s32[] get-tuple-element(p), index=0\n  one = s32[] constant(1)\n"
                 "  ROOT c = pred[] compare(i, one), direction=LT\n}\n");
    sb_printf(b, "other {\n  t = (s32[], f32[4]) parameter(0)\n  ROOT r = (s32[], f32[4]) "
                 "copy(t)\n}\n");
    for (int d = depth - 1; d >= 0; d--) {
        if (d == 0)
            sb_printf(b, "ENTRY main {\n  p0 = f32[4] parameter(0)\n  z = s32[] constant(0)\n"
                         "  t = (s32[], f32[4]) tuple(z, p0)\n");
        else
            sb_printf(b, "lvl%d {\n  t = (s32[], f32[4]) parameter(0)\n", d);
        sb_printf(b, "  p = f32[4] get-tuple-element(t), index=1\n  a = f32[4] negate(p)\n"
                     "  i = s32[] get-tuple-element(t), index=0\n  one = s32[] constant(1)\n"
                     "  i1 = s32[] add(i, one)\n  z0 = s32[] constant(0)\n"
                     "  wi = (s32[], f32[4]) tuple(z0, a)\n");
        if (cond)
            sb_printf(b,
                      "  s = f32[1] slice(a), slice={[0:1]}\n  s0 = f32[] reshape(s)\n"
                      "  c = pred[] compare(s0, s0), direction=EQ\n"
                      "  w = (s32[], f32[4]) conditional(c, wi, wi), true_computation=lvl%d, "
                      "false_computation=other\n",
                      d + 1);
        else
            sb_printf(b, "  w = (s32[], f32[4]) while(wi), condition=cond, body=lvl%d\n", d + 1);
        sb_printf(b, "  y = f32[4] get-tuple-element(w), index=1\n  q = f32[4] sine(y)\n");
        if (d == 0)
            sb_printf(b, "  ROOT r = f32[4] cosine(q)\n}\n");
        else
            sb_printf(b, "  ROOT r = (s32[], f32[4]) tuple(i1, q)\n}\n");
    }
}

static void gen_nest_while(sbuf *b, int n) {
    gen_nest_flow(b, n, false);
}
static void gen_nest_cond(sbuf *b, int n) {
    gen_nest_flow(b, n, true);
}

static void gen_many_calls(sbuf *b, int n) {
    int k = n / 5;
    sb_printf(b, "HloModule many_calls\n");
    for (int i = 0; i < k; i++)
        sb_printf(b, "c%d {\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] sine(p)\n}\n", i);
    sb_printf(b, "ENTRY main {\n  p0 = f32[4] parameter(0)\n");
    for (int i = 0; i < k; i++)
        sb_printf(b, "  y%d = f32[4] call(%s%d), to_apply=c%d\n  z%d = f32[4] add(y%d, p0)\n", i,
                  i ? "z" : "p", i ? i - 1 : 0, i, i, i);
    sb_printf(b, "  ROOT r = f32[4] copy(z%d)\n}\n", k - 1);
}

/* ---- timing on a small stack ---------------------------------------------------------- */

typedef struct job {
    const char *text;
    size_t len;
    bool run; /* also run it (zeros in) and evaluate it, on the same stack */
    double cpu_s;
    ot_status st;
    char err[256];
    int64_t kernels;
    int64_t outputs_compared;
} job;

/* e on zeros for m's parameters against the evaluator on them: bit for bit. */
static ot_status run_and_evaluate(const ot_module *m, const ot_executable *e, job *j) {
    const ot_computation *entry = ot_module_entry(m);
    int np = entry->nparams, nout = ot_executable_output_count(e);
    ot_device *d = NULL;
    ot_value *args = calloc((size_t)np + 1, sizeof *args);
    ot_buffer **in = calloc((size_t)np + 1, sizeof *in),
              **out = calloc((size_t)nout + 1, sizeof *out);
    ot_value ref = ot_value_empty();
    ot_status s = args && in && out ? ot_host_device_create(0, 0, &d) : OT_ERR_OUT_OF_MEMORY;
    for (int k = 0; s == OT_OK && k < np; k++) {
        s = ot_value_alloc_array(&args[k], &entry->params[k]->shape.array);
        if (s == OT_OK) s = ot_buffer_from_host(d, &args[k].array, &in[k]);
    }
    if (s == OT_OK) s = ot_device_execute(d, e, in, np, out, nout, NULL, NULL);
    if (s == OT_OK) s = ot_evaluate(m, args, np, NULL, &ref);
    if (s == OT_OK && ot_value_leaf_count(&ref) != nout) s = OT_ERR_INTERNAL;
    for (int q = 0; s == OT_OK && q < nout; q++) {
        ot_tensor t;
        s = ot_buffer_to_host(out[q], &t);
        if (s != OT_OK) break;
        const ot_tensor *w = &ot_value_leaf(&ref, q)->array;
        if (w->nbytes != t.nbytes || memcmp(w->data, t.data, (size_t)t.nbytes))
            s = ot_error(OT_ERR_INTERNAL, "output %d differs from the evaluator's", q);
        ot_tensor_release(&t);
        j->outputs_compared++;
    }
    for (int q = 0; out && q < nout; q++) ot_buffer_free(out[q]);
    for (int k = 0; args && in && k < np; k++) {
        ot_buffer_free(in[k]);
        ot_value_release(&args[k]);
    }
    ot_value_release(&ref);
    free(args);
    free(in);
    free(out);
    ot_device_free(d);
    return s;
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *compile_job(void *arg) {
    job *j = arg;
    double t0 = thread_cpu_s();
    ot_hlo_parse_options po = ot_hlo_parse_options_default();
    ot_module *m = NULL;
    ot_executable *e = NULL;
    j->st = ot_hlo_parse(j->text, j->len, &po, &m);
    if (j->st == OT_OK) {
        ot_compile_options o = ot_compile_options_default();
        o.native = OT_NATIVE_OFF;
        j->st = ot_compile(m, &o, &e);
    }
    j->cpu_s = thread_cpu_s() - t0;
    if (j->st == OT_OK && j->run) j->st = run_and_evaluate(m, e, j);
    if (j->st != OT_OK) snprintf(j->err, sizeof j->err, "%s", ot_last_error());
    j->kernels = e ? ot_executable_kernel_count(e) : -1;
    ot_executable_free(e);
    ot_module_free(m);
    return NULL;
}

/* Parses and compiles text on a thread with a 256 KiB stack (with `run`, then runs it and
 * evaluates it there, untimed); the compile's thread CPU seconds, or -1. */
static double timed_compile(const char *name, const sbuf *b, bool run) {
    job j = {.text = b->p, .len = b->n, .run = run};
    pthread_attr_t at;
    pthread_t th;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, SANITIZED ? 4u << 20 : 256u << 10);
    int rc = pthread_create(&th, &at, compile_job, &j);
    pthread_attr_destroy(&at);
    EXPECT_INT_EQ(rc, 0);
    if (rc != 0) return -1;
    pthread_join(th, NULL);
    if (j.st != OT_OK) fprintf(stderr, "  %s: %s\n", name, j.err);
    EXPECT_OK(j.st);
    EXPECT_TRUE(j.kernels > 0);
    if (run) EXPECT_TRUE(j.outputs_compared > 0);
    return j.st == OT_OK ? j.cpu_s : -1;
}

typedef struct shape {
    const char *name;
    void (*gen)(sbuf *b, int n);
    int n;
    bool run; /* run at n: not nest_call, nest_fusion (1,000 levels, past the evaluator's 256) */
} shape;

static void check_shape(const shape *s) {
    int n = SANITIZED ? s->n / 4 : s->n;
    double t[2] = {1e30, 1e30};
    for (int rep = 0; rep < 3; rep++)
        for (int k = 0; k < 2; k++) {
            sbuf b = {0};
            s->gen(&b, k ? 4 * n : n);
            EXPECT_TRUE(!b.oom);
            if (b.oom) {
                free(b.p);
                return;
            }
            /* run once, at n: at 4n nest_while nests past the evaluator's call limit */
            double c = timed_compile(s->name, &b, s->run && rep == 0 && k == 0);
            free(b.p);
            if (c < 0) return;
            if (c < t[k]) t[k] = c;
        }
    double bound = 8 * t[0] + 0.05;
    printf("  %-14s n=%-6d %.4f s, 4n %.4f s (x%.1f, bound %.4f s)\n", s->name, n, t[0], t[1],
           t[1] / (t[0] > 0 ? t[0] : 1e-9), bound);
    if (t[1] > bound)
        fprintf(stderr, "  %s: 4n took %.4f s, n %.4f s: more than linear\n", s->name, t[1], t[0]);
    EXPECT_TRUE(t[1] <= bound);
}

static const shape k_shapes[] = {
    {"fanout_tuple", gen_fanout_tuple, 12000, true}, {"dead_wide", gen_dead_wide, 10000, true},
    {"nest_call", gen_nest_call, 4000, false},       {"nest_fusion", gen_nest_fusion, 4000, false},
    {"many_calls", gen_many_calls, 20000, true},     {"nest_while", gen_nest_while, 1500, true},
    {"nest_cond", gen_nest_cond, 1500, true},
};

static void test_fanout_tuple(void) {
    check_shape(&k_shapes[0]);
}
static void test_dead_wide(void) {
    check_shape(&k_shapes[1]);
}
static void test_nest_call(void) {
    check_shape(&k_shapes[2]);
}
static void test_nest_fusion(void) {
    check_shape(&k_shapes[3]);
}
static void test_many_calls(void) {
    check_shape(&k_shapes[4]);
}
static void test_nest_while(void) {
    check_shape(&k_shapes[5]);
}
static void test_nest_cond(void) {
    check_shape(&k_shapes[6]);
}

int main(int argc, char **argv) {
    static const ot_test_case tests[] = {
        OT_TEST(test_fanout_tuple), OT_TEST(test_dead_wide),  OT_TEST(test_nest_call),
        OT_TEST(test_nest_fusion),  OT_TEST(test_many_calls), OT_TEST(test_nest_while),
        OT_TEST(test_nest_cond),
    };
    return ot_test_main(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
