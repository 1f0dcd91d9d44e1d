/* SPDX-License-Identifier: BSD-2-Clause */
/* Free lists of equal-sized blocks (bufpool.h). */
#include "umbra/bufpool.h"

#include <stdlib.h>

void um_bufpool_init(struct um_bufpool *p, size_t size, size_t keep)
{
    p->size = size < sizeof(void *) ? sizeof(void *) : size;
    p->keep = keep;
    p->num = p->out = 0;
    p->_free = NULL;
}

static void free_kept(struct um_bufpool *p)
{
    while (p->_free != NULL) {
        void *blk = p->_free;
        p->_free = *(void **)blk;
        free(blk);
    }
    p->num = 0;
}

void um_bufpool_dispose(struct um_bufpool *p)
{
    free_kept(p);
}

void um_bufpool_resize(struct um_bufpool *p, size_t size)
{
    free_kept(p);
    p->size = size < sizeof(void *) ? sizeof(void *) : size;
    p->out = 0; /* blocks of the old size are freed, not given back */
}

void *um__bufpool_alloc(struct um_bufpool *p)
{
    return um_malloc(p->size);
}

void um__bufpool_release(struct um_bufpool *p, void *blk)
{
    (void)p;
    free(blk);
}
