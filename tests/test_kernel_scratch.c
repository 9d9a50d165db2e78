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

OT_TEST_MAIN(OT_TEST(test_scratch_kept_and_shared))
