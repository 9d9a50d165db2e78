/* The pod across processes: the processes of an MPI job (optitpu launch), each with
 * o->devices local devices and one thread per device. The gradients are summed by
 * ot_mpi_hier_allreduce (local devices through shared memory, processes over MPI, a fixed order);
 * process 0 evaluates, reports and writes checkpoints, and a resume restores there and broadcasts.
 * Every stage's verdict is agreed by all-reduce, so a failure on one process stops all instead of
 * leaving them waiting. A failure is not survived in place: Debian's Open MPI ends the job when a
 * process dies, and optitpu launch restarts it from the newest verified checkpoint. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>

#include "optitpu/clock.h"
#include "optitpu/mpi.h"
#include "train/driver.h"

static ot_status mpi_open(trainer *t) {
    const ot_train_options *o = t->o;
    t->prank = ot_mpi_rank(o->mpi);
    t->psize = ot_mpi_size(o->mpi);
    t->spares = 0;
    if (ot_mpi_local_devices(o->mpi) != o->devices)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: the MPI job has %d local devices per process, the options %d",
                        ot_mpi_local_devices(o->mpi), o->devices);
    if (o->batch_size < (int64_t)o->devices * t->psize)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: batch size %lld is smaller than the %d devices",
                        (long long)o->batch_size, o->devices * t->psize);
    if (o->fail_device >= o->devices * t->psize)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "train: --fail-device %d: the pod has %d devices",
                        o->fail_device, o->devices * t->psize);
    if (o->recovery == OT_RECOVER_RESTORE && o->fail_device >= 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: across processes a failure restarts the job from its checkpoint "
                        "(optitpu launch); --recovery applies to one process");
    if (o->topology && o->topology[0])
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: a topology (%s) applies to one process; across processes the pod "
                        "is every process's devices",
                        o->topology);
    return OT_OK;
}

typedef struct mpi_thread {
    trainer *t;
    int rank;
    ot_status st;
} mpi_thread;

static void *mpi_thread_main(void *arg) {
    mpi_thread *m = arg;
    /* --shard-optimizer (one device per process): the update is sharded over the processes'
     * communicator, which this thread alone uses during the segment */
    ot_comm *c = m->t->shard_len ? ot_mpi_comm(m->t->o->mpi) : NULL;
    m->st = train_replica_run(m->t, m->rank, c);
    return NULL;
}

/* One thread per local device; they meet in ot_mpi_hier_allreduce. */
static ot_status mpi_run_segment(trainer *t, ot_status *st) {
    mpi_thread th[MAX_DEVICES];
    pthread_t tid[MAX_DEVICES];
    int started = 0;
    for (int r = 0; r < t->nlive; r++) {
        th[r] = (mpi_thread){t, r, OT_OK};
        if (pthread_create(&tid[r], NULL, mpi_thread_main, &th[r]) != 0) break;
        started++;
    }
    for (int r = 0; r < started; r++) pthread_join(tid[r], NULL);
    if (started < t->nlive) return ot_error(OT_ERR_INTERNAL, "train: cannot start device threads");
    ot_status s = OT_OK;
    for (int r = 0; r < t->nlive; r++) {
        st[r] = th[r].st;
        if (s == OT_OK) s = th[r].st;
    }
    return s;
}

/* One device per process with --allreduce tree (the default): the tree over the processes'
 * communicator, whose per-element order is the in-process tree's and the overlapped exchange's,
 * so the job ends bit for bit as `--devices N` in one process, overlapped or not. Otherwise
 * (auto, another algorithm, several devices per process) the hierarchical all-reduce with MPI's
 * cost model's choice. */
static bool mpi_tree(const trainer *t) {
    return t->nlive == 1 && t->coll.algo == OT_ALGO_TREE;
}

static ot_status mpi_member_begin(trainer *t, train_member *m) {
    if (m->rank == 0 && t->prank == 0 && t->local_sgd)
        train_log(t,
                  "LocalSGD all-reduces over %d devices: the loss and correct count each step, "
                  "the %lld parameters every %lld steps, deadline %.1f s",
                  m->n, (long long)t->total_elems, (long long)t->local_sgd,
                  (double)m->timeout_ns / 1e9);
    else if (m->rank == 0 && t->prank == 0)
        train_log(t,
                  "gradient all-reduce: %zu bytes over %d devices (across processes: %s), "
                  "deadline %.1f s",
                  ((size_t)t->total_elems + 2) * sizeof(float), m->n,
                  mpi_tree(t)
                      ? "tree, --allreduce"
                      : ot_mpi_algo_name(ot_mpi_choose(t->o->mpi, (size_t)t->total_elems + 2,
                                                       OT_F32, OT_REDOP_SUM, NULL)),
                  (double)m->timeout_ns / 1e9);
    return OT_OK;
}

static ot_status mpi_allreduce(trainer *t, train_member *m, float *flat, size_t n) {
    if (mpi_tree(t)) {
        ot_coll_options co = t->coll;
        co.timeout_ns = m->timeout_ns;
        return ot_comm_allreduce(ot_mpi_comm(t->o->mpi), flat, flat, n, OT_F32, OT_REDOP_SUM, &co);
    }
    return ot_mpi_hier_allreduce(t->o->mpi, m->rank, flat, flat, n, OT_F32, OT_REDOP_SUM,
                                 m->timeout_ns);
}

/* One device per process: the exchange across the processes (non-blocking point-to-point,
 * progressed between the kernels). With more local devices the step keeps the hierarchical
 * all-reduce. */
static ot_status mpi_shard_exchange(trainer *t, train_member *m, size_t block, int nbuckets,
                                    const size_t *off, const size_t *len, ot_coll_algo order,
                                    ot_shard_exchange **out) {
    if (t->nlive != 1 || m->n != t->psize)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "train: the overlapped exchange across processes takes one device per "
                        "process (%d here)",
                        t->nlive);
    return ot_mpi_shard_exchange_create(t->o->mpi, block, nbuckets, off, len, order, out);
}

/* A device's failure is its process dying: Open MPI ends the job and optitpu launch restarts it
 * from the newest verified checkpoint. */
static ot_status mpi_inject_fault(trainer *t, train_member *m, int64_t step) {
    if (t->o->fail_device != m->g) return OT_OK;
    fprintf(stderr, "train: device %d (process %d) is killed at step %lld (injected fault)\n", m->g,
            t->prank, (long long)step + 1);
    fflush(NULL);
    kill(getpid(), SIGKILL);
    return ot_error(OT_ERR_INTERNAL, "train: SIGKILL returned");
}

static ot_status mpi_agree(trainer *t, ot_status s, const char *what) {
    int32_t bad = s != OT_OK, any = 0;
    ot_status c =
        ot_comm_allreduce(ot_mpi_comm(t->o->mpi), &bad, &any, 1, OT_S32, OT_REDOP_MAX, NULL);
    if (s != OT_OK) return s;
    if (c != OT_OK) return c;
    if (any) return ot_error(OT_ERR_PEER_FAILED, "train: another process failed during %s", what);
    return OT_OK;
}

/* Across processes, process 0 restored the checkpoint: it sends the step, the parameters and
 * the optimizer state to every other process, whose local replicas take them. */
static ot_status mpi_share_restore(trainer *t, int64_t *step, bool *found) {
    ot_comm *c = ot_mpi_comm(t->o->mpi);
    int64_t hdr[2] = {*found ? 1 : 0, *step};
    ot_status s = ot_comm_broadcast(c, hdr, 2, OT_S64, 0, NULL);
    if (s != OT_OK || !hdr[0]) {
        *found = false;
        return s;
    }
    *found = true;
    *step = hdr[1];
    /* sharded: the parameters as below, then each process's block of the optimizer state */
    int ns = t->shard_len ? 0 : ot_tpu_optimizer_state_count(t->topt);
    for (int i = 0; s == OT_OK && i < t->nparams + ns; i++) {
        ot_tensor h;
        memset(&h, 0, sizeof h);
        bool is_param = i < t->nparams;
        int k = is_param ? i : i - t->nparams;
        if (t->prank == 0) {
            s = is_param ? ot_buffer_to_host(t->reps[0].params[k], &h)
                         : ot_tpu_optimizer_get_state(t->topt, t->reps[0].dev, k, &h);
        } else {
            ot_shape sh;
            if (is_param)
                sh = *ot_model_param_shape(t->model, k);
            else
                s = ot_tpu_optimizer_state_shape(t->topt, k, &sh);
            if (s == OT_OK) s = ot_tensor_alloc(&h, &sh);
        }
        if (s == OT_OK) s = ot_comm_broadcast(c, h.data, h.nbytes, OT_U8, 0, NULL);
        for (int r = 0; s == OT_OK && t->prank != 0 && r < t->nlive; r++) {
            if (is_param) {
                ot_buffer_free(t->reps[r].params[k]);
                t->reps[r].params[k] = NULL;
                s = ot_buffer_from_host(t->reps[r].dev, &h, &t->reps[r].params[k]);
            } else {
                s = ot_tpu_optimizer_set_state(t->topt, t->reps[r].dev, k, &h);
            }
        }
        ot_tensor_release(&h);
    }
    if (s == OT_OK && t->shard_len) s = train_shard_restore_share(t, c);
    return s;
}

/* And every process's replicas hold the same parameters as process 0's. */
static ot_status mpi_check_same(trainer *t, ot_status s, const uint8_t sha[32]) {
    s = mpi_agree(t, s, "the final check");
    uint8_t *all = s == OT_OK ? ot_malloc((size_t)t->psize * 32) : NULL;
    if (s == OT_OK && !all) s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: parameter hashes");
    if (s == OT_OK) s = ot_comm_allgather(ot_mpi_comm(t->o->mpi), sha, all, 32, OT_U8, NULL);
    for (int p = 1; s == OT_OK && p < t->psize; p++)
        if (memcmp(all + 32 * p, all, 32) != 0)
            s = ot_error(OT_ERR_INTERNAL, "train: process %d's parameters differ from process 0's",
                         p);
    ot_free(all);
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * One timeline: every process's trace shifted onto process 0's clock and merged there
 * ------------------------------------------------------------------------------------------- */

/* Tracing is on for every process when it is on for one (the merge is collective). */
static ot_status mpi_start(trainer *t) {
    int32_t on = t->trace != NULL, any = 0;
    ot_status s =
        ot_comm_allreduce(ot_mpi_comm(t->o->mpi), &on, &any, 1, OT_S32, OT_REDOP_MAX, NULL);
    if (s == OT_OK && any && !t->trace) s = ot_pod_trace_create(&t->trace);
    return s;
}

/* RFC 5905's frequency tolerance: how far two clocks may drift apart per second. */
#define CLOCK_PHI 15e-6

/* A process's clock against process 0's: offset (process 0's clock minus this one's) and the
 * bound on its error, in ns; what measured it. */
typedef struct clock_rel {
    int64_t offset_ns, bound_ns, delay_ns, samples;
} clock_rel;

static void *ntp_serve(void *arg) {
    ot_ntp_server_run(arg);
    return NULL;
}

/* Collective. Process 0 serves NTP on a free port; every other process queries it (8 exchanges,
 * the minimum-delay sample's offset θ, delay δ and dispersion ε): the true offset lies within
 * θ ± (δ/2 + ε) at the measurement, plus the clocks' possible drift since the trace began
 * (PHI · span). */
static ot_status measure_offset(trainer *t, clock_rel *me) {
    ot_comm *c = ot_mpi_comm(t->o->mpi);
    memset(me, 0, sizeof *me);
    ot_ntp_server *srv = NULL;
    pthread_t th;
    bool serving = false;
    int64_t hdr[2] = {0, 0}; /* port, 1 when serving */
    char host[256] = "";
    ot_status s = OT_OK;
    if (t->prank == 0) {
        ot_ntp_server_options so = ot_ntp_server_options_default();
        so.port = 0;
        s = ot_ntp_server_create(&so, &srv);
        if (s == OT_OK && pthread_create(&th, NULL, ntp_serve, srv) == 0) {
            serving = true;
            hdr[0] = ot_ntp_server_port(srv);
            hdr[1] = 1;
        } else if (s == OT_OK) {
            s = ot_error(OT_ERR_INTERNAL, "train: cannot start the NTP server thread");
        }
        if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
    }
    ot_status bs = ot_comm_broadcast(c, hdr, 2, OT_S64, 0, NULL);
    if (bs == OT_OK) bs = ot_comm_broadcast(c, host, sizeof host, OT_U8, 0, NULL);
    if (s == OT_OK) s = bs;
    if (s == OT_OK && t->prank != 0 && !hdr[1])
        s = ot_error(OT_ERR_PEER_FAILED, "train: process 0 could not serve its clock");
    if (s == OT_OK && t->prank != 0) {
        char mine[256] = "", addr[300];
        if (gethostname(mine, sizeof mine - 1) != 0) mine[0] = 0;
        host[sizeof host - 1] = 0;
        /* the same host: the loopback, whatever the name resolves to */
        snprintf(addr, sizeof addr, "%s:%lld", !host[0] || !strcmp(host, mine) ? "127.0.0.1" : host,
                 (long long)hdr[0]);
        ot_ntp_query_options qo = ot_ntp_query_options_default();
        qo.samples = 8;
        qo.interval_ms = 5;
        qo.timeout_ms = 1000;
        qo.skip_distance_check = true;
        ot_ntp_query_result *r = ot_calloc(1, sizeof *r);
        s = r ? ot_ntp_query(addr, &qo, r) : ot_error(OT_ERR_OUT_OF_MEMORY, "train: NTP query");
        if (s == OT_OK) {
            double span = (double)(ot_now_ns() - t->loop_start_ns) / 1e9;
            me->offset_ns = llround(r->offset * 1e9);
            me->delay_ns = llround(r->delay * 1e9);
            me->bound_ns = llround((r->delay / 2 + r->dispersion + CLOCK_PHI * span) * 1e9);
            me->samples = r->n_samples;
        } else {
            s = ot_error_wrap(s, "train: measuring this process's clock against process 0's (%s)",
                              addr);
        }
        ot_free(r);
    }
    /* process 0 serves until every process has measured */
    s = mpi_agree(t, s, "the clock offset measurement");
    if (serving) {
        ot_ntp_server_stop(srv);
        pthread_join(th, NULL);
    }
    ot_ntp_server_free(srv);
    return s;
}

/* Process 0: the processes' traces as one Chrome trace, each event's pid its process, a
 * process_name row saying its offset and bound, and otherData.clock listing them. */
static ot_status merge_traces(trainer *t, char *const *js, const int64_t *len, const clock_rel *rel,
                              const char *path) {
    json_t *root = json_object(), *evs = json_array(), *clk = json_array(), *other = json_object();
    ot_status s =
        root && evs && clk && other ? OT_OK : ot_error(OT_ERR_OUT_OF_MEMORY, "train: trace");
    for (int p = 0; s == OT_OK && p < t->psize; p++) {
        json_error_t err;
        json_t *tr = json_loadb(js[p], (size_t)len[p], 0, &err);
        json_t *pe = json_object_get(tr, "traceEvents");
        if (!json_is_array(pe)) {
            s = ot_error(OT_ERR_CORRUPT_DATA, "train: process %d's trace does not parse: %s", p,
                         err.text);
        } else {
            char name[160];
            snprintf(name, sizeof name, "process %d (clock %+.1f us +/- %.1f us from process 0's)",
                     p, (double)rel[p].offset_ns / 1e3, (double)rel[p].bound_ns / 1e3);
            json_t *m = json_pack("{s:s, s:s, s:i, s:{s:s}}", "name", "process_name", "ph", "M",
                                  "pid", p, "args", "name", name);
            json_t *c = json_pack(
                "{s:i, s:I, s:I, s:I, s:I}", "process", p, "offset_ns",
                (json_int_t)rel[p].offset_ns, "error_bound_ns", (json_int_t)rel[p].bound_ns,
                "delay_ns", (json_int_t)rel[p].delay_ns, "samples", (json_int_t)rel[p].samples);
            if (!m || !c || json_array_append_new(evs, m) || json_array_extend(evs, pe) ||
                json_array_append_new(clk, c))
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: trace");
        }
        json_decref(tr);
    }
    if (s == OT_OK &&
        (json_object_set_new(other, "time_base",
                             json_string("process 0's clock: each process's events shifted by "
                                         "its NTP-measured offset to process 0")) ||
         json_object_set(other, "clock", clk) || json_object_set(root, "traceEvents", evs) ||
         json_object_set_new(root, "displayTimeUnit", json_string("ns")) ||
         json_object_set(root, "otherData", other)))
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: trace");
    char tmp[4200];
    if (s == OT_OK && snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        s = ot_error(OT_ERR_INVALID_ARGUMENT, "train: trace path too long");
    if (s == OT_OK && json_dump_file(root, tmp, JSON_COMPACT) != 0)
        s = ot_error(OT_ERR_IO, "train: cannot write %s", tmp);
    if (s == OT_OK && rename(tmp, path) != 0)
        s = ot_error(OT_ERR_IO, "train: rename %s -> %s: %s", tmp, path, strerror(errno));
    json_decref(root);
    json_decref(evs);
    json_decref(clk);
    json_decref(other);
    return s;
}

/* Collective: each process's events on process 0's time base (its measured offset applied),
 * gathered on process 0 and written there as one file. */
static ot_status mpi_write_trace(trainer *t, ot_status s, ot_profile *pf) {
    s = mpi_agree(t, s, "the trace");
    if (s != OT_OK) return s;
    ot_comm *c = ot_mpi_comm(t->o->mpi);
    clock_rel me;
    s = measure_offset(t, &me);
    if (s != OT_OK) return s;
    ot_profile_set_time_offset(pf, me.offset_ns);
    ot_profile_set_pid(pf, t->prank);
    char *mine = NULL;
    s = ot_profile_chrome_trace(pf, &mine);
    s = mpi_agree(t, s, "the trace");
    int P = t->psize;
    clock_rel *rel = ot_calloc((size_t)P, sizeof *rel);
    int64_t *len = ot_calloc((size_t)P, sizeof *len);
    char **js = ot_calloc((size_t)P, sizeof *js);
    if (s == OT_OK && (!rel || !len || !js)) s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: trace");
    s = mpi_agree(t, s, "the trace");
    int64_t ml = mine ? (int64_t)strlen(mine) : 0;
    if (s == OT_OK) s = ot_comm_allgather(c, &me, rel, 4, OT_S64, NULL);
    if (s == OT_OK) s = ot_comm_allgather(c, &ml, len, 1, OT_S64, NULL);
    /* each process's text to process 0 (a broadcast: the communicator's one-to-all) */
    for (int p = 0; s == OT_OK && p < P; p++) {
        if (p == t->prank) {
            js[p] = mine;
            mine = NULL;
        } else if (!(js[p] = ot_malloc((size_t)len[p] + 1))) {
            s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: trace of process %d", p);
        }
        s = mpi_agree(t, s, "the trace");
        if (s == OT_OK) s = ot_comm_broadcast(c, js[p], (size_t)len[p], OT_U8, p, NULL);
        if (s == OT_OK && t->prank != 0 && p != t->prank) {
            ot_free(js[p]); /* only process 0 keeps them */
            js[p] = NULL;
        }
    }
    if (s == OT_OK && t->prank == 0 && t->o->trace_path) {
        s = merge_traces(t, js, len, rel, t->o->trace_path);
        for (int p = 1; s == OT_OK && p < P; p++)
            train_log(t,
                      "trace: process %d's events shifted onto process 0's clock by %+.1f us "
                      "(NTP, %lld samples, delay %.1f us; error bound %.1f us)",
                      p, (double)rel[p].offset_ns / 1e3, (long long)rel[p].samples,
                      (double)rel[p].delay_ns / 1e3, (double)rel[p].bound_ns / 1e3);
        if (s == OT_OK) train_log(t, "trace: %d processes merged into %s", P, t->o->trace_path);
    }
    s = mpi_agree(t, s, "writing the merged trace");
    for (int p = 0; js && p < P; p++) ot_free(js[p]);
    ot_free(js);
    ot_free(len);
    ot_free(rel);
    ot_free(mine);
    return s;
}

const train_pod_vtable train_pod_mpi = {
    .name = "mpi",
    .processes = true,
    .comm_traced = false,
    .open = mpi_open,
    .run_segment = mpi_run_segment,
    .member_begin = mpi_member_begin,
    .allreduce = mpi_allreduce,
    .shard_exchange = mpi_shard_exchange,
    .inject_fault = mpi_inject_fault,
    .agree = mpi_agree,
    .share_restore = mpi_share_restore,
    .check_same = mpi_check_same,
    .start = mpi_start,
    .write_trace = mpi_write_trace,
};
