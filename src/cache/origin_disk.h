/* SPDX-License-Identifier: BSD-2-Clause */
/* What the disk tier's origin layer shares between its files: origin_disk.c (the lookup,
 * the tee that writes a miss, the hit) and origin_disk_stale.c (a stale record: how it may
 * answer, its revalidation, its stand-in for a failing origin). */
#ifndef UMBRA_CACHE_ORIGIN_DISK_H
#define UMBRA_CACHE_ORIGIN_DISK_H

#include "internal.h"

#include "disktier_internal.h"
#include "umbra/buf.h"

#define DISK_META_MAGIC 0x314d4455u /* "UDM1" */
/* A Vary marker: the record under the URL's key of a response that varies, naming the
 * request fields its variants are told apart by; each variant is a record under the hash
 * of the URL's key and those fields' values (variant_key). A purge of the URL removes the
 * marker, and so every variant (left to the cursor). */
#define DISK_VARY_MAGIC 0x31564455u /* "UDV1" */

struct disk_meta {
    uint32_t magic;
    int32_t status;
    int64_t request_time, response_time, date_value, age_value;
    int64_t lifetime;
    int64_t stored; /* unix seconds, for the tier's purge time */
    uint32_t key_len, head_len;
};

struct disk_origin {
    struct um_origin base;
    struct um_origin *inner;
    struct um_disk_tier *t;
    struct um_cache_policy pol;
    um_str targeted[UM_CACHE_TARGETED_MAX];
};

enum df_state { DF_READING, DF_SERVING, DF_INNER };

struct disk_fetch {
    struct um_sink sink; /* what the inner origin writes to */
    struct um_sink *client;
    struct disk_origin *d;
    struct um_fetch f; /* the fill's (its strings live as long as the fill) */
    enum df_state state;
    bool cancelled; /* the client went away while the disk read */
    struct um_disk_key key;
    struct um_cache_status cs;
    time_t request_time;
    /* Serving a record: its body (a copy) and how far the client took it. */
    char *body;
    size_t body_len, body_off;
    /* The tee: the answer's copy, while it may still be stored (tee: the fetch is a fill
     * the disk may keep; a pass, a revalidation or a coding made from identity is not). */
    bool tee, store;
    struct um_buf rec; /* disk_meta, key, fields, then the body as it passes */
    size_t body_start;
    /* With a known length: rec is fixed over recmem (um_disk_rec_alloc's, for rec_body
     * bytes of body), handed to the store at the end; else NULL. */
    char *recmem;
    size_t rec_body;
    /* A stale record the fill went to the origin for: its metadata (old_meta, a copy; the
     * body is in body), kept to answer a 304 (revalidating: the conditional request was
     * sent) or to stand in for a failure (stale-if-error); serve_after: the record answers
     * once the inner fetch has ended (a 304's, or a failure's, body is not sent). */
    bool revalidating, serve_after;
    bool head_sent;    /* the client has had a head */
    bool not_promoted; /* a fresh hit the memory cache is not to keep (disk_admit.c) */
    /* The response varies (on more than Accept-Encoding): the marker's field names
     * ("a,b"), and whether df->key is a variant's (read through the marker). */
    char *vary;
    bool variant;
    /* The marker's generation, part of every variant's key: a marker written anew (after
     * a purge of the URL, or lost) makes a new one, so the variants of an older marker are
     * never reached again. 0: none yet (a new one is drawn when a variant is stored). */
    uint64_t vary_gen;
    char *old_meta;
    size_t old_meta_len;
    struct um_request *creq;
};

/* A record's metadata into rec (initialised here): m, the key, then the fields of h the
 * memory cache would keep (um__cache_field_skipped), the tag fields included so that a
 * promoted object is tagged again. */
void um__disk_record_start(struct um_buf *rec, struct disk_meta m, um_str key,
                           const struct um_header *h, size_t n, const struct um_resp_meta *rm);
/* The Age field of a record served at age seconds (its buffer: buf). */
struct um_header um__disk_age_field(int64_t age, char (*buf)[24]);
/* Sends what the client takes of df's body copy, and the end. Returns false once df is
 * freed. */
bool um__disk_serve_pump(struct disk_fetch *df);

/* origin_disk_stale.c */

/* Sends the record's head to the client (its body: body_len bytes) as a hit, with its Age
 * and its ttl, negative when it is stale (RFC 9211). */
void um__disk_send_record_head(struct disk_fetch *df, const struct disk_meta *m, um_str meta,
                               size_t body_len);
/* Whether the record may answer the fill's request at once (um_cache_decide: fresh, or
 * stale within its stale-while-revalidate or the client's max-stale). */
bool um__disk_record_answers(const struct disk_fetch *df, const struct disk_meta *m, um_str meta);
/* A stale record the origin is asked about: a copy kept (to answer a 304, or to stand in
 * for a failure), and, with validators, the fill's request made conditional. Returns
 * whether it was. */
bool um__disk_revalidate_start(struct disk_fetch *df, const struct disk_meta *m, um_str meta,
                               um_str body);
/* The 304 of a record's revalidation: the record freshened, its head sent, the record
 * written and its body sent once the inner fetch has ended. */
void um__disk_revalidated(struct disk_fetch *df, const struct um_response_head *h);
/* The origin failed (status 500, 502, 503, 504, or 0: no answer) while a stale record is
 * kept: it answers instead, once the inner fetch has ended, when its stale-if-error
 * allows (RFC 5861 4). Returns whether it does. */
bool um__disk_stand_in(struct disk_fetch *df, int status);

#endif
