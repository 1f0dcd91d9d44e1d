/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the shared cache store share: its structures, and the few calls one
 * part makes into another. The store's design note is spread over its files, each part
 * beside the code it describes:
 *
 *   store.c        the index and its lock protocol; objects made, referenced and freed;
 *                  the store: create, destroy, lookup, insert, unlink, purge, counters;
 *   store_evict.c  memory (the charge against the cap) and eviction (SIEVE, its queue);
 *   store_clean.c  the cleaner thread: expiry sweeps, eviction in the background;
 *   store_obj.c    objects: chunked bodies, accessors, filling, reading, and the
 *                  progress and waiter protocol that never loses a wake-up.
 *
 * For the store's files (and its unit test) only: everything else uses cache.h. */
#ifndef UMBRA_CACHE_STORE_INTERNAL_H
#define UMBRA_CACHE_STORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "umbra/cache.h"

#define CACHELINE 64
#define CHUNK_ALLOC_MAX 65536
#define CHUNK_DATA_MIN 64

enum { Q_NEW, Q_QUEUED, Q_GONE };
enum { W_NONE, W_WAITING, W_FIRING };

struct um_cache_chunk {
    struct um_cache_chunk *next; /* written once, before the bytes in it are published */
    atomic_uint refcnt;          /* objects whose body contains this chunk */
    uint32_t cap;                /* data bytes */
    size_t acct;                 /* bytes charged */
    char data[];
};

#define CHUNK_HDR offsetof(struct um_cache_chunk, data)
#define CHUNK_DATA_MAX (CHUNK_ALLOC_MAX - 8 - CHUNK_HDR)

struct um_cache_obj {
    struct um_cache *cache;
    uint64_t hash;
    struct um_cache_obj *h_next;            /* shard lock; reused for private lists once
                                               unlinked */
    struct um_cache_obj *q_newer, *q_older; /* queue lock */
    unsigned char q_state;                  /* queue lock */
    bool adopted;                           /* filler only */
    atomic_bool outgrew; /* aborted because its body did not fit (um_cache_obj_outgrew) */
    atomic_bool linked;                     /* written under the shard lock */
    atomic_uchar visited;
    atomic_bool head_ready;
    atomic_int state;
    atomic_size_t refcnt;
    atomic_size_t body_len;
    atomic_uint_fast64_t progress;
    atomic_uint nwaiters; /* entries in the waiting list */
    _Atomic int64_t expires, stale_until;

    char *tag; /* changed under the shard lock, only before the head is published */
    size_t tag_len, tag_acct;

    char *headblk; /* meta at 0, head at head_off; published by head_ready */
    size_t meta_len, head_off, head_len, head_acct;

    struct um_cache_chunk *first; /* published by body_len > 0 */
    struct um_cache_chunk *last;  /* filler only, as are the two below */
    size_t last_start;
    size_t expect;

    size_t acct; /* bytes charged for this struct and the key */

    pthread_mutex_t wlock; /* the two waiter lists and each waiter's private fields */
    atomic_ulong wlock_taken; /* times wlock was taken (written under it; for tests) */
    struct um_cache_waiter *waiting, *firing;

    /* Surrogate keys (tags.c): set once by the filler before the head is published. */
    struct um__tag_link *tlinks;
    size_t ntags, tags_acct;
    uint64_t purge_gen;      /* tags lock: the last tag purge that saw this object */
    atomic_uchar cdn_flags; /* OBJ_F_* below */

    size_t key_len;
    char key[];
};

#define OBJ_F_SOFT_PURGED 0x1 /* marked stale by a soft purge */
#define OBJ_F_REFRESHING 0x2  /* a background refresh of this object is running */

/* The tag index (tags.c): tag -> the objects it tags. One lock, never taken on a hit. */
struct um__tag_node;
struct um__tag_link {
    struct um__tag_link *prev, *next; /* in the node's list */
    struct um__tag_node *node;
    struct um_cache_obj *obj;
};
struct um__tags {
    _Alignas(CACHELINE) pthread_mutex_t lock;
    struct um__tag_node **buckets;
    size_t mask, count; /* buckets - 1; distinct tags */
    size_t acct;        /* bytes charged for buckets */
    uint64_t gen;       /* purges so far */
};

struct shard {
    _Alignas(CACHELINE) pthread_mutex_t lock;
    struct um_cache_obj **buckets;
    size_t mask; /* buckets - 1 */
    size_t count;
    size_t acct; /* bytes charged for buckets */
};

struct um_cache {
    struct um_cache_opts o;
    struct um_cache_links links; /* um_cache_set_links */
    size_t cap, high, low, max_object;
    uint64_t sipkey[2];
    unsigned shard_bits;
    struct shard *shards;

    _Alignas(CACHELINE) atomic_size_t used;
    atomic_size_t nlinked, nalloc;
    atomic_uint_fast64_t evictions, expired, aborted, nospace;

    _Alignas(CACHELINE) pthread_mutex_t qlock;
    struct um_cache_obj *qhead, *qtail, *hand; /* head: newest */
    size_t qlen;

    _Alignas(CACHELINE) pthread_mutex_t clean_lock;
    pthread_cond_t clean_cond;
    pthread_t clean_thread;
    bool clean_running, clean_stop, clean_kick;
    atomic_bool kick_pending;

    struct um__tags tags;
    /* cache.disk.slice of the newest snapshot (um_cache_set_slice); 0: no slices. */
    _Atomic uint64_t slice_size;
};

static inline struct shard *shard_of(struct um_cache *c, uint64_t hash)
{
    return &c->shards[c->shard_bits == 0 ? 0 : hash >> (64 - c->shard_bits)];
}

/* Reserves n bytes if that keeps the store under its cap (no eviction). */
static inline bool try_charge(struct um_cache *c, size_t n)
{
    size_t u = atomic_load_explicit(&c->used, memory_order_relaxed);
    do {
        if (n > c->cap || u > c->cap - n) return false;
    } while (!atomic_compare_exchange_weak_explicit(&c->used, &u, u + n, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

static inline void uncharge(struct um_cache *c, size_t n)
{
    size_t old = atomic_fetch_sub_explicit(&c->used, n, memory_order_relaxed);
    UM_ASSERT(old >= n);
}

/* store.c: the index */
/* The index's hash of a key. */
uint64_t um__store_key_hash(const struct um_cache *c, um_str key);
/* Under the shard lock: takes *pp out of its chain; the index's reference is the caller's. */
struct um_cache_obj *um__store_shard_take(struct um_cache *c, struct shard *sh,
                                          struct um_cache_obj **pp);
/* Takes o out of the index if it is there; returns whether it was (the caller then owns
 * the index's reference). */
bool um__store_index_remove(struct um_cache *c, struct um_cache_obj *o);
/* Takes o out of the index and the queue, and drops the index's reference. */
void um__store_obj_unlink(struct um_cache *c, struct um_cache_obj *o);
/* Frees a private list (chained through h_next) of objects taken out of the index with no
 * lock held: each leaves the queue and loses the index's reference. Returns how many. */
size_t um__store_free_dead(struct um_cache *c, struct um_cache_obj *dead);

/* store_evict.c: memory and the eviction queue */
/* Charges n bytes, evicting synchronously when the cap is in the way; false when no room
 * can be made. The caller holds no store lock. */
bool um__store_charge(struct um_cache *c, size_t n);
/* Queues a new object at the head (unless it was unlinked meanwhile); takes one out. */
void um__store_queue_add(struct um_cache *c, struct um_cache_obj *o);
void um__store_queue_remove(struct um_cache *c, struct um_cache_obj *o);

/* tags.c: the tag index */
void um__tags_init(struct um_cache *c);
/* Frees the index's buckets; every tagged object must be gone. */
void um__tags_dispose(struct um_cache *c);
/* Takes o's links out of the index (o is being freed). */
void um__tags_obj_free(struct um_cache *c, struct um_cache_obj *o);

/* store_clean.c: the cleaner */
/* Wakes the cleaner thread to evict down to the low-water mark. */
void um__store_kick_cleaner(struct um_cache *c);

/* slice.c: the tag every slice of the object under key carries ("umbra-slice-" and 16
 * hex digits of a hash of key), NUL-terminated in out: a purge of key's URL purges it
 * too (um_cache_purge_apply). */
#define UM_CACHE_SLICE_TAG_LEN 32
void um__cache_slice_tag(um_str key, char out[UM_CACHE_SLICE_TAG_LEN]);
/* The key of slice k (slices of size bytes) of the object under base, written to
 * out[0..cap) with a NUL after it; returns its length, 0 when cap is less than base's
 * length and UM__CACHE_SLICE_TAIL_MAX. */
size_t um__cache_slice_key(um_str base, uint64_t size, uint64_t k, char *out, size_t cap);
/* The same over a key whose first base_len bytes are the object's already (room for
 * UM__CACHE_SLICE_TAIL_MAX after them): only the slice's part is written. */
size_t um__cache_slice_key_tail(char *key, size_t base_len, uint64_t size, uint64_t k);
#define UM__CACHE_SLICE_TAIL_MAX (sizeof(" umbra-slice:") - 1 + 20 + 1 + 20 + 1)
/* tags.c: purges the slices of the object under key (a URL's purge): those in memory (by
 * their tag), on disk by key (theirs and slice 0's; not the disk's purge by tag). Returns
 * how many objects in memory were affected. */
size_t um__cache_purge_slices(struct um_cache *c, um_str key, unsigned flags);

#endif
