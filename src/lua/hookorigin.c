/* SPDX-License-Identifier: BSD-2-Clause */
/* The hooks' origin: below the cache of a route, it picks the origin a fetch goes to (the
 * route's own, or the upstream an on_request hook chose) and runs on_response on the head
 * that comes back.
 *
 * It stands between its consumer (the connection, or the cache's fill or pass) and the
 * real origin as a sink of its own. When on_response fails, the consumer gets a complete
 * 500 at once; the rest of the origin's answer is dropped, and the origin's fetch is
 * cancelled from a deferred task (never from inside the origin's own callback). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "umbra/config.h"
#include "umbra/context.h"
#include "umbra/hooks.h"
#include "umbra/loop.h"

#include "internal.h"

struct hook_origin {
    struct um_origin base;
    struct um_origin *inner; /* may be NULL */
    struct um_hooks *hooks;
    const struct um_route *route;
    bool want_response;
};

struct hook_fetch {
    struct um_sink sink; /* what the real origin writes to */
    struct um_sink *client;
    struct hook_origin *ho;
    struct um_context *ctx;
    struct um_origin *o; /* the real origin */
    const struct um_request *req;
    char client_ip[46];
    struct um_arena arena;
    bool failed;     /* on_response failed: the client has its 500 */
    bool inner_done; /* the real origin called on_end */
    struct um_task cancel;
};

static struct hook_fetch *hf_of(struct um_sink *s)
{
    return (struct hook_fetch *)(void *)s;
}

static void hf_free(struct hook_fetch *hf)
{
    um_arena_reset(&hf->arena);
    free(hf);
}

static void respond(struct um_sink *client, int status, const char *body)
{
    static const struct um_header ct = {UM_STR("Content-Type"), UM_STR("text/plain; charset=utf-8")};
    struct um_response_head h = {.status = status, .headers = &ct, .num_headers = 1, .no_store = true};
    client->origin_data = NULL;
    um_sink_answer(client, &h, body);
}

static void on_cancel_task(struct um_task *t)
{
    struct hook_fetch *hf = um_container_of(t, struct hook_fetch, cancel);
    if (!hf->inner_done && hf->o->ops->cancel)
        hf->o->ops->cancel(hf->o, &hf->sink);
    hf_free(hf);
}

static void hf_on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct hook_fetch *hf = hf_of(s);
    struct hook_origin *ho = hf->ho;
    if (!ho->want_response) {
        hf->client->ops->on_head(hf->client, h);
        return;
    }
    struct um_hook_response out = {.arena = &hf->arena};
    if (um_hooks_on_response(hf->ctx, ho->hooks, ho->route, hf->req, hf->client_ip, h, &out)) {
        hf->client->ops->on_head(hf->client, &out.head);
        return;
    }
    hf->failed = true;
    struct um_sink *client = hf->client;
    hf->client = NULL;
    respond(client, 500, "500 Internal Server Error\n");
    um_loop_defer(hf->ctx->loop, &hf->cancel);
}

static size_t hf_on_data(struct um_sink *s, const char *data, size_t len)
{
    struct hook_fetch *hf = hf_of(s);
    if (hf->failed)
        return len;
    return hf->client->ops->on_data(hf->client, data, len);
}

static size_t hf_on_data_ref(struct um_sink *s, const char *data, size_t len,
                             void (*release)(void *ctx), void *ctx)
{
    struct hook_fetch *hf = hf_of(s);
    if (hf->failed) {
        release(ctx);
        return len;
    }
    if (hf->client->ops->on_data_ref == NULL)
        return 0;
    return hf->client->ops->on_data_ref(hf->client, data, len, release, ctx);
}

static void hf_on_file(struct um_sink *s, int fd, uint64_t off, uint64_t len)
{
    struct hook_fetch *hf = hf_of(s);
    if (hf->failed) {
        close(fd);
        return;
    }
    hf->client->ops->on_file(hf->client, fd, off, len);
}

/* The inner origin's last call: hf is freed here (umbra/origin.h: a sink may be freed in
 * its on_end), then the client is ended. */
static void hf_on_end(struct um_sink *s, int err)
{
    struct hook_fetch *hf = hf_of(s);
    hf->sink.origin_data = NULL;
    if (hf->failed) {
        hf->inner_done = true; /* the deferred task frees it */
        return;
    }
    struct um_sink *client = hf->client;
    client->origin_data = NULL;
    hf_free(hf);
    client->ops->on_end(client, err);
}

static ssize_t hf_read_body(struct um_sink *s, char *buf, size_t len)
{
    struct hook_fetch *hf = hf_of(s);
    if (hf->failed)
        return 0;
    return hf->client->ops->read_body(hf->client, buf, len);
}

static void hf_on_info(struct um_sink *s, int status, const struct um_header *h, size_t n)
{
    struct hook_fetch *hf = hf_of(s);
    if (!hf->failed && hf->client)
        um_sink_info(hf->client, status, h, n);
}

static void hf_on_flush(struct um_sink *s)
{
    struct hook_fetch *hf = hf_of(s);
    if (!hf->failed && hf->client)
        um_sink_flush(hf->client);
}

static void hf_on_trailers(struct um_sink *s, const struct um_header *h, size_t n)
{
    struct hook_fetch *hf = hf_of(s);
    if (!hf->failed && hf->client) um_sink_trailers(hf->client, h, n);
}

static size_t hf_read_trailers(struct um_sink *s, const struct um_header **h)
{
    struct hook_fetch *hf = hf_of(s);
    *h = NULL;
    return hf->failed || hf->client == NULL ? 0 : um_sink_read_trailers(hf->client, h);
}

static const struct um_sink_ops hf_ops = {
    .on_trailers = hf_on_trailers,
    .read_trailers = hf_read_trailers,
    .on_info = hf_on_info,
    .on_head = hf_on_head,
    .on_data = hf_on_data,
    .on_file = hf_on_file,
    .on_end = hf_on_end,
    .on_data_ref = hf_on_data_ref,
    .read_body = hf_read_body,
    .on_flush = hf_on_flush,
};

static void ho_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *client)
{
    struct hook_origin *ho = (struct hook_origin *)o;
    struct um_origin *real = f->backend ? f->backend : ho->inner;
    client->origin_data = NULL;
    if (real == NULL) {
        respond(client, 404, "404 Not Found\n");
        return;
    }
    struct hook_fetch *hf = um_calloc(1, sizeof(*hf));
    hf->sink.ops = &hf_ops;
    hf->client = client;
    hf->ho = ho;
    hf->ctx = f->ctx;
    hf->o = real;
    hf->req = f->req;
    hf->cancel.cb = on_cancel_task;
    if (f->client_ip)
        snprintf(hf->client_ip, sizeof(hf->client_ip), "%s", f->client_ip);
    client->origin_data = hf;
    real->ops->fetch(real, f, &hf->sink); /* may end (and free hf) before it returns */
}

/* The client-side calls find the fetch through the client's origin_data. */
static struct hook_fetch *client_fetch(struct um_sink *client)
{
    return client->origin_data;
}

static void ho_resume(struct um_origin *o, struct um_sink *client)
{
    (void)o;
    struct hook_fetch *hf = client_fetch(client);
    if (hf && hf->o->ops->resume)
        hf->o->ops->resume(hf->o, &hf->sink);
}

static void ho_body_ready(struct um_origin *o, struct um_sink *client)
{
    (void)o;
    struct hook_fetch *hf = client_fetch(client);
    if (hf && hf->o->ops->body_ready)
        hf->o->ops->body_ready(hf->o, &hf->sink);
}

static void ho_cancel(struct um_origin *o, struct um_sink *client)
{
    (void)o;
    struct hook_fetch *hf = client_fetch(client);
    if (hf == NULL)
        return;
    client->origin_data = NULL;
    if (hf->o->ops->cancel)
        hf->o->ops->cancel(hf->o, &hf->sink);
    hf_free(hf);
}

static void ho_destroy(struct um_origin *o)
{
    struct hook_origin *ho = (struct hook_origin *)o;
    if (ho->inner)
        ho->inner->ops->destroy(ho->inner);
    free(ho);
}

static const struct um_origin_ops ho_ops_stream = {
    .flags = UM_ORIGIN_F_STREAM_BODY,
    .fetch = ho_fetch,
    .resume = ho_resume,
    .body_ready = ho_body_ready,
    .cancel = ho_cancel,
    .destroy = ho_destroy,
};

static const struct um_origin_ops ho_ops = {
    .fetch = ho_fetch,
    .resume = ho_resume,
    .body_ready = ho_body_ready,
    .cancel = ho_cancel,
    .destroy = ho_destroy,
};

struct um_origin *um_hooks_origin_create(struct um_origin *inner, struct um_hooks *h,
                                         const struct um_route *route)
{
    struct hook_origin *ho = um_calloc(1, sizeof(*ho));
    /* A route whose own origin reads no body may still send to an upstream, which does:
     * only a static route keeps the connection reading the body first. */
    ho->base.ops = inner && !(inner->ops->flags & UM_ORIGIN_F_STREAM_BODY) ? &ho_ops
                                                                             : &ho_ops_stream;
    ho->inner = inner;
    ho->hooks = h;
    ho->route = route;
    ho->want_response = um_hooks_want_response(h->config, route);
    return &ho->base;
}
