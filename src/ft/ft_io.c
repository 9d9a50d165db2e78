/* Durable file writes that hash while writing, verified hashing, directory helpers. */
#include "ft/ft_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core_util.h"

/* ---- fault injection ---------------------------------------------------------------------- */

static atomic_llong g_inject_left; /* > 0: counts down; the call that reaches 0 fails */
static atomic_int g_inject_errno;

void ot_ft_inject_io_failure(int64_t n, int err) {
    atomic_store(&g_inject_errno, err);
    atomic_store(&g_inject_left, n > 0 ? (long long)n : 0);
}

/* True when this call must fail (errno set). */
static bool injected(void) {
    long long left = atomic_load(&g_inject_left);
    while (left > 0) {
        if (atomic_compare_exchange_weak(&g_inject_left, &left, left - 1)) {
            if (left == 1) {
                errno = atomic_load(&g_inject_errno);
                return true;
            }
            return false;
        }
    }
    return false;
}

static atomic_bool g_no_direct; /* test hook: the page-cache path only */
static _Thread_local bool tl_last_direct;

void ot_ft_allow_direct_io(bool allow) {
    atomic_store(&g_no_direct, !allow);
}

bool ot_ft_last_write_direct(void) {
    return tl_last_direct;
}

/* ---- small helpers ------------------------------------------------------------------------ */

char *ot_ft_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    bool slash = la > 0 && a[la - 1] != '/';
    char *p = ot_malloc(la + lb + 2);
    if (!p) return NULL;
    memcpy(p, a, la);
    if (slash) p[la++] = '/';
    memcpy(p + la, b, lb + 1);
    return p;
}

bool ot_ft_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

bool ot_ft_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

ot_status ot_ft_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ot_error(OT_ERR_IO, "open %s for fsync: %s", path, strerror(errno));
    int r = injected() ? -1 : fsync(fd);
    int e = errno;
    close(fd);
    if (r != 0) return ot_error(OT_ERR_IO, "fsync %s: %s", path, strerror(e));
    return OT_OK;
}

ot_status ot_ft_mkdir(const char *path) {
    if (injected() || mkdir(path, 0755) != 0) {
        if (errno == EEXIST && ot_ft_is_dir(path)) return OT_OK;
        return ot_error(OT_ERR_IO, "mkdir %s: %s", path, strerror(errno));
    }
    return OT_OK;
}

ot_status ot_ft_mkdirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return ot_error(OT_ERR_IO, "mkdir %s: bad path length", path);
    memcpy(buf, path, n + 1);
    /* each parent in turn, left to right: a loop over the path, never recursion */
    for (char *q = buf + 1; *q; q++) {
        if (*q != '/' || q[-1] == '/') continue;
        *q = '\0';
        if (!ot_ft_is_dir(buf)) {
            ot_status s = ot_ft_mkdir(buf);
            if (s != OT_OK) return s;
        }
        *q = '/';
    }
    return ot_ft_mkdir(buf);
}

ot_status ot_ft_rename(const char *from, const char *to) {
    if (injected() || rename(from, to) != 0)
        return ot_error(OT_ERR_IO, "rename %s -> %s: %s", from, to, strerror(errno));
    return OT_OK;
}

/* Uses a path buffer on the stack, no allocation: it runs on failure paths, including after an
 * allocation failure. */
static ot_status rmtree_buf(char *path, size_t cap) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return OT_OK;
        return ot_error(OT_ERR_IO, "stat %s: %s", path, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(path) != 0 && errno != ENOENT)
            return ot_error(OT_ERR_IO, "unlink %s: %s", path, strerror(errno));
        return OT_OK;
    }
    DIR *d = opendir(path);
    if (!d) return ot_error(OT_ERR_IO, "opendir %s: %s", path, strerror(errno));
    ot_status rc = OT_OK;
    size_t len = strlen(path);
    struct dirent *de;
    while (rc == OT_OK && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        size_t nl = strlen(de->d_name);
        if (len + 1 + nl + 1 > cap) {
            rc = ot_error(OT_ERR_IO, "rmtree %s: path too long", path);
            break;
        }
        path[len] = '/';
        memcpy(path + len + 1, de->d_name, nl + 1);
        rc = rmtree_buf(path, cap);
        path[len] = '\0';
    }
    closedir(d);
    if (rc != OT_OK) return rc;
    if (rmdir(path) != 0 && errno != ENOENT)
        return ot_error(OT_ERR_IO, "rmdir %s: %s", path, strerror(errno));
    return OT_OK;
}

ot_status ot_ft_rmtree(const char *path) {
    char buf[4096];
    if (strlen(path) >= sizeof buf) return ot_error(OT_ERR_IO, "rmtree %s: path too long", path);
    strcpy(buf, path);
    return rmtree_buf(buf, sizeof buf);
}

ot_status ot_ft_read_small(const char *path, size_t max_len, char **out, size_t *len) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return ot_error(OT_ERR_NOT_FOUND, "%s: missing", path);
        return ot_error(OT_ERR_IO, "open %s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ot_error(OT_ERR_IO, "stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max_len) {
        close(fd);
        return ot_error(OT_ERR_CORRUPT_DATA, "%s: not a regular file of at most %zu bytes", path,
                        max_len);
    }
    size_t n = (size_t)st.st_size;
    char *buf = ot_malloc(n + 1);
    if (!buf) {
        close(fd);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "reading %s: out of memory", path);
    }
    int e = ot_read_full(fd, buf, n, NULL);
    if (e) {
        close(fd);
        ot_free(buf);
        return ot_error(OT_ERR_IO, "read %s: %s", path, e > 0 ? strerror(e) : "short read");
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return OT_OK;
}

/* ---- background priority ------------------------------------------------------------------ */

/* The threads of one background job (the async writer and the I/O thread it starts) register
 * here, so that a caller who starts waiting can lift all of them back to normal priority. */
static _Thread_local ot_ft_prio_group *tl_group;

static pid_t gettid_(void) {
    return (pid_t)syscall(SYS_gettid);
}

/* SCHED_IDLE where the kernel allows it (the thread then runs only on a core nothing else
 * wants), otherwise nice 19. Both only lower the priority, which needs no privilege. */
static void lower_self(void) {
    struct sched_param sp = {0};
    if (sched_setscheduler(0, SCHED_IDLE, &sp) != 0)
        (void)setpriority(PRIO_PROCESS, (id_t)gettid_(), 19);
}

static void raise_tid(pid_t tid, int nice_value) {
    struct sched_param sp = {0};
    (void)sched_setscheduler(tid, SCHED_OTHER, &sp);
    (void)setpriority(PRIO_PROCESS, (id_t)tid, nice_value);
}

static void group_join(ot_ft_prio_group *g) {
    tl_group = g;
    if (!g) return;
    pid_t tid = gettid_();
    int slot = -1;
    for (int i = 0; i < OT_FT_PRIO_GROUP_MAX && slot < 0; i++) {
        int zero = 0;
        if (atomic_compare_exchange_strong(&g->tids[i], &zero, (int)tid)) slot = i;
    }
    if (atomic_load(&g->boosted))
        raise_tid(tid, atomic_load(&g->nice));
    else
        lower_self();
    /* a boost that read the slots before this thread took one is applied here */
    if (atomic_load(&g->boosted)) raise_tid(tid, atomic_load(&g->nice));
}

static void group_leave(void) {
    ot_ft_prio_group *g = tl_group;
    tl_group = NULL;
    if (!g) return;
    int tid = (int)gettid_();
    for (int i = 0; i < OT_FT_PRIO_GROUP_MAX; i++) {
        int t = tid;
        if (atomic_compare_exchange_strong(&g->tids[i], &t, 0)) break;
    }
}

void ot_ft_prio_group_init(ot_ft_prio_group *g) {
    for (int i = 0; i < OT_FT_PRIO_GROUP_MAX; i++) atomic_store(&g->tids[i], 0);
    atomic_store(&g->boosted, false);
    atomic_store(&g->nice, 0);
}

void ot_ft_background_begin(ot_ft_prio_group *g) {
    group_join(g);
}

void ot_ft_background_end(void) {
    group_leave();
}

ot_ft_prio_group *ot_ft_background_group(void) {
    return tl_group;
}

void ot_ft_prio_group_boost(ot_ft_prio_group *g) {
    errno = 0;
    int nv = getpriority(PRIO_PROCESS, (id_t)gettid_()); /* the caller's own nice value */
    if (nv == -1 && errno != 0) nv = 0;
    atomic_store(&g->nice, nv);
    atomic_store(&g->boosted, true);
    for (int i = 0; i < OT_FT_PRIO_GROUP_MAX; i++) {
        int tid = atomic_load(&g->tids[i]);
        if (tid > 0) raise_tid((pid_t)tid, nv);
    }
}

/* ---- writing while hashing ---------------------------------------------------------------- */

/* Large files go through a pipeline: the calling thread copies the content block by block into
 * page-aligned buffers and hashes each piece of a block right after copying it (while it is in
 * cache); an I/O thread writes the filled blocks with O_DIRECT where the file system supports
 * it, so the data goes from the buffer to the device without a page-cache copy, without
 * write-back work in kernel threads and without page-cache pressure. Where O_DIRECT is refused
 * (at fcntl, or EINVAL on the first direct write) the same blocks are written through the page
 * cache. A block's unaligned tail (only the file's last block has one) is written buffered. */
#define OT_FT_PIPE_MIN   ((size_t)4 << 20) /* smaller files: one buffered write, inline hash */
#define OT_FT_BLOCK      ((size_t)8 << 20)
#define OT_FT_NBLOCKS    4
#define OT_FT_HASH_PIECE ((size_t)256 << 10)
#define OT_FT_DIO_ALIGN  ((size_t)4096)

typedef struct pipe_block {
    uint8_t *buf;
    size_t len;
    uint64_t off;
} pipe_block;

typedef struct wpipe {
    int fd;
    const char *path;
    ot_ft_prio_group *group;
    bool direct;
    bool refused; /* a direct write failed with EINVAL: the rest went through the page cache */
    size_t nbuf;  /* blocks in the ring, 1..OT_FT_NBLOCKS */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pipe_block blk[OT_FT_NBLOCKS];
    size_t head, tail; /* filled blocks are [tail, head) modulo nbuf */
    bool done;         /* no more blocks will be filled */
    bool failed;
    ot_status rc;
    char err[512];
} wpipe;

static ot_status pwrite_all(int fd, const char *path, const uint8_t *p, size_t n, uint64_t off) {
    while (n > 0) {
        ssize_t w = injected() ? -1 : pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return ot_error(OT_ERR_IO, "write %s: %s", path, strerror(errno));
        if (w == 0) return ot_error(OT_ERR_IO, "write %s: no progress", path);
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return OT_OK;
}

static bool set_direct(int fd, bool on) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return false;
    fl = on ? (fl | O_DIRECT) : (fl & ~O_DIRECT);
    return fcntl(fd, F_SETFL, fl) == 0;
}

static ot_status write_block(wpipe *p, const pipe_block *b) {
    size_t aligned = p->direct ? b->len / OT_FT_DIO_ALIGN * OT_FT_DIO_ALIGN : 0;
    if (aligned) {
        ssize_t w;
        do {
            w = injected() ? -1 : pwrite(p->fd, b->buf, aligned, (off_t)b->off);
        } while (w < 0 && errno == EINTR);
        if (w < 0 && errno == EINVAL && set_direct(p->fd, false)) {
            p->direct = false; /* alignment or O_DIRECT refused here: the page cache it is */
            p->refused = true;
            aligned = 0;
        } else if (w < 0) {
            return ot_error(OT_ERR_IO, "write %s: %s", p->path, strerror(errno));
        } else if ((size_t)w < aligned) {
            /* a short direct write ends on a block boundary; finish it buffered */
            aligned = (size_t)w;
        }
    }
    if (aligned < b->len) {
        if (p->direct) {
            if (!set_direct(p->fd, false))
                return ot_error(OT_ERR_IO, "write %s: cannot leave O_DIRECT: %s", p->path,
                                strerror(errno));
            p->direct = false;
        }
        OT_CHECK(pwrite_all(p->fd, p->path, b->buf + aligned, b->len - aligned, b->off + aligned));
    }
    return OT_OK;
}

static void *io_thread(void *arg) {
    wpipe *p = arg;
    group_join(p->group);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->tail == p->head && !p->done && !p->failed) pthread_cond_wait(&p->cv, &p->mu);
        if (p->failed || p->tail == p->head) break;
        pipe_block b = p->blk[p->tail % p->nbuf];
        pthread_mutex_unlock(&p->mu);
        ot_status rc = write_block(p, &b);
        pthread_mutex_lock(&p->mu);
        if (rc != OT_OK) {
            p->failed = true;
            p->rc = rc;
            snprintf(p->err, sizeof p->err, "%s", ot_last_error());
        } else {
            p->tail++;
        }
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    group_leave();
    return NULL;
}

/* Copies and hashes the segments block by block and hands the blocks to the I/O thread. */
static ot_status pipe_run(wpipe *p, const ot_ft_seg *segs, size_t nseg, uint64_t total,
                          ot_sha256 *h) {
    size_t si = 0, so = 0; /* position in the segments */
    uint64_t off = 0;
    ot_status rc = OT_OK;
    while (off < total && rc == OT_OK) {
        pthread_mutex_lock(&p->mu);
        while (p->head - p->tail == p->nbuf && !p->failed) pthread_cond_wait(&p->cv, &p->mu);
        bool failed = p->failed;
        pipe_block *b = &p->blk[p->head % p->nbuf];
        pthread_mutex_unlock(&p->mu);
        if (failed) break;
        size_t want = total - off < OT_FT_BLOCK ? (size_t)(total - off) : OT_FT_BLOCK, got = 0;
        while (got < want && rc == OT_OK) {
            while (so == segs[si].len) si++, so = 0;
            size_t n = segs[si].len - so;
            if (n > want - got) n = want - got;
            if (n > OT_FT_HASH_PIECE) n = OT_FT_HASH_PIECE;
            memcpy(b->buf + got, (const uint8_t *)segs[si].ptr + so, n);
            if (h) rc = ot_sha256_update(h, b->buf + got, n);
            got += n, so += n;
        }
        if (rc != OT_OK) break;
        b->len = want;
        b->off = off;
        off += want;
        pthread_mutex_lock(&p->mu);
        p->head++;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_lock(&p->mu);
    p->done = true;
    if (rc != OT_OK) p->failed = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static ot_status write_pipelined(int fd, const char *path, const ot_ft_seg *segs, size_t nseg,
                                 uint64_t total, ot_sha256 *h) {
    size_t nb = (size_t)((total + OT_FT_BLOCK - 1) / OT_FT_BLOCK);
    if (nb > OT_FT_NBLOCKS) nb = OT_FT_NBLOCKS;
    size_t bsz = total < OT_FT_BLOCK ? (size_t)total : OT_FT_BLOCK;
    bsz = (bsz + OT_FT_DIO_ALIGN - 1) / OT_FT_DIO_ALIGN * OT_FT_DIO_ALIGN;
    /* 2 MiB-aligned and backed by huge pages where the kernel allows: a direct write pins and
     * releases its buffer page by page otherwise, in the completion interrupt, on whatever CPU
     * the device interrupts (measured: ~6 % of a compute step running on that CPU) */
    uint8_t *mem = ot_aligned_alloc_huge(nb * bsz);
    if (!mem) return ot_error(OT_ERR_OUT_OF_MEMORY, "write %s: out of memory", path);
    wpipe p;
    memset(&p, 0, sizeof p);
    p.fd = fd;
    p.path = path;
    p.group = tl_group;
    p.direct = !atomic_load(&g_no_direct) && set_direct(fd, true);
    bool tried_direct = p.direct;
    p.nbuf = nb;
    for (size_t i = 0; i < nb; i++) p.blk[i].buf = mem + i * bsz;
    ot_status rc = OT_OK;
    pthread_t th;
    if (pthread_mutex_init(&p.mu, NULL) != 0) {
        ot_aligned_free(mem);
        return ot_error(OT_ERR_INTERNAL, "write %s: cannot create a mutex", path);
    }
    if (pthread_cond_init(&p.cv, NULL) != 0) {
        pthread_mutex_destroy(&p.mu);
        ot_aligned_free(mem);
        return ot_error(OT_ERR_INTERNAL, "write %s: cannot create a condition variable", path);
    }
    bool threaded = pthread_create(&th, NULL, io_thread, &p) == 0;
    if (threaded) {
        rc = pipe_run(&p, segs, nseg, total, h);
        pthread_join(th, NULL);
        if (rc == OT_OK && p.failed) rc = ot_error(p.rc, "%s", p.err);
    } else {
        /* no I/O thread could start: fill one block, write it, repeat */
        size_t si = 0, so = 0;
        uint64_t off = 0;
        while (off < total && rc == OT_OK) {
            pipe_block b = {mem, total - off < bsz ? (size_t)(total - off) : bsz, off};
            size_t got = 0;
            while (got < b.len && rc == OT_OK) {
                while (so == segs[si].len) si++, so = 0;
                size_t n = segs[si].len - so;
                if (n > b.len - got) n = b.len - got;
                if (n > OT_FT_HASH_PIECE) n = OT_FT_HASH_PIECE;
                memcpy(mem + got, (const uint8_t *)segs[si].ptr + so, n);
                if (h) rc = ot_sha256_update(h, mem + got, n);
                got += n, so += n;
            }
            if (rc == OT_OK) rc = write_block(&p, &b);
            off += b.len;
        }
    }
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&p.mu);
    ot_aligned_free(mem);
    tl_last_direct = tried_direct && !p.refused;
    return rc;
}

static ot_status write_all(int fd, const char *path, const void *p, size_t n) {
    int e = ot_write_full(fd, p, n, injected);
    if (e > 0) return ot_error(OT_ERR_IO, "write %s: %s", path, strerror(e));
    if (e < 0) return ot_error(OT_ERR_IO, "write %s: no progress", path);
    return OT_OK;
}

ot_status ot_ft_write_file(const char *path, const ot_ft_seg *segs, size_t nseg, bool do_fsync,
                           uint8_t sha256[32], uint64_t *size) {
    tl_last_direct = false;
    uint64_t total = 0;
    for (size_t i = 0; i < nseg; i++) total += segs[i].len;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return ot_error(OT_ERR_IO, "create %s: %s", path, strerror(errno));
    ot_sha256 h;
    bool hashing = false;
    ot_status rc = OT_OK;
    if (sha256) {
        rc = ot_sha256_init(&h);
        hashing = rc == OT_OK;
    }
    if (rc == OT_OK && total >= OT_FT_PIPE_MIN) {
        rc = write_pipelined(fd, path, segs, nseg, total, hashing ? &h : NULL);
    } else {
        for (size_t i = 0; rc == OT_OK && i < nseg; i++) {
            rc = write_all(fd, path, segs[i].ptr, segs[i].len);
            if (rc == OT_OK && hashing) rc = ot_sha256_update(&h, segs[i].ptr, segs[i].len);
        }
    }
    if (rc == OT_OK && do_fsync && (injected() || fsync(fd) != 0))
        rc = ot_error(OT_ERR_IO, "fsync %s: %s", path, strerror(errno));
    if (close(fd) != 0 && rc == OT_OK)
        rc = ot_error(OT_ERR_IO, "close %s: %s", path, strerror(errno));
    uint8_t digest[32];
    if (hashing) {
        ot_status hr = ot_sha256_final(&h, rc == OT_OK ? digest : NULL);
        if (rc == OT_OK) rc = hr;
    }
    if (rc != OT_OK) {
        unlink(path);
        return rc;
    }
    if (sha256) memcpy(sha256, digest, 32);
    if (size) *size = total;
    return OT_OK;
}

/* ---- reading and hashing ------------------------------------------------------------------ */

ot_status ot_ft_hash_file(const char *path, int64_t expect_size, uint8_t sha256[32],
                          uint64_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return ot_error(OT_ERR_CORRUPT_DATA, "%s: file missing", path);
        return ot_error(OT_ERR_IO, "open %s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ot_error(OT_ERR_CORRUPT_DATA, "%s: not a regular file", path);
    }
    uint64_t n = (uint64_t)st.st_size;
    if (size) *size = n;
    if (expect_size >= 0 && n != (uint64_t)expect_size) {
        close(fd);
        return ot_error(OT_ERR_CORRUPT_DATA, "%s: size %llu, manifest says %lld", path,
                        (unsigned long long)n, (long long)expect_size);
    }
    ot_status rc;
    if (n == 0) {
        close(fd);
        return ot_sha256_digest("", 0, sha256);
    }
    void *map = mmap(NULL, (size_t)n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return ot_error(OT_ERR_IO, "mmap %s: %s", path, strerror(errno));
    madvise(map, (size_t)n, MADV_SEQUENTIAL | MADV_WILLNEED);
    rc = ot_sha256_digest(map, (size_t)n, sha256);
    munmap(map, (size_t)n);
    return rc;
}

ot_status ot_ft_copy_file(const char *src, const char *dst, bool do_fsync, uint8_t sha256[32],
                          uint64_t *size) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return ot_error(OT_ERR_IO, "open %s: %s", src, strerror(errno));
    struct stat st;
    if (fstat(in, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(in);
        return ot_error(OT_ERR_IO, "%s: not a regular file", src);
    }
    size_t n = (size_t)st.st_size;
    void *map = NULL;
    if (n > 0) {
        map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, in, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(in);
            return ot_error(OT_ERR_IO, "mmap %s: %s", src, strerror(e));
        }
        madvise(map, n, MADV_SEQUENTIAL);
    }
    close(in);
    ot_ft_seg seg = {map ? map : "", n};
    ot_status rc = ot_ft_write_file(dst, &seg, 1, do_fsync, sha256, size);
    if (map) munmap(map, n);
    return rc;
}
