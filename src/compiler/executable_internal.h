/* The executable's internals, shared by compile.c and serialize.c. */
#ifndef OT_EXECUTABLE_INTERNAL_H
#define OT_EXECUTABLE_INTERNAL_H

#include "compiler_internal.h"
#include "loop.h"
#include "native.h"
#include "scratch.h"

#include <stdatomic.h>

struct ot_executable {
    ot_module *mod;
    ot_instr **order; /* the entry schedule */
    int64_t norder;
    ot_kernel *k;
    int64_t nk, kcap;
    ot_slot *s;
    int64_t ns, scap;
    int32_t *io; /* pooled kernel inputs and outputs */
    int64_t nio, iocap;
    int32_t *param_slot;
    int nparams;
    int32_t *out_slot;
    int nout;
    int64_t arena, peak, flops, bytes;
    uint8_t fp[32];
    ot_pass_manager *pm;
    ot_compile_options opts; /* strings point into the buffers below */
    char target[256], passes[1024], disable[1024];
    /* native code for the loop fusions (src/codegen), built by cc_native_stage; NULL: none */
    cg_program *native; /* set again once by the tier-up: read with cc_executable_native */
    uint64_t native_ns; /* the native stage's wall time */
    /* the tier-up (native.h): runs left until it builds native code for a module whose fusions
     * were all below the size threshold (0: none pending), and the compiler to build it with */
    _Atomic int64_t tier_left;
    char native_cc[4096];
    /* the kernels' scratch kept between runs (compiler/scratch.h); zeroed = empty */
    ex_scratch_cache scratch;
    /* the compiled loops' and conditionals' state buffers kept between runs (scratch.h) */
    ex_scratch_cache state;
    /* per kernel: its while loop compiled (loop.h), or zeroed; NULL: no loop compiled */
    cc_loop *loops;
    /* per kernel: its conditional's branches compiled (loop.h), or zeroed; NULL: none compiled;
     * the branch executables, each compiled once per computation, owned here */
    cc_cond *conds;
    ot_executable **branch_exes;
    int64_t nbranch_exes;
    /* per kernel: the distance to the dynamic-update-slice whose update it writes
     * (cc_executable_update_writer), or 0; NULL: none does */
    uint8_t *update_writer;
};

/* Builds kernels, slots, aliasing and buffer assignment for module m (taken over: owned by the
 * executable, or freed on failure) scheduled as order[0..n) (taken over likewise). */
ot_status cc_build_executable(ot_module *m, ot_instr **order, int64_t n,
                              const ot_compile_options *o, ot_executable **out);

/* The executable file's format version (serialize.c); part of the compilation cache's key. */
#define CC_EXECUTABLE_FORMAT_VERSION 1u

/* ot_executable_deserialize, building native code with native's native / native_unit_bytes /
 * native_cc (NULL: the defaults). native's strings are read during the call only. */
ot_status cc_executable_deserialize(const void *buf, size_t len, const ot_compile_options *native,
                                    ot_executable **out);

#endif
