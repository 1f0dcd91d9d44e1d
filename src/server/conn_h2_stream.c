/* SPDX-License-Identifier: BSD-2-Clause */
/* HTTP/2 streams: the exchange's sends, the request a stream builds, and running it. */
#include "conn_h2.h"

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
ssize_t um__h2_read_data(nghttp2_session *session, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *user)
{
    (void)id;
    (void)buf;
    (void)user;
    struct h2_stream *s = src->ptr;
    size_t avail = um__h2_out_buffered(s);
    size_t n = avail < length ? avail : length;
    if (n == avail) {
        if (s->out_abort && n == 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM: not whole */
        if (s->out_end && !s->out_abort) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            /* The trailers end the stream instead of this frame (nghttp2 lets them be
             * submitted from here). */
            if (s->num_resp_trailers > 0 &&
                nghttp2_submit_trailer(session, s->id, s->resp_trailers, s->num_resp_trailers) == 0)
                *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
            s->num_resp_trailers = 0;
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
int um__h2_send_data_frame(nghttp2_session *session, nghttp2_frame *frame,
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
    struct h2_stream *s = um__h2_stream_of(x);
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
    /* gRPC's trailers-only answer: one HEADERS frame that ends the stream (a gRPC client
     * reads the status from it only then), and no length. */
    bool trailers_only = x->grpc && h->content_length == 0;
    bool bodiless = h->status == 304 || h->status == 204 || h->status < 200 || trailers_only;
    if (!bodiless && h->content_length >= 0)
        NV("content-length", 14, cl,
           (size_t)(um_u64_dec(cl, (uint64_t)h->content_length) - cl));
#undef NV
    x->resp_bytes += bytes + 64; /* an estimate: HPACK decides the real size */
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = um__h2_read_data};
    int rv = nghttp2_submit_response(s->h2->session, s->id, nva, n, trailers_only ? NULL : &prd);
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

size_t um__h2_send_data(struct um__exchange *x, const char *data, size_t len, bool may_refuse)
{
    struct h2_stream *s = um__h2_stream_of(x);
    if (s->closed)
        return len; /* the client reset it: the bytes go nowhere */
    if (may_refuse && um__h2_out_buffered(s) > STREAM_BUF_MAX)
        return 0;
    seg_copy(s, data, len);
    wake(s);
    return len;
}

static size_t send_ref(struct um__exchange *x, const char *data, size_t len,
                       void (*release)(void *ctx), void *ctx, bool may_refuse)
{
    struct h2_stream *s = um__h2_stream_of(x);
    if (s->closed) {
        release(ctx);
        return len;
    }
    if (may_refuse && um__h2_out_buffered(s) > STREAM_BUF_MAX)
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
    struct h2_stream *s = um__h2_stream_of(x);
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

void um__h2_end(struct um__exchange *x)
{
    struct h2_stream *s = um__h2_stream_of(x);
    s->out_end = true;
    body_discard(s);
    wake(s);
}

static void abort_response(struct um__exchange *x)
{
    struct h2_stream *s = um__h2_stream_of(x);
    s->out_abort = true;
    body_discard(s);
    wake(s);
}

/* The response's trailers, lower-cased and copied into the arena for read_data. */
static void send_trailers(struct um__exchange *x, const struct um_header *t, size_t n)
{
    struct h2_stream *s = um__h2_stream_of(x);
    if (s->closed || !s->submitted || s->out_end || s->num_resp_trailers > 0) return;
    nghttp2_nv *nv = um_arena_alloc(&x->arena, n * sizeof(*nv));
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i].name.len == 0 || hop_by_hop(t[i].name)) continue;
        char *name = um_arena_alloc(&x->arena, t[i].name.len);
        for (size_t j = 0; j < t[i].name.len; j++) {
            unsigned char ch = (unsigned char)t[i].name.base[j];
            name[j] = (char)((unsigned)(ch - 'A') <= 'Z' - 'A' ? ch | 0x20 : ch);
        }
        char *value = um_arena_strdup(&x->arena, t[i].value.base, t[i].value.len);
        nv[k++] = (nghttp2_nv){(uint8_t *)name, (uint8_t *)value, t[i].name.len, t[i].value.len,
                               NGHTTP2_NV_FLAG_NONE};
        x->resp_bytes += t[i].name.len + t[i].value.len + 32;
    }
    s->resp_trailers = nv;
    s->num_resp_trailers = k;
}

/* The request's trailers (on_header kept the allowed ones), as fields in the arena. */
static size_t read_trailers(struct um__exchange *x, const struct um_header **h)
{
    struct h2_stream *s = um__h2_stream_of(x);
    *h = NULL;
    if (s->num_tfields == 0 || !s->body_eof) return 0;
    struct um_header *t = um_arena_alloc(&x->arena, s->num_tfields * sizeof(*t));
    for (size_t i = 0; i < s->num_tfields; i++) {
        const struct h2_field *f = &s->tfields[i];
        t[i].name = (um_str){s->tbuf.base + f->name_off, f->name_len};
        t[i].value = (um_str){s->tbuf.base + f->value_off, f->value_len};
    }
    *h = t;
    return s->num_tfields;
}

static ssize_t read_body(struct um__exchange *x, char *buf, size_t len)
{
    struct h2_stream *s = um__h2_stream_of(x);
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
    struct h2_stream *s = um__h2_stream_of(x);
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
    .send_data = um__h2_send_data,
    .send_ref = send_ref,
    .send_file = send_file,
    .end = um__h2_end,
    .abort = abort_response,
    .send_info = send_info,
    .read_body = read_body,
    .send_trailers = send_trailers,
    .read_trailers = read_trailers,
};

/* ---------------------------------------------------------------- streams */

struct h2_stream *um__h2_stream_new(struct um__h2 *h, int32_t id)
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
    um_buf_init(&s->tbuf);
    s->h2 = h;
    s->id = id;
    s->file_fd = -1;
    um__exchange_init(&s->x, &h2_exchange_ops, c->w, c->runtime, c->t, c->peer_ip,
                      c->peer_port, c->id);
    s->x.admin = c->admin;
    s->next = h->streams;
    if (h->streams)
        h->streams->prev = s;
    h->streams = s;
    h->num_streams++;
    h->total_streams++;
    if (!c->admin)
        um_counter_add(&um_metrics_worker()->h2_streams, 1);
    return s;
}

void um__h2_stream_free(struct um__h2 *h, struct h2_stream *s)
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
    um__h2_segs_drop(s);
    um_arena_reset(&s->x.arena);
    um_buf_dispose(&s->hbuf);
    um_buf_dispose(&s->body);
    um_buf_dispose(&s->out);
    um_buf_dispose(&s->tbuf);
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
    if ((!s->body_eof || s->num_tfields > 0) && !(req->flags & UM_REQ_F_CONTENT_LENGTH))
        req->flags |= UM_REQ_F_CHUNKED; /* a body of a length told by its end */
    if (s->body_eof && !(req->flags & UM_REQ_F_CONTENT_LENGTH) && s->body.len > 0 &&
        s->num_tfields == 0) {
        /* The whole body came with the head (in the same read): its length is known (with
         * trailers, an HTTP/1.1 server gets it chunked, with them). */
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
    x->grpc = um__grpc_request(req);
    x->head_only = req->method_id == UM_METHOD_HEAD;
    x->body_done = s->body_eof;
    x->body_wanted = false;
    x->body_error = 0;
    bool has_body = !s->body_eof || s->body.len > 0;
    if ((req->flags & UM_REQ_F_CONTENT_LENGTH) &&
        req->content_length > um__conn_max_body(c)) {
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
bool um__h2_run_streams(struct um__h2 *h)
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
            um__h2_stream_free(h, s);
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
        if (x->origin_paused && x->origin && !x->ended && um__h2_out_buffered(s) < STREAM_BUF_LOW) {
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
void um__h2_shutdown_begin(struct um__h2 *h)
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
void um__h2_shutdown_final(struct um__h2 *h)
{
    if (!h->goaway || h->goaway_final || h->failed)
        return;
    h->goaway_final = true;
    nghttp2_submit_goaway(h->session, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(h->session),
                          NGHTTP2_NO_ERROR, NULL, 0);
}

