/* SPDX-License-Identifier: BSD-2-Clause */
/* Tunnels (conn.h's S_TUNNEL): after a backend answered an upgrade request with 101
 * (WebSocket, or any other protocol the client asked for), the client connection and the
 * backend's become one two-way byte stream, run by the worker's loop as the connection's
 * protocol (um__conn_proto_tunnel: its run replaces drive()'s loop).
 *
 *   client --read--> up.buf --write--> backend
 *   client <--write-- down.buf <--read-- backend
 *
 * Backpressure: each direction has one buffer of at most UM__TUNNEL_BUF bytes; a side is
 * read only while its direction's buffer has room, so a peer that does not read stops
 * the reads of the other side, and the kernel's socket buffers push back from there.
 * Both sockets are edge-triggered: can_read / can_write (the client's in the connection,
 * the backend's here) remember what the last edge promised, as in conn.c.
 *
 * Half-closes pass on: when one side's read ends (EOF) and its direction's buffer is
 * written out, the other side's write half is shut (shutdown(SHUT_WR), after a TLS
 * close_notify on a TLS client connection); the tunnel closes when both directions have
 * ended, on an error of either side, after timeouts.tunnel of silence both ways, or when
 * the server stops.
 *
 * Memory: an idle tunnel holds its core (the connection's struct um__conn and this
 * struct, with the strings of its log line) and its two transports: a direction's
 * buffer is taken from the worker's pool when bytes are about to be read and given back
 * as soon as it is empty again, as an idle HTTP/1.1 connection gives back its read
 * buffer. The request state and the read buffer of the upgrade request go back when the
 * tunnel begins.
 *
 * The 101 is logged once, when the tunnel ends, with the bytes each way and its
 * duration, and counted in the metrics (tunnels begun and open, bytes each way). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "conn.h"
#include "umbra/accesslog.h"
#include "umbra/log.h"
#include "umbra/metrics.h"

#define PUMP_BUDGET 16 /* moves of each direction per turn before yielding to the others */

/* One direction: bytes read from one side, not yet written to the other. */
struct tun_dir {
    char *buf; /* UM__TUNNEL_BUF bytes from the worker's pool; NULL while empty */
    size_t pos, len; /* buf[pos..pos+len) unsent */
    bool eof;   /* the source's read said end of stream */
    bool shut;  /* ...and that end was passed on to the destination */
    bool big;   /* buf is a first one larger than the pool's (malloc'ed; freed when empty) */
    uint64_t bytes; /* written to the destination */
};

struct um__tunnel {
    struct um_io io; /* the backend's socket in the worker's loop */
    struct um__conn *c;
    struct um_transport *backend;
    bool b_can_read, b_can_write;
    bool b_rdhup; /* epoll said the backend's end (or an error) is there to read */
    bool begun; /* the connection is a tunnel (um__tunnel_begin) */
    bool closed; /* um__tunnel_close ran: the backend is closed, the buffers given back */
    struct tun_dir up;   /* client -> backend */
    struct tun_dir down; /* backend -> client */
    /* For the log line: the request's strings in one block, and what the exchange knew. */
    char *strings;
    um_str method, target, host, referer, user_agent;
    int minor_version;
    int route_slot;
    int64_t upstream_ms;
    uint64_t t_start; /* the upgrade request's first byte (loop ms) */
    uint64_t head_bytes; /* the 101 head */
};

/* ---------------------------------------------------------------- set-up */

static void on_backend_io(struct um_io *io, uint32_t events);

/* Copies the strings of x's request the log line wants into t->strings. */
static void keep_log_strings(struct um__tunnel *t, struct um__exchange *x)
{
    const struct um_request *req = &x->req;
    um_str ref = {NULL, 0}, ua = {NULL, 0};
    if (um_access_log_conf(x->config)->enabled) {
        const um_str *v = um_http1_find_header(req, "referer");
        if (v)
            ref = *v;
        v = um_http1_find_header(req, "user-agent");
        if (v)
            ua = *v;
    }
    um_str parts[5] = {req->method, req->target, req->authority, ref, ua};
    size_t n = 0;
    for (size_t i = 0; i < 5; i++)
        n += parts[i].len;
    t->strings = um_malloc(n + 1);
    um_str *dst[5] = {&t->method, &t->target, &t->host, &t->referer, &t->user_agent};
    size_t o = 0;
    for (size_t i = 0; i < 5; i++) {
        if (parts[i].len > 0)
            memcpy(t->strings + o, parts[i].base, parts[i].len);
        *dst[i] = (um_str){t->strings + o, parts[i].len};
        o += parts[i].len;
    }
    t->minor_version = req->minor_version;
}

void um__tunnel_prepare(struct um__conn *c, struct um__exchange *x,
                        struct um_transport *backend, const char *pre, size_t pre_len)
{
    UM_ASSERT(c->tun == NULL);
    struct um__tunnel *t = um_calloc(1, sizeof(*t));
    t->c = c;
    t->backend = backend;
    t->io.cb = on_backend_io;
    t->b_can_read = t->b_can_write = true;
    keep_log_strings(t, x);
    t->route_slot = x->route_slot;
    t->t_start = x->t_start;
    t->upstream_ms = x->t_head >= x->t_dispatch && x->t_dispatch > 0
                         ? (int64_t)(x->t_head - x->t_dispatch)
                         : -1;
    t->head_bytes = x->resp_bytes;
    if (pre_len > 0) {
        /* The backend's first bytes came with its 101 (at most a read buffer's worth;
         * the buffer grows past its pool's size in that rare case and is freed after). */
        t->down.big = pre_len > UM__TUNNEL_BUF;
        t->down.buf = t->down.big ? um_malloc(pre_len) : um_bufpool_get(&c->w->tunbufs);
        memcpy(t->down.buf, pre, pre_len);
        t->down.len = pre_len;
    }
    c->tun = t;
    if (um_loop_io_set(c->w->loop, &t->io, backend->fd,
                       EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET) != UM_OK) {
        /* The tunnel ends as soon as it begins (its first pump sees the error). */
        um_log_err("tunnel: epoll_ctl: %s", strerror(errno));
        t->b_can_read = t->b_can_write = false;
        t->down.eof = t->up.eof = t->down.shut = t->up.shut = true;
    }
    um_counter_add(&um_metrics_worker()->tunnels_opened, 1);
}

void um__tunnel_begin(struct um__conn *c, size_t from)
{
    struct um__tunnel *t = c->tun;
    size_t n = c->rlen > from ? c->rlen - from : 0;
    if (n > 0) {
        t->up.big = n > UM__TUNNEL_BUF;
        t->up.buf = t->up.big ? um_malloc(n) : um_bufpool_get(&c->w->tunbufs);
        memcpy(t->up.buf, c->rbuf + from, n);
        t->up.len = n;
    }
    c->rpos = c->rlen = c->bpos = 0;
    um__conn_req_release(c);
    um__conn_rbuf_release(c);
    c->state = S_TUNNEL;
    c->proto = &um__conn_proto_tunnel;
    t->begun = true;
    um__tq_arm(c->w, c, UM__TQ_TUNNEL);
}

/* ---------------------------------------------------------------- moving bytes */

/* Gives a direction's buffer back (empty, or the tunnel ends). */
static void dir_release(struct um__worker *w, struct tun_dir *d)
{
    if (d->buf == NULL)
        return;
    if (d->big)
        free(d->buf);
    else
        um_bufpool_put(&w->tunbufs, d->buf);
    d->buf = NULL;
    d->big = false;
    d->pos = d->len = 0;
}

enum { MOVE_IDLE, MOVE_PROGRESS, MOVE_ERR };

/* Moves what it can of one direction: reads src into d's buffer while there is room
 * (*src_ok: src may have bytes), writes the buffer to dst (*dst_ok: dst may take bytes),
 * and passes an end on once everything before it is written. */
static int move(struct um__worker *w, struct tun_dir *d, struct um_transport *src, bool *src_ok,
                bool src_hup, struct um_transport *dst, bool *dst_ok, um_counter *count)
{
    int result = MOVE_IDLE;
    if (d->big && d->len == 0)
        dir_release(w, d);
    /* A big first buffer is only drained, never read into. */
    size_t cap = d->big ? 0 : UM__TUNNEL_BUF;
    if (!d->eof && *src_ok && d->pos + d->len < cap) {
        if (d->buf == NULL)
            d->buf = um_bufpool_get(&w->tunbufs);
        if (d->len == 0)
            d->pos = 0;
        int want = 0;
        ssize_t n = src->ops->read(src, d->buf + d->pos + d->len, cap - d->pos - d->len, &want);
        if (n > 0) {
            d->len += (size_t)n;
            /* Drained: the next bytes raise a new edge; but an end that came with the
             * bytes (the same edge) is only read by reading again. */
            if (want == UM_TRANSPORT_WANT_READ && !src_hup)
                *src_ok = false;
            result = MOVE_PROGRESS;
        } else if (n == 0) {
            d->eof = true;
            *src_ok = false;
            result = MOVE_PROGRESS;
        } else if (n == UM_AGAIN) {
            *src_ok = false;
        } else {
            return MOVE_ERR;
        }
    }
    if (d->len > 0 && *dst_ok) {
        int want = 0;
        ssize_t n = dst->ops->write(dst, d->buf + d->pos, d->len, 0, &want);
        if (n > 0) {
            d->pos += (size_t)n;
            d->len -= (size_t)n;
            d->bytes += (uint64_t)n;
            um_counter_add(count, (uint64_t)n);
            result = MOVE_PROGRESS;
            if (d->len == 0)
                d->pos = 0;
            else if (!d->big && (d->pos + d->len == cap || d->pos >= cap / 2)) {
                memmove(d->buf, d->buf + d->pos, d->len); /* room to read into */
                d->pos = 0;
            }
        } else if (n == UM_AGAIN) {
            *dst_ok = false;
        } else {
            return MOVE_ERR;
        }
    }
    if (d->eof && d->len == 0 && !d->shut) {
        /* The source said all it will say: so do we, to the destination, keeping the
         * other direction open (a half-close). */
        if (dst->ops->shutdown) {
            int want;
            dst->ops->shutdown(dst, &want);
        }
        shutdown(dst->fd, SHUT_WR);
        d->shut = true;
        result = MOVE_PROGRESS;
    }
    return result;
}

/* Moves bytes both ways until neither side can go on, then gives empty buffers back and
 * re-arms the silence timer when anything moved. */
static void pump(struct um__conn *c)
{
    struct um__tunnel *t = c->tun;
    struct um__worker *w = c->w;
    struct um_metrics_worker *m = um_metrics_worker();
    bool moved = false;
    int turn;
    for (turn = 0; turn < PUMP_BUDGET; turn++) {
        bool progress = false;
        /* The 101 head (and nothing after it) may still be queued for the client. */
        if (um__outq_pending(&c->out) && c->can_write) {
            int want = 0;
            int r = um__outq_flush(&c->out, c->t, &want);
            if (r == UM_ERR)
                goto fail;
            if (r == UM_AGAIN)
                c->can_write = false;
            progress = true;
        }
        bool head_out = !um__outq_pending(&c->out);
        if (head_out)
            um__outq_shrink(&c->out);
        int r = move(w, &t->up, c->t, &c->can_read, c->rdhup, t->backend, &t->b_can_write,
                     &m->tunnel_bytes_up);
        if (r == MOVE_ERR)
            goto fail;
        progress |= r == MOVE_PROGRESS;
        bool cw = c->can_write && head_out;
        r = move(w, &t->down, t->backend, &t->b_can_read, t->b_rdhup, c->t, &cw,
                 &m->tunnel_bytes_down);
        if (head_out)
            c->can_write = cw;
        if (r == MOVE_ERR)
            goto fail;
        progress |= r == MOVE_PROGRESS;
        if (t->up.shut && t->down.shut) {
            um__conn_close(c);
            return;
        }
        if (!progress)
            break;
        moved = true;
    }
    if (turn == PUMP_BUDGET)
        um__worker_ready(w, c); /* more to do: after the other connections' turns */
    if (t->up.len == 0)
        dir_release(w, &t->up);
    if (t->down.len == 0)
        dir_release(w, &t->down);
    if (moved)
        um__tq_arm(w, c, UM__TQ_TUNNEL);
    return;
fail:
    um_log_debug("tunnel: %s:%d: a side failed; closing", c->peer_ip, c->peer_port);
    um__conn_close(c);
}

static void tunnel_run(struct um__conn *c)
{
    if (c->draining) {
        /* Its 101 came after the server began to stop (tunnel_drain). */
        um__conn_close(c);
        return;
    }
    pump(c);
}

static void on_backend_io(struct um_io *io, uint32_t events)
{
    struct um__tunnel *t = (struct um__tunnel *)(void *)io;
    struct um__conn *c = t->c;
    if (c->closed)
        return;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        t->b_can_read = true;
    if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
        t->b_can_write = true;
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        t->b_rdhup = true;
    if (!t->begun) {
        um__conn_wake(c); /* the 101 is still on its way: the tunnel begins after it */
        return;
    }
    uint64_t log_conn = um_log_set_conn(c->id);
    c->in_drive = true;
    pump(c);
    c->in_drive = false;
    um_log_set_conn(log_conn);
}

/* ---------------------------------------------------------------- the end */

/* The access log line of the 101, with what the tunnel passed. */
static void log_tunnel(struct um__conn *c, struct um__tunnel *t)
{
    struct um_access_rec r;
    memset(&r, 0, sizeof(r));
    r.client_ip = c->peer_ip;
    r.method = t->method;
    r.target = t->target;
    r.minor_version = t->minor_version;
    r.host = t->host;
    r.referer = t->referer;
    r.user_agent = t->user_agent;
    r.status = 101;
    r.body_bytes = t->down.bytes;
    r.bytes_out = t->head_bytes + t->down.bytes;
    r.upstream_ms = t->upstream_ms;
    r.duration_ms = um_loop_now(c->w->loop) - t->t_start;
    r.route_slot = t->route_slot;
    r.worker = c->w->id;
    r.conn_id = c->id;
    r.tunnel = true;
    r.tunnel_up = t->up.bytes;
    r.tunnel_down = t->down.bytes;
    um_access_log_request(&c->w->ctx, c->config, &r);
}

void um__tunnel_close(struct um__conn *c)
{
    struct um__tunnel *t = c->tun;
    if (t == NULL || t->closed)
        return;
    t->closed = true;
    struct um__worker *w = c->w;
    if (t->begun)
        log_tunnel(c, t);
    um_counter_add(&um_metrics_worker()->tunnels_closed, 1);
    um_loop_io_set(w->loop, &t->io, t->backend->fd, 0);
    t->backend->ops->close(t->backend);
    t->backend = NULL;
    dir_release(w, &t->up);
    dir_release(w, &t->down);
}

void um__tunnel_free(struct um__conn *c)
{
    struct um__tunnel *t = c->tun;
    if (t == NULL)
        return;
    um__tunnel_close(c);
    c->tun = NULL;
    free(t->strings);
    free(t);
}

/* ---------------------------------------------------------------- the protocol table */

static enum input_result tunnel_process_input(struct um__conn *c)
{
    (void)c;
    return IN_DONE; /* never called: run moves the bytes */
}

static bool tunnel_on_drained(struct um__conn *c)
{
    (void)c;
    return false;
}

static void tunnel_arm_timer(struct um__conn *c)
{
    um__tq_arm(c->w, c, UM__TQ_TUNNEL);
}

static void tunnel_on_timeout(struct um__conn *c)
{
    uint64_t log_conn = um_log_set_conn(c->id);
    um_log_debug("tunnel: %s:%d: silent for %gs; closing", c->peer_ip, c->peer_port,
                 c->config->timeouts.tunnel);
    um_log_set_conn(log_conn);
    um__conn_close(c);
}

/* A stopping server does not wait for tunnels: they may last for hours. */
static void tunnel_drain(struct um__conn *c)
{
    um__conn_close(c);
}

/* The tunnel's memory stays until dispose: the backend's io is in it, and an event of
 * the same epoll batch may still be on its way to on_backend_io (which sees c closed). */
static void tunnel_on_close(struct um__conn *c)
{
    um__tunnel_close(c);
}

static void tunnel_dispose(struct um__conn *c)
{
    um__tunnel_free(c);
}

const struct um__conn_proto um__conn_proto_tunnel = {
    .name = "tunnel",
    .process_input = tunnel_process_input,
    .on_drained = tunnel_on_drained,
    .arm_timer = tunnel_arm_timer,
    .on_timeout = tunnel_on_timeout,
    .drain = tunnel_drain,
    .on_close = tunnel_on_close,
    .dispose = tunnel_dispose,
    .run = tunnel_run,
};
