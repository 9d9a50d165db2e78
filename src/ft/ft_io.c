/* Durable file writes that hash while writing, verified hashing, directory helpers. */
#include "ft/ft_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            ot_free(buf);
            return ot_error(OT_ERR_IO, "read %s: %s", path, e ? strerror(e) : "short read");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return OT_OK;
}

/* ---- writing with a concurrent hash -------------------------------------------------------- */

typedef struct hash_job {
    const ot_ft_seg *segs;
    size_t nseg;
    uint8_t digest[32];
    ot_status rc;
    char err[256];
} hash_job;

static ot_status hash_segments(const ot_ft_seg *segs, size_t nseg, uint8_t out[32]) {
    ot_sha256 h;
    OT_CHECK(ot_sha256_init(&h));
    for (size_t i = 0; i < nseg; i++) {
        ot_status rc = ot_sha256_update(&h, segs[i].ptr, segs[i].len);
        if (rc != OT_OK) {
            ot_sha256_final(&h, NULL);
            return rc;
        }
    }
    return ot_sha256_final(&h, out);
}

static void *hash_thread(void *arg) {
    hash_job *j = arg;
    j->rc = hash_segments(j->segs, j->nseg, j->digest);
    if (j->rc != OT_OK) snprintf(j->err, sizeof j->err, "%s", ot_last_error());
    return NULL;
}

static ot_status write_all(int fd, const char *path, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t w = injected() ? -1 : write(fd, c, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return ot_error(OT_ERR_IO, "write %s: %s", path, strerror(errno));
        if (w == 0) return ot_error(OT_ERR_IO, "write %s: no progress", path);
        c += w;
        n -= (size_t)w;
    }
    return OT_OK;
}

/* Hashing runs on its own thread only when it pays for the thread start. */
#define OT_FT_THREADED_HASH_MIN ((size_t)4 << 20)

ot_status ot_ft_write_file(const char *path, const ot_ft_seg *segs, size_t nseg, bool do_fsync,
                           uint8_t sha256[32], uint64_t *size) {
    size_t total = 0;
    for (size_t i = 0; i < nseg; i++) total += segs[i].len;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return ot_error(OT_ERR_IO, "create %s: %s", path, strerror(errno));
    hash_job job = {.segs = segs, .nseg = nseg};
    pthread_t th;
    bool threaded = false;
    ot_status rc = OT_OK;
    if (sha256 && total >= OT_FT_THREADED_HASH_MIN)
        threaded = pthread_create(&th, NULL, hash_thread, &job) == 0;
    for (size_t i = 0; rc == OT_OK && i < nseg; i++)
        rc = write_all(fd, path, segs[i].ptr, segs[i].len);
    if (rc == OT_OK && do_fsync && (injected() || fsync(fd) != 0))
        rc = ot_error(OT_ERR_IO, "fsync %s: %s", path, strerror(errno));
    if (close(fd) != 0 && rc == OT_OK)
        rc = ot_error(OT_ERR_IO, "close %s: %s", path, strerror(errno));
    if (threaded) {
        pthread_join(th, NULL);
        if (rc == OT_OK && job.rc != OT_OK) rc = ot_error(job.rc, "%s", job.err);
    } else if (rc == OT_OK && sha256) {
        rc = hash_segments(segs, nseg, job.digest);
    }
    if (rc != OT_OK) {
        unlink(path);
        return rc;
    }
    if (sha256) memcpy(sha256, job.digest, 32);
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
