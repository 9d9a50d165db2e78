/* Run an HLO module: parse its text, compile it, execute it on a host device, print the results.
 *
 * The module scales the columns of x by w and sums each row; the inputs are small integers and
 * halves, so every result is exact whatever order the compiled reduction adds in, and the program
 * checks each one against a plain C loop (exit status 1 on a mismatch). */
#include <optitpu/optitpu.h>

#include <stdio.h>
#include <string.h>

static const char hlo[] = "HloModule scale_rows\n"
                          "\n"
                          "add_f32 {\n"
                          "  a = f32[] parameter(0)\n"
                          "  b = f32[] parameter(1)\n"
                          "  ROOT s = f32[] add(a, b)\n"
                          "}\n"
                          "\n"
                          "ENTRY main {\n"
                          "  x = f32[4,3] parameter(0)\n"
                          "  w = f32[3] parameter(1)\n"
                          "  wb = f32[4,3] broadcast(w), dimensions={1}\n"
                          "  p = f32[4,3] multiply(x, wb)\n"
                          "  zero = f32[] constant(0)\n"
                          "  rows = f32[4] reduce(p, zero), dimensions={1}, to_apply=add_f32\n"
                          "  ROOT out = (f32[4], f32[4,3]) tuple(rows, p)\n"
                          "}\n";

static ot_status run(void) {
    ot_module *m = NULL;
    ot_executable *exe = NULL;
    ot_device *dev = NULL;
    ot_buffer *in[2] = {NULL, NULL}, *out[2] = {NULL, NULL};
    ot_tensor x = {0}, w = {0}, res[2] = {0};
    ot_status s;

    ot_hlo_parse_options po = ot_hlo_parse_options_default();
    po.filename = "scale_rows.hlo"; /* errors read "scale_rows.hlo:LINE:COL: ..." */
    OT_CHECK_GOTO(ot_hlo_parse(hlo, strlen(hlo), &po, &m), s, done);
    OT_CHECK_GOTO(ot_compile(m, NULL, &exe), s, done); /* -O2: fusion, scheduling, one arena */
    printf("compiled: %d kernels, arena %lld bytes\n", ot_executable_kernel_count(exe),
           (long long)ot_executable_arena_size(exe));

    ot_shape xs, ws;
    OT_CHECK_GOTO(ot_shape_make(&xs, OT_F32, 2, (int64_t[]){4, 3}), s, done);
    OT_CHECK_GOTO(ot_shape_make(&ws, OT_F32, 1, (int64_t[]){3}), s, done);
    OT_CHECK_GOTO(ot_tensor_alloc(&x, &xs), s, done);
    OT_CHECK_GOTO(ot_tensor_alloc(&w, &ws), s, done);
    float *xv = x.data, *wv = w.data;
    for (int i = 0; i < 12; i++) xv[i] = (float)(i - 5);
    wv[0] = 0.5f, wv[1] = 2.0f, wv[2] = -1.0f;

    OT_CHECK_GOTO(ot_host_device_create(0, 0, &dev), s, done); /* unlimited memory */
    OT_CHECK_GOTO(ot_buffer_from_host(dev, &x, &in[0]), s, done);
    OT_CHECK_GOTO(ot_buffer_from_host(dev, &w, &in[1]), s, done);
    ot_run_options ro = ot_run_options_default();
    ot_run_result rr;
    OT_CHECK_GOTO(ot_device_execute(dev, exe, in, 2, out, 2, &ro, &rr), s, done);
    printf("ran %d kernels in %.1f us\n", rr.kernels_run, (double)rr.time_ns / 1e3);
    for (int k = 0; k < 2; k++) OT_CHECK_GOTO(ot_buffer_to_host(out[k], &res[k]), s, done);

    const float *rows = res[0].data, *p = res[1].data;
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        float want = 0;
        printf("row %d:", i);
        for (int j = 0; j < 3; j++) {
            float pij = xv[i * 3 + j] * wv[j];
            want += pij;
            bad += p[i * 3 + j] != pij;
            printf(" %6.2f", (double)p[i * 3 + j]);
        }
        printf("  sum %6.2f\n", (double)rows[i]);
        bad += rows[i] != want;
    }
    s = bad ? ot_error(OT_ERR_INTERNAL, "%d results differ from the C loop", bad) : OT_OK;
done:
    for (int k = 0; k < 2; k++) ot_buffer_free(in[k]), ot_buffer_free(out[k]);
    for (int k = 0; k < 2; k++) ot_tensor_release(&res[k]);
    ot_tensor_release(&x), ot_tensor_release(&w);
    ot_device_free(dev);
    ot_executable_free(exe);
    ot_module_free(m);
    return s;
}

int main(void) {
    ot_status s = run();
    if (s != OT_OK) {
        fprintf(stderr, "run_hlo: %s\n", ot_last_error());
        return 1;
    }
    printf("ok: every result equals the C loop\n");
    return 0;
}
