/* The kernel dispatch (kernels.h): one instruction over bound leaves, by its fast twin when one
 * covers it, else by the reference kernel on borrowed views of the inputs; plus the per-run
 * context the fast kernels share (pool, scratch). */
#include "exec/fast_internal.h"
#include "exec/state8.h"
#include "ir/op_traits.h"
#include "ir/lapack_call.h"

#include <stdatomic.h>

void ex_kernel_ctx_init(ex_kernel_ctx *c, ot_threadpool *pool, const ot_eval_options *eval,
                        bool reference_only) {
    memset(c, 0, sizeof *c);
    c->pool = pool;
    c->use_default_pool = pool == NULL;
    c->eval = eval;
    c->ftz = !(eval && eval->keep_denormals);
    c->reference_only = reference_only;
}

void ex_loop_cache_init(ex_loop_cache *lc, void *const *inv, int ninv) {
    memset(lc, 0, sizeof *lc);
    lc->inv = inv;
    lc->ninv = ninv;
}

void ex_loop_cache_free(ex_loop_cache *lc) {
    for (int j = 0; j < lc->n; j++) ot_aligned_free(lc->e[j].buf);
    ot_free(lc->e);
    memset(lc, 0, sizeof *lc);
}

bool ex_loop_invariant(const ex_kernel_ctx *c, const void *p) {
    if (!c->loop || !p) return false;
    for (int j = 0; j < c->loop->ninv; j++)
        if (c->loop->inv[j] == p) return true;
    return false;
}

ex_loop_entry *ex_loop_buffer(ex_kernel_ctx *c, const void *key, const void *src, size_t bytes) {
    ex_loop_cache *lc = c->loop;
    if (!ex_loop_invariant(c, src)) return NULL;
    for (int j = 0; j < lc->n; j++)
        if (lc->e[j].key == key && lc->e[j].src == src)
            return lc->e[j].bytes == bytes ? &lc->e[j] : NULL;
    if (bytes > EX_LOOP_CACHE_MAX - lc->total) return NULL;
    if (lc->n == lc->cap) {
        int nc = lc->cap ? 2 * lc->cap : 8;
        ex_loop_entry *g = ot_realloc(lc->e, (size_t)nc * sizeof *g);
        if (!g) {
            ot_clear_error();
            return NULL;
        }
        lc->e = g;
        lc->cap = nc;
    }
    char *buf = ot_aligned_alloc(64, bytes ? bytes : 64);
    if (!buf) {
        ot_clear_error();
        return NULL;
    }
    lc->total += bytes;
    lc->e[lc->n] = (ex_loop_entry){key, src, buf, bytes, false};
    return &lc->e[lc->n++];
}

/* A scratch buffer is one allocation: a 64-byte header holding its capacity, then the scratch
 * (c->scratch points past the header), so a cache slot is one pointer. */
#define SCRATCH_HEAD 64

static void scratch_free(char *scratch) {
    if (scratch) ot_aligned_free(scratch - SCRATCH_HEAD);
}

void ex_scratch_cache_clear(ex_scratch_cache *sc) {
    for (int k = 0; k < EX_SCRATCH_SLOTS; k++) {
        char *b = atomic_exchange(&sc->slot[k], NULL);
        if (b) ot_aligned_free(b);
    }
}

/* b (a whole buffer, its header first) into a free slot of sc, else freed. */
static void cache_keep(ex_scratch_cache *sc, char *b) {
    size_t cap;
    memcpy(&cap, b, sizeof cap);
    for (int k = 0; k < EX_SCRATCH_SLOTS && b && cap <= EX_SCRATCH_KEEP; k++) {
        void *empty = NULL;
        if (atomic_compare_exchange_strong(&sc->slot[k], &empty, b)) b = NULL;
    }
    if (b) ot_aligned_free(b);
}

void *ex_scratch_cache_take(ex_scratch_cache *sc, size_t bytes) {
    if (bytes == 0) bytes = 64;
    /* each slot is emptied before its buffer is looked at: another thread may take and free a
     * buffer still in a slot, so its header is read only once this thread holds it */
    for (int k = 0; k < EX_SCRATCH_SLOTS; k++) {
        char *b = atomic_exchange(&sc->slot[k], NULL);
        if (!b) continue;
        size_t cap;
        memcpy(&cap, b, sizeof cap);
        if (cap >= bytes) return b + SCRATCH_HEAD;
        cache_keep(sc, b); /* too small: back (to this slot unless another run filled it) */
    }
    if (bytes > SIZE_MAX - SCRATCH_HEAD) return NULL;
    char *b = ot_aligned_alloc(64, bytes + SCRATCH_HEAD);
    if (!b) return NULL;
    memcpy(b, &bytes, sizeof bytes);
    return b + SCRATCH_HEAD;
}

void ex_scratch_cache_give(ex_scratch_cache *sc, void *p) {
    if (p && sc)
        cache_keep(sc, (char *)p - SCRATCH_HEAD);
    else if (p)
        ot_aligned_free((char *)p - SCRATCH_HEAD);
}

void ex_kernel_ctx_set_cache(ex_kernel_ctx *c, ex_scratch_cache *sc) {
    c->cache = sc;
    if (!sc || c->scratch) return;
    for (int k = 0; k < EX_SCRATCH_SLOTS; k++) {
        char *b = atomic_exchange(&sc->slot[k], NULL);
        if (b) {
            memcpy(&c->cap, b, sizeof c->cap);
            c->scratch = b + SCRATCH_HEAD;
            return;
        }
    }
}

void ex_kernel_ctx_release(ex_kernel_ctx *c) {
    if (c->scratch && c->cache && c->cap <= EX_SCRATCH_KEEP) {
        char *b = c->scratch - SCRATCH_HEAD;
        memcpy(b, &c->cap, sizeof c->cap);
        for (int k = 0; k < EX_SCRATCH_SLOTS && b; k++) {
            void *empty = NULL;
            if (atomic_compare_exchange_strong(&c->cache->slot[k], &empty, b)) b = NULL;
        }
        if (b) ot_aligned_free(b);
    } else {
        scratch_free(c->scratch);
    }
    c->scratch = NULL;
    c->cap = 0;
    c->cache = NULL;
}

ot_status ex_scratch(ex_kernel_ctx *c, size_t bytes, void **out) {
    if (bytes == 0) bytes = 64;
    if (bytes > c->cap) {
        size_t want = bytes + bytes / 4;
        char *p = ot_aligned_alloc(64, want + SCRATCH_HEAD);
        if (!p)
            return ot_error(OT_ERR_OUT_OF_MEMORY,
                            "fast kernel: out of memory for %zu scratch bytes", bytes);
        scratch_free(c->scratch);
        c->scratch = p + SCRATCH_HEAD;
        c->cap = want;
    }
    *out = c->scratch;
    return OT_OK;
}

static void par_for(ex_kernel_ctx *c, int64_t n, int64_t bytes, ot_schedule sched, ot_range_fn fn,
                    void *arg) {
    if (n <= 0) return;
    if (bytes < EX_INLINE_BYTES || n == 1) {
        fn(arg, 0, n, 0);
        return;
    }
    if (!c->pool && c->use_default_pool) c->pool = ot_threadpool_default(); /* first need */
    if (!c->pool || ot_threadpool_size(c->pool) == 1) {
        fn(arg, 0, n, 0);
        return;
    }
    ot_parallel_for(c->pool, n, 1, sched, fn, arg);
}

int64_t ex_inline_bytes(void) {
    return EX_INLINE_BYTES;
}

void ex_par_for(ex_kernel_ctx *c, int64_t n, int64_t bytes, ot_range_fn fn, void *arg) {
    par_for(c, n, bytes, OT_SCHEDULE_STATIC, fn, arg);
}

void ex_par_for_dynamic(ex_kernel_ctx *c, int64_t n, int64_t bytes, ot_range_fn fn, void *arg) {
    par_for(c, n, bytes, OT_SCHEDULE_DYNAMIC, fn, arg);
}

int ex_par_threads(ex_kernel_ctx *c, int64_t bytes) {
    if (bytes < EX_INLINE_BYTES) return 1;
    if (!c->pool && c->use_default_pool) c->pool = ot_threadpool_default(); /* first need */
    return c->pool ? ot_threadpool_size(c->pool) : 1;
}

/* ---- fast kernels ------------------------------------------------------------------------ */

/* The fast twin of i when one covers it (*done true), else *done false. */
/* The movers whose fast kernels copy elements by their size, complex ones included. */
static bool complex_mover(ot_opcode op) {
    switch (op) {
    case OT_OP_TRANSPOSE:
    case OT_OP_SLICE:
    case OT_OP_DYNAMIC_SLICE:
    case OT_OP_DYNAMIC_UPDATE_SLICE:
    case OT_OP_CONCATENATE:
    case OT_OP_PAD:
    case OT_OP_BROADCAST:
    case OT_OP_REVERSE: return true;
    default: return false;
    }
}

static ot_status fast_kernel(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                             const ex_leaf *ins, void *out, const ex_leaf *os, bool *done) {
    *done = false;
    if (i->shape.kind != OT_IR_ARRAY) return OT_OK;
    switch (i->opcode) {
    case OT_OP_DOT:
        if (nin != 2) return OT_OK;
        return ex_fast_dot(c, i, in, ins, out, os, done);
    case OT_OP_CONVOLUTION:
        if (nin != 2) return OT_OK;
        return ex_fast_conv(c, i, in, ins, out, os, done);
    case OT_OP_TRANSPOSE:
        if (nin != 1) return OT_OK;
        return ex_fast_transpose(c, i, in, ins, out, os, done);
    case OT_OP_REDUCE:
        if (nin != 2) return OT_OK;
        return ex_fast_reduce(c, i, in, ins, out, os, done);
    case OT_OP_FUSION: return ex_fast_reduce_fusion(c, i, nin, in, ins, out, os, done);
    case OT_OP_SLICE:
    case OT_OP_DYNAMIC_SLICE:
    case OT_OP_DYNAMIC_UPDATE_SLICE:
    case OT_OP_CONCATENATE:
    case OT_OP_PAD:
    case OT_OP_BROADCAST:
    case OT_OP_REVERSE: return ex_fast_shape(c, i, nin, in, ins, out, os, done);
    case OT_OP_GATHER:
        if (nin != 2) return OT_OK;
        return ex_fast_gather(c, i, in, ins, out, os, done);
    case OT_OP_SCATTER:
        if (nin != 3) return OT_OK;
        return ex_fast_scatter(c, i, in, ins, out, os, done);
    case OT_OP_REDUCE_WINDOW:
        if (nin != 2) return OT_OK;
        return ex_fast_reduce_window(c, i, in, ins, out, os, done);
    case OT_OP_SELECT_AND_SCATTER:
        if (nin != 3) return OT_OK;
        return ex_fast_select_and_scatter(c, i, in, ins, out, os, done);
    default:
        if (ot_opcode_is_elementwise_unary(i->opcode) ||
            ot_opcode_is_elementwise_binary(i->opcode) || i->opcode == OT_OP_CONVERT)
            return ex_fast_elementwise(c, i, nin, in, ins, out, os, done);
        return OT_OK;
    }
}

/* ---- reference kernels on borrowed leaves ------------------------------------------------ */

/* Where an empty leaf (NULL memory, zero bytes) points, so a borrowed view is never NULL. */
static char g_empty[64];

/* Builds a value of IR shape s from leaves in[*pos...], borrowing their memory. */
static ot_status view_value(const ot_ir_shape *s, void *const *in, const ex_leaf *ins, int nin,
                            int *pos, ot_value *out) {
    *out = ot_value_empty();
    if (s->kind == OT_IR_TOKEN) return OT_OK;
    if (s->kind == OT_IR_ARRAY) {
        if (*pos >= nin) return ot_error(OT_ERR_INTERNAL, "kernel: fewer inputs than leaves");
        if (!ot_shape_equal(ins[*pos].shape, &s->array))
            return ot_error(OT_ERR_INTERNAL, "kernel: input slot shape differs from the operand");
        void *p = in[*pos] ? in[*pos] : g_empty;
        (*pos)++;
        ot_value v = ot_value_empty();
        v.kind = OT_IR_ARRAY;
        OT_CHECK(ot_tensor_borrow(&v.array, &s->array, p));
        *out = v;
        return OT_OK;
    }
    ot_value t;
    OT_CHECK(ot_value_tuple(&t, s->ntuple));
    for (int k = 0; k < s->ntuple; k++) {
        ot_status st = view_value(&s->tuple[k], in, ins, nin, pos, &t.tuple[k]);
        if (st != OT_OK) {
            ot_value_release(&t);
            return st;
        }
    }
    *out = t;
    return OT_OK;
}

/* The reference kernel: i evaluated on views of its inputs into a fresh value, whose leaves are
 * then copied into the outputs. */
static ot_status reference_kernel(ex_kernel_ctx *c, const ot_instr *i, const char *name, int nin,
                                  void *const *in, const ex_leaf *ins, int nout, void *const *out,
                                  const ex_leaf *outs) {
    int nops = i->noperands;
    ot_value opsv[64];
    ot_value *ops = nops <= 64 ? opsv : ot_calloc((size_t)nops, sizeof *ops);
    if (!ops) return ot_error(OT_ERR_OUT_OF_MEMORY, "kernel %s: out of memory", name);
    int made = 0, pos = 0;
    ot_status st = OT_OK;
    for (; made < nops; made++) {
        st = view_value(&i->operands[made]->shape, in, ins, nin, &pos, &ops[made]);
        if (st != OT_OK) break;
    }
    if (st == OT_OK && pos != nin)
        st = ot_error(OT_ERR_INTERNAL, "kernel %s: %d inputs, operands use %d", name, nin, pos);
    ot_value res = ot_value_empty();
    if (st == OT_OK) st = ot_evaluate_instr(i, ops, nops, c->eval, &res);
    for (int k = 0; k < made; k++) ot_value_release(&ops[k]);
    if (ops != opsv) ot_free(ops);
    if (st != OT_OK) return ot_error_wrap(st, "kernel %s (%s)", name, ot_opcode_name(i->opcode));
    if (ot_value_leaf_count(&res) != nout) {
        ot_value_release(&res);
        return ot_error(OT_ERR_INTERNAL, "kernel %s: %d results for %d outputs", name,
                        ot_value_leaf_count(&res), nout);
    }
    for (int q = 0; q < nout; q++) {
        const ot_value *lf = ot_value_leaf(&res, q);
        if ((int64_t)lf->array.nbytes != outs[q].nbytes) {
            ot_value_release(&res);
            return ot_error(OT_ERR_INTERNAL, "kernel %s: output %d size differs", name, q);
        }
        /* a leaf passed through from an input that shares its output's buffer (a while loop's
         * state the compiler placed in place) is already there */
        if (outs[q].nbytes && out[q] != lf->array.data)
            memcpy(out[q], lf->array.data, (size_t)outs[q].nbytes);
    }
    ot_value_release(&res);
    return OT_OK;
}

ot_status ex_kernel_run(ex_kernel_ctx *c, const ot_instr *i, const char *name, int nin,
                        void *const *in, const ex_leaf *ins, int nout, void *const *out,
                        const ex_leaf *outs, bool *fast) {
    *fast = false;
    if (!name) name = "?";
    if (!i) { /* a copy kernel (an output or donation copy the compiler inserted) */
        if (nin != 1 || nout != 1)
            return ot_error(OT_ERR_INTERNAL, "copy kernel %s: not one input and one output", name);
        if (outs[0].nbytes != ins[0].nbytes)
            return ot_error(OT_ERR_INTERNAL, "copy kernel %s: sizes differ", name);
        if (outs[0].nbytes && out[0] != in[0]) memmove(out[0], in[0], (size_t)outs[0].nbytes);
        return OT_OK;
    }
    /* complex values: fft, sums and the elementwise ops have their pooled twins, the movers the
     * fast kernels that copy elements by size; the rest runs the reference kernels */
    if (ir_instr_complex(i)) {
        if (!c->reference_only && nout == 1) {
            ot_status st = OT_OK;
            if (i->opcode == OT_OP_FFT && nin == 1)
                st = ex_fast_fft(c, i, in, ins, out[0], &outs[0], fast);
            else if (i->opcode == OT_OP_REDUCE && nin == 2)
                st = ex_fast_complex_reduce(c, i, in, ins, out[0], &outs[0], fast);
            else if (complex_mover(i->opcode))
                st = fast_kernel(c, i, nin, in, ins, out[0], &outs[0], fast);
            else
                st = ex_fast_complex(c, i, nin, in, ins, out[0], &outs[0], fast);
            if (st != OT_OK) return ot_error_wrap(st, "kernel %s", name);
            if (*fast) return OT_OK;
        }
        return reference_kernel(c, i, name, nin, in, ins, nout, out, outs);
    }
    if (!c->reference_only && i->opcode == OT_OP_CUSTOM_CALL && i->attrs->custom_call_target &&
        !strcmp(i->attrs->custom_call_target, EX_STATE8_TARGET)) {
        ot_status st = ex_fast_state8(c, i, nin, in, ins, nout, out, outs, fast);
        if (st != OT_OK) return ot_error_wrap(st, "kernel %s", name);
        if (*fast) return OT_OK;
    }
    if (!c->reference_only && i->opcode == OT_OP_CUSTOM_CALL &&
        ir_lapack_target_known(i->attrs->custom_call_target)) {
        ot_status st = ex_fast_lapack(c, i, nin, in, ins, nout, out, outs, fast);
        if (st != OT_OK) return ot_error_wrap(st, "kernel %s", name);
        if (*fast) return OT_OK;
    }
    if (!c->reference_only && i->opcode == OT_OP_SORT) {
        ot_status st = ex_fast_sort(c, i, nin, in, ins, nout, out, outs, fast);
        if (st != OT_OK) return ot_error_wrap(st, "kernel %s", name);
        if (*fast) return OT_OK;
    }
    if (!c->reference_only && i->opcode == OT_OP_TOPK) {
        ot_status st = ex_fast_topk(c, i, nin, in, ins, nout, out, outs, fast);
        if (st != OT_OK) return ot_error_wrap(st, "kernel %s", name);
        if (*fast) return OT_OK;
    }
    if (!c->reference_only && i->opcode == OT_OP_REDUCE && nout == 2) {
        ot_status st = ex_fast_argreduce(c, i, nin, in, ins, nout, out, outs, fast);
        if (st != OT_OK) return ot_error_wrap(st, "kernel %s", name);
        if (*fast) return OT_OK;
    }
    if (!c->reference_only && nout == 1) {
        ot_status st = fast_kernel(c, i, nin, in, ins, out[0], &outs[0], fast);
        if (st != OT_OK) return ot_error_wrap(st, "kernel %s", name);
        if (*fast) return OT_OK;
    }
    return reference_kernel(c, i, name, nin, in, ins, nout, out, outs);
}
