/* SPDX-License-Identifier: BSD-2-Clause */
/* A client connection (conn.h): accepts the socket, drives reads and writes through its
 * transport (plain or TLS, transport.h), keeps its timers, and closes it. The exchange
 * (exchange.h) owns the request and its response; the connection's protocol table frames
 * them: HTTP/1.1 (conn_http1.c, and the table at the end of this file) or HTTP/2
 * (conn_h2.c).
 *
 * The socket is registered once, edge-triggered, for both directions; can_read and
 * can_write remember what the last edge promised, so no epoll_ctl call is made per
 * request. drive() moves a connection as far as it can go: parse what is buffered, write
 * what is queued, read more; a connection that used up its turn's budget is put on the
 * worker's ready list, so that one busy client cannot starve the others. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "umbra/log.h"
#include "umbra/metrics.h"
#include "umbra/proxyproto.h"

#define TURN_BUDGET 32 /* drive() iterations before yielding */

/* ---------------------------------------------------------------- idle connections
 *
 * A keep-alive connection spends most of its life waiting for its next request. While it
 * waits with nothing buffered and nothing queued, it holds only its core (struct um__conn,
 * a few hundred bytes) and its transport: the read buffer, the request state (struct
 * um__conn_req: the parsed head's fields and the exchange, about 4 KiB) and the output
 * queue's memory go back to the worker's pools, and are taken again when bytes arrive.
 * Taking and giving back is a pointer move (bufpool.h), so a client that sends request
 * after request on one connection costs no malloc; a pool keeps a small reserve and hands
 * the rest back to the system. A connection with anything in progress (a partial head,
 * pipelined requests, a body, a response being sent) keeps everything; a new connection
 * whose first bytes have not come yet holds nothing either.
 *
 * An HTTP/2 connection (conn_h2.c) holds no struct um__conn_req (its streams hold their
 * requests; the one taken before the client preface goes back at the switch). It gives
 * its read buffer back whenever it waits for the client, since nghttp2 takes every byte
 * read and keeps a partial frame itself, and its output memory when no stream is open;
 * the nghttp2 session (HPACK tables, windows, settings) stays as long as the connection. */

/* The core is what each of (say) 100,000 idle clients costs: 408 bytes on x86-64 today
 * (the protocol table and HTTP/2 state pointers included).
 * What a connection needs only while a request is on it belongs in struct um__conn_req. */
_Static_assert(sizeof(struct um__conn) <= 512, "an idle connection's core stays small");

const size_t um__conn_req_size = sizeof(struct um__conn_req);

size_t um__conn_rbuf_size(const struct um_config *cfg)
{
    size_t n = cfg->limits.max_header_bytes;
    if (cfg->limits.max_request_line > n)
        n = cfg->limits.max_request_line;
    return n + 4096;
}

/* Takes the read buffer from the worker's pool: bytes are about to be read. */
static void rbuf_get(struct um__conn *c)
{
    struct um__worker *w = c->w;
    c->rcap = um__conn_rbuf_size(c->config);
    /* A connection of an older snapshot with other limits takes its own. */
    c->rbuf = c->rcap == w->rbufs.size ? um_bufpool_get(&w->rbufs) : um_malloc(c->rcap);
    c->rlen = c->rpos = c->bpos = 0;
}

static void rbuf_put(struct um__conn *c)
{
    struct um__worker *w = c->w;
    if (c->rbuf != NULL) {
        if (c->rcap == w->rbufs.size)
            um_bufpool_put(&w->rbufs, c->rbuf);
        else
            free(c->rbuf);
        c->rbuf = NULL;
    }
    c->rcap = c->rlen = c->rpos = c->bpos = 0;
}

/* Takes an HTTP/1.1 request state from the worker's pool. */
static void req_get(struct um__conn *c)
{
    struct um__worker *w = c->w;
    struct um__conn_req *r = um_bufpool_get(&w->reqs);
    /* All but the header table, which the parser fills as far as it needs. */
    memset(r, 0, offsetof(struct um__conn_req, x.req.headers));
    char *rest = (char *)&r->x.req.num_headers;
    memset(rest, 0, sizeof(*r) - (size_t)(rest - (char *)r));
    r->c = c;
    um_http1_parser_init(&r->parser);
    um__exchange_init(&r->x, &um__conn_exchange_ops, w, c->runtime, c->t, c->peer_ip,
                      c->peer_port, c->id);
    r->x.admin = c->admin;
    c->r = r;
}

static void req_put(struct um__conn *c)
{
    if (c->r != NULL) {
        um_arena_reset(&c->r->x.arena);
        um_bufpool_put(&c->w->reqs, c->r);
        c->r = NULL;
    }
}

/* Takes what the connection does not hold already of the read buffer and (HTTP/1.1) the
 * request state: bytes are about to be read. An HTTP/2 connection's requests are its
 * streams' (conn_h2.c). */
static void activate(struct um__conn *c)
{
    if (c->rbuf == NULL)
        rbuf_get(c);
    if (c->r == NULL && c->h2 == NULL)
        req_get(c);
}

/* Gives the request state and the read buffer back (idle, or freed). */
static void deactivate(struct um__conn *c)
{
    req_put(c);
    rbuf_put(c);
}

/* Switches to HTTP/2 (conn_h2.c): the HTTP/1.1 request state, unused, goes back at once;
 * the read buffer stays (the client preface may be in it). */
static bool switch_h2(struct um__conn *c)
{
    if (!um__conn_h2_start(c))
        return false;
    req_put(c);
    return true;
}

void um__conn_req_release(struct um__conn *c)
{
    req_put(c);
}

void um__conn_rbuf_release(struct um__conn *c)
{
    UM_ASSERT(c->rpos == c->rlen);
    rbuf_put(c);
}

/* ---------------------------------------------------------------- socket I/O */

/* A transport said what to wait for: the edge it promised is used up. */
static void await(struct um__conn *c, int want)
{
    if (want == UM_TRANSPORT_WANT_WRITE)
        c->can_write = false;
    else if (want == UM_TRANSPORT_WANT_READ)
        c->can_read = false;
}

/* Reads once. Returns UM_OK (bytes read), UM_DONE (EOF), UM_AGAIN, UM_ERR. */
static int read_some(struct um__conn *c)
{
    if (c->rbuf == NULL)
        activate(c);
    size_t space = c->rcap - c->rlen;
    if (space == 0)
        return UM_OK; /* nothing fits; processing must make room (or fail) first */
    int want = 0;
    ssize_t n = c->t->ops->read(c->t, c->rbuf + c->rlen, space, &want);
    if (n > 0) {
        c->rlen += (size_t)n;
        if (!c->admin)
            um_counter_add(&um_metrics_worker()->bytes_in, (uint64_t)n);
        await(c, want); /* drained: the next arrival raises a new edge */
        return UM_OK;
    }
    if (n == 0) {
        c->peer_closed = true;
        c->can_read = false;
        return UM_DONE;
    }
    if (n == UM_AGAIN) {
        await(c, want);
        return UM_AGAIN;
    }
    return UM_ERR;
}

/* ---------------------------------------------------------------- life cycle */

static void go_idle(struct um__conn *c)
{
    /* Waiting for a request with nothing buffered and nothing queued: give memory back. */
    if (c->rlen == 0 && c->state == S_HEAD && !um__outq_pending(&c->out)) {
        deactivate(c);
        um__outq_shrink(&c->out);
    }
}

static void arm_input_timer(struct um__conn *c)
{
    struct um__worker *w = c->w;
    if (c->state == S_LINGER) {
        if (um__links(c)->tq_kind != UM__TQ_LINGER)
            um__tq_arm(w, c, UM__TQ_LINGER);
    } else if (c->state == S_BODY || (c->state == S_ORIGIN && !c->r->x.body_done)) {
        /* Between two reads of the body, whether it is read before dispatch or streamed to
         * the origin as it arrives: the header timeout bounds each pause, not the upload. */
        um__tq_arm(w, c, UM__TQ_HEADER);
    } else if (c->rpos < c->rlen || c->requests == 0) {
        /* A request has begun (or is awaited on a fresh connection): its head must
         * arrive within the header timeout, however slowly the bytes trickle in. */
        if (!c->head_started || um__links(c)->tq_kind != UM__TQ_HEADER) {
            um__tq_arm(w, c, UM__TQ_HEADER);
            c->head_started = true;
        }
        go_idle(c); /* a new connection whose first bytes have not come holds nothing */
    } else {
        um__tq_arm(w, c, UM__TQ_IDLE);
        go_idle(c);
    }
}

/* Nothing more can be read now. A lingering close is the connection's, whatever the
 * protocol was. */
static void arm_timer(struct um__conn *c)
{
    if (c->state == S_LINGER)
        arm_input_timer(c);
    else
        c->proto->arm_timer(c);
}

static void start_linger(struct um__conn *c)
{
    shutdown(c->t->fd, SHUT_WR);
    c->state = S_LINGER;
    c->closing = false;
    c->rpos = c->rlen = 0;
}

static int read_proxy(struct um__conn *c);

static void drive(struct um__conn *c)
{
    uint64_t log_conn = um_log_set_conn(c->id);
    c->in_drive = true;
    for (int turn = 0; turn < TURN_BUDGET; turn++) {
        if (c->closed)
            goto out;
        if (c->proto->run) {
            c->proto->run(c);
            goto out;
        }
        if (c->state == S_PROXY) {
            int r = c->can_read ? read_proxy(c) : UM_AGAIN;
            if (r == UM_OK) continue;
            if (r == UM_AGAIN) {
                if (um__links(c)->tq_kind != UM__TQ_HEADER) um__tq_arm(c->w, c, UM__TQ_HEADER);
                goto out;
            }
            um_counter_add(&um_metrics_worker()->proxy_refused, 1);
            um__conn_close(c);
            goto out;
        }
        if (c->state == S_HANDSHAKE) {
            int want = 0;
            int r = c->t->ops->handshake(c->t, &want);
            if (r == UM_OK) {
                um_tls_count_handshake(true);
                c->state = S_HEAD;
                c->can_read = true; /* the request may sit decrypted-ready in OpenSSL */
                if (c->t->ops->alpn && um_str_eq(c->t->ops->alpn(c->t), "acme-tls/1")) {
                    /* An ACME tls-alpn-01 validation: the handshake was all (RFC 8737). */
                    um__conn_close(c);
                    goto out;
                }
                if (c->t->ops->alpn && um_str_eq(c->t->ops->alpn(c->t), "h2") &&
                    !switch_h2(c))
                    goto out;
                continue;
            }
            if (r == UM_AGAIN) {
                await(c, want);
                if (um__links(c)->tq_kind != UM__TQ_HEADER)
                    um__tq_arm(c->w, c, UM__TQ_HEADER);
                goto out;
            }
            um_tls_count_handshake(false);
            um_log_info("tls: handshake with %s:%d failed: %s", c->peer_ip, c->peer_port,
                        c->t->ops->error(c->t));
            um__conn_close(c);
            goto out;
        }
        enum input_result in = IN_NEED_INPUT;
        if (c->state == S_LINGER) {
            c->rpos = c->rlen = 0; /* discard */
        } else {
            in = c->proto->process_input(c);
            if (c->proto->run)
                continue; /* the protocol takes the connection over (a tunnel) */
        }
        if (um__outq_pending(&c->out)) {
            if (!c->can_write) {
                um__tq_arm(c->w, c, UM__TQ_SEND);
                goto out;
            }
            int want = 0;
            int r = um__outq_flush(&c->out, c->t, &want);
            if (r == UM_ERR) {
                um__conn_close(c);
                goto out;
            }
            if (r == UM_AGAIN) {
                if (want == UM_TRANSPORT_WANT_READ)
                    c->can_read = false;
                c->can_write = false;
                um__tq_arm(c->w, c, UM__TQ_SEND);
                goto out;
            }
            if (r == UM_DONE)
                break;
        }
        if (c->proto->on_drained(c))
            continue; /* an origin went on: it may have handed over more at once */
        if (c->closing) {
            if (c->linger && !c->peer_closed)
                start_linger(c);
            else {
                um__conn_close(c);
                goto out;
            }
            continue;
        }
        if (in == IN_BACKLOG)
            continue;
        if (in == IN_WAIT) {
            um__tq_disarm(c->w, c); /* the origin's own timeouts apply */
            goto out;
        }
        if (c->draining && c->state == S_HEAD && c->rpos == c->rlen) {
            /* Stopping: the request in flight is answered and no other has begun. */
            um__conn_close(c);
            goto out;
        }
        if (c->peer_closed) {
            /* Nothing more will come; what was buffered has been answered. */
            um__conn_close(c);
            goto out;
        }
        if (!c->can_read) {
            arm_timer(c);
            goto out;
        }
        int r = read_some(c);
        if (r == UM_ERR) {
            um__conn_close(c);
            goto out;
        }
        if (r == UM_AGAIN) {
            arm_timer(c);
            goto out;
        }
        if (r == UM_DONE && c->state == S_LINGER) {
            um__conn_close(c);
            goto out;
        }
        if (c->state == S_ORIGIN && c->r->x.body_wanted && (r == UM_OK || r == UM_DONE))
            um__exchange_body_ready(&c->r->x);
    }
    um__tq_disarm(c->w, c);
    um__worker_ready(c->w, c);
out:
    c->in_drive = false;
    um_log_set_conn(log_conn);
}

/* Sets TLS up on c's socket (the listener has tls): the handshake comes next. */
static bool start_tls(struct um__conn *c)
{
    struct um_transport *t = um_tls_transport_new(c->w->tls, c->t->fd);
    if (t == NULL) {
        um_log_err("tls: cannot set up a session for %s:%d", c->peer_ip, c->peer_port);
        return false;
    }
    c->t = t;
    c->state = S_HANDSHAKE;
    if (!c->h2_allowed) um_tls_transport_h1_only(t);
    return true;
}

static void set_peer(struct um__conn *c, const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, c->peer_ip, sizeof(c->peer_ip));
        c->peer_port = ntohs(a->sin6_port);
    } else if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, c->peer_ip, sizeof(c->peer_ip));
        c->peer_port = ntohs(a->sin_port);
    }
}

/* Reads the PROXY protocol header off the socket, before TLS or HTTP: peeks until the
 * header is whole, then takes exactly its bytes, so that what follows (a ClientHello, a
 * request) stays for the next reader. Its source becomes the connection's peer. Returns
 * UM_OK (the next state is set), UM_AGAIN, or UM_ERR (close: no valid header, EOF). */
static int read_proxy(struct um__conn *c)
{
    uint8_t buf[UM_PROXY_MAX];
    ssize_t n = recv(c->t->fd, buf, sizeof(buf), MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        c->can_read = false;
        return UM_AGAIN;
    }
    struct um_proxy_hdr h;
    int len = n > 0 ? um_proxy_parse(buf, (size_t)n, &h) : -1;
    if (len == 0) {
        c->can_read = false; /* the rest comes with the next edge */
        return UM_AGAIN;
    }
    if (len < 0) {
        um_log_info("proxy protocol: %s:%d %s; closed", c->peer_ip, c->peer_port,
                    n == 0  ? "closed before a header"
                    : n < 0 ? "read error"
                            : "sent no valid header");
        return UM_ERR;
    }
    if (recv(c->t->fd, buf, (size_t)len, 0) != len) return UM_ERR;
    if (h.family != AF_UNSPEC) set_peer(c, &h.src);
    c->state = S_HEAD;
    if (c->tls_next) return start_tls(c) ? UM_OK : UM_ERR;
    return UM_OK;
}

void um__conn_accept(struct um__worker *w, int fd, int flags)
{
    bool tls = (flags & UM__ACCEPT_F_TLS) != 0;
    struct um__conn *c = um_calloc(1, sizeof(*c));
    c->links.tq_kind = -1;
    c->w = w;
    c->runtime = w->runtime;
    um_runtime_ref(c->runtime);
    c->config = w->config;
    c->id = ++w->next_conn_id;
    c->admin = (flags & UM__ACCEPT_F_ADMIN) != 0;
    if (!c->admin)
        um_counter_add(&um_metrics_worker()->conns_total, 1);
    um_transport_plain_init(&c->plain, fd);
    c->t = &c->plain;
    um__outq_init(&c->out, &w->outq_pools);
    c->state = S_HEAD;
    c->can_write = true;
    c->can_read = true; /* TCP_DEFER_ACCEPT: the first bytes are usually there already */
    c->draining = w->draining;
    c->proto = &um__conn_proto_h1;
    c->h2_allowed = (flags & UM__ACCEPT_F_H2) != 0;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &sslen) == 0) set_peer(c, &ss);
    c->links.all_next = w->all;
    if (w->all)
        um__links(w->all)->all_prev = c;
    w->all = c;
    w->num_conns++;
    if (flags & UM__ACCEPT_F_PROXY) {
        c->state = S_PROXY;
        c->tls_next = tls && w->tls;
    } else if (tls && w->tls && !start_tls(c)) {
        um__conn_close(c);
        return;
    }
    if (um__worker_watch(w, c, fd) != UM_OK) {
        um_log_err("worker %d: epoll_ctl: %s", w->id, strerror(errno));
        um__conn_close(c);
        return;
    }
    drive(c);
}

void um__conn_on_event(struct um__conn *c, uint32_t events)
{
    if (c->closed)
        return;
    if (c->state == S_ORIGIN && !c->r->x.ended &&
        (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) &&
        (c->r->x.body_done || (events & (EPOLLHUP | EPOLLERR)))) {
        /* The client went away while the origin was answering: stop the origin. */
        um__conn_close(c);
        return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        c->can_read = true;
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        c->rdhup = true;
    if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
        c->can_write = true;
    drive(c);
}

void um__conn_on_ready(struct um__conn *c)
{
    if (!c->closed)
        drive(c);
}

void um__conn_on_timeout(struct um__conn *c)
{
    if (c->closed)
        return;
    if (c->state == S_PROXY) {
        um_counter_add(&um_metrics_worker()->proxy_refused, 1);
        uint64_t log_conn = um_log_set_conn(c->id);
        um_log_info("proxy protocol: %s:%d sent no header within %gs; closed", c->peer_ip,
                    c->peer_port, c->config->timeouts.header);
        um_log_set_conn(log_conn);
        um__conn_close(c);
        return;
    }
    if (c->state == S_HANDSHAKE) {
        um_tls_count_handshake(false);
        uint64_t log_conn = um_log_set_conn(c->id);
        um_log_info("tls: handshake with %s:%d failed: timed out after %gs", c->peer_ip,
                    c->peer_port, c->config->timeouts.header);
        um_log_set_conn(log_conn);
        um__conn_close(c);
        return;
    }
    c->proto->on_timeout(c);
}

static void h1_on_timeout(struct um__conn *c)
{
    if (c->state == S_HEAD && c->rpos < c->rlen && !um__outq_pending(&c->out)) {
        /* A request head that did not arrive in time (slowloris): say so, then close. */
        c->r->x.req.minor_version = 1;
        um__conn_fail(c, 408);
        c->linger = false;
        c->can_write = true;
        drive(c);
        return;
    }
    um__conn_close(c);
}

void um__conn_drain(struct um__conn *c)
{
    c->draining = true;
    c->proto->drain(c);
}

void um__conn_reloaded(struct um__conn *c)
{
    if (!c->closed && c->proto->on_reload)
        c->proto->on_reload(c);
}

static void h1_drain(struct um__conn *c)
{
    if (c->state == S_HEAD && c->rpos == c->rlen && !um__outq_pending(&c->out))
        um__conn_close(c);
}

void um__conn_close(struct um__conn *c)
{
    if (c->closed)
        return;
    struct um__worker *w = c->w;
    c->closed = true;
    c->proto->on_close(c);
    if (!c->admin)
        um_counter_add(&um_metrics_worker()->conns_closed, 1);
    um__tq_disarm(w, c);
    if (c->links.in_ready) {
        for (struct um__conn **p = &w->ready; *p; p = &um__links(*p)->ready_next) {
            if (*p == c) {
                *p = c->links.ready_next;
                break;
            }
        }
        c->links.in_ready = false;
    }
    if (c->links.all_prev)
        um__links(c->links.all_prev)->all_next = c->links.all_next;
    else
        w->all = c->links.all_next;
    if (c->links.all_next)
        um__links(c->links.all_next)->all_prev = c->links.all_prev;
    if (c->state != S_HANDSHAKE && c->t->ops->shutdown) {
        int want;
        c->t->ops->shutdown(c->t, &want); /* TLS close_notify, best effort */
    }
    /* Out of the epoll set before the close: a CGI script being spawned on another
     * worker holds a copy of every descriptor until its exec, and epoll reports the
     * events of a descriptor's open file, which that copy keeps alive. */
    um_loop_io_set(w->loop, &um__links(c)->io, um__links(c)->io.fd, 0);
    c->t->ops->close(c->t); /* the socket too */
    c->t = NULL;
    um__outq_drop(&c->out);
    w->num_conns--;
    if (!c->admin) /* the admin's are not held to limits.max_connections */
        atomic_fetch_sub(&w->server->num_conns, 1);
    c->links.all_prev = NULL;
    c->links.all_next = w->closed;
    w->closed = c;
}

void um__conn_free(struct um__conn *c)
{
    c->proto->dispose(c);
    deactivate(c);
    um__outq_dispose(&c->out);
    um_runtime_unref(c->runtime);
    free(c);
}

/* ---------------------------------------------------------------- HTTP/1.1's table */

/* Before the first request on a listener that speaks HTTP/2, the client preface says
 * that this is a prior-knowledge HTTP/2 connection instead (RFC 9113 section 3.3). */
static enum input_result h1_process_input(struct um__conn *c)
{
    if (c->h2_allowed && c->requests == 0 && c->state == S_HEAD && !c->t->ops->secure &&
        c->rlen > c->rpos) {
        size_t n = c->rlen - c->rpos, m = n < UM__H2_PREFACE_LEN ? n : UM__H2_PREFACE_LEN;
        size_t line = m < UM__H2_PRI_LEN ? m : UM__H2_PRI_LEN;
        if (memcmp(c->rbuf + c->rpos, UM__H2_PREFACE, line) != 0) {
            c->h2_allowed = false; /* HTTP/1.1 it is */
        } else if (m > line && memcmp(c->rbuf + c->rpos, UM__H2_PREFACE, m) != 0) {
            /* "PRI * HTTP/2.0", then not the rest of the preface: an invalid HTTP/2
             * preface (no HTTP/1.1 request is version 2.0), which nghttp2 answers with
             * GOAWAY PROTOCOL_ERROR (section 3.4). */
            if (!switch_h2(c))
                return IN_DONE;
            return c->proto->process_input(c);
        } else if (n < UM__H2_PREFACE_LEN) {
            return IN_NEED_INPUT;
        } else {
            if (!switch_h2(c))
                return IN_DONE;
            return c->proto->process_input(c);
        }
    }
    return um__conn_process_input(c);
}

static bool h1_on_drained(struct um__conn *c)
{
    if (c->r == NULL || !c->r->x.origin_paused)
        return false;
    /* Drained: let the origin go on (it may hand over more at once). */
    um__exchange_proceed(&c->r->x);
    return true;
}

static void h1_on_close(struct um__conn *c)
{
    if (c->state == S_ORIGIN)
        um__exchange_cancel(&c->r->x);
    um__tunnel_close(c); /* a 101 whose tunnel had not begun; freed by dispose */
}

static void h1_dispose(struct um__conn *c)
{
    um__tunnel_free(c);
}

const struct um__conn_proto um__conn_proto_h1 = {
    .name = "HTTP/1.1",
    .process_input = h1_process_input,
    .on_drained = h1_on_drained,
    .arm_timer = arm_input_timer,
    .on_timeout = h1_on_timeout,
    .drain = h1_drain,
    .on_close = h1_on_close,
    .dispose = h1_dispose,
};
