/* The fast kernels' scratch kept between runs of one executable (exec/kernels.h
 * ex_scratch_cache, compiler/scratch.h): later runs allocate nothing, concurrent runs of one
 * executable from several threads share the cache and still get the reference's results, the
 * cache holds at most EX_SCRATCH_SLOTS buffers, and freeing the executable frees them. */
#include "compiler/scratch.h"
#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#include <pthread.h>

/* A 3x3 NHWC convolution (im2col scratch) followed by a transpose of its result. */
static const char *k_hlo =
    "HloModule conv\nENTRY e {\n  x = f32[2,12,12,8] parameter(0)\n"
    "  w = f32[3,3,8,16] parameter(1)\n"
    "  c = f32[2,12,12,16] convolution(x, w), window={size=3x3 pad=1_1x1_1}, "
    "dim_labels=b01f_01io->b01f\n"
    "  ROOT t = f32[16,2,12,12] transpose(c), dimensions={3,0,1,2}\n}\n";

typedef struct job {
    const ot_executable *e;
    const ot_tensor *args;
    const ot_tensor *want;
    ot_threadpool *pool;
    int runs, bad;
} job;

static ot_status run_once(const ot_executable *e, const ot_tensor *args, ot_tensor *out,
                          ot_threadpool *pool, bool reference) {
    int64_t an = ot_executable_arena_size(e);
    void *arena = ot_aligned_alloc(64, (size_t)(an ? an : 64));
    if (!arena) return OT_ERR_OUT_OF_MEMORY;
    void *params[2] = {args[0].data, args[1].data}, *outs[1] = {out->data};
    ot_run_options o = ot_run_options_default();
    o.pool = pool;
    o.reference_kernels = reference;
    ot_run_result r;
    ot_status st = ot_execute_on_host(e, arena, params, outs, &o, 0, &r);
    ot_aligned_free(arena);
    return st;
}

static void *worker(void *arg) {
    job *j = arg;
    ot_tensor out;
    if (ot_tensor_alloc(&out, &j->want->shape) != OT_OK) {
        j->bad = j->runs;
        return NULL;
    }
    for (int k = 0; k < j->runs; k++) {
        memset(out.data, 0, out.nbytes);
        if (run_once(j->e, j->args, &out, j->pool, false) != OT_OK ||
            memcmp(out.data, j->want->data, out.nbytes) != 0)
            j->bad++;
    }
    ot_tensor_release(&out);
    return NULL;
}

static void test_scratch_kept_and_shared(void) {
    int64_t live0 = ot_alloc_live();
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(k_hlo, strlen(k_hlo), NULL, &m));
    ot_compile_options co = ot_compile_options_default();
    co.opt_level = 0;
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, &co, &e));
    const ot_computation *c = ot_module_entry(m);
    ot_tensor args[2], want;
    for (int a = 0; a < 2; a++) {
        ASSERT_OK(ot_tensor_alloc(&args[a], &c->params[a]->shape.array));
        float *v = args[a].data;
        for (int64_t q = 0; q < (int64_t)(args[a].nbytes / 4); q++)
            v[q] = (float)((q * 7919 + a * 31) % 17) / 8.0f - 1.0f; /* exact products and sums */
    }
    const ot_slot *sl = ot_executable_slot(e, ot_executable_output_slot(e, 0));
    ASSERT_OK(ot_tensor_alloc(&want, &sl->shape));
    ASSERT_OK(run_once(e, args, &want, NULL, true)); /* the reference: no scratch */
    ot_threadpool *pool = NULL;
    ASSERT_OK(ot_threadpool_create(1, &pool));

    /* the first fast run leaves one buffer in the executable; the next one allocates nothing */
    ot_tensor out;
    ASSERT_OK(ot_tensor_alloc(&out, &sl->shape));
    int64_t live = ot_alloc_live();
    ASSERT_OK(run_once(e, args, &out, pool, false));
    EXPECT_INT_EQ(ot_alloc_live(), live + 1); /* the kept buffer */
    EXPECT_TRUE(memcmp(out.data, want.data, out.nbytes) == 0);
    int64_t count = ot_alloc_count();
    ASSERT_OK(run_once(e, args, &out, pool, false));
    EXPECT_INT_EQ(ot_alloc_count(), count + 1); /* run_once's arena only */
    EXPECT_TRUE(memcmp(out.data, want.data, out.nbytes) == 0);
    ot_tensor_release(&out);

    /* six threads running the executable at once: every result right, at most
     * EX_SCRATCH_SLOTS buffers kept afterwards */
    enum { NT = 6 };
    pthread_t th[NT];
    job jobs[NT];
    int64_t before = ot_alloc_live();
    for (int t = 0; t < NT; t++) {
        jobs[t] = (job){e, args, &want, pool, 40, 0};
        ASSERT_TRUE(pthread_create(&th[t], NULL, worker, &jobs[t]) == 0);
    }
    int bad = 0;
    for (int t = 0; t < NT; t++) {
        pthread_join(th[t], NULL);
        bad += jobs[t].bad;
    }
    EXPECT_INT_EQ(bad, 0);
    int64_t kept = ot_alloc_live() - before + 1; /* + the one buffer held before */
    EXPECT_TRUE(kept >= 1 && kept <= EX_SCRATCH_SLOTS);

    ot_threadpool_free(pool);
    ot_tensor_release(&want);
    for (int a = 0; a < 2; a++) ot_tensor_release(&args[a]);
    ot_executable_free(e);
    ot_module_free(m);
    EXPECT_INT_EQ(ot_alloc_live(), live0); /* the kept buffers went with the executable */
}

/* A while loop whose body writes its state out of place (a transpose: no buffer reuse), so the
 * compiled loop needs a second state set each run (runtime/execute.c run_loop). */
static const char *k_loop_hlo =
    "HloModule loop\ncond {\n  s = (s32[], f32[64,64]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n  n = s32[] constant(3)\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT\n}\n"
    "body {\n  s = (s32[], f32[64,64]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  x = f32[64,64] get-tuple-element(s), index=1\n"
    "  one = s32[] constant(1)\n  i1 = s32[] add(i, one)\n"
    "  h = f32[] constant(0.5)\n  hb = f32[64,64] broadcast(h), dimensions={}\n"
    "  y = f32[64,64] multiply(x, hb)\n  z = f32[64,64] transpose(y), dimensions={1,0}\n"
    "  ROOT t = (s32[], f32[64,64]) tuple(i1, z)\n}\n"
    "ENTRY e {\n  x = f32[64,64] parameter(0)\n  z = s32[] constant(0)\n"
    "  t = (s32[], f32[64,64]) tuple(z, x)\n"
    "  w = (s32[], f32[64,64]) while(t), condition=cond, body=body\n"
    "  ROOT r = f32[64,64] get-tuple-element(w), index=1\n}\n";

static void *kept_state(const ot_executable *e) {
    ex_scratch_cache *sc = cc_executable_state_cache(e);
    void *found = NULL;
    int n = 0;
    for (int k = 0; k < EX_SCRATCH_SLOTS; k++) {
        void *b = atomic_load(&sc->slot[k]);
        if (b) {
            found = b;
            n++;
        }
    }
    return n == 1 ? found : NULL;
}

/* The compiled loop's state buffers stay with the executable: the first run keeps one, later
 * runs take that same buffer (nothing new mapped and faulted in), results stay the reference's,
 * and freeing the executable frees it. */
static void test_loop_state_kept(void) {
    int64_t live0 = ot_alloc_live();
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(k_loop_hlo, strlen(k_loop_hlo), NULL, &m));
    ot_compile_options co = ot_compile_options_default();
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, &co, &e));
    const ot_computation *c = ot_module_entry(m);
    ot_tensor x, want, out;
    ASSERT_OK(ot_tensor_alloc(&x, &c->params[0]->shape.array));
    float *v = x.data;
    for (int64_t q = 0; q < (int64_t)(x.nbytes / 4); q++) v[q] = (float)(q % 37) - 18.0f;
    const ot_slot *sl = ot_executable_slot(e, ot_executable_output_slot(e, 0));
    ASSERT_OK(ot_tensor_alloc(&want, &sl->shape));
    ASSERT_OK(ot_tensor_alloc(&out, &sl->shape));
    ot_tensor args[2] = {x, x}; /* run_once passes two parameters; the loop reads the first */
    ASSERT_OK(run_once(e, args, &want, NULL, true));
    EXPECT_TRUE(kept_state(e) == NULL); /* the evaluator's loop keeps nothing */
    ASSERT_OK(run_once(e, args, &out, NULL, false));
    EXPECT_TRUE(memcmp(out.data, want.data, out.nbytes) == 0);
    void *first = kept_state(e);
    EXPECT_TRUE(first != NULL);
    int64_t live = ot_alloc_live();
    for (int r = 0; r < 3; r++) {
        memset(out.data, 0, out.nbytes);
        ASSERT_OK(run_once(e, args, &out, NULL, false));
        EXPECT_TRUE(memcmp(out.data, want.data, out.nbytes) == 0);
        EXPECT_TRUE(kept_state(e) == first); /* the same buffer again, not a new one */
        EXPECT_INT_EQ(ot_alloc_live(), live);
    }
    ot_tensor_release(&out);
    ot_tensor_release(&want);
    ot_tensor_release(&x);
    ot_executable_free(e);
    ot_module_free(m);
    EXPECT_INT_EQ(ot_alloc_live(), live0);
}

/* ex_scratch_cache_take / give: a kept buffer that holds the request is taken again, a larger
 * request gets a new buffer, and the cache keeps at most EX_SCRATCH_SLOTS. */
static void test_cache_take_give(void) {
    int64_t live0 = ot_alloc_live();
    ex_scratch_cache sc = {0};
    char *a = ex_scratch_cache_take(&sc, 1000);
    ASSERT_TRUE(a != NULL);
    EXPECT_TRUE(((uintptr_t)a & 63) == 0);
    memset(a, 1, 1000);
    ex_scratch_cache_give(&sc, a);
    EXPECT_TRUE(ex_scratch_cache_take(&sc, 800) == a); /* holds it: the same buffer */
    char *b = ex_scratch_cache_take(&sc, 4000);        /* the cache is empty: new */
    ASSERT_TRUE(b != NULL && b != a);
    ex_scratch_cache_give(&sc, a);
    char *c = ex_scratch_cache_take(&sc, 2000); /* a is too small: new, a stays kept */
    ASSERT_TRUE(c != NULL && c != a && c != b);
    memset(c, 2, 2000);
    char *more[EX_SCRATCH_SLOTS + 1];
    for (int k = 0; k <= EX_SCRATCH_SLOTS; k++) {
        more[k] = ex_scratch_cache_take(&sc, 1 << 20);
        ASSERT_TRUE(more[k] != NULL);
    }
    ex_scratch_cache_give(&sc, b);
    ex_scratch_cache_give(&sc, c);
    for (int k = 0; k <= EX_SCRATCH_SLOTS; k++) ex_scratch_cache_give(&sc, more[k]);
    EXPECT_INT_EQ(ot_alloc_live(), live0 + EX_SCRATCH_SLOTS); /* the rest were freed */
    ex_scratch_cache_clear(&sc);
    EXPECT_INT_EQ(ot_alloc_live(), live0);
}

OT_TEST_MAIN(OT_TEST(test_scratch_kept_and_shared), OT_TEST(test_loop_state_kept),
             OT_TEST(test_cache_take_give))
