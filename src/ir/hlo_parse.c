/*
 * HLO text parser: XLA's dump form (% names, operand shapes, layouts, metadata, comments,
 * FileNames/StackFrames preambles) and JAX's as_text form, plus the lenient forms (no HloModule
 * header, no ENTRY, no ROOT).
 *
 * One pass over the text. Instructions are built as soon as their operands exist (the usual
 * case: text is in definition order); an instruction that names a later one is held back and
 * built, in dependency order, when its computation closes. Names are found through hash indexes,
 * so the parse is linear in the text. Every error carries file:line:col and what was expected;
 * line and column are computed only when an error is reported.
 */
#include "attr_schema.h"
#include "ir_internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct ref {
    const char *name;
    size_t len;
    const char *at;       /* the operand's text (for errors) */
    const char *shape_at; /* its declared shape, still to be checked, or NULL */
    ot_instr *resolved;   /* the instruction when it was already built */
} ref;

typedef struct pend {
    const char *name; /* arena, NUL-terminated */
    size_t nlen;
    const char *at, *op_at;
    ot_opcode op;
    ot_ir_shape shape;
    int nops;
    int64_t ops_off; /* into P.refs */
    ot_attrs attrs;
    ot_computation **called;
    int ncalled;
    const ot_metadata *md;
    ot_raw_attr *raw;
    int nraw;
    ot_instr *built;
    uint8_t state; /* 0 waiting, 1 on the DFS stack, 2 built */
} pend;

typedef struct P {
    const char *s, *p, *end;
    const char *file;
    int line_offset;
    ot_module *m;
    ot_arena *scratch; /* operand shapes and other parse-only data */
    ot_status err;
    /* current computation */
    ot_computation *c;
    pend *pend;
    int64_t npend, pend_cap;
    ref *refs;
    int64_t nrefs, refs_cap;
    ir_name_index pend_names; /* name -> (pend index + 1) */
    /* operand scratch for immediate builds */
    ot_instr **ops;
    int ops_cap;
    /* entry_computation_layout's value in the text, checked against the entry at the end */
    const char *ecl_at;
    size_t ecl_len;
    /* The instructions built last, direct-mapped by name hash: operands mostly name values defined
     * a few lines up, and this small table answers them from cache instead of a random probe into
     * the computation's (large) name index. A miss falls back to the index. */
    struct recent_slot {
        uint64_t h;
        ot_instr *i;
    } * recent;
} P;

#define RECENT_SLOTS 4096

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

static void line_col(const P *x, const char *at, int *line, int *col) {
    int l = 1;
    const char *ls = x->s;
    if (at > x->end) at = x->end;
    for (const char *q = x->s; q < at; q++)
        if (*q == '\n') {
            l++;
            ls = q + 1;
        }
    *line = l + x->line_offset;
    *col = (int)(at - ls) + 1;
}

static ot_status perr(P *x, const char *at, ot_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static ot_status perr(P *x, const char *at, ot_status code, const char *fmt, ...) {
    if (x->err) return x->err;
    char buf[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    int line, col;
    line_col(x, at, &line, &col);
    x->err = code;
    return ot_error(code, "%s:%d:%d: %s", x->file, line, col, buf);
}

/* Wraps the current ot_last_error() detail with the location. */
static ot_status pwrap(P *x, const char *at, ot_status code, const char *what) {
    if (x->err) return x->err;
    const char *msg = ot_last_error();
    size_t cl = strlen(ot_status_str(code));
    if (strncmp(msg, ot_status_str(code), cl) == 0 && msg[cl] == ':' && msg[cl + 1] == ' ')
        msg += cl + 2;
    char detail[1024];
    snprintf(detail, sizeof detail, "%s", msg);
    return perr(x, at, code, "%s%s%s", what ? what : "", what ? ": " : "", detail);
}

/* What the text holds at `at`, for "expected X, got Y" messages. */
static const char *got(const P *x, const char *at, char *buf, size_t n) {
    if (at >= x->end) return "end of input";
    size_t k = 0;
    while (at + k < x->end && k < 16 && at[k] != '\n') k++;
    snprintf(buf, n, "'%.*s'", (int)k, at);
    return buf;
}

static ot_status expected(P *x, const char *what) {
    char g[48];
    return perr(x, x->p, OT_ERR_INVALID_ARGUMENT, "expected %s, got %s", what,
                got(x, x->p, g, sizeof g));
}

static ot_status oom(P *x) {
    return perr(x, x->p, OT_ERR_OUT_OF_MEMORY, "out of memory");
}

/* ---------------------------------------------------------------------------------------------
 * Lexing
 * ------------------------------------------------------------------------------------------- */

static ot_status skip_ws_slow(P *x) {
    for (;;) {
        while (x->p < x->end && (*x->p == ' ' || *x->p == '\t' || *x->p == '\n' || *x->p == '\r' ||
                                 *x->p == '\f' || *x->p == '\v'))
            x->p++;
        if (x->end - x->p >= 2 && x->p[0] == '/' && x->p[1] == '/') {
            while (x->p < x->end && *x->p != '\n') x->p++;
            continue;
        }
        if (x->end - x->p >= 2 && x->p[0] == '/' && x->p[1] == '*') {
            const char *start = x->p;
            x->p += 2;
            while (x->end - x->p >= 2 && !(x->p[0] == '*' && x->p[1] == '/')) x->p++;
            if (x->end - x->p < 2) {
                x->p = start;
                return perr(x, start, OT_ERR_INVALID_ARGUMENT, "unterminated /* comment");
            }
            x->p += 2;
            continue;
        }
        return OT_OK;
    }
}

/* Whitespace and comments before the next token. Most calls stand on a token already (a byte
 * above ' ' that does not start a comment): that case is decided inline. */
static inline ot_status skip_ws(P *x) {
    if (x->p < x->end && (unsigned char)*x->p > ' ' && *x->p != '/') return OT_OK;
    return skip_ws_slow(x);
}

static bool at_char(P *x, char c) {
    return x->p < x->end && *x->p == c;
}

/* Skips whitespace and consumes c if present. */
static bool accept(P *x, char c) {
    if (skip_ws(x)) return false;
    if (at_char(x, c)) {
        x->p++;
        return true;
    }
    return false;
}

static ot_status expect_char(P *x, char c) {
    OT_CHECK(skip_ws(x));
    if (at_char(x, c)) {
        x->p++;
        return OT_OK;
    }
    char what[8];
    snprintf(what, sizeof what, "'%c'", c);
    return expected(x, what);
}

static inline bool is_digit(char c) {
    return (unsigned char)(c - '0') < 10;
}

static bool is_ident_start(char c) {
    return isalpha((unsigned char)c) || c == '_' || c == '$';
}

static bool ident_chars[256];
static _Atomic int ident_ready;

static void ident_init(void) {
    for (int c = 0; c < 256; c++)
        ident_chars[c] = isalnum(c) || c == '_' || c == '.' || c == '-' || c == '$';
    ident_ready = 1;
}

static inline bool is_ident_char(char c) {
    return ident_chars[(unsigned char)c];
}

/* An identifier (names keep '.', '-'); a leading '%' is dropped. */
static ot_status ident(P *x, const char **s, size_t *n, const char *what) {
    OT_CHECK(skip_ws(x));
    const char *q = x->p;
    if (q < x->end && *q == '%') q++;
    if (q >= x->end || !(is_ident_char(*q) && *q != '.' && *q != '-')) return expected(x, what);
    const char *st = q;
    while (q < x->end && is_ident_char(*q)) q++;
    /* a trailing '-' belongs to "->", not to the name */
    while (q > st + 1 && q[-1] == '-' && q < x->end && *q == '>') q--;
    *s = st;
    *n = (size_t)(q - st);
    x->p = q;
    return OT_OK;
}

static bool word_is(const char *s, size_t n, const char *w) {
    return strlen(w) == n && memcmp(s, w, n) == 0;
}

/* Peeks an identifier without consuming it. */
static bool peek_word(P *x, const char *w) {
    if (skip_ws(x)) return false;
    size_t n = strlen(w);
    return (size_t)(x->end - x->p) >= n && memcmp(x->p, w, n) == 0 &&
           (x->p + n == x->end || !is_ident_char(x->p[n]));
}

static ot_status parse_int(P *x, int64_t *out) {
    OT_CHECK(skip_ws(x));
    const char *q = x->p;
    bool neg = false;
    if (q < x->end && (*q == '-' || *q == '+')) {
        neg = *q == '-';
        q++;
    }
    if (q >= x->end || !is_digit(*q)) return expected(x, "an integer");
    uint64_t v = 0;
    while (q < x->end && is_digit(*q)) {
        unsigned d = (unsigned)(*q - '0');
        if (v > (UINT64_MAX - d) / 10)
            return perr(x, x->p, OT_ERR_OUT_OF_RANGE, "integer out of range");
        v = v * 10 + d;
        q++;
    }
    if ((!neg && v > (uint64_t)INT64_MAX) || (neg && v > (uint64_t)INT64_MAX + 1))
        return perr(x, x->p, OT_ERR_OUT_OF_RANGE, "integer out of range");
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    x->p = q;
    return OT_OK;
}

/* '{' [int (',' int)*] '}' into out (at most max). */
static ot_status parse_int_list(P *x, int64_t *out, int max, int *n, const char *what) {
    *n = 0;
    OT_CHECK(expect_char(x, '{'));
    if (accept(x, '}')) return OT_OK;
    for (;;) {
        int64_t v;
        OT_CHECK(parse_int(x, &v));
        if (*n >= max)
            return perr(x, x->p, OT_ERR_INVALID_ARGUMENT, "%s has more than %d entries", what, max);
        out[(*n)++] = v;
        if (accept(x, '}')) return OT_OK;
        OT_CHECK(x->err);
        OT_CHECK(expect_char(x, ','));
    }
}

static ot_status parse_bool(P *x, bool *out) {
    const char *s;
    size_t n;
    OT_CHECK(ident(x, &s, &n, "true or false"));
    if (word_is(s, n, "true")) {
        *out = true;
    } else if (word_is(s, n, "false")) {
        *out = false;
    } else {
        x->p = s;
        return expected(x, "true or false");
    }
    return OT_OK;
}

/* A quoted string with C escapes, into the arena. */
static ot_status parse_string(P *x, const char **out) {
    OT_CHECK(skip_ws(x));
    if (!at_char(x, '"')) return expected(x, "a quoted string");
    const char *st = x->p;
    x->p++;
    size_t cap = 0;
    const char *q = x->p;
    while (q < x->end && *q != '"') {
        if (*q == '\\') q++;
        q++;
        cap++;
    }
    if (q >= x->end) {
        x->p = st;
        return perr(x, st, OT_ERR_INVALID_ARGUMENT, "unterminated string");
    }
    char *d = ot_arena_alloc(x->m->arena, cap + 1, 1);
    if (!d) return oom(x);
    size_t k = 0;
    while (x->p < q) {
        char ch = *x->p++;
        if (ch == '\\' && x->p < q && *x->p >= '0' && *x->p <= '7') {
            /* \ooo: one byte in octal, as the printer writes control characters */
            const char *o = x->p;
            unsigned v = 0;
            for (int j = 0; j < 3 && x->p < q && *x->p >= '0' && *x->p <= '7'; j++)
                v = v * 8 + (unsigned)(*x->p++ - '0');
            if (v > 0xFF || v == 0)
                return perr(x, o - 1, OT_ERR_INVALID_ARGUMENT,
                            "octal escape \\%.*s is not a byte from 1 to 255", (int)(x->p - o), o);
            d[k++] = (char)v;
            continue;
        }
        if (ch == '\\' && x->p < q) {
            char e = *x->p++;
            switch (e) {
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            case 'r': ch = '\r'; break;
            default: ch = e; break;
            }
        }
        d[k++] = ch;
    }
    d[k] = '\0';
    x->p = q + 1;
    *out = d;
    return OT_OK;
}

/* Brackets nest at most this deep in any value (sharding, frontend attributes, layouts' tiling,
 * backend configs). XLA's own text nests a few levels; a bound keeps hostile input from reaching
 * anything that would recurse, and a value that deep is refused rather than kept verbatim. */
#define MAX_NEST 64

static char closer(char open) {
    return open == '{' ? '}' : open == '[' ? ']' : ')';
}

/* Skips one balanced value (for attributes kept verbatim) and returns its text span. Brackets
 * must match in kind and nest at most MAX_NEST deep. */
static ot_status skip_value(P *x, const char **st, size_t *n) {
    OT_CHECK(skip_ws(x));
    const char *q = x->p;
    *st = q;
    int depth = 0;
    char open[MAX_NEST];
    while (q < x->end) {
        char ch = *q;
        if (ch == '"') {
            q++;
            while (q < x->end && *q != '"') {
                if (*q == '\\') q++;
                q++;
            }
            if (q >= x->end) return perr(x, *st, OT_ERR_INVALID_ARGUMENT, "unterminated string");
            q++;
            continue;
        }
        if (ch == '{' || ch == '[' || ch == '(') {
            if (depth == MAX_NEST)
                return perr(x, q, OT_ERR_INVALID_ARGUMENT,
                            "brackets nested more than %d deep in a value", MAX_NEST);
            open[depth++] = ch;
        } else if (ch == '}' || ch == ']' || ch == ')') {
            if (depth == 0) break;
            if (ch != closer(open[depth - 1]))
                return perr(x, q, OT_ERR_INVALID_ARGUMENT, "'%c' closes '%c'", ch, open[depth - 1]);
            depth--;
        } else if (depth == 0 &&
                   (ch == ',' || ch == '\n' || ch == ' ' || ch == '\t' || ch == '\r')) {
            break;
        }
        q++;
    }
    if (depth) return perr(x, *st, OT_ERR_INVALID_ARGUMENT, "unbalanced brackets in value");
    if (q == *st) return expected(x, "a value");
    *n = (size_t)(q - *st);
    x->p = q;
    return OT_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Shapes
 * ------------------------------------------------------------------------------------------- */

static const char *const unsupported_types[] = {
    "s4",         "u4",         "s2",
    "u2",         "s1",         "u1",
    "f8e5m2",     "f8e4m3fn",   "f8e4m3b11fnuz",
    "f8e5m2fnuz", "f8e4m3fnuz", "f8e4m3",
    "f8e3m4",     "f4e2m1fn",   "f8e8m0fnu",
    "f6e2m3fn",   "f6e3m2fn",
};

static ot_status parse_shape(P *x, ot_arena *arena, ot_ir_shape *out, int depth) {
    memset(out, 0, sizeof *out);
    OT_CHECK(skip_ws(x));
    if (depth > MAX_NEST)
        return perr(x, x->p, OT_ERR_INVALID_ARGUMENT, "tuple shape nested more than %d deep",
                    MAX_NEST);
    if (at_char(x, '(')) {
        x->p++;
        out->kind = OT_IR_TUPLE;
        int cap = 0, n = 0;
        ot_ir_shape *el = NULL;
        if (!accept(x, ')')) {
            OT_CHECK(x->err);
            for (;;) {
                if (n == cap) {
                    int ncap = cap ? cap * 2 : 4;
                    ot_ir_shape *ne = ot_arena_alloc(arena, (size_t)ncap * sizeof *ne, 8);
                    if (!ne) return oom(x);
                    if (n) memcpy(ne, el, (size_t)n * sizeof *ne);
                    el = ne;
                    cap = ncap;
                }
                OT_CHECK(parse_shape(x, arena, &el[n], depth + 1));
                n++;
                if (accept(x, ')')) break;
                OT_CHECK(x->err);
                OT_CHECK(expect_char(x, ','));
            }
        }
        out->ntuple = n;
        out->tuple = el;
        return OT_OK;
    }
    const char *st = x->p, *s;
    size_t n;
    OT_CHECK(ident(x, &s, &n, "a shape (e.g. f32[2,3] or a tuple)"));
    if (!at_char(x, '[')) {
        x->p = st;
        return expected(x, "a shape (e.g. f32[2,3] or a tuple)");
    }
    if (word_is(s, n, "token")) {
        x->p++;
        OT_CHECK(expect_char(x, ']'));
        out->kind = OT_IR_TOKEN;
        return OT_OK;
    }
    ot_dtype t = ot_dtype_from_name(s, n);
    if (t == OT_DTYPE_INVALID) {
        for (size_t k = 0; k < sizeof unsupported_types / sizeof unsupported_types[0]; k++)
            if (word_is(s, n, unsupported_types[k]))
                return perr(x, st, OT_ERR_UNIMPLEMENTED, "element type %.*s is not supported",
                            (int)n, s);
        return perr(x, st, OT_ERR_INVALID_ARGUMENT, "unknown element type '%.*s'", (int)n, s);
    }
    x->p++; /* '[' */
    out->kind = OT_IR_ARRAY;
    out->array.dtype = t;
    int rank = 0;
    if (!accept(x, ']')) {
        OT_CHECK(x->err);
        for (;;) {
            OT_CHECK(skip_ws(x));
            if (at_char(x, '?') || at_char(x, '<'))
                return perr(x, x->p, OT_ERR_UNIMPLEMENTED,
                            "dynamic dimensions ('?' and '<=' bounds) are not supported");
            int64_t d;
            OT_CHECK(parse_int(x, &d));
            if (d < 0) return perr(x, x->p, OT_ERR_INVALID_ARGUMENT, "negative dimension");
            if (rank >= OT_MAX_RANK)
                return perr(x, st, OT_ERR_UNIMPLEMENTED, "rank above %d is not supported",
                            OT_MAX_RANK);
            out->array.dims[rank++] = d;
            if (accept(x, ']')) break;
            OT_CHECK(x->err);
            OT_CHECK(expect_char(x, ','));
        }
    }
    out->array.rank = rank;
    int64_t nb;
    if (ot_shape_nbytes(&out->array, &nb) != OT_OK)
        return perr(x, st, OT_ERR_INVALID_ARGUMENT, "shape is too large (byte count overflows)");
    /* layout: {minor_to_major[:tiling...]} */
    if (at_char(x, '{')) {
        x->p++;
        int k = 0;
        bool ok = true;
        OT_CHECK(skip_ws(x));
        while (!at_char(x, '}') && !at_char(x, ':')) {
            int64_t v;
            OT_CHECK(parse_int(x, &v));
            if (k < OT_MAX_RANK && v >= 0 && v < rank)
                out->minor_to_major[k] = (int8_t)v;
            else
                ok = false;
            k++;
            OT_CHECK(skip_ws(x));
            if (at_char(x, ',')) x->p++;
            OT_CHECK(skip_ws(x));
        }
        if (at_char(x, ':')) { /* tiling, memory space, ...: kept out of the IR */
            const char *colon = x->p;
            int depth2 = 0;
            char open[MAX_NEST];
            while (x->p < x->end && !(depth2 == 0 && *x->p == '}')) {
                char ch = *x->p;
                if (ch == '(' || ch == '{' || ch == '[') {
                    if (depth2 == MAX_NEST)
                        return perr(x, x->p, OT_ERR_INVALID_ARGUMENT,
                                    "layout nested more than %d deep", MAX_NEST);
                    open[depth2++] = ch;
                } else if (ch == ')' || ch == '}' || ch == ']') {
                    if (depth2 == 0 || ch != closer(open[depth2 - 1]))
                        return perr(x, x->p, OT_ERR_INVALID_ARGUMENT, "unbalanced '%c' in layout",
                                    ch);
                    depth2--;
                }
                x->p++;
            }
            if (depth2) return perr(x, colon, OT_ERR_INVALID_ARGUMENT, "unterminated layout");
        }
        OT_CHECK(expect_char(x, '}'));
        if (!ok || k != rank)
            return perr(x, st, OT_ERR_INVALID_ARGUMENT,
                        "layout of %.*s[...] must list each of its %d dimensions once", (int)n, s,
                        rank);
        uint32_t seen = 0;
        for (int i = 0; i < rank; i++) seen |= 1u << out->minor_to_major[i];
        if (seen != (rank ? (1u << rank) - 1 : 0))
            return perr(x, st, OT_ERR_INVALID_ARGUMENT, "layout is not a permutation");
        out->has_layout = true;
    }
    return OT_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Constants
 * ------------------------------------------------------------------------------------------- */

static ot_status store_value(P *x, const char *tok, size_t n, ot_dtype t, void *dst) {
    char buf[80];
    if (n >= sizeof buf) return perr(x, tok, OT_ERR_INVALID_ARGUMENT, "number too long");
    memcpy(buf, tok, n);
    buf[n] = '\0';
    char *endp;
    errno = 0;
    if (t == OT_PRED) {
        uint8_t v;
        if (!strcmp(buf, "true") || !strcmp(buf, "1"))
            v = 1;
        else if (!strcmp(buf, "false") || !strcmp(buf, "0"))
            v = 0;
        else
            return perr(x, tok, OT_ERR_INVALID_ARGUMENT, "expected true or false, got '%s'", buf);
        memcpy(dst, &v, 1);
        return OT_OK;
    }
    if (ot_dtype_is_integer(t)) {
        bool neg = buf[0] == '-';
        if (ot_dtype_is_unsigned_int(t)) {
            if (neg)
                return perr(x, tok, OT_ERR_INVALID_ARGUMENT, "negative value '%s' for %s", buf,
                            ot_dtype_name(t));
            unsigned long long v = strtoull(buf, &endp, 10);
            if (*endp || errno || endp == buf)
                return perr(x, tok, OT_ERR_INVALID_ARGUMENT, "expected an integer, got '%s'", buf);
            size_t sz = ot_dtype_size(t);
            if (sz < 8 && v >> (8 * sz))
                return perr(x, tok, OT_ERR_OUT_OF_RANGE, "%s does not fit %s", buf,
                            ot_dtype_name(t));
            uint8_t u8 = (uint8_t)v;
            uint16_t u16 = (uint16_t)v;
            uint32_t u32 = (uint32_t)v;
            uint64_t u64 = v;
            memcpy(dst,
                   sz == 1   ? (void *)&u8
                   : sz == 2 ? (void *)&u16
                   : sz == 4 ? (void *)&u32
                             : (void *)&u64,
                   sz);
        } else {
            long long v = strtoll(buf, &endp, 10);
            if (*endp || errno || endp == buf)
                return perr(x, tok, OT_ERR_INVALID_ARGUMENT, "expected an integer, got '%s'", buf);
            size_t sz = ot_dtype_size(t);
            if (sz < 8) {
                long long lim = 1ll << (8 * sz - 1);
                if (v < -lim || v >= lim)
                    return perr(x, tok, OT_ERR_OUT_OF_RANGE, "%s does not fit %s", buf,
                                ot_dtype_name(t));
            }
            int8_t s8 = (int8_t)v;
            int16_t s16 = (int16_t)v;
            int32_t s32 = (int32_t)v;
            int64_t s64 = v;
            memcpy(dst,
                   sz == 1   ? (void *)&s8
                   : sz == 2 ? (void *)&s16
                   : sz == 4 ? (void *)&s32
                             : (void *)&s64,
                   sz);
        }
        return OT_OK;
    }
    double d;
    const char *b = buf;
    bool neg = false;
    if (*b == '-' || *b == '+') {
        neg = *b == '-';
        b++;
    }
    if (!strncmp(b, "nan", 3) && (b[3] == '\0' || b[3] == '(')) {
        d = neg ? -NAN : NAN;
    } else if (!strcmp(b, "inf")) {
        d = neg ? -INFINITY : INFINITY;
    } else {
        if (!isdigit((unsigned char)*b) && *b != '.')
            return perr(x, tok, OT_ERR_INVALID_ARGUMENT, "expected a number, got '%s'", buf);
        d = strtod(buf, &endp);
        if (*endp || endp == buf)
            return perr(x, tok, OT_ERR_INVALID_ARGUMENT, "expected a number, got '%s'", buf);
    }
    switch (t) {
    case OT_F64: memcpy(dst, &d, 8); break;
    case OT_F32: {
        float f = (float)d;
        memcpy(dst, &f, 4);
        break;
    }
    case OT_F16: {
        uint16_t h = ot_f32_to_f16((float)d);
        memcpy(dst, &h, 2);
        break;
    }
    case OT_BF16: {
        uint16_t h = ot_f32_to_bf16((float)d);
        memcpy(dst, &h, 2);
        break;
    }
    default: return perr(x, tok, OT_ERR_INTERNAL, "bad constant dtype");
    }
    return OT_OK;
}

/* constant( literal ): the '(' is consumed; consumes through the matching ')'. */
static ot_status parse_literal(P *x, const ot_ir_shape *shape, ot_literal **out) {
    OT_CHECK(skip_ws(x));
    ot_literal *l = ir_alloc(x->m, sizeof *l);
    if (!l) return oom(x);
    memset(l, 0, sizeof *l);
    *out = l;
    if (shape->kind != OT_IR_ARRAY) {
        if (at_char(x, '('))
            return perr(x, x->p, OT_ERR_UNIMPLEMENTED, "tuple constants are not supported");
        return perr(x, x->p, OT_ERR_UNIMPLEMENTED, "constants of shape %s are not supported",
                    shape->kind == OT_IR_TOKEN ? "token[]" : "tuple");
    }
    /* elided: {...} */
    if ((size_t)(x->end - x->p) >= 5 && !memcmp(x->p, "{...}", 5)) {
        x->p += 5;
        l->elided = true;
        return expect_char(x, ')');
    }
    /* an optional leading shape, as older printers wrote: f32[2] {1, 2} */
    if (x->p < x->end && is_ident_start(*x->p)) {
        const char *q = x->p;
        while (q < x->end && is_ident_char(*q)) q++;
        if (q < x->end && *q == '[') {
            ot_ir_shape s2;
            const char *st = x->p;
            OT_CHECK(parse_shape(x, x->scratch, &s2, 0));
            if (!ot_ir_shape_equal(&s2, shape))
                return perr(x, st, OT_ERR_SHAPE_MISMATCH,
                            "constant's literal shape differs from the declared shape");
        }
    }
    const ot_shape *s = &shape->array;
    int64_t numel = ot_shape_numel_unchecked(s);
    size_t es = ot_dtype_size(s->dtype);
    /* every element needs at least one character of text, except a splat: one bare value */
    bool splat = x->p < x->end && *x->p != '{';
    if (splat && numel > (1 << 24))
        return perr(x, x->p, OT_ERR_UNIMPLEMENTED,
                    "a one-value constant of %lld elements (above 16M elements is not supported)",
                    (long long)numel);
    if (!splat && numel > x->end - x->p && numel > 1)
        return perr(x, x->p, OT_ERR_INVALID_ARGUMENT,
                    "constant of shape with %lld elements is longer than the input",
                    (long long)numel);
    uint8_t *data = NULL;
    if (numel) {
        data = ot_arena_alloc(x->m->arena, (size_t)numel * es, 8);
        if (!data) return oom(x);
    }
    int64_t k = 0;
    int depth = 0;
    for (;;) {
        OT_CHECK(skip_ws(x));
        if (x->p >= x->end) return expected(x, "')' closing the constant");
        char ch = *x->p;
        if (ch == '{') {
            depth++;
            if (depth > OT_MAX_RANK + 1)
                return perr(x, x->p, OT_ERR_INVALID_ARGUMENT, "constant nested too deeply");
            x->p++;
        } else if (ch == '}') {
            if (depth == 0) return expected(x, "a value");
            depth--;
            x->p++;
        } else if (ch == ',') {
            x->p++;
        } else if (ch == ')') {
            if (depth) return expected(x, "'}'");
            x->p++;
            break;
        } else if (ch == '(' && ot_dtype_is_complex(s->dtype)) {
            /* a complex element: (real, imaginary), each a number of the component type */
            const char *at = x->p++;
            if (k >= numel)
                return perr(x, at, OT_ERR_SHAPE_MISMATCH,
                            "constant has more values than the %lld its shape holds",
                            (long long)numel);
            size_t ps = es / 2;
            for (int part = 0; part < 2; part++) {
                OT_CHECK(skip_ws(x));
                const char *tok = x->p;
                while (x->p < x->end && !strchr(",{}() \t\r\n", *x->p)) x->p++;
                size_t n = (size_t)(x->p - tok);
                if (x->p < x->end && *x->p == '(' && n >= 3 && !memcmp(tok + n - 3, "nan", 3)) {
                    while (x->p < x->end && *x->p != ')') x->p++;
                    if (x->p < x->end) x->p++;
                }
                if (n == 0) return expected(x, part ? "an imaginary part" : "a real part");
                OT_CHECK(store_value(x, tok, n, ot_dtype_complex_part(s->dtype),
                                     data + (size_t)k * es + (size_t)part * ps));
                OT_CHECK(skip_ws(x));
                OT_CHECK(expect_char(x, part ? ')' : ','));
            }
            k++;
        } else if (ch == '(') {
            return perr(x, x->p, OT_ERR_UNIMPLEMENTED, "tuple constants are not supported");
        } else {
            const char *tok = x->p;
            while (x->p < x->end && !strchr(",{}() \t\r\n", *x->p)) x->p++;
            size_t n = (size_t)(x->p - tok);
            /* nan(0x...) payloads */
            if (x->p < x->end && *x->p == '(' && n >= 3 && !memcmp(tok + n - 3, "nan", 3)) {
                while (x->p < x->end && *x->p != ')') x->p++;
                if (x->p < x->end) x->p++;
            }
            if (n == 0) return expected(x, "a value");
            if (k >= numel)
                return perr(x, tok, OT_ERR_SHAPE_MISMATCH,
                            "constant has more values than the %lld its shape holds",
                            (long long)numel);
            OT_CHECK(store_value(x, tok, n, s->dtype, data + (size_t)k * es));
            k++;
        }
    }
    if (k != numel) {
        if (k == 1 && numel > 1 && splat) { /* one value for every element, as XLA accepts */
            for (int64_t e = 1; e < numel; e++) memcpy(data + (size_t)e * es, data, es);
            k = numel;
        }
    }
    if (k != numel) {
        return perr(x, x->p, OT_ERR_SHAPE_MISMATCH,
                    "constant has %lld values, its shape holds %lld", (long long)k,
                    (long long)numel);
    }
    l->nbytes = numel * (int64_t)es;
    l->data = data;
    return OT_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Attributes
 * ------------------------------------------------------------------------------------------- */

static ot_status comp_ref(P *x, ot_computation **out) {
    const char *s;
    size_t n;
    const char *at = (skip_ws(x), x->p);
    OT_CHECK(ident(x, &s, &n, "a computation name"));
    ot_computation *c = ir_names_get(&x->m->comp_names, s, n);
    if (!c)
        return perr(x, at, OT_ERR_NOT_FOUND,
                    "unknown computation '%.*s' (computations must be defined before use)", (int)n,
                    s);
    if (c == x->c)
        return perr(x, at, OT_ERR_INVALID_ARGUMENT, "computation '%.*s' calls itself", (int)n, s);
    *out = c;
    return OT_OK;
}

static ot_status comp_list(P *x, ot_computation ***out, int *n) {
    OT_CHECK(expect_char(x, '{'));
    int cap = 4;
    ot_computation **l = ot_arena_alloc(x->m->arena, (size_t)cap * sizeof *l, 8);
    if (!l) return oom(x);
    *n = 0;
    if (!accept(x, '}')) {
        OT_CHECK(x->err);
        for (;;) {
            if (*n == cap) {
                ot_computation **nl = ot_arena_alloc(x->m->arena, (size_t)cap * 2 * sizeof *nl, 8);
                if (!nl) return oom(x);
                memcpy(nl, l, (size_t)cap * sizeof *nl);
                l = nl;
                cap *= 2;
            }
            OT_CHECK(comp_ref(x, &l[(*n)++]));
            if (accept(x, '}')) break;
            OT_CHECK(x->err);
            OT_CHECK(expect_char(x, ','));
        }
    }
    *out = l;
    return OT_OK;
}

/* "3x3" or "1_1x0_2" style lists: k parts per group, groups separated by 'x'. */
static ot_status x_list(P *x, int parts, int64_t out[][3], int *n, const char *what) {
    OT_CHECK(skip_ws(x));
    *n = 0;
    for (;;) {
        if (*n >= OT_MAX_RANK)
            return perr(x, x->p, OT_ERR_INVALID_ARGUMENT, "%s has more than %d dimensions", what,
                        OT_MAX_RANK);
        for (int k = 0; k < parts; k++) {
            if (k) {
                if (!at_char(x, '_')) {
                    if (parts == 3 && k == 2) { /* interior padding is optional */
                        out[*n][2] = 0;
                        break;
                    }
                    return expected(x, "'_'");
                }
                x->p++;
            }
            /* parse_int skips whitespace, which is fine inside these tokens */
            OT_CHECK(parse_int(x, &out[*n][k]));
        }
        (*n)++;
        if (!at_char(x, 'x')) break;
        x->p++;
    }
    return OT_OK;
}

static ot_status parse_window(P *x, ot_window **out) {
    ot_window *w = ir_alloc(x->m, sizeof *w);
    if (!w) return oom(x);
    memset(w, 0, sizeof *w);
    int rank = -1;
    bool have_size = false;
    int64_t v[OT_MAX_RANK][3];
    int64_t size[OT_MAX_RANK] = {0}, stride[OT_MAX_RANK], lo[OT_MAX_RANK] = {0},
            hi[OT_MAX_RANK] = {0}, ld[OT_MAX_RANK], rd[OT_MAX_RANK], rev[OT_MAX_RANK] = {0};
    for (int i = 0; i < OT_MAX_RANK; i++) stride[i] = ld[i] = rd[i] = 1;
    static const char *const fields[] = {"size",       "stride",     "pad",
                                         "lhs_dilate", "rhs_dilate", "rhs_reversal"};
    unsigned seen = 0;
    OT_CHECK(expect_char(x, '{'));
    while (!accept(x, '}')) {
        OT_CHECK(x->err);
        const char *s, *at = x->p;
        size_t n;
        OT_CHECK(ident(x, &s, &n, "a window field (size, stride, pad, lhs_dilate, ...)"));
        int f = 0;
        while (f < 6 && !word_is(s, n, fields[f])) f++;
        if (f == 6)
            return perr(x, at, OT_ERR_INVALID_ARGUMENT, "unknown window field '%.*s'", (int)n, s);
        /* XLA refuses a repeated field rather than letting the last one win */
        if (seen & 1u << f)
            return perr(x, at, OT_ERR_INVALID_ARGUMENT, "window field '%s' is given twice",
                        fields[f]);
        seen |= 1u << f;
        OT_CHECK(expect_char(x, '='));
        int k;
        OT_CHECK(x_list(x, f == 2 ? 2 : 1, v, &k, "window"));
        if (rank >= 0 && k != rank)
            return perr(x, at, OT_ERR_INVALID_ARGUMENT,
                        "window field %.*s has %d dimensions, others have %d", (int)n, s, k, rank);
        rank = k;
        for (int i = 0; i < k; i++) {
            switch (f) {
            case 0:
                size[i] = v[i][0];
                have_size = true;
                break;
            case 1: stride[i] = v[i][0]; break;
            case 2:
                lo[i] = v[i][0];
                hi[i] = v[i][1];
                break;
            case 3: ld[i] = v[i][0]; break;
            case 4: rd[i] = v[i][0]; break;
            default: rev[i] = v[i][0]; break;
            }
        }
    }
    if (rank > 0 && !have_size) return perr(x, x->p, OT_ERR_INVALID_ARGUMENT, "window needs size=");
    w->rank = rank < 0 ? 0 : rank;
    for (int i = 0; i < w->rank; i++)
        w->dims[i] = (ot_window_dim){size[i], stride[i], lo[i], hi[i], rd[i], ld[i], rev[i] != 0};
    *out = w;
    return OT_OK;
}

static ot_status parse_dim_labels(P *x, ot_conv_dims **out) {
    OT_CHECK(skip_ws(x));
    const char *st = x->p;
    const char *q = x->p;
    while (q < x->end && (isalnum((unsigned char)*q) || *q == '_' || *q == '-' || *q == '>')) q++;
    x->p = q;
    /* input_kernel->output */
    const char *us = memchr(st, '_', (size_t)(q - st));
    const char *ar = NULL;
    for (const char *r = st; r + 1 < q; r++)
        if (r[0] == '-' && r[1] == '>') ar = r;
    if (!us || !ar || us > ar)
        return perr(x, st, OT_ERR_INVALID_ARGUMENT,
                    "expected dim_labels like b01f_01io->b01f, got '%.*s'", (int)(q - st), st);
    const char *in = st, *kr = us + 1, *ou = ar + 2;
    size_t ni = (size_t)(us - st), nk = (size_t)(ar - kr), no = (size_t)(q - ou);
    if (ni != nk || ni != no || ni < 2 || ni > OT_MAX_RANK)
        return perr(x, st, OT_ERR_INVALID_ARGUMENT,
                    "dim_labels parts must have equal length 2..%d: '%.*s'", OT_MAX_RANK,
                    (int)(q - st), st);
    ot_conv_dims *d = ir_alloc(x->m, sizeof *d);
    if (!d) return oom(x);
    memset(d, 0, sizeof *d);
    int ns = (int)ni - 2;
    d->nspatial = ns;
    int seen_i = 0, seen_k = 0, seen_o = 0;
    for (size_t i = 0; i < ni; i++) {
        char a = in[i], b = kr[i], c = ou[i];
        if (a == 'b')
            d->input_batch = (int64_t)i, seen_i |= 1;
        else if (a == 'f')
            d->input_feature = (int64_t)i, seen_i |= 2;
        else if (isdigit((unsigned char)a) && a - '0' < ns)
            d->input_spatial[a - '0'] = (int64_t)i, seen_i |= 4 << (a - '0');
        else
            goto bad;
        if (b == 'i')
            d->kernel_input_feature = (int64_t)i, seen_k |= 1;
        else if (b == 'o')
            d->kernel_output_feature = (int64_t)i, seen_k |= 2;
        else if (isdigit((unsigned char)b) && b - '0' < ns)
            d->kernel_spatial[b - '0'] = (int64_t)i, seen_k |= 4 << (b - '0');
        else
            goto bad;
        if (c == 'b')
            d->output_batch = (int64_t)i, seen_o |= 1;
        else if (c == 'f')
            d->output_feature = (int64_t)i, seen_o |= 2;
        else if (isdigit((unsigned char)c) && c - '0' < ns)
            d->output_spatial[c - '0'] = (int64_t)i, seen_o |= 4 << (c - '0');
        else
            goto bad;
    }
    int all = (4 << ns) - 1;
    if (seen_i != all || seen_k != all || seen_o != all) goto bad;
    *out = d;
    return OT_OK;
bad:
    return perr(x, st, OT_ERR_INVALID_ARGUMENT,
                "invalid dim_labels '%.*s' (each part needs b/f (i/o for the kernel) and the "
                "spatial digits 0..%d once)",
                (int)(q - st), st, ns - 1);
}

static ot_status parse_slice(P *x, int rank, ot_slice_dim **out) {
    ot_slice_dim *sd = ir_alloc(x->m, (size_t)(rank ? rank : 1) * sizeof *sd);
    if (!sd) return oom(x);
    OT_CHECK(expect_char(x, '{'));
    int k = 0;
    if (!accept(x, '}')) {
        OT_CHECK(x->err);
        for (;;) {
            const char *at = (skip_ws(x), x->p);
            OT_CHECK(expect_char(x, '['));
            int64_t a, b, c = 1;
            OT_CHECK(parse_int(x, &a));
            OT_CHECK(expect_char(x, ':'));
            OT_CHECK(parse_int(x, &b));
            if (accept(x, ':')) OT_CHECK(parse_int(x, &c));
            OT_CHECK(x->err);
            OT_CHECK(expect_char(x, ']'));
            if (k >= rank)
                return perr(x, at, OT_ERR_INVALID_ARGUMENT,
                            "slice has more entries than the rank %d", rank);
            sd[k++] = (ot_slice_dim){a, b, c};
            if (accept(x, '}')) break;
            OT_CHECK(x->err);
            OT_CHECK(expect_char(x, ','));
        }
    }
    if (k != rank)
        return perr(x, x->p, OT_ERR_INVALID_ARGUMENT, "slice has %d entries, the rank is %d", k,
                    rank);
    *out = sd;
    return OT_OK;
}

/* A quoted axis name 'name' (single quotes). */
static ot_status axis_name(P *x, const char **s, size_t *n) {
    OT_CHECK(skip_ws(x));
    if (!at_char(x, '\'')) return expected(x, "a quoted axis name like 'axis_0'");
    const char *q = ++x->p;
    while (q < x->end && *q != '\'' && *q != '\n') q++;
    if (q >= x->end || *q != '\'')
        return perr(x, x->p - 1, OT_ERR_INVALID_ARGUMENT, "unterminated axis name");
    *s = x->p;
    *n = (size_t)(q - x->p);
    x->p = q + 1;
    return OT_OK;
}

/* mesh['a'=2,'b'=4] {'b'}: devices laid out row-major over the mesh; each group holds the devices
 * that differ only along the listed axes. Expanded as the iota form that means the same. */
static ot_status parse_mesh_groups(P *x, const char *at, const ot_replica_groups **out) {
    x->p += 4; /* mesh */
    OT_CHECK(expect_char(x, '['));
    const char *names[OT_MAX_RANK];
    size_t lens[OT_MAX_RANK];
    int64_t dims[OT_MAX_RANK];
    int nd = 0;
    for (;;) {
        if (nd >= OT_MAX_RANK) return perr(x, x->p, OT_ERR_INVALID_ARGUMENT, "too many mesh axes");
        OT_CHECK(axis_name(x, &names[nd], &lens[nd]));
        OT_CHECK(expect_char(x, '='));
        OT_CHECK(parse_int(x, &dims[nd]));
        nd++;
        if (accept(x, ']')) break;
        OT_CHECK(x->err);
        OT_CHECK(expect_char(x, ','));
    }
    OT_CHECK(expect_char(x, '{'));
    bool in_group[OT_MAX_RANK] = {0};
    while (!accept(x, '}')) {
        OT_CHECK(x->err);
        const char *s;
        size_t n;
        OT_CHECK(axis_name(x, &s, &n));
        OT_CHECK(skip_ws(x));
        if (at_char(x, ':'))
            return perr(x, x->p, OT_ERR_UNIMPLEMENTED,
                        "mesh sub-axes in replica_groups are not supported");
        int k = -1;
        for (int i = 0; i < nd; i++)
            if (lens[i] == n && !memcmp(names[i], s, n)) k = i;
        if (k < 0)
            return perr(x, s, OT_ERR_INVALID_ARGUMENT, "axis '%.*s' is not in the mesh", (int)n, s);
        in_group[k] = true;
        if (!accept(x, ',')) {
            OT_CHECK(x->err);
            OT_CHECK(expect_char(x, '}'));
            break;
        }
    }
    int64_t perm[OT_MAX_RANK], size = 1, total = 1;
    int np = 0;
    for (int i = 0; i < nd; i++) {
        if (dims[i] <= 0 || dims[i] > (1 << 24) || total > (1 << 24) / dims[i])
            return perr(x, at, OT_ERR_INVALID_ARGUMENT, "mesh axis sizes out of range");
        total *= dims[i];
        if (!in_group[i]) perm[np++] = i;
    }
    for (int i = 0; i < nd; i++)
        if (in_group[i]) {
            perm[np++] = i;
            size *= dims[i];
        }
    const ot_replica_groups *r =
        ot_replica_groups_iota(x->m, total / size, size, dims, nd, perm, nd);
    if (!r) {
        ot_status s = ot_module_status(x->m);
        x->m->err = OT_OK;
        return pwrap(x, at, s, NULL);
    }
    *out = r;
    return OT_OK;
}

static ot_status parse_replica_groups(P *x, const ot_replica_groups **out) {
    OT_CHECK(skip_ws(x));
    const char *at = x->p;
    if (peek_word(x, "mesh")) return parse_mesh_groups(x, at, out);
    if (at_char(x, '[')) {
        /* [G,S]<=[d0,...]T(p0,...) */
        x->p++;
        int64_t g, sz;
        OT_CHECK(parse_int(x, &g));
        OT_CHECK(expect_char(x, ','));
        OT_CHECK(parse_int(x, &sz));
        OT_CHECK(expect_char(x, ']'));
        OT_CHECK(expect_char(x, '<'));
        if (!at_char(x, '=')) return expected(x, "'<=' in an iota replica group list");
        x->p++;
        int64_t dims[OT_MAX_RANK], perm[OT_MAX_RANK];
        int nd = 0, np = 0;
        OT_CHECK(expect_char(x, '['));
        for (;;) {
            if (nd >= OT_MAX_RANK) return perr(x, x->p, OT_ERR_INVALID_ARGUMENT, "too many dims");
            OT_CHECK(parse_int(x, &dims[nd++]));
            if (accept(x, ']')) break;
            OT_CHECK(x->err);
            OT_CHECK(expect_char(x, ','));
        }
        if (at_char(x, 'T')) {
            x->p++;
            OT_CHECK(expect_char(x, '('));
            for (;;) {
                if (np >= OT_MAX_RANK)
                    return perr(x, x->p, OT_ERR_INVALID_ARGUMENT, "too many dims");
                OT_CHECK(parse_int(x, &perm[np++]));
                if (accept(x, ')')) break;
                OT_CHECK(x->err);
                OT_CHECK(expect_char(x, ','));
            }
        }
        const ot_replica_groups *r = ot_replica_groups_iota(x->m, g, sz, dims, nd, perm, np);
        if (!r) {
            ot_status s = ot_module_status(x->m);
            x->m->err = OT_OK;
            return pwrap(x, at, s, NULL);
        }
        *out = r;
        return OT_OK;
    }
    OT_CHECK(expect_char(x, '{'));
    int64_t gcap = 8, icap = 16, ng = 0, ni = 0;
    int64_t *sizes = ot_malloc((size_t)gcap * sizeof *sizes);
    int64_t *ids = ot_malloc((size_t)icap * sizeof *ids);
    ot_status s = OT_OK;
    if (!sizes || !ids) s = oom(x);
    if (s == OT_OK && !accept(x, '}')) {
        for (;;) {
            if (ng == gcap) {
                int64_t *n2 = ot_realloc(sizes, (size_t)(gcap *= 2) * sizeof *n2);
                if (!n2) {
                    s = oom(x);
                    break;
                }
                sizes = n2;
            }
            int64_t before = ni;
            if ((s = expect_char(x, '{')) != OT_OK) break;
            if (!accept(x, '}')) {
                for (;;) {
                    if (ni == icap) {
                        int64_t *n2 = ot_realloc(ids, (size_t)(icap *= 2) * sizeof *n2);
                        if (!n2) {
                            s = oom(x);
                            break;
                        }
                        ids = n2;
                    }
                    if ((s = parse_int(x, &ids[ni])) != OT_OK) break;
                    ni++;
                    if (accept(x, '}')) break;
                    if ((s = expect_char(x, ',')) != OT_OK) break;
                }
                if (s != OT_OK) break;
            }
            sizes[ng++] = ni - before;
            if (accept(x, '}')) break;
            if ((s = expect_char(x, ',')) != OT_OK) break;
        }
    }
    if (s == OT_OK) s = x->err;
    if (s == OT_OK) {
        const ot_replica_groups *r = ot_replica_groups_make(x->m, ng, sizes, ids);
        if (!r) {
            s = ot_module_status(x->m);
            x->m->err = OT_OK;
            s = pwrap(x, at, s, NULL);
        }
        *out = r;
    }
    ot_free(sizes);
    ot_free(ids);
    return s;
}

static ot_status parse_pairs(P *x, const int64_t **out, int *nout) {
    OT_CHECK(expect_char(x, '{'));
    int cap = 8, n = 0;
    int64_t *pr = ir_alloc(x->m, (size_t)cap * 2 * sizeof *pr);
    if (!pr) return oom(x);
    if (!accept(x, '}')) {
        OT_CHECK(x->err);
        for (;;) {
            if (n == cap) {
                int64_t *np = ir_alloc(x->m, (size_t)cap * 4 * sizeof *np);
                if (!np) return oom(x);
                memcpy(np, pr, (size_t)n * 2 * sizeof *np);
                pr = np;
                cap *= 2;
            }
            OT_CHECK(expect_char(x, '{'));
            OT_CHECK(parse_int(x, &pr[2 * n]));
            OT_CHECK(expect_char(x, ','));
            OT_CHECK(parse_int(x, &pr[2 * n + 1]));
            OT_CHECK(expect_char(x, '}'));
            n++;
            if (accept(x, '}')) break;
            OT_CHECK(x->err);
            OT_CHECK(expect_char(x, ','));
        }
    }
    *out = pr;
    *nout = n;
    return OT_OK;
}

/* Records attribute name s; an error when it was given before. Every accepted name is a distinct
 * known one, so the table cannot fill up without a duplicate. */
static ot_status note_attr_name(P *x, const char *s, size_t n, const char **seen, size_t *seen_len,
                                int *nseen, int cap, const char *kind) {
    for (int k = 0; k < *nseen; k++)
        if (seen_len[k] == n && !memcmp(seen[k], s, n))
            return perr(x, s, OT_ERR_INVALID_ARGUMENT, "%s '%.*s' is given twice", kind, (int)n, s);
    if (*nseen == cap) return perr(x, s, OT_ERR_INVALID_ARGUMENT, "more than %d %ss", cap, kind);
    seen[*nseen] = s;
    seen_len[(*nseen)++] = n;
    return OT_OK;
}

static ot_status parse_metadata(P *x, const ot_metadata **out) {
    ot_metadata *md = ir_alloc(x->m, sizeof *md);
    if (!md) return oom(x);
    memset(md, 0, sizeof *md);
    OT_CHECK(expect_char(x, '{'));
    const char *seen[32];
    size_t seen_len[32];
    int nseen = 0;
    while (!accept(x, '}')) {
        OT_CHECK(x->err);
        const char *s;
        size_t n;
        OT_CHECK(ident(x, &s, &n, "a metadata field"));
        OT_CHECK(note_attr_name(x, s, n, seen, seen_len, &nseen, 32, "metadata field"));
        OT_CHECK(expect_char(x, '='));
        if (word_is(s, n, "op_type")) {
            OT_CHECK(parse_string(x, &md->op_type));
        } else if (word_is(s, n, "op_name")) {
            OT_CHECK(parse_string(x, &md->op_name));
        } else if (word_is(s, n, "source_file")) {
            OT_CHECK(parse_string(x, &md->source_file));
        } else if (word_is(s, n, "source_line")) {
            OT_CHECK(parse_int(x, &md->source_line));
        } else {
            const char *vs;
            size_t vn;
            OT_CHECK(skip_value(x, &vs, &vn)); /* other fields are not kept */
        }
    }
    *out = md;
    return OT_OK;
}

/* What the attributes of one instruction collect before finish_attrs moves it into the pending
 * record: the dimension numbers under construction, the called computations by slot, which of
 * the op's schema rows were given. */
typedef struct attr_state {
    ot_dot_dims *dot;
    ot_gather_dims *gather;
    ot_scatter_dims *scatter;
    ot_computation *comp[2];
    bool has_comp[2];
    ot_computation **list; /* COMP_LIST */
    int nlist;
    bool has_list;
    uint64_t given;   /* bit k: row k of ir_attr_op_rows(op) was given */
    const char *name; /* the attribute being read */
    size_t name_len;
    int nraw, raw_cap;
    /* names given so far: a second one is an error, as in XLA (it would silently win) */
    const char *seen[96];
    size_t seen_len[96];
    int nseen;
} attr_state;

static ot_status not_for(P *x, const char *at, const char *s, size_t n, ot_opcode op) {
    return perr(x, at, OT_ERR_INVALID_ARGUMENT, "attribute '%.*s' does not apply to %s", (int)n, s,
                ot_opcode_name(op));
}

/* The struct row r writes into: the pending attributes, or the dimension numbers it belongs to
 * (allocated on first use). NULL when out of memory. */
static char *row_target(P *x, pend *d, attr_state *st, const ir_attr_row *r) {
    switch (r->field) {
    case IR_F_DOT:
        if (!st->dot && (st->dot = ir_alloc(x->m, sizeof *st->dot)) != NULL) {
            memset(st->dot, 0, sizeof *st->dot);
            st->dot->nbatch = st->dot->ncontract = -1; /* not given yet */
        }
        return (char *)st->dot;
    case IR_F_GATHER:
        if (!st->gather && (st->gather = ir_alloc(x->m, sizeof *st->gather)) != NULL)
            memset(st->gather, 0, sizeof *st->gather);
        return (char *)st->gather;
    case IR_F_SCATTER:
        if (!st->scatter && (st->scatter = ir_alloc(x->m, sizeof *st->scatter)) != NULL)
            memset(st->scatter, 0, sizeof *st->scatter);
        return (char *)st->scatter;
    default: return (char *)&d->attrs;
    }
}

static void store_ptr(char *base, const ir_attr_row *r, const void *p) {
    memcpy(base + r->off, &p, sizeof p);
}

/* One parser per attribute kind: the value after "name=", into the row's field. at: where the
 * attribute starts (for messages). */
typedef ot_status (*attr_parser)(P *x, pend *d, attr_state *st, const ir_attr_row *r,
                                 const char *at, char *base);

static ot_status pa_int(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                        char *base) {
    (void)d, (void)st;
    int64_t v;
    OT_CHECK(parse_int(x, &v));
    if (v < r->lo || v > r->hi)
        return r->hi == INT64_MAX
                   ? perr(x, at, OT_ERR_INVALID_ARGUMENT, "negative %s", r->name)
                   : perr(x, at, OT_ERR_INVALID_ARGUMENT, "%s out of range", r->name);
    ir_attr_store_int(base + r->off, r->size, v);
    return OT_OK;
}

static ot_status pa_bool(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                         char *base) {
    (void)d, (void)st, (void)at;
    bool v = false;
    OT_CHECK(parse_bool(x, &v));
    ir_attr_store_int(base + r->off, r->size, v);
    return OT_OK;
}

static ot_status pa_enum(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                         char *base) {
    (void)d, (void)st, (void)at;
    const char *w;
    size_t wn;
    OT_CHECK(ident(x, &w, &wn, r->what));
    for (int k = r->first; k < r->nnames; k++)
        if (word_is(w, wn, r->names[k])) {
            ir_attr_store_int(base + r->off, r->size, k);
            return OT_OK;
        }
    return perr(x, w, OT_ERR_INVALID_ARGUMENT, r->bad, (int)wn, w);
}

static ot_status pa_precision(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                              char *base) {
    (void)d, (void)st, (void)at;
    ot_precision *prec = (ot_precision *)(base + r->off);
    OT_CHECK(expect_char(x, '{'));
    int k = 0;
    while (!accept(x, '}')) {
        OT_CHECK(x->err);
        if (k) OT_CHECK(expect_char(x, ','));
        const char *w;
        size_t wn;
        OT_CHECK(ident(x, &w, &wn, r->what));
        int p = -1;
        for (int j = 0; j < r->nnames; j++)
            if (wn == strlen(r->names[j]) && !strncasecmp(w, r->names[j], wn)) p = j;
        if (p < 0) return perr(x, w, OT_ERR_INVALID_ARGUMENT, r->bad, (int)wn, w);
        if (k >= 2) return perr(x, w, OT_ERR_INVALID_ARGUMENT, "%s has 2 entries", r->name);
        prec[k++] = (ot_precision)p;
    }
    ir_attr_store_int(base + r->count_off, sizeof(int), k);
    return OT_OK;
}

static ot_status pa_dims(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                         char *base) {
    (void)d, (void)st, (void)at;
    int k;
    if (r->field == IR_F_DIMS) { /* a list of its own in the module */
        int64_t dims[OT_MAX_RANK];
        OT_CHECK(parse_int_list(x, dims, OT_MAX_RANK, &k, r->what));
        const int64_t *p = ir_memdup(x->m, dims, sizeof dims);
        if (!p) return oom(x);
        store_ptr(base, r, p);
    } else { /* an array in the dimension numbers */
        OT_CHECK(parse_int_list(x, (int64_t *)(base + r->off), OT_MAX_RANK, &k, r->what));
    }
    if (!(r->flags & IR_AF_COUNT_SHARED)) ir_attr_store_int(base + r->count_off, sizeof(int), k);
    return OT_OK;
}

static ot_status pa_dims_pair(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                              char *base) {
    (void)d, (void)st;
    int64_t dims[OT_MAX_RANK];
    int k;
    OT_CHECK(parse_int_list(x, dims, OT_MAX_RANK, &k, "dimension list"));
    int cnt = (int)ir_attr_load_int(base + r->count_off, sizeof(int));
    if (cnt >= 0 && cnt != k)
        return perr(x, at, OT_ERR_INVALID_ARGUMENT,
                    "lhs and rhs %s dimension lists differ in length", r->what);
    ir_attr_store_int(base + r->count_off, sizeof(int), k);
    memcpy(base + r->off, dims, (size_t)k * sizeof *dims);
    return OT_OK;
}

static ot_status pa_dim(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                        char *base) {
    (void)st;
    int64_t dims[OT_MAX_RANK];
    int k;
    OT_CHECK(parse_int_list(x, dims, OT_MAX_RANK, &k, r->name));
    if (k != 1 && !(r->lo < 0 && k == 0))
        return perr(x, at, OT_ERR_INVALID_ARGUMENT, "%s takes one dimension, got %d",
                    ot_opcode_name(d->op), k);
    ir_attr_store_int(base + r->off, r->size, k ? dims[0] : r->def);
    return OT_OK;
}

static ot_status pa_slice(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                          char *base) {
    (void)st, (void)at;
    ot_slice_dim *sd = NULL;
    OT_CHECK(parse_slice(x, d->shape.kind == OT_IR_ARRAY ? d->shape.array.rank : 0, &sd));
    store_ptr(base, r, sd);
    return OT_OK;
}

static ot_status pa_padding(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                            char *base) {
    (void)st;
    int rank = d->shape.kind == OT_IR_ARRAY ? d->shape.array.rank : 0;
    int64_t v[OT_MAX_RANK][3];
    int k;
    OT_CHECK(x_list(x, 3, v, &k, "padding"));
    if (k != rank && !(rank == 0 && k == 1))
        return perr(x, at, OT_ERR_INVALID_ARGUMENT, "padding has %d dimensions, the rank is %d", k,
                    rank);
    ot_pad_dim *pd = ir_alloc(x->m, (size_t)(k ? k : 1) * sizeof *pd);
    if (!pd) return oom(x);
    for (int i = 0; i < k; i++) pd[i] = (ot_pad_dim){v[i][0], v[i][1], v[i][2]};
    store_ptr(base, r, pd);
    return OT_OK;
}

static ot_status pa_window(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                           char *base) {
    (void)d, (void)st, (void)at;
    ot_window *w = NULL;
    OT_CHECK(parse_window(x, &w));
    store_ptr(base, r, w);
    return OT_OK;
}

static ot_status pa_dim_labels(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                               char *base) {
    (void)d, (void)st, (void)at;
    ot_conv_dims *cd = NULL;
    OT_CHECK(parse_dim_labels(x, &cd));
    store_ptr(base, r, cd);
    return OT_OK;
}

static ot_status pa_groups(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                           char *base) {
    (void)d, (void)st, (void)at;
    const ot_replica_groups *g = NULL;
    OT_CHECK(parse_replica_groups(x, &g));
    store_ptr(base, r, g);
    return OT_OK;
}

static ot_status pa_pairs(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                          char *base) {
    (void)d, (void)st, (void)at;
    const int64_t *pr = NULL;
    int n = 0;
    OT_CHECK(parse_pairs(x, &pr, &n));
    store_ptr(base, r, pr);
    ir_attr_store_int(base + r->count_off, sizeof(int), n);
    return OT_OK;
}

static ot_status pa_string(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                           char *base) {
    (void)d, (void)st, (void)at;
    const char *v = NULL;
    OT_CHECK(parse_string(x, &v));
    store_ptr(base, r, v);
    return OT_OK;
}

static ot_status pa_config(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                           char *base) {
    OT_CHECK(skip_ws(x));
    if (at_char(x, '"')) return pa_string(x, d, st, r, at, base);
    const char *vs;
    size_t vn;
    OT_CHECK(skip_value(x, &vs, &vn));
    const char *v = ir_strndup(x->m, vs, vn);
    if (!v) return oom(x);
    store_ptr(base, r, v);
    return OT_OK;
}

static ot_status pa_comp(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                         char *base) {
    (void)d, (void)at, (void)base;
    st->has_comp[r->slot] = true;
    return comp_ref(x, &st->comp[r->slot]);
}

static ot_status pa_comp_list(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                              char *base) {
    (void)d, (void)r, (void)at, (void)base;
    st->has_list = true;
    return comp_list(x, &st->list, &st->nlist);
}

static ot_status pa_metadata(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                             char *base) {
    (void)st, (void)r, (void)at, (void)base;
    return parse_metadata(x, &d->md);
}

static ot_status pa_raw(P *x, pend *d, attr_state *st, const ir_attr_row *r, const char *at,
                        char *base) {
    (void)r, (void)at, (void)base;
    const char *s = st->name, *vs;
    size_t n = st->name_len, vn;
    OT_CHECK(skip_value(x, &vs, &vn));
    if (st->nraw == st->raw_cap) {
        int ncap = st->raw_cap ? st->raw_cap * 2 : 4;
        ot_raw_attr *nr = ir_alloc(x->m, (size_t)ncap * sizeof *nr);
        if (!nr) return oom(x);
        if (st->nraw) memcpy(nr, d->raw, (size_t)st->nraw * sizeof *nr);
        d->raw = nr;
        st->raw_cap = ncap;
    }
    d->raw[st->nraw].name = ir_strndup(x->m, s, n);
    d->raw[st->nraw].value = ir_strndup(x->m, vs, vn);
    if (!d->raw[st->nraw].name || !d->raw[st->nraw].value) return oom(x);
    st->nraw++;
    d->nraw = st->nraw;
    return OT_OK;
}

static const attr_parser attr_parsers[] = {
    [IR_AK_INT] = pa_int,
    [IR_AK_BOOL] = pa_bool,
    [IR_AK_ENUM] = pa_enum,
    [IR_AK_PRECISION] = pa_precision,
    [IR_AK_DIMS] = pa_dims,
    [IR_AK_DIMS_PAIR] = pa_dims_pair,
    [IR_AK_DIM] = pa_dim,
    [IR_AK_SLICE] = pa_slice,
    [IR_AK_PADDING] = pa_padding,
    [IR_AK_WINDOW] = pa_window,
    [IR_AK_DIM_LABELS] = pa_dim_labels,
    [IR_AK_GROUPS] = pa_groups,
    [IR_AK_PAIRS] = pa_pairs,
    [IR_AK_STRING] = pa_string,
    [IR_AK_CONFIG] = pa_config,
    [IR_AK_COMP] = pa_comp,
    [IR_AK_COMP_LIST] = pa_comp_list,
    [IR_AK_METADATA] = pa_metadata,
    [IR_AK_RAW] = pa_raw,
};

/* Sets the fields whose default is not zero (the pending record starts zeroed). */
static void attr_defaults(pend *d) {
    int nr;
    const uint8_t *rows = ir_attr_op_rows(d->op, &nr);
    for (int k = 0; k < nr; k++) {
        const ir_attr_row *r = &ir_attr_rows[rows[k]];
        if (r->def && r->field < IR_F_COUNT)
            ir_attr_store_int((char *)&d->attrs + r->off, r->size, r->def);
    }
}

/* One "name=value" attribute: the op's schema row for the name, then that kind's parser. */
static ot_status parse_attr(P *x, pend *d, attr_state *st) {
    const char *s, *at = (skip_ws(x), x->p);
    size_t n;
    OT_CHECK(ident(x, &s, &n, "an attribute name"));
    OT_CHECK(note_attr_name(x, s, n, st->seen, st->seen_len, &st->nseen,
                            (int)(sizeof st->seen / sizeof st->seen[0]), "attribute"));
    OT_CHECK(expect_char(x, '='));
    int pos;
    const ir_attr_row *r = ir_attr_lookup(d->op, s, n, &pos);
    if (!r) {
        const ir_attr_row *any = ir_attr_lookup_any(s, n);
        if (any && !(any->flags & IR_AF_UNKNOWN_ELSEWHERE)) return not_for(x, at, s, n, d->op);
        return perr(x, at, OT_ERR_INVALID_ARGUMENT, "unknown attribute '%.*s' for %s", (int)n, s,
                    ot_opcode_name(d->op));
    }
    st->given |= UINT64_C(1) << pos;
    st->name = s;
    st->name_len = n;
    char *base = row_target(x, d, st, r);
    if (!base) return oom(x);
    return attr_parsers[r->kind](x, d, st, r, at, base);
}

/* Whether the op's attribute `name` was given. */
static bool given(const attr_state *st, ot_opcode op, const char *name) {
    int pos;
    return ir_attr_lookup(op, name, strlen(name), &pos) && (st->given >> pos & 1);
}

/* XLA's CPU pipeline rewrites a sort + slice that computes a top-k into custom-call "TopK"
 * (xla/service/topk_rewriter.cc), so its optimized modules hold it: one operand [batch,] n, the
 * result (values [batch,] k, s32 indices [batch,] k), the sort's comparator attached. Its runtime
 * (xla/service/cpu/runtime_topk.cc) takes the k largest of each row in total order
 * (-NaN < -Inf < -0 < +0 < +Inf < +NaN), ties to the lower index, whatever the comparator; the
 * rewriter attaches only greater-than comparators. That is the topk op with largest=true, which
 * the pending record becomes here (one op, one kernel, its fast path included). Anything else
 * named "TopK" is refused rather than guessed at. */
static ot_status topk_custom_call(P *x, pend *d) {
    const char *at = d->op_at;
    const ot_ir_shape *s = &d->shape;
    if (d->nops != 1)
        return perr(x, at, OT_ERR_INVALID_ARGUMENT,
                    "custom-call \"TopK\" takes one operand, not %d", d->nops);
    if (s->kind != OT_IR_TUPLE || s->ntuple != 2 || s->tuple[0].kind != OT_IR_ARRAY ||
        s->tuple[1].kind != OT_IR_ARRAY || s->tuple[0].array.rank < 1 ||
        s->tuple[1].array.dtype != OT_S32)
        return perr(x, at, OT_ERR_INVALID_ARGUMENT,
                    "custom-call \"TopK\" must return (values[..., k], s32[..., k])");
    if (d->ncalled > 1)
        return perr(x, at, OT_ERR_INVALID_ARGUMENT,
                    "custom-call \"TopK\" takes one comparator, not %d", d->ncalled);
    if (d->ncalled == 1) {
        const ot_instr *r = d->called[0] ? d->called[0]->root : NULL;
        if (!r || r->opcode != OT_OP_COMPARE || r->attrs->cmp_dir != OT_CMP_GT)
            return perr(x, at, OT_ERR_UNIMPLEMENTED,
                        "custom-call \"TopK\": only a greater-than comparator (the k largest) is "
                        "supported; %s's root is not a GT compare",
                        d->called[0] ? d->called[0]->name : "the comparator");
    }
    const ot_shape *v = &s->tuple[0].array;
    ot_attrs a;
    memset(&a, 0, sizeof a);
    a.index = v->dims[v->rank - 1];
    a.largest = true;
    a.backend_config = d->attrs.backend_config;
    d->attrs = a;
    d->op = OT_OP_TOPK;
    d->called = NULL;
    d->ncalled = 0;
    return OT_OK;
}

/* Moves the collected called computations and dimension numbers into the pending record,
 * checking what each op needs. */
static ot_status finish_attrs(P *x, pend *d, attr_state *st) {
    ot_opcode op = d->op;
    const char *at = d->op_at;
    int n = 0;
    switch (op) {
    case OT_OP_REDUCE:
    case OT_OP_REDUCE_WINDOW:
    case OT_OP_SCATTER:
    case OT_OP_MAP:
    case OT_OP_CALL:
    case OT_OP_SORT:
    case OT_OP_ALL_REDUCE:
    case OT_OP_REDUCE_SCATTER:
    case OT_OP_FUSION:
        if (!st->has_comp[0])
            return perr(x, at, OT_ERR_INVALID_ARGUMENT, "%s needs %s=", ot_opcode_name(op),
                        op == OT_OP_FUSION ? "calls" : "to_apply");
        n = 1;
        break;
    case OT_OP_WHILE:
        if (!st->has_comp[0] || !st->has_comp[1])
            return perr(x, at, OT_ERR_INVALID_ARGUMENT, "while needs condition= and body=");
        n = 2;
        break;
    case OT_OP_SELECT_AND_SCATTER:
        if (!st->has_comp[0] || !st->has_comp[1])
            return perr(x, at, OT_ERR_INVALID_ARGUMENT,
                        "select-and-scatter needs select= and scatter=");
        n = 2;
        break;
    case OT_OP_CONDITIONAL:
        if (st->has_list) {
            if (st->has_comp[0] || st->has_comp[1])
                return perr(x, at, OT_ERR_INVALID_ARGUMENT,
                            "conditional: give branch_computations or true/false_computation");
            d->called = st->list;
            d->ncalled = st->nlist;
            break;
        }
        if (!st->has_comp[0] || !st->has_comp[1])
            return perr(x, at, OT_ERR_INVALID_ARGUMENT,
                        "conditional needs branch_computations= or true_computation= and "
                        "false_computation=");
        n = 2;
        break;
    case OT_OP_CUSTOM_CALL:
        if (st->has_list) {
            d->called = st->list;
            d->ncalled = st->nlist;
        }
        if (d->attrs.custom_call_target && !strcmp(d->attrs.custom_call_target, "TopK"))
            return topk_custom_call(x, d);
        break;
    default: break;
    }
    if (n) {
        d->called = ir_memdup(x->m, st->comp, (size_t)n * sizeof *st->comp);
        if (!d->called) return oom(x);
        d->ncalled = n;
    }
    if (op == OT_OP_DOT) {
        if (!st->dot) {
            return perr(x, at, OT_ERR_INVALID_ARGUMENT,
                        "dot needs lhs_contracting_dims= and rhs_contracting_dims=");
        }
        if (st->dot->nbatch < 0) st->dot->nbatch = 0;
        if (st->dot->ncontract < 0) st->dot->ncontract = 0;
        d->attrs.dot = st->dot;
    }
    if (op == OT_OP_GATHER) {
        if (!st->gather || !given(st, op, "index_vector_dim"))
            return perr(x, at, OT_ERR_INVALID_ARGUMENT,
                        "gather needs its dimension numbers (offset_dims=, collapsed_slice_dims=, "
                        "start_index_map=, index_vector_dim=, slice_sizes=)");
        d->attrs.gather = st->gather;
    }
    if (op == OT_OP_SCATTER) {
        if (!st->scatter || !given(st, op, "index_vector_dim"))
            return perr(x, at, OT_ERR_INVALID_ARGUMENT,
                        "scatter needs its dimension numbers (update_window_dims=, "
                        "inserted_window_dims=, scatter_dims_to_operand_dims=, index_vector_dim=)");
        d->attrs.scatter = st->scatter;
    }
    int nr;
    const uint8_t *rows = ir_attr_op_rows(op, &nr);
    for (int k = 0; k < nr; k++) {
        const ir_attr_row *r = &ir_attr_rows[rows[k]];
        if ((r->flags & IR_AF_REQUIRED) && !(st->given >> k & 1))
            return perr(x, at, OT_ERR_INVALID_ARGUMENT, "%s needs %s=", ot_opcode_name(op),
                        r->name);
    }
    return OT_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Instructions
 * ------------------------------------------------------------------------------------------- */

/* s: the written shape (NULL: parse it again from r->shape_at). */
static ot_status check_operand_shape(P *x, const ref *r, const ot_ir_shape *s, const ot_instr *o,
                                     int k, ot_opcode op) {
    if (!r->shape_at) return OT_OK;
    ot_ir_shape again;
    if (!s) {
        const char *save = x->p;
        x->p = r->shape_at;
        ot_status st = parse_shape(x, x->scratch, &again, 0);
        x->p = save;
        OT_CHECK(st);
        s = &again;
    }
    if (!ot_ir_shape_equal(s, &o->shape)) {
        char a[256], b[256];
        ot_ir_shape_format(s, a, sizeof a);
        ot_ir_shape_format(&o->shape, b, sizeof b);
        return perr(x, r->shape_at, OT_ERR_SHAPE_MISMATCH,
                    "operand %d of %s is written as %s but %s is %s", k, ot_opcode_name(op), a,
                    o->name, b);
    }
    return OT_OK;
}

/* The instruction named nm in the computation being parsed, or NULL. */
static ot_instr *find_instr(P *x, const char *nm, size_t n) {
    if (x->recent) {
        const uint64_t h = ir_hash_bytes(nm, n);
        const struct recent_slot *r = &x->recent[h & (RECENT_SLOTS - 1)];
        const ot_instr *i = r->i;
        if (i && r->h == h && i->parent == x->c && strncmp(i->name, nm, n) == 0 &&
            i->name[n] == '\0')
            return r->i;
    }
    return ir_names_get(x->c->names_, nm, n);
}

static void note_built(P *x, ot_instr *i, size_t nlen) {
    if (!x->recent) return;
    uint64_t h = ir_hash_bytes(i->name, nlen);
    x->recent[h & (RECENT_SLOTS - 1)] = (struct recent_slot){h, i};
}

static ot_status build_pend(P *x, pend *d) {
    if (d->nops > x->ops_cap) {
        int ncap = d->nops * 2;
        ot_instr **no = ot_realloc(x->ops, (size_t)ncap * sizeof *no);
        if (!no) return oom(x);
        x->ops = no;
        x->ops_cap = ncap;
    }
    for (int k = 0; k < d->nops; k++) {
        const ref *r = &x->refs[d->ops_off + k];
        ot_instr *o = r->resolved ? r->resolved : find_instr(x, r->name, r->len);
        if (!o)
            return perr(x, r->at, OT_ERR_NOT_FOUND, "unknown instruction '%.*s' in %s", (int)r->len,
                        r->name, x->c->name);
        OT_CHECK(check_operand_shape(x, r, NULL, o, k, d->op));
        x->ops[k] = o;
    }
    /* hints: dtype-only where the declared shape is checked against the inferred one */
    ot_instr *i;
    ot_status s = ir_create(x->c, d->op, x->ops, d->nops, &d->attrs, d->called, d->ncalled,
                            &d->shape, d->name, d->nlen, 0, &i);
    if (s == OT_ERR_ALREADY_EXISTS && strstr(ot_last_error(), "instruction name"))
        return perr(x, d->at, s, "instruction name '%s' is already used in %s", d->name,
                    x->c->name);
    if (s != OT_OK) {
        char what[300];
        snprintf(what, sizeof what, "%.*s", (int)(d->nlen > 200 ? 200 : d->nlen), d->name);
        return pwrap(x, d->op_at, s, what);
    }
    i->metadata = d->md;
    i->raw = d->raw;
    i->nraw = d->nraw;
    d->built = i;
    d->state = 2;
    note_built(x, i, d->nlen);
    return OT_OK;
}

/* Builds deferred instructions in dependency order when the computation closes. */
static ot_status resolve_deferred(P *x) {
    int64_t *stack = NULL;
    int64_t cap = 0;
    ot_status s = OT_OK;
    for (int64_t k = 0; k < x->npend && s == OT_OK; k++) {
        if (x->pend[k].state == 2) continue;
        int64_t sp = 0;
        if (cap < 16) {
            cap = 16;
            stack = ot_realloc(stack, (size_t)cap * sizeof *stack);
            if (!stack) return oom(x);
        }
        stack[sp++] = k;
        x->pend[k].state = 1;
        while (sp && s == OT_OK) {
            pend *d = &x->pend[stack[sp - 1]];
            int64_t next = -1;
            for (int j = 0; j < d->nops && next < 0; j++) {
                const ref *r = &x->refs[d->ops_off + j];
                if (r->resolved || ir_names_get(x->c->names_, r->name, r->len)) continue;
                intptr_t pi = (intptr_t)ir_names_get(&x->pend_names, r->name, r->len);
                if (!pi) {
                    s = perr(x, r->at, OT_ERR_NOT_FOUND, "unknown instruction '%.*s' in %s",
                             (int)r->len, r->name, x->c->name);
                    break;
                }
                pend *o = &x->pend[pi - 1];
                if (o->state == 1) {
                    s = perr(x, r->at, OT_ERR_INVALID_ARGUMENT,
                             "cycle: %s and %.*s depend on each other", d->name, (int)r->len,
                             r->name);
                    break;
                }
                next = pi - 1;
            }
            if (s != OT_OK) break;
            if (next >= 0) {
                if (sp == cap) {
                    int64_t *ns = ot_realloc(stack, (size_t)(cap *= 2) * sizeof *ns);
                    if (!ns) {
                        s = oom(x);
                        break;
                    }
                    stack = ns;
                }
                x->pend[next].state = 1;
                stack[sp++] = next;
            } else {
                s = build_pend(x, d);
                sp--;
            }
        }
    }
    ot_free(stack);
    return s;
}

static ot_status grow_pend(P *x) {
    if (x->npend < x->pend_cap) return OT_OK;
    int64_t ncap = x->pend_cap ? x->pend_cap * 2 : 64;
    pend *np = ot_realloc(x->pend, (size_t)ncap * sizeof *np);
    if (!np) return oom(x);
    x->pend = np;
    x->pend_cap = ncap;
    return OT_OK;
}

static ot_status grow_refs(P *x) {
    if (x->nrefs < x->refs_cap) return OT_OK;
    int64_t ncap = x->refs_cap ? x->refs_cap * 2 : 256;
    ref *nr = ot_realloc(x->refs, (size_t)ncap * sizeof *nr);
    if (!nr) return oom(x);
    x->refs = nr;
    x->refs_cap = ncap;
    return OT_OK;
}

/* Parses one instruction line. *root is set when it is marked ROOT; *last receives the pending
 * index of the instruction (or -1 when it was built at once: *built then). */
static ot_status parse_instr(P *x, bool *is_root, ot_instr **built, int64_t *pidx) {
    *is_root = false;
    *built = NULL;
    *pidx = -1;
    if (peek_word(x, "ROOT")) {
        x->p += 4;
        *is_root = true;
    }
    OT_CHECK(grow_pend(x));
    pend *d = &x->pend[x->npend];
    memset(d, 0, sizeof *d);
    OT_CHECK(skip_ws(x));
    d->at = x->p;
    const char *nm;
    size_t nn;
    OT_CHECK(ident(x, &nm, &nn, "an instruction name"));
    if (x->pend_names.n && ir_names_get(&x->pend_names, nm, nn))
        return perr(x, nm, OT_ERR_ALREADY_EXISTS, "instruction name '%.*s' is already used in %s",
                    (int)nn, nm, x->c->name);
    d->name = nm;
    d->nlen = nn;
    ir_names_prefetch(x->c->names_, nm, nn); /* the insert at the end of the line will hit */
    OT_CHECK(expect_char(x, '='));
    OT_CHECK(parse_shape(x, x->m->arena, &d->shape, 0));
    OT_CHECK(skip_ws(x));
    d->op_at = x->p;
    const char *os;
    size_t on;
    OT_CHECK(ident(x, &os, &on, "an opcode"));
    d->op = ot_opcode_from_name(os, on);
    if (d->op == OT_OP_INVALID) {
        if (ot_opcode_is_known_hlo(os, on))
            return perr(x, os, OT_ERR_UNIMPLEMENTED, "opcode '%.*s' is not supported", (int)on, os);
        return perr(x, os, OT_ERR_INVALID_ARGUMENT, "unknown opcode '%.*s'", (int)on, os);
    }
    OT_CHECK(expect_char(x, '('));
    int64_t ops_off = x->nrefs;
    int nops = 0;
    bool deferred = false;
    if (d->op == OT_OP_PARAMETER) {
        OT_CHECK(parse_int(x, &d->attrs.index));
        OT_CHECK(expect_char(x, ')'));
    } else if (d->op == OT_OP_CONSTANT) {
        ot_literal *l = NULL;
        OT_CHECK(parse_literal(x, &d->shape, &l));
        d->attrs.literal = l;
    } else if (!accept(x, ')')) {
        OT_CHECK(x->err);
        for (;;) {
            OT_CHECK(grow_refs(x));
            ref *r = &x->refs[x->nrefs];
            OT_CHECK(skip_ws(x));
            r->at = x->p;
            r->shape_at = NULL;
            r->resolved = NULL;
            ot_ir_shape tmp;
            /* an operand shape: "(" or a type name followed by "[" */
            const char *q = x->p;
            if (q < x->end && *q == '%') q++;
            const char *qs = q;
            while (q < x->end && is_ident_char(*q)) q++;
            if (x->p < x->end && (*x->p == '(' || (q > qs && q < x->end && *q == '['))) {
                r->shape_at = x->p;
                OT_CHECK(parse_shape(x, x->scratch, &tmp, 0));
            }
            OT_CHECK(ident(x, &r->name, &r->len, "an operand name"));
            r->resolved = find_instr(x, r->name, r->len);
            if (!r->resolved) {
                deferred = true;
            } else if (r->shape_at) { /* check the written operand shape now */
                OT_CHECK(check_operand_shape(x, r, &tmp, r->resolved, nops, d->op));
                r->shape_at = NULL;
            }
            x->nrefs++;
            nops++;
            if (nops > (1 << 24))
                return perr(x, r->at, OT_ERR_INVALID_ARGUMENT, "too many operands");
            if (accept(x, ')')) break;
            OT_CHECK(x->err);
            OT_CHECK(expect_char(x, ','));
        }
    }
    d->nops = nops;
    d->ops_off = ops_off;
    /* attributes */
    attr_defaults(d);
    attr_state st;
    memset(&st, 0, sizeof st);
    while (accept(x, ',')) OT_CHECK(parse_attr(x, d, &st));
    OT_CHECK(x->err);
    OT_CHECK(finish_attrs(x, d, &st));
    d->name = ir_strndup(x->m, nm, nn);
    if (!d->name) return oom(x);
    if (!deferred) {
        OT_CHECK(build_pend(x, d));
        *built = d->built;
        x->nrefs = ops_off; /* operand refs of built instructions are not kept */
        return OT_OK;
    }
    OT_CHECK(ir_names_put(&x->pend_names, d->name, (void *)(intptr_t)(x->npend + 1)));
    *pidx = x->npend++;
    return OT_OK;
}

/* '{' instructions '}' of one computation. */
static ot_status parse_body(P *x) {
    OT_CHECK(expect_char(x, '{'));
    ot_instr *root = NULL, *last = NULL;
    int64_t root_p = -1, last_p = -1;
    bool have_root = false;
    x->npend = 0;
    x->nrefs = 0;
    ir_names_free(&x->pend_names);
    /* A large body sizes its name index once instead of doubling it (and rehashing every name)
     * some twenty times: its lines up to the first one that starts with '}' bound the number of
     * instructions well enough for a hint. */
    if (x->end - x->p > (1 << 20)) {
        uint64_t lines = 0;
        for (const char *q = x->p; q && q < x->end; lines++) {
            q = memchr(q, '\n', (size_t)(x->end - q));
            if (!q || (q + 1 < x->end && q[1] == '}')) break;
            q++;
        }
        if (lines > 4096) OT_CHECK(ir_names_reserve(x->c->names_, lines));
    }
    while (!accept(x, '}')) {
        OT_CHECK(x->err);
        if (x->p >= x->end) return expected(x, "'}' closing the computation");
        bool is_root;
        ot_instr *b;
        int64_t pi;
        const char *at = x->p;
        OT_CHECK(parse_instr(x, &is_root, &b, &pi));
        if (is_root) {
            if (have_root)
                return perr(x, at, OT_ERR_INVALID_ARGUMENT, "computation %s has two ROOTs",
                            x->c->name);
            have_root = true;
            root = b;
            root_p = pi;
        }
        last = b;
        last_p = pi;
    }
    if (!last && last_p < 0)
        return perr(x, x->p, OT_ERR_INVALID_ARGUMENT, "computation %s has no instructions",
                    x->c->name);
    if (x->npend) OT_CHECK(resolve_deferred(x));
    if (have_root)
        x->c->root = root ? root : x->pend[root_p].built;
    else
        x->c->root = last ? last : x->pend[last_p].built;
    return OT_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Module
 * ------------------------------------------------------------------------------------------- */

static ot_status parse_shape_index(P *x, int64_t *out, int *n) {
    return parse_int_list(x, out, OT_MAX_RANK, n, "shape index");
}

static ot_status parse_alias(P *x) {
    OT_CHECK(expect_char(x, '{'));
    if (accept(x, '}')) return OT_OK;
    OT_CHECK(x->err);
    for (;;) {
        ot_io_alias a;
        memset(&a, 0, sizeof a);
        const char *at = (skip_ws(x), x->p);
        OT_CHECK(parse_shape_index(x, a.output_index, &a.noutput_index));
        OT_CHECK(expect_char(x, ':'));
        OT_CHECK(expect_char(x, '('));
        OT_CHECK(parse_int(x, &a.param_number));
        OT_CHECK(expect_char(x, ','));
        OT_CHECK(parse_shape_index(x, a.param_index, &a.nparam_index));
        if (accept(x, ',')) {
            const char *w;
            size_t wn;
            OT_CHECK(ident(x, &w, &wn, "may-alias or must-alias"));
            if (word_is(w, wn, "must-alias"))
                a.must_alias = true;
            else if (!word_is(w, wn, "may-alias"))
                return perr(x, w, OT_ERR_INVALID_ARGUMENT,
                            "expected may-alias or must-alias, got '%.*s'", (int)wn, w);
        }
        OT_CHECK(x->err);
        OT_CHECK(expect_char(x, ')'));
        ot_status as = ot_module_add_alias(x->m, &a);
        if (as != OT_OK) return pwrap(x, at, as, NULL);
        if (accept(x, '}')) return OT_OK;
        OT_CHECK(x->err);
        OT_CHECK(expect_char(x, ','));
    }
}

static ot_status add_module_raw(P *x, const char *s, size_t n, const char *vs, size_t vn) {
    ot_module_config *cfg = &x->m->cfg;
    ot_raw_attr *r = ir_alloc(x->m, (size_t)(cfg->nraw + 1) * sizeof *r);
    if (!r) return oom(x);
    if (cfg->nraw) memcpy(r, cfg->raw, (size_t)cfg->nraw * sizeof *r);
    r[cfg->nraw].name = ir_strndup(x->m, s, n);
    r[cfg->nraw].value = ir_strndup(x->m, vs, vn);
    if (!r[cfg->nraw].name || !r[cfg->nraw].value) return oom(x);
    cfg->raw = r;
    cfg->nraw++;
    return OT_OK;
}

/* The module attributes XLA's parser knows. Those optitpu gives no meaning are kept verbatim and
 * printed back; any other name is an error, as it is for instructions. */
static const char *const module_raw_attrs[] = {
    "is_scheduled",
    "buffer_donor",
    "alias_passthrough_params",
    "frontend_attributes",
    "allow_spmd_sharding_propagation_to_parameters",
    "allow_spmd_sharding_propagation_to_output",
};

static ot_status parse_header(P *x) {
    x->p += strlen("HloModule");
    const char *s;
    size_t n;
    OT_CHECK(ident(x, &s, &n, "the module name"));
    char *name = ir_strndup(x->m, s, n);
    if (!name) return oom(x);
    x->m->name = name;
    if (at_char(x, ':')) x->p++; /* "HloModule name:" in some dumps */
    const char *seen[16];
    size_t seen_len[16];
    int nseen = 0;
    while (accept(x, ',')) {
        const char *at = (skip_ws(x), x->p);
        OT_CHECK(ident(x, &s, &n, "a module attribute"));
        bool known = word_is(s, n, "input_output_alias") || word_is(s, n, "replica_count") ||
                     word_is(s, n, "num_partitions") || word_is(s, n, "entry_computation_layout");
        for (size_t k = 0; !known && k < sizeof module_raw_attrs / sizeof module_raw_attrs[0]; k++)
            known = word_is(s, n, module_raw_attrs[k]);
        if (!known)
            return perr(x, at, OT_ERR_INVALID_ARGUMENT, "unknown module attribute '%.*s'", (int)n,
                        s);
        OT_CHECK(note_attr_name(x, s, n, seen, seen_len, &nseen, 16, "module attribute"));
        OT_CHECK(expect_char(x, '='));
        if (word_is(s, n, "input_output_alias")) {
            OT_CHECK(parse_alias(x));
        } else if (word_is(s, n, "replica_count") || word_is(s, n, "num_partitions")) {
            int64_t v;
            OT_CHECK(parse_int(x, &v));
            if (v < 1 || v > (1 << 20))
                return perr(x, at, OT_ERR_INVALID_ARGUMENT, "%.*s %lld out of range", (int)n, s,
                            (long long)v);
            if (word_is(s, n, "replica_count"))
                x->m->cfg.replica_count = v;
            else
                x->m->cfg.num_partitions = v;
        } else {
            const char *vs;
            size_t vn;
            OT_CHECK(skip_value(x, &vs, &vn));
            if (word_is(s, n, "entry_computation_layout")) {
                x->m->cfg.entry_computation_layout = ir_strndup(x->m, vs, vn);
                if (!x->m->cfg.entry_computation_layout) return oom(x);
                x->ecl_at = vs;
                x->ecl_len = vn;
            } else {
                OT_CHECK(add_module_raw(x, s, n, vs, vn));
            }
        }
    }
    return x->err;
}

static ot_status check_layout_shape(P *x, const char *at, const ot_ir_shape *written,
                                    const ot_ir_shape *actual, const char *what, int k,
                                    const ot_instr *i) {
    if (ot_ir_shape_equal(written, actual)) return OT_OK;
    char a[256], b[256];
    ot_ir_shape_format(written, a, sizeof a);
    ot_ir_shape_format(actual, b, sizeof b);
    char w[32];
    snprintf(w, sizeof w, k >= 0 ? "%s %d" : "%s", what, k);
    return perr(x, at, OT_ERR_SHAPE_MISMATCH,
                "entry_computation_layout gives %s as %s, but the entry computation's %s (%s) "
                "is %s",
                w, a, w, i->name, b);
}

/* entry_computation_layout={(param, ...)->result}: XLA's verifier requires it to agree with the
 * entry computation's parameters and root (layouts aside); a contradiction is an error here too.
 * Parsed from its place in the text, so errors point into it. */
static ot_status check_entry_layout(P *x, const ot_computation *e) {
    if (!x->ecl_at) return OT_OK;
    const char *save_p = x->p, *save_end = x->end;
    x->p = x->ecl_at;
    x->end = x->ecl_at + x->ecl_len;
    ot_status s = OT_OK;
    int k = 0;
    ot_ir_shape sh;
    s = expect_char(x, '{');
    if (s == OT_OK) s = expect_char(x, '(');
    if (s == OT_OK && !accept(x, ')')) {
        while ((s = x->err) == OT_OK) {
            const char *at = (skip_ws(x), x->p);
            if ((s = parse_shape(x, x->scratch, &sh, 0)) != OT_OK) break;
            if (k >= e->nparams) {
                s = perr(x, at, OT_ERR_INVALID_ARGUMENT,
                         "entry_computation_layout lists more parameters than the %d of the "
                         "entry computation %s",
                         e->nparams, e->name);
                break;
            }
            if ((s = check_layout_shape(x, at, &sh, &e->params[k]->shape, "parameter", k,
                                        e->params[k])) != OT_OK)
                break;
            k++;
            if (accept(x, ')')) break;
            if ((s = expect_char(x, ',')) != OT_OK) break;
        }
    }
    if (s == OT_OK) s = x->err;
    if (s == OT_OK && k < e->nparams)
        s = perr(x, x->p, OT_ERR_INVALID_ARGUMENT,
                 "entry_computation_layout lists %d parameters, the entry computation %s has %d", k,
                 e->name, e->nparams);
    if (s == OT_OK) s = skip_ws(x);
    if (s == OT_OK && !(x->end - x->p >= 2 && x->p[0] == '-' && x->p[1] == '>'))
        s = expected(x, "'->' and the result shape");
    const char *rat = NULL;
    if (s == OT_OK) {
        x->p += 2;
        rat = (skip_ws(x), x->p);
        s = parse_shape(x, x->scratch, &sh, 0);
    }
    if (s == OT_OK) s = check_layout_shape(x, rat, &sh, &e->root->shape, "result", -1, e->root);
    if (s == OT_OK) s = expect_char(x, '}');
    if (s == OT_OK) s = skip_ws(x);
    if (s == OT_OK && x->p < x->end) s = expected(x, "the end of entry_computation_layout");
    x->p = save_p;
    x->end = save_end;
    return s;
}

static ot_status skip_preamble_section(P *x) {
    /* FileNames / FunctionNames / FileLocations / StackFrames: lines "N ..." */
    while (x->p < x->end && *x->p != '\n') x->p++;
    for (;;) {
        OT_CHECK(skip_ws(x));
        if (x->p >= x->end || !isdigit((unsigned char)*x->p)) return OT_OK;
        while (x->p < x->end && *x->p != '\n') x->p++;
    }
}

static ot_status parse_computation(P *x, ot_computation **entry) {
    bool is_entry = false;
    if (peek_word(x, "ENTRY")) {
        x->p += 5;
        is_entry = true;
    }
    const char *s, *at = (skip_ws(x), x->p);
    size_t n;
    OT_CHECK(ident(x, &s, &n, "a computation name"));
    ot_computation *c;
    ot_status cs = ir_add_computation(x->m, s, n, &c);
    if (cs == OT_OK) cs = ir_comp_names(c, 0); /* the parser resolves operands by name */
    if (cs != OT_OK) return pwrap(x, at, cs, NULL);
    x->c = c;
    OT_CHECK(skip_ws(x));
    if (at_char(x, '(')) { /* signature: names and shapes are implied by the parameters */
        const char *vs;
        size_t vn;
        OT_CHECK(skip_value(x, &vs, &vn));
    }
    OT_CHECK(skip_ws(x));
    if (x->end - x->p >= 2 && x->p[0] == '-' && x->p[1] == '>') {
        x->p += 2;
        ot_ir_shape rs;
        OT_CHECK(parse_shape(x, x->scratch, &rs, 0));
    }
    OT_CHECK(parse_body(x));
    for (int k = 0; k < c->nparams; k++)
        if (!c->params[k])
            return perr(x, at, OT_ERR_INVALID_ARGUMENT,
                        "computation %s has no parameter(%d) (parameters are numbered 0..%d)",
                        c->name, k, c->nparams - 1);
    bool have_thread = false;
    while (accept(x, ',')) { /* execution_thread="...", the one computation attribute XLA has */
        const char *an, *thread;
        size_t ann;
        OT_CHECK(ident(x, &an, &ann, "a computation attribute"));
        if (!word_is(an, ann, "execution_thread"))
            return perr(x, an, OT_ERR_INVALID_ARGUMENT,
                        "unknown computation attribute '%.*s' (XLA has execution_thread)", (int)ann,
                        an);
        if (have_thread)
            return perr(x, an, OT_ERR_INVALID_ARGUMENT,
                        "attribute 'execution_thread' is given twice");
        have_thread = true;
        OT_CHECK(expect_char(x, '='));
        OT_CHECK(parse_string(x, &thread));
    }
    OT_CHECK(x->err);
    if (is_entry) {
        if (*entry)
            return perr(x, at, OT_ERR_INVALID_ARGUMENT, "second ENTRY computation '%.*s'", (int)n,
                        s);
        *entry = c;
    }
    return OT_OK;
}

/* The first byte of s[0..n) that is not part of well-formed UTF-8 (RFC 3629: no overlong forms,
 * no surrogates, nothing above U+10FFFF), or NULL. ASCII runs are checked 8 bytes at a time. */
static const char *bad_utf8(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s, *e = p + n;
    while (p < e) {
        if (e - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (!(w & 0x8080808080808080ull)) {
                p += 8;
                continue;
            }
        }
        unsigned c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        int len;
        unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0; /* overlong */
            if (c == 0xED) hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90; /* overlong */
            if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
        } else {
            return (const char *)p;
        }
        if (e - p < len || p[1] < lo || p[1] > hi) return (const char *)p;
        for (int k = 2; k < len; k++)
            if ((p[k] & 0xC0) != 0x80) return (const char *)p;
        p += len;
    }
    return NULL;
}

ot_hlo_parse_options ot_hlo_parse_options_default(void) {
    ot_hlo_parse_options o = {NULL, true, 0};
    return o;
}

size_t ot_hlo_split_next(const char *text, size_t len, size_t *next, int *lines) {
    int nl = 0;
    size_t i = 0;
    while (i < len) {
        size_t e = i;
        while (e < len && text[e] != '\n') e++;
        /* a separator line: optional blanks, "// -----", optional blanks */
        size_t a = i;
        while (a < e && (text[a] == ' ' || text[a] == '\t')) a++;
        size_t b = e;
        while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t' || text[b - 1] == '\r')) b--;
        if (b - a == 8 && memcmp(text + a, "// -----", 8) == 0) {
            if (next) *next = e < len ? e + 1 : len;
            if (lines) *lines = nl + 1;
            return i;
        }
        nl++;
        i = e < len ? e + 1 : len;
    }
    if (next) *next = len;
    if (lines) *lines = nl;
    return len;
}

ot_status ot_hlo_parse(const char *text, size_t len, const ot_hlo_parse_options *opts,
                       ot_module **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "hlo parse: out is NULL");
    *out = NULL;
    if (!text && len) return ot_error(OT_ERR_INVALID_ARGUMENT, "hlo parse: text is NULL");
    ot_hlo_parse_options o = opts ? *opts : ot_hlo_parse_options_default();
    if (!ident_ready) ident_init(); /* idempotent */
    /* a UTF-8 byte-order mark, which some editors write at the start of a file, is not part of
     * the text: skipped at the file's first byte (the text of line 1), nowhere else */
    if (o.line_offset == 0 && len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) {
        text += 3;
        len -= 3;
    }
    P x;
    memset(&x, 0, sizeof x);
    x.s = x.p = text ? text : "";
    x.end = x.s + len;
    x.file = o.filename ? o.filename : "<input>";
    x.line_offset = o.line_offset;
    x.m = ot_module_new("module");
    x.scratch = ot_arena_new(64 * 1024);
    x.recent = ot_calloc(RECENT_SLOTS, sizeof *x.recent);
    if (!x.m || !x.scratch || !x.recent) {
        ot_free(x.recent);
        ot_module_free(x.m);
        ot_arena_free(x.scratch);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "hlo parse: out of memory");
    }
    /* HLO text never holds a NUL byte (one would cut names and strings short when printed) and is
     * UTF-8, as XLA's is: other bytes would be printed back raw into text no tool reads */
    const char *nul = len ? memchr(x.s, 0, len) : NULL;
    const char *bad = nul ? NULL : bad_utf8(x.s, len);
    ot_status s =
        nul   ? perr(&x, nul, OT_ERR_INVALID_ARGUMENT, "a NUL byte in HLO text")
        : bad ? perr(&x, bad, OT_ERR_INVALID_ARGUMENT,
                     "byte 0x%02x is not valid UTF-8 (HLO text is UTF-8)", (unsigned char)*bad)
              : skip_ws(&x);
    ot_computation *entry = NULL;
    if (s == OT_OK && peek_word(&x, "HloModule")) s = parse_header(&x);
    while (s == OT_OK) {
        s = skip_ws(&x);
        if (s != OT_OK || x.p >= x.end) break;
        if (peek_word(&x, "FileNames") || peek_word(&x, "FunctionNames") ||
            peek_word(&x, "FileLocations") || peek_word(&x, "StackFrames")) {
            s = skip_preamble_section(&x);
            continue;
        }
        if (peek_word(&x, "HloModule")) {
            s = perr(&x, x.p, OT_ERR_INVALID_ARGUMENT,
                     "a second HloModule header: one module per text; put a '// -----' line "
                     "between modules and pass --split-input-file (optitpu hlo check/print) or "
                     "--module K (optitpu run)");
            break;
        }
        s = parse_computation(&x, &entry);
    }
    if (s == OT_OK && x.m->ncomps == 0)
        s = perr(&x, x.p, OT_ERR_INVALID_ARGUMENT, "expected a computation, got end of input");
    if (s == OT_OK) {
        if (!entry) entry = x.m->comps[x.m->ncomps - 1]; /* lenient: the last computation */
        x.m->entry = entry;
        entry->is_entry = true;
        s = check_entry_layout(&x, entry);
    }
    if (s == OT_OK) {
        /* every instruction went through ir_create, which inferred its shape and checked the
         * declared one: the verifier checks links, order, parameters, roots and calls */
        if (o.verify) s = ir_module_verify(x.m, false);
        if (s != OT_OK) s = ot_error_wrap(s, "%s", x.file);
    }
    ot_free(x.pend);
    ot_free(x.refs);
    ot_free(x.ops);
    ot_free(x.recent);
    ir_names_free(&x.pend_names);
    ot_arena_free(x.scratch);
    if (s != OT_OK) {
        ot_module_free(x.m);
        return s;
    }
    *out = x.m;
    return OT_OK;
}

ot_status ot_hlo_read_file(const char *path, char **text, size_t *len) {
    if (!text || !len || !path)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "hlo read: a NULL argument");
    *text = NULL;
    *len = 0;
    bool std_in = !strcmp(path, "-");
    const char *name = std_in ? "<stdin>" : path;
    int fd = std_in ? 0 : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ot_error(OT_ERR_IO, "open %s: %s", path, strerror(errno));
    struct stat st;
    ot_status s = OT_OK;
    if (fstat(fd, &st) != 0) {
        s = ot_error(OT_ERR_IO, "stat %s: %s", name, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        s = ot_error(OT_ERR_INVALID_ARGUMENT, "%s is a directory, not HLO text", name);
    } else if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode) &&
               !isatty(fd)) {
        /* a device never ends (/dev/zero) or is not text; pipes and terminals are meant */
        s = ot_error(OT_ERR_INVALID_ARGUMENT,
                     "%s is a device, not a file of HLO text (regular files, pipes and standard "
                     "input are read)",
                     name);
    } else if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > OT_HLO_MAX_TEXT) {
        s = ot_error(OT_ERR_RESOURCE_EXHAUSTED,
                     "%s holds %lld bytes; HLO text over %zu bytes (1 GiB) is refused", name,
                     (long long)st.st_size, OT_HLO_MAX_TEXT);
    }
    bool stream = s == OT_OK && !S_ISREG(st.st_mode);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    while (s == OT_OK) {
        if (n == cap) {
            /* a regular file: its size plus one byte to see the end; a stream grows by doubling */
            size_t ncap = cap ? cap * 2 : stream ? (size_t)1 << 16 : (size_t)st.st_size + 1;
            if (ncap > OT_HLO_MAX_TEXT + 1) ncap = OT_HLO_MAX_TEXT + 1;
            if (ncap <= cap) {
                s = ot_error(OT_ERR_RESOURCE_EXHAUSTED,
                             "%s: more than %zu bytes (1 GiB) of HLO text; refused", name,
                             OT_HLO_MAX_TEXT);
                break;
            }
            char *nb = ot_realloc(buf, ncap + 1);
            if (!nb) {
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "read %s: out of memory", name);
                break;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t k = read(fd, buf + n, cap - n);
        if (k < 0) {
            if (errno == EINTR) continue;
            s = ot_error(OT_ERR_IO, "read %s: %s", name, strerror(errno));
            break;
        }
        if (k == 0) break;
        if (stream && memchr(buf + n, 0, (size_t)k)) {
            const char *z = memchr(buf + n, 0, (size_t)k);
            s = ot_error(OT_ERR_INVALID_ARGUMENT,
                         "%s: a NUL byte at byte %zu: binary data, not HLO text", name,
                         n + (size_t)(z - (buf + n)));
            break;
        }
        n += (size_t)k;
        if (n > OT_HLO_MAX_TEXT) {
            s = ot_error(OT_ERR_RESOURCE_EXHAUSTED,
                         "%s: more than %zu bytes (1 GiB) of HLO text; refused", name,
                         OT_HLO_MAX_TEXT);
            break;
        }
    }
    if (!std_in) close(fd);
    if (s != OT_OK) {
        ot_free(buf);
        return s;
    }
    if (!buf) {
        buf = ot_malloc(1);
        if (!buf) return ot_error(OT_ERR_OUT_OF_MEMORY, "read %s: out of memory", name);
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return OT_OK;
}

ot_status ot_hlo_parse_file(const char *path, const ot_hlo_parse_options *opts, ot_module **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "hlo parse: out is NULL");
    *out = NULL;
    char *buf;
    size_t len;
    OT_CHECK(ot_hlo_read_file(path, &buf, &len));
    ot_hlo_parse_options o = opts ? *opts : ot_hlo_parse_options_default();
    if (!o.filename) o.filename = strcmp(path, "-") ? path : "<stdin>";
    ot_status s = ot_hlo_parse(buf, len, &o, out);
    ot_free(buf);
    return s;
}
