/* optitpu bench collectives: an nccl-tests-style table (size, time, algbw, busbw) for one
 * collective over N in-process devices, beside the floor that shared memory sets: every device
 * copying one buffer of the same size at the same time (N concurrent memcpy's), measured in the
 * same run, interleaved with the collective. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 32
#define MAX_REPS  1000

typedef struct bcfg {
    int devices;
    ot_coll_kind kind;
    ot_dtype dt;
    ot_redop op;
    ot_coll_algo algo;
    size_t sizes[MAX_SIZES];
    int nsizes;
    int reps, warmup;
    /* results, written by rank 0 */
    double t_op[MAX_SIZES][MAX_REPS];
    double t_floor[MAX_SIZES][MAX_REPS];
    ot_coll_algo chosen[MAX_SIZES];
    char err[256];
} bcfg;

static void fill(void *buf, size_t bytes, int rank) {
    /* small integers in every dtype's range: sums stay exact and finite */
    unsigned char *p = buf;
    for (size_t i = 0; i < bytes; i++) p[i] = (unsigned char)((i * 7 + (size_t)rank) & 0x3f);
}

static ot_status run_op(ot_comm *c, const bcfg *b, void *send, void *recv, size_t count,
                        const ot_coll_options *o) {
    switch (b->kind) {
    case OT_COLL_ALLREDUCE: return ot_comm_allreduce(c, send, recv, count, b->dt, b->op, o);
    case OT_COLL_REDUCE_SCATTER:
        return ot_comm_reduce_scatter(c, send, recv, count, b->dt, b->op, o);
    case OT_COLL_ALLGATHER: return ot_comm_allgather(c, send, recv, count, b->dt, o);
    case OT_COLL_BROADCAST: return ot_comm_broadcast(c, send, count, b->dt, 0, o);
    case OT_COLL_REDUCE: return ot_comm_reduce(c, send, recv, count, b->dt, b->op, 0, o);
    case OT_COLL_ALLTOALL: return ot_comm_alltoall(c, send, recv, count, b->dt, o);
    default: return ot_error(OT_ERR_INVALID_ARGUMENT, "bench: unsupported collective");
    }
}

/* Per-member element count for nccl-tests size S (bytes). */
static size_t member_count(const bcfg *b, size_t S) {
    size_t esz = ot_dtype_size(b->dt), n = (size_t)b->devices;
    if (b->kind == OT_COLL_REDUCE_SCATTER || b->kind == OT_COLL_ALLGATHER ||
        b->kind == OT_COLL_ALLTOALL)
        return S / esz / n;
    return S / esz;
}

static ot_status bench_rank(void *ud, int rank, ot_comm *c) {
    bcfg *b = ud;
    ot_coll_options o = ot_coll_options_default();
    o.algo = b->algo;
    ot_status st = OT_OK;
    for (int z = 0; z < b->nsizes && st == OT_OK; z++) {
        size_t S = b->sizes[z], count = member_count(b, S), esz = ot_dtype_size(b->dt);
        size_t n = (size_t)b->devices;
        size_t sbytes = count * esz, rbytes = count * esz;
        if (b->kind == OT_COLL_REDUCE_SCATTER || b->kind == OT_COLL_ALLTOALL) sbytes *= n;
        if (b->kind == OT_COLL_ALLGATHER || b->kind == OT_COLL_ALLTOALL) rbytes *= n;
        size_t fb = S; /* the floor: one buffer of the reported size per device */
        size_t sa = sbytes > fb ? sbytes : fb, ra = rbytes > fb ? rbytes : fb;
        char *send = ot_aligned_alloc(64, sa ? sa : 64), *recv = ot_aligned_alloc(64, ra ? ra : 64);
        if (!send || !recv) {
            ot_aligned_free(send);
            ot_aligned_free(recv);
            return ot_error(OT_ERR_OUT_OF_MEMORY, "bench: %zu-byte buffers", sa + ra);
        }
        fill(send, sa, rank);
        memset(recv, 0, ra);
        if (rank == 0) b->chosen[z] = b->algo ? b->algo : ot_coll_choose(c, b->kind, count * esz);
        for (int r = -b->warmup; r < b->reps && st == OT_OK; r++) {
            /* the collective */
            if (b->kind == OT_COLL_BROADCAST || b->kind == OT_COLL_ALLREDUCE)
                fill(send, sbytes, rank);
            st = ot_comm_barrier(c, NULL);
            uint64_t t0 = ot_now_ns();
            if (st == OT_OK) st = run_op(c, b, send, recv, count, &o);
            if (st == OT_OK) st = ot_comm_barrier(c, NULL);
            uint64_t t1 = ot_now_ns();
            /* the floor, interleaved: every device copies one buffer at the same time */
            if (st == OT_OK) st = ot_comm_barrier(c, NULL);
            uint64_t t2 = ot_now_ns();
            memcpy(recv, send, fb);
            if (st == OT_OK) st = ot_comm_barrier(c, NULL);
            uint64_t t3 = ot_now_ns();
            if (rank == 0 && r >= 0) {
                b->t_op[z][r] = (double)(t1 - t0) / 1e3;
                b->t_floor[z][r] = (double)(t3 - t2) / 1e3;
            }
        }
        ot_aligned_free(send);
        ot_aligned_free(recv);
    }
    if (st != OT_OK && rank == 0) snprintf(b->err, sizeof b->err, "%s", ot_last_error());
    return st;
}

static int parse_sizes(const char *s, bcfg *b) {
    b->nsizes = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int64_t v;
        if (b->nsizes == MAX_SIZES || !cli_parse_size(tok, &v) || v < 0 || v > (1LL << 34))
            return -1;
        b->sizes[b->nsizes++] = (size_t)v;
    }
    return b->nsizes ? 0 : -1;
}

static void fmt_size(size_t s, char *out, size_t n) {
    if (s >= (1u << 20) && s % (1u << 20) == 0)
        snprintf(out, n, "%zuMiB", s >> 20);
    else if (s >= 1024 && s % 1024 == 0)
        snprintf(out, n, "%zuKiB", s >> 10);
    else
        snprintf(out, n, "%zuB", s);
}

int cli_bench_collectives_mpi(int argc, char **argv); /* cli/bench_mpi.c */

static int run(int argc, char **argv) {
    const char *cmd = "bench collectives";
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--mpi")) return cli_bench_collectives_mpi(argc, argv);
    bcfg *b = calloc(1, sizeof *b);
    if (!b) return CLI_FAIL;
    b->devices = 2;
    b->kind = OT_COLL_ALLREDUCE;
    b->dt = OT_F32;
    b->op = OT_REDOP_SUM;
    b->algo = OT_ALGO_AUTO;
    b->reps = 5;
    b->warmup = 1;
    parse_sizes("64K,1M,16M,64M", b);
    bool json = false, explain = false;
    int rc = CLI_OK;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        int k;
        if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--explain")) {
            explain = true;
        } else if (!strcmp(a, "--devices") && v && cli_parse_i64(v, 1, 256, &n)) {
            b->devices = (int)n, i++;
        } else if (!strcmp(a, "--op") && v && (k = ot_coll_kind_from_name(v)) >= 0 &&
                   k != OT_COLL_BARRIER) {
            b->kind = (ot_coll_kind)k, i++;
        } else if (!strcmp(a, "--redop") && v && (k = ot_redop_from_name(v)) >= 0) {
            b->op = (ot_redop)k, i++;
        } else if (!strcmp(a, "--algo") && v && (k = ot_coll_algo_from_name(v)) >= 0) {
            b->algo = (ot_coll_algo)k, i++;
        } else if (!strcmp(a, "--dtype") && v &&
                   ot_coll_dtype_supported(ot_dtype_from_name(v, strlen(v)))) {
            b->dt = ot_dtype_from_name(v, strlen(v)), i++;
        } else if (!strcmp(a, "--sizes") && v && parse_sizes(v, b) == 0) {
            i++;
        } else if (!strcmp(a, "--reps") && v && cli_parse_i64(v, 1, MAX_REPS, &n)) {
            b->reps = (int)n, i++;
        } else if (!strcmp(a, "--warmup") && v && cli_parse_i64(v, 0, 100, &n)) {
            b->warmup = (int)n, i++;
        } else {
            free(b);
            return cli_usage_error(cmd, "bad or incomplete argument '%s'", a);
        }
    }
    /* sizes must split evenly where the collective splits them */
    size_t unit = ot_dtype_size(b->dt) * (size_t)b->devices;
    for (int z = 0; z < b->nsizes; z++) b->sizes[z] -= b->sizes[z] % unit;
    if (explain) {
        ot_local_world *w;
        ot_comm *c;
        if (ot_local_world_create(b->devices, &w) != OT_OK ||
            ot_local_world_comm(w, 0, &c) != OT_OK) {
            free(b);
            return cli_fail(cmd);
        }
        char buf[2048];
        for (int z = 0; z < b->nsizes; z++) {
            ot_coll_explain(c, b->kind, member_count(b, b->sizes[z]) * ot_dtype_size(b->dt), buf,
                            sizeof buf);
            fputs(buf, json ? stderr : stdout);
        }
        ot_comm_free(c);
        ot_local_world_free(w);
    }
    if (ot_local_run(b->devices, bench_rank, b, NULL) != OT_OK) {
        fprintf(stderr, "optitpu %s: %s\n", cmd, b->err[0] ? b->err : ot_last_error());
        free(b);
        return CLI_FAIL;
    }
    if (!json) {
        printf("# %s %s %s over %d in-process devices; median of %d after %d warm-up; floor = "
               "%d concurrent memcpy's of one buffer\n",
               ot_coll_kind_name(b->kind), ot_dtype_name(b->dt), ot_redop_name(b->op), b->devices,
               b->reps, b->warmup, b->devices);
        printf("%12s %12s %17s %11s %9s %9s %11s %8s\n", "size", "count", "algo", "time(us)",
               "algbw", "busbw", "floor(us)", "floor/t");
    }
    for (int z = 0; z < b->nsizes; z++) {
        size_t S = b->sizes[z], count = member_count(b, S);
        double t = ot_bench_median(b->t_op[z], (size_t)b->reps);
        double f = ot_bench_median(b->t_floor[z], (size_t)b->reps);
        double alg = ot_coll_algbw_gbs(b->kind, b->devices, count, b->dt, t / 1e6);
        double bus = alg * ot_coll_bus_factor(b->kind, b->devices);
        char sz[32];
        fmt_size(S, sz, sizeof sz);
        if (!json) {
            printf("%12zu %12zu %17s %11.1f %9.2f %9.2f %11.1f %8.2f\n", S, count,
                   ot_coll_algo_name(b->chosen[z]), t, alg, bus, f, t > 0 ? f / t : 0);
            continue;
        }
        char cs[128];
        snprintf(cs, sizeof cs, "%s %s %s x%d %s", ot_coll_kind_name(b->kind), ot_dtype_name(b->dt),
                 sz, b->devices, ot_coll_algo_name(b->chosen[z]));
        ot_bench_row r = {.bench = "collectives",
                          .case_name = cs,
                          .metric = "us",
                          .value = t,
                          .baseline = "N concurrent memcpy (floor)",
                          .baseline_value = f,
                          .ratio = t > 0 ? f / t : 0};
        ot_bench_print(&r, true);
        ot_bench_row r2 = {.bench = "collectives",
                           .case_name = cs,
                           .metric = "busbw GB/s",
                           .value = bus,
                           .baseline = NULL};
        ot_bench_print(&r2, true);
    }
    free(b);
    return rc;
}

const cli_command cli_bench_collectives = {
    "collectives",
    "collective time, algbw and busbw over N in-process devices vs N concurrent memcpy's",
    "usage: optitpu bench collectives [--devices N] [--op OP] [--dtype DT] [--redop R]\n"
    "                                 [--algo A] [--sizes LIST] [--reps N] [--warmup N]\n"
    "                                 [--explain] [--json]\n"
    "       mpirun -np P optitpu bench collectives --mpi [--sizes LIST] [--algo A] [--reps N]\n"
    "                                 [--warmup N] [--chunk BYTES] [--compute-us W]\n"
    "                                 [--no-calibrate] [--explain] [--json]\n"
    "\n"
    "An nccl-tests-style table for one collective over N devices of the local transport (one\n"
    "thread each, shared memory): size S in bytes as nccl-tests counts it, time (median),\n"
    "algbw = S / time, busbw = algbw * the nccl-tests factor (all-reduce 2(n-1)/n). Beside it\n"
    "the floor: all N devices memcpy one S-byte buffer at the same time, measured in the same\n"
    "run, interleaved. floor/t > 1 would mean faster than the floor.\n"
    "\n"
    "  --devices N   devices (default 2)\n"
    "  --op OP       allreduce (default), reduce_scatter, allgather, broadcast, reduce, alltoall\n"
    "  --dtype DT    f32 (default), f64, bf16, f16, s32, s64\n"
    "  --redop R     sum (default), prod, max, min, mean\n"
    "  --algo A      auto (default: the cost model), ring, halving_doubling, tree, hier2d, direct\n"
    "  --sizes LIST  comma list, e.g. 64K,1M,64M (default 64K,1M,16M,64M)\n"
    "  --reps N      timed repetitions (default 5); --warmup N untimed first (default 1)\n"
    "  --explain     print the cost model's estimate for every algorithm first\n"
    "  --json        one JSON object per line (time vs floor, and busbw)\n"
    "\n"
    "With --mpi, every process is one member: our all-reduce beside MPI_Allreduce, each rep\n"
    "started from a barrier. --compute-us W times instead a data-parallel step's rhythm: W us\n"
    "of CPU work on every process, then the all-reduce, 50 times back to back (per step, the\n"
    "slowest rank's), beside the same work alone. --no-calibrate: auto chooses from the\n"
    "default model, as optitpu train --mpi does (it does not calibrate).",
    run,
};
