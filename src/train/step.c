/* A replica's steps, phase by phase: load its shard of the batch, forward/backward and gather
 * the gradients (once per accumulated micro-batch), the gradient all-reduce through the pod (or
 * through a compressing gradient aggregator), the optimizer update; on the leader also metrics
 * (evaluation, history, progress) and checkpoints; a failure ends the replica's segment and, when
 * it is its own error, fails the pod so nobody waits for it. The same loop on every pod (driver.h).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "train/driver.h"
#include "train/train_internal.h"

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

phase_clock train_phase_start(void) {
    return (phase_clock){ot_now_ns(), thread_cpu_ns()};
}

/* train_phase_end less excl_w, excl_c ns of wall and CPU time spent inside the phase on other
 * parts (which recorded themselves); the trace still shows the phase's whole interval, the others
 * nested in it. */
static void phase_end_excl(trainer *t, replica *r, int ph, phase_clock pc, const char *name,
                           bool traced, uint64_t excl_w, uint64_t excl_c, bool count) {
    uint64_t w1 = ot_now_ns(), c1 = thread_cpu_ns();
    uint64_t w = w1 - pc.w0, c = c1 - pc.c0;
    w = w > excl_w ? w - excl_w : 0;
    c = c > excl_c ? c - excl_c : 0;

    r->cpu[ph] += c;
    int k = 0;
    while (k < r->nparts && strcmp(r->parts[k].name, name) != 0) k++;
    if (k == r->nparts && k < OT_TRAIN_MAX_PARTS) r->parts[r->nparts++].name = name;
    if (k < r->nparts) {
        r->parts[k].wall += w;
        r->parts[k].cpu += c;
        r->parts[k].count += count;
    }
    if (traced && t->trace)
        ot_pod_trace_record(t->trace, r->dev_index,
                            ph == PH_COMPUTE ? OT_PHASE_COMPUTE
                            : ph == PH_COMM  ? OT_PHASE_COMM
                                             : OT_PHASE_OTHER,
                            name, pc.w0, w1);
}

void train_phase_end(trainer *t, replica *r, int ph, phase_clock pc, const char *name,
                     bool traced) {
    phase_end_excl(t, r, ph, pc, name, traced, 0, 0, true);
}

/* cpu ns of a part timed inside another call (which excluded them from its own part): CPU time
 * only, its wall time stays in the enclosing part's. */
static void phase_add_cpu(replica *r, int ph, const char *name, uint64_t cpu) {
    r->cpu[ph] += cpu;
    int k = 0;
    while (k < r->nparts && strcmp(r->parts[k].name, name) != 0) k++;
    if (k == r->nparts && k < OT_TRAIN_MAX_PARTS) r->parts[r->nparts++].name = name;
    if (k < r->nparts) {
        r->parts[k].cpu += cpu;
        r->parts[k].count++;
    }
}

/* A piece of a part that the step runs in several pieces (the overlapped exchange's): its time
 * is the part's, and the part counts once per step (the piece that train_phase_end ends). */
static void phase_piece(trainer *t, replica *r, int ph, phase_clock pc, const char *name,
                        bool traced) {
    phase_end_excl(t, r, ph, pc, name, traced, 0, 0, false);
}

ot_status train_evaluate(trainer *t, replica *r, double *acc, double *loss) {
    ot_status s = OT_OK;
    if (!r->test_x) {
        ot_tensor tx, ty;
        ot_shape xs, ys;
        ot_shape_make(&xs, OT_F32, 2, (int64_t[]){t->test.n, t->test.features});
        ot_shape_make(&ys, OT_S32, 1, (int64_t[]){t->test.n});
        ot_tensor_borrow(&tx, &xs, t->test.x);
        ot_tensor_borrow(&ty, &ys, t->test.y);
        s = ot_buffer_from_host(r->dev, &tx, &r->test_x);
        if (s == OT_OK) s = ot_buffer_from_host(r->dev, &ty, &r->test_y);
        if (s != OT_OK) return s;
    }
    ot_buffer *args[MAX_PARAMS + 2];
    for (int k = 0; k < t->nparams; k++) args[k] = r->params[k];
    args[t->nparams] = r->test_x;
    args[t->nparams + 1] = r->test_y;
    ot_buffer *outs[2] = {NULL, NULL};
    s = ot_device_execute(r->dev, t->eval_exe, args, t->nparams + 2, outs, 2, NULL, NULL);
    if (s != OT_OK) return s;
    ot_tensor l, c;
    s = ot_buffer_to_host(outs[0], &l);
    if (s == OT_OK) {
        s = ot_buffer_to_host(outs[1], &c);
        if (s == OT_OK) {
            *loss = *(float *)l.data;
            *acc = *(float *)c.data / (double)t->test.n;
            ot_tensor_release(&c);
        }
        ot_tensor_release(&l);
    }
    ot_buffer_free(outs[0]);
    ot_buffer_free(outs[1]);
    return s;
}

int64_t ot_train_allreduce_timeout_ns(const ot_train_step_cost *c) {
    int levels = 1; /* the tree's depth: the most times one member's buffer is combined or copied */
    while (c->members > 1 << levels && levels < 30) levels++;
    int local = c->local_replicas > 1 ? c->local_replicas : 1;
    double comm = 2.0 * levels * (double)c->allreduce_bytes; /* reduce, then broadcast */
    double flops = local * c->replica_flops + c->leader_flops;
    double bytes = local * (c->replica_bytes + comm) + c->leader_bytes;
    double sec =
        OT_TRAIN_ALLREDUCE_BASE_S + flops / OT_TRAIN_SLOW_FLOPS + bytes / OT_TRAIN_SLOW_BYTES;
    if (!(sec < 7 * 86400.0)) sec = 7 * 86400.0;
    return (int64_t)(sec * 1e9);
}

/* The step's cost for the deadline of its all-reduce, from the compiled executables' counts. */
static int64_t allreduce_timeout(const trainer *t, const ot_executable *exe) {
    double pbytes = (double)t->total_elems * sizeof(float);
    int nstate = ot_optimizer_state_count(t->optim);
    ot_train_step_cost c = {
        .local_replicas = t->nlive,
        .members = t->nlive * t->psize,
        .allreduce_bytes = (t->total_elems + 2) * (int64_t)sizeof(float),
        /* forward/backward once per accumulated micro-batch; the update: about 16 operations
         * per element and slot; it reads parameter, gradient and slots and writes parameter and
         * slots; the gradients are copied out of the device and into the flat buffer per
         * micro-batch, and back onto the device once */
        .replica_flops = (double)t->accum * (double)ot_executable_total_flops(exe) +
                         16.0 * (double)t->total_elems * (1 + nstate),
        .replica_bytes = (double)t->accum * (double)ot_executable_total_bytes(exe) +
                         pbytes * (3 + 2 * nstate) + (double)(2 * t->accum + 1) * pbytes,
        .leader_flops = t->eval_exe ? (double)ot_executable_total_flops(t->eval_exe) : 0,
        /* the snapshot copies parameters and slots to the host */
        .leader_bytes = (t->eval_exe ? (double)ot_executable_total_bytes(t->eval_exe) : 0) +
                        (t->o->ckpt_dir ? pbytes * (1 + nstate) : 0),
    };
    return ot_train_allreduce_timeout_ns(&c);
}

/* ---------------------------------------------------------------------------------------------
 * The phases of one step
 * ------------------------------------------------------------------------------------------- */

/* One replica's thread for a segment: its place in the pod, its shard and its scratch. */
typedef struct replica_run {
    train_member m;
    trainer *t;
    ot_executable *exe; /* the gradient of a batch of nb */
    int64_t off, nb;    /* its slice [off, off + nb) of every global batch */
    ot_shape xs, ys;
    int64_t *idx;  /* the global batch's sample indices */
    int64_t *perm; /* the training set's order in epoch perm_epoch (ot_train_batch_indices) */
    int64_t perm_epoch;
    float *xb; /* its shard: nb * features */
    int32_t *yb;
    float *flat;             /* gradients, loss and correct count: what the all-reduce sums */
    ot_grad_aggregator *agg; /* the gradients' compressing all-reduce (NULL: uncompressed) */
    /* --shard-optimizer: the reduce-scatter's options (the all-reduce's algorithm); the
     * reduce-scatter's input and the flat parameters (devices * t->shard_len each, laid out as
     * SHARD_HEAD then the parameters in model order at t->fpos, then zeros; the parameters
     * identical on
     * every device) — `flat` is send + SHARD_HEAD, so the gather writes the gradients where the
     * reduce-scatter reads them (send has 2 elements more, where the gather leaves the loss and
     * correct count); this device's block of the reduced vector (t->shard_len): the update's
     * gradient block in the device's memory (ot_tpu_optimizer_shard_blocks), which the
     * reduce-scatter writes; pblock: the update's parameter block there, updated in place and
     * read by the all-gather (nothing copied between the host vectors and the update) */
    ot_coll_options rs_coll;
    float *send, *pflat, *gblock, *pblock;
    /* sharded, in one process or overlapped across processes: the device's parameter buffers
     * of the segment, views of `shared` (t->xshared overlapped, t->vshared not; own: the device's
     * own buffers, put back with the values at the segment's end) */
    bool views;
    float *shared;
    bool vsh; /* a user of t->vshared (vshared_begin) */
    ot_buffer *own[MAX_PARAMS];
    ot_buffer *args[MAX_PARAMS + 2], *outs[MAX_PARAMS + 2];
    size_t pos[MAX_PARAMS]; /* parameter k's offset in flat */
    /* the overlapped step (t->xchg, the pod's exchange): seq is the segment's step, 1-based
     * (the exchange's); the gradient executable's kernel that first reads parameter k
     * (first_read[k]) and that last writes output q (last_write[q]), -1: none; the parameters
     * of exchange step fetch_seq still to be copied into the device's buffers (pending, before
     * their first reader in the next forward); during the step's last forward/backward the
     * kernel hook gathers and posts each parameter's gradients (grads_hook, add: summed into
     * flat, posted[k]) and reduces what every member has posted; hook_w and hook_c: the wall
     * and CPU ns the hook spent in the run, which are not the forward/backward's */
    bool ovl;
    uint64_t seq;
    int first_read[MAX_PARAMS], last_write[MAX_PARAMS + 2];
    uint64_t fetch_seq;
    bool pending[MAX_PARAMS], posted[MAX_PARAMS];
    int npending, buckets_left;
    bool grads_hook, add;
    uint64_t hook_w, hook_c;
    uint64_t seen; /* the exchange's completions when the hook last reduced */
    /* the gradient outputs of the last step posted in place (post_param): the members read them
     * until every member has reduced that step (the next step's grads_writable) */
    ot_buffer *held[MAX_PARAMS];
    /* the overlapped unsharded step (ovl with t->shard_len 0): the exchange's block length
     * (flat holds n * ar_block floats: gradients, loss and correct count, zeros), the reduced
     * vector whose block `rank` this device reduces and publishes, and the gradient buffers on
     * gdev that the update reads, filled from the owners' reduced blocks */
    size_t ar_block;
    float *red;
    ot_buffer *grads[MAX_PARAMS];
    ot_device *gdev;
    float metric[2]; /* the step's summed loss and correct count */
} replica_run;

/* Load batch: the shard of micro-batch `micro` of global batch `step` onto the device
 * (args[nparams], args[nparams+1], released by phase_forward_backward). Micro-batch j is the
 * slice [j * batch_size, (j + 1) * batch_size) of the step's t->step_batch samples. */
static ot_status phase_load_batch(replica_run *rr, int64_t step, int64_t micro) {
    trainer *t = rr->t;
    const ot_train_options *o = t->o;
    replica *r = rr->m.r;
    int np = t->nparams;
    int64_t F = t->train.features;
    rr->args[np] = rr->args[np + 1] = NULL;
    phase_clock pc = train_phase_start();
    ot_status s = OT_OK;
    if (micro == 0)
        s = ot_train_batch_indices(t->train.n, t->step_batch, o->seed, step, rr->perm,
                                   &rr->perm_epoch, rr->idx);
    if (s != OT_OK) return s;
    const int64_t *idx = rr->idx + micro * o->batch_size + rr->off;
    for (int64_t i = 0; i < rr->nb; i++) {
        int64_t j = idx[i];
        memcpy(rr->xb + i * F, t->train.x + j * F, (size_t)F * sizeof(float));
        rr->yb[i] = t->train.y[j];
    }
    ot_tensor tx, ty;
    ot_tensor_borrow(&tx, &rr->xs, rr->xb);
    ot_tensor_borrow(&ty, &rr->ys, rr->yb);
    for (int k = 0; k < np; k++) rr->args[k] = r->params[k];
    s = ot_buffer_from_host(r->dev, &tx, &rr->args[np]);
    if (s == OT_OK) s = ot_buffer_from_host(r->dev, &ty, &rr->args[np + 1]);
    train_phase_end(t, r, PH_OTHER, pc, "input", false);
    return s;
}

static ot_status step_hook(void *ud, int kernel, bool done);

/* Forward/backward: the compiled gradient executable → outs (loss, correct, gradients). Runs
 * only when s (the batch's load) is OK; releases the batch either way. */
static ot_status phase_forward_backward(replica_run *rr, ot_status s) {
    trainer *t = rr->t;
    int np = t->nparams;
    memset(rr->outs, 0, sizeof rr->outs);
    if (s == OT_OK) {
        ot_run_options ro = ot_run_options_default();
        if (rr->ovl && (rr->grads_hook || rr->npending)) {
            ro.kernel_hook = step_hook;
            ro.kernel_hook_ud = rr;
            ro.keep_outputs = true; /* the outputs posted in place outlive a failed run */
        }
        rr->hook_w = rr->hook_c = 0;
        phase_clock pc = train_phase_start();
        s = ot_device_execute(rr->m.r->dev, rr->exe, rr->args, np + 2, rr->outs, np + 2,
                              ro.kernel_hook ? &ro : NULL, NULL);
        if (s != OT_OK) /* a failed run's outputs, but those the others may still read (held) */
            for (int q = 0; q < np + 2; q++) {
                if (q < 2 || rr->outs[q] != rr->held[q - 2]) ot_buffer_free(rr->outs[q]);
                rr->outs[q] = NULL;
            }
        phase_end_excl(t, rr->m.r, PH_COMPUTE, pc, "forward+backward", true, rr->hook_w, rr->hook_c,
                       true);
    }
    ot_buffer_free(rr->args[np]);
    ot_buffer_free(rr->args[np + 1]);
    return s;
}

/* Parameter k's gradients (output 2 + k of the last run) into flat, or summed into it (add). */
static ot_status gather_param(replica_run *rr, int k, bool add) {
    trainer *t = rr->t;
    float *dst = rr->flat + rr->pos[k];
    if (!add) /* one copy, straight into the flat vector */
        return ot_buffer_read_bytes(rr->outs[2 + k], 0, dst,
                                    (int64_t)(t->sizes[k] * sizeof(float)));
    ot_tensor h;
    ot_status s = ot_buffer_to_host(rr->outs[2 + k], &h);
    if (s != OT_OK) return s;
    const float *g = h.data;
    for (size_t i = 0; i < t->sizes[k]; i++) dst[i] += g[i];
    ot_tensor_release(&h);
    return OT_OK;
}

/* Deadline of one wait in the overlapped exchange: the all-reduce's. */
static uint64_t xchg_deadline(const replica_run *rr) {
    return rr->m.timeout_ns > 0 ? ot_now_ns() + (uint64_t)rr->m.timeout_ns : 0;
}

/* The overlapped step's gradients of parameter k posted as bucket k: in place when the device's
 * output is host memory and is the step's whole gradient (no accumulated micro-batch to add:
 * the output is held until every member has reduced it), else gathered into flat (which is the
 * exchange's send vector past its head) first. */
static ot_status post_param(replica_run *rr, int k) {
    trainer *t = rr->t;
    const float *view = rr->add ? NULL : ot_buffer_host_data(rr->outs[2 + k]);
    ot_status s = OT_OK;
    if (view) {
        s = ot_shard_exchange_post_view(t->xchg, rr->m.g, rr->seq, k, view);
        if (s == OT_OK) rr->held[k] = rr->outs[2 + k]; /* not freed with the run's outputs */
    } else {
        phase_clock pc = train_phase_start();
        s = gather_param(rr, k, rr->add);
        phase_piece(t, rr->m.r, PH_OTHER, pc, "gather", false);
        if (s == OT_OK) s = ot_shard_exchange_post(t->xchg, rr->m.g, rr->seq, k);
    }
    rr->posted[k] = s == OT_OK;
    return s;
}

/* The gradient outputs posted in place in the last step, once nobody reads them. */
static void free_held(replica_run *rr) {
    for (int k = 0; k < rr->t->nparams; k++) {
        ot_buffer_free(rr->held[k]);
        rr->held[k] = NULL;
    }
}

/* This device's part of every bucket all members have posted (wait: of every bucket), into
 * its block of the reduced gradients; traced as the reduce-scatter when it reduced any. */
static ot_status reduce_ready(replica_run *rr, bool wait) {
    trainer *t = rr->t;
    if (rr->buckets_left == 0) return OT_OK;
    phase_clock pc = train_phase_start();
    int done = 0;
    ot_status s = ot_shard_exchange_reduce(t->xchg, rr->m.g, rr->seq, rr->gblock, wait,
                                           wait ? xchg_deadline(rr) : 0, &done);
    rr->buckets_left -= done;
    phase_piece(t, rr->m.r, PH_COMM, pc, t->shard_len ? "reduce-scatter" : "all-reduce",
                wait || done > 0);
    return s;
}

/* The overlapped unsharded step's second half: every parameter's summed gradients copied from
 * their owners' published blocks straight into this device's gradient buffers (allocated once,
 * again after a migration to another device), the loss and correct count into metric. */
static ot_status fetch_sums(replica_run *rr) {
    trainer *t = rr->t;
    replica *r = rr->m.r;
    phase_clock pc = train_phase_start();
    ot_status s = OT_OK;
    if (rr->gdev != r->dev) {
        for (int k = 0; k < t->nparams; k++) {
            ot_buffer_free(rr->grads[k]);
            rr->grads[k] = NULL;
        }
        for (int k = 0; s == OT_OK && k < t->nparams; k++)
            s = ot_buffer_alloc(r->dev, ot_model_param_shape(t->model, k), &rr->grads[k]);
        rr->gdev = s == OT_OK ? r->dev : NULL;
    }
    size_t blk = rr->ar_block, total = (size_t)t->total_elems;
    if (s == OT_OK)
        s = ot_shard_exchange_wait_published(t->xchg, rr->seq, 0, total + 2, xchg_deadline(rr));
    for (int k = 0; s == OT_OK && k < t->nparams; k++) {
        size_t off = rr->pos[k], len = t->sizes[k];
        for (size_t lo = off; s == OT_OK && lo < off + len;) {
            size_t q = lo / blk, hi = (q + 1) * blk < off + len ? (q + 1) * blk : off + len;
            s = ot_buffer_write_bytes(rr->grads[k], (int64_t)((lo - off) * sizeof(float)),
                                      ot_shard_exchange_block(t->xchg, (int)q) + (lo - q * blk),
                                      (int64_t)((hi - lo) * sizeof(float)));
            lo = hi;
        }
    }
    for (int k = 0; s == OT_OK && k < 2; k++)
        rr->metric[k] =
            ot_shard_exchange_block(t->xchg, (int)((total + k) / blk))[(total + k) % blk];
    if (s == OT_OK) s = ot_shard_exchange_fetched(t->xchg, rr->m.g, rr->seq);
    phase_piece(t, r, PH_COMM, pc, "all-reduce", true);
    return s;
}

/* Parameter k of exchange step fetch_seq into the device's buffer, once its blocks' owners have
 * published it: each owner's piece copied straight from its block (one copy, the all-gather's
 * and the parameters' write in one). The last one pending declares the step fetched. */
static ot_status fetch_param(replica_run *rr, int k) {
    trainer *t = rr->t;
    phase_clock pc = train_phase_start();
    size_t off = SHARD_HEAD + rr->pos[k], len = t->sizes[k], blk = (size_t)t->shard_len;
    ot_status s =
        ot_shard_exchange_wait_published(t->xchg, rr->fetch_seq, off, len, xchg_deadline(rr));
    for (size_t lo = off; s == OT_OK && !rr->views && lo < off + len;) { /* views: read in place */
        size_t q = lo / blk, hi = (q + 1) * blk < off + len ? (q + 1) * blk : off + len;
        s = ot_buffer_write_bytes(rr->m.r->params[k], (int64_t)((lo - off) * sizeof(float)),
                                  ot_shard_exchange_block(t->xchg, (int)q) + (lo - q * blk),
                                  (int64_t)((hi - lo) * sizeof(float)));
        lo = hi;
    }
    if (s == OT_OK) {
        rr->pending[k] = false;
        if (--rr->npending == 0) {
            s = ot_shard_exchange_fetched(t->xchg, rr->m.g, rr->fetch_seq);
            rr->fetch_seq = 0;
        }
    }
    phase_piece(t, rr->m.r, PH_COMM, pc, "all-gather", true);
    return s;
}

static ot_status fetch_all(replica_run *rr) {
    ot_status s = OT_OK;
    for (int k = 0; s == OT_OK && rr->npending > 0 && k < rr->t->nparams; k++)
        if (rr->pending[k]) s = fetch_param(rr, k);
    return s;
}

/* The gradient executable's kernel hook in the overlapped step: before a kernel, the pending
 * parameters it is the first to read are fetched (the all-gather of the last step under this
 * forward); after one, the parameters whose gradients it finished are gathered and posted and
 * whatever every member has posted is reduced (the reduce-scatter under the backward). Its time
 * is the communication's and the gather's, not the forward/backward's. */
static ot_status step_hook(void *ud, int kernel, bool done) {
    replica_run *rr = ud;
    trainer *t = rr->t;
    /* the common case, nothing to do after this kernel, reads no clock and takes no lock */
    bool work = false;
    for (int k = 0; !work && k < t->nparams; k++)
        work = done ? rr->grads_hook && !rr->posted[k] && rr->last_write[2 + k] == kernel
                    : rr->pending[k] && rr->first_read[k] == kernel;
    uint64_t comp = 0;
    if (done && rr->grads_hook && rr->buckets_left > 0) {
        comp = ot_shard_exchange_completions(t->xchg);
        work = work || comp != rr->seen;
    }
    if (!work) return OT_OK;
    phase_clock pc = train_phase_start();
    ot_status s = OT_OK;
    for (int k = 0; s == OT_OK && k < t->nparams; k++) {
        if (!done && rr->pending[k] && rr->first_read[k] == kernel) s = fetch_param(rr, k);
        if (done && !rr->posted[k] && rr->last_write[2 + k] == kernel) s = post_param(rr, k);
    }
    if (s == OT_OK && done && rr->buckets_left > 0) {
        rr->seen = comp;
        s = reduce_ready(rr, false);
    }
    phase_clock end = train_phase_start();
    rr->hook_w += end.w0 - pc.w0;
    rr->hook_c += end.c0 - pc.c0;
    return s;
}

/* Gather: gradients, then loss and correct count, packed into one flat vector; a later
 * micro-batch of the step (add) is summed into it in micro-batch order (each micro-batch's loss
 * is scaled by 1 / t->step_batch, so the sum is the step's mean). In the overlapped step the
 * hook has gathered and posted the gradients already; any it did not (an output no kernel
 * writes) are posted here, and the parameters no kernel read are fetched. */
static ot_status phase_gather(replica_run *rr, bool add) {
    trainer *t = rr->t;
    int nouts = 2 + t->nparams;
    ot_status s = OT_OK;
    for (int k = 0; rr->grads_hook && s == OT_OK && k < t->nparams; k++)
        if (!rr->posted[k]) s = post_param(rr, k);
    if (s == OT_OK && rr->npending) s = fetch_all(rr);
    phase_clock pc = train_phase_start();
    for (int k = 0; !rr->grads_hook && k < t->nparams && s == OT_OK; k++)
        s = gather_param(rr, k, add);
    for (int k = 0; k < 2 && s == OT_OK; k++) {
        float v;
        s = ot_buffer_read_bytes(rr->outs[k], 0, &v, sizeof v);
        if (s == OT_OK) rr->flat[t->flat_metrics + k] = add ? rr->flat[t->flat_metrics + k] + v : v;
    }
    for (int k = 0; k < nouts; k++)
        if (k < 2 || rr->outs[k] != rr->held[k - 2]) ot_buffer_free(rr->outs[k]);
    train_phase_end(t, rr->m.r, PH_OTHER, pc, "gather", false);
    return s;
}

/* Gradient all-reduce: the flat vector summed over every replica of the pod (the loss scale
 * makes the sum the global batch's mean). With compression the gradients go through the
 * aggregator (every member decodes and sums the same payloads: identical results everywhere) and
 * the loss and correct count through the pod's exact sum. The leader counts the bytes. */
static ot_status phase_allreduce(replica_run *rr) {
    trainer *t = rr->t;
    replica *r = rr->m.r;
    phase_clock pc = train_phase_start();
    ot_status s;
    int64_t bytes;
    if (t->local_sgd) {
        /* LocalSGD: the metrics only; the replica's gradient becomes its shard's mean (the loss
         * scale made it sum / t->step_batch) */
        s = t->pod_vt->allreduce(t, &rr->m, rr->flat + t->total_elems, 2);
        bytes = 2 * (int64_t)sizeof(float);
        float scale = (float)((double)t->step_batch / (double)(rr->nb * t->accum));
        for (int64_t i = 0; i < t->total_elems; i++) rr->flat[i] *= scale;
    } else if (rr->agg) {
        float *g = rr->flat;
        s = ot_grad_aggregate(rr->agg, &g);
        if (s == OT_OK) s = t->pod_vt->allreduce(t, &rr->m, rr->flat + t->total_elems, 2);
        bytes = (int64_t)ot_grad_last_wire_bytes(rr->agg) + 2 * (int64_t)sizeof(float);
    } else if (t->shard_len) {
        /* sharded: loss and correct count in the head, the gradients after it, zero-padded to
         * the devices' blocks, reduce-scattered (one collective: the pod leader's block, g == 0,
         * holds the head; over MPI every process has a local rank 0) */
        size_t total = (size_t)t->flat_metrics, padded = (size_t)rr->m.n * (size_t)t->shard_len;
        float *x = rr->send; /* the gradients are in place (flat = x + SHARD_HEAD); the rest of
                                the head and the padding stay zero */
        x[0] = rr->flat[total];
        x[1] = rr->flat[total + 1];
        rr->flat[total] = rr->flat[total + 1] = 0;
        if (rr->ovl) {
            /* overlapped: the gradients' buckets are posted (and partly reduced); the head is
             * the last bucket, then the rest of this device's block as it arrives */
            s = ot_shard_exchange_post(t->xchg, rr->m.g, rr->seq, t->nparams);
            phase_piece(t, r, PH_COMM, pc, "reduce-scatter", false);
            if (s == OT_OK) s = reduce_ready(rr, true);
            pc = train_phase_start();
        } else {
            s = ot_tpu_optimizer_shard_reduce(t->topt, rr->m.comm, &rr->rs_coll, x, rr->gblock);
        }
        if (s == OT_OK && rr->m.g == 0) {
            rr->flat[total] = rr->gblock[0];
            rr->flat[total + 1] = rr->gblock[1];
        }
        bytes = (int64_t)padded * (int64_t)sizeof(float);
    } else if (rr->ovl) {
        /* overlapped: the gradients' buckets are posted (and partly reduced); the loss and
         * correct count are the last bucket, then this device reduces the rest of its block,
         * publishes it and copies every block of the sums into its gradient buffers */
        s = ot_shard_exchange_post(t->xchg, rr->m.g, rr->seq, t->nparams);
        phase_piece(t, r, PH_COMM, pc, "all-reduce", false);
        if (s == OT_OK) s = reduce_ready(rr, true);
        if (s == OT_OK) s = ot_shard_exchange_publish(t->xchg, rr->m.g, rr->seq);
        if (s == OT_OK) s = fetch_sums(rr);
        pc = train_phase_start();
        bytes = (t->total_elems + 2) * (int64_t)sizeof(float);
    } else {
        s = t->pod_vt->allreduce(t, &rr->m, rr->flat, (size_t)t->total_elems + 2);
        bytes = (t->total_elems + 2) * (int64_t)sizeof(float);
    }
    if (!(rr->ovl && !t->shard_len)) {
        rr->metric[0] = rr->flat[t->flat_metrics];
        rr->metric[1] = rr->flat[t->flat_metrics + 1];
    }
    train_phase_end(t, r, PH_COMM, pc, t->shard_len ? "reduce-scatter" : "all-reduce",
                    !t->pod_vt->comm_traced);
    if (s == OT_OK && rr->m.g == 0) {
        t->rep->allreduce_bytes += bytes * rr->m.n;
        t->member_steps += rr->m.n;
    }
    return s;
}

/* LocalSGD's average, after step `step`'s update when it is due (every t->local_sgd steps and at
 * the segment's end, so the run ends with identical replicas): the parameters summed over the pod
 * through its all-reduce (fixed order: the same bits everywhere), divided by the replica count and
 * put back on the device. The optimizer state stays the replica's. */
static ot_status phase_average(replica_run *rr, int64_t step) {
    trainer *t = rr->t;
    replica *r = rr->m.r;
    if (!t->local_sgd || ((step + 1) % t->local_sgd != 0 && step + 1 != t->run_end)) return OT_OK;
    phase_clock pc = train_phase_start();
    ot_status s = OT_OK;
    size_t pos = 0;
    for (int k = 0; k < t->nparams && s == OT_OK; k++) {
        ot_tensor h;
        s = ot_buffer_to_host(r->params[k], &h);
        if (s == OT_OK) {
            memcpy(rr->flat + pos, h.data, h.nbytes);
            pos += t->sizes[k];
            ot_tensor_release(&h);
        }
    }
    if (s == OT_OK) s = t->pod_vt->allreduce(t, &rr->m, rr->flat, (size_t)t->total_elems);
    if (s == OT_OK) {
        float n = (float)rr->m.n;
        for (int64_t i = 0; i < t->total_elems; i++) rr->flat[i] /= n;
        ot_tensor host[MAX_PARAMS];
        pos = 0;
        for (int k = 0; k < t->nparams; k++) {
            ot_tensor_borrow(&host[k], ot_model_param_shape(t->model, k), rr->flat + pos);
            pos += t->sizes[k];
        }
        s = train_put_params(t, r, host);
    }
    train_phase_end(t, r, PH_COMM, pc, "parameter average", !t->pod_vt->comm_traced);
    if (s == OT_OK && rr->m.g == 0) t->rep->allreduce_bytes += t->total_elems * 4 * rr->m.n;
    return s;
}

/* The error-feedback residuals (--grad-compress), with LocalSGD every member's parameters and
 * optimizer state, and with --shard-optimizer every member's block of the optimizer state into
 * the run's snapshot when a checkpoint may be taken of this step (a multiple
 * of ckpt_every, or the segment's last: the final checkpoint): every member writes its row, then
 * a barrier, so the leader saves all of them. Each member writes again only
 * after a later all-reduce, which waits for the leader's save. */
static ot_status phase_residuals(replica_run *rr, int64_t step) {
    trainer *t = rr->t;
    int64_t done = step + 1;
    bool resid = rr->agg && t->ck_resid, states = t->ck_rep && rr->m.comm;
    bool shard = t->ck_shard && rr->m.comm;
    /* across processes only process 0 holds the checkpoint manager, but every member's block
     * goes to it: the others take part too */
    bool saver = t->ckpt || (shard && t->psize > 1);
    if ((!resid && !states && !shard) || !saver) return OT_OK;
    if (done != t->run_end && (t->o->ckpt_every <= 0 || done % t->o->ckpt_every != 0)) return OT_OK;
    size_t e = (size_t)t->total_elems;
    ot_status s = OT_OK;
    if (resid) s = ot_grad_residual_get(rr->agg, t->ck_resid + (size_t)rr->m.g * e, e);
    /* LocalSGD: this member's parameters and optimizer state (the leader's are saved as its own) */
    int ns = ot_tpu_optimizer_state_count(t->topt), k = t->nparams + ns;
    ot_tensor *row = states ? t->ck_rep + (size_t)rr->m.g * (size_t)k : NULL;
    for (int i = 0; s == OT_OK && row && rr->m.g > 0 && i < k; i++) {
        ot_tensor_release(&row[i]);
        s = i < t->nparams
                ? ot_buffer_to_host(rr->m.r->params[i], &row[i])
                : ot_tpu_optimizer_get_state(t->topt, rr->m.r->dev, i - t->nparams, &row[i]);
    }
    /* --shard-optimizer: this member's block of the optimizer state (the leader's too) */
    int nb = shard ? ot_tpu_optimizer_state_count(t->topt) : 0;
    ot_tensor *brow = shard ? t->ck_shard + (size_t)rr->m.g * (size_t)nb : NULL;
    for (int i = 0; s == OT_OK && i < nb; i++) {
        ot_tensor_release(&brow[i]);
        s = ot_tpu_optimizer_get_state(t->topt, rr->m.r->dev, i, &brow[i]);
    }
    /* across processes (one device each): every member's block to process 0, which saves */
    for (int i = 0; s == OT_OK && t->psize > 1 && i < nb; i++) {
        size_t cnt = brow[i].nbytes;
        char *all = ot_malloc(cnt * (size_t)rr->m.n + 1);
        if (!all) s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: sharded state snapshot");
        if (s == OT_OK) s = ot_comm_allgather(rr->m.comm, brow[i].data, all, cnt, OT_U8, NULL);
        for (int q = 0; s == OT_OK && t->prank == 0 && q < rr->m.n; q++) {
            ot_tensor *v = &t->ck_shard[(size_t)q * (size_t)nb + (size_t)i];
            if (q == rr->m.g) continue;
            ot_tensor_release(v);
            s = ot_tensor_alloc(v, &brow[i].shape);
            if (s == OT_OK) memcpy(v->data, all + (size_t)q * cnt, cnt);
        }
        ot_free(all);
    }
    if (s == OT_OK) s = ot_comm_barrier(rr->m.comm, &t->coll);
    if (s == OT_OK && rr->m.g == 0) {
        t->ck_resid_step = t->ck_rep_step = t->ck_shard_step = done;
        t->ck_resid_n = t->ck_rep_n = t->ck_shard_n = rr->m.n;
    }
    return s;
}

/* Whether the device's parameters of this step are read before the next step's forward: at
 * the segment's last step (the final hash, the next segment), and on the leader when it
 * evaluates or checkpoints this step (phase_metrics, phase_checkpoint). */
static bool params_read_before_forward(const replica_run *rr, int64_t step) {
    const trainer *t = rr->t;
    const ot_train_options *o = t->o;
    int64_t done = step + 1;
    if (done >= t->run_end) return true;
    if (rr->m.g != 0) return false;
    return (o->eval_every > 0 && done % o->eval_every == 0) || done == t->total_steps ||
           (t->ckpt && o->ckpt_every > 0 && done % o->ckpt_every == 0);
}

/* Sharded update (tpu_optim.h's sharded mode): this device's block of the flat parameters
 * updated with its block of the reduced gradients (its optimizer state is the device's only),
 * every device's block all-gathered into the flat parameters (in place), and those written into
 * the device's parameter buffers. The head's slots in the leader's block are updated too (with
 * the loss and correct count as their gradients) and never read. */
static ot_status phase_update_shard(replica_run *rr, int64_t step, double lr) {
    trainer *t = rr->t;
    replica *r = rr->m.r;
    phase_clock pc;
    ot_status s = OT_OK;
    if (rr->ovl) { /* nobody still reads this device's block of the last step */
        pc = train_phase_start();
        s = ot_shard_exchange_params_writable(t->xchg, rr->m.g, rr->seq, xchg_deadline(rr));
        train_phase_end(t, r, PH_COMM, pc, "all-gather", false);
        if (s != OT_OK) return s;
    }
    pc = train_phase_start();
    s = ot_tpu_optimizer_shard_update_blocks(t->topt, r->dev, rr->m.comm, step + 1, lr, NULL);
    /* like the unsharded step, whose update reads the sums already on the device (their copy is
     * the all-reduce's): copies between host and device (lamb's and lars's norms) are not the
     * update's compute, nor are its collectives (the norms' all-gathers) */
    int64_t copy_ns = 0, comm_ns = 0;
    if (s == OT_OK) s = ot_tpu_optimizer_shard_times(t->topt, r->dev, &copy_ns, &comm_ns);
    phase_end_excl(t, r, PH_COMPUTE, pc, "optimizer", true, 0, (uint64_t)(copy_ns + comm_ns), true);
    if (copy_ns > 0) phase_add_cpu(r, PH_OTHER, "block copies", (uint64_t)copy_ns);
    if (comm_ns > 0) phase_add_cpu(r, PH_COMM, "norms all-gather", (uint64_t)comm_ns);
    if (s != OT_OK) return s;
    if (rr->ovl) {
        /* overlapped: the block is published; the device's parameters are fetched before their
         * first reader in the next forward, or now when something reads them before it */
        s = ot_shard_exchange_publish(t->xchg, rr->m.g, rr->seq);
        if (s != OT_OK) return s;
        if (rr->m.g == 0)
            t->rep->allreduce_bytes += t->shard_len * (int64_t)sizeof(float) * rr->m.n;
        rr->fetch_seq = rr->seq;
        rr->npending = t->nparams;
        for (int k = 0; k < t->nparams; k++) rr->pending[k] = true;
        return params_read_before_forward(rr, step) ? fetch_all(rr) : OT_OK;
    }
    if (rr->views) {
        /* in one process, not overlapped: every block is written in the shared vector that the
         * parameter buffers view once every owner has updated (a barrier, no copy); nobody
         * writes its block of the next step before every device has ended that step's run (its
         * reduce-scatter needs every device's gradients) */
        pc = train_phase_start();
        s = ot_comm_barrier(rr->m.comm, &t->coll);
        train_phase_end(t, r, PH_COMM, pc, "all-gather", false);
        if (s == OT_OK && rr->m.g == 0)
            t->rep->allreduce_bytes += t->shard_len * (int64_t)sizeof(float) * rr->m.n;
        return s;
    }
    pc = train_phase_start(); /* this device's block from the device, then the others' */
    memcpy(rr->pflat + (size_t)ot_comm_rank(rr->m.comm) * (size_t)t->shard_len, rr->pblock,
           (size_t)t->shard_len * sizeof(float));
    s = ot_tpu_optimizer_shard_gather(t->topt, rr->m.comm, &rr->rs_coll, rr->pflat);
    train_phase_end(t, r, PH_COMM, pc, "all-gather", !t->pod_vt->comm_traced);
    if (s != OT_OK) return s;
    if (rr->m.g == 0) t->rep->allreduce_bytes += t->shard_len * (int64_t)sizeof(float) * rr->m.n;
    pc = train_phase_start();
    for (int k = 0; k < t->nparams && s == OT_OK; k++)
        s = ot_buffer_write_bytes(r->params[k], 0, rr->pflat + SHARD_HEAD + rr->pos[k],
                                  (int64_t)(t->sizes[k] * sizeof(float)));
    train_phase_end(t, r, PH_OTHER, pc, "parameters", false);
    return s;
}

/* Optimizer update: the summed gradients back onto the device, then the compiled update of
 * every parameter with this step's learning rate. */
static ot_status phase_update(replica_run *rr, int64_t step, double lr) {
    trainer *t = rr->t;
    replica *r = rr->m.r;
    if (t->shard_len) return phase_update_shard(rr, step, lr);
    if (rr->ovl) { /* the sums are in the gradient buffers already (fetch_sums) */
        phase_clock pc = train_phase_start();
        ot_status s =
            ot_tpu_optimizer_step(t->topt, r->dev, r->params, rr->grads, step + 1, lr, NULL);
        train_phase_end(t, r, PH_COMPUTE, pc, "optimizer", true);
        return s;
    }
    phase_clock pc = train_phase_start();
    ot_buffer *grads[MAX_PARAMS];
    memset(grads, 0, sizeof grads);
    ot_status s = OT_OK;
    size_t pos = 0;
    for (int k = 0; k < t->nparams && s == OT_OK; k++) {
        ot_tensor h;
        ot_tensor_borrow(&h, ot_model_param_shape(t->model, k), rr->flat + pos);
        s = ot_buffer_from_host(r->dev, &h, &grads[k]);
        pos += t->sizes[k];
    }
    train_phase_end(t, r, PH_OTHER, pc, "scatter", false);
    if (s == OT_OK) {
        pc = train_phase_start();
        s = ot_tpu_optimizer_step(t->topt, r->dev, r->params, grads, step + 1, lr, NULL);
        train_phase_end(t, r, PH_COMPUTE, pc, "optimizer", true);
    }
    for (int k = 0; k < t->nparams; k++) ot_buffer_free(grads[k]);
    return s;
}

static ot_status add_point(trainer *t, ot_train_point p) {
    if (t->npoints == t->points_cap) {
        int64_t cap = t->points_cap ? t->points_cap * 2 : 256;
        ot_train_point *np = ot_malloc((size_t)cap * sizeof *np);
        if (!np) return ot_error(OT_ERR_OUT_OF_MEMORY, "train: metric history");
        if (t->points) memcpy(np, t->points, (size_t)t->npoints * sizeof *np);
        ot_free(t->points);
        t->points = np;
        t->points_cap = cap;
    }
    t->points[t->npoints++] = p;
    return OT_OK;
}

/* Metrics (leader): the evaluation when due, the step's point in the history, progress. */
static ot_status phase_metrics(replica_run *rr, int64_t step, double lr) {
    trainer *t = rr->t;
    const ot_train_options *o = t->o;
    int64_t done_steps = step + 1;
    double loss = rr->metric[0];
    double tacc = rr->metric[1] / (double)t->step_batch;
    bool evaluated = false;
    ot_status s;
    if ((o->eval_every > 0 && done_steps % o->eval_every == 0) || done_steps == t->total_steps) {
        phase_clock pc = train_phase_start();
        s = train_evaluate(t, rr->m.r, &t->last_test_acc, &t->last_test_loss);
        train_phase_end(t, rr->m.r, PH_COMPUTE, pc, "evaluate", true);
        if (s != OT_OK) return s;
        evaluated = true;
    }
    s = add_point(
        t, (ot_train_point){done_steps, loss, tacc, evaluated ? t->last_test_acc : -1.0, lr});
    if (s != OT_OK) return s;
    t->step = done_steps;
    uint64_t now = ot_now_ns();
    if (done_steps == t->steady_from) t->steady_t0_ns = now;
    if (done_steps == t->steady_to && t->steady_t0_ns) t->steady_t1_ns = now;
    if (o->on_progress) {
        /* the run's average so far: per-step rates jump with the host's scheduling */
        double elapsed = (double)(now - t->loop_start_ns) / 1e9;
        int64_t run_done = done_steps - t->rep->start_step;
        double sps = elapsed > 0 ? (double)(run_done * t->step_batch) / elapsed : 0;
        double eta =
            run_done > 0 ? elapsed / (double)run_done * (double)(t->total_steps - done_steps) : 0;
        ot_train_progress p = {
            done_steps, t->total_steps, loss,     tacc, t->last_test_acc, lr, sps,
            eta,        rr->m.n,        evaluated};
        o->on_progress(o->ud, &p);
    }
    return OT_OK;
}

/* Checkpoint (leader), after the progress callback, which may record the step (the CLI's
 * metrics.csv row): a committed checkpoint of a step then implies the step was recorded. */
static ot_status phase_checkpoint(replica_run *rr, int64_t done_steps) {
    trainer *t = rr->t;
    if (!t->ckpt || t->o->ckpt_every <= 0 || done_steps % t->o->ckpt_every != 0) return OT_OK;
    phase_clock pc = train_phase_start();
    ot_status s = train_save_checkpoint(t, rr->m.r, done_steps, rr->metric[0]);
    train_phase_end(t, rr->m.r, PH_CKPT, pc, "checkpoint", true);
    return s;
}

/* Failure handling: a real error (a failed save, a device error), not a peer's failure or the
 * injected stop, is recorded as the run's and fails the pod: the others must not wait for this
 * replica in the next all-reduce until its deadline. */
static void replica_failed(replica_run *rr, ot_status s) {
    trainer *t = rr->t;
    if (s == OT_OK || s == OT_ERR_PEER_FAILED || s == INJECTED_STOP) return;
    pthread_mutex_lock(&t->mu);
    if (t->err_status == OT_OK) {
        t->err_status = s;
        snprintf(t->err_msg, sizeof t->err_msg, "device %d: %s", rr->m.r->dev_index,
                 ot_last_error());
    }
    if (t->pod_vt->fail_member) t->pod_vt->fail_member(t, &rr->m);
    if (t->xchg) ot_shard_exchange_abort(t->xchg, OT_ERR_PEER_FAILED, t->err_msg);
    pthread_mutex_unlock(&t->mu);
}

/* ---------------------------------------------------------------------------------------------
 * The loop
 * ------------------------------------------------------------------------------------------- */

/* Whether the step overlaps its communication (o->overlap; AUTO: from
 * OT_TRAIN_OVERLAP_MIN_BYTES of gradients) when the pod has an exchange. */
static bool train_overlap(const trainer *t) {
    if (!t->pod_vt->shard_exchange) return false;
    if (t->o->overlap == OT_OVERLAP_AUTO)
        return t->total_elems * (int64_t)sizeof(float) >= OT_TRAIN_OVERLAP_MIN_BYTES;
    return t->o->overlap == OT_OVERLAP_ON;
}

/* The overlapped exchange's member set-up: the exchange (made by the segment's first member:
 * one bucket per parameter, the head last, in the reduce-scatter's order), this device's
 * vectors bound to it, the gradient executable's first readers and last writers. */
static ot_status overlap_begin(replica_run *rr, ot_coll_algo algo) {
    trainer *t = rr->t;
    size_t off[MAX_PARAMS + 1], len[MAX_PARAMS + 1];
    /* sharded: the head first, the parameters after it; unsharded: the parameters, then the
     * loss and correct count */
    size_t base = t->shard_len ? SHARD_HEAD : 0;
    size_t block = t->shard_len ? (size_t)t->shard_len : rr->ar_block;
    for (int k = 0; k < t->nparams; k++) {
        off[k] = base + rr->pos[k];
        len[k] = t->sizes[k];
    }
    off[t->nparams] = t->shard_len ? 0 : (size_t)t->total_elems;
    len[t->nparams] = t->shard_len ? SHARD_HEAD : 2;
    ot_status s = OT_OK;
    pthread_mutex_lock(&t->mu);
    if (!t->xchg) {
        t->xchg_nmem = 0;
        t->xchg_nbufs = 0;
        t->xchg_mem = ot_calloc(2 * (size_t)rr->m.n, sizeof *t->xchg_mem);
        t->xchg_bufs = ot_calloc((size_t)rr->m.n * MAX_PARAMS, sizeof *t->xchg_bufs);
        t->xshared = t->shard_len ? ot_calloc((size_t)rr->m.n * block, sizeof(float)) : NULL;
        s = t->xchg_mem && t->xchg_bufs && (t->xshared || !t->shard_len)
                ? t->pod_vt->shard_exchange(t, &rr->m, block, t->nparams + 1, off, len, algo,
                                            &t->xchg)
                : ot_error(OT_ERR_OUT_OF_MEMORY, "train: exchange vectors");
        if (s != OT_OK) {
            ot_free(t->xchg_mem);
            ot_free(t->xchg_bufs);
            ot_free(t->xshared);
            t->xchg_mem = NULL;
            t->xchg_bufs = NULL;
            t->xshared = NULL;
        }
    }
    if (s == OT_OK) {
        t->xchg_users++;
        rr->ovl = true;
        t->rep->overlapped = true;
        /* a member failed before the exchange existed: nobody may wait in it */
        if (t->err_status != OT_OK)
            ot_shard_exchange_abort(t->xchg, OT_ERR_PEER_FAILED, t->err_msg);
    }
    /* sharded: this device's block of the shared parameters is what it publishes */
    if (s == OT_OK && t->shard_len) rr->pblock = t->xshared + (size_t)rr->m.g * block;
    pthread_mutex_unlock(&t->mu);
    if (s != OT_OK) return s;
    s = ot_shard_exchange_bind(t->xchg, rr->m.g, t->shard_len ? rr->send : rr->flat,
                               t->shard_len ? rr->pblock : rr->gblock);
    if (s != OT_OK) return s;
    for (int k = 0; k < t->nparams; k++) rr->first_read[k] = -1;
    for (int q = 0; q < t->nparams + 2; q++) rr->last_write[q] = -1;
    int nk = ot_executable_kernel_count(rr->exe);
    for (int i = 0; i < nk; i++) {
        const ot_kernel *kn = ot_executable_kernel(rr->exe, i);
        for (int q = 0; q < kn->ninputs; q++) {
            const ot_slot *sl = ot_executable_slot(rr->exe, kn->inputs[q]);
            if (sl->kind == OT_SLOT_PARAMETER && sl->number < t->nparams &&
                rr->first_read[sl->number] < 0)
                rr->first_read[sl->number] = i;
        }
        for (int q = 0; q < kn->noutputs; q++) {
            const ot_slot *sl = ot_executable_slot(rr->exe, kn->outputs[q]);
            if (sl->kind == OT_SLOT_OUTPUT && sl->number < t->nparams + 2)
                rr->last_write[sl->number] = i;
        }
    }
    return OT_OK;
}

/* The in-process sharded step's shared parameters (shared: t->xshared overlapped, t->vshared
 * not; rr->pblock is this device's block of it): this device's block written from its
 * parameters and made the update's parameter block, then (once every block is written) the
 * device's parameter buffers replaced by views of the vector. A member reads an owner's block of
 * step t only after the owner published it (fetch_param; not overlapped: after the barrier that
 * ends the update), and the owner writes step t + 1's only after every member has ended its run
 * of step t + 1 (its reduce-scatter waits for their gradients), so the views need no copy. */
static ot_status shared_params_begin(replica_run *rr, float *shared) {
    trainer *t = rr->t;
    replica *r = rr->m.r;
    size_t len = (size_t)t->shard_len;
    rr->shared = shared;
    /* across processes each holds its own copy of the vector: every block from the parameters,
     * which every process holds the same (later blocks arrive by the exchange's publish) */
    if (t->psize > 1)
        memcpy(shared, rr->pflat, (size_t)rr->m.n * len * sizeof(float));
    else
        memcpy(rr->pblock, rr->pflat + (size_t)rr->m.rank * len, len * sizeof(float));
    ot_status s = ot_tpu_optimizer_shard_param_view(t->topt, r->dev, rr->pblock);
    if (s == OT_OK) s = ot_comm_barrier(rr->m.comm, &t->coll);
    for (int k = 0; s == OT_OK && k < t->nparams; k++) {
        ot_buffer *v = NULL;
        s = ot_buffer_view_host(r->dev, ot_model_param_shape(t->model, k),
                                shared + SHARD_HEAD + rr->pos[k], &v);
        if (s == OT_OK) {
            rr->own[k] = r->params[k];
            r->params[k] = v;
        }
    }
    rr->views = true;
    return s;
}

/* The segment's end: the device's own parameter buffers back, with the shared values. */
static void shared_params_end(replica_run *rr) {
    trainer *t = rr->t;
    replica *r = rr->m.r;
    pthread_mutex_lock(&t->mu);
    bool ok = t->err_status == OT_OK; /* else a block may be of another step */
    pthread_mutex_unlock(&t->mu);
    for (int k = 0; k < t->nparams; k++) {
        if (!rr->own[k]) continue;
        if (ok)
            ot_buffer_write_bytes(rr->own[k], 0, rr->shared + SHARD_HEAD + rr->pos[k],
                                  (int64_t)(t->sizes[k] * sizeof(float)));
        ot_buffer_free(r->params[k]);
        r->params[k] = rr->own[k];
        rr->own[k] = NULL;
    }
    ot_tpu_optimizer_shard_param_view(t->topt, r->dev, NULL);
    rr->views = false;
    rr->shared = NULL;
}

/* The non-overlapped in-process sharded step's shared vector (t->vshared): made by the segment's
 * first member, this device's block of it made rr->pblock, then shared_params_begin. */
static ot_status vshared_begin(replica_run *rr) {
    trainer *t = rr->t;
    size_t len = (size_t)t->shard_len;
    ot_status s = OT_OK;
    pthread_mutex_lock(&t->mu);
    if (!t->vshared) t->vshared = ot_calloc((size_t)rr->m.n * len, sizeof(float));
    if (t->vshared) {
        t->vshared_users++;
        rr->vsh = true;
        rr->pblock = t->vshared + (size_t)rr->m.rank * len;
    } else {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: shared parameter vector");
    }
    float *shared = t->vshared;
    pthread_mutex_unlock(&t->mu);
    return s == OT_OK ? shared_params_begin(rr, shared) : s;
}

/* The segment's end for a member of vshared_begin: its buffers back, the vector freed by the
 * last member. */
static void vshared_end(replica_run *rr) {
    trainer *t = rr->t;
    if (rr->views) shared_params_end(rr);
    pthread_mutex_lock(&t->mu);
    if (--t->vshared_users == 0) {
        ot_free(t->vshared);
        t->vshared = NULL;
    }
    pthread_mutex_unlock(&t->mu);
    rr->vsh = false;
}

/* --shard-optimizer's member set-up: the reduce-scatter takes the algorithm the unsharded
 * all-reduce of the same gradients would run (the cost model's choice under auto), which must
 * be one whose summation order does not depend on the split (tree, direct); the flat parameters
 * start as the device's parameters. */
static ot_status shard_begin(replica_run *rr) {
    trainer *t = rr->t;
    train_member *m = &rr->m;
    if (!m->comm || m->n != t->shard_pod)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "train: --shard-optimizer needs a communicator of all %d devices",
                        t->shard_pod);
    rr->rs_coll = t->coll;
    /* across processes the unsharded all-reduce is the hierarchical one (ot_mpi_hier_allreduce,
     * its own choice): the tree, whose bits are the in-process sharded run's with the tree */
    if (rr->rs_coll.algo == OT_ALGO_AUTO && t->psize > 1) rr->rs_coll.algo = OT_ALGO_TREE;
    if (rr->rs_coll.algo == OT_ALGO_AUTO)
        rr->rs_coll.algo = ot_coll_choose(m->comm, OT_COLL_ALLREDUCE,
                                          (size_t)(t->total_elems + 2) * sizeof(float));
    if (rr->rs_coll.algo != OT_ALGO_TREE && rr->rs_coll.algo != OT_ALGO_DIRECT)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --shard-optimizer: the all-reduce here is %s, whose summation "
                        "order depends on the split; give --allreduce tree or direct",
                        ot_coll_algo_name(rr->rs_coll.algo));
    size_t len = (size_t)t->shard_len, total = (size_t)m->n * len;
    rr->send = ot_calloc(total + 2, sizeof(float));
    rr->pflat = ot_calloc(total, sizeof(float));
    if (!rr->send || !rr->pflat)
        return ot_error(OT_ERR_OUT_OF_MEMORY, "train: replica %d shard buffers", m->rank);
    rr->flat = rr->send + SHARD_HEAD;
    ot_status s = ot_tpu_optimizer_shard_blocks(t->topt, m->r->dev, &rr->pblock, &rr->gblock);
    for (int k = 0; k < t->nparams && s == OT_OK; k++) {
        ot_tensor h;
        s = ot_buffer_to_host(m->r->params[k], &h);
        if (s == OT_OK) {
            memcpy(rr->pflat + SHARD_HEAD + rr->pos[k], h.data, h.nbytes);
            ot_tensor_release(&h);
        }
    }
    /* the update's parameter block starts as the device's parameters (a restore, a new segment) */
    if (s == OT_OK)
        memcpy(rr->pblock, rr->pflat + (size_t)ot_comm_rank(m->comm) * len, len * sizeof(float));
    /* across processes one device each (validate_shard): the exchange's member is the process */
    if (s == OT_OK && train_overlap(t)) s = overlap_begin(rr, rr->rs_coll.algo);
    if (s == OT_OK && rr->ovl) s = shared_params_begin(rr, t->xshared);
    /* not overlapped, in one process: the same shared vector, the all-gather a barrier */
    if (s == OT_OK && !rr->ovl && t->psize == 1) s = vshared_begin(rr);
    if (s == OT_OK && m->rank == 0)
        train_log(t,
                  "sharded optimizer update: gradients reduce-scattered (%s) in blocks of %lld "
                  "elements over %d devices, each updating its block and holding its optimizer "
                  "state (%lld bytes), parameters all-gathered%s",
                  ot_coll_algo_name(rr->rs_coll.algo), (long long)t->shard_len, m->n,
                  (long long)t->rep->optim_state_bytes_per_device,
                  rr->ovl ? "; overlapped: each parameter's gradients reduced during the "
                            "backward, its values gathered before its first reader in the next "
                            "forward"
                          : "");
    return s;
}

/* The replica's shard, executable, deadline and scratch; the pod's member set-up. */
static ot_status run_begin(replica_run *rr, trainer *t, int rank, ot_comm *comm) {
    memset(rr, 0, sizeof *rr);
    rr->t = t;
    train_member *m = &rr->m;
    m->rank = rank;
    m->r = &t->reps[rank];
    m->comm = comm;
    m->n = t->nlive * t->psize;
    m->g = t->prank * t->nlive + rank;
    int64_t counts[MAX_DEVICES * 16];
    if (m->n > MAX_DEVICES * 16) return ot_error(OT_ERR_OUT_OF_RANGE, "train: %d replicas", m->n);
    ot_status s = ot_batch_split(t->o->batch_size, m->n, NULL, counts);
    if (s != OT_OK) return s;
    for (int i = 0; i < m->g; i++) rr->off += counts[i];
    rr->nb = counts[m->g];
    for (int i = 0; i < t->ngexe; i++)
        if (t->gexe[i].batch == rr->nb) rr->exe = t->gexe[i].exe;
    if (!rr->exe)
        return ot_error(OT_ERR_INTERNAL, "train: no executable for a batch of %lld",
                        (long long)rr->nb);
    m->timeout_ns = allreduce_timeout(t, rr->exe);
    if (t->pod_vt->member_begin) {
        s = t->pod_vt->member_begin(t, m);
        if (s != OT_OK) return s;
    }
    if (rank == 0) t->rep->allreduce_timeout_s = (double)m->timeout_ns / 1e9;
    int64_t F = t->train.features;
    rr->idx = ot_malloc((size_t)t->step_batch * sizeof *rr->idx);
    rr->perm = ot_malloc((size_t)t->train.n * sizeof *rr->perm);
    rr->perm_epoch = -1;
    rr->xb = ot_malloc((size_t)(rr->nb * F) * sizeof *rr->xb + 4);
    rr->yb = ot_malloc((size_t)rr->nb * sizeof *rr->yb + 4);
    size_t pos = 0; /* sharded: the update's layout (with int8 state, gaps between them) */
    for (int k = 0; k < t->nparams; k++) {
        rr->pos[k] = t->shard_len ? (size_t)(t->fpos[k] - SHARD_HEAD) : pos;
        pos += t->sizes[k];
    }
    /* the overlapped unsharded step: exact sums in an order that does not depend on the split
     * (the tree's or rank order); across processes (one device each) with --allreduce tree,
     * which the pod's non-overlapped all-reduce then runs too (under auto it picks its own) */
    ot_coll_algo ar_algo = OT_ALGO_AUTO;
    bool ar_ovl = t->psize == 1 ? m->comm != NULL : t->nlive == 1 && t->coll.algo == OT_ALGO_TREE;
    if (!t->shard_len && ar_ovl && train_overlap(t) && t->compress == OT_COMPRESS_NONE &&
        !t->local_sgd) {
        ar_algo = t->coll.algo != OT_ALGO_AUTO
                      ? t->coll.algo
                      : ot_coll_choose(m->comm, OT_COLL_ALLREDUCE,
                                       (size_t)(t->total_elems + 2) * sizeof(float));
        if (ar_algo == OT_ALGO_TREE || ar_algo == OT_ALGO_DIRECT) {
            size_t per = ((size_t)t->total_elems + 2 + (size_t)m->n - 1) / (size_t)m->n;
            rr->ar_block = (per + 15) / 16 * 16;
        }
    }
    if (!t->shard_len)
        rr->flat = rr->ar_block ? ot_calloc(rr->ar_block * (size_t)m->n, sizeof *rr->flat)
                                : ot_malloc((size_t)(t->total_elems + 2) * sizeof *rr->flat);
    if (rr->ar_block) {
        rr->red = ot_calloc(rr->ar_block * (size_t)m->n, sizeof *rr->red);
        if (!rr->red) return ot_error(OT_ERR_OUT_OF_MEMORY, "train: replica %d sums", rank);
        rr->gblock = rr->red + (size_t)m->g * rr->ar_block;
    }
    if (!rr->idx || !rr->perm || !rr->xb || !rr->yb || (!t->shard_len && !rr->flat))
        return ot_error(OT_ERR_OUT_OF_MEMORY, "train: replica %d buffers", rank);
    if (t->shard_len) {
        s = shard_begin(rr);
        if (s != OT_OK) return s;
    } else if (rr->ar_block) {
        s = overlap_begin(rr, ar_algo);
        if (s != OT_OK) return s;
        if (rank == 0)
            train_log(t,
                      "gradient all-reduce overlapped with the backward: each parameter's "
                      "gradients reduced (%s order) in blocks of %zu elements as soon as every "
                      "device has them",
                      ot_coll_algo_name(ar_algo), rr->ar_block);
    }
    ot_shape_make(&rr->xs, OT_F32, 2, (int64_t[]){rr->nb, F});
    ot_shape_make(&rr->ys, OT_S32, 1, (int64_t[]){rr->nb});
    if (t->compress != OT_COMPRESS_NONE) {
        /* a fresh aggregator per segment: zero residuals, or a restored checkpoint's */
        if (!m->comm)
            return ot_error(OT_ERR_UNIMPLEMENTED, "train: the %s pod cannot compress gradients",
                            t->pod_vt->name);
        ot_grad_aggregator_options ao = ot_grad_aggregator_options_default();
        ao.op = OT_REDOP_SUM;
        ao.compress = t->compress;
        ao.error_feedback = true;
        ao.topk_fraction = t->topk_fraction;
        ao.coll = t->coll;
        /* int8 and top-k payloads are all-gathered: --allreduce names the all-reduce's
         * algorithm, which the all-gather may not have */
        if (t->compress == OT_COMPRESS_INT8 || t->compress == OT_COMPRESS_TOPK)
            ao.coll.algo = OT_ALGO_AUTO;
        size_t total = (size_t)t->total_elems;
        s = ot_grad_aggregator_create(m->comm, 1, &total, &ao, &rr->agg);
        if (s != OT_OK) return s;
        /* a restored checkpoint's residuals, when they are this pod's */
        if (t->resid_init && t->resid_init_n == m->n)
            s = ot_grad_residual_set(rr->agg, t->resid_init + (size_t)m->g * total, total);
        if (s != OT_OK) return s;
    }
    return OT_OK;
}

static void run_end(replica_run *rr) {
    trainer *t = rr->t;
    if (t->pod_vt->member_end) t->pod_vt->member_end(t, &rr->m);
    if (rr->vsh)
        vshared_end(rr);
    else if (rr->views)
        shared_params_end(rr);
    if (rr->ovl) { /* the segment's last member frees the exchange and the bound vectors */
        pthread_mutex_lock(&t->mu);
        t->xchg_mem[t->xchg_nmem++] = t->shard_len ? rr->send : rr->flat;
        t->xchg_mem[t->xchg_nmem++] = t->shard_len ? rr->pflat : rr->red;
        rr->send = rr->pflat = rr->red = NULL;
        rr->flat = NULL;
        for (int k = 0; k < t->nparams; k++)
            if (rr->held[k]) t->xchg_bufs[t->xchg_nbufs++] = rr->held[k];
        memset(rr->held, 0, sizeof rr->held);
        if (--t->xchg_users == 0) {
            ot_shard_exchange_free(t->xchg);
            t->xchg = NULL;
            for (int i = 0; i < t->xchg_nmem; i++) ot_free(t->xchg_mem[i]);
            for (int i = 0; i < t->xchg_nbufs; i++) ot_buffer_free(t->xchg_bufs[i]);
            ot_free(t->xchg_mem);
            ot_free(t->xchg_bufs);
            ot_free(t->xshared);
            t->xchg_mem = NULL;
            t->xchg_bufs = NULL;
            t->xshared = NULL;
            t->xchg_nmem = t->xchg_nbufs = 0;
        }
        pthread_mutex_unlock(&t->mu);
    }
    if (!rr->send) ot_free(rr->flat); /* else it points into send */
    ot_free(rr->send);
    ot_free(rr->pflat);
    ot_free(rr->red);
    for (int k = 0; k < t->nparams; k++) ot_buffer_free(rr->grads[k]);
    ot_free(rr->idx);
    ot_free(rr->perm);
    ot_free(rr->xb);
    ot_free(rr->yb);
    ot_grad_aggregator_free(rr->agg);
}

/* One step of the replica; the leader (the pod's replica 0) also records and checkpoints it. */
static ot_status run_step(replica_run *rr, int64_t step) {
    trainer *t = rr->t;
    const ot_train_options *o = t->o;
    ot_status s = OT_OK;
    if (o->migrate_device >= 0 && step + 1 == o->migrate_step &&
        rr->m.r->dev_index == o->migrate_device) {
        s = train_migrate_replica(t, &rr->m, step);
        if (s != OT_OK) return s;
    }
    if (o->fail_device >= 0 && step + 1 == o->fail_step) {
        s = t->pod_vt->inject_fault(t, &rr->m, step);
        if (s != OT_OK) return s;
    }
    if (rr->ovl) { /* nobody still reads this device's gradients of the last step */
        rr->seq = (uint64_t)(step - t->seg_start + 1);
        phase_clock pc = train_phase_start();
        s = ot_shard_exchange_grads_writable(t->xchg, rr->m.g, rr->seq, xchg_deadline(rr));
        /* unsharded: this device's block of the sums is rewritten from the first reduction on */
        if (s == OT_OK) free_held(rr); /* every member has reduced the last step */
        if (s == OT_OK && !t->shard_len)
            s = ot_shard_exchange_params_writable(t->xchg, rr->m.g, rr->seq, xchg_deadline(rr));
        phase_piece(t, rr->m.r, PH_COMM, pc, t->shard_len ? "reduce-scatter" : "all-reduce", false);
        rr->buckets_left = t->nparams + 1;
        for (int k = 0; k < t->nparams; k++) rr->posted[k] = false;
    }
    for (int64_t j = 0; s == OT_OK && j < t->accum; j++) {
        /* overlapped: the last micro-batch's backward posts the gradients */
        rr->grads_hook = rr->ovl && j == t->accum - 1;
        rr->add = j > 0;
        s = phase_forward_backward(rr, phase_load_batch(rr, step, j));
        if (s == OT_OK) s = phase_gather(rr, j > 0);
        rr->grads_hook = false;
    }
    if (s == OT_OK) s = phase_allreduce(rr);
    double lr = ot_lr_schedule_lr(t->sched, step);
    if (s == OT_OK) s = phase_update(rr, step, lr);
    if (s == OT_OK) s = phase_average(rr, step);
    if (s == OT_OK) s = phase_residuals(rr, step);
    if (s != OT_OK) return s;
    rr->m.r->done = step + 1;
    if (rr->m.g != 0) return OT_OK;
    s = phase_metrics(rr, step, lr);
    if (s == OT_OK) s = phase_checkpoint(rr, step + 1);
    /* An injected fault (--fail-device D@F) kills its device at the start of step F; that device
     * finishes step F-1 only after the leader joins step F-1's all-reduce, so the leader commits
     * its checkpoint in flight before it: what a restart resumes from does not depend on the
     * writer's speed (every checkpoint of a step up to F-2 is committed) */
    if (s == OT_OK && t->ckpt && t->o->fail_device >= 0 && step + 3 == t->o->fail_step)
        s = ot_ckpt_wait(t->ckpt, NULL);
    return s;
}

ot_status train_replica_run(void *ud, int rank, ot_comm *comm) {
    trainer *t = ud;
    replica_run rr;
    ot_status s = run_begin(&rr, t, rank, comm);
    if (s == OT_OK) {
        rr.m.r->done = t->seg_start;
        for (int64_t step = t->seg_start; s == OT_OK && step < t->run_end; step++)
            s = run_step(&rr, step);
    }
    replica_failed(&rr, s);
    run_end(&rr);
    return s;
}
