/* Shape inference for every op, by XLA's rules (xla/service/shape_inference.cc). Every error names
 * the op, the operand and the dimension. */
#include "attr_schema.h"
#include "ir_internal.h"
#include "lapack_call.h"

#include <stdarg.h>

typedef struct ictx {
    ot_module *m;
    ot_opcode op;
    ot_instr *const *ops;
    int n;
    const ot_attrs *a;
    ot_computation *const *called;
    int ncalled;
    const ot_ir_shape *hint;
} ictx;

static ot_status fail(const ictx *x, ot_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static ot_status fail(const ictx *x, ot_status code, const char *fmt, ...) {
    char buf[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return ot_error(code, "%s: %s", ot_opcode_name(x->op), buf);
}
#define BAD(...)     fail(x, OT_ERR_SHAPE_MISMATCH, __VA_ARGS__)
#define INVALID(...) fail(x, OT_ERR_INVALID_ARGUMENT, __VA_ARGS__)

/* Short shape strings for messages (rotating buffers). */
static const char *S(const ot_ir_shape *s) {
    static _Thread_local char bufs[4][192];
    static _Thread_local int k;
    char *b = bufs[k++ & 3];
    ot_ir_shape_format(s, b, 192);
    return b;
}
static const char *A(const ot_shape *s) {
    ot_ir_shape t = ot_ir_shape_array(*s);
    return S(&t);
}

static const ot_shape *arr(const ictx *x, int i) {
    return &x->ops[i]->shape.array;
}

static ot_status need_count(const ictx *x, int want) {
    if (x->n != want)
        return INVALID("expects %d operand%s, got %d", want, want == 1 ? "" : "s", x->n);
    return OT_OK;
}

static ot_status need_array(const ictx *x, int i) {
    if (x->ops[i]->shape.kind != OT_IR_ARRAY)
        return BAD("operand %d (%s) must be an array, not %s", i, x->ops[i]->name,
                   S(&x->ops[i]->shape));
    return OT_OK;
}

static ot_status need_called(const ictx *x, int want) {
    if (x->ncalled != want)
        return INVALID("expects %d called computation%s, got %d", want, want == 1 ? "" : "s",
                       x->ncalled);
    for (int k = 0; k < want; k++)
        if (!x->called[k]->root)
            return INVALID("called computation %s has no root", x->called[k]->name);
    return OT_OK;
}

static ot_ir_shape out_array(ot_dtype t, int rank, const int64_t *dims) {
    ot_shape s;
    memset(&s, 0, sizeof s);
    s.dtype = t;
    s.rank = rank;
    for (int i = 0; i < rank; i++) s.dims[i] = dims[i];
    return ot_ir_shape_array(s);
}

static ot_status make_tuple(const ictx *x, const ot_ir_shape *elems, int n, ot_ir_shape *out) {
    memset(out, 0, sizeof *out);
    out->kind = OT_IR_TUPLE;
    out->ntuple = n;
    if (n) {
        ot_ir_shape *t = ir_alloc(x->m, (size_t)n * sizeof *t);
        if (!t) return ot_error(OT_ERR_OUT_OF_MEMORY, "shape: out of memory");
        memcpy(t, elems, (size_t)n * sizeof *t);
        out->tuple = t;
    }
    return OT_OK;
}

static bool same_dims(const ot_shape *a, const ot_shape *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

/* Names the first differing dimension of two arrays. */
static ot_status dims_mismatch(const ictx *x, int i, int j) {
    const ot_shape *a = arr(x, i), *b = arr(x, j);
    if (a->rank != b->rank)
        return BAD("operand %d (%s) %s and operand %d (%s) %s differ in rank (%d vs %d)", i,
                   x->ops[i]->name, A(a), j, x->ops[j]->name, A(b), a->rank, b->rank);
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d])
            return BAD("operand %d (%s) %s and operand %d (%s) %s differ in dimension %d (%lld vs "
                       "%lld)",
                       i, x->ops[i]->name, A(a), j, x->ops[j]->name, A(b), d, (long long)a->dims[d],
                       (long long)b->dims[d]);
    return OT_OK;
}

static ot_status need_same_dtype(const ictx *x, int i, int j) {
    if (arr(x, i)->dtype != arr(x, j)->dtype)
        return BAD("operand %d (%s) is %s but operand %d (%s) is %s", i, x->ops[i]->name,
                   ot_dtype_name(arr(x, i)->dtype), j, x->ops[j]->name,
                   ot_dtype_name(arr(x, j)->dtype));
    return OT_OK;
}

static ot_status need_scalar(const ictx *x, int i) {
    OT_CHECK(need_array(x, i));
    if (arr(x, i)->rank != 0)
        return BAD("operand %d (%s) must be a scalar, not %s", i, x->ops[i]->name, A(arr(x, i)));
    return OT_OK;
}

static ot_status need_int_scalar(const ictx *x, int i) {
    OT_CHECK(need_scalar(x, i));
    if (!ot_dtype_is_integer(arr(x, i)->dtype))
        return BAD("operand %d (%s) must be an integer scalar, not %s", i, x->ops[i]->name,
                   A(arr(x, i)));
    return OT_OK;
}

static bool is_numeric(ot_dtype t) {
    return t != OT_PRED && t >= 0 && t < OT_DTYPE_COUNT;
}

/* Checks `dims` (k entries) are distinct and within [0, rank). */
static ot_status check_dim_list(const ictx *x, const char *what, const int64_t *dims, int k,
                                int rank) {
    if (k < 0 || k > OT_MAX_RANK) return INVALID("%s: %d entries", what, k);
    if (k && !dims) return INVALID("%s missing", what);
    uint32_t seen = 0;
    for (int i = 0; i < k; i++) {
        if (dims[i] < 0 || dims[i] >= rank)
            return INVALID("%s[%d] = %lld is outside [0, %d)", what, i, (long long)dims[i], rank);
        if (seen & (1u << dims[i]))
            return INVALID("%s repeats dimension %lld", what, (long long)dims[i]);
        seen |= 1u << dims[i];
    }
    return OT_OK;
}

/* ---- called computations ---- */

static const ot_ir_shape *param_shape(const ot_computation *c, int k) {
    if (k >= c->nparams || !c->params[k]) return NULL;
    return &c->params[k]->shape;
}

static ot_status check_params(const ictx *x, const ot_computation *c, const ot_ir_shape *want,
                              int n, const char *role) {
    if (c->nparams != n)
        return BAD("%s computation %s takes %d parameter(s), expected %d", role, c->name,
                   c->nparams, n);
    for (int k = 0; k < n; k++) {
        const ot_ir_shape *p = param_shape(c, k);
        if (!p) return BAD("%s computation %s has no parameter %d", role, c->name, k);
        if (!ot_ir_shape_equal(p, &want[k]))
            return BAD("%s computation %s parameter %d is %s, expected %s", role, c->name, k, S(p),
                       S(&want[k]));
    }
    return OT_OK;
}

/* A reducer over n values of types acc[k] (init) and in[k] (inputs):
 * (acc_0..acc_{n-1}, in_0..in_{n-1}) -> acc or (acc_0, ..., acc_{n-1}). */
static ot_status check_reducer(const ictx *x, const ot_computation *c, const ot_dtype *acc,
                               const ot_dtype *in, int n) {
    ot_ir_shape want[2 * OT_MAX_RANK + 2];
    if (n > OT_MAX_RANK + 1) return INVALID("too many reduced inputs (%d)", n);
    for (int k = 0; k < n; k++) {
        want[k] = ot_ir_shape_scalar(acc[k]);
        want[n + k] = ot_ir_shape_scalar(in[k]);
    }
    OT_CHECK(check_params(x, c, want, 2 * n, "reducer"));
    const ot_ir_shape *r = &c->root->shape;
    if (n == 1 && r->kind == OT_IR_ARRAY) {
        if (!ot_ir_shape_equal(r, &want[0]))
            return BAD("reducer computation %s returns %s, expected %s", c->name, S(r),
                       S(&want[0]));
        return OT_OK;
    }
    if (r->kind != OT_IR_TUPLE || r->ntuple != n)
        return BAD("reducer computation %s returns %s, expected a %d-tuple of scalars", c->name,
                   S(r), n);
    for (int k = 0; k < n; k++)
        if (!ot_ir_shape_equal(&r->tuple[k], &want[k]))
            return BAD("reducer computation %s result %d is %s, expected %s", c->name, k,
                       S(&r->tuple[k]), S(&want[k]));
    return OT_OK;
}

/* ---- windows ---- */

static ot_status window_out(const ictx *x, const ot_window *w, const ot_shape *in, int64_t *out,
                            const int *spatial, int nspatial) {
    if (!w) return INVALID("window attribute missing");
    if (w->rank != nspatial)
        return BAD("window has %d dimensions, the operand %s has %d (spatial) dimensions", w->rank,
                   A(in), nspatial);
    for (int i = 0; i < w->rank; i++) {
        const ot_window_dim *d = &w->dims[i];
        int64_t size = in->dims[spatial ? spatial[i] : i];
        if (d->size <= 0)
            return INVALID("window dimension %d: size %lld must be positive", i,
                           (long long)d->size);
        if (d->stride <= 0)
            return INVALID("window dimension %d: stride %lld must be positive", i,
                           (long long)d->stride);
        if (d->window_dilation <= 0 || d->base_dilation <= 0)
            return INVALID("window dimension %d: dilations must be positive", i);
        if (d->size > (1ll << 40) || d->window_dilation > (1ll << 20) ||
            d->base_dilation > (1ll << 20) || d->pad_lo > (1ll << 40) || d->pad_lo < -(1ll << 40) ||
            d->pad_hi > (1ll << 40) || d->pad_hi < -(1ll << 40))
            return INVALID("window dimension %d: values out of range", i);
        int64_t base = size == 0 ? 0 : (size - 1) * d->base_dilation + 1;
        int64_t padded = base + d->pad_lo + d->pad_hi;
        int64_t win = (d->size - 1) * d->window_dilation + 1;
        out[i] = padded < win ? 0 : (padded - win) / d->stride + 1;
        if (padded < 0)
            return BAD("window dimension %d: padding makes the operand size negative (%lld)", i,
                       (long long)padded);
    }
    return OT_OK;
}

/* ---- per-op rules ---- */

/* The float-only unary ops XLA also defines on complex operands (the rounding ops, cbrt,
 * logistic, erf and is-finite it does not). */
static bool complex_unary(ot_opcode op) {
    switch (op) {
    case OT_OP_EXP:
    case OT_OP_EXPM1:
    case OT_OP_LOG:
    case OT_OP_LOG1P:
    case OT_OP_SQRT:
    case OT_OP_RSQRT:
    case OT_OP_TANH:
    case OT_OP_SIN:
    case OT_OP_COS:
    case OT_OP_TAN: return true;
    default: return false;
    }
}

static ot_status infer_unary(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 1));
    if (x->op == OT_OP_COPY) {
        *out = x->ops[0]->shape;
        out->has_layout = false;
        return OT_OK;
    }
    OT_CHECK(need_array(x, 0));
    const ot_shape *s = arr(x, 0);
    ot_dtype t = s->dtype;
    switch (x->op) {
    case OT_OP_ABS:
    case OT_OP_NEGATE:
    case OT_OP_SIGN:
        if (!is_numeric(t))
            return BAD("operand 0 (%s) must be numeric, not %s", x->ops[0]->name, ot_dtype_name(t));
        if (x->op == OT_OP_ABS && ot_dtype_is_complex(t)) { /* the modulus: real */
            *out = out_array(ot_dtype_complex_part(t), s->rank, s->dims);
            return OT_OK;
        }
        break;
    case OT_OP_NOT:
        if (!(t == OT_PRED || ot_dtype_is_integer(t)))
            return BAD("operand 0 (%s) must be pred or integer, not %s", x->ops[0]->name,
                       ot_dtype_name(t));
        break;
    case OT_OP_POPCNT:
    case OT_OP_CLZ:
        if (!ot_dtype_is_integer(t))
            return BAD("operand 0 (%s) must be an integer, not %s", x->ops[0]->name,
                       ot_dtype_name(t));
        break;
    case OT_OP_IS_FINITE:
        if (!ot_dtype_is_float(t))
            return BAD("operand 0 (%s) must be floating point, not %s", x->ops[0]->name,
                       ot_dtype_name(t));
        *out = out_array(OT_PRED, s->rank, s->dims);
        return OT_OK;
    default:
        if (ot_dtype_is_complex(t) && complex_unary(x->op)) break;
        if (!ot_dtype_is_float(t))
            return BAD("operand 0 (%s) must be floating point, not %s", x->ops[0]->name,
                       ot_dtype_name(t));
        break;
    }
    *out = out_array(t, s->rank, s->dims);
    return OT_OK;
}

static ot_status infer_binary(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 2));
    OT_CHECK(need_array(x, 0));
    OT_CHECK(need_array(x, 1));
    OT_CHECK(dims_mismatch(x, 0, 1));
    OT_CHECK(need_same_dtype(x, 0, 1));
    const ot_shape *s = arr(x, 0);
    ot_dtype t = s->dtype;
    switch (x->op) {
    case OT_OP_AND:
    case OT_OP_OR:
    case OT_OP_XOR:
        if (!(t == OT_PRED || ot_dtype_is_integer(t)))
            return BAD("operands must be pred or integer, not %s", ot_dtype_name(t));
        break;
    case OT_OP_SHIFT_LEFT:
    case OT_OP_SHIFT_RIGHT_ARITHMETIC:
    case OT_OP_SHIFT_RIGHT_LOGICAL:
        if (!ot_dtype_is_integer(t))
            return BAD("operands must be integers, not %s", ot_dtype_name(t));
        break;
    case OT_OP_ATAN2:
        if (!ot_dtype_is_float(t))
            return BAD("operands must be floating point, not %s", ot_dtype_name(t));
        break;
    case OT_OP_MAXIMUM:
    case OT_OP_MINIMUM: /* pred allowed, as XLA; complex numbers have no order */
        if (ot_dtype_is_complex(t))
            return BAD("operands must be ordered, not %s", ot_dtype_name(t));
        break;
    case OT_OP_REMAINDER:
        if (ot_dtype_is_complex(t))
            return BAD("operands must be real or integer, not %s", ot_dtype_name(t));
        break;
    case OT_OP_COMPARE: {
        if ((int)x->a->cmp_dir < 0 || x->a->cmp_dir >= OT_CMP_DIR_COUNT)
            return INVALID("invalid comparison direction %d", (int)x->a->cmp_dir);
        if ((int)x->a->cmp_type < 0 || x->a->cmp_type >= OT_CMP_TYPE_COUNT)
            return INVALID("invalid comparison type %d", (int)x->a->cmp_type);
        ot_cmp_type ct = ot_cmp_type_resolve(x->a->cmp_type, t);
        if (ot_dtype_is_complex(t) && x->a->cmp_dir != OT_CMP_EQ && x->a->cmp_dir != OT_CMP_NE)
            return BAD("%s operands compare only for EQ and NE, not %s", ot_dtype_name(t),
                       ir_cmp_dir_names[x->a->cmp_dir]);
        bool ok = ot_dtype_is_float(t) || ot_dtype_is_complex(t)
                      ? (ct == OT_CMP_TYPE_FLOAT || ct == OT_CMP_TYPE_TOTALORDER)
                  : ot_dtype_is_signed_int(t) ? ct == OT_CMP_TYPE_SIGNED
                                              : ct == OT_CMP_TYPE_UNSIGNED;
        if (!ok)
            return BAD("comparison type %s does not apply to %s operands", ot_cmp_type_name(ct),
                       ot_dtype_name(t));
        *out = out_array(OT_PRED, s->rank, s->dims);
        return OT_OK;
    }
    default:
        if (!is_numeric(t)) return BAD("operands must be numeric, not %s", ot_dtype_name(t));
        break;
    }
    *out = out_array(t, s->rank, s->dims);
    return OT_OK;
}

static ot_status infer_select(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 3));
    for (int i = 0; i < 3; i++) OT_CHECK(need_array(x, i));
    if (arr(x, 0)->dtype != OT_PRED)
        return BAD("operand 0 (%s) must be pred, not %s", x->ops[0]->name,
                   ot_dtype_name(arr(x, 0)->dtype));
    OT_CHECK(dims_mismatch(x, 1, 2));
    OT_CHECK(need_same_dtype(x, 1, 2));
    if (arr(x, 0)->rank != 0) OT_CHECK(dims_mismatch(x, 0, 1));
    *out = ot_ir_shape_array(*arr(x, 1));
    return OT_OK;
}

static ot_status infer_clamp(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 3));
    for (int i = 0; i < 3; i++) OT_CHECK(need_array(x, i));
    OT_CHECK(need_same_dtype(x, 0, 1));
    OT_CHECK(need_same_dtype(x, 2, 1));
    if (arr(x, 0)->rank != 0) OT_CHECK(dims_mismatch(x, 0, 1));
    if (arr(x, 2)->rank != 0) OT_CHECK(dims_mismatch(x, 2, 1));
    if (arr(x, 1)->dtype == OT_PRED) return BAD("operands must be numeric, not pred");
    if (ot_dtype_is_complex(arr(x, 1)->dtype))
        return BAD("operands must be ordered, not %s", ot_dtype_name(arr(x, 1)->dtype));
    *out = ot_ir_shape_array(*arr(x, 1));
    return OT_OK;
}

static ot_status need_hint_array(const ictx *x) {
    if (!x->hint || x->hint->kind != OT_IR_ARRAY)
        return INVALID("needs an array result shape (dtype and dimensions)");
    if (ot_dtype_size(x->hint->array.dtype) == 0) return INVALID("result dtype is invalid");
    if (x->hint->array.rank < 0 || x->hint->array.rank > OT_MAX_RANK)
        return INVALID("result rank %d out of range", x->hint->array.rank);
    for (int i = 0; i < x->hint->array.rank; i++)
        if (x->hint->array.dims[i] < 0) return INVALID("result dimension %d is negative", i);
    int64_t nb;
    if (ot_shape_nbytes(&x->hint->array, &nb) != OT_OK)
        return INVALID("result shape %s is too large", S(x->hint));
    return OT_OK;
}

static ot_status infer_convert(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 1));
    OT_CHECK(need_array(x, 0));
    if (!x->hint || x->hint->kind != OT_IR_ARRAY || ot_dtype_size(x->hint->array.dtype) == 0)
        return INVALID("needs the result dtype");
    const ot_shape *s = arr(x, 0);
    ot_dtype to = x->hint->array.dtype;
    if (x->op == OT_OP_CONVERT) {
        if (ot_dtype_is_complex(s->dtype) && !ot_dtype_is_complex(to)) /* as XLA */
            return fail(x, OT_ERR_UNIMPLEMENTED,
                        "conversion from complex to real type %s => %s is not implemented "
                        "(take real or imag first)",
                        ot_dtype_name(s->dtype), ot_dtype_name(to));
        *out = out_array(to, s->rank, s->dims);
        return OT_OK;
    }
    if (ot_dtype_is_complex(s->dtype) != ot_dtype_is_complex(to))
        return BAD("bitcast-convert between complex and real types (%s to %s)",
                   ot_dtype_name(s->dtype), ot_dtype_name(to));
    /* bitcast-convert: equal widths keep dims; narrower appends a dim; wider drops the last */
    size_t a = ot_dtype_size(s->dtype), b = ot_dtype_size(to);
    if (s->dtype == OT_PRED || to == OT_PRED)
        return BAD("bitcast-convert from %s to %s: pred has no bit width", ot_dtype_name(s->dtype),
                   ot_dtype_name(to));
    if (a == b) {
        *out = out_array(to, s->rank, s->dims);
    } else if (a > b) {
        if (s->rank >= OT_MAX_RANK) return BAD("result rank would exceed %d", OT_MAX_RANK);
        int64_t d[OT_MAX_RANK];
        memcpy(d, s->dims, sizeof s->dims);
        d[s->rank] = (int64_t)(a / b);
        *out = out_array(to, s->rank + 1, d);
    } else {
        if (s->rank == 0 || s->dims[s->rank - 1] != (int64_t)(b / a))
            return BAD("bitcast-convert from %s to %s needs a last dimension of %zu in operand %s",
                       ot_dtype_name(s->dtype), ot_dtype_name(to), b / a, A(s));
        *out = out_array(to, s->rank - 1, s->dims);
    }
    return OT_OK;
}

/* complex(re, im): two reals of one dtype and shape -> the complex dtype of that precision. */
static ot_status infer_complex(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 2));
    OT_CHECK(need_array(x, 0));
    OT_CHECK(need_array(x, 1));
    OT_CHECK(dims_mismatch(x, 0, 1));
    OT_CHECK(need_same_dtype(x, 0, 1));
    const ot_shape *s = arr(x, 0);
    if (s->dtype != OT_F32 && s->dtype != OT_F64)
        return BAD("operands must be f32 or f64, not %s", ot_dtype_name(s->dtype));
    *out = out_array(s->dtype == OT_F32 ? OT_C64 : OT_C128, s->rank, s->dims);
    return OT_OK;
}

/* real(x), imag(x): a component of a complex operand; on a real float operand real is x and imag
 * is zero, as XLA defines them. */
static ot_status infer_real_imag(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 1));
    OT_CHECK(need_array(x, 0));
    const ot_shape *s = arr(x, 0);
    if (!ot_dtype_is_complex(s->dtype) && !ot_dtype_is_float(s->dtype))
        return BAD("operand 0 (%s) must be complex or floating point, not %s", x->ops[0]->name,
                   ot_dtype_name(s->dtype));
    ot_dtype t = ot_dtype_is_complex(s->dtype) ? ot_dtype_complex_part(s->dtype) : s->dtype;
    *out = out_array(t, s->rank, s->dims);
    return OT_OK;
}

/* fft: transforms over the innermost fft_length.size() (1 to 3) dimensions, as XLA's
 * InferFftShape. */
static ot_status infer_fft(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 1));
    OT_CHECK(need_array(x, 0));
    const ot_shape *s = arr(x, 0);
    int64_t type = x->a->index;
    int k = x->a->ndims;
    const int64_t *len = x->a->dims;
    if (type < 0 || type >= OT_FFT_TYPE_COUNT)
        return INVALID("invalid fft_type %lld", (long long)type);
    if (k < 1 || k > 3) return INVALID("fft_length must have 1 to 3 entries, got %d", k);
    if (s->rank < k)
        return BAD("operand 0 (%s) %s has rank %d, below fft_length's %d entries", x->ops[0]->name,
                   A(s), s->rank, k);
    for (int d = 0; d < k; d++)
        if (len[d] < 1 || len[d] > (INT64_C(1) << 31))
            return INVALID("fft_length[%d] = %lld is out of range [1, 2^31]", d, (long long)len[d]);
    bool complex_in = type != OT_FFT_RFFT;
    if (complex_in ? !ot_dtype_is_complex(s->dtype) : (s->dtype != OT_F32 && s->dtype != OT_F64))
        return BAD("%s needs a %s operand, not %s", ir_fft_type_name((int)type),
                   complex_in ? "complex" : "f32 or f64", ot_dtype_name(s->dtype));
    int64_t d[OT_MAX_RANK];
    memcpy(d, s->dims, sizeof s->dims);
    int first = s->rank - k;
    for (int q = 0; q < k; q++) {
        int64_t want = len[q];
        if (type == OT_FFT_IRFFT && q == k - 1) want = len[q] / 2 + 1;
        if (s->dims[first + q] != want)
            return BAD("%s: operand 0 (%s) %s dimension %d is %lld, fft_length needs %lld",
                       ir_fft_type_name((int)type), x->ops[0]->name, A(s), first + q,
                       (long long)s->dims[first + q], (long long)want);
    }
    ot_dtype t = s->dtype;
    if (type == OT_FFT_RFFT) {
        t = s->dtype == OT_F32 ? OT_C64 : OT_C128;
        d[s->rank - 1] = len[k - 1] / 2 + 1;
    } else if (type == OT_FFT_IRFFT) {
        t = ot_dtype_complex_part(s->dtype);
        d[s->rank - 1] = len[k - 1];
    }
    *out = out_array(t, s->rank, d);
    return OT_OK;
}

static ot_status infer_broadcast(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 1));
    OT_CHECK(need_array(x, 0));
    OT_CHECK(need_hint_array(x));
    const ot_shape *s = arr(x, 0), *r = &x->hint->array;
    if (x->a->ndims != s->rank)
        return BAD("dimensions has %d entries, operand 0 (%s) %s has rank %d", x->a->ndims,
                   x->ops[0]->name, A(s), s->rank);
    OT_CHECK(check_dim_list(x, "dimensions", x->a->dims, x->a->ndims, r->rank));
    if (r->dtype != s->dtype)
        return BAD("result dtype %s differs from operand dtype %s", ot_dtype_name(r->dtype),
                   ot_dtype_name(s->dtype));
    for (int i = 0; i < s->rank; i++)
        if (s->dims[i] != r->dims[x->a->dims[i]])
            return BAD(
                "operand dimension %d (size %lld) maps to result dimension %lld of size %lld", i,
                (long long)s->dims[i], (long long)x->a->dims[i], (long long)r->dims[x->a->dims[i]]);
    *out = ot_ir_shape_array(*r);
    return OT_OK;
}

static ot_status infer_reshape(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 1));
    OT_CHECK(need_array(x, 0));
    OT_CHECK(need_hint_array(x));
    const ot_shape *s = arr(x, 0), *r = &x->hint->array;
    if (x->op == OT_OP_RESHAPE) {
        if (r->dtype != s->dtype)
            return BAD("result dtype %s differs from operand dtype %s", ot_dtype_name(r->dtype),
                       ot_dtype_name(s->dtype));
        if (ot_shape_numel_unchecked(r) != ot_shape_numel_unchecked(s))
            return BAD("operand 0 (%s) %s has %lld elements, result %s has %lld", x->ops[0]->name,
                       A(s), (long long)ot_shape_numel_unchecked(s), A(r),
                       (long long)ot_shape_numel_unchecked(r));
    } else if (ot_shape_nbytes_unchecked(r) != ot_shape_nbytes_unchecked(s)) {
        return BAD("operand 0 (%s) %s has %lld bytes, result %s has %lld", x->ops[0]->name, A(s),
                   (long long)ot_shape_nbytes_unchecked(s), A(r),
                   (long long)ot_shape_nbytes_unchecked(r));
    }
    *out = ot_ir_shape_array(*r);
    return OT_OK;
}

static ot_status infer_transpose(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 1));
    OT_CHECK(need_array(x, 0));
    const ot_shape *s = arr(x, 0);
    if (x->a->ndims != s->rank)
        return BAD("permutation has %d entries, operand 0 (%s) %s has rank %d", x->a->ndims,
                   x->ops[0]->name, A(s), s->rank);
    OT_CHECK(check_dim_list(x, "dimensions", x->a->dims, x->a->ndims, s->rank));
    int64_t d[OT_MAX_RANK];
    for (int i = 0; i < s->rank; i++) d[i] = s->dims[x->a->dims[i]];
    *out = out_array(s->dtype, s->rank, d);
    return OT_OK;
}

static ot_status infer_slice(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 1));
    OT_CHECK(need_array(x, 0));
    const ot_shape *s = arr(x, 0);
    if (!x->a->slice && s->rank) return INVALID("slice attribute missing");
    int64_t d[OT_MAX_RANK];
    for (int i = 0; i < s->rank; i++) {
        const ot_slice_dim *q = &x->a->slice[i];
        if (q->stride <= 0)
            return INVALID("dimension %d: stride %lld must be positive", i, (long long)q->stride);
        if (q->start < 0 || q->start > q->limit || q->limit > s->dims[i])
            return BAD("dimension %d: [%lld:%lld] is outside operand 0 (%s) %s", i,
                       (long long)q->start, (long long)q->limit, x->ops[0]->name, A(s));
        d[i] = (q->limit - q->start + q->stride - 1) / q->stride;
    }
    *out = out_array(s->dtype, s->rank, d);
    return OT_OK;
}

static ot_status infer_dynamic_slice(const ictx *x, ot_ir_shape *out) {
    if (x->n < 1) return INVALID("expects an operand and indices");
    OT_CHECK(need_array(x, 0));
    const ot_shape *s = arr(x, 0);
    if (x->n != 1 + s->rank)
        return INVALID("operand 0 (%s) %s has rank %d: expects %d scalar start indices, got %d",
                       x->ops[0]->name, A(s), s->rank, s->rank, x->n - 1);
    for (int i = 1; i < x->n; i++) OT_CHECK(need_int_scalar(x, i));
    if (x->a->ndims != s->rank)
        return BAD("dynamic_slice_sizes has %d entries, operand rank is %d", x->a->ndims, s->rank);
    for (int i = 0; i < s->rank; i++)
        if (x->a->dims[i] < 0 || x->a->dims[i] > s->dims[i])
            return BAD("dimension %d: slice size %lld exceeds operand 0 (%s) %s", i,
                       (long long)x->a->dims[i], x->ops[0]->name, A(s));
    *out = out_array(s->dtype, s->rank, x->a->dims);
    return OT_OK;
}

static ot_status infer_dus(const ictx *x, ot_ir_shape *out) {
    if (x->n < 2) return INVALID("expects an operand, an update and indices");
    OT_CHECK(need_array(x, 0));
    OT_CHECK(need_array(x, 1));
    const ot_shape *s = arr(x, 0), *u = arr(x, 1);
    if (x->n != 2 + s->rank)
        return INVALID("operand 0 (%s) has rank %d: expects %d scalar start indices, got %d",
                       x->ops[0]->name, s->rank, s->rank, x->n - 2);
    for (int i = 2; i < x->n; i++) OT_CHECK(need_int_scalar(x, i));
    OT_CHECK(need_same_dtype(x, 0, 1));
    if (u->rank != s->rank)
        return BAD("update (%s) %s and operand (%s) %s differ in rank", x->ops[1]->name, A(u),
                   x->ops[0]->name, A(s));
    for (int i = 0; i < s->rank; i++)
        if (u->dims[i] > s->dims[i])
            return BAD("dimension %d: update (%s) %s is larger than operand (%s) %s", i,
                       x->ops[1]->name, A(u), x->ops[0]->name, A(s));
    *out = ot_ir_shape_array(*s);
    return OT_OK;
}

static ot_status infer_concatenate(const ictx *x, ot_ir_shape *out) {
    if (x->n < 1) return INVALID("expects at least one operand");
    OT_CHECK(need_array(x, 0));
    const ot_shape *s = arr(x, 0);
    int64_t dim = x->a->index;
    if (dim < 0 || dim >= s->rank)
        return INVALID("dimension %lld is outside operand 0 (%s) %s", (long long)dim,
                       x->ops[0]->name, A(s));
    int64_t d[OT_MAX_RANK];
    memcpy(d, s->dims, sizeof d);
    for (int i = 1; i < x->n; i++) {
        OT_CHECK(need_array(x, i));
        OT_CHECK(need_same_dtype(x, 0, i));
        const ot_shape *t = arr(x, i);
        if (t->rank != s->rank)
            return BAD("operand %d (%s) %s and operand 0 (%s) %s differ in rank", i,
                       x->ops[i]->name, A(t), x->ops[0]->name, A(s));
        for (int k = 0; k < s->rank; k++)
            if (k != dim && t->dims[k] != s->dims[k])
                return BAD("operand %d (%s) %s and operand 0 (%s) %s differ in dimension %d", i,
                           x->ops[i]->name, A(t), x->ops[0]->name, A(s), k);
        d[dim] += t->dims[dim];
    }
    *out = out_array(s->dtype, s->rank, d);
    return OT_OK;
}

static ot_status infer_pad(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 2));
    OT_CHECK(need_array(x, 0));
    OT_CHECK(need_scalar(x, 1));
    OT_CHECK(need_same_dtype(x, 0, 1));
    const ot_shape *s = arr(x, 0);
    if (!x->a->padding && s->rank) return INVALID("padding attribute missing");
    int64_t d[OT_MAX_RANK];
    for (int i = 0; i < s->rank; i++) {
        const ot_pad_dim *p = &x->a->padding[i];
        if (p->interior < 0)
            return INVALID("dimension %d: interior padding %lld is negative", i,
                           (long long)p->interior);
        if (p->lo > (1ll << 40) || p->lo < -(1ll << 40) || p->hi > (1ll << 40) ||
            p->hi < -(1ll << 40) || p->interior > (1ll << 40))
            return INVALID("dimension %d: padding out of range", i);
        int64_t n = s->dims[i];
        d[i] = p->lo + p->hi + n + (n > 0 ? (n - 1) * p->interior : 0);
        if (d[i] < 0)
            return BAD("dimension %d: padding %lld_%lld_%lld gives a negative size (%lld)", i,
                       (long long)p->lo, (long long)p->hi, (long long)p->interior, (long long)d[i]);
    }
    *out = out_array(s->dtype, s->rank, d);
    return OT_OK;
}

static ot_status infer_reverse(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 1));
    OT_CHECK(need_array(x, 0));
    OT_CHECK(check_dim_list(x, "dimensions", x->a->dims, x->a->ndims, arr(x, 0)->rank));
    *out = ot_ir_shape_array(*arr(x, 0));
    return OT_OK;
}

static bool in_list(int64_t v, const int64_t *l, int n) {
    for (int i = 0; i < n; i++)
        if (l[i] == v) return true;
    return false;
}

static ot_status check_sorted(const ictx *x, const char *what, const int64_t *l, int n) {
    for (int i = 1; i < n; i++)
        if (l[i] <= l[i - 1]) return INVALID("%s must be sorted and distinct", what);
    return OT_OK;
}

static ot_status infer_gather(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 2));
    OT_CHECK(need_array(x, 0));
    OT_CHECK(need_array(x, 1));
    const ot_gather_dims *g = x->a->gather;
    if (!g) return INVALID("gather dimension numbers missing");
    const ot_shape *s = arr(x, 0), *ix = arr(x, 1);
    if (!ot_dtype_is_integer(ix->dtype))
        return BAD("start indices (%s) must be integers, not %s", x->ops[1]->name,
                   ot_dtype_name(ix->dtype));
    if (g->noffset < 0 || g->noffset > OT_MAX_RANK || g->ncollapsed < 0 ||
        g->ncollapsed > OT_MAX_RANK || g->nstart_index_map < 0 ||
        g->nstart_index_map > OT_MAX_RANK || g->nbatching < 0 || g->nbatching > OT_MAX_RANK ||
        g->nslice_sizes < 0 || g->nslice_sizes > OT_MAX_RANK)
        return INVALID("gather dimension numbers have out-of-range counts");
    if (g->index_vector_dim < 0 || g->index_vector_dim > ix->rank)
        return BAD("index_vector_dim %lld is outside [0, %d] for start indices %s",
                   (long long)g->index_vector_dim, ix->rank, A(ix));
    int64_t nidx = g->index_vector_dim == ix->rank ? 1 : ix->dims[g->index_vector_dim];
    if (nidx != g->nstart_index_map)
        return BAD("start indices %s have %lld index components (dimension %lld), "
                   "start_index_map has %d",
                   A(ix), (long long)nidx, (long long)g->index_vector_dim, g->nstart_index_map);
    if (g->nslice_sizes != s->rank)
        return BAD("slice_sizes has %d entries, operand 0 (%s) %s has rank %d", g->nslice_sizes,
                   x->ops[0]->name, A(s), s->rank);
    OT_CHECK(
        check_dim_list(x, "start_index_map", g->start_index_map, g->nstart_index_map, s->rank));
    OT_CHECK(
        check_dim_list(x, "collapsed_slice_dims", g->collapsed_slice_dims, g->ncollapsed, s->rank));
    OT_CHECK(check_sorted(x, "collapsed_slice_dims", g->collapsed_slice_dims, g->ncollapsed));
    OT_CHECK(check_dim_list(x, "operand_batching_dims", g->operand_batching_dims, g->nbatching,
                            s->rank));
    for (int i = 0; i < s->rank; i++)
        if (g->slice_sizes[i] < 0 || g->slice_sizes[i] > s->dims[i])
            return BAD("slice_sizes[%d] = %lld is outside operand 0 (%s) %s", i,
                       (long long)g->slice_sizes[i], x->ops[0]->name, A(s));
    for (int i = 0; i < g->ncollapsed; i++) {
        if (g->slice_sizes[g->collapsed_slice_dims[i]] > 1)
            return BAD("collapsed dimension %lld has slice size %lld (must be 0 or 1)",
                       (long long)g->collapsed_slice_dims[i],
                       (long long)g->slice_sizes[g->collapsed_slice_dims[i]]);
        if (in_list(g->collapsed_slice_dims[i], g->operand_batching_dims, g->nbatching))
            return INVALID("dimension %lld is both collapsed and a batching dimension",
                           (long long)g->collapsed_slice_dims[i]);
    }
    int batch_rank = ix->rank - (g->index_vector_dim < ix->rank ? 1 : 0);
    if (g->nbatching) {
        OT_CHECK(check_dim_list(x, "start_indices_batching_dims", g->start_indices_batching_dims,
                                g->nbatching, ix->rank));
        for (int i = 0; i < g->nbatching; i++)
            if (g->start_indices_batching_dims[i] == g->index_vector_dim)
                return INVALID("start_indices_batching_dims contains index_vector_dim");
    }
    int nwindow = s->rank - g->ncollapsed - g->nbatching;
    if (g->noffset != nwindow)
        return BAD("offset_dims has %d entries, expected %d (operand rank %d minus %d collapsed "
                   "and %d batching dims)",
                   g->noffset, nwindow, s->rank, g->ncollapsed, g->nbatching);
    OT_CHECK(check_sorted(x, "offset_dims", g->offset_dims, g->noffset));
    int out_rank = batch_rank + g->noffset;
    if (out_rank > OT_MAX_RANK) return BAD("result rank %d exceeds %d", out_rank, OT_MAX_RANK);
    OT_CHECK(check_dim_list(x, "offset_dims", g->offset_dims, g->noffset, out_rank));
    int64_t d[OT_MAX_RANK];
    int oi = 0, bi = 0;
    for (int i = 0; i < out_rank; i++) {
        if (in_list(i, g->offset_dims, g->noffset)) {
            while (in_list(oi, g->collapsed_slice_dims, g->ncollapsed) ||
                   in_list(oi, g->operand_batching_dims, g->nbatching))
                oi++;
            d[i] = g->slice_sizes[oi++];
        } else {
            if (bi == g->index_vector_dim) bi++;
            d[i] = ix->dims[bi++];
        }
    }
    *out = out_array(s->dtype, out_rank, d);
    return OT_OK;
}

static ot_status infer_scatter(const ictx *x, ot_ir_shape *out) {
    if (x->n < 3 || (x->n - 1) % 2 != 0)
        return INVALID("expects N operands, the indices and N updates (got %d operands)", x->n);
    int n = (x->n - 1) / 2;
    const ot_scatter_dims *g = x->a->scatter;
    if (!g) return INVALID("scatter dimension numbers missing");
    OT_CHECK(need_called(x, 1));
    for (int i = 0; i < x->n; i++) OT_CHECK(need_array(x, i));
    const ot_shape *s = arr(x, 0), *ix = arr(x, n);
    if (!ot_dtype_is_integer(ix->dtype))
        return BAD("scatter indices (%s) must be integers", x->ops[n]->name);
    if (g->nupdate_window < 0 || g->nupdate_window > OT_MAX_RANK || g->ninserted < 0 ||
        g->ninserted > OT_MAX_RANK || g->nscatter_to_operand < 0 ||
        g->nscatter_to_operand > OT_MAX_RANK || g->nbatching < 0 || g->nbatching > OT_MAX_RANK)
        return INVALID("scatter dimension numbers have out-of-range counts");
    for (int i = 1; i < n; i++) {
        OT_CHECK(dims_mismatch(x, 0, i));
    }
    if (g->index_vector_dim < 0 || g->index_vector_dim > ix->rank)
        return BAD("index_vector_dim %lld is outside [0, %d] for indices %s",
                   (long long)g->index_vector_dim, ix->rank, A(ix));
    int64_t nidx = g->index_vector_dim == ix->rank ? 1 : ix->dims[g->index_vector_dim];
    if (nidx != g->nscatter_to_operand)
        return BAD("indices %s have %lld index components, scatter_dims_to_operand_dims has %d",
                   A(ix), (long long)nidx, g->nscatter_to_operand);
    OT_CHECK(check_dim_list(x, "scatter_dims_to_operand_dims", g->scatter_dims_to_operand_dims,
                            g->nscatter_to_operand, s->rank));
    OT_CHECK(
        check_dim_list(x, "inserted_window_dims", g->inserted_window_dims, g->ninserted, s->rank));
    OT_CHECK(check_sorted(x, "inserted_window_dims", g->inserted_window_dims, g->ninserted));
    OT_CHECK(
        check_dim_list(x, "input_batching_dims", g->input_batching_dims, g->nbatching, s->rank));
    if (g->nupdate_window + g->ninserted + g->nbatching != s->rank)
        return BAD("update_window_dims (%d) + inserted_window_dims (%d) + input_batching_dims "
                   "(%d) must equal the operand rank %d",
                   g->nupdate_window, g->ninserted, g->nbatching, s->rank);
    OT_CHECK(check_sorted(x, "update_window_dims", g->update_window_dims, g->nupdate_window));
    int batch_rank = ix->rank - (g->index_vector_dim < ix->rank ? 1 : 0);
    ot_dtype acc[OT_MAX_RANK + 1], in[OT_MAX_RANK + 1];
    if (n > OT_MAX_RANK + 1) return INVALID("too many scatter operands (%d)", n);
    for (int k = 0; k < n; k++) {
        const ot_shape *u = arr(x, n + 1 + k);
        if (u->dtype != arr(x, k)->dtype)
            return BAD("update %d (%s) is %s but operand %d is %s", k, x->ops[n + 1 + k]->name,
                       ot_dtype_name(u->dtype), k, ot_dtype_name(arr(x, k)->dtype));
        if (u->rank != g->nupdate_window + batch_rank)
            return BAD("update %d (%s) %s has rank %d, expected %d (window %d + scatter %d)", k,
                       x->ops[n + 1 + k]->name, A(u), u->rank, g->nupdate_window + batch_rank,
                       g->nupdate_window, batch_rank);
        OT_CHECK(check_dim_list(x, "update_window_dims", g->update_window_dims, g->nupdate_window,
                                u->rank));
        /* window dims: bounded by the operand's non-inserted, non-batching dims */
        int oi = 0, wi = 0, bi = 0;
        for (int d = 0; d < u->rank; d++) {
            if (in_list(d, g->update_window_dims, g->nupdate_window)) {
                while (in_list(oi, g->inserted_window_dims, g->ninserted) ||
                       in_list(oi, g->input_batching_dims, g->nbatching))
                    oi++;
                if (u->dims[d] > s->dims[oi])
                    return BAD("update %d dimension %d (size %lld) exceeds operand dimension %d "
                               "(size %lld)",
                               k, d, (long long)u->dims[d], oi, (long long)s->dims[oi]);
                oi++;
                wi++;
            } else {
                if (bi == g->index_vector_dim) bi++;
                if (u->dims[d] != ix->dims[bi])
                    return BAD("update %d dimension %d (size %lld) must equal indices dimension "
                               "%d (size %lld)",
                               k, d, (long long)u->dims[d], bi, (long long)ix->dims[bi]);
                bi++;
            }
        }
        acc[k] = arr(x, k)->dtype;
        in[k] = u->dtype;
    }
    OT_CHECK(check_reducer(x, x->called[0], acc, in, n));
    if (n == 1) {
        *out = ot_ir_shape_array(*s);
        return OT_OK;
    }
    ot_ir_shape el[OT_MAX_RANK + 1];
    for (int k = 0; k < n; k++) el[k] = ot_ir_shape_array(*arr(x, k));
    return make_tuple(x, el, n, out);
}

static ot_status infer_reduce(const ictx *x, ot_ir_shape *out) {
    if (x->n < 2 || x->n % 2) return INVALID("expects N inputs and N init values (got %d)", x->n);
    int n = x->n / 2;
    if (n > OT_MAX_RANK + 1) return INVALID("too many inputs (%d)", n);
    OT_CHECK(need_called(x, 1));
    for (int i = 0; i < n; i++) {
        OT_CHECK(need_array(x, i));
        if (i) OT_CHECK(dims_mismatch(x, 0, i));
        OT_CHECK(need_scalar(x, n + i));
    }
    const ot_shape *s = arr(x, 0);
    OT_CHECK(check_dim_list(x, "dimensions", x->a->dims, x->a->ndims, s->rank));
    ot_dtype acc[OT_MAX_RANK + 1], in[OT_MAX_RANK + 1];
    for (int i = 0; i < n; i++) {
        acc[i] = arr(x, n + i)->dtype;
        in[i] = arr(x, i)->dtype;
    }
    OT_CHECK(check_reducer(x, x->called[0], acc, in, n));
    int64_t d[OT_MAX_RANK];
    int r = 0;
    for (int i = 0; i < s->rank; i++)
        if (!in_list(i, x->a->dims, x->a->ndims)) d[r++] = s->dims[i];
    if (n == 1) {
        *out = out_array(acc[0], r, d);
        return OT_OK;
    }
    ot_ir_shape el[OT_MAX_RANK + 1];
    for (int k = 0; k < n; k++) el[k] = out_array(acc[k], r, d);
    return make_tuple(x, el, n, out);
}

static ot_status infer_reduce_window(const ictx *x, ot_ir_shape *out) {
    if (x->n < 2 || x->n % 2) return INVALID("expects N inputs and N init values (got %d)", x->n);
    int n = x->n / 2;
    if (n > OT_MAX_RANK + 1) return INVALID("too many inputs (%d)", n);
    OT_CHECK(need_called(x, 1));
    for (int i = 0; i < n; i++) {
        OT_CHECK(need_array(x, i));
        if (i) OT_CHECK(dims_mismatch(x, 0, i));
        OT_CHECK(need_scalar(x, n + i));
    }
    const ot_shape *s = arr(x, 0);
    int64_t d[OT_MAX_RANK];
    OT_CHECK(window_out(x, x->a->window, s, d, NULL, s->rank));
    ot_dtype acc[OT_MAX_RANK + 1], in[OT_MAX_RANK + 1];
    for (int i = 0; i < n; i++) {
        acc[i] = arr(x, n + i)->dtype;
        in[i] = arr(x, i)->dtype;
    }
    OT_CHECK(check_reducer(x, x->called[0], acc, in, n));
    if (n == 1) {
        *out = out_array(acc[0], s->rank, d);
        return OT_OK;
    }
    ot_ir_shape el[OT_MAX_RANK + 1];
    for (int k = 0; k < n; k++) el[k] = out_array(acc[k], s->rank, d);
    return make_tuple(x, el, n, out);
}

static ot_status infer_select_and_scatter(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 3));
    OT_CHECK(need_called(x, 2));
    OT_CHECK(need_array(x, 0));
    OT_CHECK(need_array(x, 1));
    OT_CHECK(need_scalar(x, 2));
    OT_CHECK(need_same_dtype(x, 0, 1));
    OT_CHECK(need_same_dtype(x, 0, 2));
    const ot_shape *s = arr(x, 0), *src = arr(x, 1);
    int64_t d[OT_MAX_RANK];
    OT_CHECK(window_out(x, x->a->window, s, d, NULL, s->rank));
    ot_shape w = *s;
    memcpy(w.dims, d, sizeof d);
    if (!same_dims(&w, src))
        return BAD("source (%s) %s must have the window output shape %s", x->ops[1]->name, A(src),
                   A(&w));
    ot_ir_shape sc = ot_ir_shape_scalar(s->dtype);
    ot_ir_shape two[2] = {sc, sc};
    const ot_computation *sel = x->called[0];
    OT_CHECK(check_params(x, sel, two, 2, "select"));
    ot_ir_shape pr = ot_ir_shape_scalar(OT_PRED);
    if (!ot_ir_shape_equal(&sel->root->shape, &pr))
        return BAD("select computation %s returns %s, expected pred[]", sel->name,
                   S(&sel->root->shape));
    ot_dtype t = s->dtype;
    OT_CHECK(check_reducer(x, x->called[1], &t, &t, 1));
    *out = ot_ir_shape_array(*s);
    return OT_OK;
}

static ot_status infer_sort(const ictx *x, ot_ir_shape *out) {
    if (x->n < 1) return INVALID("expects at least one operand");
    if (x->n > 2 * OT_MAX_RANK) return INVALID("too many operands (%d)", x->n);
    OT_CHECK(need_called(x, 1));
    for (int i = 0; i < x->n; i++) {
        OT_CHECK(need_array(x, i));
        if (i) OT_CHECK(dims_mismatch(x, 0, i));
    }
    const ot_shape *s = arr(x, 0);
    if (x->a->index < 0 || x->a->index >= (s->rank ? s->rank : 1))
        return INVALID("dimension %lld is outside operand 0 (%s) %s", (long long)x->a->index,
                       x->ops[0]->name, A(s));
    ot_ir_shape want[4 * OT_MAX_RANK];
    for (int i = 0; i < x->n; i++) {
        want[2 * i] = ot_ir_shape_scalar(arr(x, i)->dtype);
        want[2 * i + 1] = want[2 * i];
    }
    const ot_computation *cmp = x->called[0];
    OT_CHECK(check_params(x, cmp, want, 2 * x->n, "comparator"));
    ot_ir_shape pr = ot_ir_shape_scalar(OT_PRED);
    if (!ot_ir_shape_equal(&cmp->root->shape, &pr))
        return BAD("comparator computation %s returns %s, expected pred[]", cmp->name,
                   S(&cmp->root->shape));
    if (x->n == 1) {
        *out = ot_ir_shape_array(*s);
        return OT_OK;
    }
    ot_ir_shape el[2 * OT_MAX_RANK];
    for (int k = 0; k < x->n; k++) el[k] = ot_ir_shape_array(*arr(x, k));
    return make_tuple(x, el, x->n, out);
}

static ot_status infer_topk(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 1));
    OT_CHECK(need_array(x, 0));
    const ot_shape *s = arr(x, 0);
    if (s->rank < 1) return BAD("operand 0 (%s) must have rank >= 1", x->ops[0]->name);
    if (x->a->index < 0 || x->a->index > s->dims[s->rank - 1])
        return BAD("k = %lld exceeds the last dimension of operand 0 (%s) %s",
                   (long long)x->a->index, x->ops[0]->name, A(s));
    int64_t d[OT_MAX_RANK];
    memcpy(d, s->dims, sizeof d);
    d[s->rank - 1] = x->a->index;
    ot_ir_shape el[2] = {out_array(s->dtype, s->rank, d), out_array(OT_S32, s->rank, d)};
    return make_tuple(x, el, 2, out);
}

static ot_status infer_map(const ictx *x, ot_ir_shape *out) {
    if (x->n < 1 || x->n > 2 * OT_MAX_RANK)
        return INVALID("expects 1..%d operands", 2 * OT_MAX_RANK);
    OT_CHECK(need_called(x, 1));
    ot_ir_shape want[2 * OT_MAX_RANK];
    for (int i = 0; i < x->n; i++) {
        OT_CHECK(need_array(x, i));
        if (i) OT_CHECK(dims_mismatch(x, 0, i));
        want[i] = ot_ir_shape_scalar(arr(x, i)->dtype);
    }
    const ot_computation *f = x->called[0];
    OT_CHECK(check_params(x, f, want, x->n, "map"));
    const ot_ir_shape *r = &f->root->shape;
    if (r->kind != OT_IR_ARRAY || r->array.rank != 0)
        return BAD("map computation %s must return a scalar, not %s", f->name, S(r));
    *out = out_array(r->array.dtype, arr(x, 0)->rank, arr(x, 0)->dims);
    return OT_OK;
}

static ot_status infer_dot(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 2));
    OT_CHECK(need_array(x, 0));
    OT_CHECK(need_array(x, 1));
    const ot_dot_dims *dn = x->a->dot;
    if (!dn) return INVALID("dot dimension numbers missing");
    const ot_shape *l = arr(x, 0), *r = arr(x, 1);
    if (dn->nbatch < 0 || dn->nbatch > OT_MAX_RANK || dn->ncontract < 0 ||
        dn->ncontract > OT_MAX_RANK)
        return INVALID("dimension number counts out of range");
    OT_CHECK(check_dim_list(x, "lhs_batch_dims", dn->lhs_batch, dn->nbatch, l->rank));
    OT_CHECK(check_dim_list(x, "rhs_batch_dims", dn->rhs_batch, dn->nbatch, r->rank));
    OT_CHECK(check_dim_list(x, "lhs_contracting_dims", dn->lhs_contract, dn->ncontract, l->rank));
    OT_CHECK(check_dim_list(x, "rhs_contracting_dims", dn->rhs_contract, dn->ncontract, r->rank));
    for (int i = 0; i < dn->nbatch; i++) {
        if (in_list(dn->lhs_batch[i], dn->lhs_contract, dn->ncontract) ||
            in_list(dn->rhs_batch[i], dn->rhs_contract, dn->ncontract))
            return INVALID("a dimension is both batch and contracting");
        if (l->dims[dn->lhs_batch[i]] != r->dims[dn->rhs_batch[i]])
            return BAD("batch dimension %d: lhs dimension %lld (size %lld) != rhs dimension %lld "
                       "(size %lld); lhs %s, rhs %s",
                       i, (long long)dn->lhs_batch[i], (long long)l->dims[dn->lhs_batch[i]],
                       (long long)dn->rhs_batch[i], (long long)r->dims[dn->rhs_batch[i]], A(l),
                       A(r));
    }
    for (int i = 0; i < dn->ncontract; i++)
        if (l->dims[dn->lhs_contract[i]] != r->dims[dn->rhs_contract[i]])
            return BAD("contracting dimension %d: lhs dimension %lld (size %lld) != rhs dimension "
                       "%lld (size %lld); lhs %s, rhs %s",
                       i, (long long)dn->lhs_contract[i], (long long)l->dims[dn->lhs_contract[i]],
                       (long long)dn->rhs_contract[i], (long long)r->dims[dn->rhs_contract[i]],
                       A(l), A(r));
    if (x->a->nprecision != 0 && x->a->nprecision != 2)
        return INVALID("precision_config has %d entries (0 or 2)", x->a->nprecision);
    int rank = l->rank + r->rank - dn->nbatch - 2 * dn->ncontract;
    if (rank > OT_MAX_RANK) return BAD("result rank %d exceeds %d", rank, OT_MAX_RANK);
    int64_t d[OT_MAX_RANK];
    int k = 0;
    for (int i = 0; i < dn->nbatch; i++) d[k++] = l->dims[dn->lhs_batch[i]];
    for (int i = 0; i < l->rank; i++)
        if (!in_list(i, dn->lhs_batch, dn->nbatch) && !in_list(i, dn->lhs_contract, dn->ncontract))
            d[k++] = l->dims[i];
    for (int i = 0; i < r->rank; i++)
        if (!in_list(i, dn->rhs_batch, dn->nbatch) && !in_list(i, dn->rhs_contract, dn->ncontract))
            d[k++] = r->dims[i];
    ot_dtype t = l->dtype;
    if (x->hint && x->hint->kind == OT_IR_ARRAY && ot_dtype_size(x->hint->array.dtype))
        t = x->hint->array.dtype; /* preferred_element_type */
    else if (l->dtype != r->dtype)
        return BAD("lhs is %s and rhs is %s: mixed operand types need a result type",
                   ot_dtype_name(l->dtype), ot_dtype_name(r->dtype));
    if (l->dtype == OT_PRED || r->dtype == OT_PRED)
        return BAD("operands must be numeric, not pred");
    *out = out_array(t, rank, d);
    return OT_OK;
}

static ot_status infer_convolution(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 2));
    OT_CHECK(need_array(x, 0));
    OT_CHECK(need_array(x, 1));
    const ot_conv_dims *dn = x->a->conv;
    if (!dn) return INVALID("convolution dimension numbers (dim_labels) missing");
    const ot_shape *in = arr(x, 0), *k = arr(x, 1);
    int ns = dn->nspatial;
    if (ns < 0 || ns + 2 > OT_MAX_RANK) return INVALID("%d spatial dimensions out of range", ns);
    if (in->rank != ns + 2 || k->rank != ns + 2)
        return BAD("with %d spatial dimensions, input %s and kernel %s must have rank %d", ns,
                   A(in), A(k), ns + 2);
    int64_t il[OT_MAX_RANK], kl[OT_MAX_RANK], ol[OT_MAX_RANK];
    il[0] = dn->input_batch;
    il[1] = dn->input_feature;
    kl[0] = dn->kernel_input_feature;
    kl[1] = dn->kernel_output_feature;
    ol[0] = dn->output_batch;
    ol[1] = dn->output_feature;
    for (int i = 0; i < ns; i++) {
        il[2 + i] = dn->input_spatial[i];
        kl[2 + i] = dn->kernel_spatial[i];
        ol[2 + i] = dn->output_spatial[i];
    }
    OT_CHECK(check_dim_list(x, "input dimension labels", il, ns + 2, ns + 2));
    OT_CHECK(check_dim_list(x, "kernel dimension labels", kl, ns + 2, ns + 2));
    OT_CHECK(check_dim_list(x, "output dimension labels", ol, ns + 2, ns + 2));
    int64_t fgc = x->a->feature_group_count ? x->a->feature_group_count : 1;
    int64_t bgc = x->a->batch_group_count ? x->a->batch_group_count : 1;
    if (fgc < 1 || bgc < 1) return INVALID("group counts must be positive");
    if (fgc > 1 && bgc > 1)
        return INVALID("feature_group_count and batch_group_count cannot both exceed 1");
    int64_t ib = in->dims[dn->input_batch], ifeat = in->dims[dn->input_feature];
    int64_t kif = k->dims[dn->kernel_input_feature], kof = k->dims[dn->kernel_output_feature];
    if (ifeat % fgc != 0)
        return BAD("input feature dimension %lld (size %lld) is not divisible by "
                   "feature_group_count %lld",
                   (long long)dn->input_feature, (long long)ifeat, (long long)fgc);
    if (ifeat / fgc != kif)
        return BAD("input feature size %lld / feature_group_count %lld != kernel input feature "
                   "size %lld (kernel dimension %lld); input %s, kernel %s",
                   (long long)ifeat, (long long)fgc, (long long)kif,
                   (long long)dn->kernel_input_feature, A(in), A(k));
    if (kof % fgc != 0)
        return BAD("kernel output features %lld not divisible by feature_group_count %lld",
                   (long long)kof, (long long)fgc);
    if (ib % bgc != 0)
        return BAD("input batch %lld not divisible by batch_group_count %lld", (long long)ib,
                   (long long)bgc);
    if (kof % bgc != 0)
        return BAD("kernel output features %lld not divisible by batch_group_count %lld",
                   (long long)kof, (long long)bgc);
    const ot_window *w = x->a->window;
    if (!w && ns == 0) {
        static const ot_window empty;
        w = &empty;
    }
    if (!w) return INVALID("window missing");
    int sp[OT_MAX_RANK];
    for (int i = 0; i < ns; i++) sp[i] = (int)dn->input_spatial[i];
    for (int i = 0; i < ns && i < w->rank; i++)
        if (w->dims[i].size != k->dims[dn->kernel_spatial[i]])
            return BAD("window size %lld in spatial dimension %d != kernel dimension %lld (size "
                       "%lld)",
                       (long long)w->dims[i].size, i, (long long)dn->kernel_spatial[i],
                       (long long)k->dims[dn->kernel_spatial[i]]);
    int64_t so[OT_MAX_RANK];
    OT_CHECK(window_out(x, w, in, so, sp, ns));
    if (x->a->nprecision != 0 && x->a->nprecision != 2)
        return INVALID("precision_config has %d entries (0 or 2)", x->a->nprecision);
    int64_t d[OT_MAX_RANK];
    d[dn->output_batch] = ib / bgc;
    d[dn->output_feature] = kof;
    for (int i = 0; i < ns; i++) d[dn->output_spatial[i]] = so[i];
    ot_dtype t = in->dtype;
    if (x->hint && x->hint->kind == OT_IR_ARRAY && ot_dtype_size(x->hint->array.dtype))
        t = x->hint->array.dtype;
    else if (in->dtype != k->dtype)
        return BAD("input is %s and kernel is %s: mixed operand types need a result type",
                   ot_dtype_name(in->dtype), ot_dtype_name(k->dtype));
    *out = out_array(t, ns + 2, d);
    return OT_OK;
}

static ot_status infer_call_like(const ictx *x, ot_ir_shape *out, const char *role) {
    OT_CHECK(need_called(x, 1));
    const ot_computation *f = x->called[0];
    if (f->nparams != x->n)
        return BAD("%s computation %s takes %d parameter(s), given %d operand(s)", role, f->name,
                   f->nparams, x->n);
    for (int i = 0; i < x->n; i++) {
        const ot_ir_shape *p = param_shape(f, i);
        if (!p) return BAD("%s computation %s has no parameter %d", role, f->name, i);
        if (!ot_ir_shape_equal(p, &x->ops[i]->shape))
            return BAD("operand %d (%s) is %s but %s parameter %d is %s", i, x->ops[i]->name,
                       S(&x->ops[i]->shape), f->name, i, S(p));
    }
    *out = f->root->shape;
    out->has_layout = false;
    return OT_OK;
}

static ot_status infer_while(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 1));
    OT_CHECK(need_called(x, 2));
    const ot_ir_shape *s = &x->ops[0]->shape;
    OT_CHECK(check_params(x, x->called[0], s, 1, "condition"));
    OT_CHECK(check_params(x, x->called[1], s, 1, "body"));
    ot_ir_shape pr = ot_ir_shape_scalar(OT_PRED);
    if (!ot_ir_shape_equal(&x->called[0]->root->shape, &pr))
        return BAD("condition computation %s returns %s, expected pred[]", x->called[0]->name,
                   S(&x->called[0]->root->shape));
    if (!ot_ir_shape_equal(&x->called[1]->root->shape, s))
        return BAD("body computation %s returns %s, expected the loop state %s", x->called[1]->name,
                   S(&x->called[1]->root->shape), S(s));
    *out = *s;
    out->has_layout = false;
    return OT_OK;
}

static ot_status infer_conditional(const ictx *x, ot_ir_shape *out) {
    if (x->ncalled < 1) return INVALID("expects at least one branch computation");
    OT_CHECK(need_called(x, x->ncalled));
    if (x->n != 1 + x->ncalled)
        return INVALID("%d branches need %d operands (index + one per branch), got %d", x->ncalled,
                       1 + x->ncalled, x->n);
    OT_CHECK(need_scalar(x, 0));
    ot_dtype t = arr(x, 0)->dtype;
    if (t == OT_PRED) {
        if (x->ncalled != 2) return BAD("a pred-selected conditional needs exactly 2 branches");
    } else if (t != OT_S32) {
        return BAD("branch index (%s) must be pred[] or s32[], not %s", x->ops[0]->name,
                   ot_dtype_name(t));
    }
    for (int b = 0; b < x->ncalled; b++) {
        OT_CHECK(check_params(x, x->called[b], &x->ops[1 + b]->shape, 1, "branch"));
        if (!ot_ir_shape_equal(&x->called[b]->root->shape, &x->called[0]->root->shape))
            return BAD("branch %d (%s) returns %s, branch 0 returns %s", b, x->called[b]->name,
                       S(&x->called[b]->root->shape), S(&x->called[0]->root->shape));
    }
    *out = x->called[0]->root->shape;
    out->has_layout = false;
    return OT_OK;
}

/* Size of a replica group for the collective, from replica_groups or the module config. */
static ot_status group_size(const ictx *x, int64_t *out) {
    const ot_replica_groups *g = x->a->groups;
    if (g && g->ngroups > 0) {
        int64_t sz = g->offsets[1] - g->offsets[0];
        for (int64_t k = 1; k < g->ngroups; k++)
            if (g->offsets[k + 1] - g->offsets[k] != sz)
                return BAD("replica group %lld has %lld members, group 0 has %lld", (long long)k,
                           (long long)(g->offsets[k + 1] - g->offsets[k]), (long long)sz);
        if (sz <= 0) return BAD("replica groups must not be empty");
    }
    /* XLA's GetSubgroupSize by the op's group mode (cross-replica-and-partition groups list
     * replicas and hold every partition of each); use_global_device_ids without a channel_id
     * (invalid in XLA, refused when executed) counts as flattened ids here */
    ot_collective_mode md = OT_COLLECTIVE_FLATTENED_ID;
    bool channel = x->a->channel_id != 0;
    if (channel || !x->a->use_global_device_ids) OT_CHECK(ot_collective_mode_of(x->op, x->a, &md));
    *out = ot_collective_group_size(md, g, x->m->cfg.replica_count, x->m->cfg.num_partitions);
    return OT_OK;
}

static ot_status check_groups(const ictx *x) {
    const ot_replica_groups *g = x->a->groups;
    if (!g || g->ngroups == 0) return OT_OK;
    /* ids must be distinct across all groups */
    int64_t total = g->offsets[g->ngroups];
    int64_t maxid = -1;
    for (int64_t k = 0; k < total; k++) {
        if (g->ids[k] < 0) return INVALID("replica_groups: negative id");
        if (g->ids[k] > maxid) maxid = g->ids[k];
    }
    if (maxid >= (1ll << 24)) return INVALID("replica_groups: id %lld too large", (long long)maxid);
    uint8_t *seen = ot_calloc((size_t)maxid + 1, 1);
    if (!seen) return ot_error(OT_ERR_OUT_OF_MEMORY, "replica_groups: out of memory");
    for (int64_t k = 0; k < total; k++) {
        if (seen[g->ids[k]]) {
            ot_free(seen);
            return INVALID("replica_groups: id %lld appears twice", (long long)g->ids[k]);
        }
        seen[g->ids[k]] = 1;
    }
    ot_free(seen);
    return OT_OK;
}

static ot_status tuple_of_operands(const ictx *x, ot_ir_shape *out) {
    if (x->n == 1) {
        *out = x->ops[0]->shape;
        out->has_layout = false;
        return OT_OK;
    }
    ot_ir_shape *el = ot_malloc((size_t)(x->n ? x->n : 1) * sizeof *el);
    if (!el) return ot_error(OT_ERR_OUT_OF_MEMORY, "shape: out of memory");
    for (int i = 0; i < x->n; i++) {
        el[i] = x->ops[i]->shape;
        el[i].has_layout = false;
    }
    ot_status s = make_tuple(x, el, x->n, out);
    ot_free(el);
    return s;
}

static ot_status infer_collective(const ictx *x, ot_ir_shape *out) {
    if (x->n < 1) return INVALID("expects at least one operand");
    OT_CHECK(check_groups(x));
    for (int i = 0; i < x->n; i++) OT_CHECK(need_array(x, i));
    int64_t gs = 1;
    OT_CHECK(group_size(x, &gs));
    switch (x->op) {
    case OT_OP_ALL_REDUCE: {
        OT_CHECK(need_called(x, 1));
        for (int i = 0; i < x->n; i++) {
            ot_dtype t = arr(x, i)->dtype;
            OT_CHECK(check_reducer(x, x->called[0], &t, &t, 1));
        }
        return tuple_of_operands(x, out);
    }
    case OT_OP_ALL_GATHER:
    case OT_OP_REDUCE_SCATTER: {
        if (x->op == OT_OP_REDUCE_SCATTER) {
            OT_CHECK(need_called(x, 1));
            for (int i = 0; i < x->n; i++) {
                ot_dtype t = arr(x, i)->dtype;
                OT_CHECK(check_reducer(x, x->called[0], &t, &t, 1));
            }
        }
        ot_ir_shape el[OT_MAX_RANK * 2];
        if (x->n > OT_MAX_RANK * 2) return INVALID("too many operands");
        for (int i = 0; i < x->n; i++) {
            const ot_shape *s = arr(x, i);
            int64_t dim = x->a->index;
            if (dim < 0 || dim >= s->rank)
                return INVALID("dimension %lld is outside operand %d (%s) %s", (long long)dim, i,
                               x->ops[i]->name, A(s));
            int64_t d[OT_MAX_RANK];
            memcpy(d, s->dims, sizeof d);
            if (x->op == OT_OP_ALL_GATHER) {
                d[dim] *= gs;
            } else {
                if (d[dim] % gs)
                    return BAD("dimension %lld of operand %d (%s) %s (size %lld) is not divisible "
                               "by the group size %lld",
                               (long long)dim, i, x->ops[i]->name, A(s), (long long)d[dim],
                               (long long)gs);
                d[dim] /= gs;
            }
            el[i] = out_array(s->dtype, s->rank, d);
        }
        if (x->n == 1) {
            *out = el[0];
            return OT_OK;
        }
        return make_tuple(x, el, x->n, out);
    }
    case OT_OP_ALL_TO_ALL:
        if (x->a->index >= 0) {
            OT_CHECK(need_count(x, 1));
            const ot_shape *s = arr(x, 0);
            if (x->a->index >= s->rank)
                return INVALID("split dimension %lld is outside operand 0 (%s) %s",
                               (long long)x->a->index, x->ops[0]->name, A(s));
            if (s->dims[x->a->index] % gs)
                return BAD("split dimension %lld (size %lld) is not divisible by the group size "
                           "%lld",
                           (long long)x->a->index, (long long)s->dims[x->a->index], (long long)gs);
            *out = ot_ir_shape_array(*s);
            return OT_OK;
        }
        if (x->n != gs && gs > 0 && x->a->groups && x->a->groups->ngroups)
            return BAD("the tuple form needs one operand per group member (%lld), got %d",
                       (long long)gs, x->n);
        return tuple_of_operands(x, out);
    case OT_OP_COLLECTIVE_PERMUTE: {
        OT_CHECK(need_count(x, 1));
        if (x->a->npairs < 0 || (x->a->npairs && !x->a->pairs))
            return INVALID("source_target_pairs invalid");
        for (int i = 0; i < x->a->npairs; i++)
            for (int j = 0; j < 2; j++)
                if (x->a->pairs[2 * i + j] < 0) return INVALID("source_target_pairs: negative id");
        for (int i = 0; i < x->a->npairs; i++)
            for (int j = 0; j < i; j++) {
                if (x->a->pairs[2 * i] == x->a->pairs[2 * j])
                    return INVALID("source %lld appears twice in source_target_pairs",
                                   (long long)x->a->pairs[2 * i]);
                if (x->a->pairs[2 * i + 1] == x->a->pairs[2 * j + 1])
                    return INVALID("target %lld appears twice in source_target_pairs",
                                   (long long)x->a->pairs[2 * i + 1]);
            }
        *out = ot_ir_shape_array(*arr(x, 0));
        return OT_OK;
    }
    default: return INVALID("not a collective");
    }
}

static ot_status infer_rng_bit_generator(const ictx *x, ot_ir_shape *out) {
    OT_CHECK(need_count(x, 1));
    OT_CHECK(need_array(x, 0));
    const ot_shape *s = arr(x, 0);
    if (s->dtype != OT_U64 || s->rank != 1)
        return BAD("state (%s) must be a u64 vector, not %s", x->ops[0]->name, A(s));
    ot_rng_algorithm alg = x->a->rng_algorithm;
    if (alg == OT_RNG_THREE_FRY && s->dims[0] != 2)
        return BAD("three-fry needs a u64[2] state, not %s", A(s));
    if (alg == OT_RNG_PHILOX && s->dims[0] != 2 && s->dims[0] != 3)
        return BAD("philox needs a u64[2] or u64[3] state, not %s", A(s));
    if (alg == OT_RNG_DEFAULT && s->dims[0] < 2)
        return BAD("state must have at least 2 elements, not %s", A(s));
    const ot_ir_shape *h = x->hint;
    if (h && h->kind == OT_IR_TUPLE && h->ntuple == 2) h = &h->tuple[1];
    if (!h || h->kind != OT_IR_ARRAY) return INVALID("needs the output array shape");
    if (!ot_dtype_is_integer(h->array.dtype))
        return BAD("output must be integers, not %s", ot_dtype_name(h->array.dtype));
    ot_ir_shape el[2] = {ot_ir_shape_array(*s), ot_ir_shape_array(h->array)};
    return make_tuple(x, el, 2, out);
}

static ot_status hint_copy(const ictx *x, ot_ir_shape *out) {
    if (!x->hint) return INVALID("needs a result shape");
    if (x->hint->kind == OT_IR_ARRAY) {
        OT_CHECK(need_hint_array(x));
        *out = *x->hint;
        out->has_layout = false;
        return OT_OK;
    }
    if (x->hint->kind == OT_IR_TUPLE &&
        (x->hint->ntuple < 0 || (x->hint->ntuple && !x->hint->tuple)))
        return INVALID("invalid tuple result shape");
    *out = *x->hint; /* ir_create deep-copies tuple results into the arena */
    return OT_OK;
}

ot_status ir_infer(ot_module *m, ot_opcode op, ot_instr *const *ops, int n, const ot_attrs *a,
                   ot_computation *const *called, int ncalled, const ot_ir_shape *hint,
                   ot_ir_shape *out) {
    static const ot_attrs zero;
    ictx cx = {m, op, ops, n, a ? a : &zero, called, ncalled, hint};
    const ictx *x = &cx;
    ot_status s;
    memset(out, 0, sizeof *out);
    if (ot_opcode_is_elementwise_unary(op)) {
        s = infer_unary(x, out);
    } else if (ot_opcode_is_elementwise_binary(op)) {
        s = infer_binary(x, out);
    } else {
        switch (op) {
        case OT_OP_PARAMETER:
            if (n) return INVALID("takes no operands");
            if (cx.a->index < 0)
                return INVALID("parameter number %lld is negative", (long long)cx.a->index);
            s = hint_copy(x, out);
            break;
        case OT_OP_CONSTANT: {
            if (n) return INVALID("takes no operands");
            if (!hint || hint->kind != OT_IR_ARRAY)
                return fail(x, OT_ERR_UNIMPLEMENTED,
                            "only array constants are supported (tuple constants are not)");
            OT_CHECK(need_hint_array(x));
            const ot_literal *l = cx.a->literal;
            if (!l) return INVALID("constant has no value");
            if (!l->elided && l->nbytes != ot_shape_nbytes_unchecked(&hint->array))
                return BAD("value has %lld bytes, shape %s needs %lld", (long long)l->nbytes,
                           S(hint), (long long)ot_shape_nbytes_unchecked(&hint->array));
            if (!l->elided && l->nbytes && !l->data) return INVALID("constant data missing");
            s = hint_copy(x, out);
            break;
        }
        case OT_OP_IOTA:
            if (n) return INVALID("takes no operands");
            OT_CHECK(need_hint_array(x));
            if (hint->array.rank < 1) return BAD("result must have rank >= 1");
            if (cx.a->index < 0 || cx.a->index >= hint->array.rank)
                return INVALID("iota_dimension %lld is outside the result %s",
                               (long long)cx.a->index, S(hint));
            if (hint->array.dtype == OT_PRED) return BAD("result must be numeric, not pred");
            s = hint_copy(x, out);
            break;
        case OT_OP_SELECT: s = infer_select(x, out); break;
        case OT_OP_CLAMP: s = infer_clamp(x, out); break;
        case OT_OP_CONVERT:
        case OT_OP_BITCAST_CONVERT: s = infer_convert(x, out); break;
        case OT_OP_REDUCE_PRECISION:
            OT_CHECK(need_count(x, 1));
            OT_CHECK(need_array(x, 0));
            if (!ot_dtype_is_float(arr(x, 0)->dtype))
                return BAD("operand 0 (%s) must be floating point", ops[0]->name);
            if (cx.a->exponent_bits < 1 || cx.a->mantissa_bits < 0 || cx.a->exponent_bits > 30 ||
                cx.a->mantissa_bits > 60)
                return INVALID("exponent_bits=%d mantissa_bits=%d out of range",
                               cx.a->exponent_bits, cx.a->mantissa_bits);
            *out = ot_ir_shape_array(*arr(x, 0));
            s = OT_OK;
            break;
        case OT_OP_COMPLEX: s = infer_complex(x, out); break;
        case OT_OP_REAL:
        case OT_OP_IMAG: s = infer_real_imag(x, out); break;
        case OT_OP_FFT: s = infer_fft(x, out); break;
        case OT_OP_BROADCAST: s = infer_broadcast(x, out); break;
        case OT_OP_RESHAPE:
        case OT_OP_BITCAST: s = infer_reshape(x, out); break;
        case OT_OP_TRANSPOSE: s = infer_transpose(x, out); break;
        case OT_OP_SLICE: s = infer_slice(x, out); break;
        case OT_OP_DYNAMIC_SLICE: s = infer_dynamic_slice(x, out); break;
        case OT_OP_DYNAMIC_UPDATE_SLICE: s = infer_dus(x, out); break;
        case OT_OP_CONCATENATE: s = infer_concatenate(x, out); break;
        case OT_OP_PAD: s = infer_pad(x, out); break;
        case OT_OP_REVERSE: s = infer_reverse(x, out); break;
        case OT_OP_GATHER: s = infer_gather(x, out); break;
        case OT_OP_SCATTER: s = infer_scatter(x, out); break;
        case OT_OP_REDUCE: s = infer_reduce(x, out); break;
        case OT_OP_REDUCE_WINDOW: s = infer_reduce_window(x, out); break;
        case OT_OP_SELECT_AND_SCATTER: s = infer_select_and_scatter(x, out); break;
        case OT_OP_SORT: s = infer_sort(x, out); break;
        case OT_OP_TOPK: s = infer_topk(x, out); break;
        case OT_OP_MAP: s = infer_map(x, out); break;
        case OT_OP_DOT: s = infer_dot(x, out); break;
        case OT_OP_CONVOLUTION: s = infer_convolution(x, out); break;
        case OT_OP_TUPLE: {
            if (n == 0) {
                memset(out, 0, sizeof *out);
                out->kind = OT_IR_TUPLE;
                s = OT_OK;
                break;
            }
            ot_ir_shape *el = ot_malloc((size_t)n * sizeof *el);
            if (!el) return ot_error(OT_ERR_OUT_OF_MEMORY, "shape: out of memory");
            for (int i = 0; i < n; i++) {
                el[i] = ops[i]->shape;
                el[i].has_layout = false;
            }
            s = make_tuple(x, el, n, out);
            ot_free(el);
            break;
        }
        case OT_OP_GET_TUPLE_ELEMENT:
            OT_CHECK(need_count(x, 1));
            if (ops[0]->shape.kind != OT_IR_TUPLE)
                return BAD("operand 0 (%s) must be a tuple, not %s", ops[0]->name,
                           S(&ops[0]->shape));
            if (cx.a->index < 0 || cx.a->index >= ops[0]->shape.ntuple)
                return BAD("index %lld is outside the tuple %s", (long long)cx.a->index,
                           S(&ops[0]->shape));
            *out = ops[0]->shape.tuple[cx.a->index];
            out->has_layout = false;
            s = OT_OK;
            break;
        case OT_OP_CALL: s = infer_call_like(x, out, "called"); break;
        case OT_OP_FUSION: s = infer_call_like(x, out, "fused"); break;
        case OT_OP_WHILE: s = infer_while(x, out); break;
        case OT_OP_CONDITIONAL: s = infer_conditional(x, out); break;
        case OT_OP_OPT_BARRIER:
            OT_CHECK(need_count(x, 1));
            *out = ops[0]->shape;
            out->has_layout = false;
            s = OT_OK;
            break;
        case OT_OP_ALL_REDUCE:
        case OT_OP_ALL_GATHER:
        case OT_OP_REDUCE_SCATTER:
        case OT_OP_ALL_TO_ALL:
        case OT_OP_COLLECTIVE_PERMUTE: s = infer_collective(x, out); break;
        case OT_OP_REPLICA_ID:
        case OT_OP_PARTITION_ID:
            if (n) return INVALID("takes no operands");
            *out = ot_ir_shape_scalar(OT_U32);
            s = OT_OK;
            break;
        case OT_OP_RNG_BIT_GENERATOR: s = infer_rng_bit_generator(x, out); break;
        case OT_OP_CUSTOM_CALL: {
            if (!cx.a->custom_call_target) return INVALID("custom_call_target missing");
            ir_lapack_call lc;
            bool is_lapack;
            OT_CHECK(
                ir_lapack_parse(cx.a->custom_call_target, cx.a->backend_config, &lc, &is_lapack));
            if (is_lapack) {
                const ot_ir_shape *sh[2];
                for (int k = 0; k < n && k < 2; k++) sh[k] = &cx.ops[k]->shape;
                OT_CHECK(ir_lapack_check(&lc, sh, n, hint));
            }
            s = hint_copy(x, out);
            break;
        }
        default: return INVALID("no shape rule");
        }
    }
    if (s != OT_OK) return s;
    /* a declared shape must agree with the inferred one */
    if (hint && !(hint->kind == OT_IR_ARRAY && hint->array.rank < 0) &&
        !ot_ir_shape_equal(hint, out)) {
        char a1[256], b1[256];
        ot_ir_shape_format(hint, a1, sizeof a1);
        ot_ir_shape_format(out, b1, sizeof b1);
        return ot_error(OT_ERR_SHAPE_MISMATCH,
                        "%s: declared shape %s disagrees with the inferred shape %s",
                        ot_opcode_name(op), a1, b1);
    }
    return OT_OK;
}

ot_status ot_infer_shape(ot_module *m, ot_opcode op, ot_instr *const *operands, int noperands,
                         const ot_attrs *attrs, ot_computation *const *called, int ncalled,
                         const ot_ir_shape *hint, ot_ir_shape *out) {
    if (!m || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "infer shape: NULL argument");
    if ((int)op < 0 || op >= OT_OP_COUNT)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "infer shape: invalid opcode %d", (int)op);
    for (int i = 0; i < noperands; i++)
        if (!operands[i])
            return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: operand %d is NULL", ot_opcode_name(op),
                            i);
    for (int i = 0; i < ncalled; i++)
        if (!called[i])
            return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: called computation %d is NULL",
                            ot_opcode_name(op), i);
    return ir_infer(m, op, operands, noperands, attrs, called, ncalled, hint, out);
}
