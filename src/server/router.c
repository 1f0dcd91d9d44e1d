/* SPDX-License-Identifier: BSD-2-Clause */
/* The router (exchange.h's um__route): picks the route of a parsed request, runs its
 * on_request hooks, and finds the origin that answers it, or answers itself (a bad path,
 * no route, a redirect to https, a hook's own answer). It sees the exchange only. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exchange.h"
#include "internal.h"
#include "umbra/access.h"
#include "umbra/cluster.h"
#include "umbra/hooks.h"
#include "umbra/limits.h"
#include "umbra/log.h"
#include "umbra/runtime.h"
#include "umbra/tls.h"

/* The origin that answers route r: the only place that knows where it is kept. */
static struct um_origin *route_origin(const struct um__exchange *x, const struct um_route *r)
{
    return um_runtime_route(x->runtime, r)->origin;
}

/* The origin of upstream number i, which an on_request hook chose (req.upstream). */
static struct um_origin *upstream_origin(const struct um__exchange *x, int i)
{
    return x->runtime->upstreams[i];
}

static bool host_matches(const char *want, um_str authority)
{
    return um_str_eq_ci(um_url_host(authority), want);
}

/* True when route r's path prefix matches path; *rest is then the part below it. */
static bool route_prefix(const struct um_route *r, um_str path, um_str *rest)
{
    size_t plen = strlen(r->path);
    if (path.len >= plen && memcmp(path.base, r->path, plen) == 0) {
        *rest = (um_str){path.base + plen, path.len - plen};
        return true;
    }
    /* "/dir" reaches the route "/dir/", whose origin redirects it. */
    if (plen > 1 && r->path[plen - 1] == '/' && path.len == plen - 1 &&
        memcmp(path.base, r->path, plen - 1) == 0) {
        *rest = (um_str){path.base + path.len, 0};
        return true;
    }
    return false;
}

/* First route whose host and path prefix match; *rest is the path below the prefix. */
static const struct um_route *find_route(const struct um_config *cfg, um_str authority,
                                         um_str path, um_str *rest)
{
    for (size_t i = 0; i < cfg->num_routes; i++) {
        const struct um_route *r = &cfg->routes[i];
        if ((r->host == NULL || host_matches(r->host, authority)) && route_prefix(r, path, rest))
            return r;
    }
    return NULL;
}

/* The canonical form of path, in the worker's path buffer: routes match it, so that
 * "/stat%69c/" is "/static/" and no spelling of a path reaches another route than the
 * plain one would. */
static bool canon_path(struct um__exchange *x, um_str path, um_str *out)
{
    size_t clen;
    if (path.len >= sizeof(x->w->path_buf) ||
        !um_url_path_canon(path, x->w->path_buf, sizeof(x->w->path_buf), &clen))
        return false;
    *out = (um_str){x->w->path_buf, clen};
    return true;
}

static bool secure(const struct um__exchange *x)
{
    return x->transport->ops->secure;
}

/* 308 to the same target over https (RFC 9110 15.4.9 keeps the method and body). */
static void redirect_https(struct um__exchange *x)
{
    const struct um_request *req = &x->req;
    /* The host without the plain listener's port, as nginx's "https://$host$request_uri":
     * HTTPS is on its own (default) port. */
    um_str host = um_url_host(req->authority);
    size_t n = 8 + host.len + req->target.len;
    char *loc = um_malloc(n + 1);
    memcpy(loc, "https://", 8);
    memcpy(loc + 8, host.base, host.len);
    if (req->flags & UM_REQ_F_ABSOLUTE_FORM) {
        /* The path and query of an absolute-form target. */
        size_t tail = req->path.len + ((req->flags & UM_REQ_F_HAS_QUERY) ? req->query.len + 1 : 0);
        memcpy(loc + 8 + host.len, req->path.base, tail);
        n = 8 + host.len + tail;
    } else {
        memcpy(loc + 8 + host.len, req->target.base, req->target.len);
    }
    struct um_header h = {UM_STR("Location"), {loc, n}};
    um__exchange_respond(x, 308, &h, 1);
    free(loc);
}

/* Answers with what an on_request hook gave umbra.respond / umbra.redirect. */
static void respond_hook(struct um__exchange *x, const struct um_hook_request *hr)
{
    struct um_header headers[66];
    size_t n = 0;
    bool has_type = false;
    for (size_t i = 0; i < hr->num_headers && n < UM_NELEMS(headers) - 1; i++) {
        has_type = has_type || um_str_eq_ci(hr->headers[i].name, "content-type");
        headers[n++] = hr->headers[i];
    }
    if (!has_type && hr->resp_body.len > 0)
        headers[n++] = (struct um_header){UM_STR("Content-Type"), UM_STR("text/plain; charset=utf-8")};
    struct um_response_head h = {.status = hr->status, .headers = headers, .num_headers = n, .content_length = (int64_t)hr->resp_body.len, .reason = {NULL, 0}};
    x->origin = NULL;
    struct um_sink *s = &x->sink;
    s->ops->on_head(s, &h);
    if (hr->resp_body.len > 0)
        s->ops->on_data(s, hr->resp_body.base, hr->resp_body.len);
    s->ops->on_end(s, UM_OK);
}

/* The canonical form of path into the worker's path buffer, and the part of it below the
 * route's prefix (all of it when a hook's path is outside the prefix). */
static bool route_rest(struct um__exchange *x, const struct um_route *route, um_str path,
                       um_str *rest)
{
    um_str cpath;
    if (!canon_path(x, path, &cpath))
        return false;
    if (route == NULL || !route_prefix(route, cpath, rest))
        *rest = cpath;
    return true;
}

/* Runs the request hooks that apply. Returns the origin to use, or NULL after answering. */
static struct um_origin *hook_request(struct um__exchange *x, const struct um_route **route,
                                      um_str *rest, struct um_hook_request *hr)
{
    struct um_transport *t = x->transport;
    *hr = (struct um_hook_request){.req = &x->req, .route = *route, .client_ip = x->peer_ip,
                                   .client_port = x->peer_port,
                                   .scheme = secure(x) ? "https" : "http",
                                   .server_name = t->ops->server_name(t),
                                   .arena = &x->arena, .upstream = -1};
    enum um_hook_result res =
        um_hooks_on_request(&x->w->ctx, um_runtime_state(x->runtime, &um_lua_module), hr);
    /* Early Hints the hook asked for go out first, before any answer. */
    if (res != UM_HOOK_FAIL && hr->num_hints > 0 && x->conn_ops->send_info)
        x->conn_ops->send_info(x, 103, hr->hints, hr->num_hints);
    switch (res) {
    case UM_HOOK_FAIL:
        um__exchange_respond(x, 500, NULL, 0);
        return NULL;
    case UM_HOOK_ANSWER:
        respond_hook(x, hr);
        return NULL;
    case UM_HOOK_CONTINUE:
        break;
    }
    if ((hr->path_changed || hr->route != *route) && !route_rest(x, hr->route, x->req.path, rest)) {
        um_log_warn("lua: on_request made a path that cannot be normalised: %.*s",
                    (int)x->req.path.len, x->req.path.base);
        um__exchange_respond(x, 500, NULL, 0);
        return NULL;
    }
    *route = hr->route;
    if (*route == NULL) {
        if (hr->upstream >= 0)
            return upstream_origin(x, hr->upstream);
        um__exchange_respond(x, 404, NULL, 0);
        return NULL;
    }
    return route_origin(x, *route);
}

/* An upgrade request (UM_REQ_F_UPGRADE) goes to the upstream itself, past the layers in
 * front of it (the cache: a tunnel is never stored; on_response hooks: a 101 has no body
 * for them), or is answered 501 on a route whose origin cannot tunnel (static files, CGI). */
static struct um_origin *upgrade_origin(struct um__exchange *x, const struct um_route *route,
                                        struct um_origin *origin, struct um_fetch *f)
{
    struct um_origin *up = NULL;
    if (f->backend)
        up = f->backend; /* a hook chose an upstream */
    else if (route == NULL)
        up = origin; /* a hook's upstream without a route */
    else if (route->upstream >= 0)
        up = x->runtime->upstreams[route->upstream];
    if (up == NULL || !(up->ops->flags & UM_ORIGIN_F_UPGRADE)) {
        um__exchange_respond(x, 501, NULL, 0);
        return NULL;
    }
    f->backend = NULL;
    f->no_cache = true;
    x->via_upstream = true;
    return up;
}

/* ---------------------------------------------------------------- access rules */

/* A password being verified off the loop (umbra/access.h). While the verifier hashes it,
 * the exchange's origin is wait_origin, whose fetch hands the job over; the answer comes
 * back on the worker's loop (on_verified), which routes the request again, the check
 * passed, or answers 401. Ownership: made by the router and kept in x->access_wait until
 * wait_fetch submits it; from then on the verifier's, then on_verified's, which frees it.
 * A client that leaves meanwhile only clears x (wait_cancel). */
struct um__access_wait {
    struct um_access_job job;
    struct um__exchange *x;
    const char *challenge; /* the snapshot's, which the exchange holds */
};

static void answer_401(struct um__exchange *x, const char *challenge)
{
    struct um_header h = {UM_STR("WWW-Authenticate"), {challenge, strlen(challenge)}};
    um__exchange_respond(x, 401, &h, 1);
}

static void on_verified(struct um_task *t)
{
    struct um__access_wait *w = um_container_of(t, struct um__access_wait, job.task);
    struct um__exchange *x = w->x;
    bool ok = w->job.ok;
    const char *challenge = w->challenge;
    free(w);
    if (x == NULL)
        return; /* the client left */
    x->sink.origin_data = NULL;
    x->origin = NULL;
    if (!ok) {
        answer_401(x, challenge);
        return;
    }
    x->access_verified = true;
    struct um_fetch f;
    struct um_origin *origin = um__route(x, &f);
    if (origin != NULL)
        um__exchange_dispatch(x, origin, &f);
}

static void wait_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *sink)
{
    struct um__exchange *x = um_container_of(sink, struct um__exchange, sink);
    struct um__access_wait *w = x->access_wait;
    UM_ASSERT(w != NULL);
    x->access_wait = NULL;
    sink->origin_data = w;
    if (!um_access_verify(&x->w->ctx, &w->job)) {
        /* Said once per process: a flood would fill the log too. */
        static atomic_bool said;
        if (!atomic_exchange(&said, true))
            um_log_warn("access: %d password checks wait already; more requests get 503 "
                        "until they are done (said once)",
                        UM_ACCESS_QUEUE_MAX);
        sink->origin_data = NULL;
        explicit_bzero(w->job.pass, sizeof w->job.pass);
        free(w);
        struct um_header h = {UM_STR("Retry-After"), UM_STR("1")};
        x->origin = NULL;
        um__exchange_respond(x, 503, &h, 1);
    }
}

static void wait_cancel(struct um_origin *o, struct um_sink *sink)
{
    struct um__access_wait *w = sink->origin_data;
    if (w)
        w->x = NULL;
    sink->origin_data = NULL;
}

static void wait_nothing(struct um_origin *o, struct um_sink *sink) {}
static void wait_destroy(struct um_origin *o) {}

/* No UM_ORIGIN_F_STREAM_BODY: a request body is read before the wait begins, so that the
 * origin chosen after it finds it whole, whatever kind it is. */
static const struct um_origin_ops wait_ops = {
    .fetch = wait_fetch,
    .resume = wait_nothing,
    .body_ready = wait_nothing,
    .cancel = wait_cancel,
    .destroy = wait_destroy,
};
static struct um_origin wait_origin = {&wait_ops};

void um__access_wait_drop(struct um__exchange *x)
{
    if (x->access_wait) {
        explicit_bzero(x->access_wait->job.pass, sizeof x->access_wait->job.pass);
        free(x->access_wait);
        x->access_wait = NULL;
    }
}

/* The route's allow and deny lists and basic auth (route may be NULL: nothing but the
 * global header rules). Returns false after answering; or true with *wait set when a
 * password must be verified first (the origin is then wait_origin). */
static bool access_check(struct um__exchange *x, const struct um_route *route, bool *wait)
{
    const struct um_access_conf *a = um_access_conf(x->config, route);
    *wait = false;
    if (a == NULL)
        return true; /* a snapshot made by hand without the module's part (tests) */
    /* Our own answers (403, 401) get the response rules too. */
    if (um_access_has_response_rules(a))
        x->access_resp = a;
    if (!x->access_verified) {
        struct um_access_job job;
        memset(&job, 0, offsetof(struct um_access_job, user));
        job.user[0] = job.pass[0] = job.hash[0] = '\0';
        switch (um_access_check(a, &x->req, x->peer_ip, &job)) {
        case UM_ACCESS_OK:
            break;
        case UM_ACCESS_FORBIDDEN:
            um__exchange_respond(x, 403, NULL, 0);
            return false;
        case UM_ACCESS_UNAUTHORIZED:
            answer_401(x, a->auth->challenge);
            return false;
        case UM_ACCESS_VERIFY: {
            struct um__access_wait *w = um_malloc(sizeof(*w));
            memcpy(&w->job, &job, sizeof job);
            explicit_bzero(job.pass, sizeof job.pass);
            w->job.task = (struct um_task){._next = NULL, ._queued = 0, .cb = on_verified};
            w->job.loop = x->w->loop;
            w->x = x;
            w->challenge = a->auth->challenge;
            um__access_wait_drop(x);
            x->access_wait = w;
            *wait = true;
            return true;
        }
        }
    }
    um_access_request(a, &x->req);
    return true;
}

/* ---------------------------------------------------------------- rate limits */

/* The route's rate_limit (umbra/limits.h): false after answering 429 with Retry-After,
 * before any hook or origin sees the request. A request without the field its limit is
 * keyed by is not counted. */
static bool rate_check(struct um__exchange *x, const struct um_route *route)
{
    const struct um_limits_conf *lc = route ? um_limits_conf(x->config, route) : NULL;
    if (lc == NULL || lc->route == NULL)
        return true;
    um_str key;
    if (!um_limit_key_of(lc->route, &x->req, x->peer_ip, &key))
        return true;
    /* The loop's time of this turn (CLOCK_MONOTONIC, as um_limits_now): no clock read per
     * request; a bucket ignores a time behind the one it holds (another worker's turn). */
    double wait = um_limit_take(lc->route, key, (double)um_loop_now(x->w->loop) / 1000.0);
    if (wait <= 0)
        return true;
    char v[24];
    int n = snprintf(v, sizeof v, "%ld", um_limit_retry_after(wait));
    struct um_header h = {UM_STR("Retry-After"), {v, (size_t)n}};
    um__exchange_respond(x, 429, &h, 1);
    return false;
}

/* ---------------------------------------------------------------- cluster peers */

#define PEER_KEY_MAX 4096

/* The Umbra-Peer field (umbra/cluster.h): every copy is taken off the request, whoever
 * sent it, so that it never reaches an origin. Signed by this cluster's secret, recently,
 * for this very request: the request is a peer's, served here and never sent to another
 * node (returns 1, *key the cache key it carries, in the arena), or a peer's PURGE, applied
 * and answered (returns -1). Anything else (no cluster, forged, stale, for another
 * request) is an ordinary client's request (returns 2; 0 when there was no such field). */
static int peer_request(struct um__exchange *x, um_str *key)
{
    struct um_request *req = &x->req;
    um_str v = {NULL, 0};
    size_t w = 0;
    for (size_t i = 0; i < req->num_headers; i++) {
        if (um_str_eq_ci(req->headers[i].name, UM_CLUSTER_HEADER)) {
            if (v.base == NULL)
                v = req->headers[i].value;
            continue;
        }
        req->headers[w++] = req->headers[i];
    }
    if (v.base == NULL)
        return 0;
    req->num_headers = w;
    struct um_cluster *c = x->runtime->cluster;
    char target[8192], kb[PEER_KEY_MAX];
    size_t tl = req->path.len + ((req->flags & UM_REQ_F_HAS_QUERY) ? req->query.len + 1 : 0);
    size_t kl = 0;
    bool ok = c != NULL && tl <= sizeof target;
    if (ok) {
        memcpy(target, req->path.base, req->path.len);
        if (req->flags & UM_REQ_F_HAS_QUERY) {
            target[req->path.len] = '?';
            memcpy(target + req->path.len + 1, req->query.base, req->query.len);
        }
        ok = um_cluster_verify(um_cluster_secret(c), req->method, (um_str){target, tl}, v,
                               (int64_t)time(NULL), kb, sizeof kb, &kl);
    }
    if (!ok) {
        um_cluster_count_rejected();
        um_log_debug("cluster: %s sent an Umbra-Peer field that is not a valid signature; "
                     "served as an ordinary client", x->peer_ip);
        return 2;
    }
    um_cluster_count_served();
    if (um_str_eq(req->method, "PURGE")) {
        struct um_cache *cache = atomic_load_explicit(&x->w->server->cache, memory_order_acquire);
        long n = um__purge_apply_peer(cache, kb, kl);
        char count[24];
        int cl = snprintf(count, sizeof count, "%ld", n < 0 ? 0 : n);
        struct um_header h = {UM_STR("Umbra-Purged"), {count, (size_t)cl}};
        um__exchange_respond(x, n < 0 ? 400 : 200, &h, 1);
        return -1;
    }
    key->base = um_arena_strdup(&x->arena, kb, kl);
    key->len = kl;
    return 1;
}

/* An ACME http-01 request (RFC 8555 section 8.3) on a plain listener, answered with the
 * key authorization the TLS module's ACME client published, before any route, hook or
 * access rule: the CA's validator knows nothing of them. True when answered. */
static bool acme_http01(struct um__exchange *x)
{
    static const um_str prefix = UM_STR(UM_TLS_ACME_HTTP01_PREFIX);
    const struct um_request *req = &x->req;
    char body[512];
    size_t n = 0;
    if (secure(x) || req->path.len <= prefix.len ||
        memcmp(req->path.base, prefix.base, prefix.len) != 0 ||
        (req->method_id != UM_METHOD_GET && req->method_id != UM_METHOD_HEAD))
        return false;
    um_str token = {req->path.base + prefix.len, req->path.len - prefix.len};
    if (!um_tls_acme_http01(um_runtime_state(x->runtime, &um_tls_module), token, body,
                            sizeof body, &n))
        return false;
    struct um_header ct = {UM_STR("Content-Type"), UM_STR("application/octet-stream")};
    struct um_response_head h = {.status = 200, .headers = &ct, .num_headers = 1,
                                 .content_length = (int64_t)n, .reason = {NULL, 0}};
    x->sink.ops->on_head(&x->sink, &h);
    x->sink.ops->on_data(&x->sink, body, n);
    x->sink.ops->on_end(&x->sink, UM_OK);
    return true;
}

struct um_origin *um__route(struct um__exchange *x, struct um_fetch *f)
{
    if (x->admin)
        return um__admin_route(x, f); /* never the configuration's routes */
    struct um_request *req = &x->req;
    um_str peer_key = {NULL, 0};
    int peer = peer_request(x, &peer_key);
    if (peer < 0)
        return NULL;
    if (acme_http01(x))
        return NULL;
    if (req->path.len == 0 || req->path.base[0] != '/') {
        /* asterisk-form (OPTIONS *): the server itself */
        if (req->method_id == UM_METHOD_OPTIONS) {
            struct um_header allow = {UM_STR("Allow"), UM_STR("GET, HEAD, OPTIONS")};
            struct um_response_head h = {.status = 200, .headers = &allow, .num_headers = 1, .content_length = 0, .reason = {NULL, 0}};
            x->sink.ops->on_head(&x->sink, &h);
            x->sink.ops->on_end(&x->sink, UM_OK);
        } else {
            um__exchange_respond(x, 400, NULL, 0);
        }
        return NULL;
    }
    um_str cpath, rest;
    if (!canon_path(x, req->path, &cpath)) {
        um__exchange_respond(x, 400, NULL, 0);
        return NULL;
    }
    const struct um_route *route = find_route(x->config, req->authority, cpath, &rest);
    if (route && route->redirect_https && !secure(x)) {
        redirect_https(x);
        return NULL;
    }
    struct um_origin *origin = route ? route_origin(x, route) : NULL;
    if (route) {
        x->route_slot = um_runtime_route(x->runtime, route)->metrics_slot;
        x->via_upstream = route->upstream >= 0;
    }
    /* Before any hook or origin sees the request. A peer's signed fill was checked by
     * the node its client reached (which took Authorization off, and applied the rules). */
    bool wait = false;
    if (peer != 1 && !access_check(x, route, &wait))
        return NULL;
    if (wait) {
        *f = (struct um_fetch){.ctx = &x->w->ctx, .req = req, .route = route, .config = x->config,
                               .path = {"", 0}, .client_ip = x->peer_ip,
                               .client_port = x->peer_port, .scheme = secure(x) ? "https" : "http"};
        return &wait_origin;
    }
    /* A peer's signed fill was counted by the node its client reached. */
    if (peer != 1 && !rate_check(x, route))
        return NULL;
    struct um_hook_request hr;
    bool hooked = um_hooks_want_request(x->config, route);
    if (hooked) {
        origin = hook_request(x, &route, &rest, &hr);
        if (origin == NULL)
            return NULL;
    } else if (origin == NULL) {
        um__exchange_respond(x, 404, NULL, 0);
        return NULL;
    }
    *f = (struct um_fetch){.ctx = &x->w->ctx, .req = req, .route = route, .config = x->config,
                           .path = rest, .client_ip = x->peer_ip, .client_port = x->peer_port,
                           .scheme = secure(x) ? "https" : "http"};
    if (hooked) {
        if (hr.upstream >= 0 && route)
            f->backend = upstream_origin(x, hr.upstream);
        f->cache_key = hr.cache_key;
        f->no_cache = hr.no_cache;
        f->has_ttl = hr.has_ttl;
        f->ttl = hr.ttl;
        f->upstream_url = hr.upstream_url;
        f->has_body = hr.has_body;
        f->body = hr.body;
        f->server_name = hr.server_name;
    }
    if (peer == 1) {
        /* Another node's fill: the key it asks for, answered from here. */
        f->from_peer = true;
        f->cache_key = peer_key;
    }
    f->peer_refused = peer == 2;
    if (route) {
        x->route_slot = um_runtime_route(x->runtime, route)->metrics_slot;
        x->via_upstream = route->upstream >= 0 || f->backend != NULL;
    }
    if (req->flags & UM_REQ_F_UPGRADE)
        return upgrade_origin(x, route, origin, f);
    return origin;
}
