/* SPDX-License-Identifier: BSD-2-Clause */
/* HTTP/2 on a client connection (RFC 9113), with nghttp2's server session driven from the
 * worker's loop through its memory-buffer interface: the bytes conn.c reads are fed to
 * nghttp2_session_mem_recv, and the frames nghttp2_session_mem_send makes are appended to
 * the connection's output queue, which conn.c writes as it does for HTTP/1.1. Nothing here
 * touches the socket.
 *
 * One connection carries many streams; each stream embeds an exchange (exchange.h) and is
 * its connection side: the router, the hooks, the cache and the origins see the exchange
 * only, as over HTTP/1.1.
 *
 * Re-entrancy. nghttp2's callbacks only record what happened (a header, body bytes, the
 * end of a head, a closed stream); the exchanges are begun, fed, resumed, cancelled and
 * freed afterwards, in run_streams(), outside the frame parser and outside mem_send. So an
 * origin answering at once, or a stream reset by the client while its origin runs, never
 * re-enters nghttp2.
 *
 * Backpressure. A response's bytes wait in their stream's buffer until nghttp2 asks for
 * them (read_data), which it does only while the stream's and the connection's windows
 * are open; a buffer past STREAM_BUF_MAX refuses the origin's next send (the origin waits,
 * as for a slow HTTP/1.1 client) and the origin is resumed once the buffer is below
 * STREAM_BUF_LOW. An empty buffer defers the stream (NGHTTP2_ERR_DEFERRED) until the
 * origin sends again. Frames are pulled from nghttp2 only while the output queue holds
 * less than OUT_SOFT_MAX, and the socket is not read while it holds more. A request body
 * is granted window (nghttp2_session_consume) only as its exchange reads it, so a stream
 * buffers at most its window of body bytes.
 *
 * Copies. A response body is copied once on its way to the socket's queue: read_data
 * only says how much the next DATA frame carries (NGHTTP2_DATA_FLAG_NO_COPY), and
 * send_data_frame writes the frame header and those bytes straight from where they wait
 * (the cache's chunks, still borrowed; the stream's copy of what an origin handed over
 * with send_data; the file, read in place) into the output queue, where TLS encrypts
 * them. nghttp2 never holds body bytes. (On a plain socket the borrowed chunks could go
 * out by writev without even that copy; the output queue would need to interleave its
 * own bytes with borrowed ones for that, which it does not.)
 *
 * Memory. Streams come from a per-worker pool (um__h2_stream_size bytes each), and are
 * cleared without their field tables, which are filled only as far as their counts say.
 *
 * Abuse. Streams beyond max_concurrent_streams are refused by nghttp2; RST_STREAM frames
 * from the client spend a token bucket (rapid reset), CONTINUATION frames of one head are
 * counted, header lists are capped (431), SETTINGS and PING ACKs waiting for a client that
 * does not read are bounded with nghttp2's options, and frames that do no work (PING,
 * SETTINGS, PRIORITY, empty DATA, invalid frames) spend a second token bucket, whether or
 * not the client reads. Each of these ends with GOAWAY ENHANCE_YOUR_CALM. HEADERS on a
 * stream id the client skipped is a PROTOCOL_ERROR, found by the same scan of frame
 * headers that counts CONTINUATION frames, before nghttp2 (which ignores it) sees it.
 *
 * Shutdown (reload, stop). A GOAWAY with the last stream id 2^31-1 and a PING; the GOAWAY
 * with the real last id only after the PING's ACK (or the header timeout), so the streams
 * the client sent before it read the first GOAWAY are served (section 6.8). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "conn.h"
#include "umbra/log.h"
#include "umbra/metrics.h"

#define STREAM_BUF_MAX (64 * 1024)  /* response bytes a stream buffers before refusing */
#define STREAM_BUF_LOW (16 * 1024)  /* ...and below which its origin goes on */
#define OUT_SOFT_MAX (256 * 1024)   /* output queue bytes past which frames wait */
#define MAX_CONTINUATIONS 8         /* CONTINUATION frames after one HEADERS (8 x 16 KiB
                                       frames hold any head under max_header_list's 64 KiB
                                       default) */
#define RST_BURST 200               /* client resets allowed at once... */
#define RST_PER_SEC 50              /* ...and replenished per second */
#define GLITCH_BURST 1000           /* frames that do no work allowed at once... */
#define GLITCH_PER_SEC 100          /* ...and replenished per second */
#define MAX_OUTBOUND_ACK 1000       /* SETTINGS/PING acks queued before GOAWAY */
#define MAX_SETTINGS 32             /* entries in one SETTINGS frame */
#define MAX_GAPS 8                  /* ranges of skipped stream ids remembered */
/* The PING that follows a shutdown notice; its ACK says that the client has read the
 * notice, so that every stream it opened before it has arrived (RFC 9113 section 6.8). */
static const uint8_t SHUTDOWN_PING[8] = {'u', 'm', '-', 'd', 'r', 'a', 'i', 'n'};

struct h2_field {
    uint32_t name_off, name_len, value_off, value_len;
};

/* A piece of a response body waiting for nghttp2 to frame it: a borrowed slice (release
 * not NULL: the cache's bytes, released once sent) or, release NULL, the next len bytes of
 * the stream's copy buffer (out). */
struct h2_seg {
    const char *p;
    size_t len;
    void (*release)(void *ctx);
    void *ctx;
};
#define MAX_SEGS 16 /* per stream; the last slot is kept for copied bytes */

struct h2_stream {
    struct um__h2 *h2;
    int32_t id;
    struct h2_stream *prev, *next; /* the connection's streams */

    /* The request head as it arrives: names and values in hbuf, by offset (hbuf may
     * move), turned into x.req once complete. */
    struct um_buf hbuf;
    size_t num_fields;
    struct h2_field method, path, scheme, authority; /* name_len unused */
    bool has_method, has_path, has_scheme, has_authority;
    size_t head_bytes;     /* counted as SETTINGS_MAX_HEADER_LIST_SIZE counts */
    bool too_large;        /* past max_header_list or UM_HTTP1_MAX_HEADERS: 431 */
    bool head_done;        /* END_HEADERS came */
    bool started;          /* the exchange has begun */
    bool body_first;       /* routed; the body is discarded, then dispatched */
    bool discard_body;     /* nobody reads the body: grant its window at once */

    /* The request body: body[bpos..len) not read yet. */
    struct um_buf body;
    size_t bpos;
    bool body_eof;       /* END_STREAM came */
    uint64_t body_seen;

    /* The response body: the segments segs[seg_head..num_segs) (ref_bytes borrowed, the
     * copied ones at out[opos..len)), then file_left bytes of file_fd at file_off. nghttp2
     * frames them without copying (NGHTTP2_DATA_FLAG_NO_COPY): send_data_frame copies
     * each frame's bytes once, from where they are into the output queue. */
    bool submitted;      /* the head went to nghttp2 */
    struct um_buf out;
    size_t opos;
    struct h2_seg segs[MAX_SEGS];
    unsigned seg_head, num_segs;
    size_t ref_bytes;
    int file_fd;
    uint64_t file_off, file_left;
    bool out_end, out_abort;
    bool deferred;       /* read_data said NGHTTP2_ERR_DEFERRED */

    bool closed;         /* nghttp2 is done with it */

    /* Last, so that a stream taken from the worker's pool is cleared without them: the
     * fields of the head (num_fields of them are set) and the exchange (whose request
     * header table is filled as far as num_headers says). */
    struct h2_field fields[UM_HTTP1_MAX_HEADERS];
    struct um__exchange x;
};

struct um__h2 {
    struct um__conn *c;
    nghttp2_session *session;
    struct h2_stream *streams;
    size_t num_streams;
    uint64_t total_streams;
    bool failed;          /* a connection error: GOAWAY queued, no more input */
    bool goaway;          /* a graceful shutdown began (drain, reload): notice and PING */
    bool goaway_final;    /* ...and the GOAWAY with the last stream id was submitted */
    bool head_timer;      /* the header timer runs for an unfinished head */
    /* Rapid reset: tokens left and when they were last replenished (loop ms). */
    double rst_tokens;
    uint64_t rst_at;
    /* Frames that cost work and ask for none (PING, SETTINGS, PRIORITY, empty DATA, invalid
     * frames): the same kind of bucket. */
    double glitch_tokens;
    uint64_t glitch_at;
    /* The frame boundaries in what the client sends, tracked before nghttp2 sees it:
     * the bytes of the frame being skipped, a partial frame header, and the count of
     * CONTINUATION frames in a row. */
    size_t scan_skip;
    uint8_t scan_hdr[9];
    size_t scan_hdr_len;
    unsigned num_cont;
    /* The stream ids the client skipped (section 5.1.1: the first use of an id closes
     * the idle streams below it), as ranges [lo, hi], the last MAX_GAPS of them, and the
     * highest id a HEADERS frame carried. nghttp2 cannot tell a skipped id from one that
     * was used and closed, and ignores HEADERS on either. */
    uint32_t gaps[MAX_GAPS][2];
    unsigned num_gaps;
    uint32_t max_id;
};

const size_t um__h2_stream_size = sizeof(struct h2_stream);

static inline struct h2_stream *stream_of(struct um__exchange *x)
{
    return (struct h2_stream *)(void *)((char *)x - offsetof(struct h2_stream, x));
}

static size_t out_buffered(const struct h2_stream *s)
{
    return s->out.len - s->opos + s->ref_bytes + (size_t)s->file_left;
}

/* Releases the borrowed segments not sent (the stream is reset or freed). */
static void segs_drop(struct h2_stream *s)
{
    for (unsigned i = s->seg_head; i < s->num_segs; i++)
        if (s->segs[i].release)
            s->segs[i].release(s->segs[i].ctx);
    s->seg_head = s->num_segs = 0;
    s->ref_bytes = 0;
    s->opos = 0;
    um_buf_reset(&s->out);
}

/* Ends the connection with a GOAWAY carrying err (once). */
static void fail(struct um__h2 *h, uint32_t err, const char *why)
{
    if (h->failed)
        return;
    h->failed = true;
    um_log_info("http2: %s:%d: %s, closing", h->c->peer_ip, h->c->peer_port, why);
    nghttp2_session_terminate_session(h->session, err);
}

/* ---------------------------------------------------------------- the exchange's sends */

static void wake(struct h2_stream *s)
{
    if (s->deferred && !s->closed) {
        s->deferred = false;
        nghttp2_session_resume_data(s->h2->session, s->id);
    }
    um__conn_wake(s->h2->c);
}

/* Connection-specific fields never cross to HTTP/2 (RFC 9113 section 8.2.2). */
static bool hop_by_hop(um_str n)
{
    switch (n.len) {
    case 2: return um_str_eq_ci(n, "te");
    case 7: return um_str_eq_ci(n, "upgrade");
    case 10: return um_str_eq_ci(n, "connection") || um_str_eq_ci(n, "keep-alive");
    case 16: return um_str_eq_ci(n, "proxy-connection");
    case 17: return um_str_eq_ci(n, "transfer-encoding");
    default: return false;
    }
}

/* The name in lower case (section 8.2.1): name itself when it is, else a copy in
 * scratch[*used..] (or, past its room, in the arena). One pass: the copy is made as the
 * name is read, and forgotten when it had no upper-case letter. */
static const char *lower_name(um_str name, char *scratch, size_t room, size_t *used,
                              struct um_arena *arena)
{
    char *out = room - *used >= name.len ? scratch + *used : um_arena_alloc(arena, name.len);
    unsigned upper = 0;
    for (size_t k = 0; k < name.len; k++) {
        unsigned char ch = (unsigned char)name.base[k];
        unsigned is = (unsigned)(ch - 'A') <= 'Z' - 'A';
        upper |= is;
        out[k] = (char)(ch | (is << 5));
    }
    if (!upper)
        return name.base;
    if (out == scratch + *used)
        *used += name.len;
    return out;
}

/* nghttp2 asks what the next DATA frame of a stream carries: up to length bytes of what
 * is buffered, framed by send_data_frame (no copy into nghttp2's buffer). */
static ssize_t read_data(nghttp2_session *session, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *user)
{
    (void)session;
    (void)id;
    (void)buf;
    (void)user;
    struct h2_stream *s = src->ptr;
    size_t avail = out_buffered(s);
    size_t n = avail < length ? avail : length;
    if (n == avail) {
        if (s->out_abort && n == 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM: not whole */
        if (s->out_end && !s->out_abort) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
        } else if (n == 0) {
            s->deferred = true;
            return NGHTTP2_ERR_DEFERRED;
        }
    }
    /* Every byte goes through send_data_frame (what is buffered is sent before a reset). */
    if (n > 0)
        *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    return (ssize_t)n;
}

/* Writes a DATA frame: its header (from nghttp2), then length bytes of the stream's
 * segments and file, copied once, into the output queue. */
static int send_data_frame(nghttp2_session *session, nghttp2_frame *frame,
                           const uint8_t *framehd, size_t length, nghttp2_data_source *src,
                           void *user)
{
    (void)session;
    struct um__h2 *h = user;
    struct h2_stream *s = src->ptr;
    struct um__outq *q = &h->c->out;
    size_t pad = frame->data.padlen;
    um__outq_reserve(q, 9 + pad + length);
    size_t start = q->buf.len;
    um_buf_append(&q->buf, framehd, 9);
    if (pad > 0)
        um_buf_append(&q->buf, (uint8_t[]){(uint8_t)(pad - 1)}, 1);
    size_t left = length;
    while (left > 0 && s->seg_head < s->num_segs) {
        struct h2_seg *g = &s->segs[s->seg_head];
        size_t k = g->len < left ? g->len : left;
        if (g->release) {
            um_buf_append(&q->buf, g->p, k);
            g->p += k;
            s->ref_bytes -= k;
        } else {
            um_buf_append(&q->buf, s->out.base + s->opos, k);
            s->opos += k;
            if (s->opos == s->out.len) {
                s->opos = 0;
                um_buf_reset(&s->out);
            }
        }
        g->len -= k;
        left -= k;
        if (g->len == 0) {
            if (g->release)
                g->release(g->ctx);
            if (++s->seg_head == s->num_segs)
                s->seg_head = s->num_segs = 0;
        }
    }
    if (left > 0) {
        /* The file's bytes, read straight into the queue. */
        ssize_t r = left <= s->file_left
                        ? pread(s->file_fd, q->buf.base + q->buf.len, left, (off_t)s->file_off)
                        : -1;
        if (r != (ssize_t)left) {
            um_log_err("http2: reading a response file: %s", r < 0 ? strerror(errno) : "it shrank");
            q->buf.len = start; /* no partial frame */
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM: not whole */
        }
        um_buf_commit(&q->buf, left);
        s->file_off += left;
        s->file_left -= left;
    }
    if (pad > 1) {
        memset(q->buf.base + q->buf.len, 0, pad - 1);
        um_buf_commit(&q->buf, pad - 1);
    }
    /* Enough for this turn: the rest when the queue drained (h2_on_drained). */
    if (um__outq_backlog(q) >= OUT_SOFT_MAX)
        return NGHTTP2_ERR_PAUSE;
    return 0;
}

static void send_head(struct um__exchange *x, const struct um_response_head *h)
{
    struct h2_stream *s = stream_of(x);
    struct um__conn *c = s->h2->c;
    if (s->closed)
        return; /* the client reset it; run_streams cancels the origin */
    nghttp2_nv nva[UM_HTTP1_MAX_RESPONSE_FIELDS + 8];
    size_t n = 0;
    char status[4] = {(char)('0' + h->status / 100 % 10), (char)('0' + h->status / 10 % 10),
                      (char)('0' + h->status % 10), 0};
#define NV(nm, nl, vl, vll)                                                                   \
    nva[n++] = (nghttp2_nv){(uint8_t *)(nm), (uint8_t *)(vl), (nl), (vll), NGHTTP2_NV_FLAG_NONE}
    NV(":status", 7, status, 3);
    bool has_date = false;
    for (size_t i = 0; i < h->num_headers && !has_date; i++)
        has_date = h->headers[i].name.len == 4 && um_str_eq_ci(h->headers[i].name, "date");
    if (!has_date)
        NV("date", 4, um__worker_date(c->w), UM_HTTP_DATE_LEN);
    NV("server", 6, "umbra/" UMBRA_VERSION, sizeof("umbra/" UMBRA_VERSION) - 1);
    size_t bytes = 0;
    char scratch[2048]; /* lower-case names; nghttp2 copies them before we return */
    size_t used = 0;
    for (size_t i = 0; i < h->num_headers && n < UM_NELEMS(nva) - 2; i++) {
        const struct um_header *f = &h->headers[i];
        if (f->name.len == 0 || hop_by_hop(f->name))
            continue;
        const char *name = lower_name(f->name, scratch, sizeof(scratch), &used, &x->arena);
        NV(name, f->name.len, f->value.base, f->value.len);
        bytes += f->name.len + f->value.len + 32;
    }
    char cl[24];
    bool bodiless = h->status == 304 || h->status == 204 || h->status < 200;
    if (!bodiless && h->content_length >= 0)
        NV("content-length", 14, cl,
           (size_t)(um_u64_dec(cl, (uint64_t)h->content_length) - cl));
#undef NV
    x->resp_bytes += bytes + 64; /* an estimate: HPACK decides the real size */
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = read_data};
    int rv = nghttp2_submit_response(s->h2->session, s->id, nva, n, &prd);
    if (rv != 0)
        um_log_err("http2: stream %d: cannot submit the response: %s", s->id,
                   nghttp2_strerror(rv));
    s->submitted = true;
    um__conn_wake(c);
}

/* Copies len bytes to the stream's copy buffer, as a segment (the last one grows). */
static void seg_copy(struct h2_stream *s, const char *data, size_t len)
{
    um_buf_append(&s->out, data, len);
    if (s->num_segs > s->seg_head && s->segs[s->num_segs - 1].release == NULL) {
        s->segs[s->num_segs - 1].len += len;
        return;
    }
    UM_ASSERT(s->num_segs < MAX_SEGS); /* borrowed ones leave the last slot free */
    s->segs[s->num_segs++] = (struct h2_seg){NULL, len, NULL, NULL};
}

static size_t send_data(struct um__exchange *x, const char *data, size_t len, bool may_refuse)
{
    struct h2_stream *s = stream_of(x);
    if (s->closed)
        return len; /* the client reset it: the bytes go nowhere */
    if (may_refuse && out_buffered(s) > STREAM_BUF_MAX)
        return 0;
    seg_copy(s, data, len);
    wake(s);
    return len;
}

static size_t send_ref(struct um__exchange *x, const char *data, size_t len,
                       void (*release)(void *ctx), void *ctx, bool may_refuse)
{
    struct h2_stream *s = stream_of(x);
    if (s->closed) {
        release(ctx);
        return len;
    }
    if (may_refuse && out_buffered(s) > STREAM_BUF_MAX)
        return 0;
    if (s->num_segs + 1 >= MAX_SEGS && s->seg_head > 0) {
        /* The sent ones leave room at the front. */
        memmove(s->segs, s->segs + s->seg_head, (s->num_segs - s->seg_head) * sizeof(s->segs[0]));
        s->num_segs -= s->seg_head;
        s->seg_head = 0;
    }
    if (s->num_segs + 1 < MAX_SEGS) {
        /* Kept as it is until its frames are written (send_data_frame). */
        s->segs[s->num_segs++] = (struct h2_seg){data, len, release, ctx};
        s->ref_bytes += len;
    } else {
        seg_copy(s, data, len);
        release(ctx);
    }
    wake(s);
    return len;
}

static void send_file(struct um__exchange *x, int fd, uint64_t off, uint64_t len)
{
    struct h2_stream *s = stream_of(x);
    if (s->file_fd >= 0 || s->closed) {
        /* One file per response; a second one cannot follow the first's bytes. */
        close(fd);
        if (!s->closed)
            s->out_abort = true;
        wake(s);
        return;
    }
    s->file_fd = fd;
    s->file_off = off;
    s->file_left = len;
    wake(s);
}

/* Body bytes nobody will read: drop them and give their window back. */
static void body_discard(struct h2_stream *s)
{
    size_t n = s->body.len - s->bpos;
    s->discard_body = true;
    if (n > 0 && !s->closed)
        nghttp2_session_consume(s->h2->session, s->id, n);
    s->bpos = 0;
    um_buf_reset(&s->body);
}

static void end(struct um__exchange *x)
{
    struct h2_stream *s = stream_of(x);
    s->out_end = true;
    body_discard(s);
    wake(s);
}

static void abort_response(struct um__exchange *x)
{
    struct h2_stream *s = stream_of(x);
    s->out_abort = true;
    body_discard(s);
    wake(s);
}

static ssize_t read_body(struct um__exchange *x, char *buf, size_t len)
{
    struct h2_stream *s = stream_of(x);
    if (x->body_error)
        return UM_ERR;
    size_t avail = s->body.len - s->bpos;
    if (avail > 0) {
        size_t n = avail < len ? avail : len;
        memcpy(buf, s->body.base + s->bpos, n);
        s->bpos += n;
        if (s->bpos == s->body.len) {
            s->bpos = 0;
            um_buf_reset(&s->body);
        }
        if (!s->closed)
            nghttp2_session_consume(s->h2->session, s->id, n); /* WINDOW_UPDATE */
        um__conn_wake(s->h2->c);
        return (ssize_t)n;
    }
    if (s->body_eof)
        return 0;
    if (s->closed) {
        x->body_error = 400; /* reset before its body ended */
        return UM_ERR;
    }
    return UM_AGAIN;
}

/* An interim response (1xx, RFC 9113 8.1): a HEADERS frame of its own before the
 * response's; a 100 only when the stream did not get ours for Expect: 100-continue (as
 * over HTTP/1.1, conn_http1.c). */
static void send_info(struct um__exchange *x, int status, const struct um_header *h, size_t n)
{
    struct h2_stream *s = stream_of(x);
    if (s->closed || s->submitted || status < 100 || status > 199 || status == 101 ||
        (status == 100 && (x->req.flags & UM_REQ_F_EXPECT_CONTINUE)))
        return;
    nghttp2_nv nva[UM_HTTP1_MAX_RESPONSE_FIELDS + 1];
    size_t k = 0;
    char st[3] = {(char)('0' + status / 100 % 10), (char)('0' + status / 10 % 10),
                  (char)('0' + status % 10)};
    nva[k++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)st, 7, 3, NGHTTP2_NV_FLAG_NONE};
    size_t bytes = 0;
    char scratch[1024];
    size_t used = 0;
    for (size_t i = 0; i < n && k < UM_NELEMS(nva); i++) {
        if (h[i].name.len == 0 || hop_by_hop(h[i].name))
            continue;
        const char *name = lower_name(h[i].name, scratch, sizeof(scratch), &used, &x->arena);
        nva[k++] = (nghttp2_nv){(uint8_t *)name, (uint8_t *)h[i].value.base, h[i].name.len,
                                h[i].value.len, NGHTTP2_NV_FLAG_NONE};
        bytes += h[i].name.len + h[i].value.len + 32;
    }
    /* nghttp2 copies the fields: they need not outlive the call. */
    int rv = nghttp2_submit_headers(s->h2->session, NGHTTP2_FLAG_NONE, s->id, NULL, nva, k, NULL);
    if (rv != 0) {
        um_log_err("http2: stream %d: cannot submit a %d: %s", s->id, status,
                   nghttp2_strerror(rv));
        return;
    }
    x->resp_bytes += bytes + 16; /* an estimate: HPACK decides the real size */
    um__conn_wake(s->h2->c);
}

static const struct um__exchange_conn_ops h2_exchange_ops = {
    .send_head = send_head,
    .send_data = send_data,
    .send_ref = send_ref,
    .send_file = send_file,
    .end = end,
    .abort = abort_response,
    .send_info = send_info,
    .read_body = read_body,
};

/* ---------------------------------------------------------------- streams */

static struct h2_stream *stream_new(struct um__h2 *h, int32_t id)
{
    struct um__conn *c = h->c;
    /* From the worker's pool: all but the head's fields and the request's header table
     * is cleared (as conn.c's req_get does), not the 5 KiB of the whole. */
    struct h2_stream *s = um_bufpool_get(&c->w->h2_streams);
    memset(s, 0, offsetof(struct h2_stream, fields));
    memset(&s->x, 0, offsetof(struct um__exchange, req.headers));
    char *rest = (char *)&s->x.req.num_headers;
    memset(rest, 0, sizeof(*s) - (size_t)(rest - (char *)s));
    um_buf_init(&s->hbuf);
    um_buf_init(&s->body);
    um_buf_init(&s->out);
    s->h2 = h;
    s->id = id;
    s->file_fd = -1;
    um__exchange_init(&s->x, &h2_exchange_ops, c->w, c->runtime, c->t, c->peer_ip,
                      c->peer_port, c->id);
    s->next = h->streams;
    if (h->streams)
        h->streams->prev = s;
    h->streams = s;
    h->num_streams++;
    h->total_streams++;
    um_counter_add(&um_metrics_worker()->h2_streams, 1);
    return s;
}

static void stream_free(struct um__h2 *h, struct h2_stream *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        h->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    h->num_streams--;
    if (!s->closed)
        nghttp2_session_set_stream_user_data(h->session, s->id, NULL);
    if (s->file_fd >= 0)
        close(s->file_fd);
    segs_drop(s);
    um_arena_reset(&s->x.arena);
    um_buf_dispose(&s->hbuf);
    um_buf_dispose(&s->body);
    um_buf_dispose(&s->out);
    um_bufpool_put(&h->c->w->h2_streams, s);
}

static um_str field_str(const struct h2_stream *s, uint32_t off, uint32_t len)
{
    return (um_str){s->hbuf.base + off, len};
}

/* The head is complete: x.req from the fields, as the HTTP/1.1 parser would fill it. */
static int build_request(struct h2_stream *s)
{
    struct um_request *req = &s->x.req;
    /* All but the header table, filled below as far as num_headers says. */
    memset(req, 0, offsetof(struct um_request, headers));
    req->num_headers = 0;
    req->head_len = 0;
    req->content_length = 0;
    req->flags = 0;
    if (s->too_large)
        return 431;
    /* nghttp2 checked the pseudo-fields (section 8.3.1): present once, before the others,
     * :path not empty, no CONNECT without :authority. */
    if (!s->has_method)
        return 400;
    req->method = field_str(s, s->method.value_off, s->method.value_len);
    req->method_id = um_http1_method_id(req->method.base, req->method.len);
    if (req->method_id == UM_METHOD_CONNECT)
        return 501;
    if (!s->has_path || !s->has_scheme)
        return 400;
    req->target = field_str(s, s->path.value_off, s->path.value_len);
    req->path = req->target;
    if (req->target.len == 1 && req->target.base[0] == '*') {
        if (req->method_id != UM_METHOD_OPTIONS)
            return 400;
    } else if (req->target.base[0] != '/') {
        return 400;
    } else {
        const char *q = memchr(req->target.base, '?', req->target.len);
        if (q) {
            req->path.len = (size_t)(q - req->target.base);
            req->query = (um_str){q + 1, req->target.len - req->path.len - 1};
            req->flags |= UM_REQ_F_HAS_QUERY;
        }
    }
    req->minor_version = 1;
    req->flags |= UM_REQ_F_HTTP2 | UM_REQ_F_KEEPALIVE;
    bool has_host = false;
    um_str authority = s->has_authority
                           ? field_str(s, s->authority.value_off, s->authority.value_len)
                           : (um_str){NULL, 0};
    for (size_t i = 0; i < s->num_fields; i++) {
        struct um_header *f = &req->headers[req->num_headers++];
        f->name = field_str(s, s->fields[i].name_off, s->fields[i].name_len);
        f->value = field_str(s, s->fields[i].value_off, s->fields[i].value_len);
        if (um_str_eq(f->name, "host")) {
            /* One Host, naming what :authority names, if both are there (8.3.1). */
            if (has_host || (s->has_authority && (f->value.len != authority.len ||
                                                  memcmp(f->value.base, authority.base,
                                                         authority.len) != 0)))
                return 400;
            has_host = true;
            if (!s->has_authority)
                req->authority = f->value;
        } else if (um_str_eq(f->name, "content-length")) {
            uint64_t v = 0;
            if (f->value.len == 0 || f->value.len > 18)
                return 400;
            for (size_t k = 0; k < f->value.len; k++) {
                char ch = f->value.base[k];
                if (ch < '0' || ch > '9')
                    return 400;
                v = v * 10 + (uint64_t)(ch - '0');
            }
            req->content_length = v;
            req->flags |= UM_REQ_F_CONTENT_LENGTH;
        } else if (um_str_eq(f->name, "expect")) {
            if (um_str_eq_ci(f->value, "100-continue"))
                req->flags |= UM_REQ_F_EXPECT_CONTINUE;
        }
    }
    /* Cookie crumbs travel as separate fields on HTTP/2; an HTTP/1.1 origin expects one
     * field, joined with "; " (section 8.2.3). */
    size_t first_cookie = SIZE_MAX, num_cookies = 0;
    for (size_t i = 0; i < req->num_headers; i++)
        if (um_str_eq(req->headers[i].name, "cookie") && num_cookies++ == 0)
            first_cookie = i;
    if (num_cookies > 1) {
        struct um_buf b;
        um_buf_init(&b);
        size_t keep = 0;
        for (size_t i = 0; i < req->num_headers; i++) {
            if (um_str_eq(req->headers[i].name, "cookie")) {
                if (b.len > 0)
                    um_buf_append(&b, "; ", 2);
                um_buf_append(&b, req->headers[i].value.base, req->headers[i].value.len);
                if (i != first_cookie)
                    continue;
            }
            req->headers[keep++] = req->headers[i];
        }
        req->num_headers = keep;
        for (size_t i = 0; i < req->num_headers; i++)
            if (um_str_eq(req->headers[i].name, "cookie"))
                req->headers[i].value = (um_str){um_arena_strdup(&s->x.arena, b.base, b.len), b.len};
        um_buf_dispose(&b);
    }
    /* :authority is the Host (section 8.3.1); the layers above read a host field too. */
    if (s->has_authority) {
        req->authority = authority;
        if (!has_host && req->num_headers < UM_HTTP1_MAX_HEADERS)
            req->headers[req->num_headers++] = (struct um_header){UM_STR("host"), req->authority};
    }
    if (!s->body_eof && !(req->flags & UM_REQ_F_CONTENT_LENGTH))
        req->flags |= UM_REQ_F_CHUNKED; /* a body of a length told by its end */
    if (s->body_eof && !(req->flags & UM_REQ_F_CONTENT_LENGTH) && s->body.len > 0) {
        /* The whole body came with the head (in the same read): its length is known. */
        req->content_length = s->body.len;
        req->flags |= UM_REQ_F_CONTENT_LENGTH;
    }
    if ((req->flags & UM_REQ_F_CONTENT_LENGTH) && s->body_eof && req->content_length > 0 &&
        s->body.len == 0)
        return 400;
    req->head_len = s->head_bytes;
    return 0;
}

/* Begins the exchange of a stream whose head is complete. */
static void stream_start(struct um__h2 *h, struct h2_stream *s)
{
    struct um__conn *c = h->c;
    struct um__exchange *x = &s->x;
    s->started = true;
    int status = build_request(s);
    um__exchange_begin(x, false, true);
    if (status != 0) {
        body_discard(s);
        x->req_parsed = false;
        um__exchange_respond(x, status, NULL, 0);
        um__exchange_log(x, 0); /* a request we could not take: logged as "-" */
        return;
    }
    struct um_request *req = &x->req;
    x->req_parsed = true;
    x->head_only = req->method_id == UM_METHOD_HEAD;
    x->body_done = s->body_eof;
    x->body_wanted = false;
    x->body_error = 0;
    bool has_body = !s->body_eof || s->body.len > 0;
    if ((req->flags & UM_REQ_F_CONTENT_LENGTH) &&
        req->content_length > c->config->limits.max_body_bytes) {
        body_discard(s);
        um__exchange_respond(x, 413, NULL, 0);
        return;
    }
    if (has_body && (req->flags & UM_REQ_F_EXPECT_CONTINUE) && s->body.len == 0) {
        /* The client waits for a go-ahead before it sends the body (RFC 9110 10.1.1). */
        static const nghttp2_nv cont[] = {
            {(uint8_t *)":status", (uint8_t *)"100", 7, 3, NGHTTP2_NV_FLAG_NONE}};
        nghttp2_submit_headers(h->session, NGHTTP2_FLAG_NONE, s->id, NULL, cont, 1, NULL);
    }
    enum um__start r = um__exchange_start(x, has_body);
    if (r == UM__START_BODY_FIRST) {
        s->body_first = true;
        body_discard(s);
        if (s->body_eof) {
            s->body_first = false;
            um__exchange_dispatch_pending(x);
        }
    } else if (r == UM__START_ANSWERED) {
        body_discard(s);
    }
}

/* What the callbacks recorded, done outside nghttp2: streams begun, fed, resumed, and
 * freed once both nghttp2 and the exchange are done with them. Returns true when it did
 * something that may have queued frames. */
static bool run_streams(struct um__h2 *h)
{
    bool did = false;
    for (struct h2_stream *s = h->streams, *next; s != NULL; s = next) {
        next = s->next;
        struct um__exchange *x = &s->x;
        if (s->closed) {
            if (s->started && !x->ended)
                um__exchange_cancel(x); /* stops the origin, logs 499 or the status */
            else if (x->req_parsed)
                um__exchange_log(x, 0);
            um__exchange_finish(x);
            stream_free(h, s);
            did = true;
            continue;
        }
        if (!s->started) {
            if (s->head_done) {
                stream_start(h, s);
                did = true;
            }
            continue;
        }
        if (s->body_first && s->body_eof) {
            s->body_first = false;
            x->body_done = true;
            um__exchange_dispatch_pending(x);
            did = true;
            continue;
        }
        if (x->body_wanted && x->origin && !x->ended &&
            (s->body.len > s->bpos || s->body_eof || x->body_error)) {
            x->body_done = s->body_eof;
            um__exchange_body_ready(x);
            did = true;
        }
        if (x->origin_paused && x->origin && !x->ended && out_buffered(s) < STREAM_BUF_LOW) {
            um__exchange_proceed(x);
            did = true;
        }
    }
    return did;
}

/* A graceful shutdown (reload, stop), as section 6.8 describes: a GOAWAY with the last
 * stream id 2^31-1 (nghttp2's shutdown notice), which refuses nothing, and a PING. The
 * streams the client opened before it read the notice arrive before the PING's ACK, and
 * are served; the GOAWAY with the real last stream id follows the ACK (shutdown_final).
 * A GOAWAY with the last id at once refused the streams already on their way, and the
 * client counted them as failed. */
static void shutdown_begin(struct um__h2 *h)
{
    if (h->goaway || h->failed)
        return;
    h->goaway = true;
    nghttp2_submit_shutdown_notice(h->session);
    nghttp2_submit_ping(h->session, NGHTTP2_FLAG_NONE, SHUTDOWN_PING);
}

/* The PING's ACK came (or the client did not answer within the header timeout): the
 * GOAWAY that says which streams were taken. Those past it are refused, which nghttp2 does
 * once the GOAWAY is out and on_begin_headers before. */
static void shutdown_final(struct um__h2 *h)
{
    if (!h->goaway || h->goaway_final || h->failed)
        return;
    h->goaway_final = true;
    nghttp2_submit_goaway(h->session, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(h->session),
                          NGHTTP2_NO_ERROR, NULL, 0);
}

/* ---------------------------------------------------------------- nghttp2's callbacks */

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    struct um__h2 *h = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (h->goaway_final) {
        /* Past the final GOAWAY nghttp2 ignores streams above its last id itself; one
         * that slips in before it goes out is refused (retried elsewhere, section 8.7).
         * Before it (after the shutdown notice) streams are still taken. */
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_REFUSED_STREAM);
        return 0; /* no stream: its fields and body are ignored */
    }
    struct h2_stream *s = stream_new(h, frame->hd.stream_id);
    nghttp2_session_set_stream_user_data(session, s->id, s);
    return 0;
}

static void put_field(struct h2_stream *s, struct h2_field *f, const uint8_t *name,
                      size_t namelen, const uint8_t *value, size_t valuelen)
{
    f->name_off = (uint32_t)s->hbuf.len;
    f->name_len = (uint32_t)namelen;
    um_buf_append(&s->hbuf, name, namelen);
    f->value_off = (uint32_t)s->hbuf.len;
    f->value_len = (uint32_t)valuelen;
    um_buf_append(&s->hbuf, value, valuelen);
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *user)
{
    (void)flags;
    struct um__h2 *h = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers: not passed on */
    struct h2_stream *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (s == NULL)
        return 0;
    /* As SETTINGS_MAX_HEADER_LIST_SIZE counts (section 6.5.2). Past it nothing more is
     * kept; the request gets 431 once its head is complete. */
    s->head_bytes += namelen + valuelen + 32;
    if (s->head_bytes > h->c->config->http2.max_header_list)
        s->too_large = true;
    if (s->too_large)
        return 0;
    if (namelen > 0 && name[0] == ':') {
        struct h2_field *f = NULL;
        bool *has = NULL;
        if (namelen == 7 && memcmp(name, ":method", 7) == 0)
            f = &s->method, has = &s->has_method;
        else if (namelen == 5 && memcmp(name, ":path", 5) == 0)
            f = &s->path, has = &s->has_path;
        else if (namelen == 7 && memcmp(name, ":scheme", 7) == 0)
            f = &s->scheme, has = &s->has_scheme;
        else if (namelen == 10 && memcmp(name, ":authority", 10) == 0)
            f = &s->authority, has = &s->has_authority;
        if (f) {
            put_field(s, f, name, namelen, value, valuelen);
            *has = true;
        }
        return 0;
    }
    if (s->num_fields == UM_HTTP1_MAX_HEADERS) {
        s->too_large = true;
        return 0;
    }
    put_field(s, &s->fields[s->num_fields++], name, namelen, value, valuelen);
    return 0;
}

/* Spends a token of a bucket (burst tokens, per_sec replenished each second); false when
 * it is empty. */
static bool spend(struct um__h2 *h, double *tokens, uint64_t *at, double burst, double per_sec)
{
    uint64_t now = um_loop_now(h->c->w->loop);
    *tokens += (double)(now - *at) * per_sec / 1000.0;
    if (*tokens > burst)
        *tokens = burst;
    *at = now;
    if (*tokens < 1)
        return false;
    *tokens -= 1;
    return true;
}

/* A frame that does no work for the client (a PING or SETTINGS it sends without end, a
 * PRIORITY, an empty DATA frame, a frame nghttp2 refused): HAProxy's "glitches". Past the
 * budget the connection ends with ENHANCE_YOUR_CALM, whether or not the client reads the
 * ACKs (nghttp2's own limit counts only those queued). */
static int glitch(struct um__h2 *h, const char *what)
{
    if (spend(h, &h->glitch_tokens, &h->glitch_at, GLITCH_BURST, GLITCH_PER_SEC))
        return 0;
    fail(h, NGHTTP2_ENHANCE_YOUR_CALM, what);
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    struct um__h2 *h = user;
    struct h2_stream *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
        if (s == NULL)
            break;
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
            s->body_eof = true;
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST && (frame->hd.flags & NGHTTP2_FLAG_END_HEADERS))
            s->head_done = true;
        break;
    case NGHTTP2_DATA:
        if (s && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
            s->body_eof = true;
        else if (frame->hd.length == 0)
            return glitch(h, "too many empty DATA frames");
        break;
    case NGHTTP2_RST_STREAM:
        /* Rapid reset (CVE-2023-44487): a token bucket on the client's resets. */
        if (!spend(h, &h->rst_tokens, &h->rst_at, RST_BURST, RST_PER_SEC)) {
            fail(h, NGHTTP2_ENHANCE_YOUR_CALM, "too many stream resets");
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        break;
    case NGHTTP2_PING:
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK))
            return glitch(h, "too many PING frames");
        if (memcmp(frame->ping.opaque_data, SHUTDOWN_PING, sizeof(SHUTDOWN_PING)) == 0)
            shutdown_final(h);
        break;
    case NGHTTP2_SETTINGS:
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK))
            return glitch(h, "too many SETTINGS frames");
        break;
    case NGHTTP2_PRIORITY:
        return glitch(h, "too many PRIORITY frames");
    default:
        break;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *user)
{
    (void)flags;
    struct um__h2 *h = user;
    struct h2_stream *s = nghttp2_session_get_stream_user_data(session, id);
    if (s == NULL || s->discard_body || s->x.ended) {
        nghttp2_session_consume(session, id, len);
        return 0;
    }
    s->body_seen += len;
    if (s->body_seen > h->c->config->limits.max_body_bytes) {
        s->x.body_error = 413;
        nghttp2_session_consume(session, id, len);
        return 0;
    }
    um_buf_append(&s->body, data, len);
    return 0;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    (void)user;
    if ((frame->hd.type != NGHTTP2_DATA && frame->hd.type != NGHTTP2_HEADERS) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    struct h2_stream *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    /* The whole response is out before the request body ended: the client may stop
     * sending it (section 8.1). */
    if (s && !s->body_eof)
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_invalid_frame(nghttp2_session *session, const nghttp2_frame *frame, int err,
                            void *user)
{
    (void)session;
    (void)frame;
    (void)err;
    return glitch(user, "too many invalid frames");
}

static int on_stream_close(nghttp2_session *session, int32_t id, uint32_t err, void *user)
{
    (void)err;
    (void)user;
    struct h2_stream *s = nghttp2_session_get_stream_user_data(session, id);
    if (s) {
        s->closed = true; /* freed by run_streams, outside nghttp2 */
        nghttp2_session_set_stream_user_data(session, id, NULL);
    }
    return 0;
}

/* ---------------------------------------------------------------- the connection */

/* The callbacks table: made once for the process, read-only afterwards. */
static nghttp2_session_callbacks *cbs;
static pthread_once_t cbs_once = PTHREAD_ONCE_INIT;

static void make_callbacks(void)
{
    {
        UM_ASSERT(nghttp2_session_callbacks_new(&cbs) == 0);
        nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
        nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
        nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, on_invalid_frame);
        nghttp2_session_callbacks_set_send_data_callback(cbs, send_data_frame);
    }
}

static nghttp2_session_callbacks *callbacks(void)
{
    pthread_once(&cbs_once, make_callbacks);
    return cbs;
}

bool um__conn_h2_start(struct um__conn *c)
{
    const struct um_config *cfg = c->config;
    struct um__h2 *h = um_calloc(1, sizeof(*h));
    h->c = c;
    h->rst_tokens = RST_BURST;
    h->glitch_tokens = GLITCH_BURST;
    h->scan_skip = UM__H2_PREFACE_LEN; /* the client preface is not a frame */
    h->rst_at = h->glitch_at = um_loop_now(c->w->loop);
    nghttp2_option *opt;
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_outbound_ack(opt, MAX_OUTBOUND_ACK);
    nghttp2_option_set_max_settings(opt, MAX_SETTINGS);
    nghttp2_option_set_max_send_header_block_length(opt, 64 * 1024);
    int rv = nghttp2_session_server_new2(&h->session, callbacks(), h, opt);
    nghttp2_option_del(opt);
    if (rv != 0) {
        um_log_err("http2: cannot make a session: %s", nghttp2_strerror(rv));
        free(h);
        um__conn_close(c);
        return false;
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, cfg->http2.max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, cfg->http2.initial_window},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, cfg->http2.max_header_list},
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
    };
    nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, iv, UM_NELEMS(iv));
    /* The connection's window: room for a few streams' bodies at once (each stream is
     * held to its own window). */
    uint64_t conn_window = (uint64_t)cfg->http2.initial_window * 4;
    if (conn_window > INT32_MAX)
        conn_window = INT32_MAX;
    nghttp2_session_set_local_window_size(h->session, NGHTTP2_FLAG_NONE, 0, (int32_t)conn_window);
    c->h2 = h;
    c->proto = &um__conn_proto_h2;
    c->state = S_H2;
    c->head_started = false;
    um_counter_add(&um_metrics_worker()->h2_conns, 1);
    if (c->draining)
        shutdown_begin(h); /* stopping already: the streams sent meanwhile are served */
    return true;
}

/* Moves frames from nghttp2 to the output queue, up to its soft limit. */
static void send_frames(struct um__conn *c)
{
    struct um__h2 *h = c->h2;
    while (um__outq_backlog(&c->out) < OUT_SOFT_MAX) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(h->session, &p);
        if (n < 0) {
            um_log_info("http2: %s:%d: %s", c->peer_ip, c->peer_port, nghttp2_strerror((int)n));
            h->failed = true;
            break;
        }
        if (n == 0)
            break;
        um__outq_append(&c->out, p, (size_t)n);
    }
}

/* A HEADERS frame on stream id: false when the client skipped id before (a stream that
 * it closed without using it), which is a connection error PROTOCOL_ERROR (section
 * 5.1.1). An id at or below the highest that is not a skipped one is trailers or a closed
 * stream, nghttp2's to judge; stream 0 and even ids are too. */
static bool scan_headers_id(struct um__h2 *h, uint32_t id)
{
    if (id == 0 || !(id & 1))
        return true;
    if (id > h->max_id) {
        uint32_t lo = h->max_id == 0 ? 1 : h->max_id + 2;
        if (id > lo) {
            /* A ring of the last ranges: a client that skips more often than that is
             * only checked against its latest ones. */
            uint32_t *g = h->gaps[h->num_gaps++ % MAX_GAPS];
            g[0] = lo;
            g[1] = id - 2;
        }
        h->max_id = id;
        return true;
    }
    unsigned n = h->num_gaps < MAX_GAPS ? h->num_gaps : MAX_GAPS;
    for (unsigned i = 0; i < n; i++)
        if (id >= h->gaps[i][0] && id <= h->gaps[i][1])
            return false;
    return true;
}

/* Follows the frame headers in p[0..n) (the client's bytes, in order), before nghttp2
 * sees them. It counts the CONTINUATION frames that follow one HEADERS: nghttp2 1.52 as
 * released takes any number of them, each one a decoding pass even when empty
 * (CVE-2024-27316's kind of flood); past MAX_CONTINUATIONS it says ENHANCE_YOUR_CALM in
 * *err. And it checks the stream id of each HEADERS (scan_headers_id): PROTOCOL_ERROR.
 * False on either. */
static bool scan_frames(struct um__h2 *h, const uint8_t *p, size_t n, uint32_t *err,
                        const char **why)
{
    while (n > 0) {
        if (h->scan_skip > 0) {
            size_t k = n < h->scan_skip ? n : h->scan_skip;
            h->scan_skip -= k;
            p += k;
            n -= k;
            continue;
        }
        size_t k = sizeof(h->scan_hdr) - h->scan_hdr_len;
        if (k > n)
            k = n;
        memcpy(h->scan_hdr + h->scan_hdr_len, p, k);
        h->scan_hdr_len += k;
        p += k;
        n -= k;
        if (h->scan_hdr_len < sizeof(h->scan_hdr))
            break;
        h->scan_hdr_len = 0;
        h->scan_skip = (size_t)h->scan_hdr[0] << 16 | (size_t)h->scan_hdr[1] << 8 | h->scan_hdr[2];
        if (h->scan_hdr[3] != NGHTTP2_CONTINUATION)
            h->num_cont = 0;
        else if (++h->num_cont > MAX_CONTINUATIONS) {
            *err = NGHTTP2_ENHANCE_YOUR_CALM;
            *why = "too many CONTINUATION frames";
            return false;
        }
        if (h->scan_hdr[3] == NGHTTP2_HEADERS) {
            uint32_t id = ((uint32_t)h->scan_hdr[5] << 24 | (uint32_t)h->scan_hdr[6] << 16 |
                           (uint32_t)h->scan_hdr[7] << 8 | h->scan_hdr[8]) & 0x7fffffffu;
            if (!scan_headers_id(h, id)) {
                *err = NGHTTP2_PROTOCOL_ERROR;
                *why = "HEADERS on a stream id it skipped";
                return false;
            }
        }
    }
    return true;
}

static enum input_result h2_process_input(struct um__conn *c)
{
    struct um__h2 *h = c->h2;
    if (c->rpos < c->rlen) {
        uint32_t err = 0;
        const char *why = NULL;
        if (!h->failed &&
            !scan_frames(h, (const uint8_t *)c->rbuf + c->rpos, c->rlen - c->rpos, &err, &why))
            fail(h, err, why);
        if (!h->failed) {
            ssize_t r = nghttp2_session_mem_recv(h->session, (const uint8_t *)c->rbuf + c->rpos,
                                                 c->rlen - c->rpos);
            if (r < 0) {
                if (r == NGHTTP2_ERR_BAD_CLIENT_MAGIC)
                    um_log_info("http2: %s:%d: not an HTTP/2 client preface", c->peer_ip,
                                c->peer_port);
                else if (r != NGHTTP2_ERR_CALLBACK_FAILURE || !h->failed)
                    um_log_info("http2: %s:%d: %s", c->peer_ip, c->peer_port,
                                nghttp2_strerror((int)r));
                if (!h->failed) {
                    /* Floods nghttp2 itself detects are abuse, not mistakes. */
                    bool calm = r == NGHTTP2_ERR_FLOODED || r == -905 /* TOO_MANY_CONTINUATIONS
                                                                         in patched 1.52 */;
                    h->failed = true;
                    nghttp2_session_terminate_session(
                        h->session, calm ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR);
                }
            }
        }
        c->rpos = c->rlen = 0; /* nghttp2 keeps what it needs of a partial frame */
    }
    for (int round = 0; round < 8; round++) {
        bool did = run_streams(h);
        size_t before = c->out.buf.len;
        send_frames(c);
        if (!did && c->out.buf.len == before)
            break;
    }
    if (h->failed || (!nghttp2_session_want_read(h->session) &&
                      !nghttp2_session_want_write(h->session))) {
        /* Done (after a graceful GOAWAY nghttp2 wants to read until its streams are
         * closed, so this is after them, or after a connection error): the last frames
         * go out, then the connection closes. */
        send_frames(c);
        c->closing = true;
        /* After an error the client may still be sending: a lingering close lets it read
         * the GOAWAY instead of a reset. */
        c->linger = h->failed;
        return IN_DONE;
    }
    if (um__outq_backlog(&c->out) >= OUT_SOFT_MAX)
        return IN_BACKLOG; /* stop reading until the client takes its output */
    return IN_NEED_INPUT;
}

static bool h2_on_drained(struct um__conn *c)
{
    /* Frames wait in nghttp2 for room in the queue: pull them now. */
    struct um__h2 *h = c->h2;
    if (h->failed || !nghttp2_session_want_write(h->session))
        return false;
    size_t before = c->out.buf.len;
    send_frames(c);
    run_streams(h);
    return c->out.buf.len != before;
}

static void h2_arm_timer(struct um__conn *c)
{
    struct um__h2 *h = c->h2;
    /* Waiting for the client: nghttp2 took every byte read (it keeps a partial frame
     * itself), so the read buffer goes back to the worker's pool until bytes arrive, as
     * an idle HTTP/1.1 connection's does. With no stream and nothing queued, so does the
     * output queue's memory. */
    if (c->rbuf != NULL && c->rpos == c->rlen)
        um__conn_rbuf_release(c);
    if (h->num_streams == 0 && !um__outq_pending(&c->out) &&
        !nghttp2_session_want_write(h->session))
        um__outq_shrink(&c->out);
    if (h->goaway && !h->goaway_final && !h->failed) {
        /* The shutdown PING's ACK is awaited for the header timeout at most. */
        if (um__links(c)->tq_kind != UM__TQ_HEADER)
            um__tq_arm(c->w, c, UM__TQ_HEADER);
        h->head_timer = false;
        return;
    }
    bool head_pending = h->total_streams == 0, body_pending = false, stalled = false;
    for (struct h2_stream *s = h->streams; s; s = s->next) {
        if (!s->head_done)
            head_pending = true;
        else if (s->started && !s->body_eof && !s->x.ended)
            body_pending = true;
        if (s->submitted && !s->deferred && out_buffered(s) > 0)
            stalled = true; /* bytes wait for window the client does not open */
    }
    if (head_pending) {
        /* A head must be complete within the header timeout, however it trickles in. */
        if (!h->head_timer || um__links(c)->tq_kind != UM__TQ_HEADER) {
            um__tq_arm(c->w, c, UM__TQ_HEADER);
            h->head_timer = true;
        }
        return;
    }
    h->head_timer = false;
    if (stalled) {
        /* A client that keeps its windows shut is a reader that never reads: the send
         * timeout bounds it, as a full socket does over HTTP/1.1. */
        if (um__links(c)->tq_kind != UM__TQ_SEND)
            um__tq_arm(c->w, c, UM__TQ_SEND);
    } else if (body_pending)
        um__tq_arm(c->w, c, UM__TQ_HEADER); /* each pause of an upload */
    else if (h->num_streams > 0)
        um__tq_disarm(c->w, c); /* the origins' timeouts apply */
    else
        um__tq_arm(c->w, c, UM__TQ_IDLE);
}

static void h2_on_timeout(struct um__conn *c)
{
    struct um__h2 *h = c->h2;
    if (h->goaway && !h->goaway_final && !h->failed) {
        /* No ACK of the shutdown PING: the final GOAWAY goes out anyway. */
        shutdown_final(h);
        um__tq_disarm(c->w, c);
        um__worker_ready(c->w, c);
        return;
    }
    uint64_t log_conn = um_log_set_conn(c->id);
    um_log_info("http2: %s:%d: timed out, closing", c->peer_ip, c->peer_port);
    um_log_set_conn(log_conn);
    um__conn_close(c);
}

static void h2_drain(struct um__conn *c)
{
    shutdown_begin(c->h2);
    um__worker_ready(c->w, c);
}

static void h2_on_close(struct um__conn *c)
{
    struct um__h2 *h = c->h2;
    for (struct h2_stream *s = h->streams; s; s = s->next) {
        s->closed = true;
        if (s->started && !s->x.ended)
            um__exchange_cancel(&s->x);
        else if (s->x.req_parsed)
            um__exchange_log(&s->x, 0);
        s->x.ended = true; /* cancelled: nothing more goes to it */
        s->x.req_parsed = false;
    }
}

static void h2_dispose(struct um__conn *c)
{
    struct um__h2 *h = c->h2;
    while (h->streams) {
        struct h2_stream *s = h->streams;
        s->closed = true;
        um__exchange_finish(&s->x);
        stream_free(h, s);
    }
    nghttp2_session_del(h->session);
    free(h);
    c->h2 = NULL;
}

const struct um__conn_proto um__conn_proto_h2 = {
    .name = "HTTP/2",
    .process_input = h2_process_input,
    .on_drained = h2_on_drained,
    .arm_timer = h2_arm_timer,
    .on_timeout = h2_on_timeout,
    .drain = h2_drain,
    .on_reload = h2_drain, /* GOAWAY: the client reconnects to the new configuration */
    .on_close = h2_on_close,
    .dispose = h2_dispose,
};
