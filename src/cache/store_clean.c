/* SPDX-License-Identifier: BSD-2-Clause */
/* The store's cleaner thread (see store.c for the index and the lock order).
 *
 * Every clean_interval seconds it unlinks the objects whose stale_until has passed; and
 * since passing the high-water mark wakes it (um__store_kick_cleaner, from a charge), it
 * evicts down to the low-water mark in the background, so that fillers rarely evict on
 * their own thread. A wake-up takes the cleaner's lock only when none is pending already
 * (kick_pending), and the cleaner clears kick_pending before it looks at memory, so a
 * kick during its work is not lost. */
#include "store_internal.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

/* Wakes the cleaner to look at memory (from a charge that passed the high-water mark). */
void um__store_kick_cleaner(struct um_cache *c)
{
    if (atomic_exchange_explicit(&c->kick_pending, true, memory_order_relaxed)) return;
    pthread_mutex_lock(&c->clean_lock);
    c->clean_kick = true;
    pthread_cond_signal(&c->clean_cond);
    pthread_mutex_unlock(&c->clean_lock);
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
                    um__store_shard_take(c, sh, pp);
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
        n += um__store_free_dead(c, dead);
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
