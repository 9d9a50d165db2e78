/* Internal helpers shared by the training sources. */
#ifndef OPTITPU_TRAIN_INTERNAL_H
#define OPTITPU_TRAIN_INTERNAL_H

#include <stdint.h>

#include "optitpu/core.h"

/* splitmix64 stream: next 64 bits, a uniform double in [0, 1), a standard normal. */
uint64_t ot_train_rng_next(uint64_t *state);
double ot_train_rng_uniform(uint64_t *state);
double ot_train_rng_normal(uint64_t *state);

/* ot_dataset_batch_indices with the epoch's permutation kept between calls: perm (n entries) holds
 * the permutation of epoch *perm_epoch (-1: none yet) and is redrawn only when `step` is in another
 * epoch, so a step costs a copy of its batch instead of a shuffle of the whole set (8 us a step for
 * the 1,437 digits here). The indices are those of ot_dataset_batch_indices. Not thread-safe on
 * one perm. */
ot_status ot_train_batch_indices(int64_t n, int64_t batch, uint64_t seed, int64_t step,
                                 int64_t *perm, int64_t *perm_epoch, int64_t *idx);

/* What one step's gradient all-reduce may have to wait for. A member entering it waits for the
 * slowest member to finish its step; the replicas of a process share its CPU, so that can be every
 * local replica's step run one after another, plus the leader's extra work (evaluation, checkpoint
 * snapshot), then the all-reduce's own copies. */
typedef struct ot_train_step_cost {
    int local_replicas;      /* replicas sharing this process's CPU */
    int members;             /* replicas in the all-reduce (every process's) */
    int64_t allreduce_bytes; /* one member's buffer */
    double replica_flops;    /* one replica's step: forward/backward and optimizer update */
    double replica_bytes;    /* one replica's step: bytes its kernels read and write, its copies */
    double leader_flops;     /* the leader's extra: evaluation */
    double leader_bytes;     /* the leader's extra: evaluation, checkpoint snapshot */
} ot_train_step_cost;

/* The all-reduce deadline: a base that covers scheduling and small models, plus that work at
 * rates far below this host's (a loaded, memory-starved machine must not time out a model that
 * memory admission let in); capped at 7 days. */
#define OT_TRAIN_ALLREDUCE_BASE_S 30.0
#define OT_TRAIN_SLOW_FLOPS       2.5e8 /* operations per second */
#define OT_TRAIN_SLOW_BYTES       2.5e8 /* bytes per second */
int64_t ot_train_allreduce_timeout_ns(const ot_train_step_cost *c);

#endif
