/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the TLS module share (tls.c, tickets.c, watch.c: the store; transport.c: a connection's
 * I/O). */
#ifndef UMBRA_TLS_INTERNAL_H
#define UMBRA_TLS_INTERNAL_H

/* The size of the buffer a connection's last error is kept in (um_tls_error). */
#define UM__TLS_ERROR_LEN 256

/* The SSL ex_data index of that buffer (a char[UM__TLS_ERROR_LEN] that SSL_free frees),
 * registered on first use; -1 when OpenSSL had no index to give. Any thread. */
int um__tls_error_index(void);

/* A short description of OpenSSL error e ("unknown error" for 0) into buf. */
void um__tls_describe(unsigned long e, char *buf, size_t len);

/* transport.c: the TLS transport over ssl (in accept or connect state) and fd, which it
 * owns from now on; and the SSL of such a transport. */
struct ssl_st;
struct um_transport;
struct um_transport *um__tls_transport_wrap(struct ssl_st *ssl, int fd);
struct ssl_st *um__tls_transport_ssl(struct um_transport *t);

/* The store's own parts, shared by tls.c (loading and the callbacks), tickets.c (session
 * tickets) and watch.c (file watching). */
#include <stdatomic.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>

#include "umbra/tls.h"

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
    bool acme; /* its files come from the ACME client; ctx is NULL until they exist */
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
    atomic_int _refcnt; /* the owners' reference + one per SSL from um_tls_accept_new */
    int owners;         /* runtimes that hold it (um_tls_hold); main thread */
    pthread_mutex_t lock;
    struct entry *entries;
    size_t num_entries;
    size_t default_entry;
    struct host *hosts; /* sorted by name */
    size_t num_hosts;
    /* A context without a certificate, for SSL_new when the default entry has none yet
     * (an ACME entry still waiting for its first certificate). */
    SSL_CTX *bare;
    struct um__acme *acme; /* the ACME client (acme.c), or NULL; set at create */
    /* The store a reload replaces (held), whose ACME client stops when this one's starts:
     * when this store's runtime runs (um_tls_acme_begin). Main thread. */
    struct um_tls *replaces;
    bool acme_begun;
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

int um__tls_reload(struct um_tls *t, bool only_changed, char *err, size_t errlen);
void um__tls_sig_of(const char *file, struct file_sig *s);
bool um__tls_sig_eq(const struct file_sig *a, const struct file_sig *b);
void um__tls_start_watching(struct um_tls *t);
void um__tls_stop_watching(struct um_tls *t);
SSL_TICKET_RETURN um__tls_on_ticket(SSL *ssl, SSL_SESSION *ss, const unsigned char *keyname,
                                     size_t keyname_len, SSL_TICKET_STATUS status, void *arg);
bool um__tls_ticket_key_new(struct ticket_key *k);
int um__tls_on_ticket_key(SSL *ssl, unsigned char key_name[16], unsigned char *iv,
                          EVP_CIPHER_CTX *cctx, EVP_MAC_CTX *hctx, int enc);

/* The SSL ex_data index of the store a connection holds (tls.c registers it). */
extern int um__tls_ssl_index;

#endif
