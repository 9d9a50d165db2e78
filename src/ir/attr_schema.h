/* The attribute schema: what the IR knows about instruction attributes, each fact stated once.
 *
 * Two tables (src/ir/attr_schema.c):
 *   ir_attr_fields  every field of ot_attrs once, in the order the executable format stores
 *                   them: its storage kind (how it is deep-copied, compared and encoded), its
 *                   name in messages and its valid range.
 *   ir_attr_rows    every HLO text attribute once per meaning: its name, the field it fills (one
 *                   of ot_attrs, or of the dot/gather/scatter dimension numbers one of them points
 *                   to), its kind (which parser and printer handle it), the opcodes that carry
 *                   it, when it is printed, its default, range and whether the op needs it. Rows
 *                   are in printing order.
 * The HLO reader (hlo_parse.c) and printer (hlo_print.c) hold one function per row kind, the
 * attribute copy (attrs.c) and the executable encoder (compiler/serialize.c) one per field kind;
 * all of them loop over these tables. Adding an attribute is one row (and a field, if it needs a
 * new one).
 *
 * Everything here is immutable data; the per-opcode index is built on first use (idempotently:
 * concurrent first calls write identical bytes), so every function is thread-safe. */
#ifndef OT_IR_ATTR_SCHEMA_H
#define OT_IR_ATTR_SCHEMA_H

#include "optitpu/ir.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- fields of ot_attrs ---- */

typedef enum ir_attr_field_id {
    IR_F_INDEX,
    IR_F_DIMS,
    IR_F_CMP_DIR,
    IR_F_CMP_TYPE,
    IR_F_EXPONENT_BITS,
    IR_F_MANTISSA_BITS,
    IR_F_IS_STABLE, /* the five flags are consecutive: the executable packs them in one byte */
    IR_F_LARGEST,
    IR_F_HAS_SIDE_EFFECT,
    IR_F_USE_GLOBAL_DEVICE_IDS,
    IR_F_CONSTRAIN_LAYOUT,
    IR_F_RNG_ALGORITHM,
    IR_F_FUSION_KIND,
    IR_F_CHANNEL_ID,
    IR_F_FEATURE_GROUP_COUNT,
    IR_F_BATCH_GROUP_COUNT,
    IR_F_PRECISION,
    IR_F_SLICE,
    IR_F_PADDING,
    IR_F_WINDOW,
    IR_F_DOT,
    IR_F_CONV,
    IR_F_GATHER,
    IR_F_SCATTER,
    IR_F_GROUPS,
    IR_F_PAIRS,
    IR_F_CUSTOM_CALL_TARGET,
    IR_F_BACKEND_CONFIG,
    IR_F_API_VERSION,
    IR_F_LITERAL,
    IR_F_COUNT,
    /* Targets of HLO rows that are not ot_attrs fields: the instruction's called computations,
     * its metadata, its attributes kept verbatim. */
    IR_T_CALLED = IR_F_COUNT,
    IR_T_METADATA,
    IR_T_RAW,
} ir_attr_field_id;

typedef enum ir_field_kind {
    IR_FK_I64,       /* int64_t */
    IR_FK_INT,       /* int, valid in [lo, hi] */
    IR_FK_ENUM,      /* an enum, valid in [0, hi] */
    IR_FK_BOOL,      /* bool */
    IR_FK_DIMS,      /* const int64_t * with an int count (count_off) */
    IR_FK_PER_DIM,   /* one three-int64 entry per result dimension (slice, padding) */
    IR_FK_WINDOW,    /* const ot_window * */
    IR_FK_DOT,       /* const ot_dot_dims * */
    IR_FK_CONV,      /* const ot_conv_dims * */
    IR_FK_GATHER,    /* const ot_gather_dims * */
    IR_FK_SCATTER,   /* const ot_scatter_dims * */
    IR_FK_PRECISION, /* ot_precision[2] with its count (count_off), each valid in [0, hi] */
    IR_FK_GROUPS,    /* const ot_replica_groups * */
    IR_FK_PAIRS,     /* const int64_t * of 2 * count (count_off) */
    IR_FK_STRING,    /* const char *, NULL = none; at most hi bytes in an executable */
    IR_FK_LITERAL,   /* const ot_literal * */
} ir_field_kind;

typedef struct ir_attr_field {
    const char *what;   /* in messages */
    uint8_t kind;       /* ir_field_kind */
    uint16_t off, size; /* offset and size in ot_attrs */
    uint32_t elem;      /* pointers and arrays: the size of one element pointed to */
    int16_t count_off;  /* DIMS, PAIRS, PRECISION: offset of the int count; else -1 */
    int64_t lo, hi;     /* INT, ENUM, PRECISION, STRING: see ir_field_kind; DIMS, PAIRS: the
                         * most entries an executable may hold */
    const char *flag;   /* pointers to one struct, slice, padding: the name, in messages, of the
                         * byte that says whether an executable holds it */
} ir_attr_field;

extern const ir_attr_field ir_attr_fields[IR_F_COUNT];

/* ---- HLO text attributes ---- */

typedef enum ir_attr_kind {
    IR_AK_INT,        /* integer into an integer field, in [lo, hi] */
    IR_AK_BOOL,       /* true / false */
    IR_AK_ENUM,       /* one of names[first..nnames) into an enum field */
    IR_AK_PRECISION,  /* {default,high} (case-insensitive) into operand_precision */
    IR_AK_DIMS,       /* {d0,d1,...} into a list and its count */
    IR_AK_DIMS_PAIR,  /* dot: lhs and rhs lists that share one count (aux names the pair) */
    IR_AK_DIM,        /* {d} (or {} where lo < 0: the default) into one int64 */
    IR_AK_SLICE,      /* {[a:b:s], ...} */
    IR_AK_PADDING,    /* lo_hi_interior x ... */
    IR_AK_WINDOW,     /* {size=.. stride=.. pad=.. lhs_dilate=.. rhs_dilate=.. rhs_reversal=..} */
    IR_AK_DIM_LABELS, /* b01f_01io->b01f */
    IR_AK_GROUPS,     /* replica groups: explicit, iota or mesh form */
    IR_AK_PAIRS,      /* {{s,t},...} */
    IR_AK_STRING,     /* a quoted string */
    IR_AK_CONFIG,     /* a quoted string, or any value kept as text */
    IR_AK_COMP,       /* one computation name, into called slot `slot` */
    IR_AK_COMP_LIST,  /* {name, ...}: all called computations */
    IR_AK_METADATA,   /* metadata={...} */
    IR_AK_RAW,        /* kept verbatim: parsed as a balanced value, printed back as read */
    IR_AK_RAW_ALL,    /* (printing only) the attributes kept verbatim, in the order read */
    IR_AK_OPERAND,    /* written in the operand position (parameter number, constant value) */
} ir_attr_kind;

typedef enum ir_attr_print {
    IR_AP_ALWAYS,
    IR_AP_NONZERO,    /* when not 0/false/NULL (lists: non-empty; window: of rank > 0;
                       * precision: both entries given; computation lists: any called) */
    IR_AP_ABOVE_ONE,  /* when > 1 */
    IR_AP_NONNEG,     /* when >= 0 */
    IR_AP_ONE_CALLED, /* when exactly one computation is called */
    IR_AP_PRED_FORM,  /* conditional on a pred with two branches */
    IR_AP_INDEX_FORM, /* any other conditional */
    IR_AP_NEVER,      /* read only (an alias), or printed elsewhere */
} ir_attr_print;

enum {
    IR_AF_REQUIRED = 1u << 0,          /* the op needs it: "<op> needs <name>=" when absent */
    IR_AF_ALL_OPS = 1u << 1,           /* every opcode carries it (ops is ignored) */
    IR_AF_UNKNOWN_ELSEWHERE = 1u << 2, /* other ops report it as unknown, not as misapplied */
    IR_AF_COUNT_SHARED = 1u << 3,   /* DIMS whose length is another list's: its count not stored */
    IR_AF_PRINT_FALLBACK = 1u << 4, /* also printed for ops with no row naming their called
                                     * computations */
};

typedef struct ir_attr_row {
    const char *name; /* NULL: a printing-only row */
    uint8_t kind;     /* ir_attr_kind */
    uint8_t field;    /* ir_attr_field_id */
    uint8_t print;    /* ir_attr_print */
    uint8_t flags;    /* IR_AF_* */
    /* Where it goes: offset and size within ot_attrs, or within the dimension numbers the
     * field points to (dot, gather, scatter); the int count of a list (-1: none). */
    uint16_t off, size;
    int16_t count_off;
    int16_t slot;             /* COMP: position in the called computations */
    int64_t lo, hi;           /* INT: valid range (reported as "negative NAME" when hi is INT64_MAX,
                               * else "NAME out of range"); DIM: lo < 0 allows {} */
    int64_t def;              /* the field's value when the attribute is absent */
    const ot_opcode *ops;     /* the opcodes that carry it, ending with OT_OP_INVALID */
    const char *const *names; /* ENUM, PRECISION: value names */
    int nnames, first;        /* ENUM: names[first..nnames) are accepted */
    const char *what;         /* ENUM: what the reader expected; DIMS: the list in messages;
                               * DIMS_PAIR: "batch" or "contracting" */
    const char *bad;          /* ENUM: the message for an unknown name (one %.*s) */
} ir_attr_row;

extern const ir_attr_row ir_attr_rows[];
/* Comparison directions and types by value (ot_cmp_dir_name, ot_cmp_type_name read them). */
extern const char *const ir_cmp_dir_names[OT_CMP_DIR_COUNT];
/* "FFT", "IFFT", "RFFT", "IRFFT" (ot_fft_type); "<invalid fft_type>" outside it. */
const char *ir_fft_type_name(int t);
extern const char *const ir_cmp_type_names[OT_CMP_TYPE_COUNT];
extern const int ir_attr_nrows;

/* The most rows one opcode has (universal rows included). */
#define IR_ATTR_OP_MAX 48

/* The rows op carries, as indexes into ir_attr_rows in table (printing) order; *n of them. */
const uint8_t *ir_attr_op_rows(ot_opcode op, int *n);
/* op's row named s[0..n) (NULL when op has none); *pos: its position in ir_attr_op_rows. */
const ir_attr_row *ir_attr_lookup(ot_opcode op, const char *s, size_t n, int *pos);
/* Any row named s[0..n), whichever ops carry it (NULL when none). */
const ir_attr_row *ir_attr_lookup_any(const char *s, size_t n);

/* Whether row r's attribute is printed for instruction i (its print policy). */
bool ir_attr_printed(const ir_attr_row *r, const ot_instr *i);
/* The integer stored at p, of `size` bytes (1: bool, 4: int or enum, 8: int64). */
static inline int64_t ir_attr_load_int(const void *p, size_t size) {
    switch (size) {
    case 1: return *(const bool *)p;
    case 4: {
        int v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

static inline void ir_attr_store_int(void *p, size_t size, int64_t v) {
    switch (size) {
    case 1: *(bool *)p = v != 0; break;
    case 4: {
        int w = (int)v;
        memcpy(p, &w, 4);
        break;
    }
    default: memcpy(p, &v, 8); break;
    }
}
/* The struct row r writes into: attrs itself, or the dimension numbers attrs points to (NULL
 * when that pointer is NULL). */
const void *ir_attr_row_base(const ir_attr_row *r, const ot_attrs *a);
/* names[v], or "<invalid>" outside [0, nnames). */
const char *ir_attr_enum_name(const ir_attr_row *r, int64_t v);

#endif /* OT_IR_ATTR_SCHEMA_H */
