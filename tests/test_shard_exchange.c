/* The split-phase sharded exchange (collectives.h) and the runtime's kernel hook that the
 * overlapped sharded training step is built from.
 *
 * Exchange: on 1, 2, 3, 5 and 8 threads, blocks of 1 to 3000 elements, random buckets posted in
 * a random order per member with non-blocking reductions between the posts, over several steps,
 * each member's reduced block is bit for bit ot_comm_reduce_scatter's with the same algorithm
 * (tree and direct, which differ on these values), and every member reads every published block
 * of the all-gather; bad buckets and orders are refused; an abort and a deadline end a wait.
 * Odd members post in place (post_view) on even steps, their bound grads zeroed.
 * Hook: called before and after every kernel in order, an output readable once its last writer
 * has run (in place on the host device), an error from it stops the run with nothing returned,
 * or with the outputs left to the caller (keep_outputs). */
#include "optitpu/collectives.h"
#include "optitpu/compiler.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define STEPS 3

typedef struct xcase {
    int n;
    size_t block;
    ot_coll_algo order;
    int nb;
    size_t off[64], len[64];
    ot_shard_exchange *x;
    int bad; /* members whose result differed */
    pthread_mutex_t mu;
} xcase;

static uint64_t mix(uint64_t z) {
    return ot_test_splitmix64(&z);
}

/* Member r's gradient element i of step s: magnitudes 1e-3 to 1e3, so the order of the sums
 * shows in the bits. */
static float grad(int r, size_t i, int s) {
    uint64_t h = mix(((uint64_t)r << 40) ^ ((uint64_t)s << 32) ^ i);
    float m = (float)((h >> 11) % 1000000) / 1000.0f - 500.0f;
    return m * ((h & 3) == 0 ? 1e-3f : (h & 3) == 1 ? 1.0f : 3.1f);
}

static ot_status member_fn(void *ud, int r, ot_comm *c) {
    xcase *X = ud;
    size_t total = (size_t)X->n * X->block;
    float *g = calloc(total, sizeof *g), *p = calloc(total, sizeof *p);
    float *gv = calloc(total, sizeof *gv); /* the values posted in place (post_view) */
    float *red = calloc(X->block, sizeof *red), *ref = calloc(X->block, sizeof *ref);
    int *perm = malloc((size_t)X->nb * sizeof *perm);
    ot_status s = g && gv && p && red && ref && perm ? OT_OK : OT_ERR_OUT_OF_MEMORY;
    bool ok = true;
    if (s == OT_OK) s = ot_shard_exchange_bind(X->x, r, g, p + (size_t)r * X->block);
    ot_coll_options co = ot_coll_options_default();
    co.algo = X->order;
    for (int step = 1; s == OT_OK && step <= STEPS; step++) {
        uint64_t seq = (uint64_t)step;
        s = ot_shard_exchange_grads_writable(X->x, r, seq, 0);
        /* odd members post their values in place on even steps: the bound grads hold zeros
         * then, so a reduction that read them would differ */
        bool view = r % 2 == 1 && step % 2 == 0;
        for (size_t i = 0; i < total; i++) {
            gv[i] = grad(r, i, step);
            g[i] = view ? 0.0f : gv[i];
        }
        for (int b = 0; b < X->nb; b++) perm[b] = b;
        uint64_t h = mix((uint64_t)(r * 131 + step));
        for (int b = X->nb - 1; b > 0; b--) { /* this member's own posting order */
            h = mix(h);
            int j = (int)(h % (uint64_t)(b + 1)), t = perm[b];
            perm[b] = perm[j];
            perm[j] = t;
        }
        for (int b = 0; s == OT_OK && b < X->nb; b++) {
            s = view ? ot_shard_exchange_post_view(X->x, r, seq, perm[b], gv + X->off[perm[b]])
                     : ot_shard_exchange_post(X->x, r, seq, perm[b]);
            if (s == OT_OK) s = ot_shard_exchange_reduce(X->x, r, seq, red, false, 0, NULL);
        }
        if (s == OT_OK) s = ot_shard_exchange_reduce(X->x, r, seq, red, true, 0, NULL);
        if (s == OT_OK) ok &= ot_shard_exchange_reduced(X->x, r, seq);
        if (s == OT_OK) s = ot_comm_reduce_scatter(c, gv, ref, X->block, OT_F32, OT_REDOP_SUM, &co);
        /* the buckets cover the whole vector here: every element of the block is reduced */
        if (s == OT_OK) ok &= memcmp(red, ref, X->block * sizeof *red) == 0;
        /* the all-gather: this member's block, then every member's */
        if (s == OT_OK) s = ot_shard_exchange_params_writable(X->x, r, seq, 0);
        for (size_t i = 0; i < X->block; i++)
            p[(size_t)r * X->block + i] = (float)(step * 100000 + r * 1000) + (float)(i % 997);
        if (s == OT_OK) s = ot_shard_exchange_publish(X->x, r, seq);
        if (s == OT_OK) s = ot_shard_exchange_wait_published(X->x, seq, 0, total, 0);
        for (int q = 0; s == OT_OK && q < X->n; q++) {
            const float *b = ot_shard_exchange_block(X->x, q);
            for (size_t i = 0; i < X->block; i++)
                ok &= b[i] == (float)(step * 100000 + q * 1000) + (float)(i % 997);
        }
        if (s == OT_OK) s = ot_shard_exchange_fetched(X->x, r, seq);
    }
    /* nobody frees its vectors while another may read them */
    if (s == OT_OK) s = ot_comm_barrier(c, NULL);
    if (!ok) {
        pthread_mutex_lock(&X->mu);
        X->bad++;
        pthread_mutex_unlock(&X->mu);
    }
    free(g);
    free(gv);
    free(p);
    free(red);
    free(ref);
    free(perm);
    return s;
}

/* Random contiguous buckets covering [0, total) (at most 64, in a random index order). */
static void make_buckets(xcase *X, uint64_t seed) {
    size_t total = (size_t)X->n * X->block, pos = 0;
    int nb = 0;
    while (pos < total && nb < 63) {
        seed = mix(seed);
        size_t len = 1 + seed % (total / 4 + 1);
        if (len > total - pos) len = total - pos;
        X->off[nb] = pos, X->len[nb] = len, nb++;
        pos += len;
    }
    if (pos < total) X->off[nb] = pos, X->len[nb] = total - pos, nb++;
    for (int b = nb - 1; b > 0; b--) {
        seed = mix(seed);
        int j = (int)(seed % (uint64_t)(b + 1));
        size_t o = X->off[b], l = X->len[b];
        X->off[b] = X->off[j], X->len[b] = X->len[j];
        X->off[j] = o, X->len[j] = l;
    }
    X->nb = nb;
}

static void test_exchange_matches_reduce_scatter(void) {
    int ns[] = {1, 2, 3, 5, 8};
    size_t blocks[] = {1, 17, 1030, 3000};
    int cases = 0;
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++)
            for (int o = 0; o < 2; o++) {
                xcase X = {
                    .n = ns[a], .block = blocks[b], .order = o ? OT_ALGO_DIRECT : OT_ALGO_TREE};
                pthread_mutex_init(&X.mu, NULL);
                make_buckets(&X, mix(a * 1000 + b * 10 + (size_t)o));
                ASSERT_OK(
                    ot_shard_exchange_create(X.n, X.block, X.nb, X.off, X.len, X.order, &X.x));
                EXPECT_OK(ot_local_run(X.n, member_fn, &X, NULL));
                EXPECT_INT_EQ(X.bad, 0);
                if (X.bad)
                    fprintf(stderr, "n %d block %zu %s: %d members differ\n", X.n, X.block,
                            ot_coll_algo_name(X.order), X.bad);
                ot_shard_exchange_free(X.x);
                pthread_mutex_destroy(&X.mu);
                cases++;
            }
    EXPECT_INT_EQ(cases, 40);
}

/* The two orders give different bits on these values (so the comparison above can fail). */
static void test_orders_differ(void) {
    int n = 5;
    size_t block = 1030, total = (size_t)n * block;
    float *tree = malloc(total * sizeof *tree), *direct = malloc(total * sizeof *direct);
    ASSERT_TRUE(tree && direct);
    bool differ = false;
    for (size_t i = 0; i < total; i++) {
        float t[5];
        for (int r = 0; r < n; r++) t[r] = grad(r, i, 1);
        direct[i] = (((t[0] + t[1]) + t[2]) + t[3]) + t[4];
        tree[i] = ((t[0] + t[1]) + (t[2] + t[3])) + t[4];
        differ |= memcmp(&tree[i], &direct[i], sizeof(float)) != 0;
    }
    EXPECT_TRUE(differ);
    free(tree);
    free(direct);
}

static void test_exchange_bad_input(void) {
    ot_shard_exchange *x = NULL;
    size_t off[2] = {0, 5}, len[2] = {6, 5};
    EXPECT_STATUS(ot_shard_exchange_create(2, 8, 2, off, len, OT_ALGO_TREE, &x),
                  OT_ERR_INVALID_ARGUMENT); /* [0, 6) and [5, 10) overlap */
    EXPECT_STR_CONTAINS(ot_last_error(), "overlap");
    EXPECT_TRUE(x == NULL);
    len[1] = 12;
    EXPECT_STATUS(ot_shard_exchange_create(2, 8, 2, off, len, OT_ALGO_TREE, &x),
                  OT_ERR_OUT_OF_RANGE); /* [5, 17) past 16 elements */
    len[0] = 5, len[1] = 5;
    EXPECT_STATUS(ot_shard_exchange_create(2, 8, 2, off, len, OT_ALGO_RING, &x),
                  OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "does not depend on the buckets");
    EXPECT_STATUS(ot_shard_exchange_create(0, 8, 2, off, len, OT_ALGO_TREE, &x),
                  OT_ERR_INVALID_ARGUMENT);
    ASSERT_OK(ot_shard_exchange_create(2, 8, 2, off, len, OT_ALGO_DIRECT, &x));
    EXPECT_STATUS(ot_shard_exchange_post(x, 2, 1, 0), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_shard_exchange_post(x, 0, 1, 2), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_shard_exchange_wait_published(x, 1, 10, 7, 0), OT_ERR_OUT_OF_RANGE);
    EXPECT_STATUS(ot_shard_exchange_bind(x, 0, NULL, NULL), OT_ERR_INVALID_ARGUMENT);
    ot_shard_exchange_free(x);
}

typedef struct waiter {
    ot_shard_exchange *x;
    float red[8];
    ot_status s;
} waiter;

static void *wait_reduce(void *p) {
    waiter *w = p;
    w->s = ot_shard_exchange_reduce(w->x, 0, 1, w->red, true, 0, NULL);
    return NULL;
}

static void test_exchange_abort_and_deadline(void) {
    size_t off[1] = {0}, len[1] = {16};
    float g[16] = {0}, p[16] = {0};
    waiter w = {0};
    ASSERT_OK(ot_shard_exchange_create(2, 8, 1, off, len, OT_ALGO_TREE, &w.x));
    EXPECT_OK(ot_shard_exchange_bind(w.x, 0, g, p));
    /* member 1 never posts: a deadline ends the wait with TIMEOUT */
    EXPECT_OK(ot_shard_exchange_post(w.x, 0, 1, 0));
    uint64_t t0 = ot_now_ns();
    EXPECT_STATUS(ot_shard_exchange_reduce(w.x, 0, 1, w.red, true, t0 + 20000000, NULL),
                  OT_ERR_TIMEOUT);
    EXPECT_TRUE(ot_now_ns() - t0 >= 20000000);
    /* the timeout aborted the exchange: the others' waits end too */
    EXPECT_STATUS(ot_shard_exchange_wait_published(w.x, 1, 0, 16, 0), OT_ERR_TIMEOUT);
    ot_shard_exchange_free(w.x);

    ASSERT_OK(ot_shard_exchange_create(2, 8, 1, off, len, OT_ALGO_TREE, &w.x));
    EXPECT_OK(ot_shard_exchange_bind(w.x, 0, g, p));
    EXPECT_OK(ot_shard_exchange_post(w.x, 0, 1, 0));
    pthread_t th;
    ASSERT_TRUE(pthread_create(&th, NULL, wait_reduce, &w) == 0);
    usleep(20000);
    ot_shard_exchange_abort(w.x, OT_ERR_PEER_FAILED, "device 1 failed");
    pthread_join(th, NULL);
    EXPECT_INT_EQ(w.s, OT_ERR_PEER_FAILED);
    ot_shard_exchange_free(w.x);
}

/* ---- the kernel hook ------------------------------------------------------------------------ */

static const char k_chain[] = "HloModule chain\n"
                              "ENTRY main {\n"
                              "  x = f32[64] parameter(0)\n"
                              "  y = f32[64] parameter(1)\n"
                              "  a = f32[64] exponential(x)\n"
                              "  b = f32[64] sine(a)\n"
                              "  c = f32[64,64] dot(b, y), lhs_contracting_dims={}, "
                              "rhs_contracting_dims={}\n"
                              "  ROOT t = (f32[64], f32[64,64]) tuple(a, c)\n"
                              "}\n";

typedef struct hook_log {
    const ot_executable *exe;
    ot_buffer **outs;
    int calls, next, bad_order;
    int fail_at; /* return an error before this kernel (-1: never) */
    int last_writer0;
    float out0[64];
    bool read0;
} hook_log;

static ot_status record_hook(void *ud, int k, bool done) {
    hook_log *h = ud;
    h->calls++;
    if (!done && k == h->fail_at)
        return ot_error(OT_ERR_CANCELLED, "the hook stops the run before kernel %d", k);
    /* before k, after k, before k+1, ... (an output fusion announces k + 1 early) */
    if (!done && k != h->next && k != h->next + 1) h->bad_order++;
    if (done) {
        if (k != h->next) h->bad_order++;
        h->next = k + 1;
    }
    if (done && k == h->last_writer0) {
        h->read0 = ot_buffer_read_bytes(h->outs[0], 0, h->out0, sizeof h->out0) == OT_OK;
    }
    return OT_OK;
}

static void test_kernel_hook(void) {
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(k_chain, strlen(k_chain), NULL, &m));
    ot_executable *e = NULL;
    ot_compile_options co = ot_compile_options_default();
    co.opt_level = 0; /* one kernel per instruction: output 0 is final before the last kernel */
    ASSERT_OK(ot_compile(m, &co, &e));
    ot_module_free(m);
    ot_backend_options bo = ot_backend_options_default();
    bo.devices = 1;
    ot_backend *b = NULL;
    ASSERT_OK(ot_backend_create(&bo, &b));
    ot_device *d = ot_backend_device(b, 0);
    float xv[64], yv[64];
    for (int i = 0; i < 64; i++) xv[i] = (float)i / 64.0f, yv[i] = 1.0f - (float)i / 32.0f;
    ot_shape s;
    ot_shape_make(&s, OT_F32, 1, (int64_t[]){64});
    ot_tensor tx, ty;
    ot_tensor_borrow(&tx, &s, xv);
    ot_tensor_borrow(&ty, &s, yv);
    ot_buffer *args[2] = {NULL, NULL}, *outs[2] = {NULL, NULL};
    ASSERT_OK(ot_buffer_from_host(d, &tx, &args[0]));
    ASSERT_OK(ot_buffer_from_host(d, &ty, &args[1]));
    hook_log h = {.exe = e, .outs = outs, .fail_at = -1, .last_writer0 = -1};
    int nk = ot_executable_kernel_count(e);
    for (int i = 0; i < nk; i++) {
        const ot_kernel *kn = ot_executable_kernel(e, i);
        for (int q = 0; q < kn->noutputs; q++) {
            const ot_slot *sl = ot_executable_slot(e, kn->outputs[q]);
            if (sl->kind == OT_SLOT_OUTPUT && sl->number == 0) h.last_writer0 = i;
        }
    }
    EXPECT_TRUE(h.last_writer0 >= 0 && h.last_writer0 < nk - 1);
    ot_run_options ro = ot_run_options_default();
    ro.kernel_hook = record_hook;
    ro.kernel_hook_ud = &h;
    ASSERT_OK(ot_device_execute(d, e, args, 2, outs, 2, &ro, NULL));
    EXPECT_INT_EQ(h.bad_order, 0);
    EXPECT_INT_EQ(h.next, nk);
    EXPECT_TRUE(h.calls >= 2 * nk);
    EXPECT_TRUE(h.read0);
    float fin[64];
    EXPECT_OK(ot_buffer_read_bytes(outs[0], 0, fin, sizeof fin));
    EXPECT_TRUE(memcmp(fin, h.out0, sizeof fin) == 0); /* final when its last writer was done */
    /* a host device's buffer is readable in place */
    const void *view = ot_buffer_host_data(outs[0]);
    EXPECT_TRUE(view && memcmp(view, fin, sizeof fin) == 0);
    EXPECT_TRUE(ot_buffer_host_data(NULL) == NULL);
    ot_buffer_free(outs[0]);
    ot_buffer_free(outs[1]);
    /* an error from the hook stops the run: that status, no outputs */
    hook_log f = {.exe = e, .outs = outs, .fail_at = 1, .last_writer0 = -1};
    ro.kernel_hook_ud = &f;
    EXPECT_STATUS(ot_device_execute(d, e, args, 2, outs, 2, &ro, NULL), OT_ERR_CANCELLED);
    EXPECT_STR_CONTAINS(ot_last_error(), "before kernel 1");
    EXPECT_TRUE(outs[0] == NULL && outs[1] == NULL);
    /* keep_outputs: the failed run leaves the outputs the hook was shown to the caller */
    hook_log k = {.exe = e, .outs = outs, .fail_at = h.last_writer0 + 1, .last_writer0 = -1};
    ro.kernel_hook_ud = &k;
    ro.keep_outputs = true;
    EXPECT_STATUS(ot_device_execute(d, e, args, 2, outs, 2, &ro, NULL), OT_ERR_CANCELLED);
    EXPECT_TRUE(outs[0] != NULL && outs[1] != NULL);
    if (outs[0]) EXPECT_OK(ot_buffer_read_bytes(outs[0], 0, fin, sizeof fin));
    EXPECT_TRUE(memcmp(fin, h.out0, sizeof fin) == 0); /* its last writer had run */
    ot_buffer_free(outs[0]);
    ot_buffer_free(outs[1]);
    ot_buffer_free(args[0]);
    ot_buffer_free(args[1]);
    ot_backend_free(b);
    ot_executable_free(e);
}

static const char k_loop[] = "HloModule loop\n"
                             "cond {\n"
                             "  p = (s32[], f32[8]) parameter(0)\n"
                             "  i = s32[] get-tuple-element(p), index=0\n"
                             "  n = s32[] constant(5)\n"
                             "  ROOT c = pred[] compare(i, n), direction=LT\n"
                             "}\n"
                             "body {\n"
                             "  p = (s32[], f32[8]) parameter(0)\n"
                             "  i = s32[] get-tuple-element(p), index=0\n"
                             "  x = f32[8] get-tuple-element(p), index=1\n"
                             "  one = s32[] constant(1)\n"
                             "  i2 = s32[] add(i, one)\n"
                             "  x2 = f32[8] add(x, x)\n"
                             "  ROOT t = (s32[], f32[8]) tuple(i2, x2)\n"
                             "}\n"
                             "ENTRY main {\n"
                             "  x = f32[8] parameter(0)\n"
                             "  e = f32[8] add(x, x)\n"
                             "  z = s32[] constant(0)\n"
                             "  t = (s32[], f32[8]) tuple(z, e)\n"
                             "  w = (s32[], f32[8]) while(t), condition=cond, body=body\n"
                             "  ROOT r = f32[8] get-tuple-element(w), index=1\n"
                             "}\n";

/* A while loop's condition and body kernels are not the caller's list: the hook sees the
 * top-level kernels only, in order. */
static void test_kernel_hook_while(void) {
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(k_loop, strlen(k_loop), NULL, &m));
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, NULL, &e));
    ot_module_free(m);
    ot_backend_options bo = ot_backend_options_default();
    bo.devices = 1;
    ot_backend *b = NULL;
    ASSERT_OK(ot_backend_create(&bo, &b));
    ot_device *d = ot_backend_device(b, 0);
    float xv[8] = {0, 1, 2, 3, -1, -2, 0.5f, 4};
    ot_shape s;
    ot_shape_make(&s, OT_F32, 1, (int64_t[]){8});
    ot_tensor tx;
    ot_tensor_borrow(&tx, &s, xv);
    ot_buffer *arg = NULL, *out = NULL;
    ASSERT_OK(ot_buffer_from_host(d, &tx, &arg));
    hook_log h = {.exe = e, .outs = &out, .fail_at = -1, .last_writer0 = -1};
    ot_run_options ro = ot_run_options_default();
    ro.kernel_hook = record_hook;
    ro.kernel_hook_ud = &h;
    ASSERT_OK(ot_device_execute(d, e, &arg, 1, &out, 1, &ro, NULL));
    int nk = ot_executable_kernel_count(e);
    EXPECT_INT_EQ(h.bad_order, 0);
    EXPECT_INT_EQ(h.next, nk);
    EXPECT_TRUE(h.calls >= 2 * nk && h.calls <= 3 * nk);
    float r[8];
    EXPECT_OK(ot_buffer_read_bytes(out, 0, r, sizeof r));
    for (int i = 0; i < 8; i++) EXPECT_TRUE(r[i] == 64.0f * xv[i]); /* 2x, five doublings */
    ot_buffer_free(out);
    ot_buffer_free(arg);
    ot_backend_free(b);
    ot_executable_free(e);
}

OT_TEST_MAIN(OT_TEST(test_exchange_matches_reduce_scatter), OT_TEST(test_orders_differ),
             OT_TEST(test_exchange_bad_input), OT_TEST(test_exchange_abort_and_deadline),
             OT_TEST(test_kernel_hook), OT_TEST(test_kernel_hook_while))
