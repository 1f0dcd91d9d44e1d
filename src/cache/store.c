/* The shared cache store: a sharded index, a SIEVE eviction queue, a hard memory cap,
 * append-only chunked bodies that readers stream while they are being filled, and
 * one-shot waiters woken on the filler's thread.
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
 * Eviction: SIEVE (Zhang et al., NSDI'24). One global FIFO queue, newest at the head. A
 * hit sets the object's visited bit with a relaxed store (after checking it is not set
 * already, so hot objects do not bounce a cache line). The hand moves from the tail
 * towards the head: a visited object loses its bit and stays; the first unvisited one is
 * evicted; the hand then rests on the next newer object and wraps to the tail at the head.
 * Objects that are FILLING or referenced by someone besides the index are stepped over
 * (their visited bit untouched): unlinking them would free nothing now and lose a hit. The
 * queue lock is taken by inserts (misses), unlinks and eviction, never by a hit. Lock
 * order: shard lock, then queue lock; the eviction path holds the queue lock alone, picks
 * a victim, takes a reference, drops the lock and only then takes the victim's shard lock.
 *
 * Memory. Every allocation that grows with content is charged to one atomic counter
 * before it is made, with a compare-and-swap that refuses to pass the cap; the charge is
 * glibc's chunk size for the request (um_cache_alloc_size). A charge that fails evicts
 * synchronously down to the low-water mark and tries again; when eviction cannot make
 * room the allocation fails and the object being filled is aborted. Memory is given back
 * when an object is freed (its last reference) or a chunk is (its last object). Passing
 * the high-water mark wakes the cleaner thread to evict in the background, so that
 * fillers rarely evict on their own thread.
 *
 * Bodies. A list of chunks. A chunk is filled completely before the next is linked, so a
 * reader locates bytes from chunk capacities alone. The filler writes bytes, then links a
 * new chunk if any, then publishes the body length with a release store; readers load it
 * with acquire and never look past it (not even at a chunk's next pointer). Chunk sizes
 * grow geometrically (the size of the body so far, at least the bytes being appended),
 * from 64 bytes for a small body to 64 KiB (exactly one 64 KiB malloc chunk); when the
 * filler announced the length, the chunk fits it. Chunks are reference-counted so that a
 * revalidated object can share its predecessor's body (um_cache_obj_adopt_body).
 *
 * Progress and waiters. Each object has a progress count, bumped (seq_cst) after every
 * set_head, append and state change. A reader's cursor remembers the count it last saw.
 * Registering a waiter adds it under the object's waiter lock, bumps the waiter count
 * (seq_cst) and then re-reads the progress: if it moved, the registration is undone and
 * the reader looks again. The filler bumps the progress and then reads the waiter count;
 * by the single total order of seq_cst operations at least one side sees the other, so
 * a wake-up is never lost, and a filler with no waiters takes no lock. Waking moves all
 * waiters to a firing list and calls them one at a time with the lock released; each
 * waiter counts the calls in flight, and unwait spins (yielding) until they finish. */
#include "umbra/cache.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>
#include <time.h>

#define CACHELINE 64
#define BUCKETS_INIT 8
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
    struct um_cache_waiter *waiting, *firing;

    size_t key_len;
    char key[];
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
};

static void obj_unlink(struct um_cache *c, struct um_cache_obj *o);
static int evict_one(struct um_cache *c);

/* ---- Hashing -------------------------------------------------------------------------- */

static uint64_t rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = rotl(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = rotl(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = rotl(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = rotl(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = rotl(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = rotl(v2, 32);                                                                         \
    } while (0)

static uint64_t load_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* SipHash-1-3: fast enough for short keys, and keyed, so a client cannot aim many keys at
 * one chain. */
static uint64_t siphash13(const uint64_t k[2], const void *data, size_t len)
{
    const unsigned char *in = data;
    uint64_t v0 = 0x736f6d6570736575ULL ^ k[0], v1 = 0x646f72616e646f6dULL ^ k[1];
    uint64_t v2 = 0x6c7967656e657261ULL ^ k[0], v3 = 0x7465646279746573ULL ^ k[1];
    uint64_t b = (uint64_t)len << 56;
    size_t full = len - len % 8;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m = load_le64(in + i);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    for (size_t i = 0; i < len % 8; i++)
        b |= (uint64_t)in[full + i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static uint64_t key_hash(const struct um_cache *c, um_str key)
{
    return siphash13(c->sipkey, key.base, key.len);
}

static struct shard *shard_of(struct um_cache *c, uint64_t hash)
{
    return &c->shards[c->shard_bits == 0 ? 0 : hash >> (64 - c->shard_bits)];
}

/* ---- Memory ---------------------------------------------------------------------------- */

size_t um_cache_alloc_size(size_t n)
{
    size_t s = (n + 8 + 15) & ~(size_t)15;
    return s < 32 ? 32 : s;
}

static bool try_charge(struct um_cache *c, size_t n)
{
    size_t u = atomic_load_explicit(&c->used, memory_order_relaxed);
    do {
        if (n > c->cap || u > c->cap - n) return false;
    } while (!atomic_compare_exchange_weak_explicit(&c->used, &u, u + n, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

static void uncharge(struct um_cache *c, size_t n)
{
    size_t old = atomic_fetch_sub_explicit(&c->used, n, memory_order_relaxed);
    UM_ASSERT(old >= n);
}

static void kick_cleaner(struct um_cache *c)
{
    if (atomic_exchange_explicit(&c->kick_pending, true, memory_order_relaxed)) return;
    pthread_mutex_lock(&c->clean_lock);
    c->clean_kick = true;
    pthread_cond_signal(&c->clean_cond);
    pthread_mutex_unlock(&c->clean_lock);
}

/* Charges n bytes, evicting synchronously when the cap is in the way. The caller holds no
 * store lock (eviction takes them). */
static bool charge(struct um_cache *c, size_t n)
{
    if (!try_charge(c, n)) {
        for (int tries = 0;; tries++) {
            size_t target = c->low > n ? c->low - n : 0;
            size_t evicted = um_cache_evict_to(c, target);
            if (try_charge(c, n)) break;
            /* Nothing evictable, or others keep taking what we free. */
            if (evicted == 0 || tries == 3) {
                atomic_fetch_add_explicit(&c->nospace, 1, memory_order_relaxed);
                return false;
            }
        }
    }
    if (atomic_load_explicit(&c->used, memory_order_relaxed) > c->high) kick_cleaner(c);
    return true;
}

/* ---- Chunks ---------------------------------------------------------------------------- */

/* A chunk with room for about want bytes (more when the allocation rounds up), or NULL
 * when memory cannot be found. */
static struct um_cache_chunk *chunk_new(struct um_cache *c, size_t want)
{
    if (want < CHUNK_DATA_MIN) want = CHUNK_DATA_MIN;
    if (want > CHUNK_DATA_MAX) want = CHUNK_DATA_MAX;
    size_t acct = um_cache_alloc_size(CHUNK_HDR + want);
    size_t cap = acct - 8 - CHUNK_HDR; /* what that malloc chunk really holds */
    if (!charge(c, acct)) return NULL;
    struct um_cache_chunk *ch = um_malloc(CHUNK_HDR + cap);
    ch->next = NULL;
    atomic_init(&ch->refcnt, 1);
    ch->cap = (uint32_t)cap;
    ch->acct = acct;
    return ch;
}

static void chunk_unref(struct um_cache *c, struct um_cache_chunk *ch)
{
    unsigned old = atomic_fetch_sub_explicit(&ch->refcnt, 1, memory_order_acq_rel);
    UM_ASSERT(old > 0 && "cache chunk reference count below zero");
    if (old == 1) {
        uncharge(c, ch->acct);
        free(ch);
    }
}

/* ---- Objects --------------------------------------------------------------------------- */

static struct um_cache_obj *obj_new(struct um_cache *c, um_str key, uint64_t hash, const void *tag,
                                    size_t tag_len)
{
    size_t acct = um_cache_alloc_size(sizeof(struct um_cache_obj) + key.len);
    size_t tag_acct = tag_len > 0 ? um_cache_alloc_size(tag_len) : 0;
    if (!charge(c, acct + tag_acct)) return NULL;
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

um_str um_cache_obj_key(const struct um_cache_obj *o)
{
    return (um_str){o->key, o->key_len};
}

um_str um_cache_obj_tag(const struct um_cache_obj *o)
{
    return (um_str){o->tag, o->tag_len};
}

enum um_cache_state um_cache_obj_state(const struct um_cache_obj *o)
{
    return (enum um_cache_state)atomic_load_explicit(&o->state, memory_order_acquire);
}

bool um_cache_obj_linked(const struct um_cache_obj *o)
{
    return atomic_load_explicit(&o->linked, memory_order_relaxed);
}

bool um_cache_obj_head(const struct um_cache_obj *o, um_str *meta, um_str *head)
{
    if (!atomic_load_explicit(&o->head_ready, memory_order_acquire)) return false;
    if (meta != NULL) *meta = (um_str){o->headblk, o->meta_len};
    if (head != NULL) *head = (um_str){o->headblk + o->head_off, o->head_len};
    return true;
}

size_t um_cache_obj_body_len(const struct um_cache_obj *o)
{
    return atomic_load_explicit(&o->body_len, memory_order_acquire);
}

void um_cache_obj_set_expires(struct um_cache_obj *o, int64_t t)
{
    atomic_store_explicit(&o->expires, t, memory_order_relaxed);
}

int64_t um_cache_obj_expires(const struct um_cache_obj *o)
{
    return atomic_load_explicit(&o->expires, memory_order_relaxed);
}

void um_cache_obj_set_stale_until(struct um_cache_obj *o, int64_t t)
{
    atomic_store_explicit(&o->stale_until, t, memory_order_relaxed);
}

int64_t um_cache_obj_stale_until(const struct um_cache_obj *o)
{
    return atomic_load_explicit(&o->stale_until, memory_order_relaxed);
}

/* ---- The eviction queue ---------------------------------------------------------------- */

static void queue_add(struct um_cache *c, struct um_cache_obj *o)
{
    pthread_mutex_lock(&c->qlock);
    /* An unlink may have come between the index insert and here. */
    if (o->q_state == Q_NEW) {
        o->q_state = Q_QUEUED;
        o->q_older = c->qhead;
        o->q_newer = NULL;
        if (c->qhead != NULL)
            c->qhead->q_newer = o;
        else
            c->qtail = o;
        c->qhead = o;
        c->qlen++;
    }
    pthread_mutex_unlock(&c->qlock);
}

/* Under the queue lock. */
static void queue_remove_locked(struct um_cache *c, struct um_cache_obj *o)
{
    if (o->q_state == Q_QUEUED) {
        if (c->hand == o) c->hand = o->q_newer;
        if (o->q_newer != NULL)
            o->q_newer->q_older = o->q_older;
        else
            c->qhead = o->q_older;
        if (o->q_older != NULL)
            o->q_older->q_newer = o->q_newer;
        else
            c->qtail = o->q_newer;
        o->q_newer = o->q_older = NULL;
        c->qlen--;
    }
    o->q_state = Q_GONE;
}

static void queue_remove(struct um_cache *c, struct um_cache_obj *o)
{
    pthread_mutex_lock(&c->qlock);
    queue_remove_locked(c, o);
    pthread_mutex_unlock(&c->qlock);
}

/* ---- The index ------------------------------------------------------------------------- */

/* Under the shard lock. Doubles the table when memory allows (without evicting: we hold a
 * shard lock); a table that cannot grow just has longer chains. Keeps chain order. */
static void shard_grow(struct um_cache *c, struct shard *sh)
{
    size_t oldn = sh->mask + 1, n = oldn * 2;
    size_t acct = um_cache_alloc_size(n * sizeof(struct um_cache_obj *));
    if (!try_charge(c, acct)) return;
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

/* Under the shard lock: links o at the front of its chain; the index takes a reference. */
static void shard_add(struct um_cache *c, struct shard *sh, struct um_cache_obj *o)
{
    if (sh->count > sh->mask) shard_grow(c, sh);
    struct um_cache_obj **b = &sh->buckets[o->hash & sh->mask];
    o->h_next = *b;
    *b = o;
    sh->count++;
    atomic_fetch_add_explicit(&o->refcnt, 1, memory_order_relaxed);
    atomic_store_explicit(&o->linked, true, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->nlinked, 1, memory_order_relaxed);
}

/* Under the shard lock: takes *pp (a linked object) out of its chain. The index's
 * reference now belongs to the caller, who must remove it from the queue and unref it. */
static struct um_cache_obj *shard_take(struct um_cache *c, struct shard *sh,
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
static bool index_remove(struct um_cache *c, struct um_cache_obj *o)
{
    struct shard *sh = shard_of(c, o->hash);
    bool found = false;
    pthread_mutex_lock(&sh->lock);
    if (atomic_load_explicit(&o->linked, memory_order_relaxed)) {
        struct um_cache_obj **pp = &sh->buckets[o->hash & sh->mask];
        while (*pp != o)
            pp = &(*pp)->h_next;
        shard_take(c, sh, pp);
        found = true;
    }
    pthread_mutex_unlock(&sh->lock);
    return found;
}

static void obj_unlink(struct um_cache *c, struct um_cache_obj *o)
{
    if (index_remove(c, o)) {
        queue_remove(c, o);
        um_cache_obj_unref(o);
    }
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
                struct um_cache_obj *o = shard_take(c, sh, &sh->buckets[b]);
                o->h_next = dead;
                dead = o;
            }
        }
        pthread_mutex_unlock(&sh->lock);
        while (dead != NULL) {
            struct um_cache_obj *o = dead;
            dead = o->h_next;
            queue_remove(c, o);
            um_cache_obj_unref(o);
        }
    }
    UM_ASSERT(atomic_load(&c->nalloc) == 0 && "cache objects still referenced at destroy");
    UM_ASSERT(c->qhead == NULL && c->qlen == 0);
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
    shard_add(c, sh, n);
    pthread_mutex_unlock(&sh->lock);
    queue_add(c, n);
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
    shard_add(c, sh, n);
    pthread_mutex_unlock(&sh->lock);
    queue_add(c, n);
    return n;
}

void um_cache_unlink(struct um_cache *c, struct um_cache_obj *o)
{
    UM_ASSERT(o->cache == c);
    obj_unlink(c, o);
}

size_t um_cache_purge(struct um_cache *c, um_str key)
{
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
            shard_take(c, sh, pp);
            o->h_next = dead;
            dead = o;
            n++;
        } else {
            pp = &o->h_next;
        }
    }
    pthread_mutex_unlock(&sh->lock);
    while (dead != NULL) {
        struct um_cache_obj *o = dead;
        dead = o->h_next;
        queue_remove(c, o);
        um_cache_obj_unref(o);
    }
    return n;
}

/* ---- Eviction and expiry ------------------------------------------------------------------ */

/* Whether unlinking o now would free nothing: its filler or a reader holds it. */
static bool busy(const struct um_cache_obj *o)
{
    return atomic_load_explicit(&o->state, memory_order_relaxed) == UM_CACHE_FILLING ||
           atomic_load_explicit(&o->refcnt, memory_order_relaxed) > 1;
}

/* One SIEVE step. Returns 1 when it unlinked an object, 0 when the victim it picked was
 * unlinked by someone else meanwhile, -1 when nothing can be evicted. */
static int evict_one(struct um_cache *c)
{
    struct um_cache_obj *v = NULL;
    pthread_mutex_lock(&c->qlock);
    struct um_cache_obj *o = c->hand != NULL ? c->hand : c->qtail;
    /* Two passes are enough: the first clears every visited bit it meets. */
    for (size_t steps = 0, max = 2 * c->qlen + 1; o != NULL && steps < max; steps++) {
        if (!busy(o)) {
            if (c->o.fifo || !atomic_load_explicit(&o->visited, memory_order_relaxed)) {
                v = o;
                break;
            }
            atomic_store_explicit(&o->visited, 0, memory_order_relaxed);
        }
        o = o->q_newer != NULL ? o->q_newer : c->qtail;
    }
    if (v == NULL) {
        c->hand = o;
        pthread_mutex_unlock(&c->qlock);
        return -1;
    }
    c->hand = v;
    queue_remove_locked(c, v); /* moves the hand on to the next newer object */
    /* Safe: v was queued, so the index still holds its reference. */
    atomic_fetch_add_explicit(&v->refcnt, 1, memory_order_relaxed);
    pthread_mutex_unlock(&c->qlock);

    int ret = 0;
    if (index_remove(c, v)) {
        atomic_fetch_add_explicit(&c->evictions, 1, memory_order_relaxed);
        um_cache_obj_unref(v); /* the index's */
        ret = 1;
    }
    um_cache_obj_unref(v);
    return ret;
}

size_t um_cache_evict_to(struct um_cache *c, size_t target)
{
    size_t n = 0;
    int r;
    while (atomic_load_explicit(&c->used, memory_order_relaxed) > target && (r = evict_one(c)) >= 0)
        n += (size_t)r;
    return n;
}

size_t um_cache_clean_now(struct um_cache *c)
{
    int64_t now = c->o.now(c->o.now_arg);
    size_t n = 0;
    for (unsigned i = 0; i < (1u << c->shard_bits); i++) {
        struct shard *sh = &c->shards[i];
        struct um_cache_obj *dead = NULL;
        pthread_mutex_lock(&sh->lock);
        for (size_t b = 0; b <= sh->mask; b++) {
            struct um_cache_obj **pp = &sh->buckets[b];
            while (*pp != NULL) {
                struct um_cache_obj *o = *pp;
                if (atomic_load_explicit(&o->state, memory_order_relaxed) != UM_CACHE_FILLING &&
                    atomic_load_explicit(&o->stale_until, memory_order_relaxed) <= now) {
                    shard_take(c, sh, pp);
                    o->h_next = dead;
                    dead = o;
                } else {
                    pp = &o->h_next;
                }
            }
            /* Let lookups in between on a large shard. The table may grow meanwhile: the
             * sweep may then see some objects twice or not at all, which is harmless. */
            if ((b & 255) == 255) {
                pthread_mutex_unlock(&sh->lock);
                pthread_mutex_lock(&sh->lock);
            }
        }
        pthread_mutex_unlock(&sh->lock);
        while (dead != NULL) {
            struct um_cache_obj *o = dead;
            dead = o->h_next;
            queue_remove(c, o);
            um_cache_obj_unref(o);
            n++;
        }
    }
    atomic_fetch_add_explicit(&c->expired, n, memory_order_relaxed);
    return n;
}

static void *cleaner_main(void *arg)
{
    struct um_cache *c = arg;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    next.tv_sec += c->o.clean_interval;
    pthread_mutex_lock(&c->clean_lock);
    while (!c->clean_stop) {
        if (!c->clean_kick && pthread_cond_timedwait(&c->clean_cond, &c->clean_lock, &next) == 0 &&
            !c->clean_kick)
            continue; /* spurious, or stop */
        if (c->clean_stop) break;
        c->clean_kick = false;
        pthread_mutex_unlock(&c->clean_lock);

        /* Re-arm before looking, so that a kick during the work is not lost. */
        atomic_store_explicit(&c->kick_pending, false, memory_order_relaxed);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > next.tv_sec ||
            (now.tv_sec == next.tv_sec && now.tv_nsec >= next.tv_nsec)) {
            um_cache_clean_now(c);
            next = now;
            next.tv_sec += c->o.clean_interval;
        }
        if (atomic_load_explicit(&c->used, memory_order_relaxed) > c->high)
            um_cache_evict_to(c, c->low);

        pthread_mutex_lock(&c->clean_lock);
    }
    pthread_mutex_unlock(&c->clean_lock);
    return NULL;
}

void um_cache_start_cleaner(struct um_cache *c)
{
    pthread_mutex_lock(&c->clean_lock);
    UM_ASSERT(!c->clean_running);
    c->clean_stop = false;
    c->clean_kick = true; /* look at memory once right away */
    c->clean_running = true;
    pthread_mutex_unlock(&c->clean_lock);
    /* The cleaner takes no signals: it starts before the main thread blocks SIGTERM and
     * friends for its signalfd, and a process-directed signal goes to any thread that does
     * not block it (SIGTERM used to kill the process here instead of stopping it). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->clean_thread, NULL, cleaner_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    UM_ASSERT(rc == 0);
}

void um_cache_stop_cleaner(struct um_cache *c)
{
    pthread_mutex_lock(&c->clean_lock);
    if (!c->clean_running) {
        pthread_mutex_unlock(&c->clean_lock);
        return;
    }
    c->clean_stop = true;
    pthread_cond_signal(&c->clean_cond);
    pthread_mutex_unlock(&c->clean_lock);
    pthread_join(c->clean_thread, NULL);
    pthread_mutex_lock(&c->clean_lock);
    c->clean_running = false;
    pthread_mutex_unlock(&c->clean_lock);
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

/* ---- Progress and waiters --------------------------------------------------------------- */

static void wlist_push(struct um_cache_waiter **head, struct um_cache_waiter *w)
{
    w->_prev = NULL;
    w->_next = *head;
    if (*head != NULL) (*head)->_prev = w;
    *head = w;
}

static void wlist_remove(struct um_cache_waiter **head, struct um_cache_waiter *w)
{
    if (w->_prev != NULL)
        w->_prev->_next = w->_next;
    else
        *head = w->_next;
    if (w->_next != NULL) w->_next->_prev = w->_prev;
    w->_next = w->_prev = NULL;
}

/* Calls every registered waiter once, on this thread, with no lock held during a call. */
static void notify(struct um_cache_obj *o)
{
    struct um_cache_waiter *w;
    pthread_mutex_lock(&o->wlock);
    while ((w = o->waiting) != NULL) {
        wlist_remove(&o->waiting, w);
        atomic_fetch_sub(&o->nwaiters, 1);
        wlist_push(&o->firing, w);
        w->_list = W_FIRING;
    }
    while ((w = o->firing) != NULL) {
        wlist_remove(&o->firing, w);
        w->_list = W_NONE;
        w->_running++;
        w->_runner = pthread_self();
        pthread_mutex_unlock(&o->wlock);
        w->on_progress(w);
        pthread_mutex_lock(&o->wlock);
        /* w is still valid: its owner's unwait waits for this. */
        w->_running--;
    }
    pthread_mutex_unlock(&o->wlock);
}

/* After every change a reader could wait for. */
static void bump(struct um_cache_obj *o)
{
    atomic_fetch_add(&o->progress, 1); /* seq_cst: pairs with um_cache_obj_wait */
    if (atomic_load(&o->nwaiters) != 0) notify(o);
}

void um_cache_waiter_init(struct um_cache_waiter *w, um_cache_progress_cb on_progress)
{
    memset(w, 0, sizeof(*w));
    w->on_progress = on_progress;
}

bool um_cache_obj_wait(struct um_cache_obj *o, struct um_cache_cursor *cur,
                       struct um_cache_waiter *w)
{
    UM_ASSERT(cur->_obj == o);
    pthread_mutex_lock(&o->wlock);
    if (w->_list != W_NONE) {
        /* Already waiting, or about to be called: either way a call is coming. */
        UM_ASSERT(w->_obj == o);
        pthread_mutex_unlock(&o->wlock);
        return true;
    }
    w->_obj = o;
    wlist_push(&o->waiting, w);
    w->_list = W_WAITING;
    atomic_fetch_add(&o->nwaiters, 1); /* seq_cst, then read the progress: see bump */
    uint64_t p = atomic_load(&o->progress);
    if (p != cur->_seen ||
        atomic_load_explicit(&o->state, memory_order_acquire) != UM_CACHE_FILLING) {
        wlist_remove(&o->waiting, w);
        w->_list = W_NONE;
        atomic_fetch_sub(&o->nwaiters, 1);
        cur->_seen = p;
        pthread_mutex_unlock(&o->wlock);
        return false;
    }
    pthread_mutex_unlock(&o->wlock);
    return true;
}

void um_cache_obj_unwait(struct um_cache_obj *o, struct um_cache_waiter *w)
{
    pthread_mutex_lock(&o->wlock);
    if (w->_list == W_WAITING && w->_obj == o) {
        wlist_remove(&o->waiting, w);
        atomic_fetch_sub(&o->nwaiters, 1);
    } else if (w->_list == W_FIRING && w->_obj == o) {
        wlist_remove(&o->firing, w);
    }
    w->_list = W_NONE;
    /* A call already under way finishes first (the filler only holds the lock between
     * calls, so this is short); from inside the callback itself there is nothing to wait
     * for. */
    while (w->_running > 0 && !pthread_equal(w->_runner, pthread_self())) {
        pthread_mutex_unlock(&o->wlock);
        sched_yield();
        pthread_mutex_lock(&o->wlock);
    }
    pthread_mutex_unlock(&o->wlock);
}

/* ---- Filling -------------------------------------------------------------------------------- */

static bool filling(const struct um_cache_obj *o)
{
    return atomic_load_explicit(&o->state, memory_order_relaxed) == UM_CACHE_FILLING;
}

static void obj_abort(struct um_cache_obj *o)
{
    struct um_cache *c = o->cache;
    atomic_store_explicit(&o->state, UM_CACHE_ABORTED, memory_order_release);
    atomic_fetch_add_explicit(&c->aborted, 1, memory_order_relaxed);
    obj_unlink(c, o);
    bump(o);
}

int um_cache_obj_set_tag(struct um_cache_obj *o, const void *tag, size_t tag_len)
{
    struct um_cache *c = o->cache;
    if (!filling(o)) return UM_ERR;
    UM_ASSERT(!atomic_load_explicit(&o->head_ready, memory_order_relaxed));
    size_t acct = tag_len > 0 ? um_cache_alloc_size(tag_len) : 0;
    if (acct > 0 && !charge(c, acct)) {
        obj_abort(o);
        return UM_ERR;
    }
    char *nt = NULL;
    if (tag_len > 0) {
        nt = um_malloc(tag_len);
        memcpy(nt, tag, tag_len);
    }
    struct shard *sh = shard_of(c, o->hash);
    pthread_mutex_lock(&sh->lock);
    char *old = o->tag;
    size_t old_acct = o->tag_acct;
    o->tag = nt;
    o->tag_len = tag_len;
    o->tag_acct = acct;
    pthread_mutex_unlock(&sh->lock);
    free(old);
    uncharge(c, old_acct);
    return UM_OK;
}

int um_cache_obj_expect(struct um_cache_obj *o, size_t body_len)
{
    if (!filling(o)) return UM_ERR;
    if (body_len > o->cache->max_object) {
        obj_abort(o);
        return UM_ERR;
    }
    o->expect = body_len;
    return UM_OK;
}

int um_cache_obj_set_head(struct um_cache_obj *o, const void *meta, size_t meta_len,
                          const char *head, size_t head_len)
{
    struct um_cache *c = o->cache;
    if (!filling(o)) return UM_ERR;
    UM_ASSERT(!atomic_load_explicit(&o->head_ready, memory_order_relaxed) &&
              "cache object head set twice");
    size_t head_off = (meta_len + 15) & ~(size_t)15;
    size_t n = head_off + head_len;
    size_t acct = um_cache_alloc_size(n);
    if (!charge(c, acct)) {
        obj_abort(o);
        return UM_ERR;
    }
    char *blk = um_malloc(n);
    if (meta_len > 0) memcpy(blk, meta, meta_len);
    if (head_len > 0) memcpy(blk + head_off, head, head_len);
    o->headblk = blk;
    o->meta_len = meta_len;
    o->head_off = head_off;
    o->head_len = head_len;
    o->head_acct = acct;
    atomic_store_explicit(&o->head_ready, true, memory_order_release);
    bump(o);
    return UM_OK;
}

int um_cache_obj_append(struct um_cache_obj *o, const void *data, size_t len)
{
    struct um_cache *c = o->cache;
    if (!filling(o)) return UM_ERR;
    UM_ASSERT(atomic_load_explicit(&o->head_ready, memory_order_relaxed) &&
              "cache object body appended before its head");
    UM_ASSERT(!o->adopted);
    size_t blen = atomic_load_explicit(&o->body_len, memory_order_relaxed);
    if (len > c->max_object - blen) {
        obj_abort(o);
        return UM_ERR;
    }
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        size_t room = o->last != NULL ? o->last_start + o->last->cap - blen : 0;
        if (room == 0) {
            /* Geometric growth: few chunks for a body that trickles in, one small chunk for
             * a small body, an exact fit when the length was announced. */
            size_t want = o->expect > blen ? o->expect - blen : (left > blen ? left : blen);
            struct um_cache_chunk *ch = chunk_new(c, want);
            if (ch == NULL) {
                obj_abort(o);
                return UM_ERR;
            }
            /* Readers do not look at these two before the bytes are published. */
            if (o->last != NULL) {
                o->last_start += o->last->cap;
                o->last->next = ch;
            } else {
                o->first = ch;
            }
            o->last = ch;
            room = ch->cap;
        }
        size_t n = left < room ? left : room;
        memcpy(o->last->data + (blen - o->last_start), p, n);
        p += n;
        left -= n;
        blen += n;
    }
    atomic_store_explicit(&o->body_len, blen, memory_order_release);
    bump(o);
    return UM_OK;
}

int um_cache_obj_adopt_body(struct um_cache_obj *o, const struct um_cache_obj *from)
{
    if (!filling(o)) return UM_ERR;
    UM_ASSERT(o->first == NULL && atomic_load_explicit(&o->body_len, memory_order_relaxed) == 0);
    UM_ASSERT(um_cache_obj_state(from) == UM_CACHE_COMPLETE);
    for (struct um_cache_chunk *ch = from->first; ch != NULL; ch = ch->next)
        atomic_fetch_add_explicit(&ch->refcnt, 1, memory_order_relaxed);
    o->first = from->first;
    o->adopted = true;
    atomic_store_explicit(&o->body_len, um_cache_obj_body_len(from), memory_order_release);
    bump(o);
    return UM_OK;
}

void um_cache_obj_finish(struct um_cache_obj *o, bool ok)
{
    if (!filling(o)) return;
    if (!ok) {
        obj_abort(o);
        return;
    }
    UM_ASSERT(atomic_load_explicit(&o->head_ready, memory_order_relaxed) &&
              "cache object completed without a head");
    atomic_store_explicit(&o->state, UM_CACHE_COMPLETE, memory_order_release);
    bump(o);
}

/* ---- Reading -------------------------------------------------------------------------------- */

void um_cache_cursor_init(struct um_cache_cursor *cur, const struct um_cache_obj *o)
{
    cur->off = 0;
    cur->_obj = o;
    cur->_chunk = NULL;
    cur->_chunk_start = 0;
    cur->_avail = 0;
    cur->_seen = atomic_load(&((struct um_cache_obj *)o)->progress);
}

size_t um_cache_obj_read(const struct um_cache_obj *o, struct um_cache_cursor *cur,
                         struct iovec *iov, size_t max_iov, bool *complete)
{
    UM_ASSERT(cur->_obj == o);
    /* In this order: whatever the progress count covers, the loads below see. */
    cur->_seen = atomic_load(&((struct um_cache_obj *)o)->progress);
    int st = atomic_load_explicit(&o->state, memory_order_acquire);
    size_t blen = atomic_load_explicit(&o->body_len, memory_order_acquire);
    size_t pos = cur->off, n = 0;
    UM_ASSERT(pos <= blen);
    if (pos < blen && max_iov > 0) {
        const struct um_cache_chunk *ch = cur->_chunk;
        size_t start = cur->_chunk_start;
        if (ch == NULL) {
            ch = o->first;
            start = 0;
        }
        /* The chunk holding pos is published since pos < blen. */
        while (pos >= start + ch->cap) {
            start += ch->cap;
            ch = ch->next;
        }
        cur->_chunk = ch;
        cur->_chunk_start = start;
        while (n < max_iov && pos < blen) {
            size_t in = pos - start;
            size_t take = ch->cap - in;
            if (take > blen - pos) take = blen - pos;
            iov[n].iov_base = (void *)(ch->data + in);
            iov[n].iov_len = take;
            n++;
            pos += take;
            if (pos == start + ch->cap && pos < blen) {
                start += ch->cap;
                ch = ch->next;
            }
        }
    }
    cur->_avail = pos;
    if (complete != NULL) *complete = st == UM_CACHE_COMPLETE && pos == blen;
    return n;
}

void um_cache_cursor_advance(struct um_cache_cursor *cur, size_t n)
{
    UM_ASSERT(n <= cur->_avail - cur->off && "cache cursor advanced past what was read");
    cur->off += n;
}
