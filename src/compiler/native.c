/* The native-code stage: describes each loop fusion of an executable to src/codegen (its fused
 * computation, the buffer sizes, and which inputs are their outputs' memory) and keeps the
 * program it builds. What memory a slot is lives here, on the compiler's side: codegen sees
 * only the alias array. */
#include "executable_internal.h"

#include <stdio.h>

/* Which memory a slot is: kind 'P' parameter, 'O' output, 'T' arena temp, 'C' constant. */
typedef struct memid {
    int kind;
    int64_t a, n;
} memid;

static memid mem_of(const ot_slot *s) {
    switch (s->kind) {
    case OT_SLOT_PARAMETER: return (memid){'P', s->number, s->nbytes};
    case OT_SLOT_OUTPUT:
        if (s->alias_param >= 0) return (memid){'P', s->alias_param, s->nbytes};
        return (memid){'O', s->number, s->nbytes};
    case OT_SLOT_TEMP: return (memid){'T', s->offset, s->nbytes};
    default: return (memid){'C', (int64_t)(intptr_t)s->data, s->nbytes};
    }
}

/* alias[q] per input: the output whose memory input q is, else -1; false when an input and an
 * output share memory in a way one loop cannot handle (partial overlap, different sizes). */
static bool kernel_alias(const ot_executable *e, const ot_kernel *kn, int *alias) {
    for (int q = 0; q < kn->ninputs; q++) {
        alias[q] = -1;
        memid a = mem_of(&e->s[kn->inputs[q]]);
        for (int r = 0; r < kn->noutputs; r++) {
            memid b = mem_of(&e->s[kn->outputs[r]]);
            if (a.kind != b.kind) continue;
            if (a.kind == 'T') {
                bool overlap = a.n > 0 && b.n > 0 && a.a < b.a + b.n && b.a < a.a + a.n;
                if (!overlap) continue;
                if (a.a != b.a || a.n != b.n) return false;
            } else if (a.a != b.a) {
                continue;
            } else if (a.n != b.n) {
                return false;
            }
            alias[q] = r;
        }
    }
    return true;
}

/* cg_kernel_desc.linear: for a loop fusion whose fused parameters are its array inputs, one to
 * one, the parameters every path from which to the outputs keeps the element index */
static uint64_t kernel_linear(const ot_kernel *kn) {
    const ot_instr *i = kn->instr;
    ot_computation *fc = i->called[0];
    if (i->attrs->fusion_kind != OT_FUSION_LOOP || fc->nparams != kn->ninputs ||
        i->noperands != kn->ninputs)
        return 0;
    for (int q = 0; q < i->noperands; q++)
        if (i->operands[q]->shape.kind != OT_IR_ARRAY) return 0;
    int64_t flops;
    uint64_t linear;
    cc_fusion_analysis(fc, &flops, &linear);
    return linear;
}

static ot_status build(ot_executable *e, const ot_compile_options *o) {
    cg_options co = {o->native == OT_NATIVE_ON    ? CG_ON
                     : o->native == OT_NATIVE_OFF ? CG_OFF
                                                  : CG_AUTO,
                     o->native_unit_bytes, o->native_cc};
    if (co.mode == CG_OFF) return OT_OK; /* no descriptions either: off costs nothing */
    int nk = (int)e->nk;
    int64_t nio = 0;
    for (int k = 0; k < nk; k++) nio += e->k[k].ninputs + e->k[k].noutputs;
    cg_kernel_desc *d = ot_calloc((size_t)(nk ? nk : 1), sizeof *d);
    int *alias = ot_malloc((size_t)(nio ? nio : 1) * sizeof *alias);
    int64_t *bytes = ot_malloc((size_t)(nio ? nio : 1) * sizeof *bytes);
    ot_status st = OT_OK;
    if (!d || !alias || !bytes) st = ot_error(OT_ERR_OUT_OF_MEMORY, "codegen: out of memory");
    int64_t at = 0;
    for (int k = 0; k < nk && st == OT_OK; k++) {
        const ot_kernel *kn = &e->k[k];
        int *al = alias + at;
        int64_t *ib = bytes + at, *ob = ib + kn->ninputs;
        at += kn->ninputs + kn->noutputs;
        if (kn->kind != OT_KERNEL_FUSION || !kn->instr || kn->instr->ncalled != 1) continue;
        if (!kernel_alias(e, kn, al)) continue;
        for (int q = 0; q < kn->ninputs; q++) ib[q] = e->s[kn->inputs[q]].nbytes;
        for (int r = 0; r < kn->noutputs; r++) ob[r] = e->s[kn->outputs[r]].nbytes;
        d[k] =
            (cg_kernel_desc){kn->instr->called[0], kn->name, kn->ninputs, kn->noutputs, al, ib, ob,
                             kernel_linear(kn)};
    }
    if (st == OT_OK) st = cg_program_build(d, nk, &co, &e->native);
    ot_free(d);
    ot_free(alias);
    ot_free(bytes);
    return st;
}

void cc_native_stage(ot_executable *e, const ot_compile_options *o) {
    cg_program_free(e->native);
    e->native = NULL;
    uint64_t t0 = ot_now_ns();
    if (build(e, o) != OT_OK) {
        ot_log(OT_LOG_WARN, "codegen: %s; fusions run in the interpreter", ot_last_error());
        ot_clear_error();
    }
    e->native_ns = ot_now_ns() - t0;
}

const cg_program *cc_executable_native(const ot_executable *e) {
    return e ? e->native : NULL;
}

bool ot_executable_kernel_native(const ot_executable *e, int k) {
    return e && e->native && k >= 0 && k < ot_executable_kernel_count(e) && cg_native(e->native, k);
}

void ot_executable_native_stats(const ot_executable *e, ot_native_stats *out) {
    memset(out, 0, sizeof *out);
    if (!e) return;
    cg_stats s;
    cg_program_stats(e->native, &s);
    out->kernels = s.nnative;
    out->units = s.nunits;
    out->units_compiled = s.ncompiled;
    out->units_cached = s.ncached;
    out->seconds = (double)e->native_ns * 1e-9;
    out->cc_cpu_seconds = (double)s.cc_cpu_ns * 1e-9;
}
