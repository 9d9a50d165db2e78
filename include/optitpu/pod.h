/*
 * optitpu pod: the devices that train together — physical topology (ring, mesh, torus, TPU
 * presets), logical meshes with named axes, the coordinator (registry, health state machine,
 * heartbeats, phi-accrual failure detection, membership epochs, channels, load balancing,
 * events), generation-counted barriers with deadlines, slice scheduling and batch coordination.
 * Collectives live in optitpu/collectives.h.
 *
 * Usage:
 *
 *     ot_topology *t;
 *     OT_CHECK(ot_topology_preset("v4-4x4x4", &t));         // 64 chips, 3D torus
 *     int ring[64];
 *     OT_CHECK(ot_topology_ring(t, ring));                  // Hamiltonian cycle over the links
 *     int hops = ot_topology_hops(t, 0, 63);
 *     ot_topology_free(t);
 *
 *     ot_coord_options co = ot_coord_options_default();
 *     co.clock = my_clock; co.clock_ud = &fake_now;          // injectable time (tests)
 *     ot_coord *c;
 *     OT_CHECK(ot_coord_create(&co, &c));
 *     int dev;
 *     OT_CHECK(ot_coord_register(c, "host:0", 1.0, &dev));    // joining
 *     ot_coord_heartbeat(c, dev);                            // ... every interval
 *     ot_coord_tick(c);                                      // evaluates the failure detector
 *     ot_coord_free(c);
 *
 * Thread safety: a topology and a logical mesh are immutable after creation and may be shared.
 * The coordinator, barriers and the slice scheduler lock internally: any thread may call them.
 * Event callbacks run on the thread that caused the event (tick, heartbeat, register...) after
 * the coordinator's lock is released; they may call back into the coordinator.
 */
#ifndef OPTITPU_POD_H
#define OPTITPU_POD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Time. Everything in the pod that reads time takes a clock function so that tests can drive it
 * deterministically. NULL means ot_now_ns (CLOCK_MONOTONIC).
 * ------------------------------------------------------------------------------------------- */

typedef uint64_t (*ot_clock_fn)(void *ud);

/* ---------------------------------------------------------------------------------------------
 * Topology: an n-dimensional grid (1 to 3 axes), each axis with or without wraparound.
 * Device ids put axis 0 (x) fastest: id = x + X*(y + Y*z), matching TPU "XxYxZ" naming.
 * ------------------------------------------------------------------------------------------- */

#define OT_TOPO_MAX_DIMS    3
#define OT_TOPO_MAX_DEVICES 65536

typedef struct ot_topology ot_topology;

typedef struct ot_topology_desc {
    const char *name;            /* copied; NULL → derived from the shape */
    int ndims;                   /* 1..3 */
    int dims[OT_TOPO_MAX_DIMS];  /* each >= 1 */
    bool wrap[OT_TOPO_MAX_DIMS]; /* wraparound link on this axis (a torus axis) */
    double link_gbytes_per_s;    /* per link, per direction; > 0 */
    double link_latency_us;      /* per hop; >= 0 */
} ot_topology_desc;

/* A 1D ring of n devices, 1 GB/s, 1 us unless changed. */
OT_API ot_topology_desc ot_topology_desc_default(void);
OT_API ot_status ot_topology_create(const ot_topology_desc *d, ot_topology **out);
/* Presets: "v2-AxB", "v3-AxB" (2D torus), "v4-AxBxC" (3D torus built from 4x4x4 cubes; smaller
 * slices are meshes), "v5e-AxB" (2D, up to 16x16), "v5p-AxBxC" (3D torus from 4x4x4 cubes),
 * and generic "ring-N", "mesh-A[xB[xC]]", "torus-A[xB[xC]]". Link figures come from the public
 * specifications cited in src/pod/topology.c. Unknown names or out-of-spec shapes are
 * OT_ERR_INVALID_ARGUMENT with a message naming the limit. */
OT_API ot_status ot_topology_preset(const char *spec, ot_topology **out);
OT_API void ot_topology_free(ot_topology *t); /* NULL is a no-op */

OT_API const char *ot_topology_name(const ot_topology *t);
OT_API int ot_topology_size(const ot_topology *t);
OT_API int ot_topology_ndims(const ot_topology *t);
OT_API int ot_topology_dim(const ot_topology *t, int axis);    /* 1 for axis >= ndims */
OT_API bool ot_topology_wraps(const ot_topology *t, int axis); /* false for axis >= ndims */
OT_API double ot_topology_link_gbytes_per_s(const ot_topology *t);
OT_API double ot_topology_link_latency_us(const ot_topology *t);

/* Coordinates <-> id. coords has OT_TOPO_MAX_DIMS entries (unused axes are 0). The id form
 * returns -1 for coordinates outside the grid. */
OT_API void ot_topology_coords(const ot_topology *t, int id, int coords[OT_TOPO_MAX_DIMS]);
OT_API int ot_topology_id(const ot_topology *t, const int coords[OT_TOPO_MAX_DIMS]);
/* Distinct neighbours by direct link, in axis order (-, +); returns their number (<= 6). */
OT_API int ot_topology_neighbors(const ot_topology *t, int id, int out[2 * OT_TOPO_MAX_DIMS]);
OT_API bool ot_topology_adjacent(const ot_topology *t, int a, int b);
/* Hop distance along shortest paths (wraparound used where present). */
OT_API int ot_topology_hops(const ot_topology *t, int a, int b);
/* Dimension-order route a → b (axis 0 first; the shorter way round on a wrapped axis, ties go
 * the + way). Writes up to cap device ids, a and b included; returns the path length in nodes
 * (hops + 1), which may exceed cap (then only cap were written). */
OT_API int ot_topology_route(const ot_topology *t, int a, int b, int *path, int cap);
/* Largest hop distance between any two devices. */
OT_API int ot_topology_diameter(const ot_topology *t);
/* A Hamiltonian cycle over direct links: order[0..size-1] visits every device once and
 * order[i], order[(i+1) % size] are adjacent. OT_ERR_FAILED_PRECONDITION when the shape has
 * none (an odd number of devices on a mesh, a line longer than 2) — the message says why. */
OT_API ot_status ot_topology_ring(const ot_topology *t, int *order);
/* A contiguous sub-mesh: origin + extent per axis (wrapping around a torus axis is allowed).
 * The slice keeps the parent's links; an axis wraps only when the slice spans the whole wrapped
 * axis. parent_ids (size of the slice, may be NULL) receives the parent id of each slice id. */
OT_API ot_status ot_topology_slice(const ot_topology *t, const int origin[OT_TOPO_MAX_DIMS],
                                   const int extent[OT_TOPO_MAX_DIMS], ot_topology **out,
                                   int *parent_ids);
/* Graphviz DOT (undirected graph, one edge per link) and JSON ({name, dims, wrap, devices,
 * link_gbytes_per_s, link_latency_us, diameter, ring, nodes:[{id, coords, neighbors}]}).
 * *out is allocated with ot_malloc; free it with ot_free. */
OT_API ot_status ot_topology_to_dot(const ot_topology *t, char **out);
OT_API ot_status ot_topology_to_json(const ot_topology *t, char **out);

/* ---------------------------------------------------------------------------------------------
 * Logical meshes: named axes ("data", "model") over the devices of a topology. The product of
 * the axis sizes must equal the topology's size. Devices are laid out along the topology's
 * Hamiltonian ring (device order otherwise) with the last axis fastest, so a group along the
 * last axis is a run of physically adjacent devices.
 * ------------------------------------------------------------------------------------------- */

#define OT_MESH_MAX_AXES 4

typedef struct ot_mesh ot_mesh;

OT_API ot_status ot_mesh_create(const ot_topology *t, int naxes, const char *const *names,
                                const int *sizes, ot_mesh **out);
OT_API void ot_mesh_free(ot_mesh *m);
OT_API int ot_mesh_naxes(const ot_mesh *m);
OT_API int ot_mesh_size(const ot_mesh *m);
/* -1 when no axis has that name. */
OT_API int ot_mesh_axis_index(const ot_mesh *m, const char *name);
OT_API int ot_mesh_axis_size(const ot_mesh *m, int axis);
OT_API const char *ot_mesh_axis_name(const ot_mesh *m, int axis);
/* Logical coordinates (naxes entries) <-> physical device id. */
OT_API int ot_mesh_device(const ot_mesh *m, const int *coords);
OT_API void ot_mesh_coords(const ot_mesh *m, int device, int *coords);
/* The replica groups along one axis (HLO replica_groups form): ngroups = size / axis size,
 * each of axis-size device ids, written row after row into groups (size entries). */
OT_API ot_status ot_mesh_axis_groups(const ot_mesh *m, const char *axis, int *groups, int *ngroups,
                                     int *group_size);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_POD_H */
