/* IR internals shared by the ir/ sources: the module struct, name indexes, pointer maps and the
 * sticky-error helpers. */
#ifndef OT_IR_INTERNAL_H
#define OT_IR_INTERNAL_H

#include "ir/ir_passes.h"
#include "optitpu/ir.h"

#include <stdio.h>
#include <string.h>

/* String -> pointer index, laid out as a compact table: entries (key, value, hash) are appended in
 * insertion order, and an open-addressing probe table of 8-byte slots (32-bit hash tag, 32-bit
 * entry number) finds them. A probe touches one small slot array instead of 24-byte records, so a
 * million-name computation keeps its random accesses within 16 MiB; an entry is read only when the
 * tag matches. Deleted entries keep their place (key NULL) until the next rebuild. Keys are not
 * owned. */
typedef struct ir_name_entry {
    const char *key; /* NULL: deleted */
    void *val;
    uint64_t hash;
} ir_name_entry;

typedef struct ir_name_index {
    uint64_t *slots;        /* 0: empty; IR_SLOT_DEL: deleted; else tag << 32 | (entry + 1) */
    ir_name_entry *entries; /* nent used of ecap */
    uint64_t cap;           /* slots (a power of two, or 0) */
    uint64_t n;             /* live keys */
    uint64_t nent, ecap;    /* entries appended (live and deleted), capacity */
} ir_name_index;

#define IR_SLOT_DEL UINT64_C(0xffffffff)

static inline uint64_t ir_hash_bytes(const void *p, size_t n) {
    /* FNV-1a with a final mix: names are short. */
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}
ot_status ir_names_put(ir_name_index *x, const char *key, void *val); /* replaces existing */
/* Inserts key unless present: OT_ERR_ALREADY_EXISTS (no message set) when it is. */
ot_status ir_names_insert(ir_name_index *x, const char *key, size_t len, void *val);
void *ir_names_get(const ir_name_index *x, const char *key, size_t len);
/* Sizes the index for n keys at once (a hint: later inserts still grow it). */
ot_status ir_names_reserve(ir_name_index *x, uint64_t n);
/* Starts loading the slot a later insert or get of key will probe (hides a cache miss). */
/* Starts loading the cache line at p. GCC dropped __builtin_prefetch at -O2 in the parser
 * (measured: no prefetch instruction was emitted), so on x86 the instruction is written out. */
static inline void ir_prefetch(const void *p) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p));
#else
    __builtin_prefetch(p);
#endif
}

static inline void ir_names_prefetch(const ir_name_index *x, const char *key, size_t len) {
    if (x->cap) ir_prefetch(&x->slots[ir_hash_bytes(key, len) & (x->cap - 1)]);
}
/* Generated names ("add.42", "x.clone.3") are built with these instead of snprintf, which costs
 * over a thousand instructions a call: the same text, snprintf's truncation (never past cap - 1,
 * always terminated; cap >= 1). Each returns the new length. */
static inline size_t ir_name_puts(char *buf, size_t cap, size_t len, const char *s, size_t max) {
    while (max-- && *s && len + 1 < cap) buf[len++] = *s++;
    buf[len] = 0;
    return len;
}
static inline size_t ir_name_putd(char *buf, size_t cap, size_t len, int64_t v) {
    char t[24];
    int n = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        t[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) t[n++] = '-';
    while (n && len + 1 < cap) buf[len++] = t[--n];
    buf[len] = 0;
    return len;
}
void ir_names_del(ir_name_index *x, const char *key);
void ir_names_free(ir_name_index *x);

/* A computation's instruction names. The index (c->names_) is built from the list when first
 * needed: a lookup in, or an explicit name for, a computation of more than IR_NAMES_LAZY
 * instructions, or on request (ir_comp_names: built if missing, sized for at least `reserve`
 * names); smaller computations scan their list. A name known to be free (ir_comp_name_insert's
 * `fresh`) is entered only into an index that exists: a clone of a verified module and the
 * names passes make from fresh ids never build one. ir_comp_name_insert: OT_ERR_ALREADY_EXISTS
 * (no message) when the name is taken; the caller links the instruction into the list
 * afterwards. */
#define IR_NAMES_LAZY 16
ot_instr *ir_comp_find(const ot_computation *c, const char *key, size_t len);
ot_status ir_comp_names(ot_computation *c, uint64_t reserve);
ot_status ir_comp_name_insert(ot_computation *c, const char *key, size_t len, ot_instr *i,
                              bool fresh);
void ir_comp_name_del(ot_computation *c, const char *key);

struct ot_module {
    char *name;
    /* Storage by kind. Graph walks read the instructions themselves and their operand and user
     * lists, rarely names: kept apart, what a walk of a large module reads lies densely in
     * creation order, instead of one or two cache lines in every few hundred bytes of mixed
     * storage. arena: operand and called lists, attributes, tuple shapes, literals. */
    ot_arena *arena;
    ot_arena *instr_arena; /* the ot_instr structs */
    ot_arena *users_arena; /* users lists (an outgrown one is abandoned there) */
    ot_arena *str_arena;   /* names and other strings */
    ot_computation **comps;
    int ncomps, comps_cap;
    ot_computation *entry;
    ir_name_index comp_names;
    int64_t next_id, next_comp_id;
    /* the largest number N of an instruction name "<anything>.<N>" given explicitly (not made
     * by ir_create from the opcode and id), -1 when none: a made name "<opcode>.<id>" with a
     * larger id cannot be taken, so it needs no lookup (see ir_comp_name_insert) */
    int64_t name_suffix_max;
    int64_t ninstrs;
    int64_t ncalls; /* live call instructions (ir_module_call_count) */
    ot_module_config cfg;
    int alias_cap;
    struct uidx *uidx_head; /* user indexes of instructions with many users */
    uint64_t epoch;         /* visit stamps for traversals (see ir_visit_begin) */
    /* edits to the graph so far: instructions created or removed, operands, roots, computations
     * added or removed, the entry (ir_module_edits) */
    uint64_t edits;
    /* edits + 1 when the module last passed the verifier (0: never): verification depends only
     * on what the edit count counts, so an unedited module is not walked again */
    uint64_t verified_edits;
    /* what the compiler keeps between passes while the graph is unedited (freed with the module
     * through pass_cache_free) */
    void *pass_cache;
    void (*pass_cache_free)(void *);
    /* instructions removed since the last ir_module_recycle (their storage is not reused before
     * it: a pass may still compare pointers it holds), and the storage ir_create takes first
     * (linked through next) */
    ot_instr **removed;
    int64_t nremoved, removed_cap;
    ot_instr *free_instrs;
    ot_status err;
    char errmsg[1024];
};

/* ot_module_verify; infer false skips inferring every shape again, for a caller that built each
 * instruction through ir_create (which infers its shape and checks the declared one) and has not
 * edited the module since: the parser. */
ot_status ir_module_verify(const ot_module *m, bool infer);

/* Arena helpers (NULL on failure). */
void *ir_alloc(ot_module *m, size_t n);
char *ir_strdup(ot_module *m, const char *s);
char *ir_strndup(ot_module *m, const char *s, size_t n);
void *ir_memdup(ot_module *m, const void *p, size_t n);

/* Records the current ot_last_error() message as the sticky error if none is set yet, and returns
 * the sticky status. */
ot_status ir_record(ot_module *m, ot_status s);
/* ot_error + ir_record. */
ot_status ir_fail(ot_module *m, ot_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Users lists. */
ot_status ir_users_add(ot_instr *op, ot_instr *user);
void ir_users_remove(ot_instr *op, ot_instr *user);
bool ir_users_contains(const ot_instr *op, const ot_instr *user);

/* Deep copy of attributes into the module arena, keeping only the fields `op` uses. rank: the
 * result rank (slice and pad configs have one entry per dimension). */
ot_status ir_attrs_copy(ot_module *m, ot_opcode op, int rank, const ot_attrs *src, ot_attrs *dst);
/* Deep copy of a shape (tuple elements into the arena). */
ot_status ir_shape_copy(ot_module *m, const ot_ir_shape *src, ot_ir_shape *dst);

/* Shape inference core (infer.c). */
ot_status ir_infer(ot_module *m, ot_opcode op, ot_instr *const *ops, int n, const ot_attrs *a,
                   ot_computation *const *called, int ncalled, const ot_ir_shape *hint,
                   ot_ir_shape *out);

/* Instruction creation without sticky-error checks (used by ot_build, cloning and the parser):
 * returns OT_OK and *out, or an error (message set). flags:
 *   IR_COPY_ATTRS  deep-copy the attributes into the module (else they are shared);
 *   IR_SHAPE_KNOWN the hint is the result shape (tuple elements already in this module's arena)
 *                  and is taken without inferring it: only for a copy of an instruction whose
 *                  operands have the shapes of the original's and whose called computations have
 *                  the original's signatures, where inference would give the same shape. */
/*   IR_NAME_UNIQUE the name is known to be free in c (a copy into an empty computation of the
 *                  names of another, where they were unique): not looked up. */
/*   IR_ATTRS_SHARED attrs are another instruction's of this module (immutable): pointed at,
 *                  not copied (a clone within the module). */
enum { IR_COPY_ATTRS = 1, IR_SHAPE_KNOWN = 2, IR_NAME_UNIQUE = 4, IR_ATTRS_SHARED = 8 };
ot_status ir_create(ot_computation *c, ot_opcode op, ot_instr *const *operands, int noperands,
                    const ot_attrs *attrs, ot_computation *const *called, int ncalled,
                    const ot_ir_shape *hint, const char *name, size_t name_len, unsigned flags,
                    ot_instr **out);
ot_status ir_add_computation(ot_module *m, const char *name, size_t len, ot_computation **out);

/* Formatting helpers. */
int ir_fmt_dims(char *buf, size_t n, const int64_t *d, int k);

#endif /* OT_IR_INTERNAL_H */
