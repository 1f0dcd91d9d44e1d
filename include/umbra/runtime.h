/* SPDX-License-Identifier: BSD-2-Clause */
/* What the server makes of a configuration snapshot to run it.
 *
 * The snapshot (umbra/config.h) is plain data. Everything built from it at run time is
 * here instead: the routes' origins (each a chain such as cache -> hooks -> upstream), one
 * origin per upstream (shared by the routes that name it, and what a hook's req.upstream
 * picks), the modules' states for it (umbra/module.h: the workers' Lua states, the
 * certificate store) and the routes' metrics slots. It
 * is in the server's floor because building it calls every floor below (upstream, static,
 * cache, lua), and only the server sits above them all.
 *
 * Life. A runtime is reference-counted and holds one reference to its snapshot. The
 * server holds one; each worker holds one for the runtime its new connections take, and
 * each connection one for its own, as they held snapshots before. A reload builds a new
 * runtime before anything changes, hands it to the workers through their mailboxes, and
 * retires the old one: the main thread destroys it once um_runtime_unused says so. A cache
 * fill that outlives its client holds the snapshot of its route (a config reference: the
 * cache sits below the server and cannot take a runtime's), which um_runtime_unused counts
 * too, so the origins a fill uses outlive it. The origins and the modules' states of a
 * runtime are thus always destroyed on the main thread, after their last use. */
#ifndef UMBRA_RUNTIME_H
#define UMBRA_RUNTIME_H

#include <stdatomic.h>

#include "umbra/cache.h"
#include "umbra/config.h"
#include "umbra/module.h"

struct um_cache;
struct um_cluster;
struct um_origin;

/* What the runtime has for config->routes[i]. */
struct um_runtime_route {
    struct um_origin *origin; /* NULL: none (a route only hooks answer, or nothing: 404) */
    int metrics_slot;         /* the route's slot in the metrics (umbra/metrics.h) */
};

struct um_runtime {
    struct um_config *config;        /* the snapshot (one reference, the runtime's) */
    struct um_runtime_route *routes; /* config->num_routes entries, in the same order */
    struct um_origin **upstreams;    /* config->num_upstreams origins, in the same order */
    void *states[UM_MODULES_MAX];    /* each module's (um_modules' order), from its make */
    struct um_cluster *cluster;      /* the ring (umbra/cluster.h), or NULL */
    struct um_cache_links links;     /* the server's disk tier, L2 and purge announcer */
    atomic_int _refcnt;
};

/* Builds the runtime of config (taking a reference of its own to it) for workers workers:
 * first every module's state (its make, given was's when was is not NULL: the runtime
 * that runs now, which a reload replaces), then the origins. The routes that cache share the
 * server's cache *cache, created when first needed (stored with release order: other threads load
 * it with acquire) with the server's links (umbra/cache.h; NULL: none), whose disk tier they read
 * and write. Main thread, before the runtime is handed to any other thread. Returns one reference,
 * or NULL with "FILE:LINE: message" in err. */
struct um_runtime *um_runtime_create(struct um_config *config, const struct um_runtime *was,
                                     int workers, _Atomic(struct um_cache *) *cache,
                                     const struct um_cache_links *links, char *err, size_t errlen);

/* Takes a reference. Thread-safe. */
void um_runtime_ref(struct um_runtime *rt);
/* Drops a reference (rt may be NULL); the last one destroys the origins and the request
 * states, and drops the snapshot. Thread-safe, but the last reference is meant to be the
 * server's, on the main thread (see the top). */
void um_runtime_unref(struct um_runtime *rt);

/* True when the caller's reference is the only one left, to the runtime and to its
 * snapshot: nobody (worker, connection, cache fill) uses either any more. */
static inline bool um_runtime_unused(const struct um_runtime *rt)
{
    return atomic_load_explicit(&rt->_refcnt, memory_order_acquire) == 1 &&
           um_config_refs(rt->config) == 1;
}

/* Module m's state in rt (its make's), or NULL. Any thread that holds a reference. */
static inline void *um_runtime_state(const struct um_runtime *rt, const struct um_module *m)
{
    return rt->states[um_module_index(m)];
}

/* What rt has for route, a route of rt->config. */
static inline const struct um_runtime_route *um_runtime_route(const struct um_runtime *rt,
                                                              const struct um_route *route)
{
    return &rt->routes[route - rt->config->routes];
}

#endif
