/* Adam on your own arrays with ot_tpu_optimizer: two parameters updated by one compiled module,
 * stepped on a host device, with a cosine learning-rate schedule.
 *
 * The loss is 0.5 * |p - target|^2 per parameter, so the gradient is p - target. The program runs
 * the same steps through the reference evaluator (ot_optimizer_step_reference) and exits 1 unless
 * every parameter is bit-identical to it, the loss fell, and the update was compiled once. */
#include <optitpu/optitpu.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NP    2
#define STEPS 50

static const int64_t sizes[NP] = {1000, 10};

static float target(int k, int64_t i) {
    return (float)(k + 1) * sinf((float)i * 0.01f);
}

/* Gradient of 0.5 * |p - target|^2 into g; returns the loss. */
static double grad(int k, const ot_tensor *p, ot_tensor *g) {
    const float *pv = p->data;
    float *gv = g->data;
    double loss = 0;
    for (int64_t i = 0; i < sizes[k]; i++) {
        gv[i] = pv[i] - target(k, i);
        loss += 0.5 * (double)gv[i] * gv[i];
    }
    return loss;
}

static ot_status run(void) {
    ot_optimizer *adam = NULL, *ref[NP] = {NULL};
    ot_tpu_optimizer *t = NULL;
    ot_lr_schedule *sched = NULL;
    ot_device *dev = NULL;
    ot_buffer *params[NP] = {NULL}, *grads[NP] = {NULL};
    ot_tensor host[NP] = {0}, g[NP] = {0}, refp[NP] = {0}, st[NP][2] = {0};
    ot_shape shapes[NP];
    ot_status s;
    double first = 0, last = 0;

    OT_CHECK_GOTO(ot_optimizer_new("adam", &adam), s, done);
    OT_CHECK_GOTO(ot_optimizer_set(adam, "weight_decay", 1e-4), s, done);
    OT_CHECK_GOTO(ot_lr_schedule_cosine(0.05, 0.005, STEPS, 1.0, &sched), s, done);
    OT_CHECK_GOTO(ot_host_device_create(0, 0, &dev), s, done);
    for (int k = 0; k < NP; k++) {
        OT_CHECK_GOTO(ot_shape_make(&shapes[k], OT_F32, 1, &sizes[k]), s, done);
        OT_CHECK_GOTO(ot_tensor_alloc(&refp[k], &shapes[k]), s, done); /* zeros, like params */
        OT_CHECK_GOTO(ot_tensor_alloc(&g[k], &shapes[k]), s, done);
        OT_CHECK_GOTO(ot_buffer_from_host(dev, &refp[k], &params[k]), s, done);
        /* the reference: a clone per parameter, since each keeps its own step count */
        OT_CHECK_GOTO(ot_optimizer_clone(adam, &ref[k]), s, done);
        for (int i = 0; i < 2; i++) /* exp_avg, exp_avg_sq */
            OT_CHECK_GOTO(ot_optimizer_state_alloc(ref[k], i, &shapes[k], &st[k][i]), s, done);
    }
    OT_CHECK_GOTO(ot_tpu_optimizer_create(adam, shapes, NP, NULL, &t), s, done); /* compiles */
    OT_CHECK_GOTO(ot_tpu_optimizer_add_replica(t, dev), s, done);

    for (int64_t step = 1; step <= STEPS; step++) {
        double lr = ot_lr_schedule_lr(sched, step - 1), loss = 0;
        for (int k = 0; k < NP; k++) {
            ot_tensor_release(&host[k]);
            OT_CHECK_GOTO(ot_buffer_to_host(params[k], &host[k]), s, done);
            loss += grad(k, &host[k], &g[k]);
            ot_buffer_free(grads[k]), grads[k] = NULL;
            OT_CHECK_GOTO(ot_buffer_from_host(dev, &g[k], &grads[k]), s, done);
            OT_CHECK_GOTO(ot_optimizer_step_reference(ref[k], &refp[k], &g[k], st[k], 2, lr), s,
                          done);
        }
        /* params[k] receive new handles; the old ones are donated to the update */
        OT_CHECK_GOTO(ot_tpu_optimizer_step(t, dev, params, grads, step, lr, NULL), s, done);
        if (step == 1) first = loss;
        last = loss;
        if (step % 10 == 0 || step == 1)
            printf("step %2lld  lr %.4f  loss %.6f\n", (long long)step, lr, loss);
    }

    int differ = 0;
    for (int k = 0; k < NP; k++) {
        ot_tensor_release(&host[k]);
        OT_CHECK_GOTO(ot_buffer_to_host(params[k], &host[k]), s, done);
        differ += memcmp(host[k].data, refp[k].data, host[k].nbytes) != 0;
    }
    ot_tpu_profile prof;
    OT_CHECK_GOTO(ot_tpu_optimizer_profile(t, &prof), s, done);
    printf("%lld steps, %lld compile(s), %lld bytes per step, loss %.3f -> %.3f\n",
           (long long)prof.steps, (long long)prof.compiles, (long long)prof.bytes_per_step, first,
           last);
    if (differ)
        s = ot_error(OT_ERR_INTERNAL, "%d parameter(s) differ from the reference step", differ);
    else if (!(last < 0.1 * first) || prof.compiles != 1)
        s = ot_error(OT_ERR_INTERNAL, "loss %g -> %g, %lld compiles", first, last,
                     (long long)prof.compiles);
done:
    ot_tpu_optimizer_free(t);
    for (int k = 0; k < NP; k++) {
        ot_buffer_free(params[k]), ot_buffer_free(grads[k]);
        ot_tensor_release(&host[k]), ot_tensor_release(&g[k]), ot_tensor_release(&refp[k]);
        ot_tensor_release(&st[k][0]), ot_tensor_release(&st[k][1]);
        ot_optimizer_free(ref[k]);
    }
    ot_device_free(dev);
    ot_lr_schedule_free(sched);
    ot_optimizer_free(adam);
    return s;
}

int main(void) {
    if (run() != OT_OK) {
        fprintf(stderr, "adam: %s\n", ot_last_error());
        return 1;
    }
    printf("ok: bit-identical to the reference step\n");
    return 0;
}
