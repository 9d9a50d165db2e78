/* Internal helpers shared by the training sources. */
#ifndef OPTITPU_TRAIN_INTERNAL_H
#define OPTITPU_TRAIN_INTERNAL_H

#include <stdint.h>

/* splitmix64 stream: next 64 bits, a uniform double in [0, 1), a standard normal. */
uint64_t ot_train_rng_next(uint64_t *state);
double ot_train_rng_uniform(uint64_t *state);
double ot_train_rng_normal(uint64_t *state);

#endif
