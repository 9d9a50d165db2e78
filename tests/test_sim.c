/* The training-step simulator: the ring all-reduce formula and nccl-tests' bus bandwidth through
 * the pod's cost model, roofline compute, memory and its errors, bucket overlap, goodput. */
#include <math.h>
#include <string.h>

#include "optitpu/collectives.h"
#include "optitpu/compiler.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "optitpu/sim.h"
#include "ot_test.h"

static ot_status no_sendrecv(void *ctx, int to, const void *sbuf, size_t sbytes, int from,
                             void *rbuf, size_t rbytes, uint64_t deadline_ns) {
    (void)ctx, (void)to, (void)sbuf, (void)sbytes, (void)from, (void)rbuf, (void)rbytes;
    (void)deadline_ns;
    return OT_ERR_FAILED_PRECONDITION;
}
static const ot_comm_vtable links_vt = {.name = "test-links", .sendrecv = no_sendrecv};

static ot_topology *ring_topo(int n, double gbs, double lat_us) {
    ot_topology_desc d = ot_topology_desc_default();
    d.ndims = 1;
    d.dims[0] = n;
    d.wrap[0] = true;
    d.link_gbytes_per_s = gbs;
    d.link_latency_us = lat_us;
    ot_topology *t = NULL;
    if (ot_topology_create(&d, &t) != OT_OK) return NULL;
    return t;
}

static ot_executable *compile_hlo(const char *text) {
    ot_module *m = NULL;
    ot_executable *e = NULL;
    ot_compile_options co = ot_compile_options_default();
    co.native = OT_NATIVE_OFF;
    if (ot_hlo_parse(text, strlen(text), NULL, &m) == OT_OK) (void)ot_compile(m, &co, &e);
    ot_module_free(m);
    return e;
}

static ot_executable *compile_hlo_native(const char *text) {
    ot_module *m = NULL;
    ot_executable *e = NULL;
    ot_compile_options co = ot_compile_options_default();
    co.native = OT_NATIVE_ON;
    if (ot_hlo_parse(text, strlen(text), NULL, &m) == OT_OK) (void)ot_compile(m, &co, &e);
    ot_module_free(m);
    return e;
}

static const char dot_hlo[] =
    "HloModule d\n"
    "ENTRY main {\n"
    "  a = f32[64,128] parameter(0)\n"
    "  b = f32[128,32] parameter(1)\n"
    "  ROOT d = f32[64,32] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "}\n";

/* The pod's ring all-reduce is 2(n-1)/n * S/B + 2(n-1) alpha, and at alpha 0 nccl-tests' bus
 * bandwidth of that time is the link bandwidth (busbw = algbw * 2(n-1)/n); reduce-scatter and
 * all-gather rings likewise with factor (n-1)/n. */
static void test_ring_formula_and_busbw(void) {
    const int ns[] = {2, 3, 4, 8, 16, 64, 1000};
    const double sizes[] = {4096, 1 << 20, 64 << 20};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        int n = ns[i];
        for (int lat = 0; lat < 2; lat++) {
            ot_topology *t = ring_topo(n, 50.0, lat ? 1.5 : 0.0);
            ASSERT_TRUE(t != NULL);
            ot_comm *c = NULL;
            ASSERT_OK(ot_comm_create(&links_vt, NULL, 0, n, &c));
            ASSERT_OK(ot_comm_set_topology(c, t));
            for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
                double S = sizes[k];
                double model =
                    ot_coll_cost_us(c, OT_COLL_ALLREDUCE, OT_ALGO_RING, (size_t)S) * 1e-6;
                double want = 2.0 * (n - 1) / n * S / 50e9 + 2.0 * (n - 1) * (lat ? 1.5e-6 : 0);
                EXPECT_NEAR(model / want, 1.0, 1e-9);
                EXPECT_NEAR(ot_sim_ring_allreduce_s(n, S, 50e9, lat ? 1.5e-6 : 0) / want, 1.0,
                            1e-12);
                if (lat) continue;
                /* nccl-tests: busbw of an all-reduce at the ring's time is the link bandwidth */
                size_t count = (size_t)S / 4;
                double algbw = ot_coll_algbw_gbs(OT_COLL_ALLREDUCE, n, count, OT_F32, model);
                EXPECT_NEAR(algbw * ot_coll_bus_factor(OT_COLL_ALLREDUCE, n), 50.0, 1e-6);
                /* reduce-scatter / all-gather rings: (n-1) steps of one block each */
                size_t blk = count / (size_t)n;
                if (blk == 0) continue;
                for (int kind = 0; kind < 2; kind++) {
                    ot_coll_kind kk = kind ? OT_COLL_ALLGATHER : OT_COLL_REDUCE_SCATTER;
                    double tk = ot_coll_cost_us(c, kk, OT_ALGO_RING, blk * 4) * 1e-6;
                    EXPECT_NEAR(tk / ((n - 1) * (double)blk * 4 / 50e9), 1.0, 1e-9);
                    double bw =
                        ot_coll_algbw_gbs(kk, n, blk, OT_F32, tk) * ot_coll_bus_factor(kk, n);
                    EXPECT_NEAR(bw, 50.0, 1e-6);
                }
            }
            ot_comm_free(c);
            ot_topology_free(t);
        }
    }
    EXPECT_NEAR(ot_coll_bus_factor(OT_COLL_ALLREDUCE, 8), 1.75, 1e-12);
    EXPECT_NEAR(ot_coll_bus_factor(OT_COLL_ALLGATHER, 8), 0.875, 1e-12);
    EXPECT_NEAR(ot_sim_ring_allreduce_s(1, 1e9, 1e9, 1), 0.0, 0);
}

/* The simulator's exposed communication without overlap is the pod model's ring all-reduce. */
static void test_sim_uses_pod_model(void) {
    ot_executable *e = compile_hlo(dot_hlo);
    ASSERT_TRUE(e != NULL);
    ot_sim_device d;
    ASSERT_OK(ot_sim_device_preset("v5p", &d));
    for (int n = 2; n <= 16; n *= 2) {
        ot_topology *t = ring_topo(n, 25.0, 2.0);
        ot_sim_config c = ot_sim_config_default();
        c.device = d;
        c.topology = t;
        c.global_batch = 64 * n;
        c.step = e;
        c.step_batch = 64;
        c.param_bytes = 8 << 20;
        c.overlap = false;
        c.algo = OT_ALGO_RING;
        c.rings = 1;
        ot_sim_result r;
        ASSERT_OK(ot_sim_run(&c, &r));
        EXPECT_INT_EQ(r.chips, n);
        EXPECT_INT_EQ(r.buckets, 1);
        EXPECT_STR_EQ(r.algo, "ring");
        double want = ot_sim_ring_allreduce_s(n, 8 << 20, 25e9, 2e-6);
        EXPECT_NEAR(r.exposed_comm_s / want, 1.0, 1e-9);
        EXPECT_NEAR(r.comm_s / want, 1.0, 1e-9);
        EXPECT_NEAR(r.step_s, r.compute_s + r.exposed_comm_s + r.optimizer_s, 1e-15);
        /* by default a ring runs both ways: half the bytes each way, at once */
        c.rings = 0;
        ASSERT_OK(ot_sim_run(&c, &r));
        EXPECT_INT_EQ(r.rings, 2);
        EXPECT_NEAR(r.comm_s / ot_sim_ring_allreduce_s(n, 4 << 20, 25e9, 2e-6), 1.0, 1e-9);
        c.rings = 1;
        /* overlapped: buckets of 1 MiB start during the backward pass; only a tail shows */
        c.overlap = true;
        c.bucket_bytes = 1 << 20;
        c.backward_fraction = 1.0;
        ot_sim_result o;
        ASSERT_OK(ot_sim_run(&c, &o));
        EXPECT_INT_EQ(o.buckets, 8);
        EXPECT_TRUE(o.exposed_comm_s <= o.comm_s + 1e-15);
        EXPECT_TRUE(o.exposed_comm_s >= o.comm_s / 8 - 1e-12); /* the last bucket never hides */
        ot_topology_free(t);
    }
    ot_executable_free(e);
}

static void test_presets(void) {
    ot_sim_device d;
    ASSERT_OK(ot_sim_device_preset("v4", &d));
    EXPECT_NEAR(d.peak_flops_bf16, 275e12, 1);
    EXPECT_NEAR(d.hbm_bytes_per_s, 1200e9, 1);
    EXPECT_NEAR(d.hbm_capacity_bytes, 32.0 * 1024 * 1024 * 1024, 1e3);
    ASSERT_OK(ot_sim_device_preset("v5e-16x16", &d));
    EXPECT_STR_EQ(d.name, "v5e");
    EXPECT_NEAR(d.peak_flops_bf16, 197e12, 1);
    EXPECT_NEAR(d.peak_flops_int8, 393e12, 1);
    EXPECT_NEAR(d.hbm_bytes_per_s, 819e9, 1);
    ASSERT_OK(ot_sim_device_preset("v5p", &d));
    EXPECT_NEAR(d.peak_flops_bf16, 459e12, 1);
    EXPECT_NEAR(d.hbm_bytes_per_s, 2765e9, 1);
    EXPECT_NEAR(d.hbm_capacity_bytes, 95e9, 1);
    EXPECT_STATUS(ot_sim_device_preset("v9", &d), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "v4, v5e, v5p");
    EXPECT_STATUS(ot_sim_device_preset("v5", &d), OT_ERR_INVALID_ARGUMENT);
}

/* One dot kernel: 2*64*128*32 FLOPs and (64*128 + 128*32 + 64*32) * 4 bytes. */
static void test_roofline(void) {
    ot_executable *e = compile_hlo(dot_hlo);
    ASSERT_TRUE(e != NULL);
    ASSERT_TRUE(ot_executable_kernel_count(e) == 1);
    const ot_kernel *k = ot_executable_kernel(e, 0);
    EXPECT_INT_EQ(k->flops, 2 * 64 * 128 * 32);
    EXPECT_INT_EQ(k->bytes_read + k->bytes_written, (64 * 128 + 128 * 32 + 64 * 32) * 4);
    ot_sim_device d;
    memset(&d, 0, sizeof d);
    d.peak_flops_f32 = 1e9, d.peak_flops_bf16 = 1e12, d.hbm_bytes_per_s = 1e9;
    d.launch_s = 1e-6;
    double f;
    EXPECT_NEAR(ot_sim_compute_s(&d, e, 1.0, 1, &f), 524288e-9 + 1e-6, 1e-12); /* FLOP-bound */
    EXPECT_NEAR(f, 524288, 0);
    d.peak_flops_f32 = 1e12;
    EXPECT_NEAR(ot_sim_compute_s(&d, e, 1.0, 1, NULL), 57344e-9 + 1e-6, 1e-12); /* bytes */
    EXPECT_NEAR(ot_sim_compute_s(&d, e, 2.0, 1, NULL), 2 * 57344e-9 + 1e-6, 1e-12);
    /* shared host devices: 4 device threads that each get half a core run at half the rates,
     * launches included; a TPU ignores the count */
    EXPECT_NEAR(ot_sim_compute_s(&d, e, 1.0, 4, NULL), 57344e-9 + 1e-6, 1e-12);
    d.shared_host = true, d.cores = 2;
    for (int j = 1; j <= 8; j++) d.core_share[j] = j <= 2 ? 1.0 : 2.0 / j;
    EXPECT_NEAR(ot_sim_compute_s(&d, e, 1.0, 4, NULL), 2 * 57344e-9 + 2e-6, 1e-12);
    EXPECT_NEAR(ot_sim_compute_s(&d, e, 1.0, 2, NULL), 57344e-9 + 1e-6, 1e-12);
    EXPECT_NEAR(ot_sim_compute_s(&d, e, 1.0, 16, NULL), 8 * 57344e-9 + 8e-6, 1e-12);
    ot_executable_free(e);
}

static void test_errors_and_memory(void) {
    ot_executable *e = compile_hlo(dot_hlo);
    ASSERT_TRUE(e != NULL);
    ot_sim_device d;
    ASSERT_OK(ot_sim_device_preset("v5e", &d));
    ot_topology *t = NULL;
    ASSERT_OK(ot_topology_preset("v5e-2x4", &t));
    ot_sim_config c = ot_sim_config_default();
    c.device = d;
    c.topology = t;
    c.global_batch = 100;
    c.step = e;
    c.step_batch = 64;
    c.param_bytes = 1 << 20;
    ot_sim_result r;
    EXPECT_STATUS(ot_sim_run(&c, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(),
                        "batch 100 is not divisible by the data-parallel degree 8");
    EXPECT_STR_CONTAINS(ot_last_error(), "100 = 8 x 12 + 4");
    c.global_batch = 512;
    c.chips = 4;
    EXPECT_STATUS(ot_sim_run(&c, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "4 chips but topology v5e-2x4 has 8");
    c.chips = 0;
    c.algo = OT_ALGO_DIRECT; /* shared memory only */
    EXPECT_STATUS(ot_sim_run(&c, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "direct does not implement allreduce on 8 chips");
    c.algo = OT_ALGO_AUTO;
    c.topology = NULL; /* a TPU without links */
    EXPECT_STATUS(ot_sim_run(&c, &r), OT_ERR_INVALID_ARGUMENT);
    c.topology = t;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_TRUE(r.fits);
    EXPECT_NEAR(r.mem_params, 1 << 20, 0);
    EXPECT_NEAR(r.mem_optimizer, 2 << 20, 0);
    EXPECT_NEAR(r.mem_grads, 2 << 20, 0); /* gradients + one fusion buffer */
    /* 4 GiB of parameters with Adam: 4 + 8 + 8 > 16 GB of v5e HBM */
    c.param_bytes = INT64_C(4) << 30;
    EXPECT_STATUS(ot_sim_run(&c, &r), OT_ERR_OUT_OF_MEMORY);
    EXPECT_STR_CONTAINS(ot_last_error(), "does not fit on 8 chips");
    EXPECT_STR_CONTAINS(ot_last_error(), "> 14.901 GiB of HBM");
    EXPECT_STR_CONTAINS(ot_last_error(), "parameters 4.000");
    EXPECT_TRUE(!r.fits);
    EXPECT_TRUE(r.mem_total > r.mem_capacity);
    /* bf16 state halves it: 4 + 4.02 + 4 GiB fits */
    c.state_bytes = 2;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.mem_optimizer, (double)(INT64_C(4) << 30), 0);
    EXPECT_NEAR(r.ckpt_bytes, (double)(INT64_C(8) << 30), 0);
    c.state_bytes = 3;
    EXPECT_STATUS(ot_sim_run(&c, &r), OT_ERR_INVALID_ARGUMENT);
    c.state_bytes = 4;
    /* sharding the optimizer divides its state by the chips: 4 + 4.02 + 1 GiB fits */
    c.shard_optimizer = true;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.mem_optimizer, (double)(INT64_C(8) << 30) / 8, 0);
    EXPECT_TRUE(r.fits);
    EXPECT_TRUE(strcmp(r.algo, "none") != 0);
    char *js = NULL;
    ASSERT_OK(ot_sim_result_json(&r, &js));
    EXPECT_STR_CONTAINS(js, "\"chips\":8");
    EXPECT_STR_CONTAINS(js, "\"fits\":true");
    EXPECT_STR_CONTAINS(js, "\"system_mtbf_s\":null");
    ot_free(js);
    ot_topology_free(t);
    ot_executable_free(e);
}

/* Young's interval sqrt(2 delta M) is Daly's first term; the useful fraction peaks there. */
static void test_goodput(void) {
    double delta = 30, m = 86400;
    double tau = ot_sim_daly_interval_s(delta, m);
    EXPECT_NEAR(tau / sqrt(2 * delta * m), 1.0, 0.02);
    double best = ot_sim_useful_fraction(tau, delta, 60, m);
    EXPECT_TRUE(best > ot_sim_useful_fraction(tau * 3, delta, 60, m));
    EXPECT_TRUE(best > ot_sim_useful_fraction(tau / 3, delta, 60, m));
    EXPECT_TRUE(best < 1 && best > 0.9);
    /* first order: waste ~ delta/tau + (tau/2 + R)/M */
    EXPECT_NEAR(1 - best, delta / tau + (tau / 2 + 60) / m, 0.002);
    EXPECT_NEAR(ot_sim_daly_interval_s(100, 40), 40, 0); /* delta >= 2M: M */
    EXPECT_TRUE(isinf(ot_sim_daly_interval_s(1, INFINITY)));
    EXPECT_NEAR(ot_sim_useful_fraction(90, 10, 0, INFINITY), 0.9, 1e-12);
    /* a pod: MTBF per chip / chips */
    ot_executable *e = compile_hlo(dot_hlo);
    ASSERT_TRUE(e != NULL);
    ot_topology *t = NULL;
    ASSERT_OK(ot_topology_preset("v4-4x4x4", &t));
    ot_sim_config c = ot_sim_config_default();
    ASSERT_OK(ot_sim_device_preset("v4", &c.device));
    c.topology = t;
    c.global_batch = 64 * 64;
    c.step = e;
    c.step_batch = 64;
    c.param_bytes = 100 << 20;
    c.mtbf_hours = 1000;
    ot_sim_result r;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.system_mtbf_s, 1000 * 3600.0 / 64, 1e-9);
    EXPECT_NEAR(r.ckpt_bytes, 300 << 20, 0);
    EXPECT_NEAR(r.ckpt_write_s, (300 << 20) / 16.0 / 1e9, 1e-12); /* 16 hosts of 4 chips */
    EXPECT_TRUE(r.optimal_ckpt_every >= 1);
    EXPECT_NEAR(r.ckpt_every, r.optimal_ckpt_every, 0);
    EXPECT_NEAR(r.goodput, r.goodput_optimal, 0);
    c.ckpt_every = (int64_t)r.optimal_ckpt_every * 20 + 20;
    ot_sim_result r2;
    ASSERT_OK(ot_sim_run(&c, &r2));
    EXPECT_TRUE(r2.goodput < r.goodput_optimal);
    ot_topology_free(t);
    ot_executable_free(e);
}

/* The whole v5p pod (8,960 chips) through the model communicator. */
static void test_full_pod(void) {
    ot_executable *e = compile_hlo(dot_hlo);
    ASSERT_TRUE(e != NULL);
    ot_topology *t = NULL;
    ASSERT_OK(ot_topology_preset("v5p-16x20x28", &t));
    ot_sim_config c = ot_sim_config_default();
    ASSERT_OK(ot_sim_device_preset("v5p", &c.device));
    c.topology = t;
    c.global_batch = 8960 * 2;
    c.step = e;
    c.step_batch = 64;
    c.param_bytes = INT64_C(1) << 30;
    ot_sim_result r;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_INT_EQ(r.chips, 8960);
    EXPECT_INT_EQ(r.per_chip_batch, 2);
    EXPECT_TRUE(r.comm_s > 0 && isfinite(r.comm_s));
    /* no algorithm beats the bandwidth bound 2(n-1)/n S / (link) over six links both ways */
    EXPECT_INT_EQ(r.rings, 6);
    EXPECT_TRUE(r.comm_s >= 2.0 * 8959 / 8960 * (double)(INT64_C(1) << 30) / 600e9 * 0.999);
    ot_topology_free(t);
    ot_executable_free(e);
}

static void test_link_rings(void) {
    const struct {
        const char *preset;
        int rings;
    } cases[] = {{"v5e-16x16", 4}, {"v5e-8x8", 2},  {"v4-4x4x4", 6}, {"v5p-16x20x28", 6},
                 {"v5p-2x2x2", 2}, {"mesh-3x3", 1}, {"ring-5", 2},   {"torus-2x4", 2},
                 {"torus-3x4", 4}, {"ring-1", 1},   {"v5e-16x8", 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ot_topology *t = NULL;
        ASSERT_OK(ot_topology_preset(cases[i].preset, &t));
        int got = ot_sim_link_rings(t);
        if (got != cases[i].rings) printf("  %s: %d rings\n", cases[i].preset, got);
        EXPECT_INT_EQ(got, cases[i].rings);
        ot_topology_free(t);
    }
    EXPECT_INT_EQ(ot_sim_link_rings(NULL), 1);
}

/* Google's pod all-reduce bandwidths: v5e 51.2 TB/s over 256 chips (200 GB/s a chip = its 4
 * links of 50 GB/s), v4 1.1 PB/s over 4,096 chips (269 GB/s a chip; 6 links of 50 GB/s make
 * 300). The model's nccl-tests bus bandwidth of a large all-reduce, summed over the chips. */
static void test_published_pod_allreduce(void) {
    const struct {
        const char *preset, *chip;
        double pod_bytes_per_s, tol;
    } cases[] = {{"v5e-16x16", "v5e", 51.2e12, 0.03}, {"v4-16x16x16", "v4", 1.1e15, 0.15}};
    for (size_t i = 0; i < 2; i++) {
        ot_topology *t = NULL;
        ASSERT_OK(ot_topology_preset(cases[i].preset, &t));
        ot_sim_device d;
        ASSERT_OK(ot_sim_device_preset(cases[i].chip, &d));
        int n = ot_topology_size(t);
        size_t S = (size_t)4 << 30;
        double sec = 0;
        ASSERT_OK(ot_sim_collective_s(&d, t, 0, OT_COLL_ALLREDUCE, OT_ALGO_AUTO, S, 0, &sec, NULL));
        double busbw = ot_coll_algbw_gbs(OT_COLL_ALLREDUCE, n, S / 4, OT_F32, sec) * 1e9 *
                       ot_coll_bus_factor(OT_COLL_ALLREDUCE, n);
        printf("  %s: %.1f GB/s bus bandwidth a chip, pod %.3g B/s (published %.3g, ratio %.3f)\n",
               cases[i].preset, busbw / 1e9, busbw * n, cases[i].pod_bytes_per_s,
               busbw * n / cases[i].pod_bytes_per_s);
        EXPECT_NEAR(busbw * n / cases[i].pod_bytes_per_s, 1.0, cases[i].tol);
        ot_topology_free(t);
    }
}

/* The host model's tiers: a kernel the runtime keeps on the device's thread (under cache_bytes
 * touched, a dot under cache_bytes / 4 multiply-adds) runs at the cache rates, one on the pool
 * pays pool_s more at the main rates, an interpreted fusion at least elements x instructions x
 * interp_s; the host pipeline adds transfers and copies; a TPU (no tiers) is unchanged. */
static void test_host_tiers(void) {
    ot_executable *e = compile_hlo(dot_hlo); /* 524288 FLOPs: 262144 multiply-adds, 57344 B */
    ASSERT_TRUE(e != NULL);
    ot_sim_device d;
    memset(&d, 0, sizeof d);
    d.peak_flops_f32 = 1e9, d.hbm_bytes_per_s = 1e12, d.launch_s = 1e-6;
    double tpu = ot_sim_compute_s(&d, e, 1.0, 1, NULL);
    EXPECT_NEAR(tpu, 524288e-9 + 1e-6, 1e-12);
    d.cache_flops_f32 = 1e10, d.cache_bytes_per_s = 1e12, d.pool_s = 5e-6, d.cores = 2;
    d.cache_bytes = 1; /* one task for the fast GEMM: on the device's thread, whatever its size */
    EXPECT_NEAR(ot_sim_compute_s(&d, e, 1.0, 1, NULL), 524288e-10 + 1e-6, 1e-12);
    ot_executable_free(e);
    /* a 64x128x128 dot is split over a pool of 2 (ot_host_dot_splits): pool_s more, main rate */
    e = compile_hlo("HloModule d\nENTRY main {\n  a = f32[64,128] parameter(0)\n"
                    "  b = f32[128,128] parameter(1)\n  ROOT d = f32[64,128] dot(a, b), "
                    "lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n");
    ASSERT_TRUE(e != NULL);
    EXPECT_NEAR(ot_sim_compute_s(&d, e, 1.0, 1, NULL), 2097152e-9 + 1e-6 + 5e-6, 1e-12);
    d.cores = 1; /* a pool of one thread: never split */
    EXPECT_NEAR(ot_sim_compute_s(&d, e, 1.0, 1, NULL), 2097152e-10 + 1e-6, 1e-12);
    ot_executable_free(e);

    /* one loop fusion of three instructions over 1000 elements, interpreted and native */
    static const char fusion_hlo[] = "HloModule f\nENTRY main {\n"
                                     "  a = f32[1000] parameter(0)\n  b = f32[1000] parameter(1)\n"
                                     "  m = f32[1000] multiply(a, b)\n  s = f32[1000] add(m, a)\n"
                                     "  ROOT r = f32[1000] maximum(s, b)\n}\n";
    ot_executable *f = compile_hlo(fusion_hlo);
    ASSERT_TRUE(f != NULL);
    ASSERT_TRUE(ot_executable_kernel_count(f) == 1);
    EXPECT_TRUE(ot_executable_kernel(f, 0)->kind == OT_KERNEL_FUSION);
    EXPECT_TRUE(!ot_executable_kernel_native(f, 0));
    EXPECT_TRUE(!ot_executable_kernel_native(f, 1)); /* out of range */
    memset(&d, 0, sizeof d);
    d.peak_flops_f32 = 1e15, d.hbm_bytes_per_s = 1e15;
    d.interp_s = 1e-9;
    EXPECT_NEAR(ot_sim_compute_s(&d, f, 1.0, 1, NULL), 3000e-9, 1e-15);
    EXPECT_NEAR(ot_sim_compute_s(&d, f, 2.0, 1, NULL), 6000e-9, 1e-15);
    d.interp_s = 0; /* a TPU compiles every fusion */
    EXPECT_TRUE(ot_sim_compute_s(&d, f, 1.0, 1, NULL) < 1e-10);

    /* the host pipeline: transfers and copies on top of the step */
    ot_sim_config c = ot_sim_config_default();
    d.shared_host = true, d.cores = 1, d.interp_s = 1e-9, d.hbm_capacity_bytes = INFINITY;
    for (int j = 1; j <= 8; j++) d.core_share[j] = 1;
    d.transfer_s = 2e-6, d.copy_bytes_per_s = 1e9;
    c.device = d;
    c.chips = 1;
    c.global_batch = 8;
    c.step = f;
    c.step_batch = 8;
    c.param_bytes = 4000;
    c.input_bytes = 1000;
    ot_sim_config_train_pipeline(&c, 4);
    EXPECT_INT_EQ(c.host_transfers, 2 + 6 + 4 + 2);
    EXPECT_NEAR(c.host_copy_bytes, 2.0 * (2 * 1000 + 3 * 4000), 0);
    ot_sim_result r;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.host_s, 14 * 2e-6 + 28000e-9, 1e-15);
    EXPECT_NEAR(r.step_s, r.compute_s + r.exposed_comm_s + r.optimizer_s + r.host_s, 1e-15);
    /* the compiled update instead of the fused estimate: its kernels, 1/N of them sharded */
    c.update = f;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.optimizer_s, 3000e-9, 1e-15);
    /* processes: each bucket crosses them at alpha + bytes / bandwidth after the backward
     * pass; one device a process has no shared-memory part */
    c.update = NULL;
    c.chips = 2, c.processes = 2, c.process_alpha_s = 3e-6, c.process_bytes_per_s = 1e9;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.exposed_comm_s, 3e-6 + 4000e-9, 1e-15);
    EXPECT_NEAR(r.comm_s, r.exposed_comm_s, 1e-15);
    EXPECT_TRUE(!strcmp(r.algo, "processes"));
    c.chips = 3; /* not a multiple of the processes */
    EXPECT_STATUS(ot_sim_run(&c, &r), OT_ERR_INVALID_ARGUMENT);
    c.chips = 2, c.process_bytes_per_s = 0; /* no transport cost */
    EXPECT_STATUS(ot_sim_run(&c, &r), OT_ERR_INVALID_ARGUMENT);
    c.process_bytes_per_s = 1e9, c.shard_optimizer = true;
    EXPECT_STATUS(ot_sim_run(&c, &r), OT_ERR_INVALID_ARGUMENT);
    c.shard_optimizer = false, c.processes = 0, c.chips = 1;
    c.host_transfers = -1;
    EXPECT_STATUS(ot_sim_run(&c, &r), OT_ERR_INVALID_ARGUMENT);
    /* the host pipeline measured as a whole replaces the transfers and copies */
    ot_sim_config_train_pipeline(&c, 4);
    c.host_work_s = 17e-6;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.host_s, 17e-6, 1e-15);
    EXPECT_NEAR(r.step_s, r.compute_s + r.exposed_comm_s + r.optimizer_s + 17e-6, 1e-15);
    c.host_work_s = -1e-6;
    EXPECT_STATUS(ot_sim_run(&c, &r), OT_ERR_INVALID_ARGUMENT);
    c.host_work_s = 0;
    ot_executable_free(f);

    /* a native fusion is on the pool when the runtime splits its loop, whatever it touches */
    static const char big_hlo[] = "HloModule g\nENTRY main {\n"
                                  "  a = f32[100000] parameter(0)\n  b = f32[100000] parameter(1)\n"
                                  "  m = f32[100000] multiply(a, b)\n"
                                  "  ROOT s = f32[100000] add(m, a)\n}\n";
    static const char mid_hlo[] = "HloModule h\nENTRY main {\n"
                                  "  a = f32[30000] parameter(0)\n  b = f32[30000] parameter(1)\n"
                                  "  m = f32[30000] multiply(a, b)\n"
                                  "  ROOT s = f32[30000] add(m, a)\n}\n";
    ot_executable *big = compile_hlo_native(big_hlo), *mid = compile_hlo_native(mid_hlo);
    ASSERT_TRUE(big && mid);
    ASSERT_TRUE(ot_executable_kernel_native(big, 0) && ot_executable_kernel_native(mid, 0));
    EXPECT_TRUE(ot_executable_kernel_native_splits(big, 0));
    EXPECT_TRUE(!ot_executable_kernel_native_splits(mid, 0)); /* 360 KB touched, one piece */
    memset(&d, 0, sizeof d);
    d.peak_flops_f32 = 1e15, d.hbm_bytes_per_s = 1e15, d.cache_flops_f32 = 1e15;
    d.cache_bytes_per_s = 1e15, d.cache_bytes = 262144, d.pool_s = 1e-3;
    EXPECT_TRUE(ot_sim_kernel_s(&d, big, 0, 1.0, 1, NULL) >= 1e-3);
    EXPECT_TRUE(ot_sim_kernel_s(&d, mid, 0, 1.0, 1, NULL) < 1e-6);
    ot_executable_free(big);
    ot_executable_free(mid);

    /* the calibration measures the all-reduce after the last device for 2..8 devices */
    ot_sim_host_calibration cal;
    ASSERT_OK(ot_sim_device_host_calibrate(NULL, &d, &cal));
    for (int n = 2; n <= 8; n++) EXPECT_TRUE(cal.tail_alpha_s[n] > 0 && cal.tail_alpha_s[n] < 0.1);
    /* as steps run: each member goes on to its next round at once, not after the others (a
     * barrier between rounds would free the cores for the tree: 3-4x less at 4-8 threads here) */
    for (int n = 2; n <= 8; n++) EXPECT_TRUE(cal.tail_rejoin_s[n] < 1e-6);
    ot_sim_device_host_from(&cal, 4, &d);
    EXPECT_NEAR(d.shm_tail_alpha_us, cal.tail_alpha_s[4] * 1e6, 1e-9);

    ot_sim_host_rates hr;
    EXPECT_STATUS(ot_sim_host_measure(0, 0.01, &hr), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_sim_host_measure(65, 0.01, &hr), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_sim_host_measure(2, 0, &hr), OT_ERR_INVALID_ARGUMENT);
}

/* Measured rates with 2 device threads: every figure positive and finite, and the device built
 * from them prices kernels at them (the share is in the rates: core_share 1). */
static void test_host_measure(void) {
    ot_sim_host_rates hr;
    ASSERT_OK(ot_sim_host_measure(2, 0.01, &hr));
    EXPECT_INT_EQ(hr.devices, 2);
    double v[] = {hr.dot_flops, hr.cache_flops, hr.mem_bytes_per_s,   hr.cache_bytes_per_s,
                  hr.launch_s,  hr.transfer_s,  hr.copy_bytes_per_s,  hr.alpha_s,
                  hr.interp_s,  hr.core_share,  hr.cache_limit_bytes, hr.llc_bytes};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) EXPECT_TRUE(v[i] > 0 && isfinite(v[i]));
    EXPECT_TRUE(hr.pool_s >= 0 && isfinite(hr.pool_s));
    EXPECT_TRUE(hr.core_share <= 1);
    ot_sim_host_calibration cal;
    memset(&cal, 0, sizeof cal);
    cal.cores = 2, cal.write_bytes_per_s = 1e9, cal.read_bytes_per_s = 1e9;
    ot_sim_device d;
    ot_sim_device_host_rates(&hr, &cal, &d);
    EXPECT_TRUE(d.shared_host);
    EXPECT_NEAR(d.core_share[2], 1, 0);
    EXPECT_NEAR(d.cache_flops_f32, hr.cache_flops, 0);
    EXPECT_NEAR(d.shm_cost.alpha_us, hr.alpha_s * 1e6, 1e-9);
    /* shared-memory blocks: in the last-level cache at the small copy's rate, else the large
     * copy's (per-message cost left out: the bytes' time alone) */
    d.shm_cost.alpha_us = 0;
    double small = 0, large = 0;
    size_t fit = (size_t)(hr.llc_bytes / 4) / 64 * 64; /* 2 blocks in half the cache */
    ASSERT_OK(
        ot_sim_collective_s(&d, NULL, 2, OT_COLL_ALLREDUCE, OT_ALGO_RING, fit, 1, &small, NULL));
    ASSERT_OK(ot_sim_collective_s(&d, NULL, 2, OT_COLL_ALLREDUCE, OT_ALGO_RING, fit + 64, 1, &large,
                                  NULL));
    EXPECT_NEAR(large / (double)(fit + 64) / (small / (double)fit),
                hr.copy_bytes_per_s / hr.mem_bytes_per_s, 1e-6);
}

/* The host's kernel model (pool_points > 0): a pooled kernel's hand-off by the gap since the pool
 * last ran, a dot at its shape's measured rate, a native fusion at its instructions' per-element
 * costs, and the step's three bounds: one device's path, the cores shared with other processes'
 * threads, each process's pool taken in turns. */
static void test_host_kernel_model(void) {
    static const char two_dots[] =
        "HloModule t\nENTRY main {\n  a = f32[64,128] parameter(0)\n"
        "  b = f32[128,128] parameter(1)\n"
        "  d1 = f32[64,128] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  ROOT d2 = f32[64,128] dot(d1, b), lhs_contracting_dims={1}, "
        "rhs_contracting_dims={0}\n}\n";
    ot_executable *e = compile_hlo(two_dots); /* 2 x 1048576 multiply-adds, both pooled */
    ASSERT_TRUE(e != NULL);
    ASSERT_TRUE(ot_executable_kernel_count(e) == 2);
    ot_sim_device d;
    memset(&d, 0, sizeof d);
    d.peak_flops_f32 = 1e10, d.cache_flops_f32 = 1e10, d.hbm_bytes_per_s = 1e15;
    d.cache_bytes_per_s = 1e15, d.cache_bytes = 262144, d.launch_s = 1e-6;
    d.shared_host = true, d.cores = 2, d.hbm_capacity_bytes = INFINITY;
    for (int j = 1; j <= 8; j++) d.core_share[j] = 1;
    d.pool_points = 2, d.pool_threads = 2, d.pool_speedup = 2;
    d.pool_gap_s[0] = 0, d.pool_gap_s[1] = 100e-6;
    d.pool_handoff_s[0] = 2e-6, d.pool_handoff_s[1] = 402e-6;
    double own = 2097152 / 1e10; /* 209.7 us on one thread */
    /* the first after a long gap (asleep): h = 402 us > its work, so h */
    EXPECT_NEAR(ot_sim_kernel_s(&d, e, 0, 1.0, 1, NULL), 402e-6 + 1e-6, 1e-12);
    /* the second right after it (gap 0): h/2 alone, then the rest over the pool's speed-up */
    double second = 1e-6 + (own - 1e-6) / 2;
    EXPECT_NEAR(ot_sim_kernel_s(&d, e, 1, 1.0, 1, NULL), second + 1e-6, 1e-12);
    EXPECT_NEAR(ot_sim_compute_s(&d, e, 1.0, 1, NULL), 402e-6 + second + 2e-6, 1e-12);
    /* after the last measured gap: the last point's hand-off */
    d.pool_gap_s[1] = 1e-3, d.pool_handoff_s[1] = 4e-3;
    EXPECT_NEAR(ot_sim_kernel_s(&d, e, 0, 1.0, 1, NULL), 4e-3 + 1e-6, 1e-12);
    d.pool_handoff_s[1] = 402e-6, d.pool_gap_s[1] = 100e-6;
    /* a dot shape with its own measured rate */
    d.ndots = 1;
    d.dots[0].key = ot_sim_dot_key(e, 1);
    d.dots[0].flops_per_s = 2e10;
    EXPECT_TRUE(d.dots[0].key != 0 && d.dots[0].key == ot_sim_dot_key(e, 0)); /* same shapes */
    second = 1e-6 + (own / 2 - 1e-6) / 2;
    EXPECT_NEAR(ot_sim_kernel_s(&d, e, 1, 1.0, 1, NULL), second + 1e-6, 1e-12);
    /* the shape measured through the pool: its wall time after the gap (linear between the
     * measured gaps) instead of the hand-off formula, its CPU time on the cores */
    d.dots[0].pool_s[0] = 50e-6, d.dots[0].pool_s[1] = 150e-6;
    d.dots[0].pool_cpu_s[0] = 80e-6, d.dots[0].pool_cpu_s[1] = 120e-6;
    EXPECT_NEAR(ot_sim_kernel_s(&d, e, 0, 1.0, 1, NULL), 150e-6 + 1e-6, 1e-12); /* asleep */
    EXPECT_NEAR(ot_sim_compute_s(&d, e, 1.0, 1, NULL), 150e-6 + 50e-6 + 2e-6, 1e-12);
    EXPECT_NEAR(ot_sim_host_cpu_s(&d, e, 1.0), 120e-6 + 80e-6 + 2e-6, 1e-12);
    /* at another batch than measured (the HLO-file path's scale): the formula */
    EXPECT_NEAR(ot_sim_kernel_s(&d, e, 1, 1.0, 1, NULL), 50e-6 + 1e-6, 1e-12);
    EXPECT_TRUE(fabs(ot_sim_kernel_s(&d, e, 1, 0.5, 1, NULL) - (50e-6 + 1e-6)) > 1e-9);
    memset(d.dots[0].pool_s, 0, sizeof d.dots[0].pool_s);
    memset(d.dots[0].pool_cpu_s, 0, sizeof d.dots[0].pool_cpu_s);
    d.ndots = 0;

    /* the bounds: 4 devices on 2 cores that other processes leave half of (2 more runnable
     * threads): the cores take cpu x (4 + 2) / 2; the pool, 4 devices' pooled kernels in turn */
    ot_sim_config c = ot_sim_config_default();
    c.device = d;
    c.chips = 4, c.global_batch = 256, c.step = e, c.step_batch = 64, c.param_bytes = 0;
    c.overlap = false;
    c.device.avail = 0.5;
    ot_sim_result r;
    ASSERT_OK(ot_sim_run(&c, &r));
    /* steps back to back: the first dot meets the pool the previous step's last dot left (gap 0
     * plus no communication, optimizer or host pipeline), so it costs as the second */
    double path = 2 * (1e-6 + (own - 1e-6) / 2) + 2e-6;
    EXPECT_NEAR(r.path_s, path, 1e-12);
    EXPECT_NEAR(r.pool_s, 4 * path, 1e-12); /* every kernel pooled */
    EXPECT_NEAR(r.cores_s, (2 * own + 2e-6) * 6 / 2, 1e-12);
    EXPECT_NEAR(r.compute_s, fmax(r.pool_s, r.cores_s), 1e-15);
    EXPECT_TRUE(!strcmp(r.bound, "cores"));
    /* the cores to themselves: cpu x 4 / 2 < the pool's turns */
    c.device.avail = 1;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.cores_s, (2 * own + 2e-6) * 4 / 2, 1e-12);
    EXPECT_TRUE(!strcmp(r.bound, "pool") && r.compute_s == r.pool_s);
    c.device.avail = 0.5;
    /* processes: one pool each, so their devices do not take turns */
    c.processes = 4, c.process_alpha_s = 1e-6, c.process_bytes_per_s = 1e9, c.param_bytes = 4000;
    ASSERT_OK(ot_sim_run(&c, &r));
    /* the first dot after the processes' all-reduce (1 + 4 us) and the optimizer: its hand-off
     * between the measured gaps, linear */
    EXPECT_NEAR(r.exposed_comm_s, 1e-6 + 4000 / 1e9, 1e-15);
    double g5 = r.exposed_comm_s + r.optimizer_s + r.host_s, h5 = 2e-6 + g5 / 100e-6 * 400e-6;
    double first5 = own > h5 / 2 ? h5 / 2 + (own - h5 / 2) / 2 : h5 / 2;
    EXPECT_NEAR(r.pool_s, (first5 > h5 ? first5 : h5) + (1e-6 + (own - 1e-6) / 2) + 2e-6, 1e-12);
    EXPECT_TRUE(!strcmp(r.bound, "cores"));
    EXPECT_NEAR(r.compute_s, r.cores_s, 0);
    /* processes wait for each other runnable (polling): with 4 on 2 cores that other processes
     * leave whole, each gets half a core for its whole step, the optimizer and the host pipeline
     * (4 transfers of 50 us) included; one process (its waiting devices sleep) and 2 processes
     * on the 2 cores run them at one thread's speed */
    c.device.avail = 1;
    c.host_transfers = 4, c.device.transfer_s = 50e-6;
    ASSERT_OK(ot_sim_run(&c, &r));
    double opt1 = r.optimizer_s / 2;
    EXPECT_TRUE(opt1 > 0);
    EXPECT_NEAR(r.host_s, 2 * 200e-6, 1e-15);
    EXPECT_NEAR(r.step_s, r.compute_s + r.exposed_comm_s + 2 * (opt1 + 200e-6), 1e-15);
    /* CPU is not stretched; every device stages its own step */
    EXPECT_NEAR(r.cpu_s, 4 * (2 * own + 2e-6 + opt1 + 200e-6), 1e-12);
    c.processes = 0;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.optimizer_s, opt1, 1e-15);
    EXPECT_NEAR(r.host_s, 200e-6, 1e-15);
    c.processes = 2, c.chips = 2, c.global_batch = 128;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.optimizer_s, opt1, 1e-15);
    EXPECT_NEAR(r.host_s, 200e-6, 1e-15);
    /* 2 processes on 2 cores sleep while they wait (ot_comm_process_waits_sleep), so other
     * processes' load (half of each core left) does not stretch their update and host pipeline,
     * as in one process; 4 processes on 2 cores poll, and at that load get 2 / 6 of a core */
    EXPECT_TRUE(ot_comm_process_waits_sleep(2, 2) && !ot_comm_process_waits_sleep(4, 2));
    c.device.avail = 0.5;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.optimizer_s, opt1, 1e-15);
    EXPECT_NEAR(r.host_s, 200e-6, 1e-15);
    c.processes = 4, c.chips = 4, c.global_batch = 256;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.optimizer_s, 3 * opt1, 1e-15);
    EXPECT_NEAR(r.host_s, 3 * 200e-6, 1e-15);
    c.host_work_s = 150e-6; /* measured: stretched the same way */
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.host_s, 3 * 150e-6, 1e-15);
    c.host_work_s = 0;
    c.device.avail = 1;
    c.host_transfers = 0, c.device.transfer_s = 0;
    c.device.avail = 0.5;
    /* one process: the devices that finished wait asleep, so the all-reduce after the last one
     * is priced at the per-message cost of threads with the cores to themselves (20 us), not
     * the one measured with all 4 threads at once (100 us), bound by the cores or the pool */
    c.processes = 0, c.param_bytes = 4000;
    c.device.shm_cost.alpha_us = 100, c.device.shm_cost.gbytes_per_s = 1;
    c.device.shm_tail_alpha_us = 20;
    ot_sim_result rf, r20, r100;
    ASSERT_OK(ot_sim_run(&c, &rf));
    EXPECT_TRUE(!strcmp(rf.bound, "cores"));
    c.device.shm_tail_alpha_us = 0, c.device.shm_cost.alpha_us = 20;
    ASSERT_OK(ot_sim_run(&c, &r20));
    c.device.shm_cost.alpha_us = 100;
    ASSERT_OK(ot_sim_run(&c, &r100));
    EXPECT_TRUE(rf.exposed_comm_s > 0);
    EXPECT_NEAR(rf.exposed_comm_s, r20.exposed_comm_s, 1e-15);
    EXPECT_TRUE(r100.exposed_comm_s > rf.exposed_comm_s * 2);
    c.device.avail = 1, c.device.shm_tail_alpha_us = 20;
    ASSERT_OK(ot_sim_run(&c, &rf));
    EXPECT_TRUE(!strcmp(rf.bound, "pool"));
    c.device.shm_tail_alpha_us = 0, c.device.shm_cost.alpha_us = 20;
    ASSERT_OK(ot_sim_run(&c, &r20));
    EXPECT_NEAR(rf.exposed_comm_s, r20.exposed_comm_s, 1e-15);
    c.device.shm_cost.alpha_us = 100;
    /* the host model takes it from the calibration's all-reduce after the last of as many
     * devices (not the ring ping-pong's, with every member asleep between its messages) */
    ot_sim_host_calibration cal;
    memset(&cal, 0, sizeof cal);
    cal.cores = 2, cal.alpha_s[2] = 5e-6, cal.alpha_s[4] = 9e-6;
    cal.tail_alpha_s[2] = 2e-6, cal.tail_alpha_s[4] = 3e-6;
    ot_sim_device hd;
    ot_sim_device_host_from(&cal, 4, &hd);
    EXPECT_NEAR(hd.shm_cost.alpha_us, 9, 1e-9);
    EXPECT_NEAR(hd.shm_tail_alpha_us, 3, 1e-9);
    ot_sim_device_host_from(&cal, 1, &hd);
    EXPECT_NEAR(hd.shm_tail_alpha_us, 0, 0);
    c.device.avail = 0.5, c.param_bytes = 0;
    c.device.shm_cost.alpha_us = 0, c.device.shm_cost.gbytes_per_s = 0;
    c.processes = 4;
    /* the pool taking 4 devices' kernels in turn never rests: each pooled kernel at its
     * back-to-back time, though one device's path meets the pool asleep after the host pipeline
     * (4 transfers of 50 us between steps: the first dot's hand-off is the 402 us after 100 us) */
    c.processes = 0, c.param_bytes = 0;
    c.host_transfers = 4, c.device.transfer_s = 50e-6;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.host_s, 200e-6, 1e-15);
    EXPECT_NEAR(r.path_s, 402e-6 + (1e-6 + (own - 1e-6) / 2) + 2e-6, 1e-12);
    EXPECT_NEAR(r.pool_s, 4 * (2 * (1e-6 + (own - 1e-6) / 2) + 2e-6), 1e-12);
    c.host_transfers = 0, c.device.transfer_s = 0;
    /* no other load and devices within the cores: the path */
    c.processes = 0, c.chips = 2, c.global_batch = 128, c.param_bytes = 0;
    c.device.avail = 1;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.cores_s, 2 * own + 2e-6, 1e-12);
    EXPECT_NEAR(ot_sim_host_cpu_s(&c.device, e, 1.0), 2 * own + 2e-6, 1e-12);
    /* the CPU a hand-off burns besides the work (spinning, wake-ups) counts on the cores */
    c.device.pool_handoff_cpu_s[0] = c.device.pool_handoff_cpu_s[1] = 5e-6;
    EXPECT_NEAR(ot_sim_host_cpu_s(&c.device, e, 1.0), 2 * own + 2e-6 + 10e-6, 1e-12);
    /* but the cores bound counts each hand-off's CPU back to back (gap 0): a pool woken after a
     * pause spins its window after the run on a core nothing else wanted (the probe's CPU after a
     * long gap: 60 us here), and where the cores bound the step the pool never rests. 4 devices
     * on the 2 cores, the step's first dot 200 us (the host pipeline) after the last one: */
    c.device.pool_handoff_cpu_s[1] = 60e-6;
    c.chips = 4, c.global_batch = 256;
    c.host_transfers = 4, c.device.transfer_s = 50e-6;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.cores_s, (2 * own + 2e-6 + 10e-6) * 4 / 2, 1e-12);
    /* the process's CPU: every device's step and host pipeline */
    EXPECT_NEAR(r.cpu_s, 4 * (2 * own + 2e-6 + 65e-6 + 200e-6), 1e-12);
    EXPECT_NEAR(ot_sim_host_cpu_s(&c.device, e, 1.0), 2 * own + 2e-6 + 65e-6, 1e-12);
    /* a dot shape measured through the pool likewise: its CPU at gap 0 on the cores */
    c.device.ndots = 1;
    c.device.dots[0].key = ot_sim_dot_key(e, 0);
    c.device.dots[0].flops_per_s = 1e10;
    c.device.dots[0].pool_s[0] = 50e-6, c.device.dots[0].pool_s[1] = 150e-6;
    c.device.dots[0].pool_cpu_s[0] = 80e-6, c.device.dots[0].pool_cpu_s[1] = 120e-6;
    ASSERT_OK(ot_sim_run(&c, &r));
    EXPECT_NEAR(r.cores_s, (2 * 80e-6 + 2e-6) * 4 / 2, 1e-12);
    EXPECT_NEAR(r.cpu_s, 4 * (120e-6 + 80e-6 + 2e-6 + 200e-6), 1e-12);
    c.device.ndots = 0;
    memset(c.device.dots, 0, sizeof c.device.dots[0]);
    c.device.pool_handoff_cpu_s[1] = 5e-6;
    c.chips = 2, c.global_batch = 128;
    c.host_transfers = 0, c.device.transfer_s = 0;
    /* one run on its own: the pool asleep when it starts */
    EXPECT_NEAR(ot_sim_compute_s(&c.device, e, 1.0, 1, NULL),
                402e-6 + (1e-6 + (own - 1e-6) / 2) + 2e-6, 1e-12);
    ot_executable_free(e);

    /* a native fusion: its instructions' elements at their class's cost */
    static const char fused[] = "HloModule f\nENTRY main {\n"
                                "  a = f32[30000] parameter(0)\n  b = f32[30000] parameter(1)\n"
                                "  m = f32[30000] multiply(a, b)\n  x = f32[30000] exponential(m)\n"
                                "  ROOT s = f32[30000] add(x, a)\n}\n";
    ot_executable *f = compile_hlo_native(fused);
    ASSERT_TRUE(f != NULL && ot_executable_kernel_count(f) == 1);
    ASSERT_TRUE(ot_executable_kernel_native(f, 0) && !ot_executable_kernel_native_splits(f, 0));
    d.op_s[OT_SIM_OP_ARITH] = 1e-9, d.op_s[OT_SIM_OP_EXP] = 5e-9;
    EXPECT_NEAR(ot_sim_kernel_s(&d, f, 0, 1.0, 1, NULL), 30000 * (2e-9 + 5e-9) + 1e-6, 1e-12);
    d.cache_bytes_per_s = 1e6; /* bytes bound: 360000 B at 1 MB/s */
    EXPECT_NEAR(ot_sim_kernel_s(&d, f, 0, 1.0, 1, NULL), 0.36 + 1e-6, 1e-9);
    d.cache_bytes_per_s = 1e15;
    /* measured alone (ot_sim_host_probe_measure): that work instead of the class sum, scaled
     * with the batch like it; a fusion measured below the run's fixed cost (0) keeps the sum */
    uint64_t key = ot_sim_fusion_key(f, 0);
    EXPECT_TRUE(key != 0);
    d.nfusions = 1, d.fusions[0].key = key, d.fusions[0].s = 40e-6;
    EXPECT_NEAR(ot_sim_kernel_s(&d, f, 0, 1.0, 1, NULL), 40e-6 + 1e-6, 1e-12);
    EXPECT_NEAR(ot_sim_kernel_s(&d, f, 0, 0.5, 1, NULL), 20e-6 + 1e-6, 1e-12);
    d.fusions[0].s = 0;
    EXPECT_NEAR(ot_sim_kernel_s(&d, f, 0, 1.0, 1, NULL), 30000 * (2e-9 + 5e-9) + 1e-6, 1e-12);
    d.fusions[0].key = key ^ 1, d.fusions[0].s = 40e-6; /* another fusion's */
    EXPECT_NEAR(ot_sim_kernel_s(&d, f, 0, 1.0, 1, NULL), 30000 * (2e-9 + 5e-9) + 1e-6, 1e-12);
    d.nfusions = 0;
    /* the key: the same for the same module compiled again, another for another fusion, 0 for
     * what is not a native fusion */
    ot_executable *f2 = compile_hlo_native(fused);
    ASSERT_TRUE(f2 != NULL);
    EXPECT_TRUE(ot_sim_fusion_key(f2, 0) == key);
    ot_executable_free(f2);
    static const char fused_sub[] =
        "HloModule f\nENTRY main {\n"
        "  a = f32[30000] parameter(0)\n  b = f32[30000] parameter(1)\n"
        "  m = f32[30000] subtract(a, b)\n  x = f32[30000] exponential(m)\n"
        "  ROOT s = f32[30000] add(x, a)\n}\n";
    f2 = compile_hlo_native(fused_sub);
    ASSERT_TRUE(f2 != NULL && ot_executable_kernel_count(f2) == 1);
    EXPECT_TRUE(ot_sim_fusion_key(f2, 0) != 0 && ot_sim_fusion_key(f2, 0) != key);
    ot_executable_free(f2);
    EXPECT_TRUE(ot_sim_fusion_key(f, 1) == 0); /* out of range */
    ot_executable_free(f);
    f = compile_hlo(fused); /* no native code: interpreted */
    ASSERT_TRUE(f != NULL);
    if (!ot_executable_kernel_native(f, 0)) EXPECT_TRUE(ot_sim_fusion_key(f, 0) == 0);
    ot_executable_free(f);
}

/* Which dots the host runtime splits over its pool (ot_host_dot_splits, the model's rule): more
 * than one task of the fast GEMM, not the multiply-adds alone (a 128x128x10 product has 163840,
 * past the inline bound, but one tile); never on a pool of one thread. */
static void test_host_dot_splits(void) {
    static const struct {
        int m, k, n;
        bool trans_a; /* lhs stored [k, m] */
        bool split;
    } cases[] = {
        {128, 64, 128, false, true},  /* the MLP's first layer, batch 128 */
        {128, 128, 10, false, false}, /* its second: one tile (N < 16 on OpenBLAS's path) */
        {128, 128, 10, true, true},   /* the weight gradient's shape: two row blocks */
        {64, 128, 32, false, false},  /* one row block, one panel */
        {64, 128, 128, false, true},  /* one row block, two column blocks */
        {16, 64, 128, false, true},   /* batch 16 of 8 devices */
        {16, 128, 10, false, false},  /* under the inline bound */
        {8, 8, 8, false, false},      {512, 512, 512, false, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char hlo[512];
        int m = cases[i].m, k = cases[i].k, n = cases[i].n;
        if (cases[i].trans_a)
            snprintf(hlo, sizeof hlo,
                     "HloModule d\nENTRY main {\n  a = f32[%d,%d] parameter(0)\n"
                     "  b = f32[%d,%d] parameter(1)\n  ROOT d = f32[%d,%d] dot(a, b), "
                     "lhs_contracting_dims={0}, rhs_contracting_dims={0}\n}\n",
                     k, m, k, n, m, n);
        else
            snprintf(hlo, sizeof hlo,
                     "HloModule d\nENTRY main {\n  a = f32[%d,%d] parameter(0)\n"
                     "  b = f32[%d,%d] parameter(1)\n  ROOT d = f32[%d,%d] dot(a, b), "
                     "lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
                     m, k, k, n, m, n);
        ot_executable *e = compile_hlo(hlo);
        ASSERT_TRUE(e != NULL && ot_executable_kernel_count(e) == 1);
        bool sp = ot_host_dot_splits(e, 0, 2);
        if (sp != cases[i].split)
            printf("  %dx%dx%d%s: splits %d, expected %d\n", m, k, n,
                   cases[i].trans_a ? " (lhs transposed)" : "", sp, cases[i].split);
        EXPECT_TRUE(sp == cases[i].split);
        EXPECT_TRUE(!ot_host_dot_splits(e, 0, 1));
        EXPECT_TRUE(!ot_host_dot_splits(e, 1, 2)); /* out of range */
        ot_executable_free(e);
    }
}

/* The kernel probes: every figure positive and finite, one rate per distinct dot shape, and a
 * device built from them uses the kernel model. */
static void test_host_probe(void) {
    ot_sim_host_probe p;
    EXPECT_STATUS(ot_sim_host_probe_measure(NULL, 1, &p), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_sim_host_probe_measure(NULL, 0, NULL), OT_ERR_INVALID_ARGUMENT);
    ot_executable *e = compile_hlo(dot_hlo);
    ASSERT_TRUE(e != NULL);
    const ot_executable *ex[2] = {e, e};
    ASSERT_OK(ot_sim_host_probe_measure(ex, 2, &p));
    EXPECT_INT_EQ(p.ndots, 1);
    EXPECT_TRUE(p.dots[0].key == ot_sim_dot_key(e, 0) && p.dots[0].flops_per_s > 0);
    /* a shape the runtime splits over its pool (128x64x128 on two threads or more) is also
     * timed through it after every gap; one it runs inline is not */
    ot_executable *pd = compile_hlo("HloModule d\nENTRY main {\n  a = f32[128,64] parameter(0)\n"
                                    "  b = f32[64,128] parameter(1)\n  ROOT d = f32[128,128] "
                                    "dot(a, b), lhs_contracting_dims={1}, "
                                    "rhs_contracting_dims={0}\n}\n");
    ASSERT_TRUE(pd != NULL);
    const ot_executable *ex2[2] = {e, pd};
    ot_sim_host_probe p2;
    ASSERT_OK(ot_sim_host_probe_measure(ex2, 2, &p2));
    EXPECT_INT_EQ(p2.ndots, 2);
    for (int i = 0; i < 2; i++) {
        const ot_executable *x = ex2[i];
        bool split = ot_host_dot_splits(x, 0, p2.pool_threads);
        EXPECT_TRUE(i == 0 ? !split : split == (p2.pool_threads > 1));
        EXPECT_TRUE(p2.dots[i].key == ot_sim_dot_key(x, 0));
        for (int g = 0; g < OT_SIM_POOL_POINTS; g++) {
            EXPECT_TRUE(split ? p2.dots[i].pool_s[g] > 0 && isfinite(p2.dots[i].pool_s[g])
                              : p2.dots[i].pool_s[g] == 0);
            EXPECT_TRUE(p2.dots[i].pool_cpu_s[g] >= 0 && isfinite(p2.dots[i].pool_cpu_s[g]));
        }
    }
    ot_executable_free(pd);
    double v[] = {p.launch_s, p.dot1_flops,        p.pool_speedup,
                  p.interp_s, p.cache_bytes_per_s, p.avail};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) EXPECT_TRUE(v[i] > 0 && isfinite(v[i]));
    for (int c = 0; c < OT_SIM_OP_CLASSES; c++) EXPECT_TRUE(p.op_s[c] > 0 && isfinite(p.op_s[c]));
    for (int i = 0; i < OT_SIM_POOL_POINTS; i++)
        EXPECT_TRUE(p.pool_handoff_s[i] > 0 && isfinite(p.pool_handoff_s[i]));
    EXPECT_TRUE(p.avail <= 1 && p.pool_threads >= 1 && p.cores >= 1);
    EXPECT_TRUE(p.pool_speedup <= p.pool_threads);
    ot_sim_device d;
    memset(&d, 0, sizeof d);
    ot_sim_device_host_probe(&p, &d);
    EXPECT_INT_EQ(d.pool_points, OT_SIM_POOL_POINTS);
    EXPECT_NEAR(d.peak_flops_f32, p.dot1_flops, 0);
    EXPECT_TRUE(ot_sim_compute_s(&d, e, 1.0, 1, NULL) > 0);
    EXPECT_INT_EQ(p.nfusions, 0); /* no fusion in a lone dot */
    ot_executable_free(e);

    /* native fusions: each measured alone once (two executables of the same module share the
     * keys), one of six parameters and three outputs as an optimizer update's */
    static const char fusions[] =
        "HloModule t\nsum {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(x, y)\n}\nENTRY main {\n"
        "  a = f32[64,32] parameter(0)\n  b = f32[64,32] parameter(1)\n"
        "  c = f32[64,32] parameter(2)\n  d = f32[64,32] parameter(3)\n"
        "  e = f32[64,32] parameter(4)\n  f = f32[64,32] parameter(5)\n"
        "  m = f32[64,32] multiply(a, b)\n  n = f32[64,32] add(m, c)\n"
        "  o = f32[64,32] subtract(d, e)\n  q = f32[64,32] multiply(o, f)\n"
        "  r = f32[64,32] add(n, q)\n  z = f32[] constant(0)\n"
        "  t = f32[32] reduce(r, z), dimensions={0}, to_apply=sum\n"
        "  ROOT out = (f32[64,32], f32[64,32], f32[32]) tuple(n, q, t)\n}\n";
    ot_executable *g1 = compile_hlo_native(fusions), *g2 = compile_hlo_native(fusions);
    ASSERT_TRUE(g1 != NULL && g2 != NULL);
    int native = 0;
    for (int k = 0; k < ot_executable_kernel_count(g1); k++)
        native += ot_sim_fusion_key(g1, k) != 0;
    EXPECT_TRUE(native >= 1);
    const ot_executable *gx[2] = {g1, g2};
    ASSERT_OK(ot_sim_host_probe_measure(gx, 2, &p));
    EXPECT_INT_EQ(p.nfusions, native);
    for (int k = 0, i = 0; k < ot_executable_kernel_count(g1); k++) {
        if (!ot_sim_fusion_key(g1, k)) continue;
        EXPECT_TRUE(p.fusions[i].key == ot_sim_fusion_key(g1, k));
        EXPECT_TRUE(p.fusions[i].s >= 0 && isfinite(p.fusions[i].s));
        i++;
    }
    memset(&d, 0, sizeof d);
    ot_sim_device_host_probe(&p, &d);
    EXPECT_INT_EQ(d.nfusions, native);
    ot_executable_free(g1);
    ot_executable_free(g2);
}

/* ot_sim_train_loop_measure: train's own work per step grows with what it does (clock reads,
 * rows gathered and put on the device); bad sizes are refused */
static void test_train_loop_probe(void) {
    ot_shape ps[2];
    ASSERT_OK(ot_shape_make(&ps[0], OT_F32, 2, (int64_t[]){64, 128}));
    ASSERT_OK(ot_shape_make(&ps[1], OT_F32, 1, (int64_t[]){128}));
    ot_sim_train_loop l = {16, 64, 1000, 2, ps, 6, NULL, 0};
    double base = 0, more = 0, big = 0;
    ASSERT_OK(ot_sim_train_loop_measure(&l, 0.01, &base));
    EXPECT_TRUE(base > 0 && base < 0.01);
    /* 2,000 parts: 8,000 clock reads (each at least tens of ns) more than the 6 */
    l.parts = 2000;
    ASSERT_OK(ot_sim_train_loop_measure(&l, 0.01, &more));
    EXPECT_TRUE(more > base + 8000 * 10e-9);
    /* 1,024 rows of 1,024 f32 (4 MiB gathered, then copied onto the device) */
    l.parts = 6, l.rows = 1024, l.features = 1024, l.dataset_rows = 2048;
    ASSERT_OK(ot_sim_train_loop_measure(&l, 0.01, &big));
    EXPECT_TRUE(big > base + 8.0 * 1048576 / 100e9);
    /* the executables between the steps run (a step executable of its own) */
    ot_executable *e = compile_hlo(dot_hlo);
    const ot_executable *ex[1] = {e};
    l.rows = 16, l.features = 64, l.dataset_rows = 1000, l.between = ex, l.nbetween = 1;
    ASSERT_OK(ot_sim_train_loop_measure(&l, 0.01, &base));
    EXPECT_TRUE(base > 0);
    l.nbetween = 9;
    EXPECT_STATUS(ot_sim_train_loop_measure(&l, 0.01, &base), OT_ERR_INVALID_ARGUMENT);
    l.nbetween = 1, l.dataset_rows = 8; /* fewer rows than the batch */
    EXPECT_STATUS(ot_sim_train_loop_measure(&l, 0.01, &base), OT_ERR_INVALID_ARGUMENT);
    l.dataset_rows = 1000, l.nparams = 0;
    EXPECT_STATUS(ot_sim_train_loop_measure(&l, 0.01, &base), OT_ERR_INVALID_ARGUMENT);
    l.nparams = 2;
    ASSERT_OK(ot_shape_make(&ps[1], OT_S32, 1, (int64_t[]){128}));
    EXPECT_STATUS(ot_sim_train_loop_measure(&l, 0.01, &base), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_sim_train_loop_measure(NULL, 0.01, &base), OT_ERR_INVALID_ARGUMENT);
    ot_executable_free(e);
}

OT_TEST_MAIN(OT_TEST(test_train_loop_probe), OT_TEST(test_host_tiers),
             OT_TEST(test_host_dot_splits), OT_TEST(test_host_kernel_model),
             OT_TEST(test_host_probe), OT_TEST(test_host_measure), OT_TEST(test_link_rings),
             OT_TEST(test_published_pod_allreduce), OT_TEST(test_ring_formula_and_busbw),
             OT_TEST(test_sim_uses_pod_model), OT_TEST(test_presets), OT_TEST(test_roofline),
             OT_TEST(test_errors_and_memory), OT_TEST(test_goodput), OT_TEST(test_full_pod))
