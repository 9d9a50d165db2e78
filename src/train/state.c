/* The training state: parameters on the replicas' devices, the optimizer state, and checkpoints
 * of both (what they record, the check on resume, save, restore, the directory's preparation). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "ft/ft_io.h"
#include "train/driver.h"

ot_status train_put_params(trainer *t, replica *r, const ot_tensor *host) {
    for (int k = 0; k < t->nparams; k++) {
        ot_buffer_free(r->params[k]);
        r->params[k] = NULL;
        ot_status s = ot_buffer_from_host(r->dev, &host[k], &r->params[k]);
        if (s != OT_OK) return s;
    }
    return OT_OK;
}

void train_free_replica(replica *r) {
    for (int k = 0; k < MAX_PARAMS; k++) {
        ot_buffer_free(r->params[k]);
        r->params[k] = NULL;
    }
    ot_buffer_free(r->test_x);
    ot_buffer_free(r->test_y);
    r->test_x = r->test_y = NULL;
}

ot_status train_params_sha256(trainer *t, const replica *r, uint8_t out[32]) {
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

static const char *optimizer_name(const trainer *t) {
    return t->o->optimizer ? t->o->optimizer : "adam";
}

static int state_slots(const trainer *t);
static ot_status logical_state(const trainer *t, int i, char *name, size_t cap, ot_shape *sh);

/* What defines the layout of the checkpointed state: the model (kind, activation, every
 * parameter's name and shape) in words, and the optimizer's state tensors (names and shapes)
 * as a SHA-256. */
ot_status train_describe_state(trainer *t) {
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
    /* sharded, the layout is described as the unsharded one's (parameter k's slots "<k>.<slot>"
     * shaped like it), so a checkpoint moves between sharded and unsharded runs */
    int ns = t->shard_len ? t->nparams * state_slots(t) : ot_tpu_optimizer_state_count(t->topt);
    for (int i = 0; s == OT_OK && i < ns; i++) {
        ot_shape sh;
        char line[512], name[160];
        s = logical_state(t, i, name, sizeof name, &sh);
        if (s != OT_OK) break;
        char shs[128];
        ot_shape_format(&sh, shs, sizeof shs);
        int n = snprintf(line, sizeof line, "%s %s;", name, shs);
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

/* ---------------------------------------------------------------------------------------------
 * The sharded optimizer state (--shard-optimizer) in checkpoints
 *
 * A sharded run saves the optimizer state as role "optim" in one file per device: shard r of N
 * holds device r's block of every slot, "shard<r>.<slot>" (f32 or bf16 [shard_len], a scalar
 * slot []), and the manifest's optimizer record says shard_devices N and shard_len. The blocks
 * concatenated are the flat vector (SHARD_HEAD elements, the parameters in model order, zeros),
 * so a restore onto any device count, sharded or not, reads what it needs from it; an unsharded
 * checkpoint ("<k>.<slot>" per parameter) gives the same vector. The checkpoint's verification
 * (every file against the manifest, its step and shard in its own metadata) keeps shards of two
 * steps from ever being mixed, and a shard file missing fails it.
 * ------------------------------------------------------------------------------------------- */

ot_status train_flat_layout(trainer *t) {
    int64_t al = t->o->state_format == OT_TPU_STATE_INT8 ? OT_TPU_INT8_BLOCK : 1;
    int64_t end = (SHARD_HEAD + al - 1) / al * al;
    for (int k = 0; k < t->nparams; k++) {
        t->fpos[k] = end;
        end = (end + (int64_t)t->sizes[k] + al - 1) / al * al;
    }
    t->fend = end;
    t->flat_metrics = t->total_elems;
    if (!t->o->shard_optimizer) return OT_OK;
    int64_t off[MAX_PARAMS];
    OT_CHECK(ot_tpu_optimizer_shard_layout(t->topt, NULL, &t->shard_len, off));
    for (int k = 0; k < t->nparams; k++)
        if (off[k] != t->fpos[k])
            return ot_error(OT_ERR_INTERNAL,
                            "train: parameter %d at %lld of the sharded layout, "
                            "not %lld",
                            k, (long long)off[k], (long long)t->fpos[k]);
    t->flat_metrics = t->fend - SHARD_HEAD;
    return OT_OK;
}

/* State slots per parameter (param-major: the state of parameter k is k * slots + j). */
static int state_slots(const trainer *t) {
    int ns = ot_tpu_optimizer_state_count(t->topt);
    return t->shard_len ? ns : (t->nparams ? ns / t->nparams : 0);
}

/* Slot j's name ("exp_avg") and shape (a scalar slot: rank 0) as parameter 0's. */
static ot_status slot_of(const trainer *t, int j, const char **slot, ot_shape *sh) {
    OT_CHECK(ot_tpu_optimizer_state_shape(t->topt, j, sh));
    const char *n = ot_tpu_optimizer_state_name(t->topt, j);
    const char *dot = n ? strchr(n, '.') : NULL;
    if (!dot) return ot_error(OT_ERR_INTERNAL, "train: optimizer state %d has no slot name", j);
    *slot = dot + 1;
    return OT_OK;
}

/* Elements of the flat vector per entry of slot `slot`: OT_TPU_INT8_BLOCK for an int8 slot's
 * absmax (one per quantization block), else 1. */
static int64_t slot_scale(const char *slot) {
    const char *a = strstr(slot, ".absmax");
    return a && !a[7] ? OT_TPU_INT8_BLOCK : 1;
}

/* Parameter k's tensor of slot `slot` (an array; dtype from sh) as the unsharded run shapes it:
 * the parameter's shape, or with int8 state its codes and absmax over its whole blocks. */
static void unsharded_shape(const trainer *t, int k, const char *slot, ot_shape *sh) {
    ot_dtype dt = sh->dtype;
    int64_t sc = slot_scale(slot);
    if (dt == OT_U8 || sc > 1) {
        int64_t nb = ((int64_t)t->sizes[k] + OT_TPU_INT8_BLOCK - 1) / OT_TPU_INT8_BLOCK;
        int64_t n = sc > 1 ? nb : nb * OT_TPU_INT8_BLOCK;
        ot_shape_make(sh, dt, 1, &n);
        return;
    }
    *sh = *ot_model_param_shape(t->model, k);
    sh->dtype = dt;
}

/* Logical state tensor i (parameter i / slots, slot i % slots) as the unsharded run names and
 * shapes it. */
static ot_status logical_state(const trainer *t, int i, char *name, size_t cap, ot_shape *sh) {
    if (!t->shard_len) {
        snprintf(name, cap, "%s", ot_tpu_optimizer_state_name(t->topt, i));
        return ot_tpu_optimizer_state_shape(t->topt, i, sh);
    }
    int S = state_slots(t), k = i / S;
    const char *slot = NULL;
    OT_CHECK(slot_of(t, i % S, &slot, sh));
    snprintf(name, cap, "%d.%s", k, slot);
    if (sh->rank > 0) unsharded_shape(t, k, slot, sh);
    return OT_OK;
}

/* A sharded checkpoint's layout from its manifest record (0, 0: not sharded). */
static void ckpt_shard_info(const ot_ckpt *ck, int64_t *n, int64_t *len) {
    json_t *j = json_loads(ot_ckpt_manifest_of(ck)->optimizer_json, 0, NULL);
    *n = json_integer_value(json_object_get(j, "shard_devices"));
    *len = json_integer_value(json_object_get(j, "shard_len"));
    json_decref(j);
}

/* Slot j of the checkpointed optimizer state as the flat vector (t->fpos; an absmax slot: one
 * entry per quantization block of it): nout entries of the slot's dtype at out (zeros past
 * what the checkpoint holds); a scalar slot: out[0]. From a sharded checkpoint of any device
 * count or an unsharded one. A tensor missing or of another shape: CORRUPT_DATA naming it (the
 * resume sets the step aside as damaged). */
static ot_status ckpt_flat_slot(const trainer *t, const ot_ckpt *ck, int j, char *out,
                                int64_t nout) {
    const char *slot = NULL;
    ot_shape want;
    OT_CHECK(slot_of(t, j, &slot, &want));
    bool scalar = want.rank == 0;
    size_t esz = ot_dtype_size(want.dtype);
    int64_t sc = slot_scale(slot);
    int64_t n, len;
    ckpt_shard_info(ck, &n, &len);
    if (n < 0 || n > 65536 || (n > 0 && (len <= 0 || len > ((int64_t)1 << 40) || len % sc)))
        return ot_error(OT_ERR_CORRUPT_DATA,
                        "%s: the optimizer record's shard_devices %lld, shard_len %lld are not a "
                        "sharded layout",
                        ot_ckpt_dir(ck), (long long)n, (long long)len);
    memset(out, 0, (size_t)nout * esz);
    char name[160], a[128];
    int64_t units = n > 0 ? n : t->nparams;
    for (int64_t u = 0; u < units; u++) {
        ot_shape sh = want;
        if (n > 0) {
            snprintf(name, sizeof name, "shard%lld.%s", (long long)u, slot);
            if (!scalar) OT_CHECK(ot_shape_make(&sh, want.dtype, 1, (int64_t[]){len / sc}));
        } else {
            snprintf(name, sizeof name, "%lld.%s", (long long)u, slot);
            if (!scalar) unsharded_shape(t, (int)u, slot, &sh);
        }
        ot_tensor v;
        if (ot_ckpt_get(ck, "optim", name, &v) != OT_OK) {
            ot_clear_error();
            if (n > 0)
                return ot_error(OT_ERR_CORRUPT_DATA,
                                "%s: the optimizer state of shard %lld of %lld (%s) is missing",
                                ot_ckpt_dir(ck), (long long)u, (long long)n, name);
            return ot_error(OT_ERR_CORRUPT_DATA, "%s: no optimizer state %s", ot_ckpt_dir(ck),
                            name);
        }
        if (!ot_shape_equal(&v.shape, &sh)) {
            ot_shape_format(&sh, a, sizeof a);
            return ot_error(OT_ERR_CORRUPT_DATA, "%s: optimizer state %s is not %s",
                            ot_ckpt_dir(ck), name, a);
        }
        if (scalar) {
            if (u == 0) memcpy(out, v.data, esz);
            continue;
        }
        int64_t lo = (n > 0 ? u * len : t->fpos[u]) / sc, cnt = v.nbytes / esz;
        if (lo < nout)
            memcpy(out + (size_t)lo * esz, v.data,
                   (size_t)(lo + cnt <= nout ? cnt : nout - lo) * esz);
    }
    return OT_OK;
}

/* Every slot of the checkpointed state readable as this run needs it (accept_ckpt). */
static ot_status check_flat_state(const trainer *t, const ot_ckpt *ck) {
    int64_t nout = t->fend;
    char *flat = ot_malloc((size_t)nout * sizeof(double));
    if (!flat) return ot_error(OT_ERR_OUT_OF_MEMORY, "train: optimizer state staging");
    ot_status s = OT_OK;
    for (int j = 0; s == OT_OK && j < state_slots(t); j++) s = ckpt_flat_slot(t, ck, j, flat, nout);
    ot_free(flat);
    return s;
}

/* Sets replica r's optimizer state from a checkpoint when either side is sharded: its block (the
 * sharded run's device `rank`), or every parameter's slices (an unsharded run). */
static ot_status load_flat_state(trainer *t, const ot_ckpt *ck, replica *r, int rank) {
    int S = state_slots(t);
    int64_t nall = t->shard_len ? t->shard_len * (int64_t)t->shard_pod : t->fend;
    char *flat = ot_malloc((size_t)nall * sizeof(double));
    if (!flat) return ot_error(OT_ERR_OUT_OF_MEMORY, "train: optimizer state staging");
    ot_status s = OT_OK;
    for (int j = 0; s == OT_OK && j < S; j++) {
        const char *slot = NULL;
        ot_shape want;
        s = slot_of(t, j, &slot, &want);
        int64_t sc = s == OT_OK ? slot_scale(slot) : 1, nout = nall / sc;
        if (s == OT_OK) s = ckpt_flat_slot(t, ck, j, flat, nout);
        size_t esz = ot_dtype_size(want.dtype);
        ot_tensor v;
        if (s == OT_OK && t->shard_len) {
            ot_tensor_borrow(
                &v, &want,
                flat + (want.rank ? (size_t)rank * (size_t)(t->shard_len / sc) * esz : 0));
            s = ot_tpu_optimizer_set_state(t->topt, r->dev, j, &v);
        }
        if (s == OT_OK && t->shard_len && t->psize > 1) { /* the other processes' blocks */
            size_t bytes = (size_t)nout * esz;
            if (!t->shard_restore) t->shard_restore = ot_calloc((size_t)S, sizeof(char *));
            char *keep = t->shard_restore ? ot_malloc(bytes) : NULL;
            if (!keep) {
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: restored optimizer state");
            } else {
                memcpy(keep, flat, bytes);
                ot_free(t->shard_restore[j]);
                t->shard_restore[j] = keep;
            }
        }
        for (int k = 0; s == OT_OK && !t->shard_len && k < t->nparams; k++) {
            ot_shape sh;
            s = ot_tpu_optimizer_state_shape(t->topt, k * S + j, &sh);
            if (s != OT_OK) break;
            ot_tensor_borrow(&v, &sh, flat + (sh.rank ? (size_t)(t->fpos[k] / sc) * esz : 0));
            s = ot_tpu_optimizer_set_state(t->topt, r->dev, k * S + j, &v);
        }
    }
    ot_free(flat);
    return s;
}

ot_status train_shard_restore_share(trainer *t, ot_comm *comm) {
    int S = state_slots(t);
    int64_t nout = t->shard_len * (int64_t)t->shard_pod;
    ot_status s = OT_OK;
    if (t->prank == 0 && !t->shard_restore)
        s = ot_error(OT_ERR_INTERNAL, "train: no restored sharded optimizer state to share");
    for (int j = 0; s == OT_OK && j < S; j++) {
        const char *slot = NULL;
        ot_shape want;
        s = slot_of(t, j, &slot, &want);
        if (s != OT_OK) break;
        int64_t sc = slot_scale(slot);
        size_t esz = ot_dtype_size(want.dtype), bytes = (size_t)(want.rank ? nout / sc : 1) * esz;
        char *buf = t->prank == 0 ? t->shard_restore[j] : ot_malloc(bytes);
        if (!buf) s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: restored optimizer state");
        if (s == OT_OK) s = ot_comm_broadcast(comm, buf, bytes, OT_U8, 0, NULL);
        for (int r = 0; s == OT_OK && t->prank != 0 && r < t->nlive; r++) {
            size_t g = (size_t)t->prank * (size_t)t->nlive + (size_t)r;
            ot_tensor v;
            ot_tensor_borrow(&v, &want,
                             buf + (want.rank ? g * (size_t)(t->shard_len / sc) * esz : 0));
            s = ot_tpu_optimizer_set_state(t->topt, t->reps[r].dev, j, &v);
        }
        if (t->prank != 0) ot_free(buf);
    }
    train_shard_restore_free(t);
    return s;
}

void train_shard_restore_free(trainer *t) {
    for (int j = 0; t->shard_restore && j < state_slots(t); j++) ot_free(t->shard_restore[j]);
    ot_free(t->shard_restore);
    t->shard_restore = NULL;
}

/* The gradient compression as recorded ("none", "bf16", "int8", "topk:0.01"). */
static void compress_desc(const trainer *t, char *buf, size_t cap) {
    if (t->compress == OT_COMPRESS_TOPK)
        snprintf(buf, cap, "topk:%g", t->topk_fraction);
    else
        snprintf(buf, cap, "%s",
                 t->compress == OT_COMPRESS_NONE ? "none" : ot_grad_compress_name(t->compress));
}

/* The manifest's "optimizer" object (ot_malloc'd JSON): its configuration and what the state
 * belongs to; with compression, whose error-feedback residuals it holds (role "residual"). */
static char *state_json(trainer *t) {
    json_t *j = json_pack("{s:s, s:f, s:s, s:s, s:s, s:I, s:I, s:s}", "name", optimizer_name(t),
                          "lr", t->o->lr, "schedule", ot_lr_schedule_kind(t->sched), "model",
                          t->state_model, "state_layout", t->state_layout, "state_tensors",
                          (json_int_t)(t->shard_len ? t->nparams * state_slots(t)
                                                    : ot_tpu_optimizer_state_count(t->topt)),
                          "batch_size", (json_int_t)t->o->batch_size, "data",
                          t->o->dataset ? t->o->dataset : "digits");
    /* sharded: the optim role holds one shard per device of shard_len elements per slot */
    if (j && t->shard_len &&
        (json_object_set_new(j, "shard_devices", json_integer(t->shard_pod)) ||
         json_object_set_new(j, "shard_len", json_integer(t->shard_len)))) {
        json_decref(j);
        j = NULL;
    }
    if (j && t->compress != OT_COMPRESS_NONE) {
        char cd[48];
        compress_desc(t, cd, sizeof cd);
        if (json_object_set_new(j, "grad_compress", json_string(cd)) ||
            json_object_set_new(j, "residual_devices", json_integer(t->ck_resid_n))) {
            json_decref(j);
            j = NULL;
        }
    }
    /* LocalSGD: the averaging period and whose states the checkpoint holds (every device's in
     * one process: role "replica" for all but the leader; across processes the leader's only) */
    if (j && t->local_sgd > 0 &&
        (json_object_set_new(j, "local_sgd", json_integer(t->local_sgd)) ||
         json_object_set_new(j, "replica_states", json_integer(t->ck_rep ? t->ck_rep_n : 1)))) {
        json_decref(j);
        j = NULL;
    }
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
    /* with compression the checkpoint must hold this compression's residuals of this pod */
    const char *rc = json_string_value(json_object_get(j, "grad_compress"));
    json_int_t rdev = json_integer_value(json_object_get(j, "residual_devices"));
    char cd[48];
    compress_desc(t, cd, sizeof cd);
    int n = t->nlive * t->psize;
    if (s == OT_OK && t->compress != OT_COMPRESS_NONE && (!rc || strcmp(rc, cd) != 0))
        s = ot_error(OT_ERR_FAILED_PRECONDITION,
                     "train: the checkpoint of step %lld in %s was saved %s%s, this run uses "
                     "--grad-compress %s: it holds no error-feedback residuals of that "
                     "compression, so the resumed run could not continue the interrupted one "
                     "(resume with %s%s, or start over with --fresh or another --ckpt-dir)",
                     (long long)m->step, t->o->ckpt_dir,
                     rc ? "with --grad-compress "
                        : "without "
                          "--grad-compress",
                     rc ? rc : "", cd,
                     rc ? "--grad-compress "
                        : "no "
                          "--grad-compress",
                     rc ? rc : "");
    else if (s == OT_OK && t->compress != OT_COMPRESS_NONE && rdev != n)
        s = ot_error(OT_ERR_FAILED_PRECONDITION,
                     "train: the checkpoint of step %lld in %s holds the error-feedback residuals "
                     "of %lld devices; this run has %d (resume with --devices %lld, or start "
                     "over with --fresh or another --ckpt-dir)",
                     (long long)m->step, t->o->ckpt_dir, (long long)rdev, n, (long long)rdev);
    /* LocalSGD: every device's own state, of this pod's devices (a synchronous run's checkpoint,
     * whose replicas were identical, serves as every device's) */
    json_int_t lsgd = json_integer_value(json_object_get(j, "local_sgd"));
    json_int_t nst = json_integer_value(json_object_get(j, "replica_states"));
    if (s == OT_OK && t->local_sgd > 0 && lsgd > 0 && nst != n)
        s = ot_error(OT_ERR_FAILED_PRECONDITION,
                     "train: the checkpoint of step %lld in %s holds the LocalSGD state of %lld of "
                     "its devices; this run has %d (%s, or start over with --fresh or another "
                     "--ckpt-dir)",
                     (long long)m->step, t->o->ckpt_dir, (long long)nst, n,
                     nst > 1 ? "resume with the same --devices"
                             : "a run across processes checkpoints process 0's devices only");
    bool want_states = t->local_sgd > 0 && lsgd > 0 && n > 1;
    json_decref(j);
    if (s != OT_OK) return s;
    for (int g = 1; want_states && g < n; g++) {
        int ns = ot_tpu_optimizer_state_count(t->topt);
        for (int i = 0; i < t->nparams + ns; i++) {
            char rn[160];
            ot_shape want;
            if (i < t->nparams)
                want = *ot_model_param_shape(t->model, i);
            else
                OT_CHECK(ot_tpu_optimizer_state_shape(t->topt, i - t->nparams, &want));
            snprintf(rn, sizeof rn, "r%d.%s", g,
                     i < t->nparams ? ot_model_param_name(t->model, i)
                                    : ot_tpu_optimizer_state_name(t->topt, i - t->nparams));
            ot_tensor v;
            if (ot_ckpt_get(ck, "replica", rn, &v) != OT_OK || !ot_shape_equal(&v.shape, &want))
                return ot_error(OT_ERR_CORRUPT_DATA,
                                "%s: device %d's LocalSGD state %s is "
                                "missing or of another shape",
                                ot_ckpt_dir(ck), g, rn);
        }
    }
    if (t->compress != OT_COMPRESS_NONE) {
        ot_tensor v;
        if (ot_ckpt_get(ck, "residual", "error_feedback", &v) != OT_OK)
            return ot_error(OT_ERR_CORRUPT_DATA, "%s: no error-feedback residuals",
                            ot_ckpt_dir(ck));
        if (v.shape.dtype != OT_F32 || v.shape.rank != 2 || v.shape.dims[0] != n ||
            v.shape.dims[1] != t->total_elems)
            return ot_error(OT_ERR_CORRUPT_DATA,
                            "%s: the error-feedback residuals are not f32[%d, %lld]",
                            ot_ckpt_dir(ck), n, (long long)t->total_elems);
    }
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
    int64_t shard_n, shard_len;
    ckpt_shard_info(ck, &shard_n, &shard_len);
    if (t->shard_len || shard_n > 0) return check_flat_state(t, ck);
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
ot_status train_save_checkpoint(trainer *t, replica *r, int64_t step, double loss) {
    int nstate = ot_tpu_optimizer_state_count(t->topt);
    /* sharded: every device's block of the state, one optim shard each (the snapshot step.c
     * took at this step); else the leader's state */
    int nshard = t->shard_len ? t->ck_shard_n : 0, nown = t->shard_len ? 0 : nstate;
    ot_tensor *host = ot_calloc((size_t)(t->nparams + nstate), sizeof *host);
    ot_ckpt_tensor *ct = ot_calloc((size_t)(t->nparams + nstate), sizeof *ct);
    ot_ckpt_tensor *st = ot_calloc((size_t)nshard * (size_t)nstate + 1, sizeof *st);
    char(*stn)[160] = ot_calloc((size_t)nshard * (size_t)nstate + 1, sizeof *stn);
    ot_ckpt_shard *shards = ot_calloc((size_t)nshard + 4, sizeof *shards);
    ot_status s = (host && ct && st && stn && shards)
                      ? OT_OK
                      : ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint staging");
    if (s == OT_OK && t->shard_len && t->ck_shard_step != step)
        s = ot_error(OT_ERR_INTERNAL, "train: no sharded optimizer state of step %lld",
                     (long long)step);
    for (int g = 0; s == OT_OK && g < nshard; g++)
        for (int i = 0; i < nstate; i++) {
            size_t x = (size_t)g * (size_t)nstate + (size_t)i;
            const char *sn = ot_tpu_optimizer_state_name(t->topt, i);
            const ot_tensor *v = &t->ck_shard[x];
            snprintf(stn[x], sizeof stn[x], "shard%d.%s", g, strchr(sn, '.') + 1);
            st[x] = (ot_ckpt_tensor){stn[x], v->shape, v->data};
        }
    int got = 0;
    for (int k = 0; s == OT_OK && k < t->nparams; k++, got++) {
        s = ot_buffer_to_host(r->params[k], &host[k]);
        if (s == OT_OK)
            ct[k] = (ot_ckpt_tensor){ot_model_param_name(t->model, k), host[k].shape, host[k].data};
    }
    for (int i = 0; s == OT_OK && i < nown; i++, got++) {
        s = ot_tpu_optimizer_get_state(t->topt, r->dev, i, &host[t->nparams + i]);
        if (s == OT_OK)
            ct[t->nparams + i] =
                (ot_ckpt_tensor){ot_tpu_optimizer_state_name(t->topt, i),
                                 host[t->nparams + i].shape, host[t->nparams + i].data};
    }
    /* with compression: every member's residuals, snapshotted at this step (step.c) */
    ot_ckpt_tensor resid;
    size_t nshards = 2;
    /* LocalSGD in one process: every other member's parameters and optimizer state */
    int k = t->nparams + nstate, nrep = 0;
    ot_ckpt_tensor *rt = NULL;
    char(*rnames)[160] = NULL;
    if (s == OT_OK && t->ck_rep) {
        if (t->ck_rep_step != step)
            s = ot_error(OT_ERR_INTERNAL, "train: no LocalSGD replica states of step %lld",
                         (long long)step);
        nrep = s == OT_OK ? (t->ck_rep_n - 1) * k : 0;
        rt = ot_calloc((size_t)nrep + 1, sizeof *rt);
        rnames = ot_calloc((size_t)nrep + 1, sizeof *rnames);
        if (s == OT_OK && (!rt || !rnames))
            s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: checkpoint staging");
        for (int g = 1; s == OT_OK && g < t->ck_rep_n; g++)
            for (int i = 0; i < k; i++) {
                int j = (g - 1) * k + i;
                const ot_tensor *v = &t->ck_rep[(size_t)g * (size_t)k + (size_t)i];
                snprintf(rnames[j], sizeof rnames[j], "r%d.%s", g,
                         i < t->nparams ? ot_model_param_name(t->model, i)
                                        : ot_tpu_optimizer_state_name(t->topt, i - t->nparams));
                rt[j] = (ot_ckpt_tensor){rnames[j], v->shape, v->data};
            }
    }
    if (s == OT_OK && t->compress != OT_COMPRESS_NONE) {
        if (!t->ck_resid || t->ck_resid_step != step)
            s = ot_error(OT_ERR_INTERNAL, "train: no error-feedback residuals of step %lld",
                         (long long)step);
        ot_shape rs;
        ot_shape_make(&rs, OT_F32, 2, (int64_t[]){t->ck_resid_n, t->total_elems});
        resid = (ot_ckpt_tensor){"error_feedback", rs, t->ck_resid};
        nshards = 3;
    }
    if (s == OT_OK) {
        shards[0] = (ot_ckpt_shard){"model", 0, 1, ct, (size_t)t->nparams};
        shards[1] = (ot_ckpt_shard){"optim", 0, 1, ct + t->nparams, (size_t)nstate};
        shards[2] = (ot_ckpt_shard){"residual", 0, 1, &resid, 1};
        if (nrep > 0) shards[nshards++] = (ot_ckpt_shard){"replica", 0, 1, rt, (size_t)nrep};
        if (nshard > 0) {
            shards[1] = (ot_ckpt_shard){"optim", 0, nshard, st, (size_t)nstate};
            for (int g = 1; g < nshard; g++)
                shards[nshards++] = (ot_ckpt_shard){
                    "optim", g, nshard, st + (size_t)g * (size_t)nstate, (size_t)nstate};
        }
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
            .nshards = nshards,
            .pod = {t->nlive * t->psize, t->psize, 1,
                    t->pod_vt->epoch ? (int64_t)t->pod_vt->epoch(t) : 0, topo},
            .optimizer_json = optjson,
            .rng_algorithm = "splitmix64",
            .rng_state = rng,
            .rng_words = 1,
            .data_epoch = step / (t->train.n / t->step_batch),
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
    ot_free(st);
    ot_free(stn);
    ot_free(shards);
    ot_free(rt);
    ot_free(rnames);
    return s;
}

/* Loads checkpoint ck into replica r (params and optimizer state): the leader's, or with LocalSGD
 * the replica's own when the checkpoint holds every device's (checked by accept_ckpt). */
static ot_status load_checkpoint(trainer *t, const ot_ckpt *ck, replica *r) {
    ot_tensor views[MAX_PARAMS];
    int g = t->prank * t->nlive + (int)(r - t->reps);
    char name[160];
    ot_tensor probe;
    snprintf(name, sizeof name, "r%d.%s", g, ot_model_param_name(t->model, 0));
    bool own = t->local_sgd > 0 && g > 0 && ot_ckpt_get(ck, "replica", name, &probe) == OT_OK;
    ot_clear_error();
    for (int k = 0; k < t->nparams; k++) {
        snprintf(name, sizeof name, "r%d.%s", g, ot_model_param_name(t->model, k));
        ot_status s = own ? ot_ckpt_get(ck, "replica", name, &views[k])
                          : ot_ckpt_get(ck, "model", ot_model_param_name(t->model, k), &views[k]);
        if (s != OT_OK) return s;
        if (!ot_shape_equal(&views[k].shape, ot_model_param_shape(t->model, k)))
            return ot_error(OT_ERR_SHAPE_MISMATCH, "checkpoint %s: parameter %s has another shape",
                            ot_ckpt_dir(ck), ot_model_param_name(t->model, k));
    }
    ot_status s = train_put_params(t, r, views);
    int64_t shard_n, shard_len;
    ckpt_shard_info(ck, &shard_n, &shard_len);
    bool flat = t->shard_len || shard_n > 0; /* either side sharded */
    if (s == OT_OK && flat) s = load_flat_state(t, ck, r, g);
    int nstate = flat ? 0 : ot_tpu_optimizer_state_count(t->topt);
    for (int i = 0; s == OT_OK && i < nstate; i++) {
        ot_tensor v;
        snprintf(name, sizeof name, "r%d.%s", g, ot_tpu_optimizer_state_name(t->topt, i));
        s = own ? ot_ckpt_get(ck, "replica", name, &v)
                : ot_ckpt_get(ck, "optim", ot_tpu_optimizer_state_name(t->topt, i), &v);
        if (s == OT_OK) s = ot_tpu_optimizer_set_state(t->topt, r->dev, i, &v);
    }
    if (s == OT_OK && t->compress != OT_COMPRESS_NONE && !t->resid_init) {
        /* checked by accept_ckpt: f32[members, total_elems]; kept until the next segment starts */
        ot_tensor v;
        s = ot_ckpt_get(ck, "residual", "error_feedback", &v);
        if (s == OT_OK && !(t->resid_init = ot_malloc(v.nbytes)))
            s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: restored residuals");
        if (s == OT_OK) {
            memcpy(t->resid_init, v.data, v.nbytes);
            t->resid_init_n = (int)v.shape.dims[0];
        }
    }
    return s;
}

ot_ckpt_options train_ckpt_options(const trainer *t) {
    ot_ckpt_options co = ot_ckpt_options_default();
    co.retention.keep_last = t->o->keep > 0 ? t->o->keep : 0;
    co.replicas = t->o->ckpt_replicas;
    co.nreplicas = t->o->nckpt_replicas > 0 ? (size_t)t->o->nckpt_replicas : 0;
    return co;
}

typedef struct step_copy {
    int64_t step;
    char *path;
} step_copy;

static int cmp_copy_desc(const void *a, const void *b) {
    int64_t x = ((const step_copy *)a)->step, y = ((const step_copy *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* With replicas, a resume that finds checkpoints but no copy of any of them that verifies stops
 * instead of starting over (the copies are the run's; nothing is moved): every committed copy in
 * ckpt_dir and its replicas, newest step first, until one verifies. */
static ot_status check_some_copy_verifies(trainer *t, const ot_ckpt_options *co) {
    step_copy *v = NULL;
    size_t n = 0, cap = 0;
    ot_status s = OT_OK;
    for (size_t r = 0; s == OT_OK && r <= co->nreplicas; r++) {
        const char *root = r == 0 ? t->o->ckpt_dir : co->replicas[r - 1];
        ot_ckpt_entry *e = NULL;
        size_t ne = 0;
        s = ot_ckpt_list(root, &e, &ne);
        if (s == OT_ERR_NOT_FOUND) {
            ot_clear_error();
            s = OT_OK;
            continue;
        }
        for (size_t i = 0; s == OT_OK && i < ne; i++) {
            if (!e[i].committed) continue;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 16;
                step_copy *nv = ot_realloc(v, nc * sizeof *nv);
                if (!nv) {
                    s = ot_error(OT_ERR_OUT_OF_MEMORY, "train: checkpoint list");
                    break;
                }
                v = nv;
                cap = nc;
            }
            v[n].step = e[i].step;
            v[n].path = e[i].path;
            e[i].path = NULL; /* moved into v */
            n++;
        }
        ot_ckpt_entries_free(e, ne);
    }
    if (s == OT_OK && n > 0) {
        qsort(v, n, sizeof *v, cmp_copy_desc);
        bool any = false;
        char newest[600] = "";
        for (size_t i = 0; i < n && !any; i++) {
            any = ot_ckpt_verify_dir(v[i].path, NULL) == OT_OK;
            if (!any && !newest[0]) snprintf(newest, sizeof newest, "%s", ot_last_error());
        }
        ot_clear_error();
        if (!any)
            s = ot_error(OT_ERR_FAILED_PRECONDITION,
                         "train: no copy of any checkpoint in %s or its %zu replica(s) verifies "
                         "(%zu copies checked; newest: %s); nothing was moved: inspect them with "
                         "optitpu ckpt verify, or start over with --fresh",
                         t->o->ckpt_dir, co->nreplicas, n, newest);
    }
    for (size_t i = 0; i < n; i++) ot_free(v[i].path);
    ot_free(v);
    return s;
}

/* Every replica's copy of the restored step (step_dir, verified) that is missing or fails
 * verification is replaced by a copy of step_dir. A replica that cannot be repaired is logged and
 * the run goes on with the copies it has. */
static void repair_replicas(trainer *t, const ot_ckpt_options *co, const char *step_dir,
                            int64_t step) {
    const char *base = strrchr(step_dir, '/');
    base = base ? base + 1 : step_dir;
    const char *prim[1] = {t->o->ckpt_dir};
    ot_ckpt_options from_primary = ot_ckpt_options_default();
    from_primary.replicas = prim;
    from_primary.nreplicas = 1;
    for (size_t r = 0; r < co->nreplicas; r++) {
        char *p = ot_ft_join(co->replicas[r], base);
        if (!p) {
            train_log(t, "warning: out of memory checking replica %s", co->replicas[r]);
            continue;
        }
        bool present = ot_ft_exists(p);
        if (present && ot_ckpt_verify_dir(p, NULL) == OT_OK) {
            ot_free(p);
            continue;
        }
        char why[512];
        snprintf(why, sizeof why, "%s", present ? ot_last_error() : "missing");
        if (ot_ckpt_repair(co->replicas[r], &from_primary, step) == OT_OK)
            train_log(t, "checkpoint step %lld: replica copy %s repaired from %s (it was: %s)",
                      (long long)step, p, step_dir, why);
        else
            train_log(t,
                      "warning: checkpoint step %lld: replica copy %s is bad (%s) and could not "
                      "be repaired: %s",
                      (long long)step, p, why, ot_last_error());
        ot_clear_error();
        ot_free(p);
    }
}

ot_status train_restore_latest(trainer *t, int64_t *step, bool *found) {
    *found = false;
    ot_ckpt_options co = train_ckpt_options(t);
    if (co.nreplicas > 0) {
        ot_status cs = check_some_copy_verifies(t, &co);
        if (cs != OT_OK) return cs;
    }
    ot_ckpt *ck = NULL;
    ot_ckpt_restore_report rr;
    memset(&rr, 0, sizeof rr);
    ot_status s = ot_ckpt_resume(t->o->ckpt_dir, &co, accept_ckpt, t, &ck, &rr);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", s == OT_OK ? "" : ot_last_error());
    for (size_t i = 0; i < rr.nskipped; i++)
        train_log(t, "checkpoint step %lld skipped: %s%s%s", (long long)rr.skipped[i].step,
                  rr.skipped[i].reason ? rr.skipped[i].reason : "",
                  rr.skipped[i].moved_to ? "; set aside as " : "",
                  rr.skipped[i].moved_to ? rr.skipped[i].moved_to : "");
    if (s == OT_OK && rr.nrepaired > 0)
        train_log(t, "checkpoint step %lld: the copy in %s was repaired from a replica",
                  (long long)ot_ckpt_step(ck), t->o->ckpt_dir);
    ot_ckpt_restore_report_clear(&rr);
    if (s == OT_ERR_NOT_FOUND) {
        ot_clear_error();
        return OT_OK;
    }
    if (s != OT_OK) s = ot_error(s, "%s", msg);
    if (s != OT_OK) return s;
    if (co.nreplicas > 0) repair_replicas(t, &co, ot_ckpt_dir(ck), ot_ckpt_step(ck));
    for (int r = 0; s == OT_OK && r < t->nlive; r++) s = load_checkpoint(t, ck, &t->reps[r]);
    if (s == OT_OK) {
        *step = ot_ckpt_step(ck);
        *found = true;
    }
    ot_ckpt_free(ck);
    return s;
}

/* One root (ckpt_dir or a replica): holding checkpoints without fresh is refused, else emptied. */
static ot_status prepare_root(trainer *t, const char *root) {
    ot_ckpt_entry *e = NULL;
    size_t n = 0;
    ot_status s = ot_ckpt_list(root, &e, &n);
    if (s == OT_ERR_NOT_FOUND) {
        ot_clear_error();
        return OT_OK;
    }
    if (s != OT_OK) return s;
    if (n > 0 && !t->o->fresh) {
        s = ot_error(OT_ERR_ALREADY_EXISTS,
                     "train: %s already holds %zu checkpoint(s) (newest step %lld): pass --resume "
                     "to continue from them or --fresh to delete them",
                     root, n, (long long)e[n - 1].step);
    }
    /* whatever each entry is (a set-aside step may be a file or a symlink): removed as such */
    for (size_t i = 0; s == OT_OK && i < n; i++) s = ot_ft_rmtree(e[i].path);
    if (s == OT_OK && n > 0)
        train_log(t, "--fresh: deleted %zu old checkpoint(s) from %s", n, root);
    ot_ckpt_entries_free(e, n);
    return s;
}

ot_status train_prepare_ckpt_dir(trainer *t) {
    ot_status s = prepare_root(t, t->o->ckpt_dir);
    for (int r = 0; s == OT_OK && r < t->o->nckpt_replicas; r++)
        s = prepare_root(t, t->o->ckpt_replicas[r]);
    return s;
}

ot_status train_init_params(trainer *t) {
    ot_tensor init[MAX_PARAMS];
    ot_status s = ot_model_init(t->model, t->o->seed, init);
    if (s != OT_OK) return s;
    for (int r = 0; s == OT_OK && r < t->nlive; r++) s = train_put_params(t, &t->reps[r], init);
    for (int k = 0; k < t->nparams; k++) ot_tensor_release(&init[k]);
    return s;
}

/* Every optimizer state tensor of replica src copied into replica dst. */
ot_status train_copy_optimizer_state(trainer *t, const replica *src, const replica *dst) {
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
