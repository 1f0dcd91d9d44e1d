/* A worker: one epoll loop that owns its connections from first byte to close. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/log.h"

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

void um__worker_init(struct um__worker *w, struct um_server *s, int id)
{
    memset(w, 0, sizeof(*w));
    w->id = id;
    w->server = s;
    w->config = s->config;
    um_config_ref(w->config);
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
        close(w->mailbox.fds[i]);
    free(w->mailbox.fds);
    pthread_mutex_destroy(&w->mailbox.lock);
    close(w->mailbox.efd);
    close(w->epfd);
    for (size_t i = 0; i < w->num_free_bufs; i++)
        free(w->free_bufs[i]);
    free(w->free_bufs);
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
    pthread_mutex_unlock(&w->mailbox.lock);
    for (size_t i = 0; i < n; i++)
        um__conn_accept(w, fds[i]);
    free(fds);
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
    if (w->ready)
        return 0;
    uint64_t wait = MAX_WAIT_MS;
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
            else
                um__conn_on_event((struct um__conn *)kind, evs[i].events);
        }
        run_ready(w);
        run_timeouts(w);
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
    free_closed(w);
    return NULL;
}
