/* The reference evaluator's raw SLEEF calls (src/exec/vmath.h): the scalar variant of the
 * deterministic class the CPU runs generated code in, finz (FMA) or cinz (no FMA), so that
 * generated code's vector variants of the same class give the same bits. Thread-safe (pure
 * functions). */
#include "exec/vmath.h"

#include <stdint.h>

/* x86: FMA decided at run time (generated code is compiled with -march=native, which defines
 * __FMA__ on the same CPUs); elsewhere (AArch64) FMA is part of the base architecture. */
#if defined(__x86_64__) || defined(__i386__)
#define VM_FMA() __builtin_cpu_supports("fma")
#else
#define VM_FMA() 1
#endif

/* SLEEF's scalar variants, declared here: sleef.h declares the purecfma ones only where the
 * translation unit itself is compiled for FMA, and this one is not (it runs on every x86-64) */
#define VM_DECL_(name, stem, arity, T) VM_DECL##arity##_(stem, T)
#define VM_DECL1_(stem, T)                                                                         \
    T Sleef_finz_##stem##1_u10purecfma(T);                                                         \
    T Sleef_cinz_##stem##1_u10purec(T);
#define VM_DECL2_(stem, T)                                                                         \
    T Sleef_finz_##stem##1_u10purecfma(T, T);                                                      \
    T Sleef_cinz_##stem##1_u10purec(T, T);
OT_VMATH_LIST(VM_DECL_)

#define VM_RAW_(name, stem, arity, T) VM_RAW##arity##_(name, stem, T)
#define VM_RAW1_(name, stem, T)                                                                    \
    T ot_vmraw_##name(T x) {                                                                       \
        return VM_FMA() ? Sleef_finz_##stem##1_u10purecfma(x) : Sleef_cinz_##stem##1_u10purec(x);  \
    }
#define VM_RAW2_(name, stem, T)                                                                    \
    T ot_vmraw_##name(T a, T b) {                                                                  \
        return VM_FMA() ? Sleef_finz_##stem##1_u10purecfma(a, b)                                   \
                        : Sleef_cinz_##stem##1_u10purec(a, b);                                     \
    }
OT_VMATH_REF_DECLS
OT_VMATH_LIST(VM_RAW_)
