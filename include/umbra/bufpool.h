/* SPDX-License-Identifier: BSD-2-Clause */
/* A free list of equal-sized memory blocks, for one thread (nginx's and HAProxy's pools,
 * h2o's recycle): a block given back is kept for the next taker, up to a reserve of
 * `keep` blocks, so that taking one and giving it back is a pointer move; a block given
 * back past the reserve goes back to the system. A connection that waits idle gives its
 * buffers to its worker's pools this way and takes them again when bytes arrive.
 *
 * Blocks come from malloc and may be freed with free() instead of being given back, or
 * grown with realloc (then they are no longer the pool's size: free them). A pool belongs
 * to one thread; the core floor (src/core/bufpool.c). */
#ifndef UMBRA_BUFPOOL_H
#define UMBRA_BUFPOOL_H

#include "umbra/common.h"

struct um_bufpool {
    size_t size; /* bytes per block (at least a pointer's) */
    size_t keep; /* blocks kept at most */
    size_t num;  /* blocks kept now */
    size_t out;  /* blocks taken and not given back (for the tests and the status page) */
    void *_free; /* the kept blocks, linked through their first word */
};

/* An empty pool of blocks of size bytes (raised to a pointer's size), keeping at most
 * keep of them. Allocates nothing. */
void um_bufpool_init(struct um_bufpool *p, size_t size, size_t keep);

/* Frees the kept blocks. Blocks still taken stay the takers' (free them with free()). */
void um_bufpool_dispose(struct um_bufpool *p);

/* Frees the kept blocks and makes the pool's blocks size bytes from now on; blocks taken
 * before must then be freed with free(), not given back (um_bufpool_put checks nothing). */
void um_bufpool_resize(struct um_bufpool *p, size_t size);

/* malloc's way for um_bufpool_get when nothing is kept (panics on exhaustion). */
void *um__bufpool_alloc(struct um_bufpool *p);
/* free's way for um_bufpool_put past the reserve. */
void um__bufpool_release(struct um_bufpool *p, void *blk);

/* A block of p->size bytes, uninitialised (a kept one, or a new one). Never NULL. */
static inline void *um_bufpool_get(struct um_bufpool *p)
{
    void *blk = p->_free;
    p->out++;
    if (blk == NULL)
        return um__bufpool_alloc(p);
    p->_free = *(void **)blk;
    p->num--;
    return blk;
}

/* A block taken from p will not come back: its taker grew it with realloc or frees it
 * (only p->out counts it). */
static inline void um_bufpool_forget(struct um_bufpool *p)
{
    if (p->out > 0)
        p->out--;
}

/* Gives back a block of p->size bytes taken from p (NULL: nothing). */
static inline void um_bufpool_put(struct um_bufpool *p, void *blk)
{
    if (blk == NULL)
        return;
    if (p->out > 0) /* 0 after a resize, for blocks taken before it */
        p->out--;
    if (p->num >= p->keep) {
        um__bufpool_release(p, blk);
        return;
    }
    *(void **)blk = p->_free;
    p->_free = blk;
    p->num++;
}

#endif
