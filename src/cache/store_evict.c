/* SPDX-License-Identifier: BSD-2-Clause */
/* The store's memory and eviction (see store.c for the index and the lock order).
 *
 * Design note
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
 * Eviction: SIEVE (Zhang et al., NSDI'24). One global FIFO queue, newest at the head. A
 * hit sets the object's visited bit with a relaxed store (after checking it is not set
 * already, so hot objects do not bounce a cache line). The hand moves from the tail
 * towards the head: a visited object loses its bit and stays; the first unvisited one is
 * evicted; the hand then rests on the next newer object and wraps to the tail at the head.
 * Objects that are FILLING or referenced by someone besides the index are stepped over
 * (their visited bit untouched): unlinking them would free nothing now and lose a hit. The
 * queue lock is taken by inserts (misses), unlinks and eviction, never by a hit. Lock
 * order: shard lock, then queue lock; the eviction path holds the queue lock alone, picks
 * a victim, takes a reference, drops the lock and only then takes the victim's shard lock. */
#include "store_internal.h"

#include <stdlib.h>

/* ---- Memory ---------------------------------------------------------------------------- */

size_t um_cache_alloc_size(size_t n)
{
    size_t s = (n + 8 + 15) & ~(size_t)15;
    return s < 32 ? 32 : s;
}

/* Charges n bytes, evicting synchronously when the cap is in the way. The caller holds no
 * store lock (eviction takes them). */
bool um__store_charge(struct um_cache *c, size_t n)
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
    if (atomic_load_explicit(&c->used, memory_order_relaxed) > c->high) um__store_kick_cleaner(c);
    return true;
}

/* ---- The eviction queue ---------------------------------------------------------------- */

void um__store_queue_add(struct um_cache *c, struct um_cache_obj *o)
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

void um__store_queue_remove(struct um_cache *c, struct um_cache_obj *o)
{
    pthread_mutex_lock(&c->qlock);
    queue_remove_locked(c, o);
    pthread_mutex_unlock(&c->qlock);
}

/* ---- Eviction ------------------------------------------------------------------------------ */

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
    if (um__store_index_remove(c, v)) {
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
