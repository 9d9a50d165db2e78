/*
 * The training-step simulator: roofline compute per kernel, the pod's collective cost model for
 * the gradients, memory per chip, checkpoint goodput (docs/simulate.md).
 */
#include "optitpu/sim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "optitpu/core.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"

/* ---- device presets --------------------------------------------------------------------------
 * Per-chip figures from Google Cloud's TPU pages (docs/simulate.md lists the URLs):
 *   v4:  275 TFLOP/s bf16 or int8, HBM2 32 GiB at 1200 GB/s, 4 chips per host;
 *   v5e: 197 TFLOP/s bf16, 393 TOP/s int8, HBM2 16 GB at 819 GB/s, 8 chips per host;
 *   v5p: 459 TFLOP/s bf16, HBM2e 95 GB at 2765 GB/s, 4 chips per host.
 * f32 dots are taken at JAX's default precision on TPU (one bf16 pass), so at the bf16 peak.
 * Not published, so assumptions named in the docs: the launch cost (1 us per kernel) and the
 * checkpoint bandwidth per host (1 GB/s write, 2 GB/s read). */
typedef struct {
    const char *name;
    double bf16_tflops, int8_tops, hbm_gbs, hbm_gb;
    int chips_per_host;
} tpu_spec;

static const tpu_spec tpu_specs[] = {
    {"v4", 275, 275, 1200, 32 * 1.073741824, 4},
    {"v5e", 197, 393, 819, 16, 8},
    {"v5p", 459, 459, 2765, 95, 4},
};

ot_status ot_sim_device_preset(const char *name, ot_sim_device *out) {
    if (!name || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "sim: NULL device name or output");
    size_t len = strcspn(name, "-");
    for (size_t i = 0; i < sizeof tpu_specs / sizeof tpu_specs[0]; i++) {
        const tpu_spec *s = &tpu_specs[i];
        if (strlen(s->name) != len || strncmp(s->name, name, len) != 0) continue;
        memset(out, 0, sizeof *out);
        snprintf(out->name, sizeof out->name, "%s", s->name);
        out->peak_flops_bf16 = out->peak_flops_f32 = s->bf16_tflops * 1e12;
        out->peak_flops_int8 = s->int8_tops * 1e12;
        out->hbm_bytes_per_s = s->hbm_gbs * 1e9;
        out->hbm_capacity_bytes = s->hbm_gb * 1e9;
        out->launch_s = 1e-6;
        out->chips_per_host = s->chips_per_host;
        out->ckpt_write_bytes_per_s = 1e9;
        out->ckpt_read_bytes_per_s = 2e9;
        return OT_OK;
    }
    return ot_error(OT_ERR_INVALID_ARGUMENT,
                    "sim: no device model '%s' (v4, v5e, v5p; 'host' is measured on this machine)",
                    name);
}

/* The share of a core each of n busy device threads gets (1 for chips of their own). */
static double core_share(const ot_sim_device *d, int n) {
    if (!d->shared_host || n < 1) return 1;
    double c = n <= 8 ? d->core_share[n] : d->core_share[8] * 8.0 / n;
    return c > 0 && c <= 1 ? c : 1;
}

void ot_sim_device_host_from(const ot_sim_host_calibration *cal, int devices, ot_sim_device *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "host");
    out->peak_flops_f32 = out->peak_flops_bf16 = out->peak_flops_int8 = cal->dot_flops;
    out->hbm_bytes_per_s = cal->stream_bytes_per_s;
    out->hbm_capacity_bytes = INFINITY; /* host memory: no per-device capacity */
    out->launch_s = cal->launch_s;
    out->chips_per_host = 1 << 30; /* one process writes the checkpoint */
    out->ckpt_write_bytes_per_s = cal->write_bytes_per_s;
    out->ckpt_read_bytes_per_s = cal->read_bytes_per_s;
    out->shared_host = true;
    out->cores = cal->cores > 0 ? cal->cores : 1;
    for (int k = 1; k <= 8; k++) out->core_share[k] = cal->core_share[k];
    int n = devices < 1 ? 1 : devices;
    /* each member copies on its own thread, at its share of a core, over one memory bus */
    double bw = cal->memcpy_bytes_per_s * core_share(out, n);
    if (cal->memcpy_all_bytes_per_s > 0 && bw > cal->memcpy_all_bytes_per_s / n)
        bw = cal->memcpy_all_bytes_per_s / n;
    out->shm_cost.alpha_us = n >= 2 ? cal->alpha_s[n < 8 ? n : 8] * 1e6 : 0;
    out->shm_cost.gbytes_per_s = bw / 1e9;
    out->shm_tail_alpha_us = n >= 2 ? cal->tail_alpha_s[n < 8 ? n : 8] * 1e6 : 0;
}

void ot_sim_device_host_rates(const ot_sim_host_rates *r, const ot_sim_host_calibration *cal,
                              ot_sim_device *out) {
    ot_sim_device_host_from(cal, r->devices, out);
    /* the rates were measured with every device thread running: their share is in them */
    for (int k = 1; k <= 8; k++) out->core_share[k] = 1;
    out->peak_flops_f32 = out->peak_flops_bf16 = out->peak_flops_int8 = r->dot_flops;
    out->hbm_bytes_per_s = r->mem_bytes_per_s;
    out->launch_s = r->launch_s;
    out->cache_bytes = r->cache_limit_bytes;
    out->cache_flops_f32 = r->cache_flops;
    out->cache_bytes_per_s = r->cache_bytes_per_s;
    out->transfer_s = r->transfer_s;
    out->interp_s = r->interp_s;
    out->pool_s = r->pool_s;
    out->copy_bytes_per_s = r->copy_bytes_per_s;
    /* a member's copy reads each byte once and writes it once */
    out->shm_cost.alpha_us = r->devices >= 2 ? r->alpha_s * 1e6 : 0;
    out->shm_cost.gbytes_per_s = r->mem_bytes_per_s / 2 / 1e9;
    out->cache_shm_bytes_per_s = r->copy_bytes_per_s / 2;
    out->shm_cache_bytes = r->llc_bytes;
}

void ot_sim_device_host_probe(const ot_sim_host_probe *p, ot_sim_device *d) {
    d->pool_points = OT_SIM_POOL_POINTS;
    d->pool_threads = p->pool_threads;
    d->pool_speedup = p->pool_speedup;
    for (int i = 0; i < OT_SIM_POOL_POINTS; i++) {
        d->pool_gap_s[i] = p->pool_gap_s[i];
        d->pool_handoff_s[i] = p->pool_handoff_s[i];
        d->pool_handoff_cpu_s[i] = p->pool_handoff_cpu_s[i];
    }
    for (int c = 0; c < OT_SIM_OP_CLASSES; c++) d->op_s[c] = p->op_s[c];
    d->ndots = p->ndots < OT_SIM_MAX_DOTS ? p->ndots : OT_SIM_MAX_DOTS;
    memcpy(d->dots, p->dots, sizeof(ot_sim_dot_rate) * (size_t)d->ndots);
    d->nfusions = p->nfusions < OT_SIM_MAX_FUSIONS ? p->nfusions : OT_SIM_MAX_FUSIONS;
    memcpy(d->fusions, p->fusions, sizeof(ot_sim_fusion_cost) * (size_t)d->nfusions);
    d->avail = p->avail > 0 && p->avail <= 1 ? p->avail : 1;
    if (p->cores > 0) d->cores = p->cores;
    /* one thread's rates (other processes' load in avail, not in them) */
    d->launch_s = p->launch_s;
    d->exec_s = p->exec_s;
    d->peak_flops_f32 = d->peak_flops_bf16 = d->peak_flops_int8 = p->dot1_flops;
    d->cache_flops_f32 = p->dot1_flops;
    d->interp_s = p->interp_s;
    if (p->cache_bytes_per_s > 0) d->cache_bytes_per_s = p->cache_bytes_per_s;
    for (int k = 1; k <= 8; k++) d->core_share[k] = 1;
}

/* ---- compute ----------------------------------------------------------------------------------
 */

static double kernel_peak(const ot_sim_device *d, ot_dtype dt) {
    switch (dt) {
    case OT_BF16:
    case OT_F16: return d->peak_flops_bf16;
    case OT_S8:
    case OT_U8: return d->peak_flops_int8;
    default: return d->peak_flops_f32;
    }
}

/* An interpreted fusion's work: its output elements times the fused computation's
 * instructions (parameters not counted). */
static double interp_work(const ot_executable *e, const ot_kernel *kn) {
    double elems = 0;
    for (int q = 0; q < kn->noutputs; q++)
        elems += (double)ot_shape_numel_unchecked(&ot_executable_slot(e, kn->outputs[q])->shape);
    const ot_computation *f = kn->instr && kn->instr->ncalled > 0 ? kn->instr->called[0] : NULL;
    double ops = f ? (double)(f->ninstrs - f->nparams) : 1;
    return elems * (ops > 1 ? ops : 1);
}

/* ---- the host's kernel model (pool_points > 0) ----------------------------------------------
 * One thread's work per kernel from measured costs, the runtime's pool hand-off by the gap since
 * the pool last ran, and the step's three bounds (ot_sim_run). */

uint64_t ot_sim_dot_key(const ot_executable *e, int k) {
    const ot_kernel *kn = ot_executable_kernel(e, k);
    if (!kn || kn->opcode != OT_OP_DOT || !kn->instr || kn->instr->noperands != 2 ||
        !kn->instr->attrs->dot)
        return 0;
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the shapes and dimension numbers */
#define MIX(v) (h = (h ^ (uint64_t)(int64_t)(v)) * 1099511628211ull)
    for (int o = 0; o < 2; o++) {
        const ot_shape *sh = &kn->instr->operands[o]->shape.array;
        MIX(sh->dtype);
        MIX(sh->rank);
        for (int i = 0; i < sh->rank; i++) MIX(sh->dims[i]);
    }
    const ot_dot_dims *dd = kn->instr->attrs->dot;
    MIX(dd->nbatch);
    MIX(dd->ncontract);
    for (int i = 0; i < dd->nbatch; i++) MIX(dd->lhs_batch[i]), MIX(dd->rhs_batch[i]);
    for (int i = 0; i < dd->ncontract; i++) MIX(dd->lhs_contract[i]), MIX(dd->rhs_contract[i]);
#undef MIX
    return h ? h : 1;
}

uint64_t ot_sim_fusion_key(const ot_executable *e, int k) {
    const ot_kernel *kn = ot_executable_kernel(e, k);
    if (!kn || kn->kind != OT_KERNEL_FUSION || !kn->instr || kn->instr->ncalled < 1 ||
        !ot_executable_kernel_native(e, k))
        return 0;
    ot_hlo_print_options po = ot_hlo_print_options_default();
    po.metadata = false;
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the fused instructions' text */
    for (const ot_instr *i = kn->instr->called[0]->first; i; i = i->next) {
        char *t = ot_hlo_print_instr(i, &po);
        if (!t) return 0;
        for (const char *c = t; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
        h = (h ^ '\n') * 1099511628211ull;
        ot_free(t);
    }
    return h ? h : 1;
}

static int op_class(const char *op) {
    static const char *const free_ops[] = {"parameter", "constant",          "broadcast", "reshape",
                                           "bitcast",   "get-tuple-element", "tuple"};
    static const char *const cv[] = {"convert"};
    static const char *const ex[] = {"exponential", "exponential-minus-one", "tanh", "logistic"};
    static const char *const lg[] = {"log",   "log-plus-one", "power", "sine", "cosine",
                                     "atan2", "erf",          "tan",   "cbrt"};
    static const char *const dv[] = {"divide", "sqrt", "rsqrt", "remainder"};
#define IN(list)                                                                                   \
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)                                      \
        if (!strcmp(op, list[i]))
    IN(free_ops) return -1;
    IN(cv) return OT_SIM_OP_CONVERT;
    IN(ex) return OT_SIM_OP_EXP;
    IN(lg) return OT_SIM_OP_LOG;
    IN(dv) return OT_SIM_OP_DIVIDE;
#undef IN
    if (!strcmp(op, "reduce")) return OT_SIM_OP_REDUCE;
    return OT_SIM_OP_ARITH;
}

static bool has_reduce(const ot_computation *f) {
    for (const ot_instr *i = f->first; i; i = i->next)
        if (i->opcode == OT_OP_REDUCE) return true;
    return false;
}

/* A native fusion's work at the measured per-element costs: every fused instruction's elements
 * (a reduce's: its input's) times its class's cost. */
static double fused_ops_s(const ot_sim_device *d, const ot_kernel *kn) {
    const ot_computation *f = kn->instr && kn->instr->ncalled > 0 ? kn->instr->called[0] : NULL;
    if (!f) return 0;
    double t = 0;
    bool reduced = has_reduce(f);
    for (const ot_instr *i = f->first; i; i = i->next) {
        int c = op_class(ot_opcode_name(i->opcode));
        if (c < 0) continue;
        if (c == OT_SIM_OP_CONVERT && reduced) c = OT_SIM_OP_CONVERT_REDUCED;
        const ot_instr *src = c == OT_SIM_OP_REDUCE && i->noperands > 0 ? i->operands[0] : i;
        if (src->shape.kind != OT_IR_ARRAY) continue;
        t += (double)ot_shape_numel_unchecked(&src->shape.array) * d->op_s[c];
    }
    return t;
}

/* Whether the host runtime hands kernel k to its pool of `threads` threads: a dot by the fast
 * GEMM's own rule (ot_host_dot_splits: more than one task, e.g. not a
 * 128x128x10 product, one tile run inline whatever its multiply-adds); a fusion with native
 * code by its own rule, more iterations than one piece of its loop (an Adam update of a
 * 32768-element tensor, 640 KiB touched, runs inline); other kernels from cache_bytes touched
 * (ot_host_inline_bytes). */
static bool host_pooled(const ot_sim_device *d, const ot_executable *e, int k, double kb,
                        int threads) {
    const ot_kernel *kn = ot_executable_kernel(e, k);
    if (kn->opcode == OT_OP_DOT) return ot_host_dot_splits(e, k, threads);
    if (kn->kind == OT_KERNEL_FUSION && ot_executable_kernel_native(e, k))
        return ot_executable_kernel_native_splits(e, k);
    return kb >= d->cache_bytes;
}

/* One thread's work of kernel k (seconds, other processes' load included). */
static double host_own_s(const ot_sim_device *d, const ot_executable *e, int k, double scale,
                         bool pooled, double *flops) {
    const ot_kernel *kn = ot_executable_kernel(e, k);
    double kf = (double)kn->flops * scale;
    double kb = (double)(kn->bytes_read + kn->bytes_written) * scale;
    double bw = pooled || !(d->cache_bytes_per_s > 0) ? d->hbm_bytes_per_s : d->cache_bytes_per_s;
    double tb = bw > 0 ? kb / bw : 0, t = 0;
    bool native = ot_executable_kernel_native(e, k);
    if (kn->opcode == OT_OP_DOT) {
        double rate = 0;
        uint64_t key = ot_sim_dot_key(e, k);
        for (int i = 0; i < d->ndots && i < OT_SIM_MAX_DOTS; i++)
            if (d->dots[i].key == key) rate = d->dots[i].flops_per_s;
        if (!(rate > 0))
            rate = pooled || !(d->cache_flops_f32 > 0) ? d->peak_flops_f32 : d->cache_flops_f32;
        t = rate > 0 ? kf / rate : 0;
    } else if (kn->kind == OT_KERNEL_FUSION && native) {
        /* measured alone if probed, else the sum of its instructions' class costs */
        double m = 0;
        uint64_t key = d->nfusions > 0 ? ot_sim_fusion_key(e, k) : 0;
        for (int i = 0; key && i < d->nfusions && i < OT_SIM_MAX_FUSIONS; i++)
            if (d->fusions[i].key == key) m = d->fusions[i].s;
        t = (m > 0 ? m : fused_ops_s(d, kn)) * scale;
    } else if (kn->kind == OT_KERNEL_FUSION && d->interp_s > 0) {
        t = interp_work(e, kn) * scale * d->interp_s;
    } else {
        double peak = pooled || !(d->cache_flops_f32 > 0) ? d->peak_flops_f32 : d->cache_flops_f32;
        t = peak > 0 ? kf / peak : 0;
    }
    if (tb > t) t = tb;
    if (flops) *flops = kf;
    return t;
}

/* The hand-off of a pooled kernel after `gap` seconds of other work (linear between the measured
 * gaps, clamped at both ends). */
static double host_handoff_s(const ot_sim_device *d, const double *h, double gap) {
    int n = d->pool_points < OT_SIM_POOL_POINTS ? d->pool_points : OT_SIM_POOL_POINTS;
    if (n < 1) return d->pool_s;
    if (gap <= d->pool_gap_s[0]) return h[0];
    for (int i = 1; i < n; i++)
        if (gap <= d->pool_gap_s[i]) {
            double x = (gap - d->pool_gap_s[i - 1]) / (d->pool_gap_s[i] - d->pool_gap_s[i - 1]);
            return h[i - 1] + x * (h[i] - h[i - 1]);
        }
    return h[n - 1];
}

typedef struct {
    double path, cpu, pool; /* one device's path, its CPU work, its kernels' time on the pool */
    double gap;             /* since the pool last ran */
    /* its kernels' time on a pool that never rests: each meets the pool right after another
     * device's kernel (gap 0), as when a process's devices take turns on it without a pause */
    double pool_busy;
    /* its CPU when the cores never rest (every hand-off at gap 0): what it takes from the other
     * runnable threads. A pool woken after a pause spins its window when the run is over (the
     * probe's CPU after a long gap holds it); that spinning runs on a core nothing else wanted,
     * and where the cores bound the step, pooled kernels meet the pool back to back. */
    double cpu_busy;
} host_walk;

/* Kernel k on the path of w (kernels walked in order): its time, launch included. */
static double host_kernel_s(const ot_sim_device *d, const ot_executable *e, int k, double scale,
                            host_walk *w, double *flops) {
    const ot_kernel *kn = ot_executable_kernel(e, k);
    double kb = (double)(kn->bytes_read + kn->bytes_written) * scale;
    bool pooled = d->pool_threads > 1 && host_pooled(d, e, k, kb, d->pool_threads);
    double own = host_own_s(d, e, k, scale, pooled, flops);
    double launch = d->launch_s, t = own;
    const ot_sim_dot_rate *dr = NULL; /* this dot shape measured through the pool */
    for (int i = 0;
         pooled && scale == 1 && kn->opcode == OT_OP_DOT && i < d->ndots && i < OT_SIM_MAX_DOTS;
         i++)
        if (d->dots[i].key == ot_sim_dot_key(e, k) && d->dots[i].pool_s[0] > 0) dr = &d->dots[i];
    if (dr) {
        /* its hand-off, both threads' share of the work and the waits between them, as measured
         * after the gap (whatever the pool's threads do in them: spin, sleep, share a core) */
        t = host_handoff_s(d, dr->pool_s, w->gap);
        w->cpu += host_handoff_s(d, dr->pool_cpu_s, w->gap) + launch;
        w->cpu_busy += host_handoff_s(d, dr->pool_cpu_s, 0) + launch;
        w->pool += t + launch;
        w->pool_busy += host_handoff_s(d, dr->pool_s, 0) + launch;
        w->gap = 0;
        w->path += t + launch;
        return t + launch;
    }
    if (pooled) {
        /* the caller works alone until the pool's threads wake (half the measured hand-off:
         * their wake-up, then the caller's when it went to sleep waiting), then they share */
        double sp = d->pool_speedup > 1 ? d->pool_speedup : 1;
        w->cpu += host_handoff_s(d, d->pool_handoff_cpu_s, w->gap);
        w->cpu_busy += host_handoff_s(d, d->pool_handoff_cpu_s, 0);
        for (int busy = 0; busy < 2; busy++) {
            double h = host_handoff_s(d, d->pool_handoff_s, busy ? 0 : w->gap);
            double tk = own > h / 2 ? h / 2 + (own - h / 2) / sp : h / 2;
            if (tk < h) tk = h;
            if (busy)
                w->pool_busy += tk + launch;
            else
                t = tk;
        }
        w->pool += t + launch;
        w->gap = 0;
    } else {
        w->gap += t + launch;
    }
    w->cpu += own + launch;
    w->cpu_busy += own + launch;
    w->path += t + launch;
    return t + launch;
}

/* Every kernel of e in order, the pool last run `gap` before the executable starts (INFINITY:
 * asleep). */
static host_walk host_walk_gap(const ot_sim_device *d, const ot_executable *e, double scale,
                               int upto, double *kernel_s, double *flops, double gap) {
    host_walk w = {d->exec_s, d->exec_s, 0, gap, 0, d->exec_s};
    double f = 0;
    int n = ot_executable_kernel_count(e);
    for (int k = 0; k < n && (upto < 0 || k <= upto); k++) {
        double kf = 0, t = host_kernel_s(d, e, k, scale, &w, &kf);
        if (k == upto && kernel_s) *kernel_s = t;
        f += kf;
        if (k == upto && flops) *flops = kf;
    }
    if (upto < 0 && flops) *flops = f;
    return w;
}

/* e run once on its own: the pool asleep when it starts */
static host_walk host_walk_exe(const ot_sim_device *d, const ot_executable *e, double scale,
                               int upto, double *kernel_s, double *flops) {
    return host_walk_gap(d, e, scale, upto, kernel_s, flops, INFINITY);
}

double ot_sim_host_cpu_s(const ot_sim_device *d, const ot_executable *e, double scale) {
    return d->pool_points > 0 ? host_walk_exe(d, e, scale, -1, NULL, NULL).cpu : 0;
}

double ot_sim_kernel_s(const ot_sim_device *d, const ot_executable *e, int k, double scale,
                       int share, double *flops) {
    if (d->pool_points > 0) {
        double t = 0;
        host_walk_exe(d, e, scale, k, &t, flops);
        return t;
    }
    double cs = core_share(d, share); /* a device thread runs this share of the time */
    const ot_kernel *kn = ot_executable_kernel(e, k);
    int32_t slot = kn->ninputs > 0 ? kn->inputs[0] : kn->noutputs > 0 ? kn->outputs[0] : -1;
    ot_dtype dt = slot >= 0 ? ot_executable_slot(e, slot)->shape.dtype : OT_F32;
    double kf = (double)kn->flops * scale;
    double kb = (double)(kn->bytes_read + kn->bytes_written) * scale;
    double peak = kernel_peak(d, dt) * cs, bw = d->hbm_bytes_per_s * cs, t = 0;
    /* the host runtime's pool (as many threads as cores), or the device's thread */
    bool pooled = d->cache_bytes > 0 ? host_pooled(d, e, k, kb, d->cores) : true;
    if (d->cache_bytes > 0 && pooled) t += d->pool_s / cs;
    if (!pooled) { /* on the device's thread, its data in the caches */
        if (d->cache_flops_f32 > 0) peak = d->cache_flops_f32 * cs;
        if (d->cache_bytes_per_s > 0) bw = d->cache_bytes_per_s * cs;
    }
    double tf = peak > 0 ? kf / peak : 0, tb = bw > 0 ? kb / bw : 0;
    if (tb > tf) tf = tb;
    if (d->interp_s > 0 && kn->kind == OT_KERNEL_FUSION && !ot_executable_kernel_native(e, k)) {
        double ti = interp_work(e, kn) * scale * d->interp_s / cs;
        if (ti > tf) tf = ti;
    }
    if (flops) *flops = kf;
    return t + tf + d->launch_s / cs;
}

double ot_sim_compute_s(const ot_sim_device *d, const ot_executable *e, double scale, int share,
                        double *flops) {
    if (d->pool_points > 0) return host_walk_exe(d, e, scale, -1, NULL, flops).path;
    double t = 0, f = 0;
    int n = ot_executable_kernel_count(e);
    for (int k = 0; k < n; k++) {
        double kf = 0;
        t += ot_sim_kernel_s(d, e, k, scale, share, &kf);
        f += kf;
    }
    if (flops) *flops = f;
    return t;
}

/* ---- communication ----------------------------------------------------------------------------
 */

double ot_sim_ring_allreduce_s(int n, double bytes, double link_bytes_per_s, double alpha_s) {
    if (n <= 1) return 0;
    return 2.0 * (n - 1) / n * bytes / link_bytes_per_s + 2.0 * (n - 1) * alpha_s;
}

/* A communicator that only answers the cost model (ot_coll_cost_us): its transport moves
 * nothing. With exchange_ptrs it is priced as shared memory, like the in-process world. */
static ot_status model_sendrecv(void *ctx, int to, const void *sbuf, size_t sbytes, int from,
                                void *rbuf, size_t rbytes, uint64_t deadline_ns) {
    (void)ctx, (void)to, (void)sbuf, (void)sbytes, (void)from, (void)rbuf, (void)rbytes;
    (void)deadline_ns;
    return ot_error(OT_ERR_FAILED_PRECONDITION, "sim: a cost-model communicator moves no data");
}
static ot_status model_exchange(void *ctx, void *mine, void **all, uint64_t deadline_ns) {
    (void)ctx, (void)mine, (void)all, (void)deadline_ns;
    return ot_error(OT_ERR_FAILED_PRECONDITION, "sim: a cost-model communicator moves no data");
}
static const ot_comm_vtable link_vt = {.name = "sim-links", .sendrecv = model_sendrecv};
static const ot_comm_vtable shm_vt = {
    .name = "sim-shm", .sendrecv = model_sendrecv, .exchange_ptrs = model_exchange};

static ot_status model_comm(const ot_sim_device *d, const ot_topology *t, int n, ot_comm **out) {
    bool shm = d->shared_host && !t;
    if (!shm && !t)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "sim: device '%s' needs a topology (only host devices share memory)",
                        d->name);
    OT_CHECK(ot_comm_create(shm ? &shm_vt : &link_vt, NULL, 0, n, out));
    if (shm) {
        ot_comm_set_cost_params(*out, d->shm_cost);
        return OT_OK;
    }
    ot_status s = ot_comm_set_topology(*out, t);
    if (s != OT_OK) {
        ot_comm_free(*out);
        *out = NULL;
    }
    return s;
}

int ot_sim_link_rings(const ot_topology *t) {
    if (!t) return 1;
    int axes = 0, n = ot_topology_size(t);
    bool torus = true;
    for (int i = 0; i < ot_topology_ndims(t); i++) {
        int d = ot_topology_dim(t, i);
        if (d <= 1) continue;
        axes++;
        if (!ot_topology_wraps(t, i) || d < 3) torus = false;
    }
    if (axes == 0) return 1;
    /* a torus of k axes (each >= 3, all wrapping) splits into k edge-disjoint Hamiltonian
     * cycles, each usable both ways */
    if (torus) return 2 * axes;
    int *ring = ot_malloc(sizeof(int) * (size_t)n);
    bool has = ring && ot_topology_ring(t, ring) == OT_OK;
    if (!has) ot_clear_error();
    ot_free(ring);
    return has ? 2 : 1; /* one ring, both directions */
}

/* Cost in seconds of one collective on the model communicator, its bytes split evenly over
 * `rings` rings of disjoint links that run at once; the chosen algorithm in *used. */
static ot_status coll_s(const ot_sim_device *d, ot_comm *m, bool shm, ot_coll_kind k,
                        ot_coll_algo a, size_t bytes, int rings, double *t, ot_coll_algo *used) {
    if (rings > 1) bytes = (bytes + (size_t)rings - 1) / (size_t)rings;
    if (shm && d->cache_shm_bytes_per_s > 0) {
        /* shared memory: blocks that stay in the caches move at their rate (the members' blocks
         * in half the last-level cache: the rest is the other processes' and the outputs') */
        ot_cost_params p = d->shm_cost;
        if ((double)bytes * ot_comm_size(m) <= d->shm_cache_bytes / 2)
            p.gbytes_per_s = d->cache_shm_bytes_per_s / 1e9;
        ot_comm_set_cost_params(m, p);
    }
    ot_coll_algo x = a == OT_ALGO_AUTO ? ot_coll_choose(m, k, bytes) : a;
    double us = ot_coll_cost_us(m, k, x, bytes);
    if (us < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "sim: %s does not implement %s on %d chips",
                        ot_coll_algo_name(x), ot_coll_kind_name(k), ot_comm_size(m));
    *t = us * 1e-6;
    if (used) *used = x;
    return OT_OK;
}

ot_status ot_sim_collective_s(const ot_sim_device *d, const ot_topology *t, int n,
                              ot_coll_kind kind, ot_coll_algo algo, size_t bytes, int rings,
                              double *seconds, ot_coll_algo *used) {
    if (!d || !seconds) return ot_error(OT_ERR_INVALID_ARGUMENT, "sim: NULL argument");
    if (t) n = ot_topology_size(t);
    if (n < 1) return ot_error(OT_ERR_INVALID_ARGUMENT, "sim: %d members", n);
    ot_comm *m;
    OT_CHECK(model_comm(d, t, n, &m));
    ot_status s = coll_s(d, m, d->shared_host && !t, kind, algo, bytes,
                         rings > 0 ? rings : ot_sim_link_rings(t), seconds, used);
    ot_comm_free(m);
    return s;
}

/* ---- goodput ----------------------------------------------------------------------------------
 */

double ot_sim_daly_interval_s(double delta, double m) {
    if (!(m > 0) || isinf(m)) return INFINITY;
    if (delta >= 2 * m) return m;
    double x = delta / (2 * m);
    return sqrt(2 * delta * m) * (1 + sqrt(x) / 3 + x / 9) - delta;
}

double ot_sim_useful_fraction(double tau, double delta, double r, double m) {
    if (!(tau > 0)) return 0;
    if (!(m > 0) || isinf(m)) return tau / (tau + delta);
    /* Daly: wall time = M e^(R/M) (e^((tau+delta)/M) - 1) per tau of work */
    return tau / (m * exp(r / m) * expm1((tau + delta) / m));
}

/* ---- the step ---------------------------------------------------------------------------------
 */

ot_sim_config ot_sim_config_default(void) {
    ot_sim_config c;
    memset(&c, 0, sizeof c);
    c.global_batch = 128;
    c.optimizer_states = 2;
    c.state_bytes = 4;
    c.optimizer_flops = 12;
    c.overlap = true;
    c.backward_fraction = 2.0 / 3.0;
    c.bucket_bytes = 25 << 20;
    c.algo = OT_ALGO_AUTO;
    return c;
}

void ot_sim_config_train_pipeline(ot_sim_config *c, int nparams) {
    c->host_transfers = 2 + (nparams + 2) + nparams + 2;
    c->host_copy_bytes = 2.0 * (2.0 * (double)c->input_bytes + 3.0 * (double)c->param_bytes);
}

static const double GiB = 1024.0 * 1024 * 1024;

ot_status ot_sim_run(const ot_sim_config *c, ot_sim_result *out) {
    if (!c || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "sim: NULL config or result");
    memset(out, 0, sizeof *out);
    int n = c->chips;
    if (c->topology) {
        int ts = ot_topology_size(c->topology);
        if (n != 0 && n != ts)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "sim: %d chips but topology %s has %d", n,
                            ot_topology_name(c->topology), ts);
        n = ts;
    } else if (!c->device.shared_host) {
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "sim: device '%s' needs a topology (only host devices share memory)",
                        c->device.name);
    }
    if (n < 1) return ot_error(OT_ERR_INVALID_ARGUMENT, "sim: %d chips", n);
    if (!c->step || c->step_batch < 1)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "sim: no step executable (step_batch %lld)",
                        (long long)c->step_batch);
    if (c->global_batch < 1 || c->global_batch % n != 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "sim: batch %lld is not divisible by the data-parallel degree %d "
                        "(%lld = %d x %lld + %lld)",
                        (long long)c->global_batch, n, (long long)c->global_batch, n,
                        (long long)(c->global_batch / n), (long long)(c->global_batch % n));
    if (c->state_bytes != 2 && c->state_bytes != 4)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "sim: state_bytes %d (4: f32, 2: bf16)",
                        c->state_bytes);
    if (c->param_bytes < 0 || c->optimizer_states < 0 || c->bucket_bytes < 0 || c->rings < 0 ||
        c->host_transfers < 0 || !(c->host_copy_bytes >= 0) || !(c->host_work_s >= 0) ||
        c->ckpt_every < 0 || c->mtbf_hours < 0 || c->restart_s < 0 ||
        !(c->backward_fraction >= 0 && c->backward_fraction <= 1))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "sim: negative size, interval or MTBF, or a backward fraction outside "
                        "[0, 1] (%g)",
                        c->backward_fraction);
    int P = c->processes > 1 ? c->processes : 1;
    if (P > 1 && (!c->device.shared_host || c->topology || n % P != 0 || c->shard_optimizer ||
                  !(c->process_bytes_per_s > 0) || !(c->process_alpha_s >= 0)))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "sim: %d processes need host devices without a topology, chips (%d) a "
                        "multiple of them, no sharded optimizer and a transport cost (%g s + "
                        "%g B/s)",
                        P, n, c->process_alpha_s, c->process_bytes_per_s);
    const ot_sim_device *d = &c->device;
    double cs = core_share(d, n);
    out->chips = n;
    out->per_chip_batch = c->global_batch / n;
    double scale = (double)out->per_chip_batch / (double)c->step_batch;
    out->kernels = ot_executable_kernel_count(c->step);
    /* optimizer: one fused elementwise update over this chip's parameters (f32) */
    double G = (double)c->param_bytes;
    double elems = G / 4.0;
    double local = c->shard_optimizer ? ceil(elems / n) : elems;
    if (c->update) {
        /* the compiled update's kernels; a sharded update runs 1/N of each */
        out->optimizer_s =
            ot_sim_compute_s(d, c->update, c->shard_optimizer ? 1.0 / n : 1.0, n, NULL);
    } else if (local > 0) {
        /* parameter and gradient read, parameter written, each state read and written */
        double bytes = local * (12.0 + 2.0 * c->optimizer_states * c->state_bytes);
        double tf = local * c->optimizer_flops / (d->peak_flops_f32 * cs);
        double tb = bytes / (d->hbm_bytes_per_s * cs);
        out->optimizer_s = (tf > tb ? tf : tb) + d->launch_s / cs;
    }
    /* the host pipeline: measured as a whole (one device thread's work), or priced as buffers
     * on and off the device and copies in host memory */
    if (c->host_work_s > 0) {
        out->host_s = c->host_work_s;
    } else {
        if (c->host_transfers > 0) out->host_s += (double)c->host_transfers * d->transfer_s / cs;
        if (c->host_copy_bytes > 0 && d->copy_bytes_per_s > 0)
            out->host_s += c->host_copy_bytes / (d->copy_bytes_per_s * cs);
    }
    double host_cpu = out->host_s, optimizer_cpu = out->optimizer_s;
    /* Processes that outnumber the cores stay runnable while they wait for each other (the MPI
     * transport polls, yielding between polls, and a yielding thread keeps its fair share of a
     * core: ot_comm_process_waits_sleep), so when they and other processes' runnable threads
     * outnumber the cores, a device thread gets cores / threads of a core for all of its step:
     * the optimizer and the host pipeline, not only the forward and backward kernels (the cores
     * bound below). Processes that fit the cores sleep while they wait, as the devices of one
     * process do, and the update and host pipeline run on cores the others left. */
    if (d->pool_points > 0 && P > 1 && !ot_comm_process_waits_sleep(P, d->cores)) {
        double C = d->cores > 0 ? d->cores : 1, a = d->avail > 0 && d->avail <= 1 ? d->avail : 1;
        double threads = n + (C / a - C);
        if (threads > C) {
            out->optimizer_s *= threads / C;
            out->host_s *= threads / C;
        }
    }
    /* Steps run back to back: the pool last ran in the previous step, the end of the step's
     * walk after its last pooled kernel plus the exposed communication, the optimizer and the
     * host pipeline before the next step; priced once with the pool asleep, then again with
     * that gap (the host's kernel model; a step without pooled kernels gives the same). */
    double bucket = c->bucket_bytes > 0 ? (double)c->bucket_bytes : G;
    double start_gap = INFINITY, end_gap = INFINITY;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            if (!(d->pool_points > 0) || !isfinite(end_gap)) break;
            start_gap = end_gap + out->exposed_comm_s + out->optimizer_s + out->host_s;
        }
        out->compute_s = ot_sim_compute_s(d, c->step, scale, n, &out->flops);
        int P0 = c->processes > 1 ? c->processes : 1;
        if (d->pool_points > 0) {
            /* the host's kernel model: one device's path, every device's CPU work on the cores,
             * and each process's devices taking turns on its one pool */
            host_walk w = host_walk_gap(d, c->step, scale, -1, NULL, NULL, start_gap);
            end_gap = w.gap;
            out->path_s = w.path;
            /* the scheduler shares the cores among runnable threads: other processes' (as many as
             * leave each of `cores` busy threads avail of a core) and the n device threads */
            double C = d->cores > 0 ? d->cores : 1,
                   a = d->avail > 0 && d->avail <= 1 ? d->avail : 1;
            double others = C / a - C;
            out->cores_s = n + others > C ? w.cpu_busy * (n + others) / C : w.cpu_busy;
            /* one device a process: its own pool, at its own gaps (within its path); several:
             * while the pool is what bounds the step it never rests, so each pooled kernel meets
             * it right after another device's (its back-to-back time, gap 0) */
            out->pool_s = n / P0 > 1 ? (double)(n / P0) * w.pool_busy : w.pool;
            out->compute_s = out->path_s;
            snprintf(out->bound, sizeof out->bound, "path");
            if (out->cores_s > out->compute_s) {
                out->compute_s = out->cores_s;
                snprintf(out->bound, sizeof out->bound, "cores");
            }
            if (out->pool_s > out->compute_s) {
                out->compute_s = out->pool_s;
                snprintf(out->bound, sizeof out->bound, "pool");
            }
        }

        /* gradients in buckets, in the order the backward pass finishes them */
        int nb = G > 0 ? (int)ceil(G / bucket) : 0;
        out->buckets = nb;
        snprintf(out->algo, sizeof out->algo, "%s", n > 1 && nb ? "" : "none");
        double comm_end = 0, total = 0, gather = 0;
        int rings = c->rings > 0 ? c->rings : ot_sim_link_rings(c->topology);
        out->rings = rings;
        /* across processes: each process's devices in shared memory, then the processes */
        int members = n / P;
        if (P > 1 && nb > 0) snprintf(out->algo, sizeof out->algo, "processes");
        for (int b = 0; P > 1 && b < nb; b++) {
            double sz = b < nb - 1 ? bucket : G - bucket * (nb - 1);
            double t = c->process_alpha_s + sz / c->process_bytes_per_s;
            comm_end = (comm_end > out->compute_s ? comm_end : out->compute_s) + t;
            total += t;
        }
        if (members > 1 && nb > 0) {
            ot_comm *m;
            bool shm = d->shared_host && !c->topology;
            /* in one process the all-reduce after the last device is priced at the per-message
             * cost measured as steps meet it (rounds of pooled dots back to back: members woken
             * last by the tree wait for cores the first ones back took for their next step) */
            ot_sim_device dc = c->device;
            if (shm && P == 1 && d->pool_points > 0 && d->shm_tail_alpha_us > 0)
                dc.shm_cost.alpha_us = d->shm_tail_alpha_us;
            OT_CHECK(model_comm(&dc, c->topology, members, &m));
            ot_status s = OT_OK;
            double bwd_start = out->compute_s * (1 - c->backward_fraction);
            double done = 0, biggest = -1;
            for (int b = 0; b < nb && s == OT_OK; b++) {
                double sz = b < nb - 1 ? bucket : G - bucket * (nb - 1);
                done += sz;
                double t = 0;
                ot_coll_algo used = OT_ALGO_RING;
                if (c->shard_optimizer) {
                    size_t per = (size_t)ceil(sz / n); /* each member's block */
                    s = coll_s(&dc, m, shm, OT_COLL_REDUCE_SCATTER, c->algo, per, rings, &t, &used);
                } else {
                    s = coll_s(&dc, m, shm, OT_COLL_ALLREDUCE, c->algo, (size_t)sz, rings, &t,
                               &used);
                }
                if (s != OT_OK) break;
                if (sz > biggest) {
                    biggest = sz;
                    snprintf(out->algo, sizeof out->algo, "%s", ot_coll_algo_name(used));
                }
                double ready = c->overlap
                                   ? bwd_start + out->compute_s * c->backward_fraction * done / G
                                   : out->compute_s;
                comm_end = (comm_end > ready ? comm_end : ready) + t;
                total += t;
            }
            /* the updated parameter shards come back in one all-gather after the update */
            if (s == OT_OK && c->shard_optimizer)
                s = coll_s(&dc, m, shm, OT_COLL_ALLGATHER, OT_ALGO_AUTO, (size_t)ceil(G / members),
                           rings, &gather, NULL);
            ot_comm_free(m);
            if (s != OT_OK) return s;
        }
        out->comm_s = total + gather;
        /* the all-gather of updated parameters follows the optimizer: never hidden here */
        double tail = comm_end > out->compute_s ? comm_end - out->compute_s : 0;
        out->exposed_comm_s = tail + gather;
    }
    if (d->pool_points > 0) {
        host_walk w = host_walk_gap(d, c->step, scale, -1, NULL, NULL, start_gap);
        double upd = c->update ? ot_sim_host_cpu_s(d, c->update, c->shard_optimizer ? 1.0 / n : 1.0)
                               : optimizer_cpu;
        out->cpu_s = n * (w.cpu + upd + host_cpu); /* every device stages its own step */
    }
    out->step_s = out->compute_s + out->exposed_comm_s + out->optimizer_s + out->host_s;
    out->samples_per_s = out->step_s > 0 ? (double)c->global_batch / out->step_s : 0;

    /* memory per chip */
    out->mem_params = G;
    out->mem_grads = G + (n > 1 ? (bucket < G ? bucket : G) : 0);  /* + one fusion buffer */
    double state = G / 4.0 * c->state_bytes * c->optimizer_states; /* f32 parameters */
    out->mem_optimizer = state / (c->shard_optimizer ? n : 1);
    out->mem_activations = (double)ot_executable_arena_size(c->step) * scale;
    out->mem_inputs = (double)c->input_bytes * scale;
    out->mem_total = out->mem_params + out->mem_grads + out->mem_optimizer + out->mem_activations +
                     out->mem_inputs;
    out->mem_capacity = d->hbm_capacity_bytes;
    out->fits = out->mem_total <= out->mem_capacity;

    /* checkpoints and failures */
    out->ckpt_bytes = G + state;
    double writers = ceil((double)n / (d->chips_per_host > 0 ? d->chips_per_host : 1));
    out->ckpt_write_s = out->ckpt_bytes / writers / d->ckpt_write_bytes_per_s;
    out->ckpt_restore_s = out->ckpt_bytes / writers / d->ckpt_read_bytes_per_s;
    out->system_mtbf_s = c->mtbf_hours > 0 ? c->mtbf_hours * 3600.0 / n : INFINITY;
    double M = out->system_mtbf_s, delta = out->ckpt_write_s;
    double R = out->ckpt_restore_s + c->restart_s;
    double topt = ot_sim_daly_interval_s(delta, M);
    if (out->step_s > 0 && !isinf(topt)) {
        double k = round(topt / out->step_s);
        out->optimal_ckpt_every = k < 1 ? 1 : k;
        out->goodput_optimal =
            ot_sim_useful_fraction(out->optimal_ckpt_every * out->step_s, delta, R, M);
    } else {
        out->goodput_optimal = 1; /* no failures: checkpoints are not needed */
    }
    out->ckpt_every = c->ckpt_every > 0 ? (double)c->ckpt_every : out->optimal_ckpt_every;
    out->goodput = out->ckpt_every > 0
                       ? ot_sim_useful_fraction(out->ckpt_every * out->step_s, delta, R, M)
                       : out->goodput_optimal;
    if (!out->fits)
        return ot_error(OT_ERR_OUT_OF_MEMORY,
                        "sim: does not fit on %d chip%s: %.3f GiB per chip (parameters %.3f + "
                        "gradients and bucket %.3f + optimizer state %.3f + activations %.3f + "
                        "inputs %.3f) > %.3f GiB of HBM",
                        n, n == 1 ? "" : "s", out->mem_total / GiB, out->mem_params / GiB,
                        out->mem_grads / GiB, out->mem_optimizer / GiB, out->mem_activations / GiB,
                        out->mem_inputs / GiB, out->mem_capacity / GiB);
    return OT_OK;
}

/* ---- JSON -------------------------------------------------------------------------------------
 */

static int jnum(char *b, size_t n, const char *k, double v, bool last) {
    if (!isfinite(v)) return snprintf(b, n, "\"%s\":null%s", k, last ? "" : ",");
    return snprintf(b, n, "\"%s\":%.9g%s", k, v, last ? "" : ",");
}

ot_status ot_sim_result_json(const ot_sim_result *r, char **out) {
    if (!r || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "sim json: NULL argument");
    size_t cap = 2048, k = 0;
    char *b = ot_malloc(cap);
    if (!b) return ot_error(OT_ERR_OUT_OF_MEMORY, "sim json");
#define J(name, v) k += (size_t)jnum(b + k, cap - k, name, (double)(v), false)
    k += (size_t)snprintf(b + k, cap - k,
                          "{\"chips\":%d,\"algo\":\"%s\",\"bound\":\"%s\",\"fits\":%s,", r->chips,
                          r->algo, r->bound, r->fits ? "true" : "false");
    J("per_chip_batch", r->per_chip_batch);
    J("kernels", r->kernels);
    J("flops", r->flops);
    J("compute_s", r->compute_s);
    J("path_s", r->path_s);
    J("cores_s", r->cores_s);
    J("pool_s", r->pool_s);
    J("comm_s", r->comm_s);
    J("exposed_comm_s", r->exposed_comm_s);
    J("optimizer_s", r->optimizer_s);
    J("host_s", r->host_s);
    J("step_s", r->step_s);
    J("samples_per_s", r->samples_per_s);
    J("buckets", r->buckets);
    J("rings", r->rings);
    J("mem_params", r->mem_params);
    J("mem_grads", r->mem_grads);
    J("mem_optimizer", r->mem_optimizer);
    J("mem_activations", r->mem_activations);
    J("mem_inputs", r->mem_inputs);
    J("mem_total", r->mem_total);
    J("mem_capacity", r->mem_capacity);
    J("ckpt_bytes", r->ckpt_bytes);
    J("ckpt_write_s", r->ckpt_write_s);
    J("ckpt_restore_s", r->ckpt_restore_s);
    J("system_mtbf_s", r->system_mtbf_s);
    J("ckpt_every", r->ckpt_every);
    J("optimal_ckpt_every", r->optimal_ckpt_every);
    J("goodput", r->goodput);
#undef J
    k += (size_t)jnum(b + k, cap - k, "goodput_optimal", r->goodput_optimal, true);
    if (k + 2 > cap) {
        ot_free(b);
        return ot_error(OT_ERR_INTERNAL, "sim json: buffer too small");
    }
    b[k++] = '}';
    b[k] = 0;
    *out = b;
    return OT_OK;
}
