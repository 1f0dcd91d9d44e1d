/* SPDX-License-Identifier: BSD-2-Clause */
/* Umbra's own HTTP/2 client: the upstream's transport for the servers of an upstream with
 * protocol = "h2" (http:// at an IP address, prior knowledge: RFC 9113 section 3.3).
 *
 * Each worker keeps, per server address, a few connections, each an nghttp2 client session
 * driven by the worker's loop like the HTTP/1.1 client's sockets: what arrives goes to
 * nghttp2_session_mem_recv at once, and the frames it queues are sent at the end of the
 * loop turn (one send for many streams' frames). An attempt is a stream on the first
 * connection with room under the server's SETTINGS_MAX_CONCURRENT_STREAMS; a new
 * connection opens only when all are full.
 *
 * A stream refused before the server processed it (GOAWAY above its last stream id,
 * REFUSED_STREAM) is sent again on a new connection, when its body can be sent again;
 * any other reset, or a connection lost, fails the attempt as the HTTP/1.1 client's
 * errors do (502 before the head, a cut body after), and upstream.c counts it against the
 * server. Flow control is in h2_session.c. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/log.h"

#define IDLE_MS (60 * 1000)        /* a connection without streams is closed after this */
#define PING_MS (5 * 1000)         /* an idle connection is asked for a PING this often... */
#define PING_WAIT_MS (3 * 1000)    /* ...and closed when its answer takes longer than this */
#define MAX_STREAMS 256            /* per connection, even when the server allows more */
#define RBUF_SIZE (32 * 1024)
#define WBUF_HIGH (64 * 1024)      /* frames gathered before a send */
#define READS_PER_EVENT 8          /* so that one busy connection cannot hold the loop */
#define MAX_REPLAYS 3              /* refused streams sent again, per fetch */

/* ---------------------------------------------------------------- streams */

static void stream_link(struct h2stream *s, struct h2stream **list)
{
    s->list = list;
    s->prev = NULL;
    s->next = *list;
    if (*list)
        (*list)->prev = s;
    *list = s;
}

static void stream_unlink(struct h2stream *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        *s->list = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->list = NULL;
}

static void stream_free(struct h2stream *s)
{
    stream_unlink(s);
    free(s->pend);
    free(s->hbuf);
    free(s);
}

/* Frees s once neither its attempt nor nghttp2 may reach it. */
void um__h2c_stream_maybe_free(struct h2stream *s)
{
    if (s->x == NULL && (s->closed || s->c == NULL))
        stream_free(s);
}

void um__h2c_detach(struct h2stream *s)
{
    s->x->conn = NULL;
    s->x = NULL;
}

/* The answer is complete and the sink has all of it: the attempt ends well. */
void um__h2c_try_finish(struct h2stream *s)
{
    struct xfer *x = s->x;
    if (x == NULL || !s->ended || s->pend_len > 0 || !s->head_done)
        return;
    um__h2c_pass_trailers(s);
    um__h2c_detach(s);
    if (!s->closed && s->c && !s->end_sent) {
        /* The server answered before the request's end: the rest is not wanted. */
        nghttp2_submit_rst_stream(s->c->session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
        um__h2c_schedule(s->c);
    }
    um__h2c_stream_maybe_free(s);
    um__up_finish(x, UM_UP_OK);
}

/* The server did not process s's request: it goes again on another connection (or the same
 * one, for a stream refused without GOAWAY: RFC 9113 section 8.7) when its body can be sent
 * again, at most MAX_REPLAYS times, else the attempt fails (why). */
bool um__h2c_replay(struct h2stream *s, const char *why)
{
    struct xfer *x = s->x;
    um__h2c_detach(s);
    um__h2c_stream_maybe_free(s);
    if (x->h2_retries < MAX_REPLAYS && (!x->body_started || x->body)) {
        x->h2_retries++;
        x->body_pos = 0;
        um__h2c_attempt(x, false); /* not on a connection that said GOAWAY */
        return true;
    }
    snprintf(x->errbuf, sizeof(x->errbuf), "%s", why);
    um__up_finish(x, UM_UP_RECV);
    return false;
}

/* ---------------------------------------------------------------- connections */

static void on_task(struct um_task *t);

static void on_worker_stop(struct um_context *ctx, void *state);

struct um_context_slot um__h2_slot = {.name = "http/2 client connections", .stop = on_worker_stop};

static struct h2worker *h2worker(struct um_context *ctx)
{
    struct h2worker *hw = um_context_get(ctx, &um__h2_slot);
    if (hw)
        return hw;
    hw = um_calloc(1, sizeof(*hw));
    hw->ctx = ctx;
    hw->loop = ctx->loop;
    hw->task.cb = on_task;
    hw->cbs = um__h2c_callbacks();
    hw->rbuf = um_malloc(RBUF_SIZE);
    um_context_set(ctx, &um__h2_slot, hw);
    return hw;
}

/* The pool of a server: its address, and for https:// the name its certificate must have
 * (two names at one address are two servers). */
static struct h2pool *pool_for(struct h2worker *hw, const struct server_state *st)
{
    const struct um_upstream_server *a = &st->h1;
    const char *host = a->https ? st->tls_host : "";
    for (struct h2pool *p = hw->pools; p; p = p->next)
        if (p->addrlen == a->addrlen && memcmp(&p->addr, &a->addr, a->addrlen) == 0 &&
            p->https == a->https && strcmp(p->tls_host, host) == 0)
            return p;
    struct h2pool *p = um_calloc(1, sizeof(*p));
    memcpy(&p->addr, &a->addr, a->addrlen);
    p->addrlen = a->addrlen;
    p->https = a->https;
    snprintf(p->tls_host, sizeof(p->tls_host), "%s", host);
    p->next = hw->pools;
    hw->pools = p;
    return p;
}

void um__h2c_schedule(struct h2conn *c)
{
    if (c->dead || c->queued)
        return;
    c->queued = true;
    c->next_flush = c->hw->flushq;
    c->hw->flushq = c;
    um_loop_defer(c->hw->loop, &c->hw->task);
}

static bool conn_want(struct h2conn *c, uint32_t events)
{
    if (c->want == events)
        return true;
    if (um_loop_io_set(c->hw->loop, &c->io, c->io.fd, events) != UM_OK)
        return false;
    c->want = events;
    return true;
}

/* Closes c's socket and takes it out of its pool: no new stream goes there. Its streams
 * are to be detached by the caller; c is freed after the loop turn (an event, or a
 * callback of its session, may still be running). A complete answer that the sink has not
 * all taken stays, as an orphan, with its attempt. */
static void conn_close(struct h2conn *c)
{
    struct h2worker *hw = c->hw;
    if (c->dead)
        return;
    if (c->pool) {
        struct h2conn **p = &c->pool->conns;
        while (*p != c)
            p = &(*p)->next_pool;
        *p = c->next_pool;
        c->pool = NULL;
    }
    um_loop_timer_stop(hw->loop, &c->timer);
    um__up_sock_close(hw->loop, &c->io, &c->tls);
    if (c->prev_all)
        c->prev_all->next_all = c->next_all;
    else
        hw->all = c->next_all;
    if (c->next_all)
        c->next_all->prev_all = c->prev_all;
    for (struct h2stream *s = c->streams, *next; s; s = next) {
        next = s->next;
        if (s->x && s->ended && s->head_done) {
            stream_unlink(s);
            s->c = NULL;
            stream_link(s, &hw->orphans);
        }
    }
    c->dead = true;
    c->next_all = hw->dead;
    hw->dead = c;
    um_loop_defer(hw->loop, &hw->task);
}

void um__h2c_conn_fail(struct h2conn *c, enum um_up_err err, const char *why)
{
    conn_close(c);
    /* Each attempt may start another (a retry) on another connection: take them one by
     * one from the list, which conn_close left with the ones still waiting for answers. */
    for (;;) {
        struct h2stream *s = c->streams;
        while (s && s->x == NULL)
            s = s->next;
        if (s == NULL)
            break;
        struct xfer *x = s->x;
        um__h2c_detach(s);
        if (x->errbuf[0] == '\0')
            snprintf(x->errbuf, sizeof(x->errbuf), "%s", why);
        um__up_finish(x, x->head_sent && err != UM_UP_TIMEOUT ? UM_UP_CUT_SHORT : err);
    }
}

static void conn_fail_errno(struct h2conn *c, enum um_up_err err, const char *what, int e)
{
    char why[128];
    snprintf(why, sizeof(why), "%s: %s", what, strerror(e));
    um__h2c_conn_fail(c, err, why);
}

static void conn_free(struct h2conn *c)
{
    while (c->streams) {
        struct h2stream *s = c->streams;
        if (s->x) /* only at the worker's stop */
            um__h2c_detach(s);
        stream_free(s);
    }
    if (c->session)
        nghttp2_session_del(c->session);
    free(c->wbuf);
    free(c);
}

static ssize_t io_send(struct h2conn *c, const void *p, size_t n)
{
    return um__up_io_send(c->tls, c->io.fd, p, n);
}

static ssize_t io_recv(struct h2conn *c, void *p, size_t n)
{
    return um__up_io_recv(c->tls, c->io.fd, p, n);
}

/* Gathers the frames nghttp2 has queued and sends them, until the socket would block. */
static void conn_send(struct h2conn *c)
{
    while (!c->dead) {
        while (c->wlen < WBUF_HIGH) {
            const uint8_t *p;
            ssize_t n = nghttp2_session_mem_send(c->session, &p);
            if (n < 0) {
                um__h2c_conn_fail(c, UM_UP_SEND, nghttp2_strerror((int)n));
                return;
            }
            if (n == 0 || c->dead)
                break;
            if (c->wlen + (size_t)n > c->wcap) {
                c->wcap = c->wlen + (size_t)n > 2 * WBUF_HIGH ? c->wlen + (size_t)n : 2 * WBUF_HIGH;
                c->wbuf = um_realloc(c->wbuf, c->wcap);
            }
            memcpy(c->wbuf + c->wlen, p, (size_t)n);
            c->wlen += (size_t)n;
        }
        if (c->dead)
            return;
        if (c->wpos == c->wlen)
            break;
        ssize_t n = io_send(c, c->wbuf + c->wpos, c->wlen - c->wpos);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                if (!conn_want(c, EPOLLIN | EPOLLOUT))
                    conn_fail_errno(c, UM_UP_SEND, "epoll_ctl", errno);
                return;
            }
            conn_fail_errno(c, UM_UP_SEND, "send", errno);
            return;
        }
        c->wpos += (size_t)n;
        if (c->wpos == c->wlen)
            c->wpos = c->wlen = 0;
        else if (c->wpos > WBUF_HIGH) {
            memmove(c->wbuf, c->wbuf + c->wpos, c->wlen - c->wpos);
            c->wlen -= c->wpos;
            c->wpos = 0;
        }
    }
    if (c->dead)
        return;
    if (!conn_want(c, EPOLLIN)) {
        conn_fail_errno(c, UM_UP_SEND, "epoll_ctl", errno);
        return;
    }
    /* Nothing more to say or hear (after a GOAWAY, once its streams ended). */
    if (!nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session)) {
        um__h2c_conn_fail(c, UM_UP_RECV, "the connection was closed");
        return;
    }
    if (c->nopen == 0 && !um_loop_timer_armed(&c->timer)) {
        c->idle_since = um_loop_now(c->hw->loop);
        um_loop_timer_start(c->hw->loop, &c->timer, PING_MS);
    }
    else if (c->nopen > 0 && um_loop_timer_armed(&c->timer))
        um_loop_timer_stop(c->hw->loop, &c->timer);
}

static void on_task(struct um_task *t)
{
    struct h2worker *hw = um_container_of(t, struct h2worker, task);
    while (hw->flushq) {
        struct h2conn *c = hw->flushq;
        hw->flushq = c->next_flush;
        c->queued = false;
        if (!c->dead && c->state == H2_ACTIVE)
            conn_send(c);
    }
    while (hw->dead) {
        struct h2conn *c = hw->dead;
        hw->dead = c->next_all;
        conn_free(c);
    }
}

/* Reads what the server sent and hands it to nghttp2, whose callbacks (h2_session.c) pass
 * it on; the frames it queued in answer go at the turn's end. */
static void conn_read(struct h2conn *c)
{
    struct h2worker *hw = c->hw;
    for (int i = 0; i < READS_PER_EVENT && !c->dead; i++) {
        ssize_t n = io_recv(c, hw->rbuf, RBUF_SIZE);
        if (n > 0) {
            ssize_t rv = nghttp2_session_mem_recv(c->session, (const uint8_t *)hw->rbuf, (size_t)n);
            if (rv < 0) {
                char why[96];
                snprintf(why, sizeof(why), "HTTP/2: %s", nghttp2_strerror((int)rv));
                um__h2c_conn_fail(c, UM_UP_RECV, why);
                return;
            }
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n < 0)
            conn_fail_errno(c, UM_UP_RECV, "recv", errno);
        else
            um__h2c_conn_fail(c, UM_UP_RECV, "the server closed the connection");
        return;
    }
    if (c->dead)
        return;
    /* What arrived went to the sinks: a live stream's bytes must not wait in a layer that
     * holds some back (compression) for more that may not come soon. */
    for (struct h2stream *s = c->streams; s; s = s->next)
        if (s->x && s->head_done && s->pend_len == 0)
            um__up_ran_dry(s->x);
    um__h2c_schedule(c);
}

/* The connection is up (TCP, and TLS with "h2" agreed by ALPN): what nghttp2 queued goes. */
static void conn_ready(struct h2conn *c)
{
    um_loop_timer_stop(c->hw->loop, &c->timer);
    c->state = H2_ACTIVE;
    conn_send(c); /* the preface, SETTINGS and the requests queued meanwhile */
}

/* Advances an https:// server's TLS handshake (the connect timer still runs). */
static void handshake(struct h2conn *c)
{
    int want = 0;
    int r = c->tls->ops->handshake(c->tls, &want);
    if (r == UM_OK) {
        if (!um_tls_client_is_h2(c->tls)) {
            um__h2c_conn_fail(c, UM_UP_TLS, "the server did not choose h2 by ALPN");
            return;
        }
        conn_ready(c);
        return;
    }
    if (r == UM_AGAIN) {
        if (!conn_want(c, want == UM_TRANSPORT_WANT_WRITE ? EPOLLOUT : EPOLLIN))
            conn_fail_errno(c, UM_UP_TLS, "epoll_ctl", errno);
        return;
    }
    char why[UM_UP_ERRBUF];
    snprintf(why, sizeof(why), "TLS handshake: %s", c->tls->ops->error(c->tls));
    um__h2c_conn_fail(c, um_tls_client_verify_failed(c->tls) ? UM_UP_TLS_VERIFY : UM_UP_TLS, why);
}

/* TCP is connected: TLS next for an https:// server. */
static void connected(struct h2conn *c)
{
    if (c->tls) {
        c->state = H2_HANDSHAKE;
        handshake(c);
        return;
    }
    conn_ready(c);
}

static void on_io(struct um_io *io, uint32_t events)
{
    struct h2conn *c = (struct h2conn *)io;
    if (c->dead)
        return;
    if (c->state == H2_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(c->io.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err == 0 && (events & (EPOLLERR | EPOLLHUP)))
            err = ECONNREFUSED;
        if (err != 0) {
            conn_fail_errno(c, UM_UP_CONNECT, "connect", err);
            return;
        }
        connected(c);
        return;
    }
    if (c->state == H2_HANDSHAKE) {
        handshake(c);
        return;
    }
    if (events & EPOLLOUT)
        um__h2c_schedule(c);
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        conn_read(c);
}

/* A PING's answer arrived: the connection is alive; idle, it is asked again later. */
void um__h2c_pinged(struct h2conn *c)
{
    c->ping_out = false;
    if (c->nopen == 0 && !c->dead)
        um_loop_timer_start(c->hw->loop, &c->timer, PING_MS);
}

static void on_timer(struct um_timer *t)
{
    struct h2conn *c = um_container_of(t, struct h2conn, timer);
    if (c->state != H2_ACTIVE) {
        um__h2c_conn_fail(c, UM_UP_CONNECT_TIMEOUT, "connection timed out");
        return;
    }
    if (c->nopen > 0)
        return;
    if (c->ping_out) {
        /* A server that does not answer a PING would not answer the next request either:
         * better found out now than after that request's timeout. */
        um__h2c_conn_fail(c, UM_UP_RECV, "no answer to PING");
        return;
    }
    if (um_loop_now(c->hw->loop) - c->idle_since < IDLE_MS) {
        uint8_t data[8] = {0};
        if (nghttp2_submit_ping(c->session, NGHTTP2_FLAG_NONE, data) == 0) {
            c->ping_out = true;
            um__h2c_schedule(c);
            um_loop_timer_start(c->hw->loop, &c->timer, PING_WAIT_MS);
            return;
        }
    }
    /* Idle long enough: a GOAWAY said, and closed (the server may have closed its side
     * already). */
    nghttp2_session_terminate_session(c->session, NGHTTP2_NO_ERROR);
    const uint8_t *p;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(c->session, &p)) > 0)
        if (io_send(c, p, (size_t)n) != n)
            break;
    um__h2c_conn_fail(c, UM_UP_RECV, "idle");
}

/* A new connection to pool's server, connecting. NULL: x has been finished. */
static struct h2conn *conn_new(struct h2worker *hw, struct h2pool *pool, struct xfer *x)
{
    int fd = socket(pool->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        bool local = um__up_errno_local(e);
        snprintf(x->errbuf, sizeof(x->errbuf), "%s%s", local ? "" : "socket: ", strerror(e));
        um__up_finish(x, local ? UM_UP_LOCAL : UM_UP_CONNECT);
        return NULL;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct h2conn *c = um_calloc(1, sizeof(*c));
    c->io.cb = on_io;
    c->io.fd = fd;
    c->hw = hw;
    c->timer.cb = on_timer;
    if (hw->cbs == NULL || !um__h2c_session_new(c)) {
        close(fd);
        free(c);
        snprintf(x->errbuf, sizeof(x->errbuf), "HTTP/2: no session (out of memory)");
        um__up_finish(x, UM_UP_LOCAL);
        return NULL;
    }
    if (pool->https) {
        c->tls = x->up->tls_client ? um_tls_client_transport_new_h2(x->up->tls_client, fd,
                                                                    pool->tls_host)
                                   : NULL;
        if (c->tls == NULL) {
            nghttp2_session_del(c->session);
            close(fd);
            free(c);
            snprintf(x->errbuf, sizeof(x->errbuf), "%s",
                     x->up->tls_client ? "TLS: out of memory" : "no TLS client (see the log)");
            um__up_finish(x, x->up->tls_client ? UM_UP_LOCAL : UM_UP_TLS);
            return NULL;
        }
    }
    c->pool = pool;
    c->next_pool = pool->conns;
    pool->conns = c;
    c->next_all = hw->all;
    if (hw->all)
        hw->all->prev_all = c;
    hw->all = c;
    c->state = H2_CONNECTING;
    return c;
}

/* Starts connecting c. Returns false when it failed (its streams have been failed). */
static bool conn_connect(struct h2conn *c, uint64_t timeout_ms)
{
    if (connect(c->io.fd, (const struct sockaddr *)&c->pool->addr, c->pool->addrlen) == 0) {
        if (!conn_want(c, EPOLLIN)) {
            conn_fail_errno(c, UM_UP_CONNECT, "epoll_ctl", errno);
            return false;
        }
        um_loop_timer_start(c->hw->loop, &c->timer, timeout_ms); /* for the handshake */
        connected(c);
        return !c->dead;
    }
    if (errno != EINPROGRESS) {
        conn_fail_errno(c, UM_UP_CONNECT, "connect", errno);
        return false;
    }
    if (!conn_want(c, EPOLLOUT)) {
        conn_fail_errno(c, UM_UP_CONNECT, "epoll_ctl", errno);
        return false;
    }
    um_loop_timer_start(c->hw->loop, &c->timer, timeout_ms);
    return true;
}

/* How many streams c may carry at once. */
static size_t conn_limit(const struct h2conn *c)
{
    uint32_t n = c->got_settings ? nghttp2_session_get_remote_settings(
                                       c->session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
                                 : 100;
    return n < MAX_STREAMS ? n : MAX_STREAMS;
}

/* ---------------------------------------------------------------- attempts */

/* Runs x's attempt as a stream on a connection with room (unless new_conn) or a new one. */
void um__h2c_attempt(struct xfer *x, bool new_conn)
{
    struct h2worker *hw = h2worker(x->ctx);
    const struct server_state *st = &x->up->servers[x->server];
    if (st->h1.addrlen == 0) {
        snprintf(x->errbuf, sizeof(x->errbuf), "its name did not resolve when the upstream "
                                               "was made");
        um__up_finish(x, UM_UP_CONNECT);
        return;
    }
    struct h2pool *pool = pool_for(hw, st);
    struct h2conn *c = NULL;
    if (!new_conn)
        for (c = pool->conns; c; c = c->next_pool)
            if (!c->goaway && c->nopen < conn_limit(c))
                break;
    bool fresh = c == NULL;
    if (fresh && (c = conn_new(hw, pool, x)) == NULL)
        return; /* finished */
    struct h2stream *s = um_calloc(1, sizeof(*s));
    s->c = c;
    s->x = x;
    s->content_length = -1;
    stream_link(s, &c->streams);
    x->paused_send = x->paused_recv = false; /* this attempt asks the sink afresh */
    if (!um__h2c_submit(s, x)) {
        s->x = NULL;
        s->closed = true;
        stream_free(s);
        if (fresh)
            um__h2c_conn_fail(c, UM_UP_OTHER, "HTTP/2: the request could not be made");
        um__up_finish(x, UM_UP_OTHER);
        return;
    }
    x->conn = s;
    c->nopen++;
    if (um_loop_timer_armed(&c->timer) && c->state == H2_ACTIVE)
        um_loop_timer_stop(hw->loop, &c->timer); /* no longer idle */
    if (fresh)
        conn_connect(c, (uint64_t)(x->up->conf->connect_timeout * 1000));
    else
        um__h2c_schedule(c);
}

static void h2_start(struct xfer *x)
{
    um__h2c_attempt(x, false);
}

static void h2_release(struct xfer *x)
{
    struct h2stream *s = x->conn;
    um__h2c_detach(s);
    if (!s->closed && s->c && !s->c->dead) {
        nghttp2_submit_rst_stream(s->c->session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
        um__h2c_schedule(s->c);
    }
    free(s->pend);
    s->pend = NULL;
    s->pend_len = s->pend_cap = 0;
    um__h2c_stream_maybe_free(s);
}

/* The sink has room again: the held-back body goes first, and its window is given back. */
static void h2_resume(struct xfer *x)
{
    struct h2stream *s = x->conn;
    if (!s->ended) um_loop_timer_start(x->loop, &x->ttfb, um__up_timeout_ms(x));
    if (s->pend_len > 0) {
        size_t n = s->pend_len;
        if (um__up_body(x, s->pend, n) == 0)
            return; /* still behind */
        s->pend_len = 0;
        if (s->c && !s->closed) {
            nghttp2_session_consume_stream(s->c->session, s->id, n);
            um__h2c_schedule(s->c);
        }
    }
    if (s->ended) {
        um__h2c_try_finish(s);
        return;
    }
    um__up_ran_dry(x);
}

static void h2_body_ready(struct xfer *x)
{
    struct h2stream *s = x->conn;
    if (!s->deferred || s->c == NULL || s->closed)
        return;
    s->deferred = false;
    nghttp2_session_resume_data(s->c->session, s->id);
    um__h2c_schedule(s->c);
}

static void on_worker_stop(struct um_context *ctx, void *state)
{
    (void)ctx;
    struct h2worker *hw = state;
    while (hw->all) {
        struct h2conn *c = hw->all;
        conn_close(c);
    }
    hw->flushq = NULL;
    while (hw->dead) {
        struct h2conn *c = hw->dead;
        hw->dead = c->next_all;
        conn_free(c);
    }
    while (hw->orphans) {
        struct h2stream *s = hw->orphans;
        if (s->x)
            um__h2c_detach(s);
        stream_free(s);
    }
    while (hw->pools) {
        struct h2pool *p = hw->pools;
        hw->pools = p->next;
        free(p);
    }
    if (hw->cbs)
        nghttp2_session_callbacks_del(hw->cbs);
    free(hw->rbuf);
    um_context_set(hw->ctx, &um__h2_slot, NULL);
    free(hw);
}

const struct um_up_transport um__up_h2 = {
    .name = "Umbra's HTTP/2 client",
    .upgrade = false,
    .start = h2_start,
    .release = h2_release,
    .resume = h2_resume,
    .body_ready = h2_body_ready,
};
