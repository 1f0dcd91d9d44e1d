/* The caching layer (see cacheorigin.h).
 *
 * Three kinds of per-request state, each the origin_data of the client's sink:
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
 * so later requests go straight to the origin instead of queueing behind one another. */
#include "umbra/cacheorigin.h"

#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "umbra/cachepolicy.h"
#include "umbra/context.h"
#include "umbra/log.h"
#include "umbra/loop.h"

#define PASS_TTL 60          /* seconds a hit-for-pass marker lives */
#define VALIDATOR_KEEP 3600  /* seconds a stale object with validators is kept for revalidation */
#define MAX_OUT_FIELDS 136
#define CACHE_NAME "umbra"

enum kind { K_READER = 0x52454144, K_FILL = 0x46494c4c, K_PASS = 0x50415353 };

#define META_F_PASS 0x1

struct meta {
    uint32_t flags;
    int status;
    struct um_age_times times;
    int64_t lifetime;
    int64_t content_length; /* -1: unknown until complete */
};

struct cache_origin {
    struct um_origin base;
    struct um_origin *inner;
    struct um_cache *cache;
    const struct um_config *config;
    struct um_cache_policy pol;
};

struct fill;

struct reader {
    enum kind kind;
    struct cache_origin *co;
    struct um_sink *client;
    struct um_context *ctx;
    struct um_cache_obj *obj;
    struct um_cache_cursor cur;
    struct um_cache_waiter waiter;
    struct um_task task;
    const struct um_request *req; /* the client's; valid until our on_end */
    struct um_fetch fetch;        /* for falling back to the inner origin */
    bool head_sent, head_only, done, waiting;
    bool ranged;
    uint64_t range_skip; /* body bytes before the range, still to pass over */
    uint64_t range_left;
    struct um_cache_status cs;
};

struct fill {
    enum kind kind;
    struct cache_origin *co;
    struct um_sink sink; /* what the inner origin writes to */
    struct um_context *ctx;
    struct fill *next_active, *prev_active;
    struct um_cache_obj *obj; /* being filled; NULL before the head (revalidation) */
    struct um_cache_obj *old; /* the stale object a revalidation is for */
    char *key;
    size_t key_len;
    /* A copy of the client's request head, so the fill outlives the client. */
    char *head_copy;
    struct um_request req;
    time_t request_time;
    struct reader *own; /* the reader of the client that caused the fill, or NULL */
    struct pass *fwd;   /* the fill stopped storing and forwards to its client's pass */
    bool revalidating;
    bool has_ttl; /* an on_request hook's ttl (a hook's on the head wins) */
    int64_t ttl;
    bool discard; /* the rest of the inner answer is not wanted */
    bool drop_posted; /* drop (below) is queued */
    struct um_task drop; /* cancels the inner fetch outside its callbacks (see fill_on_data) */
    bool handoff; /* the object ran out of room: the own client gets the rest directly */
    int status;
};

struct pass {
    enum kind kind;
    struct cache_origin *co;
    struct um_sink sink;
    struct um_sink *client;
    struct fill *fill; /* a fill forwarding to this pass: the inner fetch is the fill's */
    const struct um_request *req;
    const char *scheme;
    struct um_cache_status cs;
    int status;
    bool invalidate;
    char location[1024]; /* same-origin Location / Content-Location targets to invalidate */
    size_t loc_len;
    char content_location[1024];
    size_t cloc_len;
};

/* The fills a worker has running, so that they can be stopped with the worker: the
 * state of its context's UM_CONTEXT_CACHE_FILLS slot. */
struct worker_fills {
    struct um_context *ctx;
    struct fill *active;
    struct um_task stop;
};

static time_t now_sec(void)
{
    return time(NULL);
}

/* ---------------------------------------------------------------- keys and tags */

size_t um_cache_url_key_len(const struct um_request *req)
{
    return req->authority.len + 1 + req->path.len +
           ((req->flags & UM_REQ_F_HAS_QUERY) ? req->query.len + 1 : 0);
}

void um_cache_url_key_write(const struct um_request *req, char *k)
{
    for (size_t i = 0; i < req->authority.len; i++) {
        char ch = req->authority.base[i];
        k[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
    }
    k[req->authority.len] = ' ';
    char *t = k + req->authority.len + 1;
    memcpy(t, req->path.base, req->path.len);
    if (req->flags & UM_REQ_F_HAS_QUERY) {
        t[req->path.len] = '?';
        memcpy(t + req->path.len + 1, req->query.base, req->query.len);
    }
}

/* "host target": the Host (lower case, as the request said it) and the target as sent. */
static char *make_key(const struct um_request *req, size_t *len)
{
    size_t n = um_cache_url_key_len(req);
    char *k = um_malloc(n + 1);
    um_cache_url_key_write(req, k);
    k[n] = '\0';
    *len = n;
    return k;
}

/* The key of fetch f: a hook's (f->cache_key), else the URL's. */
static char *fetch_key(const struct um_fetch *f, size_t *len)
{
    if (f->cache_key.base) {
        *len = f->cache_key.len;
        return um_strndup(f->cache_key.base, f->cache_key.len);
    }
    return make_key(f->req, len);
}

/* Tag: [u8 flags] then per Vary field [u16 name len][name][u8 present][u16 value len][value].
 * flags 1: hit-for-pass marker (matches every request); 2: head not known yet (filling:
 * matches every request, which then checks the real tag once the head is there). */
#define TAG_PASS 1
#define TAG_PENDING 2

struct tag_view {
    unsigned flags;
    struct um_vary_value v[UM_VARY_MAX];
    size_t n;
};

static bool tag_parse(um_str tag, struct tag_view *tv)
{
    memset(tv, 0, sizeof(*tv));
    if (tag.len == 0)
        return true;
    const unsigned char *p = (const unsigned char *)tag.base, *end = p + tag.len;
    tv->flags = *p++;
    while (p < end && tv->n < UM_VARY_MAX) {
        if (end - p < 2)
            return false;
        size_t nl = (size_t)p[0] << 8 | p[1];
        p += 2;
        if ((size_t)(end - p) < nl + 3)
            return false;
        um_str name = {(const char *)p, nl};
        p += nl;
        bool present = *p++;
        size_t vl = (size_t)p[0] << 8 | p[1];
        p += 2;
        if ((size_t)(end - p) < vl)
            return false;
        tv->v[tv->n++] = (struct um_vary_value){name, {(const char *)p, vl}, present};
        p += vl;
    }
    return p == end;
}

static bool tag_matches(um_str tag, const struct um_request *req)
{
    struct tag_view tv;
    if (!tag_parse(tag, &tv))
        return false;
    if (tv.flags & (TAG_PASS | TAG_PENDING))
        return true;
    return um_vary_matches(tv.v, tv.n, req->headers, req->num_headers);
}

static bool match_cb(const struct um_cache_obj *obj, void *arg)
{
    return tag_matches(um_cache_obj_tag(obj), arg);
}

static bool match_any(const struct um_cache_obj *obj, void *arg)
{
    (void)arg;
    um_str tag = um_cache_obj_tag(obj);
    return tag.len == 0 || !(tag.base[0] & TAG_PASS);
}

/* Builds the tag for a response's Vary from the request that filled it. */
static size_t tag_build(const struct um_vary *vary, const struct um_request *req, char *out,
                        size_t outsz)
{
    size_t o = 0;
    out[o++] = 0;
    for (size_t i = 0; i < vary->n; i++) {
        char val[1024];
        bool present = false;
        size_t vl = um_vary_normalize(vary->names[i], req->headers, req->num_headers, val,
                                      sizeof(val), &present);
        if (vl >= sizeof(val))
            return 0; /* too long to keep: not stored */
        size_t nl = vary->names[i].len;
        if (o + 5 + nl + vl > outsz)
            return 0;
        out[o++] = (char)(nl >> 8);
        out[o++] = (char)nl;
        memcpy(out + o, vary->names[i].base, nl);
        o += nl;
        out[o++] = present;
        out[o++] = (char)(vl >> 8);
        out[o++] = (char)vl;
        memcpy(out + o, val, vl);
        o += vl;
    }
    return o;
}

/* ---------------------------------------------------------------- stored heads */

/* Splits a stored head block into fields (slices of it). */
static size_t head_fields(um_str head, struct um_header *f, size_t max)
{
    size_t n = 0;
    const char *p = head.base, *end = head.base + head.len;
    while (p < end && n < max) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL)
            break;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon) {
            size_t vl = (size_t)(eol - colon - 1);
            if (vl > 0 && colon[vl] == '\r')
                vl--;
            f[n].name = (um_str){p, (size_t)(colon - p)};
            f[n].value = um_str_trim((um_str){colon + 1, vl});
            n++;
        }
        p = eol + 1;
    }
    return n;
}

static bool skip_stored_field(um_str name)
{
    return um_str_eq_ci(name, "age") || um_str_eq_ci(name, "content-length") ||
           um_str_eq_ci(name, "cache-status") || um_str_eq_ci(name, "transfer-encoding");
}

/* Serialises the fields of a response worth storing. Returns a malloc'd block. */
static char *head_block(const struct um_header *h, size_t n, const struct um_resp_meta *m,
                        size_t *len)
{
    size_t cap = 0;
    for (size_t i = 0; i < n; i++)
        cap += h[i].name.len + h[i].value.len + 4;
    char *b = um_malloc(cap + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_stored_field(h[i].name) || !um_cache_field_storable(h[i].name, m))
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

static void fills_stop(struct um_task *t);

/* The first of the worker's fills, or NULL. */
static struct fill *first_fill(const struct um_context *ctx)
{
    struct worker_fills *wf = um_context_get(ctx, UM_CONTEXT_CACHE_FILLS);
    return wf ? wf->active : NULL;
}

static struct worker_fills *worker_fills(struct um_context *ctx)
{
    struct worker_fills *wf = um_context_get(ctx, UM_CONTEXT_CACHE_FILLS);
    if (wf == NULL) {
        wf = um_calloc(1, sizeof(*wf));
        wf->ctx = ctx;
        wf->stop.cb = fills_stop;
        um_loop_on_stop(ctx->loop, &wf->stop);
        um_context_set(ctx, UM_CONTEXT_CACHE_FILLS, wf);
    }
    return wf;
}

/* ---------------------------------------------------------------- readers */

static void reader_pump(struct reader *r);
static const struct um_sink_ops pass_ops;
static void pass_start(struct cache_origin *co, struct um_fetch *f, struct um_sink *client,
                       enum um_cache_fwd fwd, const char *detail);

static void on_progress(struct um_cache_waiter *w)
{
    /* The filler's thread: only hand over to the reader's own loop. */
    struct reader *r = (struct reader *)((char *)w - offsetof(struct reader, waiter));
    um_loop_post(r->ctx->loop, &r->task);
}

static void on_reader_task(struct um_task *t)
{
    struct reader *r = (struct reader *)((char *)t - offsetof(struct reader, task));
    r->waiting = false;
    reader_pump(r);
}

static struct reader *reader_new(struct cache_origin *co, struct um_fetch *f,
                                 struct um_sink *client, struct um_cache_obj *obj)
{
    struct reader *r = um_calloc(1, sizeof(*r));
    r->kind = K_READER;
    r->co = co;
    r->client = client;
    r->ctx = f->ctx;
    r->obj = obj;
    r->req = f->req;
    r->fetch = *f;
    r->head_only = f->req->method_id == UM_METHOD_HEAD;
    um_cache_cursor_init(&r->cur, obj);
    um_cache_waiter_init(&r->waiter, on_progress);
    r->task.cb = on_reader_task;
    r->cs.cache_name = CACHE_NAME;
    client->origin_data = r;
    return r;
}

static void forget_own(struct reader *r);

/* Detaches r from everything; the caller frees it. */
static void reader_release(struct reader *r)
{
    forget_own(r);
    um_cache_obj_unwait(r->obj, &r->waiter);
    um_loop_unpost(r->ctx->loop, &r->task);
    um_cache_obj_unref(r->obj);
    r->obj = NULL;
}

/* The end of a reader: after on_end nothing may touch the client. */
static void reader_finish(struct reader *r, int err)
{
    r->done = true;
    struct um_sink *client = r->client;
    reader_release(r);
    client->origin_data = NULL;
    client->ops->on_end(client, err);
    free(r);
}

/* The stored object cannot answer this request after all (hit-for-pass, another variant,
 * an aborted fill before any byte was sent): ask the inner origin directly. */
static void reader_fall_back(struct reader *r, const char *detail)
{
    struct cache_origin *co = r->co;
    struct um_fetch f = r->fetch;
    struct um_sink *client = r->client;
    reader_release(r);
    free(r);
    pass_start(co, &f, client, UM_FWD_MISS, detail);
}


/* Sends the head of the stored response (status may become 304, 206, 412, 416). Returns
 * false when the reader is finished (nothing more to send). */
static bool reader_send_head(struct reader *r, um_str meta_s, um_str head)
{
    struct meta m;
    memcpy(&m, meta_s.base, sizeof(m));
    struct um_header in[MAX_OUT_FIELDS], out[MAX_OUT_FIELDS + 3];
    size_t n = head_fields(head, in, MAX_OUT_FIELDS);
    time_t now = now_sec();
    int64_t age = um_current_age(&m.times, now);
    bool complete = um_cache_obj_state(r->obj) == UM_CACHE_COMPLETE;
    int64_t length = complete ? (int64_t)um_cache_obj_body_len(r->obj) : m.content_length;

    int status = m.status;
    uint64_t first = 0, last = 0;
    char cr[96];
    size_t no = 0;
    for (size_t i = 0; i < n; i++)
        out[no++] = in[i];
    if (complete) {
        /* Conditionals and Range, answered from what is stored. */
        struct um_resp_meta rm;
        um_resp_meta_scan(&rm, m.status, in, n);
        struct um_req_meta qm;
        um_req_meta_scan(&qm, r->req->method_id, r->req->headers, r->req->num_headers);
        struct um_cond_stored cs = {m.status, rm.etag, rm.has_last_modified, rm.last_modified,
                                    rm.has_date, rm.date, m.times.response_time,
                                    (uint64_t)length};
        int c = um_cache_conditional(&qm, &cs, false, &first, &last);
        if (c == 304 || c == 412) {
            status = c;
            length = 0;
        } else if (c == 206) {
            status = 206;
            int k = snprintf(cr, sizeof(cr), "bytes %llu-%llu/%lld", (unsigned long long)first,
                             (unsigned long long)last, (long long)length);
            out[no++] = (struct um_header){UM_STR("Content-Range"), {cr, (size_t)k}};
            r->ranged = true;
            r->range_skip = first;
            r->range_left = last - first + 1;
            length = (int64_t)(last - first + 1);
        } else if (c == 416) {
            status = 416;
            int k = snprintf(cr, sizeof(cr), "bytes */%lld", (long long)length);
            out[no++] = (struct um_header){UM_STR("Content-Range"), {cr, (size_t)k}};
            length = 0;
        }
    }
    char agebuf[24], csbuf[256];
    int k = snprintf(agebuf, sizeof(agebuf), "%lld", (long long)(age < 0 ? 0 : age));
    out[no++] = (struct um_header){UM_STR("Age"), {agebuf, (size_t)k}};
    if (r->cs.hit) {
        r->cs.has_ttl = true;
        r->cs.ttl = m.lifetime - age;
    }
    (void)now;
    size_t cl = um_cache_status_format(csbuf, sizeof(csbuf), &r->cs);
    if (cl < sizeof(csbuf))
        out[no++] = (struct um_header){UM_STR("Cache-Status"), {csbuf, cl}};
    struct um_response_head h = {.status = status, .headers = out, .num_headers = no,
                                 .content_length = length, .reason = {NULL, 0}, .cache = &r->cs};
    r->head_sent = true;
    r->client->ops->on_head(r->client, &h);
    if (r->head_only || status == 304 || status == 412 || status == 416 || status == 204 ||
        status < 200) {
        reader_finish(r, UM_OK);
        return false;
    }
    return true;
}

static void release_obj(void *obj)
{
    um_cache_obj_unref(obj);
}

static void reader_pump(struct reader *r)
{
    if (r->done || r->waiting)
        return;
    if (!r->head_sent) {
        um_str meta_s, head;
        if (!um_cache_obj_head(r->obj, &meta_s, &head)) {
            if (um_cache_obj_state(r->obj) == UM_CACHE_ABORTED) {
                reader_fall_back(r, "aborted");
                return;
            }
            if (um_cache_obj_wait(r->obj, &r->cur, &r->waiter)) {
                r->waiting = true;
                return;
            }
            reader_pump(r);
            return;
        }
        struct meta m;
        memcpy(&m, meta_s.base, sizeof(m));
        if ((m.flags & META_F_PASS) || !tag_matches(um_cache_obj_tag(r->obj), r->req)) {
            reader_fall_back(r, (m.flags & META_F_PASS) ? "hit-for-pass" : "vary-mismatch");
            return;
        }
        if (!reader_send_head(r, meta_s, head))
            return;
    }
    for (;;) {
        struct iovec iov[8];
        bool complete = false;
        size_t n = um_cache_obj_read(r->obj, &r->cur, iov, 8, &complete);
        for (size_t i = 0; i < n; i++) {
            const char *base = iov[i].iov_base;
            size_t len = iov[i].iov_len;
            if (r->range_skip > 0) {
                /* The bytes before a range are passed over as they are read (the cursor
                 * only moves over what a read returned). */
                size_t skip = len < r->range_skip ? len : (size_t)r->range_skip;
                um_cache_cursor_advance(&r->cur, skip);
                r->range_skip -= skip;
                base += skip;
                len -= skip;
            }
            if (r->ranged && len > r->range_left)
                len = (size_t)r->range_left;
            if (len == 0)
                continue;
            /* The bytes go out without a copy: the segment holds a reference to the
             * object, whose chunks live as long as it does. */
            um_cache_obj_ref(r->obj);
            size_t taken = r->client->ops->on_data_ref(r->client, base, len, release_obj, r->obj);
            if (taken == 0) {
                um_cache_obj_unref(r->obj);
                return; /* the client is behind: resume comes */
            }
            um_cache_cursor_advance(&r->cur, taken);
            if (r->ranged) {
                r->range_left -= taken;
                if (r->range_left == 0) {
                    reader_finish(r, UM_OK);
                    return;
                }
            }
            if (taken < len)
                break;
        }
        if (n > 0)
            continue;
        enum um_cache_state st = um_cache_obj_state(r->obj);
        if (complete || st == UM_CACHE_COMPLETE) {
            reader_finish(r, UM_OK);
            return;
        }
        if (st == UM_CACHE_ABORTED) {
            struct fill *fl = first_fill(r->ctx);
            while (fl && fl->own != r)
                fl = fl->next_active;
            if (fl && fl->handoff) {
                /* Caught up with what was stored: the rest comes from the fetch. */
                struct pass *p = um_calloc(1, sizeof(*p));
                p->kind = K_PASS;
                p->co = r->co;
                p->sink.ops = &pass_ops;
                p->client = r->client;
                p->req = r->req;
                p->scheme = r->fetch.scheme;
                p->fill = fl;
                fl->own = NULL;
                fl->handoff = false;
                fl->fwd = p;
                r->client->origin_data = p;
                reader_release(r);
                free(r);
                fl->co->inner->ops->resume(fl->co->inner, &fl->sink);
                return;
            }
            reader_finish(r, UM_ERR); /* the body was cut short */
            return;
        }
        if (um_cache_obj_wait(r->obj, &r->cur, &r->waiter)) {
            r->waiting = true;
            return;
        }
    }
}

/* ---------------------------------------------------------------- pass */

static void pass_on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct pass *p = (struct pass *)((char *)s - offsetof(struct pass, sink));
    p->status = h->status;
    struct um_header out[MAX_OUT_FIELDS + 1];
    size_t n = 0;
    for (size_t i = 0; i < h->num_headers && n < MAX_OUT_FIELDS; i++) {
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
    p->cs.fwd_status = h->status;
    size_t cl = um_cache_status_format(csbuf, sizeof(csbuf), &p->cs);
    if (cl < sizeof(csbuf))
        out[n++] = (struct um_header){UM_STR("Cache-Status"), {csbuf, cl}};
    struct um_response_head h2 = *h;
    h2.headers = out;
    h2.num_headers = n;
    h2.cache = &p->cs;
    p->client->ops->on_head(p->client, &h2);
}

static size_t pass_on_data(struct um_sink *s, const char *data, size_t len)
{
    struct pass *p = (struct pass *)((char *)s - offsetof(struct pass, sink));
    return p->client->ops->on_data(p->client, data, len);
}

static void pass_on_file(struct um_sink *s, int fd, uint64_t off, uint64_t len)
{
    struct pass *p = (struct pass *)((char *)s - offsetof(struct pass, sink));
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

static void pass_on_end(struct um_sink *s, int err)
{
    struct pass *p = (struct pass *)((char *)s - offsetof(struct pass, sink));
    if (p->invalidate && err == UM_OK && um_cache_invalidates(p->req->method_id, p->status)) {
        size_t klen;
        char *key = make_key(p->req, &klen);
        um_cache_purge(p->co->cache, (um_str){key, klen});
        free(key);
        if (p->loc_len)
            purge_key(p->co, p->req->authority, (um_str){p->location, p->loc_len});
        if (p->cloc_len)
            purge_key(p->co, p->req->authority, (um_str){p->content_location, p->cloc_len});
    }
    struct um_sink *client = p->client;
    client->origin_data = NULL;
    free(p);
    client->ops->on_end(client, err);
}

static ssize_t pass_read_body(struct um_sink *s, char *buf, size_t len)
{
    struct pass *p = (struct pass *)((char *)s - offsetof(struct pass, sink));
    return p->client->ops->read_body(p->client, buf, len);
}

static const struct um_sink_ops pass_ops = {.on_head = pass_on_head,
                                            .on_data = pass_on_data,
                                            .on_file = pass_on_file,
                                            .on_end = pass_on_end,
                                            .read_body = pass_read_body};

static void pass_start(struct cache_origin *co, struct um_fetch *f, struct um_sink *client,
                       enum um_cache_fwd fwd, const char *detail)
{
    struct pass *p = um_calloc(1, sizeof(*p));
    p->kind = K_PASS;
    p->co = co;
    p->sink.ops = &pass_ops;
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

/* ---------------------------------------------------------------- fills */

/* Copies the request head so that the fill can outlive the client's buffer. The slices
 * may point anywhere (a hook's rewrites live in the connection's arena): each is copied. */
static void copy_request(struct fill *fl, const struct um_request *req)
{
    size_t len = req->method.len + req->target.len + req->path.len + req->query.len +
                 req->authority.len;
    for (size_t i = 0; i < req->num_headers; i++)
        len += req->headers[i].name.len + req->headers[i].value.len;
    fl->head_copy = um_malloc(len + 1);
    char *p = fl->head_copy;
    fl->req = *req;
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

static void fill_free(struct fill *fl)
{
    if (fl->drop_posted)
        um_loop_unpost(fl->ctx->loop, &fl->drop);
    struct worker_fills *wf = um_context_get(fl->ctx, UM_CONTEXT_CACHE_FILLS);
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
    if (fl->old)
        um_cache_obj_unref(fl->old);
    free(fl->key);
    free(fl->head_copy);
    um_config_unref(fl->co->config);
    free(fl);
}

static void leave_pass_marker(struct fill *fl)
{
    struct um_cache_obj *o = um_cache_insert(fl->co->cache, (um_str){fl->key, fl->key_len}, "\1", 1);
    if (o == NULL)
        return;
    struct meta m = {.flags = META_F_PASS, .content_length = -1};
    if (um_cache_obj_set_head(o, &m, sizeof(m), "", 0) == UM_OK) {
        um_cache_obj_set_expires(o, now_sec() + PASS_TTL);
        um_cache_obj_set_stale_until(o, now_sec() + PASS_TTL);
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
    reader_release(r);
    free(r);
    return client;
}

/* Points the fill's own reader at obj and lets it go. */
static void own_switch(struct fill *fl, struct um_cache_obj *obj, int fwd_status)
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
    reader_pump(r);
}

/* A hook's freshness lifetime for this response, or -1: the head's (on_response) wins
 * over the request's (on_request). */
static int64_t hook_ttl(const struct fill *fl, const struct um_response_head *h)
{
    return h->has_ttl ? h->ttl : fl->has_ttl ? fl->ttl : -1;
}

static void fill_on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct fill *fl = (struct fill *)((char *)s - offsetof(struct fill, sink));
    struct cache_origin *co = fl->co;
    time_t response_time = now_sec();
    fl->status = h->status;
    struct um_resp_meta rm;
    um_resp_meta_scan(&rm, h->status, h->headers, h->num_headers);
    struct um_req_meta qm;
    um_req_meta_scan(&qm, fl->req.method_id, fl->req.headers, fl->req.num_headers);

    if (fl->revalidating && h->status == 304 && fl->old) {
        /* Freshen the stored response: its fields updated from the 304, its body kept. */
        um_str ometa, ohead;
        um_cache_obj_head(fl->old, &ometa, &ohead);
        struct meta m;
        memcpy(&m, ometa.base, sizeof(m));
        struct um_header of[MAX_OUT_FIELDS], merged[MAX_OUT_FIELDS * 2];
        size_t on = head_fields(ohead, of, MAX_OUT_FIELDS), mn = 0;
        for (size_t i = 0; i < on; i++) {
            bool replaced = false;
            for (size_t j = 0; j < h->num_headers && !replaced; j++)
                replaced = of[i].name.len == h->headers[j].name.len &&
                           strncasecmp(of[i].name.base, h->headers[j].name.base,
                                       of[i].name.len) == 0 &&
                           um_cache_field_updatable(h->headers[j].name, &rm);
            if (!replaced)
                merged[mn++] = of[i];
        }
        for (size_t j = 0; j < h->num_headers && mn < UM_NELEMS(merged); j++)
            if (um_cache_field_updatable(h->headers[j].name, &rm))
                merged[mn++] = h->headers[j];
        struct um_resp_meta mm;
        um_resp_meta_scan(&mm, m.status, merged, mn);
        um_age_times_init(&m.times, &mm, fl->request_time, response_time);
        enum um_fresh_source src;
        m.lifetime = um_freshness_lifetime(&mm, &co->pol, response_time, &src);
        if (hook_ttl(fl, h) >= 0)
            m.lifetime = hook_ttl(fl, h);
        size_t blen;
        char *block = head_block(merged, mn, &mm, &blen);
        um_str otag = um_cache_obj_tag(fl->old);
        struct um_cache_obj *no = um_cache_insert(co->cache, (um_str){fl->key, fl->key_len},
                                                  otag.base, otag.len);
        if (no && um_cache_obj_set_head(no, &m, sizeof(m), block, blen) == UM_OK &&
            um_cache_obj_adopt_body(no, fl->old) == UM_OK) {
            int64_t expires = response_time + (m.lifetime - um_current_age(&m.times, response_time));
            um_cache_obj_set_expires(no, expires);
            um_cache_obj_set_stale_until(no, expires + VALIDATOR_KEEP);
            um_cache_obj_finish(no, true);
            um_cache_unlink(co->cache, fl->old);
        } else if (no) {
            um_cache_obj_finish(no, false);
        }
        free(block);
        fl->revalidating = false;
        if (no && um_cache_obj_state(no) == UM_CACHE_COMPLETE)
            own_switch(fl, no, 304);
        else
            own_switch(fl, fl->old, 304); /* could not store: answer from the old one */
        if (no)
            um_cache_obj_unref(no);
        return;
    }

    if (fl->old && h->status >= 500) {
        /* The origin fails: a stale answer may stand in (stale-if-error, RFC 5861). */
        um_str ometa, ohead;
        um_cache_obj_head(fl->old, &ometa, &ohead);
        struct meta m;
        memcpy(&m, ometa.base, sizeof(m));
        struct um_header of[MAX_OUT_FIELDS];
        size_t on = head_fields(ohead, of, MAX_OUT_FIELDS);
        struct um_resp_meta om;
        um_resp_meta_scan(&om, m.status, of, on);
        struct um_stored_view v = {&om.cc, m.lifetime, um_current_age(&m.times, response_time),
                                   true};
        if (um_cache_stale_if_error_ok(&v, &qm, &co->pol, h->status)) {
            fl->revalidating = false;
            if (fl->obj) {
                /* The refetch that was to replace it: given up (its waiters ask again). */
                um_cache_obj_finish(fl->obj, false);
                um_cache_obj_unref(fl->obj);
                fl->obj = NULL;
            }
            if (fl->own)
                fl->own->cs.detail = "stale-if-error";
            own_switch(fl, fl->old, h->status);
            fl->discard = true; /* the rest of this answer goes nowhere */
            return;
        }
    }

    enum um_nostore why = um_cache_storable(&qm, &rm, &co->pol, response_time);
    int64_t ttl = hook_ttl(fl, h);
    /* A hook's lifetime stands in for missing freshness information; it does not make
     * shareable what the response or the request keep private. */
    if (ttl > 0 && (why == UM_NOSTORE_UNCACHEABLE || why == UM_NOSTORE_USELESS))
        why = UM_STORABLE;
    if (why == UM_STORABLE && (h->no_store || ttl == 0))
        why = UM_NOSTORE_HOOK;
    size_t taglen = 0;
    char tag[2048];
    if (why == UM_STORABLE) {
        taglen = tag_build(&rm.vary, &fl->req, tag, sizeof(tag));
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
        size_t blen;
        char *block = head_block(h->headers, h->num_headers, &rm, &blen);
        if (um_cache_obj_set_tag(fl->obj, tag, taglen) == UM_OK &&
            (h->content_length < 0 || um_cache_obj_expect(fl->obj, (size_t)h->content_length) == UM_OK) &&
            um_cache_obj_set_head(fl->obj, &m, sizeof(m), block, blen) == UM_OK) {
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
            own_switch(fl, fl->obj, h->status);
    }
    if (!stored) {
        /* Not kept: the waiters go to the origin on their own (the object aborts), later
         * requests pass straight through for a while, and our own client is answered
         * directly from this fetch. */
        bool response_reason = why != UM_NOSTORE_REQUEST_NO_STORE &&
                               why != UM_NOSTORE_AUTHORIZATION && why != UM_NOSTORE_METHOD;
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
            p->kind = K_PASS;
            p->co = co;
            p->sink.ops = &pass_ops;
            p->client = client;
            p->req = f.req;
            p->scheme = f.scheme;
            p->cs.cache_name = CACHE_NAME;
            p->cs.fwd = fl->revalidating ? UM_FWD_STALE : UM_FWD_URI_MISS;
            p->cs.detail = why == UM_STORABLE ? "too-large" : um_cache_nostore_str(why);
            client->origin_data = p;
            p->fill = fl;
            fl->fwd = p;
            pass_on_head(&p->sink, h);
        } else {
            fl->discard = true;
        }
    }
}

static void on_fill_drop(struct um_task *t)
{
    struct fill *fl = (struct fill *)((char *)t - offsetof(struct fill, drop));
    fl->drop_posted = false;
    fl->co->inner->ops->cancel(fl->co->inner, &fl->sink);
    fill_free(fl);
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
    struct fill *fl = (struct fill *)((char *)s - offsetof(struct fill, sink));
    struct pass *p = fill_forward(fl);
    if (p)
        return pass_on_data(&p->sink, data, len);
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

static void fill_on_end(struct um_sink *s, int err)
{
    struct fill *fl = (struct fill *)((char *)s - offsetof(struct fill, sink));
    struct pass *p = fill_forward(fl);
    if (p) {
        fl->fwd = NULL;
        pass_on_end(&p->sink, err);
    } else if (fl->discard) {
    } else if (fl->obj) {
        um_cache_obj_finish(fl->obj, err == UM_OK && fl->status != 0);
    } else if (fl->own) {
        /* Nothing was stored and the own client still waits (e.g. an error before any
         * head): let it fall back to a direct fetch. */
        struct um_fetch f;
        struct um_sink *client = fill_take_own_client(fl, &f);
        if (client)
            pass_start(fl->co, &f, client, UM_FWD_MISS, "fill-failed");
    }
    if (fl->own) {
        /* Still holding (a revalidation that ended without a head): answer from what is
         * there. */
        struct reader *r = fl->own;
        fl->own = NULL;
        if (r->waiting && !r->head_sent) {
            r->waiting = false;
            reader_pump(r);
        }
    }
    fill_free(fl);
}

static ssize_t fill_read_body(struct um_sink *s, char *buf, size_t len)
{
    (void)s;
    (void)buf;
    (void)len;
    return 0; /* fills are for GET without a body */
}

static const struct um_sink_ops fill_ops = {.on_head = fill_on_head,
                                            .on_data = fill_on_data,
                                            .on_file = fill_on_file,
                                            .on_end = fill_on_end,
                                            .read_body = fill_read_body};

static void fills_stop(struct um_task *t)
{
    struct worker_fills *wf = (struct worker_fills *)((char *)t - offsetof(struct worker_fills, stop));
    while (wf->active) {
        struct fill *fl = wf->active;
        fl->co->inner->ops->cancel(fl->co->inner, &fl->sink);
        struct pass *p = fill_forward(fl);
        if (p)
            free(p); /* its client is gone already */
        fl->fwd = NULL;
        fl->own = NULL;
        fill_free(fl);
    }
    um_context_set(wf->ctx, UM_CONTEXT_CACHE_FILLS, NULL);
    free(wf);
}

/* Starts a fill of obj (NULL for a revalidation of old) for the request f; the client
 * becomes a reader of obj. */
static void fill_start(struct cache_origin *co, struct um_fetch *f, struct um_sink *client,
                       struct um_cache_obj *obj, struct um_cache_obj *old, char *key,
                       size_t key_len, enum um_cache_fwd fwd)
{
    struct fill *fl = um_calloc(1, sizeof(*fl));
    fl->kind = K_FILL;
    fl->co = co;
    /* A fill may outlive its client, and so the client's hold on the snapshot that owns
     * co and the inner origin (a reload can retire it meanwhile): it holds its own. */
    um_config_ref(co->config);
    fl->sink.ops = &fill_ops;
    fl->ctx = f->ctx;
    fl->obj = obj;
    fl->old = old;
    fl->key = key;
    fl->key_len = key_len;
    fl->request_time = now_sec();
    fl->has_ttl = f->has_ttl;
    fl->ttl = f->ttl;
    copy_request(fl, f->req);
    struct worker_fills *wf = worker_fills(fl->ctx);
    fl->next_active = wf->active;
    if (wf->active)
        wf->active->prev_active = fl;
    wf->active = fl;

    /* The client reads from the object (or, for a revalidation, waits for its answer). A
     * background refresh has no client. */
    if (client) {
        struct reader *r = reader_new(co, f, client, um_cache_obj_ref(obj ? obj : old));
        r->cs.fwd = fwd;
        r->waiting = obj == NULL;
        fl->own = r;
    }

    struct um_fetch ff = *f;
    ff.req = &fl->req;
    struct um_header extra[2];
    size_t nextra = 0;
    char etag_buf[256], lm_buf[64];
    if (old && obj == NULL) {
        /* Conditional request with the stored validators (RFC 9111 4.3.1). */
        fl->revalidating = true;
        um_str ometa, ohead;
        if (um_cache_obj_head(old, &ometa, &ohead)) {
            struct um_header of[MAX_OUT_FIELDS];
            size_t on = head_fields(ohead, of, MAX_OUT_FIELDS);
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
    co->inner->ops->fetch(co->inner, &ff, &fl->sink);
    /* The fetch may have ended at once (an error answered synchronously): the reader
     * starts if it still exists. */
    if (client && client->origin_data && ((struct reader *)client->origin_data)->kind == K_READER)
        reader_pump(client->origin_data);
}

/* ---------------------------------------------------------------- origin ops */

static bool purge_allowed(const struct cache_origin *co, const struct um_fetch *f)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (inet_pton(AF_INET, f->client_ip, &((struct sockaddr_in *)&ss)->sin_addr) == 1)
        ss.ss_family = AF_INET;
    else if (inet_pton(AF_INET6, f->client_ip, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1)
        ss.ss_family = AF_INET6;
    else
        return false;
    return um_netmask_match(co->config->cache.purge_allow, co->config->cache.num_purge_allow,
                            (const struct sockaddr *)&ss);
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

static void cache_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *client)
{
    struct cache_origin *co = (struct cache_origin *)o;
    const struct um_request *req = f->req;
    client->origin_data = NULL;
    if (um_str_eq(req->method, "PURGE")) {
        if (!purge_allowed(co, f)) {
            respond_small(client, 403, "403 Forbidden: PURGE is not allowed from here\n");
            return;
        }
        size_t klen;
        char *key = fetch_key(f, &klen);
        size_t n = um_cache_purge(co->cache, (um_str){key, klen});
        free(key);
        respond_small(client, n ? 200 : 404, n ? "200 Purged\n" : "404 Not in the cache\n");
        return;
    }
    bool body = (req->flags & UM_REQ_F_CHUNKED) ||
                ((req->flags & UM_REQ_F_CONTENT_LENGTH) && req->content_length > 0);
    if ((req->method_id != UM_METHOD_GET && req->method_id != UM_METHOD_HEAD) || body) {
        pass_start(co, f, client, UM_FWD_METHOD, NULL);
        return;
    }
    if (f->no_cache) {
        pass_start(co, f, client, UM_FWD_BYPASS, "hook");
        return;
    }
    struct um_req_meta qm;
    um_req_meta_scan(&qm, req->method_id, req->headers, req->num_headers);
    if (qm.cc.no_store) {
        pass_start(co, f, client, UM_FWD_REQUEST, "no-store");
        return;
    }
    size_t klen;
    char *key = fetch_key(f, &klen);
    um_str k = {key, klen};
    struct um_cache_obj *obj = um_cache_lookup(co->cache, k, match_cb, (void *)req);
    if (obj) {
        um_str ms, hs;
        enum um_cache_state st = um_cache_obj_state(obj);
        if (st == UM_CACHE_FILLING || !um_cache_obj_head(obj, &ms, &hs)) {
            /* Coalesced: stream it as it arrives. */
            free(key);
            struct reader *r = reader_new(co, f, client, obj);
            r->cs.fwd = UM_FWD_URI_MISS;
            r->cs.collapsed = true;
            reader_pump(r);
            return;
        }
        struct meta m;
        memcpy(&m, ms.base, sizeof(m));
        if (m.flags & META_F_PASS) {
            free(key);
            um_cache_obj_unref(obj);
            pass_start(co, f, client, UM_FWD_URI_MISS, "hit-for-pass");
            return;
        }
        struct um_header fields[MAX_OUT_FIELDS];
        size_t nf = head_fields(hs, fields, MAX_OUT_FIELDS);
        struct um_resp_meta rm;
        um_resp_meta_scan(&rm, m.status, fields, nf);
        time_t now = now_sec();
        struct um_stored_view v = {&rm.cc, m.lifetime, um_current_age(&m.times, now),
                                   rm.etag.len > 0 || rm.has_last_modified};
        enum um_cache_use use = um_cache_decide(&v, &qm);
        if (use == UM_USE_FRESH || use == UM_USE_STALE || use == UM_USE_STALE_WHILE_REVALIDATE) {
            if (use == UM_USE_STALE_WHILE_REVALIDATE && req->method_id == UM_METHOD_GET) {
                /* Served stale; one refresh in the background. Requests arriving meanwhile
                 * find the refreshing object first and stream from it. */
                static const char pend = TAG_PENDING;
                struct um_cache_obj *nobj = um_cache_insert(co->cache, k, &pend, 1);
                if (nobj)
                    fill_start(co, f, NULL, nobj, um_cache_obj_ref(obj), um_strndup(key, klen),
                               klen, UM_FWD_STALE);
            }
            free(key);
            struct reader *r = reader_new(co, f, client, obj);
            r->cs.hit = true;
            reader_pump(r);
            return;
        }
        if (use == UM_USE_GATEWAY_TIMEOUT) {
            free(key);
            um_cache_obj_unref(obj);
            respond_small(client, 504, "504 Gateway Timeout: not in the cache (only-if-cached)\n");
            return;
        }
        /* Stored and fresh, yet forwarded: the request asked for it (no-cache, max-age). */
        bool asked = qm.cc.no_cache || qm.cc.max_age >= 0 || qm.cc.min_fresh >= 0;
        enum um_cache_fwd why = um_is_fresh(v.lifetime, v.age) && !rm.cc.no_cache && asked
                                    ? UM_FWD_REQUEST
                                    : UM_FWD_STALE;
        if (use == UM_USE_REVALIDATE && req->method_id == UM_METHOD_GET) {
            fill_start(co, f, client, NULL, obj, key, klen, why);
            return;
        }
        if (req->method_id == UM_METHOD_GET) {
            /* Unusable as it is and nothing to validate with: fetch it again into a new
             * object ahead of this one (which may still stand in if the origin fails). */
            static const char pend = TAG_PENDING;
            struct um_cache_obj *nobj = um_cache_insert(co->cache, k, &pend, 1);
            if (nobj) {
                fill_start(co, f, client, nobj, obj, key, klen, why);
                return;
            }
        }
        um_cache_obj_unref(obj);
        if (req->method_id == UM_METHOD_GET) {
            free(key);
            pass_start(co, f, client, UM_FWD_MISS, "no-room");
            return;
        }
    } else if (qm.cc.only_if_cached) {
        free(key);
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
        free(key);
        pass_start(co, f, client, UM_FWD_URI_MISS, NULL);
        return;
    }
    struct um_cache_obj *nobj = NULL;
    static const char pending = TAG_PENDING;
    enum um_cache_result res =
        um_cache_lookup_or_insert(co->cache, k, match_cb, (void *)req, &pending, 1, &nobj);
    if (res == UM_CACHE_NOSPACE) {
        free(key);
        pass_start(co, f, client, UM_FWD_URI_MISS, "no-room");
        return;
    }
    if (res == UM_CACHE_FOUND) {
        free(key);
        struct reader *r = reader_new(co, f, client, nobj);
        r->cs.fwd = UM_FWD_URI_MISS;
        r->cs.collapsed = true;
        reader_pump(r);
        return;
    }
    fill_start(co, f, client, nobj, NULL, key, klen, miss);
}

static void cache_resume(struct um_origin *o, struct um_sink *client)
{
    struct cache_origin *co = (struct cache_origin *)o;
    void *d = client->origin_data;
    if (d == NULL)
        return;
    if (*(enum kind *)d == K_READER) {
        reader_pump(d);
    } else if (*(enum kind *)d == K_PASS) {
        struct pass *p = d;
        co->inner->ops->resume(co->inner, p->fill ? &p->fill->sink : &p->sink);
    }
}

static void cache_body_ready(struct um_origin *o, struct um_sink *client)
{
    struct cache_origin *co = (struct cache_origin *)o;
    void *d = client->origin_data;
    if (d && *(enum kind *)d == K_PASS)
        co->inner->ops->body_ready(co->inner, &((struct pass *)d)->sink);
}

/* The fill whose own client is r, if any: it must stop pointing at r. */
static void forget_own(struct reader *r)
{
    for (struct fill *fl = first_fill(r->ctx); fl; fl = fl->next_active) {
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

static void cache_cancel(struct um_origin *o, struct um_sink *client)
{
    struct cache_origin *co = (struct cache_origin *)o;
    void *d = client->origin_data;
    if (d == NULL)
        return;
    client->origin_data = NULL;
    if (*(enum kind *)d == K_READER) {
        struct reader *r = d;
        forget_own(r);
        reader_release(r);
        free(r);
    } else if (*(enum kind *)d == K_PASS) {
        struct pass *p = d;
        if (p->fill) {
            /* A fill forwarding to this pass: nobody else wants its answer. */
            struct fill *fl = p->fill;
            fl->fwd = NULL;
            co->inner->ops->cancel(co->inner, &fl->sink);
            fill_free(fl);
            free(p);
            return;
        }
        co->inner->ops->cancel(co->inner, &p->sink);
        free(p);
    }
}

static void cache_destroy(struct um_origin *o)
{
    struct cache_origin *co = (struct cache_origin *)o;
    co->inner->ops->destroy(co->inner);
    free(co);
}

static const struct um_origin_ops cache_ops = {
    .flags = UM_ORIGIN_F_STREAM_BODY,
    .fetch = cache_fetch,
    .resume = cache_resume,
    .body_ready = cache_body_ready,
    .cancel = cache_cancel,
    .destroy = cache_destroy,
};

struct um_origin *um_cache_origin_create(struct um_cache *cache, struct um_origin *inner,
                                         const struct um_route *route,
                                         const struct um_config *config)
{
    struct cache_origin *co = um_calloc(1, sizeof(*co));
    co->base.ops = &cache_ops;
    co->inner = inner;
    co->cache = cache;
    co->config = config;
    (void)route; /* the route's settings live in config today */
    um_cache_policy_init(&co->pol);
    co->pol.default_ttl = (int64_t)config->cache.default_ttl;
    co->pol.stale_if_error = (int64_t)config->cache.stale_if_error;
    return &co->base;
}
