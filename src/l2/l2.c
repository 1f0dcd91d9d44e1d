/* SPDX-License-Identifier: BSD-2-Clause */
/* The second-level cache on Redis: the workers' side (see umbra/l2.h).
 *
 * A worker's state (its context's l2 slot) is one connection and the counters
 * of what is outstanding on it. A lookup is a struct get that lives until Redis answers
 * or the connection goes (hiredis then calls every pending callback with a NULL reply):
 * its timer, or a cancel, only detaches the caller (done = NULL), so that a late reply
 * never reaches a fill that went on without it. */
#include "internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "umbra/buf.h"
#include "umbra/log.h"
#include "umbra/metrics.h"
#include "umbra/module.h"

/* The worker's Redis connection (struct worker_l2). */
static void worker_stop(struct um_context *ctx, void *state);
static struct um_context_slot l2_slot = {.name = "l2 connection", .stop = worker_stop};

/* cache.l2 is read at start (the server makes the L2 before the workers): a reload keeps
 * the running one. */
static void check_reload(const struct um_config *was, const struct um_config *now, void *running)
{
    (void)running;
    const struct um_l2_conf *now_l2 = &um_cache_conf(now)->l2;
    const struct um_l2_conf *was_l2 = &um_cache_conf(was)->l2;
    if (now_l2->enabled != was_l2->enabled ||
        (now_l2->enabled &&
         (strcmp(now_l2->host, was_l2->host) != 0 || now_l2->port != was_l2->port ||
          now_l2->max_object != was_l2->max_object || now_l2->timeout != was_l2->timeout)))
        um_log_warn("SIGHUP: cache.l2 takes a restart; keeping the running L2 (%s)",
                    was_l2->enabled ? was_l2->host : "none");
}

/* The worker's counters: lookups by result, the latency of the ones answered (a
 * histogram by bounds_us, then +Inf, with its sum), writes sent and dropped. */
#define L2_BUCKETS 8
static const uint64_t bounds_us[L2_BUCKETS] = {250, 500, 1000, 2000, 5000, 10000, 25000, 50000};
enum {
    C_HITS, C_MISSES, C_ERRORS, C_TIMEOUTS, C_WRITES, C_DROPS,
    C_HIST, /* L2_BUCKETS + 1 of them */
    C_US_SUM = C_HIST + L2_BUCKETS + 1, C_ANSWERED, C_COUNT
};
static const struct um_metric_def counter_defs[C_COUNT] = {
    [C_HITS] = {"umbra_l2_hits_total", "counter",
                "Second-level (Redis) lookups that found the object.", NULL},
    [C_MISSES] = {"umbra_l2_misses_total", "counter", "Second-level lookups that did not.", NULL},
    [C_ERRORS] = {"umbra_l2_errors_total", "counter",
                  "Second-level lookups not made or failed (Redis down, error reply).", NULL},
    [C_TIMEOUTS] = {"umbra_l2_timeouts_total", "counter",
                    "Second-level lookups unanswered within cache.l2.timeout (the origin was "
                    "asked).",
                    NULL},
    [C_WRITES] = {"umbra_l2_writes_total", "counter", "Objects written to Redis.", NULL},
    [C_DROPS] = {"umbra_l2_write_drops_total", "counter",
                 "Writes dropped (Redis down, or too many bytes unanswered).", NULL},
    /* C_HIST to C_ANSWERED: no type, rendered by render_metrics as a histogram */
};
static struct um_metric_block counters = {counter_defs, C_COUNT, 0};

static void render_metrics(struct um_buf *b, void *running);
static void render_status(struct um_buf *b, void *running);

const struct um_module um_l2_module = {
    .name = "l2",
    .slots = (struct um_context_slot *const[]){&l2_slot, NULL},
    .check_reload = check_reload,
    .counters = &counters,
    .metrics = render_metrics,
    .status = render_status,
};

static uint64_t sum(size_t i)
{
    return um_metric_sum(&counters, i);
}

/* The L2's lines of /metrics, when it runs: its counters, the lookup latency histogram,
 * the state of its connections and the purge bus. */
static void render_metrics(struct um_buf *b, void *running)
{
    struct um_l2 *l2 = running;
    if (l2 == NULL)
        return;
    struct um_l2_state ls;
    um_l2_state(l2, &ls);
    um_metrics_render_block(b, &counters);
    uint64_t hist[L2_BUCKETS + 1];
    for (size_t k = 0; k <= L2_BUCKETS; k++)
        hist[k] = sum(C_HIST + k);
    um_metrics_histogram_us(b, "umbra_l2_lookup_seconds",
                            "Time Redis took to answer the lookups it answered.", bounds_us,
                            L2_BUCKETS, hist, sum(C_US_SUM), sum(C_ANSWERED));
    const struct {
        const char *name, *type, *help;
        uint64_t v;
    } state[] = {
        {"umbra_l2_connections_up", "gauge", "Worker connections to Redis that are up.",
         (uint64_t)ls.workers_up},
        {"umbra_l2_bus_up", "gauge", "The purge subscriber and publisher are connected.",
         ls.bus_up ? 1 : 0},
        {"umbra_l2_purges_sent_total", "counter", "Purges published to the other nodes.",
         ls.purges_sent},
        {"umbra_l2_purges_received_total", "counter", "Purges from other nodes applied here.",
         ls.purges_received},
        {"umbra_l2_purges_dropped_total", "counter",
         "Purges not published (Redis down): applied on this node only.", ls.purges_dropped},
    };
    for (size_t i = 0; i < sizeof(state) / sizeof(state[0]); i++)
        um_metrics_line(b, state[i].name, state[i].type, state[i].help, state[i].v);
}

/* The L2's member of /status.json. */
static void render_status(struct um_buf *b, void *running)
{
    struct um_l2_state ls;
    um_l2_state(running, &ls);
    um_buf_printf(b,
                  "\"l2\":{\"redis\":\"%s:%d\",\"state\":\"%s\",\"workers_up\":%d,"
                  "\"workers\":%d,\"bus_up\":%s,\"hits\":%llu,\"misses\":%llu,"
                  "\"errors\":%llu,\"timeouts\":%llu,\"writes\":%llu,\"write_drops\":%llu}",
                  ls.host, ls.port,
                  ls.workers_up == ls.workers && ls.bus_up ? "up"
                  : ls.workers_up == 0 && !ls.bus_up       ? "down"
                                                           : "partial",
                  ls.workers_up, ls.workers, ls.bus_up ? "true" : "false",
                  (unsigned long long)sum(C_HITS), (unsigned long long)sum(C_MISSES),
                  (unsigned long long)sum(C_ERRORS), (unsigned long long)sum(C_TIMEOUTS),
                  (unsigned long long)sum(C_WRITES), (unsigned long long)sum(C_DROPS));
}

#define L2_MAX_OUTSTANDING (8u << 20) /* bytes of writes sent and not answered, per worker */
#define L2_TIMEOUTS_TO_DROP 3          /* timeouts in a row that drop the connection */

struct worker_l2 {
    struct um_l2 *l2;
    struct um_context *ctx;
    struct um__redis conn;
    size_t outstanding; /* bytes of writes not answered */
    bool closing;       /* the loop stops: pending lookups end with UM_L2_CLOSED */
    unsigned timeouts_in_row;
    bool up; /* counted in workers_up */
};

struct get {
    struct worker_l2 *w;
    struct um_timer timer;
    void (*done)(void *arg, enum um_cache_l2_result res, const char *value, size_t len);
    void *arg;
    uint64_t started_us;
};

/* Microseconds of CLOCK_MONOTONIC: a lookup takes well under the loop's millisecond. */
static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---------------------------------------------------------------- logging once */

void um__l2_note_down(struct um_l2 *l2, const char *what, const char *why)
{
    if (!atomic_exchange(&l2->down_logged, true))
        um_log_warn("l2: Redis at %s:%d is unavailable (%s: %s); lookups go to the origin "
                    "until it is back", l2->host, l2->port, what, why);
}

void um__l2_note_up(struct um_l2 *l2)
{
    if (atomic_exchange(&l2->down_logged, false))
        um_log_info("l2: Redis at %s:%d is back", l2->host, l2->port);
}

/* ---------------------------------------------------------------- worker connection */

static void worker_on_up(struct um__redis *r)
{
    struct worker_l2 *w = r->data;
    w->timeouts_in_row = 0;
    w->up = true;
    atomic_fetch_add(&w->l2->workers_up, 1);
    um__l2_note_up(w->l2);
}

static void worker_on_down(struct um__redis *r, const char *why)
{
    struct worker_l2 *w = r->data;
    w->outstanding = 0; /* every write's callback has run */
    if (w->up) {
        w->up = false;
        atomic_fetch_sub(&w->l2->workers_up, 1);
    }
    um__l2_note_down(w->l2, "worker connection", why);
}

static void worker_stop(struct um_context *ctx, void *state)
{
    (void)ctx;
    struct worker_l2 *w = state;
    w->closing = true;
    um__redis_dispose(&w->conn);
    if (w->up) {
        w->up = false;
        atomic_fetch_sub(&w->l2->workers_up, 1);
    }
    um_context_set(w->ctx, &l2_slot, NULL);
    free(w);
}

static struct worker_l2 *worker_l2(struct um_l2 *l2, struct um_context *ctx)
{
    struct worker_l2 *w = um_context_get(ctx, &l2_slot);
    if (w)
        return w;
    w = um_calloc(1, sizeof(*w));
    w->l2 = l2;
    w->ctx = ctx;
    um_context_set(ctx, &l2_slot, w);
    um__redis_init(&w->conn, ctx->loop, l2->host, l2->port);
    w->conn.data = w;
    w->conn.on_up = worker_on_up;
    w->conn.on_down = worker_on_down;
    um__redis_start(&w->conn);
    return w;
}

void um_l2_worker_start(struct um_l2 *l2, struct um_context *ctx)
{
    worker_l2(l2, ctx);
}

/* ---------------------------------------------------------------- lookups */

static void get_done(struct get *g, enum um_cache_l2_result res, const char *v, size_t len)
{
    void (*done)(void *, enum um_cache_l2_result, const char *, size_t) = g->done;
    g->done = NULL;
    um_loop_timer_stop(g->w->ctx->loop, &g->timer);
    if (done)
        done(g->arg, res, v, len);
}

static void on_get_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)ac;
    struct get *g = priv;
    redisReply *rp = reply;
    if (g->done) {
        if (rp == NULL || rp->type == REDIS_REPLY_ERROR)
            um_counter_add(um_metric(&counters, C_ERRORS), 1);
        else
            um_counter_add(um_metric(&counters,
                                     rp->type == REDIS_REPLY_STRING ? C_HITS : C_MISSES), 1);
        if (rp) {
            uint64_t us = now_us() - g->started_us;
            size_t b = 0;
            while (b < L2_BUCKETS && us > bounds_us[b])
                b++;
            um_counter_add(um_metric(&counters, C_HIST + b), 1);
            um_counter_add(um_metric(&counters, C_ANSWERED), 1);
            um_counter_add(um_metric(&counters, C_US_SUM), us);
        }
    }
    if (rp)
        g->w->timeouts_in_row = 0;
    if (rp == NULL && g->w->closing)
        get_done(g, UM_L2_CLOSED, NULL, 0);
    else if (rp && rp->type == REDIS_REPLY_STRING)
        get_done(g, UM_L2_HIT, rp->str, (size_t)rp->len);
    else
        get_done(g, rp && rp->type == REDIS_REPLY_NIL ? UM_L2_MISS : UM_L2_UNAVAILABLE, NULL, 0);
    free(g);
}

static void on_get_timeout(struct um_timer *t)
{
    struct get *g = um_container_of(t, struct get, timer);
    struct worker_l2 *w = g->w;
    um_counter_add(um_metric(&counters, C_TIMEOUTS), 1);
    get_done(g, UM_L2_UNAVAILABLE, NULL, 0); /* g lives on until its reply */
    if (++w->timeouts_in_row >= L2_TIMEOUTS_TO_DROP && w->conn.ac) {
        w->timeouts_in_row = 0;
        um__redis_drop(&w->conn, "no reply within cache.l2.timeout");
    }
}

static void *l2_get(struct um_cache_l2 *c, struct um_context *ctx, um_str key,
                    void (*done)(void *, enum um_cache_l2_result, const char *, size_t),
                    void *arg)
{
    struct um_l2 *l2 = um_container_of(c, struct um_l2, cache);
    struct worker_l2 *w = worker_l2(l2, ctx);
    if (w->conn.ac == NULL) {
        um_counter_add(um_metric(&counters, C_ERRORS), 1);
        return NULL;
    }
    struct get *g = um_calloc(1, sizeof(*g));
    g->w = w;
    g->done = done;
    g->arg = arg;
    g->timer.cb = on_get_timeout;
    g->started_us = now_us();
    if (redisAsyncCommand(w->conn.ac, on_get_reply, g, "GET " L2_OBJ_PREFIX "%b", key.base,
                          key.len) != REDIS_OK) {
        free(g);
        um_counter_add(um_metric(&counters, C_ERRORS), 1);
        return NULL;
    }
    um_loop_timer_start(ctx->loop, &g->timer, l2->timeout_ms);
    return g;
}

static void l2_cancel(struct um_cache_l2 *c, struct um_context *ctx, void *h)
{
    (void)c;
    struct get *g = h;
    g->done = NULL;
    um_loop_timer_stop(ctx->loop, &g->timer);
}

/* ---------------------------------------------------------------- writes */

static void on_write_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    struct worker_l2 *w = ac->data ? ((struct um__redis *)ac->data)->data : NULL;
    size_t n = (size_t)(uintptr_t)priv;
    if (w && reply && w->outstanding >= n)
        w->outstanding -= n;
}

static void l2_put(struct um_cache_l2 *c, struct um_context *ctx, um_str key, const char *value,
                   size_t len, uint64_t ttl_ms, const um_str *tags, size_t ntags)
{
    struct um_l2 *l2 = um_container_of(c, struct um_l2, cache);
    struct worker_l2 *w = worker_l2(l2, ctx);
    size_t cost = len + key.len + 64;
    if (w->conn.state != UM__REDIS_UP || w->outstanding + cost > L2_MAX_OUTSTANDING) {
        um_counter_add(um_metric(&counters, C_DROPS), 1);
        return;
    }
    char ttl[24];
    snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)ttl_ms);
    if (redisAsyncCommand(w->conn.ac, on_write_reply, (void *)(uintptr_t)cost,
                          "SET " L2_OBJ_PREFIX "%b %b PX %s", key.base, key.len, value, len,
                          ttl) != REDIS_OK) {
        um_counter_add(um_metric(&counters, C_DROPS), 1);
        return;
    }
    w->outstanding += cost;
    um_counter_add(um_metric(&counters, C_WRITES), 1);
    /* A tag's set lives as long as its longest member: NX gives a new set its first
     * lifetime, GT lengthens it (Redis 7). */
    for (size_t i = 0; i < ntags && w->conn.ac; i++) {
        redisAsyncCommand(w->conn.ac, NULL, NULL, "SADD " L2_TAG_PREFIX "%b " L2_OBJ_PREFIX "%b",
                          tags[i].base, tags[i].len, key.base, key.len);
        redisAsyncCommand(w->conn.ac, NULL, NULL, "PEXPIRE " L2_TAG_PREFIX "%b %s NX",
                          tags[i].base, tags[i].len, ttl);
        redisAsyncCommand(w->conn.ac, NULL, NULL, "PEXPIRE " L2_TAG_PREFIX "%b %s GT",
                          tags[i].base, tags[i].len, ttl);
    }
}

static const struct um_cache_l2_ops l2_ops = {.get = l2_get, .cancel = l2_cancel, .put = l2_put};

/* ---------------------------------------------------------------- the process's L2 */

struct um_l2 *um_l2_create(const struct um_config *config, um_l2_apply_cb apply, void *arg)
{
    const struct um_cache_conf *cc = um_cache_conf(config);
    struct um_l2 *l2 = um_calloc(1, sizeof(*l2));
    snprintf(l2->host, sizeof(l2->host), "%s", cc->l2.host);
    l2->port = cc->l2.port;
    l2->timeout_ms = (uint64_t)(cc->l2.timeout * 1000 + 0.5);
    if (l2->timeout_ms == 0)
        l2->timeout_ms = 1;
    l2->workers = config->workers;
    l2->cache.ops = &l2_ops;
    l2->cache.max_object = (size_t)cc->l2.max_object;
    l2->apply = apply;
    l2->apply_arg = arg;
    um__l2_bus_start(l2);
    return l2;
}

void um_l2_destroy(struct um_l2 *l2)
{
    if (l2 == NULL)
        return;
    um__l2_bus_stop(l2);
    free(l2);
}

struct um_cache_l2 *um_l2_cache(struct um_l2 *l2)
{
    return &l2->cache;
}

void um_l2_state(struct um_l2 *l2, struct um_l2_state *st)
{
    memset(st, 0, sizeof(*st));
    st->host = l2->host;
    st->port = l2->port;
    st->workers = l2->workers;
    st->workers_up = atomic_load(&l2->workers_up);
    st->bus_up = atomic_load(&l2->bus_up);
    st->purges_sent = atomic_load(&l2->purges_sent);
    st->purges_received = atomic_load(&l2->purges_received);
    st->purges_dropped = atomic_load(&l2->purges_dropped);
}
