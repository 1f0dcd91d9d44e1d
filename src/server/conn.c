/* A client connection: reads requests, hands them to origins, writes responses.
 *
 * The socket is registered once, edge-triggered, for both directions; can_read and
 * can_write remember what the last edge promised, so no epoll_ctl call is made per
 * request. drive() moves a connection as far as it can go: parse what is buffered, write
 * what is queued, read more; a connection that used up its turn's budget is put on the
 * worker's ready list, so that one busy client cannot starve the others. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <sys/uio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/buf.h"
#include "umbra/hooks.h"
#include "umbra/accesslog.h"
#include "umbra/log.h"
#include "umbra/metrics.h"
#include <openssl/ssl.h>

#define TURN_BUDGET 32                  /* drive() iterations before yielding */
#define WRITE_BUDGET (1024 * 1024)      /* bytes per connection per loop turn */
#define OUTPUT_BACKLOG (64 * 1024)      /* stop parsing pipelined requests past this */
#define WBUF_KEEP (64 * 1024)           /* larger write buffers are freed when idle */
#define PAUSE_ORIGIN_AT (256 * 1024)    /* output backlog that pauses a streaming origin */

enum conn_state {
    S_HANDSHAKE, /* TLS handshake */
    S_HEAD,   /* reading a request head */
    S_BODY,   /* reading (and discarding) a request body before dispatch */
    S_ORIGIN, /* the origin is answering (and maybe reading the body) */
    S_DONE,   /* no more requests: write what is queued, then close */
    S_LINGER, /* write side shut, discarding input until EOF or the linger timeout */
};

#define MAX_REFS 64

struct ref_seg {
    const char *p;
    size_t len;
    void (*release)(void *ctx);
    void *ctx;
};

enum input_result {
    IN_NEED_INPUT, /* more bytes from the client are needed */
    IN_BACKLOG,    /* output must drain first */
    IN_WAIT,       /* waiting for the origin */
    IN_DONE,       /* no more requests on this connection */
};

struct um__conn {
    struct um__conn_links links; /* first: the worker's lists */
    struct um__worker *w;
    struct um_runtime *runtime; /* taken at accept (one reference) */
    struct um_config *config;   /* its snapshot */
    int fd;
    enum conn_state state;
    bool closed;
    bool can_read, can_write;
    bool peer_closed;  /* read returned 0 */
    bool closing;      /* close once the output is flushed */
    bool linger;       /* ...with a lingering close */
    bool draining;     /* server stopping: no keep-alive */
    bool head_started; /* header timer armed for the current request */
    uint64_t requests; /* requests answered */

    /* Input: rbuf[rpos..rlen) is unprocessed; while in S_BODY, rbuf[rpos..bpos) is the
     * parsed head and rbuf[bpos..rlen) the unconsumed body bytes. */
    char *rbuf;
    size_t rcap, rlen, rpos, bpos;
    struct um_http1_parser parser;
    struct um_request req;
    size_t bdec;        /* decoded body bytes waiting at rbuf[bpos..bpos+bdec) */
    uint64_t body_left; /* Content-Length bytes still to read */
    uint64_t body_seen; /* body bytes decoded so far */
    struct um_chunked chunked;
    bool body_done;     /* the whole body has been decoded */
    bool body_wanted;   /* the origin asked for body bytes that had not arrived */
    int body_error;     /* 400 or 413 when the body turned out bad */

    /* Output: wbuf.base[wpos..wbuf.len), then the borrowed segments refs[ref_head..num_refs) (body
     * bytes sent without copying, e.g. from the cache), then file_left bytes of file_fd
     * at file_off. Segments and a file never follow each other in one response, and no
     * next request is parsed while either is pending, so this order is the send order. */
    struct um_buf wbuf;
    size_t wpos;
    struct ref_seg *refs; /* MAX_REFS, allocated on first use */
    unsigned ref_head, num_refs;
    size_t ref_bytes; /* unsent bytes in refs */
    int file_fd;
    uint64_t file_off, file_left;

    /* The response being produced. */
    struct um_sink sink;
    struct um_origin *origin; /* answering the current request */
    bool in_drive;            /* sink calls need no wake-up */
    bool resp_head_only;
    bool resp_keepalive;
    bool resp_head_sent;
    bool resp_chunked;        /* body framed with chunked coding */
    bool resp_ended;          /* on_end came */
    bool origin_paused;       /* an on_data returned 0; resume the origin once drained */
    int resp_status;
    char peer_ip[46]; /* INET6_ADDRSTRLEN */
    int peer_port;
    SSL *ssl;       /* NULL: plain TCP */
    char *fbuf;     /* TLS: file bytes read for encryption, fbuf[fpos..flen) unsent */
    size_t fpos, flen;

    /* Strings the request's hooks made (a rewritten path, header values...); freed when
     * the request is complete. */
    struct um_arena arena;
    /* A routed request waiting in S_BODY for its body to be read: its fetch (the path in
     * the arena) and origin. */
    struct um_fetch pending;
    struct um_origin *pending_origin;
    /* For the access log and the metrics (accesslog.h). */
    uint64_t id;
    bool req_parsed; /* c->req holds the current request's head */
    bool via_upstream;
    int route_slot;
    uint64_t t_start, t_dispatch, t_head; /* loop ms */
    uint64_t resp_bytes, resp_body_bytes;
    char cache_status[128]; /* the Cache-Status value sent, for the log line */
    size_t cache_status_len;
    bool has_cache;         /* cache: what the cache layer did (its pointers NULL) */
    struct um_cache_status cache;
};

/* ---------------------------------------------------------------- output buffer */

static void wreserve(struct um__conn *c, size_t n)
{
    if (n <= um_buf_room(&c->wbuf))
        return;
    if (c->wpos > 0 && c->wpos == c->wbuf.len) {
        c->wpos = 0;
        um_buf_reset(&c->wbuf);
        if (n <= um_buf_room(&c->wbuf))
            return;
    }
    um_buf_reserve(&c->wbuf, n);
}

static void wappend(struct um__conn *c, const void *p, size_t n)
{
    wreserve(c, n);
    um_buf_append(&c->wbuf, p, n);
}

static void wappend_str(struct um__conn *c, const char *s)
{
    wappend(c, s, strlen(s));
}

static void wappend_u64(struct um__conn *c, uint64_t v)
{
    char tmp[24];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    wappend(c, tmp + i, sizeof(tmp) - i);
}

static bool has_output(const struct um__conn *c)
{
    return c->wpos < c->wbuf.len || c->file_left > 0 || c->fpos < c->flen ||
           c->ref_head < c->num_refs;
}

/* Releases borrowed segments from the front: n of them, or all when n is UINT_MAX. */
static void refs_release(struct um__conn *c, unsigned n)
{
    while (n-- > 0 && c->ref_head < c->num_refs) {
        struct ref_seg *r = &c->refs[c->ref_head++];
        c->ref_bytes -= r->len;
        r->release(r->ctx);
    }
    if (c->ref_head == c->num_refs)
        c->ref_head = c->num_refs = 0;
}

static void drop_file(struct um__conn *c)
{
    if (c->file_fd >= 0)
        close(c->file_fd);
    c->file_fd = -1;
    c->file_left = 0;
}

/* ---------------------------------------------------------------- responses */

static const char *reason_phrase(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 400 ? "Redirect" : status < 500 ? "Client Error" : "Server Error";
    }
}

static struct um__conn *sink_conn(struct um_sink *s)
{
    return (struct um__conn *)(void *)((char *)s - offsetof(struct um__conn, sink));
}

/* An origin answering from outside drive() (an upstream socket's event) wakes the connection. */
static void wake(struct um__conn *c)
{
    if (!c->in_drive)
        um__worker_ready(c->w, c);
}

static size_t backlog(const struct um__conn *c)
{
    return c->wbuf.len - c->wpos + (size_t)c->file_left;
}

static size_t on_data_ref(struct um_sink *s, const char *data, size_t len,
                          void (*release)(void *ctx), void *ctx);

static void on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct um__conn *c = sink_conn(s);
    UM_ASSERT(!c->resp_head_sent);
    c->resp_head_sent = true;
    c->resp_status = h->status;
    c->t_head = um_loop_now(c->w->loop);
    if (h->cache) {
        c->has_cache = true;
        c->cache = *h->cache;
        c->cache.cache_name = c->cache.key = c->cache.detail = NULL; /* borrowed */
    }
    wreserve(c, 256); /* may rewind a buffer whose bytes were all sent: measure after */
    size_t head_start = c->wbuf.len;
    wappend_str(c, "HTTP/1.1 ");
    wappend_u64(c, (uint64_t)h->status);
    wappend_str(c, " ");
    if (h->reason.len > 0)
        wappend(c, h->reason.base, h->reason.len);
    else
        wappend_str(c, reason_phrase(h->status));
    wappend_str(c, "\r\n");
    /* An origin's Date is kept (a cache computes ages from it); else ours. */
    bool has_date = false;
    for (size_t i = 0; i < h->num_headers && !has_date; i++)
        has_date = h->headers[i].name.len == 4 && um_str_eq_ci(h->headers[i].name, "date");
    if (!has_date) {
        wappend_str(c, "Date: ");
        wappend(c, um__worker_date(c->w), UM_HTTP_DATE_LEN);
        wappend_str(c, "\r\n");
    }
    wappend_str(c, "Server: umbra/" UMBRA_VERSION "\r\n");
    for (size_t i = 0; i < h->num_headers; i++) {
        const struct um_header *f = &h->headers[i];
        wreserve(c, f->name.len + f->value.len + 4);
        wappend(c, f->name.base, f->name.len);
        wappend(c, ": ", 2);
        wappend(c, f->value.base, f->value.len);
        wappend(c, "\r\n", 2);
        if (f->name.len == 12 && um_str_eq_ci(f->name, "cache-status") &&
            f->value.len < sizeof(c->cache_status)) {
            memcpy(c->cache_status, f->value.base, f->value.len);
            c->cache_status_len = f->value.len;
        }
    }
    bool bodiless = h->status == 304 || h->status == 204 || h->status < 200;
    if (!bodiless) {
        if (h->content_length >= 0) {
            wappend_str(c, "Content-Length: ");
            wappend_u64(c, (uint64_t)h->content_length);
            wappend_str(c, "\r\n");
        } else if (c->req.minor_version == 1) {
            wappend_str(c, "Transfer-Encoding: chunked\r\n");
            c->resp_chunked = !c->resp_head_only;
        } else {
            c->resp_keepalive = false; /* close-delimited */
        }
    }
    /* Answered by us (an error, a hook) before the request's body was read: the rest of
     * it cannot be told from a next request, so the connection ends with this answer. */
    if (c->origin == NULL && !c->body_done)
        c->resp_keepalive = false;
    if (!c->resp_keepalive)
        wappend_str(c, "Connection: close\r\n");
    else if (c->req.minor_version == 0)
        wappend_str(c, "Connection: keep-alive\r\n");
    wappend(c, "\r\n", 2);
    c->resp_bytes += c->wbuf.len - head_start;
    wake(c);
}

static size_t on_data(struct um_sink *s, const char *data, size_t len)
{
    struct um__conn *c = sink_conn(s);
    if (c->resp_head_only || len == 0)
        return len;
    if (c->origin && c->origin->ops->resume && backlog(c) > PAUSE_ORIGIN_AT) {
        c->origin_paused = true;
        return 0;
    }
    c->resp_bytes += len;
    c->resp_body_bytes += len;
    if (c->resp_chunked) {
        char size[24];
        int n = snprintf(size, sizeof(size), "%zx\r\n", len);
        wreserve(c, (size_t)n + len + 2);
        wappend(c, size, (size_t)n);
        wappend(c, data, len);
        wappend(c, "\r\n", 2);
    } else {
        wappend(c, data, len);
    }
    wake(c);
    return len;
}

static void on_file(struct um_sink *s, int fd, uint64_t off, uint64_t len)
{
    struct um__conn *c = sink_conn(s);
    UM_ASSERT(c->file_fd < 0);
    if (c->resp_head_only || len == 0) {
        close(fd);
        return;
    }
    c->resp_bytes += len;
    c->resp_body_bytes += len;
    if (c->ssl && len <= 16 * 1024) {
        /* Over TLS a small body joins the head in one record and one write. */
        wreserve(c, (size_t)len);
        ssize_t r = pread(fd, c->wbuf.base + c->wbuf.len, (size_t)len, (off_t)off);
        if (r == (ssize_t)len) {
            um_buf_commit(&c->wbuf, (size_t)len);
            close(fd);
            wake(c);
            return;
        }
    }
    c->file_fd = fd;
    c->file_off = off;
    c->file_left = len;
    wake(c);
}

static void respond_simple(struct um__conn *c, int status, const struct um_header *extra,
                           size_t num_extra);

static void on_end(struct um_sink *s, int err)
{
    struct um__conn *c = sink_conn(s);
    UM_ASSERT(!c->resp_ended);
    if (!c->resp_head_sent) {
        /* The origin gave up before answering: say why, on our own. */
        c->resp_keepalive = false;
        respond_simple(c, c->body_error ? c->body_error : 502, NULL, 0);
        return;
    }
    c->resp_ended = true;
    if (err != UM_OK) {
        /* A body cut short must not look complete: no last chunk, and close. */
        c->resp_keepalive = false;
    } else if (c->resp_chunked) {
        wappend_str(c, "0\r\n\r\n");
    }
    wake(c);
}

static ssize_t read_body(struct um_sink *s, char *buf, size_t len);

static const struct um_sink_ops sink_ops = {
    .on_head = on_head,
    .on_data = on_data,
    .on_data_ref = on_data_ref,
    .on_file = on_file,
    .on_end = on_end,
    .read_body = read_body,
};

static size_t on_data_ref(struct um_sink *s, const char *data, size_t len,
                          void (*release)(void *ctx), void *ctx)
{
    struct um__conn *c = sink_conn(s);
    if (c->resp_head_only || len == 0) {
        release(ctx);
        return len;
    }
    if (c->resp_chunked) {
        /* Framed bytes go through the buffer. */
        size_t taken = on_data(s, data, len);
        if (taken)
            release(ctx);
        return taken;
    }
    if (c->num_refs == MAX_REFS) {
        c->origin_paused = true;
        return 0;
    }
    c->resp_bytes += len;
    c->resp_body_bytes += len;
    if (c->refs == NULL)
        c->refs = um_malloc(MAX_REFS * sizeof(*c->refs));
    c->refs[c->num_refs++] = (struct ref_seg){data, len, release, ctx};
    c->ref_bytes += len;
    wake(c);
    return len;
}

/* Prepares the response state for the parsed request (or for an error before one). */
static void begin_response(struct um__conn *c, bool head_only, bool keepalive)
{
    c->resp_head_only = head_only;
    c->resp_keepalive = keepalive && !c->draining && !c->peer_closed;
    c->resp_head_sent = c->resp_chunked = c->resp_ended = c->origin_paused = false;
    c->origin = NULL;
    c->sink.origin_data = NULL;
    c->t_start = um_loop_now(c->w->loop);
    c->t_dispatch = c->t_head = 0;
    c->resp_bytes = c->resp_body_bytes = 0;
    c->cache_status_len = 0;
    c->has_cache = false;
    c->route_slot = 0;
    c->via_upstream = false;
}

/* The request is answered (or given up with status): one access log record. */
static void log_request(struct um__conn *c, int status)
{
    struct um_access_rec r;
    memset(&r, 0, sizeof(r));
    r.client_ip = c->peer_ip;
    r.minor_version = -1;
    if (c->req_parsed) {
        const struct um_request *req = &c->req;
        r.method = req->method;
        r.target = req->target;
        r.minor_version = req->minor_version;
        r.host = req->authority;
        if (c->config->access_log.enabled) { /* only the log line needs them */
            const um_str *v = um_http1_find_header(req, "referer");
            if (v)
                r.referer = *v;
            v = um_http1_find_header(req, "user-agent");
            if (v)
                r.user_agent = *v;
        }
    }
    r.status = status ? status : c->resp_status;
    r.body_bytes = c->resp_body_bytes;
    r.bytes_out = c->resp_bytes;
    r.cache_status = (um_str){c->cache_status, c->cache_status_len};
    r.cache = c->has_cache ? &c->cache : NULL;
    r.upstream_ms = -1;
    /* The upstream's time: from hand-over to the response head, when the answer came
     * from the upstream (not from the cache). */
    bool hit = c->has_cache && c->cache.hit;
    if (c->via_upstream && c->t_head >= c->t_dispatch && c->t_dispatch > 0 && !hit)
        r.upstream_ms = (int64_t)(c->t_head - c->t_dispatch);
    r.duration_ms = um_loop_now(c->w->loop) - c->t_start;
    r.route_slot = c->route_slot;
    r.worker = c->w->id;
    r.conn_id = c->id;
    um_access_log_request(&c->w->ctx, c->config, &r);
    c->req_parsed = false;
}

/* A small complete response with a plain-text body; used for errors. */
static void respond_simple(struct um__conn *c, int status, const struct um_header *extra,
                           size_t num_extra)
{
    struct um_header headers[4];
    size_t n = 0;
    headers[n++] = (struct um_header){UM_STR("Content-Type"), UM_STR("text/plain; charset=utf-8")};
    for (size_t i = 0; i < num_extra && n < UM_NELEMS(headers); i++)
        headers[n++] = extra[i];
    char body[96];
    int len = snprintf(body, sizeof(body), "%d %s\n", status, reason_phrase(status));
    struct um_response_head h = {.status = status, .headers = headers, .num_headers = n, .content_length = len, .reason = {NULL, 0}};
    c->origin = NULL; /* our own answer: never paused */
    on_head(&c->sink, &h);
    on_data(&c->sink, body, (size_t)len);
    on_end(&c->sink, UM_OK);
}

/* Answers an unusable request and stops reading from the connection. */
static void fail(struct um__conn *c, int status)
{
    begin_response(c, false, false);
    respond_simple(c, status, NULL, 0);
    log_request(c, 0);
    c->state = S_DONE;
    c->closing = true;
    c->linger = true;
}

/* ---------------------------------------------------------------- requests */

static bool host_matches(const char *want, um_str authority)
{
    return um_str_eq_ci(um_url_host(authority), want);
}

/* True when route r's path prefix matches path; *rest is then the part below it. */
static bool route_prefix(const struct um_route *r, um_str path, um_str *rest)
{
    size_t plen = strlen(r->path);
    if (path.len >= plen && memcmp(path.base, r->path, plen) == 0) {
        *rest = (um_str){path.base + plen, path.len - plen};
        return true;
    }
    /* "/dir" reaches the route "/dir/", whose origin redirects it. */
    if (plen > 1 && r->path[plen - 1] == '/' && path.len == plen - 1 &&
        memcmp(path.base, r->path, plen - 1) == 0) {
        *rest = (um_str){path.base + path.len, 0};
        return true;
    }
    return false;
}

/* First route whose host and path prefix match; *rest is the path below the prefix. */
static const struct um_route *find_route(const struct um_config *cfg, um_str authority,
                                         um_str path, um_str *rest)
{
    for (size_t i = 0; i < cfg->num_routes; i++) {
        const struct um_route *r = &cfg->routes[i];
        if ((r->host == NULL || host_matches(r->host, authority)) && route_prefix(r, path, rest))
            return r;
    }
    return NULL;
}

/* The canonical form of path, in the worker's path buffer: routes match it, so that
 * "/stat%69c/" is "/static/" and no spelling of a path reaches another route than the
 * plain one would. */
static bool canon_path(struct um__conn *c, um_str path, um_str *out)
{
    size_t clen;
    if (path.len >= sizeof(c->w->path_buf) ||
        !um_url_path_canon(path, c->w->path_buf, sizeof(c->w->path_buf), &clen))
        return false;
    *out = (um_str){c->w->path_buf, clen};
    return true;
}

/* 308 to the same target over https (RFC 9110 15.4.9 keeps the method and body). */
static void redirect_https(struct um__conn *c)
{
    const struct um_request *req = &c->req;
    /* The host without the plain listener's port, as nginx's "https://$host$request_uri":
     * HTTPS is on its own (default) port. */
    um_str host = um_url_host(req->authority);
    size_t n = 8 + host.len + req->target.len;
    char *loc = um_malloc(n + 1);
    memcpy(loc, "https://", 8);
    memcpy(loc + 8, host.base, host.len);
    if (req->flags & UM_REQ_F_ABSOLUTE_FORM) {
        /* The path and query of an absolute-form target. */
        size_t tail = req->path.len + ((req->flags & UM_REQ_F_HAS_QUERY) ? req->query.len + 1 : 0);
        memcpy(loc + 8 + host.len, req->path.base, tail);
        n = 8 + host.len + tail;
    } else {
        memcpy(loc + 8 + host.len, req->target.base, req->target.len);
    }
    struct um_header h = {UM_STR("Location"), {loc, n}};
    respond_simple(c, 308, &h, 1);
    free(loc);
}

/* Answers with what an on_request hook gave umbra.respond / umbra.redirect. */
static void respond_hook(struct um__conn *c, const struct um_hook_request *hr)
{
    struct um_header headers[66];
    size_t n = 0;
    bool has_type = false;
    for (size_t i = 0; i < hr->num_headers && n < UM_NELEMS(headers) - 1; i++) {
        has_type = has_type || um_str_eq_ci(hr->headers[i].name, "content-type");
        headers[n++] = hr->headers[i];
    }
    if (!has_type && hr->resp_body.len > 0)
        headers[n++] = (struct um_header){UM_STR("Content-Type"), UM_STR("text/plain; charset=utf-8")};
    struct um_response_head h = {.status = hr->status, .headers = headers, .num_headers = n, .content_length = (int64_t)hr->resp_body.len, .reason = {NULL, 0}};
    c->origin = NULL;
    on_head(&c->sink, &h);
    if (hr->resp_body.len > 0)
        on_data(&c->sink, hr->resp_body.base, hr->resp_body.len);
    on_end(&c->sink, UM_OK);
}

/* The canonical form of path into the worker's path buffer, and the part of it below the
 * route's prefix (all of it when a hook's path is outside the prefix). */
static bool route_rest(struct um__conn *c, const struct um_route *route, um_str path,
                       um_str *rest)
{
    um_str cpath;
    if (!canon_path(c, path, &cpath))
        return false;
    if (route == NULL || !route_prefix(route, cpath, rest))
        *rest = cpath;
    return true;
}

/* Runs the request hooks that apply. Returns the origin to use, or NULL after answering. */
static struct um_origin *hook_request(struct um__conn *c, const struct um_route **route,
                                      um_str *rest, struct um_hook_request *hr)
{
    *hr = (struct um_hook_request){.req = &c->req, .route = *route, .client_ip = c->peer_ip,
                                   .client_port = c->peer_port,
                                   .scheme = c->ssl ? "https" : "http",
                                   .server_name = c->ssl ? SSL_get_servername(c->ssl, TLSEXT_NAMETYPE_host_name)
                                                         : NULL,
                                   .arena = &c->arena, .upstream = -1};
    switch (um_hooks_on_request(&c->w->ctx, c->runtime->hooks, hr)) {
    case UM_HOOK_FAIL:
        respond_simple(c, 500, NULL, 0);
        return NULL;
    case UM_HOOK_ANSWER:
        respond_hook(c, hr);
        return NULL;
    case UM_HOOK_CONTINUE:
        break;
    }
    if ((hr->path_changed || hr->route != *route) && !route_rest(c, hr->route, c->req.path, rest)) {
        um_log_warn("lua: on_request made a path that cannot be normalised: %.*s",
                    (int)c->req.path.len, c->req.path.base);
        respond_simple(c, 500, NULL, 0);
        return NULL;
    }
    *route = hr->route;
    if (*route == NULL) {
        if (hr->upstream >= 0)
            return c->runtime->upstreams[hr->upstream];
        respond_simple(c, 404, NULL, 0);
        return NULL;
    }
    return um_runtime_route(c->runtime, *route)->origin;
}

/* Picks the route and origin of the parsed request. Returns NULL after answering it
 * (bad path, no route). */
static struct um_origin *route_request(struct um__conn *c, struct um_fetch *f)
{
    struct um_request *req = &c->req;
    if (req->path.len == 0 || req->path.base[0] != '/') {
        /* asterisk-form (OPTIONS *): the server itself */
        if (req->method_id == UM_METHOD_OPTIONS) {
            struct um_header allow = {UM_STR("Allow"), UM_STR("GET, HEAD, OPTIONS")};
            struct um_response_head h = {.status = 200, .headers = &allow, .num_headers = 1, .content_length = 0, .reason = {NULL, 0}};
            on_head(&c->sink, &h);
            on_end(&c->sink, UM_OK);
        } else {
            respond_simple(c, 400, NULL, 0);
        }
        return NULL;
    }
    um_str cpath, rest;
    if (!canon_path(c, req->path, &cpath)) {
        respond_simple(c, 400, NULL, 0);
        return NULL;
    }
    const struct um_route *route = find_route(c->config, req->authority, cpath, &rest);
    if (route && route->redirect_https && c->ssl == NULL) {
        redirect_https(c);
        return NULL;
    }
    struct um_origin *origin = route ? um_runtime_route(c->runtime, route)->origin : NULL;
    if (route) {
        c->route_slot = um_runtime_route(c->runtime, route)->metrics_slot;
        c->via_upstream = route->upstream >= 0;
    }
    struct um_hook_request hr;
    bool hooked = um_hooks_want_request(c->config, route);
    if (hooked) {
        origin = hook_request(c, &route, &rest, &hr);
        if (origin == NULL)
            return NULL;
    } else if (origin == NULL) {
        respond_simple(c, 404, NULL, 0);
        return NULL;
    }
    *f = (struct um_fetch){.ctx = &c->w->ctx, .req = req, .route = route, .config = c->config,
                           .path = rest, .client_ip = c->peer_ip, .client_port = c->peer_port,
                           .scheme = c->ssl ? "https" : "http"};
    if (hooked) {
        if (hr.upstream >= 0 && route)
            f->backend = c->runtime->upstreams[hr.upstream];
        f->cache_key = hr.cache_key;
        f->no_cache = hr.no_cache;
        f->has_ttl = hr.has_ttl;
        f->ttl = hr.ttl;
        f->upstream_url = hr.upstream_url;
        f->has_body = hr.has_body;
        f->body = hr.body;
        f->server_name = hr.server_name;
    }
    if (route) {
        c->route_slot = um_runtime_route(c->runtime, route)->metrics_slot;
        c->via_upstream = route->upstream >= 0 || f->backend != NULL;
    }
    return origin;
}

/* The request is answered (its response may still be draining): get ready for the next. */
static void complete_request(struct um__conn *c)
{
    log_request(c, 0);
    c->requests++;
    c->head_started = false;
    c->origin = NULL;
    if (!c->body_done || c->bdec > 0) {
        /* The origin answered without reading the whole body: the rest cannot be told
         * from a next request without reading it, so end the connection instead. */
        c->resp_keepalive = false;
        c->linger = true;
    }
    c->rpos = c->bpos + c->bdec;
    if (c->rpos == c->rlen)
        c->rpos = c->rlen = 0;
    um_http1_parser_init(&c->parser);
    um_arena_reset(&c->arena);
    c->pending_origin = NULL;
    if (!c->resp_keepalive) {
        c->state = S_DONE;
        c->closing = true;
        c->linger = c->linger || c->rpos < c->rlen;
    } else {
        c->state = S_HEAD;
    }
}

/* Hands the request to its origin. */
static void dispatch(struct um__conn *c, struct um_origin *origin, struct um_fetch *f)
{
    c->origin = origin;
    c->state = S_ORIGIN;
    c->t_dispatch = um_loop_now(c->w->loop);
    origin->ops->fetch(origin, f, &c->sink);
    /* Synchronous origins (static files) are done already. */
}

/* Decodes buffered body bytes into the decoded region. Returns UM_ERR (with body_error
 * set) on a malformed or oversized body. */
static int body_decode(struct um__conn *c)
{
    size_t raw = c->bpos + c->bdec, avail = c->rlen - raw;
    if (c->body_done || avail == 0)
        return UM_OK;
    if (c->req.flags & UM_REQ_F_CHUNKED) {
        size_t consumed, out;
        int r = um_chunked_decode(&c->chunked, c->rbuf + raw, avail, &consumed, &out);
        if (r == UM_ERR) {
            c->body_error = 400;
            return UM_ERR;
        }
        /* Decoded bytes sit at rbuf+raw; close the gap the chunk framing leaves. */
        memmove(c->rbuf + raw + out, c->rbuf + raw + consumed, avail - consumed);
        c->rlen -= consumed - out;
        c->bdec += out;
        c->body_seen += out;
        c->body_done = r == UM_DONE;
    } else {
        size_t take = avail < c->body_left ? avail : (size_t)c->body_left;
        c->bdec += take;
        c->body_left -= take;
        c->body_seen += take;
        c->body_done = c->body_left == 0;
    }
    if (c->body_seen > c->config->limits.max_body_bytes) {
        c->body_error = 413;
        return UM_ERR;
    }
    return UM_OK;
}

/* Drops n decoded body bytes from the front of the decoded region. */
static void body_drop(struct um__conn *c, size_t n)
{
    memmove(c->rbuf + c->bpos, c->rbuf + c->bpos + n, c->rlen - c->bpos - n);
    c->rlen -= n;
    c->bdec -= n;
}

static ssize_t read_body(struct um_sink *s, char *buf, size_t len)
{
    struct um__conn *c = sink_conn(s);
    if (c->body_error || body_decode(c) != UM_OK)
        return UM_ERR;
    size_t n = c->bdec < len ? c->bdec : len;
    if (n > 0) {
        memcpy(buf, c->rbuf + c->bpos, n);
        body_drop(c, n);
        wake(c); /* room to read more from the client */
        return (ssize_t)n;
    }
    if (c->body_done)
        return 0;
    c->body_wanted = true;
    return UM_AGAIN;
}

/* A head has been parsed: route it, then read its body or hand it over. */
static void begin_request(struct um__conn *c)
{
    struct um_request *req = &c->req;
    c->req_parsed = true;
    bool has_body = (req->flags & UM_REQ_F_CHUNKED) ||
                    ((req->flags & UM_REQ_F_CONTENT_LENGTH) && req->content_length > 0);
    if (has_body && c->rpos > 0) {
        /* Give the body room: move this request to the front and parse it again there
         * (its slices point at the old place). Only pipelined requests with bodies. */
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
        int status;
        um_http1_parser_init(&c->parser);
        int r = um_http1_parse_request(&c->parser, c->rbuf, c->rlen,
                                       c->config->limits.max_request_line,
                                       c->config->limits.max_header_bytes, req, &status);
        UM_ASSERT(r == UM_OK);
    }
    c->bpos = c->rpos + req->head_len;
    c->bdec = 0;
    c->body_left = req->content_length;
    c->body_seen = 0;
    c->body_done = !has_body;
    c->body_wanted = false;
    c->body_error = 0;
    um_chunked_init(&c->chunked);
    if ((req->flags & UM_REQ_F_CONTENT_LENGTH) && req->content_length > c->config->limits.max_body_bytes) {
        fail(c, 413);
        return;
    }
    begin_response(c, req->method_id == UM_METHOD_HEAD, (req->flags & UM_REQ_F_KEEPALIVE) != 0);
    if (has_body && (req->flags & UM_REQ_F_EXPECT_CONTINUE) && req->minor_version == 1 &&
        c->rlen == c->bpos)
        wappend_str(c, "HTTP/1.1 100 Continue\r\n\r\n");
    struct um_fetch f;
    struct um_origin *origin = route_request(c, &f);
    if (origin == NULL) {
        c->state = S_ORIGIN; /* answered; the body, if any, is left unread */
        return;
    }
    if (has_body && !(origin->ops->flags & UM_ORIGIN_F_STREAM_BODY) && f.backend == NULL) {
        /* The origin takes no body: read it to the end first, then dispatch. The path
         * (in the worker's buffer) is kept in the arena until then. */
        c->pending = f;
        c->pending.path = (um_str){um_arena_strdup(&c->arena, f.path.base, f.path.len), f.path.len};
        c->pending_origin = origin;
        c->state = S_BODY;
        return;
    }
    dispatch(c, origin, &f);
}

static enum input_result process_input(struct um__conn *c)
{
    for (;;) {
        if (c->file_left > 0 || c->ref_head < c->num_refs || c->wbuf.len - c->wpos > OUTPUT_BACKLOG) {
            if (c->state != S_ORIGIN || c->resp_ended)
                return IN_BACKLOG;
        }
        switch (c->state) {
        case S_HEAD: {
            if (c->rpos == c->rlen)
                return IN_NEED_INPUT;
            int status;
            int r = um_http1_parse_request(&c->parser, c->rbuf + c->rpos, c->rlen - c->rpos,
                                           c->config->limits.max_request_line,
                                           c->config->limits.max_header_bytes, &c->req, &status);
            if (r == UM_AGAIN) {
                if (c->rlen == c->rcap) {
                    if (c->rpos == 0) {
                        fail(c, 431); /* cannot happen with rcap > limits; be safe */
                        continue;
                    }
                    memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
                    c->rlen -= c->rpos;
                    c->rpos = 0;
                }
                return IN_NEED_INPUT;
            }
            if (r == UM_ERR) {
                c->req.minor_version = 1;
                fail(c, status);
                continue;
            }
            begin_request(c);
            continue;
        }
        case S_BODY: {
            if (body_decode(c) != UM_OK) {
                fail(c, c->body_error);
                continue;
            }
            body_drop(c, c->bdec); /* nobody wants it */
            if (!c->body_done)
                return IN_NEED_INPUT;
            struct um_fetch f = c->pending;
            dispatch(c, c->pending_origin, &f);
            continue;
        }
        case S_ORIGIN:
            if (c->resp_ended) {
                complete_request(c);
                continue;
            }
            /* Keep reading while the origin streams a body that has not all arrived. */
            if (!c->body_done && c->rlen < c->rcap && !c->body_error)
                return IN_NEED_INPUT;
            return IN_WAIT;
        case S_HANDSHAKE:
        case S_DONE:
        case S_LINGER:
            return IN_DONE;
        }
    }
}

/* ---------------------------------------------------------------- socket I/O */

static size_t rbuf_size(const struct um_config *cfg)
{
    size_t n = cfg->limits.max_header_bytes;
    if (cfg->limits.max_request_line > n)
        n = cfg->limits.max_request_line;
    return n + 4096;
}

static void rbuf_get(struct um__conn *c)
{
    struct um__worker *w = c->w;
    c->rcap = rbuf_size(c->config);
    if (w->num_free_bufs > 0 && c->rcap == rbuf_size(w->config))
        c->rbuf = w->free_bufs[--w->num_free_bufs];
    else
        c->rbuf = um_malloc(c->rcap);
}

static void rbuf_put(struct um__conn *c)
{
    struct um__worker *w = c->w;
    if (c->rbuf == NULL)
        return;
    if (c->rcap == rbuf_size(w->config) && w->num_free_bufs < 256) {
        if ((w->num_free_bufs & (w->num_free_bufs - 1)) == 0)
            w->free_bufs = um_realloc(w->free_bufs, (w->num_free_bufs ? w->num_free_bufs * 2 : 1) * sizeof(char *));
        w->free_bufs[w->num_free_bufs++] = c->rbuf;
    } else {
        free(c->rbuf);
    }
    c->rbuf = NULL;
    c->rcap = c->rlen = c->rpos = c->bpos = 0;
}

/* Reads once. Returns UM_OK (bytes read), UM_DONE (EOF), UM_AGAIN, UM_ERR. */
static int read_some(struct um__conn *c)
{
    if (c->rbuf == NULL)
        rbuf_get(c);
    size_t space = c->rcap - c->rlen;
    if (space == 0)
        return UM_OK; /* nothing fits; processing must make room (or fail) first */
    if (c->ssl) {
        int want = 0;
        ssize_t n = um_tls_read(c->ssl, c->rbuf + c->rlen, space, &want);
        if (n > 0) {
            c->rlen += (size_t)n;
            um_counter_add(&um_metrics_worker()->bytes_in, (uint64_t)n);
            return UM_OK;
        }
        if (n == 0) {
            c->peer_closed = true;
            c->can_read = false;
            return UM_DONE;
        }
        if (n == UM_AGAIN) {
            if (want == UM_TLS_WANT_WRITE)
                c->can_write = false;
            else
                c->can_read = false;
            return UM_AGAIN;
        }
        return UM_ERR;
    }
    ssize_t n = recv(c->fd, c->rbuf + c->rlen, space, 0);
    if (n > 0) {
        c->rlen += (size_t)n;
        um_counter_add(&um_metrics_worker()->bytes_in, (uint64_t)n);
        if ((size_t)n < space)
            c->can_read = false; /* drained: the next arrival raises a new edge */
        return UM_OK;
    }
    if (n == 0) {
        c->peer_closed = true;
        c->can_read = false;
        return UM_DONE;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        c->can_read = false;
        return UM_AGAIN;
    }
    if (errno == EINTR)
        return UM_OK;
    return UM_ERR;
}

/* Writes queued output. Returns UM_OK when all is written, UM_AGAIN on a full socket,
 * UM_DONE when this turn's budget is spent, UM_ERR on a dead peer. */
#define TLS_FILE_CHUNK (16 * 1024)

/* flush() over TLS: no sendfile; file bytes go through fbuf. */
static int flush_tls(struct um__conn *c)
{
    size_t budget = WRITE_BUDGET;
    for (;;) {
        const char *p;
        size_t len;
        bool from_file = false, from_ref = false;
        if (c->wpos < c->wbuf.len) {
            p = c->wbuf.base + c->wpos;
            len = c->wbuf.len - c->wpos;
        } else if (c->ref_head < c->num_refs) {
            p = c->refs[c->ref_head].p;
            len = c->refs[c->ref_head].len;
            from_ref = true;
        } else if (c->fpos < c->flen || c->file_left > 0) {
            if (c->fpos == c->flen) {
                if (c->fbuf == NULL)
                    c->fbuf = um_malloc(TLS_FILE_CHUNK);
                size_t want = c->file_left < TLS_FILE_CHUNK ? (size_t)c->file_left : TLS_FILE_CHUNK;
                ssize_t r = pread(c->file_fd, c->fbuf, want, (off_t)c->file_off);
                if (r <= 0) {
                    um_log_warn("file read failed while being sent; closing connection");
                    return UM_ERR;
                }
                c->fpos = 0;
                c->flen = (size_t)r;
                c->file_off += (uint64_t)r;
                c->file_left -= (uint64_t)r;
                if (c->file_left == 0)
                    drop_file(c);
            }
            p = c->fbuf + c->fpos;
            len = c->flen - c->fpos;
            from_file = true;
        } else {
            c->wpos = 0;
            um_buf_reset(&c->wbuf);
            return UM_OK;
        }
        int want = 0;
        ssize_t n = um_tls_write(c->ssl, p, len, &want);
        if (n == UM_AGAIN) {
            if (want == UM_TLS_WANT_READ)
                c->can_read = false;
            return UM_AGAIN;
        }
        if (n < 0)
            return UM_ERR;
        if (from_file) {
            c->fpos += (size_t)n;
        } else if (from_ref) {
            struct ref_seg *r = &c->refs[c->ref_head];
            if ((size_t)n >= r->len) {
                refs_release(c, 1);
            } else {
                r->p += n;
                r->len -= (size_t)n;
                c->ref_bytes -= (size_t)n;
            }
        } else {
            c->wpos += (size_t)n;
        }
        if ((size_t)n >= budget)
            return has_output(c) ? UM_DONE : (c->wpos = 0, um_buf_reset(&c->wbuf), UM_OK);
        budget -= (size_t)n;
    }
}

static int flush(struct um__conn *c)
{
    if (c->ssl)
        return flush_tls(c);
    size_t budget = WRITE_BUDGET;
    for (;;) {
        ssize_t n;
        if (c->wpos < c->wbuf.len) {
            n = send(c->fd, c->wbuf.base + c->wpos, c->wbuf.len - c->wpos,
                     MSG_NOSIGNAL | (c->file_left || c->num_refs ? MSG_MORE : 0));
            if (n > 0)
                c->wpos += (size_t)n;
        } else if (c->ref_head < c->num_refs) {
            /* Borrowed segments, gathered into one writev. */
            struct iovec iov[MAX_REFS];
            int k = 0;
            size_t total = 0;
            /* No more than this turn's budget, so that one large response cannot hold the
             * loop while other connections wait. */
            for (unsigned i = c->ref_head; i < c->num_refs && total < budget; i++, k++) {
                size_t len = c->refs[i].len;
                if (len > budget - total)
                    len = budget - total;
                iov[k] = (struct iovec){(void *)c->refs[i].p, len};
                total += len;
            }
            n = writev(c->fd, iov, k);
            if (n > 0) {
                size_t left = (size_t)n;
                while (left > 0) {
                    struct ref_seg *r = &c->refs[c->ref_head];
                    if (left >= r->len) {
                        left -= r->len;
                        refs_release(c, 1);
                    } else {
                        r->p += left;
                        r->len -= left;
                        c->ref_bytes -= left;
                        left = 0;
                    }
                }
            }
        } else if (c->file_left > 0) {
            size_t chunk = c->file_left < budget ? (size_t)c->file_left : budget;
            off_t off = (off_t)c->file_off;
            n = sendfile(c->fd, c->file_fd, &off, chunk);
            if (n == 0) {
                um_log_warn("file shrank while being sent; closing connection");
                return UM_ERR;
            }
            if (n > 0) {
                c->file_off += (uint64_t)n;
                c->file_left -= (uint64_t)n;
                if (c->file_left == 0)
                    drop_file(c);
            }
        } else {
            c->wpos = 0;
            um_buf_reset(&c->wbuf);
            return UM_OK;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return UM_AGAIN;
            if (errno == EINTR)
                continue;
            return UM_ERR;
        }
        if ((size_t)n >= budget)
            return has_output(c) ? UM_DONE : (c->wpos = 0, um_buf_reset(&c->wbuf), UM_OK);
        budget -= (size_t)n;
    }
}

/* ---------------------------------------------------------------- life cycle */

static void go_idle(struct um__conn *c)
{
    /* Waiting for a request with nothing buffered: give memory back. */
    if (c->rlen == 0)
        rbuf_put(c);
    if (c->wbuf.cap > WBUF_KEEP) {
        um_buf_dispose(&c->wbuf);
        c->wpos = 0;
    }
}

static void arm_input_timer(struct um__conn *c)
{
    struct um__worker *w = c->w;
    if (c->state == S_LINGER) {
        if (um__links(c)->tq_kind != UM__TQ_LINGER)
            um__tq_arm(w, c, UM__TQ_LINGER);
    } else if (c->state == S_BODY || (c->state == S_ORIGIN && !c->body_done)) {
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
    } else {
        um__tq_arm(w, c, UM__TQ_IDLE);
        go_idle(c);
    }
}

static void start_linger(struct um__conn *c)
{
    shutdown(c->fd, SHUT_WR);
    c->state = S_LINGER;
    c->closing = false;
    c->rpos = c->rlen = 0;
}

static void drive(struct um__conn *c)
{
    uint64_t log_conn = um_log_set_conn(c->id);
    c->in_drive = true;
    for (int turn = 0; turn < TURN_BUDGET; turn++) {
        if (c->closed)
            goto out;
        if (c->state == S_HANDSHAKE) {
            int want = 0;
            int r = um_tls_handshake(c->ssl, &want);
            if (r == UM_OK) {
                um_counter_add(&um_metrics_worker()->tls_handshakes, 1);
                c->state = S_HEAD;
                c->can_read = true; /* the request may sit decrypted-ready in OpenSSL */
                continue;
            }
            if (r == UM_AGAIN) {
                if (want == UM_TLS_WANT_WRITE)
                    c->can_write = false;
                else
                    c->can_read = false;
                if (um__links(c)->tq_kind != UM__TQ_HEADER)
                    um__tq_arm(c->w, c, UM__TQ_HEADER);
                goto out;
            }
            um_counter_add(&um_metrics_worker()->tls_failures, 1);
            um_log_info("tls: handshake with %s:%d failed: %s", c->peer_ip, c->peer_port,
                        um_tls_error(c->ssl));
            um__conn_close(c);
            goto out;
        }
        enum input_result in = IN_NEED_INPUT;
        if (c->state == S_LINGER) {
            c->rpos = c->rlen = 0; /* discard */
        } else {
            in = process_input(c);
        }
        if (has_output(c)) {
            if (!c->can_write) {
                um__tq_arm(c->w, c, UM__TQ_SEND);
                goto out;
            }
            int r = flush(c);
            if (r == UM_ERR) {
                um__conn_close(c);
                goto out;
            }
            if (r == UM_AGAIN) {
                c->can_write = false;
                um__tq_arm(c->w, c, UM__TQ_SEND);
                goto out;
            }
            if (r == UM_DONE)
                break;
        }
        if (c->origin_paused) {
            /* Drained: let the origin go on (it may hand over more at once). */
            c->origin_paused = false;
            c->origin->ops->resume(c->origin, &c->sink);
            continue;
        }
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
            arm_input_timer(c);
            goto out;
        }
        int r = read_some(c);
        if (r == UM_ERR) {
            um__conn_close(c);
            goto out;
        }
        if (r == UM_AGAIN) {
            arm_input_timer(c);
            goto out;
        }
        if (r == UM_DONE && c->state == S_LINGER) {
            um__conn_close(c);
            goto out;
        }
        if (c->state == S_ORIGIN && c->body_wanted && (r == UM_OK || r == UM_DONE)) {
            c->body_wanted = false;
            c->origin->ops->body_ready(c->origin, &c->sink);
        }
    }
    um__tq_disarm(c->w, c);
    um__worker_ready(c->w, c);
out:
    c->in_drive = false;
    um_log_set_conn(log_conn);
}

void um__conn_accept(struct um__worker *w, int fd, bool tls)
{
    struct um__conn *c = um_calloc(1, sizeof(*c));
    c->links.tq_kind = -1;
    c->w = w;
    c->runtime = w->runtime;
    um_runtime_ref(c->runtime);
    c->config = w->config;
    c->id = ++w->next_conn_id;
    um_counter_add(&um_metrics_worker()->conns_total, 1);
    c->fd = fd;
    c->file_fd = -1;
    c->sink.ops = &sink_ops;
    c->state = S_HEAD;
    c->can_write = true;
    c->can_read = true; /* TCP_DEFER_ACCEPT: the first bytes are usually there already */
    c->draining = w->draining;
    um_http1_parser_init(&c->parser);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &sslen) == 0) {
        if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a->sin6_addr, c->peer_ip, sizeof(c->peer_ip));
            c->peer_port = ntohs(a->sin6_port);
        } else if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a->sin_addr, c->peer_ip, sizeof(c->peer_ip));
            c->peer_port = ntohs(a->sin_port);
        }
    }
    c->links.all_next = w->all;
    if (w->all)
        um__links(w->all)->all_prev = c;
    w->all = c;
    w->num_conns++;
    if (tls && w->tls) {
        c->ssl = um_tls_accept_new(w->tls, fd);
        if (c->ssl == NULL) {
            um_log_err("tls: cannot set up a session for %s:%d", c->peer_ip, c->peer_port);
            um__conn_close(c);
            return;
        }
        c->state = S_HANDSHAKE;
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
    if (c->state == S_ORIGIN && !c->resp_ended && (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) &&
        (c->body_done || (events & (EPOLLHUP | EPOLLERR)))) {
        /* The client went away while the origin was answering: stop the origin. */
        um__conn_close(c);
        return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        c->can_read = true;
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
    if (c->state == S_HANDSHAKE) {
        um_counter_add(&um_metrics_worker()->tls_failures, 1);
        uint64_t log_conn = um_log_set_conn(c->id);
        um_log_info("tls: handshake with %s:%d failed: timed out after %gs", c->peer_ip,
                    c->peer_port, c->config->timeouts.header);
        um_log_set_conn(log_conn);
        um__conn_close(c);
        return;
    }
    if (c->state == S_HEAD && c->rpos < c->rlen && !has_output(c)) {
        /* A request head that did not arrive in time (slowloris): say so, then close. */
        c->req.minor_version = 1;
        fail(c, 408);
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
    if (c->state == S_HEAD && c->rpos == c->rlen && !has_output(c))
        um__conn_close(c);
}

void um__conn_close(struct um__conn *c)
{
    if (c->closed)
        return;
    struct um__worker *w = c->w;
    c->closed = true;
    if (c->state == S_ORIGIN && !c->resp_ended && c->origin && c->origin->ops->cancel)
        c->origin->ops->cancel(c->origin, &c->sink);
    if (c->state == S_ORIGIN && c->req_parsed)
        log_request(c, c->resp_head_sent ? 0 : 499); /* the client left first */
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
    if (c->ssl) {
        int want;
        if (c->state != S_HANDSHAKE)
            um_tls_shutdown(c->ssl, &want); /* close_notify, best effort */
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    close(c->fd);
    drop_file(c);
    refs_release(c, UINT_MAX);
    w->num_conns--;
    atomic_fetch_sub(&w->server->num_conns, 1);
    c->links.all_prev = NULL;
    c->links.all_next = w->closed;
    w->closed = c;
}

void um__conn_free(struct um__conn *c)
{
    rbuf_put(c);
    um_buf_dispose(&c->wbuf);
    free(c->fbuf);
    free(c->refs);
    um_arena_reset(&c->arena);
    um_runtime_unref(c->runtime);
    free(c);
}
