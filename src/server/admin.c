/* SPDX-License-Identifier: BSD-2-Clause */
/* The admin listener: GET /metrics (Prometheus text format), /status (an HTML page) and
 * /status.json, on a thread of its own so that nothing here touches a worker's loop.
 *
 * The thread polls its listening socket, its clients (at most MAX_CLIENTS, each with a
 * deadline) and an eventfd for control, and once a second it samples the request and
 * cache counters into a ring, which the status page's charts are drawn from. Each answer
 * is built whole in memory and sent with Connection: close. The counters are read with
 * relaxed loads while the workers run (metrics.h); s->config is read under its lock, with
 * a reference held while an answer is built. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "admin_http.h"
#include "internal.h"
#include "umbra/buf.h"
#include "umbra/log.h"
#include "umbra/cluster.h"
#include "umbra/metrics.h"
#include "umbra/module.h"

#define MAX_CLIENTS 16
#define CLIENT_TIMEOUT_MS 5000
#define RING 601 /* one sample a second: ten minutes and one */
#define SERIES_STEP 2

extern const char um__status_page[];

struct sample {
    uint64_t t; /* seconds since the start */
    uint64_t requests, hits, lookups;
};

struct um__admin {
    struct um_server *s;
    pthread_t thread;
    int efd;
    pthread_mutex_t lock;
    int next_fd;  /* -2: no change pending */
    bool stop;
    int lfd;      /* admin thread only */
    struct client clients[MAX_CLIENTS];
    struct sample ring[RING];
    size_t ring_len, ring_head; /* ring_head: index of the next write */
    uint64_t start_ms;
};

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
    uint64_t bytes_in, bytes_out, conns_total, conns_closed;
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

static struct um_config *config_ref(struct um_server *s)
{
    pthread_mutex_lock(&s->config_lock);
    struct um_config *c = s->config;
    um_config_ref(c);
    pthread_mutex_unlock(&s->config_lock);
    return c;
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

static void render_metrics(struct um__admin *a, struct um_buf *b)
{
    static const char *const classes[] = {"1xx", "2xx", "3xx", "4xx", "5xx", "other"};
    struct um_server *s = a->s;
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
         "1 when the server is in use, 0 while passive health checks keep it out.");
    uint64_t now = mono_ms();
    for (int i = 0; i < nservers; i++) {
        um_buf_append(b, "umbra_upstream_server_up{", 25);
        server_labels(b, i);
        um_buf_printf(b, "} %d\n", um_metrics_server_down_until_get(i) <= now ? 1 : 0);
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

static void render_json(struct um__admin *a, struct um_buf *b)
{
    struct um_server *s = a->s;
    struct um_config *cfg = config_ref(s);
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
                      um_metrics_server_down_until_get(i) <= now ? "true" : "false",
                      (unsigned long long)t->up_requests[i], (unsigned long long)t->up_errors[i],
                      n ? (double)t->up_latency_sum[i] / (double)n : 0.0);
    }
    /* Rates over SERIES_STEP-second steps, oldest first, from the one-second samples. */
    um_buf_printf(b, "],\"series\":{\"step\":%d,\"rps\":[", SERIES_STEP);
    size_t steps = a->ring_len > 1 ? (a->ring_len - 1) / SERIES_STEP : 0;
    struct um_buf hr = {0};
    for (size_t k = steps; k >= 1; k--) {
        size_t newer = (a->ring_head + RING - 1 - (k - 1) * SERIES_STEP) % RING;
        size_t older = (a->ring_head + RING - 1 - k * SERIES_STEP) % RING;
        const struct sample *x = &a->ring[older], *y = &a->ring[newer];
        double dt = y->t > x->t ? (double)(y->t - x->t) : 1;
        uint64_t dl = y->lookups - x->lookups;
        um_buf_printf(b, "%s%.2f", k == steps ? "" : ",", (double)(y->requests - x->requests) / dt);
        if (dl)
            um_buf_printf(&hr, "%s%.4f", k == steps ? "" : ",",
                          (double)(y->hits - x->hits) / (double)dl);
        else
            um_buf_printf(&hr, "%snull", k == steps ? "" : ",");
    }
    um_buf_append(b, "],\"hit_ratio\":[", 15);
    if (hr.len)
        um_buf_append(b, hr.base, hr.len);
    um_buf_dispose(&hr);
    um_buf_append(b, "]}}\n", 4);
    free(t);
    um_config_unref(cfg);
}

static void take_sample(struct um__admin *a)
{
    int nroutes = um_metrics_num_routes();
    struct sample sm = {(mono_ms() - a->start_ms + 500) / 1000, 0, 0, 0};
    int nw = um_metrics_num_workers();
    for (int i = 0; i <= nw; i++) {
        const struct um_metrics_worker *m = um_metrics_get(i);
        for (int r = 0; r < nroutes; r++)
            for (int k = 0; k < 6; k++)
                sm.requests += um_counter_get(&m->requests[r][k]);
        uint64_t h = um_counter_get(&m->cache_hits);
        sm.hits += h;
        sm.lookups += h + um_counter_get(&m->cache_misses) + um_counter_get(&m->cache_stale) +
                      um_counter_get(&m->cache_coalesced);
    }
    a->ring[a->ring_head] = sm;
    a->ring_head = (a->ring_head + 1) % RING;
    if (a->ring_len < RING)
        a->ring_len++;
}

/* ---------------------------------------------------------------- HTTP */

static void handle_request(struct um__admin *a, struct client *cl)
{
    const struct um_request *req = &cl->req;
    um_str path = req->path;
    bool head = req->method_id == UM_METHOD_HEAD;
    if (req->method_id == UM_METHOD_POST && um_str_eq(path, "/purge")) {
        /* The body follows the head (on_client waited for all of it). */
        const char *body = cl->in + req->head_len;
        size_t blen = cl->inlen - req->head_len;
        struct um_buf b = {0};
        /* The runtime, for its cluster (a purge goes to the other nodes too). */
        pthread_mutex_lock(&a->s->config_lock);
        struct um_runtime *rt = a->s->runtime;
        um_runtime_ref(rt);
        pthread_mutex_unlock(&a->s->config_lock);
        bool json = um__admin_is_json(req, body, blen);
        int st = um__admin_purge(a->s, cache_of(a->s), rt->cluster, json, body, blen, &b);
        um_runtime_unref(rt);
        um__admin_respond(cl, st, "application/json", b.base, b.len, false);
        um_buf_dispose(&b);
        return;
    }
    if (!head && req->method_id != UM_METHOD_GET) {
        static const char msg[] = "405 Method Not Allowed\n";
        um__admin_respond(cl, 405, "text/plain", msg, sizeof(msg) - 1, false);
        return;
    }
    struct um_buf b = {0};
    if (um_str_eq(path, "/metrics")) {
        render_metrics(a, &b);
        um__admin_respond(cl, 200, "text/plain; version=0.0.4; charset=utf-8", b.base, b.len,
                          head);
    } else if (um_str_eq(path, "/status.json")) {
        render_json(a, &b);
        um__admin_respond(cl, 200, "application/json", b.base, b.len, head);
    } else if (um_str_eq(path, "/status") || um_str_eq(path, "/")) {
        um__admin_respond(cl, 200, "text/html; charset=utf-8", um__status_page,
                strlen(um__status_page), head);
    } else {
        static const char msg[] = "404 Not Found: try /metrics, /status or /status.json\n";
        um__admin_respond(cl, 404, "text/plain", msg, sizeof(msg) - 1, head);
    }
    um_buf_dispose(&b);
}

static void on_accept(struct um__admin *a)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(a->lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct client *cl = NULL;
        for (int i = 0; i < MAX_CLIENTS && cl == NULL; i++)
            if (a->clients[i].fd < 0)
                cl = &a->clients[i];
        if (cl == NULL) {
            close(fd); /* busy: a scraper retries */
            continue;
        }
        cl->fd = fd;
        cl->deadline = mono_ms() + CLIENT_TIMEOUT_MS;
        um_http1_parser_init(&cl->parser);
        struct um_config *cfg = config_ref(a->s);
        bool allowed = um_netmask_match(cfg->admin.allow, cfg->admin.num_allow,
                                        (struct sockaddr *)&ss);
        um_config_unref(cfg);
        if (!allowed) {
            static const char msg[] = "403 Forbidden: not in admin.allow\n";
            um__admin_respond(cl, 403, "text/plain", msg, sizeof(msg) - 1, false);
        }
    }
}

static void on_client(struct um__admin *a, struct client *cl, short revents)
{
    if (cl->out == NULL && (revents & (POLLIN | POLLHUP | POLLERR)) && um__admin_read(cl))
        handle_request(a, cl);
    um__admin_write(cl);
}

static void *admin_main(void *arg)
{
    struct um__admin *a = arg;
    um_log_context(-1, 0);
    uint64_t next_sample = mono_ms();
    for (;;) {
        pthread_mutex_lock(&a->lock);
        bool stop = a->stop;
        int next = a->next_fd;
        a->next_fd = -2;
        pthread_mutex_unlock(&a->lock);
        if (stop)
            break;
        if (next != -2) {
            if (a->lfd >= 0)
                close(a->lfd);
            a->lfd = next;
        }
        uint64_t now = mono_ms();
        if (now >= next_sample) {
            take_sample(a);
            next_sample += 1000;
            if (next_sample <= now)
                next_sample = now + 1000;
        }
        struct pollfd pfd[MAX_CLIENTS + 2];
        int map[MAX_CLIENTS + 2];
        int n = 0;
        pfd[n] = (struct pollfd){.fd = a->efd, .events = POLLIN};
        map[n++] = -1;
        if (a->lfd >= 0) {
            pfd[n] = (struct pollfd){.fd = a->lfd, .events = POLLIN};
            map[n++] = -2;
        }
        uint64_t wake = next_sample;
        for (int i = 0; i < MAX_CLIENTS; i++) {
            struct client *cl = &a->clients[i];
            if (cl->fd < 0)
                continue;
            if (cl->deadline <= now) {
                um__admin_client_close(cl);
                continue;
            }
            if (cl->deadline < wake)
                wake = cl->deadline;
            pfd[n] = (struct pollfd){.fd = cl->fd, .events = cl->out ? POLLOUT : POLLIN};
            map[n++] = i;
        }
        int r = poll(pfd, (nfds_t)n, (int)(wake > now ? wake - now : 0));
        if (r <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            if (pfd[k].revents == 0)
                continue;
            if (map[k] == -1) {
                uint64_t v;
                ssize_t rr = read(a->efd, &v, sizeof(v));
                (void)rr;
            } else if (map[k] == -2) {
                on_accept(a);
            } else {
                on_client(a, &a->clients[map[k]], pfd[k].revents);
            }
        }
    }
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (a->clients[i].fd >= 0)
            um__admin_client_close(&a->clients[i]);
    if (a->lfd >= 0)
        close(a->lfd);
    return NULL;
}

struct um__admin *um__admin_start(struct um_server *s, int fd)
{
    struct um__admin *a = um_calloc(1, sizeof(*a));
    a->s = s;
    a->lfd = fd;
    a->next_fd = -2;
    a->start_ms = mono_ms();
    for (int i = 0; i < MAX_CLIENTS; i++)
        a->clients[i].fd = -1;
    a->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    UM_ASSERT(a->efd >= 0);
    pthread_mutex_init(&a->lock, NULL);
    UM_ASSERT(pthread_create(&a->thread, NULL, admin_main, a) == 0);
    return a;
}

static void wake(struct um__admin *a)
{
    uint64_t one = 1;
    ssize_t r = write(a->efd, &one, sizeof(one));
    (void)r;
}

void um__admin_set_listener(struct um__admin *a, int fd)
{
    pthread_mutex_lock(&a->lock);
    if (a->next_fd >= 0)
        close(a->next_fd);
    a->next_fd = fd;
    pthread_mutex_unlock(&a->lock);
    wake(a);
    if (fd >= 0) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        char host[INET6_ADDRSTRLEN] = "?";
        unsigned port = 0;
        if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
            if (ss.ss_family == AF_INET6) {
                inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof(host));
                port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
            } else {
                inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof(host));
                port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
            }
        }
        um_log_info("admin: serving /metrics and /status on %s%s%s:%u",
                    ss.ss_family == AF_INET6 ? "[" : "", host,
                    ss.ss_family == AF_INET6 ? "]" : "", port);
    } else {
        um_log_info("admin: listener closed");
    }
}

void um__admin_stop(struct um__admin *a)
{
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->lock);
    a->stop = true;
    if (a->next_fd >= 0)
        close(a->next_fd);
    a->next_fd = -2;
    pthread_mutex_unlock(&a->lock);
    wake(a);
    pthread_join(a->thread, NULL);
    close(a->efd);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
