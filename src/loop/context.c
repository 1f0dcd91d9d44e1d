/* SPDX-License-Identifier: BSD-2-Clause */
/* A worker's context (see context.h). */
#include "umbra/context.h"

#include <string.h>

/* The next index to give; slots are given for the life of the process. */
static atomic_uint next_index;

unsigned um_context_slot_index(struct um_context_slot *s)
{
    unsigned i = atomic_load_explicit(&s->_index, memory_order_acquire);
    if (i != 0)
        return i - 1;
    /* Two threads may ask at once: each call takes an index, only the first store wins,
     * and the loser's index stays unused (there is room for that). */
    unsigned mine = atomic_fetch_add(&next_index, 1) + 1;
    UM_ASSERT(mine <= UM_CONTEXT_MAX_SLOTS);
    unsigned expect = 0;
    if (atomic_compare_exchange_strong(&s->_index, &expect, mine))
        return mine - 1;
    return expect - 1;
}

void um_context_init(struct um_context *ctx, struct um_loop *loop, int worker_id)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->loop = loop;
    ctx->worker_id = worker_id;
}

void um_context_stop(struct um_context *ctx)
{
    /* A stop that wakes another slot's owner (a fill cancelled into its origin) may make
     * that state again: passes until one finds every slot empty. */
    for (bool again = true; again;) {
        again = false;
        for (unsigned k = 0; k < ctx->_num_order; k++) {
            unsigned i = ctx->_order[k];
            void *state = ctx->_slots[i];
            if (state == NULL) continue;
            ctx->_owners[i]->stop(ctx, state);
            ctx->_slots[i] = NULL;
            again = true;
        }
    }
}

void um_context_dispose(struct um_context *ctx)
{
    /* A slot still set is state made after um_context_stop ran, or a stop that never ran. */
    for (int s = 0; s < UM_CONTEXT_MAX_SLOTS; s++)
        UM_ASSERT(ctx->_slots[s] == NULL);
    ctx->loop = NULL;
}
