/* SPDX-License-Identifier: BSD-2-Clause */
/* The disk tier's origin layer (umbra/disktier.h): between the memory cache and the origin
 * chain below it. A fill of the memory cache looks its key up in the disk's index (memory
 * only); a fresh record is read on the disk's threads and answered from (the memory cache
 * stores it when it is asked again within the memory's reach: promotion, disk_admit.c;
 * else the head says not_promoted and the memory cache only passes it on), anything else
 * goes to the inner origin through a tee that keeps a copy of a storable answer and writes
 * it once the answer is whole (write-behind).
 *
 * A record's metadata (struct disk_meta, then the key, then the stored fields as
 * "Name: value\r\n" lines) carries what the answer needs to be judged again: status, the
 * times of RFC 9111's age calculation and the freshness lifetime the cache gave it. A fresh
 * record answers; a stale one answers when its stale-while-revalidate (or the client's
 * max-stale) allows (the memory cache that stores it refreshes it on its next request),
 * else the fill asks the origin (with the record's validators: a 304 freshens it), and the
 * record stands in when the origin fails within its stale-if-error (RFC 5861). The key is
 * kept to tell a hash collision from a hit. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "disktier_internal.h"
#include "umbra/buf.h"
#include "umbra/httpfield.h"
#include "umbra/loop.h"

#include "origin_disk.h"

static void df_free(struct disk_fetch *df)
{
    free(df->body);
    free(df->old_meta);
    free(df->creq);
    free(df->vary);
    um_buf_dispose(&df->rec);
    free(df->recmem);
    free(df);
}

/* ---------------------------------------------------------------- the tee (a miss) */

/* A record's metadata into rec (initialised here): m, the key, then the fields of h the
 * memory cache would keep (um__cache_field_skipped), the tag fields included so that a
 * promoted object is tagged again. */
void um__disk_record_start(struct um_buf *rec, struct disk_meta m, um_str key,
                           const struct um_header *h, size_t n, const struct um_resp_meta *rm)
{
    m.key_len = (uint32_t)key.len;
    um_buf_init(rec);
    size_t need = sizeof(m) + key.len; /* sized once: no growth by steps on every miss */
    for (size_t i = 0; i < n; i++)
        need += h[i].name.len + h[i].value.len + 4;
    um_buf_reserve(rec, need);
    um_buf_append(rec, &m, sizeof(m));
    um_buf_append(rec, key.base, key.len);
    size_t fields = rec->len;
    for (size_t i = 0; i < n; i++) {
        if (um__cache_field_skipped(h[i].name, rm, false)) continue;
        um_buf_append(rec, h[i].name.base, h[i].name.len);
        um_buf_append(rec, ": ", 2);
        um_buf_append(rec, h[i].value.base, h[i].value.len);
        um_buf_append(rec, "\r\n", 2);
    }
    ((struct disk_meta *)(void *)rec->base)->head_len = (uint32_t)(rec->len - fields);
}

/* The Age field of a record served at age seconds (its buffer: buf). */
struct um_header um__disk_age_field(int64_t age, char (*buf)[24])
{
    int n = snprintf(*buf, sizeof(*buf), "%lld", (long long)(age < 0 ? 0 : age));
    return (struct um_header){UM_STR("Age"), {*buf, (size_t)n}};
}

/* The key of the variant of the fill's request for the Vary field names in names ("a,b"):
 * the hash of the URL's key and, per name, the request's normalised value. false when a
 * value is too long to key on. */
static bool variant_key(struct disk_fetch *df, um_str names, struct um_disk_key *out)
{
    struct um_buf b;
    um_buf_init(&b);
    um_buf_append(&b, df->f.fill_key.base, df->f.fill_key.len);
    um_buf_append(&b, &df->vary_gen, sizeof(df->vary_gen));
    size_t pos = 0;
    um_str m;
    bool ok = true;
    while (ok && um_http_list_next(names, &pos, &m)) {
        char val[1024];
        bool present;
        um_str name = um_str_trim(m);
        size_t vl = um_vary_normalize(name, df->f.req->headers, df->f.req->num_headers, val,
                                      sizeof(val), &present);
        ok = vl < sizeof(val);
        um_buf_append(&b, "\n", 1);
        um_buf_append(&b, name.base, name.len);
        um_buf_append(&b, present ? "=" : "!", 1);
        um_buf_append(&b, val, vl < sizeof(val) ? vl : 0);
    }
    *out = um_disk_key_of(b.base, b.len);
    um_buf_dispose(&b);
    return ok;
}

/* The Vary names of h other than Accept-Encoding ("a,b"; malloc'd), NULL when none;
 * *never: Vary "*" or unparsable (not to be stored). */
static char *vary_names(const struct um_response_head *h, bool *never)
{
    struct um_buf b;
    um_buf_init(&b);
    *never = false;
    for (size_t i = 0; i < h->num_headers; i++) {
        if (!um_str_eq_ci(h->headers[i].name, "vary")) continue;
        struct um_vary v;
        um_vary_init(&v);
        um_vary_parse(&v, h->headers[i].value);
        if (!um_vary_usable(&v)) {
            *never = true;
            break;
        }
        for (size_t k = 0; k < v.n; k++) {
            if (um_str_eq_ci(v.names[k], "accept-encoding")) continue;
            if (b.len) um_buf_append(&b, ",", 1);
            um_buf_append(&b, v.names[k].base, v.names[k].len);
        }
    }
    char *out = NULL;
    if (!*never && b.len) {
        out = um_malloc(b.len + 1);
        memcpy(out, b.base, b.len);
        out[b.len] = '\0';
    }
    um_buf_dispose(&b);
    return out;
}

/* Whether the answer h to the fill's request may go to disk (umbra/disktier.h), and its
 * record's start in df->rec when it may. */
static bool tee_start(struct disk_fetch *df, const struct um_response_head *h)
{
    struct disk_origin *d = df->d;
    const struct um_request *req = df->f.req;
    if (h->status != 200 || h->no_store ||
        (h->content_length >= 0 && (uint64_t)h->content_length > d->t->max_object))
        return false;
    for (size_t i = 0; i < h->num_headers; i++) {
        um_str n = h->headers[i].name, v = um_str_trim(h->headers[i].value);
        if (um_str_eq_ci(n, "content-encoding") && !um_str_eq_ci(v, "identity")) return false;
    }
    bool never;
    free(df->vary);
    df->vary = vary_names(h, &never);
    if (never) return false;
    if (df->vary) {
        struct um_disk_key vk;
        if (df->vary_gen == 0) { /* no marker was found: the last given, or a new one */
            uint64_t gen = 0;
            while (getrandom(&gen, sizeof(gen), 0) != sizeof(gen) || gen == 0)
                ;
            df->vary_gen = um__disk_tier_marker_gen(
                df->d->t, um_disk_key_of(df->f.fill_key.base, df->f.fill_key.len), gen);
        }
        if (!variant_key(df, (um_str){df->vary, strlen(df->vary)}, &vk)) return false;
        df->key = vk;
    }
    time_t now = now_sec(df->f.ctx);
    struct um_resp_meta rm;
    um_resp_meta_scan(&rm, h->status, h->headers, h->num_headers);
    um_resp_meta_target(&rm, &d->pol);
    struct um_req_meta qm;
    um_req_meta_scan(&qm, req->method_id, req->headers, req->num_headers);
    if (um_cache_storable(&qm, &rm, &d->pol, now) != UM_STORABLE && !h->has_ttl && !df->f.has_ttl)
        return false;
    struct um_age_times times;
    um_age_times_init(&times, &rm, df->request_time, now);
    enum um_fresh_source src;
    int64_t lifetime = um_freshness_lifetime(&rm, &d->pol, now, &src);
    if (h->has_ttl)
        lifetime = h->ttl;
    else if (df->f.has_ttl)
        lifetime = df->f.ttl;
    if (lifetime <= 0 || rm.cc.no_cache || rm.cc.private_) return false;
    struct disk_meta m = {
        .magic = DISK_META_MAGIC,
        .status = h->status,
        .request_time = times.request_time,
        .response_time = times.response_time,
        .date_value = times.date_value,
        .age_value = times.age_value,
        .lifetime = lifetime,
        .stored = now,
    };
    um__disk_record_start(&df->rec, m, df->f.fill_key, h->headers, h->num_headers, &rm);
    df->body_start = df->rec.len;
    /* A known length: the record is built where it will be written from (the store takes
     * the buffer, no copy); else the body is gathered and copied at the end. */
    size_t head, ml = df->rec.len, cl = h->content_length > 0 ? (size_t)h->content_length : 0;
    struct um_disk *st = um__disk_tier_store(df->d->t, df->key);
    if (cl > 0 && (df->recmem = um_disk_rec_alloc(st, ml, cl, &head)) != NULL) {
        struct um_buf meta = df->rec;
        /* Room for one byte more (the buffer's NUL, in the checksum's place): a body
         * longer than it said shows in rec.len, and is not stored. */
        um_buf_init_fixed(&df->rec, df->recmem + head, ml + cl + 1);
        um_buf_append(&df->rec, meta.base, ml);
        um_buf_dispose(&meta);
        df->rec_body = cl;
    }
    return true;
}

/* The body bytes the client took, into the copy (which is dropped past max_object). */
static void tee_add(struct disk_fetch *df, const char *data, size_t n)
{
    if (!df->store || n == 0) return;
    if (df->rec.len - df->body_start + n > df->d->t->max_object) {
        df->store = false;
        um_buf_dispose(&df->rec);
        free(df->recmem);
        df->recmem = NULL;
        return;
    }
    um_buf_append(&df->rec, data, n);
}

static void tee_on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct disk_fetch *df = (struct disk_fetch *)(void *)s;
    if (df->old_meta) {
        bool asked = df->revalidating;
        df->revalidating = false;
        if (asked && h->status == 304) {
            um__disk_revalidated(df, h);
            return;
        }
        if (um__disk_stand_in(df, h->status)) return;
        /* Changed: the stored copy goes, the answer is a fill's like any. */
        free(df->body);
        df->body = NULL;
        df->body_len = 0;
        free(df->old_meta);
        df->old_meta = NULL;
    }
    df->store = df->tee && tee_start(df, h);
    df->head_sent = true;
    df->client->ops->on_head(df->client, h);
}

static size_t tee_on_data(struct um_sink *s, const char *data, size_t len)
{
    struct disk_fetch *df = (struct disk_fetch *)(void *)s;
    if (df->serve_after) return len; /* a 304 has no body: nothing of it goes on */
    size_t n = df->client->ops->on_data(df->client, data, len);
    tee_add(df, data, n);
    return n;
}

static size_t tee_on_data_ref(struct um_sink *s, const char *data, size_t len,
                              void (*release)(void *ctx), void *ctx)
{
    struct disk_fetch *df = (struct disk_fetch *)(void *)s;
    /* Copied first: the sink may release the bytes before it returns. */
    size_t before = df->rec.len;
    bool storing = df->store;
    tee_add(df, data, len);
    size_t n;
    if (df->client->ops->on_data_ref) {
        n = df->client->ops->on_data_ref(df->client, data, len, release, ctx);
    } else {
        n = df->client->ops->on_data(df->client, data, len);
        if (n) release(ctx);
    }
    if (n == 0 && storing && df->store) df->rec.len = before; /* not taken: offered again */
    return n;
}

static void tee_on_file(struct um_sink *s, int fd, uint64_t off, uint64_t len)
{
    struct disk_fetch *df = (struct disk_fetch *)(void *)s;
    df->store = false; /* a file's bytes are not seen here */
    df->client->ops->on_file(df->client, fd, off, len);
}

/* The Vary marker under the URL's key: a disk_meta with the other magic, the key, and the
 * names as its "fields". */
static void write_marker(struct disk_fetch *df)
{
    struct disk_meta m = {.magic = DISK_VARY_MAGIC,
                          .age_value = (int64_t)df->vary_gen, /* a marker's generation */
                          .stored = (int64_t)now_sec(df->f.ctx),
                          .key_len = (uint32_t)df->f.fill_key.len,
                          .head_len = (uint32_t)strlen(df->vary)};
    struct um_buf b;
    um_buf_init(&b);
    um_buf_append(&b, &m, sizeof(m));
    um_buf_append(&b, df->f.fill_key.base, df->f.fill_key.len);
    um_buf_append(&b, df->vary, m.head_len);
    struct um_disk_key base = um_disk_key_of(df->f.fill_key.base, df->f.fill_key.len);
    um_disk_write(um__disk_tier_store(df->d->t, base), base, (um_str){b.base, b.len}, NULL, 0);
    um_buf_dispose(&b);
}

static void tee_on_end(struct um_sink *s, int err)
{
    struct disk_fetch *df = (struct disk_fetch *)(void *)s;
    struct um_sink *client = df->client;
    df->sink.origin_data = NULL;
    if (err != UM_OK && !df->head_sent && df->old_meta)
        (void)um__disk_stand_in(df, 0); /* no answer at all */
    if (df->serve_after) {
        /* The 304's end: the freshened record written again, its body sent. */
        if (df->store) {
            struct um_disk *st = um__disk_tier_store(df->d->t, df->key);
            um_disk_write(st, df->key, (um_str){df->rec.base, df->rec.len}, df->body, df->body_len);
        }
        df->state = DF_SERVING;
        df->body_off = 0;
        um__disk_serve_pump(df);
        return;
    }
    if (err == UM_OK && df->store && df->recmem) {
        struct um_disk *st = um__disk_tier_store(df->d->t, df->key);
        if (df->rec.len == df->body_start + df->rec_body) {
            um_disk_write_rec(st, df->key, df->recmem, df->body_start, df->rec_body);
            df->recmem = NULL;
            if (df->vary) write_marker(df);
        }
    } else if (err == UM_OK && df->store) {
        size_t meta_len = df->body_start;
        um_str meta = {df->rec.base, meta_len};
        struct um_disk *st = um__disk_tier_store(df->d->t, df->key);
        um_disk_write(st, df->key, meta, df->rec.base + meta_len, df->rec.len - meta_len);
        if (df->vary) write_marker(df);
    }
    client->origin_data = NULL;
    df_free(df);
    client->ops->on_end(client, err);
}

static ssize_t tee_read_body(struct um_sink *s, char *buf, size_t len)
{
    struct disk_fetch *df = (struct disk_fetch *)(void *)s;
    return df->client->ops->read_body(df->client, buf, len);
}

static void tee_on_info(struct um_sink *s, int status, const struct um_header *h, size_t n)
{
    um_sink_info(((struct disk_fetch *)(void *)s)->client, status, h, n);
}

static void tee_on_flush(struct um_sink *s)
{
    um_sink_flush(((struct disk_fetch *)(void *)s)->client);
}

/* A response with trailers is not written to disk (the cache keeps no trailers); they go
 * on to the client (the memory cache above drops the object too). */
static void tee_on_trailers(struct um_sink *s, const struct um_header *h, size_t n)
{
    struct disk_fetch *df = (struct disk_fetch *)(void *)s;
    df->store = false;
    um_sink_trailers(df->client, h, n);
}

static const struct um_sink_ops tee_ops = {
    .on_trailers = tee_on_trailers,
    .on_head = tee_on_head,
    .on_data = tee_on_data,
    .on_data_ref = tee_on_data_ref,
    .on_file = tee_on_file,
    .on_end = tee_on_end,
    .read_body = tee_read_body,
    .on_info = tee_on_info,
    .on_flush = tee_on_flush,
};

static void go_inner(struct disk_fetch *df)
{
    df->state = DF_INNER;
    df->request_time = now_sec(df->f.ctx);
    df->client->origin_data = df;
    df->d->inner->ops->fetch(df->d->inner, &df->f, &df->sink); /* may end (free df) at once */
}

/* ---------------------------------------------------------------- a record (a hit) */

/* Sends what the client takes of the body, and the end. Returns false once df is freed. */
bool um__disk_serve_pump(struct disk_fetch *df)
{
    while (df->body_off < df->body_len) {
        size_t n = df->client->ops->on_data(df->client, df->body + df->body_off,
                                            df->body_len - df->body_off);
        if (n == 0) return true; /* resume comes */
        df->body_off += n;
    }
    struct um_sink *client = df->client;
    client->origin_data = NULL;
    df_free(df);
    client->ops->on_end(client, UM_OK);
    return false;
}

enum rec_use { REC_BAD, REC_STALE, REC_FRESH };

/* Whether meta is a whole metadata of kind magic (a record or a marker) under df's own key
 * (not a hash collision), and *m its disk_meta. */
static bool meta_of(const struct disk_fetch *df, um_str meta, uint32_t magic, struct disk_meta *m)
{
    if (meta.len < sizeof(*m)) return false;
    memcpy(m, meta.base, sizeof(*m));
    return m->magic == magic && sizeof(*m) + (size_t)m->key_len + m->head_len == meta.len &&
           m->key_len == df->f.fill_key.len &&
           memcmp(meta.base + sizeof(*m), df->f.fill_key.base, m->key_len) == 0;
}

/* What the record (meta) is to df now: not its own (or purged): REC_BAD; its own but
 * stale, or fresh. *out: its metadata. */
static enum rec_use record_use(struct disk_fetch *df, um_str meta, const struct disk_meta **out)
{
    struct disk_meta m;
    if (!meta_of(df, meta, DISK_META_MAGIC, &m)) return REC_BAD;
    if (m.stored < atomic_load(&df->d->t->purged_before)) {
        atomic_fetch_add(&df->d->t->purged, 1);
        um_disk_remove(um__disk_tier_store(df->d->t, df->key), df->key);
        return REC_BAD;
    }
    *out = (const struct disk_meta *)(const void *)meta.base;
    struct um_age_times times = {(time_t)m.request_time, (time_t)m.response_time,
                                 (time_t)m.date_value, m.age_value};
    return um_is_fresh(m.lifetime, um_current_age(&times, now_sec(df->f.ctx))) ? REC_FRESH
                                                                               : REC_STALE;
}

/* A record hit when the cursor is about to reach it is written again ahead of it (the log
 * keeps what is asked for; after Traffic Server's "evacuation"): within the last quarter of
 * the store's laps. A dropped write only lets it go as it would have. */
static void rewrite_if_old(struct disk_fetch *df, um_str meta, um_str body)
{
    struct um_disk *st = um__disk_tier_store(df->d->t, df->key);
    struct um_disk_info info;
    if (um_disk_lookup(st, df->key, &info) && info.left < info.span / 4) {
        um_disk_write(st, df->key, meta, body.base, body.len);
        atomic_fetch_add(&df->d->t->rewrites, 1);
    }
}

static void on_read(void *arg, int status, um_str meta, um_str body);

/* A Vary marker read for df (meta): the variant of df's request is read next. Returns
 * false when meta is not df's marker (or its variant cannot be keyed). */
static bool follow_marker(struct disk_fetch *df, um_str meta)
{
    struct disk_meta m;
    if (df->variant || !meta_of(df, meta, DISK_VARY_MAGIC, &m) ||
        m.stored < atomic_load(&df->d->t->purged_before))
        return false;
    um_str names = {meta.base + sizeof(m) + m.key_len, m.head_len};
    /* The disk's marker, unless a newer one is still on its way there. */
    df->vary_gen = um__disk_tier_marker_gen(
        df->d->t, um_disk_key_of(df->f.fill_key.base, df->f.fill_key.len), (uint64_t)m.age_value);
    struct um_disk_key vk;
    if (!variant_key(df, names, &vk)) return false;
    df->variant = true;
    df->key = vk;
    struct um_disk *st = um__disk_tier_store(df->d->t, vk);
    int rc = um_disk_read_cached(st, vk, on_read, df);
    if (rc == UM_AGAIN) rc = um_disk_read(st, vk, df->f.ctx->loop, on_read, df);
    if (rc == UM_DONE) {
        atomic_fetch_add(&df->d->t->misses, 1);
        go_inner(df);
    }
    return true;
}

static void on_read(void *arg, int status, um_str meta, um_str body)
{
    struct disk_fetch *df = arg;
    if (df->cancelled) {
        df_free(df);
        return;
    }
    if (status == UM_OK && follow_marker(df, meta)) return;
    const struct disk_meta *m = NULL;
    enum rec_use use = status == UM_OK ? record_use(df, meta, &m) : REC_BAD;
    if (use == REC_BAD || !um__disk_record_answers(df, m, meta)) {
        atomic_fetch_add(&df->d->t->misses, 1);
        if (use == REC_STALE && um__disk_revalidate_start(df, m, meta, body))
            atomic_fetch_add(&df->d->t->revalidations, 1);
        go_inner(df);
        return;
    }
    atomic_fetch_add(&df->d->t->hits, 1);
    /* A stale record is always kept: the memory cache refreshes it on its next request. */
    df->not_promoted = use == REC_FRESH && !um__disk_admit(&df->d->t->admit, df->key, body.len);
    if (!df->not_promoted) atomic_fetch_add(&df->d->t->promotions, 1);
    rewrite_if_old(df, meta, body);
    um__disk_send_record_head(df, m, meta, body.len);
    /* The body from the read's buffer while the client takes it (the memory cache's fill
     * takes it all at once); what it does not take yet is copied for resume. */
    size_t off = 0;
    while (off < body.len) {
        size_t k = df->client->ops->on_data(df->client, body.base + off, body.len - off);
        if (k == 0) break;
        off += k;
    }
    df->body_len = body.len - off;
    df->body = um_malloc(df->body_len + 1);
    memcpy(df->body, body.base + off, df->body_len);
    um__disk_serve_pump(df);
}

/* ---------------------------------------------------------------- the origin */

/* A fill's whole GET: what the disk may answer or keep. */
static bool disk_candidate(const struct um_fetch *f)
{
    const struct um_request *req = f->req;
    if (f->source != NULL || f->fill_key.base == NULL || req->method_id != UM_METHOD_GET)
        return false;
    for (size_t i = 0; i < req->num_headers; i++) {
        um_str n = req->headers[i].name;
        if (um_str_eq_ci(n, "if-none-match") || um_str_eq_ci(n, "if-modified-since") ||
            um_str_eq_ci(n, "range"))
            return false;
    }
    return true;
}

static void disk_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *client)
{
    struct disk_origin *d = (struct disk_origin *)o;
    struct disk_fetch *df = um_calloc(1, sizeof(*df));
    df->sink.ops = &tee_ops;
    df->client = client;
    df->d = d;
    df->f = *f;
    df->cs.cache_name = "umbra";
    df->tee = disk_candidate(f);
    if (!df->tee) {
        go_inner(df); /* the layer only passes it on */
        return;
    }
    df->key = um_disk_key_of(f->fill_key.base, f->fill_key.len);
    df->state = DF_READING;
    client->origin_data = df;
    struct um_disk *st = um__disk_tier_store(d->t, df->key);
    /* A record the page cache holds is read at once; one it does not, by the store's
     * threads, the answer coming back to this loop. */
    int rc = um_disk_read_cached(st, df->key, on_read, df);
    if (rc == UM_AGAIN) rc = um_disk_read(st, df->key, f->ctx->loop, on_read, df);
    if (rc == UM_OK || rc == UM_AGAIN) return; /* on_read went, or goes, on */
    atomic_fetch_add(&d->t->misses, 1);
    go_inner(df);
}

static void disk_resume(struct um_origin *o, struct um_sink *client)
{
    struct disk_origin *d = (struct disk_origin *)o;
    struct disk_fetch *df = client->origin_data;
    if (df == NULL) return;
    if (df->state == DF_SERVING)
        um__disk_serve_pump(df);
    else if (df->state == DF_INNER && d->inner->ops->resume)
        d->inner->ops->resume(d->inner, &df->sink);
}

static void disk_body_ready(struct um_origin *o, struct um_sink *client)
{
    struct disk_origin *d = (struct disk_origin *)o;
    struct disk_fetch *df = client->origin_data;
    if (df && df->state == DF_INNER && d->inner->ops->body_ready)
        d->inner->ops->body_ready(d->inner, &df->sink);
}

static void disk_cancel(struct um_origin *o, struct um_sink *client)
{
    struct disk_origin *d = (struct disk_origin *)o;
    struct disk_fetch *df = client->origin_data;
    if (df == NULL) return;
    client->origin_data = NULL;
    if (df->state == DF_READING) {
        df->cancelled = true; /* on_read frees it */
        return;
    }
    if (df->state == DF_INNER && d->inner->ops->cancel) d->inner->ops->cancel(d->inner, &df->sink);
    df_free(df);
}

static void disk_destroy(struct um_origin *o)
{
    struct disk_origin *d = (struct disk_origin *)o;
    d->inner->ops->destroy(d->inner);
    free(d);
}

static const struct um_origin_ops disk_ops = {
    .flags = UM_ORIGIN_F_STREAM_BODY,
    .fetch = disk_fetch,
    .resume = disk_resume,
    .body_ready = disk_body_ready,
    .cancel = disk_cancel,
    .destroy = disk_destroy,
};

struct um_origin *um_disk_origin_create(struct um_disk_tier *t, struct um_origin *inner,
                                        const struct um_route *r, const struct um_config *c)
{
    const struct um_cache_conf *cc = um_cache_conf(c);
    (void)r;
    struct disk_origin *d = um_calloc(1, sizeof(*d));
    d->base.ops = &disk_ops;
    d->inner = inner;
    d->t = t;
    um_cache_policy_init(&d->pol);
    d->pol.default_ttl = (int64_t)cc->default_ttl;
    d->pol.stale_if_error = (int64_t)cc->stale_if_error;
    for (size_t i = 0; i < cc->num_targeted; i++)
        d->targeted[i] = (um_str){cc->targeted[i], strlen(cc->targeted[i])};
    d->pol.targeted = d->targeted;
    d->pol.num_targeted = cc->num_targeted;
    return &d->base;
}
