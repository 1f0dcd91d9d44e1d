/* SPDX-License-Identifier: BSD-2-Clause */
/* Umbra's own HTTP/1.1 client: the upstream's transport for http:// servers at an IP
 * address (libcurl's multi interface carries the others: https://, host names, and every
 * server of an upstream with client = "curl").
 *
 * Why a second transport: a proxied request through libcurl costs about twice the CPU of
 * nginx's (two poll() calls per request inside libcurl, a socket callback and an
 * epoll_ctl each time a connection goes back to its pool, and its own bookkeeping), and
 * on a small machine that CPU is the throughput. Here a kept-alive connection stays
 * registered in the worker's epoll set while idle, so a request costs a send and a recv
 * on each side and nothing else.
 *
 * Each worker keeps, per server address, a pool of idle connections (newest first). An
 * attempt takes one, or connects a new one:
 *
 *   connect (non-blocking, connect_timeout) -> send the head, then the body as the sink
 *   gives it (Content-Length, or chunked when the client's was) -> parse the response head
 *   in the read buffer (um_http1_parse_response; 1xx heads skipped) -> body by
 *   Content-Length, chunked, or to the close -> the sink -> back to the pool when the
 *   exchange was complete and both sides allow it
 *
 * An idempotent request on a kept-alive connection that fails before a byte of the answer
 * (the server closed it as we reused it) is sent again on a new connection, which is not
 * counted as a failure of the server. Every other error goes to um__up_finish as an enum
 * um_up_err, with a few words in x->errbuf for the log. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/http1.h"
#include "umbra/log.h"

/* The HTTP/1.1 client's connection pools (struct h1worker). */
struct um_context_slot um__h1_slot = {.name = "http/1.1 client pools"};

#define IN_SIZE (32 * 1024)                /* read buffer; grows for a long head */
#define OUT_BODY (64 * 1024)               /* request body read from the sink at a time */
#define CHUNK_HEAD 18                      /* room for "%zx\r\n" before a chunk */
#define IDLE_MS (60 * 1000)                /* an idle connection is closed after this */
#define POOL_MAX 1024                      /* idle connections per server and worker */

enum h1_state { H1_CONNECTING, H1_HANDSHAKE, H1_ACTIVE, H1_IDLE };
enum h1_framing { F_NONE, F_LENGTH, F_CHUNKED, F_CLOSE };

struct h1pool {
    struct h1pool *next;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    struct h1conn *idle; /* newest first */
    size_t num_idle;
};

/* The state of a worker context's h1 client slot (um__h1_slot). */
struct h1worker {
    struct um_context *ctx;
    struct um_loop *loop;
    struct h1pool *pools;
    struct h1conn *all;  /* every open connection, for the loop's stop */
    struct h1conn *dead; /* closed in this loop turn: freed at its end */
    struct um_task stop, reap;
};

struct h1conn {
    struct um_io io;
    struct h1worker *hw;
    struct h1pool *pool;
    struct h1conn *next_idle, *prev_all, *next_all;
    struct xfer *x; /* NULL while idle */
    /* An https:// server's TLS (only for the upgrades this client carries there: such a
     * connection is never kept for another request); NULL: plain send and recv. */
    struct um_transport *tls;
    struct um_timer timer; /* connect timeout, then idle expiry */
    enum h1_state state;
    bool reused;     /* taken from the pool for this attempt */
    bool got_data;   /* a byte of the answer arrived in this attempt */
    bool keep;       /* the answer allows another request after it */
    bool req_done;   /* the whole request has been sent */
    bool body_eof;   /* the request body has been read to its end */
    bool chunked_out;
    bool head_done;
    bool dead;       /* closed: events still pending in this turn are ignored */
    uint32_t want;   /* the events the connection is registered for */
    /* request bytes to send: out[out_pos..out_len) */
    char *out;
    size_t out_pos, out_len, out_cap;
    /* response bytes read: in[in_pos..in_pos + in_len) */
    char *in;
    size_t in_pos, in_len, in_cap;
    /* decoded body bytes the sink has not taken yet (inside in, before in_pos) */
    const char *pend;
    size_t pend_len;
    struct um_http1_resp_parser hp; /* the response head, until head_done */
    enum h1_framing framing;
    uint64_t remaining; /* F_LENGTH */
    struct um_chunked chunk;
};

/* ---------------------------------------------------------------- connections */

static void conn_close(struct h1conn *c)
{
    struct h1worker *hw = c->hw;
    if (c->state == H1_IDLE) {
        struct h1conn **p = &c->pool->idle;
        while (*p != c)
            p = &(*p)->next_idle;
        *p = c->next_idle;
        c->pool->num_idle--;
    }
    um_loop_timer_stop(hw->loop, &c->timer);
    /* Out of the epoll set first: close() alone does not take it out while a copy of the
     * descriptor lives on (in a child being spawned by another thread, until its exec). */
    if (c->io.fd >= 0) {
        um_loop_io_set(hw->loop, &c->io, c->io.fd, 0);
        if (c->tls)
            c->tls->ops->close(c->tls); /* the socket too */
        else
            close(c->io.fd);
        c->tls = NULL;
        c->io.fd = -1;
    }
    if (c->prev_all)
        c->prev_all->next_all = c->next_all;
    else
        hw->all = c->next_all;
    if (c->next_all)
        c->next_all->prev_all = c->prev_all;
    /* An event for it may still be waiting in this turn's batch: freed after the turn. */
    c->dead = true;
    c->next_all = hw->dead;
    hw->dead = c;
    um_loop_defer(hw->loop, &hw->reap);
}

static void reap(struct h1worker *hw)
{
    while (hw->dead) {
        struct h1conn *c = hw->dead;
        hw->dead = c->next_all;
        free(c->out);
        free(c->in);
        free(c);
    }
}

static void on_reap(struct um_task *t)
{
    reap((struct h1worker *)((char *)t - offsetof(struct h1worker, reap)));
}

/* Registers the connection for events (only when they change: a connection that goes
 * from request to request stays registered for EPOLLIN and costs no epoll_ctl). */
static bool conn_want(struct h1conn *c, uint32_t events)
{
    if (c->want == events)
        return true;
    if (um_loop_io_set(c->hw->loop, &c->io, c->io.fd, events) != UM_OK)
        return false;
    c->want = events;
    return true;
}

static void on_worker_stop(struct um_task *t)
{
    struct h1worker *hw = (struct h1worker *)((char *)t - offsetof(struct h1worker, stop));
    while (hw->all) {
        struct h1conn *c = hw->all;
        if (c->x)
            c->x->conn = NULL;
        conn_close(c);
    }
    reap(hw);
    while (hw->pools) {
        struct h1pool *p = hw->pools;
        hw->pools = p->next;
        free(p);
    }
    um_context_set(hw->ctx, &um__h1_slot, NULL);
    free(hw);
}

static struct h1worker *h1worker(struct um_context *ctx)
{
    struct h1worker *hw = um_context_get(ctx, &um__h1_slot);
    if (hw)
        return hw;
    hw = um_calloc(1, sizeof(*hw));
    hw->ctx = ctx;
    hw->loop = ctx->loop;
    hw->stop.cb = on_worker_stop;
    hw->reap.cb = on_reap;
    um_loop_on_stop(ctx->loop, &hw->stop);
    um_context_set(ctx, &um__h1_slot, hw);
    return hw;
}

static struct h1pool *pool_for(struct h1worker *hw, const struct um_upstream_server *a)
{
    for (struct h1pool *p = hw->pools; p; p = p->next)
        if (p->addrlen == a->addrlen && memcmp(&p->addr, &a->addr, a->addrlen) == 0)
            return p;
    struct h1pool *p = um_calloc(1, sizeof(*p));
    memcpy(&p->addr, &a->addr, a->addrlen);
    p->addrlen = a->addrlen;
    p->next = hw->pools;
    hw->pools = p;
    return p;
}

/* ---------------------------------------------------------------- ending an attempt */

static void on_io(struct um_io *io, uint32_t events);
static void on_timer(struct um_timer *t);
static void attempt(struct xfer *x, bool new_conn);

static void detach(struct h1conn *c)
{
    struct xfer *x = c->x;
    x->conn = NULL;
    c->x = NULL;
}

/* The attempt failed with err (why: a few words for the log). Closes the connection.
 * An idempotent request whose kept-alive connection failed before any answer is sent again
 * on a new connection: the server most likely closed it just before the request arrived.
 * Others are not (RFC 9110 section 9.2.2: the server may have acted on them). */
static void fail(struct h1conn *c, enum um_up_err err, const char *why)
{
    struct xfer *x = c->x;
    bool again = c->reused && !c->got_data && !x->head_sent && x->idempotent &&
                 (!x->body_started || x->body);
    detach(c);
    conn_close(c);
    if (again) {
        x->body_pos = 0;
        attempt(x, true);
        return;
    }
    if (x->errbuf[0] == '\0')
        snprintf(x->errbuf, sizeof(x->errbuf), "%s", why);
    um__up_finish(x, err);
}

static void fail_errno(struct h1conn *c, enum um_up_err err, const char *what, int e)
{
    char why[128];
    snprintf(why, sizeof(why), "%s: %s", what, strerror(e));
    fail(c, err, why);
}

/* The answer is complete: the connection goes back to its pool when it can. */
static void complete(struct h1conn *c)
{
    struct xfer *x = c->x;
    struct h1worker *hw = c->hw;
    detach(c);
    if (c->keep && c->tls == NULL && c->req_done && c->in_len == 0 && c->framing != F_CLOSE &&
        c->pool->num_idle < POOL_MAX && conn_want(c, EPOLLIN)) {
        c->state = H1_IDLE;
        c->next_idle = c->pool->idle;
        c->pool->idle = c;
        c->pool->num_idle++;
        um_loop_timer_start(hw->loop, &c->timer, IDLE_MS);
    } else {
        conn_close(c);
    }
    um__up_finish(x, UM_UP_OK);
}

/* ---------------------------------------------------------------- sending */

static void out_reserve(struct h1conn *c, size_t n)
{
    if (c->out_cap >= n)
        return;
    c->out = um_realloc(c->out, n);
    c->out_cap = n;
}

/* Writes the request head into c->out. */
static void put_head(struct h1conn *c, struct xfer *x)
{
    const char *method = x->is_head ? "HEAD" : x->method ? x->method : "GET";
    const char *authority = strstr(x->up->conf->servers[x->server].url, "://") + 3;
    size_t need = strlen(method) + strlen(x->target) + x->fields_len + strlen(authority) + 128;
    out_reserve(c, need);
    size_t o = 0, ml = strlen(method), tl = strlen(x->target);
    memcpy(c->out, method, ml);
    o += ml;
    c->out[o++] = ' ';
    memcpy(c->out + o, x->target, tl);
    o += tl;
    memcpy(c->out + o, " HTTP/1.1\r\n", 11);
    o += 11;
    memcpy(c->out + o, x->fields, x->fields_len);
    o += x->fields_len;
    if (!x->has_host)
        o += (size_t)snprintf(c->out + o, need - o, "Host: %s\r\n", authority);
    c->chunked_out = false;
    if (x->has_body) {
        if (x->body_size >= 0)
            o += (size_t)snprintf(c->out + o, need - o, "Content-Length: %lld\r\n",
                                  (long long)x->body_size);
        else {
            memcpy(c->out + o, "Transfer-Encoding: chunked\r\n", 28);
            o += 28;
            c->chunked_out = true;
        }
    }
    memcpy(c->out + o, "\r\n", 2);
    c->out_len = o + 2;
    c->out_pos = 0;
    c->body_eof = !x->has_body;
}

/* Reads the next piece of the request body into c->out. Returns false when the
 * connection is gone (the body failed). */
static bool next_body(struct h1conn *c, struct xfer *x)
{
    out_reserve(c, CHUNK_HEAD + OUT_BODY + 2);
    char *dst = c->out + CHUNK_HEAD;
    ssize_t n = um__up_read_body(x, dst, OUT_BODY);
    if (n == UM_AGAIN) {
        c->out_pos = c->out_len = 0;
        return true;
    }
    if (n < 0) {
        fail(c, UM_UP_ABORTED, "request body failed");
        return false;
    }
    if (n == 0)
        c->body_eof = true;
    if (!c->chunked_out) {
        c->out_pos = CHUNK_HEAD;
        c->out_len = CHUNK_HEAD + (size_t)n;
        return true;
    }
    if (n == 0) {
        memcpy(c->out, "0\r\n\r\n", 5);
        c->out_pos = 0;
        c->out_len = 5;
        return true;
    }
    char hex[CHUNK_HEAD];
    int hl = snprintf(hex, sizeof(hex), "%zx\r\n", (size_t)n);
    c->out_pos = CHUNK_HEAD - (size_t)hl;
    memcpy(c->out + c->out_pos, hex, (size_t)hl);
    memcpy(dst + n, "\r\n", 2);
    c->out_len = CHUNK_HEAD + (size_t)n + 2;
    return true;
}

/* send(2) and recv(2), or their TLS versions, with their results: -1 with errno EAGAIN
 * when the socket (or the TLS session) would block. */
static ssize_t io_send(struct h1conn *c, const void *p, size_t n)
{
    if (c->tls == NULL)
        return send(c->io.fd, p, n, MSG_NOSIGNAL);
    int want = 0;
    ssize_t r = c->tls->ops->write(c->tls, p, n, 0, &want);
    if (r >= 0)
        return r;
    errno = r == UM_AGAIN ? EAGAIN : EPIPE;
    return -1;
}

static ssize_t io_recv(struct h1conn *c, void *p, size_t n)
{
    if (c->tls == NULL)
        return recv(c->io.fd, p, n, 0);
    int want = 0;
    ssize_t r = c->tls->ops->read(c->tls, p, n, &want);
    if (r >= 0)
        return r;
    errno = r == UM_AGAIN ? EAGAIN : ECONNRESET;
    return -1;
}

/* Sends what it can of the request. Returns false when the connection is gone. */
static bool send_request(struct h1conn *c)
{
    struct xfer *x = c->x;
    while (!c->req_done) {
        if (c->out_pos == c->out_len) {
            if (c->body_eof) {
                c->req_done = true;
                break;
            }
            if (!next_body(c, x))
                return false;
            if (c->out_pos == c->out_len && !c->body_eof)
                break; /* nothing buffered: body_ready comes when there is */
            continue;
        }
        ssize_t n = io_send(c, c->out + c->out_pos, c->out_len - c->out_pos);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                if (errno == EINTR)
                    continue;
                if (!conn_want(c, EPOLLIN | EPOLLOUT)) {
                    fail_errno(c, UM_UP_SEND, "epoll_ctl", errno);
                    return false;
                }
                return true;
            }
            if (c->got_data) {
                /* The server answered already and stopped reading: its answer counts. */
                c->keep = false;
                c->req_done = true;
                break;
            }
            fail_errno(c, UM_UP_SEND, "send", errno);
            return false;
        }
        c->out_pos += (size_t)n;
    }
    if (!conn_want(c, EPOLLIN)) {
        fail_errno(c, UM_UP_SEND, "epoll_ctl", errno);
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- receiving */

/* The head has been handed to the sink: how the body is framed, and whether the
 * connection may carry another request after it (RFC 9112 sections 6.3 and 9.3). */
static void head_done(struct h1conn *c, struct xfer *x, const struct um_http1_response *resp)
{
    bool te = resp->flags & UM_RESP_F_TE, has_cl = resp->flags & UM_RESP_F_CONTENT_LENGTH;
    /* Both framings at once may be an attempt at response splitting: not reused. */
    c->keep = !(resp->flags & UM_RESP_F_CLOSE) && !(te && has_cl);
    if (x->is_head || resp->status == 204 || resp->status == 304) {
        c->framing = F_NONE;
    } else if (te) {
        c->framing = (resp->flags & UM_RESP_F_CHUNKED) ? F_CHUNKED : F_CLOSE;
        um_chunked_init(&c->chunk);
    } else if (has_cl) {
        c->framing = resp->content_length == 0 ? F_NONE : F_LENGTH;
        c->remaining = resp->content_length;
    } else {
        c->framing = F_CLOSE;
    }
    c->head_done = true;
    /* The first byte arrived: from now on the timeout is for a stalled body. */
    um_loop_timer_start(c->hw->loop, &x->ttfb, (uint64_t)(x->up->conf->timeout * 1000));
}

/* The server switched protocols: the socket leaves this client (and the loop) for the
 * tunnel, with the bytes read after the 101 head, the first of the new protocol. */
static void hand_over(struct h1conn *c, struct xfer *x, const struct um_http1_response *resp)
{
    if (!c->req_done) {
        /* The request's body was not all sent: its rest would go into the tunnel. */
        fail(c, UM_UP_BAD_HEAD, "101 before the end of the request");
        return;
    }
    int fd = c->io.fd;
    um_loop_io_set(c->hw->loop, &c->io, fd, 0);
    c->want = 0;
    struct um_transport *t = c->tls ? c->tls : um_transport_plain_new(fd);
    c->tls = NULL;
    c->io.fd = -1;
    detach(c);
    conn_close(c); /* freed after the loop turn: pre stays valid through the call */
    um__up_upgraded(x, resp, t, c->in + c->in_pos, c->in_len);
}

/* Parses the response heads in the buffer: interim (1xx) ones are passed on (100, 102,
 * 103) or dropped, the final one goes to the sink. Returns false when the connection is gone. */
static bool parse_head(struct h1conn *c, struct xfer *x)
{
    while (!c->head_done) {
        struct um_http1_response resp;
        enum um_http1_resp_err why = UM_HTTP1_RESP_MALFORMED;
        int rc = um_http1_parse_response(&c->hp, c->in + c->in_pos, c->in_len,
                                         MAX_RESPONSE_HEAD, &resp, &why);
        if (rc == UM_AGAIN)
            return true;
        if (rc == UM_ERR) {
            if (why == UM_HTTP1_RESP_TOO_LARGE)
                fail(c, UM_UP_HEAD_TOO_LARGE, "response head too large");
            else
                fail(c, UM_UP_BAD_HEAD, "malformed response head");
            return false;
        }
        c->in_pos += resp.head_len;
        c->in_len -= resp.head_len;
        um_http1_resp_parser_init(&c->hp);
        if (resp.status == 101 && x->upgrade) {
            hand_over(c, x, &resp);
            return false;
        }
        if (resp.status < 200) {
            /* Interim: passed on, never the answer. Its fields are still in c->in. */
            um__up_info(x, &resp);
            continue;
        }
        um__up_head(x, &resp);
        head_done(c, x, &resp);
    }
    return true;
}

/* Offers c->pend to the sink. Returns false when the sink is behind (reading stops). */
static bool offer(struct h1conn *c, struct xfer *x)
{
    if (c->pend_len == 0)
        return true;
    if (um__up_body(x, c->pend, c->pend_len) == 0)
        return false; /* upstream.c stopped the timer: a slow client is not the server's fault */
    c->pend_len = 0;
    return true;
}

enum { BODY_MORE, BODY_DONE, BODY_PAUSED, BODY_GONE };

/* Moves buffered body bytes to the sink. */
static int take_body(struct h1conn *c, struct xfer *x)
{
    if (!offer(c, x))
        return BODY_PAUSED;
    switch (c->framing) {
    case F_NONE:
        if (c->in_len > 0)
            c->keep = false;
        return BODY_DONE;
    case F_LENGTH: {
        if (c->remaining == 0)
            return BODY_DONE;
        size_t n = c->in_len < c->remaining ? c->in_len : (size_t)c->remaining;
        c->pend = c->in + c->in_pos;
        c->pend_len = n;
        c->in_pos += n;
        c->in_len -= n;
        c->remaining -= n;
        if (!offer(c, x))
            return BODY_PAUSED;
        if (c->remaining > 0)
            return BODY_MORE;
        if (c->in_len > 0)
            c->keep = false; /* bytes after the answer: not a connection to reuse */
        return BODY_DONE;
    }
    case F_CHUNKED: {
        while (c->in_len > 0) {
            size_t consumed = 0, out = 0;
            char *p = c->in + c->in_pos;
            int r = um_chunked_decode(&c->chunk, p, c->in_len, &consumed, &out);
            if (r == UM_ERR) {
                fail(c, UM_UP_BAD_BODY, "malformed chunked body");
                return BODY_GONE;
            }
            c->pend = p;
            c->pend_len = out;
            c->in_pos += consumed;
            c->in_len -= consumed;
            if (r == UM_DONE) {
                if (c->in_len > 0)
                    c->keep = false;
                c->framing = F_NONE; /* what is left to offer is all */
                c->in_len = 0;
                if (!offer(c, x))
                    return BODY_PAUSED;
                return BODY_DONE;
            }
            if (!offer(c, x))
                return BODY_PAUSED;
        }
        return BODY_MORE;
    }
    case F_CLOSE:
        c->pend = c->in + c->in_pos;
        c->pend_len = c->in_len;
        c->in_pos += c->in_len;
        c->in_len = 0;
        return offer(c, x) ? BODY_MORE : BODY_PAUSED;
    }
    return BODY_MORE;
}

/* Reads and handles what the server sent, until it would block, the client is behind, or
 * the answer is complete. */
static void receive(struct h1conn *c)
{
    struct xfer *x = c->x;
    for (;;) {
        if (!c->head_done && !parse_head(c, x))
            return;
        if (c->head_done) {
            int r = take_body(c, x);
            if (r == BODY_GONE)
                return;
            if (r == BODY_PAUSED) {
                if (!conn_want(c, c->want & ~(uint32_t)EPOLLIN))
                    fail_errno(c, UM_UP_RECV, "epoll_ctl", errno);
                return;
            }
            if (r == BODY_DONE) {
                if (!c->req_done)
                    c->keep = false; /* answered before the request ended */
                complete(c);
                return;
            }
        }
        /* Need more: make room, then read. */
        if (c->pend_len == 0 && c->in_pos > 0) {
            memmove(c->in, c->in + c->in_pos, c->in_len);
            c->in_pos = 0;
        }
        if (c->in_pos + c->in_len == c->in_cap) {
            size_t cap = c->in_cap * 2;
            if (cap > MAX_RESPONSE_HEAD + IN_SIZE)
                cap = MAX_RESPONSE_HEAD + IN_SIZE; /* parse_head refuses before this fills */
            if (c->pend_len > 0 || cap == c->in_cap)
                return; /* cannot happen: pend is only left when the sink is behind */
            c->in = um_realloc(c->in, cap);
            c->in_cap = cap;
        }
        ssize_t n = io_recv(c, c->in + c->in_pos + c->in_len, c->in_cap - c->in_pos - c->in_len);
        if (n > 0) {
            c->got_data = true;
            c->in_len += (size_t)n;
            if (c->head_done)
                um_loop_timer_start(c->hw->loop, &x->ttfb,
                                    (uint64_t)(x->up->conf->timeout * 1000));
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            /* Everything the server sent so far went to the sink: a live stream's bytes
             * must not wait in a compressing layer for more that may not come soon. */
            if (c->head_done)
                um__up_ran_dry(x);
            return;
        }
        if (n == 0 && c->head_done && c->framing == F_CLOSE) {
            c->keep = false;
            complete(c);
            return;
        }
        int err = n < 0 ? errno : 0;
        if (!c->got_data) {
            if (err)
                fail_errno(c, UM_UP_RECV, "recv", err);
            else
                fail(c, UM_UP_RECV, "the server closed the connection without an answer");
        } else if (err) {
            fail_errno(c, UM_UP_RECV, "recv", err);
        } else if (!c->head_done) {
            fail(c, UM_UP_BAD_HEAD, "the server closed the connection in the middle of the "
                                    "response head");
        } else {
            fail(c, UM_UP_CUT_SHORT, "the server closed the connection before the end of "
                                     "the answer");
        }
        return;
    }
}

/* ---------------------------------------------------------------- events */

/* Advances an https:// server's TLS handshake (the connect timer still runs). */
static void handshake(struct h1conn *c)
{
    int want = 0;
    int r = c->tls->ops->handshake(c->tls, &want);
    if (r == UM_OK) {
        um_loop_timer_stop(c->hw->loop, &c->timer);
        c->state = H1_ACTIVE;
        send_request(c);
        return;
    }
    if (r == UM_AGAIN) {
        if (!conn_want(c, want == UM_TRANSPORT_WANT_WRITE ? EPOLLOUT : EPOLLIN))
            fail_errno(c, UM_UP_TLS, "epoll_ctl", errno);
        return;
    }
    char why[UM_UP_ERRBUF];
    snprintf(why, sizeof(why), "TLS handshake: %s", c->tls->ops->error(c->tls));
    fail(c, um_tls_client_verify_failed(c->tls) ? UM_UP_TLS_VERIFY : UM_UP_TLS, why);
}

static void connected(struct h1conn *c)
{
    struct xfer *x = c->x;
    const struct server_state *st = &x->up->servers[x->server];
    if (st->h1.https) {
        c->tls = um_tls_client_transport_new(x->up->tls_client, c->io.fd, st->tls_host);
        if (c->tls == NULL) {
            fail(c, UM_UP_LOCAL, "TLS: out of memory");
            return;
        }
        c->keep = false; /* never back to the pool, which is for plain connections */
        c->state = H1_HANDSHAKE;
        handshake(c);
        return;
    }
    um_loop_timer_stop(c->hw->loop, &c->timer);
    c->state = H1_ACTIVE;
    /* The answer cannot be there yet: reading now would only cost a recv (EAGAIN). */
    send_request(c);
}

static void on_io(struct um_io *io, uint32_t events)
{
    struct h1conn *c = (struct h1conn *)io;
    if (c->dead)
        return;
    if (c->state == H1_IDLE) {
        /* The server closed it, or sent what nobody asked for. */
        conn_close(c);
        return;
    }
    if (c->state == H1_HANDSHAKE) {
        handshake(c);
        return;
    }
    if (c->state == H1_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(c->io.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err == 0 && (events & (EPOLLERR | EPOLLHUP)))
            err = ECONNREFUSED;
        if (err != 0) {
            fail_errno(c, UM_UP_CONNECT, "connect", err);
            return;
        }
        connected(c);
        return;
    }
    if ((events & EPOLLOUT) && !c->req_done && !send_request(c))
        return;
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        receive(c);
}

static void on_timer(struct um_timer *t)
{
    struct h1conn *c = (struct h1conn *)((char *)t - offsetof(struct h1conn, timer));
    if (c->state == H1_IDLE) {
        conn_close(c);
        return;
    }
    fail(c, UM_UP_CONNECT_TIMEOUT, "connection timed out"); /* only armed while connecting */
}

/* ---------------------------------------------------------------- attempts */

/* A connection on socket fd to the pool's server (the fuzz harness makes its own). */
static struct h1conn *conn_add(struct h1worker *hw, struct h1pool *pool, int fd)
{
    struct h1conn *c = um_calloc(1, sizeof(*c));
    c->io.cb = on_io;
    c->io.fd = fd;
    c->hw = hw;
    c->pool = pool;
    c->timer.cb = on_timer;
    c->in_cap = IN_SIZE;
    c->in = um_malloc(c->in_cap);
    c->next_all = hw->all;
    if (hw->all)
        hw->all->prev_all = c;
    hw->all = c;
    c->state = H1_CONNECTING;
    return c;
}

static struct h1conn *conn_new(struct h1worker *hw, struct h1pool *pool, struct xfer *x)
{
    int fd = socket(pool->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        /* Out of descriptors here is said in the log as it is ("Too many open files"). */
        int e = errno;
        bool local = um__up_errno_local(e);
        snprintf(x->errbuf, sizeof(x->errbuf), "%s%s", local ? "" : "socket: ", strerror(e));
        um__up_finish(x, local ? UM_UP_LOCAL : UM_UP_CONNECT);
        return NULL;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return conn_add(hw, pool, fd);
}

/* Runs x's attempt on a connection from the pool (unless new_conn) or a new one. */
static void attempt(struct xfer *x, bool new_conn)
{
    struct h1worker *hw = h1worker(x->ctx);
    struct h1pool *pool = pool_for(hw, &x->up->servers[x->server].h1);
    struct h1conn *c = NULL;
    bool reused = false;
    if (!new_conn && pool->idle && !x->up->conf->servers[x->server].https) {
        c = pool->idle;
        pool->idle = c->next_idle;
        pool->num_idle--;
        um_loop_timer_stop(hw->loop, &c->timer);
        c->state = H1_ACTIVE;
        reused = true;
    }
    bool fresh = c == NULL;
    if (fresh) {
        c = conn_new(hw, pool, x);
        if (c == NULL)
            return; /* finished */
    }
    c->x = x;
    x->conn = c;
    c->reused = reused;
    c->got_data = c->req_done = c->head_done = false;
    c->keep = true;
    c->in_pos = c->in_len = c->pend_len = 0;
    um_http1_resp_parser_init(&c->hp);
    x->paused_send = x->paused_recv = false; /* this attempt asks the sink afresh */
    put_head(c, x);
    if (!fresh) {
        send_request(c); /* the answer comes with EPOLLIN (see connected) */
        return;
    }
    if (connect(c->io.fd, (const struct sockaddr *)&pool->addr, pool->addrlen) == 0) {
        if (!conn_want(c, EPOLLIN)) {
            fail_errno(c, UM_UP_CONNECT, "epoll_ctl", errno);
            return;
        }
        connected(c);
        return;
    }
    if (errno != EINPROGRESS) {
        fail_errno(c, UM_UP_CONNECT, "connect", errno);
        return;
    }
    if (!conn_want(c, EPOLLOUT)) {
        fail_errno(c, UM_UP_CONNECT, "epoll_ctl", errno);
        return;
    }
    um_loop_timer_start(hw->loop, &c->timer, (uint64_t)(x->up->conf->connect_timeout * 1000));
}

static void h1_start(struct xfer *x)
{
    attempt(x, false);
}

static void h1_release(struct xfer *x)
{
    struct h1conn *c = x->conn;
    detach(c);
    conn_close(c);
}

static void h1_resume(struct xfer *x)
{
    struct h1conn *c = x->conn;
    um_loop_timer_start(c->hw->loop, &x->ttfb, (uint64_t)(x->up->conf->timeout * 1000));
    if (!conn_want(c, c->want | EPOLLIN)) {
        fail_errno(c, UM_UP_RECV, "epoll_ctl", errno);
        return;
    }
    receive(c);
}

static void h1_body_ready(struct xfer *x)
{
    struct h1conn *c = x->conn;
    if (c->state == H1_ACTIVE && !c->req_done)
        send_request(c);
}

const struct um_up_transport um__up_h1 = {
    .name = "Umbra's HTTP/1.1 client",
    .upgrade = true,
    .start = h1_start,
    .release = h1_release,
    .resume = h1_resume,
    .body_ready = h1_body_ready,
};
