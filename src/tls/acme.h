/* SPDX-License-Identifier: BSD-2-Clause */
/* What the ACME files of the TLS module share: acme_settings.c (tls.acme), acme_jws.c (the
 * pure parts: JWK and its thumbprint, JWS ES256, CSR, atomic files), acme.c (the
 * client's thread) and acme_http.c (its HTTP requests and the CA's JSON). */
#ifndef UMBRA_TLS_ACME_H
#define UMBRA_TLS_ACME_H

#include <stdbool.h>
#include <stddef.h>

#include <lua.h>

#include "umbra/buf.h"
#include "umbra/tls.h"

struct um_settings_load;
struct evp_pkey_st;

/* tls.acme's keys, for the documentation's check. */
extern const char *const um__tls_acme_keys[];
/* Reads tls.acme (the value at idx) into ac; dispose frees what it owns. */
bool um__tls_acme_read(struct um_settings_load *ld, lua_State *L, int idx,
                       struct um_tls_acme_conf *ac);
void um__tls_acme_dispose(struct um_tls_acme_conf *ac);

/* --- acme_jws.c (pure; any thread) ------------------------------------------------------- */

/* A new ECDSA P-256 key, or NULL. The caller frees it (EVP_PKEY_free). */
struct evp_pkey_st *um__acme_key_new(void);
/* The key's public JWK (RFC 7517) with its members in the lexical order RFC 7638 wants,
 * {"crv":"P-256","kty":"EC","x":"...","y":"..."}, appended to b; false on failure. */
bool um__acme_jwk(struct evp_pkey_st *key, struct um_buf *b);
/* The JWK thumbprint (RFC 7638, SHA-256) of jwk (the text above), base64url, appended. */
void um__acme_thumbprint(const char *jwk, size_t len, struct um_buf *b);
/* A flattened JWS (RFC 7515) of payload (may be empty: POST-as-GET) under the protected
 * header prot, signed ES256 with key, appended to b; false on failure. */
bool um__acme_jws(struct evp_pkey_st *key, const char *prot, const char *payload,
                  struct um_buf *b);
/* A DER CSR for names (the first is the subject's CN, all are DNS SANs), base64url,
 * appended to b; false on failure. */
bool um__acme_csr(struct evp_pkey_st *key, char *const *names, size_t n, struct um_buf *b);
/* Writes data to path atomically (a temporary file beside it, fsync, rename, mode 0600);
 * false with errno set. */
bool um__acme_write_file(const char *path, const void *data, size_t n);
/* The PEM key of path, or a new one stored there when the file does not exist; NULL with
 * a reason in err. */
struct evp_pkey_st *um__acme_key_load(const char *path, char *err, size_t errlen);
/* The PEM of key (PKCS#8, unencrypted) appended to b. */
bool um__acme_key_pem(struct evp_pkey_st *key, struct um_buf *b);
/* The notBefore and notAfter (seconds since the epoch) of the first certificate of the
 * PEM file path: false when it is missing or does not parse. */
bool um__acme_cert_times(const char *path, double *not_before, double *not_after);

/* The tls-alpn-01 validation certificate (RFC 8737 section 3) for name and the key
 * authorization keyauth: self-signed, a new P-256 key, name as its only DNS SAN, and the
 * critical acmeIdentifier extension holding SHA-256(keyauth). The caller frees both. */
struct x509_st;
bool um__acme_alpn_cert(const char *name, const char *keyauth, struct x509_st **cert,
                        struct evp_pkey_st **key);

/* --- acme_ari.c: renewal information (RFC 9773) ----------------------------------------- */

/* The ARI certificate identifier: base64url(authority key identifier) "." base64url(the
 * serial number's DER content octets); from the parts, or from the first certificate of
 * the PEM file path (false when it has no AKI or does not parse). */
void um__acme_cert_id_of(const unsigned char *aki, size_t an, const unsigned char *serial,
                         size_t sn, struct um_buf *b);
bool um__acme_cert_id(const char *path, struct um_buf *b);
/* An RFC 3339 date-time ("2025-01-02T04:00:00Z", fractions, "+01:00") into seconds since
 * the epoch. */
bool um__acme_parse_time(const char *s, double *out);
struct um__acme;
/* When the CA suggests renewing the certificate in file cert (a random time in its
 * window, now at the earliest), 0 when it does not say (no ARI, an error); *recheck: when
 * to ask again (seconds); *cert_id (freed first) gets the certificate's identifier for the
 * renewing order's "replaces". The client's thread. */
double um__acme_ari_due(struct um__acme *a, const char *cert, double now, double *recheck,
                        char **cert_id);

/* --- acme.c: the client of one store ----------------------------------------------------- */

struct um__acme;
/* The client of the acme entries of tc (copied), which writes their certificates to their
 * cert/key files (the store's watch loads them); its thread waits for um__acme_begin.
 * NULL when no entry is acme. Main thread. */
struct um__acme *um__acme_new(const struct um_tls_conf *tc);
/* Starts the thread (once; not after a halt). A failure is logged. Main thread. */
void um__acme_begin(struct um__acme *a);
/* Stops the thread (an HTTP request in progress is aborted) and waits for it; the token
 * tables stay readable. Idempotent; NULL: no-op. Main thread. */
void um__acme_halt(struct um__acme *a);
/* Halts and frees: when no worker can reach a any more (the store is freed). */
void um__acme_free(struct um__acme *a);
/* acme_tables.c: the running clients' list (begin adds, halt removes), and the challenge
 * answers a client publishes for the workers (the table owns what it is given; unpublish
 * takes back the http-01 token, or the tls-alpn-01 certificate of the name, token). */
struct um__acme_token;
void um__acme_live_add(struct um__acme *a);
void um__acme_live_remove(struct um__acme *a);
void um__acme_publish(struct um__acme *a, const char *token, const char *keyauth);
void um__acme_publish_alpn(struct um__acme *a, const char *name, struct x509_st *cert,
                           struct evp_pkey_st *key);
void um__acme_unpublish(struct um__acme *a, const char *token, bool alpn);
void um__acme_token_free(struct um__acme_token *t);

/* The module's /metrics lines of every running client: orders, failures and days until
 * each certificate expires, by the entry's first name. Any thread. */
void um__acme_metrics(struct um_buf *b);
/* The module's member of /status.json: "tls":{"acme":[{"host":...,"expires":...}]}. */
void um__acme_status(struct um_buf *b);

/* The http-01 answer for token (um_tls_acme_http01). */
bool um__acme_answer(struct um__acme *a, um_str token, char *out, size_t len, size_t *n);
/* The tls-alpn-01 validation certificate and key published for name (n bytes, any case),
 * each with a reference of the caller's (X509_free, EVP_PKEY_free); false when none. Any
 * thread; free of locks while nothing is published. */
bool um__acme_alpn_find(struct um__acme *a, const char *name, size_t n, struct x509_st **cert,
                        struct evp_pkey_st **key);

/* --- the client's state, shared by acme.c and acme_http.c -------------------------------- */

#include <pthread.h>
#include <stdatomic.h>

/* One acme entry of the tls table: its names and files. */
struct um__acme_name {
    char **hosts;
    size_t num_hosts;
    char *cert, *key;
    double next_try;    /* CLOCK_REALTIME seconds; 0: now */
    char *replaces;     /* ARI: the stored certificate's identifier, once the CA gave a window */
    unsigned failures;  /* in a row, for the backoff */
    double next_warning;  /* CLOCK_REALTIME seconds: the next "not renewed" warning */
    char last_error[256]; /* why the last order failed; "" after a success */
    /* For /metrics (read by the admin's worker): written by the client's thread. */
    atomic_ullong orders, order_failures;
    _Atomic double expires; /* notAfter of the stored certificate, seconds; 0: none */
};

/* A published http-01 token and its key authorization; or, for tls-alpn-01, the name
 * (in token) and its validation certificate and key. */
struct um__acme_token {
    char *token, *keyauth;
    struct x509_st *cert;
    struct evp_pkey_st *key;
};

/* An HTTP response from the CA. */
struct um__acme_resp {
    long status;
    struct um_buf body;
    char *location;     /* Location, or NULL */
    double retry_after; /* seconds; 0 when not given */
    bool pem;           /* Content-Type application/pem-certificate-chain */
};

struct um__acme {
    pthread_t thread;
    bool started, halted; /* main thread */
    struct um__acme *next_live; /* the list of running clients, for /metrics */
    atomic_bool stop;
    pthread_mutex_t lock; /* with cond: the thread's naps, which stop wakes */
    pthread_cond_t cond;
    pthread_rwlock_t tokens_lock; /* tokens: written by the thread, read by workers */
    struct um__acme_token *tokens;
    size_t num_tokens;
    atomic_size_t num_alpn; /* validation certificates among tokens: handshakes look only then */
    /* Copies of the settings (the thread outlives no configuration, but owns its own). */
    char *directory, *email, *storage, *ca_file;
    double renew_before;
    unsigned challenges;
    struct um__acme_name *names;
    size_t num_names;
    /* The thread's alone. */
    void *curl;                   /* CURL * */
    struct evp_pkey_st *account;  /* the account key */
    char *jwk, *thumbprint, *kid; /* kid: the account URL, once registered */
    char *nonce;                  /* the next Replay-Nonce to use, or NULL */
    double retry_hint; /* Retry-After of the last refusal (rateLimited, 503), seconds; 0 */
    char *new_nonce, *new_account, *new_order; /* from the directory */
    char *renewal_info;                        /* ARI (RFC 9773), or NULL */
};

/* acme_http.c. GET (body NULL) or POST body (JSON) to url; r is reset first and filled,
 * the Replay-Nonce kept in a->nonce. false with a reason in err when no HTTP answer came. */
bool um__acme_http(struct um__acme *a, const char *url, const char *body, bool head,
                   struct um__acme_resp *r, char *err, size_t errlen);
/* A JWS POST of payload ("" for POST-as-GET) to url, signed with the account key (jwk in
 * the header until the account has a kid), with a fresh nonce; retried on badNonce. true
 * on a 2xx answer; else false with the CA's problem ("TYPE: DETAIL") or the failure in err. */
bool um__acme_post(struct um__acme *a, const char *url, const char *payload,
                   struct um__acme_resp *r, char *err, size_t errlen);
void um__acme_resp_dispose(struct um__acme_resp *r);
/* The directory's URLs into a (once). */
bool um__acme_directory(struct um__acme *a, char *err, size_t errlen);
/* A problem document (RFC 7807) in s[0..n) as "TYPE: DETAIL" into out. */
void um__acme_problem(const char *s, size_t n, char *out, size_t len);

/* JSON members of the object in s[0..n) (not changed): a string member's value (malloc'd,
 * or NULL), the raw text of any member's value, and the raw texts of an array's elements
 * (at most max; returns how many). */
char *um__acme_jstr(const char *s, size_t n, const char *key);
bool um__acme_jspan(const char *s, size_t n, const char *key, const char **vs, size_t *vn);
size_t um__acme_jarray(const char *s, size_t n, const char **vs, size_t *vn, size_t max);

#endif
