/* SPDX-License-Identifier: BSD-2-Clause */
/* Large objects in slices (cache.disk.slice, umbra/cacheorigin.h): two small origin layers
 * on a route whose cache has the disk tier.
 *
 *   client -> slice layer -> cache (memory, disk) -> ... -> range layer -> upstream
 *
 * The slice layer, above the cache, answers a GET from slices: slice k of an object is the
 * bytes [k*S, (k+1)*S) of it, fetched through the cache under the object's key followed by
 * " umbra-slice:S:k" (um__cache_slice_key). The cache fills, coalesces, stores on disk,
 * revalidates and purges a slice like any object: it never learns it is one. The range
 * layer, at the bottom just above the origin, recognises a slice key in the fetch (the
 * fill's key, or the cache_key of a pass) and sends the origin "Range: bytes=k*S-
 * (k+1)*S-1"; the origin's 206 goes up as a 200 of the slice's bytes with the field
 * Umbra-Slice-Range ("FIRST-LAST/COMPLETE"), so the cache stores it as it would any 200
 * (it never stores a 206), and with a Surrogate-Key tag of its own (um__cache_slice_tag
 * of the object's key) by which a purge of the object's URL reaches every slice in memory
 * (um_cache_purge_apply, um__cache_purge_slices in tags.c). On disk that purge removes the
 * keys of those slices and slice 0's, not the tag (the disk tier's purge by tag retires
 * every record written before it); a slice left on disk is of the old version, and its
 * validator tells it from the new slice 0 (below). Any other answer (a 200: the origin
 * ignores ranges; an error) goes up untouched.
 *
 * The slice layer fetches first the slice holding the first byte the client asked for
 * (slice 0 without a Range, or for a suffix range "bytes=-N", whose place is known only
 * with the length). Its Umbra-Slice-Range gives the complete length, and so the answer's
 * head: the client's Range, If-Range and preconditions are answered from that head as an
 * origin would (um_cache_conditional): a 200 of the whole length, a 206, 304, 412 or 416.
 * Then the slices the range covers, one at a time, in order: the next slice is asked for
 * only once the client has taken the last byte of the one before (the cache's reader
 * stops while the client is behind), so a response holds about one slice of memory
 * whatever the object's size. The next fetch starts from a task posted to the loop, not
 * from inside the previous one's end: a run of hits would otherwise recurse once per
 * slice. A first answer that is a whole 200 without Umbra-Slice-Range (the origin ignores
 * ranges, or the answer passed the cache by) is served the same way as one piece; any
 * other (an error, a length unknown) goes to the client as it is.
 *
 * Every slice after the first must carry the same complete length and validator (ETag,
 * else Last-Modified) as the first, start where asked and be whole. One that does not is
 * purged and asked for once more (a stored slice older than the first: it now comes from
 * the origin). When it still does not match, the object changed at the origin between two
 * slices: the bytes of two versions must never be joined, and the head already went out,
 * so the response is cut (the client sees a truncated body, never a wrong one), and every
 * slice of the object is purged so that the next request starts it again from the origin
 * (nginx's slice module also gives such a response up). HEAD, other methods, a peer's
 * request, a hook's no_cache and a fetch made by the cache itself (a coding made from
 * identity) pass by both layers unchanged. A sliced response is identity-coded (the
 * slices are asked for without the client's Accept-Encoding). */
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

/* Counters (the cache module's, um_cache_module in origin.c). */
static const struct um_metric_def counter_defs[] = {
    {"umbra_slice_origin_ranges_total", "counter",
     "Range requests of one slice sent to the origin (cache.disk.slice).", NULL},
    {"umbra_slice_fetches_total", "counter",
     "Slices asked of the cache to answer requests in slices.", NULL},
    {"umbra_slice_restarts_total", "counter",
     "Objects dropped because a slice carried another validator than the first.", NULL},
};
struct um_metric_block um__cache_slice_counters = {counter_defs, 3, 0};

/* A state of this file is told from an inner origin's (both sit in a sink's origin_data)
 * by its first member. */
static const char state_magic;

struct slice_origin {
    struct um_origin base;
    struct um_origin_ops ops;
    struct um_origin *inner;
    struct um_cache *cache;
    uint64_t size;
};

struct slice_fetch {
    const char *magic;
    struct um_sink sink; /* what the cache writes one slice to */
    struct um_sink *client;
    struct slice_origin *so;
    struct um_fetch f;          /* the client's, its req replaced by own_req when there is one */
    struct um_request *own_req; /* the client's without the fields below (drop), or NULL */
    bool dropped_conds;         /* more conditionals than cond holds (none kept) */
    char *base_key; /* the object's key (then the slice's part of the key being fetched) */
    size_t base_len;
    struct um_task next; /* starts the next slice */
    bool fetching;       /* a slice's fetch is under way (sink is the cache's client) */
    bool passthrough;    /* the first answer was not a slice: it goes to the client as it is */
    bool head_sent, broken;
    /* The client's Range and preconditions (their values in the client's request, which
     * outlives sf), answered here from the first slice's head (um_cache_conditional), as
     * an origin would. */
    struct um_header cond[6];
    size_t ncond;
    bool whole; /* the answer is the whole object in one piece (the origin ignores ranges) */
    uint64_t k; /* the slice being fetched */
    uint64_t slice_off;            /* its first byte in the object */
    uint64_t got;                  /* bytes of it passed over or to the client so far */
    uint64_t complete;             /* the object's length, from the first slice */
    uint64_t want_first, want_end; /* what the client gets: [want_first, want_end) */
    uint64_t pos;                  /* the next byte the client gets */
    /* A slice that did not match the first one is asked for once more, from the origin
     * (a stored slice of an older version, still on disk after a purge of the URL):
     * retry: this slice's body is passed over and it is fetched again; retried: the
     * slice that was. */
    bool retry, has_retried;
    uint64_t retried;
    size_t validator_len;
    bool validator_etag;
    bool posted;   /* next is posted */
    bool in_fetch; /* within the inner origin's fetch call (slice_start) */
    bool dead;     /* freed while in_fetch: slice_start frees it */
    /* Not zeroed when made (SLICE_ZEROED): */
    char validator[256];
    char key_inline[256]; /* base_key when it fits */
};
#define SLICE_ZEROED offsetof(struct slice_fetch, validator)

static void slice_start(struct slice_fetch *sf);

static struct slice_fetch *slice_of(struct um_sink *client)
{
    struct slice_fetch *sf = client->origin_data;
    return sf && sf->magic == &state_magic ? sf : NULL;
}

/* Frees sf, or marks it to be freed when a slice's fetch that ended at once returns to
 * slice_start: the cache reads its client sink (sf's) after its fetch calls return. */
static void slice_free(struct slice_fetch *sf)
{
    if (sf->in_fetch) {
        sf->dead = true;
        return;
    }
    if (sf->posted) um_loop_unpost(sf->f.ctx->loop, &sf->next);
    if (sf->base_key != sf->key_inline) free(sf->base_key);
    free(sf->own_req);
    free(sf);
}

/* The client's answer is over (err: UM_OK when its body is whole). */
static void slice_finish(struct slice_fetch *sf, int err)
{
    struct um_sink *c = sf->client;
    c->origin_data = NULL;
    slice_free(sf);
    c->ops->on_end(c, err);
}

/* Purges slice k of the object (memory and disk, by its key). */
static void slice_purge(struct slice_fetch *sf, uint64_t k)
{
    char stack[512];
    size_t cap = sf->base_len + 64;
    char *key = cap <= sizeof(stack) ? stack : um_malloc(cap);
    size_t n = um__cache_slice_key((um_str){sf->base_key, sf->base_len}, sf->so->size, k, key, cap);
    um_cache_purge(sf->so->cache, (um_str){key, n});
    if (key != stack) free(key);
}

/* The object changed at the origin between two slices: every slice of it goes. */
static void slice_drop_object(struct slice_fetch *sf)
{
    um_counter_add(um_metric(&um__cache_slice_counters, C_RESTARTS), 1);
    for (uint64_t k = 0; k * sf->so->size < sf->complete; k++)
        slice_purge(sf, k);
}

/* The validator of a slice's head: its ETag, else its Last-Modified (empty: none). */
static um_str head_validator(const struct um_response_head *h, bool *etag)
{
    const um_str *v = um__cache_slice_field(h->headers, h->num_headers, "etag");
    *etag = v != NULL;
    if (v == NULL) v = um__cache_slice_field(h->headers, h->num_headers, "last-modified");
    return v ? *v : (um_str){"", 0};
}

/* The first slice's head: the object's length and validator, and the client's head. */
static void first_head(struct slice_fetch *sf, const struct um_response_head *h, uint64_t complete)
{
    struct um_sink *c = sf->client;
    sf->complete = complete;
    /* One pass over the head (every request of the route makes it; names told apart by
     * length first): the fields the client does not get, and the validators. */
    struct um_header stack[32];
    struct um_header *fields = h->num_headers < UM_NELEMS(stack)
                                   ? stack
                                   : um_malloc((h->num_headers + 1) * sizeof(*fields));
    const um_str *lm = NULL, *date = NULL, *et = NULL;
    size_t n = 0;
    /* The stored fields' serialised block (a memory hit's, umbra/origin.h) is kept up to
     * the first line dropped from it (the slice's own fields come last): the connection
     * copies that part at once. */
    size_t wire_n = h->wire.base ? h->num_wire : 0;
    for (size_t i = 0; i < h->num_headers; i++) {
        um_str name = h->headers[i].name, val = h->headers[i].value;
        const um_str *vp = &h->headers[i].value;
        bool drop = false;
        if (name.len == 4) {
            if (!date && um_str_eq_ci(name, "date")) date = vp;
            if (!et && um_str_eq_ci(name, "etag")) et = vp;
        } else if (name.len == 13) { /* content-range, surrogate-key, last-modified */
            drop =
                um_str_eq_ci(name, "content-range") ||
                (um_str_eq_ci(name, "surrogate-key") && val.len >= sizeof(SLICE_TAG_PREFIX) - 1 &&
                 memcmp(val.base, SLICE_TAG_PREFIX, sizeof(SLICE_TAG_PREFIX) - 1) == 0);
            if (!drop && !lm && um_str_eq_ci(name, "last-modified")) lm = vp;
        } else if (name.len == sizeof(SLICE_FIELD) - 1) {
            drop = um_str_eq_ci(name, SLICE_FIELD);
        }
        if (!drop) fields[n++] = h->headers[i];
    }
    /* fields[0..wire_keep) are the block's first lines, each starting its line. */
    size_t wire_keep = wire_n;
    for (size_t i = 0; i < wire_n; i++)
        if (i >= n || fields[i].name.base != h->headers[i].name.base) {
            wire_keep = i;
            break;
        }
    um_str wire = {NULL, 0};
    const char *wend =
        wire_keep < wire_n ? h->headers[wire_keep].name.base : h->wire.base + h->wire.len;
    if (wire_keep > 0 && wend > h->wire.base && wend <= h->wire.base + h->wire.len)
        wire = (um_str){h->wire.base, (size_t)(wend - h->wire.base)};
    /* The validator later slices must carry (head_validator's). */
    um_str v = et ? *et : lm ? *lm : (um_str){"", 0};
    sf->validator_len = v.len < sizeof(sf->validator) ? v.len : sizeof(sf->validator) - 1;
    memcpy(sf->validator, v.base, sf->validator_len);
    sf->validator_etag = et != NULL;
    uint64_t first = 0, last = 0;
    int status = 200;
    if (sf->ncond > 0) { /* the client's Range and preconditions, as an origin answers them */
        struct um_req_meta qm;
        um_req_meta_scan(&qm, UM_METHOD_GET, sf->cond, sf->ncond);
        struct um_cond_stored cs = {
            .status = 200, .etag = et ? *et : (um_str){NULL, 0}, .size = complete};
        cs.has_last_modified = lm && um_http_date_parse(*lm, &cs.last_modified);
        cs.has_date = date && um_http_date_parse(*date, &cs.date);
        cs.response_time = cs.has_date ? cs.date : time(NULL);
        status = um_cache_conditional(&qm, &cs, true, &first, &last);
        if (status != 206 && status != 304 && status != 412 && status != 416) status = 200;
    }
    if (status == 200) {
        first = 0;
        last = complete - 1; /* complete 0: the empty range [0, 0) below */
    }
    char cr[96];
    if (status == 206 || status == 416) {
        int k = status == 206 ? snprintf(cr, sizeof(cr), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64,
                                         first, last, complete)
                              : snprintf(cr, sizeof(cr), "bytes */%" PRIu64, complete);
        fields[n++] = (struct um_header){UM_STR("Content-Range"), {cr, (size_t)k}};
    }
    struct um_response_head out = *h;
    out.status = status;
    out.reason = (um_str){NULL, 0};
    out.headers = fields;
    out.num_headers = n;
    out.wire = wire;
    out.num_wire = wire.base ? wire_keep : 0;
    if (status != 200 && status != 206) {
        sf->want_first = sf->want_end = 0; /* no body: the slice is passed over */
        out.content_length = 0;
    } else {
        sf->want_first = first;
        sf->want_end = complete == 0 ? 0 : last + 1;
        out.content_length = (int64_t)(sf->want_end - first);
    }
    sf->pos = sf->want_first;
    sf->head_sent = true;
    c->ops->on_head(c, &out);
    if (fields != stack) free(fields);
}

static void slice_on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct slice_fetch *sf = um_container_of(s, struct slice_fetch, sink);
    const um_str *sr = um__cache_slice_field(h->headers, h->num_headers, SLICE_FIELD);
    uint64_t first, last, complete;
    bool sliced =
        h->status == 200 && sr && um__cache_slice_range_parse(*sr, &first, &last, &complete);
    if (!sf->head_sent) {
        if (sliced && first == sf->slice_off) {
            first_head(sf, h, complete);
        } else if (h->status == 200 && sr == NULL && h->content_length >= 0) {
            /* The whole object (the origin ignores ranges, or it was uncacheable and
             * passed the cache by): one piece from byte 0, the client's Range and
             * preconditions answered from it all the same. */
            sf->whole = true;
            sf->slice_off = 0;
            first_head(sf, h, (uint64_t)h->content_length);
        } else {
            /* An error, a 304 or 416 of the origin's, a length unknown: the client gets
             * it as it is. */
            sf->passthrough = true;
            sf->head_sent = true;
            sf->client->ops->on_head(sf->client, h);
        }
        return;
    }
    bool etag;
    um_str v = head_validator(h, &etag);
    if (!sliced || first != sf->slice_off || complete != sf->complete ||
        etag != sf->validator_etag || v.len != sf->validator_len ||
        memcmp(v.base, sf->validator, v.len) != 0 ||
        (last + 1 < sf->want_end && last + 1 - first != sf->so->size)) {
        if (!sf->has_retried || sf->retried != sf->k) {
            sf->retry = true;
            slice_purge(sf, sf->k);
            return;
        }
        /* Another version (or a broken answer), again: its bytes are never joined to
         * the ones the client has; the object starts again at the next request. */
        sf->broken = true;
        slice_drop_object(sf);
    }
}

/* How many of the len bytes at the slice's position got are passed over before the
 * client's window, and how many of them are in it. */
static void window(const struct slice_fetch *sf, size_t len, size_t *skip, size_t *take)
{
    uint64_t at = sf->slice_off + sf->got;
    uint64_t s = at < sf->pos ? sf->pos - at : 0;
    if (s > len) s = len;
    uint64_t from = at + s;
    uint64_t t = from < sf->want_end ? sf->want_end - from : 0;
    if (t > len - s) t = len - s;
    *skip = (size_t)s;
    *take = (size_t)t;
}

static size_t slice_on_data(struct um_sink *s, const char *data, size_t len)
{
    struct slice_fetch *sf = um_container_of(s, struct slice_fetch, sink);
    if (sf->passthrough) return sf->client->ops->on_data(sf->client, data, len);
    if (sf->broken || sf->retry) return len;
    size_t skip, take;
    window(sf, len, &skip, &take);
    if (take > 0) {
        size_t n = sf->client->ops->on_data(sf->client, data + skip, take);
        if (n == 0) return 0;
        sf->pos += n;
        if (n < take) {
            sf->got += skip + n;
            return skip + n;
        }
    }
    sf->got += len;
    return len;
}

static size_t slice_on_data_ref(struct um_sink *s, const char *data, size_t len,
                                void (*release)(void *ctx), void *ctx)
{
    struct slice_fetch *sf = um_container_of(s, struct slice_fetch, sink);
    if (sf->passthrough) return sf->client->ops->on_data_ref(sf->client, data, len, release, ctx);
    size_t skip = 0, take = 0;
    if (!sf->broken && !sf->retry) window(sf, len, &skip, &take);
    if (take == 0) {
        release(ctx);
        sf->got += len;
        return len;
    }
    size_t n = sf->client->ops->on_data_ref(sf->client, data + skip, take, release, ctx);
    if (n == 0) return 0;
    /* A sink takes all or nothing (and now owns ctx): the bytes around the window are
     * passed over with it. */
    sf->pos += n;
    sf->got += len;
    return len;
}

static void slice_on_file(struct um_sink *s, int fd, uint64_t off, uint64_t len)
{
    struct slice_fetch *sf = um_container_of(s, struct slice_fetch, sink);
    if (sf->passthrough) {
        sf->client->ops->on_file(sf->client, fd, off, len);
        return;
    }
    /* The cache sends stored bodies from memory; a file here is one part of a slice. */
    size_t skip = 0, take = 0;
    if (!sf->broken && !sf->retry && len <= SIZE_MAX) window(sf, (size_t)len, &skip, &take);
    sf->got += len;
    if (take == 0) {
        close(fd);
        return;
    }
    sf->pos += take;
    sf->client->ops->on_file(sf->client, fd, off + skip, take);
}

static void slice_on_end(struct um_sink *s, int err)
{
    struct slice_fetch *sf = um_container_of(s, struct slice_fetch, sink);
    sf->fetching = false;
    if (sf->retry && !sf->broken && !sf->passthrough) {
        sf->retry = false;
        sf->has_retried = true;
        sf->retried = sf->k;
        sf->posted = true;
        um_loop_post(sf->f.ctx->loop, &sf->next);
        return;
    }
    if (sf->passthrough || sf->whole || err != UM_OK || sf->broken || sf->pos >= sf->want_end) {
        slice_finish(sf, sf->passthrough || sf->pos >= sf->want_end ? err : UM_ERR);
        return;
    }
    /* The slice that holds the next byte the client gets, started after this turn. A
     * slice that ended short of it (stored before a change of the rules, or a bug) must
     * not be asked for again and again. */
    uint64_t next = sf->pos / sf->so->size;
    if (next <= sf->k) {
        slice_finish(sf, UM_ERR);
        return;
    }
    sf->k = next;
    sf->posted = true;
    um_loop_post(sf->f.ctx->loop, &sf->next);
}

static ssize_t slice_read_body(struct um_sink *s, char *buf, size_t len)
{
    (void)s;
    (void)buf;
    (void)len;
    return 0; /* a GET is sliced only without a body */
}

static void slice_on_info(struct um_sink *s, int status, const struct um_header *h, size_t n)
{
    struct slice_fetch *sf = um_container_of(s, struct slice_fetch, sink);
    if (!sf->head_sent) um_sink_info(sf->client, status, h, n);
}

static void slice_on_flush(struct um_sink *s)
{
    struct slice_fetch *sf = um_container_of(s, struct slice_fetch, sink);
    if (!sf->broken && !sf->retry) um_sink_flush(sf->client);
}

static const struct um_sink_ops slice_sink_ops = {
    .on_head = slice_on_head,
    .on_data = slice_on_data,
    .on_file = slice_on_file,
    .on_end = slice_on_end,
    .on_data_ref = slice_on_data_ref,
    .read_body = slice_read_body,
    .on_info = slice_on_info,
    .on_flush = slice_on_flush,
};

/* Asks the cache for slice sf->k. */
static void slice_start(struct slice_fetch *sf)
{
    size_t n = um__cache_slice_key_tail(sf->base_key, sf->base_len, sf->so->size, sf->k);
    sf->slice_off = sf->k * sf->so->size;
    sf->got = 0;
    sf->fetching = true;
    struct um_fetch f = sf->f;
    f.cache_key = (um_str){sf->base_key, n};
    um_counter_add(um_metric(&um__cache_slice_counters, C_SLICES), 1);
    sf->in_fetch = true;
    sf->so->inner->ops->fetch(sf->so->inner, &f, &sf->sink);
    sf->in_fetch = false;
    if (sf->dead) slice_free(sf); /* the answer ended within the fetch */
}

static void on_next(struct um_task *t)
{
    struct slice_fetch *sf = (struct slice_fetch *)((char *)t - offsetof(struct slice_fetch, next));
    sf->posted = false;
    slice_start(sf);
}

/* Whether f is a GET the slice layer answers. */
static bool sliceable(const struct um_fetch *f)
{
    const struct um_request *req = f->req;
    return req->method_id == UM_METHOD_GET && !f->no_cache && !f->from_peer && f->source == NULL &&
           f->fill_key.base == NULL && !f->has_body &&
           !(req->flags & (UM_REQ_F_UPGRADE | UM_REQ_F_CHUNKED)) &&
           !((req->flags & UM_REQ_F_CONTENT_LENGTH) && req->content_length > 0);
}

static void slice_fetch_start(struct um_origin *o, struct um_fetch *f, struct um_sink *client)
{
    struct slice_origin *so = (struct slice_origin *)o;
    if (!sliceable(f)) {
        so->inner->ops->fetch(so->inner, f, client);
        return;
    }
    struct slice_fetch *sf = um_malloc(sizeof(*sf));
    memset(sf, 0, SLICE_ZEROED);
    sf->magic = &state_magic;
    sf->sink.ops = &slice_sink_ops;
    sf->client = client;
    sf->so = so;
    sf->next.cb = on_next;
    /* The object's key, with room for a slice's part after it (slice_start). */
    sf->base_len = f->cache_key.base ? f->cache_key.len : um_cache_url_key_len(f->req);
    size_t cap = sf->base_len + UM__CACHE_SLICE_TAIL_MAX;
    sf->base_key = cap <= sizeof(sf->key_inline) ? sf->key_inline : um_malloc(cap);
    if (f->cache_key.base)
        memcpy(sf->base_key, f->cache_key.base, sf->base_len);
    else
        um_cache_url_key_write(f->req, sf->base_key);
    /* The client's Range and preconditions, kept for the first slice's head. */
    static const char *const conds[] = {"range",    "if-range",          "if-none-match",
                                        "if-match", "if-modified-since", "if-unmodified-since"};
    bool coded = false; /* the request has an Accept-Encoding */
    for (size_t i = 0; i < f->req->num_headers; i++) {
        const struct um_header *hd = &f->req->headers[i];
        char c0 = hd->name.len ? (char)(hd->name.base[0] | 0x20) : 0;
        if (c0 != 'a' && c0 != 'i' && c0 != 'r') continue; /* none of the names below */
        if (um_str_eq_ci(hd->name, "accept-encoding")) coded = true;
        for (size_t j = 0; j < UM_NELEMS(conds); j++) {
            if (!um_str_eq_ci(hd->name, conds[j])) continue;
            if (sf->ncond == UM_NELEMS(sf->cond)) {
                /* Too many to keep: answered as if there were none (a 200). */
                sf->ncond = 0;
                sf->dropped_conds = true;
                i = f->req->num_headers;
                break;
            }
            sf->cond[sf->ncond++] = (struct um_header){{conds[j], strlen(conds[j])}, hd->value};
            break;
        }
    }
    /* "bytes=A-..." without If-Range: the first slice asked for is A's; a suffix's place
     * is known only with the length, which slice 0 gives. */
    uint64_t start = 0;
    const um_str *range = um__cache_slice_field(sf->cond, sf->ncond, "range");
    if (range && um__cache_slice_field(sf->cond, sf->ncond, "if-range") == NULL && range->len > 6 &&
        memcmp(range->base, "bytes=", 6) == 0) {
        const char *p = range->base + 6, *end = range->base + range->len;
        while (p < end && *p >= '0' && *p <= '9' && start <= (UINT64_MAX - 9) / 10)
            start = start * 10 + (uint64_t)(*p++ - '0');
    }
    /* The cache's request: no conditionals, ranges or codings of the client's (each slice
     * is the identity bytes of its range). */
    static const char *const drop[] = {"range",
                                       "if-range",
                                       "if-none-match",
                                       "if-match",
                                       "if-modified-since",
                                       "if-unmodified-since",
                                       "accept-encoding",
                                       NULL};
    sf->f = *f;
    if (coded || sf->ncond > 0 || sf->dropped_conds) {
        sf->own_req = um_malloc(sizeof(*sf->own_req));
        um__cache_slice_request(sf->own_req, f->req, drop,
                                (struct um_header){{NULL, 0}, {NULL, 0}});
        sf->f.req = sf->own_req;
    } /* else the client's request is the cache's as it is (the exchange outlives sf) */
    sf->want_end = UINT64_MAX;
    sf->pos = start;
    sf->k = start / so->size;
    client->origin_data = sf;
    slice_start(sf);
}

static void slice_resume(struct um_origin *o, struct um_sink *client)
{
    struct slice_origin *so = (struct slice_origin *)o;
    struct slice_fetch *sf = slice_of(client);
    if (sf && !sf->fetching) return; /* between slices: the next one starts anyway */
    if (so->inner->ops->resume) so->inner->ops->resume(so->inner, sf ? &sf->sink : client);
}

static void slice_body_ready(struct um_origin *o, struct um_sink *client)
{
    struct slice_origin *so = (struct slice_origin *)o;
    struct slice_fetch *sf = slice_of(client);
    if (sf == NULL && so->inner->ops->body_ready) so->inner->ops->body_ready(so->inner, client);
}

static void slice_cancel(struct um_origin *o, struct um_sink *client)
{
    struct slice_origin *so = (struct slice_origin *)o;
    struct slice_fetch *sf = slice_of(client);
    if (sf == NULL) {
        if (so->inner->ops->cancel) so->inner->ops->cancel(so->inner, client);
        return;
    }
    if (sf->fetching && so->inner->ops->cancel) so->inner->ops->cancel(so->inner, &sf->sink);
    client->origin_data = NULL;
    slice_free(sf);
}

static void slice_destroy(struct um_origin *o)
{
    struct slice_origin *so = (struct slice_origin *)o;
    so->inner->ops->destroy(so->inner);
    free(so);
}

struct um_origin *um_slice_origin_create(struct um_origin *inner, struct um_cache *cache,
                                         uint64_t size)
{
    UM_ASSERT(size > 0);
    struct slice_origin *so = um_calloc(1, sizeof(*so));
    so->ops = (struct um_origin_ops){
        .flags = inner->ops->flags,
        .fetch = slice_fetch_start,
        .resume = slice_resume,
        .body_ready = slice_body_ready,
        .cancel = slice_cancel,
        .destroy = slice_destroy,
    };
    so->base.ops = &so->ops;
    so->inner = inner;
    so->cache = cache;
    so->size = size;
    return &so->base;
}
