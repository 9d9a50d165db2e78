/*
 * optitpu IR: a graph IR with XLA HLO semantics — module → computations → instructions — with a C
 * builder (sticky error), shape inference by XLA's rules, a verifier, edits that keep
 * producer/consumer links exact, HLO text in and out, and Graphviz DOT export.
 *
 * Usage:
 *
 *     ot_module *m = ot_module_new("axpy");                 // NULL only when out of memory
 *     ot_computation *c = ot_module_add_computation(m, "main");
 *     ot_shape v; ot_shape_make(&v, OT_F32, 1, (int64_t[]){1024});
 *     ot_instr *a = ot_build_parameter(c, 0, v, "a");
 *     ot_instr *x = ot_build_parameter(c, 1, v, "x");
 *     ot_instr *y = ot_build_parameter(c, 2, v, "y");
 *     ot_instr *r = ot_build_binary(c, OT_OP_ADD, ot_build_binary(c, OT_OP_MULTIPLY, a, x), y);
 *     ot_computation_set_root(c, r);                         // NULL-safe like every builder call
 *     ot_module_set_entry(m, c);
 *     if (ot_module_finalize(m) != OT_OK)                    // first builder error, or verifier
 *         fprintf(stderr, "%s\n", ot_last_error());
 *     char *text = ot_hlo_print(m, NULL);                    // HLO text; free with ot_free
 *     ot_module_free(m);
 *
 * Ownership: a module owns everything reachable from it (computations, instructions, names,
 * shapes, attributes, literal data) in its arena; ot_module_free releases all of it. Pointers into
 * a module stay valid until the module is freed, except a removed instruction's: it is unlinked
 * and must not be used, and once the pass that removed it has ended (the pass manager, between
 * passes; the fusion pass, between fusions) a new instruction may be built in its storage.
 *
 * Data: ot_computation and ot_instr are open structs so passes can walk them fast. Treat every
 * field as read-only; change the graph only through the functions below, which keep operand and
 * user links, names and roots consistent.
 *
 * Errors: builder calls (ot_build_*) never need per-call checks. The first failure is recorded on
 * the module (op, operand, dimension and reason) and returned by ot_module_status() /
 * ot_module_finalize(); after it every builder call returns NULL and does nothing. A builder call
 * given a NULL operand returns NULL. Edit and query functions return ot_status directly.
 *
 * Thread safety: a module may be read from many threads at once, except that traversals
 * (ot_computation_post_order, ot_module_verify, ot_hlo_print, the clone functions) keep a visit
 * stamp in each instruction, so run one of those at a time per module. Any change needs
 * exclusive access. Different modules are independent.
 */
#ifndef OPTITPU_IR_H
#define OPTITPU_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Opcodes (HLO names)
 * ------------------------------------------------------------------------------------------- */

#define OT_OPCODE_LIST(X)                                                                          \
    X(PARAMETER, "parameter")                                                                      \
    X(CONSTANT, "constant")                                                                        \
    X(IOTA, "iota")                                                                                \
    /* unary elementwise */                                                                        \
    X(ABS, "abs")                                                                                  \
    X(NEGATE, "negate")                                                                            \
    X(SIGN, "sign")                                                                                \
    X(FLOOR, "floor")                                                                              \
    X(CEIL, "ceil")                                                                                \
    X(ROUND_NEAREST_AFZ, "round-nearest-afz")                                                      \
    X(ROUND_NEAREST_EVEN, "round-nearest-even")                                                    \
    X(EXP, "exponential")                                                                          \
    X(EXPM1, "exponential-minus-one")                                                              \
    X(LOG, "log")                                                                                  \
    X(LOG1P, "log-plus-one")                                                                       \
    X(SQRT, "sqrt")                                                                                \
    X(RSQRT, "rsqrt")                                                                              \
    X(CBRT, "cbrt")                                                                                \
    X(TANH, "tanh")                                                                                \
    X(LOGISTIC, "logistic")                                                                        \
    X(SIN, "sine")                                                                                 \
    X(COS, "cosine")                                                                               \
    X(TAN, "tan")                                                                                  \
    X(ERF, "erf")                                                                                  \
    X(IS_FINITE, "is-finite")                                                                      \
    X(NOT, "not")                                                                                  \
    X(POPCNT, "popcnt")                                                                            \
    X(CLZ, "count-leading-zeros")                                                                  \
    X(COPY, "copy")                                                                                \
    /* binary elementwise */                                                                       \
    X(ADD, "add")                                                                                  \
    X(SUBTRACT, "subtract")                                                                        \
    X(MULTIPLY, "multiply")                                                                        \
    X(DIVIDE, "divide")                                                                            \
    X(REMAINDER, "remainder")                                                                      \
    X(POWER, "power")                                                                              \
    X(MAXIMUM, "maximum")                                                                          \
    X(MINIMUM, "minimum")                                                                          \
    X(ATAN2, "atan2")                                                                              \
    X(AND, "and")                                                                                  \
    X(OR, "or")                                                                                    \
    X(XOR, "xor")                                                                                  \
    X(SHIFT_LEFT, "shift-left")                                                                    \
    X(SHIFT_RIGHT_ARITHMETIC, "shift-right-arithmetic")                                            \
    X(SHIFT_RIGHT_LOGICAL, "shift-right-logical")                                                  \
    X(COMPARE, "compare")                                                                          \
    /* other elementwise */                                                                        \
    X(SELECT, "select")                                                                            \
    X(CLAMP, "clamp")                                                                              \
    X(CONVERT, "convert")                                                                          \
    X(BITCAST_CONVERT, "bitcast-convert")                                                          \
    X(REDUCE_PRECISION, "reduce-precision")                                                        \
    /* shape */                                                                                    \
    X(BROADCAST, "broadcast")                                                                      \
    X(RESHAPE, "reshape")                                                                          \
    X(BITCAST, "bitcast")                                                                          \
    X(TRANSPOSE, "transpose")                                                                      \
    X(SLICE, "slice")                                                                              \
    X(DYNAMIC_SLICE, "dynamic-slice")                                                              \
    X(DYNAMIC_UPDATE_SLICE, "dynamic-update-slice")                                                \
    X(CONCATENATE, "concatenate")                                                                  \
    X(PAD, "pad")                                                                                  \
    X(REVERSE, "reverse")                                                                          \
    X(GATHER, "gather")                                                                            \
    X(SCATTER, "scatter")                                                                          \
    /* reductions and windows */                                                                   \
    X(REDUCE, "reduce")                                                                            \
    X(REDUCE_WINDOW, "reduce-window")                                                              \
    X(SELECT_AND_SCATTER, "select-and-scatter")                                                    \
    X(SORT, "sort")                                                                                \
    X(TOPK, "topk")                                                                                \
    X(MAP, "map")                                                                                  \
    /* linear algebra */                                                                           \
    X(DOT, "dot")                                                                                  \
    X(CONVOLUTION, "convolution")                                                                  \
    /* structure */                                                                                \
    X(TUPLE, "tuple")                                                                              \
    X(GET_TUPLE_ELEMENT, "get-tuple-element")                                                      \
    X(CALL, "call")                                                                                \
    X(WHILE, "while")                                                                              \
    X(CONDITIONAL, "conditional")                                                                  \
    X(OPT_BARRIER, "opt-barrier")                                                                  \
    X(FUSION, "fusion")                                                                            \
    /* collectives */                                                                              \
    X(ALL_REDUCE, "all-reduce")                                                                    \
    X(ALL_GATHER, "all-gather")                                                                    \
    X(REDUCE_SCATTER, "reduce-scatter")                                                            \
    X(ALL_TO_ALL, "all-to-all")                                                                    \
    X(COLLECTIVE_PERMUTE, "collective-permute")                                                    \
    X(REPLICA_ID, "replica-id")                                                                    \
    X(PARTITION_ID, "partition-id")                                                                \
    /* random numbers and escapes */                                                               \
    X(RNG_BIT_GENERATOR, "rng-bit-generator")                                                      \
    X(CUSTOM_CALL, "custom-call")                                                                  \
    /* complex numbers and the Fourier transform (appended: opcode numbers are serialized) */      \
    X(COMPLEX, "complex")                                                                          \
    X(REAL, "real")                                                                                \
    X(IMAG, "imag")                                                                                \
    X(FFT, "fft")

typedef enum ot_opcode {
#define OT_OPCODE_ENUM_(e, s) OT_OP_##e,
    OT_OPCODE_LIST(OT_OPCODE_ENUM_)
#undef OT_OPCODE_ENUM_
        OT_OP_COUNT,
    OT_OP_INVALID = -1,
} ot_opcode;

OT_API const char *ot_opcode_name(ot_opcode op); /* "add"; "<invalid>" outside the enum */
/* OT_OP_INVALID when the name is not one of ours (see ot_opcode_is_known_hlo). */
OT_API ot_opcode ot_opcode_from_name(const char *name, size_t len);
/* True for HLO opcodes XLA has that this IR does not implement (fft, infeed, ...): the parser
 * reports those as UNIMPLEMENTED, anything else as an unknown opcode. */
OT_API bool ot_opcode_is_known_hlo(const char *name, size_t len);

/* Op classes. */
OT_API bool ot_opcode_is_elementwise_unary(ot_opcode op);  /* abs .. copy */
OT_API bool ot_opcode_is_elementwise_binary(ot_opcode op); /* add .. compare */
/* Elementwise in XLA's sense: unary, binary, select, clamp, convert, bitcast-convert,
 * reduce-precision, map. complex, real and imag are elementwise too but not counted here: they
 * run as reference kernels only (no fusion, no native code). */
OT_API bool ot_opcode_is_elementwise(ot_opcode op);
OT_API bool ot_opcode_is_commutative(ot_opcode op); /* add multiply maximum minimum and or xor */
/* Collectives, rng-bit-generator and custom-call (a custom-call is side-effecting only when its
 * has_side_effect attribute is set; see ot_instr_has_side_effect). */
OT_API bool ot_opcode_is_collective(ot_opcode op);

/* ---------------------------------------------------------------------------------------------
 * Shapes: an array (ot_shape from core), a tuple of shapes, or a token
 * ------------------------------------------------------------------------------------------- */

typedef enum ot_ir_shape_kind {
    OT_IR_ARRAY = 0,
    OT_IR_TUPLE,
    OT_IR_TOKEN,
} ot_ir_shape_kind;

typedef struct ot_ir_shape {
    ot_ir_shape_kind kind;
    int ntuple;                      /* kind == OT_IR_TUPLE: element count (may be 0) */
    ot_shape array;                  /* kind == OT_IR_ARRAY */
    const struct ot_ir_shape *tuple; /* kind == OT_IR_TUPLE: ntuple elements (module arena) */
    /* Layout as written in HLO text (minor_to_major). Kept for printing only: values are always
     * row-major in optitpu, whatever layout a file states. */
    bool has_layout;
    int8_t minor_to_major[OT_MAX_RANK];
} ot_ir_shape;

OT_API ot_ir_shape ot_ir_shape_array(ot_shape s);
OT_API ot_ir_shape ot_ir_shape_scalar(ot_dtype t);
OT_API bool ot_ir_shape_is_array(const ot_ir_shape *s);
/* Structural equality of dtypes, dims and tuple structure; layouts are ignored. */
OT_API bool ot_ir_shape_equal(const ot_ir_shape *a, const ot_ir_shape *b);
/* HLO text: "f32[2,3]", "(f32[2], s32[])", "token[]" (no layouts). snprintf semantics. */
OT_API int ot_ir_shape_format(const ot_ir_shape *s, char *buf, size_t n);
/* Total bytes of all arrays in the shape (tuples summed, tokens 0). */
OT_API int64_t ot_ir_shape_nbytes(const ot_ir_shape *s);

/* ---------------------------------------------------------------------------------------------
 * Attributes (plain data; the meaning of every field is XLA's)
 * ------------------------------------------------------------------------------------------- */

typedef enum ot_cmp_dir {
    OT_CMP_EQ = 0,
    OT_CMP_NE,
    OT_CMP_LT,
    OT_CMP_LE,
    OT_CMP_GT,
    OT_CMP_GE,
    OT_CMP_DIR_COUNT,
} ot_cmp_dir;

/* Comparison type: DEFAULT means XLA's default for the operand dtype (FLOAT for floats, SIGNED
 * for signed and pred, UNSIGNED for unsigned). TOTALORDER orders floats as -NaN < -Inf < ... <
 * -0 < +0 < ... < +Inf < +NaN. */
typedef enum ot_cmp_type {
    OT_CMP_TYPE_DEFAULT = 0,
    OT_CMP_TYPE_FLOAT,
    OT_CMP_TYPE_TOTALORDER,
    OT_CMP_TYPE_SIGNED,
    OT_CMP_TYPE_UNSIGNED,
    OT_CMP_TYPE_COUNT,
} ot_cmp_type;

OT_API const char *ot_cmp_dir_name(ot_cmp_dir d);   /* "EQ" .. "GE" */
OT_API const char *ot_cmp_type_name(ot_cmp_type t); /* "DEFAULT", "FLOAT", "TOTALORDER", ... */
/* The effective comparison type for operands of dtype t (DEFAULT resolved). */
OT_API ot_cmp_type ot_cmp_type_resolve(ot_cmp_type t, ot_dtype operand);

typedef enum ot_precision {
    OT_PRECISION_DEFAULT = 0,
    OT_PRECISION_HIGH,
    OT_PRECISION_HIGHEST,
} ot_precision;

typedef enum ot_rng_algorithm {
    OT_RNG_DEFAULT = 0, /* XLA's default (the backend's choice; optitpu runs it as PHILOX) */
    OT_RNG_THREE_FRY,
    OT_RNG_PHILOX,
} ot_rng_algorithm;

typedef enum ot_fusion_kind {
    OT_FUSION_LOOP = 0, /* kLoop */
    OT_FUSION_INPUT,    /* kInput (a reduction at the root) */
    OT_FUSION_OUTPUT,   /* kOutput */
    OT_FUSION_CUSTOM,   /* kCustom */
} ot_fusion_kind;

/* slice: per dimension [start, limit) with stride >= 1. */
typedef struct ot_slice_dim {
    int64_t start, limit, stride;
} ot_slice_dim;

/* pad: per dimension; low and high may be negative (cropping); interior >= 0. */
typedef struct ot_pad_dim {
    int64_t lo, hi, interior;
} ot_pad_dim;

/* One spatial dimension of a window (reduce-window, select-and-scatter, convolution). */
typedef struct ot_window_dim {
    int64_t size, stride, pad_lo, pad_hi;
    int64_t window_dilation; /* rhs (kernel) dilation; 1 = none */
    int64_t base_dilation;   /* lhs (input) dilation; 1 = none */
    bool reversal;
} ot_window_dim;

typedef struct ot_window {
    int rank;
    ot_window_dim dims[OT_MAX_RANK];
} ot_window;

/* dot_general: result = batch dims, then lhs free dims, then rhs free dims (each in order). */
typedef struct ot_dot_dims {
    int nbatch, ncontract;
    int64_t lhs_batch[OT_MAX_RANK], rhs_batch[OT_MAX_RANK];
    int64_t lhs_contract[OT_MAX_RANK], rhs_contract[OT_MAX_RANK];
} ot_dot_dims;

/* Convolution dimension numbers (dim_labels like b01f_01io->b01f). */
typedef struct ot_conv_dims {
    int nspatial;
    int64_t input_batch, input_feature, input_spatial[OT_MAX_RANK];
    int64_t kernel_input_feature, kernel_output_feature, kernel_spatial[OT_MAX_RANK];
    int64_t output_batch, output_feature, output_spatial[OT_MAX_RANK];
} ot_conv_dims;

typedef struct ot_gather_dims {
    int noffset, ncollapsed, nstart_index_map, nbatching;
    int64_t offset_dims[OT_MAX_RANK];
    int64_t collapsed_slice_dims[OT_MAX_RANK];
    int64_t start_index_map[OT_MAX_RANK];
    int64_t operand_batching_dims[OT_MAX_RANK];
    int64_t start_indices_batching_dims[OT_MAX_RANK];
    int64_t index_vector_dim;
    int nslice_sizes;
    int64_t slice_sizes[OT_MAX_RANK];
    bool indices_are_sorted;
} ot_gather_dims;

typedef struct ot_scatter_dims {
    int nupdate_window, ninserted, nscatter_to_operand, nbatching;
    int64_t update_window_dims[OT_MAX_RANK];
    int64_t inserted_window_dims[OT_MAX_RANK];
    int64_t scatter_dims_to_operand_dims[OT_MAX_RANK];
    int64_t input_batching_dims[OT_MAX_RANK];
    int64_t scatter_indices_batching_dims[OT_MAX_RANK];
    int64_t index_vector_dim;
    bool indices_are_sorted, unique_indices;
} ot_scatter_dims;

/* replica_groups, always held expanded: group g is ids[offsets[g] .. offsets[g+1]). ngroups 0
 * means "all devices in one group" (XLA's empty replica_groups={}). When the text used the iota
 * form [G,S]<=[d0,d1,...]T(p0,p1,...), iota is set and the form is kept for printing. */
typedef struct ot_replica_groups {
    int64_t ngroups;
    const int64_t *offsets; /* ngroups + 1 entries */
    const int64_t *ids;
    bool iota;
    int64_t iota_groups, iota_group_size;
    int niota_dims;
    int64_t iota_dims[OT_MAX_RANK];
    int niota_perm; /* 0 = no transpose */
    int64_t iota_perm[OT_MAX_RANK];
} ot_replica_groups;

/* A constant's value: row-major elements of the instruction's dtype (pred: one byte 0/1; f16 and
 * bf16: raw 16-bit patterns). An elided constant (written {...}) has no data; it parses and
 * verifies, and executing it is an error. */
typedef struct ot_literal {
    bool elided;
    int64_t nbytes;
    const void *data;
} ot_literal;

/* Source metadata (metadata={op_type=... op_name=... source_file=... source_line=...}). */
typedef struct ot_metadata {
    const char *op_type, *op_name, *source_file; /* NULL when absent */
    int64_t source_line;                         /* 0 when absent */
} ot_metadata;

/* An attribute kept verbatim, with no meaning to optitpu (sharding, frontend_attributes, ...). */
typedef struct ot_raw_attr {
    const char *name, *value;
} ot_raw_attr;

/*
 * Every op's attributes in one struct. A builder reads only the fields its op uses (listed
 * here); the rest are ignored and stored zeroed. Pointers are deep-copied into the module arena.
 */
/* fft's fft_type: FFT and IFFT map complex to complex; RFFT real to complex (the last dim n
 * becomes n/2+1); IRFFT complex to real (the last dim becomes fft_length's last). IFFT and IRFFT
 * scale by 1/N, as XLA does. */
typedef enum ot_fft_type {
    OT_FFT_FFT = 0,
    OT_FFT_IFFT,
    OT_FFT_RFFT,
    OT_FFT_IRFFT,
    OT_FFT_TYPE_COUNT,
} ot_fft_type;

typedef struct ot_attrs {
    /* (Fields are ordered by size so the struct, which every instruction holds, has no holes.) */
    /* parameter: parameter number; get-tuple-element: index; iota: iota_dimension;
     * concatenate, sort, all-gather, reduce-scatter: the dimension; all-to-all: split dimension
     * (-1 = tuple form, no split); topk: k; fft: fft_type (ot_fft_type). */
    int64_t index;
    /* broadcast: operand dim i maps to result dim dims[i]; transpose: permutation; reverse and
     * reduce: dimensions; dynamic-slice: slice sizes; fft: fft_length (1 to 3 innermost dims). */
    const int64_t *dims;
    int ndims;
    ot_cmp_dir cmp_dir;               /* compare */
    ot_cmp_type cmp_type;             /* compare */
    int exponent_bits, mantissa_bits; /* reduce-precision */
    ot_rng_algorithm rng_algorithm;   /* rng-bit-generator */
    ot_fusion_kind fusion_kind;       /* fusion */
    int nprecision;                   /* dot, convolution: precision_config (0 or 2) */
    ot_precision precision[2];
    int npairs;                      /* collective-permute: source_target_pairs (see pairs) */
    int api_version;                 /* custom-call: 0 = unset, else API_VERSION_* number */
    bool is_stable;                  /* sort */
    bool largest;                    /* topk (default true) */
    bool has_side_effect;            /* custom-call */
    bool use_global_device_ids;      /* all-reduce, all-gather, reduce-scatter */
    bool constrain_layout;           /* collectives (kept) */
    int64_t channel_id;              /* collectives; 0 = none */
    int64_t feature_group_count;     /* convolution (0 is read as 1) */
    int64_t batch_group_count;       /* convolution (0 is read as 1) */
    const ot_slice_dim *slice;       /* slice: one per dimension */
    const ot_pad_dim *padding;       /* pad: one per dimension */
    const ot_window *window;         /* reduce-window, select-and-scatter, convolution */
    const ot_dot_dims *dot;          /* dot */
    const ot_conv_dims *conv;        /* convolution */
    const ot_gather_dims *gather;    /* gather */
    const ot_scatter_dims *scatter;  /* scatter */
    const ot_replica_groups *groups; /* all-reduce, all-gather, reduce-scatter, all-to-all */
    const int64_t *pairs;            /* 2 * npairs: source0, target0, source1, ... */
    const char *custom_call_target;  /* custom-call */
    const char *backend_config;      /* custom-call (and kept for any op); NULL = none */
    const ot_literal *literal;       /* constant */
} ot_attrs;

/* ---------------------------------------------------------------------------------------------
 * Module, computations, instructions
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_module ot_module;
typedef struct ot_computation ot_computation;
typedef struct ot_instr ot_instr;

struct ot_instr {
    /* (Fields are ordered so the struct has no holes, and so that what graph walks and edits
     * read — opcode, operands, users, links, pass scratch, then the shape — shares the first
     * cache lines: a module holds one per instruction, and passes over a large module wait on
     * memory, not arithmetic.) */
    int64_t id; /* unique within the module, assigned in creation order */
    ot_opcode opcode;
    int noperands;
    ot_instr **operands;
    ot_instr **users;
    int nusers; /* distinct users, each once however many operand slots it uses */
    int ncalled;
    /* Called computations: reduce, reduce-window, scatter, map, call, sort, all-reduce,
     * reduce-scatter, fusion: [0] = to_apply / comparator / calls; while: [0] = condition, [1] =
     * body; conditional: the branches (a pred conditional: [0] = true, [1] = false);
     * select-and-scatter: [0] = select, [1] = scatter; custom-call: called_computations. */
    ot_computation **called;
    ot_computation *parent;
    ot_instr *prev, *next; /* order within the computation (definitions before uses) */
    /* Scratch for passes; the IR never reads them. */
    void *user_data;
    int64_t mark;
    /* internal */
    uint64_t visit_; /* traversal stamp (post order, verifier) */
    int users_cap_;
    bool dead_;
    ot_ir_shape shape;           /* result shape */
    const char *name;            /* unique within its computation */
    const ot_attrs *attrs;       /* never NULL: a shared all-zero set when the op has none */
    const ot_metadata *metadata; /* NULL when none */
    const ot_raw_attr *raw;      /* attributes kept verbatim (nraw of them) */
    void *uidx_; /* user -> position index, built once an instruction has many users */
    int nraw;
};

struct ot_computation {
    int64_t id;
    const char *name;
    ot_module *module;
    ot_instr *first, *last; /* instruction list */
    int64_t ninstrs;
    ot_instr *root; /* NULL until set (the builder and parser default to the last instruction) */
    int nparams;
    ot_instr **params; /* by parameter number; an entry may be NULL while building */
    bool is_entry;
    /* internal */
    int params_cap_;
    void *names_;    /* name index */
    uint64_t edits_; /* changes to its instructions, their operands or its root */
    /* a fused computation's operation count and elementwise-read parameters, found by the
     * compiler and valid while an_edits_ == edits_ + 1 or, for one holding fusions (whose
     * changes its own count misses), while an_medits_ == the module's edit count + 1 */
    uint64_t an_edits_, an_medits_, an_linear_;
    int64_t an_flops_;
};

/* Module: NULL only when out of memory (message in ot_last_error). name NULL: "module". */
OT_API ot_module *ot_module_new(const char *name);
OT_API void ot_module_free(ot_module *m); /* NULL is a no-op */
OT_API const char *ot_module_name(const ot_module *m);
OT_API int ot_module_computation_count(const ot_module *m);
/* Computations in definition order (callees before callers for parsed modules). */
OT_API ot_computation *ot_module_computation(const ot_module *m, int i);
OT_API ot_computation *ot_module_find_computation(const ot_module *m, const char *name);
OT_API ot_computation *ot_module_entry(const ot_module *m);
OT_API int64_t ot_module_instr_count(const ot_module *m); /* live instructions, all computations */

/* Module attributes (HloModule line). */
typedef struct ot_io_alias {
    int noutput_index; /* tuple index path into the output */
    int64_t output_index[OT_MAX_RANK];
    int64_t param_number;
    int nparam_index;
    int64_t param_index[OT_MAX_RANK];
    bool must_alias; /* kind: may-alias (false) or must-alias (true) */
} ot_io_alias;

typedef struct ot_module_config {
    int64_t replica_count;  /* 1 by default */
    int64_t num_partitions; /* 1 by default */
    int nalias;             /* input_output_alias */
    const ot_io_alias *alias;
    const char *entry_computation_layout; /* kept verbatim ("{(f32[2]{0})->f32[2]{0}}"), or NULL */
    int nraw;                             /* other module attributes, verbatim */
    const ot_raw_attr *raw;
} ot_module_config;

OT_API const ot_module_config *ot_module_get_config(const ot_module *m);
OT_API void ot_module_set_replica_count(ot_module *m, int64_t n);
OT_API void ot_module_set_num_partitions(ot_module *m, int64_t n);
/* Marks parameter param_number (at tuple path param_index) as donated into output_index. */
OT_API ot_status ot_module_add_alias(ot_module *m, const ot_io_alias *alias);
/* Drops the input/output aliases and the entry computation layout: for a rewrite that changes the
 * entry's outputs (autodiff), after which neither describes the module. */
OT_API void ot_module_clear_entry_contract(ot_module *m);

/* Adds an empty computation; name NULL or taken: a unique name is made up. NULL after a sticky
 * error or when out of memory (recorded as the sticky error). */
OT_API ot_computation *ot_module_add_computation(ot_module *m, const char *name);
OT_API void ot_module_set_entry(ot_module *m, ot_computation *c); /* NULL-safe */

/* The sticky builder error: OT_OK, or the first failure (message set in ot_last_error). */
OT_API ot_status ot_module_status(const ot_module *m);
/* Reports the sticky error if any; else runs ot_module_verify. */
OT_API ot_status ot_module_finalize(ot_module *m);
/* Records err as the module's sticky error unless one is already recorded (for layers that build
 * on the builder); returns the sticky status. */
OT_API ot_status ot_module_record_error(ot_module *m, ot_status err, const char *msg);

OT_API ot_computation *ot_instr_computation(const ot_instr *i);
OT_API ot_instr *ot_computation_find_instr(const ot_computation *c, const char *name);
/* NULL-safe; r must belong to c. Records a sticky error otherwise. */
OT_API void ot_computation_set_root(ot_computation *c, ot_instr *r);
/* Collectives, rng-bit-generator, and custom-calls with has_side_effect: never merged, folded or
 * removed as dead by passes. */
OT_API bool ot_instr_has_side_effect(const ot_instr *i);
/* Attribute equality and hash over the fields i's opcode uses (deep: pointed-to data compared by
 * value); with opcode, operands and called computations this is what CSE needs. */
OT_API bool ot_instr_attrs_equal(const ot_instr *a, const ot_instr *b);
OT_API uint64_t ot_instr_attrs_hash(const ot_instr *i);
/* The dtype of an array-shaped instruction (OT_DTYPE_INVALID for tuples and tokens). */
OT_API ot_dtype ot_instr_dtype(const ot_instr *i);

/* ---------------------------------------------------------------------------------------------
 * Builder. Every function returns the new instruction, or NULL after a sticky error.
 * name NULL: "<opcode>.<id>". Shapes of results are inferred by XLA's rules.
 * ------------------------------------------------------------------------------------------- */

/*
 * The general form every other builder call uses. hint gives the result shape where the op
 * takes it from outside its operands (parameter, constant, iota, broadcast, reshape, bitcast,
 * convert's and bitcast-convert's dtype via hint->array.dtype, rng-bit-generator,
 * custom-call; dot's and convolution's result dtype); for any other op a non-NULL hint is
 * checked against the inferred shape (that is how the parser checks declared shapes). A hint
 * with kind OT_IR_ARRAY and array.rank == -1 gives only a dtype (convert, bitcast-convert, dot,
 * convolution). called: ncalled computations (see ot_instr.called).
 */
OT_API ot_instr *ot_build(ot_computation *c, ot_opcode op, ot_instr *const *operands, int noperands,
                          const ot_attrs *attrs, ot_computation *const *called, int ncalled,
                          const ot_ir_shape *hint, const char *name);

OT_API ot_instr *ot_build_parameter(ot_computation *c, int64_t number, ot_shape shape,
                                    const char *name);
OT_API ot_instr *ot_build_parameter_ir(ot_computation *c, int64_t number, const ot_ir_shape *shape,
                                       const char *name);
/* data: ot_shape_nbytes(&shape) bytes, row-major (copied). */
OT_API ot_instr *ot_build_constant(ot_computation *c, ot_shape shape, const void *data);
/* A scalar constant of dtype t holding v (converted as a C cast / f16, bf16 rounding; complex:
 * v + 0i). */
OT_API ot_instr *ot_build_constant_scalar(ot_computation *c, ot_dtype t, double v);
OT_API ot_instr *ot_build_iota(ot_computation *c, ot_shape shape, int64_t iota_dimension);
OT_API ot_instr *ot_build_unary(ot_computation *c, ot_opcode op, ot_instr *x);
OT_API ot_instr *ot_build_binary(ot_computation *c, ot_opcode op, ot_instr *a, ot_instr *b);
OT_API ot_instr *ot_build_compare(ot_computation *c, ot_instr *a, ot_instr *b, ot_cmp_dir dir,
                                  ot_cmp_type type);
OT_API ot_instr *ot_build_select(ot_computation *c, ot_instr *pred, ot_instr *on_true,
                                 ot_instr *on_false);
OT_API ot_instr *ot_build_clamp(ot_computation *c, ot_instr *lo, ot_instr *x, ot_instr *hi);
OT_API ot_instr *ot_build_convert(ot_computation *c, ot_instr *x, ot_dtype to);
OT_API ot_instr *ot_build_bitcast_convert(ot_computation *c, ot_instr *x, ot_dtype to);
OT_API ot_instr *ot_build_reduce_precision(ot_computation *c, ot_instr *x, int exponent_bits,
                                           int mantissa_bits);
/* dims[i]: the result dimension operand dimension i maps to (ndims == operand rank). */
OT_API ot_instr *ot_build_broadcast(ot_computation *c, ot_instr *x, ot_shape shape,
                                    const int64_t *dims, int ndims);
OT_API ot_instr *ot_build_reshape(ot_computation *c, ot_instr *x, ot_shape shape);
OT_API ot_instr *ot_build_transpose(ot_computation *c, ot_instr *x, const int64_t *perm, int n);
OT_API ot_instr *ot_build_slice(ot_computation *c, ot_instr *x, const int64_t *start,
                                const int64_t *limit, const int64_t *stride);
/* indices: rank scalar integer instructions. */
OT_API ot_instr *ot_build_dynamic_slice(ot_computation *c, ot_instr *x, ot_instr *const *indices,
                                        const int64_t *sizes);
OT_API ot_instr *ot_build_dynamic_update_slice(ot_computation *c, ot_instr *x, ot_instr *update,
                                               ot_instr *const *indices);
OT_API ot_instr *ot_build_concatenate(ot_computation *c, ot_instr *const *xs, int n,
                                      int64_t dimension);
OT_API ot_instr *ot_build_pad(ot_computation *c, ot_instr *x, ot_instr *value,
                              const ot_pad_dim *config);
OT_API ot_instr *ot_build_reverse(ot_computation *c, ot_instr *x, const int64_t *dims, int n);
OT_API ot_instr *ot_build_gather(ot_computation *c, ot_instr *x, ot_instr *indices,
                                 const ot_gather_dims *dn);
/* Variadic scatter: n operands, the indices, n updates. */
OT_API ot_instr *ot_build_scatter(ot_computation *c, ot_instr *const *operands, int n,
                                  ot_instr *indices, ot_instr *const *updates,
                                  const ot_scatter_dims *dn, ot_computation *update_fn);
OT_API ot_instr *ot_build_copy(ot_computation *c, ot_instr *x);
/* Variadic reduce: n inputs and n init values; the result is a tuple when n > 1. */
OT_API ot_instr *ot_build_reduce(ot_computation *c, ot_instr *const *inputs, ot_instr *const *inits,
                                 int n, const int64_t *dims, int ndims, ot_computation *reducer);
OT_API ot_instr *ot_build_reduce_window(ot_computation *c, ot_instr *const *inputs,
                                        ot_instr *const *inits, int n, const ot_window *w,
                                        ot_computation *reducer);
OT_API ot_instr *ot_build_select_and_scatter(ot_computation *c, ot_instr *operand, ot_instr *source,
                                             ot_instr *init, const ot_window *w,
                                             ot_computation *select, ot_computation *scatter);
OT_API ot_instr *ot_build_sort(ot_computation *c, ot_instr *const *xs, int n, int64_t dimension,
                               bool is_stable, ot_computation *comparator);
OT_API ot_instr *ot_build_dot(ot_computation *c, ot_instr *lhs, ot_instr *rhs,
                              const ot_dot_dims *dn, ot_precision lhs_prec, ot_precision rhs_prec);
OT_API ot_instr *ot_build_convolution(ot_computation *c, ot_instr *lhs, ot_instr *rhs,
                                      const ot_window *w, const ot_conv_dims *dn,
                                      int64_t feature_group_count, int64_t batch_group_count);
OT_API ot_instr *ot_build_tuple(ot_computation *c, ot_instr *const *xs, int n);
OT_API ot_instr *ot_build_get_tuple_element(ot_computation *c, ot_instr *t, int64_t index);
OT_API ot_instr *ot_build_call(ot_computation *c, ot_computation *callee, ot_instr *const *args,
                               int n);
OT_API ot_instr *ot_build_while(ot_computation *c, ot_computation *cond, ot_computation *body,
                                ot_instr *init);
/* branch_index: s32 scalar (n branches) or pred scalar (n == 2: [0] true, [1] false). */
OT_API ot_instr *ot_build_conditional(ot_computation *c, ot_instr *branch_index,
                                      ot_computation *const *branches, ot_instr *const *args,
                                      int n);
OT_API ot_instr *ot_build_opt_barrier(ot_computation *c, ot_instr *x);
/* Collectives. groups NULL = all devices in one group. */
OT_API ot_instr *ot_build_all_reduce(ot_computation *c, ot_instr *const *xs, int n,
                                     const ot_replica_groups *groups, int64_t channel_id,
                                     bool use_global_device_ids, ot_computation *reducer);
OT_API ot_instr *ot_build_all_gather(ot_computation *c, ot_instr *x, int64_t dimension,
                                     const ot_replica_groups *groups, int64_t channel_id,
                                     bool use_global_device_ids);
OT_API ot_instr *ot_build_reduce_scatter(ot_computation *c, ot_instr *x, int64_t dimension,
                                         const ot_replica_groups *groups, int64_t channel_id,
                                         bool use_global_device_ids, ot_computation *reducer);
OT_API ot_instr *ot_build_all_to_all(ot_computation *c, ot_instr *x, int64_t split_dimension,
                                     const ot_replica_groups *groups, int64_t channel_id);
/* pairs: 2 * npairs (source, target). */
OT_API ot_instr *ot_build_collective_permute(ot_computation *c, ot_instr *x, const int64_t *pairs,
                                             int npairs, int64_t channel_id);
OT_API ot_instr *ot_build_replica_id(ot_computation *c);
OT_API ot_instr *ot_build_partition_id(ot_computation *c);
/* state: u64[2] (three-fry) or u64[3] (philox) or any u64 vector XLA accepts; the result is
 * (new state, bits of `shape`). */
OT_API ot_instr *ot_build_rng_bit_generator(ot_computation *c, ot_instr *state, ot_shape shape,
                                            ot_rng_algorithm alg);
OT_API ot_instr *ot_build_custom_call(ot_computation *c, const char *target, ot_instr *const *args,
                                      int n, const ot_ir_shape *shape, const char *backend_config,
                                      bool has_side_effect);

/* Replica groups from an explicit list (group_sizes[g] ids each, concatenated in ids). The
 * result points into the module arena. NULL (sticky error) on invalid input. */
OT_API const ot_replica_groups *ot_replica_groups_make(ot_module *m, int64_t ngroups,
                                                       const int64_t *group_sizes,
                                                       const int64_t *ids);
/* The iota form [ngroups, group_size] <= [dims] T(perm) (nperm 0: no transpose), expanded. */
OT_API const ot_replica_groups *ot_replica_groups_iota(ot_module *m, int64_t ngroups,
                                                       int64_t group_size, const int64_t *dims,
                                                       int ndims, const int64_t *perm, int nperm);

/* XLA's collective group modes (CollectiveOpGroupMode): what the ids of an op's replica_groups
 * (and collective-permute's source_target_pairs) name, decided by whether the op has a
 * channel_id and, for the ops that carry it (all-reduce, all-gather, reduce-scatter),
 * use_global_device_ids:
 *   CROSS_REPLICA              no channel_id: replica ids; a group holds those replicas of this
 *                              device's partition (empty groups: every replica).
 *   CROSS_PARTITION            channel_id on all-to-all / collective-permute: partition ids; a
 *                              group holds those partitions of this device's replica (empty
 *                              groups: every partition).
 *   CROSS_REPLICA_AND_PARTITION channel_id, use_global_device_ids=false: replica ids; a group
 *                              holds every partition of each listed replica, replica-major
 *                              (empty groups: every device).
 *   FLATTENED_ID               channel_id, use_global_device_ids=true: global device ids
 *                              replica * num_partitions + partition (groups must be given).
 * use_global_device_ids without a channel_id is INVALID_ARGUMENT, as in XLA. */
typedef enum ot_collective_mode {
    OT_COLLECTIVE_CROSS_REPLICA,
    OT_COLLECTIVE_CROSS_PARTITION,
    OT_COLLECTIVE_CROSS_REPLICA_AND_PARTITION,
    OT_COLLECTIVE_FLATTENED_ID,
} ot_collective_mode;

OT_API ot_status ot_collective_mode_of(ot_opcode op, const ot_attrs *a, ot_collective_mode *out);
OT_API const char *ot_collective_mode_name(ot_collective_mode m);
/* Members per group of a collective in a module of `replicas` x `partitions` devices (XLA's
 * GetSubgroupSize): the first group's size, times partitions in CROSS_REPLICA_AND_PARTITION; with
 * empty groups the whole id space of the mode. */
OT_API int64_t ot_collective_group_size(ot_collective_mode m, const ot_replica_groups *g,
                                        int64_t replicas, int64_t partitions);

/* Shape inference alone: the result shape ot_build would give (tuples in m's arena). */
OT_API ot_status ot_infer_shape(ot_module *m, ot_opcode op, ot_instr *const *operands,
                                int noperands, const ot_attrs *attrs, ot_computation *const *called,
                                int ncalled, const ot_ir_shape *hint, ot_ir_shape *out);

/* ---------------------------------------------------------------------------------------------
 * Edits (links stay exact; each returns an error and changes nothing when it cannot apply)
 * ------------------------------------------------------------------------------------------- */

/* Every use of `from` becomes a use of `to` (same computation, equal shape); if `from` was the
 * root, `to` becomes the root. */
OT_API ot_status ot_instr_replace_all_uses(ot_instr *from, ot_instr *to);
/* Operand slot i of `user` becomes `to` (equal shape). */
OT_API ot_status ot_instr_replace_operand(ot_instr *user, int i, ot_instr *to);
/* Removes an instruction with no users that is not the root (parameters cannot be removed). */
OT_API ot_status ot_instr_remove(ot_instr *i);
/* Removes i and, recursively, operands left without users (never parameters or side-effecting
 * instructions). */
OT_API ot_status ot_instr_remove_with_dead_operands(ot_instr *i);
OT_API ot_status ot_instr_set_metadata(ot_instr *i, const ot_metadata *md);
/* A copy of src placed in dst (any computation of the same module) with new operands of the same
 * shapes; attributes and called computations are shared. name NULL: "<src name>.clone". */
OT_API ot_status ot_instr_clone(ot_computation *dst, const ot_instr *src,
                                ot_instr *const *new_operands, const char *name, ot_instr **out);
/* Deep copy of a computation into the same module (named "<name><suffix>", suffix NULL:
 * ".clone"); called computations are shared, not copied. */
OT_API ot_status ot_computation_clone(const ot_computation *src, const char *suffix,
                                      ot_computation **out);
/* Deep copy of a whole module. */
OT_API ot_status ot_module_clone(const ot_module *src, ot_module **out);
/* Removes a computation nobody calls (not the entry). Checks every instruction of the module:
 * to drop many computations at once use ot_module_remove_unreachable. */
OT_API ot_status ot_module_remove_computation(ot_module *m, ot_computation *c);
/* Removes every computation not reachable from the entry through called computations, in one
 * walk over the reachable instructions; *removed (may be NULL) gets how many went. */
OT_API ot_status ot_module_remove_unreachable(ot_module *m, int *removed);

/* Post order (operands before users, from the root and every instruction, deterministic): an
 * ot_malloc'd array of c->ninstrs pointers (free with ot_free). */
OT_API ot_status ot_computation_post_order(const ot_computation *c, ot_instr ***out, int64_t *n);
/* Computations in an order where callees come before callers; ot_malloc'd. */
OT_API ot_status ot_module_post_order(const ot_module *m, ot_computation ***out, int *n);

/* ---------------------------------------------------------------------------------------------
 * Verifier: links (operands ⇄ users, parents, list membership), acyclicity, parameters numbered
 * 0..n-1, roots, entry, every stored shape equal to the inferred one, and each op's invariants
 * (called computations' signatures: reducers, comparators, while condition/body, branches).
 * ------------------------------------------------------------------------------------------- */
OT_API ot_status ot_module_verify(const ot_module *m);
OT_API ot_status ot_computation_verify(const ot_computation *c);

/* ---------------------------------------------------------------------------------------------
 * HLO text
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_hlo_parse_options {
    const char *filename; /* used in error messages ("file:line:col: ..."); NULL: "<input>" */
    bool verify;          /* run ot_module_verify after parsing (default true) */
    int line_offset;      /* added to reported line numbers (for a piece of a larger file) */
} ot_hlo_parse_options;
OT_API ot_hlo_parse_options ot_hlo_parse_options_default(void);

/* Parses HLO text (XLA's dump form, JAX's as_text form and the lenient forms). On failure *out
 * is NULL, nothing is leaked, and the message starts with "file:line:col: " and says what was
 * expected. Unsupported HLO features are OT_ERR_UNIMPLEMENTED naming the feature. A UTF-8
 * byte-order mark (EF BB BF) at the start of a file's text (line_offset 0) is skipped (columns
 * count from after it); anywhere else it is an error. */
OT_API ot_status ot_hlo_parse(const char *text, size_t len, const ot_hlo_parse_options *opts,
                              ot_module **out);
OT_API ot_status ot_hlo_parse_file(const char *path, const ot_hlo_parse_options *opts,
                                   ot_module **out);

/* HLO text is read from a regular file of at most OT_HLO_MAX_TEXT bytes (larger ones are refused
 * from their size, before reading), or from a pipe, socket or terminal up to that many bytes;
 * "-" is standard input. Devices (/dev/zero, /dev/urandom: they never end) and directories are
 * refused, and so is a NUL byte read from a pipe (binary data, stopped at once). *text (ot_free)
 * is NUL-terminated; *len excludes the terminator. RESOURCE_EXHAUSTED past the limit,
 * INVALID_ARGUMENT for what is not text, IO when it cannot be read. ot_hlo_parse_file reads
 * through it. */
#define OT_HLO_MAX_TEXT ((size_t)1 << 30)
OT_API ot_status ot_hlo_read_file(const char *path, char **text, size_t *len);

/* Files in XLA's lit style hold several modules separated by lines "// -----". Returns the
 * length of the first piece of text[0..len) and sets *next to the offset where the next piece
 * starts (len when there is none); *lines to the number of lines the piece and its separator
 * span (for ot_hlo_parse_options.line_offset). */
OT_API size_t ot_hlo_split_next(const char *text, size_t len, size_t *next, int *lines);

typedef struct ot_hlo_print_options {
    bool operand_shapes; /* "add(f32[2] %a, ...)" as XLA's dumps do (default true) */
    bool percent;        /* "%" before names (default true) */
    bool metadata;       /* print metadata (default true) */
} ot_hlo_print_options;
OT_API ot_hlo_print_options ot_hlo_print_options_default(void);

/* Canonical HLO text of the module; ot_malloc'd, NUL-terminated (free with ot_free). NULL when
 * out of memory. opts NULL: defaults. */
OT_API char *ot_hlo_print(const ot_module *m, const ot_hlo_print_options *opts);
/* One instruction's line without the trailing newline, ot_malloc'd. */
OT_API char *ot_hlo_print_instr(const ot_instr *i, const ot_hlo_print_options *opts);

/* Graphviz DOT of one computation (c NULL: the entry), ot_malloc'd: a node per instruction
 * (name, opcode, shape), operand edges, and each fusion's fused computation as a cluster. */
OT_API char *ot_ir_to_dot(const ot_module *m, const ot_computation *c);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_IR_H */
