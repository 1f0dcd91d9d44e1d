/* umbra-test-origin: the scripted HTTP/1.1 origin that Umbra's integration tests and
 * benchmarks put behind the proxy.
 *
 * A response is described by the request itself (path and query), so a test needs no
 * control channel: `GET /x?status=404&size=1024&delay=200` waits 200 ms, then answers 404
 * with 1024 bytes of body. usage() lists every parameter. Two paths are special:
 * `/echo` answers with the raw request head and body it received, and `/__count` and
 * `/__stats` report the process's counters without being counted themselves.
 *
 * Each thread runs one non-blocking, level-triggered epoll loop with its own SO_REUSEPORT
 * listener. Connections are keep-alive and may pipeline. Delays and pauses are timers in a
 * per-thread binary heap; time is read once per loop turn. A connection writes at most
 * TURN_BUDGET bytes per turn so one fast reader cannot starve the others. Closed
 * connections are freed at the end of the turn, never while one of their events may still
 * be pending.
 *
 * The counters are shared between threads with relaxed atomics: this is a test tool, and
 * a test reads them while requests are in flight.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#define IN_CHUNK (64 * 1024)         /* bytes asked of one read */
#define HEAD_MAX (256 * 1024)        /* a longer request head is answered 431 */
#define IN_MAX (HEAD_MAX + IN_CHUNK) /* bytes of unparsed input a connection may hold */
#define BODY_PIECE (64 * 1024)       /* body bytes produced per write */
#define TURN_BUDGET (1024 * 1024)    /* bytes one connection may move per loop turn */
#define MAX_EVENTS 256
#define MAX_PARAM_HEADERS 64
#define DEFAULT_PIECE 16384 /* slow=: bytes per piece unless piece= says */
#define NO_TIMER SIZE_MAX

static const char PATTERN_UNIT[] = "0123456789abcdef";
/* The body pattern, long enough that any BODY_PIECE bytes at any offset are one memcpy. */
static char pattern[BODY_PIECE + 16];

static const char GARBAGE[] = "\x16\x03\x01garbage: this is not HTTP at all \x00\xff\r\n\r\n";

/* -- small helpers ----------------------------------------------------------------- */

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "umbra-test-origin: out of memory (%zu bytes)\n", n);
        abort();
    }
    return q;
}

/* A growable byte buffer. */
struct buf {
    char *base;
    size_t len, cap;
};

static void buf_reserve(struct buf *b, size_t extra)
{
    if (b->cap - b->len >= extra) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < extra)
        cap *= 2;
    b->base = xrealloc(b->base, cap);
    b->cap = cap;
}

static void buf_append(struct buf *b, const void *p, size_t n)
{
    buf_reserve(b, n);
    memcpy(b->base + b->len, p, n);
    b->len += n;
}

static void buf_appendf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_appendf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->base ? b->base + b->len : NULL, b->base ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= b->cap - b->len) {
        buf_reserve(b, (size_t)n + 1);
        va_start(ap, fmt);
        vsnprintf(b->base + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

static void buf_free(struct buf *b)
{
    free(b->base);
    b->base = NULL;
    b->len = b->cap = 0;
}

/* Parses a whole decimal string; false on anything else or overflow. */
static bool parse_u64(const char *s, uint64_t *out)
{
    if (*s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..n) into dst ('+' becomes a space, as in forms), NUL-terminates,
 * returns the decoded length. dst has room for n + 1 bytes. */
static size_t url_decode(char *dst, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '+') {
            dst[o++] = ' ';
        } else if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            dst[o++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        } else {
            dst[o++] = s[i];
        }
    }
    dst[o] = '\0';
    return o;
}

static bool token_eq(const char *p, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(p, lit, n) == 0;
}

/* True when the comma-separated list v[0..n) holds token (case-insensitive). */
static bool list_has(const char *v, size_t n, const char *token)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t start = i;
        while (i < n && v[i] != ',')
            i++;
        size_t end = i;
        while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
            end--;
        if (token_eq(v + start, end - start, token)) return true;
    }
    return false;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static const struct {
    int status;
    const char *text;
} REASONS[] = {
    {100, "Continue"},
    {200, "OK"},
    {201, "Created"},
    {202, "Accepted"},
    {203, "Non-Authoritative Information"},
    {204, "No Content"},
    {206, "Partial Content"},
    {300, "Multiple Choices"},
    {301, "Moved Permanently"},
    {302, "Found"},
    {303, "See Other"},
    {304, "Not Modified"},
    {307, "Temporary Redirect"},
    {308, "Permanent Redirect"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {408, "Request Timeout"},
    {409, "Conflict"},
    {410, "Gone"},
    {412, "Precondition Failed"},
    {413, "Content Too Large"},
    {414, "URI Too Long"},
    {416, "Range Not Satisfiable"},
    {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {502, "Bad Gateway"},
    {503, "Service Unavailable"},
    {504, "Gateway Timeout"},
};

static const char *reason_phrase(int status)
{
    for (size_t i = 0; i < sizeof REASONS / sizeof REASONS[0]; i++)
        if (REASONS[i].status == status) return REASONS[i].text;
    return "Status";
}

/* -- process-wide state ------------------------------------------------------------ */

static struct {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char host[64]; /* as printed in "listening on HOST:PORT" */
    int threads;
    const char *cert, *key, *record;
    const char *fail_file; /* --fail-file PATH: /healthz answers 503 while PATH exists */
} opt = {.threads = 1};

static SSL_CTX *ssl_ctx;   /* NULL: plain HTTP */
static int record_fd = -1; /* --record FILE, opened O_APPEND */
static unsigned port;      /* the bound port, for X-Origin-Port */

static atomic_uint_fast64_t n_requests; /* requests received (not /__ ones) */
static atomic_uint_fast64_t n_accepted; /* connections accepted */
static atomic_int_fast64_t n_open;      /* connections open now */
static atomic_int_fast64_t n_active;    /* requests whose response is not finished */
static atomic_uint_fast64_t n_aborted;  /* responses the peer left before they ended */

/* -- connections ------------------------------------------------------------------- */

enum cstate {
    CS_HEAD,  /* reading a request head */
    CS_BODY,  /* reading a request body */
    CS_WAIT,  /* delay=: the response starts when the timer fires */
    CS_STALL, /* stall=1: never answers */
    CS_SEND,  /* sending the response */
    CS_PAUSE, /* slow=: between two body pieces, the timer resumes sending */
};

enum { DROP_NONE, DROP_HEAD, DROP_BODY };
enum { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER };
enum { IO_AGAIN = -1, IO_ERR = -2 };

/* What the query asked for. Strings point into conn.qbuf and are NUL-terminated. */
struct params {
    int status;
    const char *reason;
    uint64_t delay, slow, piece, size, bighead;
    const char *body;
    size_t body_len;
    const char *ct, *cc;
    bool has_size, has_body, chunked, stall, garbage, endless, close, nolength, echo, echo_head;
    bool json;
    bool ranges;  /* ranges=1: a Range on a size= body is answered 206 (or 416) */
    bool posbody; /* posbody=1: the size= body tells its offsets (pos_fill) */
    const char *etagfile; /* etagfile=PATH: ETag from the file, read per request */
    int drop;
    size_t num_headers;
    const char *headers[MAX_PARAM_HEADERS];
    size_t header_lens[MAX_PARAM_HEADERS];
    /* Interim responses sent before the final one: their codes, and the fields each has. */
    size_t num_infos, num_info_headers;
    int infos[32];
    const char *info_headers[8];
    size_t info_header_lens[8];
};

struct worker;

struct conn {
    struct worker *w;
    int fd;
    SSL *ssl;
    bool handshaking, tls_want_read, tls_want_write;
    bool closed;
    bool healthz; /* the request is for /healthz (--fail-file) */
    enum cstate state;
    uint32_t events;          /* the epoll interest registered now */
    struct conn *prev, *next; /* the worker's live connections */
    struct conn *next_dead;   /* the worker's connections to free at the end of the turn */
    uint64_t due;             /* timer deadline, ms */
    size_t hidx;              /* index in the worker's timer heap, NO_TIMER when unset */

    /* Input: unparsed bytes are in.base[in_off .. in.len). */
    struct buf in;
    size_t in_off;
    size_t scan; /* bytes at in_off already searched for the end of a head */

    /* The request being read or answered. */
    struct buf head; /* copy of its head: request line and fields, up to the blank line */
    size_t method_len, target_off, target_len;
    bool req_close, req_is_head, req_chunked, echo, active;
    uint64_t body_left; /* Content-Length bytes still to read */
    int chunk_state;
    uint64_t chunk_left;
    uint64_t body_len; /* body bytes received (decoded) */
    uint64_t count;    /* n_requests after this request */
    EVP_MD_CTX *sha;   /* SHA-256 of the body, for /echo */
    struct buf lit;    /* a literal body built here: /echo, the default body, errors */
    struct buf qbuf;   /* decoded query values */
    struct params p;
    char range[64]; /* the request's Range value, NUL-terminated; empty: none */
    char version;   /* posbody's version letter (the ETag's first character) */

    /* The response. */
    struct buf out;
    size_t out_off;
    const char *body_src; /* literal body, or NULL for the pattern */
    uint64_t body_total;  /* UINT64_MAX: endless */
    uint64_t body_stop;   /* bytes after which the body ends (body_total unless drop=body) */
    uint64_t body_sent;
    uint64_t body_base; /* offset in the whole pattern body of byte 0 (a range's first) */
    uint64_t piece_left;
    bool resp_chunked, resp_close, resp_finished, need_pause;
};

struct worker {
    pthread_t thread;
    int ep, lfd, stopfd;
    uint64_t now;
    bool stop;
    struct conn *conns;
    struct conn *dead;
    struct conn **heap;
    size_t nheap, heap_cap;
    time_t date_sec;
    char date[64];
};

static void conn_run(struct conn *c);

/* -- timers: a binary min-heap of connections by deadline ---------------------------- */

static void heap_swap(struct worker *w, size_t i, size_t j)
{
    struct conn *t = w->heap[i];
    w->heap[i] = w->heap[j];
    w->heap[j] = t;
    w->heap[i]->hidx = i;
    w->heap[j]->hidx = j;
}

static void heap_up(struct worker *w, size_t i)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (w->heap[parent]->due <= w->heap[i]->due) break;
        heap_swap(w, i, parent);
        i = parent;
    }
}

static void heap_down(struct worker *w, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < w->nheap && w->heap[l]->due < w->heap[m]->due) m = l;
        if (r < w->nheap && w->heap[r]->due < w->heap[m]->due) m = r;
        if (m == i) return;
        heap_swap(w, i, m);
        i = m;
    }
}

static void timer_clear(struct conn *c)
{
    struct worker *w = c->w;
    if (c->hidx == NO_TIMER) return;
    size_t i = c->hidx, last = --w->nheap;
    if (i != last) {
        w->heap[i] = w->heap[last];
        w->heap[i]->hidx = i;
        heap_down(w, i);
        heap_up(w, i);
    }
    c->hidx = NO_TIMER;
}

static void timer_set(struct conn *c, uint64_t delay_ms)
{
    struct worker *w = c->w;
    timer_clear(c);
    if (w->nheap == w->heap_cap) {
        w->heap_cap = w->heap_cap ? 2 * w->heap_cap : 64;
        w->heap = xrealloc(w->heap, w->heap_cap * sizeof *w->heap);
    }
    c->due = w->now + delay_ms;
    c->hidx = w->nheap;
    w->heap[w->nheap++] = c;
    heap_up(w, c->hidx);
}

/* -- transport: plain sockets or TLS ---------------------------------------------------- */

/* Returns bytes read (> 0), 0 at EOF, IO_AGAIN or IO_ERR. */
static ssize_t tr_read(struct conn *c, char *p, size_t n)
{
    if (c->ssl) {
        size_t got;
        ERR_clear_error();
        if (SSL_read_ex(c->ssl, p, n, &got)) return (ssize_t)got;
        switch (SSL_get_error(c->ssl, 0)) {
        case SSL_ERROR_WANT_READ:
            c->tls_want_read = true;
            return IO_AGAIN;
        case SSL_ERROR_WANT_WRITE:
            c->tls_want_write = true;
            return IO_AGAIN;
        case SSL_ERROR_ZERO_RETURN:
            return 0;
        default:
            return IO_ERR;
        }
    }
    for (;;) {
        ssize_t r = recv(c->fd, p, n, 0);
        if (r >= 0) return r;
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? IO_AGAIN : IO_ERR;
    }
}

/* Returns bytes written (> 0), IO_AGAIN or IO_ERR. */
static ssize_t tr_write(struct conn *c, const char *p, size_t n)
{
    if (c->ssl) {
        size_t put;
        ERR_clear_error();
        if (SSL_write_ex(c->ssl, p, n, &put)) return (ssize_t)put;
        switch (SSL_get_error(c->ssl, 0)) {
        case SSL_ERROR_WANT_READ:
            c->tls_want_read = true;
            return IO_AGAIN;
        case SSL_ERROR_WANT_WRITE:
            c->tls_want_write = true;
            return IO_AGAIN;
        default:
            return IO_ERR;
        }
    }
    for (;;) {
        ssize_t r = send(c->fd, p, n, MSG_NOSIGNAL);
        if (r >= 0) return r;
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? IO_AGAIN : IO_ERR;
    }
}

/* -- connection lifecycle ------------------------------------------------------------ */

static void request_reset(struct conn *c)
{
    c->head.len = 0;
    c->method_len = c->target_off = c->target_len = 0;
    c->req_close = c->req_is_head = c->req_chunked = c->echo = c->active = false;
    c->body_left = c->chunk_left = c->body_len = 0;
    c->chunk_state = CH_SIZE;
    c->count = 0;
    /* A connection that once echoed 20 MB should not keep the buffer for the next 1 KB. */
    if (c->lit.cap > (1u << 20)) buf_free(&c->lit);
    c->lit.len = 0;
    c->qbuf.len = 0;
    memset(&c->p, 0, sizeof c->p);
    c->body_src = NULL;
    c->body_total = c->body_stop = c->body_sent = c->piece_left = c->body_base = 0;
    c->range[0] = '\0';
    c->version = 'a';
    c->resp_chunked = c->resp_close = c->resp_finished = c->need_pause = false;
    c->scan = 0;
    c->state = CS_HEAD;
}

/* Closes the connection now and frees it at the end of the turn. peer says the other side
 * went away (EOF, reset): a response still in progress then counts as aborted. */
static void conn_close(struct conn *c, bool peer)
{
    struct worker *w = c->w;
    if (c->closed) return;
    c->closed = true;
    if (c->active) {
        c->active = false;
        atomic_fetch_sub_explicit(&n_active, 1, memory_order_relaxed);
        if (peer) atomic_fetch_add_explicit(&n_aborted, 1, memory_order_relaxed);
    }
    timer_clear(c);
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
    if (!peer) {
        /* A deliberate close: tell TLS peers, then send FIN before close() so that bytes
         * still in flight are not replaced by a reset. */
        if (c->ssl && !c->handshaking) SSL_shutdown(c->ssl);
        shutdown(c->fd, SHUT_WR);
    }
    close(c->fd);
    c->fd = -1;
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->next_dead = w->dead;
    w->dead = c;
    atomic_fetch_sub_explicit(&n_open, 1, memory_order_relaxed);
}

static void conn_free(struct conn *c)
{
    if (c->ssl) SSL_free(c->ssl);
    EVP_MD_CTX_free(c->sha);
    buf_free(&c->in);
    buf_free(&c->head);
    buf_free(&c->lit);
    buf_free(&c->qbuf);
    buf_free(&c->out);
    free(c);
}

static void update_interest(struct conn *c)
{
    if (c->closed) return;
    uint32_t ev = 0;
    if (c->in.len - c->in_off < IN_MAX || c->tls_want_read) ev |= EPOLLIN;
    if (c->out_off < c->out.len || c->state == CS_SEND || c->tls_want_write) ev |= EPOLLOUT;
    if (ev != c->events) {
        struct epoll_event e = {.events = ev, .data.ptr = c};
        epoll_ctl(c->w->ep, EPOLL_CTL_MOD, c->fd, &e);
        c->events = ev;
    }
}

static void accept_all(struct worker *w)
{
    for (;;) {
        int fd = accept4(w->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                fprintf(stderr, "umbra-test-origin: accept: %s\n", strerror(errno));
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->w = w;
        c->fd = fd;
        c->hidx = NO_TIMER;
        request_reset(c);
        if (ssl_ctx) {
            c->ssl = SSL_new(ssl_ctx);
            if (!c->ssl || !SSL_set_fd(c->ssl, fd)) {
                SSL_free(c->ssl);
                close(fd);
                free(c);
                continue;
            }
            SSL_set_accept_state(c->ssl);
            c->handshaking = true;
        }
        c->events = EPOLLIN;
        struct epoll_event e = {.events = c->events, .data.ptr = c};
        if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &e) < 0) {
            SSL_free(c->ssl);
            close(fd);
            free(c);
            continue;
        }
        c->next = w->conns;
        if (w->conns) w->conns->prev = c;
        w->conns = c;
        atomic_fetch_add_explicit(&n_accepted, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&n_open, 1, memory_order_relaxed);
    }
}

/* -- the query: what the response should be ------------------------------------------ */

static void parse_params(struct conn *c)
{
    struct params *p = &c->p;
    const char *target = c->head.base + c->target_off;
    const char *q = memchr(target, '?', c->target_len);
    p->status = 200;
    p->piece = DEFAULT_PIECE;
    if (!q) return;
    q++;
    size_t qlen = (size_t)(target + c->target_len - q);
    /* Every value is decoded into qbuf, reserved once so the pointers stay valid. */
    c->qbuf.len = 0;
    buf_reserve(&c->qbuf, 2 * qlen + 2);
    size_t i = 0;
    while (i < qlen) {
        size_t start = i;
        while (i < qlen && q[i] != '&')
            i++;
        const char *kv = q + start;
        size_t kvlen = i - start;
        i++;
        const char *eq = memchr(kv, '=', kvlen);
        size_t klen = eq ? (size_t)(eq - kv) : kvlen;
        const char *raw = eq ? eq + 1 : kv + kvlen;
        char *v = c->qbuf.base + c->qbuf.len;
        size_t vlen = url_decode(v, raw, (size_t)(kv + kvlen - raw));
        c->qbuf.len += vlen + 1;
        uint64_t n = 0;
        bool num = parse_u64(v, &n);
        bool on = num ? n != 0 : vlen > 0;

        if (token_eq(kv, klen, "status") && num && n >= 100 && n <= 999)
            p->status = (int)n;
        else if (token_eq(kv, klen, "reason"))
            p->reason = v;
        else if (token_eq(kv, klen, "delay") && num)
            p->delay = n;
        else if (token_eq(kv, klen, "size") && num)
            p->size = n, p->has_size = true;
        else if (token_eq(kv, klen, "body"))
            p->body = v, p->body_len = vlen, p->has_body = true;
        else if (token_eq(kv, klen, "chunked"))
            p->chunked = on;
        else if (token_eq(kv, klen, "json"))
            p->json = on;
        else if (token_eq(kv, klen, "ranges"))
            p->ranges = on;
        else if (token_eq(kv, klen, "posbody"))
            p->posbody = on;
        else if (token_eq(kv, klen, "etagfile"))
            p->etagfile = v;
        else if (token_eq(kv, klen, "info") && num && n >= 100 && n <= 199 && p->num_infos < 32)
            p->infos[p->num_infos++] = (int)n;
        else if (token_eq(kv, klen, "infoh") && p->num_info_headers < 8) {
            p->info_headers[p->num_info_headers] = v;
            p->info_header_lens[p->num_info_headers++] = vlen;
        } else if (token_eq(kv, klen, "header") && p->num_headers < MAX_PARAM_HEADERS) {
            p->headers[p->num_headers] = v;
            p->header_lens[p->num_headers++] = vlen;
        } else if (token_eq(kv, klen, "cc"))
            p->cc = v;
        else if (token_eq(kv, klen, "ct"))
            p->ct = v;
        else if (token_eq(kv, klen, "drop"))
            p->drop = strcmp(v, "head") == 0   ? DROP_HEAD
                      : strcmp(v, "body") == 0 ? DROP_BODY
                                               : DROP_NONE;
        else if (token_eq(kv, klen, "stall"))
            p->stall = on;
        else if (token_eq(kv, klen, "slow") && num)
            p->slow = n;
        else if (token_eq(kv, klen, "piece") && num && n > 0)
            p->piece = n;
        else if (token_eq(kv, klen, "endless"))
            p->endless = on;
        else if (token_eq(kv, klen, "bighead") && num)
            p->bighead = n;
        else if (token_eq(kv, klen, "garbage"))
            p->garbage = on;
        else if (token_eq(kv, klen, "close"))
            p->close = on;
        else if (token_eq(kv, klen, "nolength"))
            p->nolength = on;
        else if (token_eq(kv, klen, "echo")) {
            p->echo = on;
            p->echo_head = strcmp(v, "head") == 0;
        }
        /* Anything else is the test's own business (cache busters, odd bytes). */
    }
}

/* -- responses --------------------------------------------------------------------- */

static const char *http_date(struct worker *w)
{
    time_t t = time(NULL);
    if (t != w->date_sec) {
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(w->date, sizeof w->date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        w->date_sec = t;
    }
    return w->date;
}

/* A JSON array of made-up user records, built once: a body that compresses the way an
 * API's answers do (about 5:1 with gzip), unlike the pattern. json_ends[i] is the offset
 * just past record i. */
#define JSON_MAX (4u << 20)
static char *json_doc;
static size_t *json_ends, json_count;

static void json_build(void)
{
    static const char *const words[] = {
        "alpha", "bravo", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "iris",
        "juniper", "kestrel", "lumen", "maple", "nectar", "onyx", "pollen", "quartz", "raven",
        "sierra", "tundra", "umber", "violet", "willow", "xenon", "yarrow", "zephyr", "amber",
        "basalt", "cobalt", "dune", "echo", "flint"};
    enum { NW = sizeof words / sizeof words[0] };
    json_doc = malloc(JSON_MAX + 1024);
    json_ends = malloc(sizeof(size_t) * (JSON_MAX / 64));
    if (json_doc == NULL || json_ends == NULL) abort();
    uint64_t x = 88172645463325252ull; /* xorshift64: the same document every run */
#define NEXT() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
    size_t len = 0;
    json_doc[len++] = '[';
    for (unsigned id = 1; len < JSON_MAX; id++) {
        if (id > 1) json_doc[len++] = ',';
        unsigned a = (unsigned)(NEXT() % NW), b = (unsigned)(NEXT() % NW);
        unsigned t1 = (unsigned)(NEXT() % NW), t2 = (unsigned)(NEXT() % NW);
        uint64_t r = NEXT();
        len += (size_t)snprintf(
            json_doc + len, 1024,
            "{\"id\":%u,\"name\":\"%s %s\",\"email\":\"%s.%s%u@example.com\",\"active\":%s,"
            "\"score\":%u.%03u,\"visits\":%u,\"tags\":[\"%s\",\"%s\"],"
            "\"created\":\"2026-%02u-%02uT%02u:%02u:%02uZ\"}",
            id, words[a], words[b], words[a], words[b], (unsigned)(r % 1000),
            (r >> 10) & 1 ? "true" : "false", (unsigned)(r >> 11) % 100,
            (unsigned)(r >> 18) % 1000, (unsigned)(r >> 28) % 100000, words[t1], words[t2],
            1 + (unsigned)(r >> 45) % 12, 1 + (unsigned)(r >> 49) % 28,
            (unsigned)(r >> 54) % 24, (unsigned)(r >> 32) % 60, (unsigned)(r >> 38) % 60);
        json_ends[json_count++] = len;
    }
#undef NEXT
}

/* Into out: a valid JSON array of exactly n bytes (at least 2, at most JSON_MAX): the
 * records that fit, spaces, then the closing bracket. */
static void json_body(struct buf *out, uint64_t n)
{
    if (n < 2) n = 2;
    if (n > JSON_MAX) n = JSON_MAX;
    size_t keep = 1; /* "[" */
    for (size_t i = 0; i < json_count && json_ends[i] + 1 <= n; i++)
        keep = json_ends[i];
    out->len = 0;
    buf_reserve(out, (size_t)n);
    memcpy(out->base, json_doc, keep);
    memset(out->base + keep, ' ', (size_t)n - keep - 1);
    out->base[n - 1] = ']';
    out->len = (size_t)n;
}

/* The first range of a Range value ("bytes=A-B", "bytes=A-", "bytes=-N") on a body of
 * size bytes: its first byte and length. false when it cannot be satisfied (or is not
 * understood: then the whole body would be the answer, but a test origin may be strict). */
static bool range_pick(const char *v, uint64_t size, uint64_t *first, uint64_t *len)
{
    if (strncmp(v, "bytes=", 6) != 0) return false;
    v += 6;
    char *end;
    if (*v == '-') {
        if (!isdigit((unsigned char)v[1])) return false;
        uint64_t n = strtoull(v + 1, &end, 10);
        if (n == 0 || size == 0) return false;
        if (n > size) n = size;
        *first = size - n;
        *len = n;
        return true;
    }
    if (!isdigit((unsigned char)*v)) return false;
    uint64_t a = strtoull(v, &end, 10), b = UINT64_MAX;
    if (*end != '-') return false;
    if (isdigit((unsigned char)end[1])) b = strtoull(end + 1, &end, 10);
    if (a >= size || b < a) return false;
    if (b >= size) b = size - 1;
    *first = a;
    *len = b - a + 1;
    return true;
}

/* posbody's bytes [off, off+n): 16-byte records, record r being the version letter, r in
 * 14 hex digits and a newline, so that any byte shows where (and of which version) it is. */
static void pos_fill(char *dst, uint64_t off, size_t n, char version)
{
    static const char hex[] = "0123456789abcdef";
    while (n > 0) {
        uint64_t r = off / 16;
        char rec[16];
        rec[0] = version;
        for (int i = 14; i >= 1; i--, r >>= 4)
            rec[i] = hex[r & 15];
        rec[15] = '\n';
        size_t k = 16 - (size_t)(off % 16);
        if (k > n) k = n;
        memcpy(dst, rec + off % 16, k);
        dst += k;
        off += k;
        n -= k;
    }
}

/* etagfile=PATH: the file's first line is the ETag (quoted when sent) and its first
 * character posbody's version letter, so a test changes both by rewriting the file. */
static void etag_read(struct conn *c, char *etag, size_t cap)
{
    etag[0] = '\0';
    int fd = open(c->p.etagfile, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, etag, cap - 1);
    close(fd);
    if (n <= 0) {
        etag[0] = '\0';
        return;
    }
    etag[n] = '\0';
    etag[strcspn(etag, "\r\n\"")] = '\0';
    if (etag[0]) c->version = etag[0];
}

/* Builds the head from c->p and sets up the body; the state becomes CS_SEND. */
static void start_response(struct conn *c)
{
    struct params *p = &c->p;
    struct buf *o = &c->out;
    c->state = CS_SEND;
    if (p->garbage) {
        buf_append(o, GARBAGE, sizeof GARBAGE - 1);
        c->resp_close = c->resp_finished = true;
        return;
    }
    int status = p->status;
    /* --fail-file PATH: a test turns this origin's health check answers to 503 by
     * creating the file (one file per origin, while servers share the probe's path). */
    if (opt.fail_file && c->healthz && access(opt.fail_file, F_OK) == 0) status = 503;
    bool bodyless = status < 200 || status == 204 || status == 304;
    const char *ct = "text/plain";
    char etag[64] = "";
    bool unsatisfiable = false;

    if (c->echo) {
        /* lit already holds the head and the body as received. */
        c->body_src = c->lit.base;
        c->body_total = p->echo_head ? c->head.len : c->lit.len;
        ct = "application/octet-stream";
    } else if (p->has_body) {
        c->body_src = p->body;
        c->body_total = p->body_len;
    } else if (p->has_size && p->json) {
        json_body(&c->lit, p->size);
        c->body_src = c->lit.base;
        c->body_total = c->lit.len;
        ct = "application/json";
    } else if (p->has_size) {
        c->body_src = NULL;
        c->body_total = p->size;
        ct = "application/octet-stream";
        c->version = 'a';
        if (p->etagfile) etag_read(c, etag, sizeof etag);
        if (p->ranges && c->range[0] && status == 200 &&
            !range_pick(c->range, p->size, &c->body_base, &c->body_total)) {
            status = 416;
            c->body_total = 0;
            unsatisfiable = true;
        } else if (p->ranges && c->range[0] && status == 200) {
            status = 206;
        }
    } else {
        /* The default body names the request, so a test can tell whose answer it got. */
        c->lit.len = 0;
        buf_append(&c->lit, c->head.base + c->target_off, c->target_len);
        buf_append(&c->lit, "\n", 1);
        c->body_src = c->lit.base;
        c->body_total = c->lit.len;
    }
    if (p->endless) {
        /* An endless body is always the pattern: a literal one would run out. */
        c->body_src = NULL;
        c->body_total = UINT64_MAX;
        ct = "application/octet-stream";
    }
    c->resp_chunked = p->chunked || p->endless;
    c->body_stop = p->drop == DROP_BODY && !p->endless ? c->body_total / 2 : c->body_total;
    c->resp_close = c->req_close || p->close || p->drop == DROP_BODY ||
                    (p->nolength && !c->resp_chunked && !bodyless);
    c->resp_finished = c->req_is_head || bodyless;
    c->piece_left = p->piece;

    for (size_t i = 0; i < p->num_infos; i++) {
        buf_appendf(o, "HTTP/1.1 %d %s\r\n", p->infos[i], reason_phrase(p->infos[i]));
        for (size_t j = 0; j < p->num_info_headers; j++) {
            buf_append(o, p->info_headers[j], p->info_header_lens[j]);
            buf_append(o, "\r\n", 2);
        }
        buf_append(o, "\r\n", 2);
    }
    buf_appendf(o, "HTTP/1.1 %d %s\r\n", status, p->reason ? p->reason : reason_phrase(status));
    buf_appendf(o,
                "Date: %s\r\nServer: umbra-test-origin\r\nX-Origin-Port: %u\r\n"
                "X-Origin-Count: %" PRIuFAST64 "\r\n",
                http_date(c->w), port,
                c->count ? (uint_fast64_t)c->count
                         : atomic_load_explicit(&n_requests, memory_order_relaxed));
    if (!bodyless && !(p->ct && !*p->ct))
        buf_appendf(o, "Content-Type: %s\r\n", p->ct ? p->ct : ct);
    if (p->cc) buf_appendf(o, "Cache-Control: %s\r\n", p->cc);
    if (etag[0]) buf_appendf(o, "ETag: \"%s\"\r\n", etag);
    if (p->ranges && p->has_size) buf_appendf(o, "Accept-Ranges: bytes\r\n");
    if (status == 206)
        buf_appendf(o, "Content-Range: bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64 "\r\n",
                    c->body_base, c->body_base + c->body_total - 1, p->size);
    else if (unsatisfiable)
        buf_appendf(o, "Content-Range: bytes */%" PRIu64 "\r\n", p->size);
    for (size_t i = 0; i < p->num_headers; i++) {
        const char *h = p->headers[i];
        size_t n = p->header_lens[i];
        const char *colon = memchr(h, ':', n);
        if (colon) {
            const char *v = colon + 1;
            while (v < h + n && *v == ' ')
                v++;
            buf_append(o, h, (size_t)(colon - h));
            buf_append(o, ": ", 2);
            buf_append(o, v, (size_t)(h + n - v));
        } else {
            buf_append(o, h, n);
        }
        buf_append(o, "\r\n", 2);
    }
    /* bighead=N: about N bytes of filler fields, at most 4000 bytes each. */
    for (uint64_t added = 0, i = 0; added < p->bighead; i++) {
        uint64_t left = p->bighead - added;
        size_t vlen = left > 4000 + 17 ? 4000 : left > 17 ? (size_t)(left - 17) : 1;
        buf_appendf(o, "X-Big-%06" PRIu64 ": ", i % 1000000);
        buf_reserve(o, vlen + 2);
        memset(o->base + o->len, 'b', vlen);
        o->len += vlen;
        buf_append(o, "\r\n", 2);
        added += 17 + vlen;
    }
    if (c->echo) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned mdlen = 0;
        EVP_DigestFinal_ex(c->sha, md, &mdlen);
        buf_appendf(o,
                    "X-Echo-Head-Length: %zu\r\nX-Echo-Body-Length: %" PRIu64 "\r\n"
                    "X-Echo-Body-Sha256: ",
                    c->head.len, c->body_len);
        for (unsigned i = 0; i < mdlen; i++)
            buf_appendf(o, "%02x", md[i]);
        buf_append(o, "\r\n", 2);
    }
    if (!bodyless) {
        if (c->resp_chunked)
            buf_appendf(o, "Transfer-Encoding: chunked\r\n");
        else if (!p->nolength)
            buf_appendf(o, "Content-Length: %" PRIu64 "\r\n", c->body_total);
    }
    if (c->resp_close) buf_appendf(o, "Connection: close\r\n");
    buf_append(o, "\r\n", 2);
}

/* A response of our own (400, 431, the /__ paths): literal body, never counted. */
static void respond_simple(struct conn *c, int status, const char *body, size_t len,
                           bool close_after)
{
    memset(&c->p, 0, sizeof c->p);
    c->p.status = status;
    c->p.piece = DEFAULT_PIECE;
    c->p.has_body = true;
    c->lit.len = 0;
    buf_append(&c->lit, body, len);
    c->p.body = c->lit.base;
    c->p.body_len = len;
    c->echo = false;
    if (close_after) c->req_close = true;
    start_response(c);
}

/* Called when the timer fires or the request is complete and has no delay. */
static void respond(struct conn *c)
{
    if (c->p.stall) {
        c->state = CS_STALL;
        return;
    }
    if (c->p.drop == DROP_HEAD) {
        conn_close(c, false);
        return;
    }
    start_response(c);
}

/* Appends the next part of the body to out. Returns false when there is nothing to send
 * now: the body is finished (resp_finished) or a slow= pause started. */
static bool produce(struct conn *c)
{
    if (c->resp_finished) return false;
    if (c->need_pause) {
        c->need_pause = false;
        c->state = CS_PAUSE;
        timer_set(c, c->p.slow);
        return false;
    }
    uint64_t left = c->body_stop - c->body_sent;
    if (left == 0) {
        c->resp_finished = true;
        if (c->resp_chunked && c->body_stop == c->body_total) {
            buf_append(&c->out, "0\r\n\r\n", 5);
            return true;
        }
        return false;
    }
    size_t n = left < BODY_PIECE ? (size_t)left : BODY_PIECE;
    if (c->p.slow && n > c->piece_left) n = (size_t)c->piece_left;
    if (c->resp_chunked) buf_appendf(&c->out, "%zx\r\n", n);
    buf_reserve(&c->out, n + 2);
    if (c->body_src)
        memcpy(c->out.base + c->out.len, c->body_src + c->body_sent, n);
    else if (c->p.posbody)
        pos_fill(c->out.base + c->out.len, c->body_base + c->body_sent, n, c->version);
    else
        memcpy(c->out.base + c->out.len, pattern + (c->body_base + c->body_sent) % 16, n);
    c->out.len += n;
    if (c->resp_chunked) buf_append(&c->out, "\r\n", 2);
    c->body_sent += n;
    if (c->p.slow) {
        c->piece_left -= n;
        if (c->piece_left == 0) {
            c->piece_left = c->p.piece;
            c->need_pause = c->body_sent < c->body_stop;
        }
    }
    return true;
}

static void response_done(struct conn *c)
{
    if (c->active) {
        c->active = false;
        atomic_fetch_sub_explicit(&n_active, 1, memory_order_relaxed);
    }
    if (c->resp_close) {
        conn_close(c, false);
        return;
    }
    request_reset(c);
}

/* Writes what out holds and, while sending, produces more. Returns whether anything moved. */
static bool send_some(struct conn *c, size_t *budget)
{
    bool progress = false;
    for (;;) {
        size_t pending = c->out.len - c->out_off;
        if (c->out_off > 0) {
            memmove(c->out.base, c->out.base + c->out_off, pending);
            c->out.len = pending;
            c->out_off = 0;
        }
        /* Top up before writing, so that the head and the first body bytes (or the last
         * bytes and the chunked terminator) leave in one segment. */
        if (c->state == CS_SEND && pending < BODY_PIECE) produce(c);
        if (c->out.len == 0) {
            if (c->state == CS_SEND && c->resp_finished) {
                response_done(c);
                progress = true;
            }
            break;
        }
        if (*budget == 0) break;
        size_t n = c->out.len - c->out_off;
        if (n > *budget) n = *budget;
        ssize_t r = tr_write(c, c->out.base + c->out_off, n);
        if (r == IO_AGAIN) break;
        if (r < 0) {
            conn_close(c, true);
            return false;
        }
        c->out_off += (size_t)r;
        *budget -= (size_t)r;
        progress = true;
    }
    return progress;
}

/* -- requests ---------------------------------------------------------------------- */

static void record_request(struct conn *c)
{
    if (record_fd < 0) return;
    struct buf line = {0};
    buf_append(&line, c->head.base, c->method_len);
    buf_append(&line, " ", 1);
    buf_append(&line, c->head.base + c->target_off, c->target_len);
    buf_appendf(&line, " %" PRIu64, c->body_len);
    if (c->range[0]) buf_appendf(&line, " range=%s", c->range);
    buf_append(&line, "\n", 1);
    /* One write() per line on an O_APPEND file: lines from several threads never mix. */
    if (write(record_fd, line.base, line.len) < 0)
        fprintf(stderr, "umbra-test-origin: --record: %s\n", strerror(errno));
    buf_free(&line);
}

static bool path_is(const char *target, size_t n, const char *path)
{
    size_t pl = strlen(path);
    return n >= pl && memcmp(target, path, pl) == 0 && (n == pl || target[pl] == '?');
}

/* The request (head and body) has arrived. */
static void handle_request(struct conn *c)
{
    const char *target = c->head.base + c->target_off;
    size_t tlen = c->target_len;
    char text[256];
    if (path_is(target, tlen, "/__count")) {
        int n = snprintf(text, sizeof text, "%" PRIuFAST64 "\n",
                         atomic_load_explicit(&n_requests, memory_order_relaxed));
        respond_simple(c, 200, text, (size_t)n, false);
        return;
    }
    if (path_is(target, tlen, "/__stats")) {
        int n = snprintf(text, sizeof text,
                         "requests %" PRIuFAST64 "\naccepted %" PRIuFAST64 "\nopen %" PRIdFAST64
                         "\nactive %" PRIdFAST64 "\naborted %" PRIuFAST64 "\n",
                         atomic_load_explicit(&n_requests, memory_order_relaxed),
                         atomic_load_explicit(&n_accepted, memory_order_relaxed),
                         atomic_load_explicit(&n_open, memory_order_relaxed),
                         atomic_load_explicit(&n_active, memory_order_relaxed),
                         atomic_load_explicit(&n_aborted, memory_order_relaxed));
        respond_simple(c, 200, text, (size_t)n, false);
        return;
    }
    c->healthz = path_is(target, tlen, "/healthz");
    c->count = atomic_fetch_add_explicit(&n_requests, 1, memory_order_relaxed) + 1;
    c->active = true;
    atomic_fetch_add_explicit(&n_active, 1, memory_order_relaxed);
    record_request(c);
    if (c->p.delay) {
        c->state = CS_WAIT;
        timer_set(c, c->p.delay);
        return;
    }
    respond(c);
}

static void fail_request(struct conn *c, int status)
{
    char text[64];
    int n = snprintf(text, sizeof text, "%d %s\n", status, reason_phrase(status));
    respond_simple(c, status, text, (size_t)n, true);
}

/* Consumes body bytes; /echo keeps them and hashes them. */
static void take_body(struct conn *c, const char *p, size_t n)
{
    c->body_len += n;
    if (c->echo) {
        if (!c->p.echo_head) buf_append(&c->lit, p, n);
        EVP_DigestUpdate(c->sha, p, n);
    }
}

/* Parses a head at in_off. Returns true when it consumed one (or failed the request). */
static bool parse_head(struct conn *c)
{
    if (c->in.base == NULL)
        return false; /* nothing read yet (NULL + 0 is undefined behaviour) */
    char *base = c->in.base + c->in_off;
    size_t avail = c->in.len - c->in_off;
    /* Empty lines before a request line are allowed (RFC 9112, 2.2). */
    size_t skip = 0;
    while (skip < avail && (base[skip] == '\r' || base[skip] == '\n') && c->scan == 0)
        skip++;
    if (skip) {
        c->in_off += skip;
        return true;
    }
    size_t from = c->scan > 3 ? c->scan - 3 : 0;
    char *end = avail >= 4 ? memmem(base + from, avail - from, "\r\n\r\n", 4) : NULL;
    if (!end) {
        c->scan = avail;
        if (avail > HEAD_MAX) fail_request(c, 431);
        return avail > HEAD_MAX;
    }
    size_t head_len = (size_t)(end - base) + 4;
    c->head.len = 0;
    buf_append(&c->head, base, head_len);
    c->in_off += head_len;
    c->scan = 0;
    if (c->in_off == c->in.len) c->in_off = c->in.len = 0;

    /* Request line: METHOD SP TARGET SP HTTP/1.x */
    char *h = c->head.base;
    char *eol = memmem(h, head_len, "\r\n", 2);
    char *sp1 = memchr(h, ' ', (size_t)(eol - h));
    char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
    if (!sp1 || !sp2 || sp1 == h || sp2 == sp1 + 1 || eol - sp2 - 1 != 8 ||
        memcmp(sp2 + 1, "HTTP/1.", 7) != 0 || (sp2[8] != '0' && sp2[8] != '1')) {
        fail_request(c, 400);
        return true;
    }
    c->method_len = (size_t)(sp1 - h);
    c->target_off = (size_t)(sp1 + 1 - h);
    c->target_len = (size_t)(sp2 - sp1 - 1);
    bool http10 = sp2[8] == '0';
    bool keep_alive = false, has_length = false, has_te = false;
    uint64_t length = 0;

    for (char *line = eol + 2; line < h + head_len - 2;) {
        char *le = memmem(line, (size_t)(h + head_len - line), "\r\n", 2);
        char *colon = memchr(line, ':', (size_t)(le - line));
        if (!colon || colon == line) {
            fail_request(c, 400);
            return true;
        }
        size_t nlen = (size_t)(colon - line);
        char *v = colon + 1, *ve = le;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        size_t vlen = (size_t)(ve - v);
        if (token_eq(line, nlen, "content-length")) {
            char num[32];
            uint64_t n;
            if (vlen == 0 || vlen >= sizeof num) {
                fail_request(c, 400);
                return true;
            }
            memcpy(num, v, vlen);
            num[vlen] = '\0';
            if (!parse_u64(num, &n) || (has_length && n != length)) {
                fail_request(c, 400);
                return true;
            }
            length = n;
            has_length = true;
        } else if (token_eq(line, nlen, "transfer-encoding")) {
            has_te = true;
            c->req_chunked = vlen >= 7 && strncasecmp(ve - 7, "chunked", 7) == 0;
        } else if (token_eq(line, nlen, "connection")) {
            if (list_has(v, vlen, "close")) c->req_close = true;
            if (list_has(v, vlen, "keep-alive")) keep_alive = true;
        } else if (token_eq(line, nlen, "range")) {
            size_t n = vlen < sizeof c->range - 1 ? vlen : sizeof c->range - 1;
            memcpy(c->range, v, n);
            c->range[n] = '\0';
        } else if (token_eq(line, nlen, "expect")) {
            if (token_eq(v, vlen, "100-continue") && !http10)
                buf_append(&c->out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
        }
        line = le + 2;
    }
    if (http10 && !keep_alive) c->req_close = true;
    if (has_te && !c->req_chunked) {
        fail_request(c, 400);
        return true;
    }
    c->req_is_head = token_eq(h, c->method_len, "HEAD");
    const char *target = h + c->target_off;
    /* The query is parsed now: /echo and echo= must keep the body as it arrives. */
    parse_params(c);
    c->echo = c->p.echo || path_is(target, c->target_len, "/echo") ||
              (c->target_len > 6 && memcmp(target, "/echo/", 6) == 0);
    if (c->echo) {
        if (!c->sha) c->sha = EVP_MD_CTX_new();
        EVP_DigestInit_ex(c->sha, EVP_sha256(), NULL);
        c->lit.len = 0;
        buf_append(&c->lit, c->head.base, c->head.len);
    }
    if (c->req_chunked) {
        c->chunk_state = CH_SIZE;
        c->state = CS_BODY;
    } else if (length > 0) {
        c->body_left = length;
        c->state = CS_BODY;
    } else {
        handle_request(c);
    }
    return true;
}

/* Consumes body bytes at in_off. Returns true when it consumed any or the body ended. */
static bool parse_body(struct conn *c)
{
    bool progress = false;
    while (c->state == CS_BODY && !c->closed) {
        char *p = c->in.base + c->in_off;
        size_t avail = c->in.len - c->in_off;
        if (!c->req_chunked) {
            size_t n = avail < c->body_left ? avail : (size_t)c->body_left;
            if (n == 0) break;
            take_body(c, p, n);
            c->in_off += n;
            c->body_left -= n;
            progress = true;
            if (c->body_left == 0) handle_request(c);
            continue;
        }
        if (c->chunk_state == CH_DATA) {
            size_t n = avail < c->chunk_left ? avail : (size_t)c->chunk_left;
            if (n == 0) break;
            take_body(c, p, n);
            c->in_off += n;
            c->chunk_left -= n;
            if (c->chunk_left == 0) c->chunk_state = CH_DATA_END;
            progress = true;
            continue;
        }
        if (c->chunk_state == CH_DATA_END) {
            if (avail < 2) break;
            if (p[0] != '\r' || p[1] != '\n') {
                fail_request(c, 400);
                return true;
            }
            c->in_off += 2;
            c->chunk_state = CH_SIZE;
            progress = true;
            continue;
        }
        /* CH_SIZE and CH_TRAILER read one line. */
        char *le = memmem(p, avail, "\r\n", 2);
        if (!le) {
            if (avail > 8192) fail_request(c, 400);
            return progress || avail > 8192;
        }
        size_t llen = (size_t)(le - p);
        c->in_off += llen + 2;
        progress = true;
        if (c->chunk_state == CH_TRAILER) {
            if (llen == 0) handle_request(c);
            continue;
        }
        uint64_t size = 0;
        size_t i = 0;
        for (; i < llen && hexval(p[i]) >= 0; i++) {
            if (size >> 60) {
                fail_request(c, 400);
                return true;
            }
            size = size * 16 + (uint64_t)hexval(p[i]);
        }
        if (i == 0 || (i < llen && p[i] != ';' && p[i] != ' ' && p[i] != '\t')) {
            fail_request(c, 400);
            return true;
        }
        if (size == 0) {
            c->chunk_state = CH_TRAILER;
        } else {
            c->chunk_left = size;
            c->chunk_state = CH_DATA;
        }
    }
    return progress;
}

static bool parse_input(struct conn *c)
{
    bool progress = false;
    while (!c->closed && (c->state == CS_HEAD || c->state == CS_BODY)) {
        bool step = c->state == CS_HEAD ? parse_head(c) : parse_body(c);
        if (!step) break;
        progress = true;
    }
    if (c->in_off == c->in.len) c->in_off = c->in.len = 0;
    return progress;
}

/* Reads once into the input buffer. Returns whether bytes arrived. */
static bool read_some(struct conn *c, size_t *budget)
{
    size_t buffered = c->in.len - c->in_off;
    if (buffered >= IN_MAX || (!c->ssl && *budget == 0)) return false;
    if (c->in_off > 0 && c->in.cap - c->in.len < IN_CHUNK) {
        memmove(c->in.base, c->in.base + c->in_off, buffered);
        c->in.len = buffered;
        c->in_off = 0;
    }
    size_t want = IN_MAX - buffered < IN_CHUNK ? IN_MAX - buffered : IN_CHUNK;
    buf_reserve(&c->in, want);
    ssize_t r = tr_read(c, c->in.base + c->in.len, want);
    if (r == IO_AGAIN) return false;
    if (r <= 0) {
        conn_close(c, true);
        return false;
    }
    c->in.len += (size_t)r;
    *budget = (size_t)r > *budget ? 0 : *budget - (size_t)r;
    return true;
}

/* Advances the connection as far as it goes without blocking, then sets its interest. */
static void conn_run(struct conn *c)
{
    size_t wbudget = TURN_BUDGET, rbudget = TURN_BUDGET;
    if (c->closed) return;
    c->tls_want_read = c->tls_want_write = false;
    if (c->handshaking) {
        ERR_clear_error();
        int r = SSL_do_handshake(c->ssl);
        if (r != 1) {
            int e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_WANT_READ)
                c->tls_want_read = true;
            else if (e == SSL_ERROR_WANT_WRITE)
                c->tls_want_write = true;
            else
                conn_close(c, true);
            update_interest(c);
            return;
        }
        c->handshaking = false;
    }
    for (;;) {
        bool progress = false;
        if (c->state == CS_HEAD || c->state == CS_BODY) progress |= parse_input(c);
        if (!c->closed) progress |= send_some(c, &wbudget);
        if (!c->closed) progress |= read_some(c, &rbudget);
        if (c->closed) return;
        /* Out of budget, the level-triggered events bring us back next turn; but bytes
         * TLS has already decrypted raise no event, so those are read now. */
        if (!progress || (wbudget == 0 && rbudget == 0 && !(c->ssl && SSL_pending(c->ssl)))) break;
    }
    update_interest(c);
}

static void on_timer(struct conn *c)
{
    if (c->state == CS_WAIT)
        respond(c);
    else if (c->state == CS_PAUSE)
        c->state = CS_SEND;
    conn_run(c);
}

/* -- workers ----------------------------------------------------------------------- */

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct epoll_event evs[MAX_EVENTS];
    w->now = now_ms();
    while (!w->stop) {
        int timeout = -1;
        if (w->nheap) timeout = w->heap[0]->due <= w->now ? 0 : (int)(w->heap[0]->due - w->now);
        int n = epoll_wait(w->ep, evs, MAX_EVENTS, timeout);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "umbra-test-origin: epoll_wait: %s\n", strerror(errno));
            break;
        }
        w->now = now_ms();
        for (int i = 0; i < n; i++) {
            void *ptr = evs[i].data.ptr;
            if (ptr == w)
                accept_all(w);
            else if (ptr == &w->stopfd)
                w->stop = true;
            else
                conn_run(ptr);
        }
        while (w->nheap && w->heap[0]->due <= w->now) {
            struct conn *c = w->heap[0];
            timer_clear(c);
            on_timer(c);
        }
        while (w->dead) {
            struct conn *c = w->dead;
            w->dead = c->next_dead;
            conn_free(c);
        }
    }
    while (w->conns)
        conn_close(w->conns, false);
    while (w->dead) {
        struct conn *c = w->dead;
        w->dead = c->next_dead;
        conn_free(c);
    }
    return NULL;
}

static int listen_socket(unsigned want_port, bool reuseport)
{
    struct sockaddr_storage ss = opt.addr;
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)want_port);
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)want_port);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, opt.addrlen) < 0 || listen(fd, 4096) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* -- start-up ---------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fputs("usage: umbra-test-origin [-l HOST:PORT] [-t THREADS] [--tls CERT KEY] [--record FILE]\n"
          "                         [--fail-file PATH]\n"
          "\n"
          "Listens on HOST:PORT (default 127.0.0.1:0, an ephemeral port), prints\n"
          "\"listening on HOST:PORT\" once ready, stops on SIGTERM or SIGINT.\n"
          "\n"
          "The query of each request says how to answer (values are percent-decoded, '+' is\n"
          "a space; numbers are decimal):\n"
          "  status=N        status code (default 200)       reason=TEXT  reason phrase\n"
          "  delay=MS        wait before answering           size=N       N bytes of body,\n"
          "                                                  \"0123456789abcdef\" repeated\n"
          "  json=1          with size=N: a JSON array of N bytes (made-up records that\n"
          "                  compress about as an API's answers do), application/json\n"
          "  body=TEXT       literal body (default: the request target and a newline)\n"
          "  chunked=1       Transfer-Encoding: chunked      nolength=1   close-delimited body\n"
          "  header=N:V      extra response field (repeatable, in order)\n"
          "  info=N          an interim response N (1xx) before the final one (repeatable)\n"
          "  infoh=N:V       a field of every interim response (repeatable)\n"
          "  cc=V            Cache-Control: V                ct=V         Content-Type (empty: "
          "none)\n"
          "  drop=head       close without answering\n"
          "  drop=body       send the head and half the body, then close\n"
          "  stall=1         never answer (keep the connection open)\n"
          "  slow=MS         pause MS between body pieces    piece=N      bytes per piece (16384)\n"
          "  endless=1       a chunked body that never ends\n"
          "  bighead=N       about N bytes of extra response fields\n"
          "  garbage=1       answer with bytes that are not HTTP, then close\n"
          "  ranges=1        with size=N: a Range (one range) is answered 206, or 416\n"
          "  posbody=1       with size=N: 16-byte records \"<v><14 hex: record number>\\n\"\n"
          "                  (v: the version letter, 'a' or the ETag's first character)\n"
          "  etagfile=PATH   ETag: the first line of PATH, read for each request\n"

          "  close=1         Connection: close, then close\n"
          "Paths:\n"
          "  /echo[/...]     body = the request head as received + the request body\n"
          "                  (echo=head: the head only; echo=1 does the same on any path);\n"
          "                  X-Echo-Head-Length, X-Echo-Body-Length, X-Echo-Body-Sha256\n"
          "  /__count        requests received so far (not counted itself)\n"
          "  /__stats        requests, accepted, open, active and aborted counters\n"
          "  /healthz[?...]  with --fail-file PATH: status 503 while PATH exists (checked\n"
          "                  for each request); else like any path\n"
          "Every response carries X-Origin-Port and X-Origin-Count. --record FILE appends\n"
          "\"METHOD TARGET BODY-LENGTH\" for each request received (then \" range=VALUE\"\n"
          "when it had a Range).\n",
          f);
}

static bool parse_listen(const char *s)
{
    const char *colon = strrchr(s, ':');
    uint64_t p;
    if (!colon || !parse_u64(colon + 1, &p) || p > 65535) return false;
    size_t hlen = (size_t)(colon - s);
    if (hlen >= sizeof opt.host) return false;
    memcpy(opt.host, s, hlen);
    opt.host[hlen] = '\0';
    char host[64];
    const char *h = opt.host;
    if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
        memcpy(host, s + 1, hlen - 2);
        host[hlen - 2] = '\0';
        h = host;
    }
    memset(&opt.addr, 0, sizeof opt.addr);
    struct sockaddr_in *sin = (struct sockaddr_in *)&opt.addr;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&opt.addr;
    if (inet_pton(AF_INET, h, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)p);
        opt.addrlen = sizeof *sin;
    } else if (inet_pton(AF_INET6, h, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)p);
        opt.addrlen = sizeof *sin6;
    } else {
        return false;
    }
    port = (unsigned)p;
    return true;
}

static void ssl_fail(const char *what)
{
    fprintf(stderr, "umbra-test-origin: %s\n", what);
    ERR_print_errors_fp(stderr);
    exit(1);
}

int main(int argc, char **argv)
{
    parse_listen("127.0.0.1:0");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-l") == 0 && i + 1 < argc) {
            if (!parse_listen(argv[++i])) {
                fprintf(stderr, "umbra-test-origin: bad address %s\n", argv[i]);
                return 2;
            }
        } else if (strcmp(a, "-t") == 0 && i + 1 < argc) {
            uint64_t n;
            if (!parse_u64(argv[++i], &n) || n < 1 || n > 256) {
                fprintf(stderr, "umbra-test-origin: bad thread count %s\n", argv[i]);
                return 2;
            }
            opt.threads = (int)n;
        } else if (strcmp(a, "--tls") == 0 && i + 2 < argc) {
            opt.cert = argv[++i];
            opt.key = argv[++i];
        } else if (strcmp(a, "--record") == 0 && i + 1 < argc) {
            opt.record = argv[++i];
        } else if (strcmp(a, "--fail-file") == 0 && i + 1 < argc) {
            opt.fail_file = argv[++i];
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }

    for (size_t i = 0; i < sizeof pattern; i++)
        pattern[i] = PATTERN_UNIT[i % 16];
    json_build();

    /* Benchmarks hold thousands of connections. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);

    if (opt.cert) {
        ssl_ctx = SSL_CTX_new(TLS_server_method());
        if (!ssl_ctx) ssl_fail("SSL_CTX_new failed");
        if (SSL_CTX_use_certificate_chain_file(ssl_ctx, opt.cert) != 1)
            ssl_fail("cannot load the certificate");
        if (SSL_CTX_use_PrivateKey_file(ssl_ctx, opt.key, SSL_FILETYPE_PEM) != 1)
            ssl_fail("cannot load the private key");
        SSL_CTX_set_mode(ssl_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                      SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                                      SSL_MODE_RELEASE_BUFFERS);
        SSL_CTX_set_options(ssl_ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    }
    if (opt.record) {
        record_fd = open(opt.record, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (record_fd < 0) {
            fprintf(stderr, "umbra-test-origin: %s: %s\n", opt.record, strerror(errno));
            return 1;
        }
    }

    /* Workers inherit this mask; only the main thread takes the signals, in sigwait(). */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    struct worker *workers = calloc((size_t)opt.threads, sizeof *workers);
    if (!workers) return 1;
    int started = 0, status = 0;
    for (int i = 0; i < opt.threads; i++) {
        struct worker *w = &workers[i];
        w->lfd = listen_socket(port, opt.threads > 1);
        if (w->lfd < 0) {
            fprintf(stderr, "umbra-test-origin: listen on %s:%u: %s\n", opt.host, port,
                    strerror(errno));
            status = 1;
            break;
        }
        if (i == 0) {
            struct sockaddr_storage ss;
            socklen_t len = sizeof ss;
            getsockname(w->lfd, (struct sockaddr *)&ss, &len);
            port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                                 : ((struct sockaddr_in6 *)&ss)->sin6_port);
        }
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        w->stopfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        struct epoll_event le = {.events = EPOLLIN, .data.ptr = w};
        struct epoll_event se = {.events = EPOLLIN, .data.ptr = &w->stopfd};
        if (w->ep < 0 || w->stopfd < 0 || epoll_ctl(w->ep, EPOLL_CTL_ADD, w->lfd, &le) < 0 ||
            epoll_ctl(w->ep, EPOLL_CTL_ADD, w->stopfd, &se) < 0 ||
            pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            fprintf(stderr, "umbra-test-origin: cannot start worker %d\n", i);
            if (w->ep >= 0) close(w->ep);
            if (w->stopfd >= 0) close(w->stopfd);
            close(w->lfd);
            status = 1;
            break;
        }
        started++;
    }

    if (status == 0) {
        printf("listening on %s:%u\n", opt.host, port);
        fflush(stdout);
        int sig;
        sigwait(&sigs, &sig);
    }

    for (int i = 0; i < started; i++) {
        uint64_t one = 1;
        if (write(workers[i].stopfd, &one, sizeof one) < 0)
            fprintf(stderr, "umbra-test-origin: cannot stop worker %d\n", i);
    }
    for (int i = 0; i < started; i++) {
        struct worker *w = &workers[i];
        pthread_join(w->thread, NULL);
        close(w->ep);
        close(w->stopfd);
        close(w->lfd);
        free(w->heap);
    }
    free(workers);
    if (ssl_ctx) SSL_CTX_free(ssl_ctx);
    if (record_fd >= 0) close(record_fd);
    return status;
}
