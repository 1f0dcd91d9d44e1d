/* SPDX-License-Identifier: BSD-2-Clause */
/* Active health checks: upstreams.NAME.health = { path, interval, timeout, fails, passes,
 * status }.
 *
 * One prober thread per process, not one per worker, so a server sees one probe per
 * interval whatever the number of workers. It is the upstream module's state for one
 * configuration (make/drop, umbra/module.h): it starts with the configuration and is
 * joined when the runtime is dropped. The probes due are libcurl transfers run side by
 * side on that thread's own multi handle (never on a worker's loop), each bounded by
 * timeout, a slow server's probe delaying nobody else's; the thread waits in
 * curl_multi_poll, which drop wakes (curl_multi_wakeup), and a progress callback cuts
 * probes in flight short, so that it stops at once.
 *
 * The verdict lives in the server's metrics slot (um_metrics_server_probe_out), which the
 * workers' server choice (upstream.c) and the admin's figures read, so it holds across a
 * reload: the new configuration's prober starts from it. During a reload the old runtime
 * lives on until its last connection ends; a generation number makes only the newest
 * prober probe and write, and a reload refused after make gives the turn back to the
 * running one (drop restores the generation). Only state changes are logged. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "umbra/config.h"
#include "umbra/log.h"
#include "umbra/metrics.h"
#include "internal.h"

struct target {
    const struct um_upstream_conf *u; /* borrowed from the configuration, which outlives us */
    const char *server;               /* its URL ("http://host:port"), borrowed too */
    char *url;                        /* server + health_path */
    int slot;                         /* metrics slot */
    int fails, passes;                /* probes in a row that failed, that passed */
    bool out;                         /* the probes' verdict */
    uint64_t due;                     /* CLOCK_MONOTONIC ms of the next probe */
    /* The probe in flight (NULL: none), its Host field and libcurl's message. */
    CURL *e;
    struct curl_slist *fields;
    char errbuf[CURL_ERROR_SIZE];
};

struct um__health {
    struct target *targets;
    size_t num_targets;
    unsigned gen, prev_gen; /* ours, and the one that ran before us (restored at drop) */
    CURLM *multi;           /* the probes of one round, side by side */
    pthread_t thread;
    bool started;
    atomic_bool stop; /* set by drop, which then wakes the thread's curl_multi_poll */
};

/* The generation of the newest prober: only it probes. Main thread writes, probers read. */
static atomic_uint current_gen;

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static size_t discard_body(char *p, size_t size, size_t n, void *arg)
{
    (void)p, (void)arg;
    return size * n;
}

/* Stops a probe in flight when the prober is told to stop: drop must not wait a timeout. */
static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    return atomic_load_explicit(&((struct um__health *)arg)->stop, memory_order_relaxed);
}

/* Starts t's probe on h's multi handle; false when it cannot (out of memory). */
static bool probe_start(struct um__health *h, struct target *t)
{
    const struct um_upstream_conf *u = t->u;
    CURL *e = curl_easy_init();
    if (e == NULL) return false;
    long ms = (long)(u->health_timeout * 1000);
    t->errbuf[0] = '\0';
    curl_easy_setopt(e, CURLOPT_URL, t->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, t);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, ms > 0 ? ms : 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, ms > 0 ? ms : 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard_body);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, h);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "umbra-health");
    /* A fresh connection each time: a probe checks that the server accepts one. */
    curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, u->tls_verify ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, u->tls_verify ? 2L : 0L);
    if (u->tls_ca) curl_easy_setopt(e, CURLOPT_CAINFO, u->tls_ca);
    /* A server that takes a PROXY header (send_proxy) refuses a connection without one:
     * the probe sends libcurl's (version 1, naming the prober's own address), which a
     * receiver of either version reads. */
    if (u->send_proxy) curl_easy_setopt(e, CURLOPT_HAPROXYPROTOCOL, 1L);
    if (u->host) {
        char hostf[300];
        snprintf(hostf, sizeof hostf, "Host: %s", u->host);
        t->fields = curl_slist_append(NULL, hostf);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->fields);
    }
    if (curl_multi_add_handle(h->multi, e) != CURLM_OK) {
        curl_slist_free_all(t->fields);
        t->fields = NULL;
        curl_easy_cleanup(e);
        return false;
    }
    t->e = e;
    return true;
}

/* Counts t's probe (ok, or failed for why) and logs and publishes a change of verdict. */
static void probe_count(struct target *t, bool ok, const char *why)
{
    if (ok) {
        t->fails = 0;
        t->passes++;
        if (t->out && t->passes >= t->u->health_passes) {
            t->out = false;
            um_log_warn("upstream %s: server %s is up (probe: %d passed in a row)", t->u->name,
                        t->server, t->passes);
        }
    } else {
        t->passes = 0;
        t->fails++;
        if (!t->out && t->fails >= t->u->health_fails) {
            t->out = true;
            um_log_warn("upstream %s: server %s is down (probe: %s)", t->u->name, t->server, why);
        }
    }
    um_metrics_server_probe_out(t->slot, t->out);
}

/* t's probe ended with rc: its verdict, unless the prober was told to stop or superseded
 * by a newer one meanwhile (a cut-short transfer is not the server's failure). */
static void probe_done(struct um__health *h, struct target *t, CURLcode rc)
{
    char why[CURL_ERROR_SIZE + 32];
    long status = 0;
    bool ok = false;
    if (rc == CURLE_OK) {
        curl_easy_getinfo(t->e, CURLINFO_RESPONSE_CODE, &status);
        ok = status >= t->u->health_status_lo && status <= t->u->health_status_hi;
        snprintf(why, sizeof why, "status %ld", status);
    } else {
        snprintf(why, sizeof why, "%s", t->errbuf[0] ? t->errbuf : curl_easy_strerror(rc));
    }
    curl_multi_remove_handle(h->multi, t->e);
    curl_easy_cleanup(t->e);
    curl_slist_free_all(t->fields);
    t->e = NULL;
    t->fields = NULL;
    if (atomic_load(&h->stop) || atomic_load(&current_gen) != h->gen) return;
    probe_count(t, ok, why);
}

/* The probes' loop: starts each server's probe when it is due (a probe still running then
 * skips that turn), so that a server that does not answer, whose probes last their whole
 * timeout, does not delay the others'; waits in curl_multi_poll, which drop wakes. */
static void *prober(void *arg)
{
    struct um__health *h = arg;
    int running = 0;
    while (!atomic_load(&h->stop)) {
        uint64_t now = mono_ms(), next = UINT64_MAX;
        bool current = atomic_load(&current_gen) == h->gen;
        for (size_t i = 0; i < h->num_targets; i++) {
            struct target *t = &h->targets[i];
            if (t->due <= now) {
                /* Superseded (a reload while our runtime lives on): keep time, probe
                 * nothing. */
                if (current && t->e == NULL) {
                    if (probe_start(h, t))
                        running++;
                    else
                        probe_count(t, false, "out of memory");
                }
                /* The next probe an interval after this one was due, not after it ended,
                 * so slow probes do not stretch the interval; never in the past. */
                t->due += (uint64_t)(t->u->health_interval * 1000);
                if (t->due <= now) t->due = now + 1;
            }
            if (t->due < next) next = t->due;
        }
        if (running > 0) {
            curl_multi_perform(h->multi, &running);
            CURLMsg *msg;
            int left;
            while ((msg = curl_multi_info_read(h->multi, &left)) != NULL) {
                if (msg->msg != CURLMSG_DONE) continue;
                struct target *t = NULL;
                curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
                probe_done(h, t, msg->data.result);
            }
        }
        if (atomic_load(&h->stop)) break;
        now = mono_ms();
        uint64_t wait = next > now ? next - now : 0;
        if (wait > 1000) wait = 1000;
        if (wait > 0) curl_multi_poll(h->multi, NULL, 0, (int)wait, NULL);
    }
    /* Probes cut short by the stop: end them without a verdict. */
    for (size_t i = 0; i < h->num_targets; i++)
        if (h->targets[i].e) probe_done(h, &h->targets[i], CURLE_ABORTED_BY_CALLBACK);
    return NULL;
}

void um__health_drop(void *state)
{
    struct um__health *h = state;
    if (h == NULL) return;
    atomic_store(&h->stop, true);
    if (h->multi) curl_multi_wakeup(h->multi);
    if (h->started) pthread_join(h->thread, NULL);
    /* Dropped while it was the newest (a refused reload, or the end): the one before it,
     * still running after a refused reload, probes again. */
    unsigned gen = h->gen;
    atomic_compare_exchange_strong(&current_gen, &gen, h->prev_gen);
    for (size_t i = 0; i < h->num_targets; i++)
        free(h->targets[i].url);
    free(h->targets);
    if (h->multi) curl_multi_cleanup(h->multi);
    free(h);
}

void *um__health_make(const struct um_config *now, const struct um_config *was, void *was_state,
                      int workers, char *err, size_t errlen)
{
    (void)was, (void)was_state;
    struct um__health *h = um_calloc(1, sizeof *h);
    size_t n = 0;
    for (size_t i = 0; i < now->num_upstreams; i++)
        if (now->upstreams[i].health_path) n += now->upstreams[i].num_servers;
    h->targets = n ? um_calloc(n, sizeof *h->targets) : NULL;
    uint64_t start = mono_ms();
    for (size_t i = 0; i < now->num_upstreams; i++) {
        const struct um_upstream_conf *u = &now->upstreams[i];
        for (size_t j = 0; j < u->num_servers; j++) {
            int slot = um_metrics_server_slot(u->name, u->servers[j].url);
            if (u->health_path == NULL) {
                /* Health checks removed by a reload: the probes' verdict no longer holds. */
                um_metrics_server_probe_out(slot, false);
                continue;
            }
            struct target *t = &h->targets[h->num_targets++];
            t->u = u;
            t->server = u->servers[j].url;
            size_t len = strlen(t->server) + strlen(u->health_path) + 1;
            t->url = um_malloc(len);
            snprintf(t->url, len, "%s%s", t->server, u->health_path);
            t->slot = slot;
            t->out = um_metrics_server_probe_out_get(slot); /* kept across a reload */
            t->due = start;
        }
    }
    h->prev_gen = atomic_load(&current_gen);
    h->gen = h->prev_gen + 1;
    atomic_store(&current_gen, h->gen);
    if (h->num_targets > 0 && workers > 0) { /* workers 0: `umbra -t`, nothing probes */
        h->multi = curl_multi_init();
        if (h->multi == NULL) {
            snprintf(err, errlen, "upstreams: cannot set up the health checks (libcurl)");
            um__health_drop(h);
            return NULL;
        }
        int rc = pthread_create(&h->thread, NULL, prober, h);
        if (rc != 0) {
            snprintf(err, errlen, "upstreams: cannot start the health check thread: %s",
                     strerror(rc));
            um__health_drop(h);
            return NULL;
        }
        h->started = true;
    }
    return h;
}
