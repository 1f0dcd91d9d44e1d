/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the cluster floor share: the ring, the cluster object, its peers and
 * their slots of health and counters (cluster.c's note). For src/cluster/ only. */
#ifndef UMBRA_CLUSTER_INTERNAL_H
#define UMBRA_CLUSTER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>


#include "umbra/cluster.h"

/* How long a peer that failed is skipped. */
#define UM__PEER_DOWN_MS 5000

/* A peer's health and counters, process-wide (they outlive a reload's cluster). */
struct um__peer_stats {
    char url[80];
    _Atomic bool self;
    _Atomic uint64_t down_until; /* monotonic ms */
    _Atomic uint64_t fetch_ok, fetch_failed, purges_sent, purges_failed;
    _Atomic uint64_t purges_pending; /* in the backlog, for the metrics */
};

struct um__peer {
    const struct um_upstream_server *server; /* the config's */
    um_str id;                               /* its url, "http://IP:PORT" (NUL-terminated) */
    struct um_upstream_conf conf;            /* the one-server upstream of origin */
    struct um_origin *origin;                /* NULL for this node */
    struct um__peer_stats *st;
    int fd; /* the purge thread's kept-alive connection, or -1 */
    /* Purges the peer has not taken yet (down, unreachable), oldest first, sent again
     * in order when it is back. The purge thread's alone. */
    struct purge_msg *backlog, *backlog_tail;
    size_t num_backlog;
};

struct purge_msg;

struct um_cluster {
    const struct um_config *config;
    size_t n, self;
    struct um__peer *peers;
    um_str *ids; /* the peers' ids, for um_cluster_owner */
    struct um_cluster_mac *mac;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct purge_msg *queue, *queue_tail; /* under lock */
    size_t queued;
    bool stop;
};

uint64_t um__cluster_now_ms(void);
/* Whether a purge noted (um_cluster_note_purge) less than UM_CLUSTER_GUARD_MS before now
 * may have touched key. */
bool um__cluster_recently_purged(um_str key, uint64_t now);
/* Whether an answer with the fields h[0..n) carries a tag a purge noted less than
 * UM_CLUSTER_GUARD_MS before now named. */
bool um__cluster_tags_recently_purged(const struct um_header *h, size_t n, uint64_t now);
/* Takes p out for UM__PEER_DOWN_MS (logged when it was in). */
void um__cluster_peer_failed(struct um__peer *p, const char *why);
bool um__cluster_peer_usable(const struct um__peer *p, uint64_t now);

#endif
