/* SPDX-License-Identifier: BSD-2-Clause */
/* An upstream connection's socket, for both clients (HTTP/1.1 and HTTP/2): send, recv and
 * close, plain or through TLS. Apart from h1_wire.c so the h2 client does not pull the
 * HTTP/1.1 client in with it. */
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

ssize_t um__up_io_send(struct um_transport *tls, int fd, const void *p, size_t n)
{
    if (tls == NULL) return send(fd, p, n, MSG_NOSIGNAL);
    int want = 0;
    ssize_t r = tls->ops->write(tls, p, n, 0, &want);
    if (r >= 0) return r;
    errno = r == UM_AGAIN ? EAGAIN : EPIPE;
    return -1;
}

ssize_t um__up_io_recv(struct um_transport *tls, int fd, void *p, size_t n)
{
    if (tls == NULL) return recv(fd, p, n, 0);
    int want = 0;
    ssize_t r = tls->ops->read(tls, p, n, &want);
    if (r >= 0) return r;
    errno = r == UM_AGAIN ? EAGAIN : ECONNRESET;
    return -1;
}

void um__up_sock_close(struct um_loop *l, struct um_io *io, struct um_transport **tls)
{
    if (io->fd < 0) return;
    /* Out of the epoll set first: close() alone does not take it out while a copy of the
     * descriptor lives on (in a child being spawned by another thread, until its exec). */
    um_loop_io_set(l, io, io->fd, 0);
    if (*tls)
        (*tls)->ops->close(*tls); /* the socket too */
    else
        close(io->fd);
    *tls = NULL;
    io->fd = -1;
}
