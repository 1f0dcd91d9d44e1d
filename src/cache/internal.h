/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the caching layer share (origin.c's note describes the layer): the
 * per-request states, the stored objects' meta block and tags, and the calls one part
 * makes into another.
 *
 *   origin.c         the origin's table: for each request, read, fill or pass; starting
 *                    a fill; PURGE; the cache keys;
 *   origin_reader.c  the reader: answering from a stored object (head, Range,
 *                    conditionals), streaming it while it fills; matching variant tags;
 *   origin_fill.c    the fill: storing an origin's answer for the coalesced readers,
 *                    hit-for-pass markers; the fills a worker runs;
 *   origin_revalidate.c  a revalidation's 304 (every coding freshened), stale-if-error;
 *   origin_pass.c    the pass: forwarding uncached answers, invalidation;
 *   origin_derive.c  the codings of an object made from its stored identity object.
 *
 * For those files only: everything else uses cacheorigin.h. */
#ifndef UMBRA_CACHE_INTERNAL_H
#define UMBRA_CACHE_INTERNAL_H

#include <time.h>

#include "umbra/cacheorigin.h"
#include "umbra/cachepolicy.h"
#include "umbra/compress.h"
#include "umbra/context.h"
#include "umbra/loop.h"

#define MAX_OUT_FIELDS 136
#define CACHE_NAME "umbra"

struct cache_origin;

/* What a client's sink->origin_data points at, a reader or a pass, starts with its table:
 * the origin's resume, body_ready and cancel call through it, and a pointer compared with
 * &um__cache_reader_req tells a live reader (a reader freed or kept spare has NULL). */
struct req_ops {
    void (*resume)(struct cache_origin *co, void *d);
    void (*body_ready)(struct cache_origin *co, void *d);
    void (*cancel)(struct cache_origin *co, void *d);
};
extern const struct req_ops um__cache_reader_req;
extern const struct req_ops um__cache_pass_req;
struct pass;
/* Frees a pass (and its reference to a resumed reader's object). */
void um__cache_pass_free(struct pass *p);

#define META_F_PASS 0x1
/* The head block is nothing but the fields' lines, "Name: value\r\n" each, one per entry
 * of fields[]: a hit hands it to the connection as it is (um_response_head.wire). */
#define META_F_WIRE 0x2

/* The scalar part of a stored response's Cache-Control (struct um_cc without the lists of
 * field names, which only matter when the response is stored). */
struct meta_cc {
    bool present, no_store, no_cache, private_, public_, must_revalidate, proxy_revalidate,
        must_understand, no_transform, immutable, only_if_cached;
    unsigned invalid;
    int64_t max_age, s_maxage, max_stale, min_fresh, stale_while_revalidate, stale_if_error;
};

/* One field of the stored head block: offsets into it. */
struct meta_field {
    uint32_t name_off, name_len, value_off, value_len;
};

/* An object's meta block (the store keeps it 16-byte aligned, so it is read in place).
 * Everything below content_length is parsed from the stored head block when the object
 * is stored (um__cache_meta_build), so that a hit parses nothing: it is what
 * um_resp_meta_scan and um__cache_head_fields give for that block. */
struct meta {
    uint32_t flags;
    int status;
    struct um_age_times times;
    int64_t lifetime;
    int64_t content_length; /* -1: unknown until complete */
    struct meta_cc cc;
    uint32_t etag_off, etag_len; /* a well-formed ETag in the head block; len 0: none */
    bool has_last_modified, has_date;
    time_t last_modified, date;
    uint32_t nfields;
    struct meta_field fields[]; /* nfields of them */
};

struct cache_origin {
    struct um_origin base;
    struct um_origin *inner;
    /* A cluster node's (um_cache_ring): where fills go (else inner). */
    struct um_origin *fill_origin;
    struct um_cache *cache;
    const struct um_config *config;
    const struct um_route *route;
    struct um_cache_policy pol;
    um_str targeted[UM_CACHE_TARGETED_MAX]; /* pol.targeted: the config's names */
};

struct fill;

struct reader {
    const struct req_ops *ops; /* first: see struct req_ops */
    struct reader *next_free; /* on the worker's list of spare readers */
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
    /* The waiter has been registered with an object at least once: only then can a
     * progress call post the task, and only then does release take the object's waiter
     * lock and the loop's mailbox lock. A hit on a complete object takes neither. */
    bool registered;
    bool has_qm;
    /* The reader's reference to obj went with the answer's last bytes (to the sink,
     * which releases it): release gives none back. */
    bool obj_given;
    /* The reader feeds a fill that makes another coding of its identity object
     * (origin.c's derive_start): its head carries the object's tags (Surrogate-Key) even
     * when clients are not to see them, and an object the origin coded after all is not
     * used (the fill's own request goes to the origin instead). */
    bool for_coding;
    struct um_req_meta qm; /* the request's metadata, scanned once (has_qm) */
    bool ranged;
    uint64_t range_skip; /* body bytes before the range, still to pass over */
    uint64_t range_left;
    struct um_cache_status cs;
};

/* The source of a fill that makes one coding of an object from its stored identity
 * object instead of asking the origin (origin.c's derive_start): an origin whose fetch is
 * a reader of obj, for the compressing layer to read from (um_fetch.source). Owned by the
 * fill. */
struct derive_src {
    struct um_origin base;
    struct cache_origin *co;
    struct um_cache_obj *obj; /* referenced */
    struct um_request *req;   /* the fill's request with Accept-Encoding: identity */
};

struct fill {
    struct cache_origin *co;
    struct um_origin *src; /* where the fill fetches: co->fill_origin, else co->inner */
    struct um_sink sink; /* what the inner origin writes to */
    struct um_context *ctx;
    struct fill *next_active, *prev_active;
    struct um_cache_obj *obj; /* being filled; NULL before the head (revalidation) */
    struct um_cache_obj *old; /* the stale object a revalidation is for */
    char *key;
    size_t key_len;
    /* A copy of the client's request head, so the fill outlives the client (req, last). */
    char *head_copy;
    time_t request_time;
    struct reader *own; /* the reader of the client that caused the fill, or NULL */
    struct pass *fwd;   /* the fill stopped storing and forwards to its client's pass */
    bool revalidating;
    bool claimed; /* holds old's refresh claim (a background refresh): released at free */
    bool has_ttl; /* an on_request hook's ttl (a hook's on the head wins) */
    int64_t ttl;
    bool discard; /* the rest of the inner answer is not wanted */
    bool trailers;    /* the answer had trailers: it is not kept (the readers get its body) */
    bool drop_posted; /* drop (below) is queued */
    struct um_task drop; /* cancels the inner fetch outside its callbacks (see fill_on_data) */
    bool handoff; /* the object ran out of room: the own client gets the rest directly */
    int status;
    /* A second-level lookup in flight (the handle of ctx->l2's get), the fetch to start
     * when it misses (strings owned by fetch_copy), and when it was started. */
    void *l2_get;
    struct um_fetch l2_fetch;
    char *fetch_copy;
    uint64_t l2_started;
    bool from_l2; /* filled from the second-level cache: not written back */
    struct derive_src *dsrc; /* a coding made from the stored identity object, or NULL */
    /* Last: a new fill zeroes what is before it, and only the used entries of its
     * headers[] are ever written (um__cache_copy_request). */
    struct um_request req;
};

struct pass {
    const struct req_ops *ops; /* first: see struct req_ops */
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
    /* A fill's client that was sent a 206 before the object ran out of room (handoff):
     * the rest of the fetch is cut to its range. */
    bool ranged;
    uint64_t range_skip, range_left;
    /* A reader whose object ran out of room in its body goes on with a fetch of its own
     * (origin_reader.c's reader_resume): its head was sent, so the new answer's is only
     * checked (200, expect_length, the ETag), and the bytes the client has are passed
     * over (ranged, range_skip); broken: not the same answer (the client's body is cut
     * short). obj: the object, referenced, whose key the fetch carries as its fill key. */
    bool resumed, broken;
    int64_t expect_length;
    struct um_cache_obj *obj;
    char etag[128];
    size_t etag_len;
};

/* The fills a worker has running, so that they can be stopped with the worker: the
 * state of its context's fills slot (um__cache_fills_slot). */
struct worker_fills {
    struct um_context *ctx;
    struct fill *active;
    /* Spare readers, so that a hit allocates nothing. */
    struct reader *free_readers;
    unsigned num_free_readers;
    /* Spare fills (linked by next_active), so that a miss does not allocate one. */
    struct fill *free_fills;
    unsigned num_free_fills;
};

/* The wall-clock second for the cache's rules: the worker loop's, read once per turn
 * (umbra/loop.h), so a request reads no clock; time(NULL) without a context (unit tests
 * that drive an origin by hand). */
static inline time_t now_sec(const struct um_context *ctx)
{
    return ctx ? um_loop_wall(ctx->loop) : time(NULL);
}

/* The age obj's response is judged by (freshness, the stale windows, Cache-Status's ttl):
 * its age, except that a soft-purged object is stale since the purge (its expires, which
 * the purge set), however young its response; the Age sent stays the real one. */
static inline int64_t judged_age(const struct um_cache_obj *obj, int64_t lifetime, int64_t age,
                                 time_t now)
{
    if (!um_cache_obj_marked_stale(obj))
        return age;
    int64_t since = (int64_t)now - um_cache_obj_expires(obj);
    if (since < 0)
        since = 0;
    return age < lifetime + since ? lifetime + since : age;
}

/* Tag: [u8 flags] then per Vary field [u16 name len][name][u8 present][u16 value len][value].
 * present 2 (TAG_BUCKET): Accept-Encoding on a compressing route, whose value is the
 * server's order of codings and the coding negotiated (one digit each, enum um_coding):
 * a request matches when it negotiates the same coding with that order, however it
 * spells its Accept-Encoding (compress.h).
 * flags 1: hit-for-pass marker (matches every request); 2: head not known yet (filling:
 * matches every request, which then checks the real tag once the head is there). */
#define TAG_PASS 1
#define TAG_PENDING 2
#define TAG_BUCKET 2

/* origin.c */
/* The URL's key of req ("host target"), NUL-terminated; *len is its length. */
char *um__cache_make_key(const struct um_request *req, size_t *len);
/* Starts a fill (origin.c's um__cache_fill_start comment); the fill takes obj, old, key and
 * ds. */
void um__cache_fill_start(struct cache_origin *co, struct um_fetch *f, struct um_sink *client,
                          struct um_cache_obj *obj, struct um_cache_obj *old, char *key,
                          size_t key_len, enum um_cache_fwd fwd, bool conditional,
                          struct derive_src *ds);
/* The layer's resume and cancel (the sink's origin_data says which state it is). */
void um__cache_resume(struct um_origin *o, struct um_sink *client);
void um__cache_cancel(struct um_origin *o, struct um_sink *client);

/* origin_derive.c */
/* Fills obj (ahead of old, the stale coding it replaces, or NULL) with f's coding made from
 * the identity object when the route compresses and f takes a coding; the fill then owns
 * obj, old and key. Returns false when it does not (nothing taken). */
bool um__cache_derive_start(struct cache_origin *co, struct um_fetch *f, struct um_sink *client,
                            struct um_cache_obj *obj, struct um_cache_obj *old, char *key,
                            size_t klen, enum um_cache_fwd fwd);

/* origin_reader.c */
/* The match callback of lookups: does obj's tag take the request arg? */
bool um__cache_match(const struct um_cache_obj *obj, void *arg);
/* Whether obj's stored head has a Content-Encoding other than identity. */
bool um__cache_obj_coded(const struct um_cache_obj *obj);
/* Splits a stored head block into at most max fields (slices of it); returns how many. */
size_t um__cache_head_fields(um_str head, struct um_header *f, size_t max);
/* The meta block of a stored response: base's first fields (flags .. content_length) and
 * what a hit needs parsed from head (the stored head block); with pol (may be NULL), its
 * targeted fields (RFC 9213) give the Cache-Control kept. Returns a malloc'd block of
 * *len bytes, for um_cache_obj_set_head; the caller frees it. */
struct meta *um__cache_meta_build(const struct meta *base, um_str head,
                                  const struct um_cache_policy *pol, size_t *len);
/* A stored response's Cache-Control as the policy functions take it. */
void um__cache_meta_cc(const struct meta *m, struct um_cc *cc);
/* The stored head's fields (slices of head, which m was built from); returns how many. */
size_t um__cache_meta_fields(const struct meta *m, um_str head, struct um_header *f, size_t max);
/* A reader of obj (the caller's reference passes to it) for client, whose origin_data it
 * becomes; it starts with um__cache_reader_pump. qm: the request's metadata when the
 * caller has scanned it (copied), or NULL. Taken from the worker's spare readers when
 * there is one. */
struct reader *um__cache_reader_new(struct cache_origin *co, struct um_fetch *f,
                                    struct um_sink *client, struct um_cache_obj *obj,
                                    const struct um_req_meta *qm);
/* Gives a released reader back to the worker's spares (or frees it). */
void um__cache_reader_free(struct reader *r);
/* Sends the client what there is to send, and waits for the rest (or ends). */
void um__cache_reader_pump(struct reader *r);
/* Detaches r from everything; the caller frees it. */
void um__cache_reader_release(struct reader *r);

/* l2value.c (cacheorigin.h has the layout's encoder) */
#define L2_VERSION 1
struct l2_value {
    bool stale; /* soft-purged */
    int status;
    struct um_age_times times;
    int64_t lifetime, expires, stale_until;
    um_str tag; /* slices of the value */
    um_str tags[UM_CACHE_MAX_TAGS];
    size_t ntags;
    um_str head, body;
};
/* Reads a value um_cache_l2_encode wrote; false when it is not one (another version,
 * truncated, trailing bytes, a marker). The slices point into value. */
bool um__cache_l2_decode(const char *value, size_t len, struct l2_value *v);
/* Whether a stored Vary tag takes the request. */
bool um__cache_tag_matches(um_str tag, const struct um_request *req);

/* origin_pass.c */
extern const struct um_sink_ops um__cache_pass_ops;
/* Forwards f to the inner origin for client, whose origin_data the pass becomes. */
void um__cache_pass_start(struct cache_origin *co, struct um_fetch *f, struct um_sink *client,
                          enum um_cache_fwd fwd, const char *detail);
/* The pass's sink calls, for a fill that forwards its answer to a pass. */
void um__cache_pass_on_head(struct um_sink *s, const struct um_response_head *h);
size_t um__cache_pass_on_data(struct um_sink *s, const char *data, size_t len);
void um__cache_pass_on_info(struct um_sink *s, int status, const struct um_header *h, size_t n);
void um__cache_pass_on_end(struct um_sink *s, int err);

#define VALIDATOR_KEEP 3600 /* seconds a stale object with validators is kept for revalidation */

/* origin_fill.c */
extern const struct um_sink_ops um__cache_fill_ops;
/* The stored head block of a response's fields (malloc'd; *len its length). */
/* Whether a field of a response to store is left out of what is stored: one the cache sets
 * itself when it serves, a tag field when strip_tags (clients are not to see them), or one
 * that policy refuses to store. */
bool um__cache_field_skipped(um_str name, const struct um_resp_meta *m, bool strip_tags);
char *um__cache_head_block(const struct cache_origin *co, const struct um_header *h, size_t n,
                           const struct um_resp_meta *m, size_t *len);
/* Points the fill's own reader at obj and lets it go. */
void um__cache_own_switch(struct fill *fl, struct um_cache_obj *obj, int fwd_status);
/* A hook's freshness lifetime for this response, or -1. */
int64_t um__cache_hook_ttl(const struct fill *fl, const struct um_response_head *h);
/* Writes obj to the second-level cache (when there is one and obj came from the origin). */
void um__cache_l2_write(struct fill *fl, struct um_cache_obj *obj);

/* origin_revalidate.c */
void um__cache_fill_freshen(struct fill *fl, const struct um_response_head *h,
                            const struct um_resp_meta *rm, time_t response_time);
bool um__cache_fill_stale_if_error(struct fill *fl, const struct um_response_head *h,
                                   const struct um_req_meta *qm, time_t response_time);
/* The worker's fills (made on first use), and the first of them (or NULL). */
/* The worker context's slot of the fills (umbra/context.h), in um_cache_module. */
extern struct um_context_slot um__cache_fills_slot;
struct worker_fills *um__cache_worker_fills(struct um_context *ctx);
struct fill *um__cache_first_fill(const struct um_context *ctx);
/* A fill for the worker of ctx, everything before its req zeroed (a spare one when there
 * is one); um__cache_fill_free gives it back. */
struct fill *um__cache_fill_new(struct um_context *ctx);
/* Copies the request head into the fill, so that the fill can outlive the client. */
void um__cache_copy_request(struct fill *fl, const struct um_request *req);
/* Asks the second-level cache for fl's key; the inner fetch ff (copied) starts when it
 * misses. Returns false when it could not be asked (start ff now). */
bool um__cache_fill_l2_lookup(struct fill *fl, const struct um_fetch *ff);
/* Takes fl off the worker's list and frees it with what it holds. */
void um__cache_fill_free(struct fill *fl);
/* The fill whose own client is r, if any, stops pointing at r. */
void um__cache_forget_own(struct reader *r);

/* ---- slice.c: large objects in slices ---------------------------------------------- */

/* um__cache_slice_tag, um__cache_slice_key: store_internal.h (the purges use them). */
/* The slice layers' counters (the cache module's), in this order. */
extern struct um_metric_block um__cache_slice_counters;
enum { C_RANGES, C_SLICES, C_RESTARTS };
#define SLICE_MARK " umbra-slice:"
#define SLICE_FIELD "Umbra-Slice-Range"
#define SLICE_TAG_PREFIX "umbra-slice-"
/* The first field of h named name (any case), or NULL (slice_range.c). */
const um_str *um__cache_slice_field(const struct um_header *h, size_t n, const char *name);
/* dst: a copy of src without the fields named in drop (NULL-ended), with extra (when its
 * name is set) added (slice_range.c). */
void um__cache_slice_request(struct um_request *dst, const struct um_request *src,
                             const char *const *drop, struct um_header extra);
/* Whether key is a slice's key: then *base (a slice of key), *size and *k. */
bool um__cache_slice_key_parse(um_str key, um_str *base, uint64_t *size, uint64_t *k);
/* Parses "FIRST-LAST/COMPLETE" (a Content-Range's byte range, or Umbra-Slice-Range)
 * with FIRST <= LAST < COMPLETE. */
bool um__cache_slice_range_parse(um_str v, uint64_t *first, uint64_t *last, uint64_t *complete);

#endif
