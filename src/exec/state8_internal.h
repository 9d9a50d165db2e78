/* The 8-bit block-wise optimizer update's pieces shared by its reference kernel (state8.c) and
 * its fast twin (fast_state8.c): the parsed configuration, the element update written once over
 * an arithmetic (the reference's flushing functions, or plain float operations under the CPU's
 * FTZ/DAZ modes), and the exact quantizer. exec only. */
#ifndef OT_EXEC_STATE8_INTERNAL_H
#define OT_EXEC_STATE8_INTERNAL_H

#include "exec/fast_internal.h"
#include "exec/state8.h"

#include <stdint.h>

enum { EX_S8_ADAM, EX_S8_LION, EX_S8_SGD };
#define EX_S8_MAX_SLOTS   2
#define EX_S8_MAX_SCALARS 7

typedef struct ex_s8 {
    int rule, nslots, nscalars;
    bool maximize, wd_coupled, wd_decoupled, wd, nesterov, first;
    bool sgn[EX_S8_MAX_SLOTS];
    float sc[EX_S8_MAX_SCALARS];
    int64_t len, nblocks;
} ex_s8;

/* Checks i (target, backend_config, operand and result shapes) and fills k's rule, flags and
 * sizes; INVALID_ARGUMENT naming the problem. */
ot_status ex_s8_parse(const ot_instr *i, ex_s8 *k);
/* Reads the scalar operands: sc[q] points at scalar operand q (after the slots). */
void ex_s8_read_scalars(ex_s8 *k, const void *const *sc);
/* The map as a table (built once per process; thread-safe). */
const float *ex_q8_table(bool sgn);
/* The code of xn (a value divided by its block's absmax) exactly as the graph quantizer computes
 * it (src/optim/state_quant.c), z: flush subnormals as the reference. */
uint8_t ex_q8_code_exact(const float *map, float xn, bool sgn, bool z);

/* One element's update by rule (k->rule; a constant where the caller wants one loop per rule): p,
 * g and the slots s[] in, the new parameter returned and the new slots in s[]. REF selects the
 * reference's flushing arithmetic (z its FTZ flag); otherwise plain float operations, which give
 * the same bits under the CPU's FTZ/DAZ modes when z (or without them when not). The operation
 * order is the graph's (src/optim/builtins.c). */
#define S8_ADD(a, b) (REF ? add_f(a, b, z) : (a) + (b))
#define S8_SUB(a, b) (REF ? sub_f(a, b, z) : (a) - (b))
#define S8_MUL(a, b) (REF ? mul_f(a, b, z) : (a) * (b))
#define S8_DIV(a, b) (REF ? div_f(a, b, z) : (a) / (b))
#define S8_SQRT(a)   (REF ? fz_f(sqrtf(fz_f(a, z)), z) : sqrtf(a))
static inline float ex_s8_sign(float x) {
    return (x != x || x == 0) ? x : x < 0 ? -1.0f : 1.0f;
}
static inline float ex_s8_element(const ex_s8 *k, const int rule, const bool REF, const bool z,
                                  float p, float g, float *s) {
    const float *c = k->sc;
    switch (rule) {
    case EX_S8_ADAM: {
        if (k->maximize) g = -g;
        if (k->wd_coupled) g = S8_ADD(g, S8_MUL(c[6], p));
        if (k->wd_decoupled) p = S8_MUL(p, c[6]);
        float m = S8_ADD(s[0], S8_MUL(c[0], S8_SUB(g, s[0])));
        float v = S8_ADD(S8_MUL(s[1], c[1]), S8_MUL(c[2], S8_MUL(g, g)));
        float den = S8_ADD(S8_DIV(S8_SQRT(v), c[3]), c[4]);
        s[0] = m;
        s[1] = v;
        return S8_ADD(p, S8_MUL(c[5], S8_DIV(m, den)));
    }
    case EX_S8_LION: {
        float u = ex_s8_sign(S8_ADD(S8_MUL(c[0], g), S8_MUL(c[1], s[0])));
        s[0] = S8_ADD(S8_MUL(c[2], g), S8_MUL(c[3], s[0]));
        if (k->wd) u = S8_ADD(u, S8_MUL(c[4], p));
        return S8_ADD(p, S8_MUL(u, c[5]));
    }
    default: { /* EX_S8_SGD */
        float d = k->maximize ? -g : g;
        if (k->wd) d = S8_ADD(d, S8_MUL(c[2], p));
        float buf = k->first ? d : S8_ADD(S8_MUL(s[0], c[0]), S8_MUL(c[1], d));
        s[0] = buf;
        d = k->nesterov ? S8_ADD(d, S8_MUL(c[0], buf)) : buf;
        return S8_ADD(p, S8_MUL(c[3], d));
    }
    }
}

#endif
