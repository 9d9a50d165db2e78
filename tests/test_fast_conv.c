/* The fast convolution (src/exec/fast_conv.c, and fast_conv_dnnl.c where oneDNN is built in) on
 * the convolutions a conv net's training step runs — forward, input gradient and filter
 * gradient, NHWC/HWIO and NCHW/OIHW as JAX lowers them — at sizes that take the tiled, parallel
 * paths (many tiles; filter gradients with a few positions and a long K split by output
 * features; NCHW in the transposed form with direct writes; oneDNN's forward and
 * backward-weights forms over chunks of the images), and strided, dilated, reversed, 1-D and
 * 3-D windows. Inputs are multiples of 1/8 in [-1, 1], never zero, so every product and every
 * sum is exact in f32: the fast kernel must then equal the reference kernel bit for bit, whatever
 * the order of its sums, on pools of 1, 2, 3 and 8 threads. Then on inputs whose sums round
 * (uniform in [-1, 1)), the fast kernel's bits must be the same on every pool size. */
#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#include <stdlib.h>

#define NPOOLS 4
static ot_threadpool *g_pools[NPOOLS];
static const int k_pool_threads[NPOOLS] = {1, 2, 3, 8};

static void fill_eighths(ot_tensor *t, uint64_t seed) {
    float *v = t->data;
    for (int64_t q = 0; q < (int64_t)(t->nbytes / 4); q++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int k = (int)((seed >> 33) % 16); /* 0..15 -> -8..-1, 1..8 */
        v[q] = (float)(k < 8 ? k - 8 : k - 7) / 8.0f;
    }
}

static void fill_uniform(ot_tensor *t, uint64_t seed) {
    float *v = t->data;
    for (int64_t q = 0; q < (int64_t)(t->nbytes / 4); q++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[q] = (float)(seed >> 40) / 8388608.0f - 1.0f;
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

/* out = convolution(lhs, rhs) with the given window, dim_labels and further attributes. */
static void conv_case_attrs(const char *lhs, const char *rhs, const char *out, const char *window,
                            const char *labels, const char *attrs) {
    char hlo[1024];
    snprintf(hlo, sizeof hlo,
             "HloModule c\nENTRY e {\n  a = %s parameter(0)\n  b = %s parameter(1)\n"
             "  ROOT c = %s convolution(a, b), window={%s}, dim_labels=%s%s\n}\n",
             lhs, rhs, out, window, labels, attrs);
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
    for (int p = 0; p < NPOOLS; p++) {
        ot_tensor got;
        ASSERT_OK(ot_tensor_alloc(&got, &sl->shape));
        memset(got.data, 0xa5, got.nbytes);
        ASSERT_OK(run(e, args, &got, g_pools[p], false, &fast));
        EXPECT_INT_EQ(fast, 1);
        if (memcmp(got.data, ref.data, ref.nbytes) != 0) {
            fprintf(stderr, "%s %s (%d threads): differs from the reference\n", lhs, labels,
                    k_pool_threads[p]);
            EXPECT_TRUE(false);
        }
        ot_tensor_release(&got);
    }
    /* rounding sums: the same bits on every pool */
    for (int a = 0; a < 2; a++) fill_uniform(&args[a], 91 + (uint64_t)a);
    ASSERT_OK(run(e, args, &ref, g_pools[0], false, &fast));
    for (int p = 1; p < NPOOLS; p++) {
        ot_tensor got;
        ASSERT_OK(ot_tensor_alloc(&got, &sl->shape));
        memset(got.data, 0xa5, got.nbytes);
        ASSERT_OK(run(e, args, &got, g_pools[p], false, &fast));
        if (memcmp(got.data, ref.data, ref.nbytes) != 0) {
            fprintf(stderr, "%s %s: %d threads differ from 1 thread\n", lhs, labels,
                    k_pool_threads[p]);
            EXPECT_TRUE(false);
        }
        ot_tensor_release(&got);
    }
    ot_tensor_release(&ref);
    for (int a = 0; a < 2; a++) ot_tensor_release(&args[a]);
    ot_executable_free(e);
    ot_module_free(m);
}

static void conv_case(const char *lhs, const char *rhs, const char *out, const char *window,
                      const char *labels) {
    conv_case_attrs(lhs, rhs, out, window, labels, "");
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

/* Windows beyond the conv net's: reversed (JAX's input gradient with the flip folded in),
 * dilated, strided with a rectangular kernel, 1-D and 3-D, and an odd batch (one chunk). */
static void test_windows(void) {
    conv_case("f32[4,16,16,32]", "f32[3,3,16,32]", "f32[4,16,16,16]",
              "size=3x3 pad=1_1x1_1 rhs_reversal=1x1", "b01f_01oi->b01f");
    conv_case("f32[4,16,16,32]", "f32[16,32,3,3]", "f32[4,16,16,16]",
              "size=3x3 pad=1_1x1_1 rhs_reversal=1x0", "b01f_oi01->b01f");
    /* reversed windows packed for oneDNN: 3-D with one dim kept, 1-D with the kernel's
     * features outermost */
    conv_case("f32[2,6,7,8,16]", "f32[3,2,3,16,16]", "f32[2,6,7,8,16]",
              "size=3x2x3 pad=1_1x0_1x1_1 rhs_reversal=1x0x1", "b012f_012io->b012f");
    conv_case("f32[4,20,16]", "f32[16,16,4]", "f32[4,20,16]", "size=4 pad=2_1 rhs_reversal=1",
              "b0f_oi0->b0f");
    conv_case("f32[4,20,20,8]", "f32[3,3,8,16]", "f32[4,16,16,16]", "size=3x3 rhs_dilate=2x2",
              "b01f_01io->b01f");
    conv_case("f32[4,8,21,19]", "f32[16,8,3,5]", "f32[4,16,10,9]",
              "size=3x5 stride=2x2 pad=0_1x1_1", "bf01_oi01->bf01");
    conv_case("f32[6,100,24]", "f32[5,24,32]", "f32[6,100,32]", "size=5 pad=2_2", "b0f_0io->b0f");
    conv_case("f32[2,8,8,8,16]", "f32[3,3,3,16,16]", "f32[2,8,8,8,16]",
              "size=3x3x3 pad=1_1x1_1x1_1", "b012f_012io->b012f");
    conv_case("f32[3,18,18,16]", "f32[3,3,16,32]", "f32[3,18,18,32]", "size=3x3 pad=1_1x1_1",
              "b01f_01io->b01f");
    /* feature groups: grouped, depthwise, depthwise with a channel multiplier */
    conv_case_attrs("f32[4,16,16,32]", "f32[3,3,8,64]", "f32[4,16,16,64]", "size=3x3 pad=1_1x1_1",
                    "b01f_01io->b01f", ", feature_group_count=4");
    conv_case_attrs("f32[4,16,16,32]", "f32[3,3,1,32]", "f32[4,16,16,32]", "size=3x3 pad=1_1x1_1",
                    "b01f_01io->b01f", ", feature_group_count=32");
    conv_case_attrs("f32[4,16,12,12]", "f32[32,1,3,3]", "f32[4,32,12,12]", "size=3x3 pad=1_1x1_1",
                    "bf01_oi01->bf01", ", feature_group_count=16");
    /* input gradients of strided convolutions (lhs dilation), reversed window or not, NHWC,
     * NCHW; 1-D with a dilated kernel and a padding the backward-data reading cannot take (the
     * im2col path) */
    conv_case("f32[4,8,8,16]", "f32[3,3,8,16]", "f32[4,16,16,8]",
              "size=3x3 pad=2_1x2_1 lhs_dilate=2x2 rhs_reversal=1x1", "b01f_01oi->b01f");
    conv_case("f32[4,8,8,16]", "f32[3,3,8,16]", "f32[4,16,16,8]",
              "size=3x3 pad=2_1x2_1 lhs_dilate=2x2", "b01f_01oi->b01f");
    conv_case("f32[4,16,8,8]", "f32[16,8,3,3]", "f32[4,8,16,16]",
              "size=3x3 pad=2_1x2_1 lhs_dilate=2x2 rhs_reversal=1x1", "bf01_io01->bf01");
    conv_case("f32[3,10,8]", "f32[3,8,4]", "f32[3,30,4]",
              "size=3 pad=4_2 lhs_dilate=3 rhs_dilate=2", "b0f_0io->b0f");
    conv_case("f32[4,8,8,16]", "f32[3,3,8,16]", "f32[4,19,19,8]",
              "size=3x3 pad=3_3x3_3 lhs_dilate=2x2 rhs_reversal=1x1", "b01f_01oi->b01f");
    /* a filter gradient of a strided convolution (window dilation 2 in the HLO) */
    conv_case("f32[4,17,17,8]", "f32[4,8,8,16]", "f32[3,3,8,16]",
              "size=8x8 pad=0_0x0_0 rhs_dilate=2x2", "f01b_i01o->01bf");
}

/* Per-example filter gradients (JAX's vmap(grad) of a conv net): one feature group per example,
 * the examples as the lhs's features, the output gradient as the kernel (window dilation = the
 * forward stride); oneDNN takes no grouped backward-weights form, so these run the im2col path,
 * every group's tiles in one parallel loop, kernel offsets from per-dim tables: a 2-D net's two
 * layers (3x3 stride 2, padded 0_1), 1-D with base dilation (a transposed conv's filter
 * gradient), and groups of two channels. */
static void test_group_filter_grads(void) {
    const char *fg = "f01b_i01o->01bf";
    conv_case_attrs("f32[32,14,14,16]", "f32[1,7,7,1024]", "f32[3,3,16,1024]",
                    "size=7x7 pad=0_1x0_1 rhs_dilate=2x2", fg, ", feature_group_count=32");
    conv_case_attrs("f32[32,28,28,1]", "f32[1,14,14,512]", "f32[3,3,1,512]",
                    "size=14x14 pad=0_1x0_1 rhs_dilate=2x2", fg, ", feature_group_count=32");
    conv_case_attrs("f32[8,20,6]", "f32[1,37,40]", "f32[3,6,40]", "size=37 lhs_dilate=2",
                    "f0b_i0o->0bf", ", feature_group_count=8");
    conv_case_attrs("f32[12,9,9,5]", "f32[2,9,9,18]", "f32[3,3,5,18]", "size=9x9 pad=1_1x1_1", fg,
                    ", feature_group_count=6");
}

/* Features outermost (NCHW and its 1-D and 3-D forms) with at least 16 features on both image
 * operands: oneDNN's blocked layout, each chunk of images reordered into it and back — forward,
 * filter gradient and lhs-dilated input gradient; feature counts not a multiple of the block
 * (padded blocks), several images per chunk, strided, dilated and odd-sized windows. */
static void test_nchw_blocked(void) {
    conv_case("f32[16,24,17,15]", "f32[40,24,3,3]", "f32[16,40,8,7]",
              "size=3x3 stride=2x2 pad=0_0x0_0", "bf01_oi01->bf01");
    conv_case("f32[6,16,14,14]", "f32[32,16,3,3]", "f32[6,32,10,10]", "size=3x3 rhs_dilate=2x2",
              "bf01_oi01->bf01");
    conv_case("f32[16,16,9,9]", "f32[16,32,9,9]", "f32[32,16,3,3]", "size=9x9 pad=1_1x1_1",
              "fb01_io01->fb01");
    conv_case("f32[8,32,8,8]", "f32[32,16,3,3]", "f32[8,16,16,16]",
              "size=3x3 pad=2_1x2_1 lhs_dilate=2x2 rhs_reversal=1x1", "bf01_io01->bf01");
    conv_case("f32[8,16,50]", "f32[32,16,5]", "f32[8,32,50]", "size=5 pad=2_2", "bf0_oi0->bf0");
    conv_case("f32[2,16,6,6,6]", "f32[20,16,3,3,3]", "f32[2,20,6,6,6]",
              "size=3x3x3 pad=1_1x1_1x1_1", "bf012_oi012->bf012");
}

/* HLO text of a module with parameters a (lhs), b (rhs), bias [features] and root
 * relu(conv(a, b) + bias) (part 0), conv(a, b) (part 1) or relu(a + bias) over a parameter a of
 * the convolution's result shape (part 2). */
static ot_module *ofusion_module(const char *lhs, const char *rhs, const char *out,
                                 const char *bias, int fdim, const char *window, const char *labels,
                                 int part) {
    char hlo[2048], body[1024];
    if (part == 2)
        snprintf(body, sizeof body, "  c = %s parameter(0)\n  bias = %s parameter(1)\n", out, bias);
    else
        snprintf(body, sizeof body,
                 "  a = %s parameter(0)\n  b = %s parameter(1)\n  bias = %s parameter(2)\n"
                 "  c = %s convolution(a, b), window={%s}, dim_labels=%s\n",
                 lhs, rhs, bias, out, window, labels);
    if (part == 1)
        snprintf(hlo, sizeof hlo, "HloModule c\nENTRY e {\n%s  ROOT r = %s copy(c)\n}\n", body,
                 out);
    else
        snprintf(hlo, sizeof hlo,
                 "HloModule c\nENTRY e {\n%s  bb = %s broadcast(bias), dimensions={%d}\n"
                 "  s = %s add(c, bb)\n  z = f32[] constant(0)\n"
                 "  zb = %s broadcast(z), dimensions={}\n  ROOT r = %s maximum(s, zb)\n}\n",
                 body, out, fdim, out, out, out);
    ot_module *m = NULL;
    if (ot_hlo_parse(hlo, strlen(hlo), NULL, &m) != OT_OK) {
        fprintf(stderr, "parse: %s\n", ot_last_error());
        return NULL;
    }
    return m;
}

static ot_status run_args(const ot_executable *e, void **params, void *out, ot_threadpool *pool,
                          ot_run_result *r) {
    int64_t an = ot_executable_arena_size(e);
    void *arena = ot_aligned_alloc(64, (size_t)(an ? an : 64));
    void *outs[1] = {out};
    ot_run_options o = ot_run_options_default();
    o.pool = pool;
    ot_status st = ot_execute_on_host(e, arena, params, outs, &o, 0, r);
    ot_aligned_free(arena);
    return st;
}

/* A convolution followed by bias + ReLU runs that loop inside the convolution, on each chunk of
 * images (or tile of an image's rows) as it is written (oneDNN, NHWC and NCHW outputs, forward and
 * input gradient): its bits equal the convolution run alone followed by the loop run alone, on 1,
 * 2, 3 and 8 threads. */
static void test_output_fusion(void) {
#ifndef OT_HAVE_DNNL
    OT_SKIP("built without oneDNN: the convolution runs no output fusion");
#endif
    if (getenv("OPTITPU_DNNL") && !strcmp(getenv("OPTITPU_DNNL"), "0"))
        OT_SKIP("oneDNN's convolution is off (OPTITPU_DNNL=0): no output fusion");
    static const struct {
        const char *lhs, *rhs, *out, *bias, *window, *labels;
        int fdim;
    } cs[] = {
        {"f32[8,16,16,32]", "f32[3,3,32,48]", "f32[8,16,16,48]", "f32[48]", "size=3x3 pad=1_1x1_1",
         "b01f_01io->b01f", 3},
        {"f32[8,3,24,24]", "f32[32,3,3,3]", "f32[8,32,24,24]", "f32[32]", "size=3x3 pad=1_1x1_1",
         "bf01_oi01->bf01", 1},
        {"f32[8,8,8,16]", "f32[3,3,8,16]", "f32[8,16,16,8]", "f32[8]",
         "size=3x3 pad=2_1x2_1 lhs_dilate=2x2 rhs_reversal=1x1", "b01f_01oi->b01f", 3},
        {"f32[8,16,12,12]", "f32[32,16,3,3]", "f32[8,32,12,12]", "f32[32]", "size=3x3 pad=1_1x1_1",
         "bf01_oi01->bf01", 1},
        {"f32[8,32,8,8]", "f32[32,16,3,3]", "f32[8,16,16,16]", "f32[16]",
         "size=3x3 pad=2_1x2_1 lhs_dilate=2x2 rhs_reversal=1x1", "bf01_io01->bf01", 1},
        /* one image, in tiles of rows: NHWC, NCHW (a range per feature), a first layer */
        {"f32[1,24,24,32]", "f32[3,3,32,48]", "f32[1,24,24,48]", "f32[48]", "size=3x3 pad=1_1x1_1",
         "b01f_01io->b01f", 3},
        {"f32[1,32,24,24]", "f32[48,32,3,3]", "f32[1,48,24,24]", "f32[48]", "size=3x3 pad=1_1x1_1",
         "bf01_oi01->bf01", 1},
        {"f32[3,3,96,96]", "f32[32,3,3,3]", "f32[3,32,96,96]", "f32[32]", "size=3x3 pad=1_1x1_1",
         "bf01_oi01->bf01", 1},
        /* 1x1: the fast dot's GEMM, one over all images (NHWC), one per image (NCHW) */
        {"f32[4,14,14,64]", "f32[1,1,64,96]", "f32[4,14,14,96]", "f32[96]", "size=1x1",
         "b01f_01io->b01f", 3},
        {"f32[3,64,14,14]", "f32[96,64,1,1]", "f32[3,96,14,14]", "f32[96]", "size=1x1",
         "bf01_oi01->bf01", 1},
        /* windows that tile the input: the fast dot's GEMM, NHWC (one), NCHW (per image) */
        {"f32[2,64,64,3]", "f32[16,16,3,128]", "f32[2,4,4,128]", "f32[128]",
         "size=16x16 stride=16x16", "b01f_01io->b01f", 3},
        {"f32[3,8,64,64]", "f32[128,8,8,8]", "f32[3,128,8,8]", "f32[128]", "size=8x8 stride=8x8",
         "bf01_oi01->bf01", 1},
        /* one image of few positions, its output features in parts: NHWC, NCHW */
        {"f32[1,7,7,256]", "f32[3,3,256,128]", "f32[1,7,7,128]", "f32[128]", "size=3x3 pad=1_1x1_1",
         "b01f_01io->b01f", 3},
        {"f32[1,256,7,7]", "f32[128,256,3,3]", "f32[1,128,7,7]", "f32[128]", "size=3x3 pad=1_1x1_1",
         "bf01_oi01->bf01", 1},
    };
    for (size_t q = 0; q < sizeof cs / sizeof cs[0]; q++) {
        ot_module *m[3];
        ot_executable *e[3];
        for (int k = 0; k < 3; k++) {
            m[k] = ofusion_module(cs[q].lhs, cs[q].rhs, cs[q].out, cs[q].bias, cs[q].fdim,
                                  cs[q].window, cs[q].labels, k);
            ot_compile_options co = ot_compile_options_default();
            co.native = OT_NATIVE_ON;
            e[k] = NULL;
            ASSERT_TRUE(m[k] && ot_compile(m[k], &co, &e[k]) == OT_OK);
        }
        const ot_computation *c = ot_module_entry(m[0]);
        ot_tensor args[3], mid, want, got;
        for (int a = 0; a < 3; a++) {
            ASSERT_OK(ot_tensor_alloc(&args[a], &c->params[a]->shape.array));
            fill_uniform(&args[a], 7 + (uint64_t)a);
        }
        const ot_slot *sl = ot_executable_slot(e[0], ot_executable_output_slot(e[0], 0));
        ASSERT_OK(ot_tensor_alloc(&mid, &sl->shape));
        ASSERT_OK(ot_tensor_alloc(&want, &sl->shape));
        ASSERT_OK(ot_tensor_alloc(&got, &sl->shape));
        ot_run_result r;
        void *p1[2] = {args[0].data, args[1].data}, *p2[2] = {mid.data, args[2].data};
        void *p0[3] = {args[0].data, args[1].data, args[2].data};
        ASSERT_OK(run_args(e[1], p1, mid.data, g_pools[0], &r));
        ASSERT_OK(run_args(e[2], p2, want.data, g_pools[0], &r));
        for (int p = 0; p < NPOOLS; p++) {
            memset(got.data, 0xa5, got.nbytes);
            ASSERT_OK(run_args(e[0], p0, got.data, g_pools[p], &r));
            bool same = !memcmp(got.data, want.data, want.nbytes);
            if (r.output_fusions != 1 || !same)
                fprintf(stderr, "%s %s on %d threads: %d output fusions, %s\n", cs[q].lhs,
                        cs[q].labels, k_pool_threads[p], r.output_fusions,
                        same ? "equal" : "bits differ");
            EXPECT_INT_EQ(r.output_fusions, 1);
            EXPECT_TRUE(same);
        }
        ot_tensor_release(&mid);
        ot_tensor_release(&want);
        ot_tensor_release(&got);
        for (int a = 0; a < 3; a++) ot_tensor_release(&args[a]);
        for (int k = 0; k < 3; k++) {
            ot_executable_free(e[k]);
            ot_module_free(m[k]);
        }
    }
}

/* Batches with few chunks of images (1, 2, 3, 5, 7, 11): one image per chunk, each image's
 * output cut into tiles of rows where the images are fewer than the chunks wanted (oneDNN), the
 * first and last tiles padded, the middle ones not — forward, reversed-window input gradient
 * and filter gradient, NHWC and NCHW (blocked and first-layer), 3x3, 1x1, strided, dilated,
 * depthwise, 1-D and 3-D; outputs of 7 rows (one row per tile) and of 3 (fewer rows than tiles
 * wanted); layers whose tiles would be too small (few positions: whole images). */
static void test_small_batches(void) {
    const char *w3 = "size=3x3 pad=1_1x1_1";
    conv_case("f32[1,28,28,32]", "f32[3,3,32,32]", "f32[1,28,28,32]", w3, "b01f_01io->b01f");
    conv_case("f32[3,20,20,32]", "f32[3,3,32,48]", "f32[3,20,20,48]", w3, "b01f_01io->b01f");
    conv_case("f32[7,14,14,32]", "f32[3,3,32,32]", "f32[7,14,14,32]", w3, "b01f_01io->b01f");
    conv_case("f32[11,8,8,32]", "f32[3,3,32,32]", "f32[11,8,8,32]", w3, "b01f_01io->b01f");
    conv_case("f32[2,28,28,32]", "f32[3,3,32,32]", "f32[2,28,28,32]", w3, "b01f_01io->b01f");
    conv_case("f32[1,28,28,64]", "f32[1,1,64,96]", "f32[1,28,28,96]", "size=1x1",
              "b01f_01io->b01f");
    conv_case("f32[5,14,14,64]", "f32[1,1,64,64]", "f32[5,14,14,64]", "size=1x1",
              "b01f_01io->b01f");
    conv_case("f32[1,7,7,128]", "f32[3,3,128,128]", "f32[1,7,7,128]", w3, "b01f_01io->b01f");
    conv_case("f32[1,3,3,256]", "f32[3,3,256,256]", "f32[1,3,3,256]", w3, "b01f_01io->b01f");
    conv_case("f32[1,7,64,64]", "f32[3,3,64,64]", "f32[1,7,64,64]", w3, "b01f_01io->b01f");
    conv_case("f32[1,3,128,64]", "f32[3,3,64,64]", "f32[1,3,128,64]", w3, "b01f_01io->b01f");
    conv_case("f32[1,57,57,32]", "f32[3,3,32,64]", "f32[1,28,28,64]",
              "size=3x3 stride=2x2 pad=0_0x0_0", "b01f_01io->b01f");
    conv_case("f32[1,30,30,32]", "f32[7,7,32,32]", "f32[1,30,30,32]",
              "size=7x7 pad=6_6x6_6 rhs_dilate=2x2", "b01f_01io->b01f");
    conv_case("f32[1,96,96,3]", "f32[3,3,3,32]", "f32[1,96,96,32]", w3, "b01f_01io->b01f");
    conv_case("f32[1,28,28,32]", "f32[3,3,32,32]", "f32[1,28,28,32]",
              "size=3x3 pad=1_1x1_1 rhs_reversal=1x1", "b01f_01oi->b01f");
    conv_case_attrs("f32[1,28,28,64]", "f32[3,3,1,64]", "f32[1,28,28,64]", w3, "b01f_01io->b01f",
                    ", feature_group_count=64");
    conv_case_attrs("f32[3,28,28,32]", "f32[3,3,8,64]", "f32[3,28,28,64]", w3, "b01f_01io->b01f",
                    ", feature_group_count=4");
    conv_case("f32[1,28,28,32]", "f32[1,28,28,64]", "f32[3,3,32,64]", "size=28x28 pad=1_1x1_1",
              "f01b_i01o->01bf");
    conv_case("f32[3,20,20,32]", "f32[3,20,20,64]", "f32[3,3,32,64]", "size=20x20 pad=1_1x1_1",
              "f01b_i01o->01bf");
    conv_case("f32[1,29,29,16]", "f32[1,14,14,32]", "f32[3,3,16,32]",
              "size=14x14 pad=0_0x0_0 rhs_dilate=2x2", "f01b_i01o->01bf");
    conv_case("f32[1,32,28,28]", "f32[48,32,3,3]", "f32[1,48,28,28]", w3, "bf01_oi01->bf01");
    conv_case("f32[7,32,14,14]", "f32[32,32,3,3]", "f32[7,32,14,14]", w3, "bf01_oi01->bf01");
    conv_case("f32[1,3,96,96]", "f32[32,3,3,3]", "f32[1,32,96,96]", w3, "bf01_oi01->bf01");
    conv_case("f32[3,64,14,14]", "f32[64,64,1,1]", "f32[3,64,14,14]", "size=1x1",
              "bf01_oi01->bf01");
    conv_case("f32[1,32,28,28]", "f32[1,64,28,28]", "f32[64,32,3,3]", "size=28x28 pad=1_1x1_1",
              "fb01_io01->fb01");
    conv_case("f32[1,200,32]", "f32[5,32,32]", "f32[1,200,32]", "size=5 pad=2_2", "b0f_0io->b0f");
    conv_case("f32[1,12,12,12,16]", "f32[3,3,3,16,16]", "f32[1,12,12,12,16]",
              "size=3x3x3 pad=1_1x1_1x1_1", "b012f_012io->b012f");
}

/* Few chunks of images times tiles of rows (few images of few output positions: a late layer at
 * batch 1, 3 or 7) with the output features cut into parts, each its own oneDNN convolution
 * computed into scratch and reordered into place: 3x3, 1x1 and 7x7 kernels, a reversed window
 * (the input gradient's forward reading), NHWC (a dense part written into the wider output) and
 * NCHW (blocked parts), parts of 16 to 128 features; and a layer too small to cut. */
static void test_feature_parts(void) {
    const char *w3 = "size=3x3 pad=1_1x1_1";
    conv_case("f32[1,7,7,256]", "f32[3,3,256,256]", "f32[1,7,7,256]", w3, "b01f_01io->b01f");
    conv_case("f32[3,4,4,256]", "f32[3,3,256,256]", "f32[3,4,4,256]", w3, "b01f_01io->b01f");
    conv_case("f32[7,7,7,256]", "f32[3,3,256,256]", "f32[7,7,7,256]", w3, "b01f_01io->b01f");
    conv_case("f32[1,7,7,512]", "f32[1,1,512,512]", "f32[1,7,7,512]", "size=1x1",
              "b01f_01io->b01f");
    conv_case("f32[1,7,7,64]", "f32[7,7,64,128]", "f32[1,7,7,128]", "size=7x7 pad=3_3x3_3",
              "b01f_01io->b01f");
    conv_case("f32[1,7,7,256]", "f32[3,3,256,256]", "f32[1,7,7,256]",
              "size=3x3 pad=1_1x1_1 rhs_reversal=1x1", "b01f_01oi->b01f");
    conv_case("f32[1,14,14,128]", "f32[3,3,128,128]", "f32[1,7,7,128]",
              "size=3x3 stride=2x2 pad=1_1x1_1", "b01f_01io->b01f");
    conv_case("f32[1,256,7,7]", "f32[256,256,3,3]", "f32[1,256,7,7]", w3, "bf01_oi01->bf01");
    conv_case("f32[3,256,4,4]", "f32[256,256,3,3]", "f32[3,256,4,4]", w3, "bf01_oi01->bf01");
    conv_case("f32[1,512,7,7]", "f32[512,512,1,1]", "f32[1,512,7,7]", "size=1x1",
              "bf01_oi01->bf01");
    conv_case("f32[1,64,7,7]", "f32[128,64,7,7]", "f32[1,128,7,7]", "size=7x7 pad=3_3x3_3",
              "bf01_oi01->bf01");
    conv_case("f32[1,4,4,32]", "f32[3,3,32,32]", "f32[1,4,4,32]", w3, "b01f_01io->b01f");
}

/* Windows that tile the input (stride = window, no padding): the patch matrix through the fast
 * dot — ViT's 16x16 stride-16 embedding, 8x8 stride-8 (NHWC in one dot, NCHW per image),
 * rectangular windows, a kernel whose features are outermost (OIHW beside an NHWC input), an
 * NCHW input with an NHWC output, a 1x1 NCHW layer, 1-D and 3-D, each with fewer than 16 input
 * features, at least 512 kernel rows and 128 output features; and the other paths: 16 input
 * features or more, smaller products, windows that leave input rows unread. */
static void test_patches(void) {
    conv_case("f32[2,64,64,3]", "f32[16,16,3,128]", "f32[2,4,4,128]", "size=16x16 stride=16x16",
              "b01f_01io->b01f");
    conv_case("f32[3,64,64,8]", "f32[8,8,8,128]", "f32[3,8,8,128]", "size=8x8 stride=8x8",
              "b01f_01io->b01f");
    conv_case("f32[2,32,64,4]", "f32[8,16,4,136]", "f32[2,4,4,136]", "size=8x16 stride=8x16",
              "b01f_01io->b01f");
    conv_case("f32[2,18,32,12]", "f32[6,8,12,128]", "f32[2,3,4,128]", "size=6x8 stride=6x8",
              "b01f_01io->b01f");
    conv_case("f32[2,64,64,8]", "f32[128,8,8,8]", "f32[2,8,8,128]", "size=8x8 stride=8x8",
              "b01f_oi01->b01f");
    conv_case("f32[2,8,64,64]", "f32[8,8,8,128]", "f32[2,8,8,128]", "size=8x8 stride=8x8",
              "bf01_01io->b01f");
    conv_case("f32[2,8,64,64]", "f32[128,8,8,8]", "f32[2,128,8,8]", "size=8x8 stride=8x8",
              "bf01_oi01->bf01");
    conv_case("f32[3,3,48,48]", "f32[128,3,16,16]", "f32[3,128,3,3]", "size=16x16 stride=16x16",
              "bf01_oi01->bf01");
    conv_case("f32[2,16,12,20]", "f32[24,16,1,1]", "f32[2,24,12,20]", "size=1x1",
              "bf01_oi01->bf01");
    conv_case("f32[4,256,8]", "f32[64,8,128]", "f32[4,4,128]", "size=64 stride=64", "b0f_0io->b0f");
    conv_case("f32[2,16,16,16,2]", "f32[8,8,4,2,128]", "f32[2,2,2,4,128]",
              "size=8x8x4 stride=8x8x4", "b012f_012io->b012f");
    conv_case("f32[2,16,16,32]", "f32[2,2,32,136]", "f32[2,8,8,136]", "size=2x2 stride=2x2",
              "b01f_01io->b01f");
    conv_case("f32[3,32,32,8]", "f32[4,4,8,128]", "f32[3,8,8,128]", "size=4x4 stride=4x4",
              "b01f_01io->b01f");
    conv_case("f32[2,16,16,4]", "f32[2,2,4,8]", "f32[2,8,8,8]", "size=2x2 stride=2x2",
              "b01f_01io->b01f");
    conv_case("f32[2,33,34,3]", "f32[16,16,3,128]", "f32[2,2,2,128]", "size=16x16 stride=16x16",
              "b01f_01io->b01f");
    conv_case("f32[2,3,34,33]", "f32[128,3,16,16]", "f32[2,128,2,2]", "size=16x16 stride=16x16",
              "bf01_oi01->bf01");
}

static void test_setup(void) {
    for (int k = 0; k < NPOOLS; k++)
        ASSERT_OK(ot_threadpool_create(k_pool_threads[k], &g_pools[k]));
    EXPECT_INT_EQ(ot_threadpool_size(g_pools[3]), 8);
}

static void test_teardown(void) {
    for (int k = 0; k < NPOOLS; k++) {
        ot_threadpool_free(g_pools[k]);
        g_pools[k] = NULL;
    }
    EXPECT_TRUE(true);
}

OT_TEST_MAIN(OT_TEST(test_setup), OT_TEST(test_convnet_nchw), OT_TEST(test_convnet_nhwc),
             OT_TEST(test_windows), OT_TEST(test_group_filter_grads), OT_TEST(test_nchw_blocked),
             OT_TEST(test_small_batches), OT_TEST(test_feature_parts), OT_TEST(test_patches),
             OT_TEST(test_output_fusion), OT_TEST(test_teardown))
