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
#include "umbra/origin.h"

/* Wraps inner (takes over the caller's reference to it) for route, answering from cache.
 * cache and config must outlive the origin. Destroy through ops->destroy. */
struct um_origin *um_cache_origin_create(struct um_cache *cache, struct um_origin *inner,
                                         const struct um_route *route,
                                         const struct um_config *config);

/* A purge, as the cache layer (PURGE) and the admin listener (POST /purge) describe it to
 * the other nodes of a cluster. Everything is borrowed for the call. */
enum um_cache_purge_kind { UM_CACHE_PURGE_KEY, UM_CACHE_PURGE_PREFIX, UM_CACHE_PURGE_TAGS };
struct um_cache_purge {
    enum um_cache_purge_kind kind;
    bool soft;
    um_str key;    /* KEY: the cache key */
    um_str host;   /* PREFIX: the host (lower case) and the target prefix (no '*') */
    um_str prefix;
    const um_str *tags; /* TAGS */
    size_t ntags;
};

/* What a cluster node adds to a caching origin (umbra/cluster.h): fill, the origin its
 * fills go to instead of inner (taken over: destroyed with the cache origin, before
 * inner), and on_purge, called on the worker after each PURGE it applied (not for
 * a peer's own PURGE). Main thread, before the origin is used. */
struct um_cache_ring {
    struct um_origin *fill;
    void (*on_purge)(void *arg, const struct um_cache_purge *p);
    void *arg;
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

#endif
