/* SPDX-License-Identifier: BSD-2-Clause */
/* The records of the limits module (umbra/module.h): one per global it owns (a record has
 * one), `rate_limits` with the route key `rate_limit`, and `shared`.
 *
 * Neither has make/drop: their state must outlive the runtime of one configuration (a
 * reload that keeps a limit keeps its buckets), so it is process-wide, in the registry of
 * stores (store.c), referenced by the snapshots whose settings name it and freed with
 * the last of them. Their /metrics lines come from that registry. */
#include "internal.h"
#include "umbra/limits.h"
#include "umbra/module.h"

static void limits_metrics(struct um_buf *b, void *running)
{
    um__limits_render(b, UM__STORE_LIMIT);
}

static void shared_metrics(struct um_buf *b, void *running)
{
    um__limits_render(b, UM__STORE_SHARED);
}

const struct um_module um_limits_module = {
    .name = "rate_limits",
    .settings = &um_limits_settings,
    .metrics = limits_metrics,
};

const struct um_module um_shared_module = {
    .name = "shared",
    .settings = &um_shared_settings,
    .metrics = shared_metrics,
};
