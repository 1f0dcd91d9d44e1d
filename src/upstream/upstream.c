/* SPDX-License-Identifier: BSD-2-Clause */
/* The upstream origin.
 *
 *   fetch -> the request's fields -> pick a server -> an attempt on the server's transport
 *         -> the final head (um__up_head) -> on_head -> body (um__up_body) -> on_data (0 =
 *         client behind: the transport stops reading until the connection resumes it)
 *         -> the transport reports the end (um__up_finish) -> on_end
 *
 * Two transports carry attempts, behind struct um_up_transport (internal.h): Umbra's own
 * HTTP/1.1 client (h1.c) for http:// servers at an IP address, and libcurl's multi
 * interface (curl.c) for the others and for a hook's server. This file sees only their
 * tables: it picks the server and its transport, keeps the first-byte timer, and decides
 * by the transport's enum um_up_err what an error means.
 *
 * Errors before the response head may be retried on another server (idempotent methods,
 * connect errors and resets); otherwise they become 502/504 answers. After the head, an
 * error ends the body as incomplete. The servers' health is shared by all workers
 * (relaxed atomics): failures in a row take a server out for fail_timeout, except the only
 * server of a group (nginx's rule: taking it out turns a few failed requests into a dead
 * site), and when every server is out a request still goes to the one that comes back first
 * (Envoy's panic routing) instead of getting a 502 untried. */
#include "umbra/upstream.h"

#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "umbra/http1.h"
#include "umbra/httpfield.h"
#include "umbra/log.h"
#include "umbra/loop.h"
#include "umbra/metrics.h"
#include "internal.h"
#include "umbra/module.h"

/* The two transports' worker states (struct worker_curl in curl.c, struct h1worker in
 * h1.c): defined with the record, so that a binary with one transport only (the fuzz
 * targets) links without the other. */

const struct um_module um_upstream_module = {
    .name = "upstream",
    .slots = (struct um_context_slot *const[]){&um__curl_slot, &um__h1_slot, &um__h2_slot,
                                               NULL},
    /* The active health checks' prober thread (health.c), one per configuration. */
    .make = um__health_make,
    .drop = um__health_drop,
};

/* ---------------------------------------------------------------- servers */

/* In use: neither passive health (down_until) nor the active probes (health.c, through
 * the metrics slot the prober thread writes) keep it out. */
static bool server_usable(struct upstream *up, int i, uint64_t now)
{
    return atomic_load_explicit(&up->servers[i].down_until, memory_order_relaxed) <= now &&
           !um_metrics_server_probe_out_get(up->slots[i]);
}

/* Panic routing: of the servers x has not tried, the one whose time out ends first, or -1
 * when x has tried them all. Used only when every untried server is out. A server the
 * probes keep out has no end to its time out: it comes after those passive health took
 * out, and among such servers the first untried one is taken. */
static int pick_panic(struct upstream *up, struct xfer *x)
{
    int n = (int)up->conf->num_servers, best = -1;
    uint64_t best_until = 0;
    for (int i = 0; i < n; i++) {
        if (i < 64 && (x->tried >> i) & 1)
            continue;
        uint64_t until =
            um_metrics_server_probe_out_get(up->slots[i])
                ? UINT64_MAX
                : atomic_load_explicit(&up->servers[i].down_until, memory_order_relaxed);
        if (best < 0 || until < best_until) {
            best = i;
            best_until = until;
        }
    }
    return best;
}

/* Returns a server not tried yet by x and not taken out at now (loop ms); when every untried
 * server is out, the one that comes back first (pick_panic); -1 when x has tried them all. */
static int pick_server(struct upstream *up, struct xfer *x, uint64_t now)
{
    int n = (int)up->conf->num_servers;
    unsigned start;
    switch (up->conf->balance) {
    case UM_BALANCE_HASH:
        start = (unsigned)(x->key_hash % (uint64_t)n);
        break;
    default:
        start = atomic_fetch_add_explicit(&up->rr, 1, memory_order_relaxed) % (unsigned)n;
        break;
    }
    int best = -1, best_active = 0;
    for (int k = 0; k < n; k++) {
        int i = (int)((start + (unsigned)k) % (unsigned)n);
        if ((i < 64 && (x->tried >> i) & 1) || !server_usable(up, i, now))
            continue;
        if (up->conf->balance != UM_BALANCE_LEAST_CONN)
            return i;
        int active = atomic_load_explicit(&up->servers[i].active, memory_order_relaxed);
        if (best < 0 || active < best_active) {
            best = i;
            best_active = active;
        }
    }
    return best >= 0 ? best : pick_panic(up, x);
}

/* Server i failed x at now (loop ms): max_fails in a row take it out for fail_timeout. */
static void server_failed(struct upstream *up, struct xfer *x, int i, uint64_t now)
{
    if (x->url)
        return; /* a hook's server, not one of the upstream's */
    int fails = atomic_fetch_add_explicit(&up->servers[i].fails, 1, memory_order_relaxed) + 1;
    /* The only server is never taken out: there is nothing to send its requests to instead,
     * and a 502 untried is worse than a try (its failures still count in the metrics). */
    if (fails >= up->conf->max_fails && up->conf->num_servers > 1) {
        uint64_t until = now + (uint64_t)(up->conf->fail_timeout * 1000);
        atomic_store_explicit(&up->servers[i].down_until, until, memory_order_relaxed);
        um_metrics_server_down_until(up->slots[i], until);
        um_log_warn("upstream %s: server %s failed %d times in a row; skipped for %gs",
                    up->conf->name, up->conf->servers[i].url, fails, up->conf->fail_timeout);
    }
}

/* Server i answered: its failures in a row start again, and a server out that answered a
 * request panic routing sent it is back at once. */
static void server_ok(struct upstream *up, int i)
{
    if (atomic_load_explicit(&up->servers[i].fails, memory_order_relaxed) != 0)
        atomic_store_explicit(&up->servers[i].fails, 0, memory_order_relaxed);
    if (atomic_load_explicit(&up->servers[i].down_until, memory_order_relaxed) != 0) {
        atomic_store_explicit(&up->servers[i].down_until, 0, memory_order_relaxed);
        um_metrics_server_down_until(up->slots[i], 0);
    }
}


/* ---------------------------------------------------------------- response */

/* A response head arrived for x's attempt: the server answered. */
static void head_arrived(struct xfer *x)
{
    um_loop_timer_stop(x->loop, &x->ttfb);
    if (x->url == NULL) /* a hook's server says nothing of the upstream's */
        server_ok(x->up, x->server);
    um_metrics_upstream_done(x->up->slots[x->server], um_loop_now(x->loop) - x->t_attempt,
                             false);
}

/* Into fields (room for UM_HTTP1_MAX_RESPONSE_FIELDS): resp's end-to-end fields in order,
 * without Content-Length, and without Server for a final head (final), or with Upgrade
 * for a 101 (keep_upgrade). Each field is classified once. Returns how many. */
static size_t end_to_end_fields(const struct um_http1_response *resp, bool final,
                                bool keep_upgrade, struct um_header *fields)
{
    uint8_t ids[UM_HTTP1_MAX_RESPONSE_FIELDS];
    bool any_connection = false;
    for (size_t i = 0; i < resp->num_headers; i++) {
        ids[i] = (uint8_t)um_http_field_id(resp->headers[i].name);
        any_connection |= ids[i] == UM_FIELD_CONNECTION;
    }
    struct um_http_conn_tokens conn;
    if (any_connection)
        um_http_conn_tokens_init(&conn, resp->headers, resp->num_headers);
    size_t n = 0;
    for (size_t i = 0; i < resp->num_headers; i++) {
        enum um_field_id id = ids[i];
        if (keep_upgrade && id == UM_FIELD_UPGRADE) {
            fields[n++] = resp->headers[i];
            continue;
        }
        if (id == UM_FIELD_CONTENT_LENGTH || um__up_is_hop_by_hop(id) ||
            (final && id == UM_FIELD_SERVER) ||
            (any_connection && um_http_conn_names(&conn, resp->headers[i].name)))
            continue;
        fields[n++] = resp->headers[i];
    }
    return n;
}

/* Into fields (room for UM_HTTP1_MAX_RESPONSE_FIELDS + 1): the end-to-end fields of a
 * final head (and Upgrade, for a 101), then Via. Returns how many. */
static size_t response_fields(const struct xfer *x, const struct um_http1_response *resp,
                              bool keep_upgrade, struct um_header *fields)
{
    size_t n = end_to_end_fields(resp, true, keep_upgrade, fields);
    /* Via names the protocol the response came in (RFC 9110 section 7.6.3). */
    fields[n++] = (struct um_header){UM_STR("Via"), x->tp == &um__up_h2 ? UM_STR("2 umbra")
                                                                        : UM_STR("1.1 umbra")};
    return n;
}

void um__up_head(struct xfer *x, const struct um_http1_response *resp)
{
    head_arrived(x);
    struct um_header fields[UM_HTTP1_MAX_RESPONSE_FIELDS + 1];
    size_t n = response_fields(x, resp, false, fields);
    /* Transfer-Encoding overrides Content-Length (RFC 9112 section 6.3): the body is as
     * long as its coding says, and a length passed on would misframe it to the client. A
     * HEAD, 204 or 304 answer has no body and keeps the length the origin announced. */
    int64_t content_length = -1;
    if ((resp->flags & (UM_RESP_F_CONTENT_LENGTH | UM_RESP_F_TE)) == UM_RESP_F_CONTENT_LENGTH)
        content_length = (int64_t)resp->content_length;
    struct um_response_head head = {.status = resp->status,
                                    .headers = fields,
                                    .num_headers = n,
                                    .content_length = content_length,
                                    .reason = resp->reason};
    x->head_sent = true;
    x->sink->ops->on_head(x->sink, &head);
}

void um__up_info(struct xfer *x, const struct um_http1_response *resp)
{
    if (x->head_sent || (resp->status != 100 && resp->status != 102 && resp->status != 103) ||
        x->infos >= UM_UP_MAX_INFOS)
        return;
    x->infos++;
    struct um_header fields[UM_HTTP1_MAX_RESPONSE_FIELDS];
    size_t n = end_to_end_fields(resp, false, false, fields);
    um_sink_info(x->sink, resp->status, fields, n);
}

static void xfer_free(struct xfer *x);

void um__up_upgraded(struct xfer *x, const struct um_http1_response *resp,
                     struct um_transport *backend, const char *pre, size_t pre_len)
{
    head_arrived(x);
    /* The end-to-end fields, and the protocol the server switched to. */
    struct um_header fields[UM_HTTP1_MAX_RESPONSE_FIELDS + 1];
    size_t n = response_fields(x, resp, true, fields);
    struct um_response_head head = {.status = 101, .headers = fields, .num_headers = n,
                                    .content_length = -1, .reason = resp->reason};
    x->head_sent = true;
    struct um_sink *sink = x->sink;
    x->sink = NULL;
    sink->origin_data = NULL;
    sink->ops->on_upgrade(sink, &head, backend, pre, pre_len);
    xfer_free(x);
}

size_t um__up_body(struct xfer *x, const char *data, size_t len)
{
    if (x->sink->ops->on_data(x->sink, data, len) == 0) {
        x->paused_recv = true;
        um_loop_timer_stop(x->loop, &x->ttfb); /* a slow client is not the server's fault */
        return 0;
    }
    x->unflushed = true;
    return len;
}

void um__up_ran_dry(struct xfer *x)
{
    if (!x->unflushed || x->sink == NULL)
        return;
    x->unflushed = false;
    um_sink_flush(x->sink);
}

ssize_t um__up_read_body(struct xfer *x, char *buf, size_t len)
{
    ssize_t n;
    if (x->body) {
        size_t left = (size_t)x->body_size - x->body_pos;
        n = (ssize_t)(left < len ? left : len);
        memcpy(buf, x->body + x->body_pos, (size_t)n);
        x->body_pos += (size_t)n;
    } else {
        n = x->sink->ops->read_body(x->sink, buf, len);
        if (n == UM_AGAIN) {
            x->paused_send = true;
            return UM_AGAIN;
        }
        if (n < 0) {
            x->body_failed = true;
            return UM_ERR;
        }
    }
    if (n > 0)
        x->body_started = true;
    return n;
}

void um__up_trailers(struct xfer *x, const struct um_header *h, size_t n)
{
    struct um_header keep[UM_HTTP1_MAX_RESPONSE_FIELDS];
    size_t k = 0;
    for (size_t i = 0; i < n && k < UM_NELEMS(keep); i++)
        if (um_http_trailer_allowed(h[i].name)) keep[k++] = h[i];
    if (x->sink && !x->is_head) um_sink_trailers(x->sink, keep, k);
}

size_t um__up_read_trailers(struct xfer *x, const struct um_header **h)
{
    *h = NULL;
    if (x->body || x->sink == NULL) return 0;
    return um_sink_read_trailers(x->sink, h);
}

/* ---------------------------------------------------------------- life of a fetch */

const char *um__up_err_text(enum um_up_err err)
{
    switch (err) {
    case UM_UP_OK:
        return "no error";
    case UM_UP_CONNECT:
        return "could not connect";
    case UM_UP_CONNECT_TIMEOUT:
        return "connection timed out";
    case UM_UP_TLS:
        return "TLS handshake failed";
    case UM_UP_TLS_VERIFY:
        return "the server's certificate did not verify";
    case UM_UP_SEND:
        return "sending the request failed";
    case UM_UP_RECV:
        return "receiving the answer failed";
    case UM_UP_TIMEOUT:
        return "timed out";
    case UM_UP_BAD_HEAD:
        return "malformed response head";
    case UM_UP_HEAD_TOO_LARGE:
        return "response head too large";
    case UM_UP_BAD_BODY:
        return "malformed response body";
    case UM_UP_CUT_SHORT:
        return "the server closed the connection before the end of the answer";
    case UM_UP_LOCAL:
        return "out of resources";
    case UM_UP_ABORTED:
        return "the request body failed";
    case UM_UP_OTHER:
        break;
    }
    return "failed";
}

/* The server is to blame: counted by passive health. */
static bool server_fault(enum um_up_err err)
{
    switch (err) {
    case UM_UP_CONNECT:
    case UM_UP_CONNECT_TIMEOUT:
    case UM_UP_TLS:
    case UM_UP_TLS_VERIFY:
    case UM_UP_SEND:
    case UM_UP_RECV:
    case UM_UP_TIMEOUT:
    case UM_UP_BAD_HEAD:
    case UM_UP_HEAD_TOO_LARGE:
        return true;
    default:
        return false;
    }
}

/* Another server may do better (for a request that may be sent again). */
static bool retryable(enum um_up_err err)
{
    switch (err) {
    case UM_UP_CONNECT:
    case UM_UP_CONNECT_TIMEOUT:
    case UM_UP_TLS:
    case UM_UP_SEND:
    case UM_UP_RECV:
        return true;
    default:
        return false;
    }
}

/* Takes the current attempt off its transport (closing its connection if it has one). */
static void release_attempt(struct xfer *x)
{
    if (x->conn)
        x->tp->release(x);
    if (x->counted) {
        x->counted = false;
        atomic_fetch_sub_explicit(&x->up->servers[x->server].active, 1, memory_order_relaxed);
    }
}

static void xfer_free(struct xfer *x)
{
    release_attempt(x);
    um_loop_timer_stop(x->loop, &x->ttfb);
    free(x->fields);
    free(x->target);
    free(x->method);
    free(x->url);
    free(x->body);
    free(x);
}

/* The last call to the sink: after it the sink may be gone (a layer frees its state in
 * on_end), so it is forgotten first. */
static void end_sink(struct xfer *x, int err)
{
    struct um_sink *sink = x->sink;
    x->sink = NULL;
    sink->origin_data = NULL;
    sink->ops->on_end(sink, err);
}

static void respond_error(struct xfer *x, int status)
{
    const char *body = status == 504 ? "504 Gateway Timeout\n"
                       : status == 501 ? "501 Not Implemented\n"
                                       : "502 Bad Gateway\n";
    /* The last call to the sink, as in end_sink. */
    struct um_sink *sink = x->sink;
    x->sink = NULL;
    sink->origin_data = NULL;
    um_sink_answer_text(sink, status, body);
}

static void on_ttfb_timeout(struct um_timer *t);

uint64_t um__up_timeout_ms(const struct xfer *x)
{
    uint64_t ms = (uint64_t)(x->up->conf->timeout * 1000);
    if (x->deadline == 0) return ms;
    uint64_t now = um_loop_now(x->loop);
    uint64_t left = x->deadline > now ? x->deadline - now : 1;
    return left < ms ? left : ms;
}

/* Starts an attempt on x->server over its transport. */
static void start_attempt(struct xfer *x)
{
    struct upstream *up = x->up;
    if (x->server < 64)
        x->tried |= (uint64_t)1 << x->server;
    x->attempts++;
    x->errbuf[0] = '\0';
    x->t_attempt = um_loop_now(x->loop);
    x->ttfb.cb = on_ttfb_timeout;
    um_loop_timer_start(x->loop, &x->ttfb, um__up_timeout_ms(x));
    atomic_fetch_add_explicit(&up->servers[x->server].active, 1, memory_order_relaxed);
    x->counted = true;
    x->tp = x->url ? &um__up_curl : up->transports[x->server];
    const struct um_upstream_server *srv = &up->conf->servers[x->server];
    /* Upgrades go through Umbra's own client whenever the server is at an IP address (it
     * hands its socket, or its TLS session, to the tunnel; libcurl cannot). */
    if (x->upgrade && !x->url && up->servers[x->server].h1.addrlen > 0 &&
        (!srv->https || up->tls_client))
        x->tp = &um__up_h1;
    if (x->upgrade && x->tp->upgrade == false) {
        release_attempt(x);
        um_loop_timer_stop(x->loop, &x->ttfb);
        um_log_err("upstream %s: protocol upgrades through %s are not supported", up->conf->name,
                   x->tp->name);
        respond_error(x, 501);
        xfer_free(x);
        return;
    }
    x->tp->start(x);
}

static void finish_attempt(struct xfer *x, enum um_up_err err);

/* A transfer ended (err), or timed out before its head. Its log lines name the
 * connection that started it. */
void um__up_finish(struct xfer *x, enum um_up_err err)
{
    uint64_t prev = um_log_set_conn(x->log_conn);
    finish_attempt(x, err);
    um_log_set_conn(prev);
}

static void finish_attempt(struct xfer *x, enum um_up_err err)
{
    struct upstream *up = x->up;
    const struct um_upstream_conf *conf = up->conf;
    const char *url = x->url ? x->url : conf->servers[x->server].url;
    const char *why = x->errbuf[0] ? x->errbuf : um__up_err_text(err);
    uint64_t now = um_loop_now(x->loop);
    if (!x->head_sent && !x->body_failed)
        um_metrics_upstream_done(up->slots[x->server], now - x->t_attempt, true);
    release_attempt(x);
    um_loop_timer_stop(x->loop, &x->ttfb);
    if (err == UM_UP_OK) {
        if (!x->head_sent) {
            um_log_err("upstream %s: server %s: no response head", conf->name, url);
            respond_error(x, 502);
        } else {
            end_sink(x, UM_OK);
        }
        xfer_free(x);
        return;
    }
    if (x->head_sent && x->grpc && err == UM_UP_TIMEOUT) {
        /* The call's deadline (or the upstream's timeout) passed: the client is told so
         * as gRPC says it, and the server's stream is reset (release_attempt). */
        um_log_err("upstream %s: server %s: gRPC call past its deadline", conf->name, url);
        static const struct um_header t[] = {{UM_STR("grpc-status"), UM_STR("4")},
                                             {UM_STR("grpc-message"), UM_STR("Deadline Exceeded")}};
        um_sink_trailers(x->sink, t, UM_NELEMS(t));
        end_sink(x, UM_OK);
        xfer_free(x);
        return;
    }
    if (x->head_sent) {
        um_log_err("upstream %s: server %s: response body cut short: %s", conf->name, url, why);
        end_sink(x, UM_ERR);
        xfer_free(x);
        return;
    }
    if (x->body_failed) {
        /* The client's body was bad: the connection answers 400/413 itself. */
        end_sink(x, UM_ERR);
        xfer_free(x);
        return;
    }
    if (err == UM_UP_TIMEOUT) {
        um_log_err("upstream %s: server %s: no response within %gs", conf->name, url, conf->timeout);
        server_failed(up, x, x->server, now);
        respond_error(x, 504);
        xfer_free(x);
        return;
    }
    /* Out of descriptors or memory here (UM_UP_LOCAL) is not the server's fault: counting
     * it would take every server out for fail_timeout, well after the shortage ended (nginx
     * does not count it either). Nor is another server worth a try. */
    um_log_err("upstream %s: server %s: %s", conf->name, url, why);
    if (server_fault(err))
        server_failed(up, x, x->server, now);
    if (retryable(err) && x->idempotent && !x->body_started && x->attempts <= conf->retries) {
        int next = pick_server(up, x, now);
        if (next >= 0) {
            x->server = next;
            start_attempt(x);
            return;
        }
    }
    respond_error(x, err == UM_UP_CONNECT_TIMEOUT ? 504 : 502);
    xfer_free(x);
}

static void on_ttfb_timeout(struct um_timer *t)
{
    struct xfer *x = um_container_of(t, struct xfer, ttfb);
    um__up_finish(x, UM_UP_TIMEOUT);
}

/* ---------------------------------------------------------------- origin ops */

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static void upstream_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *sink)
{
    struct upstream *up = (struct upstream *)o;
    const struct um_request *req = f->req;
    bool upgrade = (req->flags & UM_REQ_F_UPGRADE) != 0;
    if (upgrade && (sink->ops->on_upgrade == NULL || (req->flags & UM_REQ_F_HTTP2))) {
        um_sink_answer_text(sink, 501, "501 Not Implemented: protocol upgrades are not supported here\n");
        return;
    }
    struct xfer *x = um_calloc(1, sizeof(*x));
    x->upgrade = upgrade;
    x->up = up;
    x->ctx = f->ctx;
    x->loop = f->ctx->loop;
    x->log_conn = um_log_conn();
    x->sink = sink;
    sink->origin_data = x;
    x->is_head = req->method_id == UM_METHOD_HEAD;
    x->has_body = (req->flags & (UM_REQ_F_CHUNKED | UM_REQ_F_CONTENT_LENGTH)) != 0;
    switch (req->method_id) {
    case UM_METHOD_GET:
    case UM_METHOD_HEAD:
    case UM_METHOD_PUT:
    case UM_METHOD_DELETE:
    case UM_METHOD_OPTIONS:
    case UM_METHOD_TRACE:
        x->idempotent = true;
        break;
    default:
        x->idempotent = false;
    }
    /* The target exactly as the client sent it (origin-form), for every attempt. */
    size_t tlen = req->path.len + ((req->flags & UM_REQ_F_HAS_QUERY) ? req->query.len + 1 : 0);
    x->target = um_malloc(tlen + 1);
    memcpy(x->target, req->path.base, req->path.len);
    if (req->flags & UM_REQ_F_HAS_QUERY) {
        x->target[req->path.len] = '?';
        memcpy(x->target + req->path.len + 1, req->query.base, req->query.len);
    }
    x->target[tlen] = '\0';
    x->key_hash = fnv1a(x->target, tlen);
    if (!x->is_head && (req->method_id != UM_METHOD_GET || x->has_body))
        x->method = um_strndup(req->method.base, req->method.len);
    x->body_size = (req->flags & UM_REQ_F_CHUNKED) ? -1 : (int64_t)req->content_length;
    if (f->upstream_url)
        x->url = um_strndup(f->upstream_url, strlen(f->upstream_url));
    if (f->has_body) {
        x->has_body = true;
        x->body = um_malloc(f->body.len + 1);
        memcpy(x->body, f->body.base, f->body.len);
        x->body_size = (int64_t)f->body.len;
        if (x->method == NULL && !x->is_head)
            x->method = um_strndup(req->method.base, req->method.len);
    }
    um__up_grpc(req, x);
    um__up_build_fields(up, f, x);
    if (up->conf->send_proxy && f->client_ip) {
        snprintf(x->client_ip, sizeof(x->client_ip), "%s", f->client_ip);
        x->client_port = f->client_port;
    }
    x->server = pick_server(up, x, um_loop_now(x->loop));
    start_attempt(x);
}

static void upstream_resume(struct um_origin *o, struct um_sink *sink)
{
    (void)o;
    struct xfer *x = sink->origin_data;
    if (x == NULL || !x->paused_recv)
        return;
    x->paused_recv = false;
    if (x->conn)
        x->tp->resume(x);
}

static void upstream_body_ready(struct um_origin *o, struct um_sink *sink)
{
    (void)o;
    struct xfer *x = sink->origin_data;
    if (x == NULL || !x->paused_send)
        return;
    x->paused_send = false;
    if (x->conn)
        x->tp->body_ready(x);
}

static void upstream_cancel(struct um_origin *o, struct um_sink *sink)
{
    (void)o;
    struct xfer *x = sink->origin_data;
    if (x == NULL)
        return;
    xfer_free(x);
}

static void upstream_destroy(struct um_origin *o)
{
    struct upstream *up = (struct upstream *)o;
    if (atomic_fetch_sub(&up->refcnt, 1) != 1)
        return;
    um_tls_client_destroy(up->tls_client);
    free(up->servers);
    free(up->slots);
    free(up->transports);
    free(up);
}

static const struct um_origin_ops upstream_ops = {
    .flags = UM_ORIGIN_F_STREAM_BODY | UM_ORIGIN_F_UPGRADE,
    .fetch = upstream_fetch,
    .resume = upstream_resume,
    .body_ready = upstream_body_ready,
    .cancel = upstream_cancel,
    .destroy = upstream_destroy,
};

/* Fills st's h1 and tls_host for server i of conf: its address, or the first address
 * its host name resolves to now (runs where the upstream is built: at start and reload,
 * never on a worker). A name that does not resolve is logged; upgrades to it then get
 * 501, the rest of its traffic goes through libcurl, which resolves it as it goes. */
static void server_address(const struct um_upstream_conf *conf, size_t i, struct server_state *st)
{
    const struct um_upstream_server *s = &conf->servers[i];
    st->h1 = *s;
    const char *auth = strstr(s->url, "://") + 3;
    const char *colon = strrchr(auth, ':'); /* the URL always ends in :PORT */
    size_t hl = (size_t)(colon - auth);
    if (auth[0] == '[') {
        auth++;
        hl -= 2;
    }
    if (hl >= sizeof st->tls_host)
        hl = sizeof st->tls_host - 1;
    memcpy(st->tls_host, auth, hl);
    st->tls_host[hl] = '\0';
    if (s->addrlen > 0)
        return;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(st->tls_host, colon + 1, &hints, &res);
    if (rc != 0 || res == NULL || res->ai_addrlen > sizeof st->h1.addr) {
        um_log_warn("upstream %s: server %s: its name does not resolve (%s): upgrades to it "
                    "will be refused",
                    conf->name, s->url, rc != 0 ? gai_strerror(rc) : "no address");
        if (res)
            freeaddrinfo(res);
        return;
    }
    memcpy(&st->h1.addr, res->ai_addr, res->ai_addrlen);
    st->h1.addrlen = (socklen_t)res->ai_addrlen;
    freeaddrinfo(res);
}

struct um_origin *um_upstream_origin_create(const struct um_upstream_conf *conf)
{
    struct upstream *up = um_calloc(1, sizeof(*up));
    up->base.ops = &upstream_ops;
    atomic_init(&up->refcnt, 1);
    up->conf = conf;
    up->servers = um_calloc(conf->num_servers, sizeof(*up->servers));
    up->slots = um_calloc(conf->num_servers, sizeof(*up->slots));
    up->transports = um_calloc(conf->num_servers, sizeof(*up->transports));
    size_t native = 0;
    for (size_t i = 0; i < conf->num_servers; i++) {
        /* Umbra's HTTP/1.1 client for an http:// server at an IP address (config.c parsed
         * it), unless the upstream says client = "curl"; its HTTP/2 client for every server
         * of an upstream with protocol = "h2" (by the address a name had when the upstream
         * was made, as for upgrades: server_address). */
        const struct um_upstream_server *s = &conf->servers[i];
        bool h1 = !conf->curl_only && !s->https && s->addrlen > 0;
        up->transports[i] = conf->h2 ? &um__up_h2 : h1 ? &um__up_h1 : &um__up_curl;
        native += h1 || conf->h2;
        up->slots[i] = um_metrics_server_slot(conf->name, conf->servers[i].url);
        server_address(conf, i, &up->servers[i]);
        if (s->https && up->servers[i].h1.addrlen > 0 && up->tls_client == NULL) {
            char err[256] = "";
            up->tls_client = um_tls_client_create(conf->tls_verify, conf->tls_ca, err, sizeof(err));
            if (up->tls_client == NULL)
                um_log_err("upstream %s: no TLS for upgrades to its https:// servers: %s",
                           conf->name, err);
        }
        /* A server taken out stays out across a reload. */
        atomic_init(&up->servers[i].down_until, um_metrics_server_down_until_get(up->slots[i]));
    }
    um_log_info("upstream %s: %zu server(s) through Umbra's HTTP/%s client, %zu through "
                "libcurl", conf->name, native, conf->h2 ? "2" : "1.1", conf->num_servers - native);
    return &up->base;
}

struct um_origin *um_upstream_origin_ref(struct um_origin *o)
{
    struct upstream *up = (struct upstream *)o;
    atomic_fetch_add(&up->refcnt, 1);
    return o;
}

static const struct um_up_transport *const transports[] = {&um__up_h1, &um__up_h2,
                                                            &um__up_curl};

void um_upstream_global_init(void)
{
    for (size_t i = 0; i < UM_NELEMS(transports); i++)
        if (transports[i]->global_init)
            transports[i]->global_init();
}

void um_upstream_global_cleanup(void)
{
    for (size_t i = UM_NELEMS(transports); i-- > 0;)
        if (transports[i]->global_cleanup)
            transports[i]->global_cleanup();
}
