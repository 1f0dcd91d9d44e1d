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
#include "conn_h2.h"

const size_t um__h2_stream_size = sizeof(struct h2_stream);

size_t um__h2_out_buffered(const struct h2_stream *s)
{
    return s->out.len - s->opos + s->ref_bytes + (size_t)s->file_left;
}

/* Releases the borrowed segments not sent (the stream is reset or freed). */
void um__h2_segs_drop(struct h2_stream *s)
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

/* ---------------------------------------------------------------- nghttp2's callbacks */

int um__h2_on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user)
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
    struct h2_stream *s = um__h2_stream_new(h, frame->hd.stream_id);
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
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    struct h2_stream *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (s == NULL)
        return 0;
    if (frame->headers.cat == NGHTTP2_HCAT_HEADERS) {
        /* The request's trailers (nghttp2 refused pseudo-fields in them), counted against
         * the same limit as the head; those that may not be trailers are dropped. */
        s->head_bytes += namelen + valuelen + 32;
        if (s->head_bytes > h->c->config->http2.max_header_list || s->num_tfields == MAX_TRAILERS ||
            !um_http_trailer_allowed((um_str){(const char *)name, namelen}))
            return 0;
        struct h2_field *f = &s->tfields[s->num_tfields++];
        f->name_off = (uint32_t)s->tbuf.len;
        f->name_len = (uint32_t)namelen;
        um_buf_append(&s->tbuf, name, namelen);
        f->value_off = (uint32_t)s->tbuf.len;
        f->value_len = (uint32_t)valuelen;
        um_buf_append(&s->tbuf, value, valuelen);
        return 0;
    }
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
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
            um__h2_shutdown_final(h);
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
    if (s->body_seen > um__conn_max_body(h->c)) {
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
        nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, um__h2_on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
        nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
        nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, on_invalid_frame);
        nghttp2_session_callbacks_set_send_data_callback(cbs, um__h2_send_data_frame);
    }
}

nghttp2_session_callbacks *um__h2_callbacks(void)
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
    int rv = nghttp2_session_server_new2(&h->session, um__h2_callbacks(), h, opt);
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
    if (!c->admin)
        um_counter_add(&um_metrics_worker()->h2_conns, 1);
    if (c->draining)
        um__h2_shutdown_begin(h); /* stopping already: the streams sent meanwhile are served */
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
        bool did = um__h2_run_streams(h);
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

bool um__h2_on_drained(struct um__conn *c)
{
    /* Frames wait in nghttp2 for room in the queue: pull them now. */
    struct um__h2 *h = c->h2;
    if (h->failed || !nghttp2_session_want_write(h->session))
        return false;
    size_t before = c->out.buf.len;
    send_frames(c);
    um__h2_run_streams(h);
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
        if (s->submitted && !s->deferred && um__h2_out_buffered(s) > 0)
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
        um__h2_shutdown_final(h);
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
    um__h2_shutdown_begin(c->h2);
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
        um__h2_stream_free(h, s);
    }
    nghttp2_session_del(h->session);
    free(h);
    c->h2 = NULL;
}

const struct um__conn_proto um__conn_proto_h2 = {
    .name = "HTTP/2",
    .process_input = h2_process_input,
    .on_drained = um__h2_on_drained,
    .arm_timer = h2_arm_timer,
    .on_timeout = h2_on_timeout,
    .drain = h2_drain,
    .on_reload = h2_drain, /* GOAWAY: the client reconnects to the new configuration */
    .on_close = h2_on_close,
    .dispose = h2_dispose,
};
