/*
 * The "host" device model, measured on this machine: a dot through the runtime (peak FLOP/s),
 * bench limits' STREAM, memcpy and file figures, a one-kernel executable's launch cost and the
 * in-process all-reduce's per-message cost.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "optitpu/bench.h"
#include "optitpu/collectives.h"
#include "optitpu/compiler.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "optitpu/sim.h"

static ot_status compile_text(const char *hlo, ot_executable **out) {
    ot_module *m = NULL;
    ot_status s = ot_hlo_parse(hlo, strlen(hlo), NULL, &m);
    if (s == OT_OK) s = ot_compile(m, NULL, out);
    ot_module_free(m);
    return s;
}

/* Median seconds per execution of exe over reps runs (after one warm-up), on zeroed memory, with
 * the fast kernels on one thread (a device thread's own speed). */
static ot_status time_exe(const ot_executable *e, int reps, ot_threadpool *pool, double *sec) {
    ot_run_options ro = ot_run_options_default();
    ro.pool = pool;
    enum { MAXIO = 4 };
    void *in[MAXIO] = {0}, *outs[MAXIO] = {0};
    int np = ot_executable_param_count(e), no = ot_executable_output_count(e);
    if (np > MAXIO || no > MAXIO) return ot_error(OT_ERR_INTERNAL, "sim calibration: arity");
    ot_status s = OT_OK;
    int64_t asz = ot_executable_arena_size(e);
    void *arena = ot_calloc(1, (size_t)(asz > 64 ? asz : 64));
    for (int k = 0; k < np; k++)
        in[k] = ot_calloc(1, (size_t)ot_executable_slot(e, ot_executable_param_slot(e, k))->nbytes +
                                 64);
    for (int k = 0; k < no; k++)
        outs[k] = ot_calloc(
            1, (size_t)ot_executable_slot(e, ot_executable_output_slot(e, k))->nbytes + 64);
    double *t = ot_malloc(sizeof(double) * (size_t)reps);
    if (!arena || !t) s = ot_error(OT_ERR_OUT_OF_MEMORY, "sim calibration");
    for (int k = 0; s == OT_OK && k < np; k++)
        if (!in[k]) s = ot_error(OT_ERR_OUT_OF_MEMORY, "sim calibration");
    for (int k = 0; s == OT_OK && k < no; k++)
        if (!outs[k]) s = ot_error(OT_ERR_OUT_OF_MEMORY, "sim calibration");
    if (s == OT_OK) s = ot_execute_on_host(e, arena, in, outs, &ro, 0, NULL);
    for (int r = 0; s == OT_OK && r < reps; r++) {
        uint64_t t0 = ot_now_ns();
        s = ot_execute_on_host(e, arena, in, outs, &ro, 0, NULL);
        t[r] = (double)(ot_now_ns() - t0) / 1e9;
    }
    if (s == OT_OK) *sec = ot_bench_median(t, (size_t)reps);
    ot_free(t);
    ot_free(arena);
    for (int k = 0; k < MAXIO; k++) ot_free(in[k]), ot_free(outs[k]);
    return s;
}

typedef struct {
    int reps;
    double sec; /* rank 0's median per all-reduce */
} alpha_job;

static ot_status alpha_fn(void *ud, int rank, ot_comm *c) {
    alpha_job *j = ud;
    float v = 1;
    ot_coll_options o = ot_coll_options_default();
    o.algo = OT_ALGO_RING;
    double t[64];
    int reps = j->reps < 64 ? j->reps : 64;
    OT_CHECK(ot_comm_allreduce(c, &v, &v, 1, OT_F32, OT_REDOP_SUM, &o));
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = ot_now_ns();
        OT_CHECK(ot_comm_allreduce(c, &v, &v, 1, OT_F32, OT_REDOP_SUM, &o));
        t[r] = (double)(ot_now_ns() - t0) / 1e9;
    }
    if (rank == 0) j->sec = ot_bench_median(t, (size_t)reps);
    return OT_OK;
}

ot_status ot_sim_device_host_calibrate(const char *tmp_dir, ot_sim_device *out,
                                       ot_sim_host_calibration *cal) {
    ot_sim_host_calibration c;
    memset(&c, 0, sizeof c);
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    c.cores = nc > 0 ? (int)nc : 1;
    static const char dot_hlo[] =
        "HloModule sim_cal_dot\n"
        "ENTRY main {\n"
        "  a = f32[256,256] parameter(0)\n"
        "  b = f32[256,256] parameter(1)\n"
        "  ROOT d = f32[256,256] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "}\n";
    static const char launch_hlo[] = "HloModule sim_cal_launch\n"
                                     "ENTRY main {\n"
                                     "  x = f32[4] parameter(0)\n"
                                     "  ROOT y = f32[4] add(x, x)\n"
                                     "}\n";
    ot_executable *dot = NULL, *one = NULL;
    ot_threadpool *pool = NULL;
    ot_status s = ot_threadpool_create(1, &pool);
    if (s == OT_OK) s = compile_text(dot_hlo, &dot);
    if (s == OT_OK) s = compile_text(launch_hlo, &one);
    double td = 0, tl = 0;
    if (s == OT_OK) s = time_exe(dot, 15, pool, &td);
    if (s == OT_OK) s = time_exe(one, 2001, pool, &tl);
    ot_threadpool_free(pool);
    if (s == OT_OK) {
        c.launch_s = tl;
        /* the dot's own launch is part of td; what remains is arithmetic */
        c.dot_flops = (double)ot_executable_total_flops(dot) / (td > tl ? td - tl : td);
    }
    ot_executable_free(dot);
    ot_executable_free(one);
    if (s == OT_OK) {
        ot_bench_limits_options lo = ot_bench_limits_options_default();
        lo.what = OT_BENCH_LIMIT_MEMCPY | OT_BENCH_LIMIT_STREAM | OT_BENCH_LIMIT_DISK;
        lo.reps = 3;
        lo.file_bytes = 32u << 20;
        lo.stream_bytes = 64u << 20; /* past the caches, seconds less than the default */
        lo.tmp_dir = tmp_dir;
        lo.threads = 1; /* a device thread's bandwidth */
        ot_bench_limits l;
        s = ot_bench_limits_measure(&lo, &l);
        if (s == OT_OK) {
            c.stream_bytes_per_s = l.triad_gbs * 1e9;
            c.memcpy_bytes_per_s = l.memcpy_gbs * 1e9;
            c.write_bytes_per_s = l.write_fsync_gbs * 1e9;
            c.read_bytes_per_s = l.read_gbs * 1e9;
            lo.what = OT_BENCH_LIMIT_MEMCPY; /* the bus: every core copying */
            lo.threads = 0;
            s = ot_bench_limits_measure(&lo, &l);
            if (s == OT_OK) c.memcpy_all_bytes_per_s = l.memcpy_gbs * 1e9;
        }
    }
    /* n device threads on `cores` cores: each runs min(1, cores / n) of the time (other
     * processes' load is not modelled; the benchmark prints the load average beside it) */
    for (int n = 1; n <= 8; n++) c.core_share[n] = n <= c.cores ? 1.0 : (double)c.cores / n;
    /* a 4-byte ring all-reduce is 2(n-1) messages and no bandwidth to speak of */
    for (int n = 2; s == OT_OK && n <= 8; n++) {
        alpha_job j = {.reps = 41};
        s = ot_local_run(n, alpha_fn, &j, NULL);
        c.alpha_s[n] = j.sec / (2.0 * (n - 1));
    }
    if (s != OT_OK) return ot_error_wrap(s, "sim: calibrating the host device model");
    if (cal) *cal = c;
    if (out) ot_sim_device_host_from(&c, 1, out);
    return OT_OK;
}
