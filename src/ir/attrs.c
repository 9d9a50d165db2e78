/* Attributes: deep copies into the module arena, equality and hashing (for CSE), replica groups. */
#include "attr_schema.h"
#include "ir_internal.h"

ot_status ir_shape_copy(ot_module *m, const ot_ir_shape *src, ot_ir_shape *dst) {
    *dst = *src;
    if (src->kind != OT_IR_TUPLE || src->ntuple == 0) {
        if (src->kind == OT_IR_TUPLE) dst->tuple = NULL;
        return OT_OK;
    }
    ot_ir_shape *t = ir_alloc(m, (size_t)src->ntuple * sizeof *t);
    if (!t) return ot_error(OT_ERR_OUT_OF_MEMORY, "shape: out of memory");
    for (int i = 0; i < src->ntuple; i++) OT_CHECK(ir_shape_copy(m, &src->tuple[i], &t[i]));
    dst->tuple = t;
    return OT_OK;
}

static ot_status groups_copy(ot_module *m, const ot_replica_groups *g,
                             const ot_replica_groups **out) {
    if (!g) {
        *out = NULL;
        return OT_OK;
    }
    if (g->ngroups < 0) return ot_error(OT_ERR_INVALID_ARGUMENT, "replica_groups: negative count");
    ot_replica_groups *d = ir_alloc(m, sizeof *d);
    if (!d) return ot_error(OT_ERR_OUT_OF_MEMORY, "attributes: out of memory");
    *d = *g;
    if (g->ngroups) {
        if (!g->offsets || !g->ids)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "replica_groups: offsets or ids missing");
        int64_t *off = ir_memdup(m, g->offsets, (size_t)(g->ngroups + 1) * sizeof(int64_t));
        if (!off) return ot_error(OT_ERR_OUT_OF_MEMORY, "attributes: out of memory");
        int64_t nid = off[g->ngroups];
        if (nid < 0) return ot_error(OT_ERR_INVALID_ARGUMENT, "replica_groups: bad offsets");
        int64_t *ids = ir_memdup(m, g->ids, (size_t)nid * sizeof(int64_t));
        if (!ids && nid) return ot_error(OT_ERR_OUT_OF_MEMORY, "attributes: out of memory");
        d->offsets = off;
        d->ids = ids;
    } else {
        d->offsets = NULL;
        d->ids = NULL;
    }
    *out = d;
    return OT_OK;
}

static ot_status literal_copy(ot_module *m, const ot_literal *src, const ot_literal **out) {
    ot_literal *l = ir_alloc(m, sizeof *l);
    if (!l) return ot_error(OT_ERR_OUT_OF_MEMORY, "attributes: out of memory");
    *l = *src;
    if (!l->elided && l->nbytes) {
        l->data = ir_memdup(m, src->data, (size_t)l->nbytes);
        if (!l->data) return ot_error(OT_ERR_OUT_OF_MEMORY, "constant: out of memory");
    }
    *out = l;
    return OT_OK;
}

static const void *load_ptr(const ot_attrs *a, const ir_attr_field *f) {
    const void *p;
    memcpy(&p, (const char *)a + f->off, sizeof p);
    return p;
}

static int load_count(const ot_attrs *a, const ir_attr_field *f) {
    return (int)ir_attr_load_int((const char *)a + f->count_off, sizeof(int));
}

/* Deep copy of one field, by its kind. */
static ot_status field_copy(ot_module *m, const ir_attr_field *f, int rank, const ot_attrs *src,
                            ot_attrs *dst) {
    const char *s = (const char *)src + f->off;
    char *d = (char *)dst + f->off;
    const void *p = NULL, *q = NULL;
    int64_t n = 1;
    switch ((ir_field_kind)f->kind) {
    case IR_FK_GROUPS: return groups_copy(m, src->groups, &dst->groups);
    case IR_FK_LITERAL: return src->literal ? literal_copy(m, src->literal, &dst->literal) : OT_OK;
    case IR_FK_STRING:
        if ((p = load_ptr(src, f)) != NULL && (q = ir_strdup(m, p)) == NULL)
            return ot_error(OT_ERR_OUT_OF_MEMORY, "attributes: out of memory");
        memcpy(d, &q, sizeof q);
        return OT_OK;
    case IR_FK_DIMS:
    case IR_FK_PAIRS: n = load_count(src, f); goto pointed;
    case IR_FK_PER_DIM: n = rank; goto pointed;
    case IR_FK_WINDOW:
    case IR_FK_DOT:
    case IR_FK_CONV:
    case IR_FK_GATHER:
    case IR_FK_SCATTER:
    pointed:
        if (f->count_off >= 0)
            memcpy((char *)dst + f->count_off, (const char *)src + f->count_off, sizeof(int));
        if ((p = load_ptr(src, f)) != NULL) {
            q = ir_memdup(m, p, (size_t)n * f->elem);
            if (!q) return ot_error(OT_ERR_OUT_OF_MEMORY, "attributes: out of memory");
        }
        memcpy(d, &q, sizeof q);
        return OT_OK;
    case IR_FK_PRECISION:
        memcpy((char *)dst + f->count_off, (const char *)src + f->count_off, sizeof(int));
        memcpy(d, s, f->size);
        return OT_OK;
    default: memcpy(d, s, f->size); return OT_OK; /* scalars */
    }
}

ot_status ir_attrs_copy(ot_module *m, ot_opcode op, int rank, const ot_attrs *src, ot_attrs *dst) {
    memset(dst, 0, sizeof *dst);
    /* the fields op's schema rows fill (backend_config: every op's) */
    bool used[IR_F_COUNT] = {0};
    int nr;
    const uint8_t *rows = ir_attr_op_rows(op, &nr);
    for (int k = 0; k < nr; k++) {
        const ir_attr_row *r = &ir_attr_rows[rows[k]];
        if (r->field < IR_F_COUNT) used[r->field] = true;
    }
    for (int f = 0; f < IR_F_COUNT; f++)
        if (used[f]) OT_CHECK(field_copy(m, &ir_attr_fields[f], rank, src, dst));
    return OT_OK;
}

/* ---- equality and hash ---- */

static bool str_eq(const char *a, const char *b) {
    if (!a || !b) return a == b;
    return strcmp(a, b) == 0;
}

static bool mem_eq(const void *a, const void *b, size_t n) {
    if (!a || !b) return a == b;
    return memcmp(a, b, n) == 0;
}

static bool groups_eq(const ot_replica_groups *a, const ot_replica_groups *b) {
    if (!a || !b) return (!a || a->ngroups == 0) && (!b || b->ngroups == 0);
    if (a->ngroups != b->ngroups) return false;
    if (a->ngroups == 0) return true;
    if (memcmp(a->offsets, b->offsets, (size_t)(a->ngroups + 1) * sizeof(int64_t))) return false;
    return memcmp(a->ids, b->ids, (size_t)a->offsets[a->ngroups] * sizeof(int64_t)) == 0;
}

/* Structs with padding are compared field-wise where memcmp could see padding bytes. */
static bool window_eq(const ot_window *a, const ot_window *b) {
    if (!a || !b) return a == b;
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++) {
        const ot_window_dim *x = &a->dims[i], *y = &b->dims[i];
        if (x->size != y->size || x->stride != y->stride || x->pad_lo != y->pad_lo ||
            x->pad_hi != y->pad_hi || x->window_dilation != y->window_dilation ||
            x->base_dilation != y->base_dilation || x->reversal != y->reversal)
            return false;
    }
    return true;
}

static bool gather_eq(const ot_gather_dims *a, const ot_gather_dims *b) {
    if (!a || !b) return a == b;
    return a->noffset == b->noffset && a->ncollapsed == b->ncollapsed &&
           a->nstart_index_map == b->nstart_index_map && a->nbatching == b->nbatching &&
           !memcmp(a->offset_dims, b->offset_dims, sizeof a->offset_dims) &&
           !memcmp(a->collapsed_slice_dims, b->collapsed_slice_dims,
                   sizeof a->collapsed_slice_dims) &&
           !memcmp(a->start_index_map, b->start_index_map, sizeof a->start_index_map) &&
           !memcmp(a->operand_batching_dims, b->operand_batching_dims,
                   sizeof a->operand_batching_dims) &&
           !memcmp(a->start_indices_batching_dims, b->start_indices_batching_dims,
                   sizeof a->start_indices_batching_dims) &&
           a->index_vector_dim == b->index_vector_dim && a->nslice_sizes == b->nslice_sizes &&
           !memcmp(a->slice_sizes, b->slice_sizes, sizeof a->slice_sizes) &&
           a->indices_are_sorted == b->indices_are_sorted;
}

static bool scatter_eq(const ot_scatter_dims *a, const ot_scatter_dims *b) {
    if (!a || !b) return a == b;
    return a->nupdate_window == b->nupdate_window && a->ninserted == b->ninserted &&
           a->nscatter_to_operand == b->nscatter_to_operand && a->nbatching == b->nbatching &&
           !memcmp(a->update_window_dims, b->update_window_dims, sizeof a->update_window_dims) &&
           !memcmp(a->inserted_window_dims, b->inserted_window_dims,
                   sizeof a->inserted_window_dims) &&
           !memcmp(a->scatter_dims_to_operand_dims, b->scatter_dims_to_operand_dims,
                   sizeof a->scatter_dims_to_operand_dims) &&
           !memcmp(a->input_batching_dims, b->input_batching_dims, sizeof a->input_batching_dims) &&
           !memcmp(a->scatter_indices_batching_dims, b->scatter_indices_batching_dims,
                   sizeof a->scatter_indices_batching_dims) &&
           a->index_vector_dim == b->index_vector_dim &&
           a->indices_are_sorted == b->indices_are_sorted && a->unique_indices == b->unique_indices;
}

static bool conv_eq(const ot_conv_dims *a, const ot_conv_dims *b) {
    if (!a || !b) return a == b;
    return a->nspatial == b->nspatial && a->input_batch == b->input_batch &&
           a->input_feature == b->input_feature &&
           !memcmp(a->input_spatial, b->input_spatial, sizeof a->input_spatial) &&
           a->kernel_input_feature == b->kernel_input_feature &&
           a->kernel_output_feature == b->kernel_output_feature &&
           !memcmp(a->kernel_spatial, b->kernel_spatial, sizeof a->kernel_spatial) &&
           a->output_batch == b->output_batch && a->output_feature == b->output_feature &&
           !memcmp(a->output_spatial, b->output_spatial, sizeof a->output_spatial);
}

static bool literal_eq(const ot_literal *a, const ot_literal *b) {
    if (!a || !b) return a == b;
    if (a->elided || b->elided) return false; /* unknown values are never equal */
    return a->nbytes == b->nbytes && mem_eq(a->data, b->data, (size_t)a->nbytes);
}

/* One field of a and b equal, by its kind (pointed-to data by value). rank: slice and padding
 * entries. */
static bool field_eq(const ir_attr_field *f, int rank, const ot_attrs *a, const ot_attrs *b) {
    const void *p = NULL, *q = NULL;
    if (f->kind >= IR_FK_DIMS && f->kind != IR_FK_PRECISION) {
        p = load_ptr(a, f);
        q = load_ptr(b, f);
        /* the same array (mostly: both absent) with the same count is equal whatever its kind */
        if (p == q && (f->count_off < 0 || load_count(a, f) == load_count(b, f))) return true;
    }
    switch ((ir_field_kind)f->kind) {
    case IR_FK_DIMS:
    case IR_FK_PAIRS:
        return load_count(a, f) == load_count(b, f) &&
               mem_eq(p, q, (size_t)load_count(a, f) * f->elem);
    case IR_FK_PER_DIM: return mem_eq(p, q, (size_t)rank * f->elem);
    case IR_FK_DOT: return mem_eq(p, q, f->elem);
    case IR_FK_WINDOW: return window_eq(p, q);
    case IR_FK_CONV: return conv_eq(p, q);
    case IR_FK_GATHER: return gather_eq(p, q);
    case IR_FK_SCATTER: return scatter_eq(p, q);
    case IR_FK_GROUPS: return groups_eq(p, q);
    case IR_FK_STRING: return str_eq(p, q);
    case IR_FK_LITERAL: return literal_eq(p, q);
    case IR_FK_PRECISION:
        return load_count(a, f) == load_count(b, f) &&
               (!load_count(a, f) ||
                !memcmp((const char *)a + f->off, (const char *)b + f->off, f->size));
    default: /* scalars */
        return ir_attr_load_int((const char *)a + f->off, f->size) ==
               ir_attr_load_int((const char *)b + f->off, f->size);
    }
}

bool ot_instr_attrs_equal(const ot_instr *ia, const ot_instr *ib) {
    if (ia->opcode != ib->opcode) return false;
    /* common attributes are shared (module.c attrs_shared): CSE's comparisons mostly end here */
    if (ia->attrs == ib->attrs) return true;
    int rank = ia->shape.kind == OT_IR_ARRAY ? ia->shape.array.rank : 0;
    for (int f = 0; f < IR_F_COUNT; f++)
        if (!field_eq(&ir_attr_fields[f], rank, ia->attrs, ib->attrs)) return false;
    return true;
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

uint64_t ot_instr_attrs_hash(const ot_instr *i) {
    const ot_attrs *a = i->attrs;
    uint64_t h = mix(0, (uint64_t)i->opcode);
    h = mix(h, (uint64_t)a->index);
    h = mix(h, (uint64_t)a->cmp_dir * 31 + (uint64_t)a->cmp_type);
    h = mix(h, (uint64_t)a->channel_id);
    if (a->dims) h = mix(h, ir_hash_bytes(a->dims, (size_t)a->ndims * sizeof(int64_t)));
    int rank = i->shape.kind == OT_IR_ARRAY ? i->shape.array.rank : 0;
    if (a->slice) h = mix(h, ir_hash_bytes(a->slice, (size_t)rank * sizeof *a->slice));
    if (a->padding) h = mix(h, ir_hash_bytes(a->padding, (size_t)rank * sizeof *a->padding));
    if (a->dot) h = mix(h, ir_hash_bytes(a->dot, sizeof *a->dot));
    if (a->custom_call_target)
        h = mix(h, ir_hash_bytes(a->custom_call_target, strlen(a->custom_call_target)));
    if (a->literal && !a->literal->elided && a->literal->data)
        h = mix(h, ir_hash_bytes(a->literal->data, (size_t)a->literal->nbytes));
    return h;
}

/* ---- replica groups ---- */

#define MAX_GROUP_IDS (1 << 24)

const ot_replica_groups *ot_replica_groups_make(ot_module *m, int64_t ngroups,
                                                const int64_t *group_sizes, const int64_t *ids) {
    if (!m || m->err) return NULL;
    if (ngroups < 0 || ngroups > MAX_GROUP_IDS) {
        ir_fail(m, OT_ERR_INVALID_ARGUMENT, "replica_groups: group count %lld out of range",
                (long long)ngroups);
        return NULL;
    }
    ot_replica_groups *g = ir_alloc(m, sizeof *g);
    int64_t *off = ir_alloc(m, (size_t)(ngroups + 1) * sizeof *off);
    if (!g || !off) {
        ir_fail(m, OT_ERR_OUT_OF_MEMORY, "replica_groups: out of memory");
        return NULL;
    }
    memset(g, 0, sizeof *g);
    off[0] = 0;
    for (int64_t k = 0; k < ngroups; k++) {
        if (group_sizes[k] < 0 || group_sizes[k] > MAX_GROUP_IDS - off[k]) {
            ir_fail(m, OT_ERR_INVALID_ARGUMENT, "replica_groups: group %lld size out of range",
                    (long long)k);
            return NULL;
        }
        off[k + 1] = off[k] + group_sizes[k];
    }
    int64_t *d = ir_alloc(m, (size_t)off[ngroups] * sizeof *d + 1);
    if (!d) {
        ir_fail(m, OT_ERR_OUT_OF_MEMORY, "replica_groups: out of memory");
        return NULL;
    }
    for (int64_t k = 0; k < off[ngroups]; k++) {
        if (ids[k] < 0) {
            ir_fail(m, OT_ERR_INVALID_ARGUMENT, "replica_groups: negative id %lld",
                    (long long)ids[k]);
            return NULL;
        }
        d[k] = ids[k];
    }
    g->ngroups = ngroups;
    g->offsets = off;
    g->ids = d;
    return g;
}

const ot_replica_groups *ot_replica_groups_iota(ot_module *m, int64_t ngroups, int64_t group_size,
                                                const int64_t *dims, int ndims, const int64_t *perm,
                                                int nperm) {
    if (!m || m->err) return NULL;
    int64_t total = 1;
    bool ok = ngroups > 0 && group_size > 0 && ngroups <= MAX_GROUP_IDS &&
              group_size <= MAX_GROUP_IDS / ngroups && ndims >= 1 && ndims <= OT_MAX_RANK &&
              (nperm == 0 || nperm == ndims);
    for (int k = 0; ok && k < ndims; k++) {
        if (dims[k] <= 0 || dims[k] > MAX_GROUP_IDS / total)
            ok = false;
        else
            total *= dims[k];
    }
    if (ok && total != ngroups * group_size) ok = false;
    bool seen[OT_MAX_RANK] = {0};
    for (int k = 0; ok && k < nperm; k++) {
        if (perm[k] < 0 || perm[k] >= ndims || seen[perm[k]])
            ok = false;
        else
            seen[perm[k]] = true;
    }
    if (!ok) {
        ir_fail(m, OT_ERR_INVALID_ARGUMENT,
                "replica_groups: iota form [%lld,%lld] with these reshape dims/permutation is "
                "invalid",
                (long long)ngroups, (long long)group_size);
        return NULL;
    }
    /* ids = iota(total) reshaped to dims, transposed by perm, flattened */
    int64_t tdims[OT_MAX_RANK], strides[OT_MAX_RANK], st = 1;
    for (int k = ndims - 1; k >= 0; k--) {
        strides[k] = st;
        st *= dims[k];
    }
    int64_t tstr[OT_MAX_RANK];
    for (int k = 0; k < ndims; k++) {
        int64_t p = nperm ? perm[k] : k;
        tdims[k] = dims[p];
        tstr[k] = strides[p];
    }
    int64_t *ids = ir_alloc(m, (size_t)total * sizeof *ids);
    int64_t *off = ir_alloc(m, (size_t)(ngroups + 1) * sizeof *off);
    ot_replica_groups *g = ir_alloc(m, sizeof *g);
    if (!ids || !off || !g) {
        ir_fail(m, OT_ERR_OUT_OF_MEMORY, "replica_groups: out of memory");
        return NULL;
    }
    int64_t idx[OT_MAX_RANK] = {0};
    for (int64_t e = 0; e < total; e++) {
        int64_t v = 0;
        for (int k = 0; k < ndims; k++) v += idx[k] * tstr[k];
        ids[e] = v;
        for (int k = ndims - 1; k >= 0; k--) {
            if (++idx[k] < tdims[k]) break;
            idx[k] = 0;
        }
    }
    for (int64_t k = 0; k <= ngroups; k++) off[k] = k * group_size;
    memset(g, 0, sizeof *g);
    g->ngroups = ngroups;
    g->offsets = off;
    g->ids = ids;
    g->iota = true;
    g->iota_groups = ngroups;
    g->iota_group_size = group_size;
    g->niota_dims = ndims;
    memcpy(g->iota_dims, dims, (size_t)ndims * sizeof *dims);
    g->niota_perm = nperm;
    if (nperm) memcpy(g->iota_perm, perm, (size_t)nperm * sizeof *perm);
    return g;
}
