/* Runtime: memory pools (size classes, best fit, splitting, coalescing, statistics, limits),
 * host devices and buffers, execution (donation, bad input, fault injection, deadlines,
 * cancellation, collectives over 4 devices), the backend (registry, selection, retry policy) and
 * the profiler (Chrome trace validated with jansson, summary); random elementwise / broadcast /
 * reduce graphs give identical results at -O0 and -O2 and through the evaluator. */
#include "optitpu/collectives.h"
#include "optitpu/clock.h"
#include "optitpu/exec.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define MiB (1 << 20)

static ot_module *parse(const char *text) {
    ot_module *m = NULL;
    ot_status s = ot_hlo_parse(text, strlen(text), NULL, &m);
    if (s != OT_OK) fprintf(stderr, "parse: %s\n%s\n", ot_last_error(), text);
    return m;
}

static ot_executable *compile_text(const char *text, int level) {
    ot_module *m = parse(text);
    if (!m) return NULL;
    ot_compile_options o = ot_compile_options_default();
    o.opt_level = level;
    ot_executable *e = NULL;
    if (ot_compile(m, &o, &e) != OT_OK) fprintf(stderr, "compile: %s\n", ot_last_error());
    ot_module_free(m);
    return e;
}

static ot_buffer *f32_buffer(ot_device *d, int64_t n, const float *v) {
    ot_shape s;
    ot_shape_make(&s, OT_F32, 1, (int64_t[]){n});
    ot_tensor t;
    ot_tensor_borrow(&t, &s, (void *)v);
    ot_buffer *b = NULL;
    if (ot_buffer_from_host(d, &t, &b) != OT_OK) fprintf(stderr, "%s\n", ot_last_error());
    return b;
}

static void read_f32(const ot_buffer *b, float *out, int64_t n) {
    ot_tensor t;
    if (ot_buffer_to_host(b, &t) != OT_OK) return;
    memcpy(out, t.data, (size_t)n * sizeof(float));
    ot_tensor_release(&t);
}

/* ---- pools ---------------------------------------------------------------------------------- */

static void test_pool_classes_and_stats(void) {
    ot_mem_pool *p;
    ASSERT_OK(ot_mem_pool_create(0, &p));
    ot_mem_stats s;
    void *a, *b, *c;
    EXPECT_OK(ot_mem_pool_alloc(p, 100, &a));
    EXPECT_TRUE(((uintptr_t)a & 255) == 0);
    ot_mem_pool_stats(p, &s);
    EXPECT_INT_EQ(s.in_use, 512); /* small: rounded to 512 */
    EXPECT_INT_EQ(s.requested, 100);
    EXPECT_INT_EQ(s.reserved, 2 * MiB); /* from a 2 MiB small segment */
    EXPECT_OK(ot_mem_pool_alloc(p, 1000, &b));
    ot_mem_pool_stats(p, &s);
    EXPECT_INT_EQ(s.reserved, 2 * MiB); /* same segment */
    EXPECT_INT_EQ(s.segments, 1);
    EXPECT_TRUE((char *)b == (char *)a + 512);
    /* large: best fit with splitting */
    EXPECT_OK(ot_mem_pool_alloc(p, 8 * MiB, &c));
    ot_mem_pool_stats(p, &s);
    EXPECT_INT_EQ(s.segments, 2);
    EXPECT_INT_EQ(s.reserved, 10 * MiB);
    EXPECT_OK(ot_mem_pool_release(p, c));
    void *d1, *d2;
    EXPECT_OK(ot_mem_pool_alloc(p, 2 * MiB, &d1));
    EXPECT_OK(ot_mem_pool_alloc(p, 3 * MiB, &d2));
    ot_mem_pool_stats(p, &s);
    EXPECT_INT_EQ(s.reserved, 10 * MiB); /* both carved from the cached 8 MiB segment */
    EXPECT_TRUE(d1 == c && (char *)d2 == (char *)c + 2 * MiB);
    EXPECT_INT_EQ(s.largest_free, 3 * MiB);
    EXPECT_OK(ot_mem_pool_release(p, d1)); /* free 2 MiB + 3 MiB, not adjacent */
    ot_mem_pool_stats(p, &s);
    EXPECT_NEAR(s.fragmentation, 1.0 - 3.0 / (7.0 - 1536.0 / MiB), 1e-12);
    EXPECT_OK(ot_mem_pool_release(p, d2)); /* coalesces into one 8 MiB block */
    ot_mem_pool_stats(p, &s);
    EXPECT_INT_EQ(s.largest_free, 8 * MiB);
    EXPECT_INT_EQ(s.peak_in_use, 8 * MiB + 1536);
    EXPECT_INT_EQ(s.alloc_count, 5);
    EXPECT_INT_EQ(s.free_count, 3);
    EXPECT_INT_EQ(s.live_blocks, 2);
    EXPECT_INT_EQ(ot_mem_pool_trim(p), 8 * MiB); /* the small segment is still used */
    EXPECT_STATUS(ot_mem_pool_release(p, (char *)a + 1), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "was not allocated here");
    EXPECT_OK(ot_mem_pool_release(p, a));
    EXPECT_STATUS(ot_mem_pool_release(p, a), OT_ERR_INVALID_ARGUMENT); /* double release */
    EXPECT_OK(ot_mem_pool_release(p, b));
    ot_mem_pool_stats(p, &s);
    EXPECT_INT_EQ(s.in_use, 0);
    EXPECT_INT_EQ(s.requested, 0);
    EXPECT_INT_EQ(s.fragmentation, 0);
    ot_mem_pool_free(p);
}

static void test_pool_limit(void) {
    ot_mem_pool *p;
    ASSERT_OK(ot_mem_pool_create(8 * MiB, &p));
    void *a, *b;
    EXPECT_OK(ot_mem_pool_alloc(p, 6 * MiB, &a));
    EXPECT_STATUS(ot_mem_pool_alloc(p, 3 * MiB, &b), OT_ERR_OUT_OF_MEMORY);
    EXPECT_TRUE(b == NULL);
    EXPECT_STR_CONTAINS(ot_last_error(), "requested 3145728 bytes");
    EXPECT_STR_CONTAINS(ot_last_error(), "available 2097152 of 8388608 bytes");
    EXPECT_OK(ot_mem_pool_release(p, a));
    /* the cached 6 MiB segment is trimmed to make room */
    EXPECT_OK(ot_mem_pool_alloc(p, 7 * MiB, &b));
    ot_mem_stats s;
    ot_mem_pool_stats(p, &s);
    EXPECT_INT_EQ(s.reserved, 7 * MiB);
    EXPECT_INT_EQ(s.oom_count, 1);
    EXPECT_INT_EQ(s.peak_reserved, 7 * MiB);
    EXPECT_OK(ot_mem_pool_release(p, b));
    ot_mem_pool *q;
    EXPECT_STATUS(ot_mem_pool_create(-1, &q), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(q == NULL);
    ASSERT_OK(ot_mem_pool_create(0, &q));
    EXPECT_STATUS(ot_mem_pool_alloc(q, -5, &b), OT_ERR_INVALID_ARGUMENT);
    ot_mem_pool_free(q);
    ot_mem_pool_free(p);
    int64_t v;
    EXPECT_OK(ot_tpu_hbm_bytes("v4-2x2x1", &v));
    EXPECT_INT_EQ(v, 32LL << 30);
    EXPECT_OK(ot_tpu_hbm_bytes("v5p", &v));
    EXPECT_INT_EQ(v, 95LL << 30);
    EXPECT_STATUS(ot_tpu_hbm_bytes("v9", &v), OT_ERR_NOT_FOUND);
}

static void test_pool_fault_injection(void) {
    for (int n = 1; n < 40; n++) {
        int64_t live = ot_alloc_live();
        ot_alloc_fail_after(n);
        ot_mem_pool *p = NULL;
        ot_status s = ot_mem_pool_create(0, &p);
        void *a = NULL, *b = NULL;
        if (s == OT_OK) s = ot_mem_pool_alloc(p, 100, &a);
        if (s == OT_OK) s = ot_mem_pool_alloc(p, 3 * MiB, &b);
        if (s == OT_OK) s = ot_mem_pool_release(p, a);
        ot_alloc_fail_after(0);
        ot_mem_pool_free(p);
        EXPECT_INT_EQ(ot_alloc_live(), live);
        if (s == OT_OK) break;
    }
}

/* ---- execution ------------------------------------------------------------------------------- */

static const char *k_sgd = "HloModule sgd, input_output_alias={ {0}: (0, {}, may-alias) }\n"
                           "ENTRY main {\n"
                           "  p = f32[4] parameter(0)\n"
                           "  g = f32[4] parameter(1)\n"
                           "  lr = f32[] constant(0.5)\n"
                           "  b = f32[4] broadcast(lr), dimensions={}\n"
                           "  m = f32[4] multiply(b, g)\n"
                           "  s = f32[4] subtract(p, m)\n"
                           "  ROOT t = (f32[4], f32[4]) tuple(s, m)\n"
                           "}\n";

static void test_execute_donation(void) {
    ot_device *d;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ot_executable *e = compile_text(k_sgd, 2);
    ASSERT_TRUE(e != NULL);
    float pv[4] = {1, 2, 3, 4}, gv[4] = {2, 4, 6, 8}, r[4];
    ot_buffer *in[2] = {f32_buffer(d, 4, pv), f32_buffer(d, 4, gv)}, *out[2];
    ot_run_result rr;
    EXPECT_OK(ot_device_execute(d, e, in, 2, out, 2, NULL, &rr));
    EXPECT_TRUE(rr.donated_written);
    EXPECT_INT_EQ(rr.kernels_run, ot_executable_kernel_count(e));
    read_f32(out[0], r, 4);
    EXPECT_TRUE(r[0] == 0 && r[1] == 0 && r[2] == 0 && r[3] == 0);
    read_f32(out[1], r, 4);
    EXPECT_TRUE(r[0] == 1 && r[3] == 4);
    EXPECT_TRUE(ot_buffer_donated(in[0]));
    EXPECT_TRUE(!ot_buffer_donated(in[1]));
    ot_tensor t;
    EXPECT_STATUS(ot_buffer_to_host(in[0], &t), OT_ERR_FAILED_PRECONDITION);
    ot_buffer *o2[2];
    EXPECT_STATUS(ot_device_execute(d, e, in, 2, o2, 2, NULL, NULL), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STR_CONTAINS(ot_last_error(), "parameter 0 (p) was donated");
    /* the donated output is the next step's parameter */
    ot_buffer *in2[2] = {out[0], in[1]};
    EXPECT_OK(ot_device_execute(d, e, in2, 2, o2, 2, NULL, NULL));
    read_f32(o2[0], r, 4);
    EXPECT_TRUE(r[0] == -1 && r[3] == -4);
    for (int k = 0; k < 2; k++) {
        ot_buffer_free(in[k]);
        ot_buffer_free(out[k]);
        ot_buffer_free(o2[k]);
    }
    ot_mem_stats s;
    ot_device_memory(d, &s);
    EXPECT_INT_EQ(s.in_use, 0);
    ot_executable_free(e);
    ot_device_free(d);
}

/* A view over the caller's memory: runs read and write it in place, donation keeps it the
 * caller's (freeing the output handle releases nothing: here the memory is another buffer's of
 * the same device, whose pool would otherwise get it back), and two views of one array see each
 * other's writes. */
static void test_buffer_view_host(void) {
    ot_device *d;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ot_executable *e = compile_text(k_sgd, 2);
    ASSERT_TRUE(e != NULL);
    ot_shape s4, s8;
    ASSERT_OK(ot_shape_make(&s4, OT_F32, 1, (int64_t[]){4}));
    ASSERT_OK(ot_shape_make(&s8, OT_F32, 1, (int64_t[]){8}));
    ot_buffer *base;
    ASSERT_OK(ot_buffer_alloc(d, &s8, &base));
    float *mem = ot_buffer_host_data_mut(base);
    ASSERT_TRUE(mem != NULL);
    for (int i = 0; i < 8; i++) mem[i] = (float)(i + 1);
    ot_mem_stats st0, st;
    ot_device_memory(d, &st0);
    ot_buffer *p, *g, *out[2], *again;
    ASSERT_OK(ot_buffer_view_host(d, &s4, mem, &p));
    ASSERT_OK(ot_buffer_view_host(d, &s4, mem + 4, &g));
    ASSERT_OK(ot_buffer_view_host(d, &s4, mem, &again));
    EXPECT_TRUE(ot_buffer_host_data(p) == mem);
    ot_buffer *in[2] = {p, g};
    EXPECT_OK(ot_device_execute(d, e, in, 2, out, 2, NULL, NULL));
    EXPECT_TRUE(ot_buffer_host_data(out[0]) == mem); /* written in place: 1 - 0.5 * 5, ... */
    EXPECT_TRUE(mem[0] == -1.5f && mem[3] == 0.0f && mem[4] == 5.0f);
    float r[4];
    read_f32(again, r, 4);
    EXPECT_TRUE(r[0] == -1.5f && r[3] == 0.0f);
    ot_buffer_free(out[0]);
    ot_buffer_free(out[1]);
    ot_buffer_free(p);
    ot_buffer_free(g);
    ot_buffer_free(again);
    ot_device_memory(d, &st);
    EXPECT_INT_EQ(st.in_use, st0.in_use); /* base's memory is still allocated, base's */
    EXPECT_TRUE(mem[0] == -1.5f);
    EXPECT_STATUS(ot_buffer_view_host(d, &s4, NULL, &p), OT_ERR_INVALID_ARGUMENT);
    ot_buffer_free(base);
    ot_device_memory(d, &st);
    EXPECT_INT_EQ(st.in_use, 0);
    ot_executable_free(e);
    ot_device_free(d);
}

static void test_execute_bad_input(void) {
    ot_device *d, *d2;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ASSERT_OK(ot_host_device_create(1, 0, &d2));
    ot_executable *e = compile_text(k_sgd, 2);
    ASSERT_TRUE(e != NULL);
    float v[5] = {0};
    ot_buffer *a = f32_buffer(d, 4, v), *b5 = f32_buffer(d, 5, v), *other = f32_buffer(d2, 4, v);
    ot_shape si;
    ot_shape_make(&si, OT_S32, 1, (int64_t[]){4});
    ot_buffer *bi;
    ASSERT_OK(ot_buffer_alloc(d, &si, &bi));
    ot_buffer *out[2] = {(ot_buffer *)1, (ot_buffer *)1};
    ot_buffer *in1[1] = {a};
    EXPECT_STATUS(ot_device_execute(d, e, in1, 1, out, 2, NULL, NULL), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "takes 2 parameters, got 1");
    EXPECT_TRUE(out[0] == NULL && out[1] == NULL);
    ot_buffer *in_shape[2] = {a, b5};
    EXPECT_STATUS(ot_device_execute(d, e, in_shape, 2, out, 2, NULL, NULL), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STR_CONTAINS(ot_last_error(), "parameter 1 (g) expects f32[4], got f32[5]");
    ot_buffer *in_dt[2] = {bi, a};
    EXPECT_STATUS(ot_device_execute(d, e, in_dt, 2, out, 2, NULL, NULL), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STR_CONTAINS(ot_last_error(), "parameter 0 (p) expects f32[4], got s32[4]");
    ot_buffer *in_dev[2] = {a, other};
    EXPECT_STATUS(ot_device_execute(d, e, in_dev, 2, out, 2, NULL, NULL), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "lives on device 1");
    ot_buffer *in_ok[2] = {a, a};
    EXPECT_STATUS(ot_device_execute(d, e, in_ok, 2, out, 1, NULL, NULL), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "produces 2 outputs");
    EXPECT_STATUS(ot_device_execute(d, e, in_ok, 2, out, 2, NULL, NULL), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "one of them donated");
    ot_buffer *bc;
    EXPECT_STATUS(ot_buffer_copy(a, b5), OT_ERR_SHAPE_MISMATCH);
    ASSERT_OK(ot_buffer_alloc(d2, ot_buffer_shape(a), &bc));
    float w[4] = {1, 2, 3, 4}, r[4];
    ot_buffer *src = f32_buffer(d, 4, w);
    EXPECT_OK(ot_buffer_copy(bc, src)); /* device to device */
    read_f32(bc, r, 4);
    EXPECT_TRUE(r[0] == 1 && r[3] == 4);
    ot_buffer_free(src);
    ot_buffer_free(bc);
    ot_buffer_free(a);
    ot_buffer_free(b5);
    ot_buffer_free(bi);
    ot_buffer_free(other);
    ot_mem_stats s;
    ot_device_memory(d, &s);
    EXPECT_INT_EQ(s.in_use, 0);
    ot_executable_free(e);
    ot_device_free(d);
    ot_device_free(d2);
}

static const char *k_big = "HloModule big\n"
                           "ENTRY main {\n"
                           "  p = f32[262144] parameter(0)\n"
                           "  e = f32[262144] exponential(p)\n"
                           "  t = f32[262144] tanh(p)\n"
                           "  d = f32[262144] multiply(e, t)\n"
                           "  ROOT s = f32[262144] add(d, p)\n"
                           "}\n";

static void test_execute_memory_limit(void) {
    /* 1 MiB parameter + 1 MiB output + an arena of temporaries > 2.5 MiB */
    ot_executable *e = compile_text(k_big, 0);
    ASSERT_TRUE(e != NULL);
    ot_device *d;
    ASSERT_OK(ot_host_device_create(0, 5 * MiB / 2, &d));
    ot_shape s;
    ot_shape_make(&s, OT_F32, 1, (int64_t[]){262144});
    ot_buffer *p, *out[1];
    ASSERT_OK(ot_buffer_alloc(d, &s, &p));
    EXPECT_STATUS(ot_device_execute(d, e, &p, 1, out, 1, NULL, NULL), OT_ERR_OUT_OF_MEMORY);
    EXPECT_STR_CONTAINS(ot_last_error(), "device 0: arena of");
    EXPECT_STR_CONTAINS(ot_last_error(), "requested");
    EXPECT_TRUE(out[0] == NULL);
    ot_mem_stats ms;
    ot_device_memory(d, &ms);
    EXPECT_INT_EQ(ms.in_use, MiB); /* only the parameter */
    ot_buffer_free(p);
    ot_device_free(d);
    ot_executable_free(e);
}

static void test_execute_fault_injection(void) {
    ot_executable *e = compile_text(k_sgd, 2);
    ASSERT_TRUE(e != NULL);
    bool done = false;
    for (int n = 1; n < 200 && !done; n++) {
        ot_device *d;
        ASSERT_OK(ot_host_device_create(0, 0, &d));
        float v[4] = {1, 2, 3, 4};
        ot_buffer *in[2] = {f32_buffer(d, 4, v), f32_buffer(d, 4, v)}, *out[2];
        int64_t live = ot_alloc_live();
        ot_alloc_fail_after(n);
        ot_status s = ot_device_execute(d, e, in, 2, out, 2, NULL, NULL);
        ot_alloc_fail_after(0);
        if (s == OT_OK) {
            done = true;
            ot_buffer_free(out[0]);
            ot_buffer_free(out[1]);
        } else {
            EXPECT_TRUE(out[0] == NULL && out[1] == NULL);
            EXPECT_TRUE(!ot_buffer_donated(in[0]));
            EXPECT_INT_EQ(ot_alloc_live(), live);
        }
        ot_buffer_free(in[0]);
        ot_buffer_free(in[1]);
        ot_mem_stats ms;
        ot_device_memory(d, &ms);
        EXPECT_INT_EQ(ms.in_use, 0);
        ot_device_free(d);
    }
    EXPECT_TRUE(done);
    ot_executable_free(e);
}

static void test_deadline_and_cancel(void) {
    ot_executable *e = compile_text(k_big, 0);
    ASSERT_TRUE(e != NULL);
    ot_device *d;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ot_shape s;
    ot_shape_make(&s, OT_F32, 1, (int64_t[]){262144});
    ot_buffer *p, *out[1];
    ASSERT_OK(ot_buffer_alloc(d, &s, &p));
    ot_run_options ro = ot_run_options_default();
    ro.deadline_ns = 1; /* long past */
    ot_run_result rr;
    EXPECT_STATUS(ot_device_execute(d, e, &p, 1, out, 1, &ro, &rr), OT_ERR_TIMEOUT);
    EXPECT_STR_CONTAINS(ot_last_error(), "deadline passed before kernel 0 of");
    EXPECT_INT_EQ(rr.kernels_run, 0);
    atomic_bool cancel;
    atomic_init(&cancel, true);
    ro = ot_run_options_default();
    ro.cancel = &cancel;
    EXPECT_STATUS(ot_device_execute(d, e, &p, 1, out, 1, &ro, NULL), OT_ERR_CANCELLED);
    atomic_store(&cancel, false);
    EXPECT_OK(ot_device_execute(d, e, &p, 1, out, 1, &ro, NULL));
    ot_buffer_free(out[0]);
    ot_buffer_free(p);
    ot_mem_stats ms;
    ot_device_memory(d, &ms);
    EXPECT_INT_EQ(ms.in_use, 0);
    ot_device_free(d);
    ot_executable_free(e);
}

/* A while loop of 10^9 iterations is one kernel: the deadline and the cancellation flag are
 * polled between its iterations, so the run stops promptly inside the kernel and names it.
 * max_while_iterations is only a backstop: without the polling the loop would end with
 * OUT_OF_RANGE after 5M iterations instead of TIMEOUT / CANCELLED. */
static const char *k_spin = "HloModule spin\n"
                            "cond {\n"
                            "  s = (s32[], f32[]) parameter(0)\n"
                            "  i = s32[] get-tuple-element(s), index=0\n"
                            "  n = s32[] constant(1000000000)\n"
                            "  ROOT lt = pred[] compare(i, n), direction=LT\n"
                            "}\n"
                            "inner_cond {\n"
                            "  s = (s32[], f32[]) parameter(0)\n"
                            "  i = s32[] get-tuple-element(s), index=0\n"
                            "  n = s32[] constant(3)\n"
                            "  ROOT lt = pred[] compare(i, n), direction=LT\n"
                            "}\n"
                            "step {\n"
                            "  s = (s32[], f32[]) parameter(0)\n"
                            "  i = s32[] get-tuple-element(s), index=0\n"
                            "  v = f32[] get-tuple-element(s), index=1\n"
                            "  one = s32[] constant(1)\n"
                            "  i2 = s32[] add(i, one)\n"
                            "  h = f32[] constant(0.5)\n"
                            "  v2 = f32[] add(v, h)\n"
                            "  ROOT t = (s32[], f32[]) tuple(i2, v2)\n"
                            "}\n"
                            "body {\n"
                            "  s = (s32[], f32[]) parameter(0)\n"
                            "  i = s32[] get-tuple-element(s), index=0\n"
                            "  v = f32[] get-tuple-element(s), index=1\n"
                            "  z = s32[] constant(0)\n"
                            "  t0 = (s32[], f32[]) tuple(z, v)\n"
                            "  inner = (s32[], f32[]) while(t0), condition=inner_cond, body=step\n"
                            "  v3 = f32[] get-tuple-element(inner), index=1\n"
                            "  one = s32[] constant(1)\n"
                            "  i2 = s32[] add(i, one)\n"
                            "  ROOT t = (s32[], f32[]) tuple(i2, v3)\n"
                            "}\n"
                            "ENTRY main {\n"
                            "  x = f32[] parameter(0)\n"
                            "  z = s32[] constant(0)\n"
                            "  t = (s32[], f32[]) tuple(z, x)\n"
                            "  spin = (s32[], f32[]) while(t), condition=cond, body=body\n"
                            "  ROOT r = f32[] get-tuple-element(spin), index=1\n"
                            "}\n";

typedef struct canceller {
    atomic_bool *flag;
    useconds_t after_us;
} canceller;

static void *cancel_later(void *arg) {
    canceller *c = arg;
    usleep(c->after_us);
    atomic_store(c->flag, true);
    return NULL;
}

static void test_deadline_inside_while(void) {
    ot_executable *e = compile_text(k_spin, 0);
    ASSERT_TRUE(e != NULL);
    ot_device *d;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ot_buffer *p, *out[1] = {NULL};
    float x0 = 0.0f;
    ot_shape s = ot_shape_scalar(OT_F32);
    ot_tensor t;
    ASSERT_OK(ot_tensor_borrow(&t, &s, &x0));
    ASSERT_OK(ot_buffer_from_host(d, &t, &p));
    int64_t live = ot_alloc_live();

    /* deadline 30 ms ahead: TIMEOUT inside the loop kernel, well before the backstop */
    ot_run_options ro = ot_run_options_default();
    ro.max_while_iterations = 5000000;
    uint64_t t0 = ot_now_ns();
    ro.deadline_ns = t0 + 30u * 1000000u;
    ot_run_result rr;
    EXPECT_STATUS(ot_device_execute(d, e, &p, 1, out, 1, &ro, &rr), OT_ERR_TIMEOUT);
    uint64_t t1 = ot_now_ns();
    EXPECT_STR_CONTAINS(ot_last_error(), "kernel spin (while)");
    EXPECT_STR_CONTAINS(ot_last_error(), "iteration");
    EXPECT_STR_CONTAINS(ot_last_error(), "deadline passed inside the kernel");
    EXPECT_TRUE(out[0] == NULL);
    /* stopped within 2 s of the deadline (one iteration is microseconds) */
    EXPECT_TRUE(t1 - ro.deadline_ns < 2000000000ull);
    EXPECT_INT_EQ(ot_alloc_live(), live);

    /* cancelled from another thread while the loop runs */
    atomic_bool flag;
    atomic_init(&flag, false);
    ro = ot_run_options_default();
    ro.max_while_iterations = 5000000;
    ro.cancel = &flag;
    canceller c = {&flag, 30000};
    pthread_t th;
    ASSERT_TRUE(pthread_create(&th, NULL, cancel_later, &c) == 0);
    t0 = ot_now_ns();
    EXPECT_STATUS(ot_device_execute(d, e, &p, 1, out, 1, &ro, &rr), OT_ERR_CANCELLED);
    t1 = ot_now_ns();
    pthread_join(th, NULL);
    EXPECT_STR_CONTAINS(ot_last_error(), "kernel spin (while)");
    EXPECT_STR_CONTAINS(ot_last_error(), "cancelled inside the kernel");
    EXPECT_TRUE(t1 - t0 < 2000000000ull);
    EXPECT_INT_EQ(ot_alloc_live(), live);

    /* neither: the backstop ends the loop (the loop really is long) */
    ro = ot_run_options_default();
    ro.max_while_iterations = 1000;
    EXPECT_STATUS(ot_device_execute(d, e, &p, 1, out, 1, &ro, NULL), OT_ERR_OUT_OF_RANGE);

    ot_buffer_free(p);
    ot_mem_stats ms;
    ot_device_memory(d, &ms);
    EXPECT_INT_EQ(ms.in_use, 0);
    ot_device_free(d);
    ot_executable_free(e);
}

/* ---- collectives on 4 devices ---------------------------------------------------------------- */

static const char *k_coll =
    "HloModule coll, replica_count=4\n"
    "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
    "ENTRY main {\n"
    "  p = f32[3] parameter(0)\n"
    "  ar = f32[3] all-reduce(p), replica_groups={{0,1,2,3}}, to_apply=add\n"
    "  ag = f32[6] all-gather(p), replica_groups={{0,2},{1,3}}, dimensions={0}\n"
    "  id = u32[] replica-id()\n"
    "  ROOT t = (f32[3], f32[6], u32[]) tuple(ar, ag, id)\n"
    "}\n";

typedef struct coll_ctx {
    ot_executable *e;
    ot_device *dev[4];
    float out[4][10];
} coll_ctx;

static ot_status coll_rank(void *ud, int rank, ot_comm *c) {
    coll_ctx *x = ud;
    float v[3] = {(float)rank, (float)(10 * rank), 1};
    ot_buffer *in = f32_buffer(x->dev[rank], 3, v), *out[3] = {0};
    ot_run_options ro = ot_run_options_default();
    ro.comm = c;
    ot_status s = ot_device_execute(x->dev[rank], x->e, &in, 1, out, 3, &ro, NULL);
    if (s == OT_OK) {
        read_f32(out[0], x->out[rank], 3);
        read_f32(out[1], x->out[rank] + 3, 6);
        ot_tensor t;
        if (ot_buffer_to_host(out[2], &t) == OT_OK) {
            x->out[rank][9] = (float)*(uint32_t *)t.data;
            ot_tensor_release(&t);
        }
    }
    for (int k = 0; k < 3; k++) ot_buffer_free(out[k]);
    ot_buffer_free(in);
    return s;
}

static void test_collectives_four_devices(void) {
    coll_ctx x;
    memset(&x, 0, sizeof x);
    x.e = compile_text(k_coll, 2);
    ASSERT_TRUE(x.e != NULL);
    for (int k = 0; k < 4; k++) ASSERT_OK(ot_host_device_create(k, 0, &x.dev[k]));
    ot_status st[4];
    EXPECT_OK(ot_local_run(4, coll_rank, &x, st));
    for (int r = 0; r < 4; r++) {
        EXPECT_NEAR(x.out[r][0], 6, 0);
        EXPECT_NEAR(x.out[r][1], 60, 0);
        EXPECT_NEAR(x.out[r][2], 4, 0);
        int partner = r ^ 2, lo = r < partner ? r : partner, hi = lo + 2;
        EXPECT_NEAR(x.out[r][3], lo, 0);
        EXPECT_NEAR(x.out[r][6], hi, 0);
        EXPECT_NEAR(x.out[r][7], 10 * hi, 0);
        EXPECT_NEAR(x.out[r][9], r, 0);
    }
    /* without a communicator a 4-member group cannot run */
    float v[3] = {0};
    ot_buffer *in = f32_buffer(x.dev[0], 3, v), *out[3];
    EXPECT_STATUS(ot_device_execute(x.dev[0], x.e, &in, 1, out, 3, NULL, NULL),
                  OT_ERR_FAILED_PRECONDITION);
    EXPECT_STR_CONTAINS(ot_last_error(), "all-reduce");
    ot_buffer_free(in);
    for (int k = 0; k < 4; k++) ot_device_free(x.dev[k]);
    ot_executable_free(x.e);
}

/* ---- backend ----------------------------------------------------------------------------------
 */

typedef struct sleeps {
    int64_t ns[16];
    int n;
} sleeps;

static void record_sleep(void *ud, int64_t ns) {
    sleeps *s = ud;
    if (s->n < 16) s->ns[s->n++] = ns;
}

typedef struct fake {
    ot_status fail_with;
    int fail_times, calls, ooms;
} fake;

static ot_status fake_attempt(void *ud, int attempt, bool *retry_ok) {
    (void)retry_ok;
    fake *f = ud;
    f->calls++;
    if (attempt <= f->fail_times) return ot_error(f->fail_with, "attempt %d failed", attempt);
    return OT_OK;
}

static void fake_oom(void *ud) {
    ((fake *)ud)->ooms++;
}

static void test_retry_policy(void) {
    ot_retry_policy p = ot_retry_policy_default();
    sleeps sl = {{0}, 0};
    p.max_attempts = 4;
    p.initial_backoff_ns = 1000;
    p.multiplier = 3;
    p.max_backoff_ns = 5000;
    p.jitter = 0.5;
    p.seed = 42;
    p.sleep = record_sleep;
    p.sleep_ud = &sl;
    fake f = {OT_ERR_TIMEOUT, 3, 0, 0};
    int att;
    EXPECT_OK(ot_retry_run(&p, fake_attempt, &f, fake_oom, &att));
    EXPECT_INT_EQ(att, 4);
    EXPECT_INT_EQ(sl.n, 3);
    uint64_t st = 42;
    int64_t want[3];
    for (int k = 0; k < 3; k++) want[k] = ot_retry_backoff_ns(&p, k + 2, &st);
    for (int k = 0; k < 3; k++) EXPECT_INT_EQ(sl.ns[k], want[k]);
    /* bases 1000, 3000, 5000 (capped), each scaled into [0.5, 1] */
    EXPECT_TRUE(sl.ns[0] >= 500 && sl.ns[0] <= 1000);
    EXPECT_TRUE(sl.ns[1] >= 1500 && sl.ns[1] <= 3000);
    EXPECT_TRUE(sl.ns[2] >= 2500 && sl.ns[2] <= 5000);
    /* deterministic for a seed */
    sleeps sl2 = {{0}, 0};
    p.sleep_ud = &sl2;
    fake f2 = {OT_ERR_TIMEOUT, 3, 0, 0};
    EXPECT_OK(ot_retry_run(&p, fake_attempt, &f2, NULL, NULL));
    EXPECT_TRUE(memcmp(sl.ns, sl2.ns, sizeof sl.ns) == 0);
    /* out of attempts: the last failure, with the count */
    fake f3 = {OT_ERR_OUT_OF_MEMORY, 10, 0, 0};
    EXPECT_STATUS(ot_retry_run(&p, fake_attempt, &f3, fake_oom, &att), OT_ERR_OUT_OF_MEMORY);
    EXPECT_INT_EQ(att, 4);
    EXPECT_INT_EQ(f3.ooms, 3); /* cached blocks released before every retry */
    EXPECT_STR_CONTAINS(ot_last_error(), "attempt 4 failed (after 4 attempts)");
    /* never retried */
    fake f4 = {OT_ERR_INVALID_ARGUMENT, 10, 0, 0};
    EXPECT_STATUS(ot_retry_run(&p, fake_attempt, &f4, fake_oom, &att), OT_ERR_INVALID_ARGUMENT);
    EXPECT_INT_EQ(f4.calls, 1);
    EXPECT_TRUE(!ot_status_retryable(OT_ERR_INVALID_ARGUMENT));
    EXPECT_TRUE(!ot_status_retryable(OT_ERR_NOT_FOUND));
    EXPECT_TRUE(ot_status_retryable(OT_ERR_TIMEOUT));
    EXPECT_TRUE(ot_status_retryable(OT_ERR_OUT_OF_MEMORY));
}

static void test_backend(void) {
    ot_backend_options bo = ot_backend_options_default();
    bo.devices = 3;
    bo.device_memory = 64 * MiB;
    sleeps sl = {{0}, 0};
    bo.retry.sleep = record_sleep;
    bo.retry.sleep_ud = &sl;
    ot_backend *b;
    ASSERT_OK(ot_backend_create(&bo, &b));
    EXPECT_INT_EQ(ot_backend_device_count(b), 3);
    ot_module *m = parse(k_sgd);
    ASSERT_TRUE(m != NULL);
    EXPECT_OK(ot_backend_register_module(b, "sgd", m, NULL));
    EXPECT_STATUS(ot_backend_register_module(b, "sgd", m, NULL), OT_ERR_ALREADY_EXISTS);
    EXPECT_STATUS(ot_backend_register_module(b, "", m, NULL), OT_ERR_INVALID_ARGUMENT);
    const ot_executable *e;
    EXPECT_STATUS(ot_backend_lookup(b, "adam", &e), OT_ERR_NOT_FOUND);
    EXPECT_STR_CONTAINS(ot_last_error(), "no executable registered as 'adam'");
    ot_buffer *out[2] = {0};
    EXPECT_STATUS(ot_backend_execute(b, "adam", 0, NULL, 0, out, 2, NULL, NULL), OT_ERR_NOT_FOUND);
    /* selection */
    int dev;
    EXPECT_OK(ot_backend_select_device(b, OT_DEVSEL_EXPLICIT, 2, &dev));
    EXPECT_INT_EQ(dev, 2);
    EXPECT_STATUS(ot_backend_select_device(b, OT_DEVSEL_EXPLICIT, 3, &dev), OT_ERR_OUT_OF_RANGE);
    float v[4] = {1, 2, 3, 4}, r[4];
    ot_buffer *hog = f32_buffer(ot_backend_device(b, 0), 4, v);
    ot_buffer *hog2 = f32_buffer(ot_backend_device(b, 2), 4, v);
    EXPECT_OK(ot_backend_select_device(b, OT_DEVSEL_MOST_FREE, -1, &dev));
    EXPECT_INT_EQ(dev, 1);
    EXPECT_OK(ot_backend_select_device(b, OT_DEVSEL_LEAST_LOADED, -1, &dev));
    EXPECT_INT_EQ(dev, 1);
    /* execute by id on device 1 */
    ot_device *d1 = ot_backend_device(b, 1);
    ot_buffer *in[2] = {f32_buffer(d1, 4, v), f32_buffer(d1, 4, v)};
    int att;
    EXPECT_OK(ot_backend_execute(b, "sgd", 1, in, 2, out, 2, NULL, &att));
    EXPECT_INT_EQ(att, 1);
    read_f32(out[0], r, 4);
    EXPECT_TRUE(r[0] == 0.5f && r[3] == 2.0f);
    ot_buffer_free(out[0]);
    ot_buffer_free(out[1]);
    /* a retryable failure (deadline) that wrote nothing is retried, then reported */
    ot_buffer *in2[2] = {f32_buffer(d1, 4, v), f32_buffer(d1, 4, v)};
    ot_run_options ro = ot_run_options_default();
    ro.deadline_ns = 1;
    EXPECT_STATUS(ot_backend_execute(b, "sgd", 1, in2, 2, out, 2, &ro, &att), OT_ERR_TIMEOUT);
    EXPECT_INT_EQ(att, 3);
    EXPECT_INT_EQ(sl.n, 2);
    EXPECT_STR_CONTAINS(ot_last_error(), "(after 3 attempts)");
    EXPECT_TRUE(!ot_buffer_donated(in2[0]));
    /* wrong shapes are never retried */
    ot_buffer *in3[2] = {in2[0], hog};
    EXPECT_STATUS(ot_backend_execute(b, "sgd", 1, in3, 2, out, 2, NULL, &att),
                  OT_ERR_INVALID_ARGUMENT);
    EXPECT_INT_EQ(att, 1);
    EXPECT_OK(ot_backend_unregister(b, "sgd"));
    EXPECT_STATUS(ot_backend_unregister(b, "sgd"), OT_ERR_NOT_FOUND);
    EXPECT_STATUS(ot_backend_execute(b, "sgd", 1, in2, 2, out, 2, NULL, NULL), OT_ERR_NOT_FOUND);
    for (int k = 0; k < 2; k++) {
        ot_buffer_free(in[k]);
        ot_buffer_free(in2[k]);
    }
    ot_buffer_free(hog);
    ot_buffer_free(hog2);
    ot_module_free(m);
    ot_backend_free(b);
    /* a preset's HBM as the capacity */
    bo = ot_backend_options_default();
    bo.devices = 2;
    bo.hbm_preset = "v5e";
    ASSERT_OK(ot_backend_create(&bo, &b));
    ot_mem_stats ms;
    ot_device_memory(ot_backend_device(b, 1), &ms);
    EXPECT_INT_EQ(ms.capacity, 16LL << 30);
    ot_backend_free(b);
    bo.hbm_preset = "v1";
    EXPECT_STATUS(ot_backend_create(&bo, &b), OT_ERR_NOT_FOUND);
}

/* ---- profiler ----------------------------------------------------------------------------------
 */

/* The first event's trace timestamp (us) of a profile holding one event at mono time t. */
static double first_ts(ot_profile *p) {
    char *js = NULL;
    double ts = -1;
    if (ot_profile_chrome_trace(p, &js) != OT_OK) return ts;
    json_error_t je;
    json_t *root = json_loads(js, 0, &je);
    json_t *evs = json_object_get(root, "traceEvents");
    for (size_t k = 0; k < json_array_size(evs); k++) {
        json_t *ev = json_array_get(evs, k);
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        if (ph && !strcmp(ph, "X")) {
            ts = json_number_value(json_object_get(ev, "ts"));
            break;
        }
    }
    json_decref(root);
    ot_free(js);
    return ts;
}

/* Traces use the clock module's published (NTP) offset unless an explicit one is set, so the
 * traces of processes that sync against one server share a timeline. */
static void test_profile_synced_offset(void) {
    ot_profile *p;
    ASSERT_OK(ot_profile_create(&p));
    uint64_t t = ot_now_ns();
    ASSERT_OK(ot_profile_record(p, "k", "kernel", 0, t, t + 1000, 0, 0));
    ot_clock_unpublish();
    double base = first_ts(p);
    ot_clock_publish_offset_ns(7000000000LL); /* this host is 7 s behind the server */
    double synced = first_ts(p);
    ot_clock_unpublish();
    EXPECT_NEAR(synced - base, 7.0e6, 1.0);
    ot_profile_set_time_offset(p, -2000); /* an explicit offset wins over the published one */
    ot_clock_publish_offset_ns(7000000000LL);
    EXPECT_NEAR(first_ts(p) - base, -2.0, 0.5); /* doubles of ~1.7e15 us resolve 0.25 us */
    ot_clock_unpublish();
    ot_profile_free(p);
}

/* A pod's step breakdown lands in the profiler's timeline beside its kernels. */
static void test_profile_pod_trace(void) {
    ot_pod_trace *tr;
    ASSERT_OK(ot_pod_trace_create(&tr));
    ASSERT_OK(ot_pod_trace_record(tr, 0, OT_PHASE_COMPUTE, "forward+backward", 1000, 5000));
    ASSERT_OK(ot_pod_trace_record(tr, 1, OT_PHASE_COMM, "all-reduce", 5000, 7000));
    ASSERT_OK(ot_pod_trace_record(tr, 1, OT_PHASE_OTHER, "checkpoint", 7000, 7500));
    ot_pod_trace_event e;
    ASSERT_OK(ot_pod_trace_event_get(tr, 1, &e));
    EXPECT_TRUE(e.device == 1 && e.phase == OT_PHASE_COMM && e.start_ns == 5000 &&
                e.end_ns == 7000);
    EXPECT_STR_EQ(e.name, "all-reduce");
    EXPECT_INT_EQ(ot_pod_trace_event_get(tr, 3, &e), OT_ERR_OUT_OF_RANGE);
    EXPECT_STR_EQ(ot_phase_name(OT_PHASE_OTHER), "other");
    ot_profile *p;
    ASSERT_OK(ot_profile_create(&p));
    ot_profile_set_time_offset(p, 0);
    ASSERT_OK(ot_profile_add_pod_trace(p, tr));
    EXPECT_INT_EQ(ot_profile_event_count(p), 3);
    char *js = NULL;
    ASSERT_OK(ot_profile_chrome_trace(p, &js));
    EXPECT_STR_CONTAINS(js, "\"all-reduce\"");
    EXPECT_STR_CONTAINS(js, "phase:comm");
    ot_free(js);
    EXPECT_INT_EQ(ot_profile_add_pod_trace(NULL, tr), OT_ERR_INVALID_ARGUMENT);
    ot_profile_free(p);
    ot_pod_trace_free(tr);
}

static void test_profile_trace(void) {
    ot_profile *p;
    ASSERT_OK(ot_profile_create(&p));
    ot_profile_set_time_offset(p, 5000);
    ot_module *m = parse(k_big);
    ASSERT_TRUE(m != NULL);
    ot_executable *e = NULL;
    ASSERT_OK(ot_profile_compile(p, m, NULL, &e));
    ot_device *d;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ot_device_set_profile(d, p);
    ot_shape s;
    ot_shape_make(&s, OT_F32, 1, (int64_t[]){262144});
    ot_buffer *in, *out[1];
    ASSERT_OK(ot_buffer_alloc(d, &s, &in));
    ot_run_options ro = ot_run_options_default();
    ro.profile = p;
    for (int k = 0; k < 2; k++) {
        EXPECT_OK(ot_device_execute(d, e, &in, 1, out, 1, &ro, NULL));
        ot_buffer_free(out[0]);
    }
    ot_buffer_free(in);
    int nk = ot_executable_kernel_count(e);
    EXPECT_TRUE(ot_profile_memory_event_count(p) >= 6); /* reserve + alloc/free of each buffer */
    char *js = NULL;
    ASSERT_OK(ot_profile_chrome_trace(p, &js));
    json_error_t je;
    json_t *root = json_loads(js, 0, &je);
    ASSERT_TRUE(root != NULL);
    json_t *evs = json_object_get(root, "traceEvents");
    ASSERT_TRUE(json_is_array(evs));
    int nx = 0, nc = 0, ncompile = 0, ncodegen = 0;
    for (size_t k = 0; k < json_array_size(evs); k++) {
        json_t *ev = json_array_get(evs, k);
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        EXPECT_TRUE(ph != NULL);
        EXPECT_TRUE(json_is_string(json_object_get(ev, "name")));
        EXPECT_TRUE(json_is_integer(json_object_get(ev, "pid")));
        EXPECT_TRUE(json_is_integer(json_object_get(ev, "tid")));
        if (!ph) continue;
        if (!strcmp(ph, "X")) {
            nx++;
            EXPECT_TRUE(json_is_number(json_object_get(ev, "ts")));
            EXPECT_TRUE(json_number_value(json_object_get(ev, "dur")) >= 0);
            json_t *a = json_object_get(ev, "args");
            EXPECT_TRUE(json_is_integer(json_object_get(a, "bytes")));
            const char *cat = json_string_value(json_object_get(ev, "cat"));
            if (cat && !strcmp(cat, "compile")) ncompile++;
            /* native code compiled by ot_profile_compile (none when the disk cache has it) */
            if (cat && !strcmp(cat, "codegen")) {
                ncodegen++;
                EXPECT_STR_CONTAINS(json_string_value(json_object_get(ev, "name")), "codegen unit");
            }
        } else if (!strcmp(ph, "C")) {
            nc++;
            EXPECT_TRUE(json_is_integer(json_object_get(json_object_get(ev, "args"), "in_use")));
        }
    }
    EXPECT_INT_EQ(ncompile, 1);
    /* one event per unit the C compiler built during the compile, none for cached units */
    ot_native_stats ns;
    ot_executable_native_stats(e, &ns);
    EXPECT_INT_EQ(ncodegen, ns.units_compiled);
    EXPECT_INT_EQ(ns.units, ns.units_compiled + ns.units_cached);
    EXPECT_INT_EQ(nx, 2 * nk + ot_executable_stat_count(e) + 1 + ncodegen);
    EXPECT_INT_EQ(nc, ot_profile_memory_event_count(p));
    json_decref(root);
    ot_free(js);
    /* per-kernel aggregates carry the compiled graph's figures */
    int found = 0;
    for (int k = 0; k < ot_profile_kernel_count(p); k++) {
        const ot_kernel_profile *kp = ot_profile_kernel(p, k);
        if (kp->device != 0) continue;
        EXPECT_INT_EQ(kp->calls, 2);
        found++;
    }
    EXPECT_INT_EQ(found, nk);
    ot_bench_limits lim;
    memset(&lim, 0, sizeof lim);
    lim.triad_gbs = 10;
    char *sum = NULL;
    ASSERT_OK(ot_profile_summary(p, &lim, 5, &sum));
    EXPECT_STR_CONTAINS(sum, "total: ");
    EXPECT_STR_CONTAINS(sum, "STREAM triad");
    EXPECT_STR_CONTAINS(sum, "compile: ");
    ot_free(sum);
    char path[] = "/tmp/ot_trace_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    EXPECT_OK(ot_profile_write_chrome_trace(p, path));
    root = json_load_file(path, 0, &je);
    EXPECT_TRUE(root != NULL);
    json_decref(root);
    unlink(path);
    ot_device_set_profile(d, NULL);
    ot_device_free(d);
    ot_executable_free(e);
    ot_module_free(m);
    ot_profile_free(p);
}

/* ---- random graphs -----------------------------------------------------------------------------
 */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A random module over f32[R,C] values: elementwise unary/binary ops, broadcasts of rows,
 * columns and scalars, and row/column sum/max reductions broadcast back. */
static void random_module(uint64_t seed, char *buf, size_t cap, int *nparams) {
    uint64_t s = seed * 2654435761u + 1;
    int R = 1 + (int)(rng_next(&s) % 7), C = 1 + (int)(rng_next(&s) % 9);
    int np = 1 + (int)(rng_next(&s) % 3);
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n,
                          "HloModule rnd%llu\nsum {\n  a = f32[] parameter(0)\n  b = f32[] "
                          "parameter(1)\n  ROOT r = f32[] add(a, b)\n}\nmax {\n  a = f32[] "
                          "parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] maximum(a, "
                          "b)\n}\nENTRY main {\n",
                          (unsigned long long)seed);
    int v = 0;
    for (int k = 0; k < np; k++, v++)
        n += (size_t)snprintf(buf + n, cap - n, "  v%d = f32[%d,%d] parameter(%d)\n", v, R, C, k);
    static const char *un[] = {"negate", "abs", "exponential", "tanh", "sine", "floor"};
    static const char *bin[] = {"add", "multiply", "subtract", "maximum", "minimum", "divide"};
    int nops = 3 + (int)(rng_next(&s) % 12);
    for (int k = 0; k < nops; k++, v++) {
        int kind = (int)(rng_next(&s) % 6);
        int a = (int)(rng_next(&s) % (uint64_t)v), b = (int)(rng_next(&s) % (uint64_t)v);
        if (kind == 0) {
            n += (size_t)snprintf(buf + n, cap - n, "  v%d = f32[%d,%d] %s(v%d)\n", v, R, C,
                                  un[rng_next(&s) % 6], a);
        } else if (kind <= 2) {
            n += (size_t)snprintf(buf + n, cap - n, "  v%d = f32[%d,%d] %s(v%d, v%d)\n", v, R, C,
                                  bin[rng_next(&s) % 6], a, b);
        } else if (kind == 3) {
            n += (size_t)snprintf(buf + n, cap - n,
                                  "  c%d = f32[] constant(%d.5)\n  v%d = f32[%d,%d] "
                                  "broadcast(c%d), dimensions={}\n",
                                  v, (int)(rng_next(&s) % 5) - 2, v, R, C, v);
        } else {
            int dim = (int)(rng_next(&s) % 2);
            const char *red = rng_next(&s) % 2 ? "sum" : "max";
            n +=
                (size_t)snprintf(buf + n, cap - n,
                                 "  z%d = f32[] constant(%s)\n  r%d = f32[%d] reduce(v%d, z%d), "
                                 "dimensions={%d}, to_apply=%s\n  v%d = f32[%d,%d] broadcast(r%d), "
                                 "dimensions={%d}\n",
                                 v, red[0] == 's' ? "0" : "-inf", v, dim ? R : C, a, v, dim, red, v,
                                 R, C, v, dim ? 0 : 1);
        }
    }
    n += (size_t)snprintf(buf + n, cap - n,
                          "  ROOT t = (f32[%d,%d], f32[%d,%d]) tuple(v%d, v%d)\n}\n", R, C, R, C,
                          v - 1, v / 2);
    *nparams = np;
}

static void test_random_graphs(void) {
    ot_device *d;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    int checked = 0;
    for (uint64_t seed = 1; seed <= 150; seed++) {
        char text[16384];
        int np;
        random_module(seed, text, sizeof text, &np);
        ot_module *m = parse(text);
        if (!m) {
            ot_test_failures_++;
            continue;
        }
        const ot_computation *entry = ot_module_entry(m);
        ot_value args[3];
        ot_buffer *in[3];
        uint64_t s = seed;
        for (int k = 0; k < np; k++) {
            ot_value_alloc_array(&args[k], &entry->params[k]->shape.array);
            float *f = args[k].array.data;
            for (int64_t j = 0; j < (int64_t)(args[k].array.nbytes / 4); j++)
                f[j] = (float)((int64_t)(rng_next(&s) % 2001) - 1000) / 250.0f;
            ot_buffer_from_host(d, &args[k].array, &in[k]);
        }
        ot_value ref;
        EXPECT_OK(ot_evaluate(m, args, np, NULL, &ref));
        for (int level = 0; level <= 2; level += 2) {
            ot_compile_options o = ot_compile_options_default();
            o.opt_level = level;
            ot_executable *e = NULL;
            EXPECT_OK(ot_compile(m, &o, &e));
            if (!e) continue;
            ot_buffer *out[2] = {0};
            EXPECT_OK(ot_device_execute(d, e, in, np, out, 2, NULL, NULL));
            for (int j = 0; j < 2 && out[j]; j++) {
                ot_tensor t;
                EXPECT_OK(ot_buffer_to_host(out[j], &t));
                const ot_value *rl = ot_value_leaf(&ref, j);
                bool same = rl && rl->array.nbytes == t.nbytes &&
                            memcmp(rl->array.data, t.data, t.nbytes) == 0;
                if (!same)
                    fprintf(stderr, "seed %llu -O%d output %d differs\n%s",
                            (unsigned long long)seed, level, j, text);
                EXPECT_TRUE(same);
                checked++;
                ot_tensor_release(&t);
                ot_buffer_free(out[j]);
            }
            ot_executable_free(e);
        }
        ot_value_release(&ref);
        for (int k = 0; k < np; k++) {
            ot_value_release(&args[k]);
            ot_buffer_free(in[k]);
        }
        ot_module_free(m);
    }
    EXPECT_INT_EQ(checked, 600);
    ot_mem_stats ms;
    ot_device_memory(d, &ms);
    EXPECT_INT_EQ(ms.in_use, 0);
    ot_device_free(d);
}

/* A device over a caller's vtable: a counting wrapper around a host device. */
typedef struct counting {
    ot_device *inner;
    int allocs, executes;
} counting;

static ot_status cnt_alloc(void *ctx, int64_t n, void **out) {
    counting *c = ctx;
    c->allocs++;
    return ot_mem_pool_alloc(ot_device_pool(c->inner), n, out);
}
static ot_status cnt_free(void *ctx, void *p) {
    return ot_mem_pool_release(ot_device_pool(((counting *)ctx)->inner), p);
}
static ot_status cnt_copy(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    memcpy(dst, src, n);
    return OT_OK;
}
static ot_status cnt_execute(void *ctx, ot_device *dev, const ot_executable *exe,
                             void *const *params, void *const *outs, const ot_run_options *o,
                             ot_run_result *res) {
    counting *c = ctx;
    c->executes++;
    void *arena = NULL;
    int64_t an = ot_executable_arena_size(exe);
    if (an) OT_CHECK(ot_mem_pool_alloc(ot_device_pool(c->inner), an, &arena));
    ot_status s = ot_execute_on_host(exe, arena, params, outs, o, ot_device_index(dev), res);
    ot_mem_pool_release(ot_device_pool(c->inner), arena);
    return s;
}
static void cnt_memory(void *ctx, ot_mem_stats *out) {
    ot_device_memory(((counting *)ctx)->inner, out);
}

static void test_custom_device(void) {
    static const ot_device_vtable vt = {
        .kind = "counting",
        .alloc = cnt_alloc,
        .free = cnt_free,
        .copy_to_device = cnt_copy,
        .copy_to_host = cnt_copy,
        .copy_on_device = cnt_copy,
        .execute = cnt_execute,
        .memory = cnt_memory,
    };
    counting c = {NULL, 0, 0};
    ASSERT_OK(ot_host_device_create(9, 0, &c.inner));
    ot_device *d;
    ASSERT_OK(ot_device_create(&vt, &c, 5, &d));
    EXPECT_STR_EQ(ot_device_kind(d), "counting");
    EXPECT_INT_EQ(ot_device_index(d), 5);
    EXPECT_OK(ot_device_synchronize(d)); /* NULL slot: nothing pending */
    EXPECT_INT_EQ(ot_device_trim(d), 0);
    ot_executable *e = compile_text(k_sgd, 2);
    ASSERT_TRUE(e != NULL);
    float v[4] = {1, 2, 3, 4}, r[4];
    ot_buffer *in[2] = {f32_buffer(d, 4, v), f32_buffer(d, 4, v)}, *out[2];
    EXPECT_OK(ot_device_execute(d, e, in, 2, out, 2, NULL, NULL));
    read_f32(out[0], r, 4);
    EXPECT_TRUE(r[0] == 0.5f && r[3] == 2.0f);
    EXPECT_INT_EQ(c.executes, 1);
    EXPECT_INT_EQ(c.allocs, 3); /* two inputs, one non-donated output */
    for (int k = 0; k < 2; k++) {
        ot_buffer_free(in[k]);
        ot_buffer_free(out[k]);
    }
    ot_device_free(d); /* no destroy slot: the context stays the caller's */
    ot_mem_stats s;
    ot_device_memory(c.inner, &s);
    EXPECT_INT_EQ(s.in_use, 0);
    ot_device_free(c.inner);
    ot_executable_free(e);
    ot_device_vtable bad = vt;
    bad.execute = NULL;
    EXPECT_STATUS(ot_device_create(&bad, &c, 0, &d), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(d == NULL);
}

/* A device built from memory + kernel launch only (no execute): the generic execution loop
 * runs it, and its launch counts the kernels and delegates to the host kernels. Its results,
 * statistics and profile kinds must equal the host device's, bit for bit. */
static const char *k_mix = "HloModule mix, input_output_alias={ {0}: (0, {}, may-alias) }\n"
                           "add_f32 {\n"
                           "  a = f32[] parameter(0)\n"
                           "  b = f32[] parameter(1)\n"
                           "  ROOT s = f32[] add(a, b)\n"
                           "}\n"
                           "ENTRY main {\n"
                           "  p = f32[16,8] parameter(0)\n"
                           "  w = f32[8,4] parameter(1)\n"
                           "  d = f32[16,4] dot(p, w), lhs_contracting_dims={1}, "
                           "rhs_contracting_dims={0}\n"
                           "  t = f32[4,16] transpose(d), dimensions={1,0}\n"
                           "  z = f32[] constant(0)\n"
                           "  r = f32[4] reduce(t, z), dimensions={1}, to_apply=add_f32\n"
                           "  v = f32[16,8] reverse(p), dimensions={0}\n"
                           "  e = f32[16,8] exponential(v)\n"
                           "  q = f32[16,8] multiply(e, p)\n"
                           "  ROOT out = (f32[16,8], f32[4]) tuple(q, r)\n"
                           "}\n";

typedef struct launching {
    ot_device *inner; /* memory comes from this host device's pool */
    int allocs, launches, fail_at;
} launching;

static ot_status lch_alloc(void *ctx, int64_t n, void **out) {
    launching *c = ctx;
    c->allocs++;
    return ot_mem_pool_alloc(ot_device_pool(c->inner), n, out);
}
static ot_status lch_free(void *ctx, void *p) {
    return ot_mem_pool_release(ot_device_pool(((launching *)ctx)->inner), p);
}
static void lch_memory(void *ctx, ot_mem_stats *out) {
    ot_device_memory(((launching *)ctx)->inner, out);
}
static ot_status lch_launch(void *ctx, ot_launch *run, const ot_executable *exe, int k,
                            void *const *in, void *const *out) {
    launching *c = ctx;
    if (k != c->launches)
        return ot_error(OT_ERR_INTERNAL, "launch: kernel %d out of order (%d)", k, c->launches);
    if (c->launches++ == c->fail_at)
        return ot_error(OT_ERR_PEER_FAILED, "launch: device lost at kernel %d", k);
    return ot_launch_host(run, exe, k, in, out);
}
static ot_status lch_execute(void *ctx, ot_device *dev, const ot_executable *exe,
                             void *const *params, void *const *outs, const ot_run_options *o,
                             ot_run_result *res) {
    (void)ctx, (void)dev, (void)exe, (void)params, (void)outs, (void)o, (void)res;
    return ot_error(OT_ERR_UNIMPLEMENTED, "whole-executable execute called");
}

/* Runs exe on d with p, w (fresh buffers, p donated) into *q, *r; the result and profile kinds. */
static ot_status run_mix(ot_device *d, const ot_executable *e, const float *pv, const float *wv,
                         float *q, float *r, ot_run_result *rr, ot_profile *prof) {
    ot_shape ps, ws;
    ot_shape_make(&ps, OT_F32, 2, (int64_t[]){16, 8});
    ot_shape_make(&ws, OT_F32, 2, (int64_t[]){8, 4});
    ot_tensor pt, wt;
    ot_tensor_borrow(&pt, &ps, (void *)pv);
    ot_tensor_borrow(&wt, &ws, (void *)wv);
    ot_buffer *in[2] = {NULL, NULL}, *out[2] = {NULL, NULL};
    ot_run_options ro = ot_run_options_default();
    ro.profile = prof;
    ot_status st = ot_buffer_from_host(d, &pt, &in[0]);
    if (st == OT_OK) st = ot_buffer_from_host(d, &wt, &in[1]);
    if (st == OT_OK) st = ot_device_execute(d, e, in, 2, out, 2, &ro, rr);
    if (st == OT_OK) {
        read_f32(out[0], q, 128);
        read_f32(out[1], r, 4);
    }
    for (int k = 0; k < 2; k++) {
        ot_buffer_free(in[k]);
        ot_buffer_free(out[k]);
    }
    return st;
}

static void test_launch_device(void) {
    static const ot_device_vtable vt = {
        .kind = "launching",
        .alloc = lch_alloc,
        .free = lch_free,
        .copy_to_device = cnt_copy,
        .copy_to_host = cnt_copy,
        .copy_on_device = cnt_copy,
        .launch = lch_launch,
        .memory = lch_memory,
    };
    float pv[128], wv[32];
    for (int k = 0; k < 128; k++) pv[k] = (float)((k * 37) % 29 - 14) / 8.0f;
    for (int k = 0; k < 32; k++) wv[k] = (float)((k * 11) % 13 - 6) / 4.0f;
    /* the two runs are compared kernel by kernel: no tier-up to native code between them */
    setenv("OPTITPU_CODEGEN_TIER_UP", "0", 1);
    for (int level = 0; level <= 2; level += 2) {
        ot_executable *e = compile_text(k_mix, level);
        ASSERT_TRUE(e != NULL);
        int nk = ot_executable_kernel_count(e);
        ot_device *host;
        ASSERT_OK(ot_host_device_create(0, 0, &host));
        launching c = {NULL, 0, 0, -1};
        ASSERT_OK(ot_host_device_create(1, 0, &c.inner));
        ot_device *d;
        ASSERT_OK(ot_device_create(&vt, &c, 3, &d));
        EXPECT_STR_EQ(ot_device_kind(d), "launching");
        ot_profile *ph, *pd;
        ASSERT_OK(ot_profile_create(&ph));
        ASSERT_OK(ot_profile_create(&pd));
        float qh[128], rh[4], qd[128], rd[4];
        ot_run_result hr, dr;
        EXPECT_OK(run_mix(host, e, pv, wv, qh, rh, &hr, ph));
        EXPECT_OK(run_mix(d, e, pv, wv, qd, rd, &dr, pd));
        EXPECT_TRUE(memcmp(qh, qd, sizeof qh) == 0 && memcmp(rh, rd, sizeof rh) == 0);
        EXPECT_TRUE(rh[0] != 0.0f); /* the dot, transpose and reduce did run */
        EXPECT_INT_EQ(c.launches, nk);
        EXPECT_INT_EQ(dr.kernels_run, nk);
        EXPECT_INT_EQ(hr.kernels_run, nk);
        EXPECT_INT_EQ(dr.fast_kernels_run, hr.fast_kernels_run);
        EXPECT_TRUE(dr.fast_kernels_run > 0); /* dot and reduce at least */
        EXPECT_TRUE(dr.donated_written && hr.donated_written);
        /* two parameters, one output not donated, and the arena from the device's alloc */
        EXPECT_INT_EQ(c.allocs, 3 + (ot_executable_arena_size(e) > 0));
        EXPECT_INT_EQ(ot_profile_kernel_count(pd), ot_profile_kernel_count(ph));
        for (int k = 0; k < ot_profile_kernel_count(ph); k++)
            EXPECT_STR_EQ(ot_profile_kernel(pd, k)->kind, ot_profile_kernel(ph, k)->kind);
        /* a launch failing midway: the run stops with its error, outputs freed */
        c.launches = 0;
        c.fail_at = nk / 2;
        ot_run_result fr;
        EXPECT_STATUS(run_mix(d, e, pv, wv, qd, rd, &fr, NULL), OT_ERR_PEER_FAILED);
        EXPECT_STR_CONTAINS(ot_last_error(), "device lost");
        EXPECT_INT_EQ(c.launches, nk / 2 + 1);
        ot_mem_stats ms;
        ot_device_memory(d, &ms);
        EXPECT_INT_EQ(ms.in_use, 0);
        /* execute set beside launch: the device runs the executable as one unit */
        ot_device_vtable whole = vt;
        whole.execute = lch_execute;
        ot_device *d2;
        ASSERT_OK(ot_device_create(&whole, &c, 4, &d2));
        c.launches = 0;
        c.fail_at = -1;
        EXPECT_STATUS(run_mix(d2, e, pv, wv, qd, rd, &fr, NULL), OT_ERR_UNIMPLEMENTED);
        EXPECT_STR_CONTAINS(ot_last_error(), "whole-executable");
        EXPECT_INT_EQ(c.launches, 0);
        ot_device_free(d2);
        ot_device_free(d);
        ot_device_free(c.inner);
        ot_device_free(host);
        ot_profile_free(ph);
        ot_profile_free(pd);
        ot_executable_free(e);
    }
    unsetenv("OPTITPU_CODEGEN_TIER_UP");
    ot_device_vtable bad = vt;
    bad.launch = NULL;
    ot_device *d = NULL;
    EXPECT_STATUS(ot_device_create(&bad, NULL, 0, &d), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(d == NULL);
}

static void test_backend_fault_injection(void) {
    ot_module *m = parse(k_sgd);
    ASSERT_TRUE(m != NULL);
    bool done = false;
    for (int n = 1; n < 2000 && !done; n++) {
        int64_t live = ot_alloc_live();
        ot_alloc_fail_after(n);
        ot_backend_options bo = ot_backend_options_default();
        bo.devices = 2;
        ot_backend *b = NULL;
        ot_buffer *in[2] = {0}, *out[2] = {0};
        ot_status s = ot_backend_create(&bo, &b);
        if (s == OT_OK) s = ot_backend_register_module(b, "sgd", m, NULL);
        float v[4] = {1, 2, 3, 4};
        ot_shape sh;
        ot_shape_make(&sh, OT_F32, 1, (int64_t[]){4});
        ot_tensor t;
        ot_tensor_borrow(&t, &sh, v);
        if (s == OT_OK) s = ot_buffer_from_host(ot_backend_device(b, 1), &t, &in[0]);
        if (s == OT_OK) s = ot_buffer_from_host(ot_backend_device(b, 1), &t, &in[1]);
        if (s == OT_OK) s = ot_backend_execute(b, "sgd", 1, in, 2, out, 2, NULL, NULL);
        ot_alloc_fail_after(0);
        done = s == OT_OK;
        for (int k = 0; k < 2; k++) {
            ot_buffer_free(in[k]);
            ot_buffer_free(out[k]);
        }
        ot_backend_free(b);
        EXPECT_INT_EQ(ot_alloc_live(), live);
    }
    EXPECT_TRUE(done);
    ot_module_free(m);
}

static void test_device_count_env(void) {
    setenv("OPTITPU_DEVICES", "6", 1);
    EXPECT_INT_EQ(ot_device_count_from_env(), 6);
    setenv("OPTITPU_DEVICES", "0", 1);
    EXPECT_INT_EQ(ot_device_count_from_env(), 1);
    setenv("OPTITPU_DEVICES", "x", 1);
    EXPECT_INT_EQ(ot_device_count_from_env(), 1);
    unsetenv("OPTITPU_DEVICES");
    EXPECT_INT_EQ(ot_device_count_from_env(), 1);
}

/* A copy of a tuple (HLO copies it leaf by leaf) runs at every level, as the evaluator gives it:
 * its kernel once failed with "expected an array result". */
static void test_copy_of_tuple(void) {
    static const char *text = "HloModule tc\n"
                              "ENTRY main {\n"
                              "  p0 = f32[3] parameter(0)\n"
                              "  n = f32[3] negate(p0)\n"
                              "  i = (f32[3], f32[3]) tuple(n, p0)\n"
                              "  t = (f32[3], (f32[3], f32[3])) tuple(p0, i)\n"
                              "  c = (f32[3], (f32[3], f32[3])) copy(t)\n"
                              "  g = (f32[3], f32[3]) get-tuple-element(c), index=1\n"
                              "  a = f32[3] get-tuple-element(g), index=0\n"
                              "  ROOT r = (f32[3], (f32[3], f32[3]), f32[3]) tuple(a, g, n)\n"
                              "}\n";
    static const float x[3] = {1.5f, -2.0f, 0.25f};
    ot_module *m = parse(text);
    ASSERT_TRUE(m != NULL);
    ot_value arg, ref = ot_value_empty();
    ot_shape s3;
    ot_shape_make(&s3, OT_F32, 1, (int64_t[]){3});
    EXPECT_OK(ot_value_alloc_array(&arg, &s3));
    memcpy(arg.array.data, x, sizeof x);
    EXPECT_OK(ot_evaluate(m, &arg, 1, NULL, &ref));
    EXPECT_INT_EQ(ot_value_leaf_count(&ref), 4);
    ot_device *d = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    for (int level = 0; level <= 2 && ot_value_leaf_count(&ref) == 4; level++) {
        ot_executable *e = compile_text(text, level);
        EXPECT_TRUE(e != NULL);
        ot_buffer *in = f32_buffer(d, 3, x), *out[4] = {0};
        ot_run_options ro = ot_run_options_default();
        EXPECT_OK(e ? ot_device_execute(d, e, &in, 1, out, 4, &ro, NULL) : OT_ERR_INTERNAL);
        for (int j = 0; j < 4; j++) {
            float got[3] = {0};
            if (out[j]) read_f32(out[j], got, 3);
            EXPECT_TRUE(out[j] && !memcmp(got, ot_value_leaf(&ref, j)->array.data, sizeof got));
            ot_buffer_free(out[j]);
        }
        ot_buffer_free(in);
        ot_executable_free(e);
    }
    ot_device_free(d);
    ot_value_release(&ref);
    ot_value_release(&arg);
    ot_module_free(m);
}

int main(int argc, char **argv) {
    static const ot_test_case tests[] = {
        OT_TEST(test_pool_classes_and_stats),
        OT_TEST(test_pool_limit),
        OT_TEST(test_pool_fault_injection),
        OT_TEST(test_execute_donation),
        OT_TEST(test_buffer_view_host),
        OT_TEST(test_execute_bad_input),
        OT_TEST(test_execute_memory_limit),
        OT_TEST(test_execute_fault_injection),
        OT_TEST(test_deadline_and_cancel),
        OT_TEST(test_deadline_inside_while),
        OT_TEST(test_collectives_four_devices),
        OT_TEST(test_retry_policy),
        OT_TEST(test_backend),
        OT_TEST(test_profile_trace),
        OT_TEST(test_profile_pod_trace),
        OT_TEST(test_profile_synced_offset),
        OT_TEST(test_random_graphs),
        OT_TEST(test_copy_of_tuple),
        OT_TEST(test_device_count_env),
        OT_TEST(test_custom_device),
        OT_TEST(test_launch_device),
        OT_TEST(test_backend_fault_injection),
    };
    return ot_test_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
