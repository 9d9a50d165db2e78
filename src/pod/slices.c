/* Slice scheduling over one occupancy grid: best-fit placement of contiguous boxes (wrapping on
 * torus axes), release, largest free box and fragmentation. */
#include "pod_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct ot_slice_sched {
    int dims[3];
    bool wrap[3];
    int n;
    int *owner; /* device -> job or -1 */
    int next_job;
    pthread_mutex_t mu;
};

static int sid(const ot_slice_sched *s, int x, int y, int z) {
    return x + s->dims[0] * (y + s->dims[1] * z);
}

ot_status ot_slice_sched_create(const ot_topology *t, ot_slice_sched **out) {
    if (!t || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "slice scheduler: NULL argument");
    *out = NULL;
    ot_slice_sched *s = ot_calloc(1, sizeof *s);
    if (!s) return ot_error(OT_ERR_OUT_OF_MEMORY, "slice scheduler: out of memory");
    for (int i = 0; i < 3; i++) {
        s->dims[i] = ot_topology_dim(t, i);
        s->wrap[i] = ot_topology_wraps(t, i);
    }
    s->n = ot_topology_size(t);
    s->owner = ot_malloc(sizeof(int) * (size_t)s->n);
    if (!s->owner) {
        ot_free(s);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "slice scheduler: out of memory");
    }
    for (int i = 0; i < s->n; i++) s->owner[i] = -1;
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return OT_OK;
}

void ot_slice_sched_free(ot_slice_sched *s) {
    if (!s) return;
    pthread_mutex_destroy(&s->mu);
    ot_free(s->owner);
    ot_free(s);
}

/* Cell at origin o plus offset d along each axis, wrapping where allowed; -1 outside. */
static int cell(const ot_slice_sched *s, const int o[3], int dx, int dy, int dz) {
    int c[3] = {o[0] + dx, o[1] + dy, o[2] + dz};
    for (int i = 0; i < 3; i++) {
        if (c[i] < 0 || c[i] >= s->dims[i]) {
            if (!s->wrap[i]) return -1;
            c[i] = ((c[i] % s->dims[i]) + s->dims[i]) % s->dims[i];
        }
    }
    return sid(s, c[0], c[1], c[2]);
}

static bool box_free(const ot_slice_sched *s, const int o[3], const int e[3]) {
    for (int z = 0; z < e[2]; z++)
        for (int y = 0; y < e[1]; y++)
            for (int x = 0; x < e[0]; x++) {
                int id = cell(s, o, x, y, z);
                if (id < 0 || s->owner[id] >= 0) return false;
            }
    return true;
}

/* Best-fit score: faces of the box touching an occupied device or a mesh edge. A box spanning a
 * whole wrapped axis has no faces on it. */
static int contact(const ot_slice_sched *s, const int o[3], const int e[3]) {
    int score = 0;
    for (int ax = 0; ax < 3; ax++) {
        if (s->dims[ax] == 1) continue;
        if (s->wrap[ax] && e[ax] == s->dims[ax]) continue;
        int a1 = (ax + 1) % 3, a2 = (ax + 2) % 3;
        for (int side = 0; side < 2; side++) {
            int off = side ? e[ax] : -1;
            for (int u = 0; u < e[a1]; u++)
                for (int v = 0; v < e[a2]; v++) {
                    int d[3];
                    d[ax] = off, d[a1] = u, d[a2] = v;
                    int id = cell(s, o, d[0], d[1], d[2]);
                    score += id < 0 || s->owner[id] >= 0;
                }
        }
    }
    return score;
}

int ot_slice_largest_free(const ot_slice_sched *s, int ext[OT_TOPO_MAX_DIMS]) {
    pthread_mutex_lock((pthread_mutex_t *)&s->mu);
    int X = s->dims[0], Y = s->dims[1], Z = s->dims[2];
    /* 3D prefix sums of occupied cells: any box checked in O(1) */
    int *P = ot_calloc((size_t)(X + 1) * (Y + 1) * (Z + 1), sizeof(int));
    int best = 0, be[3] = {0, 0, 0};
    if (P) {
#define PI(x, y, z) P[(x) + (X + 1) * ((y) + (Y + 1) * (z))]
        for (int z = 1; z <= Z; z++)
            for (int y = 1; y <= Y; y++)
                for (int x = 1; x <= X; x++)
                    PI(x, y, z) = (s->owner[sid(s, x - 1, y - 1, z - 1)] >= 0) + PI(x - 1, y, z) +
                                  PI(x, y - 1, z) + PI(x, y, z - 1) - PI(x - 1, y - 1, z) -
                                  PI(x - 1, y, z - 1) - PI(x, y - 1, z - 1) +
                                  PI(x - 1, y - 1, z - 1);
        for (int z0 = 0; z0 < Z; z0++)
            for (int y0 = 0; y0 < Y; y0++)
                for (int x0 = 0; x0 < X; x0++)
                    for (int z1 = z0 + 1; z1 <= Z; z1++)
                        for (int y1 = y0 + 1; y1 <= Y; y1++)
                            for (int x1 = x0 + 1; x1 <= X; x1++) {
                                int occ = PI(x1, y1, z1) - PI(x0, y1, z1) - PI(x1, y0, z1) -
                                          PI(x1, y1, z0) + PI(x0, y0, z1) + PI(x0, y1, z0) +
                                          PI(x1, y0, z0) - PI(x0, y0, z0);
                                if (occ) break; /* growing x only adds cells */
                                int v = (x1 - x0) * (y1 - y0) * (z1 - z0);
                                if (v > best)
                                    best = v, be[0] = x1 - x0, be[1] = y1 - y0, be[2] = z1 - z0;
                            }
#undef PI
    }
    ot_free(P);
    pthread_mutex_unlock((pthread_mutex_t *)&s->mu);
    if (ext) memcpy(ext, be, sizeof be);
    return best;
}

int ot_slice_free_devices(const ot_slice_sched *s) {
    pthread_mutex_lock((pthread_mutex_t *)&s->mu);
    int f = 0;
    for (int i = 0; i < s->n; i++) f += s->owner[i] < 0;
    pthread_mutex_unlock((pthread_mutex_t *)&s->mu);
    return f;
}

double ot_slice_fragmentation(const ot_slice_sched *s) {
    int f = ot_slice_free_devices(s);
    if (f == 0) return 0;
    return 1.0 - (double)ot_slice_largest_free(s, NULL) / (double)f;
}

int ot_slice_owner(const ot_slice_sched *s, int device) {
    if (device < 0 || device >= s->n) return -1;
    pthread_mutex_lock((pthread_mutex_t *)&s->mu);
    int o = s->owner[device];
    pthread_mutex_unlock((pthread_mutex_t *)&s->mu);
    return o;
}

ot_status ot_slice_alloc(ot_slice_sched *s, const int shape[OT_TOPO_MAX_DIMS], int *job,
                         int origin[OT_TOPO_MAX_DIMS], int extent[OT_TOPO_MAX_DIMS]) {
    if (!s || !shape || !job)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "slice alloc: NULL argument");
    for (int i = 0; i < 3; i++)
        if (shape[i] < 1)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "slice alloc: extent %d on axis %d", shape[i],
                            i);
    static const int perms[6][3] = {{0, 1, 2}, {1, 0, 2}, {0, 2, 1},
                                    {2, 0, 1}, {1, 2, 0}, {2, 1, 0}};
    bool fits_empty = false;
    pthread_mutex_lock(&s->mu);
    int best = -1, bo[3] = {0}, bext[3] = {0};
    for (int p = 0; p < 6; p++) {
        int e[3] = {shape[perms[p][0]], shape[perms[p][1]], shape[perms[p][2]]};
        if (e[0] > s->dims[0] || e[1] > s->dims[1] || e[2] > s->dims[2]) continue;
        fits_empty = true;
        for (int z = 0; z < s->dims[2]; z++)
            for (int y = 0; y < s->dims[1]; y++)
                for (int x = 0; x < s->dims[0]; x++) {
                    int o[3] = {x, y, z};
                    if (!box_free(s, o, e)) continue;
                    int sc = contact(s, o, e);
                    if (sc > best) {
                        best = sc;
                        memcpy(bo, o, sizeof o);
                        memcpy(bext, e, sizeof e);
                    }
                }
    }
    ot_status st = OT_OK;
    if (best < 0) {
        pthread_mutex_unlock(&s->mu);
        if (!fits_empty)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "slice alloc: %dx%dx%d does not fit a %dx%dx%d topology in any "
                            "orientation",
                            shape[0], shape[1], shape[2], s->dims[0], s->dims[1], s->dims[2]);
        int le[3];
        int v = ot_slice_largest_free(s, le);
        return ot_error(OT_ERR_OUT_OF_RANGE,
                        "slice alloc: no contiguous %dx%dx%d slice is free (%d devices free, "
                        "largest free box %dx%dx%d = %d)",
                        shape[0], shape[1], shape[2], ot_slice_free_devices(s), le[0], le[1], le[2],
                        v);
    }
    int j = s->next_job++;
    for (int z = 0; z < bext[2]; z++)
        for (int y = 0; y < bext[1]; y++)
            for (int x = 0; x < bext[0]; x++) s->owner[cell(s, bo, x, y, z)] = j;
    *job = j;
    if (origin) memcpy(origin, bo, sizeof bo);
    if (extent) memcpy(extent, bext, sizeof bext);
    pthread_mutex_unlock(&s->mu);
    return st;
}

ot_status ot_slice_reserve(ot_slice_sched *s, const int origin[OT_TOPO_MAX_DIMS],
                           const int extent[OT_TOPO_MAX_DIMS], int *job) {
    if (!s || !origin || !extent || !job)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "slice reserve: NULL argument");
    for (int i = 0; i < 3; i++)
        if (extent[i] < 1 || extent[i] > s->dims[i] || origin[i] < 0 || origin[i] >= s->dims[i])
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "slice reserve: origin %d, extent %d on axis %d of a %dx%dx%d grid",
                            origin[i], extent[i], i, s->dims[0], s->dims[1], s->dims[2]);
    pthread_mutex_lock(&s->mu);
    for (int z = 0; z < extent[2]; z++)
        for (int y = 0; y < extent[1]; y++)
            for (int x = 0; x < extent[0]; x++) {
                int id = cell(s, origin, x, y, z);
                if (id < 0 || s->owner[id] >= 0) {
                    pthread_mutex_unlock(&s->mu);
                    if (id < 0)
                        return ot_error(OT_ERR_INVALID_ARGUMENT,
                                        "slice reserve: the box leaves the grid on an axis that "
                                        "does not wrap");
                    return ot_error(OT_ERR_ALREADY_EXISTS,
                                    "slice reserve: device %d is held by job %d", id, s->owner[id]);
                }
            }
    int j = s->next_job++;
    for (int z = 0; z < extent[2]; z++)
        for (int y = 0; y < extent[1]; y++)
            for (int x = 0; x < extent[0]; x++) s->owner[cell(s, origin, x, y, z)] = j;
    pthread_mutex_unlock(&s->mu);
    *job = j;
    return OT_OK;
}

ot_status ot_slice_release(ot_slice_sched *s, int job) {
    if (!s) return ot_error(OT_ERR_INVALID_ARGUMENT, "slice release: NULL scheduler");
    pthread_mutex_lock(&s->mu);
    int k = 0;
    for (int i = 0; i < s->n; i++)
        if (s->owner[i] == job) s->owner[i] = -1, k++;
    pthread_mutex_unlock(&s->mu);
    return k ? OT_OK : ot_error(OT_ERR_NOT_FOUND, "slice release: no job %d", job);
}
