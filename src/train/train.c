/* The data-parallel training driver: replicas on host devices, gradient all-reduce through the
 * pod's communicator, the compiled optimizer update, evaluation, async checkpoints, heartbeats,
 * failure detection and recovery (shrink or restore onto a spare). See include/optitpu/train.h. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jansson.h>
#include <unistd.h>

#include "optitpu/autodiff.h"
#include "optitpu/collectives.h"
#include "optitpu/compiler.h"
#include "optitpu/ft.h"
#include "optitpu/mpi.h"
#include "optitpu/optim.h"
#include "optitpu/pod.h"
#include "optitpu/runtime.h"
#include "optitpu/tpu_optim.h"
#include "optitpu/train.h"
#include "ft/ft_io.h"
#include "train/train_internal.h"

#define MAX_PARAMS  (2 * (OT_MODEL_MAX_HIDDEN + 2))
#define MAX_DEVICES 64
#define MAX_EXES    8

ot_train_options ot_train_options_default(void) {
    ot_train_options o;
    memset(&o, 0, sizeof o);
    o.model = ot_model_config_default();
    o.dataset = "digits";
    o.synthetic_n = 65536;
    o.optimizer = "adam";
    o.lr = 3e-3;
    o.schedule = "warmup-cosine";
    o.warmup_steps = 20;
    o.batch_size = 128;
    o.steps = 400;
    o.devices = 8;
    o.topology = NULL; /* torus-2x4 when there are 8 devices */
    /* Measured on the 2-core host with 8 device threads (docs/train.md): for the ~38 KB gradient
     * the binomial tree wakes the fewest threads per step; its CPU share outside compute was
     * 7.9-8.9% against 9.3-11.6% (direct) and 14-16% (halving-doubling, the cost model's pick). */
    o.allreduce = "tree";
    o.ckpt_every = 100;
    o.final_ckpt = true;
    o.keep = 3;
    o.fail_device = -1;
    o.fail_step = -1;
    o.recovery = OT_RECOVER_SHRINK;
    o.eval_every = 50;
    return o;
}

/* ---------------------------------------------------------------------------------------------
 * State
 * ------------------------------------------------------------------------------------------- */

typedef struct replica {
    int dev_index; /* backend device */
    ot_device *dev;
    ot_buffer *params[MAX_PARAMS];
    ot_buffer *test_x, *test_y; /* evaluation set on this device (leader only, lazily) */
    int64_t done;               /* steps this replica has completed */
    /* per-phase thread CPU ns of this replica in the current run */
    uint64_t cpu[4];
} replica;

enum { PH_COMPUTE = 0, PH_COMM, PH_CKPT, PH_OTHER };

typedef struct grad_exe {
    int64_t batch;
    ot_executable *exe;
} grad_exe;

typedef struct trainer {
    const ot_train_options *o;
    ot_train_report *rep;
    /* across processes (o->mpi): this process's rank and the process count; 0 and 1 otherwise */
    ot_mpi *mpi;
    int prank, psize;
    ot_backend *backend;
    int ndev_total; /* devices + spares */
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
    /* members: replicas in rank order */
    replica reps[MAX_DEVICES];
    int nlive;
    bool used_dev[MAX_DEVICES];
    ot_topology *topo;
    /* progress */
    int64_t step;               /* steps done */
    int64_t run_end, seg_start; /* the current segment's steps [seg_start, run_end) */
    double last_test_acc, last_test_loss;
    uint64_t loop_start_ns;
    /* pod */
    ot_coord *coord;
    int coord_id[MAX_DEVICES];
    atomic_bool alive[MAX_DEVICES];
    atomic_bool agent_stop;
    pthread_t agent;
    bool agent_running;
    pthread_mutex_t mu; /* world, failure bookkeeping, log */
    ot_local_world *world;
    int world_rank_of_dev[MAX_DEVICES];
    bool fault_done;
    int failed_dev;
    uint64_t stop_ns, detect_ns;
    ot_pod_trace *trace;
    ot_ckpt_manager *ckpt;
    int64_t last_ckpt_step;
    /* what the checkpointed state belongs to (recorded in each manifest, checked on resume) */
    char state_model[1024];
    char state_layout[65];
    /* the first error of a replica that was not a peer's failure (reported instead of the
     * others' PEER_FAILED) */
    ot_status err_status;
    char err_msg[768];
    /* log */
    char *log;
    size_t log_len, log_cap;
    ot_train_point *points;
    int64_t npoints, points_cap;
} trainer;

static void tlog(trainer *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void tlog(trainer *t, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&t->mu);
    size_t n = strlen(msg);
    if (t->log_len + n + 2 > t->log_cap) {
        size_t cap = (t->log_cap + n + 2) * 2;
        char *nl = ot_malloc(cap);
        if (nl) {
            if (t->log) memcpy(nl, t->log, t->log_len);
            ot_free(t->log);
            t->log = nl;
            t->log_cap = cap;
        }
    }
    if (t->log_len + n + 2 <= t->log_cap) {
        memcpy(t->log + t->log_len, msg, n);
        t->log_len += n;
        t->log[t->log_len++] = '\n';
        t->log[t->log_len] = 0;
    }
    pthread_mutex_unlock(&t->mu);
    if (t->o->on_event) t->o->on_event(t->o->ud, msg);
}

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------------------------------------
 * Heartbeat agent and failure detection
 * ------------------------------------------------------------------------------------------- */

#define HEARTBEAT_NS (10 * 1000000ull)

static void *agent_main(void *arg) {
    trainer *t = arg;
    while (!atomic_load(&t->agent_stop)) {
        for (int d = 0; d < t->ndev_total; d++)
            if (atomic_load(&t->alive[d])) ot_coord_heartbeat(t->coord, t->coord_id[d]);
        ot_coord_tick(t->coord);
        struct timespec ts = {0, (long)HEARTBEAT_NS};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void on_coord_event(void *ud, const ot_coord_event *e) {
    trainer *t = ud;
    if (e->kind != OT_EVENT_FAILED) return;
    int dev = -1;
    for (int d = 0; d < t->ndev_total; d++)
        if (t->coord_id[d] == e->device) dev = d;
    if (dev < 0) return;
    pthread_mutex_lock(&t->mu);
    int rank = t->world_rank_of_dev[dev];
    bool first = t->failed_dev < 0 || t->failed_dev == dev;
    if (first) {
        /* fenced: a device declared failed leaves the pod even if it was only late */
        t->detect_ns = ot_now_ns();
        t->failed_dev = dev;
        atomic_store(&t->alive[dev], false);
        if (t->world && rank >= 0) ot_local_world_fail(t->world, rank);
    }
    uint64_t stop = t->stop_ns, det = t->detect_ns;
    pthread_mutex_unlock(&t->mu);
    if (!first) {
        tlog(t,
             "coordinator: device %d declared FAILED while recovering from device %d; it is "
             "handled after that",
             dev, t->failed_dev);
        return;
    }
    tlog(t, "coordinator: device %d declared FAILED (phi %.1f, %.0f ms after its last heartbeat)",
         dev, e->phi, stop ? (double)(det - stop) / 1e6 : 0.0);
}

/* ---------------------------------------------------------------------------------------------
 * Executables
 * ------------------------------------------------------------------------------------------- */

static ot_status compile_grad(trainer *t, int64_t batch, ot_executable **out) {
    for (int i = 0; i < t->ngexe; i++)
        if (t->gexe[i].batch == batch) {
            *out = t->gexe[i].exe;
            return OT_OK;
        }
    if (t->ngexe == MAX_EXES) return ot_error(OT_ERR_OUT_OF_RANGE, "train: too many batch shapes");
    ot_module *loss = NULL, *g = NULL;
    ot_status s = ot_model_build_loss(t->model, batch, 1.0 / (double)t->o->batch_size, &loss);
    int64_t wrt[MAX_PARAMS];
    for (int k = 0; k < t->nparams; k++) wrt[k] = k;
    ot_grad_options go = ot_grad_options_default();
    go.loss_index = 0;
    if (s == OT_OK) s = ot_grad(loss, wrt, t->nparams, &go, &g);
    ot_executable *exe = NULL;
    if (s == OT_OK) {
        ot_compile_options co = ot_compile_options_default();
        s = ot_compile(g, &co, &exe);
    }
    ot_module_free(loss);
    ot_module_free(g);
    if (s != OT_OK)
        return ot_error_wrap(s, "train: compiling the gradient of a batch of %lld",
                             (long long)batch);
    t->gexe[t->ngexe].batch = batch;
    t->gexe[t->ngexe].exe = exe;
    t->ngexe++;
    *out = exe;
    return OT_OK;
}

static ot_status compile_eval(trainer *t) {
    ot_module *loss = NULL;
    ot_status s = ot_model_build_loss(t->model, t->test.n, 1.0 / (double)t->test.n, &loss);
    if (s == OT_OK) {
        ot_compile_options co = ot_compile_options_default();
        s = ot_compile(loss, &co, &t->eval_exe);
    }
    ot_module_free(loss);
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

static ot_status put_params(trainer *t, replica *r, const ot_tensor *host) {
    for (int k = 0; k < t->nparams; k++) {
        ot_buffer_free(r->params[k]);
        r->params[k] = NULL;
        ot_status s = ot_buffer_from_host(r->dev, &host[k], &r->params[k]);
        if (s != OT_OK) return s;
    }
    return OT_OK;
}

static void free_replica(replica *r) {
    for (int k = 0; k < MAX_PARAMS; k++) {
        ot_buffer_free(r->params[k]);
        r->params[k] = NULL;
    }
    ot_buffer_free(r->test_x);
    ot_buffer_free(r->test_y);
    r->test_x = r->test_y = NULL;
}

static ot_status params_sha256(trainer *t, const replica *r, uint8_t out[32]) {
    /* over the f32 bytes of every parameter, in parameter order */
    ot_sha256 h;
    ot_status s = ot_sha256_init(&h);
    for (int k = 0; s == OT_OK && k < t->nparams; k++) {
        ot_tensor v;
        s = ot_buffer_to_host(r->params[k], &v);
        if (s == OT_OK) {
            s = ot_sha256_update(&h, v.data, v.nbytes);
            ot_tensor_release(&v);
        }
    }
    if (s != OT_OK) {
        ot_sha256_final(&h, NULL);
        return s;
    }
    return ot_sha256_final(&h, out);
}

static ot_status evaluate(trainer *t, replica *r, double *acc, double *loss) {
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

static const char *optimizer_name(const trainer *t) {
    return t->o->optimizer ? t->o->optimizer : "adam";
}

/* What defines the layout of the checkpointed state: the model (kind, activation, every
 * parameter's name and shape) in words, and the optimizer's state tensors (names and shapes)
 * as a SHA-256. */
static ot_status describe_state(trainer *t) {
    char *d = t->state_model;
    size_t cap = sizeof t->state_model, k = 0;
    k += (size_t)snprintf(d + k, cap - k, "%s %s:", ot_model_kind_name(t->o->model.kind),
                          ot_activation_name(t->o->model.activation));
    for (int i = 0; i < t->nparams && k < cap; i++) {
        char sh[128];
        ot_shape_format(ot_model_param_shape(t->model, i), sh, sizeof sh);
        k += (size_t)snprintf(d + k, cap - k, " %s %s", ot_model_param_name(t->model, i), sh);
    }
    if (k >= cap) return ot_error(OT_ERR_OUT_OF_RANGE, "train: model description too long");
    ot_sha256 h;
    OT_CHECK(ot_sha256_init(&h));
    ot_status s = OT_OK;
    int ns = ot_tpu_optimizer_state_count(t->topt);
    for (int i = 0; s == OT_OK && i < ns; i++) {
        ot_shape sh;
        char line[512];
        s = ot_tpu_optimizer_state_shape(t->topt, i, &sh);
        if (s != OT_OK) break;
        char shs[128];
        ot_shape_format(&sh, shs, sizeof shs);
        int n = snprintf(line, sizeof line, "%s %s;", ot_tpu_optimizer_state_name(t->topt, i), shs);
        s = ot_sha256_update(&h, line, (size_t)n);
    }
    uint8_t dg[32];
    if (s != OT_OK) {
        ot_sha256_final(&h, NULL);
        return s;
    }
    OT_CHECK(ot_sha256_final(&h, dg));
    ot_hex(dg, 32, t->state_layout);
    return OT_OK;
}

/* The manifest's "optimizer" object (ot_malloc'd JSON): its configuration and what the state
 * belongs to. */
static char *state_json(trainer *t) {
    json_t *j =
        json_pack("{s:s, s:f, s:s, s:s, s:s, s:I, s:I, s:s}", "name", optimizer_name(t), "lr",
                  t->o->lr, "schedule", ot_lr_schedule_kind(t->sched), "model", t->state_model,
                  "state_layout", t->state_layout, "state_tensors",
                  (json_int_t)ot_tpu_optimizer_state_count(t->topt), "batch_size",
                  (json_int_t)t->o->batch_size, "data", t->o->dataset ? t->o->dataset : "digits");
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    char *out = text ? ot_strdup(text) : NULL;
    free(text);
    return out;
}

/* ot_ckpt_resume's verdict on a verified checkpoint: another optimizer or model is the user's
 * mistake and stops the resume (FAILED_PRECONDITION); missing tensors or other shapes under the
 * same record are damage (CORRUPT_DATA: skipped and set aside). */
static ot_status accept_ckpt(void *ud, const ot_ckpt *ck) {
    trainer *t = ud;
    const ot_ckpt_manifest *m = ot_ckpt_manifest_of(ck);
    json_t *j = json_loads(m->optimizer_json, 0, NULL);
    const char *name = json_string_value(json_object_get(j, "name"));
    const char *model = json_string_value(json_object_get(j, "model"));
    const char *layout = json_string_value(json_object_get(j, "state_layout"));
    ot_status s = OT_OK;
    if (name && strcmp(name, optimizer_name(t)) != 0)
        s = ot_error(OT_ERR_FAILED_PRECONDITION,
                     "train: the checkpoint of step %lld in %s holds the state of optimizer '%s'; "
                     "this run uses '%s' (resume it with --optimizer %s, or start over with "
                     "--fresh or another --ckpt-dir)",
                     (long long)m->step, t->o->ckpt_dir, name, optimizer_name(t), name);
    else if (model && strcmp(model, t->state_model) != 0)
        s = ot_error(OT_ERR_FAILED_PRECONDITION,
                     "train: the checkpoint of step %lld in %s is of another model (%s); this "
                     "run's is %s (resume it with the same --model/--hidden/--activation, or "
                     "start over with --fresh or another --ckpt-dir)",
                     (long long)m->step, t->o->ckpt_dir, model, t->state_model);
    else if (layout && strcmp(layout, t->state_layout) != 0)
        s = ot_error(OT_ERR_FAILED_PRECONDITION,
                     "train: the checkpoint of step %lld in %s has another optimizer state "
                     "layout than this run's %s (its options differ)",
                     (long long)m->step, t->o->ckpt_dir, optimizer_name(t));
    json_decref(j);
    if (s != OT_OK) return s;
    /* the same record: every tensor must be there with this run's shape, or the step is damaged */
    for (int k = 0; k < t->nparams; k++) {
        ot_tensor v;
        const char *pn = ot_model_param_name(t->model, k);
        if (ot_ckpt_get(ck, "model", pn, &v) != OT_OK)
            return ot_error(OT_ERR_CORRUPT_DATA, "%s: no parameter %s", ot_ckpt_dir(ck), pn);
        if (!ot_shape_equal(&v.shape, ot_model_param_shape(t->model, k))) {
            char a[128], b[128];
            ot_shape_format(&v.shape, a, sizeof a);
            ot_shape_format(ot_model_param_shape(t->model, k), b, sizeof b);
            return ot_error(OT_ERR_CORRUPT_DATA, "%s: parameter %s is %s, the model's is %s",
                            ot_ckpt_dir(ck), pn, a, b);
        }
    }
    int ns = ot_tpu_optimizer_state_count(t->topt);
    for (int i = 0; i < ns; i++) {
        ot_tensor v;
        ot_shape want;
        const char *sn = ot_tpu_optimizer_state_name(t->topt, i);
        OT_CHECK(ot_tpu_optimizer_state_shape(t->topt, i, &want));
        if (ot_ckpt_get(ck, "optim", sn, &v) != OT_OK)
            return ot_error(OT_ERR_CORRUPT_DATA, "%s: no optimizer state %s", ot_ckpt_dir(ck), sn);
        if (!ot_shape_equal(&v.shape, &want)) {
            char a[128], b[128];
            ot_shape_format(&v.shape, a, sizeof a);
            ot_shape_format(&want, b, sizeof b);
            return ot_error(OT_ERR_CORRUPT_DATA, "%s: optimizer state %s is %s, this run's is %s",
                            ot_ckpt_dir(ck), sn, a, b);
        }
    }
    ot_clear_error();
    return OT_OK;
}

/* Saves params (replica r) and optimizer state as checkpoint `step` (async). */
static ot_status save_checkpoint(trainer *t, replica *r, int64_t step, double loss) {
    int nstate = ot_tpu_optimizer_state_count(t->topt);
    ot_tensor *host = ot_calloc((size_t)(t->nparams + nstate), sizeof *host);
    ot_ckpt_tensor *ct = ot_calloc((size_t)(t->nparams + nstate), sizeof *ct);
    ot_status s = (host && ct) ? OT_OK : ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint staging");
    int got = 0;
    for (int k = 0; s == OT_OK && k < t->nparams; k++, got++) {
        s = ot_buffer_to_host(r->params[k], &host[k]);
        if (s == OT_OK)
            ct[k] = (ot_ckpt_tensor){ot_model_param_name(t->model, k), host[k].shape, host[k].data};
    }
    for (int i = 0; s == OT_OK && i < nstate; i++, got++) {
        s = ot_tpu_optimizer_get_state(t->topt, r->dev, i, &host[t->nparams + i]);
        if (s == OT_OK)
            ct[t->nparams + i] =
                (ot_ckpt_tensor){ot_tpu_optimizer_state_name(t->topt, i),
                                 host[t->nparams + i].shape, host[t->nparams + i].data};
    }
    if (s == OT_OK) {
        ot_ckpt_shard shards[2] = {{"model", 0, 1, ct, (size_t)t->nparams},
                                   {"optim", 0, 1, ct + t->nparams, (size_t)nstate}};
        char *optjson = state_json(t);
        if (!optjson) s = ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: optimizer record");
        uint64_t rng[1] = {t->o->seed};
        ot_ckpt_metric metrics[1] = {{"loss", isfinite(loss) ? loss : 0.0}};
        char topo[96];
        snprintf(topo, sizeof topo, "%d host devices in %d process(es)", t->nlive * t->psize,
                 t->psize);
        ot_ckpt_save_args a = {
            .step = step,
            .shards = shards,
            .nshards = 2,
            .pod = {t->nlive * t->psize, t->psize, 1,
                    t->coord ? (int64_t)ot_coord_epoch(t->coord) : 0, topo},
            .optimizer_json = optjson,
            .rng_algorithm = "splitmix64",
            .rng_state = rng,
            .rng_words = 1,
            .data_epoch = step / (t->train.n / t->o->batch_size),
            .data_index = step,
            .metrics = metrics,
            .nmetrics = 1,
        };
        if (s == OT_OK) s = ot_ckpt_save_async(t->ckpt, &a);
        if (s == OT_OK) {
            t->rep->checkpoints++;
            t->last_ckpt_step = step;
        }
        ot_free(optjson);
    }
    for (int i = 0; i < got; i++) ot_tensor_release(&host[i]);
    ot_free(host);
    ot_free(ct);
    return s;
}

/* Loads checkpoint ck into replica r (params and optimizer state). */
static ot_status load_checkpoint(trainer *t, const ot_ckpt *ck, replica *r) {
    ot_tensor views[MAX_PARAMS];
    for (int k = 0; k < t->nparams; k++) {
        ot_status s = ot_ckpt_get(ck, "model", ot_model_param_name(t->model, k), &views[k]);
        if (s != OT_OK) return s;
        if (!ot_shape_equal(&views[k].shape, ot_model_param_shape(t->model, k)))
            return ot_error(OT_ERR_SHAPE_MISMATCH, "checkpoint %s: parameter %s has another shape",
                            ot_ckpt_dir(ck), ot_model_param_name(t->model, k));
    }
    ot_status s = put_params(t, r, views);
    int nstate = ot_tpu_optimizer_state_count(t->topt);
    for (int i = 0; s == OT_OK && i < nstate; i++) {
        ot_tensor v;
        s = ot_ckpt_get(ck, "optim", ot_tpu_optimizer_state_name(t->topt, i), &v);
        if (s == OT_OK) s = ot_tpu_optimizer_set_state(t->topt, r->dev, i, &v);
    }
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * The step loop of one replica
 * ------------------------------------------------------------------------------------------- */

typedef struct phase_clock {
    uint64_t w0, c0;
} phase_clock;

static phase_clock ph_start(void) {
    return (phase_clock){ot_now_ns(), thread_cpu_ns()};
}

static void ph_end(trainer *t, replica *r, int ph, phase_clock pc, const char *name, bool trace) {
    uint64_t w1 = ot_now_ns(), c1 = thread_cpu_ns();

    r->cpu[ph] += c1 - pc.c0;
    if (trace && t->trace)
        ot_pod_trace_record(t->trace, r->dev_index,
                            ph == PH_COMPUTE ? OT_PHASE_COMPUTE
                            : ph == PH_COMM  ? OT_PHASE_COMM
                                             : OT_PHASE_OTHER,
                            name, pc.w0, w1);
}

#define INJECTED_STOP OT_ERR_CANCELLED

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
        /* the update: about 16 operations per element and slot; it reads parameter, gradient
         * and slots and writes parameter and slots; the gradients are copied three times (out
         * of the device, into the flat buffer, back onto the device) */
        .replica_flops =
            (double)ot_executable_total_flops(exe) + 16.0 * (double)t->total_elems * (1 + nstate),
        .replica_bytes =
            (double)ot_executable_total_bytes(exe) + pbytes * (3 + 2 * nstate) + 3 * pbytes,
        .leader_flops = t->eval_exe ? (double)ot_executable_total_flops(t->eval_exe) : 0,
        /* the snapshot copies parameters and slots to the host */
        .leader_bytes = (t->eval_exe ? (double)ot_executable_total_bytes(t->eval_exe) : 0) +
                        (t->o->ckpt_dir ? pbytes * (1 + nstate) : 0),
    };
    return ot_train_allreduce_timeout_ns(&c);
}

static ot_status replica_loop(void *ud, int rank, ot_comm *comm) {
    trainer *t = ud;
    replica *r = &t->reps[rank];
    const ot_train_options *o = t->o;
    int n = t->nlive * t->psize;        /* replicas in the pod */
    int g = t->prank * t->nlive + rank; /* this replica's place among them */
    bool leader = g == 0;
    int64_t counts[MAX_DEVICES * 16];
    if (n > MAX_DEVICES * 16) return ot_error(OT_ERR_OUT_OF_RANGE, "train: %d replicas", n);
    ot_status s = ot_batch_split(o->batch_size, n, NULL, counts);
    if (s != OT_OK) return s;
    int64_t off = 0;
    for (int i = 0; i < g; i++) off += counts[i];
    int64_t nb = counts[g];
    ot_executable *exe = NULL;
    for (int i = 0; i < t->ngexe; i++)
        if (t->gexe[i].batch == nb) exe = t->gexe[i].exe;
    if (!exe)
        return ot_error(OT_ERR_INTERNAL, "train: no executable for a batch of %lld", (long long)nb);
    int64_t timeout_ns = allreduce_timeout(t, exe);
    if (comm) {
        if (t->trace) ot_comm_set_trace(comm, t->trace, r->dev_index);
        if (t->topo && ot_topology_size(t->topo) == n) {
            s = ot_comm_set_topology(comm, t->topo);
            if (s != OT_OK) return s;
        }
        ot_comm_set_timeout(comm, timeout_ns);
        if (rank == 0) {
            size_t bytes = ((size_t)t->total_elems + 2) * sizeof(float);
            ot_coll_algo a = t->coll.algo != OT_ALGO_AUTO
                                 ? t->coll.algo
                                 : ot_coll_choose(comm, OT_COLL_ALLREDUCE, bytes);
            tlog(t, "gradient all-reduce: %zu bytes over %d devices, %s%s, deadline %.1f s", bytes,
                 n, ot_coll_algo_name(a),
                 t->coll.algo == OT_ALGO_AUTO ? " (chosen by the cost model)" : "",
                 (double)timeout_ns / 1e9);
        }
    } else if (rank == 0 && t->prank == 0) {
        tlog(t, "gradient all-reduce: %zu bytes over %d devices, deadline %.1f s",
             ((size_t)t->total_elems + 2) * sizeof(float), n, (double)timeout_ns / 1e9);
    }
    if (rank == 0) t->rep->allreduce_timeout_s = (double)timeout_ns / 1e9;

    int64_t F = t->train.features;
    int64_t *idx = ot_malloc((size_t)o->batch_size * sizeof *idx);
    float *xb = ot_malloc((size_t)(nb * F) * sizeof *xb + 4);
    int32_t *yb = ot_malloc((size_t)nb * sizeof *yb + 4);
    float *flat = ot_malloc((size_t)(t->total_elems + 2) * sizeof *flat);
    if (!idx || !xb || !yb || !flat) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: replica %d buffers", rank);
        goto done;
    }
    ot_shape xs, ys;
    ot_shape_make(&xs, OT_F32, 2, (int64_t[]){nb, F});
    ot_shape_make(&ys, OT_S32, 1, (int64_t[]){nb});
    int nouts = 2 + t->nparams;
    r->done = t->seg_start;
    for (int64_t step = t->seg_start; step < t->run_end; step++) {
        if (t->mpi && o->fail_device == g && step + 1 == o->fail_step) {
            /* across processes a device failure is its process dying: Open MPI ends the job and
             * `optitpu launch` restarts it from the newest verified checkpoint */
            fprintf(stderr,
                    "train: device %d (process %d) is killed at step %lld (injected fault)\n", g,
                    t->prank, (long long)step + 1);
            fflush(NULL);
            kill(getpid(), SIGKILL);
        }
        if (!t->mpi && o->fail_device == r->dev_index && step + 1 == o->fail_step &&
            !t->fault_done) {
            /* The injected fault: this device stops dead. Its heartbeats stop; it leaves without
             * telling anyone, as a crashed host would. */
            pthread_mutex_lock(&t->mu);
            t->fault_done = true;
            t->failed_dev = r->dev_index;
            t->stop_ns = ot_now_ns();
            pthread_mutex_unlock(&t->mu);
            atomic_store(&t->alive[r->dev_index], false);
            s = ot_error(INJECTED_STOP, "device %d stopped at step %lld (injected fault)",
                         r->dev_index, (long long)step + 1);
            goto done;
        }
        phase_clock pc = ph_start();
        s = ot_dataset_batch_indices(t->train.n, o->batch_size, o->seed, step, idx);
        if (s != OT_OK) goto done;
        for (int64_t i = 0; i < nb; i++) {
            int64_t j = idx[off + i];
            memcpy(xb + i * F, t->train.x + j * F, (size_t)F * sizeof(float));
            yb[i] = t->train.y[j];
        }
        ot_tensor tx, ty;
        ot_tensor_borrow(&tx, &xs, xb);
        ot_tensor_borrow(&ty, &ys, yb);
        ot_buffer *args[MAX_PARAMS + 2], *outs[MAX_PARAMS + 2];
        memset(outs, 0, sizeof outs);
        for (int k = 0; k < t->nparams; k++) args[k] = r->params[k];
        args[t->nparams] = args[t->nparams + 1] = NULL;
        s = ot_buffer_from_host(r->dev, &tx, &args[t->nparams]);
        if (s == OT_OK) s = ot_buffer_from_host(r->dev, &ty, &args[t->nparams + 1]);
        ph_end(t, r, PH_OTHER, pc, "input", false);
        if (s == OT_OK) {
            pc = ph_start();
            s = ot_device_execute(r->dev, exe, args, t->nparams + 2, outs, nouts, NULL, NULL);
            ph_end(t, r, PH_COMPUTE, pc, "forward+backward", true);
        }
        ot_buffer_free(args[t->nparams]);
        ot_buffer_free(args[t->nparams + 1]);
        if (s != OT_OK) goto done;
        /* gradients (and loss, correct count) into one flat vector, summed over replicas */
        pc = ph_start();
        size_t pos = 0;
        for (int k = 0; k < t->nparams && s == OT_OK; k++) {
            ot_tensor h;
            s = ot_buffer_to_host(outs[2 + k], &h);
            if (s == OT_OK) {
                memcpy(flat + pos, h.data, h.nbytes);
                pos += t->sizes[k];
                ot_tensor_release(&h);
            }
        }
        for (int k = 0; k < 2 && s == OT_OK; k++) {
            ot_tensor h;
            s = ot_buffer_to_host(outs[k], &h);
            if (s == OT_OK) {
                flat[t->total_elems + k] = *(float *)h.data;
                ot_tensor_release(&h);
            }
        }
        for (int k = 0; k < nouts; k++) ot_buffer_free(outs[k]);
        ph_end(t, r, PH_OTHER, pc, "gather", false);
        if (s != OT_OK) goto done;
        pc = ph_start();
        if (t->mpi)
            s = ot_mpi_hier_allreduce(t->mpi, rank, flat, flat, (size_t)t->total_elems + 2, OT_F32,
                                      OT_REDOP_SUM, timeout_ns);
        else
            s = ot_comm_allreduce(comm, flat, flat, (size_t)t->total_elems + 2, OT_F32,
                                  OT_REDOP_SUM, &t->coll);
        ph_end(t, r, PH_COMM, pc, "all-reduce", t->mpi != NULL);
        if (s != OT_OK) goto done;
        pc = ph_start();
        ot_buffer *grads[MAX_PARAMS];
        memset(grads, 0, sizeof grads);
        pos = 0;
        for (int k = 0; k < t->nparams && s == OT_OK; k++) {
            ot_tensor h;
            ot_tensor_borrow(&h, ot_model_param_shape(t->model, k), flat + pos);
            s = ot_buffer_from_host(r->dev, &h, &grads[k]);
            pos += t->sizes[k];
        }
        ph_end(t, r, PH_OTHER, pc, "scatter", false);
        double lr = ot_lr_schedule_lr(t->sched, step);
        if (s == OT_OK) {
            pc = ph_start();
            s = ot_tpu_optimizer_step(t->topt, r->dev, r->params, grads, step + 1, lr, NULL);
            ph_end(t, r, PH_COMPUTE, pc, "optimizer", true);
        }
        for (int k = 0; k < t->nparams; k++) ot_buffer_free(grads[k]);
        if (s != OT_OK) goto done;
        r->done = step + 1;
        if (!leader) continue;
        /* the leader: bookkeeping, evaluation, checkpoints, progress */
        int64_t done_steps = step + 1;
        double loss = flat[t->total_elems];
        double tacc = flat[t->total_elems + 1] / (double)o->batch_size;
        bool evaluated = false;
        if ((o->eval_every > 0 && done_steps % o->eval_every == 0) ||
            done_steps == t->total_steps) {
            pc = ph_start();
            s = evaluate(t, r, &t->last_test_acc, &t->last_test_loss);
            ph_end(t, r, PH_COMPUTE, pc, "evaluate", true);
            if (s != OT_OK) goto done;
            evaluated = true;
        }
        if (t->npoints == t->points_cap) {
            int64_t cap = t->points_cap ? t->points_cap * 2 : 256;
            ot_train_point *np = ot_malloc((size_t)cap * sizeof *np);
            if (!np) {
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: metric history");
                goto done;
            }
            if (t->points) memcpy(np, t->points, (size_t)t->npoints * sizeof *np);
            ot_free(t->points);
            t->points = np;
            t->points_cap = cap;
        }
        t->points[t->npoints++] =
            (ot_train_point){done_steps, loss, tacc, evaluated ? t->last_test_acc : -1.0, lr};
        t->step = done_steps;
        if (o->on_progress) {
            uint64_t now = ot_now_ns();
            /* the run's average so far: per-step rates jump with the host's scheduling */
            double elapsed = (double)(now - t->loop_start_ns) / 1e9;
            int64_t run_done = done_steps - t->rep->start_step;
            double sps = elapsed > 0 ? (double)(run_done * o->batch_size) / elapsed : 0;
            double eta = run_done > 0
                             ? elapsed / (double)run_done * (double)(t->total_steps - done_steps)
                             : 0;
            ot_train_progress p = {
                done_steps, t->total_steps, loss, tacc, t->last_test_acc, lr, sps, eta,
                n,          evaluated};
            o->on_progress(o->ud, &p);
        }
        /* after the progress callback, which may record the step (the CLI's metrics.csv row): a
         * committed checkpoint of a step then implies the step was recorded */
        if (t->ckpt && o->ckpt_every > 0 && done_steps % o->ckpt_every == 0) {
            pc = ph_start();
            s = save_checkpoint(t, r, done_steps, loss);
            ph_end(t, r, PH_CKPT, pc, "checkpoint", true);
            if (s != OT_OK) goto done;
        }
    }
done:
    if (s != OT_OK && s != OT_ERR_PEER_FAILED && s != INJECTED_STOP) {
        /* a real error (a failed save, a device error): the others must not wait for this
         * replica in the next all-reduce until its timeout */
        pthread_mutex_lock(&t->mu);
        if (t->err_status == OT_OK) {
            t->err_status = s;
            snprintf(t->err_msg, sizeof t->err_msg, "device %d: %s", r->dev_index, ot_last_error());
        }
        if (t->world) ot_local_world_fail(t->world, rank);
        pthread_mutex_unlock(&t->mu);
    }
    if (t->trace && comm) ot_comm_set_trace(comm, NULL, 0);
    ot_free(idx);
    ot_free(xb);
    ot_free(yb);
    ot_free(flat);
    return s;
}

/* The run's learning-rate schedule from its name. */
static ot_status make_schedule(trainer *t) {
    const ot_train_options *o = t->o;
    const char *n = o->schedule ? o->schedule : "warmup-cosine";
    int64_t total = t->total_steps;
    if (!strcmp(n, "constant")) return ot_lr_schedule_constant(o->lr, &t->sched);
    if (!strcmp(n, "cosine")) return ot_lr_schedule_cosine(o->lr, 0.0, total, 1.0, &t->sched);
    if (!strcmp(n, "warmup-cosine")) {
        int64_t w = o->warmup_steps < total ? o->warmup_steps : total - 1;
        return ot_lr_schedule_warmup_cosine(0.0, o->lr, w, total, 0.0, 1.0, &t->sched);
    }
    if (!strcmp(n, "step"))
        return ot_lr_schedule_step(o->lr, total / 3 > 0 ? total / 3 : 1, 0.1, &t->sched);
    return ot_error(OT_ERR_INVALID_ARGUMENT,
                    "train: unknown schedule '%s' (constant, cosine, warmup-cosine, step)", n);
}

/* ---------------------------------------------------------------------------------------------
 * Driver
 * ------------------------------------------------------------------------------------------- */

static ot_status prepare_executables(trainer *t) {
    int n = t->nlive * t->psize;
    int64_t counts[MAX_DEVICES * 16];
    if (n > MAX_DEVICES * 16) return ot_error(OT_ERR_OUT_OF_RANGE, "train: %d replicas", n);
    ot_status s = ot_batch_split(t->o->batch_size, n, NULL, counts);
    for (int r = 0; s == OT_OK && r < t->nlive; r++) {
        int g = t->prank * t->nlive + r;
        if (counts[g] < 1)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "train: batch %lld leaves replica %d empty on %d devices",
                            (long long)t->o->batch_size, g, n);
        ot_executable *e;
        s = compile_grad(t, counts[g], &e);
    }
    return s;
}

/* Runs steps [t->step, end) on the current members. */
typedef struct mpi_thread {
    trainer *t;
    int rank;
    ot_status st;
} mpi_thread;

static void *mpi_thread_main(void *arg) {
    mpi_thread *m = arg;
    m->st = replica_loop(m->t, m->rank, NULL);
    return NULL;
}

/* Across processes: one thread per local device; the all-reduce is ot_mpi_hier_allreduce. */
static ot_status run_segment_mpi(trainer *t, ot_status *st) {
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

static ot_status run_segment(trainer *t, int64_t end, ot_status *st) {
    t->run_end = end;
    t->seg_start = t->step;
    if (t->mpi) return run_segment_mpi(t, st);
    ot_local_world *w = NULL;

    ot_status s = ot_local_world_create(t->nlive, &w);
    if (s != OT_OK) return s;
    pthread_mutex_lock(&t->mu);
    t->world = w;
    for (int d = 0; d < MAX_DEVICES; d++) t->world_rank_of_dev[d] = -1;
    for (int r = 0; r < t->nlive; r++) t->world_rank_of_dev[t->reps[r].dev_index] = r;
    pthread_mutex_unlock(&t->mu);
    s = ot_local_world_run(w, replica_loop, t, st);
    pthread_mutex_lock(&t->mu);
    t->world = NULL;
    pthread_mutex_unlock(&t->mu);
    ot_local_world_free(w);
    return s;
}

static ot_status restore_latest(trainer *t, int64_t *step, bool *found) {
    *found = false;
    ot_ckpt_options co = ot_ckpt_options_default();
    ot_ckpt *ck = NULL;
    ot_ckpt_restore_report rr;
    memset(&rr, 0, sizeof rr);
    ot_status s = ot_ckpt_resume(t->o->ckpt_dir, &co, accept_ckpt, t, &ck, &rr);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", s == OT_OK ? "" : ot_last_error());
    for (size_t i = 0; i < rr.nskipped; i++)
        tlog(t, "checkpoint step %lld skipped: %s%s%s", (long long)rr.skipped[i].step,
             rr.skipped[i].reason ? rr.skipped[i].reason : "",
             rr.skipped[i].moved_to ? "; set aside as " : "",
             rr.skipped[i].moved_to ? rr.skipped[i].moved_to : "");
    ot_ckpt_restore_report_clear(&rr);
    if (s == OT_ERR_NOT_FOUND) {
        ot_clear_error();
        return OT_OK;
    }
    if (s != OT_OK) s = ot_error(s, "%s", msg);
    if (s != OT_OK) return s;
    for (int r = 0; s == OT_OK && r < t->nlive; r++) s = load_checkpoint(t, ck, &t->reps[r]);
    if (s == OT_OK) {
        *step = ot_ckpt_step(ck);
        *found = true;
    }
    ot_ckpt_free(ck);
    return s;
}

/* Across processes every process reaches the same verdict: a failure anywhere stops all. */
static ot_status mpi_agree(trainer *t, ot_status s, const char *what) {
    if (!t->mpi) return s;
    int32_t bad = s != OT_OK, any = 0;
    ot_status c = ot_comm_allreduce(ot_mpi_comm(t->mpi), &bad, &any, 1, OT_S32, OT_REDOP_MAX, NULL);
    if (s != OT_OK) return s;
    if (c != OT_OK) return c;
    if (any)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "train: another process failed during %s",
                        what);
    return OT_OK;
}

/* Across processes, process 0 restored the checkpoint: it sends the step, the parameters and
 * the optimizer state to every other process, whose local replicas take them. */
static ot_status mpi_share_restore(trainer *t, int64_t *step, bool *found) {
    ot_comm *c = ot_mpi_comm(t->mpi);
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

/* Without --resume: a directory holding checkpoints is refused, or emptied with --fresh. */

static ot_status prepare_ckpt_dir(trainer *t) {
    ot_ckpt_entry *e = NULL;
    size_t n = 0;
    ot_status s = ot_ckpt_list(t->o->ckpt_dir, &e, &n);
    if (s == OT_ERR_NOT_FOUND) {
        ot_clear_error();
        return OT_OK;
    }
    if (s != OT_OK) return s;
    if (n > 0 && !t->o->fresh) {
        s = ot_error(OT_ERR_ALREADY_EXISTS,
                     "train: %s already holds %zu checkpoint(s) (newest step %lld): pass --resume "
                     "to continue from them or --fresh to delete them",
                     t->o->ckpt_dir, n, (long long)e[n - 1].step);
    }
    /* whatever each entry is (a set-aside step may be a file or a symlink): removed as such */
    for (size_t i = 0; s == OT_OK && i < n; i++) s = ot_ft_rmtree(e[i].path);
    if (s == OT_OK && n > 0)
        tlog(t, "--fresh: deleted %zu old checkpoint(s) from %s", n, t->o->ckpt_dir);
    ot_ckpt_entries_free(e, n);
    return s;
}

static ot_status init_params(trainer *t) {
    ot_tensor init[MAX_PARAMS];
    ot_status s = ot_model_init(t->model, t->o->seed, init);
    if (s != OT_OK) return s;
    for (int r = 0; s == OT_OK && r < t->nlive; r++) s = put_params(t, &t->reps[r], init);
    for (int k = 0; k < t->nparams; k++) ot_tensor_release(&init[k]);
    return s;
}

/* Every optimizer state tensor of replica src copied into replica dst. */
static ot_status copy_optimizer_state(trainer *t, const replica *src, const replica *dst) {
    ot_status s = OT_OK;
    int ns = ot_tpu_optimizer_state_count(t->topt);
    for (int i = 0; s == OT_OK && i < ns; i++) {
        ot_tensor v;
        s = ot_tpu_optimizer_get_state(t->topt, src->dev, i, &v);
        if (s == OT_OK) {
            s = ot_tpu_optimizer_set_state(t->topt, dst->dev, i, &v);
            ot_tensor_release(&v);
        }
    }
    return s;
}

/* After a failure the survivors normally all hold the state after t->step steps: the failed
 * device never contributed to the next all-reduce. A device fenced while alive may have
 * contributed to it, so some survivors may have finished one more step; that step's all-reduce
 * was complete, so its result is valid: the others take the state of the most advanced one. */
static ot_status sync_survivors(trainer *t) {
    int ahead = -1;
    int64_t lo = INT64_MAX, hi = -1;
    for (int r = 0; r < t->nlive; r++) {
        if (t->reps[r].dev_index == t->failed_dev) continue;
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
        if (d == src || d->dev_index == t->failed_dev || d->done == hi) continue;
        s = put_params(t, d, host);
        if (s == OT_OK) s = copy_optimizer_state(t, src, d);
        d->done = hi;
    }
    for (int k = 0; k < got; k++) ot_tensor_release(&host[k]);
    if (s == OT_OK) {
        tlog(t, "survivors at steps %lld..%lld after the failure take the state of step %lld",
             (long long)lo, (long long)hi, (long long)hi);
        t->step = hi;
    }
    return s;
}

/* After a failure: rebuild the pod per the recovery policy. */
static ot_status recover(trainer *t) {
    const ot_train_options *o = t->o;
    uint64_t t0 = ot_now_ns();
    int failed = t->failed_dev;
    int pos = -1;
    for (int r = 0; r < t->nlive; r++)
        if (t->reps[r].dev_index == failed) pos = r;
    if (pos < 0)
        return ot_error(OT_ERR_INTERNAL, "train: failed device %d is not a member", failed);
    t->rep->failures++;
    if (t->detect_ns && t->stop_ns) t->rep->detect_s = (double)(t->detect_ns - t->stop_ns) / 1e9;
    ot_coord_remove(t->coord, t->coord_id[failed]);
    int spare = -1;
    if (o->recovery == OT_RECOVER_RESTORE)
        for (int d = 0; d < t->ndev_total; d++)
            if (!t->used_dev[d]) {
                spare = d;
                break;
            }
    ot_status s = OT_OK;
    if (o->recovery == OT_RECOVER_RESTORE && spare >= 0) {
        /* the spare takes the failed replica's place; everyone rolls back to the checkpoint */
        replica *r = &t->reps[pos];
        free_replica(r);
        memset(r, 0, sizeof *r);
        r->dev_index = spare;
        r->dev = ot_backend_device(t->backend, spare);
        t->used_dev[spare] = true;
        s = ot_tpu_optimizer_add_replica(t->topt, r->dev);
        if (s != OT_OK) return s;
        if (t->ckpt) {
            ot_status w = ot_ckpt_wait(t->ckpt, NULL);
            if (w != OT_OK)
                tlog(t, "warning: the checkpoint in flight failed: %s", ot_last_error());
        }
        int64_t step = 0;
        bool found = false;
        if (o->ckpt_dir) s = restore_latest(t, &step, &found);
        if (s != OT_OK) return s;
        if (!found) {
            tlog(t, "recovery: no checkpoint to restore; restarting from step 0 on the new pod");
            s = init_params(t);
            /* every replica's state goes back to the initial values held by the spare's
             * brand-new replica, which never stepped */
            for (int r2 = 0; s == OT_OK && r2 < t->nlive; r2++)
                if (&t->reps[r2] != r) s = copy_optimizer_state(t, r, &t->reps[r2]);
            step = 0;
        }
        if (s != OT_OK) return s;
        tlog(t,
             "recovery (restore): device %d replaces failed device %d; %d devices roll back from "
             "step %lld to checkpointed step %lld",
             spare, failed, t->nlive, (long long)t->step, (long long)step);
        t->step = step;
        /* the metric history after the restored step is replaced by the rerun */
        while (t->npoints > 0 && t->points[t->npoints - 1].step > step) t->npoints--;
    } else {
        if (o->recovery == OT_RECOVER_RESTORE)
            tlog(t, "recovery: no spare device left; shrinking instead");
        free_replica(&t->reps[pos]);
        for (int r = pos; r + 1 < t->nlive; r++) t->reps[r] = t->reps[r + 1];
        t->nlive--;
        memset(&t->reps[t->nlive], 0, sizeof t->reps[t->nlive]);
        if (t->nlive < 1) return ot_error(OT_ERR_PEER_FAILED, "train: no device left");
        tlog(t,
             "recovery (shrink): new pod of %d devices (epoch %llu), ring over the survivors, "
             "batch %lld re-split; step %lld is redone from the survivors' identical state",
             t->nlive, (unsigned long long)ot_coord_epoch(t->coord), (long long)o->batch_size,
             (long long)t->step + 1);
    }
    s = prepare_executables(t);
    t->rep->recover_s = (double)(ot_now_ns() - (t->detect_ns ? t->detect_ns : t0)) / 1e9;
    t->failed_dev = -1;
    t->stop_ns = t->detect_ns = 0;
    return s;
}

static ot_status load_data(trainer *t) {
    const ot_train_options *o = t->o;
    if (!o->dataset || !strcmp(o->dataset, "digits")) return ot_dataset_digits(&t->train, &t->test);
    if (!strcmp(o->dataset, "synthetic")) {
        ot_dataset all;
        int64_t n = o->synthetic_n > 0 ? o->synthetic_n : 65536;
        ot_status s =
            ot_dataset_synthetic(n, o->model.inputs, o->model.classes, 1.0, o->seed, &all);
        if (s != OT_OK) return s;
        int64_t ntest = n / 5, ntrain = n - ntest;
        t->train = all;
        t->train.n = ntrain;
        t->test.n = ntest;
        t->test.features = all.features;
        t->test.classes = all.classes;
        t->test.x = ot_malloc((size_t)(ntest * all.features) * sizeof(float) + 4);
        t->test.y = ot_malloc((size_t)ntest * sizeof(int32_t) + 4);
        if (!t->test.x || !t->test.y) return ot_error(OT_ERR_OUT_OF_MEMORY, "synthetic test split");
        memcpy(t->test.x, all.x + ntrain * all.features,
               (size_t)(ntest * all.features) * sizeof(float));
        memcpy(t->test.y, all.y + ntrain, (size_t)ntest * sizeof(int32_t));
        return OT_OK;
    }
    return ot_error(OT_ERR_INVALID_ARGUMENT, "train: unknown data set '%s' (digits, synthetic)",
                    o->dataset);
}

static ot_status validate(const ot_train_options *o) {
    if (o->devices < 1 || o->devices > MAX_DEVICES - 1)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "train: devices must be 1..%d, got %d",
                        MAX_DEVICES - 1, o->devices);
    if (o->batch_size < o->devices)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: batch size %lld is smaller than the %d devices",
                        (long long)o->batch_size, o->devices);
    if (!(o->lr > 0) || !isfinite(o->lr))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "train: learning rate must be > 0, got %g", o->lr);
    if (o->steps < 1 && o->epochs < 1)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "train: steps must be >= 1");
    if (o->fail_device >= 0 && ((!o->mpi && o->fail_device >= o->devices) || o->fail_step < 1))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --fail-device D@STEP needs 0 <= D < %d and STEP >= 1 (got %d@%lld)",
                        o->devices, o->fail_device, (long long)o->fail_step);
    if (o->fail_device >= 0 && !o->mpi && o->devices < 2 && o->recovery == OT_RECOVER_SHRINK)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: a one-device pod cannot shrink after a failure");
    if (o->resume && !o->ckpt_dir)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "train: --resume needs --ckpt-dir");
    return OT_OK;
}

void ot_train_report_clear(ot_train_report *r) {
    if (!r) return;
    for (int k = 0; k < r->nparams; k++) ot_tensor_release(&r->params[k]);
    ot_free(r->params);
    ot_free(r->points);
    ot_free(r->log);
    memset(r, 0, sizeof *r);
}

ot_status ot_train(const ot_train_options *o, ot_train_report *out) {
    if (!o || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "train: NULL argument");
    memset(out, 0, sizeof *out);
    ot_status s = validate(o);
    if (s != OT_OK) return s;
    trainer *t = ot_calloc(1, sizeof *t);
    if (!t) return ot_error(OT_ERR_OUT_OF_MEMORY, "train");
    t->o = o;
    t->rep = out;
    t->failed_dev = -1;
    t->last_test_acc = -1;
    t->psize = 1;
    pthread_mutex_init(&t->mu, NULL);
    if (o->mpi) {
        /* across processes: o->devices local devices in each of P processes */
        t->mpi = o->mpi;
        t->prank = ot_mpi_rank(o->mpi);
        t->psize = ot_mpi_size(o->mpi);
        if (ot_mpi_local_devices(o->mpi) != o->devices)
            s = ot_error(OT_ERR_INVALID_ARGUMENT,
                         "train: the MPI job has %d local devices per process, the options %d",
                         ot_mpi_local_devices(o->mpi), o->devices);
        else if (o->batch_size < (int64_t)o->devices * t->psize)
            s = ot_error(OT_ERR_INVALID_ARGUMENT,
                         "train: batch size %lld is smaller than the %d devices",
                         (long long)o->batch_size, o->devices * t->psize);
        else if (o->fail_device >= o->devices * t->psize)
            s = ot_error(OT_ERR_INVALID_ARGUMENT, "train: --fail-device %d: the pod has %d devices",
                         o->fail_device, o->devices * t->psize);
        else if (o->recovery == OT_RECOVER_RESTORE && o->fail_device >= 0)
            s = ot_error(OT_ERR_INVALID_ARGUMENT,
                         "train: across processes a failure restarts the job from its checkpoint "
                         "(optitpu launch); --recovery applies to one process");
    }

    if (s == OT_OK) s = load_data(t);
    if (s == OT_OK && t->train.n < o->batch_size)
        s = ot_error(OT_ERR_INVALID_ARGUMENT,
                     "train: batch size %lld exceeds the %lld training samples",
                     (long long)o->batch_size, (long long)t->train.n);
    if (s == OT_OK) {
        ot_model_config mc = o->model;
        mc.inputs = t->train.features;
        mc.classes = t->train.classes;
        s = ot_model_create(&mc, &t->model);
    }
    if (s == OT_OK) {
        t->nparams = ot_model_param_count(t->model);
        for (int k = 0; k < t->nparams; k++) {
            t->sizes[k] = (size_t)ot_shape_numel_unchecked(ot_model_param_shape(t->model, k));
            t->total_elems += (int64_t)t->sizes[k];
        }
        int64_t per_epoch = t->train.n / o->batch_size;
        t->total_steps = o->epochs > 0 ? o->epochs * per_epoch : o->steps;
    }
    if (s == OT_OK) s = make_schedule(t);
    t->coll = ot_coll_options_default();
    if (s == OT_OK && o->allreduce && o->allreduce[0]) {
        int a = ot_coll_algo_from_name(o->allreduce);
        if (a < 0)
            s = ot_error(OT_ERR_INVALID_ARGUMENT,
                         "train: unknown all-reduce algorithm '%s' (auto, ring, halving_doubling, "
                         "tree, hier2d, direct)",
                         o->allreduce);
        else
            t->coll.algo = (ot_coll_algo)a;
    }
    /* devices: the pod, plus one spare for the restore policy */
    t->nlive = o->devices;
    t->ndev_total = o->devices + (o->recovery == OT_RECOVER_RESTORE && !t->mpi ? 1 : 0);
    if (s == OT_OK) {
        ot_backend_options bo = ot_backend_options_default();
        bo.devices = t->ndev_total;
        s = ot_backend_create(&bo, &t->backend);
    }
    /* an explicit topology must fit the pod; without one, 8 devices are a 2x4 torus and other
     * counts have none (the collectives' own rings) */
    bool topo_explicit = o->topology && o->topology[0];
    const char *topo_name = topo_explicit ? o->topology : o->devices == 8 ? "torus-2x4" : NULL;
    if (s == OT_OK && topo_explicit && t->mpi)
        s = ot_error(OT_ERR_INVALID_ARGUMENT,
                     "train: a topology (%s) applies to one process; across processes the pod is "
                     "every process's devices",
                     o->topology);
    if (s == OT_OK && topo_name && !t->mpi) {
        s = ot_topology_preset(topo_name, &t->topo);
        if (s == OT_OK && ot_topology_size(t->topo) != o->devices) {
            s = ot_error(OT_ERR_INVALID_ARGUMENT,
                         "train: topology %s has %d devices, the pod %d (--devices %d)", topo_name,
                         ot_topology_size(t->topo), o->devices, o->devices);
            ot_topology_free(t->topo);
            t->topo = NULL;
        }
    }
    if (s == OT_OK) {
        s = ot_optimizer_new(o->optimizer ? o->optimizer : "adam", &t->optim);
        if (s == OT_OK && o->weight_decay > 0)
            s = ot_optimizer_set(t->optim, "weight_decay", o->weight_decay);
    }
    if (s == OT_OK) {
        ot_shape shapes[MAX_PARAMS];
        for (int k = 0; k < t->nparams; k++) shapes[k] = *ot_model_param_shape(t->model, k);
        ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
        s = ot_tpu_optimizer_create(t->optim, shapes, t->nparams, &to, &t->topt);
    }
    if (s == OT_OK) { /* memory admission (runtime.h) before the replicas take their memory */
        int64_t e = t->total_elems * (int64_t)sizeof(float);
        ot_mem_item need[] = {{"parameters", e, true},
                              {"gradients", e, true},
                              {"optimizer state", e * ot_optimizer_state_count(t->optim), true},
                              {"all-reduce buffer", e, true}};
        s = ot_mem_admit("train", need, 4, t->ndev_total, 0, NULL);
    }
    for (int r = 0; s == OT_OK && r < t->nlive; r++) {
        t->reps[r].dev_index = r;
        t->reps[r].dev = ot_backend_device(t->backend, r);
        t->used_dev[r] = true;
        s = ot_tpu_optimizer_add_replica(t->topt, t->reps[r].dev);
    }
    if (s == OT_OK) s = describe_state(t);
    if (s == OT_OK) s = prepare_executables(t);
    if (s == OT_OK) s = compile_eval(t);
    if (s == OT_OK) s = init_params(t);
    s = mpi_agree(t, s, "set-up");
    if (s == OT_OK && o->ckpt_dir && t->mpi && o->resume) {
        /* process 0 restores the newest verified checkpoint and sends it to the others */
        int64_t step = 0;
        bool found = false;
        if (t->prank == 0) s = restore_latest(t, &step, &found);
        s = mpi_agree(t, s, "restore");
        if (s == OT_OK) s = mpi_share_restore(t, &step, &found);
        if (s == OT_OK && found) {
            t->step = step;
            t->last_ckpt_step = step;
            if (t->prank == 0)
                tlog(t, "resumed from the checkpoint of step %lld in %s on %d processes",
                     (long long)step, o->ckpt_dir, t->psize);
        }
    }
    if (s == OT_OK && o->ckpt_dir && t->mpi && t->prank == 0) {
        /* only process 0 writes checkpoints */
        ot_ckpt_options co = ot_ckpt_options_default();
        co.retention.keep_last = o->keep > 0 ? o->keep : 0;
        if (!o->resume) s = prepare_ckpt_dir(t);
        if (s == OT_OK) s = ot_ckpt_open(o->ckpt_dir, &co, &t->ckpt);
    }
    if (t->mpi) s = mpi_agree(t, s, "checkpoint set-up");
    if (s == OT_OK && o->ckpt_dir && !t->mpi) {
        ot_ckpt_options co = ot_ckpt_options_default();
        co.retention.keep_last = o->keep > 0 ? o->keep : 0;
        if (o->resume) {
            int64_t step = 0;
            bool found = false;
            s = restore_latest(t, &step, &found);
            if (s == OT_OK && found) {
                t->step = step;
                t->last_ckpt_step = step;
                tlog(t, "resumed from the checkpoint of step %lld in %s", (long long)step,
                     o->ckpt_dir);
            } else if (s == OT_OK) {
                tlog(t, "resume: no checkpoint in %s; starting from step 0", o->ckpt_dir);
            }
        } else
            s = prepare_ckpt_dir(t);
        if (s == OT_OK) s = ot_ckpt_open(o->ckpt_dir, &co, &t->ckpt);
    }
    if (s == OT_OK && o->trace_path) s = ot_pod_trace_create(&t->trace);
    /* coordinator with a heartbeat agent (across processes, process liveness is MPI's and
     * optitpu launch's) */
    if (s == OT_OK && !t->mpi) {
        ot_coord_options co = ot_coord_options_default();
        co.phi.acceptable_pause_ns = 200ull * 1000000ull;
        co.phi.first_interval_ns = HEARTBEAT_NS;
        s = ot_coord_create(&co, &t->coord);
        for (int d = 0; s == OT_OK && d < t->ndev_total; d++) {
            char name[32];
            snprintf(name, sizeof name, "host:%d", d);
            s = ot_coord_register(t->coord, name, &t->coord_id[d]);
            atomic_store(&t->alive[d], true);
            if (s == OT_OK) ot_coord_heartbeat(t->coord, t->coord_id[d]);
        }
        int sub;
        if (s == OT_OK) s = ot_coord_subscribe(t->coord, OT_EVENT_FAILED, on_coord_event, t, &sub);
        if (s == OT_OK) {
            if (pthread_create(&t->agent, NULL, agent_main, t) != 0)
                s = ot_error(OT_ERR_INTERNAL, "train: cannot start the heartbeat agent");
            else
                t->agent_running = true;
        }
    }
    out->start_step = t->step;
    out->devices_start = t->nlive * t->psize;
    if (s == OT_OK)
        tlog(t,
             "training %s (%lld parameters) on %s: %lld train / %lld test samples, %d devices%s, "
             "batch %lld, %s lr %g (%s), %lld steps",
             ot_model_kind_name(o->model.kind), (long long)t->total_elems,
             o->dataset ? o->dataset : "digits", (long long)t->train.n, (long long)t->test.n,
             t->nlive * t->psize, t->mpi ? " in several processes" : "", (long long)o->batch_size,
             o->optimizer ? o->optimizer : "adam", o->lr, ot_lr_schedule_kind(t->sched),
             (long long)t->total_steps);

    /* the loop, in segments between failures */
    t->loop_start_ns = ot_now_ns();
    int64_t end = t->total_steps;
    if (o->stop_after > 0 && t->step + o->stop_after < end) {
        end = t->step + o->stop_after;
        out->stopped = true;
    }
    while (s == OT_OK && t->step < end) {
        ot_status st[MAX_DEVICES];
        ot_status rs = run_segment(t, end, st);
        if (rs == OT_OK) break;
        /* A segment ends early only because the coordinator declared a device failed (the
         * injected stop, or a device fenced after missing its heartbeats): every other status
         * is a real error. */
        bool other = false;
        for (int r = 0; r < t->nlive; r++)
            if (st[r] != OT_OK && st[r] != OT_ERR_PEER_FAILED &&
                !(st[r] == INJECTED_STOP && t->reps[r].dev_index == t->failed_dev))
                other = true;
        if (t->failed_dev < 0 || other) {
            s = t->err_status != OT_OK ? ot_error(t->err_status, "%s", t->err_msg) : rs;
            break;
        }
        if (t->stop_ns)
            tlog(t, "step %lld: device %d had stopped; its heartbeats stopped",
                 (long long)t->step + 1, t->failed_dev);
        s = sync_survivors(t);
        if (s == OT_OK) s = recover(t);
    }
    uint64_t loop_end = ot_now_ns();
    s = mpi_agree(t, s, "training");

    if (s == OT_OK && t->ckpt && o->final_ckpt && !out->stopped && t->step > t->last_ckpt_step) {
        /* the end of the run is saved too, whatever ckpt_every says (a stop is a crash: no) */
        phase_clock pc = ph_start();
        s = save_checkpoint(t, &t->reps[0], t->step,
                            t->npoints ? t->points[t->npoints - 1].loss : NAN);
        ph_end(t, &t->reps[0], PH_CKPT, pc, "checkpoint", true);
        if (s == OT_OK)
            tlog(t, "final checkpoint of step %lld in %s", (long long)t->step, o->ckpt_dir);
    }
    if (s == OT_OK && t->ckpt) s = ot_ckpt_wait(t->ckpt, NULL);
    if (t->ckpt) {
        ot_status cs = ot_ckpt_close(t->ckpt);
        if (s == OT_OK) s = cs;
        t->ckpt = NULL;
    }
    if (s == OT_OK && !out->stopped) {
        s = evaluate(t, &t->reps[0], &t->last_test_acc, &t->last_test_loss);
    }
    if (t->agent_running) {
        atomic_store(&t->agent_stop, true);
        pthread_join(t->agent, NULL);
    }
    if (s == OT_OK) {
        replica *lead = &t->reps[0];
        out->final_step = t->step;
        out->steps_run = t->step - out->start_step;
        out->test_accuracy = t->last_test_acc;
        /* no evaluation (a stopped run with eval_every 0): no test loss either */
        out->test_loss = t->last_test_acc >= 0 ? t->last_test_loss : NAN;
        out->final_loss = t->npoints ? t->points[t->npoints - 1].loss : NAN;
        out->wall_s = (double)(loop_end - t->loop_start_ns) / 1e9;
        out->samples_per_s =
            out->wall_s > 0 ? (double)(out->steps_run * o->batch_size) / out->wall_s : 0;
        out->devices_end = t->nlive * t->psize;
        out->param_elements = t->total_elems;
        /* phase shares: CPU time summed over the replicas (on a host with fewer cores than
         * devices, wall time spent waiting for the others' compute is not overhead) */
        double cpu[4] = {0, 0, 0, 0};
        for (int r = 0; r < t->nlive; r++)
            for (int p = 0; p < 4; p++) cpu[p] += (double)t->reps[r].cpu[p] / 1e9;
        out->compute_s = cpu[PH_COMPUTE];
        out->comm_s = cpu[PH_COMM];
        out->ckpt_s = cpu[PH_CKPT];
        out->other_s = cpu[PH_OTHER];
        double tot = cpu[0] + cpu[1] + cpu[2] + cpu[3];
        out->outside_compute_share = tot > 0 ? (tot - cpu[PH_COMPUTE]) / tot : 0;
        s = params_sha256(t, lead, out->params_sha256);
        for (int r = 1; s == OT_OK && r < t->nlive; r++) {
            uint8_t h[32];
            s = params_sha256(t, &t->reps[r], h);
            if (s == OT_OK && memcmp(h, out->params_sha256, 32) != 0)
                s = ot_error(OT_ERR_INTERNAL,
                             "train: replica %d's parameters differ from replica 0's", r);
        }
        if (t->mpi) {
            /* and every process's replicas hold the same parameters as process 0's */
            s = mpi_agree(t, s, "the final check");
            uint8_t *all = s == OT_OK ? ot_malloc((size_t)t->psize * 32) : NULL;
            if (s == OT_OK && !all) s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: parameter hashes");
            if (s == OT_OK)
                s = ot_comm_allgather(ot_mpi_comm(t->mpi), out->params_sha256, all, 32, OT_U8,
                                      NULL);
            for (int p = 1; s == OT_OK && p < t->psize; p++)
                if (memcmp(all + 32 * p, all, 32) != 0)
                    s = ot_error(OT_ERR_INTERNAL,
                                 "train: process %d's parameters differ from process 0's", p);
            ot_free(all);
        }
        if (s == OT_OK) {
            out->params = ot_calloc((size_t)t->nparams, sizeof *out->params);
            if (!out->params) s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: final parameters");
            for (int k = 0; s == OT_OK && k < t->nparams; k++) {
                s = ot_buffer_to_host(lead->params[k], &out->params[k]);
                if (s == OT_OK) out->nparams = k + 1;
            }
        }
        out->points = t->points;
        out->npoints = t->npoints;
        t->points = NULL;
        if (o->trace_path && t->trace) {
            /* the step breakdown of every device through the runtime's profiler */
            ot_profile *pf = NULL;
            s = ot_profile_create(&pf);
            if (s == OT_OK) s = ot_profile_add_pod_trace(pf, t->trace);
            if (s == OT_OK) s = ot_profile_write_chrome_trace(pf, o->trace_path);
            ot_profile_free(pf);
        }
    }

    out->log = t->log;
    t->log = NULL;
    /* teardown */
    for (int r = 0; r < MAX_DEVICES; r++) free_replica(&t->reps[r]);
    ot_tpu_optimizer_free(t->topt);
    ot_lr_schedule_free(t->sched);
    ot_optimizer_free(t->optim);
    for (int i = 0; i < t->ngexe; i++) ot_executable_free(t->gexe[i].exe);
    ot_executable_free(t->eval_exe);
    ot_backend_free(t->backend);
    ot_coord_free(t->coord);
    ot_pod_trace_free(t->trace);
    ot_topology_free(t->topo);
    ot_model_free(t->model);
    ot_dataset_free(&t->train);
    ot_dataset_free(&t->test);
    ot_free(t->points);
    pthread_mutex_destroy(&t->mu);
    ot_free(t);
    if (s != OT_OK) {
        char *log = out->log;
        out->log = NULL;
        ot_train_report_clear(out);
        out->log = log;
    }
    return s;
}
