/* tpu_optim compressed state (options.state_format): bf16 moments, rounded to nearest even or
 * stochastically, in the flat fused update. Checked bit for bit against a host reference: each
 * tensor's update by ot_optimizer_step_reference on the widened state, then the state rounded
 * on the host (ot_f32_to_bf16, or the stochastic rounding of the documented hash). Plus the
 * refusals, the state bytes, the kernel count and the hash's statistics. */
#include "ot_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optitpu/compiler.h"
#include "optitpu/optim.h"
#include "optitpu/runtime.h"
#include "optitpu/tpu_optim.h"

#define NT    4
#define STEPS 7

static ot_shape shapes[NT];

static void make_shapes(void) {
    ot_shape_make(&shapes[0], OT_F32, 0, NULL);                 /* scalar */
    ot_shape_make(&shapes[1], OT_F32, 1, (int64_t[]){7});       /* odd vector */
    ot_shape_make(&shapes[2], OT_F32, 3, (int64_t[]){3, 4, 5}); /* 3-D */
    ot_shape_make(&shapes[3], OT_F32, 2, (int64_t[]){16, 17});  /* past a lane block */
}

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* a deterministic value in [-a, a) */
static float val(uint64_t seed, double a) {
    return (float)(a * ((double)(mix(seed) >> 11) / 4503599627370496.0 - 1.0));
}

static ot_optimizer *make_opt(const char *name) {
    ot_optimizer *o = NULL;
    if (strcmp(name, "sgd_momentum") == 0) {
        if (ot_optimizer_new("sgd", &o) != OT_OK) return NULL;
        ot_optimizer_set(o, "momentum", 0.9);
        ot_optimizer_set(o, "weight_decay", 0.01);
        return o;
    }
    if (ot_optimizer_new(name, &o) != OT_OK) return NULL;
    return o;
}

/* The bf16 value of x under the wrapper's rounding (stochastic: key, step, flat index). */
static uint16_t round_ref(float x, bool sr, uint32_t key, int64_t step, int64_t idx) {
    if (!sr || !isfinite(x)) return ot_f32_to_bf16(x);
    uint32_t u;
    memcpy(&u, &x, 4);
    u += ot_tpu_sr_bits(key, step, idx) >> 16;
    return (uint16_t)(u >> 16);
}

/* Runs optimizer `name` for STEPS steps with bf16 state (sr: stochastic, seed) in flat or
 * per-tensor mode on one host device and compares parameters and the state after every step
 * with the host reference, bit for bit. */
static void compare_reference(const char *name, bool flat, bool sr, uint64_t seed) {
    ot_optimizer *o = make_opt(name);
    ASSERT_TRUE(o != NULL);
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.flat = flat;
    to.state_format = OT_TPU_STATE_BF16;
    to.state_stochastic_rounding = sr;
    to.state_seed = seed;
    ot_tpu_optimizer *t = NULL;
    ot_device *dev = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &dev));
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &t));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, dev));
    EXPECT_INT_EQ(ot_tpu_optimizer_flat_group_count(t), flat ? 1 : 0);
    int S = ot_optimizer_state_count(o);
    bool scalar_slot[OT_OPTIM_MAX_STATE] = {0}; /* NAdam's mu_product: f32 */
    for (int j = 0; j < S; j++) {
        ot_shape ss;
        ASSERT_OK(ot_tpu_optimizer_state_shape(t, flat ? j : S * 3 + j, &ss)); /* [16, 17] */
        scalar_slot[j] = ss.rank == 0;
        EXPECT_INT_EQ(ss.dtype, scalar_slot[j] ? OT_F32 : OT_BF16);
    }
    ot_buffer *pb[NT] = {0}, *gb[NT] = {0};
    /* the host reference: per tensor its optimizer copy, f32 parameter and f32 state */
    ot_optimizer *ro[NT];
    ot_tensor p[NT], g[NT], st[NT][OT_OPTIM_MAX_STATE];
    ot_tpu_flat_view v[NT];
    for (int k = 0; k < NT; k++) {
        ASSERT_OK(ot_optimizer_clone(o, &ro[k]));
        if (flat) {
            ASSERT_OK(ot_tpu_optimizer_flat_view(t, k, &v[k]));
        } else { /* per tensor: unit k, its own element indices */
            v[k] = (ot_tpu_flat_view){k, OT_F32, 0, ot_shape_numel_unchecked(&shapes[k])};
        }
        ASSERT_OK(ot_tensor_alloc(&p[k], &shapes[k]));
        ASSERT_OK(ot_tensor_alloc(&g[k], &shapes[k]));
        for (int64_t e = 0; e < v[k].count; e++)
            ((float *)p[k].data)[e] = val(1000u * (uint64_t)k + (uint64_t)e, 1.0);
        if (flat)
            ASSERT_OK(ot_tpu_optimizer_write_param(t, dev, k, &p[k]));
        else
            ASSERT_OK(ot_buffer_from_host(dev, &p[k], &pb[k]));
        for (int j = 0; j < S; j++)
            ASSERT_OK(ot_optimizer_state_alloc(o, j, &shapes[k], &st[k][j]));
    }
    int bad = 0;
    for (int step = 1; step <= STEPS; step++) {
        double lr = 0.01 * (1.0 + 0.1 * step);
        for (int k = 0; k < NT; k++) {
            for (int64_t e = 0; e < v[k].count; e++) /* small gradients: moments far below 1 */
                ((float *)g[k].data)[e] =
                    val(7919u * (uint64_t)step + 100003u * (uint64_t)k + (uint64_t)e, 0.05);
            if (flat) {
                ASSERT_OK(ot_tpu_optimizer_write_grad(t, dev, k, &g[k]));
            } else {
                ot_buffer_free(gb[k]);
                gb[k] = NULL;
                ASSERT_OK(ot_buffer_from_host(dev, &g[k], &gb[k]));
            }
            ASSERT_OK(ot_optimizer_step_reference(ro[k], &p[k], &g[k], st[k], S, lr));
            for (int j = 0; j < S; j++) { /* the reference state, rounded as stored */
                if (scalar_slot[j]) continue;
                float *x = st[k][j].data;
                uint32_t key = ot_tpu_sr_key(seed, v[k].group, j);
                for (int64_t e = 0; e < v[k].count; e++)
                    x[e] = ot_bf16_to_f32(round_ref(x[e], sr, key, step, v[k].offset + e));
            }
        }
        if (flat)
            ASSERT_OK(ot_tpu_optimizer_step_flat(t, dev, step, lr, NULL));
        else
            ASSERT_OK(ot_tpu_optimizer_step(t, dev, pb, gb, step, lr, NULL));
        for (int k = 0; k < NT; k++) {
            ot_tensor got = {0};
            if (flat)
                ASSERT_OK(ot_tpu_optimizer_read_param(t, dev, k, &got));
            else
                ASSERT_OK(ot_buffer_to_host(pb[k], &got));
            if (memcmp(got.data, p[k].data, p[k].nbytes) != 0) bad++;
            ot_tensor_release(&got);
        }
        for (int j = 0; j < S; j++) {
            for (int k = 0; k < NT; k++) {
                if (scalar_slot[j]) continue;
                ot_tensor fs = {0};
                ASSERT_OK(ot_tpu_optimizer_get_state(t, dev, flat ? j : k * S + j, &fs));
                EXPECT_INT_EQ(fs.shape.dtype, OT_BF16);
                const uint16_t *b = (const uint16_t *)fs.data + v[k].offset;
                const float *x = st[k][j].data;
                for (int64_t e = 0; e < v[k].count; e++)
                    if (ot_bf16_to_f32(b[e]) != x[e] &&
                        !(isnan(x[e]) && isnan(ot_bf16_to_f32(b[e]))))
                        bad++;
                ot_tensor_release(&fs);
            }
        }
    }
    if (bad)
        fprintf(stderr, "%s (%s, %s): %d mismatches\n", name, flat ? "flat" : "per tensor",
                sr ? "stochastic" : "nearest", bad);
    EXPECT_INT_EQ(bad, 0);
    for (int k = 0; k < NT; k++) {
        ot_optimizer_free(ro[k]);
        ot_buffer_free(pb[k]);
        ot_buffer_free(gb[k]);
        ot_tensor_release(&p[k]);
        ot_tensor_release(&g[k]);
        for (int j = 0; j < S; j++) ot_tensor_release(&st[k][j]);
    }
    ot_tpu_optimizer_free(t);
    ot_device_free(dev);
    ot_optimizer_free(o);
}

static const char *const names[] = {"adam", "adamw", "lion", "sgd_momentum", "nadam", "lamb"};

static void test_bf16_nearest_bitwise(void) {
    make_shapes();
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        compare_reference(names[i], true, false, 0);
        compare_reference(names[i], false, false, 0);
    }
}

static void test_bf16_stochastic_bitwise(void) {
    make_shapes();
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        compare_reference(names[i], true, true, 0x5eed0000u + i);
        compare_reference(names[i], false, true, 0x5eed0000u + i);
    }
}

/* Every x between two bf16 values is rounded up with probability low16 / 65536: over 2^16
 * consecutive indices the share of round-ups is within a few standard deviations. */
static void test_stochastic_rounding_statistics(void) {
    const uint32_t lows[] = {0x0001u, 0x4000u, 0x8000u, 0xC000u, 0xFFFFu};
    for (int s = 0; s < 2; s++) {
        uint32_t key = ot_tpu_sr_key(12345u + (uint64_t)s, s, 1);
        for (size_t q = 0; q < sizeof lows / sizeof *lows; q++) {
            int64_t ups = 0, n = 1 << 16;
            for (int64_t i = 0; i < n; i++)
                if ((ot_tpu_sr_bits(key, 3, i) >> 16) + lows[q] >= 0x10000u) ups++;
            double pr = lows[q] / 65536.0, sd = sqrt((double)n * pr * (1 - pr));
            EXPECT_TRUE(fabs((double)ups - (double)n * pr) <= 5 * sd + 1);
        }
    }
    /* different steps and keys give different streams */
    EXPECT_TRUE(ot_tpu_sr_bits(1, 1, 0) != ot_tpu_sr_bits(1, 2, 0));
    EXPECT_TRUE(ot_tpu_sr_key(1, 0, 0) != ot_tpu_sr_key(2, 0, 0));
    EXPECT_TRUE(ot_tpu_sr_key(1, 0, 0) != ot_tpu_sr_key(1, 0, 1));
}

/* Adam's state in bf16: half the state bytes, still one fused kernel for the whole update. */
static void test_bytes_and_kernels(void) {
    ot_shape sh[40];
    for (int k = 0; k < 40; k++) ot_shape_make(&sh[k], OT_F32, 2, (int64_t[]){k + 1, 13});
    ot_optimizer *o = make_opt("adam");
    ASSERT_TRUE(o != NULL);
    ot_tpu_profile pf[3];
    int kernels[3];
    for (int m = 0; m < 3; m++) {
        ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
        to.flat = true;
        to.state_format = m == 0 ? OT_TPU_STATE_F32 : OT_TPU_STATE_BF16;
        to.state_stochastic_rounding = m == 2;
        ot_tpu_optimizer *t = NULL;
        ASSERT_OK(ot_tpu_optimizer_create(o, sh, 40, &to, &t));
        ASSERT_OK(ot_tpu_optimizer_profile(t, &pf[m]));
        kernels[m] = ot_executable_kernel_count(ot_tpu_optimizer_executable(t));
        ot_tpu_optimizer_free(t);
    }
    EXPECT_INT_EQ(pf[1].state_bytes * 2, pf[0].state_bytes);
    EXPECT_INT_EQ(pf[1].param_bytes, pf[0].param_bytes);
    /* Adam: 4 + 4 + 4 + 2 * (4 + 4) = 28 bytes per parameter in f32, 20 with bf16 moments */
    EXPECT_INT_EQ(pf[1].bytes_per_step * 28, pf[0].bytes_per_step * 20);
    EXPECT_INT_EQ(kernels[0], 1);
    EXPECT_INT_EQ(kernels[1], 1);
    EXPECT_TRUE(kernels[2] <= 2); /* plus a scalar kernel: the step as u32 */
    ot_optimizer_free(o);
}

static void test_refused(void) {
    make_shapes();
    ot_optimizer *o = make_opt("adam");
    ASSERT_TRUE(o != NULL);
    ot_tpu_optimizer *t = NULL;
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.flat = true;
    to.state_format = (ot_tpu_state_format)77;
    EXPECT_STATUS(ot_tpu_optimizer_create(o, shapes, NT, &to, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(ot_last_error(), "state format") != NULL);
    ot_shape f64s[2];
    ot_shape_make(&f64s[0], OT_F32, 1, (int64_t[]){5});
    ot_shape_make(&f64s[1], OT_F64, 1, (int64_t[]){5});
    to.state_format = OT_TPU_STATE_BF16;
    EXPECT_STATUS(ot_tpu_optimizer_create(o, f64s, 2, &to, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(ot_last_error(), "f64") != NULL);
    to.flat = false;
    EXPECT_STATUS(ot_tpu_optimizer_create(o, f64s, 2, &to, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(ot_last_error(), "f64 parameter 1") != NULL);
    to.flat = true;
    EXPECT_TRUE(t == NULL);
    /* a state tensor of the wrong dtype is refused by set_state */
    ot_device *dev = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &dev));
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &t));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, dev));
    ot_shape ss;
    ASSERT_OK(ot_tpu_optimizer_state_shape(t, 0, &ss));
    EXPECT_INT_EQ(ss.dtype, OT_BF16);
    ss.dtype = OT_F32;
    ot_tensor wrong = {0};
    ASSERT_OK(ot_tensor_alloc(&wrong, &ss));
    memset(wrong.data, 0, wrong.nbytes);
    EXPECT_STATUS(ot_tpu_optimizer_set_state(t, dev, 0, &wrong), OT_ERR_SHAPE_MISMATCH);
    ot_tensor_release(&wrong);
    ot_tpu_optimizer_free(t);
    ot_device_free(dev);
    ot_optimizer_free(o);
}

OT_TEST_MAIN(OT_TEST(test_bf16_nearest_bitwise), OT_TEST(test_bf16_stochastic_bitwise),
             OT_TEST(test_stochastic_rounding_statistics), OT_TEST(test_bytes_and_kernels),
             OT_TEST(test_refused))
