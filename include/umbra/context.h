/* SPDX-License-Identifier: BSD-2-Clause */
/* A worker's context (src/loop/context.c): what the code below the server knows of the
 * worker it runs on, passed down explicitly (with each fetch, hook call and access log
 * record) instead of being found through thread-locals.
 *
 * It holds the worker's loop, its index, and one slot per module that keeps state per
 * worker (h2o's h2o_context_t is the model). The context names no module: a module owns a
 * struct um_context_slot, lists it in its record (umbra/module.h), and gets an index for
 * it from the runtime. A slot's owner makes its state when the worker first needs it
 * (most workers never need most modules' state, so none is made at start) and is the only
 * one to read it; the slot's stop frees it when the worker stops (um_context_stop), in
 * the order the slots were first set: a layer sets its state before the origin it wraps
 * does (it asks before passing down), and stops (cancelling its fetches) before that
 * origin tears down.
 *
 * Threads: the worker that owns it, only (slot indexes: any thread). */
#ifndef UMBRA_CONTEXT_H
#define UMBRA_CONTEXT_H

#include <stdatomic.h>

#include "umbra/common.h"
#include "umbra/loop.h"

struct um_context;

/* How many slots a context holds, for all modules together. */
#define UM_CONTEXT_MAX_SLOTS 16

/* A module's slot in every worker's context. Define one per kind of per-worker state
 * (static storage, owned by the module, _index zero); its index is given once, by
 * um_context_slot_index, and is the same in every context. */
struct um_context_slot {
    const char *name; /* what the state is, for a reader of the module's record */
    /* Frees state, the slot's on the worker of ctx, when the worker stops; its loop still
     * runs no turn but is alive (descriptors and timers may be dropped from it). The
     * context empties the slot after. */
    void (*stop)(struct um_context *ctx, void *state);
    atomic_uint _index; /* 0: not given yet; else the index + 1 */
};

/* The index of slot s, given at the first call (the runtime gives them in the order of its
 * list of modules before the workers start; a test without the runtime gets them at first
 * use). Any thread. Asserts when more than UM_CONTEXT_MAX_SLOTS slots are asked for. */
unsigned um_context_slot_index(struct um_context_slot *s);

struct um_context {
    struct um_loop *loop; /* the worker's loop; set by um_context_init */
    int worker_id;        /* 0 .. workers - 1 */
    void *_slots[UM_CONTEXT_MAX_SLOTS];
    struct um_context_slot *_owners[UM_CONTEXT_MAX_SLOTS]; /* by index, once set */
    unsigned char _order[UM_CONTEXT_MAX_SLOTS];            /* indexes in first-set order */
    unsigned _num_order;
};

/* Sets ctx up with empty slots for the worker worker_id running loop (borrowed: it must
 * outlive ctx). */
void um_context_init(struct um_context *ctx, struct um_loop *loop, int worker_id);

/* The worker stops: runs the stop of every slot that holds state, in the order the slots
 * were first set, and empties them. The worker's thread, before its loop is destroyed. */
void um_context_stop(struct um_context *ctx);

/* Checks that every slot is empty (um_context_stop has run). */
void um_context_dispose(struct um_context *ctx);

/* The state of slot s, or NULL when its owner has made none on this worker. */
static inline void *um_context_get(const struct um_context *ctx, struct um_context_slot *s)
{
    return ctx->_slots[um_context_slot_index(s)];
}

/* Sets (or, with NULL, empties) slot s; for the slot's owner only. */
static inline void um_context_set(struct um_context *ctx, struct um_context_slot *s,
                                  void *state)
{
    unsigned i = um_context_slot_index(s);
    if (ctx->_owners[i] == NULL && state != NULL) {
        ctx->_owners[i] = s;
        ctx->_order[ctx->_num_order++] = (unsigned char)i;
    }
    ctx->_slots[i] = state;
}

#endif
