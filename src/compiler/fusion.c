/* Fusion: clusters are formed on positions of a post order, then each cluster is materialized
 * once as a fusion instruction calling a fused computation.
 *
 * Phase 1 (producer → consumer) visits instructions users-first. A fusible instruction joins the
 * cluster of its users when they all sit in one cluster; when it also has users outside, it joins
 * as an extra output (multi-output) only if no outside user reaches the cluster (no cycle
 * through an outside instruction; an exact search in the users direction, pruned by post-order
 * position: a path into the cluster only climbs positions up to its largest member's). A cheap
 * instruction used by several clusters is duplicated into each; an expensive one (exp, log,
 * divide, power, sqrt, tanh, ...) never is: it starts its own cluster.
 * Phase 2 (siblings) merges loop clusters of one iteration space that read a common full-size
 * input (not a constant, iota or broadcast scalar), when neither reaches the other, and so
 * reduce-rooted clusters whose reduces are of one form the generated code runs together
 * (reduce_siblings).
 * Legality: a member has the cluster's element count (same iteration space, reshapes included),
 * or is smaller and feeds only broadcasts (or the reduce's init) inside the cluster, or (loop
 * clusters) feeds slices, pads, concatenates and reverses, which read it at mapped indices (a
 * row sum's cluster: slices and reverses, rows_reduce); a reduce is only ever a cluster root;
 * operands + outputs stay within max_io. */
#include "compiler_internal.h"
#include "exec/numerics.h"
#include "ir/op_traits.h"

#include <stdio.h>

enum { CL_LOOP = 0, CL_INPUT = 1 };
enum { SMALL = 1, SMALL_PER_ELEM = 2 };

/* An expensive instruction (exp, log, divide, ...) smaller than a cluster joins it only where it
 * is evaluated once per row, or at most this many times per element of its own: read through a
 * broadcast along the last dim, the generated loop computes it again at each element of the
 * iteration (a log of softmax's [64, 1, 50] sum broadcast over [64, 1000, 50] ran 1000 logs per
 * value, 80 ms instead of 3), and read through a pad, at each output of the pad (optax.ctc_loss's
 * gradient pads an exp of [1, 16, 30] to [100, 16, 30] in its scan: 48,000 exps for 480 values);
 * as its own small kernel it runs once per element (XLA's fusion does not fuse an expensive
 * producer into a consumer that reuses its elements either). */
enum { EXPENSIVE_REUSE_MAX = 4 };

/* Whether broadcast b's operand index varies along b's last non-unit dim (the inner loop). */
static bool bcast_varies_last(const ot_instr *b) {
    const ot_shape *R = &b->shape.array, *O = &b->operands[0]->shape.array;
    int last = R->rank - 1;
    while (last >= 0 && R->dims[last] == 1) last--;
    if (last < 0) return false;
    for (int j = 0; j < b->attrs->ndims && j < O->rank; j++)
        if (O->dims[j] > 1 && b->attrs->dims[j] == last) return true;
    return false;
}

/* How deep copies of cheap instructions may feed each other (a broadcast of a converted
 * constant is two deep; a bf16 state widened to f32 and read by a lerp, m + c * (g - m), whose
 * result is also stored rounded, four). */
enum { MAX_DUP_DEPTH = 4 };

typedef struct cluster {
    int32_t parent; /* union-find */
    int kind;
    int64_t iter;            /* element count of the iteration space */
    int64_t maxpos;          /* largest member position */
    int64_t maxpos2;         /* largest member position in the second order (pos2) */
    int64_t minpos, minpos2; /* smallest member positions */
    int nio;                 /* operands + outputs, an upper bound */
    int64_t nmembers;
    int64_t first_out; /* output list (positions, linked by next_out) */
    bool work;         /* a member other than a constant: the cluster is materialized */
} cluster;

typedef struct dupent {
    int32_t cluster;
    int64_t next;
} dupent;

typedef struct fz {
    ot_module *m;
    ot_computation *c;
    int max_io;
    ot_instr **po;
    int64_t n;
    int32_t *cl; /* primary cluster per position, -1 none */
    /* per member: 0, or smaller than its cluster's iteration space (SMALL: read through
     * broadcasts), with SMALL_PER_ELEM when a broadcast reading it varies along the last dim (its
     * value is computed again at each element, not once per row: can_join) */
    uint8_t *small;
    int64_t *next_out;
    int64_t *dup_head; /* per position: first dupent, -1 none */
    dupent *dups;
    int64_t ndups, dupcap;
    cluster *cls;
    int64_t ncls, clcap;
    uint32_t *vis;
    uint32_t vstamp;
    int64_t *stack;
    int64_t *pos2;     /* per position: index in a second topological order */
    uint8_t *dupdepth; /* per duplicated original: 1 + the depth of the copies it feeds */
    int32_t *in_of;    /* per position: the last cluster that counted it as an input */
    bool *keep;        /* per duplicated original: it stays in the entry beside its copies */
    uint32_t *cvis;    /* per cluster: visit stamp of the current reachability query */
    int64_t cviscap;
    /* per position, for a member of a loop cluster: whether it is evaluated at the cluster's
     * own index (ident), and how many other indices it is evaluated at through slices, pads,
     * concatenates and reverses (nctx, an upper bound; see can_join) */
    uint8_t *ident;
    int32_t *nctx;
    int64_t budget; /* visits left to all reachability queries together */
    int64_t fused_count;
} fz;

static int32_t cfind(fz *f, int32_t c) {
    while (f->cls[c].parent != c) {
        f->cls[c].parent = f->cls[f->cls[c].parent].parent;
        c = f->cls[c].parent;
    }
    return c;
}

static int64_t pos_of(const ot_instr *i) {
    return i->mark;
}

static bool reducer_simple(const ot_instr *r) {
    if (r->noperands != 2 || r->ncalled != 1) return false;
    const ot_computation *red = r->called[0];
    const ot_instr *root = red->root;
    if (!root || red->nparams != 2 || red->ninstrs != 3 || root->noperands != 2) return false;
    switch (root->opcode) {
    case OT_OP_ADD:
    case OT_OP_MULTIPLY:
    case OT_OP_MAXIMUM:
    case OT_OP_MINIMUM:
    case OT_OP_AND:
    case OT_OP_OR: break;
    default: return false;
    }
    return root->operands[0]->opcode == OT_OP_PARAMETER &&
           root->operands[1]->opcode == OT_OP_PARAMETER && root->operands[0] != root->operands[1];
}

/* An op whose element is one of its operand's at another index (or the pad value): inside a
 * loop fusion the operand is evaluated at the mapped index, never stored. */
static bool remap_op(const ot_instr *i) {
    return i->opcode == OT_OP_SLICE || i->opcode == OT_OP_PAD || i->opcode == OT_OP_REVERSE ||
           i->opcode == OT_OP_CONCATENATE || i->opcode == OT_OP_DYNAMIC_SLICE ||
           i->opcode == OT_OP_GATHER;
}

/* A dynamic-slice whose start indices are integer scalars the generated code reads exactly
 * (signed, or unsigned below 64 bits): a remap by offsets computed once per run, clamped as
 * HLO clamps them (the window kept inside the operand). */
static bool dynamic_slice_fusible(const ot_instr *i) {
    if (i->noperands < 2 || i->operands[0]->shape.kind != OT_IR_ARRAY) return false;
    if (i->noperands != i->operands[0]->shape.array.rank + 1) return false;
    for (int q = 1; q < i->noperands; q++) {
        const ot_ir_shape *s = &i->operands[q]->shape;
        if (s->kind != OT_IR_ARRAY || cc_numel(i->operands[q]) != 1) return false;
        switch (s->array.dtype) {
        case OT_S8:
        case OT_S16:
        case OT_S32:
        case OT_S64:
        case OT_U8:
        case OT_U16:
        case OT_U32: break;
        default: return false;
        }
    }
    return true;
}

/* A reduce-rooted cluster may hold slices and reverses when its reduce is a float sum of the
 * trailing dims in lanes (a row sum, emit_reduce_lanes or a row fusion): the generated loops'
 * index is then
 * row * len + col, whose digits the remaps read without dividing per element (codegen's
 * row_col_digits). Other reduce forms would divide the index per element, slower than the
 * remap's own copy kernel, so their remaps stay outside. */
static int64_t rows_reduce(const ot_instr *r) {
    int64_t rows, len;
    return r->opcode == OT_OP_REDUCE && ex_reduce_lanes(r) && ex_reduce_rows(r, &rows, &len) &&
                   len >= EX_RED_LANES
               ? len
               : 0;
}

/* Whether the trailing dims of s holding len elements are one dim (and unit dims): its digit
 * is then the column itself, the leading dims' are the row's (no division in the inner loop). */
static bool one_column_dim(const ot_shape *s, int64_t len) {
    int64_t prod = 1;
    int d = s->rank, big = 0;
    while (prod < len && d > 0) {
        prod *= s->dims[--d];
        big += s->dims[d] > 1;
    }
    return prod == len && big <= 1;
}

/* Contexts one member may be evaluated at, and operands a fused concatenate may have: each
 * context of a concatenate evaluates every operand whose range the index may fall in. */
enum { MAX_REMAP_CTX = 16, MAX_CONCAT_OPERANDS = 8 };

static bool fusible(const ot_instr *i) {
    if (i->shape.kind != OT_IR_ARRAY || ot_instr_has_side_effect(i)) return false;
    /* complex values run as reference kernels: native code generates real and integer types */
    if (ir_instr_complex(i)) return false;
    switch (i->opcode) {
    case OT_OP_SLICE:
    case OT_OP_PAD:
    case OT_OP_REVERSE: return true;
    case OT_OP_CONCATENATE: return i->noperands <= MAX_CONCAT_OPERANDS;
    case OT_OP_DYNAMIC_SLICE: return dynamic_slice_fusible(i);
    case OT_OP_GATHER: return ex_gather_rows(i); /* see phase1 */
    case OT_OP_BROADCAST:
    case OT_OP_RESHAPE:
    case OT_OP_BITCAST:
    case OT_OP_CONVERT:
    case OT_OP_IOTA: return true;
    case OT_OP_CONSTANT: return cc_numel(i) == 1 && i->attrs->literal && !i->attrs->literal->elided;
    case OT_OP_REDUCE: return reducer_simple(i);
    case OT_OP_MAP: return false;
    default: return ot_opcode_is_elementwise(i->opcode);
    }
}

/* Inputs i adds to cluster c when it joins, less itself (an input of c until then): its distinct
 * operands not yet counted for c. nio stays an upper bound of c's operands + outputs: an input
 * is counted again only when another cluster counted it in between. commit: record them. */
static int io_delta(fz *f, const ot_instr *i, int32_t c, bool commit) {
    int d = -1;
    for (int q = 0; q < i->noperands; q++) {
        int64_t o = pos_of(i->operands[q]);
        bool again = f->in_of[o] == c;
        for (int r = 0; r < q && !again; r++) again = i->operands[r] == i->operands[q];
        if (again) continue;
        d++;
        if (commit) f->in_of[o] = c;
    }
    return d;
}

static ot_status new_cluster(fz *f, int64_t k, int kind, int64_t iter) {
    OT_CHECK(cc_grow(&f->cls, &f->clcap, f->ncls + 1, sizeof *f->cls));
    if (f->cviscap < f->clcap) {
        uint32_t *nv = ot_realloc(f->cvis, (size_t)f->clcap * sizeof *nv);
        if (!nv) return ot_error(OT_ERR_OUT_OF_MEMORY, "fuse: out of memory");
        memset(nv + f->cviscap, 0, (size_t)(f->clcap - f->cviscap) * sizeof *nv);
        f->cvis = nv;
        f->cviscap = f->clcap;
    }
    int32_t id = (int32_t)f->ncls++;
    ot_instr *i = f->po[k];
    f->cls[id] = (cluster){id,
                           kind,
                           iter,
                           k,
                           f->pos2[k],
                           k,
                           f->pos2[k],
                           i->noperands + 1,
                           1,
                           k,
                           i->opcode != OT_OP_CONSTANT};
    f->cls[id].nio = io_delta(f, i, id, true) + 2; /* its inputs and its output */
    f->cl[k] = id;
    f->ident[k] = 1;
    f->nctx[k] = 0;
    f->next_out[k] = -1;
    return OT_OK;
}

/* pos2[k]: the instruction at post-order position k in a second post order, one that starts
 * from the other end of the list and visits operands last to first. Both orders put users after
 * their operands, so x reaches y only if x precedes y in both: together they prune far more of
 * a reachability search than one order alone (the idea of GRAIL's interval labels). */
static ot_status second_order(fz *f) {
    struct frame {
        ot_instr *i;
        int k;
    } *st = ot_malloc((size_t)(f->n ? f->n : 1) * sizeof *st);
    uint8_t *state = ot_calloc((size_t)(f->n ? f->n : 1), 1);
    if (!st || !state) {
        ot_free(st);
        ot_free(state);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "fuse: out of memory");
    }
    int64_t no = 0;
    for (int64_t r = f->n - 1; r >= 0; r--) {
        if (state[r]) continue;
        int64_t sp = 0;
        st[sp++] = (struct frame){f->po[r], f->po[r]->noperands};
        state[r] = 1;
        while (sp) {
            struct frame *fr = &st[sp - 1];
            if (fr->k > 0) {
                int64_t q = pos_of(fr->i->operands[--fr->k]);
                if (state[q]) continue;
                state[q] = 1;
                st[sp++] = (struct frame){f->po[q], f->po[q]->noperands};
            } else {
                f->pos2[pos_of(fr->i)] = no++;
                sp--;
            }
        }
    }
    ot_free(st);
    ot_free(state);
    return OT_OK;
}

/* Search limits: a query looks at most QUERY_VISITS users, and all queries of one pass together
 * at most REACH_VISITS_PER_INSTR per instruction (plus a constant); past either, the answer is
 * "reached", which only refuses a merge. So the fusion pass stays linear in the graph whatever
 * its shape (random 200k: 4.2 s with 4,096 / 64 counting only instructions queued, 1.7 s with
 * these, 137k -> 132k kernels; the benchmark graph's fusions are the same). */
enum { QUERY_VISITS = 1024, REACH_VISITS_PER_INSTR = 16, REACH_VISITS_MIN = 1 << 20 };

typedef struct query {
    int32_t target;
    int64_t maxpos, maxpos2; /* the target's largest positions */
    int64_t sp, seen;
} query;

/* Enters cluster d from outside: 1 when it is the target, -1 over budget, else its outputs are
 * queued (once per query). A cluster all of whose members lie past the target's positions in
 * either order is not followed (see reaches). */
static int enter_cluster(fz *f, query *qy, int32_t d, int32_t skip) {
    if (d == skip) return 0;
    if (d == qy->target) return 1;
    cluster *D = &f->cls[d];
    if (f->cvis[d] == f->vstamp || D->minpos > qy->maxpos || D->minpos2 > qy->maxpos2) return 0;
    f->cvis[d] = f->vstamp;
    for (int64_t o = D->first_out; o >= 0; o = f->next_out[o]) {
        if (f->vis[o] == f->vstamp) continue;
        if (++qy->seen > QUERY_VISITS || --f->budget < 0) return -1;
        f->vis[o] = f->vstamp;
        f->stack[qy->sp++] = o;
    }
    return 0;
}

/* Reaches position p (a user): a primary member enters its cluster; a duplicated original
 * enters every cluster that holds a copy (its users all sit there); another instruction is
 * queued unless it lies past the target's positions. */
static int enter(fz *f, query *qy, int64_t p, int32_t skip) {
    if (++qy->seen > QUERY_VISITS || --f->budget < 0) return -1; /* every user looked at */
    if (f->cl[p] >= 0) return enter_cluster(f, qy, cfind(f, f->cl[p]), skip);
    if (f->dup_head[p] >= 0) {
        for (int64_t d = f->dup_head[p]; d >= 0; d = f->dups[d].next) {
            int r = enter_cluster(f, qy, cfind(f, f->dups[d].cluster), skip);
            if (r) return r;
        }
        return 0;
    }
    if (f->vis[p] == f->vstamp || p > qy->maxpos || f->pos2[p] > qy->maxpos2) return 0;
    f->vis[p] = f->vstamp;
    f->stack[qy->sp++] = p;
    return 0;
}

/* True when cluster `target` can be reached, following users, from the users of the
 * instructions in starts[] that lie outside cluster `self` (-1: none), in the graph as it will be
 * once every cluster is one instruction. Users sit at larger positions than their operands in
 * both topological orders (pos, pos2), so an instruction outside clusters past the target's
 * largest position in either order cannot reach it through such instructions alone and is not
 * followed, nor is a cluster lying wholly past it; a path that climbs past and comes back
 * through a cluster reaching lower can still be missed, so the pass checks the whole partition
 * for cycles afterwards (scc_split). Each instruction and each cluster is visited at most once
 * per query; a query over its budget answers true (the merge is refused). */
cc_fuse_test_hooks cc_fuse_test;

static bool reaches(fz *f, ot_instr *const *starts, int64_t nstarts, int32_t self, int32_t target) {
    if (cc_fuse_test.no_search) return false;
    query qy = {target, f->cls[target].maxpos, f->cls[target].maxpos2, 0, 0};
    if (++f->vstamp == 0) {
        memset(f->vis, 0, (size_t)f->n * sizeof *f->vis);
        memset(f->cvis, 0, (size_t)f->cviscap * sizeof *f->cvis);
        f->vstamp = 1;
    }
    if (self >= 0 && self != target) f->cvis[self] = f->vstamp; /* its outputs are the starts */
    for (int64_t s = 0; s < nstarts; s++) {
        const ot_instr *x = starts[s];
        for (int u = 0; u < x->nusers; u++) {
            int r = enter(f, &qy, pos_of(x->users[u]), self);
            if (r) return true;
        }
    }
    while (qy.sp) {
        const ot_instr *x = f->po[f->stack[--qy.sp]];
        for (int u = 0; u < x->nusers; u++) {
            int r = enter(f, &qy, pos_of(x->users[u]), -1);
            if (r) return true;
        }
    }
    return false;
}

static bool in_cluster(fz *f, int64_t p, int32_t c) {
    if (f->cl[p] >= 0 && cfind(f, f->cl[p]) == c) return true;
    for (int64_t d = f->dup_head[p]; d >= 0; d = f->dups[d].next)
        if (cfind(f, f->dups[d].cluster) == c) return true;
    return false;
}

/* Whether i may become a member of c (iteration space, operand budget, contexts). A member of a
 * loop cluster is evaluated at the index of each of its users in c; a slice, pad, concatenate or
 * reverse maps its own index to another of its operand, which is then evaluated there (the
 * native loop computes it again; nothing is stored). *id and *nc receive i's contexts in c: the
 * cluster's own index (ident) and others (nctx, counted through remap ops only; broadcasts keep
 * their users' counts, as before remaps fused). An op that computes values (arithmetic, a
 * convert, a compare) is not evaluated at two indices when one comes from a remap: fusing
 * moves never repeats arithmetic, only index work and loads (a stencil of a computed array
 * stores the array once; 300 chained 64x64 stencil steps ran 10x slower with each step's
 * arithmetic repeated at up to 16 indices than as copies). Moves are evaluated at no more than
 * MAX_REMAP_CTX indices. */
static bool can_join(fz *f, ot_instr *i, int32_t c, bool as_output, uint8_t *small, bool *id,
                     int32_t *nc) {
    cluster *C = &f->cls[c];
    int64_t n = cc_numel(i);
    if (C->nio + io_delta(f, i, c, false) + (as_output ? 1 : 0) > f->max_io) return false;
    if (C->nmembers >= OT_FUSION_MAX_INSTRUCTIONS) return false;
    if (i->opcode == OT_OP_REDUCE) return false; /* only ever a root */
    /* a gather's rows are read at a data-dependent index: in a loop cluster's two-level loop one
     * row start per row; a reduce's lanes loop would read them per element */
    if (i->opcode == OT_OP_GATHER && C->kind != CL_LOOP) return false;
    *small = 0;
    bool ident = as_output, remapped = false, others = false, per_elem = false;
    int64_t nctx = 0;
    for (int u = 0; u < i->nusers; u++) {
        ot_instr *x = i->users[u];
        int64_t p = pos_of(x);
        if (!in_cluster(f, p, c)) continue;
        if (remap_op(x)) {
            remapped = true;
            nctx += f->nctx[p] + f->ident[p];
            /* a pad reads its operand at a clamped index for every output, padding included
             * (codegen's select): a smaller operand is computed again at each of them */
            per_elem = per_elem || (f->small[p] & SMALL_PER_ELEM) ||
                       (x->opcode == OT_OP_PAD && n < cc_numel(x));
        } else {
            others = others || !(x->opcode == OT_OP_BROADCAST || f->small[p] ||
                                 (x->opcode == OT_OP_REDUCE && x->operands[0] != i));
            if (f->small[p])
                per_elem = per_elem || (f->small[p] & SMALL_PER_ELEM);
            else if (x->opcode == OT_OP_BROADCAST)
                per_elem = per_elem || bcast_varies_last(x);
            ident = ident || f->ident[p];
            nctx += f->nctx[p];
        }
    }
    if (C->kind != CL_LOOP && (remap_op(i) || remapped || nctx > 0)) {
        /* in a row sum's cluster: a slice or reverse evaluated at the loop's own index, whose
         * trailing dims are one column dim (a pad or a concatenate reads each element through
         * a clamp and a select, a gather in the lanes loop, and the digits of several column
         * dims divide per element: both measured slower than the remap's copy kernel beside
         * the sum); below it, ops that need no digits of their index (values, reshapes, a
         * scalar's broadcast) */
        int64_t len = rows_reduce(f->po[C->maxpos]);
        if (!len) return false;
        if (remap_op(i) && (i->opcode == OT_OP_PAD || i->opcode == OT_OP_CONCATENATE || nctx > 0 ||
                            n != C->iter || !one_column_dim(&i->shape.array, len)))
            return false;
        bool plain = ot_opcode_is_elementwise(i->opcode) || i->opcode == OT_OP_CONVERT ||
                     i->opcode == OT_OP_RESHAPE || i->opcode == OT_OP_BITCAST ||
                     i->opcode == OT_OP_CONSTANT ||
                     (i->opcode == OT_OP_BROADCAST && cc_numel(i->operands[0]) == 1);
        if (nctx > 0 && !remap_op(i) && !plain) return false;
    }
    if (nctx > MAX_REMAP_CTX) return false;
    /* only index work is repeated: an op that computes values is evaluated at one index */
    bool moves = remap_op(i) || i->opcode == OT_OP_BROADCAST || i->opcode == OT_OP_RESHAPE ||
                 i->opcode == OT_OP_BITCAST || i->opcode == OT_OP_IOTA ||
                 i->opcode == OT_OP_CONSTANT;
    if (nctx > 0 && nctx + ident > 1 && !moves) return false;
    *id = ident;
    *nc = (int32_t)nctx;
    if (n == C->iter) return true;
    if (as_output) return false;
    /* at another element count: only into broadcasts, such members, a reduce's init, or (loop
     * clusters) remap ops, which read it at indices of its own shape */
    if (others) return false;
    if (n > C->iter && !remapped) {
        /* larger: every user in c must read it through a remap (directly or through members
         * marked small, which were themselves so admitted) */
        for (int u = 0; u < i->nusers; u++) {
            ot_instr *x = i->users[u];
            int64_t p = pos_of(x);
            if (in_cluster(f, p, c) && !f->small[p]) return false;
        }
    }
    if (per_elem && (ir_op_traits(i->opcode) & IR_OP_EXPENSIVE) && n > 0 &&
        C->iter / n > EXPENSIVE_REUSE_MAX)
        return false;
    *small = (uint8_t)(SMALL | (per_elem ? SMALL_PER_ELEM : 0));
    return true;
}

static ot_status add_dup(fz *f, int64_t k, int32_t c) {
    OT_CHECK(cc_grow(&f->dups, &f->dupcap, f->ndups + 1, sizeof *f->dups));
    f->dups[f->ndups] = (dupent){c, f->dup_head[k]};
    f->dup_head[k] = f->ndups++;
    f->cls[c].nio += io_delta(f, f->po[k], c, true);
    f->cls[c].nmembers++;
    return OT_OK;
}

/* i (at position k) joins cluster c, as an extra output when it has users outside c. */
static void join(fz *f, int64_t k, int32_t c, bool outside, uint8_t small, bool id, int32_t nc) {
    cluster *C = &f->cls[c];
    f->cl[k] = c;
    f->small[k] = small;
    f->ident[k] = id;
    f->nctx[k] = nc;
    C->nio += io_delta(f, f->po[k], c, true) + (outside ? 1 : 0);
    C->nmembers++;
    if (f->pos2[k] > C->maxpos2) C->maxpos2 = f->pos2[k];
    if (f->pos2[k] < C->minpos2) C->minpos2 = f->pos2[k];
    if (k < C->minpos) C->minpos = k;
    if (outside) {
        f->next_out[k] = C->first_out;
        C->first_out = k;
    }
}

/* Outputs of cluster c (its root and extra outputs) as instructions, into out (cap entries). */
static int64_t cluster_outputs(fz *f, int32_t c, ot_instr **out, int64_t cap) {
    int64_t n = 0;
    for (int64_t p = f->cls[c].first_out; p >= 0 && n < cap; p = f->next_out[p])
        out[n++] = f->po[p];
    return n;
}

/* Whether loops reading z gain from running as one (XLA's IsProfitableOperand): a constant, an
 * iota or a broadcast of a scalar costs nothing to read in every loop, so sharing it saves no
 * memory traffic (and CSE makes one such value feed loops all over the graph). */
static bool profitable_shared(const ot_instr *z) {
    if (z->opcode == OT_OP_CONSTANT || z->opcode == OT_OP_IOTA) return false;
    if (z->opcode == OT_OP_BROADCAST && cc_numel(z->operands[0]) <= 1) return false;
    return true;
}

/* Whether reduces a and b (input clusters' roots) can run as one multi-output fusion that
 * reads their operands once: one operand shape, one set of reduced dims, in a form the generated
 * code runs with several reduces in one pass: the leading dims, at least SIB_MIN_COLUMNS kept
 * after them (codegen's column fusions: [B, N] -> [N]; a layer norm's gamma and beta gradients
 * both sum dy over the batch), or the trailing dims of at least
 * SIB_MIN_ROWS rows of at most SIB_MAX_ROW_BYTES (row fusions: the first reduce reads a row
 * from memory, the others from the core's caches). Not for other forms, whose multi-output
 * fusions are interpreted, nor for few long rows (an all-dims sum), which one row loop would
 * run on one thread where a lone reduce splits its row over the pool. */
enum { SIB_MIN_ROWS = 64, SIB_MAX_ROW_BYTES = 65536, SIB_MIN_COLUMNS = 1024 };
static bool reduce_siblings(const ot_instr *a, const ot_instr *b) {
    if (a->opcode != OT_OP_REDUCE || b->opcode != OT_OP_REDUCE || a->noperands != 2 ||
        b->noperands != 2 || a->shape.kind != OT_IR_ARRAY || b->shape.kind != OT_IR_ARRAY)
        return false;
    const ot_shape *sa = &a->operands[0]->shape.array, *sb = &b->operands[0]->shape.array;
    if (a->operands[0]->shape.kind != OT_IR_ARRAY || b->operands[0]->shape.kind != OT_IR_ARRAY ||
        sa->rank != sb->rank || a->attrs->ndims != b->attrs->ndims)
        return false;
    bool red[OT_MAX_RANK] = {false};
    for (int d = 0; d < sa->rank; d++)
        if (sa->dims[d] != sb->dims[d]) return false;
    for (int k = 0; k < a->attrs->ndims; k++) red[a->attrs->dims[k]] = true;
    for (int k = 0; k < b->attrs->ndims; k++)
        if (!red[b->attrs->dims[k]]) return false;
    int64_t rows, len;
    if (ex_reduce_rows(a, &rows, &len) && ex_reduce_rows(b, &rows, &len))
        return rows >= SIB_MIN_ROWS && (rows_reduce(a) > 0) == (rows_reduce(b) > 0) &&
               len * (int64_t)ot_dtype_size(sa->dtype) <= SIB_MAX_ROW_BYTES && len >= 1;
    /* columns: the leading non-unit dims reduced, the others kept, at least SIB_MIN_COLUMNS of
     * them (the column kernel splits its columns over the pool in pieces of 64, where a lone
     * reduce of a parameter, the fast kernel, splits few columns finer: an instance norm's
     * gradient sums of 64 channels ran slower merged; a block of middle dims, [A, R, N] ->
     * [A, N], too: 64x1000x50 f32, a sum beside a max of exp, 2.9 -> 5.1 ms on two threads) */
    bool lead = true, any = false;
    for (int d = 0; d < sa->rank; d++) {
        if (sa->dims[d] == 1) continue;
        if (red[d] && !lead) return false;
        lead = lead && red[d];
        any = any || red[d];
    }
    return any && !lead && cc_numel(a) >= SIB_MIN_COLUMNS;
}

/* Merges cluster b into a (siblings: neither reaches the other, operand and size budgets kept):
 * loop clusters of one iteration space, or input clusters whose reduces are reduce_siblings;
 * false, nothing changed, when it would break one of those. */
static bool merge_siblings(fz *f, int32_t a, int32_t b) {
    ot_instr *outs[64];
    cluster *A = &f->cls[a], *B = &f->cls[b];
    if (a == b || A->kind != B->kind || A->iter != B->iter) return false;
    if (A->kind == CL_INPUT && !reduce_siblings(f->po[A->maxpos], f->po[B->maxpos])) return false;
    if (A->nio + B->nio - 1 > f->max_io) return false;
    if (A->nmembers + B->nmembers > OT_FUSION_MAX_INSTRUCTIONS) return false;
    int64_t na = cluster_outputs(f, a, outs, 64);
    if (na == 64 || reaches(f, outs, na, a, b)) return false;
    int64_t nb = cluster_outputs(f, b, outs, 64);
    if (nb == 64 || reaches(f, outs, nb, b, a)) return false;
    /* concatenate the output lists */
    int64_t *tail = &A->first_out;
    while (*tail >= 0) tail = &f->next_out[*tail];
    *tail = B->first_out;
    A->nio += B->nio - 1;
    A->nmembers += B->nmembers;
    A->work = A->work || B->work;
    if (B->maxpos > A->maxpos) A->maxpos = B->maxpos;
    if (B->maxpos2 > A->maxpos2) A->maxpos2 = B->maxpos2;
    if (B->minpos < A->minpos) A->minpos = B->minpos;
    if (B->minpos2 < A->minpos2) A->minpos2 = B->minpos2;
    B->parent = a;
    return true;
}

/* The distinct clusters (up to 16, in ucl) holding i's users, primary or copies; *outside: a
 * user sits in none or is a duplicated original kept in the entry (or i is the root); *many:
 * more than 16. */
static int user_clusters(fz *f, const ot_instr *i, int32_t ucl[16], bool *outside, bool *many) {
    int nu = 0;
    *outside = f->c->root == i;
    *many = false;
    for (int u = 0; u < i->nusers && !*many; u++) {
        int64_t p = pos_of(i->users[u]);
        bool any = false;
        int32_t cands[17];
        int nc = 0;
        if (f->cl[p] >= 0) cands[nc++] = cfind(f, f->cl[p]);
        for (int64_t d = f->dup_head[p]; d >= 0 && nc < 17; d = f->dups[d].next)
            cands[nc++] = cfind(f, f->dups[d].cluster);
        for (int q = 0; q < nc; q++) {
            any = true;
            bool seen = false;
            for (int j = 0; j < nu && !seen; j++) seen = ucl[j] == cands[q];
            if (seen) continue;
            if (nu == 16) {
                *many = true;
                break;
            }
            ucl[nu++] = cands[q];
        }
        if (!any || (f->keep[p] && f->cl[p] < 0)) *outside = true; /* a kept original reads it */
    }
    return nu;
}

static ot_status phase1(fz *f) {
    int32_t ucl[16];
    for (int64_t k = f->n - 1; k >= 0; k--) {
        ot_instr *i = f->po[k];
        if (!fusible(i)) continue;
        if (i->opcode == OT_OP_REDUCE) {
            OT_CHECK(new_cluster(f, k, CL_INPUT, cc_numel(i->operands[0])));
            continue;
        }
        bool outside, many;
        int nu = user_clusters(f, i, ucl, &outside, &many);
        /* a row gather is fused only into the one cluster that reads it all (XLA fuses a gather
         * into its consumer): the rows are then read from the table, its result never stored.
         * Read by several clusters or outside, it stays the fast gather kernel (no cluster), whose
         * result is read from memory once per reader instead of gathering from the table again. */
        if (i->opcode == OT_OP_GATHER && (many || outside || nu != 1)) continue;
        uint8_t small = 0;
        bool id = true;
        int32_t nc = 0;
        /* users in several loop clusters over its own iteration space that do not reach each
         * other: the clusters become one (multi-output, XLA's sibling fusion) and it joins
         * that, computed once, instead of being copied into each; a chain read by two outputs
         * (threefry's rounds, the running sum and its state) then runs as one loop storing
         * each output, where copies stop at MAX_DUP_DEPTH and split it into two loops joined
         * by stored intermediates */
        if (!many && nu >= 2 && profitable_shared(i)) {
            int32_t c = ucl[0];
            bool all = true;
            for (int j = 1; j < nu && all; j++) {
                int32_t d = cfind(f, ucl[j]);
                c = cfind(f, c);
                all = f->cls[c].iter == cc_numel(i) && merge_siblings(f, c, d);
            }
            c = cfind(f, c);
            if (all && can_join(f, i, c, outside, &small, &id, &nc) &&
                (!outside || !reaches(f, &i, 1, c, c))) {
                join(f, k, c, outside, small, id, nc);
                continue;
            }
            /* (clusters merged before a refusal stay merged: siblings, legal either way) */
            nu = user_clusters(f, i, ucl, &outside, &many);
        }
        /* a scalar constant read outside one cluster is no cluster's output: it stays in the
         * entry and materialize copies it into each fusion that reads it. As an output it would
         * be an edge from its cluster to every reader, and a cycle through it (a loss's scalar
         * 1/n also scaling the gradient's rows) split whole clusters into single kernels */
        if (i->opcode == OT_OP_CONSTANT && (outside || many || nu != 1)) {
            OT_CHECK(new_cluster(f, k, CL_LOOP, cc_numel(i)));
            continue;
        }
        if (!many && nu == 1 && can_join(f, i, ucl[0], outside, &small, &id, &nc) &&
            (!outside || !reaches(f, &i, 1, ucl[0], ucl[0]))) {
            join(f, k, ucl[0], outside, small, id, nc);
            continue;
        }
        /* a cheap instruction whose users all sit in several clusters is duplicated into each,
         * unless copies would feed copies more than MAX_DUP_DEPTH deep: a chain whose values
         * are each read twice (a residual stack) would otherwise be copied whole into every
         * cluster that reads its end */
        int depth = 1;
        for (int u = 0; u < i->nusers; u++) {
            int64_t p = pos_of(i->users[u]);
            if (f->cl[p] < 0 && f->dup_head[p] >= 0 && f->dupdepth[p] + 1 > depth)
                depth = f->dupdepth[p] + 1;
        }
        bool dup = !(ir_op_traits(i->opcode) & IR_OP_EXPENSIVE) && !many && !outside && nu >= 2 &&
                   depth <= MAX_DUP_DEPTH;
        if (dup) f->dupdepth[k] = (uint8_t)depth;
        /* a copy smaller than its cluster leaves no small mark for its own operands (only the
         * primary cluster's is kept), so only a broadcast of a scalar, whose operand needs
         * none, is copied in as one: a per-row constant (layer norm's 1/n as [rows, 1]) read
         * by two clusters is then no extra output of one of them, which would keep the
         * per-row loop holding it out of row fusion */
        bool scalar_bcast =
            i->opcode == OT_OP_BROADCAST && i->noperands == 1 && cc_numel(i->operands[0]) == 1;
        bool did = false;
        int32_t dnc = 0;
        for (int j = 0; j < nu && dup; j++) {
            uint8_t sm = 0;
            bool jid = false;
            int32_t jnc = 0;
            dup = can_join(f, i, ucl[j], false, &sm, &jid, &jnc) && (!sm || scalar_bcast);
            did = did || jid;
            if (jnc > dnc) dnc = jnc;
        }
        for (int j = 0; j < nu && dup; j++) OT_CHECK(add_dup(f, k, ucl[j]));
        if (dup) {
            f->ident[k] = did; /* (the most of any cluster holding a copy) */
            f->nctx[k] = dnc;
            continue;
        }
        /* otherwise it joins the cluster of its users made last (the most upstream: the one
         * the others are least likely to reach) as an extra output, where that makes no cycle,
         * so that a chain read from two clusters goes on in one instead of splitting in two */
        if (!many && nu >= 2) {
            int32_t c = ucl[0];
            for (int j = 1; j < nu; j++)
                if (ucl[j] > c) c = ucl[j];
            if (can_join(f, i, c, true, &small, &id, &nc) && !reaches(f, &i, 1, c, c)) {
                join(f, k, c, true, small, id, nc);
                continue;
            }
        }
        /* a broadcast of a scalar read by clusters and by instructions outside any, which no
         * cluster can take as an extra output (a scatter-add's zero operand that the
         * optimizer's update, downstream of the scatter, also compares with): a copy in each
         * cluster, the original kept in the entry for the others. The clusters then read no
         * stored array of one repeated value, and the outside user is its only reader (a
         * scatter then updates it in place instead of copying it first). */
        if (scalar_bcast && outside && !many && nu >= 1 && f->c->root != i &&
            depth <= MAX_DUP_DEPTH) {
            bool ok = true;
            did = false;
            dnc = 0;
            for (int j = 0; j < nu && ok; j++) {
                uint8_t sm = 0;
                bool jid = false;
                int32_t jnc = 0;
                ok = can_join(f, i, ucl[j], false, &sm, &jid, &jnc);
                did = did || jid;
                if (jnc > dnc) dnc = jnc;
            }
            if (ok) {
                for (int j = 0; j < nu; j++) OT_CHECK(add_dup(f, k, ucl[j]));
                f->dupdepth[k] = (uint8_t)depth;
                f->keep[k] = true;
                f->ident[k] = did;
                f->nctx[k] = dnc;
                continue;
            }
        }
        OT_CHECK(new_cluster(f, k, CL_LOOP, cc_numel(i)));
    }
    return OT_OK;
}

static ot_status phase2(fz *f) {
    for (int64_t k = 0; k < f->n; k++) {
        ot_instr *z = f->po[k];
        if (!profitable_shared(z)) continue;
        int32_t first[2] = {-1, -1}; /* per kind: loop clusters, input clusters */
        int scanned = 0;
        for (int u = 0; u < z->nusers && scanned < 32; u++, scanned++) {
            int64_t p = pos_of(z->users[u]);
            if (f->cl[p] < 0) continue;
            int32_t c = cfind(f, f->cl[p]);
            int kind = f->cls[c].kind;
            if (f->cls[c].iter != cc_numel(z) || cc_numel(z) <= 1) continue;
            if (first[kind] < 0) {
                first[kind] = c;
                continue;
            }
            first[kind] = cfind(f, first[kind]);
            if (c == first[kind]) continue;
            merge_siblings(f, first[kind], c);
        }
    }
    return OT_OK;
}

/* The graph once every cluster is one instruction must stay acyclic; reaches() keeps it so
 * except where a path leaves an instruction past its position bounds through a cluster. This
 * check decides it exactly, in time linear in the graph: units are the clusters and the
 * instructions outside any (a duplicated original is a unit of its own, feeding the clusters
 * that hold its copies), an edge runs from the unit that produces an operand to each unit that
 * reads it, and Tarjan's strongly connected components (iterative) find every cycle. Each
 * cluster on a cycle is split into clusters of one member, and the copies it held are dropped;
 * a duplicated original that lost a copy, or that one of those reads, stays in the entry as an
 * unfused instruction (keep) beside its copies in the clusters not split (a copy there may read
 * a member of its cluster: taken out of it, it would close a cycle through that cluster).
 * Contracting those originals, a cycle of the new partition is a closed walk of the old one
 * through split clusters only, hence through instructions only, which the graph has none of:
 * one round suffices. *broken counts the clusters split. */
static int32_t unit_of(fz *f, int64_t p) {
    return f->cl[p] >= 0 ? cfind(f, f->cl[p]) : (int32_t)(f->ncls + p);
}

static bool holds(fz *f, int32_t u, int64_t p) {
    if (u >= f->ncls) return u - f->ncls == p;
    return in_cluster(f, p, u);
}

/* Calls fn(ctx, unit, producer) for each edge into the units that p belongs to. */
typedef struct edge_sink {
    int64_t *cnt;  /* per unit: out-degree (count pass) */
    int64_t *fill; /* per unit: next free slot (fill pass) */
    int32_t *adj;
} edge_sink;

static void unit_edges(fz *f, int64_t p, edge_sink *es) {
    const ot_instr *x = f->po[p];
    int32_t readers[1 + 64];
    int nr = 0;
    if (f->cl[p] >= 0) readers[nr++] = cfind(f, f->cl[p]);
    for (int64_t d = f->dup_head[p]; d >= 0 && nr < 64; d = f->dups[d].next)
        readers[nr++] = cfind(f, f->dups[d].cluster);
    if (f->cl[p] < 0) readers[nr++] = (int32_t)(f->ncls + p);
    for (int r = 0; r < nr; r++) {
        int32_t u = readers[r];
        for (int q = 0; q < x->noperands; q++) {
            int64_t o = pos_of(x->operands[q]);
            if (holds(f, u, o)) continue;
            int32_t v = unit_of(f, o);
            if (v == u) continue;
            if (es->fill)
                es->adj[es->fill[v]++] = u;
            else
                es->cnt[v + 1]++;
        }
    }
}

static ot_status scc_split(fz *f, int64_t *broken) {
    *broken = 0;
    int64_t nu = f->ncls + f->n;
    ot_status s = OT_OK;
    int64_t *start = ot_calloc((size_t)nu + 1, sizeof *start);
    int64_t *fill = ot_malloc((size_t)(nu ? nu : 1) * sizeof *fill);
    int64_t *idx = ot_malloc((size_t)(nu ? nu : 1) * sizeof *idx);
    int64_t *low = ot_malloc((size_t)(nu ? nu : 1) * sizeof *low);
    int64_t *it = ot_malloc((size_t)(nu ? nu : 1) * sizeof *it);
    int32_t *tstack = ot_malloc((size_t)(nu ? nu : 1) * sizeof *tstack);
    int32_t *cstack = ot_malloc((size_t)(nu ? nu : 1) * sizeof *cstack);
    bool *on = ot_calloc((size_t)(nu ? nu : 1), sizeof *on);
    bool *split = ot_calloc((size_t)(f->ncls ? f->ncls : 1), sizeof *split);
    int32_t *adj = NULL;
    if (!start || !fill || !idx || !low || !it || !tstack || !cstack || !on || !split) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "fuse: out of memory");
        goto out;
    }
    edge_sink es = {start, NULL, NULL};
    for (int64_t p = 0; p < f->n; p++) unit_edges(f, p, &es);
    for (int64_t u = 0; u < nu; u++) start[u + 1] += start[u];
    adj = ot_malloc((size_t)(start[nu] ? start[nu] : 1) * sizeof *adj);
    if (!adj) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "fuse: out of memory");
        goto out;
    }
    memcpy(fill, start, (size_t)nu * sizeof *fill);
    es = (edge_sink){NULL, fill, adj};
    for (int64_t p = 0; p < f->n; p++) unit_edges(f, p, &es);
    /* Tarjan, iterative: idx -1 unvisited; it[u] the next edge of u to follow */
    for (int64_t u = 0; u < nu; u++) idx[u] = -1;
    int64_t counter = 0, tsp = 0, csp = 0;
    for (int64_t root = 0; root < nu; root++) {
        if (idx[root] >= 0) continue;
        if (root < f->ncls && cfind(f, (int32_t)root) != root) continue;
        cstack[csp++] = (int32_t)root;
        idx[root] = low[root] = counter++;
        it[root] = start[root];
        tstack[tsp++] = (int32_t)root;
        on[root] = true;
        while (csp) {
            int32_t u = cstack[csp - 1];
            if (it[u] < start[u + 1]) {
                int32_t v = adj[it[u]++];
                if (idx[v] < 0) {
                    idx[v] = low[v] = counter++;
                    it[v] = start[v];
                    tstack[tsp++] = v;
                    on[v] = true;
                    cstack[csp++] = v;
                } else if (on[v] && idx[v] < low[u]) {
                    low[u] = idx[v];
                }
                continue;
            }
            csp--;
            if (csp && low[u] < low[cstack[csp - 1]]) low[cstack[csp - 1]] = low[u];
            if (low[u] != idx[u]) continue;
            /* u roots a component: pop it; more than one unit is a cycle */
            bool cycle = tstack[tsp - 1] != u;
            int32_t w;
            do {
                w = tstack[--tsp];
                on[w] = false;
                if (cycle && w < f->ncls) split[w] = true;
            } while (w != u);
        }
    }
    /* split: every primary member of a split cluster gets a cluster of its own; copies held by
     * split clusters are dropped, and the original (and the duplicated originals that any of
     * these reads, which nothing would rewire otherwise) gets a cluster of its own too */
    int64_t ncls0 = f->ncls;
    for (int64_t c = 0; c < ncls0; c++) *broken += split[c] && cfind(f, (int32_t)c) == c;
    if (!*broken) goto out;
    int64_t *work = it; /* reused: positions that leave a split cluster or must stay apart */
    int64_t nwork = 0;
    for (int64_t p = 0; p < f->n; p++) {
        if (f->cl[p] >= 0) {
            if (!split[cfind(f, f->cl[p])]) continue;
            f->cl[p] = -2; /* to a cluster of its own */
            work[nwork++] = p;
            continue;
        }
        bool lost = false;
        for (int64_t d = f->dup_head[p]; d >= 0 && !lost; d = f->dups[d].next)
            lost = split[cfind(f, f->dups[d].cluster)];
        if (lost && !f->keep[p]) {
            f->keep[p] = true;
            work[nwork++] = p;
        }
    }
    for (int64_t w = 0; w < nwork; w++) {
        const ot_instr *x = f->po[work[w]];
        for (int q = 0; q < x->noperands; q++) {
            int64_t o = pos_of(x->operands[q]);
            if (f->cl[o] == -1 && f->dup_head[o] >= 0 && !f->keep[o]) {
                f->keep[o] = true;
                work[nwork++] = o;
            }
        }
    }
    for (int64_t w = 0; w < nwork && s == OT_OK; w++) {
        int64_t p = work[w];
        ot_instr *x = f->po[p];
        if (f->cl[p] != -2) continue; /* a kept original */
        f->small[p] = 0;
        f->cl[p] = -1;
        if (x->opcode == OT_OP_REDUCE)
            s = new_cluster(f, p, CL_INPUT, cc_numel(x->operands[0]));
        else
            s = new_cluster(f, p, CL_LOOP, cc_numel(x));
    }
    /* copies held by split clusters are dropped; the others stay */
    for (int64_t p = 0; p < f->n; p++) {
        int64_t *link = &f->dup_head[p];
        while (*link >= 0) {
            int32_t c = f->dups[*link].cluster;
            if (c < ncls0 && split[cfind(f, c)])
                *link = f->dups[*link].next;
            else
                link = &f->dups[*link].next;
        }
    }
    /* the split clusters themselves: no member is left in them */
    for (int64_t c = 0; c < ncls0; c++)
        if (split[c] && cfind(f, (int32_t)c) == c) f->cls[c].work = false;
out:
    ot_free(start);
    ot_free(fill);
    ot_free(idx);
    ot_free(low);
    ot_free(it);
    ot_free(tstack);
    ot_free(cstack);
    ot_free(on);
    ot_free(split);
    ot_free(adj);
    return s;
}

/* --------------------------------------------------------------------------------------------- */

typedef struct mat {
    int64_t *members; /* per cluster root: member positions, topo order (CSR) */
    int64_t *start;
    int32_t *stamp;   /* per position: cluster being materialized */
    ot_instr **clone; /* per position */
    bool *copied;     /* per position: a constant copied into fusions */
    int32_t *in_stamp;
    int64_t *in_index;
    /* per position: what replaces an output moved into a fused computation (the fusion or its
     * tuple element); users left in the entry are rewired once, at the end (pending) */
    ot_instr **repl;
    ot_instr **pending;
    int64_t npending, pendcap;
    /* the entry's input fusions: those found, then those made (row fusion's candidates), and
     * whether each may be a row producer */
    ot_instr **inputs;
    bool *producer;
    int64_t ninputs, inputcap, prodcap;
} mat;

static ot_status add_input(mat *mt, ot_instr *fusion, bool producer) {
    OT_CHECK(cc_grow(&mt->inputs, &mt->inputcap, mt->ninputs + 1, sizeof *mt->inputs));
    OT_CHECK(cc_grow(&mt->producer, &mt->prodcap, mt->ninputs + 1, sizeof *mt->producer));
    mt->inputs[mt->ninputs] = fusion;
    mt->producer[mt->ninputs++] = producer;
    return OT_OK;
}

/* user_data of an entry instruction already on the pending list */
static char pending_mark;

static ot_status materialize(fz *f, mat *mt, int32_t c, const int64_t *mem, int64_t nm,
                             bool *changed) {
    ot_module *m = f->m;
    ot_computation *entry = f->c;
    /* a cluster of constants only stays as it is (only a constant's own cluster is one: no
     * member joins a cluster through a constant, which has no operands); so does a lone remap
     * (ot_pass_fuse) */
    if (!f->cls[c].work) return OT_OK;
    for (int64_t j = 0; j < nm; j++) mt->stamp[mem[j]] = c;
    /* "fused_computation.<n>", written out: snprintf costs over a thousand instructions */
    char nm_buf[64] = "fused_computation.", dig[24];
    size_t nl = strlen(nm_buf);
    int nd = 0;
    for (uint64_t v = (uint64_t)f->fused_count++; nd == 0 || v; v /= 10)
        dig[nd++] = (char)('0' + v % 10);
    while (nd) nm_buf[nl++] = dig[--nd];
    nm_buf[nl] = 0;
    ot_computation *fc = ot_module_add_computation(m, nm_buf);
    if (!fc)
        return ot_module_status(m) != OT_OK ? ot_module_status(m)
                                            : ot_error(OT_ERR_OUT_OF_MEMORY, "fusion");
    ot_instr **inputs = NULL, **outs = NULL, **ops = NULL;
    int64_t nin = 0, incap = 0, nout = 0, outcap = 0;
    ot_status s = OT_OK;
    ops = ot_malloc(8 * sizeof *ops);
    int opcap = 8;
    if (!ops) s = ot_error(OT_ERR_OUT_OF_MEMORY, "fusion: out of memory");
    /* Members in topological order: a primary member moves into fc (ir_instr_move), a
     * duplicate is cloned there (its original stays for the other clusters it joined). Operands
     * are then members already in fc, or inputs: one parameter per distinct outside value. */
    for (int64_t j = 0; j < nm && s == OT_OK; j++) {
        ot_instr *x = f->po[mem[j]];
        bool primary = f->cl[mem[j]] >= 0 && cfind(f, f->cl[mem[j]]) == c;
        if (x->noperands > opcap) {
            ot_instr **no = ot_realloc(ops, (size_t)x->noperands * sizeof *ops);
            if (!no) {
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "fusion: out of memory");
                break;
            }
            ops = no;
            opcap = x->noperands;
        }
        for (int q = 0; q < x->noperands && s == OT_OK; q++) {
            ot_instr *o = x->operands[q];
            int64_t p = pos_of(o);
            if (p >= 0 && p < f->n && f->po[p] == o && mt->stamp[p] == c) {
                ops[q] = mt->clone[p];
                continue;
            }
            if (p >= 0 && p < f->n && f->po[p] == o && mt->repl[p]) {
                o = mt->repl[p]; /* an output of a cluster materialized before */
                p = pos_of(o);
            }
            /* an input: o is an original instruction or a new one (fusion / gte) */
            int64_t key = (p >= 0 && p < f->n && f->po[p] == o) ? p : -1;
            if (key >= 0 && o->opcode == OT_OP_CONSTANT && o->parent == entry && fusible(o)) {
                /* a scalar constant left in the entry (read by more clusters than duplication
                 * takes, or as a reduce's init): a copy in each fusion, as XLA fuses constants,
                 * instead of a parameter; the original goes once nothing reads it */
                if ((s = ot_instr_clone(fc, o, NULL, NULL, &mt->clone[key])) != OT_OK) break;
                mt->stamp[key] = c;
                mt->copied[key] = true;
                ops[q] = mt->clone[key];
                continue;
            }
            int64_t idx = -1;
            if (key >= 0 && mt->in_stamp[key] == c) idx = mt->in_index[key];
            if (key < 0)
                for (int64_t r = 0; r < nin && idx < 0; r++)
                    if (inputs[r] == o) idx = r;
            if (idx < 0) {
                s = cc_grow(&inputs, &incap, nin + 1, sizeof *inputs);
                if (s != OT_OK) break;
                ot_instr *prm;
                if ((s = ir_param_known(fc, nin, &o->shape, &prm)) != OT_OK) break;
                inputs[nin] = o;
                idx = nin++;
                if (key >= 0) {
                    mt->in_stamp[key] = c;
                    mt->in_index[key] = idx;
                }
            }
            ops[q] = fc->params[idx];
        }
        if (s != OT_OK) break;
        if (!primary) {
            s = ot_instr_clone(fc, x, ops, NULL, &mt->clone[mem[j]]);
            continue;
        }
        s = ir_instr_move(x, fc);
        for (int q = 0; q < x->noperands && s == OT_OK; q++)
            if (x->operands[q] != ops[q]) s = ot_instr_replace_operand(x, q, ops[q]);
        mt->clone[mem[j]] = x;
    }
    /* outputs: primary members with a user left outside (in the entry), or the entry root */
    for (int64_t j = 0; j < nm && s == OT_OK; j++) {
        ot_instr *x = f->po[mem[j]];
        if (f->cl[mem[j]] < 0 || cfind(f, f->cl[mem[j]]) != c) continue; /* a duplicate */
        bool out = entry->root == x;
        for (int u = 0; u < x->nusers && !out; u++) out = x->users[u]->parent != fc;
        if (!out) continue;
        s = cc_grow(&outs, &outcap, nout + 1, sizeof *outs);
        if (s == OT_OK) outs[nout++] = x;
    }
    ot_instr *fusion = NULL;
    if (s == OT_OK && nout == 0) s = ot_error(OT_ERR_INTERNAL, "fusion: cluster without output");
    if (s == OT_OK) {
        ot_instr *root;
        if (nout == 1) {
            root = outs[0];
        } else {
            root = ot_build_tuple(fc, outs, (int)nout);
        }
        ot_computation_set_root(fc, root);
        ot_attrs at = {0};
        int kind = f->cls[c].kind;
        at.fusion_kind = kind == CL_INPUT ? OT_FUSION_INPUT : OT_FUSION_LOOP;
        fusion = ot_build(entry, OT_OP_FUSION, inputs, (int)nin, &at, &fc, 1, NULL, NULL);
        if (!fusion) {
            s = ot_module_status(m);
            if (s == OT_OK) s = ot_error(OT_ERR_INTERNAL, "fusion: builder failed");
            goto done;
        }
        /* row fusion's candidates, tested while the members are in cache */
        bool producer = false;
        if (kind == CL_INPUT && cc_row_candidate(fusion, &producer))
            if ((s = add_input(mt, fusion, producer)) != OT_OK) goto done;
        /* the users left in the entry will read the fusion (or its tuple element) instead */
        for (int64_t j = 0; j < nout && s == OT_OK; j++) {
            ot_instr *x = outs[j], *to = fusion;
            if (nout > 1) {
                to = ot_build_get_tuple_element(entry, fusion, j);
                if (!to) {
                    s = ot_module_status(m);
                    break;
                }
            }
            mt->repl[pos_of(x)] = to;
            for (int u = 0; u < x->nusers && s == OT_OK; u++) {
                ot_instr *y = x->users[u];
                if (y->parent == fc || y->user_data == &pending_mark) continue;
                /* a primary member of a cluster materialized later maps its operands there */
                int64_t py = pos_of(y);
                if (py >= 0 && py < f->n && f->po[py] == y) {
                    if (f->cl[py] >= 0) {
                        int32_t r = cfind(f, f->cl[py]);
                        if (r < c && f->cls[r].work) continue; /* (made after c) */
                    } else if (f->dup_head[py] >= 0 && !f->keep[py]) {
                        continue; /* a duplicated original: removed once its copies are made */
                    }
                }
                s = cc_grow(&mt->pending, &mt->pendcap, mt->npending + 1, sizeof *mt->pending);
                if (s != OT_OK) break;
                mt->pending[mt->npending++] = y;
                y->user_data = &pending_mark;
            }
            if (s == OT_OK && entry->root == x) ot_computation_set_root(entry, to);
        }
        if (s == OT_OK) s = ot_module_status(m);
        if (s == OT_OK) *changed = true;
        if (s == OT_OK) cc_fusion_note(fc); /* fc is final, and in cache */
    }
done:
    ot_free(inputs);
    ot_free(outs);
    ot_free(ops);
    return s;
}

typedef struct remap {
    fz *f;
    mat *mt;
} remap;

static ot_instr *remap_operand(void *ctx, const ot_instr *o) {
    remap *r = ctx;
    int64_t p = pos_of(o);
    if (p >= 0 && p < r->f->n && r->f->po[p] == o) return r->mt->repl[p];
    return NULL;
}

ot_status ot_pass_fuse(ot_module *m, int max_io, bool *changed) {
    if (changed) *changed = false;
    ot_computation *entry = ot_module_entry(m);
    if (!entry) return ot_error(OT_ERR_INVALID_ARGUMENT, "fuse: no entry computation");
    fz f = {0};
    f.m = m;
    f.c = entry;
    f.max_io = max_io > 0 ? max_io : 64;
    if (f.max_io < 2) f.max_io = 2;
    mat mt = {0};
    ot_status s = cc_entry_post_order(m, &f.po, &f.n);
    if (s != OT_OK) return s;
    int64_t n = f.n ? f.n : 1;
    f.cl = ot_malloc((size_t)n * sizeof *f.cl);
    f.small = ot_calloc((size_t)n, sizeof *f.small);
    f.next_out = ot_malloc((size_t)n * sizeof *f.next_out);
    f.dup_head = ot_malloc((size_t)n * sizeof *f.dup_head);
    f.vis = ot_calloc((size_t)n, sizeof *f.vis);
    f.stack = ot_malloc((size_t)n * sizeof *f.stack);
    f.pos2 = ot_malloc((size_t)n * sizeof *f.pos2);
    f.dupdepth = ot_calloc((size_t)n, sizeof *f.dupdepth);
    f.in_of = ot_malloc((size_t)n * sizeof *f.in_of);
    f.keep = ot_calloc((size_t)n, sizeof *f.keep);
    f.ident = ot_calloc((size_t)n, sizeof *f.ident);
    f.nctx = ot_calloc((size_t)n, sizeof *f.nctx);
    f.budget = REACH_VISITS_MIN + REACH_VISITS_PER_INSTR * f.n;
    int64_t *cnt = NULL, *order = NULL, *fill = NULL;
    bool ch = false;
    if (!f.cl || !f.small || !f.next_out || !f.dup_head || !f.vis || !f.stack || !f.pos2 ||
        !f.dupdepth || !f.in_of || !f.keep || !f.ident || !f.nctx) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "fuse: out of memory");
        goto out;
    }
    for (int64_t k = 0; k < f.n && s == OT_OK; k++) {
        ot_instr *x = f.po[k];
        x->mark = k;
        if (x->opcode == OT_OP_FUSION && x->ncalled == 1 &&
            x->attrs->fusion_kind == OT_FUSION_INPUT) {
            s = add_input(&mt, x, true); /* (not known yet) */
        }
        f.cl[k] = -1;
        f.in_of[k] = -1;
        f.dup_head[k] = -1;
        f.next_out[k] = -1;
    }
    if (s != OT_OK || (s = second_order(&f)) != OT_OK) goto out;
    if ((s = phase1(&f)) != OT_OK) goto out;
    if ((s = phase2(&f)) != OT_OK) goto out;
    for (int round = 0;; round++) {
        int64_t broken = 0;
        if ((s = scc_split(&f, &broken)) != OT_OK) goto out;
        __atomic_fetch_add(&cc_fuse_test.splits, broken, __ATOMIC_RELAXED);
        if (!broken) break;
        if (round == 4) { /* one round suffices (see scc_split): a second is a bug */
            s = ot_error(OT_ERR_INTERNAL, "fuse: clusters still form a cycle after splitting");
            goto out;
        }
    }
    /* a lone slice, pad, concatenate or reverse stays in the entry: the library's copy kernels
     * move whole runs, where a loop would test each element (and read every operand of a
     * concatenate); before materializing, so that its readers are rewired as for any
     * instruction outside clusters */
    for (int64_t c = 0; c < f.ncls; c++) {
        cluster *C = &f.cls[c];
        if (cfind(&f, (int32_t)c) == c && C->nmembers == 1 && C->first_out >= 0 &&
            remap_op(f.po[C->first_out]))
            C->work = false;
    }
    /* member lists per cluster root (CSR), in position order */
    cnt = ot_calloc((size_t)(f.ncls + 1), sizeof *cnt);
    int32_t *last = ot_malloc((size_t)(f.ncls ? f.ncls : 1) * sizeof *last);
    mt.stamp = ot_malloc((size_t)n * sizeof *mt.stamp);
    mt.in_stamp = ot_malloc((size_t)n * sizeof *mt.in_stamp);
    mt.in_index = ot_malloc((size_t)n * sizeof *mt.in_index);
    mt.clone = ot_calloc((size_t)n, sizeof *mt.clone);
    mt.copied = ot_calloc((size_t)n, sizeof *mt.copied);
    mt.repl = ot_calloc((size_t)n, sizeof *mt.repl);
    if (!cnt || !last || !mt.stamp || !mt.in_stamp || !mt.in_index || !mt.clone || !mt.copied ||
        !mt.repl) {
        ot_free(last);
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "fuse: out of memory");
        goto out;
    }
    for (int64_t k = 0; k < f.n; k++) mt.stamp[k] = mt.in_stamp[k] = -1;
    for (int64_t c = 0; c < f.ncls; c++) last[c] = -1;
    int64_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t c = 0; c < f.ncls; c++) last[c] = -1;
        for (int64_t k = 0; k < f.n; k++) {
            int32_t cs[1 + 64];
            int ncs = 0;
            if (f.cl[k] >= 0) cs[ncs++] = cfind(&f, f.cl[k]);
            for (int64_t d = f.dup_head[k]; d >= 0 && ncs < 65; d = f.dups[d].next)
                cs[ncs++] = cfind(&f, f.dups[d].cluster);
            for (int q = 0; q < ncs; q++) {
                int32_t c = cs[q];
                if (last[c] == (int32_t)k) continue;
                last[c] = (int32_t)k;
                if (pass == 0)
                    cnt[c + 1]++;
                else
                    order[fill[c]++] = k;
            }
        }
        if (pass == 0) {
            for (int64_t c = 0; c < f.ncls; c++) cnt[c + 1] += cnt[c];
            total = cnt[f.ncls];
            order = ot_malloc((size_t)(total ? total : 1) * sizeof *order);
            fill = ot_malloc((size_t)(f.ncls ? f.ncls : 1) * sizeof *fill);
            if (!order || !fill) {
                ot_free(last);
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "fuse: out of memory");
                goto out;
            }
            for (int64_t c = 0; c < f.ncls; c++) fill[c] = cnt[c];
        }
    }
    ot_free(last);
    /* Clusters were numbered users first: the highest number first is producers first, so that
     * a fusion's inputs are mostly fusions made already, and few readers wait to be rewired */
    for (int64_t c = f.ncls - 1; c >= 0 && s == OT_OK; c--) {
        if (cfind(&f, (int32_t)c) != c) continue;
        s = materialize(&f, &mt, (int32_t)c, order + cnt[c], cnt[c + 1] - cnt[c], &ch);
    }
    /* the entry's readers of moved outputs: each operand list rewritten once */
    remap rm = {&f, &mt};
    for (int64_t k = 0; k < mt.npending; k++) {
        ot_instr *y = mt.pending[k];
        y->user_data = NULL;
        /* (one fused since reads parameters and members of its own computation) */
        if (s == OT_OK && y->parent == entry) s = ir_instr_map_operands(y, remap_operand, &rm);
    }
    /* duplicated originals, and constants copied into fusions, left without users */
    for (int64_t k = f.n - 1; k >= 0 && s == OT_OK; k--) {
        if (!(f.dup_head[k] >= 0 && f.cl[k] < 0) && !mt.copied[k]) continue;
        ot_instr *x = f.po[k];
        if (x->nusers == 0 && entry->root != x) s = ot_instr_remove(x);
    }
    if (s == OT_OK) {
        bool rch = false;
        s = cc_row_fuse(m, f.max_io, mt.inputs, mt.producer, mt.ninputs, &rch);
        ch = ch || rch;
    }
out:
    ot_free(cnt);
    ot_free(order);
    ot_free(fill);
    ot_free(mt.stamp);
    ot_free(mt.in_stamp);
    ot_free(mt.in_index);
    ot_free(mt.clone);
    ot_free(mt.copied);
    ot_free(mt.repl);
    ot_free(mt.pending);
    ot_free(mt.inputs);
    ot_free(mt.producer);
    ot_free(f.po);
    ot_free(f.cl);
    ot_free(f.small);
    ot_free(f.next_out);
    ot_free(f.dup_head);
    ot_free(f.dups);
    ot_free(f.cls);
    ot_free(f.vis);
    ot_free(f.stack);
    ot_free(f.pos2);
    ot_free(f.dupdepth);
    ot_free(f.in_of);
    ot_free(f.keep);
    ot_free(f.ident);
    ot_free(f.nctx);
    ot_free(f.cvis);
    if (changed) *changed = ch;
    return s;
}
