/* SPDX-License-Identifier: BSD-2-Clause */
/* A worker's context (src/loop/context.c): what the code below the server knows of the
 * worker it runs on, passed down explicitly (with each fetch, hook call and access log
 * record) instead of being found through thread-locals.
 *
 * It holds the worker's loop, its index, and one slot per module that keeps state per
 * worker (h2o's h2o_context_t is the model). A slot's owner makes its state when the
 * worker first needs it, through the context, registers a um_loop_on_stop task that frees
 * it and empties the slot, and is the only one to read it.
 *
 * Threads: the worker that owns it, only. */
#ifndef UMBRA_CONTEXT_H
#define UMBRA_CONTEXT_H

#include "umbra/common.h"
#include "umbra/loop.h"

/* The modules with per-worker state. */
enum um_context_slot {
    UM_CONTEXT_CACHE_FILLS, /* cache: the fills running on the worker */
    UM_CONTEXT_CURL,        /* upstream: the CURLM, its sockets and easy handles */
    UM_CONTEXT_H1_CLIENT,   /* upstream: the HTTP/1.1 client's connection pools */
    UM_CONTEXT_ACCESS_LOG,  /* access log: the buffer of lines and its flush timer */
    UM_CONTEXT_CGI,         /* cgi: the scripts running on the worker */
    UM_CONTEXT_L2,          /* cluster: the worker's Redis connection (umbra/l2.h) */
    UM_CONTEXT_STATIC,      /* static: the small-file cache */
    UM_CONTEXT_NUM_SLOTS
};

struct um_cache_l2;
struct um_purge;

struct um_context {
    struct um_loop *loop; /* the worker's loop; set by um_context_init */
    int worker_id;        /* 0 .. workers - 1 */
    /* The second-level cache the worker's cache origins use (umbra/cacheorigin.h), or
     * NULL; set by the worker's owner before the loop runs, outlives it. */
    struct um_cache_l2 *l2;
    /* Called after the cache layer applied a purge (PURGE) on this worker, to carry it to
     * the other nodes: the ring's peers and the Redis bus (umbra/purge.h; the server's one
     * hook for that); NULL: nothing. */
    void (*on_purge)(void *arg, const struct um_purge *p);
    void *on_purge_arg;
    void *_slots[UM_CONTEXT_NUM_SLOTS];
};

/* Sets ctx up with empty slots for the worker worker_id running loop (borrowed: it must
 * outlive ctx). */
void um_context_init(struct um_context *ctx, struct um_loop *loop, int worker_id);

/* Checks that every slot's owner freed its state (the loop's on_stop tasks have run). */
void um_context_dispose(struct um_context *ctx);

/* The state of slot s, or NULL when its owner has made none on this worker. */
static inline void *um_context_get(const struct um_context *ctx, enum um_context_slot s)
{
    return ctx->_slots[s];
}

/* Sets (or, with NULL, empties) slot s; for the slot's owner only. */
static inline void um_context_set(struct um_context *ctx, enum um_context_slot s, void *state)
{
    ctx->_slots[s] = state;
}

#endif
