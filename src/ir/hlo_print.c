/* HLO text printer (canonical: what XLA's parser accepts; print -> parse -> print is a fixed
 * point) and Graphviz DOT export. */
#include "attr_schema.h"
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
    case OT_C64:
    case OT_C128: { /* (real, imaginary), as XLA prints complex literals */
        ot_dtype part = ot_dtype_complex_part(t);
        sb_puts(b, "(");
        put_elem(b, part, p);
        sb_puts(b, ", ");
        put_elem(b, part, (const uint8_t *)p + ot_dtype_size(part));
        sb_puts(b, ")");
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

/* A window's value: {size=.. stride=.. ...}, each field but size only when not its default. */
static void put_window(sb *b, const ot_window *w) {
    sb_puts(b, "{");
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
    sb_printf(b, "%s_%s->%s", in, kr, ou);
}

static void put_groups(sb *b, const ot_replica_groups *g) {
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

static void put_metadata(sb *b, const ot_metadata *m) {
    sb_puts(b, "{");
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

static const void *load_ptr(const char *base, const ir_attr_row *r) {
    const void *p;
    memcpy(&p, base + r->off, sizeof p);
    return p;
}

/* One printer per attribute kind: the value after "name=". base: the struct the row's field is
 * in (ir_attr_row_base). */
static void put_value(sb *b, const ot_instr *i, const ir_attr_row *r, const char *base,
                      const ot_hlo_print_options *o) {
    const ot_attrs *a = i->attrs;
    switch ((ir_attr_kind)r->kind) {
    case IR_AK_INT: sb_i64(b, (long long)ir_attr_load_int(base + r->off, r->size)); break;
    case IR_AK_BOOL: sb_puts(b, ir_attr_load_int(base + r->off, r->size) ? "true" : "false"); break;
    case IR_AK_ENUM:
        sb_puts(b, ir_attr_enum_name(r, ir_attr_load_int(base + r->off, r->size)));
        break;
    case IR_AK_PRECISION: {
        const ot_precision *p = (const ot_precision *)(base + r->off);
        sb_printf(b, "{%s,%s}", ir_attr_enum_name(r, p[0]), ir_attr_enum_name(r, p[1]));
        break;
    }
    case IR_AK_DIMS:
    case IR_AK_DIMS_PAIR: {
        int n = (int)ir_attr_load_int(base + r->count_off, sizeof(int));
        put_dims(b, r->field == IR_F_DIMS ? load_ptr(base, r) : (const void *)(base + r->off), n);
        break;
    }
    case IR_AK_DIM:
        sb_puts(b, "{");
        sb_i64(b, (long long)ir_attr_load_int(base + r->off, r->size));
        sb_puts(b, "}");
        break;
    case IR_AK_SLICE:
        sb_puts(b, "{");
        for (int k = 0; k < i->shape.array.rank; k++) {
            const ot_slice_dim *s = &a->slice[k];
            sb_printf(b, "%s[%lld:%lld", k ? ", " : "", (long long)s->start, (long long)s->limit);
            if (s->stride != 1) sb_printf(b, ":%lld", (long long)s->stride);
            sb_puts(b, "]");
        }
        sb_puts(b, "}");
        break;
    case IR_AK_PADDING: {
        int rk = i->shape.array.rank;
        bool interior = false;
        for (int k = 0; k < rk; k++) interior |= a->padding[k].interior != 0;
        for (int k = 0; k < rk; k++) {
            sb_printf(b, "%s%lld_%lld", k ? "x" : "", (long long)a->padding[k].lo,
                      (long long)a->padding[k].hi);
            if (interior) sb_printf(b, "_%lld", (long long)a->padding[k].interior);
        }
        if (rk == 0) sb_puts(b, "0_0");
        break;
    }
    case IR_AK_WINDOW: put_window(b, a->window); break;
    case IR_AK_DIM_LABELS: put_dim_labels(b, a->conv); break;
    case IR_AK_GROUPS: put_groups(b, a->groups); break;
    case IR_AK_PAIRS:
        sb_puts(b, "{");
        for (int k = 0; k < a->npairs; k++)
            sb_printf(b, "%s{%lld,%lld}", k ? "," : "", (long long)a->pairs[2 * k],
                      (long long)a->pairs[2 * k + 1]);
        sb_puts(b, "}");
        break;
    case IR_AK_STRING:
    case IR_AK_CONFIG: {
        const char *s = load_ptr(base, r);
        put_string(b, s ? s : "");
        break;
    }
    case IR_AK_COMP: comp_name(b, i->called[r->slot], o); break;
    case IR_AK_COMP_LIST:
        sb_puts(b, "{");
        for (int k = 0; k < i->ncalled; k++) {
            if (k) sb_puts(b, ", ");
            comp_name(b, i->called[k], o);
        }
        sb_puts(b, "}");
        break;
    default: break;
    }
}

/* The attributes after the operand list: the op's schema rows in table order, each printed
 * (", name=value") when its print policy says so. */
static void put_attrs(sb *b, const ot_instr *i, const ot_hlo_print_options *o) {
    int nr;
    const uint8_t *rows = ir_attr_op_rows(i->opcode, &nr);
    for (int k = 0; k < nr; k++) {
        const ir_attr_row *r = &ir_attr_rows[rows[k]];
        if (r->kind == IR_AK_RAW_ALL) {
            for (int q = 0; q < i->nraw; q++) {
                sb_puts(b, ", ");
                sb_puts(b, i->raw[q].name);
                sb_puts(b, "=");
                sb_puts(b, i->raw[q].value);
            }
            continue;
        }
        if (r->kind == IR_AK_METADATA) {
            if (o->metadata && i->metadata) {
                sb_puts(b, ", metadata=");
                put_metadata(b, i->metadata);
            }
            continue;
        }
        if (!ir_attr_printed(r, i)) continue;
        sb_puts(b, ", ");
        sb_puts(b, r->name);
        sb_puts(b, "=");
        put_value(b, i, r, ir_attr_row_base(r, i->attrs), o);
    }
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
