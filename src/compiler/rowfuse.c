/* Row fusion (after the fusion pass): a reduce-rooted fusion C that sums the rows of an input x
 * (its trailing dims) and reads, per row, a value y computed from a sum of the same rows of the
 * same x, takes that sum in. JAX's layer norm (the mean, then the sum of (x - mean)^2) has this
 * shape: fused separately it is two passes over x, which the fusion pass must keep apart (a
 * reduce is only ever a cluster root).
 *
 * y is either the reduce fusion P itself or a loop fusion L over the rows (one element per row)
 * of P's result and of scalars or other per-row values (the mean's division by the row length),
 * or one result of such an L that has several (JAX's L2-normalization gradient computes the
 * norm, its clamp and a reshape in one loop, read by several kernels): all of L's results then
 * stay outputs of the merged fusion.
 * The merged fusion computes, for each row, P's sum, L's ops, then C's sum with y at hand. Then
 * loop fusions that read the merged fusion's per-row results join it (fuse_elements): loops of
 * one element per row (the variance's division when it is an output), and a loop over every
 * element of x (the normalize). Generated code (src/codegen/emit.c, row fusions) runs the result
 * row by row: the row is read from memory once, by the first sum, and again from L1 or L2 by the
 * next sum and the elementwise loop; each sum in the canonical lane order, hence the same bits as
 * the separate kernels and the reference. Results that other kernels read stay outputs.
 *
 * Only float sums: softmax's row maximum followed by its exp-sum has the same shape, but there
 * the exp-sum is compute-bound and already hides its own read of x, so one kernel doing both per
 * row measured slower than the fast reduce kernel's maximum followed by the exp-sum.
 *
 * Legality: the reduces are f32/f64 adds in the lane order of exactly the trailing dims of
 * inputs of the same element count, into the same rows, of 16 elements to 64 KiB; P's reduced
 * input is a parameter x of P, or elementwise ops of one read at each element's own index (an
 * L2 or RMS norm's x * x; row_producer), x is one of C's inputs (the same instruction), and P
 * has no other user; inside C (and inside a joining loop), a per-row value is used only through
 * elementwise ops and reshapes of one element per row and broadcasts onto the leading dims; L and
 * the per-row loops hold only such ops; an elementwise loop reads x itself; no other input of the
 * consumer depends on the producer (a bounded search; too large a search refuses); the merged
 * fusion fits max_io. */
#include "compiler_internal.h"
#include "exec/numerics.h"

#include <stdio.h>

static const ot_computation *fused(const ot_instr *f) {
    return f && f->opcode == OT_OP_FUSION && f->ncalled == 1 ? f->called[0] : NULL;
}

static int64_t numel_of(const ot_instr *i) {
    return i->shape.kind == OT_IR_ARRAY ? ot_shape_numel_unchecked(&i->shape.array) : -1;
}

/* A reduce of the trailing dims of its input with a reducer the row kernel generates; *rows and
 * *len get the row count and length. */
static bool row_reduce(const ot_instr *r, int64_t *rows, int64_t *len) {
    int64_t o, n;
    if (!ex_reduce_rows(r, &o, &n)) return false;
    if (n < EX_RED_LANES) return false;
    const ot_computation *rc = r->called[0];
    const ot_instr *rr = rc->root;
    if (!rr || rc->nparams != 2 || rc->ninstrs != 3 || rr->noperands != 2 ||
        rr->operands[0]->opcode != OT_OP_PARAMETER || rr->operands[1]->opcode != OT_OP_PARAMETER ||
        rr->operands[0] == rr->operands[1])
        return false;
    ot_dtype t = r->shape.array.dtype;
    if (rr->opcode != OT_OP_ADD || (t != OT_F32 && t != OT_F64) || !ex_reduce_lanes(r))
        return false;
    /* a row that stays in the core's caches between its passes (64 KiB); longer rows gain
     * nothing from one kernel and would lose the fast reduce kernel's split of a row over
     * threads */
    if (n * (int64_t)ot_dtype_size(t) > 65536) return false;
    *rows = o;
    *len = n;
    return true;
}

/* Inside C's computation, every use of parameter p is per row: elementwise ops, converts,
 * reshapes and bitcasts of `rows` elements, and broadcasts to rows * len elements whose operand
 * fills the leading dims of the result (so its linear index is the result's divided by len).
 * The rule is per instruction, so each is checked once (visit stamps), however many paths
 * reach it; an explicit stack, no recursion. */
static bool per_row_uses(ot_instr *p, int64_t rows, int64_t len) {
    const ot_computation *c = p->parent;
    const uint64_t stamp = ir_visit_stamps(c->module, 1) + 1;
    int64_t cap = c->ninstrs ? c->ninstrs : 1, sp = 0;
    ot_instr **stack = ot_malloc((size_t)cap * sizeof *stack);
    if (!stack) return false;
    bool ok = true;
    stack[sp++] = p;
    p->visit_ = stamp;
    while (sp && ok) {
        const ot_instr *y = stack[--sp];
        for (int u = 0; u < y->nusers && ok; u++) {
            ot_instr *x = y->users[u];
            if (x->shape.kind != OT_IR_ARRAY) {
                ok = false;
                break;
            }
            int64_t n = numel_of(x);
            if (x->opcode == OT_OP_BROADCAST && n == rows * len) {
                const ot_shape *R = &x->shape.array, *O = &y->shape.array;
                if (x->attrs->ndims != O->rank) {
                    ok = false;
                    break;
                }
                int64_t lead = 1;
                for (int j = 0; j < O->rank && ok; j++) {
                    if (x->attrs->dims[j] != j || R->dims[j] != O->dims[j]) ok = false;
                    lead *= O->dims[j];
                }
                if (lead != rows) ok = false;
                continue; /* the reduced operand's loop reads it once per row */
            }
            if (n != rows) {
                ok = false;
                break;
            }
            bool ew = x->opcode == OT_OP_RESHAPE || x->opcode == OT_OP_BITCAST ||
                      x->opcode == OT_OP_CONVERT || x->opcode == OT_OP_BROADCAST ||
                      ot_opcode_is_elementwise(x->opcode);
            if (!ew || x->opcode == OT_OP_REDUCE) ok = false;
            for (int k = 0; k < x->noperands && ok; k++) {
                int64_t m = numel_of(x->operands[k]);
                if (m != rows && m != 1) ok = false;
            }
            if (!ok || x->visit_ == stamp || x->parent != c) continue;
            x->visit_ = stamp;
            if (sp < cap)
                stack[sp++] = x;
            else
                ok = false;
        }
    }
    ot_free(stack);
    return ok;
}

/* A loop fusion computing one value per row: every instruction has `rows` elements or one.
 * tuple: its root may also be a tuple of such values (several per-row results, each read by
 * other kernels through a get-tuple-element). */
static bool per_row_loop(const ot_instr *l, int64_t rows, bool tuple) {
    const ot_computation *c = fused(l);
    if (!c || !c->root) return false;
    const ot_instr *r = c->root;
    if (tuple && r->opcode == OT_OP_TUPLE) {
        if (r->noperands < 1) return false;
        for (int k = 0; k < r->noperands; k++)
            if (r->operands[k]->shape.kind != OT_IR_ARRAY || numel_of(r->operands[k]) != rows)
                return false;
        for (int u = 0; u < l->nusers; u++)
            if (l->users[u]->opcode != OT_OP_GET_TUPLE_ELEMENT) return false;
    } else if (r->shape.kind != OT_IR_ARRAY || numel_of(l) != rows) {
        return false;
    }
    for (const ot_instr *x = c->first; x; x = x->next) {
        if (x == r && r->opcode == OT_OP_TUPLE) continue;
        if (x->opcode == OT_OP_PARAMETER || x->opcode == OT_OP_CONSTANT) {
            int64_t n = numel_of(x);
            if (n != rows && n != 1) return false;
            continue;
        }
        int64_t n = numel_of(x);
        if (n != rows && n != 1) return false;
        bool ew = x->opcode == OT_OP_RESHAPE || x->opcode == OT_OP_BITCAST ||
                  x->opcode == OT_OP_CONVERT || x->opcode == OT_OP_BROADCAST ||
                  ot_opcode_is_elementwise(x->opcode);
        if (!ew || ot_instr_has_side_effect(x)) return false;
    }
    return true;
}

/* Whether `target` is reached from the users of `from` other than `skip` (bounded: false when
 * the search is too large, which the caller treats as reached). */
static bool reaches(ot_instr *from, const ot_instr *skip, const ot_instr *target) {
    /* a fresh visit stamp: marks left by earlier searches read as unvisited */
    const uint64_t stamp = ir_visit_stamps(from->parent->module, 1) + 1;
    enum { LIMIT = 4096 };
    ot_instr *stack[LIMIT];
    int sp = 0, seen = 0;
    for (int u = 0; u < from->nusers; u++) {
        ot_instr *x = from->users[u];
        if (x == skip || x->visit_ == stamp) continue;
        x->visit_ = stamp;
        if (sp == LIMIT) return true;
        stack[sp++] = x;
    }
    while (sp) {
        ot_instr *x = stack[--sp];
        if (x == target) return true;
        if (++seen > LIMIT) return true;
        for (int u = 0; u < x->nusers; u++) {
            ot_instr *y = x->users[u];
            if (y->visit_ == stamp) continue;
            y->visit_ = stamp;
            if (sp == LIMIT) return true;
            stack[sp++] = y;
        }
    }
    return false;
}

typedef struct rf_inputs {
    ot_instr **v;
    int64_t n, cap;
} rf_inputs;

static ot_status add_input(rf_inputs *in, ot_instr *x, int64_t *idx) {
    for (int64_t k = 0; k < in->n; k++)
        if (in->v[k] == x) {
            *idx = k;
            return OT_OK;
        }
    OT_CHECK(cc_grow(&in->v, &in->cap, in->n + 1, sizeof *in->v));
    in->v[in->n] = x;
    *idx = in->n++;
    return OT_OK;
}

/* Clones fusion f's computation into dst: parameter k becomes fparam[k] (or `subst` for the
 * parameter whose operand is `subst_of`); returns the root's clone. */
static ot_status clone_body(ot_computation *dst, const ot_instr *f, ot_instr *const *fparam,
                            const ot_instr *subst_of, ot_instr *subst, ot_instr **root) {
    const ot_computation *c = fused(f);
    int most = 1;
    for (const ot_instr *x = c->first; x; x = x->next)
        if (x->noperands > most) most = x->noperands;
    ot_instr **ops = ot_malloc((size_t)most * sizeof *ops);
    if (!ops) return ot_error(OT_ERR_OUT_OF_MEMORY, "row fusion: out of memory");
    ot_status s = OT_OK;
    for (ot_instr *x = c->first; x && s == OT_OK; x = x->next) x->user_data = NULL;
    for (ot_instr *x = c->first; x && s == OT_OK; x = x->next) {
        if (x->opcode == OT_OP_PARAMETER) {
            int64_t k = x->attrs->index;
            if (k < 0 || k >= f->noperands) {
                s = ot_error(OT_ERR_INTERNAL, "row fusion: parameter number");
                break;
            }
            x->user_data = f->operands[k] == subst_of ? subst : fparam[k];
            continue;
        }
        for (int q = 0; q < x->noperands; q++) ops[q] = x->operands[q]->user_data;
        ot_instr *cl = NULL;
        s = ot_instr_clone(dst, x, ops, NULL, &cl);
        x->user_data = cl;
    }
    if (s == OT_OK) *root = c->root->user_data;
    for (ot_instr *x = c->first; x; x = x->next) x->user_data = NULL;
    ot_free(ops);
    return s;
}

/* Merges P (and L) into C; see the header comment. */
static ot_status merge(ot_module *m, ot_computation *entry, ot_instr *C, int q, ot_instr *L,
                       ot_instr *P, ot_instr **merged) {
    ot_instr *y = C->operands[q];
    rf_inputs in = {0};
    ot_status s = OT_OK;
    ot_instr **map_c = NULL, **map_l = NULL, **map_p = NULL;
    char name[256];
    snprintf(name, sizeof name, "%s.rows", fused(C)->name);
    ot_computation *fc = ot_module_add_computation(m, name);
    if (!fc)
        return ot_module_status(m) != OT_OK ? ot_module_status(m)
                                            : ot_error(OT_ERR_OUT_OF_MEMORY, "row fusion");
    map_c = ot_calloc((size_t)C->noperands + 1, sizeof *map_c);
    map_p = ot_calloc((size_t)P->noperands + 1, sizeof *map_p);
    map_l = L ? ot_calloc((size_t)L->noperands + 1, sizeof *map_l) : NULL;
    if (!map_c || !map_p || (L && !map_l)) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "row fusion: out of memory");
        goto done;
    }
    /* inputs: C's (less y), then P's and L's not already there */
    const ot_instr *srcs[3] = {C, P, L};
    ot_instr **maps[3] = {map_c, map_p, map_l};
    for (int f = 0; f < 3 && s == OT_OK; f++) {
        const ot_instr *F = srcs[f];
        if (!F) continue;
        for (int k = 0; k < F->noperands && s == OT_OK; k++) {
            ot_instr *o = F->operands[k];
            if ((F == C && k == q) || (F == L && o == P)) continue;
            int64_t idx = -1;
            int64_t before = in.n;
            s = add_input(&in, o, &idx);
            if (s != OT_OK) break;
            ot_instr *prm;
            if (idx == before && (s = ir_param_known(fc, idx, &o->shape, &prm)) != OT_OK) break;
            maps[f][k] = fc->params[idx];
        }
    }
    ot_instr *rp = NULL, *rl = NULL, *rc = NULL;
    /* L of several results (y one of its get-tuple-elements): all of them stay outputs, in
     * L's order, then C's */
    bool lt = L && fused(L)->root->opcode == OT_OP_TUPLE;
    if (s == OT_OK) s = clone_body(fc, P, map_p, NULL, NULL, &rp);
    if (s == OT_OK && L) s = clone_body(fc, L, map_l, P, rp, &rl);
    ot_instr *ry = lt && rl ? rl->operands[y->attrs->index] : L ? rl : rp;
    if (s == OT_OK) s = clone_body(fc, C, map_c, y, ry, &rc);
    if (s != OT_OK) goto done;
    bool y_out = y->nusers > 1; /* read by other kernels too */
    ot_instr *root = rc;
    int nl = lt ? rl->noperands : 0;
    if (lt) {
        ot_instr **all = ot_malloc((size_t)(nl + 1) * sizeof *all);
        if (!all) {
            s = ot_error(OT_ERR_OUT_OF_MEMORY, "row fusion: out of memory");
            goto done;
        }
        for (int k = 0; k < nl; k++) all[k] = rl->operands[k];
        all[nl] = rc;
        root = ot_build_tuple(fc, all, nl + 1);
        ot_free(all);
        if (!root) {
            s = ot_module_status(m);
            if (s == OT_OK) s = ot_error(OT_ERR_INTERNAL, "row fusion: tuple");
            goto done;
        }
        s = ot_instr_remove(rl); /* L's own tuple, now unused */
        if (s != OT_OK) goto done;
    } else if (y_out) {
        ot_instr *pair[2] = {L ? rl : rp, rc};
        root = ot_build_tuple(fc, pair, 2);
        if (!root) {
            s = ot_module_status(m);
            if (s == OT_OK) s = ot_error(OT_ERR_INTERNAL, "row fusion: tuple");
            goto done;
        }
    }
    ot_computation_set_root(fc, root);
    ot_attrs at = {0};
    at.fusion_kind = OT_FUSION_INPUT;
    ot_instr *mf = ot_build(entry, OT_OP_FUSION, in.v, (int)in.n, &at, &fc, 1, NULL, NULL);
    if (!mf) {
        s = ot_module_status(m);
        if (s == OT_OK) s = ot_error(OT_ERR_INTERNAL, "row fusion: builder failed");
        goto done;
    }
    if (lt) {
        /* C's result, then each get-tuple-element of L (collected first: replacing and
         * removing them changes L's users) */
        ot_instr *gc = ot_build_get_tuple_element(entry, mf, nl);
        ot_instr **gs = ot_malloc((size_t)(L->nusers ? L->nusers : 1) * sizeof *gs);
        int ng = L->nusers;
        if (!gc || !gs) {
            ot_free(gs);
            s = ot_module_status(m);
            if (s == OT_OK) s = ot_error(OT_ERR_OUT_OF_MEMORY, "row fusion: get-tuple-element");
            goto done;
        }
        for (int u = 0; u < ng; u++) gs[u] = L->users[u];
        s = ot_instr_replace_all_uses(C, gc);
        if (s == OT_OK) s = ot_instr_remove(C);
        for (int u = 0; u < ng && s == OT_OK; u++) {
            ot_instr *g = ot_build_get_tuple_element(entry, mf, gs[u]->attrs->index);
            if (!g) {
                s = ot_module_status(m);
                if (s == OT_OK) s = ot_error(OT_ERR_INTERNAL, "row fusion: get-tuple-element");
                break;
            }
            s = ot_instr_replace_all_uses(gs[u], g);
            if (s == OT_OK) s = ot_instr_remove(gs[u]);
        }
        ot_free(gs);
    } else if (y_out) {
        ot_instr *g0 = ot_build_get_tuple_element(entry, mf, 0);
        ot_instr *g1 = g0 ? ot_build_get_tuple_element(entry, mf, 1) : NULL;
        if (!g1) {
            s = ot_module_status(m);
            if (s == OT_OK) s = ot_error(OT_ERR_INTERNAL, "row fusion: get-tuple-element");
            goto done;
        }
        s = ot_instr_replace_all_uses(C, g1);
        if (s == OT_OK) s = ot_instr_remove(C);
        if (s == OT_OK) s = ot_instr_replace_all_uses(y, g0);
    } else {
        s = ot_instr_replace_all_uses(C, mf);
        if (s == OT_OK) s = ot_instr_remove(C);
    }
    if (s == OT_OK && L) s = ot_instr_remove(L);
    if (s == OT_OK) s = ot_instr_remove(P);
    if (s == OT_OK) *merged = mf;
    if (s == OT_OK) cc_fusion_note(fc);
done:
    ot_free(in.v);
    ot_free(map_c);
    ot_free(map_p);
    ot_free(map_l);
    return s;
}

/* ---- the elementwise loop after the sums ---------------------------------------------------
 * A loop fusion N over the rows of x (layer norm's normalize) that reads x and per-row results of
 * a row fusion (or reduce fusion) R of the same x joins R: per row, after the sums, a loop over
 * the row computes N's elements, reading the row from L1 once more. R's results that other
 * kernels read stay outputs. */

/* A fusion whose reduces are all row sums of inputs of rows * len elements, at least one of them
 * of a parameter, or of elementwise ops of one (RMS norm's x * x): *x gets that parameter's
 * operand. */
static bool row_producer(const ot_instr *R, int64_t *rows, int64_t *len, ot_instr **x) {
    const ot_computation *c = fused(R);
    if (!c || !c->root) return false;
    int nred = 0;
    *x = NULL;
    for (const ot_instr *i = c->first; i; i = i->next) {
        if (i->opcode != OT_OP_REDUCE) continue;
        int64_t r, n;
        if (!row_reduce(i, &r, &n)) return false;
        if (nred++ && (r != *rows || n != *len)) return false;
        *rows = r;
        *len = n;
        const ot_instr *op = i->operands[0];
        if (!*x && op->opcode == OT_OP_PARAMETER && op->attrs->index >= 0 &&
            op->attrs->index < R->noperands)
            *x = R->operands[op->attrs->index];
    }
    /* no sum of a parameter itself (RMS norm's sum of x * x): x is a parameter of the rows'
     * size read only elementwise (at each element's own index, as the sums read their rows) */
    for (const ot_instr *p = c->first; nred && !*x && p; p = p->next) {
        if (p->opcode != OT_OP_PARAMETER || numel_of(p) != *rows * *len || p->nusers == 0 ||
            p->attrs->index < 0 || p->attrs->index >= R->noperands)
            continue;
        bool ew = true;
        for (int u = 0; u < p->nusers && ew; u++) {
            const ot_instr *y = p->users[u];
            ew = ot_opcode_is_elementwise(y->opcode) && y->opcode != OT_OP_REDUCE &&
                 numel_of(y) == *rows * *len;
        }
        if (ew) *x = R->operands[p->attrs->index];
    }
    if (!nred || !*x) return false;
    /* outputs: one element per row each */
    const ot_instr *root = c->root;
    if (root->opcode == OT_OP_TUPLE) {
        for (int k = 0; k < root->noperands; k++)
            if (numel_of(root->operands[k]) != *rows) return false;
        return true;
    }
    return numel_of(root) == *rows;
}

bool cc_row_candidate(const ot_instr *R, bool *producer) {
    int64_t rows, len;
    ot_instr *x;
    const ot_computation *c = fused(R);
    *producer = row_producer(R, &rows, &len, &x);
    return *producer || (c && c->root && row_reduce(c->root, &rows, &len));
}

/* A loop fusion of rows * len elements made of ops the row kernel emits per element. */
static bool element_loop(const ot_instr *N, int64_t total) {
    const ot_computation *c = fused(N);
    if (!c || !c->root || c->root->shape.kind != OT_IR_ARRAY || numel_of(N) != total) return false;
    for (const ot_instr *x = c->first; x; x = x->next) {
        bool ok = x->opcode == OT_OP_PARAMETER || x->opcode == OT_OP_CONSTANT ||
                  x->opcode == OT_OP_RESHAPE || x->opcode == OT_OP_BITCAST ||
                  x->opcode == OT_OP_CONVERT || x->opcode == OT_OP_BROADCAST ||
                  x->opcode == OT_OP_IOTA || ot_opcode_is_elementwise(x->opcode);
        if (!ok || x->opcode == OT_OP_REDUCE || ot_instr_has_side_effect(x) ||
            x->shape.kind != OT_IR_ARRAY)
            return false;
    }
    return true;
}

/* The output index of R that operand o of N is (R itself: 0, a get-tuple-element of R: its
 * index), or -1. */
static int64_t r_output(const ot_instr *o, const ot_instr *R) {
    if (o == R) return 0;
    if (o->opcode == OT_OP_GET_TUPLE_ELEMENT && o->noperands == 1 && o->operands[0] == R)
        return o->attrs->index;
    return -1;
}

static ot_status merge_elements(ot_module *m, ot_computation *entry, ot_instr *R, ot_instr *N,
                                ot_instr **merged) {
    const ot_computation *rc = fused(R);
    bool rtuple = rc->root->opcode == OT_OP_TUPLE;
    int nrout = rtuple ? rc->root->noperands : 1;
    rf_inputs in = {0};
    ot_status s = OT_OK;
    ot_instr **map_r = ot_calloc((size_t)R->noperands + 1, sizeof *map_r);
    ot_instr **map_n = ot_calloc((size_t)N->noperands + 1, sizeof *map_n);
    ot_instr **outs = ot_calloc((size_t)nrout + 1, sizeof *outs);     /* R's outputs kept */
    ot_instr **olds = ot_calloc((size_t)nrout + 1, sizeof *olds);     /* their instructions */
    ot_instr **gtes = ot_calloc((size_t)R->nusers + 1, sizeof *gtes); /* R's users to remove */
    char name[256];
    snprintf(name, sizeof name, "%s.elements", rc->name);
    ot_computation *fc = NULL;
    if (!map_r || !map_n || !outs || !olds || !gtes) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "row fusion: out of memory");
        goto done;
    }
    fc = ot_module_add_computation(m, name);
    if (!fc) {
        s = ot_module_status(m) != OT_OK ? ot_module_status(m)
                                         : ot_error(OT_ERR_OUT_OF_MEMORY, "row fusion");
        goto done;
    }
    const ot_instr *srcs[2] = {R, N};
    ot_instr **maps[2] = {map_r, map_n};
    for (int f = 0; f < 2 && s == OT_OK; f++) {
        const ot_instr *F = srcs[f];
        for (int k = 0; k < F->noperands && s == OT_OK; k++) {
            ot_instr *o = F->operands[k];
            if (F == N && r_output(o, R) >= 0) continue;
            int64_t idx = -1, before = in.n;
            s = add_input(&in, o, &idx);
            if (s != OT_OK) break;
            ot_instr *prm;
            if (idx == before && (s = ir_param_known(fc, idx, &o->shape, &prm)) != OT_OK) break;
            maps[f][k] = fc->params[idx];
        }
    }
    ot_instr *rroot = NULL, *nroot = NULL;
    if (s == OT_OK) s = clone_body(fc, R, map_r, NULL, NULL, &rroot);
    if (s != OT_OK) goto done;
    /* N's parameters that are R's outputs read the cloned results */
    for (int k = 0; k < N->noperands; k++) {
        int64_t j = r_output(N->operands[k], R);
        if (j < 0) continue;
        map_n[k] = rtuple ? rroot->operands[j] : rroot;
    }
    s = clone_body(fc, N, map_n, NULL, NULL, &nroot);
    if (s != OT_OK) goto done;
    /* R's outputs read by other kernels stay outputs */
    int nkeep = 0;
    for (int j = 0; j < nrout; j++) {
        ot_instr *old = NULL;
        if (!rtuple) {
            old = R;
        } else {
            for (int u = 0; u < R->nusers && !old; u++)
                if (r_output(R->users[u], R) == j) old = R->users[u];
        }
        if (!old) continue;
        bool other = false;
        for (int u = 0; u < old->nusers; u++) other = other || old->users[u] != N;
        if (entry->root == old) other = true;
        if (!other) continue;
        outs[nkeep] = rtuple ? rroot->operands[j] : rroot;
        olds[nkeep++] = old;
    }
    ot_instr **leaves = ot_malloc((size_t)(nkeep + 1) * sizeof *leaves);
    if (!leaves) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "row fusion: out of memory");
        goto done;
    }
    leaves[0] = nroot;
    for (int j = 0; j < nkeep; j++) leaves[j + 1] = outs[j];
    ot_instr *root = nkeep ? ot_build_tuple(fc, leaves, nkeep + 1) : nroot;
    ot_free(leaves);
    if (!root) {
        s = ot_module_status(m);
        if (s == OT_OK) s = ot_error(OT_ERR_INTERNAL, "row fusion: tuple");
        goto done;
    }
    ot_computation_set_root(fc, root);
    if (rtuple && rroot->nusers == 0) s = ot_instr_remove(rroot); /* R's old tuple */
    if (s != OT_OK) goto done;
    ot_attrs at = {0};
    at.fusion_kind = OT_FUSION_INPUT;
    ot_instr *mf = ot_build(entry, OT_OP_FUSION, in.v, (int)in.n, &at, &fc, 1, NULL, NULL);
    if (!mf) {
        s = ot_module_status(m);
        if (s == OT_OK) s = ot_error(OT_ERR_INTERNAL, "row fusion: builder failed");
        goto done;
    }
    ot_instr *to_n = mf;
    if (nkeep) {
        to_n = ot_build_get_tuple_element(entry, mf, 0);
        if (!to_n) s = ot_module_status(m);
    }
    if (s == OT_OK) s = ot_instr_replace_all_uses(N, to_n);
    if (s == OT_OK) s = ot_instr_remove(N);
    for (int j = 0; j < nkeep && s == OT_OK; j++) {
        ot_instr *g = ot_build_get_tuple_element(entry, mf, j + 1);
        if (!g) {
            s = ot_module_status(m);
            if (s == OT_OK) s = ot_error(OT_ERR_INTERNAL, "row fusion: get-tuple-element");
            break;
        }
        s = ot_instr_replace_all_uses(olds[j], g);
    }
    /* R's get-tuple-elements, then R */
    int ng = 0;
    for (int u = 0; u < R->nusers && s == OT_OK; u++) gtes[ng++] = R->users[u];
    for (int u = 0; u < ng && s == OT_OK; u++)
        if (gtes[u] != R && gtes[u]->nusers == 0) s = ot_instr_remove(gtes[u]);
    if (s == OT_OK) s = ot_instr_remove(R);
    if (s == OT_OK) *merged = mf;
    if (s == OT_OK) cc_fusion_note(fc);
done:
    ot_free(in.v);
    ot_free(map_r);
    ot_free(map_n);
    ot_free(outs);
    ot_free(olds);
    ot_free(gtes);
    return s;
}

/* Whether loop fusion N, a user of R's results, may join R (see merge_elements). */
static bool joins(const ot_instr *R, const ot_instr *N, int64_t rows, int64_t len,
                  const ot_instr *x, int max_io) {
    bool per_row = per_row_loop(N, rows, false);
    if (!per_row) {
        if (!element_loop(N, rows * len)) return false;
        bool reads_x = false;
        for (int q = 0; q < N->noperands && !reads_x; q++) reads_x = N->operands[q] == x;
        if (!reads_x) return false;
    }
    const ot_computation *nc = fused(N);
    for (int q = 0; q < N->noperands; q++) {
        if (r_output(N->operands[q], R) < 0) continue;
        if (numel_of(N->operands[q]) != rows || q >= nc->nparams || !nc->params[q] ||
            !per_row_uses(nc->params[q], rows, len))
            return false;
    }
    /* no other input of N may depend on R */
    if (fused(R)->root->opcode != OT_OP_TUPLE) {
        if (reaches((ot_instr *)R, N, N)) return false;
    } else {
        for (int u = 0; u < R->nusers; u++)
            if (R->users[u]->opcode != OT_OP_GET_TUPLE_ELEMENT || reaches(R->users[u], N, N))
                return false;
    }
    return R->noperands + N->noperands + R->nusers + 2 <= max_io;
}

/* One round over the candidates cand[0..ncand): each row producer takes in the first loop fusion
 * that may join it. The next round's candidates (*next) are what this round changed: each merged
 * fusion, and the input fusions feeding it (their users changed); nothing else can join anew. */
static ot_status fuse_elements(ot_module *m, ot_computation *entry, int max_io, ot_instr **cand,
                               int64_t ncand, ot_instr ***next, int64_t *nnext) {
    ot_status s = OT_OK;
    int64_t cap = 0;
    *next = NULL;
    *nnext = 0;
    for (int64_t j = 0; j < ncand && s == OT_OK; j++) {
        ot_instr *R = cand[j], *x = NULL;
        int64_t rows = 0, len = 0;
        /* merged into an earlier one: removed, its storage kept until the pass ends */
        if (R->dead_ || !row_producer(R, &rows, &len, &x)) continue;
        ot_instr *N = NULL;
        for (int u = 0; u < R->nusers && !N; u++) {
            ot_instr *g = R->users[u];
            ot_instr *const *cnd = &g;
            int nc = 1;
            if (g->opcode == OT_OP_GET_TUPLE_ELEMENT) {
                cnd = g->users;
                nc = g->nusers;
            }
            for (int k = 0; k < nc && !N; k++)
                if (fused(cnd[k]) && joins(R, cnd[k], rows, len, x, max_io)) N = cnd[k];
        }
        if (!N) continue;
        ot_instr *mf = NULL;
        s = merge_elements(m, entry, R, N, &mf);
        for (int k = -1; s == OT_OK && k < mf->noperands; k++) {
            ot_instr *o = k < 0 ? mf : mf->operands[k];
            if (o->opcode == OT_OP_GET_TUPLE_ELEMENT) o = o->operands[0];
            if (!fused(o) || o->attrs->fusion_kind != OT_FUSION_INPUT) continue;
            s = cc_grow(next, &cap, *nnext + 1, sizeof **next);
            if (s == OT_OK) (*next)[(*nnext)++] = o;
        }
    }
    return s;
}

ot_status cc_row_fuse(ot_module *m, int max_io, ot_instr *const *inputs, const bool *producer,
                      int64_t ninputs, bool *changed) {
    ot_computation *entry = ot_module_entry(m);
    if (!entry) return OT_OK;
    /* the candidates of the element rounds: the inputs this loop leaves, then what it merges */
    ot_instr **cand = ot_malloc((size_t)(ninputs ? ninputs : 1) * sizeof *cand);
    int64_t ncand = 0, candcap = ninputs ? ninputs : 1;
    if (!cand) return ot_error(OT_ERR_OUT_OF_MEMORY, "row fusion: out of memory");
    ot_status s = OT_OK;
    for (int64_t j = 0; j < ninputs && s == OT_OK; j++) {
        ot_instr *C = inputs[j];
        if (C->dead_) continue; /* merged into an earlier one */
        const ot_computation *cc = fused(C);
        int64_t rows, len;
        if (!cc->root || !row_reduce(cc->root, &rows, &len)) continue;
        for (int q = 0; q < C->noperands && q < cc->nparams; q++) {
            ot_instr *y = C->operands[q], *L = NULL, *P = NULL;
            /* y: a fusion, or one result of a per-row loop fusion of several (an L2 norm's
             * gradient reads the norm, its reciprocal and its square from one loop) */
            ot_instr *yf =
                y->opcode == OT_OP_GET_TUPLE_ELEMENT && y->noperands == 1 ? y->operands[0] : y;
            if (numel_of(y) != rows || !fused(yf) || !cc->params[q]) continue;
            int64_t r1, n1;
            const ot_computation *yc = fused(yf);
            if (yf == y && yc->root && row_reduce(yc->root, &r1, &n1)) {
                P = y;
            } else if (per_row_loop(yf, rows, yf != y)) {
                L = yf;
                for (int k = 0; k < L->noperands; k++) {
                    ot_instr *o = L->operands[k];
                    const ot_computation *oc = fused(o);
                    if (oc && oc->root && numel_of(o) == rows && row_reduce(oc->root, &r1, &n1)) {
                        if (P && P != o) {
                            P = NULL; /* two reductions: not this form */
                            break;
                        }
                        P = o;
                    }
                }
            }
            if (!P || r1 != rows || n1 != len || P->nusers != 1) continue;
            if (P->users[0] != (L ? L : C)) continue;
            /* P reduces one of C's inputs, the same instruction, or elementwise ops of it
             * (an L2 norm's sum of x * x; row_producer) */
            ot_instr *x = NULL;
            int64_t r2, n2;
            if (!row_producer(P, &r2, &n2, &x) || r2 != rows || n2 != len) continue;
            bool shared = false;
            for (int k = 0; k < C->noperands && !shared; k++)
                shared = k != q && C->operands[k] == x;
            if (!shared || numel_of(x) != rows * len) continue;
            if (!per_row_uses(cc->params[q], rows, len)) continue;
            /* no other input of C may depend on y (or on P through L's other users) */
            bool cyc = false;
            for (int k = 0; k < C->noperands && !cyc; k++) {
                if (k == q) continue;
                const ot_instr *o = C->operands[k];
                if (o == y ||
                    (yf != y && o->opcode == OT_OP_GET_TUPLE_ELEMENT && o->operands[0] == yf)) {
                    cyc = true; /* y twice, or two of L's results: keep it simple */
                    break;
                }
            }
            if (!cyc && yf == y) cyc = reaches(y, C, C);
            for (int u = 0; u < yf->nusers && !cyc && yf != y; u++)
                cyc = reaches(yf->users[u], C, C);
            if (cyc) continue;
            int nl = yf != y ? fused(yf)->root->noperands : 0;
            int io = C->noperands - 1 + P->noperands + (L ? L->noperands - 1 : 0) + 2 + nl;
            if (io > max_io) continue;
            ot_instr *mf = NULL;
            s = merge(m, entry, C, q, L, P, &mf);
            if (s == OT_OK) s = cc_grow(&cand, &candcap, ncand + 1, sizeof *cand);
            if (s == OT_OK) cand[ncand++] = mf;
            if (s == OT_OK && changed) *changed = true;
            break;
        }
    }
    /* the input fusions left (merged ones are dead) that may be row producers, before the
     * merged ones made above */
    int64_t nleft = 0;
    for (int64_t j = 0; j < ninputs; j++)
        if (!inputs[j]->dead_ && (!producer || producer[j])) nleft++;
    if (s == OT_OK) s = cc_grow(&cand, &candcap, ncand + nleft, sizeof *cand);
    if (s == OT_OK) {
        memmove(cand + nleft, cand, (size_t)ncand * sizeof *cand);
        for (int64_t j = 0, k = 0; j < ninputs; j++)
            if (!inputs[j]->dead_ && (!producer || producer[j])) cand[k++] = inputs[j];
        ncand += nleft;
    }
    /* then loops over the rows, per row or per element, until none joins (each round merges at
     * most one per row fusion; a fusion takes in few): the first round over every input fusion,
     * the next ones over what the previous round changed */
    for (int round = 0; round < 8 && s == OT_OK && ncand; round++) {
        ot_instr **next = NULL;
        int64_t nnext = 0;
        s = fuse_elements(m, entry, max_io, cand, ncand, &next, &nnext);
        ot_free(cand);
        cand = next;
        ncand = nnext;
        if (s == OT_OK && nnext && changed) *changed = true;
    }
    ot_free(cand);
    return s;
}
