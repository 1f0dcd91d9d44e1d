/* SPDX-License-Identifier: BSD-2-Clause */
/* Metrics: per-worker counters, summed when read (by the admin listener).
 *
 * Each worker thread owns one struct um_metrics_worker and is its only writer. A counter
 * is bumped with um_counter_add, a relaxed load and a relaxed store: on x86-64 and arm64
 * that is a plain load, add and store, no lock prefix and no fence, so the hot path pays
 * what a plain counter costs. The admin thread reads the counters of every worker with
 * relaxed loads while they run (a sum may be a few increments behind; never torn), which
 * keeps ThreadSanitizer quiet where a plain uint64_t would be a data race.
 *
 * Threads other than workers (main, cleaner, unit tests) share one extra struct; their
 * increments may race with each other and get lost, never corrupt anything. Nothing on
 * the hot path runs there.
 *
 * Labels: routes and (upstream, server) pairs get a small integer slot, registered on the
 * main thread when a configuration is loaded; the same label keeps its slot across
 * reloads, so counters never go backwards.
 *
 * The struct holds the server's own counters (requests, bytes, connections, the cache's
 * answers, upstream attempts by server); a module's counters are its own block
 * (struct um_metric_block, named in its record, umbra/module.h), given a place in every
 * thread's counters when the server registers the records: adding a module's counter
 * edits only the module. */
#ifndef UMBRA_METRICS_H
#define UMBRA_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "umbra/common.h"

typedef _Atomic uint64_t um_counter;

/* Route slots: 0 is requests that matched no route (or were refused before routing). */
#define UM_METRICS_MAX_ROUTES 128
/* (upstream, server) slots; the last one collects what does not fit. */
#define UM_METRICS_MAX_SERVERS 128
/* Upper bounds (ms) of the upstream latency histogram, then +Inf. */
#define UM_METRICS_LATENCY_BUCKETS 11
extern const uint64_t um_metrics_latency_bounds_ms[UM_METRICS_LATENCY_BUCKETS];
/* Counters of every module's blocks together. */
#define UM_METRICS_MAX_MODULE_COUNTERS 256

struct um_metrics_worker {
    /* requests[route slot][status class]: class 0 is 1xx, 4 is 5xx, 5 anything else */
    um_counter requests[UM_METRICS_MAX_ROUTES][6];
    um_counter bytes_in, bytes_out; /* client side: socket reads, response bytes */
    um_counter conns_total, conns_closed;
    /* Connections closed unanswered on a proxy_protocol listener: no valid PROXY header in
     * time, or a peer outside proxy_from. */
    um_counter proxy_refused;
    um_counter cache_hits, cache_misses, cache_stale, cache_revalidated, cache_coalesced;
    um_counter upstream_requests[UM_METRICS_MAX_SERVERS]; /* attempts */
    um_counter upstream_errors[UM_METRICS_MAX_SERVERS];   /* connect errors, resets, timeouts */
    um_counter upstream_latency[UM_METRICS_MAX_SERVERS][UM_METRICS_LATENCY_BUCKETS + 1];
    um_counter upstream_latency_ms_sum[UM_METRICS_MAX_SERVERS];
    um_counter h2_conns, h2_streams; /* connections switched to HTTP/2; streams begun on them */
    /* Tunnels (upgraded connections): begun, ended, bytes client -> backend and back. */
    um_counter tunnels_opened, tunnels_closed, tunnel_bytes_up, tunnel_bytes_down;
    /* The modules' blocks, each at its base (um_metrics_register). */
    um_counter module[UM_METRICS_MAX_MODULE_COUNTERS];
};

/* Bumps a counter owned by the calling thread (no atomic read-modify-write). */
static inline void um_counter_add(um_counter *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

static inline uint64_t um_counter_get(const um_counter *c)
{
    return atomic_load_explicit((um_counter *)c, memory_order_relaxed);
}

extern _Thread_local struct um_metrics_worker *um__metrics_self;
extern struct um_metrics_worker um__metrics_other;

/* The calling thread's counters: its worker's, or the shared struct on other threads.
 * Never NULL; lives until exit. */
static inline struct um_metrics_worker *um_metrics_worker(void)
{
    struct um_metrics_worker *m = um__metrics_self;
    return m ? m : &um__metrics_other;
}

/* One counter of a module's block: its Prometheus name, type ("counter" or "gauge") and
 * help, and its labels ('coding="gzip"'; NULL: none). Counters of one name are listed
 * together, the first with the help. A NULL type: the module renders it itself (a
 * histogram's buckets, umbra/module.h's metrics). */
struct um_metric_def {
    const char *name, *type, *help, *labels;
};

/* A module's counters: a constant table of n definitions, and the block's place in
 * every thread's um_metrics_worker.module, set by um_metrics_register. */
struct um_metric_block {
    const struct um_metric_def *defs;
    size_t n;
    size_t base;
};

/* Gives b its place (main thread, before the workers start; once per block). */
void um_metrics_register(struct um_metric_block *b);

/* Counter i of b for the calling thread (bump it with um_counter_add). */
static inline um_counter *um_metric(const struct um_metric_block *b, size_t i)
{
    return &um_metrics_worker()->module[b->base + i];
}

/* Counter i of b summed over every thread. */
uint64_t um_metric_sum(const struct um_metric_block *b, size_t i);

/* Appends b's counters in the Prometheus text format, summed, in the order of its table
 * (the ones of a NULL type left out). */
struct um_buf;
void um_metrics_render_block(struct um_buf *out, const struct um_metric_block *b);
/* Appends one unlabelled sample with its HELP and TYPE lines (a module's gauges of its
 * running state, the server's own figures). */
void um_metrics_line(struct um_buf *out, const char *name, const char *type, const char *help,
                     uint64_t v);

/* Appends an unlabelled histogram of latencies in seconds, with its HELP and TYPE lines:
 * counts[0..n] the samples at most bounds_us[k] (then +Inf), not cumulative; sum_us their
 * sum in microseconds; count the _count sample. */
void um_metrics_histogram_us(struct um_buf *out, const char *name, const char *help,
                             const uint64_t *bounds_us, size_t n, const uint64_t *counts,
                             uint64_t sum_us, uint64_t count);

/* Allocates the counters of n workers (main thread, once, before workers start). */
void um_metrics_init(int n);
/* Makes the calling thread worker i's writer. */
void um_metrics_attach(int i);
/* Worker i's counters, for reading (i == number of workers: the other threads'). */
const struct um_metrics_worker *um_metrics_get(int i);
int um_metrics_num_workers(void);

/* The slot of a route label ("host/path" or "/path"), registering it when new (main
 * thread). Returns 0 ("none") when the table is full. */
int um_metrics_route_slot(const char *label);
/* The slot of the server url of upstream name (main thread); the last slot when full. */
int um_metrics_server_slot(const char *upstream, const char *url);
/* Labels of the slots registered so far (any thread; the strings live until exit). */
int um_metrics_num_routes(void);
const char *um_metrics_route_label(int slot);
int um_metrics_num_servers(void);
void um_metrics_server_label(int slot, const char **upstream, const char **url);

/* Passive health of a server slot: taken out until the CLOCK_MONOTONIC millisecond
 * until (0: never taken out). Any thread. */
void um_metrics_server_down_until(int slot, uint64_t until_ms);
uint64_t um_metrics_server_down_until_get(int slot);
/* Active health of a server slot: true while the upstream's probes keep it out (set by the
 * prober thread, src/upstream/health.c; read by every worker's server choice). Kept across
 * a reload, like the passive health above. Any thread. */
void um_metrics_server_probe_out(int slot, bool out);
bool um_metrics_server_probe_out_get(int slot);
/* Whether the slot's server is in use at now (CLOCK_MONOTONIC ms): neither passive nor
 * active health keeps it out. Any thread. */
bool um_metrics_server_up(int slot, uint64_t now_ms);

/* Reloads: attempts and failures (main thread). */
extern atomic_uint_fast64_t um_metrics_reloads, um_metrics_reload_failures;

/* Adds one upstream attempt's result to the calling worker's counters: latency_ms from
 * the start of the attempt to the response head (or the error), error when no usable
 * head came. */
void um_metrics_upstream_done(int slot, uint64_t latency_ms, bool error);

/* The status class index of a status code (0 for 1xx ... 4 for 5xx, 5 otherwise). */
static inline int um_metrics_status_class(int status)
{
    return status >= 100 && status < 600 ? status / 100 - 1 : 5;
}

#endif
