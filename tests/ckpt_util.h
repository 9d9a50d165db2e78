/* Shared helpers for the checkpoint tests: a deterministic training state per step. */
#ifndef OT_CKPT_UTIL_H
#define OT_CKPT_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "optitpu/ft.h"
#include "st_pattern.h"

/* One tensor per core dtype in "model", two optimizer shards of f32 m/v. Data depends on step. */
typedef struct test_state {
    ot_ckpt_tensor params[OT_DTYPE_COUNT];
    ot_ckpt_tensor optim[2][2];
    ot_ckpt_shard shards[3];
    char names[OT_DTYPE_COUNT][16];
    void *bufs[OT_DTYPE_COUNT + 4];
    uint64_t rng[4];
    ot_ckpt_metric metrics[1];
    ot_ckpt_save_args args;
} test_state;

static inline void test_state_init(test_state *s, int64_t step, int64_t scale) {
    memset(s, 0, sizeof *s);
    int nb = 0;
    for (int d = 0; d < OT_DTYPE_COUNT; d++) {
        int64_t dims[2] = {3 + d % 4, scale};
        ot_shape_make(&s->params[d].shape, (ot_dtype)d, 2, dims);
        size_t n = (size_t)ot_shape_nbytes_unchecked(&s->params[d].shape);
        s->bufs[nb] = malloc(n ? n : 1);
        st_pattern(ot_st_dtype_from_core((ot_dtype)d), (uint64_t)(dims[0] * dims[1]),
                   (uint64_t)(step * 31 + d), s->bufs[nb]);
        snprintf(s->names[d], sizeof s->names[d], "p_%s", ot_dtype_name((ot_dtype)d));
        s->params[d].name = s->names[d];
        s->params[d].data = s->bufs[nb++];
    }
    static const char *on[2] = {"m", "v"};
    for (int sh = 0; sh < 2; sh++) {
        for (int k = 0; k < 2; k++) {
            int64_t dims[1] = {scale * 4 + sh};
            ot_shape_make(&s->optim[sh][k].shape, OT_F32, 1, dims);
            s->bufs[nb] = malloc((size_t)dims[0] * 4);
            st_pattern(OT_ST_F32, (uint64_t)dims[0], (uint64_t)(step * 7 + sh * 2 + k),
                       s->bufs[nb]);
            s->optim[sh][k].name = on[k];
            s->optim[sh][k].data = s->bufs[nb++];
        }
    }
    s->shards[0] = (ot_ckpt_shard){"model", 0, 1, s->params, OT_DTYPE_COUNT};
    s->shards[1] = (ot_ckpt_shard){"optim", 0, 2, s->optim[0], 2};
    s->shards[2] = (ot_ckpt_shard){"optim", 1, 2, s->optim[1], 2};
    for (int i = 0; i < 4; i++) s->rng[i] = 0x9E3779B97F4A7C15ull * (uint64_t)(step + i + 1);
    s->metrics[0] = (ot_ckpt_metric){"loss", 1.0 / (double)(step + 1)};
    s->args = (ot_ckpt_save_args){
        .step = step,
        .shards = s->shards,
        .nshards = 3,
        .pod = {.num_devices = 4,
                .num_processes = 2,
                .num_hosts = 1,
                .membership_epoch = 7,
                .topology = "1 host x 2 processes x 2 devices"},
        .optimizer_json = "{\"name\":\"adam\",\"lr\":0.001,\"betas\":[0.9,0.999]}",
        .rng_algorithm = "philox4x32",
        .rng_state = s->rng,
        .rng_words = 4,
        .data_epoch = step / 10,
        .data_index = step * 64,
        .metrics = s->metrics,
        .nmetrics = 1,
    };
}

static inline void test_state_free(test_state *s) {
    for (int i = 0; i < OT_DTYPE_COUNT + 4; i++) free(s->bufs[i]);
}

/* 0 when ck holds exactly test_state(step). */
static inline int test_state_compare(const ot_ckpt *ck, int64_t step, int64_t scale) {
    test_state s;
    test_state_init(&s, step, scale);
    int bad = 0;
    if (ot_ckpt_step(ck) != step) bad++;
    for (int d = 0; d < OT_DTYPE_COUNT; d++) {
        ot_tensor v;
        if (ot_ckpt_get(ck, "model", s.params[d].name, &v) != OT_OK ||
            !ot_shape_equal(&v.shape, &s.params[d].shape) ||
            memcmp(v.data, s.params[d].data, v.nbytes) != 0)
            bad++;
    }
    /* the two optimizer shards hold tensors with the same names: compare per file */
    const ot_ckpt_manifest *m = ot_ckpt_manifest_of(ck);
    for (size_t f = 0; f < m->nfiles; f++) {
        if (strcmp(m->files[f].role, "optim") != 0) continue;
        int sh = m->files[f].shard;
        for (int k = 0; k < 2; k++) {
            ot_tensor v;
            if (ot_safetensors_tensor(ot_ckpt_file(ck, f), s.optim[sh][k].name, &v) != OT_OK ||
                memcmp(v.data, s.optim[sh][k].data, v.nbytes) != 0)
                bad++;
        }
    }
    if (m->rng_words != 4 || memcmp(m->rng_state, s.rng, 32) != 0) bad++;
    test_state_free(&s);
    return bad;
}

static inline void rm_rf(const char *p) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    if (system(cmd) != 0) fprintf(stderr, "rm -rf %s failed\n", p);
}

static inline char *test_dir(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s_%d", OT_BINARY_DIR, name, (int)getpid());
    rm_rf(b);
    return b;
}

#endif
