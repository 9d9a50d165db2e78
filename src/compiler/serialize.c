/* The canonical module encoding (fingerprints, executable files) and the executable file:
 *
 *   magic "OPTITPUX" | u32 version | u32 0 | u64 body length | SHA-256 of the body | body
 *   body: target, options, fingerprint, module (entry in schedule order), arena, peak,
 *         slot table, kernel table
 *
 * Loading checks the magic, version, length and checksum, decodes the module through the
 * builder (every instruction re-inferred and the module verified), recomputes the program from
 * the stored schedule, and compares it with the stored tables; any disagreement is CORRUPT_DATA
 * naming the field. All integers little-endian. */
#include "compiler_internal.h"
#include "executable_internal.h"
#include "ir/attr_schema.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#define MAGIC          "OPTITPUX"
#define FORMAT_VERSION CC_EXECUTABLE_FORMAT_VERSION
#define MAX_COUNT      (1 << 26)

/* ---- writer ---- */

typedef struct wb {
    uint8_t *p;
    int64_t n, cap;
    ot_status err;
    ot_sha256 *h; /* hashing mode: bytes go to the hash, not the buffer */
} wb;

static void put(wb *w, const void *d, size_t n) {
    if (w->err || n == 0) return;
    if (w->h) {
        w->err = ot_sha256_update(w->h, d, n);
        return;
    }
    if ((w->err = cc_grow(&w->p, &w->cap, w->n + (int64_t)n, 1)) != OT_OK) return;
    memcpy(w->p + w->n, d, n);
    w->n += (int64_t)n;
}
static void put_u8(wb *w, unsigned v) {
    uint8_t b = (uint8_t)v;
    put(w, &b, 1);
}
static void put_u32(wb *w, uint32_t v) {
    uint8_t b[4];
    for (int k = 0; k < 4; k++) b[k] = (uint8_t)(v >> (8 * k));
    put(w, b, 4);
}
static void put_i64(wb *w, int64_t v) {
    uint8_t b[8];
    for (int k = 0; k < 8; k++) b[k] = (uint8_t)((uint64_t)v >> (8 * k));
    put(w, b, 8);
}
static void put_str(wb *w, const char *s) {
    if (!s) {
        put_u32(w, 0xffffffffu);
        return;
    }
    size_t n = strlen(s);
    put_u32(w, (uint32_t)n);
    put(w, s, n);
}
static void put_dims(wb *w, const int64_t *d, int n) {
    for (int k = 0; k < n; k++) put_i64(w, d ? d[k] : 0);
}

static void put_shape(wb *w, const ot_ir_shape *s) {
    put_u8(w, (unsigned)s->kind);
    if (s->kind == OT_IR_ARRAY) {
        put_u8(w, (unsigned)s->array.dtype);
        put_u8(w, (unsigned)s->array.rank);
        put_dims(w, s->array.dims, s->array.rank);
    } else if (s->kind == OT_IR_TUPLE) {
        put_u32(w, (uint32_t)s->ntuple);
        for (int k = 0; k < s->ntuple; k++) put_shape(w, &s->tuple[k]);
    }
}

static void put_window(wb *w, const ot_window *win) {
    put_u8(w, (unsigned)win->rank);
    for (int k = 0; k < win->rank; k++) {
        const ot_window_dim *d = &win->dims[k];
        put_i64(w, d->size);
        put_i64(w, d->stride);
        put_i64(w, d->pad_lo);
        put_i64(w, d->pad_hi);
        put_i64(w, d->window_dilation);
        put_i64(w, d->base_dilation);
        put_u8(w, d->reversal);
    }
}

static void put_dot(wb *w, const ot_dot_dims *d) {
    put_u8(w, (unsigned)d->nbatch);
    put_u8(w, (unsigned)d->ncontract);
    put_dims(w, d->lhs_batch, d->nbatch);
    put_dims(w, d->rhs_batch, d->nbatch);
    put_dims(w, d->lhs_contract, d->ncontract);
    put_dims(w, d->rhs_contract, d->ncontract);
}

static void put_conv(wb *w, const ot_conv_dims *d) {
    put_u8(w, (unsigned)d->nspatial);
    put_i64(w, d->input_batch);
    put_i64(w, d->input_feature);
    put_dims(w, d->input_spatial, d->nspatial);
    put_i64(w, d->kernel_input_feature);
    put_i64(w, d->kernel_output_feature);
    put_dims(w, d->kernel_spatial, d->nspatial);
    put_i64(w, d->output_batch);
    put_i64(w, d->output_feature);
    put_dims(w, d->output_spatial, d->nspatial);
}

static void put_gather(wb *w, const ot_gather_dims *g) {
    put_u8(w, (unsigned)g->noffset);
    put_dims(w, g->offset_dims, g->noffset);
    put_u8(w, (unsigned)g->ncollapsed);
    put_dims(w, g->collapsed_slice_dims, g->ncollapsed);
    put_u8(w, (unsigned)g->nstart_index_map);
    put_dims(w, g->start_index_map, g->nstart_index_map);
    put_u8(w, (unsigned)g->nbatching);
    put_dims(w, g->operand_batching_dims, g->nbatching);
    put_dims(w, g->start_indices_batching_dims, g->nbatching);
    put_i64(w, g->index_vector_dim);
    put_u8(w, (unsigned)g->nslice_sizes);
    put_dims(w, g->slice_sizes, g->nslice_sizes);
    put_u8(w, g->indices_are_sorted);
}

static void put_scatter(wb *w, const ot_scatter_dims *g) {
    put_u8(w, (unsigned)g->nupdate_window);
    put_dims(w, g->update_window_dims, g->nupdate_window);
    put_u8(w, (unsigned)g->ninserted);
    put_dims(w, g->inserted_window_dims, g->ninserted);
    put_u8(w, (unsigned)g->nscatter_to_operand);
    put_dims(w, g->scatter_dims_to_operand_dims, g->nscatter_to_operand);
    put_u8(w, (unsigned)g->nbatching);
    put_dims(w, g->input_batching_dims, g->nbatching);
    put_dims(w, g->scatter_indices_batching_dims, g->nbatching);
    put_i64(w, g->index_vector_dim);
    put_u8(w, (unsigned)(g->indices_are_sorted | g->unique_indices << 1));
}

static void put_groups(wb *w, const ot_replica_groups *g) {
    put_i64(w, g->ngroups);
    for (int64_t k = 0; k < g->ngroups; k++) put_i64(w, g->offsets[k + 1] - g->offsets[k]);
    int64_t nid = g->ngroups ? g->offsets[g->ngroups] : 0;
    for (int64_t k = 0; k < nid; k++) put_i64(w, g->ids[k]);
}

static void put_literal(wb *w, const ot_literal *l) {
    put_u8(w, l->elided);
    put_i64(w, l->elided ? 0 : l->nbytes);
    if (!l->elided) put(w, l->data, (size_t)l->nbytes);
}

static const void *field_ptr(const ot_attrs *a, const ir_attr_field *f) {
    const void *p;
    memcpy(&p, (const char *)a + f->off, sizeof p);
    return p;
}

static int64_t field_int(const ot_attrs *a, const ir_attr_field *f) {
    return ir_attr_load_int((const char *)a + f->off, f->size);
}

/* One encoder per field kind (see ir_field_kind). A pointer to one struct, slice and padding
 * are a presence byte, then the value. */
static void put_field(wb *w, const ir_attr_field *f, const ot_attrs *a, int rank) {
    const void *p = f->kind >= IR_FK_DIMS && f->kind != IR_FK_PRECISION ? field_ptr(a, f) : NULL;
    int n =
        f->count_off >= 0 ? (int)ir_attr_load_int((const char *)a + f->count_off, sizeof(int)) : 0;
    if (f->flag) {
        put_u8(w, p != NULL);
        if (!p) return;
    }
    switch ((ir_field_kind)f->kind) {
    case IR_FK_I64:
    case IR_FK_INT: put_i64(w, field_int(a, f)); break;
    case IR_FK_ENUM: put_u8(w, (unsigned)field_int(a, f)); break;
    case IR_FK_BOOL: break; /* in the flags byte (put_attrs) */
    case IR_FK_DIMS:
        put_u32(w, (uint32_t)(p ? n : 0));
        put_dims(w, p, p ? n : 0);
        break;
    case IR_FK_PAIRS:
        put_u32(w, (uint32_t)(p ? n : 0));
        put_dims(w, p, p ? 2 * n : 0);
        break;
    case IR_FK_PER_DIM: put_dims(w, p, 3 * rank); break; /* three int64 per dimension */
    case IR_FK_WINDOW: put_window(w, p); break;
    case IR_FK_DOT: put_dot(w, p); break;
    case IR_FK_CONV: put_conv(w, p); break;
    case IR_FK_GATHER: put_gather(w, p); break;
    case IR_FK_SCATTER: put_scatter(w, p); break;
    case IR_FK_GROUPS: put_groups(w, p); break;
    case IR_FK_LITERAL: put_literal(w, p); break;
    case IR_FK_STRING: put_str(w, p); break;
    case IR_FK_PRECISION: {
        const ot_precision *pr = (const ot_precision *)((const char *)a + f->off);
        put_u8(w, (unsigned)n);
        put_u8(w, (unsigned)pr[0]);
        put_u8(w, (unsigned)pr[1]);
        break;
    }
    }
}

/* The instruction's attributes: every field of the schema in its order; a run of flags packs
 * into one byte (bit k: the run's k-th). */
static void put_attrs(wb *w, const ot_instr *i) {
    const ot_attrs *a = i->attrs;
    int rank = i->shape.kind == OT_IR_ARRAY ? i->shape.array.rank : 0;
    for (int f = 0; f < IR_F_COUNT; f++) {
        if (ir_attr_fields[f].kind != IR_FK_BOOL) {
            put_field(w, &ir_attr_fields[f], a, rank);
            continue;
        }
        unsigned bits = 0;
        for (int k = 0; f < IR_F_COUNT && ir_attr_fields[f].kind == IR_FK_BOOL; k++, f++)
            bits |= (unsigned)field_int(a, &ir_attr_fields[f]) << k;
        f--;
        put_u8(w, bits);
    }
}

/* Encodes computations reachable from the entry, callees first; the entry's instructions in
 * `entry_order` when given (the schedule), else in post order. */
static ot_status put_module(wb *w, const ot_module *m, ot_instr *const *entry_order,
                            int64_t nentry) {
    ot_computation **comps = NULL;
    int nc = 0;
    OT_CHECK(cc_reachable(m, entry_order, nentry, &comps, &nc));
    cc_ptrmap cidx = {0};
    ot_status s = OT_OK;
    put_str(w, ot_module_name(m));
    const ot_module_config *cfg = ot_module_get_config(m);
    put_i64(w, cfg->replica_count);
    put_i64(w, cfg->num_partitions);
    put_u32(w, (uint32_t)cfg->nalias);
    for (int k = 0; k < cfg->nalias; k++) {
        const ot_io_alias *a = &cfg->alias[k];
        put_u8(w, (unsigned)a->noutput_index);
        put_dims(w, a->output_index, a->noutput_index);
        put_i64(w, a->param_number);
        put_u8(w, (unsigned)a->nparam_index);
        put_dims(w, a->param_index, a->nparam_index);
        put_u8(w, a->must_alias);
    }
    put_u32(w, (uint32_t)nc);
    for (int k = 0; k < nc && s == OT_OK; k++) {
        const ot_computation *c = comps[k];
        s = cc_ptrmap_put(&cidx, c, k);
        if (s != OT_OK) break;
        ot_instr **po = NULL;
        int64_t n = 0;
        bool is_entry = c == ot_module_entry(m);
        if (is_entry && entry_order) {
            po = (ot_instr **)entry_order;
            n = nentry;
        } else if ((s = cc_post_order(c, &po, &n)) != OT_OK) {
            break;
        }
        put_str(w, c->name);
        put_i64(w, n);
        for (int64_t j = 0; j < n; j++) po[j]->mark = j;
        for (int64_t j = 0; j < n; j++) {
            const ot_instr *i = po[j];
            put_u32(w, (uint32_t)i->opcode);
            put_str(w, i->name);
            put_shape(w, &i->shape);
            put_u32(w, (uint32_t)i->noperands);
            for (int q = 0; q < i->noperands; q++) put_i64(w, i->operands[q]->mark);
            put_u32(w, (uint32_t)i->ncalled);
            for (int q = 0; q < i->ncalled; q++) put_i64(w, cc_ptrmap_get(&cidx, i->called[q]));
            put_attrs(w, i);
        }
        put_i64(w, c->root ? c->root->mark : -1);
        if (!(is_entry && entry_order)) ot_free(po);
    }
    cc_ptrmap_free(&cidx);
    ot_free(comps);
    return s != OT_OK ? s : w->err;
}

static void put_options(wb *w, const ot_compile_options *o) {
    put_str(w, o->target ? o->target : "host-cpu");
    put_i64(w, o->opt_level);
    put_u8(w, o->fusion);
    put_str(w, o->passes);
    put_str(w, o->disable_passes);
    put_i64(w, o->fold_max_elements);
    put_i64(w, o->max_fusion_io);
    put_i64(w, o->arena_limit);
}

static ot_status hash_sink(void *ctx, const char *p, size_t n) {
    wb *w = ctx;
    put(w, p, n);
    return w->err;
}

/* SHA-256 of "optitpu-fingerprint-v3", the options that change code, the target, and the
 * module's canonical HLO text in XLA's fingerprint form (HloPrintOptions::Fingerprint): no
 * metadata (source locations do not change code), no operand shapes and no "%" (an operand's
 * shape is its definition's, so the text still determines the module; printing it again for
 * every use was most of the text). */
ot_status cc_fingerprint(const ot_module *m, const ot_compile_options *o,
                         const ir_module_orders *orders, uint8_t out[32]) {
    ot_hlo_print_options po = ot_hlo_print_options_default();
    po.metadata = false;
    po.operand_shapes = false;
    po.percent = false;
    ot_sha256 h;
    OT_CHECK(ot_sha256_init(&h));
    wb w = {0};
    w.h = &h;
    put(&w, "optitpu-fingerprint-v3", 22);
    put_options(&w, o);
    /* the text streams into the hash: a million-instruction module's text is never held whole */
    ot_status s = w.err;
    if (s == OT_OK) s = ir_hlo_print_stream(m, &po, orders, hash_sink, &w);
    if (s != OT_OK) {
        ot_sha256_final(&h, NULL); /* abandon */
        return s;
    }
    return ot_sha256_final(&h, out);
}

ot_status ot_compile_fingerprint(const ot_module *m, const ot_compile_options *opts,
                                 uint8_t out[32]) {
    if (!m || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "fingerprint: NULL argument");
    ot_compile_options o = opts ? *opts : ot_compile_options_default();
    return cc_fingerprint(m, &o, NULL, out);
}

/* ---- executable files ---- */

ot_status ot_executable_serialize(const ot_executable *e, void **out, size_t *out_len) {
    if (!e || !out || !out_len)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "serialize: NULL argument");
    *out = NULL;
    *out_len = 0;
    wb w = {0};
    put(&w, MAGIC, 8);
    put_u32(&w, FORMAT_VERSION);
    put_u32(&w, 0);
    put_i64(&w, 0);     /* body length, patched */
    put(&w, e->fp, 32); /* placeholder for the checksum, patched */
    int64_t body = w.n;
    put_options(&w, &e->opts);
    put(&w, e->fp, 32);
    ot_status s = put_module(&w, e->mod, e->order, e->norder);
    put_i64(&w, e->arena);
    put_i64(&w, e->peak);
    put_u32(&w, (uint32_t)e->ns);
    for (int64_t k = 0; k < e->ns; k++) {
        const ot_slot *sl = &e->s[k];
        put_u8(&w, (unsigned)sl->kind);
        put_u8(&w, (unsigned)sl->shape.dtype);
        put_u8(&w, (unsigned)sl->shape.rank);
        put_dims(&w, sl->shape.dims, sl->shape.rank);
        put_i64(&w, sl->offset);
        put_i64(&w, sl->number);
        put_i64(&w, sl->alias_param);
    }
    put_u32(&w, (uint32_t)e->nk);
    for (int64_t k = 0; k < e->nk; k++) {
        const ot_kernel *kn = &e->k[k];
        put_u8(&w, (unsigned)kn->kind);
        put_u32(&w, (uint32_t)kn->opcode);
        put_u32(&w, (uint32_t)kn->ninputs);
        for (int q = 0; q < kn->ninputs; q++) put_u32(&w, (uint32_t)kn->inputs[q]);
        put_u32(&w, (uint32_t)kn->noutputs);
        for (int q = 0; q < kn->noutputs; q++) put_u32(&w, (uint32_t)kn->outputs[q]);
        put_i64(&w, kn->in_place_input);
        put_i64(&w, kn->flops);
    }
    if (s == OT_OK) s = w.err;
    if (s != OT_OK) {
        ot_free(w.p);
        return s;
    }
    int64_t blen = w.n - body;
    for (int k = 0; k < 8; k++) w.p[16 + k] = (uint8_t)((uint64_t)blen >> (8 * k));
    s = ot_sha256_digest(w.p + body, (size_t)blen, w.p + 24);
    if (s != OT_OK) {
        ot_free(w.p);
        return s;
    }
    *out = w.p;
    *out_len = (size_t)w.n;
    return OT_OK;
}

/* ---- reader ---- */

typedef struct rb {
    const uint8_t *p;
    int64_t n, off;
    ot_status err;
    char what[160];
} rb;

static bool need(rb *r, int64_t n, const char *what) {
    if (r->err) return false;
    if (n < 0 || n > r->n - r->off) {
        r->err = ot_error(OT_ERR_CORRUPT_DATA, "executable: truncated at byte %lld reading %s",
                          (long long)r->off, what);
        return false;
    }
    return true;
}
static const uint8_t *get(rb *r, int64_t n, const char *what) {
    if (!need(r, n, what)) return NULL;
    const uint8_t *p = r->p + r->off;
    r->off += n;
    return p;
}
static unsigned get_u8(rb *r, const char *what) {
    const uint8_t *p = get(r, 1, what);
    return p ? p[0] : 0;
}
static uint32_t get_u32(rb *r, const char *what) {
    const uint8_t *p = get(r, 4, what);
    if (!p) return 0;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) v |= (uint32_t)p[k] << (8 * k);
    return v;
}
static int64_t get_i64(rb *r, const char *what) {
    const uint8_t *p = get(r, 8, what);
    if (!p) return 0;
    uint64_t v = 0;
    for (int k = 0; k < 8; k++) v |= (uint64_t)p[k] << (8 * k);
    return (int64_t)v;
}
static bool bad(rb *r, const char *fmt, const char *what, long long v) {
    if (!r->err) {
        char msg[256];
        snprintf(msg, sizeof msg, fmt, what, v);
        r->err =
            ot_error(OT_ERR_CORRUPT_DATA, "executable: %s (at byte %lld)", msg, (long long)r->off);
    }
    return false;
}
/* A count in [0, max]. */
static int64_t get_count(rb *r, int64_t max, bool wide, const char *what) {
    int64_t v = wide ? get_i64(r, what) : (int64_t)get_u32(r, what);
    if (r->err) return 0;
    if (v < 0 || v > max) {
        bad(r, "%s: count %lld out of range", what, (long long)v);
        return 0;
    }
    return v;
}
static int64_t get_small(rb *r, int64_t max, const char *what) {
    int64_t v = get_u8(r, what);
    if (!r->err && v > max) {
        bad(r, "%s: %lld out of range", what, (long long)v);
        return 0;
    }
    return v;
}
/* A string copied into buf (NUL-terminated); *is_null for the NULL marker. */
static const char *get_str(rb *r, char *buf, size_t cap, bool *is_null, const char *what) {
    uint32_t n = get_u32(r, what);
    if (is_null) *is_null = false;
    if (r->err) return NULL;
    if (n == 0xffffffffu) {
        if (is_null) *is_null = true;
        return NULL;
    }
    if (n >= cap) {
        bad(r, "%s: string of %lld bytes is too long", what, (long long)n);
        return NULL;
    }
    const uint8_t *p = get(r, n, what);
    if (!p) return NULL;
    memcpy(buf, p, n);
    buf[n] = 0;
    if (strlen(buf) != n) {
        bad(r, "%s: string holds a NUL byte%.0lld", what, 0);
        return NULL;
    }
    return buf;
}
static void get_dims(rb *r, int64_t *d, int64_t n, const char *what) {
    for (int64_t k = 0; k < n; k++) d[k] = get_i64(r, what);
}

/* Shapes decoded into the module arena through a scratch tuple pool. */
typedef struct shpool {
    ot_ir_shape *v;
    int64_t n, cap;
} shpool;

static bool get_shape(rb *r, ot_ir_shape *s, int depth, shpool *pool) {
    memset(s, 0, sizeof *s);
    if (depth > 8) return bad(r, "%s: tuple nesting deeper than %lld", "shape", 8);
    unsigned kind = get_u8(r, "shape kind");
    if (r->err) return false;
    if (kind == OT_IR_ARRAY) {
        s->kind = OT_IR_ARRAY;
        unsigned dt = get_u8(r, "dtype");
        int64_t rank = get_small(r, OT_MAX_RANK, "rank");
        if (r->err) return false;
        if (dt >= OT_DTYPE_COUNT) return bad(r, "%s %lld is not a dtype", "dtype", (long long)dt);
        int64_t d[OT_MAX_RANK];
        get_dims(r, d, rank, "dimension");
        if (r->err) return false;
        if (ot_shape_make(&s->array, (ot_dtype)dt, (int)rank, d) != OT_OK)
            return bad(r, "%s: bad array shape (%lld)", "shape", 0);
        return true;
    }
    if (kind == OT_IR_TOKEN) {
        s->kind = OT_IR_TOKEN;
        return true;
    }
    if (kind != OT_IR_TUPLE) return bad(r, "%s kind %lld unknown", "shape", (long long)kind);
    s->kind = OT_IR_TUPLE;
    int64_t n = get_count(r, 4096, false, "tuple size");
    if (r->err) return false;
    ot_ir_shape *el = ot_calloc((size_t)(n ? n : 1), sizeof *el);
    if (!el) {
        r->err = ot_error(OT_ERR_OUT_OF_MEMORY, "executable: out of memory");
        return false;
    }
    if (cc_grow(&pool->v, &pool->cap, pool->n + 1, sizeof(ot_ir_shape *)) != OT_OK) {
        ot_free(el);
        r->err = OT_ERR_OUT_OF_MEMORY;
        return false;
    }
    ((ot_ir_shape **)pool->v)[pool->n++] = el;
    for (int64_t k = 0; k < n; k++)
        if (!get_shape(r, &el[k], depth + 1, pool)) return false;
    s->ntuple = (int)n;
    s->tuple = el;
    return true;
}

static void pool_free(shpool *p) {
    for (int64_t k = 0; k < p->n; k++) ot_free(((ot_ir_shape **)p->v)[k]);
    ot_free(p->v);
    memset(p, 0, sizeof *p);
}

/* Decoded attributes with their storage. */
typedef struct dattrs {
    ot_attrs a;
    int64_t dims[4096];
    ot_slice_dim slice[OT_MAX_RANK];
    ot_pad_dim pad[OT_MAX_RANK];
    ot_window win;
    ot_dot_dims dot;
    ot_conv_dims conv;
    ot_gather_dims gather;
    ot_scatter_dims scatter;
    int64_t *gsizes, *gids;
    int64_t *pairs;
    char target[1024], config[65536];
    ot_literal lit;
} dattrs;

/* Where each pointer field of a decoded ot_attrs points into dattrs. */
static const size_t dattrs_storage[IR_F_COUNT] = {
    [IR_F_DIMS] = offsetof(dattrs, dims),
    [IR_F_SLICE] = offsetof(dattrs, slice),
    [IR_F_PADDING] = offsetof(dattrs, pad),
    [IR_F_WINDOW] = offsetof(dattrs, win),
    [IR_F_DOT] = offsetof(dattrs, dot),
    [IR_F_CONV] = offsetof(dattrs, conv),
    [IR_F_GATHER] = offsetof(dattrs, gather),
    [IR_F_SCATTER] = offsetof(dattrs, scatter),
    [IR_F_CUSTOM_CALL_TARGET] = offsetof(dattrs, target),
    [IR_F_BACKEND_CONFIG] = offsetof(dattrs, config),
    [IR_F_LITERAL] = offsetof(dattrs, lit),
};

static void dattrs_clear(dattrs *d) {
    ot_free(d->gsizes);
    ot_free(d->gids);
    ot_free(d->pairs);
    d->gsizes = d->gids = d->pairs = NULL;
}

static void get_window(rb *r, ot_window *w) {
    memset(w, 0, sizeof *w);
    w->rank = (int)get_small(r, OT_MAX_RANK, "window rank");
    for (int k = 0; k < w->rank; k++) {
        ot_window_dim *x = &w->dims[k];
        x->size = get_i64(r, "window");
        x->stride = get_i64(r, "window");
        x->pad_lo = get_i64(r, "window");
        x->pad_hi = get_i64(r, "window");
        x->window_dilation = get_i64(r, "window");
        x->base_dilation = get_i64(r, "window");
        x->reversal = get_small(r, 1, "window reversal");
    }
}

static void get_dot(rb *r, ot_dot_dims *x) {
    memset(x, 0, sizeof *x);
    x->nbatch = (int)get_small(r, OT_MAX_RANK, "dot batch count");
    x->ncontract = (int)get_small(r, OT_MAX_RANK, "dot contracting count");
    get_dims(r, x->lhs_batch, x->nbatch, "dot");
    get_dims(r, x->rhs_batch, x->nbatch, "dot");
    get_dims(r, x->lhs_contract, x->ncontract, "dot");
    get_dims(r, x->rhs_contract, x->ncontract, "dot");
}

static void get_conv(rb *r, ot_conv_dims *x) {
    memset(x, 0, sizeof *x);
    x->nspatial = (int)get_small(r, OT_MAX_RANK, "spatial count");
    x->input_batch = get_i64(r, "conv");
    x->input_feature = get_i64(r, "conv");
    get_dims(r, x->input_spatial, x->nspatial, "conv");
    x->kernel_input_feature = get_i64(r, "conv");
    x->kernel_output_feature = get_i64(r, "conv");
    get_dims(r, x->kernel_spatial, x->nspatial, "conv");
    x->output_batch = get_i64(r, "conv");
    x->output_feature = get_i64(r, "conv");
    get_dims(r, x->output_spatial, x->nspatial, "conv");
}

static void get_gather(rb *r, ot_gather_dims *g) {
    memset(g, 0, sizeof *g);
    g->noffset = (int)get_small(r, OT_MAX_RANK, "gather");
    get_dims(r, g->offset_dims, g->noffset, "gather");
    g->ncollapsed = (int)get_small(r, OT_MAX_RANK, "gather");
    get_dims(r, g->collapsed_slice_dims, g->ncollapsed, "gather");
    g->nstart_index_map = (int)get_small(r, OT_MAX_RANK, "gather");
    get_dims(r, g->start_index_map, g->nstart_index_map, "gather");
    g->nbatching = (int)get_small(r, OT_MAX_RANK, "gather");
    get_dims(r, g->operand_batching_dims, g->nbatching, "gather");
    get_dims(r, g->start_indices_batching_dims, g->nbatching, "gather");
    g->index_vector_dim = get_i64(r, "gather");
    g->nslice_sizes = (int)get_small(r, OT_MAX_RANK, "gather");
    get_dims(r, g->slice_sizes, g->nslice_sizes, "gather");
    g->indices_are_sorted = get_small(r, 1, "gather");
}

static void get_scatter(rb *r, ot_scatter_dims *g) {
    memset(g, 0, sizeof *g);
    g->nupdate_window = (int)get_small(r, OT_MAX_RANK, "scatter");
    get_dims(r, g->update_window_dims, g->nupdate_window, "scatter");
    g->ninserted = (int)get_small(r, OT_MAX_RANK, "scatter");
    get_dims(r, g->inserted_window_dims, g->ninserted, "scatter");
    g->nscatter_to_operand = (int)get_small(r, OT_MAX_RANK, "scatter");
    get_dims(r, g->scatter_dims_to_operand_dims, g->nscatter_to_operand, "scatter");
    g->nbatching = (int)get_small(r, OT_MAX_RANK, "scatter");
    get_dims(r, g->input_batching_dims, g->nbatching, "scatter");
    get_dims(r, g->scatter_indices_batching_dims, g->nbatching, "scatter");
    g->index_vector_dim = get_i64(r, "scatter");
    unsigned f = get_small(r, 3, "scatter flags");
    g->indices_are_sorted = f & 1;
    g->unique_indices = (f >> 1) & 1;
}

static bool oom_read(rb *r) {
    r->err = ot_error(OT_ERR_OUT_OF_MEMORY, "out of memory");
    return false;
}

static bool get_groups(rb *r, dattrs *d, ot_module *m, const ot_replica_groups **out) {
    int64_t ng = get_i64(r, "replica group count");
    if (r->err) return false;
    if (ng < 0 || ng > (r->n - r->off) / 8) return bad(r, "%s: %lld groups", "replica groups", ng);
    d->gsizes = ot_malloc((size_t)(ng ? ng : 1) * sizeof *d->gsizes);
    if (!d->gsizes) return oom_read(r);
    int64_t tot = 0;
    for (int64_t k = 0; k < ng; k++) {
        d->gsizes[k] = get_i64(r, "replica group size");
        if (r->err) return false;
        if (d->gsizes[k] < 0 || d->gsizes[k] > (r->n - r->off) / 8 - tot)
            return bad(r, "%s size %lld out of range", "replica group", d->gsizes[k]);
        tot += d->gsizes[k];
    }
    d->gids = ot_malloc((size_t)(tot ? tot : 1) * sizeof *d->gids);
    if (!d->gids) return oom_read(r);
    get_dims(r, d->gids, tot, "replica ids");
    if (r->err) return false;
    *out = ot_replica_groups_make(m, ng, d->gsizes, d->gids);
    if (!*out) {
        r->err = ot_error_wrap(OT_ERR_CORRUPT_DATA, "executable: replica groups");
        return false;
    }
    return true;
}

static bool get_pairs(rb *r, dattrs *d, const ir_attr_field *f, int64_t *n) {
    *n = get_count(r, f->hi, false, f->what);
    if (r->err) return false;
    if (*n > (r->n - r->off) / 16) return bad(r, "%s: %lld pairs past the end", "pairs", *n);
    if (*n) {
        d->pairs = ot_malloc((size_t)*n * 2 * sizeof *d->pairs);
        if (!d->pairs) return oom_read(r);
        get_dims(r, d->pairs, 2 * *n, "pairs");
    }
    return true;
}

static bool get_literal(rb *r, ot_literal *l) {
    l->elided = get_small(r, 1, "elided flag");
    l->nbytes = get_i64(r, "literal size");
    if (r->err) return false;
    if (l->nbytes < 0 || l->nbytes > r->n - r->off)
        return bad(r, "%s: %lld bytes past the end", "literal", l->nbytes);
    l->data = l->elided ? NULL : get(r, l->nbytes, "literal");
    return true;
}

/* One decoder per field kind, the inverse of put_field: the value into d->a, pointers into d's
 * storage. */
static bool get_field(rb *r, dattrs *d, ot_module *m, const ir_attr_field *f, int rank) {
    char *fa = (char *)&d->a + f->off;
    void *st = (char *)d + dattrs_storage[f - ir_attr_fields];
    const void *p = st;
    int64_t n = 0;
    if (f->flag && !get_small(r, 1, f->flag)) return !r->err;
    switch ((ir_field_kind)f->kind) {
    case IR_FK_I64: ir_attr_store_int(fa, f->size, get_i64(r, f->what)); return true;
    case IR_FK_INT: {
        int64_t v = get_i64(r, f->what);
        if (!r->err && (v < f->lo || v > f->hi)) return bad(r, "%s %lld out of range", f->what, v);
        ir_attr_store_int(fa, f->size, v);
        return true;
    }
    case IR_FK_ENUM: ir_attr_store_int(fa, f->size, get_small(r, f->hi, f->what)); return true;
    case IR_FK_BOOL: return true; /* in the flags byte (get_attrs) */
    case IR_FK_DIMS:
        n = get_count(r, f->hi, false, f->what);
        get_dims(r, st, n, f->what);
        if (!n) p = NULL;
        break;
    case IR_FK_PAIRS:
        if (!get_pairs(r, d, f, &n)) return false;
        p = d->pairs;
        break;
    case IR_FK_PER_DIM: get_dims(r, st, 3 * (int64_t)rank, f->what); break;
    case IR_FK_WINDOW: get_window(r, st); break;
    case IR_FK_DOT: get_dot(r, st); break;
    case IR_FK_CONV: get_conv(r, st); break;
    case IR_FK_GATHER: get_gather(r, st); break;
    case IR_FK_SCATTER: get_scatter(r, st); break;
    case IR_FK_GROUPS: {
        const ot_replica_groups *g = NULL;
        if (!get_groups(r, d, m, &g)) return false;
        p = g;
        break;
    }
    case IR_FK_LITERAL:
        if (!get_literal(r, st)) return false;
        break;
    case IR_FK_STRING: p = get_str(r, st, (size_t)f->hi + 1, NULL, f->what); break;
    case IR_FK_PRECISION: {
        ir_attr_store_int((char *)&d->a + f->count_off, sizeof(int),
                          get_small(r, 2, "precision count"));
        ot_precision *pr = (ot_precision *)fa;
        pr[0] = (ot_precision)get_small(r, f->hi, f->what);
        pr[1] = (ot_precision)get_small(r, f->hi, f->what);
        return true;
    }
    }
    if (f->count_off >= 0) ir_attr_store_int((char *)&d->a + f->count_off, sizeof(int), n);
    memcpy(fa, &p, sizeof p);
    return true;
}

static bool get_attrs(rb *r, dattrs *d, ot_module *m, int rank) {
    memset(&d->a, 0, sizeof d->a);
    for (int f = 0; f < IR_F_COUNT; f++) {
        if (ir_attr_fields[f].kind != IR_FK_BOOL) {
            if (!get_field(r, d, m, &ir_attr_fields[f], rank)) return false;
            continue;
        }
        unsigned bits = get_u8(r, "flags");
        for (int k = 0; f < IR_F_COUNT && ir_attr_fields[f].kind == IR_FK_BOOL; k++, f++)
            ir_attr_store_int((char *)&d->a + ir_attr_fields[f].off, ir_attr_fields[f].size,
                              (bits >> k) & 1);
        f--;
    }
    return !r->err;
}

static ot_status get_module(rb *r, ot_module **out, ot_instr ***entry_order, int64_t *nentry) {
    *out = NULL;
    *entry_order = NULL;
    *nentry = 0;
    char name[1024];
    get_str(r, name, sizeof name, NULL, "module name");
    if (r->err) return r->err;
    ot_module *m = ot_module_new(name);
    if (!m) return OT_ERR_OUT_OF_MEMORY;
    dattrs *d = ot_calloc(1, sizeof *d);
    ot_computation **comps = NULL;
    ot_instr **ins = NULL, **ops = NULL;
    ot_computation **called = NULL;
    shpool pool = {0};
    int64_t inscap = 0;
    ot_status s = OT_OK;
    if (!d) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "executable: out of memory");
        goto fail;
    }
    int64_t rc = get_i64(r, "replica count"), npart = get_i64(r, "partition count");
    if (!r->err && (rc < 1 || rc > (1 << 24) || npart < 1 || npart > (1 << 24)))
        bad(r, "%s: %lld out of range", "replica or partition count", rc);
    int64_t nal = get_count(r, 4096, false, "alias count");
    ot_io_alias *al = NULL;
    if (!r->err && nal) {
        al = ot_calloc((size_t)nal, sizeof *al);
        if (!al) {
            s = ot_error(OT_ERR_OUT_OF_MEMORY, "executable: out of memory");
            goto fail;
        }
        for (int64_t k = 0; k < nal && !r->err; k++) {
            al[k].noutput_index = (int)get_small(r, OT_MAX_RANK, "alias output depth");
            get_dims(r, al[k].output_index, al[k].noutput_index, "alias output index");
            al[k].param_number = get_i64(r, "alias parameter");
            al[k].nparam_index = (int)get_small(r, OT_MAX_RANK, "alias parameter depth");
            get_dims(r, al[k].param_index, al[k].nparam_index, "alias parameter index");
            al[k].must_alias = get_small(r, 1, "alias kind");
        }
    }
    int64_t nc = get_count(r, 1 << 24, false, "computation count");
    if (r->err) {
        ot_free(al);
        s = r->err;
        goto fail;
    }
    if (nc < 1) {
        ot_free(al);
        bad(r, "%s: %lld computations", "module", nc);
        s = r->err;
        goto fail;
    }
    comps = ot_calloc((size_t)nc, sizeof *comps);
    ops = ot_malloc(4096 * sizeof *ops);
    called = ot_malloc(4096 * sizeof *called);
    if (!comps || !ops || !called) {
        ot_free(al);
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "executable: out of memory");
        goto fail;
    }
    for (int64_t ci = 0; ci < nc && !r->err; ci++) {
        char cname[1024];
        get_str(r, cname, sizeof cname, NULL, "computation name");
        int64_t n = get_count(r, (r->n - r->off) / 8, true, "instruction count");
        if (r->err) break;
        ot_computation *c = ot_module_add_computation(m, cname);
        if (!c) {
            ot_status bs = ot_module_status(m);
            r->err = bs == OT_ERR_OUT_OF_MEMORY
                         ? bs
                         : ot_error_wrap(OT_ERR_CORRUPT_DATA, "executable: computation %s", cname);
            break;
        }
        comps[ci] = c;
        if (cc_grow(&ins, &inscap, n + 1, sizeof *ins) != OT_OK) {
            r->err = OT_ERR_OUT_OF_MEMORY;
            break;
        }
        for (int64_t j = 0; j < n && !r->err; j++) {
            uint32_t op = get_u32(r, "opcode");
            char iname[1024];
            get_str(r, iname, sizeof iname, NULL, "instruction name");
            ot_ir_shape shape;
            if (r->err || !get_shape(r, &shape, 0, &pool)) break;
            if (op >= OT_OP_COUNT) {
                bad(r, "%s %lld unknown", "opcode", (long long)op);
                break;
            }
            int64_t no = get_count(r, 4096, false, "operand count");
            for (int64_t q = 0; q < no && !r->err; q++) {
                int64_t x = get_i64(r, "operand");
                if (!r->err && (x < 0 || x >= j))
                    bad(r, "%s index %lld out of range", "operand", x);
                if (!r->err) ops[q] = ins[x];
            }
            int64_t ncl = get_count(r, 4096, false, "called count");
            for (int64_t q = 0; q < ncl && !r->err; q++) {
                int64_t x = get_i64(r, "called computation");
                if (!r->err && (x < 0 || x >= ci))
                    bad(r, "%s index %lld out of range", "called computation", x);
                if (!r->err) called[q] = comps[x];
            }
            int rank = shape.kind == OT_IR_ARRAY ? shape.array.rank : 0;
            if (r->err || !get_attrs(r, d, m, rank)) break;
            ot_instr *i =
                ot_build(c, (ot_opcode)op, ops, (int)no, &d->a, called, (int)ncl, &shape, iname);
            dattrs_clear(d);
            if (!i) {
                ot_status bs = ot_module_status(m);
                r->err =
                    bs == OT_ERR_OUT_OF_MEMORY
                        ? bs
                        : ot_error_wrap(OT_ERR_CORRUPT_DATA, "executable: instruction %s", iname);
                break;
            }
            ins[j] = i;
        }
        int64_t root = get_i64(r, "root");
        if (r->err) break;
        if (root < 0 || root >= n) {
            bad(r, "%s index %lld out of range", "root", root);
            break;
        }
        ot_computation_set_root(c, ins[root]);
        if (ci == nc - 1) {
            *entry_order = ot_malloc((size_t)(n ? n : 1) * sizeof **entry_order);
            if (!*entry_order) {
                r->err = OT_ERR_OUT_OF_MEMORY;
                break;
            }
            memcpy(*entry_order, ins, (size_t)n * sizeof *ins);
            *nentry = n;
        }
    }
    if (!r->err) {
        ot_module_set_entry(m, comps[nc - 1]);
        ot_module_set_replica_count(m, rc);
        ot_module_set_num_partitions(m, npart);
        for (int64_t k = 0; k < nal && !r->err; k++) {
            ot_status as = ot_module_add_alias(m, &al[k]);
            if (as == OT_ERR_OUT_OF_MEMORY)
                r->err = as;
            else if (as != OT_OK)
                r->err = ot_error_wrap(OT_ERR_CORRUPT_DATA, "executable: alias %lld", (long long)k);
        }
    }
    ot_free(al);
    if (!r->err) {
        ot_status fs = ot_module_finalize(m);
        if (fs == OT_ERR_OUT_OF_MEMORY)
            r->err = fs;
        else if (fs != OT_OK)
            r->err = ot_error_wrap(OT_ERR_CORRUPT_DATA, "executable: module does not verify");
    }
    s = r->err;
fail:
    if (d) dattrs_clear(d);
    ot_free(d);
    ot_free(comps);
    ot_free(ins);
    ot_free(ops);
    ot_free(called);
    pool_free(&pool);
    if (s != OT_OK) {
        ot_free(*entry_order);
        *entry_order = NULL;
        ot_module_free(m);
        return s;
    }
    *out = m;
    return OT_OK;
}

ot_status ot_executable_deserialize(const void *buf, size_t len, ot_executable **out) {
    return cc_executable_deserialize(buf, len, NULL, out);
}

ot_status cc_executable_deserialize(const void *buf, size_t len, const ot_compile_options *native,
                                    ot_executable **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "deserialize: out is NULL");
    *out = NULL;
    if (!buf && len) return ot_error(OT_ERR_INVALID_ARGUMENT, "deserialize: NULL buffer");
    rb r = {buf, (int64_t)len, 0, OT_OK, {0}};
    const uint8_t *mg = get(&r, 8, "magic");
    if (!mg) return r.err;
    if (memcmp(mg, MAGIC, 8) != 0)
        return ot_error(OT_ERR_CORRUPT_DATA, "executable: bad magic (not an optitpu executable)");
    uint32_t ver = get_u32(&r, "version");
    get_u32(&r, "reserved");
    int64_t blen = get_i64(&r, "body length");
    const uint8_t *sum = get(&r, 32, "checksum");
    if (r.err) return r.err;
    if (ver != FORMAT_VERSION)
        return ot_error(OT_ERR_CORRUPT_DATA, "executable: format version %u (this build reads %u)",
                        ver, FORMAT_VERSION);
    if (blen != r.n - r.off)
        return ot_error(OT_ERR_CORRUPT_DATA,
                        "executable: body length %lld does not match the %lld bytes present",
                        (long long)blen, (long long)(r.n - r.off));
    uint8_t dig[32];
    OT_CHECK(ot_sha256_digest(r.p + r.off, (size_t)blen, dig));
    if (memcmp(dig, sum, 32) != 0)
        return ot_error(OT_ERR_CORRUPT_DATA, "executable: checksum mismatch (the file is damaged)");

    ot_compile_options o = ot_compile_options_default();
    char target[256], passes[1024], disable[1024];
    bool pnull, dnull;
    o.target = get_str(&r, target, sizeof target, NULL, "target");
    o.opt_level = (int)get_i64(&r, "optimization level");
    o.fusion = get_small(&r, 1, "fusion flag");
    o.passes = get_str(&r, passes, sizeof passes, &pnull, "passes");
    o.disable_passes = get_str(&r, disable, sizeof disable, &dnull, "disabled passes");
    o.fold_max_elements = get_i64(&r, "fold limit");
    o.max_fusion_io = (int)get_i64(&r, "fusion io limit");
    o.arena_limit = get_i64(&r, "arena limit");
    const uint8_t *fp = get(&r, 32, "fingerprint");
    if (r.err) return r.err;
    if (!o.target || o.opt_level < 0 || o.opt_level > 2)
        return ot_error(OT_ERR_CORRUPT_DATA, "executable: bad options (level %d)", o.opt_level);
    ot_executable *e = NULL;
    ot_module *m = NULL;
    ot_instr **order = NULL;
    int64_t norder = 0;
    ot_status s = get_module(&r, &m, &order, &norder);
    if (s != OT_OK) return s;
    s = cc_build_executable(m, order, norder, &o, &e);
    m = NULL; /* owned by e, or freed on failure */
    order = NULL;
    if (s == OT_ERR_OUT_OF_MEMORY) return s;
    if (s != OT_OK) return ot_error_wrap(OT_ERR_CORRUPT_DATA, "executable: rebuilding the program");
    memcpy(e->fp, fp, 32);
    /* compare with the stored tables */
    int64_t arena = get_i64(&r, "arena size"), peak = get_i64(&r, "peak");
    if (!r.err && (arena != e->arena || peak != e->peak))
        r.err =
            ot_error(OT_ERR_CORRUPT_DATA,
                     "executable: arena %lld / peak %lld stored, %lld / %lld recomputed",
                     (long long)arena, (long long)peak, (long long)e->arena, (long long)e->peak);
    int64_t ns = get_count(&r, MAX_COUNT, false, "slot count");
    if (!r.err && ns != e->ns)
        r.err = ot_error(OT_ERR_CORRUPT_DATA, "executable: %lld slots stored, %lld recomputed",
                         (long long)ns, (long long)e->ns);
    for (int64_t k = 0; k < ns && !r.err; k++) {
        const ot_slot *sl = &e->s[k];
        unsigned kind = get_u8(&r, "slot kind"), dt = get_u8(&r, "slot dtype");
        int64_t rank = get_small(&r, OT_MAX_RANK, "slot rank");
        int64_t dims[OT_MAX_RANK];
        get_dims(&r, dims, rank, "slot dims");
        int64_t off = get_i64(&r, "slot offset"), num = get_i64(&r, "slot number"),
                ap = get_i64(&r, "slot alias");
        if (r.err) break;
        bool same = kind == (unsigned)sl->kind && dt == (unsigned)sl->shape.dtype &&
                    rank == sl->shape.rank && off == sl->offset && num == sl->number &&
                    ap == sl->alias_param;
        for (int q = 0; same && q < rank; q++) same = dims[q] == sl->shape.dims[q];
        if (!same)
            r.err =
                ot_error(OT_ERR_CORRUPT_DATA,
                         "executable: slot %lld differs from the recomputed program", (long long)k);
    }
    int64_t nk = get_count(&r, MAX_COUNT, false, "kernel count");
    if (!r.err && nk != e->nk)
        r.err = ot_error(OT_ERR_CORRUPT_DATA, "executable: %lld kernels stored, %lld recomputed",
                         (long long)nk, (long long)e->nk);
    for (int64_t k = 0; k < nk && !r.err; k++) {
        const ot_kernel *kn = &e->k[k];
        bool same = get_u8(&r, "kernel kind") == (unsigned)kn->kind;
        same = get_u32(&r, "kernel opcode") == (uint32_t)kn->opcode && same;
        int64_t ni = get_count(&r, MAX_COUNT, false, "kernel inputs");
        same = same && ni == kn->ninputs;
        for (int64_t q = 0; q < ni && !r.err; q++) {
            uint32_t v = get_u32(&r, "kernel input");
            same = same && v == (uint32_t)kn->inputs[q];
        }
        int64_t nout = get_count(&r, MAX_COUNT, false, "kernel outputs");
        same = same && nout == kn->noutputs;
        for (int64_t q = 0; q < nout && !r.err; q++) {
            uint32_t v = get_u32(&r, "kernel output");
            same = same && v == (uint32_t)kn->outputs[q];
        }
        same = get_i64(&r, "in-place input") == kn->in_place_input && same;
        same = get_i64(&r, "kernel flops") == kn->flops && same;
        if (!r.err && !same)
            r.err = ot_error(OT_ERR_CORRUPT_DATA,
                             "executable: kernel %lld differs from the recomputed program",
                             (long long)k);
    }
    if (!r.err && r.off != r.n)
        r.err = ot_error(OT_ERR_CORRUPT_DATA, "executable: %lld trailing bytes",
                         (long long)(r.n - r.off));
    if (r.err) {
        ot_executable_free(e);
        return r.err;
    }
    /* only the canonical form is accepted: bits and fields a writer never sets (unused attribute
     * fields, flag bits, duplicate names the builder would rename) make it CORRUPT_DATA */
    void *again = NULL;
    size_t alen = 0;
    ot_status s2 = ot_executable_serialize(e, &again, &alen);
    if (s2 == OT_OK && (alen != len || memcmp(again, buf, len) != 0))
        s2 = ot_error(OT_ERR_CORRUPT_DATA,
                      "executable: not in canonical form (it holds values no writer produces)");
    ot_free(again);
    if (s2 != OT_OK) {
        ot_executable_free(e);
        return s2;
    }
    /* native code (the file holds none) with the caller's settings, else the defaults, as
     * ot_compile's last stage */
    if (native) {
        o.native = native->native;
        o.native_unit_bytes = native->native_unit_bytes;
        o.native_cc = native->native_cc;
    }
    cc_native_stage(e, &o);
    cc_compile_loops(e, &o, 0);
    *out = e;
    return OT_OK;
}

ot_status ot_executable_save(const ot_executable *e, const char *path) {
    void *buf = NULL;
    size_t len = 0;
    OT_CHECK(ot_executable_serialize(e, &buf, &len));
    /* a regular file is replaced atomically (written beside it, then renamed over it); anything
     * else that exists (/dev/null, a pipe) is written in place, never replaced by a file */
    struct stat sb;
    bool direct = stat(path, &sb) == 0 && !S_ISREG(sb.st_mode);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    const char *target = direct ? path : tmp;
    FILE *f = fopen(target, "wb");
    if (!f) {
        ot_free(buf);
        return ot_error(OT_ERR_IO, "save %s: %s", target, strerror(errno));
    }
    bool ok = fwrite(buf, 1, len, f) == len;
    ok = fflush(f) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    ot_free(buf);
    if (!ok || (!direct && rename(tmp, path) != 0)) {
        if (!direct) remove(tmp);
        return ot_error(OT_ERR_IO, "save %s: %s", path, strerror(errno));
    }
    return OT_OK;
}

ot_status ot_executable_load(const char *path, ot_executable **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "load: out is NULL");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ot_error(OT_ERR_IO, "load %s: %s", path, strerror(errno));
    void *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 65536;
            void *nb = ot_realloc(buf, nc);
            if (!nb) {
                ot_free(buf);
                fclose(f);
                return ot_error(OT_ERR_OUT_OF_MEMORY, "load %s: out of memory", path);
            }
            buf = nb;
            cap = nc;
        }
        size_t got = fread((char *)buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        ot_free(buf);
        return ot_error(OT_ERR_IO, "load %s: read error", path);
    }
    ot_status s = ot_executable_deserialize(buf, n, out);
    ot_free(buf);
    if (s != OT_OK) return ot_error_wrap(s, "load %s", path);
    return OT_OK;
}
