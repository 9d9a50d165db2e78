/* safetensors: round trips for every dtype, Python fixtures both ways (byte-identical output),
 * the reference reader's accept/reject decisions, truncations, allocation failures. */
#include "ot_test.h"
#include "st_pattern.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "optitpu/safetensors.h"

#define DATA_DIR OT_SOURCE_DIR "/tests/data/safetensors"

static char g_tmp[256];

static const char *tmpdir(void) {
    if (!g_tmp[0]) {
        snprintf(g_tmp, sizeof g_tmp, "%s/st_test_%d", OT_BINARY_DIR, (int)getpid());
        mkdir(g_tmp, 0755);
    }
    return g_tmp;
}

static void test_dtype_table(void) {
    for (int i = 0; i < OT_ST_DTYPE_COUNT; i++) {
        EXPECT_INT_EQ(ot_st_dtype_from_name(ot_st_dtype_name((ot_st_dtype)i)), i);
        ot_dtype c = ot_st_dtype_to_core((ot_st_dtype)i);
        if (c != OT_DTYPE_INVALID) {
            EXPECT_INT_EQ(ot_st_dtype_from_core(c), i);
            EXPECT_INT_EQ(ot_dtype_size(c), ot_st_dtype_size((ot_st_dtype)i));
        }
    }
    for (int c = 0; c < OT_DTYPE_COUNT; c++) /* every real and integer dtype; not c64/c128 */
        EXPECT_TRUE((ot_st_dtype_from_core((ot_dtype)c) != OT_ST_DTYPE_INVALID) ==
                    !ot_dtype_is_complex((ot_dtype)c));
    EXPECT_INT_EQ(ot_st_dtype_from_name("f32"), OT_ST_DTYPE_INVALID);
}

/* One tensor per dtype (all 15), written to a file, mapped back, compared byte for byte. */
static void test_roundtrip_every_dtype(void) {
    ot_st_entry e[OT_ST_DTYPE_COUNT];
    uint8_t *bufs[OT_ST_DTYPE_COUNT];
    int64_t dims[OT_ST_DTYPE_COUNT][3];
    char names[OT_ST_DTYPE_COUNT][32];
    for (int i = 0; i < OT_ST_DTYPE_COUNT; i++) {
        dims[i][0] = 2 + i % 3, dims[i][1] = 3, dims[i][2] = 1 + i;
        uint64_t n = (uint64_t)(dims[i][0] * dims[i][1] * dims[i][2]);
        bufs[i] = malloc(n * 8);
        st_pattern((ot_st_dtype)i, n, (uint64_t)i, bufs[i]);
        snprintf(names[i], sizeof names[i], "t.%s", ot_st_dtype_name((ot_st_dtype)i));
        e[i] = (ot_st_entry){names[i], (ot_st_dtype)i, 3, dims[i], bufs[i]};
    }
    char path[300];
    snprintf(path, sizeof path, "%s/rt.safetensors", tmpdir());
    ot_st_kv meta[] = {{"a", "1"}, {"b", "two"}};
    uint8_t sha[32], sha2[32];
    int64_t live = ot_alloc_live();
    ASSERT_OK(ot_safetensors_write_file(path, e, OT_ST_DTYPE_COUNT, meta, 2, NULL, sha));
    ot_safetensors *st;
    ASSERT_OK(ot_safetensors_open(path, &st));
    EXPECT_INT_EQ(ot_safetensors_count(st), OT_ST_DTYPE_COUNT);
    EXPECT_STR_EQ(ot_safetensors_metadata_get(st, "b"), "two");
    EXPECT_INT_EQ(ot_safetensors_metadata_count(st), 2);
    for (int i = 0; i < OT_ST_DTYPE_COUNT; i++) {
        const ot_st_info *t = ot_safetensors_find(st, names[i]);
        ASSERT_TRUE(t != NULL);
        EXPECT_INT_EQ(t->dtype, i);
        EXPECT_INT_EQ(t->rank, 3);
        EXPECT_INT_EQ(t->dims[2], dims[i][2]);
        EXPECT_TRUE(memcmp(t->data, bufs[i], t->end - t->begin) == 0);
        /* the writer aligns each tensor to its element size within the file */
        EXPECT_INT_EQ((8 + ot_safetensors_header_len(st) + t->begin) % ot_st_dtype_size(t->dtype),
                      0);
        ot_tensor v;
        if (ot_st_dtype_to_core((ot_st_dtype)i) == OT_DTYPE_INVALID) {
            EXPECT_STATUS(ot_safetensors_tensor(st, names[i], &v), OT_ERR_UNIMPLEMENTED);
        } else {
            EXPECT_OK(ot_safetensors_tensor(st, names[i], &v));
            EXPECT_TRUE(v.data == t->data);
            EXPECT_INT_EQ(v.nbytes, t->end - t->begin);
        }
    }
    /* descending dtype order in the data section, as the reference writer does */
    for (size_t i = 1; i < ot_safetensors_count(st); i++)
        EXPECT_TRUE(ot_safetensors_at(st, i - 1)->dtype >= ot_safetensors_at(st, i)->dtype);
    ot_tensor v;
    EXPECT_STATUS(ot_safetensors_tensor(st, "nope", &v), OT_ERR_NOT_FOUND);
    ot_safetensors_free(st);
    /* the hash computed while writing equals a hash of the file */
    size_t len;
    uint8_t *blob = st_read_file(path, &len);
    ASSERT_TRUE(blob != NULL);
    EXPECT_OK(ot_sha256_digest(blob, len, sha2));
    EXPECT_TRUE(memcmp(sha, sha2, 32) == 0);
    /* serialize() gives the same bytes */
    void *ser;
    size_t sl;
    EXPECT_OK(ot_safetensors_serialize(e, OT_ST_DTYPE_COUNT, meta, 2, &ser, &sl));
    EXPECT_INT_EQ(sl, len);
    EXPECT_TRUE(memcmp(ser, blob, len) == 0);
    ot_free(ser);
    free(blob);
    for (int i = 0; i < OT_ST_DTYPE_COUNT; i++) free(bufs[i]);
    EXPECT_INT_EQ(ot_alloc_live(), live);
    unlink(path);
}

static void test_writer_rejects_bad_entries(void) {
    uint8_t d[8] = {0};
    int64_t dims[] = {2};
    ot_st_entry dup[] = {{"a", OT_ST_F32, 1, dims, d}, {"a", OT_ST_I32, 1, dims, d}};
    void *out;
    size_t len;
    EXPECT_STATUS(ot_safetensors_serialize(dup, 2, NULL, 0, &out, &len), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "duplicate tensor name 'a'");
    ot_st_entry res[] = {{"__metadata__", OT_ST_F32, 1, dims, d}};
    EXPECT_STATUS(ot_safetensors_serialize(res, 1, NULL, 0, &out, &len), OT_ERR_INVALID_ARGUMENT);
    int64_t neg[] = {-1};
    ot_st_entry bad[] = {{"x", OT_ST_F32, 1, neg, d}};
    EXPECT_STATUS(ot_safetensors_serialize(bad, 1, NULL, 0, &out, &len), OT_ERR_INVALID_ARGUMENT);
    int64_t huge[] = {INT64_MAX, 4};
    ot_st_entry big[] = {{"x", OT_ST_F32, 2, huge, d}};
    EXPECT_STATUS(ot_safetensors_serialize(big, 1, NULL, 0, &out, &len), OT_ERR_INVALID_ARGUMENT);
    ot_st_kv m[] = {{"k", "1"}, {"k", "2"}};
    ot_st_entry ok[] = {{"x", OT_ST_F32, 1, dims, d}};
    EXPECT_STATUS(ot_safetensors_serialize(ok, 1, m, 2, &out, &len), OT_ERR_INVALID_ARGUMENT);
    ot_st_kv nu[] = {{"k", "\xff"}};
    EXPECT_STATUS(ot_safetensors_serialize(ok, 1, nu, 1, &out, &len), OT_ERR_INVALID_ARGUMENT);
}

typedef struct {
    const char *name;
    ot_st_dtype dt;
    int rank;
    int64_t dims[3];
    uint64_t salt;
} fx_tensor;

/* Checks a file's tensors against the pattern; with identical, also that optitpu's writer
 * produces the very same bytes from the same tensors and metadata. */
static void check_fixture_in(const char *sub, const char *file, const fx_tensor *fx, size_t n,
                             const ot_st_kv *meta, size_t nmeta, bool identical) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", DATA_DIR, sub, file);
    ot_safetensors *st;
    ASSERT_OK(ot_safetensors_open(path, &st));
    EXPECT_INT_EQ(ot_safetensors_count(st), n);
    ot_st_entry e[16];
    uint8_t *bufs[16];
    for (size_t i = 0; i < n; i++) {
        uint64_t ne = 1;
        for (int d = 0; d < fx[i].rank; d++) ne *= (uint64_t)fx[i].dims[d];
        bufs[i] = malloc(ne * 8 + 1);
        st_pattern(fx[i].dt, ne, fx[i].salt, bufs[i]);
        e[i] = (ot_st_entry){fx[i].name, fx[i].dt, fx[i].rank, fx[i].dims, bufs[i]};
        const ot_st_info *t = ot_safetensors_find(st, fx[i].name);
        if (!t) {
            OT_T_FAIL_("%s: tensor '%s' missing", file, fx[i].name);
            continue;
        }
        EXPECT_INT_EQ(t->dtype, fx[i].dt);
        EXPECT_INT_EQ(t->rank, fx[i].rank);
        for (int d = 0; d < t->rank && d < 3; d++) EXPECT_INT_EQ(t->dims[d], fx[i].dims[d]);
        EXPECT_INT_EQ(t->end - t->begin, ne * ot_st_dtype_size(fx[i].dt));
        if (memcmp(t->data, bufs[i], t->end - t->begin) != 0)
            OT_T_FAIL_("%s: tensor '%s' data differs", file, fx[i].name);
    }
    for (size_t i = 0; i < nmeta; i++)
        EXPECT_STR_EQ(ot_safetensors_metadata_get(st, meta[i].key), meta[i].value);
    EXPECT_INT_EQ(ot_safetensors_metadata_count(st), nmeta);
    ot_safetensors_free(st);
    if (identical) {
        void *ser;
        size_t sl = 0, fl = 0;
        uint8_t *blob = st_read_file(path, &fl);
        EXPECT_OK(ot_safetensors_serialize(e, n, meta, nmeta, &ser, &sl));
        EXPECT_INT_EQ(sl, fl);
        if (sl != fl || memcmp(ser, blob, sl) != 0)
            OT_T_FAIL_("%s: optitpu's writer output differs from the reference writer's", file);
        ot_free(ser);
        free(blob);
    }
    for (size_t i = 0; i < n; i++) free(bufs[i]);
}

static void check_fixture(const char *file, const fx_tensor *fx, size_t n, const ot_st_kv *meta,
                          size_t nmeta, bool identical) {
    check_fixture_in("py", file, fx, n, meta, nmeta, identical);
}

static void test_python_fixtures(void) {
    fx_tensor all[] = {
        {"t_bool", OT_ST_BOOL, 2, {3, 5}, 0},  {"t_u8", OT_ST_U8, 1, {7}, 0},
        {"t_i8", OT_ST_I8, 3, {2, 2, 2}, 0},   {"t_i16", OT_ST_I16, 2, {4, 3}, 0},
        {"t_u16", OT_ST_U16, 2, {1, 9}, 0},    {"t_f16", OT_ST_F16, 1, {6}, 0},
        {"t_i32", OT_ST_I32, 3, {3, 1, 2}, 0}, {"t_u32", OT_ST_U32, 1, {5}, 0},
        {"t_f32", OT_ST_F32, 3, {2, 3, 4}, 0}, {"t_f64", OT_ST_F64, 2, {3, 3}, 0},
        {"t_i64", OT_ST_I64, 1, {4}, 0},       {"t_u64", OT_ST_U64, 2, {2, 2}, 0},
    };
    ot_st_kv fmt[] = {{"format", "np"}};
    check_fixture("all_dtypes.safetensors", all, 12, fmt, 1, true);
    fx_tensor bf[] = {{"b", OT_ST_BF16, 2, {2, 5}, 0}, {"a", OT_ST_BF16, 1, {3}, 1}};
    check_fixture("bf16.safetensors", bf, 2, NULL, 0, true);
    fx_tensor se[] = {{"scalar", OT_ST_F32, 0, {0}, 0},
                      {"empty_i32", OT_ST_I32, 2, {0, 4}, 0},
                      {"empty_f16", OT_ST_F16, 2, {3, 0}, 0},
                      {"one", OT_ST_I64, 1, {1}, 0}};
    check_fixture("scalar_empty.safetensors", se, 4, NULL, 0, true);
    fx_tensor nm[] = {{"layer.0/w\xc3\xabight", OT_ST_F32, 2, {4, 4}, 0},
                      {"\xe6\x97\xa5\xe6\x9c\xac", OT_ST_U8, 1, {3}, 0},
                      {"with space", OT_ST_I16, 1, {2}, 0}};
    ot_st_kv meta[] = {{"framework", "np"},
                       {"unicode", "p\xc3\xa4\xc3\x9f \xe2\x9c\x93"},
                       {"empty", ""},
                       {"quote", "a\"b\\c\n"}};
    check_fixture("names_meta.safetensors", nm, 3, meta, 4, false);
    check_fixture("empty.safetensors", NULL, 0, NULL, 0, true);
}

/* Files written by safetensors.torch.save_file (scripts/safetensors_interop.py gen): every dtype
 * with the pattern's bits, byte-identical to this writer's output; and torch's own f32 -> bf16 and
 * f32 -> f16 rounding, which must equal ot_f32_to_bf16 / ot_f32_to_f16 bit for bit. */
static const void *tensor_data(const ot_safetensors *st, const char *name, ot_st_dtype dt,
                               uint64_t n) {
    const ot_st_info *t = ot_safetensors_find(st, name);
    if (!t) {
        OT_T_FAIL_("torch fixture: tensor '%s' missing", name);
        return NULL;
    }
    EXPECT_INT_EQ(t->dtype, dt);
    EXPECT_U64_EQ(t->end - t->begin, n * ot_st_dtype_size(dt));
    return t->dtype == dt && t->end - t->begin == n * ot_st_dtype_size(dt) ? t->data : NULL;
}

static void test_torch_fixtures(void) {
    fx_tensor all[] = {
        {"t_bool", OT_ST_BOOL, 2, {3, 5}, 0}, {"t_u8", OT_ST_U8, 1, {7}, 0},
        {"t_i8", OT_ST_I8, 3, {2, 2, 2}, 0},  {"t_i16", OT_ST_I16, 2, {4, 3}, 0},
        {"t_u16", OT_ST_U16, 2, {1, 9}, 0},   {"t_f16", OT_ST_F16, 1, {6}, 0},
        {"t_bf16", OT_ST_BF16, 2, {2, 5}, 0}, {"t_i32", OT_ST_I32, 3, {3, 1, 2}, 0},
        {"t_u32", OT_ST_U32, 1, {5}, 0},      {"t_f32", OT_ST_F32, 3, {2, 3, 4}, 0},
        {"t_f64", OT_ST_F64, 2, {3, 3}, 0},   {"t_i64", OT_ST_I64, 1, {4}, 0},
        {"t_u64", OT_ST_U64, 2, {2, 2}, 0},
    };
    ot_st_kv fmt[] = {{"format", "pt"}};
    check_fixture_in("torch", "all_dtypes.safetensors", all, 13, fmt, 1, true);

    char path[512];
    snprintf(path, sizeof path, "%s/torch/rounded.safetensors", DATA_DIR);
    ot_safetensors *st;
    ASSERT_OK(ot_safetensors_open(path, &st));
    EXPECT_INT_EQ(ot_safetensors_count(st), 8);
    EXPECT_STR_EQ(ot_safetensors_metadata_get(st, "format"), "pt");
    /* the f32 sources: the F32 pattern with bit 30 cleared (all finite) */
    uint32_t want[4096];
    st_pattern(OT_ST_F32, 4096, 3, (uint8_t *)want);
    for (int i = 0; i < 4096; i++) want[i] &= 0xBFFFFFFFu;
    const uint32_t *src = tensor_data(st, "src", OT_ST_F32, 4096);
    const uint16_t *bf = tensor_data(st, "bf16", OT_ST_BF16, 4096);
    const uint16_t *hf = tensor_data(st, "f16", OT_ST_F16, 4096);
    const uint32_t *srcs = tensor_data(st, "src_mid", OT_ST_F32, 512);
    const uint16_t *bfs = tensor_data(st, "bf16_mid", OT_ST_BF16, 512);
    const uint16_t *hfs = tensor_data(st, "f16_mid", OT_ST_F16, 512);
    /* the f16-range sources: exponent moved to 2^-24 .. 2^15, exact bf16 ties at i % 4 == 0 and
     * exact f16 ties at i % 4 == 1 */
    uint32_t mid[512];
    st_pattern(OT_ST_F32, 512, 5, (uint8_t *)mid);
    for (uint32_t i = 0; i < 512; i++) {
        uint32_t b = mid[i], e = (b >> 23) & 0xFF;
        b = (b & 0x807FFFFFu) | ((e % 40 + 103) << 23);
        if (i % 4 == 0) b = (b & ~0xFFFFu) | 0x8000u;
        if (i % 4 == 1) b = (b & ~0x1FFFu) | 0x1000u;
        mid[i] = b;
    }
    int bad_src = 0, bad_bf = 0, bad_hf = 0, finite_hf = 0;
    for (int i = 0; src && bf && hf && i < 4096; i++) {
        float f;
        memcpy(&f, &src[i], 4);
        bad_src += src[i] != want[i];
        bad_bf += bf[i] != ot_f32_to_bf16(f);
        bad_hf += hf[i] != ot_f32_to_f16(f);
    }
    for (int i = 0; srcs && bfs && hfs && i < 512; i++) {
        float f;
        memcpy(&f, &srcs[i], 4);
        bad_src += srcs[i] != mid[i];
        bad_bf += bfs[i] != ot_f32_to_bf16(f);
        bad_hf += hfs[i] != ot_f32_to_f16(f);
        finite_hf += (hfs[i] & 0x7C00) != 0x7C00 && (hfs[i] & 0x7FFF) != 0;
    }
    EXPECT_INT_EQ(bad_src, 0);
    EXPECT_INT_EQ(bad_bf, 0);
    EXPECT_INT_EQ(bad_hf, 0);
    EXPECT_TRUE(finite_hf > 400); /* the f16-range set rounds to finite, nonzero f16 values */
    /* a transposed view, saved contiguous: [6, 8] with element (i, j) = source (j, i) of [8, 6] */
    const ot_st_info *wt = ot_safetensors_find(st, "wide_t");
    uint32_t w48[48];
    st_pattern(OT_ST_F32, 48, 4, (uint8_t *)w48);
    const uint32_t *wd = tensor_data(st, "wide_t", OT_ST_F32, 48);
    if (wt && wd) {
        EXPECT_INT_EQ(wt->rank, 2);
        EXPECT_INT_EQ(wt->dims[0], 6);
        EXPECT_INT_EQ(wt->dims[1], 8);
        int bad = 0;
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 8; j++) bad += wd[i * 8 + j] != (w48[j * 6 + i] & 0xBFFFFFFFu);
        EXPECT_INT_EQ(bad, 0);
    }
    const ot_st_info *sc = ot_safetensors_find(st, "scalar_bf16");
    const uint16_t *scd = tensor_data(st, "scalar_bf16", OT_ST_BF16, 1);
    if (sc && scd) {
        EXPECT_INT_EQ(sc->rank, 0);
        EXPECT_INT_EQ(scd[0], 0x3FC0); /* 1.5 */
    }
    ot_safetensors_free(st);
}

/* Files the reference reader accepts must parse here; those it rejects must be CORRUPT_DATA. */
static void run_dir(const char *sub, bool accept, int *count) {
    char dirp[512];
    snprintf(dirp, sizeof dirp, "%s/%s", DATA_DIR, sub);
    DIR *d = opendir(dirp);
    if (!d) {
        OT_T_FAIL_("cannot open %s", dirp);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strstr(de->d_name, ".safetensors")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dirp, de->d_name);
        size_t len;
        uint8_t *blob = st_read_file(path, &len);
        if (!blob) {
            OT_T_FAIL_("cannot read %s", path);
            continue;
        }
        ot_safetensors *st = NULL;
        ot_status s = ot_safetensors_parse(blob, len, &st);
        (*count)++;
        if (accept && s != OT_OK)
            OT_T_FAIL_("%s: the reference accepts it, we reject: %s", de->d_name, ot_last_error());
        if (!accept && s != OT_ERR_CORRUPT_DATA)
            OT_T_FAIL_("%s: the reference rejects it, we return %s", de->d_name, ot_status_str(s));
        if (!accept && st) OT_T_FAIL_("%s: handle set on failure", de->d_name);
        ot_safetensors_free(st);
        free(blob);
    }
    closedir(d);
}

static void test_reference_conformance(void) {
    int64_t live = ot_alloc_live();
    int na = 0, nr = 0;
    run_dir("accept", true, &na);
    run_dir("reject", false, &nr);
    EXPECT_TRUE(na >= 10);
    EXPECT_TRUE(nr >= 20);
    EXPECT_INT_EQ(ot_alloc_live(), live);
}

static void test_error_messages(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/reject/truncated.safetensors", DATA_DIR);
    ot_safetensors *st;
    EXPECT_STATUS(ot_safetensors_open(path, &st), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "truncated.safetensors");
    EXPECT_STR_CONTAINS(ot_last_error(), "truncated");
    snprintf(path, sizeof path, "%s/reject/hole.safetensors", DATA_DIR);
    EXPECT_STATUS(ot_safetensors_open(path, &st), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "tensor 'b'");
    snprintf(path, sizeof path, "%s/reject/header_too_large.safetensors", DATA_DIR);
    EXPECT_STATUS(ot_safetensors_open(path, &st), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "100,000,000");
    EXPECT_STATUS(ot_safetensors_open("/nonexistent/x.safetensors", &st), OT_ERR_NOT_FOUND);
    /* duplicate keys: stricter than the reference */
    const char dup[] = "\x10\0\0\0\0\0\0\0{\"a\":1,\"a\":2}  ";
    EXPECT_STATUS(ot_safetensors_parse(dup, sizeof dup - 1, &st), OT_ERR_CORRUPT_DATA);
}

/* Every truncation of a valid file is rejected, and so is every extension. */
static void test_truncations(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/py/all_dtypes.safetensors", DATA_DIR);
    size_t len;
    uint8_t *blob = st_read_file(path, &len);
    ASSERT_TRUE(blob != NULL);
    for (size_t n = 0; n < len; n++) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, blob, n);
        ot_safetensors *st;
        ot_status s = ot_safetensors_parse(cut, n, &st);
        if (s != OT_ERR_CORRUPT_DATA)
            OT_T_FAIL_("truncation to %zu bytes: %s", n, ot_status_str(s));
        free(cut);
    }
    uint8_t *ext = malloc(len + 1);
    memcpy(ext, blob, len);
    ext[len] = 0;
    ot_safetensors *st;
    EXPECT_STATUS(ot_safetensors_parse(ext, len + 1, &st), OT_ERR_CORRUPT_DATA);
    free(ext);
    free(blob);
}

/* Writes the files scripts/safetensors_interop.py check reads (tests/data/safetensors/c); the
 * committed copies must equal what the writer produces today. OT_ST_REGEN=1 rewrites them. */
static void test_files_for_python(void) {
    static const struct {
        const char *file;
        int ndt;
        ot_st_dtype dts[13];
    } files[] = {
        {"c_all_dtypes.safetensors",
         13,
         {OT_ST_BOOL, OT_ST_U8, OT_ST_I8, OT_ST_I16, OT_ST_U16, OT_ST_F16, OT_ST_BF16, OT_ST_I32,
          OT_ST_U32, OT_ST_F32, OT_ST_F64, OT_ST_I64, OT_ST_U64}},
        {"c_bf16.safetensors", 1, {OT_ST_BF16}},
    };
    bool regen = getenv("OT_ST_REGEN") != NULL;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        ot_st_entry e[16];
        uint8_t *bufs[16];
        char names[16][48];
        int64_t dims[16][2];
        for (int i = 0; i < files[f].ndt; i++) {
            ot_st_dtype dt = files[f].dts[i];
            dims[i][0] = 3 + i, dims[i][1] = 2 + (i % 4);
            uint64_t ne = (uint64_t)(dims[i][0] * dims[i][1]);
            bufs[i] = malloc(ne * 8);
            st_pattern(dt, ne, (uint64_t)(10 + i), bufs[i]);
            snprintf(names[i], sizeof names[i], "%s_%d", ot_st_dtype_name(dt), 10 + i);
            e[i] = (ot_st_entry){names[i], dt, 2, dims[i], bufs[i]};
        }
        ot_st_kv meta[] = {{"writer", "optitpu"}};
        void *ser;
        size_t sl;
        EXPECT_OK(ot_safetensors_serialize(e, (size_t)files[f].ndt, meta, 1, &ser, &sl));
        char path[512];
        snprintf(path, sizeof path, "%s/c/%s", DATA_DIR, files[f].file);
        if (regen) {
            mkdir(DATA_DIR "/c", 0755);
            ot_st_write_options wo = ot_st_write_options_default();
            EXPECT_OK(ot_safetensors_write_file(path, e, (size_t)files[f].ndt, meta, 1, &wo, NULL));
        }
        size_t fl;
        uint8_t *blob = st_read_file(path, &fl);
        if (!blob || fl != sl || memcmp(blob, ser, sl) != 0)
            OT_T_FAIL_("%s differs from the writer's output (OT_ST_REGEN=1 rewrites it)", path);
        free(blob);
        ot_free(ser);
        for (int i = 0; i < files[f].ndt; i++) free(bufs[i]);
    }
}

static void test_alloc_failures(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/py/names_meta.safetensors", DATA_DIR);
    size_t len;
    uint8_t *blob = st_read_file(path, &len);
    ASSERT_TRUE(blob != NULL);
    int64_t live = ot_alloc_live();
    bool ok = false;
    for (int64_t n = 1; n < 200 && !ok; n++) {
        ot_alloc_fail_after(n);
        ot_safetensors *st = NULL;
        ot_status s = ot_safetensors_parse(blob, len, &st);
        ot_alloc_fail_after(0);
        if (s == OT_OK)
            ok = true;
        else
            EXPECT_INT_EQ(s, OT_ERR_OUT_OF_MEMORY);
        ot_safetensors_free(st);
        EXPECT_INT_EQ(ot_alloc_live(), live);
    }
    EXPECT_TRUE(ok);
    ok = false;
    uint8_t d[24] = {1};
    int64_t dims[] = {2, 3};
    ot_st_entry e[] = {{"w", OT_ST_F32, 2, dims, d}, {"b", OT_ST_U8, 1, dims, d}};
    ot_st_kv m[] = {{"k", "v"}};
    for (int64_t n = 1; n < 200 && !ok; n++) {
        ot_alloc_fail_after(n);
        void *out = NULL;
        size_t ol;
        ot_status s = ot_safetensors_serialize(e, 2, m, 1, &out, &ol);
        ot_alloc_fail_after(0);
        if (s == OT_OK) ok = true;
        ot_free(out);
        EXPECT_INT_EQ(ot_alloc_live(), live);
    }
    EXPECT_TRUE(ok);
    free(blob);
}

static void test_cleanup(void) {
    rmdir(tmpdir());
}

OT_TEST_MAIN(OT_TEST(test_dtype_table), OT_TEST(test_roundtrip_every_dtype),
             OT_TEST(test_writer_rejects_bad_entries), OT_TEST(test_python_fixtures),
             OT_TEST(test_torch_fixtures), OT_TEST(test_reference_conformance),
             OT_TEST(test_error_messages), OT_TEST(test_truncations),
             OT_TEST(test_files_for_python), OT_TEST(test_alloc_failures), OT_TEST(test_cleanup))
