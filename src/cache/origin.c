/* SPDX-License-Identifier: BSD-2-Clause */
/* The caching layer (see cacheorigin.h).
 *
 * Three kinds of per-request state (a reader or a pass is the origin_data of the client's
 * sink, and starts with its struct req_ops):
 *   reader - answers from a stored object, streaming it while it is still filling; woken
 *            across threads by the store's waiter, through a task posted to its own loop;
 *   fill   - fetches from the inner origin into a new object (a miss), or a conditional
 *            request for a stale one; it is not tied to a client: a filler whose client went
 *            away goes on for the others;
 *   pass   - forwards to the inner origin untouched but for Cache-Status, and invalidates
 *            what an unsafe method changed.
 * The client that caused a fill reads from the object like every other client, so a slow
 * client never slows the fill, and the filler's and the waiters' paths are one.
 *
 * Objects: the meta block is struct meta; the head block is the stored fields serialised
 * "Name: value\r\n" (without Date, Age and the framing fields, which are sent fresh); the
 * tag holds the Vary values of the request that filled it. A response that turns out not
 * storable leaves a "hit-for-pass" marker (an object with META_F_PASS) for PASS_TTL seconds,
 * so later requests go straight to the origin instead of queueing behind one another.
 *
 * The layer's files (internal.h holds what they share): this one is the origin's table:
 * for each request it decides whether to read, fill or pass, starts fills and answers
 * PURGE; origin_reader.c is the reader (head, Range and conditionals answered from a stored
 * object, and the variant tags), origin_fill.c the fill (storing an answer for the
 * coalesced readers, revalidation, hit-for-pass markers, the worker's running fills),
 * origin_pass.c the pass (forwarding, invalidation), origin_derive.c the codings made
 * from a stored identity object. */
#include "internal.h"
#include "settings_internal.h"

#include "umbra/buf.h"

#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "umbra/module.h"

const struct um_module um_cache_module = {
    .name = "cache",
    .settings = &um_cache_settings,
    .check_reload = um__cache_check_reload,
    .slots = (struct um_context_slot *const[]){&um__cache_fills_slot, NULL},
    .counters = &um__cache_slice_counters,
};

/* ---------------------------------------------------------------- keys */

size_t um_cache_url_key_len(const struct um_request *req)
{
    return req->authority.len + 1 + req->path.len +
           ((req->flags & UM_REQ_F_HAS_QUERY) ? req->query.len + 1 : 0);
}

/* w with its bytes 'A'..'Z' lowered. Each byte's low seven bits plus a constant set its
 * top bit when it is at least 'A' (resp. past 'Z'), with no carry into the next byte;
 * bytes >= 0x80 are left alone. */
static uint64_t lower8(uint64_t w)
{
    const uint64_t low7 = 0x7f7f7f7f7f7f7f7fULL, top = 0x8080808080808080ULL;
    uint64_t h = w & low7;
    uint64_t ge_a = h + 0x3f3f3f3f3f3f3f3fULL; /* 0x80 - 'A' */
    uint64_t gt_z = h + 0x2525252525252525ULL; /* 0x80 - ('Z' + 1) */
    uint64_t upper = ge_a & ~gt_z & ~w & top;
    return w | (upper >> 2);
}

void um_cache_url_key_write(const struct um_request *req, char *k)
{
    /* Copied, then lowered eight bytes at a time. */
    size_t n = req->authority.len, i = 0;
    memcpy(k, req->authority.base, n);
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, k + i, 8);
        w = lower8(w);
        memcpy(k + i, &w, 8);
    }
    for (; i < n; i++)
        k[i] = (char)(k[i] + ((unsigned char)(k[i] - 'A') < 26 ? 32 : 0));
    k[n] = ' ';
    char *t = k + req->authority.len + 1;
    memcpy(t, req->path.base, req->path.len);
    if (req->flags & UM_REQ_F_HAS_QUERY) {
        t[req->path.len] = '?';
        memcpy(t + req->path.len + 1, req->query.base, req->query.len);
    }
}

/* "host target": the Host (lower case, as the request said it) and the target as sent. */
char *um__cache_make_key(const struct um_request *req, size_t *len)
{
    size_t n = um_cache_url_key_len(req);
    char *k = um_malloc(n + 1);
    um_cache_url_key_write(req, k);
    k[n] = '\0';
    *len = n;
    return k;
}

/* The key of fetch f: a hook's (f->cache_key), else the URL's, NUL-terminated, written
 * into buf (size bytes, on the caller's stack) when it fits, else malloc'd: give it back
 * with key_drop, or make it the fill's with key_keep. */
static char *fetch_key(const struct um_fetch *f, char *buf, size_t size, size_t *len)
{
    size_t n = f->cache_key.base ? f->cache_key.len : um_cache_url_key_len(f->req);
    char *k = n < size ? buf : um_malloc(n + 1);
    if (f->cache_key.base)
        memcpy(k, f->cache_key.base, n);
    else
        um_cache_url_key_write(f->req, k);
    k[n] = '\0';
    *len = n;
    return k;
}

static void key_drop(char *key, const char *buf)
{
    if (key != buf)
        free(key);
}

/* A key the caller owns from now on (a fill keeps its key). */
static char *key_keep(char *key, const char *buf, size_t len)
{
    return key == buf ? um_strndup(key, len) : key;
}

#define KEY_STACK 512

/* Whether obj is a stored response at all (not a hit-for-pass marker), whatever it Varies
 * on: the match callback of the vary-miss check. */
static bool match_any(const struct um_cache_obj *obj, void *arg)
{
    (void)arg;
    um_str tag = um_cache_obj_tag(obj);
    return tag.len == 0 || !(tag.base[0] & TAG_PASS);
}

/* A fill in progress that the request arg can read (the match callback that joins a
 * running revalidation or refetch). */
static bool match_filling(const struct um_cache_obj *obj, void *arg)
{
    return um_cache_obj_state(obj) == UM_CACHE_FILLING && um__cache_match(obj, arg);
}

/* ---------------------------------------------------------------- starting fills */

/* Starts a fill of obj (NULL for a revalidation of old) for the request f; the client
 * becomes a reader of obj. ds: a coding made from the identity object (origin_derive.c). */
void um__cache_fill_start(struct cache_origin *co, struct um_fetch *f, struct um_sink *client,
                           struct um_cache_obj *obj, struct um_cache_obj *old, char *key,
                           size_t key_len, enum um_cache_fwd fwd, bool conditional,
                           struct derive_src *ds)
{
    struct fill *fl = um__cache_fill_new(f->ctx);
    fl->co = co;
    /* A fill may outlive its client, and so the client's hold on the snapshot that owns
     * co and the inner origin (a reload can retire it meanwhile): it holds its own. */
    um_config_ref(co->config);
    fl->sink.ops = &um__cache_fill_ops;
    fl->ctx = f->ctx;
    fl->obj = obj;
    fl->old = old;
    /* A background refresh (no client, nothing to fill yet) holds old's refresh claim. */
    fl->claimed = client == NULL && obj == NULL && old != NULL;
    fl->key = key;
    fl->key_len = key_len;
    fl->request_time = now_sec(f->ctx);
    fl->has_ttl = f->has_ttl;
    fl->ttl = f->ttl;
    fl->dsrc = ds;
    um__cache_copy_request(fl, f->req);
    struct worker_fills *wf = um_context_get(fl->ctx, &um__cache_fills_slot);
    fl->next_active = wf->active;
    if (wf->active)
        wf->active->prev_active = fl;
    wf->active = fl;

    /* The client reads from the object (or, for a revalidation, waits for its answer). A
     * background refresh has no client. */
    if (client) {
        struct reader *r =
            um__cache_reader_new(co, f, client, um_cache_obj_ref(obj ? obj : old), NULL);
        r->cs.fwd = fwd;
        if (ds && fwd == UM_FWD_NONE) {
            /* Made from the stored identity object: nothing went forward. */
            r->cs.hit = true;
            r->cs.detail = "coding-from-identity";
        }
        r->waiting = obj == NULL;
        fl->own = r;
    }

    struct um_fetch ff = *f;
    ff.req = &fl->req;
    struct um_header extra[2];
    size_t nextra = 0;
    char etag_buf[256], lm_buf[64];
    if (old && (obj == NULL || conditional)) {
        /* Conditional request with the stored validators (RFC 9111 4.3.1). */
        fl->revalidating = true;
        um_str ometa, ohead;
        if (um_cache_obj_head(old, &ometa, &ohead)) {
            struct um_header of[MAX_OUT_FIELDS];
            size_t on = um__cache_head_fields(ohead, of, MAX_OUT_FIELDS);
            for (size_t i = 0; i < on; i++) {
                if (um_str_eq_ci(of[i].name, "etag") && of[i].value.len < sizeof(etag_buf)) {
                    memcpy(etag_buf, of[i].value.base, of[i].value.len);
                    extra[nextra++] = (struct um_header){UM_STR("If-None-Match"), {etag_buf, of[i].value.len}};
                } else if (um_str_eq_ci(of[i].name, "last-modified") && of[i].value.len < sizeof(lm_buf)) {
                    memcpy(lm_buf, of[i].value.base, of[i].value.len);
                    extra[nextra++] = (struct um_header){UM_STR("If-Modified-Since"), {lm_buf, of[i].value.len}};
                }
                if (nextra == 2)
                    break;
            }
        }
    }
    /* The client's own conditionals are not the cache's: the fill asks for the full
     * response (or validates the stored one). */
    size_t w = 0;
    for (size_t i = 0; i < fl->req.num_headers; i++) {
        um_str n = fl->req.headers[i].name;
        if (um_str_eq_ci(n, "if-none-match") || um_str_eq_ci(n, "if-modified-since") ||
            um_str_eq_ci(n, "range") || um_str_eq_ci(n, "if-range"))
            continue;
        fl->req.headers[w++] = fl->req.headers[i];
    }
    fl->req.num_headers = w;
    for (size_t i = 0; i < nextra && fl->req.num_headers < UM_HTTP1_MAX_HEADERS; i++)
        fl->req.headers[fl->req.num_headers++] = extra[i];
    /* A cluster node fills from the key's owner (the fill origin decides); a coding made
     * from the identity object goes through the compressing layer only. */
    fl->src = co->fill_origin && ds == NULL ? co->fill_origin : co->inner;
    ff.fill_key = (um_str){fl->key, fl->key_len};
    ff.source = ds ? &ds->base : NULL;
    /* A miss asks the second-level cache first; the fetch starts when that misses too. */
    if (obj && old == NULL && ds == NULL && um_cache_links(co->cache)->l2 &&
        um__cache_fill_l2_lookup(fl, &ff)) {
        if (client && client->origin_data &&
            ((struct reader *)client->origin_data)->ops == &um__cache_reader_req)
            um__cache_reader_pump(client->origin_data);
        return;
    }
    fl->src->ops->fetch(fl->src, &ff, &fl->sink);
    /* The fetch may have ended at once (an error answered synchronously): the reader
     * starts if it still exists. */
    if (client && client->origin_data && ((struct reader *)client->origin_data)->ops == &um__cache_reader_req)
        um__cache_reader_pump(client->origin_data);
}

/* ---------------------------------------------------------------- origin ops */

static bool purge_allowed(const struct cache_origin *co, const struct um_fetch *f)
{
    const struct um_cache_conf *cc = um_cache_conf(co->config);
    return um_netmask_match_text(cc->purge_allow, cc->num_purge_allow, f->client_ip);
}

static void respond_small(struct um_sink *client, int status, const char *body)
{
    /* Our own answers (PURGE, only-if-cached) carry a Cache-Status too. */
    struct um_cache_status cs = {.cache_name = CACHE_NAME, .fwd = UM_FWD_MISS};
    if (status == 504)
        cs.detail = "only-if-cached";
    char csbuf[128];
    size_t cl = um_cache_status_format(csbuf, sizeof(csbuf), &cs);
    struct um_header hs[2] = {{UM_STR("Content-Type"), UM_STR("text/plain; charset=utf-8")},
                              {UM_STR("Cache-Status"), {csbuf, cl < sizeof(csbuf) ? cl : 0}}};
    struct um_response_head h = {.status = status, .headers = hs,
                                 .num_headers = cl < sizeof(csbuf) ? 2 : 1, .cache = &cs};
    client->origin_data = NULL;
    um_sink_answer(client, &h, body);
}

/* PURGE, from an allowed client: with Surrogate-Key (or Cache-Tag, xkey) every object
 * with any of the listed tags; for a target ending in '*' every object of the Host whose
 * target starts with the rest; else the URL's (or the hook's) key. Umbra-Purge: soft marks
 * the objects stale instead of dropping them. The answer says how many were affected
 * (Umbra-Purged); a URL not in the cache is a 404. */
static void cache_purge(struct cache_origin *co, struct um_fetch *f, struct um_sink *client)
{
    const struct um_request *req = f->req;
    bool soft = false;
    um_str tags[UM_CACHE_MAX_TAGS * 4];
    size_t ntags = 0;
    for (size_t i = 0; i < req->num_headers; i++) {
        const struct um_header *h = &req->headers[i];
        if (um_str_eq_ci(h->name, "umbra-purge"))
            soft = soft || um_str_eq_ci(um_str_trim(h->value), "soft");
        else if (um_cache_is_tag_field(h->name))
            ntags = um_cache_split_tags(h->value, tags, ntags, UM_NELEMS(tags));
    }
    struct um_purge pg = {.soft = soft, .tags = tags, .ntags = ntags};
    bool has_query = (req->flags & UM_REQ_F_HAS_QUERY) != 0;
    um_str last = has_query ? req->query : req->path;
    char *pre = NULL, *host = NULL, *key = NULL;
    char kbuf[KEY_STACK];
    if (ntags > 0) {
        pg.kind = UM_PURGE_TAGS;
    } else if (last.len > 0 && last.base[last.len - 1] == '*') {
        /* The key's target is path[?query]: the prefix is that without the '*'. */
        size_t tl = req->path.len + (has_query ? 1 + req->query.len : 0) - 1;
        pre = um_malloc(tl + 1);
        host = um_malloc(req->authority.len + 1);
        memcpy(pre, req->path.base, req->path.len < tl ? req->path.len : tl);
        if (has_query && tl > req->path.len) {
            pre[req->path.len] = '?';
            memcpy(pre + req->path.len + 1, req->query.base, tl - req->path.len - 1);
        }
        for (size_t i = 0; i < req->authority.len; i++) {
            char ch = req->authority.base[i];
            host[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
        }
        pg.kind = UM_PURGE_PREFIX;
        pg.host = (um_str){host, req->authority.len};
        pg.prefix = (um_str){pre, tl};
    } else {
        size_t klen;
        key = fetch_key(f, kbuf, sizeof(kbuf), &klen);
        pg.kind = UM_PURGE_URL;
        pg.key = (um_str){key, klen};
    }
    size_t n = um_cache_purge_apply(co->cache, &pg, 0);
    bool by_url = pg.kind == UM_PURGE_URL;
    /* Carried even when nothing was here: other nodes, or the L2, may hold it. A peer's
     * own PURGE is not carried again. */
    const struct um_cache_links *links = um_cache_links(co->cache);
    if (f->ctx && links->announce && !f->from_peer && !f->peer_refused)
        links->announce(links->announce_arg, f->ctx, &pg);
    free(pre);
    free(host);
    if (key)
        key_drop(key, kbuf);
    int status = n == 0 && by_url ? 404 : 200;
    char body[96], count[24];
    int bl = status == 404 ? snprintf(body, sizeof(body), "404 Not in the cache\n")
                           : snprintf(body, sizeof(body), "200 %s %zu\n",
                                      soft ? "Marked stale:" : "Purged", n);
    int cl = snprintf(count, sizeof(count), "%zu", n);
    struct um_cache_status cs = {.cache_name = CACHE_NAME, .fwd = UM_FWD_MISS};
    char csbuf[128];
    size_t csl = um_cache_status_format(csbuf, sizeof(csbuf), &cs);
    struct um_header hs[3] = {{UM_STR("Content-Type"), UM_STR("text/plain; charset=utf-8")},
                              {UM_STR("Umbra-Purged"), {count, (size_t)cl}},
                              {UM_STR("Cache-Status"), {csbuf, csl < sizeof(csbuf) ? csl : 0}}};
    struct um_response_head h = {.status = status, .headers = hs,
                                 .num_headers = csl < sizeof(csbuf) ? 3 : 2, .cache = &cs};
    client->origin_data = NULL;
    (void)bl;
    um_sink_answer(client, &h, body);
}

/* A stored object obj (referenced) matched req: answers from it, revalidates it, or fetches
 * it again. Returns false when the request goes on as a miss (obj given back, key still
 * the caller's). */
static bool serve_stored(struct cache_origin *co, struct um_fetch *f, struct um_sink *client,
                         struct um_cache_obj *obj, const struct um_req_meta *qm, char *key,
                         char *kbuf, size_t klen)
{
    const struct um_request *req = f->req;
    um_str k = {key, klen};
    um_str ms, hs;
    enum um_cache_state st = um_cache_obj_state(obj);
    if (st == UM_CACHE_FILLING || !um_cache_obj_head(obj, &ms, &hs)) {
        /* Coalesced: stream it as it arrives. */
        key_drop(key, kbuf);
        struct reader *r = um__cache_reader_new(co, f, client, obj, qm);
        r->cs.fwd = UM_FWD_URI_MISS;
        r->cs.collapsed = true;
        um__cache_reader_pump(r);
        return true;
    }
    const struct meta *m = (const struct meta *)(const void *)ms.base;
    if (m->flags & META_F_PASS) {
        key_drop(key, kbuf);
        um_cache_obj_unref(obj);
        um__cache_pass_start(co, f, client, UM_FWD_URI_MISS, "hit-for-pass");
        return true;
    }
    /* What the stored head says was parsed when it was stored. */
    struct um_cc scc;
    um__cache_meta_cc(m, &scc);
    time_t now = now_sec(f->ctx);
    struct um_stored_view v = {&scc, m->lifetime, um_current_age(&m->times, now),
                               m->etag_len > 0 || m->has_last_modified};
    v.age = judged_age(obj, v.lifetime, v.age, now); /* soft-purged: stale since */
    enum um_cache_use use = um_cache_decide(&v, qm);
    if (use == UM_USE_FRESH || use == UM_USE_STALE || use == UM_USE_STALE_WHILE_REVALIDATE) {
        if (use == UM_USE_STALE_WHILE_REVALIDATE && req->method_id == UM_METHOD_GET &&
            um_cache_obj_claim_refresh(obj)) {
            /* Served stale; one refresh in the background (a conditional request when
             * there are validators), claimed on the object so that the requests
             * arriving meanwhile, on any worker, get the stale object too and send
             * nothing. The answer replaces the object. */
            um__cache_fill_start(co, f, NULL, NULL, um_cache_obj_ref(obj), um_strndup(key, klen),
                                 klen, UM_FWD_STALE, true, NULL);
        }
        key_drop(key, kbuf);
        struct reader *r = um__cache_reader_new(co, f, client, obj, qm);
        /* A stale copy is still a hit (RFC 9211 2.1: this request did not go forward;
         * the refresh is the cache's own), told apart by its negative ttl. */
        r->cs.hit = true;
        if (use == UM_USE_STALE_WHILE_REVALIDATE)
            r->cs.detail = "stale-while-revalidate";
        um__cache_reader_pump(r);
        return true;
    }
    if (use == UM_USE_GATEWAY_TIMEOUT) {
        key_drop(key, kbuf);
        um_cache_obj_unref(obj);
        respond_small(client, 504, "504 Gateway Timeout: not in the cache (only-if-cached)\n");
        return true;
    }
    /* Stored and fresh, yet forwarded: the request asked for it (no-cache, max-age). */
    bool asked = qm->cc.no_cache || qm->cc.max_age >= 0 || qm->cc.min_fresh >= 0;
    enum um_cache_fwd why = um_is_fresh(v.lifetime, v.age) && !scc.no_cache && asked
                                ? UM_FWD_REQUEST
                                : UM_FWD_STALE;
    if (req->method_id == UM_METHOD_GET) {
        /* Revalidate (with validators) or fetch again (without), into a new object
         * ahead of this one, which may still stand in if the origin fails. The new
         * object is made atomically with the check for one already being filled, so
         * that of many requests for a stale object, on any worker, one goes to the
         * origin and the others stream its answer (a 304 fills it from the stored
         * body). */
        static const char pend = TAG_PENDING;
        struct um_cache_obj *nobj = NULL;
        enum um_cache_result res = um_cache_lookup_or_insert(
            co->cache, k, match_filling, (void *)req, &pend, 1, &nobj);
        if (res == UM_CACHE_FOUND) {
            key_drop(key, kbuf);
            um_cache_obj_unref(obj);
            struct reader *r = um__cache_reader_new(co, f, client, nobj, qm);
            r->cs.fwd = why;
            r->cs.collapsed = true;
            um__cache_reader_pump(r);
            return true;
        }
        if (res == UM_CACHE_CREATED) {
            key = key_keep(key, kbuf, klen);
            if (um__cache_derive_start(co, f, client, nobj, obj, key, klen, why))
                return true;
            um__cache_fill_start(co, f, client, nobj, obj, key, klen, why,
                                 use == UM_USE_REVALIDATE, NULL);
            return true;
        }
    }
    um_cache_obj_unref(obj);
    if (req->method_id == UM_METHOD_GET) {
        key_drop(key, kbuf);
        um__cache_pass_start(co, f, client, UM_FWD_MISS, "no-room");
        return true;
    }
    return false;
}

static void cache_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *client)
{
    struct cache_origin *co = (struct cache_origin *)o;
    const struct um_request *req = f->req;
    client->origin_data = NULL;
    if (um_str_eq(req->method, "PURGE")) {
        if (!f->from_peer && !purge_allowed(co, f)) {
            respond_small(client, 403, "403 Forbidden: PURGE is not allowed from here\n");
            return;
        }
        cache_purge(co, f, client);
        return;
    }
    bool body = (req->flags & UM_REQ_F_CHUNKED) ||
                ((req->flags & UM_REQ_F_CONTENT_LENGTH) && req->content_length > 0);
    if ((req->method_id != UM_METHOD_GET && req->method_id != UM_METHOD_HEAD) || body) {
        um__cache_pass_start(co, f, client, UM_FWD_METHOD, NULL);
        return;
    }
    if (f->no_cache) {
        um__cache_pass_start(co, f, client, UM_FWD_BYPASS, "hook");
        return;
    }
    struct um_req_meta qm;
    um_req_meta_scan(&qm, req->method_id, req->headers, req->num_headers);
    if (qm.cc.no_store) {
        um__cache_pass_start(co, f, client, UM_FWD_REQUEST, "no-store");
        return;
    }
    char kbuf[KEY_STACK];
    size_t klen;
    char *key = fetch_key(f, kbuf, sizeof(kbuf), &klen);
    um_str k = {key, klen};
    struct um_cache_obj *obj = um_cache_lookup(co->cache, k, um__cache_match, (void *)req);
    if (obj) {
        if (serve_stored(co, f, client, obj, &qm, key, kbuf, klen))
            return;
    } else if (qm.cc.only_if_cached) {
        key_drop(key, kbuf);
        respond_small(client, 504, "504 Gateway Timeout: not in the cache (only-if-cached)\n");
        return;
    }
    /* Nothing for these request headers: is something stored for other ones (vary-miss)? */
    enum um_cache_fwd miss = UM_FWD_URI_MISS;
    if (obj == NULL) {
        struct um_cache_obj *any = um_cache_lookup(co->cache, k, match_any, NULL);
        if (any) {
            miss = UM_FWD_VARY_MISS;
            um_cache_obj_unref(any);
        }
    }
    if (req->method_id == UM_METHOD_HEAD) {
        key_drop(key, kbuf);
        um__cache_pass_start(co, f, client, UM_FWD_URI_MISS, NULL);
        return;
    }
    struct um_cache_obj *nobj = NULL;
    static const char pending = TAG_PENDING;
    enum um_cache_result res =
        um_cache_lookup_or_insert(co->cache, k, um__cache_match, (void *)req, &pending, 1, &nobj);
    if (res == UM_CACHE_NOSPACE) {
        key_drop(key, kbuf);
        um__cache_pass_start(co, f, client, UM_FWD_URI_MISS, "no-room");
        return;
    }
    if (res == UM_CACHE_FOUND) {
        key_drop(key, kbuf);
        struct reader *r = um__cache_reader_new(co, f, client, nobj, &qm);
        r->cs.fwd = UM_FWD_URI_MISS;
        r->cs.collapsed = true;
        um__cache_reader_pump(r);
        return;
    }
    key = key_keep(key, kbuf, klen);
    if (um__cache_derive_start(co, f, client, nobj, NULL, key, klen, miss))
        return;
    um__cache_fill_start(co, f, client, nobj, NULL, key, klen, miss, false, NULL);
}

static void reader_resume(struct cache_origin *co, void *d)
{
    (void)co;
    um__cache_reader_pump(d);
}

static void reader_cancel(struct cache_origin *co, void *d)
{
    (void)co;
    struct reader *r = d;
    um__cache_forget_own(r);
    um__cache_reader_release(r);
    um__cache_reader_free(r);
}

static void noop(struct cache_origin *co, void *d)
{
    (void)co;
    (void)d;
}

const struct req_ops um__cache_reader_req = {
    .resume = reader_resume,
    .body_ready = noop,
    .cancel = reader_cancel,
};

static void pass_resume(struct cache_origin *co, void *d)
{
    struct pass *p = d;
    if (p->fill)
        p->fill->src->ops->resume(p->fill->src, &p->fill->sink);
    else
        co->inner->ops->resume(co->inner, &p->sink);
}

static void pass_body_ready(struct cache_origin *co, void *d)
{
    co->inner->ops->body_ready(co->inner, &((struct pass *)d)->sink);
}

static void pass_cancel(struct cache_origin *co, void *d)
{
    struct pass *p = d;
    if (p->fill) {
        /* A fill forwarding to this pass: nobody else wants its answer. */
        struct fill *fl = p->fill;
        fl->fwd = NULL;
        fl->src->ops->cancel(fl->src, &fl->sink);
        um__cache_fill_free(fl);
        free(p);
        return;
    }
    co->inner->ops->cancel(co->inner, &p->sink);
    um__cache_pass_free(p);
}

const struct req_ops um__cache_pass_req = {
    .resume = pass_resume,
    .body_ready = pass_body_ready,
    .cancel = pass_cancel,
};

void um__cache_resume(struct um_origin *o, struct um_sink *client)
{
    void *d = client->origin_data;
    if (d)
        (*(const struct req_ops **)d)->resume((struct cache_origin *)o, d);
}

static void cache_body_ready(struct um_origin *o, struct um_sink *client)
{
    void *d = client->origin_data;
    if (d)
        (*(const struct req_ops **)d)->body_ready((struct cache_origin *)o, d);
}

void um__cache_cancel(struct um_origin *o, struct um_sink *client)
{
    void *d = client->origin_data;
    if (d == NULL)
        return;
    client->origin_data = NULL;
    (*(const struct req_ops **)d)->cancel((struct cache_origin *)o, d);
}

static void cache_destroy(struct um_origin *o)
{
    struct cache_origin *co = (struct cache_origin *)o;
    if (co->fill_origin)
        co->fill_origin->ops->destroy(co->fill_origin);
    co->inner->ops->destroy(co->inner);
    free(co);
}

static const struct um_origin_ops cache_ops = {
    .flags = UM_ORIGIN_F_STREAM_BODY,
    .fetch = cache_fetch,
    .resume = um__cache_resume,
    .body_ready = cache_body_ready,
    .cancel = um__cache_cancel,
    .destroy = cache_destroy,
};

void um_cache_origin_set_ring(struct um_origin *o, const struct um_cache_ring *ring)
{
    struct cache_origin *co = (struct cache_origin *)o;
    co->fill_origin = ring->fill;
}

struct um_origin *um_cache_origin_create(struct um_cache *cache, struct um_origin *inner,
                                         const struct um_route *route,
                                         const struct um_config *config)
{
    const struct um_cache_conf *cc = um_cache_conf(config);
    struct cache_origin *co = um_calloc(1, sizeof(*co));
    co->base.ops = &cache_ops;
    co->inner = inner;
    co->cache = cache;
    co->config = config;
    co->route = route;
    um_cache_policy_init(&co->pol);
    co->pol.default_ttl = (int64_t)cc->default_ttl;
    co->pol.stale_if_error = (int64_t)cc->stale_if_error;
    for (size_t i = 0; i < cc->num_targeted; i++)
        co->targeted[i] = (um_str){cc->targeted[i], strlen(cc->targeted[i])};
    co->pol.targeted = co->targeted;
    co->pol.num_targeted = cc->num_targeted;
    return &co->base;
}
