/* libFuzzer target: HLO replica_groups text. Either a clean error or groups that cover every
 * replica exactly once. */
#include "optitpu/collectives.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int nranks = 1 + data[0] % 64;
    int *g = NULL, ng = 0, gs = 0;
    if (ot_replica_groups_parse((const char *)data + 1, size - 1, nranks, &g, &ng, &gs) == OT_OK) {
        char seen[64] = {0};
        if ((int64_t)ng * gs != nranks) abort();
        for (int i = 0; i < nranks; i++) {
            if (g[i] < 0 || g[i] >= nranks || seen[g[i]]++) abort();
        }
        ot_free(g);
    } else if (g != NULL) {
        abort();
    }
    return 0;
}
