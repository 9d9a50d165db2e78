/* The kernel-list interpreter: slots bound to the arena, parameters, outputs and constants;
 * each kernel evaluated by the reference kernels of src/exec on borrowed views of its slots
 * (no copy in), its result copied into its output slots. Deadline and cancellation are checked
 * between kernels and, inside a kernel, between the iterations of every while loop. */
#include "runtime/runtime_internal.h"

#include "codegen/codegen_internal.h"
#include "exec/kernels.h"

#include <stdio.h>

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

/* ---- operand values from slots ----------------------------------------------------------- */

static char g_empty[64];

/* Builds a value of IR shape s from leaves[*pos...], borrowing slot memory. */
static ot_status view_value(const ot_ir_shape *s, void *const *mem, const ot_slot *const *slot,
                            int nleaves, int *pos, ot_value *out) {
    *out = ot_value_empty();
    if (s->kind == OT_IR_TOKEN) return OT_OK;
    if (s->kind == OT_IR_ARRAY) {
        if (*pos >= nleaves) return ot_error(OT_ERR_INTERNAL, "kernel: fewer inputs than leaves");
        const ot_slot *sl = slot[*pos];
        if (!ot_shape_equal(&sl->shape, &s->array))
            return ot_error(OT_ERR_INTERNAL, "kernel: input slot shape differs from the operand");
        void *p = mem[*pos] ? mem[*pos] : g_empty;
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
        ot_status st = view_value(&s->tuple[k], mem, slot, nleaves, pos, &t.tuple[k]);
        if (st != OT_OK) {
            ot_value_release(&t);
            return st;
        }
    }
    *out = t;
    return OT_OK;
}

static void *slot_mem(const ot_executable *exe, int32_t id, char *arena, void *const *params,
                      void *const *outs) {
    const ot_slot *s = ot_executable_slot(exe, id);
    switch (s->kind) {
    case OT_SLOT_PARAMETER: return params[s->number];
    case OT_SLOT_OUTPUT: return outs[s->number];
    case OT_SLOT_TEMP: return arena + s->offset;
    case OT_SLOT_CONSTANT: return (void *)s->data;
    default: return NULL;
    }
}

#define MAX_IO 4096

/* in / ins: MAX_IO entries of the caller's (one stack frame per run, not per kernel). */
static ot_status run_kernel(const ot_executable *exe, const ot_kernel *kn, char *arena,
                            void *const *params, void *const *outs, const ot_eval_options *eo,
                            rt_fast_ctx *fc, void **in, const ot_slot **ins, const cg_program *cg,
                            int kidx, bool *native, bool *fast) {
    if (kn->ninputs > MAX_IO || kn->noutputs > MAX_IO)
        return ot_error(OT_ERR_UNIMPLEMENTED, "kernel %s: more than %d inputs or outputs", kn->name,
                        MAX_IO);
    for (int q = 0; q < kn->ninputs; q++) {
        in[q] = slot_mem(exe, kn->inputs[q], arena, params, outs);
        ins[q] = ot_executable_slot(exe, kn->inputs[q]);
    }
    if (cg && kn->kind == OT_KERNEL_FUSION && !eo->keep_denormals) { /* native loop fusion */
        void *o[MAX_IO];
        for (int q = 0; q < kn->noutputs; q++)
            o[q] = slot_mem(exe, kn->outputs[q], arena, params, outs);
        if ((*native = cg_run(cg, kidx, in, o, fc ? fc->pool : NULL))) return OT_OK;
    }
    if (!kn->instr) { /* an inserted copy (output or donation) */
        if (kn->ninputs != 1 || kn->noutputs != 1)
            return ot_error(OT_ERR_INTERNAL, "copy kernel %s: not one input and one output",
                            kn->name);
        const ot_slot *os = ot_executable_slot(exe, kn->outputs[0]);
        void *dst = slot_mem(exe, kn->outputs[0], arena, params, outs);
        if (os->nbytes != ins[0]->nbytes)
            return ot_error(OT_ERR_INTERNAL, "copy kernel %s: sizes differ", kn->name);
        if (os->nbytes && dst != in[0]) memmove(dst, in[0], (size_t)os->nbytes);
        return OT_OK;
    }
    const ot_instr *i = kn->instr;
    if (fc && kn->noutputs == 1) { /* a fast kernel when one covers the op (fast_kernels.h) */
        const ot_slot *os = ot_executable_slot(exe, kn->outputs[0]);
        void *dst = slot_mem(exe, kn->outputs[0], arena, params, outs);
        bool done = false;
        ot_status fs = rt_fast_kernel(fc, i, kn->ninputs, in, ins, 1, &dst, &os, &done);
        if (fs != OT_OK) return ot_error_wrap(fs, "kernel %s", kn->name);
        if (done) {
            *fast = true;
            return OT_OK;
        }
    }
    int nops = i->noperands;
    ot_value opsv[64];
    ot_value *ops = nops <= 64 ? opsv : ot_calloc((size_t)nops, sizeof *ops);
    if (!ops) return ot_error(OT_ERR_OUT_OF_MEMORY, "kernel %s: out of memory", kn->name);
    int made = 0, pos = 0;
    ot_status st = OT_OK;
    for (; made < nops; made++) {
        st = view_value(&i->operands[made]->shape, in, ins, kn->ninputs, &pos, &ops[made]);
        if (st != OT_OK) break;
    }
    if (st == OT_OK && pos != kn->ninputs)
        st = ot_error(OT_ERR_INTERNAL, "kernel %s: %d inputs, operands use %d", kn->name,
                      kn->ninputs, pos);
    ot_value res = ot_value_empty();
    if (st == OT_OK) st = ot_evaluate_instr(i, ops, nops, eo, &res);
    for (int k = 0; k < made; k++) ot_value_release(&ops[k]);
    if (ops != opsv) ot_free(ops);
    if (st != OT_OK)
        return ot_error_wrap(st, "kernel %s (%s)", kn->name, ot_opcode_name(i->opcode));
    if (ot_value_leaf_count(&res) != kn->noutputs) {
        ot_value_release(&res);
        return ot_error(OT_ERR_INTERNAL, "kernel %s: %d results for %d outputs", kn->name,
                        ot_value_leaf_count(&res), kn->noutputs);
    }
    for (int q = 0; q < kn->noutputs; q++) {
        const ot_value *lf = ot_value_leaf(&res, q);
        const ot_slot *os = ot_executable_slot(exe, kn->outputs[q]);
        void *dst = slot_mem(exe, kn->outputs[q], arena, params, outs);
        if ((int64_t)lf->array.nbytes != os->nbytes) {
            ot_value_release(&res);
            return ot_error(OT_ERR_INTERNAL, "kernel %s: output %d size differs", kn->name, q);
        }
        if (os->nbytes) memcpy(dst, lf->array.data, (size_t)os->nbytes);
    }
    ot_value_release(&res);
    return OT_OK;
}

ot_status ot_execute_on_host(const ot_executable *exe, void *arena, void *const *params,
                             void *const *outs, const ot_run_options *o, int device_index,
                             ot_run_result *res) {
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
    rt_fast_ctx fc;
    rt_fast_ctx_init(&fc, ro.pool, eo.keep_denormals);
    void *kin[MAX_IO];
    const ot_slot *kins[MAX_IO];
    ot_status st = OT_OK;
    int nk = ot_executable_kernel_count(exe);
    const cg_program *cg = cg_program_get(exe);
    if (ro.profile) cg_program_report(cg, ro.profile);
    for (int k = 0; k < nk; k++) {
        const ot_kernel *kn = ot_executable_kernel(exe, k);
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
        for (int q = 0; q < kn->noutputs; q++)
            if (ot_executable_slot(exe, kn->outputs[q])->alias_param >= 0) r.donated_written = true;
        bool native = false, fast = false;
        st = run_kernel(exe, kn, arena, params, outs, &eo, ro.reference_kernels ? NULL : &fc, kin,
                        kins, ro.reference_kernels ? NULL : cg, k, &native, &fast);
        if (st != OT_OK) break;
        r.kernels_run++;
        if (ro.profile)
            ot_profile_record(ro.profile, kn->name,
                              kn->kind != OT_KERNEL_FUSION ? ot_kernel_kind_name(kn->kind)
                              : native                     ? "fusion-native"
                              : fast                       ? "fusion-fast"
                                                           : "fusion-interp",
                              device_index, t0, ot_now_ns(), kn->flops,
                              kn->bytes_read + kn->bytes_written);
    }
    ot_free(ca.scratch);
    r.fast_kernels_run = (int)fc.fast_run;
    rt_fast_ctx_release(&fc);
    r.time_ns = ot_now_ns() - t_start;
    if (res) *res = r;
    return st;
}
