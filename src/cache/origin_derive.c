/* SPDX-License-Identifier: BSD-2-Clause */
/* The caching layer's codings from identity (see origin.c's note and the comment below):
 * on a compressing route the fill of a coding reads the identity object through the
 * compressing layer instead of asking the origin. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* On a compressing route every coding of an object comes from one origin fetch: the fill
 * of a coding other than identity reads the stored identity object (fresh, or being
 * filled) through the compressing layer instead of asking the origin, and when there is
 * none, an identity fill is started first (without a client) and read as it arrives. A
 * revalidation's 304 freshens every coding with the validator (origin_fill.c), and a purge
 * of the URL or a tag reaches them all (same key; the tags travel with the coding). */

/* The identity fill's placeholder tag: pending like any fill's, but told apart so that
 * the lookup for the identity object never takes the coding's own fill for it. */
static const char identity_pending[2] = {TAG_PENDING, 'i'};

/* Whether req would get a coding other than identity on this route. */
static bool wants_coding(const struct cache_origin *co, const struct um_request *req)
{
    const struct um_compress_conf *cc = co->route ? um_compress_route_conf(co->route) : NULL;
    if (cc == NULL || !cc->enabled || req->method_id != UM_METHOD_GET ||
        um_http1_find_header(req, "range") != NULL)
        return false;
    return um_compress_negotiate(req->headers, req->num_headers, cc->order, cc->num_algorithms) !=
           UM_CODING_IDENTITY;
}

/* req with its Accept-Encoding fields replaced by "identity" (req has one at least: it
 * negotiated a coding). The slices are req's. */
static struct um_request *identity_request(const struct um_request *req)
{
    struct um_request *ir = um_malloc(sizeof(*ir));
    um_http1_request_copy(ir, req);
    size_t w = 0;
    for (size_t i = 0; i < ir->num_headers; i++)
        if (!um_str_eq_ci(ir->headers[i].name, "accept-encoding"))
            ir->headers[w++] = ir->headers[i];
    ir->headers[w++] = (struct um_header){UM_STR("Accept-Encoding"), UM_STR("identity")};
    ir->num_headers = w;
    return ir;
}

/* The identity object of the request arg: a stored variant it matches, or an identity
 * fill in progress (never another coding's fill, whose head is not known yet). */
static bool match_identity(const struct um_cache_obj *obj, void *arg)
{
    um_str tag = um_cache_obj_tag(obj);
    if (tag.len > 0 && (tag.base[0] & TAG_PASS)) return false;
    if (tag.len > 0 && (tag.base[0] & TAG_PENDING))
        return tag.len == 2 && tag.base[1] == identity_pending[1];
    return um__cache_match(obj, arg);
}

/* Whether the complete object obj may answer without going forward; *validators: it has
 * an ETag or Last-Modified. */
static bool stored_fresh(const struct um_cache_obj *obj, time_t now, bool *validators)
{
    um_str ms, hs;
    *validators = false;
    if (!um_cache_obj_head(obj, &ms, &hs)) return false;
    const struct meta *m = (const struct meta *)(const void *)ms.base;
    if (m->flags & META_F_PASS) return false;
    *validators = m->etag_len > 0 || m->has_last_modified;
    struct um_cc scc;
    um__cache_meta_cc(m, &scc);
    int64_t age = judged_age(obj, m->lifetime, um_current_age(&m->times, now), now);
    return um_is_fresh(m->lifetime, age) && !scc.no_cache;
}

/* The identity object to make f's coding from, referenced, or NULL (then the fill asks
 * the origin as before). A stale one is revalidated (or fetched again) into a new
 * identity object that the coding reads as it fills; *forward says that this request
 * made the origin be asked. */
static struct um_cache_obj *identity_source(struct cache_origin *co, struct um_fetch *f,
                                            struct um_request *ir, um_str k, bool *forward)
{
    struct um_cache_obj *o = NULL;
    *forward = false;
    enum um_cache_result res = um_cache_lookup_or_insert(
        co->cache, k, match_identity, ir, identity_pending, sizeof(identity_pending), &o);
    if (res == UM_CACHE_NOSPACE) return NULL;
    struct um_fetch fi = *f;
    fi.req = ir;
    if (res == UM_CACHE_CREATED) {
        *forward = true;
        um__cache_fill_start(co, &fi, NULL, um_cache_obj_ref(o), NULL, um_strndup(k.base, k.len),
                             k.len, UM_FWD_URI_MISS, false, NULL);
        return o;
    }
    bool validators;
    if (um_cache_obj_state(o) == UM_CACHE_COMPLETE && um__cache_obj_coded(o)) {
        /* The origin coded it although asked for identity: nothing to make codings from. */
        um_cache_obj_unref(o);
        return NULL;
    }
    if (um_cache_obj_state(o) == UM_CACHE_FILLING || stored_fresh(o, now_sec(f->ctx), &validators)) {
        *forward = um_cache_obj_state(o) == UM_CACHE_FILLING;
        return o;
    }
    /* Stale: a new identity object ahead of it, revalidating it. */
    struct um_cache_obj *n =
        um_cache_insert(co->cache, k, identity_pending, sizeof(identity_pending));
    if (n == NULL) {
        um_cache_obj_unref(o);
        return NULL;
    }
    *forward = true;
    um__cache_fill_start(co, &fi, NULL, um_cache_obj_ref(n), o, um_strndup(k.base, k.len), k.len,
                         UM_FWD_STALE, validators, NULL);
    return n;
}

static void derive_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *sink)
{
    struct derive_src *ds = (struct derive_src *)o;
    /* The reader matches the identity object with the identity request; should it fall
     * back (the object failed, or the origin coded it after all), it asks the origin with
     * the fill's own request. */
    struct reader *r = um__cache_reader_new(ds->co, f, sink, um_cache_obj_ref(ds->obj), NULL);
    r->req = ds->req;
    r->for_coding = true;
    um__cache_reader_pump(r);
}

static void derive_resume(struct um_origin *o, struct um_sink *sink)
{
    um__cache_resume(&((struct derive_src *)o)->co->base, sink);
}

static void derive_cancel(struct um_origin *o, struct um_sink *sink)
{
    um__cache_cancel(&((struct derive_src *)o)->co->base, sink);
}

static void derive_destroy(struct um_origin *o)
{
    (void)o; /* the fill that owns it frees it (um__cache_fill_free) */
}

static const struct um_origin_ops derive_ops = {
    .fetch = derive_fetch,
    .resume = derive_resume,
    .cancel = derive_cancel,
    .destroy = derive_destroy,
};

/* Fills obj (a new object of the key, ahead of old when old is the stale coding it
 * replaces) with f's coding made from the identity object, when the route compresses and
 * f takes a coding. Returns false when it does not (key is still the caller's then). */
bool um__cache_derive_start(struct cache_origin *co, struct um_fetch *f, struct um_sink *client,
                            struct um_cache_obj *obj, struct um_cache_obj *old, char *key,
                            size_t klen, enum um_cache_fwd fwd)
{
    if (!wants_coding(co, f->req)) return false;
    struct um_request *ir = identity_request(f->req);
    bool forward;
    struct um_cache_obj *src = identity_source(co, f, ir, (um_str){key, klen}, &forward);
    if (src == NULL) {
        free(ir);
        return false;
    }
    struct derive_src *ds = um_calloc(1, sizeof(*ds));
    ds->base.ops = &derive_ops;
    ds->co = co;
    ds->obj = src;
    ds->req = ir;
    um__cache_fill_start(co, f, client, obj, old, key, klen, forward ? fwd : UM_FWD_NONE, false,
                         ds);
    return true;
}
