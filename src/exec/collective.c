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

/* This device's replica and partition (0 and 0 without a communicator). */
static void my_coords(const ot_exec_comm *c, int64_t *r, int64_t *p) {
    *r = c ? c->replica_id : 0;
    *p = c ? c->partition_id : 0;
}

static ot_status mode_of(const ot_instr *i, ot_collective_mode *md) {
    ot_status st = ot_collective_mode_of(i->opcode, i->attrs, md);
    if (st != OT_OK) return ot_error_wrap(st, "%s", EX_NAME(i));
    return OT_OK;
}

/* The members of the group this device belongs to, as global device ids (replica *
 * num_partitions + partition) in XLA's participant order, and this device's position among
 * them (XLA's GetParticipatingDevices). */
static ot_status find_group(const ot_instr *i, const ot_exec_comm *c, int64_t *ids, int64_t cap,
                            int64_t *n, int64_t *pos) {
    ot_collective_mode md;
    OT_CHECK(mode_of(i, &md));
    int64_t R, P, r, p;
    world_dims(i, c, &R, &P);
    my_coords(c, &r, &p);
    int64_t me = r * P + p;
    /* the id that selects this device's group, and how many ids the mode's space has */
    int64_t key = md == OT_COLLECTIVE_CROSS_PARTITION ? p
                  : md == OT_COLLECTIVE_FLATTENED_ID  ? me
                                                      : r;
    int64_t space = md == OT_COLLECTIVE_CROSS_PARTITION ? P
                    : md == OT_COLLECTIVE_FLATTENED_ID  ? R * P
                                                        : R;
    const ot_replica_groups *g = i->attrs->groups;
    bool empty = !g || g->ngroups == 0;
    if (empty && md == OT_COLLECTIVE_FLATTENED_ID)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "%s (%s): use_global_device_ids=true needs explicit replica_groups",
                        EX_NAME(i), ot_opcode_name(i->opcode));
    int64_t a = 0, b = space;
    const int64_t *list = NULL; /* NULL: the ids 0..space-1 */
    if (!empty) {
        int64_t found = -1;
        for (int64_t gi = 0; gi < g->ngroups && found < 0; gi++)
            for (int64_t k = g->offsets[gi]; k < g->offsets[gi + 1]; k++)
                if (g->ids[k] == key) found = gi;
        if (found < 0)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "%s (%s, %s): %s %lld is in none of the replica groups", EX_NAME(i),
                            ot_opcode_name(i->opcode), ot_collective_mode_name(md),
                            md == OT_COLLECTIVE_CROSS_PARTITION ? "partition"
                            : md == OT_COLLECTIVE_FLATTENED_ID  ? "device"
                                                                : "replica",
                            (long long)key);
        a = g->offsets[found];
        b = g->offsets[found + 1];
        list = g->ids;
    }
    int64_t per = md == OT_COLLECTIVE_CROSS_REPLICA_AND_PARTITION ? P : 1;
    if ((b - a) * per > cap)
        return ot_error(OT_ERR_UNIMPLEMENTED, "%s: a group of more than %lld devices", EX_NAME(i),
                        (long long)cap);
    int64_t cnt = 0;
    *pos = -1;
    for (int64_t k = a; k < b; k++) {
        int64_t id = list ? list[k] : k;
        if (id < 0 || id >= space)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "%s (%s, %s): id %lld in replica_groups is outside the %lld %s",
                            EX_NAME(i), ot_opcode_name(i->opcode), ot_collective_mode_name(md),
                            (long long)id, (long long)space,
                            md == OT_COLLECTIVE_CROSS_PARTITION ? "partitions"
                            : md == OT_COLLECTIVE_FLATTENED_ID  ? "devices"
                                                                : "replicas");
        for (int64_t q = 0; q < per; q++) {
            int64_t gid;
            switch (md) {
            case OT_COLLECTIVE_CROSS_REPLICA: gid = id * P + p; break;
            case OT_COLLECTIVE_CROSS_PARTITION: gid = r * P + id; break;
            case OT_COLLECTIVE_CROSS_REPLICA_AND_PARTITION: gid = id * P + q; break;
            default: gid = id; break;
            }
            if (gid == me) *pos = cnt;
            ids[cnt++] = gid;
        }
    }
    *n = cnt;
    if (*pos < 0)
        return ot_error(OT_ERR_INTERNAL, "%s: device %lld is not in its own group", EX_NAME(i),
                        (long long)me);
    return OT_OK;
}

#define MAX_GROUP 4096

/* Gathers every member's bytes: recv = n * bytes, in group order (ids: global device ids). */
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
    ot_status st = c->exchange(c->ctx, ids, (int)n, send, bytes, recv);
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
        /* every device of the mode's id space takes part (the replicas of this partition, or
         * with a channel_id the partitions of this replica); the value comes from the pair whose
         * target is this device, zeros when none is */
        ot_collective_mode md;
        st = mode_of(i, &md);
        if (st != OT_OK) goto done;
        int64_t R, P, r, p;
        world_dims(i, c, &R, &P);
        my_coords(c, &r, &p);
        bool cross_part = md == OT_COLLECTIVE_CROSS_PARTITION;
        int64_t w = cross_part ? P : R, me = cross_part ? p : r;
        if (w > MAX_GROUP) {
            st = ot_error(OT_ERR_UNIMPLEMENTED, "%s: more than %d devices", EX_NAME(i), MAX_GROUP);
            goto done;
        }
        for (int k = 0; k < 2 * i->attrs->npairs; k++)
            if (i->attrs->pairs[k] < 0 || i->attrs->pairs[k] >= w) {
                st =
                    ot_error(OT_ERR_INVALID_ARGUMENT,
                             "%s (collective-permute, %s): id %lld in source_target_pairs is "
                             "outside the %lld %s",
                             EX_NAME(i), ot_collective_mode_name(md), (long long)i->attrs->pairs[k],
                             (long long)w, cross_part ? "partitions" : "replicas");
                goto done;
            }
        for (int64_t k = 0; k < w; k++) ids[k] = cross_part ? r * P + k : k * P + p;
        st = ot_value_alloc_shape(out, &i->shape);
        if (st != OT_OK) goto done;
        size_t bytes = ops[0]->array.nbytes;
        buf = ot_malloc((size_t)w * bytes + 1);
        if (!buf) goto oom;
        st = exchange(x, i, ids, w, ops[0]->array.data, bytes, buf);
        if (st != OT_OK) goto done;
        for (int q = 0; q < i->attrs->npairs; q++)
            if (i->attrs->pairs[2 * q + 1] == me && bytes)
                memcpy(out->array.data, buf + i->attrs->pairs[2 * q] * (int64_t)bytes, bytes);
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
    if (i->opcode == OT_OP_ALL_TO_ALL && i->attrs->index < 0) {
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
        int dd = (int)i->attrs->index;
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
            int d = (int)i->attrs->index;
            for (int64_t m = 0; m < n; m++)
                chunk_place(ex_arr(dst), d, s->dims[d], m, buf + m * (int64_t)bytes,
                            dst->array.data);
            break;
        }
        case OT_OP_REDUCE_SCATTER: {
            char *full = ot_malloc(bytes + 1);
            if (!full) goto oom;
            st = reduce_members(fn, s->dtype, buf, n, count, full);
            if (st == OT_OK) chunk_copy(s, (int)i->attrs->index, n, pos, full, dst->array.data);
            ot_free(full);
            break;
        }
        case OT_OP_ALL_TO_ALL: {
            /* chunk j of member m's operand goes to member j; the result concatenates, along
             * the split dimension, chunk `pos` of every member in group order */
            int d = (int)i->attrs->index;
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
