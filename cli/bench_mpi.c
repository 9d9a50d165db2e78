/* optitpu bench collectives --mpi: run under mpirun; every process is one member. Our all-reduce
 * (ot_mpi_allreduce: the algorithm the measured model picks, or --algo) beside MPI_Allreduce
 * called directly with Open MPI's default settings, in the same run, interleaved rep by rep, on
 * the same buffers. A rep's time is the slowest rank's; the figures are medians. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MPI_MAX_SIZES 16
#define MPI_MAX_REPS  200

int cli_bench_collectives_mpi(int argc, char **argv);

static int parse_sizes_list(const char *s, size_t *sizes, int *n) {
    *n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int64_t v;
        if (*n == MPI_MAX_SIZES || !cli_parse_size(tok, &v) || v < 4 || v > (1LL << 31)) return -1;
        sizes[(*n)++] = (size_t)v;
    }
    return *n ? 0 : -1;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* the slowest rank's time of one rep (an all-reduce of one double with MAX, through our own
 * communicator so the baseline path stays untouched) */
static ot_status slowest(ot_mpi *m, double t, double *out) {
    double v = t;
    ot_coll_options o = ot_coll_options_default();
    OT_CHECK(ot_comm_allreduce(ot_mpi_comm(m), &v, &v, 1, OT_F64, OT_REDOP_MAX, &o));
    *out = v;
    return OT_OK;
}

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Work on this thread until it has had cpu_ns of CPU time (a data-parallel step's compute: CPU
 * work, which takes longer in wall time when the processes share the cores). */
static void busy_cpu(uint64_t cpu_ns) {
    uint64_t t0 = thread_cpu_ns();
    volatile double x = 1;
    while (thread_cpu_ns() - t0 < cpu_ns)
        for (int i = 0; i < 64; i++) x = x * 1.0000001 + 1e-9;
}

/* --compute-us W: the all-reduce as a data-parallel step meets it. Every process does W us of
 * CPU work, then the all-reduce, back to back with no barrier between steps, `steps` times; a
 * round's figure is the slowest rank's wall time per step. The processes arrive at the
 * all-reduce as the scheduler ran them (more processes than cores: taking turns), unlike the
 * timed all-reduce above, which starts from a barrier. */
static ot_status step_rounds(ot_mpi *m, float *send, float *recv, size_t count, double compute_us,
                             const ot_mpi_coll_options *mo, int rounds, int steps, double *out) {
    for (int r = -1; r < rounds; r++) {
        OT_CHECK(ot_mpi_barrier(m, 0));
        uint64_t t0 = ot_now_ns();
        for (int k = 0; k < steps; k++) {
            busy_cpu((uint64_t)(compute_us * 1e3));
            OT_CHECK(ot_mpi_allreduce(m, send, recv, count, OT_F32, OT_REDOP_SUM, mo));
        }
        double per = (double)(ot_now_ns() - t0) / 1e3 / steps, slow = 0;
        OT_CHECK(slowest(m, per, &slow));
        if (r >= 0) out[r] = slow;
    }
    return OT_OK;
}

int cli_bench_collectives_mpi(int argc, char **argv) {
    const char *cmd = "bench collectives --mpi";
    size_t sizes[MPI_MAX_SIZES];
    int nsizes = 0, reps = 7, warmup = 2;
    bool json = false, explain = false, calibrate = true;
    double compute_us = -1;
    ot_mpi_coll_options mo = ot_mpi_coll_options_default();
    parse_sizes_list("1M,64M", sizes, &nsizes);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        int k;
        if (!strcmp(a, "--mpi")) {
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--explain")) {
            explain = true;
        } else if (!strcmp(a, "--sizes") && v && parse_sizes_list(v, sizes, &nsizes) == 0) {
            i++;
        } else if (!strcmp(a, "--reps") && v && cli_parse_i64(v, 1, MPI_MAX_REPS, &n)) {
            reps = (int)n, i++;
        } else if (!strcmp(a, "--warmup") && v && cli_parse_i64(v, 0, 100, &n)) {
            warmup = (int)n, i++;
        } else if (!strcmp(a, "--algo") && v && (k = ot_mpi_algo_from_name(v)) >= 0) {
            mo.algo = (ot_mpi_algo)k, i++;
        } else if (!strcmp(a, "--chunk") && v && cli_parse_size(v, &n) && n > 0) {
            mo.chunk_bytes = (size_t)n, i++;
        } else if (!strcmp(a, "--no-calibrate")) {
            calibrate = false;
        } else if (!strcmp(a, "--compute-us") && v && cli_parse_i64(v, 0, 1000000, &n)) {
            compute_us = (double)n, i++;
        } else {
            return cli_usage_error("bench",
                                   "collectives --mpi: bad or incomplete argument '%s' "
                                   "(--sizes --reps --warmup --algo --chunk "
                                   "--compute-us --no-calibrate --explain --json)",
                                   a);
        }
    }
    if (!ot_mpi_available()) {
        fprintf(stderr, "optitpu %s: SKIPPED: this optitpu was built without MPI\n", cmd);
        return CLI_FAIL;
    }
    ot_mpi *m;
    if (ot_mpi_init(NULL, &m) != OT_OK) return cli_fail(cmd);
    int rank = ot_mpi_rank(m), np = ot_mpi_size(m), rc = CLI_OK;
    double *tours = calloc((size_t)reps, sizeof *tours),
           *tbase = calloc((size_t)reps, sizeof *tbase);
    /* --no-calibrate: `auto` chooses from the default model, as a process that does not
     * calibrate (optitpu train --mpi) does */
    if (!tours || !tbase || (calibrate && ot_mpi_calibrate(m) != OT_OK)) {
        rc = cli_fail(cmd);
        goto out;
    }
    ot_cost_params p2p, nat;
    ot_mpi_model(m, &p2p, &nat);
    if (rank == 0 && !json) {
        printf("# allreduce f32 sum over %d MPI processes; median of %d after %d warm-up; "
               "interleaved with MPI_Allreduce (Open MPI defaults) on the same buffers\n",
               np, reps, warmup);
        if (!calibrate)
            printf("# not calibrated: auto chooses from the default model\n");
        else
            printf("# measured: point-to-point %.1f us + %.2f GB/s; MPI_Iallreduce %.1f us + %.2f "
                   "GB/s\n",
                   p2p.alpha_us, p2p.gbytes_per_s, nat.alpha_us, nat.gbytes_per_s);
        ot_cost_params shm;
        if (ot_mpi_model_shm(m, &shm))
            printf("# measured: shared-memory all-reduce %.1f us + %.2f GB/s (one node)\n",
                   shm.alpha_us, shm.gbytes_per_s);
        else
            printf("# shared-memory all-reduce: unavailable (%s)\n",
                   ot_mpi_shared_memory(m) ? "not calibrated" : "processes on several nodes");
        printf("%12s %17s %12s %16s %8s\n", "size", "algo", "ours(us)", "MPI_Allreduce(us)",
               "ratio");
    }
    for (int z = 0; z < nsizes && rc == CLI_OK; z++) {
        size_t count = sizes[z] / 4;
        float *send = ot_aligned_alloc(64, count * 4), *recv = ot_aligned_alloc(64, count * 4);
        if (!send || !recv) {
            ot_aligned_free(send);
            ot_aligned_free(recv);
            ot_error(OT_ERR_OUT_OF_MEMORY, "bench: %zu-byte buffers", 2 * count * 4);
            rc = cli_fail(cmd);
            break;
        }
        for (size_t i = 0; i < count; i++) send[i] = (float)((i * 7 + (size_t)rank) & 63);
        memset(recv, 0, count * 4);
        ot_mpi_algo algo = ot_mpi_choose(m, count, OT_F32, OT_REDOP_SUM, &mo);
        if (explain && rank == 0)
            for (int a = OT_MPI_ALGO_NATIVE; a < OT_MPI_ALGO_COUNT; a++)
                fprintf(json ? stderr : stdout, "#   %-17s %12.1f us (model)%s\n",
                        ot_mpi_algo_name((ot_mpi_algo)a),
                        ot_mpi_cost_us(m, (ot_mpi_algo)a, count, OT_F32),
                        a == (int)algo ? "  <- chosen" : "");
        ot_status st = OT_OK;
        if (compute_us >= 0) {
            /* the step-like loop, and the same loop's CPU work alone (no all-reduce) */
            enum { STEPS = 50 };
            st = step_rounds(m, send, recv, count, compute_us, &mo, reps, STEPS, tours);
            for (int r = -1; r < reps && st == OT_OK; r++) {
                st = ot_mpi_barrier(m, 0);
                uint64_t t0 = ot_now_ns();
                for (int k = 0; k < STEPS; k++) busy_cpu((uint64_t)(compute_us * 1e3));
                double per = (double)(ot_now_ns() - t0) / 1e3 / STEPS, slow = 0;
                if (st == OT_OK) st = slowest(m, per, &slow);
                if (r >= 0) tbase[r] = slow;
            }
            ot_aligned_free(send);
            ot_aligned_free(recv);
            if (st != OT_OK) {
                rc = cli_fail(cmd);
                break;
            }
            if (rank != 0) continue;
            double to = median(tours, reps), tb = median(tbase, reps);
            char cs[128];
            snprintf(cs, sizeof cs, "step %.0fus + allreduce f32 %zuKiB np%d %s", compute_us,
                     sizes[z] >> 10, np, ot_mpi_algo_name(algo));
            ot_bench_row row = {.bench = "collectives_mpi",
                                .case_name = cs,
                                .metric = "us",
                                .value = to,
                                .baseline = "the CPU work alone, no all-reduce",
                                .baseline_value = tb,
                                .ratio = to > 0 ? tb / to : 0};
            ot_bench_print(&row, json);
            fflush(stdout);
            continue;
        }
        for (int r = -warmup; r < reps && st == OT_OK; r++) {
            /* ours */
            st = ot_mpi_barrier(m, 0);
            uint64_t t0 = ot_now_ns();
            if (st == OT_OK) st = ot_mpi_allreduce(m, send, recv, count, OT_F32, OT_REDOP_SUM, &mo);
            double a = (double)(ot_now_ns() - t0) / 1e3;
            /* MPI_Allreduce, directly, same buffers */
            if (st == OT_OK) st = ot_mpi_barrier(m, 0);
            uint64_t t1 = ot_now_ns();
            if (st == OT_OK)
                st = ot_mpi_allreduce_plain(m, send, recv, count, OT_F32, OT_REDOP_SUM);
            double b = (double)(ot_now_ns() - t1) / 1e3;
            double sa = 0, sb = 0;
            if (st == OT_OK) st = slowest(m, a, &sa);
            if (st == OT_OK) st = slowest(m, b, &sb);
            if (r >= 0) tours[r] = sa, tbase[r] = sb;
        }
        ot_aligned_free(send);
        ot_aligned_free(recv);
        if (st != OT_OK) {
            rc = cli_fail(cmd);
            break;
        }
        if (rank != 0) continue;
        double to = median(tours, reps), tb = median(tbase, reps);
        char cs[128];
        snprintf(cs, sizeof cs, "allreduce f32 %zuKiB np%d %s", sizes[z] >> 10, np,
                 ot_mpi_algo_name(algo));
        if (!json) {
            printf("%12zu %17s %12.1f %16.1f %8.2f\n", sizes[z], ot_mpi_algo_name(algo), to, tb,
                   to > 0 ? tb / to : 0);
        } else {
            ot_bench_row row = {.bench = "collectives_mpi",
                                .case_name = cs,
                                .metric = "us",
                                .value = to,
                                .baseline = "MPI_Allreduce (Open MPI defaults)",
                                .baseline_value = tb,
                                .ratio = to > 0 ? tb / to : 0};
            ot_bench_print(&row, true);
        }
        fflush(stdout);
    }
out:
    free(tours);
    free(tbase);
    ot_mpi_free(m);
    return rc;
}
