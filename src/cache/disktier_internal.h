/* SPDX-License-Identifier: BSD-2-Clause */
/* What disktier.c and origin_disk.c share: the tier's state. */
#ifndef UMBRA_CACHE_DISKTIER_INTERNAL_H
#define UMBRA_CACHE_DISKTIER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "umbra/disk.h"
#include "umbra/disktier.h"

/* The admission of disk records to memory (disk_admit.c). */
struct um__disk_admit {
    _Atomic uint64_t *bits[2]; /* two generations' Bloom filters */
    uint64_t mask;             /* bits a filter - 1 */
    uint64_t generation;       /* bytes of disk hits a generation: memory / 2 */
    _Atomic unsigned cur;      /* the current filter */
    _Atomic uint64_t bytes;    /* of disk hits in the current generation */
};
void um__disk_admit_init(struct um__disk_admit *a, uint64_t memory);
void um__disk_admit_dispose(struct um__disk_admit *a);
/* Whether a fresh record of key, read from disk (bytes of body), goes into memory: it was
 * read before within about the memory's worth of disk hits. Counts this read. */
bool um__disk_admit(struct um__disk_admit *a, struct um_disk_key key, uint64_t bytes);

struct um_disk_tier {
    struct um_disk **stores;
    char **dirs;
    size_t n;
    uint64_t max_object; /* largest body written (cache.max_object, or what a store takes) */
    /* Records written before this (unix seconds) are not served: a purge by prefix or tag
     * (disktier.h). */
    _Atomic int64_t purged_before;
    /* The purge time is written to every store's directory (with an fsync) by a thread of
     * the tier's own, not by the thread that purged (a worker may): to_write is the newest
     * time to write, written the last one written. */
    pthread_t purge_writer;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int64_t to_write, written;
    bool closing, started;
    _Atomic uint64_t hits, misses, purged, purges, rewrites, revalidations, promotions;
    struct um__disk_admit admit;
    /* The Vary markers' generations as last given, by URL key (direct-mapped): a marker
     * is written behind its variant, so two variants filled in quick succession would
     * otherwise each find no marker on disk and draw generations of their own, the first
     * then unreachable. A purge of the URL forgets its slot. */
    pthread_mutex_t gens_mu;
    struct {
        uint64_t hi, lo, gen;
    } gens[256];
};

/* The generation of the Vary marker of URL key: the one last given for it when there is
 * one, else gen (which is then given). */
uint64_t um__disk_tier_marker_gen(struct um_disk_tier *t, struct um_disk_key key, uint64_t gen);

/* The store of t that holds key. */
struct um_disk *um__disk_tier_store(struct um_disk_tier *t, struct um_disk_key key);

#endif
