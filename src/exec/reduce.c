/* Reductions and windows: reduce, reduce-window, select-and-scatter, sort, topk and map. Every
 * reduction combines in one fixed order: row-major over the reduced (or window) indices, starting
 * from the init value, as XLA's HloEvaluator does — except float sums along a contiguous reduced
 * dimension, which use the canonical lane order (ex_reduce_lanes, numerics.h) that the fast
 * kernels and generated code vectorize, and suffix-scan windows, which fold from the far end
 * (ex_window_scan_dim, numerics.h) so that the fast kernel runs them as a recurrence. */
#include "exec/exec_internal.h"

#define EX_MAX_VARIADIC 16

/* Makes the result: one array, or a tuple of n arrays of the instruction's tuple shape. */
static ot_status alloc_multi(const ot_instr *i, int n, ot_value *out, ot_value **leaf) {
    OT_CHECK(ot_value_alloc_shape(out, &i->shape));
    for (int k = 0; k < n; k++) leaf[k] = n == 1 && out->kind == OT_IR_ARRAY ? out : &out->tuple[k];
    return OT_OK;
}

static void fill_init(ot_value *dst, const ot_value *init) {
    size_t es = ot_dtype_size(ex_arr(dst)->dtype);
    int64_t n = ot_shape_numel_unchecked(ex_arr(dst));
    for (int64_t e = 0; e < n; e++) memcpy((char *)dst->array.data + e * es, init->array.data, es);
}

bool ex_reduce_rows(const ot_instr *r, int64_t *rows, int64_t *len) {
    if (r->opcode != OT_OP_REDUCE || r->noperands != 2 || r->ncalled != 1 ||
        r->shape.kind != OT_IR_ARRAY)
        return false;
    const ot_instr *x = r->operands[0], *init = r->operands[1];
    if (x->shape.kind != OT_IR_ARRAY || x->shape.array.dtype != r->shape.array.dtype ||
        init->shape.kind != OT_IR_ARRAY || ot_shape_numel_unchecked(&init->shape.array) != 1)
        return false;
    const ot_shape *S = &x->shape.array;
    int nd = r->attrs->ndims;
    if (nd < 1 || nd > S->rank) return false;
    bool red[OT_MAX_RANK] = {false};
    for (int k = 0; k < nd; k++) {
        int64_t d = r->attrs->dims[k];
        if (d < 0 || d >= S->rank || red[d]) return false;
        red[d] = true;
    }
    int64_t o = 1, n = 1;
    for (int d = 0; d < S->rank; d++) {
        if (red[d] != (d >= S->rank - nd)) return false;
        if (red[d])
            n *= S->dims[d];
        else
            o *= S->dims[d];
    }
    *rows = o;
    *len = n;
    return true;
}

/* Whether i is a one-input reduce whose reducer adds its two scalar parameters (either order) in
 * dtype t, the dtype of its operand. */
static bool reduce_is_sum(const ot_instr *i, ot_dtype t) {
    if (!i || i->opcode != OT_OP_REDUCE || i->noperands != 2 || i->ncalled < 1 ||
        i->operands[0]->shape.kind != OT_IR_ARRAY || i->operands[0]->shape.array.dtype != t)
        return false;
    const ot_computation *f = i->called[0];
    if (!f || f->nparams != 2 || !f->root) return false;
    const ot_instr *r = f->root;
    if (r->opcode != OT_OP_ADD || r->noperands != 2 || r->shape.kind != OT_IR_ARRAY ||
        r->shape.array.dtype != t)
        return false;
    if (!((r->operands[0] == f->params[0] && r->operands[1] == f->params[1]) ||
          (r->operands[0] == f->params[1] && r->operands[1] == f->params[0])))
        return false;
    for (int k = 0; k < 2; k++) {
        const ot_ir_shape *ps = &f->params[k]->shape;
        if (ps->kind != OT_IR_ARRAY || ps->array.rank != 0 || ps->array.dtype != t) return false;
    }
    return true;
}

bool ex_reduce_last_dim(const ot_instr *i) {
    const ot_shape *s = &i->operands[0]->shape.array;
    bool reduced[OT_MAX_RANK] = {false};
    for (int k = 0; k < i->attrs->ndims; k++)
        if (i->attrs->dims[k] >= 0 && i->attrs->dims[k] < OT_MAX_RANK)
            reduced[i->attrs->dims[k]] = true;
    for (int d = s->rank - 1; d >= 0; d--)
        if (s->dims[d] != 1) return reduced[d];
    return false; /* one element per output: nothing to order */
}

bool ex_reduce_lanes(const ot_instr *i) {
    if (!i || i->noperands < 1 || i->operands[0]->shape.kind != OT_IR_ARRAY) return false;
    ot_dtype t = i->operands[0]->shape.array.dtype;
    return (t == OT_F32 || t == OT_F64) && reduce_is_sum(i, t) && ex_reduce_last_dim(i);
}

bool ex_reduce_widens(const ot_instr *i) {
    if (!i || i->noperands != 2 || i->operands[0]->shape.kind != OT_IR_ARRAY ||
        i->shape.kind != OT_IR_ARRAY || i->operands[1]->shape.kind != OT_IR_ARRAY)
        return false;
    ot_dtype t = i->operands[0]->shape.array.dtype;
    return (t == OT_BF16 || t == OT_F16) && i->shape.array.dtype == t &&
           i->operands[1]->shape.array.dtype == t && i->operands[1]->shape.array.rank == 0 &&
           reduce_is_sum(i, t);
}

/* One output of a lane-ordered reduce (ex_reduce_lanes): x's reduced elements are at byte
 * offsets base + roff[k], k < n; acc holds the init value and gets the result. */
static ot_status lane_fold(ex_scalar_fn *fn, size_t es, const char *x, const int64_t *roff,
                           int64_t n, uint64_t *acc) {
    enum { W = EX_RED_LANES };
    uint64_t lane[W], res = 0;
    const void *args[2];
    void *outs[1] = {&res};
    int64_t r = 0;
#define LF_STEP(A, B)                                                                              \
    do {                                                                                           \
        args[0] = (A);                                                                             \
        args[1] = (B);                                                                             \
        ot_status st_ = ex_scalar_fn_call(fn, args, outs);                                         \
        if (st_ != OT_OK) return st_;                                                              \
    } while (0)
    for (int64_t rb = 0; rb + W <= n; rb += EX_RED_BLOCK) {
        int64_t re = rb + EX_RED_BLOCK < n ? rb + EX_RED_BLOCK : n;
        re = rb + (re - rb) / W * W;
        for (int l = 0; l < W; l++) {
            lane[l] = 0;
            memcpy(&lane[l], x + roff[rb + l], es);
        }
        for (r = rb + W; r < re; r += W)
            for (int l = 0; l < W; l++) {
                LF_STEP(&lane[l], x + roff[r + l]);
                lane[l] = res;
            }
        for (int s = W / 2; s >= 1; s /= 2)
            for (int l = 0; l < s; l++) {
                LF_STEP(&lane[l], &lane[l + s]);
                lane[l] = res;
            }
        LF_STEP(acc, &lane[0]);
        *acc = res;
        r = re;
    }
    for (; r < n; r++) {
        LF_STEP(acc, x + roff[r]);
        *acc = res;
    }
#undef LF_STEP
    return OT_OK;
}

/* A lane-ordered reduce: per output element, its reduced elements through lane_fold. */
static ot_status reduce_lanes(ex_scalar_fn *fn, const ot_instr *i, const ot_value *in,
                              const ot_value *init, ot_value *acc) {
    const ot_shape *is = ex_arr(in);
    size_t es = ot_dtype_size(is->dtype);
    bool reduced[OT_MAX_RANK] = {false};
    for (int k = 0; k < i->attrs->ndims; k++) reduced[i->attrs->dims[k]] = true;
    int64_t istr[OT_MAX_RANK], rdims[OT_MAX_RANK], odims[OT_MAX_RANK], rstr[OT_MAX_RANK],
        ostr[OT_MAX_RANK];
    ot_shape_strides(is, istr);
    int nr = 0, no = 0;
    int64_t n = 1, on = 1;
    for (int d = 0; d < is->rank; d++) {
        if (reduced[d]) {
            rdims[nr] = is->dims[d];
            rstr[nr++] = istr[d] * (int64_t)es;
            n *= is->dims[d];
        } else {
            odims[no] = is->dims[d];
            ostr[no++] = istr[d] * (int64_t)es;
            on *= is->dims[d];
        }
    }
    int64_t *roff = ot_malloc((size_t)(n ? n : 1) * sizeof *roff);
    if (!roff) return ot_error(OT_ERR_OUT_OF_MEMORY, "%s: out of memory", EX_NAME(i));
    int64_t idx[OT_MAX_RANK] = {0};
    for (int64_t k = 0; k < n; k++) {
        int64_t off = 0;
        for (int d = 0; d < nr; d++) off += idx[d] * rstr[d];
        roff[k] = off;
        ex_next_index(idx, rdims, nr);
    }
    int64_t oidx[OT_MAX_RANK] = {0};
    ot_status st = OT_OK;
    for (int64_t o = 0; o < on && st == OT_OK; o++) {
        int64_t base = 0;
        for (int d = 0; d < no; d++) base += oidx[d] * ostr[d];
        uint64_t a = 0;
        memcpy(&a, init->array.data, es);
        st = lane_fold(fn, es, (const char *)in->array.data + base, roff, n, &a);
        memcpy((char *)acc->array.data + o * (int64_t)es, &a, es);
        ex_next_index(oidx, odims, no);
    }
    ot_free(roff);
    return st;
}

/* The reduce's n inputs ops[0..n) from inits ops[n..2n) into acc[0..n), each output element
 * folded in row-major order of its reduced indices. */
static ot_status reduce_serial(ex_scalar_fn *fn, const ot_instr *i, int n,
                               const ot_value *const *ops, ot_value *const *acc) {
    for (int k = 0; k < n; k++) fill_init(acc[k], ops[n + k]);
    const ot_shape *is = ex_arr(ops[0]);
    bool reduced[OT_MAX_RANK] = {false};
    for (int k = 0; k < i->attrs->ndims; k++) reduced[i->attrs->dims[k]] = true;
    /* output strides expressed over the input dims (0 for reduced dims) */
    int64_t ostr_in[OT_MAX_RANK], ostr[OT_MAX_RANK];
    ot_shape_strides(ex_arr(acc[0]), ostr);
    for (int d = 0, od = 0; d < is->rank; d++) ostr_in[d] = reduced[d] ? 0 : ostr[od++];
    int64_t numel = ot_shape_numel_unchecked(is), idx[OT_MAX_RANK] = {0};
    const void *args[2 * EX_MAX_VARIADIC];
    void *outs[EX_MAX_VARIADIC];
    uint64_t res[EX_MAX_VARIADIC];
    /* walking the input in row-major order visits each output's reduced indices in row-major
     * order too, so every output element is combined in the same fixed order */
    for (int64_t e = 0; e < numel; e++) {
        int64_t oi = 0;
        for (int d = 0; d < is->rank; d++) oi += idx[d] * ostr_in[d];
        for (int k = 0; k < n; k++) {
            size_t es = ot_dtype_size(ex_arr(acc[k])->dtype);
            args[k] = (char *)acc[k]->array.data + oi * (int64_t)es;
            args[n + k] = (const char *)ops[k]->array.data + e * (int64_t)es;
            outs[k] = &res[k];
        }
        ot_status st = ex_scalar_fn_call(fn, args, outs);
        if (st != OT_OK) return st;
        for (int k = 0; k < n; k++) {
            size_t es = ot_dtype_size(ex_arr(acc[k])->dtype);
            memcpy((char *)acc[k]->array.data + oi * (int64_t)es, &res[k], es);
        }
        ex_next_index(idx, is->dims, is->rank);
    }
    return OT_OK;
}

/* A module holding one computation, f32 addition, as *add (the reducer of a widened sum); NULL
 * when out of memory. */
static ot_module *add_f32_new(const ot_computation **add) {
    ot_module *m = ot_module_new("reduce_widened");
    ot_computation *c = m ? ot_module_add_computation(m, "add_f32") : NULL;
    ot_instr *a = c ? ot_build_parameter(c, 0, ot_shape_scalar(OT_F32), "a") : NULL;
    ot_instr *b = a ? ot_build_parameter(c, 1, ot_shape_scalar(OT_F32), "b") : NULL;
    ot_instr *r = b ? ot_build_binary(c, OT_OP_ADD, a, b) : NULL;
    if (!r) {
        ot_module_free(m);
        return NULL;
    }
    ot_computation_set_root(c, r);
    *add = c;
    return m;
}

/* A bf16 or f16 sum (ex_reduce_widens): the operand and init converted to f32, summed as the f32
 * reduce of the same dims would be (the lane order where that applies), rounded once to the
 * result's type — exactly the convert(reduce(convert)) the compiler rewrites such a reduce into
 * (widen_sums, src/compiler/compile.c), so compiled code and this reference agree bit for bit. */
static ot_status reduce_widened(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                                ot_value *out) {
    const ot_computation *add = NULL;
    ot_module *addm = add_f32_new(&add);
    if (!addm) return ot_error(OT_ERR_OUT_OF_MEMORY, "%s: out of memory", EX_NAME(i));
    const ot_shape *is = ex_arr(ops[0]);
    ot_dtype t = is->dtype;
    ot_shape ws = *is, os = i->shape.array, ss = ot_shape_scalar(OT_F32);
    ws.dtype = OT_F32;
    os.dtype = OT_F32;
    ot_value w[3] = {ot_value_empty(), ot_value_empty(), ot_value_empty()}; /* in, init, sum */
    ex_scalar_fn *fn = NULL;
    ot_status st = ot_value_alloc_array(&w[0], &ws);
    if (st == OT_OK) st = ot_value_alloc_array(&w[1], &ss);
    if (st == OT_OK) st = ot_value_alloc_array(&w[2], &os);
    if (st == OT_OK)
        st = ex_convert(t, OT_F32, ops[0]->array.data, w[0].array.data,
                        ot_shape_numel_unchecked(is));
    if (st == OT_OK) st = ex_convert(t, OT_F32, ops[1]->array.data, w[1].array.data, 1);
    if (st == OT_OK) st = ex_scalar_fn_new(x, add, &fn);
    if (st == OT_OK) {
        const ot_value *wops[2] = {&w[0], &w[1]};
        ot_value *wacc[1] = {&w[2]};
        st = ex_reduce_last_dim(i) ? reduce_lanes(fn, i, &w[0], &w[1], &w[2])
                                   : reduce_serial(fn, i, 1, wops, wacc);
    }
    ex_scalar_fn_free(fn);
    if (st == OT_OK) st = ot_value_alloc_shape(out, &i->shape);
    if (st == OT_OK)
        st = ex_convert(OT_F32, t, w[2].array.data, out->array.data, ot_shape_numel_unchecked(&os));
    for (int k = 0; k < 3; k++) ot_value_release(&w[k]);
    ot_module_free(addm);
    if (st != OT_OK) ot_value_release(out);
    return st;
}

ot_status ex_kernel_reduce(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                           ot_value *out) {
    int n = i->noperands / 2;
    if (n > EX_MAX_VARIADIC)
        return ot_error(OT_ERR_UNIMPLEMENTED, "%s: reduce of more than %d inputs", EX_NAME(i),
                        EX_MAX_VARIADIC);
    if (ex_reduce_widens(i)) return reduce_widened(x, i, ops, out);
    ot_value *acc[EX_MAX_VARIADIC];
    OT_CHECK(alloc_multi(i, n, out, acc));
    ex_scalar_fn *fn = NULL;
    ot_status st = ex_scalar_fn_new(x, i->called[0], &fn);
    if (st != OT_OK) {
        ot_value_release(out);
        return st;
    }
    st = ex_reduce_lanes(i) ? reduce_lanes(fn, i, ops[0], ops[1], acc[0])
                            : reduce_serial(fn, i, n, ops, acc);
    ex_scalar_fn_free(fn);
    if (st != OT_OK) ot_value_release(out);
    return st;
}

/* The input index a window element reads, or false when it falls in padding or a base-dilation
 * hole. */
static bool window_source(const ot_window *w, const ot_shape *is, const int64_t *o,
                          const int64_t *k, int64_t *src) {
    for (int d = 0; d < is->rank; d++) {
        const ot_window_dim *wd = &w->dims[d];
        int64_t kk = wd->reversal ? wd->size - 1 - k[d] : k[d];
        int64_t wdil = wd->window_dilation ? wd->window_dilation : 1;
        int64_t bdil = wd->base_dilation ? wd->base_dilation : 1;
        int64_t p = o[d] * wd->stride + kk * wdil - wd->pad_lo;
        if (p < 0 || p % bdil) return false;
        p /= bdil;
        if (p >= is->dims[d]) return false;
        src[d] = p;
    }
    return true;
}

int ex_window_scan_dim(const ot_window *w, const ot_shape *is, bool *suffix) {
    int r = is->rank, sd = -1;
    if (!w || w->rank != r || r < 1) return -1;
    for (int d = 0; d < r; d++) {
        const ot_window_dim *wd = &w->dims[d];
        int64_t n = is->dims[d];
        if (wd->stride != 1 || (wd->window_dilation && wd->window_dilation != 1) ||
            (wd->base_dilation && wd->base_dilation != 1) || wd->reversal)
            return -1;
        if (wd->size == 1 && wd->pad_lo == 0 && wd->pad_hi == 0) continue;
        if (sd >= 0 || n < 2 || wd->size != n) return -1;
        if (wd->pad_lo == n - 1 && wd->pad_hi == 0)
            *suffix = false;
        else if (wd->pad_lo == 0 && wd->pad_hi == n - 1)
            *suffix = true;
        else
            return -1;
        sd = d;
    }
    return sd;
}

ot_status ex_kernel_reduce_window(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                                  ot_value *out) {
    int n = i->noperands / 2;
    if (n > EX_MAX_VARIADIC)
        return ot_error(OT_ERR_UNIMPLEMENTED, "%s: too many inputs", EX_NAME(i));
    ot_value *acc[EX_MAX_VARIADIC];
    OT_CHECK(alloc_multi(i, n, out, acc));
    ex_scalar_fn *fn = NULL;
    ot_status st = ex_scalar_fn_new(x, i->called[0], &fn);
    if (st != OT_OK) goto fail;
    const ot_window *w = i->attrs->window;
    const ot_shape *is = ex_arr(ops[0]), *os = ex_arr(acc[0]);
    /* a suffix scan folds from the far end (numerics.h): its window dim visited reversed */
    ot_window suf;
    bool suffix = false;
    int sd = ex_window_scan_dim(w, is, &suffix);
    if (sd >= 0 && suffix) {
        suf = *w;
        suf.dims[sd].reversal = true;
        w = &suf;
    }
    int r = is->rank;
    int64_t istr[OT_MAX_RANK], wdims[OT_MAX_RANK];
    ot_shape_strides(is, istr);
    for (int d = 0; d < r; d++) wdims[d] = w->dims[d].size;
    int64_t on = ot_shape_numel_unchecked(os), wn = 1;
    for (int d = 0; d < r; d++) wn *= wdims[d];
    int64_t o[OT_MAX_RANK] = {0};
    const void *args[2 * EX_MAX_VARIADIC];
    void *outs[EX_MAX_VARIADIC];
    uint64_t cur[EX_MAX_VARIADIC], res[EX_MAX_VARIADIC];
    for (int64_t e = 0; e < on; e++) {
        for (int k = 0; k < n; k++) {
            size_t es = ot_dtype_size(ex_arr(acc[k])->dtype);
            cur[k] = 0;
            memcpy(&cur[k], ops[n + k]->array.data, es);
        }
        int64_t kw[OT_MAX_RANK] = {0}, src[OT_MAX_RANK];
        for (int64_t q = 0; q < wn; q++) {
            if (window_source(w, is, o, kw, src)) {
                int64_t si = 0;
                for (int d = 0; d < r; d++) si += src[d] * istr[d];
                for (int k = 0; k < n; k++) {
                    size_t es = ot_dtype_size(ex_arr(acc[k])->dtype);
                    args[k] = &cur[k];
                    args[n + k] = (const char *)ops[k]->array.data + si * (int64_t)es;
                    outs[k] = &res[k];
                }
                st = ex_scalar_fn_call(fn, args, outs);
                if (st != OT_OK) goto fail;
                memcpy(cur, res, sizeof(uint64_t) * (size_t)n);
            }
            ex_next_index(kw, wdims, r);
        }
        for (int k = 0; k < n; k++) {
            size_t es = ot_dtype_size(ex_arr(acc[k])->dtype);
            memcpy((char *)acc[k]->array.data + e * (int64_t)es, &cur[k], es);
        }
        ex_next_index(o, os->dims, r);
    }
    ex_scalar_fn_free(fn);
    return OT_OK;
fail:
    ex_scalar_fn_free(fn);
    ot_value_release(out);
    return st;
}

ot_status ex_kernel_select_and_scatter(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                                       ot_value *out) {
    const ot_value *operand = ops[0], *source = ops[1], *init = ops[2];
    OT_CHECK(ot_value_alloc_shape(out, &i->shape));
    fill_init(out, init);
    ex_scalar_fn *sel = NULL, *sca = NULL;
    ot_status st = ex_scalar_fn_new(x, i->called[0], &sel);
    if (st == OT_OK) st = ex_scalar_fn_new(x, i->called[1], &sca);
    if (st != OT_OK) goto fail;
    const ot_window *w = i->attrs->window;
    const ot_shape *is = ex_arr(operand), *ss = ex_arr(source);
    int r = is->rank;
    size_t es = ot_dtype_size(is->dtype);
    int64_t istr[OT_MAX_RANK], wdims[OT_MAX_RANK], wn = 1;
    ot_shape_strides(is, istr);
    for (int d = 0; d < r; d++) {
        wdims[d] = w->dims[d].size;
        wn *= wdims[d];
    }
    int64_t sn = ot_shape_numel_unchecked(ss), o[OT_MAX_RANK] = {0};
    for (int64_t e = 0; e < sn; e++) {
        int64_t kw[OT_MAX_RANK] = {0}, src[OT_MAX_RANK], best = -1;
        for (int64_t q = 0; q < wn; q++) {
            if (window_source(w, is, o, kw, src)) {
                int64_t si = 0;
                for (int d = 0; d < r; d++) si += src[d] * istr[d];
                if (best < 0) {
                    best = si;
                } else {
                    /* select(current, candidate) true keeps the current selection */
                    const void *args[2] = {(const char *)operand->array.data + best * (int64_t)es,
                                           (const char *)operand->array.data + si * (int64_t)es};
                    bool keep;
                    st = ex_scalar_fn_pred(sel, args, &keep);
                    if (st != OT_OK) goto fail;
                    if (!keep) best = si;
                }
            }
            ex_next_index(kw, wdims, r);
        }
        if (best >= 0) {
            uint64_t res = 0;
            const void *args[2] = {(char *)out->array.data + best * (int64_t)es,
                                   (const char *)source->array.data + e * (int64_t)es};
            void *outs[1] = {&res};
            st = ex_scalar_fn_call(sca, args, outs);
            if (st != OT_OK) goto fail;
            memcpy((char *)out->array.data + best * (int64_t)es, &res, es);
        }
        ex_next_index(o, ss->dims, r);
    }
    ex_scalar_fn_free(sel);
    ex_scalar_fn_free(sca);
    return OT_OK;
fail:
    ex_scalar_fn_free(sel);
    ex_scalar_fn_free(sca);
    ot_value_release(out);
    return st;
}

/* ---- sort ------------------------------------------------------------------------------ */

typedef struct sort_ctx {
    ex_scalar_fn *cmp;
    int n;
    const ot_value *const *ops;
    int64_t base, stride; /* element (row, k) is at base + k * stride */
    ot_status st;
} sort_ctx;

/* less(a, b): the comparator on (a0, b0, a1, b1, ...). */
static bool sort_less(sort_ctx *s, int64_t a, int64_t b) {
    if (s->st != OT_OK) return false;
    const void *args[2 * EX_MAX_VARIADIC];
    for (int k = 0; k < s->n; k++) {
        size_t es = ot_dtype_size(ex_arr(s->ops[k])->dtype);
        const char *d = s->ops[k]->array.data;
        args[2 * k] = d + (s->base + a * s->stride) * (int64_t)es;
        args[2 * k + 1] = d + (s->base + b * s->stride) * (int64_t)es;
    }
    bool r = false;
    s->st = ex_scalar_fn_pred(s->cmp, args, &r);
    return r;
}

/* Stable bottom-up merge sort of the permutation p (len m) using tmp. */
static void merge_sort(sort_ctx *s, int64_t *p, int64_t *tmp, int64_t m) {
    for (int64_t width = 1; width < m; width *= 2) {
        for (int64_t lo = 0; lo < m; lo += 2 * width) {
            int64_t mid = lo + width < m ? lo + width : m,
                    hi = lo + 2 * width < m ? lo + 2 * width : m;
            int64_t a = lo, b = mid, t = lo;
            while (a < mid && b < hi) {
                /* take from the right only when it is strictly less: stability */
                if (sort_less(s, p[b], p[a]))
                    tmp[t++] = p[b++];
                else
                    tmp[t++] = p[a++];
            }
            while (a < mid) tmp[t++] = p[a++];
            while (b < hi) tmp[t++] = p[b++];
        }
        memcpy(p, tmp, (size_t)m * sizeof *p);
    }
}

ot_status ex_kernel_sort(ex_ctx *x, const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    int n = i->noperands;
    if (n > EX_MAX_VARIADIC)
        return ot_error(OT_ERR_UNIMPLEMENTED, "%s: sort of more than %d operands", EX_NAME(i),
                        EX_MAX_VARIADIC);
    ot_value *res[EX_MAX_VARIADIC];
    OT_CHECK(alloc_multi(i, n, out, res));
    const ot_shape *s0 = ex_arr(ops[0]);
    int64_t dim = i->attrs->index, m = s0->rank ? s0->dims[dim] : 1;
    int64_t str[OT_MAX_RANK];
    ot_shape_strides(s0, str);
    int64_t *p = ot_malloc((size_t)(m ? m : 1) * sizeof *p);
    int64_t *tmp = ot_malloc((size_t)(m ? m : 1) * sizeof *tmp);
    ex_scalar_fn *fn = NULL;
    ot_status st = OT_OK;
    if (!p || !tmp) {
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "%s: out of memory", EX_NAME(i));
        goto fail;
    }
    st = ex_scalar_fn_new(x, i->called[0], &fn);
    if (st != OT_OK) goto fail;
    int64_t numel = ot_shape_numel_unchecked(s0);
    int64_t rows = m ? numel / m : 0;
    int64_t outer_dims[OT_MAX_RANK], ridx[OT_MAX_RANK] = {0};
    int ro = 0;
    for (int d = 0; d < s0->rank; d++) outer_dims[ro++] = d == dim ? 1 : s0->dims[d];
    sort_ctx sc = {fn, n, ops, 0, s0->rank ? str[dim] : 1, OT_OK};
    for (int64_t row = 0; row < rows; row++) {
        int64_t base = 0;
        for (int d = 0; d < s0->rank; d++) base += ridx[d] * str[d];
        sc.base = base;
        for (int64_t k = 0; k < m; k++) p[k] = k;
        merge_sort(&sc, p, tmp, m);
        if (sc.st != OT_OK) {
            st = sc.st;
            goto fail;
        }
        for (int q = 0; q < n; q++) {
            size_t es = ot_dtype_size(ex_arr(ops[q])->dtype);
            for (int64_t k = 0; k < m; k++)
                memcpy((char *)res[q]->array.data + (base + k * sc.stride) * (int64_t)es,
                       (const char *)ops[q]->array.data + (base + p[k] * sc.stride) * (int64_t)es,
                       es);
        }
        ex_next_index(ridx, outer_dims, s0->rank);
    }
    ex_scalar_fn_free(fn);
    ot_free(p);
    ot_free(tmp);
    return OT_OK;
fail:
    ex_scalar_fn_free(fn);
    ot_free(p);
    ot_free(tmp);
    ot_value_release(out);
    return st;
}

/* topk: along the last dimension, the k largest (or smallest) in total order, ties by lower
 * index first; values and s32 indices. */
ot_status ex_kernel_topk(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    OT_CHECK(ot_value_alloc_shape(out, &i->shape));
    const ot_shape *s = ex_arr(ops[0]);
    ot_dtype t = s->dtype;
    int64_t m = s->dims[s->rank - 1], k = i->attrs->index;
    int64_t rows = m ? ot_shape_numel_unchecked(s) / m : 0;
    size_t es = ot_dtype_size(t);
    bool largest = i->attrs->largest;
    uint8_t *taken = ot_calloc((size_t)(m ? m : 1), 1);
    if (!taken) {
        ot_value_release(out);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "%s: out of memory", EX_NAME(i));
    }
    for (int64_t r = 0; r < rows; r++) {
        const char *row = (const char *)ops[0]->array.data + r * m * (int64_t)es;
        memset(taken, 0, (size_t)m);
        for (int64_t j = 0; j < k; j++) {
            int64_t best = -1;
            for (int64_t q = 0; q < m; q++) {
                if (taken[q]) continue;
                if (best < 0) {
                    best = q;
                    continue;
                }
                uint8_t better;
                if (ot_dtype_is_float(t))
                    ex_compare(largest ? OT_CMP_GT : OT_CMP_LT, OT_CMP_TYPE_TOTALORDER, t,
                               row + q * (int64_t)es, row + best * (int64_t)es, &better, 1);
                else
                    ex_compare(largest ? OT_CMP_GT : OT_CMP_LT, OT_CMP_TYPE_DEFAULT, t,
                               row + q * (int64_t)es, row + best * (int64_t)es, &better, 1);
                if (better) best = q;
            }
            taken[best] = 1;
            memcpy((char *)out->tuple[0].array.data + (r * k + j) * (int64_t)es,
                   row + best * (int64_t)es, es);
            ((int32_t *)out->tuple[1].array.data)[r * k + j] = (int32_t)best;
        }
    }
    ot_free(taken);
    return OT_OK;
}

ot_status ex_kernel_map(ex_ctx *x, const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    int n = i->noperands;
    if (n > 2 * EX_MAX_VARIADIC)
        return ot_error(OT_ERR_UNIMPLEMENTED, "%s: map of more than %d operands", EX_NAME(i),
                        2 * EX_MAX_VARIADIC);
    OT_CHECK(ot_value_alloc_shape(out, &i->shape));
    ex_scalar_fn *fn = NULL;
    ot_status st = ex_scalar_fn_new(x, i->called[0], &fn);
    if (st != OT_OK) {
        ot_value_release(out);
        return st;
    }
    size_t oes = ot_dtype_size(ex_arr(out)->dtype);
    int64_t numel = ot_shape_numel_unchecked(ex_arr(out));
    const void *args[2 * EX_MAX_VARIADIC];
    for (int64_t e = 0; e < numel && st == OT_OK; e++) {
        for (int k = 0; k < n; k++)
            args[k] = (const char *)ops[k]->array.data +
                      e * (int64_t)ot_dtype_size(ex_arr(ops[k])->dtype);
        void *outs[1] = {(char *)out->array.data + e * (int64_t)oes};
        st = ex_scalar_fn_call(fn, args, outs);
    }
    ex_scalar_fn_free(fn);
    if (st != OT_OK) ot_value_release(out);
    return st;
}
