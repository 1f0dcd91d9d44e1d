/* SPDX-License-Identifier: BSD-2-Clause */
/* HTTP/1.1 messages on a client connection (conn.h): the exchange's sends, which frame
 * its response (the head, chunked coding, the connection's end) into the output queue,
 * and the requests: heads parsed from the read buffer, bodies decoded in place, each
 * request begun as the exchange and completed for the next one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"

#define TRAILERS_MAX 4096 /* bytes of a request's trailer section kept */

#define PAUSE_ORIGIN_AT (256 * 1024) /* output backlog that pauses a streaming origin */

/* ---------------------------------------------------------------- the exchange's sends */

/* Writing a head straight into room made for it beforehand: one reservation, then plain
 * copies (a hit's head is a dozen of them). */
static inline char *put(char *p, const void *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}
#define PUT_LIT(p, lit) put((p), (lit), sizeof(lit) - 1)

#define SERVER_FIELD "Server: umbra/" UMBRA_VERSION "\r\n"
/* The status line and our Server field, for the usual status as one constant. */
#define HEAD_200 "HTTP/1.1 200 OK\r\n" SERVER_FIELD
/* At most what the status line's number, the framing fields and the end take. */
#define HEAD_FIXED_MAX 192

static void send_head(struct um__exchange *x, const struct um_response_head *h)
{
    struct um__conn *c = um__conn_of(x);
    struct um__outq *q = &c->out;
    bool usual = h->status == 200 && h->reason.len == 0;
    const char *reason = h->reason.base;
    size_t reason_len = h->reason.len;
    if (!usual && reason_len == 0) {
        reason = um__reason_phrase(h->status);
        reason_len = strlen(reason);
    }
    /* An origin's Date is kept (a cache computes ages from it); else ours. */
    bool has_date = false;
    for (size_t i = 0; i < h->num_headers && !has_date; i++)
        has_date = h->headers[i].name.len == 4 && um_str_eq_ci(h->headers[i].name, "date");
    /* Fields serialised already (a cache hit's stored head) go in one copy. */
    size_t first = h->num_wire > 0 && h->num_wire <= h->num_headers ? h->num_wire : 0;
    size_t need = HEAD_FIXED_MAX + reason_len + sizeof(SERVER_FIELD) + UM_HTTP_DATE_LEN +
                  (first > 0 ? h->wire.len : 0);
    for (size_t i = first; i < h->num_headers; i++)
        need += h->headers[i].name.len + h->headers[i].value.len + 4;
    um__outq_reserve(q, need); /* may rewind a buffer whose bytes were all sent */
    char *start = q->buf.base + q->buf.len, *p = start;
    if (usual) {
        p = PUT_LIT(p, HEAD_200);
    } else {
        p = PUT_LIT(p, "HTTP/1.1 ");
        p = um_u64_dec(p, (uint64_t)(unsigned)h->status);
        *p++ = ' ';
        p = put(p, reason, reason_len);
        p = PUT_LIT(p, "\r\n" SERVER_FIELD);
    }
    if (!has_date) {
        p = PUT_LIT(p, "Date: ");
        p = put(p, um__worker_date(c->w), UM_HTTP_DATE_LEN);
        p = PUT_LIT(p, "\r\n");
    }
    if (first > 0)
        p = put(p, h->wire.base, h->wire.len);
    for (size_t i = first; i < h->num_headers; i++) {
        const struct um_header *f = &h->headers[i];
        p = put(p, f->name.base, f->name.len);
        p = PUT_LIT(p, ": ");
        p = put(p, f->value.base, f->value.len);
        p = PUT_LIT(p, "\r\n");
    }
    bool bodiless = h->status == 304 || h->status == 204 || h->status < 200;
    if (!bodiless) {
        if (h->content_length >= 0) {
            p = PUT_LIT(p, "Content-Length: ");
            p = um_u64_dec(p, (uint64_t)h->content_length);
            p = PUT_LIT(p, "\r\n");
        } else if (x->req.minor_version == 1) {
            p = PUT_LIT(p, "Transfer-Encoding: chunked\r\n");
            c->r->resp_chunked = !x->head_only;
        } else {
            x->keepalive = false; /* close-delimited */
        }
    }
    /* Answered by us (an error, a hook) before the request's body was read: the rest of
     * it cannot be told from a next request, so the connection ends with this answer. */
    if (x->origin == NULL && !x->body_done)
        x->keepalive = false;
    if (!x->keepalive)
        p = PUT_LIT(p, "Connection: close\r\n");
    else if (x->req.minor_version == 0)
        p = PUT_LIT(p, "Connection: keep-alive\r\n");
    p = PUT_LIT(p, "\r\n");
    size_t n = (size_t)(p - start);
    UM_ASSERT(n <= need);
    um_buf_commit(&q->buf, n);
    x->resp_bytes += n;
    um__conn_wake(c);
}

static size_t send_data(struct um__exchange *x, const char *data, size_t len, bool may_refuse)
{
    struct um__conn *c = um__conn_of(x);
    struct um__outq *q = &c->out;
    if (may_refuse && um__outq_backlog(q) > PAUSE_ORIGIN_AT)
        return 0;
    if (c->r->resp_chunked) {
        char size[24];
        int n = snprintf(size, sizeof(size), "%zx\r\n", len);
        um__outq_reserve(q, (size_t)n + len + 2);
        um__outq_append(q, size, (size_t)n);
        um__outq_append(q, data, len);
        um__outq_append(q, "\r\n", 2);
    } else {
        um__outq_append(q, data, len);
    }
    um__conn_wake(c);
    return len;
}

static size_t send_ref(struct um__exchange *x, const char *data, size_t len,
                       void (*release)(void *ctx), void *ctx, bool may_refuse)
{
    struct um__conn *c = um__conn_of(x);
    if (c->r->resp_chunked) {
        /* Framed bytes go through the buffer. */
        size_t taken = send_data(x, data, len, may_refuse);
        if (taken)
            release(ctx);
        return taken;
    }
    if (!um__outq_ref(&c->out, data, len, release, ctx))
        return 0;
    um__conn_wake(c);
    return len;
}

static void send_file(struct um__exchange *x, int fd, uint64_t off, uint64_t len)
{
    struct um__conn *c = um__conn_of(x);
    um__outq_file(&c->out, fd, off, len, c->t->ops->sendfile == NULL);
    um__conn_wake(c);
}

static void end(struct um__exchange *x)
{
    struct um__conn *c = um__conn_of(x);
    if (c->r->resp_chunked && !c->r->resp_trailed) um__outq_append_str(&c->out, "0\r\n\r\n");
    um__conn_wake(c);
}

static void abort_response(struct um__exchange *x)
{
    /* A body cut short must not look complete: no last chunk, and close. */
    x->keepalive = false;
    um__conn_wake(um__conn_of(x));
}

static ssize_t read_body(struct um__exchange *x, char *buf, size_t len);

/* The last chunk with the trailer section (RFC 9112 section 7.1.2); a body not chunked
 * has no place for them, and they are dropped. */
static void send_trailers(struct um__exchange *x, const struct um_header *h, size_t n)
{
    struct um__conn *c = um__conn_of(x);
    if (!c->r->resp_chunked || c->r->resp_trailed) return;
    c->r->resp_trailed = true;
    struct um__outq *q = &c->out;
    um__outq_append_str(q, "0\r\n");
    for (size_t i = 0; i < n; i++) {
        um__outq_append(q, h[i].name.base, h[i].name.len);
        um__outq_append(q, ": ", 2);
        um__outq_append(q, h[i].value.base, h[i].value.len);
        um__outq_append(q, "\r\n", 2);
        x->resp_bytes += h[i].name.len + h[i].value.len + 4;
    }
    um__outq_append(q, "\r\n", 2);
    um__conn_wake(c);
}

/* The chunked body's trailer section, once it was read: the fields that may be trailers,
 * in the arena. */
static size_t read_trailers(struct um__exchange *x, const struct um_header **h)
{
    struct um__conn *c = um__conn_of(x);
    struct um_chunked *d = &c->r->chunked;
    *h = NULL;
    if (!x->body_done || !(x->req.flags & UM_REQ_F_CHUNKED) || d->trailers == NULL ||
        d->trailers_cut || d->trailers_len == 0)
        return 0;
    struct um_header all[64];
    size_t n = um_chunked_trailer_fields(d->trailers, d->trailers_len, all, UM_NELEMS(all));
    struct um_header *t = um_arena_alloc(&x->arena, n * sizeof(*t));
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (um_http_trailer_allowed(all[i].name)) t[k++] = all[i];
    *h = t;
    return k;
}

/* 1xx (RFC 9110 15.2): only to HTTP/1.1 clients (an HTTP/1.0 one cannot take them), and a
 * 100 only when we did not send one ourselves for Expect: 100-continue. */
static void send_info(struct um__exchange *x, int status, const struct um_header *h, size_t n)
{
    struct um__conn *c = um__conn_of(x);
    if (x->req.minor_version != 1 || status < 100 || status > 199 || status == 101 ||
        (status == 100 && (x->req.flags & UM_REQ_F_EXPECT_CONTINUE)))
        return;
    struct um__outq *q = &c->out;
    um__outq_reserve(q, 64);
    size_t start = q->buf.len;
    um__outq_append_str(q, "HTTP/1.1 ");
    um__outq_append_u64(q, (uint64_t)status);
    um__outq_append_str(q, " ");
    um__outq_append_str(q, um__reason_phrase(status));
    um__outq_append_str(q, "\r\n");
    for (size_t i = 0; i < n; i++) {
        um__outq_reserve(q, h[i].name.len + h[i].value.len + 4);
        um__outq_append(q, h[i].name.base, h[i].name.len);
        um__outq_append(q, ": ", 2);
        um__outq_append(q, h[i].value.base, h[i].value.len);
        um__outq_append(q, "\r\n", 2);
    }
    um__outq_append(q, "\r\n", 2);
    x->resp_bytes += q->buf.len - start;
    um__conn_wake(c);
}

/* 101 (RFC 9110 15.2.2): the head, then the tunnel once the exchange completes. */
static void send_upgrade(struct um__exchange *x, const struct um_response_head *h,
                         struct um_transport *backend, const char *pre, size_t pre_len)
{
    struct um__conn *c = um__conn_of(x);
    struct um__outq *q = &c->out;
    um__outq_reserve(q, 256);
    size_t start = q->buf.len;
    um__outq_append_str(q, "HTTP/1.1 101 ");
    if (h->reason.len > 0)
        um__outq_append(q, h->reason.base, h->reason.len);
    else
        um__outq_append_str(q, um__reason_phrase(101));
    um__outq_append_str(q, "\r\nServer: umbra/" UMBRA_VERSION "\r\n");
    for (size_t i = 0; i < h->num_headers; i++) {
        const struct um_header *f = &h->headers[i];
        um__outq_reserve(q, f->name.len + f->value.len + 4);
        um__outq_append(q, f->name.base, f->name.len);
        um__outq_append(q, ": ", 2);
        um__outq_append(q, f->value.base, f->value.len);
        um__outq_append(q, "\r\n", 2);
    }
    um__outq_append_str(q, "Connection: upgrade\r\n\r\n");
    x->resp_bytes += q->buf.len - start;
    um__tunnel_prepare(c, x, backend, pre, pre_len);
    um__conn_wake(c);
}

const struct um__exchange_conn_ops um__conn_exchange_ops = {
    .upgrade = send_upgrade,
    .send_head = send_head,
    .send_data = send_data,
    .send_ref = send_ref,
    .send_file = send_file,
    .end = end,
    .abort = abort_response,
    .send_info = send_info,
    .read_body = read_body,
    .send_trailers = send_trailers,
    .read_trailers = read_trailers,
};

/* Prepares the exchange for the parsed request (or for an error before one). */
static void begin_response(struct um__conn *c, bool head_only, bool keepalive)
{
    c->r->resp_chunked = c->r->resp_trailed = false;
    um__exchange_begin(&c->r->x, head_only, keepalive && !c->draining && !c->peer_closed);
}

void um__conn_fail(struct um__conn *c, int status)
{
    begin_response(c, false, false);
    um__exchange_respond(&c->r->x, status, NULL, 0);
    um__exchange_log(&c->r->x, 0);
    c->state = S_DONE;
    c->closing = true;
    c->linger = true;
}

/* ---------------------------------------------------------------- requests */

/* The request is answered (its response may still be draining): get ready for the next. */
static void complete_request(struct um__conn *c)
{
    struct um__exchange *x = &c->r->x;
    if (x->upgraded) {
        /* The 101 is logged when its tunnel ends. Bytes after the head are the client's
         * first of the new protocol (a request body, too, went to the backend already). */
        c->requests++;
        um__tunnel_begin(c, c->bpos + c->r->bdec);
        return;
    }
    um__exchange_log(x, 0);
    c->requests++;
    c->head_started = false;
    if (!x->body_done || c->r->bdec > 0) {
        /* The origin answered without reading the whole body: the rest cannot be told
         * from a next request without reading it, so end the connection instead. */
        x->keepalive = false;
        c->linger = true;
    }
    c->rpos = c->bpos + c->r->bdec;
    if (c->rpos == c->rlen)
        c->rpos = c->rlen = 0;
    um_http1_parser_init(&c->r->parser);
    um__exchange_finish(x);
    if (!x->keepalive) {
        c->state = S_DONE;
        c->closing = true;
        c->linger = c->linger || c->rpos < c->rlen;
    } else {
        c->state = S_HEAD;
    }
}

/* Decodes buffered body bytes into the decoded region. Returns UM_ERR (with body_error
 * set) on a malformed or oversized body. */
static int body_decode(struct um__conn *c)
{
    struct um__exchange *x = &c->r->x;
    size_t raw = c->bpos + c->r->bdec, avail = c->rlen - raw;
    if (x->body_done || avail == 0)
        return UM_OK;
    if (x->req.flags & UM_REQ_F_CHUNKED) {
        size_t consumed, out;
        int r = um_chunked_decode(&c->r->chunked, c->rbuf + raw, avail, &consumed, &out);
        if (r == UM_ERR) {
            x->body_error = 400;
            return UM_ERR;
        }
        /* Decoded bytes sit at rbuf+raw; close the gap the chunk framing leaves. */
        memmove(c->rbuf + raw + out, c->rbuf + raw + consumed, avail - consumed);
        c->rlen -= consumed - out;
        c->r->bdec += out;
        c->r->body_seen += out;
        x->body_done = r == UM_DONE;
    } else {
        size_t take = avail < c->r->body_left ? avail : (size_t)c->r->body_left;
        c->r->bdec += take;
        c->r->body_left -= take;
        c->r->body_seen += take;
        x->body_done = c->r->body_left == 0;
    }
    if (c->r->body_seen > um__conn_max_body(c)) {
        x->body_error = 413;
        return UM_ERR;
    }
    return UM_OK;
}

/* Drops n decoded body bytes from the front of the decoded region. */
static void body_drop(struct um__conn *c, size_t n)
{
    memmove(c->rbuf + c->bpos, c->rbuf + c->bpos + n, c->rlen - c->bpos - n);
    c->rlen -= n;
    c->r->bdec -= n;
}

static ssize_t read_body(struct um__exchange *x, char *buf, size_t len)
{
    struct um__conn *c = um__conn_of(x);
    if (x->body_error || body_decode(c) != UM_OK)
        return UM_ERR;
    size_t n = c->r->bdec < len ? c->r->bdec : len;
    if (n > 0) {
        memcpy(buf, c->rbuf + c->bpos, n);
        body_drop(c, n);
        um__conn_wake(c); /* room to read more from the client */
        return (ssize_t)n;
    }
    if (x->body_done)
        return 0;
    return UM_AGAIN;
}

/* A head has been parsed: route it, then read its body or hand it over. */
static void begin_request(struct um__conn *c)
{
    struct um__exchange *x = &c->r->x;
    struct um_request *req = &x->req;
    x->req_parsed = true;
    bool has_body = (req->flags & UM_REQ_F_CHUNKED) ||
                    ((req->flags & UM_REQ_F_CONTENT_LENGTH) && req->content_length > 0);
    if (has_body && c->rpos > 0) {
        /* Give the body room: move this request to the front and parse it again there
         * (its slices point at the old place). Only pipelined requests with bodies. */
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
        int status;
        um_http1_parser_init(&c->r->parser);
        int r = um_http1_parse_request(&c->r->parser, c->rbuf, c->rlen,
                                       um__conn_max_line(c), um__conn_max_head(c), req, &status);
        UM_ASSERT(r == UM_OK);
    }
    c->bpos = c->rpos + req->head_len;
    c->r->bdec = 0;
    c->r->body_left = req->content_length;
    c->r->body_seen = 0;
    x->body_done = !has_body;
    x->body_wanted = false;
    x->body_error = 0;
    um_chunked_init(&c->r->chunked);
    if (req->flags & UM_REQ_F_CHUNKED) {
        /* Its trailers are kept for the origin (read_trailers), up to a size no real
         * trailer section reaches. */
        c->r->chunked.trailers = um_arena_alloc(&x->arena, TRAILERS_MAX);
        c->r->chunked.trailers_cap = TRAILERS_MAX;
    }
    if ((req->flags & UM_REQ_F_CONTENT_LENGTH) && req->content_length > um__conn_max_body(c)) {
        um__conn_fail(c, 413);
        return;
    }
    begin_response(c, req->method_id == UM_METHOD_HEAD, (req->flags & UM_REQ_F_KEEPALIVE) != 0);
    if (has_body && (req->flags & UM_REQ_F_EXPECT_CONTINUE) && req->minor_version == 1 &&
        c->rlen == c->bpos)
        um__outq_append_str(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
    /* Answered or handed over, the request is the origin's business from now on (an
     * origin may answer before start returns). */
    c->state = S_ORIGIN;
    if (um__exchange_start(x, has_body) == UM__START_BODY_FIRST)
        c->state = S_BODY;
}

enum input_result um__conn_process_input(struct um__conn *c)
{
    if (c->r == NULL) /* idle, or new: nothing buffered, nothing in flight */
        return c->state == S_HEAD ? IN_NEED_INPUT : IN_DONE;
    struct um__exchange *x = &c->r->x;
    for (;;) {
        if (um__outq_full(&c->out)) {
            if (c->state != S_ORIGIN || x->ended)
                return IN_BACKLOG;
        }
        switch (c->state) {
        case S_HEAD: {
            if (c->rpos == c->rlen)
                return IN_NEED_INPUT;
            int status;
            int r = um_http1_parse_request(&c->r->parser, c->rbuf + c->rpos, c->rlen - c->rpos,
                                           um__conn_max_line(c), um__conn_max_head(c), &x->req, &status);
            if (r == UM_AGAIN) {
                if (c->rlen == c->rcap) {
                    if (c->rpos == 0) {
                        um__conn_fail(c, 431); /* cannot happen with rcap > limits; be safe */
                        continue;
                    }
                    memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
                    c->rlen -= c->rpos;
                    c->rpos = 0;
                }
                return IN_NEED_INPUT;
            }
            if (r == UM_ERR) {
                x->req.minor_version = 1;
                um__conn_fail(c, status);
                continue;
            }
            begin_request(c);
            continue;
        }
        case S_BODY: {
            if (body_decode(c) != UM_OK) {
                um__conn_fail(c, x->body_error);
                continue;
            }
            body_drop(c, c->r->bdec); /* nobody wants it */
            if (!x->body_done)
                return IN_NEED_INPUT;
            c->state = S_ORIGIN;
            um__exchange_dispatch_pending(x);
            continue;
        }
        case S_ORIGIN:
            if (x->ended) {
                complete_request(c);
                continue;
            }
            /* Keep reading while the origin streams a body that has not all arrived. */
            if (!x->body_done && c->rlen < c->rcap && !x->body_error)
                return IN_NEED_INPUT;
            return IN_WAIT;
        case S_PROXY:
        case S_HANDSHAKE:
        case S_DONE:
        case S_LINGER:
        case S_H2:
        case S_TUNNEL:
            return IN_DONE;
        }
    }
}
