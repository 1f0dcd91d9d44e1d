/* SPDX-License-Identifier: BSD-2-Clause */
/* A transport: how a connection moves bytes over its socket, as a small table of
 * functions (Redis's ConnectionType, nginx's recv/send hooks). Two kinds: plain sockets
 * (src/loop/transport.c) and TLS (src/tls/transport.c, um_tls_transport_new in tls.h).
 * The connection code above only ever calls this table, so it never sees OpenSSL.
 *
 * Every I/O function follows common.h's convention: a count (> 0), or UM_AGAIN with *want
 * set to the readiness to wait for before calling again, or UM_ERR (the connection is
 * dead: close it). *want is also how a read says that the socket is drained: a read that
 * returns bytes sets *want to UM_TRANSPORT_WANT_READ when the next bytes will raise a new
 * edge-triggered event, and to 0 when it must be called again before waiting (a TLS
 * transport may hold decrypted bytes the socket will not announce).
 *
 * A write after UM_AGAIN (or after a partial write) must offer the bytes not written
 * again, first; the buffer may move, and it may be longer, never shorter (TLS retries a
 * record it began).
 *
 * Threads: a transport belongs to the thread of its connection. The process ignores
 * SIGPIPE (um_server_run does), as OpenSSL writes with write(2). */
#ifndef UMBRA_TRANSPORT_H
#define UMBRA_TRANSPORT_H

#include <sys/types.h>
#include <sys/uio.h>

#include "umbra/common.h"

/* *want after UM_AGAIN, or after a read: wait until the socket is readable / writable. */
#define UM_TRANSPORT_WANT_READ 1
#define UM_TRANSPORT_WANT_WRITE 2

/* write's flags: more bytes follow at once (plain sockets: MSG_MORE, so that a head and
 * the body after it leave in one segment). */
#define UM_TRANSPORT_F_MORE 0x1

struct um_transport;

struct um_transport_ops {
    /* The transport encrypts: the request came over https. */
    bool secure;
    /* Advances a handshake: UM_OK when it is complete, UM_AGAIN with *want, UM_ERR (see
     * error; then close without shutdown). NULL: there is none, the transport is ready. */
    int (*handshake)(struct um_transport *t, int *want);
    /* Reads into buf (len > 0): > 0 bytes (with *want as above), 0 when the peer closed,
     * UM_AGAIN, UM_ERR. */
    ssize_t (*read)(struct um_transport *t, void *buf, size_t len, int *want);
    /* Writes up to len bytes (len > 0; partial writes allowed): > 0 bytes, UM_AGAIN,
     * UM_ERR. flags: UM_TRANSPORT_F_*, hints a transport may ignore. */
    ssize_t (*write)(struct um_transport *t, const void *buf, size_t len, unsigned flags,
                     int *want);
    /* Gathers iovcnt buffers into one write, as write does. NULL together with sendfile:
     * the transport copies what it sends (TLS), so its caller writes each buffer in turn
     * and reads files into memory. */
    ssize_t (*writev)(struct um_transport *t, const struct iovec *iov, int iovcnt, int *want);
    /* Sends len bytes of file fd from *off, advancing *off: > 0 bytes, 0 when the file
     * has fewer bytes than that (it shrank), UM_AGAIN, UM_ERR. NULL: see writev. */
    ssize_t (*sendfile)(struct um_transport *t, int fd, uint64_t *off, size_t len, int *want);
    /* Says goodbye at the transport's level before a close, best effort and never
     * waiting (TLS: close_notify, after a completed handshake): UM_OK, UM_AGAIN, UM_ERR.
     * NULL: nothing to say (a plain socket's FIN comes with the close). */
    int (*shutdown)(struct um_transport *t, int *want);
    /* Closes the socket and frees the transport; t is gone afterwards. */
    void (*close)(struct um_transport *t);
    /* A short reason for the last UM_ERR, for a log line ("" when there is none); valid
     * until the next call on t. */
    const char *(*error)(struct um_transport *t);
    /* The host name the client asked for (TLS SNI), or NULL; lives as long as t. */
    const char *(*server_name)(struct um_transport *t);
    /* The ALPN protocol the handshake agreed on ("h2", "http/1.1"), or an empty slice;
     * lives as long as t. NULL: no ALPN (a plain socket). */
    um_str (*alpn)(struct um_transport *t);
};

/* Embed it or allocate it; ops and fd are set by the kind's constructor. */
struct um_transport {
    const struct um_transport_ops *ops;
    int fd; /* the socket; owned by the transport (close closes it) */
};

/* Makes t a plain transport over the connected, non-blocking socket fd, which it owns
 * from now on. t is the caller's (embedded, not allocated): close does not free it. */
void um_transport_plain_init(struct um_transport *t, int fd);

/* A plain transport over fd like um_transport_plain_init, allocated: its close closes fd
 * and frees it (for a socket handed from one owner to another, as a tunnel's backend). */
struct um_transport *um_transport_plain_new(int fd);

#endif
