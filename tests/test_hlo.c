/* HLO text: conformance over tests/data/hlo (every file, recursively), print -> parse -> print
 * fixed point, JAX and lenient forms, constants, and malformed input with line:column errors. */
#include "ot_test.h"

#include "optitpu/ir.h"

#include <dirent.h>
#include <sys/stat.h>

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = '\0';
    *len = (size_t)n;
    return b;
}

/* Parses text, prints, re-parses and re-prints; the two prints must be equal. */
static ot_status round_trip(const char *text, size_t len, const ot_hlo_parse_options *po,
                            char **printed) {
    ot_module *m = NULL, *m2 = NULL;
    ot_status s = ot_hlo_parse(text, len, po, &m);
    if (s != OT_OK) return s;
    char *t1 = ot_hlo_print(m, NULL);
    EXPECT_TRUE(t1 != NULL);
    ot_hlo_parse_options o2 = ot_hlo_parse_options_default();
    o2.filename = "<printed>";
    s = ot_hlo_parse(t1, strlen(t1), &o2, &m2);
    EXPECT_OK(s);
    if (s == OT_OK) {
        char *t2 = ot_hlo_print(m2, NULL);
        EXPECT_TRUE(t2 && strcmp(t1, t2) == 0);
        if (t2 && strcmp(t1, t2) != 0)
            fprintf(stderr, "    not a fixed point:\n%s\n---\n%s\n", t1, t2);
        /* and the short (JAX-like) form parses to the same module */
        ot_hlo_print_options po2 = {false, false, false};
        char *t3 = ot_hlo_print(m2, &po2);
        ot_module *m3 = NULL;
        EXPECT_OK(ot_hlo_parse(t3, strlen(t3), NULL, &m3));
        if (m3) {
            ot_hlo_print_options nomd = ot_hlo_print_options_default();
            nomd.metadata = false;
            char *a = ot_hlo_print(m2, &nomd), *b = ot_hlo_print(m3, &nomd);
            EXPECT_TRUE(a && b && strcmp(a, b) == 0);
            ot_free(a);
            ot_free(b);
        }
        ot_module_free(m3);
        ot_free(t3);
        ot_free(t2);
    }
    if (printed)
        *printed = t1;
    else
        ot_free(t1);
    ot_module_free(m2);
    ot_module_free(m);
    return OT_OK;
}

/* True when a piece holds nothing but comments and blanks. */
static bool blank_piece(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
            i++;
        } else if (i + 1 < n && s[i] == '/' && s[i + 1] == '/') {
            while (i < n && s[i] != '\n') i++;
        } else {
            return false;
        }
    }
    return true;
}

static int conf_pass, conf_unimpl, conf_files;

static void conform_file(const char *path) {
    size_t len;
    char *text = read_file(path, &len);
    ASSERT_TRUE(text);
    conf_files++;
    size_t off = 0;
    int line = 0;
    while (off < len) {
        size_t next;
        int lines;
        size_t n = ot_hlo_split_next(text + off, len - off, &next, &lines);
        if (!blank_piece(text + off, n)) {
            ot_hlo_parse_options o = ot_hlo_parse_options_default();
            o.filename = path;
            o.line_offset = line;
            ot_status s = round_trip(text + off, n, &o, NULL);
            if (s == OT_OK) {
                conf_pass++;
            } else if (s == OT_ERR_UNIMPLEMENTED) {
                conf_unimpl++;
                /* precise: the location and the feature */
                EXPECT_STR_CONTAINS(ot_last_error(), path);
                EXPECT_STR_CONTAINS(ot_last_error(), "not supported");
                printf("     unimplemented: %s\n", ot_last_error());
            } else {
                EXPECT_STR_EQ(ot_last_error(), "(passes or is UNIMPLEMENTED)");
            }
        }
        off += next;
        line += lines;
    }
    free(text);
}

static void walk(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char **names = NULL;
    size_t n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    /* sorted for a stable report */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            walk(path);
        } else {
            size_t l = strlen(names[i]);
            if (l > 4 && !strcmp(names[i] + l - 4, ".hlo")) conform_file(path);
        }
        free(names[i]);
    }
    free(names);
}

static void test_conformance(void) {
    conf_pass = conf_unimpl = conf_files = 0;
    walk(OT_SOURCE_DIR "/tests/data/hlo");
    printf("     %d files: %d modules pass, %d unimplemented\n", conf_files, conf_pass,
           conf_unimpl);
    EXPECT_TRUE(conf_files >= 35);
    EXPECT_TRUE(conf_pass >= 30);
}

static void test_jax_and_lenient_forms(void) {
    /* JAX's as_text: no %, no operand shapes, FileNames/StackFrames preambles */
    const char *jax =
        "HloModule jit_f, entry_computation_layout={(f32[4]{0}, f32[4]{0})->f32[4]{0}}\n"
        "\n"
        "FileNames\n1 \"/tmp/x.py\"\n\nFunctionNames\n1 \"f\"\n\n"
        "FileLocations\n1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=10}\n\n"
        "StackFrames\n1 {file_location_id=1 parent_frame_id=1}\n\n"
        "region_0.3 {\n"
        "  Arg_0.4 = f32[] parameter(0)\n"
        "  Arg_1.5 = f32[] parameter(1)\n"
        "  ROOT add.6 = f32[] add(Arg_0.4, Arg_1.5)\n"
        "}\n\n"
        "ENTRY main.10 {\n"
        "  x.1 = f32[4]{0} parameter(0), metadata={op_name=\"x\" stack_frame_id=1}\n"
        "  y.2 = f32[4]{0} parameter(1)\n"
        "  mul.7 = f32[4]{0} multiply(x.1, y.2), metadata={op_name=\"jit(f)/mul\" "
        "source_file=\"/tmp/x.py\" source_line=3}\n"
        "  /* block comment */ c.8 = f32[] constant(0) // trailing comment\n"
        "  r.9 = f32[] reduce(mul.7, c.8), dimensions={0}, to_apply=region_0.3\n"
        "  ROOT b.11 = f32[4]{0} broadcast(r.9), dimensions={}\n"
        "}\n";
    char *printed = NULL;
    EXPECT_OK(round_trip(jax, strlen(jax), NULL, &printed));
    EXPECT_STR_CONTAINS(printed, "ENTRY %main.10 (x.1: f32[4]{0}, y.2: f32[4]{0}) -> f32[4]{0}");
    EXPECT_STR_CONTAINS(printed, "to_apply=%region_0.3");
    EXPECT_STR_CONTAINS(printed, "source_line=3");
    ot_free(printed);
    /* lenient: no header, no ENTRY (the last computation), no ROOT (the last instruction),
     * operands defined after their use */
    const char *lenient = "body {\n"
                          "  p = (s32[]) parameter(0)\n"
                          "  ROOT t = (s32[]) tuple(n)\n"
                          "  n = s32[] add(g, one)\n"
                          "  g = s32[] get-tuple-element(p), index=0\n"
                          "  one = s32[] constant(1)\n"
                          "}\n"
                          "cond {\n"
                          "  p = (s32[]) parameter(0)\n"
                          "  g = s32[] get-tuple-element(p), index=0\n"
                          "  ROOT lt = pred[] compare(g, k), direction=LT\n"
                          "  k = s32[] constant(7)\n"
                          "}\n"
                          "main {\n"
                          "  z = s32[] constant(0)\n"
                          "  t = (s32[]) tuple(z)\n"
                          "  w = (s32[]) while(t), condition=cond,\n"
                          "      body=body, backend_config={\"known_trip_count\":{\"n\":\"7\"}}\n"
                          "}\n";
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(lenient, strlen(lenient), NULL, &m));
    ot_computation *e = ot_module_entry(m);
    EXPECT_STR_EQ(e->name, "main");
    EXPECT_INT_EQ(e->root->opcode, OT_OP_WHILE);
    ot_computation *body = ot_module_find_computation(m, "body");
    EXPECT_INT_EQ(body->root->opcode, OT_OP_TUPLE);
    EXPECT_STR_EQ(e->root->attrs->backend_config, "{\"known_trip_count\":{\"n\":\"7\"}}");
    ot_module_free(m);
    EXPECT_OK(round_trip(lenient, strlen(lenient), NULL, NULL));
}

static void test_constants(void) {
    const char *t = "HloModule c\n"
                    "ENTRY e {\n"
                    "  a = f32[5] constant({1.5, -inf, inf, nan, -0})\n"
                    "  b = pred[2,2] constant({ {true, false}, {false, true} })\n"
                    "  c = s32[0] constant({})\n"
                    "  d = bf16[2] constant({0.1, 3e+38})\n"
                    "  e = u64[] constant(18446744073709551615)\n"
                    "  f = s8[3] constant({-128, 0, 127})\n"
                    "  g = f32[1000,1000] constant({...})\n"
                    "  h = f32[2,2] constant(1)\n"
                    "  i = f64[] constant(0.1)\n"
                    "  j = f16[] constant(65504)\n"
                    "  k = s32[2] constant(s32[2] {7, 8})\n"
                    "  ROOT t = (f32[5], pred[2,2], s32[0], bf16[2], u64[], s8[3], f32[1000,1000], "
                    "f32[2,2], f64[], f16[], s32[2]) tuple(a, b, c, d, e, f, g, h, i, j, k)\n"
                    "}\n";
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(t, strlen(t), NULL, &m));
    ot_computation *c = ot_module_entry(m);
    const float *a = ot_computation_find_instr(c, "a")->attrs->literal->data;
    EXPECT_NEAR(a[0], 1.5, 0);
    EXPECT_TRUE(isinf(a[1]) && a[1] < 0);
    EXPECT_TRUE(isinf(a[2]) && a[2] > 0);
    EXPECT_TRUE(isnan(a[3]));
    EXPECT_TRUE(a[4] == 0 && signbit(a[4]));
    const uint8_t *b = ot_computation_find_instr(c, "b")->attrs->literal->data;
    EXPECT_TRUE(b[0] == 1 && b[1] == 0 && b[2] == 0 && b[3] == 1);
    const uint64_t *e = ot_computation_find_instr(c, "e")->attrs->literal->data;
    EXPECT_U64_EQ(e[0], UINT64_MAX);
    const int8_t *f = ot_computation_find_instr(c, "f")->attrs->literal->data;
    EXPECT_INT_EQ(f[0], -128);
    EXPECT_TRUE(ot_computation_find_instr(c, "g")->attrs->literal->elided);
    const float *h = ot_computation_find_instr(c, "h")->attrs->literal->data;
    EXPECT_TRUE(h[0] == 1 && h[3] == 1);
    const double *i = ot_computation_find_instr(c, "i")->attrs->literal->data;
    EXPECT_NEAR(i[0], 0.1, 0);
    ot_module_free(m);
    char *p = NULL;
    EXPECT_OK(round_trip(t, strlen(t), NULL, &p));
    EXPECT_STR_CONTAINS(p, "constant({1.5, -inf, inf, nan, -0})");
    EXPECT_STR_CONTAINS(p, "constant({{true, false}, {false, true}})");
    EXPECT_STR_CONTAINS(p, "constant({...})");
    EXPECT_STR_CONTAINS(p, "constant(0.10000000000000001)");
    ot_free(p);
}

static void test_attribute_round_trip(void) {
    const char *t =
        "HloModule attrs, input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {0}, "
        "must-alias) }, replica_count=4, num_partitions=2, is_scheduled=true\n"
        "\n"
        "%sum (a: f32[], b: f32[]) -> f32[] {\n"
        "  %a = f32[] parameter(0)\n"
        "  %b = f32[] parameter(1)\n"
        "  ROOT %add = f32[] add(f32[] %a, f32[] %b)\n"
        "}\n"
        "\n"
        "%gt (a: f32[], b: f32[]) -> pred[] {\n"
        "  %a = f32[] parameter(0)\n"
        "  %b = f32[] parameter(1)\n"
        "  ROOT %c = pred[] compare(f32[] %a, f32[] %b), direction=GT, type=TOTALORDER\n"
        "}\n"
        "\n"
        "ENTRY %main (x: f32[8,16], t: (f32[4], f32[4])) -> f32[8,16] {\n"
        "  %x = f32[8,16]{1,0} parameter(0), sharding={replicated}\n"
        "  %t = (f32[4]{0}, f32[4]{0}) parameter(1)\n"
        "  %sl = f32[4,8]{1,0} slice(f32[8,16]{1,0} %x), slice={[0:8:2], [0:16:2]}\n"
        "  %z = f32[] constant(0)\n"
        "  %pd = f32[9,20]{1,0} pad(f32[4,8]{1,0} %sl, f32[] %z), padding=1_1_1x-1_6_1\n"
        "  %rw = f32[4,8]{1,0} reduce-window(f32[8,16]{1,0} %x, f32[] %z), window={size=2x2 "
        "stride=2x2 pad=0_0x0_0 lhs_dilate=1x1 rhs_dilate=1x1}, to_apply=%sum\n"
        "  %x3 = f32[1,8,16]{2,1,0} reshape(f32[8,16]{1,0} %x)\n"
        "  %cv = f32[1,8,16]{2,1,0} convolution(f32[1,8,16]{2,1,0} %x3, f32[3,16,16]{2,1,0} %k), "
        "window={size=3 pad=1_1 rhs_dilate=1}, dim_labels=b0f_0io->b0f, feature_group_count=1\n"
        "  %k = f32[3,16,16]{2,1,0} parameter(2)\n"
        "  %ix = s32[3,1]{1,0} parameter(3)\n"
        "  %ga = f32[3,16]{1,0} gather(f32[8,16]{1,0} %x, s32[3,1]{1,0} %ix), offset_dims={1}, "
        "collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,16}, "
        "indices_are_sorted=true\n"
        "  %sc = f32[8,16]{1,0} scatter(f32[8,16]{1,0} %x, s32[3,1]{1,0} %ix, f32[3,16]{1,0} %ga), "
        "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
        "index_vector_dim=1, unique_indices=true, to_apply=%sum\n"
        "  %so = f32[8,16]{1,0} sort(f32[8,16]{1,0} %sc), dimensions={1}, is_stable=true, "
        "to_apply=%gt\n"
        "  %ar = f32[8,16]{1,0} all-reduce(f32[8,16]{1,0} %so), channel_id=1, "
        "replica_groups=[2,4]<=[4,2]T(1,0), use_global_device_ids=true, to_apply=%sum\n"
        "  %ag = f32[8,32]{1,0} all-gather(f32[8,16]{1,0} %ar), replica_groups={{0,1},{2,3}}, "
        "dimensions={1}\n"
        "  %rs = f32[2,32]{1,0} reduce-scatter(f32[8,32]{1,0} %ag), replica_groups={}, "
        "dimensions={0}, to_apply=%sum\n"
        "  %cp = f32[2,32]{1,0} collective-permute(f32[2,32]{1,0} %rs), channel_id=2, "
        "source_target_pairs={{0,1},{1,0}}\n"
        "  %st = u64[2]{0} parameter(4)\n"
        "  %rng = (u64[2]{0}, u32[2,32]{1,0}) rng-bit-generator(u64[2]{0} %st), "
        "algorithm=rng_three_fry\n"
        "  %d = f32[2,2]{1,0} dot(f32[2,32]{1,0} %cp, f32[2,32]{1,0} %cp), "
        "lhs_contracting_dims={1}, rhs_contracting_dims={1}, operand_precision={highest,default}\n"
        "  %cc = f32[2]{0} custom-call(f32[2,2]{1,0} %d), custom_call_target=\"my\\\"target\", "
        "custom_call_has_side_effect=true, api_version=API_VERSION_STATUS_RETURNING, "
        "backend_config=\"{\\\"k\\\": 1}\"\n"
        "  %rp = f32[8,16]{1,0} reduce-precision(f32[8,16]{1,0} %x), exponent_bits=5, "
        "mantissa_bits=10\n"
        "  %io = s32[4,3]{1,0} iota(), iota_dimension=1\n"
        "  %ri = u32[] replica-id()\n"
        "  %bc = s32[8,16]{1,0} bitcast-convert(f32[8,16]{1,0} %rp)\n"
        "  ROOT %o = f32[8,16]{1,0} opt-barrier(f32[8,16]{1,0} %x)\n"
        "}\n";
    char *p = NULL;
    EXPECT_OK(round_trip(t, strlen(t), NULL, &p));
    if (!p) return;
    EXPECT_STR_CONTAINS(p, "replica_groups=[2,4]<=[4,2]T(1,0)");
    EXPECT_STR_CONTAINS(p, "padding=1_1_1x-1_6_1");
    EXPECT_STR_CONTAINS(p, "slice={[0:8:2], [0:16:2]}");
    EXPECT_STR_CONTAINS(p, "window={size=2x2 stride=2x2}");
    EXPECT_STR_CONTAINS(p, "window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f");
    EXPECT_STR_CONTAINS(p, "input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {0}, "
                           "must-alias) }");
    EXPECT_STR_CONTAINS(p, "replica_count=4, num_partitions=2, is_scheduled=true");
    EXPECT_STR_CONTAINS(p, "custom_call_target=\"my\\\"target\"");
    EXPECT_STR_CONTAINS(p, "sharding={replicated}");
    EXPECT_STR_CONTAINS(p, "operand_precision={highest,default}");
    EXPECT_STR_CONTAINS(p, "direction=GT, type=TOTALORDER");
    ot_free(p);
}

/* Builder-made module: print, parse, print. */
static void test_builder_round_trip(void) {
    ot_module *m = ot_module_new("built");
    ot_computation *sum = ot_module_add_computation(m, "sum");
    ot_instr *a = ot_build_parameter(sum, 0, ot_shape_scalar(OT_F32), "a");
    ot_instr *b = ot_build_parameter(sum, 1, ot_shape_scalar(OT_F32), "b");
    ot_computation_set_root(sum, ot_build_binary(sum, OT_OP_ADD, a, b));
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_shape s;
    ot_shape_make(&s, OT_F32, 2, (int64_t[]){3, 4});
    ot_instr *x = ot_build_parameter(c, 0, s, "x");
    ot_instr *z = ot_build_constant_scalar(c, OT_F32, 0.25);
    int64_t d[] = {1};
    ot_instr *r = ot_build_reduce(c, &x, &z, 1, d, 1, sum);
    ot_instr *e = ot_build_unary(c, OT_OP_EXP, r);
    ot_computation_set_root(c, e);
    ot_module_set_entry(m, c);
    ASSERT_OK(ot_module_finalize(m));
    char *t = ot_hlo_print(m, NULL);
    ASSERT_TRUE(t);
    EXPECT_STR_CONTAINS(t, "%reduce.5 = f32[3] reduce(f32[3,4] %x, f32[] %constant.4), "
                           "dimensions={1}, to_apply=%sum");
    EXPECT_OK(round_trip(t, strlen(t), NULL, NULL));
    char *line = ot_hlo_print_instr(e, NULL);
    EXPECT_STR_EQ(line, "%exponential.6 = f32[3] exponential(f32[3] %reduce.5)");
    ot_free(line);
    char *dot = ot_ir_to_dot(m, NULL);
    ASSERT_TRUE(dot);
    EXPECT_STR_CONTAINS(dot, "digraph \"main\"");
    EXPECT_STR_CONTAINS(dot, "reduce → sum");
    EXPECT_STR_CONTAINS(dot, "n3 -> n5;");
    ot_free(dot);
    ot_free(t);
    ot_module_free(m);
}

static void test_malformed(void) {
#define WIN_HEAD                                                                                   \
    "ENTRY e {\n  x = f32[1,5,2] parameter(0)\n  k = f32[3,2,2] parameter(1)\n  ROOT c = "         \
    "f32[1,5,2] convolution(x, k), window={"
    static const struct {
        const char *text;
        ot_status code;
        const char *want;
    } cases[] = {
        {"", OT_ERR_INVALID_ARGUMENT, "<input>:1:1: expected a computation, got end of input"},
        {"HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] frob(x)\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:4:19: unknown opcode 'frob'"},
        {"ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] infeed(x)\n}\n",
         OT_ERR_UNIMPLEMENTED, "<input>:3:19: opcode 'infeed' is not supported"},
        {"ENTRY e {\n  x = c64[2] parameter(0)\n  ROOT y = c64[2] fft(x), fft_type=FFT\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:3:19: fft needs fft_length="},
        {"ENTRY e {\n  x = f32[8] parameter(0)\n  ROOT y = c64[5] fft(x), fft_type=FFT, "
         "fft_length={8}\n}\n",
         OT_ERR_SHAPE_MISMATCH, "<input>:3:19: y: fft: FFT needs a complex operand, not f32"},
        {"ENTRY e {\n  x = c64[4] parameter(0)\n  ROOT y = f32[8] fft(x), fft_type=IRFFT, "
         "fft_length={8}\n}\n",
         OT_ERR_SHAPE_MISMATCH,
         "<input>:3:19: y: fft: IRFFT: operand 0 (x) c64[4] dimension 0 is 4, fft_length needs 5"},
        {"ENTRY e {\n  x = c64[8] parameter(0)\n  ROOT y = c64[8] fft(x), fft_type=DCT, "
         "fft_length={8}\n}\n",
         OT_ERR_INVALID_ARGUMENT, "expected an fft type (FFT IFFT RFFT IRFFT), got 'DCT'"},
        {"ENTRY e {\n  x = c64[2] constant({(1, 2), (3)})\n}\n", OT_ERR_INVALID_ARGUMENT,
         "<input>:2:34: expected ','"},
        {"ENTRY e {\n  x = c64[2] parameter(0)\n  ROOT y = pred[2] compare(x, x), "
         "direction=LT\n}\n",
         OT_ERR_SHAPE_MISMATCH, "c64 operands compare only for EQ and NE, not LT"},
        {"ENTRY e {\n  x = c64[2] parameter(0)\n  ROOT y = f32[2] convert(x)\n}\n",
         OT_ERR_UNIMPLEMENTED, "conversion from complex to real type c64 => f32"},
        {"ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[3] negate(x)\n}\n",
         OT_ERR_SHAPE_MISMATCH,
         "<input>:3:19: y: negate: declared shape f32[3] disagrees with the inferred shape f32[2]"},
        {"ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] negate(x), dimension={0}\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:3:30: unknown attribute 'dimension' for negate"},
        {"ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] negate(q)\n}\n", OT_ERR_NOT_FOUND,
         "<input>:3:26: unknown instruction 'q' in e"},
        {"ENTRY e {\n  x = f32[2 parameter(0)\n}\n", OT_ERR_INVALID_ARGUMENT,
         "<input>:2:13: expected ',', got 'parameter(0)'"},
        {"ENTRY e {\n  x = s4[2] parameter(0)\n}\n", OT_ERR_UNIMPLEMENTED,
         "<input>:2:7: element type s4 is not supported"},
        {"ENTRY e {\n  x = f32[<=4] parameter(0)\n}\n", OT_ERR_UNIMPLEMENTED,
         "<input>:2:11: dynamic dimensions"},
        {"ENTRY e {\n  x = f32[2] constant({1, 2, 3})\n}\n", OT_ERR_SHAPE_MISMATCH,
         "<input>:2:30: constant has more values than the 2 its shape holds"},
        {"ENTRY e {\n  x = u8[] constant(300)\n}\n", OT_ERR_OUT_OF_RANGE,
         "<input>:2:21: 300 does not fit u8"},
        {"ENTRY e {\n  x = f32[2] parameter(0)\n  x = f32[2] parameter(1)\n}\n",
         OT_ERR_ALREADY_EXISTS, "<input>:3:3: instruction name 'x' is already used in e"},
        {"ENTRY e {\n  a = f32[2] negate(b)\n  b = f32[2] negate(a)\n}\n", OT_ERR_INVALID_ARGUMENT,
         "cycle"},
        {"ENTRY e {\n  x = f32[2] parameter(1)\n}\n", OT_ERR_INVALID_ARGUMENT,
         "<input>:1:7: computation e has no parameter(0)"},
        {"ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT r = f32[] reduce(x, x), dimensions={0}, "
         "to_apply=nope\n}\n",
         OT_ERR_NOT_FOUND, "<input>:3:57: unknown computation 'nope'"},
        {"ENTRY e {\n  x = f32[2] parameter(0) /* open\n}\n", OT_ERR_INVALID_ARGUMENT,
         "<input>:2:27: unterminated /* comment"},
        {"ENTRY e {\n  x = f32[2] parameter(0), metadata={op_name=\"x}\n}\n",
         OT_ERR_INVALID_ARGUMENT, "unterminated string"},
        {"ENTRY e {\n  x = (f32[2], s32[]) constant((1, 2))\n}\n", OT_ERR_UNIMPLEMENTED,
         "tuple constants are not supported"},
        {"ENTRY e {\n  x = f32[2,2] parameter(0)\n  ROOT d = f32[2,2] dot(x, x), "
         "lhs_contracting_dims={1}, rhs_contracting_dims={5}\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:3:21: d: dot: rhs_contracting_dims[0] = 5 is outside"},
        {"ENTRY e {\n  x = f32[2,3]{1} parameter(0)\n}\n", OT_ERR_INVALID_ARGUMENT,
         "layout of f32[...] must list each of its 2 dimensions once"},
        {"ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] add(f32[3] x, x)\n}\n",
         OT_ERR_SHAPE_MISMATCH,
         "<input>:3:23: operand 0 of add is written as f32[3] but x is f32[2]"},
        {"HloModule a\nENTRY e {\n  x = f32[2] parameter(0)\n}\nHloModule b\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:5:1: a second HloModule header"},
        {"HloModule a\nENTRY e {\n  x = f32[2] parameter(0)\n}\nHloModule b\n",
         OT_ERR_INVALID_ARGUMENT, "pass --split-input-file (optitpu hlo check/print)"},
        /* what XLA rejects and a lenient parser once accepted (issue 24) */
        {"HloModule m, entry_computation_layout={(f32[2]{0})->f32[3]{0}}\n"
         "ENTRY e {\n  ROOT x = f32[2] parameter(0)\n}\n",
         OT_ERR_SHAPE_MISMATCH,
         "<input>:1:53: entry_computation_layout gives result as f32[3], but the entry "
         "computation's result (x) is f32[2]"},
        {"HloModule m, entry_computation_layout={(f32[2]{0}, s32[])->f32[2]{0}}\n"
         "ENTRY e {\n  x = f32[2] parameter(0)\n  y = f32[2] parameter(1)\n  ROOT a = f32[2] "
         "add(x, y)\n}\n",
         OT_ERR_SHAPE_MISMATCH,
         "<input>:1:52: entry_computation_layout gives parameter 1 as s32[], but the entry "
         "computation's parameter 1 (y) is f32[2]"},
        {"HloModule m, entry_computation_layout={(f32[2]{0})->f32[2]{0}}\n"
         "ENTRY e {\n  x = f32[2] parameter(0)\n  y = f32[2] parameter(1)\n  ROOT a = f32[2] "
         "add(x, y)\n}\n",
         OT_ERR_INVALID_ARGUMENT,
         "<input>:1:51: entry_computation_layout lists 1 parameters, the entry computation e "
         "has 2"},
        {"HloModule m, entry_computation_layout={(f32[2]{0}, f32[2])->f32[2]{0}}\n"
         "ENTRY e {\n  ROOT x = f32[2] parameter(0)\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:1:52: entry_computation_layout lists more parameters"},
        {"ENTRY e {\n  x = f32[2,3] parameter(0)\n  ROOT t = f32[3,2] transpose(x), "
         "dimensions={1,0}, dimensions={0,1}\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:3:53: attribute 'dimensions' is given twice"},
        {"ENTRY e {\n  x = f32[2] parameter(0), metadata={op_name=\"a\" op_name=\"b\"}\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:2:50: metadata field 'op_name' is given twice"},
        {"HloModule m, frobnicate=1\nENTRY e {\n  ROOT x = f32[2] parameter(0)\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:1:14: unknown module attribute 'frobnicate'"},
        {"HloModule m, replica_count=1, replica_count=2\nENTRY e {\n  ROOT x = f32[2] "
         "parameter(0)\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:1:31: module attribute 'replica_count' is given twice"},
        {"ENTRY e {\n  ROOT x = f32[2] parameter(0)\n}, frob=\"x\"\n", OT_ERR_INVALID_ARGUMENT,
         "<input>:3:4: unknown computation attribute 'frob'"},
        {"ENTRY e {\n  x = f32[2] parameter(0), sharding={replicated)\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:2:48: ')' closes '{'"},
        {"ENTRY e {\n  x = f32[2] parameter(0), metadata={op_name=\"a\xff\"}\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:2:48: byte 0xff is not valid UTF-8"},
        {"ENTRY e {\n  x = f32[2] parameter(0), metadata={op_name=\"\300\257\"}\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:2:47: byte 0xc0 is not valid UTF-8"},
        {"ENTRY e {\n  x = f32[2] parameter(0), metadata={op_name=\"\355\240\200\"}\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:2:47: byte 0xed is not valid UTF-8"},
        {"ENTRY e {\n  x\342\202 = f32[2] parameter(0)\n}\n", OT_ERR_INVALID_ARGUMENT,
         "<input>:2:4: byte 0xe2 is not valid UTF-8"},
        {"ENTRY e {\n  x = f32[2] parameter(0)\n", OT_ERR_INVALID_ARGUMENT,
         "expected '}' closing the computation"},
        {"ENTRY e {\n  x = f32[99999999999,99999999999,99999] parameter(0)\n}\n",
         OT_ERR_INVALID_ARGUMENT, "shape is too large"},
        {"ENTRY e {\n  x = f32[1,5,2] parameter(0)\n  ROOT c = f32[1,5,2] convolution(x, x), "
         "dim_labels=b0f_0io->b0f, window={size=1 stride=1x1}\n}\n",
         OT_ERR_INVALID_ARGUMENT,
         "<input>:3:82: window field stride has 2 dimensions, others have 1"},
        /* a window field given twice: XLA refuses it (the last one once won here) */
        {WIN_HEAD "size=3 pad=1_1 size=3}, dim_labels=b0f_0io->b0f\n}\n", OT_ERR_INVALID_ARGUMENT,
         "<input>:4:65: window field 'size' is given twice"},
        {WIN_HEAD "size=3 stride=1 pad=1_1 stride=1}, dim_labels=b0f_0io->b0f\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:4:74: window field 'stride' is given twice"},
        {WIN_HEAD "size=3 pad=1_1 pad=1_1}, dim_labels=b0f_0io->b0f\n}\n", OT_ERR_INVALID_ARGUMENT,
         "<input>:4:65: window field 'pad' is given twice"},
        {WIN_HEAD "size=3 pad=1_1 lhs_dilate=1 lhs_dilate=1}, dim_labels=b0f_0io->b0f\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:4:78: window field 'lhs_dilate' is given twice"},
        {WIN_HEAD "rhs_dilate=1 size=3 pad=1_1 rhs_dilate=1}, dim_labels=b0f_0io->b0f\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:4:78: window field 'rhs_dilate' is given twice"},
        {WIN_HEAD "size=3 pad=1_1 rhs_reversal=0 rhs_reversal=0}, dim_labels=b0f_0io->b0f\n}\n",
         OT_ERR_INVALID_ARGUMENT, "<input>:4:80: window field 'rhs_reversal' is given twice"},
    };
#undef WIN_HEAD
    int64_t live = ot_alloc_live();
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ot_module *m = (ot_module *)1;
        ot_status s = ot_hlo_parse(cases[k].text, strlen(cases[k].text), NULL, &m);
        if (s != cases[k].code) fprintf(stderr, "  case %zu\n", k);
        EXPECT_STATUS(s, cases[k].code);
        EXPECT_TRUE(m == NULL);
        EXPECT_STR_CONTAINS(ot_last_error(), cases[k].want);
    }
    EXPECT_INT_EQ(ot_alloc_live(), live);
}

/* A UTF-8 byte-order mark at the start of the file, as some editors write it, is skipped (columns
 * count from after it); on another line, or at the start of a later piece of a split file, it is
 * still an error with its location. */
static void test_byte_order_mark(void) {
    static const char text[] = "\xEF\xBB\xBFHloModule m\nENTRY e {\n  ROOT x = f32[2] "
                               "parameter(0)\n}\n";
    int64_t live = ot_alloc_live();
    ot_module *m = NULL;
    EXPECT_OK(ot_hlo_parse(text, sizeof text - 1, NULL, &m));
    EXPECT_TRUE(m != NULL);
    ot_module_free(m);
    m = NULL;
    /* an error on line 1 counts its column from after the mark */
    static const char bad1[] = "\xEF\xBB\xBFHloModule m, frob=1\nENTRY e {\n  ROOT x = f32[2] "
                               "parameter(0)\n}\n";
    EXPECT_STATUS(ot_hlo_parse(bad1, sizeof bad1 - 1, NULL, &m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "<input>:1:14: unknown module attribute 'frob'");
    static const char bad2[] = "HloModule m\n\xEF\xBB\xBF"
                               "ENTRY e {\n  ROOT x = f32[2] parameter(0)\n}\n";
    EXPECT_STATUS(ot_hlo_parse(bad2, sizeof bad2 - 1, NULL, &m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "<input>:2:1:");
    EXPECT_TRUE(m == NULL);
    ot_hlo_parse_options o = ot_hlo_parse_options_default();
    o.line_offset = 4; /* a later piece of a split file */
    EXPECT_STATUS(ot_hlo_parse(text, sizeof text - 1, &o, &m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "<input>:5:1:");
    EXPECT_TRUE(m == NULL);
    EXPECT_INT_EQ(ot_alloc_live(), live);
}

/* A NUL byte inside the text (here in a string attribute) is refused with its location: printed,
 * it would cut the string short and the text would no longer parse back (a fuzzer finding). */
static void test_nul_byte(void) {
    static const char text[] = "ENTRY e {\n  x = f32[2] parameter(0)\n"
                               "  ROOT y = f32[2] custom-call(x), custom_call_target=\"a\0b\"\n}\n";
    ot_module *m = NULL;
    EXPECT_STATUS(ot_hlo_parse(text, sizeof text - 1, NULL, &m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(m == NULL);
    EXPECT_STR_CONTAINS(ot_last_error(), "<input>:3:");
    EXPECT_STR_CONTAINS(ot_last_error(), "NUL byte");
}

/* 100,000 nested brackets in a kept-verbatim attribute, in a layout's tiling and in a tuple shape:
 * each refused at the first bracket past the bound with its location, nothing recursing that
 * deep (under ASan a recursion per bracket would overflow the stack). */
static void test_deep_nesting(void) {
    const int depth = 100000;
    static const char *const heads[] = {
        "ENTRY e {\n  x = f32[2] parameter(0), frontend_attributes=",
        "ENTRY e {\n  x = f32[2]{0:T",
        "ENTRY e {\n  x = ",
    };
    static const char open[] = {'{', '(', '('};
    static const char *const want[] = {"brackets nested more than 64 deep in a value",
                                       "layout nested more than 64 deep",
                                       "tuple shape nested more than 64 deep"};
    int64_t live = ot_alloc_live();
    for (int k = 0; k < 3; k++) {
        size_t hl = strlen(heads[k]);
        char *t = malloc(hl + (size_t)depth + 64);
        ASSERT_TRUE(t);
        memcpy(t, heads[k], hl);
        memset(t + hl, open[k], (size_t)depth);
        strcpy(t + hl + depth, " parameter(0)\n}\n");
        ot_module *m = NULL;
        EXPECT_STATUS(ot_hlo_parse(t, strlen(t), NULL, &m), OT_ERR_INVALID_ARGUMENT);
        EXPECT_TRUE(m == NULL);
        EXPECT_STR_CONTAINS(ot_last_error(), want[k]);
        EXPECT_STR_CONTAINS(ot_last_error(), "<input>:2:");
        free(t);
    }
    EXPECT_INT_EQ(ot_alloc_live(), live);
    /* 64 levels are still accepted and kept */
    char t[512];
    int n =
        snprintf(t, sizeof t, "ENTRY e {\n  ROOT x = f32[2] parameter(0), frontend_attributes=");
    for (int k = 0; k < 64; k++) t[n++] = '{';
    for (int k = 0; k < 64; k++) t[n++] = '}';
    n += snprintf(t + n, sizeof t - (size_t)n, "\n}\n");
    EXPECT_OK(round_trip(t, (size_t)n, NULL, NULL));
}

/* Strings: valid UTF-8 is kept as it is; control characters and bytes that are not UTF-8 (set
 * through the API or written as octal escapes) are printed as octal escapes, so printed text is
 * always UTF-8 and parses back to the same bytes. */
static void test_string_escapes(void) {
    const char *t =
        "ENTRY e {\n  x = f32[2] parameter(0)\n"
        "  ROOT y = f32[2] custom-call(x), custom_call_target=\"caf\xc3\xa9\\001\\377\"\n}\n";
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(t, strlen(t), NULL, &m));
    const ot_instr *r = ot_module_entry(m)->root;
    EXPECT_STR_EQ(r->attrs->custom_call_target, "caf\xc3\xa9\001\377");
    char *p = ot_hlo_print(m, NULL);
    ASSERT_TRUE(p);
    EXPECT_STR_CONTAINS(p, "custom_call_target=\"caf\xc3\xa9\\001\\377\"");
    ot_free(p);
    ot_module_free(m);
    EXPECT_OK(round_trip(t, strlen(t), NULL, NULL));
    const char *zero = "ENTRY e {\n  x = f32[2] parameter(0), metadata={op_name=\"\\0\"}\n}\n";
    EXPECT_STATUS(ot_hlo_parse(zero, strlen(zero), NULL, &m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "<input>:2:47: octal escape \\0 is not a byte");
}

static void test_split(void) {
    const char *t = "// header\nHloModule a\nENTRY e {\n  ROOT x = f32[] constant(1)\n}\n"
                    "// -----\n"
                    "HloModule b\nENTRY e {\n  ROOT x = f32[] constant(2)\n  y = f32[] frob()\n}\n";
    size_t len = strlen(t), next;
    int lines;
    size_t n = ot_hlo_split_next(t, len, &next, &lines);
    EXPECT_INT_EQ(lines, 6);
    ot_module *m;
    EXPECT_OK(ot_hlo_parse(t, n, NULL, &m));
    ot_module_free(m);
    ot_hlo_parse_options o = ot_hlo_parse_options_default();
    o.line_offset = lines;
    size_t n2 = ot_hlo_split_next(t + next, len - next, NULL, NULL);
    EXPECT_INT_EQ(n2, len - next);
    EXPECT_STATUS(ot_hlo_parse(t + next, n2, &o, &m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "<input>:10:13: unknown opcode 'frob'");
}

static void test_mesh_groups(void) {
    const char *t = "HloModule m, replica_count=1, num_partitions=8\n"
                    "sum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                    "  ROOT c = f32[] add(a, b)\n}\n"
                    "ENTRY e {\n  x = f32[4] parameter(0)\n"
                    "  r = f32[4] all-reduce(x), channel_id=1, "
                    "replica_groups=mesh['a'=2,'b'=4] {'a'}, use_global_device_ids=true, "
                    "to_apply=sum\n"
                    "  ROOT q = f32[4] all-reduce(r), channel_id=2, "
                    "replica_groups=mesh['a'=2,'b'=4] {'b'}, use_global_device_ids=true, "
                    "to_apply=sum\n}\n";
    ot_module *m;
    ASSERT_OK(ot_hlo_parse(t, strlen(t), NULL, &m));
    const ot_instr *r = ot_computation_find_instr(ot_module_entry(m), "r");
    const ot_replica_groups *g = r->attrs->groups;
    EXPECT_INT_EQ(g->ngroups, 4);
    int64_t want_a[] = {0, 4, 1, 5, 2, 6, 3, 7};
    for (int k = 0; k < 8; k++) EXPECT_INT_EQ(g->ids[k], want_a[k]);
    g = ot_module_entry(m)->root->attrs->groups;
    EXPECT_INT_EQ(g->ngroups, 2);
    for (int k = 0; k < 8; k++) EXPECT_INT_EQ(g->ids[k], k);
    ot_module_free(m);
    EXPECT_OK(round_trip(t, strlen(t), NULL, NULL));
}

static void test_parse_alloc_failure(void) {
    size_t len;
    char *text = read_file(OT_SOURCE_DIR "/tests/data/hlo/"
                                         "backends__cpu__benchmarks__hlo__argsort_axis_1024x512_"
                                         "bf16.hlo",
                           &len);
    ASSERT_TRUE(text);
    int64_t live = ot_alloc_live();
    int ok_at = 0;
    for (int n = 1; n < 5000; n++) {
        ot_alloc_fail_after(n);
        ot_module *m = NULL;
        ot_status s = ot_hlo_parse(text, len, NULL, &m);
        char *p = s == OT_OK ? ot_hlo_print(m, NULL) : NULL;
        ot_alloc_fail_after(0);
        bool printed = p != NULL;
        ot_free(p);
        ot_module_free(m);
        EXPECT_INT_EQ(ot_alloc_live(), live);
        if (s == OT_OK && printed) {
            ok_at = n;
            break;
        }
        if (s != OT_OK) EXPECT_STATUS(s, OT_ERR_OUT_OF_MEMORY);
    }
    EXPECT_TRUE(ok_at > 1);
    free(text);
}

OT_TEST_MAIN(OT_TEST(test_conformance), OT_TEST(test_jax_and_lenient_forms),
             OT_TEST(test_constants), OT_TEST(test_attribute_round_trip),
             OT_TEST(test_builder_round_trip), OT_TEST(test_malformed),
             OT_TEST(test_byte_order_mark), OT_TEST(test_nul_byte), OT_TEST(test_deep_nesting),
             OT_TEST(test_string_escapes), OT_TEST(test_split), OT_TEST(test_mesh_groups),
             OT_TEST(test_parse_alloc_failure))
