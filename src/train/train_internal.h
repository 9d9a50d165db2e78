/* Internal helpers shared by the training sources. */
#ifndef OPTITPU_TRAIN_INTERNAL_H
#define OPTITPU_TRAIN_INTERNAL_H

#include <stdint.h>

/* splitmix64 stream: next 64 bits, a uniform double in [0, 1), a standard normal. */
uint64_t ot_train_rng_next(uint64_t *state);
double ot_train_rng_uniform(uint64_t *state);
double ot_train_rng_normal(uint64_t *state);

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
