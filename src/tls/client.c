/* SPDX-License-Identifier: BSD-2-Clause */
/* The client side of TLS (tls.h's um_tls_client_*): a context per upstream whose servers
 * speak https, and a transport per connection to one of them, the same table as a
 * client connection's (transport.c) in connect state. Umbra's own HTTP/1.1 client uses it
 * for the upgrade requests it carries to https:// servers, so that the socket and its TLS
 * session can be handed to a tunnel as one transport.
 *
 * Why not libcurl with CURLOPT_CONNECT_ONLY and curl_easy_send/recv: libcurl would then
 * only connect, and the upgrade request, its answer (a 101, or any other response with
 * its body framing) would have to be written and read a second time beside h1.c, which
 * does all of that already; and the easy handle, its connection cache entry and the
 * multi handle's socket callbacks would have to live as long as the tunnel, every byte
 * crossing curl_easy_send/recv. A transport of our own is the same table as a TLS client
 * connection's, so the tunnel moves bytes the same way on both sides. What this costs:
 * only servers at an IP address (h1.c connects to an address; libcurl resolves names),
 * so an upgrade to an https:// server named by host name is refused (501). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "internal.h"
#include "umbra/tls.h"

struct um_tls_client {
    SSL_CTX *ctx;
};

struct um_tls_client *um_tls_client_create(bool verify, const char *ca_file, char *err,
                                           size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL)
        goto fail;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    /* A server that closes without close_notify ends the stream (as a tunnel's backend
     * often does), instead of failing the read. */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* HTTP/1.1 only: an upgrade does not exist in HTTP/2. */
    static const unsigned char alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn));
    if (verify) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        int ok = ca_file ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL)
                         : SSL_CTX_set_default_verify_paths(ctx);
        if (ok != 1)
            goto fail;
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    struct um_tls_client *c = um_calloc(1, sizeof(*c));
    c->ctx = ctx;
    return c;
fail:
    um__tls_describe(ERR_peek_error(), err, errlen);
    ERR_clear_error();
    SSL_CTX_free(ctx);
    return NULL;
}

void um_tls_client_destroy(struct um_tls_client *c)
{
    if (c == NULL)
        return;
    SSL_CTX_free(c->ctx);
    free(c);
}

static struct um_transport *transport_new(struct um_tls_client *c, int fd, const char *host,
                                          bool h2)
{
    SSL *ssl = SSL_new(c->ctx);
    if (ssl == NULL || SSL_set_fd(ssl, fd) != 1)
        goto fail;
    static const unsigned char alpn_h2[] = {2, 'h', '2'};
    if (h2 && SSL_set_alpn_protos(ssl, alpn_h2, sizeof(alpn_h2)) != 0)
        goto fail;
    SSL_set_connect_state(ssl);
    unsigned char ip[16];
    bool is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    if (is_ip) {
        /* No SNI for an address (RFC 6066 section 3); the certificate must name it. */
        if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1)
            goto fail;
    } else if (SSL_set_tlsext_host_name(ssl, host) != 1 || SSL_set1_host(ssl, host) != 1) {
        goto fail;
    }
    return um__tls_transport_wrap(ssl, fd);
fail:
    ERR_clear_error();
    SSL_free(ssl);
    return NULL;
}

struct um_transport *um_tls_client_transport_new(struct um_tls_client *c, int fd,
                                                 const char *host)
{
    return transport_new(c, fd, host, false);
}

struct um_transport *um_tls_client_transport_new_h2(struct um_tls_client *c, int fd,
                                                    const char *host)
{
    return transport_new(c, fd, host, true);
}

bool um_tls_client_is_h2(struct um_transport *t)
{
    const unsigned char *p = NULL;
    unsigned len = 0;
    SSL_get0_alpn_selected(um__tls_transport_ssl(t), &p, &len);
    return len == 2 && memcmp(p, "h2", 2) == 0;
}

bool um_tls_client_verify_failed(struct um_transport *t)
{
    SSL *ssl = um__tls_transport_ssl(t);
    return SSL_get_verify_result(ssl) != X509_V_OK;
}
