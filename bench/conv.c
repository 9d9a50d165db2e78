/* Convolutions through compile -> execute against OpenBLAS on the equivalent GEMM, in the same
 * run: the convolutions of a small conv net's training step (scripts/xla_compare.py's "convnet
 * value_and_grad": 16x32x32x3 images, 3x3 convolutions to 32 then 64 features, a 2x2 max pool
 * between) — forward, input gradient and filter gradient, as JAX lowers them for NHWC/HWIO and
 * NCHW/OIHW — the suite's 3x3 16x32x32x64 -> 64 convolution in both layouts, and ResNet-style
 * layers at batch 1 (inference) and odd batches (3, 7): 3x3, 1x1, the 7x7/2 first layer, a
 * filter gradient; ViT's patch embedding (a 16x16 stride-16 window) in both layouts.
 * ours: the lone convolution compiled (-O2) and run by ot_execute_on_host (the fast convolution,
 * src/exec/fast_conv.c) on the default pool (OPTITPU_THREADS, else the CPU count). Baseline:
 * cblas_sgemm of the GEMM the convolution is — M = output positions (batch x spatial), N =
 * output features, K = kernel positions x input features — on operands of those sizes already
 * laid out, OpenBLAS set to the same number of threads. GFLOP/s = 2 M N K / time, medians of
 * --reps (default 5) after a warm-up, the sides interleaved rep by rep, each timed section
 * started when the process is idle (OpenBLAS's and the pool's workers asleep, as bench_dot);
 * a repetition of ours takes at least --rep-ms (default 5 ms: one convolution, started from
 * idle; 50 measures convolutions back to back, as a program's kernels run, bench_dot's
 * --rep-ms), the baseline the same count of GEMMs; ratio = ours / cblas_sgemm.
 *   bench_conv [--json] [--reps N] [--rep-ms MS] [--only TEXT] */
#include "optitpu/bench.h"
#include "optitpu/compiler.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"

#include <cblas.h>
#undef I
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct ccase {
    const char *name;
    const char *lhs, *rhs, *out, *window, *labels;
    int64_t m, n, k; /* the equivalent GEMM */
} ccase;

#define W3 "size=3x3 pad=1_1x1_1"
static const ccase k_cases[] = {
    {"NHWC conv1 forward", "f32[16,32,32,3]", "f32[3,3,3,32]", "f32[16,32,32,32]", W3,
     "b01f_01io->b01f", 16384, 32, 27},
    {"NHWC conv2 forward", "f32[16,16,16,32]", "f32[3,3,32,64]", "f32[16,16,16,64]", W3,
     "b01f_01io->b01f", 4096, 64, 288},
    {"NHWC conv2 input gradient", "f32[16,16,16,64]", "f32[3,3,32,64]", "f32[16,16,16,32]", W3,
     "b01f_01oi->b01f", 4096, 32, 576},
    {"NHWC conv1 filter gradient", "f32[16,32,32,3]", "f32[16,32,32,32]", "f32[3,3,3,32]",
     "size=32x32 pad=1_1x1_1", "f01b_i01o->01bf", 27, 32, 16384},
    {"NHWC conv2 filter gradient", "f32[16,16,16,32]", "f32[16,16,16,64]", "f32[3,3,32,64]",
     "size=16x16 pad=1_1x1_1", "f01b_i01o->01bf", 288, 64, 4096},
    {"NHWC 3x3 16x32x32x64->64", "f32[16,32,32,64]", "f32[3,3,64,64]", "f32[16,32,32,64]", W3,
     "b01f_01io->b01f", 16384, 64, 576},
    {"NCHW conv1 forward", "f32[16,3,32,32]", "f32[32,3,3,3]", "f32[16,32,32,32]", W3,
     "bf01_oi01->bf01", 16384, 32, 27},
    {"NCHW conv2 forward", "f32[16,32,16,16]", "f32[64,32,3,3]", "f32[16,64,16,16]", W3,
     "bf01_oi01->bf01", 4096, 64, 288},
    {"NCHW conv2 input gradient", "f32[16,64,16,16]", "f32[64,32,3,3]", "f32[16,32,16,16]", W3,
     "bf01_io01->bf01", 4096, 32, 576},
    {"NCHW conv1 filter gradient", "f32[16,3,32,32]", "f32[16,32,32,32]", "f32[32,3,3,3]",
     "size=32x32 pad=1_1x1_1", "fb01_io01->fb01", 27, 32, 16384},
    {"NCHW conv2 filter gradient", "f32[16,32,16,16]", "f32[16,64,16,16]", "f32[64,32,3,3]",
     "size=16x16 pad=1_1x1_1", "fb01_io01->fb01", 288, 64, 4096},
    {"NCHW 3x3 16x64x32x32->64", "f32[16,64,32,32]", "f32[64,64,3,3]", "f32[16,64,32,32]", W3,
     "bf01_oi01->bf01", 16384, 64, 576},
    /* inference (batch 1) and odd batches: ResNet-style layers */
    {"NHWC b1 3x3 56x56x64->64", "f32[1,56,56,64]", "f32[3,3,64,64]", "f32[1,56,56,64]", W3,
     "b01f_01io->b01f", 3136, 64, 576},
    {"NHWC b1 1x1 56x56x64->256", "f32[1,56,56,64]", "f32[1,1,64,256]", "f32[1,56,56,256]",
     "size=1x1", "b01f_01io->b01f", 3136, 256, 64},
    {"NHWC b1 7x7/2 224x224x3->64", "f32[1,224,224,3]", "f32[7,7,3,64]", "f32[1,112,112,64]",
     "size=7x7 stride=2x2 pad=3_3x3_3", "b01f_01io->b01f", 12544, 64, 147},
    {"NHWC b1 3x3 14x14x256->256", "f32[1,14,14,256]", "f32[3,3,256,256]", "f32[1,14,14,256]", W3,
     "b01f_01io->b01f", 196, 256, 2304},
    {"NHWC b1 3x3 7x7x512->512", "f32[1,7,7,512]", "f32[3,3,512,512]", "f32[1,7,7,512]", W3,
     "b01f_01io->b01f", 49, 512, 4608},
    {"NHWC b1 3x3 filter gradient 56x56x64->64", "f32[1,56,56,64]", "f32[1,56,56,64]",
     "f32[3,3,64,64]", "size=56x56 pad=1_1x1_1", "f01b_i01o->01bf", 576, 64, 3136},
    {"NHWC b3 3x3 32x32x64->64", "f32[3,32,32,64]", "f32[3,3,64,64]", "f32[3,32,32,64]", W3,
     "b01f_01io->b01f", 3072, 64, 576},
    {"NHWC b7 3x3 28x28x128->128", "f32[7,28,28,128]", "f32[3,3,128,128]", "f32[7,28,28,128]", W3,
     "b01f_01io->b01f", 5488, 128, 1152},
    {"NCHW b1 3x3 64x56x56->64", "f32[1,64,56,56]", "f32[64,64,3,3]", "f32[1,64,56,56]", W3,
     "bf01_oi01->bf01", 3136, 64, 576},
    {"NCHW b1 1x1 64x56x56->256", "f32[1,64,56,56]", "f32[256,64,1,1]", "f32[1,256,56,56]",
     "size=1x1", "bf01_oi01->bf01", 3136, 256, 64},
    {"NCHW b1 7x7/2 3x224x224->64", "f32[1,3,224,224]", "f32[64,3,7,7]", "f32[1,64,112,112]",
     "size=7x7 stride=2x2 pad=3_3x3_3", "bf01_oi01->bf01", 12544, 64, 147},
    {"NCHW b3 3x3 64x32x32->64", "f32[3,64,32,32]", "f32[64,64,3,3]", "f32[3,64,32,32]", W3,
     "bf01_oi01->bf01", 3072, 64, 576},
    /* a window that tiles the input: ViT's patch embedding (16x16 stride 16) */
    {"NHWC ViT 16x16/16 8x224x224x3->384", "f32[8,224,224,3]", "f32[16,16,3,384]",
     "f32[8,14,14,384]", "size=16x16 stride=16x16", "b01f_01io->b01f", 1568, 384, 768},
    {"NCHW ViT 16x16/16 8x3x224x224->384", "f32[8,3,224,224]", "f32[384,3,16,16]",
     "f32[8,384,14,14]", "size=16x16 stride=16x16", "bf01_oi01->bf01", 1568, 384, 768},
};

static void fill(float *v, size_t n, uint64_t s) {
    for (size_t e = 0; e < n; e++)
        v[e] = (float)((s = s * 6364136223846793005ull + 1) >> 40) / 16777216.0f - 0.5f;
}

int main(int argc, char **argv) {
    bool json = false;
    int reps = 5;
    double rep_ms = 5;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rep-ms") && i + 1 < argc)
            rep_ms = atof(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_conv [--json] [--reps N] [--rep-ms MS] [--only TEXT]\n");
            return 2;
        }
    }
    if (!(rep_ms > 0 && rep_ms <= 10000)) {
        fprintf(stderr, "bench_conv: --rep-ms must be in (0, 10000]\n");
        return 2;
    }
    if (reps < 1) reps = 1;
    int threads = ot_threadpool_size(ot_threadpool_default());
    const char *ths = threads == 1 ? "" : "s";
    ot_bench_print_header(json);
    int rc = 0;
    for (size_t ci = 0; ci < sizeof k_cases / sizeof k_cases[0] && !rc; ci++) {
        const ccase *d = &k_cases[ci];
        if (only && !strstr(d->name, only)) continue;
        char hlo[1024];
        snprintf(hlo, sizeof hlo,
                 "HloModule conv\nENTRY e {\n  a = %s parameter(0)\n  b = %s parameter(1)\n"
                 "  ROOT c = %s convolution(a, b), window={%s}, dim_labels=%s\n}\n",
                 d->lhs, d->rhs, d->out, d->window, d->labels);
        ot_module *m = NULL;
        ot_executable *exe = NULL;
        if (ot_hlo_parse(hlo, strlen(hlo), NULL, &m) != OT_OK ||
            ot_compile(m, NULL, &exe) != OT_OK) {
            fprintf(stderr, "bench_conv: %s: %s\n", d->name, ot_last_error());
            ot_module_free(m);
            return 1;
        }
        const ot_computation *c = ot_module_entry(m);
        float *in[2];
        for (int a = 0; a < 2; a++) {
            size_t n = (size_t)ot_shape_numel_unchecked(&c->params[a]->shape.array);
            in[a] = ot_aligned_alloc(64, n * 4);
            fill(in[a], n, 12345 + (uint64_t)a);
        }
        const ot_slot *sl = ot_executable_slot(exe, ot_executable_output_slot(exe, 0));
        float *out = ot_aligned_alloc(64, (size_t)sl->nbytes);
        float *ga = ot_aligned_alloc(64, (size_t)(d->m * d->k) * 4),
              *gb = ot_aligned_alloc(64, (size_t)(d->k * d->n) * 4),
              *gc = ot_aligned_alloc(64, (size_t)(d->m * d->n) * 4);
        fill(ga, (size_t)(d->m * d->k), 7);
        fill(gb, (size_t)(d->k * d->n), 8);
        int64_t an = ot_executable_arena_size(exe);
        void *arena = an ? ot_aligned_alloc(64, (size_t)an) : NULL;
        void *params[2] = {in[0], in[1]}, *outs[1] = {out};
        double flops = 2.0 * (double)d->m * (double)d->n * (double)d->k;
        double *ours = calloc((size_t)reps, sizeof *ours),
               *base = calloc((size_t)reps, sizeof *base);
        ot_run_result rr;
        memset(&rr, 0, sizeof rr);
        int inner = 1;
        for (int r = -1; r < reps && !rc; r++) {
            openblas_set_num_threads(1); /* what ours sets: set here, outside its timing */
            ot_bench_wait_idle();
            uint64_t t0 = ot_now_ns();
            for (int q = 0; q < inner && !rc; q++)
                if (ot_execute_on_host(exe, arena, params, outs, NULL, 0, &rr) != OT_OK) {
                    fprintf(stderr, "bench_conv: %s\n", ot_last_error());
                    rc = 1;
                }
            uint64_t t1 = ot_now_ns();
            if (r < 0) { /* the warm-up fixes the calls per repetition: >= rep_ms of ours */
                double one = (double)(t1 - t0) > 1 ? (double)(t1 - t0) : 1;
                inner = (int)ceil(rep_ms * 1e6 / one);
                if (inner < 1) inner = 1;
                if (inner > 1000) inner = 1000;
            }
            openblas_set_num_threads(threads);
            ot_bench_wait_idle();
            uint64_t t2 = ot_now_ns();
            for (int q = 0; q < inner; q++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)d->m, (int)d->n,
                            (int)d->k, 1.0f, ga, (int)d->k, gb, (int)d->n, 0.0f, gc, (int)d->n);
            uint64_t t3 = ot_now_ns();
            if (r >= 0) {
                ours[r] = inner * flops / (double)(t1 - t0);
                base[r] = inner * flops / (double)(t3 - t2);
            }
        }
        if (!rc && rr.fast_kernels_run < 1) {
            fprintf(stderr, "bench_conv: %s: the convolution did not run the fast kernel\n",
                    d->name);
            rc = 1;
        }
        if (!rc) {
            char name[128], bname[128];
            snprintf(name, sizeof name, "%s (GEMM %lldx%lldx%lld), %d thread%s", d->name,
                     (long long)d->m, (long long)d->n, (long long)d->k, threads, ths);
            snprintf(bname, sizeof bname, "cblas_sgemm on the GEMM, OpenBLAS %d thread%s", threads,
                     ths);
            ot_bench_row row = {.bench = "conv",
                                .case_name = name,
                                .metric = "GFLOP/s",
                                .value = ot_bench_median(ours, (size_t)reps),
                                .baseline = bname,
                                .baseline_value = ot_bench_median(base, (size_t)reps)};
            row.ratio = row.value / row.baseline_value;
            ot_bench_print(&row, json);
        }
        free(ours);
        free(base);
        for (int a = 0; a < 2; a++) ot_aligned_free(in[a]);
        ot_aligned_free(out);
        ot_aligned_free(ga);
        ot_aligned_free(gb);
        ot_aligned_free(gc);
        ot_aligned_free(arena);
        ot_executable_free(exe);
        ot_module_free(m);
    }
    return rc;
}
