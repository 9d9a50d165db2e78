/* Runtime internals shared by the engine, devices, backend and profiler. */
#ifndef OT_RUNTIME_INTERNAL_H
#define OT_RUNTIME_INTERNAL_H

#include "optitpu/collectives.h"
#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "optitpu/runtime.h"

#include <string.h>

/* The pool listener that forwards a device's memory events to its profile. */
void rt_profile_memory_listener(void *ud, const char *kind, int64_t bytes, const ot_mem_stats *s);

/* A device's kernel launch (ot_device_vtable.launch). */
typedef ot_status (*rt_launch_fn)(void *ctx, ot_launch *run, const ot_executable *exe, int k,
                                  void *const *in, void *const *out);
/* The host device's launch: ot_launch_host (ctx unused). */
ot_status rt_host_launch(void *ctx, ot_launch *run, const ot_executable *exe, int k,
                         void *const *in, void *const *out);
/* The generic execution loop over memory the caller placed (arena of ot_executable_arena_size
 * bytes, params[k] / outs[k] of each slot's size, all memory the launch can use): every kernel in
 * order through launch(launch_ctx, ...), with the deadline, cancellation, profile and statistics
 * of ot_execute_on_host. */
ot_status rt_execute_kernels(const ot_executable *exe, void *arena, void *const *params,
                             void *const *outs, const ot_run_options *o, int device_index,
                             rt_launch_fn launch, void *launch_ctx, ot_run_result *res);

#endif
