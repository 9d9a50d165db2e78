/* Collective ops, replica-id and partition-id over the ot_exec_comm hook. The hook only moves
 * bytes (an exchange among a group's members, in group order); reductions are done here with the
 * op's reducer computation, combining members in group order, so every member computes
 * bit-identical results. Without a hook: single-device semantics. */
#include "exec/exec_internal.h"

/* Replicas and partitions: the communicator's, or (single device) the module's own
 * configuration, so a module built for several replicas fails clearly instead of running with
 * wrong group sizes. */
static void world_dims(const ot_instr *i, const ot_exec_comm *c, int64_t *replicas,
                       int64_t *partitions) {
    if (c) {
        *replicas = c->replica_count > 0 ? c->replica_count : 1;
        *partitions = c->num_partitions > 0 ? c->num_partitions : 1;
        return;
    }
    const ot_module_config *cfg = ot_module_get_config(i->parent->module);
    *replicas = cfg && cfg->replica_count > 0 ? cfg->replica_count : 1;
    *partitions = cfg && cfg->num_partitions > 0 ? cfg->num_partitions : 1;
}

/* XLA's collective modes: use_global_device_ids -> ids are global device ids (replica *
 * num_partitions + partition); otherwise a channel_id makes the op cross-partition (ids are
 * partition ids within this replica), and without one it is cross-replica (ids are replica ids
 * of this partition). */
typedef enum id_mode { MODE_REPLICA, MODE_PARTITION, MODE_GLOBAL } id_mode;

static id_mode mode_of(const ot_instr *i) {
    if (i->attrs.use_global_device_ids) return MODE_GLOBAL;
    return i->attrs.channel_id != 0 ? MODE_PARTITION : MODE_REPLICA;
}

static int64_t my_id(const ot_instr *i, const ot_exec_comm *c, id_mode m) {
    if (!c) return 0;
    int64_t r, p;
    world_dims(i, c, &r, &p);
    switch (m) {
    case MODE_GLOBAL: return c->replica_id * p + c->partition_id;
    case MODE_PARTITION: return c->partition_id;
    default: return c->replica_id;
    }
}

static int64_t world_size(const ot_instr *i, const ot_exec_comm *c, id_mode m) {
    int64_t r, p;
    world_dims(i, c, &r, &p);
    return m == MODE_GLOBAL ? r * p : m == MODE_PARTITION ? p : r;
}

/* The global device id of member `id` of this op's id space. */
static int64_t to_global(const ot_instr *i, const ot_exec_comm *c, id_mode m, int64_t id) {
    if (!c) return id;
    int64_t r, p;
    world_dims(i, c, &r, &p);
    switch (m) {
    case MODE_GLOBAL: return id;
    case MODE_PARTITION: return c->replica_id * p + id;
    default: return id * p + c->partition_id;
    }
}

/* The members of the group this device belongs to (ids, count) and its position in it. */
static ot_status find_group(const ot_instr *i, const ot_exec_comm *c, int64_t *ids, int64_t cap,
                            int64_t *n, int64_t *pos) {
    id_mode md = mode_of(i);
    int64_t me = my_id(i, c, md);
    const ot_replica_groups *g = i->attrs.groups;
    if (!g || g->ngroups == 0) {
        int64_t w = world_size(i, c, md);
        if (w > cap) return ot_error(OT_ERR_UNIMPLEMENTED, "%s: group too large", EX_NAME(i));
        for (int64_t k = 0; k < w; k++) ids[k] = k;
        *n = w;
        *pos = me;
        return OT_OK;
    }
    for (int64_t gi = 0; gi < g->ngroups; gi++) {
        int64_t a = g->offsets[gi], b = g->offsets[gi + 1];
        for (int64_t k = a; k < b; k++)
            if (g->ids[k] == me) {
                if (b - a > cap)
                    return ot_error(OT_ERR_UNIMPLEMENTED, "%s: group too large", EX_NAME(i));
                for (int64_t q = a; q < b; q++) ids[q - a] = g->ids[q];
                *n = b - a;
                *pos = k - a;
                return OT_OK;
            }
    }
    return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: device %lld is in none of the replica groups",
                    EX_NAME(i), (long long)me);
}

#define MAX_GROUP 4096

/* Gathers every member's bytes: recv = n * bytes, in group order. */
static ot_status exchange(ex_ctx *x, const ot_instr *i, const int64_t *ids, int64_t n,
                          const void *send, size_t bytes, void *recv) {
    if (n == 1) {
        if (bytes) memcpy(recv, send, bytes);
        return OT_OK;
    }
    const ot_exec_comm *c = x->opts.comm;
    if (!c || !c->exchange)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "%s (%s): a group of %lld devices needs a communicator (none attached)",
                        EX_NAME(i), ot_opcode_name(i->opcode), (long long)n);
    int64_t *gids = ot_malloc((size_t)n * sizeof *gids);
    if (!gids) return ot_error(OT_ERR_OUT_OF_MEMORY, "%s: out of memory", EX_NAME(i));
    id_mode md = mode_of(i);
    for (int64_t k = 0; k < n; k++) gids[k] = to_global(i, c, md, ids[k]);
    ot_status st = c->exchange(c->ctx, gids, (int)n, send, bytes, recv);
    ot_free(gids);
    if (st != OT_OK) return ot_error_wrap(st, "%s (%s)", EX_NAME(i), ot_opcode_name(i->opcode));
    return OT_OK;
}

/* out = reduce over members (group order) of the n arrays in buf, each `count` elements of t. */
static ot_status reduce_members(ex_scalar_fn *fn, ot_dtype t, const char *buf, int64_t members,
                                int64_t count, char *out) {
    size_t es = ot_dtype_size(t);
    if (count) memcpy(out, buf, (size_t)count * es);
    for (int64_t m = 1; m < members; m++)
        for (int64_t e = 0; e < count; e++) {
            uint64_t r = 0;
            const void *args[2] = {out + e * (int64_t)es, buf + (m * count + e) * (int64_t)es};
            void *outs[1] = {&r};
            OT_CHECK(ex_scalar_fn_call(fn, args, outs));
            memcpy(out + e * (int64_t)es, &r, es);
        }
    return OT_OK;
}

/* Copies chunk j of `parts` equal chunks along dim d of an array of shape s. */
static void chunk_copy(const ot_shape *s, int d, int64_t parts, int64_t j, const char *src,
                       char *dst) {
    size_t es = ot_dtype_size(s->dtype);
    int64_t outer = 1, inner = (int64_t)es;
    for (int k = 0; k < d; k++) outer *= s->dims[k];
    for (int k = d + 1; k < s->rank; k++) inner *= s->dims[k];
    int64_t c = s->dims[d] / parts;
    for (int64_t o = 0; o < outer; o++) {
        memcpy(dst + o * c * inner, src + (o * s->dims[d] + j * c) * inner, (size_t)(c * inner));
    }
}

/* Writes a chunk (shape s with dims[d] = c) into position j of a bigger array along d. */
static void chunk_place(const ot_shape *big, int d, int64_t c, int64_t j, const char *chunk,
                        char *dst) {
    size_t es = ot_dtype_size(big->dtype);
    int64_t outer = 1, inner = (int64_t)es;
    for (int k = 0; k < d; k++) outer *= big->dims[k];
    for (int k = d + 1; k < big->rank; k++) inner *= big->dims[k];
    for (int64_t o = 0; o < outer; o++)
        memcpy(dst + (o * big->dims[d] + j * c) * inner, chunk + o * c * inner,
               (size_t)(c * inner));
}

static ot_status scalar_id(const ot_instr *i, int64_t v, ot_value *out) {
    OT_CHECK(ot_value_alloc_shape(out, &i->shape));
    ex_st_i(ex_arr(out)->dtype, out->array.data, 0, v);
    return OT_OK;
}

ot_status ex_kernel_collective(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                               ot_value *out) {
    const ot_exec_comm *c = x->opts.comm;
    if (i->opcode == OT_OP_REPLICA_ID) return scalar_id(i, c ? c->replica_id : 0, out);
    if (i->opcode == OT_OP_PARTITION_ID) return scalar_id(i, c ? c->partition_id : 0, out);

    ot_status st = OT_OK;
    char *buf = NULL;
    ex_scalar_fn *fn = NULL;
    int64_t *ids = ot_malloc(MAX_GROUP * sizeof *ids);
    if (!ids) return ot_error(OT_ERR_OUT_OF_MEMORY, "%s: out of memory", EX_NAME(i));
    int64_t n = 1, pos = 0;
    if (i->opcode == OT_OP_COLLECTIVE_PERMUTE) {
        /* every device takes part; the value comes from the pair whose target is this device */
        id_mode md = mode_of(i);
        int64_t w = world_size(i, c, md), me = my_id(i, c, md);
        if (w > MAX_GROUP) {
            st = ot_error(OT_ERR_UNIMPLEMENTED, "%s: too many devices", EX_NAME(i));
            goto done;
        }
        for (int64_t k = 0; k < w; k++) ids[k] = k;
        st = ot_value_alloc_shape(out, &i->shape);
        if (st != OT_OK) goto done;
        size_t bytes = ops[0]->array.nbytes;
        buf = ot_malloc((size_t)w * bytes + 1);
        if (!buf) goto oom;
        st = exchange(x, i, ids, w, ops[0]->array.data, bytes, buf);
        if (st != OT_OK) goto done;
        for (int p = 0; p < i->attrs.npairs; p++)
            if (i->attrs.pairs[2 * p + 1] == me && i->attrs.pairs[2 * p] < w && bytes)
                memcpy(out->array.data, buf + i->attrs.pairs[2 * p] * (int64_t)bytes, bytes);
        goto done;
    }
    st = find_group(i, c, ids, MAX_GROUP, &n, &pos);
    if (st != OT_OK) goto done;
    st = ot_value_alloc_shape(out, &i->shape);
    if (st != OT_OK) goto done;
    int nops = i->noperands;
    if (i->opcode == OT_OP_ALL_REDUCE || i->opcode == OT_OP_REDUCE_SCATTER) {
        st = ex_scalar_fn_new(x, i->called[0], &fn);
        if (st != OT_OK) goto done;
    }
    if (i->opcode == OT_OP_ALL_TO_ALL && i->attrs.index < 0) {
        /* tuple form: operand k goes to member k; result k is member k's operand[pos] */
        if (nops != n) {
            st = ot_error(OT_ERR_FAILED_PRECONDITION,
                          "%s: all-to-all has %d operands for a group of %lld devices", EX_NAME(i),
                          nops, (long long)n);
            goto done;
        }
        size_t bytes = 0;
        for (int k = 0; k < nops; k++) bytes += ops[k]->array.nbytes;
        char *send = ot_malloc(bytes + 1);
        buf = ot_malloc((size_t)n * bytes + 1);
        if (!send || !buf) {
            ot_free(send);
            goto oom;
        }
        size_t off = 0;
        for (int k = 0; k < nops; k++) {
            if (ops[k]->array.nbytes) memcpy(send + off, ops[k]->array.data, ops[k]->array.nbytes);
            off += ops[k]->array.nbytes;
        }
        st = exchange(x, i, ids, n, send, bytes, buf);
        ot_free(send);
        if (st != OT_OK) goto done;
        size_t pos_off = 0;
        for (int k = 0; k < pos; k++) pos_off += ops[k]->array.nbytes;
        for (int k = 0; k < nops && k < n; k++) {
            ot_value *dst = out->kind == OT_IR_TUPLE ? &out->tuple[k] : out;
            if (dst->array.nbytes)
                memcpy(dst->array.data, buf + (size_t)k * bytes + pos_off, dst->array.nbytes);
        }
        goto done;
    }
    for (int k = 0; k < nops; k++) {
        const ot_value *src = ops[k];
        ot_value *dst = out->kind == OT_IR_TUPLE ? &out->tuple[k] : out;
        const ot_shape *s = ex_arr(src);
        size_t bytes = src->array.nbytes;
        int64_t count = ot_shape_numel_unchecked(s);
        ot_free(buf);
        buf = ot_malloc((size_t)n * bytes + 1);
        if (!buf) goto oom;
        st = exchange(x, i, ids, n, src->array.data, bytes, buf);
        if (st != OT_OK) goto done;
        int dd = (int)i->attrs.index;
        bool fits = true;
        if (i->opcode == OT_OP_ALL_GATHER)
            fits = ex_arr(dst)->dims[dd] == n * s->dims[dd];
        else if (i->opcode == OT_OP_REDUCE_SCATTER)
            fits = s->dims[dd] % n == 0 && ex_arr(dst)->dims[dd] == s->dims[dd] / n;
        else if (i->opcode == OT_OP_ALL_TO_ALL)
            fits = s->dims[dd] % n == 0;
        if (!fits) {
            st = ot_error(OT_ERR_FAILED_PRECONDITION,
                          "%s (%s): its shape was inferred for another group size than the %lld "
                          "devices of this group",
                          EX_NAME(i), ot_opcode_name(i->opcode), (long long)n);
            goto done;
        }
        switch (i->opcode) {
        case OT_OP_ALL_REDUCE:
            st = reduce_members(fn, s->dtype, buf, n, count, dst->array.data);
            break;
        case OT_OP_ALL_GATHER: {
            int d = (int)i->attrs.index;
            for (int64_t m = 0; m < n; m++)
                chunk_place(ex_arr(dst), d, s->dims[d], m, buf + m * (int64_t)bytes,
                            dst->array.data);
            break;
        }
        case OT_OP_REDUCE_SCATTER: {
            char *full = ot_malloc(bytes + 1);
            if (!full) goto oom;
            st = reduce_members(fn, s->dtype, buf, n, count, full);
            if (st == OT_OK) chunk_copy(s, (int)i->attrs.index, n, pos, full, dst->array.data);
            ot_free(full);
            break;
        }
        case OT_OP_ALL_TO_ALL: {
            /* chunk j of member m's operand goes to member j; the result concatenates, along
             * the split dimension, chunk `pos` of every member in group order */
            int d = (int)i->attrs.index;
            int64_t csz = s->dims[d] / n;
            size_t cbytes = bytes / (size_t)n;
            char *chunk = ot_malloc(cbytes + 1);
            if (!chunk) goto oom;
            for (int64_t m = 0; m < n; m++) {
                chunk_copy(s, d, n, pos, buf + m * (int64_t)bytes, chunk);
                chunk_place(ex_arr(dst), d, csz, m, chunk, dst->array.data);
            }
            ot_free(chunk);
            break;
        }
        default: st = ot_error(OT_ERR_INTERNAL, "%s: not a collective", EX_NAME(i)); break;
        }
        if (st != OT_OK) goto done;
    }
    goto done;
oom:
    st = ot_error(OT_ERR_OUT_OF_MEMORY, "%s: out of memory", EX_NAME(i));
done:
    if (st != OT_OK) ot_value_release(out);
    ex_scalar_fn_free(fn);
    ot_free(buf);
    ot_free(ids);
    return st;
}
