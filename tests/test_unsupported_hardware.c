/* UNSUPPORTED_HARDWARE: a module that calls code for other hardware (a custom-call whose target is
 * a TPU kernel, e.g. Pallas/Mosaic's "tpu_custom_call", or a GPU one: cuBLAS, cuDNN, Triton, XLA's
 * GPU kernels, jaxlib's CUDA/ROCm calls) cannot run on host CPU devices: the evaluator, compiled
 * execution on a host device and `optitpu run` all refuse it with UNSUPPORTED_HARDWARE naming the
 * target and the hardware, changing nothing; any other unknown target stays UNIMPLEMENTED (optitpu
 * could run it, and does not). */
#include "ot_test.h"

#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"

#include <sys/wait.h>
#include <unistd.h>

static ot_module *custom_call_module(const char *target) {
    char text[512];
    snprintf(text, sizeof text,
             "HloModule m\n\nENTRY main {\n  p = f32[8] parameter(0)\n"
             "  c = f32[8] custom-call(p), custom_call_target=\"%s\", backend_config=\"{}\"\n"
             "  ROOT r = f32[8] add(c, p)\n}\n",
             target);
    ot_module *m = NULL;
    if (ot_hlo_parse(text, strlen(text), NULL, &m) != OT_OK) return NULL;
    return m;
}

/* status of evaluating, and of compiling and running on a host device, the module */
static void run_both(const char *target, ot_status *eval_st, char *eval_msg, ot_status *exec_st,
                     char *exec_msg) {
    *eval_st = *exec_st = OT_ERR_INTERNAL;
    ot_module *m = custom_call_module(target);
    ASSERT_TRUE(m != NULL);
    ot_shape s;
    ASSERT_OK(ot_shape_make(&s, OT_F32, 1, (int64_t[]){8}));
    ot_tensor t;
    ASSERT_OK(ot_tensor_alloc(&t, &s));
    ot_value res = ot_value_empty();
    *eval_st = ot_evaluate_tensors(m, &t, 1, NULL, &res);
    snprintf(eval_msg, 512, "%s", ot_last_error());
    ot_value_release(&res);
    ot_executable *exe = NULL;
    ot_device *d = NULL;
    ot_buffer *in = NULL, *out = NULL;
    EXPECT_OK(ot_compile(m, NULL, &exe)); /* compiling needs no hardware: running it does */
    if (exe && ot_host_device_create(0, 0, &d) == OT_OK &&
        ot_buffer_from_host(d, &t, &in) == OT_OK) {
        *exec_st = ot_device_execute(d, exe, &in, 1, &out, 1, NULL, NULL);
        snprintf(exec_msg, 512, "%s", ot_last_error());
        EXPECT_TRUE(out == NULL); /* nothing produced */
    }
    ot_buffer_free(out);
    ot_buffer_free(in);
    ot_device_free(d);
    ot_executable_free(exe);
    ot_tensor_release(&t);
    ot_module_free(m);
}

static void test_hardware_targets(void) {
    static const struct {
        const char *target, *hw;
    } cases[] = {
        {"tpu_custom_call", "TPU"},           {"__cublas$gemm", "NVIDIA GPU"},
        {"__cublas$lt$matmul", "NVIDIA GPU"}, {"__cudnn$convForward", "NVIDIA GPU"},
        {"__gpu$xla.gpu.triton", "GPU"},      {"__triton", "GPU"},
        {"triton_kernel_call", "GPU"},        {"cusolver_getrf", "NVIDIA GPU"},
        {"cu_threefry2x32", "NVIDIA GPU"},    {"hipsolver_potrf", "AMD GPU"},
        {"hip_threefry2x32", "AMD GPU"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ot_status es, xs;
        char em[512] = "", xm[512] = "";
        run_both(cases[k].target, &es, em, &xs, xm);
        EXPECT_INT_EQ(es, OT_ERR_UNSUPPORTED_HARDWARE);
        EXPECT_INT_EQ(xs, OT_ERR_UNSUPPORTED_HARDWARE);
        EXPECT_STR_CONTAINS(em, cases[k].target);
        EXPECT_STR_CONTAINS(em, cases[k].hw);
        EXPECT_STR_CONTAINS(em, "host CPUs");
        EXPECT_STR_CONTAINS(xm, cases[k].target);
        EXPECT_STR_CONTAINS(xm, cases[k].hw);
    }
    EXPECT_STR_EQ(ot_status_str(OT_ERR_UNSUPPORTED_HARDWARE), "UNSUPPORTED_HARDWARE");
}

static void test_other_targets_unimplemented(void) {
    /* not code for other hardware: optitpu could run these and does not */
    const char *targets[] = {"my_cpu_kernel", "my_tpu_custom_call", "Sharding", "cu"};
    for (size_t k = 0; k < sizeof targets / sizeof targets[0]; k++) {
        ot_status es, xs;
        char em[512] = "", xm[512] = "";
        run_both(targets[k], &es, em, &xs, xm);
        EXPECT_INT_EQ(es, OT_ERR_UNIMPLEMENTED);
        EXPECT_INT_EQ(xs, OT_ERR_UNIMPLEMENTED);
        EXPECT_STR_CONTAINS(em, "is not implemented");
    }
}

/* `optitpu run` on such a module: exit 1, the status and the reason on stderr */
static void test_cli_run(void) {
    const char *bin = OT_BINARY_DIR "/optitpu";
    if (access(bin, X_OK) != 0) OT_SKIP("%s not built", bin);
    char path[256];
    snprintf(path, sizeof path, "%s/hw_%d.hlo", OT_BINARY_DIR, (int)getpid());
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fputs("HloModule m\n\nENTRY main {\n  p = f32[8] parameter(0)\n  ROOT c = f32[8] "
          "custom-call(p), custom_call_target=\"tpu_custom_call\", backend_config=\"{}\"\n}\n",
          f);
    fclose(f);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "'%s' run '%s' --fill zeros 2>&1", bin, path);
    FILE *p = popen(cmd, "r");
    ASSERT_TRUE(p != NULL);
    char out[4096] = "", line[512];
    while (fgets(line, sizeof line, p)) strncat(out, line, sizeof out - strlen(out) - 1);
    int st = pclose(p);
    unlink(path);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    EXPECT_STR_CONTAINS(out, "UNSUPPORTED_HARDWARE");
    EXPECT_STR_CONTAINS(out, "tpu_custom_call");
    EXPECT_STR_CONTAINS(out, "TPU kernel");
}

OT_TEST_MAIN(OT_TEST(test_hardware_targets), OT_TEST(test_other_targets_unimplemented),
             OT_TEST(test_cli_run))
