/* libFuzzer target: topology preset names ("v4-4x4x4", "torus-3x5", ...) and slice specs
 * ("v4-4x4x4:2x2x1"). A parsed topology must embed a valid ring or say why not, and export to
 * JSON; a parsed slice spec must give a preset shorter than its buffer and extents >= 1. */
#include "optitpu/pod.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 64) return 0;
    char spec[65];
    memcpy(spec, data, size);
    spec[size] = 0;
    char preset[16];
    int shape[OT_TOPO_MAX_DIMS];
    if (ot_slice_spec_parse(spec, preset, sizeof preset, shape) == OT_OK) {
        if (strlen(preset) >= sizeof preset || !preset[0]) abort();
        for (int i = 0; i < OT_TOPO_MAX_DIMS; i++)
            if (shape[i] < 1) abort();
    }
    ot_topology *t = NULL;
    if (ot_topology_preset(spec, &t) != OT_OK) {
        if (t) abort();
        return 0;
    }
    int n = ot_topology_size(t);
    if (n <= 4096) {
        int *ring = ot_malloc(sizeof(int) * (size_t)n);
        if (ring && ot_topology_ring(t, ring) == OT_OK) {
            for (int i = 0; i < n && n > 1; i++)
                if (!ot_topology_adjacent(t, ring[i], ring[(i + 1) % n])) abort();
        }
        ot_free(ring);
        char *s = NULL;
        if (n <= 512 && ot_topology_to_json(t, &s) == OT_OK) ot_free(s);
    }
    ot_topology_free(t);
    return 0;
}
