/* The compiler's native-code stage as the other folders see it: an executable's native program
 * (src/codegen) is built by ot_compile as its last stage (and by ot_executable_deserialize),
 * kept in the executable and freed with it. */
#ifndef OT_COMPILER_NATIVE_H
#define OT_COMPILER_NATIVE_H

#include "codegen/codegen.h"
#include "optitpu/compiler.h"

/* The executable's native program (kernel k of the program is kernel k of the executable), or
 * NULL when no kernel has native code. Read-only; valid until the executable is freed. */
const cg_program *cc_executable_native(const ot_executable *e);

/* Builds e's native program under o's native settings, replacing any it had. Never fails: an
 * error is logged as a warning and leaves every fusion to the interpreter. Not thread-safe for
 * one executable (ot_compile and the loader call it before the executable is handed out). */
void cc_native_stage(ot_executable *e, const ot_compile_options *o);

#endif
