/* SPDX-License-Identifier: BSD-2-Clause */
/* The life of a request (exchange.h): begun when its head is parsed, routed, handed to its
 * origin (or answered by us), its response taken from the origin through the sink and
 * passed to the connection's table, logged, finished.
 *
 * The sink below does the exchange's bookkeeping (what was sent, for the log and the
 * metrics; whether the origin must wait) and leaves the framing and the bytes to the
 * connection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exchange.h"
#include "umbra/access.h"
#include "umbra/accesslog.h"

const char *um__reason_phrase(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 102: return "Processing";
    case 103: return "Early Hints";
    case 200: return "OK";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 400 ? "Redirect" : status < 500 ? "Client Error" : "Server Error";
    }
}

/* ---------------------------------------------------------------- the sink */

static struct um__exchange *sink_x(struct um_sink *s)
{
    return um_container_of(s, struct um__exchange, sink);
}

static void on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct um__exchange *x = sink_x(s);
    UM_ASSERT(!x->head_sent);
    x->head_sent = true;
    x->status = h->status; /* a gRPC call's error is logged with its HTTP status */
    x->t_head = um_loop_now(x->w->loop);
    struct um_response_head grpc;
    struct um_header grpc_fields[3];
    char grpc_status[12];
    if (x->grpc && um__grpc_error_head(x, h, &grpc, grpc_fields, grpc_status)) h = &grpc;
    if (h->cache) {
        x->has_cache = true;
        x->cache = *h->cache;
        x->cache.cache_name = x->cache.key = x->cache.detail = NULL; /* borrowed */
    }
    /* The route's response header rules: on a copy of the fields, in the request's
     * arena (what the origin gave is its own, and may be kept, as the cache does). */
    struct um_response_head ruled;
    if (x->access_resp) {
        size_t cap = h->num_headers + 64;
        struct um_header *f = um_arena_alloc(&x->arena, cap * sizeof(*f));
        ruled = *h;
        ruled.headers = f;
        ruled.num_headers = um_access_response(x->access_resp, h->headers, h->num_headers, f, cap);
        h = &ruled;
    }
    /* The Cache-Status sent, for the log line (only the log line wants it). */
    size_t nscan = um_access_log_conf(x->config)->enabled ? h->num_headers : 0;
    for (size_t i = 0; i < nscan; i++) {
        const struct um_header *f = &h->headers[i];
        if (f->name.len == 12 && um_str_eq_ci(f->name, "cache-status") &&
            f->value.len < sizeof(x->cache_status)) {
            memcpy(x->cache_status, f->value.base, f->value.len);
            x->cache_status_len = f->value.len;
        }
    }
    x->conn_ops->send_head(x, h);
}

/* An origin that can resume may be told to wait; our own answers and the others cannot. */
static bool may_refuse(const struct um__exchange *x)
{
    return x->origin && x->origin->ops->resume;
}

static size_t on_data(struct um_sink *s, const char *data, size_t len)
{
    struct um__exchange *x = sink_x(s);
    if (x->head_only || len == 0)
        return len;
    if (x->conn_ops->send_data(x, data, len, may_refuse(x)) == 0) {
        x->origin_paused = true;
        return 0;
    }
    x->resp_bytes += len;
    x->resp_body_bytes += len;
    return len;
}

static size_t on_data_ref(struct um_sink *s, const char *data, size_t len,
                          void (*release)(void *ctx), void *ctx)
{
    struct um__exchange *x = sink_x(s);
    if (x->head_only || len == 0) {
        release(ctx);
        return len;
    }
    if (x->conn_ops->send_ref(x, data, len, release, ctx, may_refuse(x)) == 0) {
        x->origin_paused = true;
        return 0;
    }
    x->resp_bytes += len;
    x->resp_body_bytes += len;
    return len;
}

static void on_file(struct um_sink *s, int fd, uint64_t off, uint64_t len)
{
    struct um__exchange *x = sink_x(s);
    if (x->head_only || len == 0) {
        close(fd);
        return;
    }
    x->resp_bytes += len;
    x->resp_body_bytes += len;
    x->conn_ops->send_file(x, fd, off, len);
}

static void on_end(struct um_sink *s, int err)
{
    struct um__exchange *x = sink_x(s);
    UM_ASSERT(!x->ended);
    if (!x->head_sent) {
        /* The origin gave up before answering: say why, on our own. */
        x->keepalive = false;
        um__exchange_respond(x, x->body_error ? x->body_error : 502, NULL, 0);
        return;
    }
    x->ended = true;
    if (err != UM_OK)
        x->conn_ops->abort(x);
    else
        x->conn_ops->end(x);
}

static void on_trailers(struct um_sink *s, const struct um_header *h, size_t n)
{
    struct um__exchange *x = sink_x(s);
    if (x->head_sent && !x->ended && !x->head_only && n > 0 && x->conn_ops->send_trailers)
        x->conn_ops->send_trailers(x, h, n);
}

static size_t read_trailers(struct um_sink *s, const struct um_header **h)
{
    struct um__exchange *x = sink_x(s);
    *h = NULL;
    return x->conn_ops->read_trailers ? x->conn_ops->read_trailers(x, h) : 0;
}

static ssize_t read_body(struct um_sink *s, char *buf, size_t len)
{
    struct um__exchange *x = sink_x(s);
    ssize_t n = x->conn_ops->read_body(x, buf, len);
    if (n == UM_AGAIN)
        x->body_wanted = true;
    return n;
}

static void on_info(struct um_sink *s, int status, const struct um_header *h, size_t n)
{
    struct um__exchange *x = sink_x(s);
    if (!x->head_sent && !x->ended && x->conn_ops->send_info)
        x->conn_ops->send_info(x, status, h, n);
}

static void on_upgrade(struct um_sink *s, const struct um_response_head *h,
                       struct um_transport *backend, const char *pre, size_t pre_len)
{
    struct um__exchange *x = sink_x(s);
    UM_ASSERT(!x->head_sent);
    if (x->conn_ops->upgrade == NULL) {
        backend->ops->close(backend);
        x->keepalive = false;
        um__exchange_respond(x, 502, NULL, 0);
        return;
    }
    x->head_sent = true;
    x->ended = true;
    x->upgraded = true;
    x->status = h->status;
    x->t_head = um_loop_now(x->w->loop);
    x->conn_ops->upgrade(x, h, backend, pre, pre_len);
}

static const struct um_sink_ops sink_ops = {
    .on_upgrade = on_upgrade,
    .on_info = on_info,
    .on_head = on_head,
    .on_data = on_data,
    .on_data_ref = on_data_ref,
    .on_file = on_file,
    .on_end = on_end,
    .read_body = read_body,
    .on_trailers = on_trailers,
    .read_trailers = read_trailers,
};

/* ---------------------------------------------------------------- the request */

void um__exchange_init(struct um__exchange *x, const struct um__exchange_conn_ops *ops,
                       struct um__worker *w, struct um_runtime *runtime,
                       struct um_transport *transport, const char *peer_ip, int peer_port,
                       uint64_t conn_id)
{
    x->conn_ops = ops;
    x->w = w;
    x->runtime = runtime;
    x->config = runtime->config;
    x->transport = transport;
    x->peer_ip = peer_ip;
    x->peer_port = peer_port;
    x->conn_id = conn_id;
    x->sink.ops = &sink_ops;
}

void um__exchange_begin(struct um__exchange *x, bool head_only, bool keepalive)
{
    x->head_only = head_only;
    x->keepalive = keepalive;
    x->head_sent = x->ended = x->origin_paused = x->upgraded = x->grpc = false;
    x->origin = NULL;
    x->sink.origin_data = NULL;
    x->t_start = um_loop_now(x->w->loop);
    x->t_dispatch = x->t_head = 0;
    x->resp_bytes = x->resp_body_bytes = 0;
    x->cache_status_len = 0;
    x->has_cache = false;
    x->route_slot = 0;
    x->via_upstream = false;
    x->access_resp = NULL;
    x->access_verified = false;
}

void um__exchange_dispatch(struct um__exchange *x, struct um_origin *origin, struct um_fetch *f)
{
    x->origin = origin;
    x->t_dispatch = um_loop_now(x->w->loop);
    origin->ops->fetch(origin, f, &x->sink);
    /* Synchronous origins (static files) are done already. */
}

enum um__start um__exchange_start(struct um__exchange *x, bool has_body)
{
    struct um_fetch f;
    struct um_origin *origin = um__route(x, &f);
    if (origin == NULL)
        return UM__START_ANSWERED; /* the body, if any, is left unread */
    if (has_body && !(origin->ops->flags & UM_ORIGIN_F_STREAM_BODY) && f.backend == NULL) {
        /* The origin takes no body: read it to the end first, then dispatch. The path
         * (in the worker's buffer) is kept in the arena until then. */
        x->pending = f;
        x->pending.path = (um_str){um_arena_strdup(&x->arena, f.path.base, f.path.len), f.path.len};
        x->pending_origin = origin;
        return UM__START_BODY_FIRST;
    }
    um__exchange_dispatch(x, origin, &f);
    return UM__START_DISPATCHED;
}

void um__exchange_dispatch_pending(struct um__exchange *x)
{
    struct um_fetch f = x->pending;
    um__exchange_dispatch(x, x->pending_origin, &f);
}

void um__exchange_proceed(struct um__exchange *x)
{
    x->origin_paused = false;
    x->origin->ops->resume(x->origin, &x->sink);
}

void um__exchange_body_ready(struct um__exchange *x)
{
    x->body_wanted = false;
    x->origin->ops->body_ready(x->origin, &x->sink);
}

void um__exchange_log(struct um__exchange *x, int status)
{
    if (x->admin) {
        x->req_parsed = false;
        return;
    }
    struct um_access_rec r;
    memset(&r, 0, sizeof(r));
    r.client_ip = x->peer_ip;
    r.minor_version = -1;
    if (x->req_parsed) {
        const struct um_request *req = &x->req;
        r.method = req->method;
        r.target = req->target;
        r.minor_version = req->minor_version;
        r.http2 = (req->flags & UM_REQ_F_HTTP2) != 0;
        r.host = req->authority;
        if (um_access_log_conf(x->config)->enabled) { /* only the log line needs them */
            const um_str *v = um_http1_find_header(req, "referer");
            if (v)
                r.referer = *v;
            v = um_http1_find_header(req, "user-agent");
            if (v)
                r.user_agent = *v;
        }
    }
    r.status = status ? status : x->status;
    r.body_bytes = x->resp_body_bytes;
    r.bytes_out = x->resp_bytes;
    r.cache_status = (um_str){x->cache_status, x->cache_status_len};
    r.cache = x->has_cache ? &x->cache : NULL;
    r.upstream_ms = -1;
    /* The upstream's time: from hand-over to the response head, when the answer came
     * from the upstream (not from the cache). */
    bool hit = x->has_cache && x->cache.hit;
    if (x->via_upstream && x->t_head >= x->t_dispatch && x->t_dispatch > 0 && !hit)
        r.upstream_ms = (int64_t)(x->t_head - x->t_dispatch);
    r.duration_ms = um_loop_now(x->w->loop) - x->t_start;
    r.route_slot = x->route_slot;
    r.worker = x->w->id;
    r.conn_id = x->conn_id;
    um_access_log_request(&x->w->ctx, x->config, &r);
    x->req_parsed = false;
}

void um__exchange_finish(struct um__exchange *x)
{
    um__access_wait_drop(x);
    x->origin = NULL;
    um_arena_reset(&x->arena);
    x->pending_origin = NULL;
}

void um__exchange_cancel(struct um__exchange *x)
{
    if (!x->ended && x->origin && x->origin->ops->cancel)
        x->origin->ops->cancel(x->origin, &x->sink);
    if (x->req_parsed)
        um__exchange_log(x, x->head_sent ? 0 : 499); /* the client left first */
}

void um__exchange_respond(struct um__exchange *x, int status, const struct um_header *extra,
                          size_t num_extra)
{
    struct um_header headers[4];
    size_t n = 0;
    headers[n++] = (struct um_header){UM_STR("Content-Type"), UM_STR("text/plain; charset=utf-8")};
    for (size_t i = 0; i < num_extra && n < UM_NELEMS(headers); i++)
        headers[n++] = extra[i];
    char body[96];
    int len = snprintf(body, sizeof(body), "%d %s\n", status, um__reason_phrase(status));
    struct um_response_head h = {.status = status, .headers = headers, .num_headers = n, .content_length = len, .reason = {NULL, 0}};
    x->origin = NULL; /* our own answer: never paused */
    on_head(&x->sink, &h);
    on_data(&x->sink, body, (size_t)len);
    on_end(&x->sink, UM_OK);
}
