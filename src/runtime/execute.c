/* The generic execution loop: slots bound to the arena, parameters, outputs and constants, then
 * per kernel the cancellation and deadline checks, the launch (the device's; the host's is
 * ot_launch_host: native code for a loop fusion that has some, else exec's kernel dispatch,
 * src/exec/kernels.h) and the profile event. Deadline and cancellation are also checked inside a
 * kernel, between the iterations of every while loop. */
#include "runtime/runtime_internal.h"

#include "compiler/loop.h"
#include "compiler/native.h"
#include "compiler/scratch.h"
#include "exec/kernels.h"

#include <stdio.h>

int64_t ot_host_inline_bytes(void) {
    return ex_inline_bytes();
}

bool ot_host_dot_splits(const ot_executable *e, int k, int threads) {
    const ot_kernel *kn = ot_executable_kernel(e, k);
    return kn && kn->opcode == OT_OP_DOT && ex_fast_dot_splits(kn->instr, threads);
}

ot_run_options ot_run_options_default(void) {
    ot_run_options o;
    memset(&o, 0, sizeof o);
    return o;
}

/* ---- collectives through an ot_comm ---------------------------------------------------- */

typedef struct comm_adapter {
    ot_comm *comm;
    char *scratch;
    size_t cap;
} comm_adapter;

/* Every member of the world runs the same collective (replica groups partition the world), so
 * an all-gather over the world followed by picking the group's blocks gives each member the
 * group's send buffers in group order. */
static ot_status comm_exchange(void *ctx, const int64_t *ids, int n, const void *send, size_t bytes,
                               void *recv) {
    comm_adapter *a = ctx;
    int w = ot_comm_size(a->comm);
    for (int k = 0; k < n; k++)
        if (ids[k] < 0 || ids[k] >= w)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "collective: replica %lld is outside the %d devices of the run",
                            (long long)ids[k], w);
    if (bytes == 0) return ot_comm_barrier(a->comm, NULL);
    size_t need = (size_t)w * bytes;
    if (need > a->cap) {
        char *s = ot_realloc(a->scratch, need);
        if (!s)
            return ot_error(OT_ERR_OUT_OF_MEMORY, "collective: out of memory (%zu bytes)", need);
        a->scratch = s;
        a->cap = need;
    }
    OT_CHECK(ot_comm_allgather(a->comm, send, a->scratch, bytes, OT_U8, NULL));
    for (int k = 0; k < n; k++)
        memcpy((char *)recv + (size_t)k * bytes, a->scratch + (size_t)ids[k] * bytes, bytes);
    return OT_OK;
}

/* ---- deadline and cancellation inside a kernel (polled by exec between while iterations) -- */

typedef struct run_poll {
    uint64_t deadline_ns;
    atomic_bool *cancel;
} run_poll;

static ot_status poll_run(void *ctx) {
    const run_poll *rp = ctx;
    if (rp->cancel && atomic_load(rp->cancel))
        return ot_error(OT_ERR_CANCELLED, "execute: cancelled inside the kernel");
    if (rp->deadline_ns) {
        uint64_t now = ot_now_ns();
        if (now >= rp->deadline_ns)
            return ot_error(OT_ERR_TIMEOUT,
                            "execute: deadline passed inside the kernel, %.3f ms late",
                            (double)(now - rp->deadline_ns) / 1e6);
    }
    return OT_OK;
}

/* ---- the run's kernel state and the host launch ----------------------------------------- */

/* A run's leaf tables (each kernel's memory and leaf shapes) are sized to the executable's
 * widest kernel: on the stack up to IO_ON_STACK leaves, else one heap block. A fixed table of
 * 4,096 leaves made execute_kernels' frame 289 KiB, which overflowed a 256 KiB thread stack on
 * every program, and a compiled loop nests one frame per level. */
enum { IO_ON_STACK = 32 };
/* per leaf: kin, kout, fin, fout, kinb and the two leaf tables */
#define IO_LEAF_BYTES (4 * sizeof(void *) + sizeof(int64_t) + 2 * sizeof(ex_leaf))

/* How ot_launch_host ran the last kernel (the profile's kind for a fusion). */
typedef enum launch_path {
    PATH_DEVICE,
    PATH_NATIVE,
    PATH_FAST,
    PATH_REFERENCE,
    PATH_LOOP
} launch_path;

struct ot_launch {
    ex_kernel_ctx kc;     /* exec's per-run context: pool, FTZ, scratch, reference options */
    const cg_program *cg; /* the executable's native program, built by ot_compile (NULL: none) */
    bool native;          /* native code allowed (not reference_kernels, not keep_denormals) */
    launch_path path;     /* set by ot_launch_host */
    int bound;            /* the kernel the loop is launching: its leaf tables are filled */
    const ot_kernel *bound_kn;
    ex_leaf *ins; /* leaf tables of the kernel being launched (io_cap entries each) */
    ex_leaf *outs;
    int io_cap;
    const ot_run_options *ro; /* the run's options (compiled loops run their parts with them) */
    int device_index;
};

static ot_status execute_kernels(const ot_executable *exe, void *arena, void *const *params,
                                 void *const *outs, const ot_run_options *o, int device_index,
                                 rt_launch_fn launch, void *launch_ctx, ot_run_result *res,
                                 ex_loop_cache *lc);

/* A compiled while loop (compiler/loop.h) on leaves in/out: the state starts as a copy of the
 * inputs in the output buffers; each iteration runs the condition on the state and the body from
 * the state into a second set of buffers, which then becomes the state (the two sets alternate:
 * nothing is allocated per iteration); a final state left in the second set is copied out. The
 * parts run through rt_execute_kernels with the run's options: the kernels, native code and fast
 * paths of top-level code, the same results bit for bit as the evaluator's loop. The leaves the
 * body passes through unchanged (cc_loop.invariant) keep one buffer, which no iteration writes:
 * the body's kernels may keep what they derive from them across iterations (ex_loop_cache: a
 * dot's packed weights); those that nothing reads after the loop (cc_loop.unread) are read
 * where the input lies, never copied. */
static ot_status run_loop(ot_launch *run, const ot_executable *exe, const ot_kernel *kn,
                          const cc_loop *l, void *const *in, void *const *out) {
    int n = kn->noutputs;
    const ot_run_options *ro = run->ro;
    /* the parts' kernels are the profile's events (the loop itself records none: its time is
     * theirs, counted once) */
    ot_run_options so = *ro;
    so.kernel_hook = NULL; /* the caller's hook sees the top-level list's kernels, this one */
    int64_t total = 0;
    for (int q = 0; q < n; q++)
        total += (ot_executable_slot(exe, kn->outputs[q])->nbytes + 63) / 64 * 64;
    int64_t ca = ot_executable_arena_size(l->cond), ba = ot_executable_arena_size(l->body);
    ex_scratch_cache *kept = cc_executable_state_cache(exe);
    char *mem = ex_scratch_cache_take(kept, (size_t)(total + ca + ba + 64));
    void **cur = ot_malloc((size_t)(3 * n + 1) * sizeof *cur);
    if (!mem || !cur) {
        ex_scratch_cache_give(kept, mem);
        ot_free(cur);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "while %s: out of memory for the loop state",
                        kn->name);
    }
    void **nxt = cur + n;
    void **inv = nxt + n; /* the invariant leaves' buffers (n more pointers) */
    int ninv = 0;
    char *p = mem;
    for (int q = 0; q < n; q++) {
        int64_t nb = ot_executable_slot(exe, kn->outputs[q])->nbytes;
        const ot_slot *bo = ot_executable_slot(l->body, ot_executable_output_slot(l->body, q));
        if (q < 64 && (l->invariant & l->unread) >> q & 1) {
            /* passed through and read by no one after the loop: read where it lies */
            cur[q] = nxt[q] = in[q];
            inv[ninv++] = in[q];
            continue;
        }
        cur[q] = out[q];
        /* a leaf the body updates in place (donated, compiler/loop.c) has one buffer */
        nxt[q] = bo->alias_param == q ? out[q] : p;
        if (bo->alias_param != q) p += (nb + 63) / 64 * 64;
        if (nb && out[q] != in[q]) memmove(out[q], in[q], (size_t)nb);
        if (q < 64 && (l->invariant >> q & 1) && nxt[q] == out[q]) inv[ninv++] = out[q];
    }
    ex_loop_cache lc;
    ex_loop_cache_init(&lc, inv, ninv);
    char *carena = p, *barena = p + ca;
    uint8_t *go = (uint8_t *)(barena + ba);
    void *gov[1] = {go};
    run_poll rp = {ro->deadline_ns, ro->cancel};
    ot_status st = OT_OK;
    int64_t iter = 0;
    for (;; iter++) {
        if ((st = poll_run(&rp)) != OT_OK) break;
        st = rt_execute_kernels(l->cond, carena, cur, gov, &so, run->device_index, rt_host_launch,
                                NULL, NULL);
        if (st != OT_OK || !go[0]) break;
        if (ro->max_while_iterations > 0 && iter >= ro->max_while_iterations) {
            st = ot_error(OT_ERR_OUT_OF_RANGE, "more than %lld iterations",
                          (long long)ro->max_while_iterations);
            break;
        }
        st = execute_kernels(l->body, barena, cur, nxt, &so, run->device_index, rt_host_launch,
                             NULL, NULL, ninv ? &lc : NULL);
        if (st != OT_OK) break;
        for (int q = 0; q < n; q++) {
            void *t = cur[q];
            cur[q] = nxt[q];
            nxt[q] = t;
        }
    }
    if (st == OT_ERR_TIMEOUT || st == OT_ERR_CANCELLED) {
        ot_status again = poll_run(&rp); /* said as the evaluator's loop says it */
        if (again != OT_OK) st = again;
    }
    if (st != OT_OK)
        st = ot_error_wrap(st, "kernel %s (while): iteration %lld", kn->name, (long long)iter);
    for (int q = 0; st == OT_OK && q < n; q++) {
        int64_t nb = ot_executable_slot(exe, kn->outputs[q])->nbytes;
        if (q < 64 && (l->invariant & l->unread) >> q & 1) continue;
        if (cur[q] != out[q] && nb) memcpy(out[q], cur[q], (size_t)nb);
    }
    ex_loop_cache_free(&lc);
    ex_scratch_cache_give(st == OT_OK ? kept : NULL, mem);
    ot_free(cur);
    return st;
}

static bool mem_overlaps(const void *a, int64_t na, const void *b, int64_t nb) {
    const char *pa = a, *pb = b;
    return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

/* A compiled conditional (compiler/loop.h) on leaves in/out: the branch the selector picks (as
 * the evaluator picks it) runs through rt_execute_kernels on its operand's leaves, writing the
 * kernel's outputs; an operand leaf that overlaps an output is copied first (the branch was
 * compiled without aliasing, so it may write an output before its last read of a parameter). */
static ot_status run_cond(ot_launch *run, const ot_executable *exe, const ot_kernel *kn,
                          const cc_cond *c, void *const *in, void *const *out) {
    const ot_slot *sel = ot_executable_slot(exe, kn->inputs[0]);
    int b;
    if (sel->shape.dtype == OT_PRED) {
        b = ((const uint8_t *)in[0])[0] ? 0 : 1;
    } else {
        int32_t v;
        memcpy(&v, in[0], sizeof v);
        b = v < 0 || v >= c->nbranch ? c->nbranch - 1 : (int)v; /* XLA: out of range, the last */
    }
    const ot_executable *x = c->branch[b];
    int np = ot_executable_param_count(x);
    int64_t copies = 0;
    for (int q = 0; q < np; q++) {
        int64_t nb = ot_executable_slot(exe, kn->inputs[c->leaf0[b] + q])->nbytes;
        for (int o = 0; o < kn->noutputs; o++)
            if (mem_overlaps(in[c->leaf0[b] + q], nb, out[o],
                             ot_executable_slot(exe, kn->outputs[o])->nbytes)) {
                copies += (nb + 63) / 64 * 64;
                break;
            }
    }
    int64_t arena = ot_executable_arena_size(x);
    ex_scratch_cache *kept = cc_executable_state_cache(exe);
    char *mem = ex_scratch_cache_take(kept, (size_t)(arena + copies + 64));
    void **pv = ot_malloc((size_t)(np ? np : 1) * sizeof *pv);
    if (!mem || !pv) {
        ex_scratch_cache_give(kept, mem);
        ot_free(pv);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "conditional %s: out of memory for branch %d",
                        kn->name, b);
    }
    char *p = mem + arena;
    for (int q = 0; q < np; q++) {
        void *src = in[c->leaf0[b] + q];
        int64_t nb = ot_executable_slot(exe, kn->inputs[c->leaf0[b] + q])->nbytes;
        pv[q] = src;
        for (int o = 0; o < kn->noutputs; o++)
            if (mem_overlaps(src, nb, out[o], ot_executable_slot(exe, kn->outputs[o])->nbytes)) {
                memcpy(p, src, (size_t)nb);
                pv[q] = p;
                p += (nb + 63) / 64 * 64;
                break;
            }
    }
    /* the branch's kernels are the profile's events (the conditional records none) */
    ot_run_options so = *run->ro;
    so.kernel_hook = NULL;
    ot_status st =
        rt_execute_kernels(x, mem, pv, out, &so, run->device_index, rt_host_launch, NULL, NULL);
    if (st != OT_OK) st = ot_error_wrap(st, "kernel %s (conditional): branch %d", kn->name, b);
    ex_scratch_cache_give(st == OT_OK ? kept : NULL, mem);
    ot_free(pv);
    return st;
}

ot_status ot_launch_host(ot_launch *run, const ot_executable *exe, int k, void *const *in,
                         void *const *out) {
    if (!run || !exe) return ot_error(OT_ERR_INVALID_ARGUMENT, "launch: run or executable is NULL");
    /* the loop has already looked up the kernel it launches and filled its leaf tables */
    bool bound = k == run->bound;
    const ot_kernel *kn = bound ? run->bound_kn : ot_executable_kernel(exe, k);
    if (!kn) return ot_error(OT_ERR_INVALID_ARGUMENT, "launch: no kernel %d", k);
    if (kn->opcode == OT_OP_WHILE && run->ro && !run->ro->reference_kernels) {
        const cc_loop *l = cc_executable_loop(exe, k);
        if (l) {
            run->path = PATH_LOOP;
            return run_loop(run, exe, kn, l, in, out);
        }
    }
    if (kn->opcode == OT_OP_CONDITIONAL && run->ro && !run->ro->reference_kernels) {
        const cc_cond *c = cc_executable_cond(exe, k);
        if (c) {
            run->path = PATH_LOOP;
            return run_cond(run, exe, kn, c, in, out);
        }
    }
    if (kn->kind == OT_KERNEL_FUSION && run->native) { /* native loop fusion */
        if (run->cg && cg_run(run->cg, k, in, out, run->kc.pool)) {
            run->path = PATH_NATIVE;
            return OT_OK;
        }
    }
    if (!bound) {
        if (kn->ninputs > run->io_cap || kn->noutputs > run->io_cap)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "launch: kernel %s of another executable (%d inputs, %d outputs; the "
                            "run's tables hold %d)",
                            kn->name, kn->ninputs, kn->noutputs, run->io_cap);
        for (int q = 0; q < kn->ninputs; q++) {
            const ot_slot *s = ot_executable_slot(exe, kn->inputs[q]);
            run->ins[q] = (ex_leaf){&s->shape, s->nbytes};
        }
        for (int q = 0; q < kn->noutputs; q++) {
            const ot_slot *s = ot_executable_slot(exe, kn->outputs[q]);
            run->outs[q] = (ex_leaf){&s->shape, s->nbytes};
        }
    }
    bool fast = false;
    ot_status st = ex_kernel_run(&run->kc, kn->instr, kn->name, kn->ninputs, in, run->ins,
                                 kn->noutputs, out, run->outs, &fast);
    run->path = fast ? PATH_FAST : PATH_REFERENCE;
    return st;
}

/* ---- the generic execution loop --------------------------------------------------------- */

/* The memory a slot is bound to in this run. */
static inline void *slot_mem(const ot_slot *s, char *arena, void *const *params,
                             void *const *outs) {
    switch (s->kind) {
    case OT_SLOT_PARAMETER: return params[s->number];
    case OT_SLOT_OUTPUT: return outs[s->number];
    case OT_SLOT_TEMP: return arena + s->offset;
    case OT_SLOT_CONSTANT: return (void *)s->data;
    default: return NULL;
    }
}

static const char *profile_kind(const ot_kernel *kn, launch_path path) {
    if (kn->kind != OT_KERNEL_FUSION) return ot_kernel_kind_name(kn->kind);
    switch (path) {
    case PATH_NATIVE: return "fusion-native";
    case PATH_FAST: return "fusion-fast";
    case PATH_REFERENCE: return "fusion-interp";
    default: return ot_kernel_kind_name(kn->kind);
    }
}

static void run_epilogue(const void *ctx, int64_t b, int64_t e) {
    cg_range_run(ctx, b, e);
}

/* Output fusion: kernel k + 1 when it is a native loop that reads the result of dot kernel k
 * (bound to kin/kout) only at each element's own index and can run piecewise (cg_range_of), with
 * its other inputs clear of the dot's result and its outputs clear of the dot's operands (the
 * dot reads and writes those while the loop runs on its finished blocks). fin/fout receive its
 * bindings, *r the loop; NULL when it does not qualify. The loop computes every element exactly
 * as its own launch would (the same generated code over the same inputs), only earlier. */
static const ot_kernel *output_fusion(const ot_executable *exe, const ot_launch *run, int k,
                                      const ot_kernel *kn, void *const *kin, void *const *kout,
                                      char *arena, void *const *params, void *const *outs,
                                      void **fin, void **fout, cg_range *r) {
    if (k + 1 >= ot_executable_kernel_count(exe) || kn->noutputs != 1 || kn->ninputs != 2)
        return NULL;
    const ot_kernel *f = ot_executable_kernel(exe, k + 1);
    if (!f || f->kind != OT_KERNEL_FUSION || !cg_native(run->cg, k + 1)) return NULL;
    const ot_slot *ds = ot_executable_slot(exe, kn->outputs[0]);
    int64_t numel = ot_shape_numel_unchecked(&ds->shape);
    int reads = 0;
    for (int q = 0; q < f->ninputs; q++)
        fin[q] = slot_mem(ot_executable_slot(exe, f->inputs[q]), arena, params, outs);
    for (int o = 0; o < f->noutputs; o++)
        fout[o] = slot_mem(ot_executable_slot(exe, f->outputs[o]), arena, params, outs);
    for (int q = 0; q < f->ninputs; q++) {
        int64_t qb = ot_executable_slot(exe, f->inputs[q])->nbytes;
        if (f->inputs[q] == kn->outputs[0]) {
            if (!cg_range_of(run->cg, k + 1, q, numel, fin, fout, r)) return NULL;
            reads++;
        } else if (mem_overlaps(fin[q], qb, kout[0], ds->nbytes)) {
            return NULL;
        }
    }
    for (int o = 0; o < f->noutputs; o++) {
        int64_t ob = ot_executable_slot(exe, f->outputs[o])->nbytes;
        for (int j = 0; j < 2; j++)
            if (mem_overlaps(fout[o], ob, kin[j], ot_executable_slot(exe, kn->inputs[j])->nbytes))
                return NULL;
    }
    return reads ? f : NULL;
}

/* Where kernel u, a dynamic-update-slice updating its operand in place, puts its update when
 * an earlier native fusion alone writes that update (cc_executable_update_writer): the address
 * of the first element of the update's run in the output (starts clamped as HLO clamps them),
 * or NULL (not in place, or the run overlaps one of the fusion's inputs: kin/kinb, n). */
static char *update_target(const ot_executable *exe, int u, char *arena, void *const *params,
                           void *const *outs, void *const *kin, const int64_t *kinb, int n) {
    const ot_kernel *d = ot_executable_kernel(exe, u);
    const ot_instr *i = d->instr;
    const ot_slot *os = ot_executable_slot(exe, d->outputs[0]);
    char *o = slot_mem(os, arena, params, outs);
    if (!o || o != slot_mem(ot_executable_slot(exe, d->inputs[0]), arena, params, outs))
        return NULL;
    const ot_shape *O = &os->shape, *U = &i->operands[1]->shape.array;
    int64_t off = 0, stride = 1;
    for (int j = O->rank - 1; j >= 0; j--) {
        const ot_slot *ss = ot_executable_slot(exe, d->inputs[2 + j]);
        const void *p = slot_mem(ss, arena, params, outs);
        int64_t v;
        switch (ss->shape.dtype) {
        case OT_S8: v = *(const int8_t *)p; break;
        case OT_S16: v = *(const int16_t *)p; break;
        case OT_S32: v = *(const int32_t *)p; break;
        case OT_S64: v = *(const int64_t *)p; break;
        case OT_U8: v = *(const uint8_t *)p; break;
        case OT_U16: v = *(const uint16_t *)p; break;
        case OT_U32: v = *(const uint32_t *)p; break;
        default: return NULL; /* u64: the kernel itself */
        }
        int64_t mx = O->dims[j] - U->dims[j];
        v = v < 0 ? 0 : v > mx ? mx : v;
        off += v * stride;
        stride *= O->dims[j];
    }
    int64_t nb = ot_executable_slot(exe, d->inputs[1])->nbytes;
    char *t = o + off * (int64_t)ot_dtype_size(O->dtype);
    for (int q = 0; q < n; q++)
        if (mem_overlaps(kin[q], kinb[q], t, nb)) return NULL;
    return t;
}

ot_status rt_execute_kernels(const ot_executable *exe, void *arena, void *const *params,
                             void *const *outs, const ot_run_options *o, int device_index,
                             rt_launch_fn launch, void *launch_ctx, ot_run_result *res) {
    return execute_kernels(exe, arena, params, outs, o, device_index, launch, launch_ctx, res,
                           NULL);
}

/* rt_execute_kernels; lc: a compiled loop's body run (run_loop), its kernels given the loop's
 * cache (NULL: none) */
static ot_status execute_kernels(const ot_executable *exe, void *arena, void *const *params,
                                 void *const *outs, const ot_run_options *o, int device_index,
                                 rt_launch_fn launch, void *launch_ctx, ot_run_result *res,
                                 ex_loop_cache *lc) {
    ot_run_options ro = o ? *o : ot_run_options_default();
    ot_run_result r;
    memset(&r, 0, sizeof r);
    uint64_t t_start = ot_now_ns();
    if (!exe) return ot_error(OT_ERR_INVALID_ARGUMENT, "execute: executable is NULL");
    if (ot_executable_arena_size(exe) > 0 && !arena)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "execute: no arena for %lld bytes",
                        (long long)ot_executable_arena_size(exe));
    ot_eval_options eo = ot_eval_options_default();
    eo.max_while_iterations = ro.max_while_iterations;
    run_poll rp = {ro.deadline_ns, ro.cancel};
    if (ro.deadline_ns || ro.cancel) {
        eo.poll = poll_run;
        eo.poll_ctx = &rp;
    }
    comm_adapter ca = {ro.comm, NULL, 0};
    ot_exec_comm ec;
    if (ro.comm) {
        memset(&ec, 0, sizeof ec);
        ec.ctx = &ca;
        /* world rank g = replica * P + partition (XLA's global device id) */
        const ot_module_config *cfg = ot_module_get_config(ot_executable_module(exe));
        int64_t np = cfg && cfg->num_partitions > 1 ? cfg->num_partitions : 1;
        int64_t w = ot_comm_size(ro.comm), g = ot_comm_rank(ro.comm);
        if (w % np != 0) {
            ot_free(ca.scratch);
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "execute: %lld devices cannot hold num_partitions=%lld partitions "
                            "evenly",
                            (long long)w, (long long)np);
        }
        ec.replica_id = g / np;
        ec.partition_id = g % np;
        ec.replica_count = w / np;
        ec.num_partitions = np;
        ec.exchange = comm_exchange;
        eo.comm = &ec;
    }
    /* one frame per run: the run's kernel state and the kernels' memory tables */
    int nk = ot_executable_kernel_count(exe), io = 1;
    for (int k = 0; k < nk; k++) {
        const ot_kernel *kn = ot_executable_kernel(exe, k);
        if (kn->ninputs > io) io = kn->ninputs;
        if (kn->noutputs > io) io = kn->noutputs;
    }
    _Alignas(16) unsigned char io_stack[IO_ON_STACK * IO_LEAF_BYTES];
    unsigned char *io_mem = io <= IO_ON_STACK ? io_stack : ot_malloc((size_t)io * IO_LEAF_BYTES);
    if (!io_mem) {
        ot_free(ca.scratch);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "execute: out of memory for %d leaf tables", io);
    }
    ot_launch run;
    run.ins = (ex_leaf *)io_mem;
    run.outs = run.ins + io;
    run.io_cap = io;
    void **kin = (void **)(run.outs + io), **kout = kin + io, **fin = kout + io, **fout = fin + io;
    int64_t *kinb = (int64_t *)(fout + io);
    ex_kernel_ctx_init(&run.kc, ro.pool, &eo, ro.reference_kernels);
    ex_kernel_ctx_set_cache(&run.kc, cc_executable_scratch(exe));
    run.kc.loop = lc;
    run.native = !ro.reference_kernels && !eo.keep_denormals;
    if (run.native) cc_executable_tier_up(exe); /* a module of small fusions, run again */
    run.cg = cc_executable_native(exe);
    run.bound = -1;
    run.bound_kn = NULL;
    run.ro = &ro;
    run.device_index = device_index;
    cg_range fr;
    ex_epilogue fepi = {run_epilogue, &fr};
    ot_status st = OT_OK;
    enum { MAX_SKIP = 8 };
    int skip[MAX_SKIP], nskip = 0; /* dynamic-update-slices whose update is already in place */
    for (int k = 0; k < nk; k++) {
        const ot_kernel *kn = ot_executable_kernel(exe, k);
        bool done = false;
        for (int j = 0; j < nskip && !done; j++)
            if (skip[j] == k) {
                skip[j] = skip[--nskip];
                done = true;
            }
        if (done) { /* its update landed in place: nothing left for it to do */
            if (ot_executable_slot(exe, kn->outputs[0])->alias_param >= 0) r.donated_written = true;
            r.kernels_run++;
            if (ro.profile) {
                uint64_t t = ot_now_ns();
                ot_profile_record(ro.profile, kn->name, ot_kernel_kind_name(kn->kind), device_index,
                                  t, t, kn->flops, kn->bytes_read + kn->bytes_written);
            }
            continue;
        }
        if (ro.cancel && atomic_load(ro.cancel)) {
            st = ot_error(OT_ERR_CANCELLED, "execute: cancelled before kernel %d of %d (%s)", k, nk,
                          kn->name);
            break;
        }
        /* the clock is read only when a deadline or a profile needs it */
        uint64_t t0 = ro.deadline_ns || ro.profile ? ot_now_ns() : 0;
        if (ro.deadline_ns && t0 >= ro.deadline_ns) {
            st = ot_error(OT_ERR_TIMEOUT,
                          "execute: deadline passed before kernel %d of %d (%s), %.3f ms late", k,
                          nk, kn->name, (double)(t0 - ro.deadline_ns) / 1e6);
            break;
        }
        if (ro.kernel_hook && (st = ro.kernel_hook(ro.kernel_hook_ud, k, false)) != OT_OK) break;
        for (int q = 0; q < kn->noutputs; q++)
            if (ot_executable_slot(exe, kn->outputs[q])->alias_param >= 0) r.donated_written = true;
        /* bind: each leaf's memory, and its shape for the host kernels */
        for (int q = 0; q < kn->ninputs; q++) {
            const ot_slot *s = ot_executable_slot(exe, kn->inputs[q]);
            kin[q] = slot_mem(s, arena, params, outs);
            run.ins[q] = (ex_leaf){&s->shape, s->nbytes};
        }
        for (int q = 0; q < kn->noutputs; q++) {
            const ot_slot *s = ot_executable_slot(exe, kn->outputs[q]);
            kout[q] = slot_mem(s, arena, params, outs);
            run.outs[q] = (ex_leaf){&s->shape, s->nbytes};
        }
        /* the copy of a donated parameter into its own output (compile.c, apply_aliases) */
        if (kn->kind == OT_KERNEL_COPY && kn->ninputs == 1 && kn->noutputs == 1 &&
            kin[0] == kout[0]) {
            r.kernels_run++;
            if (ro.kernel_hook && (st = ro.kernel_hook(ro.kernel_hook_ud, k, true)) != OT_OK) break;
            continue;
        }
        run.bound = k;
        run.bound_kn = kn;
        run.path = PATH_DEVICE;
        /* a dot or convolution whose result the next kernel, a native loop, reads elementwise:
         * the fast kernel runs that loop on each block of its result as it finishes it (output
         * fusion) */
        const ot_kernel *fk = NULL;
        if (launch == rt_host_launch && run.native && run.cg &&
            (kn->opcode == OT_OP_DOT || kn->opcode == OT_OP_CONVOLUTION))
            fk = output_fusion(exe, &run, k, kn, kin, kout, arena, params, outs, fin, fout, &fr);
        if (fk && ro.kernel_hook && (st = ro.kernel_hook(ro.kernel_hook_ud, k + 1, false)) != OT_OK)
            break;
        /* a fusion writing the update of an in-place dynamic-update-slice after it: written
         * where it lands, the slice skipped when the loop reaches it */
        int ud = launch == rt_host_launch && run.native && run.cg && !ro.kernel_hook &&
                         nskip < MAX_SKIP && cg_native(run.cg, k)
                     ? cc_executable_update_writer(exe, k)
                     : 0;
        if (ud > 0) {
            for (int q = 0; q < kn->ninputs; q++) kinb[q] = run.ins[q].nbytes;
            char *t = update_target(exe, k + ud, arena, params, outs, kin, kinb, kn->ninputs);
            if (t) {
                kout[0] = t;
                skip[nskip++] = k + ud;
            }
        }
        run.kc.epilogue = fk ? &fepi : NULL;
        run.kc.epilogue_done = false;
        /* the host's launch called directly: no indirect call per kernel on the common path */
        st = launch == rt_host_launch ? ot_launch_host(&run, exe, k, kin, kout)
                                      : launch(launch_ctx, &run, exe, k, kin, kout);
        run.kc.epilogue = NULL;
        run.bound = -1;
        if (st != OT_OK) break;
        r.kernels_run++;
        uint64_t t1 = ro.profile ? ot_now_ns() : 0;
        if (ro.profile && run.path != PATH_LOOP)
            ot_profile_record(ro.profile, kn->name, profile_kind(kn, run.path), device_index, t0,
                              t1, kn->flops, kn->bytes_read + kn->bytes_written);
        if (fk && run.kc.epilogue_done) { /* kernel k + 1 ran inside the dot */
            k++;
            for (int q = 0; q < fk->noutputs; q++)
                if (ot_executable_slot(exe, fk->outputs[q])->alias_param >= 0)
                    r.donated_written = true;
            r.kernels_run++;
            r.output_fusions++;
            if (ro.profile)
                ot_profile_record(ro.profile, fk->name, "fusion-native", device_index, t1, t1,
                                  fk->flops, fk->bytes_read + fk->bytes_written);
        }
        if (ro.kernel_hook) { /* kernel k done (fused: the dot k - 1 first, then k) */
            if (fk && run.kc.epilogue_done) st = ro.kernel_hook(ro.kernel_hook_ud, k - 1, true);
            if (st == OT_OK) st = ro.kernel_hook(ro.kernel_hook_ud, k, true);
            if (st != OT_OK) break;
        }
    }
    ot_free(ca.scratch);
    if (io_mem != io_stack) ot_free(io_mem);
    r.fast_kernels_run = (int)run.kc.fast_run;
    if (st != OT_OK) ex_kernel_ctx_set_cache(&run.kc, NULL); /* a failed run keeps nothing */
    ex_kernel_ctx_release(&run.kc);
    r.time_ns = ot_now_ns() - t_start;
    if (res) *res = r;
    return st;
}

ot_status rt_host_launch(void *ctx, ot_launch *run, const ot_executable *exe, int k,
                         void *const *in, void *const *out) {
    (void)ctx;
    return ot_launch_host(run, exe, k, in, out);
}

ot_status ot_execute_on_host(const ot_executable *exe, void *arena, void *const *params,
                             void *const *outs, const ot_run_options *o, int device_index,
                             ot_run_result *res) {
    return rt_execute_kernels(exe, arena, params, outs, o, device_index, rt_host_launch, NULL, res);
}
