/*
 * optitpu compiler: turns an IR module into an executable — a flat list of kernels over one arena
 * whose offsets come from buffer assignment.
 *
 *     graph passes (pass manager)          licm → simplify → cse → fold → dce (a fixed-point
 * group), fuse schedule                             memory-minimizing list scheduler
 * (deterministic) assign-buffers                       liveness + best-fit allocator (64-byte
 * aligned) executable                           kernels, slots, bindings, aliasing, FLOPs and bytes
 *     native code                          C per loop fusion, compiled by the system C compiler
 *                                          (disk-cached; options.native, docs/codegen.md)
 *
 * Usage:
 *
 *     ot_compile_options o = ot_compile_options_default();   // -O2, fusion on
 *     ot_executable *exe = NULL;
 *     if (ot_compile(module, &o, &exe) != OT_OK)              // module is not changed
 *         fprintf(stderr, "%s\n", ot_last_error());
 *     for (int k = 0; k < ot_executable_kernel_count(exe); k++) {
 *         const ot_kernel *kn = ot_executable_kernel(exe, k); // kn->inputs / kn->outputs: slots
 *         ...
 *     }
 *     ot_executable_free(exe);
 *
 * Passes are also callable one by one (ot_pass_dce(m, &changed), ...); each changes the module in
 * place and states its pre- and post-conditions below. On failure a pass returns an error with
 * the message set; the module may then be partly rewritten but stays verifiable (every edit goes
 * through the IR's link-keeping functions).
 *
 * Ownership: an executable owns a private copy of the compiled module (kernels point into it)
 * and its native code (loaded objects); ot_executable_free releases everything. Pass managers own
 * their stats.
 *
 * Thread safety: compiling different modules on different threads is safe (their native stages
 * take turns on a process-wide lock); one module or pass
 * manager must not be used from two threads at once. A finished executable is read-only and may be
 * shared.
 */
#ifndef OPTITPU_COMPILER_H
#define OPTITPU_COMPILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/core.h"
#include "optitpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Options
 * ------------------------------------------------------------------------------------------- */

/* Native code for loop fusions (docs/codegen.md), built as the compile's last stage. */
typedef enum ot_native_mode {
    /* default: when at least one loop fusion reaches OPTITPU_CODEGEN_MIN_ELEMENTS elements
     * (4096), every supported fusion; none when all are smaller (a compile costs more than
     * interpreting them). OPTITPU_CODEGEN=0 in the environment turns AUTO off. */
    OT_NATIVE_AUTO = 0,
    OT_NATIVE_ON,  /* every supported fusion, whatever its size; the environment is not read */
    OT_NATIVE_OFF, /* none: the interpreter runs every fusion */
} ot_native_mode;

typedef struct ot_compile_options {
    /* 0: required steps only (dce, schedule in post order, buffer assignment, no fusion);
     * 1: simplify, cse, dce, fusion; 2 (default): as 1 in a fixed-point group, constant
     * folding, loop-invariant code motion (licm), the memory-minimizing scheduler and in-place
     * reuse. */
    int opt_level;
    bool fusion;                /* default true (ignored at -O0) */
    const char *passes;         /* comma list replacing the level's graph passes, NULL: level */
    const char *disable_passes; /* comma list of passes to skip, NULL: none */
    int64_t fold_max_elements;  /* constant-folding size cap (default 1M elements) */
    int max_fusion_io;          /* operands + outputs per fusion (default 64) */
    int64_t arena_limit;        /* bytes; 0 = none. Over it: OUT_OF_MEMORY with the peak */
    bool verify_each;           /* verifier after every pass (always on without NDEBUG) */
    const char *dump_dir;       /* write HLO text + DOT after passes here (NULL: no dumps) */
    const char *dump_after;     /* only after this pass (NULL or "all": every pass) */
    const char *target;         /* "host-cpu" by default (part of the fingerprint) */
    /* Native code (not part of the fingerprint: it computes the same bits as the interpreter).
     * A setting left at its default takes the environment's value, an explicit one wins over
     * it. The generated objects are cached on disk (OPTITPU_CACHE_DIR); a failure to build is
     * logged as a warning and leaves the fusions to the interpreter, never fails the compile. */
    ot_native_mode native;     /* default OT_NATIVE_AUTO */
    int64_t native_unit_bytes; /* C per compiled object; 0: OPTITPU_CODEGEN_UNIT_BYTES or 128 KiB */
    const char *native_cc;     /* C compiler (a path or a name on PATH), read during ot_compile;
                                * NULL: OPTITPU_CC, else cc */
} ot_compile_options;

OT_API ot_compile_options ot_compile_options_default(void);

/* ---------------------------------------------------------------------------------------------
 * Passes. Each returns OT_OK and sets *changed (may be NULL) when it rewrote something.
 * ------------------------------------------------------------------------------------------- */

/* Call inlining (XLA's CallInliner): every call instruction in a computation reachable from the
 * entry is replaced by a copy of its callee (parameters bound to the call's operands; nested
 * calls at any depth, a callee called twice is copied twice). Callees left without callers are
 * removed by DCE. pre: verifies. post: verifies; no call remains reachable; values identical. */
OT_API ot_status ot_pass_inline(ot_module *m, bool *changed);
/* The most instructions inlining may leave in the entry: nested calls copy a callee once per
 * call (2^d copies for d levels of two calls each); past it ot_pass_inline returns
 * RESOURCE_EXHAUSTED naming the limit and changes nothing. Time: O(instructions after). */
#define OT_INLINE_MAX_INSTRUCTIONS ((int64_t)1 << 24)

/* Algebraic simplification of the entry computation (and every computation it calls).
 * pre: the module verifies. post: it verifies; results are bit-identical to before for integer
 * and predicate values and for floats (no rule that changes a float result, NaN or -0.0 is
 * applied: x*0, x-x, x+(-0.0)→x are not folded for floats; x+0.0 is not x for x = -0.0, so only
 * x+(-0.0) … see docs/compiler.md for the list). Dead instructions are left to DCE. */
OT_API ot_status ot_pass_simplify(ot_module *m, bool *changed);

/* Common-subexpression elimination: instructions with equal opcode, attributes, called
 * computations and operands (integer and predicate commutative ops in either order, float ones
 * in their own: a NaN result keeps its operand's sign; constants by value) are merged.
 * Side-effecting instructions (ot_instr_has_side_effect) are never merged.
 * pre: verifies. post: verifies; no two mergeable instructions remain in one computation. */
OT_API ot_status ot_pass_cse(ot_module *m, bool *changed);

/* Dead-code elimination: keeps the entry's root (its outputs), parameters and side-effecting
 * instructions and what they use; removes computations not reachable from the entry.
 * pre: verifies and the entry has a root (else INVALID_ARGUMENT "no outputs declared").
 * post: every live instruction reaches the root or a side effect. */
OT_API ot_status ot_pass_dce(ot_module *m, bool *changed);

/* Loop-invariant code motion (XLA's WhileLoopInvariantCodeMotion): in the body of a while loop
 * (body and condition called by that loop only, state a flat tuple of arrays, body root a tuple),
 * a value computed only from constants, iotas and state elements the body passes through
 * unchanged moves in front of the loop and enters as an extra state element, when it does work
 * beyond iota/broadcast/reshape/transpose/convert or an unfusing user (variadic reduce, dot, ...)
 * would otherwise materialize it every iteration; at most 64 leaves of state and 64 MiB hoisted
 * per loop. pre: verifies. post: verifies; values identical. Time: O(instructions) per loop. */
OT_API ot_status ot_pass_licm(ot_module *m, bool *changed);

/* Constant folding: an instruction whose operands are all constants (and that is not
 * side-effecting, not a parameter and not a bare broadcast/iota) is evaluated by the reference
 * evaluator and replaced by a constant, when its result has at most max_elements elements.
 * pre: verifies. post: verifies; values bit-identical. */
OT_API ot_status ot_pass_fold(ot_module *m, int64_t max_elements, bool *changed);

/* Fusion of the entry computation: loop fusions of elementwise ops, broadcasts, reshapes,
 * converts, scalar constants and iota; a single-input reduce with a one-op reducer as the root
 * of an input fusion; producers with users outside become extra outputs (multi-output) where no
 * cycle results; sibling loop fusions sharing an input merge. Never fused: side-effecting ops,
 * collectives, dot, convolution, sort, while, conditional and anything else not listed.
 * max_io: limit on operands + outputs per fusion (<= 0: 64); a fused computation holds at most
 * OT_FUSION_MAX_INSTRUCTIONS instructions (as XLA bounds a fusion's size), so that no kernel's
 * generated code grows with the graph (gcc -O3 took 3-3.7 s on a kernel of 512 chained binary
 * ops, 0.5-1.3 s on 128, on a loaded 2-core machine). Time and memory linear in the entry's size,
 * whatever its shape (bounded reachability searches; an exact linear check that the fused graph is
 * acyclic). pre: verifies. post: verifies; every fusible op of the entry sits inside a fusion. */
#define OT_FUSION_MAX_INSTRUCTIONS 128
OT_API ot_status ot_pass_fuse(ot_module *m, int max_io, bool *changed);

/* Memory-minimizing schedule of the entry computation: a topological order chosen greedily by
 * bytes freed minus bytes allocated (ties: original position). Deterministic. *order is
 * ot_malloc'd (free with ot_free), *n entries. */
OT_API ot_status ot_schedule_entry(const ot_module *m, bool minimize_memory, ot_instr ***order,
                                   int64_t *n);

/* ---------------------------------------------------------------------------------------------
 * Pass manager
 * ------------------------------------------------------------------------------------------- */

typedef ot_status (*ot_pass_fn)(ot_module *m, void *ctx, bool *changed);

typedef struct ot_pass_stat {
    const char *name;      /* the pass ("cse"), owned by the pass manager */
    int iteration;         /* inside a fixed-point group: 0, 1, ...; else 0 */
    uint64_t time_ns;      /* wall time of the run */
    int64_t instrs_before; /* live instructions in the module before / after */
    int64_t instrs_after;
    bool changed;
} ot_pass_stat;

typedef struct ot_pass_manager ot_pass_manager;

/* NULL only when out of memory. */
OT_API ot_pass_manager *ot_pass_manager_new(void);
OT_API void ot_pass_manager_free(ot_pass_manager *pm); /* NULL is a no-op */
/* Appends a pass (name copied). Between begin/end_fixed_point the pass joins that group. */
OT_API ot_status ot_pass_manager_add(ot_pass_manager *pm, const char *name, ot_pass_fn fn,
                                     void *ctx);
/* The same for a pass that never changes a module it has just left (a second run right after
 * the first finds nothing): in a fixed-point group it is skipped while no other pass has changed
 * the module since its last run. */
OT_API ot_status ot_pass_manager_add_idempotent(ot_pass_manager *pm, const char *name,
                                                ot_pass_fn fn, void *ctx);
/* A group repeated until no pass in it changes anything, at most max_iterations times. A member
 * is skipped (not run, no statistics entry) when nothing has changed the module since its last
 * run and that run changed nothing (or the pass is idempotent): passes are deterministic, so it
 * would find nothing to do. */
OT_API ot_status ot_pass_manager_begin_fixed_point(ot_pass_manager *pm, const char *name,
                                                   int max_iterations);
OT_API ot_status ot_pass_manager_end_fixed_point(ot_pass_manager *pm);
OT_API void ot_pass_manager_set_verify_each(ot_pass_manager *pm, bool on);
/* Dumps "<dir>/<NN>.<pass>.hlo" and ".dot" after each pass (after: NULL/"all" or one name). */
OT_API ot_status ot_pass_manager_set_dump(ot_pass_manager *pm, const char *dir, const char *after);
/* Runs every pass in order. A failing pass stops the run; its message names the pass. With
 * verify-each, a verifier failure after pass P is INTERNAL "after pass P: ...". */
OT_API ot_status ot_pass_manager_run(ot_pass_manager *pm, ot_module *m);
OT_API int ot_pass_manager_stat_count(const ot_pass_manager *pm);
OT_API const ot_pass_stat *ot_pass_manager_stat(const ot_pass_manager *pm, int i);
/* Adds a stat entry measured elsewhere (the compiler records schedule and buffer assignment). */
OT_API ot_status ot_pass_manager_record(ot_pass_manager *pm, const ot_pass_stat *st);

/* ---------------------------------------------------------------------------------------------
 * Executable
 * ------------------------------------------------------------------------------------------- */

typedef enum ot_kernel_kind {
    OT_KERNEL_FUSION = 0, /* a loop or input fusion: instr->called[0] is the fused computation */
    OT_KERNEL_LIBRARY,    /* one op run by a library/reference kernel (dot, conv, reduce, ...) */
    OT_KERNEL_COPY,       /* copy (also the copy into a donated output when in place is unsafe) */
    OT_KERNEL_COLLECTIVE, /* all-reduce, all-gather, ... through the pod's communicator */
    OT_KERNEL_CONTROL,    /* while, conditional, call: called computations run by the runtime */
    OT_KERNEL_KIND_COUNT,
} ot_kernel_kind;

OT_API const char *ot_kernel_kind_name(ot_kernel_kind k); /* "fusion", "library", ... */

typedef enum ot_slot_kind {
    OT_SLOT_PARAMETER = 0, /* bound at run time to parameter `number` */
    OT_SLOT_OUTPUT,        /* bound at run time to output `number` (alias_param: donated input) */
    OT_SLOT_TEMP,          /* arena[offset, offset + nbytes) */
    OT_SLOT_CONSTANT,      /* data held by the executable */
    OT_SLOT_KIND_COUNT,
} ot_slot_kind;

typedef struct ot_slot {
    ot_slot_kind kind;
    ot_shape shape;
    int64_t nbytes;
    int64_t offset;      /* TEMP: arena offset (64-byte aligned) */
    int64_t number;      /* PARAMETER: parameter number; OUTPUT: output index */
    int64_t alias_param; /* OUTPUT: the donated parameter whose buffer it writes, or -1 */
    const void *data;    /* CONSTANT: nbytes of row-major data */
} ot_slot;

typedef struct ot_kernel {
    ot_kernel_kind kind;
    ot_opcode opcode;      /* the instruction's opcode (OT_OP_FUSION for fusions) */
    const ot_instr *instr; /* in the executable's module (NULL for an inserted alias copy) */
    const char *name;
    int ninputs, noutputs; /* tuple-shaped operands/results are flattened into their leaves */
    const int32_t *inputs, *outputs; /* slot indices */
    int64_t flops;                   /* floating/integer operations of the compiled graph */
    int64_t bytes_read, bytes_written;
    int32_t in_place_input; /* output 0 reuses input k's buffer (in-place), else -1 */
} ot_kernel;

typedef struct ot_executable ot_executable;

/* Compiles a copy of m (m is not changed; it must verify). opts NULL: defaults. On failure *out
 * is NULL and nothing is leaked. A module whose entry has no root is INVALID_ARGUMENT "no outputs
 * declared"; an arena over opts->arena_limit is OUT_OF_MEMORY naming the arena size and the
 * peak of live bytes. */
OT_API ot_status ot_compile(const ot_module *m, const ot_compile_options *opts,
                            ot_executable **out);
OT_API void ot_executable_free(ot_executable *e); /* NULL is a no-op */

OT_API const ot_module *ot_executable_module(const ot_executable *e);
OT_API int ot_executable_kernel_count(const ot_executable *e);
OT_API const ot_kernel *ot_executable_kernel(const ot_executable *e, int i);
OT_API int ot_executable_slot_count(const ot_executable *e);
OT_API const ot_slot *ot_executable_slot(const ot_executable *e, int i);
OT_API int ot_executable_param_count(const ot_executable *e);  /* entry parameters */
OT_API int ot_executable_output_count(const ot_executable *e); /* leaves of the root */
/* The slot bound to parameter / output k (-1 when out of range). */
OT_API int32_t ot_executable_param_slot(const ot_executable *e, int k);
OT_API int32_t ot_executable_output_slot(const ot_executable *e, int k);
OT_API int64_t ot_executable_arena_size(const ot_executable *e);
/* The peak of live temporary bytes (each rounded up to 64): the no-fragmentation lower bound. */
OT_API int64_t ot_executable_peak_live_bytes(const ot_executable *e);
OT_API int64_t ot_executable_total_flops(const ot_executable *e);
OT_API int64_t ot_executable_total_bytes(const ot_executable *e);
/* The compilation-cache key: SHA-256 of the canonical encoding of the source module (every
 * instruction, shape, attribute and constant value, schedule-independent), the options that
 * change code and the target. Equal for equal inputs; computable before compiling. */
OT_API void ot_executable_fingerprint(const ot_executable *e, uint8_t out[32]);
OT_API ot_status ot_compile_fingerprint(const ot_module *m, const ot_compile_options *opts,
                                        uint8_t out[32]);

/* What the native stage of the compile (or of ot_executable_deserialize / _load, which build
 * native code with default options) did. All zero but seconds when no native code was built. */
typedef struct ot_native_stats {
    int kernels;           /* fusion kernels with native code */
    int units;             /* compiled objects holding them */
    int units_compiled;    /* compiled by the C compiler in this stage */
    int units_cached;      /* loaded from the disk cache */
    double seconds;        /* wall time of the stage: generation, compiles, loading */
    double cc_cpu_seconds; /* the C compiler processes' CPU time */
} ot_native_stats;
OT_API void ot_executable_native_stats(const ot_executable *e, ot_native_stats *out);
/* Whether kernel k runs native code (false: the interpreter runs it; also for k out of range). */
OT_API bool ot_executable_kernel_native(const ot_executable *e, int k);
/* An executable whose fusions OT_NATIVE_AUTO left to the interpreter (all below the size
 * threshold) is built natively by its OPTITPU_CODEGEN_TIER_UP-th run, and later runs use that
 * code (docs/codegen.md, "Tier-up"). This builds it now, as that run would, so that the kernels
 * report what every run from then on runs (the host simulator prices a training step's steady
 * state with it). True when e runs native code after the call; nothing is built when no tier-up
 * is pending (already built, OT_NATIVE_OFF, OPTITPU_CODEGEN_TIER_UP=0) and a failed build leaves
 * the interpreter (false). Safe against runs of e on other threads: exactly one builds. */
OT_API bool ot_executable_tier_up(const ot_executable *e);
/* Whether kernel k's native code is split over the runtime's thread pool when it runs (its loop
 * has more iterations than one piece); false without native code. */
OT_API bool ot_executable_kernel_native_splits(const ot_executable *e, int k);

/* Serialization to a versioned file: magic, format version, length, SHA-256 checksum, then the
 * options, fingerprint, compiled module (entry in schedule order) and the slot and kernel
 * tables. Loading validates sizes, counts and offsets before use, rebuilds the module through
 * the builder and verifier, recomputes the program from the stored schedule and compares it with
 * the stored tables: any disagreement or damage is OT_ERR_CORRUPT_DATA with the reason, and
 * nothing is leaked. serialize: *out is ot_malloc'd (free with ot_free). */
OT_API ot_status ot_executable_serialize(const ot_executable *e, void **out, size_t *out_len);
OT_API ot_status ot_executable_deserialize(const void *buf, size_t len, ot_executable **out);
/* save: temp file in the same directory, then rename. */
OT_API ot_status ot_executable_save(const ot_executable *e, const char *path);
OT_API ot_status ot_executable_load(const char *path, ot_executable **out);
/* Per-pass statistics of the compilation (graph passes, then "schedule" and "assign-buffers"). */
OT_API int ot_executable_stat_count(const ot_executable *e);
OT_API const ot_pass_stat *ot_executable_stat(const ot_executable *e, int i);

/* ---------------------------------------------------------------------------------------------
 * Persistent compilation cache (as JAX's): a directory of serialized executables, one file per
 * key, so that compiling a module a process compiled before costs a load (docs/compiler.md).
 *
 * Key: SHA-256 of the compile fingerprint (ot_compile_fingerprint: the module's canonical text,
 * the options that change code, the target), the library version (OPTITPU_VERSION_STRING) and
 * the executable format version. An entry holds no native code: loading it rebuilds native code
 * through src/codegen, whose objects are cached apart, keyed by the compiler and CPU features,
 * with the caller's native options. Entry KEY.otx is exactly an ot_executable_save file, written
 * to a unique temporary file and renamed (concurrent writers of one key leave one whole entry);
 * a load re-verifies it (checksum, canonical form, and a fingerprint equal to the one asked for):
 * a damaged or stale entry is logged as a warning, removed and rebuilt, never used. After a
 * store the least recently used entries (by access time, set on each hit) are removed until the
 * total is within max_bytes; an executable larger than max_bytes is not stored.
 *
 * Ownership: the handle owns its directory string; ot_compile_cache_free releases it.
 * Thread safety: a handle is read-only after open and may be used from any thread; processes
 * may share a directory. Failures to store, touch or evict are warnings, never errors of the
 * compile.
 * ------------------------------------------------------------------------------------------- */
typedef struct ot_compile_cache ot_compile_cache;

typedef struct ot_compile_cache_options {
    /* NULL: $OPTITPU_CACHE_DIR/executables, else $XDG_CACHE_HOME/optitpu/executables, else
     * $HOME/.cache/optitpu/executables (beside the native objects' cache). Created if missing. */
    const char *dir;
    /* 0: $OPTITPU_CACHE_MAX_BYTES (a byte count, K/M/G suffixes allowed), else 1 GiB */
    int64_t max_bytes;
} ot_compile_cache_options;

#define OT_COMPILE_CACHE_DEFAULT_MAX_BYTES ((int64_t)1 << 30)

/* Opens (creating the directory) a cache. INVALID_ARGUMENT for a bad OPTITPU_CACHE_MAX_BYTES or
 * a negative max_bytes, IO when the directory cannot be created, FAILED_PRECONDITION when no
 * directory is set and HOME is unset. o NULL: defaults. */
OT_API ot_status ot_compile_cache_open(const ot_compile_cache_options *o, ot_compile_cache **out);
OT_API void ot_compile_cache_free(ot_compile_cache *c); /* NULL is a no-op */
OT_API const char *ot_compile_cache_dir(const ot_compile_cache *c);
OT_API int64_t ot_compile_cache_max_bytes(const ot_compile_cache *c);

/* The key of (m, opts) (opts NULL: defaults); computable without compiling. */
OT_API ot_status ot_compile_cache_key(const ot_module *m, const ot_compile_options *opts,
                                      uint8_t out[32]);

/* ot_compile through cache c: a valid entry is loaded (native code built with opts' native
 * settings), else the module is compiled and stored. c NULL: ot_compile. *hit (may be NULL) says
 * whether the entry was used. Errors are ot_compile's; on failure *out is NULL. */
OT_API ot_status ot_compile_cached(const ot_module *m, const ot_compile_options *opts,
                                   ot_compile_cache *c, ot_executable **out, bool *hit);

typedef struct ot_compile_cache_entry {
    char key[65];     /* hex */
    int64_t bytes;    /* file size */
    int64_t atime_ns; /* last use (nanoseconds since the epoch) */
} ot_compile_cache_entry;

/* The entries, least recently used first. *out is ot_malloc'd (ot_free; NULL when *n is 0). */
OT_API ot_status ot_compile_cache_list(const ot_compile_cache *c, ot_compile_cache_entry **out,
                                       int64_t *n);
/* Loads every entry (without native code); removes those that do not load (logged as warnings).
 * good / removed may be NULL. */
OT_API ot_status ot_compile_cache_verify(const ot_compile_cache *c, int64_t *good,
                                         int64_t *removed);
/* Removes every entry and leftover temporary file. removed (may be NULL): entries removed. */
OT_API ot_status ot_compile_cache_clear(const ot_compile_cache *c, int64_t *removed);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_COMPILER_H */
