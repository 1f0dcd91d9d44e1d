/* SPDX-License-Identifier: BSD-2-Clause */
/* The shared cache store: a sharded index, a SIEVE eviction queue, a hard memory cap,
 * append-only chunked bodies that readers stream while they are being filled, and
 * one-shot waiters woken on the filler's thread. This file is the index, the objects'
 * lives (made, referenced, freed) and the store itself; store_evict.c is memory and
 * eviction, store_clean.c the cleaner thread, store_obj.c the objects' bodies, filling,
 * reading and waiters; store_internal.h what they share. Each part of the design note is
 * in the file whose code it describes.
 *
 * Design note
 *
 * Index. A power-of-two array of shards, each on its own cache lines with its own mutex
 * and a chained hash table (SipHash-1-3 with a per-store random key: keys come from
 * clients, so collisions must not be choosable). A chain is ordered newest first. Under
 * the shard lock a lookup walks the chain, calls the match callback and increments the
 * reference count; nothing else.
 *
 * References. The index holds one reference while an object is linked. The eviction queue
 * holds none: an object leaves the queue before its index reference is dropped, so
 * whoever finds it in the queue (under the queue lock) may take a reference safely.
 *
 * Locks. A hit takes its shard's lock and no other. The queue lock (store_evict.c) is
 * taken by inserts (misses), unlinks and eviction. Lock order: shard lock, then queue
 * lock; the eviction path holds the queue lock alone, picks a victim, takes a reference,
 * drops the lock and only then takes the victim's shard lock. An object's waiter lock
 * (store_obj.c) and the cleaner's lock (store_clean.c) are taken with no other lock of
 * the store's held. */
#include "store_internal.h"
#include "umbra/siphash.h"
#include "umbra/disktier.h"

#include <endian.h>

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>
#include <time.h>

#define BUCKETS_INIT 8

/* ---- Hashing -------------------------------------------------------------------------- */

static uint64_t key_hash(const struct um_cache *c, um_str key)
{
    /* SipHash-1-3: fast enough for short keys, and keyed, so a client cannot aim many
     * keys at one chain. */
    return um_siphash13(c->sipkey, key.base, key.len);
}

uint64_t um__store_key_hash(const struct um_cache *c, um_str key)
{
    return key_hash(c, key);
}

/* ---- Objects' lives: made, referenced, freed --------------------------------------------- */

/* Chunks are counted too (um_cache_obj_adopt_body shares them): the last object that holds
 * one gives it back. */
static void chunk_unref(struct um_cache *c, struct um_cache_chunk *ch)
{
    unsigned old = atomic_fetch_sub_explicit(&ch->refcnt, 1, memory_order_acq_rel);
    UM_ASSERT(old > 0 && "cache chunk reference count below zero");
    if (old == 1) {
        uncharge(c, ch->acct);
        free(ch);
    }
}

static struct um_cache_obj *obj_new(struct um_cache *c, um_str key, uint64_t hash, const void *tag,
                                    size_t tag_len)
{
    size_t acct = um_cache_alloc_size(sizeof(struct um_cache_obj) + key.len);
    size_t tag_acct = tag_len > 0 ? um_cache_alloc_size(tag_len) : 0;
    if (!um__store_charge(c, acct + tag_acct)) return NULL;
    struct um_cache_obj *o = um_calloc(1, sizeof(*o) + key.len);
    o->cache = c;
    o->hash = hash;
    o->q_state = Q_NEW;
    atomic_init(&o->linked, false);
    atomic_init(&o->visited, 0);
    atomic_init(&o->head_ready, false);
    atomic_init(&o->state, UM_CACHE_FILLING);
    atomic_init(&o->refcnt, 1);
    atomic_init(&o->body_len, 0);
    atomic_init(&o->progress, 0);
    atomic_init(&o->nwaiters, 0);
    atomic_init(&o->wlock_taken, 0);
    atomic_init(&o->expires, INT64_MAX);
    atomic_init(&o->stale_until, INT64_MAX);
    if (tag_len > 0) {
        o->tag = um_malloc(tag_len);
        memcpy(o->tag, tag, tag_len);
    }
    o->tag_len = tag_len;
    o->tag_acct = tag_acct;
    o->acct = acct;
    pthread_mutex_init(&o->wlock, NULL);
    o->key_len = key.len;
    if (key.len > 0) memcpy(o->key, key.base, key.len);
    atomic_fetch_add_explicit(&c->nalloc, 1, memory_order_relaxed);
    return o;
}

static void obj_free(struct um_cache_obj *o)
{
    struct um_cache *c = o->cache;
    UM_ASSERT(!atomic_load_explicit(&o->linked, memory_order_relaxed) &&
              "cache object released while still linked (one unref too many)");
    UM_ASSERT(o->q_state != Q_QUEUED);
    UM_ASSERT(o->waiting == NULL && o->firing == NULL && "cache object freed with waiters");
    for (struct um_cache_chunk *ch = o->first, *next; ch != NULL; ch = next) {
        next = ch->next;
        chunk_unref(c, ch);
    }
    if (o->tlinks != NULL) um__tags_obj_free(c, o);
    free(o->headblk);
    free(o->tag);
    uncharge(c, o->acct + o->tag_acct + o->head_acct);
    pthread_mutex_destroy(&o->wlock);
    free(o);
    atomic_fetch_sub_explicit(&c->nalloc, 1, memory_order_relaxed);
}

struct um_cache_obj *um_cache_obj_ref(struct um_cache_obj *o)
{
    size_t old = atomic_fetch_add_explicit(&o->refcnt, 1, memory_order_relaxed);
    UM_ASSERT(old > 0 && "cache object referenced after its last unref");
    return o;
}

void um_cache_obj_unref(struct um_cache_obj *o)
{
    size_t old = atomic_fetch_sub_explicit(&o->refcnt, 1, memory_order_acq_rel);
    UM_ASSERT(old > 0 && "cache object reference count below zero");
    if (old == 1) obj_free(o);
}

/* ---- The index ------------------------------------------------------------------------- */

/* Under the shard lock. Doubles the table when memory allows (without evicting: we hold a
 * shard lock); a table that cannot grow just has longer chains. Keeps chain order. Returns
 * whether it charged memory: the caller then wakes the cleaner past the high-water mark,
 * once the shard lock is released (the cleaner's lock is taken with no store lock held). */
static bool shard_grow(struct um_cache *c, struct shard *sh)
{
    size_t oldn = sh->mask + 1, n = oldn * 2;
    size_t acct = um_cache_alloc_size(n * sizeof(struct um_cache_obj *));
    if (!try_charge(c, acct)) return false;
    struct um_cache_obj **nb = um_calloc(n, sizeof(*nb));
    for (size_t i = 0; i < oldn; i++) {
        struct um_cache_obj **tail[2] = {&nb[i], &nb[i + oldn]};
        for (struct um_cache_obj *o = sh->buckets[i], *next; o != NULL; o = next) {
            next = o->h_next;
            int hi = (o->hash & oldn) != 0;
            o->h_next = NULL;
            *tail[hi] = o;
            tail[hi] = &o->h_next;
        }
    }
    free(sh->buckets);
    uncharge(c, sh->acct);
    sh->buckets = nb;
    sh->mask = n - 1;
    sh->acct = acct;
    return true;
}

/* With no store lock held: what um__store_charge does after a charge, for the index's own. */
static void kick_if_high(struct um_cache *c)
{
    if (atomic_load_explicit(&c->used, memory_order_relaxed) > c->high) um__store_kick_cleaner(c);
}

/* Under the shard lock: the newest linked, not aborted object with this key that match
 * accepts. */
static struct um_cache_obj *shard_find(struct shard *sh, um_str key, uint64_t hash,
                                       um_cache_match_cb match, void *arg)
{
    for (struct um_cache_obj *o = sh->buckets[hash & sh->mask]; o != NULL; o = o->h_next) {
        if (o->hash != hash || o->key_len != key.len ||
            (key.len > 0 && memcmp(o->key, key.base, key.len) != 0))
            continue;
        if (atomic_load_explicit(&o->state, memory_order_relaxed) == UM_CACHE_ABORTED) continue;
        if (match == NULL || match(o, arg)) return o;
    }
    return NULL;
}

/* Under the shard lock: links o at the front of its chain; the index takes a reference.
 * Returns whether the table grew (see shard_grow). */
static bool shard_add(struct um_cache *c, struct shard *sh, struct um_cache_obj *o)
{
    bool grew = sh->count > sh->mask && shard_grow(c, sh);
    struct um_cache_obj **b = &sh->buckets[o->hash & sh->mask];
    o->h_next = *b;
    *b = o;
    sh->count++;
    atomic_fetch_add_explicit(&o->refcnt, 1, memory_order_relaxed);
    atomic_store_explicit(&o->linked, true, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->nlinked, 1, memory_order_relaxed);
    return grew;
}

/* Under the shard lock: takes *pp (a linked object) out of its chain. The index's
 * reference now belongs to the caller, who must remove it from the queue and unref it. */
struct um_cache_obj *um__store_shard_take(struct um_cache *c, struct shard *sh,
                                          struct um_cache_obj **pp)
{
    struct um_cache_obj *o = *pp;
    *pp = o->h_next;
    o->h_next = NULL;
    sh->count--;
    atomic_store_explicit(&o->linked, false, memory_order_relaxed);
    atomic_fetch_sub_explicit(&c->nlinked, 1, memory_order_relaxed);
    return o;
}

/* Takes o out of the index if it is there. Returns whether it was (the caller then owns
 * the index's reference). */
bool um__store_index_remove(struct um_cache *c, struct um_cache_obj *o)
{
    struct shard *sh = shard_of(c, o->hash);
    bool found = false;
    pthread_mutex_lock(&sh->lock);
    if (atomic_load_explicit(&o->linked, memory_order_relaxed)) {
        struct um_cache_obj **pp = &sh->buckets[o->hash & sh->mask];
        while (*pp != o)
            pp = &(*pp)->h_next;
        um__store_shard_take(c, sh, pp);
        found = true;
    }
    pthread_mutex_unlock(&sh->lock);
    return found;
}

/* Takes o out of the index and the queue, and drops the index's reference; nothing when
 * it is not linked. */
void um__store_obj_unlink(struct um_cache *c, struct um_cache_obj *o)
{
    if (um__store_index_remove(c, o)) {
        um__store_queue_remove(c, o);
        um_cache_obj_unref(o);
    }
}

size_t um__store_free_dead(struct um_cache *c, struct um_cache_obj *dead)
{
    size_t n = 0;
    while (dead != NULL) {
        struct um_cache_obj *o = dead;
        dead = o->h_next;
        um__store_queue_remove(c, o);
        um_cache_obj_unref(o);
        n++;
    }
    return n;
}

/* Sets the visited bit; a plain load first, so that a hot object's line stays shared. */
static void mark_hit(struct um_cache_obj *o)
{
    if (!atomic_load_explicit(&o->visited, memory_order_relaxed))
        atomic_store_explicit(&o->visited, 1, memory_order_relaxed);
}

/* ---- The store -------------------------------------------------------------------------- */

static int64_t default_now(void *arg)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec;
}

struct um_cache *um_cache_create(const struct um_cache_opts *opts)
{
    UM_ASSERT(opts->memory_cap > 0);
    unsigned nshards = opts->shards ? opts->shards : 64;
    UM_ASSERT((nshards & (nshards - 1)) == 0 && nshards <= (1u << 16));
    unsigned hi = opts->high_water_pct ? opts->high_water_pct : 95;
    unsigned lo = opts->low_water_pct ? opts->low_water_pct : 90;
    if (lo > hi) lo = hi;
    UM_ASSERT(hi <= 100);

    struct um_cache *c =
        aligned_alloc(CACHELINE, (sizeof(*c) + CACHELINE - 1) & ~(size_t)(CACHELINE - 1));
    if (c == NULL) um_panic(__FILE__, __LINE__, "out of memory");
    memset(c, 0, sizeof(*c));
    c->o = *opts;
    c->o.shards = nshards;
    c->o.clean_interval = opts->clean_interval ? opts->clean_interval : 10;
    c->o.high_water_pct = hi;
    c->o.low_water_pct = lo;
    if (c->o.now == NULL) c->o.now = default_now;
    c->cap = opts->memory_cap;
    c->high = c->cap / 100 * hi + c->cap % 100 * hi / 100;
    c->low = c->cap / 100 * lo + c->cap % 100 * lo / 100;
    c->max_object = opts->max_object ? opts->max_object : c->cap / 8;
    if (c->max_object > c->cap) c->max_object = c->cap;
    if (getrandom(c->sipkey, sizeof(c->sipkey), 0) != (ssize_t)sizeof(c->sipkey)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        c->sipkey[0] = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uintptr_t)c;
        c->sipkey[1] = (uint64_t)ts.tv_sec ^ (uintptr_t)&ts;
    }
    while ((1u << c->shard_bits) < nshards)
        c->shard_bits++;

    atomic_init(&c->used, 0);
    atomic_init(&c->nlinked, 0);
    atomic_init(&c->nalloc, 0);
    atomic_init(&c->evictions, 0);
    atomic_init(&c->expired, 0);
    atomic_init(&c->aborted, 0);
    atomic_init(&c->nospace, 0);
    atomic_init(&c->kick_pending, false);

    c->shards = aligned_alloc(CACHELINE, nshards * sizeof(struct shard));
    if (c->shards == NULL) um_panic(__FILE__, __LINE__, "out of memory");
    memset(c->shards, 0, nshards * sizeof(struct shard));
    for (unsigned i = 0; i < nshards; i++) {
        struct shard *sh = &c->shards[i];
        pthread_mutex_init(&sh->lock, NULL);
        sh->mask = BUCKETS_INIT - 1;
        sh->acct = um_cache_alloc_size(BUCKETS_INIT * sizeof(struct um_cache_obj *));
        UM_ASSERT(try_charge(c, sh->acct) && "memory_cap too small for the shards' tables");
        sh->buckets = um_calloc(BUCKETS_INIT, sizeof(struct um_cache_obj *));
    }

    pthread_mutex_init(&c->qlock, NULL);
    pthread_mutex_init(&c->clean_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->clean_cond, &ca);
    pthread_condattr_destroy(&ca);
    um__tags_init(c);
    return c;
}

void um_cache_destroy(struct um_cache *c)
{
    um_cache_stop_cleaner(c);
    for (unsigned i = 0; i < (1u << c->shard_bits); i++) {
        struct shard *sh = &c->shards[i];
        struct um_cache_obj *dead = NULL;
        pthread_mutex_lock(&sh->lock);
        for (size_t b = 0; b <= sh->mask; b++) {
            while (sh->buckets[b] != NULL) {
                struct um_cache_obj *o = um__store_shard_take(c, sh, &sh->buckets[b]);
                o->h_next = dead;
                dead = o;
            }
        }
        pthread_mutex_unlock(&sh->lock);
        um__store_free_dead(c, dead);
    }
    UM_ASSERT(atomic_load(&c->nalloc) == 0 && "cache objects still referenced at destroy");
    UM_ASSERT(c->qhead == NULL && c->qlen == 0);
    um__tags_dispose(c);
    for (unsigned i = 0; i < (1u << c->shard_bits); i++) {
        struct shard *sh = &c->shards[i];
        free(sh->buckets);
        uncharge(c, sh->acct);
        pthread_mutex_destroy(&sh->lock);
    }
    UM_ASSERT(atomic_load(&c->used) == 0);
    pthread_mutex_destroy(&c->qlock);
    pthread_mutex_destroy(&c->clean_lock);
    pthread_cond_destroy(&c->clean_cond);
    free(c->shards);
    free(c);
}

struct um_cache_obj *um_cache_lookup(struct um_cache *c, um_str key, um_cache_match_cb match,
                                     void *arg)
{
    uint64_t hash = key_hash(c, key);
    struct shard *sh = shard_of(c, hash);
    pthread_mutex_lock(&sh->lock);
    struct um_cache_obj *o = shard_find(sh, key, hash, match, arg);
    if (o != NULL) atomic_fetch_add_explicit(&o->refcnt, 1, memory_order_relaxed);
    pthread_mutex_unlock(&sh->lock);
    if (o != NULL) mark_hit(o);
    return o;
}

size_t um_cache_variants(struct um_cache *c, um_str key, um_cache_match_cb match, void *arg,
                         struct um_cache_obj **out, size_t max)
{
    uint64_t hash = key_hash(c, key);
    struct shard *sh = shard_of(c, hash);
    size_t n = 0;
    pthread_mutex_lock(&sh->lock);
    for (struct um_cache_obj *o = sh->buckets[hash & sh->mask]; o != NULL && n < max;
         o = o->h_next) {
        if (o->hash != hash || o->key_len != key.len ||
            (key.len > 0 && memcmp(o->key, key.base, key.len) != 0))
            continue;
        if (atomic_load_explicit(&o->state, memory_order_relaxed) == UM_CACHE_ABORTED) continue;
        if (match != NULL && !match(o, arg)) continue;
        atomic_fetch_add_explicit(&o->refcnt, 1, memory_order_relaxed);
        out[n++] = o;
    }
    pthread_mutex_unlock(&sh->lock);
    return n;
}

enum um_cache_result um_cache_lookup_or_insert(struct um_cache *c, um_str key,
                                               um_cache_match_cb match, void *arg, const void *tag,
                                               size_t tag_len, struct um_cache_obj **out)
{
    /* Look first without allocating: hits are the common case. */
    if ((*out = um_cache_lookup(c, key, match, arg)) != NULL) return UM_CACHE_FOUND;
    uint64_t hash = key_hash(c, key);
    /* Allocate (which may evict, and so take shard locks) before taking ours. */
    struct um_cache_obj *n = obj_new(c, key, hash, tag, tag_len);
    if (n == NULL) return UM_CACHE_NOSPACE;
    struct shard *sh = shard_of(c, hash);
    pthread_mutex_lock(&sh->lock);
    struct um_cache_obj *o = shard_find(sh, key, hash, match, arg);
    if (o != NULL) {
        /* Someone inserted it meanwhile: attach to theirs. */
        atomic_fetch_add_explicit(&o->refcnt, 1, memory_order_relaxed);
        pthread_mutex_unlock(&sh->lock);
        mark_hit(o);
        um_cache_obj_unref(n);
        *out = o;
        return UM_CACHE_FOUND;
    }
    bool grew = shard_add(c, sh, n);
    pthread_mutex_unlock(&sh->lock);
    if (grew) kick_if_high(c);
    um__store_queue_add(c, n);
    *out = n;
    return UM_CACHE_CREATED;
}

struct um_cache_obj *um_cache_insert(struct um_cache *c, um_str key, const void *tag,
                                     size_t tag_len)
{
    uint64_t hash = key_hash(c, key);
    struct um_cache_obj *n = obj_new(c, key, hash, tag, tag_len);
    if (n == NULL) return NULL;
    struct shard *sh = shard_of(c, hash);
    pthread_mutex_lock(&sh->lock);
    bool grew = shard_add(c, sh, n);
    pthread_mutex_unlock(&sh->lock);
    if (grew) kick_if_high(c);
    um__store_queue_add(c, n);
    return n;
}

void um_cache_unlink(struct um_cache *c, struct um_cache_obj *o)
{
    UM_ASSERT(o->cache == c);
    um__store_obj_unlink(c, o);
}

void um_cache_set_links(struct um_cache *c, const struct um_cache_links *links)
{
    c->links = *links;
}

void um_cache_set_slice(struct um_cache *c, uint64_t size)
{
    atomic_store_explicit(&c->slice_size, size, memory_order_relaxed);
}

const struct um_cache_links *um_cache_links(const struct um_cache *c)
{
    return &c->links;
}

size_t um_cache_purge(struct um_cache *c, um_str key)
{
    um_disk_tier_purge_key(c->links.disk, key);
    uint64_t hash = key_hash(c, key);
    struct shard *sh = shard_of(c, hash);
    struct um_cache_obj *dead = NULL;
    size_t n = 0;
    pthread_mutex_lock(&sh->lock);
    struct um_cache_obj **pp = &sh->buckets[hash & sh->mask];
    while (*pp != NULL) {
        struct um_cache_obj *o = *pp;
        if (o->hash == hash && o->key_len == key.len &&
            (key.len == 0 || memcmp(o->key, key.base, key.len) == 0)) {
            um__store_shard_take(c, sh, pp);
            o->h_next = dead;
            dead = o;
            n++;
        } else {
            pp = &o->h_next;
        }
    }
    pthread_mutex_unlock(&sh->lock);
    um__store_free_dead(c, dead);
    return n;
}

size_t um_cache_memory_used(const struct um_cache *c)
{
    return atomic_load_explicit(&c->used, memory_order_relaxed);
}

size_t um_cache_object_count(const struct um_cache *c)
{
    return atomic_load_explicit(&c->nlinked, memory_order_relaxed);
}

uint64_t um_cache_evictions(const struct um_cache *c)
{
    return atomic_load_explicit(&c->evictions, memory_order_relaxed);
}

void um_cache_stats(const struct um_cache *c, struct um_cache_stats *st)
{
    st->memory_cap = c->cap;
    st->memory_used = atomic_load_explicit(&c->used, memory_order_relaxed);
    st->high_water = c->high;
    st->low_water = c->low;
    st->objects = atomic_load_explicit(&c->nlinked, memory_order_relaxed);
    st->objects_allocated = atomic_load_explicit(&c->nalloc, memory_order_relaxed);
    st->evictions = atomic_load_explicit(&c->evictions, memory_order_relaxed);
    st->expired = atomic_load_explicit(&c->expired, memory_order_relaxed);
    st->aborted = atomic_load_explicit(&c->aborted, memory_order_relaxed);
    st->nospace = atomic_load_explicit(&c->nospace, memory_order_relaxed);
}
