/* --migrate D@S: the replica on device D moves to a spare device when it begins step S, through
 * fault tolerance's verified path (ot_ft_migrate): its parameters and optimizer state are read
 * from D, serialized and parsed back as safetensors images with their SHA-256, loaded onto the
 * spare, read back from it and compared byte for byte. It runs on the replica's own thread between
 * two of its steps (the others are at most in the next all-reduce, waiting for it), so nothing of
 * the step's order changes: the run's bits are those of a run without the migration. Any failure
 * is the replica's error (the pod fails; nothing half-moved is used). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "train/driver.h"

/* The live source: replica r's device. */
typedef struct mig_source {
    trainer *t;
    replica *r;
    int64_t step;
    ot_tensor host[MAX_PARAMS + 64];
    ot_ckpt_tensor ct[MAX_PARAMS + 64];
    int nhost;
} mig_source;

static void source_release(void *ctx, ot_ft_state *st) {
    mig_source *ms = ctx;
    for (int i = 0; i < ms->nhost; i++) ot_tensor_release(&ms->host[i]);
    ms->nhost = 0;
    memset(st, 0, sizeof *st);
}

/* Reads the parameters and every optimizer state tensor of a device's replica into host memory
 * (h and c hold nparams + nstate entries; *n counts the tensors read, released by the caller). */
static ot_status read_device_state(trainer *t, ot_device *dev, ot_buffer *const *params,
                                   ot_tensor *h, ot_ckpt_tensor *c, int *n) {
    int nstate = ot_tpu_optimizer_state_count(t->topt);
    *n = 0;
    if (t->nparams + nstate > MAX_PARAMS + 64)
        return ot_error(OT_ERR_OUT_OF_RANGE, "train: migrate: %d optimizer state tensors", nstate);
    ot_status s = OT_OK;
    for (int k = 0; s == OT_OK && k < t->nparams; k++) {
        s = ot_buffer_to_host(params[k], &h[k]);
        if (s == OT_OK) {
            c[k] = (ot_ckpt_tensor){ot_model_param_name(t->model, k), h[k].shape, h[k].data};
            *n = k + 1;
        }
    }
    for (int i = 0; s == OT_OK && i < nstate; i++) {
        int j = t->nparams + i;
        s = ot_tpu_optimizer_get_state(t->topt, dev, i, &h[j]);
        if (s == OT_OK) {
            c[j] = (ot_ckpt_tensor){ot_tpu_optimizer_state_name(t->topt, i), h[j].shape, h[j].data};
            *n = j + 1;
        }
    }
    return s;
}

static ot_status source_read(void *ctx, ot_ft_state *st) {
    mig_source *ms = ctx;
    trainer *t = ms->t;
    ot_status s = read_device_state(t, ms->r->dev, ms->r->params, ms->host, ms->ct, &ms->nhost);
    if (s != OT_OK) {
        source_release(ms, st);
        return s;
    }
    *st = (ot_ft_state){ms->step, ms->ct, (size_t)t->nparams, ms->ct + t->nparams,
                        (size_t)(ms->nhost - t->nparams)};
    return OT_OK;
}

/* The sink: the spare device, its parameter buffers (kept by the replica once verified) and its
 * optimizer replica. */
typedef struct mig_sink {
    trainer *t;
    ot_device *dev;
    int64_t step;
    ot_buffer *params[MAX_PARAMS];
    ot_tensor host[MAX_PARAMS + 64];
    ot_ckpt_tensor ct[MAX_PARAMS + 64];
    int nhost;
    /* the order load received the tensors in (the images' order, not the model's): parameter
     * and state indices, for a read-back in that order */
    int porder[MAX_PARAMS], sorder[64];
} mig_sink;

/* The index among n names (name_of(i)) equal to `name` and not yet taken; -1 when none. */
static int find_name(trainer *t, bool param, const char *name, bool *taken, int n) {
    for (int i = 0; i < n; i++) {
        const char *ni =
            param ? ot_model_param_name(t->model, i) : ot_tpu_optimizer_state_name(t->topt, i);
        if (!taken[i] && name && !strcmp(ni, name)) {
            taken[i] = true;
            return i;
        }
    }
    return -1;
}

static ot_status sink_load(void *ctx, const ot_ft_state *st) {
    mig_sink *mk = ctx;
    trainer *t = mk->t;
    int nstate = ot_tpu_optimizer_state_count(t->topt);
    if (st->nparams != (size_t)t->nparams || st->noptim != (size_t)nstate)
        return ot_error(OT_ERR_CORRUPT_DATA,
                        "train: migrate: %zu parameters and %zu optimizer tensors, expected %d "
                        "and %d",
                        st->nparams, st->noptim, t->nparams, nstate);
    if (nstate > 64)
        return ot_error(OT_ERR_OUT_OF_RANGE, "train: migrate: %d state tensors", nstate);
    bool taken[MAX_PARAMS + 64];
    memset(taken, 0, sizeof taken);
    ot_status s = OT_OK;
    for (size_t j = 0; s == OT_OK && j < st->nparams; j++) {
        int k = find_name(t, true, st->params[j].name, taken, t->nparams);
        if (k < 0) {
            s = ot_error(OT_ERR_CORRUPT_DATA, "train: migrate: unexpected parameter '%s'",
                         st->params[j].name ? st->params[j].name : "");
            break;
        }
        mk->porder[j] = k;
        ot_tensor v;
        ot_tensor_borrow(&v, &st->params[j].shape, (void *)st->params[j].data);
        ot_buffer_free(mk->params[k]);
        mk->params[k] = NULL;
        s = ot_buffer_from_host(mk->dev, &v, &mk->params[k]);
    }
    memset(taken, 0, sizeof taken);
    for (size_t j = 0; s == OT_OK && j < st->noptim; j++) {
        int i = find_name(t, false, st->optim[j].name, taken, nstate);
        if (i < 0) {
            s = ot_error(OT_ERR_CORRUPT_DATA, "train: migrate: unexpected optimizer state '%s'",
                         st->optim[j].name ? st->optim[j].name : "");
            break;
        }
        mk->sorder[j] = i;
        ot_tensor v;
        ot_tensor_borrow(&v, &st->optim[j].shape, (void *)st->optim[j].data);
        s = ot_tpu_optimizer_set_state(t->topt, mk->dev, i, &v);
    }
    mk->step = st->step;
    return s;
}

static void sink_release(void *ctx, ot_ft_state *st) {
    mig_sink *mk = ctx;
    for (int i = 0; i < mk->nhost; i++) ot_tensor_release(&mk->host[i]);
    mk->nhost = 0;
    memset(st, 0, sizeof *st);
}

/* The spare's state read back from the device, in the order load received it. */
static ot_status sink_read_back(void *ctx, ot_ft_state *st) {
    mig_sink *mk = ctx;
    trainer *t = mk->t;
    ot_ckpt_tensor model_order[MAX_PARAMS + 64];
    ot_status s = read_device_state(t, mk->dev, mk->params, mk->host, model_order, &mk->nhost);
    int nstate = mk->nhost - t->nparams;
    if (s != OT_OK) {
        sink_release(mk, st);
        return s;
    }
    for (int j = 0; j < t->nparams; j++) mk->ct[j] = model_order[mk->porder[j]];
    for (int j = 0; j < nstate; j++)
        mk->ct[t->nparams + j] = model_order[t->nparams + mk->sorder[j]];
    *st = (ot_ft_state){mk->step, mk->ct, (size_t)t->nparams, mk->ct + t->nparams, (size_t)nstate};
    return OT_OK;
}

ot_status train_migrate_replica(trainer *t, train_member *m, int64_t step) {
    replica *r = m->r;
    if (!t->pod_vt->take_spare || !t->pod_vt->moved)
        return ot_error(OT_ERR_UNIMPLEMENTED, "train: the %s pod cannot migrate a replica",
                        t->pod_vt->name);
    uint64_t t0 = ot_now_ns();
    int spare = -1;
    ot_status s = t->pod_vt->take_spare(t, &spare);
    if (s != OT_OK) return s;
    mig_source *ms = ot_calloc(1, sizeof *ms);
    mig_sink *mk = ot_calloc(1, sizeof *mk);
    if (!ms || !mk) {
        ot_free(ms);
        ot_free(mk);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "train: migrate");
    }
    *ms = (mig_source){.t = t, .r = r, .step = step};
    *mk = (mig_sink){.t = t, .dev = ot_backend_device(t->backend, spare)};
    /* the spare's optimizer replica (its state is replaced by the migrated one) */
    s = ot_tpu_optimizer_add_replica(t->topt, mk->dev);
    ot_ft_migrate_report rep;
    memset(&rep, 0, sizeof rep);
    if (s == OT_OK) {
        ot_ft_state_source src = {ms, source_read, source_release};
        ot_ft_state_sink dst = {mk, sink_load, sink_read_back, sink_release};
        /* the live device only: a checkpoint holds an older step than the pod's */
        s = ot_ft_migrate(&src, NULL, NULL, &dst, &rep);
    }
    if (s == OT_OK && !rep.verified_readback)
        s = ot_error(OT_ERR_INTERNAL, "train: migrate: the spare's state was not read back");
    if (s == OT_OK) {
        int from = r->dev_index;
        for (int k = 0; k < MAX_PARAMS; k++) {
            ot_buffer_free(r->params[k]);
            r->params[k] = k < t->nparams ? mk->params[k] : NULL;
            mk->params[k] = NULL;
        }
        /* the evaluation set is loaded onto the new device when next needed */
        ot_buffer_free(r->test_x);
        ot_buffer_free(r->test_y);
        r->test_x = r->test_y = NULL;
        r->dev = mk->dev;
        r->dev_index = spare;
        t->pod_vt->moved(t, m, from);
        double ms_taken = (double)(ot_now_ns() - t0) / 1e6;
        pthread_mutex_lock(&t->mu);
        t->rep->migrations++;
        t->rep->migrate_s += ms_taken / 1e3;
        pthread_mutex_unlock(&t->mu);
        train_log(t,
                  "migration: device %d's replica moved to spare device %d before step %lld (%s "
                  "path, %llu bytes of parameters and optimizer state, read back from device %d "
                  "and verified bit for bit, %.1f ms)",
                  from, spare, (long long)step + 1, ot_ft_migrate_path_name(rep.path),
                  (unsigned long long)rep.bytes, spare, ms_taken);
    } else {
        s = ot_error_wrap(s,
                          "train: migrating device %d's replica to spare device %d before step "
                          "%lld",
                          r->dev_index, spare, (long long)step + 1);
    }
    ot_ft_migrate_report_clear(&rep);
    for (int k = 0; k < MAX_PARAMS; k++) ot_buffer_free(mk->params[k]);
    ot_free(ms);
    ot_free(mk);
    return s;
}
