/* SPDX-License-Identifier: BSD-2-Clause */
/* The store's objects: chunked bodies, filling, reading, and waiting for progress (see
 * store.c for the index, the lock order and the objects' references, store_evict.c for
 * memory).
 *
 * Design note
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
#include "store_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* ---- Chunks ---------------------------------------------------------------------------- */

/* A chunk with room for about want bytes (more when the allocation rounds up), or NULL
 * when memory cannot be found. */
static struct um_cache_chunk *chunk_new(struct um_cache *c, size_t want)
{
    if (want < CHUNK_DATA_MIN) want = CHUNK_DATA_MIN;
    if (want > CHUNK_DATA_MAX) want = CHUNK_DATA_MAX;
    size_t acct = um_cache_alloc_size(CHUNK_HDR + want);
    size_t cap = acct - 8 - CHUNK_HDR; /* what that malloc chunk really holds */
    if (!um__store_charge(c, acct)) return NULL;
    struct um_cache_chunk *ch = um_malloc(CHUNK_HDR + cap);
    ch->next = NULL;
    atomic_init(&ch->refcnt, 1);
    ch->cap = (uint32_t)cap;
    ch->acct = acct;
    return ch;
}

/* ---- Objects --------------------------------------------------------------------------- */

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

/* Takes the waiter lock and counts it (a plain store: only holders of the lock write). */
static void wlock_take(struct um_cache_obj *o)
{
    pthread_mutex_lock(&o->wlock);
    atomic_store_explicit(&o->wlock_taken,
                          atomic_load_explicit(&o->wlock_taken, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

unsigned long um_cache_obj_waiter_locks(const struct um_cache_obj *o)
{
    return atomic_load_explicit(&o->wlock_taken, memory_order_relaxed);
}

/* Calls every registered waiter once, on this thread, with no lock held during a call. */
static void notify(struct um_cache_obj *o)
{
    struct um_cache_waiter *w;
    wlock_take(o);
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
        wlock_take(o);
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
    wlock_take(o);
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
    wlock_take(o);
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
        wlock_take(o);
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
    um__store_obj_unlink(c, o);
    bump(o);
}

int um_cache_obj_set_tag(struct um_cache_obj *o, const void *tag, size_t tag_len)
{
    struct um_cache *c = o->cache;
    if (!filling(o)) return UM_ERR;
    UM_ASSERT(!atomic_load_explicit(&o->head_ready, memory_order_relaxed));
    size_t acct = tag_len > 0 ? um_cache_alloc_size(tag_len) : 0;
    if (acct > 0 && !um__store_charge(c, acct)) {
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
    if (!um__store_charge(c, acct)) {
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
        atomic_store_explicit(&o->outgrew, true, memory_order_relaxed);
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
                atomic_store_explicit(&o->outgrew, true, memory_order_relaxed);
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

bool um_cache_obj_outgrew(const struct um_cache_obj *o)
{
    /* Set before the abort's release store of the state, read after its acquire load. */
    return atomic_load_explicit(&((struct um_cache_obj *)o)->outgrew, memory_order_relaxed);
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
