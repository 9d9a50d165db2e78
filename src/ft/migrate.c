/* Migration of a workload's state between devices through the verified path: live source first,
 * newest verified checkpoint second, an explicit error when neither verifies. */
#include <stdio.h>
#include <string.h>

#include "ft/ckpt_internal.h"

const char *ot_ft_migrate_path_name(ot_ft_migrate_path p) {
    switch (p) {
    case OT_FT_MIGRATE_LIVE: return "live";
    case OT_FT_MIGRATE_CHECKPOINT: return "checkpoint";
    default: return "none";
    }
}

void ot_ft_migrate_report_clear(ot_ft_migrate_report *rep) {
    if (!rep) return;
    ot_ckpt_restore_report_clear(&rep->restore);
    memset(rep, 0, sizeof *rep);
    rep->step = -1;
    rep->restore.step = -1;
}

/* Tensors of safetensors handles as ot_ckpt_tensor views (ot_free the array). */
static ot_status views_of(const ot_safetensors *const *files, size_t nfiles, ot_ckpt_tensor **out,
                          size_t *n) {
    size_t total = 0;
    for (size_t f = 0; f < nfiles; f++) total += ot_safetensors_count(files[f]);
    ot_ckpt_tensor *v = ot_calloc(total ? total : 1, sizeof *v);
    if (!v) return ot_error(OT_ERR_OUT_OF_MEMORY, "migrate: out of memory");
    size_t k = 0;
    for (size_t f = 0; f < nfiles; f++) {
        for (size_t i = 0; i < ot_safetensors_count(files[f]); i++) {
            const ot_st_info *t = ot_safetensors_at(files[f], i);
            ot_tensor view;
            ot_status rc = ot_safetensors_tensor(files[f], t->name, &view);
            if (rc != OT_OK) {
                ot_free(v);
                return rc;
            }
            v[k++] = (ot_ckpt_tensor){t->name, view.shape, view.data};
        }
    }
    *out = v;
    *n = k;
    return OT_OK;
}

static ot_status same_tensors(const char *what, const ot_ckpt_tensor *want, size_t nw,
                              const ot_ckpt_tensor *got, size_t ng) {
    if (nw != ng)
        return ot_error(OT_ERR_CORRUPT_DATA, "migrate: target holds %zu %s tensors, expected %zu",
                        ng, what, nw);
    /* positional: a sharded optimizer state can repeat names across shards */
    for (size_t i = 0; i < nw; i++) {
        const ot_ckpt_tensor *g = &got[i];
        if (!g->name || strcmp(g->name, want[i].name) != 0 ||
            !ot_shape_equal(&g->shape, &want[i].shape))
            return ot_error(OT_ERR_CORRUPT_DATA,
                            "migrate: target's %s tensor %zu ('%s') has another name or shape",
                            what, i, want[i].name);
        size_t nb = (size_t)ot_shape_nbytes_unchecked(&want[i].shape);
        if (nb && (!g->data || memcmp(g->data, want[i].data, nb) != 0))
            return ot_error(OT_ERR_CORRUPT_DATA, "migrate: target's %s tensor '%s' differs", what,
                            want[i].name);
    }
    return OT_OK;
}

/* Loads st into the sink and, when it can read back, checks the target holds exactly st. */
static ot_status load_and_verify(const ot_ft_state_sink *dst, const ot_ft_state *st,
                                 ot_ft_migrate_report *rep) {
    OT_CHECK(dst->load(dst->ctx, st));
    rep->verified_readback = false;
    if (!dst->read_back) return OT_OK;
    ot_ft_state back;
    memset(&back, 0, sizeof back);
    ot_status rc = dst->read_back(dst->ctx, &back);
    if (rc == OT_OK && back.step != st->step)
        rc = ot_error(OT_ERR_CORRUPT_DATA, "migrate: target reports step %lld, expected %lld",
                      (long long)back.step, (long long)st->step);
    if (rc == OT_OK)
        rc = same_tensors("parameter", st->params, st->nparams, back.params, back.nparams);
    if (rc == OT_OK) rc = same_tensors("optimizer", st->optim, st->noptim, back.optim, back.noptim);
    if (dst->release) dst->release(dst->ctx, &back);
    if (rc == OT_OK) rep->verified_readback = true;
    return rc;
}

static uint64_t state_bytes(const ot_ft_state *st) {
    uint64_t b = 0;
    for (size_t i = 0; i < st->nparams; i++)
        b += (uint64_t)ot_shape_nbytes_unchecked(&st->params[i].shape);
    for (size_t i = 0; i < st->noptim; i++)
        b += (uint64_t)ot_shape_nbytes_unchecked(&st->optim[i].shape);
    return b;
}

/* Live path: read, serialize to safetensors images (validated like a checkpoint), parse them back,
 * load the parsed tensors, verify the read-back. */
static ot_status migrate_live(const ot_ft_state_source *src, const ot_ft_state_sink *dst,
                              ot_ft_migrate_report *rep) {
    ot_ft_state st;
    memset(&st, 0, sizeof st);
    OT_CHECK(src->read(src->ctx, &st));
    ot_status rc = OT_OK;
    void *img[2] = {NULL, NULL};
    size_t len[2] = {0, 0};
    ot_safetensors *parsed[2] = {NULL, NULL};
    ot_ckpt_tensor *views[2] = {NULL, NULL};
    size_t nviews[2] = {0, 0};
    int64_t step = st.step;
    ot_ckpt_shard shards[2] = {{"model", 0, 1, st.params, st.nparams},
                               {"optim", 0, 1, st.optim, st.noptim}};
    ot_ckpt_save_args a = {.step = st.step, .shards = shards, .nshards = 2};
    rc = ot_ckpt_check_args(&a);
    for (int k = 0; k < 2 && rc == OT_OK; k++) {
        ot_st_entry *e = ot_calloc(shards[k].ntensors ? shards[k].ntensors : 1, sizeof *e);
        if (!e) {
            rc = ot_error(OT_ERR_OUT_OF_MEMORY, "migrate: out of memory");
            break;
        }
        for (size_t i = 0; i < shards[k].ntensors; i++) {
            const ot_ckpt_tensor *t = &shards[k].tensors[i];
            e[i] = (ot_st_entry){t->name, ot_st_dtype_from_core(t->shape.dtype), t->shape.rank,
                                 t->shape.dims, t->data};
        }
        rc = ot_safetensors_serialize(e, shards[k].ntensors, NULL, 0, &img[k], &len[k]);
        ot_free(e);
    }
    if (src->release) src->release(src->ctx, &st); /* the images own the bytes from here on */
    for (int k = 0; k < 2 && rc == OT_OK; k++) {
        rc = ot_safetensors_parse(img[k], len[k], &parsed[k]);
        if (rc == OT_OK)
            rc = views_of((const ot_safetensors *const *)&parsed[k], 1, &views[k], &nviews[k]);
    }
    if (rc == OT_OK) {
        ot_ft_state copy = {step, views[0], nviews[0], views[1], nviews[1]};
        rc = load_and_verify(dst, &copy, rep);
        if (rc == OT_OK) {
            rep->step = step;
            rep->bytes = state_bytes(&copy);
        }
    }
    for (int k = 0; k < 2; k++) {
        ot_free(views[k]);
        ot_safetensors_free(parsed[k]);
        ot_free(img[k]);
    }
    return rc;
}

static ot_status migrate_ckpt(const char *root, const ot_ckpt_options *o,
                              const ot_ft_state_sink *dst, ot_ft_migrate_report *rep) {
    ot_ckpt *ck;
    OT_CHECK(ot_ckpt_restore_latest(root, o, &ck, &rep->restore));
    size_t nf = ot_ckpt_file_count(ck);
    const ot_ckpt_manifest *m = ot_ckpt_manifest_of(ck);
    const ot_safetensors **pf = ot_calloc(nf ? nf : 1, sizeof *pf);
    const ot_safetensors **of = ot_calloc(nf ? nf : 1, sizeof *of);
    size_t np = 0, no = 0;
    ot_ckpt_tensor *pv = NULL, *ov = NULL;
    size_t npv = 0, nov = 0;
    ot_status rc = OT_OK;
    if (!pf || !of) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "migrate: out of memory");
        goto out;
    }
    for (size_t i = 0; i < nf; i++) {
        if (!strcmp(m->files[i].role, "model"))
            pf[np++] = ot_ckpt_file(ck, i);
        else if (!strcmp(m->files[i].role, "optim"))
            of[no++] = ot_ckpt_file(ck, i);
    }
    OT_CHECK_GOTO(views_of(pf, np, &pv, &npv), rc, out);
    OT_CHECK_GOTO(views_of(of, no, &ov, &nov), rc, out);
    ot_ft_state st = {ot_ckpt_step(ck), pv, npv, ov, nov};
    OT_CHECK_GOTO(load_and_verify(dst, &st, rep), rc, out);
    rep->step = st.step;
    rep->bytes = state_bytes(&st);
out:
    ot_free(pv);
    ot_free(ov);
    ot_free(pf);
    ot_free(of);
    ot_ckpt_free(ck);
    return rc;
}

ot_status ot_ft_migrate(const ot_ft_state_source *live, const char *ckpt_root,
                        const ot_ckpt_options *o, const ot_ft_state_sink *dst,
                        ot_ft_migrate_report *rep) {
    if (!dst || !dst->load || !rep)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "migrate: a sink with load() and a report");
    memset(rep, 0, sizeof *rep);
    rep->step = -1;
    rep->restore.step = -1;
    if (live && live->read) {
        ot_status rc = migrate_live(live, dst, rep);
        if (rc == OT_OK) {
            rep->path = OT_FT_MIGRATE_LIVE;
            rep->live_status = OT_OK;
            return OT_OK;
        }
        rep->live_status = rc;
        snprintf(rep->live_error, sizeof rep->live_error, "%s", ot_last_error());
        ot_log(OT_LOG_WARN, "migrate: live source failed (%s); trying the checkpoints",
               rep->live_error);
    } else {
        rep->live_status = OT_ERR_NOT_FOUND;
        snprintf(rep->live_error, sizeof rep->live_error, "no live source");
    }
    if (!ckpt_root)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "migrate: no verified source: live device: %s; no checkpoint root",
                        rep->live_error);
    ot_status rc = migrate_ckpt(ckpt_root, o, dst, rep);
    if (rc == OT_OK) {
        rep->path = OT_FT_MIGRATE_CHECKPOINT;
        return OT_OK;
    }
    char ck[512];
    snprintf(ck, sizeof ck, "%s", ot_last_error());
    return ot_error(OT_ERR_FAILED_PRECONDITION,
                    "migrate: no verified source: live device: %s; checkpoints: %s",
                    rep->live_error, ck);
}
