/* optitpu topo: describe a pod topology (preset or generic grid) as text, DOT or JSON. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: optitpu topo --preset SPEC [--dot | --json] [--route A B]\n"
    "\n"
    "Describes a pod topology: shape, wraparound, link bandwidth and latency, diameter, the\n"
    "Hamiltonian ring used by ring collectives, and each device's neighbours.\n"
    "\n"
    "  --preset SPEC   v2-AxB, v3-AxB, v4-AxBxC, v5e-AxB, v5p-AxBxC, ring-N, mesh-AxB[xC],\n"
    "                  torus-AxB[xC]   (default v4-4x4x4)\n"
    "  --dot           Graphviz DOT, one edge per link\n"
    "  --json          one JSON object\n"
    "  --route A B     print the dimension-order route from device A to device B\n";

static int run(int argc, char **argv) {
    const char *spec = "v4-4x4x4";
    bool dot = false, json = false;
    int64_t ra = -1, rb = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) {
            spec = argv[++i];
        } else if (!strcmp(argv[i], "--dot")) {
            dot = true;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--route") && i + 2 < argc) {
            if (!cli_parse_i64(argv[i + 1], 0, 1 << 20, &ra) ||
                !cli_parse_i64(argv[i + 2], 0, 1 << 20, &rb))
                return cli_usage_error("topo", "--route needs two device ids");
            i += 2;
        } else {
            return cli_usage_error("topo", "unknown or incomplete argument '%s'", argv[i]);
        }
    }
    if (dot && json) return cli_usage_error("topo", "--dot and --json exclude each other");
    ot_topology *t;
    if (ot_topology_preset(spec, &t) != OT_OK) return cli_fail("topo");
    int n = ot_topology_size(t);
    if (ra >= n || rb >= n) {
        ot_topology_free(t);
        return cli_usage_error("topo", "--route: device ids must be below %d", n);
    }
    int rc = CLI_OK;
    char *s = NULL;
    if (dot || json) {
        if ((dot ? ot_topology_to_dot(t, &s) : ot_topology_to_json(t, &s)) != OT_OK) {
            rc = cli_fail("topo");
        } else {
            fputs(s, stdout);
            if (json) putchar('\n');
        }
        ot_free(s);
        ot_topology_free(t);
        return rc;
    }
    printf("topology  %s\n", ot_topology_name(t));
    printf("shape     ");
    for (int a = 0; a < ot_topology_ndims(t); a++)
        printf("%s%d%s", a ? " x " : "", ot_topology_dim(t, a),
               ot_topology_wraps(t, a) ? "(wrap)" : "");
    printf("\ndevices   %d\nlink      %.2f GB/s per direction, %.2f us per hop\n", n,
           ot_topology_link_gbytes_per_s(t), ot_topology_link_latency_us(t));
    printf("diameter  %d hops\n", ot_topology_diameter(t));
    int *ring = ot_malloc(sizeof(int) * (size_t)n);
    if (ring && ot_topology_ring(t, ring) == OT_OK) {
        printf("ring      ");
        for (int i = 0; i < n; i++) printf("%d%s", ring[i], i + 1 < n ? " " : "\n");
    } else {
        printf("ring      none (%s)\n", ot_last_error());
    }
    ot_free(ring);
    if (ra >= 0) {
        int path[256];
        int len = ot_topology_route(t, (int)ra, (int)rb, path, 256);
        printf("route     %lld -> %lld, %d hops:", (long long)ra, (long long)rb, len - 1);
        for (int i = 0; i < len && i < 256; i++) printf(" %d", path[i]);
        printf("\n");
    }
    printf("\n%-6s %-12s %s\n", "device", "coords", "neighbours");
    for (int id = 0; id < n; id++) {
        int c[3], nb[6];
        ot_topology_coords(t, id, c);
        int k = ot_topology_neighbors(t, id, nb);
        char cs[40];
        snprintf(cs, sizeof cs, "(%d,%d,%d)", c[0], c[1], c[2]);
        printf("%-6d %-12s", id, cs);
        for (int i = 0; i < k; i++) printf(" %d", nb[i]);
        printf("\n");
    }
    ot_topology_free(t);
    return rc;
}

const cli_command cli_cmd_topo = {
    .name = "topo",
    .summary = "describe a pod topology (TPU presets, rings, routes; text, DOT or JSON)",
    .usage = usage,
    .run = run,
};
