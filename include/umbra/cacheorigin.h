/* SPDX-License-Identifier: BSD-2-Clause */
/* The caching layer: an origin that wraps another (an upstream) with the shared cache.
 *
 * GET and HEAD are looked up; a miss fills an object from the inner origin while every
 * request for the same key, on any worker, streams from that object (one origin request);
 * a stale object is revalidated with a conditional request; unsafe methods pass through and
 * invalidate what they change; PURGE removes an object. Cache-Status (RFC 9211) and Age go
 * on every response. The rules themselves are cachepolicy.h's; the store is cache.h's.
 * Created on the main thread with the runtime; fetches run on the worker thread that
 * calls them (its context in the fetch); only the store is shared between threads. */
#ifndef UMBRA_CACHEORIGIN_H
#define UMBRA_CACHEORIGIN_H

#include "umbra/cache.h"
#include "umbra/config.h"
#include "umbra/context.h"
#include "umbra/origin.h"
#include "umbra/purge.h"

/* ---- Second-level cache ----------------------------------------------------------------
 * A store of encoded objects shared by the nodes (the cluster floor's Redis L2 is one,
 * umbra/l2.h), which this layer asks on a miss before the origin and writes after a fill.
 * The layer encodes and decodes the values (um_cache_l2_encode/decode); the store only
 * keeps bytes. Every call is made on the worker whose context is passed, and never
 * blocks. */

enum um_cache_l2_result {
    UM_L2_HIT,
    UM_L2_MISS,
    UM_L2_UNAVAILABLE, /* error, timeout, down: go on to the origin */
    UM_L2_CLOSED,      /* the worker stops: go on no more */
};

struct um_cache_l2;
struct um_cache_l2_ops {
    /* Looks key up. done(arg, result, value, len) is called once, later, on ctx's loop
     * (never from inside get), value valid during the call (NULL unless UM_L2_HIT). Returns
     * a handle for cancel, or NULL when the store cannot be asked now (done is never
     * called: go on at once). key is borrowed for the call. */
    void *(*get)(struct um_cache_l2 *l2, struct um_context *ctx, um_str key,
                 void (*done)(void *arg, enum um_cache_l2_result res, const char *value,
                              size_t len),
                 void *arg);
    /* done will not be called for handle h (before it was). */
    void (*cancel)(struct um_cache_l2 *l2, struct um_context *ctx, void *h);
    /* Stores value under key for ttl_ms, listed under tags[0..ntags) for tag purges. Fire
     * and forget: may be dropped. Everything is borrowed for the call. */
    void (*put)(struct um_cache_l2 *l2, struct um_context *ctx, um_str key, const char *value,
                size_t len, uint64_t ttl_ms, const um_str *tags, size_t ntags);
};
struct um_cache_l2 {
    const struct um_cache_l2_ops *ops;
    size_t max_object; /* bodies above it are not put */
};

/* A PURGE applied on this node (not a peer's own) is handed to the store's announce link
 * (umbra/cache.h, umbra/purge.h), which carries it to the other nodes. */

/* Wraps inner (takes over the caller's reference to it) for route, answering from cache.
 * cache and config must outlive the origin. Destroy through ops->destroy. */
struct um_origin *um_cache_origin_create(struct um_cache *cache, struct um_origin *inner,
                                         const struct um_route *route,
                                         const struct um_config *config);

/* Large objects in slices (cache.disk.slice; the design at the top of src/cache/slice.c).
 * um_slice_origin_create wraps a route's cache origin inner (taken over): a GET is answered
 * from slices of size bytes fetched through inner, each an object of its own; purges of
 * the object's tags go to cache (which must outlive the origin).
 * um_slice_range_origin_create wraps the origin below the cache (taken over): a fetch of a
 * slice's key is sent with the Range of that slice, its 206 going up as a 200 that the
 * cache stores; any other fetch passes unchanged. Main thread; destroy through
 * ops->destroy. */
struct um_origin *um_slice_origin_create(struct um_origin *inner, struct um_cache *cache,
                                         uint64_t size);
struct um_origin *um_slice_range_origin_create(struct um_origin *inner);

/* What a cluster node adds to a caching origin (umbra/cluster.h): fill, the origin its
 * fills go to instead of inner (taken over: destroyed with the cache origin, before
 * inner). Its purges reach the peers through the store's announce link, as every other
 * node's do. Main thread, before the origin is used. */
struct um_cache_ring {
    struct um_origin *fill;
};
void um_cache_origin_set_ring(struct um_origin *o, const struct um_cache_ring *ring);

/* The key the cache gives req without a hook's cache_key: "host target", the Host in lower
 * case and the path and query as sent. um_cache_url_key_len bytes, written without a NUL. */
size_t um_cache_url_key_len(const struct um_request *req);
void um_cache_url_key_write(const struct um_request *req, char *out);

/* Surrogate keys: whether name is a field that tags a response (Surrogate-Key, Cache-Tag,
 * xkey; case-insensitive). */
bool um_cache_is_tag_field(um_str name);
/* Appends the tags of one tag field value (separated by spaces, tabs or commas) to
 * out[n..max); returns the new count. The tags are slices of v. */
size_t um_cache_split_tags(um_str v, um_str *out, size_t n, size_t max);
/* The tags of all the tag fields of h[0..nh), at most max (slices of the values). */
size_t um_cache_response_tags(const struct um_header *h, size_t nh, um_str *out, size_t max);

/* The encoded value of a complete object, for a second-level cache: a version byte then
 * what rebuilds it (status, times, lifetime, marks, Vary tag, tags, head block, body).
 * Appends to out; returns false (out unchanged in length) when obj is not a complete
 * stored response. now: the wall clock (seconds). */
struct um_buf;
bool um_cache_l2_encode(const struct um_cache_obj *obj, struct um_buf *out);

#endif
