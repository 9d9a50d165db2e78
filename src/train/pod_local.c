/* The pod in one process: host devices, one thread each, joined by a local world (shared memory)
 * made anew for every segment between failures. A heartbeat agent beats for every live device into
 * a coordinator whose phi-accrual detector declares a silent device failed; the world is then
 * failed so the survivors leave the all-reduce, and the pod either shrinks to the survivors or
 * puts a spare device in the failed one's place and rolls back to the newest checkpoint. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "train/driver.h"

#define HEARTBEAT_NS (10 * 1000000ull)

typedef struct local_pod {
    int ndev; /* backend devices: the pod's and the spares */
    ot_topology *topo;
    ot_slice_lease *lease; /* --slice: held until the pod closes */
    bool used_dev[MAX_DEVICES];
    /* failure detection */
    ot_coord *coord;
    int coord_id[MAX_DEVICES];
    atomic_bool alive[MAX_DEVICES];
    atomic_bool agent_stop;
    pthread_t agent;
    bool agent_running;
    /* under t->mu: the segment's world and the failure being handled */
    ot_local_world *world;
    int world_rank_of_dev[MAX_DEVICES];
    bool fault_done;
    int failed_dev;
    uint64_t stop_ns, detect_ns;
} local_pod;

static local_pod *lp_of(trainer *t) {
    return t->pod;
}

/* ---------------------------------------------------------------------------------------------
 * Set-up: the spare, the topology; heartbeats and failure detection
 * ------------------------------------------------------------------------------------------- */

/* --slice: the lease, the sub-mesh as the pod's topology, the devices' pod ids in the report. */
static ot_status open_slice(trainer *t, local_pod *lp) {
    const ot_train_options *o = t->o;
    char preset[64];
    int shape[OT_TOPO_MAX_DIMS], origin[OT_TOPO_MAX_DIMS], extent[OT_TOPO_MAX_DIMS];
    ot_status s = ot_slice_spec_parse(o->slice, preset, sizeof preset, shape);
    if (s == OT_OK) s = ot_slice_lease_acquire(o->slice_registry, preset, shape, &lp->lease);
    if (s != OT_OK) return ot_error_wrap(s, "train: --slice %s", o->slice);
    int n = ot_slice_lease_devices(lp->lease, NULL, 0);
    if (n != o->devices)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --slice %s has %d devices but --devices is %d (leave --devices "
                        "out, or give %d)",
                        o->slice, n, o->devices, n);
    t->rep->slice_devices = ot_malloc(sizeof(int) * (size_t)n);
    if (!t->rep->slice_devices) return ot_error(OT_ERR_OUT_OF_MEMORY, "train: slice");
    t->rep->nslice_devices = ot_slice_lease_devices(lp->lease, t->rep->slice_devices, n);
    ot_topology *pod = NULL;
    ot_slice_lease_box(lp->lease, origin, extent);
    s = ot_topology_preset(preset, &pod);
    if (s == OT_OK) s = ot_topology_slice(pod, origin, extent, &lp->topo, NULL);
    char ids[512];
    size_t k = 0;
    for (int i = 0; i < n && k < sizeof ids - 16; i++)
        k += (size_t)snprintf(ids + k, sizeof ids - k, "%s%d", i ? "," : "",
                              t->rep->slice_devices[i]);
    if (s == OT_OK)
        train_log(t,
                  "slice %s: devices %s of %s (origin %d,%d,%d, extent %dx%dx%d; %d of its %d "
                  "devices held by other jobs), topology %s",
                  o->slice, ids, preset, origin[0], origin[1], origin[2], extent[0], extent[1],
                  extent[2], ot_slice_lease_others(lp->lease), ot_topology_size(pod),
                  ot_topology_name(lp->topo));
    ot_topology_free(pod);
    return s;
}

static ot_status local_open(trainer *t) {
    const ot_train_options *o = t->o;
    local_pod *lp = ot_calloc(1, sizeof *lp);
    if (!lp) return ot_error(OT_ERR_OUT_OF_MEMORY, "train: pod");
    t->pod = lp;
    lp->failed_dev = -1;
    t->prank = 0;
    t->psize = 1;
    if (o->fail_device >= o->devices)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --fail-device D@STEP needs 0 <= D < %d and STEP >= 1 (got %d@%lld)",
                        o->devices, o->fail_device, (long long)o->fail_step);
    if (o->fail_device >= 0 && o->devices < 2 && o->recovery == OT_RECOVER_SHRINK)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: a one-device pod cannot shrink after a failure");
    if (o->slice) {
        ot_status s = open_slice(t, lp);
        if (s != OT_OK) return s;
    }
    /* one spare device for the restore policy, one for a migration */
    t->spares = (o->recovery == OT_RECOVER_RESTORE ? 1 : 0) + (o->migrate_device >= 0 ? 1 : 0);
    lp->ndev = o->devices + t->spares;
    for (int d = 0; d < o->devices; d++) lp->used_dev[d] = true;
    /* an explicit topology must fit the pod; without one, 8 devices are a 2x4 torus and other
     * counts have none (the collectives' own rings) */
    if (lp->topo) return OT_OK; /* the slice's */
    bool topo_explicit = o->topology && o->topology[0];
    const char *name = topo_explicit ? o->topology : o->devices == 8 ? "torus-2x4" : NULL;
    if (!name) return OT_OK;
    ot_status s = ot_topology_preset(name, &lp->topo);
    if (s == OT_OK && ot_topology_size(lp->topo) != o->devices) {
        s = ot_error(OT_ERR_INVALID_ARGUMENT,
                     "train: topology %s has %d devices, the pod %d (--devices %d)", name,
                     ot_topology_size(lp->topo), o->devices, o->devices);
        ot_topology_free(lp->topo);
        lp->topo = NULL;
    }
    return s;
}

static void *agent_main(void *arg) {
    trainer *t = arg;
    local_pod *lp = lp_of(t);
    while (!atomic_load(&lp->agent_stop)) {
        for (int d = 0; d < lp->ndev; d++)
            if (atomic_load(&lp->alive[d])) ot_coord_heartbeat(lp->coord, lp->coord_id[d]);
        ot_coord_tick(lp->coord);
        struct timespec ts = {0, (long)HEARTBEAT_NS};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void on_coord_event(void *ud, const ot_coord_event *e) {
    trainer *t = ud;
    local_pod *lp = lp_of(t);
    if (e->kind != OT_EVENT_FAILED) return;
    int dev = -1;
    for (int d = 0; d < lp->ndev; d++)
        if (lp->coord_id[d] == e->device) dev = d;
    if (dev < 0) return;
    pthread_mutex_lock(&t->mu);
    int rank = lp->world_rank_of_dev[dev];
    bool first = lp->failed_dev < 0 || lp->failed_dev == dev;
    if (first) {
        /* fenced: a device declared failed leaves the pod even if it was only late */
        lp->detect_ns = ot_now_ns();
        lp->failed_dev = dev;
        atomic_store(&lp->alive[dev], false);
        if (lp->world && rank >= 0) ot_local_world_fail(lp->world, rank);
        if (t->xchg) { /* the overlapped step's exchange: nobody waits for it there either */
            char m[64];
            snprintf(m, sizeof m, "device %d failed", dev);
            ot_shard_exchange_abort(t->xchg, OT_ERR_PEER_FAILED, m);
        }
    }
    uint64_t stop = lp->stop_ns, det = lp->detect_ns;
    pthread_mutex_unlock(&t->mu);
    if (!first) {
        train_log(t,
                  "coordinator: device %d declared FAILED while recovering from device %d; it is "
                  "handled after that",
                  dev, lp->failed_dev);
        return;
    }
    train_log(t,
              "coordinator: device %d declared FAILED (phi %.1f, %.0f ms after its last heartbeat)",
              dev, e->phi, stop ? (double)(det - stop) / 1e6 : 0.0);
}

/* The coordinator with every device registered and the heartbeat agent. */
static ot_status local_start(trainer *t) {
    local_pod *lp = lp_of(t);
    ot_coord_options co = ot_coord_options_default();
    co.phi.acceptable_pause_ns = 200ull * 1000000ull;
    co.phi.first_interval_ns = HEARTBEAT_NS;
    ot_status s = ot_coord_create(&co, &lp->coord);
    for (int d = 0; s == OT_OK && d < lp->ndev; d++) {
        char name[32];
        snprintf(name, sizeof name, "host:%d", d);
        s = ot_coord_register(lp->coord, name, &lp->coord_id[d]);
        atomic_store(&lp->alive[d], true);
        if (s == OT_OK) ot_coord_heartbeat(lp->coord, lp->coord_id[d]);
    }
    int sub;
    if (s == OT_OK) s = ot_coord_subscribe(lp->coord, OT_EVENT_FAILED, on_coord_event, t, &sub);
    if (s == OT_OK) {
        if (pthread_create(&lp->agent, NULL, agent_main, t) != 0)
            s = ot_error(OT_ERR_INTERNAL, "train: cannot start the heartbeat agent");
        else
            lp->agent_running = true;
    }
    return s;
}

static void local_stop(trainer *t) {
    local_pod *lp = lp_of(t);
    if (!lp || !lp->agent_running) return;
    atomic_store(&lp->agent_stop, true);
    pthread_join(lp->agent, NULL);
    lp->agent_running = false;
}

static void local_close(trainer *t) {
    local_pod *lp = lp_of(t);
    if (!lp) return;
    local_stop(t);
    ot_coord_free(lp->coord);
    ot_topology_free(lp->topo);
    ot_slice_lease_release(lp->lease);
    ot_free(lp);
    t->pod = NULL;
}

static uint64_t local_epoch(trainer *t) {
    local_pod *lp = lp_of(t);
    return lp->coord ? ot_coord_epoch(lp->coord) : 0;
}

/* ---------------------------------------------------------------------------------------------
 * A segment: a fresh world over the live devices
 * ------------------------------------------------------------------------------------------- */

static ot_status local_run_segment(trainer *t, ot_status *st) {
    local_pod *lp = lp_of(t);
    ot_local_world *w = NULL;
    ot_status s = ot_local_world_create(t->nlive, &w);
    if (s != OT_OK) return s;
    pthread_mutex_lock(&t->mu);
    lp->world = w;
    for (int d = 0; d < MAX_DEVICES; d++) lp->world_rank_of_dev[d] = -1;
    for (int r = 0; r < t->nlive; r++) lp->world_rank_of_dev[t->reps[r].dev_index] = r;
    pthread_mutex_unlock(&t->mu);
    s = ot_local_world_run(w, train_replica_run, t, st);
    pthread_mutex_lock(&t->mu);
    lp->world = NULL;
    pthread_mutex_unlock(&t->mu);
    ot_local_world_free(w);
    return s;
}

/* The member's communicator: trace, topology (when it still fits the pod), deadline. */
static ot_status local_member_begin(trainer *t, train_member *m) {
    local_pod *lp = lp_of(t);
    if (t->trace) ot_comm_set_trace(m->comm, t->trace, m->r->dev_index);
    if (lp->topo && ot_topology_size(lp->topo) == m->n) {
        ot_status s = ot_comm_set_topology(m->comm, lp->topo);
        if (s != OT_OK) return s;
    }
    ot_comm_set_timeout(m->comm, m->timeout_ns);
    if (m->rank == 0 && t->local_sgd) {
        train_log(t,
                  "LocalSGD all-reduces over %d devices: the loss and correct count each step, "
                  "the %lld parameters every %lld steps, %s, deadline %.1f s",
                  m->n, (long long)t->total_elems, (long long)t->local_sgd,
                  ot_coll_algo_name(t->coll.algo), (double)m->timeout_ns / 1e9);
    } else if (m->rank == 0 && t->compress != OT_COMPRESS_NONE) {
        train_log(t,
                  "gradient all-reduce: %s-compressed with error feedback through the gradient "
                  "aggregator over %d devices (the loss and correct count exact), deadline %.1f s",
                  ot_grad_compress_name(t->compress), m->n, (double)m->timeout_ns / 1e9);
    } else if (m->rank == 0) {
        size_t bytes = ((size_t)t->total_elems + 2) * sizeof(float);
        ot_coll_algo a = t->coll.algo != OT_ALGO_AUTO
                             ? t->coll.algo
                             : ot_coll_choose(m->comm, OT_COLL_ALLREDUCE, bytes);
        train_log(t, "gradient all-reduce: %zu bytes over %d devices, %s%s, deadline %.1f s", bytes,
                  m->n, ot_coll_algo_name(a),
                  t->coll.algo == OT_ALGO_AUTO ? " (chosen by the cost model)" : "",
                  (double)m->timeout_ns / 1e9);
    }
    return OT_OK;
}

static void local_member_end(trainer *t, train_member *m) {
    if (t->trace && m->comm) ot_comm_set_trace(m->comm, NULL, 0);
}

/* The exchange between the device threads of this process. */
static ot_status local_shard_exchange(trainer *t, train_member *m, size_t block, int nbuckets,
                                      const size_t *off, const size_t *len, ot_coll_algo order,
                                      ot_shard_exchange **out) {
    (void)t;
    return ot_shard_exchange_create(m->n, block, nbuckets, off, len, order, out);
}

static ot_status local_allreduce(trainer *t, train_member *m, float *flat, size_t n) {
    return ot_comm_allreduce(m->comm, flat, flat, n, OT_F32, OT_REDOP_SUM, &t->coll);
}

/* The injected fault: the device stops dead. Its heartbeats stop; it leaves without telling
 * anyone, as a crashed host would. Once per run (a restored run passes the step again). */
static ot_status local_inject_fault(trainer *t, train_member *m, int64_t step) {
    local_pod *lp = lp_of(t);
    replica *r = m->r;
    if (t->o->fail_device != r->dev_index || lp->fault_done) return OT_OK;
    pthread_mutex_lock(&t->mu);
    lp->fault_done = true;
    lp->failed_dev = r->dev_index;
    lp->stop_ns = ot_now_ns();
    pthread_mutex_unlock(&t->mu);
    atomic_store(&lp->alive[r->dev_index], false);
    return ot_error(INJECTED_STOP, "device %d stopped at step %lld (injected fault)", r->dev_index,
                    (long long)step + 1);
}

static void local_fail_member(trainer *t, train_member *m) {
    local_pod *lp = lp_of(t);
    if (lp->world) ot_local_world_fail(lp->world, m->rank);
}

/* ---------------------------------------------------------------------------------------------
 * Migration: a spare takes a live replica's place
 * ------------------------------------------------------------------------------------------- */

static ot_status local_take_spare(trainer *t, int *dev_index) {
    local_pod *lp = lp_of(t);
    pthread_mutex_lock(&t->mu);
    int spare = -1;
    for (int d = 0; d < lp->ndev && spare < 0; d++)
        if (!lp->used_dev[d]) spare = d;
    if (spare >= 0) lp->used_dev[spare] = true;
    pthread_mutex_unlock(&t->mu);
    *dev_index = spare;
    if (spare < 0)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "train: no spare device left to migrate to (a recovery took it)");
    return OT_OK;
}

/* The drained device leaves the pod (removed from the coordinator first, so its silence is not a
 * failure; it stays taken: it is not a spare again); the spare is the member's device now. */
static void local_moved(trainer *t, train_member *m, int from) {
    local_pod *lp = lp_of(t);
    int to = m->r->dev_index;
    /* not under t->mu: the coordinator's event handler takes it */
    ot_coord_remove(lp->coord, lp->coord_id[from]);
    atomic_store(&lp->alive[from], false);
    pthread_mutex_lock(&t->mu);
    lp->world_rank_of_dev[to] = lp->world_rank_of_dev[from];
    lp->world_rank_of_dev[from] = -1;
    pthread_mutex_unlock(&t->mu);
    if (t->trace && m->comm) ot_comm_set_trace(m->comm, t->trace, to);
}

/* ---------------------------------------------------------------------------------------------
 * Recovery
 * ------------------------------------------------------------------------------------------- */

/* After a failure the survivors normally all hold the state after t->step steps: the failed
 * device never contributed to the next all-reduce. A device fenced while alive may have
 * contributed to it, so some survivors may have finished one more step; that step's all-reduce
 * was complete, so its result is valid: the others take the state of the most advanced one. */
static ot_status sync_survivors(trainer *t) {
    local_pod *lp = lp_of(t);
    int ahead = -1;
    int64_t lo = INT64_MAX, hi = -1;
    for (int r = 0; r < t->nlive; r++) {
        if (t->reps[r].dev_index == lp->failed_dev) continue;
        if (t->reps[r].done < lo) lo = t->reps[r].done;
        if (t->reps[r].done > hi) {
            hi = t->reps[r].done;
            ahead = r;
        }
    }
    if (ahead < 0) return ot_error(OT_ERR_PEER_FAILED, "train: no device left");
    if (lo == hi) {
        t->step = hi;
        return OT_OK;
    }
    replica *src = &t->reps[ahead];
    ot_tensor host[MAX_PARAMS];
    int got = 0;
    ot_status s = OT_OK;
    for (int k = 0; s == OT_OK && k < t->nparams; k++, got++)
        s = ot_buffer_to_host(src->params[k], &host[k]);
    for (int r = 0; s == OT_OK && r < t->nlive; r++) {
        replica *d = &t->reps[r];
        if (d == src || d->dev_index == lp->failed_dev || d->done == hi) continue;
        s = train_put_params(t, d, host);
        if (s == OT_OK) s = train_copy_optimizer_state(t, src, d);
        d->done = hi;
    }
    for (int k = 0; k < got; k++) ot_tensor_release(&host[k]);
    if (s == OT_OK) {
        train_log(t, "survivors at steps %lld..%lld after the failure take the state of step %lld",
                  (long long)lo, (long long)hi, (long long)hi);
        t->step = hi;
    }
    return s;
}

/* Restore policy: the spare takes the failed replica's place (pos); everyone rolls back to the
 * newest checkpoint, or to the initial state when there is none. */
static ot_status restore_onto_spare(trainer *t, int pos, int spare) {
    local_pod *lp = lp_of(t);
    int failed = lp->failed_dev;
    replica *r = &t->reps[pos];
    train_free_replica(r);
    memset(r, 0, sizeof *r);
    r->dev_index = spare;
    r->dev = ot_backend_device(t->backend, spare);
    lp->used_dev[spare] = true;
    ot_status s = ot_tpu_optimizer_add_replica(t->topt, r->dev);
    if (s != OT_OK) return s;
    if (t->ckpt) {
        ot_status w = ot_ckpt_wait(t->ckpt, NULL);
        if (w != OT_OK)
            train_log(t, "warning: the checkpoint in flight failed: %s", ot_last_error());
    }
    int64_t step = 0;
    bool found = false;
    if (t->o->ckpt_dir) s = train_restore_latest(t, &step, &found);
    if (s != OT_OK) return s;
    if (!found) {
        train_log(t, "recovery: no checkpoint to restore; restarting from step 0 on the new pod");
        s = train_init_params(t);
        /* every replica's state goes back to the initial values held by the spare's brand-new
         * replica, which never stepped */
        for (int r2 = 0; s == OT_OK && r2 < t->nlive; r2++)
            if (&t->reps[r2] != r) s = train_copy_optimizer_state(t, r, &t->reps[r2]);
        step = 0;
    }
    if (s != OT_OK) return s;
    train_log(t,
              "recovery (restore): device %d replaces failed device %d; %d devices roll back from "
              "step %lld to checkpointed step %lld",
              spare, failed, t->nlive, (long long)t->step, (long long)step);
    t->step = step;
    /* the metric history after the restored step is replaced by the rerun */
    while (t->npoints > 0 && t->points[t->npoints - 1].step > step) t->npoints--;
    return OT_OK;
}

/* Shrink policy: the failed replica (pos) leaves; the survivors go on from their state. */
static ot_status shrink(trainer *t, int pos) {
    local_pod *lp = lp_of(t);
    train_free_replica(&t->reps[pos]);
    for (int r = pos; r + 1 < t->nlive; r++) t->reps[r] = t->reps[r + 1];
    t->nlive--;
    memset(&t->reps[t->nlive], 0, sizeof t->reps[t->nlive]);
    if (t->nlive < 1) return ot_error(OT_ERR_PEER_FAILED, "train: no device left");
    train_log(t,
              "recovery (shrink): new pod of %d devices (epoch %llu), ring over the survivors, "
              "batch %lld re-split; step %lld is redone from the survivors' identical state",
              t->nlive, (unsigned long long)ot_coord_epoch(lp->coord), (long long)t->o->batch_size,
              (long long)t->step + 1);
    return OT_OK;
}

/* After a failure: rebuild the pod per the recovery policy (a spare while one is left, else
 * shrink), then the executables of the new shard sizes. */
static ot_status rebuild(trainer *t) {
    local_pod *lp = lp_of(t);
    const ot_train_options *o = t->o;
    uint64_t t0 = ot_now_ns();
    int failed = lp->failed_dev;
    int pos = -1;
    for (int r = 0; r < t->nlive; r++)
        if (t->reps[r].dev_index == failed) pos = r;
    if (pos < 0)
        return ot_error(OT_ERR_INTERNAL, "train: failed device %d is not a member", failed);
    t->rep->failures++;
    if (lp->detect_ns && lp->stop_ns)
        t->rep->detect_s = (double)(lp->detect_ns - lp->stop_ns) / 1e9;
    ot_coord_remove(lp->coord, lp->coord_id[failed]);
    int spare = -1;
    if (o->recovery == OT_RECOVER_RESTORE)
        for (int d = 0; d < lp->ndev; d++)
            if (!lp->used_dev[d]) {
                spare = d;
                break;
            }
    ot_status s;
    if (o->recovery == OT_RECOVER_RESTORE && spare >= 0) {
        s = restore_onto_spare(t, pos, spare);
    } else {
        if (o->recovery == OT_RECOVER_RESTORE)
            train_log(t, "recovery: no spare device left; shrinking instead");
        s = shrink(t, pos);
    }
    if (s != OT_OK) return s;
    s = train_prepare_executables(t);
    t->rep->recover_s = (double)(ot_now_ns() - (lp->detect_ns ? lp->detect_ns : t0)) / 1e9;
    lp->failed_dev = -1;
    lp->stop_ns = lp->detect_ns = 0;
    return s;
}

/* The segment ended early. That is a failure to survive only when the coordinator declared a
 * device failed (the injected stop, or a device fenced after missing its heartbeats) and every
 * other replica's status is that failure's; anything else is a real error. */
static ot_status local_recover(trainer *t, ot_status rs, const ot_status *st) {
    local_pod *lp = lp_of(t);
    bool other = false;
    for (int r = 0; r < t->nlive; r++)
        if (st[r] != OT_OK && st[r] != OT_ERR_PEER_FAILED &&
            !(st[r] == INJECTED_STOP && t->reps[r].dev_index == lp->failed_dev))
            other = true;
    if (lp->failed_dev < 0 || other) return train_first_error(t, rs);
    if (lp->stop_ns)
        train_log(t, "step %lld: device %d had stopped; its heartbeats stopped",
                  (long long)t->step + 1, lp->failed_dev);
    ot_status s = sync_survivors(t);
    if (s == OT_OK) s = rebuild(t);
    return s;
}

const train_pod_vtable train_pod_local = {
    .name = "local",
    .comm_traced = true,
    .open = local_open,
    .start = local_start,
    .run_segment = local_run_segment,
    .member_begin = local_member_begin,
    .member_end = local_member_end,
    .allreduce = local_allreduce,
    .shard_exchange = local_shard_exchange,
    .inject_fault = local_inject_fault,
    .fail_member = local_fail_member,
    .recover = local_recover,
    .take_spare = local_take_spare,
    .moved = local_moved,
    .epoch = local_epoch,
    .stop = local_stop,
    .close = local_close,
};
