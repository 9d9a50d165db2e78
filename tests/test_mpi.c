/* The MPI communicator, run by tests/test_mpi_np2.sh and test_mpi_np4.sh under mpirun (and
 * alone as a one-process job). Every collective x op x dtype x algorithm over MPI against the
 * naive reference; all-reduce results bit-identical on every rank and equal to the in-process
 * transport running the same algorithm; MPI's own all-reduce and the measured choice; the
 * hierarchical all-reduce over K local devices per process; the split-phase sharded exchange
 * against the reduce-scatter; MPI errors as ot_status with MPI's
 * message; barriers with deadlines; heartbeats and membership epochs led by rank 0. */
#include "ot_test.h"

#include "mpi/mpi_internal.h"
#include "optitpu/collectives.h"
#include "optitpu/mpi.h"

#include <pthread.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static ot_mpi *M;
static int R, P;

static uint32_t hash3(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA77u ^ (c + 1) * 0xC2B2AE3Du;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    return h;
}

/* exact in every dtype: quarters in [-2, 2] (floats), integers in [-1000, 1000] */
static double val(int k, int r, size_t i, ot_redop op, ot_dtype dt) {
    uint32_t h = hash3((uint32_t)k, (uint32_t)r, (uint32_t)i);
    if (op == OT_REDOP_PROD) {
        static const double f[] = {0.5, 1, 2, -1, -0.5, 1};
        static const double n[] = {1, -1, 2, -2, 1, 0};
        return ot_dtype_is_float(dt) ? f[h % 6] : n[h % 6];
    }
    if (ot_dtype_is_float(dt)) return (double)((int)(h % 17) - 8) / 4.0;
    return (double)((int)(h % 2001) - 1000);
}

static void put(void *buf, size_t i, ot_dtype dt, double v) {
    switch (dt) {
    case OT_F32: ((float *)buf)[i] = (float)v; break;
    case OT_F64: ((double *)buf)[i] = v; break;
    case OT_F16: ((uint16_t *)buf)[i] = ot_f32_to_f16((float)v); break;
    case OT_BF16: ((uint16_t *)buf)[i] = ot_f32_to_bf16((float)v); break;
    case OT_S32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case OT_S64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: abort();
    }
}

static void fill(void *buf, int k, int r, size_t n, ot_redop op, ot_dtype dt) {
    for (size_t i = 0; i < n; i++) put(buf, i, dt, val(k, r, i, op, dt));
}

/* the naive reference over members 0..n-1 (rank order; values are exact so every order agrees) */
static double ref(int k, int n, size_t i, ot_redop op, ot_dtype dt) {
    double acc = 0;
    for (int r = 0; r < n; r++) {
        double v = val(k, r, i, op, dt);
        if (r == 0)
            acc = v;
        else if (op == OT_REDOP_SUM || op == OT_REDOP_MEAN)
            acc += v;
        else if (op == OT_REDOP_PROD)
            acc *= v;
        else if (op == OT_REDOP_MAX)
            acc = v > acc ? v : acc;
        else
            acc = v < acc ? v : acc;
    }
    if (op == OT_REDOP_MEAN) acc = ot_dtype_is_float(dt) ? acc / n : (double)((int64_t)acc / n);
    return acc;
}

/* every rank holds the same bytes: compare a digest with everybody's */
static bool same_on_all_ranks(const void *buf, size_t bytes) {
    uint8_t d[32];
    ot_sha256_digest(buf, bytes, d);
    uint8_t *all = malloc(32 * (size_t)P);
    MPI_Allgather(d, 32, MPI_BYTE, all, 32, MPI_BYTE, ot_mpi_world_comm(M));
    bool ok = true;
    for (int r = 0; r < P; r++) ok = ok && !memcmp(all + 32 * r, d, 32);
    free(all);
    return ok;
}

/* pipelining chunk of the exhaustive tests: tiny by default (many pieces even at small sizes);
 * the two-host run over TCP sets OT_TEST_CHUNK larger to stay quick */
static size_t test_chunk(void) {
    const char *e = getenv("OT_TEST_CHUNK");
    long v = e ? atol(e) : 0;
    return v > 0 ? (size_t)v : 64;
}

static const ot_dtype DTS[] = {OT_F32, OT_F64, OT_F16, OT_BF16, OT_S32, OT_S64};
static const size_t SIZES[] = {0, 1, 7, 1001};

/* ---- the in-process twin: the same algorithm over the local transport ---- */

static void fill_round(float *x, int r, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(hash3(9, (uint32_t)r, (uint32_t)i) % 100000) * 1.37e-3f + 1e-7f * (float)r;
}

typedef struct twin {
    bool rounding; /* fill_round instead of the exact values */
    int k;
    ot_redop op;
    ot_dtype dt;
    size_t n;
    ot_coll_algo algo;
    void *out; /* rank 0's result */
} twin;

static ot_status twin_rank(void *ud, int rank, ot_comm *c) {
    twin *t = ud;
    size_t bytes = t->n * ot_dtype_size(t->dt);
    void *b = malloc(bytes ? bytes : 1);
    if (t->rounding)
        fill_round(b, rank, t->n);
    else
        fill(b, t->k, rank, t->n, t->op, t->dt);
    ot_coll_options o = ot_coll_options_default();
    o.algo = t->algo;
    ot_status st = ot_comm_allreduce(c, b, b, t->n, t->dt, t->op, &o);
    if (rank == 0 && st == OT_OK) memcpy(t->out, b, bytes);
    free(b);
    return st;
}

static void test_allreduce_every_algo_op_dtype(void) {
    ot_comm *c = ot_mpi_comm(M);
    const ot_coll_algo algos[] = {OT_ALGO_RING, OT_ALGO_HALVING_DOUBLING, OT_ALGO_TREE};
    int k = 0, mismatches = 0;
    for (size_t a = 0; a < 3; a++)
        for (int op = 0; op < OT_REDOP_COUNT; op++)
            for (size_t d = 0; d < sizeof DTS / sizeof *DTS; d++)
                for (size_t s = 0; s < sizeof SIZES / sizeof *SIZES; s++, k++) {
                    ot_dtype dt = DTS[d];
                    size_t n = SIZES[s], esz = ot_dtype_size(dt);
                    char *send = malloc(n * esz + 1), *recv = malloc(n * esz + 1);
                    char *want = malloc(n * esz + 1), *tw = malloc(n * esz + 1);
                    fill(send, k, R, n, (ot_redop)op, dt);
                    for (size_t i = 0; i < n; i++) put(want, i, dt, ref(k, P, i, (ot_redop)op, dt));
                    ot_coll_options o = ot_coll_options_default();
                    o.algo = algos[a];
                    o.chunk_bytes = test_chunk(); /* many pipeline pieces even at these sizes */
                    bool inplace = s % 2;
                    if (inplace) memcpy(recv, send, n * esz);
                    EXPECT_OK(
                        ot_comm_allreduce(c, inplace ? recv : send, recv, n, dt, (ot_redop)op, &o));
                    if (n && memcmp(recv, want, n * esz)) {
                        if (mismatches++ < 5)
                            OT_T_FAIL_("allreduce %s %s %s n=%zu differs from the reference",
                                       ot_coll_algo_name(algos[a]), ot_redop_name(op),
                                       ot_dtype_name(dt), n);
                    }
                    EXPECT_TRUE(same_on_all_ranks(recv, n * esz));
                    /* the in-process transport, same algorithm, same member count */
                    twin t = {false, k, (ot_redop)op, dt, n, algos[a], tw};
                    EXPECT_OK(ot_local_run(P, twin_rank, &t, NULL));
                    if (n && memcmp(recv, tw, n * esz) && mismatches++ < 5)
                        OT_T_FAIL_("allreduce %s %s %s n=%zu differs from in-process",
                                   ot_coll_algo_name(algos[a]), ot_redop_name(op),
                                   ot_dtype_name(dt), n);
                    free(send), free(recv), free(want), free(tw);
                }
    EXPECT_INT_EQ(mismatches, 0);
}

/* a float sum whose rounding depends on the order: still bit-identical everywhere and equal to
 * the in-process run of the same algorithm */
static void test_allreduce_rounding_matches_in_process(void) {
    size_t n = 100003;
    float *x = malloc(n * 4), *tw = malloc(n * 4);
    const ot_coll_algo algos[] = {OT_ALGO_RING, OT_ALGO_HALVING_DOUBLING, OT_ALGO_TREE};
    for (int a = 0; a < 3; a++) {
        fill_round(x, R, n);
        ot_coll_options o = ot_coll_options_default();
        o.algo = algos[a];
        EXPECT_OK(ot_comm_allreduce(ot_mpi_comm(M), x, x, n, OT_F32, OT_REDOP_SUM, &o));
        EXPECT_TRUE(same_on_all_ranks(x, n * 4));
        twin t = {true, 0, OT_REDOP_SUM, OT_F32, n, algos[a], tw};
        EXPECT_OK(ot_local_run(P, twin_rank, &t, NULL));
        EXPECT_TRUE(!memcmp(x, tw, n * 4));
    }
    free(x), free(tw);
}

/* the other collectives over MPI against the reference */
static void test_other_collectives(void) {
    ot_comm *c = ot_mpi_comm(M);
    int k = 1000, bad = 0;
    for (size_t d = 0; d < sizeof DTS / sizeof *DTS; d++)
        for (size_t s = 0; s < sizeof SIZES / sizeof *SIZES; s++, k++) {
            ot_dtype dt = DTS[d];
            size_t n = SIZES[s], esz = ot_dtype_size(dt), tot = n * (size_t)P;
            char *send = malloc(tot * esz + 1), *recv = malloc(tot * esz + 1);
            char *want = malloc(tot * esz + 1);
            ot_coll_options o = ot_coll_options_default();
            o.chunk_bytes = test_chunk();
            for (int op = 0; op < OT_REDOP_COUNT; op++) {
                /* reduce-scatter: rank r's input is the full vector of P blocks */
                fill(send, k + op, R, tot, (ot_redop)op, dt);
                for (size_t i = 0; i < n; i++)
                    put(want, i, dt, ref(k + op, P, (size_t)R * n + i, (ot_redop)op, dt));
                for (int a = 0; a < 3; a++) {
                    o.algo = a == 2 ? OT_ALGO_TREE : a ? OT_ALGO_HALVING_DOUBLING : OT_ALGO_RING;
                    EXPECT_OK(ot_comm_reduce_scatter(c, send, recv, n, dt, (ot_redop)op, &o));
                    if (n && memcmp(recv, want, n * esz)) bad++;
                }
                /* reduce to root P-1 (tree and ring) */
                fill(send, k + op, R, n, (ot_redop)op, dt);
                for (size_t i = 0; i < n; i++)
                    put(want, i, dt, ref(k + op, P, i, (ot_redop)op, dt));
                for (int a = 0; a < 2; a++) {
                    o.algo = a ? OT_ALGO_TREE : OT_ALGO_RING;
                    memset(recv, 0, n * esz + 1);
                    EXPECT_OK(ot_comm_reduce(c, send, recv, n, dt, (ot_redop)op, P - 1, &o));
                    if (R == P - 1 && n && memcmp(recv, want, n * esz)) bad++;
                }
            }
            o.algo = OT_ALGO_AUTO;
            /* all-gather */
            fill(send, k, R, n, OT_REDOP_SUM, dt);
            for (int r = 0; r < P; r++) fill(want + (size_t)r * n * esz, k, r, n, OT_REDOP_SUM, dt);
            EXPECT_OK(ot_comm_allgather(c, send, recv, n, dt, &o));
            if (n && memcmp(recv, want, tot * esz)) bad++;
            /* broadcast from the last rank, ring and tree */
            for (int a = 0; a < 2; a++) {
                o.algo = a ? OT_ALGO_TREE : OT_ALGO_RING;
                fill(recv, k, R, n, OT_REDOP_SUM, dt);
                fill(want, k, P - 1, n, OT_REDOP_SUM, dt);
                EXPECT_OK(ot_comm_broadcast(c, recv, n, dt, P - 1, &o));
                if (n && memcmp(recv, want, n * esz)) bad++;
            }
            /* all-to-all: block j of rank i -> block i of rank j */
            o.algo = OT_ALGO_AUTO;
            for (int j = 0; j < P; j++)
                fill(send + (size_t)j * n * esz, k * 31 + j, R, n, OT_REDOP_SUM, dt);
            for (int i = 0; i < P; i++)
                fill(want + (size_t)i * n * esz, k * 31 + R, i, n, OT_REDOP_SUM, dt);
            EXPECT_OK(ot_comm_alltoall(c, send, recv, n, dt, &o));
            if (n && memcmp(recv, want, tot * esz)) bad++;
            free(send), free(recv), free(want);
        }
    EXPECT_OK(ot_comm_barrier(c, NULL));
    EXPECT_INT_EQ(bad, 0);
}

/* ot_mpi_allreduce: every algorithm, MPI's own included; the measured choice */
static void test_mpi_allreduce_algorithms(void) {
    ASSERT_OK(ot_mpi_calibrate(M));
    ot_cost_params p2p, nat;
    ot_mpi_model(M, &p2p, &nat);
    EXPECT_TRUE(p2p.alpha_us > 0 && p2p.gbytes_per_s > 0);
    EXPECT_TRUE(nat.alpha_us > 0 && nat.gbytes_per_s > 0);
    int bad = 0, k = 2000;
    for (int a = OT_MPI_ALGO_AUTO; a < OT_MPI_ALGO_COUNT; a++)
        for (int op = 0; op < OT_REDOP_COUNT; op++)
            for (size_t d = 0; d < sizeof DTS / sizeof *DTS; d++, k++) {
                ot_dtype dt = DTS[d];
                size_t n = 333, esz = ot_dtype_size(dt);
                char *x = malloc(n * esz), *want = malloc(n * esz);
                fill(x, k, R, n, (ot_redop)op, dt);
                for (size_t i = 0; i < n; i++) put(want, i, dt, ref(k, P, i, (ot_redop)op, dt));
                ot_mpi_coll_options o = ot_mpi_coll_options_default();
                o.algo = (ot_mpi_algo)a;
                if (a == OT_MPI_ALGO_SHM && !ot_mpi_shared_memory(M)) {
                    /* several nodes: refused on every rank, nothing run */
                    EXPECT_STATUS(ot_mpi_allreduce(M, x, x, n, dt, (ot_redop)op, &o),
                                  OT_ERR_INVALID_ARGUMENT);
                    EXPECT_STR_CONTAINS(ot_last_error(), "one node");
                    free(x), free(want);
                    continue;
                }
                EXPECT_OK(ot_mpi_allreduce(M, x, x, n, dt, (ot_redop)op, &o));
                if (memcmp(x, want, n * esz)) bad++;
                EXPECT_TRUE(same_on_all_ranks(x, n * esz));
                free(x), free(want);
            }
    EXPECT_INT_EQ(bad, 0);
    /* AUTO never picks MPI's unordered all-reduce for a float sum unless allowed */
    for (size_t n = 1; n <= (64u << 20); n *= 16)
        EXPECT_TRUE(ot_mpi_choose(M, n, OT_F32, OT_REDOP_SUM, NULL) != OT_MPI_ALGO_NATIVE);
    EXPECT_TRUE(ot_mpi_cost_us(M, OT_MPI_ALGO_NATIVE, 1000, OT_F32) >= 0);
    EXPECT_TRUE(ot_mpi_cost_us(M, OT_MPI_ALGO_RING, 1000, OT_U8) < 0);
    /* the plain baseline */
    int32_t v[3] = {R, 1, -R}, w[3];
    EXPECT_OK(ot_mpi_allreduce_plain(M, v, w, 3, OT_S32, OT_REDOP_SUM));
    EXPECT_INT_EQ(w[0], P * (P - 1) / 2);
    EXPECT_INT_EQ(w[1], P);
    EXPECT_STATUS(ot_mpi_allreduce_plain(M, v, w, 3, OT_S32, OT_REDOP_MEAN),
                  OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_mpi_allreduce(M, v, w, 3, OT_U8, OT_REDOP_SUM, NULL), OT_ERR_INVALID_ARGUMENT);
}

/* the shared-memory all-reduce: where every process is on one node (and only there: the
 * two-host test says OT_TEST_EXPECT_SHM=0, the one-node scripts 1), every op and dtype equals
 * the reference and, bit for bit, the in-process OT_ALGO_DIRECT (same rank order, including an
 * order-sensitive float sum); sizes from 1 element to several 2 MiB chunks of the window, slice
 * bounds moving between calls; in place or not */
static void test_shm_allreduce(void) {
    const char *want_shm = getenv("OT_TEST_EXPECT_SHM");
    if (want_shm) EXPECT_INT_EQ(ot_mpi_shared_memory(M), atoi(want_shm) != 0);
    ot_mpi_coll_options o = ot_mpi_coll_options_default();
    o.algo = OT_MPI_ALGO_SHM;
    if (!ot_mpi_shared_memory(M)) {
        float x = 1;
        EXPECT_STATUS(ot_mpi_allreduce(M, &x, &x, 1, OT_F32, OT_REDOP_SUM, &o),
                      OT_ERR_INVALID_ARGUMENT);
        EXPECT_TRUE(ot_mpi_cost_us(M, OT_MPI_ALGO_SHM, 1000, OT_F32) < 0);
        return;
    }
    static const size_t sizes[] = {1001, 7, 1, 70001, 3, 2500001, 2, 555};
    int bad = 0, k = 5000;
    for (int op = 0; op < OT_REDOP_COUNT; op++)
        for (size_t d = 0; d < sizeof DTS / sizeof *DTS; d++)
            for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++, k++) {
                ot_dtype dt = DTS[d];
                size_t n = sizes[s], esz = ot_dtype_size(dt);
                if (n > 100000 && (op != OT_REDOP_SUM || d % 2)) continue; /* time */
                char *send = malloc(n * esz), *recv = malloc(n * esz), *want = malloc(n * esz);
                char *tw = malloc(n * esz);
                fill(send, k, R, n, (ot_redop)op, dt);
                for (size_t i = 0; i < n; i++) put(want, i, dt, ref(k, P, i, (ot_redop)op, dt));
                bool inplace = s % 2;
                if (inplace) memcpy(recv, send, n * esz);
                EXPECT_OK(
                    ot_mpi_allreduce(M, inplace ? recv : send, recv, n, dt, (ot_redop)op, &o));
                if (memcmp(recv, want, n * esz) && bad++ < 5)
                    OT_T_FAIL_("shm allreduce %s %s n=%zu differs from the reference",
                               ot_redop_name(op), ot_dtype_name(dt), n);
                EXPECT_TRUE(same_on_all_ranks(recv, n * esz));
                twin t = {false, k, (ot_redop)op, dt, n, OT_ALGO_DIRECT, tw};
                EXPECT_OK(ot_local_run(P, twin_rank, &t, NULL));
                if (memcmp(recv, tw, n * esz) && bad++ < 5)
                    OT_T_FAIL_("shm allreduce %s %s n=%zu differs from in-process direct",
                               ot_redop_name(op), ot_dtype_name(dt), n);
                free(send), free(recv), free(want), free(tw);
            }
    EXPECT_INT_EQ(bad, 0);
    /* a float sum whose rounding depends on the order: 9 chunks, streaming stores */
    size_t n = (17u << 20) / 4 + 3;
    float *x = malloc(n * 4), *tw = malloc(n * 4), *naive = malloc(n * 4), *mine = malloc(n * 4);
    for (int r = 0; r < P; r++) {
        fill_round(mine, r, n);
        for (size_t i = 0; i < n; i++) naive[i] = r ? naive[i] + mine[i] : mine[i];
    }
    fill_round(x, R, n);
    EXPECT_OK(ot_mpi_allreduce(M, x, x, n, OT_F32, OT_REDOP_SUM, &o));
    EXPECT_TRUE(same_on_all_ranks(x, n * 4));
    EXPECT_TRUE(!memcmp(x, naive, n * 4));
    twin t = {true, 0, OT_REDOP_SUM, OT_F32, n, OT_ALGO_DIRECT, tw};
    EXPECT_OK(ot_local_run(P, twin_rank, &t, NULL));
    EXPECT_TRUE(!memcmp(x, tw, n * 4));
    free(x), free(tw), free(naive), free(mine);
    /* calibrated: the model has a line for it, and AUTO takes it where it is cheapest */
    ASSERT_OK(ot_mpi_calibrate(M));
    if (P == 1) return; /* one process: nothing to measure */
    ot_cost_params sp;
    EXPECT_TRUE(ot_mpi_model_shm(M, &sp));
    EXPECT_TRUE(sp.alpha_us > 0 && sp.gbytes_per_s > 0);
    EXPECT_TRUE(ot_mpi_cost_us(M, OT_MPI_ALGO_SHM, 1000, OT_F32) >= 0);
}

/* a rank that never arrives: the shm all-reduce returns TIMEOUT on every rank by its own
 * deadline, and the instance refuses further shm all-reduces (its window's state is unknown) */
static void test_shm_deadline(void) {
    if (P == 1 || !ot_mpi_shared_memory(M)) return;
    ot_mpi *m;
    ASSERT_OK(ot_mpi_init(NULL, &m));
    float x[64] = {0};
    ot_mpi_coll_options o = ot_mpi_coll_options_default();
    o.algo = OT_MPI_ALGO_SHM;
    EXPECT_OK(ot_mpi_allreduce(m, x, x, 64, OT_F32, OT_REDOP_SUM, &o)); /* the window exists */
    uint64_t t0 = ot_now_ns();
    if (R == 0) {
        o.timeout_ns = 100 * 1000 * 1000;
        EXPECT_STATUS(ot_mpi_allreduce(m, x, x, 64, OT_F32, OT_REDOP_SUM, &o), OT_ERR_TIMEOUT);
        EXPECT_TRUE(ot_now_ns() - t0 < 2000ull * 1000 * 1000);
    } else {
        usleep(400 * 1000); /* rank 0 has given up: the others wait for it in vain */
        o.timeout_ns = 300 * 1000 * 1000;
        EXPECT_STATUS(ot_mpi_allreduce(m, x, x, 64, OT_F32, OT_REDOP_SUM, &o), OT_ERR_TIMEOUT);
    }
    EXPECT_STR_CONTAINS(ot_last_error(), "deadline");
    EXPECT_STATUS(ot_mpi_allreduce(m, x, x, 64, OT_F32, OT_REDOP_SUM, &o),
                  OT_ERR_FAILED_PRECONDITION);
    EXPECT_STATUS(ot_mpi_calibrate(m), OT_ERR_FAILED_PRECONDITION);
    EXPECT_OK(ot_mpi_barrier(m, 0));
    ot_mpi_free(m);
}

/* A rank waiting in the transport for peers that come 50 ms late sleeps on its doorbell when
 * the processes fit the cores (many voluntary context switches: a futex sleep each backstop
 * period or ring, and a fraction of the wait's CPU time), and polls, yielding, when they do not
 * (ot_comm_process_waits_sleep). The all-reduce's result is checked either way. */
static void test_transport_wait(void) {
    if (P == 1 || !ot_mpi_shared_memory(M)) return;
    bool sleeps = ot_comm_process_waits_sleep(P, (int)sysconf(_SC_NPROCESSORS_ONLN));
    ot_comm *c = ot_mpi_comm(M);
    float x[1000];
    ASSERT_OK(ot_comm_barrier(c, NULL)); /* everyone here before rank 0's clock starts */
    for (int i = 0; i < 1000; i++) x[i] = (float)(R + i);
    struct rusage u0, u1;
    struct timespec c0, c1;
    getrusage(RUSAGE_THREAD, &u0);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    uint64_t t0 = ot_now_ns();
    if (R != 0) usleep(50 * 1000);
    ASSERT_OK(ot_comm_allreduce(c, x, x, 1000, OT_F32, OT_REDOP_SUM, NULL));
    double wall = (double)(ot_now_ns() - t0) / 1e9;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    getrusage(RUSAGE_THREAD, &u1);
    bool right = true;
    for (int i = 0; i < 1000; i++) right = right && x[i] == (float)(P * (P - 1) / 2 + P * i);
    EXPECT_TRUE(right);
    if (R != 0) return;
    long vol = u1.ru_nvcsw - u0.ru_nvcsw;
    double cpu = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9;
    printf("  rank 0 waited %.1f ms: %.1f ms CPU, %ld voluntary context switches (%s)\n",
           wall * 1e3, cpu * 1e3, vol, sleeps ? "sleeping" : "polling");
    EXPECT_TRUE(wall >= 0.03);
    if (sleeps) {
        EXPECT_TRUE(vol >= 10);
        EXPECT_TRUE(cpu < wall / 2);
    } else {
        EXPECT_TRUE(vol < 10);
    }
}

/* hierarchical: K local device threads per process */
typedef struct hctx {
    int local;
    ot_dtype dt;
    ot_redop op;
    size_t n;
    int k;
    void *out;
    ot_status st;
} hctx;

static void *hier_thread(void *p) {
    hctx *h = p;
    int K = ot_mpi_local_devices(M);
    size_t esz = ot_dtype_size(h->dt);
    h->out = malloc(h->n * esz + 1);
    int g = ot_mpi_global_device(M, R, h->local);
    fill(h->out, h->k, g, h->n, h->op, h->dt);
    (void)K;
    h->st = ot_mpi_hier_allreduce(M, h->local, h->out, h->out, h->n, h->dt, h->op, 0);
    return NULL;
}

static void test_hier_allreduce(void) {
    int K = ot_mpi_local_devices(M);
    ASSERT_TRUE(K == 2);
    EXPECT_INT_EQ(ot_mpi_global_device(M, R, 1), R * K + 1);
    EXPECT_INT_EQ(ot_mpi_device_process(M, R * K + 1), R);
    EXPECT_INT_EQ(ot_mpi_device_process(M, P * K), -1);
    EXPECT_INT_EQ(ot_topology_size(ot_mpi_topology(M)), P * K);
    int bad = 0, k = 3000;
    for (int op = 0; op < OT_REDOP_COUNT; op++)
        for (size_t d = 0; d < sizeof DTS / sizeof *DTS; d++)
            for (size_t s = 0; s < sizeof SIZES / sizeof *SIZES; s++, k++) {
                ot_dtype dt = DTS[d];
                size_t n = SIZES[s], esz = ot_dtype_size(dt);
                pthread_t th[2];
                hctx h[2];
                for (int l = 0; l < K; l++) {
                    h[l] = (hctx){l, dt, (ot_redop)op, n, k, NULL, OT_OK};
                    pthread_create(&th[l], NULL, hier_thread, &h[l]);
                }
                for (int l = 0; l < K; l++) pthread_join(th[l], NULL);
                char *want = malloc(n * esz + 1);
                for (size_t i = 0; i < n; i++) put(want, i, dt, ref(k, P * K, i, (ot_redop)op, dt));
                for (int l = 0; l < K; l++) {
                    EXPECT_OK(h[l].st);
                    if (n && memcmp(h[l].out, want, n * esz)) bad++;
                    if (l == 0) EXPECT_TRUE(same_on_all_ranks(h[l].out, n * esz));
                    free(h[l].out);
                }
                free(want);
            }
    EXPECT_INT_EQ(bad, 0);
}

/* an MPI error comes back as an ot_status carrying MPI's message (the job keeps running) */
static void test_mpi_errors_return(void) {
    MPI_Comm w = ot_mpi_world_comm(M);
    int eh_rc = 0;
    MPI_Errhandler eh;
    MPI_Comm_get_errhandler(w, &eh);
    eh_rc = eh == MPI_ERRORS_RETURN;
    MPI_Errhandler_free(&eh);
    EXPECT_TRUE(eh_rc);
    int x = 0;
    int rc = MPI_Send(&x, -1, MPI_INT, R, 0, w); /* a negative count: refused up front */
    EXPECT_TRUE(rc != MPI_SUCCESS);
    EXPECT_STATUS(ot_mpi_status(rc, "MPI_Send"), OT_ERR_IO);
    EXPECT_STR_CONTAINS(ot_last_error(), "MPI_Send");
    char s[MPI_MAX_ERROR_STRING];
    int len;
    MPI_Error_string(rc, s, &len);
    EXPECT_STR_CONTAINS(ot_last_error(), s);
    EXPECT_OK(ot_mpi_status(MPI_SUCCESS, "nothing"));
}

/* a barrier whose deadline passes returns TIMEOUT; the late ranks still complete theirs */
static void test_barrier_deadline(void) {
    EXPECT_OK(ot_mpi_barrier(M, 0));
    if (P > 1) {
        if (R == 0) {
            uint64_t t0 = ot_now_ns();
            EXPECT_STATUS(ot_mpi_barrier(M, 100 * 1000 * 1000), OT_ERR_TIMEOUT);
            EXPECT_TRUE(ot_now_ns() - t0 < 2000ull * 1000 * 1000);
        } else {
            usleep(400 * 1000);
            EXPECT_OK(ot_mpi_barrier(M, 0)); /* matches rank 0's timed-out one */
        }
    }
    EXPECT_OK(ot_mpi_barrier(M, 0));
}

/* rank 0 leads: heartbeats feed its coordinator; a silent process leaves the membership */
static void test_heartbeats_and_membership(void) {
    ot_mpi_options mo = ot_mpi_options_default();
    mo.heartbeat_fail_s = 0.5;
    ot_mpi *m;
    ASSERT_OK(ot_mpi_init(&mo, &m));
    EXPECT_TRUE((R == 0) == (ot_mpi_coord(m) != NULL));
    bool *alive = calloc((size_t)P, 1);
    uint64_t e0 = 0, e1 = 0;
    EXPECT_OK(ot_mpi_heartbeat(m));
    EXPECT_OK(ot_mpi_barrier(m, 0));
    usleep(20000);
    EXPECT_OK(ot_mpi_membership(m, &e0, alive, 0));
    for (int r = 0; r < P; r++) EXPECT_TRUE(alive[r]);
    /* the last rank goes quiet for a while; the others keep beating */
    int quiet = P - 1;
    for (int i = 0; i < 10; i++) {
        if (R != quiet || quiet == 0) EXPECT_OK(ot_mpi_heartbeat(m));
        if (R == 0) EXPECT_OK(ot_mpi_poll(m));
        usleep(100 * 1000);
    }
    EXPECT_OK(ot_mpi_membership(m, &e1, alive, 0));
    if (P > 1) {
        EXPECT_TRUE(!alive[quiet]);
        EXPECT_TRUE(e1 > e0);
        for (int r = 0; r < quiet; r++) EXPECT_TRUE(alive[r]);
    }
    free(alive);
    ot_mpi_free(m);
}

static void test_init_bad_options(void) {
    ot_mpi_options mo = ot_mpi_options_default();
    mo.local_devices = 0;
    ot_mpi *m = (ot_mpi *)1;
    EXPECT_STATUS(ot_mpi_init(&mo, &m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(m == NULL);
    mo = ot_mpi_options_default();
    mo.topology = "torus-3x3"; /* 9 devices: never P processes x 1 for P in 1, 2, 4 */
    int64_t live = ot_alloc_live();
    EXPECT_STATUS(ot_mpi_init(&mo, &m), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STR_CONTAINS(ot_last_error(), "torus-3x3");
    EXPECT_INT_EQ(ot_alloc_live(), live);
    EXPECT_TRUE(ot_mpi_available());
}

#if defined(__SANITIZE_ADDRESS__)
#define OT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OT_TEST_ASAN 1
#endif
#endif

/* The split-phase sharded exchange across the processes: random disjoint buckets (crossing
 * blocks, gaps between them), posted in another order on every process and step, every other one
 * through a view (its bound grads zeroed, so a read of them shows); each reduced block equals
 * ot_comm_reduce_scatter with the tree (order TREE) or the rank-order sum (DIRECT) bit for bit;
 * every published block arrives; three steps reuse the buffers. */
static void test_shard_exchange(void) {
    ot_comm *c = ot_mpi_comm(M);
    const size_t block = 37, total = block * (size_t)P;
    size_t off[12], len[12];
    int nb = 0;
    for (size_t at = 0; nb < 12 && at < total; nb++) { /* the same buckets on every rank */
        at += hash3(50, (uint32_t)nb, 0) % 5;
        size_t l = 1 + hash3(51, (uint32_t)nb, 0) % (block + block / 2);
        if (at >= total) break;
        off[nb] = at;
        len[nb] = l < total - at ? l : total - at;
        at += len[nb];
    }
    size_t alloc = total * sizeof(float) + 4;
    float *grads = malloc(alloc), *full = malloc(alloc), *view = malloc(alloc);
    float *all = malloc(alloc), *want = malloc(alloc), *red = malloc(alloc), *v = malloc(alloc);
    int bad = 0;
    for (int o = 0; o < 2; o++) {
        ot_coll_algo order = o ? OT_ALGO_DIRECT : OT_ALGO_TREE;
        ot_shard_exchange *x = NULL;
        ASSERT_OK(ot_mpi_shard_exchange_create(M, block, nb, off, len, order, &x));
        EXPECT_OK(ot_shard_exchange_bind(x, R, grads, all + (size_t)R * block));
        uint64_t dl = ot_now_ns() + 30000000000ull;
        for (uint64_t seq = 1; seq <= 3; seq++) {
            EXPECT_OK(ot_shard_exchange_grads_writable(x, R, seq, dl));
            fill_round(full, R * 16 + (int)seq, total);
            memcpy(grads, full, total * sizeof(float));
            memcpy(view, full, total * sizeof(float));
            int first = (int)(hash3(52, (uint32_t)R, (uint32_t)seq) % (uint32_t)nb);
            for (int i = 0; i < nb; i++) {
                int b = (first + i) % nb;
                if (b % 2) { /* posted in place elsewhere: the bound grads must not be read */
                    memset(grads + off[b], 0, len[b] * sizeof(float));
                    EXPECT_OK(ot_shard_exchange_post_view(x, R, seq, b, view + off[b]));
                } else {
                    EXPECT_OK(ot_shard_exchange_post(x, R, seq, b));
                }
                if (i % 3 == 1)
                    EXPECT_OK(ot_shard_exchange_reduce(x, R, seq, red, false, dl, NULL));
            }
            EXPECT_OK(ot_shard_exchange_reduce(x, R, seq, red, true, dl, NULL));
            EXPECT_TRUE(ot_shard_exchange_reduced(x, R, seq));
            /* the reference: the tree's reduce-scatter, or rank order from every rank's values */
            if (order == OT_ALGO_TREE) {
                ot_coll_options co = ot_coll_options_default();
                co.algo = OT_ALGO_TREE;
                EXPECT_OK(ot_comm_reduce_scatter(c, full, want, block, OT_F32, OT_REDOP_SUM, &co));
            } else {
                for (int q = 0; q < P; q++) {
                    fill_round(v, q * 16 + (int)seq, total);
                    for (size_t i = 0; i < block; i++) {
                        float e = v[(size_t)R * block + i];
                        want[i] = q == 0 ? e : want[i] + e;
                    }
                }
            }
            for (int b = 0; b < nb; b++) /* the elements of my block some bucket covers */
                for (size_t i = off[b]; i < off[b] + len[b]; i++)
                    if (i / block == (size_t)R && memcmp(&red[i % block], &want[i % block], 4))
                        bad++;
            /* the all-gather: my block, then every block once published */
            EXPECT_OK(ot_shard_exchange_params_writable(x, R, seq, dl));
            for (size_t i = 0; i < block; i++)
                all[(size_t)R * block + i] =
                    (float)(hash3(53, (uint32_t)R, (uint32_t)i) % 1000) + (float)seq;
            EXPECT_OK(ot_shard_exchange_publish(x, R, seq));
            EXPECT_OK(ot_shard_exchange_wait_published(x, seq, 0, total, dl));
            for (int q = 0; q < P; q++) {
                const float *blk = ot_shard_exchange_block(x, q);
                for (size_t i = 0; blk && i < block; i++)
                    if (blk[i] != (float)(hash3(53, (uint32_t)q, (uint32_t)i) % 1000) + (float)seq)
                        bad++;
                if (!blk) bad++;
            }
            EXPECT_OK(ot_shard_exchange_fetched(x, R, seq));
        }
        EXPECT_STATUS(ot_shard_exchange_post(x, R + 1, 4, 0), OT_ERR_INVALID_ARGUMENT);
        ot_shard_exchange_free(x);
    }
    EXPECT_INT_EQ(bad, 0);
    /* the same check on every rank: a layout no process may create */
    size_t o2[2] = {0, 3}, l2[2] = {5, 5};
    ot_shard_exchange *y = NULL;
    EXPECT_STATUS(ot_mpi_shard_exchange_create(M, block, 2, o2, l2, OT_ALGO_TREE, &y),
                  OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_mpi_shard_exchange_create(M, block, 1, o2, l2, OT_ALGO_RING, &y),
                  OT_ERR_INVALID_ARGUMENT);
    free(grads), free(full), free(view), free(all), free(want), free(red), free(v);
}

int main(int argc, char **argv) {
#ifdef OT_TEST_ASAN
    /* Open MPI's plugins are unloaded before LeakSanitizer runs, so their allocations cannot be
     * suppressed by name: run again with leak detection off (our own allocations are still
     * checked through ot_alloc_live in the tests) */
    const char *ao = getenv("ASAN_OPTIONS");
    if (!ao || !strstr(ao, "detect_leaks=0")) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s%sdetect_leaks=0", ao ? ao : "", ao && *ao ? ":" : "");
        setenv("ASAN_OPTIONS", buf, 1);
        execv("/proc/self/exe", argv);
        perror("execv");
        return 1;
    }
#endif
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    ot_mpi_options mo = ot_mpi_options_default();
    mo.local_devices = 2;
    mo.timeout_ns = 30LL * 1000 * 1000 * 1000;
    if (ot_mpi_init(&mo, &M) != OT_OK) {
        fprintf(stderr, "ot_mpi_init: %s\n", ot_last_error());
        return 1;
    }
    R = ot_mpi_rank(M);
    P = ot_mpi_size(M);
    static const ot_test_case tests[] = {
        OT_TEST(test_init_bad_options),
        OT_TEST(test_mpi_errors_return),
        OT_TEST(test_allreduce_every_algo_op_dtype),
        OT_TEST(test_allreduce_rounding_matches_in_process),
        OT_TEST(test_other_collectives),
        OT_TEST(test_mpi_allreduce_algorithms),
        OT_TEST(test_shm_allreduce),
        OT_TEST(test_shm_deadline),
        OT_TEST(test_transport_wait),
        OT_TEST(test_hier_allreduce),
        OT_TEST(test_shard_exchange),
        OT_TEST(test_barrier_deadline),
        OT_TEST(test_heartbeats_and_membership),
    };
    /* only rank 0 prints the per-test lines; every rank's failures count */
    if (R != 0 && !freopen("/dev/null", "w", stdout)) return 1;
    int rc = ot_test_main(argc, argv, tests, sizeof tests / sizeof *tests);
    int worst = 0;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, ot_mpi_world_comm(M));
    ot_mpi_free(M);
    MPI_Finalize();
    return worst;
}
