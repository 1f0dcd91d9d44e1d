/* SPDX-License-Identifier: BSD-2-Clause */
/* The TLS certificate store (the non-blocking I/O of a connection is in transport.c).
 *
 * Contexts and reloads. Each certificate entry has one SSL_CTX, which the store holds a
 * reference to. A connection's SSL starts on the default entry's context (SSL_new must be
 * given one before the ClientHello names a host) and the servername callback moves it to
 * the entry SNI picks. A reload builds a complete new context off to the side and swaps
 * the entry's pointer under t->lock; the callback takes a reference to the entry's context
 * under the same lock before handing it to SSL_set_SSL_CTX. The old context is freed by
 * reference counting only, when the store and the last SSL using it have let it go, so a
 * handshake in progress finishes on the certificate it started with. Every context is
 * configured identically apart from its certificate, which matters because SSL_new copies
 * options, protocol versions and cipher lists from the first context and
 * SSL_set_SSL_CTX does not change them.
 *
 * Store lifetime. Each SSL made by um_tls_accept_new carries the store in its ex_data and
 * holds a reference to it; the ex_data free callback drops it on SSL_free. So the SNI and
 * ticket callbacks always find a live store, and um_tls_destroy need not wait for the
 * connections of an old configuration.
 *
 * Session tickets. OpenSSL encrypts tickets with the keys of the SSL's session_ctx, which
 * differs per entry, so the store installs its own key callback on every context: all
 * contexts, and so all workers, share the store's keys. A key is used to encrypt for
 * UM_TLS_TICKET_ROTATE_SECONDS, then kept one more period to decrypt (returning 2 so that
 * OpenSSL renews the ticket). The server-side session cache is off: tickets carry the
 * session, and the cache would take a lock on every handshake. Since one key opens every
 * entry's tickets, a decrypted ticket is used only when the ClientHello names the host the
 * session was made for (on_ticket; RFC 6066 section 3).
 *
 * Watching. An inotify descriptor watches the directories of the cert and key files, as
 * written and as their symlinks resolve, for anything that can replace a file's content.
 * A timerfd delays the check until UM_TLS_WATCH_DELAY_MS after the last event, so a cert
 * and its key written one after the other reload once, together. The check then compares
 * each file's identity (device, inode, size, mtime, ctime, following symlinks) with what
 * was last loaded, so unrelated files in the same directory reload nothing. Both
 * descriptors sit in one epoll descriptor: the main loop polls a single fd. */
#include "umbra/tls.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "umbra/config.h"
#include "umbra/log.h"
#include "umbra/metrics.h"
#include "umbra/module.h"
#include "internal.h"
#include "acme.h"

static pthread_once_t index_once = PTHREAD_ONCE_INIT;
int um__tls_ssl_index = -1; /* the store a connection holds */
static int error_index = -1; /* the connection's last error (char[UM__TLS_ERROR_LEN]), once it has one */

static void store_unref(struct um_tls *t);

static void on_ssl_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                        void *argp)
{
    if (ptr != NULL)
        store_unref(ptr);
}

static void on_error_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                          void *argp)
{
    free(ptr);
}

/* Set (to a non-NULL mark) on a connection that got a tls-alpn-01 validation certificate. */
static int acme_index = -1;

static void make_index(void)
{
    um__tls_ssl_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, on_ssl_free);
    acme_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    error_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, on_error_free);
}

int um__tls_error_index(void)
{
    pthread_once(&index_once, make_index);
    return error_index;
}

/* --- errors -------------------------------------------------------------------------------- */

void um__tls_describe(unsigned long e, char *buf, size_t len)
{
    if (e == 0) {
        snprintf(buf, len, "unknown error");
    } else if (ERR_SYSTEM_ERROR(e)) {
        snprintf(buf, len, "%s", strerror(ERR_GET_REASON(e)));
    } else {
        const char *r = ERR_reason_error_string(e);
        if (r != NULL)
            snprintf(buf, len, "%s", r);
        else
            ERR_error_string_n(e, buf, len);
    }
}

/* Takes the earliest error of the thread's queue (the root cause), clears the queue. */
static void take_error(char *buf, size_t len)
{
    unsigned long e = ERR_get_error();
    um__tls_describe(e, buf, len);
    ERR_clear_error();
}

/* --- contexts -------------------------------------------------------------------------- */

struct passphrase {
    bool asked;
};

/* Keys with a passphrase are refused: there is nobody to type it at a reload. Without
 * this callback OpenSSL would prompt on the terminal. */
static int on_passphrase(char *buf, int size, int rwflag, void *arg)
{
    ((struct passphrase *)arg)->asked = true;
    return -1;
}

/* Whether the thread's error queue holds "no PEM object found", which the decoders report
 * as "unsupported" or PEM as "no start line". */
static bool queue_says_no_pem(void)
{
    unsigned long e;
    while ((e = ERR_get_error()) != 0) {
        int lib = ERR_GET_LIB(e), r = ERR_GET_REASON(e);
        if ((lib == ERR_LIB_PEM && r == PEM_R_NO_START_LINE) ||
            (lib == ERR_LIB_OSSL_DECODER && r == ERR_R_UNSUPPORTED))
            return true;
    }
    return false;
}

/* Describes why loading what ("certificate", "private key") failed, clearing the queue. */
static void load_error(const char *what, char *reason, size_t len)
{
    unsigned long e = ERR_peek_error();
    char why[200];
    if (ERR_SYSTEM_ERROR(e)) {
        take_error(reason, len);
    } else if (queue_says_no_pem()) {
        snprintf(reason, len, "no PEM %s in the file", what);
    } else {
        um__tls_describe(e, why, sizeof why);
        snprintf(reason, len, "bad %s: %s", what, why);
    }
    ERR_clear_error();
}

static enum um_tls_fault load_pair(SSL_CTX *ctx, const char *cert, const char *key,
                                   char *reason, size_t len)
{
    struct passphrase pp = {false};
    ERR_clear_error();
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        load_error("certificate", reason, len);
        return UM_TLS_FAULT_CERT;
    }
    SSL_CTX_set_default_passwd_cb(ctx, on_passphrase);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, &pp);
    int ok = SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM);
    SSL_CTX_set_default_passwd_cb(ctx, NULL);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL);
    if (ok != 1) {
        unsigned long e = ERR_peek_error();
        if (pp.asked) {
            snprintf(reason, len, "the key is encrypted (keys with a passphrase are not "
                                  "supported)");
            ERR_clear_error();
        } else if (ERR_GET_LIB(e) == ERR_LIB_X509 &&
                   (ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH ||
                    ERR_GET_REASON(e) == X509_R_KEY_TYPE_MISMATCH)) {
            /* SSL_CTX_use_PrivateKey checks the key against the certificate already. */
            snprintf(reason, len, "the key does not match the certificate");
            ERR_clear_error();
            return UM_TLS_FAULT_MISMATCH;
        } else {
            load_error("private key", reason, len);
        }
        return UM_TLS_FAULT_KEY;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ERR_clear_error();
        snprintf(reason, len, "the key does not match the certificate");
        return UM_TLS_FAULT_MISMATCH;
    }
    return UM_TLS_FAULT_NONE;
}

static int on_servername(SSL *ssl, int *alert, void *arg);
static int on_client_hello(SSL *ssl, int *alert, void *arg);
static int on_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned int inlen, void *arg);

/* A server context with the store's settings and no certificate yet. */
static SSL_CTX *new_ctx(unsigned protocols, const char *ciphers, const char *ciphersuites,
                        char *reason, size_t len)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        take_error(reason, len);
        return NULL;
    }
    /* Server preference, except that a client preferring ChaCha20 (no AES hardware) gets
     * it. A plain EOF reads as the end of the stream: HTTP framing detects truncation. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                 SSL_OP_PRIORITIZE_CHACHA | SSL_OP_NO_COMPRESSION |
                                 SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* Partial writes and moving buffers suit the connection's output queue; idle
     * keep-alive connections give their record buffers back. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_min_proto_version(ctx, (protocols & UM_TLS_PROTO_TLS12) ? TLS1_2_VERSION
                                                                        : TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(ctx, (protocols & UM_TLS_PROTO_TLS13) ? TLS1_3_VERSION
                                                                        : TLS1_2_VERSION);
    if (SSL_CTX_set_cipher_list(ctx, ciphers != NULL ? ciphers : DEFAULT_CIPHERS) != 1 ||
        (ciphersuites != NULL && SSL_CTX_set_ciphersuites(ctx, ciphersuites) != 1)) {
        take_error(reason, len);
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_session_id_context(ctx, (const unsigned char *)SESSION_ID_CONTEXT,
                                   sizeof SESSION_ID_CONTEXT - 1);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    /* Read whole socket buffers, not a record header then its body: one read per request
     * instead of two. (The connection reads until OpenSSL wants more, so nothing is left
     * waiting in its buffer under edge-triggered epoll.) */
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_client_hello_cb(ctx, on_client_hello, NULL);
    SSL_CTX_set_tlsext_servername_callback(ctx, on_servername);
    SSL_CTX_set_alpn_select_cb(ctx, on_alpn, NULL);
    SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, um__tls_on_ticket_key);
    SSL_CTX_set_session_ticket_cb(ctx, NULL, um__tls_on_ticket, NULL);
    return ctx;
}

enum um_tls_fault um_tls_check_pair(const char *cert, const char *key, char *reason,
                                    size_t len)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        take_error(reason, len);
        return UM_TLS_FAULT_CERT;
    }
    enum um_tls_fault f = load_pair(ctx, cert, key, reason, len);
    SSL_CTX_free(ctx);
    return f;
}

bool um_tls_check_ciphers(const char *list, bool tls13, char *reason, size_t len)
{
    bool ok = false;
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        take_error(reason, len);
        return false;
    }
    /* OpenSSL skips names it does not know as long as one matches; check them one by one
     * so that a typo is reported instead of silently dropped. */
    /* The separators OpenSSL accepts in each kind of list. */
    const char *sep = tls13 ? ":" : ":, ;";
    char *copy = um_strndup(list, strlen(list)), *save = NULL;
    for (char *el = strtok_r(copy, sep, &save); el != NULL; el = strtok_r(NULL, sep, &save)) {
        if (!tls13 && strchr("!-+@", el[0]) != NULL)
            continue;
        int r = tls13 ? SSL_CTX_set_ciphersuites(ctx, el) : SSL_CTX_set_cipher_list(ctx, el);
        STACK_OF(SSL_CIPHER) *sk = SSL_CTX_get_ciphers(ctx);
        bool found = false;
        if (r == 1 && tls13) {
            for (int i = 0; sk != NULL && i < sk_SSL_CIPHER_num(sk); i++)
                if (strcmp(SSL_CIPHER_get_name(sk_SSL_CIPHER_value(sk, i)), el) == 0)
                    found = true;
        } else {
            found = r == 1; /* OpenSSL fails a list that selects no TLS 1.2 cipher */
        }
        if (!found) {
            snprintf(reason, len, "'%s' is not a known %s", el,
                     tls13 ? "TLS 1.3 ciphersuite" : "TLS 1.2 cipher or cipher group");
            goto out;
        }
    }
    ERR_clear_error();
    if ((tls13 ? SSL_CTX_set_ciphersuites(ctx, list) : SSL_CTX_set_cipher_list(ctx, list)) != 1) {
        take_error(reason, len);
        goto out;
    }
    ok = true;
out:
    ERR_clear_error();
    free(copy);
    SSL_CTX_free(ctx);
    return ok;
}

/* --- the store ------------------------------------------------------------------------- */

/* A complete context for entry e from its files, or NULL with "FILE: reason". */
static SSL_CTX *load_entry(struct um_tls *t, struct entry *e, char *err, size_t errlen)
{
    char reason[256];
    um__tls_sig_of(e->cert, &e->cert_sig);
    um__tls_sig_of(e->key, &e->key_sig);
    SSL_CTX *ctx = new_ctx(t->protocols, t->ciphers, t->ciphersuites, reason, sizeof reason);
    if (ctx == NULL) {
        snprintf(err, errlen, "%s: %s", e->cert, reason);
        return NULL;
    }
    switch (load_pair(ctx, e->cert, e->key, reason, sizeof reason)) {
    case UM_TLS_FAULT_NONE:
        return ctx;
    case UM_TLS_FAULT_CERT:
        snprintf(err, errlen, "%s: %s", e->cert, reason);
        break;
    default:
        snprintf(err, errlen, "%s: %s", e->key, reason);
        break;
    }
    SSL_CTX_free(ctx);
    return NULL;
}

static int cmp_host(const void *a, const void *b)
{
    return strcmp(((const struct host *)a)->name, ((const struct host *)b)->name);
}

static void store_free(struct um_tls *t)
{
    um__acme_free(t->acme);
    SSL_CTX_free(t->bare);
    for (size_t i = 0; i < t->num_entries; i++) {
        SSL_CTX_free(t->entries[i].ctx);
        free(t->entries[i].cert);
        free(t->entries[i].key);
        free(t->entries[i].name);
    }
    free(t->entries);
    for (size_t i = 0; i < t->num_hosts; i++)
        free(t->hosts[i].name);
    free(t->hosts);
    for (size_t i = 0; i < t->num_dirs; i++)
        free(t->dirs[i]);
    free(t->dirs);
    free(t->ciphers);
    free(t->ciphersuites);
    EVP_CIPHER_free(t->tickets.cipher);
    OPENSSL_cleanse(&t->tickets.cur, sizeof t->tickets.cur);
    OPENSSL_cleanse(&t->tickets.prev, sizeof t->tickets.prev);
    pthread_mutex_destroy(&t->tickets.lock);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static void store_unref(struct um_tls *t)
{
    int n = atomic_fetch_sub_explicit(&t->_refcnt, 1, memory_order_acq_rel) - 1;
    UM_ASSERT(n >= 0);
    if (n == 0)
        store_free(t);
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? um_strndup(s, strlen(s)) : NULL;
}

struct um_tls *um_tls_create(const struct um_config *cfg, char *err, size_t errlen)
{
    const struct um_tls_conf *tc = um_tls_conf(cfg);
    char msg[PATH_MAX + 256];
    UM_ASSERT(tc->num_certs > 0 && tc->default_cert < tc->num_certs);
    pthread_once(&index_once, make_index);
    if (um__tls_ssl_index < 0) {
        snprintf(err, errlen, "tls: cannot register SSL ex_data");
        return NULL;
    }

    struct um_tls *t = um_calloc(1, sizeof *t);
    t->_refcnt = 1;
    t->owners = 1;
    t->epfd = t->inofd = t->timerfd = -1;
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->tickets.lock, NULL);
    t->protocols = tc->protocols != 0 ? tc->protocols : UM_TLS_PROTO_TLS12 | UM_TLS_PROTO_TLS13;
    t->ciphers = dup_or_null(tc->ciphers);
    t->ciphersuites = dup_or_null(tc->ciphersuites);
    t->default_entry = tc->default_cert;
    t->entries = um_calloc(tc->num_certs, sizeof *t->entries);
    t->num_entries = tc->num_certs;
    size_t nh = 0;
    for (size_t i = 0; i < tc->num_certs; i++)
        nh += tc->certs[i].num_hosts;
    t->hosts = um_calloc(nh, sizeof *t->hosts);
    for (size_t i = 0; i < tc->num_certs; i++) {
        const struct um_tls_cert_conf *cc = &tc->certs[i];
        struct entry *e = &t->entries[i];
        UM_ASSERT(cc->num_hosts > 0);
        e->cert = um_strndup(cc->cert, strlen(cc->cert));
        e->key = um_strndup(cc->key, strlen(cc->key));
        e->name = um_strndup(cc->hosts[0], strlen(cc->hosts[0]));
        for (size_t j = 0; j < cc->num_hosts; j++) {
            t->hosts[t->num_hosts].name = um_strndup(cc->hosts[j], strlen(cc->hosts[j]));
            t->hosts[t->num_hosts++].entry = i;
        }
        e->acme = cc->acme;
        if (e->acme && access(e->cert, F_OK) != 0) {
            /* Nothing stored yet: the ACME client orders it, the watch loads it. */
            um__tls_sig_of(e->cert, &e->cert_sig);
            um__tls_sig_of(e->key, &e->key_sig);
            um_log_warn("tls: no certificate yet for %s: ordering one from the CA (ACME); "
                        "until it comes, %s", e->name,
                        i == tc->default_cert ? "handshakes for its names fail"
                                              : "its names get the default certificate");
            continue;
        }
        e->ctx = load_entry(t, e, msg, sizeof msg);
        if (e->ctx == NULL) {
            snprintf(err, errlen, "%s", msg);
            goto fail;
        }
    }
    t->bare = new_ctx(t->protocols, t->ciphers, t->ciphersuites, msg, sizeof msg);
    if (t->bare == NULL) {
        snprintf(err, errlen, "tls: %s", msg);
        goto fail;
    }
    qsort(t->hosts, t->num_hosts, sizeof *t->hosts, cmp_host);

    t->tickets.cipher = EVP_CIPHER_fetch(NULL, "AES-256-CBC", NULL);
    if (t->tickets.cipher == NULL || !um__tls_ticket_key_new(&t->tickets.cur)) {
        ERR_clear_error();
        snprintf(err, errlen, "tls: cannot set up session tickets (AES-256-CBC, randomness)");
        goto fail;
    }
    clock_gettime(CLOCK_MONOTONIC, &t->tickets.started);
    um__tls_start_watching(t);
    t->acme = um__acme_new(tc);
    return t;

fail:
    store_free(t);
    return NULL;
}

void um_tls_hold(struct um_tls *t)
{
    t->owners++;
}

void um_tls_destroy(struct um_tls *t)
{
    if (t == NULL || --t->owners > 0) return;
    um__acme_halt(t->acme); /* freed with the store: a handshake may still look at it */
    um_tls_destroy(t->replaces);
    t->replaces = NULL;
    um__tls_stop_watching(t);
    store_unref(t);
}

/* Reloads entry i; on failure writes "FILE: reason" into err and keeps the old context. */
static bool reload_entry(struct um_tls *t, size_t i, char *err, size_t errlen)
{
    struct entry *e = &t->entries[i];
    SSL_CTX *ctx = load_entry(t, e, err, errlen);
    if (ctx == NULL) {
        um_log_err("%s (keeping the certificate loaded before for %s)", err, e->name);
        return false;
    }
    pthread_mutex_lock(&t->lock);
    SSL_CTX *old = e->ctx;
    e->ctx = ctx;
    pthread_mutex_unlock(&t->lock);
    /* Handshakes that took the old context hold references of their own. */
    SSL_CTX_free(old);
    um_log_info("tls: reloaded %s for %s", e->cert, e->name);
    return true;
}

int um__tls_reload(struct um_tls *t, bool only_changed, char *err, size_t errlen)
{
    char msg[PATH_MAX + 256];
    int n = 0;
    bool reported = false;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    for (size_t i = 0; i < t->num_entries; i++) {
        struct entry *e = &t->entries[i];
        if (e->acme && access(e->cert, F_OK) != 0)
            continue; /* not ordered yet: nothing to load */
        if (only_changed) {
            struct file_sig c, k;
            um__tls_sig_of(e->cert, &c);
            um__tls_sig_of(e->key, &k);
            if (um__tls_sig_eq(&c, &e->cert_sig) && um__tls_sig_eq(&k, &e->key_sig))
                continue;
        }
        if (reload_entry(t, i, msg, sizeof msg)) {
            n++;
        } else if (!reported && err != NULL && errlen > 0) {
            snprintf(err, errlen, "%s", msg);
            reported = true;
        }
    }
    return n;
}

int um_tls_reload(struct um_tls *t, char *err, size_t errlen)
{
    return um__tls_reload(t, false, err, errlen);
}

SSL *um_tls_accept_new(struct um_tls *t, int fd)
{
    pthread_mutex_lock(&t->lock);
    SSL_CTX *ctx = t->entries[t->default_entry].ctx;
    if (ctx == NULL)
        ctx = t->bare;
    SSL_CTX_up_ref(ctx);
    pthread_mutex_unlock(&t->lock);
    ERR_clear_error();
    SSL *ssl = SSL_new(ctx);
    SSL_CTX_free(ctx);
    if (ssl == NULL || SSL_set_fd(ssl, fd) != 1 || SSL_set_ex_data(ssl, um__tls_ssl_index, t) != 1) {
        char why[256];
        take_error(why, sizeof why);
        um_log_err("tls: cannot create a connection: %s", why);
        SSL_free(ssl);
        return NULL;
    }
    /* Dropped by on_ssl_free. */
    atomic_fetch_add_explicit(&t->_refcnt, 1, memory_order_relaxed);
    SSL_set_accept_state(ssl);
    return ssl;
}

/* --- callbacks (worker threads) -------------------------------------------------------- */

static const struct host *find_host(const struct um_tls *t, const char *name)
{
    struct host key = {(char *)name, 0};
    return bsearch(&key, t->hosts, t->num_hosts, sizeof *t->hosts, cmp_host);
}

/* The entry for an SNI name: exact, then "*.rest" for one left-most label, else the
 * default. */
static size_t pick_entry(const struct um_tls *t, const char *sni)
{
    char name[MAX_HOST + 2];
    if (sni == NULL)
        return t->default_entry;
    size_t n = strlen(sni);
    if (n > 0 && sni[n - 1] == '.')
        n--; /* "example.com." names the same host */
    if (n == 0 || n > MAX_HOST)
        goto unknown;
    for (size_t i = 0; i < n; i++) {
        char ch = sni[i];
        name[i] = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch;
    }
    name[n] = '\0';
    const struct host *h = find_host(t, name);
    if (h != NULL)
        return h->entry;
    char *dot = strchr(name, '.');
    if (dot != NULL && dot != name) {
        /* "*" + ".rest" in place: the label before the dot is at least one byte long. */
        char *star = dot - 1;
        *star = '*';
        h = find_host(t, star);
        if (h != NULL)
            return h->entry;
    }
unknown:
    if (um_log_level_get() >= UM_LOG_DEBUG) {
        char shown[64];
        size_t i = 0;
        for (; sni[i] != '\0' && i < sizeof shown - 1; i++)
            shown[i] = (sni[i] > ' ' && sni[i] < 0x7f) ? sni[i] : '?';
        shown[i] = '\0';
        um_log_debug("tls: no certificate for '%s', using the default (%s)", shown,
                     t->entries[t->default_entry].name);
    }
    return t->default_entry;
}

/* Whether the ALPN extension of the ClientHello (the wire list at p, n bytes) offers
 * "acme-tls/1". */
static bool offers_acme_tls(const unsigned char *p, size_t n)
{
    static const char proto[] = "acme-tls/1";
    if (n < 2)
        return false;
    size_t len = (size_t)p[0] << 8 | p[1];
    p += 2;
    n = len < n - 2 ? len : n - 2;
    for (size_t i = 0; i < n;) {
        size_t l = p[i];
        if (i + 1 + l > n)
            break;
        if (l == sizeof proto - 1 && memcmp(p + i + 1, proto, l) == 0)
            return true;
        i += 1 + l;
    }
    return false;
}

/* tls-alpn-01 (RFC 8737): a ClientHello that offers "acme-tls/1" for a name the ACME
 * client is validating gets the validation certificate, set on the connection itself, and
 * the SNI and ALPN callbacks leave it alone. Runs before them; costs one atomic load per
 * handshake while no validation is under way. */
static int on_client_hello(SSL *ssl, int *alert, void *arg)
{
    (void)alert, (void)arg;
    struct um_tls *t = SSL_get_ex_data(ssl, um__tls_ssl_index);
    const unsigned char *p, *sni;
    size_t n, sn;
    X509 *cert;
    EVP_PKEY *key;
    if (t == NULL || t->acme == NULL ||
        atomic_load_explicit(&t->acme->num_alpn, memory_order_acquire) == 0 ||
        !SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, &p,
                                   &n) ||
        !offers_acme_tls(p, n) ||
        !SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &sni, &sn))
        return SSL_CLIENT_HELLO_SUCCESS;
    /* server_name: list length (2), type (1, host_name = 0), name length (2), name. */
    if (sn < 5 || sni[2] != 0)
        return SSL_CLIENT_HELLO_SUCCESS;
    size_t nl = (size_t)sni[3] << 8 | sni[4];
    if (nl > sn - 5 || !um__acme_alpn_find(t->acme, (const char *)sni + 5, nl, &cert, &key))
        return SSL_CLIENT_HELLO_SUCCESS;
    if (SSL_use_certificate(ssl, cert) == 1 && SSL_use_PrivateKey(ssl, key) == 1)
        SSL_set_ex_data(ssl, acme_index, (void *)1);
    ERR_clear_error();
    X509_free(cert);
    EVP_PKEY_free(key);
    return SSL_CLIENT_HELLO_SUCCESS;
}

static int on_servername(SSL *ssl, int *alert, void *arg)
{
    struct um_tls *t = SSL_get_ex_data(ssl, um__tls_ssl_index);
    if (t == NULL || SSL_get_ex_data(ssl, acme_index) != NULL)
        return SSL_TLSEXT_ERR_OK;
    size_t i = pick_entry(t, SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name));
    pthread_mutex_lock(&t->lock);
    SSL_CTX *ctx = t->entries[i].ctx;
    if (ctx == NULL) /* an ACME entry without its first certificate */
        ctx = t->entries[t->default_entry].ctx;
    if (ctx != NULL)
        SSL_CTX_up_ref(ctx);
    pthread_mutex_unlock(&t->lock);
    if (ctx == NULL) {
        um_log_debug("tls: no certificate for %s yet (ACME order pending) and none by "
                     "default: handshake refused", t->entries[i].name);
        *alert = SSL_AD_UNRECOGNIZED_NAME;
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    }
    if (SSL_get_SSL_CTX(ssl) != ctx)
        SSL_set_SSL_CTX(ssl, ctx);
    SSL_CTX_free(ctx);
    return SSL_TLSEXT_ERR_OK;
}

static int on_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned int inlen, void *arg)
{
    unsigned char *sel;
    static const unsigned char acme_tls[] = "\x0a" "acme-tls/1";
    if (SSL_get_ex_data(ssl, acme_index) != NULL) {
        /* The validation certificate goes with acme-tls/1 only (RFC 8737 section 3). */
        if (SSL_select_next_proto(&sel, outlen, acme_tls, sizeof acme_tls - 1, in, inlen) !=
            OPENSSL_NPN_NEGOTIATED)
            return SSL_TLSEXT_ERR_ALERT_FATAL;
        *out = sel;
        return SSL_TLSEXT_ERR_OK;
    }
    bool h1_only = SSL_get_app_data(ssl) != NULL;
    const unsigned char *protos = h1_only ? ALPN_PROTOS_H1 : ALPN_PROTOS;
    unsigned protos_len = h1_only ? sizeof ALPN_PROTOS_H1 - 1 : sizeof ALPN_PROTOS - 1;
    if (SSL_select_next_proto(&sel, outlen, protos, protos_len, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED)
        /* RFC 7301: a client that offers only protocols we do not speak (e.g. "h2" alone)
         * gets no_application_protocol rather than a server talking past it. */
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

