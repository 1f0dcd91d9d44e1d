/* SPDX-License-Identifier: BSD-2-Clause */
/* The second-level cache on Redis (src/l2/l2.c, bus.c): objects kept across
 * restarts and shared by the nodes, and purges carried to every node.
 *
 * - Lookups and writes: each worker has one Redis connection, driven by its loop (hiredis
 *   async, pipelined). A lookup is a GET with a timer of cache.l2.timeout: past it, or
 *   when Redis is down, the caller goes on to the origin at once; a late reply is read and
 *   dropped. Writes (SET .. PX, and SADD to the object's tag sets) are fire-and-forget,
 *   dropped while the connection is down or has more than L2_MAX_OUTSTANDING bytes
 *   unanswered. Three timeouts in a row with no reply between drop the connection, which
 *   is tried again with a backoff (50 ms doubling to 1 s); one line is logged when Redis
 *   goes away and one when it is back, for the whole process.
 * - Purges: a thread of the cluster floor (the bus) holds two more connections: one
 *   subscribed to the channel umbra:purge, one that publishes this node's purges and
 *   deletes what they cover from Redis (a URL's key; a tag's set and its members; a
 *   prefix's keys found with SCAN). A node ignores its own messages (each carries its
 *   node id) and applies the others' through the callback it was given.
 *
 * Keys: "umbra:o:" + cache key (the value: um_cache_l2_encode), "umbra:t:" + tag (a set of
 * cache keys, living as long as its longest member).
 *
 * Threads: create/destroy on the main thread; um_l2_worker_start and the cache
 * interface on the worker whose context they get; um_l2_purge_publish and um_l2_state from
 * any thread. */
#ifndef UMBRA_L2_H
#define UMBRA_L2_H

#include "umbra/cacheorigin.h"
#include "umbra/config.h"
#include "umbra/context.h"

struct um_l2;

/* Called on the bus thread for a purge another node published: apply it to the local
 * cache only. */
typedef void (*um_l2_apply_cb)(void *arg, const struct um_purge *p);

/* Makes the L2 of config's cache.l2 (copied; must be enabled) and starts its bus thread.
 * Never NULL. Free with um_l2_destroy after every worker has stopped. */
struct um_l2 *um_l2_create(const struct um_config *config, um_l2_apply_cb apply, void *arg);
void um_l2_destroy(struct um_l2 *l2);

/* The cache interface to put in a worker's context (ctx->l2); lives as long as l2. */
struct um_cache_l2 *um_l2_cache(struct um_l2 *l2);

/* Connects the worker of ctx (its loop) to Redis now, rather than on its first miss.
 * The connection is closed when the loop stops. */
void um_l2_worker_start(struct um_l2 *l2, struct um_context *ctx);

/* Publishes a purge applied on this node, and deletes what it covers from Redis. Any
 * thread; never blocks (queued to the bus thread; dropped, with a log line, when Redis is
 * down). */
void um_l2_purge_publish(struct um_l2 *l2, const struct um_purge *p);

/* The L2's record (umbra/module.h, defined with its worker connections): its counters,
 * /metrics lines and /status.json member from the L2 the server gives um_module_run. */
extern const struct um_module um_l2_module;

struct um_l2_state {
    const char *host;
    int port;
    int workers, workers_up; /* worker connections, and how many are up */
    bool bus_up;             /* the subscriber and the publisher */
    uint64_t purges_sent, purges_received, purges_dropped;
};
void um_l2_state(struct um_l2 *l2, struct um_l2_state *st);

#endif
