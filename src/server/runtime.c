/* SPDX-License-Identifier: BSD-2-Clause */
/* Building and destroying what runs a snapshot (umbra/runtime.h). */
#include <stdio.h>
#include <stdlib.h>

#include "umbra/cache.h"
#include "umbra/cacheorigin.h"
#include "umbra/cgi.h"
#include "umbra/compress.h"
#include "umbra/grpcweb.h"
#include "umbra/module.h"
#include "umbra/cluster.h"
#include "umbra/hooks.h"
#include "umbra/metrics.h"
#include "umbra/origin.h"
#include "umbra/runtime.h"
#include "umbra/disktier.h"
#include "umbra/static.h"
#include "umbra/upstream.h"
#include "internal.h"

static struct um_cache *create_cache(const struct um_config *config)
{
    const struct um_cache_conf *cc = um_cache_conf(config);
    struct um_cache_opts o = {
        .memory_cap = (size_t)cc->memory,
        .max_object = (size_t)cc->max_object,
        .clean_interval = cc->clean_interval < 1 ? 1 : (unsigned)cc->clean_interval,
    };
    struct um_cache *c = um_cache_create(&o);
    um_cache_start_cleaner(c);
    return c;
}

/* The cache layer of route r in front of inner; on a ring node, its fills go to the
 * key's owner and its purges to every node. */
static struct um_origin *cache_origin(struct um_runtime *rt, struct um_cache *cache,
                                      struct um_origin *inner, const struct um_route *r)
{
    struct um_origin *o = um_cache_origin_create(cache, inner, r, rt->config);
    if (rt->cluster) {
        struct um_cache_ring ring = {.fill = um_cluster_fill_origin_create(rt->cluster, inner)};
        um_cache_origin_set_ring(o, &ring);
    }
    return o;
}

/* The layers over a route's origin o: its hooks, then compression (above the hooks, so
 * that on_response sees what the origin sent; below the cache, which stores the
 * compressed variants), then the cache for an upstream or CGI route that caches. */
static struct um_origin *layered(struct um_runtime *rt, _Atomic(struct um_cache *) *cache,
                                 struct um_origin *o, const struct um_route *r, bool hooks,
                                 bool cacheable)
{
    /* Large objects in slices (src/cache/slice.c): the Range of a slice is added just
     * above the origin, below the hooks (which see the slice as the 200 the cache
     * stores); the slices are put together above the cache. */
    uint64_t slice = um_cache_conf(rt->config)->disk_slice;
    bool sliced = cacheable && r->cache && rt->links.disk && slice > 0;
    if (sliced && o)
        o = um_slice_range_origin_create(o);
    if (hooks)
        o = um_hooks_origin_create(o, um_runtime_state(rt, &um_lua_module), r);
    if (um_compress_route_conf(r)->enabled && o) o = um_compress_origin_create(o, r);
    if (cacheable && r->cache) {
        if (*cache == NULL) {
            struct um_cache *c = create_cache(rt->config);
            um_cache_set_links(c, &rt->links);
            um_module_run(&um_cache_module, c);
            atomic_store_explicit(cache, c, memory_order_release);
        }
        /* The disk tier beneath the memory cache, above compression (it keeps the
         * identity bytes the codings are made from). */
        if (rt->links.disk && o)
            o = um_disk_origin_create(rt->links.disk, o, r, rt->config);
        o = cache_origin(rt, *cache, o, r);
        um_cache_set_slice(*cache, sliced ? slice : 0);
        if (sliced && o)
            o = um_slice_origin_create(o, *cache, slice);
    }
    /* gRPC-Web outermost: every layer below sees the gRPC call it becomes. */
    if (um_grpcweb_enabled(r) && o) o = um_grpcweb_origin_create(o);
    return o;
}

/* The origins of the routes, each given its metrics slot. Returns false with "FILE:LINE:
 * message" when one cannot be made. */
static bool build_routes(struct um_runtime *rt, _Atomic(struct um_cache *) *cache, char *err,
                         size_t errlen)
{
    struct um_config *config = rt->config;
    bool hooks = um_hooks_enabled(config);
    for (size_t i = 0; i < config->num_routes; i++) {
        const struct um_route *r = &config->routes[i];
        struct um_runtime_route *rr = &rt->routes[i];
        char msg[512];
        snprintf(msg, sizeof(msg), "%s%s", r->host ? r->host : "", r->path);
        rr->metrics_slot = um_metrics_route_slot(msg);
        struct um_origin *o = NULL;
        bool cacheable = r->upstream >= 0 || r->cgi;
        if (r->upstream >= 0)
            o = um_upstream_origin_ref(rt->upstreams[r->upstream]);
        else if (r->cgi)
            o = um_cgi_origin_create(r, config, msg, sizeof(msg));
        else if (r->root)
            o = um_static_origin_create(r, config, msg, sizeof(msg));
        if (o == NULL && (r->cgi || (r->upstream < 0 && r->root))) {
            snprintf(err, errlen, "%s:%d: %s", config->file, r->line, msg);
            return false;
        }
        /* A route without root or upstream is answered by its hooks (or the upstream
         * they pick). */
        rr->origin = layered(rt, cache, o, r, hooks, cacheable);
    }
    return true;
}

/* Every module's state for rt->config (umbra/module.h, make). */
static bool make_states(struct um_runtime *rt, const struct um_runtime *was, int workers, char *err,
                        size_t errlen)
{
    for (size_t m = 0; um_modules[m]; m++) {
        const struct um_module *mod = um_modules[m];
        if (!mod->make) continue;
        err[0] = '\0';
        rt->states[m] = mod->make(rt->config, was ? was->config : NULL, was ? was->states[m] : NULL,
                                  workers, err, errlen);
        if (rt->states[m] == NULL && err[0] != '\0') return false;
    }
    return true;
}

struct um_runtime *um_runtime_create(struct um_config *config, const struct um_runtime *was,
                                     int workers, _Atomic(struct um_cache *) *cache,
                                     const struct um_cache_links *links, char *err, size_t errlen)
{
    struct um_runtime *rt = um_calloc(1, sizeof(*rt));
    if (links)
        rt->links = *links;
    rt->_refcnt = 1;
    um_config_ref(config);
    rt->config = config;
    rt->routes = um_calloc(config->num_routes + 1, sizeof(*rt->routes));
    /* One origin per upstream, shared by the routes that name it (and its health with
     * them); the routes hold references of their own. */
    rt->upstreams = um_calloc(config->num_upstreams + 1, sizeof(*rt->upstreams));
    rt->cluster = um_cluster_create(config);
    for (size_t i = 0; i < config->num_upstreams; i++)
        rt->upstreams[i] = um_upstream_origin_create(&config->upstreams[i]);
    if (!make_states(rt, was, workers, err, errlen) || !build_routes(rt, cache, err, errlen)) {
        um_runtime_unref(rt);
        return NULL;
    }
    return rt;
}

static void runtime_free(struct um_runtime *rt)
{
    for (size_t i = 0; i < rt->config->num_routes; i++)
        if (rt->routes[i].origin != NULL)
            rt->routes[i].origin->ops->destroy(rt->routes[i].origin);
    free(rt->routes);
    /* After the origins that use them (the hooks' layers), last made first dropped. */
    for (size_t m = UM_MODULES_MAX; m-- > 0;)
        if (rt->states[m] != NULL) um_modules[m]->drop(rt->states[m]);
    for (size_t i = 0; i < rt->config->num_upstreams; i++)
        if (rt->upstreams[i] != NULL)
            rt->upstreams[i]->ops->destroy(rt->upstreams[i]);
    free(rt->upstreams);
    um_cluster_destroy(rt->cluster); /* after the origins that use it */
    um_config_unref(rt->config);
    free(rt);
}

void um_runtime_ref(struct um_runtime *rt)
{
    int n = atomic_fetch_add_explicit(&rt->_refcnt, 1, memory_order_relaxed) + 1;
    UM_ASSERT(n > 1);
}

void um_runtime_unref(struct um_runtime *rt)
{
    if (rt == NULL)
        return;
    int n = atomic_fetch_sub_explicit(&rt->_refcnt, 1, memory_order_acq_rel) - 1;
    UM_ASSERT(n >= 0);
    if (n == 0)
        runtime_free(rt);
}
