/* SPDX-License-Identifier: BSD-2-Clause */
/* The caching layer's pass (see origin.c's note): it forwards the inner origin's answer
 * untouched but for Cache-Status; after a successful unsafe request it invalidates what
 * is stored for the URL and its same-origin Location and Content-Location (RFC 9111
 * 4.4). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- pass */

/* A resumed reader's new answer (struct pass): the same response when it is a 200 of the
 * stored length with the stored ETag. */
static bool same_answer(const struct pass *p, const struct um_response_head *h)
{
    if (h->status != 200 || h->content_length != p->expect_length)
        return false;
    if (p->etag_len == 0)
        return true;
    for (size_t i = 0; i < h->num_headers; i++) {
        if (!um_str_eq_ci(h->headers[i].name, "etag"))
            continue;
        um_str v = um_str_trim(h->headers[i].value);
        return v.len == p->etag_len && memcmp(v.base, p->etag, v.len) == 0;
    }
    return false;
}

void um__cache_pass_on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct pass *p = um_container_of(s, struct pass, sink);
    p->status = h->status;
    if (p->resumed) {
        p->broken = !same_answer(p, h); /* the client has its head already */
        return;
    }
    struct um_header out[MAX_OUT_FIELDS + 1];
    size_t n = 0;
    bool strip_tags = !um_cache_conf(p->co->config)->expose_tags;
    for (size_t i = 0; i < h->num_headers && n < MAX_OUT_FIELDS; i++) {
        if (strip_tags && um_cache_is_tag_field(h->headers[i].name))
            continue;
        out[n++] = h->headers[i];
        if (!p->invalidate)
            continue;
        /* Same-origin Location / Content-Location of a successful unsafe request are
         * invalidated too (RFC 9111 4.4). */
        bool loc = um_str_eq_ci(h->headers[i].name, "location");
        bool cloc = um_str_eq_ci(h->headers[i].name, "content-location");
        if (loc || cloc) {
            um_str base = p->req->path; /* the request's target, for relative references */
            char *dst = loc ? p->location : p->content_location;
            size_t *dl = loc ? &p->loc_len : &p->cloc_len;
            if (!um_cache_same_origin_target((um_str){p->scheme, strlen(p->scheme)},
                                             p->req->authority, base, h->headers[i].value, dst,
                                             sizeof(p->location), dl))
                *dl = 0;
        }
    }
    char csbuf[256];
    if (h->cache && h->cache->hit) p->cs = *h->cache; /* a hit of the disk tier beneath */
    p->cs.fwd_status = h->status;
    size_t cl = um_cache_status_format(csbuf, sizeof(csbuf), &p->cs);
    if (cl < sizeof(csbuf))
        out[n++] = (struct um_header){UM_STR("Cache-Status"), {csbuf, cl}};
    struct um_response_head h2 = *h;
    h2.headers = out;
    h2.num_headers = n;
    h2.wire = (um_str){NULL, 0}; /* the fields are these now */
    h2.num_wire = 0;
    h2.cache = &p->cs;
    p->client->ops->on_head(p->client, &h2);
}

size_t um__cache_pass_on_data(struct um_sink *s, const char *data, size_t len)
{
    struct pass *p = um_container_of(s, struct pass, sink);
    if (p->broken)
        return len; /* not the answer the client has begun: dropped */
    if (!p->ranged)
        return p->client->ops->on_data(p->client, data, len);
    /* Only the range's bytes reach the client; those around it are taken and dropped. */
    size_t skip = len < p->range_skip ? len : (size_t)p->range_skip;
    size_t n = len - skip < p->range_left ? len - skip : (size_t)p->range_left;
    if (n > 0 && p->client->ops->on_data(p->client, data + skip, n) == 0)
        return 0;
    p->range_skip -= skip;
    p->range_left -= n;
    return len;
}

static void pass_on_file(struct um_sink *s, int fd, uint64_t off, uint64_t len)
{
    struct pass *p = um_container_of(s, struct pass, sink);
    p->client->ops->on_file(p->client, fd, off, len);
}

static void purge_key(struct cache_origin *co, um_str authority, um_str target)
{
    size_t n = authority.len + 1 + target.len;
    char *k = um_malloc(n);
    for (size_t i = 0; i < authority.len; i++) {
        char ch = authority.base[i];
        k[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
    }
    k[authority.len] = ' ';
    memcpy(k + authority.len + 1, target.base, target.len);
    um_cache_purge(co->cache, (um_str){k, n});
    free(k);
}

/* The inner origin's last call: the pass is freed here (umbra/origin.h: a sink may be
 * freed in its on_end), then the client is ended. */
void um__cache_pass_on_end(struct um_sink *s, int err)
{
    struct pass *p = um_container_of(s, struct pass, sink);
    if (p->invalidate && err == UM_OK && um_cache_invalidates(p->req->method_id, p->status)) {
        size_t klen;
        char *key = um__cache_make_key(p->req, &klen);
        um_cache_purge(p->co->cache, (um_str){key, klen});
        free(key);
        if (p->loc_len)
            purge_key(p->co, p->req->authority, (um_str){p->location, p->loc_len});
        if (p->cloc_len)
            purge_key(p->co, p->req->authority, (um_str){p->content_location, p->cloc_len});
    }
    if (p->resumed && err == UM_OK && (p->broken || p->range_left > 0))
        err = UM_ERR; /* the rest did not come: the body is cut short */
    struct um_sink *client = p->client;
    client->origin_data = NULL;
    um__cache_pass_free(p);
    client->ops->on_end(client, err);
}

void um__cache_pass_free(struct pass *p)
{
    if (p->obj)
        um_cache_obj_unref(p->obj);
    free(p);
}

static ssize_t pass_read_body(struct um_sink *s, char *buf, size_t len)
{
    struct pass *p = um_container_of(s, struct pass, sink);
    return p->client->ops->read_body(p->client, buf, len);
}

void um__cache_pass_on_info(struct um_sink *s, int status, const struct um_header *h, size_t n)
{
    struct pass *p = um_container_of(s, struct pass, sink);
    um_sink_info(p->client, status, h, n);
}

static void pass_on_trailers(struct um_sink *s, const struct um_header *h, size_t n)
{
    struct pass *p = um_container_of(s, struct pass, sink);
    um_sink_trailers(p->client, h, n);
}

static size_t pass_read_trailers(struct um_sink *s, const struct um_header **h)
{
    struct pass *p = um_container_of(s, struct pass, sink);
    return um_sink_read_trailers(p->client, h);
}

const struct um_sink_ops um__cache_pass_ops = {.on_trailers = pass_on_trailers,
                                               .read_trailers = pass_read_trailers,
                                               .on_info = um__cache_pass_on_info,
                                               .on_head = um__cache_pass_on_head,
                                               .on_data = um__cache_pass_on_data,
                                               .on_file = pass_on_file,
                                               .on_end = um__cache_pass_on_end,
                                               .read_body = pass_read_body};

void um__cache_pass_start(struct cache_origin *co, struct um_fetch *f, struct um_sink *client,
                          enum um_cache_fwd fwd, const char *detail)
{
    struct pass *p = um_calloc(1, sizeof(*p));
    p->ops = &um__cache_pass_req;
    p->co = co;
    p->sink.ops = &um__cache_pass_ops;
    p->client = client;
    p->req = f->req;
    p->scheme = f->scheme;
    p->cs.cache_name = CACHE_NAME;
    p->cs.fwd = fwd;
    p->cs.detail = detail;
    p->invalidate = f->req->method_id != UM_METHOD_GET && f->req->method_id != UM_METHOD_HEAD &&
                    f->req->method_id != UM_METHOD_OPTIONS && f->req->method_id != UM_METHOD_TRACE;
    client->origin_data = p;
    co->inner->ops->fetch(co->inner, f, &p->sink);
}
