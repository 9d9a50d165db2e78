/* Compiled while loops and conditionals: the condition and the body of each while loop of an
 * executable's entry, and each branch of a conditional, compiled as executables of their own (the
 * whole pipeline: passes, fusion, buffer assignment, native code, nested loops), so that the
 * runtime runs an iteration through the same kernels as top-level code instead of evaluating the
 * body op by op. Built by ot_compile after the native stage and by the loader
 * (ot_executable_deserialize), owned by the executable, freed with it. Read-only once the
 * executable is handed out: safe to read from any thread. */
#ifndef OT_COMPILER_LOOP_H
#define OT_COMPILER_LOOP_H

#include "optitpu/compiler.h"

/* Loops nest at most this deep in compiled form; a loop deeper inside runs in the evaluator
 * (the same results: every kernel is bit-identical to the reference). Bounds the compiler's
 * recursion and the runtime's (one execution frame per level). */
#define CC_LOOP_MAX_DEPTH 4

/* A while loop compiled: both executables take the loop state's array leaves (depth-first, as
 * the while kernel's inputs) as parameters; cond returns one pred, body the next state's leaves
 * (as the kernel's outputs). */
typedef struct cc_loop {
    ot_executable *cond, *body;
    const ot_computation *cond_src; /* the condition compiled (in the executable's module) */
    int ninputs;                    /* the state's leaves */
    bool shared;                    /* another kernel's pair, freed with that kernel's */
    /* bit q (q < 64): the body passes leaf q through unchanged (its output q is donated from
     * parameter q and nothing else writes it), so no iteration writes that buffer */
    uint64_t invariant;
    /* bit q (q < 64): no kernel of the executable reads the loop's output leaf q and it is not
     * a result (a temp nobody reads): with `invariant`, the loop reads that leaf where its input
     * lies and never copies it (a signal passed through a fori_loop) */
    uint64_t unread;
} cc_loop;

/* A conditional compiled: branch b's executable takes the array leaves of the conditional's
 * operand 1 + b (depth first: the kernel's inputs leaf0[b] .. leaf0[b] + its parameter count)
 * and returns the conditional's leaves (the kernel's outputs). Branches are chosen as the
 * evaluator chooses them: a pred selects branch 0 (true) or 1, an index out of range the last. */
typedef struct cc_cond {
    ot_executable **branch; /* nbranch, owned by the executable's branch_exes */
    int *leaf0;
    int nbranch;
} cc_cond;

/* Kernel k's compiled loop, or NULL (not a while loop, or compiled too deep, or its compile
 * failed: then the evaluator runs it). */
const cc_loop *cc_executable_loop(const ot_executable *e, int k);

/* Kernel k's compiled conditional, or NULL (as cc_executable_loop). */
const cc_cond *cc_executable_cond(const ot_executable *e, int k);

/* Compiles the while loops and conditionals of e's kernels with options o at nesting depth
 * `depth` (0 for a top-level executable). Never fails: one that does not compile is logged at
 * debug level and left to the evaluator. Not thread-safe for one executable. */
void cc_compile_loops(ot_executable *e, const ot_compile_options *o, int depth);

/* Frees what cc_compile_loops built for e (ot_executable_free calls it). */
void cc_free_loops(ot_executable *e);

/* ot_compile at nesting depth `depth` (compile.c). */
ot_status cc_compile_at(const ot_module *src, const ot_compile_options *o, int depth,
                        ot_executable **out);

#endif
