/* Collectives over the local transport: every collective x op x dtype x algorithm over sizes 0,
 * 1, odd, not divisible by the member count and large, against a naive reference; bit-identical
 * results on every member and across runs; failures mid-operation; sub-communicators; the cost
 * model. Worker threads record mismatches; only the main thread asserts. */
#include "ot_test.h"

#include "optitpu/collectives.h"
#include "pod/pod_internal.h"

#include <stdatomic.h>

/* ---- deterministic exact-valued inputs ---- */

static uint32_t hash3(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA77u ^ (c + 1) * 0xC2B2AE3Du;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    return h;
}

/* value of element i of rank r in case k, as a double that every dtype represents exactly */
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

/* the naive reference: rank order, accumulation dtype, one rounding */
static void reference(int k, int n, size_t i, ot_redop op, ot_dtype dt, void *out, size_t oi) {
    ot_redop cop = op == OT_REDOP_MEAN ? OT_REDOP_SUM : op;
    if (dt == OT_S32 || dt == OT_S64) {
        int64_t acc = 0;
        for (int r = 0; r < n; r++) {
            int64_t v = (int64_t)val(k, r, i, op, dt);
            if (r == 0)
                acc = v;
            else if (cop == OT_REDOP_SUM)
                acc += v;
            else if (cop == OT_REDOP_PROD)
                acc *= v;
            else if (cop == OT_REDOP_MAX)
                acc = v > acc ? v : acc;
            else
                acc = v < acc ? v : acc;
        }
        if (op == OT_REDOP_MEAN) acc /= n;
        put(out, oi, dt, (double)acc);
        return;
    }
    if (dt == OT_F64) {
        double acc = 0;
        for (int r = 0; r < n; r++) {
            double v = val(k, r, i, op, dt);
            if (r == 0)
                acc = v;
            else if (cop == OT_REDOP_SUM)
                acc += v;
            else if (cop == OT_REDOP_PROD)
                acc *= v;
            else if (cop == OT_REDOP_MAX)
                acc = v > acc ? v : acc;
            else
                acc = v < acc ? v : acc;
        }
        if (op == OT_REDOP_MEAN) acc /= n;
        put(out, oi, dt, acc);
        return;
    }
    float acc = 0;
    for (int r = 0; r < n; r++) {
        float v = (float)val(k, r, i, op, dt);
        if (r == 0)
            acc = v;
        else if (cop == OT_REDOP_SUM)
            acc += v;
        else if (cop == OT_REDOP_PROD)
            acc *= v;
        else if (cop == OT_REDOP_MAX)
            acc = v > acc ? v : acc;
        else
            acc = v < acc ? v : acc;
    }
    if (op == OT_REDOP_MEAN) acc /= (float)n;
    put(out, oi, dt, acc);
}

/* ---- the case table ---- */

typedef struct ccase {
    ot_coll_kind kind;
    ot_redop op;
    ot_dtype dt;
    ot_coll_algo algo;
    size_t count;
    bool inplace;
    int root;
} ccase;

static const ot_dtype dtypes[] = {OT_F32, OT_F64, OT_BF16, OT_F16, OT_S32, OT_S64};

typedef struct suite {
    int n;
    ccase *cases;
    int ncases;
    atomic_int mismatches;
    atomic_int errors;
    char first[512];
    atomic_int have_first;
    uint64_t *hash; /* [case][rank] output hashes */
    size_t chunk;
} suite;

static void note(suite *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void note(suite *s, const char *fmt, ...) {
    if (atomic_exchange(&s->have_first, 1)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->first, sizeof s->first, fmt, ap);
    va_end(ap);
}

static uint64_t fnv(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

static ot_status run_suite_rank(void *ud, int rank, ot_comm *c) {
    suite *s = ud;
    int n = s->n;
    for (int k = 0; k < s->ncases; k++) {
        const ccase *cc = &s->cases[k];
        size_t esz = ot_dtype_size(cc->dt), cnt = cc->count;
        size_t in_n = cnt, out_n = cnt;
        if (cc->kind == OT_COLL_REDUCE_SCATTER || cc->kind == OT_COLL_ALLTOALL) in_n = cnt * n;
        if (cc->kind == OT_COLL_ALLGATHER || cc->kind == OT_COLL_ALLTOALL) out_n = cnt * n;
        size_t big = (in_n > out_n ? in_n : out_n) + 1;
        char *in = ot_malloc(big * esz), *out = ot_malloc(big * esz), *want = ot_malloc(big * esz);
        if (!in || !out || !want) abort();
        memset(out, 0xAB, big * esz);
        /* inputs */
        for (size_t i = 0; i < in_n; i++) put(in, i, cc->dt, val(k, rank, i, cc->op, cc->dt));
        ot_coll_options o = ot_coll_options_default();
        o.algo = cc->algo;
        o.chunk_bytes = s->chunk;
        ot_status st = OT_OK;
        void *res = out;
        switch (cc->kind) {
        case OT_COLL_ALLREDUCE:
            if (cc->inplace) memcpy(out, in, in_n * esz);
            st = ot_comm_allreduce(c, cc->inplace ? out : in, out, cnt, cc->dt, cc->op, &o);
            for (size_t i = 0; i < cnt; i++) reference(k, n, i, cc->op, cc->dt, want, i);
            break;
        case OT_COLL_REDUCE_SCATTER:
            if (cc->inplace) {
                memcpy(out, in, in_n * esz);
                res = out + (size_t)rank * cnt * esz;
                st = ot_comm_reduce_scatter(c, out, res, cnt, cc->dt, cc->op, &o);
            } else {
                st = ot_comm_reduce_scatter(c, in, out, cnt, cc->dt, cc->op, &o);
            }
            for (size_t i = 0; i < cnt; i++)
                reference(k, n, (size_t)rank * cnt + i, cc->op, cc->dt, want, i);
            break;
        case OT_COLL_REDUCE:
            if (cc->inplace) memcpy(out, in, in_n * esz);
            st = ot_comm_reduce(c, cc->inplace ? out : in, out, cnt, cc->dt, cc->op, cc->root, &o);
            if (rank == cc->root)
                for (size_t i = 0; i < cnt; i++) reference(k, n, i, cc->op, cc->dt, want, i);
            else
                out_n = 0; /* unspecified elsewhere */
            break;
        case OT_COLL_ALLGATHER:
            if (cc->inplace) {
                memcpy(out + (size_t)rank * cnt * esz, in, cnt * esz);
                st = ot_comm_allgather(c, out + (size_t)rank * cnt * esz, out, cnt, cc->dt, &o);
            } else {
                st = ot_comm_allgather(c, in, out, cnt, cc->dt, &o);
            }
            for (int r = 0; r < n; r++)
                for (size_t i = 0; i < cnt; i++)
                    put(want, (size_t)r * cnt + i, cc->dt, val(k, r, i, cc->op, cc->dt));
            break;
        case OT_COLL_BROADCAST:
            memcpy(out, in, cnt * esz);
            st = ot_comm_broadcast(c, out, cnt, cc->dt, cc->root, &o);
            for (size_t i = 0; i < cnt; i++)
                put(want, i, cc->dt, val(k, cc->root, i, cc->op, cc->dt));
            break;
        case OT_COLL_ALLTOALL:
            st = ot_comm_alltoall(c, in, out, cnt, cc->dt, &o);
            for (int r = 0; r < n; r++)
                for (size_t i = 0; i < cnt; i++)
                    put(want, (size_t)r * cnt + i, cc->dt,
                        val(k, r, (size_t)rank * cnt + i, cc->op, cc->dt));
            break;
        default: break;
        }
        if (cc->kind == OT_COLL_REDUCE_SCATTER) out_n = cnt;
        if (st != OT_OK) {
            atomic_fetch_add(&s->errors, 1);
            note(s, "n=%d case %d %s %s %s %s count %zu: %s", n, k, ot_coll_kind_name(cc->kind),
                 ot_redop_name(cc->op), ot_dtype_name(cc->dt), ot_coll_algo_name(cc->algo), cnt,
                 ot_last_error());
            ot_free(in), ot_free(out), ot_free(want);
            return st;
        }
        if (out_n && memcmp(res, want, out_n * esz) != 0) {
            atomic_fetch_add(&s->mismatches, 1);
            size_t bad = 0;
            while (bad < out_n * esz && ((char *)res)[bad] == want[bad]) bad++;
            note(s, "n=%d rank %d case %d %s %s %s %s count %zu %s: first difference at byte %zu",
                 n, rank, k, ot_coll_kind_name(cc->kind), ot_redop_name(cc->op),
                 ot_dtype_name(cc->dt), ot_coll_algo_name(cc->algo), cnt,
                 cc->inplace ? "in place" : "out of place", bad);
        }
        s->hash[(size_t)k * n + rank] = out_n ? fnv(res, out_n * esz) : 0;
        ot_free(in), ot_free(out), ot_free(want);
    }
    return OT_OK;
}

static int build_cases(ccase *cs, int n, const size_t *sizes, int nsizes, ot_comm *probe) {
    int m = 0;
    for (int kind = 0; kind < OT_COLL_BARRIER; kind++) {
        bool red =
            kind == OT_COLL_ALLREDUCE || kind == OT_COLL_REDUCE_SCATTER || kind == OT_COLL_REDUCE;
        for (int a = OT_ALGO_AUTO; a < OT_ALGO_COUNT; a++) {
            if (!ot_coll_algo_supported(probe, (ot_coll_kind)kind, (ot_coll_algo)a)) continue;
            for (int op = 0; op < (red ? OT_REDOP_COUNT : 1); op++)
                for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
                    for (int z = 0; z < nsizes; z++) {
                        if (cs)
                            cs[m] = (ccase){.kind = (ot_coll_kind)kind,
                                            .op = (ot_redop)op,
                                            .dt = dtypes[d],
                                            .algo = (ot_coll_algo)a,
                                            .count = sizes[z],
                                            .inplace = kind != OT_COLL_ALLTOALL && (m % 2),
                                            .root = (m / 2) % n};
                        m++;
                    }
        }
    }
    (void)n;
    return m;
}

/* a probe communicator (never used for a collective) to ask which algorithms apply */
static ot_status probe_comm(int n, ot_local_world **w, ot_comm **c) {
    OT_CHECK(ot_local_world_create(n, w));
    return ot_local_world_comm(*w, 0, c);
}

static void run_matrix(int n, size_t chunk) {
    /* large: several pipelining pieces per ring step at the chunk sizes used below; 8 members
     * (slow on a small shared machine) skip the sizes the others cover */
    size_t sizes[] = {0, 1, 7, (size_t)n * 3 + 1, n <= 3 ? 4099 : 1031};
    size_t sizes8[] = {1, (size_t)n * 3 + 1, 1031};
    size_t *sz = n == 8 ? sizes8 : sizes;
    int nsz = n == 8 ? 3 : 5;
    ot_local_world *pw;
    ot_comm *pc;
    ASSERT_OK(probe_comm(n, &pw, &pc));
    suite s = {.n = n, .chunk = chunk};
    s.ncases = build_cases(NULL, n, sz, nsz, pc);
    s.cases = ot_calloc((size_t)s.ncases, sizeof *s.cases);
    s.hash = ot_calloc((size_t)s.ncases * n, sizeof *s.hash);
    ASSERT_TRUE(s.cases && s.hash);
    build_cases(s.cases, n, sz, nsz, pc);
    ot_comm_free(pc);
    ot_local_world_free(pw);
    EXPECT_OK(ot_local_run(n, run_suite_rank, &s, NULL));
    EXPECT_INT_EQ(atomic_load(&s.errors), 0);
    EXPECT_INT_EQ(atomic_load(&s.mismatches), 0);
    if (atomic_load(&s.have_first)) fprintf(stderr, "  first problem: %s\n", s.first);
    /* every member holds bit-identical results (reduce: root only; all-gather, all-reduce and
     * broadcast everywhere) */
    int differ = 0;
    for (int k = 0; k < s.ncases; k++) {
        ot_coll_kind kd = s.cases[k].kind;
        if (kd != OT_COLL_ALLREDUCE && kd != OT_COLL_ALLGATHER && kd != OT_COLL_BROADCAST) continue;
        for (int r = 1; r < n; r++) differ += s.hash[(size_t)k * n + r] != s.hash[(size_t)k * n];
    }
    EXPECT_INT_EQ(differ, 0);
    ot_free(s.cases);
    ot_free(s.hash);
}

static void test_matrix_1(void) {
    run_matrix(1, 0);
}
static void test_matrix_2(void) {
    run_matrix(2, 0);
}
static void test_matrix_3_chunked(void) {
    run_matrix(3, 4096); /* pieces of 4 KiB: the pipelined paths */
}
static void test_matrix_5(void) {
    run_matrix(5, 0);
}
static void test_matrix_6_chunked(void) {
    run_matrix(6, 1024); /* hier2d as 3 x 2 */
}
static void test_matrix_8_chunked(void) {
    run_matrix(8, 512);
}

/* ---- determinism with inexact values: identical on every member and across runs ---- */

typedef struct det {
    int n;
    size_t count;
    uint64_t hash[OT_ALGO_COUNT][16];
} det;

static ot_status det_rank(void *ud, int rank, ot_comm *c) {
    det *d = ud;
    float *x = ot_malloc(d->count * sizeof(float));
    if (!x) return OT_ERR_OUT_OF_MEMORY;
    for (int a = OT_ALGO_RING; a < OT_ALGO_COUNT; a++) {
        if (!ot_coll_algo_supported(c, OT_COLL_ALLREDUCE, (ot_coll_algo)a)) continue;
        uint32_t s = 12345u + (uint32_t)rank * 7919u;
        for (size_t i = 0; i < d->count; i++) {
            s = s * 1664525u + 1013904223u;
            x[i] = (float)((double)s / 4294967296.0 * 2 - 1) * 1e3f;
        }
        ot_coll_options o = ot_coll_options_default();
        o.algo = (ot_coll_algo)a;
        o.chunk_bytes = 2048;
        ot_status st = ot_comm_allreduce(c, x, x, d->count, OT_F32, OT_REDOP_SUM, &o);
        if (st != OT_OK) {
            ot_free(x);
            return st;
        }
        d->hash[a][rank] = fnv(x, d->count * sizeof(float));
    }
    ot_free(x);
    return OT_OK;
}

static void test_determinism(void) {
    for (int n = 2; n <= 8; n += 2) {
        det a = {.n = n, .count = 10007}, b = a;
        ASSERT_OK(ot_local_run(n, det_rank, &a, NULL));
        ASSERT_OK(ot_local_run(n, det_rank, &b, NULL));
        for (int al = OT_ALGO_RING; al < OT_ALGO_COUNT; al++)
            for (int r = 0; r < n; r++) {
                EXPECT_U64_EQ(a.hash[al][r], a.hash[al][0]);
                EXPECT_U64_EQ(a.hash[al][r], b.hash[al][r]);
            }
    }
}

/* ---- the tree reduce-scatter reduces in the tree all-reduce's order ---- */

/* Inexact values, so any other summation order shows: each member's block of the tree
 * reduce-scatter must be bit for bit that block of the tree all-reduce of the whole vector (what
 * a sharded optimizer update relies on), for f32, bf16 (accumulated in f32) and f64, SUM and
 * MEAN, in place and out of place, whatever the chunking. */
typedef struct rsorder {
    size_t count; /* per member */
    atomic_int bad, checked;
} rsorder;

static ot_status rsorder_rank(void *ud, int rank, ot_comm *c) {
    rsorder *t = ud;
    int n = ot_comm_size(c);
    size_t total = t->count * (size_t)n;
    const ot_dtype dts[] = {OT_F32, OT_BF16, OT_F64};
    const ot_redop ops[] = {OT_REDOP_SUM, OT_REDOP_MEAN};
    char *x = ot_malloc(total * 8), *ar = ot_malloc(total * 8), *rs = ot_malloc(total * 8);
    if (!x || !ar || !rs) return OT_ERR_OUT_OF_MEMORY;
    ot_status st = OT_OK;
    for (size_t d = 0; d < 3 && st == OT_OK; d++)
        for (size_t p = 0; p < 2 && st == OT_OK; p++)
            for (int inplace = 0; inplace < 2 && st == OT_OK; inplace++) {
                ot_dtype dt = dts[d];
                size_t esz = ot_dtype_size(dt);
                uint32_t s = 777u + (uint32_t)rank * 104729u;
                for (size_t i = 0; i < total; i++) {
                    s = s * 1664525u + 1013904223u;
                    double v = ((double)s / 4294967296.0 * 2 - 1) * (i % 3 ? 1e-3 : 1e4);
                    put(x, i, dt, v);
                }
                ot_coll_options o = ot_coll_options_default();
                o.algo = OT_ALGO_TREE;
                o.chunk_bytes = inplace ? 1024 : 0;
                st = ot_comm_allreduce(c, x, ar, total, dt, ops[p], &o);
                void *res = rs;
                if (st == OT_OK && inplace) {
                    res = x + (size_t)rank * t->count * esz;
                    st = ot_comm_reduce_scatter(c, x, res, t->count, dt, ops[p], &o);
                } else if (st == OT_OK) {
                    st = ot_comm_reduce_scatter(c, x, rs, t->count, dt, ops[p], &o);
                }
                if (st == OT_OK) {
                    if (rank == 0) atomic_fetch_add(&t->checked, 1);
                    if (memcmp(res, ar + (size_t)rank * t->count * esz, t->count * esz) != 0)
                        atomic_fetch_add(&t->bad, 1);
                }
            }
    ot_free(x), ot_free(ar), ot_free(rs);
    return st;
}

static void test_tree_reduce_scatter_order(void) {
    for (int n = 2; n <= 8; n++) {
        rsorder t = {.count = n % 2 ? 1500 : 2053}; /* more than one tile, a partial last one */
        ASSERT_OK(ot_local_run(n, rsorder_rank, &t, NULL));
        EXPECT_INT_EQ(atomic_load(&t.checked), 12);
        EXPECT_INT_EQ(atomic_load(&t.bad), 0);
    }
}

/* ---- failures ---- */

typedef struct failctx {
    ot_local_world *w;
    int victim;
    bool mark; /* the supervisor declares the victim failed */
    int64_t timeout_ns;
    ot_status got[8];
    ot_status after[8];
    uint64_t elapsed_ns[8];
} failctx;

static ot_status fail_rank(void *ud, int rank, ot_comm *c) {
    failctx *f = ud;
    size_t n = 1 << 16;
    float *x = ot_calloc(n, sizeof(float));
    if (!x) return OT_ERR_OUT_OF_MEMORY;
    ot_coll_options o = ot_coll_options_default();
    o.algo = OT_ALGO_RING;
    o.chunk_bytes = 4096;
    o.timeout_ns = f->timeout_ns;
    uint64_t t0 = ot_now_ns();
    ot_status st = OT_OK;
    for (int it = 0; it < 3 && st == OT_OK; it++)
        st = ot_comm_allreduce(c, x, x, n, OT_F32, OT_REDOP_SUM, &o);
    f->elapsed_ns[rank] = ot_now_ns() - t0;
    f->got[rank] = st;
    if (rank == f->victim && st == OT_ERR_CANCELLED && f->mark)
        ot_local_world_fail(f->w, rank); /* what a process supervisor does on a crash */
    f->after[rank] = ot_comm_allreduce(c, x, x, n, OT_F32, OT_REDOP_SUM, &o);
    ot_free(x);
    return OT_OK;
}

static void test_peer_failed_mid_allreduce(void) {
    failctx f = {.victim = 2, .mark = true, .timeout_ns = 20LL * 1000000000};
    ASSERT_OK(ot_local_world_create(4, &f.w));
    /* the victim stops dead in the middle of the second all-reduce (each is 2*3*16 ring
     * pieces) */
    ot_local_world_inject_stop(f.w, 2, 150);
    EXPECT_OK(ot_local_world_run(f.w, fail_rank, &f, NULL));
    for (int r = 0; r < 4; r++) {
        if (r == 2) {
            EXPECT_STATUS(f.got[r], OT_ERR_CANCELLED);
            continue;
        }
        EXPECT_STATUS(f.got[r], OT_ERR_PEER_FAILED);
        EXPECT_TRUE(f.elapsed_ns[r] < 5ull * 1000000000); /* well within the 20 s deadline */
        EXPECT_STATUS(f.after[r], OT_ERR_FAILED_PRECONDITION);
    }
    ot_local_world_free(f.w);
}

static void test_timeout_mid_allreduce(void) {
    failctx f = {.victim = 1, .mark = false, .timeout_ns = 200LL * 1000000};
    ASSERT_OK(ot_local_world_create(3, &f.w));
    ot_local_world_inject_stop(f.w, 1, 100);
    EXPECT_OK(ot_local_world_run(f.w, fail_rank, &f, NULL));
    for (int r = 0; r < 3; r++) {
        if (r == 1) continue;
        EXPECT_STATUS(f.got[r], OT_ERR_TIMEOUT);
        EXPECT_TRUE(f.elapsed_ns[r] < 3ull * 1000000000);
        EXPECT_STATUS(f.after[r], OT_ERR_FAILED_PRECONDITION);
    }
    ot_local_world_free(f.w);
}

/* ---- sub-communicators ---- */

static ot_status groups_rank(void *ud, int rank, ot_comm *c) {
    int *res = ud;
    int *g = NULL, ng, gs;
    OT_CHECK(ot_replica_groups_parse("{{0,2},{3,1}}", 13, 4, &g, &ng, &gs));
    ot_comm *sub;
    ot_status st = ot_comm_split_groups(c, g, ng, gs, &sub);
    ot_free(g);
    OT_CHECK(st);
    int32_t v = rank + 1;
    for (int a = OT_ALGO_RING; a < OT_ALGO_COUNT && st == OT_OK; a++) {
        ot_coll_options o = ot_coll_options_default();
        o.algo = (ot_coll_algo)a;
        if (!ot_coll_algo_supported(sub, OT_COLL_ALLREDUCE, o.algo)) continue;
        int32_t out = 0;
        st = ot_comm_allreduce(sub, &v, &out, 1, OT_S32, OT_REDOP_SUM, &o);
        res[rank * OT_ALGO_COUNT + a] = out;
    }
    res[4 * OT_ALGO_COUNT + rank] = ot_comm_rank(sub) * 10 + ot_comm_size(sub);
    ot_comm_free(sub);
    return st;
}

static void test_subcomm_replica_groups(void) {
    int res[5 * OT_ALGO_COUNT] = {0};
    ASSERT_OK(ot_local_run(4, groups_rank, res, NULL));
    /* groups {0,2} → 1+3 = 4, {3,1} → 4+2 = 6 */
    EXPECT_INT_EQ(res[0 * OT_ALGO_COUNT + OT_ALGO_RING], 4);
    EXPECT_INT_EQ(res[2 * OT_ALGO_COUNT + OT_ALGO_RING], 4);
    EXPECT_INT_EQ(res[1 * OT_ALGO_COUNT + OT_ALGO_RING], 6);
    EXPECT_INT_EQ(res[3 * OT_ALGO_COUNT + OT_ALGO_DIRECT], 6);
    EXPECT_INT_EQ(res[1 * OT_ALGO_COUNT + OT_ALGO_TREE], 6);
    EXPECT_INT_EQ(res[4 * OT_ALGO_COUNT + 3], 2);  /* rank 3 is sub rank 0 of 2 */
    EXPECT_INT_EQ(res[4 * OT_ALGO_COUNT + 1], 12); /* rank 1 is sub rank 1 of 2 */
}

static void test_replica_groups_parse_errors(void) {
    int *g, ng, gs;
    EXPECT_OK(ot_replica_groups_parse("{}", 2, 3, &g, &ng, &gs));
    EXPECT_INT_EQ(ng, 1);
    EXPECT_INT_EQ(gs, 3);
    ot_free(g);
    EXPECT_OK(ot_replica_groups_parse(" { {0, 1} , {2,3} } ", 20, 4, &g, &ng, &gs));
    EXPECT_INT_EQ(ng, 2);
    EXPECT_INT_EQ(g[3], 3);
    ot_free(g);
    int64_t live = ot_alloc_live();
    const char *bad[] = {"",
                         "{",
                         "{{0,1},{2}}",
                         "{{0,1},{1,2}}",
                         "{{0,1},{2,9}}",
                         "{{0,1}}x",
                         "{{0,1},{2,3}",
                         "{{a}}",
                         "{{0,1,2,3}",
                         "{{}}",
                         "{{0,1},{2,99999999999}}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        EXPECT_TRUE(ot_replica_groups_parse(bad[i], strlen(bad[i]), 4, &g, &ng, &gs) != OT_OK);
        EXPECT_TRUE(g == NULL);
    }
    EXPECT_INT_EQ(ot_alloc_live(), live);
    EXPECT_STR_CONTAINS(ot_last_error(), "replica_groups");
}

/* ---- argument checks, cost model, metrics ---- */

static ot_status bad_args_rank(void *ud, int rank, ot_comm *c) {
    int *bad = ud;
    float x[4] = {0};
    ot_coll_options o = ot_coll_options_default();
    bad[rank] = 0;
    bad[rank] +=
        ot_comm_allreduce(c, x, x, 4, OT_U8, OT_REDOP_SUM, NULL) == OT_ERR_INVALID_ARGUMENT;
    bad[rank] +=
        ot_comm_allreduce(c, x, x, 4, OT_F32, (ot_redop)9, NULL) == OT_ERR_INVALID_ARGUMENT;
    o.algo = OT_ALGO_HALVING_DOUBLING;
    bad[rank] += ot_comm_allgather(c, x, x, 1, OT_F32, &o) == OT_ERR_INVALID_ARGUMENT;
    bad[rank] += ot_comm_broadcast(c, x, 4, OT_F32, 7, NULL) == OT_ERR_INVALID_ARGUMENT;
    bad[rank] += ot_comm_alltoall(c, x, x, 1, OT_F32, NULL) == OT_ERR_INVALID_ARGUMENT;
    /* the communicator is still usable after argument errors */
    bad[rank] += ot_comm_barrier(c, NULL) == OT_OK;
    return OT_OK;
}

static void test_bad_arguments(void) {
    int bad[2];
    ASSERT_OK(ot_local_run(2, bad_args_rank, bad, NULL));
    EXPECT_INT_EQ(bad[0], 6);
    EXPECT_INT_EQ(bad[1], 6);
}

static void test_cost_model(void) {
    ot_local_world *w;
    ot_comm *c, *c2;
    ASSERT_OK(probe_comm(8, &w, &c));
    EXPECT_STATUS(ot_local_world_comm(w, 0, &c2), OT_ERR_ALREADY_EXISTS);
    EXPECT_STATUS(ot_local_world_comm(w, 8, &c2), OT_ERR_INVALID_ARGUMENT);
    char buf[1024];
    ot_coll_explain(c, OT_COLL_ALLREDUCE, 64 << 20, buf, sizeof buf);
    EXPECT_STR_CONTAINS(buf, "<- chosen");
    EXPECT_STR_CONTAINS(buf, "halving_doubling");
    for (size_t b = 1; b < (1u << 30); b *= 16) {
        ot_coll_algo a = ot_coll_choose(c, OT_COLL_ALLREDUCE, b);
        EXPECT_TRUE(ot_coll_algo_supported(c, OT_COLL_ALLREDUCE, a));
        for (int k = OT_ALGO_RING; k < OT_ALGO_COUNT; k++)
            EXPECT_TRUE(ot_coll_cost_us(c, OT_COLL_ALLREDUCE, a, b) <=
                        ot_coll_cost_us(c, OT_COLL_ALLREDUCE, (ot_coll_algo)k, b) + 1e-9);
    }
    /* on a 2x4 torus with TPU-like links and no shared memory the ring beats the tree for big
     * buffers and the tree wins for tiny ones */
    ot_topology *t;
    ASSERT_OK(ot_topology_preset("torus-2x4", &t));
    ASSERT_OK(ot_comm_set_topology(c, t));
    EXPECT_TRUE(ot_coll_cost_us(c, OT_COLL_ALLREDUCE, OT_ALGO_RING, 64 << 20) <
                ot_coll_cost_us(c, OT_COLL_ALLREDUCE, OT_ALGO_TREE, 64 << 20));
    EXPECT_TRUE(ot_coll_cost_us(c, OT_COLL_ALLREDUCE, OT_ALGO_TREE, 8) <
                ot_coll_cost_us(c, OT_COLL_ALLREDUCE, OT_ALGO_RING, 8));
    EXPECT_TRUE(ot_coll_algo_supported(c, OT_COLL_ALLREDUCE, OT_ALGO_HIER2D));
    ot_topology_free(t);
    ot_comm_free(c);
    ot_local_world_free(w);
    /* nccl-tests bus bandwidth factors */
    EXPECT_NEAR(ot_coll_bus_factor(OT_COLL_ALLREDUCE, 8), 1.75, 1e-12);
    EXPECT_NEAR(ot_coll_bus_factor(OT_COLL_ALLGATHER, 4), 0.75, 1e-12);
    EXPECT_NEAR(ot_coll_bus_factor(OT_COLL_BROADCAST, 4), 1.0, 1e-12);
    EXPECT_NEAR(ot_coll_algbw_gbs(OT_COLL_ALLREDUCE, 2, 250000000, OT_F32, 1.0), 1.0, 1e-12);
    EXPECT_NEAR(ot_coll_algbw_gbs(OT_COLL_ALLGATHER, 4, 250000000, OT_F32, 2.0), 2.0, 1e-12);
    EXPECT_INT_EQ(ot_coll_algo_from_name("hier2d"), OT_ALGO_HIER2D);
    EXPECT_INT_EQ(ot_redop_from_name("nope"), -1);
}

/* a topology-placed ring: same results as rank order */
static ot_status topo_rank(void *ud, int rank, ot_comm *c) {
    ot_topology *t;
    OT_CHECK(ot_topology_preset("torus-2x4", &t));
    ot_status st = ot_comm_set_topology(c, t);
    ot_topology_free(t);
    OT_CHECK(st);
    int64_t v[33], out[33];
    for (int i = 0; i < 33; i++) v[i] = rank * 100 + i;
    int *ok = ud;
    ok[rank] = 1;
    for (int a = OT_ALGO_RING; a < OT_ALGO_COUNT; a++) {
        ot_coll_options o = ot_coll_options_default();
        o.algo = (ot_coll_algo)a;
        OT_CHECK(ot_comm_allreduce(c, v, out, 33, OT_S64, OT_REDOP_SUM, &o));
        for (int i = 0; i < 33; i++) ok[rank] &= out[i] == 2800 + 8 * i;
        int64_t g[8];
        OT_CHECK(ot_comm_reduce_scatter(c, v, g, 4, OT_S64, OT_REDOP_MAX, &o));
    }
    return OT_OK;
}

static void test_topology_ring_placement(void) {
    int ok[8] = {0};
    ASSERT_OK(ot_local_run(8, topo_rank, ok, NULL));
    for (int r = 0; r < 8; r++) EXPECT_INT_EQ(ok[r], 1);
}

OT_TEST_MAIN(OT_TEST(test_matrix_1), OT_TEST(test_matrix_2), OT_TEST(test_matrix_3_chunked),
             OT_TEST(test_matrix_5), OT_TEST(test_matrix_6_chunked), OT_TEST(test_matrix_8_chunked),
             OT_TEST(test_determinism), OT_TEST(test_tree_reduce_scatter_order),
             OT_TEST(test_peer_failed_mid_allreduce), OT_TEST(test_timeout_mid_allreduce),
             OT_TEST(test_subcomm_replica_groups), OT_TEST(test_replica_groups_parse_errors),
             OT_TEST(test_bad_arguments), OT_TEST(test_cost_model),
             OT_TEST(test_topology_ring_placement))
