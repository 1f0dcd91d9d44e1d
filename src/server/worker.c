/* A worker: one epoll loop that owns its connections from first byte to close. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/hooks.h"
#include "umbra/log.h"
#include "umbra/metrics.h"

#define MAX_EVENTS 256
#define MAX_WAIT_MS 1000

static uint64_t duration_ms(struct um__worker *w, enum um__tq_kind kind)
{
    const struct um_config *cfg = w->config;
    switch (kind) {
    case UM__TQ_HEADER:
        return (uint64_t)(cfg->timeouts.header * 1000);
    case UM__TQ_IDLE:
        return (uint64_t)(cfg->timeouts.idle * 1000);
    case UM__TQ_SEND:
        return (uint64_t)(cfg->timeouts.send * 1000);
    default:
        return 2000; /* lingering close */
    }
}

void um__tq_disarm(struct um__worker *w, struct um__conn *c)
{
    struct um__conn_links *l = um__links(c);
    if (l->tq_kind < 0)
        return;
    struct um__tq *q = &w->tq[l->tq_kind];
    if (l->tq_prev)
        um__links(l->tq_prev)->tq_next = l->tq_next;
    else
        q->head = l->tq_next;
    if (l->tq_next)
        um__links(l->tq_next)->tq_prev = l->tq_prev;
    else
        q->tail = l->tq_prev;
    l->tq_prev = l->tq_next = NULL;
    l->tq_kind = -1;
}

void um__tq_arm(struct um__worker *w, struct um__conn *c, enum um__tq_kind kind)
{
    struct um__conn_links *l = um__links(c);
    um__tq_disarm(w, c);
    struct um__tq *q = &w->tq[kind];
    l->tq_kind = (int)kind;
    l->deadline = w->now_ms + duration_ms(w, kind);
    l->tq_prev = q->tail;
    l->tq_next = NULL;
    if (q->tail)
        um__links(q->tail)->tq_next = c;
    else
        q->head = c;
    q->tail = c;
}

void um__worker_ready(struct um__worker *w, struct um__conn *c)
{
    struct um__conn_links *l = um__links(c);
    if (l->in_ready)
        return;
    l->in_ready = true;
    l->ready_next = w->ready;
    w->ready = c;
}

/* ---------------------------------------------------------------- um_loop */

static _Thread_local struct um__worker *current_worker;

struct um_loop *um_loop_current(void)
{
    return (struct um_loop *)current_worker;
}

uint64_t um_loop_now(const struct um_loop *l)
{
    return ((const struct um__worker *)l)->now_ms;
}

int um_loop_io_set(struct um_loop *l, struct um_io *io, int fd, uint32_t events)
{
    struct um__worker *w = (struct um__worker *)l;
    io->_kind = UM__EV_IO;
    struct epoll_event ev = {.events = events, .data.ptr = io};
    int op = events == 0 ? EPOLL_CTL_DEL : io->_events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    if (op == EPOLL_CTL_DEL && io->_events == 0)
        return UM_OK;
    io->fd = fd;
    int r = epoll_ctl(w->epfd, op, fd, &ev);
    if (r != 0 && op == EPOLL_CTL_ADD && errno == EEXIST)
        r = epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &ev);
    io->_events = r == 0 ? events : io->_events;
    if (op == EPOLL_CTL_DEL)
        io->_events = 0;
    return r == 0 ? UM_OK : UM_ERR;
}

static void heap_swap(struct um__worker *w, size_t a, size_t b)
{
    struct um_timer *t = w->timers[a];
    w->timers[a] = w->timers[b];
    w->timers[b] = t;
    w->timers[a]->_index = a + 1;
    w->timers[b]->_index = b + 1;
}

static void heap_up(struct um__worker *w, size_t i)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (w->timers[parent]->_deadline <= w->timers[i]->_deadline)
            break;
        heap_swap(w, i, parent);
        i = parent;
    }
}

static void heap_down(struct um__worker *w, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < w->num_timers && w->timers[l]->_deadline < w->timers[m]->_deadline)
            m = l;
        if (r < w->num_timers && w->timers[r]->_deadline < w->timers[m]->_deadline)
            m = r;
        if (m == i)
            break;
        heap_swap(w, i, m);
        i = m;
    }
}

void um_loop_timer_stop(struct um_loop *l, struct um_timer *t)
{
    struct um__worker *w = (struct um__worker *)l;
    if (t->_index == 0)
        return;
    size_t i = t->_index - 1, last = w->num_timers - 1;
    UM_ASSERT(i < w->num_timers && w->timers[i] == t);
    if (i != last) {
        heap_swap(w, i, last);
        w->num_timers--;
        heap_down(w, i);
        heap_up(w, i);
    } else {
        w->num_timers--;
    }
    t->_index = 0;
}

void um_loop_timer_start(struct um_loop *l, struct um_timer *t, uint64_t ms)
{
    struct um__worker *w = (struct um__worker *)l;
    um_loop_timer_stop(l, t);
    if (w->num_timers == w->cap_timers) {
        w->cap_timers = w->cap_timers ? w->cap_timers * 2 : 64;
        w->timers = um_realloc(w->timers, w->cap_timers * sizeof(*w->timers));
    }
    t->_deadline = w->now_ms + ms;
    w->timers[w->num_timers++] = t;
    t->_index = w->num_timers;
    heap_up(w, w->num_timers - 1);
}

void um_loop_defer(struct um_loop *l, struct um_task *t)
{
    struct um__worker *w = (struct um__worker *)l;
    if (t->_queued)
        return;
    t->_queued = 1;
    t->_next = w->tasks;
    w->tasks = t;
}

void um_loop_post(struct um_loop *l, struct um_task *t)
{
    struct um__worker *w = (struct um__worker *)l;
    struct um__mailbox *mb = &w->mailbox;
    pthread_mutex_lock(&mb->lock);
    bool queued = t->_queued;
    if (!queued) {
        t->_queued = 1;
        t->_next = mb->posted;
        mb->posted = t;
    }
    pthread_mutex_unlock(&mb->lock);
    if (!queued) {
        uint64_t one = 1;
        ssize_t r = write(mb->efd, &one, sizeof(one));
        (void)r;
    }
}

void um_loop_unpost(struct um_loop *l, struct um_task *t)
{
    struct um__worker *w = (struct um__worker *)l;
    struct um__mailbox *mb = &w->mailbox;
    pthread_mutex_lock(&mb->lock);
    if (t->_queued) {
        for (struct um_task **p = &mb->posted; *p; p = &(*p)->_next) {
            if (*p == t) {
                *p = t->_next;
                break;
            }
        }
        t->_queued = 0;
        t->_next = NULL;
    }
    pthread_mutex_unlock(&mb->lock);
}

/* Runs posted tasks one at a time: each is taken off the queue under the lock, so a task
 * that makes its owner withdraw (and free) another one never leaves a dangling entry. */
static void run_posted(struct um__worker *w)
{
    struct um__mailbox *mb = &w->mailbox;
    for (int budget = 4096; budget > 0; budget--) {
        pthread_mutex_lock(&mb->lock);
        struct um_task *t = mb->posted;
        if (t) {
            mb->posted = t->_next;
            t->_queued = 0;
            t->_next = NULL;
        }
        pthread_mutex_unlock(&mb->lock);
        if (t == NULL)
            return;
        t->cb(t);
    }
    /* More left: come back at once. */
    uint64_t one = 1;
    ssize_t r = write(mb->efd, &one, sizeof(one));
    (void)r;
}

void um_loop_on_stop(struct um_loop *l, struct um_task *t)
{
    /* In registration order: a layer registers before the origin it wraps does, and must
     * stop (cancelling its fetches) before that origin tears down. */
    struct um__worker *w = (struct um__worker *)l;
    struct um_task **p = &w->on_stop;
    while (*p)
        p = &(*p)->_next;
    t->_next = NULL;
    *p = t;
}

static void run_tasks(struct um__worker *w)
{
    /* Tasks may queue tasks; bound the rounds so a loop of them cannot starve I/O. */
    for (int round = 0; round < 8 && w->tasks; round++) {
        struct um_task *list = w->tasks;
        w->tasks = NULL;
        while (list) {
            struct um_task *t = list;
            list = t->_next;
            t->_queued = 0;
            t->_next = NULL;
            t->cb(t);
        }
    }
}

static void run_timers(struct um__worker *w)
{
    while (w->num_timers > 0 && w->timers[0]->_deadline <= w->now_ms) {
        struct um_timer *t = w->timers[0];
        um_loop_timer_stop((struct um_loop *)w, t);
        t->cb(t);
    }
}

/* ---------------------------------------------------------------- time */

static void update_time(struct um__worker *w)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    w->now_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    time_t now = time(NULL);
    if (now != w->date_sec) {
        w->date_sec = now;
        um_http_date_format(now, w->date);
    }
}

void um__mailbox_push(struct um__mailbox *mb, const int *fds, size_t n)
{
    pthread_mutex_lock(&mb->lock);
    if (mb->len + n > mb->cap) {
        mb->cap = (mb->len + n) * 2;
        mb->fds = um_realloc(mb->fds, mb->cap * sizeof(int));
    }
    memcpy(mb->fds + mb->len, fds, n * sizeof(int));
    mb->len += n;
    pthread_mutex_unlock(&mb->lock);
    uint64_t one = 1;
    ssize_t r = write(mb->efd, &one, sizeof(one));
    (void)r;
}

void um__mailbox_signal(struct um__mailbox *mb, bool drain, bool quit)
{
    pthread_mutex_lock(&mb->lock);
    mb->drain |= drain;
    mb->quit |= quit;
    pthread_mutex_unlock(&mb->lock);
    uint64_t one = 1;
    ssize_t r = write(mb->efd, &one, sizeof(one));
    (void)r;
}

void um__mailbox_set_config(struct um__mailbox *mb, struct um_config *c, struct um_tls *tls)
{
    um_config_ref(c);
    pthread_mutex_lock(&mb->lock);
    struct um_config *stale = mb->has_next ? mb->next_config : NULL;
    mb->next_config = c;
    mb->next_tls = tls;
    mb->has_next = true;
    pthread_mutex_unlock(&mb->lock);
    if (stale)
        um_config_unref(stale); /* a reload the worker had not taken yet */
    uint64_t one = 1;
    ssize_t r = write(mb->efd, &one, sizeof(one));
    (void)r;
}

void um__worker_init(struct um__worker *w, struct um_server *s, int id)
{
    memset(w, 0, sizeof(*w));
    w->id = id;
    w->server = s;
    w->config = s->config;
    um_config_ref(w->config);
    w->tls = s->tls;
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    UM_ASSERT(w->epfd >= 0);
    w->mailbox.kind = UM__EV_MAILBOX;
    w->mailbox.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    UM_ASSERT(w->mailbox.efd >= 0);
    pthread_mutex_init(&w->mailbox.lock, NULL);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &w->mailbox};
    UM_ASSERT(epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->mailbox.efd, &ev) == 0);
    update_time(w);
}

void um__worker_dispose(struct um__worker *w)
{
    for (size_t i = 0; i < w->mailbox.len; i++)
        close(w->mailbox.fds[i] >> 1);
    free(w->mailbox.fds);
    pthread_mutex_destroy(&w->mailbox.lock);
    close(w->mailbox.efd);
    close(w->epfd);
    for (size_t i = 0; i < w->num_free_bufs; i++)
        free(w->free_bufs[i]);
    free(w->timers);
    free(w->free_bufs);
    if (w->mailbox.has_next)
        um_config_unref(w->mailbox.next_config);
    um_config_unref(w->config);
}

static void close_all(struct um__worker *w)
{
    while (w->all)
        um__conn_close(w->all);
}

static void on_mailbox(struct um__worker *w)
{
    uint64_t v;
    ssize_t r = read(w->mailbox.efd, &v, sizeof(v));
    (void)r;
    pthread_mutex_lock(&w->mailbox.lock);
    int *fds = w->mailbox.fds;
    size_t n = w->mailbox.len;
    bool drain = w->mailbox.drain, quit = w->mailbox.quit;
    w->mailbox.fds = NULL;
    w->mailbox.len = w->mailbox.cap = 0;
    struct um_config *next_cfg = NULL;
    if (w->mailbox.has_next) {
        /* A reload: sockets accepted from now on (these included) take the new snapshot;
         * open connections keep theirs. The main thread keeps the old one referenced, so
         * this is never the last reference. */
        next_cfg = w->mailbox.next_config;
        w->tls = w->mailbox.next_tls;
        w->mailbox.has_next = false;
        w->mailbox.next_config = NULL;
    }
    pthread_mutex_unlock(&w->mailbox.lock);
    if (next_cfg) {
        um_config_unref(w->config);
        w->config = next_cfg;
        /* Read buffers are sized by the limits of the snapshot: the new one's may differ. */
        for (size_t i = 0; i < w->num_free_bufs; i++)
            free(w->free_bufs[i]);
        w->num_free_bufs = 0;
    }
    for (size_t i = 0; i < n; i++)
        um__conn_accept(w, fds[i] >> 1, fds[i] & 1);
    free(fds);
    run_posted(w);
    if (quit) {
        w->draining = true;
        w->drain_deadline = w->now_ms;
    } else if (drain && !w->draining) {
        w->draining = true;
        w->drain_deadline = w->now_ms + (uint64_t)(w->config->timeouts.shutdown * 1000);
        for (struct um__conn *c = w->all, *next; c != NULL; c = next) {
            next = um__links(c)->all_next;
            um__conn_drain(c);
        }
    }
}

static int next_timeout(struct um__worker *w)
{
    if (w->ready || w->tasks)
        return 0;
    uint64_t wait = MAX_WAIT_MS;
    if (w->num_timers > 0) {
        uint64_t d = w->timers[0]->_deadline;
        wait = d > w->now_ms ? d - w->now_ms : 0;
        if (wait > MAX_WAIT_MS)
            wait = MAX_WAIT_MS;
    }
    for (int k = 0; k < UM__TQ_COUNT; k++) {
        struct um__conn *c = w->tq[k].head;
        if (c == NULL)
            continue;
        uint64_t d = um__links(c)->deadline;
        uint64_t left = d > w->now_ms ? d - w->now_ms : 0;
        if (left < wait)
            wait = left;
    }
    if (w->draining) {
        uint64_t left = w->drain_deadline > w->now_ms ? w->drain_deadline - w->now_ms : 0;
        if (left < wait)
            wait = left;
    }
    return (int)wait;
}

static void run_ready(struct um__worker *w)
{
    struct um__conn *list = w->ready;
    w->ready = NULL;
    while (list) {
        struct um__conn *c = list;
        list = um__links(c)->ready_next;
        um__links(c)->in_ready = false;
        um__links(c)->ready_next = NULL;
        um__conn_on_ready(c);
    }
}

static void run_timeouts(struct um__worker *w)
{
    for (int k = 0; k < UM__TQ_COUNT; k++) {
        struct um__conn *c;
        while ((c = w->tq[k].head) != NULL && um__links(c)->deadline <= w->now_ms) {
            um__tq_disarm(w, c);
            um__conn_on_timeout(c);
        }
    }
}

static void free_closed(struct um__worker *w)
{
    while (w->closed) {
        struct um__conn *c = w->closed;
        w->closed = um__links(c)->all_next;
        um__conn_free(c);
    }
}

void *um__worker_main(void *arg)
{
    struct um__worker *w = arg;
    struct epoll_event evs[MAX_EVENTS];
    current_worker = w;
    um_hooks_thread_init(w->id);
    um_metrics_attach(w->id);
    um_log_context(w->id, 0);
    for (;;) {
        int n = epoll_wait(w->epfd, evs, MAX_EVENTS, next_timeout(w));
        if (n < 0 && errno != EINTR) {
            um_log_err("worker %d: epoll_wait: %s", w->id, strerror(errno));
            break;
        }
        update_time(w);
        for (int i = 0; i < n; i++) {
            enum um__ev_kind *kind = evs[i].data.ptr;
            if (*kind == UM__EV_MAILBOX)
                on_mailbox(w);
            else if (*kind == UM__EV_IO)
                ((struct um_io *)(void *)kind)->cb((struct um_io *)(void *)kind, evs[i].events);
            else
                um__conn_on_event((struct um__conn *)kind, evs[i].events);
        }
        run_timers(w);
        run_tasks(w);
        run_ready(w);
        run_timeouts(w);
        run_tasks(w);
        if (w->draining) {
            if (w->now_ms >= w->drain_deadline) {
                if (w->num_conns > 0)
                    um_log_warn("worker %d: closing %zu connections at shutdown", w->id,
                                w->num_conns);
                close_all(w);
            }
            if (w->num_conns == 0) {
                free_closed(w);
                break;
            }
        }
        free_closed(w);
    }
    close_all(w);
    run_tasks(w);
    free_closed(w);
    while (w->on_stop) {
        struct um_task *t = w->on_stop;
        w->on_stop = t->_next;
        t->cb(t);
    }
    current_worker = NULL;
    um_log_context(-1, 0);
    return NULL;
}
