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

/* The all-reduce after the last device, as a step meets it: n threads run rounds back to back,
 * as train's devices run steps, each round a fixed number of dots on the runtime's pool (the
 * step's kernels; the pool's worker spins its window after each, so the members wait and wake on
 * cores that are not idle), then a 4-byte tree all-reduce, train's default; the time from the
 * round's last arrival to the last member done, per message of the tree (2 ceil(log2 n): up and
 * back down). A member goes straight on to its next round's work, so with more members than
 * cores those woken last by the tree queue for cores the first ones back have taken: with a
 * barrier between rounds (the cores free for the tree) the probe priced the all-reduce after 4
 * and 8 devices at 1/4-1/3 of what train's trace shows on 2 cores. The ring ping-pong above,
 * every member asleep between its messages, wakes each on an idle core; on this VM (haltpoll, no
 * guest polling) that is a halted vCPU's wake-up, 5 us or 40-50 us a message from one hour to
 * the next with the machine otherwise quiet. */
#define TAIL_REPS    41
#define TAIL_WORK_NS 50000.0
typedef struct {
    const ot_executable *dot;
    uint64_t arrive[TAIL_REPS][8], done[TAIL_REPS][8];
    uint64_t rejoin[TAIL_REPS][8]; /* a member's next round begun, after done */
} tail_job;

static ot_status tail_fn(void *ud, int rank, ot_comm *c) {
    tail_job *j = ud;
    int n = ot_comm_size(c);
    enum { NIO = 2 };
    void *in[NIO] = {0}, *outs[NIO] = {0};
    int64_t asz = ot_executable_arena_size(j->dot);
    void *arena = ot_calloc(1, (size_t)(asz > 64 ? asz : 64));
    ot_status s = arena ? OT_OK : ot_error(OT_ERR_OUT_OF_MEMORY, "sim calibration");
    for (int k = 0; s == OT_OK && k < ot_executable_param_count(j->dot) && k < NIO; k++)
        if (!(in[k] = ot_calloc(
                  1,
                  (size_t)ot_executable_slot(j->dot, ot_executable_param_slot(j->dot, k))->nbytes)))
            s = ot_error(OT_ERR_OUT_OF_MEMORY, "sim calibration");
    if (s == OT_OK &&
        !(outs[0] = ot_calloc(
              1, (size_t)ot_executable_slot(j->dot, ot_executable_output_slot(j->dot, 0))->nbytes)))
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "sim calibration");
    ot_run_options ro = ot_run_options_default(); /* the default pool, as a host device's */
    ot_coll_options o = ot_coll_options_default();
    o.algo = OT_ALGO_TREE;
    float v = 1;
    if (s == OT_OK) s = ot_comm_allreduce(c, &v, &v, 1, OT_F32, OT_REDOP_SUM, &o);
    /* a first round sizes the work: the dots each thread runs in TAIL_WORK_NS, the last a little
     * later (1/8 of it), from a barrier */
    int ndots = 0;
    if (s == OT_OK) s = ot_comm_barrier(c, NULL);
    uint64_t until = ot_now_ns() + (uint64_t)(TAIL_WORK_NS * (1.0 + (double)rank / (8.0 * n)));
    do {
        if (s == OT_OK) s = ot_execute_on_host(j->dot, arena, in, outs, &ro, 0, NULL);
        ndots++;
    } while (s == OT_OK && ot_now_ns() < until);
    if (s == OT_OK) s = ot_comm_allreduce(c, &v, &v, 1, OT_F32, OT_REDOP_SUM, &o);
    for (int r = 0; s == OT_OK && r <= TAIL_REPS; r++) {
        if (r > 0) j->rejoin[r - 1][rank] = ot_now_ns();
        if (r == TAIL_REPS) break;
        for (int k = 0; s == OT_OK && k < ndots; k++)
            s = ot_execute_on_host(j->dot, arena, in, outs, &ro, 0, NULL);
        j->arrive[r][rank] = ot_now_ns();
        if (s == OT_OK) s = ot_comm_allreduce(c, &v, &v, 1, OT_F32, OT_REDOP_SUM, &o);
        j->done[r][rank] = ot_now_ns();
    }
    ot_free(arena);
    for (int k = 0; k < NIO; k++) ot_free(in[k]), ot_free(outs[k]);
    return s;
}

static ot_status tail_alpha(const ot_executable *dot, int n, double *alpha_s, double *rejoin_s) {
    tail_job *j = ot_calloc(1, sizeof *j);
    if (!j) return ot_error(OT_ERR_OUT_OF_MEMORY, "sim calibration");
    j->dot = dot;
    ot_status s = ot_local_run(n, tail_fn, j, NULL);
    if (s == OT_OK) {
        double t[TAIL_REPS], w[TAIL_REPS];
        for (int r = 0; r < TAIL_REPS; r++) {
            uint64_t a = 0, d = 0, g = 0;
            for (int k = 0; k < n; k++) {
                a = j->arrive[r][k] > a ? j->arrive[r][k] : a;
                d = j->done[r][k] > d ? j->done[r][k] : d;
                g = j->rejoin[r][k] - j->done[r][k] > g ? j->rejoin[r][k] - j->done[r][k] : g;
            }
            t[r] = (double)(d - a) / 1e9;
            w[r] = (double)g / 1e9;
        }
        *rejoin_s = ot_bench_median(w, TAIL_REPS);
        int lg = 0;
        while ((1 << lg) < n) lg++;
        *alpha_s = ot_bench_median(t, TAIL_REPS) / (2.0 * lg);
    }
    ot_free(j);
    return s;
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
    /* two tiles: the smallest dot the runtime splits over its pool */
    static const char pooled_hlo[] =
        "HloModule sim_cal_pooled\n"
        "ENTRY main {\n"
        "  a = f32[128,32] parameter(0)\n"
        "  b = f32[32,128] parameter(1)\n"
        "  ROOT d = f32[128,128] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "}\n";
    ot_executable *dot = NULL, *one = NULL, *pooled = NULL;
    ot_threadpool *pool = NULL;
    ot_status s = ot_threadpool_create(1, &pool);
    if (s == OT_OK) s = compile_text(dot_hlo, &dot);
    if (s == OT_OK) s = compile_text(launch_hlo, &one);
    if (s == OT_OK) s = compile_text(pooled_hlo, &pooled);
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
        if (s == OT_OK) s = tail_alpha(pooled, n, &c.tail_alpha_s[n], &c.tail_rejoin_s[n]);
    }
    ot_executable_free(pooled);
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

static uint64_t process_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One executable's inputs, outputs and arena, zeroed, for one thread. */
enum { EXE_IO = 24 }; /* parameters and outputs (an Adam update of 4 parameters: 18 and 12) */
typedef struct {
    void *arena, *in[EXE_IO], *out[EXE_IO];
} exe_mem;

static void exe_mem_free(exe_mem *m) {
    ot_free(m->arena);
    for (int k = 0; k < EXE_IO; k++) ot_free(m->in[k]), ot_free(m->out[k]);
    memset(m, 0, sizeof *m);
}

static ot_status exe_mem_alloc(const ot_executable *e, exe_mem *m) {
    memset(m, 0, sizeof *m);
    int np = ot_executable_param_count(e), no = ot_executable_output_count(e);
    if (np > EXE_IO || no > EXE_IO)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "sim calibration: %d parameters, %d outputs (at most %d)", np, no, EXE_IO);
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
    /* dots of 256^3 and 128x32x128 go to the pool (64K multiply-adds and more, and two tiles:
     * a 64^3 dot is one tile, which the runtime runs inline), 32^3 stays inline */
    ot_status s = compile_dot(256, &e[M_DOT]);
    if (s == OT_OK)
        s = compile_text("HloModule sim_rate_sdot\nENTRY main {\n  a = f32[128,32] parameter(0)\n"
                         "  b = f32[32,128] parameter(1)\n  ROOT d = f32[128,128] dot(a, b), "
                         "lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
                         &e[M_SDOT]);
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
         * against its work); the 128x32x128 one after a gap, as in a step: the rest is hand-off */
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

/* ---- the kernel model's probes (ot_sim_host_probe_measure) ---------------------------------- */

/* Median seconds of one execution of e on m over reps runs (after one warm-up): this thread's CPU
 * time (cpu) or wall time. */
static ot_status probe_time(const ot_executable *e, exe_mem *m, ot_threadpool *pool, int reps,
                            bool cpu, double *sec) {
    ot_run_options ro = ot_run_options_default();
    ro.pool = pool; /* NULL: the runtime's default pool, as a host device's */
    double *t = ot_malloc(sizeof(double) * (size_t)reps);
    if (!t) return ot_error(OT_ERR_OUT_OF_MEMORY, "sim probe");
    ot_status s = ot_execute_on_host(e, m->arena, m->in, m->out, &ro, 0, NULL);
    for (int r = 0; s == OT_OK && r < reps; r++) {
        uint64_t w0 = ot_now_ns(), c0 = thread_cpu_ns();
        s = ot_execute_on_host(e, m->arena, m->in, m->out, &ro, 0, NULL);
        t[r] = (double)(cpu ? thread_cpu_ns() - c0 : ot_now_ns() - w0) / 1e9;
    }
    if (s == OT_OK) *sec = ot_bench_median(t, (size_t)reps);
    ot_free(t);
    return s;
}

/* f32 inputs set to 1.5 (a log or a division of zeros would take special-value paths) */
static void fill_inputs(const ot_executable *e, exe_mem *m) {
    for (int k = 0; k < ot_executable_param_count(e) && k < EXE_IO; k++) {
        const ot_slot *sl = ot_executable_slot(e, ot_executable_param_slot(e, k));
        if (sl->shape.dtype != OT_F32) continue;
        float *p = m->in[k];
        for (int64_t i = 0; i < sl->nbytes / 4; i++) p[i] = 1.5f;
    }
}

static ot_status compile_opts(const char *hlo, bool native, ot_executable **out) {
    ot_module *m = NULL;
    ot_status s = ot_hlo_parse(hlo, strlen(hlo), NULL, &m);
    ot_compile_options co = ot_compile_options_default();
    if (native) co.native = OT_NATIVE_ON;
    if (s == OT_OK) s = ot_compile(m, &co, out);
    ot_module_free(m);
    return s;
}

/* One thread's CPU seconds per run of an HLO text's executable (after one warm-up), launch
 * included; *e_out keeps the executable when asked. */
static ot_status probe_hlo(const char *hlo, bool native, ot_threadpool *one, int reps, double *sec,
                           ot_executable **e_out) {
    ot_executable *e = NULL;
    exe_mem m;
    memset(&m, 0, sizeof m);
    ot_status s = compile_opts(hlo, native, &e);
    if (s == OT_OK) s = exe_mem_alloc(e, &m);
    if (s == OT_OK) fill_inputs(e, &m);
    if (s == OT_OK) s = probe_time(e, &m, one, reps, true, sec);
    exe_mem_free(&m);
    if (e_out && s == OT_OK)
        *e_out = e;
    else
        ot_executable_free(e);
    return s;
}

#define OP_R 128
#define OP_C 64 /* 8192 f32 a probe: native code, in the caches, one piece of a loop */

/* The HLO of one class's probe over f32[OP_R, OP_C] a, b, and the instructions of the class in
 * it. */
static const char *op_probe_body(int c, int *count) {
    *count = 1;
    switch (c) {
    case OT_SIM_OP_ARITH: /* seven operations, four independent: arithmetic, not memory */
        *count = 7;
        return "  t1 = f32[128,64] add(a, b)\n  t2 = f32[128,64] multiply(a, b)\n"
               "  t3 = f32[128,64] subtract(a, b)\n  t4 = f32[128,64] maximum(a, b)\n"
               "  t5 = f32[128,64] add(t1, t2)\n  t6 = f32[128,64] multiply(t3, t4)\n"
               "  ROOT r = f32[128,64] add(t5, t6)\n";
    case OT_SIM_OP_CONVERT: /* a comparison's predicate to f32 (less the comparison) */
        return "  p = pred[128,64] compare(a, b), direction=GT\n"
               "  ROOT r = f32[128,64] convert(p)\n";
    case OT_SIM_OP_EXP: return "  ROOT r = f32[128,64] exponential(a)\n";
    case OT_SIM_OP_LOG: return "  ROOT r = f32[128,64] log(a)\n";
    case OT_SIM_OP_DIVIDE: return "  ROOT r = f32[128,64] divide(a, b)\n";
    case OT_SIM_OP_CONVERT_REDUCED: /* less the comparison, the multiply and the reduce */
        return "  p = pred[128,64] compare(a, b), direction=GT\n  c = f32[128,64] convert(p)\n"
               "  m = f32[128,64] multiply(c, b)\n  z = f32[] constant(0)\n"
               "  ROOT r = f32[128] reduce(m, z), dimensions={1}, to_apply=sum\n";
    default: /* reduce over the minor axis, of a sum (one arithmetic instruction besides) */
        return "  s = f32[128,64] add(a, b)\n  z = f32[] constant(0)\n"
               "  ROOT r = f32[128] reduce(s, z), dimensions={1}, to_apply=sum\n";
    }
}

/* The standalone HLO of dot kernel k of e (same operand shapes and dimension numbers). */
static int dot_hlo(const ot_executable *e, int k, char *buf, size_t cap) {
    const ot_kernel *kn = ot_executable_kernel(e, k);
    const ot_dot_dims *dd = kn->instr->attrs->dot;
    size_t n = (size_t)snprintf(buf, cap, "HloModule sim_probe_dot\nENTRY main {\n");
    const ot_shape *sh[3] = {&kn->instr->operands[0]->shape.array,
                             &kn->instr->operands[1]->shape.array, &kn->instr->shape.array};
    for (int o = 0; o < 3 && n < cap; o++) {
        if (o < 2)
            n += (size_t)snprintf(buf + n, cap - n, "  p%d = %s[", o, ot_dtype_name(sh[o]->dtype));
        else
            n += (size_t)snprintf(buf + n, cap - n, "  ROOT d = %s[", ot_dtype_name(sh[o]->dtype));
        for (int i = 0; i < sh[o]->rank && n < cap; i++)
            n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "",
                                  (long long)sh[o]->dims[i]);
        if (n >= cap) break;
        if (o < 2)
            n += (size_t)snprintf(buf + n, cap - n, "] parameter(%d)\n", o);
        else
            n += (size_t)snprintf(buf + n, cap - n, "] dot(p0, p1)");
    }
    const char *names[4] = {"lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims",
                            "rhs_contracting_dims"};
    const int64_t *v[4] = {dd->lhs_batch, dd->rhs_batch, dd->lhs_contract, dd->rhs_contract};
    for (int q = 0; q < 4 && n < cap; q++) {
        int cnt = q < 2 ? dd->nbatch : dd->ncontract;
        if (cnt == 0) continue;
        n += (size_t)snprintf(buf + n, cap - n, ", %s={", names[q]);
        for (int i = 0; i < cnt && n < cap; i++)
            n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)v[q][i]);
        n += (size_t)snprintf(buf + n, cap - n, "}");
    }
    if (n < cap) n += (size_t)snprintf(buf + n, cap - n, "\n}\n");
    return n < cap ? 0 : -1;
}

/* Fusion kernel k of e alone: its fused computation made the entry of a copy of e's module (every
 * computation it does not call dropped), compiled with native code whatever its size, as a step
 * runs it after its tier-up. */
static ot_status fusion_exe(const ot_executable *e, int k, ot_executable **out) {
    *out = NULL;
    const ot_kernel *kn = ot_executable_kernel(e, k);
    ot_module *m = NULL;
    OT_CHECK(ot_module_clone(ot_executable_module(e), &m));
    ot_computation *f = ot_module_find_computation(m, kn->instr->called[0]->name);
    ot_status s = f ? OT_OK
                    : ot_error(OT_ERR_INTERNAL, "sim probe: fused computation '%s' not in the copy",
                               kn->instr->called[0]->name);
    if (s == OT_OK) {
        ot_module_set_entry(m, f);
        ot_module_clear_entry_contract(m); /* the step's aliases and layout are not this entry's */
        s = ot_module_remove_unreachable(m, NULL);
    }
    ot_compile_options co = ot_compile_options_default();
    co.native = OT_NATIVE_ON;
    if (s == OT_OK) s = ot_compile(m, &co, out);
    ot_module_free(m);
    return s;
}

typedef struct {
    double share[M_MAX_DEVICES];
} avail_job;

/* every thread busy for 20 ms of wall time: the share of it this thread ran */
static ot_status avail_fn(void *ud, int rank, ot_comm *c) {
    avail_job *j = ud;
    OT_CHECK(ot_comm_barrier(c, NULL));
    uint64_t w0 = ot_now_ns(), c0 = thread_cpu_ns();
    volatile double x = 1;
    while (ot_now_ns() - w0 < 20000000u) x = x * 1.0000001 + 1e-9;
    double wall = (double)(ot_now_ns() - w0), cpu = (double)(thread_cpu_ns() - c0);
    j->share[rank] = cpu < wall ? cpu / wall : 1;
    return OT_OK;
}

ot_status ot_sim_host_probe_measure(const ot_executable *const *exes, int nexes,
                                    ot_sim_host_probe *out) {
    if (!out || nexes < 0 || (nexes > 0 && !exes))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "sim probe: NULL output or executables");
    memset(out, 0, sizeof *out);
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    out->cores = nc > 0 ? (int)nc : 1;
    ot_threadpool *one = NULL;
    ot_status s = ot_threadpool_create(1, &one);
    char hlo[2048];
    /* launch: a one-kernel executable of 4 elements */
    double tl = 0;
    if (s == OT_OK)
        s = probe_hlo("HloModule sim_probe_launch\nENTRY main {\n  x = f32[4] parameter(0)\n"
                      "  ROOT y = f32[4] add(x, x)\n}\n",
                      false, one, 401, &tl, NULL);
    /* one more kernel: a chain of 8 small dots (each its own kernel) against one */
    double t8 = 0;
    ot_executable *chain = NULL;
    if (s == OT_OK) {
        size_t n = (size_t)snprintf(hlo, sizeof hlo,
                                    "HloModule sim_probe_kernels\nENTRY main {\n"
                                    "  d0 = f32[4,4] parameter(0)\n");
        for (int k = 1; k <= 8 && n < sizeof hlo; k++)
            n += (size_t)snprintf(hlo + n, sizeof hlo - n,
                                  "  %sd%d = f32[4,4] dot(d%d, d0), lhs_contracting_dims={1}, "
                                  "rhs_contracting_dims={0}\n",
                                  k == 8 ? "ROOT " : "", k, k - 1);
        if (n < sizeof hlo) snprintf(hlo + n, sizeof hlo - n, "}\n");
        s = probe_hlo(hlo, false, one, 401, &t8, &chain);
    }
    int nk = chain ? ot_executable_kernel_count(chain) : 0;
    ot_executable_free(chain);
    out->launch_s = nk > 1 && t8 > tl ? (t8 - tl) / (nk - 1) : tl;
    out->exec_s = tl > out->launch_s ? tl - out->launch_s : 0;
#define WORK(t) ((t) > 2 * tl ? (t)-tl : (t) / 2)
    /* one thread's 256^3 dot, and the same through the default pool (wall time) */
    ot_executable *d256 = NULL, *d64 = NULL, *d32 = NULL;
    double t256 = 0;
    if (s == OT_OK) s = compile_dot(256, &d256);
    /* the smallest kind of dot the runtime splits over its pool (two tiles): 128x32x128 */
    if (s == OT_OK)
        s = compile_text(
            "HloModule sim_probe_handoff\nENTRY main {\n  a = f32[128,32] parameter(0)\n"
            "  b = f32[32,128] parameter(1)\n  ROOT d = f32[128,128] dot(a, b), "
            "lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
            &d64);
    if (s == OT_OK) s = compile_dot(32, &d32);
    exe_mem m256, m64, m32;
    memset(&m256, 0, sizeof m256), memset(&m64, 0, sizeof m64), memset(&m32, 0, sizeof m32);
    if (s == OT_OK) s = exe_mem_alloc(d256, &m256);
    if (s == OT_OK) s = exe_mem_alloc(d64, &m64);
    if (s == OT_OK) s = exe_mem_alloc(d32, &m32);
    if (s == OT_OK) s = probe_time(d256, &m256, one, 9, true, &t256);
    double f256 = (double)ot_executable_total_flops(d256);
    out->dot1_flops = f256 / WORK(t256);
    ot_threadpool *pool = ot_threadpool_default();
    out->pool_threads = pool ? ot_threadpool_size(pool) : 1;
    double tp = 0;
    if (s == OT_OK) s = probe_time(d256, &m256, NULL, 9, false, &tp);
    double sp = s == OT_OK && tp > 0 ? WORK(t256) / WORK(tp) : 1;
    out->pool_speedup = sp < 1 ? 1 : sp > out->pool_threads ? out->pool_threads : sp;
    /* every dot shape of the executables, alone on one thread; the shapes the runtime splits
     * over its pool are also timed through it in the hand-off's rounds below */
    ot_executable *pdot[OT_SIM_MAX_DOTS];
    exe_mem pmem[OT_SIM_MAX_DOTS];
    memset(pdot, 0, sizeof pdot), memset(pmem, 0, sizeof pmem);
    for (int x = 0; x < nexes && s == OT_OK; x++) {
        const ot_executable *e = exes[x];
        for (int k = 0; e && k < ot_executable_kernel_count(e) && s == OT_OK; k++) {
            uint64_t key = ot_sim_dot_key(e, k);
            bool seen = key == 0;
            for (int i = 0; i < out->ndots && !seen; i++) seen = out->dots[i].key == key;
            if (seen || out->ndots >= OT_SIM_MAX_DOTS) continue;
            if (dot_hlo(e, k, hlo, sizeof hlo) != 0) continue;
            const ot_kernel *kn = ot_executable_kernel(e, k);
            double f = (double)kn->flops, t = 0;
            /* about 2 ms of work at 50 GFLOP/s, 5 runs at least */
            int reps = (int)(1e8 / (f > 1 ? f : 1));
            reps = reps < 5 ? 5 : reps > 201 ? 201 : reps;
            ot_executable *de = NULL;
            s = probe_hlo(hlo, false, one, reps, &t, &de);
            if (s != OT_OK) break;
            int i = out->ndots++;
            out->dots[i].key = key;
            out->dots[i].flops_per_s = f / WORK(t);
            if (!ot_host_dot_splits(e, k, out->pool_threads)) {
                ot_executable_free(de);
                continue;
            }
            pdot[i] = de;
            s = exe_mem_alloc(de, &pmem[i]);
            if (s == OT_OK) fill_inputs(de, &pmem[i]);
        }
    }
    /* the hand-off: a 128x32x128 dot (a pooled kernel of little work) after `gap` of other work on
     * this thread (32^3 dots, which stay on it), wall time. The gaps take turns, round after
     * round, so that every gap's median sees the same moments: the pool's hand-off has modes that
     * last (one wake-up or two, or threads still spinning) and a probe of one gap after another
     * read a mode switch as a dependence on the gap. */
    static const double gaps_us[OT_SIM_POOL_POINTS] = {0, 3, 10, 30, 100, 300};
    ot_run_options ro1 = ot_run_options_default(), rod = ot_run_options_default();
    ro1.pool = one;
    enum { HREPS = 41, SREPS = 21 /* rounds that also time the pooled dot shapes */ };
    double t64 = 0; /* its work on one thread */
    if (s == OT_OK) s = probe_time(d64, &m64, one, 21, true, &t64);
    double ht[OT_SIM_POOL_POINTS][HREPS], hcpu[OT_SIM_POOL_POINTS];
    memset(hcpu, 0, sizeof hcpu);
    /* the pooled dot shapes: [shape][gap][round] wall, [shape][gap] CPU */
    double *swall = ot_calloc((size_t)OT_SIM_MAX_DOTS * OT_SIM_POOL_POINTS * SREPS, sizeof(double));
    double *scpu = ot_calloc((size_t)OT_SIM_MAX_DOTS * OT_SIM_POOL_POINTS, sizeof(double));
    if (s == OT_OK && (!swall || !scpu)) s = ot_error(OT_ERR_OUT_OF_MEMORY, "sim probe");
    if (s == OT_OK) s = ot_execute_on_host(d64, m64.arena, m64.in, m64.out, &rod, 0, NULL);
    for (int r = 0; r < HREPS && s == OT_OK; r++) {
        for (int g = 0; g < OT_SIM_POOL_POINTS && s == OT_OK; g++) {
            for (int i = -1; i < (r < SREPS ? out->ndots : 0) && s == OT_OK; i++) {
                if (i >= 0 && !pdot[i]) continue;
                const ot_executable *pe = i < 0 ? d64 : pdot[i];
                exe_mem *pm = i < 0 ? &m64 : &pmem[i];
                uint64_t p0 = process_cpu_ns(), g0 = ot_now_ns(), c0 = thread_cpu_ns();
                while (s == OT_OK && (double)(ot_now_ns() - g0) < gaps_us[g] * 1e3)
                    s = ot_execute_on_host(d32, m32.arena, m32.in, m32.out, &ro1, 0, NULL);
                double gap_cpu = (double)(thread_cpu_ns() - c0) / 1e9;
                uint64_t t0 = ot_now_ns();
                if (s == OT_OK)
                    s = ot_execute_on_host(pe, pm->arena, pm->in, pm->out, &rod, 0, NULL);
                double wall = (double)(ot_now_ns() - t0) / 1e9;
                double cpu = (double)(process_cpu_ns() - p0) / 1e9 - gap_cpu;
                if (i >= 0) {
                    swall[((size_t)i * OT_SIM_POOL_POINTS + g) * SREPS + r] = wall;
                    scpu[(size_t)i * OT_SIM_POOL_POINTS + g] += cpu / SREPS;
                    continue;
                }
                ht[g][r] = wall;
                /* the CPU it burns besides its work: the threads' spinning (the previous run's,
                 * cut short by this gap), wake-ups and sleeps */
                hcpu[g] += cpu - t64;
            }
        }
    }
    for (int g = 0; g < OT_SIM_POOL_POINTS && s == OT_OK; g++) {
        double cpu = hcpu[g] / HREPS;
        out->pool_gap_s[g] = gaps_us[g] * 1e-6;
        out->pool_handoff_cpu_s[g] = cpu > 0 ? cpu : 0;
        out->pool_handoff_s[g] = ot_bench_median(ht[g], HREPS);
        for (int i = 0; i < out->ndots; i++) {
            if (!pdot[i]) continue;
            out->dots[i].pool_s[g] =
                ot_bench_median(&swall[((size_t)i * OT_SIM_POOL_POINTS + g) * SREPS], SREPS);
            double c = scpu[(size_t)i * OT_SIM_POOL_POINTS + g];
            out->dots[i].pool_cpu_s[g] = c > 0 ? c : 0;
        }
    }
    ot_free(swall), ot_free(scpu);
    for (int i = 0; i < OT_SIM_MAX_DOTS; i++) exe_mem_free(&pmem[i]), ot_executable_free(pdot[i]);
    exe_mem_free(&m256), exe_mem_free(&m64), exe_mem_free(&m32);
    ot_executable_free(d256), ot_executable_free(d64), ot_executable_free(d32);
    /* the in-cache bandwidth: one add over the probes' elements, 12 bytes each */
    if (s == OT_OK) {
        snprintf(hlo, sizeof hlo,
                 "HloModule sim_probe_bw\nENTRY main {\n  a = f32[%d,%d] parameter(0)\n"
                 "  b = f32[%d,%d] parameter(1)\n  ROOT r = f32[%d,%d] add(a, b)\n}\n",
                 OP_R, OP_C, OP_R, OP_C, OP_R, OP_C);
        double t = 0;
        s = probe_hlo(hlo, true, one, 201, &t, NULL);
        out->cache_bytes_per_s = 12.0 * OP_R * OP_C / WORK(t);
    }
    /* fused instructions per class, per element */
    for (int c = 0; c < OT_SIM_OP_CLASSES && s == OT_OK; c++) {
        int count = 1;
        const char *body = op_probe_body(c, &count);
        snprintf(
            hlo, sizeof hlo,
            "HloModule sim_probe_op\nsum {\n  x = f32[] parameter(0)\n"
            "  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
            "ENTRY main {\n  a = f32[%d,%d] parameter(0)\n  b = f32[%d,%d] parameter(1)\n%s}\n",
            OP_R, OP_C, OP_R, OP_C, body);
        double t = 0;
        s = probe_hlo(hlo, true, one, 201, &t, NULL);
        double per = WORK(t) / ((double)OP_R * OP_C) / count;
        /* the comparison before a convert, the add before the reduce */
        if (c == OT_SIM_OP_CONVERT || c == OT_SIM_OP_REDUCE) per -= out->op_s[OT_SIM_OP_ARITH];
        if (c == OT_SIM_OP_CONVERT_REDUCED)
            per -= 2 * out->op_s[OT_SIM_OP_ARITH] + out->op_s[OT_SIM_OP_REDUCE];
        out->op_s[c] = per > 0 ? per : out->op_s[OT_SIM_OP_ARITH];
    }
    /* an interpreted loop fusion (3 instructions over INTERP_ELEMS) */
    if (s == OT_OK) {
        ot_executable *ie = NULL;
        exe_mem mi;
        memset(&mi, 0, sizeof mi);
        double t = 0;
        s = compile_interp(&ie);
        if (s == OT_OK) s = exe_mem_alloc(ie, &mi);
        if (s == OT_OK) s = probe_time(ie, &mi, one, 51, true, &t);
        out->interp_s = WORK(t) / (INTERP_ELEMS * 3.0);
        exe_mem_free(&mi);
        ot_executable_free(ie);
    }
    /* every native loop fusion of the executables, alone on one thread: the class costs above
     * price a fusion as the sum of its instructions, but broadcasts, reductions over other axes
     * and mixed shapes run its loop slower than its parts (the MLP step's loss fusion: a third
     * of its time alone) */
    for (int x = 0; x < nexes && s == OT_OK; x++) {
        const ot_executable *e = exes[x];
        for (int k = 0; e && k < ot_executable_kernel_count(e) && s == OT_OK; k++) {
            uint64_t key = ot_sim_fusion_key(e, k);
            bool seen = key == 0;
            for (int i = 0; i < out->nfusions && !seen; i++) seen = out->fusions[i].key == key;
            if (seen || out->nfusions >= OT_SIM_MAX_FUSIONS) continue;
            ot_executable *fe = NULL;
            exe_mem fm;
            memset(&fm, 0, sizeof fm);
            double t1 = 0, t = 0;
            s = fusion_exe(e, k, &fe);
            if (s == OT_OK) s = exe_mem_alloc(fe, &fm);
            if (s == OT_OK) fill_inputs(fe, &fm);
            if (s == OT_OK) s = probe_time(fe, &fm, one, 1, true, &t1);
            /* about 1 ms of runs, 5 at least */
            int reps = t1 > 0 ? (int)(1e-3 / t1) : 101;
            reps = reps < 5 ? 5 : reps > 101 ? 101 : reps;
            if (s == OT_OK) s = probe_time(fe, &fm, one, reps, true, &t);
            if (s == OT_OK) {
                out->fusions[out->nfusions].key = key;
                /* less the run's fixed cost; a fusion below the noise of it keeps its
                 * class sum (0) */
                out->fusions[out->nfusions].s = t > tl ? t - tl : 0;
                out->nfusions++;
            }
            exe_mem_free(&fm);
            ot_executable_free(fe);
        }
    }
#undef WORK
    ot_threadpool_free(one);
    /* other processes' load: every core busy on a thread of its own */
    if (s == OT_OK) {
        avail_job j;
        memset(&j, 0, sizeof j);
        int n = out->cores < M_MAX_DEVICES ? out->cores : M_MAX_DEVICES;
        s = ot_local_run(n, avail_fn, &j, NULL);
        double a = 0;
        for (int r = 0; r < n; r++) a += j.share[r] / n;
        out->avail = a > 0 && a <= 1 ? a : 1;
    }
    if (s != OT_OK) return ot_error_wrap(s, "sim: probing the host's kernels");
    return OT_OK;
}

/* ---- optitpu train's own work per step (ot_sim_train_loop_measure) -------------------------- */

typedef struct {
    const ot_sim_train_loop *l;
    ot_device *dev;
    float *data, *xb, *flat; /* the dataset's rows, the batch's, the gradient vector */
    int32_t *labels, *yb;
    int64_t *perm, *idx, epoch;
    uint64_t rng;
    ot_buffer **outs; /* the step's outputs: loss, correct count, one gradient per parameter */
    int64_t *sizes;   /* elements per parameter */
    uint64_t clocks;  /* folds the timeline's clock reads so none is elided */
    exe_mem *between; /* the executables run untimed between two steps' work */
} loop_state;

/* The timeline's bookkeeping of one part: a wall and a thread-CPU clock at its start and at its
 * end, and its entry found by name among the step's parts (as train's phase clock does). */
static void loop_part(loop_state *st, const char *const *names, int nnames, int part) {
    st->clocks += ot_now_ns() + thread_cpu_ns();
    st->clocks += ot_now_ns() + thread_cpu_ns();
    int k = 0;
    while (k < nnames && strcmp(names[k], names[part % nnames]) != 0) k++;
    st->clocks += (uint64_t)k;
}

/* One step's work of optitpu train's loop besides its executables' kernels and collectives: the
 * buffers the runs allocate for their outputs (the step's: loss, correct count and one gradient
 * per parameter; every other `between` executable's, with the buffers they replace freed) are
 * part of it. *cpu: this thread's CPU seconds in it. */
static ot_status loop_step(loop_state *st, int64_t step, double *cpu) {
    const ot_sim_train_loop *l = st->l;
    int np = l->nparams;
    /* the step's executables first, untimed: the work meets the caches as they leave them */
    ot_run_options ro = ot_run_options_default();
    ot_status s = OT_OK;
    for (int k = 0; k < l->nbetween && s == OT_OK; k++)
        s = ot_execute_on_host(l->between[k], st->between[k].arena, st->between[k].in,
                               st->between[k].out, &ro, 0, NULL);
    if (s != OT_OK) return s;
    uint64_t c0 = thread_cpu_ns();
    for (int k = 0; k < np + 2 && s == OT_OK; k++) {
        ot_shape sh;
        if (k < 2)
            ot_shape_make(&sh, OT_F32, 0, NULL);
        else
            sh = l->params[k - 2];
        s = ot_buffer_alloc(st->dev, &sh, &st->outs[k]);
    }
    for (int k = 1; k < l->nbetween && s == OT_OK; k++) {
        const ot_executable *e = l->between[k];
        for (int q = 0; q < ot_executable_output_count(e) && s == OT_OK; q++) {
            ot_buffer *b = NULL;
            s = ot_buffer_alloc(st->dev,
                                &ot_executable_slot(e, ot_executable_output_slot(e, q))->shape, &b);
            ot_buffer_free(b);
        }
    }
    if (s != OT_OK) return s;
    static const char *const names[] = {"input",      "forward+backward", "gather",
                                        "all-reduce", "scatter",          "optimizer"};
    int nnames = (int)(sizeof names / sizeof names[0]);
    /* input: the epoch's permutation (redrawn when the epoch changes), the batch's rows */
    int64_t per_epoch = l->dataset_rows / l->rows, epoch = step / per_epoch;
    if (epoch != st->epoch) {
        for (int64_t i = 0; i < l->dataset_rows; i++) st->perm[i] = i;
        for (int64_t i = l->dataset_rows - 1; i > 0; i--) {
            st->rng = st->rng * 6364136223846793005ull + 1442695040888963407ull;
            int64_t j = (int64_t)((st->rng >> 33) % (uint64_t)(i + 1)), t = st->perm[i];
            st->perm[i] = st->perm[j];
            st->perm[j] = t;
        }
        st->epoch = epoch;
    }
    memcpy(st->idx, st->perm + (step % per_epoch) * l->rows, (size_t)l->rows * sizeof *st->idx);
    for (int64_t i = 0; i < l->rows; i++) {
        memcpy(st->xb + i * l->features, st->data + st->idx[i] * l->features,
               (size_t)l->features * sizeof(float));
        st->yb[i] = st->labels[st->idx[i]];
    }
    ot_shape xs, ys;
    ot_tensor tx, ty;
    ot_buffer *x = NULL, *y = NULL;
    ot_shape_make(&xs, OT_F32, 2, (int64_t[]){l->rows, l->features});
    ot_shape_make(&ys, OT_S32, 1, (int64_t[]){l->rows});
    ot_tensor_borrow(&tx, &xs, st->xb);
    ot_tensor_borrow(&ty, &ys, st->yb);
    s = ot_buffer_from_host(st->dev, &tx, &x);
    if (s == OT_OK) s = ot_buffer_from_host(st->dev, &ty, &y);
    ot_buffer_free(x);
    ot_buffer_free(y);
    /* gather: each gradient into the vector, the loss and correct count; the outputs freed */
    int64_t pos = 0;
    for (int k = 0; k < np && s == OT_OK; k++) {
        s = ot_buffer_read_bytes(st->outs[2 + k], 0, st->flat + pos,
                                 st->sizes[k] * (int64_t)sizeof(float));
        pos += st->sizes[k];
    }
    for (int k = 0; k < 2 && s == OT_OK; k++)
        s = ot_buffer_read_bytes(st->outs[k], 0, st->flat + pos + k, sizeof(float));
    for (int k = 0; k < np + 2; k++) {
        ot_buffer_free(st->outs[k]);
        st->outs[k] = NULL;
    }
    /* scatter: the summed gradients back onto the device, one buffer per parameter; then the
     * optimizer's step and learning rate; every buffer freed after the update */
    ot_buffer *g[OT_SIM_MAX_LOOP_PARAMS + 2] = {0};
    pos = 0;
    for (int k = 0; k < np && s == OT_OK; k++) {
        ot_tensor h;
        ot_tensor_borrow(&h, &l->params[k], st->flat + pos);
        s = ot_buffer_from_host(st->dev, &h, &g[k]);
        pos += st->sizes[k];
    }
    float scalars[2] = {(float)step, 1e-3f};
    ot_shape ss;
    ot_shape_make(&ss, OT_F32, 0, NULL);
    for (int k = 0; k < 2 && s == OT_OK; k++) {
        ot_tensor h;
        ot_tensor_borrow(&h, &ss, &scalars[k]);
        s = ot_buffer_from_host(st->dev, &h, &g[np + k]);
    }
    for (int k = 0; k < np + 2; k++) ot_buffer_free(g[k]);
    for (int p = 0; p < l->parts; p++) loop_part(st, names, nnames, p);
    *cpu = (double)(thread_cpu_ns() - c0) / 1e9;
    return s;
}

ot_status ot_sim_train_loop_measure(const ot_sim_train_loop *l, double window_s, double *seconds) {
    if (!l || !seconds || l->rows < 1 || l->features < 1 || l->dataset_rows < l->rows ||
        l->nparams < 1 || l->nparams > OT_SIM_MAX_LOOP_PARAMS || !l->params || l->parts < 0 ||
        l->nbetween < 0 || l->nbetween > 8 || (l->nbetween > 0 && !l->between) ||
        !(window_s > 0 && window_s < 60))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "sim: train loop probe of %lld rows x %lld features from %lld, %d "
                        "parameters (1..%d), %d parts, %g s",
                        l ? (long long)l->rows : 0, l ? (long long)l->features : 0,
                        l ? (long long)l->dataset_rows : 0, l ? l->nparams : 0,
                        OT_SIM_MAX_LOOP_PARAMS, l ? l->parts : 0, window_s);
    loop_state st;
    memset(&st, 0, sizeof st);
    st.l = l;
    st.epoch = -1;
    st.rng = 0x9E3779B97F4A7C15ull;
    int64_t total = 0;
    st.sizes = ot_calloc((size_t)l->nparams, sizeof *st.sizes);
    ot_status s = st.sizes ? OT_OK : ot_error(OT_ERR_OUT_OF_MEMORY, "sim: train loop probe");
    for (int k = 0; k < l->nparams && s == OT_OK; k++) {
        if (l->params[k].dtype != OT_F32)
            s = ot_error(OT_ERR_INVALID_ARGUMENT, "sim: train loop probe: parameter %d is not f32",
                         k);
        st.sizes[k] = ot_shape_numel_unchecked(&l->params[k]);
        total += st.sizes[k];
    }
    size_t rows_bytes = (size_t)(l->dataset_rows * l->features) * sizeof(float);
    if (s == OT_OK && (!(st.data = ot_calloc(1, rows_bytes + 4)) ||
                       !(st.labels = ot_calloc((size_t)l->dataset_rows, sizeof *st.labels)) ||
                       !(st.xb = ot_calloc((size_t)(l->rows * l->features) + 1, sizeof *st.xb)) ||
                       !(st.yb = ot_calloc((size_t)l->rows, sizeof *st.yb)) ||
                       !(st.flat = ot_calloc((size_t)total + 2, sizeof *st.flat)) ||
                       !(st.perm = ot_calloc((size_t)l->dataset_rows, sizeof *st.perm)) ||
                       !(st.idx = ot_calloc((size_t)l->rows, sizeof *st.idx)) ||
                       !(st.outs = ot_calloc((size_t)l->nparams + 2, sizeof *st.outs))))
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "sim: train loop probe");
    exe_mem between[8];
    memset(between, 0, sizeof between);
    st.between = between;
    for (int k = 0; k < l->nbetween && s == OT_OK; k++) {
        if (!l->between[k])
            s = ot_error(OT_ERR_INVALID_ARGUMENT, "sim: train loop probe: executable %d is NULL",
                         k);
        if (s == OT_OK) s = exe_mem_alloc(l->between[k], &between[k]);
        if (s == OT_OK) fill_inputs(l->between[k], &between[k]);
    }
    if (s == OT_OK) s = ot_host_device_create(0, 0, &st.dev);
    /* steps one after another for the window (at least 21): the median of their CPU times */
    enum { MAX_STEPS = 4096 };
    double *t = s == OT_OK ? ot_malloc(sizeof(double) * MAX_STEPS) : NULL;
    if (s == OT_OK && !t) s = ot_error(OT_ERR_OUT_OF_MEMORY, "sim: train loop probe");
    double warm = 0;
    for (int64_t k = 0; k < 3 && s == OT_OK; k++) s = loop_step(&st, k, &warm);
    int n = 0;
    uint64_t w0 = ot_now_ns();
    while (s == OT_OK && n < MAX_STEPS && (n < 21 || (double)(ot_now_ns() - w0) < window_s * 1e9)) {
        s = loop_step(&st, 3 + n, &t[n]);
        n++;
    }
    if (s == OT_OK) *seconds = ot_bench_median(t, (size_t)n);
    __asm__ volatile("" ::"r"(st.clocks));
    ot_free(t);
    for (int k = 0; st.outs && k < l->nparams + 2; k++) ot_buffer_free(st.outs[k]);
    ot_device_free(st.dev);
    for (int k = 0; k < 8; k++) exe_mem_free(&between[k]);
    ot_free(st.outs);
    ot_free(st.idx);
    ot_free(st.perm);
    ot_free(st.flat);
    ot_free(st.yb);
    ot_free(st.xb);
    ot_free(st.labels);
    ot_free(st.data);
    ot_free(st.sizes);
    if (s != OT_OK) return ot_error_wrap(s, "sim: train loop probe");
    return OT_OK;
}
