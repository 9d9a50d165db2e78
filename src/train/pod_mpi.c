/* The pod across processes: the processes of an MPI job (optitpu launch), each with
 * o->devices local devices and one thread per device. The gradients are summed by
 * ot_mpi_hier_allreduce (local devices through shared memory, processes over MPI, a fixed order);
 * process 0 evaluates, reports and writes checkpoints, and a resume restores there and broadcasts.
 * Every stage's verdict is agreed by all-reduce, so a failure on one process stops all instead of
 * leaving them waiting. A failure is not survived in place: Debian's Open MPI ends the job when a
 * process dies, and optitpu launch restarts it from the newest verified checkpoint. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
    m->st = train_replica_run(m->t, m->rank, NULL);
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

static ot_status mpi_member_begin(trainer *t, train_member *m) {
    if (m->rank == 0 && t->prank == 0 && t->local_sgd)
        train_log(t,
                  "LocalSGD all-reduces over %d devices: the loss and correct count each step, "
                  "the %lld parameters every %lld steps, deadline %.1f s",
                  m->n, (long long)t->total_elems, (long long)t->local_sgd,
                  (double)m->timeout_ns / 1e9);
    else if (m->rank == 0 && t->prank == 0)
        train_log(t, "gradient all-reduce: %zu bytes over %d devices, deadline %.1f s",
                  ((size_t)t->total_elems + 2) * sizeof(float), m->n, (double)m->timeout_ns / 1e9);
    return OT_OK;
}

static ot_status mpi_allreduce(trainer *t, train_member *m, float *flat, size_t n) {
    return ot_mpi_hier_allreduce(t->o->mpi, m->rank, flat, flat, n, OT_F32, OT_REDOP_SUM,
                                 m->timeout_ns);
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
    int ns = ot_tpu_optimizer_state_count(t->topt);
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

const train_pod_vtable train_pod_mpi = {
    .name = "mpi",
    .processes = true,
    .comm_traced = false,
    .open = mpi_open,
    .run_segment = mpi_run_segment,
    .member_begin = mpi_member_begin,
    .allreduce = mpi_allreduce,
    .inject_fault = mpi_inject_fault,
    .agree = mpi_agree,
    .share_restore = mpi_share_restore,
    .check_same = mpi_check_same,
};
