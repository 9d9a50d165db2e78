/* Dispatch overhead: a program of 10,000 tiny kernels (f32[16] elementwise ops chained:
 * y = y + x, y = y * x, y = y - x, ...) compiled at -O0 so that every op stays one kernel, run
 * by ot_execute_on_host. ours: the fast kernels (each op written straight into its slot, on the
 * calling thread, no allocation); baseline: the same executable with reference_kernels (each op
 * evaluated into a fresh value, then copied). Figure: microseconds per kernel, medians of --reps
 * (default 7) runs after a warm-up; ratio = baseline / ours (> 1: ours is faster). Goal: <= 1 us.
 *   bench_dispatch [--json] [--reps N] [--kernels N] */
#include "optitpu/bench.h"
#include "optitpu/compiler.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    bool json = false;
    int reps = 7, nk = 10000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kernels") && i + 1 < argc)
            nk = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_dispatch [--json] [--reps N] [--kernels N]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (nk < 1) nk = 1;
    ot_module *m = ot_module_new("dispatch");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_shape s;
    ot_shape_make(&s, OT_F32, 1, (int64_t[]){16});
    ot_instr *x = ot_build_parameter(c, 0, s, "x"), *y = x;
    static const ot_opcode ops[] = {OT_OP_ADD, OT_OP_MULTIPLY, OT_OP_SUBTRACT, OT_OP_MAXIMUM};
    for (int k = 0; k < nk; k++) y = ot_build_binary(c, ops[k % 4], y, x);
    ot_computation_set_root(c, y);
    ot_module_set_entry(m, c);
    ot_compile_options o = ot_compile_options_default();
    o.opt_level = 0;
    ot_executable *exe = NULL;
    if (ot_module_finalize(m) != OT_OK || ot_compile(m, &o, &exe) != OT_OK) {
        fprintf(stderr, "bench_dispatch: %s\n", ot_last_error());
        ot_module_free(m);
        return 1;
    }
    int kernels = ot_executable_kernel_count(exe);
    int64_t an = ot_executable_arena_size(exe);
    void *arena = an ? ot_aligned_alloc(64, (size_t)an) : NULL;
    float xin[16], yout[16];
    for (int e = 0; e < 16; e++) xin[e] = 1.0f + (float)e / 64.0f;
    void *params[1] = {xin}, *outs[1] = {yout};
    double *ours = calloc((size_t)reps, sizeof *ours), *base = calloc((size_t)reps, sizeof *base);
    ot_run_options fast = ot_run_options_default(), ref = ot_run_options_default();
    ref.reference_kernels = true;
    int rc = 0;
    ot_run_result rf, rr;
    for (int r = -1; r < reps && rc == 0; r++) {
        uint64_t t0 = ot_now_ns();
        if (ot_execute_on_host(exe, arena, params, outs, &fast, 0, &rf) != OT_OK) rc = 1;
        uint64_t t1 = ot_now_ns();
        if (rc == 0 && ot_execute_on_host(exe, arena, params, outs, &ref, 0, &rr) != OT_OK) rc = 1;
        uint64_t t2 = ot_now_ns();
        if (r >= 0) {
            ours[r] = (double)(t1 - t0) / 1e3 / kernels;
            base[r] = (double)(t2 - t1) / 1e3 / kernels;
        }
    }
    if (rc) fprintf(stderr, "bench_dispatch: %s\n", ot_last_error());
    if (rc == 0 && rf.fast_kernels_run < nk) {
        fprintf(stderr, "bench_dispatch: only %d of %d kernels ran natively\n", rf.fast_kernels_run,
                kernels);
        rc = 1;
    }
    if (rc == 0) {
        char name[96];
        snprintf(name, sizeof name, "%d tiny kernels (f32[16] elementwise, -O0)", kernels);
        ot_bench_print_header(json);
        ot_bench_row row = {.bench = "dispatch",
                            .case_name = name,
                            .metric = "us/kernel",
                            .value = ot_bench_median(ours, (size_t)reps),
                            .baseline = "reference-kernel dispatch",
                            .baseline_value = ot_bench_median(base, (size_t)reps)};
        row.ratio = row.baseline_value / row.value;
        ot_bench_print(&row, json);
    }
    free(ours);
    free(base);
    ot_aligned_free(arena);
    ot_executable_free(exe);
    ot_module_free(m);
    return rc;
}
