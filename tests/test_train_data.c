/* Training data and models: the digits CSV parser (good and bad input), the embedded set and its
 * split, synthetic data, seeded batch order, model shapes and the loss graph evaluated against a
 * host computation. */
#include <math.h>

#include "optitpu/exec.h"
#include "optitpu/train.h"
#include "train/train_internal.h"
#include "ot_test.h"

static char rows_[4][512];
static int row_next_;

/* A valid row with this label (a rotating set of buffers, so two can appear in one call). */
static const char *row_ok(int label) {
    char *buf = rows_[row_next_++ % 4];
    char *p = buf;
    for (int i = 0; i < 64; i++) p += sprintf(p, "%d,", i % 17);
    sprintf(p, "%d", label);
    return buf;
}

static void test_parse_good(void) {
    char text[2048];
    snprintf(text, sizeof text, "%s\r\n\n%s\n", row_ok(3), row_ok(9));
    ot_dataset d;
    ASSERT_OK(ot_dataset_parse_digits_csv(text, strlen(text), &d));
    EXPECT_INT_EQ(d.n, 2);
    EXPECT_INT_EQ(d.features, 64);
    EXPECT_INT_EQ(d.y[0], 3);
    EXPECT_INT_EQ(d.y[1], 9);
    EXPECT_TRUE(d.x[16] == 1.0f && d.x[1] == 1.0f / 16);
    ot_dataset_free(&d);
    /* no trailing newline */
    const char *one = row_ok(0);
    ASSERT_OK(ot_dataset_parse_digits_csv(one, strlen(one), &d));
    EXPECT_INT_EQ(d.n, 1);
    ot_dataset_free(&d);
}

static void expect_bad(const char *text, const char *needle) {
    ot_dataset d;
    int64_t live = ot_alloc_live();
    ot_status s = ot_dataset_parse_digits_csv(text, strlen(text), &d);
    EXPECT_INT_EQ(s, OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), needle);
    EXPECT_TRUE(d.x == NULL && d.y == NULL && d.n == 0);
    EXPECT_INT_EQ(ot_alloc_live(), live);
}

static void test_parse_bad(void) {
    char text[2048];
    expect_bad("", "no rows");
    expect_bad("\n\r\n", "no rows");
    expect_bad("1,2,3\n", "line 1: 3 fields");
    snprintf(text, sizeof text, "%s,7\n", row_ok(1));
    expect_bad(text, "more than 65 fields");
    snprintf(text, sizeof text, "%s\n%s", row_ok(1), row_ok(10));
    expect_bad(text, "line 2: label 10");
    snprintf(text, sizeof text, "17,%s", row_ok(1) + 2);
    expect_bad(text, "pixel 17 outside 0..16");
    snprintf(text, sizeof text, "-1,%s", row_ok(1) + 2);
    expect_bad(text, "line 1 field 1");
    snprintf(text, sizeof text, "%s x", row_ok(1));
    expect_bad(text, "trailing text");
    snprintf(text, sizeof text, "9999999999,%s", row_ok(1) + 2);
    expect_bad(text, "field 1");
    /* a NUL byte inside the text */
    snprintf(text, sizeof text, "%s", row_ok(4));
    text[10] = '\0';
    ot_dataset d;
    EXPECT_INT_EQ(ot_dataset_parse_digits_csv(text, strlen(row_ok(4)), &d),
                  OT_ERR_INVALID_ARGUMENT);
    /* allocation failures leave nothing behind */
    snprintf(text, sizeof text, "%s\n", row_ok(2));
    for (int n = 0; n < 4; n++) {
        int64_t live = ot_alloc_live();
        ot_alloc_fail_after(n);
        ot_status s = ot_dataset_parse_digits_csv(text, strlen(text), &d);
        ot_alloc_fail_after(-1);
        if (s == OT_OK)
            ot_dataset_free(&d);
        else
            EXPECT_INT_EQ(s, OT_ERR_OUT_OF_MEMORY);
        EXPECT_INT_EQ(ot_alloc_live(), live);
    }
}

static void test_digits(void) {
    ot_dataset tr, te;
    ASSERT_OK(ot_dataset_digits(&tr, &te));
    EXPECT_INT_EQ(tr.n, 1438);
    EXPECT_INT_EQ(te.n, 359);
    EXPECT_INT_EQ(tr.classes, 10);
    /* the first row of the file is a 0 (scikit-learn's digits[0]); row 4 is the first test row */
    EXPECT_INT_EQ(tr.y[0], 0);
    EXPECT_TRUE(tr.x[2] == 5.0f / 16 && tr.x[3] == 13.0f / 16);
    int counts[10] = {0};
    for (int64_t i = 0; i < tr.n; i++) counts[tr.y[i]]++;
    for (int c = 0; c < 10; c++) EXPECT_TRUE(counts[c] >= 125 && counts[c] <= 165);
    ot_dataset_free(&tr);
    ot_dataset_free(&te);
}

static void test_synthetic_and_batches(void) {
    ot_dataset a, b;
    ASSERT_OK(ot_dataset_synthetic(100, 8, 3, 0.5, 7, &a));
    ASSERT_OK(ot_dataset_synthetic(100, 8, 3, 0.5, 7, &b));
    EXPECT_TRUE(memcmp(a.x, b.x, 100 * 8 * 4) == 0 && memcmp(a.y, b.y, 100 * 4) == 0);
    ot_dataset_free(&b);
    ASSERT_OK(ot_dataset_synthetic(100, 8, 3, 0.5, 8, &b));
    EXPECT_TRUE(memcmp(a.x, b.x, 100 * 8 * 4) != 0);
    ot_dataset_free(&a);
    ot_dataset_free(&b);
    EXPECT_INT_EQ(ot_dataset_synthetic(0, 8, 3, 0.5, 1, &a), OT_ERR_INVALID_ARGUMENT);
    EXPECT_INT_EQ(ot_dataset_synthetic(10, 8, 1, 0.5, 1, &a), OT_ERR_INVALID_ARGUMENT);

    /* an epoch's batches partition a permutation; the next epoch is another permutation */
    enum { N = 103, B = 10 };
    int seen[N] = {0};
    int64_t idx[B], first[B];
    for (int s = 0; s < N / B; s++) {
        ASSERT_OK(ot_dataset_batch_indices(N, B, 5, s, idx));
        if (s == 0) memcpy(first, idx, sizeof idx);
        for (int i = 0; i < B; i++) {
            ASSERT_TRUE(idx[i] >= 0 && idx[i] < N);
            seen[idx[i]]++;
        }
    }
    int dup = 0, total = 0;
    for (int i = 0; i < N; i++) {
        dup += seen[i] > 1;
        total += seen[i];
    }
    EXPECT_INT_EQ(dup, 0);
    EXPECT_INT_EQ(total, (N / B) * B);
    ASSERT_OK(ot_dataset_batch_indices(N, B, 5, N / B, idx)); /* epoch 1 */
    EXPECT_TRUE(memcmp(idx, first, sizeof idx) != 0);
    ASSERT_OK(ot_dataset_batch_indices(N, B, 5, 0, idx)); /* reproducible */
    EXPECT_TRUE(memcmp(idx, first, sizeof idx) == 0);
    EXPECT_INT_EQ(ot_dataset_batch_indices(N, N + 1, 5, 0, idx), OT_ERR_INVALID_ARGUMENT);
    EXPECT_INT_EQ(ot_dataset_batch_indices(N, B, 5, -1, idx), OT_ERR_INVALID_ARGUMENT);

    /* train's per-step indices keep the epoch's permutation: the same indices as drawn afresh
     * for every step of three epochs, and the permutation is reused within an epoch (one put in
     * its place is what the next step of that epoch reads) */
    int64_t perm[N], ep = -1, want[B];
    for (int s = 0; s < 3 * (N / B); s++) {
        ASSERT_OK(ot_train_batch_indices(N, B, 5, s, perm, &ep, idx));
        ASSERT_OK(ot_dataset_batch_indices(N, B, 5, s, want));
        EXPECT_TRUE(memcmp(idx, want, sizeof idx) == 0);
        EXPECT_INT_EQ(ep, s / (N / B));
    }
    for (int i = 0; i < N; i++) perm[i] = N - 1 - i;
    ASSERT_OK(ot_train_batch_indices(N, B, 5, 2 * (N / B) + 1, perm, &ep, idx));
    EXPECT_INT_EQ(idx[0], N - 1 - B);
    EXPECT_INT_EQ(ot_train_batch_indices(N, B, 5, 0, NULL, &ep, idx), OT_ERR_INVALID_ARGUMENT);
}

static void test_model_shapes(void) {
    ot_model_config c = ot_model_config_default();
    c.nhidden = 2;
    c.hidden[0] = 32;
    c.hidden[1] = 16;
    ot_model *m;
    ASSERT_OK(ot_model_create(&c, &m));
    EXPECT_INT_EQ(ot_model_param_count(m), 6);
    EXPECT_STR_EQ(ot_model_param_name(m, 2), "dense1.w");
    EXPECT_INT_EQ(ot_model_param_shape(m, 2)->dims[0], 32);
    EXPECT_INT_EQ(ot_model_param_shape(m, 2)->dims[1], 16);
    EXPECT_INT_EQ(ot_model_param_elements(m), 64 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10);
    ot_model_free(m);
    c.nhidden = 0;
    EXPECT_INT_EQ(ot_model_create(&c, &m), OT_ERR_INVALID_ARGUMENT);
    c = ot_model_config_default();
    c.kind = OT_MODEL_CNN;
    c.image_h = 7; /* 7 * 8 != 64 */
    EXPECT_INT_EQ(ot_model_create(&c, &m), OT_ERR_INVALID_ARGUMENT);
    c.classes = 1;
    EXPECT_INT_EQ(ot_model_create(&c, &m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_INT_EQ(ot_model_kind_from_name("cnn"), OT_MODEL_CNN);
    EXPECT_INT_EQ(ot_model_kind_from_name("resnet"), -1);
    EXPECT_INT_EQ(ot_activation_from_name("gelu"), OT_ACT_GELU);
}

/* The loss graph against a host computation in double precision. */
static void check_loss(ot_model_kind kind, ot_activation act) {
    ot_model_config c = ot_model_config_default();
    c.kind = kind;
    c.activation = act;
    c.hidden[0] = 12;
    ot_model *m;
    ASSERT_OK(ot_model_create(&c, &m));
    enum { B = 5 };
    int np = ot_model_param_count(m);
    ot_value args[16];
    ot_tensor init[16];
    ASSERT_OK(ot_model_init(m, 3, init));
    for (int k = 0; k < np; k++) {
        /* non-zero biases so the test sees them */
        if (init[k].shape.rank == 1)
            for (int64_t i = 0; i < init[k].shape.dims[0]; i++)
                ((float *)init[k].data)[i] = 0.01f * (float)i;
        ASSERT_OK(ot_value_from_tensor(&args[k], &init[k]));
    }
    ot_dataset tr, te;
    ASSERT_OK(ot_dataset_digits(&tr, &te));
    ot_shape xs, ys;
    ot_shape_make(&xs, OT_F32, 2, (int64_t[]){B, 64});
    ot_shape_make(&ys, OT_S32, 1, (int64_t[]){B});
    ot_tensor tx, ty;
    ot_tensor_borrow(&tx, &xs, tr.x);
    ot_tensor_borrow(&ty, &ys, tr.y);
    ASSERT_OK(ot_value_from_tensor(&args[np], &tx));
    ASSERT_OK(ot_value_from_tensor(&args[np + 1], &ty));
    ot_module *mod;
    ASSERT_OK(ot_model_build_loss(m, B, 0.25, &mod));
    ot_value r;
    ASSERT_OK(ot_evaluate(mod, args, np + 2, NULL, &r));
    double loss = *(float *)ot_value_leaf(&r, 0)->array.data;
    double correct = *(float *)ot_value_leaf(&r, 1)->array.data;

    /* host forward (MLP / logreg only; the CNN is checked for finiteness and range) */
    if (kind != OT_MODEL_CNN) {
        double want = 0, ok = 0;
        for (int b = 0; b < B; b++) {
            double h[128], logits[10];
            const float *x = tr.x + b * 64;
            int in = 64;
            double cur[128];
            for (int i = 0; i < 64; i++) cur[i] = x[i];
            int layers = kind == OT_MODEL_MLP ? 1 : 0;
            int k = 0;
            for (int l = 0; l < layers; l++, k += 2) {
                const float *w = init[k].data, *bb = init[k + 1].data;
                int out = (int)init[k].shape.dims[1];
                for (int j = 0; j < out; j++) {
                    double s = 0;
                    for (int i = 0; i < in; i++) s += cur[i] * w[i * out + j];
                    s += bb[j];
                    if (act == OT_ACT_RELU)
                        s = s > 0 ? s : 0;
                    else if (act == OT_ACT_TANH)
                        s = tanh(s);
                    else
                        s = 0.5 * s * (1 + tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
                    h[j] = s;
                }
                for (int j = 0; j < out; j++) cur[j] = h[j];
                in = out;
            }
            const float *w = init[k].data, *bb = init[k + 1].data;
            double mx = -INFINITY;
            for (int j = 0; j < 10; j++) {
                double s = 0;
                for (int i = 0; i < in; i++) s += cur[i] * w[i * 10 + j];
                logits[j] = s + bb[j];
                if (logits[j] > mx) mx = logits[j];
            }
            double se = 0;
            for (int j = 0; j < 10; j++) se += exp(logits[j] - mx);
            want += -(logits[tr.y[b]] - mx - log(se));
            ok += logits[tr.y[b]] >= mx;
        }
        EXPECT_TRUE(fabs(loss - 0.25 * want) <= 1e-5 * (1 + fabs(want)));
        EXPECT_TRUE(correct == ok);
    } else {
        EXPECT_TRUE(isfinite(loss) && loss > 0);
        EXPECT_TRUE(correct >= 0 && correct <= B);
    }
    ot_value_release(&r);
    ot_module_free(mod);
    for (int k = 0; k < np + 2; k++) ot_value_release(&args[k]);
    for (int k = 0; k < np; k++) ot_tensor_release(&init[k]);
    ot_dataset_free(&tr);
    ot_dataset_free(&te);
    ot_model_free(m);
}

static void test_loss_graphs(void) {
    check_loss(OT_MODEL_LOGREG, OT_ACT_RELU);
    check_loss(OT_MODEL_MLP, OT_ACT_RELU);
    check_loss(OT_MODEL_MLP, OT_ACT_TANH);
    check_loss(OT_MODEL_MLP, OT_ACT_GELU);
    check_loss(OT_MODEL_CNN, OT_ACT_RELU);
}

OT_TEST_MAIN(OT_TEST(test_parse_good), OT_TEST(test_parse_bad), OT_TEST(test_digits),
             OT_TEST(test_synthetic_and_batches), OT_TEST(test_model_shapes),
             OT_TEST(test_loss_graphs))
