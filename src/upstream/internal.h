/* SPDX-License-Identifier: BSD-2-Clause */
/* Types shared by the files of the upstream module only: the origin (upstream.c: servers,
 * balancing, passive health, retries, the request's fields, handing the response to the
 * sink) and its transports behind struct um_up_transport, libcurl's multi interface
 * (curl.c) and Umbra's own HTTP/1.1 client (h1.c). The transports are peers: neither calls
 * the other, and both report to upstream.c through the um__up_* functions below, in
 * Umbra's own terms (enum um_up_err, struct um_http1_response). */
#ifndef UMBRA_UPSTREAM_INTERNAL_H
#define UMBRA_UPSTREAM_INTERNAL_H

#include <errno.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "umbra/context.h"
#include "umbra/http1.h"
#include "umbra/httpfield.h"
#include "umbra/loop.h"
#include "umbra/transport.h"
#include "umbra/tls.h"
#include "umbra/upstream.h"

#define MAX_RESPONSE_HEAD (64 * 1024)
/* Interim responses passed on per fetch: an origin that sends 1xx without end must not
 * fill a client's output queue (the first-byte timeout still ends it). */
#define UM_UP_MAX_INFOS 8
#define UM_UP_ERRBUF 256 /* curl.c checks that it holds CURL_ERROR_SIZE */

/* How an attempt ended, in what the common code decides by: whether the server is to
 * blame (passive health), whether another server may be tried (idempotent requests whose
 * body has not started), and what the client gets (502, or 504 for the timeouts). After
 * the response head every error only cuts the body short. */
enum um_up_err {
    UM_UP_OK,              /* the response is complete */
    UM_UP_CONNECT,         /* no connection: refused, unreachable, name not resolved */
    UM_UP_CONNECT_TIMEOUT, /* no connection within connect_timeout (libcurl's own timeout
                              before the head is counted here too); 504 */
    UM_UP_TLS,             /* the TLS handshake failed */
    UM_UP_TLS_VERIFY,      /* the server's certificate did not verify: not retried */
    UM_UP_SEND,            /* sending the request failed */
    UM_UP_RECV,            /* reading failed, or the server closed without an answer */
    UM_UP_TIMEOUT,         /* no response head within timeout (upstream.c's timer): 504,
                              not retried; after the head, the body stalled */
    UM_UP_BAD_HEAD,        /* a malformed response head: not retried */
    UM_UP_HEAD_TOO_LARGE,  /* over MAX_RESPONSE_HEAD, or too many fields: not retried */
    UM_UP_BAD_BODY,        /* a malformed body (its chunked coding) */
    UM_UP_CUT_SHORT,       /* the server closed before the end of the body */
    UM_UP_LOCAL,           /* out of descriptors or memory here (EMFILE...): not the
                              server's fault, and no other server would do better */
    UM_UP_ABORTED,         /* the client's request body failed (x->body_failed): the
                              connection answers that itself */
    UM_UP_OTHER,           /* anything else (a local TLS setting, a protocol libcurl
                              refuses): 502, not counted against the server */
};

/* A short text for err, for the log when the transport said nothing more. */
const char *um__up_err_text(enum um_up_err err);

/* True for the errno of running out of something here, not the server's fault. */
static inline bool um__up_errno_local(int e)
{
    return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

struct server_state {
    atomic_int fails;           /* failures in a row */
    atomic_uint_fast64_t down_until; /* loop ms; 0: up */
    atomic_int active;          /* fetches in flight (least_conn) */
    /* Where Umbra's own client reaches the server: the config's address, or for a server
     * named by host name (whose requests libcurl carries) the address its name had when
     * the upstream was built, for upgrades, which libcurl cannot carry (nginx too resolves
     * its upstreams' names once, at start and reload). addrlen 0: none. tls_host: the
     * name or address a TLS certificate must match. */
    struct um_upstream_server h1;
    char tls_host[256];
};

struct xfer;

/* A transport: what carries an attempt to a server and the answer back. Every function
 * runs on the worker that owns x. */
struct um_up_transport {
    const char *name;
    /* It carries upgrade requests (x->upgrade) and hands a 101's connection over with
     * um__up_upgraded. */
    bool upgrade;
    /* Starts an attempt on x->server (or x->url): sets x->conn to the attempt's state,
     * sends the request, and reports through um__up_head, um__up_body, um__up_read_body
     * and, once, um__up_finish, which may come before start returns. */
    void (*start)(struct xfer *x);
    /* Takes the running attempt (x->conn, not NULL) off the transport without reporting
     * anything, closing a connection that is in the middle of an exchange; x->conn is NULL
     * after. */
    void (*release)(struct xfer *x);
    /* The sink has room again after um__up_body returned 0 (x->paused_recv is cleared). */
    void (*resume)(struct xfer *x);
    /* More request body is buffered after um__up_read_body returned UM_AGAIN
     * (x->paused_send is cleared). */
    void (*body_ready)(struct xfer *x);
    /* Process-wide set-up and clean-up on the main thread (um_upstream_global_init), or
     * NULL. */
    void (*global_init)(void);
    void (*global_cleanup)(void);
};

/* The upstream module's state for a configuration (umbra/module.h make/drop): the thread
 * that probes the servers of the upstreams with health = {...} (health.c). Main thread. */
void *um__health_make(const struct um_config *now, const struct um_config *was, void *was_state,
                      int workers, char *err, size_t errlen);
void um__health_drop(void *state);

extern const struct um_up_transport um__up_curl; /* curl.c */
extern const struct um_up_transport um__up_h1;   /* h1.c */
extern const struct um_up_transport um__up_h2;   /* h2.c */

struct upstream {
    struct um_origin base;
    atomic_int refcnt;
    const struct um_upstream_conf *conf;
    struct server_state *servers;
    int *slots; /* metrics slot per server */
    const struct um_up_transport **transports; /* per server */
    /* TLS for the upgrades Umbra's client carries to https:// servers at an IP address
     * (NULL: none, or it could not be set up). */
    struct um_tls_client *tls_client;
    atomic_uint rr;
};

/* One fetch, across its attempts. */
struct xfer {
    struct upstream *up;
    struct um_context *ctx; /* the worker's, from the fetch */
    struct um_loop *loop;   /* ctx->loop */
    struct um_sink *sink;
    const struct um_up_transport *tp; /* the current attempt's */
    void *conn; /* the transport's state for the running attempt; NULL: none runs */
    char *fields;  /* the request's fields as text ("Name: value\r\n"...) */
    size_t fields_len;
    bool has_host; /* fields has a Host */
    char *target; /* path and query as the client sent them */
    char *method; /* NULL: GET */
    /* The client's address, for the PROXY header of send_proxy ("" when it has none). */
    char client_ip[46];
    int client_port;
    char *url;    /* a hook's server ("scheme://host:port") instead of the upstream's */
    char *body;   /* a hook's body instead of the client's; body_pos bytes of it sent */
    size_t body_pos;
    int64_t body_size; /* -1: chunked */
    /* Why the attempt failed, for the log (the transport's words); empty: the error's
     * own text. */
    char errbuf[UM_UP_ERRBUF];
    int server;
    uint64_t tried; /* bit per server already tried (first 64) */
    int attempts;
    bool idempotent, is_head, has_body, body_started, body_failed;
    bool head_sent;
    bool upgrade;    /* the client asked to switch protocols (UM_REQ_F_UPGRADE): a 101
                        answer hands the connection over (um__up_upgraded) */
    unsigned infos; /* interim responses passed on (at most UM_UP_MAX_INFOS) */
    unsigned h2_retries; /* h2.c: sent again on a new connection after GOAWAY or
                            REFUSED_STREAM (the server did not process it) */
    bool counted;    /* counted in the server's active fetches */
    bool paused_recv, paused_send;
    bool unflushed;  /* body bytes went to the sink since its last on_flush */
    uint64_t key_hash;
    uint64_t t_attempt; /* loop ms: start of the current attempt (metrics) */
    uint64_t log_conn;  /* the connection that started the fetch, for log lines */
    /* Armed for `timeout` at each attempt's start and stopped by the head; h1.c arms it
     * again for a body that stalls. Firing ends the attempt with UM_UP_TIMEOUT. */
    struct um_timer ttfb;
    /* A gRPC call (content-type application/grpc over HTTP/2): past its head, a timeout
     * ends it with grpc-status DEADLINE_EXCEEDED in trailers instead of a cut body. Its
     * grpc-timeout, if any, is the deadline (loop ms; 0: none) that bounds every wait of
     * the call in place of the upstream's timeout. */
    bool grpc;
    uint64_t deadline;
    bool te_trailers; /* the client's TE lists "trailers" (sent on over HTTP/2) */
};

/* How long the attempt may wait for the server now: the upstream's timeout, or what is
 * left of a gRPC call's deadline when that is sooner (at least 1 ms). */
uint64_t um__up_timeout_ms(const struct xfer *x);

/* upstream.c, for the transports. */

/* The attempt's final response head (the transport skips 1xx heads): stops the timer,
 * counts the server as answering, and hands the head to the sink (x->head_sent). resp
 * is borrowed for the call. */
void um__up_head(struct xfer *x, const struct um_http1_response *resp);
/* An interim (1xx) response head before the final one: 100, 102 and 103 go to the sink
 * (their end-to-end fields), at most UM_UP_MAX_INFOS of them; others are dropped. */
void um__up_info(struct xfer *x, const struct um_http1_response *resp);
/* The server answered an upgrade request (x->upgrade) with 101: the transport gives up
 * its connection as backend (a transport the sink will own; the attempt is already
 * detached from x: x->conn is NULL) with the pre_len bytes it read after the head, and
 * the sink takes the tunnel. Frees x. resp and pre are borrowed for the call. */
void um__up_upgraded(struct xfer *x, const struct um_http1_response *resp,
                     struct um_transport *backend, const char *pre, size_t pre_len);
/* Body bytes for the sink. Returns len when taken, or 0 when the client is behind:
 * x->paused_recv is set and the transport stops reading until its resume. */
size_t um__up_body(struct xfer *x, const char *data, size_t len);
/* The transport's read would block (its bytes ran dry for now): when body bytes went to
 * the sink since the last call, the sink is told (um_sink_flush), so that a layer that
 * holds bytes back (compression) sends them. Call it once per dry spell, not per read. */
void um__up_ran_dry(struct xfer *x);
/* Copies up to len bytes of the request body (a hook's, or the client's through the sink)
 * into buf. Returns the count (> 0), 0 at its end, UM_AGAIN when nothing is buffered
 * (x->paused_send is set; body_ready follows), or UM_ERR when the client's body failed
 * (x->body_failed is set: end the attempt with UM_UP_ABORTED). */
ssize_t um__up_read_body(struct xfer *x, char *buf, size_t len);
/* The response's trailer section (resp's fields: the transport's, borrowed for the call),
 * before um__up_finish(UM_UP_OK): the ones um_http_trailer_allowed accepts go to the
 * sink. */
void um__up_trailers(struct xfer *x, const struct um_header *h, size_t n);
/* The request's trailer section, once um__up_read_body returned 0: sets *h (valid until
 * the attempt ends) and returns how many fields; 0: none (a hook's body has none). */
size_t um__up_read_trailers(struct xfer *x, const struct um_header **h);
/* The attempt ended: err is UM_UP_OK when the response is complete, else why it failed
 * (x->errbuf may hold the details). Releases the attempt; a retry may start another,
 * else the sink gets its answer or its end. x may be freed on return. */
void um__up_finish(struct xfer *x, enum um_up_err err);

/* The worker context's slots of the two clients (umbra/context.h); listed in
 * um_upstream_module (upstream.c). */
extern struct um_context_slot um__curl_slot;
extern struct um_context_slot um__h1_slot;
extern struct um_context_slot um__h2_slot;

/* --- fields.c: the request's fields (upstream.c builds them per fetch) ----------------- */

bool um__up_is_hop_by_hop(enum um_field_id id);
void um__up_build_fields(struct upstream *up, const struct um_fetch *f, struct xfer *x);
void um__up_grpc(const struct um_request *req, struct xfer *x);

/* --- h1.c, h1_wire.c: the HTTP/1.1 transport's connections and pools ------------------- */

#define H1_IN_SIZE (32 * 1024)             /* read buffer; grows for a long head */
#define H1_TRAILERS 4096                   /* a trailer section kept; a longer one: dropped */

enum h1_state { H1_CONNECTING, H1_HANDSHAKE, H1_ACTIVE, H1_IDLE };
enum h1_framing { F_NONE, F_LENGTH, F_CHUNKED, F_CLOSE };

struct h1pool {
    struct h1pool *next;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    struct h1conn *idle; /* newest first */
    size_t num_idle;
};

/* The state of a worker context's UM_CONTEXT_H1_CLIENT slot. */
struct h1worker {
    struct um_context *ctx;
    struct um_loop *loop;
    struct h1pool *pools;
    struct h1conn *all;  /* every open connection, for the loop's stop */
    struct h1conn *dead; /* closed in this loop turn: freed at its end */
    struct um_task reap;
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
    char *trail; /* a chunked answer's trailer section (H1_TRAILERS bytes, made at need) */
    enum h1_framing framing;
    uint64_t remaining; /* F_LENGTH */
    struct um_chunked chunk;
};

void um__h1_conn_close(struct h1conn *c);
bool um__h1_conn_want(struct h1conn *c, uint32_t events);
void um__h1_detach(struct h1conn *c);
void um__h1_fail(struct h1conn *c, enum um_up_err err, const char *why);
void um__h1_fail_errno(struct h1conn *c, enum um_up_err err, const char *what, int e);
void um__h1_complete(struct h1conn *c);
void um__h1_attempt(struct xfer *x, bool new_conn);
void um__h1_put_head(struct h1conn *c, struct xfer *x, bool first);
bool um__h1_send_request(struct h1conn *c);
void um__h1_receive(struct h1conn *c);

/* --- h2.c, h2_session.c: the HTTP/2 transport (protocol = "h2") ------------------------ */

struct nghttp2_session;
struct nghttp2_session_callbacks;

enum h2_state { H2_CONNECTING, H2_HANDSHAKE, H2_ACTIVE };

/* The state of a worker context's UM_CONTEXT_H2 slot. */
struct h2worker {
    struct um_context *ctx;
    struct um_loop *loop;
    struct h2pool *pools;
    struct h2conn *all;     /* every open connection, for the loop's stop */
    struct h2conn *dead;    /* closed in this loop turn: freed at its end */
    struct h2conn *flushq;  /* connections with frames to send at the turn's end */
    struct h2stream *orphans; /* complete answers whose connection closed before the sink
                                 took their last bytes */
    struct nghttp2_session_callbacks *cbs;
    char *rbuf;             /* one read buffer: nghttp2 takes what it is given at once */
    struct um_task task;    /* sends what the connections have queued, then frees the dead */
};

/* Per worker and server address: its connections. */
struct h2pool {
    struct h2pool *next;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    bool https;
    char tls_host[256];     /* https: the name the certificate must have */
    struct h2conn *conns;
};

struct h2conn {
    struct um_io io;
    struct h2worker *hw;
    struct h2pool *pool;    /* NULL once closed */
    struct h2conn *next_pool, *prev_all, *next_all, *next_flush;
    struct nghttp2_session *session;
    struct um_transport *tls; /* an https:// server's TLS, "h2" by ALPN; NULL: plain */
    struct h2stream *streams; /* every stream nghttp2 may still call about */
    size_t nopen;           /* of them, the ones not closed: counted against the limit */
    struct um_timer timer;  /* connect timeout; idle: the next PING, its answer, expiry */
    enum h2_state state;
    bool goaway;            /* the server said GOAWAY (or we did): no new streams */
    bool got_settings;      /* the server's SETTINGS arrived: its stream limit holds */
    bool queued;            /* in hw->flushq */
    bool ping_out;          /* a PING waits for its answer (the timer says how long) */
    uint64_t idle_since;    /* loop ms: the last stream ended */
    bool dead;
    uint32_t want;
    char *wbuf;             /* frames to send: wbuf[wpos..wlen) */
    size_t wpos, wlen, wcap;
};

struct h2stream {
    struct h2stream **list, *prev, *next; /* in its connection's streams or hw->orphans */
    struct h2conn *c;       /* NULL: an orphan */
    struct xfer *x;         /* NULL: the attempt is gone; the stream waits for its close */
    int32_t id;
    int status;
    int64_t content_length; /* -1: none given */
    bool head_done, ended, closed, end_sent, deferred, too_big, bad;
    bool has_trailers;      /* hbuf and fld hold the response's trailers, not passed yet */
    char *pend;             /* response body the sink has not taken (not consumed either, so
                               its size stays within the stream's window) */
    size_t pend_len, pend_cap;
    /* the head being received: names and values copied into hbuf, at these offsets */
    char *hbuf;
    size_t hlen, hcap, nfields;
    struct { uint32_t name, nlen, value, vlen; } fld[UM_HTTP1_MAX_RESPONSE_FIELDS];
};

void um__h2c_schedule(struct h2conn *c);
void um__h2c_pinged(struct h2conn *c);
void um__h2c_conn_fail(struct h2conn *c, enum um_up_err err, const char *why);
void um__h2c_attempt(struct xfer *x, bool new_conn);
void um__h2c_detach(struct h2stream *s);
void um__h2c_stream_maybe_free(struct h2stream *s);
void um__h2c_try_finish(struct h2stream *s);
void um__h2c_pass_trailers(struct h2stream *s);
bool um__h2c_replay(struct h2stream *s, const char *why);
struct nghttp2_session_callbacks *um__h2c_callbacks(void);
bool um__h2c_session_new(struct h2conn *c);
bool um__h2c_submit(struct h2stream *s, struct xfer *x);

/* An upstream connection's socket (sock.c), for both clients: send(2) and recv(2), or
 * their TLS versions, -1 with errno EAGAIN when it would block; and its close, out of the
 * epoll set first, the TLS session (which owns the socket) or the socket closed, *tls
 * NULL and io->fd -1 after. */
ssize_t um__up_io_send(struct um_transport *tls, int fd, const void *p, size_t n);
ssize_t um__up_io_recv(struct um_transport *tls, int fd, void *p, size_t n);
void um__up_sock_close(struct um_loop *l, struct um_io *io, struct um_transport **tls);

#endif
