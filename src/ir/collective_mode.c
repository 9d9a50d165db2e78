/* XLA's collective group modes (CollectiveOpGroupMode) and group sizes (GetSubgroupSize). */
#include "ir_internal.h"

ot_status ot_collective_mode_of(ot_opcode op, const ot_attrs *a, ot_collective_mode *out) {
    bool channel = a && a->channel_id != 0;
    /* only all-reduce, all-gather and reduce-scatter carry use_global_device_ids; for the others
     * XLA decides by the channel id alone */
    bool has_flag = op == OT_OP_ALL_REDUCE || op == OT_OP_ALL_GATHER || op == OT_OP_REDUCE_SCATTER;
    bool global = has_flag && a && a->use_global_device_ids;
    if (!channel) {
        if (global)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "%s: use_global_device_ids=true needs a channel_id",
                            ot_opcode_name(op));
        *out = OT_COLLECTIVE_CROSS_REPLICA;
    } else if (!has_flag) {
        *out = OT_COLLECTIVE_CROSS_PARTITION;
    } else {
        *out = global ? OT_COLLECTIVE_FLATTENED_ID : OT_COLLECTIVE_CROSS_REPLICA_AND_PARTITION;
    }
    return OT_OK;
}

const char *ot_collective_mode_name(ot_collective_mode m) {
    switch (m) {
    case OT_COLLECTIVE_CROSS_REPLICA: return "cross-replica";
    case OT_COLLECTIVE_CROSS_PARTITION: return "cross-partition";
    case OT_COLLECTIVE_CROSS_REPLICA_AND_PARTITION: return "cross-replica-and-partition";
    case OT_COLLECTIVE_FLATTENED_ID: return "flattened-id";
    }
    return "<invalid>";
}

int64_t ot_collective_group_size(ot_collective_mode m, const ot_replica_groups *g, int64_t replicas,
                                 int64_t partitions) {
    if (replicas < 1) replicas = 1;
    if (partitions < 1) partitions = 1;
    bool empty = !g || g->ngroups == 0;
    int64_t first = empty ? 0 : g->offsets[1] - g->offsets[0];
    switch (m) {
    case OT_COLLECTIVE_CROSS_REPLICA: return empty ? replicas : first;
    case OT_COLLECTIVE_CROSS_PARTITION: return empty ? partitions : first;
    case OT_COLLECTIVE_CROSS_REPLICA_AND_PARTITION: return (empty ? replicas : first) * partitions;
    case OT_COLLECTIVE_FLATTENED_ID: return empty ? replicas * partitions : first;
    }
    return first;
}
