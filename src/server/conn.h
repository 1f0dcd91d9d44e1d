/* SPDX-License-Identifier: BSD-2-Clause */
/* The client connection, shared by its files: conn.c (the connection: its transport, read
 * buffer, timers, keep-alive and drive loop), conn_http1.c (the HTTP/1.1 messages on it:
 * requests parsed and their bodies decoded, responses framed into the output queue for
 * the exchange) and conn_h2.c (HTTP/2 with nghttp2: many streams, each an exchange).
 * drive() reaches the messages through the connection's protocol table (struct
 * um__conn_proto); a connection starts as HTTP/1.1 and switches to HTTP/2 after ALPN h2
 * or on the client preface. */
#ifndef UMBRA_SERVER_CONN_H
#define UMBRA_SERVER_CONN_H

#include "exchange.h"
#include "internal.h"
#include "outq.h"
#include "umbra/transport.h"

enum conn_state {
    S_PROXY,     /* reading the PROXY protocol header (listen.proxy_protocol) */
    S_HANDSHAKE, /* TLS handshake */
    S_HEAD,      /* reading a request head */
    S_BODY,      /* reading (and discarding) a request body before dispatch */
    S_ORIGIN,    /* the origin is answering (and maybe reading the body) */
    S_DONE,      /* no more requests: write what is queued, then close */
    S_LINGER,    /* write side shut, discarding input until EOF or the linger timeout */
    S_H2,        /* HTTP/2: the streams have states of their own (conn_h2.c) */
    S_TUNNEL,    /* after a 101: bytes both ways between client and backend (conn_tunnel.c) */
};

enum input_result {
    IN_NEED_INPUT, /* more bytes from the client are needed */
    IN_BACKLOG,    /* output must drain first */
    IN_WAIT,       /* waiting for the origin */
    IN_DONE,       /* no more requests on this connection */
};

struct um__conn;
struct um__h2;
struct um__tunnel;

/* The protocol on a connection: how drive() and the worker reach the messages without
 * knowing which protocol frames them. HTTP/1.1 (conn.c, conn_http1.c) and HTTP/2
 * (conn_h2.c). */
struct um__conn_proto {
    const char *name; /* "HTTP/1.1", "HTTP/2": for logs and metrics */
    /* Parses and begins what is buffered, as far as the state allows. */
    enum input_result (*process_input)(struct um__conn *c);
    /* The output queue drained: lets paused origins go on. True when it did something
     * (drive() then goes round again). */
    bool (*on_drained)(struct um__conn *c);
    /* Nothing more can be read now: arms the timer that bounds the wait. */
    void (*arm_timer)(struct um__conn *c);
    /* A timer fired (not during a TLS handshake). */
    void (*on_timeout)(struct um__conn *c);
    /* The server stops gracefully. */
    void (*drain)(struct um__conn *c);
    /* A reload: new connections take the new configuration. NULL: nothing to do. */
    void (*on_reload)(struct um__conn *c);
    /* The connection closes: every exchange still running is cancelled. */
    void (*on_close)(struct um__conn *c);
    /* Frees the protocol's state (the connection is being freed). */
    void (*dispose)(struct um__conn *c);
    /* NULL: drive()'s loop runs the connection (parse, write the output queue, read).
     * Otherwise the protocol moves the connection's bytes itself (a tunnel) and drive()
     * only calls this. */
    void (*run)(struct um__conn *c);
};

/* What a connection holds only while a request is on it: the parser's state, the request
 * (its head's fields: most of the size), its body's decoding and the exchange. Taken from
 * the worker's pool with the read buffer when bytes arrive, given back with it when the
 * connection waits idle (conn.c, "Idle connections"). HTTP/1.1's only: an HTTP/2
 * connection's streams hold their own (conn_h2.c). */
struct um__conn_req {
    struct um__conn *c;
    struct um_http1_parser parser;
    size_t bdec;        /* decoded body bytes waiting at rbuf[bpos..bpos+bdec) */
    uint64_t body_left; /* Content-Length bytes still to read */
    uint64_t body_seen; /* body bytes decoded so far */
    struct um_chunked chunked;
    bool resp_chunked; /* the response body is framed with chunked coding */
    bool resp_trailed; /* ...and its last chunk and trailers went out (send_trailers) */
    struct um__exchange x; /* the request being answered */
};

/* The connection's core, all an idle keep-alive connection holds (with its transport):
 * kept small, the fields of every event first. */
struct um__conn {
    struct um__conn_links links; /* first: the worker's lists */
    struct um__worker *w;
    struct um_transport *t; /* &plain, or a TLS transport */
    struct um__conn_req *r; /* NULL while idle (no read buffer either) */
    enum conn_state state;
    bool closed;
    bool can_read, can_write;
    bool peer_closed;  /* read returned 0 */
    bool rdhup;        /* epoll said the peer's end (or an error) is there to read */
    bool closing;      /* close once the output is flushed */
    bool linger;       /* ...with a lingering close */
    bool draining;     /* server stopping: no keep-alive */
    bool head_started; /* header timer armed for the current request */
    bool in_drive;     /* the exchange's sends need no wake-up */
    bool h2_allowed;   /* the listener speaks HTTP/2 (ALPN h2, or prior knowledge) */
    bool admin;        /* the admin listener's (UM__ACCEPT_F_ADMIN): not counted */
    bool tls_next;     /* S_PROXY: TLS begins once the header is read */

    /* Input: rbuf[rpos..rlen) is unprocessed; while in S_BODY, rbuf[rpos..bpos) is the
     * parsed head and rbuf[bpos..rlen) the unconsumed body bytes. rbuf holds rcap bytes;
     * NULL while idle. */
    char *rbuf;
    size_t rcap, rlen, rpos, bpos;

    struct um__outq out;

    struct um_runtime *runtime; /* taken at accept (one reference) */
    struct um_config *config;   /* its snapshot */
    uint64_t requests; /* requests answered */
    uint64_t id;
    struct um_transport plain;
    int peer_port;
    char peer_ip[46]; /* INET6_ADDRSTRLEN */

    const struct um__conn_proto *proto; /* &um__conn_proto_h1 until a switch to HTTP/2 */
    struct um__h2 *h2;                  /* HTTP/2's state (conn_h2.c), once switched */
    struct um__tunnel *tun; /* a 101's tunnel (conn_tunnel.c), from the upgrade on */
};

/* The connection of an HTTP/1.1 exchange (an HTTP/2 stream's is its h2's, conn_h2.c). */
static inline struct um__conn *um__conn_of(struct um__exchange *x)
{
    return um_container_of(x, struct um__conn_req, x)->c;
}

/* The limits of c's requests: the configuration's, or the admin's smaller ones. */
static inline size_t um__conn_max_line(const struct um__conn *c)
{
    size_t n = c->config->limits.max_request_line;
    return c->admin && n > UM__ADMIN_MAX_HEAD ? UM__ADMIN_MAX_HEAD : n;
}
static inline size_t um__conn_max_head(const struct um__conn *c)
{
    size_t n = c->config->limits.max_header_bytes;
    return c->admin && n > UM__ADMIN_MAX_HEAD ? UM__ADMIN_MAX_HEAD : n;
}
static inline uint64_t um__conn_max_body(const struct um__conn *c)
{
    uint64_t n = c->config->limits.max_body_bytes;
    return c->admin && n > UM__ADMIN_MAX_BODY ? UM__ADMIN_MAX_BODY : n;
}

/* An origin answering from outside drive() (an upstream socket's event) wakes the connection. */
static inline void um__conn_wake(struct um__conn *c)
{
    if (!c->in_drive)
        um__worker_ready(c->w, c);
}

/* conn.c */
extern const struct um__conn_proto um__conn_proto_h1;
/* Gives the read buffer back to the worker's pool (c waits with nothing buffered:
 * rpos == rlen); the next read takes one again. */
void um__conn_rbuf_release(struct um__conn *c);
/* Gives the HTTP/1.1 request state back to the worker's pool (c->r is NULL after). */
void um__conn_req_release(struct um__conn *c);

/* conn_h2.c */
extern const struct um__conn_proto um__conn_proto_h2;
/* The client preface ("PRI * HTTP/2.0...") that begins a prior-knowledge connection. */
#define UM__H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define UM__H2_PREFACE_LEN 24
#define UM__H2_PRI_LEN 14 /* "PRI * HTTP/2.0", its request line without CRLF */
/* Switches c to HTTP/2 (after ALPN h2, or on the preface in rbuf); the bytes buffered
 * are HTTP/2's from the preface on. False when the session cannot be made (c closes). */
bool um__conn_h2_start(struct um__conn *c);

/* conn_tunnel.c */
extern const struct um__conn_proto um__conn_proto_tunnel;
/* The origin agreed to x's upgrade (HTTP/1.1, the 101 head queued): sets up c's tunnel
 * with backend (owned from now on) and the pre_len bytes the backend sent first; the
 * backend is watched from now on. */
void um__tunnel_prepare(struct um__conn *c, struct um__exchange *x,
                        struct um_transport *backend, const char *pre, size_t pre_len);
/* The exchange of the upgrade is complete: c becomes a tunnel (um__conn_proto_tunnel);
 * the unparsed client bytes rbuf[from..rlen) go to the backend first. c's request state
 * and read buffer are given back. */
void um__tunnel_begin(struct um__conn *c, size_t from);
/* Closes c's tunnel, begun or not (the connection is closed): logs it, closes the
 * backend, gives its buffers back; the memory stays until um__tunnel_free, after the
 * loop's batch of events (one may still name the backend's io). */
void um__tunnel_close(struct um__conn *c);
/* Closes (if need be) and frees c's tunnel (the connection is freed). */
void um__tunnel_free(struct um__conn *c);

/* conn_http1.c */
/* How the exchange reaches the connection. */
extern const struct um__exchange_conn_ops um__conn_exchange_ops;
/* Parses and begins what is buffered, as far as the state allows. */
enum input_result um__conn_process_input(struct um__conn *c);
/* Answers an unusable request with status and stops reading from the connection (c->r
 * is set: bytes were read). */
void um__conn_fail(struct um__conn *c, int status);

#endif
