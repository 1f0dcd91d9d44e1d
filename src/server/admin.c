/* SPDX-License-Identifier: BSD-2-Clause */
/* The admin thread (internal.h): no sockets, no HTTP. The admin listener's connections are
 * ordinary ones, served by the workers (admin_origin.c); this thread does the two things
 * that must not run on a worker's loop:
 *   - POST /purge: a large purge walks the whole cache, paced (it sleeps), so it runs here.
 *     A worker submits a job; the thread takes the jobs in order, runs each and posts it
 *     back to the worker's loop (um_loop_post), where the answer goes out;
 *   - once a second it samples the request and cache counters into a ring, which the
 *     status page's charts are drawn from (/status.json's "series").
 *
 * Who owns a job (struct um__admin_job): the worker makes it and submits it; from then on
 * it is on the admin's list of jobs until um__admin_job_free, which only its worker calls,
 * from the task the admin thread posted (after the job ran) or on its own before it was
 * ever submitted. The admin thread reads the request and writes the answer; job->sink is
 * the worker's alone. The worker's loop and the job outlive each other this way: a client
 * that leaves only clears job->sink (the answer is dropped when the task runs). At stop,
 * after every worker has stopped, the jobs still listed (posted to a loop that no longer
 * runs) are freed here. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "umbra/buf.h"
#include "umbra/log.h"
#include "umbra/metrics.h"

#define RING 601 /* one sample a second: ten minutes and one */
#define SERIES_STEP 2

struct sample {
    uint64_t t; /* seconds since the start */
    uint64_t requests, hits, lookups;
};

struct um__admin {
    struct um_server *s;
    pthread_t thread;
    pthread_mutex_t lock; /* everything below */
    pthread_cond_t wake;
    bool stop;
    struct um__admin_job *queue, **queue_tail; /* submitted, not run yet: in order */
    struct um__admin_job *jobs;                /* every job not freed yet */
    struct sample ring[RING];
    size_t ring_len, ring_head; /* ring_head: index of the next write */
    uint64_t start_ms;
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------- samples */

static void take_sample(struct um__admin *a)
{
    int nroutes = um_metrics_num_routes();
    struct sample sm = {(mono_ms() - a->start_ms + 500) / 1000, 0, 0, 0};
    int nw = um_metrics_num_workers();
    for (int i = 0; i <= nw; i++) {
        const struct um_metrics_worker *m = um_metrics_get(i);
        for (int r = 0; r < nroutes; r++)
            for (int k = 0; k < 6; k++)
                sm.requests += um_counter_get(&m->requests[r][k]);
        uint64_t h = um_counter_get(&m->cache_hits);
        sm.hits += h;
        sm.lookups += h + um_counter_get(&m->cache_misses) + um_counter_get(&m->cache_stale) +
                      um_counter_get(&m->cache_coalesced);
    }
    pthread_mutex_lock(&a->lock);
    a->ring[a->ring_head] = sm;
    a->ring_head = (a->ring_head + 1) % RING;
    if (a->ring_len < RING)
        a->ring_len++;
    pthread_mutex_unlock(&a->lock);
}

void um__admin_write_series(struct um__admin *a, struct um_buf *b)
{
    /* Rates over SERIES_STEP-second steps, oldest first, from the one-second samples. */
    um_buf_printf(b, "\"series\":{\"step\":%d,\"rps\":[", SERIES_STEP);
    struct um_buf hr = {0};
    if (a != NULL) {
        pthread_mutex_lock(&a->lock);
        size_t steps = a->ring_len > 1 ? (a->ring_len - 1) / SERIES_STEP : 0;
        for (size_t k = steps; k >= 1; k--) {
            size_t newer = (a->ring_head + RING - 1 - (k - 1) * SERIES_STEP) % RING;
            size_t older = (a->ring_head + RING - 1 - k * SERIES_STEP) % RING;
            const struct sample *x = &a->ring[older], *y = &a->ring[newer];
            double dt = y->t > x->t ? (double)(y->t - x->t) : 1;
            uint64_t dl = y->lookups - x->lookups;
            um_buf_printf(b, "%s%.2f", k == steps ? "" : ",",
                          (double)(y->requests - x->requests) / dt);
            if (dl)
                um_buf_printf(&hr, "%s%.4f", k == steps ? "" : ",",
                              (double)(y->hits - x->hits) / (double)dl);
            else
                um_buf_printf(&hr, "%snull", k == steps ? "" : ",");
        }
        pthread_mutex_unlock(&a->lock);
    }
    um_buf_append(b, "],\"hit_ratio\":[", 15);
    if (hr.len)
        um_buf_append(b, hr.base, hr.len);
    um_buf_dispose(&hr);
    um_buf_append(b, "]}", 2);
}

/* ---------------------------------------------------------------- purge jobs */

static void job_run(struct um__admin *a, struct um__admin_job *j)
{
    struct um_cache *cache = atomic_load_explicit(&a->s->cache, memory_order_acquire);
    j->status = um__admin_purge(a->s, cache, j->runtime->cluster, j->json, j->body, j->len,
                                &j->out);
}

bool um__admin_submit(struct um__admin *a, struct um__admin_job *j)
{
    pthread_mutex_lock(&a->lock);
    bool ok = !a->stop;
    if (ok) {
        j->qnext = NULL;
        *a->queue_tail = j;
        a->queue_tail = &j->qnext;
        j->next = a->jobs;
        j->prev = NULL;
        if (a->jobs)
            a->jobs->prev = j;
        a->jobs = j;
        pthread_cond_signal(&a->wake);
    }
    pthread_mutex_unlock(&a->lock);
    return ok;
}

static void job_dispose(struct um__admin_job *j)
{
    um_buf_dispose(&j->out);
    um_runtime_unref(j->runtime);
    free(j);
}

void um__admin_job_free(struct um__admin *a, struct um__admin_job *j, bool submitted)
{
    if (submitted) {
        pthread_mutex_lock(&a->lock);
        if (j->prev)
            j->prev->next = j->next;
        else
            a->jobs = j->next;
        if (j->next)
            j->next->prev = j->prev;
        pthread_mutex_unlock(&a->lock);
    }
    job_dispose(j);
}

/* ---------------------------------------------------------------- the thread */

static void deadline_of(uint64_t ms_from_now, struct timespec *ts)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms_from_now / 1000);
    ts->tv_nsec += (long)(ms_from_now % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *admin_main(void *arg)
{
    struct um__admin *a = arg;
    um_log_context(-1, 0);
    uint64_t next_sample = mono_ms();
    pthread_mutex_lock(&a->lock);
    while (!a->stop) {
        uint64_t now = mono_ms();
        if (now >= next_sample) {
            pthread_mutex_unlock(&a->lock);
            take_sample(a);
            pthread_mutex_lock(&a->lock);
            next_sample += 1000;
            if (next_sample <= now)
                next_sample = now + 1000;
            continue;
        }
        struct um__admin_job *j = a->queue;
        if (j == NULL) {
            struct timespec ts;
            deadline_of(next_sample - now, &ts);
            pthread_cond_timedwait(&a->wake, &a->lock, &ts);
            continue;
        }
        a->queue = j->qnext;
        if (a->queue == NULL)
            a->queue_tail = &a->queue;
        pthread_mutex_unlock(&a->lock);
        job_run(a, j);
        /* From here on the job is its worker's again (the task frees it). */
        um_loop_post(j->loop, &j->done);
        pthread_mutex_lock(&a->lock);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

struct um__admin *um__admin_start(struct um_server *s)
{
    struct um__admin *a = um_calloc(1, sizeof(*a));
    a->s = s;
    a->start_ms = mono_ms();
    a->queue_tail = &a->queue;
    pthread_mutex_init(&a->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->wake, &ca);
    pthread_condattr_destroy(&ca);
    UM_ASSERT(pthread_create(&a->thread, NULL, admin_main, a) == 0);
    return a;
}

void um__admin_stop(struct um__admin *a)
{
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->lock);
    a->stop = true;
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->thread, NULL);
    /* The workers have stopped (um_server_run stops this thread after them): jobs left
     * were never run, or were posted to a loop that runs no more. Nothing else holds
     * them; a stopped loop never reads its posted tasks again. */
    while (a->jobs) {
        struct um__admin_job *j = a->jobs;
        a->jobs = j->next;
        job_dispose(j);
    }
    pthread_cond_destroy(&a->wake);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
