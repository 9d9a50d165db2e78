/* The whole-module evaluator (like XLA's HloEvaluator): computations in instruction order, values
 * freed after their last use, called computations evaluated recursively, and scalar functions
 * (reducers, comparators) run as allocation-free straight-line programs. */
#include "exec/exec_internal.h"
#include "exec/state8.h"
#include "ir/op_traits.h"
#include "ir/lapack_call.h"

#include <pthread.h>
#include <stdio.h>

ot_eval_options ot_eval_options_default(void) {
    ot_eval_options o;
    memset(&o, 0, sizeof o);
    o.max_call_depth = 256;
    return o;
}

static void fmt_shape(const ot_ir_shape *s, char *buf, size_t n) {
    ot_ir_shape_format(s, buf, n);
}

static void fmt_value(const ot_value *v, char *buf, size_t n) {
    if (v->kind == OT_IR_ARRAY) {
        ot_shape_format(&v->array.shape, buf, n);
    } else if (v->kind == OT_IR_TUPLE) {
        snprintf(buf, n, "a tuple of %d", v->ntuple);
    } else {
        snprintf(buf, n, "a token");
    }
}

/* Custom-call targets that name code for other hardware (what XLA's TPU and GPU backends and
 * jaxlib's GPU kernels register): a module calling one cannot run on host CPU devices at all, so
 * it is UNSUPPORTED_HARDWARE, not UNIMPLEMENTED (which says optitpu could run it and does not
 * yet). Returns what the target is, or NULL for any other target. */
static const char *custom_call_hardware(const char *target) {
    static const struct {
        const char *prefix, *what;
    } hw[] = {
        {"tpu_custom_call", "a TPU kernel (Pallas/Mosaic, compiled for the TPU's cores)"},
        {"__cublas$", "an NVIDIA GPU library call (cuBLAS)"},
        {"__cudnn$", "an NVIDIA GPU library call (cuDNN)"},
        {"__gpu$", "a GPU kernel of XLA's GPU backend"},
        {"__triton", "a GPU kernel (Triton)"},
        {"triton_kernel_call", "a GPU kernel (Triton, jax-triton)"},
        {"cublas_", "an NVIDIA GPU library call (jaxlib cuBLAS)"},
        {"cusolver_", "an NVIDIA GPU library call (jaxlib cuSOLVER)"},
        {"cusparse_", "an NVIDIA GPU library call (jaxlib cuSPARSE)"},
        {"cu_threefry2x32", "an NVIDIA GPU kernel (jaxlib)"},
        {"cu_lu_pivots_to_permutation", "an NVIDIA GPU kernel (jaxlib)"},
        {"hipblas_", "an AMD GPU library call (jaxlib hipBLAS)"},
        {"hipsolver_", "an AMD GPU library call (jaxlib hipSOLVER)"},
        {"hipsparse_", "an AMD GPU library call (jaxlib hipSPARSE)"},
        {"hip_threefry2x32", "an AMD GPU kernel (jaxlib)"},
        {"hip_lu_pivots_to_permutation", "an AMD GPU kernel (jaxlib)"},
    };
    for (size_t k = 0; k < sizeof hw / sizeof hw[0]; k++)
        if (!strncmp(target, hw[k].prefix, strlen(hw[k].prefix))) return hw[k].what;
    return NULL;
}

/* ---- computations ---------------------------------------------------------------------- */

typedef struct comp_index {
    int64_t min_id, span;
    int64_t *pos; /* id - min_id -> position, -1 when not in the computation */
} comp_index;

static int64_t pos_of(const comp_index *ci, const ot_instr *i) {
    int64_t k = i->id - ci->min_id;
    if (k < 0 || k >= ci->span) return -1;
    return ci->pos[k];
}

ot_status ex_eval_computation(ex_ctx *x, const ot_computation *c, const ot_value *const *args,
                              int nargs, ot_value *out) {
    *out = ot_value_empty();
    if (!c->root) return ot_error(OT_ERR_INVALID_ARGUMENT, "computation %s has no root", c->name);
    if (x->opts.max_call_depth > 0 && x->depth >= x->opts.max_call_depth)
        return ot_error(OT_ERR_OUT_OF_RANGE, "computation %s: call depth exceeds %lld", c->name,
                        (long long)x->opts.max_call_depth);
    if (nargs != c->nparams)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "computation %s takes %d arguments, got %d",
                        c->name, c->nparams, nargs);
    int64_t n = c->ninstrs;
    ot_status st = OT_OK;
    const ot_instr **instrs = NULL;
    uint8_t *needed = NULL;
    int64_t *uses = NULL;
    ot_value *vals = NULL;
    const ot_value **ops = NULL;
    comp_index ci = {0, 0, NULL};
    int maxops = 1;

    instrs = ot_calloc((size_t)(n ? n : 1), sizeof *instrs);
    needed = ot_calloc((size_t)(n ? n : 1), 1);
    uses = ot_calloc((size_t)(n ? n : 1), sizeof *uses);
    vals = ot_calloc((size_t)(n ? n : 1), sizeof *vals);
    if (!instrs || !needed || !uses || !vals) goto oom;
    for (int64_t k = 0; k < n; k++) vals[k] = ot_value_empty();
    int64_t k = 0, lo = INT64_MAX, hi = INT64_MIN;
    for (const ot_instr *i = c->first; i && k < n; i = i->next, k++) {
        instrs[k] = i;
        if (i->id < lo) lo = i->id;
        if (i->id > hi) hi = i->id;
        if (i->noperands > maxops) maxops = i->noperands;
    }
    if (k != n) {
        st = ot_error(OT_ERR_INTERNAL, "computation %s: instruction list is inconsistent", c->name);
        goto done;
    }
    ci.min_id = lo;
    ci.span = n ? hi - lo + 1 : 0;
    ci.pos = ot_malloc((size_t)(ci.span ? ci.span : 1) * sizeof *ci.pos);
    ops = ot_calloc((size_t)maxops, sizeof *ops);
    if (!ci.pos || !ops) goto oom;
    for (int64_t q = 0; q < ci.span; q++) ci.pos[q] = -1;
    for (int64_t q = 0; q < n; q++) ci.pos[instrs[q]->id - lo] = q;

    /* which instructions the root needs (definitions precede uses, so one backward pass) */
    int64_t root_pos = pos_of(&ci, c->root);
    if (root_pos < 0) {
        st = ot_error(OT_ERR_INTERNAL, "computation %s: root is not in the computation", c->name);
        goto done;
    }
    needed[root_pos] = 1;
    for (int64_t q = n - 1; q >= 0; q--) {
        if (!needed[q]) continue;
        for (int o = 0; o < instrs[q]->noperands; o++) {
            int64_t p = pos_of(&ci, instrs[q]->operands[o]);
            if (p < 0 || p >= q) {
                st = ot_error(OT_ERR_INTERNAL, "%s: operand %d is not defined before it",
                              EX_NAME(instrs[q]), o);
                goto done;
            }
            needed[p] = 1;
            uses[p]++;
        }
    }

    x->depth++;
    for (int64_t q = 0; q < n && st == OT_OK; q++) {
        if (!needed[q]) continue;
        const ot_instr *i = instrs[q];
        if (i->opcode == OT_OP_PARAMETER) {
            int64_t pn = i->attrs->index;
            if (pn < 0 || pn >= nargs) {
                st = ot_error(OT_ERR_INVALID_ARGUMENT, "%s: parameter number %lld out of range",
                              EX_NAME(i), (long long)pn);
                break;
            }
            if (!ot_value_matches(args[pn], &i->shape)) {
                char want[128], got[128];
                fmt_shape(&i->shape, want, sizeof want);
                fmt_value(args[pn], got, sizeof got);
                st = ot_error(OT_ERR_SHAPE_MISMATCH, "parameter %lld (%s) expects %s, got %s",
                              (long long)pn, EX_NAME(i), want, got);
                break;
            }
            st = ot_value_copy(&vals[q], args[pn]);
        } else {
            for (int o = 0; o < i->noperands; o++) ops[o] = &vals[pos_of(&ci, i->operands[o])];
            int64_t op0 = i->noperands ? pos_of(&ci, i->operands[0]) : -1;
            if (i->opcode == OT_OP_GET_TUPLE_ELEMENT && op0 != root_pos && uses[op0] == 1 &&
                ops[0]->kind == OT_IR_TUPLE && i->attrs->index >= 0 &&
                i->attrs->index < ops[0]->ntuple) {
                /* the tuple's last use: move the element out instead of copying it */
                ot_value *t = (ot_value *)ops[0];
                vals[q] = t->tuple[i->attrs->index];
                t->tuple[i->attrs->index] = ot_value_empty();
            } else {
                st = ex_eval_instr(x, i, ops, &vals[q]);
            }
        }
        if (st != OT_OK) break;
        if (!ot_value_matches(&vals[q], &i->shape)) {
            char want[128], got[128];
            fmt_shape(&i->shape, want, sizeof want);
            fmt_value(&vals[q], got, sizeof got);
            st = ot_error(OT_ERR_INTERNAL, "%s (%s): result is %s, the IR says %s", EX_NAME(i),
                          ot_opcode_name(i->opcode), got, want);
            break;
        }
        /* release operands after their last use */
        for (int o = 0; o < i->noperands; o++) {
            int64_t p = pos_of(&ci, i->operands[o]);
            if (uses[p] > 0 && --uses[p] == 0 && p != root_pos) ot_value_release(&vals[p]);
        }
    }
    x->depth--;
    if (st == OT_OK) {
        *out = vals[root_pos];
        vals[root_pos] = ot_value_empty();
    }
    goto done;
oom:
    st = ot_error(OT_ERR_OUT_OF_MEMORY, "evaluating %s: out of memory", c->name);
done:
    if (vals)
        for (int64_t q = 0; q < n; q++) ot_value_release(&vals[q]);
    ot_free(vals);
    ot_free(uses);
    ot_free(needed);
    ot_free(instrs);
    ot_free(ci.pos);
    ot_free(ops);
    return st;
}

/* ---- single instructions --------------------------------------------------------------- */

static ot_status alloc_result(const ot_instr *i, ot_value *out) {
    if (i->shape.kind != OT_IR_ARRAY)
        return ot_error(OT_ERR_INTERNAL, "%s: expected an array result", EX_NAME(i));
    return ot_value_alloc_array(out, &i->shape.array);
}

static ot_status eval_constant(const ot_instr *i, ot_value *out) {
    const ot_literal *lit = i->attrs->literal;
    if (i->shape.kind != OT_IR_ARRAY)
        return ot_error(OT_ERR_UNIMPLEMENTED, "constant %s: tuple constants are not supported",
                        EX_NAME(i));
    if (!lit || lit->elided)
        return ot_error(
            OT_ERR_FAILED_PRECONDITION,
            "constant %s is elided ({...}): its value is unknown and cannot be executed",
            EX_NAME(i));
    OT_CHECK(alloc_result(i, out));
    if ((size_t)lit->nbytes != out->array.nbytes) {
        ot_value_release(out);
        return ot_error(OT_ERR_CORRUPT_DATA, "constant %s holds %lld bytes, its shape needs %zu",
                        EX_NAME(i), (long long)lit->nbytes, out->array.nbytes);
    }
    if (out->array.nbytes) memcpy(out->array.data, lit->data, out->array.nbytes);
    return OT_OK;
}

static ot_status eval_iota(const ot_instr *i, ot_value *out) {
    OT_CHECK(alloc_result(i, out));
    const ot_shape *s = &i->shape.array;
    int64_t d = i->attrs->index, numel = ot_shape_numel_unchecked(s);
    if (numel == 0) return OT_OK;
    int64_t idx[OT_MAX_RANK] = {0};
    for (int64_t e = 0; e < numel; e++) {
        int64_t v = s->rank ? idx[d] : 0;
        if (ot_dtype_is_float(s->dtype))
            ex_st_f(s->dtype, out->array.data, e, (double)v);
        else
            ex_st_i(s->dtype, out->array.data, e, v);
        ex_next_index(idx, s->dims, s->rank);
    }
    return OT_OK;
}

static ot_status eval_elementwise(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    OT_CHECK(alloc_result(i, out));
    const ot_shape *s = &i->shape.array;
    int64_t n = ot_shape_numel_unchecked(s);
    void *y = out->array.data;
    ot_status st = OT_OK;
    ot_opcode op = i->opcode;
    if (ot_opcode_is_elementwise_unary(op)) {
        st = ex_unary(op, ex_arr(ops[0])->dtype, s->dtype, ops[0]->array.data, y, n);
    } else if (op == OT_OP_COMPARE) {
        st = ex_compare(i->attrs->cmp_dir, i->attrs->cmp_type, ex_arr(ops[0])->dtype,
                        ops[0]->array.data, ops[1]->array.data, y, n);
    } else if (ot_opcode_is_elementwise_binary(op)) {
        st = ex_binary(op, s->dtype, ops[0]->array.data, ops[1]->array.data, y, n);
    } else if (op == OT_OP_SELECT) {
        int64_t ps = ex_arr(ops[0])->rank == 0 && s->rank > 0 ? 0 : 1;
        ex_select(ops[0]->array.data, ps, ops[1]->array.data, ops[2]->array.data, y,
                  ot_dtype_size(s->dtype), n);
    } else if (op == OT_OP_CLAMP) {
        int64_t ls = ex_arr(ops[0])->rank == 0 && s->rank > 0 ? 0 : 1;
        int64_t hs = ex_arr(ops[2])->rank == 0 && s->rank > 0 ? 0 : 1;
        st = ex_clamp(s->dtype, ops[0]->array.data, ls, ops[1]->array.data, ops[2]->array.data, hs,
                      y, n);
    } else if (op == OT_OP_CONVERT) {
        st = ex_convert(ex_arr(ops[0])->dtype, s->dtype, ops[0]->array.data, y, n);
    } else if (op == OT_OP_BITCAST_CONVERT) {
        /* row-major bytes are reinterpreted in place (little-endian, as XLA's CPU backend) */
        if (ops[0]->array.nbytes != out->array.nbytes)
            st = ot_error(OT_ERR_INTERNAL, "%s: bitcast-convert of %zu bytes into %zu", EX_NAME(i),
                          ops[0]->array.nbytes, out->array.nbytes);
        else if (out->array.nbytes)
            memcpy(y, ops[0]->array.data, out->array.nbytes);
    } else if (op == OT_OP_REDUCE_PRECISION) {
        st = ex_reduce_precision(s->dtype, i->attrs->exponent_bits, i->attrs->mantissa_bits,
                                 ops[0]->array.data, y, n);
    } else {
        st = ot_error(OT_ERR_INTERNAL, "%s: not an elementwise op", EX_NAME(i));
    }
    if (st != OT_OK) {
        ot_value_release(out);
        return ot_error_wrap(st, "%s (%s)", EX_NAME(i), ot_opcode_name(op));
    }
    return OT_OK;
}

static ot_status call_computation(ex_ctx *x, const ot_computation *c, const ot_value *const *args,
                                  int n, ot_value *out) {
    return ex_eval_computation(x, c, args, n, out);
}

static ot_status eval_while(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                            ot_value *out) {
    ot_value state;
    OT_CHECK(ot_value_copy(&state, ops[0]));
    ot_status st = OT_OK;
    for (int64_t iter = 0;; iter++) {
        if (x->opts.poll) {
            st = x->opts.poll(x->opts.poll_ctx);
            if (st != OT_OK) {
                st = ot_error_wrap(st, "%s: iteration %lld", EX_NAME(i), (long long)iter);
                break;
            }
        }
        ot_value p;
        const ot_value *a[1] = {&state};
        st = call_computation(x, i->called[0], a, 1, &p);
        if (st != OT_OK) break;
        bool go =
            p.kind == OT_IR_ARRAY && p.array.shape.dtype == OT_PRED && ((uint8_t *)p.array.data)[0];
        ot_value_release(&p);
        if (!go) break;
        if (x->opts.max_while_iterations > 0 && iter >= x->opts.max_while_iterations) {
            st = ot_error(OT_ERR_OUT_OF_RANGE, "while %s: more than %lld iterations", EX_NAME(i),
                          (long long)x->opts.max_while_iterations);
            break;
        }
        ot_value next;
        st = call_computation(x, i->called[1], a, 1, &next);
        if (st != OT_OK) break;
        ot_value_release(&state);
        state = next;
    }
    if (st != OT_OK) {
        ot_value_release(&state);
        return st;
    }
    *out = state;
    return OT_OK;
}

static ot_status eval_conditional(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                                  ot_value *out) {
    const ot_value *b = ops[0];
    int64_t idx;
    if (ex_arr(b)->dtype == OT_PRED) {
        idx = ((uint8_t *)b->array.data)[0] ? 0 : 1;
    } else {
        idx = ex_ld_i(ex_arr(b)->dtype, b->array.data, 0);
        /* an out-of-range index runs the last branch, as XLA defines */
        if (idx < 0 || idx >= i->ncalled) idx = i->ncalled - 1;
    }
    const ot_value *a[1] = {ops[1 + idx]};
    return call_computation(x, i->called[idx], a, 1, out);
}

static ot_status eval_tuple(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    ot_value t;
    OT_CHECK(ot_value_tuple(&t, i->noperands));
    for (int k = 0; k < i->noperands; k++) {
        ot_status st = ot_value_copy(&t.tuple[k], ops[k]);
        if (st != OT_OK) {
            ot_value_release(&t);
            return st;
        }
    }
    *out = t;
    return OT_OK;
}

/* ---- nesting deeper than one stack holds ------------------------------------------------- */

/* Control flow is evaluated by recursion: a while loop, conditional or call one level deeper
 * takes about 1.2 KiB of stack (ex_eval_computation's frame and the instruction's), and modules
 * nest thousands of levels (scripts/gen_scale_hlo.py nest_while: 3,300 at 20k instructions
 * overflowed a 256 KiB thread stack at about 200). Every EVAL_LEVELS_PER_STACK levels the
 * instruction is evaluated on a thread of its own with an EVAL_STACK_BYTES stack while the
 * caller waits, so no stack holds more than that many levels, whatever the nesting. Whole
 * instructions move (a loop with all its iterations), never one reducer call per element. */
enum { EVAL_LEVELS_PER_STACK = 48 };
#define EVAL_STACK_BYTES ((size_t)1 << 20)

typedef struct eval_hop {
    ex_ctx *x;
    const ot_instr *i;
    const ot_value *const *ops;
    ot_value *out;
    bool ftz;
    ot_status st;
    char msg[1024]; /* the child's ot_last_error (its thread-local message dies with it) */
} eval_hop;

static ot_status eval_control(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                              ot_value *out);

static void *eval_hop_main(void *arg) {
    eval_hop *h = arg;
    ex_ftz = h->ftz; /* thread-local: the caller's flush mode */
    h->st = eval_control(h->x, h->i, h->ops, h->out);
    if (h->st != OT_OK) snprintf(h->msg, sizeof h->msg, "%s", ot_last_error());
    return NULL;
}

static ot_status eval_control_deep(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                                   ot_value *out) {
    if (x->depth - x->stack_base < EVAL_LEVELS_PER_STACK) return eval_control(x, i, ops, out);
    eval_hop h = {x, i, ops, out, ex_ftz, OT_OK, {0}};
    pthread_attr_t at;
    pthread_t th;
    if (pthread_attr_init(&at) != 0)
        return ot_error(OT_ERR_RESOURCE_EXHAUSTED, "%s: no thread for nesting depth %lld",
                        EX_NAME(i), (long long)x->depth);
    int rc = pthread_attr_setstacksize(&at, EVAL_STACK_BYTES);
    int64_t base = x->stack_base;
    x->stack_base = x->depth;
    if (rc == 0) rc = pthread_create(&th, &at, eval_hop_main, &h);
    pthread_attr_destroy(&at);
    if (rc == 0) pthread_join(th, NULL);
    x->stack_base = base;
    if (rc != 0)
        return ot_error(OT_ERR_RESOURCE_EXHAUSTED, "%s: no thread for nesting depth %lld",
                        EX_NAME(i), (long long)x->depth);
    if (h.st != OT_OK) return ot_error(h.st, "%s", h.msg);
    return OT_OK;
}

static ot_status eval_control(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                              ot_value *out) {
    switch (i->opcode) {
    case OT_OP_WHILE: return eval_while(x, i, ops, out);
    case OT_OP_CONDITIONAL: return eval_conditional(x, i, ops, out);
    default: return call_computation(x, i->called[0], ops, i->noperands, out);
    }
}

ot_status ex_eval_instr(ex_ctx *x, const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    *out = ot_value_empty();
    ot_opcode op = i->opcode;
    /* a tuple's copy copies every leaf (HLO allows it; the leaves may be complex) */
    if (op == OT_OP_COPY && i->shape.kind != OT_IR_ARRAY) return ot_value_copy(out, ops[0]);
    if (ir_instr_complex(i) && !ex_complex_passes_through(op))
        return ex_kernel_complex(x, i, ops, out);
    if (ot_opcode_is_elementwise(op) && op != OT_OP_MAP) return eval_elementwise(i, ops, out);
    switch (op) {
    case OT_OP_PARAMETER:
        return ot_error(OT_ERR_INVALID_ARGUMENT, "parameter %s has no value outside a computation",
                        EX_NAME(i));
    case OT_OP_CONSTANT: return eval_constant(i, out);
    case OT_OP_IOTA: return eval_iota(i, out);
    case OT_OP_BROADCAST:
    case OT_OP_RESHAPE:
    case OT_OP_BITCAST:
    case OT_OP_TRANSPOSE:
    case OT_OP_SLICE:
    case OT_OP_DYNAMIC_SLICE:
    case OT_OP_DYNAMIC_UPDATE_SLICE:
    case OT_OP_CONCATENATE:
    case OT_OP_PAD:
    case OT_OP_REVERSE: return ex_kernel_shape(x, i, ops, out);
    case OT_OP_GATHER: return ex_kernel_gather(i, ops, out);
    case OT_OP_SCATTER: return ex_kernel_scatter(x, i, ops, out);
    case OT_OP_REDUCE: return ex_kernel_reduce(x, i, ops, out);
    case OT_OP_REDUCE_WINDOW: return ex_kernel_reduce_window(x, i, ops, out);
    case OT_OP_SELECT_AND_SCATTER: return ex_kernel_select_and_scatter(x, i, ops, out);
    case OT_OP_SORT: return ex_kernel_sort(x, i, ops, out);
    case OT_OP_TOPK: return ex_kernel_topk(i, ops, out);
    case OT_OP_MAP: return ex_kernel_map(x, i, ops, out);
    case OT_OP_DOT: return ex_kernel_dot(i, ops, out);
    case OT_OP_CONVOLUTION: return ex_kernel_convolution(i, ops, out);
    case OT_OP_TUPLE: return eval_tuple(i, ops, out);
    case OT_OP_GET_TUPLE_ELEMENT:
        if (ops[0]->kind != OT_IR_TUPLE || i->attrs->index < 0 || i->attrs->index >= ops[0]->ntuple)
            return ot_error(OT_ERR_INTERNAL, "%s: bad tuple index", EX_NAME(i));
        return ot_value_copy(out, &ops[0]->tuple[i->attrs->index]);
    case OT_OP_CALL:
    case OT_OP_FUSION:
    case OT_OP_WHILE:
    case OT_OP_CONDITIONAL: return eval_control_deep(x, i, ops, out);
    case OT_OP_OPT_BARRIER: return ot_value_copy(out, ops[0]);
    case OT_OP_ALL_REDUCE:
    case OT_OP_ALL_GATHER:
    case OT_OP_REDUCE_SCATTER:
    case OT_OP_ALL_TO_ALL:
    case OT_OP_COLLECTIVE_PERMUTE:
    case OT_OP_REPLICA_ID:
    case OT_OP_PARTITION_ID: return ex_kernel_collective(x, i, ops, out);
    case OT_OP_RNG_BIT_GENERATOR: return ex_kernel_rng(i, ops, out);
    case OT_OP_CUSTOM_CALL: {
        const char *target = i->attrs->custom_call_target ? i->attrs->custom_call_target : "";
        if (!strcmp(target, EX_STATE8_TARGET))
            return ex_kernel_state8(i, ops, !x->opts.keep_denormals, out);
        if (ir_lapack_target_known(target)) return ex_kernel_lapack(i, ops, out);
        const char *hw = custom_call_hardware(target);
        if (hw)
            return ot_error(OT_ERR_UNSUPPORTED_HARDWARE,
                            "custom-call %s: target \"%s\" is %s; it runs only on that hardware, "
                            "and optitpu's devices are host CPUs",
                            EX_NAME(i), target, hw);
        return ot_error(OT_ERR_UNIMPLEMENTED, "custom-call %s: target \"%s\" is not implemented",
                        EX_NAME(i), target);
    }
    default:
        return ot_error(OT_ERR_UNIMPLEMENTED, "%s: opcode %s is not implemented by the evaluator",
                        EX_NAME(i), ot_opcode_name(op));
    }
}

/* ---- scalar functions ------------------------------------------------------------------ */

typedef struct scalar_step {
    const ot_instr *i;
    int slot;
    int ops[3];
} scalar_step;

struct ex_scalar_fn {
    ex_ctx *x;
    const ot_computation *c;
    bool fast;
    int nsteps;
    scalar_step *steps;
    uint64_t *slots;
    int nparams;
    int *param_slot;
    ot_dtype *param_dt;
    int nout;
    int *out_slot;
    ot_dtype *out_dt;
};

static bool scalar_ok(const ot_ir_shape *s) {
    return s->kind == OT_IR_ARRAY && s->array.rank == 0;
}

static bool scalar_op_ok(const ot_instr *i) {
    ot_opcode op = i->opcode;
    if (!scalar_ok(&i->shape)) return false;
    /* complex values (16 bytes for c128) take the general path, where complex.c computes them */
    if (ir_instr_complex(i)) return false;
    if (op == OT_OP_PARAMETER) return true;
    if (op == OT_OP_CONSTANT) return i->attrs->literal && !i->attrs->literal->elided;
    if (op == OT_OP_MAP) return false;
    if (op == OT_OP_BITCAST_CONVERT)
        return ot_dtype_size(i->shape.array.dtype) == ot_dtype_size(ot_instr_dtype(i->operands[0]));
    if (ot_opcode_is_elementwise(op) || op == OT_OP_COPY) {
        if (i->noperands > 3) return false;
        for (int k = 0; k < i->noperands; k++)
            if (!scalar_ok(&i->operands[k]->shape)) return false;
        return true;
    }
    return false;
}

void ex_scalar_fn_free(ex_scalar_fn *f) {
    if (!f) return;
    ot_free(f->steps);
    ot_free(f->slots);
    ot_free(f->param_slot);
    ot_free(f->param_dt);
    ot_free(f->out_slot);
    ot_free(f->out_dt);
    ot_free(f);
}

ot_status ex_scalar_fn_new(ex_ctx *x, const ot_computation *c, ex_scalar_fn **out) {
    *out = NULL;
    ex_scalar_fn *f = ot_calloc(1, sizeof *f);
    if (!f) return ot_error(OT_ERR_OUT_OF_MEMORY, "scalar function: out of memory");
    f->x = x;
    f->c = c;
    f->nparams = c->nparams;
    const ot_instr *root = c->root;
    if (!root) {
        ot_free(f);
        return ot_error(OT_ERR_INVALID_ARGUMENT, "computation %s has no root", c->name);
    }
    f->nout = root->shape.kind == OT_IR_TUPLE ? root->shape.ntuple : 1;
    int64_t n = c->ninstrs;
    f->steps = ot_calloc((size_t)(n ? n : 1), sizeof *f->steps);
    f->slots = ot_calloc((size_t)(n ? n : 1), sizeof *f->slots);
    f->param_slot = ot_calloc((size_t)(f->nparams ? f->nparams : 1), sizeof(int));
    f->param_dt = ot_calloc((size_t)(f->nparams ? f->nparams : 1), sizeof(ot_dtype));
    f->out_slot = ot_calloc((size_t)f->nout + 1, sizeof(int));
    f->out_dt = ot_calloc((size_t)f->nout + 1, sizeof(ot_dtype));
    if (!f->steps || !f->slots || !f->param_slot || !f->param_dt || !f->out_slot || !f->out_dt) {
        ex_scalar_fn_free(f);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "scalar function: out of memory");
    }
    for (int p = 0; p < f->nparams; p++) {
        if (!c->params[p] || !scalar_ok(&c->params[p]->shape)) {
            ex_scalar_fn_free(f);
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "computation %s: parameter %d must be a scalar array", c->name, p);
        }
        f->param_dt[p] = c->params[p]->shape.array.dtype;
        f->param_slot[p] = -1;
    }
    if (root->shape.kind == OT_IR_TUPLE) {
        for (int k = 0; k < f->nout; k++) {
            if (!scalar_ok(&root->shape.tuple[k])) {
                ex_scalar_fn_free(f);
                return ot_error(OT_ERR_INVALID_ARGUMENT, "computation %s must return scalars",
                                c->name);
            }
            f->out_dt[k] = root->shape.tuple[k].array.dtype;
        }
    } else if (scalar_ok(&root->shape)) {
        f->out_dt[0] = root->shape.array.dtype;
    } else {
        ex_scalar_fn_free(f);
        return ot_error(OT_ERR_INVALID_ARGUMENT, "computation %s must return scalars", c->name);
    }
    /* the fast form: every instruction a scalar elementwise op; the root may be a tuple of them.
     * Slots are indexed by list position; an instruction's operand is found by a linear scan
     * back (called computations are tiny). */
    bool fast = true;
    int k = 0;
    for (const ot_instr *i = c->first; i && fast; i = i->next, k++) {
        if (i == root && i->opcode == OT_OP_TUPLE) {
            for (int o = 0; o < i->noperands; o++)
                if (!scalar_ok(&i->operands[o]->shape)) fast = false;
        } else if (!scalar_op_ok(i)) {
            fast = false;
        }
        f->steps[k].i = i;
        f->steps[k].slot = k;
        for (int o = 0; o < i->noperands && o < 3 && fast; o++) {
            int found = -1;
            for (int q = 0; q < k; q++)
                if (f->steps[q].i == i->operands[o]) found = q;
            if (found < 0) fast = false;
            f->steps[k].ops[o] = found;
        }
        if (i->opcode == OT_OP_PARAMETER) {
            int64_t pn = i->attrs->index;
            if (pn < 0 || pn >= f->nparams)
                fast = false;
            else
                f->param_slot[pn] = k;
        }
        if (i->opcode == OT_OP_CONSTANT && fast)
            memcpy(&f->slots[k], i->attrs->literal->data, ot_dtype_size(i->shape.array.dtype));
    }
    f->nsteps = k;
    if (fast) {
        int rootk = -1;
        for (int q = 0; q < k; q++)
            if (f->steps[q].i == root) rootk = q;
        if (rootk < 0 || (root->opcode == OT_OP_TUPLE && f->nout > 3))
            fast = false; /* a step records at most 3 operands */
        else if (root->opcode == OT_OP_TUPLE)
            for (int o = 0; o < f->nout; o++) f->out_slot[o] = f->steps[rootk].ops[o];
        else
            f->out_slot[0] = rootk;
    }
    f->fast = fast;
    *out = f;
    return OT_OK;
}

static ot_status scalar_step_run(ex_scalar_fn *f, const scalar_step *s) {
    const ot_instr *i = s->i;
    void *y = &f->slots[s->slot];
    const void *a = i->noperands > 0 ? (const void *)&f->slots[s->ops[0]] : NULL;
    const void *b = i->noperands > 1 ? (const void *)&f->slots[s->ops[1]] : NULL;
    const void *c = i->noperands > 2 ? (const void *)&f->slots[s->ops[2]] : NULL;
    ot_dtype t = i->shape.array.dtype;
    ot_opcode op = i->opcode;
    switch (op) {
    case OT_OP_PARAMETER:
    case OT_OP_CONSTANT: return OT_OK;
    case OT_OP_COMPARE:
        return ex_compare(i->attrs->cmp_dir, i->attrs->cmp_type, ot_instr_dtype(i->operands[0]), a,
                          b, y, 1);
    case OT_OP_SELECT: ex_select(a, 0, b, c, y, ot_dtype_size(t), 1); return OT_OK;
    case OT_OP_CLAMP: return ex_clamp(t, a, 0, b, c, 0, y, 1);
    case OT_OP_CONVERT: return ex_convert(ot_instr_dtype(i->operands[0]), t, a, y, 1);
    case OT_OP_BITCAST_CONVERT: memcpy(y, a, ot_dtype_size(t)); return OT_OK;
    case OT_OP_REDUCE_PRECISION:
        return ex_reduce_precision(t, i->attrs->exponent_bits, i->attrs->mantissa_bits, a, y, 1);
    default:
        if (ot_opcode_is_elementwise_unary(op))
            return ex_unary(op, ot_instr_dtype(i->operands[0]), t, a, y, 1);
        return ex_binary(op, t, a, b, y, 1);
    }
}

ot_status ex_scalar_fn_call(ex_scalar_fn *f, const void *const *args, void *const *outs) {
    if (f->fast) {
        for (int p = 0; p < f->nparams; p++)
            if (f->param_slot[p] >= 0)
                memcpy(&f->slots[f->param_slot[p]], args[p], ot_dtype_size(f->param_dt[p]));
        for (int k = 0; k < f->nsteps; k++) {
            if (f->steps[k].i == f->c->root && f->c->root->opcode == OT_OP_TUPLE) continue;
            ot_status st = scalar_step_run(f, &f->steps[k]);
            if (st != OT_OK) return ot_error_wrap(st, "in %s", f->c->name);
        }
        for (int o = 0; o < f->nout; o++)
            memcpy(outs[o], &f->slots[f->out_slot[o]], ot_dtype_size(f->out_dt[o]));
        return OT_OK;
    }
    /* general path: scalar values through the evaluator */
    ot_status st = OT_OK;
    ot_value *vals = ot_calloc((size_t)(f->nparams ? f->nparams : 1), sizeof *vals);
    const ot_value **pv = ot_calloc((size_t)(f->nparams ? f->nparams : 1), sizeof *pv);
    ot_value r = ot_value_empty();
    if (!vals || !pv) {
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "scalar function: out of memory");
        goto done;
    }
    for (int p = 0; p < f->nparams; p++) {
        ot_shape s = ot_shape_scalar(f->param_dt[p]);
        st = ot_value_alloc_array(&vals[p], &s);
        if (st != OT_OK) goto done;
        memcpy(vals[p].array.data, args[p], ot_dtype_size(f->param_dt[p]));
        pv[p] = &vals[p];
    }
    st = ex_eval_computation(f->x, f->c, pv, f->nparams, &r);
    if (st != OT_OK) goto done;
    for (int o = 0; o < f->nout; o++) {
        const ot_value *leaf = r.kind == OT_IR_TUPLE ? &r.tuple[o] : &r;
        memcpy(outs[o], leaf->array.data, ot_dtype_size(f->out_dt[o]));
    }
done:
    ot_value_release(&r);
    if (vals)
        for (int p = 0; p < f->nparams; p++) ot_value_release(&vals[p]);
    ot_free(vals);
    ot_free(pv);
    return st;
}

ot_status ex_scalar_fn_pred(ex_scalar_fn *f, const void *const *args, bool *out) {
    uint64_t r = 0;
    void *o[1] = {&r};
    OT_CHECK(ex_scalar_fn_call(f, args, o));
    *out = (r & 0xff) != 0;
    return OT_OK;
}

/* ---- public entry points --------------------------------------------------------------- */

static ot_status check_args(const ot_computation *c, const ot_value *args, int nargs) {
    if (nargs != c->nparams)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%s takes %d argument%s, got %d", c->name,
                        c->nparams, c->nparams == 1 ? "" : "s", nargs);
    if (nargs > 0 && !args)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: arguments are NULL", c->name);
    for (int p = 0; p < nargs; p++) {
        const ot_instr *pi = c->params[p];
        if (!pi) return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: parameter %d missing", c->name, p);
        if (!ot_value_matches(&args[p], &pi->shape)) {
            char want[128], got[128];
            fmt_shape(&pi->shape, want, sizeof want);
            fmt_value(&args[p], got, sizeof got);
            return ot_error(OT_ERR_SHAPE_MISMATCH, "parameter %d (%s) expects %s, got %s", p,
                            EX_NAME(pi), want, got);
        }
        if (args[p].kind == OT_IR_ARRAY && args[p].array.nbytes && !args[p].array.data)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "parameter %d (%s): argument has no data", p,
                            EX_NAME(pi));
    }
    return OT_OK;
}

ot_status ot_evaluate_computation(const ot_computation *c, const ot_value *args, int nargs,
                                  const ot_eval_options *opts, ot_value *result) {
    if (!result) return ot_error(OT_ERR_INVALID_ARGUMENT, "evaluate: result is NULL");
    *result = ot_value_empty();
    if (!c) return ot_error(OT_ERR_INVALID_ARGUMENT, "evaluate: computation is NULL");
    OT_CHECK(check_args(c, args, nargs));
    ex_ctx x;
    x.opts = opts ? *opts : ot_eval_options_default();
    x.depth = 0;
    x.stack_base = 0;
    const ot_value **pv = ot_calloc((size_t)(nargs ? nargs : 1), sizeof *pv);
    if (!pv) return ot_error(OT_ERR_OUT_OF_MEMORY, "evaluate: out of memory");
    for (int p = 0; p < nargs; p++) pv[p] = &args[p];
    bool ftz = ex_ftz;
    ex_ftz = !x.opts.keep_denormals;
    ot_status st = ex_eval_computation(&x, c, pv, nargs, result);
    ex_ftz = ftz;
    ot_free(pv);
    return st;
}

ot_status ot_evaluate(const ot_module *m, const ot_value *args, int nargs,
                      const ot_eval_options *opts, ot_value *result) {
    if (!result) return ot_error(OT_ERR_INVALID_ARGUMENT, "evaluate: result is NULL");
    *result = ot_value_empty();
    if (!m) return ot_error(OT_ERR_INVALID_ARGUMENT, "evaluate: module is NULL");
    const ot_computation *c = ot_module_entry(m);
    if (!c)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "evaluate: module %s has no entry computation",
                        ot_module_name(m));
    return ot_evaluate_computation(c, args, nargs, opts, result);
}

ot_status ot_evaluate_tensors(const ot_module *m, const ot_tensor *args, int nargs,
                              const ot_eval_options *opts, ot_value *result) {
    if (!result) return ot_error(OT_ERR_INVALID_ARGUMENT, "evaluate: result is NULL");
    *result = ot_value_empty();
    if (nargs < 0 || (nargs > 0 && !args))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "evaluate: bad argument list");
    ot_value *v = ot_calloc((size_t)(nargs ? nargs : 1), sizeof *v);
    if (!v) return ot_error(OT_ERR_OUT_OF_MEMORY, "evaluate: out of memory");
    ot_status st = OT_OK;
    int made = 0;
    for (; made < nargs; made++) {
        st = ot_value_from_tensor(&v[made], &args[made]);
        if (st != OT_OK) break;
    }
    if (st == OT_OK) st = ot_evaluate(m, v, nargs, opts, result);
    for (int p = 0; p < made; p++) ot_value_release(&v[p]);
    ot_free(v);
    return st;
}

ot_status ot_evaluate_instr(const ot_instr *i, const ot_value *operands, int noperands,
                            const ot_eval_options *opts, ot_value *out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "evaluate instruction: out is NULL");
    *out = ot_value_empty();
    if (!i) return ot_error(OT_ERR_INVALID_ARGUMENT, "evaluate instruction: instruction is NULL");
    if (noperands != i->noperands)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%s (%s) has %d operands, got %d values",
                        EX_NAME(i), ot_opcode_name(i->opcode), i->noperands, noperands);
    if (noperands > 0 && !operands)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: operand values are NULL", EX_NAME(i));
    for (int k = 0; k < noperands; k++)
        if (!ot_value_matches(&operands[k], &i->operands[k]->shape)) {
            char want[128], got[128];
            fmt_shape(&i->operands[k]->shape, want, sizeof want);
            fmt_value(&operands[k], got, sizeof got);
            return ot_error(OT_ERR_SHAPE_MISMATCH, "%s: operand %d (%s) expects %s, got %s",
                            EX_NAME(i), k, EX_NAME(i->operands[k]), want, got);
        }
    ex_ctx x;
    x.opts = opts ? *opts : ot_eval_options_default();
    x.depth = 0;
    x.stack_base = 0;
    const ot_value **pv = ot_calloc((size_t)(noperands ? noperands : 1), sizeof *pv);
    if (!pv) return ot_error(OT_ERR_OUT_OF_MEMORY, "evaluate instruction: out of memory");
    for (int k = 0; k < noperands; k++) pv[k] = &operands[k];
    bool ftz = ex_ftz;
    ex_ftz = !x.opts.keep_denormals;
    ot_status st = ex_eval_instr(&x, i, pv, out);
    ex_ftz = ftz;
    ot_free(pv);
    if (st == OT_OK && !ot_value_matches(out, &i->shape)) {
        ot_value_release(out);
        st = ot_error(OT_ERR_INTERNAL, "%s: result does not match its shape", EX_NAME(i));
    }
    return st;
}
