/* All-reduce over a pod of 8 host devices arranged as a 2x4 torus, one thread per device.
 *
 * Every device holds a gradient; each algorithm sums them in place. The values are small
 * integers, so every sum is exact: the program checks each element against the closed form and
 * that every device received the same bits, and exits 1 otherwise. Device 0 prints the cost
 * model's table for the buffer size (what OT_ALGO_AUTO would pick). */
#include <optitpu/optitpu.h>

#include <stdio.h>
#include <string.h>

#define NDEV  8
#define COUNT 100000 /* f32 elements per device */

typedef struct pod {
    ot_topology *topo;
    float *grad[NDEV]; /* one buffer per device; read by device 0 after each barrier */
    int bad;           /* mismatches seen by device 0 (checked by main after the run) */
} pod;

static const ot_coll_algo algos[] = {OT_ALGO_RING,   OT_ALGO_HALVING_DOUBLING, OT_ALGO_TREE,
                                     OT_ALGO_HIER2D, OT_ALGO_DIRECT,           OT_ALGO_AUTO};

/* Runs on device `rank`'s own thread with its communicator. */
static ot_status device_main(void *ud, int rank, ot_comm *c) {
    pod *p = ud;
    float *g = p->grad[rank];
    OT_CHECK(ot_comm_set_topology(c, p->topo)); /* rings follow the torus links */
    if (rank == 0) {
        char table[2048];
        ot_coll_explain(c, OT_COLL_ALLREDUCE, COUNT * sizeof(float), table, sizeof table);
        printf("%s", table);
    }
    for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
        for (int i = 0; i < COUNT; i++) g[i] = (float)((rank + 1) * (i % 7));
        ot_coll_options o = ot_coll_options_default();
        o.algo = algos[a];
        o.timeout_ns = 10 * 1000000000LL; /* a device that never arrives fails the call */
        uint64_t t0 = ot_now_ns();
        OT_CHECK(ot_comm_allreduce(c, g, g, COUNT, OT_F32, OT_REDOP_SUM, &o));
        double us = (double)(ot_now_ns() - t0) / 1e3;
        OT_CHECK(ot_comm_barrier(c, NULL)); /* every device has its result */
        if (rank == 0) {
            /* sum over ranks of (rank + 1) * (i % 7) = 36 * (i % 7) */
            int bad = 0;
            for (int i = 0; i < COUNT; i++) bad += g[i] != (float)(36 * (i % 7));
            for (int r = 1; r < NDEV; r++) bad += memcmp(p->grad[r], g, COUNT * sizeof *g) != 0;
            printf("%-16s %8.0f us  %s\n", ot_coll_algo_name(algos[a]), us,
                   bad ? "WRONG" : "exact, identical on all 8");
            p->bad += bad; /* no early return: the other devices would wait for device 0 */
        }
        OT_CHECK(ot_comm_barrier(c, NULL)); /* device 0 is done reading before the next fill */
    }
    return OT_OK;
}

int main(void) {
    pod p = {0};
    ot_status s = ot_topology_preset("torus-2x4", &p.topo);
    for (int r = 0; r < NDEV && s == OT_OK; r++) {
        p.grad[r] = ot_malloc(COUNT * sizeof(float));
        if (!p.grad[r]) s = ot_error(OT_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (s == OT_OK) {
        printf("pod: %s, %d devices, diameter %d hops\n", ot_topology_name(p.topo),
               ot_topology_size(p.topo), ot_topology_diameter(p.topo));
        s = ot_local_run(NDEV, device_main, &p, NULL); /* 8 threads, one world */
    }
    if (s == OT_OK && p.bad)
        s = ot_error(OT_ERR_INTERNAL, "%d elements wrong or not identical", p.bad);
    for (int r = 0; r < NDEV; r++) ot_free(p.grad[r]);
    ot_topology_free(p.topo);
    if (s != OT_OK) {
        fprintf(stderr, "allreduce: %s\n", ot_last_error());
        return 1;
    }
    printf("ok\n");
    return 0;
}
