/*
 * optitpu exec: reference evaluation of IR modules and single instructions with XLA semantics.
 *
 * The reference kernels here are the oracle every fast path is compared against: written for
 * clarity and exactness, deterministic (reductions, dots and convolutions combine in one fixed
 * order), independent of thread count. docs/exec.md lists each semantic decision and the XLA rule
 * it follows (NaN propagation, conversions, integer division, shifts, ...).
 *
 * Usage:
 *
 *     ot_value args[2];
 *     OT_CHECK(ot_value_from_tensor(&args[0], &x));        // copies x
 *     OT_CHECK(ot_value_from_tensor(&args[1], &y));
 *     ot_value result;
 *     ot_status s = ot_evaluate(module, args, 2, NULL, &result);
 *     if (s == OT_OK) {
 *         const ot_value *r0 = ot_value_leaf(&result, 0);  // first array of the result
 *         ...
 *         ot_value_release(&result);
 *     }
 *     ot_value_release(&args[0]);
 *     ot_value_release(&args[1]);
 *
 * Ownership: an ot_value owns its array storage and its tuple elements; ot_value_release frees
 * them (an empty or released value is a no-op). On failure every output value is left empty
 * (kind OT_IR_TOKEN, nothing allocated) and nothing is leaked.
 *
 * Thread safety: evaluation only reads the module; many threads may evaluate the same module at
 * once. A communicator hook is used from the calling thread only.
 */
#ifndef OPTITPU_EXEC_H
#define OPTITPU_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/core.h"
#include "optitpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Values: an array, a tuple of values, or a token
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_value ot_value;
struct ot_value {
    ot_ir_shape_kind kind; /* OT_IR_ARRAY, OT_IR_TUPLE or OT_IR_TOKEN (also: empty) */
    ot_tensor array;       /* kind == OT_IR_ARRAY: owned, row-major */
    int ntuple;            /* kind == OT_IR_TUPLE */
    ot_value *tuple;       /* kind == OT_IR_TUPLE: ntuple owned elements */
};

/* An empty value (a token; nothing allocated). */
OT_API ot_value ot_value_empty(void);
/* Frees everything v owns and leaves it empty. NULL is a no-op. */
OT_API void ot_value_release(ot_value *v);
/* A zeroed array of shape s. */
OT_API ot_status ot_value_alloc_array(ot_value *out, const ot_shape *s);
/* A copy of a tensor (owned or borrowed) as an array value. */
OT_API ot_status ot_value_from_tensor(ot_value *out, const ot_tensor *t);
/* A tuple of n empty elements, to be filled by the caller. */
OT_API ot_status ot_value_tuple(ot_value *out, int n);
/* A zeroed value of an IR shape (tuples recursively). */
OT_API ot_status ot_value_alloc_shape(ot_value *out, const ot_ir_shape *s);
/* Deep copy. */
OT_API ot_status ot_value_copy(ot_value *out, const ot_value *src);
/* Deep equality of structure, dtypes, dims and bytes. */
OT_API bool ot_value_equal(const ot_value *a, const ot_value *b);
/* True when v's structure, dtypes and dims equal shape s. */
OT_API bool ot_value_matches(const ot_value *v, const ot_ir_shape *s);
/* Number of arrays in v (depth-first, tuples flattened) and the i-th of them (NULL if none). */
OT_API int ot_value_leaf_count(const ot_value *v);
OT_API const ot_value *ot_value_leaf(const ot_value *v, int i);

/* ---------------------------------------------------------------------------------------------
 * Communicator hook for collective ops, replica-id and partition-id.
 *
 * exec does not depend on the pod layer; the runtime adapts its communicator (collectives.h) to
 * this small callback struct. The evaluator does every reduction itself, with the op's reducer
 * computation, in the group's order, so results are identical on every member. With no hook
 * (NULL) the evaluator has single-device semantics: replica-id and partition-id are 0, and a
 * collective whose group has one member is an identity (all-gather/reduce-scatter/all-to-all of
 * one member, all-reduce of one value); a group with more members fails with
 * OT_ERR_FAILED_PRECONDITION "needs a communicator".
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_exec_comm {
    void *ctx;
    int64_t replica_id;     /* this device's replica id */
    int64_t partition_id;   /* this device's partition id */
    int64_t replica_count;  /* devices taking part (replicas); >= 1 */
    int64_t num_partitions; /* >= 1 */
    /* Required. Every member of the group ids[0..n) calls this with the same ids and bytes; on
     * return recv holds n * bytes: the send buffers of ids[0], ids[1], ... in that order (this
     * device's own among them). ids are global device ids (replica_id * num_partitions +
     * partition_id), in XLA's participant order: the evaluator maps the op's replica_groups
     * (and collective-permute's pairs) to them by XLA's group modes (ot_collective_mode_of in
     * ir.h: cross-replica, cross-partition, cross-replica-and-partition, flattened ids). */
    ot_status (*exchange)(void *ctx, const int64_t *ids, int n, const void *send, size_t bytes,
                          void *recv);
} ot_exec_comm;

/* ---------------------------------------------------------------------------------------------
 * Evaluation
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_eval_options {
    const ot_exec_comm *comm;     /* NULL: single device */
    int64_t max_while_iterations; /* a while loop running longer fails (OUT_OF_RANGE); 0: none */
    int64_t max_call_depth;       /* nested call/while/conditional depth limit (default 256) */
    /* false (default): f32/f64 arithmetic flushes subnormal inputs and results to signed zero,
     * as XLA's CPU backend does (FTZ/DAZ; see docs/exec.md for which ops); true: IEEE gradual
     * underflow everywhere, as XLA's HloEvaluator (constant folding) does. */
    bool keep_denormals;
    /* Polled before every iteration of every while loop (nested ones too, inside calls,
     * conditionals and fusions); a status other than OT_OK stops the evaluation with that status,
     * the loop and the iteration named ("w.3: iteration 1200: ..."). The runtime checks its
     * deadline and cancellation flag here. NULL: never polled. */
    ot_status (*poll)(void *ctx);
    void *poll_ctx;
} ot_eval_options;

OT_API ot_eval_options ot_eval_options_default(void);

/* Evaluates the module's entry computation on nargs arguments (one per entry parameter, in
 * parameter order; each must match the parameter's shape and dtype exactly) and stores its root
 * value in *result (a tuple when the root is a tuple). Errors name the offending parameter or
 * instruction: INVALID_ARGUMENT for a wrong argument count, SHAPE_MISMATCH for a wrong shape or
 * dtype, FAILED_PRECONDITION for an elided constant ({...}) that is executed,
 * UNSUPPORTED_HARDWARE for a custom-call whose target is code for a TPU or a GPU (Pallas/Mosaic
 * "tpu_custom_call", cuBLAS/cuDNN/Triton/XLA GPU kernels, jaxlib's CUDA and ROCm calls: they need
 * that hardware), UNIMPLEMENTED for any other custom-call (naming its target; XLA CPU's "TopK"
 * is no custom-call here: the HLO parser reads it as topk). opts NULL: defaults. */
OT_API ot_status ot_evaluate(const ot_module *m, const ot_value *args, int nargs,
                             const ot_eval_options *opts, ot_value *result);
/* The same with array arguments given as tensors (copied). */
OT_API ot_status ot_evaluate_tensors(const ot_module *m, const ot_tensor *args, int nargs,
                                     const ot_eval_options *opts, ot_value *result);
/* Evaluates one computation of a module on the given arguments. */
OT_API ot_status ot_evaluate_computation(const ot_computation *c, const ot_value *args, int nargs,
                                         const ot_eval_options *opts, ot_value *result);

/*
 * Evaluates a single instruction on literal operand values (one per operand, matching the
 * operands' shapes), as constant folding needs: *out gets the instruction's result. Called
 * computations (reducers, comparators, loop bodies) are evaluated as needed. A parameter has no
 * value here (INVALID_ARGUMENT); a constant needs no operands and returns its literal.
 */
OT_API ot_status ot_evaluate_instr(const ot_instr *i, const ot_value *operands, int noperands,
                                   const ot_eval_options *opts, ot_value *out);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_EXEC_H */
