/* SPDX-License-Identifier: BSD-2-Clause */
/* Trace replay through the real store (bench/store_sim.c), for bench/sieve_vs_lru.c and
 * tests/unit/test_cache.c: not part of the server. */
#ifndef UMBRA_BENCH_STORE_SIM_H
#define UMBRA_BENCH_STORE_SIM_H

#include "umbra/cache.h"

struct um_cache_sim_req {
    uint64_t key;  /* object identity */
    uint32_t size; /* body bytes when it has to be inserted */
};

/* Replays a trace through a fresh store made with o: each request is a lookup; a miss
 * inserts the object with a body of `size` bytes (unless above max_object). Returns the
 * number of hits; st (may be NULL) receives the store's final counters. Single thread. */
size_t um_cache_sim(const struct um_cache_opts *o, const struct um_cache_sim_req *reqs, size_t n,
                    struct um_cache_stats *st);

#endif
