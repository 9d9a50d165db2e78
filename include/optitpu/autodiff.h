/*
 * optitpu autodiff: reverse-mode automatic differentiation over the IR. Given a module whose
 * entry computes a scalar loss (or any outputs, for a vector-Jacobian product), builds a new
 * module that computes the outputs and the gradients with respect to chosen entry parameters in
 * one graph: the forward instructions are kept, and the reverse pass is built after them from
 * per-opcode rules that follow JAX's (docs/autodiff.md lists every rule and convention).
 *
 * Usage:
 *
 *     // m: entry (w: f32[4,3], x: f32[8,4]) -> f32[] loss
 *     int64_t wrt[] = {0};
 *     ot_grad_options o = ot_grad_options_default();       // the root is the loss
 *     ot_module *g = NULL;
 *     OT_CHECK(ot_grad(m, wrt, 1, &o, &g));
 *     // g: entry (w, x) -> (loss, d loss / d w)
 *     ot_value r;
 *     OT_CHECK(ot_evaluate(g, args, 2, NULL, &r));           // r.tuple[0] loss, r.tuple[1] grad
 *     ot_module_free(g);
 *
 * Ownership: the input module is only read (it is cloned; traversal stamps are written, so do not
 * run another traversal of the same module concurrently). *out is a new finalized module owned by
 * the caller (free with ot_module_free); on failure *out is NULL and nothing is leaked.
 *
 * What is differentiated: instructions on a path from a wrt parameter to a differentiated output
 * through floating-point values. Integer, pred and token values, iota, constants and comparisons
 * carry no gradient. Calls and fusions are inlined first; get-tuple-element of a tuple is
 * forwarded. An instruction on such a path with no rule (while, conditional, sort, custom-call,
 * collectives, ...) is OT_ERR_UNIMPLEMENTED naming its opcode.
 *
 * Thread safety: different modules may be differentiated concurrently.
 */
#ifndef OPTITPU_AUTODIFF_H
#define OPTITPU_AUTODIFF_H

#include <stdint.h>

#include "optitpu/core.h"
#include "optitpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ot_grad_options {
    int loss_index; /* the entry root is a tuple and element loss_index is the scalar loss; -1: the
                       root itself is the scalar loss */
} ot_grad_options;

OT_API ot_grad_options ot_grad_options_default(void); /* loss_index -1 */

/* Builds a new finalized module whose entry computation takes the same parameters as m's entry and
 * returns a tuple: every element of m's root (the root itself when it is not a tuple), followed by
 * d loss / d parameter(wrt[k]) for k = 0..nwrt-1 (each with that parameter's shape and dtype).
 * The loss must be a floating rank-0 array. Errors: INVALID_ARGUMENT for bad wrt/loss_index (say
 * which: out of range, duplicate, not a floating array parameter, loss not a floating scalar),
 * UNIMPLEMENTED naming the opcode when an instruction on the path from a wrt parameter to the loss
 * has no rule. o NULL: defaults. */
OT_API ot_status ot_grad(const ot_module *m, const int64_t *wrt, int nwrt, const ot_grad_options *o,
                         ot_module **out);

/* Vector-Jacobian product: a new module whose entry takes m's parameters followed by one cotangent
 * parameter per array leaf of m's root (depth-first order, each with that leaf's shape); returns a
 * tuple of every root leaf (primal outputs) followed by the cotangent of each wrt parameter.
 * Cotangents of non-floating leaves are accepted and ignored (they carry no gradient). */
OT_API ot_status ot_vjp(const ot_module *m, const int64_t *wrt, int nwrt, ot_module **out);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_AUTODIFF_H */
