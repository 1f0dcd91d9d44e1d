/* SPDX-License-Identifier: BSD-2-Clause */
/* The cluster: a ring of Umbra nodes sharing their caches (README "Cluster").
 *
 * Every cache key has one owner among the nodes, by rendezvous (highest random weight)
 * hashing: each node scores hash(node, key) and the highest score owns the key, so adding
 * or removing a node moves only the keys it wins or held (about 1/N of them). A node that
 * misses a key another node owns fills it from that owner (a signed peer request, on the
 * upstream floor's kept-alive HTTP/1.1 client), and stores the answer like any other; the
 * owner answers from its own cache or fills from the origin once for the whole ring, and
 * never forwards a peer's request again. A peer that fails is skipped for a while (its
 * keys go to the next node in rendezvous order, which may be this one: the origin), so a
 * dead peer costs hit ratio, never an answer.
 *
 * Purges made on one node are sent to every other node (signed HTTP PURGE) by a thread of
 * the cluster's own, so that neither a worker nor the admin thread ever waits on a peer.
 *
 * Threads: made and destroyed on the main thread with the runtime; the fill origin runs on
 * the workers; the peers' health and the counters are shared (relaxed atomics). */
#ifndef UMBRA_CLUSTER_H
#define UMBRA_CLUSTER_H

#include <stdint.h>

#include "umbra/cacheorigin.h"
#include "umbra/common.h"
#include "umbra/config.h"
#include "umbra/origin.h"

/* cluster = { self = "IP:PORT", peers = { "IP:PORT", ... }, secret = "..." }: the
 * nodes of a ring (umbra/cluster.h). enabled false: no cluster. */
struct um_cluster_conf {
    bool enabled;
    struct um_upstream_server *peers; /* every node, self included, as "http://IP:PORT"
                                         servers (url, addr); in the file's order */
    size_t num_peers;                 /* >= 1 */
    size_t self;                      /* index of this node among peers */
    char *secret;                     /* the shared secret (>= 16 bytes) */
    int line;
};

/* The module's settings and record (umbra/settings.h, umbra/module.h); its part of a
 * snapshot: um_cluster_conf(c). */
extern const struct um_settings um_cluster_settings;
extern const struct um_module um_cluster_module;
static inline const struct um_cluster_conf *um_cluster_conf(const struct um_config *c)
{
    return um_config_part(c, &um_cluster_settings);
}

struct um_cluster;
struct um_buf;

/* The request field that carries a peer's signature: "ts=UNIX, key=HEX, sig=HEX". */
#define UM_CLUSTER_HEADER "Umbra-Peer"
/* Seconds a signature stays good (either way, for clocks a little apart). */
#define UM_CLUSTER_WINDOW 10

/* ---------------------------------------------------------------- the ring (ring.c) */

/* The rendezvous weight of member (its id, e.g. "http://10.0.0.2:80") for key. */
uint64_t um_cluster_weight(um_str member, um_str key);
/* The owner of key among the n members: the index of the highest weight among those
 * usable(arg, i) says are usable (usable NULL: all), or -1 when none is. O(n). */
int um_cluster_owner(const um_str *members, size_t n, um_str key,
                     bool (*usable)(void *arg, size_t i), void *arg);

/* ---------------------------------------------------------------- signatures (sign.c) */

/* The shared secret's HMAC-SHA256 key schedule, made once (main thread) and used by any
 * thread. destroy accepts NULL. */
struct um_cluster_mac;
struct um_cluster_mac *um_cluster_mac_create(const char *secret);
void um_cluster_mac_destroy(struct um_cluster_mac *m);

/* Writes the value of the Umbra-Peer field for a request (method, target) about key at
 * time now (Unix seconds) into out (NUL-terminated). Returns its length, or 0 when it does
 * not fit in outsz bytes. */
size_t um_cluster_sign(const struct um_cluster_mac *secret, um_str method, um_str target,
                       um_str key, int64_t now, char *out, size_t outsz);
/* The length um_cluster_sign needs for a key of klen bytes, NUL included. */
size_t um_cluster_sign_len(size_t klen);
/* Checks an Umbra-Peer value v for the request (method, target) at time now: true when
 * it was signed with secret less than UM_CLUSTER_WINDOW seconds from now; the key it
 * carries is then written into key (keysz bytes; *klen its length). */
bool um_cluster_verify(const struct um_cluster_mac *secret, um_str method, um_str target, um_str v,
                       int64_t now, char *key, size_t keysz, size_t *klen);

/* ---------------------------------------------------------------- the cluster */

/* Makes the cluster of config (NULL when config->cluster.enabled is false) and starts its
 * purge thread. config must outlive it. Main thread. */
struct um_cluster *um_cluster_create(const struct um_config *config);
/* Stops the purge thread (the purges still queued are dropped) and frees c (may be NULL).
 * Main thread, once no worker uses c. */
void um_cluster_destroy(struct um_cluster *c);
/* The shared secret's key schedule, for checking the Umbra-Peer field of incoming
 * requests; lives as long as c. */
const struct um_cluster_mac *um_cluster_secret(const struct um_cluster *c);

/* The origin a caching route fills from (umbra/cacheorigin.h's um_cache_ring): a fill
 * whose key a live peer owns goes to that peer (signed, with the key), falling back to
 * inner when the peer fails before it answers; other fills, and fills for a request that
 * came from a peer (um_fetch.from_peer), go to inner. inner is borrowed: it must outlive
 * the origin. Destroy through ops->destroy (inner stays). */
struct um_origin *um_cluster_fill_origin_create(struct um_cluster *c, struct um_origin *inner);

/* Sends purge p (applied locally already) to every other live node, signed, from the
 * cluster's thread: copies what it needs and returns at once. Any thread. */
void um_cluster_purge_fanout(struct um_cluster *c, const struct um_purge *p);

/* Notes purge p, applied on this node (its own, or a peer's): for UM_CLUSTER_GUARD_MS,
 * fills of what it may have touched go to the origin, not to their owner, which may not
 * have applied it yet (the fan-out takes a few milliseconds) and would hand the old copy
 * back: a URL's key; after a prefix purge, every key; after a tag purge, an owner's answer
 * that carries the tag is dropped and the origin asked instead. Any thread. */
#define UM_CLUSTER_GUARD_MS 200
void um_cluster_note_purge(const struct um_purge *p);

/* Counts a peer request served here (a valid signature), or one refused (a field that was
 * forged, stale or not for this cluster: the request was served as an ordinary client's).
 * Any thread. */
void um_cluster_count_served(void);
void um_cluster_count_rejected(void);

/* The Prometheus lines of the cluster (nothing when no cluster was ever made), and its
 * part of /status.json ("\"cluster\":{...}," or nothing). Any thread. */
void um_cluster_write_metrics(struct um_buf *b);
void um_cluster_write_json(struct um_buf *b);

#endif
