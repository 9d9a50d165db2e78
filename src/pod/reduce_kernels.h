/* The element kernels of a reduction, owned by src/pod (reduce_kernels.c). The in-process
 * communicator (pod/comm.c, pod/local.c) and the MPI communicator (mpi/mpi.c) both call these,
 * so a collective combines each element identically whichever transport ran it; this is the one
 * pod internal that src/mpi includes. */
#ifndef OT_POD_REDUCE_KERNELS_H
#define OT_POD_REDUCE_KERNELS_H

#include "optitpu/collectives.h"

#include <stddef.h>

/* The dtype a reduction accumulates in: f16/bf16 are widened to f32 so partial sums keep their
 * precision; the others accumulate in themselves. */
static inline ot_dtype ot_pod_acc_dtype(ot_dtype dt) {
    return dt == OT_F16 || dt == OT_BF16 ? OT_F32 : dt;
}

/* dst[i] = op(dst[i], src[i]) for n elements of an accumulation dtype (f32, f64, s32, s64);
 * op is SUM, PROD, MAX or MIN. Integer arithmetic wraps (computed unsigned). */
void ot_pod_combine(void *dst, const void *src, size_t n, ot_dtype dt, ot_redop op);

/* dst[i] = op(a[i], b[i]), the same arithmetic as ot_pod_combine on a copy of a, without the
 * copy (dst overlaps neither input). */
void ot_pod_combine_to(void *dst, const void *src_a, const void *src_b, size_t n, ot_dtype dt,
                       ot_redop op);

/* dst = the n inputs' k elements (accumulation dtype) combined in the tree order: at level mask =
 * 1, 2, 4, ... node v, a multiple of 2 * mask with v + mask < n, combines node v + mask's partial
 * result into its own — per element the order of the tree all-reduce. The first level reads the
 * inputs in place and the last writes dst, so no input is copied. work: (n + 1) / 2 tiles of k
 * elements; dst overlaps neither inputs nor work. */
void ot_pod_tree_combine(void *dst, const void *const *in, int n, size_t k, ot_dtype dt,
                         ot_redop op, void *work);

/* dst = the n f32 inputs' k elements summed in a per-element order that does not depend on how
 * a vector is cut into pieces: OT_ALGO_TREE the tree's (ot_pod_tree_combine), any other rank
 * order (the first two out of place, as the direct all-reduce's tiles). The one combine of the
 * split-phase sharded exchange, in one process (shard_exchange.c) and across processes
 * (src/mpi), so both give each element the same bits. work: as ot_pod_tree_combine's. */
void ot_pod_ordered_sum_f32(float *dst, const float *const *in, int n, size_t k, ot_coll_algo order,
                            float *work);

/* n f16 (dt OT_F16) or bf16 (any other dt) values to f32, and back (ot_f16_to_f32 and friends). */
void ot_pod_widen(float *dst, const void *src, size_t n, ot_dtype dt);
void ot_pod_narrow(void *dst, const float *src, size_t n, ot_dtype dt);

/* MEAN: buf[i] /= n for count elements of an accumulation dtype (C integer division truncates
 * toward zero). */
void ot_pod_divide(void *buf, size_t count, ot_dtype dt, int n);

#endif
