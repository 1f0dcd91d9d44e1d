/* The upstream origin.
 *
 *   fetch -> the request's fields -> pick a server -> an attempt on its transport ->
 *         head lines collected (um__up_head_line) -> on_head -> body -> on_data (0 =
 *         client behind: the transport stops reading until the connection resumes it)
 *         -> the transport reports the end (um__up_finish) -> on_end
 *
 * Two transports carry attempts: Umbra's own HTTP/1.1 client (h1.c) for http:// servers
 * at an IP address, and libcurl's multi interface (here) for the others. Every worker has
 * one CURLM (created on its first such fetch), whose sockets and timer live in the
 * worker's epoll loop (CURLMOPT_SOCKETFUNCTION/TIMERFUNCTION), so a slow backend only ever
 * costs a registered socket; an attempt through it is one easy handle.
 *
 * Errors before the response head may be retried on another server (idempotent methods,
 * connect errors and resets); otherwise they become 502/504 answers. After the head, an
 * error ends the body as incomplete. The servers' health is shared by all workers
 * (relaxed atomics): failures in a row take a server out for fail_timeout. */
#include "umbra/upstream.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "umbra/http1.h"
#include "umbra/httpfield.h"
#include "umbra/log.h"
#include "umbra/loop.h"
#include "umbra/metrics.h"
#include "internal.h"

#define EASY_POOL_MAX 256

/* ---------------------------------------------------------------- per-worker state */

struct sock {
    struct um_io io;
    struct sock *next_free;
    struct worker_curl *wc;
};

/* The state of a worker context's UM_CONTEXT_CURL slot. */
struct worker_curl {
    struct um_context *ctx;
    struct um_loop *loop;
    CURLM *multi;
    struct um_timer timer;
    struct um_task stop;
    struct sock *free_socks;
    CURL *easy_pool[EASY_POOL_MAX];
    size_t num_easy;
};

static void check_done(struct worker_curl *wc);

/* ---------------------------------------------------------------- libcurl <-> loop */

static void on_sock_event(struct um_io *io, uint32_t events)
{
    struct sock *s = (struct sock *)io;
    struct worker_curl *wc = s->wc;
    if (io->fd < 0)
        return; /* removed earlier in this turn */
    int flags = 0;
    if (events & EPOLLIN)
        flags |= CURL_CSELECT_IN;
    if (events & EPOLLOUT)
        flags |= CURL_CSELECT_OUT;
    if (events & (EPOLLERR | EPOLLHUP))
        flags |= CURL_CSELECT_ERR;
    int running;
    curl_multi_socket_action(wc->multi, io->fd, flags, &running);
    check_done(wc);
}

static int sock_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    struct worker_curl *wc = userp;
    struct sock *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            um_loop_io_set(wc->loop, &s->io, fd, 0);
            s->io.fd = -1;
            /* Events for it may still be pending in this turn: the struct is reused, never
             * freed while the loop runs. */
            s->next_free = wc->free_socks;
            wc->free_socks = s;
            curl_multi_assign(wc->multi, fd, NULL);
        }
        return 0;
    }
    if (s == NULL) {
        if (wc->free_socks) {
            s = wc->free_socks;
            wc->free_socks = s->next_free;
        } else {
            s = um_calloc(1, sizeof(*s));
        }
        memset(&s->io, 0, sizeof(s->io));
        s->io.cb = on_sock_event;
        s->wc = wc;
        curl_multi_assign(wc->multi, fd, s);
    }
    uint32_t ev = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        ev |= EPOLLIN;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        ev |= EPOLLOUT;
    if (um_loop_io_set(wc->loop, &s->io, fd, ev) != UM_OK)
        um_log_err("upstream: epoll_ctl on fd %d: %s", fd, strerror(errno));
    return 0;
}

static void on_curl_timer(struct um_timer *t)
{
    struct worker_curl *wc = (struct worker_curl *)((char *)t - offsetof(struct worker_curl, timer));
    int running;
    curl_multi_socket_action(wc->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(wc);
}

static int timer_cb(CURLM *multi, long ms, void *userp)
{
    (void)multi;
    struct worker_curl *wc = userp;
    if (ms < 0)
        um_loop_timer_stop(wc->loop, &wc->timer);
    else
        um_loop_timer_start(wc->loop, &wc->timer, (uint64_t)ms);
    return 0;
}

static void worker_curl_stop(struct um_task *t)
{
    struct worker_curl *wc = (struct worker_curl *)((char *)t - offsetof(struct worker_curl, stop));
    curl_multi_cleanup(wc->multi); /* closes the kept-alive connections */
    um_loop_timer_stop(wc->loop, &wc->timer);
    for (size_t i = 0; i < wc->num_easy; i++)
        curl_easy_cleanup(wc->easy_pool[i]);
    while (wc->free_socks) {
        struct sock *s = wc->free_socks;
        wc->free_socks = s->next_free;
        free(s);
    }
    um_context_set(wc->ctx, UM_CONTEXT_CURL, NULL);
    free(wc);
}

static struct worker_curl *worker_curl(struct um_context *ctx)
{
    struct worker_curl *wc = um_context_get(ctx, UM_CONTEXT_CURL);
    if (wc)
        return wc;
    wc = um_calloc(1, sizeof(*wc));
    wc->ctx = ctx;
    wc->loop = ctx->loop;
    wc->multi = curl_multi_init();
    UM_ASSERT(wc->multi != NULL);
    curl_multi_setopt(wc->multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
    curl_multi_setopt(wc->multi, CURLMOPT_SOCKETDATA, wc);
    curl_multi_setopt(wc->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(wc->multi, CURLMOPT_TIMERDATA, wc);
    curl_multi_setopt(wc->multi, CURLMOPT_MAXCONNECTS, 1024L);
    wc->timer.cb = on_curl_timer;
    wc->stop.cb = worker_curl_stop;
    um_loop_on_stop(ctx->loop, &wc->stop);
    um_context_set(ctx, UM_CONTEXT_CURL, wc);
    return wc;
}

/* ---------------------------------------------------------------- servers */

static bool server_usable(struct upstream *up, int i, uint64_t now)
{
    return atomic_load_explicit(&up->servers[i].down_until, memory_order_relaxed) <= now;
}

/* Returns a server not tried yet by x and not taken out, or -1. */
static int pick_server(struct upstream *up, struct xfer *x)
{
    int n = (int)up->conf->num_servers;
    uint64_t now = um_loop_now(x->loop);
    unsigned start;
    switch (up->conf->balance) {
    case UM_BALANCE_HASH:
        start = (unsigned)(x->key_hash % (uint64_t)n);
        break;
    default:
        start = atomic_fetch_add_explicit(&up->rr, 1, memory_order_relaxed) % (unsigned)n;
        break;
    }
    int best = -1, best_active = 0;
    for (int k = 0; k < n; k++) {
        int i = (int)((start + (unsigned)k) % (unsigned)n);
        if ((i < 64 && (x->tried >> i) & 1) || !server_usable(up, i, now))
            continue;
        if (up->conf->balance != UM_BALANCE_LEAST_CONN)
            return i;
        int active = atomic_load_explicit(&up->servers[i].active, memory_order_relaxed);
        if (best < 0 || active < best_active) {
            best = i;
            best_active = active;
        }
    }
    return best;
}

static void server_failed(struct upstream *up, struct xfer *x, int i)
{
    if (x->url)
        return; /* a hook's server, not one of the upstream's */
    int fails = atomic_fetch_add_explicit(&up->servers[i].fails, 1, memory_order_relaxed) + 1;
    if (fails >= up->conf->max_fails) {
        uint64_t until = um_loop_now(x->loop) + (uint64_t)(up->conf->fail_timeout * 1000);
        atomic_store_explicit(&up->servers[i].down_until, until, memory_order_relaxed);
        um_metrics_server_down_until(up->slots[i], until);
        um_log_warn("upstream %s: server %s failed %d times in a row; skipped for %gs",
                    up->conf->name, up->conf->servers[i].url, fails, up->conf->fail_timeout);
    }
}

static void server_ok(struct upstream *up, int i)
{
    if (atomic_load_explicit(&up->servers[i].fails, memory_order_relaxed) != 0)
        atomic_store_explicit(&up->servers[i].fails, 0, memory_order_relaxed);
}

/* ---------------------------------------------------------------- request headers */

static bool is_hop_by_hop(um_str name)
{
    static const char *const hop[] = {"connection", "keep-alive", "proxy-connection", "te",
                                      "trailer", "transfer-encoding", "upgrade",
                                      "proxy-authorization", "proxy-authenticate"};
    for (size_t i = 0; i < UM_NELEMS(hop); i++)
        if (um_str_eq_ci(name, hop[i]))
            return true;
    return false;
}

/* Fields that tell an application which host, scheme, port or URL a request was for. Umbra
 * sets X-Forwarded-For/-Proto/-Host itself; the others are dropped from client requests.
 * The cache key has none of them, so an origin that believes one (IIS and Symfony route by
 * X-Original-URL, Rails builds links from X-Forwarded-Scheme) would let one client choose
 * what the cache then gives everybody (cache poisoning). */
static bool is_forwarding_field(um_str name)
{
    static const char *const fwd[] = {
        "x-forwarded-proto", "x-forwarded-host",   "x-forwarded-for",    "x-forwarded-scheme",
        "x-forwarded-port",  "x-forwarded-prefix", "x-forwarded-server", "x-original-url",
        "x-rewrite-url",     "x-original-host",    "x-host",
    };
    for (size_t i = 0; i < UM_NELEMS(fwd); i++)
        if (um_str_eq_ci(name, fwd[i]))
            return true;
    return false;
}

/* True when the comma-separated Connection values of the fields[] name this field. */
static bool named_in_connection(const struct um_header *fields, size_t n, um_str name)
{
    for (size_t i = 0; i < n; i++) {
        if (!um_str_eq_ci(fields[i].name, "connection"))
            continue;
        um_str v = fields[i].value;
        size_t p = 0;
        while (p < v.len) {
            size_t q = p;
            while (q < v.len && v.base[q] != ',')
                q++;
            um_str tok = um_str_trim((um_str){v.base + p, q - p});
            if (tok.len == name.len && tok.len > 0) {
                char lit[128];
                if (tok.len < sizeof(lit)) {
                    memcpy(lit, tok.base, tok.len);
                    lit[tok.len] = '\0';
                    if (um_str_eq_ci(name, lit))
                        return true;
                }
            }
            p = q + 1;
        }
    }
    return false;
}

/* Appends "Name: value\r\n" to buf (sized in advance by the caller). */
static size_t put_field(char *buf, size_t o, um_str name, um_str value)
{
    memcpy(buf + o, name.base, name.len);
    o += name.len;
    buf[o++] = ':';
    buf[o++] = ' ';
    memcpy(buf + o, value.base, value.len);
    o += value.len;
    buf[o++] = '\r';
    buf[o++] = '\n';
    return o;
}

/* The fields sent to the server, as text, into x->fields: the client's end-to-end fields
 * in order, Host, and the forwarding fields. */
static void build_fields(struct upstream *up, const struct um_fetch *f, struct xfer *x)
{
    const struct um_request *req = f->req;
    size_t size = 2048;
    for (size_t i = 0; i < req->num_headers; i++)
        size += req->headers[i].name.len + req->headers[i].value.len + 4;
    size += 2 * req->authority.len + (up->conf->host ? strlen(up->conf->host) : 0);
    um_str xff = {NULL, 0};
    for (size_t i = 0; i < req->num_headers; i++)
        if (um_str_eq_ci(req->headers[i].name, "x-forwarded-for") && xff.base == NULL)
            xff = req->headers[i].value;
    const um_str *via = um_http1_find_header(req, "via");
    size += xff.len + (via ? via->len : 0);
    char *out = um_malloc(size);
    size_t o = 0;
    for (size_t i = 0; i < req->num_headers; i++) {
        const struct um_header *fld = &req->headers[i];
        if (is_hop_by_hop(fld->name) || um_str_eq_ci(fld->name, "host") ||
            um_str_eq_ci(fld->name, "content-length") || um_str_eq_ci(fld->name, "expect") ||
            is_forwarding_field(fld->name) ||
            named_in_connection(req->headers, req->num_headers, fld->name))
            continue;
        o = put_field(out, o, fld->name, fld->value);
    }
    x->has_host = true;
    if (up->conf->host)
        o = put_field(out, o, UM_STR("Host"), (um_str){up->conf->host, strlen(up->conf->host)});
    else if (req->authority.len > 0)
        o = put_field(out, o, UM_STR("Host"), req->authority);
    else
        x->has_host = false;
    char buf[1024];
    int n;
    if (xff.len > 0 && xff.len < 900)
        n = snprintf(buf, sizeof(buf), "%.*s, %s", (int)xff.len, xff.base, f->client_ip);
    else
        n = snprintf(buf, sizeof(buf), "%s", f->client_ip);
    o = put_field(out, o, UM_STR("X-Forwarded-For"), (um_str){buf, (size_t)n});
    o = put_field(out, o, UM_STR("X-Forwarded-Proto"), (um_str){f->scheme, strlen(f->scheme)});
    if (req->authority.len > 0)
        o = put_field(out, o, UM_STR("X-Forwarded-Host"), req->authority);
    if (via && via->len < 900)
        n = snprintf(buf, sizeof(buf), "%.*s, 1.%d umbra", (int)via->len, via->base,
                     req->minor_version);
    else
        n = snprintf(buf, sizeof(buf), "1.%d umbra", req->minor_version);
    o = put_field(out, o, UM_STR("Via"), (um_str){buf, (size_t)n});
    UM_ASSERT(o <= size);
    x->fields = out;
    x->fields_len = o;
}

/* x->fields as libcurl's header list, in one allocation: the nodes, then the lines.
 * (struct curl_slist is public; libcurl only reads a list it is given.) */
static struct curl_slist *fields_to_slist(const struct xfer *x)
{
    size_t cap = 2;
    for (size_t i = 0; i < x->fields_len; i++)
        cap += x->fields[i] == '\n';
    size_t size = x->fields_len + 32;
    char *mem = um_malloc(cap * sizeof(struct curl_slist) + size);
    struct curl_slist *nodes = (struct curl_slist *)(void *)mem;
    char *text = mem + cap * sizeof(struct curl_slist);
    size_t n = 0, o = 0;
    bool accept = false;
    for (size_t p = 0; p < x->fields_len;) {
        const char *line = x->fields + p;
        size_t len = (size_t)((const char *)memchr(line, '\n', x->fields_len - p) - line) - 1;
        p += len + 2;
        if (len >= 7 && strncasecmp(line, "accept:", 7) == 0)
            accept = true;
        char *dst = text + o;
        memcpy(dst, line, len);
        /* libcurl: "Name;" sends an empty field, "Name:" would remove one of its own. */
        if (len >= 2 && dst[len - 2] == ':' && dst[len - 1] == ' ')
            dst[--len - 1] = ';';
        dst[len] = '\0';
        o += len + 1;
        nodes[n] = (struct curl_slist){dst, NULL};
        if (n > 0)
            nodes[n - 1].next = &nodes[n];
        n++;
    }
    /* Keep libcurl from adding fields the client did not send. */
    static const char *const remove[] = {"Accept:", "Expect:"};
    for (size_t i = accept ? 1 : 0; i < UM_NELEMS(remove); i++) {
        char *dst = text + o;
        memcpy(dst, remove[i], 8);
        o += 8;
        nodes[n] = (struct curl_slist){dst, NULL};
        if (n > 0)
            nodes[n - 1].next = &nodes[n];
        n++;
    }
    UM_ASSERT(n <= cap && o <= size);
    return nodes;
}

/* ---------------------------------------------------------------- response */

/* Parses the collected head and hands it to the sink. Returns false when it is malformed. */
static bool deliver_head(struct xfer *x)
{
    struct um_header fields[MAX_RESPONSE_FIELDS + 2];
    size_t n = 0;
    int64_t content_length = -1;
    bool te = false, chunked = false;
    /* Line 0 is the status line: "HTTP/1.x SSS reason". */
    const char *sl = x->hbuf + x->line_starts[0];
    size_t sl_len = (x->num_lines > 1 ? x->line_starts[1] : x->hlen) - x->line_starts[0];
    while (sl_len > 0 && (sl[sl_len - 1] == '\n' || sl[sl_len - 1] == '\r'))
        sl_len--;
    if (sl_len < 12 || memcmp(sl, "HTTP/", 5) != 0 || sl[8] != ' ')
        return false;
    um_str reason = sl_len > 13 ? (um_str){sl + 13, sl_len - 13} : (um_str){NULL, 0};
    for (size_t i = 0; i < reason.len; i++)
        if ((unsigned char)reason.base[i] < 0x20 && reason.base[i] != '\t')
            return false;
    struct um_header raw[MAX_RESPONSE_FIELDS];
    size_t nraw = 0;
    for (size_t l = 1; l < x->num_lines; l++) {
        const char *p = x->hbuf + x->line_starts[l];
        size_t len = (l + 1 < x->num_lines ? x->line_starts[l + 1] : x->hlen) - x->line_starts[l];
        while (len > 0 && (p[len - 1] == '\n' || p[len - 1] == '\r'))
            len--;
        if (len == 0)
            continue;
        const char *colon = memchr(p, ':', len);
        if (colon == NULL || colon == p)
            return false;
        for (const char *q = p; q < colon; q++)
            if (!um_http_tchar((unsigned char)*q))
                return false; /* also obs-fold and whitespace before the colon */
        um_str value = um_str_trim((um_str){colon + 1, len - (size_t)(colon + 1 - p)});
        for (size_t i = 0; i < value.len; i++) {
            unsigned char c = (unsigned char)value.base[i];
            if ((c < 0x20 && c != '\t') || c == 0x7f)
                return false;
        }
        raw[nraw++] = (struct um_header){{p, (size_t)(colon - p)}, value};
    }
    for (size_t i = 0; i < nraw; i++) {
        um_str name = raw[i].name;
        if (um_str_eq_ci(name, "transfer-encoding")) {
            /* The last field's final coding decides (RFC 9112 section 6.3). */
            um_str v = raw[i].value;
            size_t k = v.len;
            while (k > 0 && v.base[k - 1] != ',')
                k--;
            te = true;
            chunked = um_str_eq_ci(um_str_trim((um_str){v.base + k, v.len - k}), "chunked");
        }
        if (um_str_eq_ci(name, "content-length")) {
            um_str v = raw[i].value;
            uint64_t cl = 0;
            if (v.len == 0 || v.len > 18)
                return false;
            for (size_t k = 0; k < v.len; k++) {
                if (v.base[k] < '0' || v.base[k] > '9')
                    return false;
                cl = cl * 10 + (uint64_t)(v.base[k] - '0');
            }
            if (content_length >= 0 && (uint64_t)content_length != cl)
                return false;
            content_length = (int64_t)cl;
            continue;
        }
        if (is_hop_by_hop(name) || um_str_eq_ci(name, "server") ||
            named_in_connection(raw, nraw, name))
            continue;
        fields[n++] = raw[i];
    }
    fields[n++] = (struct um_header){UM_STR("Via"), UM_STR("1.1 umbra")};
    x->resp_length = content_length;
    x->resp_te = te;
    x->resp_chunked = chunked;
    bool http10 = memcmp(sl, "HTTP/1.0", 8) == 0;
    x->resp_close = named_in_connection(raw, nraw, UM_STR("close")) ||
                    (http10 && !named_in_connection(raw, nraw, UM_STR("keep-alive")));
    /* Transfer-Encoding overrides Content-Length (RFC 9112 section 6.3): the body is as
     * long as its coding says, and a length passed on would misframe it to the client. A
     * HEAD, 204 or 304 answer has no body and keeps the length the origin announced. */
    if (te)
        content_length = -1;
    struct um_response_head head = {.status = x->status, .headers = fields, .num_headers = n, .content_length = content_length, .reason = reason};
    x->head_sent = true;
    x->sink->ops->on_head(x->sink, &head);
    return true;
}

size_t um__up_head_line(char *data, size_t size, size_t nitems, void *userp)
{
    struct xfer *x = userp;
    size_t len = size * nitems;
    if (x->head_sent) {
        return len; /* trailers: dropped */
    }
    if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        /* A status line starts a new head (after 1xx interim answers, or a retry). */
        x->hlen = 0;
        x->num_lines = 0;
        x->head_bad = false;
        x->status = 0;
        if (len >= 12)
            x->status = (data[9] - '0') * 100 + (data[10] - '0') * 10 + (data[11] - '0');
        if (len < 12 || data[9] < '1' || data[9] > '5' || data[10] < '0' || data[10] > '9' ||
            data[11] < '0' || data[11] > '9')
            x->head_bad = true;
    }
    if (len <= 2 && (data[0] == '\r' || data[0] == '\n')) {
        /* The end of a head. */
        if (x->num_lines == 0 || x->head_bad)
            return 0; /* abort: malformed */
        if (x->status >= 100 && x->status < 200) {
            x->hlen = 0;
            x->num_lines = 0;
            return len;
        }
        um_loop_timer_stop(x->loop, &x->ttfb);
        server_ok(x->up, x->server);
        um_metrics_upstream_done(x->up->slots[x->server], um_loop_now(x->loop) - x->t_attempt, false);
        if (deliver_head(x))
            return len;
        um_log_err("upstream %s: server %s: malformed response head", x->up->conf->name,
                   x->up->conf->servers[x->server].url);
        x->logged = true;
        return 0;
    }
    if (x->num_lines == MAX_RESPONSE_FIELDS + 1 || x->hlen + len > MAX_RESPONSE_HEAD) {
        um_log_err("upstream %s: server %s: response head too large", x->up->conf->name,
                   x->up->conf->servers[x->server].url);
        x->logged = true;
        return 0;
    }
    if (x->hlen + len > x->hcap) {
        size_t cap = x->hcap ? x->hcap * 2 : 2048;
        while (cap < x->hlen + len)
            cap *= 2;
        x->hbuf = um_realloc(x->hbuf, cap);
        x->hcap = cap;
    }
    x->line_starts[x->num_lines++] = x->hlen;
    memcpy(x->hbuf + x->hlen, data, len);
    x->hlen += len;
    return len;
}

static size_t on_body(char *data, size_t size, size_t nitems, void *userp)
{
    struct xfer *x = userp;
    size_t len = size * nitems;
    if (!x->head_sent)
        return 0;
    if (x->sink->ops->on_data(x->sink, data, len) == 0) {
        x->paused_recv = true;
        return CURL_WRITEFUNC_PAUSE;
    }
    return len;
}

static size_t on_read_body(char *buf, size_t size, size_t nitems, void *userp)
{
    struct xfer *x = userp;
    if (x->body) {
        size_t n = (size_t)x->body_size - x->body_pos;
        if (n > size * nitems)
            n = size * nitems;
        memcpy(buf, x->body + x->body_pos, n);
        x->body_pos += n;
        x->body_started = true;
        return n;
    }
    ssize_t n = x->sink->ops->read_body(x->sink, buf, size * nitems);
    if (n == UM_AGAIN) {
        x->paused_send = true;
        return CURL_READFUNC_PAUSE;
    }
    if (n < 0) {
        x->body_failed = true;
        return CURL_READFUNC_ABORT;
    }
    x->body_started = true;
    return (size_t)n;
}

/* ---------------------------------------------------------------- life of a fetch */

/* Takes the current attempt off its transport (closing its connection if it has one). */
static void release_attempt(struct xfer *x)
{
    if (x->in_multi) {
        curl_multi_remove_handle(x->wc->multi, x->easy);
        x->in_multi = false;
    }
    if (x->hc)
        um__h1_release(x);
    if (x->counted) {
        x->counted = false;
        atomic_fetch_sub_explicit(&x->up->servers[x->server].active, 1, memory_order_relaxed);
    }
}

static void xfer_free(struct xfer *x)
{
    struct worker_curl *wc = x->wc;
    release_attempt(x);
    um_loop_timer_stop(x->loop, &x->ttfb);
    if (x->easy) {
        if (wc->num_easy < EASY_POOL_MAX) {
            /* Kept with its options: the next fetch sets what varies (see start_attempt),
             * which costs far less than curl_easy_reset and setting all again. */
            wc->easy_pool[wc->num_easy++] = x->easy;
        } else {
            curl_easy_cleanup(x->easy);
        }
    }
    free(x->headers); /* fields_to_slist's single allocation */
    free(x->fields);
    free(x->target);
    free(x->method);
    free(x->url);
    free(x->body);
    free(x->hbuf);
    free(x);
}

/* The last call to the sink: after it the sink may be gone (a layer frees its state in
 * on_end), so it is forgotten first. */
static void end_sink(struct xfer *x, int err)
{
    struct um_sink *sink = x->sink;
    x->sink = NULL;
    sink->origin_data = NULL;
    sink->ops->on_end(sink, err);
}

static void respond_error(struct xfer *x, int status)
{
    const char *body = status == 504 ? "504 Gateway Timeout\n"
                       : status == 501 ? "501 Not Implemented\n"
                                       : "502 Bad Gateway\n";
    /* The last call to the sink, as in end_sink. */
    struct um_sink *sink = x->sink;
    x->sink = NULL;
    sink->origin_data = NULL;
    um_sink_answer_text(sink, status, body);
}

static void on_ttfb_timeout(struct um_timer *t);

/* Opens the sockets libcurl connects with, to learn why one could not be made (curl keeps
 * no errno for a failed socket()). */
static curl_socket_t on_open_socket(void *userp, curlsocktype purpose, struct curl_sockaddr *a)
{
    struct xfer *x = userp;
    (void)purpose;
    curl_socket_t fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    if (fd == CURL_SOCKET_BAD)
        x->socket_errno = errno;
    return fd;
}

/* Sets up x->easy for one attempt on x->server and adds it to the multi handle. */
static void start_attempt(struct xfer *x)
{
    struct upstream *up = x->up;
    const struct um_upstream_conf *conf = up->conf;
    const struct um_upstream_server *srv = &conf->servers[x->server];
    const char *base = x->url ? x->url : srv->url;
    bool https = x->url ? strncmp(x->url, "https:", 6) == 0 : srv->https;
    if (x->server < 64)
        x->tried |= (uint64_t)1 << x->server;
    x->attempts++;
    x->hlen = 0;
    x->num_lines = 0;
    x->socket_errno = 0;
    x->t_attempt = um_loop_now(x->loop);
    x->ttfb.cb = on_ttfb_timeout;
    um_loop_timer_start(x->loop, &x->ttfb, (uint64_t)(conf->timeout * 1000));
    atomic_fetch_add_explicit(&up->servers[x->server].active, 1, memory_order_relaxed);
    x->counted = true;
    if (x->url == NULL && um__up_native(up, x->server)) {
        um__h1_start(x);
        return;
    }

    if (x->wc == NULL)
        x->wc = worker_curl(x->ctx);
    struct worker_curl *wc = x->wc;
    if (x->easy == NULL) {
        x->easy_ready = wc->num_easy > 0;
        x->easy = wc->num_easy > 0 ? wc->easy_pool[--wc->num_easy] : curl_easy_init();
        UM_ASSERT(x->easy != NULL);
    }
    if (x->headers == NULL)
        x->headers = fields_to_slist(x);
    CURL *e = x->easy;
    size_t blen = strlen(base), tlen = strlen(x->target), ulen = blen + tlen + 1;
    char stack[2048];
    char *url = ulen <= sizeof(stack) ? stack : um_malloc(ulen);
    memcpy(url, base, blen);
    memcpy(url + blen, x->target, tlen + 1);
    curl_easy_setopt(e, CURLOPT_URL, url);
    if (url != stack)
        free(url);
    if (!x->easy_ready) {
        /* Options that never change: set once per handle (handles are pooled with them). */
        curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
        curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, um__up_head_line);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read_body);
        curl_easy_setopt(e, CURLOPT_HTTP_CONTENT_DECODING, 0L);
        curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 64L * 1024);
        curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 64L * 1024);
        curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
        x->easy_ready = true;
    }
    /* What varies per fetch; HTTPGET first resets the method, upload and nobody. */
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, (char *)NULL);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_READDATA, x);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(conf->connect_timeout * 1000));
    /* A body that stalls for `timeout` seconds ends the transfer (the first byte has
     * its own timer below). */
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)(conf->timeout < 1 ? 1 : conf->timeout));
    if (https) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, conf->tls_verify ? 1L : 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, conf->tls_verify ? 2L : 0L);
        curl_easy_setopt(e, CURLOPT_CAINFO, conf->tls_ca);
    }
    if (x->is_head)
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    else if (x->method)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, x->method);
    if (x->has_body) {
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, x->body_size);
    }
    x->in_multi = true;
    CURLMcode mc = curl_multi_add_handle(wc->multi, e);
    UM_ASSERT(mc == CURLM_OK);
}

static bool retryable(CURLcode res)
{
    switch (res) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT: /* the connect timeout (the first-byte one is ours) */
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
        return true;
    default:
        return false;
    }
}

static void finish_attempt(struct xfer *x, CURLcode res);

/* A transfer ended (res) or timed out before its head (x->timed_out). Its log lines name
 * the connection that started it. */
void um__up_finish(struct xfer *x, CURLcode res)
{
    uint64_t prev = um_log_set_conn(x->log_conn);
    finish_attempt(x, res);
    um_log_set_conn(prev);
}

static void finish_attempt(struct xfer *x, CURLcode res)
{
    struct upstream *up = x->up;
    const struct um_upstream_conf *conf = up->conf;
    const char *url = x->url ? x->url : conf->servers[x->server].url;
    if (!x->head_sent && !x->body_failed)
        um_metrics_upstream_done(up->slots[x->server], um_loop_now(x->loop) - x->t_attempt, true);
    release_attempt(x);
    um_loop_timer_stop(x->loop, &x->ttfb);
    if (res == CURLE_OK && !x->timed_out) {
        if (!x->head_sent) {
            um_log_err("upstream %s: server %s: no response head", conf->name, url);
            respond_error(x, 502);
        } else {
            end_sink(x, UM_OK);
        }
        xfer_free(x);
        return;
    }
    if (x->head_sent) {
        um_log_err("upstream %s: server %s: response body cut short: %s", conf->name, url,
                   x->errbuf[0] ? x->errbuf : curl_easy_strerror(res));
        end_sink(x, UM_ERR);
        xfer_free(x);
        return;
    }
    if (x->body_failed) {
        /* The client's body was bad: the connection answers 400/413 itself. */
        end_sink(x, UM_ERR);
        xfer_free(x);
        return;
    }
    if (x->timed_out) {
        um_log_err("upstream %s: server %s: no response within %gs", conf->name, url, conf->timeout);
        server_failed(up, x, x->server);
        respond_error(x, 504);
        xfer_free(x);
        return;
    }
    /* Out of descriptors or memory here is not the server's fault: counting it would take
     * every server out for fail_timeout, well after the shortage ended (nginx does not
     * count it either). Nor is another server worth a try. */
    int se = x->socket_errno;
    bool local = se == EMFILE || se == ENFILE || se == ENOBUFS || se == ENOMEM;
    bool server_fault = !local && (retryable(res) || res == CURLE_WEIRD_SERVER_REPLY ||
                                   res == CURLE_PEER_FAILED_VERIFICATION || x->logged);
    if (!x->logged)
        um_log_err("upstream %s: server %s: %s", conf->name, url,
                   local ? strerror(se) : x->errbuf[0] ? x->errbuf : curl_easy_strerror(res));
    x->logged = false;
    if (server_fault)
        server_failed(up, x, x->server);
    if (!local && retryable(res) && x->idempotent && !x->body_started &&
        x->attempts <= conf->retries) {
        int next = pick_server(up, x);
        if (next >= 0) {
            x->server = next;
            x->errbuf[0] = '\0';
            start_attempt(x);
            return;
        }
    }
    respond_error(x, res == CURLE_OPERATION_TIMEDOUT ? 504 : 502);
    xfer_free(x);
}

static void on_ttfb_timeout(struct um_timer *t)
{
    struct xfer *x = (struct xfer *)((char *)t - offsetof(struct xfer, ttfb));
    x->timed_out = true;
    um__up_finish(x, CURLE_OPERATION_TIMEDOUT);
}

static void check_done(struct worker_curl *wc)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(wc->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        struct xfer *x = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        um__up_finish(x, msg->data.result);
    }
}

/* ---------------------------------------------------------------- origin ops */

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static void upstream_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *sink)
{
    struct upstream *up = (struct upstream *)o;
    const struct um_request *req = f->req;
    if (um_http1_find_header(req, "upgrade")) {
        um_sink_answer_text(sink, 501, "501 Not Implemented: protocol upgrades are not supported\n");
        return;
    }
    struct xfer *x = um_calloc(1, sizeof(*x));
    x->up = up;
    x->ctx = f->ctx;
    x->loop = f->ctx->loop;
    x->log_conn = um_log_conn();
    x->sink = sink;
    sink->origin_data = x;
    x->is_head = req->method_id == UM_METHOD_HEAD;
    x->has_body = (req->flags & (UM_REQ_F_CHUNKED | UM_REQ_F_CONTENT_LENGTH)) != 0;
    switch (req->method_id) {
    case UM_METHOD_GET:
    case UM_METHOD_HEAD:
    case UM_METHOD_PUT:
    case UM_METHOD_DELETE:
    case UM_METHOD_OPTIONS:
    case UM_METHOD_TRACE:
        x->idempotent = true;
        break;
    default:
        x->idempotent = false;
    }
    /* The target exactly as the client sent it (origin-form), for every attempt. */
    size_t tlen = req->path.len + ((req->flags & UM_REQ_F_HAS_QUERY) ? req->query.len + 1 : 0);
    x->target = um_malloc(tlen + 1);
    memcpy(x->target, req->path.base, req->path.len);
    if (req->flags & UM_REQ_F_HAS_QUERY) {
        x->target[req->path.len] = '?';
        memcpy(x->target + req->path.len + 1, req->query.base, req->query.len);
    }
    x->target[tlen] = '\0';
    x->key_hash = fnv1a(x->target, tlen);
    if (!x->is_head && (req->method_id != UM_METHOD_GET || x->has_body))
        x->method = um_strndup(req->method.base, req->method.len);
    x->body_size = (req->flags & UM_REQ_F_CHUNKED) ? -1 : (curl_off_t)req->content_length;
    if (f->upstream_url)
        x->url = um_strndup(f->upstream_url, strlen(f->upstream_url));
    if (f->has_body) {
        x->has_body = true;
        x->body = um_malloc(f->body.len + 1);
        memcpy(x->body, f->body.base, f->body.len);
        x->body_size = (curl_off_t)f->body.len;
        if (x->method == NULL && !x->is_head)
            x->method = um_strndup(req->method.base, req->method.len);
    }
    build_fields(up, f, x);
    x->server = pick_server(up, x);
    if (x->server < 0) {
        um_log_err("upstream %s: every server is out (failing); answering 502", up->conf->name);
        x->server = 0;
        respond_error(x, 502);
        xfer_free(x);
        return;
    }
    start_attempt(x);
}

static void unpause(struct xfer *x)
{
    int mask = (x->paused_recv ? CURLPAUSE_RECV : 0) | (x->paused_send ? CURLPAUSE_SEND : 0);
    curl_easy_pause(x->easy, mask);
}

static void upstream_resume(struct um_origin *o, struct um_sink *sink)
{
    (void)o;
    struct xfer *x = sink->origin_data;
    if (x == NULL || !x->paused_recv)
        return;
    x->paused_recv = false;
    if (x->hc)
        um__h1_resume(x);
    else if (x->in_multi)
        unpause(x);
}

static void upstream_body_ready(struct um_origin *o, struct um_sink *sink)
{
    (void)o;
    struct xfer *x = sink->origin_data;
    if (x == NULL || !x->paused_send)
        return;
    x->paused_send = false;
    if (x->hc)
        um__h1_body_ready(x);
    else if (x->in_multi)
        unpause(x);
}

static void upstream_cancel(struct um_origin *o, struct um_sink *sink)
{
    (void)o;
    struct xfer *x = sink->origin_data;
    if (x == NULL)
        return;
    xfer_free(x);
}

static void upstream_destroy(struct um_origin *o)
{
    struct upstream *up = (struct upstream *)o;
    if (atomic_fetch_sub(&up->refcnt, 1) != 1)
        return;
    free(up->servers);
    free(up->slots);
    free(up);
}

static const struct um_origin_ops upstream_ops = {
    .flags = UM_ORIGIN_F_STREAM_BODY,
    .fetch = upstream_fetch,
    .resume = upstream_resume,
    .body_ready = upstream_body_ready,
    .cancel = upstream_cancel,
    .destroy = upstream_destroy,
};

struct um_origin *um_upstream_origin_create(const struct um_upstream_conf *conf)
{
    struct upstream *up = um_calloc(1, sizeof(*up));
    up->base.ops = &upstream_ops;
    atomic_init(&up->refcnt, 1);
    up->conf = conf;
    up->servers = um_calloc(conf->num_servers, sizeof(*up->servers));
    up->slots = um_calloc(conf->num_servers, sizeof(*up->slots));
    size_t native = 0;
    for (size_t i = 0; i < conf->num_servers; i++) {
        native += um__up_native(up, (int)i);
        up->slots[i] = um_metrics_server_slot(conf->name, conf->servers[i].url);
        /* A server taken out stays out across a reload. */
        atomic_init(&up->servers[i].down_until, um_metrics_server_down_until_get(up->slots[i]));
    }
    um_log_info("upstream %s: %zu server(s) through Umbra's HTTP/1.1 client, %zu through "
                "libcurl", conf->name, native, conf->num_servers - native);
    return &up->base;
}

struct um_origin *um_upstream_origin_ref(struct um_origin *o)
{
    struct upstream *up = (struct upstream *)o;
    atomic_fetch_add(&up->refcnt, 1);
    return o;
}

void um_upstream_global_init(void)
{
    UM_ASSERT(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK);
}

void um_upstream_global_cleanup(void)
{
    curl_global_cleanup();
}
