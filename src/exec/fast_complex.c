/* The fast kernel of elementwise ops on complex values (kernels.h): the reference's arithmetic
 * (complex.c: ex_complex_elementwise) on ranges of elements split over the pool, without the
 * reference kernel's copies. Each element is computed by the same code whatever range it falls
 * in, so the bits are the reference's on any thread count. */
#include "exec/fast_internal.h"

#include <stdatomic.h>

typedef struct cx_job {
    const ot_instr *i;
    int nin;
    const char *in[3];
    size_t ies[3]; /* bytes of an element of each input */
    char *y;
    size_t yes;
    bool ftz;
    _Atomic int failed;
} cx_job;

static void cx_range(void *arg, int64_t b, int64_t e, int ith) {
    (void)ith;
    cx_job *j = arg;
    const void *in[3] = {NULL, NULL, NULL};
    for (int k = 0; k < j->nin; k++) in[k] = j->in[k] + (size_t)b * j->ies[k];
    bool ftz = ex_ftz;
    ex_ftz = j->ftz; /* the run's mode on this thread (flushes are the reference's) */
    if (ex_complex_elementwise(j->i, in, j->y + (size_t)b * j->yes, e - b) != OT_OK)
        atomic_store(&j->failed, 1);
    ex_ftz = ftz;
}

/* The ops ex_complex_elementwise runs element by element on operands of the output's size. */
static bool cx_op(const ot_instr *i) {
    switch (i->opcode) {
    case OT_OP_ADD:
    case OT_OP_SUBTRACT:
    case OT_OP_MULTIPLY:
    case OT_OP_DIVIDE:
    case OT_OP_NEGATE:
    case OT_OP_ABS:
    case OT_OP_EXP:
    case OT_OP_REAL:
    case OT_OP_IMAG:
    case OT_OP_COMPLEX:
    case OT_OP_COPY: return true;
    case OT_OP_CONVERT: return ot_dtype_is_complex(i->shape.array.dtype);
    case OT_OP_COMPARE: return i->attrs->cmp_dir == OT_CMP_EQ || i->attrs->cmp_dir == OT_CMP_NE;
    default: return false;
    }
}

ot_status ex_fast_complex(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                          const ex_leaf *ins, void *out, const ex_leaf *os, bool *done) {
    *done = false;
    if (i->shape.kind != OT_IR_ARRAY || nin < 1 || nin > 3 || nin != i->noperands || !cx_op(i))
        return OT_OK;
    int64_t n = ot_shape_numel_unchecked(os->shape);
    cx_job j;
    memset(&j, 0, sizeof j);
    j.i = i;
    j.nin = nin;
    j.y = out;
    j.yes = ot_dtype_size(os->shape->dtype);
    j.ftz = c->ftz;
    int64_t bytes = os->nbytes;
    for (int k = 0; k < nin; k++) {
        /* element e of every input is read before element e is written: an output that is
         * exactly an input is fine, a partial overlap is not */
        if (ot_shape_numel_unchecked(ins[k].shape) != n) return OT_OK;
        if (in[k] != out && ex_overlaps(out, os->nbytes, in[k], ins[k].nbytes)) return OT_OK;
        j.in[k] = in[k];
        j.ies[k] = ot_dtype_size(ins[k].shape->dtype);
        bytes += ins[k].nbytes;
    }
    if (n == 0) {
        *done = true;
        return OT_OK;
    }
    ex_par_for(c, n, bytes, cx_range, &j);
    *done = true;
    if (atomic_load(&j.failed))
        return ot_error(OT_ERR_OUT_OF_MEMORY, "%s: %s on %s: out of memory", EX_NAME(i),
                        ot_opcode_name(i->opcode), ot_dtype_name(os->shape->dtype));
    c->fast_run++;
    return OT_OK;
}
