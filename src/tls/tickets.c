/* SPDX-License-Identifier: BSD-2-Clause */
/* The TLS store's session tickets: the keys, their rotation, and resumption under the name a ticket was made for. */
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
SSL_TICKET_RETURN um__tls_on_ticket(SSL *ssl, SSL_SESSION *ss, const unsigned char *keyname,
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

bool um__tls_ticket_key_new(struct ticket_key *k)
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
    if (!um__tls_ticket_key_new(&k)) {
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

int um__tls_on_ticket_key(SSL *ssl, unsigned char key_name[16], unsigned char *iv,
                         EVP_CIPHER_CTX *cctx, EVP_MAC_CTX *hctx, int enc)
{
    struct um_tls *t = SSL_get_ex_data(ssl, um__tls_ssl_index);
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
