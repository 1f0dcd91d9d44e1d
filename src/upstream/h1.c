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

#define IDLE_MS (60 * 1000)                /* an idle connection is closed after this */
#define POOL_MAX 1024                      /* idle connections per server and worker */

/* ---------------------------------------------------------------- connections */

void um__h1_conn_close(struct h1conn *c)
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
    um__up_sock_close(hw->loop, &c->io, &c->tls);
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
        free(c->trail);
        free(c);
    }
}

static void on_reap(struct um_task *t)
{
    reap(um_container_of(t, struct h1worker, reap));
}

/* Registers the connection for events (only when they change: a connection that goes
 * from request to request stays registered for EPOLLIN and costs no epoll_ctl). */
bool um__h1_conn_want(struct h1conn *c, uint32_t events)
{
    if (c->want == events)
        return true;
    if (um_loop_io_set(c->hw->loop, &c->io, c->io.fd, events) != UM_OK)
        return false;
    c->want = events;
    return true;
}

static void on_worker_stop(struct um_context *ctx, void *state)
{
    (void)ctx;
    struct h1worker *hw = state;
    while (hw->all) {
        struct h1conn *c = hw->all;
        if (c->x)
            c->x->conn = NULL;
        um__h1_conn_close(c);
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

struct um_context_slot um__h1_slot = {.name = "http/1.1 client pools", .stop = on_worker_stop};

static struct h1worker *h1worker(struct um_context *ctx)
{
    struct h1worker *hw = um_context_get(ctx, &um__h1_slot);
    if (hw)
        return hw;
    hw = um_calloc(1, sizeof(*hw));
    hw->ctx = ctx;
    hw->loop = ctx->loop;
    hw->reap.cb = on_reap;
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

void um__h1_detach(struct h1conn *c)
{
    struct xfer *x = c->x;
    x->conn = NULL;
    c->x = NULL;
}

/* The attempt failed with err (why: a few words for the log). Closes the connection.
 * An idempotent request whose kept-alive connection failed before any answer is sent again
 * on a new connection: the server most likely closed it just before the request arrived.
 * Others are not (RFC 9110 section 9.2.2: the server may have acted on them). */
void um__h1_fail(struct h1conn *c, enum um_up_err err, const char *why)
{
    struct xfer *x = c->x;
    bool again = c->reused && !c->got_data && !x->head_sent && x->idempotent &&
                 (!x->body_started || x->body);
    um__h1_detach(c);
    um__h1_conn_close(c);
    if (again) {
        x->body_pos = 0;
        um__h1_attempt(x, true);
        return;
    }
    if (x->errbuf[0] == '\0')
        snprintf(x->errbuf, sizeof(x->errbuf), "%s", why);
    um__up_finish(x, err);
}

void um__h1_fail_errno(struct h1conn *c, enum um_up_err err, const char *what, int e)
{
    char why[128];
    snprintf(why, sizeof(why), "%s: %s", what, strerror(e));
    um__h1_fail(c, err, why);
}

/* The answer is complete: the connection goes back to its pool when it can. */
void um__h1_complete(struct h1conn *c)
{
    struct xfer *x = c->x;
    struct h1worker *hw = c->hw;
    if (c->chunk.trailers && c->chunk.trailers_len > 0 && !c->chunk.trailers_cut) {
        struct um_header t[UM_HTTP1_MAX_RESPONSE_FIELDS];
        size_t n = um_chunked_trailer_fields(c->trail, c->chunk.trailers_len, t, UM_NELEMS(t));
        um__up_trailers(x, t, n);
    }
    c->chunk.trailers = NULL;
    um__h1_detach(c);
    /* A connection that named its client in a PROXY header is that client's only. */
    if (c->keep && c->tls == NULL && !x->up->conf->send_proxy && c->req_done && c->in_len == 0 &&
        c->framing != F_CLOSE && c->pool->num_idle < POOL_MAX && um__h1_conn_want(c, EPOLLIN)) {
        c->state = H1_IDLE;
        c->next_idle = c->pool->idle;
        c->pool->idle = c;
        c->pool->num_idle++;
        um_loop_timer_start(hw->loop, &c->timer, IDLE_MS);
    } else {
        um__h1_conn_close(c);
    }
    um__up_finish(x, UM_UP_OK);
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
        um__h1_send_request(c);
        return;
    }
    if (r == UM_AGAIN) {
        if (!um__h1_conn_want(c, want == UM_TRANSPORT_WANT_WRITE ? EPOLLOUT : EPOLLIN))
            um__h1_fail_errno(c, UM_UP_TLS, "epoll_ctl", errno);
        return;
    }
    char why[UM_UP_ERRBUF];
    snprintf(why, sizeof(why), "TLS handshake: %s", c->tls->ops->error(c->tls));
    um__h1_fail(c, um_tls_client_verify_failed(c->tls) ? UM_UP_TLS_VERIFY : UM_UP_TLS, why);
}

static void connected(struct h1conn *c)
{
    struct xfer *x = c->x;
    const struct server_state *st = &x->up->servers[x->server];
    if (st->h1.https) {
        c->tls = um_tls_client_transport_new(x->up->tls_client, c->io.fd, st->tls_host);
        if (c->tls == NULL) {
            um__h1_fail(c, UM_UP_LOCAL, "TLS: out of memory");
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
    um__h1_send_request(c);
}

static void on_io(struct um_io *io, uint32_t events)
{
    struct h1conn *c = (struct h1conn *)io;
    if (c->dead)
        return;
    if (c->state == H1_IDLE) {
        /* The server closed it, or sent what nobody asked for. */
        um__h1_conn_close(c);
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
            um__h1_fail_errno(c, UM_UP_CONNECT, "connect", err);
            return;
        }
        connected(c);
        return;
    }
    if ((events & EPOLLOUT) && !c->req_done && !um__h1_send_request(c))
        return;
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        um__h1_receive(c);
}

static void on_timer(struct um_timer *t)
{
    struct h1conn *c = um_container_of(t, struct h1conn, timer);
    if (c->state == H1_IDLE) {
        um__h1_conn_close(c);
        return;
    }
    um__h1_fail(c, UM_UP_CONNECT_TIMEOUT, "connection timed out"); /* only armed while connecting */
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
    c->in_cap = H1_IN_SIZE;
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
void um__h1_attempt(struct xfer *x, bool new_conn)
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
    um__h1_put_head(c, x, fresh);
    if (!fresh) {
        um__h1_send_request(c); /* the answer comes with EPOLLIN (see connected) */
        return;
    }
    if (connect(c->io.fd, (const struct sockaddr *)&pool->addr, pool->addrlen) == 0) {
        if (!um__h1_conn_want(c, EPOLLIN)) {
            um__h1_fail_errno(c, UM_UP_CONNECT, "epoll_ctl", errno);
            return;
        }
        connected(c);
        return;
    }
    if (errno != EINPROGRESS) {
        um__h1_fail_errno(c, UM_UP_CONNECT, "connect", errno);
        return;
    }
    if (!um__h1_conn_want(c, EPOLLOUT)) {
        um__h1_fail_errno(c, UM_UP_CONNECT, "epoll_ctl", errno);
        return;
    }
    um_loop_timer_start(hw->loop, &c->timer, (uint64_t)(x->up->conf->connect_timeout * 1000));
}

static void h1_start(struct xfer *x)
{
    um__h1_attempt(x, false);
}

static void h1_release(struct xfer *x)
{
    struct h1conn *c = x->conn;
    um__h1_detach(c);
    um__h1_conn_close(c);
}

static void h1_resume(struct xfer *x)
{
    struct h1conn *c = x->conn;
    um_loop_timer_start(c->hw->loop, &x->ttfb, um__up_timeout_ms(x));
    if (!um__h1_conn_want(c, c->want | EPOLLIN)) {
        um__h1_fail_errno(c, UM_UP_RECV, "epoll_ctl", errno);
        return;
    }
    um__h1_receive(c);
}

static void h1_body_ready(struct xfer *x)
{
    struct h1conn *c = x->conn;
    if (c->state == H1_ACTIVE && !c->req_done)
        um__h1_send_request(c);
}

const struct um_up_transport um__up_h1 = {
    .name = "Umbra's HTTP/1.1 client",
    .upgrade = true,
    .start = h1_start,
    .release = h1_release,
    .resume = h1_resume,
    .body_ready = h1_body_ready,
};
