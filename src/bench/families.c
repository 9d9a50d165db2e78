/* Graph-shape families (include/optitpu/bench.h): modules of about N instructions in the shapes
 * user programs take, for the compiler's tests (tests/test_compile_families.c) and
 * `optitpu bench compile --shape`. Every generator is a loop over the graph it builds (no
 * recursion that follows the graph's depth) and draws its choices from one seeded generator, so
 * (family, n, seed) always gives the same module. Values are kept finite where the shape allows
 * (tanh/sine between stacks of arithmetic) so that exactness checks compare numbers, not only
 * NaNs; the random family does not, on purpose. */
#include "optitpu/bench.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "optitpu/ir.h"

/* The fori_unrolled fixture (tests/data/compiler/fori_loop_unrolled_1000.hlo, embedded by the
 * build: cmake/embed.cmake). */
extern const unsigned char ot_fori_loop_hlo[];
extern const size_t ot_fori_loop_hlo_len;

typedef struct gen {
    ot_module *m;
    ot_computation *c; /* the entry */
    ot_computation *sum, *max;
    uint64_t rng;
    int64_t n; /* the instruction count to reach */
    int64_t nparams;
    ot_instr *zero, *ninf; /* f32 scalar constants: the reduce inits */
    ot_shape v;            /* f32[16] */
    ot_shape mat;          /* f32[16,16] */
    /* a growable list of values (outputs, sinks, leaves) */
    ot_instr **list;
    int64_t nlist, caplist;
    bool oom;
} gen;

static uint64_t rnd(gen *g) {
    /* splitmix64: any seed, 0 included, gives a full-period stream */
    uint64_t z = (g->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int64_t pick(gen *g, int64_t n) {
    return n > 0 ? (int64_t)(rnd(g) % (uint64_t)n) : 0;
}

static int64_t count(const gen *g) {
    return ot_module_instr_count(g->m);
}

static void push(gen *g, ot_instr *x) {
    if (g->nlist == g->caplist) {
        int64_t cap = g->caplist ? g->caplist * 2 : 256;
        ot_instr **nl = ot_realloc(g->list, (size_t)cap * sizeof *nl);
        if (!nl) {
            g->oom = true;
            return;
        }
        g->list = nl;
        g->caplist = cap;
    }
    g->list[g->nlist++] = x;
}

static ot_computation *reducer(ot_module *m, const char *name, ot_opcode op) {
    ot_computation *r = ot_module_add_computation(m, name);
    ot_instr *a = ot_build_parameter(r, 0, ot_shape_scalar(OT_F32), "a");
    ot_instr *b = ot_build_parameter(r, 1, ot_shape_scalar(OT_F32), "b");
    ot_computation_set_root(r, ot_build_binary(r, op, a, b));
    return r;
}

static ot_status gen_init(gen *g, const char *name, int64_t n, uint64_t seed) {
    memset(g, 0, sizeof *g);
    g->m = ot_module_new(name);
    if (!g->m) return ot_error(OT_ERR_OUT_OF_MEMORY, "graph family: out of memory");
    g->rng = seed;
    g->n = n;
    g->sum = reducer(g->m, "sum", OT_OP_ADD);
    g->max = reducer(g->m, "max", OT_OP_MAXIMUM);
    g->c = ot_module_add_computation(g->m, "main");
    ot_module_set_entry(g->m, g->c);
    ot_shape_make(&g->v, OT_F32, 1, (int64_t[]){16});
    ot_shape_make(&g->mat, OT_F32, 2, (int64_t[]){16, 16});
    g->zero = ot_build_constant_scalar(g->c, OT_F32, 0);
    g->ninf = ot_build_constant_scalar(g->c, OT_F32, -INFINITY);
    return ot_module_status(g->m);
}

static ot_instr *param(gen *g, ot_shape s) {
    char nm[32];
    snprintf(nm, sizeof nm, "p%lld", (long long)g->nparams);
    return ot_build_parameter(g->c, g->nparams++, s, nm);
}

/* A splat constant of x's shape (scalar constant + broadcast). */
static ot_instr *splat(gen *g, ot_computation *c, const ot_instr *like, double v) {
    return ot_build_broadcast(c, ot_build_constant_scalar(c, OT_F32, v), like->shape.array, NULL,
                              0);
}

static const ot_opcode k_cheap_binary[] = {OT_OP_ADD, OT_OP_SUBTRACT, OT_OP_MAXIMUM, OT_OP_MINIMUM,
                                           OT_OP_MULTIPLY};
static const ot_opcode k_bounded_unary[] = {OT_OP_TANH, OT_OP_SIN, OT_OP_LOGISTIC, OT_OP_COS,
                                            OT_OP_ERF};
#define NELEM(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))

static ot_opcode any_binary(gen *g) {
    return k_cheap_binary[pick(g, NELEM(k_cheap_binary))];
}
static ot_opcode any_bounded(gen *g) {
    return k_bounded_unary[pick(g, NELEM(k_bounded_unary))];
}

/* The root: one value, or a tuple of the list (the list is emptied). */
static void set_root_list(gen *g) {
    if (g->nlist == 1) {
        ot_computation_set_root(g->c, g->list[0]);
    } else if (g->nlist > 1 && g->nlist <= 0x7fffffff) {
        ot_computation_set_root(g->c, ot_build_tuple(g->c, g->list, (int)g->nlist));
    }
    g->nlist = 0;
}

static ot_status gen_finish(gen *g, ot_module **out) {
    ot_free(g->list);
    g->list = NULL;
    ot_status s = g->oom ? ot_error(OT_ERR_OUT_OF_MEMORY, "graph family: out of memory") : OT_OK;
    if (s == OT_OK) s = ot_module_finalize(g->m);
    if (s != OT_OK) {
        ot_module_free(g->m);
        return s;
    }
    *out = g->m;
    return OT_OK;
}

/* ---- residual: x_i = op(x_{i-1}, x_{i-2}) (odd seeds: op(op'(x_{i-1}, x_{i-2}), x_{i-3})) -- */

static void build_residual(gen *g) {
    bool three = g->rng & 1;
    ot_instr *x[3];
    x[0] = param(g, g->v);
    x[1] = param(g, g->v);
    x[2] = ot_build_unary(g->c, OT_OP_TANH, ot_build_binary(g->c, OT_OP_ADD, x[0], x[1]));
    for (int64_t i = 0; count(g) < g->n - 1 && !ot_module_status(g->m); i++) {
        ot_instr *y = ot_build_binary(g->c, any_binary(g), x[2], x[1]);
        if (three) y = ot_build_binary(g->c, any_binary(g), y, x[0]);
        /* a bounded op every few steps keeps the values finite, as a normalization would */
        if (i % 6 == 5) y = ot_build_unary(g->c, any_bounded(g), y);
        x[0] = x[1];
        x[1] = x[2];
        x[2] = y;
    }
    ot_computation_set_root(g->c, x[2]);
}

/* ---- braid: K chains, each step reading its own chain and the next one's ---------------- */

static void build_braid(gen *g) {
    int k = 2 + (int)pick(g, 3);
    ot_instr *cur[4], *prev[4], *nxt[4];
    for (int j = 0; j < k; j++) cur[j] = prev[j] = param(g, g->v);
    for (int64_t i = 0; count(g) < g->n - 1 && !ot_module_status(g->m); i++) {
        for (int j = 0; j < k; j++) {
            /* mostly the neighbour's current value, sometimes its value one step back */
            ot_instr *other = pick(g, 4) ? cur[(j + 1) % k] : prev[(j + 1) % k];
            ot_instr *y = ot_build_binary(g->c, any_binary(g), cur[j], other);
            if (i % 4 == 3) y = ot_build_unary(g->c, any_bounded(g), y);
            nxt[j] = y;
        }
        for (int j = 0; j < k; j++) {
            prev[j] = cur[j];
            cur[j] = nxt[j];
        }
    }
    for (int j = 0; j < k; j++) push(g, cur[j]);
    set_root_list(g);
}

/* A balanced add tree over the list (pairs of neighbours, level by level, in place); the list
 * is left empty. */
static ot_instr *add_tree(gen *g) {
    while (g->nlist > 1) {
        int64_t w = 0;
        for (int64_t i = 0; i + 1 < g->nlist; i += 2)
            g->list[w++] = ot_build_binary(g->c, OT_OP_ADD, g->list[i], g->list[i + 1]);
        if (g->nlist % 2) g->list[w++] = g->list[g->nlist - 1];
        g->nlist = w;
    }
    ot_instr *r = g->nlist ? g->list[0] : NULL;
    g->nlist = 0;
    return r;
}

/* ---- fanout: one expensive value read by thousands, half of them reduced on their own ---- */

static void build_fanout(gen *g) {
    ot_instr *p[4];
    ot_instr *x = param(g, g->v);
    for (int j = 0; j < 4; j++) p[j] = param(g, g->v);
    ot_instr *v = ot_build_unary(g->c, OT_OP_TANH, x); /* never duplicated into its readers */
    /* about 2.5 instructions per reader: the reader, half a reduce, and the two add trees */
    int64_t readers = (g->n - count(g)) * 2 / 5;
    if (readers < 2) readers = 2;
    ot_instr **reds = ot_malloc((size_t)readers * sizeof *reds);
    if (!reds) {
        g->oom = true;
        return;
    }
    int64_t nred = 0;
    for (int64_t k = 0; k < readers; k++) {
        ot_instr *u = ot_build_binary(g->c, any_binary(g), v, p[k % 4]);
        if (k % 2)
            reds[nred++] = ot_build_reduce(g->c, &u, &g->zero, 1, (int64_t[]){0}, 1, g->sum);
        else
            push(g, u);
    }
    ot_instr *vec = add_tree(g);
    for (int64_t k = 0; k < nred; k++) push(g, reds[k]);
    ot_free(reds);
    ot_instr *sc = add_tree(g);
    push(g, vec);
    push(g, sc);
    set_root_list(g);
}

/* ---- fanin: thousands of leaves into one concatenate and one add tree -------------------- */

static void build_fanin(gen *g) {
    ot_instr *p[8];
    for (int j = 0; j < 8; j++) p[j] = param(g, g->v);
    int64_t leaves = (g->n - count(g)) / 4; /* a leaf is 3 instructions, plus its add above */
    if (leaves < 2) leaves = 2;
    if (leaves > 0x7fffffff) leaves = 0x7fffffff;
    for (int64_t k = 0; k < leaves; k++) {
        ot_instr *c = splat(g, g->c, p[0], (double)(k + 1) / 1024.0);
        push(g, ot_build_binary(g->c, any_binary(g), p[k % 8], c));
    }
    /* one op with `leaves` operands (copied: the add tree consumes the list) */
    ot_instr **ops = ot_malloc((size_t)leaves * sizeof *ops);
    if (!ops) {
        g->oom = true;
        return;
    }
    memcpy(ops, g->list, (size_t)leaves * sizeof *ops);
    ot_instr *cat = ot_build_concatenate(g->c, ops, (int)leaves, 0);
    ot_free(ops);
    ot_instr *tree = add_tree(g);
    push(g, ot_build_reduce(g->c, &cat, &g->zero, 1, (int64_t[]){0}, 1, g->sum));
    push(g, tree);
    set_root_list(g);
}

/* ---- nested: calls, conditionals and while loops nested about sqrt(N / 10) deep ---------- */

/* One nest of `depth` levels, built from the innermost level out (a loop, no recursion): level
 * k's computation applies two ops, hands its value to level k + 1 through a call, a
 * conditional (level k + 1 or a one-op branch, chosen by the sign of a sum) or a while loop
 * (trip count 2 at a few outer levels, else 1: the work stays bounded however deep), then
 * applies two more. */
static ot_computation *build_nest(gen *g, int depth, int64_t nest) {
    ot_computation *inner = NULL;
    char nm[64];
    for (int k = depth - 1; k >= 0; k--) {
        snprintf(nm, sizeof nm, "n%lld_l%d", (long long)nest, k);
        ot_computation *c = ot_module_add_computation(g->m, nm);
        ot_instr *x = ot_build_parameter(c, 0, g->v, "x");
        ot_instr *y = ot_build_binary(c, any_binary(g), ot_build_unary(c, any_bounded(g), x), x);
        if (inner) {
            int kind = k % 3;
            if (kind == 0) {
                y = ot_build_call(c, inner, &y, 1);
            } else if (kind == 1) {
                snprintf(nm, sizeof nm, "n%lld_l%d_else", (long long)nest, k);
                ot_computation *el = ot_module_add_computation(g->m, nm);
                ot_instr *ex = ot_build_parameter(el, 0, g->v, "x");
                ot_computation_set_root(el, ot_build_unary(el, any_bounded(g), ex));
                ot_instr *z = ot_build_constant_scalar(c, OT_F32, 0);
                ot_instr *s = ot_build_reduce(c, &y, &z, 1, (int64_t[]){0}, 1, g->sum);
                ot_instr *pr = ot_build_compare(c, s, z, OT_CMP_GT, OT_CMP_TYPE_DEFAULT);
                ot_computation *br[2] = {inner, el};
                ot_instr *args[2] = {y, y};
                y = ot_build_conditional(c, pr, br, args, 2);
            } else {
                /* the loop state (s32 counter, f32[16] value), built as a tuple instruction */
                ot_instr *i0 = ot_build_constant_scalar(c, OT_S32, 0);
                ot_instr *init = ot_build_tuple(c, (ot_instr *[]){i0, y}, 2);
                snprintf(nm, sizeof nm, "n%lld_l%d_cond", (long long)nest, k);
                ot_computation *cond = ot_module_add_computation(g->m, nm);
                ot_instr *cs = ot_build_parameter_ir(cond, 0, &init->shape, "s");
                ot_instr *ci = ot_build_get_tuple_element(cond, cs, 0);
                int trips = k < 18 && k % 6 == 2 ? 2 : 1;
                ot_instr *lim = ot_build_constant_scalar(cond, OT_S32, trips);
                ot_computation_set_root(
                    cond, ot_build_compare(cond, ci, lim, OT_CMP_LT, OT_CMP_TYPE_DEFAULT));
                snprintf(nm, sizeof nm, "n%lld_l%d_body", (long long)nest, k);
                ot_computation *body = ot_module_add_computation(g->m, nm);
                ot_instr *bs = ot_build_parameter_ir(body, 0, &init->shape, "s");
                ot_instr *bi = ot_build_get_tuple_element(body, bs, 0);
                ot_instr *bx = ot_build_get_tuple_element(body, bs, 1);
                ot_instr *one = ot_build_constant_scalar(body, OT_S32, 1);
                ot_instr *nx = ot_build_call(body, inner, &bx, 1);
                ot_instr *ni = ot_build_binary(body, OT_OP_ADD, bi, one);
                ot_computation_set_root(body, ot_build_tuple(body, (ot_instr *[]){ni, nx}, 2));
                ot_instr *w = ot_build_while(c, cond, body, init);
                y = ot_build_get_tuple_element(c, w, 1);
            }
        }
        y = ot_build_binary(c, any_binary(g), y, x);
        y = ot_build_unary(c, any_bounded(g), y);
        ot_computation_set_root(c, y);
        inner = c;
        if (ot_module_status(g->m)) break;
    }
    return inner;
}

static void build_nested(gen *g) {
    int64_t d = 4;
    while ((d + 1) * (d + 1) * 10 <= g->n) d++;
    ot_instr *x = param(g, g->v);
    for (int64_t nest = 0; count(g) < g->n - 1 && !ot_module_status(g->m); nest++) {
        int64_t left = (g->n - count(g)) / 10;
        int depth = (int)(left < d ? (left < 2 ? 2 : left) : d);
        ot_computation *outer = build_nest(g, depth, nest);
        x = ot_build_call(g->c, outer, &x, 1);
        push(g, x);
    }
    set_root_list(g);
}

/* ---- bcast_reduce: reductions (rows, columns, all; sums and maxima) broadcast back ------- */

static void build_bcast_reduce(gen *g) {
    ot_instr *x = param(g, g->mat);
    ot_shape row;
    ot_shape_make(&row, OT_F32, 1, (int64_t[]){16});
    for (int64_t i = 0; count(g) < g->n - 2 && !ot_module_status(g->m); i++) {
        int kind = (int)pick(g, 3);
        bool mx = pick(g, 4) == 0;
        ot_instr *init = mx ? g->ninf : g->zero;
        ot_computation *red = mx ? g->max : g->sum;
        ot_instr *r, *b;
        if (kind == 0) { /* rows: reduce dim 1, broadcast along it */
            r = ot_build_reduce(g->c, &x, &init, 1, (int64_t[]){1}, 1, red);
            b = ot_build_broadcast(g->c, r, g->mat, (int64_t[]){0}, 1);
        } else if (kind == 1) { /* columns */
            r = ot_build_reduce(g->c, &x, &init, 1, (int64_t[]){0}, 1, red);
            b = ot_build_broadcast(g->c, r, g->mat, (int64_t[]){1}, 1);
        } else { /* everything to a scalar */
            r = ot_build_reduce(g->c, &x, &init, 1, (int64_t[]){0, 1}, 2, red);
            b = ot_build_broadcast(g->c, r, g->mat, NULL, 0);
        }
        x = ot_build_binary(g->c, pick(g, 2) ? OT_OP_SUBTRACT : OT_OP_MULTIPLY, x, b);
        if (i % 2) x = ot_build_unary(g->c, any_bounded(g), x);
        if (i % 64 == 63) push(g, r); /* a side output now and then */
    }
    push(g, x);
    set_root_list(g);
}

/* ---- islands: thousands of small independent clusters, each an output ------------------ */

static void build_islands(gen *g) {
    ot_instr *p[4];
    for (int j = 0; j < 4; j++) p[j] = param(g, g->v);
    for (int64_t k = 0; count(g) < g->n - 8 && !ot_module_status(g->m); k++) {
        ot_instr *a = ot_build_binary(g->c, any_binary(g), p[k % 4],
                                      splat(g, g->c, p[0], (double)(k % 4093 + 1) / 512.0));
        ot_instr *b = ot_build_unary(g->c, any_bounded(g), a);
        ot_instr *c = ot_build_binary(g->c, any_binary(g), b, p[(k + 1) % 4]);
        if (k % 2)
            push(g, ot_build_reduce(g->c, &c, &g->zero, 1, (int64_t[]){0}, 1, g->sum));
        else
            push(g, c);
    }
    set_root_list(g);
}

/* ---- wide_tuple: a chain whose every value is an element of the root tuple (N/2 wide) ---- */

static void build_wide_tuple(gen *g) {
    ot_instr *p[3];
    for (int j = 0; j < 3; j++) p[j] = param(g, g->v);
    ot_instr *x = p[0];
    for (int64_t k = 0; count(g) < g->n - 1 && !ot_module_status(g->m); k++) {
        x = ot_build_binary(g->c, any_binary(g), x, p[1 + k % 2]);
        if (k % 4 == 3) x = ot_build_unary(g->c, any_bounded(g), x);
        push(g, x);
    }
    set_root_list(g);
}

/* ---- many_params: N/2 parameters (vectors, some scalars, a few unread) into an add tree -- */

static void build_many_params(gen *g) {
    /* a parameter and its add (an eighth of them also a broadcast) */
    int64_t np = (g->n - count(g)) * 8 / 17;
    if (np < 2) np = 2;
    while (g->nparams < np && !ot_module_status(g->m)) {
        int64_t k = g->nparams;
        if (k % 8 == 7) {
            ot_instr *s = param(g, ot_shape_scalar(OT_F32));
            push(g, ot_build_broadcast(g->c, s, g->v, NULL, 0));
        } else if (k % 16 == 5) {
            param(g, g->v); /* unread: still a parameter of the executable */
        } else {
            push(g, param(g, g->v));
        }
    }
    ot_computation_set_root(g->c, add_tree(g));
}

/* ---- dot_sandwich: elementwise stacks between dots and convolutions --------------------- */

static void build_dot_sandwich(gen *g) {
    ot_instr *x = param(g, g->mat), *w[4];
    for (int j = 0; j < 4; j++) w[j] = param(g, g->mat);
    ot_shape ks, img;
    ot_shape_make(&ks, OT_F32, 4, (int64_t[]){3, 3, 1, 1});
    ot_shape_make(&img, OT_F32, 4, (int64_t[]){1, 16, 16, 1});
    ot_instr *kern = param(g, ks);
    ot_instr *scale = param(g, ot_shape_scalar(OT_F32));
    ot_dot_dims dn = {0};
    dn.ncontract = 1;
    dn.lhs_contract[0] = 1;
    dn.rhs_contract[0] = 0;
    ot_window win = {0};
    win.rank = 2;
    for (int d = 0; d < 2; d++)
        win.dims[d] = (ot_window_dim){3, 1, 1, 1, 1, 1, false}; /* 3x3, stride 1, "same" */
    ot_conv_dims cd = {0};                                      /* b01f_01io->b01f */
    cd.nspatial = 2;
    cd.input_batch = 0, cd.input_feature = 3, cd.input_spatial[0] = 1, cd.input_spatial[1] = 2;
    cd.kernel_input_feature = 2, cd.kernel_output_feature = 3;
    cd.kernel_spatial[0] = 0, cd.kernel_spatial[1] = 1;
    cd.output_batch = 0, cd.output_feature = 3, cd.output_spatial[0] = 1;
    cd.output_spatial[1] = 2;
    for (int64_t i = 0; count(g) < g->n - 1 && !ot_module_status(g->m); i++) {
        int64_t stack = 3 + pick(g, 6);
        for (int64_t s = 0; s < stack; s++) {
            if (s == 0)
                x = ot_build_binary(g->c, OT_OP_MULTIPLY, x,
                                    ot_build_broadcast(g->c, scale, g->mat, NULL, 0));
            else if (s % 2)
                x = ot_build_binary(g->c, any_binary(g), x, w[(i + s) % 4]);
            else
                x = ot_build_unary(g->c, any_bounded(g), x);
        }
        x = ot_build_unary(g->c, OT_OP_TANH, x);
        if (i % 4 == 3) {
            ot_instr *im = ot_build_reshape(g->c, x, img);
            im = ot_build_convolution(g->c, im, kern, &win, &cd, 1, 1);
            x = ot_build_reshape(g->c, im, g->mat);
        } else {
            x = ot_build_dot(g->c, x, w[i % 4], &dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT);
        }
    }
    ot_computation_set_root(g->c, x);
}

/* ---- random: a seeded random DAG ------------------------------------------------------ */

enum { RV, RM, NCLASS }; /* value classes: f32[16], f32[8,16] */

typedef struct rvals {
    ot_instr **v;
    int64_t n, cap;
} rvals;

static void rv_push(gen *g, rvals *r, ot_instr *x) {
    if (!x) return;
    if (r->n == r->cap) {
        int64_t cap = r->cap ? r->cap * 2 : 256;
        ot_instr **nv = ot_realloc(r->v, (size_t)cap * sizeof *nv);
        if (!nv) {
            g->oom = true;
            return;
        }
        r->v = nv;
        r->cap = cap;
    }
    r->v[r->n++] = x;
}

/* An operand: mostly one of the last 8 values of the class (chains), else any earlier one
 * (long edges, values with many users). */
static ot_instr *rv_pick(gen *g, const rvals *r) {
    if (pick(g, 10) < 7) {
        int64_t w = r->n < 8 ? r->n : 8;
        return r->v[r->n - 1 - pick(g, w)];
    }
    return r->v[pick(g, r->n)];
}

static void build_random(gen *g) {
    static const ot_opcode unary[] = {OT_OP_NEGATE, OT_OP_ABS,   OT_OP_EXP,   OT_OP_LOG,
                                      OT_OP_SIN,    OT_OP_COS,   OT_OP_TANH,  OT_OP_LOGISTIC,
                                      OT_OP_SQRT,   OT_OP_EXPM1, OT_OP_LOG1P, OT_OP_ERF,
                                      OT_OP_FLOOR,  OT_OP_RSQRT, OT_OP_CBRT,  OT_OP_SIGN};
    static const ot_opcode binary[] = {OT_OP_ADD,     OT_OP_SUBTRACT, OT_OP_MULTIPLY,
                                       OT_OP_MAXIMUM, OT_OP_MINIMUM,  OT_OP_DIVIDE,
                                       OT_OP_POWER,   OT_OP_ATAN2,    OT_OP_REMAINDER};
    static const ot_dtype rt[] = {OT_F64, OT_BF16, OT_F16};
    ot_shape sh[NCLASS];
    sh[RV] = g->v;
    ot_shape_make(&sh[RM], OT_F32, 2, (int64_t[]){8, 16});
    ot_shape s4x16;
    ot_shape_make(&s4x16, OT_F32, 2, (int64_t[]){4, 16});
    rvals cls[NCLASS] = {{0}};
    rv_push(g, &cls[RV], param(g, sh[RV]));
    rv_push(g, &cls[RV], param(g, sh[RV]));
    rv_push(g, &cls[RM], param(g, sh[RM]));
    ot_computation *c = g->c;
    while (count(g) < g->n - 1 && !ot_module_status(g->m) && !g->oom) {
        int k = (int)pick(g, NCLASS);
        rvals *r = &cls[k];
        int64_t what = pick(g, 100);
        ot_instr *y = NULL;
        if (what < 22) { /* unary, transcendental or not */
            y = ot_build_unary(c, unary[pick(g, NELEM(unary))], rv_pick(g, r));
        } else if (what < 52) { /* binary */
            y = ot_build_binary(c, binary[pick(g, NELEM(binary))], rv_pick(g, r), rv_pick(g, r));
        } else if (what < 62) { /* a broadcast of a reduction, or a change of class */
            ot_instr *x = rv_pick(g, r);
            bool mx = pick(g, 3) == 0;
            ot_instr *init = mx ? g->ninf : g->zero;
            ot_computation *red = mx ? g->max : g->sum;
            int64_t how = pick(g, 3);
            if (k == RV && how == 0) { /* to a scalar and back */
                y = ot_build_reduce(c, &x, &init, 1, (int64_t[]){0}, 1, red);
                y = ot_build_broadcast(c, y, sh[RV], NULL, 0);
            } else if (k == RV) { /* into the other class */
                y = ot_build_broadcast(c, x, sh[RM], (int64_t[]){1}, 1);
                k = RM;
            } else if (how == 0) { /* rows back onto the matrix */
                y = ot_build_reduce(c, &x, &init, 1, (int64_t[]){1}, 1, red);
                y = ot_build_broadcast(c, y, sh[RM], (int64_t[]){0}, 1);
            } else { /* columns: into the other class */
                y = ot_build_reduce(c, &x, &init, 1, (int64_t[]){0}, 1, red);
                k = RV;
            }
        } else if (what < 68) { /* three operands: clamp, or select on a comparison */
            ot_instr *a = rv_pick(g, r), *b = rv_pick(g, r), *d = rv_pick(g, r);
            if (pick(g, 2))
                y = ot_build_clamp(c, a, b, d);
            else
                y = ot_build_select(
                    c, ot_build_compare(c, a, b, (ot_cmp_dir)pick(g, 6), OT_CMP_TYPE_DEFAULT), a,
                    d);
        } else if (what < 74) { /* four operands */
            ot_instr *a = rv_pick(g, r), *b = rv_pick(g, r), *d = rv_pick(g, r), *e = rv_pick(g, r);
            if (k == RV && pick(g, 2)) { /* concatenate, then reduce the four back to one */
                ot_instr *cat = ot_build_concatenate(c, (ot_instr *[]){a, b, d, e}, 4, 0);
                ot_instr *re = ot_build_reshape(c, cat, s4x16);
                y = ot_build_reduce(c, &re, &g->zero, 1, (int64_t[]){0}, 1, g->sum);
            } else {
                y = ot_build_select(
                    c, ot_build_compare(c, a, b, (ot_cmp_dir)pick(g, 6), OT_CMP_TYPE_DEFAULT), d,
                    e);
            }
        } else if (what < 80) { /* a round trip through another type */
            ot_dtype t = rt[pick(g, NELEM(rt))];
            y = ot_build_convert(c, ot_build_convert(c, rv_pick(g, r), t), OT_F32);
        } else if (what < 86) { /* a constant operand */
            ot_instr *x = rv_pick(g, r);
            y = ot_build_binary(c, binary[pick(g, 5)], x,
                                splat(g, c, x, (double)(pick(g, 2001) - 1000) / 256.0));
        } else if (what < 90) { /* an unfused op between clusters */
            ot_instr *x = rv_pick(g, r);
            if (k == RM) {
                ot_instr *t = ot_build_transpose(c, x, (int64_t[]){1, 0}, 2);
                y = ot_build_reshape(c, t, sh[RM]);
            } else {
                y = ot_build_reverse(c, x, (int64_t[]){0}, 1);
            }
        } else { /* iota-based mixing */
            ot_instr *x = rv_pick(g, r);
            y = ot_build_binary(c, OT_OP_ADD, x, ot_build_iota(c, x->shape.array, 0));
        }
        rv_push(g, &cls[k], y);
    }
    /* outputs: every value nobody reads */
    for (int k = 0; k < NCLASS; k++)
        for (int64_t i = 0; i < cls[k].n; i++)
            if (cls[k].v[i]->nusers == 0 && cls[k].v[i]->opcode != OT_OP_PARAMETER)
                push(g, cls[k].v[i]);
    if (g->nlist == 0) push(g, cls[RV].v[cls[RV].n - 1]);
    set_root_list(g);
    for (int k = 0; k < NCLASS; k++) ot_free(cls[k].v);
}

/* ---- random_ops: every dtype, rank 0-5, size-0 and size-1 dims, most ops the IR has ------- */

/* Values of any shape and dtype (f32 parameters, the rest derived); each step draws an op and
 * operands, bringing a second operand to the first's shape and dtype (convert, reshape, or a
 * full reduction broadcast back). At most RO_MAX_NUMEL elements per value. */
enum { RO_MAX_NUMEL = 256 };

typedef struct ro_gen {
    gen *g;
    rvals all;
    ot_computation *red[OT_DTYPE_COUNT][3]; /* add (or for pred), max, min reducers per dtype */
    ot_computation *lt[OT_DTYPE_COUNT];     /* sort comparators */
    int ncomp;
} ro_gen;

static const ot_dtype k_ro_dt[] = {OT_F32, OT_F64, OT_BF16, OT_F16,  OT_S8, OT_U8,
                                   OT_S32, OT_U32, OT_S64,  OT_PRED, OT_C64};

static bool ro_float(ot_dtype t) {
    return ot_dtype_is_float(t);
}
static bool ro_int(ot_dtype t) {
    return ot_dtype_is_integer(t);
}

static ot_computation *ro_reducer(ro_gen *r, ot_dtype t, int which) {
    if (t == OT_C64 && which) which = 0; /* complex: add only */
    if (r->red[t][which]) return r->red[t][which];
    static const char *const nm[] = {"add", "max", "min"};
    char name[48];
    snprintf(name, sizeof name, "r_%s_%s", ot_dtype_name(t), nm[which]);
    ot_computation *c = ot_module_add_computation(r->g->m, name);
    ot_instr *a = ot_build_parameter(c, 0, ot_shape_scalar(t), "a");
    ot_instr *b = ot_build_parameter(c, 1, ot_shape_scalar(t), "b");
    ot_opcode op = which == 1 ? OT_OP_MAXIMUM : which == 2 ? OT_OP_MINIMUM : OT_OP_ADD;
    if (t == OT_PRED) op = which == 2 ? OT_OP_AND : OT_OP_OR;
    ot_computation_set_root(c, ot_build_binary(c, op, a, b));
    return r->red[t][which] = c;
}

static ot_instr *ro_init(ro_gen *r, ot_dtype t, int which) {
    ot_computation *c = r->g->c;
    if (t == OT_PRED) return ot_build_constant_scalar(c, t, which == 2 ? 1 : 0);
    if (which == 0 || t == OT_C64) return ot_build_constant_scalar(c, t, 0);
    if (ro_float(t)) return ot_build_constant_scalar(c, t, which == 1 ? -INFINITY : INFINITY);
    /* integers: the type's lowest (max) or highest (min) value through a convert of an f64 */
    double lo = 0, hi = 0;
    switch (t) {
    case OT_S8: lo = -128, hi = 127; break;
    case OT_U8: lo = 0, hi = 255; break;
    case OT_S32: lo = -2147483648.0, hi = 2147483647.0; break;
    case OT_U32: lo = 0, hi = 4294967295.0; break;
    default: lo = -9.2e18, hi = 9.2e18; break;
    }
    return ot_build_constant_scalar(c, t, which == 1 ? lo : hi);
}

static ot_computation *ro_less(ro_gen *r, ot_dtype t) {
    if (r->lt[t]) return r->lt[t];
    char name[48];
    snprintf(name, sizeof name, "lt_%s", ot_dtype_name(t));
    ot_computation *c = ot_module_add_computation(r->g->m, name);
    ot_instr *a = ot_build_parameter(c, 0, ot_shape_scalar(t), "a");
    ot_instr *b = ot_build_parameter(c, 1, ot_shape_scalar(t), "b");
    ot_computation_set_root(
        c, ot_build_compare(c, a, b, OT_CMP_LT,
                            ro_float(t) ? OT_CMP_TYPE_TOTALORDER : OT_CMP_TYPE_DEFAULT));
    return r->lt[t] = c;
}

/* A random shape of rank 0-5 with at most RO_MAX_NUMEL elements; size-0 dims sometimes. */
static ot_shape ro_shape(gen *g, ot_dtype t) {
    static const int64_t sizes[] = {1, 1, 2, 3, 4, 5, 7, 8, 16};
    int rank = (int)pick(g, 6);
    int64_t d[OT_MAX_RANK], n = 1;
    for (int k = 0; k < rank; k++) {
        d[k] = pick(g, 40) == 0 ? 0 : sizes[pick(g, NELEM(sizes))];
        if (d[k] && n * d[k] > RO_MAX_NUMEL) d[k] = 1;
        n *= d[k] ? d[k] : 1;
    }
    ot_shape s;
    ot_shape_make(&s, t, rank, d);
    return s;
}

static ot_instr *ro_pick(ro_gen *r) {
    return rv_pick(r->g, &r->all);
}

/* The full reduction of x (add / or), a scalar of x's dtype. */
static ot_instr *ro_total(ro_gen *r, ot_instr *x) {
    if (!x) return NULL; /* a failed build: the module holds the error */
    ot_dtype t = x->shape.array.dtype;
    int64_t dims[OT_MAX_RANK];
    for (int k = 0; k < x->shape.array.rank; k++) dims[k] = k;
    if (x->shape.array.rank == 0) return x;
    ot_instr *init = ro_init(r, t, 0);
    return ot_build_reduce(r->g->c, &x, &init, 1, dims, x->shape.array.rank, ro_reducer(r, t, 0));
}

/* x as dtype t (x itself when it is one). */
static ot_instr *ro_as(ro_gen *r, ot_instr *x, ot_dtype t) {
    if (!x) return NULL;
    if (x->shape.array.dtype == t) return x;
    if (x->shape.array.dtype == OT_C64 && t != OT_C64) /* complex to real: its real part */
        x = ot_build(r->g->c, OT_OP_REAL, &x, 1, NULL, NULL, 0, NULL, NULL);
    if (!x) return NULL;
    return x->shape.array.dtype == t ? x : ot_build_convert(r->g->c, x, t);
}

/* y brought to x's shape and dtype. */
static ot_instr *ro_fit(ro_gen *r, ot_instr *y, const ot_instr *x) {
    if (!x || !y) return NULL;
    const ot_shape *s = &x->shape.array;
    y = ro_as(r, y, s->dtype);
    if (!y) return NULL;
    if (ot_shape_equal(&y->shape.array, s)) return y;
    if (ot_shape_numel_unchecked(&y->shape.array) == ot_shape_numel_unchecked(s))
        return ot_build_reshape(r->g->c, y, *s);
    return ot_build_broadcast(r->g->c, ro_total(r, y), *s, NULL, 0);
}

static ot_instr *ro_scalar_index(ro_gen *r) {
    /* an s32 from the data (mostly small, sometimes negative or past the end) */
    ot_instr *v = ro_as(r, ro_total(r, ro_pick(r)), OT_S32);
    ot_instr *m = ot_build_constant_scalar(r->g->c, OT_S32, 1 + (double)pick(r->g, 9));
    return ot_build_binary(r->g->c, OT_OP_REMAINDER, v, m);
}

static ot_instr *ro_step(ro_gen *r) {
    gen *g = r->g;
    ot_computation *c = g->c;
    ot_instr *x = ro_pick(r);
    const ot_shape *s = &x->shape.array;
    ot_dtype t = s->dtype;
    bool fl = ro_float(t), in = ro_int(t), pr = t == OT_PRED, cx = t == OT_C64;
    int64_t what = pick(g, 100);
    if (what < 14) { /* unary */
        static const ot_opcode fu[] = {OT_OP_NEGATE,
                                       OT_OP_ABS,
                                       OT_OP_EXP,
                                       OT_OP_LOG,
                                       OT_OP_SIN,
                                       OT_OP_COS,
                                       OT_OP_TANH,
                                       OT_OP_SQRT,
                                       OT_OP_FLOOR,
                                       OT_OP_CEIL,
                                       OT_OP_SIGN,
                                       OT_OP_LOGISTIC,
                                       OT_OP_EXPM1,
                                       OT_OP_LOG1P,
                                       OT_OP_RSQRT,
                                       OT_OP_CBRT,
                                       OT_OP_ERF,
                                       OT_OP_IS_FINITE,
                                       OT_OP_ROUND_NEAREST_EVEN,
                                       OT_OP_ROUND_NEAREST_AFZ};
        static const ot_opcode iu[] = {OT_OP_NEGATE, OT_OP_ABS, OT_OP_NOT,
                                       OT_OP_POPCNT, OT_OP_CLZ, OT_OP_SIGN};
        static const ot_opcode cu[] = {OT_OP_NEGATE, OT_OP_EXP, OT_OP_ABS, OT_OP_REAL, OT_OP_IMAG};
        if (fl) return ot_build_unary(c, fu[pick(g, NELEM(fu))], x);
        if (in) return ot_build_unary(c, iu[pick(g, NELEM(iu))], x);
        if (cx) return ot_build(c, cu[pick(g, NELEM(cu))], &x, 1, NULL, NULL, 0, NULL, NULL);
        return ot_build_unary(c, OT_OP_NOT, x);
    }
    if (what < 36) { /* binary */
        static const ot_opcode fb[] = {OT_OP_ADD,    OT_OP_SUBTRACT, OT_OP_MULTIPLY,
                                       OT_OP_DIVIDE, OT_OP_MAXIMUM,  OT_OP_MINIMUM,
                                       OT_OP_POWER,  OT_OP_ATAN2,    OT_OP_REMAINDER};
        static const ot_opcode ib[] = {OT_OP_ADD,
                                       OT_OP_SUBTRACT,
                                       OT_OP_MULTIPLY,
                                       OT_OP_DIVIDE,
                                       OT_OP_REMAINDER,
                                       OT_OP_MAXIMUM,
                                       OT_OP_MINIMUM,
                                       OT_OP_AND,
                                       OT_OP_OR,
                                       OT_OP_XOR,
                                       OT_OP_SHIFT_LEFT,
                                       OT_OP_SHIFT_RIGHT_ARITHMETIC,
                                       OT_OP_SHIFT_RIGHT_LOGICAL,
                                       OT_OP_POWER};
        static const ot_opcode pb[] = {OT_OP_AND, OT_OP_OR, OT_OP_XOR};
        static const ot_opcode cb[] = {OT_OP_ADD, OT_OP_SUBTRACT, OT_OP_MULTIPLY, OT_OP_DIVIDE};
        ot_instr *y = ro_fit(r, ro_pick(r), x);
        ot_opcode op = fl   ? fb[pick(g, NELEM(fb))]
                       : in ? ib[pick(g, NELEM(ib))]
                       : pr ? pb[pick(g, NELEM(pb))]
                            : cb[pick(g, NELEM(cb))];
        return pick(g, 2) ? ot_build_binary(c, op, x, y) : ot_build_binary(c, op, y, x);
    }
    if (what < 42) { /* select on a comparison, or clamp */
        ot_instr *a = ro_fit(r, ro_pick(r), x), *b = ro_fit(r, ro_pick(r), x);
        if (!cx && !pr && pick(g, 3) == 0) return ot_build_clamp(c, a, x, b);
        int dirs = cx ? 2 : 6; /* complex: EQ, NE */
        ot_instr *p =
            ot_build_compare(c, a, b, (ot_cmp_dir)pick(g, dirs),
                             fl && pick(g, 2) ? OT_CMP_TYPE_TOTALORDER : OT_CMP_TYPE_DEFAULT);
        return ot_build_select(c, p, x, ro_fit(r, ro_pick(r), x));
    }
    if (what < 50) /* convert to any dtype */
        return ro_as(r, x, k_ro_dt[pick(g, NELEM(k_ro_dt))]);
    if (what < 53) { /* bitcast-convert between types of one width */
        ot_dtype to = t;
        switch (t) {
        case OT_F32: to = pick(g, 2) ? OT_S32 : OT_U32; break;
        case OT_S32:
        case OT_U32: to = OT_F32; break;
        case OT_F64: to = OT_S64; break;
        case OT_S64: to = OT_F64; break;
        case OT_S8: to = OT_U8; break;
        case OT_U8: to = OT_S8; break;
        case OT_BF16: to = OT_F16; break;
        case OT_F16: to = OT_BF16; break;
        default: break;
        }
        return to == t ? ot_build_copy(c, x) : ot_build_bitcast_convert(c, x, to);
    }
    if (what < 57) { /* reshape to another factorization (size-1 dims included) */
        int64_t n = ot_shape_numel_unchecked(s);
        for (int tries = 0; tries < 8; tries++) {
            ot_shape to = ro_shape(g, t);
            if (ot_shape_numel_unchecked(&to) == n) return ot_build_reshape(c, x, to);
        }
        int64_t d[3] = {1, n, 1};
        ot_shape to;
        ot_shape_make(&to, t, 3, d);
        return ot_build_reshape(c, x, to);
    }
    if (what < 60) { /* transpose */
        int64_t perm[OT_MAX_RANK];
        for (int k = 0; k < s->rank; k++) perm[k] = k;
        for (int k = s->rank - 1; k > 0; k--) {
            int64_t j = pick(g, k + 1), tmp = perm[k];
            perm[k] = perm[j];
            perm[j] = tmp;
        }
        return ot_build_transpose(c, x, perm, s->rank);
    }
    if (what < 63) { /* broadcast into one more dim */
        if (s->rank >= 5) return ot_build_reverse(c, x, (int64_t[]){0}, 1);
        int64_t at = pick(g, s->rank + 1), size = 1 + pick(g, 3), d[OT_MAX_RANK], map[OT_MAX_RANK];
        if (ot_shape_numel_unchecked(s) * size > RO_MAX_NUMEL) size = 1;
        for (int k = 0, o = 0; k <= s->rank; k++) {
            if (k == at) {
                d[k] = size;
                continue;
            }
            d[k] = s->dims[o];
            map[o++] = k;
        }
        ot_shape to;
        ot_shape_make(&to, t, s->rank + 1, d);
        return ot_build_broadcast(c, x, to, map, s->rank);
    }
    if (what < 67) { /* slice, strided, maybe to size 0 */
        int64_t st[OT_MAX_RANK], li[OT_MAX_RANK], sd[OT_MAX_RANK];
        for (int k = 0; k < s->rank; k++) {
            st[k] = pick(g, s->dims[k] + 1);
            li[k] = st[k] + pick(g, s->dims[k] - st[k] + 1);
            sd[k] = 1 + pick(g, 3);
        }
        return ot_build_slice(c, x, st, li, sd);
    }
    if (what < 70) { /* pad, edges negative too, interior */
        ot_pad_dim pd[OT_MAX_RANK];
        int64_t n = 1;
        for (int k = 0; k < s->rank; k++) {
            pd[k].interior = s->dims[k] > 1 ? pick(g, 3) : 0;
            int64_t span = s->dims[k] + (s->dims[k] ? (s->dims[k] - 1) * pd[k].interior : 0);
            pd[k].lo = pick(g, 5) - 2;
            pd[k].hi = pick(g, 5) - 2;
            if (span + pd[k].lo + pd[k].hi < 0) pd[k].lo = pd[k].hi = 0;
            if (pd[k].lo < -span) pd[k].lo = -span;
            if (span + pd[k].lo + pd[k].hi < 0) pd[k].hi = -(span + pd[k].lo);
            n *= span + pd[k].lo + pd[k].hi;
        }
        if (n > 4 * RO_MAX_NUMEL) return ot_build_copy(c, x);
        return ot_build_pad(c, x, ro_as(r, ro_total(r, ro_pick(r)), t), pd);
    }
    if (what < 72) { /* reverse */
        int64_t dims[OT_MAX_RANK];
        int n = 0;
        for (int k = 0; k < s->rank; k++)
            if (pick(g, 2)) dims[n++] = k;
        return ot_build_reverse(c, x, dims, n);
    }
    if (what < 75 && s->rank > 0) { /* concatenate with a same-shaped value */
        int64_t dim = pick(g, s->rank);
        if (2 * ot_shape_numel_unchecked(s) > 4 * RO_MAX_NUMEL) return ot_build_copy(c, x);
        return ot_build_concatenate(c, (ot_instr *[]){x, ro_fit(r, ro_pick(r), x)}, 2, dim);
    }
    if (what < 80) { /* reduce over some dims */
        int64_t dims[OT_MAX_RANK];
        int n = 0;
        for (int k = 0; k < s->rank; k++)
            if (pick(g, 2)) dims[n++] = k;
        int which = (int)pick(g, 3);
        ot_instr *init = ro_init(r, t, which);
        return ot_build_reduce(c, &x, &init, 1, dims, n, ro_reducer(r, t, which));
    }
    if (what < 83 && s->rank > 0 && !cx) { /* reduce-window */
        ot_window w;
        memset(&w, 0, sizeof w);
        w.rank = s->rank;
        for (int k = 0; k < s->rank; k++) {
            ot_window_dim *d = &w.dims[k];
            d->size = 1 + pick(g, 3);
            d->stride = 1 + pick(g, 2);
            d->pad_lo = pick(g, 2);
            d->pad_hi = pick(g, 3);
            d->window_dilation = 1 + (pick(g, 4) == 0);
            d->base_dilation = 1 + (pick(g, 4) == 0);
            int64_t in_n = s->dims[k] ? (s->dims[k] - 1) * d->base_dilation + 1 : 0;
            int64_t span = (d->size - 1) * d->window_dilation + 1;
            if (in_n + d->pad_lo + d->pad_hi < span) d->pad_hi += span;
        }
        int which = (int)pick(g, 3);
        ot_instr *init = ro_init(r, t, which);
        return ot_build_reduce_window(c, &x, &init, 1, &w, ro_reducer(r, t, which));
    }
    if (what < 85 && s->rank > 0 && !cx && !pr) /* iota mixed in */
        return ot_build_binary(c, OT_OP_ADD, x, ot_build_iota(c, *s, pick(g, s->rank)));
    if (what < 88 && s->rank > 0) { /* dynamic slice or update (starts clamped) */
        ot_instr *idx[OT_MAX_RANK];
        int64_t sz[OT_MAX_RANK];
        for (int k = 0; k < s->rank; k++) {
            idx[k] = ro_scalar_index(r);
            sz[k] = pick(g, s->dims[k] + 1);
        }
        ot_instr *ds = ot_build_dynamic_slice(c, x, idx, sz);
        if (pick(g, 2)) return ds;
        ot_instr *upd = ro_fit(r, ro_pick(r), ds);
        for (int k = 0; k < s->rank; k++) idx[k] = ro_scalar_index(r);
        return ot_build_dynamic_update_slice(c, x, upd, idx);
    }
    if (what < 91 && s->rank > 0 && s->dims[0] > 0) { /* gather or scatter of rows */
        int64_t k = 1 + pick(g, 4), iv[8];
        for (int q = 0; q < k; q++) iv[q] = pick(g, s->dims[0] + 3) - 1;
        int32_t iv32[8];
        for (int q = 0; q < k; q++) iv32[q] = (int32_t)iv[q];
        ot_shape is;
        ot_shape_make(&is, OT_S32, 2, (int64_t[]){k, 1});
        ot_instr *ind = ot_build_constant(c, is, iv32);
        if (pick(g, 2)) {
            ot_gather_dims dn;
            memset(&dn, 0, sizeof dn);
            dn.noffset = s->rank - 1;
            for (int q = 1; q < s->rank; q++) dn.offset_dims[q - 1] = q;
            dn.ncollapsed = 1;
            dn.collapsed_slice_dims[0] = 0;
            dn.nstart_index_map = 1;
            dn.start_index_map[0] = 0;
            dn.index_vector_dim = 1;
            dn.nslice_sizes = s->rank;
            dn.slice_sizes[0] = 1;
            for (int q = 1; q < s->rank; q++) dn.slice_sizes[q] = s->dims[q];
            return ot_build_gather(c, x, ind, &dn);
        }
        int64_t ud[OT_MAX_RANK];
        ud[0] = k;
        for (int q = 1; q < s->rank; q++) ud[q] = s->dims[q];
        ot_shape us;
        ot_shape_make(&us, t, s->rank, ud);
        ot_instr *likeu = ot_build_broadcast(c, ro_init(r, t, 0), us, NULL, 0);
        ot_instr *upd = ro_fit(r, ro_pick(r), likeu);
        ot_scatter_dims dn;
        memset(&dn, 0, sizeof dn);
        dn.nupdate_window = s->rank - 1;
        for (int q = 1; q < s->rank; q++) dn.update_window_dims[q - 1] = q;
        dn.ninserted = 1;
        dn.inserted_window_dims[0] = 0;
        dn.nscatter_to_operand = 1;
        dn.scatter_dims_to_operand_dims[0] = 0;
        dn.index_vector_dim = 1;
        return ot_build_scatter(c, &x, 1, ind, &upd, &dn, ro_reducer(r, t, (int)pick(g, 3)));
    }
    if (what < 93 && s->rank > 0 && !cx && !pr) /* sort along one dim */
        return ot_build_sort(c, &x, 1, pick(g, s->rank), pick(g, 2), ro_less(r, t));
    if (what < 95 && !cx) { /* while: i < k, x = f(x) */
        char nm[32];
        ot_shape i32 = ot_shape_scalar(OT_S32);
        ot_ir_shape st = {0};
        ot_ir_shape leaves[2] = {{0}, {0}};
        leaves[0].kind = leaves[1].kind = OT_IR_ARRAY;
        leaves[0].array = i32;
        leaves[1].array = *s;
        st.kind = OT_IR_TUPLE;
        st.ntuple = 2;
        st.tuple = leaves;
        snprintf(nm, sizeof nm, "wcond%d", r->ncomp);
        ot_computation *cc = ot_module_add_computation(g->m, nm);
        ot_instr *cp = ot_build_parameter_ir(cc, 0, &st, "s");
        ot_computation_set_root(
            cc, ot_build_compare(cc, ot_build_get_tuple_element(cc, cp, 0),
                                 ot_build_constant_scalar(cc, OT_S32, (double)pick(g, 4)),
                                 OT_CMP_LT, OT_CMP_TYPE_DEFAULT));
        snprintf(nm, sizeof nm, "wbody%d", r->ncomp++);
        ot_computation *bc = ot_module_add_computation(g->m, nm);
        ot_instr *bp = ot_build_parameter_ir(bc, 0, &st, "s");
        ot_instr *i0 = ot_build_get_tuple_element(bc, bp, 0);
        ot_instr *v = ot_build_get_tuple_element(bc, bp, 1);
        ot_instr *i1 = ot_build_binary(bc, OT_OP_ADD, i0, ot_build_constant_scalar(bc, OT_S32, 1));
        ot_instr *nv =
            pr ? ot_build_unary(bc, OT_OP_NOT, v)
               : ot_build_binary(bc, pick(g, 2) ? OT_OP_ADD : OT_OP_MULTIPLY, v,
                                 ot_build_broadcast(bc, ot_build_convert(bc, i1, t), *s, NULL, 0));
        ot_computation_set_root(bc, ot_build_tuple(bc, (ot_instr *[]){i1, nv}, 2));
        ot_instr *init =
            ot_build_tuple(c, (ot_instr *[]){ot_build_constant_scalar(c, OT_S32, 0), x}, 2);
        return ot_build_get_tuple_element(c, ot_build_while(c, cc, bc, init), 1);
    }
    if (what < 97 && !cx) { /* conditional on a comparison of two totals */
        char nm[32];
        ot_computation *br[2];
        for (int b = 0; b < 2; b++) {
            snprintf(nm, sizeof nm, "branch%d", r->ncomp++);
            br[b] = ot_module_add_computation(g->m, nm);
            ot_instr *p = ot_build_parameter(br[b], 0, *s, "x");
            ot_computation_set_root(br[b],
                                    b == 0 ? ot_build_unary(br[b], pr ? OT_OP_NOT : OT_OP_NEGATE, p)
                                           : ot_build_copy(br[b], p));
        }
        ot_instr *a = ro_as(r, ro_total(r, ro_pick(r)), OT_F32);
        ot_instr *b = ro_as(r, ro_total(r, ro_pick(r)), OT_F32);
        ot_instr *p = ot_build_compare(c, a, b, OT_CMP_LT, OT_CMP_TYPE_DEFAULT);
        return ot_build_conditional(c, p, br, (ot_instr *[]){x, x}, 2);
    }
    { /* random bits */
        uint64_t sv[2] = {rnd(g), rnd(g)};
        ot_shape ss;
        ot_shape_make(&ss, OT_U64, 1, (int64_t[]){2});
        ot_instr *state = ot_build_constant(c, ss, sv);
        ot_shape bs = ro_shape(g, pick(g, 2) ? OT_U32 : OT_U64);
        ot_instr *rb = ot_build_rng_bit_generator(c, state, bs, (ot_rng_algorithm)(1 + pick(g, 2)));
        return ot_build_get_tuple_element(c, rb, 1);
    }
}

static void build_random_ops(gen *g) {
    ro_gen r;
    memset(&r, 0, sizeof r);
    r.g = g;
    for (int k = 0; k < 3; k++) rv_push(g, &r.all, param(g, ro_shape(g, OT_F32)));
    while (count(g) < g->n - 1 && !ot_module_status(g->m) && !g->oom) {
        ot_instr *y = ro_step(&r);
        if (y && y->shape.kind == OT_IR_ARRAY) rv_push(g, &r.all, y);
    }
    for (int64_t i = 0; i < r.all.n; i++)
        if (r.all.v[i]->nusers == 0 && r.all.v[i]->opcode != OT_OP_PARAMETER) push(g, r.all.v[i]);
    if (g->nlist == 0) push(g, ot_build_copy(g->c, r.all.v[0]));
    set_root_list(g);
    ot_free(r.all.v);
}

/* ---- fori_unrolled: JAX's lowering of an unrolled fori_loop, chained to reach N --------- */

static ot_status build_fori(int64_t n, ot_module **out) {
    ot_hlo_parse_options po = ot_hlo_parse_options_default();
    po.filename = "fori_loop_unrolled_1000.hlo";
    ot_module *m = NULL;
    OT_CHECK(ot_hlo_parse((const char *)ot_fori_loop_hlo, ot_fori_loop_hlo_len, &po, &m));
    int64_t one = ot_module_instr_count(m);
    int64_t copies = (n + one / 2) / one;
    if (copies <= 1) {
        *out = m;
        return OT_OK;
    }
    /* copies of the entry (each with its own 1,000 calls of the shared body) called one after
     * another, (x, y) -> (x, y) */
    ot_computation *body = ot_module_entry(m);
    ot_computation *c = ot_module_add_computation(m, "chain");
    ot_instr *x = ot_build_parameter_ir(c, 0, &body->params[0]->shape, "x");
    ot_instr *y = ot_build_parameter_ir(c, 1, &body->params[1]->shape, "y");
    ot_status s = OT_OK;
    for (int64_t k = 0; k < copies && s == OT_OK; k++) {
        ot_computation *callee = body;
        char suffix[32];
        snprintf(suffix, sizeof suffix, ".copy%lld", (long long)k);
        if (k > 0) s = ot_computation_clone(body, suffix, &callee);
        if (s != OT_OK) break;
        ot_instr *t = ot_build_call(c, callee, (ot_instr *[]){x, y}, 2);
        x = ot_build_get_tuple_element(c, t, 0);
        y = ot_build_get_tuple_element(c, t, 1);
    }
    if (s == OT_OK) {
        ot_computation_set_root(c, ot_build_tuple(c, (ot_instr *[]){x, y}, 2));
        ot_module_set_entry(m, c);
        s = ot_module_finalize(m);
    }
    if (s != OT_OK) {
        ot_module_free(m);
        return s;
    }
    *out = m;
    return OT_OK;
}

/* ---- the table ------------------------------------------------------------------------ */

typedef struct family {
    const char *name, *what;
    void (*build)(gen *g);
} family;

static const family k_families[] = {
    {"residual", "chain x_i = op(x_{i-1}, x_{i-2}) (odd seeds: also x_{i-3})", build_residual},
    {"braid", "2-4 chains, each step reading its own and the next chain", build_braid},
    {"fanout", "one value read by N/2.5 ops, half of them reduced alone", build_fanout},
    {"fanin", "N/4 leaves into one concatenate and one add tree", build_fanin},
    {"nested", "calls, conditionals, while loops nested sqrt(N/10) deep", build_nested},
    {"bcast_reduce", "row/column/full reductions broadcast back, alternating", build_bcast_reduce},
    {"islands", "about N/6 independent small clusters, each an output", build_islands},
    {"wide_tuple", "a chain whose every value is a root tuple element (N/2 wide)",
     build_wide_tuple},
    {"many_params", "N/2 parameters summed by an add tree", build_many_params},
    {"dot_sandwich", "elementwise stacks between dots and convolutions", build_dot_sandwich},
    {"random", "seeded random DAG: in-degree 1-4, mixed ops, two shapes, multi-use", build_random},
    {"random_ops",
     "seeded random DAG over every dtype, rank 0-5 (size-0 and size-1 dims) and most ops (shape "
     "ops, gather/scatter, sort, windows, while/conditional, rng, bitcasts)",
     build_random_ops},
    {"fori_unrolled", "JAX lax.fori_loop(unroll=True), 1,000 iterations (fixed size, chained)",
     NULL},
};

int ot_graph_family_count(void) {
    return (int)NELEM(k_families);
}

const char *ot_graph_family_name(int i) {
    return i >= 0 && i < ot_graph_family_count() ? k_families[i].name : NULL;
}

const char *ot_graph_family_description(int i) {
    return i >= 0 && i < ot_graph_family_count() ? k_families[i].what : NULL;
}

ot_status ot_graph_family_build(const char *name, int64_t n, uint64_t seed, ot_module **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "graph family: out is NULL");
    *out = NULL;
    if (!name) return ot_error(OT_ERR_INVALID_ARGUMENT, "graph family: name is NULL");
    if (n < 16 || n > (int64_t)1 << 30)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "graph family %s: size %lld outside 16 .. 2^30 instructions", name,
                        (long long)n);
    for (int i = 0; i < ot_graph_family_count(); i++) {
        if (strcmp(name, k_families[i].name) != 0) continue;
        if (!k_families[i].build) return build_fori(n, out);
        gen g;
        char mname[64];
        snprintf(mname, sizeof mname, "%s_%lld", name, (long long)n);
        ot_status s = gen_init(&g, mname, n, seed);
        if (s == OT_OK) k_families[i].build(&g);
        if (s != OT_OK) {
            ot_free(g.list);
            ot_module_free(g.m);
            return s;
        }
        return gen_finish(&g, out);
    }
    return ot_error(OT_ERR_INVALID_ARGUMENT, "graph family: unknown family '%s'", name);
}
