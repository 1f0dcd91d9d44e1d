/* SPDX-License-Identifier: BSD-2-Clause */
/* The cluster object (umbra/cluster.h): the members, their upstream origins, the peers'
 * health and counters, and the purge thread.
 *
 * Health and counters live in a process-wide table of peers, one slot per peer address,
 * registered on the main thread like the metrics' labels: a reload makes a new cluster,
 * and a peer that was out stays out, its counters going on. Slots are written before the
 * count that publishes them (release), and read after it (acquire); the fields are
 * relaxed atomics (misses and purges only: never on the hit path).
 *
 * The purge thread: purges are queued (mutex and condition variable) by any thread and
 * sent by this one, one peer after the other, each over a kept-alive connection with
 * short timeouts; a peer that fails is marked down like a failed fill. A purge a peer
 * could not take (down, unreachable) waits in that peer's backlog, and the peer's later
 * purges behind it, so that they reach it in order once it is back: the backlogs are
 * tried again every PURGE_RETRY_MS while no new purge is queued. A peer that answers
 * but refuses a purge (another secret) does not get it again. Blocking I/O is fine here:
 * nothing else runs on this thread. */
#include "internal.h"
#include "umbra/module.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "umbra/buf.h"
#include "umbra/log.h"
#include "umbra/upstream.h"

#define MAX_SLOTS 1024
#define PURGE_CONNECT_MS 500
#define PURGE_IO_MS 1000
#define MAX_QUEUED 10000
#define PURGE_RETRY_MS 1000
#define MAX_BACKLOG 10000 /* per peer; past it the oldest purge is dropped, and logged */

static struct um__peer_stats slots[MAX_SLOTS];
static _Atomic size_t num_slots;
static _Atomic uint64_t served, rejected;
static _Atomic bool ever;

uint64_t um__cluster_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct um__peer_stats *slot_of(const char *url, bool self)
{
    size_t n = atomic_load_explicit(&num_slots, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
        if (strcmp(slots[i].url, url) == 0) {
            atomic_store_explicit(&slots[i].self, self, memory_order_relaxed);
            return &slots[i];
        }
    if (n == MAX_SLOTS) return &slots[MAX_SLOTS - 1]; /* what does not fit shares the last slot */
    snprintf(slots[n].url, sizeof slots[n].url, "%s", url);
    atomic_store_explicit(&slots[n].self, self, memory_order_relaxed);
    atomic_store_explicit(&num_slots, n + 1, memory_order_release);
    return &slots[n];
}

void um__cluster_peer_failed(struct um__peer *p, const char *why)
{
    uint64_t now = um__cluster_now_ms();
    if (atomic_load_explicit(&p->st->down_until, memory_order_relaxed) <= now)
        um_log_warn("cluster: peer %s failed (%s); skipped for %d s", p->id.base, why,
                    UM__PEER_DOWN_MS / 1000);
    atomic_store_explicit(&p->st->down_until, now + UM__PEER_DOWN_MS, memory_order_relaxed);
}

bool um__cluster_peer_usable(const struct um__peer *p, uint64_t now)
{
    return atomic_load_explicit(&p->st->down_until, memory_order_relaxed) <= now;
}

/* ---------------------------------------------------------------- purge guard */

/* The keys of the last GUARD_KEYS URL purges and when, and when the last prefix or tag
 * purge was (those may touch any key). A pair read while another thread writes it may mix
 * two purges: at worst one fill goes to the origin instead of the owner. */
#define GUARD_KEYS 256
static struct {
    _Atomic uint64_t hash, at;
} guard_keys[GUARD_KEYS];
static _Atomic unsigned guard_next;
static struct {
    _Atomic uint64_t hash, at;
} guard_tags[GUARD_KEYS];
static _Atomic unsigned guard_tag_next;
static _Atomic uint64_t guard_broad;
/* When the last URL / tag purge was noted: a fill long after it skips the scan. */
static _Atomic uint64_t guard_key_last, guard_tag_last;

static uint64_t key_hash(um_str k)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < k.len; i++) {
        h ^= (unsigned char)k.base[i];
        h *= 0x100000001b3ull;
    }
    return h | 1; /* never 0, the value of an empty slot */
}

void um_cluster_note_purge(const struct um_purge *p)
{
    uint64_t now = um__cluster_now_ms();
    if (p->kind == UM_PURGE_TAGS) {
        /* Checked against the tags of the owner's answers (um__cluster_tags_recently_purged):
         * which keys carry a tag is only known from the answer. */
        for (size_t t = 0; t < p->ntags; t++) {
            unsigned i =
                atomic_fetch_add_explicit(&guard_tag_next, 1, memory_order_relaxed) % GUARD_KEYS;
            atomic_store_explicit(&guard_tags[i].at, now, memory_order_relaxed);
            atomic_store_explicit(&guard_tags[i].hash, key_hash(p->tags[t]), memory_order_relaxed);
        }
        atomic_store_explicit(&guard_tag_last, now, memory_order_release);
        return;
    }
    if (p->kind == UM_PURGE_PREFIX) {
        atomic_store_explicit(&guard_broad, now, memory_order_relaxed);
        return;
    }
    unsigned i = atomic_fetch_add_explicit(&guard_next, 1, memory_order_relaxed) % GUARD_KEYS;
    atomic_store_explicit(&guard_keys[i].at, now, memory_order_relaxed);
    atomic_store_explicit(&guard_keys[i].hash, key_hash(p->key), memory_order_relaxed);
    atomic_store_explicit(&guard_key_last, now, memory_order_release);
}

bool um__cluster_recently_purged(um_str key, uint64_t now)
{
    uint64_t b = atomic_load_explicit(&guard_broad, memory_order_relaxed);
    if (b != 0 && now - b < UM_CLUSTER_GUARD_MS) return true;
    uint64_t last = atomic_load_explicit(&guard_key_last, memory_order_acquire);
    if (last == 0 || now - last >= UM_CLUSTER_GUARD_MS) return false;
    uint64_t h = key_hash(key);
    for (size_t i = 0; i < GUARD_KEYS; i++) {
        if (atomic_load_explicit(&guard_keys[i].hash, memory_order_relaxed) != h) continue;
        uint64_t at = atomic_load_explicit(&guard_keys[i].at, memory_order_relaxed);
        if (now - at < UM_CLUSTER_GUARD_MS) return true;
    }
    return false;
}

static bool tag_recent(um_str tag, uint64_t now)
{
    uint64_t h = key_hash(tag);
    for (size_t i = 0; i < GUARD_KEYS; i++) {
        if (atomic_load_explicit(&guard_tags[i].hash, memory_order_relaxed) != h) continue;
        if (now - atomic_load_explicit(&guard_tags[i].at, memory_order_relaxed) <
            UM_CLUSTER_GUARD_MS)
            return true;
    }
    return false;
}

bool um__cluster_tags_recently_purged(const struct um_header *h, size_t n, uint64_t now)
{
    uint64_t last = atomic_load_explicit(&guard_tag_last, memory_order_acquire);
    if (last == 0 || now - last >= UM_CLUSTER_GUARD_MS)
        return false; /* no tag purge lately */
    for (size_t i = 0; i < n; i++) {
        um_str name = h[i].name, v = h[i].value;
        if (!um_str_eq_ci(name, "surrogate-key") && !um_str_eq_ci(name, "cache-tag") &&
            !um_str_eq_ci(name, "xkey"))
            continue;
        size_t j = 0;
        while (j < v.len) {
            while (j < v.len && (v.base[j] == ' ' || v.base[j] == '\t' || v.base[j] == ','))
                j++;
            size_t s0 = j;
            while (j < v.len && v.base[j] != ' ' && v.base[j] != '\t' && v.base[j] != ',')
                j++;
            if (j > s0 && tag_recent((um_str){v.base + s0, j - s0}, now)) return true;
        }
    }
    return false;
}

void um_cluster_count_served(void)
{
    atomic_fetch_add_explicit(&served, 1, memory_order_relaxed);
}

void um_cluster_count_rejected(void)
{
    atomic_fetch_add_explicit(&rejected, 1, memory_order_relaxed);
}

const struct um_cluster_mac *um_cluster_secret(const struct um_cluster *c)
{
    return c->mac;
}

/* ---------------------------------------------------------------- purge thread */

struct purge_msg {
    struct purge_msg *next;
    size_t len;
    char desc[]; /* "soft|hard key|prefix|tags ..." */
};

static int connect_peer(const struct um__peer *p)
{
    const struct um_upstream_server *sv = p->server;
    int fd = socket(sv->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (const struct sockaddr *)&sv->addr, sv->addrlen) != 0) {
        if (errno != EINPROGRESS) goto fail;
        struct pollfd pf = {fd, POLLOUT, 0};
        if (poll(&pf, 1, PURGE_CONNECT_MS) != 1) goto fail;
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) goto fail;
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    struct timeval tv = {PURGE_IO_MS / 1000, (PURGE_IO_MS % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
fail:
    close(fd);
    return -1;
}

/* Sends req on p's connection and reads the answer's head and body; returns the status,
 * or -1 when the connection failed. */
static int exchange_once(struct um__peer *p, const char *req, size_t len)
{
    if (p->fd < 0 && (p->fd = connect_peer(p)) < 0) return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = send(p->fd, req + off, len - off, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        off += (size_t)w;
    }
    char buf[4096];
    size_t have = 0;
    char *end = NULL;
    while (end == NULL) {
        if (have == sizeof buf - 1) return -1;
        ssize_t r = recv(p->fd, buf + have, sizeof buf - 1 - have, 0);
        if (r <= 0) return -1;
        have += (size_t)r;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    if (have < 12 || memcmp(buf, "HTTP/1.", 7) != 0) return -1;
    int status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
    /* Content-Length (our own answers always have one): skip the body. */
    size_t hl = (size_t)(end + 4 - buf), cl = 0;
    for (char *l = strstr(buf, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n"))
        if (strncasecmp(l + 2, "content-length:", 15) == 0) cl = strtoul(l + 17, NULL, 10);
    /* Whether the peer closes after this answer: looked for in the head only. */
    char save = end[2];
    end[2] = '\0';
    bool closing = strcasestr(buf, "\r\nconnection: close") != NULL;
    end[2] = save;
    size_t body = have - hl;
    while (body < cl) {
        ssize_t r = recv(p->fd, buf, sizeof buf < cl - body ? sizeof buf : cl - body, 0);
        if (r <= 0) return -1;
        body += (size_t)r;
    }
    if (closing) {
        close(p->fd);
        p->fd = -1;
    }
    return status;
}

enum sent { SENT, REFUSED, UNREACHABLE };

static enum sent send_purge(struct um_cluster *c, struct um__peer *p, const struct purge_msg *m)
{
    size_t sl = um_cluster_sign_len(m->len);
    size_t cap = sl + 256;
    char *req = um_malloc(cap);
    int64_t now = (int64_t)time(NULL);
    int o = snprintf(req, cap,
                     "PURGE / HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n%s: ", p->id.base + 7,
                     UM_CLUSTER_HEADER);
    size_t n = um_cluster_sign(um_cluster_secret(c), UM_STR("PURGE"), UM_STR("/"),
                               (um_str){m->desc, m->len}, now, req + o, cap - (size_t)o);
    if (n == 0) {
        free(req);
        return REFUSED; /* cannot be signed: never will */
    }
    size_t len = (size_t)o + n;
    memcpy(req + len, "\r\n\r\n", 4);
    len += 4;
    bool reused = p->fd >= 0;
    int st = exchange_once(p, req, len);
    if (st < 0 && reused) {
        /* The kept connection may have been closed meanwhile: once more on a new one. */
        close(p->fd);
        p->fd = -1;
        st = exchange_once(p, req, len);
    }
    free(req);
    if (st == 200) {
        atomic_fetch_add_explicit(&p->st->purges_sent, 1, memory_order_relaxed);
        return SENT;
    }
    atomic_fetch_add_explicit(&p->st->purges_failed, 1, memory_order_relaxed);
    if (p->fd >= 0) {
        close(p->fd);
        p->fd = -1;
    }
    /* A peer that cannot be reached is skipped for a while (by fills too); one that
     * answers but refuses (another secret, no cache) is only logged. */
    if (st < 0) {
        um__cluster_peer_failed(p, "purge: no connection");
        return UNREACHABLE;
    }
    um_log_warn("cluster: peer %s refused a purge (status %d)", p->id.base, st);
    return REFUSED;
}

static struct purge_msg *msg_copy(const struct purge_msg *m)
{
    struct purge_msg *k = um_malloc(sizeof(*k) + m->len + 1);
    k->next = NULL;
    k->len = m->len;
    memcpy(k->desc, m->desc, m->len + 1);
    return k;
}

static void backlog_add(struct um__peer *p, const struct purge_msg *m)
{
    if (p->num_backlog == MAX_BACKLOG) {
        struct purge_msg *old = p->backlog;
        p->backlog = old->next;
        p->num_backlog--;
        free(old);
        atomic_fetch_add_explicit(&p->st->purges_failed, 1, memory_order_relaxed);
        um_log_warn("cluster: peer %s has %d purges waiting; the oldest is dropped", p->id.base,
                    MAX_BACKLOG);
    }
    struct purge_msg *k = msg_copy(m);
    if (p->backlog)
        p->backlog_tail->next = k;
    else
        p->backlog = k;
    p->backlog_tail = k;
    p->num_backlog++;
    atomic_store_explicit(&p->st->purges_pending, p->num_backlog, memory_order_relaxed);
}

/* Sends p's backlog, oldest first, while p takes it. */
static void backlog_send(struct um_cluster *c, struct um__peer *p, uint64_t now)
{
    while (p->backlog && um__cluster_peer_usable(p, now)) {
        struct purge_msg *m = p->backlog;
        if (send_purge(c, p, m) == UNREACHABLE) break;
        p->backlog = m->next;
        p->num_backlog--;
        free(m);
        now = um__cluster_now_ms();
    }
    if (p->backlog == NULL) p->backlog_tail = NULL;
    atomic_store_explicit(&p->st->purges_pending, p->num_backlog, memory_order_relaxed);
}

/* m to p: at once when p is in use and has nothing waiting, else behind what waits. */
static void deliver(struct um_cluster *c, struct um__peer *p, const struct purge_msg *m,
                    uint64_t now)
{
    if (p->backlog == NULL && um__cluster_peer_usable(p, now) &&
        send_purge(c, p, m) != UNREACHABLE)
        return;
    backlog_add(p, m);
}

static bool any_backlog(const struct um_cluster *c)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->peers[i].backlog) return true;
    return false;
}

static void *purge_thread(void *arg)
{
    struct um_cluster *c = arg;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        if (c->queue == NULL && !c->stop) {
            if (any_backlog(c)) {
                struct timespec until;
                clock_gettime(CLOCK_MONOTONIC, &until);
                until.tv_nsec += (PURGE_RETRY_MS % 1000) * 1000000L;
                until.tv_sec += PURGE_RETRY_MS / 1000 + until.tv_nsec / 1000000000L;
                until.tv_nsec %= 1000000000L;
                pthread_cond_timedwait(&c->cond, &c->lock, &until);
            } else {
                pthread_cond_wait(&c->cond, &c->lock);
            }
        }
        if (c->stop) break;
        struct purge_msg *m = c->queue;
        if (m) {
            c->queue = m->next;
            if (c->queue == NULL) c->queue_tail = NULL;
            c->queued--;
        }
        pthread_mutex_unlock(&c->lock);
        uint64_t now = um__cluster_now_ms();
        for (size_t i = 0; i < c->n; i++) {
            if (i == c->self) continue;
            if (m)
                deliver(c, &c->peers[i], m, now);
            else
                backlog_send(c, &c->peers[i], now); /* the retry: nothing new queued */
        }
        free(m);
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

void um_cluster_purge_fanout(struct um_cluster *c, const struct um_purge *p)
{
    if (c == NULL || c->n < 2) return;
    um_cluster_note_purge(p);
    struct um_buf b = {0};
    if (!um_purge_encode(p, &b)) {
        um_buf_dispose(&b);
        return; /* no such key, host or tag (an admin's form may decode one) */
    }
    struct purge_msg *m = um_malloc(sizeof(*m) + b.len + 1);
    m->next = NULL;
    m->len = b.len;
    memcpy(m->desc, b.base, b.len);
    m->desc[b.len] = '\0';
    um_buf_dispose(&b);
    pthread_mutex_lock(&c->lock);
    if (c->queued >= MAX_QUEUED) {
        pthread_mutex_unlock(&c->lock);
        um_log_warn("cluster: %d purges queued already; this one is not sent to the peers",
                    MAX_QUEUED);
        free(m);
        return;
    }
    if (c->queue_tail)
        c->queue_tail->next = m;
    else
        c->queue = m;
    c->queue_tail = m;
    c->queued++;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

/* ---------------------------------------------------------------- create, destroy */

const struct um_module um_cluster_module = {
    .name = "cluster",
    .settings = &um_cluster_settings,
};

struct um_cluster *um_cluster_create(const struct um_config *config)
{
    const struct um_cluster_conf *cc = um_cluster_conf(config);
    if (!cc->enabled) return NULL;
    struct um_cluster *c = um_calloc(1, sizeof(*c));
    c->config = config;
    c->n = cc->num_peers;
    c->self = cc->self;
    c->mac = um_cluster_mac_create(cc->secret);
    c->peers = um_calloc(c->n, sizeof(*c->peers));
    c->ids = um_calloc(c->n, sizeof(*c->ids));
    for (size_t i = 0; i < c->n; i++) {
        struct um__peer *p = &c->peers[i];
        p->server = &cc->peers[i];
        p->id = (um_str){p->server->url, strlen(p->server->url)};
        c->ids[i] = p->id;
        p->fd = -1;
        p->st = slot_of(p->server->url, i == c->self);
        if (i == c->self) continue;
        /* Each peer is an upstream of one server: Umbra's own kept-alive HTTP/1.1 client,
         * its connect errors and timeouts, its per-server metrics (upstream "cluster"). */
        p->conf = (struct um_upstream_conf){
            .name = "cluster",
            .servers = (struct um_upstream_server *)p->server,
            .num_servers = 1,
            .balance = UM_BALANCE_ROUND_ROBIN,
            .connect_timeout = 1,
            .timeout = 30,
            .retries = 0,
            .tls_verify = true,
            .max_fails = 1,
            .fail_timeout = UM__PEER_DOWN_MS / 1000.0,
            .line = cc->line,
        };
        p->origin = um_upstream_origin_create(&p->conf);
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&c->thread, NULL, purge_thread, c) != 0)
        UM_ASSERT(!"cluster: cannot start the purge thread");
    atomic_store(&ever, true);
    return c;
}

void um_cluster_destroy(struct um_cluster *c)
{
    if (c == NULL) return;
    pthread_mutex_lock(&c->lock);
    c->stop = true;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL);
    while (c->queue) {
        struct purge_msg *m = c->queue;
        c->queue = m->next;
        free(m);
    }
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    for (size_t i = 0; i < c->n; i++) {
        struct um__peer *p = &c->peers[i];
        if (p->origin) p->origin->ops->destroy(p->origin);
        if (p->fd >= 0) close(p->fd);
        while (p->backlog) {
            struct purge_msg *m = p->backlog;
            p->backlog = m->next;
            free(m);
        }
        if (p->st) atomic_store_explicit(&p->st->purges_pending, 0, memory_order_relaxed);
    }
    free(c->peers);
    free(c->ids);
    um_cluster_mac_destroy(c->mac);
    free(c);
}

/* ---------------------------------------------------------------- metrics, status */

void um_cluster_write_metrics(struct um_buf *b)
{
    if (!atomic_load(&ever)) return;
    size_t n = atomic_load_explicit(&num_slots, memory_order_acquire);
    uint64_t now = um__cluster_now_ms();
    um_buf_printf(b,
                  "# HELP umbra_cluster_peers Nodes of the ring, this one included.\n"
                  "# TYPE umbra_cluster_peers gauge\numbra_cluster_peers %zu\n",
                  n);
    um_buf_printf(b, "# HELP umbra_cluster_peer_up 1 when the peer is in use, 0 while it is "
                     "skipped after a failure (this node: always 1).\n"
                     "# TYPE umbra_cluster_peer_up gauge\n");
    for (size_t i = 0; i < n; i++)
        um_buf_printf(b, "umbra_cluster_peer_up{peer=\"%s\",self=\"%s\"} %d\n", slots[i].url,
                      atomic_load_explicit(&slots[i].self, memory_order_relaxed) ? "true" : "false",
                      atomic_load_explicit(&slots[i].down_until, memory_order_relaxed) <= now);
    static const struct {
        const char *name, *help;
        size_t off;
    } per[] = {
        {"umbra_cluster_peer_fetches_total", "Cache fills fetched from the key's owner.",
         offsetof(struct um__peer_stats, fetch_ok)},
        {"umbra_cluster_peer_fetch_failures_total",
         "Fills from an owner that failed (then fetched from the origin).",
         offsetof(struct um__peer_stats, fetch_failed)},
        {"umbra_cluster_purges_sent_total", "Purges sent to the peer and applied there.",
         offsetof(struct um__peer_stats, purges_sent)},
        {"umbra_cluster_purge_failures_total",
         "Purge attempts the peer did not take (one it could not be reached for waits in its "
         "backlog and is sent again).",
         offsetof(struct um__peer_stats, purges_failed)},
        {"umbra_cluster_purges_pending", "Purges waiting in the peer's backlog.",
         offsetof(struct um__peer_stats, purges_pending)},
    };
    for (size_t k = 0; k < UM_NELEMS(per); k++) {
        bool gauge = per[k].off == offsetof(struct um__peer_stats, purges_pending);
        um_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", per[k].name, per[k].help, per[k].name,
                      gauge ? "gauge" : "counter");
        for (size_t i = 0; i < n; i++) {
            if (atomic_load_explicit(&slots[i].self, memory_order_relaxed)) continue;
            _Atomic uint64_t *v = (_Atomic uint64_t *)((char *)&slots[i] + per[k].off);
            um_buf_printf(b, "%s{peer=\"%s\"} %llu\n", per[k].name, slots[i].url,
                          (unsigned long long)atomic_load_explicit(v, memory_order_relaxed));
        }
    }
    um_buf_printf(b,
                  "# HELP umbra_cluster_peer_requests_served_total Signed requests from "
                  "peers answered here.\n# TYPE umbra_cluster_peer_requests_served_total "
                  "counter\numbra_cluster_peer_requests_served_total %llu\n",
                  (unsigned long long)atomic_load(&served));
    um_buf_printf(b,
                  "# HELP umbra_cluster_peer_requests_rejected_total Requests with an "
                  "Umbra-Peer field that was forged, stale or not ours (served as an "
                  "ordinary client's).\n# TYPE umbra_cluster_peer_requests_rejected_total "
                  "counter\numbra_cluster_peer_requests_rejected_total %llu\n",
                  (unsigned long long)atomic_load(&rejected));
}

void um_cluster_write_json(struct um_buf *b)
{
    if (!atomic_load(&ever)) return;
    size_t n = atomic_load_explicit(&num_slots, memory_order_acquire);
    uint64_t now = um__cluster_now_ms();
    um_buf_printf(b, "\"cluster\":{\"served\":%llu,\"rejected\":%llu,\"peers\":[",
                  (unsigned long long)atomic_load(&served),
                  (unsigned long long)atomic_load(&rejected));
    for (size_t i = 0; i < n; i++) {
        const struct um__peer_stats *s = &slots[i];
        um_buf_printf(
            b,
            "%s{\"peer\":\"%s\",\"self\":%s,\"up\":%s,\"fetches\":%llu,"
            "\"fetch_failures\":%llu,\"purges_sent\":%llu,\"purge_failures\":%llu,"
            "\"purges_pending\":%llu}",
            i ? "," : "", s->url,
            atomic_load_explicit(&s->self, memory_order_relaxed) ? "true" : "false",
            atomic_load_explicit(&s->down_until, memory_order_relaxed) <= now ? "true" : "false",
            (unsigned long long)atomic_load_explicit(&s->fetch_ok, memory_order_relaxed),
            (unsigned long long)atomic_load_explicit(&s->fetch_failed, memory_order_relaxed),
            (unsigned long long)atomic_load_explicit(&s->purges_sent, memory_order_relaxed),
            (unsigned long long)atomic_load_explicit(&s->purges_failed, memory_order_relaxed),
            (unsigned long long)atomic_load_explicit(&s->purges_pending, memory_order_relaxed));
    }
    um_buf_append(b, "]},", 3);
}
