/* SPDX-License-Identifier: BSD-2-Clause */
/* The ACME clients' shared tables (acme.h): the challenge answers a client publishes for
 * the workers (http-01 key authorizations by token, tls-alpn-01 certificates by name, under
 * a read-write lock: written a few times per order, read per challenge request or
 * handshake), the list of running clients that /metrics and /status.json read, and the TLS
 * module's entry points into them (umbra/tls.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "umbra/log.h"
#include "acme.h"
#include "internal.h"

static double now_real(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The running clients, for /metrics and /status.json (the process-wide state the
 * server hands the module's renderers, um_tls_acme_registry). */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct um__acme *live;

void *um_tls_acme_registry(void)
{
    return &live;
}

void um__acme_status(struct um_buf *b)
{
    double now = now_real();
    bool first = true;
    um_buf_append_str(b, "\"tls\":{\"acme\":[");
    pthread_mutex_lock(&live_lock);
    for (struct um__acme *a = live; a != NULL; a = a->next_live)
        for (size_t i = 0; i < a->num_names; i++) {
            struct um__acme_name *e = &a->names[i];
            double exp = atomic_load(&e->expires);
            um_buf_printf(b, "%s{\"host\":\"%s\",\"hosts\":%zu,", first ? "" : ",",
                          e->hosts[0], e->num_hosts);
            if (exp > 0)
                um_buf_printf(b, "\"expires\":%.0f,\"days_left\":%.2f,", exp,
                              (exp - now) / 86400);
            else
                um_buf_append_str(b, "\"expires\":null,\"days_left\":null,");
            um_buf_printf(b, "\"orders\":%llu,\"failures\":%llu}",
                          (unsigned long long)atomic_load(&e->orders),
                          (unsigned long long)atomic_load(&e->order_failures));
            first = false;
        }
    pthread_mutex_unlock(&live_lock);
    um_buf_append_str(b, "]}");
}

void um__acme_live_add(struct um__acme *a)
{
    pthread_mutex_lock(&live_lock);
    a->next_live = live;
    live = a;
    pthread_mutex_unlock(&live_lock);
}

void um__acme_live_remove(struct um__acme *a)
{
    pthread_mutex_lock(&live_lock);
    for (struct um__acme **p = &live; *p != NULL; p = &(*p)->next_live)
        if (*p == a) {
            *p = a->next_live;
            break;
        }
    pthread_mutex_unlock(&live_lock);
}

void um__acme_metrics(struct um_buf *b)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"umbra_acme_orders_total", "counter", "ACME orders started, by certificate entry."},
        {"umbra_acme_order_failures_total", "counter", "ACME orders that failed."},
        {"umbra_acme_certificate_expiry_days", "gauge",
         "Days until the stored certificate expires (absent: none yet)."},
    };
    double now = now_real();
    pthread_mutex_lock(&live_lock);
    for (size_t f = 0; f < 3; f++) {
        um_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help, fam[f].name,
                      fam[f].type);
        for (struct um__acme *a = live; a != NULL; a = a->next_live)
            for (size_t i = 0; i < a->num_names; i++) {
                struct um__acme_name *e = &a->names[i];
                double exp = atomic_load(&e->expires);
                if (f == 0)
                    um_buf_printf(b, "%s{host=\"%s\"} %llu\n", fam[f].name, e->hosts[0],
                                  (unsigned long long)atomic_load(&e->orders));
                else if (f == 1)
                    um_buf_printf(b, "%s{host=\"%s\"} %llu\n", fam[f].name, e->hosts[0],
                                  (unsigned long long)atomic_load(&e->order_failures));
                else if (exp > 0)
                    um_buf_printf(b, "%s{host=\"%s\"} %.3f\n", fam[f].name, e->hosts[0],
                                  (exp - now) / 86400);
            }
    }
    pthread_mutex_unlock(&live_lock);
}

/* --- the token table (http-01) --------------------------------------------------------- */

void um__acme_publish(struct um__acme *a, const char *token, const char *keyauth)
{
    pthread_rwlock_wrlock(&a->tokens_lock);
    a->tokens = um_realloc(a->tokens, (a->num_tokens + 1) * sizeof *a->tokens);
    a->tokens[a->num_tokens++] = (struct um__acme_token){
        .token = um_strndup(token, strlen(token)),
        .keyauth = um_strndup(keyauth, strlen(keyauth)), .cert = NULL, .key = NULL};
    pthread_rwlock_unlock(&a->tokens_lock);
}

/* tls-alpn-01: the validation certificate for name (lower case), which the table owns. */
void um__acme_publish_alpn(struct um__acme *a, const char *name, X509 *cert, EVP_PKEY *key)
{
    pthread_rwlock_wrlock(&a->tokens_lock);
    a->tokens = um_realloc(a->tokens, (a->num_tokens + 1) * sizeof *a->tokens);
    a->tokens[a->num_tokens++] = (struct um__acme_token){
        .token = um_strndup(name, strlen(name)), .keyauth = NULL, .cert = cert, .key = key};
    atomic_fetch_add(&a->num_alpn, 1);
    pthread_rwlock_unlock(&a->tokens_lock);
}

void um__acme_token_free(struct um__acme_token *t)
{
    free(t->token);
    free(t->keyauth);
    X509_free(t->cert);
    EVP_PKEY_free(t->key);
}

/* Takes back the http-01 token, or the tls-alpn-01 certificate of the name, token. */
void um__acme_unpublish(struct um__acme *a, const char *token, bool alpn)
{
    pthread_rwlock_wrlock(&a->tokens_lock);
    for (size_t i = 0; i < a->num_tokens; i++) {
        if (strcmp(a->tokens[i].token, token) != 0 || (a->tokens[i].cert != NULL) != alpn)
            continue;
        um__acme_token_free(&a->tokens[i]);
        a->tokens[i] = a->tokens[--a->num_tokens];
        if (alpn)
            atomic_fetch_sub(&a->num_alpn, 1);
        break;
    }
    pthread_rwlock_unlock(&a->tokens_lock);
}

bool um__acme_alpn_find(struct um__acme *a, const char *name, size_t n, X509 **cert,
                        EVP_PKEY **key)
{
    bool found = false;
    if (atomic_load_explicit(&a->num_alpn, memory_order_acquire) == 0)
        return false;
    pthread_rwlock_rdlock(&a->tokens_lock);
    for (size_t i = 0; i < a->num_tokens && !found; i++) {
        const struct um__acme_token *t = &a->tokens[i];
        if (t->cert == NULL || strlen(t->token) != n || strncasecmp(t->token, name, n) != 0)
            continue;
        X509_up_ref(t->cert);
        EVP_PKEY_up_ref(t->key);
        *cert = t->cert;
        *key = t->key;
        found = true;
    }
    pthread_rwlock_unlock(&a->tokens_lock);
    return found;
}

bool um__acme_answer(struct um__acme *a, um_str token, char *out, size_t len, size_t *n)
{
    bool found = false;
    pthread_rwlock_rdlock(&a->tokens_lock);
    for (size_t i = 0; i < a->num_tokens && !found; i++) {
        const struct um__acme_token *t = &a->tokens[i];
        if (t->keyauth == NULL || strlen(t->token) != token.len ||
            memcmp(t->token, token.base, token.len) != 0)
            continue;
        size_t kl = strlen(t->keyauth);
        if (kl <= len) {
            memcpy(out, t->keyauth, kl);
            *n = kl;
            found = true;
        }
    }
    pthread_rwlock_unlock(&a->tokens_lock);
    return found;
}

bool um_tls_acme_http01(struct um_tls *t, um_str token, char *out, size_t len, size_t *n)
{
    return t != NULL && t->acme != NULL && um__acme_answer(t->acme, token, out, len, n);
}

void um_tls_acme_metrics(struct um_buf *b)
{
    um__acme_metrics(b);
}

void um_tls_acme_status(struct um_buf *b)
{
    um__acme_status(b);
}

void um_tls_acme_replaces(struct um_tls *t, struct um_tls *old)
{
    UM_ASSERT(t->replaces == NULL && !t->acme_begun);
    um_tls_hold(old);
    t->replaces = old;
}

void um_tls_acme_begin(struct um_tls *t)
{
    if (t->acme_begun)
        return;
    t->acme_begun = true;
    if (t->replaces != NULL) {
        /* Workers may still read its client (the ClientHello callback, http-01): it is
         * stopped here and freed with its store. */
        um__acme_halt(t->replaces->acme);
        um_tls_destroy(t->replaces);
        t->replaces = NULL;
    }
    um__acme_begin(t->acme);
}

