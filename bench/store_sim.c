/* SPDX-License-Identifier: BSD-2-Clause */
/* Trace replay for benchmarks (store_sim.h): drives the real store (index, SIEVE, memory
 * cap) with synthetic objects, so hit ratios measured here are the proxy's own. */
#include "store_sim.h"

#include <string.h>

size_t um_cache_sim(const struct um_cache_opts *o, const struct um_cache_sim_req *reqs, size_t n,
                    struct um_cache_stats *st)
{
    static const char zeros[4096];
    struct um_cache *c = um_cache_create(o);
    size_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        char kb[sizeof(uint64_t)];
        memcpy(kb, &reqs[i].key, sizeof(kb));
        um_str key = {kb, sizeof(kb)};
        struct um_cache_obj *obj = um_cache_lookup(c, key, NULL, NULL);
        if (obj != NULL) {
            hits++;
            um_cache_obj_unref(obj);
            continue;
        }
        if ((obj = um_cache_insert(c, key, NULL, 0)) == NULL) continue;
        size_t left = reqs[i].size;
        int rc = um_cache_obj_expect(obj, left);
        if (rc == UM_OK) rc = um_cache_obj_set_head(obj, NULL, 0, NULL, 0);
        while (rc == UM_OK && left > 0) {
            size_t k = left < sizeof(zeros) ? left : sizeof(zeros);
            rc = um_cache_obj_append(obj, zeros, k);
            left -= k;
        }
        um_cache_obj_finish(obj, rc == UM_OK);
        um_cache_obj_unref(obj);
    }
    if (st != NULL) um_cache_stats(c, st);
    um_cache_destroy(c);
    return hits;
}
