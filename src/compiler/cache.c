/* The persistent compilation cache (compiler.h): a directory of KEY.otx files, each an executable
 * file as ot_executable_save writes it. Nothing but the file system is shared, so processes may
 * use one directory at once: writers rename a unique temporary file over the entry (the last one
 * wins with an identical executable), readers verify what they read, and eviction tolerates
 * entries that vanish under it. */
#include "executable_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ENTRY_EXT ".otx"
#define TMP_MARK  ".tmp."

struct ot_compile_cache {
    char *dir;
    int64_t max_bytes;
};

/* A byte count with an optional K, M or G suffix (binary); false when malformed or < 1. */
static bool parse_bytes(const char *s, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 1) return false;
    int shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10;
    if (*end == 'M' || *end == 'm') shift = 20;
    if (*end == 'G' || *end == 'g') shift = 30;
    if (shift) end++;
    if (*end || v > (INT64_MAX >> shift)) return false;
    *out = (int64_t)v << shift;
    return true;
}

static ot_status mkdir_p(const char *dir) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "compile cache: directory name too long");
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(tmp, 0755);
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return ot_error(OT_ERR_IO, "compile cache: cannot create %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode))
        return ot_error(OT_ERR_IO, "compile cache: %s is not a directory", dir);
    return OT_OK;
}

ot_status ot_compile_cache_open(const ot_compile_cache_options *o, ot_compile_cache **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "compile cache: out is NULL");
    *out = NULL;
    ot_compile_cache_options d = {0};
    if (!o) o = &d;
    if (o->max_bytes < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "compile cache: max_bytes %lld is negative",
                        (long long)o->max_bytes);
    int64_t max = o->max_bytes;
    if (!max) {
        const char *e = getenv("OPTITPU_CACHE_MAX_BYTES");
        max = OT_COMPILE_CACHE_DEFAULT_MAX_BYTES;
        if (e && *e && !parse_bytes(e, &max))
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "OPTITPU_CACHE_MAX_BYTES='%s': expected a byte count such as 512M", e);
    }
    char dir[4096];
    const char *e;
    if (o->dir && *o->dir)
        snprintf(dir, sizeof dir, "%s", o->dir);
    else if ((e = getenv("OPTITPU_CACHE_DIR")) && *e)
        snprintf(dir, sizeof dir, "%s/executables", e);
    else if ((e = getenv("XDG_CACHE_HOME")) && *e)
        snprintf(dir, sizeof dir, "%s/optitpu/executables", e);
    else if ((e = getenv("HOME")) && *e)
        snprintf(dir, sizeof dir, "%s/.cache/optitpu/executables", e);
    else
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "compile cache: no directory (set OPTITPU_CACHE_DIR or HOME)");
    OT_CHECK(mkdir_p(dir));
    ot_compile_cache *c = ot_calloc(1, sizeof *c);
    if (!c || !(c->dir = ot_malloc(strlen(dir) + 1))) {
        ot_free(c);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "compile cache: out of memory");
    }
    memcpy(c->dir, dir, strlen(dir) + 1);
    c->max_bytes = max;
    *out = c;
    return OT_OK;
}

void ot_compile_cache_free(ot_compile_cache *c) {
    if (!c) return;
    ot_free(c->dir);
    ot_free(c);
}

const char *ot_compile_cache_dir(const ot_compile_cache *c) {
    return c ? c->dir : NULL;
}

int64_t ot_compile_cache_max_bytes(const ot_compile_cache *c) {
    return c ? c->max_bytes : 0;
}

/* The GNU build ID (the linker's hash of the code, ld --build-id) of the binary that holds this
 * function: liboptitpu.so, or the program liboptitpu.a was linked into. Any change to the
 * compiler changes it, so a rebuilt library with an unchanged version string never loads an
 * executable an older build compiled. Found once through the loaded program headers; absent
 * (linked without --build-id) it is empty and the key holds the version alone. */
typedef struct {
    uintptr_t addr;
    uint8_t id[64];
    size_t len;
} build_id_probe;

static int build_id_of_object(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    build_id_probe *p = arg;
    bool mine = false;
    for (int i = 0; i < info->dlpi_phnum && !mine; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        mine = ph->p_type == PT_LOAD && p->addr >= lo && p->addr - lo < ph->p_memsz;
    }
    if (!mine) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const uint8_t *n = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        size_t left = ph->p_memsz;
        while (left >= sizeof(ElfW(Nhdr))) {
            const ElfW(Nhdr) *h = (const ElfW(Nhdr) *)n;
            size_t name = (h->n_namesz + 3u) & ~(size_t)3, desc = (h->n_descsz + 3u) & ~(size_t)3;
            size_t whole = sizeof *h + name + desc;
            if (name > left || desc > left || whole > left) break;
            if (h->n_type == NT_GNU_BUILD_ID && h->n_namesz == 4 &&
                memcmp(n + sizeof *h, "GNU", 4) == 0 && h->n_descsz <= sizeof p->id) {
                memcpy(p->id, n + sizeof *h + name, h->n_descsz);
                p->len = h->n_descsz;
                return 1;
            }
            n += whole;
            left -= whole;
        }
    }
    return 1; /* this object, without a build ID */
}

static build_id_probe g_build_id;
static pthread_once_t g_build_id_once = PTHREAD_ONCE_INIT;

static void build_id_find(void) {
    g_build_id.addr = (uintptr_t)&build_id_of_object;
    dl_iterate_phdr(build_id_of_object, &g_build_id);
}

static ot_status key_of(const uint8_t fp[32], uint8_t out[32]) {
    ot_sha256 h;
    OT_CHECK(ot_sha256_init(&h));
    static const char tag[] = "optitpu-compile-cache-v1";
    const char *ver = ot_version();
    uint8_t fmt[4];
    for (int k = 0; k < 4; k++) fmt[k] = (uint8_t)(CC_EXECUTABLE_FORMAT_VERSION >> (8 * k));
    ot_status s = ot_sha256_update(&h, tag, sizeof tag); /* with the NUL: fields stay apart */
    if (s == OT_OK) s = ot_sha256_update(&h, fp, 32);
    if (s == OT_OK) s = ot_sha256_update(&h, ver, strlen(ver) + 1);
    if (s == OT_OK) s = ot_sha256_update(&h, fmt, sizeof fmt);
    pthread_once(&g_build_id_once, build_id_find);
    if (s == OT_OK && g_build_id.len > 0) s = ot_sha256_update(&h, g_build_id.id, g_build_id.len);
    if (s != OT_OK) {
        ot_sha256_final(&h, NULL);
        return s;
    }
    return ot_sha256_final(&h, out);
}

ot_status ot_compile_cache_key(const ot_module *m, const ot_compile_options *opts,
                               uint8_t out[32]) {
    uint8_t fp[32];
    OT_CHECK(ot_compile_fingerprint(m, opts, fp));
    return key_of(fp, out);
}

/* The whole file into an ot_malloc'd buffer; ENOENT is NOT_FOUND. */
static ot_status read_file(const char *path, void **out, size_t *len) {
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ot_error(errno == ENOENT ? OT_ERR_NOT_FOUND : OT_ERR_IO, "%s: %s", path,
                        strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ot_error(OT_ERR_IO, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size, got = 0;
    uint8_t *buf = ot_malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", path, n);
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        ot_free(buf);
        return ot_error(OT_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, n);
    }
    *out = buf;
    *len = n;
    return OT_OK;
}

/* Loads entry path and checks that it is the executable for fingerprint fp (NULL: any). */
static ot_status load_entry(const char *path, const uint8_t *fp, const ot_compile_options *native,
                            ot_executable **out) {
    void *buf;
    size_t len;
    OT_CHECK(read_file(path, &buf, &len));
    ot_status s = cc_executable_deserialize(buf, len, native, out);
    ot_free(buf);
    if (s != OT_OK) return s;
    if (fp) {
        uint8_t got[32];
        ot_executable_fingerprint(*out, got);
        if (memcmp(got, fp, 32) != 0) {
            ot_executable_free(*out);
            *out = NULL;
            return ot_error(OT_ERR_CORRUPT_DATA,
                            "executable: its fingerprint is not the one its name stands for");
        }
    }
    return OT_OK;
}

static bool is_entry(const char *name) {
    size_t n = strlen(name);
    if (n != 64 + strlen(ENTRY_EXT) || strcmp(name + 64, ENTRY_EXT) != 0) return false;
    for (size_t k = 0; k < 64; k++)
        if (!((name[k] >= '0' && name[k] <= '9') || (name[k] >= 'a' && name[k] <= 'f')))
            return false;
    return true;
}

static bool is_tmp(const char *name) {
    return strlen(name) > 64 && strstr(name, TMP_MARK) == name + 64;
}

typedef struct scan {
    ot_compile_cache_entry *e;
    int64_t n, cap;
} scan;

static ot_status scan_dir(const char *dir, scan *sc) {
    sc->e = NULL;
    sc->n = sc->cap = 0;
    DIR *d = opendir(dir);
    if (!d) return ot_error(OT_ERR_IO, "compile cache: cannot read %s: %s", dir, strerror(errno));
    struct dirent *de;
    char path[4200];
    while ((de = readdir(d))) {
        if (!is_entry(de->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue; /* removed meanwhile */
        if (sc->n == sc->cap) {
            int64_t nc = sc->cap ? sc->cap * 2 : 64;
            void *p = ot_realloc(sc->e, (size_t)nc * sizeof *sc->e);
            if (!p) {
                closedir(d);
                ot_free(sc->e);
                sc->e = NULL;
                return ot_error(OT_ERR_OUT_OF_MEMORY, "compile cache: out of memory");
            }
            sc->e = p;
            sc->cap = nc;
        }
        ot_compile_cache_entry *x = &sc->e[sc->n++];
        memcpy(x->key, de->d_name, 64);
        x->key[64] = 0;
        x->bytes = (int64_t)st.st_size;
        x->atime_ns = (int64_t)st.st_atim.tv_sec * 1000000000 + st.st_atim.tv_nsec;
    }
    closedir(d);
    return OT_OK;
}

static int by_atime(const void *a, const void *b) {
    const ot_compile_cache_entry *x = a, *y = b;
    if (x->atime_ns != y->atime_ns) return x->atime_ns < y->atime_ns ? -1 : 1;
    return strcmp(x->key, y->key);
}

ot_status ot_compile_cache_list(const ot_compile_cache *c, ot_compile_cache_entry **out,
                                int64_t *n) {
    if (!c || !out || !n) return ot_error(OT_ERR_INVALID_ARGUMENT, "compile cache: NULL argument");
    *out = NULL;
    *n = 0;
    scan sc;
    OT_CHECK(scan_dir(c->dir, &sc));
    if (sc.n > 1) qsort(sc.e, (size_t)sc.n, sizeof *sc.e, by_atime);
    if (!sc.n) {
        ot_free(sc.e);
        sc.e = NULL;
    }
    *out = sc.e;
    *n = sc.n;
    return OT_OK;
}

/* Removes the least recently used entries until the total is within the limit. */
static void evict(const ot_compile_cache *c) {
    scan sc;
    if (scan_dir(c->dir, &sc) != OT_OK) {
        ot_log(OT_LOG_WARN, "compile cache: eviction skipped: %s", ot_last_error());
        return;
    }
    int64_t total = 0;
    for (int64_t k = 0; k < sc.n; k++) total += sc.e[k].bytes;
    if (total > c->max_bytes) {
        qsort(sc.e, (size_t)sc.n, sizeof *sc.e, by_atime);
        char path[4200];
        for (int64_t k = 0; k < sc.n && total > c->max_bytes; k++) {
            snprintf(path, sizeof path, "%s/%s" ENTRY_EXT, c->dir, sc.e[k].key);
            if (unlink(path) == 0 || errno == ENOENT) total -= sc.e[k].bytes;
        }
    }
    ot_free(sc.e);
}

/* Writes buf as entry path: a temporary file unique to this process and call, then rename. */
static ot_status store(const char *path, const void *buf, size_t len) {
    static atomic_uint counter;
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%.*s" TMP_MARK "%ld.%u", (int)(strlen(path) - strlen(ENTRY_EXT)),
             path, (long)getpid(), atomic_fetch_add(&counter, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return ot_error(OT_ERR_IO, "compile cache: create %s: %s", tmp, strerror(errno));
    size_t done = 0;
    int err = 0;
    while (done < len) {
        ssize_t w = write(fd, (const char *)buf + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            err = w < 0 ? errno : EIO;
            break;
        }
        done += (size_t)w;
    }
    if (close(fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) {
        unlink(tmp);
        return ot_error(OT_ERR_IO, "compile cache: write %s: %s", path, strerror(err));
    }
    return OT_OK;
}

ot_status ot_compile_cached(const ot_module *m, const ot_compile_options *opts, ot_compile_cache *c,
                            ot_executable **out, bool *hit) {
    if (hit) *hit = false;
    if (!c) return ot_compile(m, opts, out);
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "compile: out is NULL");
    *out = NULL;
    if (!m) return ot_error(OT_ERR_INVALID_ARGUMENT, "compile: module is NULL");
    ot_compile_options o = opts ? *opts : ot_compile_options_default();
    uint8_t fp[32], key[32];
    OT_CHECK(ot_compile_fingerprint(m, &o, fp));
    OT_CHECK(key_of(fp, key));
    char hex[65], path[4200];
    ot_hex(key, 32, hex);
    snprintf(path, sizeof path, "%s/%s" ENTRY_EXT, c->dir, hex);

    ot_status s = load_entry(path, fp, &o, out);
    if (s == OT_OK) {
        /* the access time orders eviction; set explicitly (relatime and noatime mounts skip
         * updates on read) */
        struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
        if (utimensat(AT_FDCWD, path, ts, 0) != 0)
            ot_log(OT_LOG_WARN, "compile cache: cannot touch %s: %s", path, strerror(errno));
        if (hit) *hit = true;
        return OT_OK;
    }
    if (s == OT_ERR_OUT_OF_MEMORY) return s;
    if (s != OT_ERR_NOT_FOUND) {
        ot_log(OT_LOG_WARN, "compile cache: removing unusable entry %s: %s", path, ot_last_error());
        if (unlink(path) != 0 && errno != ENOENT)
            ot_log(OT_LOG_WARN, "compile cache: cannot remove %s: %s", path, strerror(errno));
    }

    OT_CHECK(ot_compile(m, &o, out));
    void *buf = NULL;
    size_t len = 0;
    s = ot_executable_serialize(*out, &buf, &len);
    if (s == OT_OK && (int64_t)len > c->max_bytes) {
        ot_log(OT_LOG_DEBUG,
               "compile cache: %zu-byte executable over the %lld-byte limit, not stored", len,
               (long long)c->max_bytes);
    } else {
        if (s == OT_OK) s = store(path, buf, len);
        if (s == OT_OK)
            evict(c);
        else
            ot_log(OT_LOG_WARN, "compile cache: entry not stored: %s", ot_last_error());
    }
    ot_free(buf);
    return OT_OK;
}

ot_status ot_compile_cache_verify(const ot_compile_cache *c, int64_t *good, int64_t *removed) {
    if (good) *good = 0;
    if (removed) *removed = 0;
    if (!c) return ot_error(OT_ERR_INVALID_ARGUMENT, "compile cache: NULL argument");
    scan sc;
    OT_CHECK(scan_dir(c->dir, &sc));
    ot_compile_options off = ot_compile_options_default();
    off.native = OT_NATIVE_OFF; /* the entry's validity does not depend on native code */
    char path[4200];
    ot_status st = OT_OK;
    for (int64_t k = 0; k < sc.n; k++) {
        snprintf(path, sizeof path, "%s/%s" ENTRY_EXT, c->dir, sc.e[k].key);
        ot_executable *e = NULL;
        ot_status s = load_entry(path, NULL, &off, &e);
        bool ok = s == OT_OK;
        if (ok) {
            /* the name must be the key of what the entry holds */
            uint8_t fp[32], key[32];
            char hex[65];
            ot_executable_fingerprint(e, fp);
            ot_executable_free(e);
            s = key_of(fp, key);
            if (s != OT_OK) break;
            ot_hex(key, 32, hex);
            ok = strcmp(hex, sc.e[k].key) == 0;
            if (!ok) ot_error(OT_ERR_CORRUPT_DATA, "its name is not the key of its contents");
        } else if (s == OT_ERR_NOT_FOUND) {
            continue; /* removed by another process meanwhile */
        } else if (s == OT_ERR_OUT_OF_MEMORY) {
            st = s;
            break;
        }
        if (ok) {
            if (good) ++*good;
            continue;
        }
        ot_log(OT_LOG_WARN, "compile cache: removing unusable entry %s: %s", path, ot_last_error());
        if (unlink(path) == 0 && removed) ++*removed;
    }
    ot_free(sc.e);
    return st;
}

ot_status ot_compile_cache_clear(const ot_compile_cache *c, int64_t *removed) {
    if (removed) *removed = 0;
    if (!c) return ot_error(OT_ERR_INVALID_ARGUMENT, "compile cache: NULL argument");
    DIR *d = opendir(c->dir);
    if (!d)
        return ot_error(OT_ERR_IO, "compile cache: cannot read %s: %s", c->dir, strerror(errno));
    struct dirent *de;
    char path[4200];
    ot_status st = OT_OK;
    while ((de = readdir(d))) {
        bool entry = is_entry(de->d_name);
        if (!entry && !is_tmp(de->d_name)) continue; /* not ours: left alone */
        snprintf(path, sizeof path, "%s/%s", c->dir, de->d_name);
        if (unlink(path) == 0) {
            if (entry && removed) ++*removed;
        } else if (errno != ENOENT && st == OT_OK) {
            st = ot_error(OT_ERR_IO, "compile cache: cannot remove %s: %s", path, strerror(errno));
        }
    }
    closedir(d);
    return st;
}
