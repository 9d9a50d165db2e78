/*
 * The "host" device model, measured on this machine: a dot through the runtime (peak FLOP/s),
 * bench limits' STREAM, memcpy and file figures, a one-kernel executable's launch cost and the
 * in-process all-reduce's per-message cost.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

/* ---- rates with every device thread running (ot_sim_host_measure) --------------------------- */

/* Pooled figures (the kernel hands its work to the runtime's pool: other threads) first, then
 * those that run on the calling thread alone. */
enum { M_DOT, M_SDOT, M_MEM, M_CDOT, M_CMEM, M_LAUNCH, M_INTERP, M_NEXE };
#define M_POOLED(k) ((k) <= M_MEM)
enum { M_TRANSFER = M_NEXE, M_COPY, M_ALPHA, M_N };
#define M_MAX_DEVICES 64
#define COPY_BYTES    (64 << 10)

typedef struct {
    const ot_executable *exe[M_NEXE];
    double window_ns;
    double sec[M_N][M_MAX_DEVICES];   /* per rank: seconds running per unit of figure k */
    double share[M_MAX_DEVICES];      /* per rank: its CPU time / wall time while busy */
    uint64_t span_start, span_end;    /* ot_now_ns of this round's share span */
    double alpha_wall[M_MAX_DEVICES]; /* per rank: wall seconds per 4-byte all-reduce */
} measure_job;

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One executable's inputs, outputs and arena, zeroed, for one thread. */
typedef struct {
    void *arena, *in[4], *out[4];
} exe_mem;

static void exe_mem_free(exe_mem *m) {
    ot_free(m->arena);
    for (int k = 0; k < 4; k++) ot_free(m->in[k]), ot_free(m->out[k]);
    memset(m, 0, sizeof *m);
}

static ot_status exe_mem_alloc(const ot_executable *e, exe_mem *m) {
    memset(m, 0, sizeof *m);
    int np = ot_executable_param_count(e), no = ot_executable_output_count(e);
    if (np > 4 || no > 4) return ot_error(OT_ERR_INTERNAL, "sim calibration: arity");
    int64_t asz = ot_executable_arena_size(e);
    bool ok = (m->arena = ot_calloc(1, (size_t)(asz > 64 ? asz : 64))) != NULL;
    for (int k = 0; ok && k < np; k++)
        ok = (m->in[k] = ot_calloc(
                  1, (size_t)ot_executable_slot(e, ot_executable_param_slot(e, k))->nbytes + 64));
    for (int k = 0; ok && k < no; k++)
        ok = (m->out[k] = ot_calloc(
                  1, (size_t)ot_executable_slot(e, ot_executable_output_slot(e, k))->nbytes + 64));
    if (!ok) {
        exe_mem_free(m);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "sim calibration");
    }
    return OT_OK;
}

/* Each figure is timed in rounds: every round runs each figure's work for a quantum (at least
 * once) after all members reached it, round after round until the window has passed, so every
 * figure sees the same moments of the machine's load. */
#define QUANTUM_NS      1000000.0
#define ALPHA_PER_ROUND 8
#define SPAN_NS         5000000u /* the share's span per round */
#define SPAN_LEAD_NS    200000u  /* from its announcement to its start */
#define POOL_GAP_NS     200000u  /* own-thread work before each timed hand-off to the pool */

typedef struct {
    measure_job *j;
    int rank, n;
    ot_comm *c;
    exe_mem mem[M_NEXE];
    ot_device *dev;
    ot_tensor ht;
    char *copy;
    double total[M_N];          /* wall seconds */
    double cpu[M_N];            /* this thread's CPU seconds in them */
    double span_cpu, span_wall; /* the share's spans */
    int64_t count[M_N];
} measure_thread;

static ot_status item_once(measure_thread *m, int k, int64_t it) {
    switch (k) {
    case M_TRANSFER: { /* a small buffer onto a host device and back: two transfers */
        ot_buffer *b = NULL;
        ot_tensor back;
        ot_status s = ot_buffer_from_host(m->dev, &m->ht, &b);
        if (s == OT_OK) s = ot_buffer_to_host(b, &back);
        if (s == OT_OK) ot_tensor_release(&back);
        ot_buffer_free(b);
        return s;
    }
    case M_COPY:
        memcpy(m->copy + (it & 1 ? 0 : COPY_BYTES), m->copy + (it & 1 ? COPY_BYTES : 0),
               COPY_BYTES);
        __asm__ volatile("" ::"r"(m->copy) : "memory"); /* the copy is not elided */
        return OT_OK;
    case M_ALPHA: { /* a 4-byte ring all-reduce: 2(n-1) messages, no bandwidth to speak of */
        float v = 1;
        ot_coll_options o = ot_coll_options_default();
        o.algo = OT_ALGO_RING;
        return ot_comm_allreduce(m->c, &v, &v, 1, OT_F32, OT_REDOP_SUM, &o);
    }
    default: {
        ot_run_options ro = ot_run_options_default(); /* the default pool, as a host device's */
        return ot_execute_on_host(m->j->exe[k], m->mem[k].arena, m->mem[k].in, m->mem[k].out, &ro,
                                  0, NULL);
    }
    }
}

static ot_status measure_rounds(measure_thread *m) {
    int nitems = m->n > 1 ? M_N : M_ALPHA;                         /* no all-reduce on one device */
    for (int k = 0; k < nitems; k++) OT_CHECK(item_once(m, k, 0)); /* warm-up */
    uint64_t start = ot_now_ns();
    for (;;) {
        for (int k = 0; k < nitems; k++) {
            OT_CHECK(ot_comm_barrier(m->c, NULL));
            uint64_t t0 = ot_now_ns(), t1 = t0, c0 = thread_cpu_ns();
            int64_t it = 0;
            if (k == M_SDOT) {
                /* the small pooled dot as a step meets one: after work on the device's own
                 * thread long enough for the pool's threads to have gone to sleep (their spin
                 * is bounded), so what it takes beyond its work is the hand-off to a sleeping
                 * pool under this moment's load; only the dot is timed */
                double wall = 0, cpu = 0;
                do {
                    for (uint64_t g = ot_now_ns(); ot_now_ns() - g < POOL_GAP_NS;)
                        OT_CHECK(item_once(m, M_CDOT, 0));
                    uint64_t a = ot_now_ns(), ca = thread_cpu_ns();
                    OT_CHECK(item_once(m, k, it));
                    it++;
                    t1 = ot_now_ns();
                    wall += (double)(t1 - a) / 1e9;
                    cpu += (double)(thread_cpu_ns() - ca) / 1e9;
                } while ((double)(t1 - t0) < 2 * QUANTUM_NS);
                m->total[k] += wall;
                m->cpu[k] += cpu;
                m->count[k] += it;
                continue;
            }
            /* a collective runs as often on every member: a fixed count */
            do {
                OT_CHECK(item_once(m, k, it));
                it++;
                t1 = ot_now_ns();
            } while (k == M_ALPHA ? it < ALPHA_PER_ROUND : (double)(t1 - t0) < QUANTUM_NS);
            m->total[k] += (double)(t1 - t0) / 1e9;
            m->cpu[k] += (double)(thread_cpu_ns() - c0) / 1e9;
            m->count[k] += it;
        }
        /* the share: every device thread busy on its own work over one span of wall time
         * common to all (a thread kept off the cores at its start loses that time too) */
        if (m->rank == 0) {
            m->j->span_start = ot_now_ns() + SPAN_LEAD_NS;
            m->j->span_end = m->j->span_start + SPAN_NS;
        }
        OT_CHECK(ot_comm_barrier(m->c, NULL)); /* publishes the span */
        uint64_t s0 = m->j->span_start, s1 = m->j->span_end;
        while (ot_now_ns() < s0) {
        }
        uint64_t c0 = thread_cpu_ns();
        for (int64_t it = 0; ot_now_ns() < s1; it++) OT_CHECK(item_once(m, M_CMEM, it));
        m->span_cpu += (double)(thread_cpu_ns() - c0) / 1e9;
        m->span_wall += (double)(s1 - s0) / 1e9;
        /* the leader's clock ends the rounds for everyone */
        float more = m->rank == 0 && (double)(ot_now_ns() - start) < m->j->window_ns ? 1.f : 0.f;
        OT_CHECK(ot_comm_allreduce(m->c, &more, &more, 1, OT_F32, OT_REDOP_SUM, NULL));
        if (more == 0) break;
    }
    return OT_OK;
}

static ot_status measure_fn(void *ud, int rank, ot_comm *c) {
    measure_job *j = ud;
    measure_thread m;
    memset(&m, 0, sizeof m);
    m.j = j;
    m.rank = rank;
    m.n = ot_comm_size(c);
    m.c = c;
    static float small[1024]; /* read only */
    ot_shape sh;
    ot_shape_make(&sh, OT_F32, 1, (int64_t[]){1024});
    ot_tensor_borrow(&m.ht, &sh, small);
    ot_status s = ot_host_device_create(rank, 0, &m.dev);
    for (int k = 0; k < M_NEXE && s == OT_OK; k++) s = exe_mem_alloc(j->exe[k], &m.mem[k]);
    if (s == OT_OK && !(m.copy = ot_calloc(2, COPY_BYTES)))
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "sim calibration");
    if (s == OT_OK) s = measure_rounds(&m);
    /* work on this thread alone costs its CPU time (robust to being kept off the cores); how
     * much of the wall time the thread runs is its share, over the spans */
    for (int k = 0; k < M_N; k++) {
        /* pooled kernels: wall time (their work is on other threads too, and they wait for
         * them); the all-reduce: wall time (it waits for the other members) */
        bool own = !(k < M_NEXE && M_POOLED(k)) && k != M_ALPHA;
        double t = own ? m.cpu[k] : m.total[k];
        j->sec[k][rank] = m.count[k] ? t / (double)m.count[k] : 0;
    }
    j->share[rank] = m.span_wall > 0 && m.span_cpu > 0 && m.span_cpu < m.span_wall
                         ? m.span_cpu / m.span_wall
                         : 1;
    j->alpha_wall[rank] = m.count[M_ALPHA] ? m.total[M_ALPHA] / (double)m.count[M_ALPHA] : 0;
    ot_free(m.copy);
    for (int k = 0; k < M_NEXE; k++) exe_mem_free(&m.mem[k]);
    ot_device_free(m.dev);
    return s;
}

static ot_status compile_add(int64_t elems, ot_executable **out) {
    char hlo[256];
    snprintf(hlo, sizeof hlo,
             "HloModule sim_rate_add\nENTRY main {\n  a = f32[%lld] parameter(0)\n"
             "  b = f32[%lld] parameter(1)\n  ROOT c = f32[%lld] add(a, b)\n}\n",
             (long long)elems, (long long)elems, (long long)elems);
    return compile_text(hlo, out);
}

static ot_status compile_dot(int d, ot_executable **out) {
    char hlo[320];
    snprintf(hlo, sizeof hlo,
             "HloModule sim_rate_dot\nENTRY main {\n  a = f32[%d,%d] parameter(0)\n"
             "  b = f32[%d,%d] parameter(1)\n  ROOT d = f32[%d,%d] dot(a, b), "
             "lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
             d, d, d, d, d, d);
    return compile_text(hlo, out);
}

/* A loop fusion of three instructions over INTERP_ELEMS f32, without native code. */
#define INTERP_ELEMS 4096
static ot_status compile_interp(ot_executable **out) {
    char hlo[512];
    snprintf(hlo, sizeof hlo,
             "HloModule sim_rate_interp\nENTRY main {\n  a = f32[%d] parameter(0)\n"
             "  b = f32[%d] parameter(1)\n  m = f32[%d] multiply(a, b)\n"
             "  s = f32[%d] add(m, a)\n  ROOT r = f32[%d] maximum(s, b)\n}\n",
             INTERP_ELEMS, INTERP_ELEMS, INTERP_ELEMS, INTERP_ELEMS, INTERP_ELEMS);
    ot_module *m = NULL;
    ot_status s = ot_hlo_parse(hlo, strlen(hlo), NULL, &m);
    ot_compile_options co = ot_compile_options_default();
    co.native = OT_NATIVE_OFF;
    if (s == OT_OK) s = ot_compile(m, &co, out);
    ot_module_free(m);
    if (s == OT_OK && (ot_executable_kernel_count(*out) != 1 ||
                       ot_executable_kernel(*out, 0)->kind != OT_KERNEL_FUSION)) {
        ot_executable_free(*out);
        *out = NULL;
        s = ot_error(OT_ERR_INTERNAL, "sim calibration: the interpreter's probe is not one fusion");
    }
    return s;
}

ot_status ot_sim_host_measure(int devices, double window_s, ot_sim_host_rates *out) {
    if (!out || devices < 1 || devices > M_MAX_DEVICES || !(window_s > 0 && window_s < 60))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "sim: measuring %d devices (1..%d) for %g s windows (0 < w < 60)", devices,
                        M_MAX_DEVICES, window_s);
    measure_job *j = ot_calloc(1, sizeof *j);
    if (!j) return ot_error(OT_ERR_OUT_OF_MEMORY, "sim calibration");
    j->window_ns = window_s * 1e9;
    ot_executable *e[M_NEXE] = {0};
    /* 64 MiB over all devices: past a last-level cache of 32 MiB whatever the count */
    int64_t mem_elems = ((int64_t)64 << 20) / 12 / devices;
    /* dots of 64^3 and 256^3 multiply-adds go to the pool (64K and more), 32^3 stays inline */
    ot_status s = compile_dot(256, &e[M_DOT]);
    if (s == OT_OK) s = compile_dot(64, &e[M_SDOT]);
    if (s == OT_OK) s = compile_dot(32, &e[M_CDOT]);
    if (s == OT_OK) s = compile_add(mem_elems, &e[M_MEM]);
    if (s == OT_OK) s = compile_add(16384, &e[M_CMEM]); /* 192 KiB */
    if (s == OT_OK) s = compile_add(4, &e[M_LAUNCH]);
    if (s == OT_OK) s = compile_interp(&e[M_INTERP]);
    for (int k = 0; k < M_NEXE; k++) j->exe[k] = e[k];
    if (s == OT_OK) s = ot_local_run(devices, measure_fn, j, NULL);
    if (s == OT_OK) {
        /* wall seconds per unit, averaged over the threads: work on a thread alone is its CPU
         * time over the share a busy device thread got (the mean over the threads) */
        double m[M_N] = {0}, share = 0;
        for (int r = 0; r < devices; r++) share += j->share[r] / devices;
        for (int k = 0; k < M_N; k++) {
            bool own = !(k < M_NEXE && M_POOLED(k)) && k != M_ALPHA;
            for (int r = 0; r < devices; r++)
                m[k] += (k == M_ALPHA ? j->alpha_wall[r] : j->sec[k][r]) / devices;
            if (own) m[k] /= share; /* CPU seconds at the threads' mean share of the time */
        }
        memset(out, 0, sizeof *out);
        out->devices = devices;
        out->window_s = window_s;
        double tl = m[M_LAUNCH];
        /* the kernel's own launch is in each time; what remains is its work */
#define WORK(k) (m[k] > 2 * tl ? m[k] - tl : m[k] / 2) /* launch-bound: half of it */
        /* a pooled kernel: hand-off + work at the pool's rate, from the two dots' times */
        double fl = (double)ot_executable_total_flops(e[M_DOT]);
        double fs = (double)ot_executable_total_flops(e[M_SDOT]);
        double tL = WORK(M_DOT), tS = WORK(M_SDOT);
        /* the 256^3 dots run back to back (the pool's threads awake: its hand-off is small
         * against its work); the 64^3 one after a gap, as in a step: the rest is hand-off */
        out->dot_flops = fl / tL;
        out->pool_s = tS - fs / out->dot_flops > 0 ? tS - fs / out->dot_flops : 0;
        out->cache_flops = (double)ot_executable_total_flops(e[M_CDOT]) / WORK(M_CDOT);
        double tm = WORK(M_MEM) > out->pool_s ? WORK(M_MEM) - out->pool_s : WORK(M_MEM);
        out->mem_bytes_per_s = (double)ot_executable_total_bytes(e[M_MEM]) / tm;
        out->cache_bytes_per_s = (double)ot_executable_total_bytes(e[M_CMEM]) / WORK(M_CMEM);
        out->launch_s = tl;
        out->interp_s = WORK(M_INTERP) / (INTERP_ELEMS * 3.0);
#undef WORK
        out->transfer_s = m[M_TRANSFER] / 2;
        out->copy_bytes_per_s = 2.0 * COPY_BYTES / m[M_COPY];
        /* sysfs's cache, not sysconf's: on a VM sysconf can report the host socket's (320 MiB
         * here for a 32 MiB L3), and 16 MiB blocks were then priced at the in-cache rate */
        size_t llc = ot_bench_llc_bytes();
        out->llc_bytes = llc > 0 ? (double)llc : (double)ot_host_inline_bytes();
        out->alpha_s = devices > 1 ? m[M_ALPHA] / (2.0 * (devices - 1)) : 0;
        out->cache_limit_bytes = (double)ot_host_inline_bytes();
        out->core_share = share;
    }
    for (int k = 0; k < M_NEXE; k++) ot_executable_free(e[k]);
    ot_free(j);
    if (s != OT_OK) return ot_error_wrap(s, "sim: measuring %d in-process devices", devices);
    return OT_OK;
}
