/* SPDX-License-Identifier: BSD-2-Clause */
/* The TLS module's record (umbra/module.h): its settings (settings.c), the check of the
 * certificates and ciphers (check.c), and the certificate store a runtime holds: made at
 * start, its files read again by SIGHUP, kept by a reload that leaves the tls table as it
 * was, made anew with the old store's ticket keys when the table changed;
 * its directory watch polled by the main thread. */
#include <string.h>

#include "umbra/config.h"
#include "umbra/log.h"
#include "umbra/metrics.h"
#include "umbra/module.h"
#include "umbra/tls.h"

static const struct um_metric_def counter_defs[] = {
    {"umbra_tls_handshakes_total", "counter", "TLS handshakes completed.", NULL},
    {"umbra_tls_handshake_failures_total", "counter", "TLS handshakes that failed or timed out.",
     NULL},
};
static struct um_metric_block counters = {counter_defs, 2, 0};

void um_tls_count_handshake(bool ok)
{
    um_counter_add(um_metric(&counters, ok ? 0 : 1), 1);
}

static bool same_str(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

/* True when both tls tables describe the same certificates and options. */
static bool same_tls(const struct um_tls_conf *a, const struct um_tls_conf *b)
{
    const struct um_tls_acme_conf *p = &a->acme, *q = &b->acme;
    if (!same_str(p->directory, q->directory) || !same_str(p->email, q->email) ||
        !same_str(p->storage, q->storage) || !same_str(p->ca_file, q->ca_file) ||
        p->renew_before != q->renew_before || p->challenges != q->challenges)
        return false;
    if (a->num_certs != b->num_certs || a->protocols != b->protocols ||
        a->default_cert != b->default_cert || !same_str(a->ciphers, b->ciphers) ||
        !same_str(a->ciphersuites, b->ciphersuites))
        return false;
    for (size_t i = 0; i < a->num_certs; i++) {
        const struct um_tls_cert_conf *x = &a->certs[i], *y = &b->certs[i];
        if (x->num_hosts != y->num_hosts || x->acme != y->acme || !same_str(x->cert, y->cert) ||
            !same_str(x->key, y->key))
            return false;
        for (size_t j = 0; j < x->num_hosts; j++)
            if (!same_str(x->hosts[j], y->hosts[j])) return false;
    }
    return true;
}

static void *make_store(const struct um_config *now, const struct um_config *was, void *was_state,
                        int workers, char *err, size_t errlen)
{
    (void)workers;
    struct um_tls *old = was_state;
    if (old && same_tls(um_tls_conf(now), um_tls_conf(was))) {
        um_tls_hold(old); /* its files were read again by SIGHUP (reread) */
        return old;
    }
    if (um_tls_conf(now)->num_certs == 0) return NULL;
    struct um_tls *t = um_tls_create(now, err, errlen);
    if (t && old) {
        um_tls_inherit_tickets(t, old);
        um_tls_acme_replaces(t, old);
    }
    return t;
}

/* SIGHUP promises the certificates are read again, even when the file does not load. */
static void reread(void *t)
{
    char msg[512] = "";
    int n = um_tls_reload(t, msg, sizeof(msg));
    um_log_info("SIGHUP: reloaded %d certificate%s%s%s", n, n == 1 ? "" : "s", msg[0] ? "; " : "",
                msg);
}

/* The handshake counters, then the ACME clients' lines (a module with a metrics hook
 * renders its counters itself). */
static void metrics(struct um_buf *b, void *running)
{
    (void)running; /* the clients are the stores', which the runtimes hold */
    um_metrics_render_block(b, &counters);
    um_tls_acme_metrics(b);
}

static void status(struct um_buf *b, void *running)
{
    (void)running;
    um_tls_acme_status(b);
}

static void drop_store(void *t)
{
    um_tls_destroy(t);
}

/* The server polls the running runtime's store only: its ACME client starts there, not
 * at make (`umbra -t` makes the store too, and a reload may yet be refused). */
static int watch_fd(void *t)
{
    um_tls_acme_begin(t);
    return um_tls_watch_fd(t);
}

static void on_watch(void *t)
{
    (void)um_tls_on_watch(t);
}

const struct um_module um_tls_module = {
    .name = "tls",
    .settings = &um_tls_settings,
    .counters = &counters,
    .verify = um_tls_check_config,
    .make = make_store,
    .drop = drop_store,
    .watch_fd = watch_fd,
    .on_watch = on_watch,
    .reread = reread,
    .metrics = metrics,
    .status = status,
};
