/* Checkpoints: save two steps (one synchronously, one in the background), verify them, damage
 * the newer one, and restore: the restore checks every file's SHA-256 against the manifest,
 * passes over the damaged step and rolls back to the one before.
 *
 * Works in a fresh directory under $TMPDIR (or /tmp), removed at the end. Exits 1 unless the
 * restore lands on step 10 with the tensors saved there, naming step 20 as skipped. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#include <optitpu/optitpu.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)flag, (void)f;
    return remove(path);
}

/* Saves w filled with `value` (and b with -value) as step `step`. */
static ot_status save(ot_ckpt_manager *m, int64_t step, float value, float *w, float *b, bool bg) {
    for (int i = 0; i < 64 * 32; i++) w[i] = value;
    for (int i = 0; i < 32; i++) b[i] = -value;
    ot_ckpt_tensor t[2] = {{"w", {OT_F32, 2, {64, 32}}, w}, {"b", {OT_F32, 1, {32}}, b}};
    ot_ckpt_shard shard = {"model", 0, 1, t, 2};
    ot_ckpt_metric loss = {"loss", 1.0 / (double)step};
    ot_ckpt_save_args a = {.step = step,
                           .shards = &shard,
                           .nshards = 1,
                           .metrics = &loss,
                           .nmetrics = 1,
                           .optimizer_json = "{\"name\":\"adam\",\"lr\":0.001}"};
    ot_ckpt_save_stats st;
    if (bg) {
        OT_CHECK(ot_ckpt_save_async(m, &a)); /* w and b may change as soon as this returns */
        for (int i = 0; i < 64 * 32; i++) w[i] = 0;
        OT_CHECK(ot_ckpt_wait(m, &st));
    } else {
        OT_CHECK(ot_ckpt_save(m, &a, &st));
    }
    printf("saved step %lld: %llu bytes in %.1f ms%s\n", (long long)step,
           (unsigned long long)st.bytes, st.write_seconds * 1e3, bg ? " (background)" : "");
    return OT_OK;
}

static ot_status run(const char *root) {
    static float w[64 * 32], b[32];
    char path[2048];
    ot_ckpt_manager *m = NULL;
    ot_ckpt *ck = NULL;
    ot_ckpt_restore_report rep = {0};
    ot_ckpt_options o = ot_ckpt_options_default();
    o.retention.keep_last = 3;
    ot_status s;

    OT_CHECK_GOTO(ot_ckpt_open(root, &o, &m), s, done);
    OT_CHECK_GOTO(save(m, 10, 1.5f, w, b, false), s, done);
    OT_CHECK_GOTO(save(m, 20, 2.5f, w, b, true), s, done);
    s = ot_ckpt_close(m), m = NULL;
    if (s != OT_OK) goto done;

    snprintf(path, sizeof path, "%s/step_%08d", root, 20);
    OT_CHECK_GOTO(ot_ckpt_verify_dir(path, NULL), s, done);
    printf("step 20 verifies; flipping one bit of its model file\n");
    snprintf(path, sizeof path, "%s/step_%08d/model.safetensors", root, 20);
    FILE *f = fopen(path, "r+b");
    if (!f) {
        s = ot_error(OT_ERR_IO, "open %s", path);
        goto done;
    }
    fseek(f, -100, SEEK_END);
    int c = fgetc(f);
    fseek(f, -100, SEEK_END);
    fputc(c ^ 0x10, f);
    fclose(f);

    OT_CHECK_GOTO(ot_ckpt_restore_latest(root, &o, &ck, &rep), s, done);
    for (size_t i = 0; i < rep.nskipped; i++)
        printf("skipped step %lld: %s\n", (long long)rep.skipped[i].step, rep.skipped[i].reason);
    ot_tensor tw, tb;
    OT_CHECK_GOTO(ot_ckpt_get(ck, "model", "w", &tw), s, done); /* a view of the verified file */
    OT_CHECK_GOTO(ot_ckpt_get(ck, "model", "b", &tb), s, done);
    double loss = 0;
    ot_ckpt_manifest_metric(ot_ckpt_manifest_of(ck), "loss", &loss);
    printf("restored step %lld (loss %.3f): w[0] = %.2f, b[0] = %.2f\n",
           (long long)ot_ckpt_step(ck), loss, (double)((float *)tw.data)[0],
           (double)((float *)tb.data)[0]);
    if (ot_ckpt_step(ck) != 10 || rep.nskipped != 1 || rep.skipped[0].step != 20 ||
        ((float *)tw.data)[64 * 32 - 1] != 1.5f || ((float *)tb.data)[0] != -1.5f)
        s = ot_error(OT_ERR_INTERNAL, "the restore did not roll back to step 10 as expected");
done:
    ot_ckpt_close(m);
    ot_ckpt_free(ck);
    ot_ckpt_restore_report_clear(&rep);
    return s;
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    char root[1024];
    snprintf(root, sizeof root, "%s/optitpu-ckpt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    ot_status s = run(root);
    if (s != OT_OK) fprintf(stderr, "checkpoint: %s\n", ot_last_error());
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    if (s != OT_OK) return 1;
    printf("ok: the damaged step was detected and passed over\n");
    return 0;
}
