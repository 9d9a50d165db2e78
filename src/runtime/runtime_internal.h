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

#endif
