/* SPDX-License-Identifier: BSD-2-Clause */
/* TLS for client connections (OpenSSL 3).
 *
 * A certificate store (struct um_tls) is built from one configuration's `tls` table: one
 * SSL_CTX per certificate entry, picked per connection by SNI (exact name, then a "*.x"
 * wildcard for one left-most label, then the default entry). Every context of a store has
 * the same settings: TLS 1.2 and/or 1.3, ALPN "h2" then "http/1.1", session tickets encrypted with
 * keys the store generates and shares between its contexts, so a session resumes on any
 * worker and after a certificate reload.
 *
 * Threads: create, reload, watch, rotate and destroy on the main thread; workers call
 * um_tls_accept_new and the I/O helpers below concurrently on their own SSL objects.
 *
 * Lifetime: the store is reference-counted internally. Each SSL from um_tls_accept_new
 * holds a reference that SSL_free drops, so um_tls_destroy may be called while
 * connections made from the store are still open (after a config reload, for example):
 * they finish on it, and the last SSL_free releases it.
 *
 * I/O helpers follow the status convention of common.h: UM_OK / UM_AGAIN / UM_ERR, with
 * *want saying which readiness to wait for on UM_AGAIN. They clear OpenSSL's per-thread
 * error queue, so an error on one connection never leaks into the next. OpenSSL writes to
 * the socket with write(2): the process must ignore SIGPIPE (um_server_run does). */
#ifndef UMBRA_TLS_H
#define UMBRA_TLS_H

#include <sys/types.h>

#include "umbra/common.h"
#include "umbra/transport.h"

#include "umbra/config.h"
#include "umbra/settings.h"

/* tls.protocols */
#define UM_TLS_PROTO_TLS12 1u
#define UM_TLS_PROTO_TLS13 2u

/* One certificate entry of tls = { { hosts = {...}, cert = "F", key = "F" }, ... }. */
struct um_tls_cert_conf {
    char **hosts;     /* lower case, "*.example.com" for a wildcard; unique over all entries */
    size_t num_hosts; /* >= 1 */
    char *cert;       /* PEM chain file: absolute, symlinks kept so that a reload follows a */
    char *key;        /* re-pointed link (certbot's live/); PEM key file, no passphrase */
    int line;         /* line of the entry */
    /* cert and key as written, and the lines of cert = and key =, for the messages of the
     * TLS module's check (um_tls_check_config). */
    char *cert_name, *key_name;
    int cert_line, key_line;
    /* acme = true: the certificate comes from the CA of tls.acme (src/tls/acme.c); cert
     * and key are then STORAGE/HOST.crt and STORAGE/HOST.key (HOST: the first of hosts),
     * which need not exist yet, and cert_name/key_name are NULL. */
    bool acme;
};

/* tls.acme challenge types (bits). */
#define UM_TLS_ACME_HTTP01 1u
#define UM_TLS_ACME_TLSALPN01 2u

/* tls.acme = { directory = "URL", email = "...", storage = "DIR", ca_file = "F",
 * renew_before = "30d", challenges = { "http-01", "tls-alpn-01" } }. */
struct um_tls_acme_conf {
    char *directory;     /* the CA's directory URL; NULL: no tls.acme */
    char *email;         /* contact; NULL: none */
    char *storage;       /* absolute, an existing directory */
    char *ca_file;       /* trust for the directory's own TLS; NULL: the system's */
    double renew_before; /* seconds before expiry; 0: a third of the lifetime */
    unsigned challenges; /* UM_TLS_ACME_* bits; http-01 by default */
    int line, storage_line;
};

/* tls = { entries..., protocols = {...}, ciphers = "...", ciphersuites = "...",
 * default = "host" }. The loader checks the settings and that the files exist; whether
 * they load, every key matches its cert and OpenSSL knows the ciphers is the TLS module's
 * check (um_tls_check_config), run before anything is bound. */
struct um_tls_conf {
    struct um_tls_cert_conf *certs;
    size_t num_certs;                    /* 0: no tls table (then no listener has tls) */
    unsigned protocols;                  /* UM_TLS_PROTO_* flags; both by default */
    char *ciphers;                       /* TLS 1.2 cipher list; NULL: the TLS module's default */
    char *ciphersuites;                  /* TLS 1.3 ciphersuites; NULL: OpenSSL's default */
    int ciphers_line, ciphersuites_line; /* where they are set, for messages */
    size_t default_cert; /* entry for names no entry lists and for clients without SNI */
    int line;            /* line of the tls setting */
    struct um_tls_acme_conf acme;
};

/* "30d", "12h", "90m", "45s" or a plain number of seconds, into *out (> 0); false when s
 * is not one of those. Pure. */
bool um_tls_parse_duration(const char *s, double *out);

/* The module's settings (umbra/settings.h): the global tls; its part of a snapshot:
 * um_tls_conf(c). */
extern const struct um_settings um_tls_settings;
/* Its record (src/tls/module.c): a runtime's state of it is its certificate store. */
extern const struct um_module um_tls_module;
static inline const struct um_tls_conf *um_tls_conf(const struct um_config *c)
{
    return um_config_part(c, &um_tls_settings);
}

struct um_tls;
/* OpenSSL's SSL, kept opaque: only src/tls/ includes OpenSSL's headers. */
struct ssl_st;

/* *want after UM_AGAIN: wait until the socket is readable / writable, then call again. */
#define UM_TLS_WANT_READ UM_TRANSPORT_WANT_READ
#define UM_TLS_WANT_WRITE UM_TRANSPORT_WANT_WRITE

/* Session ticket keys are replaced this often; the previous key still decrypts (and its
 * tickets are renewed), so a ticket stays usable for up to twice this long. */
#define UM_TLS_TICKET_ROTATE_SECONDS (12 * 3600)
/* Quiet time after the last change in a watched directory before certificates reload. */
#define UM_TLS_WATCH_DELAY_MS 150

/* --- the store ------------------------------------------------------------------------- */

/* Builds the store of cfg->tls (which must have at least one entry): loads every
 * certificate and key, generates ticket keys, and starts watching the certificates'
 * directories. The store copies what it needs: cfg may be released afterwards.
 * Returns NULL with "FILE: reason" in err (files were already checked by the config
 * loader, so this only fails if they changed in between or on resource exhaustion). */
struct um_tls *um_tls_create(const struct um_config *cfg, char *err, size_t errlen);

/* Another owner for t (a runtime that keeps the store of the one a reload replaces): it
 * calls um_tls_destroy too. Main thread. */
void um_tls_hold(struct um_tls *t);

/* Drops the caller's ownership; the last owner's closes the watch descriptor and drops
 * the owners' reference: the store is freed when the last SSL made from it is freed. NULL
 * is a no-op. Main thread. */
void um_tls_destroy(struct um_tls *t);

/* A server-side SSL for the accepted, non-blocking socket fd, in accept state; SNI picks
 * its certificate during the handshake. The caller owns it: SSL_free it (it does not
 * close fd). Returns NULL on allocation failure (logged). Any thread. */
struct ssl_st *um_tls_accept_new(struct um_tls *t, int fd);

/* The TLS transport (transport.h) over a new SSL from um_tls_accept_new: it owns fd from
 * now on (its close op closes fd and frees the SSL and itself; its shutdown op sends
 * close_notify). It has no writev and no sendfile. Returns NULL on allocation failure
 * (logged; fd is then still the caller's). Any thread. */
struct um_transport *um_tls_transport_new(struct um_tls *t, int fd);
/* Offers only ALPN "http/1.1" on transport t (made by um_tls_transport_new, before its
 * handshake): its listener has http2 = false. By default "h2" is offered first. */
void um_tls_transport_h1_only(struct um_transport *t);
/* The same for an SSL from um_tls_accept_new. */
void um_tls_set_h1_only(struct ssl_st *ssl);

/* The client side: the TLS settings of the connections to one upstream's https://
 * servers. verify: check the server's certificate against ca_file (NULL: the system's
 * store) and its name. Returns NULL with a reason in err. Made and destroyed on the main
 * thread; used by any. */
struct um_tls_client;
struct um_tls_client *um_tls_client_create(bool verify, const char *ca_file, char *err,
                                           size_t errlen);
void um_tls_client_destroy(struct um_tls_client *c); /* NULL: nothing */
/* A TLS transport (transport.h) over the socket fd, connected or connecting to host (an
 * IP address, which the certificate must name; or a name, sent as SNI and checked): its
 * handshake op must complete before reads and writes; it owns fd once made (its close
 * closes fd and frees it). NULL on allocation failure (fd stays the caller's). Any
 * thread. */
struct um_transport *um_tls_client_transport_new(struct um_tls_client *c, int fd,
                                                 const char *host);
/* The same, offering only "h2" by ALPN (an upstream with protocol = "h2"). */
struct um_transport *um_tls_client_transport_new_h2(struct um_tls_client *c, int fd,
                                                    const char *host);
/* After a completed handshake of such a transport: the server chose "h2". */
bool um_tls_client_is_h2(struct um_transport *t);
/* After a failed handshake of such a transport: the server's certificate did not verify. */
bool um_tls_client_verify_failed(struct um_transport *t);

/* Reloads every entry's certificate and key from their files (HUP). An entry whose new
 * files fail to load keeps its current certificate; the failure is logged as
 * "FILE: reason" and the first one is written to err (may be NULL; set to "" when all
 * loaded). Handshakes running on other threads are unaffected: they keep the context they
 * started with. Returns the number of entries reloaded. Main thread. */
int um_tls_reload(struct um_tls *t, char *err, size_t errlen);

/* A descriptor that becomes readable when a certificate or key file may have changed
 * (an inotify watch on the files' directories, so that files replaced by rename, renewed
 * symlinks such as certbot's live/ and Kubernetes' ..data swaps are seen), or when the
 * debounce delay of a change has passed. Poll it for reading in the main loop and call
 * um_tls_on_watch when it is. Owned by the store; -1 if watching could not be set up
 * (logged: certificates then reload on um_tls_reload only). */
int um_tls_watch_fd(struct um_tls *t);

/* Handles readiness of um_tls_watch_fd: drains change events and, UM_TLS_WATCH_DELAY_MS
 * after the last one (at most a second after the first), reloads the entries whose cert
 * or key file changed (by device, inode, size and times), so that a key and its
 * certificate written one after the other reload once, together. Failures are logged and
 * keep the old certificate, as with um_tls_reload. Returns
 * the number of entries reloaded by this call (usually 0). Never blocks. Main thread. */
int um_tls_on_watch(struct um_tls *t);

/* Starts a new ticket key now; the current one is kept for decryption only, the one
 * before it is forgotten. Keys also rotate by themselves every
 * UM_TLS_TICKET_ROTATE_SECONDS, checked when a ticket is issued; call this from a timer
 * for rotation on an idle server. Thread-safe. */
void um_tls_rotate_tickets(struct um_tls *t);

/* Copies the ticket keys of from into to, so that sessions resume across a config reload
 * that builds a new store. Thread-safe. */
void um_tls_inherit_tickets(struct um_tls *to, struct um_tls *from);

/* --- ACME (src/tls/acme*.c) -------------------------------------------------------------- */

/* The http-01 answer (the key authorization, RFC 8555 section 8.3) for the token of a
 * request to /.well-known/acme-challenge/TOKEN on a plain listener, copied into out (at
 * most len bytes, *n set): true when t's ACME client has published that token. t may be
 * NULL (false). Any thread; takes a read lock for the copy. */
bool um_tls_acme_http01(struct um_tls *t, um_str token, char *out, size_t len, size_t *n);

/* t (new) replaces old at a reload: t holds old until t's ACME client begins, which
 * first stops old's, so that one client at a time orders; a reload refused drops t and
 * old's client runs on. Main thread. */
void um_tls_acme_replaces(struct um_tls *t, struct um_tls *old);
/* Starts t's ACME client, if it has one, once: when t's runtime runs (the server's first
 * poll of its watch descriptor), never for `umbra -t` or a refused reload. Main thread. */
void um_tls_acme_begin(struct um_tls *t);

/* The ACME clients' /metrics lines (orders, failures, days until expiry by name) into b. */
struct um_buf;
void um_tls_acme_metrics(struct um_buf *b);
/* The TLS module's /status.json member: the names of the acme entries with their expiry. */
void um_tls_acme_status(struct um_buf *b);
/* The process-wide list of running ACME clients: what the server hands um_module_run for
 * the TLS module (its renderers read the list, under its own lock). */
void *um_tls_acme_registry(void);

/* The path prefix of http-01 requests. */
#define UM_TLS_ACME_HTTP01_PREFIX "/.well-known/acme-challenge/"

/* --- connections (any thread, on the SSL of that connection) ---------------------------- */

/* Advances the handshake. UM_OK when it is complete, UM_AGAIN with *want set, UM_ERR
 * (see um_tls_error; then close without um_tls_shutdown). */
int um_tls_handshake(struct ssl_st *ssl, int *want);

/* Reads decrypted bytes into buf (len > 0): > 0 bytes read, 0 when the peer closed (close_notify, or
 * a plain EOF: HTTP framing detects a truncated message), UM_AGAIN with *want set, or
 * UM_ERR. A record already read from the socket may be held inside the SSL: with
 * edge-triggered polling, read until UM_AGAIN (or check um_tls_pending). */
ssize_t um_tls_read(struct ssl_st *ssl, void *buf, size_t len, int *want);

/* Writes up to len bytes (partial writes allowed): > 0 bytes written, UM_AGAIN with *want
 * set, or UM_ERR. After UM_AGAIN, call again with the same bytes (the buffer may move, it
 * may be longer). len 0 returns 0. */
ssize_t um_tls_write(struct ssl_st *ssl, const void *buf, size_t len, int *want);

/* Sends close_notify without waiting for the peer's: UM_OK (sent, or nothing to send
 * because the handshake never finished), UM_AGAIN with *want set, or UM_ERR (just close). */
int um_tls_shutdown(struct ssl_st *ssl, int *want);

/* Decrypted bytes held inside ssl, readable without the socket becoming readable. */
size_t um_tls_pending(struct ssl_st *ssl);

/* A short reason for the last UM_ERR the functions above returned for ssl, e.g. "wrong
 * version number" or "connection reset by peer"; "" when there was none. Kept with ssl:
 * valid until the next call of one of them on ssl, or SSL_free. The caller logs it with
 * the peer's address. */
const char *um_tls_error(struct ssl_st *ssl);

/* The SNI host name the client sent, or NULL. Lives as long as ssl. */
const char *um_tls_server_name(struct ssl_st *ssl);

/* The ALPN protocol selected ("h2", "http/1.1"), or an empty slice. Lives as long as ssl. */
um_str um_tls_alpn(struct ssl_st *ssl);

/* --- checks of a loaded config ---------------------------------------------------------- */

/* What OpenSSL thinks of c's tls table, after um_config_load and before anything is bound
 * (umbra's start, umbra -t and a reload run it): every certificate entry's files load and
 * the key matches the certificate (entries in order), then the cipher list, then the
 * ciphersuites. Returns false with "FILE:LINE: tls.N.cert: NAME: reason" (or tls.N.key,
 * tls.ciphers, tls.ciphersuites), at the line of the setting at fault as the loader
 * recorded it, in err. True for a config without certificates. */
bool um_tls_check_config(const struct um_config *c, char *err, size_t errlen);

enum um_tls_fault {
    UM_TLS_FAULT_NONE,     /* cert and key load and match */
    UM_TLS_FAULT_CERT,     /* the certificate chain file */
    UM_TLS_FAULT_KEY,      /* the key file (unreadable, not a key, encrypted) */
    UM_TLS_FAULT_MISMATCH, /* the key is not the certificate's */
};

/* Loads a PEM certificate chain and a PEM key (no passphrase) as the store would; on a
 * failure writes a short reason into reason. */
enum um_tls_fault um_tls_check_pair(const char *cert, const char *key, char *reason,
                                    size_t len);

/* Checks a TLS 1.2 cipher list (tls13 false) or a TLS 1.3 ciphersuite list (tls13 true):
 * every name in it must be known to OpenSSL; "!X", "-X", "+X" and "@X" elements are
 * operators and not checked one by one. false with a reason otherwise. */
bool um_tls_check_ciphers(const char *list, bool tls13, char *reason, size_t len);

/* Counts a handshake with a client that completed (ok) or failed or timed out, in the
 * calling thread's counters (the module's umbra_tls_handshake* metrics). */
void um_tls_count_handshake(bool ok);

/* The TLS library's name and version as loaded ("OpenSSL 3.0.x ..."): static text. */
const char *um_tls_library_version(void);

#endif
