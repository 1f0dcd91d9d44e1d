/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the TLS module share (tls.c: the store; transport.c: a connection's
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

#endif
