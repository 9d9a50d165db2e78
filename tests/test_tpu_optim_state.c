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
    ot_tpu_profile pf[4];
    int kernels[4];
    for (int m = 0; m < 4; m++) {
        ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
        to.flat = true;
        to.state_format = m == 0   ? OT_TPU_STATE_F32
                          : m == 3 ? OT_TPU_STATE_INT8
                                   : OT_TPU_STATE_BF16;
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
    /* int8: 1 byte per slot and element plus 4 per block of 256 elements (tensors start at
     * multiples of 256, so the 40 tensors of 13..520 elements take 256..768 each) */
    int64_t padded = 0;
    for (int k = 0; k < 40; k++) padded += ((k + 1) * 13 + 255) / 256 * 256;
    EXPECT_INT_EQ(pf[3].state_bytes, 2 * padded + 2 * (padded / 256) * 4);
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
    to.state_format = OT_TPU_STATE_INT8; /* per tensor: the fused kernel's optimizers only */
    to.flat = false;
    ot_optimizer *na = make_opt("nadam");
    ASSERT_TRUE(na != NULL);
    ot_shape big; /* at least OT_TPU_INT8_MIN_SIZE elements: compressed */
    ot_shape_make(&big, OT_F32, 2, (int64_t[]){64, 64});
    EXPECT_STATUS(ot_tpu_optimizer_create(na, &big, 1, &to, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(ot_last_error(), "per-tensor mode") != NULL);
    ot_optimizer_free(na);
    to.flat = true;
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
    to.state_format = OT_TPU_STATE_INT8;
    EXPECT_STATUS(ot_tpu_optimizer_create(o, f64s, 2, &to, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(ot_last_error(), "int8") != NULL);
    to.state_format = OT_TPU_STATE_BF16;
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

/* ---- 8-bit block-wise state ------------------------------------------------------------- */

#define QDIR OT_SOURCE_DIR "/tests/data/optim_state/"

static bool load(const char *name, ot_tensor *t) {
    ot_status s = ot_npy_read_file(name, t);
    if (s != OT_OK) fprintf(stderr, "%s: %s\n", name, ot_last_error());
    return s == OT_OK;
}

/* The dynamic maps are scripts/optim_state_ref.py's (bitsandbytes' create_dynamic_map with
 * torch's f32 linspace), bit for bit. */
static void test_int8_map(void) {
    for (int sg = 0; sg < 2; sg++) {
        float m[256];
        ot_tpu_int8_map(sg == 0, m);
        ot_tensor ref = {0};
        ASSERT_TRUE(load(sg == 0 ? QDIR "code_signed.npy" : QDIR "code_unsigned.npy", &ref));
        EXPECT_INT_EQ(ot_shape_numel_unchecked(&ref.shape), 256);
        EXPECT_TRUE(memcmp(m, ref.data, sizeof m) == 0);
        for (int k = 1; k < 256; k++) EXPECT_TRUE(m[k - 1] < m[k]);
        ot_tensor_release(&ref);
    }
}

/* The NumPy reference's bf16 rounding (nearest even; stochastic with seed 7, group 0, slot 1,
 * step 3 through its copy of the hash) equals the library's: ot_f32_to_bf16 and the documented
 * stochastic rounding over ot_tpu_sr_key / ot_tpu_sr_bits, on 4099 values over 60 decades with
 * zeros, infinities, the largest finite value and a subnormal. */
static void test_bf16_fixture(void) {
    ot_tensor x = {0}, rn = {0}, rs = {0};
    ASSERT_TRUE(load(QDIR "bf16_x.npy", &x));
    ASSERT_TRUE(load(QDIR "bf16_nearest.npy", &rn));
    ASSERT_TRUE(load(QDIR "bf16_stochastic.npy", &rs));
    int64_t n = ot_shape_numel_unchecked(&x.shape);
    uint32_t key = ot_tpu_sr_key(7, 0, 1);
    int bad = 0;
    for (int64_t e = 0; e < n; e++) {
        float v = ((float *)x.data)[e];
        bad += ot_f32_to_bf16(v) != ((uint16_t *)rn.data)[e];
        bad += round_ref(v, true, key, 3, e) != ((uint16_t *)rs.data)[e];
    }
    EXPECT_INT_EQ(bad, 0);
    ot_tensor_release(&x);
    ot_tensor_release(&rn);
    ot_tensor_release(&rs);
}

/* A custom optimizer whose state is the gradient itself (state' = g, p' = p): after one step the
 * stored codes and absmax are the quantization of the gradient. Slot 0 is "m" (signed map),
 * slot 1 "exp_avg_sq" (unsigned). */
static const char *const copy_states[] = {"m", "exp_avg_sq"};
static int copy_nstate(const ot_optimizer *o) {
    (void)o;
    return 2;
}
static const char *copy_state(const ot_optimizer *o, int i) {
    (void)o;
    return i >= 0 && i < 2 ? copy_states[i] : NULL;
}
static ot_status copy_build(const ot_optimizer *o, const ot_optim_inputs *in,
                            ot_optim_outputs *out) {
    (void)o;
    out->param = in->param;
    out->state[0] = in->grad;
    out->state[1] = ot_build_unary(in->c, OT_OP_ABS, in->grad);
    return OT_OK;
}
static const ot_optimizer_vtable copy_vt = {
    .name = "copy_grad", .state_count = copy_nstate, .state_name = copy_state, .build = copy_build};

/* Quantization of given values (every map value and midpoint scaled by a block absmax, zeros,
 * +-absmax, 12 decades of random values, an all-zero block, a partial last block): codes and
 * absmax bit for bit the NumPy reference's argmin. */
static void test_int8_quantize(void) {
    ot_tensor x = {0}, rc[2], ra[2];
    memset(rc, 0, sizeof rc);
    memset(ra, 0, sizeof ra);
    ASSERT_TRUE(load(QDIR "quant_x.npy", &x));
    ASSERT_TRUE(load(QDIR "quant_signed_codes.npy", &rc[0]));
    ASSERT_TRUE(load(QDIR "quant_signed_absmax.npy", &ra[0]));
    ASSERT_TRUE(load(QDIR "quant_unsigned_codes.npy", &rc[1]));
    ASSERT_TRUE(load(QDIR "quant_unsigned_absmax.npy", &ra[1]));
    ot_optimizer *o = NULL;
    ASSERT_OK(ot_optimizer_new_custom(&copy_vt, &o));
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.flat = true;
    to.state_format = OT_TPU_STATE_INT8;
    ot_tpu_optimizer *t = NULL;
    ot_device *dev = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &dev));
    ASSERT_OK(ot_tpu_optimizer_create(o, &x.shape, 1, &to, &t));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, dev));
    EXPECT_INT_EQ(ot_tpu_optimizer_state_count(t), 4); /* m, exp_avg_sq, their absmax */
    EXPECT_TRUE(strcmp(ot_tpu_optimizer_state_name(t, 2), "flat0.f32.m.absmax") == 0);
    ASSERT_OK(ot_tpu_optimizer_write_grad(t, dev, 0, &x));
    ASSERT_OK(ot_tpu_optimizer_step_flat(t, dev, 1, 0.1, NULL));
    int64_t n = ot_shape_numel_unchecked(&x.shape), nb = (n + 255) / 256;
    for (int sg = 0; sg < 2; sg++) {
        ot_tensor c = {0}, a = {0};
        ASSERT_OK(ot_tpu_optimizer_get_state(t, dev, sg, &c));
        ASSERT_OK(ot_tpu_optimizer_get_state(t, dev, 2 + sg, &a));
        EXPECT_INT_EQ(c.shape.dtype, OT_U8);
        EXPECT_INT_EQ(ot_shape_numel_unchecked(&a.shape), nb);
        int bad = 0;
        const uint8_t *got = c.data, *want = rc[sg].data;
        for (int64_t e = 0; e < n; e++)
            if (got[e] != want[e]) {
                if (bad++ < 5)
                    fprintf(stderr, "%s: element %lld (x %.9g, absmax %.9g): code %d, want %d\n",
                            sg ? "unsigned" : "signed", (long long)e, ((float *)x.data)[e],
                            ((float *)ra[sg].data)[e / 256], got[e], want[e]);
            }
        EXPECT_INT_EQ(bad, 0);
        EXPECT_TRUE(memcmp(a.data, ra[sg].data, (size_t)nb * 4) == 0);
        ot_tensor_release(&c);
        ot_tensor_release(&a);
    }
    for (int sg = 0; sg < 2; sg++) {
        ot_tensor_release(&rc[sg]);
        ot_tensor_release(&ra[sg]);
    }
    ot_tensor_release(&x);
    ot_tpu_optimizer_free(t);
    ot_device_free(dev);
    ot_optimizer_free(o);
}

/* AdamW with 8-bit state over two tensors (1000 and 300 elements) for 12 steps against the NumPy
 * reference of bitsandbytes' algorithm: parameters within 1e-7 + 1e-5 |p| every step (the
 * library's Adam graph orders a few f32 operations differently), and at the end at most 1% of
 * the codes one index apart, none further, absmax within rtol 1e-5. */
static void test_int8_adamw_reference(void) {
    ot_shape sh[2];
    ot_shape_make(&sh[0], OT_F32, 1, (int64_t[]){1000});
    ot_shape_make(&sh[1], OT_F32, 1, (int64_t[]){300});
    ot_optimizer *o = NULL;
    ASSERT_OK(ot_optimizer_new("adamw", &o));
    ASSERT_OK(ot_optimizer_set(o, "weight_decay", 0.01));
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.flat = true;
    to.state_format = OT_TPU_STATE_INT8;
    ot_tpu_optimizer *t = NULL;
    ot_device *dev = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &dev));
    ASSERT_OK(ot_tpu_optimizer_create(o, sh, 2, &to, &t));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, dev));
    ot_tensor g[2], pr[2];
    memset(g, 0, sizeof g);
    memset(pr, 0, sizeof pr);
    char path[512];
    for (int k = 0; k < 2; k++) {
        ot_tensor p0 = {0};
        snprintf(path, sizeof path, QDIR "adamw_p0_%d.npy", k);
        ASSERT_TRUE(load(path, &p0));
        ASSERT_OK(ot_tpu_optimizer_write_param(t, dev, k, &p0));
        ot_tensor_release(&p0);
        snprintf(path, sizeof path, QDIR "adamw_g_%d.npy", k);
        ASSERT_TRUE(load(path, &g[k]));
        snprintf(path, sizeof path, QDIR "adamw_p_%d.npy", k);
        ASSERT_TRUE(load(path, &pr[k]));
    }
    double worst = 0, excess = 0; /* max rel where |p| > 1e-3; max |d| - (1e-7 + 1e-5 |p|) */
    for (int s = 1; s <= 12; s++) {
        for (int k = 0; k < 2; k++) {
            ot_tensor gs;
            ASSERT_OK(ot_tensor_borrow(&gs, &sh[k], (float *)g[k].data + (s - 1) * sh[k].dims[0]));
            ASSERT_OK(ot_tpu_optimizer_write_grad(t, dev, k, &gs));
        }
        ASSERT_OK(ot_tpu_optimizer_step_flat(t, dev, s, 1e-3, NULL));
        for (int k = 0; k < 2; k++) {
            ot_tensor p = {0};
            ASSERT_OK(ot_tpu_optimizer_read_param(t, dev, k, &p));
            const float *a = p.data, *b = (const float *)pr[k].data + (s - 1) * sh[k].dims[0];
            for (int64_t e = 0; e < sh[k].dims[0]; e++) {
                double d = fabs((double)a[e] - b[e]);
                if (fabs((double)b[e]) > 1e-3) worst = fmax(worst, d / fabs((double)b[e]));
                excess = fmax(excess, d - (1e-7 + 1e-5 * fabs((double)b[e])));
            }
            ot_tensor_release(&p);
        }
    }
    fprintf(stderr, "int8 adamw: max rel parameter deviation %.3g\n", worst);
    EXPECT_TRUE(excess <= 0);
    ot_tpu_flat_view v[2];
    for (int k = 0; k < 2; k++) ASSERT_OK(ot_tpu_optimizer_flat_view(t, k, &v[k]));
    EXPECT_INT_EQ(v[1].offset % OT_TPU_INT8_BLOCK, 0);
    for (int j = 0; j < 2; j++) {
        ot_tensor c = {0}, a = {0};
        ASSERT_OK(ot_tpu_optimizer_get_state(t, dev, j, &c));
        ASSERT_OK(ot_tpu_optimizer_get_state(t, dev, 2 + j, &a));
        int64_t off1 = 0, far = 0, total = 0;
        double aw = 0;
        for (int k = 0; k < 2; k++) {
            ot_tensor rc = {0}, ra = {0};
            snprintf(path, sizeof path, QDIR "adamw_codes%d_%d.npy", j + 1, k);
            ASSERT_TRUE(load(path, &rc));
            snprintf(path, sizeof path, QDIR "adamw_absmax%d_%d.npy", j + 1, k);
            ASSERT_TRUE(load(path, &ra));
            const uint8_t *gc = (const uint8_t *)c.data + v[k].offset, *wc = rc.data;
            for (int64_t e = 0; e < v[k].count; e++, total++) {
                int d = abs((int)gc[e] - (int)wc[e]);
                off1 += d == 1;
                far += d > 1;
            }
            const float *ga = (const float *)a.data + v[k].offset / 256, *wa = ra.data;
            for (int64_t b = 0; b < ot_shape_numel_unchecked(&ra.shape); b++)
                aw = fmax(aw, fabs((double)ga[b] - wa[b]) / fabs((double)wa[b]));
            ot_tensor_release(&rc);
            ot_tensor_release(&ra);
        }
        fprintf(stderr, "int8 adamw state %d: %lld of %lld codes one apart, absmax rel %.3g\n", j,
                (long long)off1, (long long)total, aw);
        EXPECT_INT_EQ(far, 0);
        EXPECT_TRUE(off1 * 100 <= total);
        EXPECT_TRUE(aw <= 1e-5);
        ot_tensor_release(&c);
        ot_tensor_release(&a);
    }
    for (int k = 0; k < 2; k++) {
        ot_tensor_release(&g[k]);
        ot_tensor_release(&pr[k]);
    }
    ot_tpu_optimizer_free(t);
    ot_device_free(dev);
    ot_optimizer_free(o);
}

/* Lion, SGD with momentum, NAdam and LAMB step with int8 state (the signed map for their
 * momentum, NAdam's scalar mu_product in f32): after 4 steps the parameters are within a tenth
 * of the largest update of the same optimizer's f32-state run. */
static void test_int8_other_optimizers(void) {
    make_shapes();
    const char *nm[] = {"lion", "sgd_momentum", "nadam", "lamb"};
    for (size_t q = 0; q < sizeof nm / sizeof *nm; q++) {
        ot_device *dev = NULL;
        ASSERT_OK(ot_host_device_create(0, 0, &dev));
        ot_optimizer *o = make_opt(nm[q]);
        ASSERT_TRUE(o != NULL);
        ot_tpu_optimizer *t[2] = {NULL, NULL};
        for (int m = 0; m < 2; m++) {
            ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
            to.flat = true;
            to.state_format = m ? OT_TPU_STATE_INT8 : OT_TPU_STATE_F32;
            ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &t[m]));
            ASSERT_OK(ot_tpu_optimizer_add_replica(t[m], dev));
        }
        double upd = 0, dev_max = 0;
        for (int step = 1; step <= 4; step++) {
            for (int k = 0; k < NT; k++) {
                ot_tensor g = {0}, p = {0};
                ASSERT_OK(ot_tensor_alloc(&g, &shapes[k]));
                ASSERT_OK(ot_tensor_alloc(&p, &shapes[k]));
                int64_t ne = ot_shape_numel_unchecked(&shapes[k]);
                for (int64_t e = 0; e < ne; e++) {
                    ((float *)g.data)[e] =
                        val(31u * (uint64_t)step + 1009u * (uint64_t)k + (uint64_t)e, 0.1);
                    ((float *)p.data)[e] = val(77u * (uint64_t)k + (uint64_t)e, 1.0);
                }
                for (int m = 0; m < 2; m++) {
                    if (step == 1) ASSERT_OK(ot_tpu_optimizer_write_param(t[m], dev, k, &p));
                    ASSERT_OK(ot_tpu_optimizer_write_grad(t[m], dev, k, &g));
                }
                ot_tensor_release(&g);
                ot_tensor_release(&p);
            }
            for (int m = 0; m < 2; m++)
                ASSERT_OK(ot_tpu_optimizer_step_flat(t[m], dev, step, 0.01, NULL));
        }
        for (int k = 0; k < NT; k++) {
            ot_tensor a = {0}, b = {0};
            ASSERT_OK(ot_tpu_optimizer_read_param(t[0], dev, k, &a));
            ASSERT_OK(ot_tpu_optimizer_read_param(t[1], dev, k, &b));
            int64_t ne = ot_shape_numel_unchecked(&shapes[k]);
            for (int64_t e = 0; e < ne; e++) {
                float x = ((float *)a.data)[e], y = ((float *)b.data)[e];
                EXPECT_TRUE(isfinite(y));
                upd = fmax(upd, fabs((double)x - val(77u * (uint64_t)k + (uint64_t)e, 1.0)));
                dev_max = fmax(dev_max, fabs((double)x - y));
            }
            ot_tensor_release(&a);
            ot_tensor_release(&b);
        }
        fprintf(stderr, "int8 %s: max |p - p_f32| %.3g, largest update %.3g\n", nm[q], dev_max,
                upd);
        EXPECT_TRUE(upd > 0 && dev_max <= 0.1 * upd);
        ot_tpu_optimizer_free(t[0]);
        ot_tpu_optimizer_free(t[1]);
        ot_optimizer_free(o);
        ot_device_free(dev);
    }
}

OT_TEST_MAIN(OT_TEST(test_bf16_nearest_bitwise), OT_TEST(test_bf16_stochastic_bitwise),
             OT_TEST(test_stochastic_rounding_statistics), OT_TEST(test_bytes_and_kernels),
             OT_TEST(test_refused), OT_TEST(test_bf16_fixture), OT_TEST(test_int8_map),
             OT_TEST(test_int8_quantize), OT_TEST(test_int8_adamw_reference),
             OT_TEST(test_int8_other_optimizers))
