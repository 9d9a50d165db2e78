/* An executable's kernel scratch cache as the runtime sees it: the fast kernels' scratch buffers
 * (exec/kernels.h, ex_scratch_cache) kept between runs of one executable, so that a run does not
 * allocate and fault in its im2col and transpose buffers again. Owned by the executable, freed by
 * ot_executable_free; at most EX_SCRATCH_SLOTS buffers of at most EX_SCRATCH_KEEP bytes each. */
#ifndef OT_COMPILER_SCRATCH_H
#define OT_COMPILER_SCRATCH_H

#include "exec/kernels.h"
#include "optitpu/compiler.h"

/* e's cache. Thread-safe (ex_scratch_cache): runs of e on different threads may share it; valid
 * until e is freed, which no run may overlap. */
ex_scratch_cache *cc_executable_scratch(const ot_executable *e);

/* e's cache of its compiled while loops' state buffers and conditionals' branch arenas
 * (runtime/execute.c run_loop, run_cond), kept between runs as the scratch is: a loop whose
 * state is written out of place (a 64 MiB state transposed each step) had mapped and faulted in
 * its second state set on every run. Same ownership, bounds and thread safety as the scratch. */
ex_scratch_cache *cc_executable_state_cache(const ot_executable *e);

#endif
