/* SPDX-License-Identifier: BSD-2-Clause */
/* A worker: a loop (src/loop/) that owns its connections from first byte to close. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/log.h"
#include "umbra/metrics.h"
#include "umbra/runtime.h"
#include "umbra/tls.h"

static uint64_t duration_ms(const struct um_config *cfg, enum um__tq_kind kind)
{
    switch (kind) {
    case UM__TQ_HEADER:
        return (uint64_t)(cfg->timeouts.header * 1000);
    case UM__TQ_IDLE:
        return (uint64_t)(cfg->timeouts.idle * 1000);
    case UM__TQ_SEND:
        return (uint64_t)(cfg->timeouts.send * 1000);
    case UM__TQ_TUNNEL:
        return (uint64_t)(cfg->timeouts.tunnel * 1000);
    default:
        return 2000; /* lingering close */
    }
}

/* The queues' durations come from the snapshot new connections take. */
static void set_durations(struct um__worker *w)
{
    for (int k = 0; k < UM__TQ_COUNT; k++)
        w->tq[k].duration_ms = duration_ms(w->config, (enum um__tq_kind)k);
}

static void on_conn_timeout(struct um_tq *q, struct um_tq_entry *e)
{
    (void)q;
    struct um__conn_links *l = um_container_of(e, struct um__conn_links, tq);
    l->tq_kind = -1;
    um__conn_on_timeout((struct um__conn *)(void *)l);
}

void um__tq_disarm(struct um__worker *w, struct um__conn *c)
{
    (void)w;
    struct um__conn_links *l = um__links(c);
    um_tq_disarm(&l->tq);
    l->tq_kind = -1;
}

void um__tq_arm(struct um__worker *w, struct um__conn *c, enum um__tq_kind kind)
{
    struct um__conn_links *l = um__links(c);
    l->tq_kind = (int)kind;
    um_tq_arm(&w->tq[kind], &l->tq);
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

static void on_conn_io(struct um_io *io, uint32_t events)
{
    um__conn_on_event((struct um__conn *)(void *)io, events); /* the links' io is first */
}

int um__worker_watch(struct um__worker *w, struct um__conn *c, int fd)
{
    struct um_io *io = &um__links(c)->io;
    io->cb = on_conn_io;
    return um_loop_io_set(w->loop, io, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
}

const char *um__worker_date(struct um__worker *w)
{
    time_t now = um_loop_wall(w->loop);
    if (now != w->date_sec) {
        w->date_sec = now;
        um_http_date_format(now, w->date);
    }
    return w->date;
}

/* ---------------------------------------------------------------- mailbox */

static void wake(struct um__mailbox *mb)
{
    uint64_t one = 1;
    ssize_t r = write(mb->io.fd, &one, sizeof(one));
    (void)r;
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
    wake(mb);
}

void um__mailbox_signal(struct um__mailbox *mb, bool drain, bool quit)
{
    pthread_mutex_lock(&mb->lock);
    mb->drain |= drain;
    mb->quit |= quit;
    pthread_mutex_unlock(&mb->lock);
    wake(mb);
}

void um__mailbox_set_runtime(struct um__mailbox *mb, struct um_runtime *rt)
{
    um_runtime_ref(rt);
    pthread_mutex_lock(&mb->lock);
    struct um_runtime *stale = mb->has_next ? mb->next_runtime : NULL;
    mb->next_runtime = rt;
    mb->has_next = true;
    pthread_mutex_unlock(&mb->lock);
    if (stale)
        um_runtime_unref(stale); /* a reload the worker had not taken yet */
    wake(mb);
}

static void on_mailbox(struct um_io *io, uint32_t events);

void um__worker_init(struct um__worker *w, struct um_server *s, int id)
{
    memset(w, 0, sizeof(*w));
    w->id = id;
    w->server = s;
    w->runtime = s->runtime;
    um_runtime_ref(w->runtime);
    w->config = w->runtime->config;
    w->tls = um_runtime_state(w->runtime, &um_tls_module);
    w->loop = um_loop_create();
    um_context_init(&w->ctx, w->loop, id);
    for (int k = 0; k < UM__TQ_COUNT; k++)
        um_loop_tq_init(w->loop, &w->tq[k], 0, on_conn_timeout);
    set_durations(w);
    um_bufpool_init(&w->rbufs, um__conn_rbuf_size(w->config), UM__CONN_POOL_KEEP);
    um_bufpool_init(&w->reqs, um__conn_req_size, UM__CONN_POOL_KEEP);
    um__outq_pools_init(&w->outq_pools, UM__CONN_POOL_KEEP);
    um_bufpool_init(&w->tunbufs, UM__TUNNEL_BUF, UM__TUNNEL_POOL_KEEP);
    um_bufpool_init(&w->h2_streams, um__h2_stream_size, UM__H2_STREAM_POOL_KEEP);
    pthread_mutex_init(&w->mailbox.lock, NULL);
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    UM_ASSERT(efd >= 0);
    w->mailbox.io.cb = on_mailbox;
    UM_ASSERT(um_loop_io_set(w->loop, &w->mailbox.io, efd, EPOLLIN) == UM_OK);
}

void um__worker_dispose(struct um__worker *w)
{
    for (size_t i = 0; i < w->mailbox.len; i++)
        close(w->mailbox.fds[i] / UM__ACCEPT_SHIFT);
    free(w->mailbox.fds);
    pthread_mutex_destroy(&w->mailbox.lock);
    close(w->mailbox.io.fd);
    for (int k = 0; k < UM__TQ_COUNT; k++)
        um_loop_tq_dispose(&w->tq[k]);
    um_loop_destroy(w->loop);
    um_context_dispose(&w->ctx);
    um_bufpool_dispose(&w->rbufs);
    um_bufpool_dispose(&w->reqs);
    um_bufpool_dispose(&w->tunbufs);
    um__outq_pools_dispose(&w->outq_pools);
    um_bufpool_dispose(&w->h2_streams);
    if (w->mailbox.has_next)
        um_runtime_unref(w->mailbox.next_runtime);
    um_runtime_unref(w->runtime);
}

static void close_all(struct um__worker *w)
{
    while (w->all)
        um__conn_close(w->all);
}

static void on_mailbox(struct um_io *io, uint32_t events)
{
    (void)events;
    struct um__worker *w = um_container_of(io, struct um__worker, mailbox.io);
    uint64_t v;
    ssize_t r = read(io->fd, &v, sizeof(v));
    (void)r;
    pthread_mutex_lock(&w->mailbox.lock);
    int *fds = w->mailbox.fds;
    size_t n = w->mailbox.len;
    bool drain = w->mailbox.drain, quit = w->mailbox.quit;
    w->mailbox.fds = NULL;
    w->mailbox.len = w->mailbox.cap = 0;
    struct um_runtime *next_rt = NULL;
    if (w->mailbox.has_next) {
        /* A reload: sockets accepted from now on (these included) take the new runtime;
         * open connections keep theirs. The main thread keeps the old one referenced, so
         * this is never the last reference. */
        next_rt = w->mailbox.next_runtime;
        w->mailbox.has_next = false;
        w->mailbox.next_runtime = NULL;
    }
    pthread_mutex_unlock(&w->mailbox.lock);
    if (next_rt) {
        um_runtime_unref(w->runtime);
        w->runtime = next_rt;
        w->config = next_rt->config;
        w->tls = um_runtime_state(next_rt, &um_tls_module);
        set_durations(w);
        /* Read buffers are sized by the limits of the snapshot: the new one's may differ
         * (the connections of the old one then free theirs instead of giving them back). */
        size_t rsize = um__conn_rbuf_size(w->config);
        if (rsize != w->rbufs.size)
            um_bufpool_resize(&w->rbufs, rsize);
        for (struct um__conn *c = w->all, *next; c != NULL; c = next) {
            next = um__links(c)->all_next;
            um__conn_reloaded(c);
        }
    }
    for (size_t i = 0; i < n; i++)
        um__conn_accept(w, fds[i] / UM__ACCEPT_SHIFT, fds[i] % UM__ACCEPT_SHIFT);
    free(fds);
    uint64_t now = um_loop_now(w->loop);
    if (quit) {
        w->draining = true;
        w->drain_deadline = now;
    } else if (drain && !w->draining) {
        w->draining = true;
        w->drain_deadline = now + (uint64_t)(w->config->timeouts.shutdown * 1000);
        for (struct um__conn *c = w->all, *next; c != NULL; c = next) {
            next = um__links(c)->all_next;
            um__conn_drain(c);
        }
    }
}

/* The most the loop may wait for events: not at all with connections' work left over,
 * no later than the end of a drain. */
static int max_wait(struct um__worker *w)
{
    if (w->ready)
        return 0;
    if (!w->draining)
        return -1;
    uint64_t now = um_loop_now(w->loop);
    uint64_t left = w->drain_deadline > now ? w->drain_deadline - now : 0;
    return left > INT_MAX ? INT_MAX : (int)left;
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
    struct um_loop *l = w->loop;
    um_metrics_attach(w->id);
    um_log_context(w->id, 0);
    if (w->server->l2)
        um_l2_worker_start(w->server->l2, &w->ctx);
    for (;;) {
        /* A loop turn, with the connections that were capped last turn served between the
         * deferred tasks and the timeouts. */
        if (um_loop_poll(l, max_wait(w)) != UM_OK) {
            um_log_err("worker %d: epoll_wait: %s", w->id, strerror(errno));
            break;
        }
        um_loop_run_timers(l);
        um_loop_run_deferred(l);
        run_ready(w);
        um_loop_run_timeouts(l);
        um_loop_run_deferred(l);
        if (w->draining) {
            if (um_loop_now(l) >= w->drain_deadline) {
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
    um_loop_run_deferred(l);
    free_closed(w);
    um_context_stop(&w->ctx); /* the modules' state of this worker (umbra/context.h) */
    um_loop_run_on_stop(l);
    um_log_context(-1, 0);
    return NULL;
}
