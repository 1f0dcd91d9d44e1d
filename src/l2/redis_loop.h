/* SPDX-License-Identifier: BSD-2-Clause */
/* A Redis connection driven by a um_loop (src/l2/redis_loop.c): hiredis's async
 * context with its event hooks on the loop's epoll set, and a reconnect with backoff.
 *
 * hiredis owns the socket and the protocol; the loop only tells it when the socket is
 * readable or writable (addRead/delRead/addWrite/delWrite set the um_io's events, cleanup
 * stops watching). Nothing here ever waits: connecting is non-blocking (the address is a
 * literal, so there is no name to resolve), and a connection that fails or is dropped is
 * tried again after a backoff that doubles from BACKOFF_MIN_MS to BACKOFF_MAX_MS. The
 * connection is up once the server answered a PING, within CONNECT_TIMEOUT_MS of the
 * connect: one that accepts and never answers is dropped and tried again. Commands may be
 * sent while it connects (hiredis queues them).
 *
 * Threads: the loop's, only. */
#ifndef UMBRA_CLUSTER_REDIS_LOOP_H
#define UMBRA_CLUSTER_REDIS_LOOP_H

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "umbra/loop.h"

enum um__redis_state { UM__REDIS_DOWN, UM__REDIS_CONNECTING, UM__REDIS_UP };

struct um__redis {
    struct um_loop *loop;
    const char *host; /* borrowed: outlives the connection */
    int port;
    redisAsyncContext *ac;         /* NULL while down */
    enum um__redis_state state;
    /* Told when the connection comes up, and when it goes down (on the loop; commands
     * still pending got their callbacks with a NULL reply already). May be NULL. */
    void (*on_up)(struct um__redis *r);
    void (*on_down)(struct um__redis *r, const char *why);
    void *data; /* the owner's */
    /* private */
    struct um_io _io;
    uint32_t _events;
    struct um_timer _retry, _connect;
    uint64_t _backoff_ms;
    bool _stopped;
};

/* Sets r up (zeroed first) and starts connecting. */
void um__redis_init(struct um__redis *r, struct um_loop *loop, const char *host, int port);
void um__redis_start(struct um__redis *r);
/* Drops the connection now (pending commands get a NULL reply) and tries again after the
 * backoff: for an owner that decided the server does not answer. Not from inside a
 * hiredis callback. */
void um__redis_drop(struct um__redis *r, const char *why);
/* Closes for good (pending commands get a NULL reply); r may be freed afterwards. */
void um__redis_dispose(struct um__redis *r);

#endif
