/* SPDX-License-Identifier: BSD-2-Clause */
/* The admin listener's figures (internal.h): /metrics in the Prometheus text format and
 * /status.json, rendered on the worker that serves the admin connection.
 *
 * Any worker may render, two at once: everything here is read from state that is safe
 * from any thread. The counters are read with relaxed loads while the workers run
 * (metrics.h); the cache's figures under its own locks (um_cache_stats); the modules' and
 * the cluster's lines from atomics; the one-second samples under the admin's lock
 * (um__admin_write_series). Each answer is built in a buffer of the caller's, and the
 * totals in a heap block of this call's: nothing static. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "umbra/buf.h"
#include "umbra/cluster.h"
#include "umbra/metrics.h"
#include "umbra/module.h"

/* ---------------------------------------------------------------- text */

/* A label value (Prometheus) or a JSON string body: \, " and newlines escaped; other
 * control bytes dropped (labels here are paths and URLs from the config). */
static void append_escaped(struct um_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            um_buf_printf(b, "\\%c", *s);
        else if (*s == '\n')
            um_buf_append(b, "\\n", 2);
        else if ((unsigned char)*s >= 0x20)
            um_buf_append(b, s, 1);
    }
}

/* ---------------------------------------------------------------- reading the counters */

struct totals {
    uint64_t requests[UM_METRICS_MAX_ROUTES][6];
    uint64_t all_requests;
    uint64_t bytes_in, bytes_out, conns_total, conns_closed, proxy_refused;
    uint64_t hits, misses, stale, revalidated, coalesced;
    uint64_t up_requests[UM_METRICS_MAX_SERVERS], up_errors[UM_METRICS_MAX_SERVERS];
    uint64_t up_latency[UM_METRICS_MAX_SERVERS][UM_METRICS_LATENCY_BUCKETS + 1];
    uint64_t up_latency_sum[UM_METRICS_MAX_SERVERS];
    uint64_t h2_conns, h2_streams;
    uint64_t tun_opened, tun_closed, tun_up, tun_down;
};

static void sum(struct totals *t, int nroutes, int nservers)
{
    memset(t, 0, sizeof(*t));
    int nw = um_metrics_num_workers();
    for (int i = 0; i <= nw; i++) {
        const struct um_metrics_worker *m = um_metrics_get(i);
        for (int r = 0; r < nroutes; r++)
            for (int k = 0; k < 6; k++) {
                uint64_t v = um_counter_get(&m->requests[r][k]);
                t->requests[r][k] += v;
                t->all_requests += v;
            }
        t->bytes_in += um_counter_get(&m->bytes_in);
        t->bytes_out += um_counter_get(&m->bytes_out);
        t->conns_total += um_counter_get(&m->conns_total);
        t->conns_closed += um_counter_get(&m->conns_closed);
        t->proxy_refused += um_counter_get(&m->proxy_refused);
        t->hits += um_counter_get(&m->cache_hits);
        t->misses += um_counter_get(&m->cache_misses);
        t->stale += um_counter_get(&m->cache_stale);
        t->revalidated += um_counter_get(&m->cache_revalidated);
        t->coalesced += um_counter_get(&m->cache_coalesced);
        for (int sv = 0; sv < nservers; sv++) {
            t->up_requests[sv] += um_counter_get(&m->upstream_requests[sv]);
            t->up_errors[sv] += um_counter_get(&m->upstream_errors[sv]);
            t->up_latency_sum[sv] += um_counter_get(&m->upstream_latency_ms_sum[sv]);
            for (int k = 0; k <= UM_METRICS_LATENCY_BUCKETS; k++)
                t->up_latency[sv][k] += um_counter_get(&m->upstream_latency[sv][k]);
        }
        t->h2_conns += um_counter_get(&m->h2_conns);
        t->h2_streams += um_counter_get(&m->h2_streams);
        t->tun_opened += um_counter_get(&m->tunnels_opened);
        t->tun_closed += um_counter_get(&m->tunnels_closed);
        t->tun_up += um_counter_get(&m->tunnel_bytes_up);
        t->tun_down += um_counter_get(&m->tunnel_bytes_down);
    }
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct um_cache *cache_of(struct um_server *s)
{
    return atomic_load_explicit(&s->cache, memory_order_acquire);
}

/* ---------------------------------------------------------------- /metrics */

static void help(struct um_buf *b, const char *name, const char *type, const char *text)
{
    um_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

static void one(struct um_buf *b, const char *name, const char *type, const char *text,
                uint64_t v)
{
    um_metrics_line(b, name, type, text, v);
}

static void server_labels(struct um_buf *b, int slot)
{
    const char *up, *url;
    um_metrics_server_label(slot, &up, &url);
    um_buf_append(b, "upstream=\"", 10);
    append_escaped(b, up);
    um_buf_append(b, "\",server=\"", 10);
    append_escaped(b, url);
    um_buf_append(b, "\"", 1);
}

void um__admin_render_metrics(struct um_server *s, struct um_buf *b)
{
    static const char *const classes[] = {"1xx", "2xx", "3xx", "4xx", "5xx", "other"};
    int nroutes = um_metrics_num_routes(), nservers = um_metrics_num_servers();
    struct totals *t = um_malloc(sizeof(*t));
    sum(t, nroutes, nservers);

    help(b, "umbra_requests_total", "counter", "Requests answered, by route and status class.");
    for (int r = 0; r < nroutes; r++)
        for (int k = 0; k < 6; k++) {
            if (k == 5 && t->requests[r][k] == 0)
                continue;
            um_buf_append(b, "umbra_requests_total{route=\"", 28);
            append_escaped(b, um_metrics_route_label(r));
            um_buf_printf(b, "\",code=\"%s\"} %llu\n", classes[k],
                          (unsigned long long)t->requests[r][k]);
        }
    one(b, "umbra_received_bytes_total", "counter", "Bytes read from clients.", t->bytes_in);
    one(b, "umbra_sent_bytes_total", "counter", "Response bytes (heads and bodies) sent to clients.",
        t->bytes_out);
    one(b, "umbra_connections_total", "counter", "Client connections accepted.", t->conns_total);
    one(b, "umbra_connections_active", "gauge", "Client connections open.",
        t->conns_total - t->conns_closed);
    one(b, "umbra_proxy_protocol_refused_total", "counter",
        "Connections closed unanswered on a proxy_protocol listener (no valid PROXY header in "
        "time, or a peer outside proxy_from).",
        t->proxy_refused);
    one(b, "umbra_cache_hits_total", "counter", "Responses served from the cache.", t->hits);
    one(b, "umbra_cache_misses_total", "counter", "Cacheable requests not in the cache (fetched).",
        t->misses);
    one(b, "umbra_cache_stale_total", "counter", "Requests for stored but stale objects, forwarded.",
        t->stale);
    one(b, "umbra_cache_revalidated_total", "counter",
        "Stale objects the origin confirmed (304 Not Modified).", t->revalidated);
    one(b, "umbra_cache_coalesced_total", "counter",
        "Requests that joined a fill already running for their object.", t->coalesced);
    struct um_cache *cache = cache_of(s);
    struct um_cache_stats st;
    memset(&st, 0, sizeof(st));
    if (cache)
        um_cache_stats(cache, &st);
    one(b, "umbra_cache_objects", "gauge", "Objects in the cache index.", st.objects);
    one(b, "umbra_cache_memory_bytes", "gauge", "Memory the cache uses (bodies, heads, metadata).",
        st.memory_used);
    one(b, "umbra_cache_memory_limit_bytes", "gauge", "The cache's hard memory cap.", st.memory_cap);
    one(b, "umbra_cache_evictions_total", "counter", "Objects evicted to make room.", st.evictions);

    help(b, "umbra_upstream_requests_total", "counter", "Requests sent to upstream servers (attempts).");
    for (int i = 0; i < nservers; i++) {
        um_buf_append(b, "umbra_upstream_requests_total{", 30);
        server_labels(b, i);
        um_buf_printf(b, "} %llu\n", (unsigned long long)t->up_requests[i]);
    }
    help(b, "umbra_upstream_errors_total", "counter",
         "Upstream attempts without a usable response (connect errors, resets, timeouts).");
    for (int i = 0; i < nservers; i++) {
        um_buf_append(b, "umbra_upstream_errors_total{", 28);
        server_labels(b, i);
        um_buf_printf(b, "} %llu\n", (unsigned long long)t->up_errors[i]);
    }
    help(b, "umbra_upstream_response_seconds", "histogram",
         "Time from sending a request upstream to its response head (or error).");
    for (int i = 0; i < nservers; i++) {
        uint64_t cum = 0;
        for (int k = 0; k <= UM_METRICS_LATENCY_BUCKETS; k++) {
            cum += t->up_latency[i][k];
            um_buf_append(b, "umbra_upstream_response_seconds_bucket{", 39);
            server_labels(b, i);
            if (k < UM_METRICS_LATENCY_BUCKETS)
                um_buf_printf(b, ",le=\"%g\"} %llu\n",
                              (double)um_metrics_latency_bounds_ms[k] / 1000,
                              (unsigned long long)cum);
            else
                um_buf_printf(b, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
        }
        um_buf_append(b, "umbra_upstream_response_seconds_sum{", 36);
        server_labels(b, i);
        um_buf_printf(b, "} %.3f\n", (double)t->up_latency_sum[i] / 1000);
        um_buf_append(b, "umbra_upstream_response_seconds_count{", 38);
        server_labels(b, i);
        um_buf_printf(b, "} %llu\n", (unsigned long long)cum);
    }
    help(b, "umbra_upstream_server_up", "gauge",
         "1 when the server is in use, 0 while passive or active health checks keep it out.");
    uint64_t now = mono_ms();
    for (int i = 0; i < nservers; i++) {
        um_buf_append(b, "umbra_upstream_server_up{", 25);
        server_labels(b, i);
        um_buf_printf(b, "} %d\n", um_metrics_server_up(i, now) ? 1 : 0);
    }
    one(b, "umbra_http2_connections_total", "counter", "Client connections that spoke HTTP/2.",
        t->h2_conns);
    one(b, "umbra_http2_streams_total", "counter", "HTTP/2 streams clients opened.", t->h2_streams);
    one(b, "umbra_tunnels_total", "counter",
        "Tunnels begun (upgraded connections: a 101 from the backend).", t->tun_opened);
    one(b, "umbra_tunnels_active", "gauge", "Tunnels open.", t->tun_opened - t->tun_closed);
    one(b, "umbra_tunnel_sent_bytes_total", "counter",
        "Bytes tunnels passed from clients to backends.", t->tun_up);
    one(b, "umbra_tunnel_received_bytes_total", "counter",
        "Bytes tunnels passed from backends to clients.", t->tun_down);
    for (size_t m = 0; um_modules[m]; m++) { /* the modules' own lines */
        const struct um_module *mod = um_modules[m];
        if (mod->metrics)
            mod->metrics(b, um_module_running(mod));
        else if (mod->counters)
            um_metrics_render_block(b, mod->counters);
    }
    one(b, "umbra_config_reloads_total", "counter", "Configuration reloads attempted (SIGHUP).",
        atomic_load(&um_metrics_reloads));
    one(b, "umbra_config_reload_failures_total", "counter",
        "Reloads refused (invalid configuration); the previous one kept running.",
        atomic_load(&um_metrics_reload_failures));
    one(b, "umbra_workers", "gauge", "Worker threads.", (uint64_t)s->num_workers);
    help(b, "umbra_start_time_seconds", "gauge", "Start time of the process, Unix seconds.");
    um_buf_printf(b, "umbra_start_time_seconds %lld\n", (long long)s->started);
    um_cluster_write_metrics(b);
    free(t);
}

/* ---------------------------------------------------------------- /status.json */

void um__admin_render_json(struct um_server *s, const struct um_config *cfg, struct um_buf *b)
{
    int nroutes = um_metrics_num_routes(), nservers = um_metrics_num_servers();
    struct totals *t = um_malloc(sizeof(*t));
    sum(t, nroutes, nservers);
    struct um_cache *cache = cache_of(s);
    struct um_cache_stats st;
    memset(&st, 0, sizeof(st));
    if (cache)
        um_cache_stats(cache, &st);
    um_buf_printf(b, "{\"version\":\"%s\",\"uptime\":%lld,\"config\":\"", UMBRA_VERSION,
                  (long long)(time(NULL) - s->started));
    append_escaped(b, cfg->file);
    um_buf_printf(b, "\",\"reloads\":%llu,\"reload_failures\":%llu,\"requests\":%llu,",
                  (unsigned long long)atomic_load(&um_metrics_reloads),
                  (unsigned long long)atomic_load(&um_metrics_reload_failures),
                  (unsigned long long)t->all_requests);
    um_buf_printf(b, "\"connections\":{\"active\":%llu,\"total\":%llu},",
                  (unsigned long long)(t->conns_total - t->conns_closed),
                  (unsigned long long)t->conns_total);
    um_buf_printf(b, "\"bytes\":{\"in\":%llu,\"out\":%llu},", (unsigned long long)t->bytes_in,
                  (unsigned long long)t->bytes_out);
    um_buf_printf(b,
                  "\"cache\":{\"enabled\":%s,\"hits\":%llu,\"misses\":%llu,\"stale\":%llu,"
                  "\"revalidated\":%llu,\"coalesced\":%llu,\"objects\":%zu,\"memory\":%zu,"
                  "\"cap\":%zu,\"evictions\":%llu},",
                  cache ? "true" : "false", (unsigned long long)t->hits,
                  (unsigned long long)t->misses, (unsigned long long)t->stale,
                  (unsigned long long)t->revalidated, (unsigned long long)t->coalesced, st.objects,
                  st.memory_used, st.memory_cap, (unsigned long long)st.evictions);
    for (size_t m = 0; um_modules[m]; m++) /* the modules' own members */
        if (um_modules[m]->status) {
            void *running = um_module_running(um_modules[m]);
            if (running)
                um_modules[m]->status(b, running);
            else
                um_buf_printf(b, "\"%s\":null", um_modules[m]->name);
            um_buf_append(b, ",", 1);
        }
    um_buf_append(b, "\"workers\":[", 11);
    for (int i = 0; i < s->num_workers; i++) {
        const struct um_metrics_worker *m = um_metrics_get(i);
        uint64_t total = um_counter_get(&m->conns_total);
        uint64_t reqs = 0;
        for (int r = 0; r < nroutes; r++)
            for (int k = 0; k < 6; k++)
                reqs += um_counter_get(&m->requests[r][k]);
        um_buf_printf(b, "%s{\"id\":%d,\"connections\":%llu,\"accepted\":%llu,\"requests\":%llu}",
                      i ? "," : "", i,
                      (unsigned long long)(total - um_counter_get(&m->conns_closed)),
                      (unsigned long long)total, (unsigned long long)reqs);
    }
    um_buf_append(b, "],\"routes\":[", 12);
    bool first = true;
    for (int r = 0; r < nroutes; r++) {
        uint64_t total = 0;
        for (int k = 0; k < 6; k++)
            total += t->requests[r][k];
        if (r == 0 && total == 0)
            continue;
        um_buf_printf(b, "%s{\"route\":\"", first ? "" : ",");
        first = false;
        append_escaped(b, um_metrics_route_label(r));
        um_buf_printf(b, "\",\"total\":%llu,\"status\":[%llu,%llu,%llu,%llu,%llu]}",
                      (unsigned long long)total, (unsigned long long)t->requests[r][0],
                      (unsigned long long)t->requests[r][1], (unsigned long long)t->requests[r][2],
                      (unsigned long long)t->requests[r][3], (unsigned long long)t->requests[r][4]);
    }
    um_buf_append(b, "],", 2);
    um_cluster_write_json(b);
    um_buf_append(b, "\"upstreams\":[", 13);
    uint64_t now = mono_ms();
    for (int i = 0; i < nservers; i++) {
        const char *up, *url;
        um_metrics_server_label(i, &up, &url);
        um_buf_printf(b, "%s{\"upstream\":\"", i ? "," : "");
        append_escaped(b, up);
        um_buf_append(b, "\",\"server\":\"", 12);
        append_escaped(b, url);
        uint64_t n = 0;
        for (int k = 0; k <= UM_METRICS_LATENCY_BUCKETS; k++)
            n += t->up_latency[i][k];
        um_buf_printf(b, "\",\"up\":%s,\"requests\":%llu,\"errors\":%llu,\"avg_ms\":%.1f}",
                      um_metrics_server_up(i, now) ? "true" : "false",
                      (unsigned long long)t->up_requests[i], (unsigned long long)t->up_errors[i],
                      n ? (double)t->up_latency_sum[i] / (double)n : 0.0);
    }
    um_buf_append(b, "],", 2);
    um__admin_write_series(s->admin, b);
    um_buf_append(b, "}\n", 2);
    free(t);
}

