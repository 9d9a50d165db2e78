/* jaxlib's LAPACK custom-call targets: names, flags and shapes (lapack_call.h). */
#include "ir/lapack_call.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool ir_lapack_target_known(const char *target) {
    return target && !strncmp(target, "lapack_", 7);
}

static const struct {
    const char *name; /* the routine, between "lapack_<t>" and "_ffi" */
    ir_lapack_op op;
} routines[] = {
    {"potrf", IR_LAPACK_POTRF}, {"getrf", IR_LAPACK_GETRF}, {"geqrf", IR_LAPACK_GEQRF},
    {"orgqr", IR_LAPACK_ORGQR}, {"syevd", IR_LAPACK_SYEVD}, {"gesdd", IR_LAPACK_GESDD},
    {"gesvd", IR_LAPACK_GESVD}, {"trsm", IR_LAPACK_TRSM},
};

/* One flag of the dictionary: its value, or -1 when absent. The text is XLA's MLIR dictionary,
 * "{name = 76 : ui8, ...}"; anything else is an error. */
typedef struct flags {
    int uplo, side, trans_x, diag, mode;
} flags;

static ot_status parse_flags(const char *target, const char *s, flags *f) {
    f->uplo = f->side = f->trans_x = f->diag = f->mode = -1;
    if (!s) return OT_OK;
    const char *p = s;
    while (isspace((unsigned char)*p)) p++;
    if (!*p) return OT_OK;
    if (*p++ != '{')
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "custom-call %s: backend_config \"%.80s\" is not a dictionary "
                        "{name = value : type, ...}",
                        target, s);
    for (;;) {
        while (isspace((unsigned char)*p) || *p == ',') p++;
        if (*p == '}') break;
        const char *nm = p;
        while (isalnum((unsigned char)*p) || *p == '_') p++;
        size_t nl = (size_t)(p - nm);
        while (isspace((unsigned char)*p)) p++;
        if (!nl || *p != '=')
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "custom-call %s: backend_config \"%.80s\": expected name = value",
                            target, s);
        p++;
        while (isspace((unsigned char)*p)) p++;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 255)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "custom-call %s: backend_config \"%.80s\": flag %.*s needs a "
                            "character code 0..255",
                            target, s, (int)nl, nm);
        p = end;
        while (isspace((unsigned char)*p)) p++;
        if (*p == ':') { /* the type, ui8 */
            p++;
            while (isspace((unsigned char)*p)) p++;
            while (isalnum((unsigned char)*p)) p++;
        }
        int *slot = NULL;
        if (nl == 4 && !strncmp(nm, "uplo", 4)) slot = &f->uplo;
        if (nl == 4 && !strncmp(nm, "side", 4)) slot = &f->side;
        if (nl == 7 && !strncmp(nm, "trans_x", 7)) slot = &f->trans_x;
        if (nl == 4 && !strncmp(nm, "diag", 4)) slot = &f->diag;
        if (nl == 4 && !strncmp(nm, "mode", 4)) slot = &f->mode;
        if (!slot)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "custom-call %s: backend_config has an unknown flag %.*s", target,
                            (int)nl, nm);
        *slot = (int)v;
        while (isspace((unsigned char)*p)) p++;
        if (*p == ',') continue;
        if (*p == '}') break;
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "custom-call %s: backend_config \"%.80s\": expected ',' or '}'", target, s);
    }
    return OT_OK;
}

/* The flag's character when it is one of allowed; else an error naming the choices. */
static ot_status pick(const char *target, const char *what, int v, const char *allowed, char *out) {
    if (v < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "custom-call %s: backend_config lacks %s", target,
                        what);
    if (!v || !strchr(allowed, v))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "custom-call %s: %s = %d is not one of the character codes of \"%s\"",
                        target, what, v, allowed);
    *out = (char)v;
    return OT_OK;
}

ot_status ir_lapack_parse(const char *target, const char *backend_config, ir_lapack_call *out,
                          bool *is_lapack) {
    *is_lapack = false;
    memset(out, 0, sizeof *out);
    if (!ir_lapack_target_known(target)) return OT_OK;
    const char *r = target + 7;
    ot_dtype dt;
    if (*r == 's')
        dt = OT_F32;
    else if (*r == 'd')
        dt = OT_F64;
    else
        return OT_OK; /* complex (c, z) and anything else: not described */
    r++;
    size_t rl = strlen(r);
    if (rl < 4 || strcmp(r + rl - 4, "_ffi")) return OT_OK;
    rl -= 4;
    int k = -1;
    for (int j = 0; j < (int)(sizeof routines / sizeof routines[0]); j++)
        if (strlen(routines[j].name) == rl && !strncmp(r, routines[j].name, rl)) k = j;
    if (k < 0) return OT_OK;
    out->op = routines[k].op;
    out->dtype = dt;
    flags f;
    OT_CHECK(parse_flags(target, backend_config, &f));
    switch (out->op) {
    case IR_LAPACK_POTRF: OT_CHECK(pick(target, "uplo", f.uplo, "LU", &out->uplo)); break;
    case IR_LAPACK_SYEVD:
        OT_CHECK(pick(target, "uplo", f.uplo, "LU", &out->uplo));
        OT_CHECK(pick(target, "mode", f.mode, "VN", &out->mode));
        break;
    case IR_LAPACK_GESDD:
    case IR_LAPACK_GESVD: OT_CHECK(pick(target, "mode", f.mode, "ASN", &out->mode)); break;
    case IR_LAPACK_TRSM:
        OT_CHECK(pick(target, "side", f.side, "LR", &out->side));
        OT_CHECK(pick(target, "uplo", f.uplo, "LU", &out->uplo));
        OT_CHECK(pick(target, "trans_x", f.trans_x, "NTC", &out->trans));
        OT_CHECK(pick(target, "diag", f.diag, "NU", &out->diag));
        break;
    default: break;
    }
    *is_lapack = true;
    return OT_OK;
}

/* ---- shapes ---------------------------------------------------------------------------- */

typedef struct chk {
    const char *target;
    const ot_shape *a; /* operand 0: defines the batch */
    int nb;            /* batch rank */
} chk;

static const char *fmt(const ot_ir_shape *s) {
    static _Thread_local char bufs[4][160];
    static _Thread_local int k;
    char *b = bufs[k++ & 3];
    ot_ir_shape_format(s, b, 160);
    return b;
}

/* s must be dtype dt with dims = batch of c->a then the ntail dims of tail. */
static ot_status want(const chk *c, const char *what, const ot_ir_shape *s, ot_dtype dt, int ntail,
                      const int64_t *tail) {
    bool ok = s->kind == OT_IR_ARRAY && s->array.dtype == dt && s->array.rank == c->nb + ntail;
    for (int d = 0; ok && d < c->nb; d++) ok = s->array.dims[d] == c->a->dims[d];
    for (int d = 0; ok && d < ntail; d++) ok = s->array.dims[c->nb + d] == tail[d];
    if (ok) return OT_OK;
    char exp[160];
    int o = snprintf(exp, sizeof exp, "%s[", ot_dtype_name(dt));
    for (int d = 0; d < c->nb + ntail && o < (int)sizeof exp - 24; d++)
        o += snprintf(exp + o, sizeof exp - (size_t)o, "%s%lld", d ? "," : "",
                      (long long)(d < c->nb ? c->a->dims[d] : tail[d - c->nb]));
    snprintf(exp + o, sizeof exp - (size_t)o, "]");
    return ot_error(OT_ERR_SHAPE_MISMATCH, "custom-call %s: %s is %s, expected %s", c->target, what,
                    fmt(s), exp);
}

static ot_status want_tuple(const chk *c, const ot_ir_shape *r, int n) {
    if (r->kind == OT_IR_TUPLE && r->ntuple == n) return OT_OK;
    return ot_error(OT_ERR_SHAPE_MISMATCH,
                    "custom-call %s: the result is %s, expected a tuple of %d", c->target, fmt(r),
                    n);
}

ot_status ir_lapack_check(const ir_lapack_call *lc, const ot_ir_shape *const *ops, int n,
                          const ot_ir_shape *r) {
    char target[48];
    static const char *const names[] = {"potrf", "getrf", "geqrf", "orgqr",
                                        "syevd", "gesdd", "gesvd", "trsm"};
    snprintf(target, sizeof target, "lapack_%c%s_ffi", lc->dtype == OT_F64 ? 'd' : 's',
             names[lc->op]);
    int nin = lc->op == IR_LAPACK_ORGQR || lc->op == IR_LAPACK_TRSM ? 2 : 1;
    if (n != nin)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "custom-call %s: takes %d operand%s, got %d",
                        target, nin, nin > 1 ? "s" : "", n);
    if (!r)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "custom-call %s: needs a result shape", target);
    const ot_ir_shape *a0 = ops[0];
    if (a0->kind != OT_IR_ARRAY || a0->array.rank < 2 || a0->array.dtype != lc->dtype)
        return ot_error(OT_ERR_SHAPE_MISMATCH,
                        "custom-call %s: operand 0 is %s, expected a %s matrix [batch..., m, n]",
                        target, fmt(a0), ot_dtype_name(lc->dtype));
    chk c = {target, &a0->array, a0->array.rank - 2};
    int64_t m = a0->array.dims[c.nb], nn = a0->array.dims[c.nb + 1], k = m < nn ? m : nn;
    const ot_dtype t = lc->dtype;
    int64_t sq[2] = {m, m}, mn[2] = {m, nn};
    switch (lc->op) {
    case IR_LAPACK_POTRF:
        if (m != nn) return want(&c, "operand 0", a0, t, 2, sq);
        OT_CHECK(want_tuple(&c, r, 2));
        OT_CHECK(want(&c, "result 0", &r->tuple[0], t, 2, sq));
        return want(&c, "result 1 (info)", &r->tuple[1], OT_S32, 0, NULL);
    case IR_LAPACK_GETRF:
        OT_CHECK(want_tuple(&c, r, 3));
        OT_CHECK(want(&c, "result 0", &r->tuple[0], t, 2, mn));
        OT_CHECK(want(&c, "result 1 (pivots)", &r->tuple[1], OT_S32, 1, &k));
        return want(&c, "result 2 (info)", &r->tuple[2], OT_S32, 0, NULL);
    case IR_LAPACK_GEQRF:
        OT_CHECK(want_tuple(&c, r, 2));
        OT_CHECK(want(&c, "result 0", &r->tuple[0], t, 2, mn));
        return want(&c, "result 1 (tau)", &r->tuple[1], t, 1, &k);
    case IR_LAPACK_ORGQR: {
        const ot_ir_shape *tau = ops[1];
        if (tau->kind != OT_IR_ARRAY || tau->array.rank != c.nb + 1)
            return ot_error(OT_ERR_SHAPE_MISMATCH,
                            "custom-call %s: operand 1 (tau) is %s, "
                            "expected %s[batch..., k]",
                            target, fmt(tau), ot_dtype_name(t));
        int64_t tk = tau->array.dims[c.nb];
        OT_CHECK(want(&c, "operand 1 (tau)", tau, t, 1, &tk));
        if (!(m >= nn && nn >= tk))
            return ot_error(OT_ERR_SHAPE_MISMATCH,
                            "custom-call %s: needs rows >= columns >= reflectors (LAPACK orgqr), "
                            "got %lld x %lld with %lld",
                            target, (long long)m, (long long)nn, (long long)tk);
        return want(&c, "the result", r, t, 2, mn);
    }
    case IR_LAPACK_SYEVD:
        if (m != nn) return want(&c, "operand 0", a0, t, 2, sq);
        OT_CHECK(want_tuple(&c, r, 3));
        OT_CHECK(want(&c, "result 0 (eigenvectors)", &r->tuple[0], t, 2, sq));
        OT_CHECK(want(&c, "result 1 (eigenvalues)", &r->tuple[1], t, 1, &m));
        return want(&c, "result 2 (info)", &r->tuple[2], OT_S32, 0, NULL);
    case IR_LAPACK_GESDD:
    case IR_LAPACK_GESVD: {
        OT_CHECK(want_tuple(&c, r, 5));
        OT_CHECK(want(&c, "result 0", &r->tuple[0], t, 2, mn));
        OT_CHECK(want(&c, "result 1 (singular values)", &r->tuple[1], t, 1, &k));
        int64_t ufull[2] = {m, m}, uthin[2] = {m, k}, vfull[2] = {nn, nn}, vthin[2] = {k, nn};
        bool full = lc->mode == 'A';
        /* mode N: either shape for each (JAX follows full_matrices; nothing is written there) */
        bool ufull_ok = lc->mode == 'N' && want(&c, "", &r->tuple[2], t, 2, ufull) == OT_OK;
        bool vfull_ok = lc->mode == 'N' && want(&c, "", &r->tuple[3], t, 2, vfull) == OT_OK;
        OT_CHECK(want(&c, "result 2 (u)", &r->tuple[2], t, 2, full || ufull_ok ? ufull : uthin));
        OT_CHECK(want(&c, "result 3 (vt)", &r->tuple[3], t, 2, full || vfull_ok ? vfull : vthin));
        return want(&c, "result 4 (info)", &r->tuple[4], OT_S32, 0, NULL);
    }
    case IR_LAPACK_TRSM: {
        if (m != nn) return want(&c, "operand 0 (the triangular matrix)", a0, t, 2, sq);
        const ot_ir_shape *b = ops[1];
        if (b->kind != OT_IR_ARRAY || b->array.rank != c.nb + 2)
            return ot_error(OT_ERR_SHAPE_MISMATCH,
                            "custom-call %s: operand 1 is %s, expected %s[batch..., m, n]", target,
                            fmt(b), ot_dtype_name(t));
        int64_t bd[2] = {b->array.dims[c.nb], b->array.dims[c.nb + 1]};
        OT_CHECK(want(&c, "operand 1", b, t, 2, bd));
        if (bd[lc->side == 'L' ? 0 : 1] != m)
            return ot_error(OT_ERR_SHAPE_MISMATCH,
                            "custom-call %s: side %c needs operand 1's %s (%lld) to equal the "
                            "order of the triangular matrix (%lld)",
                            target, lc->side, lc->side == 'L' ? "rows" : "columns",
                            (long long)bd[lc->side == 'L' ? 0 : 1], (long long)m);
        return want(&c, "the result", r, t, 2, bd);
    }
    }
    return ot_error(OT_ERR_INTERNAL, "custom-call %s: unknown routine", target);
}

int ir_lapack_in_place_operand(const ir_lapack_call *c) {
    return c->op == IR_LAPACK_TRSM ? 1 : 0;
}
