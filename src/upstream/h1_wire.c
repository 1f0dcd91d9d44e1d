/* SPDX-License-Identifier: BSD-2-Clause */
/* The HTTP/1.1 transport's wire: sending the request, reading the response's head and body. */
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

#define OUT_BODY (64 * 1024)               /* request body read from the sink at a time */
#define CHUNK_HEAD 18                      /* room for "%zx\r\n" before a chunk */

/* ---------------------------------------------------------------- sending */

static void out_reserve(struct h1conn *c, size_t n)
{
    if (c->out_cap >= n)
        return;
    c->out = um_realloc(c->out, n);
    c->out_cap = n;
}

/* Writes the request head into c->out. */
/* The PROXY protocol header (send_proxy) naming x's client, to dst (the server: the
 * address the client reached is not known here); v1 text or v2 binary. An address the
 * other family cannot hold makes the header say nothing (UNKNOWN, or v2 with no
 * addresses). Returns its length in out (at least 232 bytes). */
static size_t proxy_header(int version, const struct xfer *x, const struct sockaddr_storage *dst,
                           char *out)
{
    unsigned char src6[16], dst6[16], src4[4], dst4[4];
    bool v4 = inet_pton(AF_INET, x->client_ip, src4) == 1;
    bool v6 = !v4 && inet_pton(AF_INET6, x->client_ip, src6) == 1;
    uint16_t dport = 0;
    if (dst->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)dst;
        memcpy(dst4, &a->sin_addr, 4);
        dport = ntohs(a->sin_port);
        /* An IPv6 client: the server's address as IPv4-mapped IPv6. */
        memset(dst6, 0, 10);
        dst6[10] = dst6[11] = 0xff;
        memcpy(dst6 + 12, dst4, 4);
    } else {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)dst;
        memcpy(dst6, &a->sin6_addr, 16);
        dport = ntohs(a->sin6_port);
        if (v4) { /* an IPv4 client to an IPv6 server: the client as IPv4-mapped */
            memset(src6, 0, 10);
            src6[10] = src6[11] = 0xff;
            memcpy(src6 + 12, src4, 4);
            v4 = false;
            v6 = true;
        }
    }
    uint16_t sport = (uint16_t)x->client_port;
    if (version == 1) {
        char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN];
        if (!v4 && !v6) return (size_t)sprintf(out, "PROXY UNKNOWN\r\n");
        inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? (void *)src4 : (void *)src6, s, sizeof s);
        inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? (void *)dst4 : (void *)dst6, d, sizeof d);
        return (size_t)sprintf(out, "PROXY %s %s %s %u %u\r\n", v4 ? "TCP4" : "TCP6", s, d,
                               (unsigned)sport, (unsigned)dport);
    }
    static const unsigned char sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                          0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};
    memcpy(out, sig, 12);
    out[12] = 0x21; /* version 2, PROXY */
    size_t alen = v4 ? 12 : v6 ? 36 : 0;
    out[13] = (char)(v4 ? 0x11 : v6 ? 0x21 : 0x00);
    out[14] = 0;
    out[15] = (char)alen;
    unsigned char *a = (unsigned char *)out + 16;
    size_t al = v4 ? 4 : 16;
    if (alen) {
        memcpy(a, v4 ? src4 : src6, al);
        memcpy(a + al, v4 ? dst4 : dst6, al);
        a[2 * al] = (unsigned char)(sport >> 8), a[2 * al + 1] = (unsigned char)sport;
        a[2 * al + 2] = (unsigned char)(dport >> 8), a[2 * al + 3] = (unsigned char)dport;
    }
    return 16 + alen;
}

void um__h1_put_head(struct h1conn *c, struct xfer *x, bool first)
{
    const char *method = x->is_head ? "HEAD" : x->method ? x->method : "GET";
    const char *authority = strstr(x->up->conf->servers[x->server].url, "://") + 3;
    size_t need =
        strlen(method) + strlen(x->target) + x->fields_len + strlen(authority) + 128 + 256;
    out_reserve(c, need);
    size_t o = 0, ml = strlen(method), tl = strlen(x->target);
    if (first && x->up->conf->send_proxy)
        o = proxy_header(x->up->conf->send_proxy, x, &c->pool->addr, c->out);
    memcpy(c->out + o, method, ml);
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
        um__h1_fail(c, UM_UP_ABORTED, "request body failed");
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
        /* The last chunk, with the request's trailers when it has some. */
        const struct um_header *t;
        size_t nt = um__up_read_trailers(x, &t), need = 5;
        for (size_t i = 0; i < nt; i++)
            need += t[i].name.len + t[i].value.len + 4;
        out_reserve(c, need);
        size_t o = 0;
        memcpy(c->out, "0\r\n", 3);
        o = 3;
        for (size_t i = 0; i < nt; i++) {
            memcpy(c->out + o, t[i].name.base, t[i].name.len);
            o += t[i].name.len;
            memcpy(c->out + o, ": ", 2);
            memcpy(c->out + o + 2, t[i].value.base, t[i].value.len);
            o += 2 + t[i].value.len;
            memcpy(c->out + o, "\r\n", 2);
            o += 2;
        }
        memcpy(c->out + o, "\r\n", 2);
        c->out_pos = 0;
        c->out_len = o + 2;
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

static ssize_t io_send(struct h1conn *c, const void *p, size_t n)
{
    return um__up_io_send(c->tls, c->io.fd, p, n);
}

static ssize_t io_recv(struct h1conn *c, void *p, size_t n)
{
    return um__up_io_recv(c->tls, c->io.fd, p, n);
}

/* Sends what it can of the request. Returns false when the connection is gone. */
bool um__h1_send_request(struct h1conn *c)
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
                if (!um__h1_conn_want(c, EPOLLIN | EPOLLOUT)) {
                    um__h1_fail_errno(c, UM_UP_SEND, "epoll_ctl", errno);
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
            um__h1_fail_errno(c, UM_UP_SEND, "send", errno);
            return false;
        }
        c->out_pos += (size_t)n;
    }
    if (!um__h1_conn_want(c, EPOLLIN)) {
        um__h1_fail_errno(c, UM_UP_SEND, "epoll_ctl", errno);
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
        if (c->trail == NULL) c->trail = um_malloc(H1_TRAILERS);
        c->chunk.trailers = c->trail; /* passed on at the end (um__h1_complete) */
        c->chunk.trailers_cap = H1_TRAILERS;
    } else if (has_cl) {
        c->framing = resp->content_length == 0 ? F_NONE : F_LENGTH;
        c->remaining = resp->content_length;
    } else {
        c->framing = F_CLOSE;
    }
    c->head_done = true;
    /* The first byte arrived: from now on the timeout is for a stalled body. */
    um_loop_timer_start(c->hw->loop, &x->ttfb, um__up_timeout_ms(x));
}

/* The server switched protocols: the socket leaves this client (and the loop) for the
 * tunnel, with the bytes read after the 101 head, the first of the new protocol. */
static void hand_over(struct h1conn *c, struct xfer *x, const struct um_http1_response *resp)
{
    if (!c->req_done) {
        /* The request's body was not all sent: its rest would go into the tunnel. */
        um__h1_fail(c, UM_UP_BAD_HEAD, "101 before the end of the request");
        return;
    }
    int fd = c->io.fd;
    um_loop_io_set(c->hw->loop, &c->io, fd, 0);
    c->want = 0;
    struct um_transport *t = c->tls ? c->tls : um_transport_plain_new(fd);
    c->tls = NULL;
    c->io.fd = -1;
    um__h1_detach(c);
    um__h1_conn_close(c); /* freed after the loop turn: pre stays valid through the call */
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
                um__h1_fail(c, UM_UP_HEAD_TOO_LARGE, "response head too large");
            else
                um__h1_fail(c, UM_UP_BAD_HEAD, "malformed response head");
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
                um__h1_fail(c, UM_UP_BAD_BODY, "malformed chunked body");
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
void um__h1_receive(struct h1conn *c)
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
                if (!um__h1_conn_want(c, c->want & ~(uint32_t)EPOLLIN))
                    um__h1_fail_errno(c, UM_UP_RECV, "epoll_ctl", errno);
                return;
            }
            if (r == BODY_DONE) {
                if (!c->req_done)
                    c->keep = false; /* answered before the request ended */
                um__h1_complete(c);
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
            if (cap > MAX_RESPONSE_HEAD + H1_IN_SIZE)
                cap = MAX_RESPONSE_HEAD + H1_IN_SIZE; /* parse_head refuses before this fills */
            if (c->pend_len > 0 || cap == c->in_cap)
                return; /* cannot happen: pend is only left when the sink is behind */
            c->in = um_realloc(c->in, cap);
            c->in_cap = cap;
        }
        ssize_t n = io_recv(c, c->in + c->in_pos + c->in_len, c->in_cap - c->in_pos - c->in_len);
        if (n > 0) {
            c->got_data = true;
            c->in_len += (size_t)n;
            if (c->head_done) um_loop_timer_start(c->hw->loop, &x->ttfb, um__up_timeout_ms(x));
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
            um__h1_complete(c);
            return;
        }
        int err = n < 0 ? errno : 0;
        if (!c->got_data) {
            if (err)
                um__h1_fail_errno(c, UM_UP_RECV, "recv", err);
            else
                um__h1_fail(c, UM_UP_RECV, "the server closed the connection without an answer");
        } else if (err) {
            um__h1_fail_errno(c, UM_UP_RECV, "recv", err);
        } else if (!c->head_done) {
            um__h1_fail(c, UM_UP_BAD_HEAD, "the server closed the connection in the middle of the "
                                    "response head");
        } else {
            um__h1_fail(c, UM_UP_CUT_SHORT, "the server closed the connection before the end of "
                                     "the answer");
        }
        return;
    }
}

