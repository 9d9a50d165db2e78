/* Checkpoints: commit protocol, listing, verification, verified load, rollback, retention,
 * replication and repair. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ft/ckpt_internal.h"
#include "ft/ft_io.h"

char *ot_ckpt_step_path(const char *root, int64_t step, bool tmp) {
    char name[64];
    snprintf(name, sizeof name, "step_%08lld%s", (long long)step, tmp ? ".tmp" : "");
    return ot_ft_join(root, name);
}

enum { NAME_COMMITTED = 0, NAME_TMP, NAME_DAMAGED };

/* "step_<digits>" (committed), "step_<digits>.tmp" or "step_<digits>.damaged[.<digits>]" (set
 * aside); anything else is not ours. */
static bool parse_step_name(const char *n, int64_t *step, int *kind) {
    if (strncmp(n, "step_", 5) != 0) return false;
    const char *p = n + 5;
    int64_t v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        if (digits >= 15) return false;
        v = v * 10 + (*p++ - '0');
        digits++;
    }
    if (digits < 8) return false;
    if (*p == '\0') {
        *kind = NAME_COMMITTED;
    } else if (!strcmp(p, ".tmp")) {
        *kind = NAME_TMP;
    } else if (!strncmp(p, ".damaged", 8)) {
        const char *q = p + 8;
        if (*q == '.') {
            q++;
            if (*q < '1' || *q > '9' || strlen(q) > 9) return false;
            while (*q >= '0' && *q <= '9') q++;
        }
        if (*q != '\0') return false;
        *kind = NAME_DAMAGED;
    } else {
        return false;
    }
    *step = v;
    return true;
}

static int cmp_entry(const void *a, const void *b) {
    const ot_ckpt_entry *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    if (x->committed != y->committed) return (int)y->committed - (int)x->committed;
    return strcmp(x->path, y->path);
}

void ot_ckpt_entries_free(ot_ckpt_entry *e, size_t n) {
    if (!e) return;
    for (size_t i = 0; i < n; i++) ot_free(e[i].path);
    ot_free(e);
}

ot_status ot_ckpt_list(const char *root, ot_ckpt_entry **out, size_t *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(root);
    if (!d) {
        if (errno == ENOENT) return ot_error(OT_ERR_NOT_FOUND, "%s: no such directory", root);
        return ot_error(OT_ERR_IO, "opendir %s: %s", root, strerror(errno));
    }
    ot_ckpt_entry *v = NULL;
    size_t cnt = 0, cap = 0;
    ot_status rc = OT_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int64_t step;
        int kind;
        if (!parse_step_name(de->d_name, &step, &kind)) continue;
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 16;
            ot_ckpt_entry *nv = ot_realloc(v, nc * sizeof *nv);
            if (!nv) {
                rc = ot_error(OT_ERR_OUT_OF_MEMORY, "listing %s: out of memory", root);
                break;
            }
            v = nv, cap = nc;
        }
        v[cnt].path = ot_ft_join(root, de->d_name);
        if (!v[cnt].path) {
            rc = ot_error(OT_ERR_OUT_OF_MEMORY, "listing %s: out of memory", root);
            break;
        }
        v[cnt].step = step;
        v[cnt].committed = kind == NAME_COMMITTED;
        v[cnt].damaged = kind == NAME_DAMAGED;
        cnt++;
    }
    closedir(d);
    if (rc != OT_OK) {
        ot_ckpt_entries_free(v, cnt);
        return rc;
    }
    if (cnt) qsort(v, cnt, sizeof *v, cmp_entry);
    *out = v;
    *n = cnt;
    return OT_OK;
}

ot_status ot_ckpt_clean_tmp(const char *root) {
    ot_ckpt_entry *e;
    size_t n;
    OT_CHECK(ot_ckpt_list(root, &e, &n));
    ot_status rc = OT_OK;
    for (size_t i = 0; i < n && rc == OT_OK; i++) {
        if (e[i].committed || e[i].damaged) continue; /* damaged ones are kept for inspection */
        ot_log(OT_LOG_INFO, "checkpoint: removing stale %s", e[i].path);
        rc = ot_ft_rmtree(e[i].path);
    }
    ot_ckpt_entries_free(e, n);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Commit
 * ------------------------------------------------------------------------------------------- */

static ot_status write_shard(const char *dir, const ot_ckpt_save_args *a, const ot_ckpt_shard *s,
                             bool do_fsync, ot_ckpt_file_entry *fe, char *fname) {
    ot_status rc = OT_OK;
    size_t n = s->ntensors;
    ot_st_entry *e = ot_malloc((n ? n : 1) * sizeof *e);
    ot_ft_seg *segs = ot_malloc((n + 1) * sizeof *segs);
    void *hdr = NULL;
    size_t *order = NULL, hl;
    uint64_t dl;
    char *path = NULL;
    if (!e || !segs) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const ot_ckpt_tensor *t = &s->tensors[i];
        e[i] = (ot_st_entry){t->name, ot_st_dtype_from_core(t->shape.dtype), t->shape.rank,
                             t->shape.dims, t->data};
    }
    char stepbuf[32], shardbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)a->step);
    int count = s->count <= 0 ? 1 : s->count;
    snprintf(shardbuf, sizeof shardbuf, "%d/%d", s->index, count);
    ot_st_kv meta[] = {
        {"optitpu.role", s->role}, {"optitpu.shard", shardbuf}, {"optitpu.step", stepbuf}};
    OT_CHECK_GOTO(ot_safetensors_build_header(e, n, meta, 3, &hdr, &hl, &order, &dl), rc, out);
    size_t ns = 0;
    segs[ns++] = (ot_ft_seg){hdr, hl};
    for (size_t k = 0; k < n; k++) {
        const ot_ckpt_tensor *t = &s->tensors[order[k]];
        size_t nb = (size_t)ot_shape_nbytes_unchecked(&t->shape);
        if (nb) segs[ns++] = (ot_ft_seg){t->data, nb};
    }
    ot_ckpt_shard_file(s, fname, 256);
    path = ot_ft_join(dir, fname);
    if (!path) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
        goto out;
    }
    OT_CHECK_GOTO(ot_ft_write_file(path, segs, ns, do_fsync, fe->sha256, &fe->size), rc, out);
    fe->path = fname;
    fe->role = s->role;
    fe->shard = s->index;
    fe->shards = count;
out:
    ot_free(path);
    ot_free(hdr);
    ot_free(order);
    ot_free(segs);
    ot_free(e);
    return rc;
}

/* Shards are written by up to this many threads at once: each file's SHA-256 is one sequential
 * stream (about 1.2 GB/s a core here, below a fast disk's write bandwidth), so files hashed side
 * by side are what lets a save reach the disk's speed. Shards below OT_CKPT_PAR_MIN bytes do not
 * count: a thread costs more than they take. */
#define OT_CKPT_WRITE_THREADS_MAX 4
#define OT_CKPT_PAR_MIN           ((uint64_t)16 << 20)

typedef struct shard_job {
    const char *dir;
    const ot_ckpt_save_args *a;
    bool do_fsync;
    ot_ckpt_file_entry *fe;
    char (*names)[256];
    const size_t *order; /* shards, largest first */
    atomic_size_t next;
    atomic_bool failed;
    ot_ft_prio_group *group; /* the caller's background group (async save), or NULL */
    ot_status *rc;           /* per shard */
    char (*err)[512];        /* per shard: the message of a failure */
} shard_job;

static void shard_work(shard_job *j) {
    for (;;) {
        size_t k = atomic_fetch_add(&j->next, 1);
        if (k >= j->a->nshards || atomic_load(&j->failed)) return;
        size_t i = j->order[k];
        ot_status rc =
            write_shard(j->dir, j->a, &j->a->shards[i], j->do_fsync, &j->fe[i], j->names[i]);
        if (rc != OT_OK) {
            j->rc[i] = rc;
            snprintf(j->err[i], 512, "%s", ot_last_error());
            atomic_store(&j->failed, true);
        }
    }
}

static void *shard_thread(void *arg) {
    shard_job *j = arg;
    ot_ft_background_begin(j->group); /* NULL: stays at normal priority */
    shard_work(j);
    ot_ft_background_end();
    return NULL;
}

static uint64_t shard_bytes(const ot_ckpt_shard *s) {
    uint64_t b = 0;
    for (size_t i = 0; i < s->ntensors; i++) b += ot_shape_nbytes_unchecked(&s->tensors[i].shape);
    return b;
}

/* Writes every shard file into dir: in the calling thread, or (several large shards, threads >
 * 1) by a few threads taking shards largest first. The first failure in shard order is returned;
 * shards not yet started then are skipped. */
static ot_status write_shards(const char *dir, const ot_ckpt_save_args *a, bool do_fsync,
                              int threads, ot_ckpt_file_entry *fe, char (*names)[256]) {
    size_t n = a->nshards, large = 0;
    if (threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c > 0 ? (int)c : 1;
    }
    if (threads > OT_CKPT_WRITE_THREADS_MAX) threads = OT_CKPT_WRITE_THREADS_MAX;
    uint64_t *bytes = ot_malloc((n ? n : 1) * sizeof *bytes);
    size_t *order = ot_malloc((n ? n : 1) * sizeof *order);
    ot_status *rcs = ot_calloc(n ? n : 1, sizeof *rcs);
    char(*err)[512] = ot_malloc((n ? n : 1) * 512);
    pthread_t th[OT_CKPT_WRITE_THREADS_MAX];
    int started = 0;
    ot_status rc = OT_OK;
    if (!bytes || !order || !rcs || !err) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        bytes[i] = shard_bytes(&a->shards[i]);
        order[i] = i;
        rcs[i] = OT_OK;
        if (bytes[i] >= OT_CKPT_PAR_MIN) large++;
    }
    for (size_t i = 1; i < n; i++) { /* largest first, ties in shard order (n is small) */
        size_t v = order[i], k = i;
        for (; k > 0 && bytes[order[k - 1]] < bytes[v]; k--) order[k] = order[k - 1];
        order[k] = v;
    }
    if ((size_t)threads > large) threads = (int)large;
    shard_job j = {.dir = dir,
                   .a = a,
                   .do_fsync = do_fsync,
                   .fe = fe,
                   .names = names,
                   .order = order,
                   .group = ot_ft_background_group(),
                   .rc = rcs,
                   .err = err};
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, false);
    /* the calling thread is one of the writers */
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&th[started], NULL, shard_thread, &j) != 0) break;
        started++;
    }
    shard_work(&j);
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    for (size_t i = 0; i < n && rc == OT_OK; i++) {
        if (rcs[i] != OT_OK) rc = ot_error(rcs[i], "%s", err[i]);
    }
out:
    ot_free(err);
    ot_free(rcs);
    ot_free(order);
    ot_free(bytes);
    return rc;
}

ot_status ot_ckpt_commit(const char *root, const ot_ckpt_save_args *a, bool do_fsync,
                         int write_threads, ot_ckpt_save_stats *stats) {
    OT_CHECK(ot_ckpt_check_args(a));
    uint64_t t0 = ot_now_ns();
    ot_status rc = OT_OK;
    char *tmp = ot_ckpt_step_path(root, a->step, true);
    char *fin = ot_ckpt_step_path(root, a->step, false);
    char *mpath = NULL, *mtext = NULL;
    ot_ckpt_file_entry *fe = ot_calloc(a->nshards ? a->nshards : 1, sizeof *fe);
    char(*names)[256] = ot_calloc(a->nshards ? a->nshards : 1, 256);
    bool made = false;
    if (!tmp || !fin || !fe || !names) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
        goto out;
    }
    if (ot_ft_exists(fin)) {
        rc = ot_error(OT_ERR_ALREADY_EXISTS, "checkpoint: %s is already committed", fin);
        goto out;
    }
    OT_CHECK_GOTO(ot_ft_rmtree(tmp), rc, out); /* a stale attempt at the same step */
    OT_CHECK_GOTO(ot_ft_mkdir(tmp), rc, out);
    made = true;
    uint64_t bytes = 0;
    OT_CHECK_GOTO(write_shards(tmp, a, do_fsync, write_threads, fe, names), rc, out);
    for (size_t i = 0; i < a->nshards; i++) bytes += fe[i].size;
    size_t mlen;
    OT_CHECK_GOTO(ot_ckpt_manifest_build(a, fe, a->nshards, (int64_t)ot_wall_ns(), &mtext, &mlen),
                  rc, out);
    mpath = ot_ft_join(tmp, OT_CKPT_MANIFEST);
    if (!mpath) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
        goto out;
    }
    ot_ft_seg ms = {mtext, mlen};
    OT_CHECK_GOTO(ot_ft_write_file(mpath, &ms, 1, do_fsync, NULL, NULL), rc, out);
    bytes += mlen;
    if (do_fsync) OT_CHECK_GOTO(ot_ft_fsync_path(tmp), rc, out);
    OT_CHECK_GOTO(ot_ft_rename(tmp, fin), rc, out);
    if (do_fsync && (rc = ot_ft_fsync_path(root)) != OT_OK) {
        /* the rename may not be durable: take the checkpoint back rather than report a failure
         * while leaving it visible */
        if (rename(fin, tmp) != 0) {
            made = false;
            rc = ot_error_wrap(rc, "%s stays visible (could not take it back: %s)", fin,
                               strerror(errno));
        }
        goto out;
    }
    made = false;
    if (stats) {
        stats->step = a->step;
        stats->bytes = bytes;
        stats->write_seconds = (double)(ot_now_ns() - t0) * 1e-9;
    }
out:
    if (rc != OT_OK && made) {
        ot_status keep = rc;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ot_last_error());
        ot_ft_rmtree(tmp); /* the previous checkpoints are untouched */
        rc = ot_error(keep, "%s", msg);
    }
    ot_free(names);
    ot_free(fe);
    ot_free(mtext);
    ot_free(mpath);
    ot_free(fin);
    ot_free(tmp);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Verified load
 * ------------------------------------------------------------------------------------------- */

typedef struct ckpt_file {
    void *map;
    size_t len;
    ot_safetensors *st;
} ckpt_file;

struct ot_ckpt {
    char *dir;
    ot_ckpt_manifest *m;
    ckpt_file *files;
    size_t nfiles;
};

static ot_status read_manifest(const char *dir, ot_ckpt_manifest **m) {
    char *p = ot_ft_join(dir, OT_CKPT_MANIFEST);
    if (!p) return ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
    char *buf;
    size_t len;
    ot_status rc = ot_ft_read_small(p, OT_CKPT_MANIFEST_MAX, &buf, &len);
    if (rc == OT_ERR_NOT_FOUND) rc = ot_error(OT_ERR_CORRUPT_DATA, "%s: missing", p);
    if (rc == OT_OK) {
        rc = ot_ckpt_manifest_parse(buf, len, true, m);
        if (rc != OT_OK) rc = ot_error_wrap(rc, "%s", p);
        ot_free(buf);
    }
    ot_free(p);
    return rc;
}

/* A file's own metadata must say what the manifest lists it as: a file of another step, role or
 * shard (copied in, with a manifest rewritten to match its hash) is not this checkpoint's. */
static ot_status check_file_metadata(const char *p, const ot_safetensors *st,
                                     const ot_ckpt_file_entry *e, int64_t step) {
    char want_step[32], want_shard[32];
    snprintf(want_step, sizeof want_step, "%lld", (long long)step);
    snprintf(want_shard, sizeof want_shard, "%d/%d", e->shard, e->shards);
    const struct {
        const char *key, *want;
    } k[3] = {
        {"optitpu.step", want_step}, {"optitpu.role", e->role}, {"optitpu.shard", want_shard}};
    for (int i = 0; i < 3; i++) {
        const char *v = ot_safetensors_metadata_get(st, k[i].key);
        if (!v)
            return ot_error(OT_ERR_CORRUPT_DATA, "%s: no %s in its metadata (the manifest says %s)",
                            p, k[i].key, k[i].want);
        if (strcmp(v, k[i].want) != 0)
            return ot_error(OT_ERR_CORRUPT_DATA,
                            "%s: its metadata says %s %.64s, the manifest lists it as %s", p,
                            k[i].key, v, k[i].want);
    }
    return OT_OK;
}

/* Maps one file, checks size and SHA-256 against the manifest entry, then parses the very bytes
 * that were hashed and checks the file's metadata against the entry. */
static ot_status load_file(const char *dir, const ot_ckpt_file_entry *e, int64_t step, ckpt_file *f,
                           bool keep) {
    char *p = ot_ft_join(dir, e->path);
    if (!p) return ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
    ot_status rc = OT_OK;
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = errno == ENOENT ? ot_error(OT_ERR_CORRUPT_DATA, "%s: file missing", p)
                             : ot_error(OT_ERR_IO, "open %s: %s", p, strerror(errno));
        goto out;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rc = ot_error(OT_ERR_CORRUPT_DATA, "%s: not a regular file", p);
        close(fd);
        goto out;
    }
    if ((uint64_t)sb.st_size != e->size) {
        rc = ot_error(OT_ERR_CORRUPT_DATA, "%s: size %lld, manifest says %llu", p,
                      (long long)sb.st_size, (unsigned long long)e->size);
        close(fd);
        goto out;
    }
    size_t n = (size_t)e->size;
    void *map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        rc = ot_error(OT_ERR_IO, "mmap %s: %s", p, strerror(errno));
        goto out;
    }
    madvise(map, n, MADV_SEQUENTIAL | MADV_WILLNEED);
    uint8_t d[32];
    rc = ot_sha256_digest(map, n, d);
    if (rc == OT_OK && memcmp(d, e->sha256, 32) != 0)
        rc = ot_error(OT_ERR_CORRUPT_DATA, "%s: SHA-256 does not match the manifest", p);
    if (rc == OT_OK) {
        rc = ot_safetensors_parse(map, n, &f->st);
        if (rc != OT_OK) rc = ot_error_wrap(rc, "%s", p);
    }
    if (rc == OT_OK) rc = check_file_metadata(p, f->st, e, step);
    if (rc != OT_OK || !keep) {
        ot_safetensors_free(f->st);
        f->st = NULL;
        munmap(map, n);
    } else {
        f->map = map;
        f->len = n;
    }
out:
    ot_free(p);
    return rc;
}

void ot_ckpt_free(ot_ckpt *ck) {
    if (!ck) return;
    for (size_t i = 0; i < ck->nfiles; i++) {
        ot_safetensors_free(ck->files[i].st);
        if (ck->files[i].map) munmap(ck->files[i].map, ck->files[i].len);
    }
    ot_free(ck->files);
    ot_ckpt_manifest_free(ck->m);
    ot_free(ck->dir);
    ot_free(ck);
}

/* Step named by the directory (or -1). */
static int64_t dir_step(const char *dir) {
    const char *b = strrchr(dir, '/');
    b = b ? b + 1 : dir;
    int64_t s;
    int kind;
    if (!parse_step_name(b, &s, &kind) || kind != NAME_COMMITTED) return -1;
    return s;
}

ot_status ot_ckpt_load(const char *step_dir, ot_ckpt **out) {
    *out = NULL;
    ot_ckpt *ck = ot_calloc(1, sizeof *ck);
    if (!ck || !(ck->dir = ot_strdup(step_dir))) {
        ot_free(ck);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
    }
    ot_status rc;
    OT_CHECK_GOTO(read_manifest(step_dir, &ck->m), rc, fail);
    int64_t ds = dir_step(step_dir);
    if (ds >= 0 && ds != ck->m->step) {
        rc = ot_error(OT_ERR_CORRUPT_DATA, "%s: manifest is for step %lld", step_dir,
                      (long long)ck->m->step);
        goto fail;
    }
    ck->files = ot_calloc(ck->m->nfiles ? ck->m->nfiles : 1, sizeof *ck->files);
    if (!ck->files) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < ck->m->nfiles; i++) {
        OT_CHECK_GOTO(load_file(step_dir, &ck->m->files[i], ck->m->step, &ck->files[i], true), rc,
                      fail);
        ck->nfiles = i + 1;
    }
    *out = ck;
    return OT_OK;
fail:
    ot_ckpt_free(ck);
    return rc;
}

const ot_ckpt_manifest *ot_ckpt_manifest_of(const ot_ckpt *ck) {
    return ck->m;
}

int64_t ot_ckpt_step(const ot_ckpt *ck) {
    return ck->m->step;
}

const char *ot_ckpt_dir(const ot_ckpt *ck) {
    return ck->dir;
}

size_t ot_ckpt_file_count(const ot_ckpt *ck) {
    return ck->nfiles;
}

const ot_safetensors *ot_ckpt_file(const ot_ckpt *ck, size_t i) {
    return i < ck->nfiles ? ck->files[i].st : NULL;
}

ot_status ot_ckpt_get(const ot_ckpt *ck, const char *role, const char *name, ot_tensor *view) {
    for (size_t i = 0; i < ck->nfiles; i++) {
        if (strcmp(ck->m->files[i].role, role) != 0) continue;
        if (ot_safetensors_find(ck->files[i].st, name))
            return ot_safetensors_tensor(ck->files[i].st, name, view);
    }
    return ot_error(OT_ERR_NOT_FOUND, "checkpoint %s: no tensor '%s' in role '%s'", ck->dir, name,
                    role);
}

/* ---------------------------------------------------------------------------------------------
 * Verification without loading
 * ------------------------------------------------------------------------------------------- */

void ot_ckpt_verify_report_clear(ot_ckpt_verify_report *rep) {
    if (!rep) return;
    for (size_t i = 0; i < rep->nbad; i++) {
        ot_free(rep->bad[i].path);
        ot_free(rep->bad[i].reason);
    }
    ot_free(rep->bad);
    memset(rep, 0, sizeof *rep);
}

static void add_bad(ot_ckpt_verify_report *rep, const char *dir, const char *file, ot_status s) {
    if (!rep) return;
    ot_ckpt_bad_file *nb = ot_realloc(rep->bad, (rep->nbad + 1) * sizeof *nb);
    if (!nb) return;
    rep->bad = nb;
    nb[rep->nbad].path = ot_ft_join(dir, file);
    nb[rep->nbad].status = s;
    nb[rep->nbad].reason = ot_strdup(ot_last_error());
    rep->nbad++;
}

ot_status ot_ckpt_verify_dir(const char *step_dir, ot_ckpt_verify_report *rep) {
    ot_ckpt_verify_report local;
    if (!rep) rep = &local;
    memset(rep, 0, sizeof *rep);
    rep->step = -1;
    ot_ckpt_manifest *m;
    ot_status rc = read_manifest(step_dir, &m);
    if (rc != OT_OK) {
        add_bad(rep, step_dir, OT_CKPT_MANIFEST, rc);
        if (rep == &local) ot_ckpt_verify_report_clear(&local);
        return rc;
    }
    rep->step = m->step;
    rep->nfiles = m->nfiles;
    ot_status first = OT_OK;
    char first_msg[1024] = "";
    int64_t ds = dir_step(step_dir);
    if (ds >= 0 && ds != m->step) {
        first = ot_error(OT_ERR_CORRUPT_DATA, "%s: manifest is for step %lld", step_dir,
                         (long long)m->step);
        add_bad(rep, step_dir, OT_CKPT_MANIFEST, first);
        snprintf(first_msg, sizeof first_msg, "%s", ot_last_error());
    }
    for (size_t i = 0; i < m->nfiles; i++) {
        ckpt_file f = {0};
        ot_status s = load_file(step_dir, &m->files[i], m->step, &f, false);
        if (s == OT_OK) {
            rep->bytes += m->files[i].size;
            continue;
        }
        add_bad(rep, step_dir, m->files[i].path, s);
        if (first == OT_OK) {
            first = s;
            snprintf(first_msg, sizeof first_msg, "%s", ot_last_error());
        }
    }
    ot_ckpt_manifest_free(m);
    if (rep == &local) ot_ckpt_verify_report_clear(&local);
    if (first != OT_OK) return ot_error(first, "%s", first_msg);
    return OT_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Rollback
 * ------------------------------------------------------------------------------------------- */

void ot_ckpt_restore_report_clear(ot_ckpt_restore_report *rep) {
    if (!rep) return;
    for (size_t i = 0; i < rep->nskipped; i++) {
        ot_free(rep->skipped[i].path);
        ot_free(rep->skipped[i].reason);
        ot_free(rep->skipped[i].moved_to);
    }
    ot_free(rep->skipped);
    memset(rep, 0, sizeof *rep);
    rep->step = -1;
}

static void add_skip(ot_ckpt_restore_report *rep, int64_t step, const char *path, ot_status s) {
    if (!rep) return;
    ot_ckpt_skip *ns = ot_realloc(rep->skipped, (rep->nskipped + 1) * sizeof *ns);
    if (!ns) return;
    rep->skipped = ns;
    ns[rep->nskipped] = (ot_ckpt_skip){step, ot_strdup(path), s, ot_strdup(ot_last_error()), NULL};
    rep->nskipped++;
}

static int cmp_i64_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Committed steps of root and the replicas, newest first, without duplicates. */
static ot_status all_steps(const char *root, const ot_ckpt_options *o, int64_t **out, size_t *n) {
    *out = NULL;
    *n = 0;
    size_t nroots = 1 + (o ? o->nreplicas : 0);
    int64_t *v = NULL;
    size_t cnt = 0;
    for (size_t r = 0; r < nroots; r++) {
        const char *rt = r == 0 ? root : o->replicas[r - 1];
        ot_ckpt_entry *e;
        size_t ne;
        ot_status rc = ot_ckpt_list(rt, &e, &ne);
        if (rc == OT_ERR_NOT_FOUND) continue;
        if (rc != OT_OK) {
            ot_free(v);
            return rc;
        }
        int64_t *nv = ot_realloc(v, (cnt + ne + 1) * sizeof *nv);
        if (!nv) {
            ot_ckpt_entries_free(e, ne);
            ot_free(v);
            return ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
        }
        v = nv;
        for (size_t i = 0; i < ne; i++)
            if (e[i].committed) v[cnt++] = e[i].step;
        ot_ckpt_entries_free(e, ne);
    }
    if (cnt) qsort(v, cnt, sizeof *v, cmp_i64_desc);
    size_t u = 0;
    for (size_t i = 0; i < cnt; i++)
        if (u == 0 || v[u - 1] != v[i]) v[u++] = v[i];
    *out = v;
    *n = u;
    return OT_OK;
}

/* The newest committed step that verifies and that accept takes. *nbad counts the steps passed
 * over (all newer than the one returned, or all of them); *stop says accept stopped the walk. */
static ot_status restore_walk(const char *root, const ot_ckpt_options *o, ot_ckpt_accept_fn accept,
                              void *ud, ot_ckpt **out, ot_ckpt_restore_report *rep, bool *stop) {
    *out = NULL;
    *stop = false;
    if (rep) {
        memset(rep, 0, sizeof *rep);
        rep->step = -1;
    }
    int64_t *steps;
    size_t n;
    OT_CHECK(all_steps(root, o, &steps, &n));
    if (n == 0) {
        ot_free(steps);
        return ot_error(OT_ERR_NOT_FOUND, "checkpoint: no committed checkpoint under %s", root);
    }
    ot_status rc = OT_OK;
    char newest[512] = "";
    for (size_t i = 0; i < n; i++) {
        char *p = ot_ckpt_step_path(root, steps[i], false);
        if (!p) {
            rc = ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
            break;
        }
        ot_status s = ot_ft_exists(p) ? ot_ckpt_load(p, out)
                                      : ot_error(OT_ERR_CORRUPT_DATA, "%s: missing", p);
        if (s != OT_OK && o && o->nreplicas > 0) {
            add_skip(rep, steps[i], p, s); /* the primary copy, repaired below if possible */
            if (ot_ckpt_repair(root, o, steps[i]) == OT_OK) {
                if (rep) rep->nrepaired++;
                s = ot_ckpt_load(p, out);
            }
            if (s == OT_OK && rep) { /* repaired: the step was not skipped after all */
                rep->nskipped--;
                ot_free(rep->skipped[rep->nskipped].path);
                ot_free(rep->skipped[rep->nskipped].reason);
            }
        } else if (s != OT_OK) {
            add_skip(rep, steps[i], p, s);
        }
        if (s == OT_OK && accept) {
            s = accept(ud, *out);
            if (s != OT_OK) {
                ot_ckpt_free(*out);
                *out = NULL;
                if (s != OT_ERR_CORRUPT_DATA) { /* not damage: the caller's verdict stands */
                    *stop = true;
                    ot_free(p);
                    ot_free(steps);
                    return s;
                }
                add_skip(rep, steps[i], p, s);
            }
        }
        if (s != OT_OK && !newest[0]) snprintf(newest, sizeof newest, "%s", ot_last_error());
        ot_free(p);
        if (s == OT_OK) {
            if (rep) rep->step = steps[i];
            ot_free(steps);
            return OT_OK;
        }
        if (s == OT_ERR_OUT_OF_MEMORY) {
            rc = s;
            break;
        }
    }
    ot_free(steps);
    if (rc != OT_OK) return rc;
    return ot_error(OT_ERR_CORRUPT_DATA,
                    "checkpoint: none of the %zu checkpoints under %s verifies (newest: %s)", n,
                    root, newest);
}

ot_status ot_ckpt_restore_latest(const char *root, const ot_ckpt_options *o, ot_ckpt **out,
                                 ot_ckpt_restore_report *rep) {
    bool stop;
    return restore_walk(root, o, NULL, NULL, out, rep, &stop);
}

ot_status ot_ckpt_set_aside(const char *root, int64_t step, char **moved_to) {
    if (moved_to) *moved_to = NULL;
    char *from = ot_ckpt_step_path(root, step, false);
    char *to = from ? ot_malloc(strlen(from) + 32) : NULL;
    ot_status rc = OT_OK;
    if (!from || !to) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
        goto out;
    }
    if (!ot_ft_exists(from)) {
        rc = ot_error(OT_ERR_NOT_FOUND, "checkpoint: %s does not exist", from);
        goto out;
    }
    /* the first free name; a bounded search (a root with a million damaged copies of one step is
     * not worth guessing about) */
    bool found = false;
    for (int k = 1; k <= 1000000 && !found; k++) {
        if (k == 1)
            sprintf(to, "%s.damaged", from);
        else
            sprintf(to, "%s.damaged.%d", from, k);
        found = !ot_ft_exists(to);
    }
    if (!found) {
        rc = ot_error(OT_ERR_ALREADY_EXISTS, "checkpoint: no free .damaged name for %s", from);
        goto out;
    }
    /* rename(2) moves the entry itself (a symlink stays a symlink, a loop is not followed) */
    OT_CHECK_GOTO(ot_ft_rename(from, to), rc, out);
    OT_CHECK_GOTO(ot_ft_fsync_path(root), rc, out);
    ot_log(OT_LOG_WARN, "checkpoint: set aside %s as %s", from, to);
    if (moved_to) {
        *moved_to = to;
        to = NULL;
    }
out:
    ot_free(to);
    ot_free(from);
    return rc;
}

ot_status ot_ckpt_resume(const char *root, const ot_ckpt_options *o, ot_ckpt_accept_fn accept,
                         void *ud, ot_ckpt **out, ot_ckpt_restore_report *rep) {
    ot_ckpt_restore_report local;
    if (!rep) rep = &local;
    bool stop;
    ot_status rc = restore_walk(root, o, accept, ud, out, rep, &stop);
    if (stop || (rc != OT_OK && rc != OT_ERR_CORRUPT_DATA)) {
        if (rep == &local) ot_ckpt_restore_report_clear(&local);
        return rc;
    }
    char keep_msg[1024] = "";
    if (rc != OT_OK) snprintf(keep_msg, sizeof keep_msg, "%s", ot_last_error());
    /* every committed step newer than the one loaded failed; set each aside (primary and
     * replicas) so that the steps can be saved again */
    int64_t loaded = rc == OT_OK ? rep->step : -1;
    size_t nroots = 1 + (o ? o->nreplicas : 0);
    ot_status ms = OT_OK;
    for (size_t r = 0; r < nroots && ms == OT_OK; r++) {
        const char *rt = r == 0 ? root : o->replicas[r - 1];
        ot_ckpt_entry *e;
        size_t ne;
        ot_status ls = ot_ckpt_list(rt, &e, &ne);
        if (ls == OT_ERR_NOT_FOUND) continue;
        if (ls != OT_OK) {
            ms = ls;
            break;
        }
        for (size_t i = 0; i < ne && ms == OT_OK; i++) {
            if (!e[i].committed || e[i].step <= loaded) continue;
            char *to = NULL;
            ms = ot_ckpt_set_aside(rt, e[i].step, &to);
            for (size_t k = 0; ms == OT_OK && r == 0 && k < rep->nskipped; k++)
                if (rep->skipped[k].step == e[i].step && !rep->skipped[k].moved_to) {
                    rep->skipped[k].moved_to = to;
                    to = NULL;
                }
            ot_free(to);
        }
        ot_ckpt_entries_free(e, ne);
    }
    if (ms != OT_OK) {
        /* a damaged step left in place would block the save of its step: do not resume */
        ot_ckpt_free(*out);
        *out = NULL;
        ot_status keep = ms;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ot_last_error());
        if (rep == &local) ot_ckpt_restore_report_clear(&local);
        return ot_error(keep, "resume: cannot set a damaged checkpoint aside: %s", msg);
    }
    if (rep == &local) ot_ckpt_restore_report_clear(&local);
    if (rc == OT_OK) return OT_OK;
    return ot_error(OT_ERR_NOT_FOUND, "%s; every one was set aside as step_N.damaged", keep_msg);
}

/* ---------------------------------------------------------------------------------------------
 * Retention
 * ------------------------------------------------------------------------------------------- */

typedef struct ret_item {
    int64_t step;
    char *path;
    bool keep;
    bool has_metric;
    double metric;
} ret_item;

static int cmp_metric(const void *a, const void *b, void *ctx) {
    const ret_item *x = *(ret_item *const *)a, *y = *(ret_item *const *)b;
    bool higher = *(const bool *)ctx;
    if (x->metric != y->metric) return (x->metric > y->metric) == higher ? -1 : 1;
    return x->step > y->step ? -1 : 1;
}

ot_status ot_ckpt_retention_impl(const char *root, const ot_ckpt_retention *r, int64_t known_good,
                                 size_t *ndeleted) {
    if (ndeleted) *ndeleted = 0;
    if (!r || (r->keep_last <= 0 && r->keep_every <= 0 && r->keep_best <= 0)) return OT_OK;
    ot_ckpt_entry *e;
    size_t n;
    OT_CHECK(ot_ckpt_list(root, &e, &n));
    ret_item *it = ot_calloc(n ? n : 1, sizeof *it);
    ret_item **ptrs = ot_calloc(n ? n : 1, sizeof *ptrs);
    ot_status rc = OT_OK;
    if (!it || !ptrs) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "retention: out of memory");
        goto out;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!e[i].committed) continue; /* only fully committed checkpoints are ever deleted */
        it[m].step = e[i].step;
        it[m].path = e[i].path;
        m++;
    }
    /* the newest checkpoint that verifies is never deleted (nor anything newer) */
    for (size_t i = m; i-- > 0;) {
        it[i].keep = true;
        if (it[i].step == known_good || ot_ckpt_verify_dir(it[i].path, NULL) == OT_OK) break;
    }
    if (r->keep_last > 0)
        for (size_t i = 0; i < m; i++)
            if (i + (size_t)r->keep_last >= m) it[i].keep = true;
    if (r->keep_every > 0)
        for (size_t i = 0; i < m; i++)
            if (it[i].step % r->keep_every == 0) it[i].keep = true;
    if (r->keep_best > 0 && r->best_metric) {
        size_t np = 0;
        for (size_t i = 0; i < m; i++) {
            char *mp = ot_ft_join(it[i].path, OT_CKPT_MANIFEST);
            char *buf = NULL;
            size_t len;
            ot_ckpt_manifest *man = NULL;
            if (mp && ot_ft_read_small(mp, OT_CKPT_MANIFEST_MAX, &buf, &len) == OT_OK &&
                ot_ckpt_manifest_parse(buf, len, true, &man) == OT_OK)
                it[i].has_metric = ot_ckpt_manifest_metric(man, r->best_metric, &it[i].metric);
            ot_ckpt_manifest_free(man);
            ot_free(buf);
            ot_free(mp);
            if (it[i].has_metric) ptrs[np++] = &it[i];
        }
        bool higher = r->best_higher;
        qsort_r(ptrs, np, sizeof *ptrs, cmp_metric, &higher);
        for (size_t i = 0; i < np && i < (size_t)r->keep_best; i++) ptrs[i]->keep = true;
    }
    for (size_t i = 0; i < m && rc == OT_OK; i++) {
        if (it[i].keep) continue;
        ot_log(OT_LOG_INFO, "retention: deleting %s", it[i].path);
        /* rename first so that a crash mid-delete leaves a .tmp (cleaned at open), never a
         * committed-looking partial directory */
        char *t = ot_ckpt_step_path(root, it[i].step, true);
        if (!t) {
            rc = ot_error(OT_ERR_OUT_OF_MEMORY, "retention: out of memory");
            break;
        }
        rc = ot_ft_rmtree(t);
        if (rc == OT_OK) rc = ot_ft_rename(it[i].path, t);
        if (rc == OT_OK) rc = ot_ft_rmtree(t);
        ot_free(t);
        if (rc == OT_OK && ndeleted) (*ndeleted)++;
    }
out:
    ot_free(ptrs);
    ot_free(it);
    ot_ckpt_entries_free(e, n);
    return rc;
}

ot_status ot_ckpt_apply_retention(const char *root, const ot_ckpt_retention *r, size_t *ndeleted) {
    return ot_ckpt_retention_impl(root, r, -1, ndeleted);
}

/* ---------------------------------------------------------------------------------------------
 * Replication and repair
 * ------------------------------------------------------------------------------------------- */

ot_status ot_ckpt_replicate(const char *step_dir, const char *dst_root) {
    ot_ckpt_manifest *m;
    OT_CHECK(read_manifest(step_dir, &m));
    ot_status rc = OT_OK;
    char *tmp = ot_ckpt_step_path(dst_root, m->step, true);
    char *fin = ot_ckpt_step_path(dst_root, m->step, false);
    bool made = false;
    if (!tmp || !fin) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "replicate: out of memory");
        goto out;
    }
    if (ot_ft_exists(fin)) {
        rc = ot_error(OT_ERR_ALREADY_EXISTS, "replicate: %s exists", fin);
        goto out;
    }
    OT_CHECK_GOTO(ot_ft_mkdir(dst_root), rc, out);
    OT_CHECK_GOTO(ot_ft_rmtree(tmp), rc, out);
    OT_CHECK_GOTO(ot_ft_mkdir(tmp), rc, out);
    made = true;
    for (size_t i = 0; i < m->nfiles + 1 && rc == OT_OK; i++) {
        const char *name = i < m->nfiles ? m->files[i].path : OT_CKPT_MANIFEST;
        char *src = ot_ft_join(step_dir, name), *dst = ot_ft_join(tmp, name);
        uint8_t sha[32];
        uint64_t size;
        if (!src || !dst) rc = ot_error(OT_ERR_OUT_OF_MEMORY, "replicate: out of memory");
        if (rc == OT_OK) rc = ot_ft_copy_file(src, dst, true, sha, &size);
        /* what was read (and written) must be what the manifest describes */
        if (rc == OT_OK && i < m->nfiles &&
            (size != m->files[i].size || memcmp(sha, m->files[i].sha256, 32) != 0))
            rc = ot_error(OT_ERR_CORRUPT_DATA, "replicate: %s does not match its manifest", src);
        ot_free(src);
        ot_free(dst);
    }
    if (rc != OT_OK) goto out;
    OT_CHECK_GOTO(ot_ft_fsync_path(tmp), rc, out);
    OT_CHECK_GOTO(ot_ft_rename(tmp, fin), rc, out);
    made = false;
    OT_CHECK_GOTO(ot_ft_fsync_path(dst_root), rc, out);
out:
    if (rc != OT_OK && made) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ot_last_error());
        ot_ft_rmtree(tmp);
        ot_error(rc, "%s", msg);
    }
    ot_free(tmp);
    ot_free(fin);
    ot_ckpt_manifest_free(m);
    return rc;
}

ot_status ot_ckpt_repair(const char *root, const ot_ckpt_options *o, int64_t step) {
    if (!o || o->nreplicas == 0)
        return ot_error(OT_ERR_NOT_FOUND, "repair: no replicas configured for step %lld",
                        (long long)step);
    char *prim = ot_ckpt_step_path(root, step, false);
    if (!prim) return ot_error(OT_ERR_OUT_OF_MEMORY, "repair: out of memory");
    ot_status rc = ot_error(OT_ERR_NOT_FOUND, "repair: no replica holds a verified step %lld",
                            (long long)step);
    for (size_t r = 0; r < o->nreplicas; r++) {
        char *rp = ot_ckpt_step_path(o->replicas[r], step, false);
        if (!rp) {
            rc = ot_error(OT_ERR_OUT_OF_MEMORY, "repair: out of memory");
            break;
        }
        if (!ot_ft_exists(rp) || ot_ckpt_verify_dir(rp, NULL) != OT_OK) {
            ot_free(rp);
            continue;
        }
        /* move the bad primary copy out of the way (a .tmp name: cleaned at the next open) */
        char *aside = ot_ckpt_step_path(root, step, true);
        ot_status s = aside ? ot_ft_rmtree(aside) : OT_ERR_OUT_OF_MEMORY;
        if (s == OT_OK && ot_ft_exists(prim)) s = ot_ft_rename(prim, aside);
        if (s == OT_OK) s = ot_ft_rmtree(aside);
        if (s == OT_OK) s = ot_ckpt_replicate(rp, root);
        if (s == OT_OK) s = ot_ckpt_verify_dir(prim, NULL);
        if (s == OT_OK) ot_log(OT_LOG_WARN, "checkpoint: repaired %s from %s", prim, rp);
        ot_free(aside);
        ot_free(rp);
        if (s == OT_OK) {
            rc = OT_OK;
            break;
        }
        rc = s;
    }
    ot_free(prim);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Export
 * ------------------------------------------------------------------------------------------- */

/* Export names: "name" for one unsharded role, "SHARD/name" for one sharded role; with all roles,
 * "role/name" or "role.SHARD/name". */
ot_status ot_ckpt_export(const ot_ckpt *ck, const char *role, const char *out_path) {
    size_t total = 0;
    for (size_t i = 0; i < ck->nfiles; i++)
        if (!role || !strcmp(ck->m->files[i].role, role))
            total += ot_safetensors_count(ck->files[i].st);
    ot_st_entry *e = ot_calloc(total ? total : 1, sizeof *e);
    char **names = ot_calloc(total ? total : 1, sizeof *names);
    ot_status rc = OT_OK;
    if (!e || !names) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "export: out of memory");
        goto out;
    }
    size_t k = 0, nfiles = 0;
    for (size_t i = 0; i < ck->nfiles; i++) {
        const ot_ckpt_file_entry *fe = &ck->m->files[i];
        if (role && strcmp(fe->role, role) != 0) continue;
        nfiles++;
        for (size_t j = 0; j < ot_safetensors_count(ck->files[i].st); j++) {
            const ot_st_info *t = ot_safetensors_at(ck->files[i].st, j);
            size_t nl = strlen(fe->role) + strlen(t->name) + 32;
            names[k] = ot_malloc(nl);
            if (!names[k]) {
                rc = ot_error(OT_ERR_OUT_OF_MEMORY, "export: out of memory");
                goto out;
            }
            if (role && fe->shards == 1)
                snprintf(names[k], nl, "%s", t->name);
            else if (role)
                snprintf(names[k], nl, "%d/%s", fe->shard, t->name);
            else if (fe->shards == 1)
                snprintf(names[k], nl, "%s/%s", fe->role, t->name);
            else
                snprintf(names[k], nl, "%s.%d/%s", fe->role, fe->shard, t->name);
            e[k] = (ot_st_entry){names[k], t->dtype, t->rank, t->dims, t->data};
            k++;
        }
    }
    if (role && nfiles == 0) {
        rc = ot_error(OT_ERR_NOT_FOUND, "export: %s has no role '%s'", ck->dir, role);
        goto out;
    }
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)ck->m->step);
    ot_st_kv meta[] = {{"optitpu.step", stepbuf}};
    ot_st_write_options wo = ot_st_write_options_default();
    rc = ot_safetensors_write_file(out_path, e, k, meta, 1, &wo, NULL);
out:
    if (names)
        for (size_t i = 0; i < total; i++) ot_free(names[i]);
    ot_free(names);
    ot_free(e);
    return rc;
}
