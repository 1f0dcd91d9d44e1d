/* SPDX-License-Identifier: BSD-2-Clause */
/* The value a second-level cache keeps for an object (cacheorigin.h), and reading it back.
 *
 * Layout, integers little-endian, every length checked on the way back (the bytes come
 * from Redis, which anyone on its network may write to):
 *
 *   u8  version (L2_VERSION)          u8  flags (1: soft-purged, stale)
 *   u16 status
 *   i64 request_time, response_time, date_value, age_value, lifetime, expires, stale_until
 *   u32 tag length, tag               (the Vary values of the request that filled it)
 *   u16 number of tags, each u16 length and bytes
 *   u32 head length, head block       ("Name: value\r\n" fields, as stored)
 *   u64 body length, body
 *
 * A value of another version is a miss: after an upgrade the nodes refill from the
 * origin rather than misread each other. */
#include "internal.h"

#include <string.h>

#include "umbra/buf.h"

static void put_u(struct um_buf *b, uint64_t v, int n)
{
    char t[8];
    for (int i = 0; i < n; i++)
        t[i] = (char)(v >> (8 * i));
    um_buf_append(b, t, (size_t)n);
}

static void put_bytes(struct um_buf *b, const void *p, size_t n, int lenbytes)
{
    put_u(b, n, lenbytes);
    um_buf_append(b, p, n);
}

bool um_cache_l2_encode(const struct um_cache_obj *obj, struct um_buf *out)
{
    um_str ms, hs;
    if (um_cache_obj_state(obj) != UM_CACHE_COMPLETE || !um_cache_obj_head(obj, &ms, &hs))
        return false;
    const struct meta *m = (const struct meta *)(const void *)ms.base;
    if (m->flags & META_F_PASS)
        return false;
    um_str tag = um_cache_obj_tag(obj);
    um_str tags[UM_CACHE_MAX_TAGS];
    size_t nt = um_cache_obj_tags(obj, tags, UM_CACHE_MAX_TAGS);
    size_t body = um_cache_obj_body_len(obj);
    put_u(out, L2_VERSION, 1);
    put_u(out, um_cache_obj_marked_stale(obj) ? 1 : 0, 1);
    put_u(out, (uint64_t)m->status, 2);
    put_u(out, (uint64_t)(int64_t)m->times.request_time, 8);
    put_u(out, (uint64_t)(int64_t)m->times.response_time, 8);
    put_u(out, (uint64_t)(int64_t)m->times.date_value, 8);
    put_u(out, (uint64_t)m->times.age_value, 8);
    put_u(out, (uint64_t)m->lifetime, 8);
    put_u(out, (uint64_t)um_cache_obj_expires(obj), 8);
    put_u(out, (uint64_t)um_cache_obj_stale_until(obj), 8);
    put_bytes(out, tag.base, tag.len, 4);
    put_u(out, nt, 2);
    for (size_t i = 0; i < nt; i++)
        put_bytes(out, tags[i].base, tags[i].len, 2);
    put_bytes(out, hs.base, hs.len, 4);
    put_u(out, body, 8);
    struct um_cache_cursor cur;
    um_cache_cursor_init(&cur, obj);
    for (;;) {
        struct iovec iov[16];
        size_t n = um_cache_obj_read(obj, &cur, iov, UM_NELEMS(iov), NULL);
        if (n == 0)
            break;
        size_t got = 0;
        for (size_t i = 0; i < n; i++) {
            um_buf_append(out, iov[i].iov_base, iov[i].iov_len);
            got += iov[i].iov_len;
        }
        um_cache_cursor_advance(&cur, got);
    }
    return true;
}

struct rd {
    const unsigned char *p, *end;
    bool bad;
};

static uint64_t get_u(struct rd *r, int n)
{
    if (r->bad || r->end - r->p < n) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    return v;
}

static um_str get_bytes(struct rd *r, int lenbytes)
{
    uint64_t n = get_u(r, lenbytes);
    if (r->bad || (uint64_t)(r->end - r->p) < n) {
        r->bad = true;
        return (um_str){"", 0};
    }
    um_str s = {(const char *)r->p, (size_t)n};
    r->p += n;
    return s;
}

bool um__cache_l2_decode(const char *value, size_t len, struct l2_value *v)
{
    struct rd r = {(const unsigned char *)value, (const unsigned char *)value + len, false};
    memset(v, 0, sizeof(*v));
    if (get_u(&r, 1) != L2_VERSION)
        return false;
    v->stale = (get_u(&r, 1) & 1) != 0;
    v->status = (int)get_u(&r, 2);
    v->times.request_time = (time_t)(int64_t)get_u(&r, 8);
    v->times.response_time = (time_t)(int64_t)get_u(&r, 8);
    v->times.date_value = (time_t)(int64_t)get_u(&r, 8);
    v->times.age_value = (int64_t)get_u(&r, 8);
    v->lifetime = (int64_t)get_u(&r, 8);
    v->expires = (int64_t)get_u(&r, 8);
    v->stale_until = (int64_t)get_u(&r, 8);
    v->tag = get_bytes(&r, 4);
    size_t nt = (size_t)get_u(&r, 2);
    for (size_t i = 0; i < nt && !r.bad; i++) {
        um_str t = get_bytes(&r, 2);
        if (v->ntags < UM_CACHE_MAX_TAGS)
            v->tags[v->ntags++] = t;
    }
    v->head = get_bytes(&r, 4);
    v->body = get_bytes(&r, 8);
    if (r.bad || r.p != r.end)
        return false;
    return v->status >= 100 && v->status < 600 && v->tag.len > 0 &&
           (v->tag.base[0] & (TAG_PASS | TAG_PENDING)) == 0;
}
