/* The training driver: it learns, a stopped run resumed from its checkpoint ends bit-identical to
 * an uninterrupted one, 1 and 8 devices agree within a stated tolerance, an injected device
 * failure is detected and survived by both recovery policies, and bad options are refused. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_util.h"
#include "ft/ft_io.h"
#include "optitpu/ft.h"
#include "optitpu/tpu_optim.h"
#include "optitpu/train.h"
#include "ot_test.h"
#include "train/train_internal.h"

static char tmp_root[256];

static const char *tmpdir(const char *name) {
    static char buf[8][512];
    static int k;
    if (!tmp_root[0]) {
        snprintf(tmp_root, sizeof tmp_root, "%s/train_test_XXXXXX", OT_BINARY_DIR);
        if (!mkdtemp(tmp_root)) abort();
    }
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", tmp_root, name);
    return b;
}

static ot_train_options small(int devices, int64_t steps) {
    ot_train_options o = ot_train_options_default();
    o.devices = devices;
    o.steps = steps;
    o.eval_every = 0;
    o.topology = NULL;
    return o;
}

static bool same_params(const ot_train_report *a, const ot_train_report *b) {
    if (a->nparams != b->nparams) return false;
    for (int k = 0; k < a->nparams; k++)
        if (a->params[k].nbytes != b->params[k].nbytes ||
            memcmp(a->params[k].data, b->params[k].data, a->params[k].nbytes) != 0)
            return false;
    return true;
}

static void test_learns_digits(void) {
    ot_train_options o = small(4, 150);
    o.eval_every = 50;
    ot_train_report r;
    ASSERT_OK(ot_train(&o, &r));
    EXPECT_INT_EQ(r.final_step, 150);
    EXPECT_INT_EQ(r.npoints, 150);
    EXPECT_TRUE(r.test_accuracy >= 0.93);
    EXPECT_TRUE(r.points[149].loss < r.points[0].loss * 0.5);
    EXPECT_TRUE(r.devices_end == 4 && r.failures == 0);
    EXPECT_TRUE(r.outside_compute_share >= 0 && r.outside_compute_share < 1);
    EXPECT_INT_EQ(r.nparams, 4);
    /* the timeline: every step's parts once per step on every replica, inside the wall time */
    double in = 0;
    int seen = 0;
    for (int k = 0; k < r.nparts; k++) {
        in += r.parts[k].wall_s;
        EXPECT_TRUE(r.parts[k].cpu_s >= 0 && r.parts[k].wall_s >= 0);
        const char *per_step[] = {"input", "forward+backward", "all-reduce", "optimizer"};
        for (int q = 0; q < 4; q++)
            if (!strcmp(r.parts[k].name, per_step[q])) {
                EXPECT_TRUE(r.parts[k].count == 150);
                seen++;
            }
        if (!strcmp(r.parts[k].name, "evaluate")) EXPECT_TRUE(r.parts[k].count < 150);
    }
    EXPECT_INT_EQ(seen, 4);
    EXPECT_TRUE(in > 0 && in <= r.wall_s);
    /* the steady steps: from the end of step 15 to the end of step 149 */
    EXPECT_INT_EQ(r.steady_steps, 149 - 15);
    EXPECT_TRUE(r.steady_wall_s > 0 && r.steady_wall_s < r.wall_s);
    ot_train_report_clear(&r);
}

static void test_resume_bit_identical(void) {
    /* uninterrupted: 60 steps, checkpoints every 20 */
    ot_train_options o = small(4, 60);
    o.ckpt_dir = tmpdir("full");
    o.ckpt_every = 20;
    ot_train_report full;
    ASSERT_OK(ot_train(&o, &full));
    EXPECT_INT_EQ(full.checkpoints, 3);
    /* the same run stopped after 30 steps (as a crash would: step 20 is the newest checkpoint) */
    o.ckpt_dir = tmpdir("cut");
    o.stop_after = 30;
    ot_train_report cut;
    ASSERT_OK(ot_train(&o, &cut));
    EXPECT_TRUE(cut.stopped);
    EXPECT_INT_EQ(cut.final_step, 30);
    ot_train_report_clear(&cut);
    /* without --resume a directory with checkpoints is refused */
    o.stop_after = 0;
    EXPECT_INT_EQ(ot_train(&o, &cut), OT_ERR_ALREADY_EXISTS);
    ot_train_report_clear(&cut);
    o.resume = true;
    ot_train_report resumed;
    ASSERT_OK(ot_train(&o, &resumed));
    EXPECT_INT_EQ(resumed.start_step, 20);
    EXPECT_INT_EQ(resumed.final_step, 60);
    EXPECT_TRUE(memcmp(resumed.params_sha256, full.params_sha256, 32) == 0);
    EXPECT_TRUE(same_params(&resumed, &full));
    EXPECT_STR_CONTAINS(resumed.log, "resumed from the checkpoint of step 20");
    ot_train_report_clear(&resumed);
    /* --fresh starts over, removing whatever it finds (a set-aside step that is a symlink loop) */
    o.resume = false;
    o.fresh = true;
    char loop[600];
    snprintf(loop, sizeof loop, "%s/step_00000099.damaged", o.ckpt_dir);
    ASSERT_TRUE(symlink("step_00000099.damaged", loop) == 0);
    ASSERT_OK(ot_train(&o, &resumed));
    EXPECT_INT_EQ(resumed.start_step, 0);
    EXPECT_TRUE(same_params(&resumed, &full));
    struct stat lst;
    EXPECT_TRUE(lstat(loop, &lst) != 0);
    ot_train_report_clear(&resumed);
    ot_train_report_clear(&full);
}

/* 1 and 8 devices: the same global batch and update; only the summation order of the gradients
 * differs (one replica's sum vs eight partial sums added by the all-reduce), so parameters agree
 * to a few float32 ulps per step: after 20 Adam steps we require max |a - b| <= 1e-5 * (1 +
 * max|a|). Two 8-device runs are bitwise identical. */
static void test_devices_agree(void) {
    ot_train_options o = small(1, 20);
    ot_train_report one, eight, again;
    ASSERT_OK(ot_train(&o, &one));
    o.devices = 8;
    o.topology = "torus-2x4";
    ASSERT_OK(ot_train(&o, &eight));
    ASSERT_OK(ot_train(&o, &again));
    EXPECT_TRUE(same_params(&eight, &again));
    ASSERT_TRUE(one.nparams == eight.nparams);
    double maxdiff = 0, maxabs = 0;
    for (int k = 0; k < one.nparams; k++) {
        const float *a = one.params[k].data, *b = eight.params[k].data;
        for (size_t i = 0; i < one.params[k].nbytes / 4; i++) {
            double d = fabs((double)a[i] - (double)b[i]);
            if (d > maxdiff) maxdiff = d;
            if (fabs(a[i]) > maxabs) maxabs = fabs(a[i]);
        }
    }
    printf("  1 vs 8 devices after 20 steps: max |diff| %.3g (max |param| %.3g)\n", maxdiff,
           maxabs);
    EXPECT_TRUE(maxdiff <= 1e-5 * (1 + maxabs));
    ot_train_report_clear(&one);
    ot_train_report_clear(&eight);
    ot_train_report_clear(&again);
}

static double max_param_diff(const ot_train_report *a, const ot_train_report *b) {
    double maxdiff = 0;
    for (int k = 0; k < a->nparams && k < b->nparams; k++) {
        const float *x = a->params[k].data, *y = b->params[k].data;
        for (size_t i = 0; i < a->params[k].nbytes / 4; i++) {
            double d = fabs((double)x[i] - (double)y[i]);
            if (d > maxdiff) maxdiff = d;
        }
    }
    return maxdiff;
}

/* --grad-accum K on one device takes the same samples per step as batch x K on K devices: micro-
 * batch j is what replica j gets there, with the same executable and loss scale, so only the
 * order in which the K gradients are summed differs (in micro-batch order here, the all-reduce's
 * order there). With K = 2 the sum is a + b either way: bit-identical. With K = 4 parameters
 * agree within 1e-6 after 20 Adam steps. */
static void test_grad_accum_matches_devices(void) {
    ot_train_options o = small(1, 20);
    o.batch_size = 64;
    o.grad_accum = 2;
    ot_train_report acc, wide;
    ASSERT_OK(ot_train(&o, &acc));
    o = small(2, 20);
    ASSERT_OK(ot_train(&o, &wide));
    EXPECT_TRUE(same_params(&acc, &wide));
    EXPECT_INT_EQ(acc.npoints, wide.npoints);
    for (int64_t i = 0; i < acc.npoints && i < wide.npoints; i++)
        EXPECT_TRUE(acc.points[i].loss == wide.points[i].loss &&
                    acc.points[i].train_accuracy == wide.points[i].train_accuracy);
    ot_train_report_clear(&acc);
    ot_train_report_clear(&wide);

    o = small(1, 20);
    o.batch_size = 32;
    o.grad_accum = 4;
    ASSERT_OK(ot_train(&o, &acc));
    o = small(4, 20);
    ASSERT_OK(ot_train(&o, &wide));
    double d = max_param_diff(&acc, &wide);
    printf("  --grad-accum 4 on 1 device vs batch x 4 on 4 devices after 20 steps: max |diff| "
           "%.3g\n",
           d);
    EXPECT_TRUE(d <= 1e-6);
    EXPECT_TRUE(fabs(acc.points[19].loss - wide.points[19].loss) <= 1e-6);
    ot_train_report_clear(&acc);
    ot_train_report_clear(&wide);
}

/* Accumulation keeps no state between steps: a run stopped and resumed from its checkpoint ends
 * bit-identical to an uninterrupted one, on several devices too. */
static void test_grad_accum_resume(void) {
    ot_train_options o = small(2, 30);
    o.batch_size = 32;
    o.grad_accum = 3;
    o.ckpt_dir = tmpdir("accum_full");
    o.ckpt_every = 10;
    ot_train_report full, cut, resumed;
    ASSERT_OK(ot_train(&o, &full));
    o.ckpt_dir = tmpdir("accum_cut");
    o.stop_after = 15;
    ASSERT_OK(ot_train(&o, &cut));
    ot_train_report_clear(&cut);
    o.stop_after = 0;
    o.resume = true;
    ASSERT_OK(ot_train(&o, &resumed));
    EXPECT_INT_EQ(resumed.start_step, 10);
    EXPECT_TRUE(same_params(&resumed, &full));
    ot_train_report_clear(&resumed);
    ot_train_report_clear(&full);
}

/* --grad-compress: the same flags give the same bits (ot_train itself fails when replicas
 * differ); the bytes each device puts into a step's all-reduces shrink by the compression: f32
 * gradients and 2 metric floats uncompressed, 2 bytes per element with bf16, 1 per element plus
 * one scale per bucket with int8 (a quarter), (index, value) pairs with top-k. */
static void test_grad_compress(void) {
    ot_train_options o = small(4, 30);
    ot_train_report plain, a, b;
    ASSERT_OK(ot_train(&o, &plain));
    int64_t n = plain.param_elements;
    EXPECT_INT_EQ(plain.allreduce_bytes_per_step, (n + 2) * 4);
    EXPECT_INT_EQ(plain.allreduce_bytes, (n + 2) * 4 * 4 * 30);
    o.grad_compress = "int8";
    ASSERT_OK(ot_train(&o, &a));
    ASSERT_OK(ot_train(&o, &b));
    EXPECT_TRUE(same_params(&a, &b));
    EXPECT_TRUE(!same_params(&a, &plain));
    EXPECT_INT_EQ(a.allreduce_bytes_per_step, n + 4 + 8);
    EXPECT_TRUE(4 * a.allreduce_bytes_per_step <= plain.allreduce_bytes_per_step + 40);
    printf("  int8 vs exact after 30 steps: final loss %.4f vs %.4f (first %.4f)\n", a.final_loss,
           plain.final_loss, plain.points[0].loss);
    /* it learns as the exact sum does (the accuracy of the full job: the _slow test) */
    EXPECT_TRUE(a.final_loss < plain.points[0].loss * 0.8);
    EXPECT_TRUE(fabs(a.final_loss - plain.final_loss) < 0.1 * plain.final_loss);
    ot_train_report_clear(&a);
    ot_train_report_clear(&b);
    o.grad_compress = "bf16";
    ASSERT_OK(ot_train(&o, &a));
    EXPECT_INT_EQ(a.allreduce_bytes_per_step, 2 * n + 8);
    ot_train_report_clear(&a);
    o.grad_compress = "topk:0.1";
    ASSERT_OK(ot_train(&o, &a));
    EXPECT_INT_EQ(a.allreduce_bytes_per_step, (n + 9) / 10 * 8 + 8);
    ot_train_report_clear(&a);
    /* a device failure: the survivors' new aggregators start from zero residuals, and the run
     * ends with identical replicas */
    o.grad_compress = "int8";
    o.fail_device = 1;
    o.fail_step = 10;
    ASSERT_OK(ot_train(&o, &a));
    EXPECT_INT_EQ(a.failures, 1);
    EXPECT_INT_EQ(a.final_step, 30);
    ot_train_report_clear(&a);
    ot_train_report_clear(&plain);
}

static void test_grad_flags_refused(void) {
    ot_train_report r;
    ot_train_options o = small(2, 10);
    o.grad_accum = 0;
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "--grad-accum");
    o = small(2, 10);
    o.grad_accum = 12; /* 128 x 12 > the 1438 training samples */
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "accumulated micro-batches exceeds");
    const char *bad[] = {"int4", "topk:0", "topk:1.5", "topk:", "topk:0.1x", "BF16"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        o = small(2, 10);
        o.grad_compress = bad[i];
        EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
        EXPECT_STR_CONTAINS(ot_last_error(), "unknown gradient compression");
    }
    /* a checkpoint without residuals cannot continue a compressed run (test_train_resume_state.sh
     * resumes compressed runs bit for bit) */
    o = small(2, 10);
    o.ckpt_dir = tmpdir("compress_resume");
    ASSERT_OK(ot_train(&o, &r));
    ot_train_report_clear(&r);
    o.grad_compress = "int8";
    o.resume = true;
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STR_CONTAINS(ot_last_error(), "saved without --grad-compress");
    o.grad_compress = "none"; /* the exact sum: no state, resume as usual */
    ASSERT_OK(ot_train(&o, &r));
    ot_train_report_clear(&r);
}

/* --shard-optimizer's bad input: a state format the sharded update does not take, an optimizer
 * whose update couples elements across blocks, a reduction whose order depends on the split;
 * each refused before anything runs, with the reason (test_train_shard.sh: the CLI's refusals). */
static void test_shard_refused(void) {
    ot_train_report r;
    ot_train_options o = small(4, 5);
    o.shard_optimizer = true;
    o.state_format = OT_TPU_STATE_INT8;
    o.int8_min_size = 0;
    o.optimizer = "rmsprop"; /* int8 state: the fused kernel's optimizers */
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(),
                        "the sharded update (shard_devices 4) does not take int8 state with this "
                        "optimizer");
    o.optimizer = "adam"; /* sharded, every tensor is quantized: the caller opts in */
    o.int8_min_size = -1;
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "give --int8-min-size 0 to accept that");
    o.int8_min_size = 4096;
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    o.int8_min_size = -2;
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    o = small(4, 5);
    o.shard_optimizer = true;
    o.optimizer = "adafactor";
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "'adafactor' couples elements across a tensor");
    o = small(4, 5);
    o.shard_optimizer = true;
    o.allreduce = "ring";
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "its summation order depends on how the vector is split");
    o = small(4, 5); /* and what is accepted runs */
    o.shard_optimizer = true;
    o.state_format = OT_TPU_STATE_BF16;
    ASSERT_OK(ot_train(&o, &r));
    EXPECT_TRUE(r.shard_optimizer);
    ot_train_report_clear(&r);
    o.state_format = OT_TPU_STATE_INT8;
    o.int8_min_size = 0;
    ASSERT_OK(ot_train(&o, &r));
    EXPECT_TRUE(r.shard_optimizer);
    ot_train_report_clear(&r);
}

/* --local-sgd H: with plain SGD and H = 1, averaging the replicas' parameters after each local
 * step on its shard's mean gradient is the synchronous step (p - lr * mean of the shard means),
 * up to rounding. With Adam and H = 4 the run is deterministic, ends with identical replicas also
 * when the last step is not a multiple of H (the end averages too), and its all-reduces carry the
 * metrics each step and the parameters every H steps. */
static void test_local_sgd(void) {
    ot_train_options o = small(4, 20);
    o.optimizer = "sgd";
    o.lr = 0.1;
    ot_train_report sync, local, again;
    ASSERT_OK(ot_train(&o, &sync));
    o.local_sgd = 1;
    ASSERT_OK(ot_train(&o, &local));
    double d = max_param_diff(&sync, &local);
    printf("  SGD: --local-sgd 1 vs synchronous on 4 devices after 20 steps: max |diff| %.3g\n", d);
    EXPECT_TRUE(d <= 1e-6);
    ot_train_report_clear(&sync);
    ot_train_report_clear(&local);

    o = small(4, 30);
    o.local_sgd = 4;
    ASSERT_OK(ot_train(&o, &local));
    ASSERT_OK(ot_train(&o, &again));
    EXPECT_TRUE(same_params(&local, &again));
    EXPECT_STR_CONTAINS(local.log, "parameters averaged every 4 steps");
    int64_t n = local.param_elements, averages = 30 / 4 + 1; /* steps 4, 8, ..., 28 and 30 */
    EXPECT_INT_EQ(local.allreduce_bytes, 4 * (8 * 30 + 4 * n * averages));
    EXPECT_INT_EQ(local.allreduce_bytes_per_step, (8 * 30 + 4 * n * averages) / 30);
    o.local_sgd = 0;
    ASSERT_OK(ot_train(&o, &sync));
    EXPECT_TRUE(!same_params(&local, &sync));
    EXPECT_TRUE(local.final_loss < sync.points[0].loss * 0.8);
    ot_train_report_clear(&sync);
    ot_train_report_clear(&local);
    ot_train_report_clear(&again);

    ot_train_report r;
    o = small(4, 10);
    o.local_sgd = -1;
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    o.local_sgd = 2;
    o.grad_compress = "int8";
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "exclude each other");
    o.grad_compress = NULL;
    o.fail_device = 1;
    o.fail_step = 3;
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "--fail-device with --local-sgd");
    o.fail_device = -1;
    /* in one process every device's state is checkpointed, so it resumes (bit for bit:
     * test_train_resume_state.sh) */
    o.ckpt_dir = tmpdir("localsgd_resume");
    o.resume = true;
    ASSERT_OK(ot_train(&o, &r));
    EXPECT_STR_CONTAINS(r.log, "no checkpoint");
    ot_train_report_clear(&r);
}

static void test_fail_shrink(void) {
    ot_train_options o = small(4, 40);
    o.fail_device = 2;
    o.fail_step = 15;
    o.eval_every = 40;
    ot_train_report r;
    ASSERT_OK(ot_train(&o, &r));
    EXPECT_INT_EQ(r.final_step, 40);
    EXPECT_INT_EQ(r.failures, 1);
    EXPECT_INT_EQ(r.devices_start, 4);
    EXPECT_INT_EQ(r.devices_end, 3);
    EXPECT_TRUE(r.detect_s > 0 && r.detect_s < 5);
    EXPECT_STR_CONTAINS(r.log, "device 2 declared FAILED");
    EXPECT_STR_CONTAINS(r.log, "recovery (shrink): new pod of 3 devices");
    EXPECT_TRUE(r.test_accuracy > 0.8);
    /* the history has one point per step, the failed step counted once */
    EXPECT_INT_EQ(r.npoints, 40);
    ot_train_report_clear(&r);
}

static void test_fail_restore(void) {
    ot_train_options o = small(4, 40);
    o.fail_device = 1;
    o.fail_step = 17;
    o.recovery = OT_RECOVER_RESTORE;
    o.ckpt_dir = tmpdir("restore");
    o.ckpt_every = 10;
    ot_train_report r;
    ASSERT_OK(ot_train(&o, &r));
    EXPECT_INT_EQ(r.final_step, 40);
    EXPECT_INT_EQ(r.failures, 1);
    EXPECT_INT_EQ(r.devices_end, 4);
    EXPECT_STR_CONTAINS(r.log, "device 4 replaces failed device 1");
    EXPECT_STR_CONTAINS(r.log, "to checkpointed step 10");
    EXPECT_INT_EQ(r.npoints, 40);
    /* rolled back to step 10 and replayed on the same data: the same parameters as a run
     * without the failure */
    ot_train_options u = small(4, 40);
    ot_train_report clean;
    ASSERT_OK(ot_train(&u, &clean));
    EXPECT_TRUE(same_params(&r, &clean));
    ot_train_report_clear(&clean);
    ot_train_report_clear(&r);
}

static void test_bad_options(void) {
    ot_train_report r;
    ot_train_options o = small(0, 10);
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    o = small(4, 10);
    o.batch_size = 2;
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    o = small(4, 10);
    o.lr = -1;
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    o = small(4, 10);
    o.fail_device = 4;
    o.fail_step = 3;
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "--fail-device");
    o = small(4, 10);
    o.resume = true;
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    o = small(4, 10);
    o.optimizer = "adamax9";
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_NOT_FOUND);
    o = small(4, 10);
    o.schedule = "linear-ish";
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    o = small(4, 10);
    o.dataset = "imagenet";
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    o = small(4, 10);
    o.topology = "torus-4x4";
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    o = small(3, 10);
    o.topology = "torus-2x4"; /* explicit: the default's name is no excuse */
    EXPECT_INT_EQ(ot_train(&o, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "topology torus-2x4 has 8 devices, the pod 3");
    ot_train_report_clear(&r);
}

static void test_other_models(void) {
    const ot_model_kind kinds[3] = {OT_MODEL_LOGREG, OT_MODEL_MLP, OT_MODEL_CNN};
    for (int i = 0; i < 3; i++) {
        ot_train_options o = small(2, 30);
        o.model.kind = kinds[i];
        o.model.activation = i == 1 ? OT_ACT_GELU : OT_ACT_RELU;
        o.optimizer = i == 0 ? "sgd" : "adam";
        o.lr = i == 0 ? 0.5 : 3e-3;
        ot_train_report r;
        ot_status s = ot_train(&o, &r);
        EXPECT_INT_EQ(s, OT_OK);
        if (s != OT_OK) {
            fprintf(stderr, "  %s: %s\n", ot_model_kind_name(kinds[i]), ot_last_error());
            continue;
        }
        EXPECT_TRUE(r.points[29].loss < r.points[0].loss);
        ot_train_report_clear(&r);
    }
    /* synthetic data */
    ot_train_options o = small(2, 20);
    o.dataset = "synthetic";
    o.synthetic_n = 4096;
    ot_train_report r;
    ASSERT_OK(ot_train(&o, &r));
    EXPECT_TRUE(r.test_accuracy > 0.5);
    ot_train_report_clear(&r);
}

static void test_report_files(void) {
    ot_train_options o = small(2, 12);
    o.eval_every = 6;
    o.trace_path = tmpdir("trace.json");
    ot_train_report r;
    ASSERT_OK(ot_train(&o, &r));
    const char *csv = tmpdir("m.csv"), *svg = tmpdir("c.svg");
    ASSERT_OK(ot_train_write_csv(&r, csv));
    ASSERT_OK(ot_train_write_svg(&r, svg));
    char *js = NULL;
    ASSERT_OK(ot_train_report_json(&r, &js));
    EXPECT_STR_CONTAINS(js, "\"final_step\":12");
    EXPECT_STR_CONTAINS(js, "\"params_sha256\":\"");
    ot_free(js);
    FILE *f = fopen(csv, "r");
    ASSERT_TRUE(f != NULL);
    char line[256];
    int lines = 0, with_test = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        char *last = strrchr(line, ',');
        if (lines > 1 && last && last[-1] != ',') with_test++;
    }
    fclose(f);
    EXPECT_INT_EQ(lines, 13);
    EXPECT_INT_EQ(with_test, 2);
    struct stat st;
    EXPECT_TRUE(stat(svg, &st) == 0 && st.st_size > 500);
    EXPECT_TRUE(stat(o.trace_path, &st) == 0 && st.st_size > 100);
    EXPECT_INT_EQ(ot_train_write_csv(&r, "/nonexistent/dir/x.csv"), OT_ERR_IO);
    ot_train_report_clear(&r);
}

/* A checkpoint records what its state belongs to: a resume under another optimizer or model is
 * refused with a clear error, and nothing in the directory is touched. */
static void test_resume_refuses_other_state(void) {
    ot_train_options o = small(2, 20);
    o.ckpt_dir = tmpdir("other_state");
    o.ckpt_every = 10;
    ot_train_report r;
    ASSERT_OK(ot_train(&o, &r));
    ot_train_report_clear(&r);
    o.resume = true;
    o.steps = 30;
    o.optimizer = "sgd";
    EXPECT_STATUS(ot_train(&o, &r), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STR_CONTAINS(ot_last_error(),
                        "holds the state of optimizer 'adam'; this run uses 'sgd'");
    ot_train_report_clear(&r);
    o.optimizer = "adamw"; /* the same state tensors, another optimizer */
    EXPECT_STATUS(ot_train(&o, &r), OT_ERR_FAILED_PRECONDITION);
    ot_train_report_clear(&r);
    o.optimizer = "adam";
    o.model.hidden[0] = 64;
    EXPECT_STATUS(ot_train(&o, &r), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STR_CONTAINS(ot_last_error(), "is of another model");
    EXPECT_STR_CONTAINS(ot_last_error(), "dense0.w f32[64,128]");
    ot_train_report_clear(&r);
    ot_ckpt_entry *e;
    size_t n;
    ASSERT_OK(ot_ckpt_list(o.ckpt_dir, &e, &n));
    EXPECT_INT_EQ(n, 2);
    for (size_t i = 0; i < n; i++) EXPECT_TRUE(e[i].committed);
    ot_ckpt_entries_free(e, n);
    /* the right flags resume it */
    o.model.hidden[0] = 128;
    ASSERT_OK(ot_train(&o, &r));
    EXPECT_INT_EQ(r.start_step, 20);
    ot_train_report_clear(&r);
}

/* The end of a run is saved even when it is not a multiple of ckpt_every, unless told not to;
 * a stopped run (a crash) is not. */
static void test_final_checkpoint(void) {
    ot_train_options o = small(2, 13);
    o.ckpt_dir = tmpdir("final");
    o.ckpt_every = 100;
    ot_train_report r;
    ASSERT_OK(ot_train(&o, &r));
    EXPECT_INT_EQ(r.checkpoints, 1);
    ot_train_report_clear(&r);
    char p[600];
    snprintf(p, sizeof p, "%s/step_00000013", o.ckpt_dir);
    EXPECT_OK(ot_ckpt_verify_dir(p, NULL));
    /* resumed at the end: nothing to do, nothing saved twice */
    o.resume = true;
    ASSERT_OK(ot_train(&o, &r));
    EXPECT_INT_EQ(r.start_step, 13);
    EXPECT_INT_EQ(r.checkpoints, 0);
    ot_train_report_clear(&r);
    o.resume = false;
    o.fresh = true;
    o.final_ckpt = false;
    ASSERT_OK(ot_train(&o, &r));
    EXPECT_INT_EQ(r.checkpoints, 0);
    ot_train_report_clear(&r);
    o.final_ckpt = true;
    o.stop_after = 7;
    ASSERT_OK(ot_train(&o, &r));
    EXPECT_TRUE(r.stopped);
    EXPECT_INT_EQ(r.checkpoints, 0);
    EXPECT_TRUE(r.test_accuracy < 0 && isnan(r.test_loss)); /* no evaluation ran */
    ot_train_report_clear(&r);
}

/* A replica whose checkpoint save fails stops the run at once: the other replicas are not left
 * waiting in the all-reduce for its 30 s timeout. */
static void test_failed_save_stops_at_once(void) {
    ot_train_options o = small(4, 40);
    o.ckpt_dir = tmpdir("failing_save");
    o.ckpt_every = 5;
    ot_train_report r;
    /* the 3rd write-side call from here: inside the first save (the open makes one mkdir) */
    ot_ft_inject_io_failure(3, EIO);
    double t0 = (double)ot_now_ns() * 1e-9;
    EXPECT_STATUS(ot_train(&o, &r), OT_ERR_IO);
    double secs = (double)ot_now_ns() * 1e-9 - t0;
    ot_ft_inject_io_failure(0, 0);
    EXPECT_STR_CONTAINS(ot_last_error(), "async save of step 5 failed");
    printf("  a failed save stopped the 4-device run in %.2f s\n", secs);
    EXPECT_TRUE(secs < 10);
    ot_train_report_clear(&r);
}

/* metrics.csv read back: the rows as written; bad files named with their line. */
static void test_read_csv(void) {
    ot_train_options o = small(2, 6);
    o.eval_every = 3;
    ot_train_report r;
    ASSERT_OK(ot_train(&o, &r));
    const char *csv = tmpdir("read.csv");
    ASSERT_OK(ot_train_write_csv(&r, csv));
    ot_train_point *p = NULL;
    int64_t n = 0;
    ASSERT_OK(ot_train_read_csv(csv, &p, &n));
    ASSERT_TRUE(n == 6);
    for (int64_t i = 0; i < n; i++) {
        EXPECT_INT_EQ(p[i].step, r.points[i].step);
        EXPECT_TRUE(fabs(p[i].loss - r.points[i].loss) <= 1e-8 * fabs(r.points[i].loss));
        EXPECT_TRUE((p[i].test_accuracy < 0) == (r.points[i].test_accuracy < 0));
    }
    ot_free(p);
    ot_train_report_clear(&r);
    EXPECT_STATUS(ot_train_read_csv(tmpdir("missing.csv"), &p, &n), OT_ERR_NOT_FOUND);
    const char *bad[] = {"step,loss\n1,2\n",
                         "step,loss,train_accuracy,test_accuracy,lr\n1,2,3,,x\n",
                         "step,loss,train_accuracy,test_accuracy,lr\n2,1,1,,1\n2,1,1,,1\n", ""};
    const char *why[] = {":1: not a metrics file", ":2: malformed row",
                         ":3: step 2 does not follow", "empty"};
    for (int i = 0; i < 4; i++) {
        FILE *f = fopen(csv, "w");
        ASSERT_TRUE(f != NULL);
        fputs(bad[i], f);
        fclose(f);
        EXPECT_STATUS(ot_train_read_csv(csv, &p, &n), OT_ERR_CORRUPT_DATA);
        EXPECT_STR_CONTAINS(ot_last_error(), why[i]);
    }
}

/* Rows appended one by one make the file ot_train_write_csv writes, byte for byte; a last row cut
 * off without its newline (an append stopped by a kill) is dropped by the reader, whatever the
 * cut leaves (a shorter number must not pass for the row). */
static void test_append_csv(void) {
    ot_train_point pts[3] = {{1, 2.302585093, 0.125, -1, 0.0003},
                             {2, 2.1, 0.25, 0.5, 0.0006},
                             {3, 1.987654321, 0.375, -1, 0.0009}};
    ot_train_report r = {0};
    r.points = pts;
    r.npoints = 3;
    const char *whole = tmpdir("whole.csv"), *csv = tmpdir("append.csv");
    ASSERT_OK(ot_train_write_csv(&r, whole));
    r.npoints = 0;
    ASSERT_OK(ot_train_write_csv(&r, csv));
    for (int i = 0; i < 3; i++) ASSERT_OK(ot_train_append_csv(csv, &pts[i]));
    size_t nw = 0, na = 0;
    char *a = slurp(whole, &nw), *b = slurp(csv, &na);
    ASSERT_TRUE(a && b);
    EXPECT_TRUE(nw == na && memcmp(a, b, nw) == 0);
    size_t last = nw - 1;
    while (last > 0 && a[last - 1] != '\n') last--; /* the start of step 3's row */
    for (size_t cut = last; cut < nw; cut++) { /* every cut of the last row, newline excluded */
        FILE *f = fopen(csv, "wb");
        ASSERT_TRUE(f != NULL);
        fwrite(a, 1, cut, f);
        fclose(f);
        ot_train_point *p = NULL;
        int64_t n = -1;
        ASSERT_OK(ot_train_read_csv(csv, &p, &n));
        EXPECT_INT_EQ(n, 2);
        if (n == 2) EXPECT_TRUE(p[1].step == 2 && p[1].test_accuracy == 0.5);
        ot_free(p);
    }
    free(a);
    free(b);
    EXPECT_STATUS(ot_train_append_csv(tmpdir("no_such.csv"), &pts[0]), OT_ERR_IO);
    EXPECT_STR_CONTAINS(ot_last_error(), "no_such.csv");
}

/* The all-reduce deadline: 30 s for a small model, plus the step's work at the slow rates. */
static void test_allreduce_timeout(void) {
    const double base = OT_TRAIN_ALLREDUCE_BASE_S * 1e9, per_byte = 1e9 / OT_TRAIN_SLOW_BYTES,
                 per_flop = 1e9 / OT_TRAIN_SLOW_FLOPS;
    /* the default model on 8 devices: 38,448 bytes combined or copied 2 x 3 times on 8 replicas */
    ot_train_step_cost c = {.local_replicas = 8, .members = 8, .allreduce_bytes = 38448};
    double want = base + 8 * 2 * 3 * 38448 * per_byte;
    EXPECT_TRUE(fabs((double)ot_train_allreduce_timeout_ns(&c) - want) < 2);
    EXPECT_TRUE(ot_train_allreduce_timeout_ns(&c) < (int64_t)31e9); /* a dead peer: ~30 s */
    /* linear in the bytes moved, by the tree's depth: 2 members 1 level, 5..8 three, 9 four */
    int members[] = {2, 3, 4, 5, 8, 9}, levels[] = {1, 2, 2, 3, 3, 4};
    for (int i = 0; i < 6; i++) {
        c = (ot_train_step_cost){
            .local_replicas = 1, .members = members[i], .allreduce_bytes = INT64_C(1) << 30};
        want = base + 2.0 * levels[i] * (double)(INT64_C(1) << 30) * per_byte;
        EXPECT_TRUE(fabs((double)ot_train_allreduce_timeout_ns(&c) - want) < 2);
    }
    /* every local replica's step, the leader's extra work */
    c = (ot_train_step_cost){.local_replicas = 4,
                             .members = 8,
                             .replica_flops = 1e9,
                             .replica_bytes = 5e8,
                             .leader_flops = 3e8,
                             .leader_bytes = 7e8};
    want = base + (4 * 1e9 + 3e8) * per_flop + (4 * 5e8 + 7e8) * per_byte;
    EXPECT_TRUE(fabs((double)ot_train_allreduce_timeout_ns(&c) - want) < 2);
    /* the model (64-10000-10000-10, 100.7M parameters, Adam) on 8 devices: far past the
     * old fixed 30 s; capped at 7 days whatever the size */
    double p = 64.0 * 10000 + 10000 + 10000.0 * 10000 + 10000 + 10000 * 10 + 10;
    c = (ot_train_step_cost){.local_replicas = 8,
                             .members = 8,
                             .allreduce_bytes = (int64_t)(p + 2) * 4,
                             .replica_flops = 6 * 16 * p + 48 * p,
                             .replica_bytes = 4 * p * 10};
    double secs = (double)ot_train_allreduce_timeout_ns(&c) / 1e9;
    printf("  hidden 10000,10000 on 8 devices: deadline %.0f s\n", secs);
    EXPECT_TRUE(secs > 600);
    c.allreduce_bytes = INT64_MAX / 4;
    EXPECT_INT_EQ(ot_train_allreduce_timeout_ns(&c), INT64_C(7) * 86400 * 1000000000);

    /* a real run: the deadline's scaled part covers a step many times over, and the run reports
     * it; a small model keeps about the base */
    ot_train_options o = small(2, 4);
    o.model.nhidden = 2;
    o.model.hidden[0] = o.model.hidden[1] = 1024;
    ot_train_report r;
    ASSERT_OK(ot_train(&o, &r));
    double step_s = r.wall_s / (double)r.steps_run, extra = r.allreduce_timeout_s - 30;
    printf("  64-1024-1024-10 on 2 devices: deadline %.1f s, a step %.3f s\n",
           r.allreduce_timeout_s, step_s);
    EXPECT_TRUE(extra > 5 * step_s);
    EXPECT_STR_CONTAINS(r.log, "deadline");
    ot_train_report_clear(&r);
    o = small(2, 2);
    ASSERT_OK(ot_train(&o, &r));
    EXPECT_TRUE(r.allreduce_timeout_s >= 30 && r.allreduce_timeout_s < 30.5);
    ot_train_report_clear(&r);
}

OT_TEST_MAIN(OT_TEST(test_learns_digits), OT_TEST(test_resume_bit_identical),
             OT_TEST(test_resume_refuses_other_state), OT_TEST(test_final_checkpoint),
             OT_TEST(test_failed_save_stops_at_once), OT_TEST(test_read_csv),
             OT_TEST(test_append_csv), OT_TEST(test_allreduce_timeout), OT_TEST(test_devices_agree),
             OT_TEST(test_fail_shrink), OT_TEST(test_fail_restore), OT_TEST(test_bad_options),
             OT_TEST(test_other_models), OT_TEST(test_report_files),
             OT_TEST(test_grad_accum_matches_devices), OT_TEST(test_grad_accum_resume),
             OT_TEST(test_grad_compress), OT_TEST(test_grad_flags_refused),
             OT_TEST(test_shard_refused), OT_TEST(test_local_sgd))
