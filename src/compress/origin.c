/* SPDX-License-Identifier: BSD-2-Clause */
/* The compressing origin: between its consumer (the connection, or the cache's fill or
 * pass) and the origin that answers (an upstream, the static files, CGI), as a sink of
 * its own.
 *
 * On the head it decides, once: a response worth compressing for a client that takes a
 * coding gets Content-Encoding, a weak ETag, Vary: Accept-Encoding and no length, and its
 * body goes through an encoder as it arrives; anything else passes through untouched
 * (with Vary added when only the client's Accept-Encoding made the difference).
 *
 * Backpressure: the encoder's output waits in out until the consumer takes it. While
 * some waits, further input is refused (on_data returns 0) and the origin is resumed
 * once out has drained; an origin that cannot be resumed is never refused (its output
 * is kept instead). A file (on_file, from the static origin) is read and compressed a
 * slice at a time, as the consumer takes the output.
 *
 * A live stream stays live: when the origin's bytes run dry (on_flush: its read would
 * block), the encoder's block is ended (a sync flush) and what it holds goes out at once,
 * instead of waiting for the next block to fill, which for server-sent events may be
 * never. Only then, not per on_data: each flush costs some ratio, and a body that arrives
 * at full speed runs dry seldom.
 *
 * A failing encoder never sends a corrupt body: the rest of the origin's answer is read
 * and dropped, and the consumer is told the body is incomplete (on_end with UM_ERR). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "umbra/compress.h"
#include "umbra/httpfield.h"
#include "umbra/metrics.h"
#include "umbra/module.h"

#define FILE_SLICE 65536

struct comp_origin {
    struct um_origin base;
    struct um_origin *inner;
    const struct um_route *route;
};

struct comp_fetch {
    struct um_sink sink; /* what the inner origin writes to (first member) */
    struct um_sink *client;
    struct comp_origin *co;
    struct um_origin *inner;   /* co->inner, or the fetch's source (umbra/origin.h) */
    enum um_coding coding;     /* negotiated for the request; identity: none */
    struct um_encoder *enc;    /* compressing; NULL: passing through */
    struct um_buf out;         /* encoder output the client has not taken */
    size_t out_off;
    bool inner_paused;  /* an on_data of the inner origin was refused */
    bool inner_ended;
    int inner_err;
    bool failed;        /* the encoder failed: the answer is dropped */
    bool unflushed;     /* the encoder took input since its last flush */
    int fd;             /* a file to compress (-1: none) */
    uint64_t file_off, file_left;
    uint64_t bytes_in, bytes_out;
};

static struct comp_fetch *cf_of(struct um_sink *s)
{
    return (struct comp_fetch *)(void *)s;
}

static void cf_free(struct comp_fetch *cf)
{
    if (cf->fd >= 0)
        close(cf->fd);
    um_encoder_destroy(cf->enc);
    um_buf_dispose(&cf->out);
    free(cf);
}

/* ---------------------------------------------------------------- the head */

static bool has_token(const struct um_header *h, size_t n, const char *field, const char *tok)
{
    for (size_t i = 0; i < n; i++) {
        if (!um_str_eq_ci(h[i].name, field))
            continue;
        size_t pos = 0;
        um_str m;
        while (um_http_list_next(h[i].value, &pos, &m)) {
            const char *eq = memchr(m.base, '=', m.len);
            um_str name = um_str_trim((um_str){m.base, eq ? (size_t)(eq - m.base) : m.len});
            if (um_str_eq_ci(name, tok))
                return true;
        }
    }
    return false;
}

static const um_str *find(const struct um_header *h, size_t n, const char *field)
{
    for (size_t i = 0; i < n; i++)
        if (um_str_eq_ci(h[i].name, field))
            return &h[i].value;
    return NULL;
}

/* Whether the response could go out compressed to some client (the request aside). */
static bool response_eligible(const struct um_compress_conf *cc, const struct um_response_head *h)
{
    if (h->status != 200)
        return false;
    if (h->content_length >= 0 && (uint64_t)h->content_length < cc->min_size)
        return false;
    const um_str *ce = find(h->headers, h->num_headers, "content-encoding");
    if (ce && !um_str_eq_ci(um_str_trim(*ce), "identity"))
        return false;
    const um_str *ct = find(h->headers, h->num_headers, "content-type");
    if (ct == NULL || !um_compress_type_ok(cc, *ct))
        return false;
    return !has_token(h->headers, h->num_headers, "cache-control", "no-transform");
}

/* A strong ETag among h made weak: the fields to send, in f (room for n + 2), and the
 * tag's storage in *etag (the caller frees it). Returns how many fields f holds. */
static size_t weaken_etag(const struct um_header *h, size_t n, struct um_header *f, char **etag)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        um_str v = um_str_trim(h[i].value);
        if (*etag == NULL && um_str_eq_ci(h[i].name, "etag") && v.len >= 2 && v.base[0] == '"') {
            /* A strong validator names the identity bytes; a compressed representation
             * is only equivalent to them: weak (RFC 9110 8.8.1). */
            *etag = um_malloc(v.len + 2);
            memcpy(*etag, "W/", 2);
            memcpy(*etag + 2, v.base, v.len);
            f[k++] = (struct um_header){h[i].name, {*etag, v.len + 2}};
            continue;
        }
        f[k++] = h[i];
    }
    return k;
}

static void cf_on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct comp_fetch *cf = cf_of(s);
    const struct um_compress_conf *cc = um_compress_route_conf(cf->co->route);
    if (!response_eligible(cc, h)) {
        if (h->status == 304 && cf->coding != UM_CODING_IDENTITY) {
            /* A 304 to a client (or a cache's revalidation) that takes a coding: what it
             * validates may be our compressed variant, whose tag is weak; the origin's
             * strong one must not replace it (a cache updates its stored fields from a
             * 304). Weak for an identity copy is only less strict. */
            struct um_response_head nh = *h;
            struct um_header *f = um_malloc((h->num_headers + 2) * sizeof(*f));
            char *etag = NULL;
            nh.wire = (um_str){NULL, 0}; /* fields changed: no stored block (umbra/origin.h) */
            nh.num_wire = 0;
            nh.headers = f;
            nh.num_headers = weaken_etag(h->headers, h->num_headers, f, &etag);
            cf->client->ops->on_head(cf->client, &nh);
            free(f);
            free(etag);
            return;
        }
        cf->client->ops->on_head(cf->client, h);
        return;
    }
    /* Vary: Accept-Encoding, unless the origin's Vary says so already (or "*"). */
    bool vary = !has_token(h->headers, h->num_headers, "vary", "accept-encoding") &&
                !has_token(h->headers, h->num_headers, "vary", "*");
    if (cf->coding != UM_CODING_IDENTITY)
        cf->enc = um_encoder_create(cf->coding, cc->level[cf->coding], h->content_length);
    struct um_response_head nh = *h;
    struct um_header *f = um_malloc((h->num_headers + 2) * sizeof(*f));
    char *etag = NULL;
    size_t n = 0;
    for (size_t i = 0; i < h->num_headers; i++) {
        const struct um_header *o = &h->headers[i];
        /* Fields about the identity bytes that the compressed ones would belie: their
         * ranges and digests (RFC 9530's digests cover the coded bytes). */
        if (cf->enc && (um_str_eq_ci(o->name, "content-encoding") ||
                        um_str_eq_ci(o->name, "accept-ranges") ||
                        um_str_eq_ci(o->name, "content-md5") ||
                        um_str_eq_ci(o->name, "content-digest") ||
                        um_str_eq_ci(o->name, "repr-digest") || um_str_eq_ci(o->name, "digest")))
            continue;
        if (cf->enc && um_str_eq_ci(o->name, "etag")) {
            um_str v = um_str_trim(o->value);
            /* Strong made weak; a malformed one is dropped. */
            if (etag == NULL && v.len >= 2 && v.base[0] == '"')
                weaken_etag(o, 1, &f[n++], &etag);
            else if (v.len > 2 && v.base[0] == 'W' && v.base[1] == '/')
                f[n++] = *o;
            continue;
        }
        f[n++] = *o;
    }
    if (cf->enc) {
        const char *name = um_coding_name(cf->coding);
        f[n++] = (struct um_header){UM_STR("Content-Encoding"), {name, strlen(name)}};
        nh.content_length = -1;
    }
    if (vary)
        f[n++] = (struct um_header){UM_STR("Vary"), UM_STR("Accept-Encoding")};
    nh.wire = (um_str){NULL, 0};
    nh.num_wire = 0;
    nh.headers = f;
    nh.num_headers = n;
    cf->client->ops->on_head(cf->client, &nh);
    free(f);
    free(etag);
}

/* ---------------------------------------------------------------- the body */

/* Body bytes given to the encoders and bytes they made, by coding: in[c - 1], out[c + 2]
 * for coding c (enum um_coding, identity not counted). */
#define IN_HELP "Response body bytes given to on-the-fly compression, by coding."
#define OUT_HELP "Compressed bytes on-the-fly compression made, by coding."
static const struct um_metric_def counter_defs[] = {
    {"umbra_compress_in_bytes_total", "counter", IN_HELP, "coding=\"gzip\""},
    {"umbra_compress_in_bytes_total", "counter", IN_HELP, "coding=\"br\""},
    {"umbra_compress_in_bytes_total", "counter", IN_HELP, "coding=\"zstd\""},
    {"umbra_compress_out_bytes_total", "counter", OUT_HELP, "coding=\"gzip\""},
    {"umbra_compress_out_bytes_total", "counter", OUT_HELP, "coding=\"br\""},
    {"umbra_compress_out_bytes_total", "counter", OUT_HELP, "coding=\"zstd\""},
};
static struct um_metric_block counters = {counter_defs, 6, 0};

const struct um_module um_compress_module = {
    .name = "compress",
    .settings = &um_compress_settings,
    .counters = &counters,
};

static void count(struct comp_fetch *cf)
{
    if ((cf->bytes_in == 0 && cf->bytes_out == 0) || cf->coding == UM_CODING_IDENTITY)
        return;
    um_counter_add(um_metric(&counters, (size_t)cf->coding - 1), cf->bytes_in);
    um_counter_add(um_metric(&counters, (size_t)cf->coding + 2), cf->bytes_out);
    cf->bytes_in = cf->bytes_out = 0;
}

/* Offers the waiting output to the client. Returns true when none is left. */
static bool flush_out(struct comp_fetch *cf)
{
    while (cf->out_off < cf->out.len) {
        size_t left = cf->out.len - cf->out_off;
        size_t n = cf->client->ops->on_data(cf->client, cf->out.base + cf->out_off, left);
        if (n == 0)
            return false;
        cf->out_off += n;
        cf->bytes_out += n;
    }
    um_buf_reset(&cf->out);
    cf->out_off = 0;
    return true;
}

static void encode(struct comp_fetch *cf, const char *data, size_t len, bool finish)
{
    if (cf->failed)
        return;
    cf->bytes_in += len;
    cf->unflushed = !finish;
    if (um_encoder_run(cf->enc, data, len, finish, &cf->out) != UM_OK) {
        cf->failed = true;
        um_buf_reset(&cf->out);
        cf->out_off = 0;
    }
}

/* Moves the answer on as far as the client lets it: the waiting output, the file, and
 * the end. Frees cf when the client has had its end; returns false then. */
static bool pump(struct comp_fetch *cf)
{
    for (;;) {
        if (!flush_out(cf))
            return true;
        if (cf->fd < 0 || cf->failed)
            break;
        if (cf->file_left == 0) {
            close(cf->fd);
            cf->fd = -1;
            break;
        }
        char buf[FILE_SLICE];
        size_t want = cf->file_left < sizeof(buf) ? (size_t)cf->file_left : sizeof(buf);
        ssize_t r = pread(cf->fd, buf, want, (off_t)cf->file_off);
        if (r <= 0) {
            cf->failed = true; /* the file shrank or failed: the body is cut short */
            break;
        }
        cf->file_off += (uint64_t)r;
        cf->file_left -= (uint64_t)r;
        encode(cf, buf, (size_t)r, false);
    }
    if (!cf->inner_ended)
        return true;
    int err = cf->inner_err;
    if (err == UM_OK && !cf->failed && cf->fd < 0) {
        encode(cf, NULL, 0, true);
        if (!cf->failed && !flush_out(cf))
            return true; /* the tail goes out on resume; the encoder is done */
    }
    if (cf->failed)
        err = UM_ERR;
    struct um_sink *client = cf->client;
    client->origin_data = NULL;
    count(cf);
    cf_free(cf);
    client->ops->on_end(client, err);
    return false;
}

static bool inner_resumable(const struct comp_fetch *cf)
{
    return cf->inner->ops->resume != NULL;
}

static size_t cf_on_data(struct um_sink *s, const char *data, size_t len)
{
    struct comp_fetch *cf = cf_of(s);
    if (cf->enc == NULL)
        return cf->client->ops->on_data(cf->client, data, len);
    if (len == 0)
        return 0;
    if (cf->out_off < cf->out.len && !flush_out(cf) && inner_resumable(cf)) {
        cf->inner_paused = true;
        return 0;
    }
    encode(cf, data, len, false);
    flush_out(cf);
    return len;
}

static size_t cf_on_data_ref(struct um_sink *s, const char *data, size_t len,
                             void (*release)(void *ctx), void *ctx)
{
    struct comp_fetch *cf = cf_of(s);
    if (cf->enc == NULL) {
        if (cf->client->ops->on_data_ref)
            return cf->client->ops->on_data_ref(cf->client, data, len, release, ctx);
        size_t n = cf->client->ops->on_data(cf->client, data, len);
        if (n)
            release(ctx);
        return n;
    }
    size_t n = cf_on_data(s, data, len);
    if (n)
        release(ctx);
    return n;
}

static void cf_on_file(struct um_sink *s, int fd, uint64_t off, uint64_t len)
{
    struct comp_fetch *cf = cf_of(s);
    if (cf->enc == NULL) {
        cf->client->ops->on_file(cf->client, fd, off, len);
        return;
    }
    if (cf->fd >= 0 || cf->failed) {
        close(fd); /* one file per answer is all an origin sends */
        cf->failed = true;
        return;
    }
    cf->fd = fd;
    cf->file_off = off;
    cf->file_left = len;
    pump(cf); /* the end has not come yet: cf stays */
}

/* The inner origin's last call. Without an encoder cf is freed here (umbra/origin.h: a
 * sink may be freed in its on_end) and the client ended; with one, pump frees it once the
 * encoder's tail is out. */
static void cf_on_end(struct um_sink *s, int err)
{
    struct comp_fetch *cf = cf_of(s);
    cf->sink.origin_data = NULL;
    if (cf->enc == NULL) {
        struct um_sink *client = cf->client;
        client->origin_data = NULL;
        cf_free(cf);
        client->ops->on_end(client, err);
        return;
    }
    cf->inner_ended = true;
    cf->inner_err = err;
    pump(cf);
}

/* The origin's bytes ran dry: what the encoder holds goes out now (the file of the static
 * origin never runs dry: pump reads it as the client takes the output). */
static void cf_on_flush(struct um_sink *s)
{
    struct comp_fetch *cf = cf_of(s);
    if (cf->enc == NULL) {
        um_sink_flush(cf->client);
        return;
    }
    if (!cf->unflushed || cf->failed || cf->inner_ended)
        return;
    cf->unflushed = false;
    if (um_encoder_flush(cf->enc, &cf->out) != UM_OK) {
        cf->failed = true;
        um_buf_reset(&cf->out);
        cf->out_off = 0;
        return;
    }
    /* A client that is behind takes the rest from pump, on resume. */
    flush_out(cf);
}

static ssize_t cf_read_body(struct um_sink *s, char *buf, size_t len)
{
    struct comp_fetch *cf = cf_of(s);
    return cf->client->ops->read_body(cf->client, buf, len);
}

static void cf_on_info(struct um_sink *s, int status, const struct um_header *h, size_t n)
{
    um_sink_info(cf_of(s)->client, status, h, n);
}

/* Trailers pass when the body does; after an encoder's tail they would need holding back
 * to its end, which no compressible type has needed: they are dropped (README). */
static void cf_on_trailers(struct um_sink *s, const struct um_header *h, size_t n)
{
    struct comp_fetch *cf = cf_of(s);
    if (cf->enc == NULL) um_sink_trailers(cf->client, h, n);
}

static size_t cf_read_trailers(struct um_sink *s, const struct um_header **h)
{
    return um_sink_read_trailers(cf_of(s)->client, h);
}

static const struct um_sink_ops cf_ops = {
    .on_trailers = cf_on_trailers,
    .read_trailers = cf_read_trailers,
    .on_info = cf_on_info,
    .on_head = cf_on_head,
    .on_data = cf_on_data,
    .on_data_ref = cf_on_data_ref,
    .on_file = cf_on_file,
    .on_end = cf_on_end,
    .read_body = cf_read_body,
    .on_flush = cf_on_flush,
};

/* ---------------------------------------------------------------- the origin */

static void comp_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *client)
{
    struct comp_origin *co = (struct comp_origin *)o;
    const struct um_request *req = f->req;
    const struct um_compress_conf *cc = um_compress_route_conf(co->route);
    struct comp_fetch *cf = um_calloc(1, sizeof(*cf));
    cf->sink.ops = &cf_ops;
    cf->client = client;
    cf->co = co;
    cf->fd = -1;
    um_buf_init(&cf->out);
    /* A HEAD, a Range request (the range is of the identity bytes) and other methods
     * than GET are answered as they come. */
    if (req->method_id == UM_METHOD_GET && um_http1_find_header(req, "range") == NULL)
        cf->coding = um_compress_negotiate(req->headers, req->num_headers, cc->order,
                                           cc->num_algorithms);
    client->origin_data = cf;
    cf->inner = f->source ? f->source : co->inner;
    struct um_fetch ff = *f;
    ff.source = NULL;
    cf->inner->ops->fetch(cf->inner, &ff, &cf->sink); /* may end (and free cf) at once */
}

static void comp_resume(struct um_origin *o, struct um_sink *client)
{
    (void)o;
    struct comp_fetch *cf = client->origin_data;
    if (cf == NULL)
        return;
    if (cf->enc == NULL) {
        if (cf->inner->ops->resume)
            cf->inner->ops->resume(cf->inner, &cf->sink);
        return;
    }
    if (!pump(cf))
        return;
    if (cf->inner_paused && cf->out_off >= cf->out.len) {
        cf->inner_paused = false;
        cf->inner->ops->resume(cf->inner, &cf->sink);
    }
}

static void comp_body_ready(struct um_origin *o, struct um_sink *client)
{
    (void)o;
    struct comp_fetch *cf = client->origin_data;
    if (cf && !cf->inner_ended && cf->inner->ops->body_ready)
        cf->inner->ops->body_ready(cf->inner, &cf->sink);
}

static void comp_cancel(struct um_origin *o, struct um_sink *client)
{
    (void)o;
    struct comp_fetch *cf = client->origin_data;
    if (cf == NULL)
        return;
    client->origin_data = NULL;
    if (!cf->inner_ended && cf->inner->ops->cancel)
        cf->inner->ops->cancel(cf->inner, &cf->sink);
    count(cf);
    cf_free(cf);
}

static void comp_destroy(struct um_origin *o)
{
    struct comp_origin *co = (struct comp_origin *)o;
    co->inner->ops->destroy(co->inner);
    free(co);
}

static const struct um_origin_ops comp_ops_stream = {
    .flags = UM_ORIGIN_F_STREAM_BODY,
    .fetch = comp_fetch,
    .resume = comp_resume,
    .body_ready = comp_body_ready,
    .cancel = comp_cancel,
    .destroy = comp_destroy,
};

static const struct um_origin_ops comp_ops = {
    .fetch = comp_fetch,
    .resume = comp_resume,
    .body_ready = comp_body_ready,
    .cancel = comp_cancel,
    .destroy = comp_destroy,
};

struct um_origin *um_compress_origin_create(struct um_origin *inner,
                                            const struct um_route *route)
{
    struct comp_origin *co = um_calloc(1, sizeof(*co));
    co->base.ops = (inner->ops->flags & UM_ORIGIN_F_STREAM_BODY) ? &comp_ops_stream : &comp_ops;
    co->inner = inner;
    co->route = route;
    return &co->base;
}
