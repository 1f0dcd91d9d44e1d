/* SPDX-License-Identifier: BSD-2-Clause */
/* The shared in-memory cache store: objects that every worker thread can find, read and
 * wait on. This module is only the data structure; what may be stored, for how long, and
 * which stored response answers a request (RFC 9111) is decided by the caller.
 *
 * Model
 * - An object is a key (bytes the caller builds), a variant tag (opaque bytes, e.g. the
 *   values of the fields a response Varies on; the caller's match callback reads it), a
 *   head (caller metadata + serialised response head, set once), a body (append-only
 *   chunks), two times (expires, stale_until) and a state: FILLING, then COMPLETE or
 *   ABORTED. Several objects (variants) may share a key.
 * - Objects are reference-counted. The index holds one reference while an object is
 *   linked; every function that returns an object returns a new reference, which the
 *   caller gives back with um_cache_obj_unref. Unlinking (unlink, purge, eviction,
 *   expiry, abort) only removes the object from the index: holders keep reading, and the
 *   last unref frees it. Unref below zero, or to zero while still linked, is a crash with
 *   file:line.
 * - Request coalescing: um_cache_lookup_or_insert either finds an object (possibly still
 *   FILLING: attach to it and stream its bytes as they arrive) or creates a FILLING one
 *   and makes the caller its filler, atomically, so concurrent requests make one filler.
 * - One thread at a time fills an object (set_head, append, finish); any thread holding a
 *   reference reads it with a cursor, and can register a waiter to hear about progress.
 *
 * Memory: a hard cap counts everything that grows with content: the object structs, keys,
 * tags, heads, body chunks and the index's bucket arrays, each at its allocated size (see
 * um_cache_alloc_size). Memory is reserved before it is allocated, so the cap is never
 * exceeded; an allocation that would pass it first evicts synchronously (SIEVE) down to
 * the low-water mark, and fails if that cannot make room. Memory of an unlinked object
 * that someone still holds counts until its last unref.
 *
 * Threads: every function may be called from any thread unless its comment says
 * otherwise. Locks: one mutex per index shard (lookup + reference increment), one for the
 * eviction queue (inserts, unlinks, eviction; never taken on a hit), one per object for
 * its waiters. A hit writes no shared list: it sets the object's visited bit. */
#ifndef UMBRA_CACHE_H
#define UMBRA_CACHE_H

#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

#include "umbra/common.h"
#include "umbra/config.h"
#include "umbra/settings.h"

struct um_cache;
struct um_cache_obj;
struct um_cache_chunk;

struct um_cache_opts {
    /* Hard cap in bytes on everything the store allocates for content. Required (> 0). */
    size_t memory_cap;
    /* Largest body (bytes) an object may hold; 0: memory_cap / 8. Clamped to memory_cap. */
    size_t max_object;
    /* Index shards: a power of two; 0: 64. */
    unsigned shards;
    /* Seconds between expiry sweeps of the cleaner thread; 0: 10. */
    unsigned clean_interval;
    /* Percent of memory_cap. Above high_water the cleaner thread is woken to evict down to
     * low_water in the background; an allocation that would pass the cap evicts down to
     * low_water synchronously. 0: 95 and 90. low_water <= high_water <= 100. */
    unsigned high_water_pct;
    unsigned low_water_pct;
    /* The clock expiry is measured with, in the caller's unit (seconds by default); NULL:
     * CLOCK_REALTIME seconds. Called from the cleaner thread and um_cache_clean_now. */
    int64_t (*now)(void *arg);
    void *now_arg;
    /* Benchmarks and tests only: evict in plain FIFO order (ignore the visited bit). */
    bool fifo;
};

enum um_cache_state {
    UM_CACHE_FILLING = 0,  /* the filler is still adding bytes */
    UM_CACHE_COMPLETE = 1, /* head and body are final; the object never changes again */
    UM_CACHE_ABORTED = 2,  /* the fill failed or ran out of room; unlinked; the bytes
                              published so far stay readable but the body is not whole */
};

enum um_cache_result {
    UM_CACHE_FOUND,   /* *out is an existing object (FILLING or COMPLETE), referenced */
    UM_CACHE_CREATED, /* *out is a new FILLING object, referenced: the caller is its filler */
    UM_CACHE_NOSPACE, /* *out is NULL: no room for a new object even after eviction */
};

/* cache = { ... } */
#define UM_CACHE_TARGETED_MAX 8
#define UM_CACHE_TARGETED_NAME_MAX 63
struct um_cache_conf {
    uint64_t memory;       /* hard cap, bytes; default 256MB */
    uint64_t max_object;   /* largest body stored, bytes; default 64MB (at most memory) */
    double clean_interval; /* seconds between expiry sweeps; default 10 */
    double default_ttl;    /* seconds for responses without freshness information, on routes
                              that cache (heuristically cacheable statuses only); default 0 */
    double stale_if_error; /* seconds a stale response may stand in for a failing origin when
                              the response does not say; default 0 */
    struct um_netmask *purge_allow; /* PURGE allowed from these; default 127.0.0.1 and ::1 */
    size_t num_purge_allow;
    /* Targeted cache-control fields (RFC 9213) honoured instead of Cache-Control for the
     * cache's decisions, first valid one wins; default Umbra-Cache-Control, then
     * CDN-Cache-Control. Names are tokens of at most UM_CACHE_TARGETED_NAME_MAX bytes. */
    char targeted[UM_CACHE_TARGETED_MAX][UM_CACHE_TARGETED_NAME_MAX + 1];
    size_t num_targeted;
    bool expose_tags; /* send Surrogate-Key, Cache-Tag and xkey on to clients; default false */
    /* l2 = { redis = "redis://ADDRESS:PORT", max_object = SIZE, timeout = S }: the second-
     * level cache on Redis (umbra/l2.h), shared by the nodes; off without the table. */
    struct um_l2_conf {
        bool enabled;
        char host[64];       /* an IPv4 or IPv6 address (no name: resolving could block) */
        int port;            /* default 6379 */
        uint64_t max_object; /* largest body written to Redis, bytes; default 1MB */
        double timeout;      /* seconds a lookup waits before the origin is asked; 0.05 */
        int line;
    } l2;
    /* disk = { path = DIR, size = SIZE } or a list of such tables, with sync = S and
     * reset_incompatible = BOOL beside them: the disk tier (umbra/disktier.h); off
     * without the table. Each store is the file DIR/umbra.store (and its index). */
#define UM_CACHE_DISK_SLICE_DEFAULT (1ull << 20)
    struct um_disk_conf {
        char *path;    /* the directory, absolute */
        uint64_t size; /* bytes of its store file */
        int line;
    } * disks;
    size_t num_disks;
    double disk_sync;             /* seconds between syncs; default 1 */
    bool disk_reset_incompatible; /* reinitialise a store of another format; default false */
    /* slice = SIZE beside them: a GET on a route with the disk tier is fetched from the
     * origin in Range requests of this many bytes, each stored as an object of its own
     * (src/cache/slice.c); 0: off. Default UM_CACHE_DISK_SLICE_DEFAULT. */
    uint64_t disk_slice;
    int line;
};

/* The cache's settings (umbra/settings.h), read by src/cache/settings.c; its part of a
 * snapshot: um_cache_conf(c). */
extern const struct um_settings um_cache_settings;
/* The module's record (umbra/module.h); its running state is the shared cache. */
extern const struct um_module um_cache_module;
static inline const struct um_cache_conf *um_cache_conf(const struct um_config *c)
{
    return um_config_part(c, &um_cache_settings);
}

/* Decides whether obj (same key) is the variant the caller wants. Runs on the caller's
 * thread under the shard lock: it must be quick, must not block, and must not call into
 * the store except the um_cache_obj_* accessors marked "match-safe". NULL: any object with
 * the key matches. */
typedef bool (*um_cache_match_cb)(const struct um_cache_obj *obj, void *arg);

/* ---- The store ---------------------------------------------------------------------- */

/* Creates a store. o is copied (not kept); o->memory_cap must be > 0 and o->shards a power
 * of two (or 0). Never returns NULL (allocation failure panics). Free with
 * um_cache_destroy. */
struct um_cache *um_cache_create(const struct um_cache_opts *o);

/* Stops the cleaner if it runs, unlinks every object and frees the store. Every reference
 * handed out must have been given back first: an object still referenced is a caller bug
 * and an assertion failure. No other thread may use c during or after the call. */
void um_cache_destroy(struct um_cache *c);

/* Finds a linked, FILLING or COMPLETE object with this key that match accepts (newest
 * first) and returns a new reference to it, or NULL. Marks the hit for eviction (the
 * visited bit; no list is reordered). key is borrowed for the call. */
struct um_cache_obj *um_cache_lookup(struct um_cache *c, um_str key, um_cache_match_cb match,
                                     void *arg);

/* Every linked, FILLING or COMPLETE object with this key that match accepts (newest
 * first), at most max of them, each with a new reference in out[]. Returns how many. No
 * visited bit is set: the caller is not serving them. */
size_t um_cache_variants(struct um_cache *c, um_str key, um_cache_match_cb match, void *arg,
                         struct um_cache_obj **out, size_t max);

/* Lookup, and on a miss insert a new FILLING object with this key and tag, atomically with
 * respect to other lookup_or_insert calls on any thread: of N concurrent callers with the
 * same key and matching tags, exactly one gets UM_CACHE_CREATED. On FOUND and CREATED *out
 * holds a new reference (on CREATED the index holds another); on NOSPACE *out is NULL.
 * key and tag (tag_len bytes, may be NULL when 0) are copied. The new object's expires is
 * INT64_MAX and stale_until INT64_MAX (never dropped by the cleaner). */
enum um_cache_result um_cache_lookup_or_insert(struct um_cache *c, um_str key,
                                               um_cache_match_cb match, void *arg, const void *tag,
                                               size_t tag_len, struct um_cache_obj **out);

/* Inserts a new FILLING object unconditionally (no coalescing), ahead of any existing
 * object with the key, e.g. a fresh response that will replace a stale variant (unlink
 * the old one once the new one is complete). Returns a new reference, or NULL when there
 * is no room even after eviction. key and tag are copied. */
struct um_cache_obj *um_cache_insert(struct um_cache *c, um_str key, const void *tag,
                                     size_t tag_len);

/* Removes obj from the index (idempotent): later lookups do not find it; holders keep
 * reading it; a FILLING object may still be filled and finished. obj must be referenced
 * by the caller. */
void um_cache_unlink(struct um_cache *c, struct um_cache_obj *obj);

/* What the store's users share beyond the store, set once before the workers use it (the
 * server's, handed down through the runtime; any of them NULL: none):
 *   disk      the disk tier beneath (umbra/disktier.h): every purge below reaches it too
 *   l2        the second-level cache the fills ask and write (umbra/cacheorigin.h)
 *   announce  carries a purge the cache layer applied on a worker (ctx; a PURGE that was
 *             not a peer's own) to the other nodes: the ring's peers and the Redis bus */
struct um_context;
struct um_disk_tier;
struct um_cache_l2;
struct um_purge;
struct um_cache_links {
    struct um_disk_tier *disk;
    struct um_cache_l2 *l2;
    void (*announce)(void *arg, struct um_context *ctx, const struct um_purge *p);
    void *announce_arg;
};
void um_cache_set_links(struct um_cache *c, const struct um_cache_links *links);
/* The slice size (cache.disk.slice) the snapshot's routes fetch large objects in, so that
 * a purge of a URL reaches its slices (src/cache/slice.c); 0: none. Any thread. */
void um_cache_set_slice(struct um_cache *c, uint64_t size);
/* The links of c (constant once the workers run). */
const struct um_cache_links *um_cache_links(const struct um_cache *c);

/* Unlinks every object (every variant, FILLING ones included) with this key. Returns how
 * many were unlinked. key is borrowed. */
size_t um_cache_purge(struct um_cache *c, um_str key);

/* ---- Surrogate keys and purges (tags.c) ------------------------------------------------ */

#define UM_CACHE_MAX_TAGS 64      /* tags kept per object; more are ignored */
#define UM_CACHE_TAG_MAX_LEN 256  /* bytes of one tag; longer ones are ignored */

/* Tags obj with tags[0..n) (copied): empty, longer than UM_CACHE_TAG_MAX_LEN, with
 * spaces or control bytes, and repeated tags are skipped, and at most UM_CACHE_MAX_TAGS
 * are kept. Filler only, once, while FILLING and before set_head (the head publishes
 * them). The index and the links are charged against the cap (evicting if needed).
 * Returns UM_OK, or UM_ERR when there is no room (the object is then untagged; the
 * caller should not store it, or it would escape tag purges). */
int um_cache_obj_set_tags(struct um_cache_obj *obj, const um_str *tags, size_t n);

/* The object's tags (slices valid while the caller holds a reference), at most max;
 * returns how many. Once the head is published (or by the filler). */
size_t um_cache_obj_tags(const struct um_cache_obj *obj, um_str *out, size_t max);

/* Flags of the purges below. */
#define UM_CACHE_PURGE_SOFT 0x1  /* mark stale (um_cache_obj_marked_stale) instead of unlink */
#define UM_CACHE_PURGE_PACED 0x2 /* sleep twice as long as it worked after each 1,024
                                    objects, so that a large purge takes at most a third of
                                    a CPU from the workers; only for threads that may block
                                    (the admin's) */

/* Purges every linked object tagged with any of tags[0..n): hard unlinks (FILLING objects
 * too), soft (flags UM_CACHE_PURGE_SOFT) marks COMPLETE ones stale and keeps them, their
 * expires brought down to now (by the opts clock) when it was later. Returns
 * how many objects were affected, each counted once. Time linear in the objects tagged;
 * the tag index's lock is held only while they are collected, and never taken by hits. */
size_t um_cache_purge_tags(struct um_cache *c, const um_str *tags, size_t n, unsigned flags);

/* Purges (as above) every object whose key is "HOST TARGET" with TARGET starting with
 * prefix and, when host.len > 0, HOST equal to host. Walks the whole index, one shard lock
 * at a time. Returns how many were affected. */
size_t um_cache_purge_prefix(struct um_cache *c, um_str host, um_str prefix, unsigned flags);

/* Marks every COMPLETE variant of key stale (expires as above). Returns how many. */
size_t um_cache_purge_soft(struct um_cache *c, um_str key);

/* Applies p (umbra/purge.h) with the calls above: a URL's key hard or soft, a prefix, tags;
 * flags as above (p->soft adds UM_CACHE_PURGE_SOFT). Returns how many were affected. */
struct um_purge;
size_t um_cache_purge_apply(struct um_cache *c, const struct um_purge *p, unsigned flags);

/* Distinct tags in the index. */
size_t um_cache_tag_count(const struct um_cache *c);

/* Soft purge marks: set by the purges above; readable from any thread (relaxed). A
 * marked object is to be treated as stale (its age at least its lifetime), stale since
 * its expires (the purge's time, unless it was stale before). Match-safe. */
void um_cache_obj_mark_stale(struct um_cache_obj *obj);
bool um_cache_obj_marked_stale(const struct um_cache_obj *obj);

/* Claims the one background refresh of obj: true for the first caller, false while a
 * claim is held. The claimer releases it when the refresh ends (obj referenced). */
bool um_cache_obj_claim_refresh(struct um_cache_obj *obj);
void um_cache_obj_release_refresh(struct um_cache_obj *obj);

/* ---- Memory, counters, cleaner ------------------------------------------------------ */

/* Bytes currently reserved for content (never above the cap). */
size_t um_cache_memory_used(const struct um_cache *c);
/* Objects linked in the index. */
size_t um_cache_object_count(const struct um_cache *c);
/* Objects unlinked by eviction so far. */
uint64_t um_cache_evictions(const struct um_cache *c);

struct um_cache_stats {
    size_t memory_cap, memory_used;
    size_t high_water, low_water; /* bytes */
    size_t objects;               /* linked in the index */
    size_t objects_allocated;     /* linked or not, until their last unref */
    uint64_t evictions;           /* unlinked by SIEVE */
    uint64_t expired;             /* unlinked by the expiry sweep */
    uint64_t aborted;             /* fills that ended ABORTED */
    uint64_t nospace;             /* allocations refused because the cap could not be kept */
};
/* A snapshot of the counters (each read atomically, not all at one instant). */
void um_cache_stats(const struct um_cache *c, struct um_cache_stats *st);

/* The bytes the store counts for a malloc of n bytes (glibc's chunk size: n plus an
 * 8-byte header, rounded up to 16, at least 32). For tests and sizing. */
size_t um_cache_alloc_size(size_t n);

/* Starts the cleaner thread (at most one per store): every clean_interval seconds it
 * drops objects whose stale_until has passed, and whenever memory passes the high-water
 * mark it evicts down to the low-water mark. */
void um_cache_start_cleaner(struct um_cache *c);
/* Stops the cleaner thread promptly and joins it. No-op when it is not running. Must not
 * be called concurrently with um_cache_start_cleaner. */
void um_cache_stop_cleaner(struct um_cache *c);

/* One expiry sweep now, on the calling thread: unlinks every COMPLETE object whose
 * stale_until <= now (by the opts clock). Returns how many were unlinked. */
size_t um_cache_clean_now(struct um_cache *c);

/* Evicts with SIEVE until memory_used <= target or nothing more can be evicted (objects
 * that are FILLING or referenced outside the index are skipped: unlinking them would free
 * nothing now). Returns how many objects were unlinked. */
size_t um_cache_evict_to(struct um_cache *c, size_t target);

/* ---- Objects: references and accessors ----------------------------------------------- */

/* Adds a reference; the caller must already hold one. Returns obj. */
struct um_cache_obj *um_cache_obj_ref(struct um_cache_obj *obj);
/* Gives back a reference; the last one frees the object. The caller must have called
 * um_cache_obj_unwait for its waiter first. Below zero: assertion failure. */
void um_cache_obj_unref(struct um_cache_obj *obj);

/* The key: immutable, valid while the caller holds a reference. Match-safe. */
um_str um_cache_obj_key(const struct um_cache_obj *obj);
/* The variant tag: valid while the caller holds a reference. Match-safe. Outside match
 * callbacks, only the filler may read it before the head is published (see set_tag). */
um_str um_cache_obj_tag(const struct um_cache_obj *obj);
/* The state (acquire). Match-safe. */
enum um_cache_state um_cache_obj_state(const struct um_cache_obj *obj);
/* Whether the object is still in the index (a hint: it may be unlinked right after). */
bool um_cache_obj_linked(const struct um_cache_obj *obj);
/* The head, once set: *meta (16-byte aligned) and *head point into the object, valid while
 * the caller holds a reference, never change. Returns false (and leaves them alone) when
 * the filler has not set it yet. Match-safe. */
bool um_cache_obj_head(const struct um_cache_obj *obj, um_str *meta, um_str *head);
/* How many times the object's waiter lock has been taken (waits, unwaits, wake-ups).
 * A reader of a complete object that never had to wait takes it no time: tests check
 * that a hit stays off it. Match-safe. */
unsigned long um_cache_obj_waiter_locks(const struct um_cache_obj *obj);
/* Body bytes published so far (final once COMPLETE). Match-safe. */
size_t um_cache_obj_body_len(const struct um_cache_obj *obj);

/* The two times the caller keeps on an object, in the clock's unit; any thread, any
 * state, relaxed atomics. expires is only stored for the caller (freshness); the cleaner
 * drops an object once stale_until <= now. Both start at INT64_MAX. Match-safe (get). */
void um_cache_obj_set_expires(struct um_cache_obj *obj, int64_t t);
int64_t um_cache_obj_expires(const struct um_cache_obj *obj);
void um_cache_obj_set_stale_until(struct um_cache_obj *obj, int64_t t);
int64_t um_cache_obj_stale_until(const struct um_cache_obj *obj);

/* ---- Filling: only the filler (the thread that got UM_CACHE_CREATED or um_cache_insert's
 * object), one call at a time. Each call that changes the object wakes every registered
 * waiter once, on the filler's thread, before it returns. Any failure aborts the object:
 * state ABORTED, unlinked, waiters woken; the filler should then serve its own client
 * directly and still call finish (a no-op) and unref. ---- */

/* Replaces the variant tag (copied). Only while FILLING and before set_head, e.g. once
 * the response says what it Varies on. Takes the shard lock, so match callbacks see the
 * old tag or the new one. Returns UM_OK, or UM_ERR (object aborted) when there is no room. */
int um_cache_obj_set_tag(struct um_cache_obj *obj, const void *tag, size_t tag_len);

/* Announces the expected body length (e.g. Content-Length) so that chunks are sized to
 * fit. Returns UM_ERR (object aborted) when it is above max_object, else UM_OK. Optional. */
int um_cache_obj_expect(struct um_cache_obj *obj, size_t body_len);

/* Sets the head once, before the first append: meta (the caller's binary metadata,
 * stored 16-byte aligned) and head (the serialised response head) are copied together.
 * Returns UM_OK, or UM_ERR (object aborted) when there is no room. */
int um_cache_obj_set_head(struct um_cache_obj *obj, const void *meta, size_t meta_len,
                          const char *head, size_t head_len);

/* Appends body bytes (copied). Returns UM_OK; UM_ERR when the object is not FILLING (e.g.
 * already aborted) or, aborting it, when the body would pass max_object or memory cannot
 * be found even after eviction. The head must be set. */
int um_cache_obj_append(struct um_cache_obj *obj, const void *data, size_t len);

/* Makes obj's body the body of from (shared, not copied: the chunks are reference-
 * counted), e.g. after a 304 revalidation: the new object gets the merged head and the old
 * body. obj must be FILLING with no body yet; from must be COMPLETE and referenced by the
 * caller. No append may follow. Returns UM_OK, or UM_ERR when obj is not FILLING. */
int um_cache_obj_adopt_body(struct um_cache_obj *obj, const struct um_cache_obj *from);

/* Whether obj was aborted because its body did not fit (over max_object, or no room even
 * after eviction) rather than because its fill failed: its readers may fetch the rest
 * elsewhere. Any thread, after um_cache_obj_state said UM_CACHE_ABORTED. */
bool um_cache_obj_outgrew(const struct um_cache_obj *obj);

/* Ends the fill: ok (head set required) makes it COMPLETE; !ok makes it ABORTED and
 * unlinks it. No-op when it is no longer FILLING. The filler keeps its reference. */
void um_cache_obj_finish(struct um_cache_obj *obj, bool ok);

/* ---- Reading: any thread holding a reference ------------------------------------------ */

/* Where a reader is in an object's body. Embed it; um_cache_cursor_init before use. */
struct um_cache_cursor {
    size_t off; /* body bytes consumed (advanced by the reader) */
    /* private */
    const struct um_cache_obj *_obj;
    const struct um_cache_chunk *_chunk; /* the chunk holding off, or NULL */
    size_t _chunk_start;                 /* body offset of _chunk's first byte */
    size_t _avail;                       /* end of what the last read returned */
    uint64_t _seen;                      /* the object's progress count at the last look */
};

/* Starts at the beginning of obj's body and takes note of the object's progress: look at
 * the head/state after this call, not before, so that um_cache_obj_wait catches anything
 * that happens in between. */
void um_cache_cursor_init(struct um_cache_cursor *cur, const struct um_cache_obj *obj);

/* Fills up to max_iov slices with the body bytes available from cur->off, without
 * copying: they point into the object's chunks and stay valid (and unchanged) while the
 * caller holds a reference. Returns the number of slices (0: nothing new yet, or the end).
 * *complete (may be NULL) is set to true when the object is COMPLETE and the slices reach
 * the end of the body (so after consuming them the reader is done); for an ABORTED object
 * the published bytes are returned and *complete is false: check um_cache_obj_state.
 * Does not move the cursor. */
size_t um_cache_obj_read(const struct um_cache_obj *obj, struct um_cache_cursor *cur,
                         struct iovec *iov, size_t max_iov, bool *complete);

/* Consumes n bytes (n at most what the last read returned past cur->off). */
void um_cache_cursor_advance(struct um_cache_cursor *cur, size_t n);

/* ---- Waiting for progress ----------------------------------------------------------- */

struct um_cache_waiter;
typedef void (*um_cache_progress_cb)(struct um_cache_waiter *w);

/* Embedded in the reader's state. One object at a time. */
struct um_cache_waiter {
    /* Called once per registration, on the filler's thread, with no cache lock held, when
     * the object gains head or body bytes or changes state. It must be quick and thread-
     * safe (e.g. post a task to the reader's loop); it may call um_cache_obj_wait again but
     * must not call the filling functions. */
    um_cache_progress_cb on_progress;
    /* private */
    struct um_cache_waiter *_next, *_prev;
    struct um_cache_obj *_obj;
    pthread_t _runner;   /* the thread running on_progress, while _running */
    unsigned _running;   /* on_progress calls in flight */
    unsigned char _list; /* which list of _obj holds it: none, waiting, firing */
};

/* Initialises w (embedded or heap) with its callback. */
void um_cache_waiter_init(struct um_cache_waiter *w, um_cache_progress_cb on_progress);

/* Registers w to be called once on obj's next progress, unless something already changed
 * since cur last looked (cursor_init, read, or a wait that returned false), or obj is not
 * FILLING: then returns false, updates cur's note, and the caller should look again (head,
 * read, state). Returns true when w is registered (or already was). The caller holds a
 * reference to obj; w is registered with at most one object. */
bool um_cache_obj_wait(struct um_cache_obj *obj, struct um_cache_cursor *cur,
                       struct um_cache_waiter *w);

/* Unregisters w (no-op when not registered). When it returns, w's on_progress is not
 * running (unless on this very thread, from inside it) and will not be called, so w may
 * be freed. May briefly spin while a call is in flight on the filler's thread. Call it
 * before freeing w, before using w with another object and before unref'ing obj, even
 * when w has already fired: the filler's thread may still be returning from the call. */
void um_cache_obj_unwait(struct um_cache_obj *obj, struct um_cache_waiter *w);

#endif
