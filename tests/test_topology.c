/* Topology: presets and their limits, coordinates, neighbours, hop distance, dimension-order
 * routes, Hamiltonian ring embeddings (every device once, adjacent steps), slices, logical meshes,
 * DOT/JSON export. */
#include "ot_test.h"

#include "optitpu/pod.h"

#include <jansson.h>

static void test_presets(void) {
    ot_topology *t;
    ASSERT_OK(ot_topology_preset("v4-4x4x4", &t));
    EXPECT_INT_EQ(ot_topology_size(t), 64);
    EXPECT_INT_EQ(ot_topology_ndims(t), 3);
    EXPECT_TRUE(ot_topology_wraps(t, 0) && ot_topology_wraps(t, 2));
    EXPECT_NEAR(ot_topology_link_gbytes_per_s(t), 50.0, 1e-9);
    EXPECT_INT_EQ(ot_topology_diameter(t), 6);
    ot_topology_free(t);
    ASSERT_OK(ot_topology_preset("v4-2x2x1", &t)); /* below a cube: no wraparound */
    EXPECT_TRUE(!ot_topology_wraps(t, 0));
    ot_topology_free(t);
    ASSERT_OK(ot_topology_preset("v5p-4x4x8", &t));
    EXPECT_NEAR(ot_topology_link_gbytes_per_s(t), 100.0, 1e-9);
    ot_topology_free(t);
    ASSERT_OK(ot_topology_preset("v5e-16x16", &t));
    EXPECT_INT_EQ(ot_topology_size(t), 256);
    ot_topology_free(t);
    ASSERT_OK(ot_topology_preset("v3-32x32", &t));
    EXPECT_NEAR(ot_topology_link_gbytes_per_s(t), 82.0, 1e-9);
    ot_topology_free(t);
    const char *bad[] = {"v5e-32x32", "v2-4x4x4", "v4-4x4",  "v4-64x64x2",    "x-4",    "ring-0",
                         "ring-4x4",  "mesh-",    "mesh-4x", "torus-2x2x2x2", "nodash", "v3-33x1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        EXPECT_STATUS(ot_topology_preset(bad[i], &t), OT_ERR_INVALID_ARGUMENT);
        EXPECT_TRUE(t == NULL);
    }
}

static void check_ring(const char *spec, bool expect) {
    ot_topology *t;
    ASSERT_OK(ot_topology_preset(spec, &t));
    int n = ot_topology_size(t);
    int *ring = ot_malloc(sizeof(int) * (size_t)n);
    char *seen = ot_calloc((size_t)n, 1);
    ot_status st = ot_topology_ring(t, ring);
    if (!expect) {
        EXPECT_STATUS(st, OT_ERR_FAILED_PRECONDITION);
    } else {
        EXPECT_OK(st);
        int dup = 0, nonadj = 0;
        for (int i = 0; i < n; i++) {
            if (ring[i] < 0 || ring[i] >= n || seen[ring[i]]++) dup++;
            if (n > 1 && !ot_topology_adjacent(t, ring[i], ring[(i + 1) % n])) nonadj++;
        }
        if (dup || nonadj)
            fprintf(stderr, "  %s: %d repeats, %d non-adjacent steps\n", spec, dup, nonadj);
        EXPECT_INT_EQ(dup, 0);
        EXPECT_INT_EQ(nonadj, 0);
    }
    ot_free(ring);
    ot_free(seen);
    ot_topology_free(t);
}

static void test_ring_embeddings(void) {
    const char *yes[] = {"ring-1",     "ring-2",    "ring-7",     "mesh-2",      "mesh-2x3",
                         "mesh-4x4",   "mesh-3x4",  "mesh-2x3x3", "mesh-3x3x2",  "mesh-3x2x3",
                         "torus-3x3",  "torus-3x5", "torus-5x7",  "torus-3x3x3", "torus-5x3x7",
                         "v2-16x16",   "v3-32x32",  "v4-4x4x4",   "v4-8x8x16",   "v5e-16x16",
                         "v5e-2x4",    "v5p-4x4x8", "v4-2x2x1",   "mesh-1x2x1",  "torus-1x5",
                         "mesh-1x1x1", "mesh-4x1x3"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) check_ring(yes[i], true);
    const char *no[] = {"mesh-3", "mesh-3x3", "mesh-3x5x7", "mesh-1x4", "mesh-1x6x1"};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) check_ring(no[i], false);
}

static void check_desc_ring(int nd, const int *dims, const bool *wrap, bool expect) {
    ot_topology_desc d = ot_topology_desc_default();
    d.ndims = nd;
    for (int i = 0; i < nd; i++) d.dims[i] = dims[i], d.wrap[i] = wrap[i];
    ot_topology *t;
    ASSERT_OK(ot_topology_create(&d, &t));
    int n = ot_topology_size(t), ring[64], seen[64] = {0}, bad = 0;
    ot_status st = ot_topology_ring(t, ring);
    EXPECT_INT_EQ(st, expect ? OT_OK : OT_ERR_FAILED_PRECONDITION);
    for (int i = 0; st == OT_OK && i < n; i++) {
        bad += seen[ring[i]]++ != 0;
        bad += !ot_topology_adjacent(t, ring[i], ring[(i + 1) % n]);
    }
    EXPECT_INT_EQ(bad, 0);
    ot_topology_free(t);
}

static void test_ring_search_mixed_wraparound(void) {
    /* odd cylinders and mixed wraparound: outside the constructions, found by search */
    check_desc_ring(2, (int[]){3, 3}, (bool[]){true, false}, true);
    check_desc_ring(2, (int[]){3, 5}, (bool[]){false, true}, true);
    check_desc_ring(2, (int[]){5, 3}, (bool[]){true, false}, true);
    check_desc_ring(3, (int[]){3, 3, 3}, (bool[]){true, false, false}, true);
    check_desc_ring(3, (int[]){3, 3, 5}, (bool[]){false, false, true}, true);
    /* bipartite with an odd count: none, answered without searching */
    check_desc_ring(2, (int[]){3, 5}, (bool[]){false, false}, false);
}

static void test_routes_and_hops(void) {
    ot_topology *t;
    ASSERT_OK(ot_topology_preset("torus-4x4x4", &t));
    int path[32];
    int len = ot_topology_route(t, 0, 63, path, 32);
    EXPECT_INT_EQ(len, 4); /* (0,0,0) -> (3,3,3): one wrap hop per axis */
    EXPECT_INT_EQ(ot_topology_hops(t, 0, 63), 3);
    EXPECT_INT_EQ(path[0], 0);
    EXPECT_INT_EQ(path[1], 3); /* x first */
    EXPECT_INT_EQ(path[3], 63);
    for (int i = 0; i + 1 < len; i++) EXPECT_TRUE(ot_topology_adjacent(t, path[i], path[i + 1]));
    int nb[6];
    EXPECT_INT_EQ(ot_topology_neighbors(t, 21, nb), 6);
    ot_topology_free(t);
    ASSERT_OK(ot_topology_preset("mesh-4x4", &t));
    EXPECT_INT_EQ(ot_topology_hops(t, 0, 15), 6);
    EXPECT_INT_EQ(ot_topology_route(t, 0, 15, path, 2), 7); /* more than cap: length reported */
    EXPECT_INT_EQ(ot_topology_neighbors(t, 0, nb), 2);
    int c[3] = {3, 3, 0};
    EXPECT_INT_EQ(ot_topology_id(t, c), 15);
    c[0] = 4;
    EXPECT_INT_EQ(ot_topology_id(t, c), -1);
    ot_topology_free(t);
    /* every pair: route length = hops + 1 and every step is a link */
    ASSERT_OK(ot_topology_preset("torus-3x4x2", &t));
    int bad = 0;
    for (int a = 0; a < 24; a++)
        for (int b = 0; b < 24; b++) {
            int l = ot_topology_route(t, a, b, path, 32);
            bad += l != ot_topology_hops(t, a, b) + 1 || path[l - 1] != b;
            for (int i = 0; i + 1 < l; i++) bad += !ot_topology_adjacent(t, path[i], path[i + 1]);
        }
    EXPECT_INT_EQ(bad, 0);
    ot_topology_free(t);
}

static void test_slices(void) {
    ot_topology *t, *s;
    ASSERT_OK(ot_topology_preset("v4-8x8x8", &t));
    int parent[64];
    ASSERT_OK(ot_topology_slice(t, (int[]){6, 0, 4}, (int[]){4, 4, 4}, &s, parent));
    EXPECT_INT_EQ(ot_topology_size(s), 64);
    EXPECT_TRUE(!ot_topology_wraps(s, 0)); /* a part of a wrapped axis does not wrap */
    int c[3];
    ot_topology_coords(t, parent[1], c);
    EXPECT_INT_EQ(c[0], 7);
    ot_topology_coords(t, parent[2], c);
    EXPECT_INT_EQ(c[0], 0); /* wrapped round the torus */
    EXPECT_INT_EQ(c[2], 4);
    ot_topology_free(s);
    ASSERT_OK(ot_topology_slice(t, (int[]){0, 0, 0}, (int[]){8, 2, 1}, &s, NULL));
    EXPECT_TRUE(ot_topology_wraps(s, 0) && !ot_topology_wraps(s, 1));
    ot_topology_free(s);
    EXPECT_STATUS(ot_topology_slice(t, (int[]){0, 0, 0}, (int[]){9, 1, 1}, &s, NULL),
                  OT_ERR_OUT_OF_RANGE);
    ot_topology_free(t);
    ASSERT_OK(ot_topology_preset("mesh-4x4", &t));
    EXPECT_STATUS(ot_topology_slice(t, (int[]){3, 0, 0}, (int[]){2, 1, 1}, &s, NULL),
                  OT_ERR_OUT_OF_RANGE);
    ot_topology_free(t);
}

static void test_logical_mesh(void) {
    ot_topology *t;
    ASSERT_OK(ot_topology_preset("torus-2x4", &t));
    ot_mesh *m;
    const char *names[] = {"data", "model"};
    ASSERT_OK(ot_mesh_create(t, 2, names, (int[]){2, 4}, &m));
    EXPECT_INT_EQ(ot_mesh_axis_index(m, "model"), 1);
    EXPECT_INT_EQ(ot_mesh_axis_index(m, "pipe"), -1);
    int groups[8], ng, gs;
    ASSERT_OK(ot_mesh_axis_groups(m, "model", groups, &ng, &gs));
    EXPECT_INT_EQ(ng, 2);
    EXPECT_INT_EQ(gs, 4);
    /* a model group is a run of physically adjacent devices */
    for (int g = 0; g < ng; g++)
        for (int j = 0; j + 1 < gs; j++)
            EXPECT_TRUE(ot_topology_adjacent(t, groups[g * gs + j], groups[g * gs + j + 1]));
    ASSERT_OK(ot_mesh_axis_groups(m, "data", groups, &ng, &gs));
    EXPECT_INT_EQ(ng, 4);
    char seen[8] = {0};
    for (int i = 0; i < 8; i++) seen[groups[i]]++;
    for (int i = 0; i < 8; i++) EXPECT_INT_EQ(seen[i], 1);
    for (int d = 0; d < 8; d++) {
        int co[2];
        ot_mesh_coords(m, d, co);
        EXPECT_INT_EQ(ot_mesh_device(m, co), d);
    }
    EXPECT_STATUS(ot_mesh_axis_groups(m, "pipe", groups, &ng, &gs), OT_ERR_NOT_FOUND);
    ot_mesh_free(m);
    EXPECT_STATUS(ot_mesh_create(t, 2, names, (int[]){3, 3}, &m), OT_ERR_SHAPE_MISMATCH);
    const char *dup[] = {"a", "a"};
    EXPECT_STATUS(ot_mesh_create(t, 2, dup, (int[]){2, 4}, &m), OT_ERR_INVALID_ARGUMENT);
    ot_topology_free(t);
}

static void test_export(void) {
    ot_topology *t;
    ASSERT_OK(ot_topology_preset("v4-4x4x4", &t));
    char *s;
    ASSERT_OK(ot_topology_to_json(t, &s));
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    ASSERT_TRUE(j != NULL);
    EXPECT_INT_EQ(json_integer_value(json_object_get(j, "devices")), 64);
    EXPECT_INT_EQ(json_array_size(json_object_get(j, "ring")), 64);
    EXPECT_INT_EQ(json_array_size(json_object_get(j, "nodes")), 64);
    json_decref(j);
    ot_free(s);
    ASSERT_OK(ot_topology_to_dot(t, &s));
    EXPECT_STR_CONTAINS(s, "graph \"v4-4x4x4\"");
    int edges = 0;
    for (const char *p = s; (p = strstr(p, " -- ")); p++) edges++;
    EXPECT_INT_EQ(edges, 64 * 3); /* 6 links per chip, each counted once */
    ot_free(s);
    ot_topology_free(t);
}

static void test_alloc_failures(void) {
    int64_t live = ot_alloc_live();
    for (int64_t n = 1; n < 40; n++) {
        ot_alloc_fail_after(n);
        ot_topology *t = NULL;
        ot_status st = ot_topology_preset("torus-3x4", &t);
        char *s = NULL;
        int ring[12];
        if (st == OT_OK) {
            (void)ot_topology_to_json(t, &s);
            (void)ot_topology_ring(t, ring);
        }
        ot_alloc_fail_after(0);
        ot_free(s);
        ot_topology_free(t);
        EXPECT_INT_EQ(ot_alloc_live(), live);
    }
}

OT_TEST_MAIN(OT_TEST(test_presets), OT_TEST(test_ring_embeddings),
             OT_TEST(test_ring_search_mixed_wraparound), OT_TEST(test_routes_and_hops),
             OT_TEST(test_slices), OT_TEST(test_logical_mesh), OT_TEST(test_export),
             OT_TEST(test_alloc_failures))
