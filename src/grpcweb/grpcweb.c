/* SPDX-License-Identifier: BSD-2-Clause */
/* gRPC-Web (umbra/grpcweb.h), after gRPC's PROTOCOL-WEB.md and what Envoy's filter does.
 *
 * The request: its fields copied with content-type made gRPC's and te: trailers added;
 * a binary body passes as it is (gRPC-Web frames are gRPC's); a -text body is base64,
 * decoded as it is read, four characters at a time (a client may pad each piece it
 * sends, so padding may come in the middle).
 *
 * The answer: its head with gRPC-Web's content-type, no length (the trailer frame makes
 * it longer); the messages as they come (base64 for -text, each piece padded on its own,
 * which gRPC-Web's clients decode); the trailers as one more frame, flag 0x80. Bytes the
 * client could not take yet wait in out, and the inner origin with them (resume); the
 * end waits for them too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "umbra/base64.h"
#include "umbra/buf.h"
#include "umbra/grpcweb.h"
#include "umbra/httpfield.h"

struct gw_origin {
    struct um_origin base;
    struct um_origin_ops ops; /* the inner origin's flags (upgrades pass) */
    struct um_origin *inner;
};

struct gw_fetch {
    struct um_sink sink; /* the inner origin's */
    struct um_sink *client;
    struct um_origin *inner;
    bool web;   /* a gRPC-Web request; false: everything passes untouched */
    bool text;  /* application/grpc-web-text: base64 both ways */
    bool error; /* the answer was not gRPC's: its body is dropped */
    bool inner_ended, inner_paused;
    int inner_err;
    char quad[4]; /* request base64 characters not yet decoded */
    size_t nquad;
    struct um_buf out; /* answer bytes the client has not taken */
    size_t out_off;
    char ctype[64];        /* the answer's content-type */
    char req_ctype[64];    /* the request's, as gRPC */
    char status[12];       /* grpc-status of an answer that was not gRPC's */
    struct um_request req; /* the request as the inner origin sees it */
};

static struct gw_fetch *gw_of(struct um_sink *s)
{
    return um_container_of(s, struct gw_fetch, sink);
}

static void gw_free(struct gw_fetch *g)
{
    um_buf_dispose(&g->out);
    free(g);
}

/* ---------------------------------------------------------------- the answer */

/* Offers what out holds to the client; true when it took all of it. */
static bool flush_out(struct gw_fetch *g)
{
    while (g->out_off < g->out.len) {
        size_t n =
            g->client->ops->on_data(g->client, g->out.base + g->out_off, g->out.len - g->out_off);
        if (n == 0) return false;
        g->out_off += n;
    }
    um_buf_reset(&g->out);
    g->out_off = 0;
    return true;
}

/* Ends the client once out is empty. Returns false when g was freed. */
static bool maybe_end(struct gw_fetch *g)
{
    if (!g->inner_ended || !flush_out(g)) return true;
    struct um_sink *client = g->client;
    client->origin_data = NULL;
    int err = g->inner_err;
    gw_free(g);
    client->ops->on_end(client, err);
    return false;
}

static void gw_on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct gw_fetch *g = gw_of(s);
    if (!g->web) {
        g->client->ops->on_head(g->client, h);
        return;
    }
    struct um_header f[UM_HTTP1_MAX_RESPONSE_FIELDS + 3];
    size_t n = 0;
    bool grpc = false;
    for (size_t i = 0; i < h->num_headers && n < UM_HTTP1_MAX_RESPONSE_FIELDS; i++) {
        const struct um_header *x = &h->headers[i];
        if (x->name.len == 12 && um_str_eq_ci(x->name, "content-type")) {
            grpc = um_grpc_type(x->value) == UM_GRPC;
            /* application/grpc+proto -> application/grpc-web(-text)+proto */
            snprintf(g->ctype, sizeof(g->ctype), "application/grpc-web%s%.*s",
                     g->text ? "-text" : "", grpc ? (int)(x->value.len - 16) : 0,
                     x->value.base + 16);
            continue;
        }
        f[n++] = *x;
    }
    struct um_response_head out = *h;
    out.wire = (um_str){NULL, 0};
    out.num_wire = 0;
    out.content_length = -1;
    if (h->status != 200 || !grpc) {
        /* Not gRPC's answer: a gRPC-Web one with the status that stands for it. */
        snprintf(g->status, sizeof(g->status), "%d", um_grpc_status_of_http(h->status));
        snprintf(g->ctype, sizeof(g->ctype), "application/grpc-web%s", g->text ? "-text" : "");
        const char *msg = h->status == 200 ? "not a gRPC answer" : "proxy error";
        n = 0;
        f[n++] = (struct um_header){UM_STR("grpc-status"), {g->status, strlen(g->status)}};
        f[n++] = (struct um_header){UM_STR("grpc-message"), {msg, strlen(msg)}};
        out.status = 200;
        out.content_length = 0;
        out.reason = (um_str){NULL, 0};
        g->error = true;
    }
    f[n++] = (struct um_header){UM_STR("content-type"), {g->ctype, strlen(g->ctype)}};
    out.headers = f;
    out.num_headers = n;
    g->client->ops->on_head(g->client, &out);
}

static size_t gw_on_data(struct um_sink *s, const char *data, size_t len)
{
    struct gw_fetch *g = gw_of(s);
    if (!g->web) return g->client->ops->on_data(g->client, data, len);
    if (g->error || len == 0) return len;
    if (!flush_out(g)) {
        g->inner_paused = true;
        return 0;
    }
    if (!g->text) {
        size_t n = g->client->ops->on_data(g->client, data, len);
        g->inner_paused = n == 0; /* resumed with the client (gw_resume) */
        return n;
    }
    um_base64_append(&g->out, data, len, false);
    flush_out(g); /* what the client did not take waits for its resume */
    return len;
}

static size_t gw_on_data_ref(struct um_sink *s, const char *data, size_t len,
                             void (*release)(void *ctx), void *ctx)
{
    struct gw_fetch *g = gw_of(s);
    if (!g->web && g->client->ops->on_data_ref)
        return g->client->ops->on_data_ref(g->client, data, len, release, ctx);
    size_t n = gw_on_data(s, data, len);
    if (n) release(ctx);
    return n;
}

static void gw_on_file(struct um_sink *s, int fd, uint64_t off, uint64_t len)
{
    struct gw_fetch *g = gw_of(s);
    if (g->web && (g->error || g->text)) {
        close(fd); /* no gRPC server answers with a file */
        return;
    }
    g->client->ops->on_file(g->client, fd, off, len);
}

/* The trailers as gRPC-Web's last frame: flag 0x80, length, "name:value\r\n" lines. */
static void gw_on_trailers(struct um_sink *s, const struct um_header *h, size_t n)
{
    struct gw_fetch *g = gw_of(s);
    if (!g->web) {
        um_sink_trailers(g->client, h, n);
        return;
    }
    if (g->error) return;
    struct um_buf f;
    um_buf_init(&f);
    um_buf_append(&f, "\x80\0\0\0\0", 5);
    for (size_t i = 0; i < n; i++) {
        um_buf_reserve(&f, h[i].name.len);
        char *p = f.base + f.len;
        for (size_t k = 0; k < h[i].name.len; k++) {
            char c = h[i].name.base[k];
            p[k] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
        }
        um_buf_commit(&f, h[i].name.len);
        um_buf_append(&f, ":", 1);
        um_buf_append(&f, h[i].value.base, h[i].value.len);
        um_buf_append(&f, "\r\n", 2);
    }
    size_t len = f.len - 5;
    unsigned char *b = (unsigned char *)f.base;
    b[1] = (unsigned char)(len >> 24), b[2] = (unsigned char)(len >> 16);
    b[3] = (unsigned char)(len >> 8), b[4] = (unsigned char)len;
    if (g->text)
        um_base64_append(&g->out, b, f.len, false);
    else
        um_buf_append(&g->out, f.base, f.len);
    um_buf_dispose(&f);
    flush_out(g);
}

static void gw_on_end(struct um_sink *s, int err)
{
    struct gw_fetch *g = gw_of(s);
    g->sink.origin_data = NULL;
    g->inner_ended = true;
    g->inner_err = err;
    maybe_end(g);
}

static void gw_on_flush(struct um_sink *s)
{
    um_sink_flush(gw_of(s)->client);
}

/* ---------------------------------------------------------------- the request */

static ssize_t gw_read_body(struct um_sink *s, char *buf, size_t len)
{
    struct gw_fetch *g = gw_of(s);
    if (!g->web || !g->text) return g->client->ops->read_body(g->client, buf, len);
    if (len < 3) return UM_AGAIN; /* never asked for so little */
    for (;;) {
        char in[4096];
        size_t want = (len / 3) * 4 - g->nquad;
        if (want > sizeof(in)) want = sizeof(in);
        ssize_t r = g->client->ops->read_body(g->client, in, want);
        if (r == 0) return g->nquad == 0 ? 0 : UM_ERR; /* a quad cut short */
        if (r < 0) return r;
        size_t out = 0;
        for (ssize_t i = 0; i < r; i++) {
            if (in[i] == '\r' || in[i] == '\n') continue;
            g->quad[g->nquad++] = in[i];
            if (g->nquad < 4) continue;
            g->nquad = 0;
            size_t k;
            if (!um_base64_decode((um_str){g->quad, 4}, buf + out, 3, &k)) return UM_ERR;
            out += k;
        }
        if (out > 0) return (ssize_t)out;
    }
}

static size_t gw_read_trailers(struct um_sink *s, const struct um_header **h)
{
    return um_sink_read_trailers(gw_of(s)->client, h);
}

static void gw_on_info(struct um_sink *s, int status, const struct um_header *h, size_t n)
{
    um_sink_info(gw_of(s)->client, status, h, n);
}

/* Upgrades (WebSocket) on the route pass, and end the fetch here. */
static void gw_on_upgrade(struct um_sink *s, const struct um_response_head *h,
                          struct um_transport *backend, const char *pre, size_t pre_len)
{
    struct gw_fetch *g = gw_of(s);
    struct um_sink *client = g->client;
    client->origin_data = NULL;
    gw_free(g);
    client->ops->on_upgrade(client, h, backend, pre, pre_len);
}

static const struct um_sink_ops gw_ops = {
    .on_upgrade = gw_on_upgrade,
    .on_info = gw_on_info,
    .on_head = gw_on_head,
    .on_data = gw_on_data,
    .on_data_ref = gw_on_data_ref,
    .on_file = gw_on_file,
    .on_end = gw_on_end,
    .read_body = gw_read_body,
    .on_flush = gw_on_flush,
    .on_trailers = gw_on_trailers,
    .read_trailers = gw_read_trailers,
};

/* ---------------------------------------------------------------- the origin */

static void gw_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *client)
{
    struct gw_origin *go = (struct gw_origin *)o;
    const struct um_request *req = f->req;
    const um_str *ct = um_http1_find_header(req, "content-type");
    int kind = ct ? um_grpc_type(*ct) : UM_GRPC_NONE;
    struct gw_fetch *g = um_calloc(1, sizeof(*g));
    g->sink.ops = &gw_ops;
    g->client = client;
    g->inner = go->inner;
    um_buf_init(&g->out);
    client->origin_data = g;
    if (kind != UM_GRPC_WEB && kind != UM_GRPC_WEB_TEXT) {
        g->inner->ops->fetch(g->inner, f, &g->sink);
        return;
    }
    g->web = true;
    g->text = kind == UM_GRPC_WEB_TEXT;
    /* The request as gRPC: its content-type's format kept ("+proto"), te: trailers, and
     * for -text a body whose length is told by its end. */
    size_t skip = kind == UM_GRPC_WEB_TEXT ? 9 : 4;
    int flen = snprintf(g->req_ctype, sizeof(g->req_ctype), "application/grpc%.*s",
                        (int)(ct->len - 16 - skip), ct->base + 16 + skip);
    if (flen >= (int)sizeof(g->req_ctype)) flen = (int)sizeof(g->req_ctype) - 1;
    um_http1_request_copy(&g->req, req);
    size_t n = 0;
    for (size_t i = 0; i < req->num_headers; i++) {
        um_str name = req->headers[i].name;
        if ((name.len == 12 && um_str_eq_ci(name, "content-type")) ||
            (name.len == 2 && um_str_eq_ci(name, "te")) ||
            (g->text && name.len == 14 && um_str_eq_ci(name, "content-length")))
            continue;
        g->req.headers[n++] = req->headers[i];
    }
    g->req.headers[n++] = (struct um_header){UM_STR("content-type"), {g->req_ctype, (size_t)flen}};
    if (n < UM_HTTP1_MAX_HEADERS)
        g->req.headers[n++] = (struct um_header){UM_STR("te"), UM_STR("trailers")};
    g->req.num_headers = n;
    if (g->text && (g->req.flags & UM_REQ_F_CONTENT_LENGTH)) {
        g->req.flags &= ~(unsigned)UM_REQ_F_CONTENT_LENGTH;
        g->req.flags |= UM_REQ_F_CHUNKED;
        g->req.content_length = 0;
    }
    struct um_fetch ff = *f;
    ff.req = &g->req;
    g->inner->ops->fetch(g->inner, &ff, &g->sink); /* may end (and free g) at once */
}

static void gw_resume(struct um_origin *o, struct um_sink *client)
{
    (void)o;
    struct gw_fetch *g = client->origin_data;
    if (g == NULL) return;
    if (!g->web) {
        if (g->inner->ops->resume) g->inner->ops->resume(g->inner, &g->sink);
        return;
    }
    if (!maybe_end(g)) return;
    if (g->inner_paused && g->out_off >= g->out.len && !g->inner_ended) {
        g->inner_paused = false;
        g->inner->ops->resume(g->inner, &g->sink);
    }
}

static void gw_body_ready(struct um_origin *o, struct um_sink *client)
{
    (void)o;
    struct gw_fetch *g = client->origin_data;
    if (g == NULL) return;
    if (!g->inner_ended && g->inner->ops->body_ready) g->inner->ops->body_ready(g->inner, &g->sink);
}

static void gw_cancel(struct um_origin *o, struct um_sink *client)
{
    (void)o;
    struct gw_fetch *g = client->origin_data;
    if (g == NULL) return;
    client->origin_data = NULL;
    if (!g->inner_ended && g->inner->ops->cancel) g->inner->ops->cancel(g->inner, &g->sink);
    gw_free(g);
}

static void gw_destroy(struct um_origin *o)
{
    struct gw_origin *go = (struct gw_origin *)o;
    go->inner->ops->destroy(go->inner);
    free(go);
}

struct um_origin *um_grpcweb_origin_create(struct um_origin *inner)
{
    struct gw_origin *go = um_calloc(1, sizeof(*go));
    /* gRPC-Web bodies stream; other requests as the inner origin takes them. */
    go->ops = (struct um_origin_ops){.flags = inner->ops->flags | UM_ORIGIN_F_STREAM_BODY,
                                     .fetch = gw_fetch,
                                     .resume = gw_resume,
                                     .body_ready = gw_body_ready,
                                     .cancel = gw_cancel,
                                     .destroy = gw_destroy};
    go->base.ops = &go->ops;
    go->inner = inner;
    return &go->base;
}
