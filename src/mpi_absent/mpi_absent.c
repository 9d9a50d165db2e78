/* optitpu/mpi.h when the library is built without MPI (OT_WITH_MPI=OFF or no Open MPI found):
 * every entry point reports the missing build feature instead of pretending to work. */
#ifndef OT_HAVE_MPI
#include "optitpu/mpi.h"

#include <stddef.h>
#include <stdlib.h>

#define ABSENT()                                                                                   \
    ot_error(OT_ERR_UNIMPLEMENTED,                                                                 \
             "%s: this optitpu was built without MPI (install "                                    \
             "libopenmpi-dev and rebuild)",                                                        \
             __func__)

bool ot_mpi_available(void) {
    return false;
}
ot_mpi_options ot_mpi_options_default(void) {
    ot_mpi_options o = {.local_devices = 1,
                        .topology = NULL,
                        .timeout_ns = 0,
                        .heartbeat_fail_s = 10.0,
                        .shared_memory = true};
    return o;
}
ot_status ot_mpi_init(const ot_mpi_options *o, ot_mpi **out) {
    (void)o;
    if (out) *out = NULL;
    return ABSENT();
}
void ot_mpi_free(ot_mpi *m) {
    (void)m;
}
int ot_mpi_rank(const ot_mpi *m) {
    (void)m;
    return 0;
}
int ot_mpi_size(const ot_mpi *m) {
    (void)m;
    return 0;
}
int ot_mpi_local_devices(const ot_mpi *m) {
    (void)m;
    return 0;
}
int ot_mpi_global_device(const ot_mpi *m, int rank, int local) {
    (void)m, (void)rank, (void)local;
    return -1;
}
int ot_mpi_device_process(const ot_mpi *m, int device) {
    (void)m, (void)device;
    return -1;
}
const ot_topology *ot_mpi_topology(const ot_mpi *m) {
    (void)m;
    return NULL;
}
ot_comm *ot_mpi_comm(ot_mpi *m) {
    (void)m;
    return NULL;
}
ot_comm *ot_mpi_local_comm(ot_mpi *m, int local) {
    (void)m, (void)local;
    return NULL;
}
bool ot_mpi_shared_memory(const ot_mpi *m) {
    (void)m;
    return false;
}
const char *ot_mpi_algo_name(ot_mpi_algo a) {
    static const char *const n[] = {"auto", "native", "ring", "halving_doubling", "tree", "shm"};
    return a >= 0 && a < OT_MPI_ALGO_COUNT ? n[a] : "?";
}
int ot_mpi_algo_from_name(const char *s) {
    (void)s;
    return -1;
}
ot_mpi_coll_options ot_mpi_coll_options_default(void) {
    ot_mpi_coll_options o = {OT_MPI_ALGO_AUTO, 0, 0, false};
    return o;
}
ot_status ot_mpi_calibrate(ot_mpi *m) {
    (void)m;
    return ABSENT();
}
bool ot_mpi_model_shm(const ot_mpi *m, ot_cost_params *shm) {
    (void)m, (void)shm;
    return false;
}
void ot_mpi_model(const ot_mpi *m, ot_cost_params *p2p, ot_cost_params *native) {
    (void)m, (void)p2p, (void)native;
}
ot_mpi_algo ot_mpi_choose(const ot_mpi *m, size_t count, ot_dtype dt, ot_redop op,
                          const ot_mpi_coll_options *o) {
    (void)m, (void)count, (void)dt, (void)op, (void)o;
    return OT_MPI_ALGO_AUTO;
}
double ot_mpi_cost_us(const ot_mpi *m, ot_mpi_algo a, size_t count, ot_dtype dt) {
    (void)m, (void)a, (void)count, (void)dt;
    return -1;
}
ot_status ot_mpi_allreduce(ot_mpi *m, const void *s, void *r, size_t count, ot_dtype dt,
                           ot_redop op, const ot_mpi_coll_options *o) {
    (void)m, (void)s, (void)r, (void)count, (void)dt, (void)op, (void)o;
    return ABSENT();
}
ot_status ot_mpi_allreduce_plain(ot_mpi *m, const void *s, void *r, size_t count, ot_dtype dt,
                                 ot_redop op) {
    (void)m, (void)s, (void)r, (void)count, (void)dt, (void)op;
    return ABSENT();
}
ot_status ot_mpi_hier_allreduce(ot_mpi *m, int local, const void *s, void *r, size_t count,
                                ot_dtype dt, ot_redop op, int64_t timeout_ns) {
    (void)m, (void)local, (void)s, (void)r, (void)count, (void)dt, (void)op, (void)timeout_ns;
    return ABSENT();
}
ot_status ot_mpi_barrier(ot_mpi *m, int64_t timeout_ns) {
    (void)m, (void)timeout_ns;
    return ABSENT();
}
ot_status ot_mpi_heartbeat(ot_mpi *m) {
    (void)m;
    return ABSENT();
}
ot_status ot_mpi_poll(ot_mpi *m) {
    (void)m;
    return ABSENT();
}
ot_status ot_mpi_membership(ot_mpi *m, uint64_t *epoch, bool *alive, int64_t timeout_ns) {
    (void)m, (void)epoch, (void)alive, (void)timeout_ns;
    return ABSENT();
}
void ot_mpi_abort_job(ot_mpi *m, int code) {
    (void)m;
    exit(code ? code : 1); /* no job to end but this process */
}
ot_coord *ot_mpi_coord(ot_mpi *m) {
    (void)m;
    return NULL;
}
ot_status ot_mpi_shard_exchange_create(ot_mpi *m, size_t block_len, int nbuckets,
                                       const size_t *bucket_off, const size_t *bucket_len,
                                       ot_coll_algo order, ot_shard_exchange **out) {
    (void)m, (void)block_len, (void)nbuckets, (void)bucket_off, (void)bucket_len, (void)order;
    if (out) *out = NULL;
    return ABSENT();
}
#endif
