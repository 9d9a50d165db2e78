/* The data-parallel training driver (include/optitpu/train.h): one driver for every pod. ot_train
 * sets up (the pod, data and model, devices and executables, checkpoints), runs the step loop in
 * segments between failures (step.c: load batch, forward/backward, gradient all-reduce, optimizer
 * update, metrics, checkpoint), survives a failure the pod's way, and finishes (final checkpoint,
 * evaluation, the replicas' parameters checked identical, the report). What differs between one
 * process (pod_local.c) and an MPI job (pod_mpi.c) is behind the pod's vtable (driver.h). */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optitpu/autodiff.h"
#include "optitpu/compiler.h"
#include "train/driver.h"

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
    o.grad_accum = 1;
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
    o.migrate_device = -1;
    o.migrate_step = -1;
    o.int8_min_size = -1;
    o.recovery = OT_RECOVER_SHRINK;
    o.eval_every = 50;
    return o;
}

void train_log(trainer *t, const char *fmt, ...) {
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

ot_status train_first_error(trainer *t, ot_status rs) {
    return t->err_status != OT_OK ? ot_error(t->err_status, "%s", t->err_msg) : rs;
}

/* An error anywhere in the pod is an error everywhere (collective across processes). */
static ot_status pod_agree(trainer *t, ot_status s, const char *what) {
    return t->pod_vt->agree ? t->pod_vt->agree(t, s, what) : s;
}

/* ---------------------------------------------------------------------------------------------
 * Executables
 * ------------------------------------------------------------------------------------------- */

/* Compiles m with the default options, through the run's compilation cache when it has one. */
static ot_status compile_module(trainer *t, const ot_module *m, ot_executable **out) {
    ot_compile_options co = ot_compile_options_default();
    bool hit = false;
    uint64_t t0 = ot_now_ns();
    ot_status s = ot_compile_cached(m, &co, t->o->compile_cache, out, &hit);
    t->rep->compile_s += (double)(ot_now_ns() - t0) / 1e9;
    if (s == OT_OK && t->o->compile_cache)
        ++*(hit ? &t->rep->compile_cache_hits : &t->rep->compile_cache_misses);
    return s;
}

static ot_status compile_grad(trainer *t, int64_t batch, ot_executable **out) {
    for (int i = 0; i < t->ngexe; i++)
        if (t->gexe[i].batch == batch) {
            *out = t->gexe[i].exe;
            return OT_OK;
        }
    if (t->ngexe == MAX_EXES) return ot_error(OT_ERR_OUT_OF_RANGE, "train: too many batch shapes");
    ot_module *loss = NULL, *g = NULL;
    ot_status s = ot_model_build_loss(t->model, batch, 1.0 / (double)t->step_batch, &loss);
    int64_t wrt[MAX_PARAMS];
    for (int k = 0; k < t->nparams; k++) wrt[k] = k;
    ot_grad_options go = ot_grad_options_default();
    go.loss_index = 0;
    if (s == OT_OK) s = ot_grad(loss, wrt, t->nparams, &go, &g);
    ot_executable *exe = NULL;
    if (s == OT_OK) s = compile_module(t, g, &exe);
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
    if (s == OT_OK) s = compile_module(t, loss, &t->eval_exe);
    ot_module_free(loss);
    return s;
}

ot_status train_prepare_executables(trainer *t) {
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

/* --grad-compress: none | bf16 | int8 | topk:F. */
static ot_status parse_compress(const char *v, ot_grad_compress *c, double *frac) {
    *c = OT_COMPRESS_NONE;
    *frac = 0.01;
    if (!v || !strcmp(v, "none")) return OT_OK;
    if (!strcmp(v, "bf16")) {
        *c = OT_COMPRESS_BF16;
        return OT_OK;
    }
    if (!strcmp(v, "int8")) {
        *c = OT_COMPRESS_INT8;
        return OT_OK;
    }
    if (!strncmp(v, "topk:", 5)) {
        char *end = NULL;
        double f = strtod(v + 5, &end);
        if (end != v + 5 && *end == 0 && f > 0 && f <= 1) {
            *c = OT_COMPRESS_TOPK;
            *frac = f;
            return OT_OK;
        }
    }
    return ot_error(OT_ERR_INVALID_ARGUMENT,
                    "train: unknown gradient compression '%s' (none, bf16, int8, topk:F with 0 < "
                    "F <= 1)",
                    v);
}

/* --shard-optimizer's refusals of what the driver cannot combine with it (the optimizer and
 * its state format are the sharded update's to refuse: ot_tpu_optimizer_create). */
static ot_status validate_shard(const ot_train_options *o, ot_grad_compress c) {
    if (o->mpi && o->devices != 1)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "train: --shard-optimizer with --mpi takes one device per process "
                        "(--devices 1, not %d): the update is sharded over the processes' "
                        "communicator",
                        o->devices);
    if (c != OT_COMPRESS_NONE || o->local_sgd > 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --shard-optimizer excludes --grad-compress and --local-sgd (it "
                        "reduce-scatters the exact gradients)");
    /* across processes a failure restarts the job from its checkpoint (optitpu launch), which
     * holds every block */
    if ((o->fail_device >= 0 && !o->mpi) || o->migrate_device >= 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --shard-optimizer excludes --fail-device (in one process) and "
                        "--migrate: no other device holds a device's block of the optimizer "
                        "state");
    /* a device's block mixes tensors, so there is no per-tensor floor: the user opts in */
    if (o->state_format == OT_TPU_STATE_INT8 && o->int8_min_size != 0 && o->int8_min_size != 1)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --shard-optimizer with --state int8 quantizes every tensor (a "
                        "device's block of the flat parameters mixes tensors, so no tensor keeps "
                        "f32 state under --int8-min-size %s): give --int8-min-size 0 to accept "
                        "that (int8 state on small tensors such as biases can diverge: the default "
                        "Adam run does)",
                        o->int8_min_size < 0 ? "4096, the default" : "N");
    int a = o->allreduce && o->allreduce[0] ? ot_coll_algo_from_name(o->allreduce) : OT_ALGO_AUTO;
    if (a != OT_ALGO_AUTO && a != OT_ALGO_TREE && a != OT_ALGO_DIRECT)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --shard-optimizer with --allreduce %s is refused: its summation "
                        "order depends on how the vector is split, so the reduce-scatter would "
                        "not give the all-reduce's bits (tree or direct)",
                        o->allreduce);
    return OT_OK;
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
    if (o->int8_min_size < -1)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: the int8 state's minimum tensor size must be >= 0 (or -1: the "
                        "default), got %lld",
                        (long long)o->int8_min_size);
    /* the device's range and what a failure leaves are the pod's to check */
    if (o->fail_device >= 0 && o->fail_step < 1)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --fail-device D@STEP needs 0 <= D < %d and STEP >= 1 (got %d@%lld)",
                        o->devices, o->fail_device, (long long)o->fail_step);
    if (o->migrate_device >= 0 && (o->migrate_device >= o->devices || o->migrate_step < 1))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --migrate D@STEP needs 0 <= D < %d and STEP >= 1 (got %d@%lld)",
                        o->devices, o->migrate_device, (long long)o->migrate_step);
    if (o->migrate_device >= 0 && o->mpi)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "train: --migrate is not available with --mpi: the MPI pod has no spare "
                        "device to move a replica to");
    if (o->slice && (!o->slice_registry || !o->slice_registry[0]))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --slice needs a slice registry directory (slice_registry)");
    if (o->slice && o->topology && o->topology[0])
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --slice and --topology exclude each other: the slice's sub-mesh "
                        "is the job's topology");
    if (o->slice && o->mpi)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "train: --slice is not available with --mpi: a slice lease holds devices "
                        "of one host");
    if (o->slice && (o->migrate_device >= 0 || o->recovery == OT_RECOVER_RESTORE))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --slice with %s is refused: the job's devices are the slice's and "
                        "it has no spare device (lease a larger slice and train on fewer devices "
                        "without --slice)",
                        o->migrate_device >= 0 ? "--migrate" : "--recovery restore");
    if (o->resume && !o->ckpt_dir)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "train: --resume needs --ckpt-dir");
    if (o->nckpt_replicas < 0 || o->nckpt_replicas > 64 ||
        (o->nckpt_replicas > 0 && (!o->ckpt_dir || !o->ckpt_replicas)))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: checkpoint replicas need a checkpoint directory and 1..64 replica "
                        "roots (got %d)",
                        o->nckpt_replicas);
    for (int r = 0; r < o->nckpt_replicas; r++)
        if (!o->ckpt_replicas[r] || !o->ckpt_replicas[r][0] ||
            !strcmp(o->ckpt_replicas[r], o->ckpt_dir))
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "train: checkpoint replica %d must be a directory other than %s", r,
                            o->ckpt_dir);
    if (o->grad_accum < 1 || o->grad_accum > 1 << 16 || o->batch_size > (INT64_C(1) << 40))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --grad-accum must be 1..65536, got %lld (with batch size %lld)",
                        (long long)o->grad_accum, (long long)o->batch_size);
    ot_grad_compress c;
    double f;
    ot_status s = parse_compress(o->grad_compress, &c, &f);
    if (s != OT_OK) return s;
    if (c != OT_COMPRESS_NONE && o->mpi)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "train: --grad-compress is not available with --mpi: the MPI pod sums "
                        "gradients with ot_mpi_hier_allreduce, which has no compressed form");
    if (o->local_sgd < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "train: --local-sgd must be >= 1, got %lld",
                        (long long)o->local_sgd);
    if (o->local_sgd > 0 && c != OT_COMPRESS_NONE)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --local-sgd and --grad-compress exclude each other: LocalSGD has "
                        "no gradient all-reduce to compress");
    if (o->local_sgd > 0 && o->resume && o->mpi)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "train: --resume with --local-sgd across processes (--mpi) is refused: "
                        "between averages every device holds its own parameters and optimizer "
                        "state, and process 0's checkpoints hold its own devices' only (in one "
                        "process every device's state is checkpointed and the resume is exact)");
    if (o->local_sgd > 0 && o->fail_device >= 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "train: --fail-device with --local-sgd is refused: between averages no "
                        "survivor holds the pod's state to recover from");
    return o->shard_optimizer ? validate_shard(o, c) : OT_OK;
}

void ot_train_report_clear(ot_train_report *r) {
    if (!r) return;
    for (int k = 0; k < r->nparams; k++) ot_tensor_release(&r->params[k]);
    ot_free(r->params);
    ot_free(r->points);
    ot_free(r->log);
    ot_free(r->slice_devices);
    memset(r, 0, sizeof *r);
}

/* ---------------------------------------------------------------------------------------------
 * Set-up
 * ------------------------------------------------------------------------------------------- */

/* Data, model, schedule and the all-reduce's algorithm. */
static ot_status setup_model(trainer *t) {
    const ot_train_options *o = t->o;
    ot_status s = load_data(t);
    if (s == OT_OK && t->train.n < t->step_batch && t->accum > 1)
        s = ot_error(OT_ERR_INVALID_ARGUMENT,
                     "train: batch size %lld x %lld accumulated micro-batches exceeds the %lld "
                     "training samples",
                     (long long)o->batch_size, (long long)t->accum, (long long)t->train.n);
    else if (s == OT_OK && t->train.n < t->step_batch)
        s = ot_error(OT_ERR_INVALID_ARGUMENT,
                     "train: batch size %lld exceeds the %lld training samples",
                     (long long)o->batch_size, (long long)t->train.n);
    if (s == OT_OK) {
        ot_model_config mc = o->model;
        mc.inputs = t->train.features;
        mc.classes = t->train.classes;
        s = ot_model_create(&mc, &t->model);
    }
    if (s != OT_OK) return s;
    t->nparams = ot_model_param_count(t->model);
    for (int k = 0; k < t->nparams; k++) {
        t->sizes[k] = (size_t)ot_shape_numel_unchecked(ot_model_param_shape(t->model, k));
        t->total_elems += (int64_t)t->sizes[k];
    }
    int64_t per_epoch = t->train.n / t->step_batch;
    t->total_steps = o->epochs > 0 ? o->epochs * per_epoch : o->steps;
    s = make_schedule(t);
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
    return s;
}

/* The backend (the pod's devices and its spares), the optimizer, memory admission, a replica per
 * device, the executables and the initial parameters. */
static ot_status setup_devices(trainer *t) {
    const ot_train_options *o = t->o;
    t->nlive = o->devices;
    int ndev = o->devices + t->spares;
    ot_backend_options bo = ot_backend_options_default();
    bo.devices = ndev;
    ot_status s = ot_backend_create(&bo, &t->backend);
    if (s == OT_OK) {
        s = ot_optimizer_new(o->optimizer ? o->optimizer : "adam", &t->optim);
        if (s == OT_OK && o->weight_decay > 0)
            s = ot_optimizer_set(t->optim, "weight_decay", o->weight_decay);
    }
    if (s == OT_OK) {
        ot_shape shapes[MAX_PARAMS];
        for (int k = 0; k < t->nparams; k++) shapes[k] = *ot_model_param_shape(t->model, k);
        ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
        if (o->shard_optimizer) {
            /* the sharded update (tpu_optim.h): the head carries the loss and correct count
             * through the reduce-scatter */
            t->shard_pod = o->devices * t->psize;
            to.shard_devices = t->shard_pod;
            to.shard_head = SHARD_HEAD;
        }
        to.compile_cache = o->compile_cache;
        /* a device's block is often under the size from which AUTO generates native code (the
         * unsharded update reaches it through the largest tensor): native code for it anyway,
         * unless the environment turned code generation off */
        ot_compile_options co = ot_compile_options_default();
        const char *cg = getenv("OPTITPU_CODEGEN");
        if (o->shard_optimizer && !(cg && !strcmp(cg, "0"))) {
            co.native = OT_NATIVE_ON;
            to.compile = &co;
        }
        to.state_format = (ot_tpu_state_format)o->state_format;
        if (o->int8_min_size >= 0) to.state_int8_min_size = o->int8_min_size;
        s = ot_tpu_optimizer_create(t->optim, shapes, t->nparams, &to, &t->topt);
        if (s == OT_OK) s = train_flat_layout(t);
        if (s == OT_OK) {
            ot_tpu_profile tp;
            ot_tpu_optimizer_profile(t->topt, &tp);
            t->rep->compile_s += tp.compile_seconds;
            if (o->compile_cache && tp.compiled)
                ++*(tp.compile_cache_hit ? &t->rep->compile_cache_hits
                                         : &t->rep->compile_cache_misses);
        }
    }
    if (s == OT_OK) { /* memory admission (runtime.h) before the replicas take their memory */
        int64_t e = t->total_elems * (int64_t)sizeof(float);
        ot_mem_item need[] = {{"parameters", e, true},
                              {"gradients", e, true},
                              {"optimizer state",
                               (t->shard_len ? t->shard_len * (int64_t)sizeof(float) : e) *
                                   ot_optimizer_state_count(t->optim),
                               true},
                              {"all-reduce buffer", e, true}};
        s = ot_mem_admit("train", need, 4, ndev, 0, NULL);
    }
    for (int r = 0; s == OT_OK && r < t->nlive; r++) {
        t->reps[r].dev_index = r;
        t->reps[r].dev = ot_backend_device(t->backend, r);
        s = ot_tpu_optimizer_add_replica(t->topt, t->reps[r].dev);
    }
    if (s == OT_OK && t->local_sgd > 0 && o->ckpt_dir && !o->mpi) {
        /* LocalSGD: every device's parameters and optimizer state, for the checkpoints */
        size_t k = (size_t)(t->nparams + ot_tpu_optimizer_state_count(t->topt));
        t->ck_rep = ot_calloc((size_t)t->nlive * k, sizeof *t->ck_rep);
        t->ck_rep_cap = t->nlive * (int)k;
        t->ck_rep_step = -1;
        if (!t->ck_rep) s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: replica snapshot");
    }
    if (s == OT_OK && t->shard_len && o->ckpt_dir) {
        /* the sharded update: every device's block of the optimizer state, for the checkpoints */
        int k = ot_tpu_optimizer_state_count(t->topt);
        t->ck_shard = ot_calloc((size_t)t->shard_pod * (size_t)k + 1, sizeof *t->ck_shard);
        t->ck_shard_cap = t->shard_pod * k;
        t->ck_shard_step = -1;
        if (!t->ck_shard) s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: sharded state snapshot");
    }
    if (s == OT_OK && t->compress != OT_COMPRESS_NONE && o->ckpt_dir) {
        /* every member's error-feedback residuals, for the checkpoints */
        t->ck_resid = ot_calloc((size_t)t->nlive * (size_t)t->total_elems, sizeof(float));
        t->ck_resid_step = -1;
        if (!t->ck_resid) s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: residual snapshot");
    }
    for (int i = 0; s == OT_OK && i < ot_tpu_optimizer_state_count(t->topt); i++) {
        ot_shape sh;
        s = ot_tpu_optimizer_state_shape(t->topt, i, &sh);
        if (s == OT_OK) t->rep->optim_state_bytes_per_device += ot_shape_nbytes_unchecked(&sh);
    }
    t->rep->shard_optimizer = t->shard_len > 0;
    if (s == OT_OK) s = train_describe_state(t);
    if (s == OT_OK) s = train_prepare_executables(t);
    if (s == OT_OK) s = compile_eval(t);
    if (s == OT_OK) s = train_init_params(t);
    return s;
}

/* Resume (process 0 restores, the others take it) and the checkpoint manager (process 0). */
static ot_status setup_checkpoints(trainer *t, ot_status s) {
    const ot_train_options *o = t->o;
    bool root = t->prank == 0;
    if (s == OT_OK && o->ckpt_dir && o->resume) {
        int64_t step = 0;
        bool found = false;
        if (root) s = train_restore_latest(t, &step, &found);
        s = pod_agree(t, s, "restore");
        if (s == OT_OK && t->pod_vt->share_restore) s = t->pod_vt->share_restore(t, &step, &found);
        if (s == OT_OK && found) {
            t->step = step;
            t->last_ckpt_step = step;
            if (root && t->pod_vt->processes)
                train_log(t, "resumed from the checkpoint of step %lld in %s on %d processes",
                          (long long)step, o->ckpt_dir, t->psize);
            else if (root)
                train_log(t, "resumed from the checkpoint of step %lld in %s", (long long)step,
                          o->ckpt_dir);
        } else if (s == OT_OK && root) {
            train_log(t, "resume: no checkpoint in %s; starting from step 0", o->ckpt_dir);
        }
    }
    if (s == OT_OK && o->ckpt_dir && root) {
        ot_ckpt_options co = train_ckpt_options(t);
        if (!o->resume) s = train_prepare_ckpt_dir(t);
        if (s == OT_OK) s = ot_ckpt_open(o->ckpt_dir, &co, &t->ckpt);
        for (int r = 0; s == OT_OK && r < o->nckpt_replicas; r++)
            train_log(t, "checkpoints replicated: every commit in %s is copied to %s and verified",
                      o->ckpt_dir, o->ckpt_replicas[r]);
    }
    return pod_agree(t, s, "checkpoint set-up");
}

static ot_status setup(trainer *t) {
    const ot_train_options *o = t->o;
    ot_status s = t->pod_vt->open(t);
    if (s == OT_OK) s = setup_model(t);
    if (s == OT_OK) s = setup_devices(t);
    s = pod_agree(t, s, "set-up");
    s = setup_checkpoints(t, s);
    if (s == OT_OK && o->trace_path) s = ot_pod_trace_create(&t->trace);
    if (s == OT_OK && t->pod_vt->start) s = t->pod_vt->start(t);
    t->rep->start_step = t->step;
    t->rep->devices_start = t->nlive * t->psize;
    if (s == OT_OK)
        train_log(t,
                  "training %s (%lld parameters) on %s: %lld train / %lld test samples, %d "
                  "devices%s, batch %lld, %s lr %g (%s), %lld steps",
                  ot_model_kind_name(o->model.kind), (long long)t->total_elems,
                  o->dataset ? o->dataset : "digits", (long long)t->train.n, (long long)t->test.n,
                  t->nlive * t->psize, t->pod_vt->processes ? " in several processes" : "",
                  (long long)o->batch_size, o->optimizer ? o->optimizer : "adam", o->lr,
                  ot_lr_schedule_kind(t->sched), (long long)t->total_steps);
    if (s == OT_OK && t->accum > 1)
        train_log(t,
                  "gradient accumulation: %lld micro-batches of %lld per step (%lld samples a "
                  "step)",
                  (long long)t->accum, (long long)o->batch_size, (long long)t->step_batch);
    if (s == OT_OK && t->local_sgd > 0)
        train_log(t,
                  "LocalSGD: every device steps on its own shard; parameters averaged every %lld "
                  "steps and after the last",
                  (long long)t->local_sgd);
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * The loop: segments between failures
 * ------------------------------------------------------------------------------------------- */

/* Runs steps [t->step, end) on the current members. */
static ot_status run_segment(trainer *t, int64_t end, ot_status *st) {
    t->run_end = end;
    t->seg_start = t->step;
    ot_status s = t->pod_vt->run_segment(t, st);
    /* restored residuals apply to the segment that started from the restored step only */
    ot_free(t->resid_init);
    t->resid_init = NULL;
    return s;
}

/* Every step of the run (stop_after cuts it short, as a crash would); a segment that ends early
 * is a failure for the pod to survive, or the run's error. */
static ot_status run_loop(trainer *t) {
    const ot_train_options *o = t->o;
    int64_t end = t->total_steps;
    if (o->stop_after > 0 && t->step + o->stop_after < end) {
        end = t->step + o->stop_after;
        t->rep->stopped = true;
    }
    /* the steady steps (ot_train_report.steady_wall_s) */
    int64_t n = end - t->step;
    t->steady_from = t->step + (n / 10 > 1 ? n / 10 : 1);
    t->steady_to = end - 1;
    ot_status s = OT_OK;
    while (s == OT_OK && t->step < end) {
        ot_status st[MAX_DEVICES];
        ot_status rs = run_segment(t, end, st);
        if (rs == OT_OK) break;
        /* LocalSGD: the replicas' states differ between averages; the sharded update: each
         * device holds its block's state only; either way none can stand for the pod */
        s = t->pod_vt->recover && !t->local_sgd && !t->shard_len ? t->pod_vt->recover(t, rs, st)
                                                                 : train_first_error(t, rs);
    }
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * Finish
 * ------------------------------------------------------------------------------------------- */

/* The end of the run is saved too, whatever ckpt_every says (a stop is a crash: no); then every
 * checkpoint in flight is waited for. */
static ot_status finish_checkpoints(trainer *t, ot_status s) {
    const ot_train_options *o = t->o;
    if (s == OT_OK && t->ckpt && o->final_ckpt && !t->rep->stopped && t->step > t->last_ckpt_step) {
        phase_clock pc = train_phase_start();
        s = train_save_checkpoint(t, &t->reps[0], t->step,
                                  t->npoints ? t->points[t->npoints - 1].loss : NAN);
        train_phase_end(t, &t->reps[0], PH_CKPT, pc, "checkpoint", true);
        if (s == OT_OK)
            train_log(t, "final checkpoint of step %lld in %s", (long long)t->step, o->ckpt_dir);
    }
    if (s == OT_OK && t->ckpt) s = ot_ckpt_wait(t->ckpt, NULL);
    if (t->ckpt) {
        ot_status cs = ot_ckpt_close(t->ckpt);
        if (s == OT_OK) s = cs;
        t->ckpt = NULL;
    }
    return s;
}

/* Every replica's parameters (every process's, through the pod) hash to the leader's. */
static ot_status check_replicas(trainer *t, uint8_t sha[32]) {
    ot_status s = train_params_sha256(t, &t->reps[0], sha);
    for (int r = 1; s == OT_OK && r < t->nlive; r++) {
        uint8_t h[32];
        s = train_params_sha256(t, &t->reps[r], h);
        if (s == OT_OK && memcmp(h, sha, 32) != 0)
            s = ot_error(OT_ERR_INTERNAL, "train: replica %d's parameters differ from replica 0's",
                         r);
    }
    return t->pod_vt->check_same ? t->pod_vt->check_same(t, s, sha) : s;
}

static ot_status finish_report(trainer *t, uint64_t loop_end) {
    const ot_train_options *o = t->o;
    ot_train_report *out = t->rep;
    out->final_step = t->step;
    out->steps_run = t->step - out->start_step;
    out->test_accuracy = t->last_test_acc;
    /* no evaluation (a stopped run with eval_every 0): no test loss either */
    out->test_loss = t->last_test_acc >= 0 ? t->last_test_loss : NAN;
    out->final_loss = t->npoints ? t->points[t->npoints - 1].loss : NAN;
    out->wall_s = (double)(loop_end - t->loop_start_ns) / 1e9;
    out->samples_per_s =
        out->wall_s > 0 ? (double)(out->steps_run * t->step_batch) / out->wall_s : 0;
    if (t->steady_to > t->steady_from && t->steady_t1_ns > t->steady_t0_ns) {
        out->steady_wall_s = (double)(t->steady_t1_ns - t->steady_t0_ns) / 1e9;
        out->steady_steps = t->steady_to - t->steady_from;
    }
    out->devices_end = t->nlive * t->psize;
    out->param_elements = t->total_elems;
    out->allreduce_bytes_per_step = t->member_steps ? out->allreduce_bytes / t->member_steps : 0;
    /* phase shares: CPU time summed over the replicas (on a host with fewer cores than devices,
     * wall time spent waiting for the others' compute is not overhead) */
    double cpu[4] = {0, 0, 0, 0};
    for (int r = 0; r < t->nlive; r++)
        for (int p = 0; p < 4; p++) cpu[p] += (double)t->reps[r].cpu[p] / 1e9;
    out->compute_s = cpu[PH_COMPUTE];
    out->comm_s = cpu[PH_COMM];
    out->ckpt_s = cpu[PH_CKPT];
    out->other_s = cpu[PH_OTHER];
    /* the timeline's parts: each name's mean over the replicas that ran it */
    out->nparts = 0;
    for (int r = 0; r < t->nlive; r++)
        for (int k = 0; k < t->reps[r].nparts; k++) {
            int j = 0;
            while (j < out->nparts && strcmp(out->parts[j].name, t->reps[r].parts[k].name) != 0)
                j++;
            if (j == out->nparts) {
                if (j == OT_TRAIN_MAX_PARTS) continue;
                snprintf(out->parts[j].name, sizeof out->parts[j].name, "%s",
                         t->reps[r].parts[k].name);
                out->nparts++;
            }
            out->parts[j].wall_s += (double)t->reps[r].parts[k].wall / 1e9 / t->nlive;
            out->parts[j].cpu_s += (double)t->reps[r].parts[k].cpu / 1e9 / t->nlive;
            out->parts[j].count += (double)t->reps[r].parts[k].count / t->nlive;
        }
    for (int r = 0; r < t->nlive; r++) {
        ot_mem_stats ms;
        if (!t->reps[r].dev) continue;
        ot_device_memory(t->reps[r].dev, &ms);
        int64_t *peak = r == 0 ? &out->leader_peak_bytes : &out->replica_peak_bytes;
        if (ms.peak_in_use > *peak) *peak = ms.peak_in_use;
    }
    double tot = cpu[0] + cpu[1] + cpu[2] + cpu[3];
    out->outside_compute_share = tot > 0 ? (tot - cpu[PH_COMPUTE]) / tot : 0;
    ot_status s = check_replicas(t, out->params_sha256);
    if (s == OT_OK) {
        out->params = ot_calloc((size_t)t->nparams, sizeof *out->params);
        if (!out->params) s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: final parameters");
        for (int k = 0; s == OT_OK && k < t->nparams; k++) {
            s = ot_buffer_to_host(t->reps[0].params[k], &out->params[k]);
            if (s == OT_OK) out->nparams = k + 1;
        }
    }
    out->points = t->points;
    out->npoints = t->npoints;
    t->points = NULL;
    if (t->trace && (t->pod_vt->write_trace || (s == OT_OK && o->trace_path))) {
        /* the step breakdown of every device through the runtime's profiler */
        ot_profile *pf = NULL;
        if (s == OT_OK) s = ot_profile_create(&pf);
        if (s == OT_OK) s = ot_profile_add_pod_trace(pf, t->trace);
        if (t->pod_vt->write_trace)
            s = t->pod_vt->write_trace(t, s, s == OT_OK ? pf : NULL);
        else
            s = ot_profile_write_chrome_trace(pf, o->trace_path);
        ot_profile_free(pf);
    }
    return s;
}

static void teardown(trainer *t) {
    if (t->pod_vt->close) t->pod_vt->close(t);
    for (int r = 0; r < MAX_DEVICES; r++) train_free_replica(&t->reps[r]);
    ot_tpu_optimizer_free(t->topt);
    ot_lr_schedule_free(t->sched);
    ot_optimizer_free(t->optim);
    for (int i = 0; i < t->ngexe; i++) ot_executable_free(t->gexe[i].exe);
    ot_executable_free(t->eval_exe);
    ot_backend_free(t->backend);
    ot_pod_trace_free(t->trace);
    ot_free(t->ck_resid);
    for (int i = 0; t->ck_rep && i < t->ck_rep_cap; i++) ot_tensor_release(&t->ck_rep[i]);
    ot_free(t->ck_rep);
    for (int i = 0; t->ck_shard && i < t->ck_shard_cap; i++) ot_tensor_release(&t->ck_shard[i]);
    ot_free(t->ck_shard);
    train_shard_restore_free(t);
    ot_free(t->resid_init);
    ot_model_free(t->model);
    ot_dataset_free(&t->train);
    ot_dataset_free(&t->test);
    ot_free(t->points);
    ot_free(t->log);
    pthread_mutex_destroy(&t->mu);
    ot_free(t);
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
    t->pod_vt = o->mpi ? &train_pod_mpi : &train_pod_local;
    t->last_test_acc = -1;
    t->psize = 1;
    t->accum = o->grad_accum;
    t->step_batch = o->batch_size * o->grad_accum;
    t->local_sgd = o->local_sgd;
    parse_compress(o->grad_compress, &t->compress, &t->topk_fraction); /* validated */
    pthread_mutex_init(&t->mu, NULL);

    s = setup(t);
    t->loop_start_ns = ot_now_ns();
    if (s == OT_OK) s = run_loop(t);
    uint64_t loop_end = ot_now_ns();
    s = pod_agree(t, s, "training");
    s = finish_checkpoints(t, s);
    if (s == OT_OK && !out->stopped)
        s = train_evaluate(t, &t->reps[0], &t->last_test_acc, &t->last_test_loss);
    if (t->pod_vt->stop) t->pod_vt->stop(t);
    if (s == OT_OK) s = finish_report(t, loop_end);

    out->log = t->log;
    t->log = NULL;
    teardown(t);
    if (s != OT_OK) {
        char *log = out->log;
        out->log = NULL;
        ot_train_report_clear(out);
        out->log = log;
    }
    return s;
}
