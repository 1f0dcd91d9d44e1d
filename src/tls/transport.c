/* SPDX-License-Identifier: BSD-2-Clause */
/* A TLS connection's non-blocking I/O (tls.h's um_tls_handshake ... um_tls_alpn) and the
 * TLS transport (transport.h) built on it, so that the connection code sees a table of
 * functions and never an SSL.
 *
 * The transport has no writev and no sendfile: OpenSSL encrypts from memory, one record
 * at a time, so its user writes each buffer in turn and reads file bytes into memory
 * first. A read that returns bytes asks to be called again (*want 0): OpenSSL may hold
 * decrypted bytes, or read ahead a record, that the socket will not announce. */
#include "umbra/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "internal.h"

/* --- errors ---------------------------------------------------------------------------- */

/* The buffer for ssl's last error, made on its first error; NULL when there is no room. */
static char *error_buf(SSL *ssl)
{
    int error_index = um__tls_error_index();
    if (error_index < 0)
        return NULL;
    char *buf = SSL_get_ex_data(ssl, error_index);
    if (buf == NULL) {
        buf = malloc(UM__TLS_ERROR_LEN);
        if (buf == NULL)
            return NULL;
        if (SSL_set_ex_data(ssl, error_index, buf) != 1) {
            free(buf);
            return NULL;
        }
    }
    return buf;
}

/* Records why an SSL call with result ret failed, with ssl (um_tls_error); returns
 * UM_ERR. */
static int io_error(SSL *ssl, int ret, int saved_errno)
{
    int err = SSL_get_error(ssl, ret);
    unsigned long e = ERR_peek_error();
    char *buf = error_buf(ssl);
    if (buf == NULL)
        ;
    else if (err == SSL_ERROR_SYSCALL && e == 0)
        snprintf(buf, UM__TLS_ERROR_LEN, "%s",
                 saved_errno != 0 ? strerror(saved_errno) : "connection closed by the peer");
    else if (err == SSL_ERROR_ZERO_RETURN)
        snprintf(buf, UM__TLS_ERROR_LEN, "connection closed by the peer");
    else
        um__tls_describe(e, buf, UM__TLS_ERROR_LEN);
    ERR_clear_error();
    return UM_ERR;
}

/* Maps the result of a failed SSL call to UM_AGAIN (+want) or UM_ERR. */
static int io_result(SSL *ssl, int ret, int saved_errno, int *want)
{
    switch (SSL_get_error(ssl, ret)) {
    case SSL_ERROR_WANT_READ:
        *want = UM_TLS_WANT_READ;
        return UM_AGAIN;
    case SSL_ERROR_WANT_WRITE:
        *want = UM_TLS_WANT_WRITE;
        return UM_AGAIN;
    default:
        return io_error(ssl, ret, saved_errno);
    }
}

/* --- a connection's I/O ---------------------------------------------------------------- */

int um_tls_handshake(SSL *ssl, int *want)
{
    ERR_clear_error();
    errno = 0;
    int r = SSL_do_handshake(ssl);
    if (r == 1)
        return UM_OK;
    return io_result(ssl, r, errno, want);
}

ssize_t um_tls_read(SSL *ssl, void *buf, size_t len, int *want)
{
    size_t n = 0;
    UM_ASSERT(len > 0); /* 0 would be taken for the end of the stream */
    ERR_clear_error();
    errno = 0;
    if (SSL_read_ex(ssl, buf, len, &n) == 1)
        return (ssize_t)n;
    int saved = errno;
    if (SSL_get_error(ssl, 0) == SSL_ERROR_ZERO_RETURN)
        return 0;
    return io_result(ssl, 0, saved, want);
}

ssize_t um_tls_write(SSL *ssl, const void *buf, size_t len, int *want)
{
    size_t n = 0;
    if (len == 0)
        return 0;
    ERR_clear_error();
    errno = 0;
    if (SSL_write_ex(ssl, buf, len, &n) == 1)
        return (ssize_t)n;
    return io_result(ssl, 0, errno, want);
}

int um_tls_shutdown(SSL *ssl, int *want)
{
    if (!SSL_is_init_finished(ssl))
        return UM_OK;
    ERR_clear_error();
    errno = 0;
    int r = SSL_shutdown(ssl);
    if (r >= 0)
        return UM_OK;
    return io_result(ssl, r, errno, want);
}

size_t um_tls_pending(SSL *ssl)
{
    int n = SSL_pending(ssl);
    return n > 0 ? (size_t)n : 0;
}

const char *um_tls_error(SSL *ssl)
{
    int error_index = um__tls_error_index();
    const char *buf = error_index >= 0 ? SSL_get_ex_data(ssl, error_index) : NULL;
    return buf ? buf : "";
}

const char *um_tls_server_name(SSL *ssl)
{
    return SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
}

um_str um_tls_alpn(SSL *ssl)
{
    const unsigned char *p = NULL;
    unsigned int n = 0;
    SSL_get0_alpn_selected(ssl, &p, &n);
    return (um_str){(const char *)p, p != NULL ? n : 0};
}

/* --- the transport --------------------------------------------------------------------- */

struct tls_transport {
    struct um_transport base; /* first */
    SSL *ssl;
};

static SSL *ssl_of(struct um_transport *t)
{
    return ((struct tls_transport *)(void *)t)->ssl;
}

static int tt_handshake(struct um_transport *t, int *want)
{
    return um_tls_handshake(ssl_of(t), want);
}

static ssize_t tt_read(struct um_transport *t, void *buf, size_t len, int *want)
{
    ssize_t n = um_tls_read(ssl_of(t), buf, len, want);
    if (n > 0)
        *want = 0;
    return n;
}

static ssize_t tt_write(struct um_transport *t, const void *buf, size_t len, unsigned flags,
                        int *want)
{
    (void)flags;
    return um_tls_write(ssl_of(t), buf, len, want);
}

static int tt_shutdown(struct um_transport *t, int *want)
{
    return um_tls_shutdown(ssl_of(t), want);
}

static void tt_close(struct um_transport *t)
{
    SSL_free(ssl_of(t));
    close(t->fd);
    free(t);
}

static const char *tt_error(struct um_transport *t)
{
    return um_tls_error(ssl_of(t));
}

static const char *tt_server_name(struct um_transport *t)
{
    return um_tls_server_name(ssl_of(t));
}

static um_str tt_alpn(struct um_transport *t)
{
    return um_tls_alpn(ssl_of(t));
}

void um_tls_set_h1_only(SSL *ssl)
{
    SSL_set_app_data(ssl, (void *)1); /* read by the ALPN callback (tls.c) */
}

void um_tls_transport_h1_only(struct um_transport *t)
{
    um_tls_set_h1_only(ssl_of(t));
}

static const struct um_transport_ops tls_ops = {
    .secure = true,
    .handshake = tt_handshake,
    .read = tt_read,
    .write = tt_write,
    .writev = NULL,
    .sendfile = NULL,
    .shutdown = tt_shutdown,
    .close = tt_close,
    .error = tt_error,
    .server_name = tt_server_name,
    .alpn = tt_alpn,
};

struct um_transport *um__tls_transport_wrap(SSL *ssl, int fd)
{
    struct tls_transport *tt = um_malloc(sizeof(*tt));
    tt->base.ops = &tls_ops;
    tt->base.fd = fd;
    tt->ssl = ssl;
    return &tt->base;
}

SSL *um__tls_transport_ssl(struct um_transport *t)
{
    return ssl_of(t);
}

struct um_transport *um_tls_transport_new(struct um_tls *t, int fd)
{
    SSL *ssl = um_tls_accept_new(t, fd);
    if (ssl == NULL)
        return NULL;
    return um__tls_transport_wrap(ssl, fd);
}
