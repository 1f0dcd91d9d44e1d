/* SPDX-License-Identifier: BSD-2-Clause */
/* The Origin interface: where a response comes from (static files, an upstream, CGI, a
 * Lua hook, or a decorator around another origin: cache, compress). The connection code
 * and the cache only ever talk to this table of functions.
 *
 * Lifetimes. A sink may be freed inside its own on_end: a decorator's sink (the cache's
 * pass, compress's fetch, a Lua hook's fetch) frees its state there and then ends its
 * client. So the origin calling on_end forgets the sink first (clears its pointer and
 * sink->origin_data) and touches neither after the call. No other sink callback frees
 * the sink. destroy drops the caller's reference to the origin: the origin is freed when
 * the last one goes (an upstream is shared by the routes and runtimes that name it). */
#ifndef UMBRA_ORIGIN_H
#define UMBRA_ORIGIN_H

#include <sys/types.h>

#include "umbra/cachestatus.h"
#include "umbra/common.h"
#include "umbra/http1.h"

struct um_config;
struct um_context;
struct um_route;
struct um_origin;
struct um_sink;
struct um_transport;

/* The head of a response as an origin produces it. Borrowed for the duration of the
 * on_head call only: the sink copies what it keeps. */
struct um_response_head {
    int status;
    const struct um_header *headers; /* end-to-end fields only: no Server, Connection,
                                        Content-Length, Transfer-Encoding; a Date here is
                                        sent instead of the current time */
    size_t num_headers;
    int64_t content_length; /* bytes of body that will follow; -1: unknown until on_end */
    um_str reason;          /* reason phrase; empty: the standard one */
    /* Set by an on_response hook for the cache: has_ttl: store with this freshness
     * lifetime (seconds) instead of the one the fields give; no_store: do not store. */
    bool has_ttl;
    bool no_store;
    int64_t ttl;
    /* Set by an origin beneath the cache that keeps the answer itself (the disk tier): a
     * hit of it, served by the cache as it passes and not kept in memory this time. */
    bool not_promoted;
    /* Set by the cache layer: what it did for this request, from which it also wrote the
     * Cache-Status field among headers. Borrowed like the rest; NULL: no cache was
     * involved. */
    const struct um_cache_status *cache;
    /* Optional: headers[0..num_wire) already serialised as HTTP/1.1 field lines, "Name:
     * value\r\n" each and nothing else, in one block (a cache hit's stored head, made
     * when the response was stored). An HTTP/1.1 connection copies the block at once
     * instead of writing those fields one by one; the fields after them it writes as
     * usual. Borrowed like the rest. A layer that passes a head on with its fields
     * changed, dropped or reordered must pass it without a block (wire {NULL, 0},
     * num_wire 0), or the client would get the old fields. */
    um_str wire;
    size_t num_wire;
};

/* The client side of a fetch. The connection implements it, and so does every layer that
 * wraps another origin (cache, compression, Lua hooks): such a layer is the origin of its
 * client's sink and the sink of its inner origin. An origin calls it always on the worker
 * thread that started the fetch, never after on_end.
 * Lifetime: on_end is the last call, and after it returns the caller must not touch the
 * sink nor its origin_data: a wrapping layer frees its per-fetch state (which holds the
 * sink) inside its on_end, then passes on_end on to its own client. The connection's
 * sink frees nothing and does no I/O inside any call: it acts after the origin's
 * callback returns, so an origin may still touch its own state after calling it. */
struct um_sink_ops {
    /* Called once, first. */
    void (*on_head)(struct um_sink *s, const struct um_response_head *head);
    /* Body bytes in memory, borrowed for the call. Returns len when taken, or 0 when the
     * client is behind: the origin then stops, and offers the same bytes again after the
     * connection calls its resume. */
    size_t (*on_data)(struct um_sink *s, const char *data, size_t len);
    /* Body bytes from a file: len bytes at offset off. The sink owns fd from now on. */
    void (*on_file)(struct um_sink *s, int fd, uint64_t off, uint64_t len);
    /* Called once, last. err is UM_OK when the body is complete, UM_ERR when it is not
     * (the client must then not be told the body was whole). s may be freed before it
     * returns: the caller forgets s first and touches it no more. */
    void (*on_end)(struct um_sink *s, int err);
    /* Body bytes in memory that stay valid until release(ctx): like on_data, but the sink
     * may send them without copying. Returns len when taken (release is then called once,
     * when the sink is done with them: maybe at once, maybe later on this thread), or 0
     * when the client is behind (nothing kept; the caller still owns ctx). */
    size_t (*on_data_ref)(struct um_sink *s, const char *data, size_t len,
                          void (*release)(void *ctx), void *ctx);
    /* The request body, for origins with UM_ORIGIN_F_STREAM_BODY: copies up to len bytes
     * into buf. Returns the count (> 0), 0 at the end of the body, or UM_AGAIN when nothing
     * is buffered yet (the connection calls the origin's body_ready when there is). */
    ssize_t (*read_body)(struct um_sink *s, char *buf, size_t len);
    /* Optional (NULL: interim responses are dropped): an interim response (100, 102 or 103)
     * before the head, its fields borrowed for the call. Never stored by a cache; the
     * connection passes it on to clients that can take it (HTTP/1.1), and drops it once
     * the head went out. */
    void (*on_info)(struct um_sink *s, int status, const struct um_header *h, size_t n);
    /* Optional (NULL: the sink cannot take a tunnel, and an origin answers an upgrade
     * request 501 without forwarding it): the origin agreed to the client's protocol
     * switch (a 101 answer, head's fields borrowed for the call: the end-to-end ones and
     * Upgrade). The sink owns backend from now on (a connected transport, non-blocking,
     * not in any loop: its close frees it) and copies the pre_len bytes the origin read
     * after the 101 head, the first of the tunnel. Called instead of on_head, and last
     * (no on_end follows). */
    void (*on_upgrade)(struct um_sink *s, const struct um_response_head *head,
                       struct um_transport *backend, const char *pre, size_t pre_len);
    /* Optional (NULL: the sink holds nothing back): the origin's body bytes ran dry for
     * now (its read would block) after some it passed since its last call. A layer that
     * keeps bytes back to work on them (a compressing one) passes on what it holds, so
     * that a live stream (server-sent events) stays live; a layer in between passes the
     * call on. Says nothing about the end; never after on_end. Origins whose bytes arrive
     * over time (upstream, CGI) call it through um_sink_flush, once per dry spell, not
     * per on_data: every call costs an encoder a few bytes of ratio. */
    void (*on_flush)(struct um_sink *s);
    /* Optional (NULL: trailers are dropped here): the response's trailer section, after
     * its last body byte and before on_end(UM_OK), at most once. Its fields are borrowed
     * for the call and are end-to-end ones only (the origin left out what
     * um_http_trailer_allowed refuses). A layer in between passes them on; a layer that
     * stores the response does not store one with trailers (the cache). */
    void (*on_trailers)(struct um_sink *s, const struct um_header *h, size_t n);
    /* Optional (NULL: the request has none): the request's trailer section, for an origin
     * that read the body to its end (read_body returned 0). Sets *h to the fields (valid
     * until on_end) and returns how many; 0: none. The connection left out what
     * um_http_trailer_allowed refuses. */
    size_t (*read_trailers)(struct um_sink *s, const struct um_header **h);
};


struct um_sink {
    const struct um_sink_ops *ops;
    /* The state of the origin serving this fetch: set by fetch, cleared before on_end.
     * Only that origin reads it. */
    void *origin_data;
};

/* Passes an interim response to s when its ops take one. */
static inline void um_sink_info(struct um_sink *s, int status, const struct um_header *h,
                                size_t n)
{
    if (s->ops->on_info)
        s->ops->on_info(s, status, h, n);
}
/* Tells s that the origin's body bytes ran dry for now (um_sink_ops.on_flush). */
static inline void um_sink_flush(struct um_sink *s)
{
    if (s->ops->on_flush)
        s->ops->on_flush(s);
}
/* Passes the response's trailer section to s when its ops take one (on_trailers). */
static inline void um_sink_trailers(struct um_sink *s, const struct um_header *h, size_t n)
{
    if (n > 0 && s->ops->on_trailers) s->ops->on_trailers(s, h, n);
}
/* The request's trailer section (read_trailers): how many fields, *h set; 0 without. */
static inline size_t um_sink_read_trailers(struct um_sink *s, const struct um_header **h)
{
    *h = NULL;
    return s->ops->read_trailers ? s->ops->read_trailers(s, h) : 0;
}
/* A small answer an origin makes itself (an error page, a redirect, a purge result): the
 * head h, with its content_length set to body's length, then body, then the end. (No
 * resume: a client takes such a body whole, right after its head; a layer that refuses it
 * is discarding the answer.) */
void um_sink_answer(struct um_sink *s, struct um_response_head *h, const char *body);
/* The same with status, Content-Type text/plain and no other field. */
void um_sink_answer_text(struct um_sink *s, int status, const char *body);

/* One request handed to an origin. Borrowed for the duration of the fetch call: an
 * origin that answers later copies what it keeps. */
struct um_fetch {
    /* The worker the fetch runs on (its loop, its per-worker state); lives as long as the
     * worker, so an origin that answers later may keep the pointer. */
    struct um_context *ctx;
    const struct um_request *req; /* req->path is the path as sent, still encoded */
    const struct um_route *route;
    const struct um_config *config;
    /* The request path percent-decoded and normalised (um_path_normalize: no "..", no "."
     * or empty segments), with the route's prefix removed; may begin or end with '/'. */
    um_str path;
    const char *client_ip; /* the client's address, text ("127.0.0.1", "::1") */
    int client_port;
    const char *scheme;    /* "http" or "https": how the client reached us */
    /* What an on_request hook decided (all zero without hooks). */
    struct um_origin *backend; /* answer from this origin instead of the route's own (the
                                  cache layer, when the route has one, stays in front) */
    um_str cache_key;          /* base != NULL: the cache key instead of the URL's */
    bool no_cache;             /* pass the cache by */
    bool has_ttl;              /* store the response with this lifetime (seconds) */
    int64_t ttl;
    const char *upstream_url;  /* upstream: send to "scheme://host:port" instead of a
                                  server of the upstream (Yunying's set_upstream_*) */
    bool has_body;             /* upstream: send body instead of the client's */
    um_str body;
    const char *server_name;   /* TLS SNI the client sent, or NULL */
    /* Cluster (umbra/cluster.h). from_peer: the request came from another node with a
     * valid signature (cache_key is then the key it sent): it is answered here, never
     * sent to a peer again. fill_key: set by the cache layer on the fetch of a fill, the
     * key being filled (base NULL otherwise). */
    bool from_peer;
    /* The request carried an Umbra-Peer field that was not a valid signature: served as
     * an ordinary client's, but a PURGE of it is not sent on to the other nodes (two
     * nodes with different secrets would otherwise bounce it between them for ever). */
    bool peer_refused;
    um_str fill_key;
    /* Set by the cache layer on a fill that makes one coding of an object from another
     * stored coding of it (identity): the compressing layer below the cache reads the
     * answer from this origin instead of its inner one, and asks nobody else. Layers that
     * do not transform bodies never see it set (the cache sets it only over compression). */
    struct um_origin *source;
};

/* The origin reads the request body itself through um_sink_ops.read_body (it is not
 * read, and discarded, before fetch). */
#define UM_ORIGIN_F_STREAM_BODY 0x1
/* The origin forwards protocol upgrades (UM_REQ_F_UPGRADE) and hands over a tunnel with
 * um_sink_ops.on_upgrade when the server agrees (the upstream origin). */
#define UM_ORIGIN_F_UPGRADE 0x2

struct um_origin_ops {
    unsigned flags;
    /* Starts a fetch: head, body and the end arrive at sink, possibly before fetch
     * returns, always on the calling worker's thread. Never blocks on the network. */
    void (*fetch)(struct um_origin *o, struct um_fetch *f, struct um_sink *sink);
    /* Optional, for origins that answer later. resume: the sink has room again after an
     * on_data that returned 0. body_ready: more request body is buffered (or it ended).
     * cancel: the client is gone; the origin stops and calls the sink no more. */
    void (*resume)(struct um_origin *o, struct um_sink *sink);
    void (*body_ready)(struct um_origin *o, struct um_sink *sink);
    void (*cancel)(struct um_origin *o, struct um_sink *sink);
    /* Drops the caller's hold on the origin, which is freed with the last hold: at once
     * for most origins; an upstream group is shared by the routes that name it
     * (um_upstream_origin_ref) and counts its holders. */
    void (*destroy)(struct um_origin *o);
};

struct um_origin {
    const struct um_origin_ops *ops;
};

#endif
