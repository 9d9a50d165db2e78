/* manifest.json: building, canonical self-digest, validated parsing. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ft/ckpt_internal.h"

#define FORMAT_NAME   "optitpu-checkpoint"
#define MAX_RNG_WORDS 1024
#define MAX_SHARDS    1000000

static bool role_ok(const char *r) {
    if (!r || !*r || strlen(r) > 64) return false;
    for (const char *p = r; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
    return true;
}

static bool file_name_ok(const char *f) {
    size_t n = strlen(f);
    if (n < 13 || n > 200 || strcmp(f + n - 12, ".safetensors") != 0 || f[0] == '.') return false;
    for (const char *p = f; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-' || *p == '.'))
            return false;
    return true;
}

static bool hex_decode(const char *s, uint8_t *out, size_t nbytes) {
    if (strlen(s) != 2 * nbytes) return false;
    for (size_t i = 0; i < 2 * nbytes; i++) {
        char c = s[i];
        int v = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (v < 0) return false;
        if (i % 2 == 0)
            out[i / 2] = (uint8_t)(v << 4);
        else
            out[i / 2] |= (uint8_t)v;
    }
    return true;
}

void ot_ckpt_shard_file(const ot_ckpt_shard *s, char *buf, size_t n) {
    if (s->count <= 1)
        snprintf(buf, n, "%s.safetensors", s->role);
    else
        snprintf(buf, n, "%s-%05d-of-%05d.safetensors", s->role, s->index, s->count);
}

ot_status ot_ckpt_check_args(const ot_ckpt_save_args *a) {
    if (!a) return ot_error(OT_ERR_INVALID_ARGUMENT, "checkpoint: NULL save arguments");
    if (a->step < 0 || a->step > 999999999999LL)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "checkpoint: step %lld out of range",
                        (long long)a->step);
    if (a->nshards && !a->shards)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "checkpoint: NULL shards");
    for (size_t i = 0; i < a->nshards; i++) {
        const ot_ckpt_shard *s = &a->shards[i];
        if (!role_ok(s->role))
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "checkpoint: shard %zu: role '%s' must be [a-z0-9_]{1,64}", i,
                            s->role ? s->role : "(null)");
        int count = s->count <= 0 ? 1 : s->count;
        if (s->index < 0 || s->index >= count || count > MAX_SHARDS)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "checkpoint: shard %zu: index %d of %d", i,
                            s->index, s->count);
        if (s->ntensors && !s->tensors)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "checkpoint: shard %zu: NULL tensors", i);
        char fi[256], fj[256];
        ot_ckpt_shard_file(s, fi, sizeof fi);
        for (size_t j = 0; j < i; j++) {
            ot_ckpt_shard_file(&a->shards[j], fj, sizeof fj);
            if (!strcmp(fi, fj))
                return ot_error(OT_ERR_INVALID_ARGUMENT, "checkpoint: two shards map to %s", fi);
        }
        for (size_t t = 0; t < s->ntensors; t++) {
            const ot_ckpt_tensor *x = &s->tensors[t];
            int64_t nb;
            if (!x->name || ot_st_dtype_from_core(x->shape.dtype) == OT_ST_DTYPE_INVALID ||
                x->shape.rank < 0 || x->shape.rank > OT_MAX_RANK ||
                ot_shape_nbytes(&x->shape, &nb) != OT_OK || (nb > 0 && !x->data))
                return ot_error(OT_ERR_INVALID_ARGUMENT,
                                "checkpoint: role %s shard %d: tensor %zu ('%s') is invalid",
                                s->role, s->index, t, x->name ? x->name : "(null)");
        }
    }
    if (a->rng_words > MAX_RNG_WORDS || (a->rng_words && !a->rng_state))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "checkpoint: RNG state of %zu words",
                        a->rng_words);
    for (size_t i = 0; i < a->nmetrics; i++)
        if (!a->metrics[i].name || !isfinite(a->metrics[i].value))
            return ot_error(OT_ERR_INVALID_ARGUMENT, "checkpoint: metric %zu is not finite", i);
    if (a->pod.num_devices < 0 || a->pod.num_processes < 0 || a->pod.num_hosts < 0 ||
        a->pod.membership_epoch < 0 || a->data_epoch < 0 || a->data_index < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "checkpoint: negative pod or data position");
    if (a->optimizer_json) {
        json_error_t e;
        json_t *o = json_loads(a->optimizer_json, JSON_REJECT_DUPLICATES, &e);
        bool ok = o && json_is_object(o);
        json_decref(o);
        if (!ok)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "checkpoint: optimizer configuration is not a JSON object");
    }
    return OT_OK;
}

/* The manifest's own digest: SHA-256 of the file's bytes with the 64 hex digits of its
 * "manifest_sha256" value (the last key) replaced by '0'. Covering the raw bytes (not a re-
 * serialization) means any changed byte is detected, even one that leaves the JSON's meaning
 * unchanged (such as the 18th significant digit of a number). *at receives the offset of the
 * digits. */
#define DIGEST_KEY "\"manifest_sha256\""

static bool find_digest(const char *buf, size_t len, size_t *at) {
    size_t kl = strlen(DIGEST_KEY);
    if (len < kl + 64) return false;
    size_t i = len - kl;
    for (;;) {
        if (memcmp(buf + i, DIGEST_KEY, kl) == 0) break;
        if (i == 0) return false;
        i--;
    }
    size_t p = i + kl;
    while (p < len && (buf[p] == ' ' || buf[p] == '\n' || buf[p] == '\t' || buf[p] == '\r')) p++;
    if (p >= len || buf[p++] != ':') return false;
    while (p < len && (buf[p] == ' ' || buf[p] == '\n' || buf[p] == '\t' || buf[p] == '\r')) p++;
    if (p >= len || buf[p++] != '"' || len - p < 65 || buf[p + 64] != '"') return false;
    *at = p;
    return true;
}

static ot_status raw_digest(const char *buf, size_t len, size_t at, char hex[65]) {
    ot_sha256 h;
    uint8_t d[32];
    static const char zeros[64] =
        "0000000000000000000000000000000000000000000000000000000000000000";
    OT_CHECK(ot_sha256_init(&h));
    ot_status rc = ot_sha256_update(&h, buf, at);
    if (rc == OT_OK) rc = ot_sha256_update(&h, zeros, 64);
    if (rc == OT_OK) rc = ot_sha256_update(&h, buf + at + 64, len - at - 64);
    if (rc != OT_OK) {
        ot_sha256_final(&h, NULL);
        return rc;
    }
    OT_CHECK(ot_sha256_final(&h, d));
    ot_hex(d, 32, hex);
    return OT_OK;
}

ot_status ot_ckpt_manifest_build(const ot_ckpt_save_args *a, const ot_ckpt_file_entry *files,
                                 size_t nfiles, int64_t time_unix_ns, char **out, size_t *len) {
    *out = NULL;
    json_t *r = json_object();
    if (!r) return ot_error(OT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
    ot_status rc = OT_OK;
    char iso[64];
    time_t secs = (time_t)(time_unix_ns / 1000000000);
    struct tm tmv;
    gmtime_r(&secs, &tmv);
    strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    json_object_set_new(r, "format", json_string(FORMAT_NAME));
    json_object_set_new(r, "format_version", json_integer(OT_CKPT_FORMAT_VERSION));
    json_object_set_new(r, "step", json_integer(a->step));
    json_object_set_new(r, "time_unix_ns", json_integer(time_unix_ns));
    json_object_set_new(r, "time", json_string(iso));
    json_t *pod = json_object();
    json_object_set_new(pod, "num_devices", json_integer(a->pod.num_devices));
    json_object_set_new(pod, "num_processes", json_integer(a->pod.num_processes));
    json_object_set_new(pod, "num_hosts", json_integer(a->pod.num_hosts));
    json_object_set_new(pod, "membership_epoch", json_integer(a->pod.membership_epoch));
    json_t *topo = json_string(a->pod.topology ? a->pod.topology : "");
    if (!topo) {
        rc = ot_error(OT_ERR_INVALID_ARGUMENT, "manifest: topology is not UTF-8");
        json_decref(pod);
        goto out;
    }
    json_object_set_new(pod, "topology", topo);
    json_object_set_new(r, "pod", pod);
    json_t *opt = a->optimizer_json ? json_loads(a->optimizer_json, 0, NULL) : json_object();
    if (!opt || !json_is_object(opt)) {
        json_decref(opt);
        rc = ot_error(OT_ERR_INVALID_ARGUMENT, "manifest: optimizer is not a JSON object");
        goto out;
    }
    json_object_set_new(r, "optimizer", opt);
    json_t *rng = json_object(), *st = json_array();
    json_t *alg = json_string(a->rng_algorithm ? a->rng_algorithm : "");
    if (!alg) {
        json_decref(rng), json_decref(st);
        rc = ot_error(OT_ERR_INVALID_ARGUMENT, "manifest: RNG algorithm is not UTF-8");
        goto out;
    }
    json_object_set_new(rng, "algorithm", alg);
    for (size_t i = 0; i < a->rng_words; i++) {
        char h[17];
        snprintf(h, sizeof h, "%016llx", (unsigned long long)a->rng_state[i]);
        json_array_append_new(st, json_string(h));
    }
    json_object_set_new(rng, "state", st);
    json_object_set_new(r, "rng", rng);
    json_t *dp = json_object();
    json_object_set_new(dp, "epoch", json_integer(a->data_epoch));
    json_object_set_new(dp, "index", json_integer(a->data_index));
    json_object_set_new(r, "data_position", dp);
    json_t *mt = json_object();
    for (size_t i = 0; i < a->nmetrics; i++) {
        if (json_object_set_new(mt, a->metrics[i].name, json_real(a->metrics[i].value)) != 0) {
            json_decref(mt);
            rc = ot_error(OT_ERR_INVALID_ARGUMENT, "manifest: bad metric '%s'", a->metrics[i].name);
            goto out;
        }
    }
    json_object_set_new(r, "metrics", mt);
    json_t *fa = json_array();
    for (size_t i = 0; i < nfiles; i++) {
        json_t *f = json_object();
        char hex[65];
        ot_hex(files[i].sha256, 32, hex);
        json_object_set_new(f, "path", json_string(files[i].path));
        json_object_set_new(f, "role", json_string(files[i].role));
        json_object_set_new(f, "shard", json_integer(files[i].shard));
        json_object_set_new(f, "shards", json_integer(files[i].shards));
        json_object_set_new(f, "size", json_integer((json_int_t)files[i].size));
        json_object_set_new(f, "sha256", json_string(hex));
        json_array_append_new(fa, f);
    }
    json_object_set_new(r, "files", fa);
    /* last key, so that it is the last occurrence in the file (see find_digest) */
    json_object_set_new(
        r, "manifest_sha256",
        json_string("0000000000000000000000000000000000000000000000000000000000000000"));
    char *s = json_dumps(r, JSON_INDENT(2));
    if (!s) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
        goto out;
    }
    size_t n = strlen(s);
    *out = ot_malloc(n + 2);
    if (!*out) {
        free(s);
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
        goto out;
    }
    memcpy(*out, s, n);
    (*out)[n] = '\n';
    (*out)[n + 1] = '\0';
    *len = n + 1;
    free(s);
    size_t at;
    char hex[65];
    if (!find_digest(*out, *len, &at)) {
        rc = ot_error(OT_ERR_INTERNAL, "manifest: digest placeholder not found");
    } else if ((rc = raw_digest(*out, *len, at, hex)) == OT_OK) {
        memcpy(*out + at, hex, 64);
    }
    if (rc != OT_OK) {
        ot_free(*out);
        *out = NULL;
    }
out:
    json_decref(r);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Parsing
 * ------------------------------------------------------------------------------------------- */

typedef struct manifest_owner {
    ot_arena *arena;
} manifest_owner;

#define BAD(...) (rc = ot_error(OT_ERR_CORRUPT_DATA, "manifest: " __VA_ARGS__))

static bool get_i64(json_t *o, const char *k, int64_t min, int64_t max, int64_t *out) {
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v)) return false;
    json_int_t x = json_integer_value(v);
    if (x < min || x > max) return false;
    *out = x;
    return true;
}

static _Thread_local bool g_oom; /* set when get_str failed for lack of memory */

static const char *get_str(ot_arena *a, json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    if (!json_is_string(v)) return NULL;
    const char *s = ot_arena_strndup(a, json_string_value(v), json_string_length(v));
    if (!s) g_oom = true;
    return s;
}

void ot_ckpt_manifest_free(ot_ckpt_manifest *m) {
    if (!m) return;
    manifest_owner *own = m->internal_;
    if (own) {
        ot_arena_free(own->arena);
        ot_free(own);
    }
    ot_free(m);
}

bool ot_ckpt_manifest_metric(const ot_ckpt_manifest *m, const char *name, double *value) {
    for (size_t i = 0; i < m->nmetrics; i++) {
        if (!strcmp(m->metrics[i].name, name)) {
            *value = m->metrics[i].value;
            return true;
        }
    }
    return false;
}

static ot_status parse_root(json_t *r, ot_ckpt_manifest *m, ot_arena *a) {
    ot_status rc = OT_OK;
    int64_t v;
    json_t *fmt = json_object_get(r, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), FORMAT_NAME) != 0)
        return BAD("\"format\" is not \"" FORMAT_NAME "\"");
    if (!get_i64(r, "format_version", 1, 1000, &v)) return BAD("bad \"format_version\"");
    if (v != OT_CKPT_FORMAT_VERSION)
        return ot_error(OT_ERR_UNIMPLEMENTED, "manifest: format_version %lld (this build reads %d)",
                        (long long)v, OT_CKPT_FORMAT_VERSION);
    m->format_version = (int)v;
    if (!get_i64(r, "step", 0, 999999999999LL, &m->step)) return BAD("bad \"step\"");
    if (!get_i64(r, "time_unix_ns", 0, INT64_MAX, &m->time_unix_ns))
        return BAD("bad \"time_unix_ns\"");
    if (!json_is_string(json_object_get(r, "time"))) return BAD("bad \"time\"");
    json_t *pod = json_object_get(r, "pod");
    if (!json_is_object(pod)) return BAD("\"pod\" is not an object");
    if (!get_i64(pod, "num_devices", 0, INT32_MAX, &v)) return BAD("bad pod.num_devices");
    m->pod.num_devices = (int)v;
    if (!get_i64(pod, "num_processes", 0, INT32_MAX, &v)) return BAD("bad pod.num_processes");
    m->pod.num_processes = (int)v;
    if (!get_i64(pod, "num_hosts", 0, INT32_MAX, &v)) return BAD("bad pod.num_hosts");
    m->pod.num_hosts = (int)v;
    if (!get_i64(pod, "membership_epoch", 0, INT64_MAX, &m->pod.membership_epoch))
        return BAD("bad pod.membership_epoch");
    if (!(m->pod.topology = get_str(a, pod, "topology"))) return BAD("bad pod.topology");
    json_t *opt = json_object_get(r, "optimizer");
    if (!json_is_object(opt)) return BAD("\"optimizer\" is not an object");
    char *os = json_dumps(opt, JSON_COMPACT);
    if (!os) return ot_error(OT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
    m->optimizer_json = ot_arena_strndup(a, os, strlen(os));
    free(os);
    if (!m->optimizer_json) return ot_error(OT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
    json_t *rng = json_object_get(r, "rng");
    if (!json_is_object(rng)) return BAD("\"rng\" is not an object");
    if (!(m->rng_algorithm = get_str(a, rng, "algorithm"))) return BAD("bad rng.algorithm");
    json_t *st = json_object_get(rng, "state");
    if (!json_is_array(st) || json_array_size(st) > MAX_RNG_WORDS) return BAD("bad rng.state");
    size_t nw = json_array_size(st);
    uint64_t *words = ot_arena_alloc(a, (nw ? nw : 1) * 8, 8);
    if (!words) return ot_error(OT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
    for (size_t i = 0; i < nw; i++) {
        json_t *w = json_array_get(st, i);
        uint8_t b[8];
        if (!json_is_string(w) || !hex_decode(json_string_value(w), b, 8))
            return BAD("rng.state[%zu] is not 16 hex digits", i);
        uint64_t x = 0;
        for (int k = 0; k < 8; k++) x = (x << 8) | b[k];
        words[i] = x;
    }
    m->rng_state = words;
    m->rng_words = nw;
    json_t *dp = json_object_get(r, "data_position");
    if (!json_is_object(dp) || !get_i64(dp, "epoch", 0, INT64_MAX, &m->data_epoch) ||
        !get_i64(dp, "index", 0, INT64_MAX, &m->data_index))
        return BAD("bad \"data_position\"");
    json_t *mt = json_object_get(r, "metrics");
    if (!json_is_object(mt)) return BAD("\"metrics\" is not an object");
    size_t nm = json_object_size(mt);
    ot_ckpt_metric *ms = ot_arena_alloc(a, (nm ? nm : 1) * sizeof *ms, 8);
    if (!ms) return ot_error(OT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
    const char *k;
    json_t *x;
    size_t i = 0;
    json_object_foreach(mt, k, x) {
        if (!json_is_number(x) || !isfinite(json_number_value(x)))
            return BAD("metric '%s' is not a finite number", k);
        ms[i].name = ot_arena_strndup(a, k, strlen(k));
        ms[i].value = json_number_value(x);
        if (!ms[i].name) return ot_error(OT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
        i++;
    }
    m->metrics = ms;
    m->nmetrics = nm;
    json_t *fa = json_object_get(r, "files");
    if (!json_is_array(fa) || json_array_size(fa) > 1000000)
        return BAD("\"files\" is not an array");
    size_t nf = json_array_size(fa);
    ot_ckpt_file_entry *fs = ot_arena_alloc(a, (nf ? nf : 1) * sizeof *fs, 8);
    if (!fs) return ot_error(OT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
    for (i = 0; i < nf; i++) {
        json_t *f = json_array_get(fa, i);
        if (!json_is_object(f)) return BAD("files[%zu] is not an object", i);
        ot_ckpt_file_entry *e = &fs[i];
        if (!(e->path = get_str(a, f, "path")) || !file_name_ok(e->path))
            return BAD("files[%zu].path is not a plain *.safetensors file name", i);
        if (!(e->role = get_str(a, f, "role")) || !role_ok(e->role))
            return BAD("files[%zu].role is invalid", i);
        int64_t sh, shs, sz;
        if (!get_i64(f, "shards", 1, MAX_SHARDS, &shs) || !get_i64(f, "shard", 0, shs - 1, &sh))
            return BAD("files[%zu]: bad shard/shards", i);
        e->shard = (int)sh;
        e->shards = (int)shs;
        if (!get_i64(f, "size", 8, INT64_MAX, &sz)) return BAD("files[%zu]: bad size", i);
        e->size = (uint64_t)sz;
        json_t *h = json_object_get(f, "sha256");
        if (!json_is_string(h) || !hex_decode(json_string_value(h), e->sha256, 32))
            return BAD("files[%zu].sha256 is not 64 lower-case hex digits", i);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(fs[j].path, e->path)) return BAD("file %s listed twice", e->path);
    }
    m->files = fs;
    m->nfiles = nf;
    return rc;
}

ot_status ot_ckpt_manifest_parse(const void *buf, size_t len, bool check_digest,
                                 ot_ckpt_manifest **out) {
    *out = NULL;
    ot_status rc = OT_OK;
    json_error_t jerr;
    json_t *r = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!r)
        return ot_error(OT_ERR_CORRUPT_DATA, "manifest: JSON: %s (line %d)", jerr.text, jerr.line);
    ot_ckpt_manifest *m = ot_calloc(1, sizeof *m);
    manifest_owner *own = ot_calloc(1, sizeof *own);
    if (m) m->internal_ = own;
    if (!m || !own || !(own->arena = ot_arena_new(4096))) {
        if (!m) ot_free(own);
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
        goto fail;
    }
    if (!json_is_object(r)) {
        BAD("not a JSON object");
        goto fail;
    }
    json_t *d = json_object_get(r, "manifest_sha256");
    uint8_t want[32];
    if (!json_is_string(d) || !hex_decode(json_string_value(d), want, 32)) {
        BAD("\"manifest_sha256\" missing or not 64 hex digits");
        goto fail;
    }
    if (check_digest) {
        size_t at;
        char hex[65];
        if (!find_digest(buf, len, &at) ||
            memcmp((const char *)buf + at, json_string_value(d), 64) != 0) {
            BAD("\"manifest_sha256\" is not the last key");
            goto fail;
        }
        OT_CHECK_GOTO(raw_digest(buf, len, at, hex), rc, fail);
        if (memcmp(hex, json_string_value(d), 64) != 0) {
            BAD("content does not match its manifest_sha256 (the manifest is corrupt)");
            goto fail;
        }
    }
    g_oom = false;
    rc = parse_root(r, m, own->arena);
    if (rc != OT_OK && g_oom) rc = ot_error(OT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
    if (rc != OT_OK) goto fail;
    json_decref(r);
    *out = m;
    return OT_OK;
fail:
    json_decref(r);
    ot_ckpt_manifest_free(m);
    return rc;
}
