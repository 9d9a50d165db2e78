/* --grad-compress int8 on the default job (MLP on digits, 8 devices, 400 steps) reaches the test
 * accuracy of the exact all-reduce within 0.5 points. Runs are deterministic, so the variation to
 * be honest about is across seeds: measured over seeds 0..7 the exact runs ranged 95.82-97.77%
 * and int8 ended 0 or 1 test sample (0.28 points of 359) below them, 0.17 points on average. The
 * test takes seeds 0..3: their mean difference must be within 0.5 points and no seed may lose
 * more than 2 test samples. */
#include <math.h>

#include "optitpu/train.h"
#include "ot_test.h"

static void test_int8_accuracy(void) {
    double sum = 0;
    const int seeds = 4;
    for (int seed = 0; seed < seeds; seed++) {
        ot_train_options o = ot_train_options_default();
        o.seed = (uint64_t)seed;
        ot_train_report exact, int8;
        ASSERT_OK(ot_train(&o, &exact));
        o.grad_compress = "int8";
        ASSERT_OK(ot_train(&o, &int8));
        double d = exact.test_accuracy - int8.test_accuracy;
        printf("  seed %d: exact %.2f%%, int8 %.2f%% (%lld vs %lld all-reduce bytes per step)\n",
               seed, 100 * exact.test_accuracy, 100 * int8.test_accuracy,
               (long long)exact.allreduce_bytes_per_step, (long long)int8.allreduce_bytes_per_step);
        EXPECT_TRUE(fabs(d) <= 2.0 / 359 + 1e-9);
        sum += d;
        ot_train_report_clear(&exact);
        ot_train_report_clear(&int8);
    }
    printf("  mean difference %.2f points\n", 100 * sum / seeds);
    EXPECT_TRUE(fabs(sum / seeds) <= 0.005);
}

OT_TEST_MAIN(OT_TEST(test_int8_accuracy))
