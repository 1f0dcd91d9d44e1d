/* The HTTP/1.1 client connection, shared by its two files: conn.c (the connection: its
 * transport, read buffer, timers, keep-alive and drive loop) and conn_http1.c (the
 * HTTP/1.1 messages on it: requests parsed and their bodies decoded, responses framed into
 * the output queue for the exchange). */
#ifndef UMBRA_SERVER_CONN_H
#define UMBRA_SERVER_CONN_H

#include "exchange.h"
#include "internal.h"
#include "outq.h"
#include "umbra/transport.h"

enum conn_state {
    S_HANDSHAKE, /* TLS handshake */
    S_HEAD,   /* reading a request head */
    S_BODY,   /* reading (and discarding) a request body before dispatch */
    S_ORIGIN, /* the origin is answering (and maybe reading the body) */
    S_DONE,   /* no more requests: write what is queued, then close */
    S_LINGER, /* write side shut, discarding input until EOF or the linger timeout */
};

enum input_result {
    IN_NEED_INPUT, /* more bytes from the client are needed */
    IN_BACKLOG,    /* output must drain first */
    IN_WAIT,       /* waiting for the origin */
    IN_DONE,       /* no more requests on this connection */
};

/* What a connection holds only while a request is on it: the parser's state, the request
 * (its head's fields: most of the size), its body's decoding and the exchange. Taken from
 * the worker's pool with the read buffer when bytes arrive, given back with it when the
 * connection waits idle (conn.c, "Idle connections"). */
struct um__conn_req {
    struct um__conn *c;
    struct um_http1_parser parser;
    size_t bdec;        /* decoded body bytes waiting at rbuf[bpos..bpos+bdec) */
    uint64_t body_left; /* Content-Length bytes still to read */
    uint64_t body_seen; /* body bytes decoded so far */
    struct um_chunked chunked;
    bool resp_chunked; /* the response body is framed with chunked coding */
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
    bool closing;      /* close once the output is flushed */
    bool linger;       /* ...with a lingering close */
    bool draining;     /* server stopping: no keep-alive */
    bool head_started; /* header timer armed for the current request */
    bool in_drive;     /* the exchange's sends need no wake-up */

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
};

static inline struct um__conn *um__conn_of(struct um__exchange *x)
{
    return ((struct um__conn_req *)(void *)((char *)x - offsetof(struct um__conn_req, x)))->c;
}

/* An origin answering from outside drive() (an upstream socket's event) wakes the connection. */
static inline void um__conn_wake(struct um__conn *c)
{
    if (!c->in_drive)
        um__worker_ready(c->w, c);
}

/* conn_http1.c */
/* How the exchange reaches the connection. */
extern const struct um__exchange_conn_ops um__conn_exchange_ops;
/* Parses and begins what is buffered, as far as the state allows. */
enum input_result um__conn_process_input(struct um__conn *c);
/* Answers an unusable request with status and stops reading from the connection (c->r
 * is set: bytes were read). */
void um__conn_fail(struct um__conn *c, int status);

#endif
