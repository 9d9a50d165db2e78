/* The fast convolution (src/exec/fast_conv.c) on the convolutions a conv net's training step
 * runs — forward, input gradient and filter gradient, NHWC/HWIO and NCHW/OIHW as JAX lowers
 * them — at sizes that take the tiled, parallel paths (many tiles; filter gradients with a few
 * positions and a long K split by output features; NCHW in the transposed form with direct
 * writes). Inputs are multiples of 1/8 in [-1, 1], never zero, so every product and every sum is
 * exact in f32: the fast kernel must then equal the reference kernel bit for bit, whatever the
 * order of its sums, on pools of 1, 2 and 3 threads. */
#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

static ot_threadpool *g_pools[3];

static void fill_eighths(ot_tensor *t, uint64_t seed) {
    float *v = t->data;
    for (int64_t q = 0; q < (int64_t)(t->nbytes / 4); q++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int k = (int)((seed >> 33) % 16); /* 0..15 -> -8..-1, 1..8 */
        v[q] = (float)(k < 8 ? k - 8 : k - 7) / 8.0f;
    }
}

static ot_status run(const ot_executable *e, const ot_tensor *args, ot_tensor *out,
                     ot_threadpool *pool, bool reference, int *fast) {
    int64_t an = ot_executable_arena_size(e);
    void *arena = ot_aligned_alloc(64, (size_t)(an ? an : 64));
    void *params[2] = {args[0].data, args[1].data}, *outs[1] = {out->data};
    ot_run_options o = ot_run_options_default();
    o.pool = pool;
    o.reference_kernels = reference;
    ot_run_result r;
    ot_status st = ot_execute_on_host(e, arena, params, outs, &o, 0, &r);
    *fast = r.fast_kernels_run;
    ot_aligned_free(arena);
    return st;
}

/* out = convolution(lhs, rhs) with the given window and dim_labels. */
static void conv_case(const char *lhs, const char *rhs, const char *out, const char *window,
                      const char *labels) {
    char hlo[1024];
    snprintf(hlo, sizeof hlo,
             "HloModule c\nENTRY e {\n  a = %s parameter(0)\n  b = %s parameter(1)\n"
             "  ROOT c = %s convolution(a, b), window={%s}, dim_labels=%s\n}\n",
             lhs, rhs, out, window, labels);
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(hlo, strlen(hlo), NULL, &m));
    ot_compile_options co = ot_compile_options_default();
    co.opt_level = 0;
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, &co, &e));
    const ot_computation *c = ot_module_entry(m);
    ot_tensor args[2], ref;
    for (int a = 0; a < 2; a++) {
        ASSERT_OK(ot_tensor_alloc(&args[a], &c->params[a]->shape.array));
        fill_eighths(&args[a], 17 + (uint64_t)a);
    }
    const ot_slot *sl = ot_executable_slot(e, ot_executable_output_slot(e, 0));
    ASSERT_OK(ot_tensor_alloc(&ref, &sl->shape));
    int fast = -1;
    ASSERT_OK(run(e, args, &ref, NULL, true, &fast));
    for (int p = 0; p < 3; p++) {
        ot_tensor got;
        ASSERT_OK(ot_tensor_alloc(&got, &sl->shape));
        memset(got.data, 0xa5, got.nbytes);
        ASSERT_OK(run(e, args, &got, g_pools[p], false, &fast));
        EXPECT_INT_EQ(fast, 1);
        if (memcmp(got.data, ref.data, ref.nbytes) != 0) {
            fprintf(stderr, "%s (%d threads): differs from the reference\n", labels, p + 1);
            EXPECT_TRUE(false);
        }
        ot_tensor_release(&got);
    }
    ot_tensor_release(&ref);
    for (int a = 0; a < 2; a++) ot_tensor_release(&args[a]);
    ot_executable_free(e);
    ot_module_free(m);
}

static void test_convnet_nchw(void) {
    const char *w3 = "size=3x3 pad=1_1x1_1";
    conv_case("f32[4,3,32,32]", "f32[32,3,3,3]", "f32[4,32,32,32]", w3, "bf01_oi01->bf01");
    conv_case("f32[4,32,16,16]", "f32[64,32,3,3]", "f32[4,64,16,16]", w3, "bf01_oi01->bf01");
    conv_case("f32[4,64,16,16]", "f32[64,32,3,3]", "f32[4,32,16,16]", w3, "bf01_io01->bf01");
    conv_case("f32[4,3,32,32]", "f32[4,32,32,32]", "f32[32,3,3,3]", "size=32x32 pad=1_1x1_1",
              "fb01_io01->fb01");
    conv_case("f32[4,32,16,16]", "f32[4,64,16,16]", "f32[64,32,3,3]", "size=16x16 pad=1_1x1_1",
              "fb01_io01->fb01");
    conv_case("f32[2,64,32,32]", "f32[64,64,3,3]", "f32[2,64,32,32]", w3, "bf01_oi01->bf01");
}

static void test_convnet_nhwc(void) {
    const char *w3 = "size=3x3 pad=1_1x1_1";
    conv_case("f32[4,32,32,3]", "f32[3,3,3,32]", "f32[4,32,32,32]", w3, "b01f_01io->b01f");
    conv_case("f32[4,16,16,32]", "f32[3,3,32,64]", "f32[4,16,16,64]", w3, "b01f_01io->b01f");
    conv_case("f32[4,16,16,64]", "f32[3,3,32,64]", "f32[4,16,16,32]", w3, "b01f_01oi->b01f");
    conv_case("f32[4,32,32,3]", "f32[4,32,32,32]", "f32[3,3,3,32]", "size=32x32 pad=1_1x1_1",
              "f01b_i01o->01bf");
    conv_case("f32[4,16,16,32]", "f32[4,16,16,64]", "f32[3,3,32,64]", "size=16x16 pad=1_1x1_1",
              "f01b_i01o->01bf");
    conv_case("f32[2,32,32,64]", "f32[3,3,64,64]", "f32[2,32,32,64]", w3, "b01f_01io->b01f");
    /* strided, and an output layout that takes the scattered (not direct) path */
    conv_case("f32[4,33,33,16]", "f32[3,3,16,24]", "f32[4,16,16,24]",
              "size=3x3 stride=2x2 pad=0_0x0_0", "b01f_01io->b01f");
    conv_case("f32[4,33,33,16]", "f32[3,3,16,24]", "f32[4,24,16,16]",
              "size=3x3 stride=2x2 pad=0_0x0_0", "b01f_01io->bf01");
}

static void test_setup(void) {
    static const int n[3] = {1, 2, 3};
    for (int k = 0; k < 3; k++) ASSERT_OK(ot_threadpool_create(n[k], &g_pools[k]));
    EXPECT_INT_EQ(ot_threadpool_size(g_pools[2]), 3);
}

static void test_teardown(void) {
    for (int k = 0; k < 3; k++) {
        ot_threadpool_free(g_pools[k]);
        g_pools[k] = NULL;
    }
    EXPECT_TRUE(true);
}

OT_TEST_MAIN(OT_TEST(test_setup), OT_TEST(test_convnet_nchw), OT_TEST(test_convnet_nhwc),
             OT_TEST(test_teardown))
