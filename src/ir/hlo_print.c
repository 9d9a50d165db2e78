/* HLO text printer (canonical: what XLA's parser accepts; print -> parse -> print is a fixed
 * point) and Graphviz DOT export. */
#include "ir_internal.h"

#include <math.h>
#include <stdarg.h>

typedef struct sb {
    char *p;
    size_t n, cap;
    bool oom;
    /* streaming: the text so far goes to sink (and the buffer is reused) whenever it would grow */
    ot_status (*sink)(void *ctx, const char *p, size_t n);
    void *ctx;
    ot_status sink_err;
} sb;

static void sb_reserve(sb *b, size_t more) {
    if (b->oom) return;
    if (b->n + more + 1 <= b->cap) return;
    if (b->sink && b->n) {
        ot_status s = b->sink(b->ctx, b->p, b->n);
        b->n = 0;
        if (s != OT_OK) {
            b->sink_err = s;
            b->oom = true;
            return;
        }
        if (more + 1 <= b->cap) return;
    }
    size_t ncap = b->cap ? b->cap : 4096;
    while (ncap < b->n + more + 1) ncap *= 2;
    char *np = ot_realloc(b->p, ncap);
    if (!np) {
        b->oom = true;
        return;
    }
    b->p = np;
    b->cap = ncap;
}

/* Most pieces are a few bytes (names, punctuation, digits): those are copied inline, without a
 * call into the allocator check or memcpy. */
static inline void sb_put(sb *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        sb_reserve(b, n);
        if (b->oom) return;
    }
    char *d = b->p + b->n;
    if (n <= 16) {
        for (size_t k = 0; k < n; k++) d[k] = s[k];
    } else {
        memcpy(d, s, n);
    }
    b->n += n;
    d[n] = '\0';
}

static inline void sb_puts(sb *b, const char *s) {
    sb_put(b, s, strlen(s));
}

static void sb_printf(sb *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void sb_printf(sb *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) {
        sb_put(b, tmp, (size_t)k);
        return;
    }
    sb_reserve(b, (size_t)k);
    if (b->oom) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

/* Decimal integer without printf (shapes and dimension lists are most of a module's text). */
static void sb_i64(sb *b, long long v) {
    char tmp[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[sizeof tmp - 1 - n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) tmp[sizeof tmp - 1 - n++] = '-';
    sb_put(b, tmp + sizeof tmp - n, (size_t)n);
}

/* Length of the well-formed UTF-8 sequence at p (1 for ASCII), or 0. The string's NUL ends any
 * sequence early. */
static int utf8_len(const unsigned char *p) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    int len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (p[1] < lo || p[1] > hi) return 0;
    for (int k = 2; k < len; k++)
        if ((p[k] & 0xC0) != 0x80) return 0;
    return len;
}

/* A quoted string. Control characters and bytes that are not UTF-8 (a string set through the API
 * may hold any bytes) are written as octal escapes, which the parser reads back: the text stays
 * valid UTF-8 on one line. */
static void put_string(sb *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *q = (const unsigned char *)s; *q;) {
        int n = utf8_len(q);
        switch (*q) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\t': sb_puts(b, "\\t"); break;
        case '\r': sb_puts(b, "\\r"); break;
        default:
            if (n == 0 || *q < 0x20 || *q == 0x7F) {
                char e[5] = {'\\', (char)('0' + (*q >> 6)), (char)('0' + ((*q >> 3) & 7)),
                             (char)('0' + (*q & 7)), 0};
                sb_put(b, e, 4);
                n = 1;
            } else {
                sb_put(b, (const char *)q, (size_t)n);
            }
            q += n;
            continue;
        }
        q++;
    }
    sb_put(b, "\"", 1);
}

static void put_shape(sb *b, const ot_ir_shape *s) {
    switch (s->kind) {
    case OT_IR_TOKEN: sb_puts(b, "token[]"); return;
    case OT_IR_TUPLE:
        sb_puts(b, "(");
        for (int i = 0; i < s->ntuple; i++) {
            if (i) sb_puts(b, ", ");
            put_shape(b, &s->tuple[i]);
        }
        sb_puts(b, ")");
        return;
    case OT_IR_ARRAY:
        sb_puts(b, ot_dtype_name(s->array.dtype));
        sb_puts(b, "[");
        for (int i = 0; i < s->array.rank; i++) {
            if (i) sb_put(b, ",", 1);
            sb_i64(b, (long long)s->array.dims[i]);
        }
        sb_puts(b, "]");
        if (s->has_layout) {
            sb_puts(b, "{");
            for (int i = 0; i < s->array.rank; i++) {
                if (i) sb_put(b, ",", 1);
                sb_i64(b, (long long)s->minor_to_major[i]);
            }
            sb_puts(b, "}");
        }
        return;
    }
}

static void put_dims(sb *b, const int64_t *d, int n) {
    sb_puts(b, "{");
    for (int i = 0; i < n; i++) {
        if (i) sb_put(b, ",", 1);
        sb_i64(b, (long long)d[i]);
    }
    sb_puts(b, "}");
}

static void put_float(sb *b, double v, bool f64) {
    if (isnan(v)) {
        sb_puts(b, signbit(v) ? "-nan" : "nan");
    } else if (isinf(v)) {
        sb_puts(b, v < 0 ? "-inf" : "inf");
    } else {
        sb_printf(b, f64 ? "%.17g" : "%.9g", v);
    }
}

static void put_elem(sb *b, ot_dtype t, const uint8_t *p) {
    switch (t) {
    case OT_PRED: sb_puts(b, *p ? "true" : "false"); break;
    case OT_S8: sb_printf(b, "%d", (int)*(const int8_t *)p); break;
    case OT_U8: sb_printf(b, "%u", (unsigned)*p); break;
    case OT_S16: {
        int16_t v;
        memcpy(&v, p, 2);
        sb_printf(b, "%d", (int)v);
        break;
    }
    case OT_U16: {
        uint16_t v;
        memcpy(&v, p, 2);
        sb_printf(b, "%u", (unsigned)v);
        break;
    }
    case OT_S32: {
        int32_t v;
        memcpy(&v, p, 4);
        sb_printf(b, "%d", (int)v);
        break;
    }
    case OT_U32: {
        uint32_t v;
        memcpy(&v, p, 4);
        sb_printf(b, "%u", (unsigned)v);
        break;
    }
    case OT_S64: {
        int64_t v;
        memcpy(&v, p, 8);
        sb_printf(b, "%lld", (long long)v);
        break;
    }
    case OT_U64: {
        uint64_t v;
        memcpy(&v, p, 8);
        sb_printf(b, "%llu", (unsigned long long)v);
        break;
    }
    case OT_F16: {
        uint16_t v;
        memcpy(&v, p, 2);
        put_float(b, ot_f16_to_f32(v), false);
        break;
    }
    case OT_BF16: {
        uint16_t v;
        memcpy(&v, p, 2);
        put_float(b, ot_bf16_to_f32(v), false);
        break;
    }
    case OT_F32: {
        float v;
        memcpy(&v, p, 4);
        put_float(b, v, false);
        break;
    }
    case OT_F64: {
        double v;
        memcpy(&v, p, 8);
        put_float(b, v, true);
        break;
    }
    default: sb_puts(b, "?"); break;
    }
}

static void put_literal(sb *b, const ot_instr *i) {
    const ot_literal *l = i->attrs->literal;
    if (!l || l->elided) {
        sb_puts(b, "{...}");
        return;
    }
    const ot_shape *s = &i->shape.array;
    size_t es = ot_dtype_size(s->dtype);
    const uint8_t *d = l->data;
    if (s->rank == 0) {
        put_elem(b, s->dtype, d);
        return;
    }
    int64_t n = ot_shape_numel_unchecked(s);
    int64_t idx[OT_MAX_RANK] = {0};
    for (int k = 0; k < s->rank; k++) sb_puts(b, "{");
    if (n == 0) {
        for (int k = 0; k < s->rank; k++) sb_puts(b, "}");
        return;
    }
    for (int64_t e = 0; e < n; e++) {
        put_elem(b, s->dtype, d + (size_t)e * es);
        /* advance the index; close and reopen braces at each carry */
        int k = s->rank - 1;
        int closed = 0;
        while (k >= 0) {
            if (++idx[k] < s->dims[k]) break;
            idx[k] = 0;
            closed++;
            k--;
        }
        for (int j = 0; j < closed; j++) sb_puts(b, "}");
        if (k < 0) break;
        sb_puts(b, ", ");
        for (int j = 0; j < closed; j++) sb_puts(b, "{");
    }
}

static void put_window(sb *b, const ot_window *w) {
    sb_puts(b, "window={");
    if (!w || w->rank == 0) {
        sb_puts(b, "}");
        return;
    }
    bool any_stride = false, any_pad = false, any_ld = false, any_rd = false, any_rev = false;
    for (int i = 0; i < w->rank; i++) {
        any_stride |= w->dims[i].stride != 1;
        any_pad |= w->dims[i].pad_lo != 0 || w->dims[i].pad_hi != 0;
        any_ld |= w->dims[i].base_dilation != 1;
        any_rd |= w->dims[i].window_dilation != 1;
        any_rev |= w->dims[i].reversal;
    }
    sb_puts(b, "size=");
    for (int i = 0; i < w->rank; i++)
        sb_printf(b, "%s%lld", i ? "x" : "", (long long)w->dims[i].size);
    if (any_stride) {
        sb_puts(b, " stride=");
        for (int i = 0; i < w->rank; i++)
            sb_printf(b, "%s%lld", i ? "x" : "", (long long)w->dims[i].stride);
    }
    if (any_pad) {
        sb_puts(b, " pad=");
        for (int i = 0; i < w->rank; i++)
            sb_printf(b, "%s%lld_%lld", i ? "x" : "", (long long)w->dims[i].pad_lo,
                      (long long)w->dims[i].pad_hi);
    }
    if (any_ld) {
        sb_puts(b, " lhs_dilate=");
        for (int i = 0; i < w->rank; i++)
            sb_printf(b, "%s%lld", i ? "x" : "", (long long)w->dims[i].base_dilation);
    }
    if (any_rd) {
        sb_puts(b, " rhs_dilate=");
        for (int i = 0; i < w->rank; i++)
            sb_printf(b, "%s%lld", i ? "x" : "", (long long)w->dims[i].window_dilation);
    }
    if (any_rev) {
        sb_puts(b, " rhs_reversal=");
        for (int i = 0; i < w->rank; i++) sb_printf(b, "%s%d", i ? "x" : "", w->dims[i].reversal);
    }
    sb_puts(b, "}");
}

static void put_dim_labels(sb *b, const ot_conv_dims *d) {
    int r = d->nspatial + 2;
    char in[OT_MAX_RANK + 1], kr[OT_MAX_RANK + 1], ou[OT_MAX_RANK + 1];
    in[d->input_batch] = 'b';
    in[d->input_feature] = 'f';
    kr[d->kernel_input_feature] = 'i';
    kr[d->kernel_output_feature] = 'o';
    ou[d->output_batch] = 'b';
    ou[d->output_feature] = 'f';
    for (int i = 0; i < d->nspatial; i++) {
        in[d->input_spatial[i]] = (char)('0' + i);
        kr[d->kernel_spatial[i]] = (char)('0' + i);
        ou[d->output_spatial[i]] = (char)('0' + i);
    }
    in[r] = kr[r] = ou[r] = '\0';
    sb_printf(b, "dim_labels=%s_%s->%s", in, kr, ou);
}

static void put_groups(sb *b, const ot_replica_groups *g) {
    sb_puts(b, "replica_groups=");
    if (!g || g->ngroups == 0) {
        sb_puts(b, "{}");
        return;
    }
    if (g->iota) {
        sb_printf(b, "[%lld,%lld]<=", (long long)g->iota_groups, (long long)g->iota_group_size);
        sb_puts(b, "[");
        for (int i = 0; i < g->niota_dims; i++)
            sb_printf(b, "%s%lld", i ? "," : "", (long long)g->iota_dims[i]);
        sb_puts(b, "]");
        if (g->niota_perm) {
            sb_puts(b, "T(");
            for (int i = 0; i < g->niota_perm; i++)
                sb_printf(b, "%s%lld", i ? "," : "", (long long)g->iota_perm[i]);
            sb_puts(b, ")");
        }
        return;
    }
    sb_puts(b, "{");
    for (int64_t k = 0; k < g->ngroups; k++) {
        if (k) sb_puts(b, ",");
        sb_puts(b, "{");
        for (int64_t j = g->offsets[k]; j < g->offsets[k + 1]; j++)
            sb_printf(b, "%s%lld", j > g->offsets[k] ? "," : "", (long long)g->ids[j]);
        sb_puts(b, "}");
    }
    sb_puts(b, "}");
}

static void comp_name(sb *b, const ot_computation *c, const ot_hlo_print_options *o) {
    if (o->percent) sb_puts(b, "%");
    sb_puts(b, c->name);
}

static void put_attrs(sb *b, const ot_instr *i, const ot_hlo_print_options *o) {
    const ot_attrs *a = i->attrs;
#define SEP() sb_puts(b, ", ")
    switch (i->opcode) {
    case OT_OP_IOTA:
        SEP();
        sb_printf(b, "iota_dimension=%lld", (long long)a->index);
        break;
    case OT_OP_GET_TUPLE_ELEMENT:
        SEP();
        sb_printf(b, "index=%lld", (long long)a->index);
        break;
    case OT_OP_COMPARE:
        SEP();
        sb_printf(b, "direction=%s", ot_cmp_dir_name(a->cmp_dir));
        if (a->cmp_type != OT_CMP_TYPE_DEFAULT) {
            SEP();
            sb_printf(b, "type=%s", ot_cmp_type_name(a->cmp_type));
        }
        break;
    case OT_OP_REDUCE_PRECISION:
        SEP();
        sb_printf(b, "exponent_bits=%d, mantissa_bits=%d", a->exponent_bits, a->mantissa_bits);
        break;
    case OT_OP_BROADCAST:
    case OT_OP_TRANSPOSE:
    case OT_OP_REVERSE:
    case OT_OP_REDUCE:
    case OT_OP_MAP:
        SEP();
        sb_puts(b, "dimensions=");
        put_dims(b, a->dims, a->ndims);
        break;
    case OT_OP_CONCATENATE:
        SEP();
        sb_printf(b, "dimensions={%lld}", (long long)a->index);
        break;
    case OT_OP_DYNAMIC_SLICE:
        SEP();
        sb_puts(b, "dynamic_slice_sizes=");
        put_dims(b, a->dims, a->ndims);
        break;
    case OT_OP_SLICE:
        SEP();
        sb_puts(b, "slice={");
        for (int k = 0; k < i->shape.array.rank; k++) {
            const ot_slice_dim *s = &a->slice[k];
            sb_printf(b, "%s[%lld:%lld", k ? ", " : "", (long long)s->start, (long long)s->limit);
            if (s->stride != 1) sb_printf(b, ":%lld", (long long)s->stride);
            sb_puts(b, "]");
        }
        sb_puts(b, "}");
        break;
    case OT_OP_PAD: {
        SEP();
        sb_puts(b, "padding=");
        int r = i->shape.array.rank;
        bool interior = false;
        for (int k = 0; k < r; k++) interior |= a->padding[k].interior != 0;
        for (int k = 0; k < r; k++) {
            sb_printf(b, "%s%lld_%lld", k ? "x" : "", (long long)a->padding[k].lo,
                      (long long)a->padding[k].hi);
            if (interior) sb_printf(b, "_%lld", (long long)a->padding[k].interior);
        }
        if (r == 0) sb_puts(b, "0_0");
        break;
    }
    case OT_OP_GATHER: {
        const ot_gather_dims *g = a->gather;
        SEP();
        sb_puts(b, "offset_dims=");
        put_dims(b, g->offset_dims, g->noffset);
        SEP();
        sb_puts(b, "collapsed_slice_dims=");
        put_dims(b, g->collapsed_slice_dims, g->ncollapsed);
        SEP();
        sb_puts(b, "start_index_map=");
        put_dims(b, g->start_index_map, g->nstart_index_map);
        if (g->nbatching) {
            SEP();
            sb_puts(b, "operand_batching_dims=");
            put_dims(b, g->operand_batching_dims, g->nbatching);
            SEP();
            sb_puts(b, "start_indices_batching_dims=");
            put_dims(b, g->start_indices_batching_dims, g->nbatching);
        }
        SEP();
        sb_printf(b, "index_vector_dim=%lld", (long long)g->index_vector_dim);
        SEP();
        sb_puts(b, "slice_sizes=");
        put_dims(b, g->slice_sizes, g->nslice_sizes);
        if (g->indices_are_sorted) sb_puts(b, ", indices_are_sorted=true");
        break;
    }
    case OT_OP_SCATTER: {
        const ot_scatter_dims *g = a->scatter;
        SEP();
        sb_puts(b, "update_window_dims=");
        put_dims(b, g->update_window_dims, g->nupdate_window);
        SEP();
        sb_puts(b, "inserted_window_dims=");
        put_dims(b, g->inserted_window_dims, g->ninserted);
        SEP();
        sb_puts(b, "scatter_dims_to_operand_dims=");
        put_dims(b, g->scatter_dims_to_operand_dims, g->nscatter_to_operand);
        if (g->nbatching) {
            SEP();
            sb_puts(b, "input_batching_dims=");
            put_dims(b, g->input_batching_dims, g->nbatching);
            SEP();
            sb_puts(b, "scatter_indices_batching_dims=");
            put_dims(b, g->scatter_indices_batching_dims, g->nbatching);
        }
        SEP();
        sb_printf(b, "index_vector_dim=%lld", (long long)g->index_vector_dim);
        if (g->indices_are_sorted) sb_puts(b, ", indices_are_sorted=true");
        if (g->unique_indices) sb_puts(b, ", unique_indices=true");
        break;
    }
    case OT_OP_REDUCE_WINDOW:
    case OT_OP_SELECT_AND_SCATTER:
        SEP();
        put_window(b, a->window);
        break;
    case OT_OP_SORT:
        SEP();
        sb_printf(b, "dimensions={%lld}", (long long)a->index);
        if (a->is_stable) sb_puts(b, ", is_stable=true");
        break;
    case OT_OP_TOPK:
        SEP();
        sb_printf(b, "k=%lld, largest=%s", (long long)a->index, a->largest ? "true" : "false");
        if (a->is_stable) sb_puts(b, ", is_stable=true");
        break;
    case OT_OP_DOT: {
        const ot_dot_dims *d = a->dot;
        if (d->nbatch) {
            SEP();
            sb_puts(b, "lhs_batch_dims=");
            put_dims(b, d->lhs_batch, d->nbatch);
        }
        SEP();
        sb_puts(b, "lhs_contracting_dims=");
        put_dims(b, d->lhs_contract, d->ncontract);
        if (d->nbatch) {
            SEP();
            sb_puts(b, "rhs_batch_dims=");
            put_dims(b, d->rhs_batch, d->nbatch);
        }
        SEP();
        sb_puts(b, "rhs_contracting_dims=");
        put_dims(b, d->rhs_contract, d->ncontract);
        break;
    }
    case OT_OP_CONVOLUTION:
        if (a->window && a->window->rank) {
            SEP();
            put_window(b, a->window);
        }
        SEP();
        put_dim_labels(b, a->conv);
        if (a->feature_group_count > 1)
            sb_printf(b, ", feature_group_count=%lld", (long long)a->feature_group_count);
        if (a->batch_group_count > 1)
            sb_printf(b, ", batch_group_count=%lld", (long long)a->batch_group_count);
        break;
    case OT_OP_FUSION:
        SEP();
        sb_printf(b, "kind=%s",
                  (const char *[]){"kLoop", "kInput", "kOutput", "kCustom"}[a->fusion_kind & 3]);
        break;
    case OT_OP_ALL_REDUCE:
    case OT_OP_ALL_GATHER:
    case OT_OP_REDUCE_SCATTER:
    case OT_OP_ALL_TO_ALL:
        if (a->channel_id) sb_printf(b, ", channel_id=%lld", (long long)a->channel_id);
        SEP();
        put_groups(b, a->groups);
        if (a->constrain_layout) sb_puts(b, ", constrain_layout=true");
        if (i->opcode != OT_OP_ALL_REDUCE && a->index >= 0)
            sb_printf(b, ", dimensions={%lld}", (long long)a->index);
        if (a->use_global_device_ids) sb_puts(b, ", use_global_device_ids=true");
        break;
    case OT_OP_COLLECTIVE_PERMUTE:
        if (a->channel_id) sb_printf(b, ", channel_id=%lld", (long long)a->channel_id);
        SEP();
        sb_puts(b, "source_target_pairs={");
        for (int k = 0; k < a->npairs; k++)
            sb_printf(b, "%s{%lld,%lld}", k ? "," : "", (long long)a->pairs[2 * k],
                      (long long)a->pairs[2 * k + 1]);
        sb_puts(b, "}");
        break;
    case OT_OP_RNG_BIT_GENERATOR:
        SEP();
        sb_printf(
            b, "algorithm=%s",
            (const char *[]){"rng_default", "rng_three_fry", "rng_philox"}[a->rng_algorithm % 3]);
        break;
    case OT_OP_CUSTOM_CALL:
        SEP();
        sb_puts(b, "custom_call_target=");
        put_string(b, a->custom_call_target ? a->custom_call_target : "");
        if (a->has_side_effect) sb_puts(b, ", custom_call_has_side_effect=true");
        if (a->api_version)
            sb_printf(b, ", api_version=%s",
                      (const char *[]){"API_VERSION_UNSPECIFIED", "API_VERSION_ORIGINAL",
                                       "API_VERSION_STATUS_RETURNING",
                                       "API_VERSION_STATUS_RETURNING_UNIFIED",
                                       "API_VERSION_TYPED_FFI"}[a->api_version % 5]);
        break;
    default: break;
    }
    if ((i->opcode == OT_OP_DOT || i->opcode == OT_OP_CONVOLUTION) && a->nprecision == 2) {
        static const char *const pn[] = {"default", "high", "highest"};
        sb_printf(b, ", operand_precision={%s,%s}", pn[a->precision[0] % 3],
                  pn[a->precision[1] % 3]);
    }
    /* called computations */
    switch (i->opcode) {
    case OT_OP_WHILE:
        SEP();
        sb_puts(b, "condition=");
        comp_name(b, i->called[0], o);
        SEP();
        sb_puts(b, "body=");
        comp_name(b, i->called[1], o);
        break;
    case OT_OP_SELECT_AND_SCATTER:
        SEP();
        sb_puts(b, "select=");
        comp_name(b, i->called[0], o);
        SEP();
        sb_puts(b, "scatter=");
        comp_name(b, i->called[1], o);
        break;
    case OT_OP_CONDITIONAL:
        if (i->noperands && i->operands[0]->shape.kind == OT_IR_ARRAY &&
            i->operands[0]->shape.array.dtype == OT_PRED && i->ncalled == 2) {
            SEP();
            sb_puts(b, "true_computation=");
            comp_name(b, i->called[0], o);
            SEP();
            sb_puts(b, "false_computation=");
            comp_name(b, i->called[1], o);
        } else {
            SEP();
            sb_puts(b, "branch_computations={");
            for (int k = 0; k < i->ncalled; k++) {
                if (k) sb_puts(b, ", ");
                comp_name(b, i->called[k], o);
            }
            sb_puts(b, "}");
        }
        break;
    case OT_OP_FUSION:
        SEP();
        sb_puts(b, "calls=");
        comp_name(b, i->called[0], o);
        break;
    case OT_OP_CUSTOM_CALL:
        if (i->ncalled) {
            SEP();
            sb_puts(b, "called_computations={");
            for (int k = 0; k < i->ncalled; k++) {
                if (k) sb_puts(b, ", ");
                comp_name(b, i->called[k], o);
            }
            sb_puts(b, "}");
        }
        break;
    default:
        if (i->ncalled == 1) {
            SEP();
            sb_puts(b, "to_apply=");
            comp_name(b, i->called[0], o);
        }
        break;
    }
    if (a->backend_config) {
        SEP();
        sb_puts(b, "backend_config=");
        put_string(b, a->backend_config);
    }
    for (int k = 0; k < i->nraw; k++) {
        SEP();
        sb_printf(b, "%s=", i->raw[k].name);
        sb_puts(b, i->raw[k].value);
    }
    if (o->metadata && i->metadata) {
        const ot_metadata *m = i->metadata;
        SEP();
        sb_puts(b, "metadata={");
        bool first = true;
        if (m->op_type) {
            sb_puts(b, "op_type=");
            put_string(b, m->op_type);
            first = false;
        }
        if (m->op_name) {
            if (!first) sb_puts(b, " ");
            sb_puts(b, "op_name=");
            put_string(b, m->op_name);
            first = false;
        }
        if (m->source_file) {
            if (!first) sb_puts(b, " ");
            sb_puts(b, "source_file=");
            put_string(b, m->source_file);
            first = false;
        }
        if (m->source_line) {
            if (!first) sb_puts(b, " ");
            sb_printf(b, "source_line=%lld", (long long)m->source_line);
        }
        sb_puts(b, "}");
    }
#undef SEP
}

static void put_instr(sb *b, const ot_instr *i, const ot_hlo_print_options *o) {
    if (o->percent) sb_puts(b, "%");
    sb_puts(b, i->name);
    sb_puts(b, " = ");
    put_shape(b, &i->shape);
    sb_puts(b, " ");
    sb_puts(b, ot_opcode_name(i->opcode));
    sb_puts(b, "(");
    if (i->opcode == OT_OP_PARAMETER) {
        sb_i64(b, (long long)i->attrs->index);
    } else if (i->opcode == OT_OP_CONSTANT) {
        put_literal(b, i);
    } else {
        for (int k = 0; k < i->noperands; k++) {
            if (k) sb_puts(b, ", ");
            if (o->operand_shapes) {
                put_shape(b, &i->operands[k]->shape);
                sb_puts(b, " ");
            }
            if (o->percent) sb_puts(b, "%");
            sb_puts(b, i->operands[k]->name);
        }
    }
    sb_puts(b, ")");
    put_attrs(b, i, o);
}

ot_hlo_print_options ot_hlo_print_options_default(void) {
    ot_hlo_print_options o = {true, true, true};
    return o;
}

char *ot_hlo_print_instr(const ot_instr *i, const ot_hlo_print_options *opts) {
    ot_hlo_print_options o = opts ? *opts : ot_hlo_print_options_default();
    sb b = {0};
    put_instr(&b, i, &o);
    sb_reserve(&b, 1);
    if (b.oom) {
        ot_free(b.p);
        ot_error(OT_ERR_OUT_OF_MEMORY, "hlo print: out of memory");
        return NULL;
    }
    return b.p;
}

/* given: c's post order when the caller has it (given_n entries), else NULL. */
static ot_status put_computation(sb *b, const ot_computation *c, const ot_hlo_print_options *o,
                                 ot_instr **given, int64_t given_n) {
    if (c->is_entry) sb_puts(b, "ENTRY ");
    comp_name(b, c, o);
    sb_puts(b, " (");
    for (int k = 0; k < c->nparams; k++) {
        if (k) sb_puts(b, ", ");
        if (c->params[k]) {
            sb_puts(b, c->params[k]->name);
            sb_puts(b, ": ");
            put_shape(b, &c->params[k]->shape);
        }
    }
    sb_puts(b, ") -> ");
    if (c->root)
        put_shape(b, &c->root->shape);
    else
        sb_puts(b, "()");
    sb_puts(b, " {\n");
    ot_instr **order = given;
    int64_t n = given_n;
    if (!given) OT_CHECK(ot_computation_post_order(c, &order, &n));
    for (int64_t k = 0; k < n; k++) {
        sb_puts(b, order[k] == c->root ? "  ROOT " : "  ");
        put_instr(b, order[k], o);
        sb_puts(b, "\n");
    }
    if (!given) ot_free(order);
    sb_puts(b, "}\n");
    return OT_OK;
}

static ot_status print_module(sb *b, const ot_module *m, const ot_hlo_print_options *opts,
                              const ir_module_orders *orders);

char *ot_hlo_print(const ot_module *m, const ot_hlo_print_options *opts) {
    sb b = {0};
    if (print_module(&b, m, opts, NULL) != OT_OK) {
        ot_free(b.p);
        return NULL;
    }
    return b.p;
}

ot_status ir_hlo_print_stream(const ot_module *m, const ot_hlo_print_options *opts,
                              const ir_module_orders *orders,
                              ot_status (*sink)(void *ctx, const char *p, size_t n), void *ctx) {
    sb b = {0};
    b.sink = sink;
    b.ctx = ctx;
    b.p = ot_malloc(64 * 1024);
    if (!b.p) return ot_error(OT_ERR_OUT_OF_MEMORY, "hlo print: out of memory");
    b.cap = 64 * 1024;
    ot_status s = print_module(&b, m, opts, orders);
    if (s == OT_OK && b.n) s = sink(ctx, b.p, b.n);
    ot_free(b.p);
    return s;
}

/* The whole module into b (or through its sink); an error (message set) on failure. */
static ot_status print_module(sb *bp, const ot_module *m, const ot_hlo_print_options *opts,
                              const ir_module_orders *orders) {
    ot_hlo_print_options o = opts ? *opts : ot_hlo_print_options_default();
    sb b = *bp;
    sb_printf(&b, "HloModule %s", m->name);
    const ot_module_config *cfg = &m->cfg;
    if (cfg->entry_computation_layout) {
        sb_puts(&b, ", entry_computation_layout=");
        sb_puts(&b, cfg->entry_computation_layout);
    }
    if (cfg->nalias) {
        sb_puts(&b, ", input_output_alias={ ");
        for (int k = 0; k < cfg->nalias; k++) {
            const ot_io_alias *a = &cfg->alias[k];
            if (k) sb_puts(&b, ", ");
            put_dims(&b, a->output_index, a->noutput_index);
            sb_printf(&b, ": (%lld, ", (long long)a->param_number);
            put_dims(&b, a->param_index, a->nparam_index);
            sb_printf(&b, ", %s)", a->must_alias ? "must-alias" : "may-alias");
        }
        sb_puts(&b, " }");
    }
    if (cfg->replica_count != 1)
        sb_printf(&b, ", replica_count=%lld", (long long)cfg->replica_count);
    if (cfg->num_partitions != 1)
        sb_printf(&b, ", num_partitions=%lld", (long long)cfg->num_partitions);
    for (int k = 0; k < cfg->nraw; k++)
        sb_printf(&b, ", %s=%s", cfg->raw[k].name, cfg->raw[k].value);
    sb_puts(&b, "\n");
    ot_computation **order = orders ? orders->comps : NULL;
    int n = orders ? orders->ncomps : 0;
    ot_status s = orders ? OT_OK : ot_module_post_order(m, &order, &n);
    bool ok = s == OT_OK;
    for (int k = 0; ok && k < n; k++) {
        sb_puts(&b, "\n");
        s = put_computation(&b, order[k], &o, orders ? orders->po[k] : NULL,
                            orders ? orders->npo[k] : 0);
        ok = s == OT_OK;
    }
    if (!orders) ot_free(order);
    if (!b.sink) sb_reserve(&b, 1);
    *bp = b;
    if (b.sink_err != OT_OK) return b.sink_err;
    if (s != OT_OK) return s;
    if (b.oom) return ot_error(OT_ERR_OUT_OF_MEMORY, "hlo print: out of memory");
    return OT_OK;
}

/* ---------------------------------------------------------------------------------------------
 * DOT
 * ------------------------------------------------------------------------------------------- */

static void dot_escape(sb *b, const char *s) {
    for (const char *q = s; *q; q++) {
        if (*q == '"' || *q == '\\' || *q == '{' || *q == '}' || *q == '<' || *q == '>' ||
            *q == '|')
            sb_put(b, "\\", 1);
        sb_put(b, q, 1);
    }
}

static const char *dot_color(ot_opcode op) {
    if (op == OT_OP_PARAMETER) return "#cfe8ff";
    if (op == OT_OP_CONSTANT || op == OT_OP_IOTA) return "#eeeeee";
    if (op == OT_OP_DOT || op == OT_OP_CONVOLUTION) return "#ffd5a8";
    if (op == OT_OP_REDUCE || op == OT_OP_REDUCE_WINDOW || op == OT_OP_SORT) return "#ffe9a8";
    if (ot_opcode_is_collective(op)) return "#f8c8c8";
    if (op == OT_OP_FUSION || op == OT_OP_CALL || op == OT_OP_WHILE || op == OT_OP_CONDITIONAL)
        return "#d8f0d0";
    return "#ffffff";
}

char *ot_ir_to_dot(const ot_module *m, const ot_computation *c) {
    if (!c) c = m->entry;
    if (!c) {
        ot_error(OT_ERR_INVALID_ARGUMENT, "dot: module has no entry computation");
        return NULL;
    }
    sb b = {0};
    sb_puts(&b, "digraph \"");
    dot_escape(&b, c->name);
    sb_puts(&b, "\" {\n  rankdir=TB;\n  node [shape=record, style=filled, fontname=\"monospace\", "
                "fontsize=10];\n");
    for (const ot_instr *i = c->first; i; i = i->next) {
        char shp[256];
        ot_ir_shape_format(&i->shape, shp, sizeof shp);
        sb_printf(&b, "  n%lld [label=\"{", (long long)i->id);
        dot_escape(&b, i->name);
        sb_puts(&b, "|");
        dot_escape(&b, ot_opcode_name(i->opcode));
        if (i->opcode == OT_OP_PARAMETER) sb_printf(&b, " %lld", (long long)i->attrs->index);
        for (int k = 0; k < i->ncalled; k++) {
            sb_puts(&b, k ? ", " : " → ");
            dot_escape(&b, i->called[k]->name);
        }
        sb_puts(&b, "|");
        dot_escape(&b, shp);
        sb_printf(&b, "}\", fillcolor=\"%s\"%s];\n", dot_color(i->opcode),
                  i == c->root ? ", penwidth=2" : "");
    }
    for (const ot_instr *i = c->first; i; i = i->next)
        for (int k = 0; k < i->noperands; k++)
            sb_printf(&b, "  n%lld -> n%lld;\n", (long long)i->operands[k]->id, (long long)i->id);
    /* fusion clusters: each fusion's fused computation drawn inside a box, its root feeding the
     * fusion node */
    for (const ot_instr *f = c->first; f; f = f->next) {
        if (f->opcode != OT_OP_FUSION || f->ncalled != 1) continue;
        const ot_computation *fc = f->called[0];
        static const char *const kinds[] = {"kLoop", "kInput", "kOutput", "kCustom"};
        sb_printf(&b, "  subgraph cluster_%lld {\n    label=\"", (long long)f->id);
        dot_escape(&b, f->name);
        sb_printf(&b, " (%s: ", kinds[f->attrs->fusion_kind & 3]);
        dot_escape(&b, fc->name);
        sb_puts(&b, ")\";\n    style=\"rounded,filled\"; fillcolor=\"#f2f8ee\";\n");
        for (const ot_instr *i = fc->first; i; i = i->next) {
            char shp[256];
            ot_ir_shape_format(&i->shape, shp, sizeof shp);
            sb_printf(&b, "    f%lld_%lld [label=\"{", (long long)f->id, (long long)i->id);
            dot_escape(&b, i->name);
            sb_puts(&b, "|");
            dot_escape(&b, ot_opcode_name(i->opcode));
            if (i->opcode == OT_OP_PARAMETER) sb_printf(&b, " %lld", (long long)i->attrs->index);
            sb_puts(&b, "|");
            dot_escape(&b, shp);
            sb_printf(&b, "}\", fillcolor=\"%s\"];\n", dot_color(i->opcode));
        }
        for (const ot_instr *i = fc->first; i; i = i->next)
            for (int k = 0; k < i->noperands; k++)
                sb_printf(&b, "    f%lld_%lld -> f%lld_%lld;\n", (long long)f->id,
                          (long long)i->operands[k]->id, (long long)f->id, (long long)i->id);
        sb_puts(&b, "  }\n");
        if (fc->root)
            sb_printf(&b, "  f%lld_%lld -> n%lld [style=dashed];\n", (long long)f->id,
                      (long long)fc->root->id, (long long)f->id);
    }
    sb_puts(&b, "}\n");
    sb_reserve(&b, 1);
    if (b.oom) {
        ot_free(b.p);
        ot_error(OT_ERR_OUT_OF_MEMORY, "dot: out of memory");
        return NULL;
    }
    return b.p;
}
