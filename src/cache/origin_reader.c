/* SPDX-License-Identifier: BSD-2-Clause */
/* The caching layer's reader (see origin.c's note): it answers one client from a stored
 * object: the head with Age and Cache-Status (conditionals and Range once the object's
 * length is known: complete, or filling with a Content-Length), then the body, without
 * copying, while the object may still be filling. The
 * store wakes it on the filler's thread; it goes on on its own loop through a posted
 * task. A stored object that cannot answer after all makes it a pass. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- tags */

struct tag_view {
    unsigned flags;
    struct um_vary_value v[UM_VARY_MAX];
    size_t n;
    um_str bucket; /* a TAG_BUCKET value; len 0: none */
};

static bool tag_parse(um_str tag, struct tag_view *tv)
{
    tv->flags = 0;
    tv->n = 0; /* the entries are written as they are parsed */
    tv->bucket = (um_str){NULL, 0};
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
        unsigned present = *p++;
        size_t vl = (size_t)p[0] << 8 | p[1];
        p += 2;
        if ((size_t)(end - p) < vl)
            return false;
        if (present == TAG_BUCKET) {
            if (vl < 2 || vl > 4)
                return false;
            tv->bucket = (um_str){(const char *)p, vl};
            p += vl;
            continue;
        }
        tv->v[tv->n++] = (struct um_vary_value){name, {(const char *)p, vl}, present != 0};
        p += vl;
    }
    return p == end;
}

static bool tag_matches(um_str tag, const struct um_request *req)
{
    /* No Vary values (the usual case; flags alone match every request): nothing to
     * compare. */
    if (tag.len <= 1 || (tag.base[0] & (TAG_PASS | TAG_PENDING)))
        return true;
    struct tag_view tv;
    if (!tag_parse(tag, &tv))
        return false;
    if (tv.flags & (TAG_PASS | TAG_PENDING))
        return true;
    if (tv.bucket.len > 0) {
        unsigned char order[3];
        size_t n = tv.bucket.len - 1;
        for (size_t i = 0; i < n; i++)
            order[i] = (unsigned char)(tv.bucket.base[i] - '0');
        enum um_coding c = um_compress_negotiate(req->headers, req->num_headers, order, n);
        if ((char)('0' + c) != tv.bucket.base[n])
            return false;
    }
    return um_vary_matches(tv.v, tv.n, req->headers, req->num_headers);
}

bool um__cache_tag_matches(um_str tag, const struct um_request *req)
{
    return tag_matches(tag, req);
}

bool um__cache_match(const struct um_cache_obj *obj, void *arg)
{
    return tag_matches(um_cache_obj_tag(obj), arg);
}

bool um__cache_obj_coded(const struct um_cache_obj *obj)
{
    um_str ms, hs;
    if (!um_cache_obj_head(obj, &ms, &hs))
        return false;
    struct um_header f[MAX_OUT_FIELDS];
    size_t n = um__cache_meta_fields((const struct meta *)(const void *)ms.base, hs, f,
                                     MAX_OUT_FIELDS);
    for (size_t i = 0; i < n; i++)
        if (um_str_eq_ci(f[i].name, "content-encoding") &&
            !um_str_eq_ci(um_str_trim(f[i].value), "identity"))
            return true;
    return false;
}

/* ---------------------------------------------------------------- stored heads */

/* Splits a stored head block into at most max fields (slices of it); *wire (may be NULL)
 * says whether the block is made of field lines alone, "Name: value\r\n" each, every one
 * of them among the fields returned: a connection may then send the block as those
 * fields. One pass does both, as a miss stores a block and builds its meta at once. */
static size_t head_split(um_str head, struct um_header *f, size_t max, bool *wire)
{
    size_t n = 0;
    bool w = true;
    const char *p = head.base, *end = head.base + head.len;
    while (p < end && n < max) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL) {
            w = false;
            break;
        }
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon) {
            size_t vl = (size_t)(eol - colon - 1);
            if (vl > 0 && colon[vl] == '\r')
                vl--;
            f[n].name = (um_str){p, (size_t)(colon - p)};
            f[n].value = um_str_trim((um_str){colon + 1, vl});
            n++;
            if (eol[-1] != '\r')
                w = false;
        } else {
            w = false; /* an empty line, or one without a colon */
        }
        p = eol + 1;
    }
    if (p < end)
        w = false; /* lines beyond max */
    if (wire)
        *wire = w;
    return n;
}

size_t um__cache_head_fields(um_str head, struct um_header *f, size_t max)
{
    return head_split(head, f, max, NULL);
}

/* ---------------------------------------------------------------- meta blocks */

/* struct meta_cc copies the scalars of struct um_cc: a field added there must be added to
 * meta_cc, um__cache_meta_build and um__cache_meta_cc too, or a hit would not see it. The
 * size check makes the build say so. */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(struct um_cc) == 344,
               "struct um_cc changed: update struct meta_cc (cache/internal.h), "
               "um__cache_meta_build and um__cache_meta_cc");
#endif

struct meta *um__cache_meta_build(const struct meta *base, um_str head,
                                  const struct um_cache_policy *pol, size_t *len)
{
    struct um_header f[MAX_OUT_FIELDS];
    bool wire;
    size_t n = head_split(head, f, MAX_OUT_FIELDS, &wire);
    struct um_resp_meta rm;
    um_resp_meta_scan(&rm, base->status, f, n);
    if (pol)
        um_resp_meta_target(&rm, pol); /* RFC 9213: a targeted field's directives, if any */
    *len = sizeof(struct meta) + n * sizeof(struct meta_field);
    struct meta *m = um_calloc(1, *len);
    m->flags = base->flags & ~(uint32_t)META_F_WIRE;
    if (n > 0 && n < MAX_OUT_FIELDS && wire)
        m->flags |= META_F_WIRE;
    m->status = base->status;
    m->times = base->times;
    m->lifetime = base->lifetime;
    m->content_length = base->content_length;
    const struct um_cc *cc = &rm.cc;
    m->cc = (struct meta_cc){
        .present = cc->present, .no_store = cc->no_store, .no_cache = cc->no_cache,
        .private_ = cc->private_, .public_ = cc->public_,
        .must_revalidate = cc->must_revalidate, .proxy_revalidate = cc->proxy_revalidate,
        .must_understand = cc->must_understand, .no_transform = cc->no_transform,
        .immutable = cc->immutable, .only_if_cached = cc->only_if_cached,
        .invalid = cc->invalid, .max_age = cc->max_age, .s_maxage = cc->s_maxage,
        .max_stale = cc->max_stale, .min_fresh = cc->min_fresh,
        .stale_while_revalidate = cc->stale_while_revalidate,
        .stale_if_error = cc->stale_if_error};
    if (rm.etag.len > 0) {
        m->etag_off = (uint32_t)(rm.etag.base - head.base);
        m->etag_len = (uint32_t)rm.etag.len;
    }
    m->has_last_modified = rm.has_last_modified;
    m->last_modified = rm.last_modified;
    m->has_date = rm.has_date;
    m->date = rm.date;
    m->nfields = (uint32_t)n;
    for (size_t i = 0; i < n; i++)
        m->fields[i] = (struct meta_field){(uint32_t)(f[i].name.base - head.base),
                                           (uint32_t)f[i].name.len,
                                           (uint32_t)(f[i].value.base - head.base),
                                           (uint32_t)f[i].value.len};
    return m;
}

void um__cache_meta_cc(const struct meta *m, struct um_cc *cc)
{
    um_cc_init(cc);
    const struct meta_cc *s = &m->cc;
    cc->present = s->present;
    cc->no_store = s->no_store;
    cc->no_cache = s->no_cache;
    cc->private_ = s->private_;
    cc->public_ = s->public_;
    cc->must_revalidate = s->must_revalidate;
    cc->proxy_revalidate = s->proxy_revalidate;
    cc->must_understand = s->must_understand;
    cc->no_transform = s->no_transform;
    cc->immutable = s->immutable;
    cc->only_if_cached = s->only_if_cached;
    cc->invalid = s->invalid;
    cc->max_age = s->max_age;
    cc->s_maxage = s->s_maxage;
    cc->max_stale = s->max_stale;
    cc->min_fresh = s->min_fresh;
    cc->stale_while_revalidate = s->stale_while_revalidate;
    cc->stale_if_error = s->stale_if_error;
}

size_t um__cache_meta_fields(const struct meta *m, um_str head, struct um_header *f, size_t max)
{
    size_t n = m->nfields < max ? m->nfields : max;
    for (size_t i = 0; i < n; i++) {
        const struct meta_field *mf = &m->fields[i];
        f[i].name = (um_str){head.base + mf->name_off, mf->name_len};
        f[i].value = (um_str){head.base + mf->value_off, mf->value_len};
    }
    return n;
}

/* ---------------------------------------------------------------- readers */

#define SPARE_READERS_MAX 256

static void on_progress(struct um_cache_waiter *w)
{
    /* The filler's thread: only hand over to the reader's own loop. */
    struct reader *r = um_container_of(w, struct reader, waiter);
    um_loop_post(r->ctx->loop, &r->task);
}

static void on_reader_task(struct um_task *t)
{
    struct reader *r = um_container_of(t, struct reader, task);
    r->waiting = false;
    um__cache_reader_pump(r);
}

struct reader *um__cache_reader_new(struct cache_origin *co, struct um_fetch *f,
                                    struct um_sink *client, struct um_cache_obj *obj,
                                    const struct um_req_meta *qm)
{
    struct worker_fills *wf = um__cache_worker_fills(f->ctx);
    struct reader *r = wf->free_readers;
    if (r != NULL) {
        wf->free_readers = r->next_free;
        wf->num_free_readers--;
        /* Only what the rest of this function does not set. */
        r->next_free = NULL;
        r->head_sent = r->done = r->waiting = r->registered = false;
        r->ranged = r->obj_given = r->for_coding = false;
        r->range_skip = r->range_left = 0;
        memset(&r->cs, 0, sizeof(r->cs));
        memset(&r->task, 0, sizeof(r->task));
    } else {
        r = um_calloc(1, sizeof(*r));
    }
    r->has_qm = qm != NULL;
    if (qm != NULL)
        r->qm = *qm;
    r->ops = &um__cache_reader_req;
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

/* Detaches r from everything; the caller frees it. */
void um__cache_reader_release(struct reader *r)
{
    um__cache_forget_own(r);
    if (r->registered) {
        um_cache_obj_unwait(r->obj, &r->waiter);
        um_loop_unpost(r->ctx->loop, &r->task);
    }
    if (!r->obj_given)
        um_cache_obj_unref(r->obj);
    r->obj = NULL;
}

void um__cache_reader_free(struct reader *r)
{
    struct worker_fills *wf = um_context_get(r->ctx, &um__cache_fills_slot);
    if (wf == NULL || wf->num_free_readers >= SPARE_READERS_MAX) {
        free(r);
        return;
    }
    r->ops = NULL; /* not a live reader any more */
    r->next_free = wf->free_readers;
    wf->free_readers = r;
    wf->num_free_readers++;
}

/* The end of a reader: after on_end nothing may touch the client. */
static void reader_finish(struct reader *r, int err)
{
    r->done = true;
    struct um_sink *client = r->client;
    um__cache_reader_release(r);
    client->origin_data = NULL;
    client->ops->on_end(client, err);
    um__cache_reader_free(r);
}

/* The stored object cannot answer this request after all (hit-for-pass, another variant,
 * an aborted fill before any byte was sent): ask the inner origin directly. */
/* The object ran out of room while the reader was in its body (a client that joined a
 * fill too large for the memory): the rest comes from a fetch of its own through the inner
 * origin (the disk tier answers it when it holds the object), the bytes the client has
 * passed over, when the answer is the same (a 200 of the stored length and ETag); else
 * the body is cut short, as it was before. Returns whether the reader went on. */
/* A pass that takes r's client over (r's head was sent; the pass sends the rest). */
static struct pass *pass_for(struct reader *r)
{
    struct pass *p = um_calloc(1, sizeof(*p));
    p->ops = &um__cache_pass_req;
    p->co = r->co;
    p->sink.ops = &um__cache_pass_ops;
    p->client = r->client;
    p->req = r->req;
    p->scheme = r->fetch.scheme;
    return p;
}

/* r's client goes to p, a pass fetching under r's object's key (which p holds), so that
 * the disk tier beneath answers it when it holds the object; r is freed. */
static void pass_keyed(struct reader *r, struct pass *p)
{
    p->obj = um_cache_obj_ref(r->obj);
    struct cache_origin *co = r->co;
    struct um_fetch f = r->fetch;
    f.fill_key = um_cache_obj_key(p->obj);
    struct um_sink *client = r->client;
    client->origin_data = p;
    um__cache_reader_release(r);
    um__cache_reader_free(r);
    co->inner->ops->fetch(co->inner, &f, &p->sink);
}

static bool reader_resume(struct reader *r)
{
    um_str meta_s, head;
    if (!r->head_sent || r->for_coding || !um_cache_obj_outgrew(r->obj) ||
        !um_cache_obj_head(r->obj, &meta_s, &head))
        return false;
    const struct meta *m = (const struct meta *)(const void *)meta_s.base;
    struct pass *p;
    if (m->status != 200 || m->content_length < 0 || (uint64_t)m->content_length < r->cur.off ||
        m->etag_len > sizeof(p->etag))
        return false;
    p = pass_for(r);
    p->resumed = true;
    p->expect_length = m->content_length;
    memcpy(p->etag, head.base + m->etag_off, m->etag_len);
    p->etag_len = m->etag_len;
    p->ranged = true;
    p->range_skip = r->cur.off;
    p->range_left = r->ranged ? r->range_left : (uint64_t)m->content_length - r->cur.off;
    pass_keyed(r, p);
    return true;
}

static void reader_fall_back(struct reader *r, const char *detail)
{
    struct cache_origin *co = r->co;
    struct um_fetch f = r->fetch;
    struct um_sink *client = r->client;
    um__cache_reader_release(r);
    um__cache_reader_free(r);
    um__cache_pass_start(co, &f, client, UM_FWD_MISS, detail);
}

/* The fill r waited on ended without storing (the origin's answer was not storable, or
 * the disk tier beneath answered without promoting it): a fetch of r's own, keyed (else
 * r's client would go to the origin for what is on disk). */
static void reader_fall_back_keyed(struct reader *r)
{
    struct pass *p = pass_for(r);
    p->cs.cache_name = CACHE_NAME;
    p->cs.fwd = UM_FWD_MISS;
    p->cs.detail = "aborted";
    pass_keyed(r, p);
}

/* The Age value: whole seconds, never negative (a clock that stepped back), written at
 * the end of buf (24 bytes); returns the slice. */
static um_str format_age(char buf[24], int64_t age)
{
    uint64_t v = age < 0 ? 0 : (uint64_t)age;
    size_t i = 24;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    return (um_str){buf + i, 24 - i};
}

/* Sends the head of the stored response (status may become 304, 206, 412, 416). Returns
 * false when the reader is finished (nothing more to send). */
static bool reader_send_head(struct reader *r, um_str meta_s, um_str head)
{
    const struct meta *m = (const struct meta *)(const void *)meta_s.base;
    struct um_header out[MAX_OUT_FIELDS + 4];
    size_t no = um__cache_meta_fields(m, head, out, MAX_OUT_FIELDS), nstored = no;
    time_t now = now_sec(r->ctx);
    int64_t age = um_current_age(&m->times, now);
    bool complete = um_cache_obj_state(r->obj) == UM_CACHE_COMPLETE;
    int64_t length = complete ? (int64_t)um_cache_obj_body_len(r->obj) : m->content_length;

    int status = m->status;
    uint64_t first = 0, last = 0;
    char cr[96];
    if (complete || length >= 0) {
        /* Conditionals and Range, answered from what is stored, or from what the object
         * is being filled with when its length is known: a Range on a miss gets its
         * bytes as they arrive (the reader passes over those before them), while the fill
         * fetches the whole object for the cache. */
        if (!r->has_qm) {
            um_req_meta_scan(&r->qm, r->req->method_id, r->req->headers, r->req->num_headers);
            r->has_qm = true;
        }
        um_str etag = {m->etag_len ? head.base + m->etag_off : NULL, m->etag_len};
        struct um_cond_stored cs = {m->status, etag, m->has_last_modified, m->last_modified,
                                    m->has_date, m->date, m->times.response_time,
                                    (uint64_t)length};
        int c = um_cache_conditional(&r->qm, &cs, false, &first, &last);
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
    out[no++] = (struct um_header){UM_STR("Age"), format_age(agebuf, age)};
    /* RFC 9211 2.4: the remaining freshness, negative when stale. Every hit says it, and
     * so does a stale copy served on any other way (stale-if-error stands in for a failed
     * fetch, a revalidation whose answer could not be stored). */
    int64_t ttl = m->lifetime - judged_age(r->obj, m->lifetime, age, now);
    if (r->cs.hit || ttl <= 0) {
        r->cs.has_ttl = true;
        r->cs.ttl = ttl;
    }
    size_t cl = um_cache_status_format(csbuf, sizeof(csbuf), &r->cs);
    if (cl < sizeof(csbuf))
        out[no++] = (struct um_header){UM_STR("Cache-Status"), {csbuf, cl}};
    /* A peer that fills from this node (umbra/cluster.h) stores the tags too, so that a
     * tag purge finds its copy: they go to it even when clients are not to see them. */
    char tagbuf[2048];
    if ((r->fetch.from_peer || r->for_coding) && !um_cache_conf(r->co->config)->expose_tags) {
        um_str tags[UM_CACHE_MAX_TAGS];
        size_t nt = um_cache_obj_tags(r->obj, tags, UM_CACHE_MAX_TAGS), tl = 0;
        for (size_t i = 0; i < nt && tl + tags[i].len + 1 < sizeof(tagbuf); i++) {
            if (tl)
                tagbuf[tl++] = ' ';
            memcpy(tagbuf + tl, tags[i].base, tags[i].len);
            tl += tags[i].len;
        }
        if (tl)
            out[no++] = (struct um_header){UM_STR("Surrogate-Key"), {tagbuf, tl}};
    }
    struct um_response_head h = {.status = status, .headers = out, .num_headers = no,
                                 .content_length = length, .reason = {NULL, 0}, .cache = &r->cs};
    if ((m->flags & META_F_WIRE) && nstored == m->nfields) {
        /* The stored fields leave as the block they were stored as. */
        h.wire = head;
        h.num_wire = nstored;
    }
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

void um__cache_reader_pump(struct reader *r)
{
    if (r->done || r->waiting)
        return;
    if (!r->head_sent) {
        um_str meta_s, head;
        if (!um_cache_obj_head(r->obj, &meta_s, &head)) {
            if (um_cache_obj_state(r->obj) == UM_CACHE_ABORTED) {
                reader_fall_back_keyed(r);
                return;
            }
            r->registered = true;
            if (um_cache_obj_wait(r->obj, &r->cur, &r->waiter)) {
                r->waiting = true;
                return;
            }
            um__cache_reader_pump(r);
            return;
        }
        const struct meta *m = (const struct meta *)(const void *)meta_s.base;
        if ((m->flags & META_F_PASS) || !tag_matches(um_cache_obj_tag(r->obj), r->req)) {
            reader_fall_back(r, (m->flags & META_F_PASS) ? "hit-for-pass" : "vary-mismatch");
            return;
        }
        if (r->for_coding && um__cache_obj_coded(r->obj)) {
            reader_fall_back(r, "coded");
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
             * object, whose chunks live as long as it does. The last bytes of the answer
             * take the reader's own reference, which it would give back right after: on
             * an object that every worker reads, each reference is an atomic operation
             * on a cache line the other cores write too. The reader then ends at once
             * and touches the object no more (the segment may be released, and the
             * object freed, before on_data_ref returns). A reader that ever waited keeps
             * its own (it must unwait). */
            bool last = !r->registered &&
                        (r->ranged ? len == r->range_left : complete && i + 1 == n);
            if (!last)
                um_cache_obj_ref(r->obj);
            size_t taken = r->client->ops->on_data_ref(r->client, base, len, release_obj, r->obj);
            if (taken == 0) {
                if (!last)
                    um_cache_obj_unref(r->obj);
                return; /* the client is behind: resume comes */
            }
            if (last) {
                UM_ASSERT(taken == len); /* a sink takes all or nothing */
                r->obj_given = true;
                reader_finish(r, UM_OK);
                return;
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
            struct fill *fl = um__cache_first_fill(r->ctx);
            while (fl && fl->own != r)
                fl = fl->next_active;
            if (fl && fl->handoff) {
                /* Caught up with what was stored: the rest comes from the fetch. */
                struct pass *p = pass_for(r);
                p->fill = fl;
                /* A range goes on from where the reader is: the fetch resumes at the first
                 * byte the object could not take, the reader's position. */
                p->ranged = r->ranged;
                p->range_skip = r->range_skip;
                p->range_left = r->range_left;
                fl->own = NULL;
                fl->handoff = false;
                fl->fwd = p;
                r->client->origin_data = p;
                um__cache_reader_release(r);
                um__cache_reader_free(r);
                fl->src->ops->resume(fl->src, &fl->sink);
                return;
            }
            if (!reader_resume(r))
                reader_finish(r, UM_ERR); /* the body was cut short */
            return;
        }
        r->registered = true;
        if (um_cache_obj_wait(r->obj, &r->cur, &r->waiter)) {
            /* The fill's bytes ran dry: a sink that holds some back (the compressing
             * layer of a coding made from this object) sends what it holds. */
            r->waiting = true;
            um_sink_flush(r->client);
            return;
        }
    }
}
