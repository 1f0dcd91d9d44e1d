/* SPDX-License-Identifier: BSD-2-Clause */
/* The disk tier: the stores of cache.disk (umbra/disk.h) beneath the memory cache, and the
 * origin layer that reads and writes them (src/cache/origin_disk.c).
 *
 * A record answers as the memory cache's object would (RFC 9111, RFC 5861): fresh, or
 * stale within its stale-while-revalidate; else the origin is asked (a revalidation when
 * it has validators) and the record stands in for a failure within its stale-if-error.
 *
 * The layer sits between the memory cache and the origin chain below it (compression,
 * hooks, the upstream): a fill of the memory cache that the disk holds fresh is answered
 * from the disk (and so promoted to memory: the memory tier's SIEVE then keeps what is
 * asked again); any other fill goes on to the origin, and its answer, when it may be
 * stored, is written to the disk after the client has had it (write-behind: a write that
 * does not fit the store's queue is dropped and counted, never waited for). A worker never
 * blocks on the disk: lookups are in memory, reads complete on the worker's loop.
 *
 * What goes to disk: 200 answers to GET that the cache may store (RFC 9111), whole
 * (Content-Length or not) and at most cache.max_object, with no Content-Encoding of their
 * own (the codings are made from the identity object, see src/cache/origin_derive.c) and
 * not Vary "*"; a response that varies on other fields than Accept-Encoding is a variant
 * record beside a marker under the URL's key (origin_disk.c). An object on disk is a
 * record of its key, its status, its stored fields and times; the fields include the tag
 * fields, so that a promoted object is tagged again.
 *
 * Purges: a purge of a URL removes its record; a purge by prefix or tag (hard or soft)
 * cannot look into the disk's records without reading them, so it moves the tier's purge
 * time forward: records written before it are no longer served (a miss, and removed). The
 * purge time is kept in DIR/umbra.purged of every store, so a restart keeps it. */
#ifndef UMBRA_DISKTIER_H
#define UMBRA_DISKTIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "umbra/common.h"
#include "umbra/disk.h"

struct um_config;
struct um_route;
struct um_origin;
struct um_disk_tier;
struct um_module;

/* The tier's record (umbra/module.h): its /metrics lines and /status.json member from the
 * tier the server gives um_module_run. */
extern const struct um_module um_disk_module;

/* Checks that every store of config's cache.disk can be made: its directory exists and is
 * writable, and the filesystem has room for what its store file still needs. false with
 * "cache.disk: DIR: why" in err. No store is opened. */
bool um_disk_tier_check(const struct um_config *config, char *err, size_t errlen);

/* Opens (or creates) the stores of config's cache.disk; NULL with err set when one cannot
 * be (the path named), or when config has none (err empty). Blocks for the index
 * rebuilds: at start only. */
struct um_disk_tier *um_disk_tier_open(const struct um_config *config, char *err, size_t errlen);

/* Writes what is queued, syncs, writes the index snapshots and frees t (NULL: nothing). */
void um_disk_tier_close(struct um_disk_tier *t);

/* The layer over inner for route r (inner is the layer's to destroy). */
struct um_origin *um_disk_origin_create(struct um_disk_tier *t, struct um_origin *inner,
                                        const struct um_route *r, const struct um_config *c);

/* A purge of the cache key key: its record removed. */
void um_disk_tier_purge_key(struct um_disk_tier *t, um_str key);
/* A purge by prefix or tag: the records written until now are no longer served. The new
 * purge time is written to the stores' directories by the tier's thread (never waited for
 * here: any thread may purge); um_disk_tier_close writes the last one. */
void um_disk_tier_purge_all(struct um_disk_tier *t);

struct um_disk_tier_stats {
    uint64_t stores;
    struct um_disk_stats disk; /* of every store, added */
    uint64_t hits, misses, purged, rewrites, revalidations, promotions;
};
void um_disk_tier_stats(struct um_disk_tier *t, struct um_disk_tier_stats *st);

#endif
