/* SPDX-License-Identifier: BSD-2-Clause */
/* The disk tier's stale records (origin_disk.h): whether one answers at once, its
 * revalidation with the origin (a 304 freshens and rewrites it), and its stand-in for an
 * origin that fails (RFC 9111 4, 4.3; RFC 5861). */
#include "origin_disk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The record's head as the cache's rules see it now: its fields (into f, room for cap),
 * their metadata (rm) and the stored view (v). Returns how many fields. */
static size_t record_view(const struct disk_fetch *df, const struct disk_meta *m, um_str meta,
                          time_t now, struct um_header *f, size_t cap, struct um_resp_meta *rm,
                          struct um_stored_view *v)
{
    um_str head = {meta.base + sizeof(*m) + m->key_len, m->head_len};
    size_t n = um__cache_head_fields(head, f, cap);
    um_resp_meta_scan(rm, m->status, f, n);
    um_resp_meta_target(rm, &df->d->pol);
    struct um_age_times times = {(time_t)m->request_time, (time_t)m->response_time,
                                 (time_t)m->date_value, m->age_value};
    *v = (struct um_stored_view){&rm->cc, m->lifetime, um_current_age(&times, now),
                                 rm->etag.base != NULL || rm->has_last_modified};
    return n;
}

/* Sends the record's head to the client (its body: body_len bytes) as a hit, with its Age
 * and its ttl, negative when it is stale (RFC 9211). */
void um__disk_send_record_head(struct disk_fetch *df, const struct disk_meta *m, um_str meta,
                               size_t body_len)
{
    struct um_header f[MAX_OUT_FIELDS + 1];
    struct um_resp_meta rm;
    struct um_stored_view v;
    size_t n = record_view(df, m, meta, now_sec(df->f.ctx), f, MAX_OUT_FIELDS, &rm, &v);
    char agebuf[24];
    f[n++] = um__disk_age_field(v.age, &agebuf);
    df->state = DF_SERVING;
    df->head_sent = true;
    df->cs.hit = true;
    df->cs.detail = "disk";
    df->cs.has_ttl = true;
    df->cs.ttl = v.lifetime - v.age;
    struct um_response_head h = {.status = m->status,
                                 .headers = f,
                                 .num_headers = n,
                                 .content_length = (int64_t)body_len,
                                 .reason = {NULL, 0},
                                 .cache = &df->cs,
                                 .not_promoted = df->not_promoted};
    df->client->origin_data = df;
    df->client->ops->on_head(df->client, &h);
}

/* The record and the fill's request as the cache's rules judge them now (the view points
 * into the fields). */
struct judged {
    struct um_header f[MAX_OUT_FIELDS];
    struct um_resp_meta rm;
    struct um_stored_view v;
    struct um_req_meta qm;
};

static void judge(const struct disk_fetch *df, const struct disk_meta *m, um_str meta,
                  struct judged *j)
{
    record_view(df, m, meta, now_sec(df->f.ctx), j->f, MAX_OUT_FIELDS, &j->rm, &j->v);
    um_req_meta_scan(&j->qm, df->f.req->method_id, df->f.req->headers, df->f.req->num_headers);
}

/* How the record may answer the fill's request (um_cache_decide): at once (fresh, or stale
 * within its stale-while-revalidate or the client's max-stale), or only after the origin. */
bool um__disk_record_answers(const struct disk_fetch *df, const struct disk_meta *m, um_str meta)
{
    struct judged j;
    judge(df, m, meta, &j);
    enum um_cache_use use = um_cache_decide(&j.v, &j.qm);
    return use == UM_USE_FRESH || use == UM_USE_STALE || use == UM_USE_STALE_WHILE_REVALIDATE;
}

/* The origin failed (status 500, 502, 503, 504, or 0: no answer) while a stale record is
 * kept: it answers instead when its stale-if-error allows (RFC 5861 4), once the inner
 * fetch has ended. Returns whether it does. */
bool um__disk_stand_in(struct disk_fetch *df, int status)
{
    if (status != 0 && status != 500 && status != 502 && status != 503 && status != 504)
        return false;
    const struct disk_meta *m = (const struct disk_meta *)(const void *)df->old_meta;
    um_str meta = {df->old_meta, df->old_meta_len};
    struct judged j;
    judge(df, m, meta, &j);
    if (!um_cache_stale_if_error_ok(&j.v, &j.qm, &df->d->pol, status)) return false;
    df->revalidating = false;
    df->store = false;
    df->serve_after = true; /* the failure's body is not sent */
    um__disk_send_record_head(df, m, meta, df->body_len);
    df->state = DF_INNER; /* until the inner fetch ends */
    return true;
}

/* A stale record the origin is asked about: a copy kept (to answer a 304, or to stand in
 * for a failure), and, when it has an ETag or a Last-Modified, the fill's request sent on
 * with them as conditionals (RFC 9111 4.3.1). Returns whether it was. */
bool um__disk_revalidate_start(struct disk_fetch *df, const struct disk_meta *m, um_str meta,
                               um_str body)
{
    df->old_meta = um_malloc(meta.len + 1);
    memcpy(df->old_meta, meta.base, meta.len);
    df->old_meta_len = meta.len;
    df->body = um_malloc(body.len + 1);
    memcpy(df->body, body.base, body.len);
    df->body_len = body.len;
    um_str head = {df->old_meta + sizeof(*m) + m->key_len, m->head_len};
    struct um_header f[MAX_OUT_FIELDS];
    size_t n = um__cache_head_fields(head, f, MAX_OUT_FIELDS);
    struct um_request *cr = um_malloc(sizeof(*cr));
    um_http1_request_copy(cr, df->f.req);
    size_t added = 0;
    for (size_t i = 0; i < n && cr->num_headers < UM_HTTP1_MAX_HEADERS; i++) {
        if (um_str_eq_ci(f[i].name, "etag"))
            cr->headers[cr->num_headers++] =
                (struct um_header){UM_STR("If-None-Match"), f[i].value};
        else if (um_str_eq_ci(f[i].name, "last-modified"))
            cr->headers[cr->num_headers++] =
                (struct um_header){UM_STR("If-Modified-Since"), f[i].value};
        else
            continue;
        added++;
    }
    if (added == 0) {
        free(cr);
        return false;
    }
    df->creq = cr;
    df->f.req = cr;
    df->revalidating = true;
    return true;
}

/* The 304 of a record's revalidation (RFC 9111 4.3.4): its fields updated from the 304,
 * its times and lifetime new, sent to the client with the record's body once the inner
 * fetch has ended (tee_on_end), and written again. */
void um__disk_revalidated(struct disk_fetch *df, const struct um_response_head *h)
{
    struct disk_origin *d = df->d;
    const struct disk_meta *om = (const struct disk_meta *)(const void *)df->old_meta;
    um_str head = {df->old_meta + sizeof(*om) + om->key_len, om->head_len};
    struct um_header of[MAX_OUT_FIELDS], merged[MAX_OUT_FIELDS * 2 + 1];
    size_t on = um__cache_head_fields(head, of, MAX_OUT_FIELDS), mn = 0;
    struct um_resp_meta rm;
    um_resp_meta_scan(&rm, h->status, h->headers, h->num_headers);
    for (size_t i = 0; i < on; i++) {
        bool replaced = false;
        for (size_t j = 0; j < h->num_headers && !replaced; j++)
            replaced = um_str_ieq(of[i].name, h->headers[j].name) &&
                       um_cache_field_updatable(h->headers[j].name, &rm);
        if (!replaced) merged[mn++] = of[i];
    }
    for (size_t j = 0; j < h->num_headers && mn < MAX_OUT_FIELDS * 2; j++)
        if (um_cache_field_updatable(h->headers[j].name, &rm)) merged[mn++] = h->headers[j];
    time_t now = now_sec(df->f.ctx);
    struct um_resp_meta mm;
    um_resp_meta_scan(&mm, om->status, merged, mn);
    um_resp_meta_target(&mm, &d->pol);
    struct um_age_times times;
    um_age_times_init(&times, &mm, df->request_time, now);
    enum um_fresh_source src;
    int64_t lifetime = um_freshness_lifetime(&mm, &d->pol, now, &src);
    if (h->has_ttl)
        lifetime = h->ttl;
    else if (df->f.has_ttl)
        lifetime = df->f.ttl;
    struct disk_meta m = *om;
    m.request_time = times.request_time;
    m.response_time = times.response_time;
    m.date_value = times.date_value;
    m.age_value = times.age_value;
    m.lifetime = lifetime;
    m.stored = now;
    um__disk_record_start(&df->rec, m, df->f.fill_key, merged, mn, &mm);
    df->store = lifetime > 0;
    df->serve_after = true;
    char agebuf[24];
    merged[mn++] = um__disk_age_field(um_current_age(&times, now), &agebuf);
    struct um_response_head nh = {.status = om->status,
                                  .headers = merged,
                                  .num_headers = mn,
                                  .content_length = (int64_t)df->body_len,
                                  .reason = {NULL, 0}};
    df->client->ops->on_head(df->client, &nh);
}
