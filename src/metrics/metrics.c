/* SPDX-License-Identifier: BSD-2-Clause */
/* Per-worker counters and the label registry (see metrics.h). */
#include "umbra/metrics.h"

#include "umbra/buf.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

const uint64_t um_metrics_latency_bounds_ms[UM_METRICS_LATENCY_BUCKETS] = {
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000};

_Thread_local struct um_metrics_worker *um__metrics_self;
struct um_metrics_worker um__metrics_other;

atomic_uint_fast64_t um_metrics_reloads, um_metrics_reload_failures;

static struct um_metrics_worker *workers;
static int num_workers;

/* Labels are appended under the lock and published with a release store of the count, so
 * a reader that loads the count (acquire) may read the labels below it without the lock. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static char *route_labels[UM_METRICS_MAX_ROUTES];
static atomic_int num_routes;
static char *server_upstreams[UM_METRICS_MAX_SERVERS];
static char *server_urls[UM_METRICS_MAX_SERVERS];
static atomic_int num_servers;
static atomic_uint_fast64_t down_until[UM_METRICS_MAX_SERVERS];
static atomic_bool probe_out[UM_METRICS_MAX_SERVERS];

void um_metrics_init(int n)
{
    UM_ASSERT(workers == NULL && n > 0);
    /* The structs are kilobytes each: neighbouring workers share at most one cache line,
     * at a boundary, which holds rarely written counters. */
    workers = um_calloc((size_t)n, sizeof(*workers));
    num_workers = n;
}

void um_metrics_attach(int i)
{
    UM_ASSERT(i >= 0 && i < num_workers);
    um__metrics_self = &workers[i];
}

const struct um_metrics_worker *um_metrics_get(int i)
{
    if (i >= 0 && i < num_workers)
        return &workers[i];
    return &um__metrics_other;
}

int um_metrics_num_workers(void)
{
    return num_workers;
}

static char *dup_str(const char *s)
{
    return um_strndup(s, strlen(s));
}

int um_metrics_route_slot(const char *label)
{
    pthread_mutex_lock(&reg_lock);
    int n = atomic_load_explicit(&num_routes, memory_order_relaxed);
    if (n == 0) {
        route_labels[0] = dup_str("none");
        n = 1;
        atomic_store_explicit(&num_routes, n, memory_order_release);
    }
    int slot = 0;
    for (int i = 1; i < n; i++)
        if (strcmp(route_labels[i], label) == 0) {
            slot = i;
            goto out;
        }
    if (n < UM_METRICS_MAX_ROUTES) {
        route_labels[n] = dup_str(label);
        slot = n;
        atomic_store_explicit(&num_routes, n + 1, memory_order_release);
    }
out:
    pthread_mutex_unlock(&reg_lock);
    return slot;
}

int um_metrics_server_slot(const char *upstream, const char *url)
{
    pthread_mutex_lock(&reg_lock);
    int n = atomic_load_explicit(&num_servers, memory_order_relaxed);
    int slot = -1;
    for (int i = 0; i < n; i++)
        if (strcmp(server_upstreams[i], upstream) == 0 && strcmp(server_urls[i], url) == 0) {
            slot = i;
            break;
        }
    if (slot < 0) {
        if (n < UM_METRICS_MAX_SERVERS - 1) {
            server_upstreams[n] = dup_str(upstream);
            server_urls[n] = dup_str(url);
            slot = n;
        } else {
            slot = UM_METRICS_MAX_SERVERS - 1;
            if (n < UM_METRICS_MAX_SERVERS) {
                server_upstreams[slot] = dup_str("other");
                server_urls[slot] = dup_str("other");
            }
        }
        if (slot + 1 > n)
            atomic_store_explicit(&num_servers, slot + 1, memory_order_release);
    }
    pthread_mutex_unlock(&reg_lock);
    return slot;
}

int um_metrics_num_routes(void)
{
    return atomic_load_explicit(&num_routes, memory_order_acquire);
}

const char *um_metrics_route_label(int slot)
{
    return slot >= 0 && slot < um_metrics_num_routes() ? route_labels[slot] : "none";
}

int um_metrics_num_servers(void)
{
    return atomic_load_explicit(&num_servers, memory_order_acquire);
}

void um_metrics_server_label(int slot, const char **upstream, const char **url)
{
    if (slot >= 0 && slot < um_metrics_num_servers() && server_upstreams[slot]) {
        *upstream = server_upstreams[slot];
        *url = server_urls[slot];
    } else {
        *upstream = *url = "other";
    }
}

void um_metrics_server_down_until(int slot, uint64_t until_ms)
{
    if (slot >= 0 && slot < UM_METRICS_MAX_SERVERS)
        atomic_store_explicit(&down_until[slot], until_ms, memory_order_relaxed);
}

uint64_t um_metrics_server_down_until_get(int slot)
{
    if (slot < 0 || slot >= UM_METRICS_MAX_SERVERS)
        return 0;
    return atomic_load_explicit(&down_until[slot], memory_order_relaxed);
}

void um_metrics_server_probe_out(int slot, bool out)
{
    if (slot >= 0 && slot < UM_METRICS_MAX_SERVERS)
        atomic_store_explicit(&probe_out[slot], out, memory_order_relaxed);
}

bool um_metrics_server_probe_out_get(int slot)
{
    if (slot < 0 || slot >= UM_METRICS_MAX_SERVERS) return false;
    return atomic_load_explicit(&probe_out[slot], memory_order_relaxed);
}

bool um_metrics_server_up(int slot, uint64_t now_ms)
{
    return um_metrics_server_down_until_get(slot) <= now_ms &&
           !um_metrics_server_probe_out_get(slot);
}

void um_metrics_upstream_done(int slot, uint64_t latency_ms, bool error)
{
    if (slot < 0 || slot >= UM_METRICS_MAX_SERVERS)
        return;
    struct um_metrics_worker *m = um_metrics_worker();
    um_counter_add(&m->upstream_requests[slot], 1);
    if (error)
        um_counter_add(&m->upstream_errors[slot], 1);
    int b = 0;
    while (b < UM_METRICS_LATENCY_BUCKETS && latency_ms > um_metrics_latency_bounds_ms[b])
        b++;
    um_counter_add(&m->upstream_latency[slot][b], 1);
    um_counter_add(&m->upstream_latency_ms_sum[slot], latency_ms);
}

static size_t module_counters; /* registered so far (main thread) */

void um_metrics_register(struct um_metric_block *b)
{
    UM_ASSERT(module_counters + b->n <= UM_METRICS_MAX_MODULE_COUNTERS);
    b->base = module_counters;
    module_counters += b->n;
}

uint64_t um_metric_sum(const struct um_metric_block *b, size_t i)
{
    uint64_t v = 0;
    for (int w = 0; w <= num_workers; w++)
        v += um_counter_get(&um_metrics_get(w)->module[b->base + i]);
    return v;
}

void um_metrics_line(struct um_buf *out, const char *name, const char *type, const char *help,
                     uint64_t v)
{
    um_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
                  (unsigned long long)v);
}

void um_metrics_histogram_us(struct um_buf *out, const char *name, const char *help,
                             const uint64_t *bounds_us, size_t n, const uint64_t *counts,
                             uint64_t sum_us, uint64_t count)
{
    um_buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t k = 0; k <= n; k++) {
        cum += counts[k];
        if (k < n)
            um_buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, (double)bounds_us[k] / 1e6,
                          (unsigned long long)cum);
        else
            um_buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    um_buf_printf(out, "%s_sum %.6f\n%s_count %llu\n", name, (double)sum_us / 1e6, name,
                  (unsigned long long)count);
}

void um_metrics_render_block(struct um_buf *out, const struct um_metric_block *b)
{
    const char *last = NULL;
    for (size_t i = 0; i < b->n; i++) {
        const struct um_metric_def *d = &b->defs[i];
        if (d->type == NULL)
            continue;
        if (last == NULL || strcmp(last, d->name) != 0)
            um_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", d->name, d->help, d->name,
                          d->type);
        last = d->name;
        if (d->labels)
            um_buf_printf(out, "%s{%s} %llu\n", d->name, d->labels,
                          (unsigned long long)um_metric_sum(b, i));
        else
            um_buf_printf(out, "%s %llu\n", d->name, (unsigned long long)um_metric_sum(b, i));
    }
}
