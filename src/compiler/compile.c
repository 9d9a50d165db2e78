/* ot_compile: pass pipeline by options, schedule, buffer assignment (liveness + best-fit
 * allocator over free blocks in treaps by address and size, coalescing, 64-byte alignment, in-place
 * reuse, donation), the executable (kernels, slots, bindings, FLOPs and bytes), and last its
 * native code (native.c). */
#include "exec/numerics.h"
#include "exec/state8.h"
#include "executable_internal.h"
#include "ir/lapack_call.h"

#include <pthread.h>
#include <stdio.h>

#define ALIGN 64
static int64_t align_up(int64_t x) {
    return (x + ALIGN - 1) / ALIGN * ALIGN;
}

ot_compile_options ot_compile_options_default(void) {
    ot_compile_options o;
    memset(&o, 0, sizeof o);
    o.opt_level = 2;
    o.fusion = true;
    o.fold_max_elements = 1 << 20;
    o.max_fusion_io = 64;
    o.target = "host-cpu";
    o.native = OT_NATIVE_AUTO; /* the environment may turn it off (docs/codegen.md) */
    return o;
}

const char *ot_kernel_kind_name(ot_kernel_kind k) {
    static const char *const names[] = {"fusion", "library", "copy", "collective", "control"};
    _Static_assert(sizeof names / sizeof names[0] == OT_KERNEL_KIND_COUNT, "kernel kind names");
    return (int)k >= 0 && k < OT_KERNEL_KIND_COUNT ? names[k] : "<invalid>";
}

/* --------------------------------------------------------------------------------------------- */

void ot_executable_free(ot_executable *e) {
    if (!e) return;
    ot_module_free(e->mod);
    ot_free(e->order);
    ot_free(e->k);
    ot_free(e->s);
    ot_free(e->io);
    ot_free(e->param_slot);
    ot_free(e->out_slot);
    ot_pass_manager_free(e->pm);
    cg_program_free(e->native);
    cc_free_loops(e);
    ex_scratch_cache_clear(&e->scratch);
    ex_scratch_cache_clear(&e->state);
    ot_free(e->update_writer);
    ot_free(e);
}

int cc_executable_update_writer(const ot_executable *e, int k) {
    return e && e->update_writer && k >= 0 && k < e->nk ? e->update_writer[k] : 0;
}

ex_scratch_cache *cc_executable_scratch(const ot_executable *e) {
    /* the cache is the executable's one mutable part: synchronized by itself (atomic slots) */
    return (ex_scratch_cache *)&e->scratch;
}

ex_scratch_cache *cc_executable_state_cache(const ot_executable *e) {
    return (ex_scratch_cache *)&e->state; /* as the scratch: atomic slots */
}

const ot_module *ot_executable_module(const ot_executable *e) {
    return e->mod;
}
int ot_executable_kernel_count(const ot_executable *e) {
    return (int)e->nk;
}
const ot_kernel *ot_executable_kernel(const ot_executable *e, int i) {
    return i >= 0 && i < e->nk ? &e->k[i] : NULL;
}
int ot_executable_slot_count(const ot_executable *e) {
    return (int)e->ns;
}
const ot_slot *ot_executable_slot(const ot_executable *e, int i) {
    return i >= 0 && i < e->ns ? &e->s[i] : NULL;
}
int ot_executable_param_count(const ot_executable *e) {
    return e->nparams;
}
int ot_executable_output_count(const ot_executable *e) {
    return e->nout;
}
int32_t ot_executable_param_slot(const ot_executable *e, int k) {
    return k >= 0 && k < e->nparams ? e->param_slot[k] : -1;
}
int32_t ot_executable_output_slot(const ot_executable *e, int k) {
    return k >= 0 && k < e->nout ? e->out_slot[k] : -1;
}
int64_t ot_executable_arena_size(const ot_executable *e) {
    return e->arena;
}
int64_t ot_executable_peak_live_bytes(const ot_executable *e) {
    return e->peak;
}
int64_t ot_executable_total_flops(const ot_executable *e) {
    return e->flops;
}
int64_t ot_executable_total_bytes(const ot_executable *e) {
    return e->bytes;
}
void ot_executable_fingerprint(const ot_executable *e, uint8_t out[32]) {
    memcpy(out, e->fp, 32);
}
int ot_executable_stat_count(const ot_executable *e) {
    return ot_pass_manager_stat_count(e->pm);
}
const ot_pass_stat *ot_executable_stat(const ot_executable *e, int i) {
    return ot_pass_manager_stat(e->pm, i);
}

/* --------------------------------------------------------------------------------------------- */

static ot_status add_slot(ot_executable *e, ot_slot_kind kind, const ot_shape *sh, int32_t *id) {
    OT_CHECK(cc_grow(&e->s, &e->scap, e->ns + 1, sizeof *e->s));
    ot_slot *s = &e->s[e->ns];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->shape = *sh;
    s->nbytes = ot_shape_nbytes_unchecked(sh);
    s->offset = -1;
    s->number = -1;
    s->alias_param = -1;
    *id = (int32_t)e->ns++;
    return OT_OK;
}

/* Leaves (arrays) of a shape, flattened depth first. */
static int64_t leaf_count(const ot_ir_shape *s) {
    if (s->kind == OT_IR_ARRAY) return 1;
    if (s->kind == OT_IR_TOKEN) return 0;
    int64_t n = 0;
    for (int k = 0; k < s->ntuple; k++) n += leaf_count(&s->tuple[k]);
    return n;
}

static void leaf_shapes(const ot_ir_shape *s, ot_shape *out, int64_t *n) {
    if (s->kind == OT_IR_ARRAY) {
        out[(*n)++] = s->array;
    } else if (s->kind == OT_IR_TUPLE) {
        for (int k = 0; k < s->ntuple; k++) leaf_shapes(&s->tuple[k], out, n);
    }
}

static ot_kernel_kind kind_of(ot_opcode op) {
    switch (op) {
    case OT_OP_FUSION: return OT_KERNEL_FUSION;
    case OT_OP_COPY:
    case OT_OP_RESHAPE:
    case OT_OP_BITCAST: return OT_KERNEL_COPY;
    case OT_OP_ALL_REDUCE:
    case OT_OP_ALL_GATHER:
    case OT_OP_REDUCE_SCATTER:
    case OT_OP_ALL_TO_ALL:
    case OT_OP_COLLECTIVE_PERMUTE: return OT_KERNEL_COLLECTIVE;
    case OT_OP_WHILE:
    case OT_OP_CONDITIONAL:
    case OT_OP_CALL: return OT_KERNEL_CONTROL;
    default: return OT_KERNEL_LIBRARY;
    }
}

static bool arith(ot_opcode op) {
    return (ot_opcode_is_elementwise(op) && op != OT_OP_CONVERT && op != OT_OP_BITCAST_CONVERT &&
            op != OT_OP_COPY);
}

/* Operations one instruction performs (elementwise: one per element; reduce: one per input
 * element; dot: 2·M·N·K; convolution: 2 per multiply-add). */
static int64_t instr_flops(const ot_instr *i) {
    if (arith(i->opcode)) return cc_numel(i);
    switch (i->opcode) {
    case OT_OP_REDUCE: {
        int64_t n = 0;
        for (int k = 0; k < i->noperands / 2; k++) n += cc_numel(i->operands[k]);
        return n;
    }
    case OT_OP_DOT: {
        const ot_dot_dims *d = i->attrs->dot;
        int64_t kk = 1;
        for (int j = 0; d && j < d->ncontract; j++)
            kk *= i->operands[0]->shape.array.dims[d->lhs_contract[j]];
        return 2 * cc_numel(i) * kk;
    }
    case OT_OP_CONVOLUTION: {
        const ot_conv_dims *d = i->attrs->conv;
        const ot_shape *ks = &i->operands[1]->shape.array;
        if (!d) return 0;
        int64_t per = ks->dims[d->kernel_input_feature];
        for (int j = 0; j < d->nspatial; j++) per *= ks->dims[d->kernel_spatial[j]];
        return 2 * cc_numel(i) * per;
    }
    default: return 0; /* (a fusion's: cc_fusion_analysis) */
    }
}

/* Whether y keeps the linear element index of an n-element operand (elementwise ops, converts,
 * reshapes, bitcasts). */
static bool keeps_index(const ot_instr *y, int64_t n) {
    bool ok = (ot_opcode_is_elementwise(y->opcode) && y->opcode != OT_OP_MAP) ||
              y->opcode == OT_OP_RESHAPE || y->opcode == OT_OP_BITCAST;
    return ok && cc_numel(y) == n;
}

/* Bit j set when every path from fused parameter base + j (j < 64) to the fusion's outputs
 * keeps the linear element index (keeps_index, or ends at the root tuple): element e of an
 * output then depends only on element e of that parameter, so the output may overwrite the
 * parameter's buffer. One walk over fc's list (definitions before uses) with a mask of the
 * parameters reaching each instruction, so O(|fc|) whatever the number of paths; marks hold
 * list positions during the walk and are restored. A list out of order (not one the fusion
 * passes made) gets a conservative 0; so does running out of memory. */
static uint64_t params_linear(ot_computation *fc, int base) {
    int64_t n = fc->ninstrs ? fc->ninstrs : 1, k = 0;
    int64_t *saved = ot_malloc((size_t)n * sizeof *saved);
    uint64_t *reach = ot_calloc((size_t)n, sizeof *reach);
    if (!saved || !reach) {
        ot_free(saved);
        ot_free(reach);
        return 0;
    }
    for (ot_instr *x = fc->first; x && k < n; x = x->next, k++) {
        saved[k] = x->mark;
        x->mark = k;
    }
    uint64_t all = 0, bad = 0;
    for (int j = 0; j < 64 && base + j < fc->nparams; j++) {
        const ot_instr *p = fc->params[base + j];
        if (!p || p->parent != fc) continue;
        reach[p->mark] |= (uint64_t)1 << j;
        all |= (uint64_t)1 << j;
    }
    bool ordered = true;
    k = 0;
    for (ot_instr *x = fc->first; x && k < n && ordered; x = x->next, k++) {
        if (x->opcode == OT_OP_PARAMETER || x->opcode == OT_OP_TUPLE) continue;
        uint64_t r = 0;
        for (int q = 0; q < x->noperands; q++) {
            const ot_instr *o = x->operands[q];
            /* (a reader outside fc: only while the fusion pass has yet to rewire it) */
            if (o->parent != fc) continue;
            if (o->mark >= k) ordered = false;
            r |= reach[o->mark];
        }
        reach[k] = r;
        for (uint64_t rest = r & ~bad; rest; rest &= rest - 1) {
            int j = __builtin_ctzll(rest);
            if (!keeps_index(x, cc_numel(fc->params[base + j]))) bad |= (uint64_t)1 << j;
        }
    }
    k = 0;
    for (ot_instr *x = fc->first; x && k < n; x = x->next, k++) x->mark = saved[k];
    ot_free(saved);
    ot_free(reach);
    return ordered ? all & ~bad : 0;
}

static bool param_linear(ot_computation *fc, int j) {
    return (params_linear(fc, j) & 1) != 0;
}

static bool analysis_valid(const ot_computation *c) {
    return c->an_edits_ == c->edits_ + 1 || c->an_medits_ == ir_module_edits(c->module) + 1;
}

/* Fusions nest (an HLO module may hold a fusion inside a fused computation, any number deep): fc
 * and every computation nested in it are analysed callees first with an explicit stack, each
 * nested one once (its result kept in it), so the work is linear in the nest whatever its depth.
 * Out of memory for the stack, a nested fusion's operations are not counted. */
void cc_fusion_analysis(ot_computation *fc, int64_t *flops, uint64_t *linear) {
    struct frame {
        ot_computation *c;
        const ot_instr *x;
        int64_t n;
        bool nested;
    } small[8], *st = small;
    int64_t sp = 0, cap = 8, limit = ot_module_computation_count(fc->module) + 1;
    if (!analysis_valid(fc)) st[sp++] = (struct frame){fc, fc->first, 0, false};
    while (sp > 0) {
        struct frame *f = &st[sp - 1];
        while (f->x) {
            const ot_instr *x = f->x;
            if (x->opcode != OT_OP_FUSION || x->ncalled != 1) {
                f->n += instr_flops(x);
            } else if (analysis_valid(x->called[0])) {
                f->n += x->called[0]->an_flops_;
                f->nested = true;
            } else if (sp < limit) { /* analysed first; x is read again after it */
                if (sp == cap) {
                    void *ns = st == small ? ot_malloc((size_t)cap * 2 * sizeof *st)
                                           : ot_realloc(st, (size_t)cap * 2 * sizeof *st);
                    if (ns) {
                        if (st == small) memcpy(ns, small, sizeof small);
                        st = ns;
                        cap *= 2;
                        f = &st[sp - 1];
                    }
                }
                if (sp < cap) {
                    ot_computation *g = x->called[0];
                    st[sp++] = (struct frame){g, g->first, 0, false};
                    break;
                }
                f->nested = true;
            }
            f->x = x->next;
        }
        if (f != &st[sp - 1]) continue; /* a callee was pushed */
        ot_computation *c = f->c;
        c->an_flops_ = f->n;
        c->an_linear_ = params_linear(c, 0);
        c->an_edits_ = f->nested ? 0 : c->edits_ + 1;
        c->an_medits_ = f->nested ? ir_module_edits(c->module) + 1 : 0;
        sp--;
    }
    if (st != small) ot_free(st);
    *flops = fc->an_flops_;
    *linear = fc->an_linear_;
}

void cc_fusion_note(ot_computation *fc) {
    int64_t flops;
    uint64_t linear;
    cc_fusion_analysis(fc, &flops, &linear);
}

/* Whether kernel input j (slot) is only read elementwise by the kernel's instruction. */
static bool input_linear(const ot_instr *i, const ot_slot *in, const ot_slot *out) {
    if (in->nbytes != out->nbytes ||
        ot_shape_numel_unchecked(&in->shape) != ot_shape_numel_unchecked(&out->shape))
        return false;
    if (i->opcode == OT_OP_FUSION) {
        const ot_computation *fc = i->called[0];
        if (i->attrs->fusion_kind != OT_FUSION_LOOP) return false;
        for (int k = 0; k < fc->nparams; k++) {
            if (k >= i->noperands || i->operands[k]->shape.kind != OT_IR_ARRAY) return false;
        }
        return true; /* refined per parameter by the caller */
    }
    return ot_opcode_is_elementwise(i->opcode) && i->opcode != OT_OP_MAP;
}

/* The arena allocator: best fit (the smallest free block that fits, the lowest address among
 * equals), blocks carved from the low end, freed blocks coalesced with their neighbours, the top
 * of the arena grown and given back as needed. Free blocks sit in two treaps (randomized
 * binary search trees with priorities from a fixed generator, so the layout is deterministic):
 * one ordered by address, for the neighbours, one by (size, address), for the best fit. Each
 * operation is O(log F) expected for F free blocks, so buffer assignment is O(K log K) for K
 * buffers whatever the pattern of lifetimes (a list scanned per allocation was O(K·F)). */
typedef struct fnode {
    int64_t off, size;
    uint32_t prio;
    int32_t l[2], r[2]; /* children: [0] in the address treap, [1] in the size treap */
} fnode;

typedef struct alloc {
    fnode *nd;
    int64_t nn, cap;
    int32_t free_head; /* released nodes, linked through l[0] */
    int32_t root[2];
    uint32_t rng;
    int64_t top, high;
} alloc;

static bool key_less(const alloc *a, int t, int32_t x, int32_t y) {
    const fnode *p = &a->nd[x], *q = &a->nd[y];
    if (t == 0) return p->off < q->off;
    return p->size < q->size || (p->size == q->size && p->off < q->off);
}

/* Splits tree t of treap k into keys below node `key` (*lo) and the rest (*hi). Recursion depth
 * is the treap's depth: O(log F) expected. */
static void tp_split(alloc *a, int k, int32_t t, int32_t key, int32_t *lo, int32_t *hi) {
    if (t < 0) {
        *lo = *hi = -1;
        return;
    }
    if (key_less(a, k, t, key)) {
        tp_split(a, k, a->nd[t].r[k], key, &a->nd[t].r[k], hi);
        *lo = t;
    } else {
        tp_split(a, k, a->nd[t].l[k], key, lo, &a->nd[t].l[k]);
        *hi = t;
    }
}

static int32_t tp_merge(alloc *a, int k, int32_t x, int32_t y) {
    if (x < 0) return y;
    if (y < 0) return x;
    if (a->nd[x].prio > a->nd[y].prio) {
        a->nd[x].r[k] = tp_merge(a, k, a->nd[x].r[k], y);
        return x;
    }
    a->nd[y].l[k] = tp_merge(a, k, x, a->nd[y].l[k]);
    return y;
}

static void tp_insert(alloc *a, int k, int32_t x) {
    int32_t lo, hi;
    a->nd[x].l[k] = a->nd[x].r[k] = -1;
    tp_split(a, k, a->root[k], x, &lo, &hi);
    a->root[k] = tp_merge(a, k, tp_merge(a, k, lo, x), hi);
}

/* Removes node x (present) from treap k. */
static void tp_erase(alloc *a, int k, int32_t x) {
    int32_t *link = &a->root[k];
    while (*link != x) link = key_less(a, k, x, *link) ? &a->nd[*link].l[k] : &a->nd[*link].r[k];
    *link = tp_merge(a, k, a->nd[x].l[k], a->nd[x].r[k]);
}

static ot_status node_new(alloc *a, int64_t off, int64_t size, int32_t *out) {
    int32_t x = a->free_head;
    if (x >= 0) {
        a->free_head = a->nd[x].l[0];
    } else {
        OT_CHECK(cc_grow(&a->nd, &a->cap, a->nn + 1, sizeof *a->nd));
        x = (int32_t)a->nn++;
    }
    a->rng ^= a->rng << 13; /* xorshift32 */
    a->rng ^= a->rng >> 17;
    a->rng ^= a->rng << 5;
    a->nd[x] = (fnode){off, size, a->rng, {-1, -1}, {-1, -1}};
    *out = x;
    return OT_OK;
}

static void node_drop(alloc *a, int32_t x) {
    tp_erase(a, 0, x);
    tp_erase(a, 1, x);
    a->nd[x].l[0] = a->free_head;
    a->free_head = x;
}

/* The free block of highest address (-1: none). */
static int32_t last_block(const alloc *a) {
    int32_t t = a->root[0];
    while (t >= 0 && a->nd[t].r[0] >= 0) t = a->nd[t].r[0];
    return t;
}

static ot_status al_alloc(alloc *a, int64_t size, int64_t *off) {
    int32_t best = -1;
    for (int32_t t = a->root[1]; t >= 0;) {
        if (a->nd[t].size >= size) {
            best = t;
            t = a->nd[t].l[1];
        } else {
            t = a->nd[t].r[1];
        }
    }
    if (best >= 0) {
        *off = a->nd[best].off;
        if (a->nd[best].size == size) {
            node_drop(a, best);
        } else { /* the rest keeps its place among addresses; its size changes */
            tp_erase(a, 1, best);
            a->nd[best].off += size;
            a->nd[best].size -= size;
            tp_insert(a, 1, best);
        }
        return OT_OK;
    }
    /* extend at the top, starting inside a free block that touches it */
    int32_t last = last_block(a);
    if (last >= 0 && a->nd[last].off + a->nd[last].size == a->top) {
        *off = a->nd[last].off;
        node_drop(a, last);
    } else {
        *off = a->top;
    }
    a->top = *off + size;
    if (a->top > a->high) a->high = a->top;
    return OT_OK;
}

static ot_status al_free(alloc *a, int64_t off, int64_t size) {
    if (off + size == a->top) { /* give back to the top, merging a free block below */
        a->top = off;
        int32_t last = last_block(a);
        if (last >= 0 && a->nd[last].off + a->nd[last].size == a->top) {
            a->top = a->nd[last].off;
            node_drop(a, last);
        }
        return OT_OK;
    }
    int32_t pred = -1, succ = -1; /* the free blocks just below and above off */
    for (int32_t t = a->root[0]; t >= 0;) {
        if (a->nd[t].off < off) {
            pred = t;
            t = a->nd[t].r[0];
        } else {
            succ = t;
            t = a->nd[t].l[0];
        }
    }
    bool left = pred >= 0 && a->nd[pred].off + a->nd[pred].size == off;
    bool right = succ >= 0 && off + size == a->nd[succ].off;
    if (left) {
        tp_erase(a, 1, pred);
        a->nd[pred].size += size;
        if (right) {
            a->nd[pred].size += a->nd[succ].size;
            node_drop(a, succ);
        }
        tp_insert(a, 1, pred);
    } else if (right) { /* moving its start down to off keeps its place among addresses */
        tp_erase(a, 1, succ);
        a->nd[succ].off = off;
        a->nd[succ].size += size;
        tp_insert(a, 1, succ);
    } else {
        int32_t x;
        OT_CHECK(node_new(a, off, size, &x));
        tp_insert(a, 0, x);
        tp_insert(a, 1, x);
    }
    return OT_OK;
}

/* --------------------------------------------------------------------------------------------- */

typedef struct kbuild {
    int64_t in0, nin, out0, nout; /* ranges into e->io */
    /* a fusion: bit j set when parameter j (j < 64) is read only elementwise (param_linear),
     * found while the fused computation is in cache from counting its operations */
    uint64_t linear;
} kbuild;

static ot_status push_io(ot_executable *e, int32_t v) {
    OT_CHECK(cc_grow(&e->io, &e->iocap, e->nio + 1, sizeof *e->io));
    e->io[e->nio++] = v;
    return OT_OK;
}

static ot_status add_kernel(ot_executable *e, kbuild **kb, int64_t *kbcap, ot_kernel_kind kind,
                            ot_opcode op, const ot_instr *i, const char *name) {
    OT_CHECK(cc_grow(&e->k, &e->kcap, e->nk + 1, sizeof *e->k));
    OT_CHECK(cc_grow(kb, kbcap, e->nk + 1, sizeof **kb));
    ot_kernel *k = &e->k[e->nk];
    memset(k, 0, sizeof *k);
    k->kind = kind;
    k->opcode = op;
    k->instr = i;
    k->name = name;
    k->in_place_input = -1;
    (*kb)[e->nk] = (kbuild){e->nio, 0, 0, 0, 0};
    e->nk++;
    return OT_OK;
}

/* Builds kernels and slots from the schedule. leaves[pos] → range in lv of leaf slots. */
static ot_status build_program(ot_executable *e, ot_instr **order, int64_t n, kbuild **kbp,
                               int64_t *kbcap) {
    ot_computation *entry = ot_module_entry(e->mod);
    int64_t *l0 = ot_malloc((size_t)(n ? n : 1) * sizeof *l0);
    int64_t *ln = ot_malloc((size_t)(n ? n : 1) * sizeof *ln);
    int32_t *lv = NULL;
    int64_t nlv = 0, lvcap = 0;
    ot_shape *shp = NULL;
    int64_t shcap = 0;
    ot_status s = OT_OK;
    if (!l0 || !ln) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "compile: out of memory");
        goto out;
    }
    e->nparams = entry->nparams;
    e->param_slot = ot_malloc((size_t)(entry->nparams ? entry->nparams : 1) * sizeof(int32_t));
    if (!e->param_slot) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "compile: out of memory");
        goto out;
    }
    /* room for one kernel and one slot per instruction, and a few inputs and outputs each,
     * reserved once: growing by doubling copies arrays of a million entries several times
     * (more is grown as needed) */
    if ((s = cc_grow(&e->k, &e->kcap, n + 1, sizeof *e->k)) != OT_OK ||
        (s = cc_grow(kbp, kbcap, n + 1, sizeof **kbp)) != OT_OK ||
        (s = cc_grow(&e->s, &e->scap, n + 1, sizeof *e->s)) != OT_OK ||
        (s = cc_grow(&e->io, &e->iocap, 4 * n + 1, sizeof *e->io)) != OT_OK)
        goto out;
    /* positions are set as the walk goes: the order is topological, so an operand's is set
     * before its users read it (one walk of the instructions, not two) */
    for (int64_t k = 0; k < n && s == OT_OK; k++) {
        ot_instr *i = order[k];
        i->mark = k;
        int64_t nl = leaf_count(&i->shape);
        if ((s = cc_grow(&lv, &lvcap, nlv + nl + 1, sizeof *lv)) != OT_OK) break;
        l0[k] = nlv;
        ln[k] = nl;
        switch (i->opcode) {
        case OT_OP_PARAMETER: {
            if (i->shape.kind != OT_IR_ARRAY) {
                s = ot_error(OT_ERR_UNIMPLEMENTED,
                             "compile: tuple-shaped entry parameter %s (pass arrays instead)",
                             i->name);
                break;
            }
            int32_t id;
            if ((s = add_slot(e, OT_SLOT_PARAMETER, &i->shape.array, &id)) != OT_OK) break;
            e->s[id].number = i->attrs->index;
            e->param_slot[i->attrs->index] = id;
            lv[nlv++] = id;
            break;
        }
        case OT_OP_CONSTANT: {
            if (!i->attrs->literal || i->attrs->literal->elided) {
                s = ot_error(OT_ERR_INVALID_ARGUMENT,
                             "compile: constant %s has no value "
                             "(elided)",
                             i->name);
                break;
            }
            int32_t id;
            if ((s = add_slot(e, OT_SLOT_CONSTANT, &i->shape.array, &id)) != OT_OK) break;
            e->s[id].data = i->attrs->literal->data;
            lv[nlv++] = id;
            break;
        }
        case OT_OP_TUPLE:
            for (int j = 0; j < i->noperands; j++) {
                int64_t p = i->operands[j]->mark;
                for (int64_t q = 0; q < ln[p]; q++) lv[nlv++] = lv[l0[p] + q];
            }
            break;
        case OT_OP_GET_TUPLE_ELEMENT: {
            const ot_instr *t = i->operands[0];
            int64_t p = t->mark, skip = 0;
            for (int64_t j = 0; j < i->attrs->index; j++) skip += leaf_count(&t->shape.tuple[j]);
            for (int64_t q = 0; q < nl; q++) lv[nlv++] = lv[l0[p] + skip + q];
            break;
        }
        default: {
            const char *nm = i->name;
            if ((s = add_kernel(e, kbp, kbcap, kind_of(i->opcode), i->opcode, i, nm)) != OT_OK)
                break;
            kbuild *kb = &(*kbp)[e->nk - 1];
            for (int j = 0; j < i->noperands && s == OT_OK; j++) {
                int64_t p = i->operands[j]->mark;
                for (int64_t q = 0; q < ln[p] && s == OT_OK; q++) s = push_io(e, lv[l0[p] + q]);
            }
            if (s != OT_OK) break;
            kb->nin = e->nio - kb->in0;
            kb->out0 = e->nio;
            if ((s = cc_grow(&shp, &shcap, nl + 1, sizeof *shp)) != OT_OK) break;
            int64_t ns = 0;
            leaf_shapes(&i->shape, shp, &ns);
            for (int64_t q = 0; q < ns && s == OT_OK; q++) {
                int32_t id;
                s = add_slot(e, OT_SLOT_TEMP, &shp[q], &id);
                if (s == OT_OK) s = push_io(e, id);
                lv[nlv++] = id;
            }
            kb->nout = e->nio - kb->out0;
            if (i->opcode == OT_OP_FUSION) {
                uint64_t linear;
                cc_fusion_analysis(i->called[0], &e->k[e->nk - 1].flops, &linear);
                if (i->attrs->fusion_kind == OT_FUSION_LOOP) kb->linear = linear;
            } else {
                e->k[e->nk - 1].flops = instr_flops(i);
            }
            break;
        }
        }
    }
    if (s != OT_OK) goto out;
    /* outputs: the root's leaves; parameters, constants and repeats get a copy kernel */
    {
        int64_t p = entry->root->mark;
        e->nout = (int)ln[p];
        e->out_slot = ot_malloc((size_t)(e->nout ? e->nout : 1) * sizeof(int32_t));
        if (!e->out_slot) {
            s = ot_error(OT_ERR_OUT_OF_MEMORY, "compile: out of memory");
            goto out;
        }
        for (int j = 0; j < e->nout && s == OT_OK; j++) {
            int32_t v = lv[l0[p] + j];
            if (e->s[v].kind == OT_SLOT_TEMP) {
                e->s[v].kind = OT_SLOT_OUTPUT;
                e->s[v].number = j;
                e->out_slot[j] = v;
                continue;
            }
            int32_t id;
            ot_shape sh = e->s[v].shape;
            if ((s = add_kernel(e, kbp, kbcap, OT_KERNEL_COPY, OT_OP_COPY, NULL, "output-copy")) !=
                OT_OK)
                break;
            kbuild *kb = &(*kbp)[e->nk - 1];
            if ((s = push_io(e, v)) != OT_OK) break;
            kb->nin = 1;
            kb->out0 = e->nio;
            if ((s = add_slot(e, OT_SLOT_OUTPUT, &sh, &id)) != OT_OK) break;
            e->s[id].number = j;
            if ((s = push_io(e, id)) != OT_OK) break;
            kb->nout = 1;
            e->out_slot[j] = id;
        }
    }
out:
    ot_free(l0);
    ot_free(ln);
    ot_free(lv);
    ot_free(shp);
    return s;
}

/* Donation: output k written into parameter P's buffer. Safe in place when every reader of P
 * runs no later than the kernel writing output k and, if that kernel reads P itself, reads it
 * elementwise (or as the operand of a one-operand scatter). Otherwise the kernel writes a temporary
 * and a copy at the end moves it. */
static ot_status apply_aliases(ot_executable *e, kbuild **kbp, int64_t *kbcap) {
    const ot_module_config *cfg = ot_module_get_config(e->mod);
    for (int a = 0; a < cfg->nalias; a++) {
        const ot_io_alias *al = &cfg->alias[a];
        if (al->noutput_index > 1 || al->nparam_index > 0)
            return ot_error(OT_ERR_UNIMPLEMENTED,
                            "compile: input/output alias into a nested tuple (output index depth "
                            "%d, parameter index depth %d)",
                            al->noutput_index, al->nparam_index);
        int64_t ok_ = al->noutput_index ? al->output_index[0] : 0;
        if (ok_ < 0 || ok_ >= e->nout || al->param_number < 0 || al->param_number >= e->nparams)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "compile: alias of parameter %lld into output %lld is out of range",
                            (long long)al->param_number, (long long)ok_);
        int32_t ps = e->param_slot[al->param_number], os = e->out_slot[ok_];
        if (!ot_shape_equal(&e->s[ps].shape, &e->s[os].shape))
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "compile: donated parameter %lld and output %lld differ in shape",
                            (long long)al->param_number, (long long)ok_);
        for (int j = 0; j < e->nout; j++)
            if (e->s[e->out_slot[j]].alias_param == al->param_number)
                return ot_error(OT_ERR_INVALID_ARGUMENT,
                                "compile: parameter %lld is donated to two outputs",
                                (long long)al->param_number);
        if (e->s[os].alias_param >= 0)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "compile: output %lld receives two donated parameters", (long long)ok_);
        /* the writer of os and the last reader of ps */
        int64_t writer = -1, last_read = -1;
        bool writer_reads_linear = true;
        for (int64_t k = 0; k < e->nk; k++) {
            const kbuild *kb = &(*kbp)[k];
            for (int64_t q = 0; q < kb->nout; q++)
                if (e->io[kb->out0 + q] == os) writer = k;
            for (int64_t q = 0; q < kb->nin; q++)
                if (e->io[kb->in0 + q] == ps) last_read = k;
        }
        bool safe = writer >= 0 && last_read <= writer;
        /* an output that is the donated parameter itself: its copy writes what is there */
        if (writer >= 0 && !e->k[writer].instr && e->k[writer].opcode == OT_OP_COPY &&
            (*kbp)[writer].nin == 1 && e->io[(*kbp)[writer].in0] == ps)
            safe = true;
        else if (safe && last_read == writer) {
            const ot_instr *wi = e->k[writer].instr;
            const kbuild *kb = &(*kbp)[writer];
            if (!wi) {
                writer_reads_linear = false;
            } else if (wi->opcode == OT_OP_FUSION && wi->attrs->fusion_kind == OT_FUSION_LOOP) {
                for (int64_t q = 0; q < kb->nin && writer_reads_linear; q++)
                    if (e->io[kb->in0 + q] == ps)
                        writer_reads_linear =
                            q < 64 ? (kb->linear >> q) & 1 : param_linear(wi->called[0], (int)q);
            } else if (wi->opcode == OT_OP_SCATTER && wi->noperands == 3 && kb->nin == 3) {
                /* a scatter updates its operand in place (kernels.h: the output may be the
                 * operand's memory) when it reads P as that operand only */
                writer_reads_linear = e->io[kb->in0 + 1] != ps && e->io[kb->in0 + 2] != ps;
            } else if (wi->opcode == OT_OP_CUSTOM_CALL && wi->attrs->custom_call_target &&
                       !strcmp(wi->attrs->custom_call_target, EX_STATE8_TARGET)) {
                /* the 8-bit state update reads each block of its operands before it writes the
                 * block: in place for the parameter and state it updates (exec/state8.h), when P
                 * is read as the operand in the output's position only */
                int64_t want = -1;
                for (int64_t q = 0; q < kb->nout; q++)
                    if (e->io[kb->out0 + q] == os) want = q == 0 ? 0 : q + 1;
                for (int64_t q = 0; q < kb->nin && writer_reads_linear; q++)
                    if (e->io[kb->in0 + q] == ps) writer_reads_linear = q == want;
            } else if (wi->opcode == OT_OP_DYNAMIC_UPDATE_SLICE && kb->nin == wi->noperands) {
                /* so does a dynamic-update-slice (the fast kernel then writes only the update)
                 * when it reads P as its operand only */
                for (int64_t q = 1; q < kb->nin && writer_reads_linear; q++)
                    writer_reads_linear = e->io[kb->in0 + q] != ps;
            } else {
                writer_reads_linear =
                    ot_opcode_is_elementwise(wi->opcode) && wi->opcode != OT_OP_MAP;
            }
            safe = writer_reads_linear;
        }
        e->s[os].alias_param = al->param_number;
        if (safe) continue;
        /* write a temporary, copy it into the donated buffer at the end */
        int32_t tmp;
        ot_shape sh = e->s[os].shape;
        OT_CHECK(add_slot(e, OT_SLOT_TEMP, &sh, &tmp));
        if (writer >= 0) {
            const kbuild *kb = &(*kbp)[writer];
            for (int64_t q = 0; q < kb->nout; q++)
                if (e->io[kb->out0 + q] == os) e->io[kb->out0 + q] = tmp;
        }
        for (int64_t k = 0; k < e->nk; k++) {
            const kbuild *kb = &(*kbp)[k];
            for (int64_t q = 0; q < kb->nin; q++)
                if (e->io[kb->in0 + q] == os) e->io[kb->in0 + q] = tmp;
        }
        OT_CHECK(add_kernel(e, kbp, kbcap, OT_KERNEL_COPY, OT_OP_COPY, NULL, "donation-copy"));
        kbuild *kb = &(*kbp)[e->nk - 1];
        OT_CHECK(push_io(e, tmp));
        kb->nin = 1;
        kb->out0 = e->nio;
        OT_CHECK(push_io(e, os));
        kb->nout = 1;
    }
    return OT_OK;
}

/* A while loop's initial state written where the loop keeps it (XLA's while buffers alias their
 * init): where leaf q of a while kernel's state is a temp that one earlier kernel writes and the
 * loop alone reads (once), that kernel writes the loop's output leaf q instead, and the loop
 * starts from it without copying (the runtime's loop copies its inputs into its outputs only
 * where they differ). The output leaf must be a temp or a result not donated from a parameter
 * (a donated result's buffer is the parameter's, which earlier kernels may still read); no
 * kernel before the loop reads or writes either, as it is the loop's own result. A scan's
 * zero-filled output of 16 MB was filled and then copied. */
static ot_status loop_state_in_place(ot_executable *e, kbuild *kb) {
    int64_t ns = e->ns ? e->ns : 1;
    int32_t *reads = ot_calloc((size_t)ns, sizeof *reads);
    int64_t *writer = ot_malloc((size_t)ns * sizeof *writer);
    if (!reads || !writer) {
        ot_free(reads);
        ot_free(writer);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "compile: out of memory");
    }
    for (int64_t v = 0; v < e->ns; v++) writer[v] = -1;
    for (int64_t k = 0; k < e->nk; k++) {
        for (int64_t q = 0; q < kb[k].nin; q++) reads[e->io[kb[k].in0 + q]]++;
        for (int64_t q = 0; q < kb[k].nout; q++) {
            int32_t v = e->io[kb[k].out0 + q];
            writer[v] = writer[v] == -1 ? k : -2; /* -2: more than one writer */
        }
    }
    for (int64_t k = 0; k < e->nk; k++) {
        if (e->k[k].opcode != OT_OP_WHILE || kb[k].nin != kb[k].nout) continue;
        for (int64_t q = 0; q < kb[k].nin; q++) {
            int32_t t = e->io[kb[k].in0 + q], o = e->io[kb[k].out0 + q];
            const ot_slot *ts = &e->s[t], *os = &e->s[o];
            if (ts->kind != OT_SLOT_TEMP || reads[t] != 1 || writer[t] < 0 || writer[t] >= k ||
                writer[o] != k || ts->nbytes != os->nbytes || os->alias_param >= 0 ||
                (os->kind != OT_SLOT_TEMP && os->kind != OT_SLOT_OUTPUT))
                continue;
            const kbuild *p = &kb[writer[t]];
            for (int64_t j = 0; j < p->nout; j++)
                if (e->io[p->out0 + j] == t) e->io[p->out0 + j] = o;
            e->io[kb[k].in0 + q] = o;
            reads[t] = 0;
            reads[o]++;
            writer[t] = -1;
            writer[o] = -2;
        }
    }
    ot_free(reads);
    ot_free(writer);
    return OT_OK;
}

/* The operand whose buffer a LAPACK custom call's first result may take, or -1. */
static int lapack_in_place(const ot_instr *i) {
    if (!i || i->opcode != OT_OP_CUSTOM_CALL || !i->attrs->custom_call_target) return -1;
    ir_lapack_call lc;
    bool is_lapack = false;
    if (ir_lapack_parse(i->attrs->custom_call_target, i->attrs->backend_config, &lc, &is_lapack) !=
            OT_OK ||
        !is_lapack)
        return -1;
    return ir_lapack_in_place_operand(&lc);
}

static ot_status assign_buffers(ot_executable *e, kbuild *kb, bool in_place) {
    int64_t *last = ot_malloc((size_t)(e->ns ? e->ns : 1) * sizeof *last);
    bool *moved = ot_calloc((size_t)(e->ns ? e->ns : 1), sizeof *moved);
    /* per slot: the last kernel (k + 1) that listed it, and how often it lists it as an input,
     * so a kernel with 100,000 operands is not scanned once per operand */
    int64_t *seen = ot_calloc((size_t)(e->ns ? e->ns : 1), sizeof *seen);
    int32_t *times = ot_calloc((size_t)(e->ns ? e->ns : 1), sizeof *times);
    alloc a = {NULL, 0, 0, -1, {-1, -1}, 0x9e3779b9u, 0, 0};
    ot_status s = OT_OK;
    if (!last || !moved || !seen || !times) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "assign buffers: out of memory");
        goto out;
    }
    for (int64_t v = 0; v < e->ns; v++) last[v] = -1;
    for (int64_t k = 0; k < e->nk; k++)
        for (int64_t q = 0; q < kb[k].nin; q++) last[e->io[kb[k].in0 + q]] = k;
    int64_t live = 0;
    for (int64_t k = 0; k < e->nk && s == OT_OK; k++) {
        ot_kernel *kn = &e->k[k];
        for (int64_t q = 0; q < kb[k].nin; q++) {
            int32_t v = e->io[kb[k].in0 + q];
            times[v] = seen[v] == k + 1 ? times[v] + 1 : 1;
            seen[v] = k + 1;
        }
        for (int64_t q = 0; q < kb[k].nout && s == OT_OK; q++) {
            int32_t o = e->io[kb[k].out0 + q];
            ot_slot *os = &e->s[o];
            if (os->kind != OT_SLOT_TEMP) continue;
            int64_t size = align_up(os->nbytes ? os->nbytes : 1);
            /* in place: an input temp that dies here, read elementwise */
            if (in_place && q == 0 && kn->instr && input_linear(kn->instr, os, os)) {
                for (int64_t j = 0; j < kb[k].nin; j++) {
                    int32_t v = e->io[kb[k].in0 + j];
                    ot_slot *vs = &e->s[v];
                    if (vs->kind != OT_SLOT_TEMP || last[v] != k || moved[v]) continue;
                    if (!input_linear(kn->instr, vs, os)) continue;
                    if (kn->instr->opcode == OT_OP_FUSION && (j >= 64 || !(kb[k].linear >> j & 1)))
                        continue;
                    bool twice = times[v] > 1; /* the same temp in two input positions */
                    if (twice && kn->instr->opcode == OT_OP_FUSION) continue;
                    os->offset = vs->offset;
                    moved[v] = true;
                    kn->in_place_input = (int32_t)j;
                    break;
                }
            }
            /* a one-operand scatter or a dynamic-update-slice updates its operand in place
             * (kernels.h) when that operand is a temp dying here and read nowhere else in the
             * kernel */
            if (in_place && q == 0 && os->offset < 0 && kn->instr &&
                ((kn->instr->opcode == OT_OP_SCATTER && kn->instr->noperands == 3 &&
                  kb[k].nin == 3) ||
                 (kn->instr->opcode == OT_OP_DYNAMIC_UPDATE_SLICE &&
                  kb[k].nin == kn->instr->noperands))) {
                int32_t v = e->io[kb[k].in0];
                ot_slot *vs = &e->s[v];
                if (vs->kind == OT_SLOT_TEMP && last[v] == k && !moved[v] && times[v] == 1 &&
                    vs->offset >= 0 && vs->nbytes == os->nbytes) {
                    os->offset = vs->offset;
                    moved[v] = true;
                    kn->in_place_input = 0;
                }
            }
            /* a LAPACK custom call writes its first result over the operand that
             * ir_lapack_in_place_operand names, when that operand is a temp dying here and
             * read nowhere else in the kernel (jnp.linalg.inv: each triangular solve's 1 MB
             * right-hand side was copied into the result before the solve) */
            int lo = in_place && q == 0 && os->offset < 0 ? lapack_in_place(kn->instr) : -1;
            if (lo >= 0 && lo < kb[k].nin && kb[k].nin == kn->instr->noperands) {
                int32_t v = e->io[kb[k].in0 + lo];
                ot_slot *vs = &e->s[v];
                if (vs->kind == OT_SLOT_TEMP && last[v] == k && !moved[v] && times[v] == 1 &&
                    vs->offset >= 0 && vs->nbytes == os->nbytes) {
                    os->offset = vs->offset;
                    moved[v] = true;
                    kn->in_place_input = lo;
                }
            }
            if (os->offset < 0) {
                if ((s = al_alloc(&a, size, &os->offset)) != OT_OK) break;
                live += size;
            }
        }
        if (live > e->peak) e->peak = live;
        /* free inputs dying here and outputs nobody reads (each slot once: seen -> -(k + 1)) */
        for (int64_t q = 0; q < kb[k].nin + kb[k].nout && s == OT_OK; q++) {
            int32_t v = e->io[kb[k].in0 + q];
            ot_slot *vs = &e->s[v];
            bool is_out = q >= kb[k].nin;
            if (vs->kind != OT_SLOT_TEMP || vs->offset < 0) continue;
            if (is_out ? last[v] >= 0 : (last[v] != k || moved[v])) continue;
            if (seen[v] == -(k + 1)) continue; /* listed before in this kernel */
            seen[v] = -(k + 1);
            s = al_free(&a, vs->offset, align_up(vs->nbytes ? vs->nbytes : 1));
            live -= align_up(vs->nbytes ? vs->nbytes : 1);
        }
    }
    e->arena = a.high;
out:
    ot_free(a.nd);
    ot_free(last);
    ot_free(moved);
    ot_free(seen);
    ot_free(times);
    return s;
}

/* cc_executable_update_writer's pairs (native.h): e->update_writer[p] = the distance from fusion
 * p to the dynamic-update-slice whose update it writes. The slice's operand is written before p,
 * and the kernels between them (at most UPDATE_GAP) neither read that operand nor write its
 * starts, so the update may land when p runs. */
enum { UPDATE_GAP = 16 };
static ot_status mark_update_writers(ot_executable *e, const kbuild *kb) {
    int32_t *reads = NULL;
    int64_t *writer = NULL;
    ot_status st = OT_OK;
    for (int64_t k = 1; k < e->nk && st == OT_OK; k++) {
        const ot_kernel *kn = &e->k[k];
        const ot_instr *i = kn->instr;
        if (kn->opcode != OT_OP_DYNAMIC_UPDATE_SLICE || !i || kb[k].nin != i->noperands ||
            kb[k].nout != 1 || i->operands[0]->shape.kind != OT_IR_ARRAY ||
            i->operands[1]->shape.kind != OT_IR_ARRAY)
            continue;
        /* the update a contiguous run: unit dims, then one dim, then the operand's dims */
        const ot_shape *O = &i->operands[0]->shape.array, *U = &i->operands[1]->shape.array;
        int d = 0;
        while (d < U->rank && U->dims[d] == 1) d++;
        bool run = U->rank == O->rank;
        for (int j = d + 1; run && j < U->rank; j++) run = U->dims[j] == O->dims[j];
        if (!run) continue;
        if (!reads) {
            reads = ot_calloc((size_t)(e->ns ? e->ns : 1), sizeof *reads);
            writer = ot_malloc((size_t)(e->ns ? e->ns : 1) * sizeof *writer);
            if (!reads || !writer) {
                st = ot_error(OT_ERR_OUT_OF_MEMORY, "compile: out of memory");
                break;
            }
            for (int64_t v = 0; v < e->ns; v++) writer[v] = -1;
            for (int64_t j = 0; j < e->nk; j++) {
                for (int64_t q = 0; q < kb[j].nin; q++) reads[e->io[kb[j].in0 + q]]++;
                for (int64_t q = 0; q < kb[j].nout; q++) writer[e->io[kb[j].out0 + q]] = j;
            }
        }
        int32_t t = e->io[kb[k].in0 + 1], op = e->io[kb[k].in0];
        int64_t p = writer[t];
        /* the operand written before p: its writer would overwrite an early update, and until
         * it runs the memory may hold its input (written in place over it), which the update
         * would clobber */
        if (p < 0 || p >= k || k - p > UPDATE_GAP || e->s[t].kind != OT_SLOT_TEMP ||
            writer[op] >= p || reads[t] != 1 || e->k[p].kind != OT_KERNEL_FUSION ||
            kb[p].nout != 1 || e->k[p].in_place_input >= 0 ||
            (e->update_writer && e->update_writer[p]))
            continue;
        bool clear = true;
        for (int64_t j = p + 1; j < k && clear; j++) {
            for (int64_t q = 0; q < kb[j].nin && clear; q++) clear = e->io[kb[j].in0 + q] != op;
            for (int64_t q = 0; q < kb[j].nout && clear; q++)
                for (int64_t x = 2; x < kb[k].nin && clear; x++)
                    clear = e->io[kb[j].out0 + q] != e->io[kb[k].in0 + x];
        }
        if (!clear) continue;
        if (!e->update_writer && !(e->update_writer = ot_calloc((size_t)e->nk, 1))) {
            st = ot_error(OT_ERR_OUT_OF_MEMORY, "compile: out of memory");
            break;
        }
        e->update_writer[p] = (uint8_t)(k - p);
    }
    ot_free(reads);
    ot_free(writer);
    return st;
}

static ot_status finalize_kernels(ot_executable *e, const kbuild *kb) {
    for (int64_t k = 0; k < e->nk; k++) {
        ot_kernel *kn = &e->k[k];
        kn->ninputs = (int)kb[k].nin;
        kn->noutputs = (int)kb[k].nout;
        kn->inputs = e->io + kb[k].in0;
        kn->outputs = e->io + kb[k].out0;
        kn->bytes_read = kn->bytes_written = 0;
        for (int q = 0; q < kn->ninputs; q++) kn->bytes_read += e->s[kn->inputs[q]].nbytes;
        for (int q = 0; q < kn->noutputs; q++) kn->bytes_written += e->s[kn->outputs[q]].nbytes;
        e->flops += kn->flops;
        e->bytes += kn->bytes_read + kn->bytes_written;
    }
    return OT_OK;
}

/* --------------------------------------------------------------------------------------------- */

typedef struct pass_ctx {
    const ot_compile_options *o;
    /* computations from this index on were made by the fusion pass, in topological order, and
     * no pass has run since (-1: none, or some pass may have edited them) */
    int fused_from;
} pass_ctx;

/* Every pass but fusion may edit fused computations (constant folding appends a constant and
 * points earlier users at it): after one, their order is checked again. */
static void edited(void *ctx) {
    ((pass_ctx *)ctx)->fused_from = -1;
}

static ot_status run_inline(ot_module *m, void *ctx, bool *ch) {
    edited(ctx);
    return ot_pass_inline(m, ch);
}
static ot_status run_simplify(ot_module *m, void *ctx, bool *ch) {
    edited(ctx);
    return ot_pass_simplify(m, ch);
}
static ot_status run_cse(ot_module *m, void *ctx, bool *ch) {
    edited(ctx);
    return ot_pass_cse(m, ch);
}
static ot_status run_dce(ot_module *m, void *ctx, bool *ch) {
    edited(ctx);
    return ot_pass_dce(m, ch);
}
static ot_status run_fold(ot_module *m, void *ctx, bool *ch) {
    edited(ctx);
    return ot_pass_fold(m, ((pass_ctx *)ctx)->o->fold_max_elements, ch);
}
static ot_status run_fuse(ot_module *m, void *ctx, bool *ch) {
    pass_ctx *pc = ctx;
    if (pc->fused_from < 0) pc->fused_from = ot_module_computation_count(m);
    return ot_pass_fuse(m, pc->o->max_fusion_io, ch);
}

static ot_status run_licm(ot_module *m, void *ctx, bool *ch) {
    edited(ctx);
    return ot_pass_licm(m, ch);
}

static const struct {
    const char *name;
    ot_pass_fn fn;
} pass_table[] = {
    {"inline", run_inline}, {"simplify", run_simplify}, {"cse", run_cse},   {"fold", run_fold},
    {"dce", run_dce},       {"fuse", run_fuse},         {"licm", run_licm},
};

static bool in_list(const char *list, const char *name) {
    if (!list) return false;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *q = strchr(p, ',');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return true;
        if (!q) break;
        p = q + 1;
    }
    return false;
}

static ot_pass_fn pass_fn(const char *name, size_t len) {
    for (size_t k = 0; k < sizeof pass_table / sizeof pass_table[0]; k++)
        if (strlen(pass_table[k].name) == len && !strncmp(pass_table[k].name, name, len))
            return pass_table[k].fn;
    return NULL;
}

static ot_status check_list(const char *list, const char *what) {
    if (!list) return OT_OK;
    for (const char *p = list; *p;) {
        const char *q = strchr(p, ',');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        if (!pass_fn(p, len))
            return ot_error(
                OT_ERR_INVALID_ARGUMENT,
                "%s: unknown pass '%.*s' (known: inline, simplify, cse, fold, dce, licm, fuse)",
                what, (int)len, p);
        if (!q) break;
        p = q + 1;
    }
    return OT_OK;
}

static ot_status add_pass(ot_pass_manager *pm, const ot_compile_options *o, const char *name,
                          pass_ctx *ctx) {
    if (in_list(o->disable_passes, name)) return OT_OK;
    /* one CSE run merges along the post order, so what it merges cascades within the run; DCE
     * removes everything dead at once: a second run right after either finds nothing */
    if (!strcmp(name, "cse") || !strcmp(name, "dce"))
        return ot_pass_manager_add_idempotent(pm, name, pass_fn(name, strlen(name)), ctx);
    return ot_pass_manager_add(pm, name, pass_fn(name, strlen(name)), ctx);
}

/* Rewrites every bf16 or f16 sum (ex_reduce_widens, exec/numerics.h) into
 * convert(reduce(convert(x), convert(init))) in f32 with one f32 add reducer: the semantics the
 * reference evaluator gives such a reduce, in a form every kernel and generated code runs. Part
 * of every compile whatever the passes, since it defines results, not speed. */
static ot_status widen_sums(ot_module *m, bool *changed) {
    *changed = false;
    ot_computation *add = NULL;
    int nc = ot_module_computation_count(m);
    for (int k = 0; k < nc; k++) {
        ot_computation *c = ot_module_computation(m, k);
        for (ot_instr *r = c->first, *next; r; r = next) {
            next = r->next;
            if (r->opcode != OT_OP_REDUCE || !ex_reduce_widens(r)) continue;
            if (!add) {
                add = ot_module_add_computation(m, "widened_sum_f32");
                ot_instr *a = add ? ot_build_parameter(add, 0, ot_shape_scalar(OT_F32), "a") : NULL;
                ot_instr *b = a ? ot_build_parameter(add, 1, ot_shape_scalar(OT_F32), "b") : NULL;
                ot_instr *sum = b ? ot_build_binary(add, OT_OP_ADD, a, b) : NULL;
                if (!sum)
                    return ot_module_status(m) != OT_OK ? ot_module_status(m) : OT_ERR_INTERNAL;
                ot_computation_set_root(add, sum);
            }
            ot_instr *x = ot_build_convert(c, r->operands[0], OT_F32);
            ot_instr *init = x ? ot_build_convert(c, r->operands[1], OT_F32) : NULL;
            ot_instr *sum =
                init ? ot_build_reduce(c, &x, &init, 1, r->attrs->dims, r->attrs->ndims, add)
                     : NULL;
            ot_instr *back = sum ? ot_build_convert(c, sum, r->shape.array.dtype) : NULL;
            if (!back) return ot_module_status(m) != OT_OK ? ot_module_status(m) : OT_ERR_INTERNAL;
            OT_CHECK(ot_instr_replace_all_uses(r, back));
            OT_CHECK(ot_instr_remove(r));
            *changed = true;
        }
    }
    return OT_OK;
}

static ot_status build_pipeline(ot_pass_manager *pm, const ot_compile_options *o, pass_ctx *ctx) {
    OT_CHECK(check_list(o->passes, "passes"));
    OT_CHECK(check_list(o->disable_passes, "disable_passes"));
    if (o->passes) {
        for (const char *p = o->passes; *p;) {
            const char *q = strchr(p, ',');
            size_t len = q ? (size_t)(q - p) : strlen(p);
            char nm[32];
            snprintf(nm, sizeof nm, "%.*s", (int)len, p);
            OT_CHECK(add_pass(pm, o, nm, ctx));
            if (!q) break;
            p = q + 1;
        }
        return OT_OK;
    }
    if (o->opt_level <= 0) return add_pass(pm, o, "dce", ctx);
    OT_CHECK(add_pass(pm, o, "inline", ctx));
    if (o->opt_level == 1) {
        OT_CHECK(add_pass(pm, o, "simplify", ctx));
        OT_CHECK(add_pass(pm, o, "cse", ctx));
        OT_CHECK(add_pass(pm, o, "dce", ctx));
    } else {
        OT_CHECK(ot_pass_manager_begin_fixed_point(pm, "simplify-group", 8));
        OT_CHECK(add_pass(pm, o, "licm", ctx));
        OT_CHECK(add_pass(pm, o, "simplify", ctx));
        OT_CHECK(add_pass(pm, o, "cse", ctx));
        if (cc_fold_available()) OT_CHECK(add_pass(pm, o, "fold", ctx));
        OT_CHECK(add_pass(pm, o, "dce", ctx));
        OT_CHECK(ot_pass_manager_end_fixed_point(pm));
    }
    if (o->fusion) OT_CHECK(add_pass(pm, o, "fuse", ctx));
    return OT_OK;
}

/* Whether every operand comes before its user in the list: one walk, with a fresh visit stamp
 * for "defined above" (no positions to number first). */
static bool list_in_order(ot_computation *c) {
    const uint64_t seen = ir_visit_stamps(c->module, 1) + 1;
    for (ot_instr *i = c->first; i; i = i->next) {
        for (int j = 0; j < i->noperands; j++)
            if (i->operands[j]->visit_ != seen) return false;
        i->visit_ = seen;
    }
    return true;
}

/* Relinks the instruction list of every computation that holds a use before its definition
 * into post order, in place (those the fusion pass made, from index fused_from on when no pass
 * ran after it, are in order by construction and not walked): the same order a clone of the module
 * would give, without copying the module. When the entry was relinked, *entry_po is its post order
 * (the new list order, which cc_post_order would return again), else NULL. */
static ot_status normalize_lists(ot_module *m, int fused_from, ot_instr ***entry_po,
                                 int64_t *entry_n) {
    /* relinking the lists below is no counted edit: nothing kept may outlive it */
    ir_module_set_pass_cache(m, NULL, NULL);
    int ncomp = ot_module_computation_count(m);
    if (fused_from >= 0 && fused_from < ncomp) {
#ifndef NDEBUG
        /* debug builds hold the fusion pass to building its computations in order */
        for (int k = fused_from; k < ncomp; k++)
            if (!list_in_order(ot_module_computation(m, k)))
                return ot_error(OT_ERR_INTERNAL, "fusion built %s with a use before its definition",
                                ot_module_computation(m, k)->name);
#endif
        ncomp = fused_from;
    }
    for (int k = 0; k < ncomp; k++) {
        ot_computation *c = ot_module_computation(m, k);
        if (list_in_order(c)) continue;
        ot_instr **po = NULL;
        int64_t n = 0;
        OT_CHECK(cc_post_order(c, &po, &n));
        if (n != c->ninstrs) {
            ot_free(po);
            return ot_error(OT_ERR_INTERNAL, "re-emit %s: post order has %lld of %lld instructions",
                            c->name, (long long)n, (long long)c->ninstrs);
        }
        for (int64_t j = 0; j < n; j++) {
            po[j]->prev = j ? po[j - 1] : NULL;
            po[j]->next = j + 1 < n ? po[j + 1] : NULL;
        }
        c->first = n ? po[0] : NULL;
        c->last = n ? po[n - 1] : NULL;
        if (c == ot_module_entry(m) && !*entry_po) {
            *entry_po = po;
            *entry_n = n;
        } else {
            ot_free(po);
        }
    }
    return OT_OK;
}

static ot_status normalize_order(ot_module *m, int fused_from, ot_instr ***entry_po,
                                 int64_t *entry_n) {
    *entry_po = NULL;
    *entry_n = 0;
    ot_status s = normalize_lists(m, fused_from, entry_po, entry_n);
    if (s != OT_OK) {
        ot_free(*entry_po);
        *entry_po = NULL;
    }
    return s;
}

/* The fingerprint (SHA-256 of the source's canonical text) depends only on the source module,
 * which no pass touches, so a large module's is computed on a second thread while the passes
 * run on the clone. That thread also finds the source's post orders, which the printing needs:
 * the clone takes the lists' order instead, which is the same whenever the lists are in order
 * (both only read the source). From FP_THREAD_MIN instructions: below, starting a thread costs
 * more than the hashing. */
enum { FP_THREAD_MIN = 20000 };

typedef struct fp_job {
    const ot_module *src;
    const ot_compile_options *o;
    ir_module_orders *orders; /* built by the thread */
    uint8_t fp[32];
    ot_status s;
    char msg[512]; /* the error message, which is per thread */
} fp_job;

static void *fp_main(void *arg) {
    fp_job *j = arg;
    j->s = ir_module_orders_build(j->src, j->orders);
    if (j->s == OT_OK) j->s = cc_fingerprint(j->src, j->o, j->orders, j->fp);
    if (j->s != OT_OK) snprintf(j->msg, sizeof j->msg, "%s", ot_last_error());
    return NULL;
}

ot_status ot_compile(const ot_module *src, const ot_compile_options *opts, ot_executable **out) {
    return cc_compile_at(src, opts, 0, out);
}

ot_status cc_compile_at(const ot_module *src, const ot_compile_options *opts, int depth,
                        ot_executable **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "compile: out is NULL");
    *out = NULL;
    ot_compile_options o = opts ? *opts : ot_compile_options_default();
    if (!o.target) o.target = "host-cpu";
#ifndef NDEBUG
    o.verify_each = true; /* debug builds verify after every pass */
#endif
    if (!src) return ot_error(OT_ERR_INVALID_ARGUMENT, "compile: module is NULL");
    ot_computation *entry = ot_module_entry(src);
    if (!entry)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "compile: module has no entry computation");
    if (!entry->root)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "no outputs declared (entry computation %s has "
                        "no root)",
                        entry->name);
    if (o.opt_level < 0 || o.opt_level > 2)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "compile: optimization level %d (0, 1 or 2)",
                        o.opt_level);
    OT_CHECK(ot_module_status(src));
    OT_CHECK(ot_module_verify(src));
    ot_executable *e = ot_calloc(1, sizeof *e);
    if (!e) return ot_error(OT_ERR_OUT_OF_MEMORY, "compile: out of memory");
    ot_instr **order = NULL;
    int64_t norder = 0;
    uint8_t fp[32];
    pass_ctx ctx = {&o, -1};
    /* the source's orders: for the fingerprint's printing, and the clone when a list is out of
     * order */
    ir_module_orders src_orders = {0};
    fp_job fj = {src, &o, &src_orders, {0}, OT_OK, {0}};
    pthread_t fp_thread;
    bool fp_started = false, fp_joined = false;
    ot_status s = OT_OK;
    if (ot_module_instr_count(src) >= FP_THREAD_MIN)
        fp_started = pthread_create(&fp_thread, NULL, fp_main, &fj) == 0;
    if (fp_started) {
        s = ir_module_clone_ordered(src, IR_ORDERS_LISTS, &e->mod);
        if (s == OT_ERR_FAILED_PRECONDITION) {
            /* a list out of order: clone over the thread's orders */
            pthread_join(fp_thread, NULL);
            fp_started = false;
            s = fj.s == OT_OK ? OT_OK : ot_error(fj.s, "%s", fj.msg);
            if (s == OT_OK) s = ir_module_clone_ordered(src, &src_orders, &e->mod);
            fp_joined = true;
        }
    } else {
        s = ir_module_orders_build(src, &src_orders);
        if (s == OT_OK) s = ir_module_clone_ordered(src, &src_orders, &e->mod);
    }
    bool widened = false;
    if (s == OT_OK) s = widen_sums(e->mod, &widened);
    /* the clone's lists are its post orders (unless widen_sums appended to them): the first pass
     * need not walk the graph for them */
    if (s == OT_OK && !widened) s = cc_orders_keep_lists(e->mod);
    if (s != OT_OK) goto fail;
    e->pm = ot_pass_manager_new();
    if (!e->pm) {
        s = OT_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    ot_pass_manager_set_verify_each(e->pm, o.verify_each);
    if (o.dump_dir && (s = ot_pass_manager_set_dump(e->pm, o.dump_dir, o.dump_after)) != OT_OK)
        goto fail;
    if ((s = build_pipeline(e->pm, &o, &ctx)) != OT_OK) goto fail;
    if ((s = ot_pass_manager_run(e->pm, e->mod)) != OT_OK) goto fail;

    /* Passes append new instructions at the end of a computation's list; consumers of the
     * executable's module (the evaluator, printers) expect definitions before uses, so the
     * module is re-emitted in post order when a list is out of order. */
    ot_instr **entry_po = NULL;
    int64_t entry_n = 0;
    if ((s = normalize_order(e->mod, ctx.fused_from, &entry_po, &entry_n)) != OT_OK) goto fail;
    int64_t before = ot_module_instr_count(e->mod);
    uint64_t t0 = ot_now_ns();
    s = entry_po ? cc_schedule_post_order(entry_po, entry_n, o.opt_level >= 1, &order, &norder)
                 : ot_schedule_entry(e->mod, o.opt_level >= 1, &order, &norder);
    if (s != OT_OK) goto fail;
    ot_pass_stat st = {"schedule", 0, ot_now_ns() - t0, before, before, false};
    if ((s = ot_pass_manager_record(e->pm, &st)) != OT_OK) goto fail;
    if (fp_started || fp_joined) {
        if (fp_started) pthread_join(fp_thread, NULL);
        fp_started = false;
        s = fj.s == OT_OK ? OT_OK : ot_error(fj.s, "%s", fj.msg);
        memcpy(fp, fj.fp, 32);
    } else {
        s = cc_fingerprint(src, &o, &src_orders, fp);
    }
    ir_module_orders_free(&src_orders);
    if (s != OT_OK) goto fail;

    t0 = ot_now_ns();
    ot_executable *done = NULL;
    ot_module *mod = e->mod;
    e->mod = NULL;
    s = cc_build_executable(mod, order, norder, &o, &done);
    order = NULL;
    if (s != OT_OK) goto fail;
    done->pm = e->pm;
    e->pm = NULL;
    ot_executable_free(e);
    e = done;
    memcpy(e->fp, fp, 32);
    st = (ot_pass_stat){"assign-buffers", 0, ot_now_ns() - t0, before, before, false};
    if ((s = ot_pass_manager_record(e->pm, &st)) != OT_OK) goto fail;
    if (o.arena_limit > 0 && e->arena > o.arena_limit) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY,
                     "compile: the arena needs %lld bytes (peak of live bytes %lld), over the "
                     "limit of %lld bytes",
                     (long long)e->arena, (long long)e->peak, (long long)o.arena_limit);
        goto fail;
    }
    /* last, on the finished executable: native code for its loop fusions */
    cc_native_stage(e, &o);
    /* then its while loops, each condition and body compiled as an executable of its own */
    cc_compile_loops(e, &o, depth);
    *out = e;
    return OT_OK;
fail:
    if (fp_started) pthread_join(fp_thread, NULL); /* it reads src_orders */
    ir_module_orders_free(&src_orders);
    ot_free(order);
    ot_executable_free(e);
    return s;
}

static void copy_opt_str(char *buf, size_t cap, const char **p) {
    if (!*p) return;
    snprintf(buf, cap, "%s", *p);
    *p = buf;
}

ot_status cc_build_executable(ot_module *m, ot_instr **order, int64_t n,
                              const ot_compile_options *o, ot_executable **out) {
    *out = NULL;
    ot_executable *e = ot_calloc(1, sizeof *e);
    if (!e) {
        ot_module_free(m);
        ot_free(order);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "compile: out of memory");
    }
    e->mod = m;
    e->order = order;
    e->norder = n;
    e->opts = *o;
    copy_opt_str(e->target, sizeof e->target, &e->opts.target);
    copy_opt_str(e->passes, sizeof e->passes, &e->opts.passes);
    copy_opt_str(e->disable, sizeof e->disable, &e->opts.disable_passes);
    e->opts.dump_dir = e->opts.dump_after = NULL;
    e->opts.native_cc = NULL; /* read by the native stage during the call only */
    kbuild *kb = NULL;
    int64_t kbcap = 0;
    ot_status s = build_program(e, order, n, &kb, &kbcap);
    if (s == OT_OK) s = apply_aliases(e, &kb, &kbcap);
    if (s == OT_OK && o->opt_level >= 1) s = loop_state_in_place(e, kb);
    if (s == OT_OK) s = assign_buffers(e, kb, o->opt_level >= 1);
    if (s == OT_OK) s = finalize_kernels(e, kb);
    if (s == OT_OK && o->opt_level >= 1) s = mark_update_writers(e, kb);
    ot_free(kb);
    if (s != OT_OK) {
        ot_executable_free(e);
        return s;
    }
    *out = e;
    return OT_OK;
}
