/* safetensors reader (zero-copy, validated before use) and writer (reference ordering). */
#include "optitpu/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ft/ft_io.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; a big-endian host needs byte swapping here"
#endif

static const struct {
    const char *name;
    size_t size;
    ot_dtype core;
} st_dtypes[] = {
    [OT_ST_BOOL] = {"BOOL", 1, OT_PRED},
    [OT_ST_U8] = {"U8", 1, OT_U8},
    [OT_ST_I8] = {"I8", 1, OT_S8},
    [OT_ST_F8_E5M2] = {"F8_E5M2", 1, OT_DTYPE_INVALID},
    [OT_ST_F8_E4M3] = {"F8_E4M3", 1, OT_DTYPE_INVALID},
    [OT_ST_I16] = {"I16", 2, OT_S16},
    [OT_ST_U16] = {"U16", 2, OT_U16},
    [OT_ST_F16] = {"F16", 2, OT_F16},
    [OT_ST_BF16] = {"BF16", 2, OT_BF16},
    [OT_ST_I32] = {"I32", 4, OT_S32},
    [OT_ST_U32] = {"U32", 4, OT_U32},
    [OT_ST_F32] = {"F32", 4, OT_F32},
    [OT_ST_F64] = {"F64", 8, OT_F64},
    [OT_ST_I64] = {"I64", 8, OT_S64},
    [OT_ST_U64] = {"U64", 8, OT_U64},
};
_Static_assert(sizeof st_dtypes / sizeof st_dtypes[0] == OT_ST_DTYPE_COUNT, "dtype table");

const char *ot_st_dtype_name(ot_st_dtype t) {
    return (t >= 0 && t < OT_ST_DTYPE_COUNT) ? st_dtypes[t].name : "?";
}

size_t ot_st_dtype_size(ot_st_dtype t) {
    return (t >= 0 && t < OT_ST_DTYPE_COUNT) ? st_dtypes[t].size : 0;
}

ot_st_dtype ot_st_dtype_from_name(const char *name) {
    for (int i = 0; i < OT_ST_DTYPE_COUNT; i++)
        if (!strcmp(name, st_dtypes[i].name)) return (ot_st_dtype)i;
    return OT_ST_DTYPE_INVALID;
}

ot_st_dtype ot_st_dtype_from_core(ot_dtype t) {
    for (int i = 0; i < OT_ST_DTYPE_COUNT; i++)
        if (st_dtypes[i].core == t && t != OT_DTYPE_INVALID) return (ot_st_dtype)i;
    return OT_ST_DTYPE_INVALID;
}

ot_dtype ot_st_dtype_to_core(ot_st_dtype t) {
    return (t >= 0 && t < OT_ST_DTYPE_COUNT) ? st_dtypes[t].core : OT_DTYPE_INVALID;
}

/* ---------------------------------------------------------------------------------------------
 * Reader
 * ------------------------------------------------------------------------------------------- */

struct ot_safetensors {
    const uint8_t *buf;
    size_t len;
    void *map; /* non-NULL when opened from a file */
    size_t map_len;
    uint64_t header_len;
    ot_arena *arena;
    ot_st_info *infos; /* offset order */
    size_t count;
    size_t *by_name; /* indices sorted by name */
    ot_st_kv *meta;
    size_t nmeta;
};

/* Strict UTF-8 (as Rust's str::from_utf8): no overlongs, no surrogates, <= U+10FFFF. */
static bool utf8_valid(const uint8_t *s, size_t n, size_t *bad) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint32_t cp, min;
        if (c >= 0xc2 && c <= 0xdf)
            need = 1, cp = c & 0x1f, min = 0x80;
        else if (c >= 0xe0 && c <= 0xef)
            need = 2, cp = c & 0x0f, min = 0x800;
        else if (c >= 0xf0 && c <= 0xf4)
            need = 3, cp = c & 0x07, min = 0x10000;
        else
            goto fail;
        if (n - i - 1 < need) goto fail;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xc0) != 0x80) goto fail;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) goto fail;
        i += need + 1;
    }
    return true;
fail:
    *bad = i;
    return false;
}

/* A JSON integer in 0..INT64_MAX. */
static bool json_u64(json_t *v, uint64_t *out) {
    if (!json_is_integer(v)) return false;
    json_int_t x = json_integer_value(v);
    if (x < 0) return false;
    *out = (uint64_t)x;
    return true;
}

static int cmp_offsets(const void *a, const void *b) {
    const ot_st_info *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name); /* deterministic order for equal offsets */
}

static int cmp_names_r(const void *a, const void *b, void *ctx) {
    const ot_safetensors *st = ctx;
    return strcmp(st->infos[*(const size_t *)a].name, st->infos[*(const size_t *)b].name);
}

static ot_status parse_entry(ot_safetensors *st, const char *name, json_t *v, ot_st_info *info) {
    if (!json_is_object(v))
        return ot_error(OT_ERR_CORRUPT_DATA, "safetensors: tensor '%s': entry is not an object",
                        name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!jd || !js || !jo)
        return ot_error(OT_ERR_CORRUPT_DATA, "safetensors: tensor '%s': missing field '%s'", name,
                        !jd   ? "dtype"
                        : !js ? "shape"
                              : "data_offsets");
    if (!json_is_string(jd))
        return ot_error(OT_ERR_CORRUPT_DATA, "safetensors: tensor '%s': dtype is not a string",
                        name);
    ot_st_dtype dt = ot_st_dtype_from_name(json_string_value(jd));
    if (dt == OT_ST_DTYPE_INVALID)
        return ot_error(OT_ERR_CORRUPT_DATA, "safetensors: tensor '%s': unknown dtype '%s'", name,
                        json_string_value(jd));
    if (!json_is_array(js))
        return ot_error(OT_ERR_CORRUPT_DATA, "safetensors: tensor '%s': shape is not an array",
                        name);
    size_t rank = json_array_size(js);
    int64_t *dims = ot_arena_alloc(st->arena, (rank ? rank : 1) * sizeof(int64_t), 8);
    char *nm = ot_arena_strndup(st->arena, name, strlen(name));
    if (!dims || !nm) return ot_error(OT_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
    for (size_t i = 0; i < rank; i++) {
        uint64_t d;
        if (!json_u64(json_array_get(js, i), &d))
            return ot_error(OT_ERR_CORRUPT_DATA,
                            "safetensors: tensor '%s': shape[%zu] is not a non-negative integer",
                            name, i);
        dims[i] = (int64_t)d;
    }
    uint64_t b, e;
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_u64(json_array_get(jo, 0), &b) ||
        !json_u64(json_array_get(jo, 1), &e))
        return ot_error(OT_ERR_CORRUPT_DATA,
                        "safetensors: tensor '%s': data_offsets is not two non-negative integers",
                        name);
    info->name = nm;
    info->dtype = dt;
    info->rank = (int)rank;
    info->dims = dims;
    info->begin = b;
    info->end = e;
    return OT_OK;
}

static ot_status parse_metadata(ot_safetensors *st, json_t *v) {
    if (json_is_null(v)) return OT_OK; /* the reference reads null as "no metadata" */
    if (!json_is_object(v))
        return ot_error(OT_ERR_CORRUPT_DATA, "safetensors: __metadata__ is not an object");
    size_t n = json_object_size(v);
    st->meta = ot_arena_alloc(st->arena, (n ? n : 1) * sizeof(ot_st_kv), 8);
    if (!st->meta) return ot_error(OT_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (!json_is_string(x))
            return ot_error(OT_ERR_CORRUPT_DATA, "safetensors: __metadata__['%s'] is not a string",
                            k);
        const char *s = json_string_value(x);
        char *kk = ot_arena_strndup(st->arena, k, strlen(k));
        char *vv = ot_arena_strndup(st->arena, s, json_string_length(x));
        if (!kk || !vv) return ot_error(OT_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
        st->meta[st->nmeta++] = (ot_st_kv){kk, vv};
    }
    return OT_OK;
}

static ot_status parse_into(ot_safetensors *st) {
    const uint8_t *buf = st->buf;
    size_t len = st->len;
    if (len < 8)
        return ot_error(OT_ERR_CORRUPT_DATA,
                        "safetensors: %zu bytes, too small for the 8-byte header length", len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | buf[i];
    if (n > OT_ST_MAX_HEADER)
        return ot_error(OT_ERR_CORRUPT_DATA,
                        "safetensors: header length %llu exceeds the 100,000,000-byte limit",
                        (unsigned long long)n);
    if (n > len - 8)
        return ot_error(OT_ERR_CORRUPT_DATA,
                        "safetensors: header length %llu runs past the end of the %zu-byte file",
                        (unsigned long long)n, len);
    st->header_len = n;
    size_t bad = 0;
    if (!utf8_valid(buf + 8, (size_t)n, &bad))
        return ot_error(OT_ERR_CORRUPT_DATA, "safetensors: header is not UTF-8 (byte %zu)",
                        bad + 8);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return ot_error(OT_ERR_CORRUPT_DATA, "safetensors: header JSON: %s (at byte %d)", jerr.text,
                        jerr.position + 8);
    ot_status rc = OT_OK;
    if (!json_is_object(root)) {
        rc = ot_error(OT_ERR_CORRUPT_DATA, "safetensors: header is not a JSON object");
        goto out;
    }
    size_t total = json_object_size(root);
    st->infos = ot_arena_alloc(st->arena, (total ? total : 1) * sizeof(ot_st_info), 8);
    st->by_name = ot_arena_alloc(st->arena, (total ? total : 1) * sizeof(size_t), 8);
    if (!st->infos || !st->by_name) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            OT_CHECK_GOTO(parse_metadata(st, val), rc, out);
            continue;
        }
        OT_CHECK_GOTO(parse_entry(st, key, val, &st->infos[st->count]), rc, out);
        st->count++;
    }
    qsort(st->infos, st->count, sizeof(ot_st_info), cmp_offsets);
    uint64_t start = 0;
    for (size_t i = 0; i < st->count; i++) {
        ot_st_info *t = &st->infos[i];
        if (t->begin != start || t->end < t->begin) {
            rc = ot_error(OT_ERR_CORRUPT_DATA,
                          "safetensors: tensor '%s': data_offsets [%llu, %llu] leave a hole or "
                          "overlap (expected to begin at %llu)",
                          t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                          (unsigned long long)start);
            goto out;
        }
        start = t->end;
        uint64_t ne = 1;
        for (int d = 0; d < t->rank; d++) {
            if (__builtin_mul_overflow(ne, (uint64_t)t->dims[d], &ne)) {
                rc = ot_error(OT_ERR_CORRUPT_DATA,
                              "safetensors: tensor '%s': shape overflows the element count",
                              t->name);
                goto out;
            }
        }
        uint64_t nb;
        if (__builtin_mul_overflow(ne, (uint64_t)ot_st_dtype_size(t->dtype), &nb)) {
            rc = ot_error(OT_ERR_CORRUPT_DATA,
                          "safetensors: tensor '%s': shape overflows the byte count", t->name);
            goto out;
        }
        if (t->end - t->begin != nb) {
            rc = ot_error(OT_ERR_CORRUPT_DATA,
                          "safetensors: tensor '%s': %llu bytes in data_offsets, shape and dtype "
                          "need %llu",
                          t->name, (unsigned long long)(t->end - t->begin), (unsigned long long)nb);
            goto out;
        }
    }
    uint64_t have = (uint64_t)len - 8 - n;
    if (start != have) {
        rc = ot_error(OT_ERR_CORRUPT_DATA,
                      "safetensors: data section is %llu bytes but the header describes %llu (%s)",
                      (unsigned long long)have, (unsigned long long)start,
                      have < start ? "truncated" : "trailing bytes");
        goto out;
    }
    const uint8_t *data = buf + 8 + n;
    for (size_t i = 0; i < st->count; i++) {
        st->infos[i].data = data + st->infos[i].begin;
        st->by_name[i] = i;
    }
    qsort_r(st->by_name, st->count, sizeof(size_t), cmp_names_r, st);
out:
    json_decref(root);
    return rc;
}

ot_status ot_safetensors_parse(const void *buf, size_t len, ot_safetensors **out) {
    *out = NULL;
    if (!buf && len) return ot_error(OT_ERR_INVALID_ARGUMENT, "safetensors: NULL buffer");
    ot_safetensors *st = ot_calloc(1, sizeof *st);
    if (!st) return ot_error(OT_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
    st->arena = ot_arena_new(4096);
    if (!st->arena) {
        ot_free(st);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
    }
    st->buf = buf;
    st->len = len;
    ot_status rc = parse_into(st);
    if (rc != OT_OK) {
        ot_safetensors_free(st);
        return rc;
    }
    *out = st;
    return OT_OK;
}

ot_status ot_safetensors_open(const char *path, ot_safetensors **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return ot_error(OT_ERR_NOT_FOUND, "%s: no such file", path);
        return ot_error(OT_ERR_IO, "open %s: %s", path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return ot_error(OT_ERR_IO, "%s: not a regular file", path);
    }
    size_t n = (size_t)sb.st_size;
    void *map = NULL;
    if (n > 0) {
        map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return ot_error(OT_ERR_IO, "mmap %s: %s", path, strerror(e));
        }
    }
    close(fd);
    ot_safetensors *st;
    ot_status rc = ot_safetensors_parse(map ? map : "", n, &st);
    if (rc != OT_OK) {
        if (map) munmap(map, n);
        return ot_error_wrap(rc, "%s", path);
    }
    st->map = map;
    st->map_len = n;
    *out = st;
    return OT_OK;
}

void ot_safetensors_free(ot_safetensors *st) {
    if (!st) return;
    if (st->map) munmap(st->map, st->map_len);
    ot_arena_free(st->arena);
    ot_free(st);
}

size_t ot_safetensors_count(const ot_safetensors *st) {
    return st->count;
}

const ot_st_info *ot_safetensors_at(const ot_safetensors *st, size_t i) {
    return i < st->count ? &st->infos[i] : NULL;
}

const ot_st_info *ot_safetensors_find(const ot_safetensors *st, const char *name) {
    size_t lo = 0, hi = st->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ot_st_info *t = &st->infos[st->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

size_t ot_safetensors_metadata_count(const ot_safetensors *st) {
    return st->nmeta;
}

ot_st_kv ot_safetensors_metadata_at(const ot_safetensors *st, size_t i) {
    return i < st->nmeta ? st->meta[i] : (ot_st_kv){NULL, NULL};
}

const char *ot_safetensors_metadata_get(const ot_safetensors *st, const char *key) {
    for (size_t i = 0; i < st->nmeta; i++)
        if (!strcmp(st->meta[i].key, key)) return st->meta[i].value;
    return NULL;
}

uint64_t ot_safetensors_header_len(const ot_safetensors *st) {
    return st->header_len;
}

uint64_t ot_safetensors_data_len(const ot_safetensors *st) {
    return (uint64_t)st->len - 8 - st->header_len;
}

ot_status ot_safetensors_tensor(const ot_safetensors *st, const char *name, ot_tensor *view) {
    const ot_st_info *t = ot_safetensors_find(st, name);
    if (!t) return ot_error(OT_ERR_NOT_FOUND, "safetensors: no tensor named '%s'", name);
    ot_dtype dt = ot_st_dtype_to_core(t->dtype);
    if (dt == OT_DTYPE_INVALID)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "safetensors: tensor '%s': dtype %s has no core dtype", name,
                        ot_st_dtype_name(t->dtype));
    if (t->rank > OT_MAX_RANK)
        return ot_error(OT_ERR_OUT_OF_RANGE, "safetensors: tensor '%s': rank %d exceeds %d", name,
                        t->rank, OT_MAX_RANK);
    ot_shape s;
    OT_CHECK(ot_shape_make(&s, dt, t->rank, t->dims));
    return ot_tensor_borrow(view, &s, (void *)t->data);
}

/* ---------------------------------------------------------------------------------------------
 * Writer
 * ------------------------------------------------------------------------------------------- */

ot_st_write_options ot_st_write_options_default(void) {
    return (ot_st_write_options){.fsync = true, .atomic = true};
}

static int cmp_entries_r(const void *a, const void *b, void *ctx) {
    const ot_st_entry *e = ctx;
    const ot_st_entry *x = &e[*(const size_t *)a], *y = &e[*(const size_t *)b];
    if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1; /* descending alignment */
    return strcmp(x->name, y->name);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static ot_status entry_nbytes(const ot_st_entry *e, uint64_t *out) {
    if (!e->name) return ot_error(OT_ERR_INVALID_ARGUMENT, "safetensors: tensor without a name");
    if (!strcmp(e->name, "__metadata__"))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "safetensors: '__metadata__' is reserved");
    if (ot_st_dtype_size(e->dtype) == 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "safetensors: tensor '%s': invalid dtype %d",
                        e->name, (int)e->dtype);
    if (e->rank < 0 || (e->rank > 0 && !e->dims))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "safetensors: tensor '%s': bad rank %d", e->name,
                        e->rank);
    uint64_t ne = 1;
    for (int d = 0; d < e->rank; d++) {
        if (e->dims[d] < 0 || __builtin_mul_overflow(ne, (uint64_t)e->dims[d], &ne))
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "safetensors: tensor '%s': dimension %d invalid or overflowing",
                            e->name, d);
    }
    if (__builtin_mul_overflow(ne, (uint64_t)ot_st_dtype_size(e->dtype), out) ||
        *out > (uint64_t)INT64_MAX)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "safetensors: tensor '%s': too large", e->name);
    if (*out && !e->data)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "safetensors: tensor '%s': NULL data", e->name);
    return OT_OK;
}

ot_status ot_safetensors_build_header(const ot_st_entry *entries, size_t n, const ot_st_kv *meta,
                                      size_t nmeta, void **header, size_t *header_len,
                                      size_t **order_out, uint64_t *data_len) {
    *header = NULL;
    *order_out = NULL;
    ot_status rc = OT_OK;
    json_t *root = NULL;
    char *js = NULL;
    const char **names = NULL;
    size_t *order = ot_malloc((n ? n : 1) * sizeof(size_t));
    names = ot_malloc((n ? n : 1) * sizeof(char *));
    if (!order || !names) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t nb;
        OT_CHECK_GOTO(entry_nbytes(&entries[i], &nb), rc, fail);
        order[i] = i;
        names[i] = entries[i].name;
    }
    qsort(names, n, sizeof(char *), cmp_str_ptr);
    for (size_t i = 1; i < n; i++) {
        if (!strcmp(names[i - 1], names[i])) {
            rc = ot_error(OT_ERR_INVALID_ARGUMENT, "safetensors: duplicate tensor name '%s'",
                          names[i]);
            goto fail;
        }
    }
    qsort_r(order, n, sizeof(size_t), cmp_entries_r, (void *)entries);
    root = json_object();
    if (!root) goto oom;
    if (nmeta > 0) {
        json_t *m = json_object();
        if (!m || json_object_set_new(root, "__metadata__", m) != 0) goto oom;
        for (size_t i = 0; i < nmeta; i++) {
            if (!meta[i].key || !meta[i].value) {
                rc =
                    ot_error(OT_ERR_INVALID_ARGUMENT, "safetensors: metadata entry %zu is NULL", i);
                goto fail;
            }
            if (json_object_get(m, meta[i].key)) {
                rc = ot_error(OT_ERR_INVALID_ARGUMENT, "safetensors: duplicate metadata key '%s'",
                              meta[i].key);
                goto fail;
            }
            json_t *s = json_string(meta[i].value);
            if (!s) {
                rc = ot_error(OT_ERR_INVALID_ARGUMENT,
                              "safetensors: metadata '%s' is not valid UTF-8", meta[i].key);
                goto fail;
            }
            if (json_object_set_new(m, meta[i].key, s) != 0) {
                rc = ot_error(OT_ERR_INVALID_ARGUMENT,
                              "safetensors: metadata key '%s' is not valid UTF-8", meta[i].key);
                goto fail;
            }
        }
    }
    uint64_t off = 0;
    for (size_t k = 0; k < n; k++) {
        const ot_st_entry *e = &entries[order[k]];
        uint64_t nb;
        OT_CHECK_GOTO(entry_nbytes(e, &nb), rc, fail);
        json_t *t = json_object(), *shape = json_array(), *offs = json_array();
        if (!t || !shape || !offs) {
            json_decref(t), json_decref(shape), json_decref(offs);
            goto oom;
        }
        json_object_set_new(t, "dtype", json_string(ot_st_dtype_name(e->dtype)));
        for (int d = 0; d < e->rank; d++) json_array_append_new(shape, json_integer(e->dims[d]));
        json_object_set_new(t, "shape", shape);
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + nb)));
        json_object_set_new(t, "data_offsets", offs);
        if (json_object_set_new(root, e->name, t) != 0) {
            rc = ot_error(OT_ERR_INVALID_ARGUMENT, "safetensors: tensor name is not valid UTF-8");
            goto fail;
        }
        off += nb;
    }
    js = json_dumps(root, JSON_COMPACT);
    if (!js) goto oom;
    size_t jl = strlen(js);
    size_t pad = (8 - jl % 8) % 8;
    size_t hl = 8 + jl + pad;
    uint8_t *h = ot_malloc(hl);
    if (!h) goto oom;
    uint64_t N = jl + pad;
    for (int i = 0; i < 8; i++) h[i] = (uint8_t)(N >> (8 * i));
    memcpy(h + 8, js, jl);
    memset(h + 8 + jl, ' ', pad);
    free(js);
    json_decref(root);
    ot_free(names);
    *header = h;
    *header_len = hl;
    *order_out = order;
    *data_len = off;
    return OT_OK;
oom:
    rc = ot_error(OT_ERR_OUT_OF_MEMORY, "safetensors: out of memory building the header");
fail:
    free(js);
    json_decref(root);
    ot_free(names);
    ot_free(order);
    return rc;
}

ot_status ot_safetensors_serialize(const ot_st_entry *entries, size_t n, const ot_st_kv *meta,
                                   size_t nmeta, void **out, size_t *out_len) {
    *out = NULL;
    void *h;
    size_t hl, *order;
    uint64_t dl;
    OT_CHECK(ot_safetensors_build_header(entries, n, meta, nmeta, &h, &hl, &order, &dl));
    uint8_t *buf = NULL;
    if (dl > SIZE_MAX - hl || !(buf = ot_malloc(hl + (size_t)dl))) {
        ot_free(h);
        ot_free(order);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "safetensors: out of memory serializing");
    }
    memcpy(buf, h, hl);
    size_t off = hl;
    for (size_t k = 0; k < n; k++) {
        uint64_t nb;
        entry_nbytes(&entries[order[k]], &nb);
        if (nb) memcpy(buf + off, entries[order[k]].data, (size_t)nb);
        off += (size_t)nb;
    }
    ot_free(h);
    ot_free(order);
    *out = buf;
    *out_len = off;
    return OT_OK;
}

ot_status ot_safetensors_write_file(const char *path, const ot_st_entry *entries, size_t n,
                                    const ot_st_kv *meta, size_t nmeta,
                                    const ot_st_write_options *o, uint8_t sha256[32]) {
    ot_st_write_options def = ot_st_write_options_default();
    if (!o) o = &def;
    void *h;
    size_t hl, *order;
    uint64_t dl;
    OT_CHECK(ot_safetensors_build_header(entries, n, meta, nmeta, &h, &hl, &order, &dl));
    ot_status rc = OT_OK;
    char *tmp = NULL;
    ot_ft_seg *segs = ot_malloc((n + 1) * sizeof *segs);
    if (!segs) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
        goto out;
    }
    size_t ns = 0;
    segs[ns++] = (ot_ft_seg){h, hl};
    for (size_t k = 0; k < n; k++) {
        uint64_t nb;
        entry_nbytes(&entries[order[k]], &nb);
        if (nb) segs[ns++] = (ot_ft_seg){entries[order[k]].data, (size_t)nb};
    }
    if (o->atomic) {
        size_t pl = strlen(path);
        tmp = ot_malloc(pl + 5);
        if (!tmp) {
            rc = ot_error(OT_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
            goto out;
        }
        memcpy(tmp, path, pl);
        memcpy(tmp + pl, ".tmp", 5);
        unlink(tmp); /* a stale temporary from an interrupted write */
        OT_CHECK_GOTO(ot_ft_write_file(tmp, segs, ns, o->fsync, sha256, NULL), rc, out);
        rc = ot_ft_rename(tmp, path);
        if (rc != OT_OK) {
            unlink(tmp);
            goto out;
        }
        if (o->fsync) {
            char *dir = ot_strdup(path);
            if (!dir) {
                rc = ot_error(OT_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
                goto out;
            }
            char *slash = strrchr(dir, '/');
            if (slash == dir)
                slash[1] = '\0';
            else if (slash)
                *slash = '\0';
            rc = ot_ft_fsync_path(slash ? dir : ".");
            ot_free(dir);
        }
    } else {
        unlink(path);
        rc = ot_ft_write_file(path, segs, ns, o->fsync, sha256, NULL);
    }
out:
    ot_free(tmp);
    ot_free(segs);
    ot_free(h);
    ot_free(order);
    return rc;
}
