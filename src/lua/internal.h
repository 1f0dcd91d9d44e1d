/* What the files of the lua module share. */
#ifndef UMBRA_LUA_INTERNAL_H
#define UMBRA_LUA_INTERNAL_H

#include <stddef.h>

#include "umbra/config.h"

struct hstate;

/* The request states of one snapshot (umbra/hooks.h). */
struct um_hooks {
    const struct um_config *config; /* borrowed: it outlives the states */
    struct hstate **states;         /* one per worker; NULL when config has no hooks */
    size_t num_states;
};

#endif
