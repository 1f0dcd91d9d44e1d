/* SPDX-License-Identifier: BSD-2-Clause */
/* The event loop (see loop.h).
 *
 * A turn: wait in epoll_wait (bounded by the first timer, the first timeout queue entry,
 * a deferred task that makes it not wait at all, and a second), read the clock, call the
 * callbacks of the ready descriptors, fire the due timers, run the deferred tasks, expire
 * the timeout queues, run the deferred tasks again. Every epoll event's data.ptr is a
 * struct um_io, the loop's own wake-up eventfd included. */
#include "umbra/loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define MAX_EVENTS 256
#define MAX_WAIT_MS 1000
#define DEFER_ROUNDS 8     /* rounds of deferred tasks per run: tasks may defer tasks */
#define POST_BUDGET 4096   /* posted tasks per wake-up before the loop turns once more */

struct um_loop {
    int epfd;
    bool stopping;
    /* Time, read once per turn. */
    uint64_t now_ms; /* CLOCK_MONOTONIC */
    time_t wall;     /* CLOCK_REALTIME seconds */
    struct um_timer **timers; /* binary min-heap by deadline */
    size_t num_timers, cap_timers;
    struct um_task *deferred;
    struct um_task *on_stop; /* in the order queued */
    struct um_tq *queues;
    /* Tasks posted, under lock. From another thread the eventfd wakes the loop; from
     * the loop's own thread (a fill waking a reader of the same worker) local_posts
     * makes the turn run them with the deferred tasks instead, with no system call. */
    pthread_mutex_t post_lock;
    struct um_task *posted;
    struct um_io wake;
    bool local_posts;
    /* The thread of the last um_loop_poll (pthread_self, as an integer; 0 before the
     * first): a post from it needs no wake-up. Written by that thread, read by any. */
    _Atomic unsigned long owner;
};

static void update_time(struct um_loop *l)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    l->now_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    l->wall = time(NULL);
}

static void wake(struct um_loop *l)
{
    uint64_t one = 1;
    ssize_t r = write(l->wake.fd, &one, sizeof(one));
    (void)r;
}

/* ---------------------------------------------------------------- posted tasks */

/* Runs posted tasks one at a time: each is taken off the queue under the lock, so a task
 * that makes its owner withdraw (and free) another one never leaves a dangling entry. */
static void run_posted(struct um_loop *l)
{
    l->local_posts = false;
    for (int budget = POST_BUDGET; budget > 0; budget--) {
        pthread_mutex_lock(&l->post_lock);
        struct um_task *t = l->posted;
        if (t) {
            l->posted = t->_next;
            t->_queued = 0;
            t->_next = NULL;
        }
        pthread_mutex_unlock(&l->post_lock);
        if (t == NULL)
            return;
        t->cb(t);
    }
    /* More left: come back at once. */
    wake(l);
}

static void on_wake(struct um_io *io, uint32_t events)
{
    (void)events;
    struct um_loop *l = um_container_of(io, struct um_loop, wake);
    uint64_t v;
    ssize_t r = read(io->fd, &v, sizeof(v));
    (void)r;
    run_posted(l);
}

void um_loop_post(struct um_loop *l, struct um_task *t)
{
    pthread_mutex_lock(&l->post_lock);
    bool queued = t->_queued;
    if (!queued) {
        t->_queued = 1;
        t->_next = l->posted;
        l->posted = t;
    }
    pthread_mutex_unlock(&l->post_lock);
    if (queued)
        return;
    if (atomic_load_explicit(&l->owner, memory_order_relaxed) == (unsigned long)pthread_self())
        l->local_posts = true;
    else
        wake(l);
}

void um_loop_unpost(struct um_loop *l, struct um_task *t)
{
    pthread_mutex_lock(&l->post_lock);
    if (t->_queued) {
        for (struct um_task **p = &l->posted; *p; p = &(*p)->_next) {
            if (*p == t) {
                *p = t->_next;
                break;
            }
        }
        t->_queued = 0;
        t->_next = NULL;
    }
    pthread_mutex_unlock(&l->post_lock);
}

/* ---------------------------------------------------------------- life */

struct um_loop *um_loop_create(void)
{
    struct um_loop *l = um_calloc(1, sizeof(*l));
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    UM_ASSERT(l->epfd >= 0);
    pthread_mutex_init(&l->post_lock, NULL);
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    UM_ASSERT(efd >= 0);
    l->wake.cb = on_wake;
    UM_ASSERT(um_loop_io_set(l, &l->wake, efd, EPOLLIN) == UM_OK);
    update_time(l);
    return l;
}

void um_loop_destroy(struct um_loop *l)
{
    if (l == NULL)
        return;
    um_loop_run_on_stop(l);
    close(l->wake.fd);
    close(l->epfd);
    pthread_mutex_destroy(&l->post_lock);
    free(l->timers);
    free(l);
}

/* ---------------------------------------------------------------- descriptors */

int um_loop_io_set(struct um_loop *l, struct um_io *io, int fd, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = io};
    int op = events == 0 ? EPOLL_CTL_DEL : io->_events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    if (op == EPOLL_CTL_DEL && io->_events == 0)
        return UM_OK;
    io->fd = fd;
    int r = epoll_ctl(l->epfd, op, fd, &ev);
    if (r != 0 && op == EPOLL_CTL_ADD && errno == EEXIST)
        r = epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev);
    io->_events = r == 0 ? events : io->_events;
    if (op == EPOLL_CTL_DEL)
        io->_events = 0;
    return r == 0 ? UM_OK : UM_ERR;
}

/* ---------------------------------------------------------------- timers */

static void heap_swap(struct um_loop *l, size_t a, size_t b)
{
    struct um_timer *t = l->timers[a];
    l->timers[a] = l->timers[b];
    l->timers[b] = t;
    l->timers[a]->_index = a + 1;
    l->timers[b]->_index = b + 1;
}

static void heap_up(struct um_loop *l, size_t i)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (l->timers[parent]->_deadline <= l->timers[i]->_deadline)
            break;
        heap_swap(l, i, parent);
        i = parent;
    }
}

static void heap_down(struct um_loop *l, size_t i)
{
    for (;;) {
        size_t a = 2 * i + 1, b = a + 1, m = i;
        if (a < l->num_timers && l->timers[a]->_deadline < l->timers[m]->_deadline)
            m = a;
        if (b < l->num_timers && l->timers[b]->_deadline < l->timers[m]->_deadline)
            m = b;
        if (m == i)
            break;
        heap_swap(l, i, m);
        i = m;
    }
}

void um_loop_timer_stop(struct um_loop *l, struct um_timer *t)
{
    if (t->_index == 0)
        return;
    size_t i = t->_index - 1, last = l->num_timers - 1;
    UM_ASSERT(i < l->num_timers && l->timers[i] == t);
    if (i != last) {
        heap_swap(l, i, last);
        l->num_timers--;
        heap_down(l, i);
        heap_up(l, i);
    } else {
        l->num_timers--;
    }
    t->_index = 0;
}

void um_loop_timer_start(struct um_loop *l, struct um_timer *t, uint64_t ms)
{
    um_loop_timer_stop(l, t);
    if (l->num_timers == l->cap_timers) {
        l->cap_timers = l->cap_timers ? l->cap_timers * 2 : 64;
        l->timers = um_realloc(l->timers, l->cap_timers * sizeof(*l->timers));
    }
    t->_deadline = l->now_ms + ms;
    l->timers[l->num_timers++] = t;
    t->_index = l->num_timers;
    heap_up(l, l->num_timers - 1);
}

void um_loop_run_timers(struct um_loop *l)
{
    while (l->num_timers > 0 && l->timers[0]->_deadline <= l->now_ms) {
        struct um_timer *t = l->timers[0];
        um_loop_timer_stop(l, t);
        t->cb(t);
    }
}

/* ---------------------------------------------------------------- tasks */

void um_loop_defer(struct um_loop *l, struct um_task *t)
{
    if (t->_queued)
        return;
    t->_queued = 1;
    t->_next = l->deferred;
    l->deferred = t;
}

void um_loop_run_deferred(struct um_loop *l)
{
    if (l->local_posts)
        run_posted(l);
    /* Bounded, so that tasks deferring tasks cannot starve the descriptors. */
    for (int round = 0; round < DEFER_ROUNDS && l->deferred; round++) {
        struct um_task *list = l->deferred;
        l->deferred = NULL;
        while (list) {
            struct um_task *t = list;
            list = t->_next;
            t->_queued = 0;
            t->_next = NULL;
            t->cb(t);
        }
    }
}

void um_loop_on_stop(struct um_loop *l, struct um_task *t)
{
    /* In registration order: a layer registers before the origin it wraps does, and must
     * stop (cancelling its fetches) before that origin tears down. */
    struct um_task **p = &l->on_stop;
    while (*p)
        p = &(*p)->_next;
    t->_next = NULL;
    *p = t;
}

void um_loop_run_on_stop(struct um_loop *l)
{
    while (l->on_stop) {
        struct um_task *t = l->on_stop;
        l->on_stop = t->_next;
        t->_next = NULL;
        t->cb(t);
    }
}

/* ---------------------------------------------------------------- timeout queues */

void um_loop_tq_init(struct um_loop *l, struct um_tq *q, uint64_t duration_ms,
                     void (*cb)(struct um_tq *q, struct um_tq_entry *e))
{
    memset(q, 0, sizeof(*q));
    q->duration_ms = duration_ms;
    q->cb = cb;
    q->_loop = l;
    struct um_tq **p = &l->queues;
    while (*p)
        p = &(*p)->_next;
    *p = q;
}

void um_loop_tq_dispose(struct um_tq *q)
{
    while (q->_head)
        um_tq_disarm(q->_head);
    if (q->_loop == NULL)
        return;
    for (struct um_tq **p = &q->_loop->queues; *p; p = &(*p)->_next) {
        if (*p == q) {
            *p = q->_next;
            break;
        }
    }
    q->_loop = NULL;
    q->_next = NULL;
}

void um_tq_disarm(struct um_tq_entry *e)
{
    struct um_tq *q = e->_queue;
    if (q == NULL)
        return;
    if (e->_prev)
        e->_prev->_next = e->_next;
    else
        q->_head = e->_next;
    if (e->_next)
        e->_next->_prev = e->_prev;
    else
        q->_tail = e->_prev;
    e->_prev = e->_next = NULL;
    e->_queue = NULL;
}

void um_tq_arm(struct um_tq *q, struct um_tq_entry *e)
{
    um_tq_disarm(e);
    e->_queue = q;
    e->_deadline = q->_loop->now_ms + q->duration_ms;
    e->_prev = q->_tail;
    e->_next = NULL;
    if (q->_tail)
        q->_tail->_next = e;
    else
        q->_head = e;
    q->_tail = e;
}

void um_loop_run_timeouts(struct um_loop *l)
{
    for (struct um_tq *q = l->queues; q; q = q->_next) {
        struct um_tq_entry *e;
        while ((e = q->_head) != NULL && e->_deadline <= l->now_ms) {
            um_tq_disarm(e);
            q->cb(q, e);
        }
    }
}

/* ---------------------------------------------------------------- turns */

uint64_t um_loop_now(const struct um_loop *l)
{
    return l->now_ms;
}

time_t um_loop_wall(const struct um_loop *l)
{
    return l->wall;
}

/* Milliseconds until something is due, at most limit. */
static int next_wait(struct um_loop *l, int max_wait_ms)
{
    if (l->deferred || l->local_posts)
        return 0;
    uint64_t wait = max_wait_ms >= 0 && max_wait_ms < MAX_WAIT_MS ? (uint64_t)max_wait_ms
                                                                  : MAX_WAIT_MS;
    if (l->num_timers > 0) {
        uint64_t d = l->timers[0]->_deadline;
        uint64_t left = d > l->now_ms ? d - l->now_ms : 0;
        if (left < wait)
            wait = left;
    }
    for (struct um_tq *q = l->queues; q; q = q->_next) {
        if (q->_head == NULL)
            continue;
        uint64_t d = q->_head->_deadline;
        uint64_t left = d > l->now_ms ? d - l->now_ms : 0;
        if (left < wait)
            wait = left;
    }
    return (int)wait;
}

int um_loop_poll(struct um_loop *l, int max_wait_ms)
{
    struct epoll_event evs[MAX_EVENTS];
    unsigned long self = (unsigned long)pthread_self();
    if (atomic_load_explicit(&l->owner, memory_order_relaxed) != self)
        atomic_store_explicit(&l->owner, self, memory_order_relaxed);
    int n = epoll_wait(l->epfd, evs, MAX_EVENTS, next_wait(l, max_wait_ms));
    if (n < 0 && errno != EINTR)
        return UM_ERR;
    update_time(l);
    for (int i = 0; i < n; i++) {
        struct um_io *io = evs[i].data.ptr;
        io->cb(io, evs[i].events);
    }
    return UM_OK;
}

int um_loop_run_once(struct um_loop *l, int max_wait_ms)
{
    if (um_loop_poll(l, max_wait_ms) != UM_OK)
        return UM_ERR;
    um_loop_run_timers(l);
    um_loop_run_deferred(l);
    um_loop_run_timeouts(l);
    um_loop_run_deferred(l);
    return UM_OK;
}

int um_loop_run(struct um_loop *l)
{
    int r = UM_OK;
    while (!l->stopping && r == UM_OK)
        r = um_loop_run_once(l, -1);
    l->stopping = false;
    return r;
}

void um_loop_stop(struct um_loop *l)
{
    l->stopping = true;
}
