/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the L2 floor share (umbra/l2.h): the process's L2, the bus thread's
 * start and stop, and the key prefixes. For src/l2/ only. */
#ifndef UMBRA_L2_INTERNAL_H
#define UMBRA_L2_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "redis_loop.h"
#include "umbra/l2.h"

#define L2_OBJ_PREFIX "umbra:o:"
#define L2_TAG_PREFIX "umbra:t:"
#define L2_CHANNEL "umbra:purge"

struct l2_msg; /* a purge queued for the bus (bus.c) */

struct um_l2 {
    struct um_cache_l2 cache; /* what the workers' contexts point to */
    char host[64];
    int port;
    uint64_t timeout_ms;
    int workers;
    um_l2_apply_cb apply;
    void *apply_arg;
    char node_id[17]; /* random, hex: a node ignores the purges it published */
    atomic_bool down_logged;
    atomic_int workers_up;
    atomic_bool bus_up;
    atomic_uint_fast64_t purges_sent, purges_received, purges_dropped;
    /* The bus: its thread, loop and connections (bus.c). */
    pthread_t bus_thread;
    struct um_loop *bus_loop;
    struct um__redis sub, pub;
    struct um_task bus_wake;
    pthread_mutex_t bus_lock;
    struct l2_msg *queue, **queue_tail; /* under bus_lock */
    size_t queued;
    atomic_bool bus_stop;
};

/* Logs once for the process that Redis went away, and once that it is back. */
void um__l2_note_down(struct um_l2 *l2, const char *what, const char *why);
void um__l2_note_up(struct um_l2 *l2);

/* bus.c: starts the bus thread (subscribes, publishes); stops and joins it. */
void um__l2_bus_start(struct um_l2 *l2);
void um__l2_bus_stop(struct um_l2 *l2);

#endif
