/* SPDX-License-Identifier: BSD-2-Clause */
/* The caching layer's revalidation answers (see origin.c's note): a 304 freshens the
 * stored object, and every other coding of it with the same validator; a failing origin
 * lets a stale object stand in (stale-if-error). Called from the fill's on_head. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Freshens old from the 304 h (RFC 9111 4.3.4): its fields updated from the 304, its
 * body and variant tag kept, in no (the object a coalesced revalidation's readers wait on)
 * or a new object inserted ahead of old; old is unlinked once that is complete. Returns
 * the new object (referenced; COMPLETE unless it could not be stored), or NULL. */
static struct um_cache_obj *freshen(struct fill *fl, struct um_cache_obj *old,
                                    struct um_cache_obj *no, const struct um_response_head *h,
                                    const struct um_resp_meta *rm, time_t response_time)
{
    struct cache_origin *co = fl->co;
    um_str ometa, ohead;
    um_cache_obj_head(old, &ometa, &ohead);
    struct meta m;
    memcpy(&m, ometa.base, sizeof(m));
    struct um_header of[MAX_OUT_FIELDS], merged[MAX_OUT_FIELDS * 2];
    size_t on = um__cache_head_fields(ohead, of, MAX_OUT_FIELDS), mn = 0;
    for (size_t i = 0; i < on; i++) {
        bool replaced = false;
        for (size_t j = 0; j < h->num_headers && !replaced; j++)
            replaced = of[i].name.len == h->headers[j].name.len &&
                       strncasecmp(of[i].name.base, h->headers[j].name.base, of[i].name.len) == 0 &&
                       um_cache_field_updatable(h->headers[j].name, rm);
        if (!replaced) merged[mn++] = of[i];
    }
    for (size_t j = 0; j < h->num_headers && mn < UM_NELEMS(merged); j++)
        if (um_cache_field_updatable(h->headers[j].name, rm)) merged[mn++] = h->headers[j];
    struct um_resp_meta mm;
    um_resp_meta_scan(&mm, m.status, merged, mn);
    um_resp_meta_target(&mm, &co->pol);
    um_age_times_init(&m.times, &mm, fl->request_time, response_time);
    enum um_fresh_source src;
    m.lifetime = um_freshness_lifetime(&mm, &co->pol, response_time, &src);
    if (um__cache_hook_ttl(fl, h) >= 0) m.lifetime = um__cache_hook_ttl(fl, h);
    size_t blen, mlen;
    char *block = um__cache_head_block(co, merged, mn, &mm, &blen);
    struct meta *mb = um__cache_meta_build(&m, (um_str){block, blen}, &co->pol, &mlen);
    um_str otag = um_cache_obj_tag(old);
    if (no && um_cache_obj_set_tag(no, otag.base, otag.len) != UM_OK) {
        um_cache_obj_unref(no);
        no = NULL;
    } else if (no == NULL) {
        no = um_cache_insert(co->cache, (um_str){fl->key, fl->key_len}, otag.base, otag.len);
    }
    /* The tags: the 304's own tag fields, else the stored object's. */
    um_str tags[UM_CACHE_MAX_TAGS * 2];
    size_t ntags = um_cache_response_tags(h->headers, h->num_headers, tags, UM_NELEMS(tags));
    if (ntags == 0) ntags = um_cache_obj_tags(old, tags, UM_NELEMS(tags));
    if (no && um_cache_obj_set_tags(no, tags, ntags) == UM_OK &&
        um_cache_obj_set_head(no, mb, mlen, block, blen) == UM_OK &&
        um_cache_obj_adopt_body(no, old) == UM_OK) {
        int64_t expires = response_time + (m.lifetime - um_current_age(&m.times, response_time));
        um_cache_obj_set_expires(no, expires);
        um_cache_obj_set_stale_until(no, expires + VALIDATOR_KEEP);
        um_cache_obj_finish(no, true);
        um_cache_unlink(co->cache, old);
        um__cache_l2_write(fl, no); /* its new lifetime */
    } else if (no) {
        um_cache_obj_finish(no, false);
    }
    free(mb);
    free(block);
    return no;
}

/* An object's ETag without its weak prefix (len 0: none). */
static um_str opaque_etag(const struct um_cache_obj *obj)
{
    um_str ms, hs;
    if (!um_cache_obj_head(obj, &ms, &hs)) return (um_str){NULL, 0};
    const struct meta *m = (const struct meta *)(const void *)ms.base;
    um_str e = {m->etag_len ? hs.base + m->etag_off : NULL, m->etag_len};
    if (e.len >= 2 && e.base[0] == 'W' && e.base[1] == '/') {
        e.base += 2;
        e.len -= 2;
    }
    return e;
}

/* The other codings of the revalidated object are freshened by the same 304: each was
 * made from the same identity bytes, and carries the weak form of its ETag (compress.h),
 * so one revalidation refreshes every coding of the object (RFC 9111 4.3.4 freshens the
 * stored responses the validator selects). Objects without an ETag are left alone. */
static void freshen_siblings(struct fill *fl, const struct um_cache_obj *done,
                             const struct um_response_head *h, const struct um_resp_meta *rm,
                             time_t response_time)
{
    const struct um_compress_conf *cc =
        fl->co->route ? um_compress_route_conf(fl->co->route) : NULL;
    if (cc == NULL || !cc->enabled) return;
    um_str etag = opaque_etag(fl->old);
    if (etag.len == 0) return;
    struct um_cache_obj *v[16];
    size_t n = um_cache_variants(fl->co->cache, (um_str){fl->key, fl->key_len}, NULL, NULL, v,
                                 UM_NELEMS(v));
    for (size_t i = 0; i < n; i++) {
        struct um_cache_obj *o = v[i];
        if (o != fl->old && o != done && um_cache_obj_state(o) == UM_CACHE_COMPLETE) {
            um_str ms, hs;
            um_str e = opaque_etag(o);
            if (um_cache_obj_head(o, &ms, &hs) &&
                !(((const struct meta *)(const void *)ms.base)->flags & META_F_PASS) &&
                e.len == etag.len && memcmp(e.base, etag.base, e.len) == 0) {
                struct um_cache_obj *no = freshen(fl, o, NULL, h, rm, response_time);
                if (no) um_cache_obj_unref(no);
            }
        }
        um_cache_obj_unref(o);
    }
}

/* The 304 of a revalidation: the stale object and every other coding with its validator
 * freshened, the own client answered from the result. */
void um__cache_fill_freshen(struct fill *fl, const struct um_response_head *h,
                            const struct um_resp_meta *rm, time_t response_time)
{
    /* A coalesced revalidation fills the object its waiters read (fl->obj); a
     * background one makes a new object. */
    struct um_cache_obj *no = freshen(fl, fl->old, fl->obj, h, rm, response_time);
    fl->obj = NULL;
    freshen_siblings(fl, no, h, rm, response_time);
    fl->revalidating = false;
    if (no && um_cache_obj_state(no) == UM_CACHE_COMPLETE)
        um__cache_own_switch(fl, no, 304);
    else
        um__cache_own_switch(fl, fl->old, 304); /* could not store: answer from the old one */
    if (no) um_cache_obj_unref(no);
}

/* The origin fails (5xx) while old is stored: a stale answer may stand in
 * (stale-if-error, RFC 5861). Returns true when it did (the fill's answer is dropped). */
bool um__cache_fill_stale_if_error(struct fill *fl, const struct um_response_head *h,
                                   const struct um_req_meta *qm, time_t response_time)
{
    struct cache_origin *co = fl->co;
    /* The origin fails: a stale answer may stand in (stale-if-error, RFC 5861). */
    um_str ometa, ohead;
    um_cache_obj_head(fl->old, &ometa, &ohead);
    struct meta m;
    memcpy(&m, ometa.base, sizeof(m));
    struct um_header of[MAX_OUT_FIELDS];
    size_t on = um__cache_head_fields(ohead, of, MAX_OUT_FIELDS);
    struct um_resp_meta om;
    um_resp_meta_scan(&om, m.status, of, on);
    um_resp_meta_target(&om, &co->pol);
    struct um_stored_view v = {&om.cc, m.lifetime, um_current_age(&m.times, response_time), true};
    if (um_cache_stale_if_error_ok(&v, qm, &co->pol, h->status)) {
        fl->revalidating = false;
        struct um_cache_obj *stand_in = fl->old;
        if (fl->obj) {
            /* The object that was to replace it, which the coalesced requests wait on:
             * it becomes a copy of the stale one (same head, times and marks, the body
             * shared), so that they get the stale answer too rather than asking the
             * failing origin one by one. */
            struct um_cache_obj *no = fl->obj;
            fl->obj = NULL;
            um_str otag = um_cache_obj_tag(fl->old);
            um_str tags[UM_CACHE_MAX_TAGS];
            size_t nt = um_cache_obj_tags(fl->old, tags, UM_CACHE_MAX_TAGS);
            if (um_cache_obj_set_tag(no, otag.base, otag.len) == UM_OK &&
                um_cache_obj_set_tags(no, tags, nt) == UM_OK &&
                um_cache_obj_set_head(no, ometa.base, ometa.len, ohead.base, ohead.len) == UM_OK &&
                um_cache_obj_adopt_body(no, fl->old) == UM_OK) {
                um_cache_obj_set_expires(no, um_cache_obj_expires(fl->old));
                um_cache_obj_set_stale_until(no, um_cache_obj_stale_until(fl->old));
                if (um_cache_obj_marked_stale(fl->old)) um_cache_obj_mark_stale(no);
                um_cache_obj_finish(no, true);
                um_cache_unlink(co->cache, fl->old);
                stand_in = no;
            } else {
                um_cache_obj_finish(no, false);
            }
            if (fl->own) fl->own->cs.detail = "stale-if-error";
            um__cache_own_switch(fl, stand_in, h->status);
            um_cache_obj_unref(no);
            fl->discard = true;
            return true;
        }
        if (fl->own) fl->own->cs.detail = "stale-if-error";
        um__cache_own_switch(fl, stand_in, h->status);
        fl->discard = true; /* the rest of this answer goes nowhere */
        return true;
    }
    return false;
}
