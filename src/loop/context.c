/* SPDX-License-Identifier: BSD-2-Clause */
/* A worker's context (see context.h). */
#include "umbra/context.h"

#include <string.h>

void um_context_init(struct um_context *ctx, struct um_loop *loop, int worker_id)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->loop = loop;
    ctx->worker_id = worker_id;
}

void um_context_dispose(struct um_context *ctx)
{
    /* A slot still set is state its owner never freed: its on_stop task did not run, or
     * did not empty the slot. */
    for (int s = 0; s < UM_CONTEXT_NUM_SLOTS; s++)
        UM_ASSERT(ctx->_slots[s] == NULL);
    ctx->loop = NULL;
}
