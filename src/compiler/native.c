/* The native-code stage: describes each loop fusion of an executable to src/codegen (its fused
 * computation, the buffer sizes, and which inputs are their outputs' memory) and keeps the
 * program it builds. What memory a slot is lives here, on the compiler's side: codegen sees
 * only the alias array. */
#include "executable_internal.h"

#include <stdio.h>
#include <stdlib.h>

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

/* Builds e's native program into *out under o's settings (all_sizes: AUTO without the size
 * threshold); *ncand: the fusions it could generate code for, whatever their size. */
static ot_status build(const ot_executable *e, const ot_compile_options *o, bool all_sizes,
                       cg_program **out, int *ncand) {
    cg_options co = {o->native == OT_NATIVE_ON    ? CG_ON
                     : o->native == OT_NATIVE_OFF ? CG_OFF
                                                  : CG_AUTO,
                     o->native_unit_bytes, o->native_cc, all_sizes};
    *out = NULL;
    *ncand = 0;
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
        ++*ncand;
    }
    if (st == OT_OK && *ncand > 0) st = cg_program_build(d, nk, &co, out);
    ot_free(d);
    ot_free(alias);
    ot_free(bytes);
    return st;
}

/* OPTITPU_CODEGEN_TIER_UP: the run that builds a module of small fusions (default 2, 0: never) */
static int64_t tier_up_run(void) {
    const char *s = getenv("OPTITPU_CODEGEN_TIER_UP");
    if (!s || !*s) return 2;
    char *end;
    long long v = strtoll(s, &end, 10);
    return *end || v < 0 ? 2 : v;
}

void cc_native_stage(ot_executable *e, const ot_compile_options *o) {
    cg_program_free(e->native);
    e->native = NULL;
    atomic_store(&e->tier_left, 0);
    uint64_t t0 = ot_now_ns();
    int ncand = 0;
    if (build(e, o, false, &e->native, &ncand) != OT_OK) {
        ot_log(OT_LOG_WARN, "codegen: %s; fusions run in the interpreter", ot_last_error());
        ot_clear_error();
    } else if (!e->native && ncand > 0 && o->native == OT_NATIVE_AUTO) {
        /* AUTO left every fusion to the interpreter (all below the size threshold, or no
         * compiler, or OPTITPU_CODEGEN=0: the tier-up's build finds the same then) */
        snprintf(e->native_cc, sizeof e->native_cc, "%s", o->native_cc ? o->native_cc : "");
        atomic_store(&e->tier_left, tier_up_run());
    }
    e->native_ns = ot_now_ns() - t0;
}

/* The tier-up's build, by the one caller that took the pending count to 0. */
static void tier_up_build(ot_executable *e) {
    ot_compile_options o = e->opts;
    o.native = OT_NATIVE_AUTO;
    o.native_cc = e->native_cc[0] ? e->native_cc : NULL;
    cg_program *p = NULL;
    int ncand = 0;
    uint64_t t0 = ot_now_ns();
    if (build(e, &o, true, &p, &ncand) != OT_OK) {
        ot_log(OT_LOG_DEBUG, "codegen tier-up: %s; fusions stay interpreted", ot_last_error());
        ot_clear_error();
        return;
    }
    if (!p) return;
    cg_stats cs;
    cg_program_stats(p, &cs);
    ot_log(OT_LOG_DEBUG, "codegen tier-up: %d fusions native after %.3f s", cs.nnative,
           (double)(ot_now_ns() - t0) * 1e-9);
    __atomic_store_n(&e->native, p, __ATOMIC_RELEASE);
}

void cc_executable_tier_up(const ot_executable *ce) {
    /* the pending tier-up and the program it publishes are the executable's mutable part beside
     * its scratch cache: synchronized by themselves (an atomic count, an atomic pointer) */
    ot_executable *e = (ot_executable *)ce;
    if (!e || atomic_load_explicit(&e->tier_left, memory_order_relaxed) <= 0) return;
    if (atomic_fetch_sub(&e->tier_left, 1) != 1) return; /* not the run that builds */
    tier_up_build(e);
}

bool ot_executable_tier_up(const ot_executable *ce) {
    ot_executable *e = (ot_executable *)ce;
    if (!e) return false;
    /* take the whole pending count at once: this call is then the one that builds (a run that
     * took it first builds instead, and this call only reports) */
    int64_t left = atomic_load(&e->tier_left);
    while (left > 0 && !atomic_compare_exchange_weak(&e->tier_left, &left, 0)) {
    }
    if (left > 0) tier_up_build(e);
    return cc_executable_native(e) != NULL;
}

const cg_program *cc_executable_native(const ot_executable *e) {
    return e ? __atomic_load_n(&e->native, __ATOMIC_ACQUIRE) : NULL;
}

bool ot_executable_kernel_native(const ot_executable *e, int k) {
    return e && e->native && k >= 0 && k < ot_executable_kernel_count(e) && cg_native(e->native, k);
}

bool ot_executable_kernel_native_splits(const ot_executable *e, int k) {
    return ot_executable_kernel_native(e, k) && cg_splits(e->native, k);
}

void ot_executable_native_stats(const ot_executable *e, ot_native_stats *out) {
    memset(out, 0, sizeof *out);
    if (!e) return;
    cg_stats s;
    cg_program_stats(cc_executable_native(e), &s);
    out->kernels = s.nnative;
    out->units = s.nunits;
    out->units_compiled = s.ncompiled;
    out->units_cached = s.ncached;
    out->seconds = (double)e->native_ns * 1e-9;
    out->cc_cpu_seconds = (double)s.cc_cpu_ns * 1e-9;
}
