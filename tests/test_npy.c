/* .npy: files written by NumPy itself (tests/data/npy, made by scripts/make_npy_fixtures.py) read
 * with every value checked and written back byte for byte; round trips of every dtype; many
 * malformed headers, each refused with a precise message; every truncation and single-byte
 * mutation of a good file handled without an over-read (buffers end exactly at the last byte, so
 * ASan sees any); allocation failures without a leak. */
#include "ot_test.h"

#include <sys/stat.h>
#include <unistd.h>

#define DATA_DIR OT_SOURCE_DIR "/tests/data/npy/"

static uint8_t *slurp(const char *name, size_t *len) {
    char path[512];
    snprintf(path, sizeof path, DATA_DIR "%s", name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* Parses a fixture with both entry points; they must agree. */
static ot_status load(const char *name, ot_tensor *t) {
    char path[512];
    snprintf(path, sizeof path, DATA_DIR "%s", name);
    ot_status s = ot_npy_read_file(path, t);
    size_t len;
    uint8_t *b = slurp(name, &len);
    if (!b) return ot_error(OT_ERR_NOT_FOUND, "fixture %s missing", name);
    ot_tensor u;
    ot_status s2 = ot_npy_parse(b, len, &u);
    free(b);
    if (s != s2) {
        ot_tensor_release(&u);
        ot_tensor_release(t);
        return ot_error(OT_ERR_INTERNAL, "read_file %d but parse %d for %s", s, s2, name);
    }
    if (s == OT_OK) {
        bool same = ot_shape_equal(&t->shape, &u.shape) && t->nbytes == u.nbytes &&
                    memcmp(t->data, u.data, t->nbytes) == 0;
        ot_tensor_release(&u);
        if (!same) {
            ot_tensor_release(t);
            return ot_error(OT_ERR_INTERNAL, "read_file and parse disagree for %s", name);
        }
    }
    return s;
}

static void expect_shape(const ot_tensor *t, const char *want) {
    char buf[128];
    ot_shape_format(&t->shape, buf, sizeof buf);
    EXPECT_STR_EQ(buf, want);
}

/* optitpu writes exactly the bytes NumPy wrote (same header text and 64-byte padding). */
static void expect_writes_back(const char *name, const ot_tensor *t) {
    size_t len;
    uint8_t *want = slurp(name, &len);
    ASSERT_TRUE(want != NULL);
    void *got;
    size_t glen;
    EXPECT_OK(ot_npy_serialize(t, &got, &glen));
    EXPECT_INT_EQ(glen, len);
    EXPECT_TRUE(glen == len && memcmp(got, want, len) == 0);
    ot_free(got);
    free(want);
}

static void test_numpy_fixtures(void) {
    int64_t live0 = ot_alloc_live();
    ot_tensor t;
    ASSERT_OK(load("f4_2x3.npy", &t));
    expect_shape(&t, "f32[2,3]");
    for (int i = 0; i < 6; i++) EXPECT_NEAR(((float *)t.data)[i], 0.5 * i, 0);
    expect_writes_back("f4_2x3.npy", &t);
    ot_tensor v;
    for (int k = 0; k < 2; k++) { /* formats 2.0 and 3.0 hold the same array */
        ASSERT_OK(load(k ? "f4_2x3_v3.npy" : "f4_2x3_v2.npy", &v));
        EXPECT_TRUE(ot_shape_equal(&t.shape, &v.shape) && !memcmp(t.data, v.data, t.nbytes));
        ot_tensor_release(&v);
    }
    ot_tensor_release(&t);

    ASSERT_OK(load("f8_scalar.npy", &t));
    expect_shape(&t, "f64[]");
    EXPECT_NEAR(*(double *)t.data, 3.25, 0);
    expect_writes_back("f8_scalar.npy", &t);
    ot_tensor_release(&t);

    ASSERT_OK(load("f2_3.npy", &t));
    expect_shape(&t, "f16[3]");
    uint16_t *h = t.data;
    EXPECT_NEAR(ot_f16_to_f32(h[0]), 1.0, 0);
    EXPECT_NEAR(ot_f16_to_f32(h[1]), -2.5, 0);
    EXPECT_NEAR(ot_f16_to_f32(h[2]), 65504.0, 0);
    expect_writes_back("f2_3.npy", &t);
    ot_tensor_release(&t);

    ASSERT_OK(load("i1_3.npy", &t));
    expect_shape(&t, "s8[3]");
    EXPECT_INT_EQ(((int8_t *)t.data)[0], -128);
    EXPECT_INT_EQ(((int8_t *)t.data)[2], 127);
    expect_writes_back("i1_3.npy", &t);
    ot_tensor_release(&t);

    ASSERT_OK(load("i2_3.npy", &t));
    expect_shape(&t, "s16[3]");
    EXPECT_INT_EQ(((int16_t *)t.data)[0], -32768);
    EXPECT_INT_EQ(((int16_t *)t.data)[2], 32767);
    expect_writes_back("i2_3.npy", &t);
    ot_tensor_release(&t);

    ASSERT_OK(load("i4_0x3.npy", &t));
    expect_shape(&t, "s32[0,3]");
    EXPECT_INT_EQ(t.nbytes, 0);
    expect_writes_back("i4_0x3.npy", &t);
    ot_tensor_release(&t);

    ASSERT_OK(load("i8_5.npy", &t));
    expect_shape(&t, "s64[5]");
    int64_t want_i8[] = {-2, -1, 0, 1, INT64_C(1) << 62};
    for (int i = 0; i < 5; i++) EXPECT_INT_EQ(((int64_t *)t.data)[i], want_i8[i]);
    expect_writes_back("i8_5.npy", &t);
    ot_tensor_release(&t);

    ASSERT_OK(load("u1_4.npy", &t));
    expect_shape(&t, "u8[4]");
    EXPECT_INT_EQ(((uint8_t *)t.data)[3], 255);
    expect_writes_back("u1_4.npy", &t);
    ot_tensor_release(&t);

    ASSERT_OK(load("u2_2.npy", &t));
    expect_shape(&t, "u16[2]");
    EXPECT_INT_EQ(((uint16_t *)t.data)[1], 65535);
    expect_writes_back("u2_2.npy", &t);
    ot_tensor_release(&t);

    ASSERT_OK(load("u4_2.npy", &t));
    expect_shape(&t, "u32[2]");
    EXPECT_U64_EQ(((uint32_t *)t.data)[1], 4294967295u);
    expect_writes_back("u4_2.npy", &t);
    ot_tensor_release(&t);

    ASSERT_OK(load("u8_2.npy", &t));
    expect_shape(&t, "u64[2]");
    EXPECT_U64_EQ(((uint64_t *)t.data)[1], UINT64_MAX);
    expect_writes_back("u8_2.npy", &t);
    ot_tensor_release(&t);

    ASSERT_OK(load("b1_2x2.npy", &t));
    expect_shape(&t, "pred[2,2]");
    uint8_t want_b[] = {1, 0, 0, 1};
    EXPECT_TRUE(memcmp(t.data, want_b, 4) == 0);
    expect_writes_back("b1_2x2.npy", &t);
    ot_tensor_release(&t);

    ASSERT_OK(load("u1_rank8.npy", &t));
    expect_shape(&t, "u8[1,2,1,2,1,2,1,2]");
    EXPECT_INT_EQ(((uint8_t *)t.data)[15], 15);
    expect_writes_back("u1_rank8.npy", &t);
    ot_tensor_release(&t);

    ASSERT_OK(load("c8_2.npy", &t)); /* complex: (real, imaginary) pairs */
    expect_shape(&t, "c64[2]");
    float want_c[] = {1, 2, 3, 0};
    EXPECT_TRUE(memcmp(t.data, want_c, sizeof want_c) == 0);
    expect_writes_back("c8_2.npy", &t);
    ot_tensor_release(&t);

    /* big-endian files are byte-swapped on read (a complex element per component) */
    ASSERT_OK(load("c16_be.npy", &t));
    expect_shape(&t, "c128[2]");
    EXPECT_NEAR(((double *)t.data)[0], 1.5, 0);
    EXPECT_NEAR(((double *)t.data)[1], -2.0, 0);
    EXPECT_NEAR(((double *)t.data)[2], -0.25, 0);
    EXPECT_NEAR(((double *)t.data)[3], 4.0, 0);
    ot_tensor_release(&t);
    ASSERT_OK(load("f4_be.npy", &t));
    expect_shape(&t, "f32[3]");
    EXPECT_NEAR(((float *)t.data)[0], 1.5, 0);
    EXPECT_NEAR(((float *)t.data)[1], -2.0, 0);
    EXPECT_NEAR(((float *)t.data)[2], 3.25, 0);
    ot_tensor_release(&t);
    ASSERT_OK(load("i4_be.npy", &t));
    EXPECT_INT_EQ(((int32_t *)t.data)[1], -2);
    EXPECT_INT_EQ(((int32_t *)t.data)[2], 305419896);
    ot_tensor_release(&t);
    EXPECT_INT_EQ(ot_alloc_live(), live0);
}

static void test_numpy_fixtures_refused(void) {
    int64_t live0 = ot_alloc_live();
    ot_tensor t;
    EXPECT_STATUS(load("f4_fortran.npy", &t), OT_ERR_UNIMPLEMENTED);
    EXPECT_STR_CONTAINS(ot_last_error(), "fortran_order True");
    EXPECT_TRUE(t.data == NULL);
    EXPECT_STATUS(load("u1_rank9.npy", &t), OT_ERR_OUT_OF_RANGE);
    EXPECT_STR_CONTAINS(ot_last_error(), "maximum of 8");
    EXPECT_STATUS(load("structured.npy", &t), OT_ERR_UNIMPLEMENTED);
    EXPECT_STR_CONTAINS(ot_last_error(), "structured");
    EXPECT_STATUS(load("bf16_ml_dtypes.npy", &t), OT_ERR_UNIMPLEMENTED);
    EXPECT_STR_CONTAINS(ot_last_error(), "bfloat16");
    EXPECT_STATUS(ot_npy_read_file(DATA_DIR "no-such-file.npy", &t), OT_ERR_NOT_FOUND);
    EXPECT_STR_CONTAINS(ot_last_error(), "no-such-file.npy");
    EXPECT_STATUS(ot_npy_read_file(DATA_DIR, &t), OT_ERR_IO); /* a directory */
    EXPECT_STR_CONTAINS(ot_last_error(), "not a regular file");
    EXPECT_INT_EQ(ot_alloc_live(), live0);
}

/* Builds a format 1.0 file around `header` (padding and '\n' added) with `data_len` bytes of data,
 * in a buffer allocated to exactly that length. */
static uint8_t *make_v1(const char *header, size_t data_len, size_t *len) {
    size_t hl = strlen(header) + 1;
    size_t total = 10 + hl + data_len;
    uint8_t *b = malloc(total);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (uint8_t)(hl & 0xff);
    b[9] = (uint8_t)(hl >> 8);
    memcpy(b + 10, header, hl - 1);
    b[10 + hl - 1] = '\n';
    for (size_t i = 0; i < data_len; i++) b[10 + hl + i] = (uint8_t)i;
    *len = total;
    return b;
}

typedef struct bad_case {
    const char *header;
    size_t data_len;
    ot_status want;
    const char *msg;
} bad_case;

static void test_malformed_headers(void) {
    static const bad_case cases[] = {
        {"", 0, OT_ERR_CORRUPT_DATA, "expected '{'"},
        {"[1, 2]", 0, OT_ERR_CORRUPT_DATA, "expected '{'"},
        {"{}", 0, OT_ERR_CORRUPT_DATA, "missing key 'descr'"},
        {"{'descr': '<f4', 'fortran_order': False}", 0, OT_ERR_CORRUPT_DATA, "missing key 'shape'"},
        {"{'descr': '<f4', 'shape': (1,)}", 4, OT_ERR_CORRUPT_DATA, "missing key 'fortran_order'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", 8,
         OT_ERR_CORRUPT_DATA, "unknown key 'extra'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8,
         OT_ERR_CORRUPT_DATA, "duplicate key 'descr'"},
        {"{'descr': '<f4', 'fortran_order': False, 'fortran_order': False, 'shape': (2,)}", 8,
         OT_ERR_CORRUPT_DATA, "duplicate key 'fortran_order'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (2,)}", 8,
         OT_ERR_CORRUPT_DATA, "duplicate key 'shape'"},
        {"{descr: '<f4', 'fortran_order': False, 'shape': (2,)}", 8, OT_ERR_CORRUPT_DATA,
         "expected a quoted string"},
        {"{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", 8, OT_ERR_CORRUPT_DATA,
         "expected ':'"},
        {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", 8, OT_ERR_CORRUPT_DATA,
         "expected ',' or '}'"},
        /* the string runs to the next quote: descr '<f4, ' */
        {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", 8, OT_ERR_UNIMPLEMENTED,
         "'<f4, '"},
        {"{'descr': \"<f4', 'fortran_order': False, 'shape': (2,)}", 8, OT_ERR_CORRUPT_DATA,
         "unterminated string"},
        {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}", 8, OT_ERR_CORRUPT_DATA,
         "escape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", 8, OT_ERR_CORRUPT_DATA,
         "unexpected bytes after the dict"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", 8, OT_ERR_CORRUPT_DATA,
         "expected ',' or '}'"},
        {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}", 8, OT_ERR_CORRUPT_DATA,
         "True or False"},
        {"{'descr': '<f4', 'fortran_order': Trueish, 'shape': (2,)}", 8, OT_ERR_CORRUPT_DATA,
         "True or False"},
        {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", 8, OT_ERR_CORRUPT_DATA,
         "True or False"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3)}", 24, OT_ERR_UNIMPLEMENTED,
         "C order only"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", 8, OT_ERR_CORRUPT_DATA,
         "needs a comma"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': 2}", 8, OT_ERR_CORRUPT_DATA,
         "must be a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", 8, OT_ERR_CORRUPT_DATA,
         "must be a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", 0, OT_ERR_CORRUPT_DATA,
         "negative dimension"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,,3)}", 24, OT_ERR_CORRUPT_DATA,
         "non-negative integers"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", 24, OT_ERR_CORRUPT_DATA,
         "expected ',' or ')'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (02,)}", 8, OT_ERR_CORRUPT_DATA,
         "leading zero"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2.0,)}", 8, OT_ERR_CORRUPT_DATA,
         "expected ',' or ')'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,", 8, OT_ERR_CORRUPT_DATA, NULL},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 0,
         OT_ERR_OUT_OF_RANGE, "overflows int64"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4)}", 0,
         OT_ERR_OUT_OF_RANGE, "overflows int64"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (1152921504606846976,)}", 0,
         OT_ERR_OUT_OF_RANGE, "byte count overflows"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", 4,
         OT_ERR_OUT_OF_RANGE, "maximum of 8"},
        {"{'descr': '<f3', 'fortran_order': False, 'shape': (2,)}", 6, OT_ERR_UNIMPLEMENTED,
         "'<f3' is not a supported dtype"},
        {"{'descr': '<q4', 'fortran_order': False, 'shape': (2,)}", 8, OT_ERR_CORRUPT_DATA,
         "unknown type kind 'q'"},
        {"{'descr': 'f4', 'fortran_order': False, 'shape': (2,)}", 8, OT_ERR_CORRUPT_DATA,
         "byte order"},
        {"{'descr': '|f4', 'fortran_order': False, 'shape': (2,)}", 8, OT_ERR_CORRUPT_DATA,
         "needs a byte order"},
        {"{'descr': '<', 'fortran_order': False, 'shape': (2,)}", 8, OT_ERR_CORRUPT_DATA,
         "not a NumPy type string"},
        {"{'descr': '<f44444', 'fortran_order': False, 'shape': (2,)}", 8, OT_ERR_UNIMPLEMENTED,
         "not a supported dtype"},
        {"{'descr': '<f4x', 'fortran_order': False, 'shape': (2,)}", 8, OT_ERR_UNIMPLEMENTED,
         "not a supported dtype"},
        {"{'descr': '|V2', 'fortran_order': False, 'shape': (2,)}", 4, OT_ERR_UNIMPLEMENTED,
         "bfloat16"},
        {"{'descr': '|O', 'fortran_order': False, 'shape': (2,)}", 16, OT_ERR_UNIMPLEMENTED,
         "object"},
        {"{'descr': '<U3', 'fortran_order': False, 'shape': (2,)}", 24, OT_ERR_UNIMPLEMENTED,
         "string"},
        {"{'descr': '<M8[s]', 'fortran_order': False, 'shape': (2,)}", 16, OT_ERR_UNIMPLEMENTED,
         "datetime"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", 8,
         OT_ERR_UNIMPLEMENTED, "structured"},
        /* data length must match exactly */
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 7, OT_ERR_CORRUPT_DATA,
         "data is 7 bytes but shape f32[2] needs 8"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 9, OT_ERR_CORRUPT_DATA,
         "data is 9 bytes"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (0,)}", 1, OT_ERR_CORRUPT_DATA,
         "data is 1 bytes"},
        /* a huge claimed shape is refused by length before any allocation */
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000, 1000)}", 16,
         OT_ERR_CORRUPT_DATA, "needs 8000000000000000"},
    };
    int64_t live0 = ot_alloc_live();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        uint8_t *b = make_v1(cases[i].header, cases[i].data_len, &len);
        ot_tensor t;
        ot_status s = ot_npy_parse(b, len, &t);
        if (s != cases[i].want) fprintf(stderr, "  case %zu: %s\n", i, cases[i].header);
        EXPECT_STATUS(s, cases[i].want);
        if (cases[i].msg) EXPECT_STR_CONTAINS(ot_last_error(), cases[i].msg);
        EXPECT_STR_CONTAINS(ot_last_error(), "npy: ");
        EXPECT_TRUE(t.data == NULL);
        free(b);
    }
    EXPECT_INT_EQ(ot_alloc_live(), live0);
    /* the good forms nearby all parse: both quote styles, no trailing comma, tabs, no padding */
    const char *good[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
        "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,), }",
        "{'shape': (2,), 'fortran_order': False, 'descr': '<f4'}",
        "{\t'descr':'<f4','fortran_order':False,'shape':( 2 , ) }",
        "{'descr': '=f4', 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<i1', 'fortran_order': False, 'shape': (8,)}",
        "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2,)}",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        size_t len;
        uint8_t *b = make_v1(good[i], i == 6 ? 4 : 8, &len); /* f16[1,2] is 4 bytes */
        ot_tensor t;
        ot_status s = ot_npy_parse(b, len, &t);
        if (s != OT_OK) fprintf(stderr, "  good %zu: %s\n", i, good[i]);
        EXPECT_OK(s);
        ot_tensor_release(&t);
        free(b);
    }
}

static void test_malformed_prefix(void) {
    ot_tensor t;
    uint8_t *b;
    EXPECT_STATUS(ot_npy_parse("", 0, &t), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "bad magic");
    EXPECT_STATUS(ot_npy_parse(NULL, 0, &t), OT_ERR_CORRUPT_DATA);
    EXPECT_STATUS(ot_npy_parse(NULL, 5, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_npy_parse("\x93NUMPX\x01\x00\x00\x00", 10, &t), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "bad magic");
    EXPECT_STATUS(ot_npy_parse("PK\x03\x04 not npy", 14, &t), OT_ERR_CORRUPT_DATA);
    EXPECT_STATUS(ot_npy_parse("\x93NUMPY\x04\x00\x00\x00", 10, &t), OT_ERR_UNIMPLEMENTED);
    EXPECT_STR_CONTAINS(ot_last_error(), "format version 4.0");
    EXPECT_STATUS(ot_npy_parse("\x93NUMPY\x01\x01\x00\x00", 10, &t), OT_ERR_UNIMPLEMENTED);
    EXPECT_STATUS(ot_npy_parse("\x93NUMPY\x00\x00\x00\x00", 10, &t), OT_ERR_UNIMPLEMENTED);
    EXPECT_STATUS(ot_npy_parse("\x93NUMPY\x01\x00\x00", 9, &t), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "truncated");
    EXPECT_STATUS(ot_npy_parse("\x93NUMPY\x02\x00\x00\x00\x00", 11, &t), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "truncated");
    /* header length beyond the end */
    b = malloc(12);
    memcpy(b, "\x93NUMPY\x01\x00\x40\x00{}", 12);
    EXPECT_STATUS(ot_npy_parse(b, 12, &t), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "runs past the end");
    free(b);
    /* v2 header length of 2 GiB and 4 GiB - 1 */
    EXPECT_STATUS(ot_npy_parse("\x93NUMPY\x02\x00\x00\x00\x00\x80", 12, &t), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "exceeds the 1 MiB limit");
    EXPECT_STATUS(ot_npy_parse("\x93NUMPY\x03\x00\xff\xff\xff\xff", 12, &t), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "exceeds");
    /* a NUL inside the header */
    size_t len;
    b = make_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4, &len);
    b[20] = '\0';
    EXPECT_STATUS(ot_npy_parse(b, len, &t), OT_ERR_CORRUPT_DATA);
    free(b);
}

/* Every truncation of every good fixture fails cleanly; every single-byte change either parses
 * or fails cleanly. Each buffer is an exact-size heap copy, so ASan reports any over-read. */
static void test_truncations_and_mutations(void) {
    const char *names[] = {"f4_2x3.npy",    "f4_2x3_v2.npy", "f4_2x3_v3.npy",
                           "f8_scalar.npy", "i4_0x3.npy",    "u1_rank8.npy"};
    int64_t live0 = ot_alloc_live();
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        size_t len;
        uint8_t *orig = slurp(names[f], &len);
        ASSERT_TRUE(orig != NULL);
        for (size_t k = 0; k < len; k++) {
            uint8_t *b = malloc(k ? k : 1);
            memcpy(b, orig, k);
            ot_tensor t;
            ot_status s = ot_npy_parse(k ? b : NULL, k, &t);
            /* a zero-size array's file is complete once its header is */
            if (s == OT_OK) {
                EXPECT_INT_EQ(t.nbytes, 0);
                ot_tensor_release(&t);
            } else {
                EXPECT_TRUE(s == OT_ERR_CORRUPT_DATA || s == OT_ERR_UNIMPLEMENTED ||
                            s == OT_ERR_OUT_OF_RANGE);
            }
            free(b);
        }
        static const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff, ' ', '\'', ',', ')', '9'};
        size_t hdr_end = len; /* mutate the prefix and header (the data may be anything) */
        for (size_t i = 0; i < hdr_end && i < 160; i++) {
            for (size_t v = 0; v < sizeof vals; v++) {
                uint8_t *b = malloc(len);
                memcpy(b, orig, len);
                b[i] = vals[v];
                ot_tensor t;
                ot_status s = ot_npy_parse(b, len, &t);
                if (s == OT_OK) {
                    EXPECT_TRUE(t.nbytes <= len);
                    ot_tensor_release(&t);
                }
                free(b);
            }
        }
        free(orig);
    }
    EXPECT_INT_EQ(ot_alloc_live(), live0);
}

static void fill_pattern(ot_tensor *t) {
    uint8_t *p = t->data;
    for (size_t i = 0; i < t->nbytes; i++) p[i] = (uint8_t)(i * 37 + 11);
    if (t->shape.dtype == OT_PRED)
        for (size_t i = 0; i < t->nbytes; i++) p[i] &= 1;
}

static void tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/optitpu-test-npy-%d-%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid(), name);
}

static void test_round_trip_every_dtype(void) {
    int64_t live0 = ot_alloc_live();
    const int64_t dims[][3] = {{0, 0, 0}, {5, 0, 0}, {2, 3, 0}, {3, 1, 7}, {0, 4, 0}};
    const int ranks[] = {0, 1, 2, 3, 2};
    char path[512];
    tmp_path(path, sizeof path, "rt.npy");
    for (int dt = 0; dt < OT_DTYPE_COUNT; dt++) {
        for (size_t k = 0; k < sizeof ranks / sizeof ranks[0]; k++) {
            ot_shape s;
            ASSERT_OK(ot_shape_make(&s, (ot_dtype)dt, ranks[k], dims[k]));
            ot_tensor t, u;
            ASSERT_OK(ot_tensor_alloc(&t, &s));
            fill_pattern(&t);
            void *buf;
            size_t len;
            if (dt == OT_BF16) {
                EXPECT_STATUS(ot_npy_serialize(&t, &buf, &len), OT_ERR_UNIMPLEMENTED);
                EXPECT_STR_CONTAINS(ot_last_error(), "no bfloat16");
                EXPECT_STATUS(ot_npy_write_file(path, &t), OT_ERR_UNIMPLEMENTED);
                ot_tensor_release(&t);
                continue;
            }
            ASSERT_OK(ot_npy_serialize(&t, &buf, &len));
            /* NumPy's rule: the data starts on a 64-byte boundary; the header ends in '\n' */
            EXPECT_INT_EQ((len - t.nbytes) % 64, 0);
            EXPECT_INT_EQ(((uint8_t *)buf)[len - t.nbytes - 1], '\n');
            EXPECT_OK(ot_npy_parse(buf, len, &u));
            EXPECT_TRUE(ot_shape_equal(&t.shape, &u.shape));
            EXPECT_TRUE(u.nbytes == t.nbytes && memcmp(u.data, t.data, t.nbytes) == 0);
            ot_tensor_release(&u);
            EXPECT_OK(ot_npy_write_file(path, &t));
            EXPECT_OK(ot_npy_read_file(path, &u));
            EXPECT_TRUE(ot_shape_equal(&t.shape, &u.shape));
            EXPECT_TRUE(u.nbytes == t.nbytes && memcmp(u.data, t.data, t.nbytes) == 0);
            ot_tensor_release(&u);
            ot_free(buf);
            ot_tensor_release(&t);
        }
    }
    unlink(path);
    /* bad tensors and paths */
    ot_tensor bad = {0};
    bad.shape = ot_shape_scalar(OT_F32);
    void *buf;
    size_t len;
    EXPECT_STATUS(ot_npy_serialize(&bad, &buf, &len), OT_ERR_INVALID_ARGUMENT); /* nbytes 0 */
    bad.nbytes = 4;
    EXPECT_STATUS(ot_npy_serialize(&bad, &buf, &len), OT_ERR_INVALID_ARGUMENT); /* no data */
    EXPECT_STR_CONTAINS(ot_last_error(), "no data");
    bad.shape.dtype = (ot_dtype)99;
    EXPECT_STATUS(ot_npy_serialize(&bad, &buf, &len), OT_ERR_INVALID_ARGUMENT);
    float x = 1;
    ot_tensor ok;
    ot_shape s1 = ot_shape_scalar(OT_F32);
    ASSERT_OK(ot_tensor_borrow(&ok, &s1, &x));
    EXPECT_STATUS(ot_npy_write_file("/nonexistent-dir/x.npy", &ok), OT_ERR_IO);
    EXPECT_STR_CONTAINS(ot_last_error(), "/nonexistent-dir/x.npy");
    EXPECT_INT_EQ(ot_alloc_live(), live0);
}

/* A file whose data is cut short on disk is refused, and reading it leaks nothing. */
static void test_read_file_truncated(void) {
    char path[512];
    tmp_path(path, sizeof path, "trunc.npy");
    size_t len;
    uint8_t *b = slurp("i8_5.npy", &len);
    ASSERT_TRUE(b != NULL);
    int64_t live0 = ot_alloc_live();
    for (size_t cut = 0; cut < len; cut += 7) {
        FILE *f = fopen(path, "wb");
        ASSERT_TRUE(f != NULL);
        fwrite(b, 1, cut, f);
        fclose(f);
        ot_tensor t;
        EXPECT_STATUS(ot_npy_read_file(path, &t), OT_ERR_CORRUPT_DATA);
        EXPECT_STR_CONTAINS(ot_last_error(), "npy");
        EXPECT_TRUE(t.data == NULL);
    }
    EXPECT_INT_EQ(ot_alloc_live(), live0);
    unlink(path);
    free(b);
}

static void test_alloc_failure(void) {
    size_t len;
    uint8_t *b = slurp("f4_2x3.npy", &len);
    ASSERT_TRUE(b != NULL);
    char path[512];
    snprintf(path, sizeof path, DATA_DIR "f4_2x3.npy");
    for (int which = 0; which < 3; which++) {
        int failures = 0;
        for (int n = 1; n < 20; n++) {
            int64_t live0 = ot_alloc_live();
            ot_tensor t = {0};
            void *out = NULL;
            size_t olen = 0;
            ot_alloc_fail_after(n);
            ot_status s;
            if (which == 0)
                s = ot_npy_parse(b, len, &t);
            else if (which == 1)
                s = ot_npy_read_file(path, &t);
            else {
                ot_tensor src;
                s = ot_npy_parse(b, len, &src);
                if (s == OT_OK) {
                    s = ot_npy_serialize(&src, &out, &olen);
                    ot_tensor_release(&src);
                }
            }
            ot_alloc_fail_after(0);
            ot_tensor_release(&t);
            ot_free(out);
            EXPECT_INT_EQ(ot_alloc_live(), live0);
            if (s == OT_OK) break;
            EXPECT_INT_EQ(s, OT_ERR_OUT_OF_MEMORY);
            failures++;
        }
        EXPECT_TRUE(failures >= 1);
    }
    free(b);
}

OT_TEST_MAIN(OT_TEST(test_numpy_fixtures), OT_TEST(test_numpy_fixtures_refused),
             OT_TEST(test_malformed_headers), OT_TEST(test_malformed_prefix),
             OT_TEST(test_truncations_and_mutations), OT_TEST(test_round_trip_every_dtype),
             OT_TEST(test_read_file_truncated), OT_TEST(test_alloc_failure))
