/* SPDX-License-Identifier: BSD-2-Clause */
/* The upstream's libcurl transport: https:// servers, servers named by host name, every
 * server of an upstream with client = "curl", and a hook's server (h1.c carries the
 * others).
 *
 * Every worker has one CURLM (created on its first such attempt), whose sockets and timer
 * live in the worker's epoll loop (CURLMOPT_SOCKETFUNCTION/TIMERFUNCTION), so a slow
 * backend only ever costs a registered socket. An attempt is one easy handle, kept with
 * its state in a struct attempt that goes back to the worker's pool after the attempt,
 * with the options that never change still set.
 *
 * libcurl hands the response head over one line at a time: the lines are collected, and
 * the head is parsed once, by the HTTP/1.x response parser, at its empty line. libcurl's
 * CURLcode is turned into the upstream's enum um_up_err when the transfer ends. */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "umbra/buf.h"
#include "umbra/http1.h"
#include "umbra/log.h"
#include "umbra/loop.h"
#include "internal.h"

#define POOL_MAX 256   /* attempts (easy handles) kept per worker */
#define HBUF_KEEP 8192 /* a pooled attempt keeps a head buffer up to this size */

_Static_assert(UM_UP_ERRBUF >= CURL_ERROR_SIZE, "x->errbuf holds libcurl's messages");

/* ---------------------------------------------------------------- per-worker state */

struct sock {
    struct um_io io;
    struct sock *next_free;
    struct worker_curl *wc;
};

struct attempt;

/* The state of a worker context's curl slot (um__curl_slot). */
struct worker_curl {
    struct um_context *ctx;
    struct um_loop *loop;
    CURLM *multi;
    struct um_timer timer;
    struct sock *free_socks;
    struct attempt *pool[POOL_MAX];
    size_t num_pooled;
    /* Attempts whose body bytes went to the sink in the current call into libcurl (each
     * once, a->next_fed): they ran dry when libcurl returns (fed_ran_dry). */
    struct attempt *fed;
};

/* One attempt: x->conn while it runs. */
struct attempt {
    CURL *easy; /* its callbacks' data, private pointer and error buffer are this struct */
    struct worker_curl *wc;
    struct xfer *x;             /* NULL while pooled */
    struct curl_slist *headers; /* x->fields as libcurl's list (fields_to_slist) */
    struct um_buf head;         /* the response head's lines so far */
    enum um_up_err head_err; /* why on_header refused a line; UM_UP_OK: it did not */
    bool on_fed;             /* in wc->fed */
    struct attempt *next_fed;
    int socket_errno;        /* errno of a failed socket() (EMFILE...), or 0 */
    char err[CURL_ERROR_SIZE];
};

static void check_done(struct worker_curl *wc);
static void fed_ran_dry(struct worker_curl *wc);

/* ---------------------------------------------------------------- libcurl <-> loop */

static void on_sock_event(struct um_io *io, uint32_t events)
{
    struct sock *s = (struct sock *)io;
    struct worker_curl *wc = s->wc;
    if (io->fd < 0) return; /* removed earlier in this turn */
    int flags = 0;
    if (events & EPOLLIN) flags |= CURL_CSELECT_IN;
    if (events & EPOLLOUT) flags |= CURL_CSELECT_OUT;
    if (events & (EPOLLERR | EPOLLHUP)) flags |= CURL_CSELECT_ERR;
    int running;
    curl_multi_socket_action(wc->multi, io->fd, flags, &running);
    check_done(wc);
    fed_ran_dry(wc);
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
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) ev |= EPOLLIN;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) ev |= EPOLLOUT;
    if (um_loop_io_set(wc->loop, &s->io, fd, ev) != UM_OK)
        um_log_err("upstream: epoll_ctl on fd %d: %s", fd, strerror(errno));
    return 0;
}

static void on_curl_timer(struct um_timer *t)
{
    struct worker_curl *wc = um_container_of(t, struct worker_curl, timer);
    int running;
    curl_multi_socket_action(wc->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(wc);
    fed_ran_dry(wc);
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

static void attempt_free(struct attempt *a)
{
    curl_easy_cleanup(a->easy);
    um_buf_dispose(&a->head);
    free(a);
}

static void worker_curl_stop(struct um_context *ctx, void *state)
{
    (void)ctx;
    struct worker_curl *wc = state;
    curl_multi_cleanup(wc->multi); /* closes the kept-alive connections */
    um_loop_timer_stop(wc->loop, &wc->timer);
    for (size_t i = 0; i < wc->num_pooled; i++)
        attempt_free(wc->pool[i]);
    while (wc->free_socks) {
        struct sock *s = wc->free_socks;
        wc->free_socks = s->next_free;
        free(s);
    }
    um_context_set(wc->ctx, &um__curl_slot, NULL);
    free(wc);
}

struct um_context_slot um__curl_slot = {.name = "curl multi handle", .stop = worker_curl_stop};

static struct worker_curl *worker_curl(struct um_context *ctx)
{
    struct worker_curl *wc = um_context_get(ctx, &um__curl_slot);
    if (wc) return wc;
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
    um_context_set(ctx, &um__curl_slot, wc);
    return wc;
}

/* ---------------------------------------------------------------- request */

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
        if (len >= 7 && strncasecmp(line, "accept:", 7) == 0) accept = true;
        char *dst = text + o;
        memcpy(dst, line, len);
        /* libcurl: "Name;" sends an empty field, "Name:" would remove one of its own. */
        if (len >= 2 && dst[len - 2] == ':' && dst[len - 1] == ' ') dst[--len - 1] = ';';
        dst[len] = '\0';
        o += len + 1;
        nodes[n] = (struct curl_slist){dst, NULL};
        if (n > 0) nodes[n - 1].next = &nodes[n];
        n++;
    }
    /* Keep libcurl from adding fields the client did not send. */
    static const char *const remove[] = {"Accept:", "Expect:"};
    for (size_t i = accept ? 1 : 0; i < UM_NELEMS(remove); i++) {
        char *dst = text + o;
        memcpy(dst, remove[i], 8);
        o += 8;
        nodes[n] = (struct curl_slist){dst, NULL};
        if (n > 0) nodes[n - 1].next = &nodes[n];
        n++;
    }
    UM_ASSERT(n <= cap && o <= size);
    return nodes;
}

static size_t on_read_body(char *buf, size_t size, size_t nitems, void *userp)
{
    struct attempt *a = userp;
    ssize_t n = um__up_read_body(a->x, buf, size * nitems);
    if (n == UM_AGAIN) return CURL_READFUNC_PAUSE;
    if (n < 0) return CURL_READFUNC_ABORT;
    return (size_t)n;
}

/* Opens the sockets libcurl connects with, to learn why one could not be made (curl keeps
 * no errno for a failed socket()). */
static curl_socket_t on_open_socket(void *userp, curlsocktype purpose, struct curl_sockaddr *sa)
{
    struct attempt *a = userp;
    (void)purpose;
    curl_socket_t fd = socket(sa->family, sa->socktype | SOCK_CLOEXEC, sa->protocol);
    if (fd == CURL_SOCKET_BAD) a->socket_errno = errno;
    return fd;
}

/* ---------------------------------------------------------------- response */

/* One line of the response head, with its line end; the empty line ends a head, which is
 * parsed then (an interim 1xx head is passed on, the final one goes to the sink). Lines
 * after the final head are trailers, dropped. Returns len, or 0 when the head is
 * malformed or too large (a->head_err says which). */
static size_t on_header(char *data, size_t size, size_t nitems, void *userp)
{
    struct attempt *a = userp;
    struct xfer *x = a->x;
    size_t len = size * nitems;
    if (x->head_sent) return len;
    if (a->head.len + len > MAX_RESPONSE_HEAD) {
        a->head_err = UM_UP_HEAD_TOO_LARGE;
        return 0;
    }
    um_buf_append(&a->head, data, len);
    if (!(len == 1 && data[0] == '\n') && !(len == 2 && data[0] == '\r' && data[1] == '\n'))
        return len;
    struct um_http1_resp_parser p;
    struct um_http1_response resp;
    enum um_http1_resp_err why = UM_HTTP1_RESP_MALFORMED;
    um_http1_resp_parser_init(&p);
    int rc = um_http1_parse_response(&p, a->head.base, a->head.len, MAX_RESPONSE_HEAD, &resp,
                                     &why);
    if (rc != UM_OK || resp.head_len != a->head.len) {
        /* UM_AGAIN too: an empty line that does not end the head follows a bare CR. */
        a->head_err =
            rc == UM_ERR && why == UM_HTTP1_RESP_TOO_LARGE ? UM_UP_HEAD_TOO_LARGE : UM_UP_BAD_HEAD;
        return 0;
    }
    if (resp.status >= 200)
        um__up_head(x, &resp);
    else
        um__up_info(x, &resp); /* interim: passed on, never the answer */
    um_buf_reset(&a->head);
    return len;
}

static size_t on_body(char *data, size_t size, size_t nitems, void *userp)
{
    struct attempt *a = userp;
    size_t len = size * nitems;
    if (!a->x->head_sent) return 0;
    if (um__up_body(a->x, data, len) == 0) return CURL_WRITEFUNC_PAUSE;
    if (!a->on_fed) {
        a->on_fed = true;
        a->next_fed = a->wc->fed;
        a->wc->fed = a;
    }
    return len;
}

/* libcurl returned after reading what the sockets had (what it left is read on the next
 * event): the bytes of the attempts it fed ran dry. Runs after check_done, so that a
 * finished answer gets its end rather than a flush first (released attempts have left
 * the list). */
static void fed_ran_dry(struct worker_curl *wc)
{
    while (wc->fed) {
        struct attempt *a = wc->fed;
        wc->fed = a->next_fed;
        a->on_fed = false;
        a->next_fed = NULL;
        um__up_ran_dry(a->x);
    }
}

/* What res means to the upstream; x->errbuf says it in libcurl's words (or ours, for what
 * our callbacks refused). */
static enum um_up_err result(struct attempt *a, CURLcode res)
{
    struct xfer *x = a->x;
    const char *why = a->err[0] ? a->err : curl_easy_strerror(res);
    enum um_up_err err;
    if (res == CURLE_OK) return UM_UP_OK;
    if (a->head_err != UM_UP_OK) {
        err = a->head_err;
        why = um__up_err_text(err);
    } else if (um__up_errno_local(a->socket_errno)) {
        err = UM_UP_LOCAL;
        why = strerror(a->socket_errno);
    } else {
        switch (res) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
            err = UM_UP_CONNECT;
            break;
        case CURLE_OPERATION_TIMEDOUT:
            /* The first-byte timeout is upstream.c's timer: before the head, this is the
             * connect timeout (or the low-speed limit, which comes as late). */
            err = x->head_sent ? UM_UP_TIMEOUT : UM_UP_CONNECT_TIMEOUT;
            break;
        case CURLE_SSL_CONNECT_ERROR:
            err = UM_UP_TLS;
            break;
        case CURLE_PEER_FAILED_VERIFICATION:
            err = UM_UP_TLS_VERIFY;
            break;
        case CURLE_SEND_ERROR:
            err = UM_UP_SEND;
            break;
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
            err = UM_UP_RECV;
            break;
        case CURLE_WEIRD_SERVER_REPLY:
            err = UM_UP_BAD_HEAD;
            break;
        case CURLE_PARTIAL_FILE:
            err = UM_UP_CUT_SHORT;
            break;
        case CURLE_BAD_CONTENT_ENCODING:
            err = UM_UP_BAD_BODY;
            break;
        case CURLE_ABORTED_BY_CALLBACK:
            err = UM_UP_ABORTED;
            break;
        case CURLE_OUT_OF_MEMORY:
            err = UM_UP_LOCAL;
            break;
        default:
            err = UM_UP_OTHER;
            break;
        }
    }
    snprintf(x->errbuf, sizeof(x->errbuf), "%s", why);
    return err;
}

static void check_done(struct worker_curl *wc)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(wc->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE) continue;
        struct attempt *a = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&a);
        um__up_finish(a->x, result(a, msg->data.result));
    }
}

/* ---------------------------------------------------------------- attempts */

/* A pooled attempt, or a new one with the options that never change. */
static struct attempt *attempt_get(struct worker_curl *wc)
{
    if (wc->num_pooled > 0) return wc->pool[--wc->num_pooled];
    struct attempt *a = um_calloc(1, sizeof(*a));
    a->wc = wc;
    a->easy = curl_easy_init();
    UM_ASSERT(a->easy != NULL);
    CURL *e = a->easy;
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read_body);
    curl_easy_setopt(e, CURLOPT_HTTP_CONTENT_DECODING, 0L);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 64L * 1024);
    curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 64L * 1024);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
    curl_easy_setopt(e, CURLOPT_PRIVATE, a);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(e, CURLOPT_READDATA, a);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, a);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, a->err);
    return a;
}

/* Sets up an easy handle for one attempt on x->server (or x->url) and adds it to the
 * worker's multi handle. */
static void curl_start(struct xfer *x)
{
    const struct um_upstream_conf *conf = x->up->conf;
    const struct um_upstream_server *srv = &conf->servers[x->server];
    const char *base = x->url ? x->url : srv->url;
    bool https = x->url ? strncmp(x->url, "https:", 6) == 0 : srv->https;
    struct worker_curl *wc = worker_curl(x->ctx);
    struct attempt *a = attempt_get(wc);
    a->x = x;
    um_buf_reset(&a->head);
    a->head_err = UM_UP_OK;
    a->socket_errno = 0;
    a->err[0] = '\0';
    a->headers = fields_to_slist(x);
    x->conn = a;
    CURL *e = a->easy;
    size_t blen = strlen(base), tlen = strlen(x->target), ulen = blen + tlen + 1;
    char stack[2048];
    char *url = ulen <= sizeof(stack) ? stack : um_malloc(ulen);
    memcpy(url, base, blen);
    memcpy(url + blen, x->target, tlen + 1);
    curl_easy_setopt(e, CURLOPT_URL, url);
    if (url != stack) free(url);
    /* What varies per fetch; HTTPGET first resets the method, upload and nobody. */
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, (char *)NULL);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, a->headers);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(conf->connect_timeout * 1000));
    /* A body that stalls for `timeout` seconds ends the transfer (the first byte has
     * upstream.c's timer). */
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
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)x->body_size);
    }
    CURLMcode mc = curl_multi_add_handle(wc->multi, e);
    UM_ASSERT(mc == CURLM_OK);
}

/* Removes the handle from the multi handle and puts the attempt back in the pool, with
 * its options (the next attempt sets what varies, which costs far less than
 * curl_easy_reset and setting all again). */
static void curl_release(struct xfer *x)
{
    struct attempt *a = x->conn;
    struct worker_curl *wc = a->wc;
    curl_multi_remove_handle(wc->multi, a->easy);
    x->conn = NULL;
    a->x = NULL;
    if (a->on_fed) {
        /* Off the list: the attempt may be reused for another fetch, or freed. */
        struct attempt **p = &wc->fed;
        while (*p != a)
            p = &(*p)->next_fed;
        *p = a->next_fed;
        a->on_fed = false;
        a->next_fed = NULL;
    }
    free(a->headers); /* fields_to_slist's single allocation */
    a->headers = NULL;
    if (a->head.cap > HBUF_KEEP) {
        um_buf_dispose(&a->head);
        um_buf_init(&a->head);
    }
    if (wc->num_pooled < POOL_MAX)
        wc->pool[wc->num_pooled++] = a;
    else
        attempt_free(a);
}

static void unpause(struct xfer *x)
{
    struct attempt *a = x->conn;
    int mask = (x->paused_recv ? CURLPAUSE_RECV : 0) | (x->paused_send ? CURLPAUSE_SEND : 0);
    curl_easy_pause(a->easy, mask);
    /* Unpausing hands over what libcurl kept, from inside the call. */
    fed_ran_dry(a->wc);
}

static void curl_global_init_all(void)
{
    UM_ASSERT(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK);
}

const struct um_up_transport um__up_curl = {
    .name = "libcurl",
    .start = curl_start,
    .release = curl_release,
    .resume = unpause,
    .body_ready = unpause,
    .global_init = curl_global_init_all,
    .global_cleanup = curl_global_cleanup,
};
