/* The compiler's native-code stage as the other folders see it: an executable's native program
 * (src/codegen) is built by ot_compile as its last stage (and by ot_executable_deserialize),
 * kept in the executable and freed with it. */
#ifndef OT_COMPILER_NATIVE_H
#define OT_COMPILER_NATIVE_H

#include "codegen/codegen.h"
#include "optitpu/compiler.h"

/* The executable's native program (kernel k of the program is kernel k of the executable), or
 * NULL when no kernel has native code. Read-only; valid until the executable is freed. Safe to
 * call while a tier-up publishes one (an atomic load). */
const cg_program *cc_executable_native(const ot_executable *e);

/* The tier-up of a module of small fusions. Under OT_NATIVE_AUTO a module whose fusions are all
 * below the size threshold gets no native code at compile time: a module run once (a test, a
 * one-off evaluation) should not pay a C compile for microseconds of interpreting. The run
 * that reaches OPTITPU_CODEGEN_TIER_UP runs of the executable (default 2; 0: never) builds it
 * then, every supported fusion whatever its size, from the disk cache when the units are there,
 * and publishes it for that run and the later ones: a program run again is likely run many
 * times, and native code runs a small fusion ~10x faster than the interpreter. Called by the
 * runtime at the start of each run that may use native code; thread-safe: exactly one run
 * builds, the others meanwhile keep interpreting (the results are the same bits either way).
 * Never fails: an error is logged at debug level and the fusions stay interpreted. */
void cc_executable_tier_up(const ot_executable *e);

/* Builds e's native program under o's native settings, replacing any it had. Never fails: an
 * error is logged as a warning and leaves every fusion to the interpreter. Not thread-safe for
 * one executable (ot_compile and the loader call it before the executable is handed out). */
void cc_native_stage(ot_executable *e, const ot_compile_options *o);

/* d > 0 when kernel k, a fusion, has one output, a temp read by nothing but the
 * dynamic-update-slice kernel k + d as its update, that update is a contiguous run of the
 * operand (the update's dims are the operand's after its first dim of more than one element, 1
 * before it: a scan's `ys[i] = f(...)`), the operand is written before kernel k (its memory may
 * hold another value until then), and no kernel between them reads the operand or writes the
 * starts; else 0. Where the slice runs in place (its operand's memory is its output's), the
 * runtime may have kernel k write the update where it lands and skip kernel k + d: the same
 * values in the same places (XLA fuses such an update into its producer's loop). */
int cc_executable_update_writer(const ot_executable *e, int k);

#endif
