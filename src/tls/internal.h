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

#endif
