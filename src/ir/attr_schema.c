/* The attribute schema's tables (see attr_schema.h) and the per-opcode index over them. */
#include "attr_schema.h"

#include "ir_internal.h"

#include <assert.h>
#include <stdlib.h>

/* ---- fields of ot_attrs, in the executable format's order ---- */

#define FLD(id, member, k, w, cnt, l, h, e, fl)                                                    \
    [IR_F_##id] = {.what = w,                                                                      \
                   .kind = IR_FK_##k,                                                              \
                   .off = offsetof(ot_attrs, member),                                              \
                   .size = sizeof(((ot_attrs *)0)->member),                                        \
                   .elem = e,                                                                      \
                   .flag = fl,                                                                     \
                   .count_off = cnt,                                                               \
                   .lo = l,                                                                        \
                   .hi = h}
#define CNT(member) offsetof(ot_attrs, member)

const ir_attr_field ir_attr_fields[IR_F_COUNT] = {
    FLD(INDEX, index, I64, "index", -1, 0, 0, 0, NULL),
    FLD(DIMS, dims, DIMS, "dims", CNT(ndims), 0, 4096, sizeof(int64_t), NULL),
    FLD(CMP_DIR, cmp_dir, ENUM, "comparison direction", -1, 0, OT_CMP_DIR_COUNT - 1, 0, NULL),
    FLD(CMP_TYPE, cmp_type, ENUM, "comparison type", -1, 0, OT_CMP_TYPE_COUNT - 1, 0, NULL),
    FLD(EXPONENT_BITS, exponent_bits, INT, "exponent bits", -1, 0, 64, 0, NULL),
    FLD(MANTISSA_BITS, mantissa_bits, INT, "mantissa bits", -1, 0, 64, 0, NULL),
    FLD(IS_STABLE, is_stable, BOOL, "is_stable", -1, 0, 0, 0, NULL),
    FLD(LARGEST, largest, BOOL, "largest", -1, 0, 0, 0, NULL),
    FLD(HAS_SIDE_EFFECT, has_side_effect, BOOL, "has_side_effect", -1, 0, 0, 0, NULL),
    FLD(USE_GLOBAL_DEVICE_IDS, use_global_device_ids, BOOL, "use_global_device_ids", -1, 0, 0, 0,
        NULL),
    FLD(CONSTRAIN_LAYOUT, constrain_layout, BOOL, "constrain_layout", -1, 0, 0, 0, NULL),
    FLD(RNG_ALGORITHM, rng_algorithm, ENUM, "rng algorithm", -1, 0, OT_RNG_PHILOX, 0, NULL),
    FLD(FUSION_KIND, fusion_kind, ENUM, "fusion kind", -1, 0, OT_FUSION_CUSTOM, 0, NULL),
    FLD(CHANNEL_ID, channel_id, I64, "channel id", -1, 0, 0, 0, NULL),
    FLD(FEATURE_GROUP_COUNT, feature_group_count, I64, "feature group count", -1, 0, 0, 0, NULL),
    FLD(BATCH_GROUP_COUNT, batch_group_count, I64, "batch group count", -1, 0, 0, 0, NULL),
    FLD(PRECISION, precision, PRECISION, "precision", CNT(nprecision), 0, OT_PRECISION_HIGHEST,
        sizeof(ot_precision), NULL),
    FLD(SLICE, slice, PER_DIM, "slice", -1, 0, 0, sizeof(ot_slice_dim), "slice flag"),
    FLD(PADDING, padding, PER_DIM, "padding", -1, 0, 0, sizeof(ot_pad_dim), "padding flag"),
    FLD(WINDOW, window, WINDOW, "window", -1, 0, 0, sizeof(ot_window), "window flag"),
    FLD(DOT, dot, DOT, "dot", -1, 0, 0, sizeof(ot_dot_dims), "dot flag"),
    FLD(CONV, conv, CONV, "convolution", -1, 0, 0, sizeof(ot_conv_dims), "convolution flag"),
    FLD(GATHER, gather, GATHER, "gather", -1, 0, 0, sizeof(ot_gather_dims), "gather flag"),
    FLD(SCATTER, scatter, SCATTER, "scatter", -1, 0, 0, sizeof(ot_scatter_dims), "scatter flag"),
    FLD(GROUPS, groups, GROUPS, "replica groups", -1, 0, 0, sizeof(ot_replica_groups),
        "replica groups flag"),
    FLD(PAIRS, pairs, PAIRS, "source_target_pairs", CNT(npairs), 0, 1 << 20, 2 * sizeof(int64_t),
        NULL),
    FLD(CUSTOM_CALL_TARGET, custom_call_target, STRING, "custom call target", -1, 0, 1023, 0, NULL),
    FLD(BACKEND_CONFIG, backend_config, STRING, "backend config", -1, 0, 65535, 0, NULL),
    FLD(API_VERSION, api_version, INT, "api version", -1, 0, 16, 0, NULL),
    FLD(LITERAL, literal, LITERAL, "literal", -1, 0, 0, sizeof(ot_literal), "literal flag"),
};
#undef FLD
#undef CNT

/* ---- value names ---- */

const char *const ir_cmp_dir_names[OT_CMP_DIR_COUNT] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
const char *const ir_cmp_type_names[OT_CMP_TYPE_COUNT] = {"DEFAULT", "FLOAT", "TOTALORDER",
                                                          "SIGNED", "UNSIGNED"};
static const char *const fusion_kinds[] = {"kLoop", "kInput", "kOutput", "kCustom"};
static const char *const rng_names[] = {"rng_default", "rng_three_fry", "rng_philox"};
static const char *const api_versions[] = {
    "API_VERSION_UNSPECIFIED", "API_VERSION_ORIGINAL", "API_VERSION_STATUS_RETURNING",
    "API_VERSION_STATUS_RETURNING_UNIFIED", "API_VERSION_TYPED_FFI"};
static const char *const precision_names[] = {"default", "high", "highest"};
static const char *const fft_type_names[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
static_assert(sizeof fft_type_names / sizeof fft_type_names[0] == OT_FFT_TYPE_COUNT,
              "fft type names out of sync with ot_fft_type");

const char *ir_fft_type_name(int t) {
    return t >= 0 && t < OT_FFT_TYPE_COUNT ? fft_type_names[t] : "<invalid fft_type>";
}

/* ---- HLO attributes, in printing order ---- */

#define OPS(...)                                                                                   \
    .ops = (const ot_opcode[]) {                                                                   \
        __VA_ARGS__, OT_OP_INVALID                                                                 \
    }
#define MEMBER(T, m) .off = offsetof(T, m), .size = sizeof(((T *)0)->m)
/* a field of ot_attrs */
#define AT(id, m)      .field = IR_F_##id, MEMBER(ot_attrs, m), .count_off = -1
#define AT_N(id, m, n) .field = IR_F_##id, MEMBER(ot_attrs, m), .count_off = offsetof(ot_attrs, n)
/* a list in the dimension numbers the field points to, with its count */
#define IN_N(id, T, m, n) .field = IR_F_##id, MEMBER(T, m), .count_off = offsetof(T, n)
#define IN(id, T, m)      .field = IR_F_##id, MEMBER(T, m), .count_off = -1
#define ANY               .lo = INT64_MIN, .hi = INT64_MAX
#define ENUM(arr, f, w, b)                                                                         \
    .names = arr, .nnames = (int)(sizeof arr / sizeof arr[0]), .first = f, .what = w, .bad = b
#define CALLED(s)   .field = IR_T_CALLED, .count_off = -1, .slot = s
#define COLLECTIVES OT_OP_ALL_REDUCE, OT_OP_ALL_GATHER, OT_OP_REDUCE_SCATTER, OT_OP_ALL_TO_ALL
#define RAW(nm)                                                                                    \
    { nm, IR_AK_RAW, IR_T_RAW, IR_AP_NEVER, IR_AF_ALL_OPS, .count_off = -1 }

const ir_attr_row ir_attr_rows[] = {
    {"iota_dimension", IR_AK_INT, AT(INDEX, index), ANY, OPS(OT_OP_IOTA)},
    {"index", IR_AK_INT, AT(INDEX, index), ANY, OPS(OT_OP_GET_TUPLE_ELEMENT)},
    {"direction", IR_AK_ENUM, AT(CMP_DIR, cmp_dir), .flags = IR_AF_REQUIRED, OPS(OT_OP_COMPARE),
     ENUM(ir_cmp_dir_names, 0, "a comparison direction (EQ NE LT LE GT GE)",
          "expected a comparison direction (EQ NE LT LE GT GE), got '%.*s'")},
    {"type", IR_AK_ENUM, AT(CMP_TYPE, cmp_type), .print = IR_AP_NONZERO, OPS(OT_OP_COMPARE),
     ENUM(ir_cmp_type_names, 1, "a comparison type",
          "expected a comparison type (FLOAT TOTALORDER SIGNED UNSIGNED), got '%.*s'")},
    {"exponent_bits", IR_AK_INT, AT(EXPONENT_BITS, exponent_bits), .lo = 0, .hi = 64,
     OPS(OT_OP_REDUCE_PRECISION)},
    {"mantissa_bits", IR_AK_INT, AT(MANTISSA_BITS, mantissa_bits), .lo = 0, .hi = 64,
     OPS(OT_OP_REDUCE_PRECISION)},
    {"dimensions", IR_AK_DIMS, AT_N(DIMS, dims, ndims), .what = "dimensions",
     OPS(OT_OP_BROADCAST, OT_OP_TRANSPOSE, OT_OP_REVERSE, OT_OP_REDUCE, OT_OP_MAP)},
    {"dimensions", IR_AK_DIM, AT(INDEX, index), OPS(OT_OP_CONCATENATE, OT_OP_SORT)},
    {"dynamic_slice_sizes", IR_AK_DIMS, AT_N(DIMS, dims, ndims), .what = "dynamic_slice_sizes",
     OPS(OT_OP_DYNAMIC_SLICE)},
    {"slice", IR_AK_SLICE, AT(SLICE, slice), .flags = IR_AF_REQUIRED, OPS(OT_OP_SLICE)},
    {"padding", IR_AK_PADDING, AT(PADDING, padding), .flags = IR_AF_REQUIRED, OPS(OT_OP_PAD)},
    /* gather dimension numbers */
    {"offset_dims", IR_AK_DIMS, IN_N(GATHER, ot_gather_dims, offset_dims, noffset),
     .what = "offset_dims", OPS(OT_OP_GATHER)},
    {"collapsed_slice_dims", IR_AK_DIMS,
     IN_N(GATHER, ot_gather_dims, collapsed_slice_dims, ncollapsed), .what = "collapsed_slice_dims",
     OPS(OT_OP_GATHER)},
    {"start_index_map", IR_AK_DIMS, IN_N(GATHER, ot_gather_dims, start_index_map, nstart_index_map),
     .what = "start_index_map", OPS(OT_OP_GATHER)},
    {"operand_batching_dims", IR_AK_DIMS,
     IN_N(GATHER, ot_gather_dims, operand_batching_dims, nbatching), .print = IR_AP_NONZERO,
     .what = "operand_batching_dims", OPS(OT_OP_GATHER)},
    {"start_indices_batching_dims", IR_AK_DIMS,
     IN_N(GATHER, ot_gather_dims, start_indices_batching_dims, nbatching), .print = IR_AP_NONZERO,
     .flags = IR_AF_COUNT_SHARED, .what = "start_indices_batching_dims", OPS(OT_OP_GATHER)},
    {"index_vector_dim", IR_AK_INT, IN(GATHER, ot_gather_dims, index_vector_dim), ANY,
     OPS(OT_OP_GATHER)},
    {"slice_sizes", IR_AK_DIMS, IN_N(GATHER, ot_gather_dims, slice_sizes, nslice_sizes),
     .what = "slice_sizes", OPS(OT_OP_GATHER)},
    {"indices_are_sorted", IR_AK_BOOL, IN(GATHER, ot_gather_dims, indices_are_sorted),
     .print = IR_AP_NONZERO, OPS(OT_OP_GATHER)},
    /* scatter dimension numbers */
    {"update_window_dims", IR_AK_DIMS,
     IN_N(SCATTER, ot_scatter_dims, update_window_dims, nupdate_window),
     .what = "update_window_dims", OPS(OT_OP_SCATTER)},
    {"inserted_window_dims", IR_AK_DIMS,
     IN_N(SCATTER, ot_scatter_dims, inserted_window_dims, ninserted),
     .what = "inserted_window_dims", OPS(OT_OP_SCATTER)},
    {"scatter_dims_to_operand_dims", IR_AK_DIMS,
     IN_N(SCATTER, ot_scatter_dims, scatter_dims_to_operand_dims, nscatter_to_operand),
     .what = "scatter_dims_to_operand_dims", OPS(OT_OP_SCATTER)},
    {"input_batching_dims", IR_AK_DIMS,
     IN_N(SCATTER, ot_scatter_dims, input_batching_dims, nbatching), .print = IR_AP_NONZERO,
     .what = "input_batching_dims", OPS(OT_OP_SCATTER)},
    {"scatter_indices_batching_dims", IR_AK_DIMS,
     IN_N(SCATTER, ot_scatter_dims, scatter_indices_batching_dims, nbatching),
     .print = IR_AP_NONZERO, .flags = IR_AF_COUNT_SHARED, .what = "scatter_indices_batching_dims",
     OPS(OT_OP_SCATTER)},
    {"index_vector_dim", IR_AK_INT, IN(SCATTER, ot_scatter_dims, index_vector_dim), ANY,
     OPS(OT_OP_SCATTER)},
    {"indices_are_sorted", IR_AK_BOOL, IN(SCATTER, ot_scatter_dims, indices_are_sorted),
     .print = IR_AP_NONZERO, OPS(OT_OP_SCATTER)},
    {"unique_indices", IR_AK_BOOL, IN(SCATTER, ot_scatter_dims, unique_indices),
     .print = IR_AP_NONZERO, OPS(OT_OP_SCATTER)},
    {"window", IR_AK_WINDOW, AT(WINDOW, window), .flags = IR_AF_REQUIRED,
     OPS(OT_OP_REDUCE_WINDOW, OT_OP_SELECT_AND_SCATTER)},
    {"window", IR_AK_WINDOW, AT(WINDOW, window), .print = IR_AP_NONZERO, OPS(OT_OP_CONVOLUTION)},
    {"k", IR_AK_INT, AT(INDEX, index), ANY, OPS(OT_OP_TOPK)},
    {"largest", IR_AK_BOOL, AT(LARGEST, largest), .def = 1, OPS(OT_OP_TOPK)},
    {"is_stable", IR_AK_BOOL, AT(IS_STABLE, is_stable), .print = IR_AP_NONZERO,
     OPS(OT_OP_SORT, OT_OP_TOPK)},
    /* dot dimension numbers */
    {"lhs_batch_dims", IR_AK_DIMS_PAIR, IN_N(DOT, ot_dot_dims, lhs_batch, nbatch),
     .print = IR_AP_NONZERO, .what = "batch", OPS(OT_OP_DOT)},
    {"lhs_contracting_dims", IR_AK_DIMS_PAIR, IN_N(DOT, ot_dot_dims, lhs_contract, ncontract),
     .what = "contracting", OPS(OT_OP_DOT)},
    {"rhs_batch_dims", IR_AK_DIMS_PAIR, IN_N(DOT, ot_dot_dims, rhs_batch, nbatch),
     .print = IR_AP_NONZERO, .what = "batch", OPS(OT_OP_DOT)},
    {"rhs_contracting_dims", IR_AK_DIMS_PAIR, IN_N(DOT, ot_dot_dims, rhs_contract, ncontract),
     .what = "contracting", OPS(OT_OP_DOT)},
    {"dim_labels", IR_AK_DIM_LABELS, AT(CONV, conv), .flags = IR_AF_REQUIRED,
     OPS(OT_OP_CONVOLUTION)},
    {"feature_group_count", IR_AK_INT, AT(FEATURE_GROUP_COUNT, feature_group_count), ANY,
     .print = IR_AP_ABOVE_ONE, OPS(OT_OP_CONVOLUTION)},
    {"batch_group_count", IR_AK_INT, AT(BATCH_GROUP_COUNT, batch_group_count), ANY,
     .print = IR_AP_ABOVE_ONE, OPS(OT_OP_CONVOLUTION)},
    /* fft: its type in index, fft_length in dims (no new fields: the executable format stays) */
    {"fft_type", IR_AK_ENUM, AT(INDEX, index), .flags = IR_AF_REQUIRED, OPS(OT_OP_FFT),
     ENUM(fft_type_names, 0, "an fft type (FFT IFFT RFFT IRFFT)",
          "expected an fft type (FFT IFFT RFFT IRFFT), got '%.*s'")},
    {"fft_length", IR_AK_DIMS, AT_N(DIMS, dims, ndims), .flags = IR_AF_REQUIRED,
     .what = "fft_length", OPS(OT_OP_FFT)},
    {"kind", IR_AK_ENUM, AT(FUSION_KIND, fusion_kind), OPS(OT_OP_FUSION),
     ENUM(fusion_kinds, 0, "a fusion kind",
          "expected a fusion kind (kLoop kInput kOutput kCustom), got '%.*s'")},
    /* collectives */
    {"channel_id", IR_AK_INT, AT(CHANNEL_ID, channel_id), .lo = 0, .hi = INT64_MAX,
     .print = IR_AP_NONZERO, OPS(COLLECTIVES, OT_OP_COLLECTIVE_PERMUTE)},
    {"replica_groups", IR_AK_GROUPS, AT(GROUPS, groups), OPS(COLLECTIVES)},
    {"constrain_layout", IR_AK_BOOL, AT(CONSTRAIN_LAYOUT, constrain_layout), .print = IR_AP_NONZERO,
     OPS(COLLECTIVES)},
    {"dimensions", IR_AK_DIM, AT(INDEX, index), .print = IR_AP_NONNEG,
     OPS(OT_OP_ALL_GATHER, OT_OP_REDUCE_SCATTER)},
    /* all-to-all without dimensions= is the tuple form: no split dimension */
    {"dimensions", IR_AK_DIM, AT(INDEX, index), .lo = -1, .def = -1, .print = IR_AP_NONNEG,
     OPS(OT_OP_ALL_TO_ALL)},
    {"use_global_device_ids", IR_AK_BOOL, AT(USE_GLOBAL_DEVICE_IDS, use_global_device_ids),
     .print = IR_AP_NONZERO, OPS(OT_OP_ALL_REDUCE, OT_OP_ALL_GATHER, OT_OP_REDUCE_SCATTER)},
    {"source_target_pairs", IR_AK_PAIRS, AT_N(PAIRS, pairs, npairs), OPS(OT_OP_COLLECTIVE_PERMUTE)},
    {"algorithm", IR_AK_ENUM, AT(RNG_ALGORITHM, rng_algorithm), .flags = IR_AF_UNKNOWN_ELSEWHERE,
     OPS(OT_OP_RNG_BIT_GENERATOR),
     ENUM(rng_names, 0, "an rng algorithm",
          "expected rng_default, rng_three_fry or rng_philox, got '%.*s'")},
    /* custom-call */
    {"custom_call_target", IR_AK_STRING, AT(CUSTOM_CALL_TARGET, custom_call_target),
     .flags = IR_AF_REQUIRED, OPS(OT_OP_CUSTOM_CALL)},
    {"custom_call_has_side_effect", IR_AK_BOOL, AT(HAS_SIDE_EFFECT, has_side_effect),
     .print = IR_AP_NONZERO, OPS(OT_OP_CUSTOM_CALL)},
    {"api_version", IR_AK_ENUM, AT(API_VERSION, api_version), .print = IR_AP_NONZERO,
     OPS(OT_OP_CUSTOM_CALL),
     ENUM(api_versions, 0, "an API_VERSION_* name", "unknown api_version '%.*s'")},
    {"operand_precision", IR_AK_PRECISION, AT_N(PRECISION, precision, nprecision),
     .print = IR_AP_NONZERO, OPS(OT_OP_DOT, OT_OP_CONVOLUTION),
     ENUM(precision_names, 0, "a precision (default, high, highest)",
          "expected a precision (default, high, highest), got '%.*s'")},
    /* called computations */
    {"condition", IR_AK_COMP, CALLED(0), OPS(OT_OP_WHILE)},
    {"body", IR_AK_COMP, CALLED(1), OPS(OT_OP_WHILE)},
    {"select", IR_AK_COMP, CALLED(0), OPS(OT_OP_SELECT_AND_SCATTER)},
    {"scatter", IR_AK_COMP, CALLED(1), OPS(OT_OP_SELECT_AND_SCATTER)},
    {"true_computation", IR_AK_COMP, CALLED(0), .print = IR_AP_PRED_FORM, OPS(OT_OP_CONDITIONAL)},
    {"false_computation", IR_AK_COMP, CALLED(1), .print = IR_AP_PRED_FORM, OPS(OT_OP_CONDITIONAL)},
    {"branch_computations", IR_AK_COMP_LIST, CALLED(0), .print = IR_AP_INDEX_FORM,
     OPS(OT_OP_CONDITIONAL)},
    {"calls", IR_AK_COMP, CALLED(0), OPS(OT_OP_FUSION)},
    {"calls", IR_AK_COMP, CALLED(0), .print = IR_AP_NEVER, OPS(OT_OP_CALL)},
    {"called_computations", IR_AK_COMP_LIST, CALLED(0), .print = IR_AP_NONZERO,
     OPS(OT_OP_CUSTOM_CALL)},
    {"to_apply", IR_AK_COMP, CALLED(0), .print = IR_AP_ONE_CALLED, .flags = IR_AF_PRINT_FALLBACK,
     OPS(OT_OP_REDUCE, OT_OP_REDUCE_WINDOW, OT_OP_SCATTER, OT_OP_MAP, OT_OP_CALL, OT_OP_SORT,
         OT_OP_ALL_REDUCE, OT_OP_REDUCE_SCATTER)},
    /* every op */
    {"backend_config", IR_AK_CONFIG, AT(BACKEND_CONFIG, backend_config), .print = IR_AP_NONZERO,
     .flags = IR_AF_ALL_OPS},
    {NULL, IR_AK_RAW_ALL, IR_T_RAW, .flags = IR_AF_ALL_OPS, .count_off = -1},
    {"metadata", IR_AK_METADATA, IR_T_METADATA, .flags = IR_AF_ALL_OPS, .count_off = -1},
    /* kept verbatim: no meaning for optitpu, printed back as read */
    RAW("sharding"),
    RAW("frontend_attributes"),
    RAW("parameter_replication"),
    RAW("control-predecessors"),
    RAW("statistics"),
    RAW("origin"),
    RAW("schedule"),
    RAW("custom_call_schedule"),
    RAW("operand_layout_constraints"),
    RAW("output_to_operand_aliasing"),
    RAW("result_accuracy"),
    RAW("execution_thread"),
    RAW("async_execution_thread"),
    RAW("is_host_transfer"),
    RAW("inferred_dimension"),
    RAW("replica_group_list"), /* never seen from XLA; kept for symmetry */
    {"algorithm", IR_AK_RAW, IR_T_RAW, IR_AP_NEVER, IR_AF_UNKNOWN_ELSEWHERE, .count_off = -1,
     OPS(OT_OP_DOT)},
    /* written in the operand position: parameter(N), constant(value) */
    {NULL, IR_AK_OPERAND, AT(INDEX, index), .print = IR_AP_NEVER, OPS(OT_OP_PARAMETER)},
    {NULL, IR_AK_OPERAND, AT(LITERAL, literal), .print = IR_AP_NEVER, OPS(OT_OP_CONSTANT)},
};
const int ir_attr_nrows = (int)(sizeof ir_attr_rows / sizeof ir_attr_rows[0]);
static_assert(sizeof ir_attr_rows / sizeof ir_attr_rows[0] < 256, "row indexes are uint8_t");

/* ---- per-opcode index ---- */

static uint8_t op_rows[OT_OP_COUNT][IR_ATTR_OP_MAX];
static uint8_t op_nrows[OT_OP_COUNT];
static uint8_t row_len[sizeof ir_attr_rows / sizeof ir_attr_rows[0]];
static _Atomic int index_ready;

static bool ops_has(const ot_opcode *l, ot_opcode op) {
    for (; l && *l != OT_OP_INVALID; l++)
        if (*l == op) return true;
    return false;
}

static void index_init(void) {
    uint8_t rows[OT_OP_COUNT][IR_ATTR_OP_MAX], nrows[OT_OP_COUNT];
    bool has_called[OT_OP_COUNT] = {0};
    for (int k = 0; k < ir_attr_nrows; k++)
        for (const ot_opcode *l = ir_attr_rows[k].ops; l && *l != OT_OP_INVALID; l++)
            if (ir_attr_rows[k].field == IR_T_CALLED) has_called[*l] = true;
    memset(rows, 0, sizeof rows);
    memset(nrows, 0, sizeof nrows);
    for (int op = 0; op < OT_OP_COUNT; op++) {
        for (int k = 0; k < ir_attr_nrows; k++) {
            const ir_attr_row *r = &ir_attr_rows[k];
            bool on = (r->flags & IR_AF_ALL_OPS) || ops_has(r->ops, (ot_opcode)op) ||
                      ((r->flags & IR_AF_PRINT_FALLBACK) && !has_called[op]);
            if (!on) continue;
            /* the table is static: tests/test_ir.c checks every op fits */
            if (nrows[op] == IR_ATTR_OP_MAX) abort();
            rows[op][nrows[op]++] = (uint8_t)k;
        }
    }
    for (int k = 0; k < ir_attr_nrows; k++)
        row_len[k] = (uint8_t)(ir_attr_rows[k].name ? strlen(ir_attr_rows[k].name) : 0);
    memcpy(op_rows, rows, sizeof rows);
    memcpy(op_nrows, nrows, sizeof nrows);
    index_ready = 1;
}

const uint8_t *ir_attr_op_rows(ot_opcode op, int *n) {
    if (!index_ready) index_init(); /* idempotent: concurrent first calls write identical bytes */
    if ((int)op < 0 || op >= OT_OP_COUNT) {
        *n = 0;
        return NULL;
    }
    *n = op_nrows[op];
    return op_rows[op];
}

const ir_attr_row *ir_attr_lookup(ot_opcode op, const char *s, size_t n, int *pos) {
    int nr;
    const uint8_t *rows = ir_attr_op_rows(op, &nr);
    for (int k = 0; k < nr; k++) {
        const ir_attr_row *r = &ir_attr_rows[rows[k]];
        if (row_len[rows[k]] != n || !r->name || memcmp(r->name, s, n)) continue;
        /* a row listed only to be printed for this op is not read for it */
        if ((r->flags & IR_AF_PRINT_FALLBACK) && !ops_has(r->ops, op)) continue;
        *pos = k;
        return r;
    }
    return NULL;
}

const ir_attr_row *ir_attr_lookup_any(const char *s, size_t n) {
    if (!index_ready) index_init();
    for (int k = 0; k < ir_attr_nrows; k++)
        if (ir_attr_rows[k].name && row_len[k] == n && !memcmp(ir_attr_rows[k].name, s, n))
            return &ir_attr_rows[k];
    return NULL;
}

/* ---- values ---- */

const void *ir_attr_row_base(const ir_attr_row *r, const ot_attrs *a) {
    switch (r->field) {
    case IR_F_DOT: return a->dot;
    case IR_F_GATHER: return a->gather;
    case IR_F_SCATTER: return a->scatter;
    default: return a;
    }
}

const char *ir_attr_enum_name(const ir_attr_row *r, int64_t v) {
    return v >= 0 && v < r->nnames ? r->names[v] : "<invalid>";
}

static bool is_pred_form(const ot_instr *i) {
    return i->noperands && i->operands[0]->shape.kind == OT_IR_ARRAY &&
           i->operands[0]->shape.array.dtype == OT_PRED && i->ncalled == 2;
}

/* Whether the value row r reads is "set": not 0/false/NULL (see IR_AP_NONZERO). */
static bool nonzero(const ir_attr_row *r, const ot_instr *i) {
    const ot_attrs *a = i->attrs;
    const char *base = ir_attr_row_base(r, a);
    if (!base) return false;
    switch (r->kind) {
    case IR_AK_DIMS:
    case IR_AK_DIMS_PAIR: return ir_attr_load_int(base + r->count_off, sizeof(int)) != 0;
    case IR_AK_WINDOW: return a->window && a->window->rank;
    case IR_AK_PRECISION: return a->nprecision == 2;
    case IR_AK_COMP_LIST: return i->ncalled != 0;
    case IR_AK_STRING:
    case IR_AK_CONFIG: {
        const char *p;
        memcpy(&p, base + r->off, sizeof p);
        return p != NULL;
    }
    default: return ir_attr_load_int(base + r->off, r->size) != 0;
    }
}

bool ir_attr_printed(const ir_attr_row *r, const ot_instr *i) {
    switch (r->print) {
    case IR_AP_ALWAYS: return true;
    case IR_AP_NONZERO: return nonzero(r, i);
    case IR_AP_ABOVE_ONE: return ir_attr_load_int((const char *)i->attrs + r->off, r->size) > 1;
    case IR_AP_NONNEG: return ir_attr_load_int((const char *)i->attrs + r->off, r->size) >= 0;
    case IR_AP_ONE_CALLED: return i->ncalled == 1;
    case IR_AP_PRED_FORM: return is_pred_form(i);
    case IR_AP_INDEX_FORM: return !is_pred_form(i);
    default: return false;
    }
}
