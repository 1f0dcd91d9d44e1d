/* SPDX-License-Identifier: BSD-2-Clause */
/* hiredis on a um_loop (see redis_loop.h).
 *
 * Lifetime: hiredis frees its context itself when a connect fails or the connection
 * drops (after the connect or disconnect callback), and calls the cleanup hook when it
 * does; we free it (redisAsyncFree) only from outside its callbacks. Both ways end in
 * went_down, which forgets the context, stops watching its descriptor and arms the retry.
 * The epoll registration is level-triggered: hiredis asks for writability only while it
 * has bytes to send. */
#include "redis_loop.h"

#include <string.h>
#include <sys/epoll.h>

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000
#define CONNECT_TIMEOUT_MS 1000

static void connect_now(struct um__redis *r);

static void set_events(struct um__redis *r, uint32_t ev)
{
    if (r->ac == NULL || ev == r->_events)
        return;
    r->_events = ev;
    um_loop_io_set(r->loop, &r->_io, r->ac->c.fd, ev);
}

static void add_read(void *p)
{
    struct um__redis *r = p;
    set_events(r, r->_events | EPOLLIN);
}

static void del_read(void *p)
{
    struct um__redis *r = p;
    set_events(r, r->_events & ~(uint32_t)EPOLLIN);
}

static void add_write(void *p)
{
    struct um__redis *r = p;
    set_events(r, r->_events | EPOLLOUT);
}

static void del_write(void *p)
{
    struct um__redis *r = p;
    set_events(r, r->_events & ~(uint32_t)EPOLLOUT);
}

static void cleanup(void *p)
{
    struct um__redis *r = p;
    if (r->_events != 0 && r->ac != NULL)
        um_loop_io_set(r->loop, &r->_io, r->ac->c.fd, 0);
    r->_events = 0;
}

static void went_down(struct um__redis *r, const char *why)
{
    r->ac = NULL;
    r->_events = 0;
    r->state = UM__REDIS_DOWN;
    um_loop_timer_stop(r->loop, &r->_connect);
    if (!r->_stopped) {
        um_loop_timer_start(r->loop, &r->_retry, r->_backoff_ms);
        r->_backoff_ms = r->_backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->_backoff_ms * 2;
    }
    if (r->on_down)
        r->on_down(r, why);
}

static void on_io(struct um_io *io, uint32_t ev)
{
    struct um__redis *r = um_container_of(io, struct um__redis, _io);
    redisAsyncContext *ac = r->ac;
    if (ac == NULL)
        return;
    if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
        redisAsyncHandleRead(ac);
    if (r->ac == ac && (ev & (EPOLLOUT | EPOLLERR)))
        redisAsyncHandleWrite(ac);
}

/* The first PING's answer: only a server that answers is up (one that accepts and stays
 * silent is dropped by the connect timer). */
static void on_ping(redisAsyncContext *ac, void *reply, void *priv)
{
    struct um__redis *r = priv;
    if (reply == NULL || r->ac != ac || r->state != UM__REDIS_CONNECTING)
        return;
    um_loop_timer_stop(r->loop, &r->_connect);
    r->state = UM__REDIS_UP;
    r->_backoff_ms = BACKOFF_MIN_MS;
    if (r->on_up)
        r->on_up(r);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct um__redis *r = ac->data;
    if (r == NULL || r->ac != ac)
        return;
    if (status != REDIS_OK) {
        /* hiredis frees ac when this returns. */
        cleanup(r);
        went_down(r, ac->errstr[0] ? ac->errstr : "connect failed");
        return;
    }
    redisAsyncCommand(r->ac, on_ping, r, "PING");
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct um__redis *r = ac->data;
    if (r == NULL || r->ac != ac)
        return; /* our own redisAsyncFree: went_down has run */
    cleanup(r);
    went_down(r, status == REDIS_OK ? "connection closed"
                                    : ac->errstr[0] ? ac->errstr : "connection lost");
}

static void on_retry(struct um_timer *t)
{
    struct um__redis *r = um_container_of(t, struct um__redis, _retry);
    if (!r->_stopped && r->ac == NULL)
        connect_now(r);
}

static void on_connect_timeout(struct um_timer *t)
{
    struct um__redis *r = um_container_of(t, struct um__redis, _connect);
    if (r->state == UM__REDIS_CONNECTING)
        um__redis_drop(r, "connect timed out");
}

static void connect_now(struct um__redis *r)
{
    redisAsyncContext *ac = redisAsyncConnect(r->host, r->port);
    if (ac == NULL) {
        went_down(r, "out of memory");
        return;
    }
    if (ac->err) {
        char why[128];
        snprintf(why, sizeof(why), "%s", ac->errstr);
        redisAsyncFree(ac);
        went_down(r, why);
        return;
    }
    r->ac = ac;
    r->state = UM__REDIS_CONNECTING;
    r->_events = 0;
    ac->data = r;
    ac->ev.data = r;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    /* The connect completes when the socket turns writable. */
    add_write(r);
    um_loop_timer_start(r->loop, &r->_connect, CONNECT_TIMEOUT_MS);
}

void um__redis_init(struct um__redis *r, struct um_loop *loop, const char *host, int port)
{
    memset(r, 0, sizeof(*r));
    r->loop = loop;
    r->host = host;
    r->port = port;
    r->_io.cb = on_io;
    r->_retry.cb = on_retry;
    r->_connect.cb = on_connect_timeout;
    r->_backoff_ms = BACKOFF_MIN_MS;
}

void um__redis_start(struct um__redis *r)
{
    connect_now(r);
}

void um__redis_drop(struct um__redis *r, const char *why)
{
    redisAsyncContext *ac = r->ac;
    if (ac == NULL)
        return;
    cleanup(r);
    r->ac = NULL; /* its disconnect callback, from the free, is then ours to ignore */
    redisAsyncFree(ac);
    went_down(r, why);
}

void um__redis_dispose(struct um__redis *r)
{
    r->_stopped = true;
    r->on_down = NULL;
    r->on_up = NULL;
    um__redis_drop(r, "closed");
    um_loop_timer_stop(r->loop, &r->_retry);
    um_loop_timer_stop(r->loop, &r->_connect);
}
