/* Train a small MLP (64-32-10, ReLU) on the UCI digits set embedded in the library, from the
 * pieces `optitpu train` is made of: the model's loss as an IR module, its gradient built by
 * ot_grad, both compiled, and Adam applied on the device by ot_tpu_optimizer.
 *
 * Exits 1 unless the test accuracy after training is at least 90%. */
#include <optitpu/optitpu.h>

#include <stdio.h>
#include <string.h>

#define BATCH 64
#define STEPS 200
#define MAXP  8

/* Uploads rows idx[0..n) of d as x f32[n, features] and y s32[n]. */
static ot_status upload(ot_device *dev, const ot_dataset *d, const int64_t *idx, int64_t n,
                        ot_buffer **x, ot_buffer **y) {
    ot_shape xs, ys;
    OT_CHECK(ot_shape_make(&xs, OT_F32, 2, (int64_t[]){n, d->features}));
    OT_CHECK(ot_shape_make(&ys, OT_S32, 1, (int64_t[]){n}));
    ot_tensor tx, ty;
    OT_CHECK(ot_tensor_alloc(&tx, &xs));
    ot_status s = ot_tensor_alloc(&ty, &ys);
    for (int64_t i = 0; i < n && s == OT_OK; i++) {
        int64_t r = idx ? idx[i] : i;
        memcpy((float *)tx.data + i * d->features, d->x + r * d->features,
               (size_t)d->features * sizeof(float));
        ((int32_t *)ty.data)[i] = d->y[r];
    }
    if (s == OT_OK) s = ot_buffer_from_host(dev, &tx, x);
    if (s == OT_OK) s = ot_buffer_from_host(dev, &ty, y);
    ot_tensor_release(&tx), ot_tensor_release(&ty);
    return s;
}

static ot_status run(void) {
    ot_dataset train = {0}, test = {0};
    ot_model *model = NULL;
    ot_module *loss = NULL, *grad = NULL, *eval = NULL;
    ot_executable *grad_exe = NULL, *eval_exe = NULL;
    ot_optimizer *adam = NULL;
    ot_tpu_optimizer *opt = NULL;
    ot_device *dev = NULL;
    ot_buffer *in[MAXP + 2] = {NULL}, *out[MAXP + 2] = {NULL}, *tx = NULL, *ty = NULL;
    ot_tensor init[MAXP] = {0}, correct = {0};
    ot_shape shapes[MAXP];
    ot_status s;

    OT_CHECK_GOTO(ot_dataset_digits(&train, &test), s, done); /* 1438 / 359 images */
    ot_model_config cfg = ot_model_config_default();          /* MLP, ReLU */
    cfg.hidden[0] = 32;
    OT_CHECK_GOTO(ot_model_create(&cfg, &model), s, done);
    int np = ot_model_param_count(model); /* dense0.w, dense0.b, dense1.w, dense1.b */
    if (np > MAXP) {
        s = ot_error(OT_ERR_OUT_OF_RANGE, "%d parameters", np);
        goto done;
    }

    /* loss = sum of cross-entropy / BATCH; the gradient module returns (loss, correct, grads) */
    OT_CHECK_GOTO(ot_model_build_loss(model, BATCH, 1.0 / BATCH, &loss), s, done);
    int64_t wrt[MAXP];
    for (int k = 0; k < np; k++) wrt[k] = k;
    ot_grad_options go = ot_grad_options_default();
    go.loss_index = 0;
    OT_CHECK_GOTO(ot_grad(loss, wrt, np, &go, &grad), s, done);
    OT_CHECK_GOTO(ot_compile(grad, NULL, &grad_exe), s, done);
    OT_CHECK_GOTO(ot_model_build_loss(model, test.n, 1.0 / (double)test.n, &eval), s, done);
    OT_CHECK_GOTO(ot_compile(eval, NULL, &eval_exe), s, done);

    OT_CHECK_GOTO(ot_host_device_create(0, 0, &dev), s, done);
    OT_CHECK_GOTO(ot_model_init(model, 42, init), s, done);
    for (int k = 0; k < np; k++) {
        shapes[k] = *ot_model_param_shape(model, k);
        OT_CHECK_GOTO(ot_buffer_from_host(dev, &init[k], &in[k]), s, done);
    }
    OT_CHECK_GOTO(ot_optimizer_new("adam", &adam), s, done);
    OT_CHECK_GOTO(ot_tpu_optimizer_create(adam, shapes, np, NULL, &opt), s, done);
    OT_CHECK_GOTO(ot_tpu_optimizer_add_replica(opt, dev), s, done);

    ot_run_options ro = ot_run_options_default();
    for (int64_t step = 0; step < STEPS; step++) {
        int64_t idx[BATCH];
        OT_CHECK_GOTO(ot_dataset_batch_indices(train.n, BATCH, 7, step, idx), s, done);
        for (int k = np; k < np + 2; k++) ot_buffer_free(in[k]), in[k] = NULL;
        OT_CHECK_GOTO(upload(dev, &train, idx, BATCH, &in[np], &in[np + 1]), s, done);
        for (int k = 0; k < np + 2; k++) ot_buffer_free(out[k]), out[k] = NULL;
        OT_CHECK_GOTO(ot_device_execute(dev, grad_exe, in, np + 2, out, np + 2, &ro, NULL), s,
                      done);
        /* in[0..np) are the parameters: the step replaces them with the updated buffers */
        OT_CHECK_GOTO(ot_tpu_optimizer_step(opt, dev, in, out + 2, step + 1, 3e-3, NULL), s, done);
        if ((step + 1) % 100 == 0) {
            ot_tensor l;
            OT_CHECK_GOTO(ot_buffer_to_host(out[0], &l), s, done);
            printf("step %3lld  batch loss %.4f\n", (long long)step + 1, (double)*(float *)l.data);
            ot_tensor_release(&l);
        }
    }

    /* evaluation: the same parameters, the test set's loss module */
    OT_CHECK_GOTO(upload(dev, &test, NULL, test.n, &tx, &ty), s, done);
    ot_buffer *ein[MAXP + 2], *eout[2] = {NULL, NULL};
    memcpy(ein, in, (size_t)np * sizeof *ein);
    ein[np] = tx, ein[np + 1] = ty;
    OT_CHECK_GOTO(ot_device_execute(dev, eval_exe, ein, np + 2, eout, 2, &ro, NULL), s, done);
    s = ot_buffer_to_host(eout[1], &correct);
    ot_buffer_free(eout[0]), ot_buffer_free(eout[1]);
    if (s != OT_OK) goto done;
    double acc = *(float *)correct.data / (double)test.n;
    printf("test accuracy %.1f%% (%d of %lld)\n", 100 * acc, (int)*(float *)correct.data,
           (long long)test.n);
    if (acc < 0.9) s = ot_error(OT_ERR_INTERNAL, "test accuracy %.3f below 0.9", acc);
done:
    ot_tpu_optimizer_free(opt);
    for (int k = 0; k < MAXP + 2; k++) ot_buffer_free(in[k]), ot_buffer_free(out[k]);
    for (int k = 0; k < MAXP; k++) ot_tensor_release(&init[k]);
    ot_buffer_free(tx), ot_buffer_free(ty);
    ot_tensor_release(&correct);
    ot_device_free(dev);
    ot_optimizer_free(adam);
    ot_executable_free(grad_exe), ot_executable_free(eval_exe);
    ot_module_free(loss), ot_module_free(grad), ot_module_free(eval);
    ot_model_free(model);
    ot_dataset_free(&train), ot_dataset_free(&test);
    return s;
}

int main(void) {
    if (run() != OT_OK) {
        fprintf(stderr, "train_mlp: %s\n", ot_last_error());
        return 1;
    }
    printf("ok\n");
    return 0;
}
