/* The native program of an executable: a C function per supported fusion, grouped into units of
 * at most CG_UNIT_BYTES of C (a kernel larger than CG_UNIT_ALONE is a unit of its own), each
 * unit compiled by the system C compiler into a shared object that is cached on disk by the
 * SHA-256 of (source, compiler, flags, CPU features), verified by its own SHA-256 when loaded,
 * and opened with dlopen. Missing units compile side by side, one compiler process per online
 * CPU; each unit's compile time (the compiler's CPU time, and the interval) is kept for the
 * profile. Built by the compiler as its last stage (src/compiler/native.c), one build at a time
 * in the process. */
#include "codegen/codegen_internal.h"
#include "exec/numerics.h" /* EX_RED_BLOCK: the block form's blocks */

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* -fno-builtin-F for the C library's functions that are not correctly rounded: gcc would fold
 * a call on a constant with MPFR (correctly rounded; tanh(max(x, c)) calls tanhf(c) in one
 * branch) where the reference evaluator calls the library, 1 ulp apart (test_libm_not_folded). */
#define CG_NO_FOLD                                                                                 \
    "-fno-builtin-exp", "-fno-builtin-expf", "-fno-builtin-expm1", "-fno-builtin-expm1f",          \
        "-fno-builtin-log", "-fno-builtin-logf", "-fno-builtin-log1p", "-fno-builtin-log1pf",      \
        "-fno-builtin-sin", "-fno-builtin-sinf", "-fno-builtin-cos", "-fno-builtin-cosf",          \
        "-fno-builtin-tan", "-fno-builtin-tanf", "-fno-builtin-tanh", "-fno-builtin-tanhf",        \
        "-fno-builtin-atan2", "-fno-builtin-atan2f", "-fno-builtin-pow", "-fno-builtin-powf",      \
        "-fno-builtin-erf", "-fno-builtin-erff", "-fno-builtin-cbrt", "-fno-builtin-cbrtf"
/* -fno-trapping-math: gcc vectorizes floor, ceil, round and nearbyint (vrndscale) only without
 * trapping math; with it a loop holding one of them stays scalar (jax's lgamma and digamma take
 * floor for their reflection: the loop of an f64 lgamma fusion ran 7.0 Melem/s, 38.6 vectorized).
 * The option changes no value (no exception flags are read), only what gcc may speculate. */
/* gcc does not take the restrict of a kernel's local operand pointers (loaded from in[k] and
 * out[k]) as a promise: it vectorizes a loop behind run-time overlap checks between every store
 * and every other access, and gives up (scalar loop) past 10 checks, which any fusion of a few
 * outputs reaches (a 9-output GELU-gradient fusion: 54 checks, 8x slower). The checks are a
 * few instructions per inner loop entry and keep in-place kernels correct; the cap is raised so
 * that fusions of up to about 20 operands vectorize (test_many_operands_vectorize). Clang
 * ignores the parameter (-w silences its warning). */
#define CG_FLAGS                                                                                   \
    "-O3", "-march=native", "-mprefer-vector-width=512", "-std=c11", "-fPIC", "-shared",           \
        "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math", "-fno-strict-aliasing",      \
        "-w", "--param", "vect-max-version-for-alias-checks=256", CG_NO_FOLD
/* the flags again, as the cache key reads them */
static const char *const g_flags[] = {CG_FLAGS};
#define CG_CHUNK 32768 /* elements per piece of the fixed partition (a multiple of 64) */
/* Units: small kernels share a compiler process (one costs ~30 ms to start), large ones get
 * their own so that each large kernel's compile time is measured apart and a module's
 * compile spreads over the CPUs. */
#define CG_UNIT_BYTES (128 * 1024)
#define CG_UNIT_ALONE (16 * 1024)
#define CG_MAX_PROCS  16

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic unsigned g_tmp_counter;

/* ---- environment --------------------------------------------------------------------------- */

/* A non-negative integer from the environment at least lo, else def. */
static int64_t env_int(const char *name, int64_t lo, int64_t def) {
    const char *e = getenv(name);
    if (e && *e) {
        char *end;
        long long v = strtoll(e, &end, 10);
        if (*end == 0 && v >= lo) return v;
    }
    return def;
}

static int64_t min_elements(void) {
    return env_int("OPTITPU_CODEGEN_MIN_ELEMENTS", 0, 4096);
}

/* The option, else OPTITPU_CODEGEN_UNIT_BYTES, else CG_UNIT_BYTES (tests use it to get a unit
 * per kernel). */
static int64_t unit_bytes(const cg_options *o) {
    return o->unit_bytes > 0 ? o->unit_bytes
                             : env_int("OPTITPU_CODEGEN_UNIT_BYTES", 1, CG_UNIT_BYTES);
}

static bool find_in_path(const char *name, char *out, size_t cap) {
    if (strchr(name, '/')) {
        if (access(name, X_OK) != 0) return false;
        snprintf(out, cap, "%s", name);
        return true;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *c = strchr(path, ':');
        size_t l = c ? (size_t)(c - path) : strlen(path);
        if (l > 0 && l + strlen(name) + 2 < cap) {
            snprintf(out, cap, "%.*s/%s", (int)l, path, name);
            struct stat st;
            if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return true;
        }
        path += l + (c ? 1 : 0);
    }
    return false;
}

/* The option, else OPTITPU_CC, else cc on PATH. */
static bool find_cc(const cg_options *o, char *out, size_t cap) {
    const char *e = o->cc && *o->cc ? o->cc : getenv("OPTITPU_CC");
    return find_in_path(e && *e ? e : "cc", out, cap);
}

static ot_status cache_dir(char *out, size_t cap) {
    const char *d = getenv("OPTITPU_CACHE_DIR");
    if (d && *d) {
        snprintf(out, cap, "%s", d);
    } else if ((d = getenv("XDG_CACHE_HOME")) && *d) {
        snprintf(out, cap, "%s/optitpu", d);
    } else if ((d = getenv("HOME")) && *d) {
        snprintf(out, cap, "%s/.cache/optitpu", d);
    } else {
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "codegen: no cache directory (set OPTITPU_CACHE_DIR or HOME)");
    }
    /* mkdir -p */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", out);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(tmp, 0755);
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return ot_error(OT_ERR_IO, "codegen: cannot create cache directory %s: %s", out,
                        strerror(errno));
    return OT_OK;
}

/* Starts argv with stdout and stderr into log (a file path); -1 when it cannot start. */
static pid_t spawn_cmd(char *const *argv, const char *log) {
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa) != 0) return -1;
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc != 0 ? -1 : pid;
}

/* Waits for pid: its exit status (-1: killed or lost) and CPU time (user + system). */
static int wait_cmd(pid_t pid, uint64_t *cpu_ns) {
    int status;
    struct rusage ru;
    *cpu_ns = 0;
    while (wait4(pid, &status, 0, &ru) < 0)
        if (errno != EINTR) return -1;
    *cpu_ns = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
              (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static ot_status read_file(const char *path, char **data, size_t *n) {
    *data = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return ot_error(OT_ERR_IO, "codegen: open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *p = ot_malloc(cap);
    while (p) {
        size_t r = fread(p + len, 1, cap - len - 1, f);
        len += r;
        if (len < cap - 1) break;
        char *q = ot_realloc(p, cap * 2);
        if (!q) {
            ot_free(p);
            p = NULL;
            break;
        }
        p = q;
        cap *= 2;
    }
    bool err = ferror(f);
    fclose(f);
    if (!p) return ot_error(OT_ERR_OUT_OF_MEMORY, "codegen: reading %s", path);
    if (err) {
        ot_free(p);
        return ot_error(OT_ERR_IO, "codegen: read %s failed", path);
    }
    p[len] = 0;
    *data = p;
    *n = len;
    return OT_OK;
}

static ot_status write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return ot_error(OT_ERR_IO, "codegen: create %s: %s", path, strerror(errno));
    bool ok = fwrite(data, 1, n, f) == n;
    ok = fflush(f) == 0 && ok;
    ok = fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (!ok) {
        unlink(path);
        return ot_error(OT_ERR_IO, "codegen: write %s failed", path);
    }
    return OT_OK;
}

static void hex(const uint8_t *d, int n, char *out) {
    for (int k = 0; k < n; k++) sprintf(out + 2 * k, "%02x", d[k]);
}

/* What the compiler is and what -march=native means to it (version text and predefined macros),
 * captured once per compiler path and process. */
static char g_ident_cc[4096];
static char *g_ident;
static size_t g_ident_n;

static ot_status compiler_identity(const char *cc, const char *dir, const char **id, size_t *n) {
    if (g_ident && strcmp(g_ident_cc, cc) == 0) {
        *id = g_ident;
        *n = g_ident_n;
        return OT_OK;
    }
    char log[4200];
    snprintf(log, sizeof log, "%s/tmp.ident.%d.%u.txt", dir, (int)getpid(),
             atomic_fetch_add(&g_tmp_counter, 1));
    char *v_argv[] = {(char *)cc, "--version", NULL};
    char *m_argv[] = {(char *)cc, "-march=native", "-dM", "-E", "-x", "c", "/dev/null", NULL};
    ot_strbuf b = {0};
    char *const *cmds[2] = {v_argv, m_argv};
    ot_status st = OT_OK;
    for (int k = 0; k < 2 && st == OT_OK; k++) {
        pid_t pid = spawn_cmd(cmds[k], log);
        uint64_t cpu = 0;
        int rc = pid < 0 ? -1 : wait_cmd(pid, &cpu);
        char *text = NULL;
        size_t tn = 0;
        if (rc != 0) {
            st = ot_error(OT_ERR_FAILED_PRECONDITION, "codegen: %s %s failed (status %d)", cc,
                          cmds[k][1], rc);
            break;
        }
        st = read_file(log, &text, &tn);
        if (st == OT_OK) ot_strbuf_printf(&b, "%s\n", text);
        ot_free(text);
    }
    unlink(log);
    if (st == OT_OK && b.oom) st = ot_error(OT_ERR_OUT_OF_MEMORY, "codegen: compiler identity");
    if (st != OT_OK) {
        ot_strbuf_free(&b);
        return st;
    }
    /* kept for the process: plain malloc, outside the library's allocation accounting */
    char *keep = malloc(b.n + 1);
    if (!keep) {
        ot_strbuf_free(&b);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "codegen: compiler identity");
    }
    memcpy(keep, b.p, b.n + 1);
    size_t kn = b.n;
    ot_strbuf_free(&b);
    free(g_ident);
    g_ident = keep;
    g_ident_n = kn;
    snprintf(g_ident_cc, sizeof g_ident_cc, "%s", cc);
    *id = g_ident;
    *n = g_ident_n;
    return OT_OK;
}

/* ---- build ----------------------------------------------------------------------------------- */

void cg_program_free(cg_program *p) {
    if (!p) return;
    for (int k = 0; p->k && k < p->nk; k++) {
        ot_free(p->k[k].alias);
        ot_free(p->k[k].in_bytes);
        ot_free(p->k[k].out_bytes);
    }
    ot_free(p->k);
    for (int u = 0; p->units && u < p->nunits; u++)
        if (p->units[u].handle) dlclose(p->units[u].handle);
    ot_free(p->units);
    ot_free(p);
}

/* Loads dir/<hex>.so when its recorded SHA-256 matches its bytes. */
static void *load_cached(const char *so, const char *sum, bool *corrupt) {
    *corrupt = false;
    if (access(so, R_OK) != 0) return NULL;
    char *data = NULL, *want = NULL;
    size_t n = 0, wn = 0;
    void *h = NULL;
    if (read_file(so, &data, &n) == OT_OK && read_file(sum, &want, &wn) == OT_OK) {
        uint8_t d[32];
        char got[65];
        if (ot_sha256_digest(data, n, d) == OT_OK) {
            hex(d, 32, got);
            if (wn >= 64 && memcmp(got, want, 64) == 0)
                h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
            else
                *corrupt = true;
        }
    } else {
        *corrupt = true;
    }
    ot_clear_error();
    ot_free(data);
    ot_free(want);
    return h;
}

/* A unit being compiled: its temporary files and process. */
typedef struct unit_job {
    char c_tmp[4300], so_tmp[4300], sum_tmp[4300], log[4300], c_final[4300];
    char so[4200], sum[4200];
    pid_t pid;
} unit_job;

/* Writes the unit's source and starts the compiler on it. */
static ot_status unit_spawn(const char *cc, const char *dir, const char *khex, const ot_strbuf *src,
                            unit_job *j) {
    char base[4200];
    snprintf(base, sizeof base, "%s/tmp.%s.%d.%u", dir, khex, (int)getpid(),
             atomic_fetch_add(&g_tmp_counter, 1));
    snprintf(j->c_tmp, sizeof j->c_tmp, "%s.c", base);
    snprintf(j->so_tmp, sizeof j->so_tmp, "%s.so", base);
    snprintf(j->sum_tmp, sizeof j->sum_tmp, "%s.sha256", base);
    snprintf(j->log, sizeof j->log, "%s.log", base);
    snprintf(j->c_final, sizeof j->c_final, "%s/%s.c", dir, khex);
    j->pid = -1;
    OT_CHECK(write_file(j->c_tmp, src->p, src->n));
    char *argv[] = {(char *)cc, CG_FLAGS, "-o", j->so_tmp, j->c_tmp, "-lsleef", "-lm", NULL};
    j->pid = spawn_cmd(argv, j->log);
    if (j->pid < 0) {
        unlink(j->c_tmp);
        return ot_error(OT_ERR_INTERNAL, "codegen: cannot start %s: %s", cc, strerror(errno));
    }
    return OT_OK;
}

/* Waits for the unit's compiler, then publishes the object and its checksum in the cache. */
static ot_status unit_finish(const char *cc, unit_job *j, uint64_t *cpu_ns) {
    int rc = wait_cmd(j->pid, cpu_ns);
    j->pid = -1;
    ot_status st = OT_OK;
    if (rc != 0) {
        char *text = NULL;
        size_t tn = 0;
        if (read_file(j->log, &text, &tn) != OT_OK) ot_clear_error();
        if (text && tn > 600) text[600] = 0;
        st = ot_error(OT_ERR_INTERNAL, "codegen: %s failed (status %d) on %s: %s", cc, rc, j->c_tmp,
                      text ? text : "");
        ot_free(text);
        unlink(j->so_tmp);
        unlink(j->log);
        return st; /* the source stays for inspection */
    }
    unlink(j->log);
    char *data = NULL;
    size_t n = 0;
    st = read_file(j->so_tmp, &data, &n);
    uint8_t d[32];
    char dh[66];
    if (st == OT_OK) st = ot_sha256_digest(data, n, d);
    ot_free(data);
    if (st == OT_OK) {
        hex(d, 32, dh);
        dh[64] = '\n';
        st = write_file(j->sum_tmp, dh, 65);
    }
    /* the object first, its checksum second: a reader between the two sees a mismatch and
     * rebuilds */
    if (st == OT_OK && rename(j->so_tmp, j->so) != 0)
        st = ot_error(OT_ERR_IO, "codegen: rename %s: %s", j->so, strerror(errno));
    if (st == OT_OK && rename(j->sum_tmp, j->sum) != 0)
        st = ot_error(OT_ERR_IO, "codegen: rename %s: %s", j->sum, strerror(errno));
    if (st == OT_OK) rename(j->c_tmp, j->c_final);
    unlink(j->so_tmp);
    unlink(j->sum_tmp);
    unlink(j->c_tmp);
    return st;
}

/* Compiles or loads every unit of p; src holds the preamble [0, pre) and each native kernel's
 * text at [koff[k], koff[k] + klen[k]). */
static ot_status build_units(cg_program *p, const cg_options *o, const char *cc,
                             const ot_strbuf *src, size_t pre, const size_t *koff,
                             const size_t *klen) {
    char dir[4096];
    const char *ident = NULL;
    size_t identn = 0;
    OT_CHECK(cache_dir(dir, sizeof dir));
    OT_CHECK(compiler_identity(cc, dir, &ident, &identn));
    /* units: consecutive native kernels, a large one alone */
    p->units = ot_calloc((size_t)(p->nnative ? p->nnative : 1), sizeof *p->units);
    if (!p->units) return ot_error(OT_ERR_OUT_OF_MEMORY, "codegen: out of memory");
    int nu = 0;
    const int64_t limit = unit_bytes(o);
    for (int k = 0; k < p->nk; k++) {
        if (!p->k[k].fn) continue;
        cg_unit *u = nu ? &p->units[nu - 1] : NULL;
        bool alone = klen[k] > CG_UNIT_ALONE;
        if (!u || alone || u->c_bytes + (int64_t)klen[k] > limit ||
            (u->nkernels == 1 && klen[u->first] > CG_UNIT_ALONE)) {
            u = &p->units[nu++];
            u->first = k;
        }
        u->last = k;
        u->nkernels++;
        u->c_bytes += (int64_t)klen[k];
        p->k[k].unit = nu - 1;
    }
    p->nunits = nu;
    unit_job *jobs = ot_calloc((size_t)(nu ? nu : 1), sizeof *jobs);
    ot_strbuf *usrc = ot_calloc((size_t)(nu ? nu : 1), sizeof *usrc);
    char(*khex)[65] = ot_calloc((size_t)(nu ? nu : 1), sizeof *khex);
    int *pending = ot_calloc((size_t)(nu ? nu : 1), sizeof *pending);
    ot_status st = OT_OK;
    if (!jobs || !usrc || !khex || !pending) st = ot_error(OT_ERR_OUT_OF_MEMORY, "codegen: oom");
    int npending = 0;
    p->from_cache = true;
    for (int i = 0; i < nu && st == OT_OK; i++) {
        cg_unit *u = &p->units[i];
        ot_strbuf *b = &usrc[i];
        ot_strbuf_printf(b, "%.*s", (int)pre, src->p);
        for (int k = u->first; k <= u->last; k++)
            if (p->k[k].fn) ot_strbuf_printf(b, "%.*s", (int)klen[k], src->p + koff[k]);
        cg_emit_vmath_wrappers(b, pre);
        if (b->oom) {
            st = ot_error(OT_ERR_OUT_OF_MEMORY, "codegen: out of memory");
            break;
        }
        ot_sha256 h;
        uint8_t key[32];
        st = ot_sha256_init(&h);
        if (st != OT_OK) break;
        static const char tag[] = "optitpu-codegen-1";
        ot_sha256_update(&h, tag, sizeof tag);
        ot_sha256_update(&h, b->p, b->n + 1);
        ot_sha256_update(&h, cc, strlen(cc) + 1);
        for (size_t f = 0; f < sizeof g_flags / sizeof g_flags[0]; f++)
            ot_sha256_update(&h, g_flags[f], strlen(g_flags[f]) + 1);
        ot_sha256_update(&h, ident, identn);
        if ((st = ot_sha256_final(&h, key)) != OT_OK) break;
        if (i == 0) memcpy(p->key, key, 32);
        hex(key, 32, khex[i]);
        snprintf(jobs[i].so, sizeof jobs[i].so, "%s/%s.so", dir, khex[i]);
        snprintf(jobs[i].sum, sizeof jobs[i].sum, "%s/%s.sha256", dir, khex[i]);
        jobs[i].pid = -1;
        bool corrupt = false;
        u->handle = load_cached(jobs[i].so, jobs[i].sum, &corrupt);
        if (u->handle) {
            u->from_cache = true;
            continue;
        }
        if (corrupt)
            ot_log(OT_LOG_WARN, "codegen: cached %s does not match its checksum; rebuilding",
                   jobs[i].so);
        p->from_cache = false;
        pending[npending++] = i;
    }
    /* the missing units, one compiler per online CPU at a time, reaped in start order */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int procs = ncpu < 1 ? 1 : ncpu > CG_MAX_PROCS ? CG_MAX_PROCS : (int)ncpu;
    int started = 0, reaped = 0;
    while (st == OT_OK && reaped < npending) {
        while (st == OT_OK && started < npending && started - reaped < procs) {
            int i = pending[started];
            p->units[i].t0_ns = ot_now_ns();
            st = unit_spawn(cc, dir, khex[i], &usrc[i], &jobs[i]);
            if (st == OT_OK) started++;
        }
        if (st != OT_OK) break;
        int i = pending[reaped++];
        st = unit_finish(cc, &jobs[i], &p->units[i].cpu_ns);
        p->units[i].t1_ns = ot_now_ns();
        if (st == OT_OK) {
            p->units[i].handle = dlopen(jobs[i].so, RTLD_NOW | RTLD_LOCAL);
            if (!p->units[i].handle)
                st = ot_error(OT_ERR_INTERNAL, "codegen: dlopen %s: %s", jobs[i].so, dlerror());
        }
    }
    /* on failure, the compilers still running are waited for (their files removed) */
    for (; reaped < started; reaped++) {
        unit_job *j = &jobs[pending[reaped]];
        uint64_t cpu;
        if (j->pid > 0) wait_cmd(j->pid, &cpu);
        unlink(j->so_tmp);
        unlink(j->sum_tmp);
        unlink(j->log);
        unlink(j->c_tmp);
    }
    for (int k = 0; k < p->nk && st == OT_OK; k++) {
        if (!p->k[k].fn) continue;
        char fname[32];
        snprintf(fname, sizeof fname, "otk_%d", k);
        void *sym = dlsym(p->units[p->k[k].unit].handle, fname);
        if (!sym) {
            st = ot_error(OT_ERR_INTERNAL, "codegen: %s lacks %s", jobs[p->k[k].unit].so, fname);
            break;
        }
        memcpy(&p->k[k].fn, &sym, sizeof sym);
        for (int f = 0; f < 2 && p->k[k].nblk > 0; f++) {
            snprintf(fname, sizeof fname, "otk_%d_%s", k, f ? "fold" : "tree");
            sym = dlsym(p->units[p->k[k].unit].handle, fname);
            if (!sym) {
                st =
                    ot_error(OT_ERR_INTERNAL, "codegen: %s lacks %s", jobs[p->k[k].unit].so, fname);
                break;
            }
            memcpy(f ? &p->k[k].fold : &p->k[k].tree, &sym, sizeof sym);
        }
    }
    for (int i = 0; usrc && i < nu; i++) ot_strbuf_free(&usrc[i]);
    ot_free(usrc);
    ot_free(jobs);
    ot_free(khex);
    ot_free(pending);
    return st;
}

/* Whether some candidate holds an array of at least minel elements. A kernel's iteration space
 * times its work per element (what the size rule weighs) is the element count of one of its
 * arrays (an output, or a reduce's operand), so without one no kernel can reach the rule's
 * threshold: that is known without generating any C. */
static bool any_large(const cg_kernel_desc *kd, int nk, int64_t minel) {
    for (int k = 0; k < nk; k++) {
        if (!kd[k].fused) continue;
        for (const ot_instr *x = kd[k].fused->first; x; x = x->next)
            if (x->shape.kind == OT_IR_ARRAY && ot_shape_numel_unchecked(&x->shape.array) >= minel)
                return true;
    }
    return false;
}

static ot_status build(const cg_kernel_desc *kd, int nk, const cg_options *o, cg_program **out) {
    *out = NULL;
    if (o->mode == CG_OFF) return OT_OK;
    if (o->mode == CG_AUTO) {
        const char *env = getenv("OPTITPU_CODEGEN");
        if (env && strcmp(env, "0") == 0) return OT_OK;
    }
    int64_t minel = o->mode == CG_ON || o->all_sizes ? 0 : min_elements();
    /* only small fusions: no program (below), decided before looking for a compiler */
    if (!any_large(kd, nk, minel)) return OT_OK;
    char cc[4096];
    if (!find_cc(o, cc, sizeof cc)) {
        /* no compiler: the interpreter runs (said only when native code was asked for) */
        if (o->mode == CG_ON)
            ot_log(OT_LOG_WARN, "codegen: no C compiler found (%s); fusions run in the interpreter",
                   o->cc && *o->cc ? o->cc : "OPTITPU_CC or cc on PATH");
        return OT_OK;
    }
    int nbig = 0; /* fusions of at least minel elements (times the work per element) */
    cg_program *p = ot_calloc(1, sizeof *p);
    if (!p) return ot_error(OT_ERR_OUT_OF_MEMORY, "codegen: out of memory");
    p->nk = nk;
    p->k = ot_calloc((size_t)(nk ? nk : 1), sizeof *p->k);
    size_t *koff = ot_calloc((size_t)(nk ? nk : 1), sizeof *koff);
    size_t *klen = ot_calloc((size_t)(nk ? nk : 1), sizeof *klen);
    if (!p->k || !koff || !klen) {
        ot_free(koff);
        ot_free(klen);
        cg_program_free(p);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "codegen: out of memory");
    }
    ot_strbuf src = {0};
    cg_emit_preamble(&src);
    size_t pre = src.n;
    ot_status st = OT_OK;
    for (int k = 0; k < nk && st == OT_OK; k++) {
        const cg_kernel_desc *d = &kd[k];
        if (!d->fused) continue;
        cg_entry *en = &p->k[k];
        en->alias = ot_malloc((size_t)(d->ninputs + 1) * sizeof *en->alias);
        en->in_bytes = ot_malloc((size_t)(d->ninputs + 1) * sizeof *en->in_bytes);
        en->out_bytes = ot_malloc((size_t)(d->noutputs + 1) * sizeof *en->out_bytes);
        if (!en->alias || !en->in_bytes || !en->out_bytes) {
            st = ot_error(OT_ERR_OUT_OF_MEMORY, "codegen: out of memory");
            break;
        }
        for (int q = 0; q < d->ninputs; q++) {
            en->alias[q] = d->alias[q];
            en->in_bytes[q] = d->in_bytes[q];
        }
        for (int r = 0; r < d->noutputs; r++) en->out_bytes[r] = d->out_bytes[r];
        en->linear = d->linear;
        char fname[32];
        snprintf(fname, sizeof fname, "otk_%d", k);
        size_t mark = src.n;
        int64_t n = 0, work = 1, min_iters = 1, nblk = 0;
        bool cols = false;
        ot_status es = cg_emit_fusion(d, fname, &src, &n, &work, &min_iters, &nblk, &cols);
        if (es == OT_ERR_OUT_OF_MEMORY) {
            st = es;
            break;
        }
        if (es != OT_OK) { /* interpreted; say why at debug level */
            ot_log(OT_LOG_DEBUG, "%s", ot_last_error());
            ot_clear_error();
            src.n = mark;
            if (src.p) src.p[mark] = 0;
            continue;
        }
        if (n * work >= minel) nbig++;
        koff[k] = mark;
        klen[k] = src.n - mark;
        en->numel = n;
        en->nblk = nblk;
        en->cols = cols;
        /* the elementwise loop (no reduce): each iteration one element, or one row of `work` */
        en->per = 1;
        for (const ot_instr *x = d->fused->first; x; x = x->next)
            if (x->opcode == OT_OP_REDUCE) en->per = 0;
        if (en->per) en->per = work;
        /* a column loop over several trailing dims (a short last dim under broadcasts) is not
         * one row of the last dim: such a kernel does not run piecewise (cg_range_of) */
        const ot_instr *leaf = d->fused->root;
        if (leaf && leaf->opcode == OT_OP_TUPLE && leaf->noperands > 0) leaf = leaf->operands[0];
        if (en->per > 1 &&
            (!leaf || leaf->shape.kind != OT_IR_ARRAY || leaf->shape.array.rank < 1 ||
             leaf->shape.array.dims[leaf->shape.array.rank - 1] != work))
            en->per = 0;
        en->chunk = CG_CHUNK / work > min_iters ? CG_CHUNK / work : min_iters;
        en->nin = d->ninputs;
        en->nout = d->noutputs;
        en->fn = (cg_fn)1; /* resolved after loading */
        p->nnative++;
    }
    if (st == OT_OK && src.oom) st = ot_error(OT_ERR_OUT_OF_MEMORY, "codegen: out of memory");
    /* Only small fusions: the interpreter is cheap there and a compile is not. Once one fusion
     * is large enough to be compiled, the small ones go into the same objects: they add little
     * to those compiles, and interpreted they cost ~30x native per element (a 200-tensor Adam
     * step had a quarter of its tensors under the threshold and spent a fifth of its time
     * there). */
    if (st == OT_OK && nbig == 0) p->nnative = 0;
    if (st == OT_OK && p->nnative > 0) st = build_units(p, o, cc, &src, pre, koff, klen);
    ot_strbuf_free(&src);
    ot_free(koff);
    ot_free(klen);
    if (st != OT_OK || p->nnative == 0) {
        cg_program_free(p);
        return st;
    }
    *out = p;
    return OT_OK;
}

ot_status cg_program_build(const cg_kernel_desc *k, int nk, const cg_options *o, cg_program **out) {
    *out = NULL;
    static const cg_options defaults = {CG_AUTO, 0, NULL, false};
    /* one build at a time: the compiler's identity and the temporary names are per process */
    pthread_mutex_lock(&g_mu);
    ot_status st = build(k, nk, o ? o : &defaults, out);
    pthread_mutex_unlock(&g_mu);
    return st;
}

void cg_program_stats(const cg_program *p, cg_stats *out) {
    memset(out, 0, sizeof *out);
    if (!p) return;
    out->nnative = p->nnative;
    out->nunits = p->nunits;
    for (int i = 0; i < p->nunits; i++) {
        const cg_unit *u = &p->units[i];
        if (u->from_cache) out->ncached++;
        if (u->t0_ns) out->ncompiled++;
        out->cc_cpu_ns += u->cpu_ns;
    }
}

ot_status cg_program_report(const cg_program *p, cg_report_fn fn, void *ctx) {
    for (int i = 0; p && i < p->nunits; i++) {
        const cg_unit *u = &p->units[i];
        if (u->from_cache || !u->t0_ns) continue;
        char name[200];
        snprintf(name, sizeof name,
                 "codegen unit %d: %d kernel%s (%d..%d), %lld KB of C, cc cpu %.3f s", i,
                 u->nkernels, u->nkernels == 1 ? "" : "s", u->first, u->last,
                 (long long)((u->c_bytes + 1023) / 1024), (double)u->cpu_ns * 1e-9);
        OT_CHECK(fn(ctx, name, u->t0_ns, u->t1_ns, u->c_bytes));
    }
    return OT_OK;
}

bool cg_native(const cg_program *p, int k) {
    return p && k >= 0 && k < p->nk && p->k[k].fn;
}

bool cg_splits(const cg_program *p, int k) {
    /* cg_run's rule (the block form splits whenever its outputs are few for the pool) */
    return cg_native(p, k) && (p->k[k].numel > p->k[k].chunk || p->k[k].nblk > 0);
}

int64_t cg_piece(const cg_program *p, int k, int threads) {
    if (!cg_native(p, k)) return 0;
    const cg_entry *en = &p->k[k];
    if (!en->cols || threads < 1) return en->chunk;
    /* A column piece reads its columns of every reduced row, each row another page: the pieces
     * of CG_CHUNK / rows columns (64 for a bias gradient over a batch of 512) read a few cache
     * lines of each of 1536 pages per piece and array. One piece per thread instead, a whole
     * multiple of 16 columns: the select + column sum of an MLP's ReLU gradient, 512 x 1024
     * f32 with its [512, 1024] output, on two threads 0.56-0.66 -> 0.36-0.38 ms (one thread:
     * 0.31-0.48). Whole columns per piece either way: the bits do not depend on the split. */
    int64_t per = (en->numel + threads - 1) / threads;
    per = (per + 15) / 16 * 16;
    return per > en->chunk ? per : en->chunk;
}

/* ---- run ---------------------------------------------------------------------------------------
 */

typedef struct run_ctx {
    cg_fn fn;
    void *const *in, *const *out;
} run_ctx;

static _Thread_local bool tl_in_task;

static void run_range(void *ctx, int64_t b, int64_t e, int ith) {
    (void)ith;
    run_ctx *c = ctx;
    bool was = tl_in_task;
    tl_in_task = true;
    c->fn(c->in, c->out, b, e);
    tl_in_task = was;
}

static bool overlaps(const void *a, int64_t an, const void *b, int64_t bn) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return an > 0 && bn > 0 && x < y + (uintptr_t)bn && y < x + (uintptr_t)an;
}

/* The buffers are laid out as the kernel was compiled for: an in-place input is its output's
 * memory, every other input overlaps no output, and no two outputs overlap. The generated
 * functions take their pointers as restrict parameters (emit_head_sig), which is only true
 * under this layout. */
static bool laid_out(const cg_entry *en, void *const *in, void *const *out) {
    for (int q = 0; q < en->nin; q++) {
        int r = en->alias[q];
        if (r >= 0) {
            if (in[q] != out[r]) return false;
            continue;
        }
        for (int o = 0; o < en->nout; o++)
            if (overlaps(in[q], en->in_bytes[q], out[o], en->out_bytes[o])) return false;
    }
    for (int o = 0; o < en->nout; o++)
        for (int p = o + 1; p < en->nout; p++)
            if (overlaps(out[o], en->out_bytes[o], out[p], en->out_bytes[p])) return false;
    return true;
}

bool cg_range_of(const cg_program *p, int k, int q, int64_t numel, void *const *in,
                 void *const *out, cg_range *r) {
    if (!p || k < 0 || k >= p->nk) return false;
    const cg_entry *en = &p->k[k];
    if (!en->fn || q < 0 || q >= en->nin || q >= 64 || !(en->linear >> q & 1) || en->per < 1 ||
        en->numel * en->per != numel || !laid_out(en, in, out))
        return false;
    *r = (cg_range){en->fn, in, out, en->per};
    return true;
}

/* The block form (cg_emit_fusion's nblk): the trees over the pool, then the fold (few outputs:
 * on this thread). part: numel * nblk elements of at most 8 bytes. */
typedef struct part_ctx {
    cg_part_fn fn;
    void *const *in, *const *out;
    void *part;
} part_ctx;

static void run_part(void *ctx, int64_t b, int64_t e, int ith) {
    (void)ith;
    part_ctx *c = ctx;
    bool was = tl_in_task;
    tl_in_task = true;
    c->fn(c->in, c->out, c->part, b, e);
    tl_in_task = was;
}

/* Whether kernel en runs in the block form on nth threads: fewer outputs than CG_GRAIN per
 * thread (the loop over outputs would leave threads idle or unbalanced) and enough elements for
 * two pieces of the partition. Either form gives the same bits. */
#define CG_GRAIN 4
static bool use_blocks(const cg_entry *en, int nth) {
    return en->nblk > 0 && nth > 1 && en->numel < (int64_t)CG_GRAIN * nth &&
           en->numel * en->nblk >= 2 * (CG_CHUNK / EX_RED_BLOCK);
}

static bool run_blocks(const cg_entry *en, void *const *in, void *const *out, ot_threadpool *pool) {
    enum { STACK = 2048 };
    uint64_t stack[STACK];
    int64_t n = en->numel * en->nblk;
    void *part = n <= STACK ? stack : ot_malloc((size_t)n * sizeof(uint64_t));
    if (!part) return false; /* the one-loop form then runs */
    part_ctx c = {en->tree, in, out, part};
    int nth = ot_threadpool_size(pool);
    /* pieces of whole blocks, at least four per thread, at most CG_CHUNK elements */
    int64_t chunk = n / (4 * nth);
    chunk = chunk < 1 ? 1 : chunk > CG_CHUNK / EX_RED_BLOCK ? CG_CHUNK / EX_RED_BLOCK : chunk;
    ot_parallel_for(pool, n, chunk, OT_SCHEDULE_DYNAMIC, run_part, &c);
    en->fold(in, out, part, 0, en->numel);
    if (part != stack) ot_free(part);
    return true;
}

bool cg_run(const cg_program *p, int k, void *const *in, void *const *out, ot_threadpool *pool) {
    if (!p || k < 0 || k >= p->nk) return false;
    const cg_entry *en = &p->k[k];
    if (!en->fn || !laid_out(en, in, out)) return false;
    if (en->numel == 0) return true;
    run_ctx c = {en->fn, in, out};
    if (en->nblk > 0 && !tl_in_task) {
        ot_threadpool *bp = pool ? pool : ot_threadpool_default();
        if (use_blocks(en, ot_threadpool_size(bp)) && run_blocks(en, in, out, bp)) return true;
    }
    if (en->numel <= en->chunk || tl_in_task) {
        en->fn(in, out, 0, en->numel);
        return true;
    }
    ot_threadpool *tp = pool ? pool : ot_threadpool_default();
    ot_parallel_for(tp, en->numel, cg_piece(p, k, ot_threadpool_size(tp)), OT_SCHEDULE_DYNAMIC,
                    run_range, &c);
    return true;
}
