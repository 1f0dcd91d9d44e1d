/* SPDX-License-Identifier: BSD-2-Clause */
/* Large objects in slices, the lower half (the design is at the top of slice.c): the keys
 * and tags of slices, and the range layer just above the origin, which turns a slice key
 * into a Range request and the origin's 206 into a storable 200 with Umbra-Slice-Range. */
#include "internal.h"
#include "store_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "umbra/cacheorigin.h"
#include "umbra/cachepolicy.h"
#include "umbra/context.h"
#include "umbra/httpfield.h"
#include "umbra/loop.h"
#include "umbra/metrics.h"

/* A state of this file is told from an inner origin's (both sit in a sink's origin_data)
 * by its first member. */
static const char state_magic;

/* ---------------------------------------------------------------- keys and tags */

void um__cache_slice_tag(um_str key, char out[UM_CACHE_SLICE_TAG_LEN])
{
    /* FNV-1a, 64 bits: the tag only has to tell the objects of one node's cache apart. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < key.len; i++) {
        h ^= (unsigned char)key.base[i];
        h *= 0x100000001b3ull;
    }
    snprintf(out, UM_CACHE_SLICE_TAG_LEN, SLICE_TAG_PREFIX "%016" PRIx64, h);
}

/* v in decimal at p (room for 20 digits); returns the end. */
static char *put_u64(char *p, uint64_t v)
{
    char t[20];
    size_t n = 0;
    do
        t[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n)
        *p++ = t[--n];
    return p;
}

size_t um__cache_slice_key_tail(char *key, size_t base_len, uint64_t size, uint64_t k)
{
    size_t ml = sizeof(SLICE_MARK) - 1;
    memcpy(key + base_len, SLICE_MARK, ml);
    char *p = put_u64(key + base_len + ml, size);
    *p++ = ':';
    p = put_u64(p, k);
    *p = '\0';
    return (size_t)(p - key);
}

/* (Formatted by hand: it is made for every request of a route with slices.) */
size_t um__cache_slice_key(um_str base, uint64_t size, uint64_t k, char *out, size_t cap)
{
    if (cap < base.len + UM__CACHE_SLICE_TAIL_MAX) return 0;
    memcpy(out, base.base, base.len);
    return um__cache_slice_key_tail(out, base.len, size, k);
}

bool um__cache_slice_key_parse(um_str key, um_str *base, uint64_t *size, uint64_t *k)
{
    size_t ml = sizeof(SLICE_MARK) - 1;
    if (key.base == NULL || key.len <= ml) return false;
    /* The mark is the last one in the key: look for it from the end. */
    for (size_t i = key.len - ml; i-- > 0;) {
        if (memcmp(key.base + i, SLICE_MARK, ml) != 0) continue;
        const char *p = key.base + i + ml, *end = key.base + key.len;
        uint64_t v[2] = {0, 0};
        for (int j = 0; j < 2; j++) {
            const char *start = p;
            while (p < end && *p >= '0' && *p <= '9') {
                if (v[j] > (UINT64_MAX - 9) / 10) return false;
                v[j] = v[j] * 10 + (uint64_t)(*p++ - '0');
            }
            if (p == start) return false;
            if (j == 0 && (p == end || *p++ != ':')) return false;
        }
        if (p != end || v[0] == 0) return false;
        *base = (um_str){key.base, i};
        *size = v[0];
        *k = v[1];
        return true;
    }
    return false;
}

bool um__cache_slice_range_parse(um_str v, uint64_t *first, uint64_t *last, uint64_t *complete)
{
    const char *p = v.base, *end = v.base + v.len;
    uint64_t n[3] = {0, 0, 0};
    for (int j = 0; j < 3; j++) {
        const char *start = p;
        while (p < end && *p >= '0' && *p <= '9') {
            if (n[j] > (UINT64_MAX - 9) / 10) return false;
            n[j] = n[j] * 10 + (uint64_t)(*p++ - '0');
        }
        if (p == start) return false;
        if (j < 2 && (p == end || *p++ != (j == 0 ? '-' : '/'))) return false;
    }
    if (p != end || n[1] < n[0] || n[1] >= n[2]) return false;
    *first = n[0];
    *last = n[1];
    *complete = n[2];
    return true;
}

const um_str *um__cache_slice_field(const struct um_header *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (um_str_eq_ci(h[i].name, name)) return &h[i].value;
    return NULL;
}

/* A copy of src without the fields named in drop (a NULL-ended list), and with the field
 * extra (when its name is set) at the end. dst's field slices point where src's do. */
void um__cache_slice_request(struct um_request *dst, const struct um_request *src,
                             const char *const *drop, struct um_header extra)
{
    um_http1_request_copy(dst, src);
    size_t w = 0;
    for (size_t i = 0; i < src->num_headers; i++) {
        bool skip = false;
        for (size_t j = 0; drop[j] && !skip; j++)
            skip = um_str_eq_ci(src->headers[i].name, drop[j]);
        if (!skip) dst->headers[w++] = src->headers[i];
    }
    if (extra.name.base && w < UM_HTTP1_MAX_HEADERS) dst->headers[w++] = extra;
    dst->num_headers = w;
}

/* ================================================================ the range layer */

struct range_origin {
    struct um_origin base;
    struct um_origin_ops ops;
    struct um_origin *inner;
};

struct range_fetch {
    const char *magic;
    struct um_sink sink; /* what the inner origin writes to */
    struct um_sink *client;
    struct range_origin *ro;
    uint64_t off, len;
    bool bad; /* the origin's 206 was not the range asked for: its body is dropped */
    struct um_request req;
    char range[64], tag[UM_CACHE_SLICE_TAG_LEN], field[96];
};

static struct range_fetch *range_of(struct um_sink *client)
{
    struct range_fetch *rf = client->origin_data;
    return rf && rf->magic == &state_magic ? rf : NULL;
}

static void range_on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct range_fetch *rf = um_container_of(s, struct range_fetch, sink);
    struct um_sink *c = rf->client;
    if (h->status == 416 && rf->off == 0) {
        /* Nothing at offset 0: an empty object. It goes up as the empty 200 it is (not
         * a slice: the slice layer passes it on as it is). */
        rf->bad = true;
        struct um_header *fields = um_malloc((h->num_headers + 1) * sizeof(*fields));
        size_t n = 0;
        for (size_t i = 0; i < h->num_headers; i++)
            if (!um_str_eq_ci(h->headers[i].name, "content-range")) fields[n++] = h->headers[i];
        struct um_response_head out = *h;
        out.status = 200;
        out.reason = (um_str){NULL, 0};
        out.headers = fields;
        out.num_headers = n;
        out.content_length = 0;
        out.wire = (um_str){NULL, 0};
        out.num_wire = 0;
        c->ops->on_head(c, &out);
        free(fields);
        return;
    }
    if (h->status != 206) {
        c->ops->on_head(c, h);
        return;
    }
    const um_str *cr = um__cache_slice_field(h->headers, h->num_headers, "content-range");
    uint64_t first, last, complete;
    if (cr == NULL || cr->len < 6 || memcmp(cr->base, "bytes ", 6) != 0 ||
        !um__cache_slice_range_parse((um_str){cr->base + 6, cr->len - 6}, &first, &last,
                                     &complete) ||
        first != rf->off || last - first >= rf->len ||
        /* A slice is whole: all of it, or all up to the end of the object. */
        (last - first + 1 != rf->len && last + 1 != complete) ||
        (h->content_length >= 0 && (uint64_t)h->content_length != last - first + 1)) {
        /* Not the bytes asked for: nothing of it may be stored as the slice. */
        rf->bad = true;
        struct um_response_head e = {.status = 502, .content_length = 0};
        c->ops->on_head(c, &e);
        return;
    }
    /* The slice goes up as a 200 of its bytes: the cache stores it as any object. */
    struct um_header *fields = um_malloc((h->num_headers + 2) * sizeof(*fields));
    size_t n = 0;
    for (size_t i = 0; i < h->num_headers; i++)
        if (!um_str_eq_ci(h->headers[i].name, "content-range")) fields[n++] = h->headers[i];
    int k = snprintf(rf->field, sizeof(rf->field), "%" PRIu64 "-%" PRIu64 "/%" PRIu64, first, last,
                     complete);
    fields[n++] = (struct um_header){UM_STR(SLICE_FIELD), {rf->field, (size_t)k}};
    fields[n++] = (struct um_header){UM_STR("Surrogate-Key"), {rf->tag, strlen(rf->tag)}};
    struct um_response_head out = *h;
    out.status = 200;
    out.reason = (um_str){NULL, 0};
    out.headers = fields;
    out.num_headers = n;
    out.content_length = (int64_t)(last - first + 1);
    out.wire = (um_str){NULL, 0};
    out.num_wire = 0;
    c->ops->on_head(c, &out);
    free(fields);
}

static size_t range_on_data(struct um_sink *s, const char *data, size_t len)
{
    struct range_fetch *rf = um_container_of(s, struct range_fetch, sink);
    return rf->bad ? len : rf->client->ops->on_data(rf->client, data, len);
}

static size_t range_on_data_ref(struct um_sink *s, const char *data, size_t len,
                                void (*release)(void *ctx), void *ctx)
{
    struct range_fetch *rf = um_container_of(s, struct range_fetch, sink);
    if (rf->bad) {
        release(ctx);
        return len;
    }
    return rf->client->ops->on_data_ref(rf->client, data, len, release, ctx);
}

static void range_on_file(struct um_sink *s, int fd, uint64_t off, uint64_t len)
{
    struct range_fetch *rf = um_container_of(s, struct range_fetch, sink);
    if (rf->bad) {
        close(fd);
        return;
    }
    rf->client->ops->on_file(rf->client, fd, off, len);
}

static void range_on_end(struct um_sink *s, int err)
{
    struct range_fetch *rf = um_container_of(s, struct range_fetch, sink);
    struct um_sink *c = rf->client;
    c->origin_data = NULL;
    free(rf);
    c->ops->on_end(c, err);
}

static ssize_t range_read_body(struct um_sink *s, char *buf, size_t len)
{
    struct range_fetch *rf = um_container_of(s, struct range_fetch, sink);
    return rf->client->ops->read_body(rf->client, buf, len);
}

static void range_on_info(struct um_sink *s, int status, const struct um_header *h, size_t n)
{
    struct range_fetch *rf = um_container_of(s, struct range_fetch, sink);
    um_sink_info(rf->client, status, h, n);
}

static void range_on_flush(struct um_sink *s)
{
    struct range_fetch *rf = um_container_of(s, struct range_fetch, sink);
    um_sink_flush(rf->client);
}

static const struct um_sink_ops range_sink_ops = {
    .on_head = range_on_head,
    .on_data = range_on_data,
    .on_file = range_on_file,
    .on_end = range_on_end,
    .on_data_ref = range_on_data_ref,
    .read_body = range_read_body,
    .on_info = range_on_info,
    .on_flush = range_on_flush,
};

static void range_fetch_start(struct um_origin *o, struct um_fetch *f, struct um_sink *client)
{
    struct range_origin *ro = (struct range_origin *)o;
    um_str key = f->fill_key.base ? f->fill_key : f->cache_key, base;
    uint64_t size, k;
    if (f->req->method_id != UM_METHOD_GET || !um__cache_slice_key_parse(key, &base, &size, &k) ||
        k > UINT64_MAX / size - 1) {
        ro->inner->ops->fetch(ro->inner, f, client);
        return;
    }
    struct range_fetch *rf = um_calloc(1, sizeof(*rf));
    rf->magic = &state_magic;
    rf->sink.ops = &range_sink_ops;
    rf->client = client;
    rf->ro = ro;
    rf->off = k * size;
    rf->len = size;
    um__cache_slice_tag(base, rf->tag);
    int n = snprintf(rf->range, sizeof(rf->range), "bytes=%" PRIu64 "-%" PRIu64, rf->off,
                     rf->off + size - 1);
    static const char *const drop[] = {"range", "if-range", NULL};
    um__cache_slice_request(&rf->req, f->req, drop,
                            (struct um_header){UM_STR("Range"), {rf->range, (size_t)n}});
    struct um_fetch ff = *f;
    ff.req = &rf->req;
    client->origin_data = rf;
    um_counter_add(um_metric(&um__cache_slice_counters, C_RANGES), 1);
    ro->inner->ops->fetch(ro->inner, &ff, &rf->sink);
}

static void range_resume(struct um_origin *o, struct um_sink *client)
{
    struct range_origin *ro = (struct range_origin *)o;
    struct range_fetch *rf = range_of(client);
    if (ro->inner->ops->resume) ro->inner->ops->resume(ro->inner, rf ? &rf->sink : client);
}

static void range_body_ready(struct um_origin *o, struct um_sink *client)
{
    struct range_origin *ro = (struct range_origin *)o;
    struct range_fetch *rf = range_of(client);
    if (ro->inner->ops->body_ready) ro->inner->ops->body_ready(ro->inner, rf ? &rf->sink : client);
}

static void range_cancel(struct um_origin *o, struct um_sink *client)
{
    struct range_origin *ro = (struct range_origin *)o;
    struct range_fetch *rf = range_of(client);
    if (ro->inner->ops->cancel) ro->inner->ops->cancel(ro->inner, rf ? &rf->sink : client);
    if (rf) {
        client->origin_data = NULL;
        free(rf);
    }
}

static void range_destroy(struct um_origin *o)
{
    struct range_origin *ro = (struct range_origin *)o;
    ro->inner->ops->destroy(ro->inner);
    free(ro);
}

struct um_origin *um_slice_range_origin_create(struct um_origin *inner)
{
    struct range_origin *ro = um_calloc(1, sizeof(*ro));
    ro->ops = (struct um_origin_ops){
        .flags = inner->ops->flags,
        .fetch = range_fetch_start,
        .resume = range_resume,
        .body_ready = range_body_ready,
        .cancel = range_cancel,
        .destroy = range_destroy,
    };
    ro->base.ops = &ro->ops;
    ro->inner = inner;
    return &ro->base;
}

/* ================================================================ the slice layer */
