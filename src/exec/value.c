/* Values: arrays, tuples and tokens, with deep copy and release. */
#include "exec/exec_internal.h"

/* The empty value is copied from memory: GCC compiled a memset of the 120-byte value (or field
 * stores, or a constant) into `rep stos` or small stores read back as 16-byte words, both slow
 * (store forwarding): about a fifth of a tiny module's run, which makes a few hundred. The
 * template is read-only. */
static const ot_value g_empty_value = {.kind = OT_IR_TOKEN};

ot_value ot_value_empty(void) {
    const ot_value *t = &g_empty_value;
#if defined(__GNUC__)
    __asm__("" : "+r"(t)); /* read it, do not fold it into stores */
#endif
    return *t;
}

void ot_value_release(ot_value *v) {
    if (!v) return;
    if (v->kind == OT_IR_ARRAY) ot_tensor_release(&v->array);
    if (v->kind == OT_IR_TUPLE && v->tuple) {
        for (int i = 0; i < v->ntuple; i++) ot_value_release(&v->tuple[i]);
        ot_free(v->tuple);
    }
    *v = ot_value_empty();
}

ot_status ot_value_alloc_array(ot_value *out, const ot_shape *s) {
    *out = ot_value_empty();
    ot_value v = ot_value_empty();
    v.kind = OT_IR_ARRAY;
    OT_CHECK(ot_tensor_alloc(&v.array, s));
    *out = v;
    return OT_OK;
}

ot_status ot_value_from_tensor(ot_value *out, const ot_tensor *t) {
    *out = ot_value_empty();
    if (!t || (!t->data && ot_shape_nbytes_unchecked(&t->shape) > 0))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "value from tensor: tensor has no data");
    ot_value v;
    OT_CHECK(ot_value_alloc_array(&v, &t->shape));
    if (v.array.nbytes) memcpy(v.array.data, t->data, v.array.nbytes);
    *out = v;
    return OT_OK;
}

ot_status ot_value_tuple(ot_value *out, int n) {
    *out = ot_value_empty();
    if (n < 0) return ot_error(OT_ERR_INVALID_ARGUMENT, "value tuple: negative size %d", n);
    ot_value v = ot_value_empty();
    v.kind = OT_IR_TUPLE;
    v.ntuple = n;
    if (n) {
        v.tuple = ot_malloc((size_t)n * sizeof *v.tuple);
        if (!v.tuple) return ot_error(OT_ERR_OUT_OF_MEMORY, "value tuple: out of memory");
        for (int i = 0; i < n; i++) v.tuple[i] = ot_value_empty();
    }
    *out = v;
    return OT_OK;
}

ot_status ot_value_alloc_shape(ot_value *out, const ot_ir_shape *s) {
    *out = ot_value_empty();
    if (s->kind == OT_IR_TOKEN) return OT_OK;
    if (s->kind == OT_IR_ARRAY) return ot_value_alloc_array(out, &s->array);
    ot_value v;
    OT_CHECK(ot_value_tuple(&v, s->ntuple));
    for (int i = 0; i < s->ntuple; i++) {
        ot_status st = ot_value_alloc_shape(&v.tuple[i], &s->tuple[i]);
        if (st != OT_OK) {
            ot_value_release(&v);
            return st;
        }
    }
    *out = v;
    return OT_OK;
}

ot_status ot_value_copy(ot_value *out, const ot_value *src) {
    *out = ot_value_empty();
    if (src->kind == OT_IR_TOKEN) return OT_OK;
    if (src->kind == OT_IR_ARRAY) return ot_value_from_tensor(out, &src->array);
    ot_value v;
    OT_CHECK(ot_value_tuple(&v, src->ntuple));
    for (int i = 0; i < src->ntuple; i++) {
        ot_status st = ot_value_copy(&v.tuple[i], &src->tuple[i]);
        if (st != OT_OK) {
            ot_value_release(&v);
            return st;
        }
    }
    *out = v;
    return OT_OK;
}

bool ot_value_equal(const ot_value *a, const ot_value *b) {
    if (a->kind != b->kind) return false;
    if (a->kind == OT_IR_TOKEN) return true;
    if (a->kind == OT_IR_ARRAY)
        return ot_shape_equal(&a->array.shape, &b->array.shape) &&
               (a->array.nbytes == 0 || memcmp(a->array.data, b->array.data, a->array.nbytes) == 0);
    if (a->ntuple != b->ntuple) return false;
    for (int i = 0; i < a->ntuple; i++)
        if (!ot_value_equal(&a->tuple[i], &b->tuple[i])) return false;
    return true;
}

bool ot_value_matches(const ot_value *v, const ot_ir_shape *s) {
    if (v->kind != s->kind) return false;
    if (v->kind == OT_IR_TOKEN) return true;
    if (v->kind == OT_IR_ARRAY) return ot_shape_equal(&v->array.shape, &s->array);
    if (v->ntuple != s->ntuple) return false;
    for (int i = 0; i < v->ntuple; i++)
        if (!ot_value_matches(&v->tuple[i], &s->tuple[i])) return false;
    return true;
}

int ot_value_leaf_count(const ot_value *v) {
    if (v->kind == OT_IR_ARRAY) return 1;
    if (v->kind != OT_IR_TUPLE) return 0;
    int n = 0;
    for (int i = 0; i < v->ntuple; i++) n += ot_value_leaf_count(&v->tuple[i]);
    return n;
}

static const ot_value *leaf_at(const ot_value *v, int *i) {
    if (v->kind == OT_IR_ARRAY) return (*i)-- == 0 ? v : NULL;
    if (v->kind != OT_IR_TUPLE) return NULL;
    for (int k = 0; k < v->ntuple; k++) {
        const ot_value *r = leaf_at(&v->tuple[k], i);
        if (r) return r;
        if (*i < 0) return NULL;
    }
    return NULL;
}

const ot_value *ot_value_leaf(const ot_value *v, int i) {
    if (!v || i < 0) return NULL;
    return leaf_at(v, &i);
}
