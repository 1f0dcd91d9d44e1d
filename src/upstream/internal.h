/* Types shared by the files of the upstream module only: the origin (upstream.c: servers,
 * balancing, the request's fields, the response head, errors and retries) and its two
 * transports, libcurl's multi interface (upstream.c) and Umbra's own HTTP/1.1 client
 * (h1.c) for http:// servers at an IP address. */
#ifndef UMBRA_UPSTREAM_INTERNAL_H
#define UMBRA_UPSTREAM_INTERNAL_H

#include <curl/curl.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "umbra/context.h"
#include "umbra/loop.h"
#include "umbra/upstream.h"

#define MAX_RESPONSE_HEAD (64 * 1024)
#define MAX_RESPONSE_FIELDS 128

struct server_state {
    atomic_int fails;           /* failures in a row */
    atomic_uint_fast64_t down_until; /* loop ms; 0: up */
    atomic_int active;          /* fetches in flight (least_conn) */
};

struct upstream {
    struct um_origin base;
    atomic_int refcnt;
    const struct um_upstream_conf *conf;
    struct server_state *servers;
    int *slots; /* metrics slot per server */
    atomic_uint rr;
};

struct worker_curl;
struct h1conn;

struct xfer {
    struct upstream *up;
    struct worker_curl *wc;
    struct um_context *ctx; /* the worker's, from the fetch */
    struct um_loop *loop;   /* ctx->loop */
    struct um_sink *sink;
    CURL *easy;
    struct curl_slist *headers;
    char *fields;  /* the request's fields as text ("Name: value\r\n"...), for h1.c */
    size_t fields_len;
    bool has_host; /* fields has a Host */
    struct h1conn *hc; /* h1.c's connection while an attempt runs on one */
    char *target; /* path and query as the client sent them */
    char *method; /* NULL: GET */
    char *url;    /* a hook's server ("scheme://host:port") instead of the upstream's */
    char *body;   /* a hook's body instead of the client's; body_pos bytes of it sent */
    size_t body_pos;
    curl_off_t body_size; /* -1: chunked */
    char errbuf[CURL_ERROR_SIZE];
    int server;
    uint64_t tried; /* bit per server already tried (first 64) */
    int attempts;
    bool idempotent, is_head, has_body, body_started, body_failed;
    bool head_sent, timed_out, in_multi;
    bool counted;    /* counted in the server's active fetches */
    bool logged;     /* the failure has been logged already */
    bool easy_ready; /* the handle has the options that never change */
    bool paused_recv, paused_send;
    int socket_errno; /* errno of a failed socket() for this attempt (EMFILE...), or 0 */
    uint64_t key_hash;
    uint64_t t_attempt; /* loop ms: start of the current attempt (metrics) */
    uint64_t log_conn;  /* the connection that started the fetch, for log lines */
    struct um_timer ttfb;
    /* the response head being collected */
    int status;
    char *hbuf;
    size_t hlen, hcap;
    size_t line_starts[MAX_RESPONSE_FIELDS + 1];
    size_t num_lines;
    bool head_bad;
    /* the final head's framing as deliver_head read it (h1.c reads the body by it) */
    int64_t resp_length;    /* Content-Length; -1: none */
    bool resp_te;           /* a Transfer-Encoding */
    bool resp_chunked;      /* ... whose final coding is chunked */
    bool resp_close;        /* Connection: close, or HTTP/1.0 without keep-alive */
};

/* upstream.c, for the transports. One line of the response head, with its line end (the
 * blank line ends the head and hands it to the sink). Returns len, or 0 when the head is
 * malformed or too large (logged; x->logged set). */
size_t um__up_head_line(char *data, size_t size, size_t nitems, void *userp);
/* The attempt ended: res is CURLE_OK when the response is complete, else the error (a
 * retry may start another attempt; else the sink gets its answer or its end). x may be
 * freed on return. */
void um__up_finish(struct xfer *x, CURLcode res);

/* Server i goes through Umbra's HTTP/1.1 client: an http:// server at an IP address
 * (config.c parsed it), unless the upstream says client = "curl". */
static inline bool um__up_native(const struct upstream *up, int i)
{
    const struct um_upstream_server *s = &up->conf->servers[i];
    return !up->conf->curl_only && !s->https && s->addrlen > 0;
}

/* h1.c. Starts an attempt on x->server over a kept-alive or new connection. */
void um__h1_start(struct xfer *x);
/* The attempt is abandoned (cancel, timeout): its connection is closed. */
void um__h1_release(struct xfer *x);
/* The client has room again / more request body is buffered. */
void um__h1_resume(struct xfer *x);
void um__h1_body_ready(struct xfer *x);

#endif
