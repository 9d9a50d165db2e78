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
/* The dtypes a checkpoint holds one tensor of each: every core dtype before c64 (complex
 * tensors are not written to safetensors). */
#define CKPT_DTYPES OT_C64

typedef struct test_state {
    ot_ckpt_tensor params[CKPT_DTYPES];
    ot_ckpt_tensor optim[2][2];
    ot_ckpt_shard shards[3];
    char names[CKPT_DTYPES][16];
    void *bufs[CKPT_DTYPES + 4];
    uint64_t rng[4];
    ot_ckpt_metric metrics[1];
    ot_ckpt_save_args args;
} test_state;

static inline void test_state_init(test_state *s, int64_t step, int64_t scale) {
    memset(s, 0, sizeof *s);
    int nb = 0;
    for (int d = 0; d < CKPT_DTYPES; d++) {
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
    s->shards[0] = (ot_ckpt_shard){"model", 0, 1, s->params, CKPT_DTYPES};
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
    for (int i = 0; i < CKPT_DTYPES + 4; i++) free(s->bufs[i]);
}

/* 0 when ck holds exactly test_state(step). */
static inline int test_state_compare(const ot_ckpt *ck, int64_t step, int64_t scale) {
    test_state s;
    test_state_init(&s, step, scale);
    int bad = 0;
    if (ot_ckpt_step(ck) != step) bad++;
    for (int d = 0; d < CKPT_DTYPES; d++) {
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

/* Reads a whole file (malloc'd, NUL-terminated); NULL when it cannot. */
static inline char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        if (len) *len = (size_t)n;
    }
    return b;
}

static inline int spit(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int rc = fwrite(buf, 1, len, f) == len ? 0 : -1;
    if (fclose(f) != 0) rc = -1;
    return rc;
}

/* Makes step_dir/manifest.json describe the current bytes of step_dir/FILE (size and SHA-256)
 * and recomputes the manifest's own digest: the manifest then verifies, whatever FILE now holds
 * (what a careless tool or a deliberate swap would leave). 0 on success. */
static inline int manifest_refit(const char *step_dir, const char *file) {
    char mp[1024], fp[1024];
    snprintf(mp, sizeof mp, "%s/manifest.json", step_dir);
    snprintf(fp, sizeof fp, "%s/%s", step_dir, file);
    size_t flen = 0, mlen = 0;
    char *fb = slurp(fp, &flen), *mb = slurp(mp, &mlen);
    int rc = -1;
    if (!fb || !mb) goto out;
    char key[600];
    snprintf(key, sizeof key, "\"path\": \"%s\"", file);
    char *at = strstr(mb, key);
    char *size = at ? strstr(at, "\"size\": ") : NULL;
    char *sha = size ? strstr(size, "\"sha256\": \"") : NULL;
    char *dig = strstr(mb, "\"manifest_sha256\": \"");
    if (!sha || !dig) goto out;
    uint8_t d[32];
    char hex[65];
    if (ot_sha256_digest(fb, flen, d) != OT_OK) goto out;
    ot_hex(d, 32, hex);
    memcpy(sha + strlen("\"sha256\": \""), hex, 64);
    /* the size's digits may change in number: rebuild the text around them */
    char *num = size + strlen("\"size\": ");
    char *num_end = num + strspn(num, "0123456789");
    char *nb = malloc(mlen + 64);
    if (!nb) goto out;
    size_t k = (size_t)(num - mb);
    memcpy(nb, mb, k);
    k += (size_t)sprintf(nb + k, "%zu", flen);
    size_t rest = mlen - (size_t)(num_end - mb);
    memcpy(nb + k, num_end, rest);
    k += rest;
    nb[k] = 0;
    char *nd = strstr(nb, "\"manifest_sha256\": \"") + strlen("\"manifest_sha256\": \"");
    memset(nd, '0', 64);
    if (ot_sha256_digest(nb, k, d) == OT_OK) {
        ot_hex(d, 32, hex);
        memcpy(nd, hex, 64);
        rc = spit(mp, nb, k);
    }
    free(nb);
out:
    free(fb);
    free(mb);
    return rc;
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
