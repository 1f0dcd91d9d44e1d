/* SPDX-License-Identifier: BSD-2-Clause */
/* The fill origin of a cluster node (umbra/cluster.h): where a caching route's fills go.
 *
 * A fill's key (um_fetch.fill_key) is looked up in the ring among the nodes not taken out;
 * when another node owns it, the fill's request goes to that node with the key and a
 * signature (Umbra-Peer), on the peer's one-server upstream (Umbra's kept-alive HTTP/1.1
 * client). Otherwise, and for a request that came from a peer, it goes to inner.
 *
 * Each fetch has a small state between the fill's sink and the origin that answers, so
 * that a peer that fails before its answer is swallowed and replaced by inner without the
 * fill noticing. How a peer's failure is told from an answer: a node answers a fill from
 * its cache layer, which always adds a Cache-Status naming "umbra"; an answer without one
 * is the upstream client's own (connection refused, reset, timeout: 502/504) or something
 * that is not a healthy Umbra. The peer is then skipped for a while, and this fill goes to
 * the origin (inner) on a posted task (never from inside the peer's callback). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "umbra/context.h"
#include "umbra/log.h"
#include "umbra/loop.h"

struct ring_origin {
    struct um_origin base;
    struct um_cluster *c;
    struct um_origin *inner;
};

struct rfetch {
    struct um_sink sink; /* what the answering origin writes to */
    struct um_sink *up;  /* the fill's */
    struct ring_origin *ro;
    struct um_origin *cur; /* the origin answering now */
    struct um__peer *peer; /* when cur is a peer's */
    struct um_context *ctx;
    bool head_seen;
    bool swallow; /* the peer failed: its answer is dropped, inner is asked next */
    bool posted;  /* task (the fetch from inner) is queued */
    struct um_task task;
    struct um_fetch f; /* the fill's fetch, its strings copied (for inner, later) */
    char *strings;     /* the copies */
    /* Last, and not zeroed: the fill's request with the Umbra-Peer field, for the peer
     * (its field array alone is kilobytes; only the fields in use are written). */
    struct um_request req;
};

/* ---------------------------------------------------------------- sink */

static void rf_free(struct rfetch *rf)
{
    free(rf->strings);
    free(rf);
}

/* Whether a Cache-Status field of h names "umbra": the answer of a node's cache layer. */
static bool from_umbra(const struct um_response_head *h)
{
    for (size_t i = 0; i < h->num_headers; i++) {
        if (!um_str_eq_ci(h->headers[i].name, "cache-status")) continue;
        um_str v = h->headers[i].value;
        for (size_t j = 0; j + 5 <= v.len; j++)
            if (memcmp(v.base + j, "umbra", 5) == 0 &&
                (j == 0 || v.base[j - 1] == ' ' || v.base[j - 1] == ',') &&
                (j + 5 == v.len || v.base[j + 5] == ';' || v.base[j + 5] == ',' ||
                 v.base[j + 5] == ' '))
                return true;
    }
    return false;
}

static void rf_on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct rfetch *rf = (struct rfetch *)s;
    rf->head_seen = true;
    if (rf->peer && !from_umbra(h)) {
        rf->swallow = true;
        atomic_fetch_add_explicit(&rf->peer->st->fetch_failed, 1, memory_order_relaxed);
        um__cluster_peer_failed(rf->peer, h->status >= 500 ? "no answer" : "not an Umbra answer");
        return;
    }
    if (rf->peer) atomic_fetch_add_explicit(&rf->peer->st->fetch_ok, 1, memory_order_relaxed);
    if (rf->peer &&
        um__cluster_tags_recently_purged(h->headers, h->num_headers, um__cluster_now_ms())) {
        /* A copy with a tag just purged here: the owner may not have the purge yet. It
         * is dropped, and the origin asked (the owner is fine: not a failure). */
        rf->swallow = true;
        return;
    }
    rf->up->ops->on_head(rf->up, h);
}

static size_t rf_on_data(struct um_sink *s, const char *data, size_t len)
{
    struct rfetch *rf = (struct rfetch *)s;
    if (rf->swallow) return len;
    return rf->up->ops->on_data(rf->up, data, len);
}

static void rf_on_file(struct um_sink *s, int fd, uint64_t off, uint64_t len)
{
    struct rfetch *rf = (struct rfetch *)s;
    if (rf->swallow) {
        close(fd);
        return;
    }
    rf->up->ops->on_file(rf->up, fd, off, len);
}

static void on_fallback(struct um_task *t);

static void rf_on_end(struct um_sink *s, int err)
{
    struct rfetch *rf = (struct rfetch *)s;
    if (rf->peer && (rf->swallow || !rf->head_seen)) {
        if (!rf->head_seen) {
            atomic_fetch_add_explicit(&rf->peer->st->fetch_failed, 1, memory_order_relaxed);
            um__cluster_peer_failed(rf->peer, "no answer");
        }
        /* Ask the origin instead, outside the peer's callback. */
        rf->posted = true;
        rf->task.cb = on_fallback;
        um_loop_post(rf->ctx->loop, &rf->task);
        return;
    }
    struct um_sink *up = rf->up;
    up->origin_data = NULL;
    rf_free(rf);
    up->ops->on_end(up, err);
}

static ssize_t rf_read_body(struct um_sink *s, char *buf, size_t len)
{
    (void)s;
    (void)buf;
    (void)len;
    return 0; /* fills are GETs without a body */
}

static void rf_on_info(struct um_sink *s, int status, const struct um_header *h, size_t n)
{
    struct rfetch *rf = (struct rfetch *)s;
    if (!rf->swallow) um_sink_info(rf->up, status, h, n);
}

static const struct um_sink_ops rf_ops = {.on_head = rf_on_head,
                                          .on_data = rf_on_data,
                                          .on_file = rf_on_file,
                                          .on_end = rf_on_end,
                                          .read_body = rf_read_body,
                                          .on_info = rf_on_info};

static void on_fallback(struct um_task *t)
{
    struct rfetch *rf = um_container_of(t, struct rfetch, task);
    rf->posted = false;
    rf->peer = NULL;
    rf->swallow = false;
    rf->head_seen = false;
    rf->cur = rf->ro->inner;
    rf->cur->ops->fetch(rf->cur, &rf->f, &rf->sink);
}

/* ---------------------------------------------------------------- origin */

struct usable_arg {
    const struct um_cluster *c;
    uint64_t now; /* read once per lookup */
};

static bool usable(void *arg, size_t i)
{
    const struct usable_arg *u = arg;
    return i == u->c->self || um__cluster_peer_usable(&u->c->peers[i], u->now);
}

/* Copies the strings of f that may not outlive the fetch call into one block. */
static void copy_fetch(struct rfetch *rf, const struct um_fetch *f)
{
    size_t n = f->path.len + strlen(f->client_ip) + 1 + f->cache_key.len +
               (f->server_name ? strlen(f->server_name) + 1 : 0) +
               (f->upstream_url ? strlen(f->upstream_url) + 1 : 0) +
               (f->has_body ? f->body.len : 0) + 1;
    char *p = rf->strings = um_malloc(n);
    rf->f = *f;
#define COPY_SLICE(s)                                                                              \
    do {                                                                                           \
        if ((s).len) memcpy(p, (s).base, (s).len);                                                 \
        if ((s).base) (s).base = p;                                                                \
        p += (s).len;                                                                              \
    } while (0)
#define COPY_CSTR(s)                                                                               \
    do {                                                                                           \
        if (s) {                                                                                   \
            size_t l_ = strlen(s) + 1;                                                             \
            memcpy(p, s, l_);                                                                      \
            (s) = p;                                                                               \
            p += l_;                                                                               \
        }                                                                                          \
    } while (0)
    COPY_SLICE(rf->f.path);
    COPY_SLICE(rf->f.cache_key);
    if (rf->f.has_body) COPY_SLICE(rf->f.body);
    COPY_CSTR(rf->f.client_ip);
    COPY_CSTR(rf->f.server_name);
    COPY_CSTR(rf->f.upstream_url);
#undef COPY_SLICE
#undef COPY_CSTR
}

static void ring_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *sink)
{
    struct ring_origin *ro = (struct ring_origin *)o;
    struct um_cluster *c = ro->c;
    struct rfetch *rf = um_malloc(sizeof(*rf));
    memset(rf, 0, offsetof(struct rfetch, req));
    rf->sink.ops = &rf_ops;
    rf->up = sink;
    rf->ro = ro;
    rf->ctx = f->ctx;
    sink->origin_data = rf;
    copy_fetch(rf, f);
    rf->cur = ro->inner;
    int owner = -1;
    if (!f->from_peer && f->fill_key.base != NULL && f->fill_key.len <= 4096 &&
        f->req->num_headers < UM_HTTP1_MAX_HEADERS) {
        struct usable_arg ua = {c, um__cluster_now_ms()};
        /* Just purged here: the owner may not have the purge yet (the origin answers). */
        if (!um__cluster_recently_purged(f->fill_key, ua.now))
            owner = um_cluster_owner(c->ids, c->n, f->fill_key, usable, &ua);
    }
    if (owner >= 0 && (size_t)owner != c->self) {
        /* The owner's: the fill's request, with the signed key, to that node. */
        struct um__peer *p = &c->peers[owner];
        size_t sl = um_cluster_sign_len(f->fill_key.len);
        char *hv = um_malloc(sl);
        /* Signed for the target the upstream client sends: path[?query]. */
        const struct um_request *q = f->req;
        char target[8192];
        size_t tl = q->path.len + ((q->flags & UM_REQ_F_HAS_QUERY) ? q->query.len + 1 : 0);
        size_t hl = 0;
        if (tl <= sizeof target) {
            memcpy(target, q->path.base, q->path.len);
            if (q->flags & UM_REQ_F_HAS_QUERY) {
                target[q->path.len] = '?';
                memcpy(target + q->path.len + 1, q->query.base, q->query.len);
            }
            hl = um_cluster_sign(um_cluster_secret(c), q->method, (um_str){target, tl}, f->fill_key,
                                 (int64_t)time(NULL), hv, sl);
        }
        if (hl > 0) {
            um_http1_request_copy(&rf->req, f->req);
            size_t w = 0;
            for (size_t i = 0; i < rf->req.num_headers; i++)
                if (!um_str_eq_ci(rf->req.headers[i].name, UM_CLUSTER_HEADER))
                    rf->req.headers[w++] = rf->req.headers[i];
            rf->req.num_headers = w;
            rf->req.headers[rf->req.num_headers++] =
                (struct um_header){UM_STR(UM_CLUSTER_HEADER), {hv, hl}};
            struct um_fetch pf = rf->f;
            pf.req = &rf->req;
            pf.backend = NULL;
            pf.upstream_url = NULL;
            pf.has_body = false;
            rf->peer = p;
            rf->cur = p->origin;
            /* The upstream client writes the fields out during the call: hv may go
             * after it (rf may be gone too, when the answer came at once). */
            rf->cur->ops->fetch(rf->cur, &pf, &rf->sink);
            free(hv);
            return;
        }
        free(hv);
    }
    rf->cur->ops->fetch(rf->cur, &rf->f, &rf->sink);
}

static void ring_resume(struct um_origin *o, struct um_sink *sink)
{
    (void)o;
    struct rfetch *rf = sink->origin_data;
    if (rf == NULL || rf->posted || rf->swallow) return;
    rf->cur->ops->resume(rf->cur, &rf->sink);
}

static void ring_body_ready(struct um_origin *o, struct um_sink *sink)
{
    (void)o;
    (void)sink;
}

static void ring_cancel(struct um_origin *o, struct um_sink *sink)
{
    (void)o;
    struct rfetch *rf = sink->origin_data;
    if (rf == NULL) return;
    sink->origin_data = NULL;
    if (rf->posted)
        um_loop_unpost(rf->ctx->loop, &rf->task);
    else
        rf->cur->ops->cancel(rf->cur, &rf->sink);
    rf_free(rf);
}

static void ring_destroy(struct um_origin *o)
{
    free(o);
}

static const struct um_origin_ops ring_ops = {.flags = 0,
                                              .fetch = ring_fetch,
                                              .resume = ring_resume,
                                              .body_ready = ring_body_ready,
                                              .cancel = ring_cancel,
                                              .destroy = ring_destroy};

struct um_origin *um_cluster_fill_origin_create(struct um_cluster *c, struct um_origin *inner)
{
    struct ring_origin *ro = um_calloc(1, sizeof(*ro));
    ro->base.ops = &ring_ops;
    ro->c = c;
    ro->inner = inner;
    return &ro->base;
}
