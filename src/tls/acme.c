/* SPDX-License-Identifier: BSD-2-Clause */
/* The ACME client of a certificate store (RFC 8555): one thread per store that has entries
 * with acme = true, begun when the store's runtime runs (um_tls_acme_begin), halted when
 * the store is destroyed or a reload's new store begins its own.
 *
 * What it does. For each acme entry it looks at the stored certificate
 * (STORAGE/HOST.crt): none, or one that reaches its renewal time (renew_before before its
 * notAfter, a third of its lifetime by default, or earlier when the CA's renewal
 * information says so: acme_ari.c), gets an order: newOrder, each authorization's http-01
 * or tls-alpn-01 challenge answered by the workers from the tables of acme_tables.c,
 * finalize with a CSR for a fresh P-256 key, the chain downloaded. The key and then the
 * chain are written atomically (write, fsync, rename, 0600) over the entry's files, and the
 * store's directory watch (watch.c) loads them like any renewed certificate file: the
 * client never touches the store's contexts. A failed order is retried after a backoff
 * with jitter; the certificate already stored keeps serving.
 *
 * Threads. Everything but the tables, the metrics atomics and stop is the thread's.
 * um__acme_halt sets stop, wakes the thread's nap and aborts its transfer (the progress
 * callback), then joins; the client is freed with its store, after the last handshake
 * that could look at its tables. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#include "umbra/log.h"
#include "acme.h"
#include "internal.h"

/* Polls of an authorization or an order before the order is given up. */
#define MAX_POLLS 64
/* The first retry after a failure, doubled for each failure in a row up to a day. */
#define RETRY_FIRST 15.0
#define RETRY_MAX 86400.0
/* Authorizations of one order, at most. */
#define MAX_AUTHZ 100

static double now_real(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Sleeps up to seconds, or until stop: false when stopping. */
static bool nap(struct um__acme *a, double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double at = (double)ts.tv_sec + ts.tv_nsec / 1e9 + seconds;
    ts.tv_sec = (time_t)at;
    ts.tv_nsec = (long)((at - floor(at)) * 1e9);
    pthread_mutex_lock(&a->lock);
    while (!atomic_load(&a->stop))
        if (pthread_cond_timedwait(&a->cond, &a->lock, &ts) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&a->lock);
    return !atomic_load(&a->stop);
}

/* --- the account ----------------------------------------------------------------------- */

/* The account key (made and stored once), its JWK and thumbprint, and its URL (newAccount
 * answers an existing key's account with its URL too). */
static bool account(struct um__acme *a, char *err, size_t errlen)
{
    struct um__acme_resp r = {0};
    struct um_buf b, payload;
    char path[4096];
    if (a->kid != NULL)
        return true;
    if (a->account == NULL) {
        snprintf(path, sizeof path, "%s/account.key", a->storage);
        a->account = um__acme_key_load(path, err, errlen);
        if (a->account == NULL)
            return false;
        um_buf_init(&b);
        if (!um__acme_jwk(a->account, &b)) {
            um_buf_dispose(&b);
            snprintf(err, errlen, "%.*s: not an ECDSA P-256 key",
                     (int)(errlen > 64 ? errlen - 64 : 0), path);
            return false;
        }
        a->jwk = um_buf_detach(&b);
        um_buf_init(&b);
        um__acme_thumbprint(a->jwk, strlen(a->jwk), &b);
        a->thumbprint = um_buf_detach(&b);
    }
    um_buf_init(&payload);
    um_buf_append_str(&payload, "{\"termsOfServiceAgreed\":true");
    if (a->email != NULL)
        um_buf_printf(&payload, ",\"contact\":[\"mailto:%s\"]", a->email);
    um_buf_append_str(&payload, "}");
    bool ok = um__acme_post(a, a->new_account, payload.base, &r, err, errlen);
    if (ok && r.location == NULL) {
        snprintf(err, errlen, "%s: the CA gave no account URL (Location)", a->new_account);
        ok = false;
    }
    if (ok) {
        a->kid = r.location;
        r.location = NULL;
        um_log_info("acme: account %s (%s)", a->kid, a->directory);
    }
    um__acme_resp_dispose(&r);
    um_buf_dispose(&payload);
    return ok;
}

/* --- an order -------------------------------------------------------------------------- */

/* POST-as-GET url (at most MAX_POLLS times: a minute at least) until its status is
 * neither pending nor processing: the final status (malloc'd) with the object in r; NULL
 * with err on failure. */
static char *poll(struct um__acme *a, const char *url, struct um__acme_resp *r, char *err,
                  size_t errlen)
{
    for (int i = 0; i < MAX_POLLS; i++) {
        if (!um__acme_post(a, url, "", r, err, errlen))
            return NULL;
        char *status = um__acme_jstr(r->body.base, r->body.len, "status");
        if (status == NULL) {
            snprintf(err, errlen, "%s: no status in the answer", url);
            return NULL;
        }
        if (strcmp(status, "pending") != 0 && strcmp(status, "processing") != 0)
            return status;
        free(status);
        /* Without the CA's Retry-After: 50 ms, doubling up to 1 s (a validation that
         * takes the CA a moment is seen at once; a slow one is asked once a second). */
        double wait =
            r->retry_after > 0 ? fmin(r->retry_after, 60) : fmin(0.05 * (1 << (i < 5 ? i : 5)), 1);
        if (!nap(a, wait)) {
            snprintf(err, errlen, "stopped");
            return NULL;
        }
    }
    snprintf(err, errlen, "%s: still pending after %d polls", url, MAX_POLLS);
    return NULL;
}

/* The error of the challenge that failed in an invalid authorization, as the CA wrote it. */
static void challenge_error(const struct um__acme_resp *r, char *err, size_t errlen)
{
    const char *cs, *items[16];
    size_t cn, lens[16];
    snprintf(err, errlen, "the authorization is invalid (the CA gave no reason)");
    if (!um__acme_jspan(r->body.base, r->body.len, "challenges", &cs, &cn))
        return;
    size_t n = um__acme_jarray(cs, cn, items, lens, 16);
    for (size_t i = 0; i < n; i++) {
        const char *es;
        size_t en;
        if (um__acme_jspan(items[i], lens[i], "error", &es, &en)) {
            um__acme_problem(es, en, err, errlen);
            return;
        }
    }
}

/* Finds the challenge of type want of the authorization in r: its URL and token
 * (malloc'd). */
static bool find_challenge(const struct um__acme_resp *r, const char *want, char **url,
                           char **token)
{
    const char *cs, *items[16];
    size_t cn, lens[16];
    if (!um__acme_jspan(r->body.base, r->body.len, "challenges", &cs, &cn))
        return false;
    size_t n = um__acme_jarray(cs, cn, items, lens, 16);
    for (size_t i = 0; i < n; i++) {
        char *type = um__acme_jstr(items[i], lens[i], "type");
        bool match = type != NULL && strcmp(type, want) == 0;
        free(type);
        if (!match)
            continue;
        *url = um__acme_jstr(items[i], lens[i], "url");
        *token = um__acme_jstr(items[i], lens[i], "token");
        if (*url != NULL && *token != NULL)
            return true;
        free(*url), free(*token);
    }
    return false;
}

/* An authorization of an order: its URL, and once its challenge is answered what was
 * published for it (the token for http-01, the name for tls-alpn-01). */
struct authz {
    char *url;
    char *published; /* NULL: nothing published (valid already, or not answered) */
    bool alpn;
};

static void authz_dispose(struct um__acme *a, struct authz *z)
{
    if (z->published != NULL) um__acme_unpublish(a, z->published, z->alpn);
    free(z->published);
    free(z->url);
}

/* Publishes the answer to one of z's challenges (http-01 when allowed: it needs no
 * handshake of ours, else tls-alpn-01) and tells the CA it is ready; nothing when z is
 * valid already. */
static bool answer(struct um__acme *a, struct authz *z, char *err, size_t errlen)
{
    struct um__acme_resp r = {0};
    char *status = NULL, *curl = NULL, *token = NULL, *name = NULL;
    bool ok = false;
    if (!um__acme_post(a, z->url, "", &r, err, errlen)) goto out;
    status = um__acme_jstr(r.body.base, r.body.len, "status");
    if (status != NULL && strcmp(status, "valid") == 0) {
        ok = true;
        goto out;
    }
    z->alpn =
        !((a->challenges & UM_TLS_ACME_HTTP01) && find_challenge(&r, "http-01", &curl, &token));
    if (z->alpn && !((a->challenges & UM_TLS_ACME_TLSALPN01) &&
                     find_challenge(&r, "tls-alpn-01", &curl, &token))) {
        snprintf(err, errlen, "%s: the CA offers none of the challenges of tls.acme.challenges",
                 z->url);
        goto out;
    }
    const char *is;
    size_t in;
    if (um__acme_jspan(r.body.base, r.body.len, "identifier", &is, &in))
        name = um__acme_jstr(is, in, "value");
    if (name == NULL) {
        snprintf(err, errlen, "%s: an authorization without its identifier", z->url);
        goto out;
    }
    um_log_info("acme: %s: answering the %s challenge", name, z->alpn ? "tls-alpn-01" : "http-01");
    struct um_buf ka;
    um_buf_init(&ka);
    um_buf_printf(&ka, "%s.%s", token, a->thumbprint);
    if (!z->alpn) {
        um__acme_publish(a, token, ka.base);
        z->published = token;
        token = NULL;
    } else {
        X509 *vc;
        EVP_PKEY *vk;
        if (!um__acme_alpn_cert(name, ka.base, &vc, &vk)) {
            snprintf(err, errlen, "%s: cannot make the tls-alpn-01 certificate", name);
            um_buf_dispose(&ka);
            goto out;
        }
        um__acme_publish_alpn(a, name, vc, vk);
        z->published = name;
        name = NULL;
    }
    um_buf_dispose(&ka);
    ok = um__acme_post(a, curl, "{}", &r, err, errlen);
out:
    free(status), free(curl), free(token), free(name);
    um__acme_resp_dispose(&r);
    return ok;
}

/* Waits for an answered authorization to be validated. */
static bool settle(struct um__acme *a, struct authz *z, char *err, size_t errlen)
{
    if (z->published == NULL) return true; /* valid already */
    struct um__acme_resp r = {0};
    char *status = poll(a, z->url, &r, err, errlen);
    bool ok = status != NULL && strcmp(status, "valid") == 0;
    if (status != NULL && !ok) challenge_error(&r, err, errlen);
    free(status);
    um__acme_resp_dispose(&r);
    return ok;
}

/* The order's authorizations (the JSON strings items[0..n)): every challenge answered
 * first, then each waited for, so that the CA validates them together. */
static bool authorize_all(struct um__acme *a, const char **items, const size_t *lens, size_t n,
                          char *err, size_t errlen)
{
    struct authz z[MAX_AUTHZ];
    memset(z, 0, sizeof z);
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        /* The element is a JSON string: strip its quotes (URLs carry no escapes). */
        size_t un = lens[i];
        const char *us = items[i];
        if (un >= 2 && us[0] == '"') us++, un -= 2;
        z[i].url = um_strndup(us, un);
    }
    for (size_t i = 0; i < n && ok; i++)
        ok = answer(a, &z[i], err, errlen);
    for (size_t i = 0; i < n && ok; i++)
        ok = settle(a, &z[i], err, errlen);
    for (size_t i = 0; i < n; i++)
        authz_dispose(a, &z[i]);
    return ok;
}

/* The key, then the chain, over the entry's files: the watch may load the new key with
 * the old chain in between, which fails (logged) and keeps the old pair until the chain
 * follows. */
static bool store_pair(struct um__acme_name *e, EVP_PKEY *key, const struct um_buf *chain,
                       char *err, size_t errlen)
{
    struct um_buf pem;
    um_buf_init(&pem);
    bool ok = um__acme_key_pem(key, &pem);
    if (!ok)
        snprintf(err, errlen, "cannot write the key as PEM");
    else if (!(ok = um__acme_write_file(e->key, pem.base, pem.len)))
        snprintf(err, errlen, "%s: %s", e->key, strerror(errno));
    else if (!(ok = um__acme_write_file(e->cert, chain->base, chain->len)))
        snprintf(err, errlen, "%s: %s", e->cert, strerror(errno));
    um_buf_dispose(&pem);
    return ok;
}

/* Finalizes the ready order at order_url (finalize: its finalize URL) with a CSR for a new
 * key, waits for the certificate and stores it. */
static bool finish(struct um__acme *a, struct um__acme_name *e, const char *order_url,
                   const char *finalize, char *err, size_t errlen)
{
    struct um__acme_resp r = {0};
    struct um_buf b;
    char *status = NULL, *cert_url = NULL;
    bool ok = false;
    EVP_PKEY *key = um__acme_key_new();
    um_buf_init(&b);
    um_buf_append_str(&b, "{\"csr\":\"");
    if (key == NULL || !um__acme_csr(key, e->hosts, e->num_hosts, &b)) {
        snprintf(err, errlen, "cannot make the key and CSR");
        goto out;
    }
    um_buf_append_str(&b, "\"}");
    if (!um__acme_post(a, finalize, b.base, &r, err, errlen))
        goto out;
    status = um__acme_jstr(r.body.base, r.body.len, "status");
    if (status == NULL || strcmp(status, "valid") != 0) {
        free(status);
        status = poll(a, order_url, &r, err, errlen);
    }
    if (status == NULL)
        goto out;
    if (strcmp(status, "valid") != 0) {
        char *detail = NULL;
        const char *es;
        size_t en;
        char prob[1024] = "no reason given";
        if (um__acme_jspan(r.body.base, r.body.len, "error", &es, &en))
            um__acme_problem(es, en, prob, sizeof prob);
        snprintf(err, errlen, "the order is %s: %s", status, prob);
        free(detail);
        goto out;
    }
    cert_url = um__acme_jstr(r.body.base, r.body.len, "certificate");
    if (cert_url == NULL) {
        snprintf(err, errlen, "%s: a valid order without a certificate URL", order_url);
        goto out;
    }
    if (!um__acme_post(a, cert_url, "", &r, err, errlen))
        goto out;
    if (r.body.len == 0 || strstr(r.body.base, "-----BEGIN CERTIFICATE-----") == NULL) {
        snprintf(err, errlen, "%s: the answer is not a PEM certificate chain", cert_url);
        goto out;
    }
    ok = store_pair(e, key, &r.body, err, errlen);
out:
    free(status), free(cert_url);
    EVP_PKEY_free(key);
    um_buf_dispose(&b);
    um__acme_resp_dispose(&r);
    return ok;
}

/* A new certificate for e, from newOrder to the stored files. */
static bool order(struct um__acme *a, struct um__acme_name *e, char *err, size_t errlen)
{
    struct um__acme_resp r = {0};
    struct um_buf b;
    const char *as, *items[MAX_AUTHZ];
    size_t an, lens[MAX_AUTHZ];
    char *finalize = NULL, *order_url = NULL;
    bool ok = false;
    if (!um__acme_directory(a, err, errlen) || !account(a, err, errlen))
        return false;
    um_buf_init(&b);
    um_buf_append_str(&b, "{\"identifiers\":[");
    for (size_t i = 0; i < e->num_hosts; i++)
        um_buf_printf(&b, "%s{\"type\":\"dns\",\"value\":\"%s\"}", i ? "," : "", e->hosts[i]);
    um_buf_append_str(&b, "]");
    if (e->replaces != NULL && a->renewal_info != NULL) /* RFC 9773 section 5 */
        um_buf_printf(&b, ",\"replaces\":\"%s\"", e->replaces);
    um_buf_append_str(&b, "}");
    if (!um__acme_post(a, a->new_order, b.base, &r, err, errlen))
        goto out;
    order_url = r.location;
    r.location = NULL;
    finalize = um__acme_jstr(r.body.base, r.body.len, "finalize");
    if (order_url == NULL || finalize == NULL ||
        !um__acme_jspan(r.body.base, r.body.len, "authorizations", &as, &an)) {
        snprintf(err, errlen, "%s: the CA's order lacks its URL, finalize or authorizations",
                 a->new_order);
        goto out;
    }
    /* The spans point into r's body, which the authorizations' requests reuse: copy. */
    char *alist = um_strndup(as, an);
    size_t n = um__acme_jarray(alist, an, items, lens, MAX_AUTHZ);
    ok = authorize_all(a, items, lens, n, err, errlen);
    free(alist);
    if (ok)
        ok = finish(a, e, order_url, finalize, err, errlen);
out:
    free(finalize), free(order_url);
    um_buf_dispose(&b);
    um__acme_resp_dispose(&r);
    return ok;
}

/* --- the thread ------------------------------------------------------------------------ */

/* When e's stored certificate is due for renewal (0 when there is none), and why. */
static double due_at(const struct um__acme *a, const struct um__acme_name *e, double *expires)
{
    double nb, na;
    *expires = 0;
    if (!um__acme_cert_times(e->cert, &nb, &na))
        return 0;
    *expires = na;
    double before = a->renew_before > 0 ? a->renew_before : (na - nb) / 3;
    return na - before;
}

/* A delay with jitter: d times a random factor in [0.75, 1.25), so that many servers
 * behind one CA do not retry in step. */
static double jitter(double d)
{
    unsigned short r = 0;
    if (RAND_bytes((unsigned char *)&r, sizeof r) != 1)
        r = 32768;
    return d * (0.75 + 0.5 * r / 65536.0);
}

/* In its last third (or once expired), a certificate that is still not renewed gets a
 * warning a day once an order for it has failed, with why; the retries go on their own
 * backoff (up to a day apart), each logged as an error. */
static void warn_if_expiring(struct um__acme_name *e, double now)
{
    double nb, na;
    if (e->failures == 0 || now < e->next_warning) return;
    if (!um__acme_cert_times(e->cert, &nb, &na)) {
        e->next_warning = now + 86400; /* none stored: each failure says so */
        return;
    }
    if (now < na - (na - nb) / 3) {
        e->next_warning = na - (na - nb) / 3;
        return;
    }
    e->next_warning = now + 86400;
    const char *why = e->last_error;
    if (now >= na)
        um_log_warn("acme: %s: the certificate expired %.1f days ago and is not renewed (last "
                    "error: %s)",
                    e->hosts[0], (now - na) / 86400, why);
    else
        um_log_warn("acme: %s: the certificate expires in %.1f days, in the last third of its "
                    "lifetime, and is not renewed (last error: %s)",
                    e->hosts[0], (na - now) / 86400, why);
}

/* Looks after entry e now: orders a certificate when due; sets its next_try. */
static void tend(struct um__acme *a, struct um__acme_name *e)
{
    char err[2048] = "";
    double expires, due = due_at(a, e, &expires), now = now_real(), recheck = 0;
    atomic_store(&e->expires, expires);
    if (due > now && um__acme_directory(a, err, sizeof err)) {
        /* ARI may move the renewal earlier; asked again after recheck. */
        double ari = um__acme_ari_due(a, e->cert, now, &recheck, &e->replaces);
        if (ari > 0 && ari < due) {
            um_log_info("acme: %s: the CA suggests renewing %s (renewal information)",
                        e->hosts[0], ari <= now ? "now" : "earlier");
            due = ari;
        }
    }
    if (due > now) {
        e->next_try = recheck > 0 ? fmin(due, now + recheck) : due;
        return;
    }
    if (expires > 0)
        um_log_info("acme: %s: renewing the certificate, which expires in %.1f days",
                    e->hosts[0], (expires - now) / 86400);
    else
        um_log_info("acme: %s: ordering a certificate from %s", e->hosts[0], a->directory);
    atomic_fetch_add(&e->orders, 1);
    if (order(a, e, err, sizeof err)) {
        e->failures = 0;
        e->last_error[0] = '\0';
        e->next_warning = 0;
        free(e->replaces);
        e->replaces = NULL;
        double nexp;
        double ndue = due_at(a, e, &nexp);
        atomic_store(&e->expires, nexp);
        um_log_info("acme: %s: certificate issued, expires in %.1f days; stored in %s",
                    e->hosts[0], (nexp - now_real()) / 86400, e->cert);
        /* A certificate due at once (renew_before longer than the lifetime) renews at the
         * first retry delay, not in a loop; with ARI, its window is asked for then too. */
        double soon = now_real() + RETRY_FIRST;
        e->next_try = a->renewal_info != NULL ? soon : fmax(ndue, soon);
        return;
    }
    if (atomic_load(&a->stop))
        return;
    atomic_fetch_add(&e->order_failures, 1);
    double delay = RETRY_FIRST * pow(2, e->failures < 20 ? e->failures : 20);
    delay = fmax(jitter(fmin(delay, RETRY_MAX)), a->retry_hint);
    a->retry_hint = 0;
    e->failures++;
    e->next_try = now_real() + delay;
    size_t elen = strnlen(err, sizeof e->last_error - 1); /* cut to the room */
    memcpy(e->last_error, err, elen);
    e->last_error[elen] = '\0';
    char kept[96];
    if (expires > 0)
        snprintf(kept, sizeof kept, "the stored certificate keeps serving (it expires in %.1f "
                 "days)", (expires - now) / 86400);
    else
        snprintf(kept, sizeof kept, "its handshakes get the default certificate until then");
    um_log_err("acme: %s: the order failed: %s; %s; trying again in %.0f s", e->hosts[0], err,
               kept, delay);
}

static void *run(void *arg)
{
    struct um__acme *a = arg;
    while (!atomic_load(&a->stop)) {
        double next = now_real() + 3600;
        for (size_t i = 0; i < a->num_names && !atomic_load(&a->stop); i++) {
            struct um__acme_name *e = &a->names[i];
            if (e->next_try <= now_real())
                tend(a, e);
            warn_if_expiring(e, now_real());
            next = fmin(next, e->next_try);
            if (e->failures > 0) next = fmin(next, e->next_warning);
        }
        double wait = next - now_real();
        if (!nap(a, wait < 0.05 ? 0.05 : wait))
            break;
    }
    return NULL;
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? um_strndup(s, strlen(s)) : NULL;
}

static void acme_free(struct um__acme *a)
{
    for (size_t i = 0; i < a->num_names; i++) {
        for (size_t j = 0; j < a->names[i].num_hosts; j++)
            free(a->names[i].hosts[j]);
        free(a->names[i].hosts);
        free(a->names[i].cert);
        free(a->names[i].key);
        free(a->names[i].replaces);
    }
    free(a->names);
    for (size_t i = 0; i < a->num_tokens; i++)
        um__acme_token_free(&a->tokens[i]);
    free(a->tokens);
    free(a->directory), free(a->email), free(a->storage), free(a->ca_file);
    if (a->curl != NULL)
        curl_easy_cleanup(a->curl);
    EVP_PKEY_free(a->account);
    free(a->jwk), free(a->thumbprint), free(a->kid), free(a->nonce);
    free(a->new_nonce), free(a->new_account), free(a->new_order), free(a->renewal_info);
    pthread_rwlock_destroy(&a->tokens_lock);
    pthread_cond_destroy(&a->cond);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

struct um__acme *um__acme_new(const struct um_tls_conf *tc)
{
    size_t n = 0;
    for (size_t i = 0; i < tc->num_certs; i++)
        n += tc->certs[i].acme;
    if (n == 0 || tc->acme.directory == NULL)
        return NULL;
    struct um__acme *a = um_calloc(1, sizeof *a);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&a->lock, NULL);
    pthread_rwlock_init(&a->tokens_lock, NULL);
    a->directory = dup_or_null(tc->acme.directory);
    a->email = dup_or_null(tc->acme.email);
    a->storage = dup_or_null(tc->acme.storage);
    a->ca_file = dup_or_null(tc->acme.ca_file);
    a->renew_before = tc->acme.renew_before;
    a->challenges = tc->acme.challenges;
    a->names = um_calloc(n, sizeof *a->names);
    for (size_t i = 0; i < tc->num_certs; i++) {
        const struct um_tls_cert_conf *cc = &tc->certs[i];
        if (!cc->acme)
            continue;
        struct um__acme_name *e = &a->names[a->num_names++];
        e->hosts = um_calloc(cc->num_hosts, sizeof *e->hosts);
        for (size_t j = 0; j < cc->num_hosts; j++)
            e->hosts[e->num_hosts++] = dup_or_null(cc->hosts[j]);
        e->cert = dup_or_null(cc->cert);
        e->key = dup_or_null(cc->key);
    }
    return a;
}

void um__acme_begin(struct um__acme *a)
{
    if (a == NULL || a->started || a->halted)
        return;
    a->curl = a->curl != NULL ? a->curl : curl_easy_init();
    if (a->curl == NULL || pthread_create(&a->thread, NULL, run, a) != 0) {
        um_log_err("acme: cannot start the ACME client (%s): certificates will not be ordered",
                   a->curl == NULL ? "libcurl" : strerror(errno));
        a->halted = true;
        return;
    }
    a->started = true;
    um__acme_live_add(a);
}

void um__acme_halt(struct um__acme *a)
{
    if (a == NULL)
        return;
    a->halted = true;
    if (!a->started)
        return;
    um__acme_live_remove(a);
    pthread_mutex_lock(&a->lock);
    atomic_store(&a->stop, true);
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->thread, NULL);
    a->started = false;
}

void um__acme_free(struct um__acme *a)
{
    if (a == NULL)
        return;
    um__acme_halt(a);
    acme_free(a);
}
