/*
 * Memory admission: the one place that decides, before a command allocates anything big, whether
 * what it is about to allocate fits. A caller lists what it will hold (inputs, arena, outputs,
 * optimizer state, ...), each item either once on the host or once per device; host devices take
 * their memory from the host, so device items count against the host too. The budget is the
 * smallest of what the machine can give without swapping (/proc/meminfo MemAvailable), what the
 * process's cgroup still allows (v2 memory.max or v1 memory.limit_in_bytes, on the way from the
 * process's cgroup up to the root, less that cgroup's usage not counting inactive file pages,
 * which the kernel reclaims before it fails an allocation) and, per device, the device's own
 * capacity (--device-memory, --hbm). A refusal is RESOURCE_EXHAUSTED and names each figure.
 *
 * The listed bytes are what the command knows before allocating: pool rounding, fast-kernel
 * scratch and small bookkeeping are not in them, so admission is a floor on the need; the
 * device pools still enforce their capacity exactly when the memory is taken.
 */
#include "optitpu/runtime.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads a small text file (at most n-1 bytes) into buf; false when it cannot be read. */
static bool read_small(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t k = fread(buf, 1, n - 1, f);
    bool err = ferror(f);
    fclose(f);
    buf[k] = '\0';
    return !err;
}

/* A non-negative decimal at the start of s (after blanks); -1 when there is none or it
 * overflows. */
static int64_t parse_u63(const char *s) {
    while (*s == ' ' || *s == '\t') s++;
    if (*s < '0' || *s > '9') return -1;
    int64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*s - '0');
    }
    return v;
}

/* "Key:   123 kB" in /proc/meminfo text, in bytes; -1 when absent. */
static int64_t meminfo_field(const char *text, const char *key) {
    size_t kl = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!strncmp(l, key, kl) && l[kl] == ':') {
            int64_t v = parse_u63(l + kl + 1);
            if (v < 0 || v > INT64_MAX / 1024) return -1;
            return v * 1024; /* the kernel writes kB (KiB) */
        }
    }
    return -1;
}

/* "key value" lines (memory.stat); -1 when absent. */
static int64_t stat_field(const char *text, const char *key) {
    size_t kl = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, key, kl) && l[kl] == ' ') return parse_u63(l + kl + 1);
    return -1;
}

/* One cgroup directory: its limit and what is left of it, taken into *lim / *avail when tighter.
 * v1 reports "no limit" as a huge number near INT64_MAX (rounded to the page size). */
static void cgroup_dir(const char *dir, bool v2, int64_t *lim, int64_t *avail) {
    char path[4200], buf[8192];
    snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    if (!read_small(path, buf, 64)) return;
    int64_t max = parse_u63(buf);
    if (max < 0 || max >= ((int64_t)1 << 60)) return; /* "max" or v1's unlimited */
    snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
    int64_t used = read_small(path, buf, 64) ? parse_u63(buf) : -1;
    if (used < 0) used = 0;
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    if (read_small(path, buf, sizeof buf)) {
        int64_t inactive = stat_field(buf, v2 ? "inactive_file" : "total_inactive_file");
        if (inactive > 0) used = inactive < used ? used - inactive : 0;
    }
    int64_t left = max > used ? max - used : 0;
    if (*lim < 0 || max < *lim) *lim = max;
    if (*avail < 0 || left < *avail) *avail = left;
}

/* The process's cgroup from <root>/proc/self/cgroup, walked from its directory up to the
 * hierarchy's root (a parent's limit binds its children). A directory that does not exist (a
 * cgroup namespace shows "/" for a path outside it) is skipped. */
static void cgroup_limits(const char *root, int64_t *lim, int64_t *avail) {
    char path[4200], text[8192];
    snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
    if (!read_small(path, text, sizeof text)) return;
    /* both kinds: a hybrid system lists a v2 line ("0::/") and a v1 memory controller, and only
     * one of them carries the limit; the tighter of what is found counts */
    for (int pass = 0; pass < 2; pass++) {
        bool v2 = pass == 0;
        for (char *l = text; l && *l;) {
            char *nl = strchr(l, '\n');
            if (nl) *nl = '\0';
            /* "hierarchy-id:controllers:path"; v2 is "0::path" */
            char *c1 = strchr(l, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            bool match = false;
            if (c1 && c2) {
                if (v2) {
                    match = c2 == c1 + 1 && !strncmp(l, "0:", 2);
                } else {
                    for (char *q = c1 + 1; q < c2;) {
                        char *e = memchr(q, ',', (size_t)(c2 - q));
                        if (!e) e = c2;
                        if (e - q == 6 && !memcmp(q, "memory", 6)) match = true;
                        q = e + 1;
                    }
                }
            }
            if (match) {
                char base[1100], dir[4200];
                snprintf(base, sizeof base, "%s/sys/fs/cgroup%s", root, v2 ? "" : "/memory");
                snprintf(dir, sizeof dir, "%s%s", base, c2 + 1);
                size_t bl = strlen(base);
                for (;;) {
                    size_t dl = strlen(dir);
                    while (dl > bl && dir[dl - 1] == '/') dir[--dl] = '\0';
                    cgroup_dir(dir, v2, lim, avail);
                    if (dl <= bl) break;
                    char *slash = strrchr(dir + bl, '/');
                    if (!slash) {
                        dir[bl] = '\0';
                    } else {
                        *slash = '\0';
                    }
                }
                if (nl) *nl = '\n';
                break;
            }
            if (nl) *nl = '\n';
            l = nl ? nl + 1 : NULL;
        }
    }
}

ot_status ot_host_memory_query_at(const char *root, ot_host_memory *out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "host memory: out is NULL");
    if (!root) root = "";
    out->mem_available = out->cgroup_limit = out->cgroup_available = out->available = -1;
    char path[4200], text[16384];
    snprintf(path, sizeof path, "%s/proc/meminfo", root);
    if (read_small(path, text, sizeof text)) {
        out->mem_available = meminfo_field(text, "MemAvailable");
        if (out->mem_available < 0) out->mem_available = meminfo_field(text, "MemFree");
    }
    cgroup_limits(root, &out->cgroup_limit, &out->cgroup_available);
    out->available = out->mem_available;
    if (out->cgroup_available >= 0 &&
        (out->available < 0 || out->cgroup_available < out->available))
        out->available = out->cgroup_available;
    return OT_OK;
}

ot_status ot_host_memory_query(ot_host_memory *out) {
    return ot_host_memory_query_at("", out);
}

/* "1.50 GiB (1610612736 bytes)", or "296 bytes" below 1 KiB. */
static const char *fmt_bytes(int64_t b, char *buf, size_t n) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (b < 1024) {
        snprintf(buf, n, "%" PRId64 " bytes", b);
        return buf;
    }
    double v = (double)b;
    int u = -1;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    snprintf(buf, n, "%.2f %s (%" PRId64 " bytes)", v, units[u], b);
    return buf;
}

static int64_t sat_add(int64_t a, int64_t b) {
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

static int64_t sat_mul(int64_t a, int64_t b) {
    return b != 0 && a > INT64_MAX / b ? INT64_MAX : a * b;
}

/* Appends "name size, " for the items of one kind to buf. */
static void list_items(char *buf, size_t n, const ot_mem_item *items, int nitems, bool per_device) {
    size_t len = strlen(buf);
    bool first = true;
    for (int k = 0; k < nitems && len < n; k++) {
        if (items[k].per_device != per_device || items[k].bytes <= 0) continue;
        char b[64];
        int w = snprintf(buf + len, n - len, "%s%s %s", first ? "" : ", ", items[k].name,
                         fmt_bytes(items[k].bytes, b, sizeof b));
        if (w > 0) len += (size_t)w;
        first = false;
    }
}

ot_status ot_mem_admit(const char *what, const ot_mem_item *items, int nitems, int devices,
                       int64_t device_capacity, const ot_host_memory *avail) {
    if (nitems < 0 || (nitems && !items) || devices < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "memory admission: bad arguments");
    if (!what) what = "this run";
    int64_t host = 0, per_dev = 0;
    for (int k = 0; k < nitems; k++) {
        if (items[k].bytes < 0)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "memory admission: %s has a negative size",
                            items[k].name ? items[k].name : "an item");
        if (items[k].per_device)
            per_dev = sat_add(per_dev, items[k].bytes);
        else
            host = sat_add(host, items[k].bytes);
    }
    char detail[700] = "", a[64], b[64], c[64];
    if (device_capacity > 0 && devices > 0 && per_dev > device_capacity) {
        list_items(detail, sizeof detail, items, nitems, true);
        return ot_error(OT_ERR_RESOURCE_EXHAUSTED,
                        "%s needs %s on each device (%s), more than the device's %s of memory "
                        "(--device-memory or --hbm)",
                        what, fmt_bytes(per_dev, a, sizeof a), detail,
                        fmt_bytes(device_capacity, b, sizeof b));
    }
    ot_host_memory q;
    if (!avail) {
        OT_CHECK(ot_host_memory_query(&q));
        avail = &q;
    }
    int64_t total = sat_add(host, sat_mul(per_dev, devices));
    if (avail->available >= 0 && total > avail->available) {
        list_items(detail, sizeof detail, items, nitems, false);
        if (per_dev > 0 && devices > 0) {
            size_t len = strlen(detail);
            snprintf(detail + len, sizeof detail - len, "%s%d device%s x (", len ? "; " : "",
                     devices, devices == 1 ? "" : "s");
            list_items(detail, sizeof detail, items, nitems, true);
            len = strlen(detail);
            snprintf(detail + len, sizeof detail - len, ")");
        }
        char srcs[300];
        int n = snprintf(srcs, sizeof srcs, "MemAvailable %s",
                         avail->mem_available >= 0 ? fmt_bytes(avail->mem_available, b, sizeof b)
                                                   : "unknown");
        if (avail->cgroup_limit >= 0 && n > 0 && (size_t)n < sizeof srcs)
            snprintf(srcs + n, sizeof srcs - (size_t)n, "; cgroup limit %s, of which %s free",
                     fmt_bytes(avail->cgroup_limit, c, sizeof c),
                     fmt_bytes(avail->cgroup_available, a, sizeof a));
        char tot[64];
        return ot_error(OT_ERR_RESOURCE_EXHAUSTED,
                        "%s needs %s of host memory (%s), more than the %s available (%s)", what,
                        fmt_bytes(total, tot, sizeof tot), detail,
                        fmt_bytes(avail->available, c, sizeof c), srcs);
    }
    return OT_OK;
}
