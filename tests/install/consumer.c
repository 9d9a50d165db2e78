/* A program outside the project, built against the installed optitpu (tests/test_install.sh). */
#include <optitpu/optitpu.h>
#include <stdio.h>
#include <string.h>

static void add_range(void *ctx, int64_t b, int64_t e, int ith) {
    (void)ith;
    double *x = ctx;
    for (int64_t i = b; i < e; i++) x[i] += 1.0;
}

int main(void) {
    ot_shape s;
    if (ot_shape_make(&s, OT_F32, 2, (int64_t[]){2, 3}) != OT_OK) return 1;
    char buf[32];
    ot_shape_format(&s, buf, sizeof buf);
    uint8_t d[32];
    char hex[65];
    if (ot_sha256_digest("abc", 3, d) != OT_OK) return 2;
    ot_hex(d, 32, hex);
    if (strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") != 0)
        return 3;
    ot_tensor t, u;
    if (ot_tensor_alloc(&t, &s) != OT_OK) return 4;
    ((float *)t.data)[5] = 2.5f;
    void *npy;
    size_t len;
    if (ot_npy_serialize(&t, &npy, &len) != OT_OK || ot_npy_parse(npy, len, &u) != OT_OK) return 5;
    if (((float *)u.data)[5] != 2.5f) return 6;
    double x[1000] = {0};
    ot_parallel_for(ot_threadpool_default(), 1000, 0, OT_SCHEDULE_STATIC, add_range, x);
    for (int i = 0; i < 1000; i++)
        if (x[i] != 1.0) return 7;
    ot_free(npy);
    ot_tensor_release(&t);
    ot_tensor_release(&u);
    printf("consumer ok: optitpu %s, %s\n", ot_version(), buf);
    return 0;
}
