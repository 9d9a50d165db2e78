/* NumPy .npy read/write (format 1.0, 2.0, 3.0; C order).
 *
 * Layout: "\x93NUMPY", major, minor, header length (u16 LE for 1.0, u32 LE for 2.0/3.0), then the
 * header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and ended by '\n', then the raw data. Every size, count and byte of the
 * header is validated before any is trusted; the data must be exactly as long as the shape says.
 *
 * Decisions:
 *   - Exactly the keys descr, fortran_order, shape (as NumPy itself requires), each once.
 *   - descr: '|b1' pred, '|i1' '|u1' (also '<' / '>' for one-byte types), '<i2' '<i4' '<i8'
 *     '<u2' '<u4' '<u8' '<f2' '<f4' '<f8', '<c8' (c64) '<c16' (c128). Big-endian ('>') files are
 * read and byte-swapped (a complex element per component); writing is always little-endian.
 *     Datetime, object, string, structured and void types are refused with OT_ERR_UNIMPLEMENTED
 * naming the type.
 *   - bfloat16: NumPy has no bfloat16. ml_dtypes saves one as the raw void type '<V2', which
 *     carries no element type, so reading '|V2' is refused rather than guessed, and writing a
 *     bf16 tensor is refused; convert to f32 (ot_bf16_to_f32) or store the bits as u16.
 *   - fortran_order True is refused (OT_ERR_UNIMPLEMENTED: C order only).
 *   - Rank above OT_MAX_RANK (8) is OT_ERR_OUT_OF_RANGE; so is a shape whose byte count
 *     overflows int64.
 *   - The header may be at most 1 MiB (NumPy writes < 200 bytes for rank 8); reading accepts any
 *     header alignment, writing pads the prefix + header to a multiple of 64 bytes, as NumPy does.
 */
#include "optitpu/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core_util.h"

#define NPY_MAGIC      "\x93NUMPY"
#define NPY_MAGIC_LEN  6
#define NPY_MAX_HEADER (1u << 20)
#define NPY_ALIGN      64

/* ---- header parsing ------------------------------------------------------------------------ */

typedef struct npy_header {
    ot_shape shape;
    bool swap; /* big-endian data: byte-swap after reading */
} npy_header;

typedef struct cursor {
    const char *p, *end;
    const char *start;
} cursor;

static ot_status bad(const cursor *c, const char *what) {
    return ot_error(OT_ERR_CORRUPT_DATA, "npy: header: %s at offset %td", what, c->p - c->start);
}

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool eat(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted string literal without escapes: sets [*s, *s + *n). */
static ot_status parse_str(cursor *c, const char **s, size_t *n) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return bad(c, "expected a quoted string");
    char q = *c->p++;
    const char *b = c->p;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\') return bad(c, "escape sequences in strings are not supported");
        if (*c->p == '\n') return bad(c, "unterminated string");
        c->p++;
    }
    if (c->p >= c->end) return bad(c, "unterminated string");
    *s = b;
    *n = (size_t)(c->p - b);
    c->p++;
    return OT_OK;
}

static bool word_is(const cursor *c, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return false;
    /* the word must end there: "Trueish" is not True */
    const char *after = c->p + n;
    return after == c->end ||
           !((*after >= 'a' && *after <= 'z') || (*after >= 'A' && *after <= 'Z') ||
             (*after >= '0' && *after <= '9') || *after == '_');
}

static ot_status parse_bool(cursor *c, bool *out) {
    skip_ws(c);
    if (word_is(c, "True")) {
        c->p += 4;
        *out = true;
    } else if (word_is(c, "False")) {
        c->p += 5;
        *out = false;
    } else {
        return bad(c, "fortran_order must be True or False");
    }
    return OT_OK;
}

static ot_status parse_shape(cursor *c, int *rank, int64_t dims[OT_MAX_RANK]) {
    if (!eat(c, '(')) return bad(c, "shape must be a tuple such as (2, 3), (3,) or ()");
    int r = 0;
    skip_ws(c);
    if (eat(c, ')')) {
        *rank = 0;
        return OT_OK;
    }
    for (;;) {
        skip_ws(c);
        if (c->p < c->end && *c->p == '-') return bad(c, "negative dimension in shape");
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return bad(c, "shape entries must be non-negative integers");
        if (*c->p == '0' && c->p + 1 < c->end && c->p[1] >= '0' && c->p[1] <= '9')
            return bad(c, "leading zero in a shape dimension");
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            int d = *c->p - '0';
            if (v > (INT64_MAX - d) / 10)
                return ot_error(OT_ERR_OUT_OF_RANGE,
                                "npy: header: shape dimension %d overflows int64", r);
            v = v * 10 + d;
            c->p++;
        }
        if (r == OT_MAX_RANK)
            return ot_error(OT_ERR_OUT_OF_RANGE, "npy: header: rank above optitpu's maximum of %d",
                            OT_MAX_RANK);
        dims[r++] = v;
        bool comma = eat(c, ',');
        if (eat(c, ')')) {
            /* Python: (3) is the integer 3, not a tuple; a 1-tuple needs the comma */
            if (r == 1 && !comma) return bad(c, "a one-element shape needs a comma: (n,)");
            break;
        }
        if (!comma) return bad(c, "expected ',' or ')' in shape");
    }
    *rank = r;
    return OT_OK;
}

/* Maps a descr string to a dtype. */
static ot_status parse_descr(const char *s, size_t n, ot_dtype *dt, bool *swap) {
    if (n < 2 || n > 16)
        return ot_error(OT_ERR_CORRUPT_DATA, "npy: descr '%.*s' is not a NumPy type string",
                        (int)(n > 32 ? 32 : n), s);
    char order = s[0];
    if (order != '<' && order != '>' && order != '|' && order != '=')
        return ot_error(OT_ERR_CORRUPT_DATA,
                        "npy: descr '%.*s' must start with a byte order ('<', '>', '|')", (int)n,
                        s);
    char kind = s[1];
    if (kind && strchr("mMOSUa", kind))
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "npy: descr '%.*s' (datetime, object or string) has no optitpu "
                        "dtype",
                        (int)n, s);
    const char *num = s + 2;
    size_t nlen = n - 2;
    unsigned size = 0;
    for (size_t i = 0; i < nlen; i++) {
        if (num[i] < '0' || num[i] > '9' || i > 3)
            return ot_error(OT_ERR_UNIMPLEMENTED, "npy: descr '%.*s' is not a supported dtype",
                            (int)n, s);
        size = size * 10 + (unsigned)(num[i] - '0');
    }
    ot_dtype t = OT_DTYPE_INVALID;
    switch (kind) {
    case 'b': t = size == 1 ? OT_PRED : OT_DTYPE_INVALID; break;
    case 'i':
        t = size == 1   ? OT_S8
            : size == 2 ? OT_S16
            : size == 4 ? OT_S32
            : size == 8 ? OT_S64
                        : OT_DTYPE_INVALID;
        break;
    case 'u':
        t = size == 1   ? OT_U8
            : size == 2 ? OT_U16
            : size == 4 ? OT_U32
            : size == 8 ? OT_U64
                        : OT_DTYPE_INVALID;
        break;
    case 'f':
        t = size == 2 ? OT_F16 : size == 4 ? OT_F32 : size == 8 ? OT_F64 : OT_DTYPE_INVALID;
        break;
    case 'c': t = size == 8 ? OT_C64 : size == 16 ? OT_C128 : OT_DTYPE_INVALID; break;
    case 'V':
        if (size == 2)
            return ot_error(OT_ERR_UNIMPLEMENTED,
                            "npy: descr '%.*s' is a raw 2-byte void type (how ml_dtypes saves "
                            "bfloat16); it names no element type, so it is not read as bf16: save "
                            "float32, or the bits as uint16",
                            (int)n, s);
        return ot_error(OT_ERR_UNIMPLEMENTED, "npy: void/structured descr '%.*s' is not supported",
                        (int)n, s);
    default:
        return ot_error(OT_ERR_CORRUPT_DATA, "npy: descr '%.*s' has unknown type kind '%c'", (int)n,
                        s, kind);
    }
    if (t == OT_DTYPE_INVALID)
        return ot_error(OT_ERR_UNIMPLEMENTED, "npy: descr '%.*s' is not a supported dtype", (int)n,
                        s);
    if (size > 1 && order == '|')
        return ot_error(OT_ERR_CORRUPT_DATA,
                        "npy: descr '%.*s': a multi-byte type needs a byte order ('<' or '>')",
                        (int)n, s);
    *dt = t;
    /* '=' is native order, and every platform optitpu builds for is little-endian */
    *swap = size > 1 && order == '>';
    return OT_OK;
}

/* Parses the dict literal in [h, h + n). */
static ot_status parse_dict(const char *h, size_t n, npy_header *out) {
    cursor c = {h, h + n, h};
    bool have_descr = false, have_fo = false, have_shape = false;
    ot_dtype dt = OT_DTYPE_INVALID;
    bool swap = false, fortran = false;
    int rank = 0;
    int64_t dims[OT_MAX_RANK] = {0};
    if (!eat(&c, '{')) return bad(&c, "expected '{' (the header is a Python dict literal)");
    for (;;) {
        if (eat(&c, '}')) break;
        const char *k;
        size_t kn;
        OT_CHECK(parse_str(&c, &k, &kn));
        if (!eat(&c, ':')) return bad(&c, "expected ':' after a key");
        if (kn == 5 && !memcmp(k, "descr", 5)) {
            if (have_descr) return bad(&c, "duplicate key 'descr'");
            have_descr = true;
            skip_ws(&c);
            if (c.p < c.end && *c.p == '[')
                return ot_error(OT_ERR_UNIMPLEMENTED,
                                "npy: structured dtypes (a list descr) are not supported");
            const char *d;
            size_t dn;
            OT_CHECK(parse_str(&c, &d, &dn));
            OT_CHECK(parse_descr(d, dn, &dt, &swap));
        } else if (kn == 13 && !memcmp(k, "fortran_order", 13)) {
            if (have_fo) return bad(&c, "duplicate key 'fortran_order'");
            have_fo = true;
            OT_CHECK(parse_bool(&c, &fortran));
        } else if (kn == 5 && !memcmp(k, "shape", 5)) {
            if (have_shape) return bad(&c, "duplicate key 'shape'");
            have_shape = true;
            OT_CHECK(parse_shape(&c, &rank, dims));
        } else {
            return ot_error(OT_ERR_CORRUPT_DATA,
                            "npy: header: unknown key '%.*s' (only descr, fortran_order, shape)",
                            (int)(kn > 64 ? 64 : kn), k);
        }
        if (eat(&c, ',')) continue;
        if (eat(&c, '}')) break;
        return bad(&c, "expected ',' or '}' after a value");
    }
    skip_ws(&c);
    if (c.p != c.end) return bad(&c, "unexpected bytes after the dict");
    if (!have_descr || !have_fo || !have_shape)
        return ot_error(OT_ERR_CORRUPT_DATA, "npy: header: missing key '%s'",
                        !have_descr ? "descr"
                        : !have_fo  ? "fortran_order"
                                    : "shape");
    if (fortran)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "npy: fortran_order True is not supported (C order only); save with "
                        "np.ascontiguousarray");
    ot_status rc = ot_shape_make(&out->shape, dt, rank, dims);
    if (rc != OT_OK) return ot_error_wrap(rc, "npy: shape");
    out->swap = swap;
    return OT_OK;
}

/* Reads the fixed prefix in buf[0, avail) (at least 8 bytes) and returns the prefix length (10 or
 * 12) and the header length. */
static ot_status parse_prefix(const uint8_t *buf, size_t avail, size_t *prefix, size_t *hlen) {
    if (avail < NPY_MAGIC_LEN + 2 || memcmp(buf, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return ot_error(OT_ERR_CORRUPT_DATA, "npy: not a .npy file (bad magic)");
    unsigned major = buf[6], minor = buf[7];
    if (minor != 0 || major < 1 || major > 3)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "npy: format version %u.%u (supported: 1.0, 2.0, 3.0)", major, minor);
    size_t pl = major == 1 ? 10 : 12;
    if (avail < pl) return ot_error(OT_ERR_CORRUPT_DATA, "npy: truncated before the header length");
    size_t hl = major == 1 ? (size_t)buf[8] | (size_t)buf[9] << 8
                           : (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
                                 (size_t)buf[11] << 24;
    if (hl > NPY_MAX_HEADER)
        return ot_error(OT_ERR_CORRUPT_DATA, "npy: header length %zu exceeds the 1 MiB limit", hl);
    *prefix = pl;
    *hlen = hl;
    return OT_OK;
}

/* Swaps each es-byte unit; a complex element is two units (its components). */
static void byteswap(void *data, size_t nbytes, ot_dtype dt) {
    size_t es = ot_dtype_size(dt) / (ot_dtype_is_complex(dt) ? 2 : 1);
    uint8_t *p = data;
    for (size_t i = 0; i + es <= nbytes; i += es)
        for (size_t a = 0, b = es - 1; a < b; a++, b--) {
            uint8_t t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
}

static ot_status check_data_len(const npy_header *h, uint64_t have) {
    int64_t nb = ot_shape_nbytes_unchecked(&h->shape);
    if (have != (uint64_t)nb) {
        char sb[160];
        ot_shape_format(&h->shape, sb, sizeof sb);
        return ot_error(OT_ERR_CORRUPT_DATA,
                        "npy: data is %llu bytes but shape %s needs %lld (truncated or trailing "
                        "bytes)",
                        (unsigned long long)have, sb, (long long)nb);
    }
    return OT_OK;
}

ot_status ot_npy_parse(const void *buf, size_t len, ot_tensor *out) {
    memset(out, 0, sizeof *out);
    if (!buf && len) return ot_error(OT_ERR_INVALID_ARGUMENT, "npy: NULL buffer");
    const uint8_t *b = buf;
    size_t pl = 0, hl = 0;
    OT_CHECK(parse_prefix(b, len, &pl, &hl));
    if (hl > len - pl)
        return ot_error(OT_ERR_CORRUPT_DATA, "npy: header length %zu runs past the end (%zu bytes)",
                        hl, len);
    npy_header h;
    OT_CHECK(parse_dict((const char *)b + pl, hl, &h));
    OT_CHECK(check_data_len(&h, len - pl - hl));
    ot_tensor t;
    OT_CHECK(ot_tensor_alloc(&t, &h.shape));
    if (t.nbytes) memcpy(t.data, b + pl + hl, t.nbytes);
    if (h.swap) byteswap(t.data, t.nbytes, h.shape.dtype);
    *out = t;
    return OT_OK;
}

static ot_status read_exact(int fd, void *dst, size_t n, const char *path) {
    int e = ot_read_full(fd, dst, n, NULL);
    if (e > 0) return ot_error(OT_ERR_IO, "npy: read %s: %s", path, strerror(e));
    if (e < 0) return ot_error(OT_ERR_CORRUPT_DATA, "npy: %s ended early", path);
    return OT_OK;
}

ot_status ot_npy_read_file(const char *path, ot_tensor *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ot_error(errno == ENOENT ? OT_ERR_NOT_FOUND : OT_ERR_IO, "npy: open %s: %s", path,
                        strerror(errno));
    ot_status rc = OT_OK;
    char *hdr = NULL;
    ot_tensor t = {0};
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = ot_error(OT_ERR_IO, "npy: %s is not a regular file", path);
        goto done;
    }
    uint64_t size = (uint64_t)st.st_size;
    uint8_t pre[12];
    size_t want = size < 12 ? (size_t)size : 12;
    OT_CHECK_GOTO(read_exact(fd, pre, want, path), rc, done);
    size_t pl = 0, hl = 0;
    OT_CHECK_GOTO(parse_prefix(pre, want, &pl, &hl), rc, done);
    if (hl > size - pl) {
        rc =
            ot_error(OT_ERR_CORRUPT_DATA, "npy: %s: header length %zu runs past the end", path, hl);
        goto done;
    }
    if (lseek(fd, (off_t)pl, SEEK_SET) != (off_t)pl) {
        rc = ot_error(OT_ERR_IO, "npy: seek %s: %s", path, strerror(errno));
        goto done;
    }
    hdr = ot_malloc(hl ? hl : 1);
    if (!hdr) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "npy: cannot allocate a %zu-byte header", hl);
        goto done;
    }
    OT_CHECK_GOTO(read_exact(fd, hdr, hl, path), rc, done);
    npy_header h;
    OT_CHECK_GOTO(parse_dict(hdr, hl, &h), rc, done);
    OT_CHECK_GOTO(check_data_len(&h, size - pl - hl), rc, done);
    OT_CHECK_GOTO(ot_tensor_alloc(&t, &h.shape), rc, done);
    OT_CHECK_GOTO(read_exact(fd, t.data, t.nbytes, path), rc, done);
    if (h.swap) byteswap(t.data, t.nbytes, h.shape.dtype);
    *out = t;
    t.data = NULL;
    t.owned = false;
done:
    if (rc != OT_OK) {
        ot_tensor_release(&t);
        if (rc != OT_ERR_IO && rc != OT_ERR_NOT_FOUND && rc != OT_ERR_OUT_OF_MEMORY &&
            !strstr(ot_last_error(), path))
            ot_error_wrap(rc, "%s", path);
    }
    ot_free(hdr);
    close(fd);
    return rc;
}

/* ---- writing ------------------------------------------------------------------------------- */

static const char *descr_of(ot_dtype t) {
    switch (t) {
    case OT_PRED: return "|b1";
    case OT_S8: return "|i1";
    case OT_S16: return "<i2";
    case OT_S32: return "<i4";
    case OT_S64: return "<i8";
    case OT_U8: return "|u1";
    case OT_U16: return "<u2";
    case OT_U32: return "<u4";
    case OT_U64: return "<u8";
    case OT_F16: return "<f2";
    case OT_F32: return "<f4";
    case OT_F64: return "<f8";
    case OT_C64: return "<c8";
    case OT_C128: return "<c16";
    default: return NULL;
    }
}

/* Formats prefix + header into buf (at least 512 bytes; rank <= 8 needs < 300) and returns its
 * total length, a multiple of 64. */
static ot_status format_header(const ot_tensor *t, char *buf, size_t cap, size_t *out_len) {
    if (!t) return ot_error(OT_ERR_INVALID_ARGUMENT, "npy: NULL tensor");
    if (t->shape.dtype == OT_BF16)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "npy: NumPy has no bfloat16 dtype; convert the tensor to f32 "
                        "(ot_bf16_to_f32) or write its bits as u16");
    const char *descr = descr_of(t->shape.dtype);
    if (!descr)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "npy: invalid dtype %d", (int)t->shape.dtype);
    int64_t nb;
    ot_status rc = ot_shape_nbytes(&t->shape, &nb);
    if (rc != OT_OK) return ot_error_wrap(rc, "npy: tensor shape");
    if (t->shape.rank < 0 || t->shape.rank > OT_MAX_RANK)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "npy: rank %d", t->shape.rank);
    if ((uint64_t)nb != (uint64_t)t->nbytes)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "npy: tensor nbytes %zu disagrees with its shape (%lld)", t->nbytes,
                        (long long)nb);
    if (nb > 0 && !t->data) return ot_error(OT_ERR_INVALID_ARGUMENT, "npy: tensor has no data");
    char dict[400];
    int n =
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < t->shape.rank; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%lld", i ? ", " : "",
                      (long long)t->shape.dims[i]);
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", t->shape.rank == 1 ? "," : "");
    /* format 1.0 holds a header up to 65535 bytes; that is always enough for rank <= 8 */
    size_t pl = 10;
    size_t total = (pl + (size_t)n + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    if (total > cap) return ot_error(OT_ERR_INTERNAL, "npy: header buffer too small");
    size_t hl = total - pl;
    memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (char)(hl & 0xff);
    buf[9] = (char)(hl >> 8);
    memcpy(buf + pl, dict, (size_t)n);
    memset(buf + pl + n, ' ', hl - (size_t)n - 1);
    buf[total - 1] = '\n';
    *out_len = total;
    return OT_OK;
}

ot_status ot_npy_serialize(const ot_tensor *t, void **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    char hdr[512];
    size_t hl;
    OT_CHECK(format_header(t, hdr, sizeof hdr, &hl));
    if (t->nbytes > SIZE_MAX - hl)
        return ot_error(OT_ERR_OUT_OF_RANGE, "npy: %zu bytes do not fit in memory", t->nbytes);
    uint8_t *b = ot_malloc(hl + t->nbytes);
    if (!b) return ot_error(OT_ERR_OUT_OF_MEMORY, "npy: cannot allocate %zu bytes", hl + t->nbytes);
    memcpy(b, hdr, hl);
    if (t->nbytes) memcpy(b + hl, t->data, t->nbytes);
    *out = b;
    *out_len = hl + t->nbytes;
    return OT_OK;
}

static ot_status write_exact(int fd, const void *src, size_t n, const char *path) {
    int e = ot_write_full(fd, src, n, NULL);
    if (e)
        return ot_error(OT_ERR_IO, "npy: write %s: %s", path, e > 0 ? strerror(e) : "no progress");
    return OT_OK;
}

ot_status ot_npy_write_file(const char *path, const ot_tensor *t) {
    char hdr[512];
    size_t hl;
    OT_CHECK(format_header(t, hdr, sizeof hdr, &hl));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return ot_error(OT_ERR_IO, "npy: create %s: %s", path, strerror(errno));
    ot_status rc = write_exact(fd, hdr, hl, path);
    if (rc == OT_OK) rc = write_exact(fd, t->data, t->nbytes, path);
    if (close(fd) != 0 && rc == OT_OK)
        rc = ot_error(OT_ERR_IO, "npy: close %s: %s", path, strerror(errno));
    if (rc != OT_OK) unlink(path); /* never leave a truncated file behind */
    return rc;
}
