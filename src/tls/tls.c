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
#include "internal.h"

/* Mozilla's "intermediate" TLS 1.2 suites: forward secrecy and AEAD only. */
#define DEFAULT_CIPHERS                                                                      \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"                           \
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"                           \
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define SESSION_ID_CONTEXT "umbra"
#define MAX_HOST 253
/* A reload waits at most this long after the first change of a burst. */
#define WATCH_MAX_DELAY_MS 1000

/* ALPN protocols, in the server's order of preference, in wire format (length-prefixed):
 * "h2" first, unless the connection's listener has http2 = false (the SSL's app data is
 * then set, um_tls_transport_h1_only). */
static const unsigned char ALPN_PROTOS[] = "\x02h2\x08http/1.1";
static const unsigned char ALPN_PROTOS_H1[] = "\x08http/1.1";

struct file_sig {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
    bool exists;
};

struct entry {
    SSL_CTX *ctx;         /* guarded by um_tls.lock; the store's reference */
    char *cert, *key;     /* as in the config */
    char *name;           /* first host, for messages */
    struct file_sig cert_sig, key_sig; /* of the files last loaded or tried; main thread */
};

struct host {
    char *name; /* lower case; "*.example.com" for a wildcard */
    size_t entry;
};

struct ticket_key {
    unsigned char name[16];
    unsigned char aes[32];
    unsigned char hmac[32];
    bool set;
};

struct um_tls {
    int _refcnt; /* the owner's reference + one per SSL from um_tls_accept_new */
    pthread_mutex_t lock;
    struct entry *entries;
    size_t num_entries;
    size_t default_entry;
    struct host *hosts; /* sorted by name */
    size_t num_hosts;
    unsigned protocols;
    char *ciphers, *ciphersuites;

    struct {
        pthread_mutex_t lock;
        struct ticket_key cur, prev;
        struct timespec started; /* of cur, CLOCK_MONOTONIC */
        EVP_CIPHER *cipher;
    } tickets;

    /* Watching (main thread). */
    int epfd, inofd, timerfd;
    char **dirs;
    size_t num_dirs;
    bool pending;          /* a change was seen; the timer is armed */
    struct timespec first; /* of the first change since the last check */
};

static pthread_once_t index_once = PTHREAD_ONCE_INIT;
static int ssl_index = -1;   /* the store a connection holds */
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

static void make_index(void)
{
    ssl_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, on_ssl_free);
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
/* The host name of the ClientHello's server_name extension into out ("" when it has none
 * or it does not fit). Read from the raw extension: OpenSSL decrypts a ticket before it
 * parses server_name. Returns false when the ClientHello is not at hand. */
static bool hello_server_name(SSL *ssl, char *out, size_t n)
{
    const unsigned char *p;
    size_t len;
    out[0] = '\0';
    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &p, &len) != 1)
        return SSL_client_hello_get0_ciphers(ssl, &p) > 0; /* no extension, or no hello */
    if (len < 5 || ((size_t)p[0] << 8 | p[1]) + 2 != len || p[2] != TLSEXT_NAMETYPE_host_name)
        return true;
    size_t nl = (size_t)p[3] << 8 | p[4];
    if (nl + 5 > len || nl >= n)
        return true;
    memcpy(out, p + 5, nl);
    out[nl] = '\0';
    return true;
}

/* RFC 6066 section 3: a session is resumed only under the name it was made for; offered
 * under another, the client gets a full handshake (and that name's certificate). */
static SSL_TICKET_RETURN on_ticket(SSL *ssl, SSL_SESSION *ss, const unsigned char *keyname,
                                   size_t keyname_len, SSL_TICKET_STATUS status, void *arg)
{
    (void)keyname;
    (void)keyname_len;
    (void)arg;
    switch (status) {
    case SSL_TICKET_SUCCESS:
    case SSL_TICKET_SUCCESS_RENEW: {
        char now[256];
        if (!hello_server_name(ssl, now, sizeof(now))) {
            const char *sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
            snprintf(now, sizeof(now), "%s", sni ? sni : "");
        }
        const char *was = SSL_SESSION_get0_hostname(ss);
        if (strcasecmp(was ? was : "", now) != 0)
            return SSL_TICKET_RETURN_IGNORE_RENEW;
        return status == SSL_TICKET_SUCCESS ? SSL_TICKET_RETURN_USE : SSL_TICKET_RETURN_USE_RENEW;
    }
    case SSL_TICKET_FATAL_ERR_MALLOC:
    case SSL_TICKET_FATAL_ERR_OTHER:
        return SSL_TICKET_RETURN_ABORT;
    default: /* none, or one we cannot decrypt: a full handshake and a new ticket */
        return SSL_TICKET_RETURN_IGNORE_RENEW;
    }
}

static int on_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned int inlen, void *arg);
static int on_ticket_key(SSL *ssl, unsigned char key_name[16], unsigned char *iv,
                         EVP_CIPHER_CTX *cctx, EVP_MAC_CTX *hctx, int enc);
static SSL_TICKET_RETURN on_ticket(SSL *ssl, SSL_SESSION *ss, const unsigned char *keyname,
                                   size_t keyname_len, SSL_TICKET_STATUS status, void *arg);

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
    SSL_CTX_set_tlsext_servername_callback(ctx, on_servername);
    SSL_CTX_set_alpn_select_cb(ctx, on_alpn, NULL);
    SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, on_ticket_key);
    SSL_CTX_set_session_ticket_cb(ctx, NULL, on_ticket, NULL);
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

static void sig_of(const char *file, struct file_sig *s)
{
    struct stat st;
    memset(s, 0, sizeof *s);
    if (stat(file, &st) != 0)
        return;
    s->exists = true;
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    s->size = st.st_size;
    s->mtime = st.st_mtim;
    s->ctime = st.st_ctim;
}

static bool sig_eq(const struct file_sig *a, const struct file_sig *b)
{
    return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino &&
           a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec && a->ctime.tv_sec == b->ctime.tv_sec &&
           a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* A complete context for entry e from its files, or NULL with "FILE: reason". */
static SSL_CTX *load_entry(struct um_tls *t, struct entry *e, char *err, size_t errlen)
{
    char reason[256];
    sig_of(e->cert, &e->cert_sig);
    sig_of(e->key, &e->key_sig);
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

static bool ticket_key_new(struct ticket_key *k)
{
    if (RAND_bytes(k->name, sizeof k->name) != 1 || RAND_bytes(k->aes, sizeof k->aes) != 1 ||
        RAND_bytes(k->hmac, sizeof k->hmac) != 1) {
        ERR_clear_error();
        return false;
    }
    k->set = true;
    return true;
}

/* Under tickets.lock. */
static void rotate_locked(struct um_tls *t, const struct timespec *now)
{
    struct ticket_key k;
    if (!ticket_key_new(&k)) {
        um_log_err("tls: cannot make a session ticket key (no randomness); keeping the "
                   "current one");
        return;
    }
    t->tickets.prev = t->tickets.cur;
    t->tickets.cur = k;
    t->tickets.started = *now;
    OPENSSL_cleanse(&k, sizeof k);
}

void um_tls_rotate_tickets(struct um_tls *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_mutex_lock(&t->tickets.lock);
    rotate_locked(t, &now);
    pthread_mutex_unlock(&t->tickets.lock);
}

void um_tls_inherit_tickets(struct um_tls *to, struct um_tls *from)
{
    if (to == from)
        return;
    struct ticket_key cur, prev;
    struct timespec started;
    pthread_mutex_lock(&from->tickets.lock);
    cur = from->tickets.cur;
    prev = from->tickets.prev;
    started = from->tickets.started;
    pthread_mutex_unlock(&from->tickets.lock);
    pthread_mutex_lock(&to->tickets.lock);
    to->tickets.cur = cur;
    to->tickets.prev = prev;
    to->tickets.started = started;
    pthread_mutex_unlock(&to->tickets.lock);
    OPENSSL_cleanse(&cur, sizeof cur);
    OPENSSL_cleanse(&prev, sizeof prev);
}

static int cmp_host(const void *a, const void *b)
{
    return strcmp(((const struct host *)a)->name, ((const struct host *)b)->name);
}

static void add_dir(struct um_tls *t, const char *file)
{
    const char *slash = strrchr(file, '/');
    if (slash == NULL)
        return;
    size_t n = slash == file ? 1 : (size_t)(slash - file);
    for (size_t i = 0; i < t->num_dirs; i++)
        if (strlen(t->dirs[i]) == n && memcmp(t->dirs[i], file, n) == 0)
            return;
    t->dirs = um_realloc(t->dirs, (t->num_dirs + 1) * sizeof *t->dirs);
    t->dirs[t->num_dirs++] = um_strndup(file, n);
}

/* (Re)adds the watches; a directory that was removed and created again gets a new one. */
static void add_watches(struct um_tls *t, bool log)
{
    for (size_t i = 0; i < t->num_dirs; i++)
        if (inotify_add_watch(t->inofd, t->dirs[i],
                              IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
                                  IN_DELETE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF) < 0 &&
            log)
            um_log_warn("tls: cannot watch %s for certificate changes: %s", t->dirs[i],
                        strerror(errno));
}

static void start_watching(struct um_tls *t)
{
    for (size_t i = 0; i < t->num_entries; i++) {
        const char *files[] = {t->entries[i].cert, t->entries[i].key};
        for (size_t j = 0; j < 2; j++) {
            add_dir(t, files[j]);
            char *real = realpath(files[j], NULL);
            if (real != NULL) {
                add_dir(t, real);
                free(real);
            }
        }
    }
    struct epoll_event ev = {.events = EPOLLIN};
    t->epfd = epoll_create1(EPOLL_CLOEXEC);
    t->inofd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    t->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (t->epfd < 0 || t->inofd < 0 || t->timerfd < 0 ||
        epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->inofd, &ev) != 0 ||
        epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->timerfd, &ev) != 0) {
        um_log_warn("tls: cannot watch certificate files (%s); they reload on HUP only",
                    strerror(errno));
        if (t->epfd >= 0)
            close(t->epfd);
        if (t->inofd >= 0)
            close(t->inofd);
        if (t->timerfd >= 0)
            close(t->timerfd);
        t->epfd = t->inofd = t->timerfd = -1;
        return;
    }
    add_watches(t, true);
}

static void stop_watching(struct um_tls *t)
{
    if (t->epfd >= 0) {
        close(t->epfd);
        close(t->inofd);
        close(t->timerfd);
    }
    t->epfd = t->inofd = t->timerfd = -1;
}

static void store_free(struct um_tls *t)
{
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
    int n = __atomic_sub_fetch(&t->_refcnt, 1, __ATOMIC_ACQ_REL);
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
    const struct um_tls_conf *tc = &cfg->tls;
    char msg[PATH_MAX + 256];
    UM_ASSERT(tc->num_certs > 0 && tc->default_cert < tc->num_certs);
    pthread_once(&index_once, make_index);
    if (ssl_index < 0) {
        snprintf(err, errlen, "tls: cannot register SSL ex_data");
        return NULL;
    }

    struct um_tls *t = um_calloc(1, sizeof *t);
    t->_refcnt = 1;
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
        e->ctx = load_entry(t, e, msg, sizeof msg);
        if (e->ctx == NULL) {
            snprintf(err, errlen, "%s", msg);
            goto fail;
        }
    }
    qsort(t->hosts, t->num_hosts, sizeof *t->hosts, cmp_host);

    t->tickets.cipher = EVP_CIPHER_fetch(NULL, "AES-256-CBC", NULL);
    if (t->tickets.cipher == NULL || !ticket_key_new(&t->tickets.cur)) {
        ERR_clear_error();
        snprintf(err, errlen, "tls: cannot set up session tickets (AES-256-CBC, randomness)");
        goto fail;
    }
    clock_gettime(CLOCK_MONOTONIC, &t->tickets.started);
    start_watching(t);
    return t;

fail:
    store_free(t);
    return NULL;
}

void um_tls_destroy(struct um_tls *t)
{
    if (t == NULL)
        return;
    stop_watching(t);
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

static int reload(struct um_tls *t, bool only_changed, char *err, size_t errlen)
{
    char msg[PATH_MAX + 256];
    int n = 0;
    bool reported = false;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    for (size_t i = 0; i < t->num_entries; i++) {
        struct entry *e = &t->entries[i];
        if (only_changed) {
            struct file_sig c, k;
            sig_of(e->cert, &c);
            sig_of(e->key, &k);
            if (sig_eq(&c, &e->cert_sig) && sig_eq(&k, &e->key_sig))
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
    return reload(t, false, err, errlen);
}

int um_tls_watch_fd(struct um_tls *t)
{
    return t->epfd;
}

static int64_t ns_of(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

int um_tls_on_watch(struct um_tls *t)
{
    if (t->epfd < 0)
        return 0;
    /* inotify events are only a hint that something in a directory changed: the file
     * identities decide. So their content (and an overflow of the queue) does not matter. */
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool changed = false;
    for (;;) {
        ssize_t r = read(t->inofd, buf, sizeof buf);
        if (r > 0) {
            changed = true;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        break;
    }
    if (changed) {
        /* UM_TLS_WATCH_DELAY_MS after the last change, but no later than
         * WATCH_MAX_DELAY_MS after the first: a directory that never stays quiet (some
         * other file rewritten all the time) must not hold a reload back forever. */
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (!t->pending)
            t->first = now;
        t->pending = true;
        int64_t at = ns_of(&now) + UM_TLS_WATCH_DELAY_MS * 1000000LL;
        int64_t cap = ns_of(&t->first) + WATCH_MAX_DELAY_MS * 1000000LL;
        if (at > cap)
            at = cap;
        struct itimerspec its = {{0, 0}, {(time_t)(at / 1000000000), (long)(at % 1000000000)}};
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
            its.it_value.tv_nsec = 1; /* zero would disarm */
        timerfd_settime(t->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
        return 0;
    }
    uint64_t expirations;
    if (read(t->timerfd, &expirations, sizeof expirations) != (ssize_t)sizeof expirations ||
        !t->pending)
        return 0;
    t->pending = false;
    /* A directory that was replaced needs a new watch. */
    add_watches(t, false);
    return reload(t, true, NULL, 0);
}

SSL *um_tls_accept_new(struct um_tls *t, int fd)
{
    pthread_mutex_lock(&t->lock);
    SSL_CTX *ctx = t->entries[t->default_entry].ctx;
    SSL_CTX_up_ref(ctx);
    pthread_mutex_unlock(&t->lock);
    ERR_clear_error();
    SSL *ssl = SSL_new(ctx);
    SSL_CTX_free(ctx);
    if (ssl == NULL || SSL_set_fd(ssl, fd) != 1 || SSL_set_ex_data(ssl, ssl_index, t) != 1) {
        char why[256];
        take_error(why, sizeof why);
        um_log_err("tls: cannot create a connection: %s", why);
        SSL_free(ssl);
        return NULL;
    }
    /* Dropped by on_ssl_free. */
    __atomic_add_fetch(&t->_refcnt, 1, __ATOMIC_RELAXED);
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

static int on_servername(SSL *ssl, int *alert, void *arg)
{
    struct um_tls *t = SSL_get_ex_data(ssl, ssl_index);
    if (t == NULL)
        return SSL_TLSEXT_ERR_OK;
    size_t i = pick_entry(t, SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name));
    pthread_mutex_lock(&t->lock);
    SSL_CTX *ctx = t->entries[i].ctx;
    SSL_CTX_up_ref(ctx);
    pthread_mutex_unlock(&t->lock);
    if (SSL_get_SSL_CTX(ssl) != ctx)
        SSL_set_SSL_CTX(ssl, ctx);
    SSL_CTX_free(ctx);
    return SSL_TLSEXT_ERR_OK;
}

static int on_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned int inlen, void *arg)
{
    unsigned char *sel;
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

static int on_ticket_key(SSL *ssl, unsigned char key_name[16], unsigned char *iv,
                         EVP_CIPHER_CTX *cctx, EVP_MAC_CTX *hctx, int enc)
{
    struct um_tls *t = SSL_get_ex_data(ssl, ssl_index);
    struct ticket_key k;
    int ret = 1;
    if (t == NULL)
        return enc ? -1 : 0;
    pthread_mutex_lock(&t->tickets.lock);
    if (enc) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t->tickets.started.tv_sec >= UM_TLS_TICKET_ROTATE_SECONDS)
            rotate_locked(t, &now);
        k = t->tickets.cur;
    } else if (memcmp(key_name, t->tickets.cur.name, 16) == 0) {
        k = t->tickets.cur;
    } else if (t->tickets.prev.set && memcmp(key_name, t->tickets.prev.name, 16) == 0) {
        k = t->tickets.prev;
        ret = 2; /* decrypts, but issue a ticket under the current key */
    } else {
        pthread_mutex_unlock(&t->tickets.lock);
        return 0; /* unknown key: a full handshake */
    }
    pthread_mutex_unlock(&t->tickets.lock);

    int ivlen = EVP_CIPHER_get_iv_length(t->tickets.cipher);
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, k.hmac, sizeof k.hmac),
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    if (enc) {
        memcpy(key_name, k.name, 16);
        if (RAND_bytes(iv, ivlen) != 1 ||
            EVP_EncryptInit_ex2(cctx, t->tickets.cipher, k.aes, iv, NULL) != 1)
            ret = -1;
    } else if (EVP_DecryptInit_ex2(cctx, t->tickets.cipher, k.aes, iv, NULL) != 1) {
        ret = -1;
    }
    if (ret > 0 && EVP_MAC_CTX_set_params(hctx, params) != 1)
        ret = -1;
    OPENSSL_cleanse(&k, sizeof k);
    return ret;
}
