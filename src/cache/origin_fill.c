/* SPDX-License-Identifier: BSD-2-Clause */
/* The caching layer's fill (see origin.c's note): it stores the inner origin's answer in
 * an object every reader of the key streams from, or, for a revalidation, freshens the
 * stale object from a 304. An answer that may not be stored is forwarded to the client
 * that caused the fill (a pass) and leaves a hit-for-pass marker. The fills a worker runs
 * are kept in its context, so that they stop with the worker. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "umbra/compress.h"
#include "umbra/buf.h"
#include "umbra/log.h"

/* The fills running on the worker (struct worker_fills). */
static void fills_stop(struct um_context *ctx, void *state);
struct um_context_slot um__cache_fills_slot = {.name = "cache fills", .stop = fills_stop};

#define PASS_TTL 60          /* seconds a hit-for-pass marker lives */

/* ---------------------------------------------------------------- tags and heads */

/* Builds the tag for a response's Vary from the request that filled it. */
/* Whether the response's coding (h) is one every request of bucket c takes: identity,
 * or c itself. An origin that compressed on its own with another coding (say br for a
 * client of the zstd bucket that also took br) must be told apart by the whole
 * Accept-Encoding instead. */
static bool bucket_fits(enum um_coding c, const struct um_header *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!um_str_eq_ci(h[i].name, "content-encoding"))
            continue;
        um_str v = um_str_trim(h[i].value);
        if (!um_str_eq_ci(v, "identity") && !um_str_eq_ci(v, um_coding_name(c)))
            return false;
    }
    return true;
}

static size_t tag_build(const struct um_vary *vary, const struct um_route *route,
                        const struct um_request *req, const struct um_header *resp,
                        size_t nresp, char *out, size_t outsz)
{
    size_t o = 0;
    out[o++] = 0;
    for (size_t i = 0; i < vary->n; i++) {
        char val[1024];
        bool present = false;
        unsigned pbyte;
        size_t vl;
        const struct um_compress_conf *cc = route ? um_compress_route_conf(route) : NULL;
        enum um_coding bucket = UM_CODING_IDENTITY;
        bool bucketed = cc && cc->enabled && um_str_eq_ci(vary->names[i], "accept-encoding");
        if (bucketed) {
            bucket = um_compress_negotiate(req->headers, req->num_headers, cc->order,
                                           cc->num_algorithms);
            bucketed = bucket_fits(bucket, resp, nresp);
        }
        if (bucketed) {
            /* The variants of a compressing route are its codings, not the spellings of
             * Accept-Encoding (internal.h, TAG_BUCKET). */
            vl = 0;
            for (size_t k = 0; k < cc->num_algorithms; k++)
                val[vl++] = (char)('0' + cc->order[k]);
            val[vl++] = (char)('0' + bucket);
            pbyte = TAG_BUCKET;
        } else {
            vl = um_vary_normalize(vary->names[i], req->headers, req->num_headers, val,
                                   sizeof(val), &present);
            pbyte = present;
        }
        if (vl >= sizeof(val))
            return 0; /* too long to keep: not stored */
        size_t nl = vary->names[i].len;
        if (o + 5 + nl + vl > outsz)
            return 0;
        out[o++] = (char)(nl >> 8);
        out[o++] = (char)nl;
        memcpy(out + o, vary->names[i].base, nl);
        o += nl;
        out[o++] = (char)pbyte;
        out[o++] = (char)(vl >> 8);
        out[o++] = (char)vl;
        memcpy(out + o, val, vl);
        o += vl;
    }
    return o;
}

bool um__cache_field_skipped(um_str name, const struct um_resp_meta *m, bool strip_tags)
{
    enum um_field_id id = um_http_field_id(name);
    switch (id) {
    case UM_FIELD_AGE:
    case UM_FIELD_CONTENT_LENGTH:
    case UM_FIELD_CACHE_STATUS:
    case UM_FIELD_TRANSFER_ENCODING:
        return true;
    case UM_FIELD_SURROGATE_KEY:
    case UM_FIELD_CACHE_TAG:
    case UM_FIELD_XKEY:
        if (strip_tags)
            return true;
        break;
    default:
        break;
    }
    return !um_cache_field_storable_id(name, id, m);
}

/* Serialises the fields of a response worth storing. Returns a malloc'd block. The tag
 * fields are kept in the object's tags, and in the head only when clients are to see
 * them (cache.expose_tags). */
char *um__cache_head_block(const struct cache_origin *co, const struct um_header *h, size_t n,
                           const struct um_resp_meta *m, size_t *len)
{
    bool strip_tags = !um_cache_conf(co->config)->expose_tags;
    size_t cap = 0;
    for (size_t i = 0; i < n; i++)
        cap += h[i].name.len + h[i].value.len + 4;
    char *b = um_malloc(cap + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (um__cache_field_skipped(h[i].name, m, strip_tags))
            continue;
        memcpy(b + o, h[i].name.base, h[i].name.len);
        o += h[i].name.len;
        b[o++] = ':';
        b[o++] = ' ';
        memcpy(b + o, h[i].value.base, h[i].value.len);
        o += h[i].value.len;
        b[o++] = '\r';
        b[o++] = '\n';
    }
    *len = o;
    return b;
}


/* ---------------------------------------------------------------- per-worker fills */

/* The first of the worker's fills, or NULL. */
struct fill *um__cache_first_fill(const struct um_context *ctx)
{
    struct worker_fills *wf = um_context_get(ctx, &um__cache_fills_slot);
    return wf ? wf->active : NULL;
}

struct worker_fills *um__cache_worker_fills(struct um_context *ctx)
{
    struct worker_fills *wf = um_context_get(ctx, &um__cache_fills_slot);
    if (wf == NULL) {
        wf = um_calloc(1, sizeof(*wf));
        wf->ctx = ctx;
        um_context_set(ctx, &um__cache_fills_slot, wf);
    }
    return wf;
}

/* ---------------------------------------------------------------- fills */

#define SPARE_FILLS_MAX 64

struct fill *um__cache_fill_new(struct um_context *ctx)
{
    struct worker_fills *wf = um__cache_worker_fills(ctx);
    struct fill *fl = wf->free_fills;
    if (fl != NULL) {
        wf->free_fills = fl->next_active;
        wf->num_free_fills--;
    } else {
        fl = um_malloc(sizeof(*fl));
    }
    memset(fl, 0, offsetof(struct fill, req));
    return fl;
}

/* Copies the request head so that the fill can outlive the client's buffer. The slices
 * may point anywhere (a hook's rewrites live in the connection's arena): each is copied. */
void um__cache_copy_request(struct fill *fl, const struct um_request *req)
{
    size_t len = req->method.len + req->target.len + req->path.len + req->query.len +
                 req->authority.len;
    for (size_t i = 0; i < req->num_headers; i++)
        len += req->headers[i].name.len + req->headers[i].value.len;
    fl->head_copy = um_malloc(len + 1);
    char *p = fl->head_copy;
    um_http1_request_copy(&fl->req, req);
#define COPY(s)                                                                                    \
    do {                                                                                           \
        if ((s).len > 0)                                                                           \
            memcpy(p, (s).base, (s).len);                                                          \
        (s).base = p;                                                                              \
        p += (s).len;                                                                              \
    } while (0)
    COPY(fl->req.method);
    COPY(fl->req.target);
    COPY(fl->req.path);
    COPY(fl->req.query);
    COPY(fl->req.authority);
    for (size_t i = 0; i < fl->req.num_headers; i++) {
        COPY(fl->req.headers[i].name);
        COPY(fl->req.headers[i].value);
    }
#undef COPY
}

void um__cache_fill_free(struct fill *fl)
{
    if (fl->l2_get) {
        struct um_cache_l2 *l2 = um_cache_links(fl->co->cache)->l2;
        l2->ops->cancel(l2, fl->ctx, fl->l2_get);
    }
    free(fl->fetch_copy);
    if (fl->drop_posted)
        um_loop_unpost(fl->ctx->loop, &fl->drop);
    struct worker_fills *wf = um_context_get(fl->ctx, &um__cache_fills_slot);
    if (fl->prev_active)
        fl->prev_active->next_active = fl->next_active;
    else if (wf && wf->active == fl)
        wf->active = fl->next_active;
    if (fl->next_active)
        fl->next_active->prev_active = fl->prev_active;
    if (fl->obj) {
        um_cache_obj_finish(fl->obj, false); /* no-op when already finished */
        um_cache_obj_unref(fl->obj);
    }
    if (fl->old) {
        if (fl->claimed)
            um_cache_obj_release_refresh(fl->old);
        um_cache_obj_unref(fl->old);
    }
    if (fl->dsrc) {
        um_cache_obj_unref(fl->dsrc->obj);
        free(fl->dsrc->req);
        free(fl->dsrc);
        fl->dsrc = NULL;
    }
    free(fl->key);
    free(fl->head_copy);
    um_config_unref(fl->co->config);
    if (wf == NULL || wf->num_free_fills >= SPARE_FILLS_MAX) {
        free(fl);
        return;
    }
    fl->next_active = wf->free_fills;
    wf->free_fills = fl;
    wf->num_free_fills++;
}

static void leave_pass_marker(struct fill *fl)
{
    struct um_cache_obj *o = um_cache_insert(fl->co->cache, (um_str){fl->key, fl->key_len}, "\1", 1);
    if (o == NULL)
        return;
    struct meta base = {.flags = META_F_PASS, .content_length = -1};
    size_t mlen;
    struct meta *m = um__cache_meta_build(&base, (um_str){"", 0}, NULL, &mlen);
    int rc = um_cache_obj_set_head(o, m, mlen, "", 0);
    free(m);
    if (rc == UM_OK) {
        um_cache_obj_set_expires(o, now_sec(fl->ctx) + PASS_TTL);
        um_cache_obj_set_stale_until(o, now_sec(fl->ctx) + PASS_TTL);
        um_cache_obj_finish(o, true);
    }
    um_cache_obj_unref(o);
}

/* The fill's own client, still waiting for a head, is answered directly instead. */
static struct um_sink *fill_take_own_client(struct fill *fl, struct um_fetch *f)
{
    struct reader *r = fl->own;
    if (r == NULL || r->head_sent)
        return NULL;
    fl->own = NULL;
    struct um_sink *client = r->client;
    *f = r->fetch;
    um__cache_reader_release(r);
    um__cache_reader_free(r);
    return client;
}

/* Points the fill's own reader at obj and lets it go. */
void um__cache_own_switch(struct fill *fl, struct um_cache_obj *obj, int fwd_status)
{
    struct reader *r = fl->own;
    if (r == NULL)
        return;
    fl->own = NULL;
    if (r->obj != obj) {
        um_cache_obj_unwait(r->obj, &r->waiter);
        um_cache_obj_unref(r->obj);
        r->obj = um_cache_obj_ref(obj);
        um_cache_cursor_init(&r->cur, obj);
    }
    r->cs.fwd_status = fwd_status;
    r->waiting = false;
    um__cache_reader_pump(r);
}

/* A hook's freshness lifetime for this response, or -1: the head's (on_response) wins
 * over the request's (on_request). */
int64_t um__cache_hook_ttl(const struct fill *fl, const struct um_response_head *h)
{
    return h->has_ttl ? h->ttl : fl->has_ttl ? fl->ttl : -1;
}

static void fill_on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct fill *fl = um_container_of(s, struct fill, sink);
    struct cache_origin *co = fl->co;
    time_t response_time = now_sec(fl->ctx);
    fl->status = h->status;
    if (fl->own && h->cache && h->cache->hit) {
        /* Answered by the disk tier beneath (origin_disk.c): a hit, said as it says. */
        fl->own->cs.hit = true;
        fl->own->cs.detail = h->cache->detail;
    }
    struct um_resp_meta rm;
    um_resp_meta_scan(&rm, h->status, h->headers, h->num_headers);
    um_resp_meta_target(&rm, &co->pol);
    struct um_req_meta qm;
    um_req_meta_scan(&qm, fl->req.method_id, fl->req.headers, fl->req.num_headers);

    if (fl->revalidating && h->status == 304 && fl->old) {
        um__cache_fill_freshen(fl, h, &rm, response_time);
        return;
    }

    if (fl->old && h->status >= 500 && um__cache_fill_stale_if_error(fl, h, &qm, response_time))
        return;

    enum um_nostore why = um_cache_storable(&qm, &rm, &co->pol, response_time);
    int64_t ttl = um__cache_hook_ttl(fl, h);
    /* A hook's lifetime stands in for missing freshness information; it does not make
     * shareable what the response or the request keep private. */
    if (ttl > 0 && (why == UM_NOSTORE_UNCACHEABLE || why == UM_NOSTORE_USELESS))
        why = UM_STORABLE;
    if (why == UM_STORABLE && (h->no_store || ttl == 0))
        why = UM_NOSTORE_HOOK;
    /* A disk hit not promoted: passed to the client, no pass marker (it is cached below). */
    bool below = h->not_promoted && h->cache && h->cache->hit;
    if (below) why = UM_NOSTORE_HOOK;
    size_t taglen = 0;
    char tag[2048];
    if (why == UM_STORABLE) {
        taglen = tag_build(&rm.vary, co->route, &fl->req, h->headers, h->num_headers, tag,
                           sizeof(tag));
        if (taglen == 0)
            why = UM_NOSTORE_VARY;
    }
    bool fresh_object = false;
    if (why == UM_STORABLE && fl->obj == NULL) {
        /* A revalidation answered in full: a new object replaces the old one. */
        fl->obj = um_cache_insert(co->cache, (um_str){fl->key, fl->key_len}, tag, taglen);
        fresh_object = fl->obj != NULL;
    }
    bool stored = false;
    if (why == UM_STORABLE && fl->obj) {
        struct meta m = {0};
        m.status = h->status;
        um_age_times_init(&m.times, &rm, fl->request_time, response_time);
        enum um_fresh_source src;
        m.lifetime = ttl >= 0 ? ttl : um_freshness_lifetime(&rm, &co->pol, response_time, &src);
        m.content_length = h->content_length;
        size_t blen, mlen;
        char *block = um__cache_head_block(co, h->headers, h->num_headers, &rm, &blen);
        struct meta *mb = um__cache_meta_build(&m, (um_str){block, blen}, &co->pol, &mlen);
        um_str tags[UM_CACHE_MAX_TAGS * 2];
        size_t ntags = um_cache_response_tags(h->headers, h->num_headers, tags, UM_NELEMS(tags));
        int rc = UM_ERR;
        if (um_cache_obj_set_tag(fl->obj, tag, taglen) == UM_OK &&
            (h->content_length < 0 || um_cache_obj_expect(fl->obj, (size_t)h->content_length) == UM_OK) &&
            um_cache_obj_set_tags(fl->obj, tags, ntags) == UM_OK)
            rc = um_cache_obj_set_head(fl->obj, mb, mlen, block, blen);
        free(mb);
        if (rc == UM_OK) {
            int64_t expires = response_time + (m.lifetime - um_current_age(&m.times, response_time));
            int64_t keep = 0;
            if (rm.cc.stale_while_revalidate > keep)
                keep = rm.cc.stale_while_revalidate;
            if (rm.cc.stale_if_error > keep)
                keep = rm.cc.stale_if_error;
            if (co->pol.stale_if_error > keep)
                keep = co->pol.stale_if_error;
            if ((rm.etag.len > 0 || rm.has_last_modified) && keep < VALIDATOR_KEEP)
                keep = VALIDATOR_KEEP;
            um_cache_obj_set_expires(fl->obj, expires);
            um_cache_obj_set_stale_until(fl->obj, expires + keep);
            stored = true;
            if (fl->own) {
                fl->own->cs.stored = true;
                fl->own->cs.fwd_status = h->status;
            }
            if (fl->old)
                um_cache_unlink(co->cache, fl->old);
        }
        free(block);
        if (stored && fresh_object)
            um__cache_own_switch(fl, fl->obj, h->status);
    }
    if (!stored) {
        /* Not kept: the waiters go to the origin on their own (the object aborts), later
         * requests pass straight through for a while, and our own client is answered
         * directly from this fetch. */
        bool response_reason = why != UM_NOSTORE_REQUEST_NO_STORE &&
                               why != UM_NOSTORE_AUTHORIZATION && why != UM_NOSTORE_METHOD &&
                               !below;
        if (fl->obj) {
            um_cache_obj_finish(fl->obj, false);
            um_cache_obj_unref(fl->obj);
            fl->obj = NULL;
        }
        if (response_reason && !fl->revalidating)
            leave_pass_marker(fl);
        struct um_fetch f;
        struct um_sink *client = fill_take_own_client(fl, &f);
        if (client) {
            /* Become a pass for the client: the rest of this fetch goes to it. */
            struct pass *p = um_calloc(1, sizeof(*p));
            p->ops = &um__cache_pass_req;
            p->co = co;
            p->sink.ops = &um__cache_pass_ops;
            p->client = client;
            p->req = f.req;
            p->scheme = f.scheme;
            p->cs.cache_name = CACHE_NAME;
            p->cs.fwd = fl->revalidating ? UM_FWD_STALE : UM_FWD_URI_MISS;
            p->cs.detail = why == UM_STORABLE ? "too-large" : um_cache_nostore_str(why);
            client->origin_data = p;
            p->fill = fl;
            fl->fwd = p;
            um__cache_pass_on_head(&p->sink, h);
        } else {
            fl->discard = true;
        }
    }
}

static void on_fill_drop(struct um_task *t)
{
    struct fill *fl = um_container_of(t, struct fill, drop);
    fl->drop_posted = false;
    /* A pass still here has sent its client the whole range it asked for (fill_on_data). */
    struct pass *p = fl->fwd;
    fl->fwd = NULL;
    fl->src->ops->cancel(fl->src, &fl->sink);
    if (p)
        um__cache_pass_on_end(&p->sink, UM_OK);
    um__cache_fill_free(fl);
}

static void fill_post_drop(struct fill *fl)
{
    if (fl->drop_posted)
        return;
    fl->drop_posted = true;
    fl->drop.cb = on_fill_drop;
    um_loop_post(fl->ctx->loop, &fl->drop);
}

/* A fill that stopped storing forwards to its client's pass, if any. */
static struct pass *fill_forward(struct fill *fl)
{
    return fl->fwd;
}

static size_t fill_on_data(struct um_sink *s, const char *data, size_t len)
{
    struct fill *fl = um_container_of(s, struct fill, sink);
    struct pass *p = fill_forward(fl);
    if (p) {
        size_t n = um__cache_pass_on_data(&p->sink, data, len);
        if (n > 0 && p->ranged && p->range_left == 0)
            fill_post_drop(fl); /* the client has its range: the rest is not wanted */
        return n;
    }
    if (fl->discard) {
        /* Nobody wants the rest: the fetch is stopped rather than drained, since an
         * origin's body may be huge or endless (one that never ends would be read for
         * ever). Paused until the drop runs, outside the inner origin's callback. */
        fill_post_drop(fl);
        return 0;
    }
    if (fl->handoff)
        return 0; /* the own client is still reading what was stored */
    if (fl->obj && um_cache_obj_state(fl->obj) == UM_CACHE_FILLING &&
        um_cache_obj_append(fl->obj, data, len) != UM_OK) {
        /* Too large (or no room) after all: the object is dropped. The client that caused
         * the fill reads what was stored, then gets the rest straight from this fetch
         * (paused until it catches up); clients that joined are cut short. */
        um_log_warn("cache: %.*s is larger than the cache takes; not stored", (int)fl->key_len,
                    fl->key);
        if (fl->own == NULL) {
            fl->discard = true;
            fill_post_drop(fl);
            return 0;
        }
        fl->handoff = true;
        return 0;
    }
    return len;
}

static void fill_on_file(struct um_sink *s, int fd, uint64_t off, uint64_t len)
{
    (void)s;
    (void)off;
    (void)len;
    close(fd); /* upstream origins send memory only */
}

/* ---------------------------------------------------------------- second level */

/* Writes obj, which the fill stored (or freshened from a 304), to the second-level cache,
 * for the rest of its life (its stale windows included), when it is small enough. */
void um__cache_l2_write(struct fill *fl, struct um_cache_obj *obj)
{
    struct um_cache_l2 *l2 = um_cache_links(fl->co->cache)->l2;
    if (l2 == NULL || fl->from_l2 || um_cache_obj_state(obj) != UM_CACHE_COMPLETE ||
        um_cache_obj_body_len(obj) > l2->max_object)
        return;
    int64_t ttl = um_cache_obj_stale_until(obj) - (int64_t)now_sec(fl->ctx);
    if (ttl <= 0)
        return;
    struct um_buf b;
    um_buf_init(&b);
    if (um_cache_l2_encode(obj, &b)) {
        um_str tags[UM_CACHE_MAX_TAGS];
        size_t nt = um_cache_obj_tags(obj, tags, UM_CACHE_MAX_TAGS);
        l2->ops->put(l2, fl->ctx, (um_str){fl->key, fl->key_len}, b.base, b.len,
                     (uint64_t)ttl * 1000, tags, nt);
    }
    um_buf_dispose(&b);
}

/* Rebuilds fl's object from a second-level value. Returns false when the value does not
 * do (not one, another variant, not fresh, no room): the fill goes to the origin. */
static bool l2_rebuild(struct fill *fl, const char *value, size_t len)
{
    struct l2_value v;
    time_t now = now_sec(fl->ctx);
    /* Only a fresh value is served as it is: the readers of a fill take what it stores
     * without deciding again, and a stale one would need the revalidation a miss does not
     * make (the origin's answer then replaces it). */
    if (!um__cache_l2_decode(value, len, &v) || v.stale || v.expires <= (int64_t)now ||
        !um__cache_tag_matches(v.tag, &fl->req))
        return false;
    struct meta base = {.status = v.status, .times = v.times, .lifetime = v.lifetime,
                        .content_length = (int64_t)v.body.len};
    size_t mlen;
    struct meta *mb = um__cache_meta_build(&base, v.head, &fl->co->pol, &mlen);
    bool ok = um_cache_obj_set_tag(fl->obj, v.tag.base, v.tag.len) == UM_OK &&
              um_cache_obj_expect(fl->obj, v.body.len) == UM_OK &&
              um_cache_obj_set_tags(fl->obj, v.tags, v.ntags) == UM_OK &&
              um_cache_obj_set_head(fl->obj, mb, mlen, v.head.base, v.head.len) == UM_OK &&
              (v.body.len == 0 || um_cache_obj_append(fl->obj, v.body.base, v.body.len) == UM_OK);
    free(mb);
    if (!ok)
        return false;
    um_cache_obj_set_expires(fl->obj, v.expires);
    um_cache_obj_set_stale_until(fl->obj, v.stale_until);
    return true;
}

static void on_l2_done(void *arg, enum um_cache_l2_result res, const char *value, size_t len)
{
    struct fill *fl = arg;
    fl->l2_get = NULL;
    if (res == UM_L2_CLOSED) {
        um__cache_fill_free(fl); /* the worker stops: no fetch starts now */
        return;
    }
    if (res == UM_L2_HIT && l2_rebuild(fl, value, len)) {
        fl->from_l2 = true;
        if (fl->own) {
            fl->own->cs.hit = true;
            fl->own->cs.detail = "l2";
            fl->own = NULL; /* it reads the object like any reader */
        }
        um_cache_obj_finish(fl->obj, true);
        um__cache_fill_free(fl);
        return;
    }
    if (um_cache_obj_state(fl->obj) != UM_CACHE_FILLING) {
        /* A rebuild that failed half-way aborted the object: its readers fall back. */
        fl->discard = true;
        um__cache_fill_free(fl);
        return;
    }
    fl->src->ops->fetch(fl->src, &fl->l2_fetch, &fl->sink);
}

bool um__cache_fill_l2_lookup(struct fill *fl, const struct um_fetch *ff)
{
    /* The fetch may start after the client is gone: what it points to is copied. */
    const char *strs[] = {ff->path.base ? "" : NULL, ff->client_ip, ff->scheme,
                          ff->upstream_url, ff->server_name};
    size_t lens[] = {ff->path.len, ff->client_ip ? strlen(ff->client_ip) : 0,
                     ff->scheme ? strlen(ff->scheme) : 0,
                     ff->upstream_url ? strlen(ff->upstream_url) : 0,
                     ff->server_name ? strlen(ff->server_name) : 0};
    size_t total = 0;
    for (size_t i = 0; i < UM_NELEMS(lens); i++)
        total += lens[i] + 1;
    char *p = fl->fetch_copy = um_malloc(total);
    fl->l2_fetch = *ff;
    const char *srcs[] = {ff->path.base, ff->client_ip, ff->scheme, ff->upstream_url,
                          ff->server_name};
    char *dst[UM_NELEMS(lens)];
    for (size_t i = 0; i < UM_NELEMS(lens); i++) {
        dst[i] = p;
        if (strs[i] != NULL && lens[i] > 0)
            memcpy(p, srcs[i], lens[i]);
        p[lens[i]] = '\0';
        p += lens[i] + 1;
    }
    fl->l2_fetch.path = (um_str){dst[0], ff->path.len};
    fl->l2_fetch.client_ip = ff->client_ip ? dst[1] : NULL;
    fl->l2_fetch.scheme = ff->scheme ? dst[2] : NULL;
    fl->l2_fetch.upstream_url = ff->upstream_url ? dst[3] : NULL;
    fl->l2_fetch.server_name = ff->server_name ? dst[4] : NULL;
    fl->l2_fetch.cache_key = ff->cache_key.base ? (um_str){fl->key, fl->key_len} : ff->cache_key;
    fl->l2_fetch.has_body = false;
    fl->l2_fetch.body = (um_str){NULL, 0};
    fl->l2_fetch.req = &fl->req;
    struct um_cache_l2 *l2 = um_cache_links(fl->co->cache)->l2;
    fl->l2_get = l2->ops->get(l2, fl->ctx, (um_str){fl->key, fl->key_len}, on_l2_done, fl);
    if (fl->l2_get == NULL) {
        free(fl->fetch_copy);
        fl->fetch_copy = NULL;
        return false;
    }
    return true;
}

static void fill_on_end(struct um_sink *s, int err)
{
    struct fill *fl = um_container_of(s, struct fill, sink);
    struct pass *p = fill_forward(fl);
    if (p) {
        fl->fwd = NULL;
        um__cache_pass_on_end(&p->sink, err);
    } else if (fl->discard) {
    } else if (fl->obj) {
        bool ok = err == UM_OK && fl->status != 0;
        um_cache_obj_finish(fl->obj, ok);
        if (ok && fl->trailers)
            um_cache_unlink(fl->co->cache, fl->obj); /* not stored */
        else if (ok)
            um__cache_l2_write(fl, fl->obj);
    } else if (fl->own) {
        /* Nothing was stored and the own client still waits (e.g. an error before any
         * head): let it fall back to a direct fetch. */
        struct um_fetch f;
        struct um_sink *client = fill_take_own_client(fl, &f);
        if (client)
            um__cache_pass_start(fl->co, &f, client, UM_FWD_MISS, "fill-failed");
    }
    if (fl->own) {
        /* Still holding (a revalidation that ended without a head): answer from what is
         * there. */
        struct reader *r = fl->own;
        fl->own = NULL;
        if (r->waiting && !r->head_sent) {
            r->waiting = false;
            um__cache_reader_pump(r);
        }
    }
    um__cache_fill_free(fl);
}

static ssize_t fill_read_body(struct um_sink *s, char *buf, size_t len)
{
    (void)s;
    (void)buf;
    (void)len;
    return 0; /* fills are for GET without a body */
}

/* An interim response (103 Early Hints...): never stored; passed to the client that caused
 * the fill while it waits for the head (the coalesced readers get none). */
static void fill_on_info(struct um_sink *s, int status, const struct um_header *h, size_t n)
{
    struct fill *fl = um_container_of(s, struct fill, sink);
    struct pass *p = fill_forward(fl);
    if (p)
        um__cache_pass_on_info(&p->sink, status, h, n);
    else if (fl->own && !fl->own->head_sent)
        um_sink_info(fl->own->client, status, h, n);
}

/* A response with trailers is not stored (the object keeps no trailers): the clients
 * reading the fill get its body, and the next request goes to the origin. */
static void fill_on_trailers(struct um_sink *s, const struct um_header *h, size_t n)
{
    struct fill *fl = um_container_of(s, struct fill, sink);
    struct pass *p = fill_forward(fl);
    if (p)
        p->sink.ops->on_trailers(&p->sink, h, n);
    else
        fl->trailers = true;
}

const struct um_sink_ops um__cache_fill_ops = {.on_trailers = fill_on_trailers,
                                               .on_info = fill_on_info,
                                               .on_head = fill_on_head,
                                               .on_data = fill_on_data,
                                               .on_file = fill_on_file,
                                               .on_end = fill_on_end,
                                               .read_body = fill_read_body};

static void fills_stop(struct um_context *ctx, void *state)
{
    (void)ctx;
    struct worker_fills *wf = state;
    while (wf->active) {
        struct fill *fl = wf->active;
        fl->src->ops->cancel(fl->src, &fl->sink);
        struct pass *p = fill_forward(fl);
        if (p)
            free(p); /* its client is gone already */
        fl->fwd = NULL;
        fl->own = NULL;
        um__cache_fill_free(fl);
    }
    while (wf->free_fills) {
        struct fill *fl = wf->free_fills;
        wf->free_fills = fl->next_active;
        free(fl);
    }
    while (wf->free_readers) {
        struct reader *r = wf->free_readers;
        wf->free_readers = r->next_free;
        free(r);
    }
    um_context_set(wf->ctx, &um__cache_fills_slot, NULL);
    free(wf);
}

/* The fill whose own client is r, if any: it must stop pointing at r. */
void um__cache_forget_own(struct reader *r)
{
    for (struct fill *fl = um__cache_first_fill(r->ctx); fl; fl = fl->next_active) {
        if (fl->own != r)
            continue;
        fl->own = NULL;
        if (fl->handoff) {
            /* Nobody left to hand the rest to: the paused fetch is stopped. */
            fl->handoff = false;
            fl->discard = true;
            fill_post_drop(fl);
        }
    }
}
