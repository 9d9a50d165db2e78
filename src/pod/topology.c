/* Physical topologies: grids of 1 to 3 axes with optional wraparound, TPU presets, routing,
 * Hamiltonian ring embeddings, slices, DOT/JSON export, and logical meshes with named axes.
 *
 * Link figures of the presets (per link, per direction):
 *   v2: 4 ICI links per chip at 496 Gbit/s each; v3: 4 links at 656 Gbit/s each; both 2D tori
 *       (v2 pod 16x16, v3 pod 32x32). Source: Norrie et al., "The Design Process for Google's
 *       Training Chips: TPUv2 and TPUv3", IEEE Micro 41(2), 2021.
 *   v4: 2400 Gbit/s ICI per chip over 6 links = 400 Gbit/s = 50 GB/s per link; 3D torus built
 *       from 4x4x4 cubes joined by optical circuit switches, up to 4096 chips. Source: Google
 *       Cloud TPU v4 documentation ("System architecture"); Jouppi et al., "TPU v4", ISCA 2023.
 *   v5e: 1600 Gbit/s ICI per chip over 4 links = 50 GB/s per link; 2D, up to 16x16 (256 chips).
 *       Source: Google Cloud TPU v5e documentation.
 *   v5p: 4800 Gbit/s ICI per chip over 6 links = 100 GB/s per link; 3D torus from 4x4x4 cubes,
 *       largest slice 16x16x24. Source: Google Cloud TPU v5p documentation.
 * Per-hop latency is not published for any generation; 1 us is an assumption of this model
 * (the order of magnitude reported for ICI hops), used only by the cost model. */
#include "optitpu/pod.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_util.h"

struct ot_topology {
    char name[64];
    int ndims;
    int dims[OT_TOPO_MAX_DIMS];
    bool wrap[OT_TOPO_MAX_DIMS];
    int size;
    double gbps;
    double lat_us;
};

ot_topology_desc ot_topology_desc_default(void) {
    ot_topology_desc d = {.name = NULL,
                          .ndims = 1,
                          .dims = {1, 1, 1},
                          .wrap = {true, false, false},
                          .link_gbytes_per_s = 1.0,
                          .link_latency_us = 1.0};
    return d;
}

static void shape_name(char *buf, size_t n, const char *prefix, int nd, const int *dims) {
    int k = snprintf(buf, n, "%s", prefix);
    for (int i = 0; i < nd && k >= 0 && (size_t)k < n; i++)
        k += snprintf(buf + k, n - (size_t)k, i ? "x%d" : "%d", dims[i]);
}

ot_status ot_topology_create(const ot_topology_desc *d, ot_topology **out) {
    if (!d || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "topology: NULL argument");
    *out = NULL;
    if (d->ndims < 1 || d->ndims > OT_TOPO_MAX_DIMS)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "topology: ndims %d outside 1..%d", d->ndims,
                        OT_TOPO_MAX_DIMS);
    int64_t size = 1;
    for (int i = 0; i < d->ndims; i++) {
        if (d->dims[i] < 1)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "topology: axis %d has size %d", i,
                            d->dims[i]);
        size *= d->dims[i];
        if (size > OT_TOPO_MAX_DEVICES)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "topology: more than %d devices",
                            OT_TOPO_MAX_DEVICES);
    }
    if (!(d->link_gbytes_per_s > 0) || !(d->link_latency_us >= 0))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "topology: link bandwidth must be > 0 and latency >= 0");
    ot_topology *t = ot_calloc(1, sizeof *t);
    if (!t) return ot_error(OT_ERR_OUT_OF_MEMORY, "topology: out of memory");
    t->ndims = d->ndims;
    for (int i = 0; i < OT_TOPO_MAX_DIMS; i++) {
        t->dims[i] = i < d->ndims ? d->dims[i] : 1;
        t->wrap[i] = i < d->ndims ? d->wrap[i] : false;
    }
    t->size = (int)size;
    t->gbps = d->link_gbytes_per_s;
    t->lat_us = d->link_latency_us;
    if (d->name)
        snprintf(t->name, sizeof t->name, "%s", d->name);
    else
        shape_name(t->name, sizeof t->name, t->wrap[0] ? "torus-" : "mesh-", t->ndims, t->dims);
    *out = t;
    return OT_OK;
}

void ot_topology_free(ot_topology *t) {
    ot_free(t);
}

/* Parses "AxBxC" into dims; returns the number of axes or -1. */
static int parse_shape(const char *s, int dims[OT_TOPO_MAX_DIMS]) {
    int n = 0;
    while (*s) {
        if (n == OT_TOPO_MAX_DIMS) return -1;
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > OT_TOPO_MAX_DEVICES) return -1;
        dims[n++] = (int)v;
        s = end;
        if (*s == 'x') {
            s++;
            if (!*s) return -1;
        } else if (*s) {
            return -1;
        }
    }
    return n;
}

ot_status ot_slice_spec_parse(const char *spec, char *preset, size_t cap,
                              int shape[OT_TOPO_MAX_DIMS]) {
    if (!spec || !preset || !shape || cap == 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "slice: NULL argument");
    preset[0] = 0;
    const char *colon = strchr(spec, ':');
    if (!colon || colon == spec || !colon[1])
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "slice '%s': expected PRESET:SHAPE, e.g. v4-4x4x4:2x2x1 or torus-2x4:2x2",
                        spec);
    size_t pl = (size_t)(colon - spec);
    if (pl >= cap)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "slice '%s': preset name too long", spec);
    int dims[OT_TOPO_MAX_DIMS] = {1, 1, 1};
    int nd = parse_shape(colon + 1, dims);
    if (nd < 1)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "slice '%s': SHAPE '%s' is not 1 to %d extents >= 1 joined by x (2x2x1)",
                        spec, colon + 1, OT_TOPO_MAX_DIMS);
    memcpy(preset, spec, pl);
    preset[pl] = 0;
    for (int i = 0; i < OT_TOPO_MAX_DIMS; i++) shape[i] = i < nd ? dims[i] : 1;
    return OT_OK;
}

ot_status ot_topology_preset(const char *spec, ot_topology **out) {
    if (!spec || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "topology preset: NULL argument");
    *out = NULL;
    const char *dash = strchr(spec, '-');
    if (!dash || dash == spec)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "topology preset '%s': expected KIND-SHAPE, e.g. v4-4x4x4, ring-8, "
                        "torus-2x4",
                        spec);
    size_t kl = (size_t)(dash - spec);
    char kind[16];
    if (kl >= sizeof kind)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "topology preset '%s': unknown kind", spec);
    memcpy(kind, spec, kl);
    kind[kl] = 0;
    ot_topology_desc d = ot_topology_desc_default();
    d.name = spec;
    int nd = parse_shape(dash + 1, d.dims);
    if (nd < 1)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "topology preset '%s': bad shape '%s'", spec,
                        dash + 1);
    d.ndims = nd;
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= d.dims[i];
    const double gbit = 1e9 / 8 / 1e9; /* Gbit/s -> GB/s */
    if (!strcmp(kind, "ring")) {
        if (nd != 1)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "topology preset '%s': a ring has one axis",
                            spec);
        d.wrap[0] = true;
    } else if (!strcmp(kind, "mesh") || !strcmp(kind, "torus")) {
        for (int i = 0; i < nd; i++) d.wrap[i] = kind[0] == 't';
    } else if (!strcmp(kind, "v2") || !strcmp(kind, "v3")) {
        int maxd = kind[1] == '2' ? 16 : 32;
        if (nd != 2 || d.dims[0] > maxd || d.dims[1] > maxd)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "topology preset '%s': TPU %s is a 2D torus of at most %dx%d chips",
                            spec, kind, maxd, maxd);
        d.wrap[0] = d.wrap[1] = true;
        d.link_gbytes_per_s = (kind[1] == '2' ? 496 : 656) * gbit;
    } else if (!strcmp(kind, "v5e")) {
        if (nd != 2 || d.dims[0] > 16 || d.dims[1] > 16)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "topology preset '%s': TPU v5e is 2D with at most 16x16 chips", spec);
        /* full-pod axes (16) close the ring; smaller slices are meshes */
        d.wrap[0] = d.dims[0] == 16;
        d.wrap[1] = d.dims[1] == 16;
        d.link_gbytes_per_s = 1600.0 / 4 * gbit;
    } else if (!strcmp(kind, "v4") || !strcmp(kind, "v5p")) {
        bool v4 = kind[1] == '4';
        if (nd != 3)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "topology preset '%s': TPU %s is 3D (AxBxC)",
                            spec, kind);
        int64_t maxn = v4 ? 4096 : 8960;
        if (n > maxn)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "topology preset '%s': TPU %s pods have at most %lld chips", spec, kind,
                            (long long)maxn);
        /* Slices of whole 4x4x4 cubes get wraparound through the optical switches; smaller
         * slices are plain meshes. */
        bool cubes = d.dims[0] % 4 == 0 && d.dims[1] % 4 == 0 && d.dims[2] % 4 == 0;
        for (int i = 0; i < 3; i++) d.wrap[i] = cubes;
        d.link_gbytes_per_s = (v4 ? 2400.0 : 4800.0) / 6 * gbit;
    } else {
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "topology preset '%s': unknown kind '%s' (v2, v3, v4, v5e, v5p, ring, "
                        "mesh, torus)",
                        spec, kind);
    }
    return ot_topology_create(&d, out);
}

const char *ot_topology_name(const ot_topology *t) {
    return t->name;
}
int ot_topology_size(const ot_topology *t) {
    return t->size;
}
int ot_topology_ndims(const ot_topology *t) {
    return t->ndims;
}
int ot_topology_dim(const ot_topology *t, int axis) {
    return axis >= 0 && axis < t->ndims ? t->dims[axis] : 1;
}
bool ot_topology_wraps(const ot_topology *t, int axis) {
    return axis >= 0 && axis < t->ndims && t->wrap[axis];
}
double ot_topology_link_gbytes_per_s(const ot_topology *t) {
    return t->gbps;
}
double ot_topology_link_latency_us(const ot_topology *t) {
    return t->lat_us;
}

void ot_topology_coords(const ot_topology *t, int id, int c[OT_TOPO_MAX_DIMS]) {
    c[0] = id % t->dims[0];
    c[1] = (id / t->dims[0]) % t->dims[1];
    c[2] = id / (t->dims[0] * t->dims[1]);
}

int ot_topology_id(const ot_topology *t, const int c[OT_TOPO_MAX_DIMS]) {
    for (int i = 0; i < OT_TOPO_MAX_DIMS; i++)
        if (c[i] < 0 || c[i] >= t->dims[i]) return -1;
    return c[0] + t->dims[0] * (c[1] + t->dims[1] * c[2]);
}

int ot_topology_neighbors(const ot_topology *t, int id, int out[2 * OT_TOPO_MAX_DIMS]) {
    int c[3], n = 0;
    ot_topology_coords(t, id, c);
    for (int a = 0; a < t->ndims; a++) {
        for (int dir = -1; dir <= 1; dir += 2) {
            int cc[3] = {c[0], c[1], c[2]};
            cc[a] += dir;
            if (cc[a] < 0 || cc[a] >= t->dims[a]) {
                if (!t->wrap[a]) continue;
                cc[a] = (cc[a] + t->dims[a]) % t->dims[a];
            }
            int nb = ot_topology_id(t, cc);
            if (nb == id) continue;
            bool dup = false;
            for (int k = 0; k < n; k++) dup |= out[k] == nb;
            if (!dup) out[n++] = nb;
        }
    }
    return n;
}

bool ot_topology_adjacent(const ot_topology *t, int a, int b) {
    if (a < 0 || b < 0 || a >= t->size || b >= t->size || a == b) return false;
    int nb[6];
    int n = ot_topology_neighbors(t, a, nb);
    for (int i = 0; i < n; i++)
        if (nb[i] == b) return true;
    return false;
}

/* signed shortest step count along one axis from ca to cb */
static int axis_delta(const ot_topology *t, int axis, int ca, int cb) {
    int d = cb - ca;
    if (!t->wrap[axis]) return d;
    int n = t->dims[axis];
    int fwd = ((d % n) + n) % n; /* steps going + */
    int back = n - fwd;          /* steps going - */
    if (fwd == 0) return 0;
    return fwd <= back ? fwd : -back;
}

int ot_topology_hops(const ot_topology *t, int a, int b) {
    int ca[3], cb[3], h = 0;
    ot_topology_coords(t, a, ca);
    ot_topology_coords(t, b, cb);
    for (int i = 0; i < t->ndims; i++) h += abs(axis_delta(t, i, ca[i], cb[i]));
    return h;
}

int ot_topology_route(const ot_topology *t, int a, int b, int *path, int cap) {
    int c[3], cb[3], n = 0;
    ot_topology_coords(t, a, c);
    ot_topology_coords(t, b, cb);
    if (n < cap) path[n] = a;
    n++;
    for (int i = 0; i < t->ndims; i++) {
        int d = axis_delta(t, i, c[i], cb[i]);
        int step = d > 0 ? 1 : -1;
        for (int k = 0; k < abs(d); k++) {
            c[i] = (c[i] + step + t->dims[i]) % t->dims[i];
            if (n < cap) path[n] = ot_topology_id(t, c);
            n++;
        }
    }
    return n;
}

int ot_topology_diameter(const ot_topology *t) {
    int d = 0;
    for (int i = 0; i < t->ndims; i++) d += t->wrap[i] ? t->dims[i] / 2 : t->dims[i] - 1;
    return d;
}

/* ---- Hamiltonian cycles ------------------------------------------------------------------
 * A 3D grid X x (Y x Z) contains the 2D grid X x L where L is an ordering of the (Y, Z) layer in
 * which consecutive entries are adjacent (a Hamiltonian cycle of the layer when it has one, a
 * boustrophedon path otherwise). So one 2D construction serves all shapes:
 *   - R*C even, R, C >= 2: row 0 left to right, snake rows 1..R-1 over columns 1..C-1, return
 *     up column 0 (no wraparound needed);
 *   - R, C odd with wraparound on both axes: the construction on rows 0..R-2 (even count), with
 *     the edge (0,0)-(0,1) replaced by a detour through the last row via both wraps;
 *   - a single line: a cycle only when it wraps (or has at most 2 devices).
 * Odd meshes are bipartite with unequal colour classes and have no Hamiltonian cycle. */

typedef struct grid2 {
    int R, C;
    bool wrapR, wrapC;
} grid2;

/* writes R*C (r, c) pairs into rr/cc; false when no cycle is constructible */
static bool grid2_cycle(grid2 g, int *rr, int *cc) {
    int n = 0, R = g.R, C = g.C;
    if (R * C == 1) {
        rr[0] = cc[0] = 0;
        return true;
    }
    if (R == 1 || C == 1) {
        int L = R * C;
        bool w = R == 1 ? g.wrapC : g.wrapR;
        if (L > 2 && !w) return false;
        for (int i = 0; i < L; i++) {
            rr[i] = R == 1 ? 0 : i;
            cc[i] = R == 1 ? i : 0;
        }
        return true;
    }
    if ((R * C) % 2 == 0) {
        bool tr = R % 2 != 0; /* need an even number of rows: transpose */
        int RR = tr ? C : R, CC = tr ? R : C;
        int *pr = tr ? cc : rr, *pc = tr ? rr : cc;
        for (int c = 0; c < CC; c++) pr[n] = 0, pc[n++] = c;
        for (int r = 1; r < RR; r++) {
            if (r % 2 == 1)
                for (int c = CC - 1; c >= 1; c--) pr[n] = r, pc[n++] = c;
            else
                for (int c = 1; c < CC; c++) pr[n] = r, pc[n++] = c;
        }
        for (int r = RR - 1; r >= 1; r--) pr[n] = r, pc[n++] = 0;
        return true;
    }
    if (!(g.wrapR && g.wrapC)) return false;
    /* both odd (>= 3), torus: cycle over rows 0..R-2, detour through row R-1 */
    rr[n] = 0, cc[n++] = 0;
    for (int c = 0; c < C; c++) {
        /* row R-1 from column 0 going - with wrap: 0, C-1, ..., 1 */
        rr[n] = R - 1, cc[n++] = c == 0 ? 0 : C - c;
    }
    for (int c = 1; c < C; c++) rr[n] = 0, cc[n++] = c;
    for (int r = 1; r < R - 1; r++) {
        if (r % 2 == 1)
            for (int c = C - 1; c >= 1; c--) rr[n] = r, cc[n++] = c;
        else
            for (int c = 1; c < C; c++) rr[n] = r, cc[n++] = c;
    }
    for (int r = R - 2; r >= 1; r--) rr[n] = r, cc[n++] = 0;
    return n == R * C;
}

static ot_status ring_fail(const ot_topology *t) {
    return ot_error(OT_ERR_FAILED_PRECONDITION,
                    "topology %s: no Hamiltonian cycle over its links (%s)", t->name,
                    t->size % 2 ? "an odd number of devices without wraparound on every axis"
                                : "a line longer than 2 without wraparound");
}

static bool ring_valid(const ot_topology *t, const int *order) {
    int n = t->size;
    if (n == 1) return order[0] == 0;
    char *seen = ot_calloc((size_t)n, 1);
    if (!seen) return false;
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        int v = order[i];
        ok = v >= 0 && v < n && !seen[v];
        if (ok) seen[v] = 1;
        if (ok && n > 2) ok = ot_topology_adjacent(t, v, order[(i + 1) % n]);
        if (ok && n == 2) ok = ot_topology_adjacent(t, order[0], order[1]);
    }
    ot_free(seen);
    return ok;
}

/* A grid without an odd wrapped axis is bipartite: with an odd device count it has no
 * Hamiltonian cycle. */
static bool has_odd_cycle(const ot_topology *t) {
    for (int i = 0; i < t->ndims; i++)
        if (t->wrap[i] && t->dims[i] > 2 && t->dims[i] % 2) return true;
    return false;
}

#define SEARCH_BUDGET 2000000

/* Depth-first search for a Hamiltonian cycle from device 0, neighbours tried in Warnsdorff
 * order (fewest unvisited onward links first), bounded by SEARCH_BUDGET steps. */
static bool ring_search(const ot_topology *t, int *order) {
    int n = t->size;
    if (n < 3 || (n % 2 && !has_odd_cycle(t))) return false;
    char *seen = ot_calloc((size_t)n, 1);
    int *cand = ot_malloc(sizeof(int) * (size_t)n * 6);
    int *ncand = ot_calloc((size_t)n, sizeof(int));
    int *next = ot_calloc((size_t)n, sizeof(int));
    bool found = false;
    if (!seen || !cand || !ncand || !next) goto done;
    long budget = SEARCH_BUDGET;
    int depth = 0;
    order[0] = 0;
    seen[0] = 1;
    for (;;) {
        int v = order[depth];
        if (next[depth] == 0) { /* first visit at this depth: rank the candidates */
            int nb[6], k = ot_topology_neighbors(t, v, nb), m = 0;
            int deg[6];
            for (int i = 0; i < k; i++) {
                if (seen[nb[i]]) continue;
                int nb2[6], k2 = ot_topology_neighbors(t, nb[i], nb2), d = 0;
                for (int j = 0; j < k2; j++) d += !seen[nb2[j]];
                int at = m++;
                while (at > 0 && deg[at - 1] > d)
                    deg[at] = deg[at - 1], cand[depth * 6 + at] = cand[depth * 6 + at - 1], at--;
                deg[at] = d;
                cand[depth * 6 + at] = nb[i];
            }
            ncand[depth] = m;
        }
        if (depth == n - 1) {
            if (ot_topology_adjacent(t, v, order[0])) {
                found = true;
                break;
            }
        } else if (next[depth] < ncand[depth]) {
            int u = cand[depth * 6 + next[depth]++];
            if (--budget < 0) break;
            order[++depth] = u;
            seen[u] = 1;
            next[depth] = 0;
            continue;
        }
        /* backtrack */
        seen[v] = 0;
        next[depth] = 0;
        if (--depth < 0) break;
        if (depth == 0) seen[0] = 1;
    }
done:
    ot_free(seen);
    ot_free(cand);
    ot_free(ncand);
    ot_free(next);
    return found;
}

ot_status ot_topology_ring(const ot_topology *t, int *order) {
    if (!t || !order) return ot_error(OT_ERR_INVALID_ARGUMENT, "topology ring: NULL argument");
    int n = t->size;
    /* Collapse axes of size 1 so a 1x8 or 4x1x4 is handled as the smaller grid it is. */
    int ax[3], nax = 0;
    for (int i = 0; i < t->ndims; i++)
        if (t->dims[i] > 1) ax[nax++] = i;
    if (nax == 0) {
        order[0] = 0;
        return OT_OK;
    }
    int *rr = ot_malloc(sizeof(int) * (size_t)n * 2);
    int *layer = ot_malloc(sizeof(int) * (size_t)n * 3); /* lr, lc, layer id order */
    if (!rr || !layer) {
        ot_free(rr);
        ot_free(layer);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "topology ring: out of memory");
    }
    int *cc = rr + n;
    ot_status st = OT_OK;
    bool ok = false;
    if (nax == 1) {
        grid2 g = {1, t->dims[ax[0]], false, t->wrap[ax[0]]};
        ok = grid2_cycle(g, rr, cc);
        for (int i = 0; ok && i < n; i++) {
            int c[3] = {0, 0, 0};
            c[ax[0]] = cc[i];
            order[i] = ot_topology_id(t, c);
        }
    } else {
        /* rows = first collapsed axis; columns = a path/cycle through the other axes' layer */
        int a0 = ax[0];
        int L = n / t->dims[a0];
        int *lo = layer; /* layer order as (b, c) coords of the remaining axes */
        int *lr = layer + L, *lcc = layer + 2 * L;
        bool closed;
        if (nax == 2) {
            /* the layer is a line along ax[1] */
            int Y = t->dims[ax[1]];
            for (int i = 0; i < Y; i++) lr[i] = 0, lcc[i] = i;
            closed = Y <= 2 || t->wrap[ax[1]];
        } else {
            grid2 lg = {t->dims[ax[1]], t->dims[ax[2]], t->wrap[ax[1]], t->wrap[ax[2]]};
            closed = grid2_cycle(lg, lr, lcc);
            if (!closed) { /* boustrophedon path through the layer */
                int k = 0;
                for (int r = 0; r < lg.R; r++)
                    for (int j = 0; j < lg.C; j++) lr[k] = r, lcc[k++] = r % 2 ? lg.C - 1 - j : j;
            }
        }
        for (int i = 0; i < L; i++) lo[i] = i;
        grid2 g = {t->dims[a0], L, t->wrap[a0], closed};
        ok = grid2_cycle(g, rr, cc);
        for (int i = 0; ok && i < n; i++) {
            int c[3] = {0, 0, 0};
            c[a0] = rr[i];
            int li = lo[cc[i]];
            if (nax == 2) {
                c[ax[1]] = lcc[li];
            } else {
                c[ax[1]] = lr[li];
                c[ax[2]] = lcc[li];
            }
            order[i] = ot_topology_id(t, c);
        }
    }
    if (!ok || !ring_valid(t, order)) {
        /* shapes outside the constructions (odd cylinders, mixed wraparound): search */
        ok = ring_search(t, order);
        if (!ok || !ring_valid(t, order)) st = ring_fail(t);
    }
    ot_free(rr);
    ot_free(layer);
    return st;
}

ot_status ot_topology_slice(const ot_topology *t, const int origin[OT_TOPO_MAX_DIMS],
                            const int extent[OT_TOPO_MAX_DIMS], ot_topology **out,
                            int *parent_ids) {
    if (!t || !origin || !extent || !out)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "topology slice: NULL argument");
    *out = NULL;
    ot_topology_desc d = ot_topology_desc_default();
    d.ndims = t->ndims;
    d.link_gbytes_per_s = t->gbps;
    d.link_latency_us = t->lat_us;
    for (int i = 0; i < OT_TOPO_MAX_DIMS; i++) {
        int lim = i < t->ndims ? t->dims[i] : 1;
        if (extent[i] < 1 || extent[i] > lim || origin[i] < 0 || origin[i] >= lim)
            return ot_error(OT_ERR_OUT_OF_RANGE,
                            "topology slice: axis %d origin %d extent %d outside 0..%d", i,
                            origin[i], extent[i], lim);
        if (origin[i] + extent[i] > lim && !(i < t->ndims && t->wrap[i]))
            return ot_error(OT_ERR_OUT_OF_RANGE,
                            "topology slice: axis %d runs past the edge of a mesh axis", i);
        if (i < t->ndims) {
            d.dims[i] = extent[i];
            d.wrap[i] = t->wrap[i] && extent[i] == t->dims[i];
        }
    }
    char name[64];
    shape_name(name, sizeof name, "", t->ndims, d.dims);
    char full[140];
    snprintf(full, sizeof full, "%s[%s]", t->name, name);
    d.name = full;
    OT_CHECK(ot_topology_create(&d, out));
    if (parent_ids) {
        for (int id = 0; id < (*out)->size; id++) {
            int c[3];
            ot_topology_coords(*out, id, c);
            for (int i = 0; i < 3; i++) c[i] = (c[i] + origin[i]) % t->dims[i];
            parent_ids[id] = ot_topology_id(t, c);
        }
    }
    return OT_OK;
}

/* ---- export ---------------------------------------------------------------------------- */

ot_status ot_topology_to_dot(const ot_topology *t, char **out) {
    if (!t || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "topology dot: NULL argument");
    *out = NULL;
    ot_strbuf b = {0};
    ot_strbuf_printf(&b, "graph \"%s\" {\n  // %d devices, %.1f GB/s per link, %.2f us per hop\n",
                     t->name, t->size, t->gbps, t->lat_us);
    ot_strbuf_printf(&b, "  node [shape=box, fontsize=10];\n");
    for (int id = 0; id < t->size; id++) {
        int c[3];
        ot_topology_coords(t, id, c);
        ot_strbuf_printf(&b, "  d%d [label=\"%d\\n(%d,%d,%d)\"];\n", id, id, c[0], c[1], c[2]);
    }
    for (int id = 0; id < t->size; id++) {
        int nb[6];
        int k = ot_topology_neighbors(t, id, nb);
        for (int i = 0; i < k; i++)
            if (nb[i] > id) ot_strbuf_printf(&b, "  d%d -- d%d;\n", id, nb[i]);
    }
    ot_strbuf_printf(&b, "}\n");
    if (b.oom) {
        ot_free(b.p);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "topology dot: out of memory");
    }
    *out = b.p;
    return OT_OK;
}

ot_status ot_topology_to_json(const ot_topology *t, char **out) {
    if (!t || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "topology json: NULL argument");
    *out = NULL;
    ot_status st = OT_ERR_OUT_OF_MEMORY;
    int *ring = ot_malloc(sizeof(int) * (size_t)t->size);
    json_t *o = json_object();
    json_t *dims = json_array(), *wrap = json_array(), *nodes = json_array();
    if (!ring || !o || !dims || !wrap || !nodes) goto done;
    for (int i = 0; i < t->ndims; i++) {
        json_array_append_new(dims, json_integer(t->dims[i]));
        json_array_append_new(wrap, json_boolean(t->wrap[i]));
    }
    json_object_set_new(o, "name", json_string(t->name));
    json_object_set(o, "dims", dims);
    json_object_set(o, "wrap", wrap);
    json_object_set_new(o, "devices", json_integer(t->size));
    json_object_set_new(o, "link_gbytes_per_s", json_real(t->gbps));
    json_object_set_new(o, "link_latency_us", json_real(t->lat_us));
    json_object_set_new(o, "diameter", json_integer(ot_topology_diameter(t)));
    if (ot_topology_ring(t, ring) == OT_OK) {
        json_t *r = json_array();
        for (int i = 0; r && i < t->size; i++) json_array_append_new(r, json_integer(ring[i]));
        json_object_set_new(o, "ring", r);
    } else {
        json_object_set_new(o, "ring", json_null());
        ot_clear_error();
    }
    for (int id = 0; id < t->size; id++) {
        int c[3], nb[6];
        ot_topology_coords(t, id, c);
        int k = ot_topology_neighbors(t, id, nb);
        json_t *nd = json_object(), *cj = json_array(), *nj = json_array();
        if (!nd || !cj || !nj) {
            json_decref(nd), json_decref(cj), json_decref(nj);
            goto done;
        }
        for (int i = 0; i < t->ndims; i++) json_array_append_new(cj, json_integer(c[i]));
        for (int i = 0; i < k; i++) json_array_append_new(nj, json_integer(nb[i]));
        json_object_set_new(nd, "id", json_integer(id));
        json_object_set_new(nd, "coords", cj);
        json_object_set_new(nd, "neighbors", nj);
        json_array_append_new(nodes, nd);
    }
    json_object_set(o, "nodes", nodes);
    char *s = json_dumps(o, JSON_COMPACT);
    if (!s) goto done;
    *out = ot_strdup(s);
    free(s);
    if (*out) st = OT_OK;
done:
    json_decref(dims), json_decref(wrap), json_decref(nodes), json_decref(o);
    ot_free(ring);
    if (st != OT_OK) return ot_error(st, "topology json: out of memory");
    return OT_OK;
}

/* ---- logical meshes ---------------------------------------------------------------------- */

struct ot_mesh {
    int naxes;
    int sizes[OT_MESH_MAX_AXES];
    char names[OT_MESH_MAX_AXES][32];
    int size;
    int *dev_of; /* logical linear index (last axis fastest) -> device */
    int *lin_of; /* device -> logical linear index */
};

ot_status ot_mesh_create(const ot_topology *t, int naxes, const char *const *names,
                         const int *sizes, ot_mesh **out) {
    if (!t || !names || !sizes || !out)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "mesh: NULL argument");
    *out = NULL;
    if (naxes < 1 || naxes > OT_MESH_MAX_AXES)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "mesh: %d axes (1..%d)", naxes, OT_MESH_MAX_AXES);
    int64_t prod = 1;
    for (int i = 0; i < naxes; i++) {
        if (sizes[i] < 1 || !names[i] || !names[i][0] || strlen(names[i]) >= 32)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "mesh: axis %d needs a name (< 32 chars) "
                            "and a size >= 1",
                            i);
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                return ot_error(OT_ERR_INVALID_ARGUMENT, "mesh: axis name '%s' repeated", names[i]);
        prod *= sizes[i];
        if (prod > t->size) break;
    }
    if (prod != t->size)
        return ot_error(OT_ERR_SHAPE_MISMATCH,
                        "mesh: axis sizes multiply to %lld but topology %s has %d devices",
                        (long long)prod, t->name, t->size);
    ot_mesh *m = ot_calloc(1, sizeof *m);
    if (!m) return ot_error(OT_ERR_OUT_OF_MEMORY, "mesh: out of memory");
    m->dev_of = ot_malloc(sizeof(int) * (size_t)t->size);
    m->lin_of = ot_malloc(sizeof(int) * (size_t)t->size);
    if (!m->dev_of || !m->lin_of) {
        ot_mesh_free(m);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "mesh: out of memory");
    }
    m->naxes = naxes;
    m->size = t->size;
    for (int i = 0; i < naxes; i++) {
        m->sizes[i] = sizes[i];
        snprintf(m->names[i], sizeof m->names[i], "%s", names[i]);
    }
    if (ot_topology_ring(t, m->dev_of) != OT_OK) {
        ot_clear_error();
        for (int i = 0; i < t->size; i++) m->dev_of[i] = i;
    }
    for (int i = 0; i < t->size; i++) m->lin_of[m->dev_of[i]] = i;
    *out = m;
    return OT_OK;
}

void ot_mesh_free(ot_mesh *m) {
    if (!m) return;
    ot_free(m->dev_of);
    ot_free(m->lin_of);
    ot_free(m);
}

int ot_mesh_naxes(const ot_mesh *m) {
    return m->naxes;
}
int ot_mesh_size(const ot_mesh *m) {
    return m->size;
}
int ot_mesh_axis_index(const ot_mesh *m, const char *name) {
    for (int i = 0; name && i < m->naxes; i++)
        if (!strcmp(m->names[i], name)) return i;
    return -1;
}
int ot_mesh_axis_size(const ot_mesh *m, int axis) {
    return axis >= 0 && axis < m->naxes ? m->sizes[axis] : 0;
}
const char *ot_mesh_axis_name(const ot_mesh *m, int axis) {
    return axis >= 0 && axis < m->naxes ? m->names[axis] : NULL;
}

int ot_mesh_device(const ot_mesh *m, const int *coords) {
    int lin = 0;
    for (int i = 0; i < m->naxes; i++) {
        if (coords[i] < 0 || coords[i] >= m->sizes[i]) return -1;
        lin = lin * m->sizes[i] + coords[i];
    }
    return m->dev_of[lin];
}

void ot_mesh_coords(const ot_mesh *m, int device, int *coords) {
    int lin = m->lin_of[device];
    for (int i = m->naxes - 1; i >= 0; i--) {
        coords[i] = lin % m->sizes[i];
        lin /= m->sizes[i];
    }
}

ot_status ot_mesh_axis_groups(const ot_mesh *m, const char *axis, int *groups, int *ngroups,
                              int *group_size) {
    if (!m || !groups || !ngroups || !group_size)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "mesh axis groups: NULL argument");
    int a = ot_mesh_axis_index(m, axis);
    if (a < 0) return ot_error(OT_ERR_NOT_FOUND, "mesh: no axis named '%s'", axis ? axis : "");
    int gs = m->sizes[a], ng = m->size / gs, k = 0;
    /* iterate the other axes in order; within a group, the axis coordinate 0..gs-1 */
    int coords[OT_MESH_MAX_AXES] = {0};
    for (int g = 0; g < ng; g++) {
        /* decode g over the axes other than a (last fastest) */
        int rem = g;
        for (int i = m->naxes - 1; i >= 0; i--) {
            if (i == a) continue;
            coords[i] = rem % m->sizes[i];
            rem /= m->sizes[i];
        }
        for (int j = 0; j < gs; j++) {
            coords[a] = j;
            groups[k++] = ot_mesh_device(m, coords);
        }
    }
    *ngroups = ng;
    *group_size = gs;
    return OT_OK;
}
