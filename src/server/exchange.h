/* SPDX-License-Identifier: BSD-2-Clause */
/* An exchange (exchange.c, router.c): one request and its response, apart from the
 * connection that carries it.
 *
 * The exchange holds the request head, the state of its body and of its response, the
 * sink the origin writes into, the arena of the request's hooks and what the access log
 * wants to know. The router, the hooks, the cache and the origins see only the exchange
 * (through the sink and struct um_fetch). The exchange reaches its connection through a
 * small table (struct um__exchange_conn_ops): HTTP/1.1 embeds one exchange in its
 * connection and begins it again for each request; an HTTP/2 connection embeds one in
 * each stream (conn_h2_stream.c), with the same table.
 *
 * The connection calls back into the exchange when its output drained
 * (um__exchange_proceed), when request body bytes arrived (um__exchange_body_ready) and
 * when the client is gone (um__exchange_cancel).
 *
 * Threads: the worker's, only. */
#ifndef UMBRA_SERVER_EXCHANGE_H
#define UMBRA_SERVER_EXCHANGE_H

#include "internal.h"
#include "umbra/hooks.h"
#include "umbra/transport.h"

struct um__exchange;

/* The connection side of an exchange. None of these does I/O: the connection sends after
 * the origin's call returns (it is woken when the call came from outside its own turn). */
struct um__exchange_conn_ops {
    /* Frames and queues the response head; adds the bytes it queued to x->resp_bytes.
     * May clear x->keepalive (a body delimited by the close). */
    void (*send_head)(struct um__exchange *x, const struct um_response_head *h);
    /* Queues len > 0 body bytes, copied. Returns len, or 0 when may_refuse and the output
     * is behind: the connection then calls um__exchange_proceed once it has drained. */
    size_t (*send_data)(struct um__exchange *x, const char *data, size_t len, bool may_refuse);
    /* Queues len > 0 body bytes that stay valid until release(ctx), which the connection
     * calls once (at once when it copies them). Returns len, or 0 when it cannot take
     * more now (nothing kept): as send_data. */
    size_t (*send_ref)(struct um__exchange *x, const char *data, size_t len,
                       void (*release)(void *ctx), void *ctx, bool may_refuse);
    /* Queues len > 0 bytes of file fd at off; the connection owns fd from now on. */
    void (*send_file)(struct um__exchange *x, int fd, uint64_t off, uint64_t len);
    /* The response is complete. */
    void (*end)(struct um__exchange *x);
    /* The response is cut short: the client must not take it for whole (HTTP/1.1:
     * close the connection after what is queued). */
    void (*abort)(struct um__exchange *x);
    /* The request body: copies up to len decoded bytes into buf. Returns the count
     * (> 0), 0 at its end, UM_AGAIN when none are buffered, UM_ERR when it is bad (with
     * x->body_error set). */
    ssize_t (*read_body)(struct um__exchange *x, char *buf, size_t len);
    /* Queues the response's trailer section (n > 0 fields, borrowed for the call: the
     * connection copies them), after the last body byte and before end; NULL, or a
     * client that cannot take them (an HTTP/1.1 body not chunked): dropped. */
    void (*send_trailers)(struct um__exchange *x, const struct um_header *h, size_t n);
    /* The request's trailer section, once read_body returned 0: *h set (valid until the
     * exchange is finished), the count returned; NULL or 0: none. */
    size_t (*read_trailers)(struct um__exchange *x, const struct um_header **h);
    /* Queues an interim response (1xx) before the head, when the client can take one
     * (HTTP/1.1); NULL or a client that cannot: dropped. */
    void (*send_info)(struct um__exchange *x, int status, const struct um_header *h, size_t n);
    /* The origin agreed to the client's protocol switch (um_sink_ops.on_upgrade): queues
     * the 101 head h and takes backend (owned from now on) and the pre_len bytes it sent
     * first, for the tunnel that follows once the exchange is complete (HTTP/1.1's
     * conn_tunnel.c). NULL (HTTP/2): the backend is closed and the client gets 502. */
    void (*upgrade)(struct um__exchange *x, const struct um_response_head *h,
                    struct um_transport *backend, const char *pre, size_t pre_len);
};

struct um__exchange {
    const struct um__exchange_conn_ops *conn_ops;
    /* The connection's, set by um__exchange_init: they outlive the exchange. */
    struct um__worker *w;
    struct um_runtime *runtime;   /* the connection's (it holds the reference) */
    struct um_config *config;     /* its snapshot */
    struct um_transport *transport; /* for the scheme and the TLS server name */
    const char *peer_ip;
    int peer_port;
    uint64_t conn_id; /* for the log */
    /* The admin listener's (UM__ACCEPT_F_ADMIN): routed to the internal routes only
     * (um__admin_route), and neither logged nor counted, as the admin's requests never
     * were: the figures are the site's. */
    bool admin;

    /* The request. req's slices point into the connection's read buffer. */
    struct um_request req;
    bool req_parsed;  /* req holds the current request's head */
    bool body_done;   /* the whole request body has arrived (or there is none) */
    bool body_wanted; /* the origin asked for body bytes that had not arrived */
    int body_error;   /* 400 or 413 when the body turned out bad */

    /* The response. */
    struct um_sink sink;
    struct um_origin *origin; /* answering the current request; NULL: we answer */
    bool head_only;           /* HEAD: no body goes out */
    bool keepalive;           /* HTTP/1.1: the connection may carry another request */
    bool head_sent;
    bool ended;               /* on_end came */
    bool origin_paused;       /* a send returned 0; resume the origin once drained */
    bool upgraded;            /* the response was a 101: a tunnel follows */
    /* A gRPC call (an HTTP/2 request with content-type application/grpc...): an answer
     * that is not gRPC's (an error of ours or a server's) goes out as a trailers-only
     * gRPC answer with the matching grpc-status (grpc.c), and nothing is cached. */
    bool grpc;
    int status;

    /* Strings the request's hooks made (a rewritten path, header values...); freed when
     * the request is complete. */
    struct um_arena arena;
    /* A routed request whose body is read before dispatch: its fetch (the path in the
     * arena) and origin. */
    struct um_fetch pending;
    struct um_origin *pending_origin;

    /* Access rules (umbra/access.h): the route's response header rules, applied to the
     * head before it goes out (NULL: none); a password being verified off the loop
     * (router.c: made by the router, the verifier's once submitted, then NULL here);
     * verified: the password was right, the routing that follows skips the check. */
    const struct um_access_conf *access_resp;
    struct um__access_wait *access_wait;
    bool access_verified;

    /* For the access log and the metrics (accesslog.h). */
    bool via_upstream;
    int route_slot;
    uint64_t t_start, t_dispatch, t_head; /* loop ms */
    uint64_t resp_bytes, resp_body_bytes;
    char cache_status[128]; /* the Cache-Status value sent, for the log line */
    size_t cache_status_len;
    bool has_cache;         /* cache: what the cache layer did (its pointers NULL) */
    struct um_cache_status cache;
};

/* What um__exchange_start did with the request. */
enum um__start {
    UM__START_ANSWERED,   /* answered already (an error, a redirect, a hook) */
    UM__START_DISPATCHED, /* handed to its origin */
    UM__START_BODY_FIRST, /* routed; the body must be read before um__exchange_dispatch */
};

/* exchange.c: the life of a request */

/* Sets x up for a connection (once; x is zeroed by the caller). */
void um__exchange_init(struct um__exchange *x, const struct um__exchange_conn_ops *ops,
                       struct um__worker *w, struct um_runtime *runtime,
                       struct um_transport *transport, const char *peer_ip, int peer_port,
                       uint64_t conn_id);
/* Prepares the response state for a new request (or for an error before one). */
void um__exchange_begin(struct um__exchange *x, bool head_only, bool keepalive);
/* Routes the parsed request (req_parsed, the body state set) and hands it to its origin,
 * or answers it. has_body: a request body follows the head. */
enum um__start um__exchange_start(struct um__exchange *x, bool has_body);
/* Hands the pending request (UM__START_BODY_FIRST) to its origin, its body read. */
void um__exchange_dispatch_pending(struct um__exchange *x);
/* The output drained after a send returned 0: the origin goes on. */
void um__exchange_proceed(struct um__exchange *x);
/* Request body bytes arrived (or the body ended) after a read_body said UM_AGAIN. */
void um__exchange_body_ready(struct um__exchange *x);
/* The request is answered: one access log record (status 0: the response's). */
void um__exchange_log(struct um__exchange *x, int status);
/* The request is done with (its response may still be draining): frees its arena. */
void um__exchange_finish(struct um__exchange *x);
/* The client is gone: the origin stops, and an unanswered request is logged as 499. */
void um__exchange_cancel(struct um__exchange *x);
/* A small complete response with a plain-text body (errors), with up to 3 extra fields. */
void um__exchange_respond(struct um__exchange *x, int status, const struct um_header *extra,
                          size_t num_extra);
/* The standard reason phrase of status. */
const char *um__reason_phrase(int status);

/* Hands x to origin with fetch f (copied by the origin as it needs): the router's second
 * pass, after a password was verified off the loop. */
void um__exchange_dispatch(struct um__exchange *x, struct um_origin *origin, struct um_fetch *f);

/* grpc.c: gRPC calls. */

/* Whether req is a gRPC call: content-type application/grpc or application/grpc+FORMAT
 * (not gRPC-Web's). */
bool um__grpc_request(const struct um_request *req);
/* When h is not a gRPC answer (its status is not 200), fills *out as the trailers-only
 * gRPC answer that stands for it (status 200, content-type, grpc-status from h's status,
 * grpc-message; content_length 0), its fields in fields (room for 3) and status_buf
 * (12 bytes), sets x->head_only so that h's body is dropped, and returns true. */
bool um__grpc_error_head(struct um__exchange *x, const struct um_response_head *h,
                         struct um_response_head *out, struct um_header *fields, char *status_buf);

/* router.c: picks the route and origin of x's parsed request and fills f. Returns NULL
 * after answering it (bad path, no route, a redirect, a hook's own answer). */
struct um_origin *um__route(struct um__exchange *x, struct um_fetch *f);
/* router.c: frees a verification x made and never handed to the verifier. */
void um__access_wait_drop(struct um__exchange *x);

#endif
