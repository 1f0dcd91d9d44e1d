/* SPDX-License-Identifier: BSD-2-Clause */
/* The HTTP/2 transport's nghttp2 side: the client session's callbacks, the request as
 * HEADERS (and DATA from the sink), the response as the head and body upstream.c takes.
 *
 * Flow control: the session is made without automatic WINDOW_UPDATEs. The connection's
 * window is given back as soon as DATA arrives, the stream's only when the sink took the
 * bytes. A stream whose client is behind keeps what arrived since in its pend buffer,
 * which therefore never holds more than the stream's window (STREAM_WINDOW): the server
 * stops sending on that stream, and on that stream only. */
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "umbra/log.h"

#define STREAM_WINDOW (256 * 1024)       /* the most a stream's unsent body holds here */
#define CONN_WINDOW (16 * 1024 * 1024)   /* the connection's: never what stops a stream */

static struct h2stream *stream_of(nghttp2_session *ss, int32_t id)
{
    return nghttp2_session_get_stream_user_data(ss, id);
}

/* Appends to the stream's held-back body. */
static void pend_add(struct h2stream *s, const uint8_t *data, size_t len)
{
    if (s->pend_len + len > s->pend_cap) {
        size_t cap = s->pend_cap ? s->pend_cap : 16 * 1024;
        while (cap < s->pend_len + len)
            cap *= 2;
        s->pend = um_realloc(s->pend, cap);
        s->pend_cap = cap;
    }
    memcpy(s->pend + s->pend_len, data, len);
    s->pend_len += len;
}

/* ---------------------------------------------------------------- the response */

static int on_begin_headers(nghttp2_session *ss, const nghttp2_frame *frame, void *ud)
{
    (void)ud;
    struct h2stream *s = stream_of(ss, frame->hd.stream_id);
    if (s == NULL || s->head_done) return 0;
    s->hlen = s->nfields = 0;
    s->status = 0;
    s->content_length = -1;
    return 0;
}

/* Copies a field into hbuf; a head over MAX_RESPONSE_HEAD or with too many fields is
 * refused when it is complete (too_big). */
static void keep_field(struct h2stream *s, const uint8_t *name, size_t nlen,
                       const uint8_t *value, size_t vlen)
{
    if (s->too_big || s->nfields == UM_HTTP1_MAX_RESPONSE_FIELDS ||
        s->hlen + nlen + vlen > MAX_RESPONSE_HEAD) {
        s->too_big = true;
        return;
    }
    if (s->hlen + nlen + vlen > s->hcap) {
        size_t cap = s->hcap ? s->hcap : 1024;
        while (cap < s->hlen + nlen + vlen)
            cap *= 2;
        s->hbuf = um_realloc(s->hbuf, cap);
        s->hcap = cap;
    }
    s->fld[s->nfields].name = (uint32_t)s->hlen;
    s->fld[s->nfields].nlen = (uint32_t)nlen;
    memcpy(s->hbuf + s->hlen, name, nlen);
    s->hlen += nlen;
    s->fld[s->nfields].value = (uint32_t)s->hlen;
    s->fld[s->nfields].vlen = (uint32_t)vlen;
    memcpy(s->hbuf + s->hlen, value, vlen);
    s->hlen += vlen;
    s->nfields++;
}

static int on_header(nghttp2_session *ss, const nghttp2_frame *frame, const uint8_t *name,
                     size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
    (void)flags, (void)ud;
    struct h2stream *s = stream_of(ss, frame->hd.stream_id);
    if (s == NULL || s->x == NULL) return 0;
    if (s->head_done) {
        /* Trailers: the head's fields were handed over, so hbuf keeps these instead
         * (nghttp2 refused pseudo-fields in them); passed on at the end (try_finish). */
        keep_field(s, name, nlen, value, vlen);
        return 0;
    }
    if (nlen == 7 && memcmp(name, ":status", 7) == 0) {
        /* nghttp2 checked it is three digits. */
        s->status = (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
        return 0;
    }
    if (nlen == 14 && memcmp(name, "content-length", 14) == 0) {
        int64_t n = 0;
        for (size_t i = 0; i < vlen && n >= 0; i++)
            n = (value[i] >= '0' && value[i] <= '9' && n < INT64_MAX / 10)
                    ? n * 10 + (value[i] - '0')
                    : -1;
        if (n < 0 || vlen == 0)
            s->bad = true;
        s->content_length = n;
        return 0;
    }
    keep_field(s, name, nlen, value, vlen);
    return 0;
}

/* The head in hbuf, in the terms upstream.c takes (the HTTP/1.1 client's). */
static void make_response(struct h2stream *s, struct um_http1_response *r)
{
    r->minor_version = 1;
    r->status = s->status;
    r->reason = (um_str){"", 0};
    r->num_headers = s->nfields;
    for (size_t i = 0; i < s->nfields; i++) {
        r->headers[i].name = (um_str){s->hbuf + s->fld[i].name, s->fld[i].nlen};
        r->headers[i].value = (um_str){s->hbuf + s->fld[i].value, s->fld[i].vlen};
    }
    r->head_len = s->hlen;
    r->flags = 0;
    r->content_length = 0;
    if (s->content_length >= 0) {
        r->flags |= UM_RESP_F_CONTENT_LENGTH;
        r->content_length = (uint64_t)s->content_length;
    }
}

/* Fails the stream's attempt (err) and resets the stream. */
static void stream_fail(struct h2stream *s, enum um_up_err err, const char *why)
{
    struct xfer *x = s->x;
    if (x == NULL)
        return;
    um__h2c_detach(s);
    if (!s->closed && s->c) {
        nghttp2_submit_rst_stream(s->c->session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
        um__h2c_schedule(s->c);
    }
    um__h2c_stream_maybe_free(s);
    if (x->errbuf[0] == '\0')
        snprintf(x->errbuf, sizeof(x->errbuf), "%s", why);
    um__up_finish(x, err);
}

static void on_headers(struct h2stream *s, const nghttp2_frame *frame)
{
    struct xfer *x = s->x;
    if (!s->head_done) {
        if (s->too_big) {
            stream_fail(s, UM_UP_HEAD_TOO_LARGE, "response head too large");
            return;
        }
        if (s->bad || s->status < 100) {
            stream_fail(s, UM_UP_BAD_HEAD, "malformed response head");
            return;
        }
        struct um_http1_response r;
        make_response(s, &r);
        if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && !(r.flags & UM_RESP_F_CONTENT_LENGTH)) {
            /* A head that ends the stream (gRPC's trailers-only answer): its body is empty,
             * which the client is told, rather than an empty body of unknown length. */
            r.flags |= UM_RESP_F_CONTENT_LENGTH;
            r.content_length = 0;
        }
        if (s->status < 200) {
            um__up_info(x, &r); /* 101 is not an HTTP/2 answer; the others may pass */
            return;
        }
        s->head_done = true;
        s->hlen = s->nfields = 0; /* hbuf and fld hold the trailers from now on */
        um__up_head(x, &r);
        if (s->x == NULL)
            return;
        /* The first byte arrived: from now on the timeout is for a stalled body. */
        um_loop_timer_start(x->loop, &x->ttfb, um__up_timeout_ms(x));
    } else if (frame->headers.cat == NGHTTP2_HCAT_HEADERS && !s->too_big)
        s->has_trailers = s->nfields > 0;
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
        s->ended = true;
        um__h2c_try_finish(s);
    }
}

void um__h2c_pass_trailers(struct h2stream *s)
{
    if (!s->has_trailers) return;
    s->has_trailers = false;
    struct um_header t[UM_HTTP1_MAX_RESPONSE_FIELDS];
    for (size_t i = 0; i < s->nfields; i++) {
        t[i].name = (um_str){s->hbuf + s->fld[i].name, s->fld[i].nlen};
        t[i].value = (um_str){s->hbuf + s->fld[i].value, s->fld[i].vlen};
    }
    um__up_trailers(s->x, t, s->nfields);
}

/* A GOAWAY closes the streams above its last id (REFUSED_STREAM) as it is processed: the
 * connection is marked first, so that they do not go again on it. */
static int on_begin_frame(nghttp2_session *ss, const nghttp2_frame_hd *hd, void *ud)
{
    (void)ss;
    struct h2conn *c = ud;
    if (hd->type == NGHTTP2_GOAWAY)
        c->goaway = true;
    return 0;
}

static int on_frame_recv(nghttp2_session *ss, const nghttp2_frame *frame, void *ud)
{
    struct h2conn *c = ud;
    switch (frame->hd.type) {
    case NGHTTP2_SETTINGS:
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK))
            c->got_settings = true;
        return 0;
    case NGHTTP2_PING:
        if (frame->hd.flags & NGHTTP2_FLAG_ACK)
            um__h2c_pinged(c);
        return 0;
    case NGHTTP2_GOAWAY:
        /* No new streams here; the streams above last_stream_id are closed by nghttp2
         * with REFUSED_STREAM, and go again on another connection (on_stream_close). */
        c->goaway = true;
        return 0;
    case NGHTTP2_HEADERS: {
        struct h2stream *s = stream_of(ss, frame->hd.stream_id);
        if (s && s->x)
            on_headers(s, frame);
        return 0;
    }
    case NGHTTP2_DATA: {
        struct h2stream *s = stream_of(ss, frame->hd.stream_id);
        if (s && s->x && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
            s->ended = true;
            um__h2c_try_finish(s);
        }
        return 0;
    }
    default:
        return 0;
    }
}

static int on_data_chunk(nghttp2_session *ss, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
    (void)flags, (void)ud;
    nghttp2_session_consume_connection(ss, len);
    struct h2stream *s = stream_of(ss, id);
    if (s == NULL || s->x == NULL || !s->head_done) {
        nghttp2_session_consume_stream(ss, id, len);
        return 0;
    }
    struct xfer *x = s->x;
    if (s->pend_len > 0 || x->paused_recv) {
        pend_add(s, data, len); /* bounded by the stream's window: nothing was consumed */
        return 0;
    }
    um_loop_timer_start(x->loop, &x->ttfb, um__up_timeout_ms(x));
    if (um__up_body(x, (const char *)data, len) == 0) {
        pend_add(s, data, len);
        return 0;
    }
    nghttp2_session_consume_stream(ss, id, len);
    return 0;
}

static int on_stream_close(nghttp2_session *ss, int32_t id, uint32_t code, void *ud)
{
    struct h2conn *c = ud;
    struct h2stream *s = stream_of(ss, id);
    if (s == NULL || s->closed)
        return 0;
    s->closed = true;
    c->nopen--;
    if (s->x && code == NGHTTP2_REFUSED_STREAM && !s->x->head_sent) {
        /* Not processed (RFC 9113 section 8.7): sent again on another connection. */
        um__h2c_replay(s, "stream refused by the server"); /* s is freed */
        return 0;
    }
    if (s->x && !(s->ended && s->head_done && code == NGHTTP2_NO_ERROR)) {
        char why[96];
        snprintf(why, sizeof(why), "stream reset by the server (%s)",
                 nghttp2_http2_strerror(code));
        stream_fail(s, s->head_done ? UM_UP_CUT_SHORT : UM_UP_RECV, why);
        return 0;
    }
    /* A complete answer whose bytes the sink has not all taken waits for its resume. */
    um__h2c_stream_maybe_free(s);
    return 0;
}

static int on_frame_not_send(nghttp2_session *ss, const nghttp2_frame *frame, int err, void *ud)
{
    struct h2conn *c = ud;
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    /* A request whose HEADERS never left has no stream in nghttp2 to hold its data. */
    struct h2stream *s = stream_of(ss, frame->hd.stream_id);
    for (struct h2stream *t = c->streams; s == NULL && t; t = t->next)
        if (t->id == frame->hd.stream_id)
            s = t;
    if (s == NULL || s->x == NULL)
        return 0;
    if (!s->closed && nghttp2_session_find_stream(ss, s->id) == NULL) {
        s->closed = true; /* nghttp2 will say nothing more of it */
        c->nopen--;
    }
    /* After GOAWAY no stream may start here: the request was never sent. */
    if (err == NGHTTP2_ERR_START_STREAM_NOT_ALLOWED || err == NGHTTP2_ERR_STREAM_CLOSED) {
        um__h2c_replay(s, "the connection was closing");
        return 0;
    }
    stream_fail(s, UM_UP_SEND, nghttp2_strerror(err));
    return 0;
}

static int on_frame_send(nghttp2_session *ss, const nghttp2_frame *frame, void *ud)
{
    (void)ud;
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        struct h2stream *s = stream_of(ss, frame->hd.stream_id);
        if (s)
            s->end_sent = true;
    }
    return 0;
}

struct nghttp2_session_callbacks *um__h2c_callbacks(void)
{
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return NULL;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, on_begin_frame);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_not_send_callback(cbs, on_frame_not_send);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    return cbs;
}

bool um__h2c_session_new(struct h2conn *c)
{
    nghttp2_option *opt;
    if (nghttp2_option_new(&opt) != 0)
        return false;
    nghttp2_option_set_no_auto_window_update(opt, 1);
    /* Until the server's SETTINGS say otherwise (RFC 9113 section 6.5.2: 100 is the
     * least a server should allow). */
    nghttp2_option_set_peer_max_concurrent_streams(opt, 100);
    int rv = nghttp2_session_client_new2(&c->session, c->hw->cbs, c, opt);
    nghttp2_option_del(opt);
    if (rv != 0)
        return false;
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                   {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW}};
    if (nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, UM_NELEMS(iv)) != 0 ||
        nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) !=
            0) {
        nghttp2_session_del(c->session);
        c->session = NULL;
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- the request */

/* The request's trailer section after its last DATA frame (nghttp2 copies the fields;
 * names go lower-case, RFC 9113 section 8.2.1). */
static bool submit_trailers(nghttp2_session *ss, int32_t id, const struct um_header *t, size_t n)
{
    nghttp2_nv nv[64];
    char low[4096];
    size_t k = 0, used = 0;
    for (size_t i = 0; i < n && k < UM_NELEMS(nv); i++) {
        if (t[i].name.len > sizeof(low) - used) break;
        for (size_t j = 0; j < t[i].name.len; j++) {
            char ch = t[i].name.base[j];
            low[used + j] = (char)((ch >= 'A' && ch <= 'Z') ? ch + 32 : ch);
        }
        nv[k++] = (nghttp2_nv){(uint8_t *)low + used, (uint8_t *)t[i].value.base, t[i].name.len,
                               t[i].value.len, NGHTTP2_NV_FLAG_NONE};
        used += t[i].name.len;
    }
    return k > 0 && nghttp2_submit_trailer(ss, id, nv, k) == 0;
}

static ssize_t read_body(nghttp2_session *ss, int32_t id, uint8_t *buf, size_t len,
                         uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    (void)ss, (void)id, (void)ud;
    struct h2stream *s = src->ptr;
    struct xfer *x = s->x;
    if (x == NULL) {
        *flags |= NGHTTP2_DATA_FLAG_EOF; /* a reset follows */
        return 0;
    }
    ssize_t n = um__up_read_body(x, (char *)buf, len);
    if (n == UM_AGAIN) {
        s->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
    }
    if (n < 0) {
        stream_fail(s, UM_UP_ABORTED, "request body failed");
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    if (n == 0) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        const struct um_header *t;
        size_t k = um__up_read_trailers(x, &t);
        if (k > 0 && submit_trailers(ss, id, t, k)) *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
    return n;
}

/* Adds name (lower-cased into low) and value to nv. */
static void put_nv(nghttp2_nv *nv, size_t *n, char *low, const char *name, size_t nlen,
                   const char *value, size_t vlen)
{
    for (size_t i = 0; i < nlen; i++)
        low[i] = (char)((name[i] >= 'A' && name[i] <= 'Z') ? name[i] + 32 : name[i]);
    nv[*n] = (nghttp2_nv){(uint8_t *)low, (uint8_t *)value, nlen, vlen, NGHTTP2_NV_FLAG_NONE};
    (*n)++;
}

/* Submits x's request on s's connection: the pseudo-fields, the fields upstream.c made
 * ("Name: value\r\n" each; Host becomes :authority), and the body as DATA. */
bool um__h2c_submit(struct h2stream *s, struct xfer *x)
{
    size_t max = 7;
    for (size_t i = 0; i < x->fields_len; i++)
        max += x->fields[i] == '\n';
    nghttp2_nv *nv = um_malloc(max * sizeof(*nv));
    char *low = um_malloc(x->fields_len + 1);
    char clen[24];
    size_t n = 0;
    const char *method = x->is_head ? "HEAD" : x->method ? x->method : "GET";
    const char *authority = strstr(x->up->conf->servers[x->server].url, "://") + 3;
    nv[n++] = (nghttp2_nv){(uint8_t *)":method", (uint8_t *)method, 7, strlen(method),
                           NGHTTP2_NV_FLAG_NONE};
    nv[n++] = (nghttp2_nv){(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, NGHTTP2_NV_FLAG_NONE};
    nv[n++] = (nghttp2_nv){(uint8_t *)":path", (uint8_t *)x->target, 5, strlen(x->target),
                           NGHTTP2_NV_FLAG_NONE};
    size_t auth_at = n++;
    nv[auth_at] = (nghttp2_nv){(uint8_t *)":authority", (uint8_t *)authority, 10,
                               strlen(authority), NGHTTP2_NV_FLAG_NONE};
    for (size_t p = 0; p < x->fields_len;) {
        const char *line = x->fields + p, *end = memchr(line, '\n', x->fields_len - p);
        const char *colon = memchr(line, ':', (size_t)(end - line));
        p = (size_t)(end - x->fields) + 1;
        if (colon == NULL || end - line < 2)
            continue;
        size_t nlen = (size_t)(colon - line);
        const char *v = colon + 1;
        while (*v == ' ')
            v++;
        size_t vlen = (size_t)(end - 1 - v); /* before the \r */
        if (nlen == 4 && strncasecmp(line, "host", 4) == 0) {
            nv[auth_at].value = (uint8_t *)v;
            nv[auth_at].valuelen = vlen;
            continue;
        }
        /* Connection-specific fields have no place in HTTP/2 (RFC 9113 section 8.2.2);
         * fields.c left only those of an upgrade, which never comes here. */
        if ((nlen == 10 && strncasecmp(line, "connection", 10) == 0) ||
            (nlen == 7 && strncasecmp(line, "upgrade", 7) == 0))
            continue;
        put_nv(nv, &n, low + (line - x->fields), line, nlen, v, vlen);
    }
    if (x->te_trailers)
        nv[n++] = (nghttp2_nv){(uint8_t *)"te", (uint8_t *)"trailers", 2, 8, NGHTTP2_NV_FLAG_NONE};
    if (x->has_body && x->body_size >= 0) {
        int l = snprintf(clen, sizeof(clen), "%lld", (long long)x->body_size);
        nv[n++] = (nghttp2_nv){(uint8_t *)"content-length", (uint8_t *)clen, 14, (size_t)l,
                               NGHTTP2_NV_FLAG_NONE};
    }
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = read_body};
    int32_t id = nghttp2_submit_request(s->c->session, NULL, nv, n, x->has_body ? &prd : NULL, s);
    free(nv);
    free(low);
    if (id < 0) {
        snprintf(x->errbuf, sizeof(x->errbuf), "HTTP/2: %s", nghttp2_strerror(id));
        return false;
    }
    s->id = id;
    return true;
}
