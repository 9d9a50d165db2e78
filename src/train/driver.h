/* The training driver's internals (not installed): the trainer's state, the phases of a replica's
 * step (step.c), the checkpointed state (state.c) and the pods it trains on (pod_local.c: host
 * devices in this process; pod_mpi.c: every process of an MPI job).
 *
 * One driver: ot_train (train.c) sets up, runs the step loop in segments and finishes the same way
 * whatever the pod; what differs between one process and an MPI job — how the replicas' threads
 * start, how the gradients are summed, what an injected fault does, how a failure is survived,
 * whether the processes must agree — is the pod's, behind a const vtable (optional slots NULL).
 *
 * Ownership: one ot_train call owns one trainer and its pod context. Threads: the replica threads
 * share the trainer; t->mu guards the log, the first-error record and the pod's failure state. */
#ifndef OT_TRAIN_DRIVER_H
#define OT_TRAIN_DRIVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "optitpu/collectives.h"
#include "optitpu/ft.h"
#include "optitpu/optim.h"
#include "optitpu/pod.h"
#include "optitpu/runtime.h"
#include "optitpu/tpu_optim.h"
#include "optitpu/train.h"

#define MAX_PARAMS  (2 * (OT_MODEL_MAX_HIDDEN + 2))
#define MAX_DEVICES 64
/* --shard-optimizer: elements before the parameters in the flat vector (a multiple of 16) */
#define SHARD_HEAD 16
#define MAX_EXES   8
/* what a device stopped by an injected fault returns (it leaves without telling anyone) */
#define INJECTED_STOP OT_ERR_CANCELLED

typedef struct replica {
    int dev_index; /* backend device */
    ot_device *dev;
    ot_buffer *params[MAX_PARAMS];
    ot_buffer *test_x, *test_y; /* evaluation set on this device (leader only, lazily) */
    int64_t done;               /* steps this replica has completed */
    uint64_t cpu[4];            /* per-phase thread CPU ns of this replica in the current run */
    /* the run's time per named part of the step (train_phase_end's names), in first-seen order */
    struct {
        const char *name;
        uint64_t wall, cpu; /* ns */
        int64_t count;
    } parts[OT_TRAIN_MAX_PARTS];
    int nparts;
} replica;

enum { PH_COMPUTE = 0, PH_COMM, PH_CKPT, PH_OTHER };

typedef struct grad_exe {
    int64_t batch;
    ot_executable *exe;
} grad_exe;

typedef struct trainer trainer;

/* One replica's thread during a segment, as the pod sees it. */
typedef struct train_member {
    int rank;      /* among this process's live replicas */
    int g;         /* among the pod's replicas (process * live replicas + rank) */
    int n;         /* replicas in the pod */
    replica *r;    /* &t->reps[rank] */
    ot_comm *comm; /* the segment's communicator, when the pod has one per replica; else NULL */
    int64_t timeout_ns; /* the gradient all-reduce's deadline */
} train_member;

typedef struct train_pod_vtable {
    const char *name;
    /* The pod spans processes (the log says so). */
    bool processes;
    /* The collectives record themselves in the trace (else the driver records the all-reduce). */
    bool comm_traced;
    /* Required. Before the backend exists: t->prank, t->psize and t->spares, the option checks
     * that depend on the pod; allocates t->pod (freed by close, also when this fails). */
    ot_status (*open)(trainer *t);
    /* Optional. After set-up, before the first step: failure detection. */
    ot_status (*start)(trainer *t);
    /* Required. Runs train_replica_run on one thread per live local replica for the segment
     * [t->seg_start, t->run_end); st[r] gets replica r's status; returns the first error. */
    ot_status (*run_segment)(trainer *t, ot_status *st);
    /* Optional. On the replica's thread before its first step of a segment / after its last. */
    ot_status (*member_begin)(trainer *t, train_member *m);
    void (*member_end)(trainer *t, train_member *m);
    /* Required. Sums n floats in place over every replica of the pod (fixed order: bit-identical
     * on every replica). */
    ot_status (*allreduce)(trainer *t, train_member *m, float *flat, size_t n);
    /* Optional (NULL: the step never overlaps its communication). The overlapped step's
     * split-phase exchange over the pod's m->n members (collectives.h: block, buckets, order),
     * made by the segment's first member with t->mu held; members call it with their pod rank
     * m->g. */
    ot_status (*shard_exchange)(trainer *t, train_member *m, size_t block, int nbuckets,
                                const size_t *off, const size_t *len, ot_coll_algo order,
                                ot_shard_exchange **out);
    /* Required. The injected fault (o->fail_device) at the start of 0-based step `step`, called
     * on every replica when step + 1 == o->fail_step: an error ends this replica's segment. */
    ot_status (*inject_fault)(trainer *t, train_member *m, int64_t step);
    /* Optional. Replica m failed with a real error, t->mu held: nobody may wait for it. */
    void (*fail_member)(trainer *t, train_member *m);
    /* Optional (NULL: s). Every process's verdict, collectively: an error anywhere is an error
     * everywhere; `what` names the stage in the others' message. */
    ot_status (*agree)(trainer *t, ot_status s, const char *what);
    /* Optional. Process 0 restored checkpoint *step (or found none): the others take it. */
    ot_status (*share_restore)(trainer *t, int64_t *step, bool *found);
    /* Optional (NULL: the segment's error ends the run). A segment ended early with rs, replica
     * r's status in st[r]: survive the failure (t->step and the members rebuilt) or return the
     * error. */
    ot_status (*recover)(trainer *t, ot_status rs, const ot_status *st);
    /* Optional. The final check that every process holds the parameters hashed in sha; s is this
     * process's verdict so far. */
    ot_status (*check_same)(trainer *t, ot_status s, const uint8_t sha[32]);
    /* Optional (NULL: the pod cannot migrate, --migrate is refused). Takes an unused device of
     * this process's backend for a migration (t->mu not held; the slot locks what it needs). */
    ot_status (*take_spare)(trainer *t, int *dev_index);
    /* Required with take_spare. Replica m now runs on m->r->dev_index, which was `from`, on the
     * replica's thread: the pod's failure detection and trace follow it, `from` leaves the pod. */
    void (*moved)(trainer *t, train_member *m, int from);
    /* Optional (NULL: this process writes pf to o->trace_path). The run's trace, pf holding
     * this process's events (NULL when s, this process's verdict so far, is an error); called on
     * every process when tracing, so a pod of processes may merge their traces collectively. */
    ot_status (*write_trace)(trainer *t, ot_status s, ot_profile *pf);
    /* Optional (NULL: 0). The membership epoch recorded in checkpoints. */
    uint64_t (*epoch)(trainer *t);
    /* Optional. Stops what start started (before the report is made). */
    void (*stop)(trainer *t);
    /* Optional. Frees t->pod (teardown; also after a failed open). */
    void (*close)(trainer *t);
} train_pod_vtable;

extern const train_pod_vtable train_pod_local; /* pod_local.c */
extern const train_pod_vtable train_pod_mpi;   /* pod_mpi.c */

struct trainer {
    const ot_train_options *o;
    ot_train_report *rep;
    const train_pod_vtable *pod_vt;
    void *pod;        /* the pod's context */
    int prank, psize; /* this process and the process count (0 and 1 in one process) */
    int spares;       /* devices beyond the pod's, for a replacement */
    ot_backend *backend;
    ot_model *model;
    ot_dataset train, test;
    int nparams;
    size_t sizes[MAX_PARAMS];
    int64_t total_elems;
    ot_optimizer *optim;
    ot_tpu_optimizer *topt;
    ot_coll_options coll;
    ot_lr_schedule *sched;
    grad_exe gexe[MAX_EXES];
    int ngexe;
    ot_executable *eval_exe;
    int64_t total_steps;
    int64_t accum;             /* micro-batches per step (o->grad_accum) */
    int64_t step_batch;        /* samples per optimizer step: o->batch_size * accum */
    ot_grad_compress compress; /* the gradient all-reduce's compression (NONE: exact) */
    double topk_fraction;
    int64_t local_sgd; /* o->local_sgd: average parameters every local_sgd steps (0: off) */
    /* o->shard_optimizer: elements of each device's block of the flat vector, SHARD_HEAD
     * elements (the loss and correct count, then zeros) then the parameters in model order,
     * zero-padded (topt then updates one f32[shard_len] tensor per device); 0: not sharded */
    int64_t shard_len;
    /* The sharded layout's flat vector (also what a checkpoint's optimizer state converts
     * through, sharded or not): parameter k at fpos[k], fend after the last one — SHARD_HEAD,
     * then the parameters back to back; with int8 state the head and every parameter on a
     * multiple of OT_TPU_INT8_BLOCK (tpu_optim.h). flat_metrics: where the step's loss and
     * correct count follow the gradients in replica_run's flat (total_elems unsharded,
     * fend - SHARD_HEAD sharded). */
    int64_t fpos[MAX_PARAMS], fend, flat_metrics;
    int shard_pod; /* the devices the update is sharded over: every process's (o->devices in one
                    * process; across processes, one device each) */
    /* the overlapped step's exchange (o->overlap; the pod's shard_exchange): made by the
     * segment's first member (t->mu), freed by its last (xchg_users) */
    ot_shard_exchange *xchg;
    int xchg_users;
    /* the members' vectors bound to it (send, pflat), which another member may still read when
     * their owner leaves: freed with the exchange */
    float **xchg_mem;
    int xchg_nmem;
    /* the overlapped sharded step's parameters: one vector laid out as the members' pflat, which
     * every device of the process reads through views (its parameter buffers during the
     * segment) and each owner's update writes its block of in place: the all-gather copies
     * nothing (across processes each process's copy, the others' blocks received into it);
     * freed with the exchange */
    float *xshared;
    /* the non-overlapped in-process sharded step's parameters (--overlap off, or auto below its
     * floor): one vector laid out as xshared, read through views and written in place by each
     * owner's update as there, the all-gather a barrier; made by the segment's first member
     * (t->mu), freed by its last (vshared_users) */
    float *vshared;
    int vshared_users;
    /* the members' gradient outputs posted in place (ot_shard_exchange_post_view) when they
     * left, which another member may still read: freed with the exchange (cap: n * MAX_PARAMS) */
    ot_buffer **xchg_bufs;
    int xchg_nbufs;
    /* across processes, a resumed sharded run: process 0's copy of every slot of the restored
     * optimizer state over the whole flat vector (shard_pod * shard_len elements of the slot's
     * dtype each), which the pod's share_restore hands out block by block, then frees */
    char **shard_restore;
    /* --grad-compress's error-feedback residuals, total_elems floats per member in pod rank
     * order: every member's row is written at checkpoint steps and at a segment's end (then a
     * barrier), for the leader's checkpoint of step ck_resid_step over ck_resid_n members; and
     * those a restore loaded, set into the next segment's aggregators (then freed). */
    float *ck_resid;
    int64_t ck_resid_step;
    int ck_resid_n;
    float *resid_init;
    int resid_init_n;
    /* LocalSGD (one process): every member's parameters and optimizer state (nparams + state
     * tensors per member, host copies), snapshotted with the residuals, for the leader's save of
     * step ck_rep_step over ck_rep_n members (the leader's own are its model and optim roles). */
    ot_tensor *ck_rep;
    int ck_rep_cap; /* tensors in ck_rep */
    int64_t ck_rep_step;
    int ck_rep_n;
    /* --shard-optimizer with checkpoints: every member's block of the optimizer state (its state
     * tensors, host copies, member-major), snapshotted like ck_rep, for the leader's save of step
     * ck_shard_step over ck_shard_n members (one optim shard per member, state.c). */
    ot_tensor *ck_shard;
    int ck_shard_cap; /* tensors in ck_shard */
    int64_t ck_shard_step;
    int ck_shard_n;
    int64_t member_steps;      /* the leader's sum over steps of the replicas in the all-reduce */
    replica reps[MAX_DEVICES]; /* this process's live replicas in rank order */
    int nlive;
    /* progress */
    int64_t step;               /* steps done */
    int64_t run_end, seg_start; /* the current segment's steps [seg_start, run_end) */
    double last_test_acc, last_test_loss;
    uint64_t loop_start_ns;
    /* the steady steps' window (ot_train_report.steady_wall_s): its first and last step done, and
     * the leader's clock at their ends */
    int64_t steady_from, steady_to;
    uint64_t steady_t0_ns, steady_t1_ns;
    pthread_mutex_t mu;
    ot_pod_trace *trace;
    ot_ckpt_manager *ckpt; /* process 0 only */
    int64_t last_ckpt_step;
    /* what the checkpointed state belongs to (recorded in each manifest, checked on resume) */
    char state_model[1024];
    char state_layout[65];
    /* the first error of a replica that was not a peer's failure (reported instead of the
     * others' PEER_FAILED) */
    ot_status err_status;
    char err_msg[768];
    char *log;
    size_t log_len, log_cap;
    ot_train_point *points;
    int64_t npoints, points_cap;
};

/* train.c */
void train_log(trainer *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The segment's error: a replica's own error when one was recorded, else rs. */
ot_status train_first_error(trainer *t, ot_status rs);
/* Compiles the gradient executables of this process's shard sizes over the live replicas. */
ot_status train_prepare_executables(trainer *t);

/* step.c: the replica's step loop and its phases */
typedef struct phase_clock {
    uint64_t w0, c0;
} phase_clock;
phase_clock train_phase_start(void);
/* Adds the phase's thread CPU time to r->cpu[ph] and its wall and CPU time to the part `name`
 * (a string literal); traced phases go to t->trace too. */
void train_phase_end(trainer *t, replica *r, int ph, phase_clock pc, const char *name, bool traced);
/* An ot_local_fn: replica `rank`'s steps of the current segment (comm: its communicator or NULL).
 */
ot_status train_replica_run(void *ud, int rank, ot_comm *comm);
ot_status train_evaluate(trainer *t, replica *r, double *acc, double *loss);

/* migrate.c: --migrate, on the replica's thread at the start of 0-based step `step` */
ot_status train_migrate_replica(trainer *t, train_member *m, int64_t step);

/* state.c: parameters, optimizer state and checkpoints */
ot_status train_put_params(trainer *t, replica *r, const ot_tensor *host);
void train_free_replica(replica *r);
ot_status train_init_params(trainer *t);
ot_status train_params_sha256(trainer *t, const replica *r, uint8_t out[32]);
ot_status train_copy_optimizer_state(trainer *t, const replica *src, const replica *dst);
ot_status train_describe_state(trainer *t);
/* t->fpos, fend and flat_metrics (sharded: checked against the update's layout). */
ot_status train_flat_layout(trainer *t);
ot_status train_save_checkpoint(trainer *t, replica *r, int64_t step, double loss);
/* The newest checkpoint that verifies and fits, into every live replica (*found false: none). */
ot_status train_restore_latest(trainer *t, int64_t *step, bool *found);
/* Across processes, after process 0 restored a sharded run (t->shard_restore): every slot of the
 * restored optimizer state broadcast over comm from process 0, each other process setting its
 * device's block; t->shard_restore freed. Collective. */
ot_status train_shard_restore_share(trainer *t, ot_comm *comm);
/* Frees t->shard_restore (NULL: nothing). */
void train_shard_restore_free(trainer *t);
/* The run's checkpoint options: retention (keep) and the replica roots. */
ot_ckpt_options train_ckpt_options(const trainer *t);
/* Without resume: a directory (or replica root) holding checkpoints is refused, or emptied with
 * fresh. */
ot_status train_prepare_ckpt_dir(trainer *t);

#endif
