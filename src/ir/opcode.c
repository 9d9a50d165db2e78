/* Opcode names and classes, comparison names, IR shapes. */
#include "attr_schema.h"
#include "ir_internal.h"
#include "op_traits.h"

#include <assert.h>

static const char *const opcode_names[] = {
#define OT_OPCODE_NAME_(e, s) s,
    OT_OPCODE_LIST(OT_OPCODE_NAME_)
#undef OT_OPCODE_NAME_
};
static_assert(sizeof opcode_names / sizeof opcode_names[0] == OT_OP_COUNT,
              "opcode name table out of sync with ot_opcode");

const char *ot_opcode_name(ot_opcode op) {
    if ((int)op < 0 || op >= OT_OP_COUNT) return "<invalid>";
    return opcode_names[op];
}

/* A small perfect-enough hash: opcode names are looked up once per parsed instruction. */
#define OPC_TABLE 256
static int16_t opc_table[OPC_TABLE];
static uint8_t opc_len[OT_OP_COUNT];
static _Atomic int opc_ready;

static unsigned opc_hash(const char *s, size_t n) {
    return (unsigned)(ir_hash_bytes(s, n) & (OPC_TABLE - 1));
}

static void opc_init(void) {
    int16_t t[OPC_TABLE];
    for (int i = 0; i < OPC_TABLE; i++) t[i] = -1;
    for (int op = 0; op < OT_OP_COUNT; op++) {
        unsigned h = opc_hash(opcode_names[op], strlen(opcode_names[op]));
        while (t[h] >= 0) h = (h + 1) & (OPC_TABLE - 1);
        t[h] = (int16_t)op;
        opc_len[op] = (uint8_t)strlen(opcode_names[op]);
    }
    memcpy(opc_table, t, sizeof t);
    opc_ready = 1;
}

ot_opcode ot_opcode_from_name(const char *name, size_t len) {
    if (!opc_ready) opc_init(); /* idempotent: concurrent first calls write identical tables */
    unsigned h = opc_hash(name, len);
    for (;;) {
        int op = opc_table[h];
        if (op < 0) return OT_OP_INVALID;
        if (opc_len[op] == len && memcmp(opcode_names[op], name, len) == 0) return (ot_opcode)op;
        h = (h + 1) & (OPC_TABLE - 1);
    }
}

static const char *const known_hlo[] = {
    "add-dependency",
    "after-all",
    "all-gather-done",
    "all-gather-start",
    "all-reduce-done",
    "all-reduce-start",
    "async-done",
    "async-start",
    "async-update",
    "batch-norm-grad",
    "batch-norm-inference",
    "batch-norm-training",
    "cholesky",
    "collective-broadcast",
    "collective-permute-done",
    "collective-permute-start",
    "copy-done",
    "copy-start",
    "domain",
    "dynamic-reshape",
    "get-dimension-size",
    "infeed",
    "outfeed",
    "ragged-all-to-all",
    "recv",
    "recv-done",
    "rng",
    "rng-get-and-update-state",
    "send",
    "send-done",
    "set-dimension-size",
    "stochastic-convert",
    "triangular-solve",
    "scan",
    "ragged-dot",
    "composite",
};

bool ot_opcode_is_known_hlo(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof known_hlo / sizeof known_hlo[0]; i++)
        if (strlen(known_hlo[i]) == len && memcmp(known_hlo[i], name, len) == 0) return true;
    return false;
}

bool ot_opcode_is_elementwise_unary(ot_opcode op) {
    return op >= OT_OP_ABS && op <= OT_OP_COPY;
}

bool ot_opcode_is_elementwise_binary(ot_opcode op) {
    return op >= OT_OP_ADD && op <= OT_OP_COMPARE;
}

bool ot_opcode_is_elementwise(ot_opcode op) {
    return ot_opcode_is_elementwise_unary(op) || ot_opcode_is_elementwise_binary(op) ||
           (op >= OT_OP_SELECT && op <= OT_OP_REDUCE_PRECISION) || op == OT_OP_MAP;
}

/* One row per opcode with traits; every other row is 0. */
enum {
    COMM = IR_OP_COMMUTATIVE,
    COST = IR_OP_EXPENSIVE,
    FLT = IR_OP_FLOAT_ONLY,
    BIT = IR_OP_NO_FLOAT,
    KEEP = IR_OP_KEEPS_SUBNORMALS
};
const uint8_t ir_op_trait_table[OT_OP_COUNT] = {
    [OT_OP_ABS] = KEEP,
    [OT_OP_NEGATE] = KEEP,
    [OT_OP_SIGN] = KEEP,
    [OT_OP_COPY] = KEEP,
    [OT_OP_FLOOR] = FLT,
    [OT_OP_CEIL] = FLT,
    [OT_OP_ROUND_NEAREST_AFZ] = FLT,
    [OT_OP_ROUND_NEAREST_EVEN] = FLT,
    [OT_OP_EXP] = FLT | COST,
    [OT_OP_EXPM1] = FLT | COST,
    [OT_OP_LOG] = FLT | COST,
    [OT_OP_LOG1P] = FLT | COST,
    [OT_OP_SQRT] = FLT | COST,
    [OT_OP_RSQRT] = FLT | COST,
    [OT_OP_CBRT] = FLT | COST,
    [OT_OP_TANH] = FLT | COST,
    [OT_OP_LOGISTIC] = FLT | COST,
    [OT_OP_SIN] = FLT | COST,
    [OT_OP_COS] = FLT | COST,
    [OT_OP_TAN] = FLT | COST,
    [OT_OP_ERF] = FLT | COST,
    [OT_OP_IS_FINITE] = FLT | KEEP,
    [OT_OP_NOT] = BIT,
    [OT_OP_POPCNT] = BIT,
    [OT_OP_CLZ] = BIT,
    [OT_OP_ADD] = COMM,
    [OT_OP_MULTIPLY] = COMM,
    [OT_OP_DIVIDE] = COST,
    [OT_OP_REMAINDER] = COST,
    [OT_OP_POWER] = COST,
    [OT_OP_MAXIMUM] = COMM,
    [OT_OP_MINIMUM] = COMM,
    [OT_OP_ATAN2] = FLT | COST,
    [OT_OP_AND] = COMM | BIT,
    [OT_OP_OR] = COMM | BIT,
    [OT_OP_XOR] = COMM | BIT,
    [OT_OP_SHIFT_LEFT] = BIT,
    [OT_OP_SHIFT_RIGHT_ARITHMETIC] = BIT,
    [OT_OP_SHIFT_RIGHT_LOGICAL] = BIT,
    [OT_OP_MAP] = COST,
};

bool ot_opcode_is_commutative(ot_opcode op) {
    return ir_op_traits(op) & IR_OP_COMMUTATIVE;
}

bool ot_opcode_is_collective(ot_opcode op) {
    return op >= OT_OP_ALL_REDUCE && op <= OT_OP_COLLECTIVE_PERMUTE;
}

bool ot_instr_has_side_effect(const ot_instr *i) {
    if (ot_opcode_is_collective(i->opcode)) return true;
    if (i->opcode == OT_OP_RNG_BIT_GENERATOR) return false; /* pure: the state is an operand */
    if (i->opcode == OT_OP_CUSTOM_CALL) return i->attrs->has_side_effect;
    return false;
}

/* The names live in the attribute schema (attr_schema.c), which reads and prints them. */
const char *ot_cmp_dir_name(ot_cmp_dir d) {
    return (int)d >= 0 && d < OT_CMP_DIR_COUNT ? ir_cmp_dir_names[d] : "<invalid>";
}

const char *ot_cmp_type_name(ot_cmp_type t) {
    return (int)t >= 0 && t < OT_CMP_TYPE_COUNT ? ir_cmp_type_names[t] : "<invalid>";
}

ot_cmp_type ot_cmp_type_resolve(ot_cmp_type t, ot_dtype operand) {
    if (t != OT_CMP_TYPE_DEFAULT) return t;
    if (ot_dtype_is_float(operand) || ot_dtype_is_complex(operand)) return OT_CMP_TYPE_FLOAT;
    if (ot_dtype_is_signed_int(operand)) return OT_CMP_TYPE_SIGNED;
    return OT_CMP_TYPE_UNSIGNED; /* unsigned and pred, as XLA */
}

/* ---- IR shapes ---- */

ot_ir_shape ot_ir_shape_array(ot_shape s) {
    ot_ir_shape r;
    memset(&r, 0, sizeof r);
    r.kind = OT_IR_ARRAY;
    r.array = s;
    return r;
}

ot_ir_shape ot_ir_shape_scalar(ot_dtype t) {
    return ot_ir_shape_array(ot_shape_scalar(t));
}

bool ot_ir_shape_is_array(const ot_ir_shape *s) {
    return s->kind == OT_IR_ARRAY;
}

bool ot_ir_shape_equal(const ot_ir_shape *a, const ot_ir_shape *b) {
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case OT_IR_ARRAY: return ot_shape_equal(&a->array, &b->array);
    case OT_IR_TOKEN: return true;
    case OT_IR_TUPLE:
        if (a->ntuple != b->ntuple) return false;
        for (int i = 0; i < a->ntuple; i++)
            if (!ot_ir_shape_equal(&a->tuple[i], &b->tuple[i])) return false;
        return true;
    }
    return false;
}

static int fmt_rec(const ot_ir_shape *s, char *buf, size_t n, size_t *pos) {
    int total = 0;
#define EMIT(...)                                                                                  \
    do {                                                                                           \
        int k_ = snprintf(*pos < n ? buf + *pos : NULL, *pos < n ? n - *pos : 0, __VA_ARGS__);     \
        if (k_ > 0) {                                                                              \
            *pos += (size_t)k_;                                                                    \
            total += k_;                                                                           \
        }                                                                                          \
    } while (0)
    switch (s->kind) {
    case OT_IR_TOKEN: EMIT("token[]"); break;
    case OT_IR_ARRAY: {
        char tmp[256];
        ot_shape_format(&s->array, tmp, sizeof tmp);
        EMIT("%s", tmp);
        break;
    }
    case OT_IR_TUPLE:
        EMIT("(");
        for (int i = 0; i < s->ntuple; i++) {
            if (i) EMIT(", ");
            total += fmt_rec(&s->tuple[i], buf, n, pos);
        }
        EMIT(")");
        break;
    }
#undef EMIT
    return total;
}

int ot_ir_shape_format(const ot_ir_shape *s, char *buf, size_t n) {
    size_t pos = 0;
    if (n) buf[0] = '\0';
    int r = fmt_rec(s, buf, n, &pos);
    if (n && pos >= n) buf[n - 1] = '\0';
    return r;
}

int64_t ot_ir_shape_nbytes(const ot_ir_shape *s) {
    switch (s->kind) {
    case OT_IR_ARRAY: return ot_shape_nbytes_unchecked(&s->array);
    case OT_IR_TOKEN: return 0;
    case OT_IR_TUPLE: {
        int64_t t = 0;
        for (int i = 0; i < s->ntuple; i++) t += ot_ir_shape_nbytes(&s->tuple[i]);
        return t;
    }
    }
    return 0;
}

int ir_fmt_dims(char *buf, size_t n, const int64_t *d, int k) {
    size_t pos = 0;
    if (n) buf[0] = '\0';
    for (int i = 0; i < k; i++) {
        int w = snprintf(pos < n ? buf + pos : NULL, pos < n ? n - pos : 0, "%s%lld", i ? "," : "",
                         (long long)d[i]);
        if (w > 0) pos += (size_t)w;
    }
    return (int)pos;
}
